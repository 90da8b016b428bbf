"""One CUDA device, named by an explicit id, and the facts the kernels and launches need.

Nothing here uses an implicit "current device": every launch and allocation goes through the
device's :attr:`GpuDevice.runtime`, which makes the device's own context current for its
driver calls, so several devices (one engine each, for example from Dask workers) can live in
one process.

A device is opened with blocking synchronisation (``CU_CTX_SCHED_BLOCKING_SYNC`` on its
primary context): a host thread that waits for the GPU sleeps instead of spinning, since
the CPU it would burn belongs to pyhmmer's stage, which runs on every core meanwhile.
On a GPU the device is described and driven through the CUDA driver
(:mod:`hmmgpu.gpu.runtime.driver`); numba is imported only to compile a kernel
(:mod:`hmmgpu.gpu.runtime.build`) or under its simulator.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from hmmgpu.gpu.runtime.context import simulator_enabled


@functools.lru_cache(maxsize=None)
def _runtime(device_id: int, simulator: bool):
    """The one runtime of a device in this process (or the simulator's)."""
    if simulator:
        from hmmgpu.gpu.runtime.simulator import SimulatorRuntime

        return SimulatorRuntime()
    from hmmgpu.gpu.runtime.driver import DriverRuntime

    return DriverRuntime(device_id)


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
        if simulator_enabled():
            return cls(id=device_id, name="numba CUDA simulator", cc=(9, 0), sm_count=1,
                       smem_per_block_optin=1 << 20, smem_per_sm=1 << 20, simulator=True)
        rt = _runtime(int(device_id), False)  # the primary context, blocking synchronisation set first
        return cls(id=int(device_id), name=rt.name, cc=(rt.attribute("cc_major"), rt.attribute("cc_minor")),
                   sm_count=rt.attribute("sm_count"), smem_per_block_optin=rt.attribute("smem_per_block_optin"),
                   smem_per_sm=rt.attribute("smem_per_sm"), simulator=False)

    @property
    def runtime(self):
        """Memory, streams, events and timing on this device: a
        :class:`~hmmgpu.gpu.runtime.driver.DriverRuntime`, or numba's objects under the simulator
        (:class:`~hmmgpu.gpu.runtime.simulator.SimulatorRuntime`)."""
        return _runtime(self.id, self.simulator)

    @property
    def dpx(self) -> bool:
        """Hopper's DPX instructions (16-bit add-max, 3-way max) are native here."""
        return not self.simulator and self.cc >= (9, 0)

    @property
    def lane_binding(self) -> str:
        """The :func:`hmmgpu.gpu.runtime.lanes.helpers` binding that suits this device."""
        return "python" if self.simulator else "dpx" if self.dpx else "swar"

    @property
    def description(self) -> str:
        """e.g. ``NVIDIA H200 (sm_90)``."""
        return self.name if self.simulator else f"{self.name} (sm_{self.cc[0]}{self.cc[1]})"

    def activate(self):
        """Make this device's context current in the calling thread for the block."""
        return self.runtime.activate()

    def free_memory(self) -> int:
        """Free device memory in bytes."""
        return self.runtime.free_memory()


def device_description(device: int = 0) -> str:
    """e.g. ``NVIDIA H200 (sm_90)``."""
    return GpuDevice.open(device).description
