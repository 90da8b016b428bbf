"""Host side of the Viterbi filter kernel: tables in slot layout, exactness conditions, launches.

:func:`tables` lays a model's word tables (:class:`hmmgpu.stages.profiles.WordProfile`) out in the
kernel's slots (padding at the front, see :mod:`.source`), with the substitutes that keep
the floor arithmetic wrap-free; :func:`exactness_conditions` checks, per model and database,
the bounds that make that arithmetic exact. :class:`VitKernels` loads and launches the
kernel; :class:`VitStage` runs the Viterbi filter alone on a list of targets (the audit, the
tests and the benchmark use it), finishing the uncertain targets with the CPU reference.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hmmgpu.constants import BASE_W
from hmmgpu.stages.profiles import xw_move_table
from hmmgpu.gpu.runtime import build, tuning
from hmmgpu.gpu.runtime.kargs import arguments
from hmmgpu.gpu.vit.source import ARGS, FLOOR, NX, SPECIAL_CODES, STATUS_UNCERTAIN, TRANSITION_ROWS, Counter, VitSpec

_ROW = {name: r for r, name in enumerate(TRANSITION_ROWS)}
_NORMAL_CODES = np.array([x for x in range(NX) if x not in SPECIAL_CODES])


def lowest_b(max_length: int) -> int:
    """The smallest value B takes on targets up to ``max_length`` residues: ``N + move(L)``."""
    return BASE_W + int(xw_move_table(max(int(max_length), 1))[max(int(max_length), 1)])


@dataclass(frozen=True)
class VitTables:
    """A model's Viterbi-filter tables for one kernel shape and database."""

    spec: VitSpec
    emissions: np.ndarray  #: uint32 [x][q][t]
    transitions: np.ndarray  #: uint32 [row][q][t]
    dd_sums: np.ndarray  #: int32 [lane]: sum of the lane's D->D words
    overflow_at: np.ndarray  #: int32 [x]: a row maximum of m at or above this may overflow
    ddbound: int


def _words(per_slot: np.ndarray, Q: int) -> np.ndarray:
    """(R, 64Q) int16 slot values -> uint32 words [r][q][t] (slot s: lane s // Q, word s % Q)."""
    R = per_slot.shape[0]
    lanes = (per_slot.astype(np.int64) & 0xFFFF).reshape(R, 64, Q)  # [r][lane][q]
    lo, hi = lanes[:, 0::2, :], lanes[:, 1::2, :]  # [r][t][q]
    return np.ascontiguousarray((lo | (hi << 16)).astype(np.uint32).transpose(0, 2, 1).reshape(-1))


def slot_values(word, Q: int, lowest: int) -> tuple:
    """(emissions (29, 64Q), transitions (8, 64Q)) int64 per slot, with the kernel's substitutes."""
    M = word.M
    S = 64 * Q
    pad = S - M
    tw = np.asarray(word.tw, dtype=np.int64)
    trans = np.full((len(TRANSITION_ROWS), S), FLOOR, dtype=np.int64)
    trans[_ROW["BM"], :pad] = -lowest - 16384  # padding stays below every real cell
    trans[:, pad:] = tw
    for row in ("MM", "IM", "DM"):  # into node 1: -inf in HMMER, always dominated here
        trans[_ROW[row], pad] = FLOOR
    for row in ("MI", "II", "DD"):  # out of node M: unobservable
        trans[_ROW[row], S - 1] = FLOOR
    emis = np.full((NX, S), FLOOR, dtype=np.int64)
    emis[:, pad:] = np.asarray(word.rw, dtype=np.int64)
    emis[list(SPECIAL_CODES)] = FLOOR  # -inf: -16384 here and again in the kernel's second step
    return emis, trans


def exactness_conditions(word, max_length: int) -> str | None:
    """Why the kernel's floor arithmetic would not be exact for this model, or None (see
    :mod:`.source`: transitions >= -16384, ``Bmin + tBM >= FLOOR``, ``Bmin + tBM + rw >= FLOOR``
    for every real residue, no -inf emission of a real residue, ``FLOOR + ddbound <= Bmin``)."""
    M = word.M
    tw = np.asarray(word.tw, dtype=np.int64)
    rw = np.asarray(word.rw, dtype=np.int64)
    lowest = lowest_b(max_length)
    used = [tw[_ROW["BM"]]] + [tw[_ROW[r], 1:] for r in ("MM", "IM", "DM")] + \
        [tw[_ROW[r], : M - 1] for r in ("MD", "MI", "II", "DD")]
    if any(v.size and v.min() < -16384 for v in used):
        return "a transition score below -16384"
    if (rw[list(SPECIAL_CODES)] != -32768).any():
        return "a finite score for a gap or stop code"
    real = rw[_NORMAL_CODES]
    if (real <= -32768).any():
        return "a residue with an -inf emission score"
    if (lowest + tw[_ROW["BM"]][None, :] + real).min() < FLOOR:
        return "an emission score too low for the floor"
    if FLOOR + int(word.ddbound) > lowest:
        return "the lazy-F bound"
    return None


def tables(word, spec: VitSpec, max_length: int) -> VitTables:
    """The kernel's tables of a model (call :func:`exactness_conditions` first)."""
    Q = spec.Q
    emis, trans = slot_values(word, Q, lowest_b(max_length))
    lane_sums = trans[_ROW["DD"]].reshape(64, Q).sum(axis=1).astype(np.int32)
    rw = np.asarray(word.rw, dtype=np.int64)
    overflow_at = np.full(NX, 32767, np.int32)
    overflow_at[_NORMAL_CODES] = 32767 - rw[_NORMAL_CODES].max(axis=1)
    return VitTables(spec=spec, emissions=_words(emis, Q), transitions=_words(trans, Q), dd_sums=lane_sums,
                     overflow_at=overflow_at, ddbound=int(word.ddbound))


