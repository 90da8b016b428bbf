"""Exact CPU filters (numba, parallel over sequences): the reference the GPU kernels must equal.

Each function follows docs/algorithms.md: SSV with HMMER's SSV-first decision logic (§5),
the J-state MSV (§4), the Viterbi filter (§7), the bias filter (§8) and the
Gumbel/exponential P-values (§9). Filters return Easel status
codes and the integer state value from which :mod:`hmmgpu.stages.profiles` computes the float score.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from hmmgpu.constants import STATUS_NORESULT, STATUS_OK, STATUS_RANGE
from hmmgpu.stages.profiles import ModelProfile, bias_length_terms, tjb_table, xw_move_table

_OK, _RANGE, _NORESULT = np.int8(STATUS_OK), np.int8(STATUS_RANGE), np.int8(STATUS_NORESULT)
_LO = -32768
_F32 = np.float32


@njit(cache=True, nogil=True)
def _ssv_one(cost, bias, tbm, tec, base, tjb, dsq):
    """One target through p7_SSVFilter: (status, xJ)."""
    M = cost.shape[1]
    if tjb + tbm + tec + bias >= 127:
        return _NORESULT, 0
    B0 = base - tjb - tbm
    limit = 127 - bias  # max U at or above this means the byte max overflowed
    # U = score - B0 >= 0 along each diagonal: U(i,k) = max(0, U(i-1,k-1) + bias - cost)
    rows = np.zeros((2, M + 1), np.int32)
    b32 = np.int32(bias)
    zero = np.int32(0)
    best = zero
    for i in range(dsq.shape[0]):
        cost_row = cost[dsq[i]]
        prev = rows[i & 1]
        cur = rows[(i + 1) & 1]
        rmax = zero
        for k in range(M):
            v = max(np.int32(prev[k] + b32 - np.int32(cost_row[k])), zero)
            cur[k + 1] = v
            rmax = max(rmax, v)
        if rmax > best:
            best = rmax
            if best >= limit:
                break
    if best >= limit:
        return (_NORESULT, 0) if B0 < 128 else (_RANGE, 0)
    V = B0 + best
    if V >= 255 - bias:
        return _RANGE, 0
    xJ = V - tec
    if xJ > base:
        return _NORESULT, 0
    return _OK, xJ


@njit(cache=True, nogil=True)
def _msv_one(cost, bias, tbm, tec, base, tjb, dsq):
    """One target through the J-state MSV recurrence: (status, J)."""
    M = cost.shape[1]
    tjbm = (tjb + tbm) & 0xFF
    J = 0
    B = max(0, base - tjbm)
    S = np.zeros(M + 1, np.int32)
    for i in range(dsq.shape[0]):
        row = cost[dsq[i]]
        E = 0
        for k in range(M, 0, -1):
            a = max(S[k - 1], B) + bias
            if a > 255:
                a = 255
            v = a - np.int32(row[k - 1])
            if v < 0:
                v = 0
            S[k] = v
            if v > E:
                E = v
        if E + bias >= 255:
            return _RANGE, 0
        E = max(0, E - tec)
        J = max(J, E)
        B = max(0, max(base, J) - tjbm)
    return _OK, J


_SSV_ONLY, _SSV_FIRST, _MSV_ONLY = 0, 1, 2


@njit(parallel=True, cache=True, nogil=True)
def _msv_stage(cost, bias, tbm, tec, base, tjb_tab, residues, offsets, lengths, idx, mode):
    n = idx.shape[0]
    status = np.zeros(n, np.int8)
    xj = np.zeros(n, np.int32)
    for j in prange(n):
        t = idx[j]
        L = lengths[t]
        if L == 0:
            continue
        dsq = residues[offsets[t]: offsets[t] + L]
        tjb = np.int32(tjb_tab[L])
        st, v = _NORESULT, 0
        if mode != _MSV_ONLY:
            st, v = _ssv_one(cost, bias, tbm, tec, base, tjb, dsq)
        if st == _NORESULT and mode != _SSV_ONLY:
            st, v = _msv_one(cost, bias, tbm, tec, base, tjb, dsq)
        status[j] = st
        xj[j] = v
    return status, xj


def msv_filter(prof: ModelProfile, db, indices=None, force_msv=False, ssv_only=False):
    """SSV-first MSV of every target in ``indices``: (status int8, xJ int32), as ``p7_MSVFilter``.

    ``ssv_only`` returns ``p7_SSVFilter``'s own answer (NORESULT not resolved); ``force_msv``
    runs the J-state MSV on every target. Zero-length targets get status OK and xJ 0.
    """
    idx = np.arange(db.n, dtype=np.int64) if indices is None else np.asarray(indices, np.int64)
    b = prof.byte
    tjb = tjb_table(max(int(db.max_length), 1))
    mode = _SSV_ONLY if ssv_only else _MSV_ONLY if force_msv else _SSV_FIRST
    return _msv_stage(b.cost, b.bias_b, b.tbm_b, b.tec_b, b.base_b, tjb, db.residues, db.offsets,
                      db.lengths, idx, mode)


# ---------------------------------------------------------------- Viterbi filter


@njit(cache=True, inline="always")
def _sat16(v):
    return min(32767, max(-32768, v))


@njit(cache=True, nogil=True)
def _viterbi_one(rw, tw, ddbound, base_w, xwE_move, xwE_loop, xw_move, dsq):
    """One target through p7_ViterbiFilter: (status, C)."""
    M = rw.shape[1]
    tBM, tMM, tIM, tDM, tMD, tMI, tII, tDD = tw[0], tw[1], tw[2], tw[3], tw[4], tw[5], tw[6], tw[7]
    Mp = np.full(M + 1, _LO, np.int32)  # index k = node k; index 0 is the -inf boundary
    Ip = np.full(M + 1, _LO, np.int32)
    Dp = np.full(M + 1, _LO, np.int32)
    Mc = np.full(M + 1, _LO, np.int32)
    Ic = np.full(M + 1, _LO, np.int32)
    Dc = np.full(M + 2, _LO, np.int32)
    N = base_w
    B = N + xw_move
    J = _LO
    C = _LO
    for i in range(dsq.shape[0]):
        row = rw[dsq[i]]
        E = _LO
        Dmax = _LO
        Dc[1] = _LO
        for k in range(1, M + 1):
            m = _sat16(B + tBM[k - 1])
            m = max(m, _sat16(Mp[k - 1] + tMM[k - 1]))
            m = max(m, _sat16(Ip[k - 1] + tIM[k - 1]))
            m = max(m, _sat16(Dp[k - 1] + tDM[k - 1]))
            mk = _sat16(m + row[k - 1])
            Mc[k] = mk
            if mk > E:
                E = mk
            d = _sat16(mk + tMD[k - 1])
            Dc[k + 1] = d
            if d > Dmax:
                Dmax = d
            Ic[k] = max(_sat16(Mp[k] + tMI[k - 1]), _sat16(Ip[k] + tII[k - 1]))
        if E >= 32767:
            return _RANGE, 0
        C = max(C, E + xwE_move)
        J = max(J, E + xwE_loop)
        B = max(J + xw_move, N + xw_move)
        if Dmax + ddbound > B:
            for k in range(2, M + 1):
                Dc[k] = max(Dc[k], _sat16(Dc[k - 1] + tDD[k - 2]))
        Mp, Mc = Mc, Mp
        Ip, Ic = Ic, Ip
        for k in range(1, M + 1):
            Dp[k] = Dc[k]
    return _OK, C


@njit(parallel=True, cache=True, nogil=True)
def _viterbi_stage(rw, tw, ddbound, base_w, xwE_move, xwE_loop, xw_tab, residues, offsets, lengths, idx):
    n = idx.shape[0]
    status = np.zeros(n, np.int8)
    xc = np.full(n, _LO, np.int32)
    for j in prange(n):
        t = idx[j]
        L = lengths[t]
        if L == 0:
            continue
        dsq = residues[offsets[t]: offsets[t] + L]
        status[j], xc[j] = _viterbi_one(rw, tw, ddbound, base_w, xwE_move, xwE_loop,
                                        np.int32(xw_tab[L]), dsq)
    return status, xc


def viterbi_filter(prof: ModelProfile, db, indices=None):
    """``p7_ViterbiFilter`` of every target in ``indices``: (status int8, C int32)."""
    idx = np.arange(db.n, dtype=np.int64) if indices is None else np.asarray(indices, np.int64)
    w = prof.word
    xw = xw_move_table(max(int(db.max_length), 1)).astype(np.int32)
    return _viterbi_stage(w.rw.astype(np.int32), w.tw.astype(np.int32), w.ddbound, w.base_w,
                          w.xw_e_move, w.xw_e_loop, xw, db.residues, db.offsets, db.lengths, idx)


# ---------------------------------------------------------------- bias filter


@njit(cache=True, nogil=True)
def _bias_one(eo, t10, t11, dsq):
    L = dsq.shape[0]
    p1 = np.float32(np.float32(L) / np.float32(L + 1))
    t00 = p1
    t01 = np.float32(np.float32(1.0) - p1)
    zero = np.float32(0.0)
    x = dsq[0]
    d0 = eo[x, 0] * np.float32(0.999)
    d1 = eo[x, 1] * np.float32(0.001)
    mx = max(zero, max(d0, d1))
    d0 = d0 / mx
    d1 = d1 / mx
    F = np.float32(math.log(np.float64(mx)))
    for i in range(1, L):
        x = dsq[i]
        n0 = ((zero + d0 * t00) + d1 * t10) * eo[x, 0]
        n1 = ((zero + d0 * t01) + d1 * t11) * eo[x, 1]
        mx = max(zero, max(n0, n1))
        d0 = n0 / mx
        d1 = n1 / mx
        F = np.float32(F + np.float32(math.log(np.float64(mx))))
    end = (zero + d0) + d1
    return np.float32(F + np.float32(math.log(np.float64(end))))


@njit(parallel=True, cache=True, nogil=True)
def _bias_stage(eo, t10, t11, residues, offsets, lengths, idx):
    n = idx.shape[0]
    F = np.zeros(n, np.float32)
    for j in prange(n):
        t = idx[j]
        L = lengths[t]
        if L > 0:
            F[j] = _bias_one(eo, t10, t11, residues[offsets[t]: offsets[t] + L])
    return F


def bias_filter(prof: ModelProfile, db, indices) -> np.ndarray:
    """``p7_bg_FilterScore`` (nats, float32) of each target in ``indices`` (bias filter on)."""
    idx = np.asarray(indices, np.int64)
    b = prof.bias
    F = _bias_stage(b.emission_odds, b.t10, b.t11, db.residues, db.offsets, db.lengths, idx)
    # the length-model terms (glibc logf, as HMMER calls it): F + L*logf(p1) + logf(1 - p1)
    first, second = bias_length_terms(max(int(db.max_length), 1))
    L = db.lengths[idx]
    return ((F + first[L]).astype(_F32) + second[L]).astype(_F32)
