"""Host side of the Smith-Waterman scan: batches, tiles, launches, saturated targets.

:class:`GpuScanner` keeps a database resident on one device (one upload for any number of
queries) and returns every target's exact score for each query: the 16-bit kernel of
:mod:`.source` over every chunk, tile after tile, then the targets whose 16-bit maximum
reached the saturation limit rescored exactly in 32-bit arithmetic by the caller's ``rescore``
(the application passes pyopal's scores: :func:`hmmgpu.sw.cpu.rescorer`; the GPU layer does
not import the application above it).

Many queries in flight
----------------------
:meth:`GpuScanner.batches` takes the queries in batches (:func:`.batches.plan`). For a batch,
the host builds every query profile into one page-locked buffer (:mod:`.profiles`, in
place); on each of a few streams
(:data:`STREAMS`, each with its own work counters and tile boundary columns) it uploads its
share of the profiles in one copy, queues the launches of its queries (each query's scores
into its own row of the batch's score matrix on the device) and the copy of its rows back
into page-locked memory, all asynchronous. Only then does it wait, for the batch *before*
(two sets of buffers take turns), so the GPU always has the next batch queued while the host
takes the scores of the last one: no host round trip per query. Queries on different
streams overlap on the GPU: the next query's blocks start on the SMs that the last one's
longest targets leave idle at the end of its launch. The streams take a batch's groups in
turn from batch to batch, so that consecutive batches of one (long) query overlap too. CUDA
events on every stream give the GPU's busy intervals. A database too large to stay resident
is scanned chunk by chunk for each batch (one wait per chunk).

:func:`all_specs` lists the kernels ``hmmgpu warmup`` compiles; :meth:`GpuScanner.compile_ahead`
compiles those a call needs (in parallel processes) before the first launch.
"""
from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from hmmgpu.gpu.runtime import build, tuning
from hmmgpu.gpu.runtime.device import GpuDevice
from hmmgpu.gpu.runtime.kargs import arguments
from hmmgpu.gpu.resident import ResidentDatabase
from hmmgpu.gpu.sw import batches as batching
from hmmgpu.gpu.sw import profiles
from hmmgpu.gpu.sw.batches import ScoreBatch
from hmmgpu.gpu.sw.source import ARGS, N_COUNTERS, SwSpec, row_words


#: Streams a batch's queries are spread over (each query's launches stay on one stream).
STREAMS = 2


def all_specs(device=None) -> list:
    """Every Smith-Waterman kernel of the shape table (the same on every device)."""
    return [SwSpec(G, Q) for G, Q in tuning.SW_SHAPES]


def specs_for(lengths, shape: tuple | None = None) -> list:
    """Every kernel a scan of queries of these lengths runs on a GPU: the residue packing kernel
    of the database's upload and each query's Smith-Waterman shape (once each)."""
    from hmmgpu.gpu.pack import PackSpec

    sw = [SwSpec(*shape) if shape else spec_for(int(n)) for n in lengths]
    return [PackSpec(), *dict.fromkeys(sw)]


def compile_for(lengths, device, shape: tuple | None = None, notice=None) -> int:
    """Compile, in parallel processes, the kernels of :func:`specs_for` missing from the cache
    for ``device`` (a :class:`~hmmgpu.gpu.runtime.device.GpuDevice`); return how many (0 when
    ``hmmgpu warmup`` or an earlier run compiled them, and under the simulator). A search calls
    this before its first launch: a kernel found missing at its launch would be compiled there,
    one after the other."""
    return build.compile_ahead(specs_for(lengths, shape), device, notice=notice)


@functools.lru_cache(maxsize=None)
def spec_for(query_length: int) -> SwSpec:
    """The kernel specialisation a query of this length uses (each length's worked out once)."""
    return SwSpec(*tuning.sw_shape(query_length))


def stream_groups(work, streams: int) -> list:
    """Contiguous (lo, hi) ranges of the rows, one per stream, of about equal total ``work``."""
    work = np.asarray(work, np.float64)
    if not work.size:
        return [(0, 0)] * streams
    ends = np.cumsum(work)
    cuts = [0] + [int(np.searchsorted(ends, ends[-1] * s / streams, side="left")) + 1 for s in range(1, streams)]
    cuts = [min(max(c, 0), work.size) for c in cuts] + [work.size]
    for i in range(1, len(cuts)):
        cuts[i] = max(cuts[i], cuts[i - 1])
    return list(zip(cuts[:-1], cuts[1:]))


