"""GPU kernels on the CPU: layout and shape tables, import-lightness, and the kernels run under
numba's CUDA simulator (in a subprocess, since the simulator is chosen when numba is imported)
with exact equality against HMMER and hmmgpu.cpu.filters."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from hmmgpu.gpu.runtime import tuning
from hmmgpu.gpu.msv.launch import stripe_words
from tests.helpers import run_simulated

ROOT = Path(__file__).resolve().parents[2]


def test_import_light():
    from hmmgpu.gpu.runtime import context as k

    assert isinstance(k.cuda_available(), bool)
    assert k.simulator_enabled() is False


class _FakeDriver:
    """The driver calls ``open_primary_context`` makes, recorded; ``devices`` GPUs present
    (``cuDeviceGet`` refuses another ordinal, CUDA_ERROR_INVALID_DEVICE)."""

    def __init__(self, devices: int):
        self.devices = devices
        self.calls = []

    def __getattr__(self, name):
        def call(*args):
            self.calls.append(name)
            if name == "cuDeviceGet":
                return 0 if args[1] < self.devices else 101
            return 0
        return call


def test_the_gpu_process_opens_the_device_context_with_blocking_sync(monkeypatch):
    """The GPU process's driver thread: cuInit once, the device, blocking synchronisation
    set before the primary context is retained; a device id that is not there is refused
    before any context is made."""
    from hmmgpu.gpu.runtime import context as k

    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM", raising=False)
    driver = _FakeDriver(devices=2)
    monkeypatch.setattr(k.libcuda, "load", lambda: driver)
    assert k.open_primary_context(1) is True
    assert driver.calls == ["cuInit", "cuDeviceGet", "cuDevicePrimaryCtxSetFlags_v2", "cuDevicePrimaryCtxRetain"]
    driver.calls.clear()
    assert k.open_primary_context(2) is False
    assert "cuDevicePrimaryCtxRetain" not in driver.calls
    monkeypatch.setattr(k.libcuda, "load", lambda: None)
    assert k.open_primary_context(0) is False


def test_the_gpu_process_imports_no_numba():
    """What the GPU process imports to run exported kernels (the launch code of every family,
    the Forward gate's included, the driver runtime, the cascade) pulls in no numba: its
    import and kernel registries were most of that process's start-up."""
    code = ("import sys\n"
            "import hmmgpu.gpu.process, hmmgpu.search.routing, hmmgpu.stages.profiles, hmmgpu.formats.seqdb\n"
            "import hmmgpu.gpu.cascade, hmmgpu.gpu.runtime.driver, hmmgpu.gpu.runtime.device, hmmgpu.gpu.runtime.build\n"
            "import hmmgpu.gpu.sw.launch, hmmgpu.gpu.fwdback.launch, hmmgpu.stages.forward\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'numba'))")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout


def test_kernel_arguments_follow_numbas_abi():
    """A one-dimensional array is seven 8-byte parameters (meminfo, parent, count, item size,
    data, shape, stride), a scalar one of its own size, laid out at natural alignment."""
    from types import SimpleNamespace

    import pytest
    from numba.core import types

    from hmmgpu.gpu.runtime.driver import argument_values, parameter_layout
    from hmmgpu.gpu.runtime.kargs import argument_kind

    kinds = [argument_kind(t) for t in (types.Array(types.uint32, 1, "A"), types.int32, types.float32,
                                        types.Array(types.int8, 1, "A"), types.int64)]
    assert kinds == ["array:uint32", "int32", "float32", "array:int8", "int64"]
    layout = parameter_layout(kinds)
    assert layout[:7] == [(8 * i, 8) for i in range(7)]
    assert layout[7:9] == [(56, 4), (60, 4)]
    assert layout[9:16] == [(64 + 8 * i, 8) for i in range(7)]
    assert layout[16] == (120, 8) and len(layout) == 17
    assert parameter_layout(["int32", "int64"]) == [(0, 4), (8, 8)]
    array = SimpleNamespace(size=10, dtype=np.dtype(np.uint32), ptr=0x7F0000001000)
    codes = SimpleNamespace(size=40, dtype=np.dtype(np.int8), ptr=0x7F0000002000)
    values = argument_values(kinds, [array, np.int32(-3), np.float32(1.5), codes, np.int64(1 << 40)])
    assert values[:7] == [0, 0, 10, 4, 0x7F0000001000, 10, 4] and values[7:9] == [-3, 1.5]
    assert values[9:16] == [0, 0, 40, 1, 0x7F0000002000, 40, 1] and values[16] == 1 << 40
    with pytest.raises(TypeError):  # an array of another element type, as numba's typed kernels refuse
        argument_values(kinds, [array, np.int32(-3), np.float32(1.5), array, np.int64(1)])
    with pytest.raises(TypeError):
        argument_kind(types.Array(types.uint32, 2, "C"))
    with pytest.raises(TypeError):
        argument_values(kinds, [array])


def test_exported_kernels_are_keyed_by_their_source(tmp_path, monkeypatch):
    """A kernel counts as compiled for a device when its exported cubin was made from the
    source text the spec gives now (a changed kernel is compiled again)."""
    import dataclasses
    import json

    from hmmgpu.gpu.runtime import build
    from hmmgpu.gpu.bias import BiasSpec
    from hmmgpu.gpu.runtime.device import GpuDevice

    monkeypatch.setenv("HMMGPU_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(build, "SHIPPED_DIR", tmp_path / "shipped")  # the cache alone (sm_90's kernels ship)
    device = GpuDevice(id=0, name="test", cc=(9, 0), sm_count=1, smem_per_block_optin=1 << 16,
                       smem_per_sm=1 << 16, simulator=False)
    spec = BiasSpec()
    assert build.missing([spec, spec], device) == [spec]
    path = build._export_path(spec, device)
    assert path.name.endswith(".sm90.cubin") and path.parent.parent == tmp_path / "kernels"

    def export(source):
        header = dict(entry="kernel", kinds=["array:uint32", "int32"], source=source)
        path.write_bytes(json.dumps(header).encode() + b"\n" + b"\x7fELF cubin")

    export(build._source_digest(spec, device.lane_binding))
    assert build.missing([spec], device) == []
    export("0" * 20)
    assert build.missing([spec], device) == [spec]
    assert build.missing([spec], dataclasses.replace(device, simulator=True)) == []  # numba's own kernels there


def test_stripe_layout_matches_spec():
    from hmmgpu.stages.profiles import stripe

    rng = np.random.default_rng(0)
    for M, G, P in ((23, 4, 2), (178, 8, 2), (400, 32, 4), (100, 32, 2), (23, 1, 2), (40, 2, 4)):
        per = rng.integers(0, 256, (29, M))
        Q = max(1, -(-M // (G * P)))
        w = stripe_words(per, G, Q, P, 255).reshape(29, Q, G)
        st = stripe(per, G * P, 255)  # (29, Q, G*P), node k at [(k-1) % Q, (k-1) // Q]
        bits = 32 // P
        for h in range(P):
            lane = (w >> (bits * h)) & ((1 << bits) - 1)
            np.testing.assert_array_equal(lane, st[:, :, h::P] & ((1 << bits) - 1))


def test_pack_residues_puts_each_target_in_its_padded_slot(monkeypatch):
    """Targets copied run by run of equal length (one copy where a run's residues are
    consecutive, gathered in pieces where not) land where a copy per target puts them."""
    from hmmgpu.gpu import layout as resident

    rng = np.random.default_rng(7)
    lengths = np.sort(rng.integers(1, 30, 400))[::-1]
    residues = rng.integers(0, 25, int(lengths.sum()), dtype=np.uint8)
    consecutive = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    shuffled = rng.permutation(lengths.size)
    scattered = np.concatenate([[0], np.cumsum(lengths[shuffled])[:-1]])[np.argsort(shuffled)]
    monkeypatch.setattr(resident, "GATHER_RESIDUES", 50)  # several gathers per run
    for starts, threads in ((consecutive, 1), (scattered, 1), (scattered, 3)):
        packed, word_offsets = resident.pack_residues(residues, starts, lengths, threads)
        words = (lengths + 3) // 4
        expected = np.full(4 * int(words.sum()), resident.PAD_CODE, np.uint8)
        for s, L, w in zip(starts, lengths, np.concatenate([[0], np.cumsum(words)[:-1]])):
            expected[4 * w:4 * w + L] = residues[s:s + L]
        np.testing.assert_array_equal(word_offsets, np.concatenate([[0], np.cumsum(words)[:-1]]))
        np.testing.assert_array_equal(packed, expected)
    packed, word_offsets = resident.pack_residues(residues, np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert packed.size == 4 and word_offsets.size == 0


def test_shape_tables_cover_models():
    for M in (1, 2, 23, 100, 137, 400, 1633, 2405, 4096):
        for lanes, P in (("16x2", 2), ("8x4", 4)):
            shape = tuning.msv_shape(M, lanes)
            if shape is None:
                assert M > max(G * P * Q for G, Q in (tuning.MSV_16X2 if P == 2 else tuning.MSV_8X4))
                continue
            G, Q = shape
            assert G in (4, 8, 16, 32) and G * P * Q >= M
        assert tuning.vit_q(M) * 64 >= M
    assert tuning.msv_shape(5000, "16x2") is None and tuning.vit_q(5000) is None


def _simulate(checks: str, tmp_path) -> str:
    stdout = run_simulated(ROOT / "tests" / "gpu" / "kernel_checks.py", checks, cache_dir=tmp_path)
    return stdout


def test_packing_kernel_under_simulator(tmp_path):
    """The database's slots packed on the device equal the host's packing, byte for byte."""
    out = _simulate("simulator_pack_checks", tmp_path)
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.split()[:1] in (
        ["device"], ["host"], ["chunked"])}
    assert rows["device"][1] == rows["host"][1] == "1" and int(rows["chunked"][1]) > 1


def test_simulator_shares_shared_arrays(tmp_path):
    """The patched simulator gives a block's threads one shared array even when they all look
    it up at once (numba's lookup is unlocked; the MSV check failed so on a loaded machine)."""
    out = _simulate("simulator_shared_array_checks", tmp_path)
    assert "shared_array rotation_equal 32" in out


def test_msv_kernels_exact_under_simulator(tmp_path):
    out = _simulate("simulator_msv_checks", tmp_path)
    assert "hmmer_equal" in out and "chunked" in out


def test_viterbi_kernel_exact_under_simulator(tmp_path):
    out = _simulate("simulator_vit_checks", tmp_path)
    assert out.count("hmmer_equal") == 3 and "'uncertain': 1" in out


def test_gpu_cascade_equals_pyhmmer_under_simulator(tmp_path):
    """The GPU cascade (MSV, bias and Viterbi filter kernels, the Forward gate's kernel and the
    host's part) against a full pyhmmer search: tables, counters, bias scores, Forward scores
    bit for bit, and the gate's survivors; with F3 between two survivors' Forward P-values (a
    P-value itself, then the double below it: that target passes, then fails); targets on
    which HMMER's Forward fails left undecided and sent on."""
    import ast

    out = _simulate("simulator_cascade_checks", tmp_path)
    assert out.count("gpu_bias_scores") == 7
    rows = [line for line in out.splitlines() if line.startswith("{")]
    gates = [ast.literal_eval(line[line.index("} {") + 2:])["gate"] for line in rows]
    assert all(g["unsure"] == 0 for g in gates[:3]) and sum(g["failed"] for g in gates) > 0
    narrow = [g for line, g in zip(rows, gates) if "'F3'" in line]
    assert len(narrow) == 2 and narrow[1]["failed"] > narrow[0]["failed"]
    undecided = next(line for line in out.splitlines() if line.startswith("undecided"))
    assert ast.literal_eval(undecided[len("undecided "):])["unsure"] == 2  # the two all-stop targets
    assert narrow[0]["passed"] + narrow[0]["failed"] == narrow[1]["passed"] + narrow[1]["failed"]


def test_forward_gates_of_several_models_share_a_batch_under_simulator(tmp_path):
    """Three models' Forward gates launched as one batch: each model's survivors equal its own
    run's and HMMER's F3 decisions."""
    import ast

    out = _simulate("simulator_gate_batch_checks", tmp_path)
    rows = [line for line in out.splitlines() if line.startswith("batched M")]
    assert len(rows) == 3
    gates = [ast.literal_eval(line[line.index("{"):]) for line in rows]
    assert sum(g["passed"] + g["failed"] for g in gates) > 0


def test_gpu_process_backend_under_simulator(tmp_path):
    """The engine's CUDA backend in its child process: nine models in flight, tables equal; and
    through the command line, the child reading the database file itself."""
    out = _simulate("simulator_gpu_process_checks", tmp_path)
    assert len([line for line in out.splitlines() if line[:1].isdigit()]) == 9
    assert "command line 4" in out


def test_gpu_cascade_host_part_under_simulator(tmp_path):
    """Every bias score and Viterbi filter left to the host (HMMER's own functions): same search."""
    out = _simulate("simulator_cascade_host_checks", tmp_path)
    assert out.count("'gpu_bias_scores': 0") == 2


def test_scipy_is_hidden_only_while_a_kernel_module_runs():
    """numba-cuda's BLAS probe (an import of scipy.linalg at its CUDA target's set-up) fails
    at once while a kernel module runs, and scipy is importable again afterwards, also when
    scipy itself was imported before. In a fresh interpreter, whatever the test session imported."""
    code = """
import importlib.util, sys
from hmmgpu.gpu.runtime.build import _scipy_hidden
with _scipy_hidden():
    try:
        import scipy.linalg.cython_blas
        print("probe imported scipy")
    except ImportError:
        print("probe failed at once")
print("scipy entry left:", "scipy" in sys.modules)
print("scipy installed:", importlib.util.find_spec("scipy") is not None)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[:2] == ["probe failed at once", "scipy entry left: False"], out
    if out[2] == "scipy installed: True":  # scipy itself imported before (as numba may): linalg still hidden
        code = "import sys, scipy; from hmmgpu.gpu.runtime.build import _scipy_hidden\n" \
               "with _scipy_hidden():\n    try:\n        import scipy.linalg.cython_blas\n" \
               "    except ImportError:\n        print('hidden')\nimport scipy.linalg\n" \
               "print(sys.modules['scipy'] is scipy, 'scipy.linalg' in sys.modules)"
        assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              check=True).stdout.split() == ["hidden", "True", "True"]
