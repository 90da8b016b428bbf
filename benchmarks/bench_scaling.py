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
* ``hmmsearch``: ``hmmsearch --cpu 1`` and ``--cpu N`` with PF00005 (the child's CPU time);
* ``scale`` (only when named: ``--parts scale``; issue 33): the 600 Pfam-35 models against the
  real proteins written 4 times (116 M residues) as a made database, in one run of each: on one
  GPU, with ``--devices all``, and through a dask ``LocalCUDACluster`` of one worker a GPU
  (``hmmgpu search --scheduler``; without dask-cuda, ``dask worker`` processes with
  ``CUDA_VISIBLE_DEVICES`` set one GPU each, as dask-cuda sets it); every CPU core in each
  (the cluster's workers share them). The three runs' report-free outputs (``--tblout``,
  ``--domtblout``, ``--pfamtblout``, written under the same names in a folder a run) are
  compared byte for byte but the tables' directory and date lines. Writes
  ``scale_<device>_<date>.json`` with exactly the keys device, gpus, date, commit, residues,
  one_gpu_s, devices_all_s, dask_s, identical, command, and ``scale_<device>_<date>.log``
  with the rest (versions, each run's command and statistics lines, the cluster used and the
  cores each worker may run on). Where dask-cuda pinned its workers to fewer cores than the
  host has (its CPU affinity of each GPU, from NVML), the same search also runs on plain
  ``dask worker`` processes, not pinned (``dask_unpinned`` in the log; its outputs are
  compared too; ``dask_s`` stays the ``LocalCUDACluster``'s). ``--scale-args "..."`` adds
  search options to every run (``--postfilter hmmgpu``: hmmgpu's own post-filter); the files
  are then named ``scale_<slug of the options>_<device>_<date>`` beside the default route's;
  ``--scale-runs`` picks the runs (a run left out is null in the result).

The stage lines give wall seconds, the tasks' CPU seconds (user and system, from
``getrusage(RUSAGE_THREAD)``), minor page faults and context switches. Writes
``scaling_<device>_<date>.json``.
"""
from __future__ import annotations

import multiprocessing
import os
import re
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import (ROOT, WORKLOADS, compare_tables, cores, device_name, engine_stats, gpu_count, header,
                    hmmsearch_binary, now, residues, resolve, result_path, save, say, timed, work_dir, write_models,
                    write_proteins)

PARTS = ("threads", "gpus", "ranges", "survivors", "slices", "hmmsearch", "scale")
#: The parts run when none are named (``scale`` needs a host with several GPUs and a run of its own).
DEFAULT_PARTS = PARTS[:-1]


def add_arguments(ap) -> None:
    w = WORKLOADS["scaling"]
    ap.add_argument("--parts", default=",".join(DEFAULT_PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    ap.add_argument("--threads", type=int, default=cores(), help="N: the most threads (default: the usable cores)")
    ap.add_argument("--search-models", type=int, default=w["search_models"])
    ap.add_argument("--bytes", type=int, default=0, help="only the first BYTES of the proteins (a quick trial)")
    ap.add_argument("--scale-args", default="", help="search options added to every run of the scale part")
    ap.add_argument("--scale-runs", default="one_gpu,devices_all,dask",
                    help="the scale part's runs, of one_gpu, devices_all, dask (--postfilter hmmgpu runs on one host only)")


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


#: The scale part's outputs, each written under this name in the run's own folder (the tables'
#: tail records the command line, which then names the same files in every run).
SCALE_OUTPUTS = {"--tblout": "tbl", "--domtblout": "domtbl", "--pfamtblout": "pfamtbl"}
#: Lines of the tables that differ between any two runs: the tail's directory and date.
_RUN_LINES = re.compile(rb"^# (Current dir|Date):")


def _scale_outputs_equal(folders: list) -> bool:
    """Whether the runs in ``folders`` wrote the same outputs byte for byte (each non-empty), but
    the tail's directory and date lines."""
    def steady(path: Path) -> bytes:
        data = path.read_bytes() if path.exists() else b""
        return b"".join(line for line in data.splitlines(True) if not _RUN_LINES.match(line))

    for name in SCALE_OUTPUTS.values():
        first = steady(folders[0] / name)
        if not first or any(steady(folder / name) != first for folder in folders[1:]):
            return False
    return True


class _GpuCluster:
    """A dask cluster of one worker a GPU on this host, ``threads`` threads each: dask-cuda's
    ``LocalCUDACluster``, or, without dask-cuda, ``dask scheduler`` and one ``dask worker`` a
    GPU with ``CUDA_VISIBLE_DEVICES`` set to it (what dask-cuda sets). ``address``; ``kind``
    says which; ``close()``."""

    def __init__(self, gpus: int, threads: int, env: dict, work: Path, pinned: bool = True):
        self.processes, self.cluster = [], None
        if not pinned:   # plain dask workers: no CPU affinity set
            self.kind = f"dask scheduler + {gpus} dask worker processes, one GPU each, not pinned"
            self._start_processes(gpus, threads, env, work)
            return
        try:
            from dask_cuda import LocalCUDACluster

            self.cluster = LocalCUDACluster(n_workers=gpus, threads_per_worker=threads, dashboard_address=None)
        except Exception as error:  # noqa: BLE001 - said in the log; the same workers started by hand
            self.kind = (f"dask scheduler + {gpus} dask worker processes, one GPU each (dask_cuda: "
                         f"{type(error).__name__}: {' '.join(str(error).split())[:300]})")
            self._start_processes(gpus, threads, env, work)
        else:
            self.kind = f"dask_cuda.LocalCUDACluster(n_workers={gpus}, threads_per_worker={threads})"
            self.address = self.cluster.scheduler_address

    def _start_processes(self, gpus, threads, env, work) -> None:
        import json
        import shutil

        dask = shutil.which("dask") or "dask"
        scheduler_file = work / "scheduler.json"
        scheduler_file.unlink(missing_ok=True)
        self.processes.append(subprocess.Popen([dask, "scheduler", "--scheduler-file", scheduler_file, "--port", "0",
                                                "--no-dashboard", "--no-show"], env=env, stdout=subprocess.DEVNULL,
                                               stderr=subprocess.DEVNULL))
        for _ in range(600):
            if scheduler_file.exists() and scheduler_file.stat().st_size:
                break
            time.sleep(0.05)
        self.address = json.loads(scheduler_file.read_text())["address"]
        for g in range(gpus):
            self.processes.append(subprocess.Popen(
                [dask, "worker", self.address, "--nthreads", str(threads), "--no-dashboard"],
                env=dict(env, CUDA_VISIBLE_DEVICES=str(g)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        from distributed import Client

        with Client(self.address, set_as_default=False, timeout=60) as client:
            client.wait_for_workers(gpus, timeout=120)

    def cores(self) -> dict:
        """Each worker's cores (the sorted CPU ids it may run on), by address: dask-cuda pins
        each worker to the cores NVML gives for its GPU."""
        from distributed import Client

        with Client(self.address, set_as_default=False, timeout=60) as client:
            found = client.run(os.sched_getaffinity, 0)
        return {address: sorted(ids) for address, ids in found.items()}

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.close()
        for process in reversed(self.processes):
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _ranges(ids: list) -> str:
    """CPU ids as ranges: [0, 1, 2, 5] -> '0-2,5' (and their count)."""
    runs: list = []
    for i in ids:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs) + f" ({len(ids)})"


def part_scale(args, out: Path) -> Path:
    """The ``scale`` part (see the module header): its result file's path."""
    import json

    w = WORKLOADS["scaling"]["scale"]
    os.environ["NCCL_NVLS_ENABLE"] = "0"   # kept off for every process started below (no library here brings NCCL)
    env = _env()
    os.environ["PYTHONPATH"] = env["PYTHONPATH"]   # the cluster's workers import hmmgpu from this checkout
    work = work_dir("scale")
    gpus = gpu_count()
    threads = args.threads
    extra_args = args.scale_args.split()
    slug = "".join(ch for ch in "_".join(extra_args) if ch.isalnum() or ch == "_")
    log_path = result_path(out, "scale", slug, ext="log")
    log = open(log_path, "w")

    def note(line) -> None:
        say("scale", line)
        log.write((line if isinstance(line, str) else json.dumps(line)) + "\n")
        log.flush()

    note(dict(header("scale"), settings=w, gpus=gpus, threads=threads, scale_args=extra_args,
              nccl_nvls_enable=os.environ["NCCL_NVLS_ENABLE"]))
    if gpus < 1:
        raise SystemExit("part scale needs a GPU (nvidia-smi lists none)")
    clock = time.perf_counter()
    fasta = write_proteins(resolve(w["proteins"]), work / "proteins.fa", copies=w["copies"])
    total = residues(fasta)
    if total < w["residues_min"]:
        raise SystemExit(f"{total} residues, fewer than the {w['residues_min']} asked for: raise copies")
    models = write_models(resolve(w["models"]), work / "models.hmm")
    db = work / "proteins.db"
    subprocess.run(["rm", "-rf", str(db)], check=True)
    made = timed([sys.executable, "-m", "hmmgpu", "makedb", fasta, db], env=env)
    fasta.unlink()
    warm = timed([sys.executable, "-m", "hmmgpu", "warmup"], env=env, check=False)
    note(dict(prepared_s=round(time.perf_counter() - clock, 1), residues=total, makedb_s=made["seconds"],
              warmup_s=warm["seconds"], warmup_rc=warm["returncode"]))
    search = [sys.executable, "-m", "hmmgpu", "search", "-o", os.devnull, *extra_args,
              *[x for flag, name in SCALE_OUTPUTS.items() for x in (flag, name)]]
    runs, folders = {}, []

    def run(label, extra) -> float:
        folder = work / label
        subprocess.run(["rm", "-rf", str(folder)], check=True)
        folder.mkdir()
        folders.append(folder)
        got = timed(search + extra + [models, db], env=env, cwd=folder, check=False)
        note(dict(run=label, seconds=got["seconds"], returncode=got["returncode"], command=got["command"],
                  peak_rss_mb=got["peak_rss_mb"], peak_gpu_mb=got["peak_gpu_mb"], stats=got["stats"],
                  stderr_tail=got.get("stderr_tail")))
        runs[label] = got
        return got["seconds"] if got["returncode"] == 0 else None

    chosen = args.scale_runs.split(",")
    one = run("one_gpu", []) if "one_gpu" in chosen else None
    every = run("devices_all", ["--devices", "all"]) if "devices_all" in chosen else None
    dask = cluster = None
    if "dask" in chosen:
        cluster = _GpuCluster(gpus, max(1, threads // gpus), env, work)
        try:
            cores = cluster.cores()
            note(dict(cluster=cluster.kind, address=cluster.address, cores={a: _ranges(c) for a, c in cores.items()},
                      host_cores=_ranges(sorted(os.sched_getaffinity(0)))))
            dask = run("dask", ["--scheduler", cluster.address])
        finally:
            cluster.close()
    if cluster is not None and cluster.cluster is not None and len(set().union(*cores.values())) < len(os.sched_getaffinity(0)):
        # dask-cuda pinned its workers to fewer cores than the host has (NVML's affinity of each
        # GPU): the same cluster unpinned, for the log (the result keeps the LocalCUDACluster's)
        unpinned = _GpuCluster(gpus, max(1, threads // gpus), env, work, pinned=False)
        try:
            note(dict(cluster=unpinned.kind, address=unpinned.address,
                      cores={a: _ranges(c) for a, c in unpinned.cores().items()}))
            run("dask_unpinned", ["--scheduler", unpinned.address])
        finally:
            unpinned.close()
    identical = all(r["returncode"] == 0 for r in runs.values()) and _scale_outputs_equal(folders)
    note(dict(outputs={folder.name: {name: (folder / name).stat().st_size if (folder / name).exists() else None
                                     for name in SCALE_OUTPUTS.values()} for folder in folders}))
    result = dict(device=device_name(), gpus=gpus, date=now(), commit=header("scale")["commit"], residues=total,
                  one_gpu_s=one, devices_all_s=every, dask_s=dask, identical=identical, command=" ".join(sys.argv))
    path = result_path(out, "scale", slug)
    save(result, path)
    note(dict(result=result))
    log.close()
    return path


def main(args) -> int:
    w = WORKLOADS["scaling"]
    parts = args.parts.split(",")
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise SystemExit(f"unknown parts {sorted(unknown)}; choose from {', '.join(PARTS)}")
    if parts == ["scale"]:
        say(f"wrote {part_scale(args, Path(args.out))}")
        return 0
    if "scale" in parts:
        raise SystemExit("part scale runs alone: --parts scale")
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
