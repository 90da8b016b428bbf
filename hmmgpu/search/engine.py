"""The search engine: many query models against one database, every stage busy at once.

How a search flows
------------------
Models arrive as a stream (a 20,000-model Pfam file is never held whole). Three kinds of
threads pass them along through bounded queues (and a fourth may hand work back to the GPU):

1. **prepare** (one thread): checks each model (protein alphabet, calibration, cutoffs) and
   builds, on a filter backend, hmmgpu's quantized filter tables (pyhmmer's stage takes the
   model itself: each worker configures it into its own pipeline's reused buffers).
2. **filter** (two threads): one submits each model's filter cascade to the backend (on
   the GPU the launches of several models are queued ahead, with no host synchronisation
   between them: :mod:`hmmgpu.gpu.cascade`); the other waits for each cascade in turn
   (a blocking wait that leaves the GIL to the others, rather than polling), finishes it
   and cuts the survivors into tasks of roughly equal work (:mod:`hmmgpu.stages.postfilter`).
   On the pyhmmer route there are no hmmgpu filters: the tasks are ranges of all targets,
   and the prepare thread queues them itself (one hand-off fewer per model: on two cores,
   600 small models, 15% fewer context switches).
3. **workers** (``--cpu`` threads): take tasks, earliest model first, and run pyhmmer's
   Forward/Backward/domain stage on them (pyhmmer releases the GIL). Splitting by survivors
   rather than by model keeps every thread busy to the end; the worker that finishes a
   model's last task merges its parts into one serial run's ``TopHits``.
4. **reclaim** (one thread, with hmmgpu's own post-filter on a GPU backend): once the filters
   are done the GPU is idle while the workers still have seconds of tasks queued. This thread
   takes the tasks queued last back (:func:`_take_last`: their F3 passers a share of those
   queued, what the GPU defines while the workers do the rest at the speeds measured so far,
   :func:`reclaim_share`), has the GPU process
   decode and define their passers (``define_passers``, as it defines a gate batch's), and
   queues them again with those answers, so that a worker only forms their hits. The tasks
   taken are the ones the workers would reach last, so nobody waits for the GPU but at the
   very end, and the answers are the same definitions the stage would make itself. It is off
   (:data:`RECLAIM_MARGIN` 0) until the GPU process defines passers faster than it does today:
   measured, it made the searches slower.

With ``auto``, the backend's filters and pyhmmer's whole pipeline share the models, so that
neither the GPU nor the worker threads wait while the other has work:

* While the backend is still starting (the GPU process opens its device, loads its kernels
  and reads the database: 0.2-0.3 s with a warm kernel cache, about 8 s when it compiles), a
  search of fewer models than worker threads does not leave the workers waiting: a model
  that is not small gets a *head start* (:class:`HeadStart`). Its tasks on pyhmmer's whole
  pipeline (ranges of consecutive targets, as on the pyhmmer route) are queued at once, and
  the workers claim them in database order. Once the backend is ready, no further range is
  claimed; the model goes through the filters, and the targets of the claimed ranges are
  left out of its survivors and its filter counters, so each target is searched once, on
  one route or the other. If every range has been claimed first (a backend that compiles),
  the model never reaches the filters. (No head start where the ranges would first make
  every target a pyhmmer sequence object: :meth:`SearchEngine.head_start`.) A single model
  against a sequence file would mostly be searched before the GPU process had read the
  file, so ``auto`` does not start the GPU for one (:func:`~hmmgpu.search.routing.pyhmmer_route`);
  against a made database, whose GPU process starts without reading it, it does.
* A *small* model (:data:`~hmmgpu.costs.SMALL_MODEL_CELLS`: model length x database
  residues) goes to pyhmmer's whole pipeline whenever the workers are short of work and the
  backend is behind: still starting, or holding :data:`SHARE_BACKLOG` models or more that it
  has not answered. The GPU route's cost per model is fixed (tables built and sent, three
  launches, a reply: about 4 ms of host work in the GPU process), which small models cannot
  pay back; ``auto`` does not start the GPU when the average model is small, so this serves
  the searches that mix small and large models. A large model still waits for the filters:
  its whole pipeline costs about three times the Forward stage left after them (with 600
  models against 29 M residues, rerouting while the GPU started made the search 4 s slower
  on the 16-core H200 machine).

A backend that cannot start at all raises its error with ``--backend cuda``; with ``auto``
the search goes on with pyhmmer's route. The results do not depend on the route: both give
one serial hmmsearch's ``TopHits``.

On pyhmmer's route, with fewer models than threads, an ASCII FASTA file is not read here at
all: its tasks are pieces of the file that pyhmmer reads and searches itself, in every
thread (:class:`~hmmgpu.formats.seqdb.FastaPieces`).

The caller's iterator yields the results in query order. A semaphore bounds the number of
models between the reader and the caller, so memory stays flat however long the model file
is. With ``cpus=0`` (hmmsearch's ``--cpu 0``) everything runs in the calling thread.

:class:`EngineStats` records where the time went: each stage's busy time, the GPU's busy
time and fraction, the worker threads' busy fraction, and the targets through each stage.
"""
from __future__ import annotations

import functools
import queue
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from hmmgpu.stages.protocol import CascadeBackend
from hmmgpu.costs import small_on_average
from hmmgpu.errors import DeviceUnavailable, HmmgpuError
from hmmgpu.host import interrupted
from hmmgpu.cpu.pyhmmer_stage import PyhmmerStage


