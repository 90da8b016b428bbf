"""The CPU's filter stages: pyhmmer end to end, or hmmgpu's exact numba filters.

:class:`HmmerBackend` runs no filter of hmmgpu's: the engine gives every target to pyhmmer's
own pipeline (the exact CPU route). :class:`NumbaBackend` runs MSV, the bias filter and the
Viterbi filter with hmmgpu's numba reference (:mod:`hmmgpu.cpu.filters`), the code that the
GPU kernels must equal, parallel over targets.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from hmmgpu.stages.protocol import Backend, FilterBackend

if TYPE_CHECKING:
    import numpy as np


class HmmerBackend(Backend):
    """pyhmmer's pipeline end to end: every filter runs inside HMMER."""

    def __init__(self, db):
        self.db = db
        self.description = "backend hmmer (pyhmmer on the CPU)"


class NumbaBackend(FilterBackend):
    """hmmgpu's exact CPU filters, parallel over targets (numba), and the Forward gate with
    the lane-exact CPU reference of the GPU's Forward parser (:mod:`hmmgpu.cpu.fwdback`;
    ``forward_gate=False``: none)."""

    def __init__(self, db, threads: int | None = None, forward_gate: bool = True):
        super().__init__(db)
        if threads:
            import numba

            numba.set_num_threads(min(int(threads), numba.config.NUMBA_NUM_THREADS))
        self.forward_gate = forward_gate
        self.description = "backend numba (hmmgpu's exact CPU filters)"

    def msv(self, profile, thresholds=None):
        import numpy as np

        from hmmgpu.cpu import filters as cpu_filters
        from hmmgpu.stages.cascade import MsvResult

        status, xj = cpu_filters.msv_filter(profile, self.db)
        L = self.db.lengths
        passed = L > 0
        if thresholds is not None:
            passed &= (status != 0) | (xj >= np.asarray(thresholds)[L])
        idx = np.flatnonzero(passed)
        return MsvResult(idx, status[idx], xj[idx])

    def bias(self, profile, indices) -> np.ndarray:
        from hmmgpu.cpu import filters as cpu_filters

        return cpu_filters.bias_filter(profile, self.db, indices)

    def viterbi(self, profile, indices):
        import numpy as np

        from hmmgpu.cpu import filters as cpu_filters
        from hmmgpu.stages.cascade import ViterbiResult

        idx = np.asarray(indices, np.int64)
        status, xc = cpu_filters.viterbi_filter(profile, self.db, idx)
        return ViterbiResult(idx, status, xc)

    def forward(self, profile, indices, fallback: bool = False):
        """The Forward parser's CPU reference on ``indices`` (serial), with libhmmer for the
        targets it flags when ``fallback``; None without the gate (or a model without its HMM)."""
        if not (self.forward_gate or fallback) or profile.hmm is None:
            return None
        from hmmgpu.cpu import fwdback

        return self._parser_scores(fwdback.score_targets, profile, indices, fallback)

    def backward(self, profile, indices, fallback: bool = False):
        """The Backward parser's CPU reference (after the Forward parser's) on ``indices``
        (serial), with libhmmer for the targets either flags when ``fallback``; None for a
        model without its HMM."""
        if profile.hmm is None:
            return None
        from hmmgpu.cpu import fwdback

        return self._parser_scores(fwdback.backward_scores, profile, indices, fallback)

    def _parser_scores(self, scores_of, profile, indices, fallback: bool):
        """``scores_of(tables, db, indices, model)`` (:func:`hmmgpu.cpu.fwdback.score_targets`
        or :func:`~hmmgpu.cpu.fwdback.backward_scores`) with the model's Forward tables, and
        libhmmer's model for the fallback, as a :class:`~hmmgpu.stages.cascade.ForwardResult`."""
        import numpy as np

        from hmmgpu.cpu import fwdback
        from hmmgpu.stages.cascade import ForwardResult
        from hmmgpu.stages.profiles import configured_profile

        idx = np.asarray(indices, np.int64)
        tables = fwdback.ForwardTables.from_optimized(configured_profile(profile.hmm).to_optimized())
        model = None
        if fallback:
            from hmmgpu.cpu.hmmerlib import HmmerModel

            model = HmmerModel(profile.hmm)
        try:
            status, scores, recomputed = scores_of(tables, self.db, idx, model)
        finally:
            if model is not None:
                model.close()
        return ForwardResult(idx, status, scores, recomputed)
