"""Domain definition's stage functions on the CPU: the first implementation of
:class:`hmmgpu.stages.domaindef.DomainStages`, the one the others are checked against.

:func:`hmmgpu.stages.domaindef.define_domains` runs HMMER's ``p7_domaindef_ByPosteriorHeuristics``
once for every implementation; an implementation supplies three steps. Here they are the CPU
references:

* :meth:`CpuDomainStages.region_forward`: the multihit full-matrix ``p7_Forward`` of a
  region, the length model of the whole target (:func:`hmmgpu.cpu.fwdback.forward_matrix`);
* :meth:`CpuDomainStages.region_ensemble`: ``region_trace_ensemble``, 200 stochastic traces
  of that matrix from the reseeded fast generator with their null2 odds
  (:func:`hmmgpu.cpu.stotrace.trace_ensemble`), ``n2sc = logf(acc / 200)`` with glibc's
  ``logf`` (:func:`hmmgpu.cpu.null2.glibc_logf`), the clustering and the domination filter
  (:mod:`hmmgpu.cpu.spensemble`);
* :meth:`CpuDomainStages.rescore_envelope`: ``rescore_isolated_domain`` (unihit Forward,
  Backward, decoding, optimal accuracy and its trace, null2 by expectation). Until its CPU
  reference is in (:mod:`hmmgpu.cpu.envelope`), this step is libhmmer's own, through a
  :class:`hmmgpu.cpu.hmmerlib.HmmerModel`; the unclustered envelope's ``n2sc`` is the glibc
  ``logf`` of its ``p7_Null2_ByExpectation`` odds at each residue.

The exactness flags of the references' matrices are passed on (:attr:`DomainDefinition.flags`).
"""
from __future__ import annotations

import numpy as np

from hmmgpu.constants import STATUS_OK
from hmmgpu.cpu.fwdback import forward_matrix, special_transitions
from hmmgpu.cpu.null2 import glibc_logf
from hmmgpu.cpu.optacc import STATE_M
from hmmgpu.cpu.spensemble import cluster, dominant
from hmmgpu.cpu.stotrace import DEFAULT_SEED, NSAMPLES, trace_ensemble
from hmmgpu.stages.domaindef import DomainStages, Envelope, RegionEnsemble
from hmmgpu.stages.forward import ForwardTables

__all__ = ["CpuDomainStages"]

F32 = np.float32


class CpuDomainStages(DomainStages):
    """The stage functions of one model: ``tables`` its multihit
    :class:`~hmmgpu.stages.forward.ForwardTables`, ``model`` a
    :class:`hmmgpu.cpu.hmmerlib.HmmerModel` of it (envelope rescoring), ``seed`` the pipeline's."""

    def __init__(self, tables: ForwardTables, model, seed: int = DEFAULT_SEED):
        self.tables = tables
        self.model = model
        self.seed = int(seed)

    def region_forward(self, codes, i, j):
        return forward_matrix(self.tables, codes, i, j)

    def region_ensemble(self, forward, codes, i, j) -> RegionEnsemble:
        dp = forward.matrix.dp
        ensemble = trace_ensemble(dp[:, 0], dp[:, 1], dp[:, 2], forward.matrix.xmx, self.tables,
                                  special_transitions(self.tables, len(codes)), codes, i, j, nsamples=NSAMPLES,
                                  seed=self.seed)
        n2sc = glibc_logf(ensemble.acc[1:] / F32(NSAMPLES))
        coords, probs = cluster(ensemble.pairs, ensemble.nsamples)
        return RegionEnsemble(n2sc=n2sc, envelopes=coords[dominant(coords, probs), :2], flags=forward.flags)

    def rescore_envelope(self, codes, i, j, null2_is_done) -> Envelope:
        out = self.model.envelope(codes, i, j)
        if out["decoding_status"] != STATUS_OK:
            return Envelope(dropped=True)
        trace = out["trace"]
        aligned = trace.i[trace.st == STATE_M]
        n2sc = None if null2_is_done else glibc_logf(out["null2"][np.asarray(codes[i - 1:j], np.intp)])
        return Envelope(envsc=F32(out["envsc"]), oasc=F32(out["oasc"]), iali=int(aligned[0]), jali=int(aligned[-1]),
                        trace=trace, n2sc=n2sc)
