"""Domain definition's region ensemble on the GPU: the stage function that plugs the ensemble
kernel into :func:`hmmgpu.stages.domaindef.define_domains_batched`.

:func:`region_ensembles` samples a batch of clustered regions (of any targets and models) with
the kernel (:func:`hmmgpu.gpu.ensemble.launch.sample_regions`) and finishes each on the host
as the CPU stages do (:func:`hmmgpu.cpu.domaindef.region_result`: glibc's ``logf``, the
clustering, the domination filter); a region the kernel leaves (its status not OK: the table
of draws or the pair buffer ran out, a path Easel would abort on, a step outside the matrix)
is sampled by the CPU reference (:func:`hmmgpu.cpu.stotrace.trace_ensemble`, which grows its
table and buffers, and raises where Easel aborts). The GPU stages
(:class:`hmmgpu.gpu.domaindef.GpuDomainStages`) call it on all the clustered regions the
driver hands them at once.
"""
from __future__ import annotations

from hmmgpu.cpu.domaindef import region_result
from hmmgpu.cpu.stotrace import DEFAULT_SEED, NSAMPLES, OK, trace_ensemble
from hmmgpu.gpu.ensemble.launch import DEFAULT_TABLE, sample_regions

__all__ = ["region_ensembles"]


def region_ensembles(requests, flags, *, seed: int = DEFAULT_SEED, binding: str | None = None,
                     table: int = DEFAULT_TABLE) -> list:
    """``region_trace_ensemble`` on every :class:`~hmmgpu.gpu.ensemble.launch.RegionRequest`
    (``flags``: each region matrix's exactness flags): a
    :class:`~hmmgpu.stages.domaindef.RegionEnsemble` each, in order, equal to the CPU stages'."""
    out = []
    for request, sampled, matrix_flags in zip(requests, sample_regions(requests, nsamples=NSAMPLES, seed=seed,
                                                                      table=table, binding=binding), flags):
        ensemble = sampled.ensemble
        if sampled.status != OK:
            dp = request.matrix.dp
            ensemble = trace_ensemble(dp[:, 0], dp[:, 1], dp[:, 2], request.matrix.xmx, request.tables, request.xf,
                                      request.codes, request.i, request.j, nsamples=NSAMPLES, seed=seed)
        out.append(region_result(ensemble, matrix_flags))
    return out
