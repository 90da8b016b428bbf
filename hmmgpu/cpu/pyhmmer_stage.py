"""The post-filter stage on pyhmmer: Forward, Backward and domain definition, task by task.

The first implementation of :class:`~hmmgpu.stages.protocol.PostFilterStage`. Each task (a
query and some of its targets, planned by :mod:`hmmgpu.stages.postfilter`) goes through
pyhmmer's own pipeline in the calling worker thread, one pipeline per thread (it holds a
background model), in hmmsearch's float mode when asked (``ftz``). A filtered task runs
with ``F1 = F2 = 1``: pyhmmer still computes the bias-corrected null score that the Forward
P-value needs and skips the filters hmmgpu already ran. A task's hits come back as
``TopHits`` state with the hits that HMMER's keep rule would drop at their global position
already removed (:func:`~hmmgpu.stages.merge.drop_unkept`), ready for the exact merge.
"""
from __future__ import annotations

import math
import threading
import time

import numpy as np

from hmmgpu.stages.merge import drop_unkept, hit_fields, merge_results, position_in, positions_by_name
from hmmgpu.stages.postfilter import Task, TaskPlanner, TaskResult, held_as_arrays, names_of
from hmmgpu.stages.protocol import PostFilterStage


class SequenceCache:
    """pyhmmer ``DigitalSequence`` objects of database targets, made once on first use, and
    the position of every target name (for :func:`drop_unkept`)."""

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
        from hmmgpu.formats.seqdb import sequence_block

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
        one of the same sequence objects: :func:`~hmmgpu.formats.seqdb.sequence_block`, not a slice of
        the block, which pyhmmer makes by appending)."""
        from hmmgpu.formats.seqdb import sequence_block

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
        (:func:`names_of`), and a range of a database held as arrays searches its names
        (:meth:`~hmmgpu.formats.seqdb.SequenceDB.name_positions`)."""
        if self._names is not None:
            return self._names
        with self._lock:
            if self._names is None:
                where = positions_by_name(self.db.names())
                self._names = {k: np.array(v) if isinstance(v, list) else v for k, v in where.items()}
        return self._names


class PyhmmerStage(TaskPlanner, PostFilterStage):
    """The post-filter stage on pyhmmer's own pipeline: plans (:class:`TaskPlanner`), runs
    each task in the calling thread, and merges exactly (:func:`~hmmgpu.stages.merge.merge_results`)."""

    def __init__(self, db, options, ftz: bool = False, threads: int = 0, model_lengths=None):
        super().__init__(db, options, threads=threads, model_lengths=model_lengths)
        self.ftz = ftz
        self.sequences = SequenceCache(db)
        self._local = threading.local()

    def _pipeline(self, filtered: bool):
        """This thread's pyhmmer pipeline (one per thread: it holds a background model)."""
        cache = getattr(self._local, "pipelines", None)
        if cache is None:
            cache = self._local.pipelines = {}
            if self.ftz:
                from hmmgpu.host import set_flush_to_zero

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
                from hmmgpu.formats.seqdb import search_fasta_text

                hits = _searched(search_fasta_text, hmm, self.db.fasta_text(first, end), pli, "a range of targets")
            else:
                hits = _searched(pli.search_hmm, hmm, self.sequences.range_block(first, end))
        if alone and from_start:
            return TaskResult(hits=hits, cpu_seconds=time.thread_time() - start)
        state = hits.__getstate__()
        if self.by_position and not from_start and len(hits):
            drop_unkept(state, self._position_of(task), self.options.E, bound=int(task.positions[-1]) + 1)
        return TaskResult(state, cpu_seconds=time.thread_time() - start, filtered=task.filtered)

    def _position_of(self, task: Task):
        """The function from a hit's target name to its database position, for ``task``. No
        name occurs twice in one task's targets (:meth:`~hmmgpu.stages.postfilter.TaskPlanner._tasks`
        cuts survivors by each name's occurrence, and runs a range's repeated names alone); one
        that occurs in several tasks has its position in this one."""
        positions = task.positions
        if positions.size == 1:
            return lambda name: int(positions[0])
        if task.filtered:  # a few hundred survivors: their own names, not the database's
            return dict(zip(names_of(self.db, positions), positions.tolist())).__getitem__
        if held_as_arrays(self.db):  # consecutive targets with distinct names
            return self.db.name_positions(int(positions[0]), int(positions[-1]) + 1)
        where = self.sequences.names()
        return lambda name: position_in(where[name], positions)

    def _run_piece(self, pli, task: Task) -> list:
        """pyhmmer's whole pipeline over one piece of a file (:class:`~hmmgpu.formats.seqdb.FastaPieces`).

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
        droppable = [name for lnp, name in map(hit_fields, state["unsrt"])
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
        where = positions_by_name(names)
        twice = {name for name, at in where.items() if isinstance(at, list)}
        if not twice.intersection(unplaced):
            placed.update((name, where[name]) for name in unplaced)
            return [(state, placed)]
        from hmmgpu.formats.seqdb import sequence_block

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

    def merge(self, query, results: list, counts=None) -> tuple:
        """One serial run's ``TopHits`` and counters (:func:`~hmmgpu.stages.merge.merge_results`)."""
        pieces = self.db.pieces is not None  # a file's pieces count their own targets
        n, residues = (0, 0) if pieces else (self.db.n, self.db.total_residues)
        return merge_results(query.hmm, results, n, residues, self.options, counts)


def _searched(search, hmm, *args):
    """``search(hmm, *args)`` (a pyhmmer search with the model ``hmm``), an error HMMER itself
    raises (e.g. Forward underflow on a '*'-only target) made one line naming the model."""
    from hmmgpu.errors import HmmgpuError

    try:
        return search(hmm, *args)
    except HmmgpuError:
        raise
    except Exception as error:
        from hmmgpu.formats.checks import text

        cause = error.__cause__ or error
        raise HmmgpuError(f"HMMER failed on model '{text(hmm.name)}': {' '.join(str(cause).split())}") from None
