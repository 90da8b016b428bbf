"""HMMER 3.4's Forward and Backward parsers (``p7_ForwardParser``, ``p7_BackwardParser``,
impl_sse) on the CPU: the plain reference beside the GPU kernel (:mod:`hmmgpu.gpu.fwdback`),
lane for lane.

HMMER keeps a generic implementation beside its vector code; this module is that habit
for hmmgpu's Forward: a serial numba function that computes what ``forward_engine`` (with
``do_full = 0``) computes, float operation for float operation, emulating the four SSE
lanes of the striped layout explicitly. Its functions carry the names of the steps of the
kernel's row (:func:`main_pass`, :func:`dd_first_pass`, :func:`dd_carry_passes`,
:func:`sum_e`, :func:`update_specials`, :func:`rescale_row`), and it raises the same
exactness flags, so that the kernel can be checked against it step by step and both
against libhmmer (``hmmgpu.cpu.hmmerlib.HmmerModel.forward_parser``). The Backward parser
that ``p7_Pipeline`` runs next on the F3 passers is here in the same form, its steps named
``bwd_*`` (:func:`backward`, against ``HmmerModel.backward_parser``), ahead of its kernel.
The parts that need no numba (the flags, :class:`ForwardTables`, :func:`length_specials`, :func:`forward_score`) live
in :mod:`hmmgpu.stages.forward` and are re-exported here.

Layout and tables (hmmer-postfilter-spec.md, section 1)
--------------------------------------------------------
``Q = max(2, (M - 1) // 4 + 1)`` vectors of 4 lanes; lane ``z`` of vector ``q`` holds node
``k = q + 1 + z Q`` (lanes with ``k > M`` are padding, their tables 0). ``rfv[x][q][z]`` is
the match emission odds ratio, ``tfv[7q + t][z]`` the transitions BM, MM, IM, DM (into the
node), MD, MI, II (out of it), ``tfv[7Q + q][z]`` DD. These are HMMER's own tables, read from
its optimized profile (:meth:`ForwardTables.from_hmmer`). The special transitions:
``xf[E] = (0.5, 0.5)`` (multihit), and N, J, C move ``pmove = 3 / (L + 3)`` and loop
``ploop = 1 - pmove``, in float (:func:`length_specials`).

One row, in HMMER's order (spec section 2)
-------------------------------------------
The parser keeps a single row of M, D, I vectors and updates it in place: every read of
row i-1 at vector q comes before the store of row i at q. Per residue: the main pass over
q (M, the delayed D store, the M->D carry, I), the first D->D pass, three carry passes (on
models of M >= 100 each pass stops the rest when it changed no D), the sum of E over the
lanes and the D cells with the horizontal sum ``(l0 + l1) + (l2 + l3)``, the special states,
and the sparse rescaling when ``xE > 1e4``. Every float operation is a separate IEEE
binary32 operation, rounded to nearest; numba leaves float32 products and sums unfused
without fastmath.

The score is formed as ``forward_engine`` forms it: ``totscale`` accumulates
``f32((double) totscale + log((double) xE))`` at every rescaled row, and the score is
``f32((double) totscale + log((double) f32(xC * pmove)))`` (libm ``log`` in double).
:func:`forward_parser` does this inline, like HMMER; :func:`forward_score` does it on the
host from the kernel's scale factors and final ``xC``, with Python's ``math.log`` (glibc's
``log``, as libhmmer's; numpy's vectorised log is not used, it may differ).

Exactness flags (spec sections 6 and 7.9)
-----------------------------------------
hmmsearch runs HMMER with SSE flush-to-zero on, pyhmmer (and this reference, and the GPU
kernel, compiled without FTZ) with IEEE subnormals. A target whose arithmetic meets
subnormals can differ between the two. :data:`SUBNORMAL` is raised where it could change
the score, a scale factor or any special-state value other than the flushed value itself,
and the host then recomputes the target with libhmmer in its own mode. The rule
("tiny": ``0 < v <= FLT_MIN``; FLT_MIN itself counts, so that either tininess convention
of FTZ is covered):

* a product whose result is stored, or feeds a stored value other than through the two
  absorbing sums below, is never tiny: M (``sv``), the M->D term, the two I products, the
  special-state products, the rescaled specials and cells, ``1/xE``;
* the products of the M sum (``mpv tMM``, ``ipv tIM``, ``dpv tDM``) are added to partial sums
  of at least ``xB tBM``: the row checks ``f32(xB * min tBM) >= 2^-101``, at which a tiny
  term is below half an ulp of the sum and the sum is the same with or without it;
* in the D->D passes, a tiny carry ``dcv`` must not change the D it is added to
  (``dcv + D == D``); with ``tDD <= 1`` (checked per model) a carry that went tiny stays at
  most FLT_MIN for the rest of the pass, while under FTZ it is 0 from there on, and the
  pass's result and its early-exit test are the same in both modes;
* the N state decays (it is divided by every scale factor): a tiny ``xN`` is the one value
  that is allowed to differ (IEEE subnormal, 0 under FTZ), provided its term ``xN pmove``
  does not change ``xB = xJ pmove + xN pmove``. A stored special value that is tiny raises
  :data:`TINY_ROWS` instead: the score and every other value are then the same in both
  modes, and hmmsearch's rows are these rows with their subnormal entries set to 0.

:data:`RANGE` marks the targets whose final ``xC`` is NaN, 0 or infinite (or whose ``xE``
went non-finite), for which libhmmer returns ``eslERANGE``. :data:`ANY_TINY` is a
diagnostic of this reference only: some float result, anywhere, was tiny (the naive
rule, which flags far more targets).

The Backward parser (spec section 4)
------------------------------------
``backward_engine`` with ``do_full = 0``, as ``p7_Pipeline`` runs it on an F3 passer after
the Forward parser: :func:`backward_parser` (:func:`backward` on a model's tables) walks the
rows from L down to 0 with one row of M, D, I vectors, q from Q-1 down to 0, and the left
shift ``lsh(v) = [v1 v2 v3 0]`` where Forward shifts right. Row L (:func:`bwd_last_row`):
C = pmove, E = C xf[E][MOVE], M = D = E, I = 0, one D->D pass from ``lsh(D[Q-1])``. A row
i < L, reading residue i+1: the main pass (:func:`bwd_main_pass`: I, the M->D part of D, the
M and I part of M, the lane sums of B->M), the specials (:func:`bwd_specials`: B by the
same horizontal sum, then C, J, N, E), the {M,D}->E paths with the first D->D pass
(:func:`bwd_dd_first_pass`), three carry passes with no early exit
(:func:`bwd_dd_carry_passes`, also after row L), the M->D paths (:func:`bwd_md_pass`, also
after row L). Rows are scaled by the Forward pass's own factors (``xmx[i][SCALE]`` of the
Forward rows, row by row, :func:`bwd_rescale_row`), unless ``(double) xB > 1e16`` switched
the target to Backward's own (``has_own_scales``, sticky: B itself where it exceeds 1e4).
``totscale`` is *set* to ``f32(log(s_L))`` at row L, accumulated like Forward's below; row 0
(:func:`bwd_first_row`) forms B from residue 1 and N, and the score is
``f32((double) totscale + log((double) xN))``, with RANGE when xN is NaN, 0 or infinite.

The same flags, by the same rule, with Backward's own absorbing sums: every addition of the
parser is checked (:func:`checked_add`: SUBNORMAL when a tiny summand changed the sum, since
under FTZ that summand is 0), and a value that is kept is never tiny: I after the main pass,
M and D after the M->D paths, B, J, N and E, the rescaled row, ``1/s``, N at row 0 (the
score's logarithm). The D->D carries decay as in Forward (``tDD <= 1``: a tiny carry stays
tiny, 0 under FTZ; each addition is checked). C decays (``C ploop`` every row, divided by
every scale factor), as Forward's N does: a tiny C is the value allowed to differ, provided
its term ``C xf[E][MOVE]`` does not change E; a stored special value that is tiny raises
TINY_ROWS. A target's Backward is exact in both modes when neither pass raises a
:data:`HOST` flag (:attr:`BackwardResult.needs_host`): Backward reuses Forward's scale
factors, and its rows then equal hmmsearch's with their subnormal entries set to 0.

Full matrices (``p7_Forward``, ``p7_Backward``: ``do_full = 1``)
-----------------------------------------------------------------
Domain definition reruns both on slices of the target (a clustered region, multihit; an
envelope, unihit: :func:`unihit_tables`), with the length model of the WHOLE target.
HMMER's engines are the parsers with every row kept, and so are these:
:func:`forward_parser` and :func:`backward_parser` take a ``dp`` array and store each row's
cells there after its rescaling (:func:`forward_matrix`, :func:`backward_matrix` on a slice;
:class:`StripedMatrix`; Backward's row 0 has no cells, HMMER computes none). The flags are
the parsers'. They are conservative for unihit envelopes: after the domain, B is N's decaying
share alone (no J), and cells far from the alignment become subnormal, so that on long models
most envelopes are flagged (``benchmarks/envelope_check.py``); in IEEE mode the matrices are
libhmmer's whatever the flags.

On real data (``benchmarks/fwdback_flags.py``: 30,848 Viterbi-filter survivors of 53
Pfam and CUDAMPF models among 77,801 proteins) this reference equals libhmmer in every
score bit and every special-state row; no target was flagged RANGE or SUBNORMAL, 1,852
(6.0%) TINY_ROWS (exactly the targets whose rows differ under flush-to-zero), and 26,766
(87%) met some subnormal (ANY_TINY). On the sample proteome every row ended the D->D
carry passes after the first one, and the skipped passes would have changed no D. The
Backward reference, on the 13,997 F3 passers among them (``--backward``), equals libhmmer
in the score, ``totscale`` and every row, in both modes; none was flagged RANGE or
SUBNORMAL, 2,066 (14.8%) TINY_ROWS (again exactly those whose rows differ under
flush-to-zero: a subnormal C), 13,131 (94%) ANY_TINY, and none switched to its own scale
factors (``has_own_scales`` is followed as HMMER's source has it, untested on real data).
"""
from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, replace

