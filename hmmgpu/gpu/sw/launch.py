"""Host side of the Smith-Waterman scan: query profiles, tiles, launches, saturated targets.

:class:`GpuScanner` keeps a database resident on one device (one upload for any number of
queries) and returns every target's exact score for each query: the 16-bit kernel of
:mod:`.source` over every chunk, tile after tile, then the targets whose 16-bit maximum
reached the saturation limit rescored exactly in 32-bit arithmetic by the caller's ``rescore``
(the application passes pyopal's scores: :func:`hmmgpu.sw.cpu.rescorer`; the GPU layer does
not import the application above it).
:func:`all_specs` lists the kernels ``hmmgpu warmup`` compiles.
"""
from __future__ import annotations

import threading

import numpy as np

from hmmgpu.gpu.runtime import build, tuning
from hmmgpu.gpu.runtime.device import GpuDevice
from hmmgpu.gpu.runtime.kargs import arguments
from hmmgpu.gpu.resident import ResidentDatabase
from hmmgpu.gpu.sw.source import ARGS, N_COUNTERS, NROWS, PAD_ROW, PAD_SCORE, SwSpec, row_words


def all_specs(device=None) -> list:
    """Every Smith-Waterman kernel of the shape table (the same on every device)."""
    return [SwSpec(G, Q) for G, Q in tuning.SW_SHAPES]


def spec_for(query_length: int) -> SwSpec:
    """The kernel specialisation a query of this length uses."""
    return SwSpec(*tuning.sw_shape(query_length))


