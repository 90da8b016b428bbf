"""Profile HMM files read one model at a time, each checked before anything is searched with it.

What is read
------------
HMMER 3 profile files as hmmsearch and hmmscan take them: text (plain or gzip), HMMER's
binary format, a database pressed by ``hmmpress`` (the models are then read from the
``.h3m`` file, as HMMER does), and ``-`` for standard input. :func:`read_models` yields one
:class:`Model` at a time, so that a 20,000-model Pfam-A file is never held in memory; each
carries the pyhmmer ``HMM``, its 0-based position in the file and its MSV location
parameter ``mmu`` (``STATS LOCAL MSV``, which pyhmmer 0.12.3's ``EvalueParameters.m_mu``
cannot return: it is read from ``EvalueParameters.as_vector()``, HMMER's ``evparam``
array, for every kind of file).

Why the text is split here
--------------------------
HMMER's reader (which pyhmmer runs) forgives too much. A file cut inside the first lines
of a model, or just before its closing ``//``, reads as a shorter file with no error, and
hmmsearch then reports an incomplete search as ``[ok]``. So text files are split into
records here, at the ``//`` lines: every record must end with ``//`` and give exactly one
model, and nothing but white space may follow the last one. Each record is then parsed by
pyhmmer on its own.

Why the values are checked
--------------------------
HMMER reads each probability as ``expf(-atof(field))``: ``nan`` becomes NaN (hmmsearch
then stops in Forward with "forward score is NaN"), a negative number becomes a
probability above 1, and a word becomes probability 1; hmmsearch searches the last two
without a word. :func:`check_model` rejects, with one line naming the file and the model,
anything that is not a calibrated protein model with probabilities in [0, 1] whose
distributions sum to 1 (within 1e-3; hmmbuild's five decimals stay within 1e-4).
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import struct
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterator

from hmmgpu.errors import HmmgpuError, InputError, one_line
from hmmgpu.formats.inputs import byte_chunks, check_readable, label_of, read_bytes

#: How far a probability distribution may sum from 1.
SUM_TOLERANCE = 1e-3
#: Threads that parse text records at most (one per two cores up to this), and how many parsed
#: models may wait for the caller per thread. On 16 cores a search of a small database
#: takes models faster than two threads parse them (600 Pfam models: 0.35 s).
MAX_PARSE_THREADS, READ_AHEAD_PER_THREAD = 8, 4


@dataclass(frozen=True, slots=True)
class Model:
    """One model of a profile file."""

    hmm: object        #: the pyhmmer ``HMM``
    index: int         #: 0-based position in the file
    mmu: float         #: MSV location parameter (STATS LOCAL MSV mu), a float32 value


def read_models(source="-") -> Iterator[Model]:
    """Yield the checked models of a profile file, one at a time, in file order.

    ``source``: a path (text, gzip, binary, or an ``hmmpress``-ed database) or ``"-"`` for
    standard input. Every fault is a one-line :class:`~hmmgpu.errors.HmmgpuError` that
    names the file and, past the file's header, the model.
    """
    label, records = model_records(source)
    count = 0
    for model in _parsed_in_order(records, label):
        count += 1
        yield model
    if count == 0:
        raise no_models(label)


def no_models(label: str) -> HmmgpuError:
    """The error of a profile file that holds no model."""
    return InputError(f"{label}: contains no profile HMMs")


def model_records(source="-") -> tuple[str, Iterator[tuple[int, bytes]]]:
    """The name errors give the source by, and each model's number (from 1) and record (its
    text up to its ``//`` line, or its binary form), in file order, each checked as far as
    it can be before it is parsed (:func:`parse_record` parses and checks the rest)."""
    label = label_of(source)
    path = os.fspath(source)
    if path != "-":
        if os.path.exists(path + ".h3m"):   # pressed: HMMER reads the models from the .h3m file
            check_pressed(path)
            return f"{label}.h3m", _binary_records(read_bytes(path + ".h3m"), f"{label}.h3m")
        check_readable(path, "an HMM file")
    return label, _file_records(source, label)


#: The files ``hmmpress`` writes beside the HMM file ``NAME``: ``NAME.h3m`` (the models,
#: binary), ``NAME.h3i`` (their index), ``NAME.h3f`` and ``NAME.h3p`` (the optimized profiles).
PRESSED_SUFFIXES = (".h3m", ".h3i", ".h3f", ".h3p")


def check_pressed(path: str) -> None:
    """A pressed database is found by its base name, as HMMER finds it (``p7_hmmfile_Open``):
    ``path`` itself may be gone, but every file ``hmmpress`` wrote beside it must be there."""
    for suffix in PRESSED_SUFFIXES:
        check_readable(path + suffix, "a pressed HMM file")


def looks_like_hmm_file(path: str) -> bool:
    """Whether ``path`` (not standard input) is a profile HMM file at first sight: pressed,
    or starting as HMMER's text or binary format does, plain or gzip. Only for hints: the
    reader itself checks every model. A stream (a pipe, ``/dev/stdin``) is not looked into:
    its bytes can be read only once."""
    if path == "-":
        return False
    if os.path.exists(path + ".h3m"):
        return True
    if not os.path.isfile(path):
        return False
    try:
        with contextlib.closing(byte_chunks(path, "an HMM file")) as chunks:
            head = next(chunks, b"")
    except HmmgpuError:
        return False
    return head.lstrip()[:5] == b"HMMER" or (len(head) >= 4 and struct.unpack_from("<I", head)[0] in _MAGIC)


def _file_records(source, label: str) -> Iterator[tuple[int, bytes]]:
    chunks = byte_chunks(source, "an HMM file")
    head = b""
    for chunk in chunks:
        head += chunk
        if head.strip():
            break
    if not head.strip():
        raise InputError(f"{label}: HMM file is empty")
    if head.lstrip()[:5] == b"HMMER":
        yield from _records(_chain(head, chunks), label)
    else:
        yield from _binary_records(head + b"".join(chunks), label)


def _chain(head: bytes, rest: Iterator[bytes], tail: bytes = b"") -> Iterator[bytes]:
    yield head
    yield from rest
    yield tail


def _shown(raw: bytes) -> str:
    return raw.decode("utf-8", "backslashreplace")


def _parsed_in_order(records: Iterator[tuple[int, bytes]], label: str) -> Iterator[Model]:
    """Parse checked records with pyhmmer and check the models, in order.

    Records are parsed and their models checked by a thread per two cores (up to
    :data:`MAX_PARSE_THREADS`) a few records ahead of the caller (pyhmmer parses without the
    GIL): two threads read a 600-model Pfam file about 1.5 times faster than one, and at most
    :data:`READ_AHEAD_PER_THREAD` parsed models per thread are ever waiting. The thread that
    splits the file keeps only the splitting: with Pfam-A's 20,000 models against a proteome
    on sixteen cores, that thread set the pace of the whole search when it checked the models
    too. On fewer than four cores the caller's thread parses each record itself: the hand-offs
    to and from parsing threads cost more there than they save (600 Pfam models against the
    2,100-protein proteome on two cores: 2.62 s against 2.65 s, median of 9, with half the
    context switches).
    """
    from hmmgpu.host import usable_cores

    threads = min(MAX_PARSE_THREADS, usable_cores() // 2)
    if threads < 2:   # parsed in the caller's thread, with no hand-off per model
        for number, record in records:
            yield parse_record(record, label, number)
        return
    read_ahead = READ_AHEAD_PER_THREAD * threads
    with ThreadPoolExecutor(threads) as pool:
        pending: deque = deque()
        while True:
            try:
                number, record = next(records)
            except StopIteration:
                break
            except HmmgpuError:   # models before a fault in the file still come first, in order
                while pending:
                    yield pending.popleft().result()
                raise
            pending.append(pool.submit(parse_record, record, label, number))
            if len(pending) > read_ahead:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _records(chunks: Iterator[bytes], label: str) -> Iterator[tuple[int, bytes]]:
    """Each model's number (from 1) and text, up to and including its ``//`` line."""
    number = 0
    for buffer, start, end in _record_spans(chunks):
        if end is None:
            if buffer.strip():
                raise InputError(f"{label}: model {number + 1}{_record_name(buffer)}: truncated "
                                  "(the file ends before its closing //)")
            return
        record = buffer[start:end]
        if record and not record.isspace():
            number += 1
            yield number, record


