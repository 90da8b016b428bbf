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

import math
import struct
import threading
import time
from dataclasses import dataclass

import numpy as np

#: Work per task, in seconds on one thread (estimated): small enough to balance the end of
#: a run over every thread, large enough that the per-task cost (a block, the merge, and
#: the moments each task needs the GIL) stays small. Measured on the 16-core GPU machine
#: with 600 Pfam models: 0.1 s (1,346 tasks) ran 25% faster than 0.03 s (4,482 tasks).
TASK_SECONDS = 0.1
#: The same on pyhmmer's route (its whole pipeline over ranges of all targets): the work of
#: a query is large and even, so tasks can be larger (fewer block slices, merges and GIL
#: hand-offs) and still balance the end of a run.
PIPELINE_TASK_SECONDS = 0.25
#: Estimated speed of pyhmmer's post-filter stage (Forward, Backward, domain definition) per
#: thread, in model cells (M x L) per second, and of its whole pipeline on unfiltered targets.
FORWARD_CELLS_PER_SECOND = 7.0e7
PIPELINE_CELLS_PER_SECOND = 2.5e10
#: Smallest task of a query that is split to keep every thread busy (fewer queries than
#: threads), in model cells: a hit-rich model's whole pipeline runs ten times slower per
#: cell than :data:`PIPELINE_CELLS_PER_SECOND`, so one query alone (a single-model search of a
#: large database) cannot rely on the estimate to cut it into enough tasks.
SPLIT_MIN_CELLS = 1.0e8
#: A database read while it is searched (:class:`~hmmgpu.seqdb.StreamedSequenceDB`) comes in
#: blocks of about this many per thread, and of at most :data:`STREAM_BLOCK_RESIDUES_MAX`
#: residues: enough tasks that the last block read does not leave the other threads idle.
STREAM_BLOCKS_PER_THREAD = 8
STREAM_BLOCK_RESIDUES_MAX = 4_000_000
_ZSETBY_NTARGETS = 0


def stream_block_residues(residues: float, model_length: int, threads: int) -> int:
    """The residues per block of a database of about ``residues`` read while one model of
    ``model_length`` is searched on ``threads`` threads (a block is a task: at least
    :data:`SPLIT_MIN_CELLS` cells)."""
    per_thread = residues / (max(1, threads) * STREAM_BLOCKS_PER_THREAD)
    return int(max(min(per_thread, STREAM_BLOCK_RESIDUES_MAX), SPLIT_MIN_CELLS / max(1, model_length)))


@dataclass
class Task:
    """One query's targets ``positions`` (sorted database indices) for one pyhmmer run."""

    query: object  #: the engine's Query (index, hmm)
    positions: np.ndarray
    z_fixed: float  #: the Z the task runs with (its first position + 1)
    filtered: bool  #: hmmgpu's filters ran first (F1 = F2 = 1 in pyhmmer)
    part: int = 0  #: this task's number among its query's tasks
    cost: float = 0.0  #: estimated seconds
    block: object = None  #: its targets' pyhmmer block, when it brings its own (a database being read)
    where: dict = None  #: then also the position of each of its target names (for :func:`_drop_unkept`)


@dataclass
class TaskResult:
    """What a task gives back: its hits, as ``TopHits.__getstate__()`` ready to merge, or, for
    a query's only task over every target from the first, the ``TopHits`` themselves (already
    one serial run's whole result)."""

    state: dict = None
    hits: object = None  #: the whole result (``TopHits``), when there is nothing to merge
    cpu_seconds: float = 0.0  #: CPU time the task took


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
        from pyhmmer.easel import DigitalSequenceBlock

        seqs = self._seqs
        out = []
        for p in positions.tolist():
            s = seqs.get(p)
            if s is None:
                s = seqs[p] = self.db.digital_sequence(p)
            out.append(s)
        return DigitalSequenceBlock(self.alphabet, out)

    def range_block(self, start: int, stop: int):
        """A block of the consecutive targets ``start..stop-1`` (a view of the whole database)."""
        whole = self._whole
        if whole is None:
            with self._lock:
                if self._whole is None:
                    self._whole = self.db.block()
                whole = self._whole
        return whole if (start, stop) == (0, self.db.n) else whole[start:stop]

    def names(self) -> tuple:
        """(the position of each target name: an int, or for a name that occurs more than once
        the ascending array of its positions; bool array: the target's name occurs twice)."""
        if self._names is not None:
            return self._names
        with self._lock:
            if self._names is None:
                where: dict = {}
                repeated = np.zeros(self.db.n, bool)
                for p in range(self.db.n):
                    name = self.db.name(p)
                    q = where.setdefault(name, p)
                    if q != p:
                        repeated[p] = repeated[q] = True
                        where[name] = (q if isinstance(q, list) else [q]) + [p]
                self._names = ({k: np.array(v) if isinstance(v, list) else v for k, v in where.items()}, repeated)
        return self._names


