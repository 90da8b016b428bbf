"""Domain definition's GPU stages (hmmgpu.gpu.domaindef.GpuDomainStages): how a call's items are
cut into launches; their envelope rescoring under numba's CUDA simulator against the CPU
stages (tests/gpu/domaindef_checks.py); and on a GPU (``pytest -m gpu``) the batched driver
with those stages against the CPU stages and libhmmer on real hits. Under the simulator the
whole batched driver with the GPU stages runs in tests/gpu/test_ensemble_kernel.py
(tests/gpu/ensemble_checks.check_grouped_definitions: two models' targets in one call)."""
from pathlib import Path

import pytest

from tests.helpers import run_simulated, simulated_rows

from hmmgpu.cpu.hmmerlib import libhmmer_available

ROOT = Path(__file__).resolve().parents[2]


def test_runs_by_size_puts_the_largest_items_first_under_the_budget():
    from hmmgpu.gpu.domaindef import runs_by_size
    from hmmgpu.gpu.fwdback.matrix_launch import matrix_bytes

    assert runs_by_size([], 10) == []
    # by size 11 (alone: over the budget), 10, 9, then the 4s in order and the 1
    assert runs_by_size([4, 4, 4, 11, 1, 9, 10], 10) == [[3], [6], [5], [0, 1], [2, 4]]
    assert runs_by_size([3] * 5, 100) == [[0, 1, 2, 3, 4]]
    assert sorted(k for run in runs_by_size([5, 2, 7, 7, 1, 3], 8) for k in run) == list(range(6))
    assert matrix_bytes(0, 1) == 4 * 18 and matrix_bytes(9, 2) == 4 * 10 * 30


@pytest.mark.skipif(not libhmmer_available(), reason="pyhmmer's bundled libhmmer is unavailable")
def test_gpu_stages_rescore_envelopes_under_simulator(tmp_path):
    """Every other target of the envelope kernel's simulator cases (sampled models of 1, 5 and
    18 nodes, '*' runs whose decoding overflows), every other envelope with its null2 given,
    rescored by the GPU stages (full matrices and decoding on the device) in several runs of
    several envelopes: each envelope equals the CPU stages' (dropped, flags but the
    references' ANY_TINY, scores, coordinates, trace, n2sc); and so in hmmsearch's float mode
    (the stages' ``ftz`` kernels against the CPU stages under flush-to-zero), with envelopes
    whose cells pass through the subnormal range. The kernels
    ``hmmgpu warmup`` loads ahead are the stages' own."""
    stdout = run_simulated(ROOT / "tests" / "gpu" / "domaindef_checks.py", "simulator_domaindef_checks", cache_dir=tmp_path)
    rows = simulated_rows(stdout)
    report = rows["envelopes"]
    assert report["envelopes"] > report["null2"] > report["dropped"] > 0, report
    assert report["envelopes"] > report["launches"] > 3, report
    flushed = rows["envelopes ftz"]   # the stages in hmmsearch's float mode against the CPU's under it
    assert flushed["envelopes"] == report["envelopes"] + 8 and flushed["dropped"] == report["dropped"] + 1, flushed
    kernels = rows["kernels"]   # hmmgpu warmup's list: the kernels the stages launch, each loaded once
    names = ["ensemble_traces_v1", "envelope_decode_oa_v4", "fwdback_backward_matrix_v1_global",
             "fwdback_backward_matrix_v2_shared_s8", "fwdback_forward_matrix_v1_global",
             "fwdback_forward_matrix_v2_shared_s8"]
    assert kernels["loaded"] == 12 and kernels["same"], kernels
    assert kernels["names"] == sorted(names + [name + "_ftz" for name in names]), kernels


@pytest.mark.gpu
@pytest.mark.skipif(not libhmmer_available(), reason="pyhmmer's bundled libhmmer is unavailable")
def test_gpu_stages_on_gpu():
    """On a GPU: the four sample models' hits in the sample proteome and tandem targets, all
    four models' targets in one call of the driver, as the GPU process defines a Forward-gate
    batch's models (runs of at most 64 MB of matrices a launch, regions and envelopes of any
    model in each), equal to the CPU stages' and libhmmer's domain definitions."""
    import numpy as np
    import pyhmmer
    from pyhmmer.easel import SequenceFile

    from hmmgpu.gpu.runtime.context import cuda_available
    from tests.gpu.ensemble_checks import check_grouped_definitions, tandem_targets
    from tests.helpers import AMINO, MODEL_NAMES, PROTEOME, sample_hmm

    if not cuda_available():
        pytest.skip("no CUDA GPU")
    with SequenceFile(str(PROTEOME), digital=True, alphabet=AMINO) as f:
        proteome = f.read_block()
    by_name = {seq.name: np.asarray(seq.sequence, np.uint8) for seq in proteome}
    hmms = [sample_hmm(name) for name in MODEL_NAMES]
    models = [(hmm, [by_name[hit.name] for hit in top] + tandem_targets(hmm, seed))
              for seed, (hmm, top) in enumerate(zip(hmms, pyhmmer.hmmsearch(hmms, proteome)))]
    total = check_grouped_definitions(models, batch_bytes=64 << 20)
    print(total)
    # the sample proteome's hits and the tandem targets, as counted on an H100 (a floor: the check compared them all)
    assert total["targets"] >= 45 and total["nclustered"] >= 10 and total["envelopes"] >= 85, total
