"""The Forward parser's host side, on no device: its tables, exactness flags and score.

HMMER's ``p7_ForwardParser`` (impl_sse) runs in hmmgpu twice, as the GPU kernel
(:mod:`hmmgpu.gpu.fwdback`) and as the lane-exact CPU reference beside it
(:mod:`hmmgpu.cpu.fwdback`, which explains the flags and the layout in full). What both
share, and what the GPU process needs without importing numba, lives here: the flags a
target is marked with, the model's striped tables (HMMER's own, :class:`ForwardTables`), the
per-length special transitions (:func:`length_specials`), and the score formed from the
scale factors and the final ``xC`` with libm's ``log`` (:func:`forward_score`). The F3 test
on the score (``p7_Pipeline``'s exponential tail) is :func:`hmmgpu.stages.stats.passes_exponential`.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

#: Status of a target's Forward parser: libhmmer's (OK, eslERANGE when the final C is NaN, 0 or
#: infinite), and STATUS_UNSURE for a target whose score hmmgpu cannot promise bit for bit
#: (flagged, or a model its exactness argument does not cover) and did not ask libhmmer for.
STATUS_OK, STATUS_RANGE, STATUS_UNSURE = 0, 16, -1

#: Flag: the final xC is NaN, zero or infinite (libhmmer: eslERANGE), or xE went non-finite.
RANGE = 1
#: Flag: a subnormal result could change the score or a kept value between IEEE and FTZ modes.
SUBNORMAL = 2
#: Flag: a stored special-state value (in practice N) is subnormal; nothing else depends on it.
TINY_ROWS = 4
#: Diagnostic flag of the reference only: some float result anywhere was subnormal (or FLT_MIN).
ANY_TINY = 8
#: Flag of a result computed in hmmsearch's arithmetic (flush-to-zero), which flushed a tiny value
#: to 0: pyhmmer's IEEE arithmetic could give other bits (the domain decoding kernel's).
FTZ_ONLY = 16
#: The flags that send a target to libhmmer on the host.
HOST = RANGE | SUBNORMAL

#: Columns of a row of special states (HMMER's p7X_ order).
XE, XN, XJ, XB, XC, XSCALE = range(6)
#: Smallest normal float32 (2^-126); values in (0, FLT_MIN] count as tiny.
FLT_MIN = np.float32(2.0 ** -126)
#: Under flush-to-zero (hmmsearch's SSE mode) an exact result below this (a double: FLT_MIN less
#: half the float spacing below it) is 0, one at or above it at least FLT_MIN: x86 detects
#: underflow after rounding to float with an unbounded exponent (ties to even round the bound up).
FTZ_EDGE = 2.0 ** -126 - 2.0 ** -151
#: A sum of at least this absorbs a tiny term (half its ulp is at least 2^-125 > FLT_MIN).
ABSORB = np.float32(2.0 ** -101)
#: HMMER rescales a row when xE exceeds this.
RESCALE_AT = np.float32(1.0e4)
#: Models of at least this many nodes stop the D->D carry passes early.
DD_EARLY_EXIT_M = 100
#: Backward switches to its own scale factors when ``(double) xB`` exceeds this (not a float).
OWN_SCALES_AT = 1.0e16

def nqf(M: int) -> int:
    """HMMER's ``p7O_NQF(M)``: float vectors per row."""
    return max(2, (int(M) - 1) // 4 + 1)


def length_specials(lengths, nj=1.0) -> tuple:
    """(pmove, ploop) float32 for target lengths ``lengths`` (``nj = 1``: multihit), as
    ``p7_oprofile_ReconfigRestLength`` computes them: ``(2 + nj) / ((float) L + 2 + nj)``
    and ``1 - pmove``, in float."""
    f = np.float32
    if isinstance(lengths, (int, np.integer)):  # one target: the same float32 operations on scalars
        pmove = (f(2.0) + f(nj)) / ((f(lengths) + f(2.0)) + f(nj))
        return pmove, f(1.0) - pmove
    L = np.asarray(lengths, dtype=np.float32)
    with np.errstate(all="ignore"):
        pmove = (f(2.0) + f(nj)) / ((L + f(2.0)) + f(nj))
        ploop = f(1.0) - pmove
    return pmove.astype(np.float32), ploop.astype(np.float32)


@dataclass(frozen=True, eq=False)
class ForwardTables:
    """A model's striped Forward tables (HMMER's own, spec section 1.2)."""

    M: int
    rfv: np.ndarray  #: float32 [Kp][Q][4]: match emission odds
    tfv: np.ndarray  #: float32 [8Q][4]: BM MM IM DM MD MI II per q, then DD
    xe_move: np.float32  #: xf[E][MOVE] (0.5 multihit)
    xe_loop: np.float32  #: xf[E][LOOP] (0.5 multihit)
    nj: np.float32 = np.float32(1.0)  #: expected uses of J (1 multihit): sets pmove

    @property
    def Q(self) -> int:
        return int(self.rfv.shape[1])

    @classmethod
    def from_hmmer(cls, model) -> "ForwardTables":
        """The tables of a :class:`hmmgpu.cpu.hmmerlib.HmmerModel` (read from its ``om``)."""
        t = model.forward_tables()
        return cls(M=int(t["M"]), rfv=t["rfv"], tfv=t["tfv"], xe_move=np.float32(t["xf"][0, 0]),
                   xe_loop=np.float32(t["xf"][0, 1]), nj=np.float32(t["nj"]))

    @classmethod
    def from_optimized(cls, om) -> "ForwardTables":
        """The tables of a pyhmmer ``OptimizedProfile`` configured as hmmsearch configures it
        (multihit local): its own ``rfv`` and ``tfv`` (the same arrays as libhmmer's ``om``,
        without the cost of a second model), ``xf[E] = (0.5, 0.5)`` and ``nj = 1``, as
        ``p7_oprofile_Convert`` sets them for a multihit model (pyhmmer's ``xf`` is not read:
        it crashes pyhmmer 0.12.3)."""
        if not (om.multihit and om.local):
            raise ValueError("the Forward tables are read from a multihit local profile only")
        M = int(om.M)
        Q = nqf(M)
        rfv = np.asarray(om.rfv, np.float32).reshape(-1, Q, 4)
        tfv = np.asarray(om.tfv, np.float32).reshape(8 * Q, 4)
        half = np.float32(0.5)
        return cls(M=M, rfv=np.ascontiguousarray(rfv), tfv=np.ascontiguousarray(tfv), xe_move=half, xe_loop=half,
                   nj=np.float32(1.0))

    @functools.cached_property
    def tbm_min(self) -> np.float32:
        """The smallest B->M transition of a real node (the row's absorption check)."""
        Q = self.Q
        k = np.arange(Q)[:, None] + 1 + np.arange(4)[None, :] * Q  # node of [q][z]
        return np.float32(self.tfv[0:7 * Q:7][k <= self.M].min())

    def exactness_conditions(self) -> str | None:
        """Why the flags' argument would not hold for this model, or None: the D->D
        transitions must be at most 1, no table entry may be subnormal, tBM must be positive."""
        tables = np.concatenate([self.rfv.reshape(-1), self.tfv.reshape(-1)])
        if not np.isfinite(tables).all() or (tables < 0).any():
            return "a negative or non-finite table entry"
        if ((tables > 0) & (tables <= FLT_MIN)).any():
            return "a subnormal table entry"
        if (self.tfv[7 * self.Q:] > 1).any():
            return "a D->D transition above 1"
        if not self.tbm_min > 0:
            return "a B->M transition of 0"
        return None


def forward_totscale(scales) -> np.float32:
    """``totscale`` of a Forward pass from the scale factors of its rescaled rows (in row
    order), as ``forward_engine`` forms it: summed in double and rounded to float at every
    row, with libm's double ``log`` (Python's ``math.log``)."""
    tot = np.float32(0.0)
    for s in np.asarray(scales, np.float32).tolist():
        tot = np.float32(float(tot) + math.log(s))
    return tot


def forward_score(scales, xc, pmove) -> np.float32:
    """The Forward score (float32 nats) from the scale factors of the rescaled rows (in row
    order) and the final ``xC``, formed as ``forward_engine`` forms it: :func:`forward_totscale`,
    then ``f32(totscale + log(f32(xC pmove)))``, with libm's double ``log``."""
    tot = forward_totscale(scales)
    last = float(np.float32(np.float32(xc) * np.float32(pmove)))
    return np.float32(float(tot) + math.log(last))


def forward_totscales(scales, starts, counts) -> np.ndarray:
    """:func:`forward_totscale` of many targets at once (float32): target ``t``'s scale factors
    are ``scales[starts[t]:starts[t] + counts[t]]`` (float32, in row order). The same bits: each
    target's sum runs in its own order, one step for all targets at a time (double sum, rounded
    to float at every row), and every logarithm is libm's double ``log`` (``math.log``; numpy's
    own ``log`` may differ from it in the last bit). A Backward pass's ``totscale`` is the same
    sum of its recorded factors (:func:`backward_score_from_scales`: ``f32(log(s_L))`` first is
    ``f32(0 + log(s_L))``)."""
    starts, counts = np.asarray(starts, np.int64), np.asarray(counts, np.int64)
    tot = np.zeros(counts.size, np.float32)
    if counts.size and counts.max() > 0:
        values = np.asarray(scales, np.float32)
        order = np.argsort(-counts, kind="stable")  # the targets with more than k factors come first
        alive = np.cumsum(np.bincount(counts, minlength=int(counts.max()) + 1)[::-1])[::-1]
        for k in range(int(counts.max())):
            who = order[:alive[k + 1]]  # the targets with more than k factors
            tot[who] = (tot[who].astype(np.float64) + _logs(values[starts[who] + k])).astype(np.float32)
    return tot


def forward_scores(scales, starts, counts, last) -> np.ndarray:
    """:func:`forward_score` of many targets at once (float32 nats): :func:`forward_totscales`,
    then ``f32(totscale + log(last))``, ``last`` each target's ``f32(xC pmove)``."""
    return plus_logs(forward_totscales(scales, starts, counts), last)


def plus_logs(tot, values) -> np.ndarray:
    """``f32(tot + log(values))`` elementwise (float32 ``tot`` and ``values``; the sum in double,
    libm's double ``log``), as the parsers end their scores."""
    return (np.asarray(tot, np.float32).astype(np.float64) + _logs(values)).astype(np.float32)


def _logs(values) -> np.ndarray:
    """libm's double ``log`` of each float32 value (``math.log``), as float64."""
    return np.array(list(map(math.log, np.asarray(values, np.float32).tolist())), np.float64)


def backward_score(rows) -> tuple:
    """(totscale, score), float32 nats, of the Backward parser from its special-state rows
    ``rows`` float32 [L+1, 6] (:func:`backward_score_from_scales` on their SCALE column and
    row 0's N)."""
    scale = np.asarray(rows, np.float32)[:, XSCALE]
    inner = scale[-2:0:-1]
    return backward_score_from_scales(np.concatenate([scale[-1:], inner[inner > 1]]), rows[0][XN])


def backward_score_from_scales(scales, xn) -> tuple:
    """(totscale, score), float32 nats, of a Backward pass from ``scales`` (row L's scale factor,
    then those of the rescaled rows L-1..1 that exceed 1, in that order, as the full-matrix
    kernel records them) and row 0's N ``xn``, formed as ``backward_engine`` forms them:
    ``totscale`` set to ``f32(log(s_L))`` at row L, then ``f32(totscale + log(s_i))``, and the
    score ``f32(totscale + log(xn))``, with libm's double ``log``. The score is NaN where ``xn``
    is NaN, 0 or infinite (libhmmer: eslERANGE)."""
    scales = np.asarray(scales, np.float32)
    tot = np.float32(math.log(float(scales[0])))
    for s in scales[1:].tolist():
        tot = np.float32(float(tot) + math.log(s))
    xn = float(xn)
    if not (math.isfinite(xn) and xn != 0):
        return tot, np.float32(math.nan)
    return tot, np.float32(float(tot) + math.log(xn))


__all__ = ["ForwardTables", "forward_totscale", "forward_totscales", "forward_score", "forward_scores", "plus_logs",
           "backward_score", "backward_score_from_scales",
           "length_specials", "nqf", "STATUS_OK", "STATUS_RANGE", "STATUS_UNSURE", "RANGE", "SUBNORMAL", "TINY_ROWS",
           "FTZ_ONLY", "ANY_TINY", "HOST", "FLT_MIN", "FTZ_EDGE", "ABSORB", "RESCALE_AT", "DD_EARLY_EXIT_M", "OWN_SCALES_AT"]
