"""Python API beside pyhmmer: ``hmmsearch`` and ``hmmscan`` yielding ``TopHits``, and a reusable ``Pipeline``.

``hmmsearch`` and ``hmmscan`` drop in for pyhmmer's: the same arguments with pyhmmer's
meaning (:mod:`hmmgpu.pyhmmer_compat`), and ``TopHits`` equal to a full
``pyhmmer.hmmsearch``/``hmmsearch`` (``hmmscan``) run. hmmgpu's own choice of route is their
keyword ``engine`` (pyhmmer's ``backend`` is its parallel backend). ``Pipeline`` takes
:class:`~hmmgpu.options.SearchOptions`' names, ``backend``, ``lanes``, ``cpus`` and ``device``
among them, as the command line does.
"""
from __future__ import annotations

import collections.abc
import os
from contextlib import ExitStack
from itertools import groupby
from typing import Iterable, Iterator

from hmmgpu.errors import InputError
from hmmgpu.options import SearchOptions


def read_hmms(path) -> list:
    """All models of an HMMER profile file (text or binary, plain or gzip), with clear errors."""
    return list(iter_hmms(path))


def iter_hmms(path) -> Iterator:
    """The models of an HMMER profile file (plain, gzip, binary, pressed or ``-``), one at a
    time, each checked as :func:`hmmgpu.formats.hmmfile.read_models` checks it (one-line errors)."""
    from hmmgpu.formats.hmmfile import read_models

    for model in read_models(path):
        yield model.hmm


def open_sequences(sequences):
    """A :class:`~hmmgpu.formats.seqdb.SequenceDB` from a path, a made database or a pyhmmer block."""
    from hmmgpu.formats.seqdb import SequenceDB, open_database

    if isinstance(sequences, SequenceDB):
        return sequences
    if isinstance(sequences, (str, os.PathLike)):
        return open_database(sequences)
    from pyhmmer.easel import DigitalSequenceBlock

    if isinstance(sequences, DigitalSequenceBlock):
        if not sequences.alphabet.is_amino():
            raise InputError("sequences: hmmgpu searches protein sequences (the block is not amino)")
        return SequenceDB.from_block(sequences)
    raise InputError(
        f"sequences must be a path, a SequenceDB or a pyhmmer DigitalSequenceBlock, not {type(sequences).__name__}")


def _queries(queries) -> Iterable:
    """The query models of a search: an HMM file's (a path), a single model's, or ``queries``."""
    if isinstance(queries, (str, os.PathLike)):
        return iter_hmms(queries)
    return queries if isinstance(queries, collections.abc.Iterable) else [queries]


