"""hmmscan: each query sequence against every model of a profile database, with hmmscan's results.

What is computed
----------------
For each query sequence, the ranked list of models that hit it (a pyhmmer ``TopHits`` in
scan mode), equal to what HMMER 3.4's ``hmmscan`` computes: the same hits, scores,
E-values (Z is the number of models, as hmmscan counts it), the same kept-but-unreported
hits and the same pipeline accounting. pyhmmer's ``Pipeline.scan_seq`` runs hmmscan's
pipeline (``p7_Pipeline`` in ``p7_SCAN_MODELS`` mode), so scanning all models with it gives
hmmscan's result directly. The models come from a plain, gzip or ``hmmpress``-ed file
(hmmscan itself insists on a pressed one), read and checked by :mod:`hmmgpu.formats.hmmfile` and
converted once into optimized profiles as ``hmmpress`` converts them.

Scanning a subset of the models
-------------------------------
A filter stage (on the GPU) may know that most models cannot hit a sequence. Running
pyhmmer on the surviving models only must still give the full run's result, and the one
thing that depends on the other models is which hits are *kept* in the list. With E-value
reporting and Z unset, HMMER keeps a hit when ``exp(lnP) * Z_running <= E``, where
``Z_running`` is the number of models met so far, the model's 0-based position + 1; the
final list is then thresholded with the full Z. On a subset, pyhmmer counts fewer models
before each one, so it keeps a superset of those hits; :func:`scan_sequence` then drops
each hit whose ``P * (position + 1) > E`` (positions found by model name, so the subset
is split into groups of distinct names), merges the groups in HMMER's order and
thresholds again with the full Z. The kept set decides ``len(TopHits)`` and the name
column's width in the report, so this matters for exact output. With bit-score cutoffs,
``-T`` or ``-Z``, keeping does not depend on the position and nothing is dropped. The
filter counters of the accounting are pyhmmer's on the subset, which equal the full run's
when the subset holds every model that passes the MSV filter; otherwise the filter stage
passes its own counts. :func:`scan` takes the filter stage as a function giving, per
sequence, its :class:`Survivors`.

Threads and float mode
----------------------
Sequences are scanned in parallel by a pool of threads (pyhmmer releases the GIL), each
with its own pipeline, and the results come back in input order. ``--cpu 0`` scans in the
calling thread, as hmmscan does with no worker threads. Each scan runs in hmmscan's float
mode (flush-to-zero), which the report then uses as well.
"""
from __future__ import annotations

import math
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping, Sequence

import numpy as np

from hmmgpu.errors import HmmgpuError
from hmmgpu.host import flush_to_zero
from hmmgpu.report.hitlist import ZSETBY_NTARGETS, read_hit
from hmmgpu.formats.hmmfile import hmm_strings, read_models
from hmmgpu.options import SearchOptions

#: Accounting counters a filter stage may supply for the models it removed.
FILTER_COUNTERS = ("n_past_msv", "n_past_bias", "n_past_vit", "n_past_fwd")
#: Models the narrowing keeps submitted to one GPU and not yet collected (its ring's 8 slots).
NARROWING_WINDOW = 8


def _amino():
    from pyhmmer.easel import Alphabet

    return Alphabet.amino()


class ProfileDatabase:
    """The target models of a scan, as optimized profiles, with their names and sizes.

    ``ProfileDatabase.read(source)`` reads and checks every model of a plain, gzip or
    pressed profile file (``-`` is standard input). ``block`` holds the profiles that full
    scans use (pyhmmer locks each one while a thread scans with it). Scanning changes a
    profile while it runs (its length model, and its multihit mode during domain
    definition), so subsets are copied from ``profiles``, a second set that is never
    scanned: a copy of a profile in use could catch it half-changed.
    """

    def __init__(self, profiles: list, names: list[bytes], source: str):
        from pyhmmer.plan7 import OptimizedProfileBlock

        self.profiles = profiles
        self.names = names
        self.source = source
        self.block = OptimizedProfileBlock(_amino(), [p.copy() for p in profiles])
        self.nodes = sum(p.M for p in profiles)

    def __len__(self) -> int:
        return len(self.profiles)

    @classmethod
    def read(cls, source, each: Callable | None = None) -> "ProfileDatabase":
        """Every model of a profile file, configured as ``hmmpress`` configures it; ``each``
        is called with every model (a :class:`~hmmgpu.formats.hmmfile.Model`) as it is read."""
        return cls.from_models(read_models(source), str(source), each)

    @classmethod
    def from_models(cls, models, source: str, each: Callable | None = None) -> "ProfileDatabase":
        """The database of checked ``models`` (:class:`~hmmgpu.formats.hmmfile.Model`), as :meth:`read`."""
        from pyhmmer.plan7 import Background, Profile

        background = Background(_amino())
        profiles, names = [], []
        for model in models:
            profile = Profile(model.hmm.M, model.hmm.alphabet)
            profile.configure(model.hmm, background)
            profiles.append(profile.to_optimized())
            names.append(hmm_strings(model.hmm)[0])
            if each is not None:
                each(model)
        return cls(profiles, names, source)