@dataclass
class _Slot:
    """One set of a batch's buffers (two take turns): profiles staged in page-locked memory and
    on the device, the score matrix on the device and in page-locked memory, events."""

    hprof: object = None
    dprof: object = None
    dscores: object = None
    hscores: object = None
    events: list = field(default_factory=list)  #: (start, stop, done) per stream


@dataclass
class _Unit:
    """A batch (or one chunk of it) queued on the streams, not yet waited for."""

    slot: _Slot
    chunk: object
    rows: int
    groups: list  #: (stream, first row, end row)
    plans: list
    start: int
    profile_seconds: float


class GpuScanner:
    """Every target's Smith-Waterman score on one GPU (or numba's simulator), database resident.

    A batch of queries costs its launches, one profile upload and one copy of the scores back
    per stream; the work counters, the score matrices, the query profiles and the tiles'
    boundary columns live on the device with the scanner (the kernel leaves its counters at
    zero and its first tile writes every score). One call runs at a time (a lock)."""

    def __init__(self, db, matrix, gap_open: int, gap_extend: int, device: int = 0, max_bytes: int | None = None,
                 shape: tuple | None = None, limit: int | None = None, rescore=None, streams: int = STREAMS):
        """``rescore(query_codes, indices)``: exact scores of the targets ``indices`` whose 16-bit
        score may have saturated (None: such a target is an error). ``shape`` forces one (G, Q)
        for every query and ``limit`` a lower saturation limit (both for tests: tiling and the
        rescoring path on small inputs); ``streams``: streams a batch is spread over."""
        self.rescore = rescore
        self.device = GpuDevice.open(device)
        rt = self.device.runtime
        self.db = db
        self.matrix = matrix
        self.gap_open, self.gap_extend = int(gap_open), int(gap_extend)
        self.go, self.ge = self.gap_open + self.gap_extend, self.gap_extend
        if not matrix.by_code.T.tolist() == matrix.by_code.tolist():
            raise ValueError("the GPU profile assumes a symmetric matrix")
        #: a 16-bit maximum at or above this may have saturated: rescored exactly
        self.limit = 32767 - int(matrix.max_score) if limit is None else min(int(limit), 32767 - int(matrix.max_score))
        self.shape = shape
        with self.device.activate():
            self.resident = ResidentDatabase(db, self.device, max_bytes=max_bytes)
            self.streams = [rt.stream() for _ in range(max(1, int(streams)))]
            # the kernel leaves its counters at zero; one pair per stream (concurrent launches)
            self.counters = [rt.to_device(np.zeros(N_COUNTERS, np.int32)) for _ in self.streams]
            self.origin = rt.event()
            self._slots = [_Slot(events=[(rt.event(), rt.event(), rt.event()) for _ in self.streams])
                           for _ in range(2)]
            # tiles' boundary columns, per stream (grown for tiled queries)
            self.boundary = [[rt.device_array(2, np.uint32) for _ in range(2)] for _ in self.streams]
        self._grids = {}
        self._kernels = {}
        self._lock = threading.Lock()
        self._origin_recorded = False
        self._turn = 0
        self.last: dict = {}

    @property
    def description(self) -> str:
        return self.device.description

    @property
    def positions(self) -> np.ndarray:
        """Database index of each column of a :class:`~.batches.ScoreBatch` (longest target first)."""
        return self.resident.indices

    def spec(self, query_length: int) -> SwSpec:
        """The kernel a query of this length runs."""
        return SwSpec(*self.shape) if self.shape else spec_for(int(query_length))

    def compile_ahead(self, queries, notice=None) -> int:
        """:func:`compile_for` the lengths of ``queries`` (codes or lengths) on this device."""
        lengths = [int(q) if np.isscalar(q) else int(np.asarray(q).size) for q in queries]
        return compile_for(lengths, self.device, self.shape, notice=notice)

    def _kernel(self, spec):
        kernel = self._kernels.get(spec)
        if kernel is None:
            kernel = self._kernels[spec] = build.load(spec, self.device)
            self._grids[spec] = tuning.persistent_grid(kernel, self.device, spec.table_words * 4, False)
        return kernel

    def _launch(self, spec, chunk, scores, stream, counters, **args) -> None:
        kernel = self._kernel(spec)
        grid, block = self._grids[spec]
        kernel[grid, block, stream](*arguments(
            ARGS, residues=chunk.residues, word_offsets=chunk.word_offsets, lengths=chunk.lengths, n_targets=chunk.n,
            go=self.go, ge=self.ge, counters=counters, scores=scores, **args))

    def _boundary(self, s: int, chunk) -> list:
        """Stream ``s``'s two boundary-column arrays (one tile writes, the next reads), large
        enough for ``chunk``: H and F of every row of every target pair, two words per residue slot."""
        rt = self.device.runtime
        need = 8 * chunk.residues.size
        if self.boundary[s][0].size < need:
            self.boundary[s] = [rt.device_array(need, np.uint32) for _ in range(2)]
        return self.boundary[s]

    def _grow(self, slot: _Slot, rows: int, columns: int, words: int) -> None:
        """Make ``slot``'s buffers hold ``rows`` x ``columns`` scores and ``words`` profile words
        (called only when no queued work uses the slot)."""
        rt = self.device.runtime
        cells = max(rows * columns, 1)
        if slot.dscores is None or slot.dscores.size < cells:
            slot.dscores = rt.device_array(cells, np.int32)
            slot.hscores = rt.pinned_array(cells, np.int32)
        if slot.dprof is None or slot.dprof.size < max(words, 1):
            slot.dprof = rt.device_array(max(words, 1), np.uint32)
            slot.hprof = rt.pinned_array(max(words, 1), np.uint32)

    def _prepare(self, queries, start: int, slot: _Slot, columns: int) -> _Unit:
        """Build the batch's profiles into ``slot``'s page-locked buffer (host work only,
        :func:`.profiles.build`)."""
        t = time.perf_counter()
        specs = [self.spec(int(q.size)) for q in queries]
        tiles, words = profiles.layout([q.size for q in queries], specs)
        self._grow(slot, len(specs), columns, int(words[-1]))
        profiles.build(queries, self.matrix.by_code, specs, tiles, words, slot.hprof)
        plans = [(spec, int(k), (int(a), int(b))) for spec, k, a, b in zip(specs, tiles, words[:-1], words[1:])]
        # the streams take the groups in turn from batch to batch, so that a batch of one query
        # runs beside the end of the batch before it
        S = len(self.streams)
        groups = [((g + self._turn) % S, r0, r1)
                  for g, (r0, r1) in enumerate(stream_groups([spec.C * tiles for spec, tiles, _ in plans], S))]
        self._turn += 1
        return _Unit(slot=slot, chunk=None, rows=len(plans), groups=groups, plans=plans, start=start,
                     profile_seconds=time.perf_counter() - t)

    def _enqueue(self, unit: _Unit, chunk) -> _Unit:
        """Queue the batch's uploads, launches and copies back on the streams (returns at once)."""
        unit.chunk = chunk
        slot, n = unit.slot, chunk.n
        if not self._origin_recorded:
            self.origin.record(self.streams[0])
            self._origin_recorded = True
        for s, r0, r1 in unit.groups:
            if r0 == r1:
                continue
            stream, counters = self.streams[s], self.counters[s]
            start, stop, done = slot.events[s]
            start.record(stream)
            p0, p1 = unit.plans[r0][2][0], unit.plans[r1 - 1][2][1]
            slot.dprof[p0:p1].copy_to_device(slot.hprof[p0:p1], stream=stream)
            for r in range(r0, r1):
                spec, tiles, (a, b) = unit.plans[r]
                scores = slot.dscores[r * n:(r + 1) * n]
                bnd = self._boundary(s, chunk) if tiles > 1 else self.boundary[s]
                for k in range(tiles):
                    self._launch(spec, chunk, scores, stream, counters, profile=slot.dprof[a:b], tile=k,
                                 prof_stride=tiles * row_words(spec.G, spec.Q), first=int(k == 0),
                                 last=int(k == tiles - 1), bnd_in=bnd[k % 2], bnd_out=bnd[(k + 1) % 2])
            stop.record(stream)
            slot.dscores[r0 * n:r1 * n].copy_to_host(slot.hscores[r0 * n:r1 * n], stream=stream)
            done.record(stream)
        return unit

    def _collect(self, unit: _Unit) -> tuple:
        """Wait for a queued unit: (scores rows x chunk columns, a view of the slot's page-locked
        buffer, valid until the slot's next batch is queued; GPU busy intervals in ms from the
        scanner's origin)."""
        rt = self.device.runtime
        intervals = []
        for s, r0, r1 in unit.groups:
            if r0 == r1:
                continue
            start, stop, done = unit.slot.events[s]
            done.synchronize()
            intervals.append((rt.elapsed_ms(self.origin, start), rt.elapsed_ms(self.origin, stop)))
        n = unit.chunk.n
        return unit.slot.hscores[:unit.rows * n].reshape(unit.rows, n), intervals

    def _finish(self, unit: _Unit, queries, scores, intervals) -> ScoreBatch:
        """The batch's :class:`~.batches.ScoreBatch`, saturated targets rescored exactly."""
        t = time.perf_counter()
        rescored = 0
        rows = cols = np.zeros(0, np.int64)
        if scores.size and int(scores.max()) >= self.limit:  # one read, then where only if needed
            rows, cols = np.nonzero(scores >= self.limit)
        if rows.size:
            if self.rescore is None:
                raise RuntimeError(f"{rows.size} targets reached the 16-bit limit and no rescore function was given")
            for r in np.unique(rows).tolist():
                c = cols[rows == r]
                scores[r, c] = self.rescore(np.asarray(queries[r], np.uint8), self.positions[c])
            rescored = int(rows.size)
        return ScoreBatch(start=unit.start, scores=scores, positions=self.positions,
                          specs=[spec.name for spec, _, _ in unit.plans], gpu_ms=_union_ms(intervals),
                          gpu_intervals=intervals, profile_seconds=unit.profile_seconds, rescored=rescored,
                          rescore_seconds=time.perf_counter() - t if rows.size else 0.0)

    def batches(self, queries, plan=None):
        """Yield a :class:`~.batches.ScoreBatch` per batch of ``queries`` (Easel codes), in order:
        every target's exact score, one row per query (see the module text). ``plan``: the
        (lo, hi) query ranges (default :func:`.batches.plan`). A batch's scores are a view of the
        scanner's page-locked buffer (no copy), valid until the next batch is asked for: copy
        what is kept longer."""
        queries = [np.asarray(q) for q in queries]
        res = self.resident
        if plan is None:
            plan = batching.plan([q.size for q in queries], int(self.db.total_residues), res.largest_chunk,
                                 cells=batching.BATCH_CELLS if res.resident else float("inf"))
        with self._lock, self.device.activate():
            try:
                if res.n == 0:
                    for lo, hi in plan:
                        yield ScoreBatch(start=lo, scores=np.zeros((hi - lo, 0), np.int32), positions=self.positions,
                                         specs=[self.spec(q.size).name for q in queries[lo:hi]])
                elif res.resident:
                    yield from self._resident_batches(queries, plan, next(iter(res.chunks())))
                else:
                    yield from self._chunked_batches(queries, plan)
            finally:  # a caller that stops early leaves no work queued on the buffers
                for stream in self.streams:
                    stream.synchronize()

    def _resident_batches(self, queries, plan, chunk):
        """Batch after batch, each queued before the one before it is waited for (the two slots
        take turns)."""
        queued = None
        for i, (lo, hi) in enumerate(plan):
            unit = self._enqueue(self._prepare(queries[lo:hi], lo, self._slots[i % 2], chunk.n), chunk)
            if queued is not None:
                yield self._finish(queued, queries[queued.start:queued.start + queued.rows], *self._collect(queued))
            queued = unit
        if queued is not None:
            yield self._finish(queued, queries[queued.start:queued.start + queued.rows], *self._collect(queued))

    def _chunked_batches(self, queries, plan):
        """Each batch over every chunk in turn, each chunk waited for (its upload replaces the last)."""
        res = self.resident
        for lo, hi in plan:
            scores = np.zeros((hi - lo, res.n), np.int32)
            intervals, unit = [], None
            for chunk in res.chunks():
                unit = self._enqueue(self._prepare(queries[lo:hi], lo, self._slots[0], chunk.n), chunk)
                part, iv = self._collect(unit)
                scores[:, chunk.lo:chunk.hi] = part
                intervals += iv
            yield self._finish(unit, queries[lo:hi], scores, intervals)

    def scores_many(self, queries) -> list:
        """Every target's exact score (int32 by database index) for each query (Easel codes)."""
        out, kernel_ms, saturated, specs = [], 0.0, 0, []
        for batch in self.batches(queries):
            out += batching.by_index(batch, self.db.n)
            kernel_ms += batch.gpu_ms
            saturated += batch.rescored
            specs += batch.specs
        self.last = dict(kernel_ms=kernel_ms, saturated=saturated, specs=specs)
        return out

    def close(self) -> None:
        """Free the device copy of the database and the scanner's buffers."""
        self.resident.close()
        self._slots = self.counters = self.boundary = None


def _union_ms(intervals) -> float:
    """Length of the union of (start, stop) intervals."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total
