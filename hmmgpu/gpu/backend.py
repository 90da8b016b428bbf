"""The GPU's filter stages in this process: the kernels over a database resident on one device.

:class:`CudaBackend` is what the audit and the tests call stage by stage; searches run the
same object in a child process (:mod:`hmmgpu.gpu.process`), where its interpreter work has a
lock of its own.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

from hmmgpu.stages.protocol import FilterBackend

if TYPE_CHECKING:
    import numpy as np


class CudaBackend(FilterBackend):
    """The GPU kernels over a database resident on one device (explicit id); the cascade ends
    with the Forward gate unless ``forward_gate`` is False."""

    def __init__(self, db, lanes: str = "auto", device: int = 0, max_bytes: int | None = None,
                 forward_gate: bool = True):
        super().__init__(db)
        from hmmgpu.gpu.cascade import GpuCascade
        from hmmgpu.gpu.runtime.device import GpuDevice
        from hmmgpu.gpu.resident import ResidentDatabase

        self.device = GpuDevice.open(device)
        clock = time.perf_counter()
        with self.device.activate():
            self.resident = ResidentDatabase(db, self.device, max_bytes=max_bytes)
        #: seconds of the set-up: the database packed and copied to the device, and the rest
        self.setup_seconds = dict(upload=time.perf_counter() - clock)
        self.gpu = GpuCascade(self.resident, lanes=lanes, forward_gate=forward_gate)
        self.setup_seconds["cascade"] = time.perf_counter() - clock - self.setup_seconds["upload"]
        self.lanes = self.gpu.lanes
        self.description = f"backend cuda on {self.device.description} ({self.lanes} lanes)"

    def msv(self, profile, thresholds=None):
        from hmmgpu.stages.cascade import MsvResult

        return MsvResult(*self.gpu.msv_stage.run(profile, thresholds))

    def bias(self, profile, indices) -> np.ndarray:
        return self.gpu.bias_scores(profile, indices)

    def viterbi(self, profile, indices):
        import numpy as np

        from hmmgpu.stages.cascade import ViterbiResult

        idx = np.asarray(indices, np.int64)
        status, xc = self.gpu.viterbi(profile, idx)
        return ViterbiResult(idx, status, xc)

    def forward(self, profile, indices, fallback: bool = False):
        """The Forward parser kernel (:meth:`hmmgpu.gpu.cascade.GpuCascade.forward`)."""
        return self.gpu.forward(profile, indices, fallback)

    def backward(self, profile, indices, fallback: bool = False):
        """The Backward parser kernel (:meth:`hmmgpu.gpu.cascade.GpuCascade.backward`)."""
        if profile.hmm is None:
            return None
        return self.gpu.backward(profile, indices, fallback)

    def cascade(self, profile, options):
        return self.gpu.run(profile, options)

    def submit(self, profile, options):
        return self.gpu.submit(profile, options)

    def set_float_mode(self, ftz: bool) -> None:
        self.gpu.search_ftz = bool(ftz)

    def flush_gates(self) -> None:
        """Launch the Forward gates still queued (:meth:`hmmgpu.gpu.cascade.GpuCascade.flush_gates`)."""
        self.gpu.flush_gates()

    def advance_decoding(self) -> None:
        """Launch the decodings of the gate batches that are done (:meth:`hmmgpu.gpu.cascade.GpuCascade.advance_decoding`)."""
        self.gpu.advance_decoding()

    def define_passers(self, items) -> list:
        """Decode and define F3 passers after the filters (:meth:`hmmgpu.gpu.cascade.GpuCascade.define_passers`):
        ``items``, (prepared model, ``--seed``, passers) triples; a (decoded, defined) pair each."""
        return self.gpu.define_passers([(self.gpu._forward_tables(profile), seed, passers)
                                        for profile, seed, passers in items])

    def gpu_seconds(self) -> float:
        return self.gpu.gpu_ms / 1e3

    def prepare_for(self, lengths) -> None:
        self.gpu.compile_for(lengths)

    def details(self) -> dict:
        details = dict(kernel_ms=dict(self.gpu.kernel_ms), host_seconds=dict(self.gpu.host_seconds),
                       forward_gate=dict(self.gpu.forward_counts, cells=self.gpu.forward_cells),
                       stream_ordered_memory=self.gpu.device.runtime.stream_ordered)
        if any(self.gpu.decoding_counts.values()):  # hmmgpu's own post-filter: the F3 passers' decodings
            details["decoding"] = dict(self.gpu.decoding_counts, kernel_ms=round(self.gpu.decoding_ms, 1))
            if any(self.gpu.define_seconds.values()):  # ... and their domain definition's steps
                details["definition_seconds"] = {k: round(v, 2) for k, v in self.gpu.define_seconds.items()}
                details["ensemble_regions"] = dict({k: round(v, 2) for k, v in self.gpu.ensemble_counts.items()},
                                                   step_cost=round(self.gpu.ensemble_step_cost(), 1))
                details["definition_timeline"] = list(self.gpu.definition_timeline)
                details["host_code"] = dict(self.gpu.host_code_times)
        return details

    def close(self, wait: bool = True) -> None:
        self.gpu.close()
