"""hmmgpu sw on the CPU: matrices and residue mapping, scores, traceback, statistics and
tabular rows against the references (parasail, pyopal, NCBI BLAST+), the API, the command's
errors, and the GPU kernels under numba's CUDA simulator (subprocess)."""
import argparse
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from hmmgpu.errors import HmmgpuError
from hmmgpu.gpu.runtime import lanes

from helpers import PROTEOME, ROOT, run_simulated
from sw_kernel_checks import make_db, parasail_scores, text

parasail = pytest.importorskip("parasail")

MATRICES = ["BLOSUM45", "BLOSUM50", "BLOSUM62", "BLOSUM80", "PAM30", "PAM70", "PAM250"]


@pytest.fixture(scope="module")
def proteome():
    from hmmgpu.formats.seqdb import SequenceDB

    return SequenceDB.from_fasta(PROTEOME)


@pytest.mark.parametrize("name", MATRICES)
def test_matrices_equal_parasail(name):
    from hmmgpu.sw.matrices import ALPHABET, load

    m = load(name)
    ref = getattr(parasail, name.lower())
    order = [ref.matrix.shape[0] and ALPHABET.index(c) for c in ALPHABET]
    got = m.scores[np.ix_(order, order)]
    pm = np.array(ref.matrix)[:24, :24]
    assert np.array_equal(got, pm)


def test_every_code_scores_as_the_references_read_its_letter():
    """Targets holding every Easel code (J, O, U, '-', '~', '*' included): hmmgpu's mapping,
    pyopal through it, and parasail on the raw letters agree."""
    from hmmgpu.sw.cpu import CpuScanner
    from hmmgpu.sw.matrices import load

    rng = np.random.default_rng(5)
    seqs = [np.arange(29, dtype=np.uint8), np.full(7, 27, np.uint8), np.array([22, 24, 25, 20, 28] * 3, np.uint8)]
    seqs += [rng.integers(0, 29, 40).astype(np.uint8) for _ in range(30)]
    db = make_db(seqs)
    for q in (np.arange(29, dtype=np.uint8), rng.integers(0, 29, 50).astype(np.uint8), np.full(5, 27, np.uint8)):
        for name, go, ge in (("BLOSUM62", 11, 1), ("PAM250", 14, 2), ("BLOSUM80", 10, 1)):
            ref = parasail_scores(q, db, name, go, ge)
            assert np.array_equal(CpuScanner(db, load(name), go, ge, threads=1).scores(q), ref)


def test_cpu_route_every_proteome_score(proteome):
    """Every score of the sample proteome (2,100 targets) for three queries, against parasail."""
    from hmmgpu.sw.cpu import CpuScanner
    from hmmgpu.sw.matrices import load

    sc = CpuScanner(proteome, load("BLOSUM62"), 11, 1, threads=2)
    for qi in (5, 17, 1500):
        q = proteome.codes(qi)
        assert np.array_equal(sc.scores(q), parasail_scores(q, proteome, "BLOSUM62", 11, 1))
    sc.close()


def _rescore(aln, q, t, by_code, gap_open, gap_extend) -> int:
    """The score of an alignment's columns: matrix scores of the aligned columns, gap_extend
    per gap column and gap_open more where a gap run begins."""
    qa, ta = aln.columns(q, t)
    ops = aln.ops
    both = ops == 0
    opens = (ops != 0) & (ops != np.concatenate([[0], ops[:-1]]).astype(ops.dtype))
    return (int(np.asarray(by_code, np.int64)[qa[both], ta[both]].sum()) - gap_extend * int((~both).sum())
            - gap_open * int(opens.sum()))


