"""HMMER 3.4's optimal accuracy alignment of an envelope (``p7_OptimalAccuracy`` and
``p7_OATrace``, impl_sse/optacc.c) on the CPU, lane for lane, and the trace it produces.

A trace is HMMER's ``P7_TRACE``: the states of one path through the model, from S to T,
each with its node ``k``, the residue ``i`` it emitted and that residue's posterior
probability ``pp``. :class:`Trace` holds one as numpy arrays, in ``P7_TRACE``'s order and
with its conventions (``p7_trace_AppendWithPP`` and ``p7_trace_Reverse``): M and I carry
``k``, ``i`` and ``pp``; D carries ``k`` only; N, C and J carry ``i`` and ``pp`` on the
states that emitted (the first of a run of N, C or J emits nothing); S, B, E and T carry
nothing. The OA trace and domain definition's stochastic traces share it.

The optimal accuracy matrix (domaindef-spec §3 steps 3 and 4)
-------------------------------------------------------------
``p7_OptimalAccuracy`` is Forward's recursion with max for sum and the posterior
probability added for the emission: the alignment of maximum expected accuracy, its
score ``oasc = C(Ld)`` the expected number of correctly aligned residues. HMMER's SSE code
decides where a transition exists by its probability, not by a -inf score: a term whose
transition is 0 is ANDed with the compare mask ``t > 0`` and so becomes +0.0, not -inf
(a D->D carry through a zero tDD is 0.0; a special whose transition is 0 is 0.0, so in
unihit ``J = max(J(i-1) + ppJ(i), 0.0)``). :func:`oa_rows` follows that lane for lane:
``max`` is SSE's ``maxps(a, b) = a > b ? a : b``, shifts bring in -inf
(``esl_sse_rightshift_ps``), the D->D passes run four times with no early exit, E is the
``esl_sse_hmax_ps`` of the lanes, and every add is one float add. OA's values are sums of
posterior probabilities and maxima, with no product: under flush-to-zero they are OA's of the
posterior with its tiny values set to 0, and they are the same in both modes where every
tiny posterior added is absorbed by the sum it is added to (:func:`absorbed_add`, else
SUBNORMAL). The trace's choices compare those values; a tiny posterior it records is 0 under
flush-to-zero (the posterior's TINY_ROWS).

``p7_OATrace`` (:func:`oa_trace_states`) walks back from C at row Ld: M's predecessor is
the first maximum (``esl_vec_FArgMax``, strict ``>``) of M, I, D, B, a path whose
transition is 0 counting as -inf, the row i-1 values and their transitions right-shifted
with zeros (``esl_sse_rightshiftz_float``) for q = 0; D takes M where ``M >= D``, I takes
M where ``M >= I``; C, J take their own loop where strictly greater than E; B takes N
where strictly greater than J; E scans the row's cells vector by vector, the M lanes with
``>=`` and then the D lanes with ``>``, padding lanes included. Each state gets its
posterior probability as ``get_postprob`` gives it (M and I their cells; N, C, J their
special only when looping), then the trace is reversed as ``p7_trace_Reverse`` reverses it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from hmmgpu.cpu.fwdback import (DP_D, DP_I, DP_M, SUBNORMAL, XB, XC, XE, XJ, XN, MatrixResult, StripedMatrix,
                                right_shift, tiny)

#: HMMER's p7T_ state codes.
BOGUS, STATE_M, STATE_D, STATE_I, STATE_S, STATE_N, STATE_B, STATE_E, STATE_C, STATE_T, STATE_J, STATE_X = range(12)


@dataclass
class Trace:
    """A path S..T: ``st`` uint8 (p7T_ codes), ``k`` int32 (node, 0 outside M/D/I), ``i``
    int32 (emitted residue, 1-based, 0 where none), ``pp`` float32 (its posterior
    probability, 0 where none)."""

    st: np.ndarray
    k: np.ndarray
    i: np.ndarray
    pp: np.ndarray

    @property
    def N(self) -> int:
        return int(self.st.size)

    def shifted(self, offset: int) -> "Trace":
        """The trace with every emitted residue's ``i`` moved by ``offset`` (as
        ``rescore_isolated_domain`` moves an envelope's trace to the target's coordinates)."""
        i = (self.i + np.int32(offset)).astype(np.int32, copy=False)
        i[self.i == 0] = 0
        return Trace(st=self.st.copy(), k=self.k.copy(), i=i, pp=self.pp.copy())



# ----------------------------------------------------------------------------------------
# p7_OptimalAccuracy
# ----------------------------------------------------------------------------------------
_F0 = np.float32(0.0)
NEG_INF = np.float32(-np.inf)
#: Rows and columns of the special transitions ``xf`` (HMMER's p7O_ order).
XF_E, XF_N, XF_J, XF_C = range(4)
XF_MOVE, XF_LOOP = 0, 1


@njit(cache=True, nogil=True, inline="always")
def _max(a, b):
    """SSE's ``maxps`` (and ``ESL_MAX``): ``a > b ? a : b``."""
    return a if a > b else b


