"""hmmgpu's own post-filter stage: ``p7_Pipeline`` from the Forward filter on, with hmmgpu's code.

What it computes
----------------
The second implementation of :class:`~hmmgpu.stages.protocol.PostFilterStage`. A *filtered*
task (a query and some of the targets its filters passed, planned by
:mod:`hmmgpu.stages.postfilter`) is run target by target as ``p7_Pipeline`` runs it after the
Viterbi filter (HMMER 3.4 ``src/p7_pipeline.c``), every step by hmmgpu's exact code:

1. the null score ``p7_bg_NullOne`` (:func:`~hmmgpu.stages.profiles.null_table`);
2. the Forward parser, its score and special-state rows (:func:`hmmgpu.cpu.fwdback.parse`,
   the lane-exact CPU reference; the GPU gate's score, where it has one, is the same number);
3. the Forward filter (F3), for the targets the gate left undecided only: the score against
   the bias filter's ``filtersc`` (:func:`hmmgpu.cpu.filters.bias_filter`; the null score
   with ``--nobias``), decided as the gate decides (:func:`~hmmgpu.stages.stats.passes_exponential`);
   the gate's passers passed it already;
4. the Backward parser's rows (:func:`hmmgpu.cpu.fwdback.backward`);
5. ``p7_DomainDecoding`` (:func:`hmmgpu.stages.domaindef.domain_decoding`), and domain
   definition of all the task's F3 passers at once (the batched driver,
   :func:`hmmgpu.stages.domaindef.define_domains_batched`, each target's definition as if
   alone) with the CPU stage functions :class:`~hmmgpu.cpu.domaindef.CpuDomainStages`,
   seeded with ``--seed``;
6. the target's scores and hit (:func:`hmmgpu.stages.hits.pipeline_hit`), and the task's
   hits as the ``TopHits`` state pyhmmer's pipeline gives for the same task
   (:func:`hmmgpu.stages.hits.tophits_state`, with the counters ``p7_Pipeline`` keeps: a
   filtered task runs with ``F1 = F2 = 1``, so every target counts past MSV, bias and
   Viterbi, and ``n_past_fwd`` counts the F3 passers), the hits HMMER's keep rule would drop
   at their global positions removed (:func:`~hmmgpu.stages.merge.drop_unkept`), ready for
   the exact merge.

On the GPU route the GPU process has done steps 2 and 4 and ``p7_DomainDecoding`` already for
the F3 passers it could promise bit for bit (:mod:`hmmgpu.gpu.cascade`): the query's cascade
result carries their Forward scores and decodings (:class:`~hmmgpu.stages.decoded.DecodedTargets`),
The device left out every target whose parsers or decoding raised a flag that could matter in
either float mode. The decoding kernel computes in hmmsearch's arithmetic: a decoding (and the
definition made from it) that holds in that mode only (``ftz_only``: the kernel flushed a tiny
value) is taken in hmmsearch's mode and left to pyhmmer's pipeline in pyhmmer's. The GPU process has
also run step 5 on its decoded passers, with the GPU's stages
(:class:`hmmgpu.gpu.domaindef.GpuDomainStages`, seeded with ``--seed``), and sent the
definitions no exactness flag marks (:class:`~hmmgpu.stages.defined.DefinedTargets`) in place
of their decodings: for those only step 6 runs here. On that route a target the GPU did not
decode (the gate left it undecided, over its cost cap: 0.02% of the F3 passers of Pfam models
against real proteins), and a decoded passer whose definition on the GPU raised a flag
(none in the measured runs since its definitions compute in hmmsearch's float mode where it
matters), goes to pyhmmer's pipeline, as on the default route, rather than through steps 2-5
here: pyhmmer's SIMD code does in about 3 ms what the serial references take some 20 ms for (measured on an H100 machine: such targets of
150 Pfam models cost the references most of their 113 s of CPU; on an H200, 600 Pfam models
x 29 M residues, defining the 2,245 flagged passers here cost 73 of the worker threads' 115 s
of CPU, where pyhmmer's pipeline took 22 s for 6,812 targets). Without a GPU every step runs
here, the references being the stage.

Everything else is pyhmmer's pipeline, whose stage (:class:`~hmmgpu.cpu.pyhmmer_stage.PyhmmerStage`)
this one extends: the plan and the merge, the tasks over ranges of targets (pyhmmer's whole
pipeline: head starts, models routed past the filters), and every target that hmmgpu's code
cannot promise bit for bit. Such a target is sent to pyhmmer's pipeline alone (with the
task's Z, as part of the task) and counted (:meth:`OwnPostFilter.details`):

* a reference raised RANGE (libhmmer's eslERANGE: a non-finite or zero score) in the Forward
  or Backward parser or in any matrix of domain definition;
* domain decoding overflowed (HMMER's pipeline then fails; pyhmmer raises its error);
* every target of a model whose tables the flags' argument does not cover
  (:meth:`~hmmgpu.stages.forward.ForwardTables.exactness_conditions`);
* on the GPU route, every target the GPU did not decode, and every decoded passer the GPU
  process defined with a flag raised (above).

With ``--seed 0`` HMMER draws domain definition's random numbers from one generator of an
arbitrary seed that is never reseeded; the CPU references reseed at every region, so such a
search runs its tasks on pyhmmer's pipeline (its output is not reproducible anyway).

Why the code looks as it does
-----------------------------
hmmsearch computes with SSE flush-to-zero on, pyhmmer with IEEE subnormals. The references
do HMMER's float operations one by one as scalar SSE operations, which flush under the same
MXCSR bit as HMMER's vector ones, so this stage runs them in the run's own float mode: in
hmmsearch's (``ftz``, the command line's) the worker thread's flush-to-zero stays on and the
references give hmmsearch's values themselves, their exactness flags (which say where the two
modes could differ) notwithstanding. Measured: the parsers' rows and scores and the whole
domain definition, run so, equal libhmmer's under flush-to-zero on every top hit checked of
PF00001, PF07690, PF00005, PF00133, PF00096 and more (benchmarks/results/ftz_references_2026-11-28.log),
nearly all of them flagged. The GPU's decoding kernel computes in hmmsearch's arithmetic and marks
the decodings that hold in that mode only; its other kernels compute in IEEE arithmetic and flag
what could differ.

Domain definition runs on a task's F3 passers together so that a device can take them as
batches (all clustered regions in one launch, all envelopes in one); its stages here are the
CPU references' on every route. The GPU's (:class:`hmmgpu.gpu.domaindef.GpuDomainStages`) take
those batches in the GPU process (:mod:`hmmgpu.gpu.process`), which owns the device and made
the decodings: the same driver (:func:`~hmmgpu.stages.domaindef.define_domains_grouped`) runs
there on the decoded passers of a batch's models (:meth:`hmmgpu.gpu.cascade.GpuCascade.define_domains_of`), and
this stage defines only the passers that process did not. (The GPU's stages equal the CPU
stages bit for bit under numba's CUDA simulator, tests/gpu; their equality on a GPU is what
``pytest -m gpu`` of tests/gpu/test_own_postfilter_gpu.py and test_domaindef_stages.py confirm.)

A task with targets sent to pyhmmer is cut into runs of consecutive targets, each run's
state made by one side, and the runs' states joined by pyhmmer's own ``TopHits.merge`` (the
exact merge the search uses for its tasks), so that the hits stay in search order; its
``Nalloc`` is then set to what one pyhmmer run over the task would hold. Its reporting
flags and ``domZ`` are those of the joined hits: the query's final merge sets them again.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np

from hmmgpu.constants import STATUS_OK
from hmmgpu.cpu.domaindef import CpuDomainStages
from hmmgpu.cpu.fwdback import RANGE, ForwardTables, backward, length_specials, parse
from hmmgpu.cpu.pyhmmer_stage import PyhmmerStage
from hmmgpu.stages.domaindef import define_domains_batched, domain_decoding
from hmmgpu.stages.hits import HitModel, pipeline_hit, pipeline_settings, tophits_state
from hmmgpu.stages.merge import drop_unkept
from hmmgpu.stages.postfilter import Task, TaskResult

__all__ = ["OwnPostFilter", "QueryModel", "TargetOutcome", "warm"]

F32 = np.float32
#: ``p7_zsetby_e``: Z set by an option (a task's fixed Z).
_ZSETBY_OPTION = 1
#: ``p7_tophits_Create``'s first allocation of a hit list (doubled as it fills).
_FIRST_NALLOC = 256


@dataclass(frozen=True, eq=False)
class QueryModel:
    """What the stage needs of one query model, made once: its Forward ``tables`` (HMMER's
    optimized profile, multihit local), the :class:`~hmmgpu.stages.hits.HitModel` (display
    lines, Forward tail parameters), the pipeline ``settings`` of a filtered task
    (:func:`~hmmgpu.stages.hits.pipeline_settings` with ``F1 = F2 = 1``), the domain
    definition ``stages`` and whether the flags' argument ``covers`` the tables."""

    tables: ForwardTables
    hit_model: HitModel
    settings: dict
    stages: CpuDomainStages
    covered: bool

    @classmethod
    def of(cls, hmm, options) -> "QueryModel":
        from hmmgpu.stages.profiles import configured_profile

        tables = ForwardTables.from_optimized(configured_profile(hmm).to_optimized())
        settings = pipeline_settings(hmm, **options.pipeline_kwargs(F1=1.0, F2=1.0))
        return cls(tables=tables, hit_model=HitModel.from_hmm(hmm, tables.rfv), settings=settings,
                   stages=CpuDomainStages(tables, seed=options.seed),
                   covered=tables.exactness_conditions() is None)


