"""Host side of the GPU SSV/MSV stage: the resident database, per-model tables, launches."""
from __future__ import annotations

import math
import time

import numpy as np

from . import codegen, lanes as _lanes
from .codegen import NX, Spec
from .device_db import DeviceDB

STATUS_OK, STATUS_RANGE, STATUS_NORESULT = 0, 16, 19
INT32_MIN = np.iinfo(np.int32).min

# counters: 0 SSV work, 1 MSV work, 2 fallback work, 3 survivors, 4 MSV list, 5 fallback list
_NCTR = 8


def _quantize_q(q: int) -> int:
    if q <= 8:
        return q
    for step, top in ((2, 16), (4, 32), (8, 1 << 30)):
        if q <= top:
            return -(-q // step) * step
    return q


def choose_shape(M: int, mode: str, group=None, sim=False):
    """(G, Q) for a model of M nodes: the widest group (<= 32 threads) with >= 4 words per thread."""
    P = 2 if mode == "16x2" else 4
    if group:
        G = int(group)
    else:
        G = 32
        while G > 4 and -(-M // (G * P)) < 4:
            G //= 2
    Q = _quantize_q(max(1, -(-M // (G * P))))
    return G, Q


def stripe_words(per_node: np.ndarray, G: int, Q: int, P: int, pad: int) -> np.ndarray:
    """Pack per-node lane values (NX, M) into uint32 words [x][q][g] (spec 2.7 layout, G*P lanes)."""
    n_lanes = G * P
    R, M = per_node.shape
    full = np.full((R, n_lanes * Q), pad, dtype=np.int64)
    full[:, :M] = per_node
    lanes_ = full.reshape(R, n_lanes, Q).transpose(0, 2, 1)  # [x][q][z], node k at z*Q + q
    lanes_ = lanes_.reshape(R, Q, G, P)
    bits = 32 // P
    mask = (1 << bits) - 1
    w = np.zeros((R, Q, G), dtype=np.int64)
    for h in range(P):
        w |= (lanes_[..., h] & mask) << (bits * h)
    return np.ascontiguousarray(w.astype(np.uint32).reshape(-1))


def model_table(prof, kind: str, mode: str, G: int, Q: int) -> np.ndarray:
    cost = np.asarray(prof.cost, dtype=np.int64)
    bias = int(prof.bias_b)
    if mode == "8x4":
        return stripe_words(cost, G, Q, 4, 255)
    if kind == "ssv":
        ssv = np.asarray(prof.ssv_cost, dtype=np.int64)
        return stripe_words(-ssv, G, Q, 2, -127)
    return stripe_words(bias - cost, G, Q, 2, bias - 255)


class GpuMsvFilter:
    """The database resident on the GPU, and the SSV/MSV stage run against it for one model at a time."""

    def __init__(self, db, lanes="auto", max_device_bytes=None, group=None, block=None, blocks_per_sm=None):
        from numba import cuda

        self.sim = _lanes.SIM
        if self.sim:
            self.cc = (9, 0)
            self.sm_count = 1
        else:
            dev = cuda.get_current_device()
            self.cc = tuple(dev.compute_capability)
            self.sm_count = int(dev.MULTIPROCESSOR_COUNT)
        self.dpx = (not self.sim) and self.cc >= (9, 0)
        if lanes == "auto":
            lanes = "16x2" if (self.sim or self.cc >= (9, 0)) else "8x4"
        if lanes not in ("16x2", "8x4"):
            raise ValueError(f"lanes must be '16x2', '8x4' or 'auto', not {lanes!r}")
        self.lanes = lanes
        self.group = group
        self.block = block or (32 if self.sim else 128)
        self.blocks_per_sm = blocks_per_sm or (2 if self.sim else 16)
        self.ddb = DeviceDB(db, max_device_bytes=max_device_bytes)
        self.db = db
        self.last = {}
        self._closed = False

    # ------------------------------------------------------------ kernels
    def specs(self, M: int):
        G, Q = choose_shape(M, self.lanes, self.group, self.sim)
        tab_bytes = NX * G * Q * 4
        shared = tab_bytes <= 40 * 1024
        mk = lambda kind: Spec(kind, self.lanes, G, Q, shared, self.dpx)  # noqa: E731
        return mk("ssv"), mk("msvw"), mk("msvs")

    def kernels(self, M: int):
        return [codegen.load(s) for s in self.specs(M)]

    # ------------------------------------------------------------ run
    def run(self, prof, thr=None, force_msv=False):
        """Survivors of the SSV/MSV stage: (indices int64, status int8, xj int32), by index."""
        from numba import cuda

        if self._closed:
            raise RuntimeError("GpuMsvFilter is closed")
        t0 = time.perf_counter()
        M = int(prof.M)
        s_ssv, s_msvw, s_msvs = self.specs(M)
        k_ssv, k_msvw, k_msvs = (codegen.load(s) for s in (s_ssv, s_msvw, s_msvs))
        G, Q = s_ssv.G, s_ssv.Q
        t_compiled = time.perf_counter()

        maxL = self.ddb.max_len
        if thr is None:
            thr_h = np.full(maxL + 1, INT32_MIN, dtype=np.int32)
        else:
            thr_h = np.ascontiguousarray(np.asarray(thr, dtype=np.int32)[: maxL + 1])
            if thr_h.size < maxL + 1:
                raise ValueError("thr must be indexed by L = 0..db.max_length")
        sc_h = np.array([prof.bias_b, prof.tbm_b, prof.tec_b, prof.base_b], dtype=np.int32)
        tab_ssv = cuda.to_device(model_table(prof, "ssv", self.lanes, G, Q))
        tab_msv = tab_ssv if self.lanes == "8x4" else cuda.to_device(model_table(prof, "msv", self.lanes, G, Q))
        thr_d = cuda.to_device(thr_h)
        sc_d = cuda.to_device(sc_h)
        tjb_d = self.ddb.tjb_d

        grid = max(1, self.sm_count * self.blocks_per_sm)
        blk = self.block
        timed = not self.sim
        if timed:
            ev0, ev1 = cuda.event(), cuda.event()
            ev0.record()
        pos_all, st_all, xj_all = [], [], []
        n_msv = n_fb = 0
        for ch in self.ddb.chunks():
            n = ch.n
            ctr_h = np.zeros(_NCTR, dtype=np.int32)
            ctr = cuda.to_device(ctr_h)
            if force_msv:
                k_msvw[grid, blk](ch.res, ch.woff, ch.lens, np.int32(n), tab_msv, tjb_d, thr_d, sc_d, ctr,
                                  ch.list1, np.int32(-1), np.int32(1), ch.out_pos, ch.out_st, ch.out_xj, ch.list2)
            else:
                k_ssv[grid, blk](ch.res, ch.woff, ch.lens, np.int32(n), tab_ssv, tjb_d, thr_d, sc_d, ctr,
                                 ch.out_pos, ch.out_st, ch.out_xj, ch.list1)
                k_msvw[grid, blk](ch.res, ch.woff, ch.lens, np.int32(n), tab_msv, tjb_d, thr_d, sc_d, ctr,
                                  ch.list1, np.int32(4), np.int32(1), ch.out_pos, ch.out_st, ch.out_xj, ch.list2)
            k_msvs[grid, blk](ch.res, ch.woff, ch.lens, np.int32(n), tab_msv, tjb_d, thr_d, sc_d, ctr,
                              ch.list2, np.int32(5), np.int32(2), ch.out_pos, ch.out_st, ch.out_xj, ch.list1)
            ctr.copy_to_host(ctr_h)
            nout = int(ctr_h[3])
            n_msv += n if force_msv else int(ctr_h[4])
            n_fb += int(ctr_h[5])
            if nout:
                pos_all.append(ch.out_pos[:nout].copy_to_host() + ch.lo)
                st_all.append(ch.out_st[:nout].copy_to_host())
                xj_all.append(ch.out_xj[:nout].copy_to_host())
            ch.release()
        if timed:
            ev1.record()
            ev1.synchronize()
            gpu_ms = cuda.event_elapsed_time(ev0, ev1)
        else:
            gpu_ms = float("nan")
        if pos_all:
            pos = np.concatenate(pos_all).astype(np.int64)
            st = np.concatenate(st_all).astype(np.int8)
            xj = np.concatenate(xj_all).astype(np.int32)
        else:
            pos = np.zeros(0, np.int64)
            st = np.zeros(0, np.int8)
            xj = np.zeros(0, np.int32)
        idx = self.ddb.pos2idx[pos]
        o = np.argsort(idx, kind="stable")
        t1 = time.perf_counter()
        self.last = dict(M=M, G=G, Q=Q, lanes=self.lanes, shared=s_ssv.shared, n_msv=n_msv, n_fallback=n_fb,
                         n_out=int(idx.size), gpu_ms=gpu_ms, wall_s=t1 - t_compiled,
                         compile_s=t_compiled - t0)
        return idx[o], st[o], xj[o]

    def close(self):
        if not self._closed:
            self.ddb.close()
            self._closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
