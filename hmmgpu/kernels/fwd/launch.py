"""Host side of the Forward bound kernel: tables, launches, and the decision it allows.

:func:`tables` lays a model's Forward odds (:class:`hmmgpu.profiles.ForwardProfile`) out in
the kernel's columns (see :mod:`.source`); :class:`FwdKernels` loads and launches the kernel
(the cascade launches it after the Viterbi kernel, on the same stream); :func:`ruled_out`
is the host's decision (a survivor is dropped only far below the F3 threshold);
:class:`FwdStage` runs the kernel alone on a list of targets (the tests and the audit).
"""
from __future__ import annotations

import math

import numpy as np

from ...constants import LOG2, STATUS_RANGE
from .. import build, tuning
from ..kargs import arguments
from .source import ARGS, MARGIN_BITS, NX, TRANSITION_ROWS, Counter, FwdSpec, shared_bytes

#: The transition rows' source: (column of ``transition_odds``, its row offset: -1 for the
#: transitions into node k, which HMMER keeps on node k-1's row, 0 for those out of node k).
_SOURCE = dict(MM=(0, -1), IM=(1, -1), DM=(2, -1), BM=(3, -1), MI=(6, 0), II=(7, 0), MD=(4, 0), DD=(5, 0))


def node_slots(M: int) -> int:
    """``N``: the model's nodes rounded up to whole runs of the 32 lanes."""
    return 32 * max(1, -(-int(M) // 32))


def max_node_slots() -> int:
    """The largest ``N`` the kernel takes (its rows fill :data:`tuning.FWD_SHARED_MAX_BYTES`)."""
    N = 32
    while shared_bytes(N + 32) <= tuning.FWD_SHARED_MAX_BYTES:
        N += 32
    return N


def columns(M: int) -> np.ndarray:
    """The table column of each node (0-based): node ``n`` is slot ``n mod S`` of lane ``n div S``."""
    S = node_slots(M) // 32
    n = np.arange(M)
    return (n % S) * 32 + n // S


def tables(forward) -> np.ndarray:
    """float32 ``[row][column]``: the rows :data:`TRANSITION_ROWS`, then the :data:`NX` emission rows."""
    e = forward.emission_odds
    t = forward.transition_odds
    M = e.shape[1]
    N = node_slots(M)
    out = np.zeros((len(TRANSITION_ROWS) + NX, N), np.float32)
    col = columns(M)
    k = np.arange(1, M + 1)
    for r, row in enumerate(TRANSITION_ROWS):
        source, shift = _SOURCE[row]
        out[r, col] = t[k + shift, source]
    out[len(TRANSITION_ROWS):, col] = e[:NX]
    return out.reshape(-1)


def threshold_bits(tau: float, lam: float, F3: float) -> float:
    """The smallest bit score whose Forward P-value ``esl_exp_surv`` is at most ``F3``."""
    return tau + math.log(1.0 / F3) / lam


def ruled_out(scores: np.ndarray, filtersc: np.ndarray, tau: float, lam: float, F3: float) -> np.ndarray:
    """Where the kernel's Forward ``scores`` (nats) prove that HMMER's Forward filter fails:
    finite, and more than :data:`MARGIN_BITS` below the F3 threshold (NaN: not computed)."""
    scores = np.asarray(scores, np.float64)
    bits = (scores - np.asarray(filtersc, np.float64)) / LOG2
    with np.errstate(invalid="ignore"):
        return np.isfinite(scores) & (bits < threshold_bits(tau, lam, F3) - MARGIN_BITS)


class FwdKernels:
    """The Forward bound kernel of one device: which models it takes, grid sizes, launches."""

    def __init__(self, device):
        self.device = device
        self.spec = FwdSpec()
        self._grids = {}

    def takes(self, M: int) -> bool:
        """The model's rows fit the kernel's shared memory."""
        return node_slots(M) <= max_node_slots()

    def _grid(self, kernel, shared: int) -> int:
        """Blocks (one warp each) of a persistent grid for ``shared`` bytes per block."""
        if self.device.simulator:
            return 1
        grid = self._grids.get(shared)
        if grid is None:
            regs = max(16, int(build.cufunc(kernel).attrs.regs))
            by_regs = 65536 // (((regs + 7) // 8 * 8) * 32)
            by_shared = (self.device.smem_per_sm - 1024) // (shared + 1024)
            per_sm = max(1, min(tuning.FWD_BLOCKS_PER_SM_MAX, by_regs, by_shared))
            grid = self._grids[shared] = self.device.sm_count * per_sm
        return grid

    def launch(self, chunk, stream, *, N: int, items, n_items_at, n_items_slot, counters, vit_status, vit_xc,
               vit_from, filtersc, move_by_length, vit_band: float, device_tables, out_score) -> None:
        """Launch on the work list ``items[:n_items_at[n_items_slot]]`` (asynchronous)."""
        kernel = build.load(self.spec, self.device.lane_binding)
        shared = shared_bytes(N)
        args = arguments(ARGS, residues=chunk.residues, word_offsets=chunk.word_offsets, lengths=chunk.lengths,
                         items=items, n_items_at=n_items_at, n_items_slot=n_items_slot, counters=counters,
                         vit_status=vit_status, vit_xc=vit_xc, vit_from=vit_from, filtersc=filtersc,
                         move_by_length=move_by_length, vit_band=vit_band, tables=device_tables, N=N,
                         out_score=out_score)
        kernel[self._grid(kernel, shared), 32, stream, shared](*args)


class FwdStage:
    """The Forward bound kernel alone over a resident database, on a list of database indices."""

    def __init__(self, resident):
        self.resident = resident
        self.device = resident.device
        self.kernels = FwdKernels(self.device)

    def run(self, profile, indices) -> np.ndarray:
        """The kernel's Forward score (nats, float32) of each target in ``indices``."""
        from numba import cuda

        idx = np.asarray(indices, np.int64)
        out = np.full(idx.size, np.nan, np.float32)
        if not idx.size or not self.kernels.takes(profile.M):
            return out
        position = np.full(self.resident.db.n, -1, np.int64)
        position[self.resident.indices] = np.arange(self.resident.n)
        pos = position[idx]
        if (pos < 0).any():
            raise ValueError("the Forward bound was asked for zero-length targets")
        N = node_slots(profile.M)
        with self.device.activate():
            stream = cuda.stream()
            table = cuda.to_device(tables(profile.forward))
            move = cuda.to_device(np.zeros(max(self.resident.max_length, 1) + 1, np.int32))
            for chunk in self.resident.chunks():
                sel = np.flatnonzero((pos >= chunk.lo) & (pos < chunk.hi))
                if not sel.size:
                    continue
                n = sel.size
                score = cuda.device_array(n, np.float32)
                self.kernels.launch(chunk, stream, N=N, items=cuda.to_device((pos[sel] - chunk.lo).astype(np.int32)),
                                    n_items_at=cuda.to_device(np.array([n], np.int32)), n_items_slot=0,
                                    counters=cuda.to_device(np.zeros(1 + Counter.WORK, np.int32)),
                                    vit_status=cuda.to_device(np.full(n, STATUS_RANGE, np.int8)),  # compute all
                                    vit_xc=cuda.to_device(np.zeros(n, np.int32)),
                                    vit_from=cuda.to_device(np.zeros(n, np.int32)),
                                    filtersc=cuda.to_device(np.zeros(1, np.float32)), move_by_length=move,
                                    vit_band=0.0, device_tables=table, out_score=score)
                stream.synchronize()
                out[sel] = score.copy_to_host()
        return out