def scan_sequence(sequence, database: ProfileDatabase, options: SearchOptions = SearchOptions(),
                  indices: Sequence[int] | None = None, filter_counts: Mapping[str, int] | None = None,
                  ftz: bool = True):
    """Scan one digital sequence; return hmmscan's ``TopHits`` for it.

    ``indices``: the sorted 0-based positions of the models to run (``None``: all); the
    result is the full scan's as long as every model that can hit the sequence is among
    them. ``filter_counts``: accounting counters (:data:`FILTER_COUNTERS`) to report
    instead of pyhmmer's on the subset. ``ftz``: in hmmscan's float mode (False: pyhmmer's).
    """
    from pyhmmer.errors import MissingCutoffs

    try:
        return _scan(sequence, database, options, indices, filter_counts or {}, ftz)
    except MissingCutoffs as exc:   # hmmscan stops too, when such a model reaches the domain stage
        raise HmmgpuError(f"{database.source}: model '{exc.model_name}' has no {_CUTOFF_LINE[exc.bit_cutoffs]} "
                          f"line, needed by --cut_{_CUTOFF_LINE[exc.bit_cutoffs].lower()}") from None


_CUTOFF_LINE = {"gathering": "GA", "trusted": "TC", "noise": "NC"}


def _scan(sequence, database: ProfileDatabase, options: SearchOptions, indices, filter_counts: Mapping[str, int],
          ftz: bool):
    from pyhmmer.plan7 import OptimizedProfileBlock, Pipeline

    kwargs = options.pipeline_kwargs()
    with flush_to_zero(ftz):
        if indices is None and not filter_counts:
            return Pipeline(_amino(), **kwargs).scan_seq(sequence, database.block)
        positions = np.arange(len(database)) if indices is None else np.asarray(indices, dtype=np.int64)
        if positions.size and (np.any(np.diff(positions) <= 0) or positions[0] < 0 or positions[-1] >= len(database)):
            raise HmmgpuError("scan_sequence: indices must be sorted, distinct model positions")
        parts = []
        for group in _distinct_name_groups(positions, database.names):
            block = OptimizedProfileBlock(_amino(), [database.profiles[i].copy() for i in group])
            hits = Pipeline(_amino(), **kwargs).scan_seq(sequence, block)
            parts.append((group, hits.__getstate__()))
        return _combine(sequence, parts, database, options, filter_counts)


def _distinct_name_groups(positions: np.ndarray, names: list[bytes]) -> list[list[int]]:
    """Split positions into as few groups as possible, each with distinct model names
    (in order; one group unless a name repeats). Always at least one, possibly empty, group."""
    groups: list[list[int]] = [[]]
    seen: list[set] = [set()]
    for p in positions.tolist():
        g = next((k for k, names_in in enumerate(seen) if names[p] not in names_in), None)
        if g is None:
            groups.append([])
            seen.append(set())
            g = len(groups) - 1
        groups[g].append(p)
        seen[g].add(names[p])
    return groups


def _sort_key(hit):
    """HMMER's ``hit_sorter_by_sortkey``: key descending, then name, + strand, start."""
    first = hit.domains[0]
    strand = 1 if first.iali < first.jali else -1
    return (-hit.sortkey, hit.name, -strand, first.iali)


def _combine(sequence, parts, database: ProfileDatabase, options: SearchOptions, filter_counts: Mapping[str, int]):
    """One hmmscan ``TopHits`` from the groups' results: drop what a serial run would not
    keep, order as HMMER sorts, account for every model, threshold with the full Z."""
    from pyhmmer.plan7 import TopHits

    pipeline = dict(parts[0][1]["pipeline"])
    for name in FILTER_COUNTERS:
        pipeline[name] = filter_counts.get(name, sum(state["pipeline"][name] for _, state in parts))
    pipeline.update(nmodels=len(database), nnodes=database.nodes)
    z_counted = pipeline["Z_setby"] == ZSETBY_NTARGETS
    if z_counted:
        pipeline["Z"] = float(len(database))
    drop_by_position = z_counted and options.by_evalue
    kept = []
    for group, state in parts:
        position = {database.names[p]: p for p in group}
        for blob in state["unsrt"]:
            hit = read_hit(blob)
            if drop_by_position and math.exp(hit.lnP) * (position[hit.name] + 1) > options.E:
                continue
            kept.append((_sort_key(hit), hit, blob))
    kept.sort(key=lambda item: item[0])
    state = {"_empty": False, "unsrt": [blob for _, _, blob in kept], "hit": list(range(len(kept))),
             "Nalloc": len(kept), "N": len(kept), "nreported": 0, "nincluded": 0,
             "is_sorted_by_sortkey": True, "is_sorted_by_seqidx": False, "pipeline": pipeline}
    if options.bit_cutoffs is not None:
        # The pipeline flagged each hit with the model's own cutoffs; only the counts remain.
        state["nreported"] = sum(hit.reported for _, hit, _ in kept)
        state["nincluded"] = sum(hit.included for _, hit, _ in kept)
        if pipeline["domZ_setby"] == ZSETBY_NTARGETS:
            pipeline["domZ"] = float(state["nreported"])
    hits = TopHits(sequence)
    hits.__setstate__(state)
    if options.bit_cutoffs is not None:
        return hits
    return TopHits(sequence).merge(hits)   # merging into an empty list thresholds with the new Z


