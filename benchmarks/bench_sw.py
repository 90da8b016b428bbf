"""sw: the Smith-Waterman search (hmmgpu sw, GPU) against CUDASW++4 and pyopal.

The 20 classic CUDASW++ queries (from CUDASW++4's archive) against the real proteins and a
random database (``workloads.json``'s ``sw``; ``--smoke`` for a quick run), BLOSUM62, gap costs
11/1 in BLAST's meaning. CUDASW++4 (``--cudasw``: a folder with CUDASW4-*.tar.gz and build.sh,
../shared/tools/cudasw4, or .bench/cudasw4 on the GPU machine) is built here from its source.
hmmgpu's GCUPS count the whole scan per query (profile upload, launches, the copy of the
scores back, rescoring; kernels compiled in a warm-up first); CUDASW++4's are its own "Scan
time" numbers; pyopal's, 16 threads, on a random subsample of the database. Checks: every
sampled score equals pyopal's; CUDASW++4's top 10 equal hmmgpu's at the gap costs it really
uses (its ``align`` ignores --gop/--gex and scores BLAST's 10/1). Writes
``sw_<device>_<date>.json`` and ``.png``; ``--table FILE`` prints the docs' table of a result.

``--e2e`` (GPU) times whole ``hmmgpu sw`` commands against CUDASW++4's ``align``, wall time of
each process, both on databases made beforehand, top 10 per query: the 20 classic queries
(hmmgpu from empty kernel and numba caches first: the cold start; then warm, median of
``--repeats``) and ``--e2e-queries`` real proteins drawn from the database (default 2,000).
Both score with BLAST's gap costs 10/1 (what CUDASW++4's ``align`` really uses; checked
against pyopal on a few of its pairs), and every query's top-10 scores are compared. Writes
``sw_e2e_<device>_<date>.json`` with exactly the keys the issue names and
``sw_e2e_<device>_<date>.txt`` with the details (every run's time, hmmgpu's ``--stats`` lines,
the lists that differ).

``--host`` (no GPU) times the host's steps of a search on this machine's CPU, as the GPU
route runs them: the query profiles of the 20 classic queries and of ``--e2e-queries``
proteins (default 2,000) drawn from the database, the selection of the top 10 from batches
of real score rows, and the tracebacks of the real top-10 hits of the 20 classic queries and
of every 20th of the proteins (their scores from pyopal on ``--threads`` threads; gap costs
10/1 as ``--e2e``), each group of hits as the pipeline's pool runs it, on one thread (CPU
time) and on ``--threads``. Writes ``sw_host_<device>_<date>.json``.

``--sass`` (no GPU; ptxas, and nvdisasm for the loop counts) profiles the cell loop of every
shape of ``tuning.SW_SHAPES`` (``sw_sass_<date>.json``). ``--shape-sweep`` (GPU) times every
shape (G, Q) on random targets, one tile and three: the data of ``tuning.SW_SHAPE_GCUPS``
(``sw_shapes_<device>_<date>.json``).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

from common import ROOT, WORKLOADS, header, resolve, result_path, save, say, today

#: The gap costs of every tool here, with BLAST's meaning (a gap of length k costs open + k x extend).
GAP_OPEN, GAP_EXTEND = 11, 1
#: The gap costs CUDASW++4 (37a394c) actually scores with, in BLAST's meaning: its ``align``
#: parses --gop/--gex but never hands them to the aligner (main.cu does not call
#: setGapOpenScore/setGapExtendScore), whose built-in -11/-1 charge gop + (k - 1) x gex for a
#: gap of k, i.e. 10 + k: BLAST's open 10 / extend 1. Its scores are checked against hmmgpu's
#: with those costs (the same work per cell as 11/1, so GCUPS compare either way).
CUDASW4_GAP_OPEN = 10


def add_arguments(ap) -> None:
    default = ROOT / ".bench" / "cudasw4"
    ap.add_argument("--cudasw", type=Path, default=default if default.exists() else ROOT.parent / "shared" / "tools" /
                    "cudasw4", help="folder with CUDASW4-*.tar.gz and build.sh")
    ap.add_argument("--smoke", action="store_true", help="workloads.json's sw smoke: 3 queries, 5,000 x 256 random")
    ap.add_argument("--queries", type=int, help="the first N of the 20 classic queries")
    ap.add_argument("--random-n", type=int, help="random database: sequences (0: none)")
    ap.add_argument("--random-len", type=int, help="random database: length of each")
    ap.add_argument("--pyopal-targets", type=int, help="targets of pyopal's subsample")
    ap.add_argument("--no-real", action="store_true", help="only the random database")
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--table", type=Path, help="print the markdown table of a result file and exit")
    ap.add_argument("--sass", nargs="*", metavar="G,Q", help="profile the cell loop (no GPU): these shapes, or all")
    ap.add_argument("--sass-dir", help="with --sass: write each shape's loop SASS here")
    ap.add_argument("--shape-sweep", action="store_true", help="time every kernel shape on random targets (GPU)")
    ap.add_argument("--e2e", action="store_true", help="whole commands against CUDASW++4's align, cold and warm (GPU)")
    ap.add_argument("--e2e-queries", type=int, default=2000,
                    help="with --e2e: real proteins as queries (0: none); with --host: proteins profiled")
    ap.add_argument("--host", action="store_true", help="the host's steps of a search on the CPU (no GPU)")
    ap.add_argument("--repeats", type=int, default=3, help="with --e2e: warm runs of the 20 queries (median)")
    ap.add_argument("--streams", type=int, nargs="*", default=[1, 2],
                    help="streams of the batched scan timed besides the per-query one (default 1 and 2)")


def _scanner(db, gap_open: int, gap_extend: int, device: int, **kw):
    """A GPU scanner as ``hmmgpu sw`` makes it: saturated targets rescored on the CPU."""
    from hmmgpu.gpu.sw.launch import GpuScanner
    from hmmgpu.sw.cpu import rescorer
    from hmmgpu.sw.matrices import load

    matrix = load("BLOSUM62")
    return GpuScanner(db, matrix, gap_open, gap_extend, device=device,
                      rescore=rescorer(db, matrix, gap_open, gap_extend), **kw)


def build_cudasw(src: Path, work: Path) -> Path:
    """Build CUDASW++4 with its build.sh; returns the folder with align and makedb."""
    p = subprocess.run(["bash", str(src / "build.sh"), str(work)], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"CUDASW++4 build failed: {p.stdout[-2000:]} {p.stderr[-2000:]}")
    return work / "CUDASW4"


def queries_from_tarball(src: Path, work: Path) -> Path:
    tar = next(src.glob("CUDASW4-*.tar.gz"))
    subprocess.run(["tar", "-xzf", str(tar), "-C", str(work), "--wildcards", "*/allqueries.fasta"], check=True)
    return next(work.glob("*/allqueries.fasta"))


def random_fasta(path: Path, n: int, length: int, seed: int = 1) -> None:
    """n random proteins of one length, residues drawn from BLOSUM62's background frequencies."""
    freqs = np.array([0.074, 0.052, 0.045, 0.054, 0.025, 0.034, 0.054, 0.074, 0.026, 0.068, 0.099, 0.058, 0.025,
                      0.047, 0.039, 0.057, 0.051, 0.013, 0.032, 0.073])
    letters = np.frombuffer(b"ARNDCQEGHILKMFPSTWYV", np.uint8)
    rng = np.random.default_rng(seed)
    with open(path, "wb") as fh:
        for start in range(0, n, 10000):
            k = min(10000, n - start)
            res = letters[rng.choice(20, size=(k, length), p=freqs / freqs.sum())]
            fh.write(b"".join(b">r%d\n" % (start + i) + res[i].tobytes() + b"\n" for i in range(k)))


