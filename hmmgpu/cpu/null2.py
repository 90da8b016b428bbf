"""HMMER 3.4's null2 model (``p7_Null2_ByTrace``, ``p7_Null2_ByExpectation``, impl_sse) and the
glibc ``logf`` that turns its odds into the per-residue scores ``n2sc``: the plain CPU reference.

What it computes
----------------
Domain definition corrects every domain's score for biased composition with an ad hoc
"null2" model: the residue frequencies the profile itself would emit along the domain, as
odds against the background, ``null2[x] = f_d(x) / f_0(x)`` for each of the 29 digital codes.
HMMER has two ways of weighing the emitting states (hmmer-domaindef-spec.md §2.6 and §3):

* :func:`null2_by_expectation` (``p7_Null2_ByExpectation``), for the envelope of a region
  that held one domain: the posterior decoding matrix of the envelope, summed over its rows;
* :func:`null2_by_trace` (``p7_Null2_ByTrace``), for each domain of each of the 200 stochastic
  traces of a region that held several: the counts of the trace's emitting states from its
  B to its E.

Both then share one step (:func:`null2_odds`): the state weights, normalised by the domain
length, times the match emission odds ``rfv``, summed per residue, plus the N, C, J weight;
then the degenerate codes get the average of their residues' odds (Easel's
``esl_abc_FAvgScVec``) and the gap, ``*`` and ``~`` codes get 1. ``n2sc`` is the log of those
odds (``logf``), taken through :func:`glibc_logf`.

Why the code looks as it does
-----------------------------
The result must equal libhmmer's bit for bit, so the float operations are HMMER's, in its
order, each rounded to binary32 (numba without fastmath fuses no multiply-add):

* the weights live in HMMER's striped layout, ``w[q][r]`` for node ``k = r Q + q + 1``
  (``Q = max(2, ceil(M / 4))``, four lanes), and the sum over the model is a four-lane vector
  sum over ``q``, lane by lane ``sv = sv + w_M rfv[x]`` then ``sv = sv + w_I`` (insert odds
  are implicitly 1), reduced by Easel's horizontal sum ``(l0 + l1) + (l2 + l3)``;
* the normaliser is ``(float) (1.0 / (double) (float) Ld)``: a double division stored in a float;
* the trace version counts an I state in the *M* cell of its node (HMMER addresses the M slot
  for both; the I row stays zero, and adding it adds +0);
* the expectation version sums the posterior rows 1..Ld in row order (row 1 copied, then each
  later row added), M and I lanes and the N, C, J specials alike;
* ``logf`` must be glibc's: numpy's float32 ``log`` differs from it in the last bit on about
  40% of real ``n2sc`` values (spec §9), and CUDA's is neither. :func:`glibc_logf` calls the
  host C library's ``logf`` itself, from a numba loop (numba calls a ctypes function directly).
"""
from __future__ import annotations

import ctypes
import ctypes.util

import numpy as np
from numba import njit

from hmmgpu.constants import K, KP

__all__ = ["DEGENERATE_RESIDUES", "glibc_logf", "null2_by_expectation", "null2_by_trace", "null2_odds",
           "average_degenerate"]

F32 = np.float32

#: Easel's amino degeneracies (``create_amino``): code -> residue codes it stands for, ascending.
#: B = {D, N}, J = {I, L}, Z = {E, Q}, O = {K}, U = {C}, X = all twenty.
DEGENERATE_RESIDUES = {
    21: (2, 11),
    22: (7, 9),
    23: (3, 13),
    24: (8,),
    25: (1,),
    26: tuple(range(K)),
}
_DEGEN = np.zeros((KP, K), dtype=np.bool_)
for _code, _residues in DEGENERATE_RESIDUES.items():
    _DEGEN[_code, list(_residues)] = True
