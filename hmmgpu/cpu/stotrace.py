"""HMMER 3.4's stochastic traceback (``p7_StochasticTrace``, impl_sse) with Easel's fast random
number generator, and the ensemble of 200 sampled traces that ``region_trace_ensemble`` draws
from a region that may hold several domains: the plain CPU reference.

What it computes
----------------
When domain definition finds a region whose posterior decoding suggests more than one domain
(hmmer-domaindef-spec.md §1.2), HMMER samples 200 paths through the region's multihit
Forward matrix, each from T back to S, choosing every step with the probability the
matrix gives it (§2.3). For every domain of every sampled path it records the segment pair
(sample, first and last M residue, first and last M node), which the clustering
(:mod:`hmmgpu.cpu.spensemble`) turns into domain envelopes, and it accumulates the null2 odds
of the domain's residues (:func:`hmmgpu.cpu.null2.null2_by_trace`), 1 outside domains, into
``acc``, whose mean over the samples is the region's null2 correction. :func:`trace_ensemble`
does all of that for one region; :func:`stochastic_trace` and :func:`trace_index` are its steps.

The random numbers
------------------
``p7_Pipeline`` draws from Easel's *fast* generator (``esl_randomness_CreateFast(42)``), a
32-bit LCG ``x = 69069 x + 1`` whose state starts at ``esl_mix3(seed, 87654321, 12345678)``
(42 if that is 0); each draw is the double ``x / 2^32``. Domain definition reseeds it before
every clustered region, so every region of every target and model reads the same stream
``u[0], u[1], ...``. Here that stream is a table (:func:`uniform_table`, built by jumping
ahead: ``x_{n+m} = A_m x_n + C_m`` with ``A_m = 69069^m``, ``C_m = sum_{j<m} 69069^j``, mod
2^32) and a region keeps only a cursor into it: the same design a GPU uses, one shared table
and a cursor per region. A region that would read past the table's end stops and reports it
(``EXHAUSTED``); :func:`trace_ensemble` then retries the region with a table twice as long.
The longest region measured read 190,690 draws; the default table holds 2^20.

Why the code looks as it does
-----------------------------
The traceback must choose exactly the state HMMER chooses, so each choice is HMMER's float
arithmetic, operation for operation (numba without fastmath: every float32 product and sum
rounded on its own):

* the path weights are float32 products of a matrix cell and a striped transition, read
  where the SSE code reads them: ``M(i,k)`` looks at row ``i-1`` in vector ``q-1`` (the
  previous node in the same lane), or for ``q = 0`` at vector ``Q-1`` shifted right by one
  lane with 0 shifted in; ``D(i,k)`` likewise on row ``i`` (its transitions shift too);
  ``C`` and ``J`` weigh ``E`` by ``(E xf[E]) SCALE``;
* the weights are normalised by Easel's ``esl_vec_FNorm`` (a Kahan-compensated float sum,
  then a float division, or ``1/n`` when the sum is 0) and chosen by ``esl_rnd_FChoose``:
  a double sum of the weights as the normaliser, then the first ``i`` with
  ``roll < (double running sum) / norm``;
* the E step needs no normalisation: ``norm = (float) (1.0 / (double) E(i))``, and the
  double running sum of ``(double) (float) (cell norm)`` runs over q, then the four M lanes,
  then the four D lanes; a pass that ends without a choice starts again at q = 0 without
  resetting the sum (HMMER's guard; it ends because the sum keeps growing);
* from N no draw is made (S at i = 0, else N); every other step draws exactly once;
* the trace is built backwards with ``p7_trace_Append``'s rules (an N, C or J carries its
  residue only when it follows itself; D carries no residue), then reversed as
  ``p7_trace_Reverse`` does (N, C, J residues first moved one element earlier);
* ``p7_trace_Index`` marks each domain from its B to its E, its sequence and model ends the
  first and last *M* state (I states are never endpoints).

A choice that Easel would abort on (a NaN path) is reported as ``FATAL``.

Flush-to-zero
-------------
hmmsearch runs with SSE flush-to-zero, pyhmmer (and this code) with IEEE subnormals. The
traces are pyhmmer's whatever happens; to say when they are hmmsearch's too, every choice is
also made as FTZ would make it (:func:`_ftz_choice`: the matrix values, products, Kahan sum
and quotients with subnormal results flushed to 0, FLT_MIN counted both ways; only where the
choice meets a tiny value, as the choice's own arithmetic and :func:`fnorm` find, since
elsewhere nothing is flushed), and the E
step's double sum is also kept with its flushed terms (those sums are never larger, so FTZ
takes the same cell exactly when its sum has passed the draw there too). A trace where some
choice could differ sets ``ftz_differs``; on real data the FTZ choices differ nowhere (libhmmer's
domain definition gave the same answers in both modes on the 750 top hits of PF07690, PF00133
and PF00005).

Matrices are HMMER's striped ones, given as three float32 arrays of cells ``[Lr+1][Q][4]``
for M, D and I (node ``k = r Q + q + 1`` in lane ``r`` of vector ``q``) and the special rows
``[Lr+1][6]`` (E N J B C SCALE); ``tfv`` float32 [8Q][4] (per q: BM MM IM DM MD MI II, then the
Q DD vectors) and ``xf`` float32 [4][2] ([E N J C][MOVE LOOP]) as in :mod:`hmmgpu.cpu.fwdback`.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from hmmgpu.cpu.fwdback import DP_D, DP_I, DP_M, tiny
from hmmgpu.cpu.null2 import null2_by_trace
from hmmgpu.cpu.optacc import Trace
from hmmgpu.constants import KP
from hmmgpu.stages.forward import FLT_MIN, XB, XC, XE, XJ, XN, XSCALE

__all__ = ["DEFAULT_SEED", "EXHAUSTED", "FATAL", "OK", "NSAMPLES", "mix3", "fast_rng_state", "uniform_table",
           "compile_sampler", "fsum", "fnorm", "fchoose", "stochastic_trace", "stochastic_traces", "trace_index",
           "trace_ensemble", "TraceEnsemble",
           "ST_M", "ST_D", "ST_I", "ST_S", "ST_N", "ST_B", "ST_E", "ST_C", "ST_T", "ST_J"]

F32 = np.float32
F64 = np.float64

#: HMMER's p7T_ state codes.
ST_M, ST_D, ST_I, ST_S, ST_N, ST_B, ST_E, ST_C, ST_T, ST_J = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10
#: ``p7O_`` indices of ``xf``: [E N J C][MOVE LOOP].
_XF_E, _XF_N, _XF_J, _XF_C, _MOVE, _LOOP = 0, 1, 2, 3, 0, 1

#: The pipeline's seed (hmmsearch ``--seed``, pyhmmer ``Pipeline(seed=42)``).
DEFAULT_SEED = 42
#: Samples per clustered region (``ddef->nsamples``).
NSAMPLES = 200
#: Statuses of the numba steps: done; the table of draws ran out; Easel would abort (no path);
#: the trace buffers are full (the caller grows them and retries the trace).
OK, EXHAUSTED, FATAL, FULL = 0, 1, 2, 3

_MASK32 = (1 << 32) - 1
_LCG_A = 69069
_DEFAULT_TABLE = 1 << 20


def mix3(a: int, b: int, c: int) -> int:
    """Easel's ``esl_mix3`` (Bob Jenkins' 96-bit mix), in uint32 arithmetic."""
    m = _MASK32
    a, b, c = a & m, b & m, c & m
    for sa, sb, sc in ((13, 8, 13), (12, 16, 5), (3, 10, 15)):
        a = ((a - b - c) & m) ^ (c >> sa)
        b = ((b - c - a) & m) ^ ((a << sb) & m)
        c = ((c - a - b) & m) ^ (b >> sc)
    return c


def fast_rng_state(seed: int) -> int:
    """The state ``x`` of Easel's fast generator after ``esl_randomness_Init(r, seed)``."""
    x = mix3(seed, 87654321, 12345678)
    return x if x != 0 else 42


