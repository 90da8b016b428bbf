"""The Backward parser's lane-exact CPU reference (:func:`hmmgpu.cpu.fwdback.backward`) bit for
bit against HMMER's own ``p7_BackwardParser`` (libhmmer through hmmgpu.cpu.hmmerlib, after its
``p7_ForwardParser`` on the same target): score, ``totscale``, ``has_own_scales`` and every
special-state row, in IEEE mode (pyhmmer's) and in flush-to-zero mode (hmmsearch's), on the
sample Pfam models against real proteins and on generated models and targets."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hmmgpu.cpu import fwdback as ref
from hmmgpu.cpu.hmmerlib import HmmerModel, libhmmer_available
from hmmgpu.host import flush_to_zero
from tests.helpers import MODEL_NAMES, adversarial_results, bits, sample_hmm, sampled_hmm, zero_tiny

pytestmark = pytest.mark.skipif(not libhmmer_available(), reason="pyhmmer's bundled libhmmer is unavailable")
STATUS_OK, STATUS_RANGE = 0, 16


def compare(model, tables, codes) -> ref.BackwardResult:
    """The reference's Backward against libhmmer's on one target, in IEEE mode and, for a
    target neither pass sends to the host, in flush-to-zero mode; returns the reference's."""
    forward = ref.parse(tables, codes)
    mine = ref.backward(tables, codes, forward)
    status, score, xmx, totscale, own = model.backward_parser(codes)
    what = f"L={codes.size} M={tables.M} flags={mine.flags} forward flags={forward.flags}"
    assert own == mine.has_own_scales, what
    if mine.flags & ref.RANGE:
        assert status == STATUS_RANGE and np.isnan(mine.score), what
    else:
        assert status == STATUS_OK and bits(mine.score) == bits(score), what
    assert bits(mine.totscale) == bits(totscale), what
    assert np.array_equal(bits(mine.xmx), bits(xmx)), what
    assert np.array_equal(bits(mine.xmx[:, ref.XSCALE]), bits(forward.xmx[:, ref.XSCALE])), what
    if not mine.needs_host:
        with flush_to_zero():
            status2, score2, xmx2, totscale2, own2 = model.backward_parser(codes)
        assert status2 == status and bits(score2) == bits(score) and bits(totscale2) == bits(totscale), what
        assert own2 == own and np.array_equal(bits(zero_tiny(mine.xmx)), bits(xmx2)), what
        # TINY_ROWS is exactly "hmmsearch's rows differ from pyhmmer's"
        assert bool(mine.flags & ref.TINY_ROWS) == (not np.array_equal(bits(xmx), bits(xmx2))), what
    return mine


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_backward_equals_libhmmer_on_the_proteome(name, proteome):
    """Every 7th protein of the sample proteome (300 real proteins), the 10 longest and every
    protein whose Forward rows rescale (the model's homologs), in both floating-point modes."""
    with HmmerModel(sample_hmm(name)) as model:
        tables = ref.ForwardTables.from_hmmer(model)
        rescaled = [i for i in range(proteome.n) if ref.parse(tables, proteome.codes(i), rows=False).scales.size]
        longest = np.argsort(-np.asarray(proteome.lengths), kind="stable")[:10].tolist()
        targets = sorted(set(range(0, proteome.n, 7)) | set(longest) | set(rescaled))
        results = [compare(model, tables, proteome.codes(i)) for i in targets]
    flags = np.array([r.flags | r.forward_flags for r in results])
    assert len(targets) >= 300 and not (flags & ref.HOST).any()
    assert len(rescaled) >= (0 if name == "Thioesterase" else 1)
    if name in ("PF02826", "KR"):  # homologs whose C state goes subnormal after many rescalings
        assert (flags & ref.TINY_ROWS).any()


@pytest.mark.parametrize("name", ["PF02826", "sampled"])
def test_backward_adversarial_targets(name):
    """Length 1, stops only (libhmmer: eslERANGE in both passes), all X, degenerate codes, gaps
    and missing data, a strong homolog repeated (many rescalings), 20,000 random residues,
    every code."""
    out = adversarial_results(name, compare)
    assert out["stop_only"].flags & ref.RANGE and out["stop_one"].flags & ref.RANGE
    assert (out["consensus_x3"].xmx[:, ref.XSCALE] > 1).sum() >= 2
    assert not out["random_20000"].needs_host


