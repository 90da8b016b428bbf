"""The stage after the filters: pyhmmer's Forward, Backward and domain definition, as tasks.

What is computed
----------------
For one query, the targets that passed the filters (or, on the pyhmmer route, every
target) go through pyhmmer's own pipeline, which computes the Forward filter, Backward,
domain definition, null2 and the scores. Work is split into *tasks* (a query and a range
of its targets, about :data:`TASK_SECONDS` of work each) so that every thread stays busy to
the end of a run, and the tasks' ``TopHits`` are merged into exactly the ``TopHits`` of one
serial ``hmmsearch`` over the whole database: the same hits, order, scores, E-values,
domZ, the same set of kept-but-unreported hits, and hmmsearch's pipeline counters.

Why a split run equals a serial run
------------------------------------
Each target is scored independently (domain definition reseeds its random generator per
region), so only two things depend on what else was searched:

* **Z.** Without ``-Z``, hmmsearch's Z is the number of targets; the final list is
  thresholded with it after all targets are done (``p7_tophits_Threshold``), and so is
  domZ. The merge sets the parts' target counts so that they sum to the database size.
* **Which hits are kept.** While it searches, HMMER keeps a hit only if
  ``exp(lnP) * Z_running <= E``, where Z_running is the number of targets counted so far,
  i.e. the target's database position + 1. Kept-but-unreported hits matter: they set
  ``len(TopHits)`` and the name-column width of the tables. A task runs with ``Z`` fixed
  to its first position + 1 (a lower bound for all its targets), so it keeps a superset,
  and the hits whose ``pvalue * (position + 1) > E`` are then dropped: exactly the serial
  run's set. This needs each hit's position, found from its name; targets whose name
  occurs twice in one task are run as tasks of their own (with ``Z`` = their position + 1).
  With ``-T``, bit cutoffs or ``-Z`` the rule does not depend on the position at all.

When hmmgpu's filters ran first (a *filtered* task), they decided exactly which targets
pass MSV, the bias filter and the Viterbi filter, so pyhmmer runs with ``F1 = F2 = 1``:
it still computes the bias-corrected null score (``filtersc``) that the Forward P-value
needs, and skips re-running the Viterbi filter, and its counters for those stages are
replaced by hmmgpu's.
"""
from __future__ import annotations

import functools
import math
import struct
import threading
import time
from dataclasses import dataclass

import numpy as np

from .backends import CPU_CELLS_PER_SECOND

