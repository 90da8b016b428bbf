"""The post-filter stage's plan: each query's work cut into tasks of about equal cost.

What is computed
----------------
For one query, the targets that passed the filters (or, on pyhmmer's route, every target)
go through the post-filter stage (Forward, Backward, domain definition, null2 and the
scores). :class:`TaskPlanner` cuts that work into *tasks* (a query and a range of its
targets, about :data:`TASK_SECONDS` of work each) so that every thread stays busy to the end
of a run; :mod:`hmmgpu.stages.merge` joins the tasks' results into exactly one serial run's.
The plan knows nothing of the device a task runs on: an implementation of
:class:`~hmmgpu.stages.protocol.PostFilterStage` runs the tasks.

Two details serve the exact merge. Each task's targets are given by their global database
positions, and a task runs with ``Z`` fixed to its first position + 1; targets whose name
occurs twice in one task are planned as tasks of their own, so that every hit's position
can be found from its name. When hmmgpu's filters ran first (a *filtered* task), they
decided exactly which targets pass MSV, the bias filter and the Viterbi filter, so pyhmmer
runs with ``F1 = F2 = 1`` and its counters for those stages are replaced by hmmgpu's.

The constants below are measured speeds and cut sizes; how each was measured is in
docs/performance.md ("The cost model").
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from hmmgpu.costs import CPU_CELLS_PER_SECOND

#: Work per task, in seconds on one thread (estimated): small enough to balance the end of a
#: run over every thread, large enough that the per-task cost (a block, the merge, the GIL) stays small.
TASK_SECONDS = 0.1
#: The smallest task of pyhmmer's route (its whole pipeline over a range of a query's
#: targets), in seconds on one thread by :data:`~hmmgpu.costs.CPU_CELLS_PER_SECOND`.
PIPELINE_TASK_SECONDS = 0.1
#: pyhmmer's route cuts a run's estimated time into about this many tasks per thread (each at
#: least :data:`PIPELINE_TASK_SECONDS`): enough to balance the end of a run, no more.
RANGE_SHARES = 4
#: Estimated speed of pyhmmer's post-filter stage (Forward, Backward, domain definition) per
#: thread, in model cells (M x L) per second.
FORWARD_CELLS_PER_SECOND = 7.0e7
#: Smallest task of a query that is split to keep every thread busy (fewer queries than
#: threads), in model cells: one hit-rich query alone cannot rely on the time estimate.
SPLIT_MIN_CELLS = 1.0e8
#: A FASTA file searched piece by piece (:class:`~hmmgpu.formats.seqdb.FastaPieces`) is cut by
#: guided self-scheduling: each piece a 1 / (threads x :data:`PIECE_SHARES`) share of the bytes
#: not yet cut, between :data:`PIECE_BYTES_MIN` and :data:`PIECE_BYTES_MAX`, and at least
#: :data:`PIECE_CELLS_MIN` model cells, so the last pieces are small and short models' pieces
#: keep their fixed costs small.
PIECE_SHARES = 8
PIECE_BYTES_MIN = 128 << 10
PIECE_CELLS_MIN = 1.75e7
PIECE_BYTES_MAX = 4 << 20
#: pyhmmer's route over ranges of a database held as arrays makes each target a sequence
#: object once, about :data:`SEQUENCE_SECONDS` each under the GIL, or writes each range as
#: FASTA text that Easel reads in C, about :data:`TEXT_SECONDS_PER_RESIDUE` a residue and
#: query in every thread at once; a run takes the cheaper (:meth:`TaskPlanner.ranges_as_text`).
SEQUENCE_SECONDS = 5.5e-6
TEXT_SECONDS_PER_RESIDUE = 1.2e-8


def piece_bytes(left_bytes: float, model_length: int, threads: int) -> int:
    """The bytes of the next piece of a FASTA file searched with a model of ``model_length``
    on ``threads`` threads, with ``left_bytes`` of its text not yet cut into pieces (a residue
    being at most a byte)."""
    share = left_bytes / (max(1, threads) * PIECE_SHARES)
    least = max(PIECE_BYTES_MIN, PIECE_CELLS_MIN / max(1, model_length))
    return int(min(max(share, least), PIECE_BYTES_MAX))


@dataclass
class Task:
    """One query's targets ``positions`` (sorted database indices) for one pyhmmer run."""

    query: object  #: the engine's Query (index, hmm)
    positions: np.ndarray
    z_fixed: float  #: the Z the task runs with (its first position + 1)
    filtered: bool  #: hmmgpu's filters ran first (F1 = F2 = 1 in pyhmmer)
    part: int = 0  #: this task's number among its query's tasks
    piece: int | None = None  #: the piece of a file searched piece by piece (then ``positions`` is empty)
    #: the (decoded, defined) pair the GPU process made of the task's F3 passers after the filters
    #: (:meth:`~hmmgpu.stages.protocol.PostFilterStage.passers_to_define`), in place of its query's
    device_answers: tuple | None = None


