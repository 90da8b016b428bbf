"""Warp helpers on packed 32-bit words: the striped diagonal shift and group maxima.

A lane group is ``G`` consecutive threads of a warp (G a power of two, at most 32); every
helper must be called by all 32 threads of the warp together (full mask). Shuffles move
packed words as int32 (same bits): ``cuda.shfl_*_sync`` rejects uint32.
:func:`helpers` builds them for the device or, with ``simulator=True``, for numba's CUDA
simulator (whose missing warp intrinsics :mod:`.simulator` supplies).
"""
from __future__ import annotations

import functools
from types import SimpleNamespace

from numba import cuda  # a module global: the simulator swaps it for its fake module

from hmmgpu.gpu.runtime import lanes

FULL = 0xFFFFFFFF


@functools.lru_cache(maxsize=None)
def helpers(simulator: bool) -> SimpleNamespace:
    """``shift_up16``, ``shift_up8``, ``group_max`` for the device or the simulator."""
    if simulator:
        from hmmgpu.gpu.runtime.simulator import install

        install()
        devjit = cuda.jit(device=True)
        L = lanes.helpers("python")
    else:
        devjit = cuda.jit(device=True, forceinline=True)
        L = lanes.helpers("swar")
    shift16, shift8, i32, u32 = L.shift16, L.shift8, L.i32, L.u32

    @devjit
    def shift_up16(w, first, fill):
        """Every 16-bit lane of the group moves up one: lane z takes lane z-1's value.

        The group's lane 0 (low half of its first thread) takes the top lane of ``fill``.
        """
        prev = u32(cuda.shfl_up_sync(FULL, i32(w), 1))
        if first:
            prev = fill
        return shift16(w, prev)

    @devjit
    def shift_up8(w, first, fill):
        """As ``shift_up16`` for 4 x 8-bit lanes."""
        prev = u32(cuda.shfl_up_sync(FULL, i32(w), 1))
        if first:
            prev = fill
        return shift8(w, prev)

    @devjit
    def group_max(v, G):
        """Max of int32 ``v`` over each group of ``G`` threads (butterfly: every thread gets it)."""
        off = G >> 1
        while off > 0:
            o = cuda.shfl_xor_sync(FULL, v, off)
            if o > v:
                v = o
            off >>= 1
        return v

    return SimpleNamespace(shift_up16=shift_up16, shift_up8=shift_up8, group_max=group_max)