#: Work per task, in seconds on one thread (estimated): small enough to balance the end of
#: a run over every thread, large enough that the per-task cost (a block, the merge, and
#: the moments each task needs the GIL) stays small. Measured on the 16-core GPU machine
#: with 600 Pfam models: 0.1 s (1,346 tasks) ran 25% faster than 0.03 s (4,482 tasks).
TASK_SECONDS = 0.1
#: The smallest task of pyhmmer's route (its whole pipeline over a range of a query's
#: targets), in seconds on one thread by :data:`~hmmgpu.backends.CPU_CELLS_PER_SECOND`.
PIPELINE_TASK_SECONDS = 0.1
#: pyhmmer's route cuts the run's work into about this many tasks per thread: its tasks take
#: at most the run's estimated time (every model's, when their lengths are known) over
#: ``RANGE_SHARES`` x threads, and at least :data:`PIPELINE_TASK_SECONDS`. Enough to balance
#: the end of a run, whatever the models' lengths; no more, because each task costs (a
#: profile configured, hits serialized and merged). Measured on the 16-core H200 machine, 20
#: Pfam models against 29 M residues with one, two and four ranges a query: 2.66, 1.69 and
#: 1.30 s for 13.2-14.5 CPU-seconds (``benchmarks/results/scaling_probe_after_h200_2026-11-24.json``);
#: the 600 models cut by 0.1 s alone (997 tasks against 618) took 20.5 s against 18.6 s.
RANGE_SHARES = 4
#: Estimated speed of pyhmmer's post-filter stage (Forward, Backward, domain definition) per
#: thread, in model cells (M x L) per second.
FORWARD_CELLS_PER_SECOND = 7.0e7
#: Smallest task of a query that is split to keep every thread busy (fewer queries than
#: threads), in model cells: a hit-rich model's whole pipeline runs several times slower per
#: cell than :data:`~hmmgpu.backends.CPU_CELLS_PER_SECOND`, so one query alone (a single-model
#: search of a large database) cannot rely on the estimate to cut it into enough tasks.
SPLIT_MIN_CELLS = 1.0e8
#: A FASTA file searched piece by piece (:class:`~hmmgpu.seqdb.FastaPieces`) is cut by guided
#: self-scheduling: each piece is a 1 / (threads x :data:`PIECE_SHARES`) share of the bytes not
#: yet cut, between :data:`PIECE_BYTES_MIN` and :data:`PIECE_BYTES_MAX`. The pieces are searched
#: in file order, so the first are large (fewer per-piece costs) and the last small: a costly
#: stretch near the end of the file keeps one thread busy for less time after the others are
#: done. Measured on the 16-core H200 machine, one Pfam model against 116 M residues, three runs
#: each against 16 equal pieces per thread: medians 1.52 s against 1.66 s (PF00005; level in a
#: second run), 2.23 s against 2.46 s (PF07690), level for PF00873 and PF05088, and 0.64 s
#: against 0.99 s for the short PF00096 (M 23; hmmsearch 0.87 s) (benchmarks/results/pieces_probe_*).
#: A piece also holds at least :data:`PIECE_CELLS_MIN` model cells (M x residues), so that a
#: short model's pieces keep their fixed costs (a temporary file, Easel's reader, a merge)
#: small (PF00096: 0.64 s against 0.72 s without); from M = 137 up, :data:`PIECE_BYTES_MIN`
#: is the larger.
PIECE_SHARES = 8
PIECE_BYTES_MIN = 128 << 10
PIECE_CELLS_MIN = 1.75e7
PIECE_BYTES_MAX = 4 << 20
#: pyhmmer's route over ranges of a database held as arrays (a made database) needs the
#: targets as pyhmmer reads them. Making every target a sequence object once costs about
#: :data:`SEQUENCE_SECONDS` each, holding the GIL (0.41 s for 77,801 targets on one core of a
#: 2-core machine, 1.86 s for 311,204 on the 16-core H200 machine), so the other threads wait;
#: writing a range as FASTA text that Easel reads in C (:meth:`~hmmgpu.seqdb.SequenceDB.fasta_text`)
#: costs about :data:`TEXT_SECONDS_PER_RESIDUE` a residue and query, in every thread at once
#: (29 M residues: 0.24 s on one core, 0.12 s on two, and 0.01 s more of Easel's reading per
#: 2.3 M). A run takes the text when its queries' text, spread over its threads, costs less.
SEQUENCE_SECONDS = 5.5e-6
TEXT_SECONDS_PER_RESIDUE = 1.2e-8
_ZSETBY_NTARGETS = 0


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


class SequenceCache:
    """pyhmmer ``DigitalSequence`` objects of database targets, made once on first use, and
    the position of every target name (for :func:`_drop_unkept`)."""

    def __init__(self, db):
        from pyhmmer.easel import Alphabet

        self.db = db
        self.alphabet = Alphabet.amino()
        self._seqs: dict = {}
        self._whole = None
        self._lock = threading.Lock()
        self._names = None

    def block(self, positions):
        """A ``DigitalSequenceBlock`` of the targets ``positions``, in that order."""
        from .seqdb import sequence_block

        seqs = self._seqs
        out = []
        for p in positions.tolist():
            s = seqs.get(p)
            if s is None:
                s = seqs[p] = self.db.digital_sequence(p)
            out.append(s)
        return sequence_block(out)

    def range_block(self, start: int, stop: int):
        """A block of the consecutive targets ``start..stop-1`` (the whole database's block, or
        one of the same sequence objects: :func:`~hmmgpu.seqdb.sequence_block`, not a slice of
        the block, which pyhmmer makes by appending)."""
        from .seqdb import sequence_block

        whole = self._whole
        if whole is None:
            with self._lock:
                if self._whole is None:
                    block = self.db.block()
                    self._whole = (block, list(block))
                whole = self._whole
        block, sequences = whole
        return block if (start, stop) == (0, self.db.n) else sequence_block(sequences[start:stop])

    def names(self) -> dict:
        """The position of each target name: an int, or for a name that occurs more than once
        the ascending array of its positions. Only pyhmmer's route over ranges of a database
        read by Easel needs them: a filtered task looks up its own targets' names
        (:func:`_names_of`), and a range of a database held as arrays searches its names
        (:meth:`~hmmgpu.seqdb.SequenceDB.name_positions`)."""
        if self._names is not None:
            return self._names
        with self._lock:
            if self._names is None:
                where = _positions_by_name(self.db.names())
                self._names = {k: np.array(v) if isinstance(v, list) else v for k, v in where.items()}
        return self._names


