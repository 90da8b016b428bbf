"""The filter cascade on the GPU: MSV, bias filter, Viterbi filter and the Forward gate, model after model.

For each model the host uploads its tables and launches three kernels on one stream:
the SSV/MSV kernel over every position (:mod:`.msv`) writes the targets that pass F1; the
bias kernel (:mod:`.bias`) scores those, decides what it can and compacts the ones that need
the Viterbi filter into a work list; the Viterbi kernel (:mod:`.vit`) runs on that list.
A model's tables travel in one asynchronous copy (one pinned buffer, laid out once per
slot) and its results (counters, lists, scores) come back in one, and an event marks the
end: a handful of driver calls per model, since each one releases and retakes the
interpreter's lock that the other stages' threads share. :meth:`GpuCascade.submit` returns
at once, with no host synchronisation between models; a ring of :data:`SLOTS` buffer sets,
each with its own stream, lets that many models be in flight and their kernels run at the
same time (so the few long targets that end each kernel do not leave the GPU idle).
:meth:`Ticket.result` (from any thread; the engine calls it from its own thread while
another submits) waits for the event and finishes on the host what the GPU left to it, with HMMER's own
arithmetic: the decisions inside the P-value bands, the few targets whose bias score or
Viterbi filter the kernels flagged, the fallback targets of the J-state MSV, and models
whose shape or scores the kernels do not take (run on the CPU reference entirely).

Then, on the Viterbi filter's survivors, the Forward filter (F3) as a gate: the Forward
parser kernel (:mod:`.fwdback`) scores them, the host forms each score with libm's ``log``
and decides ``P <= F3`` exactly as ``p7_Pipeline`` does
(:func:`hmmgpu.stages.cascade.forward_gate`), and only the passers (with the few targets the
kernel cannot promise bit for bit, left undecided) go on to pyhmmer's stage, which no longer
runs Forward, Backward and domain definition on the targets that fail. The gate runs in
batches: finishing a model's filters (:meth:`Ticket.filtered`) queues its survivors, and the
queue is launched as one kernel over many models' targets (:meth:`GpuCascade.flush_gates`,
:class:`~hmmgpu.gpu.fwdback.launch.ForwardBatch`) once it is large enough, on a few streams of its own beside the filter kernels of later models; a model's
result (:meth:`GateTicket.result`) waits for its batch. One model's survivors alone would
occupy a few of the GPU's multiprocessors. The GPU process sends each result as soon as its
batch is done, in model order (:mod:`hmmgpu.gpu.process`).

When hmmgpu's own post-filter follows (``--postfilter hmmgpu``: the options of a model say so),
a gate batch is followed by a second one (:class:`_DecodingStep`): as soon as the gate batch is
done its models' gates are decided on the host and the Forward parser, the Backward parser and
``p7_DomainDecoding`` run on the device, in one launch, on the F3 passers of those models
(``ForwardStage.launch(..., decoding=True)``); each model's result then carries its passers'
Forward scores and decodings (:class:`~hmmgpu.stages.decoded.DecodedTargets`: twelve bytes a
residue), and the post-filter stage starts domain definition from them instead of running both
parsers on the CPU. Launching the passers again, rather than asking the gate's own launch for
the Backward parser and the decodings, runs the Backward parser on a quarter of the targets
(33,600 of 142,000 Viterbi-filter survivors pass F3 with 600 Pfam models against 29 M residues)
at the cost of a second Forward pass on them, and keeps the gate's launches as they are:
without the own post-filter nothing of this runs. Targets the kernels flag (or would not run)
are left out of a model's decodings, and the post-filter stage computes them itself. When a
model's decodings are done, the decoded passers of every model of its batch are then defined
at once, in the process that owns the device (one launch serves all those models; a launch
over one model's few dozen passers would wait for its longest, model after model), in
threads of their own (:meth:`GpuCascade.definer`: a few batches at once, each thread
launching on its own stream, since one batch's launches are latency-bound and leave most of
the GPU idle), so that the filters of later models go on meanwhile and a model's result is
ready once its batch is defined:
the batched driver of domain definition with the GPU's stages
(:meth:`GpuCascade.define_domains_of`, :class:`~hmmgpu.gpu.domaindef.GpuDomainStages`); the
result carries the definitions no exactness flag marks
(:class:`~hmmgpu.stages.defined.DefinedTargets`) in place of those passers' decodings, and
the post-filter stage only forms their hits.

A database larger than the GPU's memory budget is processed chunk after chunk, each model
synchronously (correct, slower).
"""
from __future__ import annotations

import contextlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from hmmgpu.stages import stats
from hmmgpu.stages.cascade import CascadeResult, ForwardResult, MsvResult, ViterbiResult, forward_gate, run_cascade
from hmmgpu.stages.profiles import null_table, tjb_table, xw_move_table
from hmmgpu.gpu.runtime import build, tuning
from hmmgpu.gpu.bias import BiasSpec, Decision, length_tables
from hmmgpu.gpu.bias import ARGS as BIAS_ARGS
from hmmgpu.gpu.fwdback.decoding_source import DecodeSpec
from hmmgpu.gpu.fwdback.launch import backward_spec, forward_spec
from hmmgpu.gpu.runtime.kargs import arguments
from hmmgpu.gpu.msv.launch import MsvKernels, MsvStage, model_tables, scalars
from hmmgpu.gpu.msv.source import NX as MSV_NX
from hmmgpu.gpu.msv.source import Counter as MsvCounter
from hmmgpu.gpu.msv.source import row_stride
from hmmgpu.gpu.pack import PackSpec
from hmmgpu.gpu.vit.launch import VitKernels, VitStage, exactness_conditions, tables
from hmmgpu.gpu.vit.source import NX as VIT_NX
from hmmgpu.gpu.vit.source import STATUS_UNCERTAIN, TRANSITION_ROWS

#: Models in flight on the GPU at once (buffer sets in the ring).
SLOTS = 8
#: The gate batches :attr:`GpuCascade.definition_timeline` records at most.
TIMELINE_BATCHES = 64
#: The step seconds of a batch's definitions in :attr:`GpuCascade.definition_timeline`, in order
#: (:attr:`~hmmgpu.gpu.domaindef.GpuDomainStages.seconds`, and the ensemble kernel's launches' wall
#: time inside ``ensembles``)
TIMELINE_STEPS = ("matrices", "ensembles", "ensemble_kernel", "decoding", "finish")
#: Counter array of one slot: the MSV kernel's counters, then the Viterbi work-list count
#: and the Viterbi kernel's work counter.
_VIT_LIST = len(MsvCounter)
_VIT_WORK = _VIT_LIST + 1
_N_COUNTERS = _VIT_WORK + 1


def all_specs(device, lanes: str = "auto") -> list:
    """Every kernel shape of the cascade on ``device`` (``hmmgpu warmup``), the packing of its
    database and the Forward gate included, and the Backward parser and domain decoding
    kernels that hmmgpu's own post-filter adds (a search compiles these when it first needs
    them: :func:`needed_specs` leaves them out, so that a search without it compiles nothing more)."""
    return MsvKernels(device, lanes).all_specs() + VitKernels(device).all_specs() + [
        BiasSpec(), PackSpec(), forward_spec("shared"), forward_spec("global"), backward_spec("shared"), backward_spec("global"),
        DecodeSpec()]


def needed_specs(msv: MsvKernels, vit: VitKernels, lengths) -> list:
    """The kernel specialisations models of these lengths use (the bias kernel, the
    database's packing and the Forward gate's kernel included)."""
    specs = [BiasSpec(), PackSpec(), forward_spec("shared"), forward_spec("global")]
    for M in sorted(set(int(m) for m in lengths)):
        specs += [s for s in (msv.spec(M), vit.spec(M)) if s is not None]
    return list(dict.fromkeys(specs))


