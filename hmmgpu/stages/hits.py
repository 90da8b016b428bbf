"""A target's hit from its domain definition: ``p7_Pipeline``'s scoring and HMMER's hit list.

What is computed
----------------
After domain definition, ``p7_Pipeline`` (HMMER 3.4 ``src/p7_pipeline.c``) turns a target's
domains into a hit (hmmer-domaindef-spec.md §4), and ``p7_tophits_Threshold``
(``src/p7_tophits.c``) flags what is reported and included once every target is done:

* **sequence scores** (:func:`score_target`): the null2 bias of the whole sequence from the
  Kahan sum of its null2 scores (``esl_vec_FSum(n2sc, L+1)``, computed by the domain
  definition), the sequence score and the one without bias (``pre_score``), the
  "reconstruction" score summed over the domains that keep a positive score after their
  own bias, which replaces the sequence score when it is higher, and the three log
  P-values (Easel's exponential tail, ``esl_exp_logsurv``);
* **per domain**: its bit score (envelope score plus the length term of the residues
  outside the envelope), its null2 bias ``dombias`` and log P-value; the best domain;
* **the hit** (:func:`target_hit`): the record ``p7_Pipeline`` adds to the hit list, with
  each domain's alignment display (:mod:`hmmgpu.report.alidisplay`), when the target is
  reportable at the pipeline's Z of the moment (:func:`target_reportable`);
  :func:`pipeline_hit` composes the three for one target from its domain definition;
* **thresholds** (:func:`threshold`): reported and included targets, domZ, reported and
  included domains, and HMMER's workaround of bug #h74 (of two domains with the same
  alignment coordinates only the better one is reported);
* **state** (:func:`tophits_state`, :func:`serialize_hit`): the hits sorted as
  ``p7_tophits_SortBySortkey`` sorts them and written as ``TopHits.__getstate__()`` holds
  them (``p7_hit_Serialize``, ``p7_domain_Serialize``, ``p7_alidisplay_Serialize``), with
  the search's thresholds (:func:`pipeline_settings`), so that hmmgpu's merge
  (:mod:`hmmgpu.stages.merge`) and report (:mod:`hmmgpu.report`) read them exactly as they
  read pyhmmer's.

Why the code looks as it does
-----------------------------
Every number must be HMMER's to the bit, so each C expression is written out with its
types: ``float`` results are rounded to float32 after each operation (numpy float32
scalars), mixed float/double expressions are evaluated in double (Python floats) and
rounded once where C assigns to a float, and ``log``/``exp`` are glibc's double functions
(Python's ``math``). ``p7_FLogsum`` looks its correction up in HMMER's own table
(:func:`flogsum`). This is some thirty scalar operations per target, so the module needs no
device and no numba: the GPU and CPU domain definitions both end here.

The serialized records hold HMMER's fields that ``p7_Pipeline`` never sets in a protein
search (a hit's ``window_length``, ``seqidx`` and ``subseq_start``, a domain's
``iorf``/``jorf``) as 0: pyhmmer's states hold whatever malloc left in them, and nothing
that hmmgpu, pyhmmer or HMMER writes for a protein search reads them.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

from hmmgpu.constants import LOG2
from hmmgpu.report.alidisplay import ModelLines, alidisplay_create, serialize_alidisplay
from hmmgpu.report.hitlist import (DOMAIN_STRUCT, HIT_HAS_ACCESSION, HIT_HAS_DESCRIPTION, HIT_STRUCT, IS_DUPLICATE,
                                   IS_INCLUDED, IS_REPORTED)

F32 = np.float32
#: ``bg->omega``, the prior of the null2 model (``p7_bg_Create``: 1/256 as a float).
OMEGA = F32(1.0 / 256.0)
#: ``log(bg->omega)`` in double.
_LOG_OMEGA = math.log(float(OMEGA))
#: ``p7_tophits_Create``'s first allocation: a state's ``Nalloc`` doubles from it.
_FIRST_NALLOC = 256
#: ``p7_LOGSUM_TBL`` and ``p7_LOGSUM_SCALE`` (``src/logsum.c``).
_LOGSUM_TBL, _LOGSUM_SCALE = 16000, F32(1000.0)


@functools.lru_cache(maxsize=1)
def _flogsum_table() -> np.ndarray:
    """``p7_FLogsumInit``'s table: ``log(1 + exp(-i / 1000))`` in double, stored as float."""
    return np.array([math.log(1.0 + math.exp(-i / 1000.0)) for i in range(_LOGSUM_TBL)], np.float32)


