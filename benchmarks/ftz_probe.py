"""pyhmmer's speed with and without the hmmsearch program's float mode (SSE flush-to-zero).

hmmgpu runs pyhmmer's Forward/domain stage in that mode (``hmmgpu.host``), as hmmsearch
runs, so that its tables equal hmmsearch's; pyhmmer leaves it off. This times
``pyhmmer.hmmsearch(all queries, cpus=N)`` (the benchmarks' pyhmmer baseline) as the
process starts, with the mode cleared and with it set in the calling thread (its worker
threads inherit it), and prints each run's hit count (the same hits; E-values below
2.2e-308 print as 0 with the mode set)::

    python3 benchmarks/ftz_probe.py --data DIR [--threads 16]

``DIR`` holds ``pfam_db/pfam35_sample600.hmm.gz`` and ``seqs/public_proteins.fa.gz`` (the
shared data). Results: ``benchmarks/results/ftz_probe*_h200_2026-11-25.log``.
"""
from __future__ import annotations

import argparse
import gzip
import resource
import tempfile
import time
from pathlib import Path

from hmmgpu.host import set_flush_to_zero


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--threads", type=int, default=16)
    args = ap.parse_args()
    started = set_flush_to_zero(False)
    set_flush_to_zero(started)
    print("flush-to-zero as the process starts (before pyhmmer is imported):", started, flush=True)
    import pyhmmer
    from pyhmmer.easel import Alphabet, SequenceFile
    from pyhmmer.plan7 import HMMFile

    imported = set_flush_to_zero(False)
    set_flush_to_zero(imported)
    print("after importing pyhmmer:", imported, flush=True)
    with HMMFile(gzip.open(args.data / "pfam_db" / "pfam35_sample600.hmm.gz")) as f:
        hmms = list(f)
    with tempfile.TemporaryDirectory() as tmp:
        fasta = Path(tmp) / "proteins.fa"
        fasta.write_bytes(gzip.decompress((args.data / "seqs" / "public_proteins.fa.gz").read_bytes()))
        with SequenceFile(str(fasta), digital=True, alphabet=Alphabet.amino()) as f:
            block = f.read_block()
    for mode in ("as started", False, True, "as started"):
        set_flush_to_zero(imported if mode == "as started" else mode)
        clock, cpu = time.perf_counter(), _cpu_seconds()
        hits = sum(len(h) for h in pyhmmer.hmmsearch(hmms, block, cpus=args.threads))
        print(f"pyhmmer.hmmsearch {len(hmms)} models, {args.threads} threads, flush-to-zero {mode}: "
              f"{time.perf_counter() - clock:.2f} s wall, {_cpu_seconds() - cpu:.1f} CPU-s, {hits} hits", flush=True)


if __name__ == "__main__":
    main()
