"""End-to-end search wall time: hmmgpu (one backend) against hmmsearch --cpu N and pyhmmer, same run.

    python3 benchmarks/bench_search.py --db public_proteins.fa.gz --models a.hmm.gz ... \
        [--backend cuda] [--cpu 16] [--out results.json]

hmmgpu opens the database once (as a made database would be) and searches every model
against it; each model's wall time covers profile building, filters, the pyhmmer stage and
formatting the tables. hmmsearch runs as a subprocess per model on the FASTA file (its
time includes parsing, as a user would run it). pyhmmer gets the database pre-loaded and
`cpus=N` (a single query runs on one thread). Tables are compared with hmmsearch's.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from hmmgpu import __version__  # noqa: E402
from hmmgpu.api import Pipeline, read_hmms  # noqa: E402
from hmmgpu.fpenv import flush_to_zero  # noqa: E402


def _rows(data: bytes):
    return [r for r in data.decode().splitlines() if not r.startswith("#")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--models", nargs="+", required=True)
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--cpu", type=int, default=os.cpu_count())
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    import pyhmmer

    hmmsearch = shutil.which("hmmsearch")
    t = time.perf_counter()
    pli = Pipeline(args.db, backend=args.backend, cpus=args.cpu, ftz=True)
    open_s = time.perf_counter() - t
    block = pli.db.block()
    residues = int(pli.db.total_residues)
    rows = []
    for path in args.models:
        hmm = read_hmms(path)[0]
        pli.search_hmm(hmm)  # warm-up: kernel compile / cache load, not timed
        t = time.perf_counter()
        hits = pli.search_hmm(hmm)
        with flush_to_zero():
            ours = io.BytesIO()
            hits.write(ours, format="targets", header=False)
        ours_s = time.perf_counter() - t
        row = {"model": str(hmm.name), "M": hmm.M, "hmmgpu_s": ours_s,
               "hmmgpu_gcups": hmm.M * residues / ours_s / 1e9, "stages_s": dict(pli.counts.seconds),
               "passed": [pli.counts.n_past_msv, pli.counts.n_past_bias, pli.counts.n_past_vit, pli.counts.n_past_fwd]}
        t = time.perf_counter()
        list(pyhmmer.hmmsearch([hmm], block, cpus=args.cpu))
        row["pyhmmer_s"] = time.perf_counter() - t
        if hmmsearch:
            with tempfile.TemporaryDirectory() as tmp:
                tbl = os.path.join(tmp, "t")
                t = time.perf_counter()
                subprocess.run([hmmsearch, "--cpu", str(args.cpu), "-o", os.devnull, "--tblout", tbl, path, args.db],
                               check=True)
                row["hmmsearch_s"] = time.perf_counter() - t
                with open(tbl, "rb") as f:
                    row["tblout_rows_equal_hmmsearch"] = _rows(ours.getvalue()) == _rows(f.read())
            row["speedup_vs_hmmsearch"] = row["hmmsearch_s"] / ours_s
        row["speedup_vs_pyhmmer"] = row["pyhmmer_s"] / ours_s
        rows.append(row)
        print(f"{row['model']:>14} M={hmm.M:5d}  hmmgpu {ours_s:7.3f}s  hmmsearch --cpu {args.cpu} "
              f"{row.get('hmmsearch_s', float('nan')):7.3f}s  pyhmmer {row['pyhmmer_s']:7.3f}s  "
              f"same rows: {row.get('tblout_rows_equal_hmmsearch')}", flush=True)
    pli.close()
    result = {
        "benchmark": "end-to-end search wall time", "hmmgpu": __version__, "backend": pli.notice,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "commit": os.environ.get("HMMGPU_COMMIT", ""),
        "host": platform.node(), "cpu_threads": args.cpu, "command": " ".join(sys.argv),
        "database": {"path": os.path.basename(args.db), "sequences": int(pli.db.n), "residues": residues,
                     "open_s": open_s},
        "versions": {"pyhmmer": pyhmmer.__version__, "python": platform.python_version()},
        "models": rows,
    }
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
