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


MIN_Q = 9
MIN_G = 4


def choose_shape(M: int, mode: str, group=None, sim=False, min_q=None):
    """(G, Q) for a model of M nodes: the widest group (32 threads down to 4) with >= min_q words
    per thread (more words per thread amortise the per-row shuffle and residue decoding; narrower
    groups put more targets in a warp, which costs shared-memory bank conflicts). Measured on an
    H200 (benchmarks/NOTES.md)."""
    P = 2 if mode == "16x2" else 4
    min_q = MIN_Q if min_q is None else min_q
    if group:
        G = int(group)
    else:
        G = 32
        while G > MIN_G and -(-M // (G * P)) < min_q:
            G //= 2
    Q = _quantize_q(max(1, -(-M // (G * P))))
    return G, Q


def stripe_words(per_node: np.ndarray, G: int, Q: int, P: int, pad: int, stride=None) -> np.ndarray:
    """Pack per-node lane values (NX, M) into uint32 words [x][q][g] (spec 2.7 layout, G*P lanes);
    rows ``stride`` words apart (default G*Q)."""
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
    w = w.astype(np.uint32).reshape(R, Q * G)
    if stride and stride > Q * G:
        w = np.concatenate([w, np.zeros((R, stride - Q * G), np.uint32)], axis=1)
    return np.ascontiguousarray(w.reshape(-1))


def model_table(prof, kind: str, mode: str, G: int, Q: int) -> np.ndarray:
    cost = np.asarray(prof.cost, dtype=np.int64)
    bias = int(prof.bias_b)
    rs = codegen.row_stride(G, Q)
    if mode == "8x4":
        return stripe_words(cost, G, Q, 4, 255, rs)
    if kind == "ssv":
        ssv = np.asarray(prof.ssv_cost, dtype=np.int64)
        return stripe_words(-ssv, G, Q, 2, -127, rs)
    return stripe_words(bias - cost, G, Q, 2, bias - 255, rs)


class GpuMsvFilter:
    """The database resident on the GPU, and the SSV/MSV stage run against it for one model at a time."""

    def __init__(self, db, lanes="auto", max_device_bytes=None, group=None, block=None, blocks_per_sm=None,
                 shared=None, min_q=None):
        from numba import cuda

        self.sim = _lanes.SIM
        if self.sim:
            self.cc = (9, 0)
            self.sm_count = 1
            self.smem_optin = self.smem_sm = 1 << 20
        else:
            dev = cuda.get_current_device()
            self.cc = tuple(dev.compute_capability)
            self.sm_count = int(dev.MULTIPROCESSOR_COUNT)
            self.smem_optin = int(dev.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
            self.smem_sm = int(dev.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)
        self.dpx = (not self.sim) and self.cc >= (9, 0)
        if lanes == "auto":
            lanes = "16x2" if (self.sim or self.cc >= (9, 0)) else "8x4"
        if lanes not in ("16x2", "8x4"):
            raise ValueError(f"lanes must be '16x2', '8x4' or 'auto', not {lanes!r}")
        self.lanes = lanes
        self.group = group
        self.force_shared = shared
        self.min_q = min_q
        self.block = block
        self.blocks_per_sm = blocks_per_sm
        self.ddb = DeviceDB(db, max_device_bytes=max_device_bytes)
        self.db = db
        self.last = {}
        self._shape = {}
        self._bufs = {}
        self._closed = False

    # ------------------------------------------------------------ kernels
    def specs(self, M: int):
        G, Q = choose_shape(M, self.lanes, self.group, self.sim, self.min_q)
        tab_bytes = NX * codegen.row_stride(G, Q) * 4
        if self.force_shared:
            shared = self.force_shared
        elif tab_bytes <= 40 * 1024:
            shared = "static"
        elif tab_bytes + 1024 <= self.smem_optin:
            shared = "dyn"
        else:
            shared = "global"
        mk = lambda kind: Spec(kind, self.lanes, G, Q, shared, self.dpx)  # noqa: E731
        return mk("ssv"), mk("msvw"), mk("msvs")

    def _launch_shape(self, kernel, spec, G, Q):
        """(grid, block, dynamic shared bytes): a persistent grid filling the SMs."""
        tab = NX * codegen.row_stride(G, Q) * 4
        dyn = tab if spec.shared == "dyn" else 0
        if self.sim:
            return 1, 32, dyn
        key = ("shape", spec)
        if key in self._shape:
            return self._shape[key]
        regs = 64
        maxthreads = 1024
        try:
            fn = kernel.overloads[next(iter(kernel.overloads))]._codelibrary.get_cufunc()
            regs = max(16, int(fn.attrs.regs))
            maxthreads = int(fn.attrs.maxthreads)
            if dyn:
                from numba.cuda.cudadrv.driver import binding, driver

                attr = binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
                driver.cuKernelSetAttribute(attr, dyn, fn.handle, fn.device.id)
        except Exception:  # noqa: BLE001
            if dyn:
                raise
        warps_regs = max(1, 65536 // (((regs + 7) // 8 * 8) * 32))
        warps = min(48, warps_regs)
        smem = tab if spec.shared in ("static", "dyn") else 0
        bps = max(1, min(32, (self.smem_sm - 1024) // (smem + 1024))) if smem else 8
        bps = min(bps, warps)
        wpb = max(1, min(32, warps // bps))
        if self.block:
            blk = self.block
        else:
            blk = wpb * 32
        if self.blocks_per_sm:
            bps = self.blocks_per_sm
        blk = max(32, min(blk, maxthreads // 32 * 32))
        out = (self.sm_count * bps, blk, dyn)
        self._shape[key] = out
        return out

    def _buffer(self, name, host):
        """Copy ``host`` into a persistent device buffer (re-allocated only when it must grow)."""
        from numba import cuda

        buf = self._bufs.get(name)
        if buf is None or buf.size < host.size or buf.dtype != host.dtype:
            buf = cuda.device_array(max(host.size, 1), dtype=host.dtype)
            self._bufs[name] = buf
        view = buf[: host.size] if buf.size != host.size else buf
        view.copy_to_device(host)
        return view

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
        k_ssv, k_msvw = codegen.load(s_ssv), codegen.load(s_msvw)
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
        tab_ssv = self._buffer("tab_ssv", model_table(prof, "ssv", self.lanes, G, Q))
        tab_msv = tab_ssv if self.lanes == "8x4" else self._buffer("tab_msv", model_table(prof, "msv", self.lanes, G, Q))
        thr_d = self._buffer("thr", thr_h)
        sc_d = self._buffer("sc", sc_h)
        tjb_d = self.ddb.tjb_d

        grid, blk, dyn = self._launch_shape(k_ssv, s_ssv, G, Q)
        grid_m, blk_m, _ = self._launch_shape(k_msvw, s_msvw, G, Q)
        timed = not self.sim
        ev = [cuda.event() for _ in range(6)] if timed else None
        k_ms = dict(ssv=0.0, msv=0.0, fallback=0.0)
        pos_all, st_all, xj_all = [], [], []
        n_msv = n_fb = 0
        ctr_h = np.zeros(_NCTR, dtype=np.int32)
        for ch in self.ddb.chunks():
            n = ch.n
            ctr_h[:] = 0
            ctr = self._buffer("ctr", ctr_h)
            if not force_msv:
                # SSV, and the J-state MSV inline for the targets SSV cannot decide
                if timed:
                    ev[0].record()
                k_ssv[grid, blk, 0, dyn](ch.res, ch.woff, ch.lens, np.int32(n), tab_ssv, tab_msv, tjb_d, thr_d,
                                         sc_d, ctr, ch.out_pos, ch.out_st, ch.out_xj, ch.list2)
                if timed:
                    ev[1].record()
                ctr.copy_to_host(ctr_h)
                nm = 0
            else:
                nm = n
            if nm:
                if timed:
                    ev[2].record()
                k_msvw[grid_m, blk_m, 0, dyn](ch.res, ch.woff, ch.lens, np.int32(n), tab_msv, tjb_d, thr_d, sc_d,
                                              ctr, ch.list1, np.int32(-1), np.int32(1),
                                              ch.out_pos, ch.out_st, ch.out_xj, ch.list2)
                if timed:
                    ev[3].record()
                ctr.copy_to_host(ctr_h)
            if ctr_h[5] > 0:
                k_msvs = codegen.load(s_msvs)
                self._launch_shape(k_msvs, s_msvs, G, Q)
                if timed:
                    ev[4].record()
                k_msvs[grid_m, blk_m, 0, dyn](ch.res, ch.woff, ch.lens, np.int32(n), tab_msv, tjb_d, thr_d, sc_d, ctr,
                                              ch.list2, np.int32(5), np.int32(2), ch.out_pos, ch.out_st, ch.out_xj,
                                              ch.list1)
                if timed:
                    ev[5].record()
                ctr.copy_to_host(ctr_h)
                if timed:
                    k_ms["fallback"] += cuda.event_elapsed_time(ev[4], ev[5])
            if timed:
                if not force_msv:
                    k_ms["ssv"] += cuda.event_elapsed_time(ev[0], ev[1])
                if nm:
                    k_ms["msv"] += cuda.event_elapsed_time(ev[2], ev[3])
            nout = int(ctr_h[3])
            n_msv += nm if force_msv else int(ctr_h[6])
            n_fb += int(ctr_h[5])
            if nout:
                pos_all.append(ch.out_pos[:nout].copy_to_host() + ch.lo)
                st_all.append(ch.out_st[:nout].copy_to_host())
                xj_all.append(ch.out_xj[:nout].copy_to_host())
            ch.release()
        gpu_ms = sum(k_ms.values()) if timed else float("nan")
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
                         n_out=int(idx.size), grid=grid, block=blk, gpu_ms=gpu_ms, kernel_ms=k_ms, wall_s=t1 - t_compiled,
                         compile_s=t_compiled - t0)
        return idx[o], st[o], xj[o]

    def close(self):
        if not self._closed:
            self._bufs = {}
            self.ddb.close()
            self._closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
