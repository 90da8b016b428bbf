"""Per-core GCUPS of hmmgpu's numba filters next to pyhmmer's (HMMER's SSE code), one thread each.

    python3 benchmarks/bench_cpu.py [--db FASTA] [--models a.hmm b.hmm ...] [--out results.json]

GCUPS = model length x residues / seconds. Both sides run single-threaded on the same
targets; numba compile time is excluded (one warm-up call first).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

import numba
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from hmmgpu import cpu_filters  # noqa: E402
from hmmgpu.api import read_hmms  # noqa: E402
from hmmgpu.profiles import ModelProfile  # noqa: E402
from hmmgpu.seqdb import open_database  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def best_of(fn, repeat=3):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", default=os.path.join(HERE, "..", "pfam_samples", "938293.PRJEB85.HG003687.faa"))
    ap.add_argument("--models", nargs="+", default=[os.path.join(HERE, "..", "pfam_samples", "samples.hmm")])
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    import pyhmmer
    from pyhmmer.plan7 import Background, Pipeline, Profile

    numba.set_num_threads(1)
    db = open_database(args.db)
    block = db.block()
    cells_per_node = int(db.total_residues)
    rows = []
    for path in args.models:
        for hmm in read_hmms(path):
            prof = ModelProfile.from_hmm(hmm)
            cpu_filters.msv_filter(prof, db)  # compile / load cache
            cpu_filters.viterbi_filter(prof, db, np.arange(min(db.n, 10)))
            t_msv = best_of(lambda: cpu_filters.msv_filter(prof, db))
            sub = np.arange(0, db.n, max(1, db.n // 200))  # the Viterbi filter is slow: a sample
            sub_res = int(db.lengths[sub].sum())
            t_vf = best_of(lambda: cpu_filters.viterbi_filter(prof, db, sub), repeat=1)

            gm = Profile(hmm.M, hmm.alphabet)
            gm.configure(hmm, Background(hmm.alphabet), 100)
            om = gm.to_optimized()

            def pyhmmer_msv():
                for seq in block:
                    om.L = len(seq)
                    om.msv_filter(seq)

            t_pymsv = best_of(pyhmmer_msv)
            t_pyfull = best_of(lambda: Pipeline(hmm.alphabet).search_hmm(hmm, block), repeat=1)
            cells = hmm.M * cells_per_node
            rows.append({
                "model": str(hmm.name), "M": hmm.M,
                "numba_msv_gcups": cells / t_msv / 1e9,
                "numba_viterbi_gcups": hmm.M * sub_res / t_vf / 1e9,
                "pyhmmer_msv_gcups": cells / t_pymsv / 1e9,
                "pyhmmer_full_search_gcups": cells / t_pyfull / 1e9,
            })
            print(f"{rows[-1]['model']:>16} M={hmm.M:5d}  numba MSV {rows[-1]['numba_msv_gcups']:6.2f}  "
                  f"pyhmmer MSV {rows[-1]['pyhmmer_msv_gcups']:6.2f}  numba VF {rows[-1]['numba_viterbi_gcups']:5.2f}  "
                  f"pyhmmer full {rows[-1]['pyhmmer_full_search_gcups']:6.2f}  GCUPS/core", flush=True)
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=HERE).stdout.strip()
    except OSError:
        commit = ""
    result = {
        "benchmark": "cpu filters, one thread each", "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "commit": os.environ.get("HMMGPU_COMMIT", commit), "host": platform.node(),
        "cpu": platform.processor() or platform.machine(), "command": " ".join(sys.argv),
        "database": {"path": args.db, "sequences": int(db.n), "residues": int(db.total_residues)},
        "versions": {"numba": numba.__version__, "numpy": np.__version__, "pyhmmer": pyhmmer.__version__},
        "models": rows,
    }
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