def uniform_table(seed: int = DEFAULT_SEED, n: int = _DEFAULT_TABLE) -> np.ndarray:
    """The first ``n`` values of ``esl_random`` (float64, in [0, 1)) after seeding Easel's fast
    generator with ``seed``, built by doubling jumps ahead (vectorised; exact in uint64)."""
    n = int(n)
    x = np.array([(fast_rng_state(seed) * _LCG_A + 1) & _MASK32], dtype=np.uint64)
    a, c = _LCG_A, 1  # the jump of len(x) draws: x_{t+m} = a x_t + c (mod 2^32)
    while x.size < n:
        x = np.concatenate([x, (x * np.uint64(a) + np.uint64(c)) & np.uint64(_MASK32)])
        a, c = (a * a) & _MASK32, (a * c + c) & _MASK32
    return x[:n].astype(np.float64) / 4294967296.0


@njit(cache=True, nogil=True, error_model="numpy")
def fsum(v, n):
    """Easel's ``esl_vec_FSum``: the Kahan-compensated float32 sum of ``v[0..n-1]``."""
    return _kahan(v, n)[0]


@njit(cache=True, nogil=True, error_model="numpy")
def _kahan(v, n):
    """:func:`fsum`, and whether one of its terms, sums, differences or corrections is tiny
    (:func:`_tiny`)."""
    s = F32(0.0)
    c = F32(0.0)
    met = False
    for z in range(n):
        y = v[z] - c
        t = s + y
        d = t - s
        c = d - y
        met = met or _tiny(y) or _tiny(t) or _tiny(d) or _tiny(c)
        s = t
    return s, met


