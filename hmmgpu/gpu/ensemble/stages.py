"""Domain definition's region ensemble on the GPU: the stage function that plugs the ensemble
kernel into :func:`hmmgpu.stages.domaindef.define_domains_batched`.

:func:`region_ensembles` samples a batch of clustered regions (of any targets and models) with
the kernel (:func:`hmmgpu.gpu.ensemble.launch.sample_regions`: the regions' multihit Forward
matrices held by the host, or left in device memory by
:func:`hmmgpu.gpu.fwdback.matrix_launch.produce_matrices`) and finishes each on the host as the
CPU stages do (:func:`hmmgpu.cpu.domaindef.region_result`: glibc's ``logf``, the clustering,
the domination filter). The CPU reference (:func:`hmmgpu.cpu.stotrace.trace_ensemble`, which
grows its table and buffers, and raises where Easel aborts) samples a region the kernel leaves
(its status not OK: the table of draws or the pair buffer ran out, a path Easel would abort on,
a step outside the matrix) and a region whose matrix is flagged (:data:`~hmmgpu.stages.forward.HOST`:
RANGE, its values not finite, or SUBNORMAL), as the CPU stages sample it: the kernel is proven
on matrices that are neither. Such a region's matrix is copied from the device where only the
device holds it. The GPU stages (:class:`hmmgpu.gpu.domaindef.GpuDomainStages`) call it on all
the clustered regions the driver hands them at once.
"""
from __future__ import annotations

from hmmgpu.cpu.domaindef import region_result
from hmmgpu.cpu.stotrace import DEFAULT_SEED, NSAMPLES, OK, trace_ensemble
from hmmgpu.gpu.ensemble.launch import DEFAULT_TABLE, sample_regions
from hmmgpu.stages.forward import HOST

__all__ = ["region_ensembles"]


def region_ensembles(requests, flags, *, batch=None, jobs=None, seed: int = DEFAULT_SEED,
                     binding: str | None = None, table: int = DEFAULT_TABLE) -> list:
    """``region_trace_ensemble`` on every :class:`~hmmgpu.gpu.ensemble.launch.RegionRequest`
    (``flags``: each region matrix's exactness flags): a
    :class:`~hmmgpu.stages.domaindef.RegionEnsemble` each, in order, equal to the CPU stages'.
    ``batch``, ``jobs``: where the matrices are in device memory, as
    :func:`~hmmgpu.gpu.ensemble.launch.sample_regions` takes them."""
    sampled = sample_regions(requests, batch=batch, jobs=jobs, nsamples=NSAMPLES, seed=seed, table=table,
                             binding=binding)
    out = []
    for k, (request, region, matrix_flags) in enumerate(zip(requests, sampled, flags)):
        ensemble = region.ensemble
        if region.status != OK or matrix_flags & HOST:
            matrix = request.matrix if batch is None else batch.host_result(int(jobs[k])).matrix
            ensemble = trace_ensemble(matrix.dp[:, 0], matrix.dp[:, 1], matrix.dp[:, 2], matrix.xmx, request.tables,
                                      request.xf, request.codes, request.i, request.j, nsamples=NSAMPLES, seed=seed)
        out.append(region_result(ensemble, matrix_flags))
    return out
