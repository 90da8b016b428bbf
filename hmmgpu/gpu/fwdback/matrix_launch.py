"""Producing full Forward and Backward matrices on the GPU for a batch of slices: the host side
of the full-matrix kernels (:mod:`.matrix_source`).

Domain definition needs full matrices of slices of its targets: the multihit Forward matrix
of each clustered region (the stochastic-trace ensemble, :mod:`hmmgpu.gpu.ensemble`) and the
unihit Forward and Backward matrices of each envelope (decoding and optimal accuracy,
:mod:`hmmgpu.gpu.envelope`). :func:`produce_matrices` computes them for a batch of
:class:`MatrixJob` (a model's tables, a target, the slice ``i..j``, multihit or unihit, with or
without Backward; jobs of any targets and models) and leaves them in device memory, in the
layout those kernels read (:class:`hmmgpu.cpu.fwdback.StripedMatrix`, end to end):

* ``fwd_dp`` float32: job k's cells at ``dp_base[k]``, ``(Ld + 1) 3 Q 4`` floats
  (``((3 i + s) Q + q) 4 + z``, row 0 zero); ``fwd_x`` float32: its specials at ``x_base[k]``,
  ``6 (Ld + 1)`` floats (E N J B C SCALE a row);
* ``bck_dp``, ``bck_x``: the Backward matrices of the jobs that asked for one, at the SAME
  offsets (the envelope kernel reads both matrices of an envelope at one ``dp_base`` and one
  ``x_base``). Those jobs are laid out first, so the Backward arrays end with the last of them.

The ensemble's :func:`~hmmgpu.gpu.ensemble.launch.pack_regions` lays its regions end to end from
offset 0; a batch of regions produced here is handed over by replacing its ``dp_base`` and
``x_base`` with this batch's offsets of those jobs and calling
:func:`~hmmgpu.gpu.ensemble.launch.launch` with ``fwd_dp`` and ``fwd_x``.

Only a few numbers per job come back to the host (:class:`MatrixSummary`: the flags, the
score and ``totscale`` formed with libm's ``log`` from the kernels' scale factors and final C,
as the CPU references form them, and ``has_own_scales``); a job's matrices are copied back
only when asked for (:meth:`MatrixBatch.host_result`, :meth:`MatrixBatch.host_results`), as
the :class:`~hmmgpu.cpu.fwdback.MatrixResult` that :func:`hmmgpu.cpu.fwdback.forward_matrix`
and :func:`~hmmgpu.cpu.fwdback.backward_matrix` return, bit for bit.

The launches go through the device's runtime (:attr:`hmmgpu.gpu.runtime.device.GpuDevice.runtime`),
as every other kernel of the search does: on a GPU the kernels are loaded from their cubins
(shipped for sm_90, else compiled once and cached: :func:`hmmgpu.gpu.runtime.build.load`) and
launched through the CUDA driver with its arrays, without numba; under numba's simulator (CI)
they are numba's own kernels and arrays. The ensemble and envelope launchers do the same on the
batch's device, so that their kernels read these arrays as they are; on one stream (the default
stream unless given), so that a kernel launched after them on it reads them finished. Jobs are
claimed costliest first; a job's rows live in shared memory where a warp's two row buffers fit
in what a block may opt in to (the segmented kernels, a warp a job, as many blocks as the
multiprocessors hold: :func:`hmmgpu.gpu.fwdback.launch.segmented_launch`; models of up to about
2,400 vectors on an H200), else in a global scratch array, a group of four threads a job (a
second launch per kernel).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from hmmgpu.cpu.fwdback import MatrixResult, StripedMatrix, special_transitions_of, unihit_tables
from hmmgpu.gpu.fwdback.launch import segmented_launch
from hmmgpu.gpu.fwdback.matrix_source import BwdMatrixSpec, FwdMatrixSpec
from hmmgpu.gpu.fwdback.source import SCRATCH_PER_Q
from hmmgpu.gpu.runtime import build, tuning
from hmmgpu.gpu.runtime.device import GpuDevice
from hmmgpu.gpu.runtime.kargs import arguments
from hmmgpu.stages.forward import FLT_MIN, SUBNORMAL, ForwardTables, forward_totscales, plus_logs

__all__ = ["MatrixJob", "MatrixSummary", "MatrixBatch", "Summaries", "produce_matrices", "job_bytes", "matrix_bytes"]

#: Threads per job (one per SSE lane).
GROUP = 4
#: Shared memory a block may use without opting in to more.
SHARED_LIMIT = 48 * 1024


@dataclass
class MatrixJob:
    """One full matrix to produce: ``tables`` the model's multihit
    :class:`~hmmgpu.stages.forward.ForwardTables` (``unihit``: configured as
    :func:`hmmgpu.cpu.fwdback.unihit_tables` does), ``codes`` the WHOLE target (digital, no
    sentinels: its length sets the length model), ``i..j`` the slice (1-based, inclusive);
    ``backward``: the Backward matrix too (after the Forward one, with its scale factors)."""

    tables: ForwardTables
    codes: np.ndarray
    i: int
    j: int
    unihit: bool = False
    backward: bool = False

    @property
    def Ld(self) -> int:
        return int(self.j) - int(self.i) + 1


@dataclass
class MatrixSummary:
    """One matrix's host-side numbers, as :func:`hmmgpu.cpu.fwdback.forward_matrix` (or
    ``backward_matrix``) returns them in its :class:`~hmmgpu.cpu.fwdback.MatrixResult`: the
    flags (a Backward matrix's with its Forward matrix's), the score (float32 nats, NaN on
    :data:`~hmmgpu.stages.forward.RANGE`), ``totscale`` and ``has_own_scales`` (always True for
    Forward, as HMMER sets it)."""

    flags: int
    score: np.float32
    totscale: np.float32
    has_own_scales: bool


@dataclass
class Summaries:
    """One kind of matrix's :class:`MatrixSummary` of every job of a batch, as arrays (one
    step forms them all; the launches that follow read the arrays): ``flags`` int64,
    ``score`` and ``totscale`` float32, ``has_own_scales`` bool, and ``present`` bool (the job
    asked for this matrix: every job its Forward one, some their Backward one). Indexing gives
    a job's :class:`MatrixSummary`, or None where it asked for none."""

    flags: np.ndarray
    score: np.ndarray
    totscale: np.ndarray
    has_own_scales: np.ndarray
    present: np.ndarray

    @classmethod
    def none(cls, n: int) -> "Summaries":
        """``n`` jobs that asked for no such matrix."""
        return cls(flags=np.zeros(n, np.int64), score=np.full(n, np.nan, np.float32),
                   totscale=np.zeros(n, np.float32), has_own_scales=np.zeros(n, bool), present=np.zeros(n, bool))

    def __len__(self) -> int:
        return int(self.flags.size)

    def __getitem__(self, k: int) -> MatrixSummary | None:
        if not self.present[k]:
            return None
        return MatrixSummary(flags=int(self.flags[k]), score=self.score[k], totscale=self.totscale[k],
                             has_own_scales=bool(self.has_own_scales[k]))

    def __iter__(self):
        return (self[k] for k in range(len(self)))