@njit(cache=True, nogil=True, inline="always")
def _masked(t, v):
    """``_mm_and_ps(_mm_cmpgt_ps(t, 0), v)``: v where the transition exists, else +0.0."""
    return v if t > _F0 else _F0


@njit(cache=True, nogil=True, inline="always")
def absorbed_add(a, pp):
    """``a + pp`` and its flag: :data:`SUBNORMAL` where a tiny posterior ``pp`` (0 under
    flush-to-zero) changed the sum."""
    s = a + pp
    return s, (SUBNORMAL if tiny(pp) and s != a else 0)


@njit(cache=True, nogil=True)
def oa_main_pass(pp_dp, oa_dp, i, tfv, xB, xEv, dcv) -> int:
    """Row i's M, the delayed D store, the M->D carry and I over q = 0..Q-1 (optacc.c's first
    loop); ``xEv`` and ``dcv`` come back holding the lane maxima of M and the last carry.
    Returns the flags of the posterior adds."""
    Q = oa_dp.shape[2]
    flags = 0
    mpv = np.empty(4, np.float32)
    dpv = np.empty(4, np.float32)
    ipv = np.empty(4, np.float32)
    for z in range(4):
        mpv[z] = oa_dp[i - 1, DP_M, Q - 1, z]
        dpv[z] = oa_dp[i - 1, DP_D, Q - 1, z]
        ipv[z] = oa_dp[i - 1, DP_I, Q - 1, z]
        dcv[z] = NEG_INF
        xEv[z] = NEG_INF
    right_shift(mpv, NEG_INF)
    right_shift(dpv, NEG_INF)
    right_shift(ipv, NEG_INF)
    for q in range(Q):
        t = 7 * q
        for z in range(4):
            sv = _masked(tfv[t, z], xB)
            sv = _max(sv, _masked(tfv[t + 1, z], mpv[z]))
            sv = _max(sv, _masked(tfv[t + 2, z], ipv[z]))
            sv = _max(sv, _masked(tfv[t + 3, z], dpv[z]))
            sv, f = absorbed_add(sv, pp_dp[i, DP_M, q, z])
            flags |= f
            xEv[z] = _max(xEv[z], sv)
            mpv[z] = oa_dp[i - 1, DP_M, q, z]
            dpv[z] = oa_dp[i - 1, DP_D, q, z]
            ipv[z] = oa_dp[i - 1, DP_I, q, z]
            oa_dp[i, DP_M, q, z] = sv
            oa_dp[i, DP_D, q, z] = dcv[z]
            dcv[z] = _masked(tfv[t + 4, z], sv)
            iv = _masked(tfv[t + 5, z], mpv[z])
            iv = _max(iv, _masked(tfv[t + 6, z], ipv[z]))
            oa_dp[i, DP_I, q, z], f = absorbed_add(iv, pp_dp[i, DP_I, q, z])
            flags |= f
    return flags