#: Models between the reader and the caller at most (a bound on memory): per worker thread,
#: and at least. Results leave in query order, so one slow model holds back every later
#: one; the window must cover the models the other threads finish meanwhile (a model with
#: many hits can take ten times an average one), or they run out of work.
MODELS_IN_FLIGHT_PER_THREAD = 16
MODELS_IN_FLIGHT_MIN = 64
#: The same bound with hmmgpu's own post-filter on the GPU (``--postfilter hmmgpu``), whose
#: models come back seconds after their filters (when their gate batch's domains are defined in
#: the GPU process): the window must cover the models filtered meanwhile. At 256 (16 threads)
#: the GPU process's gate batches came one after each definition, the filters waiting for the
#: window (600 Pfam models x 29 M residues, one H200, c2a5537).
MODELS_IN_FLIGHT_OWN_POSTFILTER_MIN = 1024
#: While the backend starts (or is behind, for a small model) and every worker is busy, how
#: long the submitting thread waits for either to change before it looks again (seconds).
START_POLL_SECONDS = 0.005
#: The backend is behind when this many models or more wait for its answer: the GPU process
#: runs :data:`~hmmgpu.gpu.cascade.SLOTS` at once.
SHARE_BACKLOG = 8
#: How long into a search a backend still starting is waited for before models that are not
#: small and get no head start (:meth:`SearchEngine.head_start`) go to pyhmmer's whole
#: pipeline instead (seconds): longer than a warm start, much shorter than one that compiles.
REROUTE_AFTER_SECONDS = 1.0
#: A backend whose results come in any order: how long the finishing thread waits for one
#: at a time before it looks for models sent meanwhile (seconds).
FINISH_POLL_SECONDS = 0.005
#: Once the filters are done, the GPU process takes back the tasks queued last whose F3 passers
#: it can define (hmmgpu's own post-filter, its gate batches declined), a batch at a time: the
#: share of the queued passers that it would define while the worker threads do the rest, from
#: the two speeds (passers a second: the workers' so far, the GPU process's at its last batch,
#: RECLAIM_GPU_PASSERS_PER_SECOND before its first), times RECLAIM_MARGIN (a GPU that ends
#: after the workers keeps them waiting; one that ends first takes another batch), at most
#: RECLAIM_MAX_PASSERS; none once that is under RECLAIM_MIN_PASSERS. RECLAIM_MARGIN 0: none
#: taken, the default. Measured on one H200 (600 Pfam, outputs equal in every run): alone after
#: the filters the GPU process defined 9,042 passers in 7.06 s, 1,280 a second, where 16 worker
#: threads do 7,000-8,500 (58e31ca, session_defprofile_h200_2026-11-29_s16call2.log); a fixed
#: share of 0.25 kept the workers waiting for the GPU's last batch (29 M: 8.5-9.8 s against the
#: default route's 6.3-6.9 s; 116 M: 27.9-28.3 s against 21.0-21.7 s,
#: session_reclaim_h200_2026-11-29_s16call1.log), and so did these shares from the speeds at a
#: margin of 0.8 (shares 0.15-0.18; 29 M: 7.6 s against 5.7-6.5 s, 116 M: 26.0-26.9 s against
#: 20.5-21.1 s, e463049, session_reclaim_h200_2026-11-29_s16call3.log): the GPU process's host
#: part of the definitions (about 0.8 ms of CPU a passer, in one interpreter, and the CPU
#: sampler's threads) is too slow, and takes cores from the workers. With that part over arrays
#: (ac24ab5: its lock about 0.10 ms a passer, about 2,400 passers a second after the filters) it
#: still did not pay: 22.8-23.5 s at 116 M against 19.4-20.7 s, and queueing the answered tasks
#: first 24.0-25.7 s against 18.5-19.3 s (session_reclaim_h200_2026-11-29_s20call2.log, s20call3):
#: the worker threads wait 60-100 thread-s more beside the GPU's definitions, whose hits they form
#: in this process's interpreter. A py-spy profile of such a run found them after pyhmmer's and
#: the display's lock-free code (about 66 thread-s, the lock held 35% of the run), but a switch
#: interval of 0.2 or 1 ms during the search did not help: 20.95-24.18 s against 21.82 s and the
#: default route's 19.15-19.69 s (session_reclaimspy_h200_2026-11-29_s20call6.log,
#: session_switch_h200_2026-11-29_s20call7.log; docs/performance.md).
RECLAIM_GPU_PASSERS_PER_SECOND = 1280.0
RECLAIM_MARGIN = 0.0
RECLAIM_MAX_PASSERS = 8192
RECLAIM_MIN_PASSERS = 256


@dataclass
class Query:
    """A query model on its way through the engine."""

    index: int  #: position in the input (0-based)
    hmm: object  #: pyhmmer ``HMM``
    profile: object = None  #: what the cascade backend takes (``backend.prepare``), if any
    counts: object = None  #: the cascade's counters (filter backends)
    results: dict = field(default_factory=dict)  #: finished tasks' results by part number
    n_tasks: int = 0
    seconds: dict = field(default_factory=dict)
    head: "HeadStart | None" = None  #: its ranges on pyhmmer's whole pipeline while the backend started


class HeadStart:
    """A query's ranges of targets on pyhmmer's whole pipeline while the filter backend
    starts (see the module header). Workers take the range tasks (parts 0, 1, ...) in order
    and :meth:`claim` each before running it; :meth:`stop` ends the claims once the filters
    can take the query. A part below the highest one claimed is always granted, so the parts
    run are exactly 0..:attr:`claimed` - 1 whichever worker reaches its claim first."""

    def __init__(self, tasks: list):
        self.tasks = tasks
        self.claimed = 0  #: parts 0..claimed-1 are run (final once stopped)
        self._stopped = False
        self._lock = threading.Lock()

    def claim(self, part: int) -> bool:
        """Whether a worker that took range task ``part`` runs it."""
        with self._lock:
            if not self._stopped:
                self.claimed = max(self.claimed, part + 1)
                return True
            return part < self.claimed

    def stop(self) -> int:
        """End the claims; the number of range tasks that run."""
        with self._lock:
            self._stopped = True
            return self.claimed

    def covered(self, n: int) -> np.ndarray:
        """Which of the database's ``n`` targets the claimed ranges search (a mask)."""
        mask = np.zeros(n, bool)
        for task in self.tasks[:self.claimed]:
            mask[task.positions] = True
        return mask


