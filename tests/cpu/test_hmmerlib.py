"""The ctypes oracle (hmmgpu.cpu.hmmerlib) against pyhmmer and the numbers in docs/algorithms.md (§14)."""
import math
from pathlib import Path

import numpy as np
import pytest

pyhmmer = pytest.importorskip("pyhmmer")
from pyhmmer.easel import Alphabet, DigitalSequenceBlock, SequenceFile  # noqa: E402
from pyhmmer.plan7 import Background, Builder, HMMFile, Pipeline, Profile, Transitions  # noqa: E402

from hmmgpu.cpu import hmmerlib  # noqa: E402
from hmmgpu.constants import SCALE_W, STATUS_NORESULT, STATUS_OK, STATUS_RANGE  # noqa: E402
from hmmgpu.cpu.hmmerlib import HmmerModel, libhmmer_available  # noqa: E402

pytestmark = pytest.mark.skipif(not libhmmer_available(), reason="pyhmmer's bundled libhmmer is unavailable")

SAMPLES = Path(__file__).resolve().parents[2] / "pfam_samples"
MODELS = ["PF02826", "LuxC", "Thioesterase", "KR"]
LOG2 = 0.69314718055994529
ABC = Alphabet.amino()


@pytest.fixture(scope="module")
def proteome():
    with SequenceFile(str(SAMPLES / "938293.PRJEB85.HG003687.faa"), digital=True, alphabet=ABC) as f:
        return list(f)


def read_hmm(name):
    with HMMFile(str(SAMPLES / f"{name}.hmm")) as f:
        return f.read()


def pyhmmer_optimized(hmm):
    profile = Profile(hmm.M, ABC)
    profile.configure(hmm, Background(ABC), L=100)
    return profile, profile.to_optimized()


@pytest.fixture(scope="module", params=MODELS)
def model(request):
    hmm = read_hmm(request.param)
    profile, om = pyhmmer_optimized(hmm)
    with HmmerModel(hmm) as oracle:
        yield request.param, hmm, profile, om, oracle


def destripe(matrix, M, lanes=16):
    """pyhmmer's striped (Kp, lanes*Q) byte matrix -> (Kp, M), node k at column k-1."""
    a = np.asarray(matrix)
    q = a.shape[1] // lanes
    return a.reshape(a.shape[0], q, lanes).transpose(0, 2, 1).reshape(a.shape[0], -1)[:, :M]


def wordify(s):
    """HMMER's wordify on float32 scores: roundf(f32(scale_w*s)) saturated to int16."""
    v = (SCALE_W * np.asarray(s, dtype=np.float32)).astype(np.float64)
    r = np.sign(v) * np.floor(np.abs(v) + 0.5)
    return np.clip(np.nan_to_num(r, posinf=32767, neginf=-32768), -32768, 32767).astype(np.int16)


def test_msv_ssv_equal_pyhmmer(model, proteome):
    _, _, _, om, oracle = model
    for seq in proteome:
        codes = np.asarray(seq.sequence)
        om.L = len(seq)
        ssv_status, ssv = oracle.ssv(codes)
        msv_status, msv = oracle.msv(codes)
        ref_ssv, ref_msv = om.ssv_filter(seq), om.msv_filter(seq)
        assert ssv_status == (STATUS_NORESULT if math.isnan(ref_ssv) else STATUS_RANGE if ref_ssv == math.inf
                              else STATUS_OK), seq.name
        assert msv_status == (STATUS_RANGE if ref_msv == math.inf else STATUS_OK), seq.name
        assert (math.isnan(ssv) and math.isnan(ref_ssv)) or ssv == ref_ssv, seq.name
        assert msv == ref_msv, seq.name