_NDEGEN = _DEGEN.sum(axis=1).astype(np.int32)
_GAP, _NONRESIDUE, _MISSING = K, KP - 2, KP - 1
#: The largest value flush-to-zero sets to 0 (FLT_MIN, the smallest normal float).
_FLT_MIN = F32(np.finfo(np.float32).tiny)

_libm = ctypes.CDLL(ctypes.util.find_library("m"))
_logf = _libm.logf
_logf.restype, _logf.argtypes = ctypes.c_float, [ctypes.c_float]

# p7T_ state codes read here (hmmgpu.cpu.stotrace has the full set).
_ST_N, _ST_C, _ST_J = 5, 8, 10


@njit(nogil=True, error_model="numpy")  # not cached: numba cannot cache a function that calls through a ctypes pointer
def _glibc_logf_loop(values, out):
    for z in range(values.size):
        out[z] = _logf(values[z])


def glibc_logf(values) -> np.ndarray:
    """The host C library's ``logf`` of each float32 value (HMMER's ``logf``, bit for bit)."""
    values = np.ascontiguousarray(values, dtype=F32).ravel()
    out = np.empty_like(values)
    _glibc_logf_loop(values, out)
    return out


@njit(cache=True, nogil=True, error_model="numpy")
def average_degenerate(null2):
    """Easel's ``esl_abc_FAvgScVec`` for the amino alphabet, then the gap, ``*`` and ``~``
    codes set to 1, in place: each degenerate code gets ``(sum of its residues' odds, in
    ascending residue order, in float) / (float) ndegen``."""
    for x in range(K + 1, KP - 2):
        total = F32(0.0)
        for a in range(K):
            if _DEGEN[x, a]:
                total = total + null2[a]
        null2[x] = total / F32(_NDEGEN[x])
    null2[_GAP] = F32(1.0)
    null2[_NONRESIDUE] = F32(1.0)
    null2[_MISSING] = F32(1.0)


@njit(cache=True, nogil=True, error_model="numpy")
def null2_odds(weight_m, weight_i, xfactor, rfv, null2):
    """``null2[x]`` for every code from normalised striped state weights ``weight_m``,
    ``weight_i`` float32 [Q][4] and the N, C, J weight ``xfactor``: the four-lane sum over q of
    ``w_M rfv[x]`` then ``w_I``, the horizontal sum ``(l0 + l1) + (l2 + l3)``, plus ``xfactor``;
    then :func:`average_degenerate`."""
    Q = weight_m.shape[0]
    sv = np.empty(4, dtype=np.float32)
    for x in range(K):
        for r in range(4):
            sv[r] = F32(0.0)
        for q in range(Q):
            for r in range(4):
                sv[r] = sv[r] + weight_m[q, r] * rfv[x, q, r]
            for r in range(4):
                sv[r] = sv[r] + weight_i[q, r]
        null2[x] = ((sv[0] + sv[1]) + (sv[2] + sv[3])) + xfactor
    average_degenerate(null2)


@njit(cache=True, nogil=True, error_model="numpy")
def _domain_norm(Ld):
    """``(float) (1.0 / (double) (float) Ld)``."""
    return F32(1.0 / np.float64(F32(Ld)))


@njit(cache=True, nogil=True, error_model="numpy")
def _normalized_odds(weight_m, weight_i, xn, xc, xj, Ld, rfv, null2):
    """The tail both null2 functions share: the state weights (in place) and the special
    states' ``xfactor = (N + C) + J`` times ``1 / Ld``, then :func:`null2_odds`."""
    norm = _domain_norm(Ld)
    for q in range(weight_m.shape[0]):
        for r in range(4):
            weight_m[q, r] = weight_m[q, r] * norm
            weight_i[q, r] = weight_i[q, r] * norm
    xfactor = (xn * norm + xc * norm) + xj * norm
    null2_odds(weight_m, weight_i, xfactor, rfv, null2)


