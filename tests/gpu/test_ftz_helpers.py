"""The kernels' float operations in hmmsearch's mode (``hmmgpu.gpu.rounding.float_helpers(binding,
ftz=True)``) against the x86 unit itself under hmmsearch's MXCSR (flush-to-zero on,
denormals-are-zero off: ``hmmgpu.host.flush_to_zero`` around numpy's float32 operations): the
products, quotients, sums and differences whose results fall about FLT_MIN, the exact products
in the half-spacing below FLT_MIN that IEEE rounds up to FLT_MIN and the x86 unit flushes (it
detects underflow after rounding), and random operands over the whole range; the IEEE helpers
equal numpy without the mode. On the GPU (``pytest -m gpu``) the compiled helpers equal these."""
import numpy as np
import pytest

from hmmgpu.gpu.rounding import float_helpers
from hmmgpu.host import flush_to_zero
from hmmgpu.stages.forward import FLT_MIN

F32 = np.float32
OPS = ("fmul", "fdiv", "fadd", "fsub")


def _hardware(op: str, a, b, ftz: bool):
    with flush_to_zero(ftz):
        a, b = F32(a), F32(b)
        return {"fmul": a * b, "fdiv": a / b, "fadd": a + b, "fsub": a - b}[op]


def _window_pairs() -> list:
    """Operand pairs (normal floats) whose exact product lies in [FLT_MIN (1 - 2^-24), FLT_MIN
    (1 - 2^-25)): rounded in IEEE arithmetic to FLT_MIN, flushed to 0 by x86 flush-to-zero; and
    pairs just above the bound (kept as FLT_MIN by both)."""
    pairs, above = [], []
    for ma in range(2 ** 23 + 1, 2 ** 23 + 20000):
        mb = -(-(2 ** 46 - 2 ** 22) // ma)
        if mb < 2 ** 24 and ma * mb < 2 ** 46 - 2 ** 21:
            pairs.append((F32(ma * 2.0 ** -83), F32(mb * 2.0 ** -89)))
        elif mb < 2 ** 24 and ma * mb >= 2 ** 46 - 2 ** 21 and len(above) < 20:
            above.append((F32(ma * 2.0 ** -83), F32(mb * 2.0 ** -89)))
    return pairs + above


def _random_pairs(n: int = 20000) -> list:
    rng = np.random.default_rng(7)
    a = (rng.random(n) + 0.5) * np.exp2(rng.integers(-70, 10, n).astype(np.float64))
    b = (rng.random(n) + 0.5) * np.exp2(-126.0 - np.log2(a) + rng.normal(0, 2, n))
    return list(zip(a.astype(F32), np.maximum(b, 2.0 ** -149).astype(F32)))


def test_the_window_below_flt_min_is_flushed_as_x86_flushes_it():
    pairs = _window_pairs()
    window = [p for p in pairs if F32(p[0]) * F32(p[1]) == FLT_MIN and _hardware("fmul", *p, True) == 0]
    assert len(window) >= 20   # IEEE gives FLT_MIN, the x86 unit 0: the cases the rule decides
    helpers = float_helpers("python", ftz=True)
    for a, b in pairs:
        got, want = helpers.fmul(a, b), _hardware("fmul", a, b, True)
        assert got.view(np.uint32) == want.view(np.uint32), (a, b, got, want)


@pytest.mark.parametrize("ftz", [False, True])
def test_every_operation_equals_the_x86_unit(ftz):
    helpers = float_helpers("python", ftz=ftz)
    pairs = _random_pairs() + _window_pairs()
    near = 0
    with np.errstate(all="ignore"):   # quotients that overflow: infinite in both
        near = _compare_all(helpers, pairs, ftz)
    assert near > 1000


def _compare_all(helpers, pairs, ftz: bool) -> int:
    near = 0
    for op in OPS:
        fn = getattr(helpers, op)
        for a, b in pairs:
            if op in ("fadd", "fsub"):
                b = F32(a * F32(1.0 - 2.0 ** -20))   # a difference about a's ulp: subnormal for tiny a
            got, want = fn(a, b), _hardware(op, a, b, ftz)
            assert got.view(np.uint32) == want.view(np.uint32), (op, a, b, got, want)
            near += bool(0 < abs(float(got)) <= 2 * float(FLT_MIN) or (want == 0 and a != 0))
    return near


@pytest.mark.gpu
def test_the_compiled_operations_equal_the_x86_unit():
    """On a GPU: the helpers compiled for the device (libdevice's IEEE operations and the flush
    rule), in both modes, on the same operands, bit for bit against the x86 unit."""
    from numba import cuda

    from hmmgpu.gpu.runtime.context import cuda_available

    if not cuda_available():
        pytest.skip("no CUDA GPU")
    pairs = _random_pairs() + _window_pairs()
    a = np.array([p[0] for p in pairs], F32)
    b = np.array([p[1] for p in pairs], F32)
    for ftz in (False, True):
        h = float_helpers("dpx", ftz=ftz)
        fmul, fdiv, fadd, fsub, to_float = h.fmul, h.fdiv, h.fadd, h.fsub, h.to_float

        @cuda.jit
        def kernel(a, b, out):
            k = cuda.grid(1)
            if k < a.size:
                out[0, k] = fmul(a[k], b[k])
                out[1, k] = fdiv(a[k], b[k])
                out[2, k] = fadd(a[k], -b[k])
                out[3, k] = fsub(a[k], b[k])
                out[4, k] = to_float(np.float64(a[k]) * np.float64(b[k]))

        out = cuda.device_array((5, a.size), np.float32)
        kernel[(a.size + 127) // 128, 128](cuda.to_device(a), cuda.to_device(b), out)
        got = out.copy_to_host()
        with np.errstate(all="ignore"), flush_to_zero(ftz):
            want = np.stack([a * b, a / b, a + (-b), a - b, (a.astype(np.float64) * b).astype(F32)])
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), ftz