import numpy as np
from numba import njit

from hmmgpu.stages.forward import (  # noqa: F401 - the shared parts, re-exported
    ABSORB, ANY_TINY, DD_EARLY_EXIT_M, FLT_MIN, HOST, OWN_SCALES_AT, RANGE, RESCALE_AT,
    STATUS_UNSURE, SUBNORMAL, TINY_ROWS, XB, XC, XE, XJ, XN, XSCALE, ForwardTables, forward_score, length_specials,
    nqf)

_F0 = np.float32(0.0)
_F1 = np.float32(1.0)


# ----------------------------------------------------------------------------------------
# One row, step by step (the kernel's steps carry the same names)
# ----------------------------------------------------------------------------------------
@njit(cache=True, nogil=True, inline="always")
def tiny(v) -> bool:
    """``0 < v <= FLT_MIN``: a result FTZ may flush (values here are never negative)."""
    return v > _F0 and v <= FLT_MIN


@njit(cache=True, nogil=True)
def main_pass(row_m, row_d, row_i, e, tfv, xB, xEv, dcv) -> int:
    """M, the delayed D store, the M->D carry and I over q = 0..Q-1, in place (spec 2.1).
    ``xEv`` and ``dcv`` (4 lanes) come back holding the lane sums of M and the last M->D term."""
    Q = row_m.shape[0]
    flags = 0
    mpv = np.empty(4, np.float32)
    dpv = np.empty(4, np.float32)
    ipv = np.empty(4, np.float32)
    mpv[0] = _F0
    dpv[0] = _F0
    ipv[0] = _F0
    for z in range(1, 4):  # right shift of row i-1's last vector
        mpv[z] = row_m[Q - 1, z - 1]
        dpv[z] = row_d[Q - 1, z - 1]
        ipv[z] = row_i[Q - 1, z - 1]
    for z in range(4):
        dcv[z] = _F0
        xEv[z] = _F0
    for q in range(Q):
        t = 7 * q
        for z in range(4):
            p1 = xB * tfv[t, z]
            p2 = mpv[z] * tfv[t + 1, z]
            sv = p1 + p2
            p3 = ipv[z] * tfv[t + 2, z]
            sv = sv + p3
            p4 = dpv[z] * tfv[t + 3, z]
            sv = sv + p4
            sv = sv * e[q, z]
            xEv[z] = xEv[z] + sv
            mpv[z] = row_m[q, z]
            dpv[z] = row_d[q, z]
            ipv[z] = row_i[q, z]
            row_m[q, z] = sv
            row_d[q, z] = dcv[z]
            dcv[z] = sv * tfv[t + 4, z]
            pmi = mpv[z] * tfv[t + 5, z]
            pii = ipv[z] * tfv[t + 6, z]
            row_i[q, z] = pmi + pii
            if tiny(sv) or tiny(dcv[z]) or tiny(pmi) or tiny(pii):
                flags |= SUBNORMAL
            if tiny(p1) or tiny(p2) or tiny(p3) or tiny(p4) or tiny(p1 + p2) or tiny(row_i[q, z]):
                flags |= ANY_TINY
    return flags


