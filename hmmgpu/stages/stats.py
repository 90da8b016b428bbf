"""Score statistics of the filter cascade: bit scores, P-values and exact thresholds.

``p7_Pipeline`` turns each filter score (nats) into bits against the target's null score,
``s = (float)((sc - null) / eslCONST_LOG2)`` (a float subtraction, a double division, stored
in a float), and into a P-value with Easel's Gumbel survival function (MSV, Viterbi filter)
or exponential tail (Forward), in double. A target passes a filter when ``P <= F``.

The GPU never evaluates ``exp`` or ``log`` for these decisions. Instead:

* MSV's F1 test depends only on the integer ``xJ`` and the length ``L`` (the null score is a
  function of L), and the P-value falls as ``xJ`` rises, so it is exactly "``xJ >= thr[L]``"
  for a per-length integer threshold (:func:`msv_thresholds`, found by bisection with the
  very float/double steps of the pipeline).
* The bias-corrected MSV test, the Viterbi filter test and the Forward filter test (F3,
  :func:`passes_exponential`) compare a float bit score ``s`` computed with IEEE
  float/double operations (exact) against a threshold on ``s``: the P-value is a
  decreasing function of ``s``, so the test is ``s >= s*``.
  :func:`score_threshold` returns a band ``[lo, hi)`` of float values around ``s*``: below
  ``lo`` every score fails, at or above ``hi`` every score passes, and a score inside the
  band (a few dozen float steps wide) is decided on the host with the pipeline's own double
  arithmetic. The band makes the test exact even though Easel's P-value is computed with
  ``exp`` in double and is monotone only up to rounding: over 64 float steps the P-value
  changes by far more than any double rounding error.
"""
from __future__ import annotations

import functools
import math
import struct

import numpy as np

from hmmgpu.constants import LOG2

F32 = np.float32


def gumbel_surv(x: float, mu: float, lam: float) -> float:
    """Easel's ``esl_gumbel_surv``: P(S > x) for a Gumbel with location mu and scale lambda."""
    y = lam * (x - mu)
    ey = -_cexp(-y)
    if abs(ey) < 5e-9:
        return -ey
    return 1.0 - _cexp(ey)


def exp_surv(x: float, tau: float, lam: float) -> float:
    """Easel's ``esl_exp_surv``: P(S > x) for an exponential tail with location tau and scale
    lambda, in double: 1 below tau, else ``exp(-lambda (x - tau))`` (glibc's ``exp``, which is
    Python's ``math.exp``)."""
    if x < tau:
        return 1.0
    return _cexp(-lam * (x - tau))


def _cexp(v: float) -> float:
    """C's ``exp``: +inf on overflow instead of Python's OverflowError."""
    try:
        return math.exp(v)
    except OverflowError:
        return math.inf


def bits(score: float, null: float) -> float:
    """``(float)((score - null) / eslCONST_LOG2)``: float subtraction, double division."""
    return float(F32(float(F32(F32(score) - F32(null))) / LOG2))


def bits_array(scores, null) -> np.ndarray:
    """:func:`bits` of arrays: float32 subtraction, double division, rounded to float32."""
    with np.errstate(invalid="ignore"):
        diff = np.asarray(scores, F32) - np.asarray(null, F32)
    return (diff.astype(np.float64) / LOG2).astype(F32)


def passes_gumbel(scores, null, mu: float, lam: float, F: float) -> np.ndarray:
    """``gumbel_surv(bits(score - null), mu, lam) <= F`` for arrays (nats in), exactly as
    ``p7_Pipeline`` decides it: certain outside the band of :func:`score_threshold`, and
    computed with the pipeline's double arithmetic inside it."""
    s = bits_array(scores, null)
    lo, hi = score_threshold(mu, lam, F)
    out = s >= hi
    for j in np.flatnonzero((s >= lo) & (s < hi)):
        out[j] = gumbel_surv(float(s[j]), mu, lam) <= F
    return out


def passes_exponential(scores, null, tau: float, lam: float, F: float) -> np.ndarray:
    """``exp_surv(bits(score - null), tau, lam) <= F`` for arrays (nats in): ``p7_Pipeline``'s
    Forward filter, ``seq_score = (fwdsc - filtersc) / eslCONST_LOG2`` (a float) and
    ``P = esl_exp_surv(seq_score, FTAU, FLAMBDA)`` (a double), passing when ``P <= F3``.
    Certain outside the band of :func:`score_threshold`, computed with the pipeline's double
    arithmetic inside it; a NaN score fails."""
    s = bits_array(scores, null)
    lo, hi = score_threshold(tau, lam, F, "exponential")
    out = s >= hi
    for j in np.flatnonzero((s >= lo) & (s < hi)):
        out[j] = exp_surv(float(s[j]), tau, lam) <= F
    return out


