"""The Smith-Waterman database search: every query against every target, hits with statistics.

:class:`SwSearch` opens a database once (on the GPU when there is one: one upload for any
number of queries) and answers :meth:`SwSearch.scores` (every target's optimal local
score) and :meth:`SwSearch.search` (per-query hit lists). The scan runs on the GPU kernels of
:mod:`hmmgpu.gpu.sw` or, without a GPU, on pyopal (:mod:`.cpu`); both are exact, so
the hits are the same. Hits are the targets with a positive score whose E-value is at most
``evalue``, best first (score, then database order), at most ``max_hits`` of them; each gets
an exact traceback (:mod:`.traceback`) that must reproduce the scan's score.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from hmmgpu.constants import AMINO_SYMBOLS
from hmmgpu.errors import HmmgpuError, InputError
from hmmgpu.sw import matrices
from hmmgpu.sw.matrices import Matrix, MatrixName
from hmmgpu.sw.stats import KarlinAltschul
from hmmgpu.sw.traceback import Alignment, align

Backend = Literal["auto", "cuda", "cpu"]
_QUERY_TABLE = np.full(256, 255, np.uint8)
for _code, _sym in enumerate(AMINO_SYMBOLS):
    if _sym.isalpha() or _sym == "*":
        _QUERY_TABLE[ord(_sym)] = _QUERY_TABLE[ord(_sym.lower())] = _code


@dataclass(frozen=True)
class SwParams:
    """The scoring system of a search: matrix, BLAST gap costs, Karlin-Altschul parameters."""

    matrix: Matrix
    gap_open: int
    gap_extend: int
    ka: KarlinAltschul

    @classmethod
    def resolve(cls, matrix: str, gap_open: int, gap_extend: int) -> "SwParams":
        """Check and look up everything (one-line HmmgpuError on bad values)."""
        m = matrices.load(matrix)
        for name, v in (("--gapopen", gap_open), ("--gapextend", gap_extend)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise HmmgpuError(f"{name} must be a non-negative integer, not {v!r}")
        return cls(m, int(gap_open), int(gap_extend), KarlinAltschul.lookup(m.name, gap_open, gap_extend))


@dataclass
class QueryHits:
    """One query's hits, as columns (numpy arrays, best hit first).

    ``to_frame()`` makes a pandas DataFrame from the columns without a per-row loop.
    """

    query_name: str
    query_length: int
    query_codes: np.ndarray
    search_space: float  #: BLAST's effective search space of this query
    target_index: np.ndarray  #: database index of each hit (int64)
    target_name: np.ndarray  #: object array of str
    score: np.ndarray  #: raw score (int32)
    bits: np.ndarray
    evalue: np.ndarray
    q_start: np.ndarray  #: 1-based, inclusive
    q_end: np.ndarray
    t_start: np.ndarray
    t_end: np.ndarray
    length: np.ndarray  #: alignment columns
    identities: np.ndarray
    positives: np.ndarray
    mismatch: np.ndarray
    gapopen: np.ndarray  #: number of gaps (runs)
    gaps: np.ndarray  #: gap columns
    alignments: list = field(repr=False)  #: :class:`~hmmgpu.sw.traceback.Alignment` per hit

    def __len__(self) -> int:
        return int(self.target_index.size)

    @property
    def pident(self) -> np.ndarray:
        """Percent identity over the alignment columns (BLAST's pident)."""
        return 100.0 * self.identities / np.maximum(self.length, 1)

    def to_frame(self):
        """A pandas DataFrame: BLAST's 12 tabular columns, then score, target index, positives, gaps."""
        import pandas as pd

        n = len(self)
        return pd.DataFrame({
            "qseqid": np.full(n, self.query_name, dtype=object), "sseqid": self.target_name,
            "pident": self.pident, "length": self.length, "mismatch": self.mismatch, "gapopen": self.gapopen,
            "qstart": self.q_start, "qend": self.q_end, "sstart": self.t_start, "send": self.t_end,
            "evalue": self.evalue, "bitscore": self.bits, "score": self.score, "target_index": self.target_index,
            "positives": self.positives, "gaps": self.gaps,
        })


def _column_counts(alns, q, db, by_code):
    out = np.zeros((6, len(alns)), np.int64)
    for r, (ti, aln) in enumerate(alns):
        qa, ta = aln.columns(q, db.codes(ti))
        both = (qa >= 0) & (ta >= 0)
        same = both & (qa == ta)
        pos = np.zeros(both.size, bool)
        pos[both] = by_code[qa[both], ta[both]] > 0
        ops = aln.ops
        runs = int(np.count_nonzero((ops != 0) & np.concatenate([[True], ops[1:] != ops[:-1]])))
        out[:, r] = (ops.size, same.sum(), pos.sum(), both.sum() - same.sum(), runs, ops.size - both.sum())
    return out


def query_codes(seq) -> np.ndarray:
    """Easel codes of a query given as text (letters of either case, ``*``); HmmgpuError otherwise."""
    raw = seq.encode() if isinstance(seq, str) else bytes(seq)
    raw = raw.replace(b"\n", b"").replace(b"\r", b"").replace(b" ", b"")
    codes = _QUERY_TABLE[np.frombuffer(raw, np.uint8)]
    if codes.size and codes.max() == 255:
        bad = raw[int(np.argmax(codes == 255))]
        raise HmmgpuError(f"invalid character {chr(bad)!r} in a query sequence (expected protein letters)")
    return codes


def check_threads(threads) -> None:
    """One-line :class:`~hmmgpu.errors.InputError` unless ``threads`` is None or an integer >= 0
    (as ``hmmgpu search`` checks ``--cpu``)."""
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, (int, np.integer))
                                or threads < 0):
        raise InputError(f"--cpu must be >= 0 (got {threads})")


