"""Python API beside pyhmmer: ``hmmsearch`` yielding ``TopHits``, and a reusable ``Pipeline``.

Options take pyhmmer's names and defaults (:class:`~hmmgpu.options.SearchOptions`), plus
``backend``, ``lanes``, ``cpus`` and ``device``. Results are pyhmmer ``TopHits`` equal to a
full ``pyhmmer.hmmsearch``/``hmmsearch`` run over the whole database.
"""
from __future__ import annotations

import os
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
    if isinstance(queries, (str, os.PathLike)):
        return iter_hmms(queries)
    from pyhmmer.plan7 import HMM

    if isinstance(queries, HMM):
        return [queries]
    return queries


class Pipeline:
    """A search over one database, kept open (and resident on the GPU) across many models.

    ``Pipeline(sequences, *, ftz=False, **options)`` takes :class:`SearchOptions`' names
    (pyhmmer's E, T, domE, ..., F1, F2, F3, bias_filter, null2, Z, domZ, bit_cutoffs, seed,
    and hmmgpu's backend, lanes, cpus, device). ``ftz=True`` computes pyhmmer's stage in the
    hmmsearch program's float mode (subnormals flushed to zero), as ``hmmgpu search`` does.
    """

    def __init__(self, sequences, *, ftz: bool = False, model_lengths=None, **options):
        from hmmgpu.formats.checks import check_target_lengths
        from hmmgpu.search.routing import SearchPlan

        self.options = SearchOptions.from_kwargs(**options)
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
                self._filters = NumbaBackend(self.db, threads=self.options.run.cpus or None)
            filters = self._filters
        result = filters.submit(filters.prepare(hmm), self.options).result()
        self.counts = StageCounts(query=str(hmm.name), M=hmm.M, nseqs=self.db.n, nres=self.db.total_residues,
                                  n_past_msv=result.n_past_msv, n_past_bias=result.n_past_bias,
                                  n_past_vit=result.n_past_vit, seconds=result.seconds)
        return self.db.block(result.survivors)

    def close(self):
        """Release the backend (GPU memory)."""
        self.backend.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def hmmsearch(queries, sequences, **options) -> Iterator:
    """Search each query model against the sequences; yield one pyhmmer ``TopHits`` per query.

    ``queries``: a pyhmmer ``HMM``, an iterable of them, or an HMM file path.
    ``sequences``: a FASTA path, a ``hmmgpu makedb`` database, a ``SequenceDB`` or a pyhmmer
    ``DigitalSequenceBlock``. Options: :class:`SearchOptions`' names (pyhmmer's, plus
    ``backend``, ``lanes``, ``cpus``, ``device``).
    """
    hmms = _queries(queries)
    lengths = [h.M for h in hmms] if isinstance(hmms, (list, tuple)) else None
    with Pipeline(sequences, model_lengths=lengths, **options) as pli:
        if lengths:
            pli.backend.prepare_for(lengths)
        for _, hits in pli.search_hmms(hmms):
            yield hits


__all__ = ["hmmsearch", "Pipeline", "read_hmms", "iter_hmms", "open_sequences"]
