"""How pyhmmer's stage scales from one thread to all of them: CPU time per task, in threads
and in processes, for the ways the engine cuts work.

    python3 benchmarks/scaling_probe.py --data DATA --out OUT [--threads N]

On the real proteins (29 M residues), each measured in this process, alternating:

* ``ranges``: the first 20 Pfam-35 models on pyhmmer's route, each query one range of
  targets, two or four (``ForwardStage`` tasks, every thread of a pool), the run's wall time
  and the tasks' CPU time; and 5 of the models on one thread;
* ``survivors``: PF00005's Viterbi survivors (hmmgpu's GPU cascade) through pyhmmer's
  Forward/domain stage (filtered tasks), on 1, 8 and N threads;
* ``slices``: PF00005's whole pipeline over N equal slices of the proteins, in N threads
  (slices made by pyhmmer's ``block[a:b]`` or by :func:`hmmgpu.formats.seqdb.sequence_block`) and in
  N processes, and over the whole set on one thread;
* ``hmmsearch``: ``hmmsearch --cpu 1`` and ``--cpu N`` with PF00005 (the child's CPU time).

Each line gives wall seconds, the CPU seconds of the tasks (user and system, from
``getrusage(RUSAGE_THREAD)``), minor page faults and context switches. Writes
OUT/scaling_probe.json with date, commit and versions.
"""
import gzip
import json
import multiprocessing
import os
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np


def usage():
    r = resource.getrusage(resource.RUSAGE_THREAD)
    return np.array([r.ru_utime, r.ru_stime, r.ru_minflt, r.ru_nvcsw, r.ru_nivcsw])


def timed(fn):
    def run(*a):
        before = usage()
        out = fn(*a)
        return out, usage() - before
    return run


def pool(fn, items, threads):
    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as ex:
        done = list(ex.map(timed(fn), items))
    wall = time.perf_counter() - start
    total = sum(u for _, u in done)
    return [r for r, _ in done], dict(wall=round(wall, 3), user=round(total[0], 3), sys=round(total[1], 3),
                                      minflt=int(total[2]), vcsw=int(total[3]), ivcsw=int(total[4]),
                                      tasks=len(items), threads=threads)


def _slice_in_process(args):
    path, hmm_path, a, b = args
    import pyhmmer

    from hmmgpu.host import set_flush_to_zero

    set_flush_to_zero(True)
    with pyhmmer.easel.SequenceFile(path, digital=True) as f:
        block = f.read_block()
    hmm = next(iter(pyhmmer.plan7.HMMFile(hmm_path)))
    before = usage()
    start = time.perf_counter()
    pyhmmer.plan7.Pipeline(block.alphabet).search_hmm(hmm, block[a:b])
    return time.perf_counter() - start, usage() - before


