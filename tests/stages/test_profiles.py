"""Quantized tables equal HMMER's: bytes against pyhmmer's rbv/sbv, words against libhmmer."""
import numpy as np
import pytest
from pyhmmer.plan7 import Background, Profile

from hmmgpu.stages import profiles as P
from hmmgpu.cpu.hmmerlib import HmmerModel
from tests.helpers import MODEL_NAMES, sample_hmm, sampled_hmm

MODELS = [(name, lambda n=name: sample_hmm(n)) for name in MODEL_NAMES] + [
    (f"sampled_M{M}", lambda M=M: sampled_hmm(M, M)) for M in (1, 2, 3, 4, 15, 16, 17, 33, 500, 1100)
]


def _destripe(arr, M, extra=0):
    Q = (arr.shape[1] // 16) - extra
    out = np.empty((arr.shape[0], M), arr.dtype)
    for k in range(1, M + 1):
        out[:, k - 1] = arr[:, 16 * ((k - 1) % Q) + (k - 1) // Q]
    return out


def _tables(hmm):
    gm = P.configured_profile(hmm)
    msc = P.match_scores(gm)
    return P.ByteProfile.from_scores(msc), P.WordProfile.from_scores(msc, P.transition_scores(hmm))


@pytest.mark.parametrize("name,load", MODELS, ids=[m[0] for m in MODELS])
def test_byte_tables_equal_pyhmmer(name, load):
    hmm = load()
    byte, _ = _tables(hmm)
    gm = Profile(hmm.M, hmm.alphabet)
    gm.configure(hmm, Background(hmm.alphabet), 100)
    om = gm.to_optimized()
    assert np.array_equal(byte.cost, _destripe(np.asarray(om.rbv), hmm.M))
    assert np.array_equal(byte.ssv_cost, _destripe(np.asarray(om.sbv).view(np.int8), hmm.M, extra=17))
    assert (byte.bias_b, byte.tbm_b, byte.tec_b, byte.base_b) == (om.bias_b, om.tbm, om.tec, om.base_b)


@pytest.mark.parametrize("name,load", MODELS, ids=[m[0] for m in MODELS])
def test_word_tables_equal_libhmmer(name, load):
    hmm = load()
    _, word = _tables(hmm)
    with HmmerModel(hmm) as ref:
        w = ref.word_tables()
    assert np.array_equal(word.rw, w["rw"])
    for row, label in enumerate(P.TW_ROWS):
        assert np.array_equal(word.tw[row], w["tw"][row]), label
    assert word.ddbound == w["ddbound"]
    assert (word.xw_e_move, word.xw_e_loop) == tuple(w["xw"][0])


def test_length_tables_equal_libhmmer():
    hmm = sample_hmm("PF02826")
    lengths = [1, 2, 3, 9, 10, 99, 100, 101, 325, 1000, 4560, 9999, 10000, 65535, 99999, 100000]
    tjb, xw, null = P.tjb_table(100000), P.xw_move_table(100000), P.null_table(100000)
    with HmmerModel(hmm) as ref:
        for L in lengths:
            assert (int(tjb[L]), int(xw[L]), np.float32(null[L])) == ref.length_scalars(L)[:2] + (np.float32(ref.length_scalars(L)[2]),)


def test_length_tables_over_arrays_equal_one_call_per_length():
    """The per-length tables made with Easel's array logs (the C library's logf/log in a C
    loop) are, bit for bit, those made with one ctypes call per length, for every length a
    target may have."""
    fast = P._length_tables(P.MAX_TARGET_LENGTH)
    slow = P._length_tables(P.MAX_TARGET_LENGTH, logs=P._logs_one_by_one())
    assert P._array_logs() is not P._logs_one_by_one()  # the arrays' path is the one in use
    for a, b in zip(fast, slow):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_spec_worked_examples():
    byte, word = _tables(sample_hmm("PF02826"))
    assert (byte.bias_b, byte.tbm_b, word.ddbound) == (15, 42, 6350)
    assert word.rw[0, 0] == -206
    assert list(P.tjb_table(100000)[[1, 10, 100, 1000, 10000, 100000]]) == [1, 6, 15, 25, 35, 45]


def test_stripe_layout():
    per_node = np.arange(1, 11).reshape(1, 10)  # nodes 1..10
    s = P.stripe(per_node, 4, pad=0)  # Q = 3
    assert s.shape == (1, 3, 4)
    assert s[0, 0].tolist() == [1, 4, 7, 10]
    assert s[0, 2].tolist() == [3, 6, 9, 0]


def test_roundf_is_half_away_from_zero():
    v = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997], dtype=np.float32)
    assert P.roundf(v).tolist() == [1.0, 2.0, 3.0, -1.0, -3.0, 0.0]