@njit(cache=True, nogil=True)
def right_shift(v, fill):
    """``esl_sse_rightshift_ps(v, fill)``: [fill v0 v1 v2], in place (Forward's carries shift in
    0; optimal accuracy's, -inf)."""
    v[3] = v[2]
    v[2] = v[1]
    v[1] = v[0]
    v[0] = fill


@njit(cache=True, nogil=True)
def dd_first_pass(row_d, tfv, dcv) -> int:
    """The first D->D pass (spec 2.2): D(q) += carry, carry = D(q) tDD(q)."""
    Q = row_d.shape[0]
    flags = 0
    right_shift(dcv, _F0)
    for z in range(4):
        row_d[0, z] = _F0
    for q in range(Q):
        for z in range(4):
            d = row_d[q, z]
            s = dcv[z] + d
            if tiny(dcv[z]):
                flags |= ANY_TINY
                if s != d:
                    flags |= SUBNORMAL
            row_d[q, z] = s
            dcv[z] = s * tfv[7 * Q + q, z]
    return flags


@njit(cache=True, nogil=True)
def dd_carry_passes(row_d, tfv, dcv, M) -> int:
    """The three carry passes (spec 2.3): only the carry is extended; on models of
    M >= 100 a pass that changed no D (strict float compare) ends them."""
    Q = row_d.shape[0]
    flags = 0
    for j in range(1, 4):
        right_shift(dcv, _F0)
        changed = False
        for q in range(Q):
            for z in range(4):
                d = row_d[q, z]
                s = dcv[z] + d
                if s > d:
                    changed = True
                if tiny(dcv[z]):
                    flags |= ANY_TINY
                    if s != d:
                        flags |= SUBNORMAL
                row_d[q, z] = s
                dcv[z] = dcv[z] * tfv[7 * Q + q, z]
        if M >= DD_EARLY_EXIT_M and not changed:
            break
    return flags


@njit(cache=True, nogil=True)
def sum_e(row_d, xEv):
    """xE: the D cells added to the lane sums, then ``(l0 + l1) + (l2 + l3)`` (spec 2.4)."""
    Q = row_d.shape[0]
    for q in range(Q):
        for z in range(4):
            xEv[z] = row_d[q, z] + xEv[z]
    return (xEv[0] + xEv[1]) + (xEv[2] + xEv[3])


@njit(cache=True, nogil=True)
def update_specials(xE, xN, xJ, xC, pmove, ploop, xe_move, xe_loop):
    """N, C, J, then B from the new J and N (spec 2.4): (xN, xJ, xB, xC, flags)."""
    flags = 0
    xN = xN * ploop
    pc = xC * ploop
    pe = xE * xe_move
    xC = pc + pe
    pj = xJ * ploop
    pl = xE * xe_loop
    xJ = pj + pl
    pjm = xJ * pmove
    pnm = xN * pmove
    xB = pjm + pnm
    if tiny(pc) or tiny(pe) or tiny(pj) or tiny(pl) or tiny(pjm):
        flags |= SUBNORMAL
    if tiny(pnm):
        flags |= ANY_TINY
        if xB != pjm:
            flags |= SUBNORMAL
    if tiny(xN):
        flags |= ANY_TINY
    return xN, xJ, xB, xC, flags


@njit(cache=True, nogil=True)
def scale_row(row_m, row_d, row_i, r) -> int:
    """Multiply every cell of the row by ``r`` (a rescaling); :data:`SUBNORMAL` if a product is tiny."""
    Q = row_m.shape[0]
    flags = 0
    for q in range(Q):
        for z in range(4):
            m = row_m[q, z] * r
            d = row_d[q, z] * r
            i = row_i[q, z] * r
            row_m[q, z] = m
            row_d[q, z] = d
            row_i[q, z] = i
            if tiny(m) or tiny(d) or tiny(i):
                flags |= SUBNORMAL
    return flags


@njit(cache=True, nogil=True)
def rescale_row(row_m, row_d, row_i, xE, xN, xJ, xB, xC):
    """Divide the specials by xE and multiply the row by ``1/xE`` (spec 2.5): (xN, xJ, xB, xC, flags)."""
    flags = 0
    xN = xN / xE
    xC = xC / xE
    xJ = xJ / xE
    xB = xB / xE
    r = _F1 / xE
    if tiny(xC) or tiny(xJ) or tiny(xB) or tiny(r):
        flags |= SUBNORMAL
    if tiny(xN):
        flags |= ANY_TINY
    flags |= scale_row(row_m, row_d, row_i, r)
    return xN, xJ, xB, xC, flags


@njit(cache=True, nogil=True)
def _store_cells(dp, i, row_m, row_d, row_i):
    """Keep row i's M, D, I cells in a full matrix (HMMER's ``do_full``)."""
    dp[i, 0] = row_m
    dp[i, 1] = row_d
    dp[i, 2] = row_i


