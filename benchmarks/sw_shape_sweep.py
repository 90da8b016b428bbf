"""Kernel speed of every Smith-Waterman shape (G, Q) on random targets: the data of
``hmmgpu.gpu.runtime.tuning.SW_SHAPE_GCUPS`` (GPU machine).

    python3 benchmarks/sw_shape_sweep.py --cudasw shared/tools/cudasw4 --out sweep.json

Each shape scans 200,000 random targets of 1,024 residues (``bench_sw.random_fasta``) with the
first C and 3 C residues of the longest classic query (C = G x Q columns: one tile and
three), best of three kernel times; GCUPS over the padded columns. A further tile's cost is
the difference of the two.
"""
import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_sw  # noqa: E402
from hmmgpu.gpu.runtime import build
from hmmgpu.gpu.runtime.device import GpuDevice
from hmmgpu.gpu.sw.launch import GpuScanner
from hmmgpu.gpu.sw.source import SwSpec
from hmmgpu.sw.matrices import load
from hmmgpu.formats.seqdb import SequenceDB
from hmmgpu.sw.api import _read_queries  # noqa: E402
from provenance import commit


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cudasw", type=Path, required=True, help="folder with CUDASW4-*.tar.gz (its 20 queries)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    shapes = [(G, Q) for G in (16, 32) for Q in (10, 14, 18, 22, 26, 30)]
    dev = GpuDevice.open(0)
    t = time.perf_counter()
    build.compile_ahead([SwSpec(*s) for s in shapes], dev, processes=16)
    print(f"compiled in {time.perf_counter()-t:.1f}s", flush=True)
    work = Path(tempfile.mkdtemp(prefix="sw-sweep-"))
    qpath = bench_sw.queries_from_tarball(args.cudasw, work)
    rnd = work / "random.fasta"
    bench_sw.random_fasta(rnd, 200_000, 1024)
    db = SequenceDB.from_fasta(rnd)
    long_q = [c for _, c in _read_queries(qpath)][19]
    m = load("BLOSUM62")
    rows = []
    for G, Q in shapes:
        C = G * Q
        sc = GpuScanner(db, m, 11, 1, shape=(G, Q))
        row = dict(G=G, Q=Q, C=C)
        for tiles in (1, 3):
            q = long_q[:tiles * C]
            sc.scores_many([q])
            ms = []
            for _ in range(3):
                sc.scores_many([q])
                ms.append(sc.last["kernel_ms"])
            k = min(ms) / 1e3
            row[f"t{tiles}_ms"] = round(min(ms), 3)
            row[f"gcups{tiles}"] = round(tiles * C * db.total_residues / k / 1e9, 1)
        sc.close()
        rows.append(row)
        print(row, flush=True)
    args.out.write_text(json.dumps(dict(
        benchmark="Smith-Waterman kernel shapes", date=time.strftime("%Y-%m-%dT%H:%M:%S%z"), commit=commit(),
        command=" ".join(sys.argv), python=platform.python_version(), device=dev.description,
        residues=db.total_residues, rows=rows), indent=1))


if __name__ == "__main__":
    main()