@njit(cache=True, nogil=True, error_model="numpy")
def null2_by_trace(st, tk, ti, zstart, zend, rfv, null2):
    """``p7_Null2_ByTrace(om, tr, zstart, zend, wrk, null2)``: the null2 odds (into float32
    ``null2[Kp]``) of the trace elements ``zstart..zend`` (a domain's B..E) of a trace given as
    arrays of states ``st``, nodes ``tk`` and residues ``ti``; ``rfv`` float32 [Kp][Q][4]."""
    Q = rfv.shape[1]
    count_m = np.zeros((Q, 4), dtype=np.float32)
    count_i = np.zeros((Q, 4), dtype=np.float32)
    xn = F32(0.0)
    xc = F32(0.0)
    xj = F32(0.0)
    Ld = 0
    for z in range(zstart, zend + 1):
        if ti[z] == 0:
            continue
        Ld += 1
        k = tk[z]
        if k > 0:  # M or I: HMMER counts both in the M cell of node k
            count_m[(k - 1) % Q, (k - 1) // Q] += F32(1.0)
        elif st[z] == _ST_N:
            xn += F32(1.0)
        elif st[z] == _ST_C:
            xc += F32(1.0)
        elif st[z] == _ST_J:
            xj += F32(1.0)
    _normalized_odds(count_m, count_i, xn, xc, xj, Ld, rfv, null2)


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _read(v, flush_tiny):
    """``v``, or 0 where ``flush_tiny`` and ``v`` is tiny (``0 < v <= FLT_MIN``: flush-to-zero's 0)."""
    return F32(0.0) if flush_tiny and v > F32(0.0) and v <= _FLT_MIN else v


@njit(cache=True, nogil=True, error_model="numpy")
def _expectation(pp_m, pp_i, pp_x, rfv, null2, flush_tiny):
    Ld = pp_m.shape[0] - 1
    Q = rfv.shape[1]
    sum_m = np.empty((Q, 4), dtype=np.float32)
    sum_i = np.empty((Q, 4), dtype=np.float32)
    for q in range(Q):
        for r in range(4):
            sum_m[q, r] = _read(pp_m[1, q, r], flush_tiny)
            sum_i[q, r] = _read(pp_i[1, q, r], flush_tiny)
    xn = _read(pp_x[1, 1], flush_tiny)
    xc = _read(pp_x[1, 4], flush_tiny)
    xj = _read(pp_x[1, 2], flush_tiny)
    for i in range(2, Ld + 1):
        for q in range(Q):
            for r in range(4):
                sum_m[q, r] = _read(pp_m[i, q, r], flush_tiny) + sum_m[q, r]
                sum_i[q, r] = _read(pp_i[i, q, r], flush_tiny) + sum_i[q, r]
        xn = xn + _read(pp_x[i, 1], flush_tiny)
        xc = xc + _read(pp_x[i, 4], flush_tiny)
        xj = xj + _read(pp_x[i, 2], flush_tiny)
    _normalized_odds(sum_m, sum_i, xn, xc, xj, Ld, rfv, null2)


def null2_by_expectation(pp_m, pp_i, pp_x, rfv, flush_tiny: bool = False) -> np.ndarray:
    """``p7_Null2_ByExpectation(om, pp, null2)``: the null2 odds float32 [Kp] of an envelope of
    ``Ld >= 1`` residues from its posterior decoding matrix, given as the striped M and I
    cells ``pp_m``, ``pp_i`` float32 [Ld+1][Q][4] and the special-state rows ``pp_x`` float32
    [Ld+1][6] (HMMER's ``p7X_`` order E N J B C SCALE); ``rfv`` float32 [Kp][Q][4]. Row 0 is
    not read (HMMER overwrites it with the sums; the inputs here are left unchanged). With
    ``flush_tiny``, the odds of the matrix as flush-to-zero holds it: every tiny value read as 0."""
    null2 = np.empty(KP, dtype=np.float32)
    _expectation(np.asarray(pp_m, F32), np.asarray(pp_i, F32), np.asarray(pp_x, F32), np.asarray(rfv, F32), null2,
                 bool(flush_tiny))
    return null2
