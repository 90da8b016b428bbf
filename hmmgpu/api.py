"""Python API beside pyhmmer: ``hmmsearch`` yielding ``TopHits``, and a reusable ``Pipeline``."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

from .backends import make_backend
from .errors import HmmgpuError
from .pipeline import SearchOptions, StageCounts, check_target_lengths, search_hmm


def read_hmms(path) -> list:
    """All models of an HMMER profile file (text or binary, plain or gzip), with clear errors."""
    import pyhmmer.plan7 as p7

    path = os.fspath(path)
    _check_readable(path, "HMM file")
    try:
        with p7.HMMFile(path) as f:
            hmms = list(f)
    except EOFError:
        raise HmmgpuError(f"{path}: HMM file is empty") from None
    except (ValueError, RuntimeError) as e:
        raise HmmgpuError(f"{path}: not a valid HMMER profile file ({_one_line(e)})") from None
    if not hmms:
        raise HmmgpuError(f"{path}: contains no profile HMMs")
    return hmms


def open_sequences(sequences):
    """A :class:`~hmmgpu.seqdb.SequenceDB` from a path, a made database or a pyhmmer block."""
    from .seqdb import SequenceDB, open_database

    if isinstance(sequences, SequenceDB):
        return sequences
    if isinstance(sequences, (str, os.PathLike)):
        return open_database(sequences)
    try:
        from pyhmmer.easel import DigitalSequenceBlock
    except ImportError:  # pragma: no cover - pyhmmer is a dependency
        DigitalSequenceBlock = ()
    if isinstance(sequences, DigitalSequenceBlock):
        if not sequences.alphabet.is_amino():
            raise HmmgpuError("sequences: hmmgpu searches protein sequences (the block is not amino)")
        return SequenceDB.from_block(sequences)
    raise HmmgpuError(
        f"sequences must be a path, a SequenceDB or a pyhmmer DigitalSequenceBlock, not {type(sequences).__name__}"
    )


def _queries(queries) -> list:
    if isinstance(queries, (str, os.PathLike)):
        return read_hmms(queries)
    try:
        from pyhmmer.plan7 import HMM
    except ImportError:  # pragma: no cover
        HMM = ()
    if isinstance(queries, HMM):
        return [queries]
    return list(queries)


class Pipeline:
    """A search over one database, kept open (and resident on the GPU) across many models.

    ``Pipeline(sequences, backend="auto", lanes="auto", cpus=None, **options)`` takes
    pyhmmer's option names (E, T, domE, ..., F1, F2, F3, bias_filter, Z, domZ,
    bit_cutoffs). ``search_hmm(hmm)`` returns a pyhmmer ``TopHits`` equal to a full
    pyhmmer search; ``counts`` holds the last query's per-stage statistics.
    ``ftz=True`` computes the Forward stage in the hmmsearch program's float mode
    (subnormals flushed to zero), as ``hmmgpu search`` does; the default is pyhmmer's.
    """

    def __init__(self, sequences, *, backend: str = "auto", lanes: str = "auto", cpus: int | None = None,
                 ftz: bool = False, **options):
        self.options = SearchOptions.from_kwargs(**options)
        self.ftz = ftz
        self.cpus = cpus or os.cpu_count() or 1
        self.db = open_sequences(sequences)
        check_target_lengths(self.db)
        set_threads(cpus)
        self.backend, self.notice = make_backend(backend, self.db, lanes=lanes)
        self.counts: StageCounts | None = None

    def search_hmm(self, hmm):
        """Search one protein model; returns pyhmmer ``TopHits``."""
        hits, self.counts = search_hmm(hmm, self.db, self.backend, self.options, threads=self.cpus, ftz=self.ftz)
        return hits

    def search_hmms(self, hmms) -> Iterator:
        """Search several models; yield ``(hmm, TopHits)`` in order, setting ``counts`` for each.

        On the hmmer backend the models run in ``cpus`` parallel threads (pyhmmer releases
        the GIL); the other backends are parallel inside each stage.
        """
        hmms = list(hmms)
        if self.backend.name != "hmmer" or self.cpus < 2 or len(hmms) < 2:
            for hmm in hmms:
                yield hmm, self.search_hmm(hmm)
            return

        def one(hmm):
            return search_hmm(hmm, self.db, self.backend, self.options, ftz=self.ftz)

        with ThreadPoolExecutor(min(self.cpus, len(hmms))) as pool:
            for hmm, (hits, counts) in zip(hmms, pool.map(one, hmms)):
                self.counts = counts
                yield hmm, hits

    def filter(self, hmm):
        """The targets that pass MSV, bias and Viterbi filters, as a ``DigitalSequenceBlock``.

        Give it to ``pyhmmer.plan7.Pipeline(alphabet, Z=<database size>)`` to finish a
        search inside a pyhmmer workflow with the results of a full run.
        """
        import numpy as np
        import pyhmmer.plan7 as p7

        from .pipeline import check_protein_model, filter_cascade
        from .profiles import ModelProfile

        check_protein_model(hmm)
        if self.backend.name == "hmmer":
            raise HmmgpuError("Pipeline.filter needs the numba or cuda backend")
        bg = np.asarray(p7.Background(hmm.alphabet).residue_frequencies, dtype=np.float32)
        self.counts = StageCounts(query=str(hmm.name), M=hmm.M, nseqs=self.db.n, nres=self.db.total_residues)
        idx = filter_cascade(ModelProfile.from_hmm(hmm), self.db, self.backend, self.options, bg, self.counts)
        return self.db.block(idx)

    def close(self):
        """Release the backend (GPU memory)."""
        self.backend.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def hmmsearch(queries, sequences, *, backend: str = "auto", lanes: str = "auto",
              cpus: int | None = None, **options) -> Iterator:
    """Search each query model against the sequences; yield one pyhmmer ``TopHits`` per query.

    ``queries``: a pyhmmer ``HMM``, an iterable of them, or an HMM file path.
    ``sequences``: a FASTA path, a ``hmmgpu makedb`` database, a ``SequenceDB`` or a
    pyhmmer ``DigitalSequenceBlock``. Options take pyhmmer's names and defaults.
    """
    hmms = _queries(queries)
    with Pipeline(sequences, backend=backend, lanes=lanes, cpus=cpus, **options) as pli:
        for _, hits in pli.search_hmms(hmms):
            yield hits


def set_threads(cpus: int | None) -> None:
    """Use ``cpus`` threads in the numba filters (all cores by default)."""
    if cpus is None:
        return
    import numba

    if cpus < 1:
        raise HmmgpuError(f"--cpu must be at least 1, got {cpus}")
    numba.set_num_threads(min(int(cpus), numba.config.NUMBA_NUM_THREADS))


def _check_readable(path: str, what: str) -> None:
    if not os.path.exists(path):
        raise HmmgpuError(f"{path}: no such file")
    if os.path.isdir(path):
        raise HmmgpuError(f"{path}: is a directory, expected a {what}")
    if not os.access(path, os.R_OK):
        raise HmmgpuError(f"{path}: permission denied")


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


__all__ = ["hmmsearch", "Pipeline", "read_hmms", "open_sequences", "set_threads"]
