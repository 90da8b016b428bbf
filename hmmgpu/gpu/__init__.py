"""GPU kernels of hmmgpu, one family per filter, over a resident database.

numba-cuda compiles them; a GPU runs them through the CUDA driver. The runtime the
families share is in :mod:`.runtime`: :mod:`~.runtime.device` (a CUDA device by explicit id),
:mod:`~.runtime.context` (driver probes, primary context), :mod:`~.runtime.lanes` and
:mod:`~.runtime.warp` (lane arithmetic and warp helpers), :mod:`~.runtime.kargs` (kernel
arguments declared once), :mod:`~.runtime.build` (generated kernels compiled once per device,
their cubins kept on disk), :mod:`~.runtime.libcuda` and :mod:`~.runtime.driver` (the CUDA
driver through ctypes: memory, streams, events, launches of those cubins),
:mod:`~.runtime.simulator` (numba's simulator for CI), :mod:`~.runtime.tuning` (shapes and
launch settings as data). Beside the families: :mod:`.layout` and :mod:`.resident` (the
sequence database on a device), :mod:`.pack` (packing it there), :mod:`.backend` and
:mod:`.process` (the filter stages in this process or in a child process). Families: :mod:`.msv` (SSV and the J-state MSV), :mod:`.vit` (the Viterbi filter),
:mod:`.bias` (the composition bias filter), chained by :mod:`.cascade`.

This face only re-exports the driver probes; importing it needs neither a GPU nor numba.
"""
from hmmgpu.gpu.runtime.context import cuda_available, cuda_driver_present, simulator_enabled

__all__ = ["cuda_available", "cuda_driver_present", "simulator_enabled"]