class TargetOutcome:
    """What became of a target of a filtered task (:meth:`OwnPostFilter.target`)."""

    FAILED = "failed"  #: an undecided target that failed F3 here
    PASSED = "passed"  #: passed F3 (its hit, if any, made here)
    HOST = "host"  #: sent to pyhmmer's pipeline: hmmgpu's code cannot promise it bit for bit


def _allocated(n: int) -> int:
    """A hit list's ``Nalloc`` after ``n`` hits were added to a new one."""
    nalloc = _FIRST_NALLOC
    while nalloc < n:
        nalloc *= 2
    return nalloc


class OwnPostFilter(PyhmmerStage):
    """The post-filter stage on hmmgpu's own code for filtered tasks (see the module header);
    pyhmmer's pipeline (:class:`PyhmmerStage`, which it extends) for the rest."""

    def __init__(self, db, options, ftz: bool = False, threads: int = 0, model_lengths=None):
        super().__init__(db, options, ftz=ftz, threads=threads, model_lengths=model_lengths)
        self._models: dict = {}
        self._profiles: dict = {}
        self._counts_lock = threading.Lock()
        #: targets of filtered tasks by what became of them (:class:`TargetOutcome`), the targets
        #: of whole tasks left to pyhmmer (``--seed 0``, a model the flags do not cover), and the
        #: CPU seconds of the own targets
        self.counts = {TargetOutcome.PASSED: 0, TargetOutcome.FAILED: 0, TargetOutcome.HOST: 0, "whole_tasks": 0,
                       "decoded_on_gpu": 0, "defined_on_gpu": 0}
        self.own_seconds = 0.0
        #: the hits' display code readied beside the search's start (:func:`_warm_display`)
        self._warming = None
        if db is not None and len(db.lengths):
            self._warming = threading.Thread(target=_warm_display, args=(db,), name="hmmgpu-warm-display", daemon=True)
            self._warming.start()

    # ------------------------------------------------------------ per query
    def _model(self, query) -> QueryModel:
        """The query's :class:`QueryModel`, made once (outside the lock, which every task's end
        takes: made under it, a model held up the other worker threads, 551 of their 9,579 py-spy
        samples in a run of 600 Pfam models on the GPU route; two threads may both make it)."""
        model = self._models.get(query.index)
        if model is None:
            made = QueryModel.of(query.hmm, self.options)
            with self._counts_lock:
                model = self._models.setdefault(query.index, made)
        return model

    def filter_profile(self, query):
        """The query's filter tables (:class:`~hmmgpu.stages.profiles.ModelProfile`), for the
        bias filter's score of an undecided target: the backend's, or made here (the GPU
        process keeps its own)."""
        from hmmgpu.stages.profiles import ModelProfile

        if isinstance(query.profile, ModelProfile):
            return query.profile
        profile = self._profiles.get(query.index)
        if profile is None:
            profile = ModelProfile.from_hmm(query.hmm)
            with self._counts_lock:
                profile = self._profiles.setdefault(query.index, profile)
        return profile

    def merge(self, query, results: list, counts=None) -> tuple:
        with self._counts_lock:
            self._models.pop(query.index, None)
            self._profiles.pop(query.index, None)
        return super().merge(query, results, counts)

    # ------------------------------------------------------------ per target
    def target(self, query, model: QueryModel, position: int, decided: bool, Z: float | None,
               device: tuple | None = None) -> tuple:
        """``p7_Pipeline`` from the Forward filter on, on the target at ``position``: :meth:`targets`
        of one target, (:class:`TargetOutcome`, its hit or None)."""
        return self.targets(query, model, [position], [decided], Z, [device])[0]

    def targets(self, query, model: QueryModel, positions, decided, Z: float | None, devices,
                defined=None, gpu_route: bool = False, gpu_defined: bool = False) -> list:
        """``p7_Pipeline`` from the Forward filter on, on the targets at ``positions`` of one query
        (``decided``: whether the gate passed each), in the calling thread's float mode (module
        header): (:class:`TargetOutcome`, its hit or None) for each. ``Z``: the pipeline's for the
        keep rule (None: the settings'); ``devices``: for each target, (Forward score, decoding)
        that the GPU computed for this F3 passer (:meth:`~hmmgpu.stages.decoded.DecodedTargets.target`)
        in place of the parsers here, or None; ``defined``: for each target, (Forward score,
        definition) that the GPU process defined (:meth:`~hmmgpu.stages.defined.DefinedTargets.target`)
        in place of the parsers and domain definition here, or None (None: none defined). Domain
        definition runs on all the other F3 passers at once
        (:func:`~hmmgpu.stages.domaindef.define_domains_batched`); with ``gpu_route`` (the GPU
        decoded the query's passers) a target the GPU neither decoded nor defined is left to
        pyhmmer's pipeline (HOST) instead of the parsers here, and with ``gpu_defined`` (the GPU
        process defined the query's decoded passers) so is a decoded passer it did not define
        (its definition raised a flag) instead of domain definition here."""
        from hmmgpu.stages.profiles import null_table

        out = [None] * len(positions)
        defined = defined or [None] * len(positions)
        passers = []   # [k, position, codes, nullsc, Forward score, decoding, then definition]: in order
        for k, (position, known, device) in enumerate(zip(positions, decided, devices)):
            if defined[k] is None and ((device is None and gpu_route) or (device is not None and gpu_defined)):
                out[k] = (TargetOutcome.HOST, None)
                continue
            codes = self.db.codes(position)
            L = int(codes.size)
            nullsc = null_table(L)[L]
            if defined[k] is not None:
                passers.append([k, position, codes, nullsc, *defined[k]])
                continue
            if device is None:
                outcome, fwdsc, decoding = self._decoded_here(query, model, position, codes, known, nullsc)
                if outcome is not None:
                    out[k] = (outcome, None)
                    continue
            else:
                fwdsc, decoding = device
            passers.append([k, position, codes, nullsc, fwdsc, decoding])
        here = [p for p in passers if defined[p[0]] is None]
        for p, definition in zip(here, define_domains_batched(model.stages, [(p[2], p[5]) for p in here])):
            p[5] = definition
        for k, position, codes, nullsc, fwdsc, definition in passers:
            if definition.status != STATUS_OK or definition.flags & RANGE:
                out[k] = (TargetOutcome.HOST, None)
                continue
            out[k] = (TargetOutcome.PASSED, pipeline_hit(definition, codes, self.db.name(position),
                                                         self.db.accession(position), self.db.description(position),
                                                         nullsc, fwdsc, model.hit_model, model.settings, Z))
        return out

    def _decoded_here(self, query, model: QueryModel, position: int, codes, decided: bool, nullsc) -> tuple:
        """The Forward filter and ``p7_DomainDecoding`` of a target with the CPU references'
        parsers: (None, Forward score, decoding as :func:`~hmmgpu.stages.domaindef.domain_decoding`
        gives it), or (:class:`TargetOutcome`, None, None) for a target that ends before domain
        definition."""
        tables = model.tables
        forward = parse(tables, codes)
        if forward.flags & RANGE:
            return TargetOutcome.HOST, None, None
        if not decided and not self._passes_f3(query, model, position, forward.score, nullsc):
            return TargetOutcome.FAILED, None, None
        bck = backward(tables, codes, forward)
        if (bck.flags | bck.forward_flags) & RANGE:
            return TargetOutcome.HOST, None, None
        _, ploop = length_specials(codes.size)
        return None, forward.score, domain_decoding(forward.xmx, bck.xmx, bck.has_own_scales, ploop)

    def _passes_f3(self, query, model: QueryModel, position: int, fwdsc, nullsc) -> bool:
        """``p7_Pipeline``'s Forward filter on a target the gate left undecided."""
        from hmmgpu.stages import stats

        if self.options.bias_filter:
            from hmmgpu.cpu.filters import bias_filter

            filtersc = bias_filter(self.filter_profile(query), self.db, np.array([position], np.int64))
        else:
            filtersc = np.array([nullsc], F32)
        tau, lam = model.hit_model.tau, model.hit_model.lam
        return bool(stats.passes_exponential(np.array([fwdsc], F32), filtersc, tau, lam, self.options.F3)[0])

    # ------------------------------------------------------------ per task
    def run(self, task: Task, alone: bool = False) -> TaskResult:
        """One task's result: a filtered task on hmmgpu's code (see the module header), any
        other on pyhmmer's pipeline."""
        if not task.filtered or not task.positions.size:
            return super().run(task, alone)
        if self.options.seed == 0:
            return self._whole(task, alone)
        from hmmgpu.host import set_flush_to_zero

        start = time.thread_time()
        decided = self._decided(task)
        positions = task.positions.tolist()
        # the GPU's, for the F3 passers it did not flag: decodings, and definitions made in its
        # process (with the query's filters, or for this task after all the filters)
        sent = task.device_answers or tuple(getattr(task.query.counts, name, None) for name in ("decoded", "defined"))
        devices, defined = (_sent(got, positions, self.ftz) for got in sent)
        if sent[0] is not None and decided.all() and devices.count(None) == len(devices) == defined.count(None):
            # passers the GPU decoded and defined none of (a gate batch it declined): every one
            # goes to pyhmmer's pipeline, as :meth:`targets` would send it, without the model
            # (a model the flags do not cover has no decided target: it takes the path below)
            state = self._pyhmmer_state(task, task.positions)
            with self._counts_lock:
                self.counts[TargetOutcome.HOST] += len(positions)
            return TaskResult(state, cpu_seconds=time.thread_time() - start, filtered=True)
        model = self._model(task.query)
        if not model.covered:
            return self._whole(task, alone)
        Z = float(task.z_fixed) if self.by_position else None   # as pyhmmer's pipeline runs the task
        on_device = sum(device is not None for device in devices)
        on_device_defined = sum(d is not None for d in defined)
        previous = set_flush_to_zero(self.ftz)   # the run's own float mode (module header)
        try:
            results = self.targets(task.query, model, positions, decided.tolist(), Z, devices, defined,
                                   gpu_route=sent[0] is not None, gpu_defined=sent[1] is not None)
        finally:
            set_flush_to_zero(previous)
        outcomes = [outcome for outcome, _ in results]
        hits = [hit for _, hit in results]
        own_seconds = time.thread_time() - start
        states = [self._run_state(task, model, outcomes[a:b], hits[a:b], task.positions[a:b])
                  if outcomes[a] != TargetOutcome.HOST else self._pyhmmer_state(task, task.positions[a:b])
                  for a, b in _runs(outcomes)]
        with self._counts_lock:
            for outcome in outcomes:
                self.counts[outcome] += 1
            self.counts["decoded_on_gpu"] += on_device + on_device_defined
            self.counts["defined_on_gpu"] += on_device_defined
            self.own_seconds += own_seconds
        return TaskResult(_joined(task.query.hmm, states), cpu_seconds=time.thread_time() - start, filtered=True)

    def close(self, now: bool = False) -> None:
        """The display's warm-up waited for (unless ``now``), so that no thread of the stage
        outlives the search."""
        if self._warming is not None and not now:
            self._warming.join()
        super().close(now)

    def _whole(self, task: Task, alone: bool) -> TaskResult:
        """A filtered task on pyhmmer's pipeline whole (``--seed 0``, a model the flags do not cover)."""
        with self._counts_lock:
            self.counts["whole_tasks"] += int(task.positions.size)
        return super().run(task, alone)

    @staticmethod
    def _decided(task: Task) -> np.ndarray:
        """Whether the Forward gate decided each of the task's targets (the rest it left undecided)."""
        gate = getattr(task.query.counts, "forward", None)
        return ~np.isin(task.positions, gate.unsure) if gate is not None else np.zeros(task.positions.size, bool)

    def passers_to_define(self, task: Task):
        """A filtered task's F3 passers (those the gate decided) when the GPU process decoded
        its query's passers and defined none of them (its gate batch declined for want of room:
        tuning.DEFINE_BACKLOG_PASSERS) and this stage would define them itself (not ``--seed 0``,
        a model the exactness flags cover); else None (:meth:`PostFilterStage.passers_to_define`)."""
        counts = task.query.counts
        if (not task.filtered or task.device_answers is not None or self.options.seed == 0
                or getattr(counts, "decoded", None) is None or getattr(counts, "defined", None) is not None):
            return None
        passers = task.positions[self._decided(task)]
        return passers if passers.size and self._model(task.query).covered else None

    def _pyhmmer_state(self, task: Task, positions: np.ndarray) -> dict:
        """The state of pyhmmer's pipeline over some of the task's targets (with the task's Z)."""
        return super().run(Task(query=task.query, positions=positions, z_fixed=task.z_fixed, filtered=True,
                                part=task.part)).state

    def _run_state(self, task: Task, model: QueryModel, outcomes: list, hits: list, positions: np.ndarray) -> dict:
        """The ``TopHits`` state of a run of the task's targets done here, as pyhmmer's
        pipeline gives it (:class:`PyhmmerStage`'s ``run``): its counters, the hits kept."""
        pipeline = dict(model.settings)
        n = int(positions.size)
        pipeline.update(nseqs=n, nres=int(self.db.lengths[positions].sum()), n_past_msv=n, n_past_bias=n,
                        n_past_vit=n, n_past_fwd=sum(o == TargetOutcome.PASSED for o in outcomes),
                        n_output=0, pos_output=0)
        if self.by_position:
            pipeline.update(Z=float(task.z_fixed), Z_setby=_ZSETBY_OPTION)
        elif self.options.Z is None:
            pipeline["Z"] = float(n)
        kept = [hit for hit in hits if hit is not None]
        state = tophits_state(kept, pipeline)
        if self.by_position and kept:
            drop_unkept(state, self._position_of(task), self.options.E, bound=int(positions[-1]) + 1)
        return state

    def details(self) -> dict:
        """What the stage did: F3 passers done here, targets sent to pyhmmer, seconds."""
        with self._counts_lock:
            return dict(self.counts, own_seconds=self.own_seconds)


