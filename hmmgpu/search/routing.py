"""Where a search runs: the one routing plan of the CLI and the API.

Every decision about *where* work runs is made here, above the devices, and
:class:`SearchPlan` is the one object the command line, the Python API and the distributed
layer ask: which filter stage (:mod:`hmmgpu.stages.protocol`) a search gets for
``--backend auto|cuda|numba|hmmer`` (:meth:`SearchPlan.backend`), whether the GPU process
starts before the database is read and whether a search takes pyhmmer's route before it reads
its database (:meth:`SearchPlan.before_reading`), whether a file is searched piece by piece
(:meth:`SearchPlan.pieces`), and whether small models go to worker processes
(:meth:`SearchPlan.worker_processes`). ``auto`` takes the GPU only when pyhmmer's route is
estimated (:mod:`hmmgpu.costs`) to take longer than starting it. ``--devices`` names several
GPUs for the GPU route (:func:`hmmgpu.gpu.runtime.context.device_ids`): one GPU process each, joined by
:class:`~hmmgpu.search.multidevice.MultiDeviceBackend`. On a dask worker, :func:`shard_backend`
gives the filter stage of its shard: the worker's GPU where it has one, else its CPU.
"""
from __future__ import annotations

import os

from hmmgpu.costs import GPU_ROUTE_SECONDS, KERNEL_COMPILE_SECONDS, cpu_route_seconds, small_on_average
from hmmgpu.cpu.backends import HmmerBackend, NumbaBackend
from hmmgpu.errors import DeviceUnavailable, HmmgpuError
from hmmgpu.gpu.runtime.context import device_ids
from hmmgpu.stages.protocol import Backend, CascadeBackend


#: Worker processes are used from this many threads (``--cpu``) up: on two cores the engine's
#: threads are faster (the interpreter's work is a small share of two cores' work).
MIN_PROCESSES = 4
#: ... and for this many models or more: starting the processes (an interpreter and the imports
#: each) pays back only over many small models (docs/performance.md, "The cost model").
MIN_MODELS = 2000


