"""Where the filter stages run: a small typed protocol and its three implementations.

* :class:`HmmerBackend`: no hmmgpu filters at all; pyhmmer's own pipeline runs every stage
  (the exact CPU route, parallel over queries and target ranges by the engine).
* :class:`CascadeBackend` (abstract): hmmgpu runs MSV, the bias filter and the Viterbi filter
  itself and hands the survivors to pyhmmer's Forward stage. The engine gives it each model
  (:meth:`~CascadeBackend.prepare`, then :meth:`~CascadeBackend.submit`) and later takes
  the result from the returned ticket.

  - :class:`FilterBackend` (abstract): the cascade in this process, with a method per stage
    that returns the stage's own result object (:mod:`hmmgpu.cascade`; the audit and the
    tests use them).

    * :class:`NumbaBackend`: hmmgpu's exact CPU filters (numba, parallel over targets).
    * :class:`CudaBackend`: the GPU kernels over a database resident on one device; its
      cascade runs on the GPU end to end (:mod:`hmmgpu.kernels.cascade`).

  - :class:`~hmmgpu.gpu_process.CudaProcessBackend`: a :class:`CudaBackend` in a child
    process, what searches use (its interpreter work then has a GIL of its own).

The engine chooses what to do by type (``isinstance(backend, CascadeBackend)``);
:func:`select_backend` turns ``SearchOptions.backend`` into one of them, estimating for
``auto`` whether the work is large enough to pay for starting the GPU.
"""
from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

from .errors import HmmgpuError

if TYPE_CHECKING:  # numpy is imported where it is used: the CLI starts the GPU process before importing it
    import numpy as np

    from .cascade import CascadeResult, MsvResult, ViterbiResult

#: pyhmmer's whole pipeline on one core, in model cells (M x residues) per second, on real
#: proteins and Pfam models (hits, and so the Forward/domain stage, included): the CPU-time
#: estimate of ``auto``. Measured on the 16-core H200 machine, pyhmmer's route (``--backend
#: hmmer``) with the 600 Pfam-35 models (mean length 166) against 6, 12 and 29 M residues of
#: real proteins: 4.38, 8.07 and 18.08 s, 0.85-1.0e10 cells a second per thread
#: (``benchmarks/results/engine_bench_g_h200_2026-11-24.json``; 2.5e10 before, which made
#: ``auto`` take the CPU route for 6 and 12 M residues, where the GPU route took 3.21 and 4.29 s).
CPU_CELLS_PER_SECOND = 1.0e10
#: pyhmmer's route per database residue, whatever the number of models, in seconds: every
#: target made into a pyhmmer sequence (under the GIL) and the per-target work of a search.
#: Measured on the 16-core GPU machine: one Pfam model against 116 M residues spent 5-8 s
#: there, where the cell estimate alone predicts 0.1 s (and the GPU route took 4-7 s).
CPU_SECONDS_PER_RESIDUE = 4.0e-8
#: The least wall time of a search on the GPU route, in seconds, end to end: the GPU process
#: starts while the database is read, and its first filters are ready 0.35-0.46 s into the
#: search (warm kernel cache). ``auto`` takes the GPU when pyhmmer's route is estimated
#: (:func:`cpu_route_seconds`) to take longer. Measured on the 16-core H200 machine, the first
#: 10, 20 and 30 Pfam-35 models against 29 M residues: the GPU route 1.59, 1.49 and 1.65 s,
#: pyhmmer's route 1.68, 2.05 and 2.17 s, estimated at 1.48, 1.87 and 2.20 s
#: (``benchmarks/results/engine_bench_h_g_a_d_h200_2026-11-24_ranges.json``). At 2.0 s, the
#: threshold before, 20 models took pyhmmer's route.
GPU_ROUTE_SECONDS = 1.5
#: What the GPU route costs more, in seconds, on a machine where no kernel has been compiled
#: yet (an empty kernel cache: a fresh install before ``hmmgpu warmup``). Measured on the H200
#: machine: the sample search's 9 kernels compiled in 5.3 s, (a)'s in 7.9 s.
KERNEL_COMPILE_SECONDS = 5.0
#: A model is *small* against a database when its length times the database's residues is at
#: most this (0.05 s of one thread by :data:`CPU_CELLS_PER_SECOND`): every Pfam model against a
#: proteome of a few thousand proteins, none against tens of millions of residues. The GPU
#: route's cost per model is fixed (tables built and sent, three launches and a reply in the
#: GPU process: about 4 ms of host work), so it cannot keep up with pyhmmer's pipeline on
#: sixteen threads with small models. Measured on the 16-core H200 machine, 19,800 Pfam models
#: (Pfam-A's size) against the 2,100-protein sample proteome: the GPU's filters alone 78.6 s,
#: pyhmmer's route 40.7 s, both sharing the models 50.0 s, ``pyhmmer.hmmsearch`` 47.0 s
#: (``benchmarks/results/engine_bench_f_h200_2026-11-24.json``); and the 600 Pfam models against
#: 0.7, 1.5, 3 and 6 M residues: the GPU route 2.42, 2.41, 2.64 and 3.21 s, pyhmmer's route
#: 1.34, 1.72, 2.69 and 4.38 s, crossing where the mean model's cells are this bound (3 M
#: residues; ``engine_bench_g_h200_2026-11-24.json``). So ``auto`` takes pyhmmer's route when
#: the average model is small, and its engine lets small models bypass a GPU that is behind
#: (:mod:`hmmgpu.engine`).
SMALL_MODEL_CELLS = 5.0e8