@njit(cache=True, nogil=True)
def oa_dd_passes(oa_dp, i, tfv, dcv):
    """The four D->D passes, no early exit: the first carries D itself, the next three only
    the carry; a zero tDD makes the carry +0.0."""
    Q = oa_dp.shape[2]
    right_shift(dcv, NEG_INF)
    for q in range(Q):
        for z in range(4):
            d = _max(dcv[z], oa_dp[i, DP_D, q, z])
            oa_dp[i, DP_D, q, z] = d
            dcv[z] = _masked(tfv[7 * Q + q, z], d)
    for _ in range(3):
        right_shift(dcv, NEG_INF)
        for q in range(Q):
            for z in range(4):
                oa_dp[i, DP_D, q, z] = _max(dcv[z], oa_dp[i, DP_D, q, z])
                dcv[z] = _masked(tfv[7 * Q + q, z], dcv[z])


@njit(cache=True, nogil=True)
def _loop_term(oa_xmx, pp_xmx, i, col, t):
    """``X(i-1) + ppX(i)`` where the loop transition ``t`` exists, else 0.0: (value, flags)."""
    if t == _F0:
        return _F0, 0
    return absorbed_add(oa_xmx[i - 1, col], pp_xmx[i, col])


@njit(cache=True, nogil=True)
def oa_specials(pp_xmx, oa_xmx, i, xf, xE) -> int:
    """Row i's E (given), J, C, N and B (optacc.c's specials); returns the flags of the adds."""
    oa_xmx[i, XE] = xE
    t1, f1 = _loop_term(oa_xmx, pp_xmx, i, XJ, xf[XF_J, XF_LOOP])
    t2 = _F0 if xf[XF_E, XF_LOOP] == _F0 else xE
    oa_xmx[i, XJ] = _max(t1, t2)
    t1, f2 = _loop_term(oa_xmx, pp_xmx, i, XC, xf[XF_C, XF_LOOP])
    t2 = _F0 if xf[XF_E, XF_MOVE] == _F0 else xE
    oa_xmx[i, XC] = _max(t1, t2)
    oa_xmx[i, XN], f3 = _loop_term(oa_xmx, pp_xmx, i, XN, xf[XF_N, XF_LOOP])
    t1 = _F0 if xf[XF_N, XF_MOVE] == _F0 else oa_xmx[i, XN]
    t2 = _F0 if xf[XF_J, XF_MOVE] == _F0 else oa_xmx[i, XJ]
    oa_xmx[i, XB] = _max(t1, t2)
    return f1 | f2 | f3


@njit(cache=True, nogil=True)
def oa_rows(pp_dp, pp_xmx, tfv, xf, oa_dp, oa_xmx):
    """``p7_OptimalAccuracy`` of a posterior matrix into ``oa_dp`` float32 [Ld+1, 3, Q, 4] and
    ``oa_xmx`` [Ld+1, 6] (SCALE left as given); ``xf`` float32 [4, 2] is the model's special
    transitions ([E N J C][MOVE LOOP]). Returns (``oasc = C(Ld)``, flags)."""
    L = pp_dp.shape[0] - 1
    Q = pp_dp.shape[2]
    xEv = np.empty(4, np.float32)
    dcv = np.empty(4, np.float32)
    for q in range(Q):
        for z in range(4):
            oa_dp[0, DP_M, q, z] = NEG_INF
            oa_dp[0, DP_D, q, z] = NEG_INF
            oa_dp[0, DP_I, q, z] = NEG_INF
    oa_xmx[0, XE] = NEG_INF
    oa_xmx[0, XN] = _F0
    oa_xmx[0, XJ] = NEG_INF
    oa_xmx[0, XB] = _F0
    oa_xmx[0, XC] = NEG_INF
    flags = 0
    for i in range(1, L + 1):
        flags |= oa_main_pass(pp_dp, oa_dp, i, tfv, oa_xmx[i - 1, XB], xEv, dcv)
        oa_dd_passes(oa_dp, i, tfv, dcv)
        for q in range(Q):
            for z in range(4):
                xEv[z] = _max(xEv[z], oa_dp[i, DP_D, q, z])
        h0 = _max(xEv[0], xEv[1])  # esl_sse_hmax_ps: lanes (0, 1) and (2, 3), then the two
        h2 = _max(xEv[2], xEv[3])
        flags |= oa_specials(pp_xmx, oa_xmx, i, xf, _max(h0, h2))
    return oa_xmx[L, XC], flags


