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
* :func:`launch_produced`: envelopes whose unihit Forward and Backward matrices
  :func:`hmmgpu.gpu.fwdback.matrix_launch.produce_matrices` left in device memory (jobs of a
  ``MatrixBatch``), read and overwritten where they are, at the batch's offsets. Only what the
  host needs comes back (status, ``oasc``, flags, null2 odds, OA traces). :func:`decode_produced`
  reads each envelope's results from it, with its posterior and OA matrices where asked for;
  :func:`finish_produced` makes the domain definition stages' answers for all of them at
  once, as arrays (what :func:`hmmgpu.cpu.envelope.finish_envelope` makes of each, bit for bit),
  copying back
  the posterior of an envelope whose null2 odds' flush-to-zero check needs it.

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
from typing import NamedTuple

import numpy as np

from hmmgpu.constants import KP
from hmmgpu.cpu.domaindef import envelope_result
from hmmgpu.cpu.envelope import finish_envelope
from hmmgpu.cpu.fwdback import TINY_ROWS, MatrixResult, StripedMatrix, special_transitions_of, unihit_tables
from hmmgpu.cpu.null2 import glibc_logf
from hmmgpu.cpu.optacc import Trace, domain_spans
from hmmgpu.host import flush_to_zero
from hmmgpu.stages.domaindef import Envelope, RescoredEnvelopes, offsets_of
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


class Produced(NamedTuple):
    """The kernel's launch on envelopes of a ``batch`` (:func:`launch_produced`): their job
    numbers (``jobs``) and jobs (``chosen``), the launch's outputs on the host (``got``:
    :func:`_launch`'s), the device arrays of the batch's matrices (``matrices_of``) and the
    launch's ``stream``."""

    batch: object
    jobs: np.ndarray
    chosen: list
    got: dict | None
    matrices_of: dict | None
    stream: object


def launch_produced(batch, jobs=None, block: int | None = None, stream=None) -> Produced:
    """The kernel on the envelopes that are the jobs ``jobs`` (every job if None) of ``batch``
    (a :class:`~hmmgpu.gpu.fwdback.matrix_launch.MatrixBatch`), where their matrices are; returns
    once its outputs are on the host."""
    jobs = np.arange(len(batch.jobs), dtype=np.int64) if jobs is None else np.asarray(jobs, np.int64)
    chosen = [batch.jobs[k] for k in jobs.tolist()]
    for k, job in zip(jobs.tolist(), chosen):
        if not (job.unihit and job.backward):
            raise ValueError(f"job {k} is not an envelope's (unihit, with Backward)")
    if not chosen:
        return Produced(batch, jobs, chosen, None, None, stream)
    uni = [unihit_tables(job.tables) for job in chosen]
    matrices_of = dict(fwd_dp=batch.fwd_dp, bck_dp=batch.bck_dp, fwd_x=batch.fwd_x, bck_x=batch.bck_x)
    got = _launch(batch.device, [job.Ld for job in chosen], uni,
                  special_transitions_of(uni, [len(job.codes) for job in chosen]),
                  batch.backward.has_own_scales[jobs].tolist(), matrices_of, batch.dp_base[jobs],
                  batch.x_base[jobs], block, stream, batch.ftz)
    return Produced(batch, jobs, chosen, got, matrices_of, stream)


def _decoded_job(batch, got, matrices_of, e: int, k: int, with_matrices: bool, stream) -> DecodedEnvelope:
    """Job ``k`` of ``batch``, the ``e``-th of a launch's (:func:`launch_produced`), decoded;
    its posterior and OA matrices copied back where ``with_matrices``."""
    job = batch.jobs[k]
    flags = batch.forward[k].flags | batch.backward[k].flags
    read = _reader(matrices_of, batch.dp_base[k], batch.x_base[k], job.Ld, job.tables.Q, stream) if with_matrices \
        else None
    return _decoded(got, e, flags, batch.backward[k], read)


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
    jobs = np.asarray(jobs, np.int64)
    _, _, chosen, got, matrices_of, _ = launch_produced(batch, jobs, block, stream)
    out = []
    for e, k in enumerate(jobs.tolist()[:len(chosen)]):
        decoded = _decoded_job(batch, got, matrices_of, e, k, False, stream)
        if matrices is True or (matrices and matrices(e, decoded)):
            decoded = _decoded_job(batch, got, matrices_of, e, k, True, stream)
        out.append(decoded)
    return out


