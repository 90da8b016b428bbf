"""scaling: how the search scales with CPU threads and GPUs, and how pyhmmer's stage scales.

Parts (``--parts``, all by default; settings in ``workloads.json``'s ``scaling``):

* ``threads``: ``hmmgpu search --cpu T`` (default backend) and ``pyhmmer.hmmsearch(cpus=T)``
  for each T of ``threads`` (up to the usable cores), the first ``search_models`` models
  against the real proteins (29 M residues); each a fresh process, tables checked equal;
* ``gpus``: the same models cut into G contiguous parts searched at once by G hmmgpu
  processes, one a GPU (``--device g``, ``--cpu cores/G``), for each G of ``gpus`` up to the
  GPUs present (hmmgpu searches on one GPU; this is how a user spreads a model file over
  several); the wall time until the last ends, tables joined in order and checked against
  the one-GPU run's;
* ``ranges``: the first ``stage_models`` models on pyhmmer's route, each query cut into
  ``stage_parts`` ranges of targets (``PyhmmerStage`` tasks over a pool of every thread), and 5
  of the models on one thread: wall time and the tasks' CPU time;
* ``survivors``: PF00005's Viterbi survivors (hmmgpu's cascade: the GPU where there is one,
  else the numba filters) through pyhmmer's Forward/domain stage on ``survivor_threads`` threads;
* ``slices``: PF00005's whole pipeline over N equal slices of the proteins, in N threads
  (slices made by pyhmmer's ``block[a:b]`` or by :func:`hmmgpu.formats.seqdb.sequence_block`) and in
  N processes, and over the whole set on one thread;
* ``hmmsearch``: ``hmmsearch --cpu 1`` and ``--cpu N`` with PF00005 (the child's CPU time).

The stage lines give wall seconds, the tasks' CPU seconds (user and system, from
``getrusage(RUSAGE_THREAD)``), minor page faults and context switches. Writes
``scaling_<device>_<date>.json``.
"""
from __future__ import annotations

import multiprocessing
import os
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import (ROOT, WORKLOADS, compare_tables, cores, engine_stats, gpu_count, header, hmmsearch_binary,
                    resolve, result_path, save, say, timed, work_dir, write_models, write_proteins)

PARTS = ("threads", "gpus", "ranges", "survivors", "slices", "hmmsearch")


def add_arguments(ap) -> None:
    w = WORKLOADS["scaling"]
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    ap.add_argument("--threads", type=int, default=cores(), help="N: the most threads (default: the usable cores)")
    ap.add_argument("--search-models", type=int, default=w["search_models"])
    ap.add_argument("--bytes", type=int, default=0, help="only the first BYTES of the proteins (a quick trial)")


def _usage():
    import numpy as np

    r = resource.getrusage(resource.RUSAGE_THREAD)
    return np.array([r.ru_utime, r.ru_stime, r.ru_minflt, r.ru_nvcsw, r.ru_nivcsw])


def _timed_call(fn):
    def run(*a):
        before = _usage()
        out = fn(*a)
        return out, _usage() - before
    return run


def _pool(fn, items, threads):
    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as ex:
        done = list(ex.map(_timed_call(fn), items))
    wall = time.perf_counter() - start
    total = sum(u for _, u in done)
    return [r for r, _ in done], dict(wall=round(wall, 3), user=round(float(total[0]), 3), sys=round(float(total[1]), 3),
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
    before = _usage()
    start = time.perf_counter()
    pyhmmer.plan7.Pipeline(block.alphabet).search_hmm(hmm, block[a:b])
    return time.perf_counter() - start, _usage() - before


def _env() -> dict:
    path = os.environ.get("PYTHONPATH", "")
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT)] + ([path] if path else [])))


def _search(models, seqs, tbl, threads, device=0) -> list:
    return [sys.executable, "-m", "hmmgpu", "search", "--cpu", str(threads), "--device", str(device), "-o", os.devnull,
            "--tblout", str(tbl), str(models), str(seqs)]