@dataclass(frozen=True)
class Survivors:
    """What a filter stage found for one sequence: the sorted positions of the models that may
    hit it (every model that passes the MSV filter, for exact accounting) and, optionally,
    its own filter counters (:data:`FILTER_COUNTERS`) to report instead of pyhmmer's."""

    indices: Sequence[int]
    counts: Mapping[str, int] = field(default_factory=dict)


class CascadeNarrowing:
    """hmmgpu's filter cascade (MSV, bias, Viterbi filter, and the Forward gate where the
    backend runs it) of every model over the query sequences, on a cascade backend (the GPU:
    several models in flight), turned around into :class:`Survivors` per sequence: the
    models that pass the filters (those the Forward gate failed left out: they cannot hit,
    and pyhmmer's count of Forward passers is the same without them), and the sequence's
    counters of the first three filters (how many models it passed each filter with).

    The cascade decides exactly as HMMER's pipeline does for each (model, sequence) pair,
    whichever program runs it: hmmsearch and hmmscan configure the model and the null model
    to the target's length the same way, so the survivors are hmmscan's. Feed it each model
    in file order (:meth:`add`), then take the survivors (:meth:`survivors`).
    """

    def __init__(self, sequences, backend, options: SearchOptions, window: int | None = None):
        self.sequences = sequences
        self.backend = backend
        self.options = options
        #: models submitted and not yet collected: one GPU's ring, or every device's budget
        #: (:attr:`~hmmgpu.search.multidevice.MultiDeviceBackend.models_in_flight`) on several
        self.window = window or getattr(backend, "models_in_flight", NARROWING_WINDOW)
        self._pending: deque = deque()
        self._models, self._targets = [], []
        self._counts = {name: np.zeros(sequences.n, np.int64) for name in FILTER_COUNTERS[:3]}
        self._added = 0

    def add(self, model) -> None:
        """Queue the cascade of the next model (a :class:`~hmmgpu.formats.hmmfile.Model`)."""
        ticket = self.backend.submit(self.backend.prepare(model.hmm, model.mmu), self.options)
        self._pending.append((self._added, ticket))
        self._added += 1
        if len(self._pending) > self.window:
            self._collect(*self._pending.popleft())

    def _collect(self, position: int, ticket) -> None:
        result = ticket.result()
        n = self.sequences.n
        past_vit = result.survivors if result.past_vit is None else result.past_vit
        for name, passed in (("n_past_msv", result.past_msv), ("n_past_bias", result.past_bias),
                             ("n_past_vit", past_vit)):
            self._counts[name] += np.bincount(np.asarray(passed, np.int64), minlength=n)
        self._models.append(np.full(result.survivors.size, position, np.int64))
        self._targets.append(np.asarray(result.survivors, np.int64))

    def survivors(self) -> list:
        """Every sequence's :class:`Survivors` (after the last model)."""
        while self._pending:
            self._collect(*self._pending.popleft())
        models = np.concatenate(self._models) if self._models else np.zeros(0, np.int64)
        targets = np.concatenate(self._targets) if self._targets else np.zeros(0, np.int64)
        order = np.lexsort((models, targets))
        bounds = np.searchsorted(targets[order], np.arange(self.sequences.n + 1))
        models = models[order]
        return [Survivors(indices=models[bounds[i]:bounds[i + 1]],
                          counts={name: int(c[i]) for name, c in self._counts.items()})
                for i in range(self.sequences.n)]


def scan(sequences, database: ProfileDatabase, options: SearchOptions = SearchOptions(),
         narrow: Callable[[int], Survivors | None] | None = None, ftz: bool = True) -> Iterator[tuple[int, object]]:
    """Scan every sequence of a :class:`~hmmgpu.formats.seqdb.SequenceDB`; yield ``(index, TopHits)``
    in input order. ``narrow(i)`` may name the models to run for sequence ``i`` (``None``:
    all). Runs in ``options.run.threads`` threads; ``options.run.cpus == 0`` scans in this thread.
    ``ftz``: in hmmscan's float mode (False: pyhmmer's, as ``pyhmmer.hmmscan``)."""
    def one(i: int):
        survivors = None if narrow is None else narrow(i)
        subset = (None, None) if survivors is None else (survivors.indices, survivors.counts)
        return i, scan_sequence(sequences.digital_sequence(i), database, options, *subset, ftz=ftz)

    if options.run.cpus == 0:
        yield from map(one, range(sequences.n))
        return
    with ThreadPoolExecutor(options.run.threads) as pool:
        pending: deque = deque()
        for i in range(sequences.n):
            pending.append(pool.submit(one, i))
            if len(pending) > 4 * options.run.threads:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


__all__ = ["ProfileDatabase", "Survivors", "CascadeNarrowing", "scan_sequence", "scan", "FILTER_COUNTERS"]
