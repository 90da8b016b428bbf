"""Exactness checks of the Smith-Waterman GPU scan against pyopal and parasail (the references'
own code). Run on a GPU by ``tests/sw/test_sw_gpu.py`` and, under numba's CUDA simulator, by
``tests/sw/test_sw.py`` (``python tests/sw/sw_kernel_checks.py NAME`` with ``NUMBA_ENABLE_CUDASIM=1``)."""
from __future__ import annotations

import numpy as np

from hmmgpu.constants import AMINO_SYMBOLS


def text(codes) -> str:
    return "".join(AMINO_SYMBOLS[c] for c in np.asarray(codes).tolist())


def make_db(seqs):
    from pyhmmer.easel import Alphabet, DigitalSequence, DigitalSequenceBlock

    from hmmgpu.formats.seqdb import SequenceDB

    abc = Alphabet.amino()
    return SequenceDB.from_block(DigitalSequenceBlock(abc, [
        DigitalSequence(abc, name=f"t{i}".encode(), sequence=np.asarray(s, np.uint8)) for i, s in enumerate(seqs)]))


def parasail_scores(q, db, matrix: str, gap_open: int, gap_extend: int) -> np.ndarray:
    """parasail's 32-bit striped SW on the letters of every target (unknown letters: its ``*`` row)."""
    import parasail

    mat = getattr(parasail, matrix.lower())
    qt = text(q)
    return np.array([parasail.sw_striped_32(qt, text(db.codes(i)), gap_open + gap_extend, gap_extend, mat).score
                     if db.lengths[i] else 0 for i in range(db.n)], np.int32)


def tiny_case(seed: int, n: int, max_len: int, qlen: int):
    """A query and targets: random (all 29 codes), homologs with gaps at every offset, length 1."""
    rng = np.random.default_rng(seed)
    q = rng.integers(0, 20, qlen).astype(np.uint8)
    seqs = []
    for i in range(n):
        kind = i % 4
        if kind == 0:
            s = rng.integers(0, 29, int(rng.integers(1, max_len)))
        elif kind == 1:
            a = int(rng.integers(0, qlen - 2))
            b = int(rng.integers(a + 1, qlen))
            s = np.concatenate([rng.integers(0, 20, 3), q[:a], rng.integers(0, 20, int(rng.integers(0, 4))), q[b:]])
        elif kind == 2:
            s = np.concatenate([q[int(rng.integers(0, qlen)):], [27, 28, 22, 24, 25]])
        else:
            s = rng.integers(0, 20, 1)
        seqs.append(np.asarray(s, np.uint8))
    return q, make_db(seqs)


def check(scanner, queries, db, matrix="BLOSUM62", gap_open=11, gap_extend=1):
    """Every target's score from ``scanner`` equals parasail's and pyopal's."""
    from hmmgpu.sw.cpu import CpuScanner
    from hmmgpu.sw.matrices import load

    got = scanner.scores_many(queries)
    opal = CpuScanner(db, load(matrix), gap_open, gap_extend, threads=1)
    for q, g in zip(queries, got):
        ref = parasail_scores(q, db, matrix, gap_open, gap_extend)
        bad = np.flatnonzero(g != ref)
        if bad.size:
            raise AssertionError(f"{bad.size} scores differ from parasail, e.g. target {bad[0]}: {g[bad[0]]} vs "
                                 f"{ref[bad[0]]}")
        if (opal.scores(q) != ref).any():
            raise AssertionError("pyopal and parasail disagree")
    return dict(targets=int(db.n), queries=len(queries), last=scanner.last)


