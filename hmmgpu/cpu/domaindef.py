"""Domain definition's stage functions on the CPU: the first implementation of
:class:`hmmgpu.stages.domaindef.DomainStages`, the one the others are checked against.

:func:`hmmgpu.stages.domaindef.define_domains` runs HMMER's ``p7_domaindef_ByPosteriorHeuristics``
once for every implementation; an implementation supplies three steps. Here:

* :meth:`CpuDomainStages.region_ensemble` is hmmgpu's CPU reference for
  ``region_trace_ensemble``: 200 stochastic traces of the region's Forward matrix from the
  reseeded fast generator with their null2 odds (:func:`hmmgpu.cpu.stotrace.trace_ensemble`),
  ``n2sc = logf(acc / 200)`` with glibc's ``logf`` (:func:`hmmgpu.cpu.null2.glibc_logf`), the
  clustering and the domination filter (:mod:`hmmgpu.cpu.spensemble`);
* :meth:`CpuDomainStages.region_forward` (the multihit full-matrix ``p7_Forward`` of a region)
  and :meth:`CpuDomainStages.rescore_envelope` (``rescore_isolated_domain``) are libhmmer's own,
  through :class:`hmmgpu.cpu.hmmerlib.HmmerModel`, until their CPU references take their place;
  the unclustered envelope's ``n2sc`` is the glibc ``logf`` of libhmmer's
  ``p7_Null2_ByExpectation`` odds at each residue.

The model's length configuration is the whole target's for every step (multihit for the
region, unihit for the envelopes), as in HMMER.
"""
from __future__ import annotations

import numpy as np

from hmmgpu.constants import STATUS_OK
from hmmgpu.cpu.null2 import glibc_logf
from hmmgpu.cpu.optacc import STATE_M
from hmmgpu.cpu.spensemble import cluster, dominant
from hmmgpu.cpu.stotrace import DEFAULT_SEED, NSAMPLES, trace_ensemble
from hmmgpu.stages.domaindef import DomainStages, Envelope, RegionEnsemble
from hmmgpu.stages.forward import ForwardTables, length_specials

__all__ = ["CpuDomainStages", "multihit_specials"]

F32 = np.float32


def multihit_specials(tables: ForwardTables, L: int) -> np.ndarray:
    """``om->xf`` float32 [E N J C][MOVE LOOP] of the multihit model configured for length ``L``
    (``p7_oprofile_ReconfigMultihit``): E (0.5, 0.5); N, J and C (pmove, ploop)."""
    pmove, ploop = length_specials(L, tables.nj)
    xf = np.empty((4, 2), dtype=F32)
    xf[0] = (tables.xe_move, tables.xe_loop)
    xf[1:] = (F32(pmove), F32(ploop))
    return xf


class CpuDomainStages(DomainStages):
    """The stage functions of one model: ``model`` a :class:`hmmgpu.cpu.hmmerlib.HmmerModel`
    (libhmmer's region Forward and envelope rescoring), ``tables`` its
    :class:`~hmmgpu.stages.forward.ForwardTables` (multihit), ``seed`` the pipeline's."""

    def __init__(self, model, tables: ForwardTables, seed: int = DEFAULT_SEED):
        self.model = model
        self.tables = tables
        self.seed = int(seed)

    def region_forward(self, codes, i, j):
        status, _, matrix = self.model.forward_matrix(codes, i, j, unihit=False)
        return matrix

    def region_ensemble(self, matrix, codes, i, j) -> RegionEnsemble:
        dp = matrix.dp
        ensemble = trace_ensemble(dp[:, 0], dp[:, 1], dp[:, 2], matrix.xmx, self.tables,
                                  multihit_specials(self.tables, len(codes)), codes, i, j, nsamples=NSAMPLES,
                                  seed=self.seed)
        n2sc = glibc_logf(ensemble.acc[1:] / F32(NSAMPLES))
        coords, probs = cluster(ensemble.pairs, ensemble.nsamples)
        return RegionEnsemble(n2sc=n2sc, envelopes=coords[dominant(coords, probs), :2])

    def rescore_envelope(self, codes, i, j, null2_is_done) -> Envelope | None:
        out = self.model.envelope(codes, i, j)
        if out["decoding_status"] != STATUS_OK:
            return None
        trace = out["trace"]
        aligned = trace.i[trace.st == STATE_M]
        n2sc = None if null2_is_done else glibc_logf(out["null2"][np.asarray(codes[i - 1:j], np.intp)])
        return Envelope(envsc=F32(out["envsc"]), oasc=F32(out["oasc"]), iali=int(aligned[0]), jali=int(aligned[-1]),
                        trace=trace, n2sc=n2sc)
