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

import math
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from hmmgpu.constants import AMINO_SYMBOLS
from hmmgpu.errors import HmmgpuError, InputError
from hmmgpu.sw import matrices
from hmmgpu.sw.matrices import Matrix, MatrixName
from hmmgpu.sw.stats import KarlinAltschul
from hmmgpu.sw.timing import SwStats
from hmmgpu.sw.traceback import Alignment, query_profile, trace_hits

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
        check_count("--gapopen", gap_open, 0)
        check_count("--gapextend", gap_extend, 0)
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


def query_codes(seq) -> np.ndarray:
    """Easel codes of a query given as text (letters of either case, ``*``); HmmgpuError otherwise."""
    raw = seq.encode() if isinstance(seq, str) else bytes(seq)
    raw = raw.replace(b"\n", b"").replace(b"\r", b"").replace(b" ", b"")
    codes = _QUERY_TABLE[np.frombuffer(raw, np.uint8)]
    if codes.size and codes.max() == 255:
        bad = raw[int(np.argmax(codes == 255))]
        raise HmmgpuError(f"invalid character {chr(bad)!r} in a query sequence (expected protein letters)")
    return codes


def check_count(name: str, value, least: int) -> None:
    """One-line :class:`~hmmgpu.errors.HmmgpuError` unless ``value`` is an integer (not a bool)
    of at least ``least`` (0: "a non-negative integer", 1: "a positive integer")."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        kind = {0: "a non-negative integer", 1: "a positive integer"}[least]
        raise HmmgpuError(f"{name} must be {kind}, not {value!r}")


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

    if isinstance(queries, (str, os.PathLike)):  # into arrays (the codes are what a search needs: no pyhmmer)
        queries = SequenceDB.from_fasta(queries, arrays=True)
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


#: Cells (query residues x target residues) of one traceback task at least: a query's hits go to
#: the threads in groups of about this much work (one hit per task for long queries).
TRACEBACK_TASK_CELLS = 4_000_000
#: Queries whose hits are selected but not yet handed to the caller, at most (the scan waits).
MAX_PENDING_QUERIES = 512
#: The queries are scanned in windows of this many, the longest of a window first, so that
#: the costliest tracebacks run beside the scans of the rest instead of after the last scan
#: (hits are still handed out in query order; at most MAX_PENDING_QUERIES).
SCAN_WINDOW = 256


def min_score(ka: KarlinAltschul, space: float, evalue: float) -> int:
    """The smallest positive raw score whose E-value (``ka.evalues``) is at most ``evalue``:
    E-values fall as scores rise, so a hit's E-value test is a score threshold."""
    def passes(v):
        return float(ka.evalues(np.array([v]), space)[0]) <= evalue

    guess = math.log(max(ka.K * space / evalue, 1e-300)) / ka.lam
    v = max(1, int(math.floor(guess)) - 2) if math.isfinite(guess) else 1
    while v > 1 and passes(v - 1):
        v -= 1
    while not passes(v):
        v += 1
    return v


def select(scores: np.ndarray, positions: np.ndarray, thresholds, k: int) -> list:
    """Each row's hits: (database indices, scores) of the at most ``k`` targets scoring at least
    the row's threshold, best first (score, then database index). ``scores``: a batch of rows
    over the columns ``positions``. One partition over the batch gives every row's k-th best
    score; a row's candidates are the targets at or above the larger of that score and its
    threshold (the best ``k`` and their ties: few), and only those are sorted. numpy does the
    passes over the scores without holding the interpreter's lock, and the scan's thread needs
    no compiled code (numba loads meanwhile in a thread of its own, for the tracebacks)."""
    b, n = scores.shape
    cut = np.asarray(thresholds, np.int64).reshape(b)
    if 0 < k < n:
        cut = np.maximum(cut, np.partition(scores, n - k, axis=1)[:, n - k])
    cut = np.minimum(cut, np.iinfo(scores.dtype).max).astype(scores.dtype)
    out = []
    for r in range(b):
        row = scores[r]
        c = np.flatnonzero(row >= cut[r])
        sc = row[c]
        idx = positions[c].astype(np.int64)
        order = np.lexsort((idx, -sc.astype(np.int64)))[:k]
        out.append((idx[order], sc[order].astype(np.int32)))
    return out


class _Selected:
    """One query's selected hits and the futures of their tracebacks (in hit order)."""

    __slots__ = ("name", "q", "space", "idx", "sc", "futures", "traced")

    def __init__(self, name, q, space, idx, sc, futures, traced):
        self.name, self.q, self.space, self.idx, self.sc, self.futures, self.traced = \
            name, q, space, idx, sc, futures, traced