class Pipeline:
    """A search over one database, kept open (and resident on the GPU) across many models.

    ``Pipeline(sequences, *, ftz=False, **options)`` takes :class:`SearchOptions`' names
    (pyhmmer's E, T, domE, ..., F1, F2, F3, bias_filter, null2, Z, domZ, bit_cutoffs, seed,
    and hmmgpu's backend, lanes, cpus, device). ``ftz=True`` computes pyhmmer's stage in the
    hmmsearch program's float mode (subnormals flushed to zero), as ``hmmgpu search`` does.
    """

    def __init__(self, sequences, *, ftz: bool = False, model_lengths=None,
                 search_options: SearchOptions | None = None, **options):
        from hmmgpu.formats.checks import check_target_lengths
        from hmmgpu.search.routing import SearchPlan

        if search_options is not None and options:
            raise TypeError("Pipeline takes search_options or option keywords, not both")
        self.options = search_options or SearchOptions.from_kwargs(**options)
        self.ftz = ftz
        self.db = open_sequences(sequences)
        check_target_lengths(self.db)
        #: ``model_lengths``: the lengths of the models to come, when known (``auto`` weighs the work)
        self.backend = SearchPlan(self.options, model_lengths).backend(self.db)
        self.notice = self.backend.description
        self._filters = None
        self.stats = None
        self.counts = None  #: the last query's :class:`~hmmgpu.stages.cascade.StageCounts`

    def _engine(self, model_lengths=None):
        from hmmgpu.search.engine import SearchEngine

        engine = SearchEngine(self.db, self.options, self.backend, ftz=self.ftz, model_lengths=model_lengths)
        self.stats = engine.stats
        return engine

    def search_hmm(self, hmm):
        """Search one protein model; returns pyhmmer ``TopHits``."""
        for _, hits in self.search_hmms([hmm]):
            return hits

    def search_hmms(self, hmms) -> Iterator:
        """Search several models; yield ``(hmm, TopHits)`` in order (``counts`` set for each)."""
        lengths = [hmm.M for hmm in hmms] if isinstance(hmms, (list, tuple)) else None
        for result in self._engine(lengths).search(hmms):
            self.counts = result.counts
            yield result.hmm, result.hits

    def filter(self, hmm):
        """The targets that pass MSV, bias and Viterbi filters, as a ``DigitalSequenceBlock``.

        Give it to ``pyhmmer.plan7.Pipeline(alphabet, Z=<database size>)`` to finish a search
        inside a pyhmmer workflow with the results of a full run. Runs hmmgpu's filters on the
        GPU, or on the CPU where this pipeline's backend is pyhmmer's.
        """
        from hmmgpu.stages.protocol import CascadeBackend
        from hmmgpu.cpu.backends import NumbaBackend
        from hmmgpu.stages.cascade import StageCounts
        from hmmgpu.formats.checks import check_model

        check_model(hmm, self.options)
        filters = self.backend
        if not isinstance(filters, CascadeBackend):
            if self._filters is None:
                self._filters = NumbaBackend(self.db, threads=self.options.run.cpus or None, forward_gate=False)
            filters = self._filters
        result = filters.submit(filters.prepare(hmm), self.options).result()
        self.counts = StageCounts(query=str(hmm.name), M=hmm.M, nseqs=self.db.n, nres=self.db.total_residues,
                                  n_past_msv=result.n_past_msv, n_past_bias=result.n_past_bias,
                                  n_past_vit=result.n_past_vit, seconds=result.seconds)
        return self.db.block(result.survivors if result.past_vit is None else result.past_vit)

    def close(self):
        """Release the backend (GPU memory)."""
        self.backend.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def hmmsearch(queries, sequences, *, cpus: int = 0, callback=None, backend: str = "threading", parallel=None,
              **options) -> Iterator:
    """``pyhmmer.hmmsearch`` with hmmgpu's engine: yield one pyhmmer ``TopHits`` per query, in order.

    Takes what ``pyhmmer.hmmsearch`` takes, with pyhmmer's meaning, and gives its results:
    ``queries``: an ``HMM``, ``Profile`` or ``OptimizedProfile``, or an iterable of them (an
    ``HMMFile``), or hmmgpu's HMM file path; ``sequences``: a ``DigitalSequenceBlock``, an
    iterable of ``DigitalSequence``, a digital ``SequenceFile``, or hmmgpu's FASTA path, made
    database or ``SequenceDB``. ``cpus``, ``callback``, ``backend`` (``"threading"``,
    ``"multiprocessing"``) and ``parallel`` are pyhmmer's (:class:`~hmmgpu.pyhmmer_compat.Dispatch`);
    ``options``: pyhmmer's pipeline options, and hmmgpu's ``engine`` (``"auto"``, ``"cuda"``,
    ``"numba"``, ``"hmmer"``: the command line's ``--backend``), ``lanes``, ``device`` and ``devices``.
    Calibrated protein HMMs run on hmmgpu's engine; other queries on pyhmmer's own function
    (:func:`~hmmgpu.pyhmmer_compat.engine_searches`).
    """
    from hmmgpu.pyhmmer_compat import Dispatch, Targets, search_options

    dispatch = Dispatch(cpus=cpus, callback=callback, backend=backend, parallel=parallel)
    search, extra = search_options(options, dispatch)
    queries = _queries(queries)
    targets, queries = Targets.of(sequences, extra.get("alphabet"), queries)
    return _called_back(_search(queries, targets, search, extra, dispatch), callback)


