"""Input files as bytes: a path, ``-`` for standard input, plain or gzip, with one-line errors.

hmmsearch and hmmscan read their inputs from a path or, given ``-``, from standard input,
and both accept gzip-compressed files. This module gives the two readers of hmmgpu
(:mod:`hmmgpu.formats.seqdb` and :mod:`hmmgpu.formats.hmmfile`) the bytes of such an input: either all of
them at once (:func:`read_bytes`: a memory map for a plain regular file, so that a large
FASTA file is not copied) or in chunks (:func:`byte_chunks`, for a profile file that may
be larger than memory). gzip is recognised by its magic bytes, not by the file name;
concatenated gzip members are read one after the other, as ``gzip -dc`` does, and a damaged
or truncated stream is an error, never a silently shorter input. Anything that is not a
regular file (``/dev/stdin``, a pipe, a process substitution) is read as a stream.
"""
from __future__ import annotations

import mmap
import os
import stat
import sys
import zlib
from typing import BinaryIO, Iterator

from hmmgpu.errors import InputError, one_line

GZIP_MAGIC = b"\x1f\x8b"
CHUNK = 1 << 20
#: The file that marks a directory as a database made by ``hmmgpu makedb`` (:mod:`hmmgpu.formats.seqdb`).
META_FILE = "hmmgpu-db.json"


def is_database_dir(path) -> bool:
    """True if path is a directory made by `hmmgpu makedb` (has hmmgpu-db.json)."""
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, META_FILE))


def memory_tmpdir() -> str | None:
    """Where temporary copies of an input go: ``/dev/shm`` (memory) where it can be written,
    else None (the system's temporary directory)."""
    return "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


def label_of(source) -> str:
    """How an input is named in messages: its path, or 'standard input' for ``-``."""
    return "standard input" if os.fspath(source) == "-" else os.fspath(source)


def check_readable(path: str, what: str) -> None:
    """One-line errors for a path that is missing, a directory or unreadable."""
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file or directory")
    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory, not {what}")
    if not os.access(path, os.R_OK):
        raise InputError(f"{path}: permission denied")


def _raw_chunks(stream: BinaryIO, label: str) -> Iterator[bytes]:
    while True:
        try:
            chunk = stream.read(CHUNK)
        except OSError as exc:
            raise InputError(f"{label}: cannot read: {exc.strerror or one_line(exc)}") from None
        if not chunk:
            return
        yield chunk


def gunzip_chunks(chunks: Iterator[bytes], label: str) -> Iterator[bytes]:
    """Decompress a gzip stream given in chunks: members one after the other, then only NUL
    padding; a damaged or truncated stream is a one-line error."""
    member = zlib.decompressobj(wbits=31)
    between = b""      # bytes after a finished member, not yet known to start another one
    padding = False    # a non-gzip tail was met: it may only hold NUL bytes
    try:
        for data in chunks:
            while data:
                if padding:
                    if data.strip(b"\0"):
                        raise InputError(f"{label}: corrupt gzip file (unexpected data after the compressed stream)")
                    break
                if member.eof:
                    between, data = between + data, b""
                    if len(between) < 2:
                        break
                    if between[:2] == GZIP_MAGIC:
                        member, data, between = zlib.decompressobj(wbits=31), between, b""
                    else:
                        padding, data, between = True, between, b""
                    continue
                out = member.decompress(data)
                if out:
                    yield out
                data = member.unused_data if member.eof else b""
    except zlib.error as exc:
        raise InputError(f"{label}: corrupt gzip file ({one_line(exc)})") from None
    if not member.eof:
        raise InputError(f"{label}: truncated gzip file (compressed data ends early)")
    if between.strip(b"\0"):
        raise InputError(f"{label}: corrupt gzip file (unexpected data after the compressed stream)")


def _open(source, what: str) -> tuple[BinaryIO, bool]:
    """An open binary stream of the source and whether it must be closed by the caller."""
    if os.fspath(source) == "-":
        return sys.stdin.buffer, False
    path = os.fspath(source)
    check_readable(path, what)
    try:
        return open(path, "rb"), True
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or one_line(exc)}") from None


def byte_chunks(source, what: str = "a file") -> Iterator[bytes]:
    """The (decompressed) bytes of a path or ``-``, in chunks of about a megabyte."""
    label = label_of(source)
    stream, owned = _open(source, what)
    try:
        raw = _raw_chunks(stream, label)
        first = next(raw, b"")
        while 0 < len(first) < 2:   # a pipe may deliver a single byte first
            more = next(raw, b"")
            if not more:
                break
            first += more
        rest = _chain(first, raw)
        yield from gunzip_chunks(rest, label) if first[:2] == GZIP_MAGIC else rest
    finally:
        if owned:
            stream.close()


def _chain(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    if first:
        yield first
    yield from rest


def read_bytes(source, what: str = "a file"):
    """All (decompressed) bytes of a path or ``-``: a read-only memory map for a plain regular file."""
    path = os.fspath(source)
    if path != "-":
        check_readable(path, what)
        try:
            with open(path, "rb") as fh:
                info = os.fstat(fh.fileno())
                if stat.S_ISREG(info.st_mode) and info.st_size > 0 and fh.read(2) != GZIP_MAGIC:
                    return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as exc:
            raise InputError(f"{path}: cannot read: {exc.strerror or one_line(exc)}") from None
    return b"".join(byte_chunks(source, what))


def rereadable(source: str) -> bool:
    """A made database or a regular file (not a pipe, a terminal or /dev/stdin): a second
    reader gets the same bytes."""
    try:
        return os.path.isdir(source) or stat.S_ISREG(os.stat(source).st_mode)
    except OSError:
        return False


__all__ = ["byte_chunks", "read_bytes", "gunzip_chunks", "check_readable", "label_of", "rereadable", "GZIP_MAGIC"]
