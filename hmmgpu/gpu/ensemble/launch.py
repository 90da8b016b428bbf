"""Launching the stochastic-trace ensemble kernel (:mod:`.source`) on a batch of clustered
regions, and reading back what the host needs.

A batch is a list of :class:`RegionRequest` (a region's multihit Forward matrix, its model's
tables, the special transitions at its target's length, the target and the region's ends),
regions of any targets and models. :func:`pack_regions` lays them out end to end as the
kernel reads them (:class:`RegionBatch`: the matrices' cells and rows, one copy of each
model's ``tfv`` and ``rfv``, the region's residues, the offsets of each region's scratch,
null2 sums and pair buffer). :func:`launch` runs the kernel on a batch whose matrices are
already in device memory; :func:`sample_regions` packs the requests and either uploads the
host's matrices first or, for regions whose matrices
:func:`hmmgpu.gpu.fwdback.matrix_launch.produce_matrices` left in device memory (a
``MatrixBatch``, in this very layout), reads them where they are, at that batch's offsets.
Each region comes back as a :class:`SampledRegion`: the kernel's status and, where it is OK,
the region's :class:`hmmgpu.cpu.stotrace.TraceEnsemble`, the very object the CPU reference
returns (``acc``, ``pairs``, ``nsamples``, ``draws``, ``ftz_differs``).

The launch goes through the device's runtime, as :mod:`hmmgpu.gpu.fwdback.matrix_launch` and
:mod:`hmmgpu.gpu.envelope.launch` do: on a GPU the kernel is loaded from its cubin (shipped for
sm_90: :func:`hmmgpu.gpu.runtime.build.load`) and launched through the CUDA driver, without
numba; under numba's simulator it is numba's own. Regions of a ``MatrixBatch`` are sampled on
the batch's device. The table of draws is uploaded once per device, seed and size and kept.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from hmmgpu.cpu.stotrace import DEFAULT_SEED, NSAMPLES, OK, TraceEnsemble, uniform_table
from hmmgpu.gpu.ensemble.source import ARGS, LARGE, MAX_REGION_CELLS, EnsembleSpec, region_lanes
from hmmgpu.gpu.runtime import build
from hmmgpu.gpu.runtime.device import GpuDevice
from hmmgpu.gpu.runtime.kargs import arguments

__all__ = ["DEFAULT_TABLE", "RegionRequest", "RegionBatch", "SampledRegion", "pair_capacity",
           "pack_regions", "launch", "sample_regions"]

#: Draws in the device table (8 MB of doubles; the longest region measured read 190,690).
DEFAULT_TABLE = 1 << 20


@dataclass
class RegionRequest:
    """A clustered region to sample: ``matrix`` its multihit full Forward
    :class:`~hmmgpu.cpu.fwdback.StripedMatrix` (``Lr = j - i + 1`` rows after row 0; None
    where the matrix is only in device memory, at the batch's offsets),
    ``tables`` its model's :class:`~hmmgpu.stages.forward.ForwardTables`, ``xf`` float32 [4][2]
    the multihit special transitions at the target's length, ``codes`` the target's residues,
    ``i..j`` the region (1-based)."""

    matrix: object
    tables: object
    xf: np.ndarray
    codes: np.ndarray
    i: int
    j: int


@dataclass
class SampledRegion:
    """A region's kernel result: ``status`` (:data:`hmmgpu.cpu.stotrace.OK`, or why the region
    is left to the CPU reference: EXHAUSTED, FATAL, FULL, :data:`.source.OUTSIDE`,
    :data:`.source.LARGE`) and, when OK, its ``ensemble``."""

    status: int
    ensemble: TraceEnsemble | None


def pair_capacity(Lr: int, nsamples: int) -> int:
    """Room for the sampled domains of a region of ``Lr`` residues: 8 a sample plus one per 16
    residues (a region that samples more is left to the CPU reference, status FULL)."""
    return int(nsamples) * (8 + int(Lr) // 16)


def _offsets(sizes) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if len(sizes) else np.zeros(0, np.int64)


@dataclass
class RegionBatch:
    """The host side of a batch: every region's offsets and sizes (int arrays, one entry a
    region) and the model and residue arrays, as the kernel's parameters name them
    (:data:`.source.ARGS`); ``dp_size``, ``x_size``, ``work_size``, ``acc_size``, ``pair_size``:
    the lengths of the flat arrays; ``nsamples``."""

    arrays: dict
    dp_size: int
    x_size: int
    work_size: int
    acc_size: int
    pair_size: int
    nsamples: int

    @property
    def n(self) -> int:
        return int(self.arrays["lengths"].size)


def pack_regions(requests, nsamples: int = NSAMPLES, pair_cap: int | None = None) -> RegionBatch:
    """Lay ``requests`` (:class:`RegionRequest`) out as the kernel reads them; each model's
    tables once (models are told apart by identity of their ``tables``). The regions'
    matrices are expected end to end in request order (``arrays["dp_base"]``,
    ``arrays["x_base"]``: cells ``(Lr + 1) 12 Q``, rows ``6 (Lr + 1)`` a region); a producer
    that leaves them elsewhere in device memory replaces those two offset arrays. ``pair_cap``:
    room for that many sampled domains a region instead of :func:`pair_capacity`'s."""
    lengths = np.array([r.j - r.i + 1 for r in requests], np.int32)
    qs = np.array([r.tables.Q for r in requests], np.int32)
    for r, Lr in zip(requests, lengths):
        if r.matrix is not None and (r.matrix.dp.shape != (Lr + 1, 3, r.tables.Q, 4)
                                     or r.matrix.xmx.shape != (Lr + 1, 6)):
            raise ValueError(f"region {r.i}..{r.j}: its matrix is not [Lr+1][3][Q][4] and [Lr+1][6]")
    models, tfv_base, rfv_base, tfvs, rfvs = {}, [], [], [], []
    tfv_at, rfv_at = 0, 0
    for r in requests:
        key = id(r.tables)
        if key not in models:
            tfv = np.ascontiguousarray(r.tables.tfv, np.float32).ravel()
            rfv = np.ascontiguousarray(r.tables.rfv, np.float32).ravel()
            models[key] = (tfv_at, rfv_at)
            tfvs.append(tfv)
            rfvs.append(rfv)
            tfv_at += tfv.size
            rfv_at += rfv.size
        tfv_base.append(models[key][0])
        rfv_base.append(models[key][1])
    residues = [np.ascontiguousarray(r.codes[r.i - 1:r.j], np.uint8) for r in requests]
    cells = (lengths.astype(np.int64) + 1) * 12 * qs
    caps = np.array([pair_capacity(Lr, nsamples) if pair_cap is None else pair_cap for Lr in lengths], np.int32)
    arrays = dict(
        dp_base=_offsets(cells), x_base=_offsets(6 * (lengths.astype(np.int64) + 1)), lengths=lengths, item_q=qs,
        tfv=np.concatenate(tfvs) if tfvs else np.zeros(1, np.float32), item_tfv=np.array(tfv_base, np.int64),
        rfv=np.concatenate(rfvs) if rfvs else np.zeros(1, np.float32), item_rfv=np.array(rfv_base, np.int64),
        item_xf=np.concatenate([np.asarray(r.xf, np.float32).ravel() for r in requests]).astype(np.float32)
        if requests else np.zeros(8, np.float32),
        codes=np.concatenate(residues) if residues else np.zeros(1, np.uint8),
        code_base=_offsets([x.size for x in residues]), first_residue=np.array([r.i for r in requests], np.int32),
        work_base=_offsets(4 * qs.astype(np.int64)), acc_base=_offsets(lengths.astype(np.int64) + 1),
        pair_base=_offsets(caps.astype(np.int64)), pair_cap=caps)
    return RegionBatch(arrays=arrays, dp_size=int(cells.sum()), x_size=int(6 * (lengths.sum() + lengths.size)),
                       work_size=int(4 * qs.astype(np.int64).sum()), acc_size=int(lengths.sum() + lengths.size),
                       pair_size=int(caps.astype(np.int64).sum()), nsamples=int(nsamples))


