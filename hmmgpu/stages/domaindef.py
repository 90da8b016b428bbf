"""HMMER 3.4's domain definition (``p7_domaindef_ByPosteriorHeuristics``), written once,
on no device: the algorithm that calls an implementation's stage functions.

What it computes
----------------
After the Forward and Backward parsers, ``p7_Pipeline`` asks domain definition where the
target's domains are and how much of its score is owed to biased composition
(hmmer-domaindef-spec.md §0-§3). This module does what ``p7_domaindef.c`` does itself:

1. :func:`domain_decoding` (``p7_DomainDecoding``): from the parsers' special-state rows,
   the posterior probability ``mocc[i]`` that residue i is in a domain and the cumulative
   expected numbers of domain starts ``btot`` and ends ``etot``;
2. :func:`region_scan`: regions where ``mocc`` rises above 0.25, opened where a domain
   probably starts and closed where one probably ends (thresholds ``rt1``, ``rt2``), in
   increasing end; a region still open at the end of the target is dropped;
3. per region, :func:`is_multidomain_region` (``rt3``): if an end followed by a start is
   expected at least 0.2 times inside it, the region is *clustered*: its multihit Forward
   matrix is sampled and the samples clustered into envelopes (the stage functions
   :meth:`DomainStages.region_forward` and :meth:`DomainStages.region_ensemble`), which also
   give the region's null2 scores ``n2sc``; otherwise the region is one envelope;
4. per envelope, :meth:`DomainStages.rescore_envelope` (``rescore_isolated_domain``: unihit
   Forward and Backward, posterior decoding, optimal accuracy alignment, and, for an
   unclustered envelope, null2 by expectation); the domain's ``domcorrection`` is the float
   sum of ``n2sc`` over the envelope; a domain whose decoding overflows is dropped (it still
   counts as an envelope).

The result is a :class:`DomainDefinition`: the ``dcl`` entries (:class:`Domain`) in HMMER's
order (regions by increasing end; within a clustered region, its envelopes by start), the
counters ``p7_Pipeline`` copies into the hit, the null2 scores (and their Kahan sum, which
``p7_Pipeline`` uses, taken by Easel's own ``esl_vec_FSum``), and the exactness flags the
stages raised. :func:`define_domains` starts from the parsers' rows; a device that decodes
them itself hands (status, mocc, btot, etot) to :func:`define_domains_decoded`.

Many targets at once
--------------------
A device wants many regions and envelopes in one launch, and one target has a few. So the
driver is written for a batch of targets of one model (:func:`define_domains_batched`; a
post-filter task is one model's passers, and a model's tables are per model), in phases
that each go through all the targets before the next begins:

A. every target's region scan (after its decoding);
B. every clustered region of every target sampled in one call,
   :meth:`DomainStages.region_ensembles` (its Forward matrix, traces, null2 and clusters);
   the regions' null2 scores go into their targets' ``n2sc``;
C. every envelope of every target (a clustered region's envelopes, its null2 done; an
   unclustered region) rescored in one call, :meth:`DomainStages.rescore_envelopes`;
D. each target's definition assembled from those answers, as the one-target loop of
   ``p7_domaindef_ByPosteriorHeuristics`` records them.

The order changes nothing: regions do not overlap, a clustered envelope lies in its region
and reads only that region's null2 scores, which phase B wrote, and an unclustered
envelope's scores are its own; the counters and the domain order are HMMER's because phase
D walks each target's regions and envelopes in HMMER's order. One target is the batch of
one (:func:`define_domains_decoded`): the algorithm is written once. The stages' batch
methods run their one-item methods one after another unless a device overrides them.

A device gains more from many models at once: one model has a few dozen passers, and a GPU
launch over them waits for the longest. :func:`define_domains_grouped` runs the same phases
over several models' targets (a stages object per model), each phase one call of the
stages' class over all of them (:meth:`DomainStages.region_ensembles_of`,
:meth:`DomainStages.rescore_envelopes_of`); by default those call each model's batch method
in turn, and the GPU stages run every model's items in the same launches. The answers are
each target's alone, as above: nothing a target computes reads another target's work.

Why the code looks as it does
-----------------------------
The answer must equal libhmmer's bit for bit. The float steps done here are few and are
HMMER's: the decoding's products ``((f.B b.B) f.SCALE) sp``, left to right in float32, its
running sums and the scale product sequential in float32, ``mocc = (float) (1.0 - (double)
njcp)``; the scans' differences in float32 and compares as C's ``<``/``>`` macros compare;
``domcorrection`` summed in order in float32. They are written as HMMER's loops, in numba
(without fastmath every float32 operation is rounded on its own, none fused), because this
driver runs for every F3 passer in the post-filter's worker threads: a target's decoding and
its whole region scan (with each region's multidomain test) are one call each, compiled,
that releases the interpreter lock, instead of some thirty small numpy calls and a Python
loop over the residues that hold it; the driver's phase A scans all of a batch's targets in
one such call (:func:`scan_targets`), whose per-call cost (about 30 us of the lock) is
otherwise paid per target. Everything else, the matrices, the sampling and the logarithms,
belongs to the stages, so that a GPU implementation can replace them one by one and the CPU
references (:mod:`hmmgpu.cpu.domaindef`) remain the definition they are checked against.
The stages receive the target's digital ``codes`` (no sentinels) and use its full length
``L`` for every length model, as HMMER does (never the region's or the envelope's).
"""
from __future__ import annotations

