"""Domain definition's stages on the GPU: the batch methods of
:class:`hmmgpu.stages.domaindef.DomainStages`, each batch a few launches, the full matrices
never leaving the device.

What it computes
----------------
:func:`hmmgpu.stages.domaindef.define_domains_batched` hands a model's stages every clustered
region of a batch of targets in one call, then every envelope in one call, and
:func:`~hmmgpu.stages.domaindef.define_domains_grouped` does so for several models at once
(the GPU process hands it every model of a Forward-gate batch: a launch over one model's few
dozen passers would wait for its longest, model after model). :class:`GpuDomainStages` runs
each call as few kernel launches, whatever the models of its items:

* :meth:`GpuDomainStages.region_ensembles`: the regions' multihit full Forward matrices by
  the full-matrix Forward kernel (:func:`hmmgpu.gpu.fwdback.matrix_launch.produce_matrices`),
  then the stochastic-trace ensemble kernel on all of them where they lie
  (:func:`hmmgpu.gpu.ensemble.stages.region_ensembles`, which finishes each region on the
  host: glibc's ``logf``, the clusters, the domination filter; a region the kernel leaves, or
  whose matrix is flagged, is sampled by the CPU reference from its matrix copied back);
* :meth:`GpuDomainStages.rescored_of`: the envelopes' unihit full Forward and Backward
  matrices by the full-matrix kernels, then the decoding and optimal accuracy kernel on all
  of them where they lie (:func:`hmmgpu.gpu.envelope.launch.launch_produced`: status,
  ``oasc``, flags, OA trace and null2 odds come back), the envelopes finished on the host all at
  once and as arrays (:func:`hmmgpu.gpu.envelope.launch.finish_produced`: what
  :func:`hmmgpu.cpu.envelope.finish_envelope`, the end of the CPU reference itself, makes of
  each, bit for bit: the trace moved to target coordinates, ``iali``/``jali``, ``n2sc`` by
  glibc's ``logf``, the flags; an envelope whose decoding overflowed is dropped). An unclustered
  envelope whose posterior has tiny values (TINY_ROWS) is finished by ``finish_envelope`` itself,
  its posterior copied back: the flush-to-zero check of its null2 odds reads it.

The host computes no full matrix; a matrix comes back only for the CPU reference's
fallbacks above. The one-item methods are the CPU stages' (the driver calls the batch
methods only). Every launch runs on the stages' device (the GPU process's
:class:`~hmmgpu.gpu.runtime.device.GpuDevice`), through its runtime, as the filters' kernels
do: the six kernels (:func:`kernel_specs`) ship compiled for sm_90
(:mod:`hmmgpu.gpu.prebuilt_kernels`), so that on an H100 or H200 they are loaded, not
compiled, and the GPU process does not import numba's CUDA target for them.

Why it looks as it does
-----------------------
Every matrix of a batch is held at once in device memory: a region's Forward matrix is
``(Lr + 1) (12 Q + 6)`` floats, an envelope's Forward and Backward twice that. A call's items
are therefore cut into runs of at most ``batch_bytes`` of matrices (:func:`runs_by_size`), a
batch of launches a run, largest items first: a few threads run an item, row after row (the
ensemble kernel one thread a region, 200 traces after another), so a launch lasts as long
as its largest item, and runs cut in the items' order each waited for a long item of their
own. The answers come back in the items' order, which is all the driver needs. They
equal the CPU stages' bit for bit (their flags but the CPU references' diagnostic ANY_TINY,
which no kernel raises): the kernels equal the CPU references (tests/gpu), and the host's
part is the references' own code. Where the time goes is kept per stage
(:attr:`GpuDomainStages.seconds`: each step waits for its launches, so a step's wall time is
its kernels' plus the host's part).
"""
from __future__ import annotations

import threading
import time

import numpy as np