def run_cudasw(bin_dir: Path, fasta: Path, queries: Path, work: Path) -> dict:
    dbdir = work / ("cdb_" + fasta.stem)
    dbdir.mkdir(exist_ok=True)
    p = subprocess.run([str(bin_dir / "makedb"), str(fasta), str(dbdir / "db")], capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(f"CUDASW++4 makedb failed: {p.stderr[-1500:]}")
    tsv = work / ("cudasw_" + fasta.stem + ".tsv")
    # its gap costs are fixed (see CUDASW4_GAP_OPEN); the matrix is its BLOSUM62 of 20 letters,
    # which scores every other letter (X, B, Z, U, ...) -4
    p = subprocess.run([str(bin_dir / "align"), "--query", str(queries), "--db", str(dbdir / "db"), "--dpx", "--top", "10",
                        "--verbose", "--tsv", "--of", str(tsv)], capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(f"CUDASW++4 align failed: {p.stdout[-1500:]} {p.stderr[-1500:]}")
    per = [dict(query=int(m.group(1)), seconds=float(m.group(2)), gcups=float(m.group(3)))
           for m in re.finditer(r"Processing query (\d+) \.\.\. Done\. Scan time: ([\d.eE+-]+) s, ([\d.eE+-]+) GCUPS", p.stdout)]
    tot = re.search(r"Total time: ([\d.eE+-]+) s, ([\d.eE+-]+) GCUPS", p.stdout)
    top = {}
    for line in tsv.read_text().splitlines()[1:]:
        f = line.split("\t")
        top.setdefault(int(f[0]), []).append(int(f[4]))
    return dict(per_query=per, total_seconds=float(tot.group(1)) if tot else None,
                overall_gcups=float(tot.group(2)) if tot else None, top_scores=top)


def run_hmmgpu(db, queries, device: int, streams=(1, 2)) -> tuple:
    t = time.perf_counter()
    sc = _scanner(db, GAP_OPEN, GAP_EXTEND, device)
    upload = time.perf_counter() - t
    t = time.perf_counter()
    sc.scores_many([q[:1] for q in queries] + [q for q in queries])  # warm-up: compiles every shape used
    warm = time.perf_counter() - t
    per, scores = [], []
    n_res = db.total_residues
    for i, q in enumerate(queries):
        t = time.perf_counter()
        s = sc.scores_many([q])[0]
        dt = time.perf_counter() - t
        per.append(dict(query=i, length=int(q.size), seconds=dt, gcups=q.size * n_res / dt / 1e9,
                        kernel_gcups=q.size * n_res / max(sc.last["kernel_ms"], 1e-9) * 1e-6,
                        saturated=sc.last["saturated"], kernel=sc.last["specs"][0]))
        scores.append(s)
    tot = sum(r["seconds"] for r in per)
    cells = sum(q.size for q in queries) * n_res
    sc.close()
    batched = {}
    for n in streams:  # every query in one call: batches, several streams, one wait per batch
        b = _scanner(db, GAP_OPEN, GAP_EXTEND, device, streams=n)
        b.scores_many(queries[:1])
        t = time.perf_counter()
        got = b.scores_many(queries)
        dt = time.perf_counter() - t
        batched[str(n)] = dict(seconds=round(dt, 4), gcups=round(cells / dt / 1e9, 1),
                               gpu_busy_ms=round(b.last["kernel_ms"], 2), equal=all(np.array_equal(x, y)
                                                                                  for x, y in zip(got, scores)))
        b.close()
    return dict(per_query=per, total_seconds=tot, overall_gcups=cells / tot / 1e9, upload_seconds=upload,
                warmup_seconds=warm, device=sc.description, batched_by_streams=batched), scores


def _gpu_scores(db, queries, device: int, gap_open: int, gap_extend: int) -> list:
    sc = _scanner(db, gap_open, gap_extend, device)
    try:
        return sc.scores_many(list(queries))
    finally:
        sc.close()


def run_pyopal(db, queries, n_targets: int, threads: int, seed: int = 7) -> tuple:
    from hmmgpu.sw.cpu import CpuScanner
    from hmmgpu.sw.matrices import load

    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(db.n, size=min(n_targets, db.n), replace=False))
    sub = _subset(db, idx)
    sc = CpuScanner(sub, load("BLOSUM62"), GAP_OPEN, GAP_EXTEND, threads=threads)
    per, scores = [], []
    for i, q in enumerate(queries):
        t = time.perf_counter()
        s = sc.scores(q)
        dt = time.perf_counter() - t
        per.append(dict(query=i, seconds=dt, gcups=q.size * sub.total_residues / dt / 1e9))
        scores.append(s)
    sc.close()
    cells = sum(q.size for q in queries) * sub.total_residues
    tot = sum(r["seconds"] for r in per)
    return dict(per_query=per, overall_gcups=cells / tot / 1e9, targets=int(idx.size), threads=threads), idx, scores


def _subset(db, idx):
    from hmmgpu.formats.seqdb import SequenceDB

    lens = np.asarray(db.lengths)[idx]
    res = np.concatenate([db.codes(int(i)) for i in idx]) if idx.size else np.zeros(0, np.uint8)
    names = [db.name(int(i)) for i in idx]
    blob = np.frombuffer(b"".join(names), np.uint8).copy()
    noff = np.zeros(len(names) + 1, np.int64)
    np.cumsum([len(x) for x in names], out=noff[1:])
    return SequenceDB(res, lens.astype(np.int64), blob, noff, np.zeros(0, np.uint8), np.zeros(len(names) + 1, np.int64),
                      source="<subset>")


def bench_database(name, fasta, queries_path, args, res, out: Path, cudasw_bin, work):
    from hmmgpu.formats.seqdb import SequenceDB
    from hmmgpu.sw.api import _read_queries

    entry = res["databases"].setdefault(name, {})
    db = SequenceDB.from_fasta(fasta)
    qs = _read_queries(queries_path)[: args.queries]
    queries = [c for _, c in qs]
    entry.update(fasta=str(fasta), sequences=db.n, residues=db.total_residues,
                 queries=[dict(name=n, length=int(c.size)) for n, c in qs])
    save(res, out)
    for step in ("hmmgpu", "pyopal", "cudasw4"):
        try:
            say(f"[{name}] {step} ...")
            if step == "hmmgpu":
                entry["hmmgpu"], gpu_scores = run_hmmgpu(db, queries, args.device, args.streams)
            elif step == "pyopal":
                entry["pyopal"], idx, cpu_scores = run_pyopal(db, queries, args.pyopal_targets, args.threads)
                bad = sum(int((g[idx] != c).sum()) for g, c in zip(gpu_scores, cpu_scores))
                entry["check_pyopal"] = dict(targets=int(idx.size) * len(queries), mismatches=bad)
            elif cudasw_bin is not None:
                entry["cudasw4"] = run_cudasw(cudasw_bin, Path(fasta), Path(queries_path) if args.queries >= 20 else
                                              _first_queries(queries_path, args.queries, work), work)
                top = entry["cudasw4"].pop("top_scores")
                same_costs = _gpu_scores(db, queries, args.device, CUDASW4_GAP_OPEN, GAP_EXTEND)
                ours = [sorted(map(int, g), reverse=True)[:len(top.get(i, []))] for i, g in enumerate(same_costs)]
                bad = [i for i, o in enumerate(ours) if o != top.get(i, [])]
                # hmmgpu uses NCBI's full BLOSUM62 (X -1, B and Z their own rows), CUDASW++4 -4 for every
                # letter outside the 20: a top hit with such letters may differ; the lists show it
                entry["check_cudasw4_top10"] = dict(queries=len(top), gap_costs=f"open {CUDASW4_GAP_OPEN} extend {GAP_EXTEND}",
                                                    mismatching_queries=bad,
                                                    examples={i: dict(hmmgpu=ours[i], cudasw4=top.get(i, []))
                                                              for i in bad[:3]})
        except Exception as exc:  # noqa: BLE001 - recorded in the JSON, the run goes on
            entry[step + "_error"] = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            say(f"[{name}] {step} FAILED: {entry[step + '_error']}")
            if step == "hmmgpu":
                break
        save(res, out)


def _first_queries(path, n, work):
    text = Path(path).read_text().split(">")[1:n + 1]
    p = work / f"queries_{n}.fasta"
    p.write_text("".join(">" + t for t in text))
    return p


def table(res) -> str:
    """The README's markdown table from a result dict."""
    rows = ["| database | hmmgpu sw GCUPS | CUDASW++4 GCUPS | pyopal 16 threads GCUPS | hmmgpu / CUDASW++4 | "
            "hmmgpu / pyopal | exact (pyopal subsample, CUDASW++4 top 10) |", "|---|---|---|---|---|---|---|"]
    for name, e in res.get("databases", {}).items():
        h = e.get("hmmgpu", {}).get("overall_gcups")
        c = e.get("cudasw4", {}).get("overall_gcups")
        p = e.get("pyopal", {}).get("overall_gcups")
        f = lambda v: f"{v:,.0f}" if v else "n/a"  # noqa: E731
        ratio = lambda a, b: f"{a / b:.2f}x" if a and b else "n/a"  # noqa: E731
        ck = e.get("check_pyopal", {})
        cc = e.get("check_cudasw4_top10", {})
        exact = (f"{ck.get('mismatches', 'n/a')} mismatches of {ck.get('targets', 'n/a')}; "
                 f"{len(cc.get('mismatching_queries', [])) if cc else 'n/a'} queries differ")
        rows.append(f"| {name} ({e.get('sequences', 0):,} seqs, {e.get('residues', 0):,} res) | {f(h)} | {f(c)} | "
                    f"{f(p)} | {ratio(h, c)} | {ratio(h, p)} | {exact} |")
    return "\n".join(rows)


def plot(res, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dbs = list(res["databases"].items())
    fig, axes = plt.subplots(1, len(dbs), figsize=(7 * len(dbs), 4.5), squeeze=False)
    for ax, (name, e) in zip(axes[0], dbs):
        lens = [q["length"] for q in e.get("queries", [])]
        for key, label in (("hmmgpu", "hmmgpu sw"), ("cudasw4", "CUDASW++4"), ("pyopal", "pyopal (16 threads)")):
            per = e.get(key, {}).get("per_query", [])
            if per:
                ax.plot(lens[:len(per)], [r["gcups"] for r in per], "o-", label=label)
        ax.set(xscale="log", yscale="log", xlabel="query length", ylabel="GCUPS", title=name)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def shape_sweep(args) -> int:
    """Kernel time of every shape (G, Q) on random targets, the first C and 3 C residues of the
    longest classic query (C = G x Q columns: one tile and three), best of three; GCUPS over the
    padded columns. A further tile's cost is the difference of the two."""
    from hmmgpu.formats.seqdb import SequenceDB
    from hmmgpu.gpu.runtime import build
    from hmmgpu.gpu.runtime.device import GpuDevice
    from hmmgpu.gpu.sw.source import SwSpec
    from hmmgpu.sw.api import _read_queries

    w = WORKLOADS["sw"]["shape_sweep"]
    shapes = [(G, Q) for G in w["G"] for Q in w["Q"]]
    dev = GpuDevice.open(args.device)
    t = time.perf_counter()
    build.compile_ahead([SwSpec(*s) for s in shapes], dev, processes=16)
    say(f"compiled in {time.perf_counter() - t:.1f} s")
    path = result_path(Path(args.out), "sw_shapes")
    result = header("sw --shape-sweep")
    result.update(device_description=dev.description, rows=[])
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        long_q = max((c for _, c in _read_queries(queries_from_tarball(args.cudasw, work))), key=len)
        rnd = work / "random.fasta"
        random_fasta(rnd, w["targets"], w["length"])
        db = SequenceDB.from_fasta(rnd)
    result["residues"] = int(db.total_residues)
    for G, Q in shapes:
        C = G * Q
        sc = _scanner(db, GAP_OPEN, GAP_EXTEND, args.device, shape=(G, Q))
        row = dict(G=G, Q=Q, C=C)
        for tiles in w["tiles"]:
            q = long_q[:tiles * C]
            sc.scores_many([q])
            ms = []
            for _ in range(3):
                sc.scores_many([q])
                ms.append(sc.last["kernel_ms"])
            row[f"t{tiles}_ms"] = round(min(ms), 3)
            row[f"gcups{tiles}"] = round(tiles * C * db.total_residues / (min(ms) / 1e3) / 1e9, 1)
        sc.close()
        result["rows"].append(row)
        save(result, path)
        say(row)
    say(f"wrote {path}")
    return 0


def sass(args) -> int:
    import ptx

    ptx.fake_device()
    from hmmgpu.gpu.runtime import tuning
    from hmmgpu.gpu.sw.source import SwSpec

    shapes = [tuple(int(v) for v in s.split(",")) for s in args.sass] or list(tuning.SW_SHAPES)
    result = header("sw --sass")
    result.update(device="ptxas_sm90", hardware=ptx.H200, shapes=[])
    path = Path(args.out) / f"sw_sass_{today()}.json"
    with tempfile.TemporaryDirectory() as d:
        for G, Q in shapes:
            r = ptx.sw_report(SwSpec(G, Q), d)
            say(ptx.sw_line(r))
            for k, lp in r.get("loop", {}).items():
                if lp and args.sass_dir:
                    Path(args.sass_dir).mkdir(parents=True, exist_ok=True)
                    (Path(args.sass_dir) / f"{r['kernel']}.{k}.loop.sass").write_text(lp["sass"] + "\n")
                lp.pop("sass", None)
            result["shapes"].append(r)
            save(result, path)
    say(f"wrote {path}")
    return 0


# ---------------------------------------------------------------- whole commands (--e2e)

#: The e2e JSON's keys, exactly (issue 34).
E2E_KEYS = ("device", "date", "commit", "queries", "residues", "hmmgpu_s", "cudasw4_s", "hmmgpu_cold_s",
            "hmmgpu_2000_s", "cudasw4_2000_s", "top10_equal", "top10_total", "command")


def _hmmgpu_sw(queries: Path, db: Path, out: Path) -> list:
    return [sys.executable, "-m", "hmmgpu", "sw", "--outfmt", "6", "--max-hits", "10", "-E", "1e30", "--gapopen",
            str(CUDASW4_GAP_OPEN), "--gapextend", str(GAP_EXTEND), "--stats", "-o", str(out), str(queries), str(db)]


def _cudasw_align(bin_dir: Path, queries: Path, db: Path, out: Path) -> list:
    return [str(bin_dir / "align"), "--query", str(queries), "--db", str(db), "--top", "10", "--dpx", "--tsv",
            "--of", str(out)]


def _cudasw_top(tsv: Path) -> dict:
    """CUDASW++4's top scores per query (0-based), with the first word of each target's header."""
    top = {}
    for line in tsv.read_text().splitlines()[1:]:
        f = line.split("\t")
        top.setdefault(int(f[0]), []).append((int(f[4]), f[6].split()[0] if f[6].split() else ""))
    return top


def _hmmgpu_top(db, queries_fasta: Path, device: int) -> list:
    """hmmgpu's top-10 raw scores of every query (the API, as the command makes them; the
    tabular output has bit scores only)."""
    from hmmgpu.sw.api import SwSearch

    with SwSearch(db, gap_open=CUDASW4_GAP_OPEN, gap_extend=GAP_EXTEND, max_hits=10, evalue=1e30, backend="cuda",
                  device=device, tracebacks=0) as s:
        return [[(int(v), n) for v, n in zip(h.score.tolist(), h.target_name.tolist())]
                for h in s.iter_search(str(queries_fasta))]


def _sample_proteins(db, n: int, path: Path, seed: int = 2000) -> Path:
    from hmmgpu.constants import AMINO_SYMBOLS

    idx = np.sort(np.random.default_rng(seed).choice(np.flatnonzero(np.asarray(db.lengths) > 0), n, replace=False))
    letters = np.frombuffer(AMINO_SYMBOLS.encode(), np.uint8)
    with open(path, "wb") as fh:
        for i in idx.tolist():
            fh.write(b">" + db.name(i) + b"\n" + letters[np.asarray(db.codes(i))].tobytes() + b"\n")
    return path


def e2e(args) -> int:
    """Whole ``hmmgpu sw`` commands against CUDASW++4's ``align`` (see the module text)."""
    from common import median_run, timed

    from hmmgpu.formats.seqdb import open_database

    w = WORKLOADS["sw"]["default"]
    real = resolve(w["real"])
    path = result_path(Path(args.out), "sw_e2e")
    log_path = path.with_suffix(".txt")
    log = []

    def note(*parts):
        line = " ".join(str(p) for p in parts)
        log.append(line)
        say(line)
        log_path.write_text("\n".join(log) + "\n")

    head = header("sw --e2e")
    result = dict.fromkeys(E2E_KEYS)
    result.update(device=head["device"], date=today(), commit=head["commit"], queries=20)
    work = Path(tempfile.mkdtemp(prefix="hmmgpu-sw-e2e-"))
    env = dict(os.environ, HMMGPU_CACHE_DIR=str(work / "cache"), NUMBA_CACHE_DIR=str(work / "numba"))
    os.environ["HMMGPU_CACHE_DIR"] = env["HMMGPU_CACHE_DIR"]  # this process's own scans use the same kernels
    note(f"# hmmgpu sw --e2e on {head['device']}, commit {head['commit']}, {head['cores']} cores; work {work}")
    bin_dir = build_cudasw(args.cudasw, work / "build")
    q20 = queries_from_tarball(args.cudasw, work)
    hdb, cdb = work / "hdb", work / "cdb"
    timed([sys.executable, "-m", "hmmgpu", "makedb", str(real), str(hdb)])
    cdb.mkdir()
    timed([str(bin_dir / "makedb"), str(real), str(cdb / "db")])
    db = open_database(hdb)
    result["residues"] = int(db.total_residues)
    qn = _sample_proteins(db, args.e2e_queries, work / f"proteins{args.e2e_queries}.fa") if args.e2e_queries else None
    cmd20 = _hmmgpu_sw(q20, hdb, work / "h20.tsv")
    result["command"] = (f"python3 benchmarks/run.py sw --e2e; hmmgpu: {' '.join(cmd20[1:])}; CUDASW++4: "
                         + " ".join(_cudasw_align(bin_dir, q20, cdb / "db", work / "c20.tsv")))
    save(result, path)
    # cold: empty kernel and numba caches (a fresh machine), then the same caches warm
    cold = timed(cmd20, env)
    result["hmmgpu_cold_s"] = cold["seconds"]
    note("hmmgpu cold, 20 queries:", cold["seconds"], "s;", *[f"\n  {x}" for x in cold["stats"]])
    warm = median_run(cmd20, args.repeats, env)
    result["hmmgpu_s"] = warm["seconds"]
    note("hmmgpu warm, 20 queries:", warm.get("all_seconds", warm["seconds"]), "s; median run:",
         *[f"\n  {x}" for x in warm["stats"]])
    cud = median_run(_cudasw_align(bin_dir, q20, cdb / "db", work / "c20.tsv"), args.repeats, env)
    result["cudasw4_s"] = cud["seconds"]
    note("CUDASW++4 align, 20 queries:", cud.get("all_seconds", cud["seconds"]), "s")
    save(result, path)
    tops = [(q20, work / "c20.tsv")]
    if qn is not None:
        from hmmgpu.gpu.runtime.device import GpuDevice
        from hmmgpu.gpu.sw.launch import compile_for
        from hmmgpu.sw.api import _read_queries

        extra = compile_for([c.size for _, c in _read_queries(qn)], GpuDevice.open(args.device))
        note(f"{extra} more kernels compiled for the {args.e2e_queries} proteins (not timed)")
        big = timed(_hmmgpu_sw(qn, hdb, work / "hN.tsv"), env)
        result["hmmgpu_2000_s"] = big["seconds"]
        note(f"hmmgpu warm, {args.e2e_queries} queries:", big["seconds"], "s;", *[f"\n  {x}" for x in big["stats"]])
        cbig = timed(_cudasw_align(bin_dir, qn, cdb / "db", work / "cN.tsv"), env)
        result["cudasw4_2000_s"] = cbig["seconds"]
        note(f"CUDASW++4 align, {args.e2e_queries} queries:", cbig["seconds"], "s")
        tops.append((qn, work / "cN.tsv"))
        save(result, path)
    # the comparison: CUDASW++4's gap costs on a few of its pairs, then every query's top 10
    from hmmgpu.sw.api import _read_queries
    from hmmgpu.sw.cpu import pair_scores
    from hmmgpu.sw.matrices import load

    names = {db.name(i).decode(errors="replace"): i for i in range(db.n)}
    c20 = _cudasw_top(work / "c20.tsv")
    q20codes = _read_queries(q20)
    for qi in range(min(5, len(q20codes))):
        score, name = c20.get(qi, [(None, "")])[0]
        if name in names:
            t = db.codes(names[name])
            got = {f"{o}/{e}": int(pair_scores(q20codes[qi][1], [t], load("BLOSUM62"), o, e)[0]) for o, e in ((10, 1),
                                                                                                             (11, 1))}
            note(f"gap costs: query {qi} x {name}: CUDASW++4 {score}, pyopal (BLAST's open/extend) {got}")
    equal = total = 0
    for queries_fasta, tsv in tops:
        theirs = _cudasw_top(tsv)
        ours = _hmmgpu_top(db, queries_fasta, args.device)
        for qi, hits in enumerate(ours):
            a = sorted((v for v, _ in hits), reverse=True)
            b = sorted((v for v, _ in theirs.get(qi, [])), reverse=True)
            total += 1
            if a == b:
                equal += 1
            else:
                note(f"top 10 differ, {queries_fasta.name} query {qi}: hmmgpu {hits} CUDASW++4 {theirs.get(qi, [])}")
    result.update(top10_equal=equal, top10_total=total)
    note(f"top-10 score lists equal for {equal} of {total} queries")
    save(result, path)
    assert tuple(result) == E2E_KEYS
    say(json.dumps(result, indent=1))
    return 0


# ---------------------------------------------------------------- the host's steps (--host)


def _best_cpu(fn, repeats: int = 3) -> float:
    """The least CPU time (seconds, this thread) of ``repeats`` calls of ``fn``."""
    best = float("inf")
    for _ in range(repeats):
        t = time.thread_time()
        fn()
        best = min(best, time.thread_time() - t)
    return best


def _host_profiles(queries) -> dict:
    from hmmgpu.gpu.sw import profiles
    from hmmgpu.gpu.sw.launch import spec_for
    from hmmgpu.sw.matrices import load

    by_code = load("BLOSUM62").by_code
    specs = [spec_for(q.size) for q in queries]
    tiles, words = profiles.layout([q.size for q in queries], specs)
    out = np.zeros(int(words[-1]), np.uint32)
    cpu = _best_cpu(lambda: profiles.build(queries, by_code, specs, tiles, words, out))
    return dict(queries=len(queries), words=int(words[-1]), cpu_seconds=round(cpu, 4),
                us_per_query=round(cpu / max(len(queries), 1) * 1e6, 1))


def _host_hits(db, queries, threads: int) -> list:
    """(query, database indices, scores) of each query's top 10 (pyopal, gap costs 10/1), and one
    batch of score rows (the first 16 queries') for the selection."""
    from hmmgpu.sw.api import select
    from hmmgpu.sw.cpu import CpuScanner
    from hmmgpu.sw.matrices import load

    scanner = CpuScanner(db, load("BLOSUM62"), CUDASW4_GAP_OPEN, GAP_EXTEND, threads=threads)
    out, rows = [], []
    for q in queries:
        row = scanner.scores(q)
        if len(rows) < 16:
            rows.append(row)
        (idx, sc), = select(row[None, :], np.arange(db.n, dtype=np.int64), [1], 10)
        out.append((q, idx, sc))
    scanner.close()
    return out, np.array(rows)


def _host_tracebacks(db, hits, threads: int) -> dict:
    """The hits' tracebacks as the pipeline's pool runs them (SwSearch._submit's groups)."""
    from concurrent.futures import ThreadPoolExecutor

    from hmmgpu.sw.api import TRACEBACK_TASK_CELLS, SwSearch
    from hmmgpu.sw.traceback import query_profile

    class NoScanner:
        description, backend = "none", "cpu"

        def close(self):
            pass

    s = SwSearch(db, gap_open=CUDASW4_GAP_OPEN, gap_extend=GAP_EXTEND, scanner=NoScanner(), threads=threads)
    tasks, cells = [], 0
    for q, idx, sc in hits:
        q = np.require(q, np.uint8, ["C", "W"])
        profile, group, acc = query_profile(q, s.params.matrix.by_code), [], 0
        for ti, v in zip(idx.tolist(), sc.tolist()):
            group.append((ti, v))
            acc += q.size * int(db.lengths[ti])
            cells += q.size * int(db.lengths[ti])
            if acc >= TRACEBACK_TASK_CELLS:
                tasks.append((q, profile, group))
                group, acc = [], 0
        if group:
            tasks.append((q, profile, group))
    s._trace(*tasks[0])  # the compiled passes loaded
    cpu = _best_cpu(lambda: [s._trace(*task) for task in tasks], 1)
    with ThreadPoolExecutor(threads) as pool:
        t = time.perf_counter()
        list(pool.map(lambda task: s._trace(*task), tasks))
        wall = time.perf_counter() - t
    s.close()
    n = sum(len(g) for _, _, g in tasks)
    return dict(hits=n, tasks=len(tasks), cells=cells, cpu_seconds_1_thread=round(cpu, 3),
                ms_per_hit=round(cpu / n * 1e3, 3), ns_per_cell=round(cpu / cells * 1e9, 2),
                wall_seconds_threads=round(wall, 3), threads=threads)


def host(args) -> int:
    """The host's steps of a search on the CPU (see the module text)."""
    from hmmgpu.formats.seqdb import open_database
    from hmmgpu.sw.api import _read_queries, select

    res = header("sw --host")
    path = result_path(Path(args.out), "sw_host")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        subprocess.run([sys.executable, "-m", "hmmgpu", "makedb", str(resolve(WORKLOADS["sw"]["default"]["real"])),
                        str(work / "hdb")], check=True, capture_output=True)
        db = open_database(work / "hdb")
        q20 = [q for _, q in _read_queries(queries_from_tarball(args.cudasw, work))]
        qn = [q for _, q in _read_queries(_sample_proteins(db, args.e2e_queries, work / "proteins.fa"))]
        res["profiles"] = {"20 classic": _host_profiles(q20), f"{len(qn)} proteins": _host_profiles(qn)}
        save(res, path)
        say(res["profiles"])
        res["tracebacks"] = {}
        for name, queries in (("20 classic", q20), (f"every 20th of {len(qn)} proteins", qn[::20])):
            hits, rows = _host_hits(db, queries, args.threads)
            res["tracebacks"][name] = _host_tracebacks(db, hits, args.threads)
            positions = np.arange(db.n, dtype=np.int64)
            cpu = _best_cpu(lambda: select(rows, positions, [1] * len(rows), 10))
            res["tracebacks"][name]["selection_ms_per_row"] = round(cpu / len(rows) * 1e3, 3)
            save(res, path)
            say(name, res["tracebacks"][name])
    say(f"wrote {path}")
    return 0


def main(args) -> int:
    if args.host:
        return host(args)
    if args.e2e:
        return e2e(args)
    if args.table:
        print(table(json.loads(args.table.read_text())))
        return 0
    if args.sass is not None:
        return sass(args)
    if args.shape_sweep:
        return shape_sweep(args)
    w = dict(WORKLOADS["sw"]["smoke" if args.smoke else "default"])
    for key in ("queries", "random_n", "random_len", "pyopal_targets"):
        if getattr(args, key) is not None:
            w[key] = getattr(args, key)
    args.queries, args.random_n, args.random_len, args.pyopal_targets = (w["queries"], w["random_n"], w["random_len"],
                                                                         w["pyopal_targets"])
    out = result_path(Path(args.out), "sw")
    res = header("sw")
    res.update(workload=w, databases={})
    save(res, out)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cudasw_bin = None
        queries = queries_from_tarball(args.cudasw, work)
        try:
            say("building CUDASW++4 ...")
            cudasw_bin = build_cudasw(args.cudasw, work / "build")
        except Exception as exc:  # noqa: BLE001 - recorded; hmmgpu and pyopal still run
            res["cudasw4_build_error"] = str(exc)
            say("CUDASW++4 build FAILED:", exc)
        save(res, out)
        if w.get("real") and not args.no_real:
            bench_database("real", resolve(w["real"]), queries, args, res, out, cudasw_bin, work)
        if args.random_n:
            rnd = work / f"random_{args.random_n}x{args.random_len}.fasta"
            random_fasta(rnd, args.random_n, args.random_len)
            bench_database(f"random {args.random_n}x{args.random_len}", rnd, queries, args, res, out, cudasw_bin, work)
    res["wall_seconds"] = time.perf_counter() - start
    save(res, out)
    try:
        plot(res, out.with_suffix(".png"))
    except Exception as exc:  # noqa: BLE001
        say("plot skipped:", exc)
    print(table(res))
    bad = [n for n, e in res["databases"].items() if e.get("check_pyopal", {}).get("mismatches") or "hmmgpu_error" in e]
    return 1 if bad else 0