@dataclass
class TaskResult:
    """What a task gives back: its hits, as ``TopHits.__getstate__()`` ready to merge, or, for
    a query's only task over every target from the first, the ``TopHits`` themselves (already
    one serial run's whole result)."""

    state: dict = None
    hits: object = None  #: the whole result (``TopHits``), when there is nothing to merge
    cpu_seconds: float = 0.0  #: CPU time the task took
    filtered: bool = False  #: the task ran after hmmgpu's filters (its filter counters are not HMMER's)
    #: a piece's result: (state, index in the piece of each hit's target that HMMER's keep rule
    #: may drop, by name) for each pyhmmer run over it (one, but for names repeated in it)
    piece_parts: list = None


class TaskPlanner:
    """Cuts each query's work over one database into tasks of about equal cost."""

    def __init__(self, db, options, threads: int = 0, model_lengths=None):
        self.db = db
        self.options = options
        queries = len(model_lengths) if model_lengths else None
        #: tasks each query is cut into at least (when the work allows): every one of the
        #: engine's ``threads`` busy when there are fewer queries (``model_lengths``: the run's
        #: models' lengths, when known)
        self.min_parts = -(-threads // queries) if queries and threads > queries else 1
        #: the longest range task on pyhmmer's route, in seconds (:data:`RANGE_SHARES`); None
        #: when the run's models are not known (a query is then cut into at most RANGE_SHARES)
        self.range_seconds = None if not queries or db.pieces is not None else max(
            PIPELINE_TASK_SECONDS,
            float(sum(model_lengths)) * db.total_residues / CPU_CELLS_PER_SECOND / (RANGE_SHARES * max(1, threads)))
        self.threads = threads
        self._queries = queries
        self.by_position = options.by_evalue and options.Z is None

    @functools.cached_property
    def ranges_as_text(self) -> bool:
        """pyhmmer's route reads each range of targets as FASTA text (:func:`_ranges_as_text`);
        decided when a range is first planned, not on the filters' route, which has none."""
        return _ranges_as_text(self.db, self._queries, self.threads)

    @property
    def ranges_make_sequences(self) -> bool:
        """pyhmmer's route over ranges would first make every target a sequence object, one at
        a time under the interpreter lock (:data:`SEQUENCE_SECONDS`): a database held as arrays
        whose ranges are not read as FASTA text."""
        return held_as_arrays(self.db) and not self.ranges_as_text

    @functools.cached_property
    def _everything(self) -> np.ndarray:
        """Every target's position (one task of a query over the whole database; shared, so read-only)."""
        everything = np.arange(self.db.n, dtype=np.int64)
        everything.setflags(write=False)
        return everything

    @functools.cached_property
    def _cumulative_lengths(self) -> np.ndarray:
        return np.cumsum(self.db.lengths, dtype=np.int64)

    def plan(self, query, positions=None) -> list:
        """The tasks of ``query``: its survivors ``positions`` (filtered), or every target. A
        list: on pyhmmer's route over a file searched piece by piece, a task per piece."""
        if positions is None and self.db.pieces is not None:
            return [Task(query=query, positions=np.zeros(0, np.int64), z_fixed=1.0, filtered=False, part=k, piece=k)
                    for k in range(len(self.db.pieces))]
        M = query.hmm.M
        lengths = self.db.lengths
        if positions is None:  # pyhmmer's whole pipeline over contiguous ranges of targets
            cells = float(self.db.total_residues) * M
            seconds = cells / CPU_CELLS_PER_SECOND
            longest = self.range_seconds or max(PIPELINE_TASK_SECONDS, seconds / RANGE_SHARES)
            parts = max(seconds // longest, min(self.min_parts, cells // SPLIT_MIN_CELLS))
            parts = int(min(max(1, parts), max(1, self.db.n // 64)))
            if parts == 1:   # every model against a small database: nothing to cut
                return [self._task(query, self._everything, False)]
            if self.ranges_as_text:
                return self._tasks(query, self._guided_ranges(M), filtered=False)
            cuts = np.searchsorted(self._cumulative_lengths, self.db.total_residues * np.arange(1, parts) / parts)
            bounds = _distinct(np.concatenate([[0], cuts, [self.db.n]]))
            ranges = [np.arange(a, b, dtype=np.int64) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
            if not ranges:
                ranges = [np.zeros(0, np.int64)]
            return self._tasks(query, ranges, filtered=False)
        positions = np.asarray(positions, np.int64)
        if positions.size == 0:
            return self._tasks(query, [positions], filtered=True)
        cost = lengths[positions].astype(np.float64) * M / FORWARD_CELLS_PER_SECOND
        cum = np.cumsum(cost)
        cells = float(cum[-1]) * FORWARD_CELLS_PER_SECOND
        parts = max(1, int(cum[-1] // TASK_SECONDS), int(min(self.min_parts, cells // SPLIT_MIN_CELLS, positions.size)))
        cuts = np.searchsorted(cum, cum[-1] * np.arange(1, parts) / parts, side="right")
        groups = [g for g in np.split(positions, _distinct(cuts)) if g.size]
        return self._tasks(query, groups, filtered=True)

    def plan_shard(self, query, first: int, end: int, survivors=None) -> list:
        """The tasks of ``query`` over one shard of the database, the targets ``first`` ..
        ``end - 1`` (a dask worker's: :mod:`hmmgpu.distributed.cluster`): the filters'
        ``survivors`` in it (database positions) cut by cost as :meth:`plan` cuts them, or
        pyhmmer's whole pipeline over the range, cut into consecutive ranges of equal residues
        (:data:`RANGE_SHARES` a thread, each at least :data:`PIPELINE_TASK_SECONDS`, a
        target whose name occurs twice in one a task of its own, as in :meth:`plan`)."""
        if survivors is not None:
            return self.plan(query, survivors)
        cumulative = self._cumulative_lengths
        before = int(cumulative[first - 1]) if first else 0
        residues = int(cumulative[end - 1]) - before if end > first else 0
        seconds = float(residues) * query.hmm.M / CPU_CELLS_PER_SECOND
        longest = max(PIPELINE_TASK_SECONDS, seconds / (RANGE_SHARES * max(1, self.threads)))
        parts = int(min(max(1, seconds // longest), max(1, (end - first) // 64)))
        cuts = np.searchsorted(cumulative, before + residues * np.arange(1, parts) / parts)
        bounds = _distinct(np.concatenate([[first], cuts, [end]]).astype(np.int64))
        ranges = [np.arange(a, b, dtype=np.int64) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
        return self._tasks(query, ranges or [np.zeros(0, np.int64)], filtered=False)

    def _guided_ranges(self, M: int) -> list:
        """Ranges of consecutive targets, cut as a FASTA file's pieces are (:func:`piece_bytes`,
        a residue for a byte): they shrink towards the end of the database. A small database
        is still cut into :attr:`min_parts` (when it holds :data:`SPLIT_MIN_CELLS` a part)."""
        cumulative, n, total = self._cumulative_lengths, self.db.n, self.db.total_residues
        most = total / max(1, min(self.min_parts, float(total) * M // SPLIT_MIN_CELLS))
        bounds = [0]
        while bounds[-1] < n:
            done = int(cumulative[bounds[-1] - 1]) if bounds[-1] else 0
            step = min(piece_bytes(total - done, M, self.threads), most)
            stop = int(np.searchsorted(cumulative, done + step)) + 1
            bounds.append(min(max(stop, bounds[-1] + 1), n))
        return [np.arange(a, b, dtype=np.int64) for a, b in zip(bounds[:-1], bounds[1:])]

    def _tasks(self, query, groups, filtered: bool) -> list:
        """Tasks of ``groups`` of positions, in which no name occurs twice where the kept-hit
        rule places hits by name (:attr:`by_position`): survivors are cut by occurrence (every
        name's first occurrence in one task, its second in the next, ...: a database that holds
        its proteins four times gives four tasks, not one for each repeated target); a range's
        targets whose name the database repeats each run alone, the rest as runs of
        consecutive targets."""
        tasks = []
        for g in groups:
            if self.by_position and g.size > 1 and filtered:
                tasks.extend(self._task(query, part, filtered) for part in _by_occurrence(self.db, g))
                continue
            if self.by_position and g.size > 1 and g[0] > 0:
                singles = _repeated_names(self.db, g[self.db.repeated_names[g]])
                if singles.size:
                    tasks.extend(self._task(query, np.array([p]), filtered) for p in singles)
                    tasks.extend(self._task(query, run, filtered) for run in _runs(np.setdiff1d(g, singles)))
                    continue
            tasks.append(self._task(query, g, filtered))
        for k, t in enumerate(tasks):
            t.part = k
        return tasks

    @staticmethod
    def _task(query, positions, filtered) -> Task:
        first = int(positions[0]) + 1 if positions.size else 1
        return Task(query=query, positions=positions, z_fixed=float(first), filtered=filtered)


def held_as_arrays(db) -> bool:
    """``db`` holds its targets as arrays (a made database, or one read by the numpy reader or
    from a pyhmmer block), not as the sequence objects Easel read (or as a file's pieces)."""
    from hmmgpu.formats.seqdb import EaselSequenceDB, SequenceDB

    return isinstance(db, SequenceDB) and not isinstance(db, EaselSequenceDB)


def _ranges_as_text(db, queries: int | None, threads: int) -> bool:
    """Whether pyhmmer's route reads each range of ``db``'s targets as FASTA text rather than
    as sequence objects made once for the whole run (:data:`SEQUENCE_SECONDS`): for a database
    held as arrays that :meth:`~hmmgpu.formats.seqdb.SequenceDB.fasta_text` can write, in a run of
    ``queries`` (known) few enough for ``threads``."""
    if not queries or not held_as_arrays(db) or not db.n:
        return False
    text_seconds = queries * db.total_residues * TEXT_SECONDS_PER_RESIDUE / max(1, threads)
    return text_seconds < db.n * SEQUENCE_SECONDS and db.writes_as_fasta


def _distinct(ascending: np.ndarray) -> np.ndarray:
    """The distinct values of an ascending array (``np.unique`` without its sort, and without
    the import of ``numpy.ma`` it makes in numpy 2: 7 ms of a small search)."""
    ascending = np.asarray(ascending)
    return ascending[np.concatenate([[True], ascending[1:] != ascending[:-1]])] if ascending.size else ascending


def _runs(ascending: np.ndarray) -> list:
    """The runs of consecutive values of an ascending array of distinct positions."""
    return np.split(ascending, np.flatnonzero(np.diff(ascending) != 1) + 1) if ascending.size else []


def names_of(db, positions: np.ndarray) -> list:
    """The target names of ``positions``."""
    return [db.name(p) for p in positions.tolist()]


def _by_occurrence(db, positions: np.ndarray) -> list:
    """``positions`` (ascending) cut so that no name occurs twice in a part: the k-th occurrence
    of each name among them in the k-th part, each part ascending; ``[positions]`` when every
    name occurs once."""
    seen: dict = {}
    occurrence = np.empty(positions.size, np.int64)
    for k, name in enumerate(names_of(db, positions)):
        occurrence[k] = seen[name] = seen.get(name, -1) + 1
    if not occurrence.any():
        return [positions]
    return [positions[occurrence == k] for k in range(int(occurrence.max()) + 1)]


def _repeated_names(db, positions: np.ndarray) -> np.ndarray:
    """The positions whose target name occurs more than once among ``positions`` (on the
    route over ranges, only those whose name occurs twice in the database are passed)."""
    from hmmgpu.formats.seqdb import repeated

    if positions.size < 2:
        return np.zeros(0, np.int64)
    return np.asarray(positions, np.int64)[repeated(names_of(db, positions))]