def finish_produced(produced: Produced, spans) -> RescoredEnvelopes:
    """The envelopes of a launch on every job of its batch (:func:`launch_produced`; each job an
    envelope's unihit Forward and Backward matrices, ``spans[k]`` job k's
    :class:`~hmmgpu.stages.domaindef.EnvelopeSpan`) decoded, aligned and rescored: the
    :class:`~hmmgpu.stages.domaindef.Envelope` that :func:`hmmgpu.cpu.domaindef.envelope_result`
    makes of :func:`hmmgpu.cpu.envelope.finish_envelope` after :func:`decode_produced`, bit for
    bit, for all the envelopes at once and as arrays (a
    :class:`~hmmgpu.stages.domaindef.RescoredEnvelopes`, in order). The traces are moved to the
    target's coordinates in one step and read from one compact copy of the kernel's; the ``n2sc``
    of the unclustered envelopes come from one call of glibc's ``logf`` over all their residues'
    null2 odds; ``iali``/``jali`` from one compiled pass (:func:`hmmgpu.cpu.optacc.domain_spans`).
    An envelope whose null2 odds need the flush-to-zero check of its posterior (an unclustered one
    whose matrices hold tiny rows) takes the one-envelope path, its posterior copied back. The
    host's part runs in the batch's float mode."""
    batch, jobs, chosen, got, matrices_of, stream = produced
    if not np.array_equal(jobs, np.arange(len(batch.jobs))):
        raise ValueError("finish_produced: the launch must be on every job of its batch, in order")
    if not chosen:
        return RescoredEnvelopes.of([])
    carried = (batch.forward.flags | batch.backward.flags | got["flags"]).astype(np.int64)
    ok = got["status"] == 0
    clustered = np.array([bool(s.null2_is_done) for s in spans])
    one_by_one = ok & ~clustered & ((carried & TINY_ROWS) != 0)
    fast = np.flatnonzero(ok & ~one_by_one)
    slow = np.flatnonzero(~ok | one_by_one)
    alone = []
    with flush_to_zero(batch.ftz), batch.device.activate():   # a posterior copied back: in this thread too
        slow_answers = []
        for e in slow.tolist():
            if not ok[e]:
                slow_answers.append(Envelope(flags=int(carried[e]), dropped=True))
                continue
            d, span = _decoded_job(batch, got, matrices_of, e, e, True, stream), spans[e]
            slow_answers.append(envelope_result(finish_envelope(
                unihit_tables(chosen[e].tables), span.codes, span.i, span.j, span.null2_is_done, span.n2sc,
                batch.forward.score[e], d.status, d.posterior, d.oasc, d.flags, d.trace, d.null2)))
        counts = got["n"][fast].astype(np.int64)
        ends = np.cumsum(counts)
        starts = ends - counts
        at = np.repeat(got["trace_base"][fast] - starts, counts) + np.arange(int(ends[-1]) if ends.size else 0)
        ienv = np.array([int(spans[e].i) for e in fast.tolist()], np.int32)
        raw_i = got["i"][at]
        st, k, pp = got["st"][at].astype(np.uint8), got["k"][at].astype(np.int32), got["pp"][at].astype(np.float32)
        i = (raw_i + np.repeat(ienv - np.int32(1), counts)).astype(np.int32, copy=False)
        i[raw_i == 0] = 0
        z1, z2 = domain_spans(st, starts, ends)
        if (z1 < 0).any():
            raise ValueError("the trace has no domain (B, M, E)")
        alone = [e for e in fast.tolist() if not spans[e].null2_is_done]
        residues = [spans[e].codes[int(spans[e].i) - 1:int(spans[e].j)] for e in alone]
        sizes = np.array([r.size for r in residues], np.int64)
        odds = got["null2"][np.repeat(np.array(alone, np.int64), sizes),
                            np.concatenate(residues) if residues else np.zeros(0, np.int64)]
        n2sc = glibc_logf(odds) if alone else np.zeros(0, np.float32)
    n2sc_sizes = np.zeros(fast.size, np.int64)
    n2sc_sizes[np.searchsorted(fast, np.array(alone, np.int64))] = sizes if alone else 0
    quick = RescoredEnvelopes(flags=carried[fast], dropped=np.zeros(fast.size, np.bool_),
                              envsc=np.asarray(batch.forward.score, np.float32)[fast],
                              oasc=np.asarray(got["oasc"], np.float32)[fast],
                              iali=i[starts + z1].astype(np.int64), jali=i[starts + z2].astype(np.int64),
                              trace_offsets=offsets_of(counts), st=st, k=k, i=i, pp=pp,
                              n2sc_offsets=offsets_of(n2sc_sizes),
                              n2sc=np.asarray(n2sc, np.float32))
    answers = RescoredEnvelopes.joined([quick, RescoredEnvelopes.of(slow_answers)])
    return answers.take(np.argsort(np.concatenate([fast, slow]), kind="stable"))
