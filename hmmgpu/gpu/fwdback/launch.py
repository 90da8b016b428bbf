"""Host side of the Forward parser kernel: HMMER's tables, batched launches, the score.

:class:`ForwardStage` runs the Forward parser kernel (:mod:`.source`) over the resident
database (:mod:`..resident`: residues in word-aligned slots, longest targets first) for
*jobs*: a model's striped float tables (:class:`hmmgpu.stages.forward.ForwardTables`, HMMER's
own, from libhmmer's or pyhmmer's ``om``, uploaded as they are) and a list of database
indices. One launch holds the targets of many models, because one model's Viterbi-filter
survivors (about 240 targets for a Pfam model against 29 M residues) would occupy one of the
GPU's 132 multiprocessors: :meth:`ForwardStage.launch` starts a :class:`ForwardBatch`
(asynchronous, on a stream of its own; several batches run at once on the GPU, and with
the filter kernels of later models), and :meth:`ForwardBatch.results` waits for it and forms
every target's score on the host from the kernel's scale factors and final ``xC``, the batch's
targets at once (:func:`hmmgpu.stages.forward.forward_scores`: libm's ``log``, HMMER's order
within each target).

Within a launch the targets are taken costliest first (length x vectors, by an atomic
counter), so the long ones start early and the short ones fill in around them. The rows live
in shared memory wherever a group's two row buffers fit (the segmented kernels, a warp a
target: models of up to about 2,400 vectors on an H100 or H200, every Pfam model), else in a
global scratch array (a second launch, a group of four threads a target). A target whose kernel run
would take far longer than a batch (:data:`~hmmgpu.gpu.runtime.tuning.FWD_MAX_CELLS`), a target
the kernel flags (:data:`hmmgpu.stages.forward.HOST`) and every target of a model whose tables
the flags' argument does not cover
(:meth:`~hmmgpu.stages.forward.ForwardTables.exactness_conditions`) get no score from the
GPU: :meth:`ForwardStage.run` computes them with libhmmer's ``p7_ForwardParser``, and as the
F3 gate of the cascade (:mod:`hmmgpu.gpu.cascade`) they are left undecided
(:data:`STATUS_UNSURE`) and pyhmmer's stage decides them itself.

For the F3 passers, which ``p7_Pipeline`` hands to domain definition, the same batch runs the
Backward parser too (``launch(jobs, backward=True)``): the Forward kernel writes its rows on the
device, the Backward kernel (:mod:`.backward_source`) runs after it on the same stream with the
same items and reads Forward's scale factors from them, and :meth:`ForwardBatch.results` returns
Backward's flags and ``has_own_scales`` (:class:`BackwardResults`), and with ``rows=True`` both
parsers' special-state rows and Backward's ``totscale`` and score: what ``p7_DomainDecoding``
reads. With ``decoding=True`` a third kernel (:mod:`.decoding_source`) runs
``p7_DomainDecoding`` itself on the rows, on the device, and the batch returns each target's
``mocc``, ``btot`` and ``etot`` (:class:`DecodingResults`): twelve bytes a residue, where the rows
are 48 (they stay on the device unless asked for). The Forward gate asks for none of these, and
its launches are unchanged.

The stage imports no numba (the GPU process runs it from exported kernels).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from hmmgpu.stages import forward as ref
from hmmgpu.gpu.runtime import build, tuning
from hmmgpu.gpu.runtime.kargs import arguments
from hmmgpu.gpu.fwdback.source import SCRATCH_PER_Q, FwdSpec
from hmmgpu.gpu.fwdback.backward_source import BwdSpec
from hmmgpu.gpu.fwdback.decoding_source import ARGS as DECODE_ARGS
from hmmgpu.gpu.fwdback.decoding_source import DecodeSpec

#: Status of a target: libhmmer's (OK, or RANGE: the final C is NaN, 0 or infinite), or, when
#: the stage runs without libhmmer's fallback, UNSURE (a target it would recompute; no score).
STATUS_OK, STATUS_RANGE, STATUS_UNSURE = ref.STATUS_OK, ref.STATUS_RANGE, ref.STATUS_UNSURE
#: Threads that run one target together, one per SSE lane (:mod:`.source`).
GROUP = 4
#: Threads of a block of the decoding kernel (one a target).
DECODE_BLOCK = 64


@dataclass
class BackwardResults:
    """The Backward parser (after the Forward parser) of one model on the targets of a
    :class:`ForwardResults`, in the same order."""

    status: np.ndarray  #: int32: STATUS_OK, STATUS_RANGE (libhmmer's eslERANGE) or STATUS_UNSURE (no fallback)
    scores: np.ndarray  #: float32 nats (NaN unless the status is OK; p7_Pipeline does not read it)
    totscale: np.ndarray  #: float32: the sum of the logs of the scale factors, as backward_engine forms it
    #: (scores and totscale are formed from the rows: NaN and 0 unless the rows were asked for)
    has_own_scales: np.ndarray  #: bool: the target switched to Backward's own scale factors
    flags: np.ndarray  #: int32: the Backward kernel's flags; all 0 where it did not run
    host: np.ndarray  #: bool: either pass's flags (or its cost) leave the rows to libhmmer
    rows: list | None  #: float32 [L+1, 6] arrays (E N J B C SCALE), when asked for


@dataclass
class DecodingResults:
    """``p7_DomainDecoding`` on the parsers' rows of the targets of a :class:`ForwardResults`, in
    the same order: float32 [L+1] arrays per target (row 0 all 0), in hmmsearch's arithmetic
    (flush-to-zero; the same in pyhmmer's where no FTZ_ONLY flag is raised)."""

    status: np.ndarray  #: int32: STATUS_OK, STATUS_RANGE (the scale product overflowed) or STATUS_UNSURE
    mocc: list  #: the probability that residue i is in a domain
    btot: list  #: the cumulative expected number of domain starts
    etot: list  #: the cumulative expected number of domain ends
    flags: np.ndarray  #: int32: FTZ_ONLY where pyhmmer's IEEE arithmetic could differ, SUBNORMAL where either
    #: could (module decoding_source)
    host: np.ndarray  #: bool: the parsers' or the decoding's flags (or the cost) leave the target to libhmmer


@dataclass
class ForwardResults:
    """The Forward parser of one model on a list of targets (database indices)."""

    indices: np.ndarray  #: database indices, as asked
    status: np.ndarray  #: int32: STATUS_OK, STATUS_RANGE (libhmmer's eslERANGE) or STATUS_UNSURE (no fallback)
    scores: np.ndarray  #: float32 nats (NaN unless the status is OK)
    flags: np.ndarray  #: int32: the kernel's flags (:mod:`hmmgpu.cpu.fwdback`); all 0 where it did not run
    xc: np.ndarray  #: float32: the kernel's final C (0 where it did not run)
    host: np.ndarray  #: bool: recomputed by libhmmer (or, without the fallback, left undecided)
    scales: list = field(default_factory=list)  #: float32 arrays: each target's scale factors (in row order)
    rows: list | None = None  #: float32 [L+1, 6] arrays (E N J B C SCALE), when asked for
    reason: str | None = None  #: why the whole model ran on libhmmer, or None
    on_gpu: np.ndarray | None = None  #: bool: the kernel ran the target (else: the model's tables or its cost)
    backward: BackwardResults | None = None  #: the Backward parser's, when asked for
    decoding: DecodingResults | None = None  #: the domain decoding's, when asked for


@dataclass
class ForwardJob:
    """One model's targets in a batch: its tables and the database indices (non-empty targets)."""

    tables: ref.ForwardTables
    indices: np.ndarray


def forward_spec(storage: str) -> FwdSpec:
    """The Forward parser kernel a launch with its rows in ``storage`` runs (the shared one with
    :data:`~hmmgpu.gpu.runtime.tuning.FWD_SEGMENTS` segments)."""
    return FwdSpec(storage, tuning.FWD_SEGMENTS) if storage == "shared" else FwdSpec(storage)


def backward_spec(storage: str) -> BwdSpec:
    """The Backward parser kernel a launch with its rows in ``storage`` runs (as :func:`forward_spec`)."""
    return BwdSpec(storage, tuning.FWD_SEGMENTS) if storage == "shared" else BwdSpec(storage)


def segmented_launch(device, segments: int, items: int, q_max: int) -> tuple:
    """(blocks, threads a block, shared bytes a block, floats a group, threads) of the segmented
    parser kernels (Forward's and Backward's) on ``items`` targets whose largest model has
    ``q_max`` vectors: blocks of one
    warp (under the simulator, of one group), each group two row buffers of 12 Q + 4 floats and
    12 floats where its lanes exchange values, as many blocks as the multiprocessors hold (a
    persistent grid) or as there are groups of work."""
    group = 4 * segments
    block = group if device.simulator else max(group, 32)
    group_floats = 2 * (12 * q_max + 4) + 12
    shared = 4 * group_floats * (block // group)
    if device.simulator:
        blocks = min(items, 2)
    else:
        per_sm = max(1, min(32, (device.smem_per_sm - 1024) // (shared + 1024)))
        blocks = min(-(-items // (block // group)), device.sm_count * per_sm)
    return blocks, block, shared, group_floats, blocks * block


class _Launch:
    """One kernel launch of a batch: its items (indices into the batch's flat target list), the
    device arrays it writes, and where each item's scale factors and rows start in them."""

    def __init__(self, items, outputs, scale_base, row_base, backward_outputs=None, decoding_outputs=None,
                 stream=None):
        self.items, self.outputs, self.scale_base, self.row_base = items, outputs, scale_base, row_base
        self.stream = stream  #: the launch's stream: its arrays are in that stream's order, and so are their copies
        self.backward_outputs = backward_outputs  #: the Backward kernel's arrays, when it ran
        self.decoding_outputs = decoding_outputs  #: the decoding kernel's arrays, when it ran


class ForwardBatch:
    """Launched jobs: :meth:`done` says whether the GPU has finished them (no wait), :meth:`wait`
    waits for them (nothing collected), and :meth:`results` waits and returns one
    :class:`ForwardResults` per job, in order (without libhmmer's fallback: targets the GPU gave
    no score are marked in ``host``)."""

    def __init__(self, stage, jobs, job_start, rows, launches, stop, flat, reason, kernel_ms_start=None,
                 backward=False, decoding=False, cells: int = 0):
        self.stage, self.jobs, self.rows, self.backward, self.decoding = stage, jobs, rows, backward, decoding
        self._job_start = job_start  #: where each job's targets start in the flat list (and the end)
        self._launches, self._stop = launches, stop
        self._flat = flat  #: per flat target: (database index, length, whether the GPU runs it)
        self._reason = reason  #: per job: why the model runs on the host, or None
        self._start = kernel_ms_start
        self._results = None
        self._time_claimed = False
        self.kernel_ms = 0.0
        self.cells = cells  #: model length x residues of the targets the kernel runs (its GCUPS' numerator)
        self.span = None  #: (start, stop) in ms after the stage's epoch, when timed

    def done(self) -> bool:
        if self._results is not None or self._stop is None or self.stage.device.simulator:
            return True
        return self._stop.query()

    def wait(self) -> None:
        if not self.done():
            self._stop.synchronize()

    def results(self) -> list:
        if self._results is None:
            self._results = self._collect()
        return self._results

    def claim_time(self) -> tuple | None:
        """(kernel milliseconds, busy span, :attr:`cells`) of the collected batch, to the first
        caller only."""
        if self._results is None or self._time_claimed:
            return None
        self._time_claimed = True
        return self.kernel_ms, self.span, self.cells

    def _collect(self) -> list:
        stage = self.stage
        rt = stage.device.runtime
        idx, lengths, on_gpu = self._flat
        n = idx.size
        flags = np.zeros(n, np.int32)
        xc = np.zeros(n, np.float32)
        nscale = np.zeros(n, np.int32)
        scale_parts = []  # each launch's (items, their first scale factor in its array, the array)
        out_rows = [None] * n if self.rows else None
        bwd = dict(flags=np.zeros(n, np.int32), own=np.zeros(n, bool),
                   rows=[None] * n if self.rows else None) if self.backward else None
        dec = dict(status=np.zeros(n, np.int32), flags=np.zeros(n, np.int32), mocc=[None] * n, btot=[None] * n,
                   etot=[None] * n) if self.decoding else None
        with stage.device.activate():
            if self._stop is not None:
                self._stop.synchronize()
                if self._start is not None:
                    self.kernel_ms = rt.elapsed_ms(self._start, self._stop)
                    if stage.epoch is not None:
                        self.span = (rt.elapsed_ms(stage.epoch, self._start), rt.elapsed_ms(stage.epoch, self._stop))
            for launch in self._launches:
                def copied(array, stream=launch.stream):  # on the launch's stream: its arrays are in its order
                    return array.copy_to_host(stream=stream)

                got = {name: copied(launch.outputs[name])
                       for name in ("out_flags", "out_xc", "out_nscale", "out_scales")}
                items = launch.items
                flags[items] = got["out_flags"]
                xc[items] = got["out_xc"]
                nscale[items] = got["out_nscale"]
                scale_parts.append((items, launch.scale_base, got["out_scales"]))
                if self.rows:
                    _rows_to(out_rows, copied(launch.outputs["out_rows"]), launch, lengths)
                if self.backward:
                    bwd["flags"][items] = copied(launch.backward_outputs["out_flags"])
                    bwd["own"][items] = copied(launch.backward_outputs["out_own"]) != 0
                    if self.rows:
                        _rows_to(bwd["rows"], copied(launch.backward_outputs["out_rows"]), launch, lengths)
                if self.decoding:
                    dec["status"][items] = copied(launch.decoding_outputs["out_status"])
                    dec["flags"][items] = copied(launch.decoding_outputs["out_flags"])
                    for name in ("mocc", "btot", "etot"):
                        _rows_to(dec[name], copied(launch.decoding_outputs[f"out_{name}"]), launch, lengths, width=1)
        host = ~on_gpu | ((flags & ref.HOST) != 0)
        last = xc * stage.pmove[lengths]  # float32 products, as forward_engine's xC * xf[C][MOVE]
        host |= ~(last > ref.FLT_MIN)  # a tiny last product: the FTZ mode could matter (never seen)
        first, flat = _gathered(scale_parts, nscale)
        scales = [flat[a:a + c] if c else _NO_SCALES for a, c in zip(first.tolist(), nscale.tolist())]
        scores = np.full(n, np.nan, np.float32)
        scored = np.flatnonzero(~host)
        scores[scored] = ref.forward_scores(flat, first[scored], nscale[scored], last[scored])
        backward = decoding = None
        if self.backward:
            bwd_host = host | ((bwd["flags"] & ref.HOST) != 0)  # Backward divides by Forward's scale factors
            backward = self._backward_results(bwd, bwd_host)
            if self.decoding:
                decoding = self._decoding_results(dec, bwd_host)
        out = []
        start = self._job_start
        for m in range(len(self.jobs)):
            sl = slice(int(start[m]), int(start[m + 1]))
            status = np.where(host[sl], STATUS_UNSURE, STATUS_OK).astype(np.int32)
            out.append(ForwardResults(indices=idx[sl].copy(), status=status, scores=scores[sl].copy(),
                                      flags=flags[sl].copy(), xc=xc[sl].copy(), host=host[sl].copy(),
                                      scales=scales[sl], rows=None if out_rows is None else out_rows[sl],
                                      reason=self._reason[m], on_gpu=on_gpu[sl].copy(),
                                      backward=None if backward is None else backward(sl),
                                      decoding=None if decoding is None else decoding(sl)))
        return out

    @staticmethod
    def _backward_results(bwd, host):
        """The Backward kernel's outputs as :class:`BackwardResults` of a slice of the batch's
        targets: with the rows, ``totscale`` and the score formed on the host from them
        (:func:`hmmgpu.stages.forward.backward_score`) where neither parser's flags (``host``)
        leave the target to libhmmer."""
        n = host.size
        totscale = np.zeros(n, np.float32)
        scores = np.full(n, np.nan, np.float32)
        rows = bwd["rows"]
        if rows is not None:
            for j in np.flatnonzero(~host).tolist():
                totscale[j], scores[j] = ref.backward_score(rows[j])
        status = np.where(host, STATUS_UNSURE, STATUS_OK).astype(np.int32)

        def results(sl):
            return BackwardResults(status=status[sl].copy(), scores=scores[sl].copy(), totscale=totscale[sl].copy(),
                                   has_own_scales=bwd["own"][sl].copy(), flags=bwd["flags"][sl].copy(),
                                   host=host[sl].copy(), rows=None if rows is None else rows[sl])
        return results

    @staticmethod
    def _decoding_results(dec, parsers_host):
        """The decoding kernel's outputs as :class:`DecodingResults` of a slice of the batch's
        targets (undecided where the parsers' rows are, ``parsers_host``, or its own flags say so)."""
        host = parsers_host | ((dec["flags"] & ref.HOST) != 0)
        status = np.where(host, STATUS_UNSURE, dec["status"]).astype(np.int32)

        def results(sl):
            return DecodingResults(status=status[sl].copy(), mocc=dec["mocc"][sl], btot=dec["btot"][sl],
                                   etot=dec["etot"][sl], flags=dec["flags"][sl].copy(), host=host[sl].copy())
        return results


#: The scale factors of a target with no rescaled row (shared: read only).
_NO_SCALES = np.zeros(0, np.float32)


def _gathered(parts, nscale) -> tuple:
    """The scale factors of a batch's targets, target after target in one array (each launch's
    kernel wrote an item's at its ``scale_base``): (where each target's start, the array)."""
    first = (np.cumsum(nscale) - nscale).astype(np.int64)
    flat = np.empty(int(nscale.sum()), np.float32)
    for items, base, values in parts:
        counts = nscale[items].astype(np.int64)
        if not counts.any():
            continue
        k = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
        flat[np.repeat(first[items], counts) + k] = values[np.repeat(np.asarray(base, np.int64), counts) + k]
    return first, flat


def _rows_to(out, flat_rows, launch, lengths, width: int = 6) -> None:
    """Each item's rows ``[L+1, width]`` (special states: 6 floats a row; decoding: 1) of a
    launch's flat array into ``out`` (rows of width 1 as a flat [L+1] array)."""
    for b, j in enumerate(launch.items.tolist()):
        s = int(launch.row_base[b]) // 6 * width
        rows = flat_rows[s:s + width * int(lengths[j] + 1)]
        out[j] = (rows.reshape(-1, width) if width > 1 else rows).copy()


class ForwardStage:
    """The Forward parser kernel over a resident database (``nj = 1``: multihit models, as
    hmmsearch and hmmscan configure them)."""

    def __init__(self, resident, scratch_bytes: int | None = None, max_cells: int | None = None,
                 storage: str | None = None):
        self.resident = resident
        #: where the rows go: "shared" or "global" for every model, or None: shared where they fit
        self.storage = storage
        self.device = resident.device
        self.scratch_bytes = tuning.FWD_SCRATCH_BYTES if scratch_bytes is None else int(scratch_bytes)
        self.max_cells = tuning.FWD_MAX_CELLS if max_cells is None else int(max_cells)
        self._position = np.full(resident.db.n, -1, np.int64)
        self._position[resident.indices] = np.arange(resident.n)
        self.pmove, ploop = ref.length_specials(np.arange(max(resident.max_length, 1) + 1), 1.0)
        rt = self.device.runtime
        with self.device.activate():
            self._pmove_dev, self._ploop_dev = rt.to_device(self.pmove), rt.to_device(ploop)
            self._dummy_i64 = rt.to_device(np.zeros(1, np.int64))
            self._dummy_f32 = rt.to_device(np.zeros(1, np.float32))
        self._streams: list = []
        self._next_stream = 0
        self.epoch = None  #: an event recorded by the owner: batches then record their spans after it
        self.last: dict = {}

    # ------------------------------------------------------------ batches
    def launch(self, jobs, rows: bool = False, backward: bool = False, decoding: bool = False) -> ForwardBatch:
        """Start the kernel on every job's targets (asynchronously) and return the batch; with
        ``backward`` the Backward parser runs after the Forward parser on the same targets, with
        ``decoding`` (Backward implied) ``p7_DomainDecoding`` after them; with ``rows`` the
        special-state rows of the parsers that ran come back too."""
        backward = backward or decoding
        if any(float(job.tables.nj) != 1.0 for job in jobs):
            raise ValueError("the Forward parser kernel takes multihit models (nj = 1) only")
        counts = [int(np.asarray(job.indices).size) for job in jobs]
        start = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        idx = np.concatenate([np.asarray(job.indices, np.int64) for job in jobs]) if jobs else np.zeros(0, np.int64)
        job_of = np.repeat(np.arange(len(jobs)), counts)
        pos = self._position[idx] if idx.size else np.zeros(0, np.int64)
        if (pos < 0).any():
            raise ValueError("the Forward parser was asked for zero-length targets")
        lengths = self.resident.lengths[pos].astype(np.int64) if idx.size else np.zeros(0, np.int64)
        reasons = [job.tables.exactness_conditions() for job in jobs]
        Qs = np.array([job.tables.Q for job in jobs], np.int64)
        Ms = np.array([job.tables.M for job in jobs], np.int64)
        on_gpu = np.array([reasons[m] is None for m in job_of.tolist()], bool)
        if idx.size:
            on_gpu &= lengths * Ms[job_of] <= self.max_cells
        launches, first, last = [], None, None
        if on_gpu.any():
            launches, first, last = self._launch(jobs, job_of, pos, lengths, Qs, on_gpu, rows or backward,
                                                 (backward, decoding))
        return ForwardBatch(self, jobs, start, rows, launches, last, (idx, lengths, on_gpu), reasons,
                            kernel_ms_start=first, backward=backward, decoding=decoding,
                            cells=int((lengths[on_gpu] * Ms[job_of[on_gpu]]).sum()))

    def _stream(self):
        """The next of a few streams (batches in flight run at once), and two new events (the
        batch's own: a stream's next batch may be launched before this one is collected)."""
        rt = self.device.runtime
        if len(self._streams) < tuning.FWD_STREAMS:
            self._streams.append(rt.stream())
        stream = self._streams[self._next_stream % len(self._streams)]
        self._next_stream += 1
        if self.device.simulator:
            return stream, None, None
        return stream, rt.event(), rt.event()

    def _launch(self, jobs, job_of, pos, lengths, Qs, on_gpu, rows, after) -> tuple:
        rt = self.device.runtime
        used = np.flatnonzero(np.bincount(job_of[on_gpu], minlength=len(jobs)))
        slot = np.full(len(jobs), -1, np.int64)
        slot[used] = np.arange(used.size)
        rfv = [np.ascontiguousarray(jobs[m].tables.rfv, np.float32).reshape(-1) for m in used.tolist()]
        tfv = [np.ascontiguousarray(jobs[m].tables.tfv, np.float32).reshape(-1) for m in used.tolist()]
        model_rfv = np.concatenate([[0], np.cumsum([a.size for a in rfv])[:-1]]).astype(np.int64)
        model_tfv = np.concatenate([[0], np.cumsum([a.size for a in tfv])[:-1]]).astype(np.int64)
        model_f = np.array([[jobs[m].tables.xe_move, jobs[m].tables.xe_loop, jobs[m].tables.tbm_min]
                            for m in used.tolist()], np.float32).reshape(-1)
        shared_q = self._shared_q()
        with self.device.activate():
            stream, start, stop = self._stream()
            dev = functools.partial(rt.to_device, stream=stream)  # every upload and array in the stream's order
            tables = dict(rfv=dev(np.concatenate(rfv)), tfv=dev(np.concatenate(tfv)),
                          model_q=dev(Qs[used].astype(np.int32)),
                          model_m=dev(np.array([jobs[m].tables.M for m in used.tolist()], np.int32)),
                          model_rfv=dev(model_rfv), model_tfv=dev(model_tfv), model_f=dev(model_f))
            if start is not None:
                start.record(stream)
            launches = []
            q_of = Qs[job_of]
            for chunk in self.resident.chunks():
                in_chunk = on_gpu & (pos >= chunk.lo) & (pos < chunk.hi)
                for storage, sel in (("shared", in_chunk & (q_of <= shared_q)), ("global", in_chunk & (q_of > shared_q))):
                    items = np.flatnonzero(sel)
                    if not items.size:
                        continue
                    cost = lengths[items] * q_of[items]
                    items = items[np.argsort(-cost, kind="stable")]  # costliest first
                    launches.append(self._launch_one(storage, chunk, stream, items, pos, lengths, q_of, slot[job_of],
                                                     tables, rows, after))
                if not self.resident.resident:  # the next chunk takes this one's place on the device
                    stream.synchronize()
            if stop is not None:
                stop.record(stream)
        return launches, start, stop

    def _shared_q(self) -> int:
        """The most vectors a model may have for its rows to go to shared memory (-1: none do):
        a block's groups' row buffers and exchange areas (:func:`segmented_launch`) must fit."""
        if self.storage == "global":
            return -1
        groups = max(1, 32 // (4 * tuning.FWD_SEGMENTS))
        floats = (self.device.smem_per_block_optin - 1024) // (4 * groups)
        return int(floats - 20) // 24

    def _launch_one(self, storage, chunk, stream, items, pos, lengths, q_of, model_of, tables, rows,
                    after) -> _Launch:
        """One launch of the Forward kernel on ``items`` (``rows``: writing its rows on the
        device), followed on the same stream by those of ``after`` = (backward, decoding): the
        Backward kernel and the decoding kernel."""
        rt = self.device.runtime
        dev = functools.partial(rt.to_device, stream=stream)  # every upload and array in the stream's order
        empty = functools.partial(rt.device_array, stream=stream)
        m = items.size
        L = lengths[items]
        q_max = int(q_of[items].max())
        spec = forward_spec(storage)
        kernel = build.load(spec, self.device)
        if storage == "shared":  # the segmented kernels (a group of 4 x FWD_SEGMENTS threads a target)
            fwd_launch = segmented_launch(self.device, spec.segments, m, q_max)
            scratch = self._dummy_f32
        else:  # a group of GROUP threads a target; under the simulator a block is one group (its warp
            # shuffles wait for the whole block)
            block = GROUP if self.device.simulator else tuning.FWD_BLOCK
            most = max(1, self.scratch_bytes // (4 * SCRATCH_PER_Q * q_max * GROUP))
            n_threads = GROUP * max(1, min(m, most, 2 if self.device.simulator else m))
            scratch = empty(SCRATCH_PER_Q * q_max * n_threads, np.float32)
            fwd_launch = (-(-n_threads // block), block, 0, None, n_threads)
        scale_base = np.concatenate([[0], np.cumsum(L)[:-1]]).astype(np.int64)
        out = dict(out_flags=empty(m, np.int32), out_xc=empty(m, np.float32), out_nscale=empty(m, np.int32),
                   out_scales=empty(max(int(L.sum()), 1), np.float32))
        row_base = None
        if rows:
            row_base = np.concatenate([[0], np.cumsum(6 * (L + 1))[:-1]]).astype(np.int64)
            out["out_rows"] = empty(int(6 * (L + 1).sum()), np.float32)
            row_base_dev = dev(row_base)
        else:
            out["out_rows"], row_base_dev = self._dummy_f32, self._dummy_i64
        targets = dict(residues=chunk.residues, word_offsets=chunk.word_offsets, lengths=chunk.lengths,
                       items=dev((pos[items] - chunk.lo).astype(np.int32)),
                       item_model=dev(model_of[items].astype(np.int32)), n_items=m,
                       pmove_by_length=self._pmove_dev, ploop_by_length=self._ploop_dev, scratch=scratch)
        blocks, block, shared, group_floats, n_threads = fwd_launch
        targets.update(n_threads=n_threads, **({} if group_floats is None else dict(group_floats=group_floats)))
        if shared > 48 * 1024 and not self.device.simulator:
            kernel.allow_dynamic_shared(shared)
        args = arguments(spec.args, counters=dev(np.zeros(1, np.int32)), scale_base=dev(scale_base),
                         want_rows=int(bool(rows)), row_base=row_base_dev, **targets, **tables, **out)
        kernel[blocks, block, stream, shared](*args)
        backward, decoding = after
        bwd_out = dec_out = None
        if backward:  # on the same stream: it reads the Forward rows just written, and reuses the scratch
            bwd_out = dict(out_flags=empty(m, np.int32), out_own=empty(m, np.int32),
                           out_rows=empty(int(6 * (L + 1).sum()), np.float32))
            bwd_spec = backward_spec(storage)
            bwd_tables = {a.name: tables[a.name] for a in bwd_spec.args if a.name in tables}
            bwd_args = arguments(bwd_spec.args, counters=dev(np.zeros(1, np.int32)), row_base=row_base_dev,
                                 fwd_rows=out["out_rows"], **targets, **bwd_tables, **bwd_out)
            bwd_kernel = build.load(bwd_spec, self.device)
            if shared > 48 * 1024 and not self.device.simulator:
                bwd_kernel.allow_dynamic_shared(shared)
            bwd_kernel[blocks, block, stream, shared](*bwd_args)
        if decoding:
            n_rows = int((L + 1).sum())
            dec_out = dict(out_status=empty(m, np.int32), out_flags=empty(m, np.int32),
                           out_mocc=empty(n_rows, np.float32), out_btot=empty(n_rows, np.float32),
                           out_etot=empty(n_rows, np.float32))
            dec_args = arguments(DECODE_ARGS, lengths=chunk.lengths, items=targets["items"], n_items=m,
                                 ploop_by_length=self._ploop_dev, row_base=row_base_dev, fwd_rows=out["out_rows"],
                                 bwd_rows=bwd_out["out_rows"], bwd_own=bwd_out["out_own"], **dec_out)
            dec_block = GROUP if self.device.simulator else DECODE_BLOCK
            build.load(DecodeSpec(), self.device)[-(-m // dec_block), dec_block, stream, 0](*dec_args)
        self.last = dict(storage=storage, threads=n_threads,
                         groups=n_threads // (4 * spec.segments if storage == "shared" else GROUP), items=m)
        return _Launch(items, out, scale_base, row_base, bwd_out, dec_out, stream)

    # ------------------------------------------------------------ one model, with libhmmer's fallback
    def run(self, model, indices, rows: bool = False, tables=None, fallback: bool = True,
            backward: bool = False, decoding: bool = False) -> ForwardResults:
        """``p7_ForwardParser`` of ``model`` (a :class:`hmmgpu.cpu.hmmerlib.HmmerModel`) on each
        target of ``indices`` (database indices of non-empty targets); with ``rows`` the
        special-state rows too (with ``backward``, Backward's too), with ``backward``
        ``p7_BackwardParser`` after it (``got.backward``), with ``decoding`` ``p7_DomainDecoding``
        after both (``got.decoding``).
        The kernel's values are IEEE's (pyhmmer's mode); the targets
        libhmmer recomputes run in the calling thread's floating-point mode (inside
        :func:`hmmgpu.host.flush_to_zero`, hmmsearch's), which for every other target gives
        the same score (:mod:`hmmgpu.cpu.fwdback`, exactness flags).

        ``tables``: the model's :class:`~hmmgpu.stages.forward.ForwardTables` (default: read from
        ``model``). ``fallback=False``: nothing is recomputed on the host (``model`` may then be
        None); the targets libhmmer would recompute get :data:`STATUS_UNSURE` and no score.
        ``self.last`` records the kernel time (``kernel_ms``, 0 under the simulator) and the
        targets left to the host."""
        if tables is None:
            tables = ref.ForwardTables.from_hmmer(model)
        batch = self.launch([ForwardJob(tables, np.asarray(indices, np.int64))], rows=rows, backward=backward,
                            decoding=decoding)
        got = batch.results()[0]
        if fallback:
            db = self.resident.db
            for j in np.flatnonzero(got.host).tolist():
                st, sc, xmx, _ = model.forward_parser(db.codes(int(got.indices[j])))
                got.status[j], got.scores[j] = st, sc
                got.scales[j] = xmx[1:, 5][xmx[1:, 5] != 1].copy()
                if got.rows is not None:
                    got.rows[j] = xmx
            if got.backward is not None:
                bwd = got.backward
                for j in np.flatnonzero(bwd.host).tolist():
                    st, sc, xmx, tot, own = model.backward_parser(db.codes(int(got.indices[j])))
                    bwd.status[j], bwd.scores[j], bwd.totscale[j], bwd.has_own_scales[j] = st, sc, tot, own
                    if bwd.rows is not None:
                        bwd.rows[j] = xmx
            if got.decoding is not None:
                dec = got.decoding
                for j in np.flatnonzero(dec.host).tolist():
                    dec.status[j], dec.mocc[j], dec.btot[j], dec.etot[j] = model.domain_decoding(
                        db.codes(int(got.indices[j])))
        self.last = dict(self.last, reason=got.reason, host=int(got.host.sum()), kernel_ms=batch.kernel_ms,
                         span=batch.span, cells=batch.cells,
                         backward_host=0 if got.backward is None else int(got.backward.host.sum()))
        return got