def optimal_accuracy(posterior: MatrixResult, tfv, xf) -> tuple:
    """``p7_OptimalAccuracy`` on an envelope's posterior matrix (:func:`hmmgpu.cpu.decoding.decode`)
    with the model's ``tfv`` and special transitions ``xf`` float32 [4, 2] ([E N J C][MOVE
    LOOP], unihit at the full target length): (``oasc`` float32, a :class:`MatrixResult` of
    the OA matrix, its flags with the posterior's). Its SCALE column is 0 (HMMER's OA matrix, written
    over the Forward matrix, keeps that matrix's SCALE column, which OA does not read)."""
    pp = posterior.matrix
    oa_dp = np.empty_like(pp.dp)
    oa_xmx = np.zeros_like(pp.xmx)
    oasc, flags = oa_rows(pp.dp, pp.xmx, np.asarray(tfv, np.float32), np.asarray(xf, np.float32), oa_dp, oa_xmx)
    oa = StripedMatrix(dp=oa_dp, xmx=oa_xmx, totscale=np.float32(0.0), has_own_scales=False)
    return np.float32(oasc), MatrixResult(flags=int(flags) | posterior.flags, score=np.float32(np.nan), matrix=oa)


# ----------------------------------------------------------------------------------------
# p7_OATrace
# ----------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _select_m(oa_dp, oa_xmx, tfv, i, k):
    """M(i,k)'s predecessor: the first maximum of M, I, D, B (row i-1, node k-1)."""
    Q = oa_dp.shape[2]
    q = (k - 1) % Q
    r = (k - 1) // Q
    if q > 0:
        m = oa_dp[i - 1, DP_M, q - 1, r]
        d = oa_dp[i - 1, DP_D, q - 1, r]
        v = oa_dp[i - 1, DP_I, q - 1, r]
    elif r > 0:
        m = oa_dp[i - 1, DP_M, Q - 1, r - 1]
        d = oa_dp[i - 1, DP_D, Q - 1, r - 1]
        v = oa_dp[i - 1, DP_I, Q - 1, r - 1]
    else:
        m = _F0
        d = _F0
        v = _F0
    t = 7 * q
    b_path = NEG_INF if tfv[t, r] == _F0 else oa_xmx[i - 1, XB]
    m_path = NEG_INF if tfv[t + 1, r] == _F0 else m
    i_path = NEG_INF if tfv[t + 2, r] == _F0 else v
    d_path = NEG_INF if tfv[t + 3, r] == _F0 else d
    best = STATE_M
    top = m_path
    if i_path > top:
        best = STATE_I
        top = i_path
    if d_path > top:
        best = STATE_D
        top = d_path
    if b_path > top:
        best = STATE_B
    return best


@njit(cache=True, nogil=True)
def _select_d(oa_dp, tfv, i, k):
    """D(i,k)'s predecessor: M(i,k-1) where its path is at least D(i,k-1)'s."""
    Q = oa_dp.shape[2]
    q = (k - 1) % Q
    r = (k - 1) // Q
    if q > 0:
        m = oa_dp[i, DP_M, q - 1, r]
        d = oa_dp[i, DP_D, q - 1, r]
        tmd = tfv[7 * (q - 1) + 4, r]
        tdd = tfv[7 * Q + q - 1, r]
    elif r > 0:
        m = oa_dp[i, DP_M, Q - 1, r - 1]
        d = oa_dp[i, DP_D, Q - 1, r - 1]
        tmd = tfv[7 * (Q - 1) + 4, r - 1]
        tdd = tfv[8 * Q - 1, r - 1]
    else:
        m = _F0
        d = _F0
        tmd = _F0
        tdd = _F0
    m_path = NEG_INF if tmd == _F0 else m
    d_path = NEG_INF if tdd == _F0 else d
    return STATE_M if m_path >= d_path else STATE_D


