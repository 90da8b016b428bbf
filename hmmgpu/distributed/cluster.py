"""Searches over a dask.distributed cluster: model batches x database shards, merged exactly.

What it is for
--------------
A Pfam-A annotation of a large metagenome outgrows one machine. This module spreads one
``hmmgpu search`` over the workers of a dask cluster (``dask scheduler`` and ``dask worker``,
``LocalCluster``, dask-jobqueue's ``SLURMCluster``...) and writes exactly what one process
writes: the same report, the same three tables, byte for byte but the timing lines.

How the work is cut
-------------------
The database is one made by ``hmmgpu makedb`` on a path every worker can read. It is cut
into *shards*, ranges ``[first, end)`` of its targets of about equal residues, one a worker
process, and the models into *batches* of consecutive models; a *task* is one batch against
one shard (:func:`plan_work`: a task's cost is the sum of its models' lengths times its
shard's residues, at the rate of the route its worker runs, about eight tasks a worker; see
docs/scale-out.md). Each shard has a home worker, so that every worker opens its shards once
and keeps them (:class:`_HeldDatabase`, a cache per worker process keyed by the database's
path and identity); a task may still run elsewhere (dask steals work from a busy worker, and
runs again elsewhere the tasks of a worker that was lost).

On its worker, a task leaves dask's thread at once (a task mostly waits, and the worker's
tasks must feed its GPU and its threads together whatever ``--nthreads`` it was given). For
each model of its batch it runs the post-filter stage over the shard's targets with *global*
positions (HMMER's rule in ``shard.h``: an object's id is its position in the original
database), cut into parts of about equal cost exactly as the engine cuts a model's work in one
process (:meth:`~hmmgpu.stages.postfilter.TaskPlanner.plan_shard`), which the worker's
*post-filter threads* run, earliest model first (:class:`_PostFilterThreads`: as many as the
worker's dask threads, or its share of its host's cores if more). A hit-rich model is then
spread over every thread of its worker instead of holding one thread while the others wait
(measured at 0f3458c on 2 H100s: 120 single-threaded tasks kept the threads 38% busy, and
the run took 2.7 times ``--devices``'s). On the CPU route a part is pyhmmer's whole pipeline
over a range of the shard, with Z fixed to its first position + 1 exactly as
:class:`~hmmgpu.stages.postfilter.TaskPlanner` does for its ranges, the hits HMMER's keep rule
would drop at their global position removed (:func:`~hmmgpu.stages.merge.drop_unkept`); it
returns the ``TopHits`` state (:class:`~hmmgpu.stages.postfilter.TaskResult`): small and
picklable. A worker-side filter stage (:func:`~hmmgpu.search.routing.shard_backend`: on a
worker with a GPU, a dask-cuda worker, the GPU process with the shard resident on its GPU;
hmmgpu's numba filters with ``--backend numba``) plugs in before it: the task queues its
models' cascades at once, and each model's survivors in the shard, made global positions, go
to the post-filter threads as filtered parts as soon as its cascade ends; its counters come
back with the hits.

This process merges each model's results in shard order with
:func:`~hmmgpu.stages.merge.merge_results`, with the database's *global* target count and
residues (Z and domZ are global, so E-values, thresholds and the kept hits equal one serial
run's), and yields the models in query order; the command line formats them with the same
formatter as a run in one process.

Faults
------
Tasks are pure (a batch and a shard give the same result wherever they run), so a worker lost
mid-run only costs its tasks, which the scheduler runs again elsewhere; the output does not
change. A scheduler that cannot be reached within :data:`CONNECT_SECONDS`, a worker that cannot
open the database (or has another database at the path), and a task that fails are each one
line (:class:`~hmmgpu.errors.HmmgpuError`); a fault in the model file is raised once every
model before it is delivered, as in one process.
"""
from __future__ import annotations

import hashlib
import itertools
import math
import os
import queue
import sys
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass, field
from collections.abc import Iterator

from hmmgpu._version import __version__
from hmmgpu.costs import CPU_CELLS_PER_SECOND
from hmmgpu.errors import DatabaseError, HmmgpuError, InputError, WorkerError
from hmmgpu.options import local_command_line  # (the command line finds it here)

#: The cost model's rates, in model cells (model length x residues) per second on one worker
#: thread: pyhmmer's whole pipeline (:data:`~hmmgpu.costs.CPU_CELLS_PER_SECOND`), and the GPU
#: route, where the GPU's filters leave the post-filter stage to the threads: 600 Pfam-35 models
#: x 115.9 M residues (1.16e13 cells) took 377 thread-seconds of it on a 2 x H100 host
#: (scale_h100_2026-11-28.log), 3.1e10 cells a thread-second. A GPU filters about
#: :data:`GPU_CELLS_PER_SECOND` (7.98 s of kernels for those cells on one H100), so a GPU
#: worker's rate is the smaller of that and its threads'.
CELLS_PER_SECOND = CPU_CELLS_PER_SECOND
GPU_ROUTE_CELLS_PER_SECOND = 3.0e10
GPU_CELLS_PER_SECOND = 1.4e12
#: A task (a batch against a shard) runs on its worker with all of the worker's post-filter
#: threads; the plan gives every worker process about :data:`TASKS_PER_PROCESS` of them (the
#: client gets results in order early, and queued ones can still go to a worker that is
#: idle), each between :data:`TASK_SECONDS_MIN` of its worker's wall time (dask's cost per
#: task, about a millisecond of the scheduler's, and the merge's per task stay small) and
#: :data:`TASK_SECONDS_MAX` (a lost worker costs at most that much work again).
TASK_SECONDS_MIN = 0.5
TASK_SECONDS_MAX = 60.0
TASKS_PER_PROCESS = 8
#: Shards: one a worker process (each keeps its home shards: on a GPU worker, a GPU process
#: with the shard resident), none under :data:`SHARD_RESIDUES_MIN` residues.
SHARDS_PER_PROCESS = 1
SHARD_RESIDUES_MIN = 2_000_000
#: On a cluster whose every worker has a GPU, a database of at most this many residues is one
#: shard that every worker holds whole (its GPU process keeps it resident, as each GPU of
#: ``--devices`` does), and the work is cut by models alone, the batches spread over the
#: workers in turn, when there are models enough for :data:`TASKS_PER_PROCESS` batches a worker.
#: A GPU's filters cost per model and shard (launches that last as long as their longest
#: target): 600 Pfam-35 models against 4 shards of 29 M residues kept each of 4 H200s busy
#: 8.5-8.9 s, where ``--devices`` split the models over the same GPUs and each was busy about
#: 2 s (scale_h200x4_2026-11-28_4fea378.log); cut by models, the same cluster's GPUs were busy
#: 2.2-2.6 s each and it took 12.7 s against ``--devices``'s 16.0 s (scale_h200x4_2026-11-28.log).
WHOLE_DATABASE_RESIDUES_MAX = 2_000_000_000
#: Models in a batch at most (a batch goes to the cluster as one object: about 50 kB a Pfam model).
BATCH_MODELS_MAX = 128
#: Models submitted and not yet delivered, at most: every task of a batch holds all its
#: models, so each worker holds them all, and a worker keeps as many per post-filter thread as
#: the engine keeps per thread in one process, and at least as many
#: (:data:`~hmmgpu.search.engine.MODELS_IN_FLIGHT_PER_THREAD`: results leave in query order,
#: so one hit-rich model holds back every later one); never fewer than
#: :data:`BATCHES_IN_FLIGHT_MIN` batches (a worker slow on one batch then holds back the
#: others less). Memory stays flat however many models.
MODELS_IN_FLIGHT_PER_THREAD = 16
MODELS_IN_FLIGHT_MIN = 64
BATCHES_IN_FLIGHT_MIN = 4
#: A worker's post-filter threads leave after this many seconds without work (a worker holds
#: none between searches; the next task starts them again).
POOL_IDLE_SECONDS = 5.0
#: Seconds to reach the scheduler before the run stops with a one-line error.
CONNECT_SECONDS = 10.0
#: Shards a worker process keeps as pyhmmer sequences, at most (bytes, estimated), and
#: databases it keeps open at most; the least recently used go first.
SHARD_CACHE_BYTES = 4 << 30
DATABASES_HELD = 2
#: Post-filter stages a worker process keeps (one a shard and search options).
STAGES_HELD = 8
#: Estimated bytes of one target held as a pyhmmer sequence, besides its residues.
_BYTES_PER_TARGET = 300