class ForwardStage:
    """Plans, runs and merges the pyhmmer tasks of each query over one database."""

    def __init__(self, db, options, ftz: bool = False, threads: int = 0, model_lengths=None):
        self.db = db
        self.options = options
        self.ftz = ftz
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
        self.sequences = SequenceCache(db)
        self.by_position = options.by_evalue and options.Z is None
        self._local = threading.local()

    # ------------------------------------------------------------ planning
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
        return _held_as_arrays(self.db) and not self.ranges_as_text

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
        tasks = []
        for g in groups:
            if self.by_position and g.size > 1 and (filtered or g[0] > 0):
                # survivors are few: all are checked; of a range, those whose name the database repeats
                suspects = g if filtered else g[self.db.repeated_names[g]]
                singles = _repeated_names(self.db, suspects)
                if singles.size:
                    for p in singles:
                        tasks.append(self._task(query, np.array([p]), filtered))
                    g = np.setdiff1d(g, singles)
                    if not filtered:  # a range task searches consecutive targets: the rest, as runs
                        tasks.extend(self._task(query, run, filtered) for run in _runs(g))
                        continue
                    if not g.size:
                        continue
            tasks.append(self._task(query, g, filtered))
        for k, t in enumerate(tasks):
            t.part = k
        return tasks

    @staticmethod
    def _task(query, positions, filtered) -> Task:
        first = int(positions[0]) + 1 if positions.size else 1
        return Task(query=query, positions=positions, z_fixed=float(first), filtered=filtered)

    # ------------------------------------------------------------ running
    def _pipeline(self, filtered: bool):
        """This thread's pyhmmer pipeline (one per thread: it holds a background model)."""
        cache = getattr(self._local, "pipelines", None)
        if cache is None:
            cache = self._local.pipelines = {}
            if self.ftz:
                from .fpenv import set_flush_to_zero

                set_flush_to_zero(True)  # this worker thread computes in hmmsearch's float mode
        pli = cache.get(filtered)
        if pli is None:
            import pyhmmer.plan7 as p7

            kwargs = self.options.pipeline_kwargs()
            if filtered:
                kwargs.update(F1=1.0, F2=1.0)
            pli = cache[filtered] = p7.Pipeline(self.sequences.alphabet, **kwargs)
        return pli

    def run(self, task: Task, alone: bool = False) -> TaskResult:
        """Run one task (``alone``: the query's only one); its result, ready to merge."""
        start = time.thread_time()
        pli = self._pipeline(task.filtered)
        pli.clear()  # counters and random generator as in a new pipeline
        if task.piece is not None:
            return TaskResult(piece_parts=self._run_piece(pli, task), cpu_seconds=time.thread_time() - start)
        # a range of targets from the first one counts Z as a serial run does: nothing to fix
        from_start = not task.filtered and (not task.positions.size or task.positions[0] == 0)
        pli.Z = task.z_fixed if self.by_position and not from_start else self.options.Z
        # the model itself: pyhmmer configures it into this pipeline's reused buffers (a copy
        # of an optimized profile per task would map and unmap memory in every thread)
        hmm = task.query.hmm
        if task.filtered or not task.positions.size:
            hits = _searched(pli.search_hmm, hmm, self.sequences.block(task.positions))
        else:  # a range: consecutive targets (:meth:`_tasks`)
            first, end = int(task.positions[0]), int(task.positions[-1]) + 1
            if self.ranges_as_text:
                from .seqdb import search_fasta_text

                hits = _searched(search_fasta_text, hmm, self.db.fasta_text(first, end), pli, "a range of targets")
            else:
                hits = _searched(pli.search_hmm, hmm, self.sequences.range_block(first, end))
        if alone and from_start:
            return TaskResult(hits=hits, cpu_seconds=time.thread_time() - start)
        state = hits.__getstate__()
        if self.by_position and not from_start and len(hits):
            _drop_unkept(state, self._position_of(task), self.options.E, bound=int(task.positions[-1]) + 1)
        return TaskResult(state, cpu_seconds=time.thread_time() - start, filtered=task.filtered)

    def _position_of(self, task: Task):
        """The function from a hit's target name to its database position, for ``task``. A
        name that occurs twice in one task's targets only occurs in tasks of one target
        (:meth:`_tasks`); one that occurs in several tasks has its position in this one."""
        positions = task.positions
        if positions.size == 1:
            return lambda name: int(positions[0])
        if task.filtered:  # a few hundred survivors: their own names, not the database's
            return dict(zip(_names_of(self.db, positions), positions.tolist())).__getitem__
        if _held_as_arrays(self.db):  # consecutive targets with distinct names
            return self.db.name_positions(int(positions[0]), int(positions[-1]) + 1)
        where = self.sequences.names()
        return lambda name: _position_in(where[name], positions)

    def _run_piece(self, pli, task: Task) -> list:
        """pyhmmer's whole pipeline over one piece of a file (:class:`~hmmgpu.seqdb.FastaPieces`).

        Its first target's position is not known until the pieces before it are searched, so
        a piece after the first runs with ``Z = 1`` (it keeps every hit any position would)
        and finds, for each hit that a later position could drop, its target's index in the
        piece; :meth:`merge` then applies the rule. A hit whose target name occurs twice in
        the piece cannot be placed by name: the piece is then run again as pyhmmer's sequences,
        those targets one by one."""
        pieces, k, hmm = self.db, task.piece, task.query.hmm
        first = k == 0 or not self.by_position
        pli.Z = self.options.Z if first else 1.0
        hits = _searched(pieces.search, hmm, k, pli)
        state = hits.__getstate__()
        if first or not len(hits):
            return [(state, {})]
        bound = float(pieces.records_at_most(k))  # no target's position + 1 is larger
        droppable = [name for lnp, name in map(_hit_fields, state["unsrt"])
                     if math.exp(lnp) * bound > self.options.E]  # a later position may drop them
        if not droppable:
            return [(state, {})]
        found = pieces.record_indices(k, state["pipeline"]["nseqs"], droppable)
        placed = {name: index for name, index in found.items() if index is not None}
        unplaced = [name for name, index in found.items() if index is None]
        if not unplaced:
            return [(state, placed)]
        block = pieces.block(k)
        names = [seq.name.encode() for seq in block]
        where = _positions_by_name(names)
        twice = {name for name, at in where.items() if isinstance(at, list)}
        if not twice.intersection(unplaced):
            placed.update((name, where[name]) for name in unplaced)
            return [(state, placed)]
        from .seqdb import sequence_block

        parts = []
        for i, name in enumerate(names):  # each target of a repeated name alone
            if name in twice:
                pli.clear()
                pli.Z = 1.0
                alone = _searched(pli.search_hmm, hmm, sequence_block([block[i]]))
                parts.append((alone.__getstate__(), {name: i}))
        rest = [i for i, name in enumerate(names) if name not in twice]
        if rest:
            pli.clear()
            pli.Z = 1.0
            others = _searched(pli.search_hmm, hmm, sequence_block([block[i] for i in rest]))
            parts.append((others.__getstate__(), {names[i]: i for i in rest}))
        return parts

    # ------------------------------------------------------------ merging
    def merge(self, query, results: list, counts=None) -> tuple:
        """One serial run's ``TopHits`` from the tasks' results (``counts``: hmmgpu's filter
        counters for the targets of the filtered tasks; a range task's own counters are
        HMMER's), and its pipeline counters (None for a whole-database pyhmmer run, whose
        ``TopHits`` hold them)."""
        from pyhmmer.plan7 import TopHits

        if len(results) == 1 and results[0].hits is not None:  # already a serial run's result
            return results[0].hits, None
        if results[0].piece_parts is None:
            states, n, residues = [r.state for r in results], self.db.n, self.db.total_residues
            filtered = [r.filtered for r in results]
        else:
            states, n, residues = _placed_pieces(results, self.options.E)
            filtered = [False] * len(states)
        for k, state in enumerate(states):
            pli = state["pipeline"]
            pli["F1"], pli["F2"] = self.options.F1, self.options.F2  # the user's, not the filtered tasks' 1.0
            if k:
                pli["nseqs"] = pli["nres"] = 0
            else:
                pli["nseqs"], pli["nres"] = n, residues
            if counts is not None and filtered[k]:  # F1 = F2 = 1 let every target through
                pli["n_past_msv"] = pli["n_past_bias"] = pli["n_past_vit"] = 0
        if counts is not None:
            first = states[0]["pipeline"]
            first["n_past_msv"] += counts.n_past_msv
            first["n_past_bias"] += counts.n_past_bias
            first["n_past_vit"] += counts.n_past_vit
        for state in states:
            pli = state["pipeline"]
            if self.options.Z is None:
                pli["Z_setby"] = _ZSETBY_NTARGETS
                pli["Z"] = float(pli["nseqs"])
        counters = {key: sum(state["pipeline"][key] for state in states)
                    for key in ("nseqs", "nres", "n_past_msv", "n_past_bias", "n_past_vit", "n_past_fwd")}
        parts = []
        for state in states:
            part = TopHits(query.hmm)
            part.__setstate__(state)
            parts.append(part)
        return parts[0].merge(*parts[1:]), counters


