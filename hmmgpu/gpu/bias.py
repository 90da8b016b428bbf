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

from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from hmmgpu.constants import LOG2, SCALE_B, STATUS_RANGE
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


@dataclass(frozen=True)
class BiasSpec:
    """The bias filter kernel (one specialisation: it has no model shape)."""

    @property
    def name(self) -> str:
        return "bias_v1"

    def source(self, binding: str) -> str:
        return kernel_module(
            "Bias filter kernel.", binding, ARGS, _BODY,
            "import math", "from hmmgpu.gpu import rounding as _rounding", f"_F = _rounding.float_helpers({binding!r})",
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
