"""The ctypes bindings of HMMER's full-matrix and envelope functions (hmmgpu.cpu.hmmerlib:
``forward_matrix``, ``backward_matrix``, ``envelope``, ``null2_by_expectation``,
``domain_definition``) checked against each other and against the parsers: a full matrix's
special-state rows are the parser's, an envelope rescored through the bindings gives
domain definition's own ``dcl`` entry, and the model is left as hmmsearch configures it."""
import ctypes

import numpy as np
import pytest

from hmmgpu.cpu.hmmerlib import HmmerModel, libhmmer_available
from hmmgpu.cpu.optacc import STATE_B, STATE_E, STATE_M, STATE_S, STATE_T
from tests.helpers import bits, sample_hmm

pytestmark = pytest.mark.skipif(not libhmmer_available(), reason="pyhmmer's bundled libhmmer is unavailable")

HOMOLOGS = [828, 1471, 112, 1210, 1327, 1616, 1121, 441]  # PF02826's homologs in the sample proteome
_LIBM = ctypes.CDLL(None)
_LIBM.logf.restype, _LIBM.logf.argtypes = ctypes.c_float, [ctypes.c_float]


def glibc_logf(x) -> np.float32:
    return np.float32(_LIBM.logf(float(x)))


@pytest.fixture(scope="module")
def pf02826():
    with HmmerModel(sample_hmm("PF02826")) as model:
        yield model


def test_full_matrices_hold_the_parsers_rows(pf02826, proteome):
    """p7_Forward / p7_Backward on a whole target, multihit: the score and every special-state
    row equal p7_ForwardParser's / p7_BackwardParser's, and the model's configuration is restored."""
    for t in HOMOLOGS[:4] + [0, 7]:
        codes = proteome.codes(t)
        status, score, xmx, totscale = pf02826.forward_parser(codes)
        fstatus, fscore, fwd = pf02826.forward_matrix(codes)
        assert (fstatus, bits(fscore), bits(fwd.totscale)) == (status, bits(score), bits(totscale))
        assert np.array_equal(bits(fwd.xmx), bits(xmx)) and fwd.has_own_scales
        assert fwd.dp.shape == (codes.size + 1, 3, fwd.Q, 4) and not fwd.dp[0].any()
        bstatus, bscore, bxmx, btot, own = pf02826.backward_parser(codes)
        bstatus2, bscore2, bck = pf02826.backward_matrix(codes)
        assert (bstatus2, bits(bscore2), bits(bck.totscale), bck.has_own_scales) == \
            (bstatus, bits(bscore), bits(btot), own)
        assert np.array_equal(bits(bck.xmx), bits(bxmx))
        assert bits(pf02826.forward_parser(codes)[1]) == bits(score)


def test_envelopes_give_domain_definitions_entries(pf02826, proteome):
    """Every envelope of an unclustered region, rescored through ``envelope``: envsc, oasc,
    iali/jali (the OA trace's first and last M), domcorrection (glibc logf of null2 summed in
    float) equal libhmmer's own p7_domaindef_ByPosteriorHeuristics ``dcl`` entry."""
    checked = 0
    for t in HOMOLOGS:
        codes = proteome.codes(t)
        dd = pf02826.domain_definition(codes)
        assert dd["status"] == 0 and dd["nregions"] >= 1
        if dd["nclustered"]:
            continue
        for d in dd["domains"]:
            env = pf02826.envelope(codes, d["ienv"], d["jenv"])
            tr = env["trace"]
            assert tr.st[0] == STATE_S and tr.st[-1] == STATE_T
            assert (tr.st == STATE_B).sum() == 1 and (tr.st == STATE_E).sum() == 1
            emitted = tr.i[tr.st == STATE_M]
            assert (emitted.min(), emitted.max()) == (d["iali"], d["jali"])
            assert bits(env["envsc"]) == bits(d["envsc"]) and bits(env["oasc"]) == bits(d["oasc"])
            n2sc = [glibc_logf(env["null2"][x]) for x in codes[d["ienv"] - 1:d["jenv"]]]
            assert np.array_equal(bits(n2sc), bits(dd["n2sc"][d["ienv"]:d["jenv"] + 1]))
            correction = np.float32(0)
            for v in n2sc:
                correction = np.float32(correction + v)
            assert bits(correction) == bits(d["domcorrection"])
            assert np.array_equal(bits(pf02826.null2_by_expectation(env["posterior"])), bits(env["null2"]))
            checked += 1
    assert checked >= 8


def test_slices_are_checked(pf02826):
    codes = np.arange(20, dtype=np.uint8)
    for i, j in ((0, 5), (6, 5), (1, 21)):
        with pytest.raises(ValueError):
            pf02826.forward_matrix(codes, i, j)
