"""The protein sequence database: FASTA (plain or gzip) digitized like Easel, or a made, memory-mapped DB.

Sources: a FASTA file, plain or gzip (by its magic bytes), ``-`` or ``/dev/stdin`` (all of
standard input is read), any other format Easel reads (named by ``--tformat`` or guessed as
Easel guesses it, :mod:`hmmgpu.formats.seqformat`; read through pyhmmer), or a directory
made by ``hmmgpu makedb``. Names, accessions and descriptions are kept as
bytes end to end, as Easel keeps them: a description with a byte that is not UTF-8 is
searched and printed as hmmsearch prints it.

A made database is one ``.npy`` file per array and ``hmmgpu-db.json``, which records each
file's size, modification time and SHA-256. Opening one checks that the arrays have the
recorded sizes, that offsets, lengths, length order and string offsets agree, and the
checksums of all arrays but the residues; the residues' checksum (a full read) is checked
when their file's size or modification time changed, and always by ``hmmgpu makedb
--check``. An edited database is an error, never a search with changed hits.

FASTA parsing is vectorized with numpy (no per-residue Python). It reproduces Easel's FASTA reader as
pyhmmer 0.12.3 runs it, rules worked out byte by byte against ``pyhmmer.easel.SequenceFile``:

* before the first ``>`` only whitespace (``\\t \\n \\v \\f \\r`` and space) may appear;
* a record starts at any ``>`` met outside a header, even in the middle of a sequence line;
* a header ends at ``\\n`` or ``\\r``; spaces and tabs after ``>`` are skipped; the name runs to the
  first space, tab, ``\\v`` or ``\\f`` (no name is an error); spaces and tabs after it are skipped
  and the description is the rest of the line, trailing blanks kept; a NUL ends the name or the
  description early, and so does ``\\x01`` in a description (C strings, NCBI ``^A`` separators);
* in sequence lines, letters of either case map to their amino codes (all 26 are symbols),
  ``.`` and ``_`` to the gap, ``*`` and ``~`` to their codes, space, tab, ``\\r`` and ``\\n`` are
  skipped; every other byte, ``-`` and digits included, is an error.
"""
from __future__ import annotations

import errno
import functools
import hashlib
import io
import json
import mmap
import os
import re
import shutil
import stat
import tempfile
from typing import TYPE_CHECKING, Literal

import numpy as np

from hmmgpu.constants import AMINO_SYMBOLS, MAX_TARGET_LENGTH
from hmmgpu.errors import DatabaseError, HmmgpuError, InputError
from hmmgpu.formats.inputs import META_FILE, is_database_dir, label_of, memory_tmpdir, read_bytes
from hmmgpu.formats.seqformat import PATH_ONLY_FORMATS, format_name, guess_format
from hmmgpu.formats.selex import selex_to_fasta
from hmmgpu.host import signals_deferred

if TYPE_CHECKING:  # pyhmmer is imported where it is used (_easel): for the annotations only
    import pyhmmer

FORMAT_NAME = "hmmgpu-seqdb"
FORMAT_VERSION = 2
_ARRAYS = dict(residues=np.uint8, offsets=np.int64, lengths=np.int64, order=np.int64, names=np.uint8,
               name_offsets=np.int64, descriptions=np.uint8, description_offsets=np.int64,
               accessions=np.uint8, accession_offsets=np.int64)



def _easel():
    """pyhmmer's Easel bindings, imported at their first use: opening a made database and
    reading FASTA into arrays (``hmmgpu sw``, the GPU process) never need them, and importing
    pyhmmer costs 0.1-0.16 s."""
    import pyhmmer.easel

    return pyhmmer.easel


@functools.lru_cache(maxsize=None)
def _amino():
    """Easel's amino alphabet (made once)."""
    return _easel().Alphabet.amino()


_SKIP = 254     # lookup value: byte ignored inside sequence lines
_BAD = 255      # lookup value: byte not allowed inside sequence lines
#: The numpy reader digitizes a file in chunks of whole records, several at a time in
#: threads (its array work releases the GIL: 29 M residues in 0.09 s on 2 cores against 0.19 s
#: in one thread): at most this many threads, each chunk at most _CHUNK / _READ_THREADS bytes
#: (which bounds the temporaries of all of them together), and at least _CHUNK_MIN.
_READ_THREADS = 8
_CHUNK = 64 << 20
_CHUNK_MIN = 1 << 20


def sequence_block(sequences) -> pyhmmer.easel.DigitalSequenceBlock:
    """A pyhmmer block of the amino ``sequences`` (a list of ``DigitalSequence``), in that order.

    Built by assigning the whole list to an empty block's slice, not by the constructor:
    pyhmmer 0.12's constructor appends the sequences one by one, and every append clears the
    block's name index in a ``nogil`` section, so it gives up and takes back the GIL once per
    sequence. Sixteen threads making blocks at once then pass the GIL between them for every
    target. Measured on the 16-core H200 machine, 20 Pfam models against 29 M residues on
    pyhmmer's route, each query cut into two ranges (sliced blocks): 3.0 M context switches,
    11.9 s of system time and 8.1 s against 2.5 s for one range each
    (``benchmarks/results/scaling_probe_h200_2026-11-24.json``). The slice assignment sets
    every target with one allocation and no release of the GIL.
    """
    block = _easel().DigitalSequenceBlock(_amino())
    block[:] = sequences
    return block


def _reader_threads() -> int:
    """Threads of the numpy reader and the ASCII check: the usable cores, at most _READ_THREADS."""
    from hmmgpu.host import usable_cores

    return min(_READ_THREADS, usable_cores())


@functools.lru_cache(maxsize=None)
def _residue_bytes() -> bytes:
    """The byte -> Easel code table of the numpy reader, for ``bytes.translate``."""
    table = np.full(256, _BAD, dtype=np.uint8)
    for code, symbol in enumerate(AMINO_SYMBOLS):
        if symbol.isalpha():
            table[ord(symbol)] = table[ord(symbol.lower())] = code
    table[ord("*")] = AMINO_SYMBOLS.index("*")
    table[ord("~")] = AMINO_SYMBOLS.index("~")
    table[[ord("."), ord("_")]] = AMINO_SYMBOLS.index("-")
    table[[ord(" "), ord("\t"), ord("\r"), ord("\n")]] = _SKIP
    return table.tobytes()


@functools.lru_cache(maxsize=None)
def _fasta_symbols() -> np.ndarray:
    """Each amino code's byte in FASTA text that Easel reads back into that code (the gap as
    ``.``: Easel's FASTA reader refuses ``-``, which stands for any other byte value here)."""
    symbols = np.full(256, ord("-"), dtype=np.uint8)
    symbols[:len(AMINO_SYMBOLS)] = np.frombuffer(AMINO_SYMBOLS.encode(), dtype=np.uint8)
    symbols[AMINO_SYMBOLS.index("-")] = ord(".")
    return symbols


