"""HMMER 3.4's posterior decoding of an envelope (``p7_Decoding``, impl_sse/decoding.c) on
the CPU, lane for lane: the plain reference beside a GPU kernel.

Domain definition rescores each envelope with a full Forward and a full Backward matrix
(:func:`hmmgpu.cpu.fwdback.forward_matrix`, :func:`~hmmgpu.cpu.fwdback.backward_matrix`,
unihit), then turns the two into the posterior probability of every state at every residue
(hmmer-postfilter-spec.md §5.2). The optimal accuracy alignment (:mod:`hmmgpu.cpu.optacc`)
and the null2 model by expectation read that matrix. It is cheap (two or three float
products a cell) but its order is HMMER's, and every product is rounded on its own:

* ``sp = f32(1.0 / (double) B[0].N)``, the inverse of the whole envelope's probability
  (a double division rounded to float, as C does with the double literal);
* row 0 is zero; on row i, ``t = sp * F[i].SCALE`` and, per cell and lane,
  ``M = (fM * bM) * t``, ``I = (fI * bI) * t``, ``D = 0``; the specials E and B are 0 and
  ``N = ((F[i-1].N * B[i].N) * xf[N][LOOP]) * sp`` (J and C likewise, with their own loop);
* where Backward switched to its own scale factors (``has_own_scales``), ``sp`` then takes
  ``sp * (F[i].SCALE / B[i].SCALE)``, and the status is eslERANGE when ``sp`` ends
  infinite (``rescore_isolated_domain`` then drops the domain).

HMMER decodes in place, into the Backward matrix, so the result keeps Backward's SCALE
column, ``totscale`` and ``has_own_scales``; :func:`decode` returns it so too, to compare
with libhmmer's matrix as ``rescore_isolated_domain`` leaves it.

Exactness flags (as :mod:`hmmgpu.cpu.fwdback` defines them): the flags of the two matrices
are carried. Under flush-to-zero (hmmsearch's mode, not pyhmmer's) a posterior value whose
products met a tiny factor or result (``0 < v <= FLT_MIN``; a tiny special of the parsers
is one hmmsearch stored as 0) is 0 (:func:`flushed`): where the IEEE value is itself tiny, only
that stored value differs (:data:`~hmmgpu.stages.forward.TINY_ROWS`; far from the alignment
the posterior of a cell is often that small), where it is a normal number the matrix differs
(:data:`~hmmgpu.stages.forward.SUBNORMAL`, sent to the host); a tiny ``sp`` or row factor is
SUBNORMAL. The consumers of the posterior decide whether a tiny value matters to them
(:mod:`hmmgpu.cpu.optacc` checks that each is absorbed where it is added). In IEEE mode (pyhmmer's,
this reference's, the GPU's) the matrix is bit for bit libhmmer's whatever the flags.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from hmmgpu.cpu.fwdback import (
    DP_D, DP_I, DP_M, SUBNORMAL, TINY_ROWS, XB, XC, XE, XJ, XN, XSCALE, MatrixResult, StripedMatrix, tiny)
from hmmgpu.stages.forward import STATUS_OK, STATUS_RANGE

_F0 = np.float32(0.0)


@njit(cache=True, nogil=True, inline="always")
def flushed(any_tiny, v) -> int:
    """The flag of a value ``v`` whose computation met a tiny factor or result (``any_tiny``):
    under flush-to-zero it is 0, so :data:`TINY_ROWS` where ``v`` is tiny or 0 itself (only the
    stored value differs), :data:`SUBNORMAL` where it is a normal number."""
    if not any_tiny and not tiny(v):
        return 0
    return TINY_ROWS if (v == _F0 or tiny(v)) else SUBNORMAL


@njit(cache=True, nogil=True, error_model="numpy")
def posterior_rows(fwd_dp, fwd_xmx, bck_dp, bck_xmx, has_own_scales, loop_n, loop_j, loop_c, pp_dp, pp_xmx):
    """``p7_Decoding`` into ``pp_dp`` float32 [Ld+1, 3, Q, 4] and ``pp_xmx`` [Ld+1, 6] (their
    row 0 zeroed by the caller; every other cell is written here but the SCALE column, left to
    the caller). ``loop_n``, ``loop_j``,
    ``loop_c`` are ``xf[N|J|C][LOOP]``. Returns (the final ``sp``, flags)."""
    L = fwd_dp.shape[0] - 1
    Q = fwd_dp.shape[2]
    sp = np.float32(1.0 / np.float64(bck_xmx[0, XN]))
    flags = SUBNORMAL if tiny(sp) else 0
    loops = (loop_n, loop_j, loop_c)
    for i in range(1, L + 1):
        t = sp * fwd_xmx[i, XSCALE]
        if tiny(t):
            flags |= SUBNORMAL
        for q in range(Q):
            for z in range(4):
                fb_m = fwd_dp[i, DP_M, q, z] * bck_dp[i, DP_M, q, z]
                m = fb_m * t
                fb_i = fwd_dp[i, DP_I, q, z] * bck_dp[i, DP_I, q, z]
                ins = fb_i * t
                pp_dp[i, DP_M, q, z] = m
                pp_dp[i, DP_D, q, z] = _F0
                pp_dp[i, DP_I, q, z] = ins
                flags |= flushed(tiny(fb_m), m) | flushed(tiny(fb_i), ins)
        pp_xmx[i, XE] = _F0
        pp_xmx[i, XB] = _F0
        for c in range(3):
            col = (XN, XJ, XC)[c]
            f = fwd_xmx[i - 1, col]
            b = bck_xmx[i, col]
            a = f * b
            lp = a * loops[c]
            v = lp * sp
            pp_xmx[i, col] = v
            flags |= flushed(tiny(f) or tiny(b) or tiny(a) or tiny(lp), v)
        if has_own_scales:
            sp = sp * (fwd_xmx[i, XSCALE] / bck_xmx[i, XSCALE])
            if tiny(sp):
                flags |= SUBNORMAL
    return sp, flags


def decode(forward: MatrixResult, backward: MatrixResult, loop: np.float32) -> tuple:
    """``p7_Decoding`` of an envelope's Forward and Backward matrices (``loop`` is the
    model's ``xf[N|J|C][LOOP]`` at the full target length, the same for the three): (status,
    a :class:`MatrixResult` of the posterior matrix). Status :data:`STATUS_RANGE` where
    ``sp`` ended infinite."""
    fwd, bck = forward.matrix, backward.matrix
    if fwd.dp.shape != bck.dp.shape:
        raise ValueError("the Forward and Backward matrices are of different shapes")
    pp_dp = np.empty_like(fwd.dp)   # rows 1..Ld written whole by posterior_rows, row 0 zero
    pp_dp[0] = 0.0
    pp_xmx = np.empty_like(fwd.xmx)   # rows 1..Ld: E N J B C written, SCALE below
    pp_xmx[0] = 0.0
    loop = np.float32(loop)
    sp, flags = posterior_rows(fwd.dp, fwd.xmx, bck.dp, bck.xmx, bck.has_own_scales, loop, loop, loop, pp_dp, pp_xmx)
    pp_xmx[:, XSCALE] = bck.xmx[:, XSCALE]
    status = STATUS_RANGE if math.isinf(sp) else STATUS_OK
    posterior = StripedMatrix(dp=pp_dp, xmx=pp_xmx, totscale=bck.totscale, has_own_scales=bck.has_own_scales)
    return status, MatrixResult(flags=int(flags) | forward.flags | backward.flags, score=np.float32(np.nan),
                                matrix=posterior)


__all__ = ["posterior_rows", "decode", "flushed"]
