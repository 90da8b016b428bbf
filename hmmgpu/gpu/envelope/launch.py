"""Launching the envelope decoding + optimal accuracy kernel (:mod:`.source`) on a batch of
envelopes whose full Forward and Backward matrices the host holds.

The matrices of every envelope are packed end to end (cells and special rows, the layout of
:class:`hmmgpu.cpu.fwdback.StripedMatrix`), sent, decoded and aligned in place by groups of
four threads, and read back: the posterior over the Backward matrix, the OA matrix over the
Forward matrix, as HMMER leaves them, the null2 odds and the OA trace. The launch goes through numba's own arrays and kernel
(numba's CUDA target, or its simulator in the tests); batching it with the parsers' launches
on the driver runtime comes with the full-matrix parser kernels.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hmmgpu.constants import KP
from hmmgpu.cpu.fwdback import MatrixResult, StripedMatrix
from hmmgpu.cpu.optacc import Trace
from hmmgpu.gpu.envelope.source import ARGS, DecodeOASpec
from hmmgpu.gpu.runtime.kargs import arguments

#: Threads per envelope (one per SSE lane).
GROUP = 4


@dataclass
class DecodedEnvelope:
    """One envelope's kernel results: ``status`` (eslERANGE where decoding overflowed),
    ``oasc``, ``flags`` (the kernel's, with its matrices'), the ``posterior`` matrix (its row 0
    holding null2's normalised state weights, as HMMER leaves it), the ``oa`` matrix and the
    ``null2`` odds float32 [Kp] and the OA ``trace`` (residues 1..Ld of the envelope; ``oa``,
    ``null2`` and ``trace`` None where decoding overflowed)."""

    status: int
    oasc: np.float32
    flags: int
    posterior: MatrixResult
    oa: MatrixResult | None
    null2: np.ndarray | None
    trace: Trace | None


def decode_oa(envelopes, binding: str = "python", block: int | None = None) -> list:
    """Decode and align ``envelopes``: tuples (Forward :class:`MatrixResult`, Backward
    :class:`MatrixResult`, the model's :class:`~hmmgpu.stages.forward.ForwardTables`, its
    unihit special transitions ``xf`` float32 [4][2] at the target's length). ``binding``: numba's (``"python"`` under
    the simulator). Returns a :class:`DecodedEnvelope` per envelope."""
    from numba import cuda

    from hmmgpu.gpu.runtime import build

    n = len(envelopes)
    cells = [f.matrix.dp.size for f, _, _, _ in envelopes]
    rows = [f.matrix.xmx.size for f, _, _, _ in envelopes]
    dp_base = np.concatenate([[0], np.cumsum(cells)[:-1]]).astype(np.int64)
    x_base = np.concatenate([[0], np.cumsum(rows)[:-1]]).astype(np.int64)
    tfvs = [np.ascontiguousarray(t.tfv, np.float32).ravel() for _, _, t, _ in envelopes]
    item_tfv = np.concatenate([[0], np.cumsum([t.size for t in tfvs])[:-1]]).astype(np.int64)
    rfvs = [np.ascontiguousarray(t.rfv, np.float32).ravel() for _, _, t, _ in envelopes]
    item_rfv = np.concatenate([[0], np.cumsum([r.size for r in rfvs])[:-1]]).astype(np.int64)

    def flat(parts):
        return cuda.to_device(np.concatenate([np.ascontiguousarray(p, np.float32).ravel() for p in parts]))

    fwd_dp, bck_dp = flat([f.matrix.dp for f, *_ in envelopes]), flat([b.matrix.dp for _, b, *_ in envelopes])
    fwd_x, bck_x = flat([f.matrix.xmx for f, *_ in envelopes]), flat([b.matrix.xmx for _, b, *_ in envelopes])
    out_status, out_oasc, out_flags = (cuda.to_device(np.zeros(n, dt)) for dt in (np.int32, np.float32, np.int32))
    out_null2 = cuda.to_device(np.zeros(n * KP, np.float32))
    capacity = [2 * (f.matrix.L + t.M) + 6 for f, _, t, _ in envelopes]
    trace_base = np.concatenate([[0], np.cumsum(capacity)[:-1]]).astype(np.int64)
    traces = {name: cuda.to_device(np.zeros(sum(capacity), dt))
              for name, dt in (("out_st", np.int32), ("out_k", np.int32), ("out_i", np.int32), ("out_pp", np.float32))}
    out_n = cuda.to_device(np.zeros(n, np.int32))
    groups = max(1, n)
    block = block or GROUP
    values = dict(
        fwd_dp=fwd_dp, bck_dp=bck_dp, fwd_x=fwd_x, bck_x=bck_x, dp_base=cuda.to_device(dp_base),
        x_base=cuda.to_device(x_base), lengths=cuda.to_device(np.array([f.matrix.L for f, *_ in envelopes], np.int32)),
        item_q=cuda.to_device(np.array([f.matrix.Q for f, *_ in envelopes], np.int32)),
        tfv=cuda.to_device(np.concatenate(tfvs)), item_tfv=cuda.to_device(item_tfv),
        item_xf=cuda.to_device(np.concatenate([np.asarray(x, np.float32).ravel() for *_, x in envelopes])),
        own_scales=cuda.to_device(np.array([b.matrix.has_own_scales for _, b, *_ in envelopes], np.int32)),
        rfv=cuda.to_device(np.concatenate(rfvs)), item_rfv=cuda.to_device(item_rfv),
        n_items=n, counters=cuda.to_device(np.zeros(1, np.int32)), n_threads=GROUP * groups,
        out_status=out_status, out_oasc=out_oasc, out_flags=out_flags, out_null2=out_null2,
        trace_base=cuda.to_device(trace_base), out_n=out_n, **traces)
    kernel = build.numba_kernel(DecodeOASpec(), binding)
    kernel[(GROUP * groups + block - 1) // block, block](*arguments(ARGS, **values))
    status, oasc, flags = out_status.copy_to_host(), out_oasc.copy_to_host(), out_flags.copy_to_host()
    null2 = out_null2.copy_to_host().reshape(n, KP)
    lengths = out_n.copy_to_host()
    st, tk, ti, tpp = (traces[name].copy_to_host() for name in ("out_st", "out_k", "out_i", "out_pp"))
    host = {name: values[name].copy_to_host() for name in ("fwd_dp", "bck_dp", "fwd_x", "bck_x")}
    out = []
    for k, (f, b, _, _) in enumerate(envelopes):
        dp = slice(dp_base[k], dp_base[k] + cells[k])
        x = slice(x_base[k], x_base[k] + rows[k])
        carried = f.flags | b.flags | int(flags[k])
        posterior = StripedMatrix(dp=host["bck_dp"][dp].reshape(f.matrix.dp.shape),
                                  xmx=host["bck_x"][x].reshape(f.matrix.xmx.shape), totscale=b.matrix.totscale,
                                  has_own_scales=b.matrix.has_own_scales)
        oa = odds = trace = None
        if status[k] == 0:
            odds = null2[k].copy()
            z = slice(trace_base[k], trace_base[k] + lengths[k])
            trace = Trace(st=st[z].astype(np.uint8), k=tk[z].copy(), i=ti[z].copy(), pp=tpp[z].copy())
            oa = MatrixResult(flags=carried, score=np.float32(np.nan), matrix=StripedMatrix(
                dp=host["fwd_dp"][dp].reshape(f.matrix.dp.shape), xmx=host["fwd_x"][x].reshape(f.matrix.xmx.shape),
                totscale=np.float32(0.0), has_own_scales=False))
        out.append(DecodedEnvelope(status=int(status[k]), oasc=np.float32(oasc[k]), flags=carried,
                                   posterior=MatrixResult(flags=carried, score=np.float32(np.nan), matrix=posterior),
                                   oa=oa, null2=odds, trace=trace))
    return out
