"""numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``): the runtime objects and the warp intrinsics.

:class:`SimulatorRuntime` gives the launch code numba's own arrays, streams and events under
the names :class:`hmmgpu.gpu.runtime.driver.DriverRuntime` gives them on a GPU, so that the same
code runs in CI.

numba-cuda 0.30.4's simulator lacks ``shfl_*_sync``, ``ballot_sync``, ``any_sync``,
``all_sync``, ``syncwarp`` and ``activemask``. This adds them to the simulator's fake
``cuda`` module: every thread writes its value into a per-block exchange buffer (two,
alternating), all threads of the block meet at the simulator's barrier, and read. That is valid
for warp-synchronous code in which every thread of the block executes the same sequence of
warp intrinsics (the hmmgpu kernels launch one warp per block under the simulator).

The simulator's ``cuda.shared.array`` is not thread-safe either: each thread of a block looks
its array up by the calling line and, when absent, makes one, so two threads that look at once
each make their own and the block no longer shares it (the MSV check failed so in CI on a loaded
two-core machine: half the block read a table nobody had written). :func:`install` replaces it
with the same lookup under a lock.
"""
from __future__ import annotations

import contextlib
import functools
import sys
import threading


class SimulatorRuntime:
    """Memory, streams, events and launches under numba's simulator (kernels are numba's own)."""

    #: as :attr:`hmmgpu.gpu.runtime.driver.DriverRuntime.stream_ordered`: no stream-ordered memory here
    stream_ordered = False

    def __init__(self):
        from numba import cuda

        install()
        self._cuda = cuda

    def activate(self):
        return contextlib.nullcontext(self)

    @staticmethod
    def free_memory() -> int:
        return 1 << 40

    def device_array(self, n: int, dtype, stream=None):
        """(The simulator runs every launch and copy in the calling thread: ``stream`` is unused.)"""
        return self._cuda.device_array(int(n), dtype)

    def to_device(self, host, stream=None):
        return self._cuda.to_device(host)

    def pinned_array(self, n: int, dtype):
        return self._cuda.pinned_array(int(n), dtype)

    def stream(self, non_blocking: bool = False):
        """numba's stream (the simulator runs a launch in the launching thread: no stream flags)."""
        return self._cuda.stream()

    def event(self):
        return self._cuda.event()

    @staticmethod
    def elapsed_ms(start, stop) -> float:
        """No timing under the simulator."""
        return 0.0


@functools.lru_cache(maxsize=None)
def install() -> None:
    """Add the missing warp intrinsics to the simulator's fake ``cuda`` module (once), and
    shorten the interpreter's thread switch interval: the simulator's block manager polls its
    threads for a barrier while it holds the interpreter lock, so at the default 5 ms each
    barrier (every warp shuffle here) cost several switch intervals (the Forward gate of ten
    short targets took 59 s instead of 4 s)."""
    import numpy as np
    from numba.cuda.simulator import kernelapi

    sys.setswitchinterval(1e-4)

    mod = kernelapi.FakeCUDAModule
    shared_lock = threading.Lock()
    unlocked_array = kernelapi.FakeCUDAShared.array

    def shared_array(self, shape, dtype, alignment=None):
        if shape == 0 or alignment is not None:  # dynamic shared memory: one buffer, no lookup
            return unlocked_array(self, shape, dtype, alignment)
        if isinstance(dtype, kernelapi.types.Type):  # the simulator's own conversion
            dtype = kernelapi.numpy_support.as_dtype(dtype)
        caller = sys._getframe(1)
        key = (caller.f_code.co_filename, caller.f_lineno)  # the simulator's own key
        with shared_lock:
            array = self._allocations.get(key)
            if array is None:
                array = self._allocations[key] = np.empty(shape, dtype)
        return array

    kernelapi.FakeCUDAShared.array = shared_array

    def _exchange(self, value):
        # double-buffered: one barrier per exchange. A thread can run at most one exchange
        # ahead (the next barrier holds it), so it never overwrites a buffer still being read.
        t = threading.current_thread()
        bufs = self.__dict__.setdefault("_hmmgpu_xbuf", ({}, {}))
        parity = getattr(t, "_hmmgpu_parity", 0)
        t._hmmgpu_parity = parity ^ 1
        buf = bufs[parity]
        tid = t.thread_id
        buf[tid] = value
        t.syncthreads()
        return t, buf, tid

    def shfl_sync(self, mask, value, src):
        _, buf, tid = _exchange(self, value)
        w = tid - tid % 32
        return buf.get(w + int(src) % 32, value)

    def shfl_up_sync(self, mask, value, delta):
        t, buf, tid = _exchange(self, value)
        lane = tid % 32
        r = buf[tid - delta] if lane >= delta else value
        return r

    def shfl_down_sync(self, mask, value, delta):
        t, buf, tid = _exchange(self, value)
        lane = tid % 32
        src = tid + delta
        r = buf[src] if lane + delta < 32 and src in buf else value
        return r

    def shfl_xor_sync(self, mask, value, lane_mask):
        t, buf, tid = _exchange(self, value)
        w = tid - tid % 32
        src = w + ((tid % 32) ^ int(lane_mask))
        r = buf.get(src, value)
        return r

    def ballot_sync(self, mask, predicate):
        t, buf, tid = _exchange(self, bool(predicate))
        w = tid - tid % 32
        bits = 0
        for lane in range(32):
            if buf.get(w + lane, False):
                bits |= 1 << lane
        return bits

    def any_sync(self, mask, predicate):
        return int(ballot_sync(self, mask, predicate) != 0)

    def all_sync(self, mask, predicate):
        t, buf, tid = _exchange(self, bool(predicate))
        w = tid - tid % 32
        ok = all(buf.get(w + lane, True) for lane in range(32))
        return int(ok)

    def syncwarp(self, mask=0xFFFFFFFF):
        threading.current_thread().syncthreads()

    def activemask(self):
        return 0xFFFFFFFF

    for name, fn in dict(shfl_sync=shfl_sync, shfl_up_sync=shfl_up_sync, shfl_down_sync=shfl_down_sync,
                         shfl_xor_sync=shfl_xor_sync, ballot_sync=ballot_sync, any_sync=any_sync,
                         all_sync=all_sync, syncwarp=syncwarp, activemask=activemask).items():
        if not hasattr(mod, name):
            setattr(mod, name, fn)