@functools.lru_cache(maxsize=None)
def _device_uniforms(device: GpuDevice, seed: int, size: int):
    """The table of draws in ``device``'s memory (uploaded once per device, seed and size)."""
    return device.runtime.to_device(uniform_table(seed, size))


def launch(batch: RegionBatch, dp, xmx, *, device: GpuDevice, seed: int = DEFAULT_SEED, table: int = DEFAULT_TABLE,
           block: int = 32, stream=None, ftz: bool = False) -> list:
    """Sample every region of ``batch`` whose matrices are ``device``'s arrays ``dp`` and ``xmx``
    (float32, the regions' cells and rows at the batch's offsets): a :class:`SampledRegion`
    per region, in order. ``table``: draws in the device table; ``stream``: the launch's (the
    default stream if None), which also holds its arrays and copies (:mod:`hmmgpu.gpu.runtime.driver`:
    stream-ordered memory); ``ftz``: the kernel in hmmsearch's float mode (flush-to-zero), for
    matrices computed in it."""
    n = batch.n
    if n == 0:
        return []
    a = batch.arrays
    rt = device.runtime
    threads = region_lanes(device.lane_binding) * n  # a warp a region on a GPU (source.py)
    with device.activate():
        upload = functools.partial(rt.to_device, stream=stream)  # every upload and array in the stream's order
        empty = functools.partial(rt.device_array, stream=stream)
        outs = {name: upload(np.zeros(n, np.int32)) for name in ("out_status", "out_npairs", "out_draws", "out_ftz")}
        acc = empty(max(batch.acc_size, 1), np.float32)
        pairs = empty(max(5 * batch.pair_size, 1), np.int32)
        values = dict(dp=dp, xmx=xmx, uniforms=_device_uniforms(device, int(seed), int(table)), nsamples=batch.nsamples,
                      work=empty(max(batch.work_size, 1), np.float32), n_items=n,
                      counters=upload(np.zeros(1, np.int32)), n_threads=threads, acc=acc, pairs=pairs, **outs,
                      **{name: upload(value) for name, value in a.items()})
        build.load(EnsembleSpec(ftz), device)[(threads + block - 1) // block, block, stream, 0](
            *arguments(ARGS, **values))
        status, npairs, draws, ftz = (outs[name].copy_to_host(stream=stream)
                                      for name in ("out_status", "out_npairs", "out_draws", "out_ftz"))
        acc_host, pairs_host = acc.copy_to_host(stream=stream), pairs.copy_to_host(stream=stream).reshape(-1, 5)
    out = []
    for k in range(n):
        if status[k] != OK:
            out.append(SampledRegion(status=int(status[k]), ensemble=None))
            continue
        at, Lr, pb = a["acc_base"][k], int(a["lengths"][k]), a["pair_base"][k]
        out.append(SampledRegion(status=OK, ensemble=TraceEnsemble(
            acc_host[at:at + Lr + 1].copy(), pairs_host[pb:pb + npairs[k]].copy(), batch.nsamples, int(draws[k]),
            bool(ftz[k]))))
    return out