def msv_thresholds(profile, max_length: int, F1: float, lengths=None) -> np.ndarray:
    """Smallest integer ``xJ`` that passes F1, for every length 0..max_length (256: none),
    or only at ``lengths`` (the others then hold 256).

    Exactly HMMER's test ``gumbel_surv(bits(msv_score(xJ, L) - null(L))) <= F1``: the score
    rises with ``xJ``, so a bisection per length (all lengths at once) finds the threshold.
    """
    from hmmgpu.stages.profiles import null_table, tjb_table

    mu, lam = profile.evalue_parameters[0], profile.evalue_parameters[1]
    max_length = max(int(max_length), 1)
    at = np.arange(1, max_length + 1) if lengths is None else np.asarray(lengths, np.int64)
    at = at[at > 0]
    tjb = tjb_table(max_length)[at].astype(np.int64)
    null = null_table(max_length)[at]
    score_of = _msv_score_by_difference()
    lo = np.zeros(at.size, np.int64)
    hi = np.full(at.size, 256, np.int64)
    while True:
        open_ = lo < hi
        if not open_.any():
            break
        mid = (lo + hi) // 2
        ok = passes_gumbel(score_of[np.minimum(mid, 255) - tjb + 255], null, mu, lam, F1) & (mid < 256)
        hi = np.where(open_ & ok, mid, hi)
        lo = np.where(open_ & ~ok, mid + 1, lo)
    out = np.full(max_length + 1, 256, np.int32)
    out[at] = lo
    return out


@functools.lru_cache(maxsize=None)
def _msv_score_by_difference() -> np.ndarray:
    """:func:`~hmmgpu.stages.profiles.msv_score` of every ``xJ - tjb`` from -255 to 255 (index + 255):
    the score depends on the two integers through their difference only."""
    from hmmgpu.stages.profiles import msv_score

    d = np.arange(-255, 256)
    table = msv_score(d, np.zeros_like(d))
    table.setflags(write=False)
    return table


#: Half-width, in float steps, of the band decided on the host (see the module header).
BAND_STEPS = 32


@functools.lru_cache(maxsize=4096)
def score_threshold(mu: float, lam: float, F: float, tail: str = "gumbel") -> tuple:
    """``(lo, hi)`` float32 bit scores: ``s < lo`` fails ``P <= F``, ``s >= hi`` passes it, and a
    score in ``[lo, hi)`` must be decided on the host (:func:`passes`). ``tail``: the P-value's
    distribution, ``gumbel`` (MSV, Viterbi filter: :func:`gumbel_surv`) or ``exponential``
    (Forward: :func:`exp_surv`, with ``mu`` its tau).

    ``lo = -inf`` when every finite score may pass, ``hi = +inf`` when none surely does.
    """
    surv = {"gumbel": gumbel_surv, "exponential": exp_surv}[tail]

    def ok(s: float) -> bool:
        return surv(s, mu, lam) <= F

    # bracket the crossing on float32 bit patterns, then bisect (Python floats hold float32
    # values exactly; struct converts between a float32 and its bit pattern)
    a, b = _ordinal(-3.0e38), _ordinal(3.0e38)
    if ok(_from_ordinal(a)):
        return -np.inf, -np.inf  # everything passes
    if not ok(_from_ordinal(b)):
        return np.inf, np.inf  # nothing finite passes (only +inf scores)
    while b - a > 1:
        mid = (a + b) // 2
        if ok(_from_ordinal(mid)):
            b = mid
        else:
            a = mid
    return _from_ordinal(b - BAND_STEPS), _from_ordinal(b + BAND_STEPS)


def passes(score: float, null: float, mu: float, lam: float, F: float) -> bool:
    """The pipeline's own test ``gumbel_surv(bits(score - null)) <= F``, in double."""
    if score == np.inf:
        return True
    return gumbel_surv(bits(score, null), mu, lam) <= F


_FLOAT32 = struct.Struct("<f")
_INT32 = struct.Struct("<i")


def _ordinal(x) -> int:
    """A float32's position on the number line as an integer (monotone in x)."""
    i = _INT32.unpack(_FLOAT32.pack(x))[0]
    return i if i >= 0 else -(i & 0x7FFFFFFF)


def _from_ordinal(n: int) -> float:
    """The float32 at position ``n`` (:func:`_ordinal`'s inverse), as a Python float."""
    return _FLOAT32.unpack(_INT32.pack(n if n >= 0 else (-n) | -0x80000000))[0]


__all__ = ["gumbel_surv", "exp_surv", "bits", "bits_array", "passes_gumbel", "passes_exponential", "msv_thresholds",
           "score_threshold", "passes", "BAND_STEPS"]