def _record_spans(chunks: Iterator[bytes]) -> Iterator[tuple[bytes, int, int | None]]:
    """Where the text of ``chunks`` is cut into records, at its ``//`` lines: each record as
    ``(buffer, start, end)``, its bytes being ``buffer[start:end]`` (not copied here), and
    last the text after the last ``//`` line as ``(rest, 0, None)``."""
    buffer = b""
    for chunk in _chain(b"", chunks, b"\n"):   # a last "//" may lack its newline
        buffer += chunk
        start = 0
        while (end := _record_end(buffer, start)) is not None:
            yield buffer, start, end
            start = end
        buffer = buffer[start:]
    yield buffer, 0, None


# HMMER's binary format (p7_hmmfile.c, write_bin30hmm()): per model, a magic number naming
# the format version, then flags, M and the alphabet type as native ints, the probability
# arrays, length-prefixed strings and optional annotation arrays chosen by the flags.
_MAGIC = {0xe8ededb6: "3/a", 0xe8ededb7: "3/b", 0xe8ededb8: "3/c", 0xe8ededb9: "3/d", 0xe8ededb0: "3/e",
          0xe8ededba: "3/f"}
_ALPHABET_K = {1: 4, 2: 4, 3: 20, 4: 2, 5: 6}   # eslRNA, eslDNA, eslAMINO, eslCOINS, eslDICE
_ACC, _DESC, _RF, _CS, _MAP, _CA, _COMPO, _CONS, _MMASK = (1 << 9, 1 << 1, 1 << 2, 1 << 3, 1 << 8, 1 << 13,
                                                            1 << 14, 1 << 16, 1 << 17)