def _search(queries, targets, options: SearchOptions, extra: dict, dispatch) -> Iterator:
    """The ``(query, TopHits)`` of :func:`hmmsearch`: runs of consecutive queries on hmmgpu's
    engine or on pyhmmer's function, one ``Pipeline`` kept open across the engine's runs."""
    import pyhmmer

    from hmmgpu.pyhmmer_compat import check_query, engine_searches

    def on_engine(query) -> bool:
        check_query(query, targets.alphabet, options)
        return engine_searches(query, extra) and targets.engine_ready

    with ExitStack() as stack:
        pipeline = None
        for engine, run in _runs(queries, on_engine):
            if engine:
                lengths = [hmm.M for hmm in run] if isinstance(run, list) else None
                if pipeline is None:
                    pipeline = stack.enter_context(Pipeline(targets.database(), model_lengths=lengths,
                                                            search_options=options))
                if lengths:
                    pipeline.backend.prepare_for(lengths)
                results = pipeline.search_hmms(run)
            else:
                found = pyhmmer.hmmsearch(run, targets.block(), **dispatch.pyhmmer_kwargs("hmmsearch"),
                                          **options.pipeline_kwargs(), **extra)
                results = ((hits.query, hits) for hits in found)
            yield from results


def _called_back(results, callback) -> Iterator:
    """The ``TopHits`` of ``results`` (``(query, TopHits)`` pairs), calling ``callback(query,
    n)`` before the n-th is yielded, in the caller's thread, as pyhmmer does with one thread."""
    for count, (query, hits) in enumerate(results, start=1):
        if callback is not None:
            callback(query, count)
        yield hits


def _runs(queries, key) -> Iterator:
    """``(key, run)`` for each run of consecutive queries with the same ``key(query)``; a run
    is a list when ``queries`` is one, else an iterator to use up before the next run."""
    listed = isinstance(queries, (list, tuple))
    for value, run in groupby(queries, key):
        yield value, list(run) if listed else run


def hmmscan(queries, profiles, *, cpus: int = 0, callback=None, backend: str = "threading", **options) -> Iterator:
    """``pyhmmer.hmmscan`` with hmmgpu's filters: yield one pyhmmer ``TopHits`` per query sequence.

    Takes what ``pyhmmer.hmmscan`` takes, with pyhmmer's meaning, and gives its results:
    ``queries``: a ``DigitalSequence`` or an iterable of them (a block, a digital
    ``SequenceFile``), or hmmgpu's FASTA path, made database or ``SequenceDB``; ``profiles``:
    ``HMM``, ``Profile`` or ``OptimizedProfile`` objects, an ``OptimizedProfileBlock``, an
    ``HMMPressedFile``, or hmmgpu's profile file path. ``cpus``, ``callback``, ``backend`` and
    ``options`` as for :func:`hmmsearch`. Where ``engine`` gives hmmgpu's filters (the GPU, or
    ``numba``) and the profiles are calibrated protein HMMs or a path, the filters choose the
    models each sequence is scanned with (:mod:`hmmgpu.search.scan`); otherwise pyhmmer's own
    function scans.
    """
    from hmmgpu.pyhmmer_compat import Dispatch, search_options

    dispatch = Dispatch(cpus=cpus, callback=callback, backend=backend)
    search, extra = search_options(options, dispatch)
    return _called_back(_scan(queries, profiles, search, extra, dispatch), callback)