def main() -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_engine import Bench, bench_arguments

    import pyhmmer

    from hmmgpu import forward_stage as fs
    from hmmgpu.search.engine import Query
    from hmmgpu.host import set_flush_to_zero
    from hmmgpu.options import SearchOptions
    from hmmgpu.formats.seqdb import open_database, sequence_block

    ap = bench_arguments(__doc__)
    ap.add_argument("--bytes", type=int, default=0, help="only the first BYTES of the proteins (a quick trial)")
    args = ap.parse_args()
    bench = Bench(args)
    bench.result["benchmark"] = "thread scaling of pyhmmer's stage"
    out = bench.result["workloads"]
    work = bench.work.resolve()
    T = args.threads
    seqs = work / "p.fa"
    text = gzip.decompress((args.data / "seqs" / "public_proteins.fa.gz").read_bytes())
    seqs.write_bytes(text[:text.rfind(b"\n>", 0, args.bytes) + 1] if args.bytes else text)
    models = gzip.decompress((args.data / "pfam_db" / "pfam35_sample600.hmm.gz").read_bytes()).split(b"//\n")
    (work / "m20.hmm").write_bytes(b"//\n".join(models[:20]) + b"//\n")
    pf5 = work / "PF00005.hmm"
    pf5.write_bytes(gzip.decompress((args.data / "pfam" / "PF00005.hmm.gz").read_bytes()))
    db = open_database(str(seqs), None)
    hmms = list(pyhmmer.plan7.HMMFile(str(work / "m20.hmm")))
    options = SearchOptions()
    set_flush_to_zero(True)

    def say(name, line):
        out.setdefault(name, []).append(line)
        print(name, line, flush=True)

    # ---- ranges: one or two ranges a query, as the engine's pyhmmer route cuts them
    def range_tasks(stage, queries, parts):
        tasks = []
        for i, h in enumerate(queries):
            bounds = np.linspace(0, db.n, parts + 1).astype(int)
            ts = stage._tasks(Query(index=i, hmm=h), [np.arange(a, b) for a, b in zip(bounds[:-1], bounds[1:])],
                              filtered=False)
            tasks += [(t, len(ts) == 1) for t in ts]
        return tasks

    for threads, queries, label, runs in ((1, hmms[:5], "5 models", (1, 2)), (T, hmms, "20 models", (1, 2, 4, 1, 2, 4))):
        for parts in runs:
            stage = fs.ForwardStage(db, options, ftz=True, threads=threads, queries=len(queries))
            stage.sequences.range_block(0, 1)
            stage.sequences.names()
            _, line = pool(lambda a: stage.run(*a), range_tasks(stage, queries, parts), threads)
            say("ranges", dict(models=label, parts=parts, **line))

    # ---- survivors: PF00005's Viterbi survivors through the Forward/domain stage
    from hmmgpu.gpu.backend import CudaBackend
    from hmmgpu.cpu.backends import NumbaBackend
    from hmmgpu.search.routing import cuda_available

    hmm5 = next(iter(pyhmmer.plan7.HMMFile(str(pf5))))
    backend = CudaBackend(db) if cuda_available() else NumbaBackend(db)
    result = backend.cascade(backend.prepare(hmm5), options)
    survivors = np.asarray(result.survivors, np.int64)
    backend.close()
    say("survivors", dict(count=int(survivors.size)))
    for threads in (1, 8, T, 1, T):
        stage = fs.ForwardStage(db, options, ftz=True, threads=threads, queries=1)
        tasks = stage.plan(Query(index=0, hmm=hmm5), survivors)
        for t in tasks:  # the blocks made once, as the engine's cache holds them
            stage.sequences.block(t.positions)
        _, line = pool(lambda t: stage.run(t), tasks, threads)
        say("survivors", line)

    # ---- slices: the whole pipeline over equal slices, in threads and in processes
    block = db.block()
    bounds = np.linspace(0, len(block), T + 1).astype(int)

    listed = list(block)

    def whole(ab):
        return pyhmmer.plan7.Pipeline(block.alphabet).search_hmm(hmm5, block[ab[0]:ab[1]])

    def made(ab):
        return pyhmmer.plan7.Pipeline(block.alphabet).search_hmm(hmm5, sequence_block(listed[ab[0]:ab[1]]))

    for rep in range(2):
        _, line = pool(whole, [(0, len(block))], 1)
        say("slices", dict(mode="one thread", **line))
        _, line = pool(whole, list(zip(bounds[:-1], bounds[1:])), T)
        say("slices", dict(mode=f"{T} threads, block[a:b]", **line))
        _, line = pool(made, list(zip(bounds[:-1], bounds[1:])), T)
        say("slices", dict(mode=f"{T} threads, sequence_block", **line))
        start = time.perf_counter()
        with multiprocessing.get_context("fork").Pool(T) as procs:
            got = procs.map(_slice_in_process, [(str(seqs), str(pf5), a, b) for a, b in zip(bounds[:-1], bounds[1:])])
        total = sum(u for _, u in got)
        say("slices", dict(mode=f"{T} processes", wall=round(time.perf_counter() - start, 3),
                           search_wall_max=round(max(w for w, _ in got), 3), user=round(total[0], 3),
                           sys=round(total[1], 3), minflt=int(total[2]), vcsw=int(total[3]), ivcsw=int(total[4])))
    # ---- hmmsearch itself on PF00005, one worker thread and all of them (CPU time of the child)
    from bench_engine import HMMSEARCH

    for cpus in (1, T, 1, T):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run([HMMSEARCH, "--cpu", str(cpus), "-o", os.devnull, str(pf5), str(seqs)], check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        say("hmmsearch", dict(cpus=cpus, wall=round(time.perf_counter() - start, 3),
                              user=round(after.ru_utime - before.ru_utime, 3), sys=round(after.ru_stime - before.ru_stime, 3)))
    with open(args.out / "scaling_probe.json", "w") as fh:
        json.dump(bench.result, fh, indent=1)


if __name__ == "__main__":
    main()