_INT = struct.Struct("<i")
MAX_NODES = 100_000   #: the longest model a binary file may declare


class _BinaryCursor:
    """Reads one binary model's fields, checking each size against the end of the data."""

    def __init__(self, data, label: str):
        self.data, self.label, self.pos, self.number = data, label, 0, 0

    def fail(self, what: str) -> HmmgpuError:
        return InputError(f"{self.label}: model {self.number}: {what}")

    def take(self, n: int) -> int:
        """Skip n bytes; return where they start."""
        if n < 0 or self.pos + n > len(self.data):
            raise self.fail("truncated or damaged binary model")
        self.pos += n
        return self.pos - n

    def integer(self) -> int:
        return _INT.unpack_from(self.data, self.take(4))[0]

    def string(self, required: bool) -> None:
        """A length-prefixed C string (length 0: none)."""
        n = self.integer()
        if (n <= 0 and required) or (n > 0 and self.data[self.take(n) + n - 1] != 0):
            raise self.fail("damaged string in binary model")


def _binary_records(data, label: str) -> Iterator[tuple[int, bytes]]:
    """Each model of a binary (or pressed) file, its layout checked before HMMER reads it.

    HMMER's binary reader trusts the sizes it reads (a damaged M or string length crashes
    it or allocates gigabytes) and exits the process on an unknown alphabet, so every size
    is checked against the file here; the values themselves are checked after parsing.
    """
    cursor = _BinaryCursor(data, label)
    while cursor.pos < len(data):
        cursor.number += 1
        start = cursor.pos
        version = _MAGIC.get(struct.unpack_from("<I", data, start)[0]) if len(data) - start >= 4 else None
        if version is None:
            if cursor.number == 1:
                raise InputError(f"{label}: not a valid HMMER profile file (neither HMMER text nor binary)")
            raise cursor.fail("damaged binary model (no magic number)")
        cursor.take(4)
        flags, M, alphabet = cursor.integer(), cursor.integer(), cursor.integer()
        K = _ALPHABET_K.get(alphabet)
        if K is None or not 0 < M <= MAX_NODES or not 0 <= flags < 1 << 18:
            raise cursor.fail(f"damaged binary model header (M={M}, alphabet type {alphabet})")
        cursor.take(4 * (M * K + (M + 1) * K + (M + 1) * 7))     # match, insert, transition probabilities
        cursor.string(required=True)                              # name
        for flag in (_ACC, _DESC):
            if flags & flag:
                cursor.string(required=True)
        for flag in (_RF, _MMASK, _CONS, _CS, _CA):               # M + 2 characters, the last a NUL
            if flags & flag and data[cursor.take(M + 2) + M + 1] != 0:
                raise cursor.fail("damaged annotation line in binary model")
        cursor.string(required=False)                             # command log
        cursor.take(8 + (4 if version >= "3/c" else 0))           # nseq, eff_nseq, max_length
        cursor.string(required=False)                             # creation time
        if flags & _MAP:
            cursor.take(4 * (M + 1))
        # checksum, E-value parameters (3 before 3/b), cutoffs, composition
        cursor.take(4 + 4 * (6 if version >= "3/b" else 3) + 4 * 6 + (4 * K if flags & _COMPO else 0))
        yield cursor.number, bytes(data[start:cursor.pos])