def looks_like_nucleotide(queries) -> bool:
    """The first 10,000 residues of the queries (``(name, codes)`` pairs) look like DNA or RNA,
    by the test ``hmmgpu search`` applies to its targets."""
    from hmmgpu.formats.seqdb import SequenceDB

    head, count = [], 0
    for _, codes in queries:
        if count >= 10_000:
            break
        head.append(codes[:10_000 - count])
        count += head[-1].size
    return bool(head) and SequenceDB.head_looks_like_nucleotide(np.concatenate(head))


def _read_queries(queries) -> list:
    """(name, codes) of every query (a FASTA path, a SequenceDB, texts, (name, text) or (name, codes)
    pairs); HmmgpuError for an empty query or none at all."""
    from hmmgpu.formats.seqdb import SequenceDB

    if isinstance(queries, (str, os.PathLike)):
        queries = SequenceDB.from_fasta(queries)
    if isinstance(queries, SequenceDB):
        out = [(queries.name(i).decode(errors="replace"), np.asarray(queries.codes(i))) for i in range(queries.n)]
    else:
        out = []
        for k, q in enumerate(queries):
            name, seq = q if isinstance(q, tuple) else (f"query{k + 1}", q)
            if isinstance(seq, np.ndarray):  # already Easel codes
                if seq.size and int(seq.max()) >= len(AMINO_SYMBOLS):
                    raise HmmgpuError(f"query {name!r}: residue codes must be below {len(AMINO_SYMBOLS)}")
                out.append((str(name), seq.astype(np.uint8)))
            else:
                out.append((str(name), query_codes(seq)))
    if not out:
        raise HmmgpuError("no query sequences")
    for name, codes in out:
        if codes.size == 0:
            raise HmmgpuError(f"query {name!r} is empty")
    return out