def small_on_average(cells: float, queries: int) -> bool:
    """Whether ``queries`` models of ``cells`` model cells in all (lengths x residues) are
    small on average (:data:`SMALL_MODEL_CELLS`)."""
    return cells <= SMALL_MODEL_CELLS * queries


def cpu_route_seconds(cells: float, residues: float, threads: int) -> float:
    """Estimated wall time of pyhmmer's route (``auto``'s comparison with :data:`GPU_ROUTE_SECONDS`)."""
    return cells / (CPU_CELLS_PER_SECOND * max(1, threads)) + residues * CPU_SECONDS_PER_RESIDUE


class Backend(ABC):
    """Where the filter stages of a search run."""

    #: One line naming the backend, printed by the command line.
    description: str = ""

    def prepare_for(self, lengths) -> None:
        """Get ready for models of these lengths (the GPU compiles their kernels up front)."""

    def details(self) -> dict:
        """Where the backend's time went (for the end-of-run statistics)."""
        return {}

    def close(self, wait: bool = True) -> None:
        """Release what the backend holds (GPU memory). ``wait=False``: a helper process is told
        to stop and left to finish on its own (a command about to end need not wait for its
        CUDA context to be torn down)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class HmmerBackend(Backend):
    """pyhmmer's pipeline end to end: every filter runs inside HMMER."""

    def __init__(self, db):
        self.db = db
        self.description = "backend hmmer (pyhmmer on the CPU)"


class CascadeBackend(Backend):
    """hmmgpu's own filter cascade over one database, model after model."""

    def __init__(self, db):
        self.db = db

    @abstractmethod
    def prepare(self, hmm, mmu: float | None = None):
        """What :meth:`submit` takes for this model (``mmu``: its MSV location parameter, when
        the caller read it from the file)."""

    @abstractmethod
    def submit(self, model, options):
        """Start the cascade of one model; the returned ticket's ``result()`` gives its
        :class:`~hmmgpu.cascade.CascadeResult`."""

    def ready(self, timeout: float | None = None) -> bool:
        """Whether models can be submitted now: a backend that starts in the background (the
        GPU process) is waited for up to ``timeout`` seconds (None: until it is), and raises
        its one-line error if it could not start."""
        return True

    def waiting(self) -> int:
        """Models submitted whose results have not come back yet (a backend that runs each
        model as it is submitted, or blocks when it is full, has none waiting)."""
        return 0

    def gpu_seconds(self) -> float:
        """Kernel time spent on the GPU so far."""
        return 0.0


