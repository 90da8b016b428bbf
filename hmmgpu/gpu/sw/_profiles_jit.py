"""The compiled loop of :mod:`hmmgpu.gpu.sw.profiles` (numba, cached on disk, no GIL held).

Imported on first use only (importing numba costs a few tenths of a second); the layout is
described in :mod:`hmmgpu.gpu.sw.profiles`.
"""
from __future__ import annotations

from numba import njit


@njit(cache=True, nogil=True)
def build(codes, code_at, by_code, columns, tiles, per_row, words, nrows, pad_row, pad_score, out):
    """Profile r (query ``codes[code_at[r]:code_at[r + 1]]``, ``columns[r]`` columns per tile,
    ``tiles[r]`` tiles, ``per_row[r]`` words per row and tile, ``nrows`` rows) into
    ``out[words[r]:words[r + 1]]``."""
    ncodes = by_code.shape[0]
    for r in range(columns.shape[0]):
        q = codes[code_at[r]:code_at[r + 1]]
        L = q.shape[0]
        C, T, W = columns[r], tiles[r], per_row[r]
        half = C // 2
        at = words[r]
        for x in range(nrows):
            for k in range(T):
                for w in range(W):
                    v = 0
                    if w < half:
                        j = k * C + 2 * w
                        lo = by_code[x, q[j]] if (x < ncodes and x != pad_row and j < L) else pad_score
                        hi = by_code[x, q[j + 1]] if (x < ncodes and x != pad_row and j + 1 < L) else pad_score
                        v = (lo & 0xFFFF) | ((hi & 0xFFFF) << 16)
                    out[at] = v
                    at += 1
