"""The compiled selection of hits from a batch of scan scores (numba, cached on disk, no GIL held).

:func:`top_hits` finds, for every row of a batch (one query against every target), the at
most ``k`` targets scoring at least the row's threshold, best first: by score, then by
database index. It reads each row twice and sorts only the few candidates. The first read
keeps the ``k`` largest scores at or above the threshold in a min-heap: its top is then the
k-th best score (the threshold itself while fewer than ``k`` pass). The second read writes
every target at or above that score, ties included, as a sort key that orders by score
(descending), then database index (ascending); the first ``k`` keys after the sort are the
row's hits. A threshold made from an E-value (:func:`hmmgpu.sw.api.min_score`) leaves few
targets above it, and with a lax one (``-E 1e30``) the heap stays small (``k``) and most
scores fail its top at once, so a row costs about two reads of its scores whatever the
threshold, in the scan's thread, without holding the interpreter's lock.
"""
from __future__ import annotations

import numpy as np
from numba import njit

#: Sort keys: (SCORE_BOUND - score) in the high 32 bits, the database index in the low 32.
SCORE_BOUND = 1 << 30


@njit(cache=True, nogil=True)
def _sift_down(heap, size, at):
    v = heap[at]
    while True:
        child = 2 * at + 1
        if child >= size:
            break
        if child + 1 < size and heap[child + 1] < heap[child]:
            child += 1
        if heap[child] >= v:
            break
        heap[at] = heap[child]
        at = child
    heap[at] = v


@njit(cache=True, nogil=True)
def _kth_best(row, threshold, k, heap):
    """The k-th largest score of ``row`` among those >= ``threshold`` (``threshold`` when fewer
    than ``k`` are), and how many are >= ``threshold`` (counted up to ``k``)."""
    size = 0
    for c in range(row.shape[0]):
        v = row[c]
        if v < threshold:
            continue
        if size < k:
            at = size
            size += 1
            while at > 0:  # sift up
                parent = (at - 1) // 2
                if heap[parent] <= v:
                    break
                heap[at] = heap[parent]
                at = parent
            heap[at] = v
        elif v > heap[0]:
            heap[0] = v
            _sift_down(heap, size, 0)
    return (heap[0] if size == k else threshold), size


@njit(cache=True, nogil=True)
def top_hits(scores, positions, thresholds, k, hit_index, hit_score, counts):
    """Row r's hits into hit_index[r, :counts[r]] (database indices) and hit_score[r, ...]:
    the at most ``k`` columns scoring >= thresholds[r], best first (score, then database
    index ``positions[c]``). ``hit_index`` and ``hit_score`` have ``k`` columns."""
    b, n = scores.shape
    heap = np.empty(max(k, 1), np.int64)
    keys = np.empty(n, np.int64)
    for r in range(b):
        row = scores[r]
        kth, size = _kth_best(row, thresholds[r], k, heap)
        counts[r] = 0
        if size == 0:
            continue
        cand = 0
        for c in range(n):
            v = row[c]
            if v >= kth:
                keys[cand] = ((SCORE_BOUND - np.int64(v)) << 32) | positions[c]
                cand += 1
        chosen = keys[:cand]
        chosen.sort()
        take = min(k, cand)
        for h in range(take):
            hit_index[r, h] = chosen[h] & 0xFFFFFFFF
            hit_score[r, h] = SCORE_BOUND - (chosen[h] >> 32)
        counts[r] = take