from hmmgpu.cpu.domaindef import CpuDomainStages
from hmmgpu.cpu.fwdback import DP_I, DP_M, special_transitions, special_transitions_of
from hmmgpu.cpu.stotrace import DEFAULT_SEED
from hmmgpu.gpu.ensemble.launch import DEFAULT_TABLE, RegionRequest
from hmmgpu.gpu.ensemble.source import EnsembleSpec
from hmmgpu.gpu.ensemble.stages import region_ensembles
from hmmgpu.gpu.envelope.launch import finish_produced, launch_produced
from hmmgpu.gpu.envelope.source import DecodeOASpec
from hmmgpu.gpu.fwdback.matrix_launch import MatrixJob, matrix_bytes, produce_matrices
from hmmgpu.gpu.fwdback.matrix_source import BwdMatrixSpec, FwdMatrixSpec
from hmmgpu.gpu.runtime import build, tuning
from hmmgpu.gpu.runtime.device import GpuDevice
from hmmgpu.stages.domaindef import RescoredEnvelopes, offsets_of

__all__ = ["GpuDomainStages", "HOST_CODE_PARTS", "compile_host_code", "compile_host_code_aside", "kernel_specs",
           "load_kernels", "runs_by_size"]


def kernel_specs() -> list:
    """The kernels of domain definition's stages: the full-matrix Forward and Backward kernels
    (rows in shared memory and in global scratch), the ensemble kernel, and the envelopes'
    decoding and optimal accuracy kernel, each in IEEE arithmetic and in hmmsearch's float mode
    (``ftz``) (shipped compiled: :mod:`hmmgpu.gpu.prebuilt_kernels`)."""
    return [spec for ftz in (False, True) for spec in (
        FwdMatrixSpec("shared", ftz, tuning.FWD_SEGMENTS), FwdMatrixSpec("global", ftz),
        BwdMatrixSpec("shared", ftz, tuning.FWD_SEGMENTS),
        BwdMatrixSpec("global", ftz), EnsembleSpec(ftz), DecodeOASpec(ftz))]


def load_kernels(device: GpuDevice) -> int:
    """Load every kernel of :func:`kernel_specs` on ``device`` (:func:`hmmgpu.gpu.runtime.build.load`),
    compiling first, in parallel processes, those that neither ship for it nor are in the cache
    (a GPU other than sm_90); returns how many were loaded. ``hmmgpu warmup`` runs it, and the
    GPU process in a thread when a model first asks for hmmgpu's own post-filter."""
    specs = kernel_specs()
    build.compile_ahead(specs, device)
    with device.activate():
        for spec in specs:
            build.load(spec, device)
    return len(specs)


#: The parts of :func:`compile_host_code`.
HOST_CODE_PARTS = ("driver", "sampler")


def compile_host_code(parts=HOST_CODE_PARTS) -> None:
    """Compile the CPU code that the host's part of these stages calls (or load it from numba's
    cache), on a sampled model, without defining anything: ``driver``, the region scan of many
    targets and the definitions' assembly, glibc's ``logf`` loop (never cached: it calls through a ctypes pointer), the clustering and null2 by
    expectation (an envelope's flush-to-zero check); ``sampler``, the CPU reference's sampler of
    the ensemble (the longest to compile: about 10-20 s with numba's cache empty). The GPU
    process runs it in a thread as soon as a model asks for hmmgpu's own post-filter, after
    :func:`compile_host_code_aside`, so that the first definitions wait neither for the compiler
    nor for the interpreter's lock it holds; until it has ended they leave the CPU reference no
    region it can do without (:meth:`hmmgpu.gpu.cascade.GpuCascade.define_domains_of`)."""
    from pyhmmer.easel import Alphabet, Randomness
    from pyhmmer.plan7 import HMM

    from hmmgpu.constants import STATUS_OK
    from hmmgpu.cpu.null2 import glibc_logf, null2_by_expectation
    from hmmgpu.cpu.optacc import domain_spans
    from hmmgpu.cpu.spensemble import cluster
    from hmmgpu.cpu.stotrace import NSAMPLES, compile_sampler
    from hmmgpu.stages.domaindef import define_domains_arrays, scan_targets
    from hmmgpu.stages.forward import ForwardTables
    from hmmgpu.stages.profiles import configured_profile

    f32 = np.float32
    tables = ForwardTables.from_optimized(configured_profile(HMM.sample(Alphabet.amino(), 8, Randomness(1)))
                                          .to_optimized())
    if "driver" in parts:
        scan_targets([(STATUS_OK, np.ones(3, f32), np.zeros(3, f32), np.zeros(3, f32))])
        define_domains_arrays([])   # the assembly
        domain_spans(np.zeros(3, np.uint8), np.zeros(1, np.int64), np.ones(1, np.int64))
        glibc_logf(np.ones(2, f32))
        cluster(np.array([[0, 1, 2, 1, 2]], np.int32), NSAMPLES)
        pp = np.zeros((2, 3, tables.Q, 4), f32)
        for flush_tiny in (False, True):
            null2_by_expectation(pp[:, DP_M], pp[:, DP_I], np.zeros((2, 6), f32), tables.rfv, flush_tiny)
    if "sampler" in parts:
        compile_sampler(tables, special_transitions(tables, 2))


