"""Domain definition's stage functions on the CPU: the first implementation of
:class:`hmmgpu.stages.domaindef.DomainStages`, the one the others are checked against.

:func:`hmmgpu.stages.domaindef.define_domains` runs HMMER's ``p7_domaindef_ByPosteriorHeuristics``
once for every implementation; an implementation supplies three steps. Here they are the CPU
references, serial numba code that does HMMER's float operations lane for lane:

* :meth:`CpuDomainStages.region_forward`: the multihit full-matrix ``p7_Forward`` of a
  region, the length model of the whole target (:func:`hmmgpu.cpu.fwdback.forward_matrix`);
* :meth:`CpuDomainStages.region_ensemble`: ``region_trace_ensemble``, 200 stochastic traces
  of that matrix from the reseeded fast generator with their null2 odds
  (:func:`hmmgpu.cpu.stotrace.trace_ensemble`), ``n2sc = logf(acc / 200)`` with glibc's
  ``logf`` (:func:`hmmgpu.cpu.null2.glibc_logf`), the clustering and the domination filter
  (:mod:`hmmgpu.cpu.spensemble`);
* :meth:`CpuDomainStages.rescore_envelope`: ``rescore_isolated_domain`` (unihit Forward,
  Backward, decoding, optimal accuracy and its trace, and for an unclustered envelope null2
  by expectation and its ``logf``: :func:`hmmgpu.cpu.envelope.rescore_isolated_domain`).

The exactness flags of every matrix are passed on (:attr:`DomainDefinition.flags`), and a
region whose sampling could choose otherwise under hmmsearch's flush-to-zero arithmetic
(:attr:`hmmgpu.cpu.stotrace.TraceEnsemble.ftz_differs`) is flagged SUBNORMAL.
"""
from __future__ import annotations

import numpy as np

from hmmgpu.cpu.envelope import RescoredEnvelope, rescore_isolated_domain
from hmmgpu.cpu.fwdback import forward_matrix, special_transitions
from hmmgpu.cpu.null2 import glibc_logf
from hmmgpu.cpu.spensemble import cluster, dominant
from hmmgpu.cpu.stotrace import DEFAULT_SEED, NSAMPLES, TraceEnsemble, trace_ensemble
from hmmgpu.stages.domaindef import DomainStages, Envelope, RegionEnsemble
from hmmgpu.stages.forward import SUBNORMAL, ForwardTables

__all__ = ["CpuDomainStages", "envelope_result", "region_result"]

F32 = np.float32


def region_result(ensemble: TraceEnsemble, flags: int) -> RegionEnsemble:
    """What the host makes of a region's sampled traces (whichever device sampled them):
    ``n2sc = logf(acc / nsamples)`` with glibc's ``logf``, the clusters and the domination
    filter; ``flags`` (the region matrix's) with SUBNORMAL where a choice could differ under
    flush-to-zero."""
    n2sc = glibc_logf(ensemble.acc[1:] / F32(ensemble.nsamples))
    coords, probs = cluster(ensemble.pairs, ensemble.nsamples)
    flags = int(flags) | (SUBNORMAL if ensemble.ftz_differs else 0)
    return RegionEnsemble(n2sc=n2sc, envelopes=coords[dominant(coords, probs), :2], flags=flags)


def envelope_result(rescored: RescoredEnvelope) -> Envelope:
    """What the driver takes of a rescored envelope (whichever device rescored it)."""
    if rescored.dropped:
        return Envelope(flags=rescored.flags, dropped=True)
    return Envelope(flags=rescored.flags, envsc=rescored.envsc, oasc=rescored.oasc, iali=rescored.iali,
                    jali=rescored.jali, trace=rescored.trace, n2sc=rescored.n2sc)


class CpuDomainStages(DomainStages):
    """The stage functions of one model: ``tables`` its multihit
    :class:`~hmmgpu.stages.forward.ForwardTables`, ``seed`` the pipeline's."""

    def __init__(self, tables: ForwardTables, seed: int = DEFAULT_SEED):
        self.tables = tables
        self.seed = int(seed)

    def region_forward(self, codes, i, j):
        return forward_matrix(self.tables, codes, i, j)

    def region_ensemble(self, forward, codes, i, j) -> RegionEnsemble:
        ensemble = trace_ensemble(forward.matrix, self.tables, special_transitions(self.tables, len(codes)), codes,
                                  i, j, nsamples=NSAMPLES, seed=self.seed)
        return region_result(ensemble, forward.flags)

    def rescore_envelope(self, codes, i, j, null2_is_done, n2sc) -> Envelope:
        return envelope_result(rescore_isolated_domain(self.tables, codes, i, j, null2_is_done, n2sc))
