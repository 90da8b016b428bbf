"""Whose top-10 scores are right where hmmgpu's and CUDASW++4's differ (GPU machine).

    python3 benchmarks/sw_top10_check.py --cudasw shared/tools/cudasw4 [--n 1000000]

Rebuilds bench_sw's random database (seed 1, N x 1,024), scans the 20 classic queries as
bench_sw does (a scanner at gaps 11/1 query by query, then one at CUDASW++4's 10/1 for all
queries in one call), and for queries 0 and 1 compares the one-call scores with one-query
calls target by target and rescores the ten best targets of each exactly with pyopal.
"""
import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_sw  # noqa: E402
from hmmgpu.gpu.sw.launch import GpuScanner
from hmmgpu.sw.matrices import load
from hmmgpu.sw.cpu import pair_scores
from hmmgpu.formats.seqdb import SequenceDB
from hmmgpu.sw.api import _read_queries  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cudasw", type=Path, required=True, help="folder with CUDASW4-*.tar.gz (its 20 queries)")
    ap.add_argument("--n", type=int, default=1_000_000, help="random targets")
    args = ap.parse_args()

    n = args.n
    work = Path(tempfile.mkdtemp(prefix="sw-top10-"))
    qpath = bench_sw.queries_from_tarball(args.cudasw, work)
    rnd = work / f"random_{n}.fasta"
    t = time.perf_counter()
    bench_sw.random_fasta(rnd, n, 1024)
    db = SequenceDB.from_fasta(rnd)
    print("db", db.n, db.total_residues, f"{time.perf_counter()-t:.1f}s", flush=True)
    qs = [c for _, c in _read_queries(qpath)]
    m = load("BLOSUM62")
    A = GpuScanner(db, m, 11, 1)
    print("chunks", len(list(A.resident.chunks())), flush=True)
    for q in qs:
        A.scores_many([q])
    A.close()
    B = GpuScanner(db, m, 10, 1)
    multi = B.scores_many(qs)
    single0 = B.scores_many([qs[0]])[0]
    single1 = B.scores_many([qs[1]])[0]
    B.close()
    for qi, single in ((0, single0), (1, single1)):
        diff = np.flatnonzero(multi[qi] != single)
        print(f"query {qi} ({qs[qi].size}): multi vs single differ at {diff.size} targets; first {diff[:10].tolist()}", flush=True)
        for name, s in (("multi", multi[qi]), ("single", single)):
            top = np.argsort(-s, kind="stable")[:10]
            exact = pair_scores(qs[qi], [db.codes(int(i)) for i in top], m, 10, 1)
            print(f"  {name}: top {s[top].tolist()} exact {exact.tolist()} idx {top.tolist()}", flush=True)
        if diff.size:
            print("  diff positions mod 64:", np.bincount(diff % 64, minlength=64).tolist()[:64])
            print("  multi vals", multi[qi][diff[:10]].tolist(), "single", single[diff[:10]].tolist())


if __name__ == "__main__":
    main()