def _reference_alignment(q, t, by_code, gap_open, gap_extend):
    """The alignment by hmmgpu.sw.traceback's definition, from the whole matrices in Python:
    (score, q_start, q_end, t_start, t_end, ops) with the end the first cell (rows, then
    columns) reaching the maximum, the walk preferring diagonal, E, F and a gap's opening."""
    go, ge, neg = gap_open + gap_extend, gap_extend, -(1 << 30)
    m, n = q.size, t.size
    H = np.zeros((n + 1, m + 1), np.int64)
    E = np.full((n + 1, m + 1), neg, np.int64)
    F = np.full((n + 1, m + 1), neg, np.int64)
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            E[i, j] = max(E[i, j - 1] - ge, H[i, j - 1] - go)
            F[i, j] = max(F[i - 1, j] - ge, H[i - 1, j] - go)
            H[i, j] = max(0, H[i - 1, j - 1] + by_code[q[j - 1], t[i - 1]], E[i, j], F[i, j])
    best = int(H.max())
    if best <= 0:
        return 0, 0, 0, 0, 0, []
    bi, bj = (int(v) for v in np.argwhere(H == best)[0])
    i, j, state, ops = bi, bj, "H", []
    while i > 0 and j > 0:
        if state == "H":
            dg = H[i - 1, j - 1] + by_code[q[j - 1], t[i - 1]]
            h, src = (dg, "D") if dg > 0 else (0, None)
            if E[i, j] > h:
                h, src = E[i, j], "E"
            if F[i, j] > h:
                src = "F"
            if src is None:
                break
            if src == "D":
                ops.append(0)
                i, j = i - 1, j - 1
            else:
                state = src
        elif state == "E":
            ops.append(1)
            state = "E" if E[i, j - 1] - ge > H[i, j - 1] - go else "H"
            j -= 1
        else:
            ops.append(2)
            state = "F" if F[i - 1, j] - ge > H[i - 1, j] - go else "H"
            i -= 1
    return best, j + 1, bj, i + 1, bi, ops[::-1]