def query_profile(q: np.ndarray, by_code: np.ndarray, spec: SwSpec) -> tuple:
    """(profile words, tiles): row x, tile k, word w holds the 16-bit scores of query columns
    ``k*C + 2w`` (low half) and ``k*C + 2w + 1`` against residue code x; rows are
    ``tiles * row_words`` words long; padding columns and the padding row score PAD_SCORE."""
    C = spec.C
    tiles = max(1, -(-q.size // C))
    cols = np.full((NROWS, tiles * C), PAD_SCORE, np.int64)
    cols[:by_code.shape[0], :q.size] = np.asarray(by_code, np.int64)[:, q]  # S(x, q_j) == S(q_j, x)
    cols[PAD_ROW] = PAD_SCORE
    pairs = (cols[:, 0::2] & 0xFFFF) | ((cols[:, 1::2] & 0xFFFF) << 16)
    PW = row_words(spec.G, spec.Q)
    words = np.zeros((NROWS, tiles, PW), np.uint32)
    words[:, :, :C // 2] = pairs.reshape(NROWS, tiles, C // 2).astype(np.uint32)
    return np.ascontiguousarray(words.reshape(-1)), tiles


class GpuScanner:
    """Every target's Smith-Waterman score on one GPU (or numba's simulator), database resident.

    A query costs its launches and one copy of the scores back: the work counters, the
    scores, the query profiles and the tiles' boundary columns live on the device with the
    scanner (the kernel leaves its counters at zero and its first tile writes every score),
    and the scores come back through a pinned buffer. One call runs at a time (a lock)."""

    def __init__(self, db, matrix, gap_open: int, gap_extend: int, device: int = 0, max_bytes: int | None = None,
                 shape: tuple | None = None, limit: int | None = None, rescore=None):
        """``rescore(query_codes, indices)``: exact scores of the targets ``indices`` whose 16-bit
        score may have saturated (None: such a target is an error). ``shape`` forces one (G, Q)
        for every query and ``limit`` a lower saturation limit (both for tests: tiling and the
        rescoring path on small inputs)."""
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
            n = self.resident.largest_chunk
            self.stream = rt.stream()
            self.counters = rt.to_device(np.zeros(N_COUNTERS, np.int32))  # the kernel leaves them at zero
            self.scores = rt.device_array(n, np.int32)
            self.host_scores = rt.pinned_array(n, np.int32)
            self.events = rt.event(), rt.event()
            self.boundary = [rt.device_array(2, np.uint32) for _ in range(2)]  # grown for tiled queries
            self.profiles = rt.device_array(1, np.uint32)  # grown for the queries of a call
        self._grids = {}
        self._lock = threading.Lock()
        self.last: dict = {}

    @property
    def description(self) -> str:
        return self.device.description

    def _launch(self, spec, chunk, scores, **args) -> None:
        kernel = build.load(spec, self.device)
        if spec not in self._grids:
            self._grids[spec] = tuning.persistent_grid(kernel, self.device, spec.table_words * 4, False)
        grid, block = self._grids[spec]
        kernel[grid, block, self.stream](*arguments(
            ARGS, residues=chunk.residues, word_offsets=chunk.word_offsets, lengths=chunk.lengths, n_targets=chunk.n,
            go=self.go, ge=self.ge, counters=self.counters, scores=scores, **args))

    def _boundary(self, chunk) -> list:
        """The two boundary-column arrays (one tile writes, the next reads), large enough for
        ``chunk``: H and F of every row of every target pair, two words per residue slot."""
        rt = self.device.runtime
        need = 8 * chunk.residues.size
        if self.boundary[0].size < need:
            self.boundary = [rt.device_array(need, np.uint32) for _ in range(2)]
        return self.boundary

    def _profiles(self, profiles) -> list:
        """The queries' profiles on the device: one copy into the scanner's buffer, a view each."""
        rt = self.device.runtime
        if not profiles:
            return []
        ends = np.cumsum([p.size for p in profiles])
        if self.profiles.size < ends[-1]:
            self.profiles = rt.device_array(int(ends[-1]), np.uint32)
        self.profiles[:ends[-1]].copy_to_device(np.concatenate(profiles), stream=self.stream)
        return [self.profiles[e - p.size:e] for p, e in zip(profiles, ends.tolist())]

    def scores_many(self, queries) -> list:
        """Every target's exact score (int32 by database index) for each query (Easel codes)."""
        rt = self.device.runtime
        out = [np.zeros(self.db.n, np.int32) for _ in queries]
        plans = []
        for q in queries:
            spec = SwSpec(*self.shape) if self.shape else spec_for(int(q.size))
            prof, tiles = query_profile(np.asarray(q, np.int64), self.matrix.by_code, spec)
            plans.append((spec, prof, tiles))
        kernel_ms = 0.0
        start, stop = self.events
        with self._lock, self.device.activate():
            stream = self.stream
            dprofs = self._profiles([p for _, p, _ in plans])
            for chunk in self.resident.chunks():
                n = chunk.n
                scores, host = self.scores[:max(n, 1)], self.host_scores[:max(n, 1)]
                bnd = self._boundary(chunk) if any(t > 1 for _, _, t in plans) else self.boundary
                for qi, (spec, _, tiles) in enumerate(plans):
                    start.record(stream)
                    for k in range(tiles):
                        self._launch(spec, chunk, scores, profile=dprofs[qi], tile=k,
                                     prof_stride=tiles * row_words(spec.G, spec.Q), first=int(k == 0),
                                     last=int(k == tiles - 1), bnd_in=bnd[k % 2], bnd_out=bnd[(k + 1) % 2])
                    stop.record(stream)
                    scores.copy_to_host(host, stream=stream)
                    stream.synchronize()
                    kernel_ms += rt.elapsed_ms(start, stop)
                    out[qi][self.resident.indices[chunk.lo:chunk.hi]] = host[:n]
        saturated = 0
        for qi, q in enumerate(queries):
            flagged = np.flatnonzero(out[qi] >= self.limit)
            if flagged.size:
                saturated += int(flagged.size)
                if self.rescore is None:
                    raise RuntimeError(f"{flagged.size} targets reached the 16-bit limit and no rescore function was given")
                out[qi][flagged] = self.rescore(np.asarray(q, np.uint8), flagged)
        self.last = dict(kernel_ms=kernel_ms, saturated=saturated, specs=[p[0].name for p in plans])
        return out

    def close(self) -> None:
        """Free the device copy of the database and the scanner's buffers."""
        self.resident.close()
        self.scores = self.counters = self.boundary = self.profiles = None