class SwSearch:
    """A database opened for Smith-Waterman searches (resident on the GPU with backend cuda).

    Keyword arguments hold every default: BLOSUM62, BLAST's gap costs 11/1 (a gap of length
    k costs ``gap_open + k * gap_extend``), at most 500 hits per query with E-value <= 10.
    ``backend`` "auto" uses the GPU when one is found, else pyopal on ``threads`` CPU threads.
    ``tracebacks``: hits traced back per query (default all; the report shows only
    ``alignments``): the hits after them keep their scores and E-values, with coordinates and
    counts 0 and no alignment. Tracebacks run on ``threads`` threads (default: every core).
    """

    def __init__(self, database, *, matrix: MatrixName = "BLOSUM62", gap_open: int = 11, gap_extend: int = 1,
                 max_hits: int = 500, evalue: float = 10.0, backend: Backend = "auto", device: int = 0,
                 threads: int | None = None, alignments: int = 50, tracebacks: int | None = None,
                 stats: SwStats | None = None, scanner=None):
        from hmmgpu.formats.seqdb import SequenceDB, open_database
        from hmmgpu.host import usable_cores

        self.params = SwParams.resolve(matrix, gap_open, gap_extend)
        check_count("--max-hits", max_hits, 1)
        if not (isinstance(evalue, (int, float)) and evalue > 0):
            raise HmmgpuError(f"-E must be a positive number, not {evalue!r}")
        check_count("--alignments", alignments, 0)
        if backend not in ("auto", "cuda", "cpu"):
            raise HmmgpuError(f"backend must be auto, cuda or cpu, not {backend!r}")
        check_threads(threads)
        self.max_hits = int(max_hits)
        self.evalue = float(evalue)
        self.alignments = int(alignments)
        self.tracebacks = None if tracebacks is None else max(0, int(tracebacks))
        self.stats = stats or SwStats()
        self.threads = int(threads or usable_cores())
        self.stats.threads = self.threads
        _warm_tracebacks()
        t = time.perf_counter()
        self.db = database if isinstance(database, SequenceDB) else open_database(database, arrays=True)
        self.n_residues = int(self.db.total_residues)
        self.stats.add("database", time.perf_counter() - t)
        if scanner is not None:  # tests and benchmarks: an object with batches(), scores_many(), close()
            self.scanner = scanner
            self.notice = f"Smith-Waterman on {getattr(scanner, 'description', type(scanner).__name__)}"
            backend = getattr(scanner, "backend", "cpu")
        else:
            backend = self._open_scanner(backend, device, threads)
        self.backend = backend
        self.stats.backend = self.notice
        self.stats.gpu = backend == "cuda"
        self._pool = None

    def _open_scanner(self, backend: str, device: int, threads) -> str:
        """Open the GPU scanner (database uploaded) or pyopal's; returns the backend used."""
        from hmmgpu.gpu.runtime.context import cuda_available

        if backend == "auto":
            backend = "cuda" if cuda_available(device) else "cpu"
        params = self.params
        if backend == "cuda":
            from hmmgpu.gpu.sw.launch import GpuScanner
            from hmmgpu.sw.cpu import rescorer

            if not cuda_available(device):
                raise HmmgpuError(f"backend cuda: no usable CUDA GPU with id {device}")
            t = time.perf_counter()
            self.scanner = GpuScanner(self.db, params.matrix, params.gap_open, params.gap_extend, device=device,
                                      rescore=rescorer(self.db, params.matrix, params.gap_open, params.gap_extend))
            self.notice = f"Smith-Waterman on {self.scanner.description}"
            self.stats.add("GPU set-up", time.perf_counter() - t)
        else:
            from hmmgpu.sw.cpu import CpuScanner

            self.scanner = CpuScanner(self.db, params.matrix, params.gap_open, params.gap_extend, threads=threads)
            self.notice = f"Smith-Waterman on the CPU (pyopal, {self.scanner.threads} threads)"
        return backend

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        """Free the scanner's resources (thread pools, device memory)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        self.scanner.close()

    def _threads(self):
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="hmmgpu-sw-traceback")
        return self._pool

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
        """As :meth:`search`, one :class:`QueryHits` at a time, in query order.

        The queries are scanned in batches in a thread (:meth:`GpuScanner.batches
        <hmmgpu.gpu.sw.launch.GpuScanner.batches>`), window by window of :data:`SCAN_WINDOW`
        queries, the longest of a window first; as each batch's scores arrive, every query's
        hits are selected from them and their tracebacks handed to a pool of threads; this
        generator waits only for the query it yields next, so the scans of later batches, the
        tracebacks and the caller's work on the hits all overlap."""
        t = time.perf_counter()
        qs = _read_queries(queries)
        self.stats.add("reading", time.perf_counter() - t)
        yield from _Pipeline(self, qs).run()

    def _space(self, m: int) -> float:
        return self.params.ka.search_space(m, self.n_residues, self.db.n)

    def _traced(self, h: int) -> int:
        return h if self.tracebacks is None else min(h, self.tracebacks)

    def _submit(self, q, idx, sc, traced, pool) -> list:
        """Traceback tasks of the first ``traced`` hits, a few hits per task (about
        :data:`TRACEBACK_TASK_CELLS` cells), in hit order: [(hits in it, future)]."""
        tasks, group, cells = [], [], 0
        lengths = self.db.lengths
        profile = None
        for ti, s in zip(idx[:traced].tolist(), sc[:traced].tolist()):
            group.append((ti, s))
            cells += int(q.size) * int(lengths[ti])
            if cells >= TRACEBACK_TASK_CELLS:
                tasks.append(group)
                group, cells = [], 0
        if group:
            tasks.append(group)
        if tasks:
            q = np.require(q, np.uint8, ["C", "W"])
            profile = query_profile(q, self.params.matrix.by_code)
        return [(len(g), pool.submit(self._trace, q, profile, g)) for g in tasks]

    def _trace(self, q, profile, group) -> tuple:
        """(BLAST's counts, alignments) of each (target index, scan score) of ``group`` (a pool
        task: one compiled call, :func:`~hmmgpu.sw.traceback.trace_hits`)."""
        t = time.perf_counter()
        p = self.params
        idx = [ti for ti, _ in group]
        out = trace_hits(q, [self.db.codes(ti) for ti in idx], [s for _, s in group], p.matrix.by_code, p.gap_open,
                         p.gap_extend, profile=profile,
                         label=lambda h: f"target {self.db.name(idx[h]).decode(errors='replace')!r}")
        self.stats.add("tracebacks", time.perf_counter() - t)
        return out

    def _hits(self, sel: _Selected) -> QueryHits:
        """A query's :class:`QueryHits` once its tracebacks are done."""
        p = self.params
        h = int(sel.idx.size)
        counts = np.zeros((h, 6), np.int64)
        coords = np.zeros((h, 4), np.int64)
        alns, at = [], 0
        for n, fut in sel.futures:
            cnt, part = fut.result()
            counts[at:at + n] = cnt
            coords[at:at + n] = [(a.q_start, a.q_end, a.t_start, a.t_end) for a in part]
            alns += part
            at += n
        counts, coords = counts.T, coords.T
        names = np.array([self.db.name(i).decode(errors="replace") for i in sel.idx.tolist()], dtype=object)
        sc = sel.sc
        return QueryHits(query_name=sel.name, query_length=int(sel.q.size), query_codes=sel.q,
                         search_space=sel.space, target_index=sel.idx, target_name=names, score=sc,
                         bits=p.ka.bit_scores(sc), evalue=p.ka.evalues(sc, sel.space), q_start=coords[0],
                         q_end=coords[1], t_start=coords[2], t_end=coords[3], length=counts[0],
                         identities=counts[1], positives=counts[2], mismatch=counts[3], gapopen=counts[4],
                         gaps=counts[5], alignments=alns)

    def hits(self, name: str, q: np.ndarray, scores: np.ndarray) -> QueryHits:
        """The hit list of one query from its scan scores by database index (statistics,
        selection, tracebacks), as :meth:`iter_search` makes it."""
        from concurrent.futures import Future

        q = np.asarray(q, np.uint8)
        space = self._space(q.size)
        (idx, sc), = select(np.asarray(scores, np.int32)[None, :], np.arange(scores.size, dtype=np.int64),
                            [min_score(self.params.ka, space, self.evalue)], self.max_hits)
        traced = self._traced(idx.size)
        fut = Future()
        fut.set_result(self._trace(q, None, list(zip(idx[:traced].tolist(), sc[:traced].tolist()))))
        return self._hits(_Selected(name, q, space, idx, sc, [(traced, fut)], traced))