@njit(cache=True, nogil=True)
def forward_parser(codes, M, rfv, tfv, pmove, ploop, xe_move, xe_loop, tbm_min, xmx, scales, dp):
    """``p7_ForwardParser`` on one target (digital ``codes``, no sentinels), lane for lane.

    ``xmx``: float32 [L+1, 6] receives the special-state rows (E N J B C SCALE) when it has
    L+1 rows (pass a (0, 6) array to skip them); ``scales``: float32 [>= L] receives the
    scale factors of the rescaled rows, in row order. ``dp``: float32 [L+1, 3, Q, 4], row 0
    zero, receives every other row's M, D, I cells, whole, when it has L+1 rows (``p7_Forward``, HMMER's
    ``do_full``: the same arithmetic, every row kept; pass a (0, 3, Q, 4) array to skip them).
    Returns (flags, xC, number of scale factors, totscale, score); the score (float32 nats)
    is NaN when :data:`RANGE` is set.
    """
    L = codes.shape[0]
    Q = rfv.shape[1]
    rows = xmx.shape[0] == L + 1
    full = dp.shape[0] == L + 1
    row_m = np.zeros((Q, 4), np.float32)
    row_d = np.zeros((Q, 4), np.float32)
    row_i = np.zeros((Q, 4), np.float32)
    xEv = np.zeros(4, np.float32)
    dcv = np.zeros(4, np.float32)
    xE = _F0
    xN = _F1
    xJ = _F0
    xB = pmove
    xC = _F0
    totscale = _F0
    nscale = 0
    flags = 0
    if rows:
        xmx[0, XE] = xE
        xmx[0, XN] = xN
        xmx[0, XJ] = xJ
        xmx[0, XB] = xB
        xmx[0, XC] = xC
        xmx[0, XSCALE] = _F1
    for i in range(1, L + 1):
        if not xB * tbm_min >= ABSORB:
            flags |= SUBNORMAL
        flags |= main_pass(row_m, row_d, row_i, rfv[codes[i - 1]], tfv, xB, xEv, dcv)
        flags |= dd_first_pass(row_d, tfv, dcv)
        flags |= dd_carry_passes(row_d, tfv, dcv, M)
        xE = sum_e(row_d, xEv)
        if not math.isfinite(xE):
            flags |= RANGE
        xN, xJ, xB, xC, f = update_specials(xE, xN, xJ, xC, pmove, ploop, xe_move, xe_loop)
        flags |= f
        scale = _F1
        if xE > RESCALE_AT:
            xN, xJ, xB, xC, f = rescale_row(row_m, row_d, row_i, xE, xN, xJ, xB, xC)
            flags |= f
            scales[nscale] = xE
            nscale += 1
            totscale = np.float32(np.float64(totscale) + math.log(np.float64(xE)))
            scale = xE
            xE = _F1
        if tiny(xE) or tiny(xN) or tiny(xJ) or tiny(xB) or tiny(xC):
            flags |= TINY_ROWS
        if full:
            _store_cells(dp, i, row_m, row_d, row_i)
        if rows:
            xmx[i, XE] = xE
            xmx[i, XN] = xN
            xmx[i, XJ] = xJ
            xmx[i, XB] = xB
            xmx[i, XC] = xC
            xmx[i, XSCALE] = scale
    if math.isnan(xC) or (L > 0 and xC == _F0) or math.isinf(xC):
        flags |= RANGE
        return flags, xC, nscale, totscale, np.float32(np.nan)
    last = xC * pmove
    if tiny(last):
        flags |= SUBNORMAL
    score = np.float32(np.float64(totscale) + math.log(np.float64(last)))
    return flags, xC, nscale, totscale, score


@dataclass
class ForwardResult:
    """One target's Forward parser: flags, score (nats, float32), final xC, scale factors,
    and the special-state rows when asked for."""

    flags: int
    score: np.float32
    xc: np.float32
    scales: np.ndarray
    xmx: np.ndarray | None

    @property
    def needs_host(self) -> bool:
        """libhmmer must recompute this target (:data:`HOST` flags)."""
        return bool(self.flags & HOST)


def parse(tables: ForwardTables, codes, rows: bool = True) -> ForwardResult:
    """:func:`forward_parser` on one target with a model's :class:`ForwardTables`."""
    codes = np.ascontiguousarray(codes, dtype=np.uint8)
    L = codes.size
    pmove, ploop = length_specials(L, tables.nj)
    xmx = np.zeros((L + 1, 6) if rows else (0, 6), np.float32)
    scales = np.zeros(max(L, 1), np.float32)
    flags, xc, n, _, score = forward_parser(codes, tables.M, tables.rfv, tables.tfv, np.float32(pmove),
                                            np.float32(ploop), tables.xe_move, tables.xe_loop, tables.tbm_min,
                                            xmx, scales, np.zeros((0, 3, tables.Q, 4), np.float32))
    return ForwardResult(flags=int(flags), score=np.float32(score), xc=np.float32(xc), scales=scales[:n].copy(),
                         xmx=xmx if rows else None)


# ----------------------------------------------------------------------------------------
# The Backward parser (backward_engine, do_full = 0), step by step
# ----------------------------------------------------------------------------------------
@njit(cache=True, nogil=True, inline="always")
def checked_add(a, b):
    """``a + b`` and its flags: :data:`SUBNORMAL` when a tiny summand changed the sum (under
    FTZ that summand is 0, and the sum is the other one), :data:`ANY_TINY` when one was tiny."""
    s = a + b
    flags = 0
    if tiny(a) or tiny(b):
        flags |= ANY_TINY
        if (tiny(a) and s != b) or (tiny(b) and s != a):
            flags |= SUBNORMAL
    return s, flags


@njit(cache=True, nogil=True)
def _lsh(v, out):
    """``out = lsh(v) = [v1 v2 v3 0]`` (HMMER's move_ss + shuffle(0,3,2,1))."""
    out[0] = v[1]
    out[1] = v[2]
    out[2] = v[3]
    out[3] = _F0


@njit(cache=True, nogil=True)
def bwd_last_row(row_m, row_d, row_i, tfv, xE, dcv) -> int:
    """Row L before its carry passes (spec 4.1): M = D = xE, I = 0, then the first D->D pass
    from ``lsh(D[Q-1])`` over q = Q-1..0; ``dcv`` comes back holding its last carry."""
    Q = row_m.shape[0]
    flags = 0
    dpv = np.empty(4, np.float32)
    for q in range(Q):
        for z in range(4):
            row_m[q, z] = xE
            row_d[q, z] = xE
            row_i[q, z] = _F0
    _lsh(row_d[Q - 1], dpv)
    for q in range(Q - 1, -1, -1):
        for z in range(4):
            dcv[z] = dpv[z] * tfv[7 * Q + q, z]
            d, f = checked_add(row_d[q, z], dcv[z])
            flags |= f
            row_d[q, z] = d
            dpv[z] = d
    return flags