import ctypes
import functools
import math
import os
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from numba import njit

from hmmgpu.constants import STATUS_OK, STATUS_RANGE
from hmmgpu.stages.forward import XB, XC, XE, XJ, XN, XSCALE, length_specials

__all__ = ["RT1", "RT2", "RT3", "Domain", "DomainDefinition", "DomainStages", "Envelope", "EnvelopeSpan",
           "RegionEnsemble", "RegionSpan", "define_domains", "define_domains_batched", "define_domains_decoded",
           "define_domains_grouped",
           "domain_decoding", "fsum", "is_multidomain_region", "region_scan", "scan_regions", "scan_targets"]

F32 = np.float32

#: ``p7_domaindef_Create``'s region thresholds.
RT1, RT2, RT3 = F32(0.25), F32(0.10), F32(0.20)
_F0 = F32(0.0)


@dataclass
class Domain:
    """One ``dcl`` entry (``P7_DOMAIN``): the envelope ``ienv..jenv`` and the alignment
    ``iali..jali`` (1-based target coordinates), ``envsc`` (the envelope's unihit Forward
    score, nats), ``domcorrection`` (its null2 correction, nats), ``oasc`` (the expected
    number of correctly aligned residues) and the optimal accuracy ``trace`` (a
    :class:`hmmgpu.cpu.optacc.Trace` in target coordinates, with its posterior probabilities)."""

    ienv: int
    jenv: int
    iali: int
    jali: int
    envsc: np.float32
    domcorrection: np.float32
    oasc: np.float32
    trace: object


@dataclass
class DomainDefinition:
    """A target's domain definition: ``status`` (OK, or RANGE when ``p7_DomainDecoding``
    overflowed, for which ``p7_Pipeline`` fails), the ``domains`` in ``dcl`` order, the counters
    ``nregions``, ``nclustered``, ``noverlaps``, ``nenvelopes``, ``nexpected`` (float32), the
    per-residue null2 scores ``n2sc`` float32 [L+1] (0 outside the envelopes), and ``flags``:
    the exactness flags of every matrix the stages computed, or-ed (:mod:`hmmgpu.stages.forward`;
    a HOST flag: hmmsearch's flush-to-zero arithmetic could differ from this IEEE result)."""

    status: int
    domains: list
    nregions: int
    nclustered: int
    noverlaps: int
    nenvelopes: int
    nexpected: np.float32
    n2sc: np.ndarray
    flags: int = 0

    @property
    def ndom(self) -> int:
        return len(self.domains)

    @property
    def n2sc_sum(self) -> np.float32:
        """``esl_vec_FSum(n2sc, L+1)``, the sequence's null2 total ``p7_Pipeline`` uses."""
        return fsum(self.n2sc)


@dataclass
class RegionEnsemble:
    """What the sampling of a clustered region ``i..j`` gives: ``n2sc`` float32 [j-i+1] (the
    null2 scores of residues i..j), ``envelopes`` int [n][2] (start, end of each envelope,
    in order, after the domination filter) and the exactness ``flags`` of the region's matrix."""

    n2sc: np.ndarray
    envelopes: np.ndarray
    flags: int = 0


