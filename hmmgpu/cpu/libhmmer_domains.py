"""Domain definition by libhmmer itself, from parser rows a GPU computed.

What it computes
----------------
``p7_Pipeline`` after the Forward filter, on the F3 passers of a filtered task whose two parsers'
special-state rows the GPU process sent (:class:`~hmmgpu.stages.parsed.ParsedTargets`, on the
default route with :data:`hmmgpu.gpu.runtime.tuning.GATE_PARSER_ROWS`): for each target

1. ``p7_domaindef_ByPosteriorHeuristics`` in libhmmer (the ``liblibhmmer`` pyhmmer ships),
   the rows copied into the model's parser matrices (:meth:`hmmgpu.cpu.hmmerlib.HmmerModel.define_from_rows`):
   decoding, regions, stochastic-trace clustering, envelope rescoring and the alignment
   displays are HMMER's own code, run as ``p7_Pipeline`` runs them;
2. the target's scores and hit as ``p7_Pipeline`` forms them from that definition, its null
   score and the GPU's Forward score (:func:`hmmgpu.stages.hits.score_target`,
   :func:`~hmmgpu.stages.hits.target_hit`; the displays as ``p7_alidisplay_Serialize`` wrote them).

What it saves is the CPU's two parsers (and the three filters a filtered task's pipeline still
runs on each target with ``F1 = F2 = 1``): on the development machine 0.55 ms of C a passer
against pyhmmer's 0.78 ms for its whole pipeline on the same passers (756 passers of 30 Pfam
models), plus about 0.075 ms of Python a passer here.

Why it looks as it does
-----------------------
A model's libhmmer structures (:class:`~hmmgpu.cpu.hmmerlib.HmmerModel`: the configured
profile, the parser and full matrices, one ``P7_DOMAINDEF`` reused target after target) are
made once per query and worker thread, taken from a pool for a task and put back after it, and
freed when the query's results are merged (:meth:`ParsedPassers.release`): a task of a model's
passers is a few dozen targets, so per-task set-up would cost as much as its work. Every C call
goes through ctypes, which releases the interpreter's lock, so the worker threads run libhmmer
at the same time; the Python around the calls holds it.

The search's float mode is the worker thread's (hmmsearch's flush-to-zero on the command line):
the rows are sent as IEEE arithmetic computed them, and in hmmsearch's mode a row's tiny values
are 0 (:meth:`~hmmgpu.stages.parsed.ParsedTargets.target`). With ``--seed 0`` HMMER draws domain
definition's random numbers from one generator that is never reseeded, which a target-by-target
split cannot reproduce: such a search runs every task on pyhmmer's pipeline
(:meth:`hmmgpu.cpu.pyhmmer_stage.PyhmmerStage.run`).
"""
from __future__ import annotations

import threading

import numpy as np

from hmmgpu.constants import STATUS_OK
from hmmgpu.stages.hits import pipeline_settings, score_target, target_hit, target_reportable
from hmmgpu.stages.postfilter import TargetOutcome

__all__ = ["ParsedPassers"]

F32 = np.float32


class _Query:
    """What the targets of one query need: its hit settings and Forward tail parameters, and a
    pool of its libhmmer structures (one per worker thread at a time)."""

    def __init__(self, hmm, options):
        self.hmm = hmm
        self.settings = pipeline_settings(hmm, **options.pipeline_kwargs(F1=1.0, F2=1.0))
        ev = hmm.evalue_parameters
        self.tau, self.lam = float(F32(ev.f_tau)), float(F32(ev.f_lambda))
        self.free: list = []
        self.made: list = []


class ParsedPassers:
    """Domain definition and hits of the F3 passers the GPU parsed (see the module header), for
    the worker threads of one post-filter stage."""

    def __init__(self, db, options, ftz: bool):
        self.db = db
        self.options = options
        self.ftz = ftz
        self._queries: dict = {}
        self._lock = threading.Lock()
        self.counts = dict(rows_defined=0, rows_host=0)

    def _query(self, query) -> _Query:
        made = self._queries.get(query.index)
        if made is None:
            made = _Query(query.hmm, self.options)   # outside the lock: it runs a search of no target
            with self._lock:
                made = self._queries.setdefault(query.index, made)
        return made

    def settings(self, query) -> dict:
        """The query's pipeline settings of a filtered task (``F1 = F2 = 1``)."""
        return self._query(query).settings

    def targets(self, query, positions: list, parsed, Z: float | None) -> tuple:
        """``p7_Pipeline`` from the Forward filter on, on the targets at ``positions`` of one
        query: (each target's :class:`~hmmgpu.stages.postfilter.TargetOutcome`, its hit or None).
        A target ``parsed`` holds is PASSED (the gate passed it), defined here; the others are
        HOST (pyhmmer's pipeline decides them), as is one whose decoding overflowed (for which
        ``p7_Pipeline`` fails). ``Z``: the pipeline's for the keep rule (None: the settings')."""
        from hmmgpu.cpu.hmmerlib import HmmerModel

        q = self._query(query)
        with self._lock:
            model = q.free.pop() if q.free else None
        if model is None:
            model = HmmerModel(q.hmm)
            with self._lock:
                q.made.append(model)
        db, seed, do_null2, settings = self.db, self.options.seed, q.settings["do_null2"], q.settings
        outcomes, hits = [], []
        try:
            for position in positions:
                k = parsed.find(position)
                if k < 0:
                    outcomes.append(TargetOutcome.HOST)
                    hits.append(None)
                    continue
                fwdsc, fwd_rows, bwd_rows, own = parsed.target(k, self.ftz)
                codes = db.codes(position)
                name, acc, desc = db.name(position), db.accession(position) or None, db.description(position) or None
                status, nullsc, got = model.define_from_rows(codes, fwd_rows, bwd_rows, own, seed, name, acc, desc)
                if status != STATUS_OK:
                    outcomes.append(TargetOutcome.HOST)
                    hits.append(None)
                    continue
                definition, displays = got
                scores = score_target(definition.domains, definition.n2sc_sum, int(codes.size), nullsc, fwdsc, q.tau,
                                      q.lam, do_null2)
                outcomes.append(TargetOutcome.PASSED)
                hits.append(None if scores is None or not target_reportable(settings, scores.score, scores.lnP, Z)
                            else target_hit(definition, scores, displays, name, acc, desc, settings))
        finally:
            with self._lock:
                q.free.append(model)
        defined = outcomes.count(TargetOutcome.PASSED)
        with self._lock:
            self.counts["rows_defined"] += defined
            self.counts["rows_host"] += len(outcomes) - defined
        return outcomes, hits

    def release(self, query) -> None:
        """Free the query's libhmmer structures (its results are being merged: no task of it is left)."""
        with self._lock:
            q = self._queries.pop(query.index, None)
        if q is not None:
            for model in q.made:
                model.close()

    def details(self) -> dict:
        """The F3 passers defined here from the GPU's rows, and the targets of such tasks left
        to pyhmmer's pipeline."""
        with self._lock:
            return dict(self.counts)
