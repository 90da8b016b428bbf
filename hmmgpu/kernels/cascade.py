"""The filter cascade on the GPU: MSV, bias filter and Viterbi filter, model after model.

For each model the host uploads its tables and launches three kernels on one stream:
the SSV/MSV kernel over every position (:mod:`.msv`) writes the targets that pass F1; the
bias kernel (:mod:`.bias`) scores those, decides what it can and compacts the ones that need
the Viterbi filter into a work list; the Viterbi kernel (:mod:`.vit`) runs on that list.
The results (counters, lists, scores) come back with asynchronous copies into pinned
memory, and an event marks the end. :meth:`GpuCascade.submit` returns at once, so the
launches of the next models queue behind it with no host synchronisation in between; a
ring of :data:`SLOTS` buffer sets lets that many models be in flight. :meth:`Ticket.result`
waits for the event and finishes on the host what the GPU left to it, with HMMER's own
arithmetic: the decisions inside the P-value bands, the few targets whose bias score or
Viterbi filter the kernels flagged, the fallback targets of the J-state MSV, and models
whose shape or scores the kernels do not take (run on the CPU reference entirely).

A database larger than the GPU's memory budget is processed chunk after chunk, each model
synchronously (correct, slower).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .. import cpu_filters, stats
from ..cascade import CascadeResult, MsvResult, ViterbiResult, run_cascade
from ..profiles import null_table, tjb_table, xw_move_table
from . import build
from .bias import BiasSpec, Decision, length_tables
from .bias import ARGS as BIAS_ARGS
from .kargs import arguments
from .msv.launch import MsvKernels, MsvStage, model_tables, scalars
from .msv.source import NX as MSV_NX
from .msv.source import Counter as MsvCounter
from .msv.source import row_stride
from .vit.launch import VitKernels, VitStage, exactness_conditions, tables
from .vit.source import NX as VIT_NX
from .vit.source import STATUS_UNCERTAIN, TRANSITION_ROWS

#: Models in flight on the GPU at once (buffer sets in the ring).
SLOTS = 4
#: Counter array of one slot: the MSV kernel's counters, then the Viterbi work-list count
#: and the Viterbi kernel's work counter.
_VIT_LIST = len(MsvCounter)
_VIT_WORK = _VIT_LIST + 1
_N_COUNTERS = _VIT_WORK + 1
#: Bias kernel threads per block and blocks per SM.
_BIAS_BLOCK = 128
_BIAS_BLOCKS_PER_SM = 4


def compile_all(device_id: int = 0, lanes: str = "auto", notice=None) -> int:
    """Compile every kernel shape of the cascade for a device (``hmmgpu warmup``)."""
    from .device import GpuDevice

    device = GpuDevice.open(device_id)
    specs = MsvKernels(device, lanes).all_specs() + VitKernels(device).all_specs() + [BiasSpec()]
    return build.compile_ahead(specs, device, notice=notice)


def needed_specs(msv: MsvKernels, vit: VitKernels, lengths) -> list:
    """The kernel specialisations models of these lengths use (the bias kernel included)."""
    specs = [BiasSpec()]
    for M in sorted(set(int(m) for m in lengths)):
        specs += [s for s in (msv.spec(M), vit.spec(M)) if s is not None]
    return list(dict.fromkeys(specs))


@dataclass
class _Slot:
    """Device and pinned host buffers of one model in flight."""

    counters: object
    msv_pos: object
    msv_status: object
    msv_xj: object
    fallback: object
    filtersc: object
    decision: object
    vit_pos: object
    vit_from: object
    vit_status: object
    vit_xc: object
    host: dict  #: pinned host mirrors of the results
    zeros: object  #: pinned zeros for resetting the counters
    staging: dict  #: per model table: (pinned host buffer, device buffer) of the largest size
    event: object = None
    tables: dict = None  #: device views of the current model's tables

    def stage(self, name: str, array: np.ndarray, stream):
        """Copy a model table into this slot's device buffer, asynchronously; its device view."""
        pinned, device = self.staging[name]
        n = array.size
        pinned[:n] = array.reshape(-1)
        view = device[:n]
        view.copy_to_device(pinned[:n], stream=stream)
        return view


