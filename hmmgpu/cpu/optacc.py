"""HMMER 3.4's optimal accuracy alignment of an envelope (``p7_OptimalAccuracy`` and
``p7_OATrace``, impl_sse/optacc.c) on the CPU, lane for lane, and the trace it produces.

A trace is HMMER's ``P7_TRACE``: the states of one path through the model, from S to T,
each with its node ``k``, the residue ``i`` it emitted and that residue's posterior
probability ``pp``. :class:`Trace` holds one as numpy arrays, in ``P7_TRACE``'s order and
with its conventions (``p7_trace_AppendWithPP`` and ``p7_trace_Reverse``): M and I carry
``k``, ``i`` and ``pp``; D carries ``k`` only; N, C and J carry ``i`` and ``pp`` on the
states that emitted (the first of a run of N, C or J emits nothing); S, B, E and T carry
nothing. The OA trace and domain definition's stochastic traces share it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: HMMER's p7T_ state codes.
BOGUS, STATE_M, STATE_D, STATE_I, STATE_S, STATE_N, STATE_B, STATE_E, STATE_C, STATE_T, STATE_J, STATE_X = range(12)


@dataclass
class Trace:
    """A path S..T: ``st`` uint8 (p7T_ codes), ``k`` int32 (node, 0 outside M/D/I), ``i``
    int32 (emitted residue, 1-based, 0 where none), ``pp`` float32 (its posterior
    probability, 0 where none)."""

    st: np.ndarray
    k: np.ndarray
    i: np.ndarray
    pp: np.ndarray

    @property
    def N(self) -> int:
        return int(self.st.size)

    def shifted(self, offset: int) -> "Trace":
        """The trace with every emitted residue's ``i`` moved by ``offset`` (as
        ``rescore_isolated_domain`` moves an envelope's trace to the target's coordinates)."""
        i = np.where(self.i > 0, self.i + np.int32(offset), 0).astype(np.int32)
        return Trace(st=self.st.copy(), k=self.k.copy(), i=i, pp=self.pp.copy())


__all__ = ["Trace", "BOGUS", "STATE_M", "STATE_D", "STATE_I", "STATE_S", "STATE_N", "STATE_B", "STATE_E", "STATE_C",
           "STATE_T", "STATE_J", "STATE_X"]