def load_kernels(device, lanes: str, lengths, notice=None) -> int:
    """Compile, in parallel processes, the kernels that models of these lengths need and the
    device lacks (one line on stderr while it does), and load them all; returns how many
    were compiled. Needs the device only, not the database: the GPU process runs it while
    the database is read (:mod:`hmmgpu.gpu.process`)."""
    specs = needed_specs(MsvKernels(device, lanes), VitKernels(device), lengths)
    compiled = build.compile_ahead(specs, device, processes=len(specs), notice=notice)
    with device.activate():
        for spec in specs:
            build.load(spec, device)
    return compiled


#: The model tables of one slot, in the order they lie in its upload buffer: (name, dtype).
_TABLES = (("ssv_table", np.uint32), ("msv_table", np.uint32), ("threshold_by_length", np.int32),
           ("scalars", np.int32), ("odds", np.float32), ("bands", np.float32), ("emissions", np.uint32),
           ("transitions", np.uint32), ("dd_sums", np.int32), ("overflow_at", np.int32))
#: The per-target outputs of one slot, in the order they lie in its result buffer; the
#: Viterbi work list (``vit_pos``) comes last and is not copied back.
_OUTPUTS = (("msv_pos", np.int32), ("msv_xj", np.int32), ("fallback", np.int32), ("filtersc", np.float32),
            ("vit_from", np.int32), ("vit_xc", np.int32), ("msv_status", np.int8), ("decision", np.int8),
            ("vit_status", np.int8), ("vit_pos", np.int32))