def warm() -> None:
    """Load (or compile, on a fresh machine, about 40 s; numba keeps them in its cache) the CPU
    references this stage runs: the Forward and Backward parsers, the decoding and domain
    definition's stages (a clustered region's ensemble, an envelope's rescoring), on a
    sampled model of 20 nodes and a tandem repeat of its consensus. ``hmmgpu warmup`` calls
    it, so that a search's first flagged passer does not wait for the compiler."""
    from pyhmmer.easel import Alphabet, Randomness
    from pyhmmer.plan7 import HMM

    from hmmgpu.options import SearchOptions
    from hmmgpu.stages.domaindef import define_domains

    hmm = HMM.sample(Alphabet.amino(), 20, Randomness(1))
    model = QueryModel.of(hmm, SearchOptions())
    consensus = np.asarray(hmm.match_emissions, F32)[1:].argmax(axis=1).astype(np.uint8)
    half = consensus.size // 2
    codes = np.concatenate([consensus[half:], consensus, consensus[:half]])  # a clustered region
    forward = parse(model.tables, codes)
    bck = backward(model.tables, codes, forward)
    define_domains(model.stages, codes, forward.xmx, bck.xmx, bck.has_own_scales)


def _warm_display(db) -> None:
    """:func:`~hmmgpu.report.alidisplay.warm_display` for the database's targets (a failure is
    left for the first real alignment to raise)."""
    from hmmgpu.report.alidisplay import warm_display

    try:
        warm_display(db.codes(0))
    except Exception:  # noqa: BLE001 - only a head start: the search's own call reports any error
        pass


