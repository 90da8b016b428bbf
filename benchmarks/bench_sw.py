"""Smith-Waterman benchmark in one run: CUDASW++4 (built here from its source), hmmgpu sw (GPU)
and pyopal (16 threads), the classic 20 CUDASW++ queries against the real proteins and against
a random database; GCUPS per query and overall; exactness checks; JSON, plot and a table.

Usage (GPU machine)::

    python benchmarks/bench_sw.py --cudasw shared/tools/cudasw4 --real shared/data/seqs/public_proteins.fa.gz \
        --out bench-sw [--random-n 1000000 --random-len 1024 --queries 20 --pyopal-targets 3000] [--smoke]
    python benchmarks/bench_sw.py --table bench-sw/bench_sw.json     # the README table from a result

``--cudasw`` is a folder with CUDASW4-*.tar.gz and build.sh (shared/tools/cudasw4). Results are
written to OUT/bench_sw.json after every step (a failure leaves what was measured, with the
error). hmmgpu's GCUPS count the scan (kernels, transfers and rescoring; the kernels are
compiled in a warm-up before timing); CUDASW++4's are its own "Scan time" numbers; pyopal's
are measured on a random subsample of the database with 16 threads. GCUPS = query length x
database residues / seconds.
"""
from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
from provenance import commit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
#: The gap costs of every tool here, with BLAST's meaning (a gap of length k costs open + k x extend).
GAP_OPEN, GAP_EXTEND = 11, 1
#: The gap costs CUDASW++4 (37a394c) actually scores with, in BLAST's meaning: its ``align``
#: parses --gop/--gex but never hands them to the aligner (main.cu does not call
#: setGapOpenScore/setGapExtendScore), whose built-in -11/-1 charge gop + (k - 1) x gex for a
#: gap of k, i.e. 10 + k: BLAST's open 10 / extend 1. Its scores are checked against hmmgpu's
#: with those costs (the same work per cell as 11/1, so GCUPS compare either way).
CUDASW4_GAP_OPEN = 10


def _save(res, out):
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_sw.json").write_text(json.dumps(res, indent=1, default=str))


def _say(*a):
    print(*a, flush=True)


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


def run_hmmgpu(db, queries, device: int) -> tuple:
    from hmmgpu.gpu.sw.launch import GpuScanner
    from hmmgpu.sw.matrices import load

    t = time.perf_counter()
    sc = GpuScanner(db, load("BLOSUM62"), GAP_OPEN, GAP_EXTEND, device=device)
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
    return dict(per_query=per, total_seconds=tot, overall_gcups=cells / tot / 1e9, upload_seconds=upload,
                warmup_seconds=warm, device=sc.description), scores


def _gpu_scores(db, queries, device: int, gap_open: int, gap_extend: int) -> list:
    from hmmgpu.gpu.sw.launch import GpuScanner
    from hmmgpu.sw.matrices import load

    sc = GpuScanner(db, load("BLOSUM62"), gap_open, gap_extend, device=device)
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


def bench_database(name, fasta, queries_path, args, res, out, cudasw_bin, work):
    from hmmgpu.formats.seqdb import SequenceDB
    from hmmgpu.sw.api import _read_queries

    entry = res["databases"].setdefault(name, {})
    db = SequenceDB.from_fasta(fasta)
    qs = _read_queries(queries_path)[: args.queries]
    queries = [c for _, c in qs]
    entry.update(fasta=str(fasta), sequences=db.n, residues=db.total_residues,
                 queries=[dict(name=n, length=int(c.size)) for n, c in qs])
    _save(res, out)
    for step in ("hmmgpu", "pyopal", "cudasw4"):
        try:
            _say(f"[{name}] {step} ...")
            if step == "hmmgpu":
                entry["hmmgpu"], gpu_scores = run_hmmgpu(db, queries, args.device)
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
            _say(f"[{name}] {step} FAILED: {entry[step + '_error']}")
            if step == "hmmgpu":
                break
        _save(res, out)


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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cudasw", type=Path, help="folder with CUDASW4-*.tar.gz and build.sh")
    ap.add_argument("--real", type=Path, help="real proteins FASTA (plain or gzip)")
    ap.add_argument("--out", type=Path, default=Path("bench-sw"))
    ap.add_argument("--queries", type=int, default=20, help="first N of the 20 classic queries")
    ap.add_argument("--random-n", type=int, default=1_000_000, help="random database: sequences (0: none)")
    ap.add_argument("--random-len", type=int, default=1024, help="random database: length of each")
    ap.add_argument("--pyopal-targets", type=int, default=3000, help="targets of pyopal's subsample")
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--smoke", action="store_true", help="quick: 3 queries, 5,000 x 256 random, 500 pyopal targets")
    ap.add_argument("--table", type=Path, help="print the markdown table of a bench_sw.json and exit")
    args = ap.parse_args(argv)
    if args.table:
        print(table(json.loads(args.table.read_text())))
        return 0
    if args.smoke:
        args.queries, args.random_n, args.random_len, args.pyopal_targets = 3, 5000, 256, 500
    import hmmgpu

    res = dict(date=datetime.datetime.now().isoformat(timespec="seconds"), command=" ".join(sys.argv),
               commit=commit(),
               versions=dict(hmmgpu=hmmgpu._version.__version__, numpy=np.__version__, python=sys.version.split()[0]),
               args={k: str(v) for k, v in vars(args).items()}, databases={})
    for mod in ("numba", "numba_cuda", "pyopal"):
        try:
            res["versions"][mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001
            res["versions"][mod] = None
    out = args.out
    _save(res, out)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cudasw_bin, queries = None, None
        if args.cudasw:
            try:
                queries = queries_from_tarball(args.cudasw, work)
                _say("building CUDASW++4 ...")
                cudasw_bin = build_cudasw(args.cudasw, work / "build")
            except Exception as exc:  # noqa: BLE001
                res["cudasw4_build_error"] = str(exc)
                _say("CUDASW++4 build FAILED:", exc)
        if queries is None:
            raise SystemExit("need --cudasw (its tarball holds the 20 classic queries)")
        _save(res, out)
        if args.real:
            bench_database("real", args.real, queries, args, res, out, cudasw_bin, work)
        if args.random_n:
            rnd = work / f"random_{args.random_n}x{args.random_len}.fasta"
            random_fasta(rnd, args.random_n, args.random_len)
            bench_database(f"random {args.random_n}x{args.random_len}", rnd, queries, args, res, out, cudasw_bin, work)
    res["wall_seconds"] = time.perf_counter() - start
    _save(res, out)
    try:
        plot(res, out / "bench_sw.png")
    except Exception as exc:  # noqa: BLE001
        _say("plot skipped:", exc)
    print(table(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