@njit(cache=True, nogil=True)
def _select_i(oa_dp, tfv, i, k):
    """I(i,k)'s predecessor: M(i-1,k) where its path is at least I(i-1,k)'s."""
    Q = oa_dp.shape[2]
    q = (k - 1) % Q
    r = (k - 1) // Q
    m_path = NEG_INF if tfv[7 * q + 5, r] == _F0 else oa_dp[i - 1, DP_M, q, r]
    i_path = NEG_INF if tfv[7 * q + 6, r] == _F0 else oa_dp[i - 1, DP_I, q, r]
    return STATE_M if m_path >= i_path else STATE_I


@njit(cache=True, nogil=True)
def _select_e(oa_dp, i):
    """E(i)'s predecessor and its node: the row's M lanes with ``>=``, D lanes with ``>``,
    vector by vector."""
    Q = oa_dp.shape[2]
    top = NEG_INF
    state = STATE_M
    kmax = 0
    for q in range(Q):
        for r in range(4):
            if oa_dp[i, DP_M, q, r] >= top:
                top = oa_dp[i, DP_M, q, r]
                state = STATE_M
                kmax = r * Q + q + 1
        for r in range(4):
            if oa_dp[i, DP_D, q, r] > top:
                top = oa_dp[i, DP_D, q, r]
                state = STATE_D
                kmax = r * Q + q + 1
    return state, kmax


@njit(cache=True, nogil=True)
def _loop_or_e(oa_xmx, pp_xmx, i, col, loop_t, e_t):
    """C's or J's predecessor: itself where ``X(i-1) + ppX(i)`` beats E(i) strictly."""
    loop_path = NEG_INF if loop_t == _F0 else oa_xmx[i - 1, col] + pp_xmx[i, col]
    e_path = NEG_INF if e_t == _F0 else oa_xmx[i, XE]
    return loop_path > e_path