def test_byte_tables_equal_pyhmmer(model):
    _, hmm, _, om, oracle = model
    tables = oracle.byte_tables()
    assert tables["rbv"].dtype == np.uint8 and tables["rbv"].shape == (29, hmm.M)
    assert np.array_equal(tables["rbv"], destripe(om.rbv, hmm.M))
    q = max(2, -(-hmm.M // 16))
    assert np.array_equal(tables["sbv"], destripe(np.asarray(om.sbv)[:, :16 * q].view(np.int8), hmm.M))
    assert (tables["tbm"], tables["tec"], tables["bias"], tables["base"]) == (om.tbm, om.tec, om.bias_b, om.base_b)


def test_word_tables(model):
    _, hmm, profile, om, oracle = model
    M = hmm.M
    tables = oracle.word_tables()
    assert tables["ddbound"] == om.ddbound_w
    msc = np.asarray(profile.emission_scores)[:, 0:2 * (M + 1):2]  # [x][k], k = 0..M
    assert np.array_equal(tables["rw"], wordify(msc[:, 1:]))
    # transitions from the HMM: tsc[k][t] = f32(log(t_k)) for k = 1..M-1 (row 0 is -inf), docs/algorithms.md §2.1 and §6.2
    t = np.asarray(hmm.transition_probabilities)
    tsc = np.full((M + 1, 7), -np.inf, dtype=np.float32)
    tsc[1:M] = [[math.log(float(p)) if p > 0 else -math.inf for p in row] for row in t[1:M]]
    w = wordify(tsc).astype(np.int32)
    tw = tables["tw"]
    pad = np.full(1, -32768)
    assert np.array_equal(tw[1], np.minimum(w[:M, Transitions.MM], 0))
    assert np.array_equal(tw[2], np.minimum(w[:M, Transitions.IM], 0))
    assert np.array_equal(tw[3], np.minimum(w[:M, Transitions.DM], 0))
    assert np.array_equal(tw[4], np.concatenate([np.minimum(w[1:M, Transitions.MD], 0), pad]))
    assert np.array_equal(tw[5], np.concatenate([np.minimum(w[1:M, Transitions.MI], 0), pad]))
    assert np.array_equal(tw[6], np.concatenate([np.minimum(w[1:M, Transitions.II], -1), pad]))
    assert np.array_equal(tw[7], np.concatenate([w[1:M, Transitions.DD], pad]))
    assert (tw[0] <= 0).all() and (tw[0] > -32768).all()
    assert tables["xw"].shape == (4, 2) and tuple(tables["xw"][0]) == (-500, -500)
    assert (tables["xw"][1:, 1] == 0).all()


def test_worked_example_pf02826():
    with HmmerModel(read_hmm("PF02826")) as oracle:
        assert oracle.M == 178
        words, bytes_ = oracle.word_tables(), oracle.byte_tables()
        assert words["rw"][0, 0] == -206 and words["ddbound"] == 6350
        assert bytes_["bias"] == 15 and bytes_["tbm"] == 42 and bytes_["rbv"][0, 0] == 16
        assert bytes_["sbv"][0, 0] == 1
        nodes = [1 + 12 * z for z in range(15)]  # docs/algorithms.md §3.6: rbv[A][0..14] are nodes 1, 13, ..., 169
        expected = [16, 15, 15, 16, 15, 16, 15, 17, 17, 18, 9, 17, 16, 18, 17]
        assert list(bytes_["rbv"][0, np.array(nodes) - 1]) == expected


def test_length_scalars():
    expected = {
        1: (1, -208, -1.3862944), 10: (6, -1058, -3.350997), 100: (15, -2551, -5.6101537),
        1000: (25, -4193, -7.908255), 10_000: (35, -5852, -10.21039), 100_000: (45, -7512, -12.512932),
    }
    with HmmerModel(read_hmm("KR")) as oracle:
        for L, (tjb, xw_move, nullsc) in expected.items():
            got = oracle.length_scalars(L)
            assert got[:2] == (tjb, xw_move), L
            assert np.float32(got[2]) == np.float32(nullsc), L
            assert oracle.word_tables()["xw"][1:, 0].tolist() == [xw_move] * 3


def test_evalue_parameters():
    hmm = read_hmm("PF02826")
    with HmmerModel(hmm) as oracle:
        params = oracle.evalue_parameters()
    expected = (-10.2529, 0.70685, -10.9073, 0.70685, -5.1587, 0.70685)  # STATS LOCAL lines of PF02826.hmm
    assert params == tuple(float(np.float32(v)) for v in expected)
    ev = hmm.evalue_parameters
    assert params[1:] == (ev.m_lambda, ev.v_mu, ev.v_lambda, ev.f_tau, ev.f_lambda)


def test_degenerate_targets_do_not_abort():
    with HmmerModel(read_hmm("PF02826")) as oracle:
        for codes in (np.full(1, 27, np.uint8), np.full(40, 27, np.uint8), np.zeros(1, np.uint8),
                      np.full(5, 28, np.uint8), np.full(3, 20, np.uint8)):
            assert oracle.null_score(codes) == oracle.length_scalars(len(codes))[2]
            assert oracle.ssv(codes)[0] in (STATUS_OK, STATUS_RANGE, STATUS_NORESULT)
            assert oracle.msv(codes)[0] in (STATUS_OK, STATUS_RANGE)
            assert oracle.viterbi_filter(codes)[0] in (STATUS_OK, STATUS_RANGE)
            assert math.isfinite(oracle.bias_filter_score(codes))
            assert len(oracle.score_all([codes])) == 1
        assert oracle.msv(np.full(1, 27, np.uint8)) == (STATUS_OK, pytest.approx(-13.859, abs=1e-3))  # docs/algorithms.md §5.4
        rows = oracle.score_all([np.zeros(0, np.uint8)])
        assert math.isnan(rows["null"][0]) and rows["vf_status"][0] == 0 and math.isnan(rows["vf"][0])
        with pytest.raises(ValueError):
            oracle.msv(np.zeros(0, np.uint8))
        with pytest.raises(ValueError):
            oracle.msv(np.full(3, 29, np.uint8))


def test_easel_exception_is_recorded_not_fatal():
    """p7_oprofile_Convert into a too-small profile throws an Easel exception, which must not abort."""
    lib = hmmerlib._lib()
    with HmmerModel(read_hmm("PF02826")) as oracle:
        small = lib.p7_oprofile_Create(1, oracle._abc)
        try:
            status = lib.p7_oprofile_Convert(oracle._gm, small)
        finally:
            lib.p7_oprofile_Destroy(small)
    assert status != STATUS_OK
    assert any("too small" in m for m in hmmerlib._messages)
    with pytest.raises(RuntimeError, match="too small"):
        hmmerlib._check(status, "p7_oprofile_Convert")
    assert not hmmerlib._messages


def test_close_is_idempotent():
    oracle = HmmerModel(read_hmm("Thioesterase"))
    oracle.close()
    oracle.close()
    with pytest.raises(ValueError):
        oracle.msv(np.zeros(5, np.uint8))


def gumbel_surv(x, mu, lam):
    """esl_gumbel_surv in double."""
    y = lam * (x - mu)
    try:
        ey = -math.exp(-y)
    except OverflowError:
        return 1.0
    return -ey if abs(ey) < 5e-9 else 1.0 - math.exp(ey)


def bits(score, base):
    return float(np.float32(float(np.float32(np.float32(score) - np.float32(base))) / LOG2))


def test_pipeline_counts(model, proteome):
    """Spec 7.3 cascade driven by the oracle gives hmmsearch's Passed MSV / bias / Vit counters."""
    name, hmm, _, _, oracle = model
    F1, F2 = 0.02, 1e-3
    mmu, mlambda, vmu, vlambda, _, _ = oracle.evalue_parameters()
    rows = oracle.score_all(np.asarray(seq.sequence) for seq in proteome)
    assert len(rows) == 2100
    real = rows["msv_status"] == STATUS_OK
    assert np.isfinite(rows["vf"][real]).all() and np.isfinite(rows["bias"]).all()
    assert set(np.unique(rows["vf_status"])) <= {STATUS_OK, STATUS_RANGE}
    assert (np.isinf(rows["vf"]) == (rows["vf_status"] == STATUS_RANGE)).all()
    n_msv = n_bias = n_vit = 0
    for r in rows:
        if gumbel_surv(bits(r["msv"], r["null"]), mmu, mlambda) > F1:
            continue
        n_msv += 1
        p = gumbel_surv(bits(r["msv"], r["bias"]), mmu, mlambda)
        if p > F1:
            continue
        n_bias += 1
        if p > F2 and gumbel_surv(bits(r["vf"], r["bias"]), vmu, vlambda) > F2:
            continue
        n_vit += 1
    counters = Pipeline(ABC).search_hmm(hmm, DigitalSequenceBlock(ABC, proteome)).__getstate__()["pipeline"]
    assert (n_msv, n_bias, n_vit) == (counters["n_past_msv"], counters["n_past_bias"], counters["n_past_vit"])
    if name == "PF02826":  # docs/algorithms.md §5.4 and §11.5
        assert (n_msv, n_bias, n_vit) == (130, 130, 48)
        assert np.count_nonzero(rows["ssv_status"] == STATUS_NORESULT) == 31
        assert np.count_nonzero(rows["ssv_status"] == STATUS_RANGE) == 4


def test_models_made_in_memory_keep_their_composition_and_statistics(proteome):
    """A model made by ``pyhmmer.plan7.Builder`` has more digits than its text keeps: the
    oracle's tables, composition (the bias filter's null model) and E-value parameters are the
    model's own, so its bias filter scores are those of hmmgpu's filters made from the model in
    memory (before, read back from the text, 594 of 600 of these differed), its Forward scores
    those of the CPU reference on the in-memory model's tables, and its byte and word tables
    equal hmmgpu's."""
    from hmmgpu.cpu.filters import bias_filter
    from hmmgpu.cpu.fwdback import ForwardTables, parse
    from hmmgpu.formats.seqdb import SequenceDB
    from hmmgpu.stages.profiles import ModelProfile, configured_profile

    db = SequenceDB.from_block(DigitalSequenceBlock(ABC, proteome))
    positions = np.arange(0, db.n, 70, dtype=np.int64)
    for k in range(0, 1000, 100):
        hmm = Builder(ABC).build(proteome[k], Background(ABC))[0]
        profile = ModelProfile.from_hmm(hmm)
        with HmmerModel(hmm) as model:
            ref = np.array([model.bias_filter_score(db.codes(int(p))) for p in positions], np.float32)
            assert np.array_equal(ref.view(np.uint32), bias_filter(profile, db, positions).view(np.uint32))
            assert np.array_equal(np.float32(model.evalue_parameters()), np.float32(profile.evalue_parameters))
            assert np.array_equal(model.byte_tables()["rbv"], profile.byte.cost)
            assert np.array_equal(model.word_tables()["rw"], profile.word.rw)
            tables = ForwardTables.from_optimized(configured_profile(hmm).to_optimized())
            for p in positions[:10]:
                codes = db.codes(int(p))
                status, score = model.forward_parser(codes)[:2]
                assert status == STATUS_OK and score.view(np.uint32) == parse(tables, codes, rows=False).score.view(np.uint32)