@njit(cache=True, nogil=True)
def bwd_main_pass(row_m, row_d, row_i, e, tfv, xBv) -> int:
    """Phase 1 of a row i < L (spec 4.2), q = Q-1..0, in place: I complete, D = M->D part,
    M = the M and I part; ``e`` is residue i+1's emission row, ``xBv`` (4 lanes) comes back
    holding the lane sums of B->M."""
    Q = row_m.shape[0]
    flags = 0
    tmmv = np.empty(4, np.float32)
    timv = np.empty(4, np.float32)
    tdmv = np.empty(4, np.float32)
    mpv = np.empty(4, np.float32)
    _lsh(tfv[1], tmmv)
    _lsh(tfv[2], timv)
    _lsh(tfv[3], tdmv)
    for z in range(4):
        xBv[z] = row_m[0, z] * e[0, z]  # scratch for the shifted M(i+1, k+1) e
    _lsh(xBv, mpv)
    for z in range(4):
        xBv[z] = _F0
    for q in range(Q - 1, -1, -1):
        t = 7 * q
        for z in range(4):
            ipv = row_i[q, z]
            i, f1 = checked_add(ipv * tfv[t + 6, z], mpv[z] * timv[z])
            row_i[q, z] = i
            row_d[q, z] = mpv[z] * tdmv[z]
            mcv, f2 = checked_add(ipv * tfv[t + 5, z], mpv[z] * tmmv[z])
            mpv[z] = row_m[q, z] * e[q, z]
            row_m[q, z] = mcv
            tdmv[z] = tfv[t + 3, z]
            timv[z] = tfv[t + 2, z]
            tmmv[z] = tfv[t + 1, z]
            xBv[z], f3 = checked_add(xBv[z], mpv[z] * tfv[t, z])
            flags |= f1 | f2 | f3
            if tiny(i):
                flags |= SUBNORMAL
    return flags


@njit(cache=True, nogil=True)
def bwd_specials(xBv, xN, xJ, xC, pmove, ploop, xe_move, xe_loop):
    """Phase 2 (spec 4.2): B the lane sum ``(l0 + l1) + (l2 + l3)``, then C, J, N, E in
    HMMER's order: (xE, xN, xJ, xB, xC, flags). A tiny C (it decays like Forward's N) is
    allowed where its E term does not change E."""
    s01, f1 = checked_add(xBv[0], xBv[1])
    s23, f2 = checked_add(xBv[2], xBv[3])
    xB, f3 = checked_add(s01, s23)
    xC = xC * ploop
    xJ, f4 = checked_add(xB * pmove, xJ * ploop)
    xN, f5 = checked_add(xB * pmove, xN * ploop)
    xE, f6 = checked_add(xC * xe_move, xJ * xe_loop)
    flags = f1 | f2 | f3 | f4 | f5 | f6
    if tiny(xB) or tiny(xJ) or tiny(xN) or tiny(xE):
        flags |= SUBNORMAL
    return xE, xN, xJ, xB, xC, flags


@njit(cache=True, nogil=True)
def bwd_dd_first_pass(row_m, row_d, tfv, xE, dcv) -> int:
    """Phase 3 (spec 4.2): the {M,D}->E paths and the first D->D pass, q = Q-1..0, from
    ``lsh(D[0] + xE)``; ``dcv`` comes back holding the last carry."""
    Q = row_m.shape[0]
    flags = 0
    dpv = np.empty(4, np.float32)
    top = np.empty(4, np.float32)
    for z in range(4):
        top[z], f = checked_add(row_d[0, z], xE)
        flags |= f
    _lsh(top, dpv)
    for q in range(Q - 1, -1, -1):
        for z in range(4):
            dcv[z] = dpv[z] * tfv[7 * Q + q, z]
            a, f1 = checked_add(dcv[z], xE)
            d, f2 = checked_add(row_d[q, z], a)
            row_d[q, z] = d
            dpv[z] = d
            row_m[q, z], f3 = checked_add(row_m[q, z], xE)
            flags |= f1 | f2 | f3
    return flags


@njit(cache=True, nogil=True)
def bwd_dd_carry_passes(row_d, tfv, dcv) -> int:
    """The three carry passes (spec 4.1, 4.2 phase 4), q = Q-1..0, no early exit: only the
    carry is extended, ``dcv = dcv tDD``, then added to D."""
    Q = row_d.shape[0]
    flags = 0
    shifted = np.empty(4, np.float32)
    for _ in range(3):
        _lsh(dcv, shifted)
        dcv[:] = shifted
        for q in range(Q - 1, -1, -1):
            for z in range(4):
                dcv[z] = dcv[z] * tfv[7 * Q + q, z]
                row_d[q, z], f = checked_add(row_d[q, z], dcv[z])
                flags |= f
    return flags


@njit(cache=True, nogil=True)
def bwd_md_pass(row_m, row_d, tfv) -> int:
    """The M->D paths (spec 4.1, 4.2 phase 5), q = Q-1..0: M += lsh(D)[q] tMD; M and D are
    then final, and neither may be tiny."""
    Q = row_m.shape[0]
    flags = 0
    dcv = np.empty(4, np.float32)
    _lsh(row_d[0], dcv)
    for q in range(Q - 1, -1, -1):
        for z in range(4):
            m, f = checked_add(row_m[q, z], dcv[z] * tfv[7 * q + 4, z])
            row_m[q, z] = m
            dcv[z] = row_d[q, z]
            flags |= f
            if tiny(m) or tiny(dcv[z]):
                flags |= SUBNORMAL
    return flags


@njit(cache=True, nogil=True)
def bwd_rescale_row(row_m, row_d, row_i, s, xE, xN, xJ, xB, xC):
    """Divide the specials by the row's scale factor ``s`` and multiply the row by
    ``f32(1.0 / (double) s)`` (spec 4.3): (xE, xN, xJ, xB, xC, flags)."""
    flags = 0
    xE = xE / s
    xN = xN / s
    xJ = xJ / s
    xB = xB / s
    xC = xC / s
    r = np.float32(1.0 / np.float64(s))
    if tiny(xE) or tiny(xN) or tiny(xJ) or tiny(xB) or tiny(r):
        flags |= SUBNORMAL
    flags |= scale_row(row_m, row_d, row_i, r)
    return xE, xN, xJ, xB, xC, flags