def part_threads(args, out, say_line, work, models, seqs) -> None:
    from bench_e2e import PYHMMER_SCRIPT

    first = None
    for t in [t for t in WORKLOADS["scaling"]["threads"] if t <= args.threads]:
        ours = timed(_search(models, seqs, work / f"t{t}.tbl", t), env=_env())
        ref = timed([sys.executable, "-c", PYHMMER_SCRIPT, models, seqs, t, work / f"p{t}.tbl", "0", ROOT], env=_env())
        first = first or work / f"t{t}.tbl"
        stats = engine_stats(ours["stats"])
        say_line("threads", dict(threads=t, hmmgpu_s=ours["seconds"], pyhmmer_s=ref["seconds"],
                                 gpu_busy_s=stats["gpu_busy_s"], workers_busy_s=stats["workers_busy_s"],
                                 backend=stats["backend"],
                                 tables_equal_first=compare_tables(work / f"t{t}.tbl", first)["rows_equal"]))


def part_gpus(args, out, say_line, work, models, seqs) -> None:
    present = gpu_count()
    text = models.read_bytes()
    records = [r for r in text.split(b"//\n") if r.strip()]
    whole = None
    for g in [g for g in WORKLOADS["scaling"]["gpus"] if g <= max(present, 1)]:
        cuts = [round(i * len(records) / g) for i in range(g + 1)]
        procs, tbls = [], []
        start = time.perf_counter()
        for i in range(g):
            part = work / f"g{g}_{i}.hmm"
            part.write_bytes(b"//\n".join(records[cuts[i]:cuts[i + 1]]) + b"//\n")
            tbls.append(work / f"g{g}_{i}.tbl")
            procs.append(subprocess.Popen(_search(part, seqs, tbls[-1], max(1, args.threads // g), device=i),
                                          env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        errors = [p.communicate()[1].decode(errors="replace") for p in procs]
        wall = time.perf_counter() - start
        failed = [e[-500:] for p, e in zip(procs, errors) if p.returncode]
        joined = work / f"g{g}.tbl"
        joined.write_bytes(b"".join(line for t in tbls if t.exists() for line in t.open("rb")
                                    if not line.startswith(b"#")))
        whole = whole or joined
        say_line("gpus", dict(gpus=g, gpus_present=present, threads_each=max(1, args.threads // g), wall=round(wall, 3),
                              failed=failed or None, tables_equal_one_gpu=compare_tables(joined, whole)["rows_equal"]))


def part_stage(args, out, say_line, work, parts, seqs) -> None:
    import numpy as np
    import pyhmmer

    from hmmgpu.cpu.pyhmmer_stage import PyhmmerStage
    from hmmgpu.formats.seqdb import open_database, sequence_block
    from hmmgpu.host import set_flush_to_zero
    from hmmgpu.options import SearchOptions
    from hmmgpu.search.engine import Query

    w = WORKLOADS["scaling"]
    T = args.threads
    models = write_models(resolve(w["models"]), work / "stage.hmm", 0, w["stage_models"])
    pf5 = write_models(resolve(w["one_model"]), work / "one.hmm")
    db = open_database(str(seqs), None)
    hmms = list(pyhmmer.plan7.HMMFile(str(models)))
    hmm5 = next(iter(pyhmmer.plan7.HMMFile(str(pf5))))
    options = SearchOptions()
    set_flush_to_zero(True)

    if "ranges" in parts:  # one or more ranges a query, as the engine's pyhmmer route cuts them
        def range_tasks(stage, queries, n):
            tasks = []
            for i, h in enumerate(queries):
                bounds = np.linspace(0, db.n, n + 1).astype(int)
                ts = stage._tasks(Query(index=i, hmm=h), [np.arange(a, b) for a, b in zip(bounds[:-1], bounds[1:])],
                                  filtered=False)
                tasks += [(t, len(ts) == 1) for t in ts]
            return tasks

        for threads, queries, label, runs in ((1, hmms[:5], "5 models", w["stage_parts"][:2]),
                                              (T, hmms, f"{len(hmms)} models", w["stage_parts"] * 2)):
            for n in runs:
                stage = PyhmmerStage(db, options, ftz=True, threads=threads, model_lengths=[h.M for h in queries])
                stage.sequences.range_block(0, 1)
                stage.sequences.names()
                _, line = _pool(lambda a: stage.run(*a), range_tasks(stage, queries, n), threads)
                say_line("ranges", dict(models=label, parts=n, **line))

    if "survivors" in parts:  # PF00005's Viterbi survivors through the Forward/domain stage
        from hmmgpu.search.routing import cuda_available

        if cuda_available():
            from hmmgpu.gpu.backend import CudaBackend as Filters
        else:
            from hmmgpu.cpu.backends import NumbaBackend as Filters
        backend = Filters(db)
        survivors = np.asarray(backend.cascade(backend.prepare(hmm5), options).survivors, np.int64)
        backend.close()
        say_line("survivors", dict(count=int(survivors.size), filters=Filters.__name__))
        for threads in [t for t in w["survivor_threads"] if t <= T] + [1, T]:
            stage = PyhmmerStage(db, options, ftz=True, threads=threads, model_lengths=[hmm5.M])
            tasks = stage.plan(Query(index=0, hmm=hmm5), survivors)
            for t in tasks:  # the blocks made once, as the engine's cache holds them
                stage.sequences.block(t.positions)
            _, line = _pool(lambda t: stage.run(t), tasks, threads)
            say_line("survivors", line)

    if "slices" in parts:  # the whole pipeline over equal slices, in threads and in processes
        block = db.block()
        bounds = np.linspace(0, len(block), T + 1).astype(int)
        listed = list(block)

        def whole(ab):
            return pyhmmer.plan7.Pipeline(block.alphabet).search_hmm(hmm5, block[ab[0]:ab[1]])

        def made(ab):
            return pyhmmer.plan7.Pipeline(block.alphabet).search_hmm(hmm5, sequence_block(listed[ab[0]:ab[1]]))

        for _ in range(2):
            _, line = _pool(whole, [(0, len(block))], 1)
            say_line("slices", dict(mode="one thread", **line))
            _, line = _pool(whole, list(zip(bounds[:-1], bounds[1:])), T)
            say_line("slices", dict(mode=f"{T} threads, block[a:b]", **line))
            _, line = _pool(made, list(zip(bounds[:-1], bounds[1:])), T)
            say_line("slices", dict(mode=f"{T} threads, sequence_block", **line))
            start = time.perf_counter()
            with multiprocessing.get_context("fork").Pool(T) as procs:
                got = procs.map(_slice_in_process, [(str(seqs), str(pf5), a, b) for a, b in zip(bounds[:-1], bounds[1:])])
            total = sum(u for _, u in got)
            say_line("slices", dict(mode=f"{T} processes", wall=round(time.perf_counter() - start, 3),
                                    search_wall_max=round(max(s for s, _ in got), 3), user=round(float(total[0]), 3),
                                    sys=round(float(total[1]), 3), minflt=int(total[2]), vcsw=int(total[3]),
                                    ivcsw=int(total[4])))

    if "hmmsearch" in parts:  # hmmsearch itself on PF00005, one worker thread and all (the child's CPU time)
        for cpus in (1, T, 1, T):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            subprocess.run([hmmsearch_binary(), "--cpu", str(cpus), "-o", os.devnull, str(pf5), str(seqs)], check=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            say_line("hmmsearch", dict(cpus=cpus, wall=round(time.perf_counter() - start, 3),
                                       user=round(after.ru_utime - before.ru_utime, 3),
                                       sys=round(after.ru_stime - before.ru_stime, 3)))


def main(args) -> int:
    w = WORKLOADS["scaling"]
    parts = args.parts.split(",")
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise SystemExit(f"unknown parts {sorted(unknown)}; choose from {', '.join(PARTS)}")
    work = work_dir("scaling")
    seqs = write_proteins(resolve(w["proteins"]), work / "proteins.fa")
    if args.bytes:
        text = seqs.read_bytes()
        seqs.write_bytes(text[:text.rfind(b"\n>", 0, args.bytes) + 1])
    path = result_path(Path(args.out), "scaling")
    result = header("scaling")
    result.update(threads=args.threads, parts=parts, settings=w, results={})

    def say_line(name, line):
        result["results"].setdefault(name, []).append(line)
        save(result, path)
        say(name, line)

    models = write_models(resolve(w["models"]), work / "search.hmm", 0, args.search_models)
    if "threads" in parts or "gpus" in parts:
        timed([sys.executable, "-m", "hmmgpu", "warmup"], env=_env(), check=False)
    if "threads" in parts:
        part_threads(args, result, say_line, work, models, seqs)
    if "gpus" in parts:
        part_gpus(args, result, say_line, work, models, seqs)
    if set(parts) & {"ranges", "survivors", "slices", "hmmsearch"}:
        part_stage(args, result, say_line, work, parts, seqs)
    say(f"wrote {path}")
    return 0
