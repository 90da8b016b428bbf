"""(d) with the models parsed first: hmmgpu's engine on pyhmmer's route against pyhmmer.hmmsearch.

    python3 benchmarks/search_only_probe.py MODELS SEQS THREADS

Parses the models and reads the sequences once, then times, twice each and in this process:
``pyhmmer.hmmsearch`` on the parsed models, ``hmmgpu.hmmsearch(..., backend="hmmer")`` on the
same list, and on an iterator of it (the engine then streams the models).
"""
import sys
import time

import pyhmmer

import hmmgpu
from hmmgpu.formats.hmmfile import read_models


def timed(search) -> tuple:
    start = time.perf_counter()
    hits = sum(len(h) for h in search())
    return time.perf_counter() - start, hits


def main() -> None:
    hmmpath, seqs, cpus = sys.argv[1], sys.argv[2], int(sys.argv[3])
    start = time.perf_counter()
    hmms = [model.hmm for model in read_models(hmmpath)]
    parse = time.perf_counter() - start
    with pyhmmer.easel.SequenceFile(seqs, digital=True) as fh:
        block = fh.read_block()
    for _ in range(2):
        a, n1 = timed(lambda: pyhmmer.hmmsearch(hmms, block, cpus=cpus))
        b, n2 = timed(lambda: hmmgpu.hmmsearch(hmms, block, cpus=cpus, backend="hmmer"))
        c, n3 = timed(lambda: hmmgpu.hmmsearch(iter(hmms), block, cpus=cpus, backend="hmmer"))
        print(f"search only: parse {parse:.2f}; pyhmmer.hmmsearch {a:.2f} s ({n1}), hmmgpu list {b:.2f} s ({n2}), "
              f"hmmgpu iter {c:.2f} s ({n3})")


if __name__ == "__main__":
    main()
