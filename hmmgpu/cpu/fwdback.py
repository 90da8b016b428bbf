"""HMMER 3.4's Forward parser (``p7_ForwardParser``, impl_sse) on the CPU: the plain reference
beside the GPU kernel (:mod:`hmmgpu.gpu.fwdback`), lane for lane.

HMMER keeps a generic implementation beside its vector code; this module is that habit
for hmmgpu's Forward: a serial numba function that computes what ``forward_engine`` (with
``do_full = 0``) computes, float operation for float operation, emulating the four SSE
lanes of the striped layout explicitly. Its functions carry the names of the steps of the
kernel's row (:func:`main_pass`, :func:`dd_first_pass`, :func:`dd_carry_passes`,
:func:`sum_e`, :func:`update_specials`, :func:`rescale_row`), and it raises the same
exactness flags, so that the kernel can be checked against it step by step and both
against libhmmer (``hmmgpu.cpu.hmmerlib.HmmerModel.forward_parser``). The parts that need no
numba (the flags, :class:`ForwardTables`, :func:`length_specials`, :func:`forward_score`) live
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

On real data (``benchmarks/fwdback_flags.py``: 30,848 Viterbi-filter survivors of 53
Pfam and CUDAMPF models among 77,801 proteins) this reference equals libhmmer in every
score bit and every special-state row; no target was flagged RANGE or SUBNORMAL, 1,852
(6.0%) TINY_ROWS (exactly the targets whose rows differ under flush-to-zero), and 26,766
(87%) met some subnormal (ANY_TINY). On the sample proteome every row ended the D->D
carry passes after the first one, and the skipped passes would have changed no D.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from hmmgpu.stages.forward import (  # noqa: F401 - the shared parts, re-exported
    ABSORB, ANY_TINY, DD_EARLY_EXIT_M, FLT_MIN, HOST, RANGE, RESCALE_AT, STATUS_OK, STATUS_RANGE, STATUS_UNSURE,
    SUBNORMAL, TINY_ROWS, XB, XC, XE, XJ, XN, XSCALE, ForwardTables, forward_score, length_specials, nqf)

_F0 = np.float32(0.0)
_F1 = np.float32(1.0)


# ----------------------------------------------------------------------------------------
# One row, step by step (the kernel's steps carry the same names)
# ----------------------------------------------------------------------------------------
@njit(cache=True, inline="always")
def tiny(v) -> bool:
    """``0 < v <= FLT_MIN``: a result FTZ may flush (values here are never negative)."""
    return v > _F0 and v <= FLT_MIN


@njit(cache=True)
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


@njit(cache=True)
def _rsh(v):
    v[3] = v[2]
    v[2] = v[1]
    v[1] = v[0]
    v[0] = _F0


@njit(cache=True)
def dd_first_pass(row_d, tfv, dcv) -> int:
    """The first D->D pass (spec 2.2): D(q) += carry, carry = D(q) tDD(q)."""
    Q = row_d.shape[0]
    flags = 0
    _rsh(dcv)
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


@njit(cache=True)
def dd_carry_passes(row_d, tfv, dcv, M) -> int:
    """The three carry passes (spec 2.3): only the carry is extended; on models of
    M >= 100 a pass that changed no D (strict float compare) ends them."""
    Q = row_d.shape[0]
    flags = 0
    for j in range(1, 4):
        _rsh(dcv)
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


@njit(cache=True)
def sum_e(row_d, xEv):
    """xE: the D cells added to the lane sums, then ``(l0 + l1) + (l2 + l3)`` (spec 2.4)."""
    Q = row_d.shape[0]
    for q in range(Q):
        for z in range(4):
            xEv[z] = row_d[q, z] + xEv[z]
    return (xEv[0] + xEv[1]) + (xEv[2] + xEv[3])


@njit(cache=True)
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


@njit(cache=True)
def rescale_row(row_m, row_d, row_i, xE, xN, xJ, xB, xC):
    """Divide the specials by xE and multiply the row by ``1/xE`` (spec 2.5): (xN, xJ, xB, xC, flags)."""
    Q = row_m.shape[0]
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
    return xN, xJ, xB, xC, flags


@njit(cache=True)
def forward_parser(codes, M, rfv, tfv, pmove, ploop, xe_move, xe_loop, tbm_min, xmx, scales):
    """``p7_ForwardParser`` on one target (digital ``codes``, no sentinels), lane for lane.

    ``xmx``: float32 [L+1, 6] receives the special-state rows (E N J B C SCALE) when it has
    L+1 rows (pass a (0, 6) array to skip them); ``scales``: float32 [>= L] receives the
    scale factors of the rescaled rows, in row order. Returns (flags, xC, number of scale
    factors, totscale, score); the score (float32 nats) is NaN when :data:`RANGE` is set.
    """
    L = codes.shape[0]
    Q = rfv.shape[1]
    rows = xmx.shape[0] == L + 1
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
                                            xmx, scales)
    return ForwardResult(flags=int(flags), score=np.float32(score), xc=np.float32(xc), scales=scales[:n].copy(),
                         xmx=xmx if rows else None)


def score_targets(tables: ForwardTables, db, indices, model=None) -> tuple:
    """The Forward score of each target of ``indices`` (database indices of non-empty targets
    of ``db``), as the GPU forms it: the reference's final ``xC`` and scale factors, the
    score from them with libm's ``log`` (:func:`forward_score`). Returns (status int32,
    scores float32 nats, how many libhmmer computed). A target the flags send to the host
    (:data:`HOST`, a tiny last product, or every target of a model whose tables the flags'
    argument does not cover) is computed by ``model`` (a :class:`hmmgpu.cpu.hmmerlib.HmmerModel`,
    in the calling thread's float mode), or, without one, gets :data:`STATUS_UNSURE` and no
    score."""
    idx = np.asarray(indices, np.int64)
    status = np.zeros(idx.size, np.int32)
    scores = np.full(idx.size, np.nan, np.float32)
    covered = tables.exactness_conditions() is None
    recomputed = 0
    for j, t in enumerate(idx.tolist()):
        codes = db.codes(t)
        if covered:
            mine = parse(tables, codes, rows=False)
            pmove = length_specials(codes.size, tables.nj)[0]
            if not (mine.flags & HOST) and np.float32(mine.xc * pmove) > FLT_MIN:
                scores[j] = forward_score(mine.scales, mine.xc, pmove)
                continue
        if model is None:
            status[j] = STATUS_UNSURE
            continue
        status[j], scores[j] = model.forward_parser(codes)[:2]
        recomputed += 1
    return status, scores, recomputed


__all__ = ["ForwardTables", "ForwardResult", "forward_parser", "forward_score", "length_specials", "parse", "nqf",
           "score_targets", "RANGE", "SUBNORMAL", "TINY_ROWS", "ANY_TINY", "HOST", "STATUS_UNSURE"]