class VitKernels:
    """The Viterbi filter kernels of one device: shapes, loading, grid sizes, launches."""

    def __init__(self, device, transitions: str | None = None):
        self.device = device
        self.transitions = transitions  #: force "registers" or "shared" (tests); None: by Q
        self._grids = {}

    def spec(self, M: int) -> VitSpec | None:
        """The specialisation for a model of ``M`` nodes (None: too long for the GPU shapes)."""
        Q = tuning.vit_q(M)
        if Q is None:
            return None
        in_registers = Q <= tuning.VIT_TRANSITIONS_IN_REGISTERS_MAX_Q
        spec = VitSpec(Q, self.transitions or ("registers" if in_registers else "shared"))
        size = spec.shared_words * 4
        if size + 1024 > self.device.smem_per_block_optin:
            return None
        return VitSpec(Q, spec.transitions, "static" if size <= tuning.STATIC_SHARED_MAX_BYTES else "dynamic")

    def all_specs(self) -> list:
        """Every specialisation of the shape table (what ``hmmgpu warmup`` compiles)."""
        return [s for s in (self.spec(64 * Q) for Q in tuning.VIT_Q) if s is not None]

    def launch(self, spec: VitSpec, chunk, stream, *, items, n_items_at, n_items_slot, counters, tables: VitTables,
               device_tables: dict, move_by_length, out_status, out_xc) -> None:
        """Launch the kernel on the work list ``items[:n_items_at[n_items_slot]]`` (asynchronous)."""
        kernel = build.load(spec, self.device)
        shared = spec.shared_words * 4
        dynamic = spec.shared == "dynamic"
        if spec not in self._grids:
            self._grids[spec] = tuning.persistent_grid(kernel, self.device, shared, dynamic)
        grid, block = self._grids[spec]
        args = arguments(ARGS, residues=chunk.residues, word_offsets=chunk.word_offsets, lengths=chunk.lengths,
                         items=items, n_items_at=n_items_at, n_items_slot=n_items_slot, counters=counters,
                         emissions=device_tables["emissions"], transitions=device_tables["transitions"],
                         dd_sums=device_tables["dd_sums"], overflow_at=device_tables["overflow_at"],
                         ddbound=tables.ddbound, move_by_length=move_by_length, out_status=out_status, out_xc=out_xc)
        kernel[grid, block, stream, shared if dynamic else 0](*args)


class VitStage:
    """The Viterbi filter alone over a resident database, on a list of database indices."""

    def __init__(self, resident, transitions: str | None = None):
        self.resident = resident
        self.device = resident.device
        self.kernels = VitKernels(self.device, transitions)
        self.last: dict = {}

    def run(self, profile, indices) -> tuple:
        """(status int8, C int32) of each target in ``indices`` (database indices), as
        ``p7_ViterbiFilter``: status OK or RANGE; uncertain targets and models the kernel
        cannot take exactly are finished with the CPU reference."""
        from hmmgpu.cpu import filters as cpu_filters

        rt = self.device.runtime
        idx = np.asarray(indices, np.int64)
        word = profile.word
        spec = self.kernels.spec(word.M)
        reason = "no kernel shape" if spec is None else exactness_conditions(word, self.resident.max_length)
        status = np.zeros(idx.size, np.int8)
        xc = np.zeros(idx.size, np.int32)
        if reason is not None or not idx.size:
            self.last = dict(spec=spec, cpu_reason=reason, uncertain=0, kernel_ms=0.0)
            if idx.size:
                status, xc = cpu_filters.viterbi_filter(profile, self.resident.db, idx)
            return status, xc
        t = tables(word, spec, self.resident.max_length)
        position = np.full(self.resident.db.n, -1, np.int64)
        position[self.resident.indices] = np.arange(self.resident.n)
        pos = position[idx]
        if (pos < 0).any():
            raise ValueError("the Viterbi filter was asked for zero-length targets")
        kernel_ms = 0.0
        with self.device.activate():
            stream = rt.stream()
            dev = dict(emissions=rt.to_device(t.emissions), transitions=rt.to_device(t.transitions),
                       dd_sums=rt.to_device(t.dd_sums), overflow_at=rt.to_device(t.overflow_at))
            move = rt.to_device(xw_move_table(max(self.resident.max_length, 1)).astype(np.int32))
            for chunk in self.resident.chunks():
                sel = np.flatnonzero((pos >= chunk.lo) & (pos < chunk.hi))
                if not sel.size:
                    continue
                items = rt.to_device((pos[sel] - chunk.lo).astype(np.int32))
                counts = rt.to_device(np.array([sel.size, 0], np.int32))
                counters = rt.to_device(np.zeros(len(Counter), np.int32))
                out_status = rt.device_array(sel.size, np.int8)
                out_xc = rt.device_array(sel.size, np.int32)
                start, stop = rt.event(), rt.event()
                start.record(stream)
                self.kernels.launch(spec, chunk, stream, items=items, n_items_at=counts, n_items_slot=0,
                                    counters=counters, tables=t, device_tables=dev, move_by_length=move,
                                    out_status=out_status, out_xc=out_xc)
                stop.record(stream)
                stop.synchronize()
                kernel_ms += rt.elapsed_ms(start, stop)
                status[sel] = out_status.copy_to_host()
                xc[sel] = out_xc.copy_to_host()
        uncertain = np.flatnonzero(status == STATUS_UNCERTAIN)
        if uncertain.size:
            status[uncertain], xc[uncertain] = cpu_filters.viterbi_filter(profile, self.resident.db, idx[uncertain])
        self.last = dict(spec=spec, cpu_reason=None, uncertain=int(uncertain.size), kernel_ms=kernel_ms)
        return status, xc