class FilterBackend(CascadeBackend):
    """hmmgpu's own filter stages (MSV, bias, Viterbi filter) in this process."""

    def prepare(self, hmm, mmu: float | None = None):
        """The model's quantized filter tables (:class:`~hmmgpu.profiles.ModelProfile`)."""
        from .profiles import ModelProfile

        return ModelProfile.from_hmm(hmm, mmu=mmu)

    @abstractmethod
    def msv(self, profile, thresholds=None) -> "MsvResult":
        """MSV of every target; only those with status RANGE or ``xJ >= thresholds[L]`` (all
        non-empty targets when ``thresholds`` is None)."""

    @abstractmethod
    def bias(self, profile, indices) -> np.ndarray:
        """Composition-bias filter scores (nats, float32) of the targets ``indices``."""

    @abstractmethod
    def viterbi(self, profile, indices) -> "ViterbiResult":
        """Viterbi filter of the targets ``indices``."""

    def cascade(self, profile, options) -> "CascadeResult":
        """The filter cascade of one model over every target."""
        from .cascade import run_cascade

        return run_cascade(self, profile, options, self.db)

    def submit(self, profile, options):
        """Start the cascade of one model (here it runs at once; the CUDA backend queues it
        on the GPU and returns)."""
        return _Finished(self.cascade(profile, options))


class _Finished:
    """A ticket whose result is already known."""

    def __init__(self, result):
        self._result = result

    def result(self):
        return self._result


class NumbaBackend(FilterBackend):
    """hmmgpu's exact CPU filters, parallel over targets (numba)."""

    def __init__(self, db, threads: int | None = None):
        super().__init__(db)
        if threads:
            import numba

            numba.set_num_threads(min(int(threads), numba.config.NUMBA_NUM_THREADS))
        self.description = "backend numba (hmmgpu's exact CPU filters)"

    def msv(self, profile, thresholds=None):
        import numpy as np

        from . import cpu_filters
        from .cascade import MsvResult

        status, xj = cpu_filters.msv_filter(profile, self.db)
        L = self.db.lengths
        passed = L > 0
        if thresholds is not None:
            passed &= (status != 0) | (xj >= np.asarray(thresholds)[L])
        idx = np.flatnonzero(passed)
        return MsvResult(idx, status[idx], xj[idx])

    def bias(self, profile, indices) -> np.ndarray:
        from . import cpu_filters

        return cpu_filters.bias_filter(profile, self.db, indices)

    def viterbi(self, profile, indices):
        import numpy as np

        from . import cpu_filters
        from .cascade import ViterbiResult

        idx = np.asarray(indices, np.int64)
        status, xc = cpu_filters.viterbi_filter(profile, self.db, idx)
        return ViterbiResult(idx, status, xc)


class CudaBackend(FilterBackend):
    """The GPU kernels over a database resident on one device (explicit id)."""

    def __init__(self, db, lanes: str = "auto", device: int = 0, max_bytes: int | None = None):
        super().__init__(db)
        from .kernels.cascade import GpuCascade
        from .kernels.device import GpuDevice
        from .kernels.resident import ResidentDatabase

        self.device = GpuDevice.open(device)
        clock = time.perf_counter()
        with self.device.activate():
            self.resident = ResidentDatabase(db, self.device, max_bytes=max_bytes)
        #: seconds of the set-up: the database packed and copied to the device, and the rest
        self.setup_seconds = dict(upload=time.perf_counter() - clock)
        self.gpu = GpuCascade(self.resident, lanes=lanes)
        self.setup_seconds["cascade"] = time.perf_counter() - clock - self.setup_seconds["upload"]
        self.lanes = self.gpu.lanes
        self.description = f"backend cuda on {self.device.description} ({self.lanes} lanes)"

    def msv(self, profile, thresholds=None):
        from .cascade import MsvResult

        return MsvResult(*self.gpu.msv_stage.run(profile, thresholds))

    def bias(self, profile, indices) -> np.ndarray:
        return self.gpu.bias_scores(profile, indices)

    def viterbi(self, profile, indices):
        import numpy as np

        from .cascade import ViterbiResult

        idx = np.asarray(indices, np.int64)
        status, xc = self.gpu.viterbi(profile, idx)
        return ViterbiResult(idx, status, xc)

    def cascade(self, profile, options):
        return self.gpu.run(profile, options)

    def submit(self, profile, options):
        return self.gpu.submit(profile, options)

    def gpu_seconds(self) -> float:
        return self.gpu.gpu_ms / 1e3

    def prepare_for(self, lengths) -> None:
        self.gpu.compile_for(lengths)

    def details(self) -> dict:
        return dict(kernel_ms=dict(self.gpu.kernel_ms), host_seconds=dict(self.gpu.host_seconds))

    def close(self, wait: bool = True) -> None:
        self.gpu.close()