@dataclass
class SearchResult:
    """One query's result: its pyhmmer ``TopHits`` (equal to a serial hmmsearch's) and counters."""

    index: int
    hmm: object
    hits: object
    pipeline: dict = None  #: hmmsearch's counters (nseqs, nres, n_past_*)
    seconds: dict = field(default_factory=dict)

    @property
    def counts(self):
        """The query's :class:`~hmmgpu.stages.cascade.StageCounts`."""
        from hmmgpu.stages.cascade import StageCounts

        pli = self.pipeline
        return StageCounts(query=str(self.hmm.name), M=self.hmm.M, nseqs=pli["nseqs"], nres=pli["nres"],
                           n_past_msv=pli["n_past_msv"], n_past_bias=pli["n_past_bias"],
                           n_past_vit=pli["n_past_vit"], n_past_fwd=pli["n_past_fwd"],
                           n_reported=len(self.hits.reported), n_included=len(self.hits.included),
                           seconds=self.seconds)


@dataclass
class EngineStats:
    """Where the time of a search went."""

    wall_seconds: float = 0.0
    queries: int = 0
    threads: int = 0
    prepare_seconds: float = 0.0  #: busy time of the prepare thread
    filter_seconds: float = 0.0  #: busy time of the filter thread (host side of the filters)
    gpu_seconds: float = 0.0  #: time the GPU was busy with the filter kernels (CUDA events)
    forward_seconds: float = 0.0  #: busy time of the workers in pyhmmer's stage after hmmgpu's filters
    pipeline_seconds: float = 0.0  #: busy time of the workers in pyhmmer's whole pipeline (unfiltered)
    #: CPU time of each stage's threads (busy time less the waits for the GIL and the GPU), and
    #: ``gpu_processes``: the whole of the GPU processes' (their filters' loop, and with
    #: ``--postfilter hmmgpu`` the definitions' host part and CPU sampler)
    cpu_seconds: dict = field(default_factory=lambda: dict(prepare=0.0, filter=0.0, workers=0.0))
    tasks: int = 0
    filtered_queries: int = 0  #: models through the backend's filters
    pipeline_queries: int = 0  #: models on pyhmmer's whole pipeline (on a cascade backend: while it started)
    #: targets of models through the filters searched on pyhmmer's whole pipeline instead, by
    #: their head start while the backend started (:class:`HeadStart`), over all models
    head_start_targets: int = 0
    ready_seconds: float | None = None  #: when the cascade backend could take models (from the start)
    #: when the first task of pyhmmer's stage started, and when the filters' last answer came (from the start)
    first_task_seconds: float | None = None
    last_answer_seconds: float | None = None
    fallback: str = ""  #: why ``auto`` went on without the GPU, when it did
    description: str = ""  #: the backend's description at the end of the search
    targets: dict = field(default_factory=lambda: dict(msv=0, bias=0, vit=0, fwd=0, searched=0))
    #: the Forward gate's decisions on the Viterbi filter's survivors (hmmgpu's Forward, before
    #: pyhmmer's stage): passed F3, failed it (pyhmmer never ran on them), left undecided
    forward_gate: dict = field(default_factory=lambda: dict(passed=0, failed=0, unsure=0))
    backend: dict = field(default_factory=dict)  #: the backend's own breakdown (GPU kernels, host side)
    #: worker processes of one thread each (:mod:`hmmgpu.distributed.processes`; 0: threads of this process),
    #: and the sum of their peak memory
    processes: int = 0
    processes_peak_rss_mb: float = 0.0
    #: the worker processes' time on their batches: parsing, checking, searching, formatting
    processes_busy_seconds: float = 0.0
    #: pyhmmer's post-filter stage in worker processes (:mod:`hmmgpu.cpu.pyhmmer_processes`): how
    #: many, and the threads of each (0: in this process's worker threads)
    postfilter_processes: int = 0
    postfilter_process_threads: int = 0
    #: what the post-filter stage did (:meth:`~hmmgpu.stages.protocol.PostFilterStage.details`: hmmgpu's own
    #: stage counts the targets it did and those it sent to pyhmmer's pipeline)
    postfilter: dict = field(default_factory=dict)
    #: the tasks the GPU process took back once the filters were done (:func:`_take_last`): when
    #: (seconds from the start), its batches, their tasks and F3 passers, the seconds waited for
    #: them, and each batch's share of the queued passers (:func:`reclaim_share`)
    reclaim: dict = field(default_factory=lambda: dict(after_seconds=None, batches=0, tasks=0, passers=0, seconds=0.0,
                                                       shares=[]))

    def add(self, other: "EngineStats") -> None:
        """Add the counts and busy times of another part of the same run (a worker process's)."""
        for name in ("queries", "prepare_seconds", "filter_seconds", "forward_seconds", "pipeline_seconds",
                     "tasks", "filtered_queries", "pipeline_queries", "head_start_targets", "processes_busy_seconds"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for totals, part in ((self.cpu_seconds, other.cpu_seconds), (self.targets, other.targets),
                             (self.forward_gate, other.forward_gate), (self.postfilter, other.postfilter)):
            for key, value in part.items():
                totals[key] = totals.get(key, 0) + value   # (a part's GPU processes: cpu_seconds' gpu_processes)

    @property
    def gpu_busy_fraction(self) -> float:
        return self.gpu_seconds / self.wall_seconds if self.wall_seconds else 0.0

    @property
    def worker_seconds(self) -> float:
        """Busy time of the workers (pyhmmer's stage after the filters and its whole pipeline)."""
        return self.forward_seconds + self.pipeline_seconds

    @property
    def worker_busy_fraction(self) -> float:
        """The workers' busy time over (threads x wall time)."""
        return self.worker_seconds / (self.threads * self.wall_seconds) if self.wall_seconds and self.threads else 0.0

    @property
    def processes_busy_fraction(self) -> float:
        """The worker processes' busy time over (processes x wall time)."""
        return self.processes_busy_seconds / (self.processes * self.wall_seconds) \
            if self.wall_seconds and self.processes else 0.0

    def lines(self, shown: str = "") -> list:
        """A few lines for the end of a run (the backend's description first, unless it is
        ``shown``, the one given at the start)."""
        t = self.targets
        return [self.description] * bool(self.description and self.description != shown) + [
            f"queries {self.queries}, wall {self.wall_seconds:.2f} s, " + (
                f"{self.processes} worker processes of one thread (busy {self.processes_busy_seconds:.2f} s, "
                f"{100 * self.processes_busy_fraction:.0f}% of processes x wall; peak memory "
                f"{self.processes_peak_rss_mb:.0f} MB summed)"
                if self.processes else f"{self.threads} worker threads") + (
                f" (pyhmmer's post-filter stage in {self.postfilter_processes} processes, "
                f"{self.postfilter_process_threads} threads each)" if self.postfilter_processes else "")
            + f", {self.tasks} tasks",
            f"busy: prepare {self.prepare_seconds:.2f} s, filters {self.filter_seconds:.2f} s "
            f"(GPU busy {self.gpu_seconds:.2f} s, {100 * self.gpu_busy_fraction:.0f}% of wall), "
            f"workers {self.worker_seconds:.2f} s ({100 * self.worker_busy_fraction:.0f}% of threads x wall): "
            f"Forward/domain stage {self.forward_seconds:.2f} s, whole pipeline {self.pipeline_seconds:.2f} s",
            f"models: {self.filtered_queries} through the filters, {self.pipeline_queries} on pyhmmer's whole "
            "pipeline" + ("" if self.ready_seconds is None else f"; filters ready after {self.ready_seconds:.2f} s")
            + ("" if self.last_answer_seconds is None else f", their last answer after {self.last_answer_seconds:.2f} s")
            + ("" if self.first_task_seconds is None else f"; first task after {self.first_task_seconds:.2f} s")
            + (f"; {self.head_start_targets} of their targets searched on the whole pipeline while the filters "
               "started" if self.head_start_targets else "") + (f"; {self.fallback}" if self.fallback else ""),
            "CPU time: " + ", ".join(f"{k} {v:.2f} s" for k, v in self.cpu_seconds.items()),
            f"targets through each stage (all queries): searched {t['searched']}, past MSV {t['msv']}, "
            f"bias {t['bias']}, Viterbi {t['vit']}, Forward {t['fwd']}",
        ] + ([self.forward_gate_line()] if any(self.forward_gate.values()) else []) + (
            [self.postfilter_line()] if self.postfilter else []) + (
            [f"backend: {self.backend}"] if self.backend else [])

    def postfilter_line(self) -> str:
        """One line on hmmgpu's own post-filter stage: the F3 passers it did, those it sent to
        pyhmmer's pipeline (its exactness flags, and on the GPU route the passers the GPU did not
        decode or defined with a flag raised, those it declined for want of room and those with a
        clustered region it left to pyhmmer: the others are the fallback, of which issue 31 allows
        at most 1%)."""
        p = self.postfilter
        passed, host, failed, whole = p["passed"], p["host"], p["failed"], p["whole_tasks"]
        share = 100.0 * host / (passed + host) if passed + host else 0.0
        decoding = (self.backend.get("decoding") or {}) if self.backend else {}
        r = self.reclaim   # the declined passers taken back after the filters are not sent to pyhmmer
        declined, left = (decoding.get("declined") or 0) - r["passers"], decoding.get("left_clustered") or 0
        fallback = host - declined - left
        return (f"post-filter on hmmgpu's side: {passed} F3 passers done by hmmgpu's code ({p['own_seconds']:.2f} s "
                f"CPU), {host} targets sent to pyhmmer's pipeline (exactness flags; on the GPU route, passers the GPU did "
                f"not decode or defined with a flag raised) ({share:.2f}% of both)"
                + (f", {declined} of them passers the GPU process declined (its definitions' backlog full, or one of the first, smaller gate batches)"
                   if declined else "")
                + (f", {left} of them passers with a clustered region it left to pyhmmer (DEFINE_CLUSTERED off)"
                   if left else "")
                + (f", the other {fallback} ({100.0 * fallback / (passed + host):.2f}%) the fallback "
                   "(what the GPU did not decode or defined with a flag raised)" if declined or left else "")
                + (f", {failed} undecided targets failed F3" if failed else "")
                + (f"; {whole} targets of whole tasks on pyhmmer's pipeline (--seed 0, or a model the flags do "
                   "not cover)" if whole else "")
                + (f"; {p['decoded_on_gpu']} F3 passers' Forward and Backward parsers and domain decoding done on "
                   "the GPU" if p.get("decoded_on_gpu") else "")
                + (f", {p['defined_on_gpu']} passers defined on the GPU (domain definition in the GPU process)"
                   if p.get("defined_on_gpu") else "")
                + (f"; {r['passers']} F3 passers of {r['tasks']} queued tasks taken back by the GPU process after "
                   f"the filters ({r['batches']} batches from {r['after_seconds']:.2f} s, {r['seconds']:.2f} s, "
                   f"shares {r['shares']})" if r["batches"] else ""))

    def forward_gate_line(self) -> str:
        """One line on the Forward gate: what hmmgpu's Forward decided, the work taken from pyhmmer."""
        g = self.forward_gate
        ms = (self.backend.get("kernel_ms") or {}).get("forward")
        cells = (self.backend.get("forward_gate") or {}).get("cells")
        return (f"Forward filter on hmmgpu's side: {g['passed'] + g['failed'] + g['unsure']} Viterbi-filter "
                f"survivors, {g['failed']} failed F3 (pyhmmer's Forward, Backward and domain stage skipped on "
                f"them), {g['passed']} passed, {g['unsure']} left to pyhmmer undecided"
                + (f"; Forward kernel {ms:.1f} ms" if ms else "")
                + (f", {cells / ms / 1e6:.1f} GCUPS (model length x residues it ran)" if ms and cells else ""))

    def as_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items()}
        d.update(gpu_busy_fraction=self.gpu_busy_fraction, worker_seconds=self.worker_seconds,
                 worker_busy_fraction=self.worker_busy_fraction, processes_busy_fraction=self.processes_busy_fraction)
        return d


