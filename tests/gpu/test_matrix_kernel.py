"""The full-matrix Forward and Backward kernels (hmmgpu.gpu.fwdback.matrix_source, launched by
hmmgpu.gpu.fwdback.matrix_launch.produce_matrices) bit for bit against the CPU references
(hmmgpu.cpu.fwdback.forward_matrix, backward_matrix): under numba's CUDA simulator
(tests/gpu/matrix_checks.py in a subprocess), and on a GPU (``pytest -m gpu``). The
float-rounding check of their sources is in test_fwdback.py."""
from pathlib import Path

import pytest

from hmmgpu.cpu.hmmerlib import libhmmer_available
from tests.helpers import MODEL_NAMES, assert_rounded_ptx, run_simulated, sample_hmm, simulated_rows

pytestmark = pytest.mark.skipif(not libhmmer_available(), reason="pyhmmer's bundled libhmmer is unavailable")
ROOT = Path(__file__).resolve().parents[2]


def test_matrix_kernels_exact_under_simulator(tmp_path):
    """Sampled models of 1, 5 (padding lanes), 18 (a homolog whose rows rescale) and 100 nodes
    (the D->D passes' early exit), in one batch of 47 jobs: whole targets and slices, multihit and unihit, with and without
    Backward, degenerate residues, a lone '*' (RANGE); a few of them again with their rows in
    global scratch run by one group, on a stream; Backward's switch to its own scale factors;
    the ensemble kernel sampling three regions (their results, one region flagged and sampled by
    the CPU reference, the CPU stages'), and the envelope kernel decoding and aligning two
    envelopes (one's posterior and OA matrices copied back), from a batch's device matrices
    (sample_regions and decode_produced given the batch) as from the CPU's host matrices, and a
    batch's envelopes finished at once (finish_produced) as each envelope's own finish makes them,
    clustered and unclustered, in both float modes, dropped ones and ones whose posterior the
    flush-to-zero check of their null2 odds reads among them. Every cell,
    special row, flag, score, totscale and has_own_scales equals the CPU references', and every
    matrix libhmmer computes (status OK: 65 + 5) equals its own ``p7_Forward`` or ``p7_Backward``
    matrix. The kernels in hmmsearch's float mode (``ftz``) equal the references and libhmmer run
    under flush-to-zero on a homolog and a run of '*' whose cells go subnormal."""
    stdout = run_simulated(ROOT / "tests" / "gpu" / "matrix_checks.py", "simulator_matrix_checks", cache_dir=tmp_path)
    rows = simulated_rows(stdout)
    assert set(rows) == {"one batch", "global scratch, one group, a stream", "ensemble from the device",
                         "envelopes from the device", "envelopes finished at once", "own scales",
                         "hmmsearch's float mode", "envelopes finished at once, subnormal cells",
                         "envelopes finished at once, hmmsearch's float mode"}, stdout
    # the envelopes of a batch finished at once (finish_produced) equal each envelope's own finish: clustered
    # and unclustered ones, dropped ones, and unclustered ones whose posterior the flush-to-zero check reads
    at_once = rows["envelopes finished at once"]
    assert at_once == dict(envelopes=9, dropped=0, clustered=4, posterior=2), at_once
    assert rows["envelopes finished at once, subnormal cells"] == dict(envelopes=8, dropped=0, clustered=0,
                                                                       posterior=0)
    assert rows["envelopes finished at once, hmmsearch's float mode"] == dict(envelopes=4, dropped=1, clustered=2,
                                                                              posterior=0)
    # the kernels in hmmsearch's float mode, against the references and libhmmer under flush-to-zero, on
    # matrices whose cells pass through the subnormal range (flushed: those differing from IEEE's)
    flushed = rows["hmmsearch's float mode"]
    assert flushed["jobs"] >= 4 and flushed["libhmmer"] >= 4 and flushed["flushed"] >= 1, flushed
    assert rows["one batch"] == dict(jobs=47, backward=30, unihit=17, rescaled=2, backward_rescaled=1, range=8,
                                     models=4, libhmmer=65)
    assert rows["global scratch, one group, a stream"] == dict(jobs=5, backward=3, unihit=2, rescaled=2,
                                                               backward_rescaled=1, range=2, models=1, libhmmer=5)
    assert rows["ensemble from the device"] == dict(regions=3, sampled=3, flagged=1)
    assert rows["envelopes from the device"] == dict(envelopes=2, decoded=2, matrices=1)
    own = rows["own scales"]
    assert own["own_scales"] and own["rows_own_scale"] >= 1 and own["flags"] == 0


@pytest.mark.gpu
def test_matrix_kernels_exact_on_gpu(proteome):
    """On a GPU: the kernels' PTX holds explicitly rounded float operations and no fused
    multiply-add or flush-to-zero operation; sampled models from M = 1 to 2600 with targets up
    to 400 residues (shared and global rows); the four pfam_samples models' clustered regions
    and envelopes on their first 40 proteome targets with a domain (every matrix equal to the
    CPU references', every envelope's score equal to libhmmer's envsc); the ensemble kernel
    sampling the multihit slices, and the envelope kernel decoding and aligning the unihit ones,
    from the device matrices as from the CPU's."""
    from hmmgpu.gpu.fwdback.matrix_source import BwdMatrixSpec, FwdMatrixSpec
    from hmmgpu.gpu.runtime import build
    from hmmgpu.gpu.runtime.context import cuda_available
    from hmmgpu.gpu.runtime.device import GpuDevice
    from tests.gpu.matrix_checks import (check_ensemble_handoff, check_envelope_finish, check_envelope_handoff,
                                         check_jobs, check_real, matrix_jobs)

    if not cuda_available():
        pytest.skip("no CUDA GPU")
    binding = GpuDevice.open(0).lane_binding
    for spec in (FwdMatrixSpec("shared"), FwdMatrixSpec("global"), BwdMatrixSpec("shared"), BwdMatrixSpec("global")):
        assert_rounded_ptx(build.numba_kernel(spec, binding), "mul.rn.f32", "add.rn.f32", "div.rn.f32")
    cases = ((1, 1, 400, 0), (2, 2, 400, 6), (5, 3, 400, 15), (99, 4, 400, 297), (100, 5, 400, 300),
             (400, 6, 300, 400), (2600, 7, 100, 200))
    jobs = matrix_jobs(cases)
    print(check_jobs(jobs))
    print(check_jobs(jobs, storage="global", scratch_bytes=1 << 20))
    for name in MODEL_NAMES:
        report = check_real(sample_hmm(name), proteome, 40)
        print(name, report)
        assert report["envelopes"] >= 40
    # without the lone '*' jobs: a region whose Forward matrix is empty has no stochastic trace (Easel aborts
    # there; a region of a target that passed F3 never has one), as the simulator's check leaves them out
    handoff = [job for job in matrix_jobs(((18, 2, 60, 80), (100, 5, 60, 300))) if len(job.codes) > 1]
    print(check_ensemble_handoff(handoff))
    print(check_envelope_handoff(handoff))
    print(check_envelope_finish(handoff, tiny=(0, 1)))
