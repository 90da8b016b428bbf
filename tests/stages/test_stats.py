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


@pytest.mark.parametrize("tau,lam,F", [(-3.5, 0.71, 1e-5), (-4.2, 0.69, 1e-3), (-2.0, 0.7, 0.5), (-5.1, 0.72, 1e-12),
                                       (-3.5, 0.71, 1.0)])
def test_exponential_threshold_brackets_the_forward_filter_test(tau, lam, F):
    """The Forward filter's band (``esl_exp_surv``): below it every bit score fails P <= F3, at
    its top it passes, and inside it the decision changes once; F3 = 1 passes everything."""
    lo, hi = stats.score_threshold(tau, lam, F, "exponential")
    if F >= 1.0:
        assert lo == hi == -np.inf
        assert stats.passes_exponential(np.array([-1e30, -20.0, 0.0, 5.0], F32), np.zeros(4, F32), tau, lam, F).all()
        return
    below = float(np.nextafter(F32(lo), F32(-np.inf)))
    assert stats.exp_surv(below, tau, lam) > F
    assert stats.exp_surv(hi, tau, lam) <= F
    s, decisions = F32(lo), []
    while s < hi:
        decisions.append(stats.exp_surv(float(s), tau, lam) <= F)
        s = np.nextafter(s, F32(np.inf))
    assert decisions == sorted(decisions) and decisions[-1] and not decisions[0]
    assert stats.exp_surv(tau - 1.0, tau, lam) == 1.0


def test_passes_exponential_equals_the_pipelines_arithmetic():
    """``passes_exponential`` on arrays equals p7_Pipeline's steps per target: a float
    subtraction, a double division by log 2 stored in a float, esl_exp_surv in double, P <= F3;
    around the threshold (every float step of the band), far from it and at a P-value equal to
    F3 itself (which passes)."""
    tau, lam = float(F32(-3.7)), float(F32(0.7113))
    F = 1e-5
    lo, hi = stats.score_threshold(tau, lam, F, "exponential")
    rng = np.random.default_rng(3)
    band = [F32(lo)]
    while band[-1] < hi:
        band.append(np.nextafter(band[-1], F32(np.inf)))
    bits = np.concatenate([np.array(band, F32), rng.uniform(-30, 60, 2000).astype(F32)])
    null = rng.uniform(-8, -1, bits.size).astype(F32)
    fwd = (bits.astype(np.float64) * stats.LOG2 + null).astype(F32)  # nats whose bit score lies near ``bits``
    got = stats.passes_exponential(fwd, null, tau, lam, F)
    want = [stats.exp_surv(stats.bits(float(f), float(n)), tau, lam) <= F for f, n in zip(fwd, null)]
    assert got.tolist() == want
    assert 0 < got.sum() < got.size
    s = stats.bits(float(fwd[0]), float(null[0]))
    P = stats.exp_surv(s, tau, lam)  # F3 equal to a target's own P-value: it passes (P <= F3)
    assert stats.passes_exponential(fwd[:1], null[:1], tau, lam, P)[0]
    assert not stats.passes_exponential(fwd[:1], null[:1], tau, lam, float(np.nextafter(P, 0.0)))[0]