def _held_as_arrays(db) -> bool:
    """``db`` holds its targets as arrays (a made database, or one read by the numpy reader or
    from a pyhmmer block), not as the sequence objects Easel read (or as a file's pieces)."""
    from .seqdb import EaselSequenceDB, SequenceDB

    return isinstance(db, SequenceDB) and not isinstance(db, EaselSequenceDB)


def _ranges_as_text(db, queries: int | None, threads: int) -> bool:
    """Whether pyhmmer's route reads each range of ``db``'s targets as FASTA text rather than
    as sequence objects made once for the whole run (:data:`SEQUENCE_SECONDS`): for a database
    held as arrays that :meth:`~hmmgpu.seqdb.SequenceDB.fasta_text` can write, in a run of
    ``queries`` (known) few enough for ``threads``."""
    if not queries or not _held_as_arrays(db) or not db.n:
        return False
    text_seconds = queries * db.total_residues * TEXT_SECONDS_PER_RESIDUE / max(1, threads)
    return text_seconds < db.n * SEQUENCE_SECONDS and db.writes_as_fasta


def _placed_pieces(results: list, E: float) -> tuple:
    """The states of a file's pieces (:meth:`ForwardStage._run_piece`), each hit that HMMER
    would not have kept at its target's position dropped, and the file's targets and residues."""
    states, start, residues = [], 0, 0
    for result in results:
        for state, placed in result.piece_parts:
            if placed:
                _drop_unkept(state, lambda name, placed=placed, start=start: start + placed[name]
                             if name in placed else None, E)
            states.append(state)
        start += sum(state["pipeline"]["nseqs"] for state, _ in result.piece_parts)
        residues += sum(state["pipeline"]["nres"] for state, _ in result.piece_parts)
    return states, start, residues