@njit(cache=True, nogil=True, error_model="numpy")
def fnorm(v, n):
    """Easel's ``esl_vec_FNorm``, in place: divide by :func:`fsum`, or set ``1/n`` if it is 0.
    Returns whether its arithmetic met a tiny value (:func:`_tiny`): one of the sum's Kahan
    values, or a normalised value."""
    s, met = _kahan(v, n)
    if s != F32(0.0):
        for z in range(n):
            v[z] = v[z] / s
            met = met or _tiny(v[z])
    else:
        for z in range(n):
            v[z] = F32(1.0 / F64(F32(n)))
    return met


@njit(cache=True, nogil=True, error_model="numpy")
def fchoose(uniforms, cursor, p, n):
    """Easel's ``esl_rnd_FChoose`` on ``p[0..n-1]`` with the draw ``uniforms[cursor]``:
    (index, status). EXHAUSTED when the table has no draw left, FATAL where Easel aborts
    (no index chosen: a NaN or zero normaliser)."""
    if cursor >= uniforms.size:
        return -1, EXHAUSTED
    roll = uniforms[cursor]
    norm = 0.0
    for z in range(n):
        norm += F64(p[z])
    total = 0.0
    for z in range(n):
        total += F64(p[z])
        if roll < total / norm:
            return z, OK
    return -1, FATAL


@njit(cache=True, nogil=True, error_model="numpy")
def _shifted(row, Q, r):
    """Lane ``r`` of vector ``Q-1`` of ``row`` shifted right by one lane, 0 shifted in
    (``esl_sse_rightshiftz_float``): lane ``r-1``, or 0 for lane 0."""
    if r == 0:
        return F32(0.0)
    return row[Q - 1, r - 1]


@njit(cache=True, nogil=True, error_model="numpy")
def _append(st, tk, ti, N, state, k, i):
    """``p7_trace_Append`` into buffers with room for element ``N``: the coordinates kept by
    state kind. Returns the new length."""
    if state == ST_N or state == ST_C or state == ST_J:
        ti[N] = i if st[N - 1] == state else 0
        tk[N] = 0
    elif state == ST_D:
        ti[N] = 0
        tk[N] = k
    elif state == ST_M or state == ST_I:
        ti[N] = i
        tk[N] = k
    else:
        ti[N] = 0
        tk[N] = 0
    st[N] = state
    return N + 1