def sample_regions(requests, *, device: GpuDevice | None = None, batch=None, jobs=None, nsamples: int = NSAMPLES,
                   seed: int = DEFAULT_SEED, table: int = DEFAULT_TABLE, block: int = 32,
                   pair_cap: int | None = None, stream=None) -> list:
    """:func:`launch` on ``requests``: packs them (``pair_cap`` as :func:`pack_regions` takes it)
    and samples every region (a :class:`SampledRegion` each, in order). Without ``batch`` the
    requests' host matrices are uploaded to ``device`` (GPU 0, or the simulator, if None); with
    one (a :class:`~hmmgpu.gpu.fwdback.matrix_launch.MatrixBatch`), request k's matrix is its
    multihit Forward job ``jobs[k]``, read where it is, in the batch's device memory at the
    batch's offsets (the requests' ``matrix`` unused, None; ``device``, if given, the batch's),
    sampled in the batch's float mode (``batch.ftz``); ``stream`` the launch's. A region whose
    matrix is beyond the kernel's 32-bit offsets (:data:`.source.MAX_REGION_CELLS`) is not
    launched: its status is :data:`.source.LARGE`."""
    if batch is not None and device is not None and device != batch.device:
        raise ValueError("the regions' matrices are on the batch's device, not on the one given")
    requests = list(requests)
    fits = [k for k, r in enumerate(requests) if (r.j - r.i + 2) * 12 * r.tables.Q <= MAX_REGION_CELLS]
    if len(fits) < len(requests):  # a region beyond the kernel's 32-bit offsets: left to the CPU reference
        out = [SampledRegion(status=LARGE, ensemble=None)] * len(requests)
        sampled = sample_regions([requests[k] for k in fits], device=device, batch=batch,
                                 jobs=None if jobs is None else [jobs[k] for k in fits], nsamples=nsamples,
                                 seed=seed, table=table, block=block, pair_cap=pair_cap, stream=stream)
        for k, region in zip(fits, sampled):
            out[k] = region
        return out
    packed = pack_regions(requests, nsamples, pair_cap)
    if packed.n == 0:
        return []
    device = batch.device if batch is not None else device or GpuDevice.open(0)
    if batch is None:
        upload = functools.partial(device.runtime.to_device, stream=stream)
        dp = upload(np.concatenate([np.ascontiguousarray(r.matrix.dp, np.float32).ravel() for r in requests]))
        xmx = upload(np.concatenate([np.ascontiguousarray(r.matrix.xmx, np.float32).ravel() for r in requests]))
    else:
        jobs = np.asarray(jobs, np.int64)
        for r, k in zip(requests, jobs.tolist()):
            job = batch.jobs[k]
            if job.unihit or job.Ld != r.j - r.i + 1 or job.tables.Q != r.tables.Q:
                raise ValueError(f"region {r.i}..{r.j}: job {k} is not its multihit Forward matrix")
        packed.arrays["dp_base"], packed.arrays["x_base"] = batch.dp_base[jobs], batch.x_base[jobs]
        dp, xmx = batch.fwd_dp, batch.fwd_x
    return launch(packed, dp, xmx, device=device, seed=seed, table=table, block=block, stream=stream,
                  ftz=batch is not None and batch.ftz)
