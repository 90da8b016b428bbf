"""Host side of the Forward parser kernel: HMMER's tables, launches, the score, libhmmer's fallback.

:class:`ForwardKernel` loads the kernel (:mod:`.source`) for a device and launches it on a
work list of positions of one chunk of the resident database (:mod:`..resident`: residues
in word-aligned slots, longest targets first). :class:`ForwardStage` runs the Forward parser
of one model on a list of database indices: it takes the striped float tables from HMMER's
own optimized profile (:class:`hmmgpu.stages.forward.ForwardTables`, from libhmmer's or
pyhmmer's ``om``, uploaded as they are), cuts the targets into launches whose outputs and
scratch stay within :mod:`..tuning`'s budgets, forms each target's score on the host from
the kernel's scale factors and final ``xC`` (:func:`hmmgpu.stages.forward.forward_score`:
libm's ``log``, HMMER's order), and recomputes with libhmmer's ``p7_ForwardParser`` every
target the kernel flags (:data:`hmmgpu.stages.forward.HOST`) and every target of a model
whose tables the flags' argument does not cover
(:meth:`~hmmgpu.stages.forward.ForwardTables.exactness_conditions`). As the F3 gate of the
cascade (:mod:`hmmgpu.gpu.cascade`) it runs without that fallback: such targets are left
undecided (:data:`STATUS_UNSURE`) and pyhmmer's stage decides them itself.

The stage imports no numba (the GPU process runs it from exported kernels).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hmmgpu.stages import forward as ref
from hmmgpu.gpu.runtime import build, tuning
from hmmgpu.gpu.runtime.kargs import arguments
from hmmgpu.gpu.fwdback.source import ARGS, SCRATCH_PER_Q, FwdSpec

#: Status of a target: libhmmer's (OK, or RANGE: the final C is NaN, 0 or infinite), or, when
#: the stage runs without libhmmer's fallback, UNSURE (a target it would recompute; no score).
STATUS_OK, STATUS_RANGE, STATUS_UNSURE = ref.STATUS_OK, ref.STATUS_RANGE, ref.STATUS_UNSURE


@dataclass
class ForwardResults:
    """The Forward parser of one model on a list of targets (database indices)."""

    indices: np.ndarray  #: database indices, as asked
    status: np.ndarray  #: int32: STATUS_OK, STATUS_RANGE (libhmmer's eslERANGE) or STATUS_UNSURE (no fallback)
    scores: np.ndarray  #: float32 nats (NaN unless the status is OK)
    flags: np.ndarray  #: int32: the kernel's flags (:mod:`hmmgpu.cpu.fwdback`); all 0 for a host-only model
    xc: np.ndarray  #: float32: the kernel's final C (0 where it did not run)
    host: np.ndarray  #: bool: recomputed by libhmmer (or, without the fallback, left undecided)
    scales: list = field(default_factory=list)  #: float32 arrays: each target's scale factors (in row order)
    rows: list | None = None  #: float32 [L+1, 6] arrays (E N J B C SCALE), when asked for
    reason: str | None = None  #: why the whole model ran on libhmmer, or None


class ForwardKernel:
    """The Forward parser kernel of one device: loading and launches."""

    def __init__(self, device):
        self.device = device
        self.spec = FwdSpec()

    def threads(self, Q: int, n_items: int, scratch_bytes: int | None = None) -> int:
        """Threads of a launch: one per target, at most as many as the scratch budget holds."""
        budget = tuning.FWD_SCRATCH_BYTES if scratch_bytes is None else int(scratch_bytes)
        most = budget // (4 * SCRATCH_PER_Q * Q)
        if self.device.simulator:  # one block of 32 threads
            most = min(most, 32)
        return max(1, min(n_items, most))

    def launch(self, chunk, stream, *, n_threads: int, **values) -> None:
        """Launch on ``values["items"][:n_items]`` of ``chunk`` (asynchronous); ``values`` are the
        kernel's other arguments by name (:data:`.source.ARGS`)."""
        kernel = build.load(self.spec, self.device)
        block = 32 if self.device.simulator else tuning.FWD_BLOCK
        grid = -(-n_threads // block)
        args = arguments(ARGS, residues=chunk.residues, word_offsets=chunk.word_offsets, lengths=chunk.lengths,
                         n_threads=n_threads, **values)
        kernel[grid, block, stream, 0](*args)


class ForwardStage:
    """The Forward parser alone over a resident database, on a list of database indices."""

    def __init__(self, resident, scratch_bytes: int | None = None, batch_residues: int | None = None):
        self.resident = resident
        self.device = resident.device
        self.kernel = ForwardKernel(self.device)
        self.scratch_bytes = scratch_bytes
        self.batch_residues = tuning.FWD_BATCH_RESIDUES if batch_residues is None else int(batch_residues)
        self._position = np.full(resident.db.n, -1, np.int64)
        self._position[resident.indices] = np.arange(resident.n)
        self._length_tables = {}
        self._stream = None
        self.last: dict = {}

    def _lengths(self, nj) -> dict:
        """pmove and ploop by target length, on the device (per ``nj``, once)."""
        key = float(nj)
        if key not in self._length_tables:
            rt = self.device.runtime
            pmove, ploop = ref.length_specials(np.arange(max(self.resident.max_length, 1) + 1), nj)
            with self.device.activate():
                self._length_tables[key] = (pmove, rt.to_device(pmove), rt.to_device(ploop))
        return self._length_tables[key]

    def run(self, model, indices, rows: bool = False, tables=None, fallback: bool = True,
            epoch=None) -> ForwardResults:
        """``p7_ForwardParser`` of ``model`` (a :class:`hmmgpu.cpu.hmmerlib.HmmerModel`) on each
        target of ``indices`` (database indices of non-empty targets); with ``rows`` the
        special-state rows too. The kernel's values are IEEE's (pyhmmer's mode); the targets
        libhmmer recomputes run in the calling thread's floating-point mode (inside
        :func:`hmmgpu.host.flush_to_zero`, hmmsearch's), which for every other target gives
        the same score (:mod:`hmmgpu.cpu.fwdback`, exactness flags).

        ``tables``: the model's :class:`~hmmgpu.stages.forward.ForwardTables` (default: read from
        ``model``). ``fallback=False``: nothing is recomputed on the host (``model`` may then be
        None); the targets libhmmer would recompute get :data:`STATUS_UNSURE` and no score.
        ``self.last`` records the launches, the targets left to the host and the kernel time
        (``kernel_ms``, 0 under the simulator), and with ``epoch`` (a recorded event) each
        launch's interval in milliseconds after it (``spans``)."""
        db = self.resident.db
        idx = np.asarray(indices, np.int64)
        n = idx.size
        if tables is None:
            tables = ref.ForwardTables.from_hmmer(model)
        reason = tables.exactness_conditions()
        pos = self._position[idx] if n else np.zeros(0, np.int64)
        if (pos < 0).any():
            raise ValueError("the Forward parser was asked for zero-length targets")
        flags = np.zeros(n, np.int32)
        xc = np.zeros(n, np.float32)
        scales = [np.zeros(0, np.float32)] * n
        out_rows = [None] * n if rows else None
        host = np.ones(n, bool) if reason is not None else np.zeros(n, bool)
        launches = threads = 0
        kernel_ms, spans = 0.0, []
        if reason is None and n:
            launches, threads, kernel_ms = self._run_kernel(tables, idx, pos, rows, flags, xc, scales, out_rows,
                                                            epoch, spans)
            host = (flags & ref.HOST) != 0
        pmove = self._lengths(tables.nj)[0]
        status = np.zeros(n, np.int32)
        scores = np.full(n, np.nan, np.float32)
        for j in range(n):
            if host[j]:
                continue
            L = int(db.lengths[idx[j]])
            last = np.float32(xc[j] * pmove[L])
            if not last > ref.FLT_MIN:  # a tiny last product: the FTZ mode could matter (never seen)
                host[j] = True
                continue
            scores[j] = ref.forward_score(scales[j], xc[j], pmove[L])
        if fallback:
            for j in np.flatnonzero(host):
                st, sc, xmx, _ = model.forward_parser(db.codes(int(idx[j])))
                status[j], scores[j] = st, sc
                scales[j] = xmx[1:, 5][xmx[1:, 5] != 1].copy()
                if rows:
                    out_rows[j] = xmx
        else:
            status[host] = STATUS_UNSURE
        self.last = dict(reason=reason, host=int(host.sum()), launches=launches, threads=threads, kernel_ms=kernel_ms,
                         spans=spans)
        return ForwardResults(indices=idx, status=status, scores=scores, flags=flags, xc=xc, host=host, scales=scales,
                              rows=out_rows, reason=reason)

    def _run_kernel(self, tables, idx, pos, rows, flags, xc, scales, out_rows, epoch=None, spans=None) -> tuple:
        """The kernel on every target (positions ``pos``), chunk by chunk and in launches of at
        most :attr:`batch_residues` residues; fills the per-target outputs; returns (the launches,
        the most threads of one, the kernel time in milliseconds)."""
        rt = self.device.runtime
        lengths = self.resident.lengths
        _, pmove_dev, ploop_dev = self._lengths(tables.nj)
        Q = tables.Q
        launches = most = 0
        kernel_ms = 0.0
        timed = not self.device.simulator
        with self.device.activate():
            if self._stream is None:  # made once: a stream and two events per model would be driver calls
                self._stream = (rt.stream(), rt.event(), rt.event()) if timed else (rt.stream(), None, None)
            stream, start, stop = self._stream
            rfv = rt.to_device(np.ascontiguousarray(tables.rfv, np.float32).reshape(-1))
            tfv = rt.to_device(np.ascontiguousarray(tables.tfv, np.float32).reshape(-1))
            dummy_i64 = rt.to_device(np.zeros(1, np.int64))
            dummy_f32 = rt.to_device(np.zeros(1, np.float32))
            for chunk in self.resident.chunks():
                sel = np.flatnonzero((pos >= chunk.lo) & (pos < chunk.hi))
                for batch in _batches(sel, lengths[pos[sel]], self.batch_residues):
                    L = lengths[pos[batch]].astype(np.int64)
                    m = batch.size
                    scale_base = np.concatenate([[0], np.cumsum(L)[:-1]]).astype(np.int64)
                    threads = self.kernel.threads(Q, m, self.scratch_bytes)
                    most = max(most, threads)
                    scratch = rt.device_array(SCRATCH_PER_Q * Q * threads, np.float32)
                    out = dict(out_flags=rt.device_array(m, np.int32), out_xc=rt.device_array(m, np.float32),
                               out_nscale=rt.device_array(m, np.int32),
                               out_scales=rt.device_array(max(int(L.sum()), 1), np.float32))
                    if rows:
                        row_base = np.concatenate([[0], np.cumsum(6 * (L + 1))[:-1]]).astype(np.int64)
                        out["out_rows"] = rt.device_array(int(6 * (L + 1).sum()), np.float32)
                        row_base_dev = rt.to_device(row_base)
                    else:
                        out["out_rows"], row_base_dev = dummy_f32, dummy_i64
                    if timed:
                        start.record(stream)
                    self.kernel.launch(chunk, stream, n_threads=threads,
                                       items=rt.to_device((pos[batch] - chunk.lo).astype(np.int32)), n_items=m,
                                       counters=rt.to_device(np.zeros(1, np.int32)), rfv=rfv, tfv=tfv, Q=Q,
                                       M=tables.M, pmove_by_length=pmove_dev, ploop_by_length=ploop_dev,
                                       xe_move=tables.xe_move, xe_loop=tables.xe_loop, tbm_min=tables.tbm_min,
                                       scratch=scratch, scale_base=rt.to_device(scale_base),
                                       want_rows=int(bool(rows)), row_base=row_base_dev, **out)
                    if timed:
                        stop.record(stream)
                    stream.synchronize()
                    if timed:
                        kernel_ms += rt.elapsed_ms(start, stop)
                        if epoch is not None and spans is not None:
                            spans.append((rt.elapsed_ms(epoch, start), rt.elapsed_ms(epoch, stop)))
                    launches += 1
                    host = {name: out[name].copy_to_host() for name in ("out_flags", "out_xc", "out_nscale",
                                                                        "out_scales")}
                    flags[batch] = host["out_flags"]
                    xc[batch] = host["out_xc"]
                    for b, j in enumerate(batch):
                        s = int(scale_base[b])
                        scales[j] = host["out_scales"][s:s + int(host["out_nscale"][b])].copy()
                    if rows:
                        flat = out["out_rows"].copy_to_host()
                        for b, j in enumerate(batch):
                            s = int(row_base[b])
                            out_rows[j] = flat[s:s + 6 * int(L[b] + 1)].reshape(-1, 6).copy()
        return launches, most, kernel_ms


def _batches(sel, lengths, max_residues: int):
    """``sel`` cut into consecutive groups of at most ``max_residues`` residues (at least one
    target each)."""
    start, total = 0, 0
    for k, L in enumerate(np.asarray(lengths, np.int64).tolist()):
        if k > start and total + L > max_residues:
            yield sel[start:k]
            start, total = k, 0
        total += L
    if start < sel.size:
        yield sel[start:]