def cuda_available(device: int = 0) -> bool:
    """A usable CUDA GPU with this id is present (asks the CUDA driver; imports nothing heavy)."""
    try:
        from .kernels import cuda_available as probe
    except ImportError:
        return False
    return probe(device)


def start_gpu_early(options, source: str, fmt: str | None, model_lengths) -> CascadeBackend | None:
    """The GPU process started before the database is read (it reads the file itself, so
    both start-ups overlap), for a search that :func:`cpu_route_before_reading` left
    undecided, when ``select_backend`` may take the GPU: ``--backend cuda``, or ``auto`` on a
    GPU machine whose database's residues can be estimated from the file. None otherwise; the
    caller passes the result to :func:`select_backend` as ``started``, which stops it if the
    exact count says the CPU."""
    from .inputs import rereadable

    if source == "-" or options.backend not in ("cuda", "auto") or not model_lengths or not rereadable(source):
        return None
    if options.backend == "auto" and residues_estimate(source) is None:
        return None
    from .kernels import cuda_driver_present

    if not cuda_driver_present():
        return None
    from .gpu_process import CudaProcessBackend

    return CudaProcessBackend(source=(source, fmt), lanes=options.lanes, device=options.device,
                              lengths=model_lengths)


def cpu_route_before_reading(options, source: str, model_lengths) -> str | None:
    """Why the search takes pyhmmer's route whatever the database's exact size, or None when
    that waits for the database to be read: ``--backend hmmer`` (""), ``auto`` with one query,
    or ``auto`` with work that, by the database's residues estimated from the file
    (:func:`residues_estimate`: its size, an upper bound for a plain FASTA file, or, when half
    as many would decide, the share of residue bytes in its head), has models small on average
    or a CPU route estimated under :data:`GPU_ROUTE_SECONDS` (both tests pass only more easily
    with fewer residues), or ``auto`` where no CUDA driver loads (or ``HMMGPU_NO_GPU`` is set).
    An estimate too low for a file whose head is unlike the rest costs time, not exactness.
    A search so decided need not read the file before it starts: fewer models than threads
    search it piece by piece (:class:`~hmmgpu.seqdb.FastaPieces`)."""
    if options.backend != "auto":
        return "" if options.backend == "hmmer" else None
    if not model_lengths:
        return None
    if pyhmmer_route(options, len(model_lengths), source):
        return _ONE_QUERY
    residues = residues_estimate(source)
    if residues is not None:
        def small(count: float) -> str | None:
            return _small_work(float(sum(model_lengths)) * count, len(model_lengths), count, options.threads)

        reason = small(residues)
        if reason is None and small(residues / 2) is not None:
            sampled = residues_estimate(source, sample=True)
            reason = None if sampled is None else small(sampled)
        if reason is not None:
            return reason
    from .kernels import cuda_driver_present

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
    if seconds <= GPU_ROUTE_SECONDS + KERNEL_COMPILE_SECONDS:
        from .kernels.build import any_compiled

        if not any_compiled():
            return _COLD_KERNELS
    return None


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

    from .inputs import META_FILE, is_database_dir

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


def pyhmmer_route(options, queries: int | None, source: str) -> bool:
    """Whether the search takes pyhmmer's route whatever the database's size: ``--backend
    hmmer``, or ``auto`` with one query against a sequence file, which pyhmmer reads and
    searches piece by piece on every thread (:class:`~hmmgpu.seqdb.FastaPieces`) before the
    GPU process would have started. A database made by ``hmmgpu makedb`` (``source``) has no
    such route: pyhmmer's pipeline would need every target as its sequence object (1.4 s of
    one core for 116 M residues), where the GPU's filters leave a few percent of them; there
    one query takes the GPU when the work pays for it, as several do."""
    from .inputs import is_database_dir

    return options.backend == "hmmer" or (options.backend == "auto" and queries == 1
                                          and not is_database_dir(source))