@njit(cache=True, nogil=True, error_model="numpy")
def _reverse(st, tk, ti, N):
    """``p7_trace_Reverse`` in place: N, C, J residues moved one element earlier, then reversed."""
    for z in range(N - 1):
        s = st[z]
        if (s == ST_N or s == ST_C or s == ST_J) and st[z + 1] == s:
            if ti[z] == 0 and ti[z + 1] > 0:
                ti[z] = ti[z + 1]
                ti[z + 1] = 0
    for z in range(N // 2):
        y = N - z - 1
        st[z], st[y] = st[y], st[z]
        tk[z], tk[y] = tk[y], tk[z]
        ti[z], ti[y] = ti[y], ti[z]


@njit(cache=True, nogil=True, error_model="numpy")
def _flushed(v, inclusive):
    """``v`` as flush-to-zero leaves a float32 result: 0 if subnormal (``inclusive``: FLT_MIN
    too, a result that may have been tiny before rounding)."""
    if v != F32(0.0) and (abs(v) < FLT_MIN or (inclusive and abs(v) == FLT_MIN)):
        return F32(0.0)
    return v


@njit(cache=True, nogil=True, error_model="numpy")
def _tiny(v):
    """A nonzero float32 that flush-to-zero may flush (FLT_MIN counted too): :func:`~hmmgpu.cpu.fwdback.tiny`
    of its magnitude (the Kahan terms here may be negative)."""
    return tiny(abs(v))


@njit(cache=True, nogil=True, error_model="numpy")
def _ftz_choice(fa, fb, fc, n, roll, inclusive):
    """The choice among ``n`` paths ``(fa fb) fc`` with the draw ``roll`` when every float result
    is flushed as FTZ flushes it (:func:`_flushed`; matrix values come flushed already, as FTZ
    stored them): the products, the Kahan sum, the normalisation; then ``esl_rnd_FChoose``'s
    double arithmetic, which FTZ does not touch at these magnitudes. -1 if nothing is chosen."""
    p = np.empty(4, dtype=np.float32)
    for z in range(n):
        p[z] = _flushed(_flushed(_flushed(fa[z], inclusive) * fb[z], inclusive) * fc[z], inclusive)
    s = F32(0.0)
    c = F32(0.0)
    for z in range(n):
        y = _flushed(p[z] - c, inclusive)
        t = _flushed(s + y, inclusive)
        c = _flushed(_flushed(t - s, inclusive) - y, inclusive)
        s = t
    for z in range(n):
        p[z] = _flushed(p[z] / s, inclusive) if s != F32(0.0) else F32(1.0 / F64(F32(n)))
    norm = 0.0
    for z in range(n):
        norm += F64(p[z])
    total = 0.0
    for z in range(n):
        total += F64(p[z])
        if roll < total / norm:
            return z
    return -1


@njit(cache=True, nogil=True, error_model="numpy")
def stochastic_trace(uniforms, cursor, dp_m, dp_d, dp_i, xmx, tfv, xf, Lr, st, tk, ti):
    """``p7_StochasticTrace`` on a Forward matrix of ``Lr`` residues into the buffers ``st``
    (uint8), ``tk``, ``ti`` (int32), drawing from ``uniforms`` at ``cursor``.
    Returns (trace length, next cursor, status, ftz_differs); on OK the trace is in order
    S..T; FULL when the buffers are too short for it. ``ftz_differs``: some choice could have
    gone otherwise under flush-to-zero (:func:`_ftz_choice`; the E step's sum likewise)."""
    Q = dp_m.shape[1]
    path = np.empty(4, dtype=np.float32)
    fa = np.zeros(4, dtype=np.float32)
    fb = np.zeros(4, dtype=np.float32)
    fc = np.ones(4, dtype=np.float32)
    ftz_differs = False
    i = Lr
    k = 0
    st[0] = ST_T
    ti[0] = 0
    tk[0] = 0
    N = _append(st, tk, ti, 1, ST_C, k, i)
    s0 = ST_C
    while s0 != ST_S:
        if s0 == ST_N:
            s1 = ST_S if i == 0 else ST_N
        elif s0 == ST_E:
            if cursor >= uniforms.size:
                return N, cursor, EXHAUSTED, ftz_differs
            roll = uniforms[cursor]
            cursor += 1
            norm = F32(1.0 / F64(xmx[i, XE]))
            total = 0.0
            total_ftz = 0.0  # the same sum of the terms flushed as FTZ would (ones <= FLT_MIN: the lowest)
            s1 = -1
            while s1 < 0:
                for q in range(Q):
                    for r in range(4):
                        term = dp_m[i, q, r] * norm
                        total += F64(term)
                        total_ftz += F64(_flushed(_flushed(dp_m[i, q, r], True) * norm, True))
                        if roll < total:
                            s1 = ST_M
                            k = r * Q + q + 1
                            break
                    if s1 >= 0:
                        break
                    for r in range(4):
                        term = dp_d[i, q, r] * norm
                        total += F64(term)
                        total_ftz += F64(_flushed(_flushed(dp_d[i, q, r], True) * norm, True))
                        if roll < total:
                            s1 = ST_D
                            k = r * Q + q + 1
                            break
                    if s1 >= 0:
                        break
                if s1 < 0 and not total > 0.0:  # NaN or all zero: would loop for ever in HMMER
                    return N, cursor, FATAL, ftz_differs
            # The FTZ sums are never larger, so FTZ chooses the same cell iff it is reached there too.
            ftz_differs = ftz_differs or not roll < total_ftz
        else:
            n = 2
            for z in range(4):  # path z = (fa[z] fb[z]) fc[z]; fc = 1 (exact) but for E's path from C, J
                fc[z] = F32(1.0)
            if s0 == ST_M:
                q = (k - 1) % Q
                r = (k - 1) // Q
                t = 7 * q
                if q > 0:
                    fa[1] = dp_m[i - 1, q - 1, r]
                    fa[2] = dp_i[i - 1, q - 1, r]
                    fa[3] = dp_d[i - 1, q - 1, r]
                else:
                    fa[1] = _shifted(dp_m[i - 1], Q, r)
                    fa[2] = _shifted(dp_i[i - 1], Q, r)
                    fa[3] = _shifted(dp_d[i - 1], Q, r)
                fa[0] = xmx[i - 1, XB]
                for z in range(4):
                    fb[z] = tfv[t + z, r]
                n = 4
            elif s0 == ST_D:
                q = (k - 1) % Q
                r = (k - 1) // Q
                if q > 0:
                    fa[0], fb[0] = dp_m[i, q - 1, r], tfv[7 * (q - 1) + 4, r]
                    fa[1], fb[1] = dp_d[i, q - 1, r], tfv[7 * Q + q - 1, r]
                elif r > 0:
                    fa[0], fb[0] = dp_m[i, Q - 1, r - 1], tfv[7 * (Q - 1) + 4, r - 1]
                    fa[1], fb[1] = dp_d[i, Q - 1, r - 1], tfv[8 * Q - 1, r - 1]
                else:  # both shifted in as 0
                    fa[0], fb[0] = F32(0.0), F32(0.0)
                    fa[1], fb[1] = F32(0.0), F32(0.0)
            elif s0 == ST_I:
                q = (k - 1) % Q
                r = (k - 1) // Q
                fa[0], fb[0] = dp_m[i - 1, q, r], tfv[7 * q + 5, r]
                fa[1], fb[1] = dp_i[i - 1, q, r], tfv[7 * q + 6, r]
            elif s0 == ST_C:
                fa[0], fb[0] = xmx[i - 1, XC], xf[_XF_C, _LOOP]
                fa[1], fb[1], fc[1] = xmx[i, XE], xf[_XF_E, _MOVE], xmx[i, XSCALE]
            elif s0 == ST_J:
                fa[0], fb[0] = xmx[i - 1, XJ], xf[_XF_J, _LOOP]
                fa[1], fb[1], fc[1] = xmx[i, XE], xf[_XF_E, _LOOP], xmx[i, XSCALE]
            else:  # B
                fa[0], fb[0] = xmx[i, XN], xf[_XF_N, _MOVE]
                fa[1], fb[1] = xmx[i, XJ], xf[_XF_J, _MOVE]
            # whether the choice meets a tiny value (a matrix value, a product, or fnorm's): where
            # none is, every value _ftz_choice flushes is itself, so it chooses as this choice
            # does and need not run (the GPU kernel's rule: step_choice)
            meets_tiny = False
            for z in range(n):
                m = fa[z] * fb[z]
                path[z] = m * fc[z]
                meets_tiny = meets_tiny or _tiny(fa[z]) or _tiny(m) or _tiny(path[z])
            normalised_meets_tiny = fnorm(path, n)
            choice, status = fchoose(uniforms, cursor, path, n)
            if status != OK:
                return N, cursor, status, ftz_differs
            if not ftz_differs and (meets_tiny or normalised_meets_tiny):
                ftz_differs = (_ftz_choice(fa, fb, fc, n, uniforms[cursor], False) != choice
                               or _ftz_choice(fa, fb, fc, n, uniforms[cursor], True) != choice)
            cursor += 1
            if s0 == ST_M:
                s1 = (ST_B, ST_M, ST_I, ST_D)[choice]
            elif s0 == ST_D:
                s1 = (ST_M, ST_D)[choice]
            elif s0 == ST_I:
                s1 = (ST_M, ST_I)[choice]
            elif s0 == ST_C:
                s1 = (ST_C, ST_E)[choice]
            elif s0 == ST_J:
                s1 = (ST_J, ST_E)[choice]
            else:
                s1 = (ST_N, ST_J)[choice]
        if s0 == ST_M:
            k -= 1
            i -= 1
        elif s0 == ST_D:
            k -= 1
        elif s0 == ST_I:
            i -= 1
        if N == st.size:
            return N, cursor, FULL, ftz_differs
        N = _append(st, tk, ti, N, s1, k, i)
        if (s1 == ST_N or s1 == ST_J or s1 == ST_C) and s1 == s0:
            i -= 1
        s0 = s1
    _reverse(st, tk, ti, N)
    return N, cursor, OK, ftz_differs


@njit(cache=True, nogil=True, error_model="numpy")
def trace_index(st, tk, ti, N, domains):
    """``p7_trace_Index``: for each domain d (in trace order) ``domains[d]`` = (tfrom, tto,
    sqfrom, sqto, hmmfrom, hmmto): its B and E elements and its first and last M residue and
    node (0 where it has no M). Returns the number of domains."""
    nd = 0
    for z in range(N):
        s = st[z]
        if s == ST_B:
            domains[nd, 0] = z
            domains[nd, 2] = 0
            domains[nd, 4] = 0
        elif s == ST_M:
            if domains[nd, 2] == 0:
                domains[nd, 2] = ti[z]
            if domains[nd, 4] == 0:
                domains[nd, 4] = tk[z]
            domains[nd, 3] = ti[z]
            domains[nd, 5] = tk[z]
        elif s == ST_E:
            domains[nd, 1] = z
            nd += 1
    return nd


@njit(cache=True, nogil=True, error_model="numpy")
def _ensemble(uniforms, dp_m, dp_d, dp_i, xmx, tfv, rfv, xf, M, region, ireg, nsamples, acc, pairs):
    Lr = region.size
    cap = 16 + 4 * Lr + 4 * M
    st = np.empty(cap, dtype=np.uint8)
    tk = np.empty(cap, dtype=np.int32)
    ti = np.empty(cap, dtype=np.int32)
    domains = np.zeros((Lr + 1, 6), dtype=np.int32)
    null2 = np.empty(KP, dtype=np.float32)
    cursor = 0
    npairs = 0
    ftz_differs = False
    for t in range(nsamples):
        while True:
            N, next_cursor, status, differs = stochastic_trace(uniforms, cursor, dp_m, dp_d, dp_i, xmx, tfv, xf, Lr,
                                                               st, tk, ti)
            if status != FULL:
                break
            cap = 2 * cap  # retry this trace, from the same draw, in longer buffers
            st = np.empty(cap, dtype=np.uint8)
            tk = np.empty(cap, dtype=np.int32)
            ti = np.empty(cap, dtype=np.int32)
        if status != OK:
            return npairs, next_cursor, status, pairs, ftz_differs
        ftz_differs = ftz_differs or differs
        cursor = next_cursor
        nd = trace_index(st, tk, ti, N, domains)
        pos = 1
        for d in range(nd):
            if npairs == pairs.shape[0]:
                grown = np.empty((2 * pairs.shape[0], 5), dtype=np.int32)
                grown[:npairs] = pairs[:npairs]
                pairs = grown
            sqfrom = domains[d, 2]
            sqto = domains[d, 3]
            pairs[npairs, 0] = t
            pairs[npairs, 1] = sqfrom + ireg - 1
            pairs[npairs, 2] = sqto + ireg - 1
            pairs[npairs, 3] = domains[d, 4]
            pairs[npairs, 4] = domains[d, 5]
            npairs += 1
            null2_by_trace(st, tk, ti, domains[d, 0], domains[d, 1], rfv, null2)
            while pos <= sqfrom:
                acc[pos] += F32(1.0)
                pos += 1
            while pos <= sqto:
                acc[pos] += null2[region[pos - 1]]
                pos += 1
        while pos <= Lr:
            acc[pos] += F32(1.0)
            pos += 1
    return npairs, cursor, OK, pairs, ftz_differs


class TraceEnsemble:
    """The sampled traces of one region: ``acc`` float32 [Lr+1] (``acc[p]``, p = 1..Lr, the sum
    over the samples of residue p's null2 odds, 1 outside domains; ``acc[0]`` unused),
    ``pairs`` int32 [n][5] (sample, i, j, k, m: each sampled domain's first and last M residue,
    in target coordinates, and node, in sample and trace order), ``nsamples``, ``draws`` (the
    random numbers read) and ``ftz_differs`` (some choice could go otherwise under flush-to-zero,
    hmmsearch's arithmetic: the region's answer is then only pyhmmer's, IEEE)."""

    __slots__ = ("acc", "pairs", "nsamples", "draws", "ftz_differs")

    def __init__(self, acc, pairs, nsamples, draws, ftz_differs):
        self.acc, self.pairs, self.nsamples, self.draws = acc, pairs, nsamples, draws
        self.ftz_differs = ftz_differs


_tables = {}


def _uniforms(seed, n):
    table = _tables.get(seed)
    if table is None or table.size < n:
        table = _tables[seed] = uniform_table(seed, n)
    return table


def _sampler_arguments(uniforms, dp, xmx, tables, xf, region, ireg, nsamples) -> tuple:
    """The sampler's arguments for one region whose matrix has the cells ``dp`` [Lr+1][3][Q][4]
    and the rows ``xmx`` (its ``acc`` and pair buffer new), as :func:`trace_ensemble` passes them."""
    return (uniforms, np.asarray(dp[:, DP_M], F32), np.asarray(dp[:, DP_D], F32), np.asarray(dp[:, DP_I], F32),
            np.asarray(xmx, F32), np.asarray(tables.tfv, F32), np.asarray(tables.rfv, F32), np.asarray(xf, F32),
            int(tables.M), region, int(ireg), int(nsamples), np.zeros(region.size + 1, dtype=np.float32),
            np.empty((max(16, 2 * nsamples), 5), dtype=np.int32))


def compile_sampler(tables, xf) -> None:
    """Compile the sampler of :func:`trace_ensemble` (or load it from numba's cache) for the
    argument types it gets from a region's matrix held as cells ``[Lr+1][3][Q][4]`` (the CPU
    reference's and a device's copies alike) and ``tables`` of that kind, without sampling:
    a process that will sample calls it ahead, beside other work (``xf`` as there)."""
    import numba

    args = _sampler_arguments(_uniforms(DEFAULT_SEED, _DEFAULT_TABLE), np.zeros((2, 3, tables.Q, 4), F32),
                              np.zeros((2, 6), F32), tables, xf, np.zeros(1, np.uint8), 1, NSAMPLES)
    _ensemble.compile(tuple(numba.typeof(a) for a in args))


def trace_ensemble(matrix, tables, xf, codes, ireg, jreg, *, nsamples=NSAMPLES, seed=DEFAULT_SEED) -> TraceEnsemble:
    """``region_trace_ensemble``'s sampling for the region ``ireg..jreg`` (1-based) of the
    target ``codes``: ``nsamples`` stochastic traces of the region's multihit Forward
    ``matrix`` (a :class:`~hmmgpu.cpu.fwdback.StripedMatrix`: cells ``dp`` float32
    [Lr+1][3][Q][4], rows ``xmx`` [Lr+1][6]), the
    generator reseeded to ``seed`` first; ``tables`` a :class:`~hmmgpu.stages.forward.ForwardTables`,
    ``xf`` float32 [4][2] the multihit specials for the full target length."""
    region = np.ascontiguousarray(codes[ireg - 1:jreg], dtype=np.uint8)
    size = _DEFAULT_TABLE
    while True:
        uniforms = _uniforms(seed, size)
        args = _sampler_arguments(uniforms, matrix.dp, matrix.xmx, tables, xf, region, ireg, nsamples)
        npairs, draws, status, pairs, ftz_differs = _ensemble(*args)
        if status == OK:
            acc = args[-2]
            return TraceEnsemble(acc, np.array(pairs[:npairs]), int(nsamples), int(draws), bool(ftz_differs))
        if status == FATAL:
            raise FloatingPointError(f"stochastic traceback of region {ireg}..{jreg} found no path "
                                     "(a NaN or empty Forward matrix: Easel aborts here)")
        size = 2 * uniforms.size


def stochastic_traces(matrix, tables, xf, *, nsamples=NSAMPLES, seed=DEFAULT_SEED) -> list:
    """The ``nsamples`` traces :func:`trace_ensemble` samples from a region's Forward ``matrix``
    (arguments as there; ``Lr`` from the matrix), each a :class:`hmmgpu.cpu.optacc.Trace`
    (residues relative to the region, ``pp`` 0) with its domains int32 [ndom][6] (tfrom, tto,
    sqfrom, sqto, hmmfrom, hmmto): what ``p7_StochasticTrace`` and ``p7_trace_Index`` give."""
    dp_m, dp_d, dp_i, xmx = (np.asarray(a, F32) for a in (matrix.dp[:, DP_M], matrix.dp[:, DP_D],
                                                          matrix.dp[:, DP_I], matrix.xmx))
    Lr = xmx.shape[0] - 1
    tfv, xf = np.asarray(tables.tfv, F32), np.asarray(xf, F32)
    uniforms = _uniforms(seed, _DEFAULT_TABLE)
    cap = 16 + 4 * Lr + 4 * int(tables.M)
    cursor = 0
    traces = []
    domains = np.zeros((Lr + 1, 6), dtype=np.int32)
    while len(traces) < nsamples:
        st, tk, ti = np.empty(cap, np.uint8), np.empty(cap, np.int32), np.empty(cap, np.int32)
        N, next_cursor, status, _ = stochastic_trace(uniforms, cursor, dp_m, dp_d, dp_i, xmx, tfv, xf, Lr, st, tk,
                                                     ti)
        if status == FULL:
            cap *= 2
            continue
        if status == EXHAUSTED:
            uniforms = _uniforms(seed, 2 * uniforms.size)
            continue
        if status == FATAL:
            raise FloatingPointError("stochastic traceback found no path (Easel aborts here)")
        cursor = next_cursor
        nd = trace_index(st, tk, ti, N, domains)
        traces.append((Trace(st=st[:N].copy(), k=tk[:N].copy(), i=ti[:N].copy(), pp=np.zeros(N, F32)),
                       domains[:nd].copy()))
    return traces
