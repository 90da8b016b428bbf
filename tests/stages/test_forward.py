"""hmmgpu.stages.forward: the per-length special transitions of one target (numpy scalars, the
per-target path of the post-filter) are the bits of the same lengths' array form, multihit and
unihit (libhmmer's own values are checked on the array form in tests/gpu/test_fwdback.py); the
Forward scores of many targets at once are the bits of each target's own (whose equality with
libhmmer's is checked there too)."""
import numpy as np

from hmmgpu.stages.forward import (backward_score_from_scales, forward_score, forward_scores, forward_totscale,
                                   forward_totscales, length_specials, plus_logs)


def test_one_length_equals_the_array_form():
    lengths = np.concatenate([np.arange(0, 1001), np.random.default_rng(2).integers(1001, 200001, 200)])
    for nj in (np.float32(1.0), np.float32(0.0)):
        pmove, ploop = length_specials(lengths, nj)
        for L, mv, lp in zip(lengths.tolist(), pmove.tolist(), ploop.tolist()):
            one = length_specials(L, nj)
            assert all(type(v) is np.float32 for v in one)
            assert (one[0], one[1]) == (np.float32(mv), np.float32(lp)), L
        one = length_specials(np.int64(lengths[-1]), nj)
        assert one == (pmove[-1], ploop[-1])


def test_many_scores_at_once_equal_each_targets_own():
    rng = np.random.default_rng(5)
    counts = rng.integers(0, 40, 3000)
    counts[rng.random(counts.size) < 0.6] = 0  # most targets have no rescaled row
    # scale factors as the kernel keeps them (1 / xE of a rescaled row: below 1e-4), spread wide
    scales = (10.0 ** rng.uniform(-30, -4, int(counts.sum()))).astype(np.float32)
    starts = np.cumsum(counts) - counts
    xc = (10.0 ** rng.uniform(-20, 4, counts.size)).astype(np.float32)
    pmove = (10.0 ** rng.uniform(-5, -1, counts.size)).astype(np.float32)
    last = (xc * pmove).astype(np.float32)
    got = forward_scores(scales, starts, counts, last)
    want = np.array([forward_score(scales[a:a + c], x, p) for a, c, x, p in zip(starts, counts, xc, pmove)], np.float32)
    assert got.dtype == np.float32 and np.array_equal(got.view(np.uint32), want.view(np.uint32))
    # a subset, in another order, with the factors elsewhere in the array
    pick = rng.permutation(counts.size)[:500]
    assert np.array_equal(forward_scores(scales, starts[pick], counts[pick], last[pick]).view(np.uint32),
                          want[pick].view(np.uint32))
    assert forward_scores(scales, [], [], []).size == 0


def test_many_totscales_at_once_equal_each_passs_own():
    """forward_totscales (the full-matrix kernels' summaries, all jobs at once) gives each
    Forward pass's totscale and each Backward pass's (row L's factor first), bit for bit, and
    plus_logs ends a Backward score as backward_score_from_scales does."""
    rng = np.random.default_rng(7)
    counts = rng.integers(1, 30, 2000)
    scales = (10.0 ** rng.uniform(0, 30, int(counts.sum()))).astype(np.float32)   # 1 / xE or 1 / xB: above 1
    starts = np.cumsum(counts) - counts
    tot = forward_totscales(scales, starts, counts)
    xn = (10.0 ** rng.uniform(-30, 0, counts.size)).astype(np.float32)
    score = plus_logs(tot, xn)
    for k, (a, c) in enumerate(zip(starts, counts)):
        assert tot[k].view(np.uint32) == forward_totscale(scales[a:a + c]).view(np.uint32)
        btot, bscore = backward_score_from_scales(scales[a:a + c], xn[k])
        assert (tot[k].view(np.uint32), score[k].view(np.uint32)) == (btot.view(np.uint32), bscore.view(np.uint32))
    assert forward_totscales(scales, starts[:0], counts[:0]).size == 0