class SearchPlan:
    """Where one search runs, decided in two steps.

    Before its database is read (:meth:`before_reading`), from the files alone: whether the
    search takes pyhmmer's route whatever the database's exact size (``decided``: the reason,
    or None), and otherwise a GPU process started at once (``early``), so that its start-up
    overlaps the reading. Once the database is open: the filter stage (:meth:`backend`) and the
    worker processes (:meth:`worker_processes`). ``model_lengths``: the models' lengths when
    known before the search; ``queries``: the count of the one-query rule
    (:func:`pyhmmer_route`; None where it does not apply, as in hmmscan and the API).
    ``options``: the search's :class:`~hmmgpu.options.SearchOptions`, of which the plan reads
    only where it runs (``options.run``).
    """

    def __init__(self, options, model_lengths=None, *, queries: int | None = None, source: str | None = None,
                 fmt: str | None = None, decided: str | None = None, early: CascadeBackend | None = None):
        self.options = options
        self.model_lengths = model_lengths
        self.queries = queries
        self.source, self.fmt = source, fmt
        self.decided, self.early = decided, early

    @classmethod
    def before_reading(cls, options, source: str, fmt: str | None, model_lengths) -> "SearchPlan":
        """The plan of ``hmmgpu search`` before its database ``source`` is read (a GPU process
        may be started here: :meth:`abandon` stops it if the search fails before a backend
        takes it)."""
        decided = None if source == "-" else cpu_route_before_reading(options.run, source, model_lengths)
        early = None if decided is not None else start_gpu_early(options.run, source, fmt, model_lengths)
        return cls(options, model_lengths, queries=len(model_lengths) if model_lengths else None, source=source,
                   fmt=fmt, decided=decided, early=early)

    def pieces(self):
        """The database as pieces of its file that pyhmmer reads and searches itself, in every
        thread (:class:`~hmmgpu.formats.seqdb.FastaPieces`), when the search is of fewer models
        than threads on pyhmmer's route decided before reading the file and the file is ASCII
        FASTA; None otherwise (it is then read first)."""
        from hmmgpu.formats.seqdb import FastaPieces
        from hmmgpu.stages.postfilter import piece_bytes

        options, lengths = self.options, self.model_lengths
        if (self.decided is None or not lengths or options.run.cpus == 0 or len(lengths) >= options.run.threads
                or self.source in (None, "-") or (self.fmt or "fasta").lower() != "fasta"):
            return None
        return FastaPieces.open(self.source, lambda left: piece_bytes(left, max(lengths), options.run.threads))

    def backend(self, db, gpu_process: bool = True) -> Backend:
        """The filter stage over ``db`` (:func:`select_backend`, with what this plan knows)."""
        lengths = self.model_lengths
        cells = None if lengths is None or db.pieces is not None else float(sum(lengths)) * db.total_residues
        started, self.early = self.early, None  # the backend owns (or has stopped) the early process now
        return select_backend(self.options.run, db, cells=cells, gpu_process=gpu_process, started=started,
                              queries=self.queries, decided=self.decided)

    def worker_processes(self, db, backend, database: str) -> int:
        """How many worker processes search the models of this run
        (:mod:`hmmgpu.distributed.processes`): 0 (the engine's threads in this process) unless
        it is pyhmmer's route (no filter stage of hmmgpu's) for a model file whose average model
        is small against the database (:func:`~hmmgpu.costs.small_on_average`), of at least
        :data:`MIN_MODELS` models, with at least :data:`MIN_PROCESSES` threads allowed, and a
        ``database`` a second reader can read (not standard input); then a process per thread."""
        from hmmgpu.formats.inputs import rereadable

        options, lengths = self.options, self.model_lengths
        threads = 0 if options.run.cpus == 0 else options.run.threads
        if (isinstance(backend, CascadeBackend) or db.pieces is not None or not lengths or threads < MIN_PROCESSES
                or database == "-" or not rereadable(database)):
            return 0
        small = small_on_average(sum(lengths) * float(db.total_residues), len(lengths))
        return threads if small and len(lengths) >= MIN_MODELS else 0

    def postfilter_processes(self, db, backend, database: str):
        """Where pyhmmer's post-filter stage runs on the GPU route: a
        :class:`~hmmgpu.cpu.pyhmmer_processes.ProcessPlan` of worker processes, or None (the
        engine's threads in this process). Processes for a search whose filters are hmmgpu's
        (a :class:`~hmmgpu.stages.protocol.CascadeBackend`) and whose post-filter stage is
        pyhmmer's, with at least :data:`~hmmgpu.cpu.pyhmmer_processes.MIN_THREADS` threads, over a
        ``database`` a second reader can read (not standard input): a process per
        :data:`~hmmgpu.cpu.pyhmmer_processes.THREADS_PER_PROCESS` threads."""
        from hmmgpu.cpu import pyhmmer_processes as processes
        from hmmgpu.formats.inputs import rereadable

        run = self.options.run
        threads = 0 if run.cpus == 0 else run.threads
        if (not isinstance(backend, CascadeBackend) or run.postfilter != "pyhmmer" or db.pieces is not None
                or threads < processes.MIN_THREADS or database == "-" or not rereadable(database)):
            return None
        count = max(2, round(threads / processes.THREADS_PER_PROCESS))
        return processes.ProcessPlan(database, self.fmt, count, -(-threads // count))

    def abandon(self) -> None:
        """Stop a GPU process this plan started early that no backend has taken."""
        if self.early is not None:
            self.early.close(wait=False)
            self.early = None


def cuda_available(device: int = 0) -> bool:
    """A usable CUDA GPU with this id is present (asks the CUDA driver; imports nothing heavy)."""
    try:
        from hmmgpu.gpu.runtime.context import cuda_available as probe
    except ImportError:
        return False
    return probe(device)


def start_gpu_early(run, source: str, fmt: str | None, model_lengths) -> CascadeBackend | None:
    """The GPU process started before the database is read (it reads the file itself, so
    both start-ups overlap), for a search that :func:`cpu_route_before_reading` left
    undecided, when ``select_backend`` may take the GPU: ``--backend cuda``, or ``auto`` on a
    GPU machine whose database's residues can be estimated from the file. None otherwise; the
    caller passes the result to :func:`select_backend` as ``started``, which stops it if the
    exact count says the CPU."""
    from hmmgpu.formats.inputs import rereadable

    if source == "-" or run.backend not in ("cuda", "auto") or not model_lengths or not rereadable(source):
        return None
    if run.backend == "auto" and residues_estimate(source) is None:
        return None
    from hmmgpu.gpu.runtime.context import cuda_driver_present

    if not cuda_driver_present():
        return None
    return _gpu_processes(run, None, lambda d: device_backend(run, d, source=(source, fmt), lengths=model_lengths))


def _gpu_processes(run, db, start) -> CascadeBackend:
    """The GPU processes of a search: ``start(device)`` each. One for one GPU; with
    ``--devices`` naming several, one each, joined by
    :class:`~hmmgpu.search.multidevice.MultiDeviceBackend`, whose devices each hold the own
    post-filter's window of models with ``--postfilter hmmgpu`` (there a model's answer waits
    for its passers' domain definitions). One process a GPU: two or three on one H200 took
    17.4 and 19.2 s against 13.0 s for one (600 Pfam x 29 M, warm, --postfilter hmmgpu, one
    session at 9df9ec0): their contexts take the GPU in turns, and the kernels' time nearly
    doubled (GPU busy 9.4 and 16.8 s against 5.3 s)."""
    ids = device_ids(run)
    if ids is None or len(ids) == 1:
        return start(run.device if ids is None else ids[0])
    return _joined(run, db, {d: start(d) for d in ids})


def _joined(run, db, members: dict) -> CascadeBackend:
    """``members`` (device -> its GPU process) as one :class:`~hmmgpu.search.multidevice.MultiDeviceBackend`;
    with ``--postfilter hmmgpu`` each device holds the engine's window of models on that route."""
    from hmmgpu.search.engine import MODELS_IN_FLIGHT_OWN_POSTFILTER_MIN
    from hmmgpu.search.multidevice import MultiDeviceBackend

    return MultiDeviceBackend(db, members,
                              models_ahead=MODELS_IN_FLIGHT_OWN_POSTFILTER_MIN if run.postfilter == "hmmgpu" else None)


def device_backend(run, device: int, db=None, *, source: tuple | None = None, lengths=None,
                   span: tuple | None = None) -> CascadeBackend:
    """The GPU process of one device (:class:`~hmmgpu.gpu.process.CudaProcessBackend`), over
    ``db`` or the sequence file ``source = (path, format)``; ``span``: only the targets
    ``first`` .. ``end - 1`` of a made database (a dask worker's shard)."""
    from hmmgpu.gpu.process import CudaProcessBackend

    return CudaProcessBackend(db=db, source=source, lanes=run.lanes, device=device, lengths=lengths, span=span)


def cpu_route_before_reading(run, source: str, model_lengths) -> str | None:
    """Why the search takes pyhmmer's route whatever the database's exact size, or None when
    that waits for the database to be read: ``--backend hmmer`` (""), ``auto`` with one query,
    or ``auto`` with work that, by the database's residues estimated from the file
    (:func:`residues_estimate`: its size, an upper bound for a plain FASTA file, or, when half
    as many would decide, the share of residue bytes in its head), has models small on average
    or a CPU route estimated under :data:`GPU_ROUTE_SECONDS` (both tests pass only more easily
    with fewer residues), or ``auto`` where no CUDA driver loads (or ``HMMGPU_NO_GPU`` is set).
    An estimate too low for a file whose head is unlike the rest costs time, not exactness.
    A search so decided need not read the file before it starts: fewer models than threads
    search it piece by piece (:class:`~hmmgpu.formats.seqdb.FastaPieces`)."""
    if run.backend != "auto":
        return "" if run.backend == "hmmer" else None
    if not model_lengths:
        return None
    if pyhmmer_route(run, len(model_lengths), source):
        return _ONE_QUERY
    residues = residues_estimate(source)
    if residues is not None:
        def small(count: float) -> str | None:
            return _small_work(float(sum(model_lengths)) * count, len(model_lengths), count, run.threads)

        reason = small(residues)
        if reason is None and small(residues / 2) is not None:
            sampled = residues_estimate(source, sample=True)
            reason = None if sampled is None else small(sampled)
        if reason is not None:
            return reason
    from hmmgpu.gpu.runtime.context import cuda_driver_present

    return _NO_GPU if os.environ.get("HMMGPU_NO_GPU") is not None or not cuda_driver_present() else None


def _small_work(cells: float, queries: int | None, residues: float, threads: int) -> str | None:
    """Why ``auto`` takes pyhmmer's route for ``queries`` models (when known) of ``cells``
    model cells in all against ``residues``, or None: small models, or little work (for a GPU
    route that would first compile its kernels: :data:`KERNEL_COMPILE_SECONDS`)."""
    if queries and small_on_average(cells, queries):
        return _SMALL_MODELS
    seconds = cpu_route_seconds(cells, residues, threads)
    if seconds <= GPU_ROUTE_SECONDS:
        return _SMALL_WORK
    if seconds <= GPU_ROUTE_SECONDS + KERNEL_COMPILE_SECONDS and _gpu_may_be_present():
        from hmmgpu.gpu.runtime.build import any_compiled

        if not any_compiled():   # (without a GPU, nothing to compile: the reason is then that)
            return _COLD_KERNELS
    return None


def _gpu_may_be_present() -> bool:
    """A CUDA driver loads and ``HMMGPU_NO_GPU`` is unset: a GPU may be there (without one,
    the backend line must not suggest ``hmmgpu warmup``)."""
    from hmmgpu.gpu.runtime.context import cuda_driver_present

    return os.environ.get("HMMGPU_NO_GPU") is None and cuda_driver_present()


#: The reasons the backend line gives for ``auto``'s choice of pyhmmer's route.
_ONE_QUERY = "one query runs on every thread before the GPU could start"
_SMALL_MODELS = "the models are small against this database (the GPU's cost per model is higher)"
_SMALL_WORK = "the work is too small to pay for the GPU"
_COLD_KERNELS = "the work is too small to pay for compiling the GPU kernels first (hmmgpu warmup compiles them)"
_NO_GPU = "no CUDA GPU found"


#: The bytes of a plain file's head that :func:`residues_estimate` reads with ``sample=True``.
RESIDUE_SAMPLE_BYTES = 1 << 20


def residues_estimate(source: str, sample: bool = False) -> float | None:
    """The residues of a sequence file or made database, before reading it, or None if that
    cannot be told: a made database records them; a plain file has at most one a byte, a gzip
    file about two. ``sample``: for a plain file, its size times the share of its first
    :data:`RESIDUE_SAMPLE_BYTES` (whole records) outside header lines and line ends, the
    bytes a FASTA file's residues come from (a bound for a file that small; for a larger one,
    an estimate that a head unlike the rest of the file gets wrong). Scanning the whole file
    instead took 0.3-0.5 s for 29 M residues on the H200 machine."""
    import json

    from hmmgpu.formats.inputs import META_FILE, is_database_dir

    try:
        if is_database_dir(source):
            with open(os.path.join(source, META_FILE)) as fh:
                return float(json.load(fh)["total_residues"])
        size = os.path.getsize(source)
        with open(source, "rb") as fh:
            head = fh.read(RESIDUE_SAMPLE_BYTES if sample else 2)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if head[:2] == b"\x1f\x8b":
        return 2.0 * size
    if not sample:
        return 1.0 * size
    if len(head) < size:  # whole records only
        head = head[:head.rfind(b"\n>") + 1]
        if not head:
            return 1.0 * size
    import re

    headers = sum(map(len, re.findall(rb"(?m)^>[^\n\r]*", head)))
    return size * (len(head) - headers - head.count(b"\n") - head.count(b"\r")) / len(head)


def pyhmmer_route(run, queries: int | None, source: str) -> bool:
    """Whether the search takes pyhmmer's route whatever the database's size: ``--backend
    hmmer``, or ``auto`` with one query against a sequence file, which pyhmmer reads and
    searches piece by piece on every thread (:class:`~hmmgpu.formats.seqdb.FastaPieces`) before the
    GPU process would have started. A database made by ``hmmgpu makedb`` (``source``) has no
    such route: pyhmmer's pipeline would need every target as its sequence object (1.4 s of
    one core for 116 M residues), where the GPU's filters leave a few percent of them; there
    one query takes the GPU when the work pays for it, as several do."""
    from hmmgpu.formats.inputs import is_database_dir

    return run.backend == "hmmer" or (run.backend == "auto" and queries == 1
                                          and not is_database_dir(source))


def select_backend(run, db, cells: float | None = None, gpu_process: bool = True,
                   started: CascadeBackend | None = None, queries: int | None = None,
                   decided: str | None = None) -> Backend:
    """The backend ``run.backend`` (:class:`~hmmgpu.options.RunOptions`) names, over ``db``.

    ``auto`` takes the GPU only when the estimated CPU time of the work (``cells`` = sum of
    model lengths x residues, when known) is well above what starting the GPU costs, and a
    GPU is present, and there is more than one query (``queries``, when known:
    :func:`pyhmmer_route`); otherwise pyhmmer's pipeline, the fastest exact CPU route.
    Nothing of numba or CUDA is imported on a route that does not need it. The GPU runs in
    a child process (:mod:`hmmgpu.gpu.process`) unless ``gpu_process`` is False (the audit,
    which calls the stages one by one); ``started``: one already started by
    :func:`start_gpu_early`, used if the GPU is chosen and closed otherwise; the exact count
    then takes pyhmmer's route only for small models, not for work just under the threshold
    (the file's estimate was over it, the GPU's start is under way, and pyhmmer's route over a
    file already read is the slower one: 10 Pfam models against 29 M residues took 1.86 s by
    ranges, 1.35-1.59 s on the GPU; ``engine_bench_h_c_h200_2026-11-24_threshold.json``).
    A child is not waited for here: the engine sends models to pyhmmer's route until it is
    ready, and the engine says what its failure to start means. ``decided``: the reason
    :func:`cpu_route_before_reading` gave, when the caller asked it (then pyhmmer's route).
    """
    try:
        device_ids(run)   # --devices naming a GPU the machine lacks: an error whatever the route
        backend = _select(run, db, cells, gpu_process, started, queries, decided)
    except BaseException:
        if started is not None:
            started.close()
        raise
    if started is not None and backend is not started:
        started.close(wait=False)
    return backend


def _select(run, db, cells, gpu_process, started, queries, decided) -> Backend:
    name = run.backend
    if name == "auto":
        threads = run.threads
        if decided is not None:
            worth, reason = False, decided
        elif pyhmmer_route(run, queries, db.source):
            worth, reason = False, _ONE_QUERY
        else:
            reason = None if cells is None else _small_work(cells, queries, db.total_residues, threads)
            if reason in (_SMALL_WORK, _COLD_KERNELS) and started is not None:
                reason = None  # the estimate from the file started the GPU: see select_backend
            worth = reason is None
        if worth and os.environ.get("HMMGPU_NO_GPU") is None and (started is not None or run.devices is not None
                                                                   or cuda_available(run.device)):
            try:
                return _cuda(run, db, gpu_process, started)
            except HmmgpuError as error:  # present but unusable (busy, out of memory, ...)
                reason = f"the GPU could not be used: {error}"
        elif worth:
            reason = _NO_GPU
        backend = HmmerBackend(db)
        backend.description = f"backend hmmer (pyhmmer on the CPU): {reason}"
        return backend
    if name == "cuda":
        if started is None and run.devices is None and not cuda_available(run.device):
            raise DeviceUnavailable.for_backend(run.device)
        return _cuda(run, db, gpu_process, started)
    if name == "numba":
        return NumbaBackend(db, threads=run.cpus)
    return HmmerBackend(db)


def _cuda(run, db, gpu_process: bool, started) -> CascadeBackend:
    """The CUDA backend: in this process, ready; or the GPU process, perhaps still starting; or,
    with ``--devices`` naming several GPUs, a GPU process on each (:func:`hmmgpu.gpu.runtime.context.device_ids`)."""
    if gpu_process:
        if started is not None:
            started.attach(db)
            return started
        return _gpu_processes(run, db, lambda d: device_backend(run, d, db))
    from hmmgpu.gpu.backend import CudaBackend

    return CudaBackend(db, lanes=run.lanes, device=run.device)


def cluster_route(run) -> str:
    """What the workers of a search over a dask cluster (:mod:`hmmgpu.distributed.cluster`)
    run on their shards, in words (:func:`shard_backend` decides on each worker)."""
    if run.backend == "numba":
        return "hmmgpu's exact CPU filters, then pyhmmer's Forward/domain stage"
    if run.backend == "cuda":
        return "hmmgpu's filters on each worker's GPU (dask-cuda workers), then pyhmmer's Forward/domain stage"
    if run.backend == "auto":
        return ("hmmgpu's filters on the GPU of each worker that has one (dask-cuda workers), then pyhmmer's "
                "Forward/domain stage; pyhmmer's whole pipeline on the CPU of the others")
    return "pyhmmer's whole pipeline on the CPU"


def shard_backend(run, db, first: int, end: int) -> CascadeBackend | None:
    """The filter stage a dask worker runs over the shard ``first`` .. ``end - 1`` of a search's
    made database ``db`` (:mod:`hmmgpu.distributed.cluster`): a
    :class:`~hmmgpu.stages.protocol.CascadeBackend` over the shard as a database of its own,
    whose survivors go to pyhmmer's Forward/domain stage, or None for pyhmmer's whole pipeline
    (:func:`cluster_route`). A worker with a GPU (``auto`` or ``cuda``) runs the GPU process
    on its first visible device, which a dask-cuda worker's ``CUDA_VISIBLE_DEVICES`` makes its
    own GPU, with the shard resident there (behind a one-device
    :class:`~hmmgpu.search.multidevice.MultiDeviceBackend`, which lets the worker's threads
    share it); ``cuda`` on a worker without one is a one-line error."""
    if run.backend == "numba":
        return NumbaBackend(db.shard(first, end), threads=1)
    if run.backend in ("auto", "cuda"):
        if os.environ.get("HMMGPU_NO_GPU") is None and cuda_available(0):
            # the GPU process serves one submitting and one waiting thread: the worker's task
            # threads share it through the feeder and collector of a one-device MultiDeviceBackend
            shard = db.shard(first, end)
            return _joined(run, shard, {0: device_backend(run, 0, shard, span=(first, end))})
        if run.backend == "cuda":
            raise DeviceUnavailable("--backend cuda: this dask worker has no usable CUDA GPU (start GPU workers with "
                                    "`dask cuda worker`)")
    return None