@dataclass
class Envelope:
    """What rescoring an envelope gives: the exactness ``flags`` of its matrices and whether it
    was ``dropped`` (``p7_Decoding`` overflowed: no domain); unless dropped, ``envsc``, ``oasc``
    (float32), ``iali``, ``jali``, the OA ``trace`` (target coordinates), and when the null2
    scores were not known yet ``n2sc`` float32 [j-i+1] (``logf`` of ``p7_Null2_ByExpectation``'s
    odds of each residue)."""

    flags: int = 0
    dropped: bool = False
    envsc: np.float32 | None = None
    oasc: np.float32 | None = None
    iali: int | None = None
    jali: int | None = None
    trace: object = None
    n2sc: np.ndarray | None = None


class RegionSpan(NamedTuple):
    """A clustered region ``i..j`` (1-based) of a target (its digital ``codes``): an item of
    :meth:`DomainStages.region_ensembles`."""

    codes: np.ndarray
    i: int
    j: int


class EnvelopeSpan(NamedTuple):
    """An envelope ``i..j`` of a target, an item of :meth:`DomainStages.rescore_envelopes`:
    ``null2_is_done`` (a clustered region's envelope) and the target's ``n2sc`` float32 [L+1]
    as :meth:`DomainStages.rescore_envelope` takes them."""

    codes: np.ndarray
    i: int
    j: int
    null2_is_done: bool
    n2sc: np.ndarray


class DomainStages(ABC):
    """The device-dependent steps of domain definition, for one model (HMMER's vector calls in
    ``p7_domaindef.c``). ``codes``: the target's digital residues; ``i..j``: 1-based.

    The driver calls the batch methods, :meth:`region_ensembles` and :meth:`rescore_envelopes`,
    once each for all the targets it is given; by default they run the one-item methods item
    after item, and a device overrides them to run a batch at once. A device whose stages set
    :attr:`overlaps_phases` has the unclustered regions' envelopes rescored in a call of their
    own (``aside``), in a thread of the driver, while the clustered regions are sampled, then the
    clustered regions' envelopes: no envelope of an unclustered region waits for an ensemble."""

    #: Whether the driver rescores the unclustered regions' envelopes while it samples the
    #: clustered regions (:func:`define_domains_grouped`).
    overlaps_phases = False

    @abstractmethod
    def region_forward(self, codes, i: int, j: int):
        """``p7_Forward`` (full matrix, multihit, length model of the whole target) on the
        residues ``i..j``; the result is only passed back to :meth:`region_ensemble`."""

    @abstractmethod
    def region_ensemble(self, matrix, codes, i: int, j: int) -> RegionEnsemble:
        """``region_trace_ensemble``: 200 stochastic traces of ``matrix`` (the random
        generator reseeded), their null2 scores and their clusters (§2.3-§2.8)."""

    @abstractmethod
    def rescore_envelope(self, codes, i: int, j: int, null2_is_done: bool, n2sc) -> Envelope:
        """``rescore_isolated_domain`` on the envelope ``i..j`` (unihit). ``n2sc`` float32 [L+1]:
        the target's null2 scores so far (read only; those of ``i..j`` set when
        ``null2_is_done``); the envelope's ``n2sc`` is returned only if not ``null2_is_done``."""

    def region_ensembles(self, regions) -> list:
        """:meth:`region_ensemble` of :meth:`region_forward` on every :class:`RegionSpan` (of any
        targets of this model), a :class:`RegionEnsemble` each, in order."""
        return [self.region_ensemble(self.region_forward(*region), *region) for region in regions]

    def rescore_envelopes(self, envelopes) -> list:
        """:meth:`rescore_envelope` on every :class:`EnvelopeSpan` (of any targets of this
        model; their ``n2sc`` read only), an :class:`Envelope` each, in order."""
        return [self.rescore_envelope(*envelope) for envelope in envelopes]

    @classmethod
    def region_ensembles_of(cls, work) -> list:
        """:meth:`region_ensembles` of several models at once: ``work`` (stages, regions) pairs,
        stages of this class, one model each; a list of :class:`RegionEnsemble` per pair, in
        order. Each model's own batch method in turn unless a device overrides it."""
        return [stages.region_ensembles(regions) for stages, regions in work]

    @classmethod
    def rescore_envelopes_of(cls, work, aside: bool = False) -> list:
        """:meth:`rescore_envelopes` of several models at once: ``work`` (stages, envelopes)
        pairs, as :meth:`region_ensembles_of` takes them; ``aside``: the call the driver makes
        beside the ensembles (:attr:`overlaps_phases`)."""
        return [stages.rescore_envelopes(envelopes) for stages, envelopes in work]


