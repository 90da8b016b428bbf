"""Host side of the SSV/MSV kernels: model tables, shapes, launches, and the stage on its own.

:class:`MsvKernels` chooses and loads the kernels for a model and launches them on a chunk
of the resident database; the cascade (:mod:`hmmgpu.gpu.cascade`) chains them with the
bias and Viterbi filter kernels. :class:`MsvStage` runs only this stage and returns every
passing target with its status and integer score (the audit, the tests and the kernel
benchmark use it).
"""
from __future__ import annotations

import numpy as np

from hmmgpu.errors import HmmgpuError
from hmmgpu.gpu.runtime import build, tuning
from hmmgpu.gpu.runtime.kargs import arguments
from hmmgpu.gpu.msv.source import ARGS, N_COUNTERS, NX, Counter, MsvSpec, row_stride


def stripe_words(per_node: np.ndarray, G: int, Q: int, P: int, pad: int, stride: int | None = None) -> np.ndarray:
    """Pack per-node lane values (R, M) into uint32 words ``[r][q][g]`` (HMMER's striping over
    ``G*P`` lanes: node k in word ``(k-1) % Q`` of lane ``(k-1) // Q``), rows ``stride`` words apart."""
    n_lanes = G * P
    R, M = per_node.shape
    full = np.full((R, n_lanes * Q), pad, dtype=np.int64)
    full[:, :M] = per_node
    lanes = full.reshape(R, n_lanes, Q).transpose(0, 2, 1).reshape(R, Q, G, P)
    bits = 32 // P
    mask = (1 << bits) - 1
    w = np.zeros((R, Q, G), dtype=np.int64)
    for h in range(P):
        w |= (lanes[..., h] & mask) << (bits * h)
    w = w.astype(np.uint32).reshape(R, Q * G)
    if stride and stride > Q * G:
        w = np.concatenate([w, np.zeros((R, stride - Q * G), np.uint32)], axis=1)
    return np.ascontiguousarray(w.reshape(-1))


def model_tables(byte_profile, spec: MsvSpec) -> tuple:
    """(SSV table, J-state MSV table) of a model for ``spec``'s layout (uint32 words).

    16-bit lanes: ``-ssv_cost`` (padding -127) and ``bias - cost`` (padding ``bias - 255``),
    so that one add-max computes a cell. 8-bit lanes: the cost table serves both.
    """
    cost = np.asarray(byte_profile.cost, dtype=np.int64)
    stride = row_stride(spec.G, spec.Q)
    if spec.lanes == "8x4":
        table = stripe_words(cost, spec.G, spec.Q, 4, 255, stride)
        return table, table
    bias = int(byte_profile.bias_b)
    ssv = stripe_words(-np.asarray(byte_profile.ssv_cost, dtype=np.int64), spec.G, spec.Q, 2, -127, stride)
    msv = stripe_words(bias - cost, spec.G, spec.Q, 2, bias - 255, stride)
    return ssv, msv


def scalars(byte_profile) -> np.ndarray:
    """The ``scalars`` kernel argument (see ``source.SCALARS``)."""
    return np.array([byte_profile.bias_b, byte_profile.tbm_b, byte_profile.tec_b, byte_profile.base_b], np.int32)


class MsvKernels:
    """The MSV kernels of one device and lane mode: shapes, loading, grid sizes, launches."""

    def __init__(self, device, lanes: str = "auto", placement: str | None = None):
        if lanes == "auto":
            lanes = "16x2" if (device.simulator or device.cc >= (9, 0)) else "8x4"
        if lanes not in ("16x2", "8x4"):
            raise HmmgpuError(f"--lanes must be auto, 16x2 or 8x4, not {lanes!r}")
        self.device = device
        self.lanes = lanes
        self.placement = placement  #: force a table placement (tests); None: by size
        self._grids = {}

    def spec(self, M: int, kind: str = "ssv") -> MsvSpec | None:
        """The specialisation for a model of ``M`` nodes (None: too long for the GPU shapes)."""
        shape = tuning.msv_shape(M, self.lanes)
        if shape is None:
            return None
        G, Q = shape
        placement = self.placement or tuning.table_placement(NX * row_stride(G, Q) * 4, self.device)
        return MsvSpec(kind, self.lanes, G, Q, placement)

    def all_specs(self, kind: str = "ssv") -> list:
        """Every specialisation of the shape table (what ``hmmgpu warmup`` compiles)."""
        rows = tuning.MSV_16X2 if self.lanes == "16x2" else tuning.MSV_8X4
        P = 2 if self.lanes == "16x2" else 4
        return [self.spec(G * P * Q, kind) for G, Q in rows]

    def launch(self, spec: MsvSpec, chunk, stream, *, ssv_table, msv_table, tjb_by_length, threshold_by_length,
               scalars, counters, out_pos, out_status, out_xj, fallback_pos) -> None:
        """Launch ``spec``'s kernel on every position of ``chunk`` (asynchronously on ``stream``)."""
        kernel = build.load(spec, self.device)
        table_bytes = spec.table_words * 4 if spec.placement != "global" else 0
        dynamic = spec.placement == "dynamic"
        if spec not in self._grids:
            self._grids[spec] = tuning.persistent_grid(kernel, self.device, table_bytes, dynamic)
        grid, block = self._grids[spec]
        shared = table_bytes if dynamic else 0
        args = arguments(ARGS, residues=chunk.residues, word_offsets=chunk.word_offsets, lengths=chunk.lengths,
                         n_targets=chunk.n, ssv_table=ssv_table, msv_table=msv_table, tjb_by_length=tjb_by_length,
                         threshold_by_length=threshold_by_length, scalars=scalars, counters=counters,
                         out_pos=out_pos, out_status=out_status, out_xj=out_xj, fallback_pos=fallback_pos)
        kernel[grid, block, stream, shared](*args)