@pytest.mark.parametrize("M,seed", [(1, 1), (2, 2), (5, 3), (18, 2), (101, 5), (400, 6)])
def test_backward_generated_cases(M, seed):
    """Sampled models (one node to 100 vectors) against random targets, degenerate codes, a
    lone residue, a run of each node's best residue (from M = 18 the rows rescale), a lone '*'
    (eslERANGE) and 150 '*' between residues, whose I cells decay to subnormals in both passes
    (from M = 2, which has an I state): flagged, left to libhmmer."""
    from tests.gpu.fwdback_checks import fwd_case

    hmm, db = fwd_case(M, seed, n_random=8, max_len=300, homolog=max(3 * M, 80), stops=True)
    with HmmerModel(hmm) as model:
        tables = ref.ForwardTables.from_hmmer(model)
        out = [compare(model, tables, db.codes(i)) for i in range(db.n)]
    homolog, stop, stop_run = out[-3:]
    assert (homolog.xmx[:, ref.XSCALE] > 1).any() or M < 18
    assert stop.flags & ref.RANGE
    assert (stop_run.flags & ref.SUBNORMAL and stop_run.needs_host) or M == 1  # M = 1: no I state


def test_backward_long_model(proteome):
    """A sampled model of M = 1203 (301 vectors) on every 50th protein and the 5 longest."""
    hmm = sampled_hmm(1203, 9)
    longest = np.argsort(-np.asarray(proteome.lengths), kind="stable")[:5].tolist()
    with HmmerModel(hmm) as model:
        tables = ref.ForwardTables.from_hmmer(model)
        for i in sorted(set(range(0, proteome.n, 50)) | set(longest)):
            compare(model, tables, proteome.codes(i))


@settings(max_examples=40, deadline=None)
@given(M=st.integers(1, 130), seed=st.integers(1, 10 ** 6),
       codes=st.lists(st.integers(0, 28), min_size=1, max_size=250))
def test_backward_generated(M, seed, codes):
    """Sampled models of any size (Q from 2, padding lanes) against arbitrary digital
    sequences (every code, gaps, stops, missing data)."""
    with HmmerModel(sampled_hmm(M, seed)) as model:
        compare(model, ref.ForwardTables.from_hmmer(model), np.array(codes, np.uint8))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(1, 10 ** 6), start=st.integers(0, 170), n=st.integers(1, 400), copies=st.integers(1, 3))
def test_backward_homolog_fragments(proteome, seed, start, n, copies):
    """PF02826 against windows of its proteome homologs with random point changes, repeated
    up to 3 times (rescaled rows at varying places, Backward's values growing where Forward's
    scale factors fall)."""
    rng = np.random.default_rng(seed)
    hits = [828, 1471, 112, 1210, 1327, 1616, 1121, 441]  # homologs of PF02826 in the proteome
    target = proteome.codes(hits[seed % len(hits)]).copy()
    window = (target[start:start + n] if start < target.size else target).copy()
    flips = rng.integers(0, window.size, max(1, window.size // 20))
    window[flips] = rng.integers(0, 20, flips.size)
    with HmmerModel(sample_hmm("PF02826")) as model:
        compare(model, ref.ForwardTables.from_hmmer(model), np.tile(window, copies))


def test_backward_needs_the_forward_rows():
    """The Backward reference refuses a Forward result without rows or of another target."""
    with HmmerModel(sampled_hmm(10, 1)) as model:
        tables = ref.ForwardTables.from_hmmer(model)
    codes = np.arange(20, dtype=np.uint8)
    with pytest.raises(ValueError):
        ref.backward(tables, codes, ref.parse(tables, codes, rows=False))
    with pytest.raises(ValueError):
        ref.backward(tables, codes, ref.parse(tables, codes[:10]))