def _holds(blob, values: np.ndarray) -> bool:
    """Whether the byte array ``blob`` holds any of ``values`` (control bytes and the space): a
    single pass finds the bytes up to the largest of them, and only those are looked at."""
    blob = np.asarray(blob)
    low = np.flatnonzero(blob <= values.max())
    return bool(low.size) and bool(np.isin(blob[low], values).any())


_LEADING_SPACE = re.compile(rb"[ \t\n\v\f\r]*")
_NUCLEOTIDE_CODES = [AMINO_SYMBOLS.index(c) for c in "ACGTUN"]


def _quote(raw) -> str:
    """Bytes shown on one line, quoted, with non-printable bytes escaped."""
    return repr(bytes(raw))[1:]


def _one_line(exc: Exception) -> str:
    """An exception's message, first line only."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _line_number(buf: np.ndarray, pos: int) -> int:
    """1-based line of byte ``pos``; a line ends at \\n, \\r\\n or a lone \\r."""
    head = buf[:pos]
    crlf = np.count_nonzero((head[:-1] == 13) & (head[1:] == 10))
    return int(1 + np.count_nonzero(head == 10) + np.count_nonzero(head == 13) - crlf)


def _first_at_or_after(positions: np.ndarray, x: np.ndarray, limit: np.ndarray) -> np.ndarray:
    """For each x, the first of the sorted ``positions`` >= x, capped at ``limit``."""
    j = np.searchsorted(positions, x)
    found = np.append(positions, np.iinfo(np.int64).max)[j]
    return np.minimum(found, limit)


def _skip_blanks(blanks: np.ndarray, x: np.ndarray, limit: np.ndarray) -> np.ndarray:
    """Move each x past the run of spaces/tabs (sorted positions ``blanks``) it starts on."""
    if blanks.size == 0:
        return x
    run_last = np.append(np.flatnonzero(np.diff(blanks) != 1), blanks.size - 1)
    j = np.minimum(np.searchsorted(blanks, x), blanks.size - 1)
    on_blank = blanks[j] == x
    run_end = blanks[run_last[np.searchsorted(run_last, j)]] + 1
    return np.where(on_blank, np.minimum(run_end, limit), x)


def _gather(seg: np.ndarray, lo: np.ndarray, hi: np.ndarray):
    """Concatenate seg[lo[k]:hi[k]] for all k; returns (blob, lengths)."""
    lens = hi - lo
    return seg[_spread(lo, lens)], lens


def _spread(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The indices starts[k] .. starts[k] + lengths[k] - 1 for all k, concatenated."""
    ends = np.cumsum(lengths)
    idx = np.arange(ends[-1] if lengths.size else 0, dtype=np.int64)
    idx += np.repeat(starts - (ends - lengths), lengths)
    return idx


def _next_record_start(data, pos: int) -> int:
    """A record start at or after ``pos`` (the first '>' after a line end), or len(data)."""
    ends = [e for e in (data.find(b"\n", pos), data.find(b"\r", pos)) if e >= 0]
    if not ends:
        return len(data)
    start = data.find(b">", min(ends))
    return len(data) if start < 0 else start


def _record_bounds(buf: np.ndarray, lo: int, hi: int):
    """Positions of each record's '>' and of its header's line end, in buf[lo:hi]."""
    seg = buf[lo:hi]
    gt = np.flatnonzero(seg == ord(">"))
    eol = np.flatnonzero((seg == 10) | (seg == 13))
    # A header runs to the next line end, so only the first '>' before each line end opens a record.
    line_end = np.searchsorted(eol, gt)
    opens = np.ones(gt.size, dtype=bool)
    opens[1:] = line_end[1:] != line_end[:-1]
    return lo + gt[opens], lo + np.append(eol, seg.size)[line_end[opens]]


def _join(data, lo: np.ndarray, hi: np.ndarray) -> bytes:
    """data[lo[k]:hi[k]] for all k, concatenated."""
    return b"".join([data[a:b] for a, b in zip(lo.tolist(), hi.tolist())])


def _split_headers(headers: np.ndarray, lo: np.ndarray, hi: np.ndarray):
    """Easel's name/description split of each header headers[lo:hi] (the text after '>').

    Returns (name_lo, name_hi, desc_lo, desc_hi, indices of headers with no name).
    """
    spacing = (headers == 32) | (headers == 9)
    blanks = np.flatnonzero(spacing)
    white = np.flatnonzero(spacing | (headers == 11) | (headers == 12))
    name_lo = _skip_blanks(blanks, lo, hi)
    token_end = _first_at_or_after(white, name_lo, hi)
    desc_lo = _skip_blanks(blanks, token_end, hi)
    name_hi, desc_hi = token_end, hi
    stops = np.flatnonzero(headers <= 1)   # NUL ends names and descriptions, ^A descriptions only
    if stops.size:
        name_hi = _first_at_or_after(stops[headers[stops] == 0], name_lo, name_hi)
        desc_hi = _first_at_or_after(stops, desc_lo, desc_hi)
    return name_lo, name_hi, desc_lo, desc_hi, np.flatnonzero(token_end == name_lo)


def _digitize(data, buf: np.ndarray, lo: int, hi: int, label: str) -> dict:
    """Digitize the whole records in data[lo:hi] (data[lo] is a record's '>'); HmmgpuError on the first fault."""
    starts, hend = _record_bounds(buf, lo, hi)
    headers = np.frombuffer(_join(data, starts + 1, hend), dtype=np.uint8)
    header_off = _offsets(hend - starts - 1)
    name_lo, name_hi, desc_lo, desc_hi, nameless = _split_headers(headers, header_off[:-1], header_off[1:])

    seq_hi = np.append(starts[1:], hi)
    codes = np.frombuffer(_join(data, hend, seq_hi).translate(_residue_bytes()), dtype=np.uint8)
    region_off = _offsets(seq_hi - hend)
    skipped = np.flatnonzero(codes == _SKIP)
    lengths = np.diff(region_off) - np.diff(np.searchsorted(skipped, region_off))

    faults = [int(starts[nameless[0]])] if nameless.size else []
    if codes.max(initial=0) == _BAD:
        i = int(np.argmax(codes == _BAD))
        k = np.searchsorted(region_off, i, side="right") - 1
        faults.append(int(hend[k]) + i - int(region_off[k]))
    if faults:
        pos = min(faults)
        line = _line_number(buf, pos)
        if nameless.size and pos == starts[nameless[0]]:
            raise InputError(f"{label}: line {line}: '>' header has no sequence name")
        k = np.searchsorted(starts, pos, side="right") - 1
        name = headers[name_lo[k]:name_hi[k]]
        raise InputError(f"{label}: line {line}: invalid character {_quote(buf[pos:pos + 1])} "
                          f"in sequence {_quote(name)}")
    names, name_lengths = _gather(headers, name_lo, name_hi)
    descriptions, description_lengths = _gather(headers, desc_lo, desc_hi)
    return dict(residues=codes[codes < _SKIP], lengths=lengths, names=names, name_lengths=name_lengths,
                descriptions=descriptions, description_lengths=description_lengths)