class MsvStage:
    """The SSV/MSV stage alone over a resident database: every passing target, by database index."""

    def __init__(self, resident, lanes: str = "auto", placement: str | None = None):
        self.resident = resident
        self.device = resident.device
        self.kernels = MsvKernels(self.device, lanes, placement)
        self.lanes = self.kernels.lanes
        self.last: dict = {}

    def run(self, profile, thresholds=None, force_msv: bool = False) -> tuple:
        """(database indices, status int8, xJ int32) of the targets passing ``thresholds[L]``
        (all non-empty targets when None), sorted by index; ``force_msv`` runs the J-state MSV
        on every target (no SSV). Fallback targets are finished with the CPU reference."""
        from hmmgpu.cpu import filters as cpu_filters
        from hmmgpu.stages.profiles import tjb_table

        rt = self.device.runtime
        byte = profile.byte
        spec = self.kernels.spec(byte.M, "msvw" if force_msv else "ssv")
        if spec is None:
            raise HmmgpuError(f"model of {byte.M} nodes is longer than the GPU kernels' shapes")
        maxL = self.resident.max_length
        thr = np.full(maxL + 1, np.iinfo(np.int32).min, np.int32) if thresholds is None else \
            np.ascontiguousarray(np.asarray(thresholds, np.int32)[: maxL + 1])
        ssv_t, msv_t = model_tables(byte, spec)
        idx, st, xj, fallback = [], [], [], []
        with self.device.activate():
            stream = rt.stream()
            common = dict(ssv_table=rt.to_device(ssv_t), msv_table=rt.to_device(msv_t),
                          tjb_by_length=rt.to_device(tjb_table(max(maxL, 1)).astype(np.int32)),
                          threshold_by_length=rt.to_device(thr), scalars=rt.to_device(scalars(byte)))
            for chunk in self.resident.chunks():
                n = max(chunk.n, 1)
                out = dict(counters=rt.to_device(np.zeros(N_COUNTERS, np.int32)),
                           out_pos=rt.device_array(n, np.int32), out_status=rt.device_array(n, np.int8),
                           out_xj=rt.device_array(n, np.int32), fallback_pos=rt.device_array(n, np.int32))
                start, stop = rt.event(), rt.event()
                start.record(stream)
                self.kernels.launch(spec, chunk, stream, **common, **out)
                stop.record(stream)
                stop.synchronize()
                counts = out["counters"].copy_to_host()
                k, f = int(counts[Counter.OUT]), int(counts[Counter.FALLBACK])
                pos = self.resident.indices[chunk.lo:chunk.hi]
                idx.append(pos[out["out_pos"].copy_to_host()[:k]])
                st.append(out["out_status"].copy_to_host()[:k])
                xj.append(out["out_xj"].copy_to_host()[:k])
                fallback.append(pos[out["fallback_pos"].copy_to_host()[:f]])
                self.last = dict(spec=spec, noresult=int(counts[Counter.NORESULT]), fallback=f,
                                 kernel_ms=rt.elapsed_ms(start, stop))
        idx = np.concatenate(idx).astype(np.int64)
        st = np.concatenate(st).astype(np.int8)
        xj = np.concatenate(xj).astype(np.int32)
        fallback = np.concatenate(fallback).astype(np.int64)
        if fallback.size:  # the max(S, B) form cannot decide these: the CPU reference does
            fst, fxj = cpu_filters.msv_filter(profile, self.resident.db, fallback, force_msv=True)
            keep = (fst != 0) | (fxj >= thr[self.resident.db.lengths[fallback]])
            idx = np.concatenate([idx, fallback[keep]])
            st = np.concatenate([st, fst[keep]])
            xj = np.concatenate([xj, fxj[keep]])
        order = np.argsort(idx, kind="stable")
        return idx[order], st[order], xj[order]
