"""The composition bias filter kernel, and the first decisions of the cascade on the GPU.

What is computed
----------------
For every target that passed MSV (the MSV kernel's output list), one thread computes
HMMER's bias filter score ``filtersc`` (``p7_bg_FilterScore``, docs/algorithms.md §8.2-§8.3): a
scaled two-state Forward over the target in float arithmetic, with a double ``log`` per
residue, plus the length-model terms. It then takes the pipeline's next decisions with
``s = (float)((usc - filtersc) / log 2)`` (``usc``: the MSV score from the integer ``xJ``):
fail the F1 test again, survive with the Viterbi filter skipped (``P <= F2``), or go to the
Viterbi filter, whose work list it appends to. With ``--nobias`` ``filtersc`` is the null
score.

Why the result is exact
-----------------------
Every float operation is an IEEE operation with round-to-nearest, as on the CPU: the
multiplies and adds are ``__fmul_rn``/``__fadd_rn`` (which the compiler never fuses into a
multiply-add), the division and the double division are correctly rounded, and no fast
math is used. The one function that is not correctly rounded on the GPU is the double
``log``: the GPU's and glibc's agree to a couple of units in the last place of a double,
so after rounding to float they differ only when the double result lies within such a
distance of a float rounding boundary. The kernel checks each ``log`` for that (rounding
``r(1 - 2^-50)`` and ``r(1 + 2^-50)`` to float must agree: a margin of at least 4 units in
the last place of ``r``, twice the largest possible disagreement) and hands any target where
it fails (about one in 10^5 targets) to the host, which recomputes it with HMMER's own code. The decisions compare ``s``
with host-computed bands (:func:`hmmgpu.stages.stats.score_threshold`): outside a band the P-value
test's answer is certain; inside one the host decides with HMMER's double arithmetic.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from enum import IntEnum
from types import SimpleNamespace

import numpy as np

from hmmgpu.constants import LOG2, SCALE_B, STATUS_RANGE
from hmmgpu.stages.forward import FLT_MIN, FTZ_EDGE
from hmmgpu.gpu.runtime.emit import kernel_module
from hmmgpu.gpu.runtime.kargs import Arg


class Decision(IntEnum):
    """What the bias kernel decided for a target that passed MSV."""

    FAIL = 0  #: fails the bias-corrected F1 test
    SURVIVE = 1  #: passes; its P-value is <= F2, so the Viterbi filter is skipped
    VITERBI = 2  #: passes; the Viterbi filter decides
    VITERBI_OR_SKIP = 3  #: passes; the host decides whether P <= F2 (the Viterbi filter ran anyway)
    HOST = 4  #: the host recomputes the bias score and decides


#: Parameters of the bias kernel, in order.
ARGS = (
    Arg("residues", "uint32[:]"), Arg("word_offsets", "int64[:]"), Arg("lengths", "int32[:]"),
    Arg("msv_pos", "int32[:]"), Arg("msv_status", "int8[:]"), Arg("msv_xj", "int32[:]"),
    Arg("n_msv_at", "int32[:]"), Arg("n_msv_slot", "int32"),
    Arg("odds", "float32[:]"), Arg("t10", "float32"), Arg("t11", "float32"), Arg("bias_on", "int32"),
    Arg("p1_by_length", "float32[:]"), Arg("q1_by_length", "float32[:]"), Arg("first_by_length", "float32[:]"),
    Arg("second_by_length", "float32[:]"), Arg("null_by_length", "float32[:]"), Arg("tjb_by_length", "int32[:]"),
    Arg("bands", "float32[:]"), Arg("filtersc", "float32[:]"), Arg("decision", "int8[:]"),
    Arg("vit_pos", "int32[:]"), Arg("vit_from", "int32[:]"), Arg("n_vit_at", "int32[:]"), Arg("n_vit_slot", "int32"),
)
#: The ``bands`` argument: (lo, hi) of the F1 test, then of the F2 test, as float bit scores.
BAND_ORDER = ("f1_lo", "f1_hi", "f2_lo", "f2_hi")

_BODY = '''
    n = n_msv_at[n_msv_slot]
    k = cuda.grid(1)
    stride = cuda.gridsize(1)
    while k < n:
        p = msv_pos[k]
        L = lengths[p]
        unsure = False
        if bias_on != 0:
            wb = word_offsets[p]
            t00 = p1_by_length[L]
            t01 = q1_by_length[L]
            w = residues[wb]
            x = int32(w & u32(255))
            d0 = fmul(odds[2 * x], np.float32(0.999))
            d1 = fmul(odds[2 * x + 1], np.float32(0.001))
            mx = max(F0, max(d0, d1))
            d0 = fdiv(d0, mx)
            d1 = fdiv(d1, mx)
            r = math.log(np.float64(mx))
            unsure = unsure or not certain(r)
            F = np.float32(r)
            i = 1
            while i < L:
                if (i & 3) == 0:
                    w = residues[wb + (i >> 2)]
                x = int32((w >> u32(8 * (i & 3))) & u32(255))
                n0 = fmul(fadd(fadd(F0, fmul(d0, t00)), fmul(d1, t10)), odds[2 * x])
                n1 = fmul(fadd(fadd(F0, fmul(d0, t01)), fmul(d1, t11)), odds[2 * x + 1])
                mx = max(F0, max(n0, n1))
                d0 = fdiv(n0, mx)
                d1 = fdiv(n1, mx)
                r = math.log(np.float64(mx))
                unsure = unsure or not certain(r)
                F = fadd(F, np.float32(r))
                i += 1
            r = math.log(np.float64(fadd(fadd(F0, d0), d1)))
            unsure = unsure or not certain(r)
            F = fadd(F, np.float32(r))
            fsc = fadd(fadd(F, first_by_length[L]), second_by_length[L])
        else:
            fsc = null_by_length[L]
        filtersc[k] = fsc
        if msv_status[k] == RANGE:
            s = INF
        else:
            u = fsub(fdiv(fsub(np.float32(msv_xj[k] - tjb_by_length[L]), F190), SCALE), F3)
            s = np.float32(np.float64(fsub(u, fsc)) / LOG2)
        if unsure:
            d = HOST
        elif s < bands[0]:
            d = FAIL
        elif s < bands[1]:
            d = HOST
        elif s >= bands[3]:
            d = SURVIVE
        else:
            d = VITERBI if s < bands[2] else VITERBI_OR_SKIP
            j = cuda.atomic.add(n_vit_at, n_vit_slot, 1)
            vit_pos[j] = p
            vit_from[j] = k
        decision[k] = d
        k += stride
'''


@functools.lru_cache(maxsize=None)
def float_helpers(binding: str, ftz: bool = False) -> SimpleNamespace:
    """``fmul``, ``fadd``, ``fsub``, ``fdiv`` (float32, round to nearest, never fused),
    ``to_float(d)`` (a double rounded to float) and ``certain(r)`` (does the double ``r`` round to the same float however its last 2 bits go).

    With ``ftz`` the four operations are hmmsearch's: SSE arithmetic with flush-to-zero on
    (denormals-are-zero off), as the x86 unit computes them under hmmsearch's MXCSR. A result
    whose rounding to float with an unbounded exponent is below FLT_MIN (Intel detects
    underflow after rounding) is a zero of its sign. The IEEE result ``r`` says so: below FLT_MIN
    it is (an exact result below ``FLT_MIN - 2^-150`` rounds below FLT_MIN either way); equal to
    FLT_MIN it is where the exact result lies below ``FLT_MIN - 2^-151`` (:data:`FTZ_EDGE`), which
    the double product of two floats gives exactly, their double quotient on the right side
    (it is never within 2^-49 of the bound, relatively), and a double rounded to float is itself;
    a sum or difference of floats is exact there (a multiple of 2^-149). Inputs are used as they are, as without denormals-are-zero."""
    from numba import cuda

    if binding == "python":
        f = np.float32
        if not ftz:
            return SimpleNamespace(fmul=lambda a, b: f(f(a) * f(b)), fadd=lambda a, b: f(f(a) + f(b)),
                                   fsub=lambda a, b: f(f(a) - f(b)), fdiv=lambda a, b: f(f(a) / f(b)),
                                   to_float=lambda d: f(d),
                                   certain=lambda r: f(r - abs(r) * 2.0 ** -50) == f(r + abs(r) * 2.0 ** -50))

        def flushed(r, exact):
            return f(0.0) * r if abs(r) < FLT_MIN or (abs(r) == FLT_MIN and abs(exact) < FTZ_EDGE) else r

        return SimpleNamespace(fmul=lambda a, b: flushed(f(f(a) * f(b)), float(a) * float(b)),
                               fadd=lambda a, b: flushed(f(f(a) + f(b)), 1.0),
                               fsub=lambda a, b: flushed(f(f(a) - f(b)), 1.0),
                               fdiv=lambda a, b: flushed(f(f(a) / f(b)), float(a) / float(b)),
                               to_float=lambda d: flushed(f(d), float(d)),
                               certain=lambda r: f(r - abs(r) * 2.0 ** -50) == f(r + abs(r) * 2.0 ** -50))
    from numba.cuda import libdevice

    dev = dict(device=True, forceinline=True)
    fmin, edge = np.float32(FLT_MIN), np.float64(FTZ_EDGE)

    @cuda.jit(**dev)
    def certain(r):
        margin = abs(r) * 8.881784197001252e-16  # 2**-50
        return np.float32(r - margin) == np.float32(r + margin)

    if not ftz:
        @cuda.jit(**dev)
        def fmul(a, b):
            return libdevice.fmul_rn(np.float32(a), np.float32(b))

        @cuda.jit(**dev)
        def fadd(a, b):
            return libdevice.fadd_rn(np.float32(a), np.float32(b))

        @cuda.jit(**dev)
        def fsub(a, b):
            return libdevice.fsub_rn(np.float32(a), np.float32(b))

        @cuda.jit(**dev)
        def fdiv(a, b):
            return libdevice.fdiv_rn(np.float32(a), np.float32(b))

        @cuda.jit(**dev)
        def to_float(d):
            return np.float32(d)

        return SimpleNamespace(fmul=fmul, fadd=fadd, fsub=fsub, fdiv=fdiv, to_float=to_float, certain=certain)

    @cuda.jit(**dev)
    def flushed_on_device(r, exact):
        if abs(r) < fmin or (abs(r) == fmin and abs(exact) < edge):
            return np.float32(0.0) * r
        return r

    @cuda.jit(**dev)
    def fmul(a, b):
        return flushed_on_device(libdevice.fmul_rn(np.float32(a), np.float32(b)),
                       libdevice.dmul_rn(np.float64(np.float32(a)), np.float64(np.float32(b))))

    @cuda.jit(**dev)
    def fadd(a, b):
        return flushed_on_device(libdevice.fadd_rn(np.float32(a), np.float32(b)), np.float64(1.0))

    @cuda.jit(**dev)
    def fsub(a, b):
        return flushed_on_device(libdevice.fsub_rn(np.float32(a), np.float32(b)), np.float64(1.0))

    @cuda.jit(**dev)
    def fdiv(a, b):
        return flushed_on_device(libdevice.fdiv_rn(np.float32(a), np.float32(b)),
                                 libdevice.ddiv_rn(np.float64(np.float32(a)), np.float64(np.float32(b))))

    @cuda.jit(**dev)
    def to_float(d):
        return flushed_on_device(np.float32(d), np.float64(d))

    return SimpleNamespace(fmul=fmul, fadd=fadd, fsub=fsub, fdiv=fdiv, to_float=to_float, certain=certain)


@dataclass(frozen=True)
class BiasSpec:
    """The bias filter kernel (one specialisation: it has no model shape)."""

    @property
    def name(self) -> str:
        return "bias_v1"

    def source(self, binding: str) -> str:
        return kernel_module(
            "Bias filter kernel.", binding, ARGS, _BODY,
            "import math", "from hmmgpu.gpu import bias as _bias", f"_F = _bias.float_helpers({binding!r})",
            "fmul = _F.fmul; fadd = _F.fadd; fsub = _F.fsub; fdiv = _F.fdiv; certain = _F.certain",
            f"RANGE = {STATUS_RANGE}; LOG2 = {LOG2!r}",
            f"SCALE = np.float32({float(SCALE_B)!r}); F190 = np.float32(190.0); F3 = np.float32(3.0)",
            "F0 = np.float32(0.0); INF = np.float32(np.inf)",
            *[f"{d.name} = {d.value}" for d in Decision])


def length_tables(max_length: int) -> dict:
    """Per-length host tables of the kernel (float32 unless said): ``p1 = L/(L+1)``,
    ``q1 = 1 - p1``, the two length-model terms, the null score, ``tjb`` (int32)."""
    from hmmgpu.stages.profiles import bias_length_terms, null_table, tjb_table

    L = np.arange(max_length + 1)
    p1 = (L.astype(np.float32) / (L + 1).astype(np.float32)).astype(np.float32)
    first, second = bias_length_terms(max_length)
    return dict(p1_by_length=p1, q1_by_length=(np.float32(1.0) - p1).astype(np.float32),
                first_by_length=np.ascontiguousarray(first), second_by_length=np.ascontiguousarray(second),
                null_by_length=np.ascontiguousarray(null_table(max_length)),
                tjb_by_length=tjb_table(max_length).astype(np.int32))
