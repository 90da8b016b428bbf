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

Memory stays bounded for any lengths: a first pass finds the score and the end cell with two
rows; a second pass over the rectangle up to the end cell keeps H and F at every ``k``-th row
(``k`` about the square root of the rows); the walk then recomputes one block of ``k`` rows
at a time, storing a direction byte per cell of that block only.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from hmmgpu.errors import HmmgpuError

NEG = -(1 << 30)
#: Alignment column kinds of :attr:`Alignment.ops`.
ALIGNED, QUERY_GAP_IN_TARGET, TARGET_GAP_IN_QUERY = 0, 1, 2


def _row(row, q, H, F, go, ge):
    """One row of the recurrence in place over H and F (the previous row in, this row out);
    its best score and the first column that reaches it."""
    diag = 0
    E = NEG
    left = 0
    best, bj = 0, 0
    for j in range(1, q.shape[0] + 1):
        up = H[j]
        E = max(E - ge, left - go)
        f = max(F[j] - ge, up - go)
        F[j] = f
        h = max(0, diag + row[q[j - 1]], E, f)
        diag = up
        H[j] = h
        left = h
        if h > best:
            best, bj = h, j
    return best, bj


def _end_cell(q, t, S, go, ge):
    """The optimal score and its end cell: the first (row, then column) to reach it."""
    m, n = q.shape[0], t.shape[0]
    H = np.zeros(m + 1, np.int64)
    F = np.full(m + 1, NEG, np.int64)
    best, bi, bj = 0, 0, 0
    for i in range(1, n + 1):
        h, j = _row(S[t[i - 1]], q, H, F, go, ge)
        if h > best:
            best, bi, bj = h, i, j
    return best, bi, bj


def _block(q, t, S, go, ge, r0, r1, m, Hin, Fin, dirs):
    """Rows r0+1..r1 from H, F of row r0; direction bytes into dirs[0:r1-r0, 1:m+1]."""
    H = Hin.copy()
    F = Fin.copy()
    for i in range(r0 + 1, r1 + 1):
        row = S[t[i - 1]]
        d = dirs[i - r0 - 1]
        diag = 0
        E = NEG
        left = 0
        for j in range(1, m + 1):
            up = H[j]
            code = 0
            eo = left - go
            ee = E - ge
            if ee > eo:
                E = ee
                code |= 4
            else:
                E = eo
            fo = up - go
            fe = F[j] - ge
            if fe > fo:
                F[j] = fe
                code |= 8
            else:
                F[j] = fo
            dg = diag + row[q[j - 1]]
            h = 0
            if dg > 0:
                h = dg
                code |= 1
            if E > h:
                h = E
                code = (code & 12) | 2
            if F[j] > h:
                h = F[j]
                code = (code & 12) | 3
            diag = up
            H[j] = h
            left = h
            d[j] = code
    return H, F


def _checkpoints(q, t, S, go, ge, n, m, k, HC, FC):
    """H and F of rows 0, k, 2k, ... up to row n (first m columns)."""
    H = np.zeros(m + 1, np.int64)
    F = np.full(m + 1, NEG, np.int64)
    HC[0] = H
    FC[0] = F
    for i in range(1, n + 1):
        _row(S[t[i - 1]], q[:m], H, F, go, ge)
        if i % k == 0:
            HC[i // k] = H
            FC[i // k] = F


def _walk(q, t, S, go, ge, bi, bj, k, HC, FC, dirs, ops):
    """Walk back from (bi, bj), filling ``ops`` from the alignment's end; returns
    (columns, i, j) with (i, j) the last cell before the alignment's start."""
    i, j = bi, bj
    state = 0  # 0: H, 1: E, 2: F
    nops = 0
    block = -1
    while i > 0 and j > 0:
        b = (i - 1) // k
        if b != block:
            block = b
            _block(q, t, S, go, ge, b * k, min(b * k + k, bi), bj, HC[b], FC[b], dirs)
        code = dirs[i - 1 - b * k, j]
        if state == 0:
            src = code & 3
            if src == 0:
                break
            if src == 1:
                ops[nops] = 0
                nops += 1
                i -= 1
                j -= 1
            else:
                state = src - 1
        elif state == 1:
            ops[nops] = 1
            nops += 1
            if (code & 4) == 0:
                state = 0
            j -= 1
        else:
            ops[nops] = 2
            nops += 1
            if (code & 8) == 0:
                state = 0
            i -= 1
    return nops, i, j


@functools.lru_cache(maxsize=None)
def _compiled():
    """The numba versions of the passes (compiled on first use, cached on disk)."""
    from numba import njit

    jit = njit(cache=True, nogil=True)
    jitted = dict(_block=jit(_block), _row=jit(_row))

    def bind(fn):  # the pure-Python pass calling the jitted helpers
        return type(fn)(fn.__code__, dict(fn.__globals__, **jitted), fn.__name__)

    return jit(bind(_end_cell)), jit(bind(_checkpoints)), njit(nogil=True)(bind(_walk))


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
        """(query letters row, target letters row) as Easel codes, -1 for a gap."""
        qi, ti = self.q_start - 1, self.t_start - 1
        qa = np.empty(self.ops.size, np.int64)
        ta = np.empty(self.ops.size, np.int64)
        for c, op in enumerate(self.ops.tolist()):
            if op != 2:
                qa[c] = q[qi]
                qi += 1
            else:
                qa[c] = -1
            if op != 1:
                ta[c] = t[ti]
                ti += 1
            else:
                ta[c] = -1
        return qa, ta


def align(q: np.ndarray, t: np.ndarray, by_code: np.ndarray, gap_open: int, gap_extend: int) -> Alignment:
    """The optimal local alignment of query codes ``q`` and target codes ``t`` (see the module text)."""
    end, chk, walk = _compiled()
    q = np.ascontiguousarray(q, dtype=np.uint8)
    t = np.ascontiguousarray(t, dtype=np.uint8)
    S = np.ascontiguousarray(by_code, dtype=np.int64)
    go, ge = int(gap_open) + int(gap_extend), int(gap_extend)
    best, bi, bj = end(q, t, S, go, ge)
    if best <= 0:
        return Alignment(0, 0, 0, 0, 0, np.zeros(0, np.uint8))
    k = max(1, int(math.isqrt(bi)))
    HC = np.empty((bi // k + 1, bj + 1), np.int64)
    FC = np.empty((bi // k + 1, bj + 1), np.int64)
    chk(q, t, S, go, ge, bi, bj, k, HC, FC)
    dirs = np.zeros((k, bj + 1), np.uint8)
    ops = np.empty(bi + bj, np.uint8)
    nops, i, j = walk(q, t, S, go, ge, bi, bj, k, HC, FC, dirs, ops)
    ops = ops[:nops][::-1].copy()
    aln = Alignment(int(best), int(j) + 1, int(bj), int(i) + 1, int(bi), ops)
    if rescore(aln, q, t, by_code, gap_open, gap_extend) != best:
        raise HmmgpuError("internal error: traceback does not reproduce the alignment score")
    return aln


def rescore(aln: Alignment, q, t, by_code, gap_open: int, gap_extend: int) -> int:
    """The score of an alignment's columns (a check of the walk)."""
    qa, ta = aln.columns(q, t)
    s = 0
    prev = 0
    for a, b, op in zip(qa.tolist(), ta.tolist(), aln.ops.tolist()):
        if op == 0:
            s += int(by_code[a, b])
        else:
            s -= gap_extend + (gap_open if op != prev else 0)
        prev = op
    return s
