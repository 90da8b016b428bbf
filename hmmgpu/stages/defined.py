"""The domain definitions a device made for a model's F3 passers, on their way to the post-filter stage.

What it holds
-------------
With hmmgpu's own post-filter (``--postfilter hmmgpu``) on the GPU route, the GPU process
decodes each model's F3 passers (:mod:`hmmgpu.stages.decoded`) and then runs domain definition
on them too: the batched driver (:func:`hmmgpu.stages.domaindef.define_domains_arrays`, every
model of a Forward-gate batch at once, its answer as arrays) with the GPU's stages, in the process that owns the
device (:mod:`hmmgpu.gpu.cascade`). What the
post-filter stage still needs of a definition to form the target's hit
(:func:`hmmgpu.stages.hits.pipeline_hit`) travels here, per target (database index): the
Forward parser's score (float32 nats), the counters ``nregions``, ``nclustered``,
``noverlaps``, ``nenvelopes``, ``nexpected`` and the null2 total ``esl_vec_FSum(n2sc, L+1)``
(the per-residue null2 scores themselves are read by nothing after domain definition), and per
domain (``dcl`` order) ``ienv``, ``jenv``, ``iali``, ``jali``, ``envsc``, ``domcorrection``,
``oasc`` and its optimal accuracy trace (``st``, ``k``, ``i``, ``pp``, target coordinates).
:meth:`DefinedTargets.target` gives a target back as a :class:`SentDefinition`, which
:func:`~hmmgpu.stages.hits.pipeline_hit` takes as it takes a
:class:`~hmmgpu.stages.domaindef.DomainDefinition`.

Which definitions are sent (:func:`split_defined`, :func:`split_defined_grouped`): those whose decoding was OK and whose
stages raised no flag that could send them to the host (:data:`~hmmgpu.stages.forward.HOST`:
RANGE, SUBNORMAL). The device's stages compute in the search's own float mode: hmmsearch's
flush-to-zero on the command line, where every definition is hmmsearch's (marked ``ftz_only``),
the decodings that hold in that mode only (``ftz_only``, :mod:`hmmgpu.stages.decoded`)
included; IEEE arithmetic in a search in pyhmmer's mode, which leaves those decodings to the
host. Every other decoded passer
(its decoding overflowed, or a matrix of its definition was flagged) is sent as its decoding
(:class:`~hmmgpu.stages.decoded.DecodedTargets`) and defined by the post-filter stage as
before, in its float mode.

Why it looks as it does
-----------------------
As with the decodings, a model's definitions are a few flat arrays (``offsets`` say where each
target's domains and each domain's trace start), one pickled message. A trace is about 2.5
rows a residue of its alignment, 13 bytes a row: a Pfam domain of 200 residues some 6.5 KB,
against the 12 bytes a residue of the whole target that its decoding took.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hmmgpu.constants import STATUS_OK
from hmmgpu.stages.decoded import DecodedTargets, find_sorted
from hmmgpu.stages.domaindef import define_domains_arrays, domains_at, ranges_of, scan_targets
from hmmgpu.stages.forward import HOST, SUBNORMAL, TINY_ROWS

__all__ = ["DefinedTargets", "SentDefinition", "split_defined", "split_defined_grouped"]

F32 = np.float32
#: Columns of :attr:`DefinedTargets.counters`.
_NREGIONS, _NCLUSTERED, _NOVERLAPS, _NENVELOPES = range(4)
#: Columns of :attr:`DefinedTargets.totals`.
_NEXPECTED, _N2SC_SUM = range(2)
#: Columns of :attr:`DefinedTargets.bounds` and :attr:`DefinedTargets.domain_scores`.
_IENV, _JENV, _IALI, _JALI = range(4)
_ENVSC, _DOMCORRECTION, _OASC = range(3)


@dataclass
class SentDefinition:
    """A target's domain definition as :class:`DefinedTargets` carries it: what
    :func:`~hmmgpu.stages.hits.pipeline_hit` reads of a
    :class:`~hmmgpu.stages.domaindef.DomainDefinition` (``status`` OK and no flag: only such
    definitions are sent), the null2 total in place of the null2 scores."""

    domains: list
    nregions: int
    nclustered: int
    noverlaps: int
    nenvelopes: int
    nexpected: np.float32
    n2sc_sum: np.float32
    status: int = STATUS_OK
    flags: int = 0


@dataclass
class DefinedTargets:
    """One model's F3 passers as a device defined them (see the module header)."""

    indices: np.ndarray  #: int64 database indices, sorted
    scores: np.ndarray  #: float32: the Forward parser's score (nats)
    counters: np.ndarray  #: int32 [n][4]: nregions, nclustered, noverlaps, nenvelopes
    totals: np.ndarray  #: float32 [n][2]: nexpected, esl_vec_FSum(n2sc)
    domain_offsets: np.ndarray  #: int64 [n+1]: where each target's domains start
    bounds: np.ndarray  #: int32 [D][4]: ienv, jenv, iali, jali
    domain_scores: np.ndarray  #: float32 [D][3]: envsc, domcorrection, oasc
    trace_offsets: np.ndarray  #: int64 [D+1]: where each domain's trace starts
    st: np.ndarray  #: uint8: every trace's states, one after the other
    k: np.ndarray  #: int32
    i: np.ndarray  #: int32
    pp: np.ndarray  #: float32
    ftz_only: np.ndarray  #: bool: defined from a decoding that is hmmsearch's (flush-to-zero) only

    @classmethod
    def of_batch(cls, batch, positions, indices, scores, ftz_only=None) -> "DefinedTargets":
        """The targets at ``positions`` of the driver's answer ``batch`` (a
        :class:`~hmmgpu.stages.domaindef.DefinedBatch`; their definitions' status OK), with their
        database ``indices`` and Forward ``scores``, in any order (``ftz_only`` None: all False)."""
        indices = np.asarray(indices, np.int64).reshape(-1)
        order = np.argsort(indices, kind="stable")
        chosen = np.asarray(positions, np.int64).reshape(-1)[order]
        domains, domain_offsets = ranges_of(batch.domain_offsets, chosen)
        traces, trace_offsets = ranges_of(batch.trace_offsets, domains)
        return cls(indices=indices[order], scores=np.asarray(scores, F32).reshape(-1)[order],
                   counters=batch.counters[chosen].astype(np.int32).reshape(-1, 4),
                   totals=np.stack([batch.nexpected[chosen].astype(F32),
                                    np.array([batch.n2sc_sum(t) for t in chosen.tolist()], F32)], axis=1).reshape(-1, 2),
                   domain_offsets=domain_offsets, bounds=batch.bounds[domains].astype(np.int32).reshape(-1, 4),
                   domain_scores=batch.domain_scores[domains].astype(F32).reshape(-1, 3), trace_offsets=trace_offsets,
                   st=batch.st[traces].astype(np.uint8), k=batch.k[traces].astype(np.int32),
                   i=batch.i[traces].astype(np.int32), pp=batch.pp[traces].astype(F32),
                   ftz_only=(np.zeros(indices.size, bool) if ftz_only is None
                             else np.asarray(ftz_only, bool).reshape(-1)[order]))

    def __len__(self) -> int:
        return int(self.indices.size)

    @property
    def nbytes(self) -> int:
        """The arrays' bytes (what the message carries, less pickle's few framing bytes)."""
        return sum(a.nbytes for a in (self.indices, self.scores, self.counters, self.totals, self.domain_offsets,
                                      self.bounds, self.domain_scores, self.trace_offsets, self.st, self.k, self.i,
                                      self.pp, self.ftz_only))

    def find(self, index: int) -> int:
        """The position of database index ``index`` here, or -1."""
        return int(find_sorted(self.indices, [index])[0])

    def find_all(self, indices) -> np.ndarray:
        """:meth:`find` of each database index of ``indices`` (int64 array)."""
        return find_sorted(self.indices, indices)

    def target(self, k: int) -> tuple:
        """(Forward score, :class:`SentDefinition`) of the target at position ``k``."""
        domains = domains_at(self, k)
        counters, totals = self.counters[k].tolist(), self.totals[k]
        return self.scores[k], SentDefinition(
            domains=domains, nregions=counters[_NREGIONS], nclustered=counters[_NCLUSTERED],
            noverlaps=counters[_NOVERLAPS], nenvelopes=counters[_NENVELOPES], nexpected=totals[_NEXPECTED],
            n2sc_sum=totals[_N2SC_SUM])


