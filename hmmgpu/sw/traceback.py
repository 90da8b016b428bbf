"""Exact Smith-Waterman traceback of the reported hits: coordinates, alignment, BLAST's counts.

Recurrences (query residue j = 1..m across, target residue i = 1..n down; ``go`` = open +
extend is the cost of a gap's first residue, ``ge`` = extend of every further one)::

    E(i,j) = max(E(i,j-1) - ge, H(i,j-1) - go)       query residue against a target gap
    F(i,j) = max(F(i-1,j) - ge, H(i-1,j) - go)       target residue against a query gap
    H(i,j) = max(0, H(i-1,j-1) + S(q_j, t_i), E(i,j), F(i,j))

The score is the largest H; the alignment ends in the first cell that reaches it, scanning
target rows in order and query columns within a row (smallest target end, then smallest
query end). The walk back prefers, at every cell, the diagonal, then E, then F, and in a
gap state the gap's opening over its extension; it stops where H falls to 0.

What a hit costs. The scan already knows the hit's score, so the pass that finds the end
cell stops there: the first cell whose H reaches the score is the end (no cell can pass it;
one that does, or none reaching it, means the scan and the traceback disagree, an error).
Rows below the end, and the rest of its row, are never computed. While the rows up to the
end fit in :data:`DIRECTION_BYTES` (one byte per cell), that same pass stores a direction
byte per cell, and the walk back reads them: one pass over the cells before the end, and
nothing else. Longer pairs keep memory bounded: the pass keeps H and F of every ``k``-th
row only (``k`` about the square root of the target's length, larger where those rows would
pass :data:`DIRECTION_BYTES`), and the walk recomputes one block of ``k`` rows at a time from
the row kept above it, storing directions for that block only and only up to the column
where the walk enters it: no cell right of the walk feeds one it visits. Both ways compute
the same recurrence in the same order, so they give the same alignment. The direction pass
computes rows two at a time, the second one column behind the first, so that the two
rows' chains of dependent operations overlap in the processor (3.6-4.2 ns a cell instead
of 6.5 on the development machine).

A query's hits are traced back a group at a time in one compiled call
(:func:`trace_hits`): the end pass, the walk, the alignment's columns, BLAST's counts and a
check that the columns score the scan's score, for every hit of the group, without the
Python interpreter's lock, so groups run in parallel threads without waiting on each other.
The query's scores against every target letter (:func:`query_profile`) are made once per
query and shared by its hits. The passes are compiled by numba (:mod:`._traceback_jit`).
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass

import numpy as np

from hmmgpu.errors import HmmgpuError
from hmmgpu.host import modules_hidden

#: Alignment column kinds of :attr:`Alignment.ops`.
ALIGNED, QUERY_GAP_IN_TARGET, TARGET_GAP_IN_QUERY = 0, 1, 2
#: Bytes one traceback may keep at most: a direction byte per cell up to the end cell when they
#: fit, else the kept rows (H and F, 4 bytes each per column).
DIRECTION_BYTES = 16 << 20


def passes():
    """The compiled passes (:mod:`._traceback_jit`: numba, compiled on first use and cached on
    disk; importing numba costs a few tenths of a second). numba is imported and its CPU target
    set up here with scipy hidden (:func:`~hmmgpu.gpu.runtime.build._scipy_hidden`): numba's
    check of scipy's version and its probe for a BLAS would import scipy and its linear
    algebra (0.45 s on the GPU machine, holding the interpreter's lock the search's other
    threads need) for functions the passes do not use; cffi and yaml are hidden too
    (:func:`_unused_modules_hidden`)."""
    global _PASSES
    if _PASSES is None:
        with _SETUP_LOCK:
            if _PASSES is None:
                from hmmgpu.gpu.runtime.build import _scipy_hidden

                with _scipy_hidden(), _unused_modules_hidden():
                    from numba.core.registry import cpu_target

                    from hmmgpu.sw import _traceback_jit

                    cpu_target.target_context.refresh()
                _PASSES = _traceback_jit
    return _PASSES


_PASSES = None
_SETUP_LOCK = threading.Lock()


def _unused_modules_hidden():
    """Modules numba's import and CPU target import for what the passes never use, hidden
    (where not yet imported) while the passes load, in the thread beside the GPU's start
    (:func:`warm`): cffi, whose ``FFI()`` numba's typing makes (importing pycparser) to type
    cffi functions, and yaml, which numba's configuration imports to read a
    ``.numba_config.yaml`` in the working directory (hidden only where there is none, so
    such a file is still read). Each is left out of numba's features as when it is not
    installed. The CPU time of numba's load and the passes' (the least of 14 processes on the
    loaded development machine): 0.54 s with both, 0.50 s without cffi, 0.46 s without
    either (first quartiles 0.61, 0.55, 0.49)."""
    names = ("cffi", "pycparser") + (() if os.path.exists(".numba_config.yaml") else ("yaml",))
    return modules_hidden(names)


def warm() -> None:
    """Import numba and load (or compile, on a fresh machine) the passes a search's tracebacks
    run (:func:`trace_hits`'s): ``hmmgpu sw`` calls this in a thread while it starts, so the
    first traceback does not wait for it. (:func:`align`'s score pass, which a search does not
    use, compiles at its first call.)"""
    from hmmgpu.sw.matrices import load

    m = load("BLOSUM62").by_code
    q = np.array([1, 2, 3], np.uint8)  # C, D, E: every residue scores positive against itself
    trace_hits(q, [q], [int(sum(m[c, c] for c in q.tolist()))], m, 11, 1)


def query_profile(q: np.ndarray, by_code: np.ndarray) -> np.ndarray:
    """``S(x, q_j)`` for every target code x (rows) and query position j (columns), int32:
    made once per query and shared by the tracebacks of its hits."""
    return np.ascontiguousarray(np.asarray(by_code, np.int32)[:, np.asarray(q, np.intp)])


@dataclass(frozen=True)
class Alignment:
    """One local alignment: 1-based inclusive coordinates and the column kinds."""

    score: int
    q_start: int
    q_end: int
    t_start: int
    t_end: int
    ops: np.ndarray  #: uint8 per column: 0 aligned, 1 query residue vs gap, 2 target residue vs gap

    def columns(self, q, t):
        """(query letters row, target letters row) as Easel codes (int64), -1 for a gap."""
        ops = self.ops
        qa = np.full(ops.size, -1, np.int64)
        ta = np.full(ops.size, -1, np.int64)
        qs, ts = ops != 2, ops != 1
        qa[qs] = np.asarray(q)[self.q_start - 1:self.q_start - 1 + int(qs.sum())]
        ta[ts] = np.asarray(t)[self.t_start - 1:self.t_start - 1 + int(ts.sum())]
        return qa, ta

    def counts(self, q, t, by_code) -> tuple:
        """(columns, identities, positives, mismatches, gap runs, gap columns), BLAST's counts."""
        qa, ta = self.columns(q, t)
        ops = self.ops
        both = ops == 0
        same = both & (qa == ta)
        pos = int(np.count_nonzero(np.asarray(by_code)[qa[both], ta[both]] > 0))
        runs = int(np.count_nonzero((ops != 0) & np.concatenate([[True], ops[1:] != ops[:-1]])))
        aligned = int(both.sum())
        return ops.size, int(same.sum()), pos, aligned - int(same.sum()), runs, ops.size - aligned


def trace_hits(q: np.ndarray, targets, scores, by_code: np.ndarray, gap_open: int, gap_extend: int,
               profile: np.ndarray | None = None, direction_bytes: int = DIRECTION_BYTES, label=None) -> tuple:
    """Trace back hits of query codes ``q``: ``targets`` (codes of each) with their scan
    ``scores`` (each the optimal local score). Returns (counts, alignments): counts an int64
    array, one row per hit: (columns, identities, positives, mismatches, gap runs, gap
    columns), BLAST's counts; alignments one :class:`Alignment` each. One compiled call for
    the whole group. HmmgpuError when a score is not what the recurrence gives (``label(h)``
    names hit h in the message)."""
    jit = passes()
    # writable arrays throughout (numba would compile the passes once more for read-only ones)
    q = np.require(q, np.uint8, ["C", "W"])
    profile = query_profile(q, by_code) if profile is None else np.require(profile, np.int32, ["C", "W"])
    by = np.require(by_code, np.int32, ["C", "W"])
    scores = np.require(scores, np.int64, ["C", "W"])
    lengths = np.array([len(t) for t in targets], np.int64)
    starts = np.zeros(lengths.size + 1, np.int64)
    np.cumsum(lengths, out=starts[1:])
    residues = np.concatenate([np.asarray(t, np.uint8) for t in targets]) if len(targets) else np.zeros(0, np.uint8)
    ops = np.empty(int(starts[-1]) + q.size * lengths.size, np.uint8)
    out = np.zeros((lengths.size, jit.FIELDS), np.int64)
    go, ge = int(gap_open) + int(gap_extend), int(gap_extend)
    jit.trace_group(profile, q, by, residues, starts, scores, go, ge, int(direction_bytes), ops, out)
    bad = np.flatnonzero(out[:, jit.STATUS] != jit.OK)
    if bad.size:
        h = int(bad[0])
        why = {jit.NOT_REACHED: "no cell reaches it", jit.EXCEEDED: f"a cell reaches {int(out[h, jit.SCORE])}",
               jit.RESCORE: "the alignment's columns score differently"}[int(out[h, jit.STATUS])]
        raise HmmgpuError(f"internal error: {label(h) if label else f'hit {h}'}: the scan's score {int(scores[h])} is not the traceback's ({why})")
    alignments = []
    for h in range(lengths.size):
        r = out[h]
        at = int(r[jit.OPS_AT])
        alignments.append(Alignment(int(scores[h]), int(r[jit.Q_START]), int(r[jit.Q_END]), int(r[jit.T_START]),
                                    int(r[jit.T_END]), ops[at:at + int(r[jit.LENGTH])]))
    return out[:, jit.LENGTH:jit.GAPS + 1], alignments


def align(q: np.ndarray, t: np.ndarray, by_code: np.ndarray, gap_open: int, gap_extend: int,
          profile: np.ndarray | None = None) -> Alignment:
    """The optimal local alignment of query codes ``q`` and target codes ``t`` (see the module
    text): a score-only pass finds the score, then :func:`trace_hits` the alignment."""
    jit = passes()
    q = np.require(q, np.uint8, ["C", "W"])
    t = np.require(t, np.uint8, ["C", "W"])
    profile = query_profile(q, by_code) if profile is None else np.require(profile, np.int32, ["C", "W"])
    go, ge = int(gap_open) + int(gap_extend), int(gap_extend)
    best = int(jit.best_score(profile, t, go, ge)) if q.size and t.size else 0
    if best <= 0:
        return Alignment(0, 0, 0, 0, 0, np.zeros(0, np.uint8))
    return trace_hits(q, [t], [best], by_code, gap_open, gap_extend, profile=profile)[1][0]