def _sent(targets, positions: list, ftz: bool) -> list:
    """For each position, its entry in what the GPU process sent (``targets``:
    :class:`~hmmgpu.stages.decoded.DecodedTargets` or :class:`~hmmgpu.stages.defined.DefinedTargets`,
    or None), (Forward score, decoding or definition), or None: None too where the entry holds
    in hmmsearch's float mode only (``ftz_only``) and the search runs in pyhmmer's (``ftz`` False)."""
    if targets is None or not len(targets):
        return [None] * len(positions)
    found = targets.find_all(positions)
    usable = (found >= 0) & (ftz | ~targets.ftz_only[np.maximum(found, 0)])
    return [targets.target(k) if use else None for k, use in zip(found.tolist(), usable.tolist())]


def _runs(outcomes: list) -> list:
    """(start, end) of each run of consecutive targets on one side (pyhmmer's, or this stage's)."""
    host = [o == TargetOutcome.HOST for o in outcomes]
    bounds = [0] + [k for k in range(1, len(host)) if host[k] != host[k - 1]] + [len(host)]
    return list(zip(bounds[:-1], bounds[1:]))


def _joined(hmm, states: list) -> dict:
    """One task's state from its runs' states, in order (see the module header)."""
    if len(states) == 1:
        return states[0]
    from pyhmmer.plan7 import TopHits

    parts = []
    for state in states:
        part = TopHits(hmm)
        part.__setstate__(state)
        parts.append(part)
    joined = parts[0].merge(*parts[1:]).__getstate__()
    dropped = any(s["Nalloc"] != _allocated(s["N"]) for s in states)   # drop_unkept leaves Nalloc = N
    joined["Nalloc"] = joined["N"] if dropped else _allocated(joined["N"])
    return joined
