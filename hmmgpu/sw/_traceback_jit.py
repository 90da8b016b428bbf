"""The compiled passes of :mod:`hmmgpu.sw.traceback` (numba, cached on disk, no GIL held).

Imported by :func:`hmmgpu.sw.traceback.passes` on first use only: importing numba costs a few
tenths of a second, which ``hmmgpu sw`` spends in a thread beside its start-up. The module
text describes the algorithm; ``profile[x, j - 1]`` is ``S(x, q_j)`` for target code ``x``.
"""
from __future__ import annotations

import numpy as np
from numba import njit

NEG = -(1 << 30)


@njit(cache=True, nogil=True)
def forward(profile, t, go, ge, k, HC, FC):
    """Every row of the recurrence over the whole rectangle: the best score and its end cell
    (the first cell, rows in order, columns within a row, to reach it), with H and F of rows
    0, k, 2k, ... kept in ``HC`` and ``FC`` (full width)."""
    m = profile.shape[1]
    n = t.shape[0]
    H = np.zeros(m + 1, np.int64)
    F = np.full(m + 1, NEG, np.int64)
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
        if rbest > best:
            best, bi, bj = rbest, i, rj
        if i % k == 0:
            c = i // k
            for j in range(m + 1):
                HC[c, j] = H[j]
                FC[c, j] = F[j]
    return best, bi, bj


@njit(cache=True, nogil=True)
def block(profile, t, go, ge, r0, r1, m, HC, FC, c, dirs):
    """Rows r0+1..r1 over columns 1..m from checkpoint ``c`` (row r0): a direction byte per
    cell into dirs[0:r1-r0, 1:m+1] (bits 0-1: where H came from, 0 zero, 1 diagonal, 2 E,
    3 F; bit 2: E extended; bit 3: F extended)."""
    H = np.empty(m + 1, np.int64)
    F = np.empty(m + 1, np.int64)
    for j in range(m + 1):
        H[j] = HC[c, j]
        F[j] = FC[c, j]
    for i in range(r0 + 1, r1 + 1):
        row = profile[t[i - 1]]
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
                f = fe
                code |= 8
            else:
                f = fo
            F[j] = f
            dg = diag + row[j - 1]
            h = 0
            if dg > 0:
                h = dg
                code |= 1
            if E > h:
                h = E
                code = (code & 12) | 2
            if f > h:
                h = f
                code = (code & 12) | 3
            diag = up
            H[j] = h
            left = h
            d[j] = code


@njit(cache=True, nogil=True)
def walk(profile, t, go, ge, bi, bj, k, HC, FC, dirs, ops):
    """Walk back from (bi, bj), filling ``ops`` from the alignment's end; returns (columns, i, j)
    with (i, j) the last cell before the alignment's start. Each block of ``k`` rows the walk
    enters is recomputed up to the column where it enters (cells to the right of the walk
    feed none it visits)."""
    i, j = bi, bj
    state = 0  # 0: H, 1: E, 2: F
    nops = 0
    cur = -1
    while i > 0 and j > 0:
        b = (i - 1) // k
        if b != cur:
            cur = b
            r1 = b * k + k
            if r1 > bi:
                r1 = bi
            block(profile, t, go, ge, b * k, r1, j, HC, FC, b, dirs)
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