# ---------------------------------------------------------------- the database and its shards
@dataclass(frozen=True)
class DatabaseRef:
    """A made database as the tasks name it: where it is, which one it is, and its size."""

    path: str  #: absolute path, the same on every worker
    identity: str  #: SHA-256 of its metadata (sizes, times and checksums of every array)
    n: int  #: targets
    residues: int


@dataclass(frozen=True)
class Shard:
    """Targets ``first`` .. ``end - 1`` of the database (global positions)."""

    index: int
    first: int
    end: int
    residues: int


def database_identity(path: str) -> str:
    """The identity of the made database at ``path``: the SHA-256 of its metadata file, which
    records every array's size, time stamp and checksum (a remade database has another)."""
    from hmmgpu.formats.inputs import META_FILE

    try:
        with open(os.path.join(path, META_FILE), "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except OSError as error:
        raise DatabaseError(f"{path}: cannot read the database: {error.strerror or error}") from None


def open_shared_database(database: str, seqformat: str | None = None) -> tuple:
    """(:class:`DatabaseRef`, the database opened here) for a search over a cluster: a
    database made by ``hmmgpu makedb`` (one-line errors otherwise)."""
    from hmmgpu.formats.inputs import is_database_dir
    from hmmgpu.formats.seqdb import SequenceDB

    database = os.fspath(database)
    if database == "-" or not is_database_dir(database):
        raise InputError(f"{database}: a search over a dask cluster needs a database made by `hmmgpu makedb` "
                         "(on a path every worker can read), not a sequence file")
    if seqformat is not None:
        raise InputError(f"{database}: --tformat applies to sequence files, not to a made database")
    path = os.path.abspath(database)
    identity = database_identity(path)
    db = SequenceDB.load(path)
    return DatabaseRef(path=path, identity=identity, n=db.n, residues=db.total_residues), db


def cut_shards(lengths, count: int) -> list:
    """The database of target ``lengths`` cut into ``count`` shards (at most; one a target at
    most) of about equal residues, in order."""
    import numpy as np

    lengths = np.asarray(lengths, dtype=np.int64)
    n = int(lengths.size)
    count = max(1, min(int(count), n))
    cumulative = np.cumsum(lengths)
    total = int(cumulative[-1]) if n else 0
    cuts = np.searchsorted(cumulative, total * np.arange(1, count) / count, side="left") + 1 if n else []
    bounds = sorted({0, *(int(min(c, n)) for c in cuts), n})
    shards = []
    for first, end in zip(bounds[:-1], bounds[1:]):
        residues = int(cumulative[end - 1] - (cumulative[first - 1] if first else 0))
        shards.append(Shard(index=len(shards), first=first, end=end, residues=residues))
    return shards or [Shard(index=0, first=0, end=0, residues=0)]


@dataclass
class WorkPlan:
    """How a search is cut into tasks (:func:`plan_work`)."""

    shards: list
    task_seconds: float  #: a task's estimated wall time on its worker (all the worker's threads)
    worker_rate: float = CELLS_PER_SECOND  #: model cells a second of one worker process (the average one)
    models_per_batch: int | None = None  #: a fixed batch size (else batches by cost)

    @property
    def shard_residues(self) -> float:
        """The average shard's residues."""
        return sum(s.residues for s in self.shards) / len(self.shards)

    def batch_sizes(self, lengths) -> list:
        """The sizes of the batches that models of these ``lengths`` are cut into, in order."""
        sizes, cut = [], _BatchCut(self)
        for M in lengths:
            if cut.full():
                sizes.append(cut.size)
                cut.reset()
            cut.add(M)
        return sizes + [cut.size] * (cut.size > 0)


class _BatchCut:
    """A batch being filled: it is full once it holds :data:`BATCH_MODELS_MAX` models (or the
    plan's fixed size), or once its cost on the average shard reaches the plan's task."""

    def __init__(self, plan: WorkPlan):
        self.plan = plan
        self.cells = plan.task_seconds * plan.worker_rate
        self.reset()

    def reset(self) -> None:
        self.size, self.length = 0, 0

    def full(self) -> bool:
        if not self.size:
            return False
        if self.plan.models_per_batch is not None:
            return self.size >= self.plan.models_per_batch
        return self.size >= BATCH_MODELS_MAX or self.length * self.plan.shard_residues >= self.cells

    def add(self, M: int) -> None:
        self.size += 1
        self.length += int(M)


def worker_rate(threads: float, gpu: bool) -> float:
    """Model cells a second of a worker process with ``threads`` post-filter threads, with a GPU
    (the GPU route: the smaller of its GPU's and its threads' rates) or without (pyhmmer's
    whole pipeline on its threads)."""
    if gpu:
        return min(GPU_CELLS_PER_SECOND, GPU_ROUTE_CELLS_PER_SECOND * threads)
    return CELLS_PER_SECOND * threads


def plan_work(lengths, db_lengths, *, processes: int, threads: int, gpus: int = 0, shards: int | None = None,
              models_per_batch: int | None = None) -> WorkPlan:
    """The shards and batches of a search of models of ``lengths`` (None: not known before the
    search, as for models from standard input) against a database of target ``db_lengths``, on
    ``processes`` worker processes with ``threads`` post-filter threads in all, ``gpus`` of the
    processes with a GPU (docs/scale-out.md).

    A task's work is the sum of its models' lengths times its shard's residues; its worker
    runs it with all its threads (:func:`worker_rate`: the GPU route's rate when every worker
    has a GPU, else pyhmmer's whole pipeline's). Tasks are sized so that every worker process
    gets :data:`TASKS_PER_PROCESS` of them (between :data:`TASK_SECONDS_MIN` and
    :data:`TASK_SECONDS_MAX` of its wall time). There is a shard per worker process
    (:data:`SHARDS_PER_PROCESS`), none under :data:`SHARD_RESIDUES_MIN` residues, but one
    (the whole database on every worker, :data:`WHOLE_DATABASE_RESIDUES_MAX`) when every
    worker has a GPU and there are models enough; ``shards`` and ``models_per_batch`` set them
    instead."""
    import numpy as np

    db_lengths = np.asarray(db_lengths, dtype=np.int64)
    residues, n = float(db_lengths.sum()), int(db_lengths.size)
    threads, processes = max(1, int(threads)), max(1, int(processes))
    rate = worker_rate(threads / processes, gpu=0 < processes <= gpus)
    if lengths:
        run = float(sum(lengths)) * residues / (rate * processes)
        task = min(max(run / TASKS_PER_PROCESS, TASK_SECONDS_MIN), TASK_SECONDS_MAX)
    else:
        task = TASK_SECONDS_MAX
    if shards is None:
        whole = (0 < processes <= gpus and lengths is not None and len(lengths) >= processes * TASKS_PER_PROCESS
                 and residues <= WHOLE_DATABASE_RESIDUES_MAX)
        shards = 1 if whole else min(processes * SHARDS_PER_PROCESS, max(1, math.ceil(residues / SHARD_RESIDUES_MIN)))
    if models_per_batch is not None and models_per_batch < 1:
        raise InputError(f"models_per_batch must be at least 1 (got {models_per_batch})")
    if shards < 1:
        raise InputError(f"shards must be at least 1 (got {shards})")
    return WorkPlan(shards=cut_shards(db_lengths, min(int(shards), max(1, n))), task_seconds=task,
                    worker_rate=rate, models_per_batch=models_per_batch)


# ---------------------------------------------------------------- the worker's side
@dataclass
class ShardResult:
    """What one task (a batch against a shard) gives back: for each model of the batch, its
    task results in database order and, after a filter stage, its filter counters."""

    shard: int
    parts: list  #: per model: list of :class:`~hmmgpu.stages.postfilter.TaskResult`
    counts: list  #: per model: (past MSV, past bias, past Viterbi), or None (no hmmgpu filters)
    worker: str = ""
    seconds: float = 0.0  #: the task's wall time on its worker
    cpu_seconds: float = 0.0  #: CPU time of the task's thread and of its post-filter parts
    post_filter_seconds: float = 0.0  #: the wall time of its post-filter parts, summed over the worker's threads
    open_seconds: float = 0.0  #: its wait for the database, the shard's filter stage and post-filter stage
    filter_wait_seconds: float = 0.0  #: its wait for its models' cascades


class _ShardSequences:
    """The targets of one shard as pyhmmer sequences, made once; given to
    :class:`~hmmgpu.cpu.pyhmmer_stage.PyhmmerStage` as its sequence cache (its range and
    position blocks come from these, with global positions)."""

    def __init__(self, db, first: int, end: int):
        from pyhmmer.easel import Alphabet

        from hmmgpu.formats.seqdb import sequence_block

        self.db, self.first, self.end = db, first, end
        self.alphabet = Alphabet.amino()
        self.sequences = [db.digital_sequence(i) for i in range(first, end)]
        self.whole = sequence_block(self.sequences)
        self.bytes = int(db.lengths[first:end].sum()) + _BYTES_PER_TARGET * (end - first)

    def block(self, positions):
        """A block of the targets ``positions`` (global, inside the shard), in that order."""
        from hmmgpu.formats.seqdb import sequence_block

        return sequence_block([self.sequences[p - self.first] for p in positions.tolist()])

    def range_block(self, start: int, stop: int):
        """A block of the consecutive targets ``start`` .. ``stop - 1`` (global, inside the shard)."""
        from hmmgpu.formats.seqdb import sequence_block

        if (start, stop) == (self.first, self.end):
            return self.whole
        return sequence_block(self.sequences[start - self.first:stop - self.first])


class _HeldDatabase:
    """A made database opened by a worker process, and the shards of it the worker holds."""

    def __init__(self, ref: DatabaseRef):
        from hmmgpu.formats.seqdb import SequenceDB

        identity = database_identity(ref.path)
        if identity != ref.identity:
            raise DatabaseError(f"{ref.path}: the database here is not the one the search was started with "
                                "(remade, or another copy at this path)")
        self.db = SequenceDB.load(ref.path)
        if (self.db.n, self.db.total_residues) != (ref.n, ref.residues):
            raise DatabaseError(f"{ref.path}: the database here is not the one the search was started with")
        self._shards: OrderedDict = OrderedDict()  # (first, end) -> _ShardSequences, least recently used first
        self._filters: dict = {}  # (first, end, backend) -> the shard's filter stage
        self._stages: OrderedDict = OrderedDict()  # (first, end, options) -> the shard's post-filter stage
        self._lock = threading.Lock()

    def sequences(self, shard: Shard) -> _ShardSequences:
        """The shard's targets as pyhmmer sequences, made on first use and kept
        (:data:`SHARD_CACHE_BYTES` in all, the least recently used shards dropped first)."""
        key = (shard.first, shard.end)
        with self._lock:
            held = self._shards.get(key)
            if held is None:
                held = self._shards[key] = _ShardSequences(self.db, shard.first, shard.end)
                while len(self._shards) > 1 and sum(s.bytes for s in self._shards.values()) > SHARD_CACHE_BYTES:
                    dropped = next(iter(self._shards))
                    del self._shards[dropped]
                    for k in [k for k in self._filters if k[:2] == dropped]:
                        self._filters.pop(k).close()
                    for k in [k for k in self._stages if k[:2] == dropped]:
                        del self._stages[k]
            self._shards.move_to_end(key)
            return held

    def filters(self, shard: Shard, run):
        """The shard's filter stage for the run options ``run``
        (:func:`~hmmgpu.search.routing.shard_backend`), made on first use and kept; None: pyhmmer's
        whole pipeline."""
        from hmmgpu.search.routing import shard_backend

        key = (shard.first, shard.end, run.backend, run.lanes)
        with self._lock:
            if key not in self._filters:
                try:
                    self._filters[key] = shard_backend(run, self.db, shard.first, shard.end)
                except HmmgpuError as error:
                    raise type(error)(f"dask worker {_worker_name()}: {error}") from None
            return self._filters[key]

    def filter_details(self) -> dict:
        """Each filter stage the worker holds, by shard: its GPU's busy seconds and its own
        breakdown (kernels, start-up), since it started."""
        with self._lock:
            held = [(key, stage) for key, stage in self._filters.items() if stage is not None]
        return {f"shard {first}-{end}": dict(gpu_seconds=round(stage.gpu_seconds(), 3), **stage.details())
                for (first, end, *_), stage in held}

    def stage(self, shard: Shard, options, filtered: bool, threads: int):
        """The shard's post-filter stage (:class:`~hmmgpu.cpu.pyhmmer_stage.PyhmmerStage`) for
        ``options``, made on first use and kept (:data:`STAGES_HELD` at most), so that the
        worker's threads keep their pyhmmer pipelines and the targets' sequence objects across
        tasks: on pyhmmer's whole pipeline (not ``filtered``) the shard's sequences
        (:meth:`sequences`), after a filter stage the survivors', made as they first survive."""
        from hmmgpu.cpu.pyhmmer_stage import PyhmmerStage

        sequences = None if filtered else self.sequences(shard)
        key = (shard.first, shard.end, options)
        with self._lock:
            stage = self._stages.get(key)
            if stage is None:
                stage = self._stages[key] = PyhmmerStage(self.db, options, threads=threads)
                if sequences is not None:
                    stage.sequences = sequences
                while len(self._stages) > STAGES_HELD:
                    self._stages.popitem(last=False)
            self._stages.move_to_end(key)
            return stage


class _PostFilterThreads:
    """A worker process's threads for the post-filter stage, shared by every task running on
    the worker: each task cuts each model's work on its shard into parts of about equal cost
    (:meth:`~hmmgpu.stages.postfilter.TaskPlanner.plan_shard`, as the engine cuts them in one
    process) and queues them here, earliest model first, so that a hit-rich model is spread
    over every thread rather than held by one. :attr:`size` threads at most; each leaves after
    :data:`POOL_IDLE_SECONDS` without work."""

    def __init__(self):
        self.size = 1
        self._queue: queue.PriorityQueue = queue.PriorityQueue()
        self._order = itertools.count()   # ties in first-come order
        self._running = 0
        self._lock = threading.Lock()

    def submit(self, priority: tuple, fn, *args) -> Future:
        """``fn(*args)`` on one of the threads, before the work of a higher ``priority``."""
        future: Future = Future()
        self._queue.put((priority, next(self._order), future, fn, args))
        with self._lock:
            if self._running < self.size:
                self._running += 1
                threading.Thread(target=self._serve, name="hmmgpu-postfilter", daemon=True).start()
        return future

    def _serve(self) -> None:
        while True:
            try:
                _, _, future, fn, args = self._queue.get(timeout=POOL_IDLE_SECONDS)
            except queue.Empty:
                with self._lock:   # (submit queues before it counts the threads)
                    if self._queue.empty():
                        self._running -= 1
                        return
                continue
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except BaseException as error:  # noqa: BLE001 - raised by the task that waits for it
                    future.set_exception(error)


_POST_FILTER = _PostFilterThreads()  # in this worker process


_HELD: OrderedDict = OrderedDict()  # (path, identity) -> _HeldDatabase, in this worker process
_HELD_LOCK = threading.Lock()


def _held_database(ref: DatabaseRef) -> _HeldDatabase:
    """This worker process's open copy of the database ``ref`` (opened once, kept)."""
    key = (ref.path, ref.identity)
    with _HELD_LOCK:
        held = _HELD.get(key)
        if held is None:
            try:
                held = _HeldDatabase(ref)
            except HmmgpuError as error:
                raise DatabaseError(f"dask worker {_worker_name()} cannot open the database: {error}") from None
            except OSError as error:
                raise DatabaseError(f"dask worker {_worker_name()} cannot open the database: "
                                    f"{ref.path}: {error.strerror or error}") from None
            _HELD[key] = held
            while len(_HELD) > DATABASES_HELD:
                _HELD.popitem(last=False)
        _HELD.move_to_end(key)
        return held


def _worker_name() -> str:
    try:
        from distributed import get_worker

        return get_worker().address
    except (ImportError, ValueError):
        return f"process {os.getpid()}"


@dataclass(frozen=True)
class TaskContext:
    """What every task of one search carries besides its models and shard."""

    ftz: bool  #: pyhmmer's stage in the hmmsearch program's float mode
    version: str  #: the client's hmmgpu, which the worker's must be
    #: each worker's post-filter threads, by address (a worker not named: its dask threads)
    threads: dict = field(default_factory=dict)


def _post_filter_threads(context: TaskContext) -> int:
    """The post-filter threads of the worker running this task (:meth:`ClusterSearch._threads`)."""
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):
        return 1
    return int(context.threads.get(worker.address) or worker.state.nthreads or 1)