def compile_host_code_aside(timeout: float = 300.0) -> bool:
    """:func:`compile_host_code` in child processes, one a part, at once, into numba's cache on
    disk (its cache directory from the environment, as this process's), this thread waiting for
    them without the interpreter's lock; :func:`compile_host_code` here then only loads. Whether
    every part compiled (a part that failed is compiled here, as before)."""
    import os
    import subprocess
    import sys

    import hmmgpu

    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(hmmgpu.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    children = [subprocess.Popen([sys.executable, "-c", "from hmmgpu.gpu.domaindef import compile_host_code; "
                                  f"compile_host_code(({part!r},))"], env=env, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for part in HOST_CODE_PARTS]
    ok = True
    for child in children:
        try:
            ok = child.wait(timeout) == 0 and ok
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            ok = False
    return ok


def runs_by_size(sizes, budget: int) -> list:
    """The items (indices into ``sizes``) in runs whose sizes add up to at most ``budget``
    each (an item larger than the budget is a run alone), the largest items first (ties in
    order), every item in one run: a list of index lists."""
    runs, run, total = [], [], 0
    for k in sorted(range(len(sizes)), key=lambda k: -sizes[k]):
        if run and total + sizes[k] > budget:
            runs.append(run)
            run, total = [], 0
        run.append(k)
        total += sizes[k]
    if run:
        runs.append(run)
    return runs


class GpuDomainStages(CpuDomainStages):
    """The stages of one model (``tables``, the pipeline's ``seed``) with the batch methods on
    the GPU: ``device`` the :class:`~hmmgpu.gpu.runtime.device.GpuDevice` that runs them (GPU 0,
    or the simulator, if None), ``table`` the ensemble's draws in device memory, ``batch_bytes`` the
    matrices a launch holds at most (:data:`~hmmgpu.gpu.runtime.tuning.DOMAINDEF_BATCH_BYTES`),
    ``step_cost`` the ensemble split's (:func:`hmmgpu.gpu.ensemble.stages.split_by_cost`),
    ``stream`` the stream of every launch (the default stream if None) but those of the
    unclustered regions' envelopes, which run on ``aside_stream`` (:attr:`overlaps_phases`; the
    default stream if None) beside the ensembles, ``cpu_threads`` the
    threads of the split and ``sample_flagged`` whether a region whose matrix is flagged is
    sampled (:func:`hmmgpu.gpu.ensemble.stages.region_ensembles`); ``ftz`` True: every step in
    hmmsearch's float mode (flush-to-zero: the kernels' ``ftz`` variants, the host's part and the
    CPU reference under the x86 mode itself), for targets whose decoding holds in that mode only.
    ``seconds``: the wall time of each step of the calls whose work this object led (the
    first of a call's models; with :attr:`overlaps_phases` the unclustered envelopes' steps run
    beside the ensembles', so that the steps add up to more than the call): ``matrices`` (the
    full-matrix kernels), ``ensembles`` (the
    ensemble kernel and each region's finish on the host), ``decoding`` (the envelopes'
    decoding and optimal accuracy kernel), ``finish`` (each envelope's finish on the host);
    ``ensemble_counts``: their clustered regions and what the ensemble split measured
    (:func:`hmmgpu.gpu.ensemble.stages.region_ensembles`' ``counts``)."""

    def __init__(self, tables, seed: int = DEFAULT_SEED, table: int = DEFAULT_TABLE,
                 batch_bytes: int = tuning.DOMAINDEF_BATCH_BYTES, device: GpuDevice | None = None,
                 step_cost: float = tuning.ENSEMBLE_GPU_STEP_COST, stream=None,
                 cpu_threads: int = tuning.ENSEMBLE_CPU_THREADS, sample_flagged: bool = True, ftz: bool = False,
                 aside_stream=None):
        super().__init__(tables, seed)
        self.aside_stream = aside_stream
        self.ftz = bool(ftz)
        self.step_cost = float(step_cost)
        self.cpu_threads = int(cpu_threads)
        self.sample_flagged = bool(sample_flagged)
        self.stream = stream
        self.device = device or GpuDevice.open(0)
        self.table = int(table)
        self.batch_bytes = int(batch_bytes)
        self.seconds = dict(matrices=0.0, ensembles=0.0, decoding=0.0, finish=0.0)
        self._seconds_lock = threading.Lock()
        #: the clustered regions of those calls, those the CPU reference sampled (the longest,
        #: beside the kernel, and those it left or whose matrix is flagged) and their thread time
        self.ensemble_counts = dict(regions=0, cpu_regions=0, cpu_seconds=0.0, cpu_residues=0, kernel_longest=0,
                                    kernel_seconds=0.0)

    @property
    def overlaps_phases(self) -> bool:
        """On a GPU the unclustered regions' envelopes are rescored on a stream of their own
        (``aside_stream``) while the ensembles run (under the simulator, one launch at a time)."""
        return not self.device.simulator

    def region_ensembles(self, regions) -> list:
        return self.region_ensembles_of([(self, regions)])[0]

    def rescore_envelopes(self, envelopes) -> list:
        return self.rescore_envelopes_of([(self, envelopes)])[0]

    def _settings(self) -> tuple:
        return self.seed, self.device, self.table, self.batch_bytes, self.cpu_threads, self.sample_flagged, self.ftz

    def _timed(self, step: str, since: float) -> float:
        """Add the time since ``since`` to ``step``'s; the time now."""
        now = time.perf_counter()
        with self._seconds_lock:   # the driver's aside thread times its steps too
            self.seconds[step] += now - since
        return now

    @classmethod
    def region_ensembles_of(cls, work) -> list:
        """Every model's regions in the same launches (those of models of equal settings: each
        set of settings in turn): a run of at most ``batch_bytes`` of matrices holds regions of
        any models, each with its own model's tables."""
        work = list(work)
        if len({stages._settings() for stages, _ in work}) > 1:
            return _by_settings(work, cls.region_ensembles_of)
        if not work:
            return []
        first = work[0][0]

        def answer(run):
            clock = time.perf_counter()
            batch = produce_matrices([MatrixJob(stages.tables, r.codes, r.i, r.j) for stages, r in run],
                                     device=first.device, block=tuning.DOMAINDEF_MATRIX_BLOCK, stream=first.stream,
                                     ftz=first.ftz)
            clock = first._timed("matrices", clock)
            xf = special_transitions_of([stages.tables for stages, _ in run], [r.codes.size for _, r in run])
            requests = [RegionRequest(matrix=None, tables=stages.tables, xf=x, codes=r.codes, i=r.i, j=r.j)
                        for (stages, r), x in zip(run, xf)]
            answers = region_ensembles(requests, batch.forward.flags.tolist(), batch=batch, jobs=range(len(run)),
                                       seed=first.seed, table=first.table, cpu_threads=first.cpu_threads,
                                       sample_flagged=first.sample_flagged, step_cost=first.step_cost,
                                       counts=first.ensemble_counts, stream=first.stream)
            first._timed("ensembles", clock)
            return answers

        items = [(stages, region) for stages, regions in work for region in regions]
        return _in_runs(work, items, [matrix_bytes(r.j - r.i + 1, stages.tables.Q) for stages, r in items], answer)

    @classmethod
    def rescore_envelopes_of(cls, work, aside: bool = False) -> list:
        """:meth:`rescored_of`'s answers as :class:`~hmmgpu.stages.domaindef.Envelope` objects, a
        list per model."""
        work = list(work)
        return _split(cls.rescored_of(work, aside=aside).envelopes(), [len(envelopes) for _, envelopes in work])

    @classmethod
    def rescored_of(cls, work, aside: bool = False) -> RescoredEnvelopes:
        """Every model's envelopes in the same launches (as :meth:`region_ensembles_of`), on the
        first model's ``aside_stream`` where ``aside`` (the driver's call beside the ensembles);
        their answers as arrays, every model's one after the other
        (:func:`hmmgpu.gpu.envelope.launch.finish_produced`)."""
        work = list(work)
        groups = _settings_groups(work)
        if len(groups) > 1:
            starts = offsets_of([len(envelopes) for _, envelopes in work])
            parts = [cls.rescored_of([work[m] for m in members], aside=aside) for members in groups]
            positions = [np.arange(starts[m], starts[m + 1]) for members in groups for m in members]
            return RescoredEnvelopes.joined(parts).take(np.argsort(np.concatenate(positions), kind="stable"))
        items = [(stages, envelope) for stages, envelopes in work for envelope in envelopes]
        if not items:
            return RescoredEnvelopes.of([])
        first = work[0][0]
        stream = first.aside_stream if aside else first.stream

        def answer(run):
            clock = time.perf_counter()
            batch = produce_matrices([MatrixJob(stages.tables, e.codes, e.i, e.j, unihit=True, backward=True)
                                      for stages, e in run], device=first.device, block=tuning.DOMAINDEF_MATRIX_BLOCK,
                                     stream=stream, ftz=first.ftz)
            clock = first._timed("matrices", clock)
            produced = launch_produced(batch, stream=stream)
            clock = first._timed("decoding", clock)
            answers = finish_produced(produced, [e for _, e in run])
            first._timed("finish", clock)
            return answers

        runs = runs_by_size([2 * matrix_bytes(e.j - e.i + 1, stages.tables.Q) for stages, e in items],
                            first.batch_bytes)
        parts = [answer([items[k] for k in run]) for run in runs]
        return RescoredEnvelopes.joined(parts).take(np.argsort(np.concatenate(runs), kind="stable"))


def _settings_groups(work) -> list:
    """The models of ``work`` (their positions) of each set of settings, in order, a list a set."""
    groups: dict = {}
    for m, (stages, _) in enumerate(work):
        groups.setdefault(stages._settings(), []).append(m)
    return list(groups.values())


def _by_settings(work, method) -> list:
    """``method`` (a batch method's classmethod) on the models of ``work`` of each set of
    settings in turn; the answers back in ``work``'s order."""
    answers = [None] * len(work)
    for members in _settings_groups(work):
        for m, got in zip(members, method([work[m] for m in members])):
            answers[m] = got
    return answers


def _in_runs(work, items, sizes, answer) -> list:
    """``answer`` (a function of a run's items, giving their answers in order) on the items of
    every model of ``work`` in runs of at most the first model's ``batch_bytes``
    (:func:`runs_by_size`, largest first); the answers back in the items' order, a list per
    model."""
    flat = [None] * len(items)
    for chosen in runs_by_size(sizes, work[0][0].batch_bytes):
        for k, got in zip(chosen, answer([items[k] for k in chosen])):
            flat[k] = got
    return _split(flat, [len(group) for _, group in work])


def _split(flat: list, counts: list) -> list:
    """``flat`` cut into consecutive lists of ``counts`` items."""
    out, start = [], 0
    for n in counts:
        out.append(flat[start:start + n])
        start += n
    return out
