"""SELEX alignments read as protein sequences, as hmmsearch and hmmscan read them.

Why hmmgpu reads SELEX itself
-----------------------------
hmmsearch reads an alignment file of targets (``--tformat selex``, or a SELEX file Easel's
guess recognises) as the alignment's sequences without their gaps. hmmgpu hands every other
format to pyhmmer's reader, which is Easel's, but pyhmmer 0.12's SELEX reader fails on files
larger than about 4 MB (from standard input or gzip, smaller ones): SELEX parses a whole block
of lines at once from pointers into Easel's input buffer, and the buffer pyhmmer gives it
(fed from a Python file object, not mapped or slurped as hmmsearch's is) moves while the
block is read. It then raises Easel's "can't happen" error, or crashes the process. So SELEX
is read here, by the rules of Easel's ``esl_msafile_selex.c`` (Easel 0.49):

- a *block* is a run of lines up to a line of only spaces and tabs (or the end of the file);
  lines starting with ``#`` but not ``#=`` are comments, skipped anywhere;
- a block's lines are sequence lines, or annotation lines starting ``#=RF``, ``#=MM``,
  ``#=CS``, ``#=SS`` or ``#=SA`` (any other ``#=`` line is a sequence line whose name starts
  with ``#=``); ``#=SS`` and ``#=SA`` must follow a sequence line, at most one each per
  sequence, and at most one ``#=RF`` and one ``#=CS`` per block;
- a sequence line is a name (up to the first space or tab) and its aligned residues; a space
  inside them is a gap, as are ``-``, ``.`` and ``_``, and ``~`` is missing data;
- the first block sets the lines' kinds, their order and the names; every later block must
  have as many lines, of the same kinds in the same order, with the same names;
- each sequence is its residues over all blocks, gaps and missing data removed (Easel's
  ``esl_abc_XDealign``); letters of either case and ``*`` are residues, anything else on a
  sequence line is an error.

The sequences come out as FASTA text for hmmgpu's FASTA reader (names, no descriptions or
accessions, as Easel gives them for SELEX). tests/formats/test_selex.py checks the result against
pyhmmer's own reader on files small enough for it, and the searches against hmmsearch's.
"""
from __future__ import annotations

from hmmgpu.errors import InputError

#: The annotation lines of a block, by their first four bytes.
_ANNOTATIONS = (b"#=RF", b"#=MM", b"#=CS", b"#=SS", b"#=SA")
#: What a sequence line may hold besides letters: gaps (space, tab stays illegal), missing
#: data and the stop ``*``.
_GAPS = b" -._~"
_RESIDUES = bytes(range(ord("A"), ord("Z") + 1)) + bytes(range(ord("a"), ord("z") + 1)) + b"*"
_ALLOWED = frozenset(_GAPS + _RESIDUES)


def _lines(data: bytes):
    """(line number, line) of ``data``, without the line ends (``\\n`` or ``\\r\\n``)."""
    for number, line in enumerate(data.split(b"\n"), start=1):
        yield number, line[:-1] if line.endswith(b"\r") else line


def _blank(line: bytes) -> bool:
    return not line.strip(b" \t")


def _comment(line: bytes) -> bool:
    return line.startswith(b"#") and not line.startswith(b"#=")


def _blocks(data: bytes):
    """The blocks of ``data``: lists of (line number, line), comments left out."""
    block: list = []
    for number, line in _lines(data):
        if _comment(line):
            continue
        if _blank(line):
            if block:
                yield block
                block = []
            continue
        block.append((number, line))
    if block:
        yield block


def _kind(line: bytes) -> bytes:
    """A line's kind: its annotation tag (``#=RF`` ...), or ``SQ`` for a sequence line."""
    head = line[:4]
    return head if head in _ANNOTATIONS else b"SQ"


def _split(line: bytes) -> tuple:
    """A line's first token (split at spaces and tabs) and the bytes after it and the spaces
    and tabs that follow it."""
    rest = line.lstrip(b" \t")
    end = len(rest)
    for delimiter in (b" ", b"\t"):
        at = rest.find(delimiter)
        if at != -1:
            end = min(end, at)
    return rest[:end], rest[end:].lstrip(b" \t")


def selex_to_fasta(data: bytes, label: str) -> bytes:
    """The sequences of the SELEX alignment ``data`` (the bytes of ``label``) as FASTA text,
    gaps removed; a one-line :class:`InputError` where Easel refuses the file."""
    def refuse(number: int, why: str):
        raise InputError(f"{label}: not a valid selex file (line {number}: {why})")

    kinds, names, residues = None, [], []
    for block in _blocks(bytes(data)):
        block_kinds = [_kind(line) for _, line in block]
        first = kinds is None
        if first:  # the first block sets the kinds (checked here) and the names (taken below)
            kinds = block_kinds
            seen = {tag: 0 for tag in _ANNOTATIONS}
            sequences = 0
            for (number, _), kind in zip(block, kinds):
                if kind == b"SQ":
                    sequences += 1
                    seen[b"#=SS"] = seen[b"#=SA"] = 0
                    continue
                seen[kind] += 1
                if kind in (b"#=SS", b"#=SA") and not sequences:
                    refuse(number, f"{kind.decode()} must follow a sequence")
                if seen[kind] > 1 and kind != b"#=MM":
                    refuse(number, f"too many {kind.decode()} lines for " + ("seq" if kind in (b"#=SS", b"#=SA") else "block"))
        elif len(block) != len(kinds):
            refuse(block[0][0], f"expected {len(kinds)} lines in block, saw {len(block)}")
        seq = 0
        for (number, line), kind, expected in zip(block, block_kinds, kinds):
            if kind != expected:
                what = "sequence line" if kind == b"SQ" else f"{kind.decode()} line"
                refuse(number, f"{what} isn't in expected order in block")
            name, rest = _split(line)
            if rest and not rest.rstrip():  # Easel's "unexpected inconsistency" (hmmsearch stops there too)
                refuse(number, "only white space other than spaces and tabs after the name")
            if kind != b"SQ":
                continue
            if first:
                names.append(name)
                residues.append([])
            elif name != names[seq]:
                refuse(number, f"expected sequence {names[seq].decode(errors='replace')} at this line of block")
            rest = rest.rstrip()
            if not _ALLOWED.issuperset(rest):
                refuse(number, "illegal residue(s) in sequence line")
            residues[seq].append(rest.translate(None, _GAPS))
            seq += 1
    if kinds is None:
        raise InputError(f"{label}: contains no sequences")
    return b"".join(b">" + name + b"\n" + b"".join(parts) + b"\n" for name, parts in zip(names, residues))


__all__ = ["selex_to_fasta"]
