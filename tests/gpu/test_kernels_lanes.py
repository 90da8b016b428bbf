"""Lane arithmetic: pure-Python twins vs numpy (CPU), and the device helpers vs the twins (GPU)."""
import numpy as np
import pytest

from hmmgpu.gpu.runtime import lanes

rng = np.random.default_rng(12345)
B16 = np.array([0, 1, 2, 0x7FFE, 0x7FFF, 0x8000, 0x8001, 0xFFFE, 0xFFFF, 0x00FF, 0x0100], np.uint32)
B8 = np.array([0, 1, 2, 0x7E, 0x7F, 0x80, 0x81, 0xFE, 0xFF], np.uint32)


def _words():
    edge16 = (B16[:, None] | (B16[None, :] << 16)).ravel()
    edge8 = np.array([a | (b << 8) | (c << 16) | (d << 24) for a in B8 for b in B8 for c in B8[::2] for d in B8[::3]],
                     np.uint32)
    rand = rng.integers(0, 1 << 32, 600, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([edge16, edge8, rand]).astype(np.uint32)


W = _words()


def _pairs(n=4000):
    a = W[rng.integers(0, W.size, n)]
    b = W[rng.integers(0, W.size, n)]
    c = W[rng.integers(0, W.size, n)]
    return a, b, c


def s16(w):
    return w.view(np.int16).reshape(-1, 2)


def u8(w):
    return w.view(np.uint8).reshape(-1, 4)


def pack16(x):
    return np.ascontiguousarray(x.astype(np.int16)).view(np.uint32).ravel()


def pack8(x):
    return np.ascontiguousarray(x.astype(np.uint8)).view(np.uint32).ravel()


def numpy_ref(name, a, b, c):
    A, B_, C = s16(a).astype(np.int64), s16(b).astype(np.int64), s16(c).astype(np.int64)
    a8, b8 = u8(a).astype(np.int64), u8(b).astype(np.int64)
    wrap = lambda x: ((x + 0x8000) & 0xFFFF) - 0x8000  # noqa: E731
    if name == "add16":
        return pack16(wrap(A + B_))
    if name == "max16":
        return pack16(np.maximum(A, B_))
    if name == "addmax16":
        return pack16(np.maximum(wrap(A + B_), C))
    if name == "max3_16":
        return pack16(np.maximum(np.maximum(A, B_), C))
    if name == "hmax16":
        return A.max(axis=1)
    if name == "addus8":
        return pack8(np.minimum(a8 + b8, 255))
    if name == "subus8":
        return pack8(np.maximum(a8 - b8, 0))
    if name == "maxu8":
        return pack8(np.maximum(a8, b8))
    if name == "hmaxu8":
        return a8.max(axis=1)
    if name == "add32":
        return (a.astype(np.uint64) + b.astype(np.uint64)).astype(np.uint32)
    if name == "shift16":
        return ((a.astype(np.uint64) << 16) & 0xFFFFFFFF | (b >> 16)).astype(np.uint32)
    if name == "shift8":
        return ((a.astype(np.uint64) << 8) & 0xFFFFFFFF | (b >> 24)).astype(np.uint32)
    raise KeyError(name)


NAMES3 = ["addmax16", "max3_16"]
NAMES2 = ["add16", "max16", "addus8", "subus8", "maxu8", "add32", "shift16", "shift8"]
NAMES1 = ["hmax16", "hmaxu8"]


@pytest.mark.parametrize("name", NAMES1 + NAMES2 + NAMES3)
def test_twin_matches_numpy(name):
    a, b, c = _pairs(3000)
    f = lanes.TWINS[name]
    if name in NAMES1:
        got = np.array([f(x) for x in a], np.int64)
    elif name in NAMES2:
        got = np.array([f(x, y) for x, y in zip(a, b)], np.uint64).astype(np.uint32)
    else:
        got = np.array([f(x, y, z) for x, y, z in zip(a, b, c)], np.uint64).astype(np.uint32)
    np.testing.assert_array_equal(got, numpy_ref(name, a, b, c))


def test_bcast_and_casts():
    for v in (0, 1, 127, 128, 255):
        assert lanes.py_bcast8(v) == v * 0x01010101
    for v in (0, 1, 0x7FFF, 0xFFFF, -1):
        assert lanes.py_bcast16(v) == (v & 0xFFFF) * 0x10001
    assert lanes.py_i32(0xFFFFFFFF) == -1 and lanes.py_u32(-1) == 0xFFFFFFFF


def _device_results(a, b, c, dpx):
    from numba import cuda

    L = lanes.helpers("dpx" if dpx else "swar")
    add16, max16, addmax16, max3_16 = L.add16, L.max16, L.addmax16, L.max3_16
    hmax16, addus8, subus8, maxu8, hmaxu8 = L.hmax16, L.addus8, L.subus8, L.maxu8, L.hmaxu8
    add32, shift16, shift8 = L.add32, L.shift16, L.shift8

    @cuda.jit
    def k(a, b, c, out, outi):
        i = cuda.grid(1)
        if i < a.size:
            x, y, z = a[i], b[i], c[i]
            out[0, i] = add16(x, y)
            out[1, i] = max16(x, y)
            out[2, i] = addmax16(x, y, z)
            out[3, i] = max3_16(x, y, z)
            out[4, i] = addus8(x, y)
            out[5, i] = subus8(x, y)
            out[6, i] = maxu8(x, y)
            out[7, i] = add32(x, y)
            out[8, i] = shift16(x, y)
            out[9, i] = shift8(x, y)
            outi[0, i] = hmax16(x)
            outi[1, i] = hmaxu8(x)

    n = a.size
    out = np.zeros((10, n), np.uint32)
    outi = np.zeros((2, n), np.int32)
    k[(n + 127) // 128, 128](a, b, c, out, outi)
    names = ["add16", "max16", "addmax16", "max3_16", "addus8", "subus8", "maxu8", "add32", "shift16", "shift8"]
    res = {nm: out[j] for j, nm in enumerate(names)}
    res["hmax16"], res["hmaxu8"] = outi[0], outi[1]
    return res


@pytest.mark.gpu
@pytest.mark.parametrize("dpx", [True, False])
def test_device_matches_numpy(dpx):
    from hmmgpu.gpu.runtime.context import cuda_available

    if not cuda_available():
        pytest.skip("no CUDA GPU")
    from numba import cuda

    if dpx and cuda.get_current_device().compute_capability < (9, 0):
        pytest.skip("DPX needs sm_90")
    a, b, c = _pairs(200_000)
    res = _device_results(a, b, c, dpx)
    for name, got in res.items():
        np.testing.assert_array_equal(got, numpy_ref(name, a, b, c), err_msg=name)
