"""The database's residues put into the kernels' layout on the device itself.

What is computed
----------------
The filter kernels read a target's residues as words from a slot of its own: target
position ``p`` (positions sorted by length, :mod:`.resident`) starts at word
``word_offsets[p]``, and residue ``i`` is byte ``i % 4`` of word ``i // 4``, the rest of the
last word padded with code 28 (``~``). The host's database holds the residues in database
order, one after the other, with no padding. This kernel copies them from that order into
the slots: given each position's start in the host's residue array (``starts``), its length
and its slot, it writes every word of every slot, so no slot byte is left unset.

Why on the device
-----------------
Packing on the host reads the residues in the order of the positions, which are the
database's targets sorted by length, so equal-length targets scattered over the file are
gathered one by one through index arrays: 0.15-0.19 s of the GPU process's start-up for
116 M residues on the 16-core GPU machine, the largest part of it, while the search waits.
Copying the residues as they are (one transfer, straight from the memory map of a made
database) and gathering them on the device costs one more transfer's worth of device memory
for a moment and a few milliseconds. :class:`~hmmgpu.gpu.resident.ResidentDatabase`
packs on the device when the residues and their packed copy fit in its memory budget
together, and on the host otherwise (a chunked database, whose chunks are scattered over
the residue array).

How the code looks
------------------
One warp per target, taking targets in a grid-stride loop; lane ``k`` writes words ``k``,
``k + 32``, ... of the slot, each from four byte reads, so a warp's reads and writes are
consecutive.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hmmgpu.gpu.runtime import build, tuning
from hmmgpu.gpu.runtime.emit import kernel_module
from hmmgpu.gpu.runtime.kargs import Arg, arguments
from hmmgpu.gpu.layout import PAD_CODE

#: Parameters of the packing kernel, in order.
ARGS = (Arg("raw", "uint8[:]"), Arg("starts", "int64[:]"), Arg("lengths", "int32[:]"),
        Arg("word_offsets", "int64[:]"), Arg("n_targets", "int32"), Arg("packed", "uint32[:]"))

_BODY = '''
    lane = cuda.threadIdx.x & 31
    warps = cuda.gridsize(1) >> 5
    p = cuda.grid(1) >> 5
    while p < n_targets:
        L = lengths[p]
        s = starts[p]
        wb = word_offsets[p]
        w = lane
        while 4 * w < L:
            word = u32(0)
            for b in range(4):
                i = 4 * w + b
                c = u32(PAD)
                if i < L:
                    c = u32(raw[s + i])
                word = u32(word | u32(c << u32(8 * b)))
            packed[wb + w] = word
            w += 32
        p += warps
'''


@dataclass(frozen=True)
class PackSpec:
    """The packing kernel (one specialisation: it has no shape)."""

    @property
    def name(self) -> str:
        return "pack_v1"

    def source(self, binding: str) -> str:
        return kernel_module("Residue packing kernel.", binding, ARGS, _BODY, f"PAD = {PAD_CODE}")


def pack_on_device(device, residues, starts, lengths, word_offsets, total_words: int):
    """A device array (uint32, ``total_words``) holding the slots of the targets that start at
    ``starts`` (int64) in the host array ``residues`` (uint8) with ``lengths`` (int32, device
    array), each slot at ``word_offsets`` (int64, device array). Waits until it is written."""
    rt = device.runtime
    raw = rt.to_device(np.asarray(residues, np.uint8))
    packed = rt.device_array(max(int(total_words), 1), np.uint32)
    kernel = build.load(PackSpec(), device)
    grid = 1 if device.simulator else device.sm_count * tuning.PACK_BLOCKS_PER_SM
    block = 32 if device.simulator else tuning.PACK_BLOCK
    stream = rt.stream()
    kernel[grid, block, stream, 0](*arguments(ARGS, raw=raw, starts=rt.to_device(np.asarray(starts, np.int64)),
                                              lengths=lengths, word_offsets=word_offsets, n_targets=len(starts),
                                              packed=packed))
    stream.synchronize()
    return packed
