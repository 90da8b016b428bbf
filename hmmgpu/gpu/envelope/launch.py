"""Launching the envelope decoding + optimal accuracy kernel (:mod:`.source`) on a batch of
envelopes, whose full Forward and Backward matrices the host holds or the device already does.

The kernel decodes and aligns each envelope in place, by a group of four threads: the
posterior over the Backward matrix, the OA matrix over the Forward matrix, as HMMER leaves
them, and writes the null2 odds and the OA trace. Two ways in, one launch
(:func:`_launch`) and one reading of the results (:func:`_decoded`):

* :func:`decode_oa`: envelopes whose matrices the host holds
  (:class:`~hmmgpu.cpu.fwdback.MatrixResult` pairs). They are packed end to end (cells and
  special rows, the layout of :class:`hmmgpu.cpu.fwdback.StripedMatrix`), sent, and read back
  whole: every envelope's posterior and OA matrix comes back with its status, ``oasc``,
  flags, null2 odds and trace.
* :func:`decode_produced`: envelopes whose unihit Forward and Backward matrices
  :func:`hmmgpu.gpu.fwdback.matrix_launch.produce_matrices` left in device memory (jobs of a
  ``MatrixBatch``), read and overwritten where they are, at the batch's offsets. Only what the
  host needs comes back (status, ``oasc``, flags, null2 odds, OA trace); an envelope's
  posterior and OA matrices only where asked for (``matrices``: the domain definition stages
  ask for the posterior where the flush-to-zero check of its null2 odds needs it).

Each model's ``tfv`` and ``rfv`` are sent once a launch (an envelope's unihit tables share
them with the multihit ones). The launch goes through the device's runtime, as
:mod:`hmmgpu.gpu.fwdback.matrix_launch` does: on a GPU the kernel is loaded from its cubin
(shipped for sm_90: :func:`hmmgpu.gpu.runtime.build.load`) and launched through the CUDA driver,
without numba; under numba's simulator it is numba's own. :func:`decode_produced` runs on the
batch's device.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from hmmgpu.constants import KP
from hmmgpu.cpu.fwdback import MatrixResult, StripedMatrix
from hmmgpu.cpu.optacc import Trace
from hmmgpu.gpu.envelope.source import ARGS, DecodeOASpec
from hmmgpu.gpu.runtime import build
from hmmgpu.gpu.runtime.device import GpuDevice
from hmmgpu.gpu.runtime.kargs import arguments

#: Threads per envelope (one per SSE lane).
GROUP = 4


@dataclass
class DecodedEnvelope:
    """One envelope's kernel results: ``status`` (eslERANGE where decoding overflowed),
    ``oasc``, ``flags`` (the kernel's, with its matrices'), the ``posterior`` matrix (its row 0
    holding null2's normalised state weights, as HMMER leaves it), the ``oa`` matrix and the
    ``null2`` odds float32 [Kp] and the OA ``trace`` (residues 1..Ld of the envelope; ``oa``,
    ``null2`` and ``trace`` None where decoding overflowed). Where the matrices were not asked
    for (:func:`decode_produced`), ``posterior`` holds the flags alone (its ``matrix`` None)
    and ``oa`` is None."""

    status: int
    oasc: np.float32
    flags: int
    posterior: MatrixResult
    oa: MatrixResult | None
    null2: np.ndarray | None
    trace: Trace | None


def _offsets(sizes) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if len(sizes) else np.zeros(0, np.int64)


def _launch(device, lengths, tables, xf, own_scales, matrices: dict, dp_base, x_base, block: int | None,
            stream=None, ftz: bool = False) -> dict:
    """Run the kernel on ``device`` on ``n`` envelopes: ``lengths`` (Ld each), ``tables`` (each one's unihit
    :class:`~hmmgpu.stages.forward.ForwardTables`), ``xf`` (its unihit special transitions),
    ``own_scales`` (its Backward matrix's ``has_own_scales``), their matrices in the device
    arrays ``matrices`` (``fwd_dp``, ``bck_dp``, ``fwd_x``, ``bck_x``) at ``dp_base`` and
    ``x_base``. Returns the host copies of the per-envelope outputs (``status``, ``oasc``,
    ``flags``, ``null2`` [n][Kp], the traces ``st``, ``k``, ``i``, ``pp`` with their
    ``trace_base`` and lengths ``n``); ``stream`` the launch's (the default stream if None),
    which also holds its arrays and copies (stream-ordered memory); ``ftz``: the kernel in
    hmmsearch's float mode (flush-to-zero), for matrices computed in it."""
    n = len(lengths)
    models, model_of, tfvs, rfvs = {}, [], [], []
    for t in tables:  # a model's tables once
        key = (id(t.rfv), id(t.tfv))
        if key not in models:
            models[key] = len(tfvs)
            tfvs.append(np.ascontiguousarray(t.tfv, np.float32).ravel())
            rfvs.append(np.ascontiguousarray(t.rfv, np.float32).ravel())
        model_of.append(models[key])
    tfv_at, rfv_at = _offsets([t.size for t in tfvs]), _offsets([r.size for r in rfvs])
    capacity = [2 * (int(Ld) + t.M) + 6 for Ld, t in zip(lengths, tables)]
    trace_base = _offsets(capacity)
    block = block or GROUP
    with device.activate():
        dev = functools.partial(device.runtime.to_device, stream=stream)
        outs = dict(out_status=dev(np.zeros(n, np.int32)), out_oasc=dev(np.zeros(n, np.float32)),
                    out_flags=dev(np.zeros(n, np.int32)), out_null2=dev(np.zeros(n * KP, np.float32)),
                    out_n=dev(np.zeros(n, np.int32)),
                    **{name: dev(np.zeros(sum(capacity), dt)) for name, dt in (
                        ("out_st", np.int32), ("out_k", np.int32), ("out_i", np.int32), ("out_pp", np.float32))})
        values = dict(
            dp_base=dev(np.asarray(dp_base, np.int64)), x_base=dev(np.asarray(x_base, np.int64)),
            lengths=dev(np.asarray(lengths, np.int32)), item_q=dev(np.array([t.Q for t in tables], np.int32)),
            tfv=dev(np.concatenate(tfvs)), item_tfv=dev(tfv_at[model_of]), rfv=dev(np.concatenate(rfvs)),
            item_rfv=dev(rfv_at[model_of]),
            item_xf=dev(np.ascontiguousarray(np.asarray(xf, np.float32)).ravel()),
            own_scales=dev(np.asarray(own_scales, np.int32)), n_items=n, counters=dev(np.zeros(1, np.int32)),
            n_threads=GROUP * n, trace_base=dev(trace_base), **matrices, **outs)
        build.load(DecodeOASpec(ftz), device)[(GROUP * n + block - 1) // block, block, stream, 0](
            *arguments(ARGS, **values))
        got = {name[4:]: a.copy_to_host(stream=stream) for name, a in outs.items()}
    got["null2"] = got["null2"].reshape(n, KP)
    got["trace_base"] = trace_base
    return got


def _reader(arrays: dict, dp_at: int, x_at: int, Ld: int, Q: int, stream=None):
    """A function of an array's name (``fwd_dp``, ``bck_dp``, ``fwd_x``, ``bck_x``) that gives an
    envelope's part of it on the host, shaped as its matrix: the envelope's cells at ``dp_at``
    (``[Ld+1][3][Q][4]``), its rows at ``x_at`` (``[Ld+1][6]``); ``arrays`` host copies (numpy)
    or device arrays, of which only that part is copied (on ``stream``)."""
    def read(name: str) -> np.ndarray:
        at, shape = (dp_at, (Ld + 1, 3, Q, 4)) if name.endswith("_dp") else (x_at, (Ld + 1, 6))
        part = arrays[name][int(at):int(at) + int(np.prod(shape))]
        return (part if isinstance(part, np.ndarray) else part.copy_to_host(stream=stream)).reshape(shape)
    return read


def _decoded(got: dict, k: int, flags: int, scales, read=None) -> DecodedEnvelope:
    """Envelope ``k``'s :class:`DecodedEnvelope` from :func:`_launch`'s outputs: ``flags`` its
    Forward and Backward matrices', ``scales`` its Backward matrix's ``totscale`` and
    ``has_own_scales`` (attributes); ``read`` (None: the matrices are not asked for) a
    :func:`_reader` of its matrices."""
    status = int(got["status"][k])
    carried = int(flags) | int(got["flags"][k])
    posterior = oa = odds = trace = None
    if read is not None:
        posterior = StripedMatrix(dp=read("bck_dp"), xmx=read("bck_x"), totscale=scales.totscale,
                                  has_own_scales=scales.has_own_scales)
    if status == 0:
        odds = got["null2"][k].copy()
        z = slice(got["trace_base"][k], got["trace_base"][k] + got["n"][k])
        trace = Trace(st=got["st"][z].astype(np.uint8), k=got["k"][z].copy(), i=got["i"][z].copy(),
                      pp=got["pp"][z].copy())
        if read is not None:
            oa = MatrixResult(flags=carried, score=np.float32(np.nan), matrix=StripedMatrix(
                dp=read("fwd_dp"), xmx=read("fwd_x"), totscale=np.float32(0.0), has_own_scales=False))
    return DecodedEnvelope(status=status, oasc=np.float32(got["oasc"][k]), flags=carried,
                           posterior=MatrixResult(flags=carried, score=np.float32(np.nan), matrix=posterior),
                           oa=oa, null2=odds, trace=trace)


def decode_oa(envelopes, device: GpuDevice | None = None, block: int | None = None) -> list:
    """Decode and align ``envelopes`` whose matrices the host holds: tuples (Forward
    :class:`MatrixResult`, Backward :class:`MatrixResult`, the model's unihit
    :class:`~hmmgpu.stages.forward.ForwardTables`, its unihit special transitions ``xf`` float32
    [4][2] at the target's length), on ``device`` (GPU 0, or the simulator, if None).
    Returns a :class:`DecodedEnvelope` per envelope, its posterior and OA matrices included."""
    device = device or GpuDevice.open(0)
    cells = [f.matrix.dp.size for f, *_ in envelopes]
    rows = [f.matrix.xmx.size for f, *_ in envelopes]
    dp_base, x_base = _offsets(cells), _offsets(rows)

    def flat(parts):
        return device.runtime.to_device(np.concatenate([np.ascontiguousarray(p, np.float32).ravel() for p in parts]))

    matrices = dict(fwd_dp=flat([f.matrix.dp for f, *_ in envelopes]),
                    bck_dp=flat([b.matrix.dp for _, b, *_ in envelopes]),
                    fwd_x=flat([f.matrix.xmx for f, *_ in envelopes]),
                    bck_x=flat([b.matrix.xmx for _, b, *_ in envelopes]))
    got = _launch(device, [f.matrix.L for f, *_ in envelopes], [t for *_, t, _ in envelopes],
                  [x for *_, x in envelopes], [b.matrix.has_own_scales for _, b, *_ in envelopes], matrices, dp_base,
                  x_base, block)
    host = {name: a.copy_to_host() for name, a in matrices.items()}
    return [_decoded(got, k, f.flags | b.flags, b.matrix, _reader(host, dp_base[k], x_base[k], f.matrix.L, f.matrix.Q))
            for k, (f, b, _, _) in enumerate(envelopes)]


def decode_produced(batch, jobs, block: int | None = None, matrices=False, stream=None) -> list:
    """Decode and align the envelopes whose unihit Forward and Backward matrices are the jobs
    ``jobs`` of ``batch`` (a :class:`~hmmgpu.gpu.fwdback.matrix_launch.MatrixBatch`), where they
    are in device memory, on the batch's device; the kernel overwrites them (those jobs' Forward
    matrices then hold the OA matrices, their Backward matrices the posteriors). Returns a
    :class:`DecodedEnvelope` per job, whose ``posterior`` has a matrix (None otherwise), and
    ``oa`` too, only where ``matrices`` asks for it: True (every envelope), or a function
    ``matrices(e, decoded)`` of the envelope's position in ``jobs`` and its
    :class:`DecodedEnvelope` without them. ``stream``: the launch's (the default stream if None).
    The kernel computes in the batch's float mode (``batch.ftz``: hmmsearch's flush-to-zero)."""
    from hmmgpu.cpu.fwdback import special_transitions_of, unihit_tables

    jobs = np.asarray(jobs, np.int64)
    chosen = [batch.jobs[k] for k in jobs.tolist()]
    for k, job in zip(jobs.tolist(), chosen):
        if not (job.unihit and job.backward):
            raise ValueError(f"job {k} is not an envelope's (unihit, with Backward)")
    if not chosen:
        return []
    uni = [unihit_tables(job.tables) for job in chosen]
    matrices_of = dict(fwd_dp=batch.fwd_dp, bck_dp=batch.bck_dp, fwd_x=batch.fwd_x, bck_x=batch.bck_x)
    got = _launch(batch.device, [job.Ld for job in chosen], uni,
                  special_transitions_of(uni, [len(job.codes) for job in chosen]),
                  [batch.backward[k].has_own_scales for k in jobs.tolist()], matrices_of, batch.dp_base[jobs],
                  batch.x_base[jobs], block, stream, batch.ftz)
    out = []
    for e, (k, job) in enumerate(zip(jobs.tolist(), chosen)):
        flags = batch.forward[k].flags | batch.backward[k].flags
        decoded = _decoded(got, e, flags, batch.backward[k])
        if matrices is True or (matrices and matrices(e, decoded)):
            decoded = _decoded(got, e, flags, batch.backward[k],
                               _reader(matrices_of, batch.dp_base[k], batch.x_base[k], job.Ld, job.tables.Q,
                                       stream))
        out.append(decoded)
    return out
