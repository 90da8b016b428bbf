"""One CUDA device, named by an explicit id, and the facts the kernels and launches need.

Nothing here uses numba's implicit "current device": every launch and allocation happens
inside :meth:`GpuDevice.activate`, so several devices (one engine each, for example from
Dask workers) can live in one process.

A device is opened with blocking synchronisation (``CU_CTX_SCHED_BLOCKING_SYNC`` on its
primary context): a host thread that waits for the GPU sleeps instead of spinning, since
the CPU it would burn belongs to pyhmmer's stage, which runs on every core meanwhile.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

from . import set_blocking_sync, simulator_enabled


@dataclass(frozen=True)
class GpuDevice:
    """A CUDA device (or numba's simulator) and its limits."""

    id: int
    name: str
    cc: tuple
    sm_count: int
    smem_per_block_optin: int
    smem_per_sm: int
    simulator: bool

    @classmethod
    def open(cls, device_id: int = 0) -> "GpuDevice":
        """Describe device ``device_id`` (the simulator stands in for every id when it is on)."""
        from numba import cuda

        if simulator_enabled():
            return cls(id=device_id, name="numba CUDA simulator", cc=(9, 0), sm_count=1,
                       smem_per_block_optin=1 << 20, smem_per_sm=1 << 20, simulator=True)
        set_blocking_sync(device_id)  # before numba makes the primary context current
        dev = cuda.gpus[device_id]
        with dev:
            d = cuda.get_current_device()
            name = d.name.decode() if isinstance(d.name, bytes) else str(d.name)
            return cls(id=device_id, name=name, cc=tuple(d.compute_capability),
                       sm_count=int(d.MULTIPROCESSOR_COUNT),
                       smem_per_block_optin=int(d.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
                       smem_per_sm=int(d.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR), simulator=False)

    @property
    def dpx(self) -> bool:
        """Hopper's DPX instructions (16-bit add-max, 3-way max) are native here."""
        return not self.simulator and self.cc >= (9, 0)

    @property
    def lane_binding(self) -> str:
        """The :func:`hmmgpu.kernels.lanes.helpers` binding that suits this device."""
        return "python" if self.simulator else "dpx" if self.dpx else "swar"

    @property
    def description(self) -> str:
        """e.g. ``NVIDIA H200 (sm_90)``."""
        return self.name if self.simulator else f"{self.name} (sm_{self.cc[0]}{self.cc[1]})"

    @contextlib.contextmanager
    def activate(self):
        """Make this device current in the calling thread for the block."""
        if self.simulator:
            yield self
            return
        from numba import cuda

        with cuda.gpus[self.id]:
            yield self

    def free_memory(self) -> int:
        """Free device memory in bytes (call inside :meth:`activate`)."""
        if self.simulator:
            return 1 << 40
        from numba import cuda

        return int(cuda.current_context().get_memory_info()[0])