def _carve(buffer, layout) -> dict:
    """Typed views of consecutive regions of a flat byte buffer (host or device):
    ``layout`` is ``(name, dtype, count)``, each region starting on a 4-byte boundary."""
    views, at = {}, 0
    for name, dtype, count in layout:
        size = np.dtype(dtype).itemsize * count
        views[name] = buffer[at:at + size].view(dtype)
        at += -(-size // 4) * 4
    return views


def _layout_size(layout) -> int:
    return sum(-(-np.dtype(d).itemsize * c // 4) * 4 for _, d, c in layout)


@dataclass
class _Slot:
    """Device and pinned host buffers of one model in flight."""

    tables_host: object  #: pinned bytes: this slot's model tables (one upload)
    tables_device: object
    tables: dict  #: typed device views of the tables (kernel arguments)
    tables_staging: dict  #: typed host views of the same regions
    results_device: object  #: device bytes: counters, then the per-target outputs
    results_host: object  #: pinned mirror of the part that comes back
    results_bytes: int
    counters: object  #: device view: the kernels' counters
    outputs: dict  #: device views of the per-target outputs
    host: dict  #: host views of the counters and outputs
    zeros: object  #: pinned zeros for resetting the counters
    stream: object  #: this slot's CUDA stream
    events: tuple  #: start, after MSV, after bias, after Viterbi, results copied

    def upload(self, host_tables: dict, stream) -> None:
        """Copy a model's tables into this slot's device buffer (one asynchronous copy)."""
        for name, array in host_tables.items():
            flat = np.asarray(array).reshape(-1)
            self.tables_staging[name][:flat.size] = flat
        self.tables_device.copy_to_device(self.tables_host, stream=stream)


class Ticket:
    """A model submitted to the GPU: :meth:`filtered` waits for its filters and finishes them
    (the Forward gate queued, :class:`GateTicket`); :meth:`result` waits for everything."""

    def __init__(self, cascade, profile, options, slot=None, plan=None, done=None):
        self._cascade = cascade
        self.profile = profile
        self.options = options
        self.slot = slot
        self.plan = plan
        self._gated = None if done is None else GateTicket(cascade, done)
        self._lock = threading.Lock()

    def filtered(self) -> "GateTicket":
        """Wait for the GPU's filters and finish them on the host (once, in whichever thread
        asks first); the Forward gate of the survivors is queued, not waited for."""
        with self._lock:
            if self._gated is None:
                self._gated = self._cascade._finish(self)
        return self._gated

    def result(self) -> CascadeResult:
        """The cascade's result, the Forward gate included (launched now if it is still queued)."""
        return self.filtered().result()


class GateTicket:
    """A model whose filters are finished and whose Forward gate is queued or running in a
    batch with other models' (:meth:`GpuCascade.flush_gates`): :meth:`ready` says whether its
    result can be had without waiting, :meth:`decided` waits for its batch and decides F3,
    :meth:`result` also waits for the F3 passers' decodings where the model asked for them
    (``decode``: hmmgpu's own post-filter follows, :class:`_DecodingStep`)."""

    def __init__(self, cascade, partial: CascadeResult, profile=None, options=None, filtersc=None, tables=None,
                 decode: bool = False):
        self._cascade = cascade
        self.partial = partial  #: the cascade's result before the gate (survivors: the Viterbi filter's)
        self.profile, self.options, self.filtersc = profile, options, filtersc
        self.tables = tables  #: the model's Forward tables (the gate's job's)
        self.decode = decode and filtersc is not None
        self.batch = None  #: the :class:`~hmmgpu.gpu.fwdback.launch.ForwardBatch` it runs in
        self.job = -1  #: its job in the batch
        self.step = None  #: the :class:`_DecodingStep` of its batch, when it asked for decodings
        self._decided = partial if filtersc is None else None
        self._done = self._decided
        self._lock = threading.Lock()

    def queued(self) -> bool:
        """Whether its Forward gate waits in the queue for a fuller batch (not launched yet)."""
        return self._done is None and self.batch is None

    def ready(self) -> bool:
        """Whether :meth:`result` returns without waiting. The decodings of a batch that is done
        are launched by :meth:`GpuCascade.advance_decoding`, which the caller runs once for all
        its tickets (not once a ticket: hundreds wait at a time with the own post-filter)."""
        if self._done is not None:
            return True
        if self.batch is None:
            return False
        if self.step is not None:
            return self.step.ready()
        return self.batch.done()

    def decided(self) -> CascadeResult:
        """The cascade's result with the gate's F3 decisions (its batch launched now if it is
        still queued, and waited for)."""
        with self._lock:
            if self._decided is None:
                if self.batch is None:
                    self._cascade.flush_gates()
                self._decided = self._cascade._decide_gate(self)
        return self._decided

    def result(self) -> CascadeResult:
        if self._done is None:
            decided = self.decided()
            if self.step is None:
                self._done = decided
            else:
                from dataclasses import replace

                decoded, defined = self.step.decoded(self)
                self._done = replace(decided, decoded=decoded, defined=defined)
        return self._done


def forward_tables(hmm):
    """HMMER's striped Forward tables of ``hmm`` (:class:`~hmmgpu.stages.forward.ForwardTables`
    of pyhmmer's optimized profile, configured as the search configures it)."""
    from hmmgpu.stages.forward import ForwardTables
    from hmmgpu.stages.profiles import configured_profile

    return ForwardTables.from_optimized(configured_profile(hmm).to_optimized())


def _add_into(total: dict, part: dict) -> None:
    """Add each value of ``part`` to ``total``'s of the same name (0 where it has none)."""
    for name, value in part.items():
        total[name] = total.get(name, 0) + value


def _passers(decided: CascadeResult) -> np.ndarray:
    """The targets the gate passed (its survivors less those it left undecided), sorted."""
    survivors, gate = decided.survivors, decided.forward
    return survivors if gate is None or not gate.unsure.size else survivors[~np.isin(survivors, gate.unsure)]


class _DecodingStep:
    """The second launch after a gate batch, for hmmgpu's own post-filter (module header): once
    the batch is done, its models' gates are decided and the Forward and Backward parsers and
    ``p7_DomainDecoding`` run in one batch on the F3 passers of those of its models that asked
    (``members``); each member's :class:`~hmmgpu.stages.decoded.DecodedTargets` are its
    passers the kernels did not flag."""

    def __init__(self, cascade, gate_batch, members: list, full: bool = True):
        self._cascade = cascade
        self.gate_batch = gate_batch
        self.members = members
        self.full = full  #: not one of the search's first, smaller gate batches (whose passers go to pyhmmer)
        self._launched = False
        self._batch = None  #: the decodings' batch (None: no member had a passer)
        self._job = {}  #: id(member) -> its job in the batch
        self._models = []  #: each job's model: (its tables, the search's --seed)
        self._taken = 0  #: the passers this step holds of the definitions' backlog (:meth:`GpuCascade.take_definitions`)
        #: the future of each job's (decoded, defined), every member defined in the definer's thread
        self._answers = None
        self._lock = threading.Lock()
        #: when its gate batch was launched, then its decodings, then when they were done and when
        #: its definitions were (seconds on the cascade's clock: :attr:`GpuCascade.definition_timeline`)
        self.times = [cascade.clock()]

    def launch(self, wait: bool) -> bool:
        """Launch the decodings if the gate batch is done (``wait``: waiting for it); whether
        they are launched."""
        with self._lock:
            if not self._launched:
                if not (wait or self.gate_batch.done()):
                    return False
                self._launch()
        return True

    @classmethod
    def of_passers(cls, cascade, items) -> "_DecodingStep":
        """A step launched at once on ``items``, (Forward tables, ``--seed``, passers) triples
        of any models, not a gate batch's (:meth:`GpuCascade.define_passers`); item ``k``'s
        answer is :meth:`answer` ``(k)``."""
        step = cls(cascade, None, [])
        with step._lock:
            step._start([(k, fwd_tables, seed, np.asarray(passers, np.int64))
                         for k, (fwd_tables, seed, passers) in enumerate(items)])
            step._launched = True
        return step

    def _launch(self) -> None:
        cascade = self._cascade
        chosen = [(id(member), member.tables, member.options.seed, _passers(member.decided()))
                  for member in self.members]
        self._taken = sum(int(passers.size) for *_, passers in chosen)
        if self._taken and not cascade.take_definitions(self._taken, full=self.full):
            chosen, self._taken = [], 0   # declined: each member's passers go to pyhmmer's pipeline
        self.members = []  # no longer needed, and no cycle left between the tickets and their step
        self._start(chosen)
        self._launched = True

    def _start(self, chosen: list) -> None:
        """Launch the parsers and decodings of ``chosen``, (key, tables, seed, passers) each,
        and submit their definitions to the definer."""
        from hmmgpu.gpu.fwdback.launch import ForwardJob

        jobs = []
        cascade = self._cascade
        for key, fwd_tables, seed, passers in chosen:
            if passers.size:
                self._job[key] = len(jobs)
                jobs.append(ForwardJob(fwd_tables, passers))
                self._models.append((fwd_tables, seed))
        if jobs:
            with cascade._forward_lock, cascade._simulated:
                self._batch = cascade._stage().launch(jobs, decoding=True)
            self.times.append(cascade.clock())
            self._answers = cascade.definer().submit(self._define_when_decoded)

    def ready(self) -> bool:
        return self._launched and (self._batch is None or self._answers.done())

    def decoded(self, member: GateTicket) -> tuple:
        """``member``'s decoded passers (the decodings launched now and waited for if need be):
        (:class:`~hmmgpu.stages.decoded.DecodedTargets`, :class:`~hmmgpu.stages.defined.DefinedTargets`
        or None), the passers the GPU's domain definition stages defined moved from the first
        to the second. The first member asked defines every member's passers at once
        (:meth:`GpuCascade.define_domains_of`: one launch serves all the batch's models), in the
        definer's thread, started as soon as the decodings were launched."""
        self.launch(wait=True)
        return self.answer(id(member))

    def answer(self, key) -> tuple:
        """The (decoded, defined) pair of the job of ``key`` (waited for), as :meth:`decoded`
        gives it; a key with no passer gets empty decodings and no definitions."""
        from hmmgpu.stages.decoded import DecodedTargets

        job = self._job.get(key)
        if job is None:
            return DecodedTargets.gather([], [], [], [], [], []), None
        return self._answers.result()[job]

    def _define_when_decoded(self) -> list:
        """The definer's task: :meth:`_define_all` once the decodings' kernels are done (waited
        for here, outside the gate's lock, which the filters' thread takes to launch gates)."""
        steps = {}
        try:
            self._batch.wait()
            self.times.append(self._cascade.clock())
            answers = self._define_all(steps)
            self.times.append(self._cascade.clock())
        finally:
            self._cascade.release_definitions(self._taken)
        self._cascade.add_timeline(self.times, sum(len(rest) + (0 if defined is None else len(defined))
                                                   for rest, defined in answers), steps)
        return answers

    def _define_all(self, steps: dict) -> list:
        """Every job's (decoded, defined): its passers the kernels did not flag, defined
        (``steps``: their definitions' step seconds, :meth:`GpuCascade.define_domains_of`)."""
        from hmmgpu.stages.decoded import DecodedTargets
        from hmmgpu.stages.forward import FTZ_ONLY, STATUS_UNSURE

        cascade = self._cascade
        with cascade._forward_lock:
            results = self._batch.results()
            time_once = self._batch.claim_time()
        if time_once is not None:
            cascade._add_forward_time(*time_once, kind="decoding")
        work, unsure, flushed = [], [], []
        for (profile_tables, seed), got in zip(self._models, results):
            dec = got.decoding
            ftz_only = (dec.flags & FTZ_ONLY) != 0
            flushed.append(int((ftz_only & (dec.status != STATUS_UNSURE)).sum()))
            # (a model whose tables hold a subnormal entry, which hmmsearch's flush-to-zero build
            # holds as 0, has none decoded: ForwardTables.exactness_conditions)
            keep = np.flatnonzero((dec.status != STATUS_UNSURE) & (cascade.defines_in_ftz | ~ftz_only)).tolist()
            work.append((profile_tables, seed, DecodedTargets.gather(got.indices[keep], got.scores[keep], dec.status[keep],
                                                             [dec.mocc[k] for k in keep],
                                                             [dec.btot[k] for k in keep],
                                                             [dec.etot[k] for k in keep],
                                                             ftz_only=ftz_only[keep])))
            unsure.append(int(got.indices.size) - len(keep))
        answers = cascade.define_domains_of(work, steps)
        for (decoded, defined), (_, _, sent), host, n_flushed in zip(answers, work, unsure, flushed):
            cascade._count_decoded(len(sent), host, n_flushed,
                                   decoded.nbytes + (defined.nbytes if defined is not None else 0),
                                   len(defined) if defined is not None else 0)
        return answers


class GpuCascade:
    """The filter cascade of any number of models over one resident database
    (``forward_gate=False``: without the Forward gate, the Viterbi filter's survivors go on)."""

    def __init__(self, resident, lanes: str = "auto", forward_gate: bool = True):
        self.resident = resident
        self.device = resident.device
        rt = self.device.runtime
        self.msv = MsvKernels(self.device, lanes)
        self.vit = VitKernels(self.device)
        self.lanes = self.msv.lanes
        self.msv_stage = MsvStage(resident, lanes)
        self.vit_stage = VitStage(resident)
        #: time of each kernel, summed over models (kernels of models in flight together
        #: overlap, so this is more than the GPU's busy time, :attr:`gpu_ms`)
        self.kernel_ms = dict(msv=0.0, bias=0.0, viterbi=0.0, forward=0.0)
        #: hmmgpu's own post-filter only: the F3 passers' parsers and decodings (:class:`_DecodingStep`),
        #: their kernel time, how many the kernels decoded or left to the host, the bytes of the
        #: decodings sent with the results, the gate batches whose passers were defined, the
        #: passers declined for want of room (:meth:`take_definitions`), the decoded passers
        #: with a clustered region left to pyhmmer's pipeline (tuning.DEFINE_CLUSTERED off), and
        #: the passers of tasks handed back after the filters (:meth:`define_passers`)
        self.decoding_ms = 0.0
        self.decoding_counts = dict(decoded=0, host=0, ftz_only=0, bytes=0, defined=0, batches=0, declined=0,
                                     left_clustered=0, reclaimed=0)
        self._backlog = 0  #: F3 passers taken for decoding and definition here, not yet defined
        #: domain definition's steps in this process, and its clustered regions and those the CPU
        #: reference sampled: the sums of :attr:`~hmmgpu.gpu.domaindef.GpuDomainStages.seconds` and
        #: :attr:`~hmmgpu.gpu.domaindef.GpuDomainStages.ensemble_counts` (empty before a definition)
        self.define_seconds: dict = {}
        self.ensemble_counts: dict = {}
        self._steps: list = []  #: the decoding steps whose launch waits for their gate batch
        self.forward_gate = forward_gate
        #: the search computes its post-filter in hmmsearch's float mode (``set_float_mode``): the
        #: definitions are made in that mode (:attr:`defines_in_ftz`)
        self.search_ftz = False
        #: the Forward gate's decisions, summed over models: passed and failed F3, and left
        #: undecided (sent on to pyhmmer's stage)
        self.forward_counts = dict(passed=0, failed=0, unsure=0)
        #: model length x residues of the targets the Forward kernel ran for the gate (with
        #: ``kernel_ms["forward"]``: its GCUPS)
        self.forward_cells = 0
        self._forward_stage = None
        self._forward_lock = threading.Lock()  #: guards the gate's queue and its stage
        self._queued: list = []  #: (GateTicket, ForwardJob) of the models whose gate waits for a batch
        self._queued_targets = 0
        self._gate_batches = 0  #: the gate batches launched so far (the first ones are smaller: _gate_batch_targets)
        #: numba's CUDA simulator runs a kernel in the launching thread and keeps one kernel
        #: context for the process: launches from two threads (a model's filters while the
        #: gate of an earlier one runs) are taken one at a time there (a GPU needs no lock)
        self._simulated = threading.RLock() if self.device.simulator else contextlib.nullcontext()
        #: the thread loading domain definition's kernels (:meth:`_prepare_definition`), once started
        self._definition_kernels: threading.Thread | None = None
        #: set once that thread has also compiled (or loaded) the CPU code of the definitions'
        #: host part (:func:`hmmgpu.gpu.domaindef.compile_host_code`)
        self._host_code_ready = threading.Event()
        #: when that thread's steps ended (:meth:`clock`): ``kernels``, ``aside`` (and whether
        #: every child compiled: ``aside_ok``), ``ready``
        self.host_code_times: dict = {}
        self._definer: ThreadPoolExecutor | None = None  #: :meth:`definer`, once a model needs it
        #: each definer thread's stream of domain definition's launches (:meth:`_definition_stream`)
        self._definition_streams = threading.local()
        self._definition_bytes: int | None = None  #: :meth:`definition_batch_bytes`, once asked
        self._busy: list = []  #: (start, stop) of each model's kernels, ms after ``_epoch``
        self._started = time.perf_counter()  #: :meth:`clock`'s zero
        #: hmmgpu's own post-filter: each gate batch's (gate launched, decodings launched, decoded,
        #: defined) on :meth:`clock`, its passers decoded, then its definitions' step seconds
        #: (matrices, ensembles, the ensemble kernel's, decoding, finish: :data:`TIMELINE_STEPS`),
        #: in the order their definitions ended (:meth:`add_timeline`)
        self.definition_timeline: list = []
        #: the host's side of the cascade (``define``: domain definition of the F3 passers, its
        #: kernels' waits included, with hmmgpu's own post-filter)
        self.host_seconds = dict(submit=0.0, wait=0.0, finish=0.0, define=0.0)
        self._bias_kernel = None
        max_len = max(resident.max_length, 1)
        self.max_length = max_len
        self._distinct_lengths = np.unique(resident.lengths)  #: the lengths the kernels ever look up
        n = resident.largest_chunk
        with self.device.activate():
            self._db_tables = {k: rt.to_device(v) for k, v in length_tables(max_len).items()}
            self._db_tables["move_by_length"] = rt.to_device(xw_move_table(max_len).astype(np.int32))
            self._db_tables["tjb32"] = rt.to_device(tjb_table(max_len).astype(np.int32))
            #: the ring's buffer sets, each made when a model first needs it (a search of one
            #: model pins and allocates one set, not :data:`SLOTS`; 15 MB each for 116 M residues)
            self._slots = [None] * SLOTS if resident.resident else []
            self._slot_targets = n
            self._epoch = None
            if not self.device.simulator:
                self._epoch = rt.event()
                self._epoch.record()
                self._epoch.synchronize()
        self._next = 0
        self._in_flight: list = []
        self._lock = threading.Lock()  #: guards the ring and the time counters (two threads use them)

    def _new_slot(self, n: int) -> _Slot:
        rt = self.device.runtime
        q_max = 64  # the largest Q of the shape tables
        capacity = dict(ssv_table=MSV_NX * row_stride(32, q_max), msv_table=MSV_NX * row_stride(32, q_max),
                        threshold_by_length=self.max_length + 1, scalars=8, odds=2 * VIT_NX, bands=4,
                        emissions=VIT_NX * 32 * q_max, transitions=len(TRANSITION_ROWS) * 32 * q_max,
                        dd_sums=64, overflow_at=VIT_NX)
        table_layout = [(name, dtype, capacity[name]) for name, dtype in _TABLES]
        tables_host = rt.pinned_array(_layout_size(table_layout), np.uint8)
        tables_device = rt.device_array(tables_host.size, np.uint8)
        n = -(-max(n, 1) // 4) * 4
        result_layout = [("counters", np.int32, _N_COUNTERS)] + [(name, dtype, n) for name, dtype in _OUTPUTS]
        results_device = rt.device_array(_layout_size(result_layout), np.uint8)
        results_bytes = _layout_size(result_layout[:-1])  # all but the Viterbi work list
        results_host = rt.pinned_array(results_bytes, np.uint8)
        outputs = _carve(results_device, result_layout)
        zeros = rt.pinned_array(_N_COUNTERS, np.int32)
        zeros[:] = 0
        return _Slot(tables_host=tables_host, tables_device=tables_device,
                     tables=_carve(tables_device, table_layout), tables_staging=_carve(tables_host, table_layout),
                     results_device=results_device, results_host=results_host, results_bytes=results_bytes,
                     counters=outputs.pop("counters"), outputs=outputs,
                     host=_carve(results_host, result_layout[:-1]), zeros=zeros, stream=rt.stream(),
                     events=tuple(rt.event() for _ in range(5)))

    @property
    def gpu_ms(self) -> float:
        """Time the GPU was running the cascade's kernels so far (milliseconds): the union of
        every model's interval from its first kernel's start to its last kernel's end."""
        with self._lock:
            spans = sorted(self._busy)
        total, end = 0.0, float("-inf")
        for a, b in spans:
            if b > end:
                total += b - max(a, end)
                end = b
        return total

    def compile_for(self, lengths, notice=None) -> int:
        """:func:`load_kernels` for this cascade's device and lanes."""
        return load_kernels(self.device, self.lanes, lengths, notice=notice)

    # ------------------------------------------------------------ stage methods (audit, tests)
    def bias_scores(self, profile, indices) -> np.ndarray:
        """Bias filter scores of ``indices`` (the CPU reference: the GPU computes them inside
        the cascade, where each is checked or recomputed on the host)."""
        from hmmgpu.cpu import filters as cpu_filters

        return cpu_filters.bias_filter(profile, self.resident.db, indices)

    def viterbi(self, profile, indices) -> tuple:
        """(status, C) of the Viterbi filter kernel on ``indices``."""
        return self.vit_stage.run(profile, indices)

    def _stage(self):
        """The Forward parser stage (made at its first use; call with the gate's lock held)."""
        from hmmgpu.gpu.fwdback.launch import ForwardStage

        if self._forward_stage is None:
            self._forward_stage = ForwardStage(self.resident)
            self._forward_stage.epoch = self._epoch
        return self._forward_stage

    @staticmethod
    def _forward_tables(profile):
        """HMMER's striped Forward tables of ``profile.hmm`` (pyhmmer's optimized profile: the
        profile's own, made with its filter tables, where it has them)."""
        return profile.forward if profile.forward is not None else forward_tables(profile.hmm)

    def _add_forward_time(self, kernel_ms: float, span, cells: int = 0, kind: str = "forward") -> None:
        with self._lock:
            if kind == "forward":
                self.kernel_ms["forward"] += kernel_ms
                self.forward_cells += int(cells)
            else:
                self.decoding_ms += kernel_ms
            if span is not None:
                self._busy.append(span)

    def take_definitions(self, passers: int, full: bool = True) -> bool:
        """Whether a gate batch's ``passers`` F3 passers are decoded and defined here: never for
        one of the search's first, smaller batches (not ``full``: :meth:`_gate_batch_targets`),
        whose passers the post-filter's threads would otherwise wait for; else yes while the
        passers taken and not yet defined (the definitions' backlog) stay within
        :data:`~hmmgpu.gpu.runtime.tuning.DEFINE_BACKLOG_PASSERS`, and whenever there are none (a positive budget: the definitions never wait for work); taken,
        they join the backlog until :meth:`release_definitions`. Declined, they are counted
        (``declined``) and go, as the passers this process does not decode, to pyhmmer's pipeline
        in the post-filter's threads, which then share the definitions with this process."""
        budget = tuning.DEFINE_BACKLOG_PASSERS
        with self._lock:
            if full and (self._backlog + passers <= budget or (self._backlog == 0 and budget > 0)):
                self._backlog += passers
                return True
            self.decoding_counts["declined"] += passers
            return False

    def release_definitions(self, passers: int) -> None:
        """The backlog less ``passers`` taken by :meth:`take_definitions` (their definitions ended)."""
        with self._lock:
            self._backlog -= passers

    def _count_decoded(self, decoded: int, host: int, ftz_only: int, nbytes: int, defined: int) -> None:
        """Add a batch's counts: its passers decoded, left undecided (``host``: flagged, or
        decoded in hmmsearch's float mode only and not defined here: defines_in_ftz),
        decoded in that mode only (``ftz_only``), its bytes and its passers defined."""
        with self._lock:
            self.decoding_counts["decoded"] += decoded
            self.decoding_counts["host"] += host
            self.decoding_counts["ftz_only"] += ftz_only
            self.decoding_counts["bytes"] += nbytes
            self.decoding_counts["defined"] += defined

    def _prepare_definition(self) -> None:
        """Start loading domain definition's kernels (:func:`hmmgpu.gpu.domaindef.load_kernels`)
        in a thread, once: the first model that asks for hmmgpu's own post-filter starts it.
        On an H100 or H200 they ship compiled and load in milliseconds; on a GPU for which none
        ship, their compilation (about 40 s with the cache empty) runs beside the filters
        instead of before the first definitions. The thread then compiles the CPU code of the
        definitions' host part in child processes (:func:`hmmgpu.gpu.domaindef.compile_host_code_aside`;
        10-20 s on a fresh machine, while the first definitions go on without it) and loads it."""
        with self._lock:
            if self._definition_kernels is not None:
                return
            self._definition_kernels = threading.Thread(target=self._load_definition_kernels, daemon=True,
                                                        name="hmmgpu-definition-kernels")
        self._definition_kernels.start()

    def _load_definition_kernels(self) -> None:
        from hmmgpu.gpu.domaindef import compile_host_code, compile_host_code_aside, load_kernels

        try:
            with self._simulated:
                load_kernels(self.device)
            self.host_code_times["kernels"] = round(self.clock(), 2)
            self.host_code_times["aside_ok"] = compile_host_code_aside()
            self.host_code_times["aside"] = round(self.clock(), 2)
            compile_host_code()
        except Exception:  # noqa: BLE001 - only ahead of time: the stages' own calls raise the same error
            pass
        finally:
            self.host_code_times["ready"] = round(self.clock(), 2)
            self._host_code_ready.set()

    def clock(self) -> float:
        """Seconds since the cascade was made."""
        return time.perf_counter() - self._started

    def add_timeline(self, times: list, passers: int, steps: dict) -> None:
        """Record a gate batch's times, passers and definitions' ``steps`` seconds in
        :attr:`definition_timeline` (the first :data:`TIMELINE_BATCHES` batches whose
        definitions end: the statistics stay one line)."""
        with self._lock:
            if len(self.definition_timeline) < TIMELINE_BATCHES:
                self.definition_timeline.append([round(t, 2) for t in times] + [int(passers)]
                                                + [round(steps.get(name, 0.0), 2) for name in TIMELINE_STEPS])

    def definer(self) -> ThreadPoolExecutor:
        """The threads that define the decoded passers of the gate batches
        (:class:`_DecodingStep`; :data:`~hmmgpu.gpu.runtime.tuning.DEFINE_THREADS` batches at
        once), made when the first batch needs them."""
        with self._lock:
            if self._definer is None:
                self._definer = ThreadPoolExecutor(tuning.DEFINE_THREADS, thread_name_prefix="hmmgpu-definer")
            return self._definer

    def _definition_stream(self, aside: bool = False):
        """The calling definer thread's stream, made on its first batch: it does not synchronise
        with the default stream, so the filters' synchronous copies do not wait for a definition
        kernel (nor its launches for theirs), and no definer's launches wait for another's;
        ``aside``: its second one, for the envelopes rescored beside the ensembles
        (:attr:`hmmgpu.gpu.domaindef.GpuDomainStages.overlaps_phases`)."""
        streams = self._definition_streams
        name = "aside" if aside else "stream"
        if getattr(streams, name, None) is None:
            with self.device.activate():
                setattr(streams, name, self.device.runtime.stream(non_blocking=True))
        return getattr(streams, name)

    def definition_batch_bytes(self) -> int:
        """The full matrices a definitions launch holds at most: DOMAINDEF_BATCH_BYTES, or on a
        GPU with less memory a quarter of the memory free at the first definitions, shared by
        the definer threads (each holds a batch's at a time)."""
        if self._definition_bytes is None:
            most = tuning.DOMAINDEF_BATCH_BYTES
            if not self.device.simulator:
                most = min(most, self.device.free_memory() // (4 * tuning.DEFINE_THREADS))
            self._definition_bytes = int(most)
        return self._definition_bytes

    def ensemble_step_cost(self) -> float:
        """The ensemble split's step cost (:func:`hmmgpu.gpu.ensemble.stages.split_by_cost`): as
        this process's launches and CPU threads measured it so far, else the tuning's."""
        from hmmgpu.gpu.ensemble.stages import measured_step_cost

        with self._lock:
            measured = measured_step_cost(self.ensemble_counts)
        return tuning.ENSEMBLE_GPU_STEP_COST if measured is None else measured

    @property
    def defines_in_ftz(self) -> bool:
        """Whether the definitions are made in hmmsearch's float mode, the decodings that hold in
        that mode only (``ftz_only``) among them: those of a search in that mode (:attr:`search_ftz`),
        with :data:`~hmmgpu.gpu.runtime.tuning.DEFINE_FTZ_ONLY`; else in IEEE arithmetic, those
        decodings left to pyhmmer's pipeline."""
        return self.search_ftz and bool(tuning.DEFINE_FTZ_ONLY)

    def define_domains_of(self, work, steps: dict | None = None) -> list:
        """Domain definition of several models' decoded passers with the GPU's stages
        (:class:`~hmmgpu.gpu.domaindef.GpuDomainStages`, in the float mode of :attr:`defines_in_ftz`),
        all at once: ``work`` (tables, the
        search's ``--seed``, decoded) triples; a (decodings sent, definitions sent or None) pair
        each, as :func:`~hmmgpu.stages.defined.split_defined_grouped` splits them. None defined
        with ``--seed 0`` (the post-filter stage then leaves the model's tasks to pyhmmer's
        pipeline). ``steps``, if given, gets these definitions' step seconds (those of
        :attr:`~hmmgpu.gpu.domaindef.GpuDomainStages.seconds`, and ``ensemble_kernel``)."""
        answers = [(decoded, None) for _, _, decoded in work]
        chosen = [m for m, (_, seed, decoded) in enumerate(work) if len(decoded) and seed != 0]
        if not chosen:
            return answers
        from hmmgpu.gpu.domaindef import GpuDomainStages
        from hmmgpu.stages.defined import split_defined_grouped

        clock = time.perf_counter()
        step_cost = self.ensemble_step_cost()
        # until the CPU reference's sampler is compiled, no region waits for it that can do
        # without: the longest go to the kernel too; a flagged region's target goes to pyhmmer's
        # pipeline whatever its ensemble, so it is never sampled here
        cpu_threads = tuning.ENSEMBLE_CPU_THREADS if self._host_code_ready.is_set() else 0
        stream, aside_stream = self._definition_stream(), self._definition_stream(aside=True)
        in_ftz = self.defines_in_ftz
        batch_bytes = self.definition_batch_bytes()
        stages = [GpuDomainStages(work[m][0], seed=work[m][1], device=self.device, step_cost=step_cost, stream=stream,
                                  cpu_threads=cpu_threads, sample_flagged=False, ftz=in_ftz, batch_bytes=batch_bytes,
                                  aside_stream=aside_stream)
                  for m in chosen]
        with self._simulated, self.device.activate():
            left = {}
            split = split_defined_grouped([(s, work[m][2]) for s, m in zip(stages, chosen)], self.resident.db.codes,
                                          in_ftz=in_ftz, clustered=bool(tuning.DEFINE_CLUSTERED), counts=left)
        for m, (defined, rest) in zip(chosen, split):
            answers[m] = (rest, defined)
        seconds, counts = {}, {}   # this batch's, over its models' stages
        for s in stages:
            _add_into(seconds, s.seconds)
            _add_into(counts, s.ensemble_counts)
        with self._lock:
            self.decoding_counts["batches"] += 1
            self.decoding_counts["left_clustered"] += left.get("left_clustered", 0)
            self.host_seconds["define"] += time.perf_counter() - clock
            _add_into(self.define_seconds, seconds)
            _add_into(self.ensemble_counts, counts)
        if steps is not None:
            steps.update(seconds, ensemble_kernel=counts["kernel_seconds"])
        return answers

    def define_passers(self, items) -> list:
        """The post-filter's work that the engine hands back once the filters are done (its
        tasks still queued, :meth:`hmmgpu.search.engine.SearchEngine.search`): ``items``,
        (profile, ``--seed``, F3 passers) triples of any models, each decoded and defined as a
        gate batch's members are (:class:`_DecodingStep`, every item in one launch, whatever
        the definitions' backlog): a (decoded, defined) pair each, as :meth:`GateTicket.result`
        carries them. Counted in ``decoding_counts["reclaimed"]``."""
        items = [(fwd_tables, int(seed), np.asarray(passers, np.int64)) for fwd_tables, seed, passers in items]
        if any(seed != 0 for _, seed, passers in items):
            self._prepare_definition()
        step = _DecodingStep.of_passers(self, items)
        answers = [step.answer(k) for k in range(len(items))]
        with self._lock:
            self.decoding_counts["reclaimed"] += sum(int(passers.size) for *_, passers in items)
        return answers

    def forward(self, profile, indices, fallback: bool = False) -> ForwardResult:
        """The Forward parser kernel on ``indices`` (database indices of non-empty targets) of
        one model, waiting for it, with HMMER's own tables (from pyhmmer's optimized profile of
        ``profile.hmm``); the targets it cannot promise bit for bit get ``STATUS_UNSURE``, or
        with ``fallback`` are computed by libhmmer (in the calling thread's float mode)."""
        idx = np.asarray(indices, np.int64)
        got = self._parsers(profile, idx, fallback, backward=False)
        recomputed = int(got.host.sum()) if fallback else 0
        return ForwardResult(idx, got.status, got.scores, recomputed)

    def backward(self, profile, indices, fallback: bool = False) -> ForwardResult:
        """The Backward parser kernel after the Forward parser kernel on ``indices`` (as
        :meth:`forward`), its score formed on the host from its rows; the targets either kernel
        cannot promise bit for bit get ``STATUS_UNSURE``, or with ``fallback`` are computed by
        libhmmer's ``p7_BackwardParser`` (in the calling thread's float mode)."""
        idx = np.asarray(indices, np.int64)
        bwd = self._parsers(profile, idx, fallback, backward=True).backward
        recomputed = int(bwd.host.sum()) if fallback else 0
        return ForwardResult(idx, bwd.status, bwd.scores, recomputed)

    def _parsers(self, profile, idx, fallback: bool, backward: bool):
        """:meth:`hmmgpu.gpu.fwdback.launch.ForwardStage.run` of one model on ``idx``, waiting
        for it (with Backward: its rows too, from which its scores are formed)."""
        tables = self._forward_tables(profile)
        model = None
        if fallback:
            from hmmgpu.cpu.hmmerlib import HmmerModel

            model = HmmerModel(profile.hmm)
        try:
            with self._forward_lock, self._simulated:
                stage = self._stage()
                got = stage.run(model, idx, rows=backward, tables=tables, fallback=fallback, backward=backward)
                last = dict(stage.last)
        finally:
            if model is not None:
                model.close()
        self._add_forward_time(last["kernel_ms"], last.get("span"), last.get("cells", 0))
        return got

    def _queue_gate(self, profile, options, partial: CascadeResult, filtersc) -> GateTicket:
        """Queue the Forward gate of one model's Viterbi-filter survivors (``partial.past_vit``,
        sorted) with their ``filtersc``; the queue is launched as one batch once it holds
        :data:`~hmmgpu.gpu.runtime.tuning.FWD_GATE_TARGETS` targets (``FWD_GATE_TARGETS_OWN_POSTFILTER``
        for a model of hmmgpu's own post-filter), or when a result needs it."""
        from hmmgpu.gpu.fwdback.launch import ForwardJob

        if not self.forward_gate or not partial.past_vit.size or profile.hmm is None:
            return GateTicket(self, partial)
        decode = options.run.postfilter == "hmmgpu"
        job = ForwardJob(self._forward_tables(profile), partial.past_vit)
        gated = GateTicket(self, partial, profile, options, filtersc, tables=job.tables, decode=decode)
        if gated.decode and options.seed != 0:
            self._prepare_definition()
        with self._forward_lock:
            self._queued.append((gated, job))
            self._queued_targets += int(partial.past_vit.size)
            size = self._gate_batch_targets(decode)
            if self._queued_targets >= size:
                # one of the first, smaller batches: on the own route its passers go to pyhmmer
                self._launch_queued(full=not decode or size == self._full_gate_targets(decode))
        return gated

    def _gate_batch_targets(self, decode: bool) -> int:
        """The targets at which the queued gates are launched: with hmmgpu's own post-filter
        defining passers during the filters (:data:`~hmmgpu.gpu.runtime.tuning.DEFINE_BACKLOG_PASSERS`
        above 0: the full-sized gate batches are its definitions' batches)
        :data:`~hmmgpu.gpu.runtime.tuning.FWD_GATE_TARGETS_OWN_POSTFILTER`; else
        :data:`~hmmgpu.gpu.runtime.tuning.FWD_GATE_TARGETS`; the first batches smaller on both
        routes, from :data:`~hmmgpu.gpu.runtime.tuning.FWD_GATE_FIRST_TARGETS` doubling at each,
        so that the post-filter's threads get their first passers sooner (on the own route those
        first batches' passers go to pyhmmer's pipeline: :meth:`take_definitions`)."""
        return min(GpuCascade._full_gate_targets(decode), tuning.FWD_GATE_FIRST_TARGETS << min(self._gate_batches, 30))

    @staticmethod
    def _full_gate_targets(decode: bool) -> int:
        """The size the gate batches grow to (:meth:`_gate_batch_targets`)."""
        if decode and tuning.DEFINE_BACKLOG_PASSERS > 0:
            return tuning.FWD_GATE_TARGETS_OWN_POSTFILTER
        return tuning.FWD_GATE_TARGETS

    def flush_gates(self) -> None:
        """Launch the queued Forward gates now (one batch)."""
        with self._forward_lock:
            self._launch_queued()

    def _launch_queued(self, full: bool = True) -> None:
        """Launch the queued gates as one batch; ``full`` False: one of the search's first,
        smaller batches (:meth:`_gate_batch_targets`), whose passers are not defined here."""
        if not self._queued:
            return
        with self._simulated:
            batch = self._stage().launch([job for _, job in self._queued])
        for k, (gated, _) in enumerate(self._queued):
            gated.batch, gated.job = batch, k
        members = [gated for gated, _ in self._queued if gated.decode]
        if members:
            step = _DecodingStep(self, batch, members, full=full)
            for gated in members:
                gated.step = step
            with self._lock:
                self._steps.append(step)
        self._queued, self._queued_targets = [], 0
        self._gate_batches += 1

    def advance_decoding(self) -> None:
        """Launch the decodings of every gate batch that is done (:class:`_DecodingStep`), so that
        they run while the host waits for earlier models' (no wait here)."""
        with self._lock:
            steps = list(self._steps)
        for step in steps:
            if step.launch(wait=False):
                with self._lock:
                    if step in self._steps:
                        self._steps.remove(step)

    def _decide_gate(self, gated: GateTicket) -> CascadeResult:
        """A model's F3 decisions from its batch's scores (the batch waited for once)."""
        from dataclasses import replace

        clock = time.perf_counter()
        batch = gated.batch
        with self._forward_lock:
            got = batch.results()[gated.job]
            time_once = batch.claim_time()
        if time_once is not None:
            self._add_forward_time(*time_once)
        partial = gated.partial
        fwd = ForwardResult(partial.past_vit, got.status, got.scores, 0)
        kept, gate = forward_gate(gated.profile, gated.options, fwd, gated.filtersc)
        self._count(gate)
        seconds = dict(partial.seconds, forward=time.perf_counter() - clock)
        return replace(partial, survivors=kept, forward=gate, seconds=seconds)

    def _count(self, gate) -> None:
        """Add a model's Forward gate decisions to :attr:`forward_counts`."""
        if gate is None:
            return
        with self._lock:
            for name, value in (("passed", gate.passed), ("failed", gate.failed), ("unsure", int(gate.unsure.size))):
                self.forward_counts[name] += value

    # ------------------------------------------------------------ the cascade
    def run(self, profile, options) -> CascadeResult:
        """The cascade of one model, waiting for it."""
        return self.submit(profile, options).result()

    def submit(self, profile, options) -> Ticket:
        """Queue one model's cascade on the GPU and return at once."""
        started = time.perf_counter()
        msv_spec = self.msv.spec(profile.M)
        if msv_spec is None or not self.resident.resident:
            # too long for the kernel shapes, or a chunked database: synchronously
            backend = _StageBackend(self, use_gpu_msv=msv_spec is not None)
            with self._simulated:
                result = run_cascade(backend, profile, options, self.resident.db)
            self._count(result.forward)
            return Ticket(self, profile, options, done=result)

        while True:  # the ring is full: the oldest must be finished first (here, or by another thread)
            with self._lock:
                if len(self._in_flight) < SLOTS:
                    break
                oldest = self._in_flight[0]
            oldest.filtered()
        slot = self._slots[self._next]
        if slot is None:
            with self.device.activate():
                slot = self._slots[self._next] = self._new_slot(self._slot_targets)
        self._next = (self._next + 1) % SLOTS
        vit_spec = self.vit.spec(profile.M)
        vit_reason = "no kernel shape" if vit_spec is None else exactness_conditions(profile.word,
                                                                                     self.resident.max_length)
        byte = profile.byte
        mu, lam = profile.evalue_parameters[:2]
        bands = np.array([*stats.score_threshold(mu, lam, options.F1), *stats.score_threshold(mu, lam, options.F2)],
                         np.float32)
        host_tables = dict(zip(("ssv_table", "msv_table"), model_tables(byte, msv_spec)))
        host_tables.update(threshold_by_length=stats.msv_thresholds(profile, self.max_length, options.F1,
                                                                    self._distinct_lengths),
                           scalars=scalars(byte), odds=profile.bias.emission_odds.reshape(-1), bands=bands)
        vt = None
        if vit_reason is None:
            vt = tables(profile.word, vit_spec, self.max_length)
            host_tables.update(emissions=vt.emissions, transitions=vt.transitions, dd_sums=vt.dd_sums,
                               overflow_at=vt.overflow_at)
        chunk = next(self.resident.chunks())
        s = slot.stream
        out = slot.outputs
        start, after_msv, after_bias, stop, copied = slot.events
        with self._simulated, self.device.activate():
            slot.upload(host_tables, s)
            slot.counters.copy_to_device(slot.zeros, stream=s)
            start.record(s)
            self.msv.launch(msv_spec, chunk, s, ssv_table=slot.tables["ssv_table"],
                            msv_table=slot.tables["msv_table"], tjb_by_length=self._db_tables["tjb32"],
                            threshold_by_length=slot.tables["threshold_by_length"], scalars=slot.tables["scalars"],
                            counters=slot.counters[:len(MsvCounter)], out_pos=out["msv_pos"],
                            out_status=out["msv_status"], out_xj=out["msv_xj"], fallback_pos=out["fallback"])
            after_msv.record(s)
            self._launch_bias(chunk, slot, profile, options)
            after_bias.record(s)
            if vt is not None:
                self.vit.launch(vit_spec, chunk, s, items=out["vit_pos"], n_items_at=slot.counters,
                                n_items_slot=_VIT_LIST, counters=slot.counters[_VIT_WORK:], tables=vt,
                                device_tables=slot.tables, move_by_length=self._db_tables["move_by_length"],
                                out_status=out["vit_status"], out_xc=out["vit_xc"])
            stop.record(s)
            slot.results_device[:slot.results_bytes].copy_to_host(slot.results_host, stream=s)
            copied.record(s)
        ticket = Ticket(self, profile, options, slot=slot, plan=dict(vit=vt is not None, vit_reason=vit_reason))
        with self._lock:
            self.host_seconds["submit"] += time.perf_counter() - started  # the ring's wait included
            self._in_flight.append(ticket)
        return ticket

    def _launch_bias(self, chunk, slot, profile, options) -> None:
        if self._bias_kernel is None:
            self._bias_kernel = build.load(BiasSpec(), self.device)
        grid = 1 if self.device.simulator else self.device.sm_count * tuning.BIAS_BLOCKS_PER_SM
        block = 32 if self.device.simulator else tuning.BIAS_BLOCK
        t = self._db_tables
        args = arguments(BIAS_ARGS, residues=chunk.residues, word_offsets=chunk.word_offsets, lengths=chunk.lengths,
                         msv_pos=slot.outputs["msv_pos"], msv_status=slot.outputs["msv_status"],
                         msv_xj=slot.outputs["msv_xj"],
                         n_msv_at=slot.counters, n_msv_slot=int(MsvCounter.OUT), odds=slot.tables["odds"],
                         t10=profile.bias.t10, t11=profile.bias.t11, bias_on=int(options.bias_filter),
                         p1_by_length=t["p1_by_length"], q1_by_length=t["q1_by_length"],
                         first_by_length=t["first_by_length"], second_by_length=t["second_by_length"],
                         null_by_length=t["null_by_length"], tjb_by_length=t["tjb32"], bands=slot.tables["bands"],
                         filtersc=slot.outputs["filtersc"], decision=slot.outputs["decision"],
                         vit_pos=slot.outputs["vit_pos"], vit_from=slot.outputs["vit_from"], n_vit_at=slot.counters,
                         n_vit_slot=_VIT_LIST)
        self._bias_kernel[grid, block, slot.stream, 0](*args)

    def _finish(self, ticket: Ticket) -> GateTicket:
        """Wait for a ticket's event and take the host's part of the filters (module header);
        queue the Forward gate of the survivors."""
        rt = self.device.runtime
        slot = ticket.slot
        t0 = time.perf_counter()
        slot.events[-1].synchronize()
        waited = time.perf_counter() - t0
        t0 = time.perf_counter()
        plan = ticket.plan
        profile, options = ticket.profile, ticket.options
        h = dict(slot.host)
        h["counters"] = h["counters"].copy()
        n_out = int(h["counters"][MsvCounter.OUT])
        n_fallback = int(h["counters"][MsvCounter.FALLBACK])
        n_vit = int(h["counters"][_VIT_LIST])
        indices = self.resident.indices
        db = self.resident.db
        reference = _Reference(profile, db)
        pos = indices[h["msv_pos"][:n_out]]
        usc = MsvResult(pos, h["msv_status"][:n_out], h["msv_xj"][:n_out]).scores(db.lengths)
        filtersc = h["filtersc"][:n_out].copy()
        decision = h["decision"][:n_out].copy()
        vsc = np.full(n_out, np.nan, np.float32)  # NaN: the GPU did not run (or finish) the Viterbi filter
        if plan["vit"] and n_vit:
            src = h["vit_from"][:n_vit]
            st = h["vit_status"][:n_vit]
            ok = st != STATUS_UNCERTAIN
            vsc[src[ok]] = ViterbiResult(pos[src[ok]], st[ok], h["vit_xc"][:n_vit][ok]).scores(db.lengths)
        if n_fallback:  # the J-state MSV the GPU's max(S, B) form cannot finish: HMMER's own
            fb = indices[h["fallback"][:n_fallback]]
            fsc = reference.msv(fb)
            keep = stats.passes_gumbel(fsc, null_table(self.max_length)[db.lengths[fb]], *profile.evalue_parameters[:2],
                                       options.F1)
            k = int(keep.sum())
            pos = np.concatenate([pos, fb[keep]])
            usc = np.concatenate([usc, fsc[keep]])
            filtersc = np.concatenate([filtersc, np.zeros(k, np.float32)])
            decision = np.concatenate([decision, np.full(k, Decision.HOST, np.int8)])
            vsc = np.concatenate([vsc, np.full(k, np.nan, np.float32)])
        survivors, past_bias, survivors_fsc = _decide(profile, options, db, self.max_length, reference, pos, usc,
                                                      filtersc, decision, vsc)
        order = np.argsort(survivors, kind="stable")
        past_vit, survivors_fsc = survivors[order], survivors_fsc[order]
        gpu_s = 0.0
        kernel_ms = {}
        if not self.device.simulator:
            ev = slot.events
            for name, a, b in (("msv", ev[0], ev[1]), ("bias", ev[1], ev[2]), ("viterbi", ev[2], ev[3])):
                kernel_ms[name] = rt.elapsed_ms(a, b)
                gpu_s += kernel_ms[name] / 1e3
            span = (rt.elapsed_ms(self._epoch, ev[0]), rt.elapsed_ms(self._epoch, ev[3]))
        seconds = dict(gpu=gpu_s, host=time.perf_counter() - t0)
        with self._lock:  # the slot may be reused from here on
            self._in_flight.remove(ticket)
            if kernel_ms:
                self._busy.append(span)
            for name, ms in kernel_ms.items():
                self.kernel_ms[name] += ms
            self.host_seconds["wait"] += waited
            self.host_seconds["finish"] += seconds["host"]
        partial = CascadeResult(survivors=past_vit, n_past_msv=int(pos.size), n_past_bias=int(past_bias.size),
                                n_past_vit=int(past_vit.size), seconds=seconds, past_msv=pos, past_bias=past_bias,
                                past_vit=past_vit)
        return self._queue_gate(profile, options, partial, survivors_fsc)

    def close(self) -> None:
        for ticket in list(self._in_flight):
            ticket.filtered()
        self.flush_gates()
        if self._definer is not None:
            self._definer.shutdown(wait=True)
        self._slots = []
        self._db_tables = {}
        self._forward_stage = None
        self.resident.close()


def _decide(profile, options, db, max_length, reference, pos, usc, filtersc, decision, vsc):
    """The host's part of the cascade for the targets that passed MSV: (survivors, the
    targets that passed the bias filter, the survivors' ``filtersc``, which the Forward gate
    takes).

    ``usc``: MSV scores (nats); ``filtersc``: the GPU's bias scores (decided targets);
    ``decision``: the bias kernel's :class:`Decision`; ``vsc``: the GPU's Viterbi filter
    scores, NaN where the host must run it (HMMER's own function, through ``reference``).
    """
    mu, lam, vmu, vlam = profile.evalue_parameters[:4]
    host = decision == Decision.HOST
    if host.any():  # the bias score again with HMMER's own code, and the F1 test
        hp = pos[host]
        filtersc[host] = reference.bias(hp) if options.bias_filter else null_table(max_length)[db.lengths[hp]]
        passed = stats.passes_gumbel(usc[host], filtersc[host], mu, lam, options.F1)
        decision[host] = np.where(passed, Decision.VITERBI_OR_SKIP, Decision.FAIL)
        vsc[host] = np.nan
    alive = decision != Decision.FAIL
    survive = decision == Decision.SURVIVE
    maybe_skip = decision == Decision.VITERBI_OR_SKIP
    if maybe_skip.any():  # P <= F2 decides whether the Viterbi filter is skipped
        skip = stats.passes_gumbel(usc[maybe_skip], filtersc[maybe_skip], mu, lam, options.F2)
        survive[np.flatnonzero(maybe_skip)[skip]] = True
    need = alive & ~survive
    redo = need & np.isnan(vsc)
    if redo.any():
        vsc[redo] = reference.viterbi(pos[redo])
    if need.any():
        survive[np.flatnonzero(need)[stats.passes_gumbel(vsc[need], filtersc[need], vmu, vlam, options.F2)]] = True
    return pos[survive], pos[alive], filtersc[survive]


class _Reference:
    """HMMER's own filter functions (libhmmer) for the few targets the kernels leave to the host.

    Made on first use: most models never need it.
    """

    def __init__(self, profile, db):
        self.profile = profile
        self.db = db
        self._model = None

    def _hmmer(self):
        if self._model is None:
            from hmmgpu.cpu.hmmerlib import HmmerModel

            self._model = HmmerModel(self.profile.hmm)
        return self._model

    def _scores(self, fn, positions) -> np.ndarray:
        return np.array([fn(self.db.codes(int(p))) for p in positions], np.float32)

    def msv(self, positions) -> np.ndarray:
        """``p7_MSVFilter`` scores (nats, +inf on overflow)."""
        return self._scores(lambda c: self._hmmer().msv(c)[1], positions)

    def bias(self, positions) -> np.ndarray:
        """``p7_bg_FilterScore`` scores (nats)."""
        return self._scores(self._hmmer().bias_filter_score, positions)

    def viterbi(self, positions) -> np.ndarray:
        """``p7_ViterbiFilter`` scores (nats, +inf on overflow)."""
        return self._scores(lambda c: self._hmmer().viterbi_filter(c)[1], positions)


class _StageBackend:
    """The cascade's stage methods for a model the pipelined path does not take."""

    def __init__(self, gpu: GpuCascade, use_gpu_msv: bool):
        self.gpu = gpu
        self.use_gpu_msv = use_gpu_msv

    def msv(self, profile, thresholds=None):
        from hmmgpu.cpu import filters as cpu_filters

        if self.use_gpu_msv:
            return MsvResult(*self.gpu.msv_stage.run(profile, thresholds))
        db = self.gpu.resident.db
        status, xj = cpu_filters.msv_filter(profile, db)
        passed = db.lengths > 0
        if thresholds is not None:
            passed &= (status != 0) | (xj >= np.asarray(thresholds)[db.lengths])
        idx = np.flatnonzero(passed)
        return MsvResult(idx, status[idx], xj[idx])

    def bias(self, profile, indices):
        return self.gpu.bias_scores(profile, indices)

    def viterbi(self, profile, indices):
        idx = np.asarray(indices, np.int64)
        return ViterbiResult(idx, *self.gpu.vit_stage.run(profile, idx))

    def forward(self, profile, indices, fallback: bool = False):
        if not (self.gpu.forward_gate or fallback) or profile.hmm is None:
            return None
        return self.gpu.forward(profile, indices, fallback)


__all__ = ["GpuCascade", "Ticket", "GateTicket", "all_specs", "SLOTS"]