def split_defined(stages, codes_of, decoded: DecodedTargets) -> tuple:
    """Domain definition of a model's decoded passers (``decoded``; ``codes_of(index)``: a
    target's digital residues) with ``stages`` (the model's
    :class:`~hmmgpu.stages.domaindef.DomainStages`), every OK decoding in one batch of the
    driver: (:class:`DefinedTargets` of the definitions no HOST flag marks,
    :class:`~hmmgpu.stages.decoded.DecodedTargets` of the other passers, their decodings as
    they came)."""
    return split_defined_grouped([(stages, decoded)], codes_of)[0]


def split_defined_grouped(work, codes_of, in_ftz: bool = False, clustered: bool = True,
                          counts: dict | None = None) -> list:
    """:func:`split_defined` of several models at once: ``work`` (stages, decoded) pairs, the
    stages of one class; every model's OK decodings defined in one call of the driver
    (:func:`~hmmgpu.stages.domaindef.define_domains_arrays`), the definitions sent taken from its
    arrays (:meth:`DefinedTargets.of_batch`). ``in_ftz``: the stages compute in
    hmmsearch's float mode, the search's own (the command line's): every OK decoding is defined,
    those that hold in that mode only (``ftz_only``) included, and every definition is
    hmmsearch's (its flags for what that mode changes dropped) and marked ``ftz_only``. Without
    it the stages compute in IEEE arithmetic, as a search in pyhmmer's mode does, and a decoding
    marked ``ftz_only`` is left with the rest (that search's host takes no entry so marked).
    ``clustered`` False: a passer whose region scan finds a clustered region (its definition
    would sample a stochastic-trace ensemble) is not defined but left with the rest, and
    ``counts``, if given, gets their number added (``left_clustered``). A (defined, rest) pair
    per model, in order."""
    work = list(work)
    oks = [np.flatnonzero((decoded.status == STATUS_OK) & (in_ftz | ~np.asarray(decoded.ftz_only, bool))).tolist()
           for _, decoded in work]
    if not clustered:
        scans = [scan_targets([decoded.target(k)[1] for k in ok]) for ok, (_, decoded) in zip(oks, work)]
        simple = [[k for k, (_, clustered_regions) in zip(ok, found) if not clustered_regions.any()]
                  for ok, found in zip(oks, scans)]
        if counts is not None:
            counts["left_clustered"] = counts.get("left_clustered", 0) + sum(map(len, oks)) - sum(map(len, simple))
        oks = simple
    chosen = [m for m, ok in enumerate(oks) if ok]
    batch = define_domains_arrays([(work[m][0], [(codes_of(int(work[m][1].indices[k])), work[m][1].target(k)[1])
                                                for k in oks[m]]) for m in chosen])
    if in_ftz:   # computed in hmmsearch's float mode itself (RANGE, a real error, stays)
        batch.flags &= ~(SUBNORMAL | TINY_ROWS)
    starts = dict(zip(chosen, np.cumsum([0] + [len(oks[m]) for m in chosen]).tolist()))
    return [_split(decoded, oks[m], batch, starts.get(m, 0), decoded.ftz_only | in_ftz)
            for m, (_, decoded) in enumerate(work)]


