"""The compiled passes of :mod:`hmmgpu.sw.traceback` (numba, cached on disk, no GIL held).

Imported by :func:`hmmgpu.sw.traceback.passes` on first use only: importing numba costs a few
tenths of a second, which ``hmmgpu sw`` spends in a thread beside its start-up. The module
text of :mod:`hmmgpu.sw.traceback` describes the algorithm; ``profile[x, j - 1]`` is
``S(x, q_j)`` for target code ``x``.

:func:`trace_group` traces back a group of hits of one query in one call: for each hit, the
pass that finds the end cell (stopping there, the scan's score being known), the walk, the
alignment's columns, BLAST's counts and the check that the columns score the scan's score.
One call per group of hits, not per hit, keeps the Python interpreter's lock out of the
threads' way: the only Python work per hit left is the :class:`~hmmgpu.sw.traceback.Alignment`
made from the results.

What a fresh machine pays. The passes compile at the first traceback on a machine (then
numba's cache has them): 8.5 s of CPU on the development machine as first written, 5.7-6.5 s
now, in a thread beside the first search's scans. The code keeps numba's work down where
that costs nothing at run time: each function has one specialisation (no constant passed
as a Python int, which numba would compile separately: :data:`ROW_ZERO`, :data:`NO_STOP`),
and arrays are made with ``np.empty`` and filled by a slice assignment rather than with
``np.zeros`` or ``np.full``, whose implementations numba compiles as functions of their own
for every shape and type.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

NEG = -(1 << 30)
#: The first row and a ``stop`` no cell reaches, as int64 values rather than Python ints:
#: numba compiles a function once more for each call site that passes a constant (a literal
#: type), and :func:`block` and :func:`forward` are each called from two.
ROW_ZERO = np.int64(0)
NO_STOP = np.int64(1 << 62)
#: Columns of :func:`trace_group`'s result rows.
STATUS, SCORE, Q_START, Q_END, T_START, T_END, LENGTH, IDENTITIES, POSITIVES, MISMATCH, GAPOPEN, GAPS, OPS_AT = \
    range(13)
FIELDS = 13
#: Statuses: the hit traced back; no cell reached the scan's score; a cell passed it; the
#: columns do not score the scan's score.
OK, NOT_REACHED, EXCEEDED, RESCORE = 0, 1, 2, 3


@njit(cache=True, nogil=True)
def forward(profile, t, go, ge, k, HC, FC, stop):
    """The recurrence over the rows in order, score only, with H and F of rows 0, k, 2k, ...
    kept in ``HC`` and ``FC`` (full width); it stops at the first cell (rows in order, columns
    within a row) whose H reaches ``stop``. Returns (H there, or the best H of all cells when
    none does; its row; its column)."""
    m = profile.shape[1]
    n = t.shape[0]
    H = np.empty(m + 1, np.int64)
    F = np.empty(m + 1, np.int64)
    H[:] = 0
    F[:] = NEG
    for j in range(m + 1):
        HC[0, j] = 0
        FC[0, j] = NEG
    best, bi, bj = 0, 0, 0
    for i in range(1, n + 1):
        row = profile[t[i - 1]]
        diag = 0
        E = NEG
        left = 0
        rbest, rj = 0, 0
        for j in range(1, m + 1):
            up = H[j]
            e1 = E - ge
            e2 = left - go
            E = e1 if e1 > e2 else e2
            f1 = F[j] - ge
            f2 = up - go
            f = f1 if f1 > f2 else f2
            F[j] = f
            h = diag + row[j - 1]
            if h < 0:
                h = 0
            if E > h:
                h = E
            if f > h:
                h = f
            diag = up
            H[j] = h
            left = h
            if h > rbest:
                rbest, rj = h, j
                if h >= stop:
                    return h, i, j
        if rbest > best:
            best, bi, bj = rbest, i, rj
        if i % k == 0:
            c = i // k
            for j in range(m + 1):
                HC[c, j] = H[j]
                FC[c, j] = F[j]
    return best, bi, bj


@njit(cache=True, nogil=True, inline="always")
def _step(H, F, d, c, diag, left, E, score, go, ge):
    """Cell c of a row from its neighbours: the row above in H[c] and F[c] (overwritten by
    this row's), the diagonal, the left H and the running E. Its direction byte goes to d[c].
    Returns (H, E, the row above's H: the next cell's diagonal)."""
    up = H[c]
    eo = left - go
    ee = E - ge
    ext_e = ee > eo
    E = ee if ext_e else eo
    fo = up - go
    fe = F[c] - ge
    ext_f = fe > fo
    f = fe if ext_f else fo
    dg = diag + score
    h = dg if dg > 0 else 0
    src = 1 if dg > 0 else 0
    src = 2 if E > h else src
    h = E if E > h else h
    src = 3 if f > h else src
    h = f if f > h else h
    F[c] = f
    H[c] = h
    d[c] = src | (4 if ext_e else 0) | (8 if ext_f else 0)
    return h, E, up


@njit(cache=True, nogil=True)
def block(profile, t, go, ge, r0, r1, m, H, F, dirs, stop):
    """Rows r0+1..r1 over columns 1..m from H and F of row r0 (``H``, ``F``: updated in
    place), a direction byte per cell into dirs[0:r1-r0, 1:m+1] (bits 0-1: where H came
    from, 0 zero, 1 diagonal, 2 E, 3 F; bit 2: E extended; bit 3: F extended). It stops at
    the first cell (rows in order, columns within a row) whose H reaches ``stop`` and returns
    (H there, its row, its column), or (0, 0, 0) when none does.

    Rows go two at a time, the second one column behind the first: cell (i, j) and cell
    (i + 1, j - 1) depend on none of each other, so the processor overlaps the two chains of
    dependent operations along the rows (each cell waits for its left neighbour). The second
    row reads the first's H and F from the same arrays, written one step earlier. A last odd
    row goes alone."""
    i = r0 + 1
    while i < r1:
        row_a, row_b = profile[t[i - 1]], profile[t[i]]
        dir_a, dir_b = dirs[i - r0 - 1], dirs[i - r0]
        diag_a = diag_b = 0
        E_a = E_b = NEG
        left_a = left_b = 0
        stop_b, stop_h = 0, 0
        for j in range(1, m + 2):
            if j <= m:
                left_a, E_a, diag_a = _step(H, F, dir_a, j, diag_a, left_a, E_a, row_a[j - 1], go, ge)
                if left_a >= stop:
                    return left_a, i, j
            if j >= 2:
                left_b, E_b, diag_b = _step(H, F, dir_b, j - 1, diag_b, left_b, E_b, row_b[j - 2], go, ge)
                if left_b >= stop and stop_b == 0:
                    stop_b, stop_h = j - 1, left_b
        if stop_b:
            return stop_h, i + 1, stop_b
        i += 2
    if i == r1:
        row, d = profile[t[i - 1]], dirs[i - r0 - 1]
        diag, E, left = 0, NEG, 0
        for j in range(1, m + 1):
            left, E, diag = _step(H, F, d, j, diag, left, E, row[j - 1], go, ge)
            if left >= stop:
                return left, i, j
    return 0, 0, 0


@njit(cache=True, nogil=True)
def walk(profile, t, go, ge, bi, bj, k, HC, FC, dirs, ops, cur):
    """Walk back from (bi, bj), filling ``ops`` from the alignment's end; returns (columns, i, j)
    with (i, j) the last cell before the alignment's start. ``cur``: the block of ``k`` rows
    whose directions ``dirs`` already holds (-1: none). Each other block the walk enters is
    recomputed from its kept row up to the column where the walk enters it (cells to the right
    of the walk feed none it visits)."""
    i, j = bi, bj
    state = 0  # 0: H, 1: E, 2: F
    nops = 0
    H = np.empty(bj + 1, np.int64)
    F = np.empty(bj + 1, np.int64)
    while i > 0 and j > 0:
        b = (i - 1) // k
        if b != cur:
            cur = b
            r1 = b * k + k
            if r1 > bi:
                r1 = bi
            for c in range(j + 1):
                H[c] = HC[b, c]
                F[c] = FC[b, c]
            block(profile, t, go, ge, b * k, r1, j, H, F, dirs, NO_STOP)
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


@njit(cache=True, nogil=True)
def best_score(profile, t, go, ge):
    """The optimal local score (one score-only pass, nothing kept)."""
    HC = np.empty((1, profile.shape[1] + 1), np.int32)
    FC = np.empty((1, profile.shape[1] + 1), np.int32)
    return forward(profile, t, go, ge, t.shape[0] + 1, HC, FC, NO_STOP)[0]


@njit(cache=True, nogil=True)
def _trace_one(profile, q, by_code, t, go, ge, score, dir_bytes, ops, out):
    """One hit (see :func:`trace_group`): ``ops`` receives its columns in order; fills ``out``
    (one result row) and returns the number of columns."""
    m, n = profile.shape[1], t.shape[0]
    if n * (m + 1) <= dir_bytes:
        # one pass with a direction byte per cell, up to the end cell; the walk reads them
        k = n
        HC = np.empty((1, m + 1), np.int32)
        FC = np.empty((1, m + 1), np.int32)
        H = np.empty(m + 1, np.int64)
        F = np.empty(m + 1, np.int64)
        HC[:] = 0
        FC[:] = NEG
        H[:] = 0
        F[:] = NEG
        dirs = np.empty((n, m + 1), np.uint8)
        h, bi, bj = block(profile, t, go, ge, ROW_ZERO, n, m, H, F, dirs, score)
        cur = 0
    else:
        # kept rows about sqrt(n) apart (further where they would pass dir_bytes), blocks
        # recomputed by the walk
        k = max(1, int(math.sqrt(n)), -(-n * (m + 1) * 8 // dir_bytes))
        HC = np.empty((n // k + 1, m + 1), np.int32)
        FC = np.empty((n // k + 1, m + 1), np.int32)
        h, bi, bj = forward(profile, t, go, ge, k, HC, FC, score)
        if h < score:
            bi = 0
        dirs = np.empty((k, m + 1), np.uint8)
        cur = -1
    out[SCORE] = h
    if bi == 0:
        out[STATUS] = NOT_REACHED
        return 0
    if h > score:
        out[STATUS] = EXCEEDED
        return 0
    rev = np.empty(bi + bj, np.uint8)
    nops, i, j = walk(profile, t, go, ge, bi, bj, k, HC, FC, dirs, rev, cur)
    ident = pos = aligned = runs = total = 0
    prev = 0
    ti, qj = i, j
    for c in range(nops):
        op = rev[nops - 1 - c]
        ops[c] = op
        if op == 0:
            a, b = q[qj], t[ti]
            s = by_code[a, b]
            total += s
            aligned += 1
            if a == b:
                ident += 1
            if s > 0:
                pos += 1
            qj += 1
            ti += 1
        else:
            if op != prev:
                runs += 1
            if op == 1:
                qj += 1
            else:
                ti += 1
        prev = op
    gaps = nops - aligned
    out[STATUS] = OK if total - ge * gaps - (go - ge) * runs == score else RESCORE
    out[Q_START], out[Q_END], out[T_START], out[T_END] = j + 1, bj, i + 1, bi
    out[LENGTH], out[IDENTITIES], out[POSITIVES] = nops, ident, pos
    out[MISMATCH], out[GAPOPEN], out[GAPS] = aligned - ident, runs, gaps
    return nops


@njit(cache=True, nogil=True)
def trace_group(profile, q, by_code, residues, starts, scores, go, ge, dir_bytes, ops, out):
    """Trace back hits of one query: target h is ``residues[starts[h]:starts[h + 1]]`` and its
    scan score ``scores[h]``. Row h of ``out`` (FIELDS columns) receives the status,
    coordinates (1-based, inclusive), counts, and where its columns start in ``ops`` (each
    hit's columns follow the last's; ``ops`` holds at least the sum of the hits' lengths).
    Returns the number of columns written."""
    at = 0
    for h in range(scores.shape[0]):
        t = residues[starts[h]:starts[h + 1]]
        out[h, OPS_AT] = at
        at += _trace_one(profile, q, by_code, t, go, ge, scores[h], dir_bytes, ops[at:], out[h])
    return at