def matrix_bytes(Ld: int, Q: int) -> int:
    """The bytes of a full striped matrix of ``Ld`` residues and ``Q`` vectors: its cells and
    special rows."""
    return 4 * (int(Ld) + 1) * (12 * int(Q) + 6)


def job_bytes(job: MatrixJob) -> int:
    """Device bytes of one job's matrices (twice with Backward)."""
    return matrix_bytes(job.Ld, job.tables.Q) * (2 if job.backward else 1)


def _offsets(sizes) -> np.ndarray:
    sizes = np.asarray(sizes, np.int64)
    return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if sizes.size else np.zeros(0, np.int64)


@dataclass
class MatrixBatch:
    """A batch's matrices in ``device``'s memory (float32 arrays of its runtime: the driver's on
    a GPU, numba's under the simulator) and what the host keeps of each job: ``dp_base``,
    ``x_base`` int64 [n] (job k's cells and specials in ``fwd_dp``/``fwd_x``, and in
    ``bck_dp``/``bck_x`` where it asked for Backward; None where no job did), ``forward`` and
    ``backward`` (:class:`Summaries`: a :class:`MatrixSummary` per job; None where no Backward
    was asked for)."""

    jobs: list
    device: GpuDevice
    fwd_dp: object
    fwd_x: object
    bck_dp: object
    bck_x: object
    dp_base: np.ndarray
    x_base: np.ndarray
    forward: Summaries
    backward: Summaries
    #: the stream the matrices were made on (None: the default stream): their copies to the host go there
    stream: object = None
    #: the matrices were computed in hmmsearch's float mode (flush-to-zero; the kernels' ``ftz`` variants)
    ftz: bool = False

    def _shapes(self, k: int) -> tuple:
        job = self.jobs[k]
        return (job.Ld + 1, 3, job.tables.Q, 4), (job.Ld + 1, 6)

    def _result(self, k: int, backward: bool, dp_host, x_host, at: tuple) -> MatrixResult:
        """Job ``k``'s matrix from host copies whose job k starts at ``at`` (cells, specials)."""
        dp_shape, x_shape = self._shapes(k)
        a, b = at
        dp = np.array(dp_host[a:a + int(np.prod(dp_shape))]).reshape(dp_shape)
        xmx = np.array(x_host[b:b + int(np.prod(x_shape))]).reshape(x_shape)
        s = self.backward[k] if backward else self.forward[k]
        return MatrixResult(flags=s.flags, score=s.score, matrix=StripedMatrix(
            dp=dp, xmx=xmx, totscale=s.totscale, has_own_scales=s.has_own_scales))

    def host_result(self, k: int, backward: bool = False) -> MatrixResult:
        """Job ``k``'s Forward (or Backward) matrix copied to the host, as the CPU reference
        returns it."""
        if backward and self.backward[k] is None:
            raise ValueError(f"job {k} asked for no Backward matrix")
        dp_shape, x_shape = self._shapes(k)
        a, b = int(self.dp_base[k]), int(self.x_base[k])
        dp, x = (self.bck_dp, self.bck_x) if backward else (self.fwd_dp, self.fwd_x)
        with self.device.activate():
            return self._result(k, backward, dp[a:a + int(np.prod(dp_shape))].copy_to_host(stream=self.stream),
                                x[b:b + int(np.prod(x_shape))].copy_to_host(stream=self.stream), (0, 0))

    def host_results(self, backward: bool = False) -> list:
        """Every job's Forward (or Backward) matrix on the host (one copy of each device array):
        a :class:`~hmmgpu.cpu.fwdback.MatrixResult` per job, None for a job without Backward."""
        dp, x = (self.bck_dp, self.bck_x) if backward else (self.fwd_dp, self.fwd_x)
        if dp is None:
            return [None] * len(self.jobs)
        with self.device.activate():
            dp_host, x_host = dp.copy_to_host(stream=self.stream), x.copy_to_host(stream=self.stream)
        return [None if backward and self.backward[k] is None
                else self._result(k, backward, dp_host, x_host, (int(self.dp_base[k]), int(self.x_base[k])))
                for k in range(len(self.jobs))]


