"""Query profiles of a batch of Smith-Waterman queries, built on the host in one compiled call.

The kernel (:mod:`.source`) reads a query's scores from a profile in shared memory: one row
of 16-bit scores per residue code, and a 30th row (``PAD_ROW``) for padding. A query longer
than one tile of ``C = G * Q`` columns (its kernel's shape) has a row segment per tile, so
row x, tile k, word w holds the scores of query columns ``k*C + 2w`` (low half) and
``k*C + 2w + 1`` (high half) against residue code x. Rows are ``row_words(G, Q)`` words per
tile (a multiple of 32 plus an odd count, for the shared-memory banks); the words after the
tile's ``C/2`` are 0. Columns past the query's end and the padding row score ``PAD_SCORE``.

A batch's profiles go into one page-locked buffer, one after the other, so that a stream
uploads its share of the batch in one copy (:mod:`.launch`). :func:`layout` says where each
query's profile starts and :func:`build` writes them all in one call of a loop compiled by
numba, which holds no Python lock: building the profiles of one batch while the GPU scans
the batch before it costs the host a few microseconds a query, instead of a dozen array
operations per query in the interpreter (5.4 s for 2,000 queries, measured on the H200
machine while the tracebacks' threads held the lock too). The loop is compiled once and kept
in numba's cache, like the traceback's passes (:mod:`hmmgpu.sw._traceback_jit`).
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


def build(queries, by_code: np.ndarray, specs, tiles: np.ndarray, words: np.ndarray, out: np.ndarray) -> None:
    """Write the profiles of ``queries`` (Easel codes; kernel shapes ``specs``; :func:`layout`'s
    ``tiles`` and ``words``) into ``out`` (uint32, at least ``words[-1]`` long)."""
    from hmmgpu.gpu.sw import _profiles_jit

    n = len(specs)
    if not n:
        return
    codes = np.concatenate([np.asarray(q, np.uint8) for q in queries])
    code_at = np.zeros(n + 1, np.int64)
    np.cumsum([np.asarray(q).size for q in queries], out=code_at[1:])
    columns = np.array([s.C for s in specs], np.int64)
    per_row = np.array([row_words(s.G, s.Q) for s in specs], np.int64)
    _profiles_jit.build(codes, code_at, np.require(by_code, np.int32, ["C", "W"]), columns, tiles, per_row, words,
                        NROWS, PAD_ROW, PAD_SCORE, out)