def _leave_the_task_threads() -> None:
    """Free this task's dask thread for the worker's next task (``distributed.secede``): a task
    mostly waits for its GPU and its post-filter parts, and the worker's tasks feed the GPU and
    the post-filter threads together, whatever ``--nthreads`` the worker was started with."""
    try:
        from distributed import get_worker, secede

        get_worker()
    except (ImportError, ValueError):   # not on a dask worker
        return
    secede()


def _run_part(stage, task, ftz: bool) -> tuple:
    """One post-filter part on a worker's thread: (its result, its wall time)."""
    from hmmgpu.host import flush_to_zero

    start = time.perf_counter()
    with flush_to_zero(ftz):
        result = stage.run(task)
    return result, time.perf_counter() - start


def search_shard(ref: DatabaseRef, shard: Shard, models: list, options, context: TaskContext) -> ShardResult:
    """One task, on a worker: each model of ``models`` ((index, hmm, mmu), in order) against
    the targets of ``shard``, with global positions (see the module header): the models'
    cascades queued on the shard's filter stage at once, and each model's post-filter work
    on the shard cut into parts for the worker's post-filter threads as its cascade ends."""
    from hmmgpu.search.engine import Query

    if context.version != __version__:
        raise WorkerError(f"dask worker {_worker_name()} runs hmmgpu {__version__}, the search hmmgpu "
                          f"{context.version}; install the same version everywhere")
    _leave_the_task_threads()
    start, cpu = time.perf_counter(), time.thread_time()
    held = _held_database(ref)
    filters = held.filters(shard, options.run)
    threads = _post_filter_threads(context)
    _POST_FILTER.size = max(1, threads)
    stage = held.stage(shard, options, filters is not None, threads)
    opened = time.perf_counter() - start
    waited = 0.0
    # every model's filters queued at once (a GPU runs several in flight), then taken in order
    tickets = [None] * len(models) if filters is None else [filters.submit(filters.prepare(hmm, mmu), options)
                                                              for _, hmm, mmu in models]
    jobs, counts = [], []
    try:
        for (index, hmm, _), ticket in zip(models, tickets):
            query = Query(index=index, hmm=hmm)
            if ticket is None:
                tasks = stage.plan_shard(query, shard.first, shard.end)
                counts.append(None)
            else:   # the shard's positions made global before the merge
                t0 = time.perf_counter()
                cascade = ticket.result()
                waited += time.perf_counter() - t0
                tasks = stage.plan_shard(query, shard.first, shard.end, survivors=cascade.survivors + shard.first)
                counts.append((cascade.n_past_msv, cascade.n_past_bias, cascade.n_past_vit))
            jobs.append([_POST_FILTER.submit((index, task.part), _run_part, stage, task, context.ftz)
                         for task in tasks])
        done = [[job.result() for job in parts] for parts in jobs]
    except BaseException:
        for job in (job for parts in jobs for job in parts):
            job.cancel()
        raise
    return ShardResult(shard=shard.index, parts=[[result for result, _ in parts] for parts in done], counts=counts,
                       worker=_worker_name(), seconds=time.perf_counter() - start,
                       cpu_seconds=time.thread_time() - cpu + sum(r.cpu_seconds for parts in done for r, _ in parts),
                       post_filter_seconds=sum(wall for parts in done for _, wall in parts), open_seconds=opened,
                       filter_wait_seconds=waited)