class _Failed:
    """A query whose preparation failed: the error is raised when the caller reaches it."""

    def __init__(self, index: int, error):
        self.index = index
        self.error = error


class SearchEngine:
    """Searches a stream of models against one database on one backend.

    ``SearchEngine(db, options, backend=..., ftz=False)``; :meth:`search` yields
    :class:`SearchResult` in query order. ``ftz`` runs pyhmmer's stage in the hmmsearch
    program's float mode (:mod:`hmmgpu.host`); ``model_lengths``, the lengths of the models to
    come when they are known, size the tasks by the whole run's work (fewer models than
    threads each cut into more tasks, a long model among many short ones too);
    ``processes``, a :class:`~hmmgpu.cpu.pyhmmer_processes.ProcessPlan`: pyhmmer's stage runs
    the filtered tasks in worker processes (started here, stopped when :meth:`search` ends).
    """

    def __init__(self, db, options, backend, *, ftz: bool = False, in_flight: int | None = None,
                 model_lengths=None, processes=None):
        self.db = db
        self.options = options
        self.backend = backend
        self.ftz = ftz
        backend.set_float_mode(ftz)
        self.threads = 0 if options.run.cpus == 0 else options.run.threads
        least = MODELS_IN_FLIGHT_OWN_POSTFILTER_MIN if options.run.postfilter == "hmmgpu" else MODELS_IN_FLIGHT_MIN
        self.in_flight = in_flight or max(least, MODELS_IN_FLIGHT_PER_THREAD * max(1, self.threads))
        self.forward = post_filter_stage(options.run.postfilter, processes)(db, options, ftz=ftz, threads=self.threads,
                                                                            model_lengths=model_lengths)
        queries = len(model_lengths) if model_lengths else None
        self.filtered = isinstance(backend, CascadeBackend)
        #: models may go to pyhmmer's whole pipeline while the backend starts (see the module header)
        self.reroute = options.run.backend == "auto" and queries is not None and queries < self.threads
        #: small models may go there whenever the backend is behind
        self.share = options.run.backend == "auto" and self.threads > 0
        self.stats = EngineStats(threads=max(1, self.threads))
        if processes is not None:
            self.stats.postfilter_processes = processes.processes
            self.stats.postfilter_process_threads = processes.threads
        self._lock = threading.Lock()
        self._start = time.perf_counter()

    # ------------------------------------------------------------ the stages, per query
    def prepare(self, index: int, item) -> Query:
        """Check a model and, on a cascade backend, prepare it for the backend (hmmgpu's tables)."""
        from hmmgpu.formats.checks import check_model

        hmm = getattr(item, "hmm", item)
        check_model(hmm, self.options)
        query = Query(index=index, hmm=hmm)
        if self.filtered:
            query.profile = self.backend.prepare(hmm, getattr(item, "mmu", None))
        return query

    def submit(self, query: Query):
        """Start ``query``'s filter cascade (waiting for a backend that is starting); None on
        the pyhmmer route (the serial search: its one thread has nothing else to do meanwhile)."""
        return self.backend.submit(query.profile, self.options) if self._filters_take(query, lambda: False) else None

    def _filters_take(self, query: Query, idle) -> bool:
        """Whether ``query`` goes through the backend's filters rather than pyhmmer's whole
        pipeline (see the module header): at once if the backend is ready and not behind; else
        as soon as it is ready and caught up, unless ``idle()`` (fewer tasks queued or running
        than workers) comes first for a model that may go to the whole pipeline (with
        :attr:`reroute` while the backend starts, from :data:`REROUTE_AFTER_SECONDS` into the
        search; a small one with :attr:`share`, at any time)."""
        if not self.filtered:
            return False
        small = self.share and small_on_average(float(query.hmm.M) * self.db.total_residues, 1)
        reroute = self.reroute or small
        # a model that is not small waits for a backend that starts as fast as a warm one
        reroute_from = self._start + (0.0 if small else REROUTE_AFTER_SECONDS)

        def may_reroute() -> bool:
            return reroute and time.perf_counter() >= reroute_from and idle()

        while True:
            try:
                if self.backend.ready(timeout=(0.0 if may_reroute() else START_POLL_SECONDS) if reroute else None):
                    if self.stats.ready_seconds is None:
                        self.stats.ready_seconds = time.perf_counter() - self._start
                    break
            except HmmgpuError as error:
                if self.options.run.backend != "auto":  # auto goes on with pyhmmer's route
                    raise (DeviceUnavailable.for_backend(self.options.run.device)
                           if isinstance(error, DeviceUnavailable) else error) from None
                self.filtered = False
                self.stats.fallback = f"the GPU could not be used: {error}"
                return False
            if may_reroute():
                return False
        while small and self.backend.waiting() >= SHARE_BACKLOG:
            if idle():
                return False
            time.sleep(START_POLL_SECONDS)
        return True

    def head_start(self, query: Query) -> "HeadStart | None":
        """``query``'s head start on pyhmmer's whole pipeline (:class:`HeadStart`), or None:
        with ``auto`` and fewer models than threads, a model that is not small, over a
        database held here (not a file's pieces) that its plan cuts into several ranges,
        while the backend is still starting. (One range would be all or nothing: the model
        rerouted, which a model that is not small waits :data:`REROUTE_AFTER_SECONDS` for.)
        Not where the ranges would first make every target a sequence object (seconds of one
        thread for a large database, where the filters need only their survivors')."""
        if not (self.filtered and self.reroute and self.db.pieces is None):
            return None
        if self.forward.ranges_make_sequences:
            return None
        if small_on_average(float(query.hmm.M) * self.db.total_residues, 1):
            return None
        try:
            if self.backend.ready(timeout=0.0):
                return None
        except HmmgpuError:  # its error is taken where the query waits for the backend
            return None
        tasks = self.forward.plan(query)
        return HeadStart(tasks) if len(tasks) > 1 else None

    def plan(self, query: Query, ticket=None) -> list:
        """Cut ``query``'s remaining work into tasks, once its cascade (``ticket``) is done; after
        a head start, only the targets its claimed ranges did not search."""
        if ticket is None:
            return self.forward.plan(query)
        result = ticket.result()
        if query.head is not None:
            covered = query.head.covered(self.db.n)
            result = _outside(result, covered)
            with self._lock:
                self.stats.head_start_targets += int(covered.sum())
        query.counts = result
        query.seconds.update(result.seconds)
        if result.forward is not None:
            gate = result.forward
            with self._lock:
                for name, value in (("passed", gate.passed), ("failed", gate.failed),
                                    ("unsure", int(gate.unsure.size))):
                    self.stats.forward_gate[name] += value
        return self.forward.plan(query, result.survivors)

    def finish(self, query: Query) -> SearchResult:
        """Merge the query's task results into one ``TopHits``."""
        results = [query.results[k] for k in sorted(query.results)]
        hits, pipeline = self.forward.merge(query, results, query.counts)
        if pipeline is None:  # a whole-database pyhmmer run keeps its counters in the hits
            pipeline = hits.__getstate__()["pipeline"]
        with self._lock:
            self.stats.queries += 1
            if query.counts is None:
                self.stats.pipeline_queries += 1
            else:
                self.stats.filtered_queries += 1
            t = self.stats.targets
            for key, name in (("nseqs", "searched"), ("n_past_msv", "msv"), ("n_past_bias", "bias"),
                              ("n_past_vit", "vit"), ("n_past_fwd", "fwd")):
                t[name] += pipeline[key]
        return SearchResult(index=query.index, hmm=query.hmm, hits=hits, pipeline=pipeline, seconds=query.seconds)

    # ------------------------------------------------------------ drivers
    def search(self, models):
        """Search every model of the iterable ``models``; yield :class:`SearchResult` in order."""
        start = self._start = time.perf_counter()
        finished = False
        try:
            if self.threads == 0:
                yield from self._search_serial(models)
            else:
                yield from self._search_threaded(models)
            finished = True
        finally:
            self.forward.close(now=not finished)
            self.stats.wall_seconds = time.perf_counter() - start
            self.stats.gpu_seconds = getattr(self.backend, "gpu_seconds", lambda: 0.0)()
            self.stats.backend = self.backend.details()
            gpu_processes = gpu_process_cpu_seconds(self.stats.backend)
            if gpu_processes is not None:
                self.stats.cpu_seconds["gpu_processes"] = gpu_processes
            self.stats.description = self.backend.description
            self.stats.postfilter = self.forward.details()

    def _search_serial(self, models):
        from hmmgpu.host import flush_to_zero

        with flush_to_zero(self.ftz):
            for index, item in enumerate(models):
                t = [(time.perf_counter(), time.thread_time())]
                query = self.prepare(index, item)
                t.append((time.perf_counter(), time.thread_time()))
                tasks = self.plan(query, self.submit(query))
                t.append((time.perf_counter(), time.thread_time()))
                query.n_tasks = len(tasks)
                for task in tasks:
                    query.results[task.part] = self.forward.run(task, alone=len(tasks) == 1)
                result = self.finish(query)
                t.append((time.perf_counter(), time.thread_time()))
                self.stats.prepare_seconds += t[1][0] - t[0][0]
                self.stats.filter_seconds += t[2][0] - t[1][0]
                if query.counts is None:
                    self.stats.pipeline_seconds += t[3][0] - t[2][0]
                else:
                    self.stats.forward_seconds += t[3][0] - t[2][0]
                for k, stage in enumerate(("prepare", "filter", "workers")):
                    self.stats.cpu_seconds[stage] += t[k + 1][1] - t[k][1]
                self.stats.tasks += len(tasks)
                yield result

    def _reclaims(self) -> bool:
        """Whether the GPU process takes queued tasks back once the filters are done
        (:func:`_take_last`): its backend defines passers and the post-filter stage would use
        its definitions."""
        from hmmgpu.stages.protocol import PostFilterStage

        return (self.filtered and RECLAIM_MARGIN > 0 and hasattr(self.backend, "define_passers")
                and type(self.forward).passers_to_define is not PostFilterStage.passers_to_define)

    def _search_threaded(self, models):
        slots = threading.Semaphore(self.in_flight)
        to_filter: queue.Queue = queue.Queue(maxsize=4)
        to_finish: queue.Queue = queue.Queue()  # bounded by the backend's ring (GPU) or by to_filter
        work: queue.PriorityQueue = queue.PriorityQueue()
        results: dict = {}
        filters_done = threading.Event()   # every model's answer taken and its tasks queued
        done = threading.Condition()
        failure: list = []
        stop = threading.Event()
        n_models = [None]

        def fail(error):
            with done:
                if not failure:
                    failure.append(error)
                stop.set()
                done.notify_all()

        def deliver(index, value):
            with done:
                results[index] = value
                done.notify_all()

        def put(channel, entry) -> None:  # into a bounded queue, unless the search stops first
            while True:
                try:
                    return channel.put(entry, timeout=0.1)
                except queue.Full:
                    if stop.is_set():
                        return None

        def get(channel):  # the next entry, or None once the search stops
            while True:
                try:
                    return channel.get(timeout=0.1)
                except queue.Empty:
                    if stop.is_set():
                        return None

        def prepare_loop():
            count = 0
            try:
                items = iter(models)
                while True:
                    while not slots.acquire(timeout=0.1):
                        if stop.is_set():
                            return
                    try:
                        item = next(items)
                    except StopIteration:
                        break
                    except HmmgpuError as error:   # a fault in the model file: raised after the models before it
                        put(to_filter, (count, _Failed(count, error)))
                        count += 1
                        break
                    t0, c0 = time.perf_counter(), time.thread_time()
                    try:
                        query = self.prepare(count, item)
                    except HmmgpuError as error:
                        query = _Failed(count, error)
                    self.stats.prepare_seconds += time.perf_counter() - t0
                    self.stats.cpu_seconds["prepare"] += time.thread_time() - c0
                    if self.filtered or isinstance(query, _Failed):
                        put(to_filter, (count, query))
                    else:   # no filters to start: its tasks go to the workers from here
                        queue_tasks(query, None)
                    count += 1
            except BaseException as error:  # noqa: BLE001 - handed to the caller
                fail(error)
            finally:
                n_models[0] = count
                put(to_filter, None)

        def timed(stage_seconds: str, cpu_stage: str, fn, *args):
            t0, c0 = time.perf_counter(), time.thread_time()
            value = fn(*args)
            with self._lock:
                setattr(self.stats, stage_seconds, getattr(self.stats, stage_seconds) + time.perf_counter() - t0)
                self.stats.cpu_seconds[cpu_stage] += time.thread_time() - c0
            return value

        running = [0]  # tasks the workers are running
        worked = [0]   # targets of the tasks the workers ran without the GPU process's answers (their speed)

        def idle() -> bool:  # fewer tasks queued or running than workers (or the search is stopping)
            return stop.is_set() or work.qsize() + running[0] < self.threads

        def queue_tasks(query, ticket, head: HeadStart | None = None):
            tasks = head.tasks if head is not None else timed("filter_seconds", "filter", self.plan, query, ticket)
            with self._lock:
                if head is not None:  # ranges on the whole pipeline, claimed before they run
                    query.head = head
                if ticket is not None and query.head is not None:  # after the claimed ranges
                    ranges = len(query.head.tasks)
                    for task in tasks:
                        task.part += ranges
                    query.n_tasks = query.head.claimed + len(tasks)
                    self.stats.tasks -= ranges - query.head.claimed
                else:
                    query.n_tasks = len(tasks)
                self.stats.tasks += len(tasks)
            for task in tasks:
                work.put((query.index, task.part, task))

        def submit_loop():
            # models go to the backend as they come (on the GPU several are in flight; the
            # backend blocks when its ring is full) and on to the finishing thread, or to
            # pyhmmer's whole pipeline (see the module header), whose tasks are queued here at
            # once, so that idle() counts them for the next model
            try:
                while True:
                    entry = get(to_filter)
                    if entry is None or stop.is_set():
                        break
                    index, query = entry
                    if isinstance(query, _Failed):
                        to_finish.put((query, None))
                        continue
                    head = timed("filter_seconds", "filter", self.head_start, query)
                    if head is not None:
                        queue_tasks(query, None, head)
                    # after a head start, the filters take what is left unless every range was claimed
                    if self._filters_take(query, idle) and not (head is not None and head.stop() == len(head.tasks)):
                        to_finish.put((query, timed("filter_seconds", "filter", self.backend.submit, query.profile,
                                                    self.options)))
                    elif head is None:
                        queue_tasks(query, None)
            except BaseException as error:  # noqa: BLE001
                fail(error)
            finally:
                to_finish.put(None)

        def finished(query, ticket):  # a model's answer taken: its tasks queued (a failed model delivered)
            if isinstance(query, _Failed):
                deliver(query.index, query)
            else:
                if ticket is not None:
                    self.stats.last_answer_seconds = time.perf_counter() - self._start
                queue_tasks(query, ticket)

        def finish_loop():
            # waits for each model's cascade (without the GIL), finishes it on the host and cuts
            # its remaining work into tasks for the workers: in the order the models were sent,
            # or, from a backend whose results come in any order, as they come
            try:
                finish_models()
            finally:
                filters_done.set()

        def finish_models():
            try:
                if self.backend.answers_in_order:
                    while (entry := get(to_finish)) is not None and not stop.is_set():
                        finished(*entry)
                    return
                sent: list = []  # (query, ticket) of the models sent and not yet answered, oldest first
                ended = False
                while not stop.is_set() and not (ended and not sent):
                    entry = _get_nowait(to_finish) if sent else get(to_finish)
                    if entry is None and not sent:
                        break
                    if entry is not None and entry is not _EMPTY:
                        if isinstance(entry[0], _Failed):
                            finished(*entry)
                        else:
                            sent.append(entry)
                        continue
                    ended = ended or entry is None
                    answered, waiting = [], []
                    for query, ticket in sent:  # each ticket asked once: an answer may come meanwhile
                        (answered if ticket.answered() else waiting).append((query, ticket))
                    sent = waiting
                    if not answered:
                        self.backend.receive(FINISH_POLL_SECONDS)
                    for query, ticket in answered:
                        finished(query, ticket)
            except BaseException as error:  # noqa: BLE001
                fail(error)

        def reclaim_loop():
            # once the filters are done, the GPU process decodes and defines the F3 passers of
            # the tasks queued last (a share of those queued, reclaim_share), batch after batch,
            # and hands the tasks back to the workers with its answers
            while not filters_done.wait(0.1):
                if stop.is_set():
                    return
            self.stats.reclaim["after_seconds"] = time.perf_counter() - self._start
            gpu_rate = RECLAIM_GPU_PASSERS_PER_SECOND
            while not stop.is_set():
                with self._lock:
                    since = self.stats.first_task_seconds
                    busy = time.perf_counter() - self._start - (since or 0.0)
                    worker_rate = worked[0] / busy if since is not None and busy > 0 else 0.0
                share = reclaim_share(gpu_rate, worker_rate)
                taken = _take_last(work, self.forward.passers_to_define, share)
                if not taken:
                    return
                t0 = time.perf_counter()
                try:
                    answers = self.backend.define_passers([(task.query.profile, self.options.seed, passers)
                                                           for task, passers in taken])
                    for (task, passers), answer in zip(taken, answers):
                        task.device_answers = answer
                except BaseException as error:  # noqa: BLE001
                    fail(error)
                finally:
                    for task, _ in taken:   # back to the workers, answered or not
                        work.put((task.query.index, task.part, task))
                passers = sum(int(passers.size) for _, passers in taken)
                spent = time.perf_counter() - t0
                gpu_rate = passers / max(spent, 1e-3)
                with self._lock:
                    r = self.stats.reclaim
                    r["batches"] += 1
                    r["tasks"] += len(taken)
                    r["passers"] += passers
                    r["seconds"] += spent
                    r["shares"].append(round(share, 3))

        def worker():
            from hmmgpu.host import set_flush_to_zero

            if self.ftz:
                set_flush_to_zero(True)
            while True:
                _, _, task = work.get()
                if task is None:
                    return
                if stop.is_set():
                    continue
                head = task.query.head
                if head is not None and not task.filtered and not head.claim(task.part):
                    continue  # a range left to the filters (the query's head start is over)
                with self._lock:
                    running[0] += 1
                    if self.stats.first_task_seconds is None:
                        self.stats.first_task_seconds = time.perf_counter() - self._start
                try:
                    t0 = time.perf_counter()
                    query = task.query
                    outcome = self.forward.run(task, alone=query.n_tasks == 1)
                    with self._lock:
                        query.results[task.part] = outcome
                        complete = len(query.results) == query.n_tasks
                    result = self.finish(query) if complete else None
                    with self._lock:
                        if task.device_answers is None:
                            worked[0] += int(task.positions.size)
                        stage = "forward_seconds" if task.filtered else "pipeline_seconds"
                        setattr(self.stats, stage, getattr(self.stats, stage) + time.perf_counter() - t0)
                        self.stats.cpu_seconds["workers"] += outcome.cpu_seconds
                    if result is not None:
                        deliver(query.index, result)
                except BaseException as error:  # noqa: BLE001
                    fail(error)
                finally:
                    with self._lock:
                        running[0] -= 1

        threads = [threading.Thread(target=prepare_loop, name="hmmgpu-prepare", daemon=True),
                   threading.Thread(target=submit_loop, name="hmmgpu-submit", daemon=True),
                   threading.Thread(target=finish_loop, name="hmmgpu-finish", daemon=True)]
        threads += [threading.Thread(target=worker, name=f"hmmgpu-worker-{k}", daemon=True)
                    for k in range(self.threads)]
        if self._reclaims():
            threads.append(threading.Thread(target=reclaim_loop, name="hmmgpu-reclaim", daemon=True))
        for t in threads:
            t.start()
        try:
            index = 0
            while True:
                with done:
                    while index not in results and not failure and not (n_models[0] is not None and index >= n_models[0]):
                        done.wait(0.1)
                    if failure:
                        raise failure[0]
                    if index not in results:
                        break  # every model delivered
                    value = results.pop(index)
                if isinstance(value, _Failed):
                    raise value.error
                yield value
                slots.release()
                index += 1
        finally:
            stop.set()
            for _ in range(self.threads):
                work.put((np.iinfo(np.int64).max, 0, None))
            if not interrupted():   # a process stopped by a signal need not wait for the tasks under way
                for t in threads:   # none is left behind (the stages' queues give way once stopped)
                    t.join()