def _record_end(buffer: bytes, start: int) -> int | None:
    """The end of the first ``//`` line at or after ``start`` (a line starting with //); None
    when ``buffer`` holds none yet. Each ``/`` is found on its own: a one-byte search runs at
    memory speed (memchr), a two-byte one at a fifth of it, and the slash is rare in a model."""
    find, size, pos = buffer.find, len(buffer), start
    while True:
        hit = find(b"/", pos)
        if hit < 0 or hit + 1 >= size:
            return None
        if buffer[hit + 1] == _SLASH and (hit == 0 or buffer[hit - 1] in b"\n\r"):
            eol = find(b"\n", hit)
            return None if eol < 0 else eol + 1
        pos = hit + 1


_SLASH = ord("/")
_LENG = re.compile(rb"\nLENG[ \t]+(\d+)")


def model_lengths(path: str) -> list | None:
    """The ``LENG`` of every model of a text HMM file (plain or gzip), for choosing how to
    search before any model is parsed; None when the file is not HMMER3 text (a pressed
    file, say) or cannot be read (:func:`read_models` then says why). Not for standard input.

    The file is read in chunks (:func:`~hmmgpu.formats.inputs.byte_chunks`: a Pfam-A file is never
    held whole) and cut at its ``//`` lines where :func:`model_records` cuts it, and each
    record's header alone is searched for its LENG line: a search for that line through the
    whole text took 1.5 s of a 20,000-model file on the 16-core machine, before anything
    else could start. None for a stream (a pipe, ``/dev/stdin``), whose bytes only the reader
    of the models may take."""
    if not os.path.isfile(path):
        return None
    lengths = []
    try:
        chunks = byte_chunks(path, "an HMM file")
        head = b""
        for chunk in chunks:
            head += chunk
            if len(head) >= len(b"HMMER3"):
                break
        if not head.startswith(b"HMMER3"):
            return None
        for buffer, start, end in _record_spans(_chain(head, chunks)):
            # a last record without its // (end None) is searched whole
            if found := _LENG.search(buffer, start, len(buffer) if end is None else end):
                lengths.append(int(found.group(1)))
    except HmmgpuError:
        return None
    return lengths


def _record_name(record: bytes) -> str:
    for line in record.splitlines():
        if line.startswith(b"NAME"):
            return f" ({_shown(line[4:].strip())})"
    return ""