@njit(cache=True, nogil=True)
def bwd_first_row(row_m, e, tfv, xN, pmove, ploop):
    """Row 0 (spec 4.4): B the lane sum over q = 0..Q-1 of ``(M[q] e[q]) tBM[q]`` (residue 1's
    ``e``), then N: (xB, xN, flags)."""
    Q = row_m.shape[0]
    flags = 0
    xBv = np.zeros(4, np.float32)
    for q in range(Q):
        for z in range(4):
            mpv = row_m[q, z] * e[q, z]
            xBv[z], f = checked_add(xBv[z], mpv * tfv[7 * q, z])
            flags |= f
    s01, f1 = checked_add(xBv[0], xBv[1])
    s23, f2 = checked_add(xBv[2], xBv[3])
    xB, f3 = checked_add(s01, s23)
    xN, f4 = checked_add(xB * pmove, xN * ploop)
    flags |= f1 | f2 | f3 | f4
    if tiny(xB) or tiny(xN):
        flags |= SUBNORMAL
    return xB, xN, flags


@njit(cache=True, nogil=True)
def _store_row(xmx, i, xE, xN, xJ, xB, xC, scale) -> int:
    """Store Backward's special-state row i; :data:`TINY_ROWS` if a stored value is tiny."""
    xmx[i, XE] = xE
    xmx[i, XN] = xN
    xmx[i, XJ] = xJ
    xmx[i, XB] = xB
    xmx[i, XC] = xC
    xmx[i, XSCALE] = scale
    return TINY_ROWS if tiny(xE) or tiny(xN) or tiny(xJ) or tiny(xB) or tiny(xC) else 0


@njit(cache=True, nogil=True)
def backward_parser(codes, rfv, tfv, pmove, ploop, xe_move, xe_loop, fwd_scale, xmx, dp):
    """``p7_BackwardParser`` on one target (digital ``codes``, no sentinels), lane for lane,
    after the Forward parser: ``fwd_scale`` float32 [L+1] is Forward's ``xmx[:, SCALE]``.
    ``xmx`` float32 [L+1, 6] receives the special-state rows (E N J B C SCALE). ``dp``:
    float32 [L+1, 3, Q, 4], row 0 zero, receives the M, D, I cells of rows L..1, whole, when it has L+1
    rows (``p7_Backward``, ``do_full``; row 0's cells are not computed, HMMER's neither; pass
    a (0, 3, Q, 4) array to skip them). Returns
    (flags, has_own_scales, totscale, score); the score (float32 nats) is NaN when
    :data:`RANGE` is set."""
    L = codes.shape[0]
    Q = rfv.shape[1]
    row_m = np.zeros((Q, 4), np.float32)
    row_d = np.zeros((Q, 4), np.float32)
    row_i = np.zeros((Q, 4), np.float32)
    dcv = np.zeros(4, np.float32)
    xBv = np.zeros(4, np.float32)
    xJ = _F0
    xB = _F0
    xN = _F0
    xC = pmove
    xE = xC * xe_move
    flags = bwd_last_row(row_m, row_d, row_i, tfv, xE, dcv)
    flags |= bwd_dd_carry_passes(row_d, tfv, dcv)
    flags |= bwd_md_pass(row_m, row_d, tfv)
    s = fwd_scale[L]
    if s > _F1:
        xE, xN, xJ, xB, xC, f = bwd_rescale_row(row_m, row_d, row_i, s, xE, xN, xJ, xB, xC)
        flags |= f
    totscale = np.float32(math.log(np.float64(s)))
    flags |= _store_row(xmx, L, xE, xN, xJ, xB, xC, s)
    full = dp.shape[0] == L + 1
    if full:
        _store_cells(dp, L, row_m, row_d, row_i)
    has_own = False
    for i in range(L - 1, 0, -1):
        flags |= bwd_main_pass(row_m, row_d, row_i, rfv[codes[i]], tfv, xBv)
        xE, xN, xJ, xB, xC, f = bwd_specials(xBv, xN, xJ, xC, pmove, ploop, xe_move, xe_loop)
        flags |= f
        flags |= bwd_dd_first_pass(row_m, row_d, tfv, xE, dcv)
        flags |= bwd_dd_carry_passes(row_d, tfv, dcv)
        flags |= bwd_md_pass(row_m, row_d, tfv)
        if np.float64(xB) > OWN_SCALES_AT:
            has_own = True
        if has_own:
            s = xB if xB > RESCALE_AT else _F1
        else:
            s = fwd_scale[i]
        if s > _F1:
            xE, xN, xJ, xB, xC, f = bwd_rescale_row(row_m, row_d, row_i, s, xE, xN, xJ, xB, xC)
            flags |= f
            totscale = np.float32(np.float64(totscale) + math.log(np.float64(s)))
        flags |= _store_row(xmx, i, xE, xN, xJ, xB, xC, s)
        if full:
            _store_cells(dp, i, row_m, row_d, row_i)
    xB, xN, f = bwd_first_row(row_m, rfv[codes[0]], tfv, xN, pmove, ploop)
    flags |= f | _store_row(xmx, 0, _F0, xN, _F0, xB, _F0, _F1)
    if math.isnan(xN) or xN == _F0 or math.isinf(xN):
        return flags | RANGE, has_own, totscale, np.float32(np.nan)
    return flags, has_own, totscale, np.float32(np.float64(totscale) + math.log(np.float64(xN)))


@dataclass
class BackwardResult:
    """One target's Backward parser: its own flags, the Forward pass's flags, score (nats,
    float32), ``totscale``, ``has_own_scales`` and the special-state rows."""

    flags: int
    forward_flags: int
    score: np.float32
    totscale: np.float32
    has_own_scales: bool
    xmx: np.ndarray

    @property
    def needs_host(self) -> bool:
        """libhmmer must recompute this target: :data:`HOST` flags in either pass (Backward
        reuses Forward's scale factors)."""
        return bool((self.flags | self.forward_flags) & HOST)