def flogsum(a, b) -> np.float32:
    """HMMER's ``p7_FLogsum(a, b)`` in float: ``max + table[(int)((max - min) * 1000)]``, or
    ``max`` when ``min`` is -inf or the difference is at least 15.7."""
    a, b = F32(a), F32(b)
    hi = a if a > b else b  # ESL_MAX / ESL_MIN
    lo = a if a < b else b
    if lo == -np.inf or F32(hi - lo) >= F32(15.7):
        return hi
    return F32(hi + _flogsum_table()[int(F32(F32(hi - lo) * _LOGSUM_SCALE))])


def exp_logsurv(x: float, mu: float, lam: float) -> float:
    """Easel's ``esl_exp_logsurv``: log P(S > x) of an exponential tail, in double."""
    return 0.0 if x < mu else -lam * (x - mu)


def _bits(nats: float) -> np.float32:
    """``(float) (x / eslCONST_LOG2)`` of a float ``x``: a double division, rounded once."""
    return F32(float(nats) / LOG2)


def null2_bias(correction) -> np.float32:
    """``p7_FLogsum(0.0, log(bg->omega) + correction)``: a null2 correction (nats) as a bias
    (nats); the sum is in double, rounded to float as the argument."""
    return flogsum(0.0, F32(_LOG_OMEGA + float(correction)))


@dataclass(frozen=True, slots=True)
class DomainScore:
    """One domain's scores (``P7_DOMAIN``'s fields that ``p7_Pipeline`` sets)."""

    bitscore: np.float32
    dombias: np.float32  #: nats
    lnP: float


@dataclass(frozen=True, slots=True)
class TargetScore:
    """A target's scores (bits) and log P-values (``P7_HIT``'s fields that ``p7_Pipeline`` sets)."""

    score: np.float32
    pre_score: np.float32
    sum_score: np.float32
    lnP: float
    pre_lnP: float
    sum_lnP: float
    best_domain: int
    domains: tuple[DomainScore, ...]


