"""GPU kernels of hmmgpu, one family per filter, over a resident database.

numba-cuda compiles them; a GPU runs them through the CUDA driver. Shared parts:
:mod:`.device` (a CUDA device by explicit id), :mod:`.resident` (the sequence database on
that device), :mod:`.lanes` and :mod:`.warp` (lane arithmetic and warp helpers),
:mod:`.kargs` (kernel arguments declared once), :mod:`.build` (generated kernels compiled
once per device, their cubins kept on disk), :mod:`.libcuda` and :mod:`.driver` (the CUDA
driver through ctypes: memory, streams, events, launches of those cubins),
:mod:`.simulator` (numba's simulator for CI), :mod:`.tuning` (shapes and launch settings as
data). Families: :mod:`.msv` (SSV and the J-state MSV), :mod:`.vit` (the Viterbi filter),
:mod:`.bias` (the composition bias filter), chained by :mod:`.cascade`.

Import-light: importing this package needs neither a GPU nor numba.
"""
from __future__ import annotations

import ctypes
import os

from . import libcuda

__all__ = ["cuda_available", "cuda_driver_present", "open_primary_context", "primary_context", "simulator_enabled",
           "device_description"]

#: ``CU_CTX_SCHED_BLOCKING_SYNC``: a thread that waits on an event or a stream sleeps.
CU_CTX_SCHED_BLOCKING_SYNC = 0x4


def simulator_enabled() -> bool:
    """numba's CUDA simulator is on: ``NUMBA_ENABLE_CUDASIM=1`` when numba was imported, or,
    where numba is not imported (a process that only runs compiled kernels never imports
    it), in the environment now."""
    import sys

    numba = sys.modules.get("numba")
    if numba is None:
        return _simulator_requested()
    from numba import config

    return bool(config.ENABLE_CUDASIM)


def _simulator_requested() -> bool:
    """``NUMBA_ENABLE_CUDASIM`` asks for numba's CUDA simulator (read without importing numba)."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


def cuda_driver_present() -> bool:
    """The CUDA driver library loads (or the simulator is on): a GPU may be there. Cheaper than
    :func:`cuda_available` by the driver's ``cuInit`` (0.1-0.2 s), left to a process that will
    use the GPU (:mod:`hmmgpu.gpu_process` reports a missing device as its one-line error)."""
    return _simulator_requested() or libcuda.load() is not None


def cuda_available(device: int = 0) -> bool:
    """A CUDA GPU with this id is present (always True under the simulator).

    Asks the driver directly (``cuInit``, ``cuDeviceGetCount``): no numba import and no CUDA
    context in this process, which may never use the GPU itself (searches run it in a child
    process, :mod:`hmmgpu.gpu_process`).
    """
    if _simulator_requested():
        return True
    driver = libcuda.load()
    count = ctypes.c_int(0)
    return (driver is not None and driver.cuInit(0) == 0 and driver.cuDeviceGetCount(ctypes.byref(count)) == 0
            and 0 <= device < count.value)


def set_blocking_sync(device: int):
    """Ask for blocking synchronisation on the primary context of ``device``; the device's
    driver handle, or None where the driver or the device is not there (a driver that refuses
    the flag leaves the default, spinning, which is only slower)."""
    driver = libcuda.load()
    dev = ctypes.c_int(0)
    if driver is None or driver.cuInit(0) != 0 or driver.cuDeviceGet(ctypes.byref(dev), int(device)) != 0:
        return None
    driver.cuDevicePrimaryCtxSetFlags_v2(dev, CU_CTX_SCHED_BLOCKING_SYNC)
    return dev


def primary_context(device: int):
    """Start the driver and retain the primary context of ``device``, with blocking
    synchronisation set first: (the device's handle, the context's handle), or None where
    the driver or the device is not there."""
    dev = set_blocking_sync(device)
    context = ctypes.c_void_p()
    if dev is None or libcuda.load().cuDevicePrimaryCtxRetain(ctypes.byref(context), dev) != 0:
        return None
    return dev, context


def open_primary_context(device: int = 0) -> bool:
    """Start the driver and make the primary context of ``device`` (the one every kernel
    launch then uses), with blocking synchronisation; False where there is no such device.

    Plain driver calls through ctypes, which leave the interpreter's lock free: the GPU
    process runs this in a thread while it imports numpy and pyhmmer, since the
    driver's start-up and the context's creation take 0.3-0.4 s on the GPU machine. The
    context stays retained for the life of the process.
    """
    return _simulator_requested() or primary_context(device) is not None


def device_description(device: int = 0) -> str:
    """e.g. ``NVIDIA H200 (sm_90)``."""
    from .device import GpuDevice

    return GpuDevice.open(device).description
