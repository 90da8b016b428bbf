"""HMMER 3.4's clustering of sampled domains into envelopes (``p7_spensemble_Cluster``, with
Easel's ``esl_cluster_SingleLinkage``) and ``region_trace_ensemble``'s domination filter:
the plain CPU reference.

What it computes
----------------
A region that may hold several domains is sampled 200 times (:mod:`hmmgpu.cpu.stotrace`);
each sampled domain is a segment pair ``(sample, i, j, k, m)``: its first and last M residue
on the target and node on the model. :func:`cluster` links two pairs that overlap by at least
80% of the smaller one both on the sequence and on the model and lie on nearby diagonals
(start or end diagonals within 4), takes the connected components (single linkage), keeps
those found in at least 25% of the samples, and gives each the widest endpoints that at
least 2% of its members share. :func:`dominant` then drops, of two envelopes overlapping by
80% on the sequence, the less probable one. What is left, in order of start, are the
region's domain envelopes (hmmer-domaindef-spec.md §2.7, §2.8).

Why the code looks as it does
-----------------------------
Everything is integer arithmetic and float compares, reproduced as HMMER writes them:

* the link ratios are ``(float) nov / (float) n < 0.8f``; the model overlap has no ``+ 1``
  (``min(m) - max(k)``), the sequence overlap has one;
* the components are numbered by Easel's stack algorithm (the stack of unclustered pairs
  holds ``n-1 .. 0``, index 0 on top; a linked pair is removed by moving the top into its
  slot), because the cluster numbers decide the order of clusters that start at the same
  residue: ``qsort`` by start alone, which glibc does as a stable merge sort;
* a cluster's sample count ``ninc`` counts changes of sample index along the pairs in
  insertion order; the endpoint threshold is ``(int) ceilf((float) ninc * 0.02f)``, with the
  first maximum of the histogram as the fallback (the end fallbacks count from ``jmin`` and
  ``mmin``, as HMMER's do); its posterior is ``(float) ninc / (float) nsamples``;
* the domination filter stops scanning the later envelopes of one at the first with an
  overlap of exactly 0 (negative overlaps do not stop it), and compares the overlap ratio
  with the double 0.8.

The pairs are int32 [n][5]: sample, i, j, k, m, in the order the samples were drawn.
"""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["MIN_OVERLAP", "MAX_DIAGDIFF", "MIN_POSTERIOR", "MIN_ENDPOINTP", "cluster", "dominant",
           "single_linkage", "linked"]

F32 = np.float32

#: ``p7_domaindef_Create``'s clustering parameters (of_smaller = TRUE throughout).
MIN_OVERLAP = F32(0.8)
MAX_DIAGDIFF = 4
MIN_POSTERIOR = F32(0.25)
MIN_ENDPOINTP = F32(0.02)


@njit(cache=True, nogil=True, error_model="numpy")
def linked(pairs, a, b):
    """``link_spsamples`` (of_smaller): whether pairs ``a`` and ``b`` are linked."""
    i1, j1, k1, m1 = pairs[a, 1], pairs[a, 2], pairs[a, 3], pairs[a, 4]
    i2, j2, k2, m2 = pairs[b, 1], pairs[b, 2], pairs[b, 3], pairs[b, 4]
    nov = min(j1, j2) - max(i1, i2) + 1
    n = min(j1 - i1 + 1, j2 - i2 + 1)
    if F32(nov) / F32(n) < MIN_OVERLAP:
        return False
    nov = min(m1, m2) - max(k1, k2)
    n = min(m1 - k1 + 1, m2 - k2 + 1)
    if F32(nov) / F32(n) < MIN_OVERLAP:
        return False
    if abs((i1 - k1) - (i2 - k2)) <= MAX_DIAGDIFF:
        return True
    return abs((j1 - m1) - (j2 - m2)) <= MAX_DIAGDIFF


