"""Exact Smith-Waterman traceback of a reported hit: coordinates and alignment.

Recurrences (query residue j = 1..m across, target residue i = 1..n down; ``go`` = open +
extend is the cost of a gap's first residue, ``ge`` = extend of every further one)::

    E(i,j) = max(E(i,j-1) - ge, H(i,j-1) - go)       query residue against a target gap
    F(i,j) = max(F(i-1,j) - ge, H(i-1,j) - go)       target residue against a query gap
    H(i,j) = max(0, H(i-1,j-1) + S(q_j, t_i), E(i,j), F(i,j))

The score is the largest H; the alignment ends in the first cell that reaches it, scanning
target rows in order and query columns within a row (smallest target end, then smallest
query end). The walk back prefers, at every cell, the diagonal, then E, then F, and in a
gap state the gap's opening over its extension; it stops where H falls to 0.

Two passes, memory bounded for any lengths. The first pass runs the recurrence over the
whole rectangle with two rows, finds the score and the end cell, and keeps H and F of every
``k``-th row (``k`` about the square root of the target's length, larger where those rows
would pass :data:`CHECKPOINT_BYTES`). The walk then recomputes one block of ``k`` rows at a
time from the row kept above it, storing a direction byte per cell of that block only, and
only up to the column where the walk enters the block: no cell right of the walk feeds one it
visits. The query's scores against every target letter (:func:`query_profile`) are made once
per query and shared by its hits. The passes are compiled by numba (:mod:`._traceback_jit`)
and hold no GIL, so tracebacks of several hits run in parallel threads.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hmmgpu.errors import HmmgpuError

#: Alignment column kinds of :attr:`Alignment.ops`.
ALIGNED, QUERY_GAP_IN_TARGET, TARGET_GAP_IN_QUERY = 0, 1, 2
#: Bytes the kept rows of one traceback may take at most (H and F, 4 bytes each per column):
#: above it the rows are kept further apart.
CHECKPOINT_BYTES = 32 << 20


def passes():
    """The compiled passes (:mod:`._traceback_jit`: numba, compiled on first use and cached on
    disk; importing numba costs a few tenths of a second)."""
    from hmmgpu.sw import _traceback_jit

    return _traceback_jit


def warm() -> None:
    """Import numba and load (or compile, on a fresh machine) the compiled passes: ``hmmgpu sw``
    calls this in a thread while it starts, so the first traceback does not wait for it."""
    from hmmgpu.sw.matrices import load

    m = load("BLOSUM62").by_code
    q = np.array([1, 2, 3], np.uint8)
    align(q, q, m, 11, 1, profile=query_profile(q, m))


def query_profile(q: np.ndarray, by_code: np.ndarray) -> np.ndarray:
    """``S(x, q_j)`` for every target code x (rows) and query position j (columns), int32:
    made once per query and shared by the tracebacks of its hits."""
    return np.ascontiguousarray(np.asarray(by_code, np.int32)[:, np.asarray(q, np.intp)])


@dataclass(frozen=True)
class Alignment:
    """One local alignment: 1-based inclusive coordinates and the column kinds."""

    score: int
    q_start: int
    q_end: int
    t_start: int
    t_end: int
    ops: np.ndarray  #: uint8 per column: 0 aligned, 1 query residue vs gap, 2 target residue vs gap

    def columns(self, q, t):
        """(query letters row, target letters row) as Easel codes (int64), -1 for a gap."""
        ops = self.ops
        qa = np.full(ops.size, -1, np.int64)
        ta = np.full(ops.size, -1, np.int64)
        qs, ts = ops != 2, ops != 1
        qa[qs] = np.asarray(q)[self.q_start - 1:self.q_start - 1 + int(qs.sum())]
        ta[ts] = np.asarray(t)[self.t_start - 1:self.t_start - 1 + int(ts.sum())]
        return qa, ta

    def counts(self, q, t, by_code) -> tuple:
        """(columns, identities, positives, mismatches, gap runs, gap columns), BLAST's counts."""
        qa, ta = self.columns(q, t)
        ops = self.ops
        both = ops == 0
        same = both & (qa == ta)
        pos = int(np.count_nonzero(np.asarray(by_code)[qa[both], ta[both]] > 0))
        runs = int(np.count_nonzero((ops != 0) & np.concatenate([[True], ops[1:] != ops[:-1]])))
        aligned = int(both.sum())
        return ops.size, int(same.sum()), pos, aligned - int(same.sum()), runs, ops.size - aligned


def align(q: np.ndarray, t: np.ndarray, by_code: np.ndarray, gap_open: int, gap_extend: int,
          profile: np.ndarray | None = None) -> Alignment:
    """The optimal local alignment of query codes ``q`` and target codes ``t`` (see the module
    text); ``profile``: the query's :func:`query_profile`, when several targets share it."""
    jit = passes()
    # writable copies where needed (a made database's targets are read-only views, which numba
    # would compile the passes for once more)
    q = np.require(q, np.uint8, ["C", "W"])
    t = np.require(t, np.uint8, ["C", "W"])
    profile = query_profile(q, by_code) if profile is None else np.require(profile, np.int32, ["C", "W"])
    go, ge = int(gap_open) + int(gap_extend), int(gap_extend)
    m, n = q.size, t.size
    if not m or not n:
        return Alignment(0, 0, 0, 0, 0, np.zeros(0, np.uint8))
    k = max(1, int(math.isqrt(n)), -(-n * (m + 1) * 8 // CHECKPOINT_BYTES))
    HC = np.empty((n // k + 1, m + 1), np.int32)
    FC = np.empty((n // k + 1, m + 1), np.int32)
    best, bi, bj = jit.forward(profile, t, go, ge, k, HC, FC)
    if best <= 0:
        return Alignment(0, 0, 0, 0, 0, np.zeros(0, np.uint8))
    dirs = np.empty((k, bj + 1), np.uint8)
    ops = np.empty(bi + bj, np.uint8)
    nops, i, j = jit.walk(profile, t, go, ge, bi, bj, k, HC, FC, dirs, ops)
    ops = ops[:nops][::-1].copy()
    aln = Alignment(int(best), int(j) + 1, int(bj), int(i) + 1, int(bi), ops)
    if rescore(aln, q, t, by_code, gap_open, gap_extend) != best:
        raise HmmgpuError("internal error: traceback does not reproduce the alignment score")
    return aln


def rescore(aln: Alignment, q, t, by_code, gap_open: int, gap_extend: int) -> int:
    """The score of an alignment's columns (a check of the walk): matrix scores of the aligned
    columns, ``gap_extend`` per gap column and ``gap_open`` more where a gap run begins."""
    qa, ta = aln.columns(q, t)
    ops = aln.ops
    both = ops == 0
    opens = (ops != 0) & (ops != np.concatenate([[0], ops[:-1]]).astype(ops.dtype))
    return (int(np.asarray(by_code, np.int64)[qa[both], ta[both]].sum()) - int(gap_extend) * int((~both).sum())
            - int(gap_open) * int(opens.sum()))