def _filter_details(ref: DatabaseRef) -> dict:
    """Run on each worker by the client at the end of a search: its filter stages' details
    (:meth:`_HeldDatabase.filter_details`), if it holds the database."""
    held = _HELD.get((ref.path, ref.identity))
    return {} if held is None else held.filter_details()


def _worker_facts(gpu_route: bool) -> tuple:
    """Run on each worker by the client (``client.run``): (the cores it may run on, as a tuple
    of ids, whether it has a GPU for the route: ``gpu_route``, the search's backend may take one)."""
    if hasattr(os, "sched_getaffinity"):
        cores = tuple(sorted(os.sched_getaffinity(0)))
    else:
        cores = tuple(range(os.cpu_count() or 1))
    gpu = False
    if gpu_route and os.environ.get("HMMGPU_NO_GPU") is None:
        from hmmgpu.search.routing import cuda_available

        gpu = cuda_available(0)
    return cores, gpu


def core_shares(workers: dict, facts: dict) -> dict:
    """Each worker's post-filter threads: its dask threads (``workers``: address -> threads), or
    its share of the cores it may run on if more (``facts``: address -> (core ids, ...) from
    :func:`_worker_facts`): those cores over the workers of its host whose cores overlap its own
    or are not known (dask-cuda pins each worker to its GPU's NUMA node; unpinned workers share
    every core)."""
    from distributed.comm import get_address_host

    shares = {}
    for address, threads in workers.items():
        if address not in facts:
            shares[address] = int(threads)
            continue
        host, cores = get_address_host(address), set(facts[address][0])
        sharing = sum(1 for other in workers if get_address_host(other) == host
                      and (other not in facts or cores.intersection(facts[other][0])))
        shares[address] = max(int(threads), len(cores) // max(1, sharing))
    return shares


def _given(models: list) -> list:
    """A batch's models, as a task's result (:meth:`ClusterSearch._submit`)."""
    return models


# ---------------------------------------------------------------- the client's side
@dataclass
class ClusterStats:
    """Where the time of a search over a cluster went."""

    description: str = ""
    wall_seconds: float = 0.0
    queries: int = 0
    tasks: int = 0
    shards: int = 0
    batches: int = 0
    processes: int = 0
    threads: int = 0
    gpus: int = 0  #: worker processes with a GPU for the route, at the start
    parts: int = 0  #: post-filter parts the tasks ran (each a model's work on part of a shard)
    cores: list = field(default_factory=list)  #: the number of cores each worker may run on, at the start
    task_seconds: float = 0.0  #: the tasks' wall time on their workers, summed
    post_filter_seconds: float = 0.0  #: the wall time of their post-filter parts on the workers' threads, summed
    cpu_seconds: float = 0.0  #: ... and their CPU time
    merge_seconds: float = 0.0  #: this process's time merging the shards' results
    open_seconds: float = 0.0  #: the tasks' waits for their database and stages, summed
    filter_wait_seconds: float = 0.0  #: ... and for their models' cascades
    wait_seconds: float = 0.0  #: this process's wait for the next task to finish
    result_seconds: float = 0.0  #: ... and its time taking the finished tasks' results (transfer and unpickling)
    workers_used: set = field(default_factory=set)  #: the workers that ran a task
    filters: dict = field(default_factory=dict)  #: the workers' filter stages' details, by worker

    def lines(self) -> list:
        busy = self.post_filter_seconds / (self.threads * self.wall_seconds) if self.threads and self.wall_seconds \
            else 0.0
        return [(f"queries {self.queries}, wall {self.wall_seconds:.2f} s, {self.tasks} tasks ({self.batches} model "
                 f"batches x {self.shards} database shards) on {len(self.workers_used)} dask workers "
                 f"({self.processes} at the start, {self.gpus} with a GPU, {self.threads} post-filter threads; "
                 f"cores each may run on: {', '.join(map(str, self.cores)) or '?'})"),
                (f"busy: tasks {self.task_seconds:.2f} s, {self.parts} post-filter parts "
                 f"{self.post_filter_seconds:.2f} s ({100 * busy:.0f}% of threads x wall; CPU "
                 f"{self.cpu_seconds:.2f} s), merge here {self.merge_seconds:.2f} s"),
                (f"waits: tasks for their database and stages {self.open_seconds:.2f} s, for their cascades "
                 f"{self.filter_wait_seconds:.2f} s; here for finished tasks {self.wait_seconds:.2f} s, taking their "
                 f"results {self.result_seconds:.2f} s")] + (
            [f"filter stages on the workers (since each started): {self.filters}"] if self.filters else [])


class _Batch:
    """A batch of models submitted as one task a shard, and the shards' results so far."""

    def __init__(self, number: int, models: list, futures: list, given=None):
        self.number, self.models, self.futures, self.given = number, models, futures, given
        self.results: list = [None] * len(futures)

    @property
    def complete(self) -> bool:
        return all(r is not None for r in self.results)


class ClusterSearch:
    """A search of many models against one made database over a dask cluster.

    ``ClusterSearch(client, database, options, ftz=..., model_lengths=..., shards=...,
    models_per_batch=...)``; :meth:`search` yields each model's
    :class:`~hmmgpu.search.engine.SearchResult` in query order, equal to one serial hmmsearch's;
    :attr:`stats` says where the time went. ``progress``: an object whose ``advance()`` is
    called as each task finishes and ``total(n)`` as the number of tasks is known (a
    :class:`~hmmgpu.report.progress.ProgressRow`); ``notice(line)``: told when the search
    waits for a worker to join; ``opened``: :func:`open_shared_database`'s answer, when the
    caller has it.
    """

    def __init__(self, client, database, options, *, ftz: bool = False, model_lengths=None,
                 shards: int | None = None, models_per_batch: int | None = None, progress=None,
                 opened: tuple | None = None, notice=None):
        from hmmgpu.search.routing import cluster_route

        self.client, self.options, self.ftz = client, options, ftz
        self.route = cluster_route(options.run)
        self.ref, self.db = opened if opened is not None else open_shared_database(database)
        workers = self._workers()
        if not workers:
            if notice is not None:
                notice("waiting for a dask worker to join the cluster")
            client.wait_for_workers(1)
            workers = self._workers()
        threads, gpus = self._threads(workers)
        self.plan = plan_work(model_lengths, self.db.lengths, processes=len(workers), threads=sum(threads.values()),
                              gpus=gpus, shards=shards, models_per_batch=models_per_batch)
        shard_count = len(self.plan.shards)
        #: tasks in all, when the models are known before the search
        self.tasks_total = len(self.plan.batch_sizes(model_lengths)) * shard_count if model_lengths else None
        #: models submitted and not yet delivered, at most (per worker thread of the average worker)
        self.window = max(MODELS_IN_FLIGHT_MIN,
                          math.ceil(MODELS_IN_FLIGHT_PER_THREAD * sum(threads.values()) / len(workers)))
        self.context = TaskContext(ftz=ftz, version=__version__, threads=threads)
        self.progress = progress
        self._homes: dict = {}
        self._rotation: list = []
        self._home_shards(workers)
        self._token = hashlib.sha256(f"{os.getpid()} {time.time_ns()} {id(self)}".encode()).hexdigest()[:12]
        address = getattr(getattr(client, "scheduler", None), "address", None) or "?"
        self.stats = ClusterStats(shards=shard_count, processes=len(workers), threads=sum(threads.values()),
                                  gpus=gpus, cores=self.cores)
        self.description = (f"dask cluster at {address}: {len(workers)} workers, {sum(threads.values())} threads; "
                            f"{self.ref.n} targets in {shard_count} shards; {self.route}")
        self.stats.description = self.description

    def _threads(self, workers: dict) -> tuple:
        """({worker address: its post-filter threads} (:func:`core_shares`: ``dask cuda worker``
        starts one worker of one thread a GPU, and each worker's GPU route needs its share of the
        host's cores for its post-filter stage), the workers with a GPU for the route)."""
        try:
            facts = self.client.run(_worker_facts, self.options.run.backend in ("auto", "cuda"))
        except Exception:  # noqa: BLE001 - a worker that cannot answer: its dask threads, no GPU
            facts = {}
        #: the cores each worker may run on (dask-cuda pins each to its GPU's node), for the statistics
        self.cores = sorted(len(facts[address][0]) for address in workers if address in facts)
        return core_shares(workers, facts), sum(1 for address in workers if address in facts and facts[address][1])

    def _workers(self) -> dict:
        """The cluster's workers now: address -> threads."""
        info = self.client.scheduler_info(n_workers=-1)
        return {address: int(w.get("nthreads", 1)) for address, w in info.get("workers", {}).items()}

    def _home_shards(self, workers: dict) -> None:
        """Give each shard without a live home the worker with the fewest threads' worth of
        shards (each worker then opens its shards once; a task may still run elsewhere). One
        shard is every worker's: its batches go to the workers in turn (:meth:`_home`)."""
        self._rotation = sorted(workers)
        if not workers:
            return
        load = {address: 0.0 for address in workers}
        for shard, home in self._homes.items():
            if home in load:
                load[home] += 1.0 / workers[home]
        for shard in self.plan.shards:
            if self._homes.get(shard.index) not in load:
                home = min(sorted(load), key=lambda a: load[a])
                self._homes[shard.index] = home
                load[home] += 1.0 / workers[home]

    def _home(self, number: int, shard: Shard) -> list | None:
        """The worker that batch ``number``'s task on ``shard`` goes to first: the shard's home,
        or with one shard (the whole database, which every worker then holds) the workers in
        turn, batch by batch."""
        if len(self.plan.shards) == 1 and len(self._rotation) > 1:
            return [self._rotation[number % len(self._rotation)]]
        return [self._homes[shard.index]] if shard.index in self._homes else None

    def _filter_details(self) -> dict:
        """The workers' filter stages' details (:func:`_filter_details`), by worker; none if
        they cannot be asked."""
        try:
            return {address: d for address, d in self.client.run(_filter_details, self.ref).items() if d}
        except Exception:  # noqa: BLE001 - statistics only
            return {}

    def _submit(self, number: int, models: list, seen: dict) -> _Batch:
        """Batch ``number``'s tasks: its models go to the cluster once, as a task of their own
        (the scheduler keeps it, so that a worker lost with them makes them again), and each
        shard's task takes them from the worker that holds them."""
        if number and number % 8 == 0:   # workers may have come or gone: shards without a home get one
            self._home_shards(self._workers())
        given = self.client.submit(_given, models, key=f"hmmgpu-models-{self._token}-b{number}", priority=-number,
                                   pure=False)
        futures = []
        for shard in self.plan.shards:
            key = f"hmmgpu-search-{self._token}-b{number}-s{shard.index}"
            future = self.client.submit(search_shard, self.ref, shard, given, self.options, self.context, key=key,
                                        workers=self._home(number, shard),
                                        allow_other_workers=True, priority=-number, pure=False)
            seen[future.key] = (number, shard.index)
            futures.append(future)
        return _Batch(number, models, futures, given)

    def _models(self, models, faults: list) -> Iterator[list]:
        """Batches of checked models ((index, hmm, mmu), in order); a fault in the model file or
        in a model ends them, and is kept in ``faults`` to be raised once they are delivered."""
        from hmmgpu.formats.checks import check_model

        cut = _BatchCut(self.plan)   # as :meth:`WorkPlan.batch_sizes` cuts the lengths known before
        batch: list = []
        items = iter(models)
        index = 0
        while True:
            try:
                item = next(items)
                hmm = getattr(item, "hmm", item)
                check_model(hmm, self.options)
            except StopIteration:
                break
            except HmmgpuError as error:
                faults.append(error)
                break
            if cut.full():
                yield batch
                batch = []
                cut.reset()
            batch.append((index, hmm, getattr(item, "mmu", None)))
            cut.add(hmm.M)
            index += 1
        if batch:
            yield batch

    def search(self, models) -> Iterator:
        """Search every model of the iterable ``models`` (pyhmmer ``HMM`` objects, or the
        models :func:`~hmmgpu.formats.hmmfile.read_models` yields); yield
        :class:`~hmmgpu.search.engine.SearchResult` in query order."""
        from distributed import as_completed

        start = time.perf_counter()
        faults: list = []
        batches = self._models(models, faults)
        pending: dict = {}
        seen: dict = {}
        finished = as_completed(loop=self.client.loop)
        submitted = delivered = 0
        models_out = 0   # models submitted and not yet delivered
        exhausted = False
        try:
            while True:
                while not exhausted and (submitted - delivered < BATCHES_IN_FLIGHT_MIN or models_out < self.window):
                    models_of_batch = next(batches, None)
                    if models_of_batch is None:
                        exhausted = True
                        break
                    pending[submitted] = batch = self._submit(submitted, models_of_batch, seen)
                    models_out += len(models_of_batch)
                    for future in batch.futures:
                        finished.add(future)
                    submitted += 1
                    self.stats.batches = submitted
                    self.stats.tasks += len(batch.futures)
                    if self.progress is not None and self.tasks_total is None:
                        self.progress.total(self.stats.tasks)
                if delivered == submitted:
                    break
                t0 = time.perf_counter()
                future = next(finished)
                t1 = time.perf_counter()
                number, shard = seen.pop(future.key)
                result = _result(future)
                self.stats.wait_seconds += t1 - t0
                self.stats.result_seconds += time.perf_counter() - t1
                self.stats.open_seconds += result.open_seconds
                self.stats.filter_wait_seconds += result.filter_wait_seconds
                future.release()
                pending[number].results[shard] = result
                self.stats.task_seconds += result.seconds
                self.stats.post_filter_seconds += result.post_filter_seconds
                self.stats.parts += sum(len(parts) for parts in result.parts)
                self.stats.cpu_seconds += result.cpu_seconds
                self.stats.workers_used.add(result.worker)
                if self.progress is not None:
                    self.progress.advance()
                while delivered in pending and pending[delivered].complete:
                    batch = pending.pop(delivered)
                    batch.given.release()
                    yield from self._merged(batch)
                    delivered += 1
                    models_out -= len(batch.models)
            self.stats.filters = self._filter_details()
        finally:
            for batch in pending.values():
                self.client.cancel([f for f in [*batch.futures, batch.given] if not f.done()])
            self.stats.wall_seconds = time.perf_counter() - start
        if faults:
            raise faults[0]

    def _merged(self, batch: _Batch) -> Iterator:
        """The batch's models, each merged over the shards (global n and residues)."""
        from hmmgpu.host import flush_to_zero
        from hmmgpu.search.engine import SearchResult
        from hmmgpu.stages.cascade import StageCounts
        from hmmgpu.stages.merge import merge_results

        for j, (index, hmm, _) in enumerate(batch.models):
            t0 = time.perf_counter()
            parts = [part for shard in batch.results for part in shard.parts[j]]
            counts = None
            if any(shard.counts[j] is not None for shard in batch.results):
                counts = StageCounts()  # the filter counters summed over the shards
                for shard in batch.results:
                    msv, bias, vit = shard.counts[j]
                    counts.n_past_msv += msv
                    counts.n_past_bias += bias
                    counts.n_past_vit += vit
            with flush_to_zero(self.ftz):
                hits, pipeline = merge_results(hmm, parts, self.ref.n, self.ref.residues, self.options, counts)
            if pipeline is None:
                pipeline = hits.__getstate__()["pipeline"]
            self.stats.merge_seconds += time.perf_counter() - t0
            self.stats.queries += 1
            yield SearchResult(index=index, hmm=hmm, hits=hits, pipeline=pipeline)


def _result(future):
    """A finished task's :class:`ShardResult`; its failure as one line."""
    from distributed import KilledWorker

    try:
        return future.result()
    except HmmgpuError:
        raise
    except KilledWorker:
        raise WorkerError("dask workers were lost running the same task again and again (out of memory?); "
                          "the search stopped") from None
    except Exception as error:  # noqa: BLE001 - a task's own fault, or the scheduler gone: one line
        cause = " ".join(str(error).split())
        raise WorkerError(f"a task on the dask cluster failed: {type(error).__name__}"
                          + (f": {cause}" if cause else "")) from None


def connect(scheduler: str | None = None, scheduler_file: str | None = None, timeout: float | None = None):
    """A ``dask.distributed.Client`` of the scheduler at the address ``scheduler``, or the one
    described by dask's ``scheduler_file``; a one-line error when it cannot be reached within
    ``timeout`` seconds (:data:`CONNECT_SECONDS`)."""
    import asyncio
    import json

    timeout = CONNECT_SECONDS if timeout is None else timeout
    if (scheduler is None) == (scheduler_file is None):
        raise InputError("give the dask scheduler's address or its scheduler file (one of them)")
    try:
        from distributed import Client
        from distributed.comm import connect as comm_connect
    except ImportError:
        raise InputError("a search over a dask cluster needs dask.distributed: pip install 'hmmgpu[dask]'") from None
    address = scheduler
    if scheduler_file is not None:
        try:
            with open(scheduler_file) as fh:
                address = json.load(fh)["address"]
        except (OSError, ValueError, KeyError, TypeError) as error:
            reason = getattr(error, "strerror", None) or "not a dask scheduler file"
            raise InputError(f"--scheduler-file {scheduler_file}: {reason} (`dask scheduler --scheduler-file "
                             "PATH` writes it)") from None

    async def probe():
        comm = await comm_connect(address, timeout=timeout)
        await comm.close()

    try:
        asyncio.run(probe())
        return Client(address, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError, ValueError, asyncio.TimeoutError) as error:
        reason = " ".join(str(error).split())
        said = "" if not reason or reason.startswith("Timed out") else f" ({reason})"
        raise HmmgpuError(f"cannot reach the dask scheduler at {address} within {timeout:g} s{said}") from None


# ---------------------------------------------------------------- the API and the command line
def hmmsearch(queries, database, *, client, shards: int | None = None, models_per_batch: int | None = None,
              ftz: bool = False, progress=None, **options) -> Iterator:
    """Search each query model against a made database over a dask cluster; yield one
    pyhmmer ``TopHits`` per query, in order, equal to :func:`hmmgpu.hmmsearch`'s (and to one
    serial hmmsearch's).

    ``queries``: a pyhmmer ``HMM``, an iterable of them, or an HMM file path. ``database``: a
    directory made by ``hmmgpu makedb`` that every worker can read at the same path.
    ``client``: a ``dask.distributed.Client``. ``shards`` and ``models_per_batch`` override
    how the work is cut (:func:`plan_work`). ``ftz``: pyhmmer's stage in the hmmsearch
    program's float mode, as ``hmmgpu search`` runs it. Options: pyhmmer's names, as
    :func:`hmmgpu.hmmsearch` takes them (``backend``: ``auto``, ``hmmer`` or ``numba``)."""
    from pyhmmer.plan7 import HMM

    from hmmgpu.formats.checks import check_target_lengths
    from hmmgpu.formats.hmmfile import model_lengths, read_models
    from hmmgpu.options import SearchOptions

    search_options = SearchOptions.from_kwargs(**options)
    if isinstance(queries, (str, os.PathLike)):   # read one model at a time; their lengths planned first
        path = os.fspath(queries)
        models, lengths = read_models(path), None if path == "-" else model_lengths(path)
    else:
        models = [queries] if isinstance(queries, HMM) else queries
        lengths = [h.M for h in models] if isinstance(models, (list, tuple)) else None
    opened = open_shared_database(database)
    check_target_lengths(opened[1])
    search = ClusterSearch(client, database, search_options, ftz=ftz, model_lengths=lengths, shards=shards,
                           models_per_batch=models_per_batch, progress=progress, opened=opened)
    for result in search.search(models):
        yield result.hits


def search_command(hmmfile: str, database: str, options, *, scheduler: str | None, scheduler_file: str | None,
                   seqformat: str | None, outputs) -> int:
    """``hmmgpu search --scheduler ADDRESS`` (or ``--scheduler-file PATH``): the models of
    ``hmmfile`` against the made ``database`` over the cluster, written by ``outputs()`` (the
    run's :class:`~hmmgpu.report.outputs.RunOutputs`) as a search in one process writes them."""
    from hmmgpu.formats.checks import check_target_lengths
    from hmmgpu.formats.hmmfile import model_lengths, read_models
    from hmmgpu.report.outputs import formatted
    from hmmgpu.search.routing import cluster_route

    if scheduler is not None and scheduler_file is not None:
        raise InputError("option --scheduler is incompatible with --scheduler-file")
    cluster_route(options.run)
    opened = open_shared_database(database, seqformat)
    check_target_lengths(opened[1])
    lengths = None if hmmfile == "-" else model_lengths(hmmfile)
    client = connect(scheduler, scheduler_file)
    try:
        search = ClusterSearch(client, database, options, ftz=True, model_lengths=lengths, opened=opened,
                               notice=lambda line: print(f"# hmmgpu: {line}", file=sys.stderr))
        print(f"# hmmgpu {__version__}: {search.description}", file=sys.stderr)
        if opened[1].looks_like_nucleotide():
            print(f"hmmgpu: warning: {database} looks like nucleotide sequence; searching it as protein "
                  "(as hmmsearch would)", file=sys.stderr)
        with outputs() as out:
            search.progress = out.progress.row("tasks", search.tasks_total)
            for blocks in formatted(search.search(read_models(hmmfile)), out.formatter):
                out.write(blocks)
    finally:
        client.close()
    for line in search.stats.lines():
        print(f"# hmmgpu: {line}", file=sys.stderr)
    return 0


__all__ = ["hmmsearch", "ClusterSearch", "connect", "plan_work", "search_shard", "DatabaseRef", "Shard",
           "local_command_line"]