def _positions_by_name(names) -> dict:
    """Each name's position in the iterable ``names``: an int, or for a name that occurs more
    than once the list of its positions, ascending."""
    where: dict = {}
    for p, name in enumerate(names):
        at = where.setdefault(name, p)
        if isinstance(at, list):
            at.append(p)
        elif at != p:
            where[name] = [at, p]
    return where


def _searched(search, hmm, *args):
    """``search(hmm, *args)`` (a pyhmmer search with the model ``hmm``), an error HMMER itself
    raises (e.g. Forward underflow on a '*'-only target) made one line naming the model."""
    from .errors import HmmgpuError

    try:
        return search(hmm, *args)
    except HmmgpuError:
        raise
    except Exception as error:
        from .checks import text

        cause = error.__cause__ or error
        raise HmmgpuError(f"HMMER failed on model '{text(hmm.name)}': {' '.join(str(cause).split())}") from None


def _distinct(ascending: np.ndarray) -> np.ndarray:
    """The distinct values of an ascending array (``np.unique`` without its sort, and without
    the import of ``numpy.ma`` it makes in numpy 2: 7 ms of a small search)."""
    ascending = np.asarray(ascending)
    return ascending[np.concatenate([[True], ascending[1:] != ascending[:-1]])] if ascending.size else ascending