@functools.lru_cache(maxsize=None)
def _easel_fsum():
    """Easel's own ``esl_vec_FSum``, from the libeasel inside the pyhmmer wheel."""
    import pyhmmer

    easel = ctypes.CDLL(os.path.join(os.path.dirname(pyhmmer.__file__), os.pardir, "pyhmmer.libs",
                                     "liblibeasel.so"))
    fn = easel.esl_vec_FSum
    fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_void_p, ctypes.c_int64]
    return fn


def fsum(values) -> np.float32:
    """Easel's ``esl_vec_FSum`` (a Kahan-compensated float32 sum, in order), by Easel itself."""
    values = np.ascontiguousarray(values, dtype=F32)
    return F32(_easel_fsum()(values.ctypes.data, values.size))


def domain_decoding(fwd_rows, bck_rows, has_own_scales: bool, ploop) -> tuple:
    """``p7_DomainDecoding`` on the parsers' special-state rows (float32 [L+1][6], E N J B C
    SCALE), Backward's ``has_own_scales`` and the multihit N/J/C loop ``ploop`` of length L:
    (status, mocc, btot, etot float32 [L+1]); status RANGE when the scale product overflows."""
    fx = np.ascontiguousarray(fwd_rows, F32)
    bx = np.ascontiguousarray(bck_rows, F32)
    L = fx.shape[0] - 1
    mocc, btot, etot = np.empty(L + 1, F32), np.empty(L + 1, F32), np.empty(L + 1, F32)
    overflow = _decode(fx, bx, bool(has_own_scales), F32(ploop), mocc, btot, etot)
    return (STATUS_RANGE if overflow else STATUS_OK), mocc, btot, etot


@njit(cache=True, nogil=True, error_model="numpy")
def _decode(fx, bx, has_own_scales, ploop, mocc, btot, etot):
    """:func:`domain_decoding` into ``mocc``, ``btot``, ``etot``; True where ``sp`` ended infinite."""
    L = fx.shape[0] - 1
    sp = np.float32(1.0 / np.float64(bx[0, XN]))  # before row i: sp0 (fs[0]/bs[0]) ... (fs[i-2]/bs[i-2])
    mocc[0] = _F0
    btot[0] = _F0
    etot[0] = _F0
    for i in range(1, L + 1):
        before = sp
        if has_own_scales:
            sp = sp * (fx[i - 1, XSCALE] / bx[i - 1, XSCALE])
        btot[i] = btot[i - 1] + ((fx[i - 1, XB] * bx[i - 1, XB]) * fx[i - 1, XSCALE]) * before
        etot[i] = etot[i - 1] + ((fx[i, XE] * bx[i, XE]) * fx[i, XSCALE]) * sp
        njcp = ((fx[i - 1, XN] * bx[i, XN]) * ploop) * sp
        njcp = njcp + ((fx[i - 1, XJ] * bx[i, XJ]) * ploop) * sp
        njcp = njcp + ((fx[i - 1, XC] * bx[i, XC]) * ploop) * sp
        mocc[i] = np.float32(1.0 - np.float64(njcp))
    return math.isinf(sp)


def region_scan(mocc, btot, etot) -> list:
    """The regions ``(i, j)`` of ``p7_domaindef_ByPosteriorHeuristics``'s scan, in order."""
    regions, _ = scan_regions(mocc, btot, etot)
    return [(int(i), int(j)) for i, j in regions]


