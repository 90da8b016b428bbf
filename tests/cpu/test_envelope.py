"""The envelope rescoring references bit for bit against libhmmer (hmmgpu.cpu.hmmerlib): full
Forward and Backward matrices (hmmgpu.cpu.fwdback.forward_matrix / backward_matrix, multihit
on a region and unihit on an envelope, the length model of the whole target), posterior
decoding (hmmgpu.cpu.decoding), optimal accuracy and its trace (hmmgpu.cpu.optacc): every
cell of every row, the scores, the trace's states, nodes, residues and posteriors, in IEEE
mode (pyhmmer's) and, where no flag sends the envelope to the host, flush-to-zero mode
(hmmsearch's)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hmmgpu.cpu import fwdback as ref
from hmmgpu.cpu.decoding import decode
from hmmgpu.cpu.hmmerlib import HmmerModel, libhmmer_available
from hmmgpu.cpu.optacc import oa_trace, optimal_accuracy
from hmmgpu.host import flush_to_zero
from tests.helpers import MODEL_NAMES, bits, sample_hmm, sampled_hmm, zero_tiny

pytestmark = pytest.mark.skipif(not libhmmer_available(), reason="pyhmmer's bundled libhmmer is unavailable")
STATUS_OK, STATUS_RANGE = 0, 16
HOMOLOGS = {"PF02826": [828, 1471, 112, 1210, 1327, 1616, 1121, 441]}


def same(a, b) -> bool:
    return np.array_equal(bits(a), bits(b))


def assert_matrix(mine: ref.StripedMatrix, theirs: ref.StripedMatrix, what, columns=6, ftz=False):
    """Every cell and special; under FTZ (``ftz``), ours with its tiny values set to 0."""
    tidy = zero_tiny if ftz else (lambda a: a)
    assert mine.dp.shape == theirs.dp.shape, what
    assert same(tidy(mine.dp), theirs.dp), what
    assert same(tidy(mine.xmx[:, :columns]), theirs.xmx[:, :columns]), what
    if columns == 6:
        assert same(mine.totscale, theirs.totscale) and mine.has_own_scales == theirs.has_own_scales, what


def compare_region(model, tables, codes, i, j):
    """Multihit full Forward and Backward matrices of ``i..j`` (a clustered region's)."""
    what = f"region {i}..{j} of L={codes.size} M={tables.M}"
    fwd = ref.forward_matrix(tables, codes, i, j)
    bck = ref.backward_matrix(tables, codes, fwd, i, j)
    status, score, theirs = model.forward_matrix(codes, i, j)
    assert status == (STATUS_RANGE if fwd.flags & ref.RANGE else STATUS_OK) and same(fwd.score, score), what
    assert_matrix(fwd.matrix, theirs, what)
    status, score, theirs = model.backward_matrix(codes, i, j)
    assert same(bck.score, score), what
    assert_matrix(bck.matrix, theirs, what)
    return fwd, bck


def rescore(tables, codes, i, j):
    """The references' chain of rescore_isolated_domain: Forward, Backward, decoding, OA, trace."""
    uni = ref.unihit_tables(tables)
    xf = ref.special_transitions(uni, codes.size)
    fwd = ref.forward_matrix(tables, codes, i, j, unihit=True)
    bck = ref.backward_matrix(tables, codes, fwd, i, j, unihit=True)
    status, pp = decode(fwd, bck, xf[1, 1])
    out = dict(forward=fwd, backward=bck, decoding_status=status, posterior=pp, oasc=None, oa=None, trace=None)
    if status == STATUS_OK:
        out["oasc"], out["oa"] = optimal_accuracy(pp, uni.tfv, xf)
        out["trace"] = oa_trace(out["oa"], pp, uni.tfv, xf, uni.M).shifted(i - 1)
    return out


def assert_envelope(mine, theirs, what, ftz=False):
    tidy = zero_tiny if ftz else (lambda a: a)
    for name in ("forward", "backward", "posterior"):
        assert_matrix(mine[name].matrix, theirs[name], (what, name), ftz=ftz)
    assert same(mine["forward"].score, theirs["envsc"]), what
    assert mine["decoding_status"] == theirs["decoding_status"], what
    if mine["decoding_status"] != STATUS_OK:
        return
    assert same(mine["oasc"], theirs["oasc"]), what
    assert_matrix(mine["oa"].matrix, theirs["oa"], (what, "oa"), columns=5)
    a, b = mine["trace"], theirs["trace"]
    assert a.N == b.N and np.array_equal(a.st, b.st) and np.array_equal(a.k, b.k), what
    assert np.array_equal(a.i, b.i) and same(tidy(a.pp), b.pp), what


def compare_envelope(model, tables, codes, i, j):
    """Unihit rescoring of the envelope ``i..j`` against libhmmer's, in both float modes."""
    what = f"envelope {i}..{j} of L={codes.size} M={tables.M}"
    mine = rescore(tables, codes, i, j)
    assert_envelope(mine, model.envelope(codes, i, j), what)
    flags = mine["oa"].flags if mine["oa"] is not None else mine["posterior"].flags
    if not flags & ref.HOST:
        with flush_to_zero():
            theirs = model.envelope(codes, i, j)
        assert_envelope(mine, theirs, what + " (FTZ)", ftz=True)
    return mine


def envelopes_of(model, codes):
    """libhmmer's own envelopes of a target (p7_domaindef_ByPosteriorHeuristics)."""
    return [(d["ienv"], d["jenv"]) for d in model.domain_definition(codes)["domains"]]


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_envelopes_on_the_proteome(name, proteome):
    """Every 150th protein and the model's homologs (14+ real proteins a model): the whole
    target and a middle slice multihit; the target's own envelopes (libhmmer's domain
    definition), the whole target and a slice unihit."""
    checked = 0
    with HmmerModel(sample_hmm(name)) as model:
        tables = ref.ForwardTables.from_hmmer(model)
        for t in sorted(set(range(0, proteome.n, 150)) | set(HOMOLOGS.get(name, []))):
            codes = proteome.codes(t)
            L = codes.size
            mid = (max(1, L // 4), max(1, L // 4) + L // 2)
            compare_region(model, tables, codes, 1, L)
            compare_region(model, tables, codes, *mid)
            for i, j in envelopes_of(model, codes) + [(1, L), mid]:
                compare_envelope(model, tables, codes, i, j)
                checked += 1
    assert checked >= 28


@pytest.mark.parametrize("M,seed", [(1, 1), (2, 2), (5, 3), (18, 2), (101, 5)])
def test_envelopes_generated_cases(M, seed):
    """Sampled models (one node to 26 vectors: padding lanes, models without an I state)
    against random targets, degenerate codes, a lone residue, runs of each node's best
    residue (rescaled rows), a lone '*' and a run of '*' (eslERANGE, subnormal cells)."""
    from tests.gpu.fwdback_checks import fwd_case

    hmm, db = fwd_case(M, seed, n_random=6, max_len=200, homolog=max(3 * M, 80), stops=True)
    with HmmerModel(hmm) as model:
        tables = ref.ForwardTables.from_hmmer(model)
        for t in range(db.n):
            codes = db.codes(t)
            L = codes.size
            compare_region(model, tables, codes, 1, L)
            for i, j in {(1, L), (1 + L // 3, L - L // 3), (L, L)}:
                compare_envelope(model, tables, codes, i, j)


@settings(max_examples=30, deadline=None)
@given(M=st.integers(1, 60), seed=st.integers(1, 10 ** 6),
       codes=st.lists(st.integers(0, 28), min_size=1, max_size=120), cut=st.tuples(st.floats(0, 1), st.floats(0, 1)))
def test_envelopes_generated(M, seed, codes, cut):
    """Sampled models of any size against arbitrary sequences (every code) and any slice."""
    codes = np.array(codes, np.uint8)
    L = codes.size
    i, j = sorted(1 + int(c * (L - 1)) for c in cut)
    with HmmerModel(sampled_hmm(M, seed)) as model:
        tables = ref.ForwardTables.from_hmmer(model)
        compare_region(model, tables, codes, i, j)
        compare_envelope(model, tables, codes, i, j)


def test_slices_are_checked():
    with HmmerModel(sampled_hmm(10, 1)) as model:
        tables = ref.ForwardTables.from_hmmer(model)
    codes = np.arange(20, dtype=np.uint8)
    for i, j in ((0, 5), (6, 5), (1, 21)):
        with pytest.raises(ValueError):
            ref.forward_matrix(tables, codes, i, j)
    fwd = ref.forward_matrix(tables, codes, 1, 10)
    with pytest.raises(ValueError):
        ref.backward_matrix(tables, codes, fwd, 1, 11)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_rescore_isolated_domain_gives_libhmmers_domains(name, proteome):
    """rescore_isolated_domain on every domain libhmmer's p7_domaindef_ByPosteriorHeuristics
    defines on every 20th protein and the homologs: envsc, oasc, iali, jali and domcorrection
    (null2 given: libhmmer's n2sc) equal its dcl entry; on targets with no clustered region,
    null2 by expectation (ours) gives its n2sc over the envelope, bit for bit."""
    from hmmgpu.cpu.envelope import rescore_isolated_domain

    domains = own_null2 = 0
    with HmmerModel(sample_hmm(name)) as model:
        tables = ref.ForwardTables.from_hmmer(model)
        for t in sorted(set(range(0, proteome.n, 20)) | set(HOMOLOGS.get(name, []))):
            codes = proteome.codes(t)
            dd = model.domain_definition(codes)
            for d in dd["domains"]:
                i, j = d["ienv"], d["jenv"]
                r = rescore_isolated_domain(tables, codes, i, j, null2_is_done=True, n2sc=dd["n2sc"])
                assert not r.dropped and (r.iali, r.jali) == (d["iali"], d["jali"]), (t, d)
                assert same([r.envsc, r.oasc, r.domcorrection], [d["envsc"], d["oasc"], d["domcorrection"]]), (t, d)
                assert r.n2sc is None and r.trace.i.max() <= j
                domains += 1
                if not dd["nclustered"]:
                    r = rescore_isolated_domain(tables, codes, i, j)
                    assert same(r.n2sc, dd["n2sc"][i:j + 1]) and same(r.domcorrection, d["domcorrection"]), (t, d)
                    own_null2 += 1
    assert domains >= 40 and own_null2 >= 40, (domains, own_null2)


def test_rescore_drops_an_overflowing_domain():
    """A lone '*' (every path impossible): decoding returns eslERANGE, as libhmmer's, and the
    domain is dropped; a clustered envelope needs its n2sc."""
    from hmmgpu.cpu.envelope import rescore_isolated_domain

    with HmmerModel(sampled_hmm(12, 3)) as model:
        tables = ref.ForwardTables.from_hmmer(model)
        codes = np.array([3, 5, 27, 7], np.uint8)
        r = rescore_isolated_domain(tables, codes, 3, 3)
        assert r.dropped and r.trace is None and model.envelope(codes, 3, 3)["decoding_status"] == STATUS_RANGE
        with pytest.raises(ValueError):
            rescore_isolated_domain(tables, codes, 1, 4, null2_is_done=True)


@pytest.mark.parametrize("M,seed", [(5, 3), (18, 2), (101, 5)])
def test_references_under_ftz_are_hmmsearchs(M, seed, proteome):
    """Run under flush-to-zero (hmmsearch's mode), the references' numba code is libhmmer's
    flush-to-zero run, flagged or not: every matrix, score, oasc and trace on generated
    targets (with the '*' runs that the flags send to the host) and PF02826's homologs."""
    from tests.gpu.fwdback_checks import fwd_case

    hmm, db = fwd_case(M, seed, n_random=4, max_len=200, homolog=max(3 * M, 80), stops=True)
    cases = [(hmm, db.codes(t)) for t in range(db.n)]
    if M == 101:
        cases += [(sample_hmm("PF02826"), proteome.codes(t)) for t in HOMOLOGS["PF02826"][:3]]
    for model_hmm, codes in cases:
        with HmmerModel(model_hmm) as model:
            tables = ref.ForwardTables.from_hmmer(model)
            L = codes.size
            for i, j in {(1, L), (1 + L // 3, L - L // 3)} | set(envelopes_of(model, codes)):
                with flush_to_zero():
                    mine = rescore(tables, codes, i, j)
                    theirs = model.envelope(codes, i, j)
                assert_envelope(mine, theirs, f"FTZ envelope {i}..{j} of L={L} M={tables.M}")
