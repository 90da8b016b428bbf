"""GPU SSV/MSV kernels on the CPU: layout, import-lightness, and the kernels run under numba's
CUDA simulator (in a subprocess, so real-GPU runs of the suite are unaffected) with exact
equality against HMMER (pyhmmer) and hmmgpu.cpu_filters, in both lane modes."""
import os
import subprocess
import sys

import numpy as np

from hmmgpu.kernels.filter import choose_shape, stripe_words


def test_import_light():
    import hmmgpu.kernels as k

    assert isinstance(k.cuda_available(), bool)
    assert callable(k.device_description)


def test_stripe_layout_matches_spec():
    from hmmgpu.profiles import stripe

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


def test_choose_shape_covers_model():
    for M in (1, 2, 23, 100, 400, 1633, 2405, 5000):
        for mode, P in (("16x2", 2), ("8x4", 4)):
            G, Q = choose_shape(M, mode)
            assert G in (1, 2, 4, 8, 16, 32) and G * P * Q >= M


def test_kernels_exact_under_simulator(tmp_path):
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", HMMGPU_KERNEL_CACHE=str(tmp_path))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-m", "hmmgpu.kernels.selftest"], env=env, cwd=root,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "sim selftest OK" in p.stdout


def test_cuda_available_survives_kernel_imports():
    """Importing the kernel modules (which import ``hmmgpu.kernels._sim``) must not shadow helpers."""
    import hmmgpu.kernels as kernels
    from hmmgpu.kernels import warp  # noqa: F401  (imports the _sim submodule)

    assert isinstance(kernels.cuda_available(), bool)
    assert kernels.cuda_available() == kernels.cuda_available()
