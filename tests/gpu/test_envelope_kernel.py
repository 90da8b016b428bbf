"""The envelope decoding + optimal accuracy kernel (hmmgpu.gpu.envelope) under numba's CUDA
simulator, bit for bit against the CPU references (tests/gpu/envelope_checks.py)."""
from pathlib import Path

import pytest

from hmmgpu.cpu.hmmerlib import libhmmer_available
from tests.helpers import assert_rounded_ptx, run_simulated

pytestmark = pytest.mark.skipif(not libhmmer_available(), reason="pyhmmer's bundled libhmmer is unavailable")
ROOT = Path(__file__).resolve().parents[2]


def test_decode_oa_kernel_under_simulator(tmp_path):
    """Sampled models of 1, 5 and 18 nodes, whole targets and slices, a homolog run that
    rescales, '*' runs whose decoding overflows (dropped): the posterior and OA matrices,
    oasc, the flags, the null2 odds and the kernel's OA trace equal the references' (the
    simulator's NaN made a GPU's, as the GPU check meets it)."""
    run_simulated(ROOT / "tests" / "gpu" / "envelope_checks.py", "simulator_envelope_checks", cache_dir=tmp_path)


@pytest.mark.gpu
def test_decode_oa_kernel_on_gpu():
    """On a GPU: the same envelopes, bit for bit (but the NaN bits of a dropped envelope's
    posterior: the GPU's 0x7FFFFFFF, x86's 0xFFC00000), and the kernel's PTX holds no fused
    multiply-add and no flush-to-zero operation."""
    from hmmgpu.gpu.envelope.source import DecodeOASpec
    from hmmgpu.gpu.runtime import build
    from hmmgpu.gpu.runtime.context import cuda_available
    from hmmgpu.gpu.runtime.device import GpuDevice
    from tests.gpu.envelope_checks import check_cases, envelope_cases

    if not cuda_available():
        pytest.skip("no CUDA GPU")
    device = GpuDevice.open(0)
    # the one double division, f32(1.0 / (double) x), comes out of NVVM as a float reciprocal
    # (rcp.rn.f32: the same number, since double's 53 bits are at least twice float's 24 plus 2)
    assert_rounded_ptx(build.numba_kernel(DecodeOASpec(), device.lane_binding), "mul.rn.f32", "add.rn.f32")
    report = check_cases(envelope_cases(), device)
    assert report["envelopes"] > report["dropped"] > 0
