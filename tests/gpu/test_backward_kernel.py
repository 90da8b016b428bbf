"""The Backward parser kernel (hmmgpu.gpu.fwdback.backward_source) and the domain decoding kernel
(hmmgpu.gpu.fwdback.decoding_source), run after the Forward parser kernel in one batch
(``ForwardStage.launch(..., decoding=True)``), bit for bit against HMMER's own
``p7_ForwardParser``, ``p7_BackwardParser`` and ``p7_DomainDecoding`` (libhmmer through
hmmgpu.cpu.hmmerlib) and the CPU references (``hmmgpu.cpu.fwdback.backward``,
``hmmgpu.stages.domaindef.domain_decoding``): under numba's CUDA simulator, and on a GPU
(``pytest -m gpu``). The float-rounding check of their sources is in test_fwdback.py."""
from pathlib import Path

import numpy as np
import pytest

from hmmgpu.cpu import fwdback as ref
from hmmgpu.cpu.hmmerlib import HmmerModel, libhmmer_available
from hmmgpu.stages.forward import backward_score
from tests.helpers import MODEL_NAMES, assert_rounded_ptx, bits, run_simulated, sample_hmm, simulated_rows

pytestmark = pytest.mark.skipif(not libhmmer_available(), reason="pyhmmer's bundled libhmmer is unavailable")
ROOT = Path(__file__).resolve().parents[2]


def test_backward_score_from_rows_equals_libhmmer():
    """The host's ``totscale`` and score from Backward's rows (:func:`backward_score`, what the
    kernel's batch returns) equal libhmmer's: rescaled rows, a lone residue, degenerate codes,
    a range error (NaN score) and two real homologs of KR rescaled up to 14 times."""
    from tests.gpu.fwdback_checks import fwd_case, real_case

    cases = [fwd_case(18, 2, n_random=4, max_len=60, homolog=80, stops=True), real_case("KR", [261, 9])]
    rescaled = 0
    for hmm, db in cases:
        with HmmerModel(hmm) as model:
            tables = ref.ForwardTables.from_hmmer(model)
            for i in range(db.n):
                codes = db.codes(i)
                status, score, xmx, totscale, _ = model.backward_parser(codes)
                tot, sc = backward_score(ref.backward(tables, codes).xmx)
                assert bits(tot) == bits(totscale), i
                assert bits(sc) == bits(score) if status == 0 else np.isnan(sc), i
                rescaled += int((xmx[1:, ref.XSCALE] > 1).sum() > 1)
    assert rescaled >= 2


@pytest.mark.parametrize("name", ["PF02826", "KR"])
def test_decoding_flag_covers_flush_to_zero(name, proteome):
    """The decoding kernel's SUBNORMAL rule (a tiny value read or computed,
    :func:`tests.gpu.fwdback_checks.decoding_meets_tiny`): on the targets it leaves unflagged,
    libhmmer's ``p7_DomainDecoding`` gives the same bits with flush-to-zero (hmmsearch's mode)
    as without; it flags few targets (the models' homologs whose C goes subnormal). Every
    protein whose Forward rows rescale, and every 25th."""
    from hmmgpu.host import flush_to_zero
    from tests.gpu.fwdback_checks import decoding_meets_tiny

    flagged = 0
    with HmmerModel(sample_hmm(name)) as model:
        tables = ref.ForwardTables.from_hmmer(model)
        targets = [i for i in range(proteome.n) if i % 25 == 0
                   or ref.parse(tables, proteome.codes(i), rows=False).scales.size]
        for i in targets:
            codes = proteome.codes(i)
            forward = ref.parse(tables, codes)
            backward = ref.backward(tables, codes, forward)
            assert not backward.needs_host
            if decoding_meets_tiny(forward.xmx, backward.xmx, backward.has_own_scales,
                                   ref.length_specials(codes.size)[1]):
                flagged += 1
                continue
            ieee = model.domain_decoding(codes)
            with flush_to_zero():
                ftz = model.domain_decoding(codes)
            assert ieee[0] == ftz[0] and all(np.array_equal(bits(a), bits(b)) for a, b in zip(ieee[1:], ftz[1:])), i
    assert 1 <= flagged <= 5 and len(targets) >= 85


