"""The clustering of sampled domains (hmmgpu.cpu.spensemble): the single linkage that tests
only pairs whose sequence spans could overlap gives Easel's clusters, numbers and order, as
``esl_cluster_SingleLinkage`` written out plainly here (every unclustered pair tested, the
top moved into each linked pair's slot during the scan). Libhmmer's own clustering is checked
through domain definition (tests/cpu/test_domaindef.py)."""
import numpy as np
import pytest

from hmmgpu.cpu.spensemble import linked, single_linkage


def easel_single_linkage(pairs):
    n = len(pairs)
    available = [n - v - 1 for v in range(n)]
    assignment = [0] * n
    stack, na, nc = [], n, 0
    while na > 0:
        na -= 1
        stack.append(available[na])
        while stack:
            v = stack.pop()
            assignment[v] = nc
            for z in range(na - 1, -1, -1):
                if linked(pairs, v, available[z]):
                    w = available[z]
                    available[z] = available[na - 1]
                    na -= 1
                    stack.append(w)
        nc += 1
    return assignment, nc


def sampled_pairs(rng, n, domains, spread):
    """``n`` segment pairs of 200 samples around ``domains`` domain positions (jittered ends,
    some diagonal shifts), as sampled traces give them, in sample order."""
    centres = rng.integers(1, spread, domains)
    lengths = rng.integers(8, 80, domains)
    d = rng.integers(0, domains, n)
    i = centres[d] + rng.integers(-6, 7, n)
    j = i + lengths[d] + rng.integers(-6, 7, n)
    k = 1 + rng.integers(0, 10, n) + rng.integers(0, 3, n) * 6
    m = k + (j - i) + rng.integers(-5, 6, n)
    out = np.stack([np.sort(rng.integers(0, 200, n)), np.maximum(i, 1), np.maximum(j, i + 1), k, np.maximum(m, k)],
                   axis=1)
    return out.astype(np.int32)


@pytest.mark.parametrize("seed", range(12))
def test_single_linkage_is_easels(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    pairs = sampled_pairs(rng, n, int(rng.integers(1, 12)), int(rng.integers(20, 2000)))
    assignment, nc = single_linkage(pairs)
    expected, expected_nc = easel_single_linkage(pairs)
    assert nc == expected_nc and assignment.tolist() == expected


def test_single_linkage_of_pairs_no_trace_gives_takes_the_full_scan():
    """A pair whose end lies before its start (no trace gives one) cannot be found by start:
    the clustering then tests every pair, as Easel does."""
    rng = np.random.default_rng(7)
    pairs = sampled_pairs(rng, 120, 4, 300)
    pairs[5, 2] = pairs[5, 1] - 3
    pairs[9, 4] = pairs[9, 3] - 2
    assignment, nc = single_linkage(pairs)
    expected, expected_nc = easel_single_linkage(pairs)
    assert nc == expected_nc and assignment.tolist() == expected
