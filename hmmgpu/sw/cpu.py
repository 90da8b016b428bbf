"""The CPU route of the Smith-Waterman scan: every target's optimal local score with pyopal.

pyopal (Opal's SIMD database search, 8-bit lanes rescored in 16 and 32 bits when they
overflow) is exact. hmmgpu hands it sequences already mapped to matrix rows
(:mod:`.matrices`): pyopal's own encoder rejects ``*``, so the ``*`` row travels under a
stand-in letter (``J``) of a private alphabet; the scores are those of the named matrix.
pyopal's gap costs charge ``open`` for the first gap residue, so BLAST's ``open/extend``
becomes pyopal's ``open + extend / extend``.
"""
from __future__ import annotations

import functools
import time

import numpy as np

from hmmgpu.host import usable_cores
from hmmgpu.sw.matrices import ALPHABET, Matrix, code_rows

#: pyopal's alphabet for the matrix rows: ``*`` replaced by ``J`` (absent from the matrices).
OPAL_ALPHABET = ALPHABET.replace("*", "J")


@functools.lru_cache(maxsize=None)
def _code_letters() -> bytes:
    """Translation table: Easel code -> pyopal letter (256 entries, for bytes.translate)."""
    table = bytearray(256)
    for code, row in enumerate(code_rows().tolist()):
        table[code] = ord(OPAL_ALPHABET[row])
    return bytes(table)


def opal_text(codes: np.ndarray) -> bytes:
    """Easel codes as pyopal letters."""
    return np.ascontiguousarray(codes, dtype=np.uint8).tobytes().translate(_code_letters())


def opal_aligner(matrix: Matrix, gap_open: int, gap_extend: int):
    """A pyopal Aligner for the matrix (rows under OPAL_ALPHABET) and BLAST's gap costs."""
    import pyopal
    from scoring_matrices import ScoringMatrix

    sm = ScoringMatrix(matrix.scores.tolist(), alphabet=OPAL_ALPHABET, name=matrix.name)
    return pyopal.Aligner(sm, gap_open=int(gap_open) + int(gap_extend), gap_extend=int(gap_extend))


def pair_scores(query_codes: np.ndarray, targets, matrix: Matrix, gap_open: int, gap_extend: int) -> np.ndarray:
    """Exact scores of one query against a few targets (Easel codes each; int32)."""
    import pyopal

    aligner = opal_aligner(matrix, gap_open, gap_extend)
    db = pyopal.Database([opal_text(t) for t in targets], alphabet=aligner.alphabet)
    if not len(db):
        return np.zeros(0, np.int32)
    return np.array([r.score for r in aligner.align(opal_text(query_codes), db, mode="score")], np.int32)


def rescorer(db, matrix: Matrix, gap_open: int, gap_extend: int):
    """``rescore(query_codes, indices)`` for :class:`~hmmgpu.gpu.sw.launch.GpuScanner`: exact
    32-bit scores of the database targets ``indices`` (pyopal on the CPU)."""
    def rescore(query_codes: np.ndarray, indices: np.ndarray) -> np.ndarray:
        return pair_scores(query_codes, [db.codes(int(i)) for i in indices], matrix, gap_open, gap_extend)

    return rescore


class CpuScanner:
    """pyopal over one database: ``scores(query_codes)`` gives every target's score."""

    def __init__(self, db, matrix: Matrix, gap_open: int, gap_extend: int, threads: int | None = None):
        import pyopal

        self.db = db
        self.threads = int(threads or usable_cores())
        self.aligner = opal_aligner(matrix, gap_open, gap_extend)
        self.nonempty = np.flatnonzero(np.asarray(db.lengths) > 0)
        text = opal_text(db.residues)
        offsets = np.asarray(db.offsets, dtype=np.int64)
        lengths = np.asarray(db.lengths, dtype=np.int64)
        self.database = pyopal.Database((text[o:o + n] for o, n in zip(offsets[self.nonempty].tolist(),
                                                                       lengths[self.nonempty].tolist())),
                                        alphabet=self.aligner.alphabet)
        self._pool = None

    def _threads(self):
        if self.threads > 1 and self._pool is None:
            from multiprocessing.pool import ThreadPool

            self._pool = ThreadPool(self.threads)
        return self._pool

    def scores(self, query_codes: np.ndarray) -> np.ndarray:
        """Optimal local score of the query against every target (int32, by database index)."""
        import pyopal

        out = np.zeros(self.db.n, dtype=np.int32)
        if not len(self.database):
            return out
        pool = self._threads()
        results = pyopal.align(opal_text(query_codes), self.database, self.aligner.scoring_matrix,
                               gap_open=self.aligner.gap_open, gap_extend=self.aligner.gap_extend,
                               mode="score", threads=1 if pool is None else self.threads, pool=pool,
                               ordered=True)
        out[self.nonempty] = np.fromiter((r.score for r in results), dtype=np.int32, count=len(self.database))
        return out

    def scores_many(self, queries) -> list:
        """:meth:`scores` of every query."""
        return [self.scores(q) for q in queries]

    @property
    def positions(self) -> np.ndarray:
        """Database index of each column of a batch: the database order."""
        return np.arange(self.db.n, dtype=np.int64)

    def batches(self, queries, plan=None):
        """:class:`~hmmgpu.gpu.sw.batches.ScoreBatch` of one query at a time (pyopal threads
        over the targets), as :meth:`hmmgpu.gpu.sw.launch.GpuScanner.batches` gives them."""
        from hmmgpu.gpu.sw.batches import ScoreBatch

        positions = self.positions
        for i, q in enumerate(queries):
            t = time.perf_counter()
            row = self.scores(q)
            yield ScoreBatch(start=i, scores=row[None, :], positions=positions, scan_seconds=time.perf_counter() - t)

    def close(self) -> None:
        """Stop the thread pool."""
        if self._pool is not None:
            self._pool.terminate()
            self._pool = None
