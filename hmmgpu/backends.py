"""Filter backends: where the MSV and Viterbi filter stages run.

``numba``: hmmgpu's exact CPU filters. ``cuda``: the GPU SSV/MSV kernels with the database
resident on the GPU (the Viterbi filter runs on the CPU until its kernel lands).
``hmmer``: no hmmgpu filters at all; pyhmmer's own pipeline end to end. ``auto`` picks
``cuda`` where a CUDA GPU is found and ``hmmer`` elsewhere.
"""
from __future__ import annotations

import numpy as np

from . import cpu_filters
from .constants import STATUS_OK
from .errors import HmmgpuError

BACKENDS = ("auto", "cuda", "numba", "hmmer")


class NumbaBackend:
    """Exact CPU filters, parallel over sequences (numba)."""

    name = "numba"

    def __init__(self, db):
        self.db = db

    def msv(self, prof, thr):
        """SSV-first MSV of every target; (indices, status, xJ) of those passing ``thr[L]``."""
        status, xj = cpu_filters.msv_filter(prof, self.db)
        L = self.db.lengths
        passed = (L > 0) & ((status != STATUS_OK) | (xj >= thr[L]))
        idx = np.flatnonzero(passed)
        return idx, status[idx], xj[idx]

    def viterbi(self, prof, idx):
        """Viterbi filter of the targets ``idx``: (status, C)."""
        return cpu_filters.viterbi_filter(prof, self.db, idx)

    def close(self):
        """Release resources (none on the CPU)."""


class CudaBackend(NumbaBackend):
    """GPU SSV/MSV kernels; the database is uploaded once and stays on the GPU."""

    name = "cuda"

    def __init__(self, db, lanes="auto"):
        super().__init__(db)
        from .kernels import GpuMsvFilter

        self.gpu = GpuMsvFilter(db, lanes=lanes)

    def msv(self, prof, thr):
        return self.gpu.run(prof.byte, thr)

    def close(self):
        self.gpu.close()


class HmmerBackend:
    """pyhmmer's own pipeline end to end (the filters run inside HMMER)."""

    name = "hmmer"

    def __init__(self, db):
        self.db = db
        self._block = None

    @property
    def block(self):
        """The whole database as one pyhmmer ``DigitalSequenceBlock`` (built once)."""
        if self._block is None:
            self._block = self.db.block()
        return self._block

    def close(self):
        """Nothing to release."""


def cuda_available() -> bool:
    """A usable CUDA GPU is present."""
    try:
        from .kernels import cuda_available as probe
    except ImportError:
        return False
    return probe()


def make_backend(name: str, db, lanes: str = "auto"):
    """The backend called ``name`` over ``db``, and a one-line notice of which ran."""
    if name not in BACKENDS:
        raise HmmgpuError(f"unknown backend {name!r} (choose from {', '.join(BACKENDS)})")
    if name == "auto":
        if cuda_available():
            name = "cuda"
        else:
            return HmmerBackend(db), "no CUDA GPU found: using the hmmer backend (pyhmmer on the CPU)"
    if name == "cuda":
        if not cuda_available():
            raise HmmgpuError("--backend cuda: no usable CUDA GPU found (try --backend numba or hmmer)")
        backend = CudaBackend(db, lanes=lanes)
        from .kernels import device_description

        return backend, f"backend cuda on {device_description()} ({backend.gpu.lanes} lanes)"
    if name == "numba":
        return NumbaBackend(db), "backend numba (hmmgpu's exact CPU filters)"
    return HmmerBackend(db), "backend hmmer (pyhmmer on the CPU)"