def _scan(queries, profiles, options: SearchOptions, extra: dict, dispatch) -> Iterator:
    """The ``(query, TopHits)`` of :func:`hmmscan`: hmmgpu's filtered scan where it applies,
    else pyhmmer's."""
    import pyhmmer
    from pyhmmer.easel import DigitalSequence, DigitalSequenceBlock, SequenceFile

    from hmmgpu.formats.seqdb import SequenceDB
    from hmmgpu.search.scan import ProfileDatabase

    if isinstance(queries, (str, os.PathLike)):
        queries = open_sequences(queries)   # read once, whichever route scans them
    elif not isinstance(queries, (SequenceDB, DigitalSequence, DigitalSequenceBlock, SequenceFile, list, tuple)):
        queries = list(queries)   # both routes may need them
    filtered = _filtered_scan(queries, profiles, options, extra)
    if filtered is not None:
        yield from ((hits.query, hits) for hits in filtered)
        return
    if isinstance(queries, SequenceDB):
        queries = queries.block()
    if isinstance(profiles, (str, os.PathLike)):
        profiles = ProfileDatabase.read(profiles).block
    found = pyhmmer.hmmscan(queries, profiles, **dispatch.pyhmmer_kwargs("hmmscan"), **options.pipeline_kwargs(),
                            **extra)
    yield from ((hits.query, hits) for hits in found)


def _filtered_scan(queries, profiles, options: SearchOptions, extra: dict):
    """The ``TopHits`` of a scan that hmmgpu's filters narrow, or None where they do not apply:
    pyhmmer-only options, profiles that are not calibrated protein HMMs (or a path), a model
    without the cutoffs asked for (pyhmmer then decides when to raise), query sequences that
    are not protein, or a route (``engine``) without hmmgpu's filters."""
    from pyhmmer.easel import DigitalSequence

    from hmmgpu.formats.hmmfile import Model, model_lengths
    from hmmgpu.pyhmmer_compat import Targets, engine_searches, has_cutoffs
    from hmmgpu.search.routing import SearchPlan
    from hmmgpu.search.scan import CascadeNarrowing, ProfileDatabase, scan
    from hmmgpu.stages.protocol import CascadeBackend

    if extra or options.run.backend == "hmmer":
        return None
    if isinstance(profiles, (str, os.PathLike)):
        lengths = model_lengths(os.fspath(profiles))

        def read(each):
            return ProfileDatabase.read(profiles, each=each)
    elif isinstance(profiles, (list, tuple)) and all(engine_searches(hmm, extra) and hmm.alphabet.is_amino()
                                                     and (options.bit_cutoffs is None
                                                          or has_cutoffs(hmm, options.bit_cutoffs))
                                                     for hmm in profiles):
        lengths = [hmm.M for hmm in profiles]

        def read(each):
            models = (Model(hmm=hmm, index=i, mmu=None) for i, hmm in enumerate(profiles))
            return ProfileDatabase.from_models(models, "<HMMs>", each=each)
    else:
        return None
    if isinstance(queries, DigitalSequence):
        queries = [queries]
    if isinstance(queries, list) and not all(isinstance(query, DigitalSequence) for query in queries):
        return None   # pyhmmer's route says which query it cannot scan
    sequences, _ = Targets.of(queries, models=profiles if isinstance(profiles, (list, tuple)) else ())
    if not sequences.engine_ready:
        return None
    db = sequences.database()
    backend = SearchPlan(options, lengths).backend(db)
    if not isinstance(backend, CascadeBackend):
        backend.close()
        return None
    try:
        narrowing = CascadeNarrowing(db, backend, options)
        if lengths:
            backend.prepare_for(lengths)
        database = read(narrowing.add)
        survivors = narrowing.survivors()
    finally:
        backend.close()   # and its threads (several GPUs), as pyhmmer leaves none behind
    return (hits for _, hits in scan(db, database, options, narrow=survivors.__getitem__, ftz=False))


__all__ = ["hmmsearch", "hmmscan", "Pipeline", "read_hmms", "iter_hmms", "open_sequences"]