def score_target(domains, n2sc_sum, L: int, nullsc, fwdsc, tau: float, lam: float,
                 do_null2: bool = True) -> TargetScore | None:
    """``p7_Pipeline``'s scores of a target of length ``L`` from its domain definition (None:
    no domain, the pipeline drops the target).

    ``domains``: the definition's domains in ``dcl`` order, each with ``ienv``, ``jenv``,
    ``envsc`` and ``domcorrection`` (nats, float32); ``n2sc_sum``: ``esl_vec_FSum`` of the
    null2 scores ``n2sc[0..L]`` (float32); ``nullsc``: ``p7_bg_NullOne``; ``fwdsc``: the
    Forward parser's score (nats); ``tau``, ``lam``: the model's Forward tail parameters
    (``evparam[p7_FTAU]``, ``evparam[p7_FLAMBDA]``, floats)."""
    if not len(domains):
        return None
    nullsc, fwdsc = F32(nullsc), F32(fwdsc)
    seqbias = null2_bias(n2sc_sum) if do_null2 else F32(0.0)
    pre_score = _bits(F32(fwdsc - nullsc))
    seq_score = _bits(F32(fwdsc - F32(nullsc + seqbias)))

    summed, Ld, correction = F32(0.0), 0, F32(0.0)
    for dom in domains:
        envsc, domcorrection = F32(dom.envsc), F32(dom.domcorrection)
        if (F32(envsc - domcorrection) if do_null2 else envsc) > 0.0:
            summed = F32(summed + envsc)
            Ld += int(dom.jenv) - int(dom.ienv) + 1
            correction = F32(correction + domcorrection)
    sum_bias = null2_bias(correction) if do_null2 else F32(0.0)
    length_term = math.log(float(F32(F32(L) / F32(L + 3))))  # log((float) n / (float) (n+3))
    summed = F32(float(summed) + (L - Ld) * length_term)
    pre2_score = _bits(F32(summed - nullsc))
    sum_score = _bits(F32(summed - F32(nullsc + sum_bias)))
    if Ld > 0 and sum_score > seq_score:
        seq_score, pre_score = sum_score, pre2_score

    scores = []
    best = 0
    for d, dom in enumerate(domains):
        envelope = int(dom.jenv) - int(dom.ienv) + 1
        bitscore = F32(float(F32(dom.envsc)) + (L - envelope) * length_term)
        dombias = null2_bias(dom.domcorrection) if do_null2 else F32(0.0)
        bitscore = _bits(F32(bitscore - F32(nullsc + dombias)))
        scores.append(DomainScore(bitscore=bitscore, dombias=dombias,
                                  lnP=exp_logsurv(float(bitscore), tau, lam)))
        if bitscore > scores[best].bitscore:
            best = d
    return TargetScore(score=seq_score, pre_score=pre_score, sum_score=sum_score,
                       lnP=exp_logsurv(float(seq_score), tau, lam), pre_lnP=exp_logsurv(float(pre_score), tau, lam),
                       sum_lnP=exp_logsurv(float(sum_score), tau, lam), best_domain=best, domains=tuple(scores))


# --- the thresholds of P7_PIPELINE (p7_pli_*Reportable, *Includable) ---------------------

def target_reportable(pipeline: dict, score, lnP: float, Z: float | None = None) -> bool:
    """``p7_pli_TargetReportable``: by E-value (``exp(lnP) * Z <= E``, ``Z`` the pipeline's or
    the one given: the running target count while a search runs) or by bit score."""
    if pipeline["by_E"]:
        return math.exp(lnP) * (pipeline["Z"] if Z is None else Z) <= pipeline["E"]
    return score >= pipeline["T"]


def target_includable(pipeline: dict, score, lnP: float) -> bool:
    """``p7_pli_TargetIncludable``."""
    if pipeline["inc_by_E"]:
        return math.exp(lnP) * pipeline["Z"] <= pipeline["incE"]
    return score >= pipeline["incT"]


def domain_reportable(pipeline: dict, score, lnP: float) -> bool:
    """``p7_pli_DomainReportable`` (by E-value against domZ, or by bit score)."""
    if pipeline["dom_by_E"]:
        return math.exp(lnP) * pipeline["domZ"] <= pipeline["domE"]
    return score >= pipeline["domT"]


def domain_includable(pipeline: dict, score, lnP: float) -> bool:
    """``p7_pli_DomainIncludable``."""
    if pipeline["incdom_by_E"]:
        return math.exp(lnP) * pipeline["domZ"] <= pipeline["incdomE"]
    return score >= pipeline["incdomT"]


# --- the hit list --------------------------------------------------------------------------

@dataclass(slots=True)
class HitDomain:
    """A ``P7_DOMAIN`` of a hit: the domain definition's envelope and alignment, the scores,
    the reporting flags (set by :func:`threshold`) and the alignment display."""

    ienv: int
    jenv: int
    iali: int
    jali: int
    envsc: np.float32
    domcorrection: np.float32
    dombias: np.float32
    oasc: np.float32
    bitscore: np.float32
    lnP: float
    alignment: object  #: :class:`hmmgpu.report.hitlist.AlignmentDisplay`
    is_reported: bool = False
    is_included: bool = False