def _split(decoded: DecodedTargets, ok: list, batch, start: int, ftz_only: np.ndarray) -> tuple:
    """(defined, rest) of one model: the definitions of its OK decodings ``ok`` (the targets of
    ``batch``, the driver's answer, from ``start`` on) that no HOST flag marks, and its other
    passers' decodings; ``ftz_only`` (bool per decoding) marks the definitions that hold in
    hmmsearch's float mode only."""
    ok = np.asarray(ok, np.int64)
    at = start + np.arange(ok.size, dtype=np.int64)
    sent = (batch.status[at] == STATUS_OK) & ((batch.flags[at] & HOST) == 0) if ok.size else np.zeros(0, bool)
    kept = np.setdiff1d(np.arange(len(decoded), dtype=np.int64), ok[sent]).tolist()
    indices = decoded.indices.tolist()
    targets = [decoded.target(k) for k in kept]
    rest = DecodedTargets.gather([indices[k] for k in kept], [score for score, _ in targets],
                                 [decoding[0] for _, decoding in targets], *(
                                     [decoding[n] for _, decoding in targets] for n in (1, 2, 3)),
                                 ftz_only=decoded.ftz_only[kept])
    defined = DefinedTargets.of_batch(batch, at[sent], decoded.indices[ok[sent]], decoded.scores[ok[sent]],
                                      ftz_only=ftz_only[ok[sent]])
    return defined, rest
