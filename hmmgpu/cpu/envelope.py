"""HMMER 3.4's rescoring of one envelope (``rescore_isolated_domain``, p7_domaindef.c) composed
from the CPU references: what domain definition records for each domain.

Domain definition hands each envelope ``i..j`` of a target (a region that held one domain,
or a cluster of sampled domains in a region that held several) to
``rescore_isolated_domain``, which scores it alone, as if the target held that one domain
(hmmer-domaindef-spec.md §3):

1. the full unihit Forward matrix of the residues ``i..j``, with the length model of the
   WHOLE target (its score is the envelope score ``envsc``), then the full Backward matrix
   (:func:`hmmgpu.cpu.fwdback.forward_matrix`, :func:`~hmmgpu.cpu.fwdback.backward_matrix`);
2. their posterior decoding (:func:`hmmgpu.cpu.decoding.decode`); where its scale product
   overflows (eslERANGE) the domain is dropped: :attr:`RescoredEnvelope.dropped`;
3. the optimal accuracy matrix and its score ``oasc``, the expected number of correctly
   aligned residues (:func:`hmmgpu.cpu.optacc.optimal_accuracy`);
4. the OA trace (:func:`hmmgpu.cpu.optacc.oa_trace`), moved to the target's coordinates;
   ``iali..jali`` is the stretch ``p7_alidisplay_Create`` shows, from the first M after the
   trace's B to the last M before the E that follows;
5. the null2 correction: for the envelope of an unclustered region, null2 by expectation
   from the posterior matrix (:func:`hmmgpu.cpu.null2.null2_by_expectation`) and
   ``n2sc[pos] = logf(null2[x_pos])`` (glibc's ``logf``) for ``pos = i..j``; a clustered
   region's ``n2sc`` was set by its stochastic traces and is given. ``domcorrection`` is the
   float sum of ``n2sc[i..j]``, in order.

Each step is a stage function of its own module, so that a GPU implementation can replace
them one by one and be checked against these; this module only composes them, as HMMER's
function does. Its end, from the decoding and the alignment on (steps 4 and 5, and the
flags), is :func:`finish_envelope`, which a device's stages call on what their kernels
computed (:mod:`hmmgpu.gpu.domaindef`), so that it is written once. The exactness flags of every matrix are carried to the result
(:attr:`RescoredEnvelope.needs_host`): in IEEE mode the result is libhmmer's (pyhmmer's)
whatever the flags; unflagged, it is also hmmsearch's (flush-to-zero), but for the trace's
tiny posteriors (hmmsearch's are 0; TINY_ROWS). Null2 by expectation sums the posterior:
where the posterior holds tiny values (0 under flush-to-zero), it is recomputed without them
and SUBNORMAL is raised if the odds differ (the products inside null2 are not checked).

The flags are cell-level and conservative: in a unihit envelope B is N's decaying share
alone after the domain, and cells far from the alignment go subnormal, so that 16% of the
envelopes of the shared data's Pfam models are flagged (``benchmarks/envelope_check.py``),
although their envsc, oasc, trace and null2 odds were the same under flush-to-zero on every
flagged envelope examined (38 of PF00001's first 48): only interior cells differ. Run under
:func:`hmmgpu.host.flush_to_zero`, these references are hmmsearch's arithmetic itself (numba's
scalar SSE code obeys the thread's MXCSR, as libhmmer's does): equal to libhmmer's
flush-to-zero run on every envelope tested, flagged or not.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hmmgpu.cpu.decoding import decode
from hmmgpu.cpu.fwdback import (
    DP_I, DP_M, HOST, SUBNORMAL, TINY_ROWS, ForwardTables, MatrixResult, StripedMatrix, backward_matrix, forward_matrix,
    special_transitions, unihit_tables)
from hmmgpu.cpu.null2 import glibc_logf, null2_by_expectation
from hmmgpu.cpu.optacc import XF_LOOP, XF_N, Trace, domain_span, oa_trace, optimal_accuracy
from hmmgpu.stages.forward import STATUS_OK

__all__ = ["RescoredEnvelope", "rescore_isolated_domain", "finish_envelope", "alignment_span"]


@dataclass
class RescoredEnvelope:
    """One envelope ``ienv..jenv`` rescored: ``envsc`` (float32 nats), and unless
    :attr:`dropped`: ``oasc`` (float32), ``iali``, ``jali`` (target coordinates), the OA
    ``trace`` (target coordinates, with posteriors), ``domcorrection`` (float32 nats), and for
    an unclustered envelope the null2 odds ``null2`` float32 [Kp] and ``n2sc`` float32
    [jenv-ienv+1] (None when the null2 scores were given). ``flags``: the exactness flags of
    every matrix; ``decoding_status``: ``p7_Decoding``'s."""

    ienv: int
    jenv: int
    envsc: np.float32
    decoding_status: int
    flags: int
    oasc: np.float32 | None = None
    iali: int | None = None
    jali: int | None = None
    trace: Trace | None = None
    domcorrection: np.float32 | None = None
    null2: np.ndarray | None = None
    n2sc: np.ndarray | None = None

    @property
    def dropped(self) -> bool:
        """Decoding overflowed: HMMER records no domain (the envelope still counts)."""
        return self.decoding_status != STATUS_OK

    @property
    def needs_host(self) -> bool:
        """A flag says hmmsearch's flush-to-zero arithmetic could give other values."""
        return bool(self.flags & HOST)