class Ticket:
    """A model submitted to the GPU; :meth:`result` waits for it and finishes it."""

    def __init__(self, cascade, profile, options, slot=None, plan=None, done=None):
        self._cascade = cascade
        self.profile = profile
        self.options = options
        self.slot = slot
        self.plan = plan
        self._done = done
        self.submitted = time.perf_counter()

    def ready(self) -> bool:
        """The GPU has finished this model (never blocks)."""
        return self._done is not None or self._cascade.device.simulator or self.slot.event.query()

    def result(self) -> CascadeResult:
        """Wait for the GPU, finish on the host, and return the cascade's result."""
        if self._done is None:
            self._done = self._cascade._finish(self)
        return self._done


class GpuCascade:
    """The filter cascade of any number of models over one resident database."""

    def __init__(self, resident, lanes: str = "auto"):
        from numba import cuda

        self.resident = resident
        self.device = resident.device
        self.msv = MsvKernels(self.device, lanes)
        self.vit = VitKernels(self.device)
        self.lanes = self.msv.lanes
        self.msv_stage = MsvStage(resident, lanes)
        self.vit_stage = VitStage(resident)
        self.kernel_ms = dict(msv=0.0, bias=0.0, viterbi=0.0)  #: GPU time of each kernel, summed
        self.host_seconds = dict(submit=0.0, wait=0.0, finish=0.0)  #: the host's side of the cascade
        self._bias_kernel = None
        max_len = max(resident.max_length, 1)
        self.max_length = max_len
        n = resident.largest_chunk
        with self.device.activate():
            self.stream = cuda.stream()
            self._db_tables = {k: cuda.to_device(v) for k, v in length_tables(max_len).items()}
            self._db_tables["move_by_length"] = cuda.to_device(xw_move_table(max_len).astype(np.int32))
            self._db_tables["tjb32"] = cuda.to_device(tjb_table(max_len).astype(np.int32))
            self._slots = [self._new_slot(n) for _ in range(SLOTS)] if resident.resident else []
        self._next = 0
        self._in_flight: list = []

    def _new_slot(self, n: int) -> _Slot:
        from numba import cuda

        dev = dict(counters=cuda.device_array(_N_COUNTERS, np.int32), msv_pos=cuda.device_array(n, np.int32),
                   msv_status=cuda.device_array(n, np.int8), msv_xj=cuda.device_array(n, np.int32),
                   fallback=cuda.device_array(n, np.int32), filtersc=cuda.device_array(n, np.float32),
                   decision=cuda.device_array(n, np.int8), vit_pos=cuda.device_array(n, np.int32),
                   vit_from=cuda.device_array(n, np.int32), vit_status=cuda.device_array(n, np.int8),
                   vit_xc=cuda.device_array(n, np.int32))
        host = {k: cuda.pinned_array(v.shape, v.dtype) for k, v in dev.items()}
        zeros = cuda.pinned_array(_N_COUNTERS, np.int32)
        zeros[:] = 0
        q_max = 64  # the largest Q of the shape tables
        sizes = dict(ssv_table=(MSV_NX * row_stride(32, q_max), np.uint32),
                     msv_table=(MSV_NX * row_stride(32, q_max), np.uint32),
                     threshold_by_length=(self.max_length + 1, np.int32), scalars=(8, np.int32),
                     odds=(2 * VIT_NX, np.float32), bands=(4, np.float32),
                     emissions=(VIT_NX * 32 * q_max, np.uint32),
                     transitions=(len(TRANSITION_ROWS) * 32 * q_max, np.uint32), dd_sums=(64, np.int32),
                     overflow_at=(VIT_NX, np.int32))
        staging = {k: (cuda.pinned_array(size, dtype), cuda.device_array(size, dtype))
                   for k, (size, dtype) in sizes.items()}
        return _Slot(**dev, host=host, zeros=zeros, staging=staging)

    @property
    def gpu_ms(self) -> float:
        """GPU time of the cascade's kernels so far (milliseconds)."""
        return sum(self.kernel_ms.values())

    def compile_for(self, lengths, notice=None) -> int:
        """Compile, in parallel processes, the kernels that models of these lengths need and
        the device lacks (one line on stderr while it does); returns how many."""
        specs = needed_specs(self.msv, self.vit, lengths)
        return build.compile_ahead(specs, self.device, processes=len(specs), notice=notice)

    # ------------------------------------------------------------ stage methods (audit, tests)
    def bias_scores(self, profile, indices) -> np.ndarray:
        """Bias filter scores of ``indices`` (the CPU reference: the GPU computes them inside
        the cascade, where each is checked or recomputed on the host)."""
        return cpu_filters.bias_filter(profile, self.resident.db, indices)

    def viterbi(self, profile, indices) -> tuple:
        """(status, C) of the Viterbi filter kernel on ``indices``."""
        return self.vit_stage.run(profile, indices)

    # ------------------------------------------------------------ the cascade
    def run(self, profile, options) -> CascadeResult:
        """The cascade of one model, waiting for it."""
        return self.submit(profile, options).result()

    def submit(self, profile, options) -> Ticket:
        """Queue one model's cascade on the GPU and return at once."""
        msv_spec = self.msv.spec(profile.M)
        if msv_spec is None or not self.resident.resident:
            # too long for the kernel shapes, or a chunked database: synchronously
            backend = _StageBackend(self, use_gpu_msv=msv_spec is not None)
            return Ticket(self, profile, options, done=run_cascade(backend, profile, options, self.resident.db))
        from numba import cuda

        while len(self._in_flight) >= SLOTS:  # the ring is full: the oldest must be finished first
            self._in_flight[0].result()
        slot = self._slots[self._next]
        self._next = (self._next + 1) % SLOTS
        vit_spec = self.vit.spec(profile.M)
        vit_reason = "no kernel shape" if vit_spec is None else exactness_conditions(profile.word,
                                                                                     self.resident.max_length)
        byte = profile.byte
        mu, lam = profile.evalue_parameters[:2]
        bands = np.array([*stats.score_threshold(mu, lam, options.F1), *stats.score_threshold(mu, lam, options.F2)],
                         np.float32)
        host_tables = dict(zip(("ssv_table", "msv_table"), model_tables(byte, msv_spec)))
        host_tables.update(threshold_by_length=stats.msv_thresholds(profile, self.max_length, options.F1),
                           scalars=scalars(byte), odds=profile.bias.emission_odds.reshape(-1), bands=bands)
        vt = None
        if vit_reason is None:
            vt = tables(profile.word, vit_spec, self.max_length)
            host_tables.update(emissions=vt.emissions, transitions=vt.transitions, dd_sums=vt.dd_sums,
                               overflow_at=vt.overflow_at)
        chunk = next(self.resident.chunks())
        s = self.stream
        with self.device.activate():
            slot.tables = {k: slot.stage(k, np.ascontiguousarray(v), s) for k, v in host_tables.items()}
            slot.counters.copy_to_device(slot.zeros, stream=s)
            start = cuda.event()
            start.record(s)
            self.msv.launch(msv_spec, chunk, s, ssv_table=slot.tables["ssv_table"],
                            msv_table=slot.tables["msv_table"], tjb_by_length=self._db_tables["tjb32"],
                            threshold_by_length=slot.tables["threshold_by_length"], scalars=slot.tables["scalars"],
                            counters=slot.counters[:len(MsvCounter)], out_pos=slot.msv_pos,
                            out_status=slot.msv_status, out_xj=slot.msv_xj, fallback_pos=slot.fallback)
            after_msv = cuda.event()
            after_msv.record(s)
            self._launch_bias(chunk, slot, profile, options)
            after_bias = cuda.event()
            after_bias.record(s)
            if vt is not None:
                self.vit.launch(vit_spec, chunk, s, items=slot.vit_pos, n_items_at=slot.counters,
                                n_items_slot=_VIT_LIST, counters=slot.counters[_VIT_WORK:], tables=vt,
                                device_tables=slot.tables, move_by_length=self._db_tables["move_by_length"],
                                out_status=slot.vit_status, out_xc=slot.vit_xc)
            stop = cuda.event()
            stop.record(s)
            for name in ("counters", "msv_pos", "msv_status", "msv_xj", "fallback", "filtersc", "decision",
                         "vit_from", "vit_status", "vit_xc"):
                getattr(slot, name).copy_to_host(slot.host[name], stream=s)
            slot.event = cuda.event()
            slot.event.record(s)
        ticket = Ticket(self, profile, options, slot=slot,
                        plan=dict(events=(start, after_msv, after_bias, stop), vit=vt is not None, vit_reason=vit_reason))
        self.host_seconds["submit"] += time.perf_counter() - ticket.submitted
        self._in_flight.append(ticket)
        return ticket

    def _launch_bias(self, chunk, slot, profile, options) -> None:
        if self._bias_kernel is None:
            self._bias_kernel = build.load(BiasSpec(), self.device.lane_binding)
        grid = 1 if self.device.simulator else self.device.sm_count * _BIAS_BLOCKS_PER_SM
        block = 32 if self.device.simulator else _BIAS_BLOCK
        t = self._db_tables
        args = arguments(BIAS_ARGS, residues=chunk.residues, word_offsets=chunk.word_offsets, lengths=chunk.lengths,
                         msv_pos=slot.msv_pos, msv_status=slot.msv_status, msv_xj=slot.msv_xj,
                         n_msv_at=slot.counters, n_msv_slot=int(MsvCounter.OUT), odds=slot.tables["odds"],
                         t10=profile.bias.t10, t11=profile.bias.t11, bias_on=int(options.bias_filter),
                         p1_by_length=t["p1_by_length"], q1_by_length=t["q1_by_length"],
                         first_by_length=t["first_by_length"], second_by_length=t["second_by_length"],
                         null_by_length=t["null_by_length"], tjb_by_length=t["tjb32"], bands=slot.tables["bands"],
                         filtersc=slot.filtersc, decision=slot.decision, vit_pos=slot.vit_pos,
                         vit_from=slot.vit_from, n_vit_at=slot.counters, n_vit_slot=_VIT_LIST)
        self._bias_kernel[grid, block, self.stream, 0](*args)

    def _finish(self, ticket: Ticket) -> CascadeResult:
        """Wait for a ticket's event and take the host's part of the cascade (module header)."""
        from numba import cuda

        slot = ticket.slot
        t0 = time.perf_counter()
        slot.event.synchronize()
        self._in_flight.remove(ticket)
        self.host_seconds["wait"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        plan = ticket.plan
        profile, options = ticket.profile, ticket.options
        h = slot.host
        n_out = int(h["counters"][MsvCounter.OUT])
        n_fallback = int(h["counters"][MsvCounter.FALLBACK])
        n_vit = int(h["counters"][_VIT_LIST])
        indices = self.resident.indices
        db = self.resident.db
        reference = _Reference(profile, db)
        pos = indices[h["msv_pos"][:n_out]]
        usc = MsvResult(pos, h["msv_status"][:n_out], h["msv_xj"][:n_out]).scores(db.lengths)
        filtersc = h["filtersc"][:n_out].copy()
        decision = h["decision"][:n_out].copy()
        vsc = np.full(n_out, np.nan, np.float32)  # NaN: the GPU did not run (or finish) the Viterbi filter
        if plan["vit"] and n_vit:
            src = h["vit_from"][:n_vit]
            st = h["vit_status"][:n_vit]
            ok = st != STATUS_UNCERTAIN
            vsc[src[ok]] = ViterbiResult(pos[src[ok]], st[ok], h["vit_xc"][:n_vit][ok]).scores(db.lengths)
        if n_fallback:  # the J-state MSV the GPU's max(S, B) form cannot finish: HMMER's own
            fb = indices[h["fallback"][:n_fallback]]
            fsc = reference.msv(fb)
            keep = stats.passes_gumbel(fsc, null_table(self.max_length)[db.lengths[fb]], *profile.evalue_parameters[:2],
                                       options.F1)
            k = int(keep.sum())
            pos = np.concatenate([pos, fb[keep]])
            usc = np.concatenate([usc, fsc[keep]])
            filtersc = np.concatenate([filtersc, np.zeros(k, np.float32)])
            decision = np.concatenate([decision, np.full(k, Decision.HOST, np.int8)])
            vsc = np.concatenate([vsc, np.full(k, np.nan, np.float32)])
        survivors, n_past_bias = _decide(profile, options, db, self.max_length, reference, pos, usc, filtersc,
                                         decision, vsc)
        gpu_s = 0.0
        if not self.device.simulator:
            ev = plan["events"]
            for name, a, b in (("msv", ev[0], ev[1]), ("bias", ev[1], ev[2]), ("viterbi", ev[2], ev[3])):
                ms = cuda.event_elapsed_time(a, b)
                self.kernel_ms[name] += ms
                gpu_s += ms / 1e3
        seconds = dict(gpu=gpu_s, host=time.perf_counter() - t0)
        self.host_seconds["finish"] += seconds["host"]
        return CascadeResult(survivors=np.sort(survivors), n_past_msv=int(pos.size), n_past_bias=n_past_bias,
                             n_past_vit=int(survivors.size), seconds=seconds)

    def close(self) -> None:
        for ticket in list(self._in_flight):
            ticket.result()
        self._slots = []
        self._db_tables = {}
        self.resident.close()


def _decide(profile, options, db, max_length, reference, pos, usc, filtersc, decision, vsc):
    """The host's part of the cascade for the targets that passed MSV: (survivors, n_past_bias).

    ``usc``: MSV scores (nats); ``filtersc``: the GPU's bias scores (decided targets);
    ``decision``: the bias kernel's :class:`Decision`; ``vsc``: the GPU's Viterbi filter
    scores, NaN where the host must run it (HMMER's own function, through ``reference``).
    """
    mu, lam, vmu, vlam = profile.evalue_parameters[:4]
    host = decision == Decision.HOST
    if host.any():  # the bias score again with HMMER's own code, and the F1 test
        hp = pos[host]
        filtersc[host] = reference.bias(hp) if options.bias_filter else null_table(max_length)[db.lengths[hp]]
        passed = stats.passes_gumbel(usc[host], filtersc[host], mu, lam, options.F1)
        decision[host] = np.where(passed, Decision.VITERBI_OR_SKIP, Decision.FAIL)
        vsc[host] = np.nan
    alive = decision != Decision.FAIL
    survive = decision == Decision.SURVIVE
    maybe_skip = decision == Decision.VITERBI_OR_SKIP
    if maybe_skip.any():  # P <= F2 decides whether the Viterbi filter is skipped
        skip = stats.passes_gumbel(usc[maybe_skip], filtersc[maybe_skip], mu, lam, options.F2)
        survive[np.flatnonzero(maybe_skip)[skip]] = True
    need = alive & ~survive
    redo = need & np.isnan(vsc)
    if redo.any():
        vsc[redo] = reference.viterbi(pos[redo])
    if need.any():
        survive[np.flatnonzero(need)[stats.passes_gumbel(vsc[need], filtersc[need], vmu, vlam, options.F2)]] = True
    return pos[survive], int(alive.sum())


class _Reference:
    """HMMER's own filter functions (libhmmer) for the few targets the kernels leave to the host.

    Made on first use: most models never need it.
    """

    def __init__(self, profile, db):
        self.profile = profile
        self.db = db
        self._model = None

    def _hmmer(self):
        if self._model is None:
            from ..hmmerlib import HmmerModel

            self._model = HmmerModel(self.profile.hmm)
        return self._model

    def _scores(self, fn, positions) -> np.ndarray:
        return np.array([fn(self.db.codes(int(p))) for p in positions], np.float32)

    def msv(self, positions) -> np.ndarray:
        """``p7_MSVFilter`` scores (nats, +inf on overflow)."""
        return self._scores(lambda c: self._hmmer().msv(c)[1], positions)

    def bias(self, positions) -> np.ndarray:
        """``p7_bg_FilterScore`` scores (nats)."""
        return self._scores(self._hmmer().bias_filter_score, positions)

    def viterbi(self, positions) -> np.ndarray:
        """``p7_ViterbiFilter`` scores (nats, +inf on overflow)."""
        return self._scores(lambda c: self._hmmer().viterbi_filter(c)[1], positions)


class _StageBackend:
    """The cascade's stage methods for a model the pipelined path does not take."""

    def __init__(self, gpu: GpuCascade, use_gpu_msv: bool):
        self.gpu = gpu
        self.use_gpu_msv = use_gpu_msv

    def msv(self, profile, thresholds=None):
        from ..cascade import MsvResult

        if self.use_gpu_msv:
            return MsvResult(*self.gpu.msv_stage.run(profile, thresholds))
        db = self.gpu.resident.db
        status, xj = cpu_filters.msv_filter(profile, db)
        passed = db.lengths > 0
        if thresholds is not None:
            passed &= (status != 0) | (xj >= np.asarray(thresholds)[db.lengths])
        idx = np.flatnonzero(passed)
        return MsvResult(idx, status[idx], xj[idx])

    def bias(self, profile, indices):
        return cpu_filters.bias_filter(profile, self.gpu.resident.db, indices)

    def viterbi(self, profile, indices):
        idx = np.asarray(indices, np.int64)
        return ViterbiResult(idx, *self.gpu.vit_stage.run(profile, idx))


__all__ = ["GpuCascade", "Ticket", "compile_all", "SLOTS"]