@njit(cache=True, nogil=True, error_model="numpy")
def single_linkage(pairs):
    """``esl_cluster_SingleLinkage`` with :func:`linked`: (cluster of each pair int32 [n],
    number of clusters), numbered as Easel numbers them.

    Easel tests the popped pair against every pair still unclustered, from the top of that
    list down, and moves the top pair into the slot of each one it links. Only pairs whose
    sequence spans overlap can link (an overlap of 80% of the smaller), so here the test runs
    on those alone, found by start among the pairs sorted by it (a start within the longest
    span before the popped pair's, up to its end) where they are fewer than the pairs left,
    and the linked ones leave the list in the order Easel's scan meets them: by their slot,
    highest first (a slot below the scan's holds the pair it held when the scan began; every
    move fills a slot the scan has passed). The clusters, their numbers and the list's order
    are Easel's; only tests that must fail are not made (pairs with an end before their start,
    which no trace gives, take Easel's full scan)."""
    n = pairs.shape[0]
    available = np.empty(n, dtype=np.int32)
    slot = np.empty(n, dtype=np.int32)  # each unclustered pair's slot in ``available``, -1 once clustered
    for v in range(n):
        available[v] = n - v - 1
        slot[n - v - 1] = v
    longest = 1
    full_scan = False
    for v in range(n):
        longest = max(longest, pairs[v, 2] - pairs[v, 1] + 1)
        full_scan = full_scan or pairs[v, 2] < pairs[v, 1] or pairs[v, 4] < pairs[v, 3]
    by_start = np.argsort(pairs[:, 1], kind="mergesort").astype(np.int32)
    starts = pairs[by_start, 1].copy()
    found = np.empty(n, dtype=np.int32)
    stack = np.empty(n, dtype=np.int32)
    assignment = np.empty(n, dtype=np.int32)
    na = n
    nb = 0
    nc = 0
    while na > 0:
        na -= 1
        stack[nb] = available[na]
        slot[available[na]] = -1
        nb += 1
        while nb > 0:
            nb -= 1
            v = stack[nb]
            assignment[v] = nc
            nf = 0
            lo = hi = 0
            if not full_scan:
                lo = np.searchsorted(starts, pairs[v, 1] - longest, side="left")
                hi = np.searchsorted(starts, pairs[v, 2], side="right")
            if full_scan or hi - lo >= na:  # Easel's scan, from the top: the slots come highest first
                for z in range(na - 1, -1, -1):
                    if linked(pairs, v, available[z]):
                        found[nf] = z
                        nf += 1
            else:
                for x in range(lo, hi):
                    w = by_start[x]
                    if slot[w] >= 0 and linked(pairs, v, w):
                        found[nf] = slot[w]
                        nf += 1
                found[:nf] = np.sort(found[:nf])[::-1]
            for f in range(nf):  # highest slot first, as Easel's scan meets them
                z = found[f]
                w = available[z]
                top = available[na - 1]
                available[z] = top
                slot[top] = z
                na -= 1
                slot[w] = -1
                stack[nb] = w
                nb += 1
        nc += 1
    return assignment, nc


@njit(cache=True, nogil=True, error_model="numpy")
def _first_argmax(counts):
    best = 0
    for z in range(1, counts.size):
        if counts[z] > counts[best]:
            best = z
    return best


@njit(cache=True, nogil=True, error_model="numpy")
def _endpoint(values, members, lo, hi, threshold, leftmost):
    """The widest endpoint with at least ``threshold`` members (leftmost for starts,
    rightmost for ends), else ``lo`` + the first maximum of the histogram."""
    counts = np.zeros(hi - lo + 1, dtype=np.int32)
    for h in members:
        counts[values[h] - lo] += 1
    if leftmost:
        for z in range(lo, hi + 1):
            if counts[z - lo] >= threshold:
                return z
    else:
        for z in range(hi, lo - 1, -1):
            if counts[z - lo] >= threshold:
                return z
    return lo + _first_argmax(counts)