def backward(tables: ForwardTables, codes, forward: ForwardResult | None = None) -> BackwardResult:
    """:func:`backward_parser` on one target with a model's :class:`ForwardTables`, after the
    Forward parser (``forward``, a :func:`parse` result with its rows; run here when not given)."""
    codes = np.ascontiguousarray(codes, dtype=np.uint8)
    L = codes.size
    if forward is None:
        forward = parse(tables, codes)
    if forward.xmx is None or forward.xmx.shape[0] != L + 1:
        raise ValueError("the Backward parser needs the Forward parser's rows of this target")
    pmove, ploop = length_specials(L, tables.nj)
    xmx = np.zeros((L + 1, 6), np.float32)
    flags, own, totscale, score = backward_parser(codes, tables.rfv, tables.tfv, np.float32(pmove), np.float32(ploop),
                                                  tables.xe_move, tables.xe_loop,
                                                  np.ascontiguousarray(forward.xmx[:, XSCALE]), xmx,
                                                  np.zeros((0, 3, tables.Q, 4), np.float32))
    return BackwardResult(flags=int(flags), forward_flags=forward.flags, score=np.float32(score),
                          totscale=np.float32(totscale), has_own_scales=bool(own), xmx=xmx)


def score_targets(tables: ForwardTables, db, indices, model=None) -> tuple:
    """The Forward score of each target of ``indices`` (database indices of non-empty targets
    of ``db``), as the GPU forms it: the reference's final ``xC`` and scale factors, the
    score from them with libm's ``log`` (:func:`forward_score`). Returns (status int32,
    scores float32 nats, how many libhmmer computed). A target the flags send to the host
    (:data:`HOST`, a tiny last product, or every target of a model whose tables the flags'
    argument does not cover) is computed by ``model`` (a :class:`hmmgpu.cpu.hmmerlib.HmmerModel`,
    in the calling thread's float mode), or, without one, gets :data:`STATUS_UNSURE` and no
    score."""
    def own(codes):
        mine = parse(tables, codes, rows=False)
        pmove = length_specials(codes.size, tables.nj)[0]
        if not (mine.flags & HOST) and np.float32(mine.xc * pmove) > FLT_MIN:
            return forward_score(mine.scales, mine.xc, pmove)
        return None

    return _scores(tables, db, indices, own, model.forward_parser if model is not None else None)


def backward_scores(tables: ForwardTables, db, indices, model=None) -> tuple:
    """The Backward parser's score of each target of ``indices`` (database indices of
    non-empty targets of ``db``) after its Forward parser, as ``p7_Pipeline`` runs the two on
    an F3 passer: :func:`backward` after :func:`parse`. Returns (status int32, scores float32
    nats, how many libhmmer computed). A target either pass flags for the host
    (:attr:`BackwardResult.needs_host`), or every target of a model whose tables the flags'
    argument does not cover, is computed by ``model`` (``HmmerModel.backward_parser``, in the
    calling thread's float mode), or, without one, gets :data:`STATUS_UNSURE` and no score."""
    def own(codes):
        mine = backward(tables, codes)
        return None if mine.needs_host else mine.score

    return _scores(tables, db, indices, own, model.backward_parser if model is not None else None)


def _scores(tables: ForwardTables, db, indices, own, host) -> tuple:
    """Each target's score by ``own(codes)`` (None where its flags send it to the host), else
    by ``host(codes)`` (libhmmer's parser: status and score first), else STATUS_UNSURE; every
    target by ``host`` where the tables' exactness conditions are not met. (status, scores,
    how many ``host`` computed), as :func:`score_targets` and :func:`backward_scores` return."""
    idx = np.asarray(indices, np.int64)
    status = np.zeros(idx.size, np.int32)
    scores = np.full(idx.size, np.nan, np.float32)
    covered = tables.exactness_conditions() is None
    recomputed = 0
    for j, t in enumerate(idx.tolist()):
        codes = db.codes(t)
        score = own(codes) if covered else None
        if score is not None:
            scores[j] = score
        elif host is None:
            status[j] = STATUS_UNSURE
        else:
            status[j], scores[j] = host(codes)[:2]
            recomputed += 1
    return status, scores, recomputed


# ----------------------------------------------------------------------------------------
# Full matrices (forward_engine / backward_engine with do_full = 1)
# ----------------------------------------------------------------------------------------
#: The states of a row of a full matrix, HMMER's p7X_ order.
DP_M, DP_D, DP_I = 0, 1, 2


