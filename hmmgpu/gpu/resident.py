"""The sequence database resident on one GPU, shared by every kernel family.

Layout: word-aligned, padded slots in length order, longest first (:mod:`hmmgpu.gpu.layout`).
``lengths[p]`` is the residue count (int32) of position p; ``indices[p]`` maps a position
back to the database index on the host.

Why longest first: kernels hand out targets in position order from an atomic counter, so
the long targets start first and the short ones fill the end of the run (no long tail),
and neighbouring lane groups of a warp get targets of similar length.

The database is uploaded once. If it does not fit in the memory budget it is split into
chunks of consecutive positions that are uploaded in turn for every pass (identical
results, more transfer time); :meth:`ResidentDatabase.chunks` yields them.

Packing. A resident database goes to the device as it lies on the host (its residues in
database order, one copy) and is put into the slots there (:mod:`.pack`); a chunk, whose
positions are scattered over the host's residues, is packed on the host
(:func:`~hmmgpu.gpu.layout.pack_residues`), as is a database whose residues and slots do not fit in the budget
together.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hmmgpu.gpu.layout import PACK_THREADS, pack_residues, slot_offsets
from hmmgpu.host import usable_cores

#: Device bytes per target besides its residues: word offset, length, and room for the
#: per-target outputs and work lists of the filter families (see ``cascade``).
PER_TARGET_BYTES = 8 + 4 + 48


@dataclass
class Chunk:
    """Consecutive positions ``lo..hi-1`` of the resident database, on the device."""

    lo: int
    hi: int
    residues: object  #: uint32 device array, four residues per word
    word_offsets: object  #: int64 device array
    lengths: object  #: int32 device array
    max_length: int

    @property
    def n(self) -> int:
        return self.hi - self.lo


class ResidentDatabase:
    """A :class:`~hmmgpu.formats.seqdb.SequenceDB` on a :class:`~hmmgpu.gpu.runtime.device.GpuDevice`.

    ``max_bytes`` caps the device memory used (default: 60% of the free memory); above it
    the database is chunked. Call inside ``device.activate()``.
    """

    def __init__(self, db, device, max_bytes: int | None = None):
        order = np.asarray(db.order, dtype=np.int64)
        lengths = np.asarray(db.lengths, dtype=np.int64)[order]
        keep = lengths > 0
        self.device = device
        self.indices = order[keep]  #: database index of each position
        self.lengths = lengths[keep]  #: host copy of the lengths, by position
        self.n = int(self.indices.size)
        self.max_length = int(self.lengths[0]) if self.n else 0
        self.db = db  #: the host database
        per_target = (self.lengths + 3) // 4 * 4 + PER_TARGET_BYTES
        budget = int(device.free_memory() * 0.6) if max_bytes is None else int(max_bytes)
        self.budget = budget
        slots_bytes = int(per_target.sum())
        bounds = [0]
        if slots_bytes > budget and self.n:
            acc = 0
            for i, b in enumerate(per_target.tolist()):
                if acc + b > budget and i > bounds[-1]:
                    bounds.append(i)
                    acc = 0
                acc += b
        bounds.append(self.n)
        self._bounds = list(zip(bounds[:-1], bounds[1:]))
        self.resident = len(self._bounds) == 1
        #: packed on the device: a resident database whose residues (one byte each, uploaded as
        #: they lie) fit in the budget beside its slots
        self.packs_on_device = self.resident and slots_bytes + int(db.total_residues) <= budget
        self._chunks = [self._upload(lo, hi) for lo, hi in self._bounds] if self.resident else None

    @property
    def largest_chunk(self) -> int:
        """Positions in the largest chunk (at least 1)."""
        return max([hi - lo for lo, hi in self._bounds] + [1])

    @property
    def n_chunks(self) -> int:
        """How many chunks the database is processed in (1: fully resident)."""
        return len(self._bounds)

    def _upload(self, lo: int, hi: int) -> Chunk:
        rt = self.device.runtime
        lens = self.lengths[lo:hi]
        starts = np.asarray(self.db.offsets, dtype=np.int64)[self.indices[lo:hi]]
        woff, total_words = slot_offsets(lens)
        word_offsets = rt.to_device(woff if hi > lo else np.zeros(1, np.int64))
        lengths = rt.to_device(lens.astype(np.int32) if hi > lo else np.zeros(1, np.int32))
        if self.packs_on_device and hi > lo:
            from hmmgpu.gpu.pack import pack_on_device

            residues = pack_on_device(self.device, self.db.residues, starts, lengths, word_offsets, total_words)
        else:
            packed, _ = pack_residues(self.db.residues, starts, lens, threads=min(PACK_THREADS, usable_cores()))
            residues = rt.to_device(packed.view(np.uint32))
        return Chunk(lo=lo, hi=hi, residues=residues, word_offsets=word_offsets, lengths=lengths,
                     max_length=int(lens[0]) if hi > lo else 0)

    def chunks(self):
        """Yield the chunks, uploading each in turn when the database is not resident."""
        if self.resident:
            yield from self._chunks
            return
        for lo, hi in self._bounds:
            yield self._upload(lo, hi)

    def close(self) -> None:
        """Free the device copy."""
        self._chunks = None
