"""Domain definition's region ensemble on the GPU: the stage function that plugs the ensemble
kernel into :func:`hmmgpu.stages.domaindef.define_domains_batched`.

What it computes
----------------
:func:`region_ensembles` samples a batch of clustered regions (of any targets and models) and
finishes each on the host as the CPU stages do (:func:`hmmgpu.cpu.domaindef.region_result`:
glibc's ``logf``, the clustering, the domination filter). Two samplers give the same
ensemble bit for bit: the kernel (:func:`hmmgpu.gpu.ensemble.launch.sample_regions`: the
regions' multihit Forward matrices held by the host, or left in device memory by
:func:`hmmgpu.gpu.fwdback.matrix_launch.produce_matrices`) and the CPU reference
(:func:`hmmgpu.cpu.stotrace.trace_ensemble`, which grows its table and buffers, and raises where
Easel aborts). The CPU reference samples

* a region whose matrix is flagged (:data:`~hmmgpu.stages.forward.HOST`: RANGE, its values not
  finite, or SUBNORMAL), as the CPU stages sample it: the kernel is proven on matrices that are
  neither (the GPU process samples no such region: its target goes to pyhmmer's pipeline
  whatever the ensemble);
* a region the kernel leaves (its status not OK: the table of draws or the pair buffer ran
  out, a path Easel would abort on, a step outside the matrix);
* the longest regions of the batch (:func:`split_by_cost`), in a pool of threads of this
  process while the kernel runs on the others.

Such a region's matrix is copied from the device where only the device holds it (before the
launch: the pool's threads touch no device memory). The GPU stages
(:class:`hmmgpu.gpu.domaindef.GpuDomainStages`) call it on all the clustered regions the
driver hands them at once.

Why the longest regions go to the CPU
-------------------------------------
The kernel gives a region one thread, which runs its 200 traces a step after another, each
step a chain of dependent loads and IEEE divisions; a launch therefore lasts as long as its
longest region, however many short ones run beside it. The CPU reference runs the same steps
many times faster on one core, and the regions' lengths have a long tail (a multi-domain
protein of a few thousand residues against a repeat family), so sampling the few longest
regions on the CPU, beside the launch, shortens the launch to the longest region left to
it, at a cost in CPU time that the cost model bounds: regions move to the CPU, longest first,
while that lowers the larger of the two sides' estimated times (the kernel's: its longest
region's residues times the step cost; the pool's: the residues it holds over its threads).
The step cost, a residue of the kernel's over one of the reference's, depends on the GPU and
the CPU: it starts at :data:`~hmmgpu.gpu.runtime.tuning.ENSEMBLE_GPU_STEP_COST` and the GPU
process then takes it from what its launches and its pool measured
(:func:`measured_step_cost`). Regions of one length move together: in a database that holds
a protein several times the longest regions tie, and moving them one at a time (which left
the launch as long) kept every region on the kernel. Measured on one H200 (600 Pfam models x
116 M residues, the proteins four times, --postfilter hmmgpu): before, no region on the CPU,
77.5 s (4217ce7); since, 3,471 regions and 105 s of CPU time, 81.7 s (3c56735; pyhmmer ran
7% slower in that session too): the split does not set the run's pace there.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from hmmgpu.cpu.domaindef import region_result
from hmmgpu.cpu.stotrace import DEFAULT_SEED, NSAMPLES, OK, trace_ensemble
from hmmgpu.gpu.ensemble.launch import DEFAULT_TABLE, sample_regions
from hmmgpu.gpu.runtime import tuning
from hmmgpu.host import flush_to_zero
from hmmgpu.stages.domaindef import RegionEnsemble
from hmmgpu.stages.forward import HOST, RANGE

__all__ = ["measured_step_cost", "region_ensembles", "split_by_cost"]


def split_by_cost(lengths, threads: int, step_cost: float) -> list:
    """The regions (indices into ``lengths``, their residues) the CPU reference samples in
    ``threads`` threads while the kernel samples the others, longest first: the regions of
    one length move together (moving one of them would leave the launch as long), each such
    group while that lowers ``max(residues moved / threads, step_cost x the longest region
    left)``. None without threads."""
    if threads <= 0:
        return []
    order = sorted(range(len(lengths)), key=lambda k: -lengths[k])
    moved, total, n = [], 0, 0
    while n < len(order):
        length = lengths[order[n]]
        end = n
        while end < len(order) and lengths[order[end]] == length:
            end += 1
        left = lengths[order[end]] if end < len(order) else 0
        if max((total + (end - n) * length) / threads, step_cost * left) >= max(total / threads, step_cost * length):
            break
        moved += order[n:end]
        total += (end - n) * length
        n = end
    return moved


def measured_step_cost(counts: dict) -> float | None:
    """The kernel's cost of a residue of its longest region over the CPU reference's cost of a
    residue, from what :func:`region_ensembles` measured into ``counts`` (a launch taken to last
    as long as its longest region); None before both sides have run."""
    if not (counts.get("kernel_longest") and counts.get("kernel_seconds") and counts.get("cpu_residues")
            and counts.get("cpu_seconds")):
        return None
    return (counts["kernel_seconds"] / counts["kernel_longest"]) / (counts["cpu_seconds"] / counts["cpu_residues"])


def region_ensembles(requests, flags, *, batch=None, jobs=None, seed: int = DEFAULT_SEED,
                     table: int = DEFAULT_TABLE,
                     cpu_threads: int = tuning.ENSEMBLE_CPU_THREADS,
                     step_cost: float = tuning.ENSEMBLE_GPU_STEP_COST, counts: dict | None = None,
                     stream=None, sample_flagged: bool = True) -> list:
    """``region_trace_ensemble`` on every :class:`~hmmgpu.gpu.ensemble.launch.RegionRequest`
    (``flags``: each region matrix's exactness flags): a
    :class:`~hmmgpu.stages.domaindef.RegionEnsemble` each, in order, equal to the CPU stages'.
    ``batch``, ``jobs``: where the matrices are in device memory, as
    :func:`~hmmgpu.gpu.ensemble.launch.sample_regions` takes them; ``cpu_threads``,
    ``step_cost``: the pool and cost model of :func:`split_by_cost` (0 threads: the kernel
    samples every region it can); ``stream``: the kernel's launch's; ``sample_flagged`` False: a
    region whose matrix is flagged is not sampled (an ensemble without envelopes, its null2
    scores 0, and the matrix's flags, which send the whole target to pyhmmer's pipeline on
    the GPU route: what it would sample is never used there). ``counts``, if given, gets
    added ``regions`` (how many) and what measures the two sides (:func:`measured_step_cost`):
    ``cpu_regions`` (regions the CPU reference sampled),
    ``cpu_residues`` and ``cpu_seconds`` (theirs, and their thread time), ``kernel_longest``
    (the longest region the kernel sampled) and ``kernel_seconds`` (the launch's wall time,
    transfers included). With ``batch`` in hmmsearch's float mode (``batch.ftz``) the kernel, the
    CPU reference and the regions' finish compute in that mode too."""
    n = len(requests)
    if n == 0:
        return []
    ftz = batch is not None and batch.ftz
    # a matrix of hmmsearch's float mode is hmmsearch's whatever its flags for what that mode
    # would change say: only a range error keeps its region from the kernel
    host = RANGE if ftz else HOST
    lengths = [r.j - r.i + 1 for r in requests]
    flagged = [k for k in range(n) if flags[k] & host and sample_flagged]
    clean = [k for k in range(n) if not flags[k] & host]
    longest = [clean[m] for m in split_by_cost([lengths[k] for k in clean], cpu_threads, step_cost)]
    on_kernel = sorted(set(clean) - set(longest))

    def matrix_of(k):
        return requests[k].matrix if batch is None else batch.host_result(int(jobs[k])).matrix

    def reference(request, matrix) -> tuple:
        clock = time.thread_time()
        with flush_to_zero(ftz):   # a matrix of hmmsearch's float mode, sampled in it
            ensemble = trace_ensemble(matrix, request.tables, request.xf, request.codes, request.i, request.j,
                                      nsamples=NSAMPLES, seed=seed)
        return ensemble, time.thread_time() - clock

    def finished(k):   # the clustering, compiled, leaves the interpreter's lock: the threads share it
        if ensembles[k] is None:
            return RegionEnsemble(n2sc=np.zeros(lengths[k], np.float32), envelopes=np.zeros((0, 2), np.int64),
                                  flags=int(flags[k]))
        return region_result(ensembles[k], flags[k])

    def finished_all(ks) -> list:   # the float mode set once a chunk (a region's own setting cost more)
        with flush_to_zero(ftz):
            return [finished(k) for k in ks]

    ensembles, done = [None] * n, {}
    with ThreadPoolExecutor(max(1, cpu_threads), thread_name_prefix="hmmgpu-ensembles") as pool, \
            ThreadPoolExecutor(tuning.ENSEMBLE_FINISH_THREADS, thread_name_prefix="hmmgpu-regions") as finishing:
        futures = {k: pool.submit(reference, requests[k], matrix_of(k)) for k in flagged + longest}
        clock = time.perf_counter()
        sampled = sample_regions([requests[k] for k in on_kernel], batch=batch,
                                 jobs=None if batch is None else [jobs[k] for k in on_kernel], nsamples=NSAMPLES,
                                 seed=seed, table=table, stream=stream)
        kernel_seconds = time.perf_counter() - clock
        sampled_ok = []
        for k, region in zip(on_kernel, sampled):
            if region.status == OK:
                ensembles[k] = region.ensemble
                sampled_ok.append(k)
            else:
                futures[k] = pool.submit(reference, requests[k], matrix_of(k))
        # the kernel's regions finished at once, in a few chunks a thread (a task a region cost
        # the interpreter's lock more than its clustering, which leaves the lock)
        size = max(1, -(-len(sampled_ok) // (4 * tuning.ENSEMBLE_FINISH_THREADS)))
        for start in range(0, len(sampled_ok), size):
            chunk = sampled_ok[start:start + size]
            done[tuple(chunk)] = finishing.submit(finished_all, chunk)
        seconds = 0.0
        for k, future in futures.items():
            ensembles[k], spent = future.result()
            seconds += spent
            done[(k,)] = finishing.submit(finished_all, [k])
        results = [None] * n
        for chunk, future in done.items():
            for k, result in zip(chunk, future.result()):
                results[k] = result
        for k in range(n):
            if results[k] is None:   # a flagged region left unsampled
                results[k] = finished_all([k])[0]
    if counts is not None:
        measured = dict(regions=n, cpu_regions=len(futures), cpu_seconds=seconds,
                        cpu_residues=sum(lengths[k] for k in futures),
                        kernel_longest=max((lengths[k] for k in on_kernel), default=0),
                        kernel_seconds=kernel_seconds if on_kernel else 0.0)
        for name, value in measured.items():
            counts[name] = counts.get(name, 0) + value
    return results