def simulator_sw_checks():
    """The scan under the simulator: one tile, tiles (forced narrow shape), odd pair counts,
    BLOSUM45 / PAM30 with other gap costs, the rescoring path, chunked database (also tiled),
    one scanner query after query, tiles with one thread per group and with a whole warp."""
    from hmmgpu.gpu.sw.launch import GpuScanner
    from hmmgpu.sw.cpu import rescorer
    from hmmgpu.sw.matrices import load

    out = []
    q, db = tiny_case(1, 7, 20, 22)
    out.append(("one tile", check(GpuScanner(db, load("BLOSUM62"), 11, 1), [q], db)))
    q2, db2 = tiny_case(2, 6, 30, 40)
    out.append(("three tiles g8 q6", check(GpuScanner(db2, load("BLOSUM62"), 11, 1, shape=(8, 6)), [q2, q2[:9]], db2)))
    out.append(("BLOSUM45 13/3", check(GpuScanner(db, load("BLOSUM45"), 13, 3), [q], db, "BLOSUM45", 13, 3)))
    out.append(("PAM30 9/1 g16", check(GpuScanner(db, load("PAM30"), 9, 1, shape=(16, 6)), [q], db, "PAM30", 9, 1)))
    sc = GpuScanner(db2, load("BLOSUM62"), 11, 1, limit=40, rescore=rescorer(db2, load("BLOSUM62"), 11, 1))
    rep = check(sc, [q2], db2)
    assert rep["last"]["saturated"] > 0
    out.append(("rescoring path", rep))
    sc = GpuScanner(db, load("BLOSUM62"), 11, 1, max_bytes=200)
    assert sc.resident.n_chunks > 1
    out.append(("chunked", check(sc, [q], db)))
    out.append(("chunked, tiled", check(GpuScanner(db2, load("BLOSUM62"), 11, 1, max_bytes=300, shape=(8, 6)),
                                        [q2], db2)))
    out.append(("buffers reused", reused_buffers(db2, q2)))
    # tiles with one thread per group (thread 0 also writes the boundary) and with a whole warp
    out.append(("tiles g1 q2", check(GpuScanner(db2, load("BLOSUM62"), 11, 1, shape=(1, 2)), [q2[:7]], db2)))
    out.append(("tiles g32 q2", check(GpuScanner(db2, load("BLOSUM62"), 11, 1, shape=(32, 2)), [q2], db2)))
    return out


def reused_buffers(db, q):
    """One scanner, query after query (tiled and not): the same scores every time and the
    work counters back at zero after every call; the positions (the claim order) longest first."""
    from hmmgpu.gpu.sw.launch import GpuScanner
    from hmmgpu.sw.matrices import load

    sc = GpuScanner(db, load("BLOSUM62"), 11, 1, shape=(8, 6))
    assert (np.diff(sc.resident.lengths) <= 0).all(), "positions (the claim order) are not longest first"
    rep = check(sc, [q, q[:9]], db)
    want = dict(zip((q.size, 9), sc.scores_many([q, q[:9]])))
    for batch in ([q[:9]], [q], [q[:9], q, q]):
        for b, got in zip(batch, sc.scores_many(batch)):
            assert np.array_equal(got, want[b.size]), "a repeated query scored differently"
        assert not any(c.copy_to_host().any() for c in sc.counters), "work counters not back at zero"
    return rep


def check_batches(scanner, queries, db, plan=None, matrix="BLOSUM62", gap_open=11, gap_extend=1):
    """:meth:`GpuScanner.batches` over ``queries``: batches in order, covering every query
    once, the rows by position equal parasail's scores of the targets at those positions."""
    got, starts, rescored = [None] * len(queries), [], 0
    for batch in scanner.batches(queries, plan=plan):
        starts.append((batch.start, len(batch)))
        rescored += batch.rescored
        assert batch.scores.shape == (len(batch), scanner.positions.size)
        for r, row in enumerate(batch.scores):
            got[batch.start + r] = (row.copy(), batch.positions)  # the scores are valid until the next batch
    assert [s for s, _ in starts] == sorted(s for s, _ in starts) and sum(n for _, n in starts) == len(queries)
    for q, (row, positions) in zip(queries, got):
        ref = parasail_scores(q, db, matrix, gap_open, gap_extend)
        bad = np.flatnonzero(row != ref[positions])
        if bad.size:
            raise AssertionError(f"{bad.size} batched scores differ from parasail, e.g. position {bad[0]}: "
                                 f"{row[bad[0]]} vs {ref[positions[bad[0]]]}")
    return dict(queries=len(queries), rows=[n for _, n in starts], rescored=rescored)