#: What :func:`_get_nowait` gives for an empty queue.
_EMPTY = object()


def reclaim_share(gpu_rate: float, worker_rate: float) -> float:
    """The share of the queued passers the GPU process takes back (:data:`RECLAIM_MARGIN` of its
    speed over its and the workers' together, passers a second; at most 1)."""
    total = gpu_rate + worker_rate
    return min(1.0, RECLAIM_MARGIN * gpu_rate / total) if total > 0 else 0.0


def _take_last(work: queue.PriorityQueue, passers_to_define, share: float) -> list:
    """The tasks queued last in ``work`` whose F3 passers the GPU process may define
    (``passers_to_define(task)``, an array or None), taken out of it: the fewest whose passers
    make up ``share`` of those of every such task queued (at most :data:`RECLAIM_MAX_PASSERS`),
    none if that is under :data:`RECLAIM_MIN_PASSERS`; (task, passers) pairs. Every other entry
    goes back. The last tasks are those the workers would reach last, so they work on meanwhile,
    and the share is what the GPU does while the workers do the rest (:func:`reclaim_share`), so
    neither waits for the other at the end."""
    entries = []
    while (entry := _get_nowait(work)) is not _EMPTY:
        entries.append(entry)
    entries.sort(key=lambda entry: entry[:2])
    eligible = [(k, passers) for k, entry in enumerate(entries) if entry[2] is not None
                and (passers := passers_to_define(entry[2])) is not None]
    budget = min(RECLAIM_MAX_PASSERS, share * sum(int(passers.size) for _, passers in eligible))
    taken, count = {}, 0
    if budget >= RECLAIM_MIN_PASSERS:
        for k, passers in reversed(eligible):
            if count >= budget:
                break
            taken[k] = passers
            count += int(passers.size)
    for k, entry in enumerate(entries):
        if k not in taken:
            work.put(entry)
    return [(entries[k][2], passers) for k, passers in sorted(taken.items())]