class _Pipeline:
    """One :meth:`SwSearch.iter_search` call: the scan thread (batches, selection, tracebacks
    handed to the pool) and the caller's generator (hits in query order)."""

    _END = object()

    def __init__(self, search: SwSearch, qs: list):
        self.s = search
        self.qs = qs
        lengths = np.array([q.size for _, q in qs], np.int64)
        #: scan order: window by window, longest query first (stable)
        self.order = np.concatenate([w + np.argsort(-lengths[w:w + SCAN_WINDOW], kind="stable")
                                     for w in range(0, len(qs), SCAN_WINDOW)]) if qs else np.zeros(0, np.int64)
        self.out = queue.Queue()
        self.stop = threading.Event()
        self.room = threading.BoundedSemaphore(MAX_PENDING_QUERIES)

    def _scan(self) -> None:
        s, st = self.s, self.s.stats
        pool = s._threads()
        ka = s.params.ka
        codes = [self.qs[i][1] for i in self.order.tolist()]
        try:
            batches = s.scanner.batches(codes)
            try:
                for batch in batches:
                    if self.stop.is_set():
                        break
                    t = time.perf_counter()
                    st.count("batches", 1)
                    st.add("profiles", batch.profile_seconds)
                    st.add("scan (pyopal)", batch.scan_seconds)
                    st.add("rescoring", batch.rescore_seconds)
                    st.count("rescored", batch.rescored)
                    st.gpu_intervals += batch.gpu_intervals
                    st.arrived("scores")
                    rows = self.order[batch.start:batch.start + len(batch)].tolist()
                    spaces = [s._space(self.qs[i][1].size) for i in rows]
                    chosen = select(batch.scores, batch.positions,
                                    [min_score(ka, sp, s.evalue) for sp in spaces], s.max_hits)
                    del batch
                    st.add("selection", time.perf_counter() - t)
                    for i, space, (idx, sc) in zip(rows, spaces, chosen):
                        while not self.room.acquire(timeout=0.1):
                            if self.stop.is_set():
                                return
                        name, q = self.qs[i]
                        traced = s._traced(idx.size)
                        st.count("hits", idx.size)
                        st.count("traced", traced)
                        self.out.put((i, _Selected(name, q, space, idx, sc, s._submit(q, idx, sc, traced, pool),
                                                   traced)))
            finally:
                batches.close()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            self.out.put(exc)
            return
        self.out.put(self._END)

    def run(self):
        s, st = self.s, self.s.stats
        c = [q for _, q in self.qs]
        st.count("queries", len(c))
        st.count("query_residues", sum(int(q.size) for q in c))
        st.counts["targets"], st.counts["residues"] = int(s.db.n), int(s.n_residues)
        if hasattr(s.scanner, "compile_ahead"):
            t = time.perf_counter()
            st.count("kernels_compiled", s.scanner.compile_ahead(c))
            st.add("kernels compiled", time.perf_counter() - t)
        thread = threading.Thread(target=self._scan, name="hmmgpu-sw-scan", daemon=True)
        thread.start()
        ready = {}  # selected out of query order, by query index
        try:
            for i in range(len(self.qs)):
                t = time.perf_counter()
                while i not in ready:
                    item = self.out.get()
                    if item is self._END:
                        raise RuntimeError("internal error: the scan ended before every query's hits")
                    if isinstance(item, BaseException):
                        raise item
                    ready[item[0]] = item[1]
                hits = s._hits(ready.pop(i))
                st.add("waiting", time.perf_counter() - t)
                st.arrived("hits")
                self.room.release()
                yield hits
            if st.counts["traced"] and _WARMING is not None:
                _WARMING.join()  # done, or all but done: the tracebacks ran its passes
            loaded = getattr(_WARMING, "seconds", None)
            if loaded is not None:
                st.seconds["traceback passes loaded"] = loaded
        finally:
            self.stop.set()
            if thread.is_alive():
                while True:  # unblock the scan thread
                    try:
                        item = self.out.get(timeout=0.05)
                    except queue.Empty:
                        if not thread.is_alive():
                            break
                        continue
                    if isinstance(item, tuple):
                        ready[item[0]] = item[1]
                    if item is self._END or isinstance(item, BaseException):
                        break
                thread.join()
            for sel in ready.values():
                for _, fut in sel.futures:
                    fut.cancel()


def _warm_tracebacks() -> None:
    """Import numba and load (or compile, on a fresh machine) the traceback passes in a thread
    (once per process, whichever thread asks first)."""
    global _WARMING
    with _WARMING_LOCK:
        if _WARMING is None:
            from hmmgpu.sw.traceback import warm

            def run():
                t = time.perf_counter()
                try:
                    warm()
                except Exception:  # noqa: BLE001 - the first traceback reports it
                    pass
                _WARMING.seconds = time.perf_counter() - t  # --stats: traceback passes loaded

            _WARMING = threading.Thread(target=run, name="hmmgpu-sw-numba", daemon=True)
            _WARMING.start()


_WARMING = None
_WARMING_LOCK = threading.Lock()


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


__all__ = ["search", "SwSearch", "QueryHits", "SwParams", "SwStats", "Alignment", "Backend"]