@dataclass
class StripedMatrix:
    """A full striped DP matrix of a sequence (or a slice of one) of length ``Ld``, as HMMER's
    ``P7_OMX`` holds it with every row kept: Forward, Backward, posterior probabilities
    (``p7_Decoding``) or optimal accuracy (``p7_OptimalAccuracy``).

    ``dp`` float32 [Ld+1, 3, Q, 4]: state ``s`` (:data:`DP_M`, :data:`DP_D`, :data:`DP_I`),
    vector ``q``, lane ``z``, holding node ``k = q + 1 + z Q`` (HMMER stores a row as
    [Q][3][4]; here the state comes first, so that ``dp[i, DP_M]`` is row i's M vectors).
    ``xmx`` float32 [Ld+1, 6]: E N J B C SCALE (HMMER's ``p7X_`` order). ``totscale``: the
    log of the product of the scale factors; ``has_own_scales``: a Forward matrix always
    sets it, a Backward one when it switched to its own scale factors."""

    dp: np.ndarray
    xmx: np.ndarray
    totscale: np.float32
    has_own_scales: bool

    @property
    def L(self) -> int:
        return int(self.dp.shape[0] - 1)

    @property
    def Q(self) -> int:
        return int(self.dp.shape[2])

    def cell(self, i: int, s: int, k: int) -> np.float32:
        """The value of state ``s`` at node ``k`` (1..M) of row ``i``."""
        Q = self.Q
        return self.dp[i, s, (k - 1) % Q, (k - 1) // Q]



@dataclass
class MatrixResult:
    """A full matrix and its flags (those of the matrices it was computed from included), and
    the score where the matrix has one (Forward, Backward; float32 nats, NaN on :data:`RANGE`)."""

    flags: int
    score: np.float32
    matrix: StripedMatrix

    @property
    def needs_host(self) -> bool:
        """libhmmer must recompute this matrix (:data:`HOST` flags)."""
        return bool(self.flags & HOST)


#: Each model's unihit tables, made at its first envelope (and their ``tbm_min`` once).
_UNIHIT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def unihit_tables(tables: ForwardTables) -> ForwardTables:
    """The tables as ``p7_oprofile_ReconfigUnihit`` leaves them: E moves to C with
    probability 1, never to J, and ``nj = 0`` (``pmove = 2 / (L + 2)``). Made once per
    ``tables`` (every envelope of a model asks for them)."""
    uni = _UNIHIT.get(tables)
    if uni is None:
        uni = _UNIHIT[tables] = replace(tables, xe_move=np.float32(1.0), xe_loop=np.float32(0.0),
                                        nj=np.float32(0.0))
    return uni


def special_transitions(tables: ForwardTables, L: int) -> np.ndarray:
    """HMMER's ``om->xf`` float32 [4, 2] ([E N J C][MOVE LOOP]) for ``tables`` (multihit, or
    :func:`unihit_tables`) at target length ``L``."""
    pmove, ploop = length_specials(L, tables.nj)
    xf = np.empty((4, 2), np.float32)
    xf[0, 0], xf[0, 1] = tables.xe_move, tables.xe_loop
    xf[1:, 0], xf[1:, 1] = pmove, ploop
    return xf


def special_transitions_of(tables, lengths) -> np.ndarray:
    """:func:`special_transitions` of every pair (``tables[k]``, ``lengths[k]``) at once: float32
    [n][4][2], each equal bit for bit to the one-target form (the same float32 operations,
    element by element)."""
    n = len(lengths)
    xf = np.empty((n, 4, 2), np.float32)
    if n == 0:
        return xf
    pmove, ploop = length_specials(np.asarray(lengths, np.int64), np.array([t.nj for t in tables], np.float32))
    xf[:, 0, 0] = [t.xe_move for t in tables]
    xf[:, 0, 1] = [t.xe_loop for t in tables]
    xf[:, 1:, 0] = pmove[:, None]
    xf[:, 1:, 1] = ploop[:, None]
    return xf


def _matrix(ld: int, Q: int) -> np.ndarray:
    """A full matrix's cells for ``ld`` rows: row 0 zero, rows 1..ld left for the parser, which
    writes each whole (zeroing them all first cost more than the parser, under the GIL)."""
    dp = np.empty((ld + 1, 3, Q, 4), np.float32)
    dp[0] = 0.0
    return dp


def _slice(codes, i, j):
    codes = np.ascontiguousarray(codes, dtype=np.uint8)
    j = codes.size if j is None else int(j)
    if not 1 <= int(i) <= j <= codes.size:
        raise ValueError(f"slice {i}..{j} is not within 1..{codes.size}")
    return codes[int(i) - 1:j], codes.size


def forward_matrix(tables: ForwardTables, codes, i: int = 1, j: int | None = None,
                   unihit: bool = False) -> MatrixResult:
    """``p7_Forward`` (full matrix) on the slice ``i..j`` (1-based, inclusive; the whole target
    by default) of a target's ``codes``, its length model set to the FULL target length, as
    domain definition runs it: multihit on a clustered region (``region_trace_ensemble``),
    unihit on an envelope (``rescore_isolated_domain``; ``tables`` are then made
    :func:`unihit_tables`). Its rows are :func:`forward_parser`'s, every one kept."""
    sub, L = _slice(codes, i, j)
    t = unihit_tables(tables) if unihit else tables
    pmove, ploop = length_specials(L, t.nj)
    ld = sub.size
    xmx = np.empty((ld + 1, 6), np.float32)   # every special row is written
    dp = _matrix(ld, t.Q)
    flags, _, _, totscale, score = forward_parser(sub, t.M, t.rfv, t.tfv, np.float32(pmove), np.float32(ploop),
                                                  t.xe_move, t.xe_loop, t.tbm_min, xmx,
                                                  np.zeros(max(ld, 1), np.float32), dp)
    return MatrixResult(flags=int(flags), score=np.float32(score),
                        matrix=StripedMatrix(dp=dp, xmx=xmx, totscale=np.float32(totscale), has_own_scales=True))


def backward_matrix(tables: ForwardTables, codes, forward: MatrixResult, i: int = 1, j: int | None = None,
                    unihit: bool = False) -> MatrixResult:
    """``p7_Backward`` (full matrix) on the same slice and configuration as ``forward`` (a
    :func:`forward_matrix` result), whose scale factors it reuses: :func:`backward_parser`'s
    rows, every one kept (row 0's cells zero, as HMMER computes none)."""
    sub, L = _slice(codes, i, j)
    if forward.matrix.L != sub.size:
        raise ValueError("the Backward matrix needs the Forward matrix of the same slice")
    t = unihit_tables(tables) if unihit else tables
    pmove, ploop = length_specials(L, t.nj)
    ld = sub.size
    xmx = np.empty((ld + 1, 6), np.float32)   # every special row is written
    dp = _matrix(ld, t.Q)
    flags, own, totscale, score = backward_parser(sub, t.rfv, t.tfv, np.float32(pmove), np.float32(ploop),
                                                  t.xe_move, t.xe_loop,
                                                  np.ascontiguousarray(forward.matrix.xmx[:, XSCALE]), xmx, dp)
    return MatrixResult(flags=int(flags) | forward.flags, score=np.float32(score),
                        matrix=StripedMatrix(dp=dp, xmx=xmx, totscale=np.float32(totscale),
                                             has_own_scales=bool(own)))


__all__ = ["ForwardTables", "ForwardResult", "BackwardResult", "forward_parser", "backward_parser", "backward",
           "forward_score", "length_specials", "parse", "nqf", "score_targets", "backward_scores", "RANGE", "SUBNORMAL",
           "TINY_ROWS", "ANY_TINY", "HOST", "STATUS_UNSURE", "StripedMatrix", "DP_M", "DP_D", "DP_I",
           "MatrixResult", "unihit_tables", "special_transitions",
           "special_transitions_of", "forward_matrix", "backward_matrix", "right_shift"]