def _get_nowait(channel: queue.Queue):
    """The next entry of ``channel``, or :data:`_EMPTY` without waiting."""
    try:
        return channel.get_nowait()
    except queue.Empty:
        return _EMPTY


def gpu_process_cpu_seconds(details: dict) -> float | None:
    """The CPU time of the GPU processes whose statistics ``details`` holds (a backend's
    :meth:`details`: one GPU process's, or several devices' under their names), all their
    threads; None where no GPU process ran (the CPU route, a CUDA backend in this process)."""
    found = [part["process_cpu_seconds"] for part in [details, *details.values()]
             if isinstance(part, dict) and "process_cpu_seconds" in part]
    return sum(found) if found else None


def post_filter_stage(name: str, processes=None):
    """The :class:`~hmmgpu.stages.protocol.PostFilterStage` that ``--postfilter`` names, as a
    constructor of ``(db, options, *, ftz, threads, model_lengths)``: pyhmmer's pipeline in the
    engine's threads, or in worker processes where ``processes`` (a
    :class:`~hmmgpu.cpu.pyhmmer_processes.ProcessPlan`: :meth:`hmmgpu.search.routing.SearchPlan.postfilter_processes`)
    says so, or hmmgpu's own code (imported only when asked for: it compiles numba code)."""
    if name == "hmmgpu":
        from hmmgpu.cpu.own_postfilter import OwnPostFilter

        return OwnPostFilter
    if processes is not None:
        from hmmgpu.cpu.pyhmmer_processes import PyhmmerProcesses

        return functools.partial(PyhmmerProcesses, plan=processes)
    return PyhmmerStage


def _outside(result, covered: np.ndarray):
    """The cascade's ``result`` without the targets of the mask ``covered`` (searched on
    pyhmmer's whole pipeline by a head start): survivors and counters of the others."""
    from dataclasses import replace

    if result.past_msv is None or result.past_bias is None or result.past_vit is None:
        raise HmmgpuError("internal: a head start needs the targets past each filter")
    survivors = result.survivors[~covered[result.survivors]]
    past_msv = result.past_msv[~covered[result.past_msv]]
    past_bias = result.past_bias[~covered[result.past_bias]]
    past_vit = result.past_vit[~covered[result.past_vit]]
    gate = None if result.forward is None else result.forward.outside(covered, past_vit, survivors)
    return replace(result, survivors=survivors, n_past_msv=int(past_msv.size), n_past_bias=int(past_bias.size),
                   n_past_vit=int(past_vit.size), past_msv=past_msv, past_bias=past_bias, past_vit=past_vit,
                   forward=gate)
