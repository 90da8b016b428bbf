"""The kernels' explicitly rounded float operations: IEEE's (pyhmmer's arithmetic) and
hmmsearch's (x86 SSE with flush-to-zero), for every lane binding.

What it gives
-------------
:func:`float_helpers` returns ``fmul``, ``fadd``, ``fsub``, ``fdiv`` (float32, round to
nearest), ``to_float(d)`` (a double rounded to float) and ``certain(r)`` (whether the double
``r`` rounds to the same float however its last two bits go: the bias filter's check of the
GPU's ``log``). Every kernel module binds them when it is compiled
(``_F = rounding.float_helpers(binding, ftz)``); on a GPU they are device functions that
numba inlines, under numba's simulator plain numpy.

Why every operation is a call
-----------------------------
numba-cuda contracts ``a * b + c`` into a fused multiply-add even with fast math off
(../shared/docs/gpu-notes.md), and one FMA changes HMMER's float bits. libdevice's
``__fmul_rn``, ``__fadd_rn``, ... are never fused, so every product and sum of a kernel goes
through one of these, and the tests check the PTX for ``fma``.

hmmsearch's float mode
----------------------
With ``ftz`` each operation is the IEEE one followed by the flush that x86's flush-to-zero
applies (denormals-are-zero off: inputs are used as they are). A result whose rounding to
float with an unbounded exponent is below FLT_MIN (Intel detects underflow after rounding) is
a zero of its sign. The IEEE result ``r`` says so: below FLT_MIN it is (an exact result below
``FLT_MIN - 2^-150`` rounds below FLT_MIN either way); equal to FLT_MIN it is where the exact
result lies below ``FLT_MIN - 2^-151`` (:data:`~hmmgpu.stages.forward.FTZ_EDGE`), which the
double product of two floats gives exactly, their double quotient on the right side (it is
never within 2^-49 of the bound, relatively), and a double rounded to float is itself; a sum
or difference of floats is exact there (a multiple of 2^-149), so it needs no exact value.
The flush is written once for both bindings (:func:`_flush_to_zero`) over the IEEE
operations, so the two modes cannot drift apart.
"""
from __future__ import annotations

import functools
from types import SimpleNamespace

import numpy as np

from hmmgpu.stages.forward import FLT_MIN, FTZ_EDGE

__all__ = ["float_helpers"]

#: 2^-50, the margin of :func:`float_helpers`' ``certain``.
CERTAIN_MARGIN = 8.881784197001252e-16


@functools.lru_cache(maxsize=None)
def float_helpers(binding: str, ftz: bool = False) -> SimpleNamespace:
    """The rounded float operations of a kernel module compiled for lane ``binding``
    ("python": numba's simulator; any other: a GPU), IEEE's or with ``ftz`` hmmsearch's (see
    the module text)."""
    ieee, exact = (_python if binding == "python" else _device)()
    return _flush_to_zero(ieee, exact, binding) if ftz else ieee


def _python() -> tuple:
    """The IEEE operations in numpy, and the exact double product and quotient of two floats."""
    f = np.float32
    ieee = SimpleNamespace(fmul=lambda a, b: f(f(a) * f(b)), fadd=lambda a, b: f(f(a) + f(b)),
                           fsub=lambda a, b: f(f(a) - f(b)), fdiv=lambda a, b: f(f(a) / f(b)),
                           to_float=lambda d: f(d),
                           certain=lambda r: f(r - abs(r) * CERTAIN_MARGIN) == f(r + abs(r) * CERTAIN_MARGIN))
    exact = SimpleNamespace(mul=lambda a, b: float(f(a)) * float(f(b)), div=lambda a, b: float(f(a)) / float(f(b)))
    return ieee, exact


@functools.lru_cache(maxsize=None)
def _device() -> tuple:
    """The IEEE operations as inlined device functions (libdevice's ``_rn`` operations, never
    fused), and the exact double product and quotient of two floats."""
    from numba import cuda
    from numba.cuda import libdevice

    dev = cuda.jit(device=True, forceinline=True)

    @dev
    def fmul(a, b):
        return libdevice.fmul_rn(np.float32(a), np.float32(b))

    @dev
    def fadd(a, b):
        return libdevice.fadd_rn(np.float32(a), np.float32(b))

    @dev
    def fsub(a, b):
        return libdevice.fsub_rn(np.float32(a), np.float32(b))

    @dev
    def fdiv(a, b):
        return libdevice.fdiv_rn(np.float32(a), np.float32(b))

    @dev
    def to_float(d):
        return np.float32(d)

    @dev
    def certain(r):
        margin = abs(r) * CERTAIN_MARGIN
        return np.float32(r - margin) == np.float32(r + margin)

    @dev
    def mul(a, b):
        return libdevice.dmul_rn(np.float64(np.float32(a)), np.float64(np.float32(b)))

    @dev
    def div(a, b):
        return libdevice.ddiv_rn(np.float64(np.float32(a)), np.float64(np.float32(b)))

    return (SimpleNamespace(fmul=fmul, fadd=fadd, fsub=fsub, fdiv=fdiv, to_float=to_float, certain=certain),
            SimpleNamespace(mul=mul, div=div))


def _flush_to_zero(ieee: SimpleNamespace, exact: SimpleNamespace, binding: str) -> SimpleNamespace:
    """``ieee``'s operations, each result flushed as x86 flush-to-zero flushes it (module text);
    ``exact``: the double product and quotient of the operands."""
    fmin, edge = np.float32(FLT_MIN), np.float64(FTZ_EDGE)
    if binding == "python":
        def wrap(fn):
            return fn
    else:
        from numba import cuda

        wrap = cuda.jit(device=True, forceinline=True)
    ieee_mul, ieee_add, ieee_sub, ieee_div, ieee_float = ieee.fmul, ieee.fadd, ieee.fsub, ieee.fdiv, ieee.to_float
    exact_mul, exact_div = exact.mul, exact.div

    @wrap
    def flushed(r, value):
        if abs(r) < fmin or (abs(r) == fmin and abs(value) < edge):
            return np.float32(0.0) * r
        return r

    @wrap
    def fmul(a, b):
        return flushed(ieee_mul(a, b), exact_mul(a, b))

    @wrap
    def fadd(a, b):
        return flushed(ieee_add(a, b), np.float64(1.0))

    @wrap
    def fsub(a, b):
        return flushed(ieee_sub(a, b), np.float64(1.0))

    @wrap
    def fdiv(a, b):
        return flushed(ieee_div(a, b), exact_div(a, b))

    @wrap
    def to_float(d):
        return flushed(ieee_float(d), np.float64(d))

    return SimpleNamespace(fmul=fmul, fadd=fadd, fsub=fsub, fdiv=fdiv, to_float=to_float, certain=ieee.certain)