def _pack_slices(jobs) -> tuple:
    """The jobs' slices packed four residues a word (little-endian, each slice from a word of
    its own): (words uint32, word offsets int64)."""
    words = [(job.Ld + 3) // 4 for job in jobs]
    packed = np.zeros(4 * max(sum(words), 1), np.uint8)
    offsets = _offsets(words)
    for job, at in zip(jobs, offsets.tolist()):
        codes = np.asarray(job.codes, np.uint8)
        if not 1 <= int(job.i) <= int(job.j) <= codes.size:
            raise ValueError(f"slice {job.i}..{job.j} is not within 1..{codes.size}")
        packed[4 * at:4 * at + job.Ld] = codes[int(job.i) - 1:int(job.j)]
    return packed.view("<u4").astype(np.uint32), offsets


def produce_matrices(jobs, *, device: GpuDevice | None = None, storage: str | None = None, block: int = 32,
                     scratch_bytes: int = tuning.FWD_SCRATCH_BYTES, stream=None, ftz: bool = False) -> MatrixBatch:
    """Full Forward matrices of every :class:`MatrixJob`, and Backward ones where asked, left in
    ``device``'s memory (:class:`MatrixBatch`; module text). ``device``: the
    :class:`~hmmgpu.gpu.runtime.device.GpuDevice` that runs the kernels (GPU 0, or the simulator,
    if None); ``storage``: "shared" or "global" for every job's rows (default: shared where they
    fit); ``block``: threads a block on a GPU; ``scratch_bytes``: the most global scratch for the
    rows; ``stream``: a stream of the device's runtime for the launches and the summaries' copies
    (the default stream if None); ``ftz``: in hmmsearch's float mode (flush-to-zero: the
    kernels' ``ftz`` variants, :func:`hmmgpu.gpu.rounding.float_helpers`). Returns once the
    summaries are on the host."""
    device = device or GpuDevice.open(0)
    jobs = list(jobs)
    n = len(jobs)
    if n == 0:
        return MatrixBatch(jobs=[], device=device, fwd_dp=None, fwd_x=None, bck_dp=None, bck_x=None,
                           dp_base=np.zeros(0, np.int64), x_base=np.zeros(0, np.int64), forward=Summaries.none(0),
                           backward=Summaries.none(0),
                           ftz=ftz)
    with device.activate():
        return _produce(jobs, device, storage, block, scratch_bytes, stream, ftz)


def _produce(jobs, device, storage, block, scratch_bytes, stream, ftz: bool) -> MatrixBatch:
    """:func:`produce_matrices` of a non-empty list of jobs, ``device``'s context current."""
    n = len(jobs)
    rt = device.runtime
    if device.simulator:
        block = GROUP  # a block is one group: the simulator's shuffles wait for the whole block
    Ld = np.array([job.Ld for job in jobs], np.int64)
    Q = np.array([job.tables.Q for job in jobs], np.int64)
    layout = sorted(range(n), key=lambda k: not jobs[k].backward)  # Backward's jobs first
    cells, rows = (Ld + 1) * 12 * Q, 6 * (Ld + 1)
    dp_base, x_base = np.zeros(n, np.int64), np.zeros(n, np.int64)
    dp_base[layout], x_base[layout] = _offsets(cells[layout]), _offsets(rows[layout])
    wants = np.array([job.backward for job in jobs], bool)
    bck_cells = int((cells[wants]).sum())
    bck_rows = int((rows[wants]).sum())
    models, model_of, tables = {}, np.zeros(n, np.int32), []
    for k, job in enumerate(jobs):  # a model's tables once (its multihit and unihit tables share rfv and tfv)
        key = (id(job.tables.rfv), id(job.tables.tfv))
        if key not in models:
            models[key] = len(tables)
            tables.append(job.tables)
        model_of[k] = models[key]
    xf = special_transitions_of([unihit_tables(job.tables) if job.unihit else job.tables for job in jobs],
                                [len(job.codes) for job in jobs])
    item_xf = np.ascontiguousarray(xf[:, [1, 1, 0, 0], [0, 1, 0, 1]]).ravel()  # N move, N loop, E move, E loop
    residues, word_offsets = _pack_slices(jobs)
    scale_base = _offsets(Ld)
    rfv = [np.ascontiguousarray(t.rfv, np.float32).ravel() for t in tables]
    tfv = [np.ascontiguousarray(t.tfv, np.float32).ravel() for t in tables]
    dev = functools.partial(rt.to_device, stream=stream)  # every upload and array in the stream's order
    common = dict(
        residues=dev(residues), word_offsets=dev(word_offsets), lengths=dev(Ld.astype(np.int32)),
        item_model=dev(model_of), item_xf=dev(item_xf), rfv=dev(np.concatenate(rfv)), tfv=dev(np.concatenate(tfv)),
        model_q=dev(np.array([t.Q for t in tables], np.int32)), model_m=dev(np.array([t.M for t in tables], np.int32)),
        model_rfv=dev(_offsets([a.size for a in rfv])), model_tfv=dev(_offsets([a.size for a in tfv])),
        model_f=dev(np.array([[t.xe_move, t.xe_loop, t.tbm_min] for t in tables], np.float32).ravel()),
        row_base=dev(x_base), cell_base=dev(dp_base), scale_base=dev(scale_base))
    empty = functools.partial(rt.device_array, stream=stream)
    fwd = dict(out_rows=empty(int(rows.sum()), np.float32), out_cells=empty(int(cells.sum()), np.float32),
               out_flags=empty(n, np.int32), out_xc=empty(n, np.float32), out_nscale=empty(n, np.int32),
               out_scales=empty(int(Ld.sum()), np.float32))
    bwd = None
    if wants.any():
        bwd = dict(fwd_rows=fwd["out_rows"], out_rows=empty(bck_rows, np.float32),
                   out_cells=empty(bck_cells, np.float32), out_flags=empty(n, np.int32), out_own=empty(n, np.int32),
                   out_nscale=empty(n, np.int32), out_scales=empty(int(Ld.sum()), np.float32),
                   out_xn=empty(n, np.float32))
    # a segmented kernel's block is one group, its two row buffers and exchange area (24 Q + 20 floats)
    shared_q = -1 if storage == "global" else ((device.smem_per_block_optin - 1024) // 4 - 20) // 24
    cost = Ld * Q
    for where, sel in (("shared", Q <= shared_q), ("global", Q > shared_q)):
        items = np.flatnonzero(sel)
        items = items[np.argsort(-cost[items], kind="stable")]  # costliest first
        for spec, outs, chosen in ((FwdMatrixSpec(where, ftz, tuning.FWD_SEGMENTS), fwd, items),
                                   (BwdMatrixSpec(where, ftz, tuning.FWD_SEGMENTS), bwd, items[wants[items]])):
            if chosen.size == 0:
                continue
            q_max = int(Q[chosen].max())
            kernel = build.load(spec, device)
            extra = {}
            if spec.segmented:  # the segmented kernels: a warp a job, its rows in shared memory
                grid, threads_a_block, smem, group_floats, threads = segmented_launch(device, spec.segments,
                                                                                       chosen.size, q_max)
                scratch, extra = rt.device_array(1, np.float32, stream=stream), dict(group_floats=group_floats)
                if smem > SHARED_LIMIT and not device.simulator:
                    kernel.allow_dynamic_shared(smem)
            else:
                grid, threads, scratch = _global_launch(device, chosen.size, q_max, block, scratch_bytes, stream)
                threads_a_block, smem = block, 0
            values = dict(common, items=dev(chosen.astype(np.int32)), n_items=int(chosen.size),
                          counters=dev(np.zeros(1, np.int32)), scratch=scratch, n_threads=threads, **extra, **outs)
            kernel[grid, threads_a_block, stream, smem](*arguments(spec.args, **values))
    return MatrixBatch(jobs=jobs, device=device, fwd_dp=fwd["out_cells"], fwd_x=fwd["out_rows"],
                       bck_dp=None if bwd is None else bwd["out_cells"], bck_x=None if bwd is None else bwd["out_rows"],
                       dp_base=dp_base, x_base=x_base, stream=stream, ftz=ftz,
                       **_summaries(jobs, fwd, bwd, scale_base, stream, xf[:, 1, 0]))


def _global_launch(device, m: int, q_max: int, block: int, scratch_bytes: int, stream) -> tuple:
    """(blocks, threads, scratch array on ``device``, in ``stream``'s order) of a launch of ``m``
    jobs whose rows live in global scratch, a group of four threads a job: as many groups as
    ``scratch_bytes`` of rows hold, at most one a job."""
    most = max(1, scratch_bytes // (4 * SCRATCH_PER_Q * q_max * GROUP))
    groups = max(1, min(m, most, 2 if device.simulator else m))
    threads = GROUP * groups
    return -(-groups // (block // GROUP)), threads, device.runtime.device_array(SCRATCH_PER_Q * q_max * threads,
                                                                                np.float32, stream=stream)


def _summaries(jobs, fwd, bwd, scale_base, stream, pmove) -> dict:
    """``forward`` and ``backward``: each job's :class:`MatrixSummary`, formed on the host from
    the kernels' flags, final C (Forward), row 0's N (Backward) and scale factors (copied on
    ``stream``), and ``pmove``, each job's C -> T move at its target's length (its special
    transitions' ``xf[N][MOVE]``, which the kernels were given), as :func:`hmmgpu.cpu.fwdback.forward_parser` and ``backward_parser`` form them
    (:func:`~hmmgpu.stages.forward.forward_score`, :func:`~hmmgpu.stages.forward.backward_score_from_scales`),
    all jobs' at once: each sum in its own order, libm's ``log`` (:func:`~hmmgpu.stages.forward.forward_totscales`)."""
    n = len(jobs)
    copies = {f"fwd_{name}": fwd[name].copy_to_host(stream=stream)
              for name in ("out_flags", "out_xc", "out_nscale", "out_scales")}
    if bwd is not None:
        copies.update({f"bwd_{name}": bwd[name].copy_to_host(stream=stream)
                       for name in ("out_flags", "out_own", "out_nscale", "out_xn", "out_scales")})
    if stream:
        stream.synchronize()
    starts = np.asarray(scale_base[:n], np.int64)
    flags = copies["fwd_out_flags"][:n].astype(np.int64)
    xc = copies["fwd_out_xc"][:n].astype(np.float32)
    totscale = forward_totscales(copies["fwd_out_scales"], starts, copies["fwd_out_nscale"][:n])
    score = np.full(n, np.nan, np.float32)  # the final C NaN, 0 or infinite: RANGE (libhmmer: eslERANGE)
    with np.errstate(all="ignore"):
        ends = np.isfinite(xc) & (xc != 0)
        last = (xc * pmove).astype(np.float32)
    flags[ends & (last > 0) & (last <= FLT_MIN)] |= SUBNORMAL
    score[ends & (last <= 0)] = -np.inf   # numba's log(0) in the reference
    positive = np.flatnonzero(ends & (last > 0))
    score[positive] = plus_logs(totscale[positive], last[positive])
    forward = Summaries(flags=flags, score=score, totscale=np.asarray(totscale), has_own_scales=np.ones(n, bool),
                        present=np.ones(n, bool))
    backward = Summaries.none(n)
    if bwd is not None:
        asked = np.array([k for k, job in enumerate(jobs) if job.backward], np.int64)
        tot = forward_totscales(copies["bwd_out_scales"], starts[asked], copies["bwd_out_nscale"][asked])
        xn = copies["bwd_out_xn"][asked].astype(np.float32)
        with np.errstate(all="ignore"):
            ends = np.isfinite(xn) & (xn != 0)
        bscore = np.full(len(asked), np.nan, np.float32)   # xn NaN, 0 or infinite: RANGE
        bscore[ends] = plus_logs(tot[ends], xn[ends])
        backward.flags[asked] = copies["bwd_out_flags"][asked].astype(np.int64) | flags[asked]
        backward.score[asked] = bscore
        backward.totscale = np.zeros(n, np.asarray(tot).dtype)
        backward.totscale[asked] = tot
        backward.has_own_scales[asked] = copies["bwd_out_own"][asked] != 0
        backward.present[asked] = True
    return dict(forward=forward, backward=backward)
