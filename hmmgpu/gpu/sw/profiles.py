"""Query profiles of a batch of Smith-Waterman queries, built on the host into one buffer.

The kernel (:mod:`.source`) reads a query's scores from a profile in shared memory: one row
of 16-bit scores per residue code, and a 30th row (``PAD_ROW``) for padding. A query longer
than one tile of ``C = G * Q`` columns (its kernel's shape) has a row segment per tile, so
row x, tile k, word w holds the scores of query columns ``k*C + 2w`` (low half) and
``k*C + 2w + 1`` (high half) against residue code x. Rows are ``row_words(G, Q)`` words per
tile (``C/2`` rounded up to a multiple of 32, for the shared-memory banks); the words after
the tile's ``C/2`` are 0. Columns past the query's end and the padding row score ``PAD_SCORE``.

A batch's profiles go into one page-locked buffer, one after the other, so that a stream
uploads its share of the batch in one copy (:mod:`.launch`). :func:`layout` says where each
query's profile starts, and :func:`build` writes each in place with one gather: a table of
the scores' 16-bit halves (one row per profile row, one column per residue code and one for
the padding code) indexed by the query's codes padded to its tiles, then the two halves of
each word joined and written through a view of the buffer. That is four array operations a
query on arrays of the profile's size, with no temporary of 64-bit scores and no copy of a
finished profile; numpy releases the interpreter's lock inside them, and the scan's thread,
which builds the next batch while the GPU scans the last, needs no compiled code (numba is
not imported on the GPU's path). The 2,000-query benchmark's profiles used to take 5.4 s
(a dozen operations a query, while the tracebacks' threads held the lock).
"""
from __future__ import annotations

import numpy as np

from hmmgpu.gpu.sw.source import NROWS, PAD_ROW, PAD_SCORE, row_words


def layout(lengths, specs) -> tuple:
    """(tiles, words) of a batch's profiles: each query's tile count, and where each profile
    starts in the batch's buffer (``words[r]`` to ``words[r + 1]``; ``words[-1]``: the total)."""
    n = len(specs)
    tiles = np.array([max(1, -(-int(L) // s.C)) for L, s in zip(lengths, specs)], np.int64)
    per_row = np.array([row_words(s.G, s.Q) for s in specs], np.int64)
    words = np.zeros(n + 1, np.int64)
    np.cumsum(NROWS * tiles * per_row, out=words[1:])
    return tiles, words


def score_halves(by_code: np.ndarray) -> np.ndarray:
    """(NROWS, codes + 1) uint32: the low 16 bits of ``S(x, c)`` for profile row x and residue
    code c; the padding row and the last column (the padding code) hold ``PAD_SCORE``'s."""
    table = np.full((NROWS, by_code.shape[1] + 1), PAD_SCORE, np.int64)
    table[:by_code.shape[0], :by_code.shape[1]] = by_code
    table[PAD_ROW] = PAD_SCORE
    return (table & 0xFFFF).astype(np.uint32)


def build(queries, by_code: np.ndarray, specs, tiles: np.ndarray, words: np.ndarray, out: np.ndarray) -> None:
    """Write the profiles of ``queries`` (Easel codes; kernel shapes ``specs``; :func:`layout`'s
    ``tiles`` and ``words``) into ``out`` (uint32, at least ``words[-1]`` long)."""
    halves = score_halves(by_code)
    pad = halves.shape[1] - 1
    for q, spec, T, a, b in zip(queries, specs, tiles.tolist(), words[:-1].tolist(), words[1:].tolist()):
        C, half = spec.C, spec.C // 2
        codes = np.full(T * C, pad, np.intp)
        codes[:q.size] = q
        cols = halves[:, codes]
        dest = out[a:b].reshape(NROWS, T, -1)
        dest[:, :, :half] = (cols[:, 0::2] | (cols[:, 1::2] << 16)).reshape(NROWS, T, half)
        dest[:, :, half:] = 0