def test_traceback_matches_parasail_and_the_definition():
    """Scores and end cells equal parasail's; the alignments (coordinates and every column)
    equal the definition's, computed from the whole matrices; a group of hits traced back in
    one call, with the direction bytes of one pass or the kept rows and recomputed blocks,
    gives the same alignments and BLAST's counts."""
    from hmmgpu.sw.matrices import load
    from hmmgpu.sw.traceback import align, trace_hits

    m = load("BLOSUM62")
    rng = np.random.default_rng(11)
    for trial in range(150):
        q = rng.integers(0, 20, int(rng.integers(1, 70))).astype(np.uint8)
        if trial % 2:
            t = np.concatenate([rng.integers(0, 20, 4), q[: q.size // 2], rng.integers(0, 20, 2), q[q.size // 2:]])
        else:
            t = rng.integers(0, 29, int(rng.integers(1, 70)))
        t = t.astype(np.uint8)
        go, ge = ((11, 1), (9, 2), (13, 3))[trial % 3]
        a = align(q, t, m.by_code, go, ge)
        r = parasail.sw_trace_scan_32(text(q), text(t), go + ge, ge, parasail.blosum62)
        assert a.score == r.score
        ref = _reference_alignment(q, t, m.by_code, go, ge)
        assert (a.score, a.q_start, a.q_end, a.t_start, a.t_end, a.ops.tolist()) == ref
        if a.score:
            assert (a.q_end - 1, a.t_end - 1) == (r.end_query, r.end_ref)
            assert _rescore(a, q, t, m.by_code, go, ge) == a.score
            for limit in (1, 1 << 24):  # kept rows and recomputed blocks; one pass with directions
                counts, alns = trace_hits(q, [t, q, t], [a.score, align(q, q, m.by_code, go, ge).score, a.score],
                                          m.by_code, go, ge, direction_bytes=limit)
                assert [x.ops.tolist() for x in alns[::2]] == [ref[5]] * 2
                assert [tuple(c) for c in counts[::2]] == [a.counts(q, t, m.by_code)] * 2
                assert alns[1].score == _reference_alignment(q, q, m.by_code, go, ge)[0]


def test_traceback_refuses_a_wrong_scan_score():
    """A scan score the recurrence does not give (no cell reaches it, or one passes it) is an
    error naming the hit."""
    from hmmgpu.sw.matrices import load
    from hmmgpu.sw.traceback import align, trace_hits

    m = load("BLOSUM62").by_code
    rng = np.random.default_rng(3)
    q = rng.integers(0, 20, 60).astype(np.uint8)
    t = np.concatenate([rng.integers(0, 20, 5), q]).astype(np.uint8)
    s = align(q, t, m, 11, 1).score
    for wrong, why in ((s + 1, "no cell reaches it"), (s - 1, f"a cell reaches {s}")):
        for limit in (1, 1 << 24):
            with pytest.raises(HmmgpuError, match=f"target 7: the scan's score {wrong} .*{why}"):
                trace_hits(q, [t], [wrong], m, 11, 1, direction_bytes=limit, label=lambda h: f"target {h + 7}")


def test_traceback_long_pair_bounded_memory():
    from hmmgpu.sw.matrices import load
    from hmmgpu.sw.traceback import align

    rng = np.random.default_rng(2)
    q = rng.integers(0, 20, 4000).astype(np.uint8)
    t = np.concatenate([rng.integers(0, 20, 100), q[:2000], q[2010:]]).astype(np.uint8)
    a = align(q, t, load("BLOSUM62").by_code, 11, 1)
    ref = parasail.sw_striped_32(text(q), text(t), 12, 1, parasail.blosum62).score
    assert a.score == ref and a.q_start == 1 and a.t_start == 101 and a.q_end == 4000


# NCBI BLAST+ 2.12.0 with OLD_FSC=1 (classic Karlin-Altschul E-values), blastp -comp_based_stats 0
# -seg no -use_sw_tback -outfmt 6, queries = proteome sequences 5, 17, 300 against the proteome.
BLAST_ROWS = """\
q5	938293.PRJEB85.HG003688_6	100.000	375	0	0	1	375	1	375	0.0	745
q5	938293.PRJEB85.HG003688_7	22.069	290	182	12	94	373	383	638	0.001	36.6
q5	938293.PRJEB85.HG003686_609	24.113	141	99	5	37	171	15	153	0.002	36.2
q17	938293.PRJEB85.HG003688_18	100.000	257	0	0	1	257	1	257	1.44e-150	524
q17	938293.PRJEB85.HG003686_718	43.077	65	35	2	189	251	2	66	1.23e-08	52.8
q17	938293.PRJEB85.HG003689_15	44.000	50	27	1	197	245	8	57	5.17e-07	47.4
q17	938293.PRJEB85.HG003686_409	48.571	35	16	1	209	241	135	169	0.013	32.7
q17	938293.PRJEB85.HG003685_105	22.785	158	103	5	32	185	113	255	0.017	32.3
q300	938293.PRJEB85.HG003690_176	100.000	321	0	0	1	321	1	321	6.78e-180	622
"""


def test_tabular_rows_equal_blast(proteome):
    """Rows BLAST and hmmgpu both report (one best alignment per target) are identical."""
    import io

    from hmmgpu.sw.output import write_tabular
    from hmmgpu.sw.api import SwSearch

    with SwSearch(proteome, backend="cpu", threads=2, max_hits=30) as s:
        hits = s.search([(f"q{i}", proteome.codes(i)) for i in (5, 17, 300)])
    buf = io.StringIO()
    for h in hits:
        write_tabular(buf, h)
    mine = set(buf.getvalue().splitlines())
    for row in BLAST_ROWS.splitlines():
        assert row in mine, row
    # BLAST's effective search spaces of these queries
    assert [int(h.search_space) for h in hits[:2]] == [150670002, 93758940]


def test_blast_live_if_installed(proteome, tmp_path):
    """The same check against a live blastp run, when NCBI BLAST+ is installed."""
    import shutil

    if not shutil.which("blastp"):
        pytest.skip("NCBI BLAST+ (blastp) not installed")
    qf = tmp_path / "q.fa"
    qf.write_text("".join(f">q{i}\n{text(proteome.codes(i))}\n" for i in (5, 17, 300)))
    subprocess.run(["makeblastdb", "-in", str(PROTEOME), "-dbtype", "prot", "-out", str(tmp_path / "db")],
                   check=True, capture_output=True)
    p = subprocess.run(["blastp", "-query", str(qf), "-db", str(tmp_path / "db"), "-outfmt", "6",
                        "-comp_based_stats", "0", "-seg", "no", "-use_sw_tback", "-max_target_seqs", "5"],
                       check=True, capture_output=True, text=True, env=dict(os.environ, OLD_FSC="1"))
    out = tmp_path / "mine.tsv"
    assert _run_cli([str(qf), str(PROTEOME), "--outfmt", "6", "--backend", "cpu", "-o", str(out)])[0] == 0
    mine = set(out.read_text().splitlines())
    firsts = {}
    for row in p.stdout.splitlines():  # BLAST's first (best) HSP of each target
        firsts.setdefault(tuple(row.split("\t")[:2]), row)
    shared = [r for r in firsts.values() if r in mine]
    assert len(shared) >= 0.8 * len(firsts), (len(shared), len(firsts))


def test_formats():
    from hmmgpu.sw.output import format_bits, format_evalue

    assert [format_evalue(e) for e in (0, 1e-181, 6.78e-180, 2.55e-9, 0.0012, 0.19, 7.52, 120.4)] == \
        ["0.0", "0.0", "6.78e-180", "2.55e-09", "0.001", "0.19", "7.5", "120"]
    assert [format_bits(b) for b in (745.9, 100.0, 99.9, 36.25, 123456.0)] == ["745", "100", "99.9", "36.2", "1.235e+05"]


def test_stats_reject_unsupported_gaps():
    from hmmgpu.sw.api import SwParams

    with pytest.raises(HmmgpuError, match="not supported"):
        SwParams.resolve("BLOSUM62", 5, 5)
    with pytest.raises(HmmgpuError, match="unknown substitution matrix"):
        SwParams.resolve("BLOSUM99", 11, 1)
    assert SwParams.resolve("pam30", 9, 1).ka.lam == 0.294


def test_api_search_and_frame(proteome):
    import hmmgpu.sw as sw

    hits = sw.search([("a", text(proteome.codes(17))), text(proteome.codes(5))], proteome, backend="cpu",
                     max_hits=7, evalue=1.0, threads=1)
    assert [h.query_name for h in hits] == ["a", "query2"]
    h = hits[0]
    assert 1 <= len(h) <= 7 and (h.evalue <= 1.0).all() and (np.diff(h.score) <= 0).all()
    df = h.to_frame()
    assert list(df.columns[:12]) == ["qseqid", "sseqid", "pident", "length", "mismatch", "gapopen", "qstart", "qend",
                                     "sstart", "send", "evalue", "bitscore"]
    assert df["score"].tolist() == h.score.tolist()


def _run_cli(argv):
    from hmmgpu.sw.cli import add_parser, run

    parser = argparse.ArgumentParser(prog="hmmgpu")
    add_parser(parser.add_subparsers(dest="command"))
    return run(parser.parse_args(["sw", *argv])), None


def _cli(tmp_path, *argv):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "hmmgpu.sw", *argv], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)


def test_cli_report_and_tabular(tmp_path):
    q = tmp_path / "q.fa"
    q.write_text(">qq first query\nMKVLAAGIVGLLLAACSSEKKAEEAKPAAEQ\n")
    p = _cli(tmp_path, str(q), str(PROTEOME), "--backend", "cpu", "--max-hits", "3")
    assert p.returncode == 0, p.stderr
    assert "Query= qq" in p.stdout and "Sequences producing significant alignments" in p.stdout
    p = _cli(tmp_path, str(q), str(PROTEOME), "--backend", "cpu", "--outfmt", "6", "--matrix", "pam70",
             "--gapopen", "10", "--gapextend", "1")
    assert p.returncode == 0, p.stderr
    assert all(len(r.split("\t")) == 12 for r in p.stdout.splitlines())


@pytest.mark.parametrize("case,argv,fasta", [
    ("non-protein", [], ">a\nMKV1LA\n"),
    ("empty query", [], ">a\n\n>b\nMKV\n"),
    ("unknown matrix", ["--matrix", "BLOSUM99"], ">a\nMKV\n"),
    ("bad gaps", ["--gapopen", "4", "--gapextend", "4"], ">a\nMKV\n"),
    ("negative gap", ["--gapopen", "-1"], ">a\nMKV\n"),
    ("max hits", ["--max-hits", "0"], ">a\nMKV\n"),
    ("negative alignments", ["--alignments", "-1"], ">a\nMKV\n"),
    ("evalue", ["-E", "0"], ">a\nMKV\n"),
    ("missing db", ["--db-missing"], ">a\nMKV\n"),
])
def test_cli_bad_input_one_line(tmp_path, case, argv, fasta):
    q = tmp_path / "q.fa"
    q.write_text(fasta)
    db = str(PROTEOME)
    if argv == ["--db-missing"]:
        argv, db = [], str(tmp_path / "nope.fa")
    p = _cli(tmp_path, str(q), db, "--backend", "cpu", *argv)
    assert p.returncode == 1, (case, p.stdout, p.stderr)
    lines = [ln for ln in p.stderr.splitlines() if not ln.startswith("# hmmgpu")]
    assert len(lines) == 1 and lines[0].startswith("hmmgpu: error: "), p.stderr
    assert "Traceback" not in p.stderr


NEW_TWINS = ["max3relu16", "lo16s", "hi16s"]


def test_new_lane_twins_match_numpy():
    rng = np.random.default_rng(0)
    edge = np.array([0, 1, 0x7FFF, 0x8000, 0xFFFF, 0x7FFE, 0x8001], np.uint32)
    words = np.concatenate([(edge[:, None] | (edge[None, :] << 16)).ravel(),
                            rng.integers(0, 1 << 32, 500, dtype=np.uint64).astype(np.uint32)])
    a, b, c = (words[rng.integers(0, words.size, 2000)] for _ in range(3))
    s16 = lambda w: w.view(np.int16).reshape(-1, 2).astype(np.int64)  # noqa: E731
    pack = lambda x: np.ascontiguousarray(x.astype(np.int16)).view(np.uint32).ravel()  # noqa: E731
    got = np.array([lanes.py_max3relu16(x, y, z) for x, y, z in zip(a, b, c)], np.uint32)
    np.testing.assert_array_equal(got, pack(np.maximum(np.maximum(np.maximum(s16(a), s16(b)), s16(c)), 0)))
    lo = np.array([lanes.py_lo16s(x, y) for x, y in zip(a, b)], np.uint32)
    hi = np.array([lanes.py_hi16s(x, y) for x, y in zip(a, b)], np.uint32)
    np.testing.assert_array_equal(lo, (a & 0xFFFF) | ((b & 0xFFFF) << 16))
    np.testing.assert_array_equal(hi, (a >> 16) | (b & 0xFFFF0000))


def test_tile_shapes():
    from hmmgpu.gpu.runtime import tuning
    from hmmgpu.gpu.sw.launch import spec_for

    for L in (1, 48, 49, 144, 705, 750, 5478, 35000):
        s = spec_for(L)
        assert (s.Q // 2) % 2 == 1 and s.table_words * 4 <= tuning.STATIC_SHARED_MAX_BYTES + 8 * 1024
        if L <= 704:
            assert s.C >= L


def test_query_profile_layout():
    """A batch's profiles, one after the other in one buffer: every word as the kernel reads it
    (scores of query columns k*C + 2w and k*C + 2w + 1 against code x; padding columns and the
    padding row PAD_SCORE; the row's words after the tile's C/2 zero)."""
    from hmmgpu.gpu.sw import profiles
    from hmmgpu.gpu.sw.source import NROWS, PAD_ROW, PAD_SCORE, SwSpec, row_words
    from hmmgpu.sw.matrices import load

    m = load("BLOSUM62")
    rng = np.random.default_rng(1)
    queries = [rng.integers(0, 29, L).astype(np.uint8) for L in (100, 1, 48, 49, 300)]
    specs = [SwSpec(8, 6), SwSpec(8, 6), SwSpec(8, 6), SwSpec(16, 10), SwSpec(32, 14)]
    tiles, words = profiles.layout([q.size for q in queries], specs)
    assert tiles.tolist() == [3, 1, 1, 1, 1]
    out = np.full(int(words[-1]) + 3, 7, np.uint32)
    profiles.build(queries, m.by_code, specs, tiles, words, out)
    assert out[-3:].tolist() == [7, 7, 7]
    for q, spec, T, a, b in zip(queries, specs, tiles.tolist(), words[:-1], words[1:]):
        PW = row_words(spec.G, spec.Q)
        assert b - a == NROWS * T * PW
        w = out[a:b].reshape(NROWS, T, PW)
        assert not w[:, :, spec.C // 2:].any()
        half = w[:, :, :spec.C // 2].astype(np.int64)
        pairs = np.stack([half & 0xFFFF, half >> 16], axis=-1).reshape(NROWS, T * spec.C)
        pairs = np.where(pairs >= 32768, pairs - 65536, pairs)
        want = np.full((NROWS, T * spec.C), PAD_SCORE)
        want[:m.by_code.shape[0], :q.size] = np.asarray(m.by_code)[:, q]
        want[PAD_ROW] = PAD_SCORE
        assert np.array_equal(pairs, want)


def test_kernels_exact_under_simulator(tmp_path):
    run_simulated(ROOT / "tests" / "sw" / "sw_kernel_checks.py", "simulator_sw_checks", cache_dir=tmp_path,
                  extra_paths=[ROOT / "tests"])


def test_batched_kernels_exact_under_simulator(tmp_path):
    """The batched scan (batches over several streams, mixed lengths and tiles, saturated
    targets, a chunked database) and the search pipeline on it, under the simulator."""
    run_simulated(ROOT / "tests" / "sw" / "sw_kernel_checks.py", "batched_checks", "pipeline_checks",
                  cache_dir=tmp_path, extra_paths=[ROOT / "tests"])


def test_cli_output_is_whole_or_nothing(tmp_path):
    """``-o FILE`` is written as ``hmmgpu search`` writes its outputs: an error after the run
    began (a bad second query file record) leaves an existing FILE as it was and no temporary
    file; a run that succeeds replaces it whole, keeping its permissions."""
    out = tmp_path / "hits.txt"
    out.write_text("yesterday's hits\n")
    os.chmod(out, 0o640)
    bad = tmp_path / "bad.fa"
    bad.write_text(">a\nMKVLAAGIVG\n>b\nMKV1LA\n")
    p = _cli(tmp_path, "-o", str(out), str(bad), str(PROTEOME), "--backend", "cpu")
    assert p.returncode == 1 and p.stderr.splitlines()[-1].startswith("hmmgpu: error: "), p.stderr
    assert out.read_text() == "yesterday's hits\n"
    assert sorted(os.listdir(tmp_path)) == ["bad.fa", "hits.txt"]
    good = tmp_path / "good.fa"
    good.write_text(">qq\nMKVLAAGIVGLLLAACSSEKKAEEAKPAAEQ\n")
    p = _cli(tmp_path, "-o", str(out), "--outfmt", "6", str(good), str(PROTEOME), "--backend", "cpu")
    assert p.returncode == 0, p.stderr
    rows = out.read_text().splitlines()
    assert rows and all(row.startswith("qq\t") for row in rows)
    assert oct(os.stat(out).st_mode & 0o777) == oct(0o640)
    assert sorted(os.listdir(tmp_path)) == ["bad.fa", "good.fa", "hits.txt"]
    p = _cli(tmp_path, "-o", str(tmp_path / "missing" / "x.txt"), str(good), str(PROTEOME), "--backend", "cpu")
    assert p.returncode == 1 and "-o " in p.stderr and "cannot open for writing" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


def test_cli_refuses_a_negative_cpu_as_search_does(tmp_path):
    q = tmp_path / "q.fa"
    q.write_text(">a\nMKV\n")
    p = _cli(tmp_path, "--cpu", "-1", str(q), str(PROTEOME))
    assert p.returncode == 1 and p.stderr.strip() == "hmmgpu: error: --cpu must be >= 0 (got -1)", p.stderr
    from hmmgpu.sw.api import SwSearch

    with pytest.raises(ValueError, match="--cpu must be >= 0"):
        SwSearch(str(PROTEOME), threads=-2)


# ---------------------------------------------------------------- the batched search pipeline


def _naive_hits(scores, space, ka, evalue, k):
    """The selection as the search used to make it: positive scores with E-value <= evalue,
    best first (score, then database index), at most k."""
    cand = np.flatnonzero(scores > 0)
    cand = cand[ka.evalues(scores[cand], space) <= evalue]
    return cand[np.lexsort((cand, -scores[cand]))][:k]


def test_select_ties_and_thresholds():
    """The compiled selection over a batch: the same hits as sorting each whole row, with ties
    at the k-th score broken by database index whatever the column order (the GPU's columns
    are longest target first)."""
    from hmmgpu.sw.api import select

    rng = np.random.default_rng(4)
    for trial in range(40):
        b, n = int(rng.integers(1, 6)), int(rng.integers(0, 300))
        scores = rng.integers(0, 12 if trial % 2 else 400, (b, n)).astype(np.int32)
        positions = rng.permutation(n).astype(np.int64)
        thresholds = rng.integers(0, 14, b)
        for k in (1, 3, 50, n + 5):
            got = select(scores, positions, thresholds, k)
            for r in range(b):
                by_index = np.zeros(n, np.int64)
                by_index[positions] = scores[r]
                keep = np.flatnonzero(by_index >= thresholds[r])
                want = keep[np.lexsort((keep, -by_index[keep]))][:k]
                assert np.array_equal(got[r][0], want) and np.array_equal(got[r][1], by_index[want])


def test_min_score_is_the_evalue_filter():
    from hmmgpu.sw.api import SwParams, min_score

    rng = np.random.default_rng(8)
    for name, go, ge in (("BLOSUM62", 11, 1), ("PAM30", 9, 1), ("BLOSUM45", 13, 3)):
        ka = SwParams.resolve(name, go, ge).ka
        for _ in range(30):
            space = float(10 ** rng.uniform(1, 14))
            evalue = float(10 ** rng.uniform(-30, 4))
            s = np.arange(1, 2000)
            passing = s[ka.evalues(s, space) <= evalue]
            assert min_score(ka, space, evalue) == passing[0]
            assert (ka.evalues(np.arange(1, passing[0]), space) > evalue).all()


class _FakeScanner:
    """Scores computed beforehand (``rows``, one per query of ``queries``), served as the GPU
    scanner serves them: batches of rows over columns in another order, optionally failing at
    one batch."""

    backend = "cpu"
    description = "a fake scanner"

    def __init__(self, queries, rows, plan, fail_at=None, seed=0):
        self.rows = {q.tobytes(): row for (_, q), row in zip(queries, rows)}
        self.plan, self.fail_at = plan, fail_at
        self.positions = np.random.default_rng(seed).permutation(rows.shape[1]).astype(np.int64)
        self.closed = False
        self.order = []

    def batches(self, queries, plan=None):
        from hmmgpu.gpu.sw.batches import ScoreBatch

        assert len(queries) == self.plan[-1][1]
        self.order = [q.size for q in queries]
        for i, (lo, hi) in enumerate(self.plan):
            if i == self.fail_at:
                raise HmmgpuError("the fake scanner failed")
            rows = np.stack([self.rows[q.tobytes()] for q in queries[lo:hi]])
            yield ScoreBatch(start=lo, scores=rows[:, self.positions], positions=self.positions)

    def scores_many(self, queries):
        return [self.rows[q.tobytes()] for q in queries]

    def close(self):
        self.closed = True


@pytest.fixture(scope="module")
def proteome_scores(proteome):
    """pyopal's scores of 7 proteome queries (lengths 50-700) against the whole proteome."""
    from hmmgpu.sw.cpu import CpuScanner
    from hmmgpu.sw.matrices import load

    picks = [5, 17, 300, 901, 1500, 2001, 77]
    queries = [(f"q{i}", np.asarray(proteome.codes(i))) for i in picks]
    sc = CpuScanner(proteome, load("BLOSUM62"), 11, 1, threads=2)
    rows = np.stack(sc.scores_many([q for _, q in queries]))
    sc.close()
    return queries, rows


def test_pipeline_equals_the_per_query_search(proteome, proteome_scores):
    """Batches of mixed sizes, columns in another order, tracebacks in threads: every query's
    hits (order, scores, E-values, coordinates, counts) equal the naive per-query selection
    traced back one by one; the CPU route gives the same."""
    from hmmgpu.sw.api import SwSearch
    from hmmgpu.sw.traceback import align

    queries, rows = proteome_scores
    fake = _FakeScanner(queries, rows, [(0, 1), (1, 4), (4, 5), (5, 7)])
    with SwSearch(proteome, max_hits=25, evalue=5.0, scanner=fake, threads=3) as s:
        got = s.search(queries)
        assert fake.order == sorted(fake.order, reverse=True), "the longest queries are not scanned first"
        ka, by_code = s.params.ka, s.params.matrix.by_code
        for (name, q), row, h in zip(queries, rows, got):
            space = ka.search_space(q.size, proteome.total_residues, proteome.n)
            want = _naive_hits(row, space, ka, 5.0, 25)
            assert h.query_name == name and np.array_equal(h.target_index, want) and len(h) > 0
            assert np.array_equal(h.score, row[want]) and np.allclose(h.evalue, ka.evalues(row[want], space))
            for r, ti in enumerate(want.tolist()):
                t = proteome.codes(ti)
                a = align(q, t, by_code, 11, 1)
                assert (h.q_start[r], h.q_end[r], h.t_start[r], h.t_end[r]) == (a.q_start, a.q_end, a.t_start, a.t_end)
                assert np.array_equal(h.alignments[r].ops, a.ops)
                assert tuple(int(v[r]) for v in (h.length, h.identities, h.positives, h.mismatch, h.gapopen,
                                                  h.gaps)) == a.counts(q, t, by_code)
            one = s.hits(name, q, row)
            assert one.to_frame().equals(h.to_frame())
    assert fake.closed
    with SwSearch(proteome, max_hits=25, evalue=5.0, backend="cpu", threads=2) as s:
        for x, y in zip(s.search(queries[:3]), got[:3]):
            assert x.to_frame().equals(y.to_frame())


def test_pipeline_errors_and_early_stop(proteome, proteome_scores):
    """A scan that fails reaches the caller as its own error; a caller that stops early leaves
    the search usable (the scan thread stopped, its lock free); traced hits only where asked."""
    from hmmgpu.sw.api import SwSearch
    from hmmgpu.sw.output import format_report

    queries, rows = proteome_scores
    fake = _FakeScanner(queries, rows, [(0, 2), (2, 3), (3, 7)], fail_at=1)
    with SwSearch(proteome, max_hits=10, scanner=fake, threads=2) as s:
        it = s.iter_search(queries)
        assert next(it).query_name == "q5"  # in the first batch (the two longest queries)
        with pytest.raises(HmmgpuError, match="the fake scanner failed"):
            next(it)  # q17 comes in a later batch
    fake = _FakeScanner(queries, rows, [(0, 1), (1, 7)])
    with SwSearch(proteome, max_hits=10, scanner=fake, threads=2) as s:
        it = s.iter_search(queries)
        first = next(it)
        it.close()
        again = s.search(queries)
        assert again[0].to_frame().equals(first.to_frame()) and len(again) == len(queries)
    with SwSearch(proteome, max_hits=10, scanner=_FakeScanner(queries, rows, [(0, 7)]), threads=2, tracebacks=2) as s:
        short = s.search(queries)
    for full, part in zip(again, short):
        assert np.array_equal(full.score, part.score) and len(part.alignments) == min(2, len(full))
        assert (part.q_start[2:] == 0).all() and (part.length[2:] == 0).all()
        assert format_report(part, proteome, s.params, 2) == format_report(full, proteome, s.params, 2)


def test_cli_stats_lines(tmp_path):
    q = tmp_path / "q.fa"
    q.write_text(">qq first query\nMKVLAAGIVGLLLAACSSEKKAEEAKPAAEQ\n>q2\nMSTNPKPQRKTKRNTNRRPQDVKFPGG\n")
    p = _cli(tmp_path, str(q), str(PROTEOME), "--backend", "cpu", "--outfmt", "6", "--stats", "--max-hits", "5")
    assert p.returncode == 0, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("# hmmgpu sw: ")]
    assert len(lines) == 3, p.stderr
    assert lines[0].startswith("# hmmgpu sw: 2 queries (58 residues) x 2,100 targets") and "traced back" in lines[0]
    for step in ("wall", "reading", "database", "scan (pyopal)", "GCUPS", "selection", "tracebacks", "formatting",
                 "traceback passes loaded"):
        assert step in lines[1], (step, lines[1])
    if sys.platform.startswith("linux"):  # the process's start-up, from /proc
        assert re.search(r": start-up \d+\.\d\d s, reading", lines[1]), lines[1]
    arrived = re.search(r"scores arrived from (\S+) s to (\S+) s, the last hits were ready at (\S+) s$", lines[2])
    assert arrived, lines[2]
    first, last, hits = (float(v) for v in arrived.groups())
    wall = float(re.search(r"wall (\S+) s", lines[1]).group(1))
    assert 0 <= first <= last <= hits <= wall, lines
    p = _cli(tmp_path, str(q), str(PROTEOME), "--backend", "cpu", "--outfmt", "6", "--max-hits", "5")
    assert p.returncode == 0 and "# hmmgpu sw: " not in p.stderr


def test_cli_process_ends_at_once_after_its_output(tmp_path):
    """``hmmgpu sw`` from the process's own command line (``python -m hmmgpu``) ends the process
    as soon as its output is flushed (hmmgpu.host.end_process): the report arrives whole on a
    pipe, with the command's status; an error's status and line too. Called in the same
    process, ``main`` returns instead, the interpreter's switch interval as it was."""
    from hmmgpu.cli import main

    q = tmp_path / "q.fa"
    q.write_text(">qq\nMKVLAAGIVGLLLAACSSEKKAEEAKPAAEQ\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-m", "hmmgpu", "sw", "--backend", "cpu", "--max-hits", "3", str(q),
                        str(PROTEOME)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("Query= qq") and p.stdout.splitlines()[-1].startswith("[ok] 1 query in "), p.stdout
    p = subprocess.run([sys.executable, "-m", "hmmgpu", "sw", "--backend", "cpu", "--matrix", "BLOSUM99", str(q),
                        str(PROTEOME)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert p.returncode == 1 and p.stderr.startswith("hmmgpu: error: unknown substitution matrix"), p.stderr
    interval = sys.getswitchinterval()
    assert main(["sw", "--backend", "cpu", "--outfmt", "6", "--max-hits", "3", "-o", str(tmp_path / "hits.tsv"),
                 str(q), str(PROTEOME)]) == 0
    assert sys.getswitchinterval() == interval
    assert (tmp_path / "hits.tsv").read_text().startswith("qq\t")