def batched_checks():
    """The batched path: mixed-length queries (one tile and several, the kernel each picks, and a
    forced narrow shape) in batches over three streams (a stream with no query too), saturated
    targets in a batch rescored, a chunked database, and the plan's batches."""
    from hmmgpu.gpu.sw import batches
    from hmmgpu.gpu.sw.launch import GpuScanner, stream_groups
    from hmmgpu.sw.cpu import rescorer
    from hmmgpu.sw.matrices import load

    m = load("BLOSUM62")
    q, db = tiny_case(7, 5, 24, 40)
    mixed = [q[:3], q, q[:1], q[5:35]]
    out = []
    sc = GpuScanner(db, m, 11, 1, streams=3)
    out.append(("batches, kernel per query, 3 streams", check_batches(sc, mixed, db, plan=[(0, 2), (2, 3), (3, 4)])))
    assert not any(c.copy_to_host().any() for c in sc.counters), "work counters not back at zero"
    out.append(("batches, tiled (g8 q2), one stream idle",
                check_batches(GpuScanner(db, m, 11, 1, shape=(8, 2), streams=3), mixed[:2], db, plan=[(0, 2)])))
    rep = check_batches(GpuScanner(db, m, 11, 1, limit=25, rescore=rescorer(db, m, 11, 1), shape=(8, 2)),
                        mixed, db, plan=[(0, 3), (3, 4)])
    assert rep["rescored"] > 0, "no saturated target in the batches"
    out.append(("batches, tiled, saturated targets rescored", rep))
    ch = GpuScanner(db, m, 11, 1, max_bytes=150, shape=(8, 2))
    assert ch.resident.n_chunks > 1
    out.append(("batches, chunked database, tiled", check_batches(ch, mixed, db, plan=[(0, 1), (1, 4)])))
    # the plan: every query once, in order; rows capped by memory
    lens = [5, 900, 3000, 40, 40, 40, 7000, 1]
    for cells, rows in ((1e6, 100), (5e5, 2), (float("inf"), 3)):
        p = batches.plan(lens, 1000, 100, cells=cells, score_bytes=rows * 400)
        assert [lo for lo, _ in p] == [0] + [hi for _, hi in p[:-1]] and p[-1][1] == len(lens), p
        assert all(hi - lo <= rows for lo, hi in p), p
    assert stream_groups([1, 1, 1, 1], 2) == [(0, 2), (2, 4)]
    assert stream_groups([10], 3) == [(0, 1), (1, 1), (1, 1)]
    assert stream_groups([1, 100, 1], 2) in ([(0, 2), (2, 3)], [(0, 1), (1, 3)])
    out.append(("plans", dict(ok=True)))
    return out


def pipeline_checks():
    """The search pipeline on the simulated GPU: hits (scores, E-values, tracebacks) equal the
    CPU route's with the queries cut into several batches; the command's --stats lines."""
    import argparse
    import contextlib
    import io
    import tempfile
    from pathlib import Path

    import hmmgpu.sw as sw
    from hmmgpu.gpu.sw import batches
    from hmmgpu.sw.cli import add_parser, run

    q, db = tiny_case(8, 6, 30, 36)
    queries = [("a", q), ("b", q[:4]), ("c", q[3:30]), ("d", q[::-1].copy())]
    out = []
    saved = batches.BATCH_CELLS
    batches.BATCH_CELLS = 300.0  # one or two queries per batch here
    try:
        g = sw.search(queries, db, backend="cuda", max_hits=4, evalue=1e3)
        c = sw.search(queries, db, backend="cpu", max_hits=4, evalue=1e3, threads=1)
        for x, y in zip(g, c):
            assert x.to_frame().equals(y.to_frame()), (x.query_name, x.to_frame(), y.to_frame())
        out.append(("pipeline GPU = CPU", dict(queries=len(g), hits=sum(len(h) for h in g))))
        rng = np.random.default_rng(3)
        with tempfile.TemporaryDirectory() as tmp:
            dbf, qf = Path(tmp) / "db.fa", Path(tmp) / "q.fa"
            seqs = [rng.integers(0, 20, int(n)) for n in rng.integers(5, 25, 6)]
            dbf.write_text("".join(f">t{i}\n{text(t)}\n" for i, t in enumerate(seqs)))
            qf.write_text(f">x\n{text(seqs[2])}\n>y\n{text(seqs[4][:8])}\n")
            parser = argparse.ArgumentParser(prog="hmmgpu")
            add_parser(parser.add_subparsers(dest="command"))
            err, res = io.StringIO(), io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(res):
                rc = run(parser.parse_args(["sw", str(qf), str(dbf), "--backend", "cuda", "--outfmt", "6", "--stats"]))
        lines = [ln for ln in err.getvalue().splitlines() if ln.startswith("# hmmgpu sw: ")]
        assert rc == 0 and len(lines) == 3, err.getvalue()
        assert "2 queries" in lines[0] and "6 targets" in lines[0] and "traced back" in lines[0], lines
        for step in ("wall", "reading", "database", "GPU set-up", "profiles", "GPU scan", "(CUDA events)", "selection",
                     "tracebacks", "formatting"):
            assert step in lines[1], (step, lines[1])
        assert res.getvalue().startswith("x\tt2\t100.000"), res.getvalue()
        out.append(("--stats on the GPU route", dict(lines=len(lines))))
    finally:
        batches.BATCH_CELLS = saved
    return out


if __name__ == "__main__":
    import sys

    from tests.helpers import run_named_checks

    run_named_checks(globals(), sys.argv[1:])
