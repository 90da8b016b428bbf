"""The filter thresholds decide exactly as the pipeline's own double-precision test."""
import numpy as np
import pytest

from hmmgpu.stages import stats
from hmmgpu.stages.profiles import ModelProfile, msv_score, null_table, tjb_table
from tests.helpers import MODEL_NAMES, sample_hmm

F32 = np.float32


@pytest.mark.parametrize("mu,lam,F", [(-8.2, 0.69, 0.02), (-9.5, 0.71, 1e-3), (-4.0, 0.72, 1e-5), (3.0, 0.70, 0.5),
                                      (-11.3, 0.6931, 1e-8)])
def test_score_threshold_brackets_the_pipeline_test(mu, lam, F):
    lo, hi = stats.score_threshold(mu, lam, F)
    below = float(np.nextafter(F32(lo), F32(-np.inf)))
    assert stats.gumbel_surv(below, mu, lam) > F          # every score below the band fails
    assert stats.gumbel_surv(hi, mu, lam) <= F            # the band's top passes
    for s in (lo, hi):                                    # both ends are float32 values
        assert float(F32(s)) == s
    # inside the band the decision changes once, from fail to pass
    s, decisions = F32(lo), []
    while s < hi:
        decisions.append(stats.gumbel_surv(float(s), mu, lam) <= F)
        s = np.nextafter(s, F32(np.inf))
    assert decisions == sorted(decisions) and decisions[-1] and not decisions[0]


@pytest.mark.parametrize("name", MODEL_NAMES)
@pytest.mark.parametrize("F1", [0.02, 1e-4, 0.9])
def test_msv_thresholds_equal_a_search_of_every_value(name, F1):
    profile = ModelProfile.from_hmm(sample_hmm(name))
    mu, lam = profile.evalue_parameters[:2]
    lengths = np.array([1, 2, 7, 50, 199, 200, 201, 1000, 4096, 35000])
    got = stats.msv_thresholds(profile, int(lengths.max()), F1, lengths)
    tjb, null = tjb_table(int(lengths.max())), null_table(int(lengths.max()))
    for L in lengths:
        scores = msv_score(np.arange(256), np.full(256, tjb[L]))
        passing = [x for x in range(256) if stats.passes(float(scores[x]), float(null[L]), mu, lam, F1)]
        assert got[L] == (passing[0] if passing else 256), L
        if passing:   # the test is monotone in xJ: every value from the threshold on passes
            assert passing == list(range(passing[0], 256)), L
    others = np.setdiff1d(np.arange(int(lengths.max()) + 1), lengths)
    assert (got[others] == 256).all()
