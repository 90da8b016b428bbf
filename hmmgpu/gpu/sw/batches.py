"""Batches of queries for the Smith-Waterman scanners (no GPU needed: the CPU route uses them too).

A scanner answers a list of queries batch by batch: each :class:`ScoreBatch` holds the
scores of consecutive queries against every target, one row per query, the columns in the
scanner's own target order (``positions`` maps a column to its database index). The
application selects each query's hits from the rows without reordering them
(:mod:`hmmgpu.sw.api`).

:func:`plan` cuts the queries into batches: a batch closes when its cells (query residues x
database residues) reach a target, so that a batch keeps the GPU busy for a few tens of
milliseconds while the host works on the batch before it, or when its rows reach the memory
allowed for them; the first batches are smaller, so that the host's work starts early.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: Cells (query residues x database residues) of a full batch: about 40-60 ms of GPU scan at
#: 2,500-4,000 GCUPS, long enough that the per-batch costs (one wait, one copy back) vanish
#: and short enough that host and GPU take turns often.
BATCH_CELLS = 1.5e11
#: The first batch's share of :data:`BATCH_CELLS` (doubled batch after batch up to it).
FIRST_BATCH_SHARE = 1 / 8
#: Bytes of scores one batch may hold (rows x targets x 4 bytes, on the device and on the host).
BATCH_SCORE_BYTES = 64 << 20
#: Queries in one batch at most.
MAX_BATCH_QUERIES = 1024


@dataclass
class ScoreBatch:
    """The scores of queries ``start .. start + len(scores) - 1`` of a call (rows) against every
    target (columns, in the scanner's order: column c is database index ``positions[c]``; targets
    of length 0 have no column and score 0)."""

    start: int
    scores: np.ndarray  #: int32 (queries, columns); on the GPU valid until the next batch is asked for
    positions: np.ndarray  #: int64 database index of each column
    specs: list = field(default_factory=list)  #: kernel of each query (names; empty on the CPU)
    gpu_ms: float = 0.0  #: GPU busy time of the batch's scans (CUDA events; 0 on the CPU and the simulator)
    gpu_intervals: list = field(default_factory=list)  #: (start, stop) ms of each stream's scans
    profile_seconds: float = 0.0  #: host time building and staging the query profiles
    scan_seconds: float = 0.0  #: host time of the scan on the CPU route (pyopal)
    rescored: int = 0  #: targets rescored in 32-bit arithmetic (16-bit maximum at the limit)
    rescore_seconds: float = 0.0

    def __len__(self) -> int:
        return int(self.scores.shape[0])


def plan(lengths, residues: int, n_targets: int, cells: float = BATCH_CELLS, score_bytes: int = BATCH_SCORE_BYTES,
         max_queries: int = MAX_BATCH_QUERIES, first_share: float = FIRST_BATCH_SHARE) -> list:
    """(lo, hi) query ranges of the batches, in order, covering ``range(len(lengths))``."""
    lengths = [int(v) for v in lengths]
    rows = max(1, min(int(max_queries), int(score_bytes) // max(4 * int(n_targets), 1)))
    out, lo = [], 0
    target = max(cells * first_share, 1.0)
    while lo < len(lengths):
        hi, acc = lo, 0.0
        while hi < len(lengths) and hi - lo < rows and (hi == lo or acc < target):
            acc += lengths[hi] * float(residues)
            hi += 1
        out.append((lo, hi))
        lo = hi
        target = min(target * 2, cells)
    return out


def by_index(batch: ScoreBatch, n: int) -> list:
    """The batch's rows as int32 arrays by database index (``n`` entries, 0 where no column)."""
    out = []
    for row in batch.scores:
        full = np.zeros(n, np.int32)
        full[batch.positions] = row
        out.append(full)
    return out