def scan_regions(mocc, btot, etot) -> tuple:
    """The regions of the scan, int64 [n][2] (i, j, 1-based, in order), and whether each is
    clustered (:func:`is_multidomain_region`), bool [n]: the driver's one call per target."""
    mocc, btot, etot = (np.ascontiguousarray(a, F32) for a in (mocc, btot, etot))
    regions = np.empty((mocc.size // 2 + 1, 2), np.int64)
    clustered = np.empty(mocc.size // 2 + 1, np.bool_)
    n = _scan(mocc, btot, etot, regions, clustered)
    return regions[:n], clustered[:n]


def scan_targets(decodings) -> list:
    """:func:`scan_regions` of many targets at once, one compiled call over all of them:
    ``decodings`` (status, mocc, btot, etot) each; a (regions, clustered) pair per target, in
    order, equal to its own :func:`scan_regions` (a target whose status is not OK: none)."""
    decodings = list(decodings)
    scanned = [k for k, (status, *_) in enumerate(decodings) if status == STATUS_OK]
    found = [(np.zeros((0, 2), np.int64), np.zeros(0, np.bool_))] * len(decodings)
    if not scanned:
        return found
    rows = [[decodings[k][n] for k in scanned] for n in (1, 2, 3)]
    sizes = np.array([a.size for a in rows[0]], np.int64)
    offsets = np.zeros(sizes.size + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    mocc, btot, etot = (np.concatenate(a).astype(F32, copy=False) for a in rows)
    room = int((sizes // 2 + 1).sum())
    regions, clustered = np.empty((room, 2), np.int64), np.empty(room, np.bool_)
    starts = np.zeros(sizes.size + 1, np.int64)
    _scan_all(mocc, btot, etot, offsets, regions, clustered, starts)
    for m, k in enumerate(scanned):
        a, b = int(starts[m]), int(starts[m + 1])
        found[k] = (regions[a:b], clustered[a:b])
    return found


@njit(cache=True, nogil=True, error_model="numpy")
def _scan_all(mocc, btot, etot, offsets, regions, clustered, starts):
    """:func:`_scan` of each target (its rows ``offsets[t]:offsets[t+1]``), its regions
    written from ``starts[t]`` on (each target's room its rows' half, plus one)."""
    n = 0
    for t in range(offsets.size - 1):
        a, b = offsets[t], offsets[t + 1]
        starts[t] = n
        n += _scan(mocc[a:b], btot[a:b], etot[a:b], regions[n:], clustered[n:])
    starts[offsets.size - 1] = n


@njit(cache=True, nogil=True, error_model="numpy")
def _scan(mocc, btot, etot, regions, clustered):
    """The scan into ``regions`` and ``clustered`` (a region ends after its trigger: at most
    L/2 of them); returns their number."""
    n = 0
    i = -1
    triggered = False
    for j in range(1, mocc.size):
        if not triggered:
            if mocc[j] - (btot[j] - btot[j - 1]) < RT2 or i == -1:
                i = j
            if mocc[j] >= RT1:
                triggered = True
        elif mocc[j] - (etot[j] - etot[j - 1]) < RT2:
            regions[n, 0] = i
            regions[n, 1] = j
            clustered[n] = _is_multidomain(btot, etot, i, j)
            n += 1
            i = -1
            triggered = False
    return n


def is_multidomain_region(btot, etot, i: int, j: int) -> bool:
    """``is_multidomain_region``: ``max_z min(etot[z] - etot[i-1], btot[j] - btot[z-1]) >= rt3``
    over z = i..j, with C's ``ESL_MIN``/``ESL_MAX`` (``a < b ? a : b``, ``a > b ? a : b``)."""
    return bool(_is_multidomain(np.ascontiguousarray(btot, F32), np.ascontiguousarray(etot, F32), int(i), int(j)))


@njit(cache=True, nogil=True, error_model="numpy")
def _is_multidomain(btot, etot, i, j):
    best = -1.0
    for z in range(i, j + 1):
        e = etot[z] - etot[i - 1]
        b = btot[j] - btot[z - 1]
        expected = e if e < b else b
        best = best if best > expected else expected
    return best >= RT3


@njit(cache=True, nogil=True, error_model="numpy")
def _domcorrection(n2sc, i, j):
    """The float32 sum of the envelope's null2 scores ``n2sc[i..j]``, in order (``domcorrection``)."""
    total = _F0
    for pos in range(i, j + 1):
        total = total + n2sc[pos]
    return total



def define_domains(stages: DomainStages, codes, fwd_rows, bck_rows, has_own_scales: bool) -> DomainDefinition:
    """``p7_domaindef_ByPosteriorHeuristics`` on a target (digital ``codes``) from its Forward
    and Backward parser rows (float32 [L+1][6]) and Backward's ``has_own_scales``, with the
    device steps of ``stages``."""
    _, ploop = length_specials(np.size(codes))
    return define_domains_decoded(stages, codes, domain_decoding(fwd_rows, bck_rows, has_own_scales, ploop))


def define_domains_decoded(stages: DomainStages, codes, decoding) -> DomainDefinition:
    """:func:`define_domains` after ``p7_DomainDecoding``: ``decoding`` is (status, mocc, btot,
    etot float32 [L+1]) as :func:`domain_decoding` returns it (or a device computed it). The
    one-target case of :func:`define_domains_batched`."""
    return define_domains_batched(stages, [(codes, decoding)])[0]


def define_domains_batched(stages: DomainStages, targets) -> list:
    """:func:`define_domains_decoded` on many targets of the model of ``stages`` at once:
    ``targets`` (codes, decoding) pairs; a :class:`DomainDefinition` each, in order, equal to
    the target's alone. The phases (module header): every target's region scan, every
    clustered region sampled in one :meth:`DomainStages.region_ensembles` call, every envelope
    rescored in one :meth:`DomainStages.rescore_envelopes` call, each target assembled."""
    return define_domains_grouped([(stages, targets)])[0]


def define_domains_grouped(groups) -> list:
    """:func:`define_domains_batched` on several models' targets at once: ``groups``
    (stages, targets) pairs, the stages of one class (a model each); a list of
    :class:`DomainDefinition` per group, in order, each equal to the target's alone. Each
    phase is one call of that class over every group (:meth:`DomainStages.region_ensembles_of`,
    :meth:`DomainStages.rescore_envelopes_of`)."""
    groups = list(groups)
    if not groups:
        return []
    kind = type(groups[0][0])
    if any(type(stages) is not kind for stages, _ in groups):
        raise TypeError("define_domains_grouped: every group's stages must be of one class")
    every = iter(_ScannedTarget.all_of([target for _, targets in groups for target in targets]))
    scanned = [[next(every) for _ in targets] for _, targets in groups]
    regions = [[(t, k) for t in group for k in np.flatnonzero(t.clustered).tolist()] for group in scanned]

    def sample():
        ensembles = kind.region_ensembles_of([(stages, [RegionSpan(t.codes, *t.regions[k]) for t, k in spans])
                                              for (stages, _), spans in zip(groups, regions)])
        for spans, answers in zip(regions, ensembles):
            for (t, k), ensemble in zip(spans, answers):
                t.take_ensemble(k, ensemble)

    def rescore(spans_of, aside: bool = False) -> list:
        envelopes = [[envelope for t in group for envelope in spans_of(t)] for group in scanned]
        work = [(stages, spans) for (stages, _), spans in zip(groups, envelopes)]
        return kind.rescore_envelopes_of(work, aside=True) if aside else kind.rescore_envelopes_of(work)

    if groups[0][0].overlaps_phases:
        with ThreadPoolExecutor(1, thread_name_prefix="hmmgpu-envelopes") as pool:
            plain = pool.submit(rescore, _ScannedTarget.unclustered_spans, True)
            sample()
            clustered = rescore(_ScannedTarget.clustered_spans)
            plain = plain.result()
        for group in scanned:
            for t in group:
                t.envelope_spans()
        rescored = [_ScannedTarget.merged(group, p, c) for group, p, c in zip(scanned, plain, clustered)]
    else:
        sample()
        rescored = rescore(_ScannedTarget.envelope_spans)
    for group, answers in zip(scanned, rescored):
        start = 0
        for t in group:
            end = start + len(t.envelopes)
            t.assemble(answers[start:end])
            start = end
    return [[t.definition for t in group] for group in scanned]


class _ScannedTarget:
    """A target between the driver's phases: its codes, its :class:`DomainDefinition` being
    filled in, its regions (int [n][2]) and which are ``clustered`` (bool [n]), and after the
    ensembles its envelopes in ``dcl`` order, (region number, i, j, null2_is_done) each."""

    def __init__(self, codes, definition: DomainDefinition, regions, clustered):
        self.codes = codes
        self.definition = definition
        self.regions = regions
        self.clustered = clustered
        self.ensembles: dict = {}
        self.envelopes: list = []

    @classmethod
    def all_of(cls, targets) -> list:
        """Phase A: the region scans of decoded targets, (codes, decoding) pairs, in one call
        (:func:`scan_targets`; none where a decoding overflowed)."""
        targets = list(targets)
        scans = scan_targets([decoding for _, decoding in targets])
        made = []
        for (codes, (status, _, btot, _)), (regions, clustered) in zip(targets, scans):
            codes = np.asarray(codes, dtype=np.uint8)
            L = codes.size
            definition = DomainDefinition(status=status, domains=[], nregions=len(regions),
                                          nclustered=int(np.count_nonzero(clustered)), noverlaps=0, nenvelopes=0,
                                          nexpected=F32(btot[L]), n2sc=np.zeros(L + 1, dtype=F32))
            made.append(cls(codes, definition, regions.tolist(), clustered))
        return made

    def take_ensemble(self, k: int, ensemble: RegionEnsemble) -> None:
        """Phase B's answer for clustered region ``k``: its null2 scores and flags."""
        i, j = self.regions[k]
        self.definition.n2sc[i:j + 1] = ensemble.n2sc
        self.definition.flags |= int(ensemble.flags)
        self.ensembles[k] = ensemble

    def envelope_spans(self) -> list:
        """Phase C's work: the target's envelopes (:class:`EnvelopeSpan`), in ``dcl`` order:
        region by region, a clustered region's envelopes as its ensemble lists them, an
        unclustered region as one envelope whose null2 is not done."""
        for k, (i, j) in enumerate(self.regions):
            if self.clustered[k]:
                self.envelopes += [(k, i2, j2, True) for i2, j2 in np.asarray(self.ensembles[k].envelopes).tolist()]
            else:
                self.envelopes.append((k, i, j, False))
        n2sc = self.definition.n2sc
        return [EnvelopeSpan(self.codes, i, j, done, n2sc) for _, i, j, done in self.envelopes]

    def unclustered_spans(self) -> list:
        """The envelopes of the unclustered regions (:class:`EnvelopeSpan`), in region order:
        known once the regions are (each such region is one envelope whose null2 is not done)."""
        n2sc = self.definition.n2sc
        return [EnvelopeSpan(self.codes, i, j, False, n2sc)
                for k, (i, j) in enumerate(self.regions) if not self.clustered[k]]

    def clustered_spans(self) -> list:
        """The envelopes of the clustered regions (:class:`EnvelopeSpan`), region by region as
        their ensembles list them: known once the ensembles are."""
        n2sc = self.definition.n2sc
        return [EnvelopeSpan(self.codes, i2, j2, True, n2sc) for k in np.flatnonzero(self.clustered).tolist()
                for i2, j2 in np.asarray(self.ensembles[k].envelopes).tolist()]

    @staticmethod
    def merged(group, plain: list, clustered: list) -> list:
        """The answers to every target of ``group`` in ``dcl`` order (:meth:`envelope_spans`,
        already called), from the answers to their :meth:`unclustered_spans` and to their
        :meth:`clustered_spans`, each in its own order."""
        plain, clustered = iter(plain), iter(clustered)
        return [next(clustered) if done else next(plain) for t in group for _, _, _, done in t.envelopes]

    def assemble(self, rescored: list) -> None:
        """Phase D: the envelopes' answers, in order, into the definition as HMMER records them:
        every envelope counted and its flags kept; a dropped one (decoding overflow) makes no
        domain; an unclustered envelope's null2 scores written before its ``domcorrection``;
        within a clustered region, an envelope that starts at or before the end of the last
        domain kept there is an overlap."""
        d = self.definition
        region, last_j = -1, 0
        for (k, i, j, null2_is_done), envelope in zip(self.envelopes, rescored):
            if k != region:
                region, last_j = k, 0
            if null2_is_done and i <= last_j:
                d.noverlaps += 1
            d.nenvelopes += 1
            d.flags |= int(envelope.flags)
            if envelope.dropped:
                continue
            if not null2_is_done:
                d.n2sc[i:j + 1] = envelope.n2sc
            d.domains.append(Domain(ienv=i, jenv=j, iali=int(envelope.iali), jali=int(envelope.jali),
                                    envsc=F32(envelope.envsc), domcorrection=_domcorrection(d.n2sc, i, j),
                                    oasc=F32(envelope.oasc), trace=envelope.trace))
            last_j = j