class SwSearch:
    """A database opened for Smith-Waterman searches (resident on the GPU with backend cuda).

    Keyword arguments hold every default: BLOSUM62, BLAST's gap costs 11/1 (a gap of length
    k costs ``gap_open + k * gap_extend``), at most 500 hits per query with E-value <= 10.
    ``backend`` "auto" uses the GPU when one is found, else pyopal on ``threads`` CPU threads.
    """

    def __init__(self, database, *, matrix: MatrixName = "BLOSUM62", gap_open: int = 11, gap_extend: int = 1,
                 max_hits: int = 500, evalue: float = 10.0, backend: Backend = "auto", device: int = 0,
                 threads: int | None = None, alignments: int = 50):
        from hmmgpu.formats.seqdb import SequenceDB, open_database

        self.params = SwParams.resolve(matrix, gap_open, gap_extend)
        if isinstance(max_hits, bool) or not isinstance(max_hits, (int, np.integer)) or max_hits < 1:
            raise HmmgpuError(f"--max-hits must be a positive integer, not {max_hits!r}")
        if not (isinstance(evalue, (int, float)) and evalue > 0):
            raise HmmgpuError(f"-E must be a positive number, not {evalue!r}")
        if backend not in ("auto", "cuda", "cpu"):
            raise HmmgpuError(f"backend must be auto, cuda or cpu, not {backend!r}")
        check_threads(threads)
        self.max_hits = int(max_hits)
        self.evalue = float(evalue)
        self.alignments = int(alignments)
        self.db = database if isinstance(database, SequenceDB) else open_database(database)
        self.n_residues = int(self.db.total_residues)
        if backend == "auto":
            from hmmgpu.gpu.runtime.context import cuda_available

            backend = "cuda" if cuda_available(device) else "cpu"
        if backend == "cuda":
            from hmmgpu.gpu.runtime.context import cuda_available
            from hmmgpu.gpu.sw.launch import GpuScanner

            if not cuda_available(device):
                raise HmmgpuError(f"backend cuda: no usable CUDA GPU with id {device}")
            from hmmgpu.sw.cpu import rescorer

            params = self.params
            self.scanner = GpuScanner(self.db, params.matrix, params.gap_open, params.gap_extend, device=device,
                                      rescore=rescorer(self.db, params.matrix, params.gap_open, params.gap_extend))
            self.notice = f"Smith-Waterman on {self.scanner.description}"
        else:
            from hmmgpu.sw.cpu import CpuScanner

            self.scanner = CpuScanner(self.db, self.params.matrix, self.params.gap_open, self.params.gap_extend,
                                      threads=threads)
            self.notice = f"Smith-Waterman on the CPU (pyopal, {self.scanner.threads} threads)"
        self.backend = backend

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        """Free the scanner's resources (thread pool, device memory)."""
        self.scanner.close()

    def scores(self, query) -> np.ndarray:
        """Every target's optimal local score against ``query`` (text or Easel codes; int32 by index)."""
        codes = query_codes(query) if isinstance(query, (str, bytes)) else np.asarray(query, np.uint8)
        if codes.size == 0:
            raise HmmgpuError("query is empty")
        return self.scanner.scores_many([codes])[0]

    def search(self, queries) -> list:
        """Hits of every query (a FASTA path, a SequenceDB, or texts / (name, text) pairs)."""
        return list(self.iter_search(queries))

    def iter_search(self, queries):
        """As :meth:`search`, one :class:`QueryHits` at a time."""
        qs = _read_queries(queries)
        codes = [c for _, c in qs]
        for (name, q), scores in zip(qs, self.scanner.scores_many(codes)):
            yield self.hits(name, q, scores)

    def hits(self, name: str, q: np.ndarray, scores: np.ndarray) -> QueryHits:
        """The hit list of one query from its scan scores (statistics, selection, tracebacks)."""
        p = self.params
        space = p.ka.search_space(q.size, self.n_residues, self.db.n)
        cand = np.flatnonzero(scores > 0)
        ev = p.ka.evalues(scores[cand], space)
        keep = ev <= self.evalue
        cand, ev = cand[keep], ev[keep]
        order = np.lexsort((cand, -scores[cand]))[: self.max_hits]
        idx = cand[order].astype(np.int64)
        sc = scores[idx].astype(np.int32)
        alns = []
        for ti, s in zip(idx.tolist(), sc.tolist()):
            aln = align(q, self.db.codes(ti), p.matrix.by_code, p.gap_open, p.gap_extend)
            if aln.score != s:
                raise HmmgpuError(f"internal error: traceback score {aln.score} differs from the scan's {s} "
                                  f"for target {self.db.name(ti)!r}")
            alns.append(aln)
        counts = _column_counts(list(zip(idx.tolist(), alns)), q, self.db, p.matrix.by_code)
        names = np.array([self.db.name(i).decode(errors="replace") for i in idx.tolist()], dtype=object)

        def coord(attr):
            return np.array([getattr(a, attr) for a in alns], dtype=np.int64)

        return QueryHits(query_name=name, query_length=int(q.size), query_codes=q, search_space=space,
                         target_index=idx, target_name=names, score=sc, bits=p.ka.bit_scores(sc),
                         evalue=p.ka.evalues(sc, space), q_start=coord("q_start"), q_end=coord("q_end"),
                         t_start=coord("t_start"), t_end=coord("t_end"), length=counts[0], identities=counts[1],
                         positives=counts[2], mismatch=counts[3], gapopen=counts[4], gaps=counts[5],
                         alignments=alns)


def search(queries, database, *, matrix: MatrixName = "BLOSUM62", gap_open: int = 11, gap_extend: int = 1,
           max_hits: int = 500, evalue: float = 10.0, backend: Backend = "auto", device: int = 0,
           threads: int | None = None) -> list:
    """Smith-Waterman search of ``queries`` against ``database``: a list of :class:`QueryHits`.

    ``queries``: a FASTA path, a :class:`~hmmgpu.formats.seqdb.SequenceDB`, or texts / (name, text)
    pairs; ``database``: a FASTA path (plain or gzip), a ``hmmgpu makedb`` directory or a
    SequenceDB. See :class:`SwSearch` for the options.
    """
    with SwSearch(database, matrix=matrix, gap_open=gap_open, gap_extend=gap_extend, max_hits=max_hits,
                  evalue=evalue, backend=backend, device=device, threads=threads) as s:
        return s.search(queries)


__all__ = ["search", "SwSearch", "QueryHits", "SwParams", "Alignment", "Backend"]