#: Alphabet names that Easel's ``esl_abc_EncodeType()`` knows (case-insensitive).
_ALPHABETS = (b"amino", b"dna", b"rna", b"coins", b"dice", b"custom")
_BODY = re.compile(rb"^[ \t]*HMM[ \t\r\n]", re.M)   # the line that starts the model's body
_CUTOFF_TAGS = (b"GA", b"TC", b"NC")


def _header_fault(record: bytes) -> str | None:
    """What in a record's header HMMER's reader trusts: an ALPH line (without one it reads
    the body with no alphabet, and crashes), a LENG that is a positive number of nodes the
    record can hold (the body is allocated from it), and numbers on the STATS, GA, TC and
    NC lines (it reads them with ``atof()``, so a word silently becomes 0)."""
    body = _BODY.search(record)
    body = body.start() if body else len(record)
    tags = {}
    for line in record[:body].split(b"\n")[1:]:
        fields = line.split()
        if not fields:
            continue
        tags[fields[0]] = fields[1:]
        numbers = fields[3:5] if fields[0] == b"STATS" else fields[1:3] if fields[0] in _CUTOFF_TAGS else []
        for value in numbers:
            try:
                float(value.rstrip(b";"))
            except ValueError:
                return f"invalid number {_shown(value)!r} on the {fields[0].decode()} line"
    alphabet = (tags.get(b"ALPH") or [b""])[0]
    if alphabet.lower() not in _ALPHABETS:
        return "no valid ALPH line in the model header"
    length = (tags.get(b"LENG") or [b""])[0]
    if not length.isdigit() or not 0 < int(length) <= record.count(b"\n", body) // 3:
        return f"invalid model length on the LENG line ({_shown(length) or 'none'})"
    return None


_TEXT_RECORD = re.compile(rb"\s*HMMER")   # where bytes.lstrip() would copy the whole record


def parse_record(record: bytes, label: str, number: int) -> Model:
    """The checked model of one record of :func:`model_records`."""
    from pyhmmer.plan7 import HMMFile

    problem = _header_fault(record) if _TEXT_RECORD.match(record) else None
    if problem:
        raise InputError(f"{label}: model {number}{_record_name(record)}: {problem}")
    try:
        with HMMFile(io.BytesIO(record)) as f:
            models = list(f)
        problem = None if len(models) == 1 else "truncated or malformed model header"
    except EOFError:
        problem = "empty model record"
    except (ValueError, RuntimeError) as exc:
        problem = f"not a valid HMMER profile ({one_line(exc)})"
    if problem:
        raise InputError(f"{label}: model {number}{_record_name(record)}: {problem}")
    return Model(hmm=models[0], index=number - 1, mmu=check_model(models[0], f"{label}: model {number}"))


def hmm_strings(hmm) -> tuple[bytes, bytes | None, bytes | None]:
    """A model's name, accession and description as the bytes HMMER holds.

    pyhmmer decodes them as UTF-8; a model whose description has another byte is written
    back as HMMER text and the three lines read from there.
    """
    try:
        return (hmm.name.encode(), None if hmm.accession is None else hmm.accession.encode(),
                None if hmm.description is None else hmm.description.encode())
    except UnicodeDecodeError:
        buf = io.BytesIO()
        hmm.write(buf)
        fields = {}
        for line in buf.getvalue().split(b"\n"):
            tag, _, value = line.partition(b" ")
            if tag in (b"NAME", b"ACC", b"DESC"):
                fields[tag] = value.strip(b" ")
            elif tag == b"HMM":
                break
        return fields[b"NAME"], fields.get(b"ACC"), fields.get(b"DESC")