@dataclass(slots=True)
class Hit:
    """A ``P7_HIT`` as ``p7_Pipeline`` makes it; :func:`threshold` sets the flags and counts."""

    name: bytes
    acc: bytes | None
    desc: bytes | None
    sortkey: float
    score: np.float32
    pre_score: np.float32
    sum_score: np.float32
    lnP: float
    pre_lnP: float
    sum_lnP: float
    nexpected: np.float32
    nregions: int
    nclustered: int
    noverlaps: int
    nenvelopes: int
    best_domain: int
    domains: list = field(default_factory=list)
    flags: int = 0
    nreported: int = 0
    nincluded: int = 0


def target_hit(definition, scores: TargetScore, alignments, name: bytes, acc: bytes | None, desc: bytes | None,
               pipeline: dict) -> Hit:
    """The hit ``p7_Pipeline`` adds for a target kept by :func:`target_reportable`.

    ``definition``: its domain definition (``domains`` in ``dcl`` order, each with ``ienv``,
    ``jenv``, ``iali``, ``jali``, ``envsc``, ``domcorrection``, ``oasc``; ``nexpected``,
    ``nregions``, ``nclustered``, ``noverlaps``, ``nenvelopes``); ``scores``: its
    :func:`score_target`; ``alignments``: each domain's alignment display; ``name``, ``acc``,
    ``desc``: the target's (None or b"": unset). With the models' bit cutoffs
    (``use_bit_cutoffs``) the flags are set here, as ``p7_Pipeline`` does; otherwise
    :func:`threshold` sets them."""
    domains = [
        HitDomain(ienv=int(dom.ienv), jenv=int(dom.jenv), iali=int(dom.iali), jali=int(dom.jali),
                  envsc=F32(dom.envsc), domcorrection=F32(dom.domcorrection), dombias=score.dombias,
                  oasc=F32(dom.oasc), bitscore=score.bitscore, lnP=score.lnP, alignment=ad)
        for dom, score, ad in zip(definition.domains, scores.domains, alignments, strict=True)]
    hit = Hit(name=name, acc=acc or None, desc=desc or None,
              sortkey=-scores.lnP if pipeline["inc_by_E"] else float(scores.score), score=scores.score,
              pre_score=scores.pre_score, sum_score=scores.sum_score, lnP=scores.lnP, pre_lnP=scores.pre_lnP,
              sum_lnP=scores.sum_lnP, nexpected=F32(definition.nexpected), nregions=int(definition.nregions),
              nclustered=int(definition.nclustered), noverlaps=int(definition.noverlaps),
              nenvelopes=int(definition.nenvelopes), best_domain=scores.best_domain, domains=domains)
    if pipeline["use_bit_cutoffs"]:
        if target_reportable(pipeline, hit.score, hit.lnP):
            hit.flags |= IS_REPORTED
            if target_includable(pipeline, hit.score, hit.lnP):
                hit.flags |= IS_INCLUDED
        for dom in domains:
            if domain_reportable(pipeline, dom.bitscore, dom.lnP):
                dom.is_reported = True
                if domain_includable(pipeline, dom.bitscore, dom.lnP):
                    dom.is_included = True
    return hit


@dataclass(frozen=True, eq=False)
class HitModel:
    """What of a query model its hits need: the alignment display lines and the Forward tail
    parameters (``evparam[p7_FTAU]``, ``evparam[p7_FLAMBDA]``, float32 values)."""

    lines: ModelLines
    tau: float
    lam: float

    @classmethod
    def from_hmm(cls, hmm, rfv) -> "HitModel":
        """The model of a pyhmmer ``HMM`` whose optimized profile has the match odds ``rfv``."""
        ev = hmm.evalue_parameters
        return cls(lines=ModelLines.from_hmm(hmm, rfv), tau=float(F32(ev.f_tau)), lam=float(F32(ev.f_lambda)))