def _runs(ascending: np.ndarray) -> list:
    """The runs of consecutive values of an ascending array of distinct positions."""
    return np.split(ascending, np.flatnonzero(np.diff(ascending) != 1) + 1) if ascending.size else []


def _names_of(db, positions: np.ndarray) -> list:
    """The target names of ``positions``."""
    return [db.name(p) for p in positions.tolist()]


def _repeated_names(db, positions: np.ndarray) -> np.ndarray:
    """The positions whose target name occurs more than once among ``positions`` (on the
    route over ranges, only those whose name occurs twice in the database are passed)."""
    from .seqdb import repeated

    if positions.size < 2:
        return np.zeros(0, np.int64)
    return np.asarray(positions, np.int64)[repeated(_names_of(db, positions))]


#: Byte offsets in HMMER's serialized ``P7_HIT`` (``p7_hit_Serialize``, network byte order):
#: the hit's ln P-value, and its target name (a NUL-terminated string after the fixed fields).
_LNP_OFFSET = 28
_NAME_OFFSET = 109


def _hit_fields(serialized) -> tuple:
    """(lnP, target name as bytes) of one serialized hit of a ``TopHits`` state."""
    raw = bytes(serialized)
    lnp = struct.unpack_from(">d", raw, _LNP_OFFSET)[0]
    return lnp, raw[_NAME_OFFSET:raw.index(0, _NAME_OFFSET)]


def _position_in(where, positions: np.ndarray) -> int:
    """The database position of a hit's target among a task's ``positions`` (ascending), from
    its name's entry in :meth:`SequenceCache.names`: the position itself, or for a name that
    occurs more than once (in other tasks: never twice in one) the one of its positions here."""
    if not isinstance(where, np.ndarray):
        return where
    inside = positions[np.minimum(np.searchsorted(positions, where), positions.size - 1)] == where
    return int(where[inside][0])


def _drop_unkept(state: dict, position_of, E: float, bound: int | None = None) -> None:
    """Remove from ``state`` the hits a serial run would not have kept (running Z).

    HMMER keeps a hit when ``exp(lnP) * Z <= E`` with Z the number of targets counted so
    far (``p7_pli_TargetReportable``): the hit's database position + 1. ``position_of(name)``:
    the position of a hit's target (None: keep it); it is asked only about hits that ``bound``
    (no target's position + 1 is larger) does not already keep.
    """
    keep = []
    for i, entry in enumerate(state["unsrt"]):
        lnp, name = _hit_fields(entry)
        if bound is not None and math.exp(lnp) * float(bound) <= E:
            keep.append(i)
            continue
        p = position_of(name)
        if p is None or math.exp(lnp) * float(p + 1) <= E:
            keep.append(i)
    if len(keep) == len(state["unsrt"]):
        return
    new_index = {old: new for new, old in enumerate(keep)}
    state["unsrt"] = [state["unsrt"][i] for i in keep]
    state["hit"] = [new_index[o] for o in state["hit"] if o in new_index]
    state["N"] = state["Nalloc"] = len(keep)
