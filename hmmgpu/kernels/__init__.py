"""GPU SSV/MSV filter kernels (numba.cuda), with the database resident on the GPU.

Import-light: importing this package needs no GPU; the kernels are generated and compiled
on first use (see :mod:`hmmgpu.kernels.codegen`).
"""
from __future__ import annotations

import os

__all__ = ["cuda_available", "device_description", "GpuMsvFilter"]


def _simulator_on() -> bool:
    try:
        from numba import config
    except ImportError:
        return False
    return bool(config.ENABLE_CUDASIM)


def cuda_available() -> bool:
    """A usable CUDA GPU (the simulator only when ``NUMBA_ENABLE_CUDASIM=1``)."""
    try:
        from numba import cuda
    except Exception:
        return False
    if _simulator_on():
        return True
    try:
        if not cuda.is_available():
            return False
        cuda.current_context()
        return True
    except Exception:
        return False


def device_description() -> str:
    """e.g. ``NVIDIA H100 80GB HBM3 (sm_90)``."""
    from numba import cuda

    if _simulator_on():
        return "numba CUDA simulator"
    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    cc = dev.compute_capability
    return f"{name} (sm_{cc[0]}{cc[1]})"


def __getattr__(name):
    if name == "GpuMsvFilter":
        from .filter import GpuMsvFilter

        return GpuMsvFilter
    raise AttributeError(name)