def pipeline_hit(definition, codes, name: bytes, acc: bytes | None, desc: bytes | None, nullsc, fwdsc,
                 model: HitModel, pipeline: dict, Z: float | None = None, hit_names: tuple | None = None) -> Hit | None:
    """``p7_Pipeline`` after domain definition, on one target: its hit, or None where the
    pipeline adds none (no domain, or not reportable at ``Z``: the pipeline's, or the running
    target count).

    ``definition``: the target's domain definition (:class:`hmmgpu.stages.domaindef.DomainDefinition`:
    ``domains`` with their optimal accuracy ``trace``, ``n2sc_sum`` and the counters);
    ``codes``, ``name``, ``acc``, ``desc``: the target sequence's digital residues and names
    (None or b"": unset); ``nullsc``, ``fwdsc``: its null and Forward parser scores (nats);
    ``pipeline``: the thresholds (:func:`pipeline_settings`; with bit cutoffs, this model's).
    The hit is named after the sequence, or ``hit_names`` (name, accession, description: the
    model's, in hmmscan)."""
    scores = score_target(definition.domains, definition.n2sc_sum, int(np.size(codes)), nullsc, fwdsc, model.tau,
                          model.lam, pipeline["do_null2"])
    if scores is None or not target_reportable(pipeline, scores.score, scores.lnP, Z):
        return None
    alignments = [alidisplay_create(dom.trace, model.lines, codes, name, acc or b"", desc or b"")
                  for dom in definition.domains]
    return target_hit(definition, scores, alignments, *(hit_names or (name, acc, desc)), pipeline)


def sort_order(hits: list) -> list:
    """``p7_tophits_SortBySortkey``: the indices of ``hits`` by decreasing sortkey, then name,
    then the first domain's start (glibc's qsort is a merge sort here: stable)."""
    def key(h):
        first = h.domains[0]
        forward = first.iali < first.jali
        return (-h.sortkey, h.name, 0 if forward else 1, first.iali)

    return sorted(range(len(hits)), key=lambda n: key(hits[n]))


def threshold(hits: list, pipeline: dict) -> tuple:
    """``p7_tophits_Threshold`` on ``hits`` (a search's hit list; flags updated in place):
    reported and included targets, domZ (set in ``pipeline`` when counted from the
    targets), reported and included domains, and the #h74 workaround. Returns
    (nreported, nincluded) targets."""
    if not pipeline["use_bit_cutoffs"]:
        for hit in hits:
            if not hit.flags & IS_DUPLICATE and target_reportable(pipeline, hit.score, hit.lnP):
                hit.flags |= IS_REPORTED
                if target_includable(pipeline, hit.score, hit.lnP):
                    hit.flags |= IS_INCLUDED
    nreported = sum(1 for hit in hits if hit.flags & IS_REPORTED)
    nincluded = sum(1 for hit in hits if hit.flags & IS_INCLUDED)
    if pipeline["domZ_setby"] == 0:  # p7_ZSETBY_NTARGETS
        pipeline["domZ"] = float(nreported)
    if not pipeline["use_bit_cutoffs"]:
        for hit in hits:
            if hit.flags & IS_REPORTED:
                for dom in hit.domains:
                    if domain_reportable(pipeline, dom.bitscore, dom.lnP):
                        dom.is_reported = True
                    if hit.flags & IS_INCLUDED and domain_includable(pipeline, dom.bitscore, dom.lnP):
                        dom.is_included = True
    for hit in hits:
        hit.nreported = sum(dom.is_reported for dom in hit.domains)
        hit.nincluded = sum(dom.is_included for dom in hit.domains)
        if hit.noverlaps:  # workaround_bug_h74
            for d1, dom1 in enumerate(hit.domains):
                for dom2 in hit.domains[d1 + 1:]:
                    if dom1.iali == dom2.iali and dom1.jali == dom2.jali:
                        removed = dom2 if dom1.bitscore >= dom2.bitscore else dom1
                        if removed.is_reported:
                            removed.is_reported = False
                            hit.nreported -= 1
                        if removed.is_included:
                            removed.is_included = False
                            hit.nincluded -= 1
    return nreported, nincluded


