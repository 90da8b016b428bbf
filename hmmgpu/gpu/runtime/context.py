"""The CUDA driver found and its primary context held, without numba.

Probes that tell whether a GPU is there (:func:`cuda_driver_present`, :func:`cuda_available`)
ask the driver directly through :mod:`.libcuda`; :func:`primary_context` retains a device's
primary context once for the life of the process; :func:`simulator_enabled` says whether
numba's CUDA simulator stands in for the GPU (CI); :func:`device_ids` checks the GPUs a
run's ``--devices`` names against those the driver counts. Import-light: importing this
module needs neither a GPU nor numba.
"""
from __future__ import annotations

import ctypes
import os

from hmmgpu.errors import DeviceUnavailable, InputError
from hmmgpu.gpu.runtime import libcuda
from hmmgpu.gpu.runtime.libcuda import primary_context

__all__ = ["compute_capability", "cuda_available", "cuda_device_count", "device_ids", "cuda_driver_present",
           "open_primary_context", "simulator_enabled"]

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
    use the GPU (:mod:`hmmgpu.gpu.process` reports a missing device as its one-line error)."""
    return _simulator_requested() or libcuda.load() is not None


def cuda_available(device: int = 0) -> bool:
    """A CUDA GPU with this id is present (always True under the simulator).

    Asks the driver directly (``cuInit``, ``cuDeviceGetCount``): no numba import and no CUDA
    context in this process, which may never use the GPU itself (searches run it in a child
    process, :mod:`hmmgpu.gpu.process`).
    """
    if _simulator_requested():
        return True
    driver = libcuda.load()
    count = ctypes.c_int(0)
    return (driver is not None and driver.cuInit(0) == 0 and driver.cuDeviceGetCount(ctypes.byref(count)) == 0
            and 0 <= device < count.value)


def cuda_device_count() -> int:
    """How many CUDA GPUs the driver sees (``CUDA_VISIBLE_DEVICES`` applied; 0 without a
    driver; 1 under the simulator, which stands in for one GPU of any id)."""
    if _simulator_requested():
        return 1
    driver = libcuda.load()
    count = ctypes.c_int(0)
    if driver is None or driver.cuInit(0) != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


#: ``CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR`` and ``_MINOR``.
_CC_ATTRIBUTES = (75, 76)


def compute_capability(device: int = 0) -> tuple | None:
    """(major, minor) of GPU ``device`` as the driver reports it (``cuInit`` first: 0.1-0.2 s
    on the GPU machine), or None where there is no such GPU or driver (and under the
    simulator)."""
    if _simulator_requested():
        return None
    driver = libcuda.load()
    values = [ctypes.c_int(0), ctypes.c_int(0)]
    if driver is None or driver.cuInit(0) != 0:
        return None
    for value, attribute in zip(values, _CC_ATTRIBUTES):
        if driver.cuDeviceGetAttribute(ctypes.byref(value), attribute, device) != 0:
            return None
    return values[0].value, values[1].value


def open_primary_context(device: int = 0) -> bool:
    """Start the driver and make the primary context of ``device`` (the one every kernel
    launch then uses), with blocking synchronisation; False where there is no such device.

    Plain driver calls through ctypes, which leave the interpreter's lock free: the GPU
    process runs this in a thread while it imports numpy and pyhmmer, since the
    driver's start-up and the context's creation take 0.3-0.4 s on the GPU machine. The
    context stays retained for the life of the process.
    """
    return _simulator_requested() or primary_context(device) is not None


def device_ids(run) -> tuple | None:
    """The GPUs that ``--devices`` names (``run.devices``: ``all`` or ids), checked against the
    GPUs this machine has; None without ``--devices``. A one-line
    :class:`~hmmgpu.errors.DeviceUnavailable` for an id the machine lacks (or for ``all``
    without any GPU), and an :class:`~hmmgpu.errors.InputError` with a backend that runs no
    GPU. ``HMMGPU_NO_GPU`` hides every GPU."""
    if run.devices is None:
        return None
    if run.backend in ("hmmer", "numba"):
        raise InputError(f"--devices names GPUs for the GPU route; --backend {run.backend} runs none "
                         "(use --backend auto or cuda)")
    count = 0 if os.environ.get("HMMGPU_NO_GPU") is not None else cuda_device_count()
    have = "no CUDA GPU" if count == 0 else f"{count} CUDA GPU{'s' * (count > 1)} (ids 0-{count - 1})"
    if run.devices == "all":
        if count == 0:
            raise DeviceUnavailable("--devices all: no CUDA GPU found")
        return tuple(range(count))
    ids = tuple(int(d) for d in run.devices.split(","))
    missing = [d for d in ids if d >= count]
    if missing:
        raise DeviceUnavailable(f"--devices {run.devices}: no CUDA GPU with id {','.join(map(str, missing))} "
                                f"(this machine has {have})")
    return ids
