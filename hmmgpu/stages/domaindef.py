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
:meth:`DomainStages.rescored_of`); by default those call each model's batch method
in turn, and the GPU stages run every model's items in the same launches. The answers are
each target's alone, as above: nothing a target computes reads another target's work.

The driver itself (:func:`define_domains_arrays`) keeps the batch as arrays between the calls,
every target, region and envelope a row: the scan's regions (:class:`_Scan`), the envelopes in
``dcl`` order (:func:`_envelope_rows`), the envelopes' answers (:class:`RescoredEnvelopes`,
which a device may form as arrays itself: the GPU's do, :meth:`DomainStages.rescored_of`), and
phase D as one compiled pass over all the envelopes (:func:`_assemble`), which gives the
definitions as arrays (:class:`DefinedBatch`). The GPU process runs this for every passer it
defines, in the interpreter its filters' loop shares: with a Python object a target, region,
envelope and domain, its definitions' threads held the interpreter's lock about 0.18 ms a
passer; over arrays about 0.10 ms (docs/performance.md). :func:`define_domains_grouped` makes each target's
:class:`DomainDefinition` from those arrays, for the CPU's stages and the tests.

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

__all__ = ["RT1", "RT2", "RT3", "DefinedBatch", "Domain", "DomainDefinition", "DomainStages", "DomainTrace", "Envelope",
           "EnvelopeSpan", "RegionEnsemble", "RegionSpan", "RescoredEnvelopes", "define_domains",
           "define_domains_arrays", "define_domains_batched", "define_domains_decoded", "define_domains_grouped",
           "domain_decoding", "domains_at", "fsum", "is_multidomain_region", "offsets_of", "ranges_of", "region_scan",
           "scan_regions", "scan_targets"]

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

    @classmethod
    def rescored_of(cls, work, aside: bool = False) -> "RescoredEnvelopes":
        """:meth:`rescore_envelopes_of`'s answers as arrays, every model's envelopes one after the
        other (a :class:`RescoredEnvelopes`): the call the driver makes. A device whose answers
        come as arrays overrides it, so that no :class:`Envelope` is made."""
        answers = cls.rescore_envelopes_of(work, aside=True) if aside else cls.rescore_envelopes_of(work)
        return RescoredEnvelopes.of([envelope for group in answers for envelope in group])


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
    regions, clustered, offsets = _scanned(decodings)
    bounds = offsets.tolist()
    return [(regions[a:b], clustered[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


def _scanned(decodings) -> tuple:
    """:func:`scan_targets`' answer as the arrays the compiled call fills: every target's regions
    one target after the other (int64 [R][2]), whether each is clustered (bool [R]), and where
    each target's start (int64 [T+1])."""
    decodings = list(decodings)
    scanned = np.array([k for k, (status, *_) in enumerate(decodings) if status == STATUS_OK], np.int64)
    counts = np.zeros(len(decodings), np.int64)
    if not scanned.size:
        return np.zeros((0, 2), np.int64), np.zeros(0, np.bool_), offsets_of(counts)
    rows = [[decodings[k][n] for k in scanned.tolist()] for n in (1, 2, 3)]
    sizes = np.array([a.size for a in rows[0]], np.int64)
    mocc, btot, etot = (np.concatenate(a).astype(F32, copy=False) for a in rows)
    room = int((sizes // 2 + 1).sum())
    regions, clustered = np.empty((room, 2), np.int64), np.empty(room, np.bool_)
    starts = np.zeros(sizes.size + 1, np.int64)
    _scan_all(mocc, btot, etot, offsets_of(sizes), regions, clustered, starts)
    counts[scanned] = np.diff(starts)
    n = int(starts[-1])
    return regions[:n].copy(), clustered[:n].copy(), offsets_of(counts)


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
    :class:`DomainDefinition` per group, in order, each equal to the target's alone: the
    driver's answer (:func:`define_domains_arrays`) a definition a target."""
    groups = list(groups)
    batch = define_domains_arrays(groups)
    definitions, start = [], 0
    for _, targets in groups:
        definitions.append([batch.definition(t) for t in range(start, start + len(targets))])
        start += len(targets)
    return definitions


def define_domains_arrays(groups) -> "DefinedBatch":
    """The driver: :func:`define_domains_grouped`'s work, its answer as arrays (a
    :class:`DefinedBatch`, every group's targets one after the other). Each phase is one call of
    the stages' class over every group (:meth:`DomainStages.region_ensembles_of`,
    :meth:`DomainStages.rescored_of`); what lies between the calls is done for every target,
    region and envelope at once, over arrays (the scan and the assembly compiled), so that the
    host's part does not make a Python object a domain."""
    groups = list(groups)
    if groups and any(type(stages) is not type(groups[0][0]) for stages, _ in groups):
        raise TypeError("define_domains_grouped: every group's stages must be of one class")
    targets = [target for _, targets in groups for target in targets]
    codes = [np.asarray(c, dtype=np.uint8) for c, _ in targets]
    scan = _Scan.of(codes, [decoding for _, decoding in targets])
    if not targets:
        return scan.assembled(RescoredEnvelopes.of([]), _envelope_rows(scan, np.zeros(0, np.int64), {}))
    kind = type(groups[0][0])
    group_of = np.repeat(np.arange(len(groups), dtype=np.int64), [len(t) for _, t in groups])
    clustered = np.flatnonzero(scan.clustered)
    by_group = _by_group(group_of[scan.region_target[clustered]], clustered, len(groups))
    ensembles: dict = {}

    def sample():
        answers = kind.region_ensembles_of([(stages, [RegionSpan(codes[scan.region_target[r]], *scan.regions[r].tolist())
                                                      for r in spans.tolist()])
                                            for (stages, _), spans in zip(groups, by_group)])
        for spans, got in zip(by_group, answers):
            ensembles.update(zip(spans.tolist(), got))
        scan.take_ensembles(ensembles)

    def rescore(envelopes, aside: bool = False) -> RescoredEnvelopes:
        """The answers to ``envelopes`` (:func:`_envelope_rows`), in their order."""
        spans = _by_group(group_of[envelopes[:, 0]], np.arange(len(envelopes), dtype=np.int64), len(groups))
        work = [(stages, [EnvelopeSpan(codes[t], i, j, bool(done), scan.n2sc_of(t))
                          for t, _, i, j, done in envelopes[chosen].tolist()])
                for (stages, _), chosen in zip(groups, spans)]
        answers = kind.rescored_of(work, aside=True) if aside else kind.rescored_of(work)
        return answers.take(np.argsort(np.concatenate(spans), kind="stable"))

    if groups[0][0].overlaps_phases:
        with ThreadPoolExecutor(1, thread_name_prefix="hmmgpu-envelopes") as pool:
            plain = pool.submit(rescore, _envelope_rows(scan, np.flatnonzero(~scan.clustered), {}), True)
            sample()
            envelopes = _envelope_rows(scan, np.arange(len(scan.regions), dtype=np.int64), ensembles)
            is_plain = envelopes[:, 4] == 0
            later = rescore(envelopes[~is_plain])
            plain = plain.result()
        rank = np.where(is_plain, np.cumsum(is_plain) - 1, len(plain) + np.cumsum(~is_plain) - 1)
        answers = RescoredEnvelopes.joined([plain, later]).take(rank)
    else:
        sample()
        envelopes = _envelope_rows(scan, np.arange(len(scan.regions), dtype=np.int64), ensembles)
        answers = rescore(envelopes)
    return scan.assembled(answers, envelopes)


def _by_group(group, items, ngroups: int) -> list:
    """``items`` (int64) split by their ``group`` (each group's in their order), a list a group."""
    order = np.argsort(group, kind="stable")
    bounds = np.searchsorted(group[order], np.arange(ngroups + 1))
    return [items[order[bounds[g]:bounds[g + 1]]] for g in range(ngroups)]


def _envelope_rows(scan: "_Scan", regions, ensembles: dict) -> np.ndarray:
    """The envelopes of ``regions`` (region numbers, in order) as (target, region, i, j,
    null2_is_done) int64 rows, in ``dcl`` order: an unclustered region one envelope whose null2 is
    not done, a clustered region its ensemble's envelopes (``ensembles``, by region number)."""
    regions = np.asarray(regions, np.int64)
    counts = np.ones(regions.size, np.int64)
    found = {}
    for m in np.flatnonzero(scan.clustered[regions]).tolist():
        found[m] = np.asarray(ensembles[int(regions[m])].envelopes, np.int64).reshape(-1, 2)
        counts[m] = len(found[m])
    rows = np.empty((int(counts.sum()), 5), np.int64)
    rows[:, 0] = np.repeat(scan.region_target[regions], counts)
    rows[:, 1] = np.repeat(regions, counts)
    rows[:, 2:4] = np.repeat(scan.regions[regions], counts, axis=0)
    rows[:, 4] = np.repeat(scan.clustered[regions], counts)
    if found:
        starts = np.cumsum(counts) - counts
        for m, spans in found.items():
            rows[starts[m]:starts[m] + len(spans), 2:4] = spans
    return rows


def offsets_of(sizes) -> np.ndarray:
    """int64 [n+1]: where each of ``sizes`` starts, one after the other, and their end."""
    offsets = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(np.asarray(sizes, np.int64), out=offsets[1:])
    return offsets


def ranges_of(offsets, chosen) -> tuple:
    """The positions of the ranges ``offsets[c]:offsets[c+1]`` of every ``c`` of ``chosen``, one
    after the other (int64), and where each starts among them (int64 [len(chosen)+1])."""
    chosen = np.asarray(chosen, np.int64)
    starts = offsets[chosen]
    sizes = offsets[chosen + 1] - starts
    new = offsets_of(sizes)
    return np.repeat(starts - new[:-1], sizes) + np.arange(new[-1], dtype=np.int64), new


class DomainTrace(NamedTuple):
    """A domain's optimal accuracy trace (target coordinates) as arrays: what
    :func:`hmmgpu.report.alidisplay.alidisplay_create` reads of a :class:`hmmgpu.cpu.optacc.Trace`."""

    st: np.ndarray
    k: np.ndarray
    i: np.ndarray
    pp: np.ndarray


@dataclass
class RescoredEnvelopes:
    """Phase C's answers as arrays, an envelope a row (what its :class:`Envelope` holds):
    ``flags`` int64, ``dropped`` bool, ``envsc``, ``oasc`` float32 and ``iali``, ``jali`` int64
    (0 where dropped); the OA traces one after the other (``trace_offsets`` int64 [E+1], ``st``
    uint8, ``k``, ``i`` int32, ``pp`` float32; none where dropped); the null2 scores of the
    envelopes that return them (``n2sc_offsets`` int64 [E+1], ``n2sc`` float32; none for the
    others: a kept envelope returns them exactly when its null2 was not done)."""

    flags: np.ndarray
    dropped: np.ndarray
    envsc: np.ndarray
    oasc: np.ndarray
    iali: np.ndarray
    jali: np.ndarray
    trace_offsets: np.ndarray
    st: np.ndarray
    k: np.ndarray
    i: np.ndarray
    pp: np.ndarray
    n2sc_offsets: np.ndarray
    n2sc: np.ndarray

    def __len__(self) -> int:
        return int(self.flags.size)

    @classmethod
    def of(cls, envelopes) -> "RescoredEnvelopes":
        """From :class:`Envelope` objects, in order (a kept envelope without a trace: an empty one)."""
        envelopes = list(envelopes)
        kept = [e for e in envelopes if not e.dropped]
        traces = [e.trace for e in kept if e.trace is not None]
        n2sc = [e.n2sc for e in kept if e.n2sc is not None]

        def column(get, dtype):
            return np.array([0 if e.dropped else get(e) for e in envelopes], dtype)

        def flat(arrays, dtype):
            return np.concatenate(arrays).astype(dtype, copy=False) if arrays else np.zeros(0, dtype)

        return cls(flags=np.array([int(e.flags) for e in envelopes], np.int64),
                   dropped=np.array([bool(e.dropped) for e in envelopes], np.bool_),
                   envsc=column(lambda e: e.envsc, F32), oasc=column(lambda e: e.oasc, F32),
                   iali=column(lambda e: int(e.iali), np.int64), jali=column(lambda e: int(e.jali), np.int64),
                   trace_offsets=offsets_of(column(lambda e: 0 if e.trace is None else np.size(e.trace.st), np.int64)),
                   st=flat([t.st for t in traces], np.uint8), k=flat([t.k for t in traces], np.int32),
                   i=flat([t.i for t in traces], np.int32), pp=flat([t.pp for t in traces], F32),
                   n2sc_offsets=offsets_of(column(lambda e: 0 if e.n2sc is None else np.size(e.n2sc), np.int64)),
                   n2sc=flat(n2sc, F32))

    def envelopes(self) -> list:
        """An :class:`Envelope` each, in order (the traces and null2 scores views of these arrays)."""
        out = []
        for e in range(len(self)):
            if self.dropped[e]:
                out.append(Envelope(flags=int(self.flags[e]), dropped=True))
                continue
            a, b = self.trace_offsets[e], self.trace_offsets[e + 1]
            x, y = self.n2sc_offsets[e], self.n2sc_offsets[e + 1]
            out.append(Envelope(flags=int(self.flags[e]), envsc=self.envsc[e], oasc=self.oasc[e],
                                iali=int(self.iali[e]), jali=int(self.jali[e]),
                                trace=DomainTrace(self.st[a:b], self.k[a:b], self.i[a:b], self.pp[a:b]),
                                n2sc=self.n2sc[x:y] if y > x else None))
        return out

    def take(self, order) -> "RescoredEnvelopes":
        """The envelopes ``order`` (positions), in that order."""
        order = np.asarray(order, np.int64)
        traces, trace_offsets = ranges_of(self.trace_offsets, order)
        scores, n2sc_offsets = ranges_of(self.n2sc_offsets, order)
        return RescoredEnvelopes(flags=self.flags[order], dropped=self.dropped[order], envsc=self.envsc[order],
                                 oasc=self.oasc[order], iali=self.iali[order], jali=self.jali[order],
                                 trace_offsets=trace_offsets, st=self.st[traces], k=self.k[traces],
                                 i=self.i[traces], pp=self.pp[traces], n2sc_offsets=n2sc_offsets,
                                 n2sc=self.n2sc[scores])

    @classmethod
    def joined(cls, parts) -> "RescoredEnvelopes":
        """``parts`` one after the other."""
        parts = list(parts)
        if not parts:
            return cls.of([])

        def offsets(name, flat):
            ends = np.cumsum([0] + [getattr(p, flat).size for p in parts[:-1]])
            return np.concatenate([np.zeros(1, np.int64)] + [getattr(p, name)[1:] + end for p, end in zip(parts, ends)])

        return cls(**{name: np.concatenate([getattr(p, name) for p in parts])
                      for name in ("flags", "dropped", "envsc", "oasc", "iali", "jali", "st", "k", "i", "pp", "n2sc")},
                   trace_offsets=offsets("trace_offsets", "st"), n2sc_offsets=offsets("n2sc_offsets", "n2sc"))


@dataclass
class DefinedBatch:
    """The driver's answer for a batch of targets (:func:`define_domains_arrays`), as arrays, a
    target a row in the order given: what each one's :class:`DomainDefinition` holds (``status``
    int32, ``flags`` int64, ``counters`` int32 [T][4]: nregions, nclustered, noverlaps,
    nenvelopes, ``nexpected`` float32, the null2 scores ``n2sc`` float32 every target's [L+1]
    after the one before, from ``n2sc_offsets``), its domains (from ``domain_offsets`` int64
    [T+1]: ``bounds`` int64 [D][4] ienv, jenv, iali, jali; ``domain_scores`` float32 [D][3]
    envsc, domcorrection, oasc) and their OA traces one after the other (``trace_offsets``
    int64 [D+1], ``st`` uint8, ``k``, ``i`` int32, ``pp`` float32)."""

    status: np.ndarray
    flags: np.ndarray
    counters: np.ndarray
    nexpected: np.ndarray
    n2sc_offsets: np.ndarray
    n2sc: np.ndarray
    domain_offsets: np.ndarray
    bounds: np.ndarray
    domain_scores: np.ndarray
    trace_offsets: np.ndarray
    st: np.ndarray
    k: np.ndarray
    i: np.ndarray
    pp: np.ndarray

    def __len__(self) -> int:
        return int(self.status.size)

    def n2sc_sum(self, t: int) -> np.float32:
        """Target ``t``'s ``esl_vec_FSum(n2sc, L+1)`` (:attr:`DomainDefinition.n2sc_sum`)."""
        return fsum(self.n2sc[self.n2sc_offsets[t]:self.n2sc_offsets[t + 1]])

    def definition(self, t: int) -> DomainDefinition:
        """Target ``t``'s :class:`DomainDefinition` (its domains' traces :class:`DomainTrace`)."""
        nregions, nclustered, noverlaps, nenvelopes = self.counters[t].tolist()
        return DomainDefinition(status=int(self.status[t]), domains=domains_at(self, t), nregions=nregions,
                                nclustered=nclustered,
                                noverlaps=noverlaps, nenvelopes=nenvelopes, nexpected=self.nexpected[t],
                                n2sc=self.n2sc[self.n2sc_offsets[t]:self.n2sc_offsets[t + 1]].copy(),
                                flags=int(self.flags[t]))


def domains_at(held, t: int) -> list:
    """Target ``t``'s domains (:class:`Domain`, in ``dcl`` order, their traces :class:`DomainTrace`
    views) from arrays held as a :class:`DefinedBatch` holds them (``domain_offsets``, ``bounds``,
    ``domain_scores``, ``trace_offsets``, ``st``, ``k``, ``i``, ``pp``), as the definitions sent
    to the post-filter hold them too (:class:`hmmgpu.stages.defined.DefinedTargets`)."""
    domains = []
    for d in range(int(held.domain_offsets[t]), int(held.domain_offsets[t + 1])):
        a, b = int(held.trace_offsets[d]), int(held.trace_offsets[d + 1])
        ienv, jenv, iali, jali = held.bounds[d].tolist()
        envsc, domcorrection, oasc = held.domain_scores[d]
        domains.append(Domain(ienv=ienv, jenv=jenv, iali=iali, jali=jali, envsc=envsc, domcorrection=domcorrection,
                              oasc=oasc, trace=DomainTrace(held.st[a:b], held.k[a:b], held.i[a:b], held.pp[a:b])))
    return domains


class _Scan:
    """Phase A for every target of a batch at once, as arrays: the targets' ``status``,
    ``nexpected`` (``btot[L]``), their null2 scores being filled in (``n2sc``, every target's
    [L+1] after the one before, from ``n2sc_offsets``), their regions (``regions`` int64 [R][2],
    target after target, each target's in order, from ``region_offsets`` [T+1]; ``region_target``,
    ``clustered``) and the flags their ensembles raise (``flags``)."""

    def __init__(self, status, nexpected, n2sc_offsets, regions, clustered, region_offsets):
        self.status = status
        self.nexpected = nexpected
        self.n2sc_offsets = n2sc_offsets
        self.n2sc = np.zeros(int(n2sc_offsets[-1]), F32)
        self.regions = regions
        self.clustered = clustered
        self.region_offsets = region_offsets
        self.region_target = np.repeat(np.arange(status.size, dtype=np.int64), np.diff(region_offsets))
        self.flags = np.zeros(status.size, np.int64)

    @classmethod
    def of(cls, codes: list, decodings: list) -> "_Scan":
        """The region scans of decoded targets (their ``codes``, and (status, mocc, btot, etot)
        each) in one compiled call (:func:`_scanned`; none where a decoding overflowed)."""
        regions, clustered, region_offsets = _scanned(decodings)
        return cls(status=np.array([int(d[0]) for d in decodings], np.int32),
                   nexpected=np.array([F32(d[2][c.size]) for c, d in zip(codes, decodings)], F32),
                   n2sc_offsets=offsets_of([c.size + 1 for c in codes]), regions=regions, clustered=clustered,
                   region_offsets=region_offsets)

    def n2sc_of(self, t: int) -> np.ndarray:
        """Target ``t``'s null2 scores (a view)."""
        return self.n2sc[self.n2sc_offsets[t]:self.n2sc_offsets[t + 1]]

    def take_ensembles(self, ensembles: dict) -> None:
        """Phase B's answers (a :class:`RegionEnsemble` by clustered region number): their null2
        scores into their targets', their flags into their targets'."""
        for r, ensemble in ensembles.items():
            t = int(self.region_target[r])
            i, j = self.regions[r].tolist()
            at = int(self.n2sc_offsets[t])
            self.n2sc[at + i:at + j + 1] = ensemble.n2sc
            self.flags[t] |= int(ensemble.flags)

    def assembled(self, answers: RescoredEnvelopes, envelopes) -> DefinedBatch:
        """Phase D for every target at once: the ``answers`` to ``envelopes`` (:func:`_envelope_rows`,
        in ``dcl`` order) into the targets' definitions, as HMMER records them (:func:`_assemble`)."""
        T, E = self.status.size, len(envelopes)
        target, region, i, j, done = (np.ascontiguousarray(envelopes[:, c]) for c in range(5))
        noverlaps, nenvelopes, flags = np.zeros(T, np.int64), np.zeros(T, np.int64), self.flags.copy()
        domcorrection, kept = np.zeros(E, F32), np.zeros(E, np.bool_)
        _assemble(target, region, i, j, done.astype(np.bool_), answers.dropped, answers.flags, answers.n2sc_offsets,
                  answers.n2sc, self.n2sc_offsets, self.n2sc, noverlaps, nenvelopes, flags, domcorrection, kept)
        chosen = np.flatnonzero(kept)
        traces, trace_offsets = ranges_of(answers.trace_offsets, chosen)
        nclustered = np.bincount(self.region_target[self.clustered], minlength=T)
        return DefinedBatch(
            status=self.status, flags=flags,
            counters=np.stack([np.diff(self.region_offsets), nclustered, noverlaps, nenvelopes], axis=1)
            .astype(np.int32).reshape(T, 4),
            nexpected=self.nexpected, n2sc_offsets=self.n2sc_offsets, n2sc=self.n2sc,
            domain_offsets=offsets_of(np.bincount(target[chosen], minlength=T)),
            bounds=np.stack([i[chosen], j[chosen], answers.iali[chosen], answers.jali[chosen]], axis=1).reshape(-1, 4),
            domain_scores=np.stack([answers.envsc[chosen], domcorrection[chosen], answers.oasc[chosen]], axis=1)
            .astype(F32).reshape(-1, 3),
            trace_offsets=trace_offsets, st=answers.st[traces], k=answers.k[traces], i=answers.i[traces],
            pp=answers.pp[traces])


@njit(cache=True, nogil=True, error_model="numpy")
def _assemble(target, region, env_i, env_j, done, dropped, env_flags, answer_offsets, answer_n2sc, n2sc_offsets,
              n2sc, noverlaps, nenvelopes, flags, domcorrection, kept):
    """Phase D over every envelope in ``dcl`` order, as ``p7_domaindef_ByPosteriorHeuristics``
    records them: every envelope counted and its flags kept; a dropped one (its decoding
    overflowed) makes no domain; an unclustered envelope's null2 scores written into its
    target's before its ``domcorrection`` (the float32 sum of the target's null2 scores over
    the envelope, in order); within a clustered region, an envelope that starts at or before the
    end of the last domain kept there is an overlap. ``kept``: the envelopes that are domains."""
    last_region = -1
    last_j = 0
    for e in range(target.size):
        t = target[e]
        if region[e] != last_region:
            last_region = region[e]
            last_j = 0
        i, j = env_i[e], env_j[e]
        if done[e] and i <= last_j:
            noverlaps[t] += 1
        nenvelopes[t] += 1
        flags[t] |= env_flags[e]
        if dropped[e]:
            continue
        base = n2sc_offsets[t]
        if not done[e]:
            a = answer_offsets[e]
            for p in range(j - i + 1):
                n2sc[base + i + p] = answer_n2sc[a + p]
        total = _F0
        for p in range(i, j + 1):
            total = total + n2sc[base + p]
        domcorrection[e] = total
        kept[e] = True
        last_j = j
