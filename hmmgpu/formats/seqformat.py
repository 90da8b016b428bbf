"""Which format a sequence file is in: the name given (``--tformat``, ``--qformat``), or a guess made as Easel makes it.

hmmsearch and hmmscan open their sequence file with ``esl_sqfile_Open`` and, unless a format
is given, let Easel guess it (``sqascii_GuessFileFormat``, Easel 0.49):

1. by the file name's suffix, a trailing ``.gz`` ignored: ``.fa`` is FASTA and ``.gb``
   GenBank, whatever the file holds;
2. by the first line that is not blank: ``>`` starts FASTA, ``ID   `` EMBL (UniProt's
   flat files too, which Easel reads as EMBL), ``LOCUS   `` or the words
   ``Genetic Sequence Data Bank`` GenBank;
3. for a file on disk, not compressed, by Easel's alignment reader, which recognises the
   alignment formats (Stockholm, aligned FASTA, Clustal, PHYLIP, SELEX, A2M, PSI-BLAST).
   Easel does not look for alignments in standard input or in a gzip stream, and neither
   does hmmgpu. An NCBI BLAST database is never guessed: it needs ``--tformat ncbi``.

Steps 1 and 2 are made here on the first bytes; step 3 asks pyhmmer's ``SequenceFile``
(Easel itself) with the file's path. A file of no sequences at all (empty, or only blank
lines) is given to the FASTA reader, which says so in its own words. hmmgpu reads gzip
by its magic bytes rather than by the ``.gz`` name, and ``-`` (standard input) the same way;
everything else follows Easel, so a file is read in the format hmmsearch would read it in.
"""
from __future__ import annotations

import contextlib
import os
import re
import stat

from hmmgpu.errors import InputError
from hmmgpu.formats.inputs import GZIP_MAGIC, byte_chunks, label_of

#: The format names ``--tformat``/``--qformat`` accept: the sequence and alignment formats
#: Easel reads (hmmsearch's list), and ``ncbi``, a BLAST database named by its base name.
SEQUENCE_FORMATS = ("fasta", "embl", "genbank", "ddbj", "uniprot", "daemon", "hmmpgmd", "stockholm", "pfam",
                    "a2m", "psiblast", "selex", "afa", "clustal", "clustallike", "phylip", "phylips", "ncbi")
#: Formats read from the files beside a base name, not from the bytes of one file.
PATH_ONLY_FORMATS = ("ncbi",)
_SUFFIX_FORMATS = {".fa": "fasta", ".gb": "genbank"}
_FIRST_LINE = re.compile(rb"[^\n]*[^ \t\n\r\v\f][^\n]*")   # the first line holding something but spaces


def format_name(name: str) -> str:
    """A format name as given (any case), checked against :data:`SEQUENCE_FORMATS`."""
    lowered = name.lower()
    if lowered not in SEQUENCE_FORMATS:
        raise InputError(f"{name} is not a recognized sequence database file format "
                         f"(choose from {', '.join(SEQUENCE_FORMATS)})")
    return lowered


def guess_format(path: str, head, *, plain_file: bool) -> str:
    """The format of the sequence file ``path`` whose first (decompressed) bytes are ``head``.

    ``plain_file``: ``path`` is a regular file, not gzip, that Easel may open itself to look
    for an alignment format (step 3 above)."""
    if path != "-":
        name = path[:-3] if len(path) > 3 and path.endswith(".gz") else path
        dot = name.rfind(".")
        if dot > 0 and name[dot:] in _SUFFIX_FORMATS:
            return _SUFFIX_FORMATS[name[dot:]]
    first = _FIRST_LINE.search(head)
    if first is None:
        return "fasta"   # no sequence at all: the FASTA reader says so
    line = first.group()
    if line.startswith(b">"):
        return "fasta"
    if line.startswith(b"ID   "):
        return "embl"
    if line.startswith(b"LOCUS   ") or b"Genetic Sequence Data Bank" in line:
        return "genbank"
    if plain_file:
        guessed = _easel_alignment_format(path)
        if guessed is not None:
            return guessed
    number = bytes(head[:first.start()]).count(b"\n") + 1
    shown = repr(bytes(line[:30]).rstrip(b"\r"))[1:]
    raise InputError(f"{label_of(path)}: unrecognized sequence file format (line {number} starts with {shown}); "
                     "name its format with --tformat (search) or --qformat (scan)")

def _easel_alignment_format(path: str) -> str | None:
    """The format Easel's own guess finds for the file at ``path``, or None."""
    import pyhmmer

    try:
        with pyhmmer.easel.SequenceFile(path, digital=True, alphabet=pyhmmer.easel.Alphabet.amino()) as fh:
            return fh.format
    except (ValueError, OSError, EOFError, RuntimeError, SystemError):
        return None


def sequence_format(path: str, given: str | None) -> str | None:
    """The format a sequence input will be read in: ``given`` (checked), else Easel's guess
    for a regular file; None for a stream (standard input, a pipe: guessed when its bytes
    are read, which can be done only once) and for a directory (a database made by
    ``hmmgpu makedb``, or an error when opened)."""
    if given is not None:
        return format_name(given)
    path = os.fspath(path)
    if path == "-":
        return None
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None   # the reader says why
    if not stat.S_ISREG(mode):
        return None
    with contextlib.closing(byte_chunks(path, "a sequence file")) as chunks:
        head = next(chunks, b"")
    return guess_format(path, head, plain_file=_magic(path) != GZIP_MAGIC)


def _magic(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read(len(GZIP_MAGIC))


__all__ = ["SEQUENCE_FORMATS", "PATH_ONLY_FORMATS", "format_name", "guess_format", "sequence_format"]