def check_model(hmm, where: str) -> float:
    """Check that ``hmm`` is a calibrated protein model with valid probabilities; return its MMU.

    ``where`` starts the one-line error (file and model number); the model's name is added.
    """
    raw_name = hmm_strings(hmm)[0]
    where = f"{where} ({_shown(raw_name)})"
    try:
        raw_name.decode()
    except UnicodeDecodeError:   # the search engine names models as text; descriptions may be any bytes
        raise InputError(f"{where}: the model name is not UTF-8 text") from None
    if not hmm.alphabet.is_amino():
        kind = "DNA" if hmm.alphabet.is_dna() else "RNA" if hmm.alphabet.is_rna() else "non-protein"
        raise InputError(f"{where}: is a {kind} model; hmmgpu searches protein sequences with protein models "
                          "(use nhmmer for nucleotide searches)")
    try:
        consensus = hmm.consensus
    except UnicodeDecodeError:
        raise InputError(f"{where}: a consensus residue is not an ASCII character") from None
    if consensus is None:   # "CONS no": p7_ProfileConfig() refuses such a model
        raise InputError(f"{where}: has no consensus residues (CONS no), which HMMER needs to search with it")
    import numpy as np   # here, not at import: the GPU process starts before numpy is imported

    evparam = np.asarray(hmm.evalue_parameters.as_vector(), dtype=np.float32)
    if hmm.evalue_parameters.m_lambda is None:
        raise InputError(f"{where}: not calibrated (no STATS LOCAL lines); build it with hmmbuild")
    if not np.all(np.isfinite(evparam)) or np.any(evparam[1::2] <= 0):
        raise InputError(f"{where}: invalid STATS LOCAL values {evparam.tolist()} (lambdas must be > 0)")
    M = hmm.M
    mat = np.asarray(hmm.match_emissions, dtype=np.float32)[1:]
    ins = np.asarray(hmm.insert_emissions, dtype=np.float32)
    t = np.asarray(hmm.transition_probabilities, dtype=np.float32)
    # one test per table on the common path (NaN fails both comparisons); the fault is
    # located only when there is one
    for what, values, first in (("match emission", mat, 1), ("insert emission", ins, 0), ("transition", t, 0)):
        if not ((values >= 0) & (values <= 1)).all():
            row, col = np.argwhere(~((values >= 0) & (values <= 1)))[0]
            raise InputError(f"{where}: node {row + first}: {what} probability {_value(values[row, col])} "
                              "is not in [0, 1]")
    t_sums = np.add.reduceat(t, (0, 3, 5), axis=1, dtype=np.float64)  # match, insert, delete transitions
    sums = (mat.sum(axis=1, dtype=np.float64), ins.sum(axis=1, dtype=np.float64), *t_sums.T)
    if max(float(np.abs(s - 1.0).max(initial=0.0)) for s in sums) > SUM_TOLERANCE:
        names = (("match emissions", 1), ("insert emissions", 0), ("match transitions", 0),
                 ("insert transitions", 0), ("delete transitions", 0))
        for (what, first), values in zip(names, sums):
            off = np.flatnonzero(np.abs(values - 1.0) > SUM_TOLERANCE)
            if off.size:
                row = int(off[0])
                raise InputError(f"{where}: node {row + first}: {what} sum to {values[row]:.6g}, not 1")
    if t[M, 2] != 0 or t[M, 5] != 1 or t[M, 6] != 0:
        raise InputError(f"{where}: node {M}: the last node's M->D and D->D must be 0 and D->M 1")
    compo = hmm.composition
    if compo is not None:
        compo = np.asarray(compo, dtype=np.float64)
        if not np.all(np.isfinite(compo)) or np.any(compo < 0) or abs(compo.sum() - 1.0) > SUM_TOLERANCE:
            raise InputError(f"{where}: invalid COMPO line (not a probability distribution)")
    cutoffs = np.asarray(hmm.cutoffs.as_vector(), dtype=np.float32)
    if not np.all(np.isfinite(cutoffs)):
        raise InputError(f"{where}: a GA, TC or NC cutoff is not a number")
    return float(evparam[0])


def _value(v) -> str:
    return f"{float(v):g}"


__all__ = ["Model", "read_models", "model_records", "model_lengths", "parse_record", "no_models", "check_model", "hmm_strings", "SUM_TOLERANCE"]