@njit(cache=True, nogil=True, error_model="numpy")
def _significant(pairs, assignment, nc, nsamples):
    """The significant clusters, in cluster order: int32 [nsig][5] (i, j, k, m, cluster) and
    their posteriors float32 [nsig]."""
    n = pairs.shape[0]
    coords = np.empty((nc, 5), dtype=np.int32)
    probs = np.empty(nc, dtype=np.float32)
    # each cluster's members in increasing pair order, all clusters' in one array (a counting
    # sort by cluster: one pass over the pairs, not one a cluster)
    first = np.zeros(nc + 1, dtype=np.int64)
    for h in range(n):
        first[assignment[h] + 1] += 1
    for c in range(nc):
        first[c + 1] += first[c]
    filled = first[:nc].copy()
    by_cluster = np.empty(n, dtype=np.int32)
    for h in range(n):
        c = assignment[h]
        by_cluster[filled[c]] = h
        filled[c] += 1
    nsig = 0
    for c in range(nc):
        members = by_cluster[first[c]:first[c + 1]]
        ninc = 0
        last = -1
        for h in members:
            if pairs[h, 0] != last:
                ninc += 1
            last = pairs[h, 0]
        prob = F32(ninc) / F32(nsamples)
        if prob < MIN_POSTERIOR:
            continue
        threshold = np.int32(np.ceil(F32(ninc) * MIN_ENDPOINTP))
        ends = np.empty(4, dtype=np.int32)
        for f in range(4):
            values = pairs[:, f + 1]
            lo = values[members[0]]
            hi = lo
            for h in members:
                lo = min(lo, values[h])
                hi = max(hi, values[h])
            ends[f] = _endpoint(values, members, lo, hi, threshold, f == 0 or f == 2)
        if ends[0] > ends[1] or ends[2] > ends[3]:
            continue
        coords[nsig, :4] = ends
        coords[nsig, 4] = c
        probs[nsig] = prob
        nsig += 1
    return coords[:nsig], probs[:nsig]


def cluster(pairs, nsamples) -> tuple:
    """``p7_spensemble_Cluster`` on the segment pairs int32 [n][5] (sample, i, j, k, m) of
    ``nsamples`` sampled traces: the significant clusters sorted by start (stable), as
    (coordinates int32 [nc][5]: i, j, k, m, cluster number; posteriors float32 [nc])."""
    pairs = np.ascontiguousarray(pairs, dtype=np.int32).reshape(-1, 5)
    if pairs.shape[0] == 0:
        return np.empty((0, 5), np.int32), np.empty(0, np.float32)
    assignment, nc = single_linkage(pairs)
    coords, probs = _significant(pairs, assignment, nc, int(nsamples))
    order = np.argsort(coords[:, 0], kind="stable")
    return coords[order], probs[order]


def dominant(coords, probs) -> np.ndarray:
    """``region_trace_ensemble``'s domination filter on sorted clusters: the indices of those
    kept, in order. For d < d2 (the scan of d stopping at an overlap of exactly 0), of two
    envelopes overlapping by at least 80% of the shorter, the one with the lower posterior
    (``d`` on a tie) is dropped."""
    nc = len(probs)
    dropped = np.zeros(nc, dtype=bool)
    for d in range(nc):
        for d2 in range(d + 1, nc):
            i1, j1, i2, j2 = (int(v) for v in (coords[d, 0], coords[d, 1], coords[d2, 0], coords[d2, 1]))
            nov = min(j1, j2) - max(i1, i2) + 1
            if nov == 0:
                break
            n = min(j1 - i1 + 1, j2 - i2 + 1)
            if float(F32(nov) / F32(n)) >= 0.8:
                if probs[d] > probs[d2]:
                    dropped[d2] = True
                else:
                    dropped[d] = True
    return np.flatnonzero(~dropped)