def unusable_gpu(options, error: HmmgpuError) -> HmmgpuError | None:
    """What a GPU backend that could not start (``error``, found once the search began) means:
    the error to stop with for ``--backend cuda``; None for ``auto``, whose search goes on with
    pyhmmer's route."""
    if options.backend == "auto":
        return None
    from .gpu_process import NO_DEVICE

    return _no_gpu(options) if str(error).startswith(NO_DEVICE) else error


def _no_gpu(options) -> HmmgpuError:
    return HmmgpuError(f"--backend cuda: no usable CUDA GPU with id {options.device} (try --backend hmmer or numba)")


def select_backend(options, db, cells: float | None = None, gpu_process: bool = True,
                   started: CascadeBackend | None = None, queries: int | None = None,
                   decided: str | None = None) -> Backend:
    """The backend ``options.backend`` names, over ``db``.

    ``auto`` takes the GPU only when the estimated CPU time of the work (``cells`` = sum of
    model lengths x residues, when known) is well above what starting the GPU costs, and a
    GPU is present, and there is more than one query (``queries``, when known:
    :func:`pyhmmer_route`); otherwise pyhmmer's pipeline, the fastest exact CPU route.
    Nothing of numba or CUDA is imported on a route that does not need it. The GPU runs in
    a child process (:mod:`hmmgpu.gpu_process`) unless ``gpu_process`` is False (the audit,
    which calls the stages one by one); ``started``: one already started by
    :func:`start_gpu_early`, used if the GPU is chosen and closed otherwise; the exact count
    then takes pyhmmer's route only for small models, not for work just under the threshold
    (the file's estimate was over it, the GPU's start is under way, and pyhmmer's route over a
    file already read is the slower one: 10 Pfam models against 29 M residues took 1.86 s by
    ranges, 1.35-1.59 s on the GPU; ``engine_bench_h_c_h200_2026-11-24_threshold.json``).
    A child is not waited for here: the engine sends models to pyhmmer's route until it is
    ready, and :func:`unusable_gpu` says what its failure to start means. ``decided``: the reason
    :func:`cpu_route_before_reading` gave, when the caller asked it (then pyhmmer's route).
    """
    try:
        backend = _select(options, db, cells, gpu_process, started, queries, decided)
    except BaseException:
        if started is not None:
            started.close()
        raise
    if started is not None and backend is not started:
        started.close(wait=False)
    return backend


def _select(options, db, cells, gpu_process, started, queries, decided) -> Backend:
    name = options.backend
    if name == "auto":
        threads = options.threads
        if decided is not None:
            worth, reason = False, decided
        elif pyhmmer_route(options, queries, db.source):
            worth, reason = False, _ONE_QUERY
        else:
            reason = None if cells is None else _small_work(cells, queries, db.total_residues, threads)
            if reason in (_SMALL_WORK, _COLD_KERNELS) and started is not None:
                reason = None  # the estimate from the file started the GPU: see select_backend
            worth = reason is None
        if worth and os.environ.get("HMMGPU_NO_GPU") is None and (started is not None or
                                                                   cuda_available(options.device)):
            try:
                return _cuda(options, db, gpu_process, started)
            except HmmgpuError as error:  # present but unusable (busy, out of memory, ...)
                reason = f"the GPU could not be used: {error}"
        elif worth:
            reason = _NO_GPU
        backend = HmmerBackend(db)
        backend.description = f"backend hmmer (pyhmmer on the CPU): {reason}"
        return backend
    if name == "cuda":
        if started is None and not cuda_available(options.device):
            raise _no_gpu(options)
        return _cuda(options, db, gpu_process, started)
    if name == "numba":
        return NumbaBackend(db, threads=options.cpus)
    return HmmerBackend(db)


def _cuda(options, db, gpu_process: bool, started) -> CascadeBackend:
    """The CUDA backend: in this process, ready; or the GPU process, perhaps still starting."""
    if gpu_process:
        from .gpu_process import CudaProcessBackend

        if started is None:
            return CudaProcessBackend(db, lanes=options.lanes, device=options.device)
        started.attach(db)
        return started
    return CudaBackend(db, lanes=options.lanes, device=options.device)
