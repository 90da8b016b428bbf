"""Warp helpers on int32/uint32 words: the striped diagonal shift and max reductions.

Shuffles move packed words as int32 (same bits): ``cuda.shfl_*_sync`` rejects uint32.
A lane group is ``G`` consecutive lanes of a warp (G a power of two, at most 32); every
helper must be called by all 32 lanes of the warp together (full mask).
"""
from __future__ import annotations

from numba import cuda

from . import lanes
from ._sim import patch_simulator

if lanes.SIM:
    patch_simulator()

FULL = 0xFFFFFFFF
_devjit = cuda.jit(device=True) if lanes.SIM else cuda.jit(device=True, forceinline=True)
_shift16 = lanes.shift16
_shift8 = lanes.shift8
_i32 = lanes.i32
_u32 = lanes.u32


@_devjit
def shift_up16(w, first, fill):
    """CUDAMPF reorder for 2 x 16-bit lanes: every lane moves up one node-segment.

    The group's lane z (thread z // 2, half z % 2) takes lane z - 1's value; lane 0 of the
    group's first thread takes the top lane of ``fill``.
    """
    prev = _u32(cuda.shfl_up_sync(FULL, _i32(w), 1))
    if first:
        prev = fill
    return _shift16(w, prev)


@_devjit
def shift_up8(w, first, fill):
    """As :func:`shift_up16` for 4 x 8-bit lanes."""
    prev = _u32(cuda.shfl_up_sync(FULL, _i32(w), 1))
    if first:
        prev = fill
    return _shift8(w, prev)


@_devjit
def group_max(v, G):
    """Max of int32 ``v`` over each group of ``G`` lanes (butterfly: every lane gets it)."""
    off = G >> 1
    while off > 0:
        o = cuda.shfl_xor_sync(FULL, v, off)
        if o > v:
            v = o
        off >>= 1
    return v


@_devjit
def warp_max(v):
    """Max of int32 ``v`` over the whole warp."""
    return group_max(v, 32)


@_devjit
def warp_bcast(v, src):
    """Lane ``src``'s int32 value in every lane."""
    return cuda.shfl_sync(FULL, v, src)
