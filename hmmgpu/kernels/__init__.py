"""GPU kernels of hmmgpu (numba.cuda), one family per filter, over a resident database.

Shared parts: :mod:`.device` (a CUDA device by explicit id), :mod:`.resident` (the sequence
database on that device), :mod:`.lanes` and :mod:`.warp` (lane arithmetic and warp helpers),
:mod:`.kargs` (kernel arguments declared once), :mod:`.build` (generated kernels compiled
once per device and cached on disk), :mod:`.tuning` (shapes and launch settings as data).
Families: :mod:`.msv` (SSV and the J-state MSV), :mod:`.vit` (the Viterbi filter),
:mod:`.bias` (the composition bias filter), chained by :mod:`.cascade`.

Import-light: importing this package needs neither a GPU nor numba's CUDA target.
"""
from __future__ import annotations

__all__ = ["cuda_available", "simulator_enabled", "device_description"]


def simulator_enabled() -> bool:
    """numba's CUDA simulator is on (``NUMBA_ENABLE_CUDASIM=1`` when numba was imported)."""
    try:
        from numba import config
    except ImportError:
        return False
    return bool(config.ENABLE_CUDASIM)


def cuda_available(device: int = 0) -> bool:
    """A usable CUDA GPU with this id (always True under the simulator)."""
    try:
        from numba import cuda
    except Exception:  # noqa: BLE001 - a broken CUDA installation means no GPU
        return False
    if simulator_enabled():
        return True
    try:
        if not cuda.is_available() or device >= len(cuda.gpus):
            return False
        with cuda.gpus[device]:
            cuda.current_context()
        return True
    except Exception:  # noqa: BLE001
        return False


def device_description(device: int = 0) -> str:
    """e.g. ``NVIDIA H200 (sm_90)``."""
    from .device import GpuDevice

    return GpuDevice.open(device).description
