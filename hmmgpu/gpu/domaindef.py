"""Domain definition's stages on the GPU: the batch methods of
:class:`hmmgpu.stages.domaindef.DomainStages`, each batch a launch.

What it computes
----------------
:func:`hmmgpu.stages.domaindef.define_domains_batched` hands a model's stages every clustered
region of a batch of targets in one call, then every envelope in one call.
:class:`GpuDomainStages` runs each call as few kernel launches:

* :meth:`GpuDomainStages.region_ensembles`: the regions' multihit full Forward matrices
  (:meth:`~hmmgpu.cpu.domaindef.CpuDomainStages.region_forward`), then the stochastic-trace
  ensemble kernel on all of them (:func:`hmmgpu.gpu.ensemble.stages.region_ensembles`,
  which finishes each region on the host: glibc's ``logf``, the clusters, the domination
  filter; a region the kernel leaves is sampled by the CPU reference);
* :meth:`GpuDomainStages.rescore_envelopes`: the envelopes' unihit full Forward and
  Backward matrices (:meth:`GpuDomainStages.envelope_matrices`), then the decoding and
  optimal accuracy kernel on all of them (:func:`hmmgpu.gpu.envelope.launch.decode_oa`:
  posterior, OA matrix and trace, null2 odds), each envelope finished on the host by
  :func:`hmmgpu.cpu.envelope.finish_envelope`, the end of the CPU reference itself (the
  trace moved to target coordinates, ``iali``/``jali``, ``n2sc`` by glibc's ``logf``, the
  flush-to-zero check of the odds, the flags; an envelope whose decoding overflowed is
  dropped).

The full matrices are the CPU references' for now (:mod:`hmmgpu.cpu.fwdback`): producing
them is one method each (``region_forward``, :meth:`~GpuDomainStages.envelope_matrices`),
the step that full-matrix parser kernels will replace, leaving the matrices in device
memory where the two kernels read them. The one-item methods are the CPU stages' (the
driver calls the batch methods only).

Why it looks as it does
-----------------------
Every matrix of a batch is held at once (on the host, then on the device, in the kernels'
packed layout): a region's Forward matrix is ``(Lr + 1) (12 Q + 6)`` floats, an envelope's
Forward and Backward twice that. A call's items are therefore cut into consecutive runs of
at most ``batch_bytes`` of matrices (:func:`runs_within`), one launch a run; the answers
come back in the items' order, which is all the driver needs. The answers equal the CPU
stages' bit for bit: the kernels equal the CPU references (tests/gpu), and the host's part
is the references' own code.
"""
from __future__ import annotations

from hmmgpu.cpu.domaindef import CpuDomainStages, envelope_result
from hmmgpu.cpu.envelope import finish_envelope
from hmmgpu.cpu.fwdback import backward_matrix, forward_matrix, special_transitions, unihit_tables
from hmmgpu.cpu.stotrace import DEFAULT_SEED
from hmmgpu.gpu.ensemble.launch import DEFAULT_TABLE, RegionRequest, default_binding
from hmmgpu.gpu.ensemble.stages import region_ensembles
from hmmgpu.gpu.envelope.launch import decode_oa

__all__ = ["DEFAULT_BATCH_BYTES", "GpuDomainStages", "matrix_bytes", "runs_within"]

#: The matrices a launch holds at most (bytes; an item larger than this is a launch alone).
DEFAULT_BATCH_BYTES = 256 << 20


def matrix_bytes(Ld: int, Q: int) -> int:
    """The bytes of a full striped matrix of ``Ld`` residues: cells and special rows."""
    return 4 * (int(Ld) + 1) * (12 * int(Q) + 6)


def runs_within(sizes, budget: int) -> list:
    """(start, end) of consecutive runs of items whose ``sizes`` add up to at most ``budget``
    each (an item larger than the budget is a run alone), covering every item in order."""
    runs, start, total = [], 0, 0
    for k, size in enumerate(sizes):
        if k > start and total + size > budget:
            runs.append((start, k))
            start, total = k, 0
        total += size
    if start < len(sizes):
        runs.append((start, len(sizes)))
    return runs


class GpuDomainStages(CpuDomainStages):
    """The stages of one model (``tables``, the pipeline's ``seed``) with the batch methods on
    the GPU: ``binding`` the kernels' (:func:`~hmmgpu.gpu.ensemble.launch.default_binding` if
    None), ``table`` the ensemble's draws in device memory, ``batch_bytes`` the matrices a
    launch holds at most."""

    def __init__(self, tables, seed: int = DEFAULT_SEED, binding: str | None = None, table: int = DEFAULT_TABLE,
                 batch_bytes: int = DEFAULT_BATCH_BYTES):
        super().__init__(tables, seed)
        self.binding = binding
        self.table = int(table)
        self.batch_bytes = int(batch_bytes)

    def region_ensembles(self, regions) -> list:
        out = []
        sizes = [matrix_bytes(r.j - r.i + 1, self.tables.Q) for r in regions]
        for start, end in runs_within(sizes, self.batch_bytes):
            run = regions[start:end]
            forwards = [self.region_forward(*region) for region in run]
            requests = [RegionRequest(matrix=f.matrix, tables=self.tables,
                                      xf=special_transitions(self.tables, r.codes.size), codes=r.codes, i=r.i, j=r.j)
                        for f, r in zip(forwards, run)]
            out += region_ensembles(requests, [f.flags for f in forwards], seed=self.seed, binding=self.binding,
                                    table=self.table)
        return out

    def envelope_matrices(self, envelopes) -> list:
        """The unihit full Forward and Backward :class:`~hmmgpu.cpu.fwdback.MatrixResult` of
        each :class:`~hmmgpu.stages.domaindef.EnvelopeSpan` (the length model of its whole
        target), as (Forward, Backward) pairs: the CPU references'."""
        out = []
        for e in envelopes:
            forward = forward_matrix(self.tables, e.codes, e.i, e.j, unihit=True)
            out.append((forward, backward_matrix(self.tables, e.codes, forward, e.i, e.j, unihit=True)))
        return out

    def rescore_envelopes(self, envelopes) -> list:
        uni = unihit_tables(self.tables)
        binding = self.binding or default_binding()
        out = []
        sizes = [2 * matrix_bytes(e.j - e.i + 1, self.tables.Q) for e in envelopes]
        for start, end in runs_within(sizes, self.batch_bytes):
            run = envelopes[start:end]
            matrices = self.envelope_matrices(run)
            decoded = decode_oa([(f, b, uni, special_transitions(uni, e.codes.size))
                                 for (f, b), e in zip(matrices, run)], binding)
            out += [envelope_result(finish_envelope(uni, e.codes, e.i, e.j, e.null2_is_done, e.n2sc, f.score,
                                                    d.status, d.posterior, d.oasc, d.flags, d.trace, d.null2))
                    for e, (f, _), d in zip(run, matrices, decoded)]
        return out
