"""hmmgpu's numba filters equal HMMER's own C functions on every target, statuses included."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from pyhmmer.easel import DigitalSequence, DigitalSequenceBlock


from hmmgpu.cpu import filters as cpu_filters
from hmmgpu.constants import STATUS_NORESULT, STATUS_OK, STATUS_RANGE
from hmmgpu.cpu.hmmerlib import HmmerModel
from hmmgpu.stages.profiles import ModelProfile, msv_score, null_table, tjb_table, viterbi_score, xw_move_table
from hmmgpu.formats.seqdb import SequenceDB
from tests.helpers import AMINO, MODEL_NAMES, adversarial_block, sample_hmm, sampled_hmm



def _scores(status, values):
    out = values.astype(np.float32)
    out[status == STATUS_RANGE] = np.inf
    out[status == STATUS_NORESULT] = np.nan
    return out


def _same(a, b):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return (a == b) | (np.isnan(a) & np.isnan(b))


def hmmgpu_scores(prof, db):
    """Every filter score of hmmgpu's numba backend, in the oracle's record layout."""
    idx = np.flatnonzero(db.lengths > 0)
    L = db.lengths[idx]
    tjb = tjb_table(int(db.max_length))[L]
    s_st, s_xj = cpu_filters.msv_filter(prof, db, idx, ssv_only=True)
    m_st, m_xj = cpu_filters.msv_filter(prof, db, idx)
    v_st, v_xc = cpu_filters.viterbi_filter(prof, db, idx)
    return idx, {
        "null": null_table(int(db.max_length))[L],
        "ssv_status": s_st, "ssv": _scores(s_st, msv_score(s_xj, tjb)),
        "msv_status": m_st, "msv": _scores(m_st, msv_score(m_xj, tjb)),
        "bias": cpu_filters.bias_filter(prof, db, idx),
        "vf_status": v_st, "vf": _scores(v_st, viterbi_score(v_xc, xw_move_table(int(db.max_length))[L])),
    }


def assert_equal_to_hmmer(hmm, db):
    prof = ModelProfile.from_hmm(hmm)
    idx, ours = hmmgpu_scores(prof, db)
    with HmmerModel(hmm) as ref_model:
        ref = ref_model.score_all(db.codes(int(t)) for t in idx)
    for field in ("null", "ssv", "msv", "bias", "vf"):
        same = _same(ours[field], ref[field])
        if f"{field}_status" in ours:
            same &= ours[f"{field}_status"] == ref[f"{field}_status"]
        bad = np.flatnonzero(~same)
        assert bad.size == 0, (
            f"{field}: {bad.size}/{idx.size} mismatches, first {db.name(int(idx[bad[0]]))}: "
            f"hmmgpu {ours[field][bad[0]]} vs HMMER {ref[field][bad[0]]}")
    return ours


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_proteome_equal_to_hmmer(name, proteome):
    ours = assert_equal_to_hmmer(sample_hmm(name), proteome)
    assert (ours["ssv_status"] == STATUS_OK).sum() > 2000  # the common path is exercised


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_adversarial_targets_equal_to_hmmer(name):
    hmm = sample_hmm(name)
    ours = assert_equal_to_hmmer(hmm, SequenceDB.from_block(adversarial_block(hmm)))
    assert (ours["msv_status"] == STATUS_RANGE).any()  # the planted homolog overflowed the bytes
    assert (ours["ssv_status"] == STATUS_NORESULT).any()  # and SSV handed at least one to MSV


@pytest.mark.parametrize("M", [1, 2, 16, 17, 33, 600, 2000])
def test_sampled_models_equal_to_hmmer(M):
    hmm = sampled_hmm(M, seed=M + 3)
    assert_equal_to_hmmer(hmm, SequenceDB.from_block(adversarial_block(hmm, seed=M)))


def test_ssv_precondition_failure_falls_back_to_msv():
    """Long model and long target: tjb + tbm + tec + bias >= 127, so SSV answers NORESULT."""
    hmm = sampled_hmm(3500, seed=11)
    rng = np.random.default_rng(0)
    block = DigitalSequenceBlock(AMINO, [DigitalSequence(AMINO, name=b"long", sequence=rng.integers(0, 20, 99000).astype(np.uint8))])
    ours = assert_equal_to_hmmer(hmm, SequenceDB.from_block(block))
    assert ours["ssv_status"][0] == STATUS_NORESULT


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.integers(0, 28), min_size=1, max_size=120), min_size=1, max_size=6))
def test_random_targets_equal_to_hmmer(seqs):
    hmm = sample_hmm("PF02826")
    block = DigitalSequenceBlock(AMINO, [
        DigitalSequence(AMINO, name=f"s{i}".encode(), sequence=np.array(s, np.uint8)) for i, s in enumerate(seqs)])
    assert_equal_to_hmmer(hmm, SequenceDB.from_block(block))
