"""HMMER's filter cascade (``p7_Pipeline`` up to the Forward filter) and its stage results.

For one model and every target, in order (docs/algorithms.md §9.3):

1. MSV (SSV first): pass when ``P(msv) <= F1``; ``n_past_msv`` counts them.
2. Bias filter: the MSV score is re-scored against the target's composition-corrected
   null score ``filtersc`` and must pass F1 again (without the bias filter, ``filtersc`` is
   the null score); ``n_past_bias``.
3. Viterbi filter, *skipped* when the bias-corrected MSV P-value is already <= F2, else
   pass when ``P(vit) <= F2``; ``n_past_vit``.
4. Forward filter (the *gate*, where the backend offers the Forward parser: the GPU, and
   the numba backend's CPU reference): ``p7_ForwardParser``'s score against ``filtersc``,
   pass when ``P(fwd) <= F3`` (:func:`forward_gate`). A target that fails is removed here:
   pyhmmer never runs Forward (nor anything after it) on it. A target whose score the
   backend cannot promise bit for bit (a range error, a flagged target) is left undecided
   and sent on, as are the passers. ``n_past_fwd`` stays pyhmmer's count: it recomputes
   Forward on what it receives and counts exactly the passers.

The survivors then go to pyhmmer's Forward/Backward/domain stage (:mod:`hmmgpu.cpu.pyhmmer_stage`)
with the ``filtersc`` it recomputes itself. Each stage returns a small result object that
turns its own integer scores into nats (:class:`MsvResult`, :class:`ViterbiResult`,
:class:`ForwardResult`), so the cascade, the audit and the tests never decode a backend's
integers themselves.
:func:`run_cascade` is the host version over any :class:`~hmmgpu.stages.protocol.FilterBackend`;
the CUDA backend runs the same cascade on the GPU (:mod:`hmmgpu.gpu.cascade`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from hmmgpu.stages import stats
from hmmgpu.constants import STATUS_NORESULT, STATUS_OK, STATUS_RANGE
from hmmgpu.stages.profiles import msv_score, null_table, tjb_table, viterbi_score, xw_move_table

F32 = np.float32


@dataclass(frozen=True)
class MsvResult:
    """MSV (SSV first) of some targets: database indices, Easel status, integer ``xJ``."""

    indices: np.ndarray  #: int64 database indices, sorted
    status: np.ndarray  #: int8: STATUS_OK, STATUS_RANGE (+inf) or STATUS_NORESULT (SSV alone)
    xj: np.ndarray  #: int32 J-state value (OK only)

    def scores(self, lengths: np.ndarray) -> np.ndarray:
        """Scores in nats (float32): +inf for RANGE, NaN for NORESULT, as pyhmmer reports them."""
        L = np.asarray(lengths)[self.indices]
        sc = msv_score(self.xj, tjb_table(max(int(L.max(initial=1)), 1))[L]) if self.indices.size else \
            np.zeros(0, F32)
        sc = np.asarray(sc, F32).copy()
        sc[self.status == STATUS_RANGE] = np.inf
        sc[self.status == STATUS_NORESULT] = np.nan
        return sc


@dataclass(frozen=True)
class ViterbiResult:
    """Viterbi filter of some targets: Easel status and the integer C-state value."""

    indices: np.ndarray
    status: np.ndarray  #: int8: STATUS_OK or STATUS_RANGE (+inf)
    xc: np.ndarray  #: int32 C value (-32768: no path, -inf)

    def scores(self, lengths: np.ndarray) -> np.ndarray:
        """Scores in nats (float32): +inf for RANGE, -inf without a path."""
        L = np.asarray(lengths)[self.indices]
        sc = viterbi_score(self.xc, xw_move_table(max(int(L.max(initial=1)), 1))[L]) if self.indices.size else \
            np.zeros(0, F32)
        sc = np.asarray(sc, F32).copy()
        sc[self.status == STATUS_RANGE] = np.inf
        return sc


@dataclass(frozen=True)
class ForwardResult:
    """The Forward parser (``p7_ForwardParser``) of some targets, or the Backward parser after it
    (``p7_BackwardParser``: a backend's ``backward``): status and score in nats."""

    indices: np.ndarray  #: int64 database indices
    status: np.ndarray  #: int32: STATUS_OK, STATUS_RANGE (libhmmer's eslERANGE) or STATUS_UNSURE
    scores: np.ndarray  #: float32 nats, libhmmer's bit for bit where the status is OK (else NaN)
    recomputed: int = 0  #: targets whose score libhmmer computed (the backend's fallback)


@dataclass
class ForwardGate:
    """What hmmgpu's Forward filter decided on one model's Viterbi-filter survivors."""

    passed: int = 0  #: P <= F3: sent on (pyhmmer computes their Forward again)
    failed: int = 0  #: P > F3: removed; pyhmmer never sees them
    #: database indices of the targets left undecided (sent on): range errors, flagged targets
    unsure: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    seconds: float = 0.0  #: host time of the gate (the kernel's time is the backend's)

    def outside(self, covered: np.ndarray, past_vit: np.ndarray, survivors: np.ndarray) -> "ForwardGate":
        """The gate's counts without the targets of the mask ``covered``: ``past_vit`` and
        ``survivors`` are the Viterbi filter's survivors and the gate's, without them."""
        unsure = self.unsure[~covered[self.unsure]]
        return ForwardGate(passed=int(survivors.size - unsure.size), failed=int(past_vit.size - survivors.size),
                           unsure=unsure, seconds=self.seconds)


@dataclass
class StageCounts:
    """A query's pipeline statistics, as hmmsearch prints them, and where the time went."""

    query: str = ""
    M: int = 0
    nseqs: int = 0
    nres: int = 0
    n_past_msv: int = 0
    n_past_bias: int = 0
    n_past_vit: int = 0
    n_past_fwd: int = 0
    n_reported: int = 0
    n_included: int = 0
    seconds: dict = field(default_factory=dict)  #: busy time of each stage


@dataclass
class CascadeResult:
    """What passed the filters of one model: the sorted database indices that go on to the
    post-filter stage (``survivors``: the Viterbi filter's, less those the Forward gate
    failed) and the counts, and which targets passed MSV, the bias filter and the Viterbi
    filter (database indices; ``past_vit`` sorted, the others in any order: a scan counts
    them per sequence)."""

    survivors: np.ndarray
    n_past_msv: int
    n_past_bias: int
    n_past_vit: int
    seconds: dict = field(default_factory=dict)
    past_msv: np.ndarray = None
    past_bias: np.ndarray = None
    past_vit: np.ndarray = None
    forward: ForwardGate | None = None  #: the Forward gate's decisions (None: it did not run)
    #: the F3 passers' Forward scores and domain decodings, where the backend made them for hmmgpu's
    #: own post-filter (:class:`~hmmgpu.stages.decoded.DecodedTargets`; None: it did not)
    decoded: object = None
    #: the F3 passers whose domains the backend defined for hmmgpu's own post-filter, no longer
    #: among ``decoded`` (:class:`~hmmgpu.stages.defined.DefinedTargets`; None: it defined none)
    defined: object = None


def forward_gate(profile, options, fwd: ForwardResult, filtersc) -> tuple:
    """The Forward filter on the Viterbi filter's survivors ``fwd.indices`` (sorted) with their
    ``filtersc`` (the bias filter's score, or the null score without it), exactly as
    ``p7_Pipeline`` decides it (:func:`~hmmgpu.stages.stats.passes_exponential`): (the targets
    sent on, a :class:`ForwardGate`). Targets without a certain score are sent on undecided,
    and so is every target of a model without Forward statistics."""
    clock = time.perf_counter()
    idx = np.asarray(fwd.indices, np.int64)
    tau, lam = profile.evalue_parameters[4:6]
    decided = np.asarray(fwd.status) == STATUS_OK
    if not (np.isfinite(tau) and np.isfinite(lam)):
        decided[:] = False
    keep = ~decided
    if decided.any():
        keep[decided] = stats.passes_exponential(np.asarray(fwd.scores, F32)[decided],
                                                 np.asarray(filtersc, F32)[decided], tau, lam, options.F3)
    unsure = idx[~decided]
    gate = ForwardGate(passed=int(keep.sum()) - int(unsure.size), failed=int((~keep).sum()), unsure=unsure,
                       seconds=time.perf_counter() - clock)
    return idx[keep], gate


def run_cascade(backend, profile, options, db) -> CascadeResult:
    """The filter cascade of ``profile`` over every target of ``db`` on ``backend``'s stages,
    with the Forward gate where ``backend.forward`` offers it (not None)."""
    mu, lam, vmu, vlam = profile.evalue_parameters[:4]
    max_len = max(int(db.max_length), 1)
    lengths = db.lengths
    seconds = {}
    clock = time.perf_counter()
    msv = backend.msv(profile, stats.msv_thresholds(profile, max_len, options.F1))
    usc = msv.scores(lengths)
    null = null_table(max_len)[lengths[msv.indices]]
    n_past_msv = int(msv.indices.size)
    past_msv = msv.indices
    seconds["msv"] = time.perf_counter() - clock

    clock = time.perf_counter()
    idx = msv.indices
    if options.bias_filter and idx.size:
        filtersc = backend.bias(profile, idx)
        keep = stats.passes_gumbel(usc, filtersc, mu, lam, options.F1)
        idx, usc, filtersc = idx[keep], usc[keep], filtersc[keep]
    else:
        filtersc = null
    n_past_bias = int(idx.size)
    past_bias = idx
    seconds["bias"] = time.perf_counter() - clock

    clock = time.perf_counter()
    # where the bias-corrected MSV P-value is already <= F2, the Viterbi filter is skipped
    need = ~stats.passes_gumbel(usc, filtersc, mu, lam, options.F2)
    if need.any():
        vit = backend.viterbi(profile, idx[need])
        passed = ~need
        passed[need] = stats.passes_gumbel(vit.scores(lengths), filtersc[need], vmu, vlam, options.F2)
        idx, filtersc = idx[passed], filtersc[passed]
    seconds["viterbi"] = time.perf_counter() - clock

    past_vit = survivors = idx
    gate = None
    if idx.size:
        clock = time.perf_counter()
        forward = getattr(backend, "forward", None)
        fwd = forward(profile, idx) if forward is not None else None
        if fwd is not None:
            survivors, gate = forward_gate(profile, options, fwd, filtersc)
            seconds["forward"] = time.perf_counter() - clock
    return CascadeResult(survivors=survivors, n_past_msv=n_past_msv, n_past_bias=n_past_bias,
                         n_past_vit=int(past_vit.size), seconds=seconds, past_msv=past_msv, past_bias=past_bias,
                         past_vit=past_vit, forward=gate)