class ForwardStage:
    """Plans, runs and merges the pyhmmer tasks of each query over one database."""

    def __init__(self, db, options, ftz: bool = False, threads: int = 0, queries: int | None = None):
        self.db = db
        self.options = options
        self.ftz = ftz
        #: tasks each query is cut into at least (when the work allows): every one of the
        #: engine's ``threads`` busy when there are fewer queries (``queries``, when known)
        self.min_parts = -(-threads // queries) if queries and threads > queries else 1
        self.sequences = SequenceCache(db)
        self.by_position = options.by_evalue and options.Z is None
        self._local = threading.local()

    # ------------------------------------------------------------ planning
    def plan(self, query, positions=None):
        """The tasks of ``query``: its survivors ``positions`` (filtered), or every target. A
        list; or, on pyhmmer's route over a database still being read, an iterator of the
        tasks of each block as it is read (the engine numbers them)."""
        if positions is None and not self.db.finished():
            return self._streamed_tasks(query)
        M = query.hmm.M
        lengths = self.db.lengths
        if positions is None:  # pyhmmer's whole pipeline over contiguous ranges of targets
            cells = float(self.db.total_residues) * M
            parts = max(cells / PIPELINE_CELLS_PER_SECOND // PIPELINE_TASK_SECONDS,
                        min(self.min_parts, cells // SPLIT_MIN_CELLS))
            parts = int(min(max(1, parts), max(1, self.db.n // 64)))
            cuts = np.searchsorted(np.cumsum(lengths, dtype=np.int64),
                                   self.db.total_residues * np.arange(1, parts) / parts)
            bounds = _distinct(np.concatenate([[0], cuts, [self.db.n]]))
            ranges = [np.arange(a, b, dtype=np.int64) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
            if not ranges:
                ranges = [np.zeros(0, np.int64)]
            return self._tasks(query, ranges, filtered=False, rate=PIPELINE_CELLS_PER_SECOND)
        positions = np.asarray(positions, np.int64)
        if positions.size == 0:
            return self._tasks(query, [positions], filtered=True, rate=FORWARD_CELLS_PER_SECOND)
        cost = lengths[positions].astype(np.float64) * M / FORWARD_CELLS_PER_SECOND
        cum = np.cumsum(cost)
        cells = float(cum[-1]) * FORWARD_CELLS_PER_SECOND
        parts = max(1, int(cum[-1] // TASK_SECONDS), int(min(self.min_parts, cells // SPLIT_MIN_CELLS, positions.size)))
        cuts = np.searchsorted(cum, cum[-1] * np.arange(1, parts) / parts, side="right")
        groups = [g for g in np.split(positions, _distinct(cuts)) if g.size]
        return self._tasks(query, groups, filtered=True, rate=FORWARD_CELLS_PER_SECOND)

    def _tasks(self, query, groups, filtered: bool, rate: float) -> list:
        tasks = []
        for g in groups:
            if self.by_position and g.size > 1 and (filtered or g[0] > 0):
                singles = _repeated_names(self.sequences, g)
                if singles.size:
                    for p in singles:
                        tasks.append(self._task(query, np.array([p]), filtered, rate))
                    g = np.setdiff1d(g, singles)
                    if not g.size:
                        continue
            tasks.append(self._task(query, g, filtered, rate))
        for k, t in enumerate(tasks):
            t.part = k
        return tasks

    def _streamed_tasks(self, query):
        """pyhmmer's whole pipeline over each block of a database as it is read (one task per
        block: its positions are known, so each keeps what a serial run would). Names that
        occur twice in a block are run as tasks of their own, as :meth:`_tasks` does."""
        from pyhmmer.easel import DigitalSequenceBlock

        alphabet = self.sequences.alphabet
        for start, block in self.db.chunks():
            positions = np.arange(start, start + len(block), dtype=np.int64)
            if not self.by_position or start == 0:  # from the first target: a serial run's prefix
                yield Task(query=query, positions=positions, z_fixed=float(start + 1), filtered=False, block=block)
                continue
            where: dict = {}
            twice = set()
            for p, seq in zip(positions.tolist(), block):
                name = seq.name.encode()
                if where.setdefault(name, p) != p:
                    twice.add(name)
            if not twice:
                yield Task(query=query, positions=positions, z_fixed=float(start + 1), filtered=False,
                           block=block, where=where)
                continue
            rest = []
            for p, seq in zip(positions.tolist(), block):
                name = seq.name.encode()
                if name in twice:
                    yield Task(query=query, positions=np.array([p]), z_fixed=float(p + 1), filtered=False,
                               block=DigitalSequenceBlock(alphabet, [seq]))
                else:
                    rest.append((p, seq))
            if rest:
                kept = np.array([p for p, _ in rest], dtype=np.int64)
                yield Task(query=query, positions=kept, z_fixed=float(kept[0] + 1), filtered=False,
                           block=DigitalSequenceBlock(alphabet, [seq for _, seq in rest]),
                           where={name: p for name, p in where.items() if name not in twice})

    def _task(self, query, positions, filtered, rate) -> Task:
        first = int(positions[0]) + 1 if positions.size else 1
        cost = float(self.db.lengths[positions].sum()) * query.hmm.M / rate
        return Task(query=query, positions=positions, z_fixed=float(first), filtered=filtered, cost=cost)

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
        # a range of targets from the first one counts Z as a serial run does: nothing to fix
        from_start = not task.filtered and (not task.positions.size or task.positions[0] == 0)
        pli.Z = task.z_fixed if self.by_position and not from_start else self.options.Z
        if task.block is not None:
            block = task.block
        elif task.filtered:
            block = self.sequences.block(task.positions)
        else:
            block = self.sequences.range_block(int(task.positions[0]), int(task.positions[-1]) + 1) \
                if task.positions.size else self.sequences.block(task.positions)
        try:
            # the model itself: pyhmmer configures it into this pipeline's reused buffers (a copy
            # of an optimized profile per task would map and unmap memory in every thread)
            hits = pli.search_hmm(task.query.hmm, block)
        except Exception as error:  # an error HMMER itself raises (e.g. Forward underflow on a '*'-only target)
            from .checks import text
            from .errors import HmmgpuError

            cause = error.__cause__ or error
            raise HmmgpuError(f"HMMER failed on model '{text(task.query.hmm.name)}': "
                              f"{' '.join(str(cause).split())}") from None
        if alone and from_start:
            return TaskResult(hits=hits, cpu_seconds=time.thread_time() - start)
        state = hits.__getstate__()
        if self.by_position and not from_start and len(hits):
            where = task.where if task.where is not None else self.sequences.names()[0]
            _drop_unkept(state, where, task.positions, self.options.E)
        return TaskResult(state, cpu_seconds=time.thread_time() - start)

    # ------------------------------------------------------------ merging
    def merge(self, query, results: list, counts=None) -> tuple:
        """One serial run's ``TopHits`` from the tasks' results (``counts``: hmmgpu's filter
        counters), and its pipeline counters (None for a whole-database pyhmmer run, whose
        ``TopHits`` hold them)."""
        from pyhmmer.plan7 import TopHits

        if len(results) == 1 and results[0].hits is not None:  # already a serial run's result
            return results[0].hits, None
        states = [r.state for r in results]
        first = states[0]["pipeline"]
        first["nseqs"] = self.db.n
        first["nres"] = self.db.total_residues
        if counts is not None:
            first["n_past_msv"], first["n_past_bias"], first["n_past_vit"] = (
                counts.n_past_msv, counts.n_past_bias, counts.n_past_vit)
        for k, state in enumerate(states):
            pli = state["pipeline"]
            pli["F1"], pli["F2"] = self.options.F1, self.options.F2  # the user's, not the filtered tasks' 1.0
            if k:
                pli["nseqs"] = pli["nres"] = 0
                if counts is not None:
                    pli["n_past_msv"] = pli["n_past_bias"] = pli["n_past_vit"] = 0
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


def _distinct(ascending: np.ndarray) -> np.ndarray:
    """The distinct values of an ascending array (``np.unique`` without its sort, and without
    the import of ``numpy.ma`` it makes in numpy 2: 7 ms of a small search)."""
    ascending = np.asarray(ascending)
    return ascending[np.concatenate([[True], ascending[1:] != ascending[:-1]])] if ascending.size else ascending


def _repeated_names(sequences: SequenceCache, positions: np.ndarray) -> np.ndarray:
    """The positions whose target name occurs more than once among ``positions``."""
    _, repeated = sequences.names()
    suspects = positions[repeated[positions]]
    if suspects.size < 2:
        return np.zeros(0, np.int64)
    names = [sequences.db.name(int(p)) for p in suspects]
    seen: dict = {}
    for n in names:
        seen[n] = seen.get(n, 0) + 1
    return np.array([p for p, n in zip(suspects.tolist(), names) if seen[n] > 1], np.int64)


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


def _drop_unkept(state: dict, where: dict, positions: np.ndarray, E: float) -> None:
    """Remove from ``state`` the hits a serial run would not have kept (running Z).

    HMMER keeps a hit when ``exp(lnP) * Z <= E`` with Z the number of targets counted so
    far (``p7_pli_TargetReportable``): the hit's database position + 1. A name that occurs
    twice in one task's targets only occurs in tasks of one target (:meth:`ForwardStage._tasks`);
    one that occurs in several tasks has its position in this one (:func:`_position_in`).
    ``where``: the position of each target name (:meth:`SequenceCache.names`, or a task's own).
    """
    keep = []
    for i, entry in enumerate(state["unsrt"]):
        lnp, name = _hit_fields(entry)
        p = int(positions[0]) if positions.size == 1 else _position_in(where[name], positions)
        if math.exp(lnp) * float(p + 1) <= E:
            keep.append(i)
    if len(keep) == len(state["unsrt"]):
        return
    new_index = {old: new for new, old in enumerate(keep)}
    state["unsrt"] = [state["unsrt"][i] for i in keep]
    state["hit"] = [new_index[o] for o in state["hit"] if o in new_index]
    state["N"] = state["Nalloc"] = len(keep)