def test_backward_kernel_exact_under_simulator(tmp_path):
    """The Backward and decoding kernels under numba's CUDA simulator
    (tests/gpu/fwdback_checks.py): sampled models with M = 18 and 101 and KR (M = 262) with two
    real homologs; both parsers' rows, Backward's totscale, score and has_own_scales, the
    decoding's mocc, btot and etot equal libhmmer's (in flush-to-zero mode where the kernel
    flushed a tiny value), Backward's flags the CPU reference's and the decoding's FTZ_ONLY flag
    numpy's test of its values; rescaling, a range error, a subnormal flag
    and libhmmer's fallback, rows in shared and in global memory, one group running every
    target, several chunks, two models in one batch, and a target switched to its own scale
    factors (rows and decoding against the CPU references)."""
    stdout = run_simulated(ROOT / "tests" / "gpu" / "fwdback_checks.py", "simulator_bwd_checks", cache_dir=tmp_path)
    rows = simulated_rows(stdout)
    assert set(rows) == {"M18 shared", "M18 global, one group, chunked, fallback", "M101", "M18 + M101 in one batch",
                         "KR", "own scales"}, stdout
    assert rows["M18 shared"] == dict(n=7, host=2, rescaled=1, range=1, tiny_rows=0, own=0, decoding_tiny=0)
    assert rows["M18 global, one group, chunked, fallback"] == rows["M18 shared"]
    assert rows["M101"] == dict(n=4, host=0, rescaled=1, range=0, tiny_rows=0, own=0, decoding_tiny=0)
    assert rows["M18 + M101 in one batch"] == dict(models=2, n=8, host=0, launches=1)
    # the homolog whose C goes subnormal: its decoding reads a tiny value, flushed as hmmsearch flushes
    # it (FTZ_ONLY; mocc, btot and etot equal libhmmer's under flush-to-zero)
    assert rows["KR"] == dict(n=2, host=0, rescaled=2, range=0, tiny_rows=1, own=0, decoding_tiny=1)
    own = rows["own scales"]
    assert own["own_scales"] and own["rows_own_scale"] >= 2 and own["flags"] == 0


@pytest.mark.gpu
def test_backward_kernel_exact_on_gpu(proteome):
    """On a GPU: the four pfam_samples models against every target of the sample proteome
    (2,100 real proteins: both parsers' rows, Backward's totscale, score and has_own_scales,
    the decoding's mocc, btot and etot equal libhmmer's, Backward's flags the CPU reference's),
    sampled models from M = 1 to 2600 with short targets, rows in global memory on a chunked
    database, and the switch to Backward's own scale factors. The kernels' PTX holds no fused
    multiply-add and no flush-to-zero operation."""
    from hmmgpu.gpu.fwdback.backward_source import BwdSpec
    from hmmgpu.gpu.fwdback.decoding_source import DecodeSpec
    from hmmgpu.gpu.runtime import build
    from hmmgpu.gpu.runtime.context import cuda_available
    from hmmgpu.gpu.runtime.device import GpuDevice
    from tests.gpu.fwdback_checks import check_backward, check_own_scales, forward_stage, fwd_case

    if not cuda_available():
        pytest.skip("no CUDA GPU")
    device = GpuDevice.open(0)
    for spec in (BwdSpec("shared"), BwdSpec("global"), DecodeSpec()):
        assert_rounded_ptx(build.numba_kernel(spec, device.lane_binding), "mul.rn.f32", "add.rn.f32", "div.rn.f32")
    stage = forward_stage(proteome, max_cells=1 << 40)
    for name in MODEL_NAMES:
        report = check_backward(stage, sample_hmm(name), proteome)
        print(name, report)
        assert report["n"] == proteome.n and report["host"] == 0 and "not_run" not in report
        assert report["rescaled"] >= (0 if name == "Thioesterase" else 1)
    for M, seed in ((1, 1), (2, 2), (5, 3), (99, 4), (100, 5), (400, 6), (2600, 7)):
        hmm, db = fwd_case(M, seed, n_random=30, max_len=400, homolog=3 * M, stops=True)
        print(M, check_backward(forward_stage(db), hmm, db))
        report = check_backward(forward_stage(db, max_bytes=4000, scratch_bytes=48 * ref.nqf(M) * 3,
                                              storage="global"), hmm, db, fallback=True)
        print(M, "chunked", report)
    print(check_own_scales())
