"""The cost model that routes a search: measured speeds, in one place.

``auto`` compares the estimated wall time of pyhmmer's route with what the GPU route costs
at least (:mod:`hmmgpu.search.routing`); the post-filter planner cuts work into tasks by the
same speeds (:mod:`hmmgpu.stages.postfilter`). Each number was measured on the 16-core GPU
machine; how, and what it replaced, is in docs/performance.md ("The cost model").
"""
from __future__ import annotations

#: pyhmmer's whole pipeline on one core, in model cells (M x residues) per second, on real
#: Pfam models and proteins (the Forward/domain stage included).
CPU_CELLS_PER_SECOND = 1.0e10
#: pyhmmer's route per database residue, whatever the number of models, in seconds (every
#: target made a pyhmmer sequence, and the per-target work of a search).
CPU_SECONDS_PER_RESIDUE = 4.0e-8
#: The least wall time of a search on the GPU route, in seconds, end to end (warm kernel cache).
GPU_ROUTE_SECONDS = 1.5
#: What the GPU route costs more, in seconds, before any kernel has been compiled (``hmmgpu warmup``).
KERNEL_COMPILE_SECONDS = 5.0
#: A model is *small* against a database when its length times the database's residues is at
#: most this: the GPU route's fixed cost per model (about 4 ms of host work) then loses to
#: pyhmmer's pipeline on sixteen threads.
SMALL_MODEL_CELLS = 5.0e8


def small_on_average(cells: float, queries: int) -> bool:
    """Whether ``queries`` models of ``cells`` model cells in all (lengths x residues) are
    small on average (:data:`SMALL_MODEL_CELLS`)."""
    return cells <= SMALL_MODEL_CELLS * queries


def cpu_route_seconds(cells: float, residues: float, threads: int) -> float:
    """Estimated wall time of pyhmmer's route (``auto``'s comparison with :data:`GPU_ROUTE_SECONDS`)."""
    return cells / (CPU_CELLS_PER_SECOND * max(1, threads)) + residues * CPU_SECONDS_PER_RESIDUE