@njit(cache=True, nogil=True)
def oa_trace_states(oa_dp, oa_xmx, pp_dp, pp_xmx, tfv, xf, st, tk, ti, tpp):
    """``p7_OATrace`` into ``st``, ``tk``, ``ti``, ``tpp`` (capacity at least 2 (Ld + M) + 6),
    built backwards from T and reversed as ``p7_trace_Reverse`` does. Returns its length."""
    L = oa_dp.shape[0] - 1
    Q = oa_dp.shape[2]
    n = 0
    i = L
    k = 0
    st[0] = STATE_T
    st[1] = STATE_C
    for z in range(2):
        tk[z] = 0
        ti[z] = 0
        tpp[z] = _F0
    n = 2
    s0 = STATE_C
    while s0 != STATE_S:
        if s0 == STATE_M:
            s1 = _select_m(oa_dp, oa_xmx, tfv, i, k)
            k -= 1
            i -= 1
        elif s0 == STATE_D:
            s1 = _select_d(oa_dp, tfv, i, k)
            k -= 1
        elif s0 == STATE_I:
            s1 = _select_i(oa_dp, tfv, i, k)
            i -= 1
        elif s0 == STATE_N:
            s1 = STATE_S if i == 0 else STATE_N
        elif s0 == STATE_C:
            s1 = STATE_C if _loop_or_e(oa_xmx, pp_xmx, i, XC, xf[XF_C, XF_LOOP], xf[XF_E, XF_MOVE]) else STATE_E
        elif s0 == STATE_J:
            s1 = STATE_J if _loop_or_e(oa_xmx, pp_xmx, i, XJ, xf[XF_J, XF_LOOP], xf[XF_E, XF_LOOP]) else STATE_E
        elif s0 == STATE_E:
            s1, k = _select_e(oa_dp, i)
        else:  # B
            n_path = NEG_INF if xf[XF_N, XF_MOVE] == _F0 else oa_xmx[i, XN]
            j_path = NEG_INF if xf[XF_J, XF_MOVE] == _F0 else oa_xmx[i, XJ]
            s1 = STATE_N if n_path > j_path else STATE_J
        # get_postprob, then p7_trace_AppendWithPP
        st[n] = s1
        tk[n] = 0
        ti[n] = 0
        tpp[n] = _F0
        if s1 == STATE_M or s1 == STATE_I:
            tk[n] = k
            ti[n] = i
            tpp[n] = pp_dp[i, DP_M if s1 == STATE_M else DP_I, (k - 1) % Q, (k - 1) // Q]
        elif s1 == STATE_D:
            tk[n] = k
        elif (s1 == STATE_N or s1 == STATE_C or s1 == STATE_J) and st[n - 1] == s1:
            ti[n] = i
            tpp[n] = pp_xmx[i, XN if s1 == STATE_N else (XC if s1 == STATE_C else XJ)]
        n += 1
        if (s1 == STATE_N or s1 == STATE_J or s1 == STATE_C) and s1 == s0:
            i -= 1
        s0 = s1
    # p7_trace_Reverse: N, C, J emissions move one state earlier, then the arrays reverse
    for z in range(n - 1):
        s = st[z]
        if (s == STATE_N or s == STATE_C or s == STATE_J) and st[z + 1] == s and ti[z] == 0 and ti[z + 1] > 0:
            ti[z] = ti[z + 1]
            ti[z + 1] = 0
            tpp[z] = tpp[z + 1]
            tpp[z + 1] = _F0
    for z in range(n // 2):
        w = n - 1 - z
        st[z], st[w] = st[w], st[z]
        tk[z], tk[w] = tk[w], tk[z]
        ti[z], ti[w] = ti[w], ti[z]
        tpp[z], tpp[w] = tpp[w], tpp[z]
    return n


@njit(cache=True, nogil=True)
def domain_span(st):
    """(z1, z2): the positions of the first M after the trace's first B and of the last M
    before the E that follows it (``p7_alidisplay_Create``'s columns); (-1, -1) where the
    trace has no such domain."""
    n = st.size
    z1 = 0
    while z1 < n and st[z1] != STATE_B:
        z1 += 1
    while z1 < n and st[z1] != STATE_M:
        z1 += 1
    e = z1
    while e < n and st[e] != STATE_E:
        e += 1
    if e >= n:
        return -1, -1
    z2 = e - 1
    while st[z2] != STATE_M:
        z2 -= 1
    return z1, z2


@njit(cache=True, nogil=True)
def domain_spans(st, starts, ends):
    """:func:`domain_span` of each trace ``st[starts[m]:ends[m]]`` of a concatenation: (z1, z2)
    int64 arrays, positions within each trace."""
    m = starts.size
    z1 = np.empty(m, np.int64)
    z2 = np.empty(m, np.int64)
    for t in range(m):
        z1[t], z2[t] = domain_span(st[starts[t]:ends[t]])
    return z1, z2


def oa_trace(oa: MatrixResult, posterior: MatrixResult, tfv, xf, M: int) -> Trace:
    """``p7_OATrace`` of an OA matrix (:func:`optimal_accuracy`) with its posterior matrix:
    the :class:`Trace`, residues numbered 1..Ld within the envelope."""
    L = oa.matrix.L
    cap = 2 * (L + int(M)) + 6
    st = np.zeros(cap, np.uint8)
    tk = np.zeros(cap, np.int32)
    ti = np.zeros(cap, np.int32)
    tpp = np.zeros(cap, np.float32)
    n = oa_trace_states(oa.matrix.dp, oa.matrix.xmx, posterior.matrix.dp, posterior.matrix.xmx,
                        np.asarray(tfv, np.float32), np.asarray(xf, np.float32), st, tk, ti, tpp)
    return Trace(st=st[:n].copy(), k=tk[:n].copy(), i=ti[:n].copy(), pp=tpp[:n].copy())


__all__ = ["Trace", "domain_span", "optimal_accuracy", "oa_rows", "oa_trace", "oa_trace_states", "NEG_INF", "BOGUS", "STATE_M", "STATE_D", "STATE_I", "STATE_S", "STATE_N", "STATE_B", "STATE_E", "STATE_C",
           "STATE_T", "STATE_J", "STATE_X"]