def repeated(names: list) -> np.ndarray:
    """Whether each of ``names`` occurs more than once among them (bool array)."""
    seen, twice = set(), set()
    for name in names:
        if name in seen:
            twice.add(name)
        else:
            seen.add(name)
    if not twice:
        return np.zeros(len(names), dtype=bool)
    return np.fromiter((name in twice for name in names), dtype=bool, count=len(names))


def _offsets(lengths: np.ndarray) -> np.ndarray:
    out = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def _blob(items: list[bytes]):
    """Concatenated strings and their offsets (n + 1 of them)."""
    data = np.frombuffer(b"".join(items), dtype=np.uint8).copy()
    return data, _offsets(np.array([len(x) for x in items], dtype=np.int64))


class SequenceDB:
    """Digitized protein sequences: one uint8 residue array with offsets and lengths, and the
    names, accessions and descriptions as byte strings (concatenated, with offsets)."""

    def __init__(self, residues, lengths, names, name_offsets, descriptions, description_offsets,
                 source: str, offsets=None, order=None, accessions=None, accession_offsets=None):
        self.residues = residues
        self.lengths = lengths
        self.offsets = _offsets(lengths)[:-1] if offsets is None else offsets
        self.order = np.argsort(-lengths, kind="stable") if order is None else order
        self.names_blob = names
        self.name_offsets = name_offsets
        self.descriptions_blob = descriptions
        self.description_offsets = description_offsets
        self.accessions_blob = np.zeros(0, dtype=np.uint8) if accessions is None else accessions
        self.accession_offsets = (np.zeros(lengths.size + 1, dtype=np.int64) if accession_offsets is None
                                  else accession_offsets)
        self.source = source

    @property
    def n(self) -> int:
        """Number of sequences (zero-length ones included)."""
        return int(self.lengths.size)

    @property
    def total_residues(self) -> int:
        """Sum of all sequence lengths."""
        return int(self.residues.size)

    @property
    def max_length(self) -> int:
        """Length of the longest sequence (0 for an empty database)."""
        return int(self.lengths[self.order[0]]) if self.n else 0

    @functools.cached_property
    def _views(self) -> tuple:
        """``memoryview``s of the names, descriptions, accessions and residues: slicing one
        costs a tenth of slicing a numpy array (a memory-mapped one included), which is most
        of the cost of a target's strings. Making every target of 116 M residues into pyhmmer
        sequences took 1.4 s this way and 3.8 s by numpy slices, on one core."""
        return tuple(memoryview(np.ascontiguousarray(a)) for a in
                     (self.names_blob, self.descriptions_blob, self.accessions_blob, self.residues))

    def name(self, i: int) -> bytes:
        """Name of sequence i: the header up to the first whitespace."""
        return bytes(self._views[0][self.name_offsets[i]:self.name_offsets[i + 1]])

    def names(self) -> list:
        """Every sequence's name, in order (the names read once, not sliced one by one)."""
        blob, ends = self.names_blob.tobytes(), self.name_offsets.tolist()
        return [blob[a:b] for a, b in zip(ends[:-1], ends[1:])]

    @functools.cached_property
    def repeated_names(self) -> np.ndarray:
        """Whether each target's name is another target's too (bool array): a set of the names
        read at once (0.1 s for 311,204 targets on one core, where a dictionary of every
        name's positions took 0.3 s on the H200 machine)."""
        return repeated(self.names())

    def name_positions(self, first: int, end: int):
        """The function from a name to the position of the target so named among ``first`` ..
        ``end - 1`` (names there are distinct), None if none is: a search of the range's names
        as bytes, for the few hits whose position matters."""
        offsets = np.asarray(self.name_offsets[first:end + 1], dtype=np.int64)
        blob = bytes(self._views[0][int(offsets[0]):int(offsets[-1])])
        offsets = offsets - offsets[0]

        def position(name: bytes) -> int | None:
            at = blob.find(name)
            while at >= 0:
                k = int(np.searchsorted(offsets, at))
                if k < end - first and offsets[k] == at and offsets[k + 1] - at == len(name):
                    return first + k
                at = blob.find(name, at + 1)
            return None

        return position

    def accession(self, i: int) -> bytes:
        """Accession of sequence i (empty for FASTA, which has none)."""
        return bytes(self._views[2][self.accession_offsets[i]:self.accession_offsets[i + 1]])

    def description(self, i: int) -> bytes:
        """Description of sequence i: the rest of the header line."""
        return bytes(self._views[1][self.description_offsets[i]:self.description_offsets[i + 1]])

    def codes(self, i: int) -> np.ndarray:
        """View of sequence i's digital residues."""
        start = self.offsets[i]
        return self.residues[start:start + self.lengths[i]]

    def digital_sequence(self, i: int) -> pyhmmer.easel.DigitalSequence:
        """Sequence i as the pyhmmer object that reading the file would give."""
        accession = self.accession(i)
        extra = {"accession": accession} if accession else {}
        start = self.offsets[i]
        return _easel().DigitalSequence(_amino(), name=self.name(i), description=self.description(i),
                                        sequence=self._views[3][start:start + self.lengths[i]], **extra)

    def block(self, indices=None) -> pyhmmer.easel.DigitalSequenceBlock:
        """A pyhmmer block of the given sequences (all if None), in the given order."""
        indices = range(self.n) if indices is None else indices
        return sequence_block([self.digital_sequence(int(i)) for i in indices])

    def shard(self, first: int, end: int) -> "SequenceDB":
        """Targets ``first`` .. ``end - 1`` as a database of their own, made of views of these
        arrays (a target's position there is its position here less ``first``): the shard a
        dask worker runs hmmgpu's filters over (:mod:`hmmgpu.distributed.cluster`)."""
        first, end = int(first), int(end)
        lengths = np.asarray(self.lengths[first:end])
        begin = int(self.offsets[first]) if end > first else 0

        def strings(blob, offsets):
            at = np.asarray(offsets[first:end + 1], dtype=np.int64)
            return blob[int(at[0]):int(at[-1])], at - at[0]

        names, name_offsets = strings(self.names_blob, self.name_offsets)
        descriptions, description_offsets = strings(self.descriptions_blob, self.description_offsets)
        accessions, accession_offsets = strings(self.accessions_blob, self.accession_offsets)
        return SequenceDB(self.residues[begin:begin + int(lengths.sum())], lengths, names, name_offsets,
                          descriptions, description_offsets, source=self.source,
                          offsets=np.asarray(self.offsets[first:end]) - begin,
                          accessions=accessions, accession_offsets=accession_offsets)

    @functools.cached_property
    def writes_as_fasta(self) -> bool:
        """:meth:`fasta_text` gives text that Easel reads back into exactly these targets: no
        target has an accession (FASTA has none), every name is one word (no blank, line end
        or NUL), and no description starts with a blank or holds a line end, NUL or ``^A``. A
        database made from FASTA always does. (Its residues are amino codes, as ``makedb``
        wrote them; a code that is not would be written as ``-``, which Easel refuses.)"""
        if self.accessions_blob.size or np.diff(self.name_offsets).min(initial=1) == 0:
            return False
        description_lengths = np.diff(self.description_offsets)
        starts = np.asarray(self.description_offsets[:-1])[description_lengths > 0]
        return not (_holds(self.names_blob, _NAME_BREAKS) or _holds(self.descriptions_blob, _LINE_BREAKS)
                    or _holds(np.asarray(self.descriptions_blob)[starts], _BLANKS))

    def fasta_text(self, start: int, stop: int) -> bytes:
        """Targets ``start`` .. ``stop - 1`` as FASTA text, one line of residues each (only
        where :attr:`writes_as_fasta`). Made with a few numpy operations over the whole range,
        which release the GIL: several threads write their ranges at once (29 M residues in
        0.24 s on one core, 0.12 s on two), where making pyhmmer's sequence objects holds it
        for every target."""
        name_at = self.name_offsets[start:stop + 1]
        description_at = self.description_offsets[start:stop + 1]
        name_lengths, description_lengths = np.diff(name_at), np.diff(description_at)
        lengths = self.lengths[start:stop]
        described = description_lengths > 0
        # each record is its header line ('>' name [' ' description] '\n'), its residues, '\n'
        around = 3 + name_lengths + described + description_lengths
        header_at = _offsets(around)
        headers = np.empty(int(header_at[-1]), dtype=np.uint8)
        at = header_at[:-1]
        headers[at] = ord(">")
        headers[_spread(at + 1, name_lengths)] = self.names_blob[name_at[0]:name_at[-1]]
        at = at + 1 + name_lengths
        headers[at[described]] = ord(" ")
        headers[_spread(at + described, description_lengths)] = self.descriptions_blob[description_at[0]:description_at[-1]]
        headers[at + described + description_lengths] = ord("\n")
        headers[header_at[1:] - 1] = ord("\n")
        record_at = _offsets(around + lengths)
        first = record_at[:-1] + around - 1  # each record's first residue
        edges = np.zeros(int(record_at[-1]) + 1, dtype=np.int8)
        edges[first] += 1
        edges[first + lengths] -= 1
        residue = np.cumsum(edges[:-1], dtype=np.int8).view(bool)
        text = np.empty(int(record_at[-1]), dtype=np.uint8)
        begin = int(self.offsets[start]) if stop > start else 0
        text[residue] = _fasta_symbols()[self.residues[begin:begin + int(lengths.sum())]]
        text[~residue] = headers
        return text.tobytes()

    #: The byte ranges of a file searched piece by piece (:class:`FastaPieces`); None: read whole.
    pieces = None

    def looks_like_nucleotide(self) -> bool:
        """True if >= 90% of the first 10,000 residues are A, C, G, T, U or N."""
        return self.head_looks_like_nucleotide(self.residues[:10_000])

    @staticmethod
    def head_looks_like_nucleotide(head: np.ndarray) -> bool:
        """The test of :meth:`looks_like_nucleotide` on the first residues ``head``."""
        return bool(head.size) and bool(np.isin(head, _NUCLEOTIDE_CODES).mean() >= 0.9)

    @classmethod
    def from_fasta(cls, path, *, arrays: bool = False) -> "SequenceDB":
        """Read and digitize a FASTA file, plain or gzip (detected by its magic bytes); ``-`` is stdin.

        ASCII text is read by Easel itself (:class:`EaselSequenceDB`) unless ``arrays`` (the
        caller wants the arrays, not pyhmmer's sequences: the GPU process); other bytes, and
        text Easel refuses (for the one-line error naming line and culprit), by the numpy reader."""
        return cls._from_fasta_bytes(read_bytes(path, "a sequence file"), path, arrays)

    @classmethod
    def _from_fasta_bytes(cls, data, path, arrays: bool) -> "SequenceDB":
        """:meth:`from_fasta` of the bytes ``data`` already read from ``path``."""
        if not arrays and _is_ascii(data):
            db = EaselSequenceDB.read(data, path)
            if db is not None:
                return db
        return cls.digitize_fasta(data, path)

    @classmethod
    def digitize_fasta(cls, data, path) -> "SequenceDB":
        """The numpy reader: FASTA ``data`` (the bytes of ``path``) digitized by the rules above."""
        label = label_of(path)
        buf = np.frombuffer(data, dtype=np.uint8)
        first = _LEADING_SPACE.match(data).end()
        if first == len(data):
            raise InputError(f"{label}: contains no sequences")
        if data[first:first + 1] != b">":
            text = data[first:first + 20].splitlines()[0]
            raise InputError(f"{label}: not a FASTA file: line {_line_number(buf, first)} starts with "
                              f"{_quote(text)}, expected '>'")
        threads = _reader_threads()
        size = max(1, min(max(len(data) // (4 * threads), _CHUNK_MIN), _CHUNK // threads))
        bounds, lo = [], first
        while lo < len(data):
            hi = _next_record_start(data, lo + size) if lo + size < len(data) else len(data)
            bounds.append((lo, hi))
            lo = hi
        if len(bounds) == 1 or threads == 1:
            chunks = [_digitize(data, buf, lo, hi, label) for lo, hi in bounds]
        else:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(threads) as pool:  # the first fault in file order is raised
                chunks = list(pool.map(lambda bound: _digitize(data, buf, *bound, label), bounds))
        parts = {key: np.concatenate([c[key] for c in chunks]) for key in chunks[0]}
        return cls(residues=parts["residues"], lengths=parts["lengths"],
                   names=parts["names"], name_offsets=_offsets(parts["name_lengths"]),
                   descriptions=parts["descriptions"], description_offsets=_offsets(parts["description_lengths"]),
                   source=os.fspath(path))

    @classmethod
    def from_file(cls, path, format: str | None = None, *, arrays: bool = False) -> "SequenceDB":
        """Read a sequence file in any format Easel reads: ``format`` as ``--tformat`` names it,
        or None to guess it as Easel does (:mod:`hmmgpu.formats.seqformat`); FASTA is read by
        :meth:`from_fasta`, the other formats by pyhmmer."""
        format = None if format is None else format_name(format)
        if format == "fasta":
            return cls.from_fasta(path, arrays=arrays)
        label = label_of(path)
        if format in PATH_ONLY_FORMATS:
            if os.fspath(path) == "-":
                raise InputError(f"--tformat {format}: a database of several files cannot be read from standard input")
            source = os.fspath(path)
            if not any(os.path.exists(source + suffix) for suffix in (".pin", ".pal")):
                raise InputError(f"{label}: no NCBI BLAST protein database of this name ({label}.pin or {label}.pal)")
        else:
            data = read_bytes(path, "a sequence file")
            if format is None:
                format = guess_format(os.fspath(path), data, plain_file=isinstance(data, mmap.mmap))
                if format == "fasta":
                    return cls._from_fasta_bytes(data, path, arrays)
            if format == "selex":  # pyhmmer's SELEX reader fails on large files (hmmgpu.formats.selex)
                return cls._from_fasta_bytes(selex_to_fasta(data, label), path, arrays)
            # a plain file is opened by Easel itself; standard input and gzip are given as bytes
            source = os.fspath(path) if isinstance(data, mmap.mmap) else io.BytesIO(data)
        try:
            with _easel().SequenceFile(source, format=format, digital=True, alphabet=_amino()) as fh:
                block = fh.read_block()
        except EOFError:
            block = _easel().DigitalSequenceBlock(_amino())
        except (ValueError, RuntimeError, OSError) as exc:
            raise InputError(f"{label}: not a valid {format} file ({_one_line(exc)})") from None
        except SystemError as exc:  # pyhmmer's reader failed inside Easel without saying why
            raise InputError(f"{label}: not a valid {format} file (pyhmmer's reader failed: {_one_line(exc)})") from None
        if len(block) == 0:
            raise InputError(f"{label}: contains no sequences")
        try:
            db = cls.from_block(block)
        except UnicodeDecodeError:
            raise InputError(f"{label}: a name or description is not UTF-8 text (only FASTA keeps such bytes; "
                              "convert the file to FASTA)") from None
        db.source = os.fspath(path)
        return db

    @classmethod
    def from_block(cls, block: pyhmmer.easel.DigitalSequenceBlock) -> "SequenceDB":
        """Build a database from pyhmmer digital amino sequences (copied)."""
        if not block.alphabet.is_amino():
            raise InputError("sequence block is not in the amino alphabet")
        seqs = [np.asarray(s.sequence, dtype=np.uint8) for s in block]
        names, name_offsets = _blob([s.name.encode() for s in block])
        descriptions, description_offsets = _blob([s.description.encode() for s in block])
        accessions, accession_offsets = _blob([s.accession.encode() for s in block])
        return cls(residues=np.concatenate(seqs) if seqs else np.zeros(0, dtype=np.uint8),
                   lengths=np.array([s.size for s in seqs], dtype=np.int64),
                   names=names, name_offsets=name_offsets, descriptions=descriptions,
                   description_offsets=description_offsets, accessions=accessions,
                   accession_offsets=accession_offsets, source="<DigitalSequenceBlock>")

    def _arrays(self) -> dict:
        return dict(residues=self.residues, offsets=self.offsets, lengths=self.lengths, order=self.order,
                    names=self.names_blob, name_offsets=self.name_offsets,
                    descriptions=self.descriptions_blob, description_offsets=self.description_offsets,
                    accessions=self.accessions_blob, accession_offsets=self.accession_offsets)

    def save(self, outdir) -> None:
        """Write the `hmmgpu makedb` format: one .npy file per array, then hmmgpu-db.json.

        The metadata records, for each array file, its size, modification time and the SHA-256
        of its data, which :meth:`load` checks.

        The database is written to a temporary directory beside ``outdir`` (in the same parent,
        so on the same file system) and put in its place in one step at the end (a rename; over
        an existing database, an exchange of the two directories): a save that fails or is
        interrupted leaves what was at ``outdir`` as it was, and no temporary directory behind.
        ``outdir`` may be absent, an empty directory or a database (even one half written by an
        older hmmgpu): :func:`check_destination`.
        """
        outdir = os.fspath(outdir)
        check_destination(outdir)
        if is_database_dir(outdir) and os.path.isdir(self.source) and os.path.samefile(outdir, self.source):
            raise DatabaseError(f"{outdir}: cannot save a database over itself")
        target = os.path.realpath(outdir)   # a link to a database: the database it names is replaced
        building = None
        try:
            with signals_deferred():   # the temporary directory is removed on the way out, however that goes
                building = tempfile.mkdtemp(dir=os.path.dirname(target), prefix=f".{os.path.basename(target)}.",
                                            suffix=".partial")
            self._write(building)
            os.chmod(building, _directory_mode(target))
            with signals_deferred():
                _swap_in(building, target)
        except OSError as exc:
            raise DatabaseError(f"{outdir}: cannot write database: {exc.strerror or _one_line(exc)}") from None
        finally:
            if building is not None and os.path.isdir(building):
                with signals_deferred():
                    shutil.rmtree(building, ignore_errors=True)

    def _write(self, outdir: str) -> None:
        """The arrays and the metadata, written into the directory ``outdir``."""
        files = {}
        for key, dtype in _ARRAYS.items():
            array = np.ascontiguousarray(self._arrays()[key], dtype=dtype)
            path = os.path.join(outdir, key + ".npy")
            with open(path, "wb") as fh:   # on disk before the directory is swapped in
                np.save(fh, array)
                fh.flush()
                os.fsync(fh.fileno())
            files[key] = dict(_stamp(path), sha256=_sha256(array))
        meta = dict(format=FORMAT_NAME, version=FORMAT_VERSION, n=self.n, total_residues=self.total_residues,
                    max_length=self.max_length, source=os.path.basename(self.source), files=files,
                    facts=dict(writes_as_fasta=bool(self.writes_as_fasta),
                               repeated_names=int(np.count_nonzero(self.repeated_names))))
        with open(os.path.join(outdir, META_FILE), "w") as fh:
            json.dump(meta, fh, indent=1)
            fh.flush()
            os.fsync(fh.fileno())

    @classmethod
    def load(cls, path, *, check: Literal["quick", "full"] = "quick") -> "SequenceDB":
        """Open a made database directory; arrays are memory-mapped, nothing is parsed.

        Every open checks the array sizes, that offsets, lengths and string offsets agree,
        and the SHA-256 of every array but the residues; the residues' checksum is checked
        too when their file's size or modification time changed since ``makedb`` (an edit),
        and always with ``check="full"`` (``hmmgpu makedb --check``).

        ``makedb`` also records two facts of the names and descriptions that pyhmmer's route
        over ranges needs before its first task (:attr:`writes_as_fasta`, and whether any
        name repeats): reading them here saves a pass over every name and description
        (0.1-0.2 s for 311,204 targets). The arrays they come from are checksummed at every
        open; a database made before they were recorded works them out when first asked.
        """
        path = os.fspath(path)
        meta = _read_meta(path)
        n, total = meta["n"], meta["total_residues"]
        sizes = dict(residues=total, offsets=n, lengths=n, order=n, name_offsets=n + 1, description_offsets=n + 1,
                     accession_offsets=n + 1)
        arrays = {}
        for key, dtype in _ARRAYS.items():
            try:
                array = np.load(os.path.join(path, key + ".npy"), mmap_mode="r")
            except Exception as exc:   # numpy's header parser raises many kinds on damaged files
                if isinstance(exc, MemoryError):
                    raise
                raise DatabaseError(f"{path}: damaged database: cannot map {key}.npy ({_one_line(exc)})") from None
            if array.dtype != dtype or array.ndim != 1 or array.shape[0] != sizes.get(key, array.shape[0]):
                raise DatabaseError(f"{path}: damaged database: {key}.npy does not match {META_FILE}")
            arrays[key] = array
        _check_structure(path, arrays, meta)
        for key, array in arrays.items():
            recorded = meta["files"][key]
            if key == "residues" and check == "quick" and _stamp(os.path.join(path, key + ".npy")) == {
                    k: recorded[k] for k in ("size", "mtime_ns")}:
                continue
            if _sha256(array) != recorded["sha256"]:
                raise DatabaseError(f"{path}: damaged database: {key}.npy was changed after `hmmgpu makedb` "
                                  "(checksum differs); remake the database")
        db = cls(residues=arrays["residues"], lengths=arrays["lengths"], names=arrays["names"],
                 name_offsets=arrays["name_offsets"], descriptions=arrays["descriptions"],
                 description_offsets=arrays["description_offsets"], source=path,
                 offsets=arrays["offsets"], order=arrays["order"], accessions=arrays["accessions"],
                 accession_offsets=arrays["accession_offsets"])
        facts = meta.get("facts")
        if isinstance(facts, dict) and isinstance(facts.get("writes_as_fasta"), bool):
            db.__dict__["writes_as_fasta"] = facts["writes_as_fasta"]  # the cached properties' values
        if isinstance(facts, dict) and facts.get("repeated_names") == 0:
            db.__dict__["repeated_names"] = np.zeros(n, dtype=bool)
        return db


class EaselSequenceDB(SequenceDB):
    """A FASTA database as Easel (pyhmmer's C reader) reads it, for ASCII text.

    The sequences stay the pyhmmer objects that pyhmmer's stages take as they are (no copy
    per target, which cost 2.8 us a target), and the reading is three times as fast as the
    numpy reader (0.14 s against 0.48 s for 29 M residues); the two give the same database
    (tests/test_seqdb.py). The arrays of :class:`SequenceDB` (the GPU's upload, hmmgpu's CPU
    filters, ``makedb``) are made from the block on first use.
    """

    #: The arrays made from the block when first used.
    _ARRAYS_ON_USE = ("residues", "offsets", "names_blob", "name_offsets", "descriptions_blob",
                      "description_offsets", "accessions_blob", "accession_offsets")

    def __init__(self, block: pyhmmer.easel.DigitalSequenceBlock, source: str):  # noqa: D107 - no super(): lazy arrays
        self._block = block
        self.lengths = np.fromiter((len(s) for s in block), dtype=np.int64, count=len(block))
        self.order = np.argsort(-self.lengths, kind="stable")
        self._total = int(self.lengths.sum())
        self.source = source

    @classmethod
    def read(cls, data, path) -> "EaselSequenceDB | None":
        """The database of FASTA ``data`` (the bytes of ``path``), or None if Easel refuses it or
        finds no sequence (the numpy reader then says why, in one line)."""
        source = os.fspath(path)
        handle = source if isinstance(data, mmap.mmap) else io.BytesIO(data)  # a plain file: Easel opens it
        try:
            with _easel().SequenceFile(handle, format="fasta", digital=True, alphabet=_amino()) as fh:
                block = fh.read_block()
        except (ValueError, RuntimeError, OSError, EOFError):
            return None
        return cls(block, source) if len(block) else None

    def __getattr__(self, key):  # only reached for attributes not set yet
        if key not in EaselSequenceDB._ARRAYS_ON_USE:
            raise AttributeError(key)
        made = SequenceDB.from_block(self._block)
        for name in EaselSequenceDB._ARRAYS_ON_USE:
            self.__dict__.setdefault(name, getattr(made, name))
        return self.__dict__[key]

    @property
    def total_residues(self) -> int:
        return self._total

    def name(self, i: int) -> bytes:
        return self._block[i].name.encode()

    def names(self) -> list:
        return [seq.name.encode() for seq in self._block]

    def accession(self, i: int) -> bytes:
        return self._block[i].accession.encode()

    def description(self, i: int) -> bytes:
        return self._block[i].description.encode()

    def codes(self, i: int) -> np.ndarray:
        if "residues" in self.__dict__:   # the arrays made (the GPU's upload): a view, no object a call
            return SequenceDB.codes(self, i)
        return np.asarray(self._block[i].sequence, dtype=np.uint8)

    def digital_sequence(self, i: int) -> pyhmmer.easel.DigitalSequence:
        return self._block[i]

    def block(self, indices=None) -> pyhmmer.easel.DigitalSequenceBlock:
        if indices is None:
            return self._block
        return sequence_block([self._block[int(i)] for i in indices])

    def looks_like_nucleotide(self) -> bool:
        head, count = [], 0
        for seq in self._block:
            if count >= 10_000:
                break
            head.append(np.asarray(seq.sequence, dtype=np.uint8))
            count += head[-1].size
        return SequenceDB.head_looks_like_nucleotide(np.concatenate(head)[:10_000] if head else np.zeros(0, np.uint8))


class FastaPieces:
    """An ASCII FASTA file cut at record starts into pieces that pyhmmer reads and searches itself.

    A search of one model on pyhmmer's route costs about as much as reading the database
    (116 M residues: 0.5-1.5 s each on one core), and reading it into pyhmmer's sequence
    objects takes the GIL for every target, so one reading thread cannot feed sixteen
    searching ones. pyhmmer's pipeline also searches a sequence *file* itself, reading each
    target in C without the GIL; so the file is cut into pieces at record starts (a ``>`` at
    the start of a line always starts one), each worker writes its piece to a temporary file
    (unlinked as soon as Easel has opened it) and searches it, and the reading is spread over
    every thread as hmmsearch's search is. Nothing is parsed here: the number of targets and
    residues of a piece are the search's own counters, and a hit's position in its piece,
    which HMMER's keep rule needs, is found from its name (:meth:`record_indices`).
    """

    def __init__(self, data, path, piece_bytes):
        self.source = os.fspath(path)
        self._data = data
        size = len(data)
        next_bytes = piece_bytes if callable(piece_bytes) else (lambda left: piece_bytes)
        cuts = [0]
        while True:
            step = next_bytes(size - cuts[-1])
            cut = data.find(b"\n>", cuts[-1] + step) if cuts[-1] + step < size else -1
            if cut < 0:
                break
            cuts.append(cut + 1)
        cuts.append(size)
        #: (first byte, end byte) of each piece
        self.pieces = list(zip(cuts[:-1], cuts[1:]))
        self._headers = [None] * len(self.pieces)  # each piece's :func:`_scan_headers`, when first needed

    @classmethod
    def open(cls, path, piece_bytes) -> "FastaPieces | None":
        """The pieces of an ASCII FASTA file (plain or gzip); None for anything else (standard
        input or another stream, a made database, other bytes: :func:`open_database` reads
        those whole; a stream is not read here, since its bytes can be read only once).
        ``piece_bytes``: the bytes per piece, or a function that gives the next piece's bytes
        from the bytes of text not yet cut (a gzip file's text size is known once it is read)."""
        path = os.fspath(path)
        if path == "-" or not os.path.isfile(path):
            return None
        data = read_bytes(path, "a sequence file")
        if not _is_ascii(data) or not _LEADING_SPACE.match(data).end() < len(data):
            return None
        return cls(data, path, piece_bytes)

    def records_at_most(self, k: int) -> int:
        """An upper bound on the database position + 1 of every target of piece ``k``: the
        ``>`` bytes of the pieces up to it (each piece's counted once, by the thread that
        searches it, or here)."""
        return sum(self.headers(j)[0] for j in range(k + 1))

    def headers(self, k: int, piece: bytes | None = None) -> tuple:
        """Piece ``k``'s :func:`_scan_headers` (``piece``: its bytes, when the caller has them),
        scanned once."""
        if self._headers[k] is None:
            self._headers[k] = _scan_headers(self.piece(k) if piece is None else piece)
        return self._headers[k]

    def piece(self, k: int) -> bytes:
        a, b = self.pieces[k]
        return self._data[a:b]

    def search(self, hmm, k: int, pipeline):
        """pyhmmer's ``pipeline`` with ``hmm`` over piece ``k`` (:func:`search_fasta_text`), after
        hmmsearch's check of the target lengths; a file Easel refuses is the numpy reader's
        one-line error (line and culprit)."""
        from hmmgpu.formats.checks import check_target_lengths

        piece = self.piece(k)
        starts = self.headers(k, piece)[1]
        spans = np.diff(np.append(starts, len(piece)))
        if spans.size and int(spans.max()) > MAX_TARGET_LENGTH:  # a record that long may hold a target over the limit
            check_target_lengths(EaselSequenceDB(self._block(piece), self.source))
        try:
            return search_fasta_text(hmm, piece, pipeline, f"a piece of {label_of(self.source)}")
        except HmmgpuError:
            raise
        except Exception as error:  # Easel's refusal of the file, or HMMER's own failure
            refusal = self._refusal(None)
            if refusal is not None:
                raise refusal from None
            raise error

    def _block(self, piece):
        try:
            with _easel().SequenceFile(io.BytesIO(piece), format="fasta", digital=True, alphabet=_amino()) as fh:
                return fh.read_block()
        except (ValueError, RuntimeError, OSError, EOFError) as error:
            raise self._refusal(error) from None

    def _refusal(self, error) -> HmmgpuError | None:
        """The numpy reader's one-line error for the whole file (line and culprit); for an
        ``error`` of Easel's that the numpy reader does not find, that error in one line."""
        try:
            SequenceDB.digitize_fasta(self._data, self.source)
        except HmmgpuError as reason:
            return reason
        if error is None:
            return None
        return InputError(f"{label_of(self.source)}: not a valid FASTA file ({_one_line(error)})")

    def record_indices(self, k: int, targets: int, names) -> dict:
        """The index in piece ``k`` (of ``targets`` targets, as Easel counted them) of the target
        named by each of ``names``, None for those that cannot be told from the bytes alone: all
        of them if the piece's header lines (a ``>`` at the start of a line; real descriptions
        hold others, as in ``C->U``) are not as many as its targets, and a name written after
        blanks, or twice."""
        piece = self.piece(k)
        starts = self.headers(k, piece)[1]
        if starts.size != targets:
            return dict.fromkeys(names)
        indices = {}
        for name in names:
            found = []
            at = piece.find(b">" + name)
            while at >= 0 and len(found) < 2:
                end = at + 1 + len(name)
                if (at == 0 or piece[at - 1] == _NEWLINE) and (end == len(piece) or piece[end:end + 1] in _NAME_ENDS):
                    found.append(at)
                at = piece.find(b">" + name, at + 1)
            indices[name] = int(np.searchsorted(starts, found[0])) if len(found) == 1 else None
        return indices

    def block(self, k: int):
        """Piece ``k`` as pyhmmer's sequences (for what :meth:`record_indices` cannot tell)."""
        return self._block(self.piece(k))

    def looks_like_nucleotide(self) -> bool:
        """The head of the file (up to its first 10,000 residues) looks like DNA or RNA."""
        head = self._block(self.piece(0)[:1 << 16].rsplit(b"\n>", 1)[0])
        return EaselSequenceDB(head, self.source).looks_like_nucleotide() if len(head) else False


def search_fasta_text(hmm, text: bytes, pipeline, what: str):
    """pyhmmer's ``pipeline`` with ``hmm`` over the FASTA ``text`` (``what``: its name in an
    error), which Easel reads in C, without the GIL, from a temporary file in memory (unlinked
    as soon as Easel has opened it)."""
    import tempfile

    where = memory_tmpdir()
    name = None
    try:
        fd, name = tempfile.mkstemp(suffix=".fa", dir=where)
        with os.fdopen(fd, "wb") as fh:
            fh.write(text)
    except OSError as error:
        if name is not None:
            os.unlink(name)
        raise HmmgpuError(f"cannot write {what} to a temporary file in {where or tempfile.gettempdir()}: "
                          f"{error.strerror or _one_line(error)}") from None
    try:
        with _easel().SequenceFile(name, format="fasta", digital=True, alphabet=_amino()) as fh:
            os.unlink(name)
            name = None
            return pipeline.search_hmm(hmm, fh)
    finally:
        if name is not None:
            os.unlink(name)


#: The bytes that end a target name in a FASTA header (and the end of the line).
_NAME_ENDS = {b" ", b"\t", b"\v", b"\f", b"\n", b"\r", b"\x00"}
_NEWLINE = ord("\n")
#: Bytes that :meth:`SequenceDB.fasta_text` cannot write in a name, in a description, and at
#: the start of a description, for Easel to read the same target back.
_NAME_BREAKS = np.frombuffer(b" \t\v\f\n\r\x00", dtype=np.uint8)
_LINE_BREAKS = np.frombuffer(b"\n\r\x00\x01", dtype=np.uint8)
_BLANKS = np.frombuffer(b" \t", dtype=np.uint8)


def _scan_headers(piece: bytes) -> tuple:
    """(the ``>`` bytes of a piece that starts at a record, the offsets of its header lines:
    each ``>`` at the start of a line, a ``>`` elsewhere being part of a description)."""
    buf = np.frombuffer(piece, dtype=np.uint8)
    marks = buf == ord(">")
    at_line_start = np.empty(buf.size, dtype=bool)
    at_line_start[:1] = True
    np.equal(buf[:-1], _NEWLINE, out=at_line_start[1:])
    return int(np.count_nonzero(marks)), np.flatnonzero(marks & at_line_start)


def _is_ascii(data) -> bool:
    """No byte of ``data`` (bytes or a memory map) is above 127. A large file is checked in
    pieces by several threads: the first look at a mapped file's pages costs more than the
    comparison (0.08 s for 151 MB on one core, 0.006 s once mapped)."""
    buf = np.frombuffer(data, dtype=np.uint8)
    if buf.size <= _ASCII_PIECE:
        return not buf.size or int(buf.max()) < 128
    from concurrent.futures import ThreadPoolExecutor

    starts = range(0, buf.size, _ASCII_PIECE)
    with ThreadPoolExecutor(min(_reader_threads(), len(starts))) as pool:
        return all(pool.map(lambda at: int(buf[at:at + _ASCII_PIECE].max()) < 128, starts))


#: The bytes each thread of :func:`_is_ascii` checks at a time.
_ASCII_PIECE = 16 << 20


#: The names a made database's directory holds.
DATABASE_FILES = frozenset([META_FILE, *(key + ".npy" for key in _ARRAYS)])


def check_destination(outdir) -> None:
    """One-line :class:`~hmmgpu.errors.InputError` unless ``outdir`` is a place ``makedb`` may
    write a database: absent, an empty directory, or a directory of a database's files only
    (a database, whole or half written), which is then replaced whole. Anything else (a file,
    a directory with other files) is refused rather than replaced."""
    outdir = os.fspath(outdir)
    target = os.path.realpath(outdir)
    if not os.path.lexists(target):
        if not os.path.isdir(os.path.dirname(target)):
            raise InputError(f"{outdir}: cannot write database: its parent directory does not exist")
        return
    if not os.path.isdir(target):
        raise InputError(f"{outdir}: exists and is not a directory (makedb writes a database directory)")
    try:
        others = sorted(set(os.listdir(target)) - DATABASE_FILES)
    except OSError as exc:
        raise InputError(f"{outdir}: cannot write database: {exc.strerror}") from None
    if others:
        raise InputError(f"{outdir}: exists and is not a hmmgpu database (it holds {others[0]!r}); makedb replaces "
                         "only a database or an empty directory")


def _directory_mode(target: str) -> int:
    """The permissions of a database directory put at ``target``: the old one's, or those
    ``mkdir`` gives (0777 less the umask)."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o777 & ~umask


def _swap_in(building: str, target: str) -> None:
    """Put the directory ``building`` at ``target`` in one step: a rename where ``target`` is
    absent or an empty directory; over a database, Linux's ``renameat2(RENAME_EXCHANGE)``
    exchanges the two (then the old one, now at ``building``, is removed). Where the system
    cannot exchange, the old database is first renamed aside, then the new one into place
    (the old one comes back if that fails)."""
    try:
        os.rename(building, target)   # absent, or an empty directory, which rename replaces
        return
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
    if _exchange(building, target):
        shutil.rmtree(building, ignore_errors=True)
        return
    aside = tempfile.mkdtemp(dir=os.path.dirname(target), prefix=f".{os.path.basename(target)}.", suffix=".old")
    os.rename(target, aside)
    try:
        os.rename(building, target)
    except OSError:
        os.rename(aside, target)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def _exchange(a: str, b: str) -> bool:
    """Exchange two paths atomically (Linux ``renameat2`` with ``RENAME_EXCHANGE``); False where
    the C library or the file system cannot."""
    import ctypes

    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    error = ctypes.get_errno()
    if error in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(error, os.strerror(error), b)


def _sha256(array: np.ndarray) -> str:
    return hashlib.sha256(memoryview(np.ascontiguousarray(array)).cast("B")).hexdigest()


def _stamp(path: str) -> dict:
    info = os.stat(path)
    return dict(size=info.st_size, mtime_ns=info.st_mtime_ns)


def _read_meta(path: str) -> dict:
    if not is_database_dir(path):
        raise DatabaseError(f"{path}: not a hmmgpu database (no {META_FILE}; make one with `hmmgpu makedb`)")
    try:
        with open(os.path.join(path, META_FILE)) as fh:
            meta = json.load(fh)
    except (OSError, ValueError) as exc:
        raise DatabaseError(f"{path}: unreadable {META_FILE} ({_one_line(exc)})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise DatabaseError(f"{path}: {META_FILE} does not describe a hmmgpu sequence database")
    if meta.get("version") != FORMAT_VERSION:
        raise DatabaseError(f"{path}: database format version {meta.get('version')!r} is not supported "
                          f"(this hmmgpu reads version {FORMAT_VERSION}); remake it with `hmmgpu makedb`")
    files = meta.get("files")
    valid = (isinstance(meta.get("n"), int) and isinstance(meta.get("total_residues"), int)
             and isinstance(meta.get("max_length"), int) and isinstance(files, dict)
             and all(isinstance(files.get(k), dict) and isinstance(files[k].get("sha256"), str)
                     and isinstance(files[k].get("size"), int) and isinstance(files[k].get("mtime_ns"), int)
                     for k in _ARRAYS))
    if not valid or meta["n"] < 0 or meta["total_residues"] < 0:
        raise DatabaseError(f"{path}: damaged database: {META_FILE} lacks sizes or checksums")
    return meta


def _check_structure(path: str, a: dict, meta: dict) -> None:
    """Offsets, lengths, order and string offsets describe one consistent database."""
    lengths = a["lengths"]

    def fail(what):
        raise InputError(f"{path}: damaged database: {what}; remake it with `hmmgpu makedb`")

    if lengths.size and (lengths.min() < 0 or not np.array_equal(a["offsets"], _offsets(lengths)[:-1])):
        fail("offsets.npy and lengths.npy disagree")
    if int(lengths.sum()) != meta["total_residues"]:
        fail("the lengths do not add up to the number of residues")
    order = a["order"]
    if order.size and (order.min() < 0 or order.max() >= order.size
                       or np.bincount(order, minlength=order.size).max() != 1
                       or np.any(np.diff(lengths[order]) > 0)):
        fail("order.npy is not the sequences sorted by length")
    if (int(lengths[order[0]]) if order.size else 0) != meta["max_length"]:
        fail(f"the longest sequence is not {meta['max_length']} residues long")
    for strings in ("names", "descriptions", "accessions"):
        off = a[strings[:-1] + "_offsets"]
        if off[0] != 0 or off[-1] != a[strings].size or np.any(np.diff(off) < 0):
            fail(f"{strings[:-1]}_offsets.npy does not index {strings}.npy")


def check_database(path) -> SequenceDB:
    """``hmmgpu makedb --check``: every checksum of a made database, the residues' included."""
    return SequenceDB.load(path, check="full")


def open_database(path, format: str | None = None, *, arrays: bool = False) -> SequenceDB:
    """Open a made database directory, or read a sequence file (plain or gzip) in ``format``
    (as ``--tformat`` names it; None: guessed as Easel guesses it); ``-`` reads standard
    input. ``arrays``: read FASTA straight into the arrays (for a GPU upload; see
    :meth:`SequenceDB.from_fasta`)."""
    path = os.fspath(path)
    if path != "-" and os.path.isdir(path):
        if format is not None:
            raise InputError(f"{path}: --tformat applies to sequence files, not to a made database")
        return SequenceDB.load(path)
    return SequenceDB.from_file(path, format, arrays=arrays)