# --- serialized state ------------------------------------------------------------------------

def _serialize_domain(dom: HitDomain) -> bytes:
    """``p7_domain_Serialize`` (no per-position scores: protein search) and its display."""
    return DOMAIN_STRUCT.pack(DOMAIN_STRUCT.size, dom.ienv, dom.jenv, dom.iali, dom.jali, 0, 0, dom.envsc,
                              dom.domcorrection, dom.dombias, dom.oasc, dom.bitscore, dom.lnP, int(dom.is_reported),
                              int(dom.is_included), 0) + serialize_alidisplay(dom.alignment)


def serialize_hit(hit: Hit) -> bytes:
    """``p7_hit_Serialize``: the hit, then each of its domains, as one buffer."""
    present = (HIT_HAS_ACCESSION if hit.acc is not None else 0) | (HIT_HAS_DESCRIPTION if hit.desc is not None else 0)
    names = hit.name + b"\0" + (hit.acc + b"\0" if hit.acc is not None else b"") + (
        hit.desc + b"\0" if hit.desc is not None else b"")
    head = HIT_STRUCT.pack(HIT_STRUCT.size + len(names), 0, hit.sortkey, hit.score, hit.pre_score, hit.sum_score,
                           hit.lnP, hit.pre_lnP, hit.sum_lnP, hit.nexpected, hit.nregions, hit.nclustered,
                           hit.noverlaps, hit.nenvelopes, len(hit.domains), hit.flags, hit.nreported, hit.nincluded,
                           hit.best_domain, 0, 0, present)
    return head + names + b"".join(_serialize_domain(dom) for dom in hit.domains)


def pipeline_settings(hmm, **kwargs) -> dict:
    """The ``pipeline`` dictionary of a pyhmmer search state for the model ``hmm`` and the
    ``pyhmmer.plan7.Pipeline`` keyword arguments ``kwargs``: the thresholds, Z and domZ exactly
    as ``p7_pli_NewModel`` sets them for this model (its bit cutoffs, with ``bit_cutoffs``),
    its counters 0. It is the state of a search of no target, which costs nothing."""
    from pyhmmer.easel import DigitalSequenceBlock
    from pyhmmer.plan7 import Pipeline

    pipeline = Pipeline(hmm.alphabet, **kwargs)
    return pipeline.search_hmm(hmm, DigitalSequenceBlock(hmm.alphabet)).__getstate__()["pipeline"]


def tophits_state(hits: list, pipeline: dict) -> dict:
    """``TopHits.__getstate__()`` of a search whose hit list is ``hits`` (in the order the
    targets were searched), after pyhmmer's ``SortBySortkey`` and ``Threshold``: ``pipeline``
    is the state's pipeline dictionary (thresholds, Z, counters), its domZ set by
    :func:`threshold`; the hits' flags are set in place."""
    from pyhmmer.easel import VectorU8

    order = sort_order(hits)
    nreported, nincluded = threshold([hits[n] for n in order], pipeline)
    nalloc = _FIRST_NALLOC
    while nalloc < len(hits):
        nalloc *= 2
    return {
        "_empty": False,
        # pyhmmer's VectorU8 copies a writable buffer at once, a read-only one element by element
        "unsrt": [VectorU8(bytearray(serialize_hit(hit))) for hit in hits],
        "hit": order,
        "Nalloc": nalloc,
        "N": len(hits),
        "nreported": nreported,
        "nincluded": nincluded,
        "is_sorted_by_sortkey": True,
        "is_sorted_by_seqidx": False,
        "pipeline": pipeline,
    }


__all__ = ["pipeline_hit", "HitModel", "score_target", "flogsum", "exp_logsurv", "null2_bias", "DomainScore",
           "TargetScore", "target_reportable", "target_includable", "domain_reportable", "domain_includable",
           "HitDomain", "Hit", "target_hit", "sort_order", "threshold", "serialize_hit", "pipeline_settings",
           "tophits_state", "OMEGA"]