def alignment_span(trace: Trace) -> tuple:
    """(iali, jali): the residues of the first M after the trace's first B and of the last M
    before the E that follows it, as ``p7_alidisplay_Create`` finds them (no trace index)."""
    z1, z2 = domain_span(trace.st)
    if z1 < 0:
        raise ValueError("the trace has no domain (B, M, E)")
    return int(trace.i[z1]), int(trace.i[z2])


def _float_sum(values) -> np.float32:
    """The float32 sum of ``values`` in order from 0 (numpy's accumulate is sequential)."""
    return np.add.accumulate(np.concatenate(([np.float32(0.0)], np.asarray(values, np.float32))),
                             dtype=np.float32)[-1]


def _null2(pp: StripedMatrix, tables: ForwardTables, flush_tiny: bool = False) -> np.ndarray:
    """``p7_Null2_ByExpectation`` on the posterior matrix: the null2 odds float32 [Kp]; with
    ``flush_tiny``, of the matrix as flush-to-zero leaves it (its tiny values read as 0)."""
    return null2_by_expectation(pp.dp[:, DP_M], pp.dp[:, DP_I], pp.xmx, tables.rfv, flush_tiny)


def _same_bits(a, b) -> bool:
    return np.array_equal(np.asarray(a, np.float32).view(np.uint32), np.asarray(b, np.float32).view(np.uint32))


def rescore_isolated_domain(tables: ForwardTables, codes, i: int, j: int, null2_is_done: bool = False,
                            n2sc=None) -> RescoredEnvelope:
    """``rescore_isolated_domain`` on the envelope ``i..j`` (1-based, inclusive) of a target
    (its digital ``codes``, the whole target, whose length sets the length model), with a
    model's multihit :class:`~hmmgpu.cpu.fwdback.ForwardTables`. With ``null2_is_done`` (a
    clustered region's envelope) ``n2sc`` float32 [L+1] must hold the region's null2 scores;
    otherwise they are computed here (returned as ``n2sc`` for ``i..j``)."""
    codes = np.ascontiguousarray(codes, dtype=np.uint8)
    if null2_is_done and n2sc is None:
        raise ValueError("a clustered envelope needs its region's n2sc")
    uni = unihit_tables(tables)
    xf = special_transitions(uni, codes.size)
    fwd = forward_matrix(tables, codes, i, j, unihit=True)
    bck = backward_matrix(tables, codes, fwd, i, j, unihit=True)
    status, posterior = decode(fwd, bck, xf[XF_N, XF_LOOP])
    if status != STATUS_OK:
        return finish_envelope(uni, codes, i, j, null2_is_done, n2sc, fwd.score, status, posterior)
    oasc, oa = optimal_accuracy(posterior, uni.tfv, xf)
    trace = oa_trace(oa, posterior, uni.tfv, xf, uni.M)
    return finish_envelope(uni, codes, i, j, null2_is_done, n2sc, fwd.score, status, posterior, oasc, oa.flags, trace)


def finish_envelope(uni: ForwardTables, codes, i: int, j: int, null2_is_done: bool, n2sc, envsc, status: int,
                    posterior: MatrixResult, oasc=None, oa_flags: int = 0, trace: Trace | None = None,
                    null2=None) -> RescoredEnvelope:
    """The host's end of :func:`rescore_isolated_domain`, whichever device decoded and aligned
    the envelope ``i..j`` (``codes``, ``null2_is_done`` and ``n2sc`` as there; ``uni`` the
    model's :func:`~hmmgpu.cpu.fwdback.unihit_tables`): from the unihit Forward score
    ``envsc``, the decoding's ``status`` and ``posterior`` matrix, and unless it overflowed,
    ``oasc``, the OA matrix's flags (the posterior's with its own), the OA ``trace`` (residues
    1..Ld of the envelope) and the null2 odds where a device computed them (None: from the
    posterior here, if needed): the trace moved to the target's coordinates, ``iali..jali``,
    for an unclustered envelope ``n2sc`` (glibc's ``logf``) and the flush-to-zero check of its
    odds, and ``domcorrection``."""
    out = RescoredEnvelope(ienv=int(i), jenv=int(j), envsc=envsc, decoding_status=int(status),
                           flags=posterior.flags)
    if out.dropped:
        return out
    out.oasc = oasc
    out.flags |= oa_flags
    out.trace = trace.shifted(int(i) - 1)
    out.iali, out.jali = alignment_span(out.trace)
    if null2_is_done:
        scores = np.asarray(n2sc, np.float32)[int(i):int(j) + 1]
    else:
        out.null2 = _null2(posterior.matrix, uni) if null2 is None else null2
        out.n2sc = scores = glibc_logf(out.null2[codes[int(i) - 1:int(j)]])
        if posterior.flags & TINY_ROWS and not _same_bits(out.null2, _null2(posterior.matrix, uni, flush_tiny=True)):
            out.flags |= SUBNORMAL
    out.domcorrection = _float_sum(scores)
    return out
