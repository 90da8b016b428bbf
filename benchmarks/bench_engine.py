"""Many-model search benchmark: hmmgpu against ``hmmsearch --cpu N`` and ``pyhmmer.hmmsearch``.

    python3 benchmarks/bench_engine.py --data DIR --out OUT [--threads 16] [--workloads e,a,d,c,b,readme]
        [--models MODELS.hmm[.gz]] [--proteins PROTEINS.fa[.gz]] [--c-models A.hmm,B.hmm]

Other inputs than the shared data's: ``--models`` (the many-model file), ``--proteins`` (the
protein set) and ``--c-models`` (paths to the single models of (c)).

Every tool runs as a fresh process and its wall time covers everything a user waits for:
start-up, reading the model file and the sequences, the search, writing ``--tblout``.
hmmsearch is the binary itself (:func:`hmmsearch_binary`), not the Python script in front of
it that the ``hmmer`` wheel installs as its command.
Workloads (issue 7):

* ``e``: (a) on an empty kernel cache (run first: the first search on a fresh machine);
* ``a``: the 600 Pfam-35 models against the 77,801 real proteins (29 M residues), hmmgpu
  (the default ``auto``, ``--backend cuda`` and the CPU route ``--backend hmmer``),
  ``hmmsearch --cpu N`` and
  ``pyhmmer.hmmsearch(all queries, cpus=N)``;
* ``b``: the 600 models against the real set replicated 4x (116 M residues), hmmgpu with
  the default ``auto``; ``--b-models
  START:STOP`` takes a slice of them and ``--b-tools`` some of the tools, so that the
  workload can be split over calls shorter than hmmsearch's whole run (the wall times of
  the slices add up: every tool searches each query on its own);
* ``c``: one model at a time against 116 M residues, five model lengths (hmmgpu with
  ``--backend cuda`` and the default ``auto`` on the FASTA file, and ``--c-made-runs`` on a
  database made by ``hmmgpu makedb`` from it, each table checked against hmmsearch's);
* ``d``: the 600 models against the 2,100-protein sample proteome (``--backend auto``);
* ``f``: Pfam-A's size against a proteome: the 600 models written ``--f-copies`` times (33:
  19,800 queries, Pfam-A 35.0 has 19,632) against the sample proteome; hmmgpu with the
  default ``auto`` (the GPU's filters and pyhmmer's whole pipeline sharing the models),
  ``--backend cuda`` (the filters alone) and the CPU route ``--backend hmmer``;
  ``--f-tools`` picks the baselines (hmmsearch takes minutes here);
* ``g``: the 600 models against the first proteins of the real set, for database sizes between
  (d)'s and (a)'s (``--g-residues``, in millions): where ``auto`` changes route, hmmgpu with the
  default ``auto``, ``--backend cuda`` and the CPU route ``--backend hmmer``, and both baselines;
* ``h``: the first ``--h-models`` models (a list of counts) against the real set: few models
  against (a)'s database, where ``auto`` weighs the CPU route's time against the GPU's start-up;
* ``readme``: the README's first command against ``hmmsearch`` with the same arguments
  (the binary, and the command the ``hmmer`` wheel puts on the PATH);
* ``cpu``: the first ``--cpu-models`` models against the real set with the default backend
  on a machine without a GPU (or ``HMMGPU_NO_GPU=1``), for the CPU route's targets.

Before the timed runs, ``hmmgpu warmup`` compiles every kernel shape into the default cache
(timed and recorded on its own): every hmmgpu run but (e)'s cold one is a warm run.

Tables: hmmgpu's ``--tblout`` must equal pyhmmer's byte for byte (both serial-run
semantics) but for E-values of P-values below the smallest normal double, which pyhmmer
prints and hmmsearch (running with flush-to-zero) and hmmgpu write as 0; and hmmsearch's row for row after splitting on white space (threaded hmmsearch
keeps a run-dependent set of unreported hits, which only changes the name-column width).
Records peak host memory (``ru_maxrss`` of each process) and peak GPU memory (nvidia-smi,
polled), and hmmgpu's end-of-run statistics. Writes ``engine_bench.json`` after every step.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from provenance import commit

ROOT = Path(__file__).resolve().parent.parent
PYHMMER_SCRIPT = """
import sys, time, pyhmmer
hmmfile, seqfile, cpus, tblout = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
with pyhmmer.plan7.HMMFile(hmmfile) as f:
    hmms = list(f)
with pyhmmer.easel.SequenceFile(seqfile, digital=True) as f:
    block = f.read_block()
with open(tblout, "wb") as out:
    for i, hits in enumerate(pyhmmer.hmmsearch(hmms, block, cpus=cpus)):
        hits.write(out, format="targets", header=i == 0)
"""


class GpuMemory:
    """Peak GPU memory in use while a block runs (nvidia-smi polled every 50 ms)."""

    def __enter__(self):
        self.peak = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        if shutil.which("nvidia-smi"):
            self._thread.start()
        return self

    def _poll(self):
        while not self._stop.is_set():
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=5).stdout.split()
                used = int(out[0])
                self.peak = used if self.peak is None else max(self.peak, used)
            except (OSError, ValueError, IndexError, subprocess.SubprocessError):
                return
            time.sleep(0.05)

    def __exit__(self, *exc):
        self._stop.set()


#: GNU time, which starts each command from its own small process: Linux keeps a process's
#: peak resident size across ``exec``, so a command started from this (large) process would
#: report this process's size as its own peak when that is larger.
GNU_TIME = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else None


def run(cmd, env=None) -> dict:
    """Run one process: wall seconds, its peak RSS (MB; the largest of it and the children it
    waited for, through :data:`GNU_TIME` where present, else as ``wait4`` reports it here:
    ``peak_rss_source`` says which), stderr's statistics lines, GPU memory peak."""
    with tempfile.TemporaryFile() as err, tempfile.NamedTemporaryFile("r") as peak, GpuMemory() as gpu:
        launch = [GNU_TIME, "-f", "%M", "-o", peak.name] if GNU_TIME else []
        start = time.perf_counter()
        proc = subprocess.Popen(launch + [str(c) for c in cmd], env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        stderr = err.read().decode(errors="replace")
        reported = peak.read().split()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({proc.returncode}): {stderr[-2000:]}")
    # the backend line at the start ("# hmmgpu VERSION: backend ...") and the statistics at the end
    stats = [line.split(": ", 1)[1] for line in stderr.splitlines() if line.startswith("# hmmgpu")]
    peak_kb = int(reported[-1]) if GNU_TIME and reported and reported[-1].isdigit() else usage.ru_maxrss
    return dict(seconds=wall, peak_rss_mb=peak_kb / 1024, peak_rss_source="GNU time" if GNU_TIME else "wait4",
                peak_gpu_mb=gpu.peak, stats=stats, balance=balance(stats, wall), command=" ".join(map(str, cmd)))


def balance(stats: list, wall: float) -> dict | None:
    """The command's wall time over its workers' busy time per thread (the issue's balance
    target), from hmmgpu's statistics lines: over all their work, and over the Forward/domain
    stage after the filters alone (the models run on pyhmmer's whole pipeline while the GPU
    process started are then left out)."""
    import re

    text = " ".join(stats)
    threads = re.search(r"(\d+) worker threads", text)
    workers = re.search(r"workers ([\d.]+) s", text)
    forward = re.search(r"Forward/domain stage ([\d.]+) s", text)
    if not (threads and workers and forward):
        return None
    n = int(threads.group(1))
    busy, fwd = float(workers.group(1)), float(forward.group(1))
    return dict(threads=n, workers_busy_s=busy, forward_busy_s=fwd,
                wall_over_workers_busy_per_thread=wall / (busy / n) if busy else None,
                wall_over_forward_busy_per_thread=wall / (fwd / n) if fwd else None)


def hmmsearch_binary() -> str:
    """The hmmsearch executable itself: the ``hmmer`` wheel's binary where that wheel is
    installed (its ``hmmsearch`` command on the PATH is a Python script that starts an
    interpreter before running it), else the ``hmmsearch`` on the PATH."""
    try:
        import hmmer
    except ImportError:
        return shutil.which("hmmsearch") or "hmmsearch"
    binary = Path(hmmer.__file__).parent / "data" / "bin" / "hmmsearch"
    return str(binary) if os.access(binary, os.X_OK) else shutil.which("hmmsearch") or "hmmsearch"


HMMSEARCH = hmmsearch_binary()


def median_run(cmd, times: int = 5) -> dict:
    """:func:`run` of ``cmd`` ``times`` times: the run of median wall time."""
    return sorted((run(cmd) for _ in range(times)), key=lambda r: r["seconds"])[times // 2]


def rows(path, split=False):
    with open(path, "rb") as fh:
        lines = [line for line in fh.read().splitlines() if not line.startswith(b"#")]
    return [line.split() for line in lines] if split else lines


#: hmmsearch runs with SSE flush-to-zero: a P-value below the smallest normal double is 0, and
#: so is its E-value (P x Z) in hmmsearch's tables and hmmgpu's, where pyhmmer, which leaves the
#: mode alone, prints P x Z (3.5e-305 for one of (a)'s hits). An E-value pyhmmer prints below
#: the smallest normal double times this bound on Z (no database here has more targets) may be one.
_FLUSHED_BELOW = 2.2250738585072014e-308 * 1e10


def against_pyhmmer(ours, ref) -> str:
    """``equal`` when hmmgpu's table is pyhmmer's byte for byte; ``equal but subnormal
    P-values flushed to 0`` when every difference is a field hmmgpu (as hmmsearch) writes as 0
    and pyhmmer as a number below :data:`_FLUSHED_BELOW`; ``DIFFERENT`` otherwise."""
    a, b = rows(ours), rows(ref)
    if a == b:
        return "equal"
    if len(a) != len(b):
        return "DIFFERENT"
    for x, y in zip(a, b):
        fx, fy = x.split(), y.split()
        if len(fx) != len(fy) or any(u != v and not (u == b"0" and _subnormal(v)) for u, v in zip(fx, fy)):
            return "DIFFERENT"
    return "equal but subnormal P-values flushed to 0"


def _subnormal(field: bytes) -> bool:
    try:
        value = float(field)
    except ValueError:
        return False
    return 0.0 < value < _FLUSHED_BELOW


def python_bytecode() -> str:
    """How this machine's Python processes get their modules' compiled bytecode (every Python
    tool of a run shares the setting: hmmgpu, the pyhmmer script and the GPU process)."""
    if sys.dont_write_bytecode:
        return "not written (PYTHONDONTWRITEBYTECODE): modules without compiled bytecode are compiled at every import"
    return f"cached ({'under ' + sys.pycache_prefix if sys.pycache_prefix else 'beside the sources'})"


class Bench:
    def __init__(self, args):
        self.args = args
        self.out = args.out
        self.work = args.out / "work"
        self.work.mkdir(parents=True, exist_ok=True)
        self.result = dict(benchmark="many-model search", date=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                           commit=commit(), command=" ".join(sys.argv),
                           host=platform.node(), threads=args.threads, versions=self.versions(),
                           python_bytecode=python_bytecode(), workloads={})

    def versions(self):
        import numba
        import pyhmmer

        from hmmgpu._version import __version__

        out = subprocess.run([HMMSEARCH, "-h"], capture_output=True, text=True).stdout
        return dict(hmmgpu=__version__, pyhmmer=pyhmmer.__version__, numba=numba.__version__,
                    python=platform.python_version(), hmmsearch=next((line for line in out.splitlines()
                                                                      if line.startswith("# HMMER")), ""),
                    hmmsearch_binary=HMMSEARCH)

    def save(self):
        with open(self.out / "engine_bench.json", "w") as fh:
            json.dump(self.result, fh, indent=1)

    def hmmgpu(self, models, seqs, tag, extra=(), env=None):
        tbl = self.work / f"{tag}.hmmgpu.tbl"
        cmd = [sys.executable, "-m", "hmmgpu", "search", "--cpu", str(self.args.threads), "-o", os.devnull,
               "--tblout", str(tbl), *extra, str(models), str(seqs)]
        return run(cmd, env=env), tbl

    def hmmsearch(self, models, seqs, tag, cpus=None):
        tbl = self.work / f"{tag}.hmmsearch.tbl"
        cmd = [HMMSEARCH, "--cpu", str(cpus if cpus is not None else self.args.threads), "-o", os.devnull,
               "--tblout", str(tbl), str(models), str(seqs)]
        return run(cmd), tbl

    def pyhmmer(self, models, seqs, tag):
        tbl = self.work / f"{tag}.pyhmmer.tbl"
        cmd = [sys.executable, "-c", PYHMMER_SCRIPT, str(models), str(seqs), str(self.args.threads), str(tbl)]
        return run(cmd), tbl

    def workload(self, name, models, seqs, hmmgpu_runs, with_pyhmmer=True, with_hmmsearch=True):
        """hmmgpu runs (tag -> extra args/env), pyhmmer and hmmsearch on one workload."""
        entry = self.result["workloads"].setdefault(name, {})
        ref = None
        if with_pyhmmer:
            ref, ref_tbl = self.pyhmmer(models, seqs, name)
            entry["pyhmmer"] = ref
            self.save()
        for tag, (extra, env) in hmmgpu_runs.items():
            r, tbl = self.hmmgpu(models, seqs, f"{name}.{tag}", extra, env)
            if ref is not None:
                r["tblout_vs_pyhmmer"] = against_pyhmmer(tbl, ref_tbl)
                r["speedup_vs_pyhmmer"] = ref["seconds"] / r["seconds"]
            entry[f"hmmgpu_{tag}"] = r
            self.save()
            print(f"[{name}] hmmgpu {tag}: {r['seconds']:.2f}s" + (f" (pyhmmer {ref['seconds']:.2f}s) table "
                                                                  f"{r['tblout_vs_pyhmmer']}" if ref else ""), flush=True)
        if with_hmmsearch:
            r, tbl = self.hmmsearch(models, seqs, name)
            r["tblout_rows_equal_hmmgpu"] = {tag: rows(tbl, split=True) == rows(self.work / f"{name}.{tag}.hmmgpu.tbl",
                                                                              split=True)
                                             for tag in hmmgpu_runs}
            entry["hmmsearch"] = r
            for tag in hmmgpu_runs:
                entry[f"hmmgpu_{tag}"]["speedup_vs_hmmsearch"] = r["seconds"] / entry[f"hmmgpu_{tag}"]["seconds"]
            self.save()
            print(f"[{name}] hmmsearch --cpu {self.args.threads}: {r['seconds']:.2f}s", flush=True)
        return entry


def _write_models(src, dst, n=None, first=0):
    """Models ``first`` to ``first + n`` (all from ``first`` when ``n`` is None) of a (gzip) HMM
    file, as plain text."""
    text = _plain(src)
    if n or first:
        records = [r for r in text.split(b"//\n") if r.strip()]
        text = b"//\n".join(records[first:first + n if n else None]) + b"//\n"
    dst.write_bytes(text)
    return dst


def _plain(path) -> bytes:
    """The bytes of a file, gunzipped if it is gzip (by its magic bytes)."""
    data = Path(path).read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def _model_file(data: Path, name: str) -> Path:
    """A model of (c): a path to an HMM file (plain or gzip), or a Pfam accession of ``data``/pfam."""
    path = Path(name)
    return path if path.is_file() else data / "pfam" / f"{name}.hmm.gz"


def _first_residues(src, dst, residues: float):
    """The first records of the FASTA ``src`` that hold about ``residues`` residues (the record
    that passes the count is the last)."""
    out, total = [], 0
    for record in Path(src).read_bytes().split(b"\n>"):
        out.append(record)
        header, _, body = record.partition(b"\n")
        total += len(body) - body.count(b"\n")
        if total >= residues:
            break
    dst.write_bytes(b"\n>".join(out).rstrip(b"\n") + b"\n")
    return dst


def _replicate(src, dst, copies):
    """The FASTA ``src`` written ``copies`` times, names suffixed ``_r1``.. so they stay unique."""
    text = Path(src).read_bytes()
    with open(dst, "wb") as out:
        for r in range(1, copies + 1):
            lines = text.split(b"\n")
            out.write(b"\n".join(line.split(b" ", 1)[0] + b"_r%d" % r + (b" " + line.split(b" ", 1)[1]
                                                                         if b" " in line else b"")
                                 if line.startswith(b">") else line for line in lines))
            out.write(b"\n")
    return dst


def bench_arguments(doc: str) -> argparse.ArgumentParser:
    """The command line every engine benchmark shares (its description: ``doc``'s first line):
    --data (the shared data), --out (results and a work folder), --threads."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    return ap


def main() -> None:
    ap = bench_arguments(__doc__)
    ap.add_argument("--workloads", default="e,a,d,c,readme")
    ap.add_argument("--b-models", default="0:600", help="the slice START:STOP of the 600 models that (b) searches")
    ap.add_argument("--b-tools", default="hmmgpu,pyhmmer,hmmsearch", help="the tools (b) runs")
    ap.add_argument("--models", type=Path, help="the many-model file (plain or gzip; default: "
                    "DATA/pfam_db/pfam35_sample600.hmm.gz): (a), (b), (d), (e), (f), (g), (h) and cpu take its models")
    ap.add_argument("--proteins", type=Path, help="the protein FASTA (plain or gzip; default: "
                    "DATA/seqs/public_proteins.fa.gz): (a), (e), (g), (h) and cpu search it, (b) and (c) it 4 times over")
    ap.add_argument("--c-models", default="PF00005,PF07690,PF00067,PF00873,PF05088",
                    help="the models of (c): Pfam accessions of DATA/pfam, or paths to HMM files")
    ap.add_argument("--c-made-runs", default="cuda,auto,cpu_route",
                    help="hmmgpu's runs of (c) on a database made by hmmgpu makedb (cuda, auto, cpu_route)")
    ap.add_argument("--cpu-models", type=int, default=60, help="models of the cpu workload")
    ap.add_argument("--no-hmmsearch", action="store_true", help="(a) without hmmsearch (a re-check of hmmgpu)")
    ap.add_argument("--a-runs", default="auto,cuda,cpu_route",
                    help="hmmgpu's runs of (a), in this order (auto, cuda, cpu_route)")
    ap.add_argument("--d-runs", default="auto,cuda", help="hmmgpu's runs of (d) (auto, cuda; auto alone without a GPU)")
    ap.add_argument("--f-copies", type=int, default=33, help="how many times (f) repeats the 600 models")
    ap.add_argument("--f-runs", default="auto,cuda,cpu_route", help="hmmgpu's runs of (f) (auto, cuda, cpu_route)")
    ap.add_argument("--f-tools", default="pyhmmer,hmmsearch", help="the baselines (f) runs")
    ap.add_argument("--h-models", default="10,30,100", help="the model counts of (h)")
    ap.add_argument("--g-residues", default="0.7,1.5,3,6,12",
                    help="the database sizes of (g), in millions of residues (the first proteins of the real set)")
    args = ap.parse_args()
    bench = Bench(args)
    work = bench.work
    todo = args.workloads.split(",")
    many = args.models or args.data / "pfam_db" / "pfam35_sample600.hmm.gz"
    pfam600 = _write_models(many, work / "pfam600.hmm")
    proteins = work / "proteins.fa"  # plain FASTA: every tool reads the same file
    source = args.proteins or args.data / "seqs" / "public_proteins.fa.gz"
    proteins.write_bytes(_plain(source))
    bench.result["inputs"] = dict(models=str(many), proteins=str(source))
    env_cold = dict(os.environ, XDG_CACHE_HOME=str(work / "cold-cache"), HMMGPU_CACHE_DIR="")
    env_cold.pop("HMMGPU_CACHE_DIR")
    #: hmmgpu's runs by tag: extra arguments and environment
    routes = {"auto": ([], None), "cuda": (["--backend", "cuda"], None), "cpu_route": (["--backend", "hmmer"], None)}
    if (any(w in todo for w in ("a", "b", "c", "g", "h")) or ("d" in todo and "cuda" in args.d_runs.split(","))
            or ("f" in todo and args.f_runs != "cpu_route")):
        bench.result["warmup"] = run([sys.executable, "-m", "hmmgpu", "warmup"])
        bench.save()
    if "e" in todo:
        entry = bench.result["workloads"].setdefault("e", {})
        r, tbl = bench.hmmgpu(pfam600, proteins, "e.cold", routes["cuda"][0], env_cold)
        entry["hmmgpu_cuda_cold"] = r
        r2, tbl2 = bench.hmmgpu(pfam600, proteins, "e.warm", routes["cuda"][0], env_cold)
        entry["hmmgpu_cuda_warm_same_cache"] = r2
        entry["cold_minus_warm_seconds"] = r["seconds"] - r2["seconds"]
        entry["tables_equal"] = rows(tbl) == rows(tbl2)
        bench.save()
        print(f"[e] cold {r['seconds']:.2f}s, warm {r2['seconds']:.2f}s", flush=True)
    if "a" in todo:
        bench.workload("a", pfam600, proteins, {tag: routes[tag] for tag in args.a_runs.split(",")},
                       with_hmmsearch=not args.no_hmmsearch)
    if "d" in todo:
        bench.workload("d", pfam600, ROOT / "pfam_samples" / "938293.PRJEB85.HG003687.faa",
                       {tag: routes[tag] for tag in args.d_runs.split(",")})
    if "f" in todo:
        models = work / "pfam_a_size.hmm"
        models.write_bytes(pfam600.read_bytes() * args.f_copies)
        tools = args.f_tools.split(",")
        bench.result["f_copies"] = args.f_copies
        bench.workload("f", models, ROOT / "pfam_samples" / "938293.PRJEB85.HG003687.faa",
                       {tag: routes[tag] for tag in args.f_runs.split(",") if tag},
                       with_pyhmmer="pyhmmer" in tools, with_hmmsearch="hmmsearch" in tools)
    if "g" in todo:
        for millions in args.g_residues.split(","):
            first = _first_residues(proteins, work / f"proteins_{millions}M.fa", float(millions) * 1e6)
            bench.workload(f"g.{millions}M", pfam600, first, routes)
    if "h" in todo:
        for n in args.h_models.split(","):
            models = _write_models(many, work / f"pfam_h{n}.hmm", int(n))
            bench.workload(f"h.{n}", models, proteins, routes)
    if "readme" in todo:  # the median of five runs of each (a fraction of a second each)
        entry = bench.result["workloads"].setdefault("readme", {})
        samples, proteome = ROOT / "pfam_samples" / "samples.hmm", ROOT / "pfam_samples" / "938293.PRJEB85.HG003687.faa"
        ours = median_run([sys.executable, "-m", "hmmgpu", "search", "--tblout", str(work / "readme.tbl"),
                           str(samples), str(proteome)])
        ref = median_run([HMMSEARCH, "--tblout", str(work / "readme.ref.tbl"), str(samples), str(proteome)])
        wheel = shutil.which("hmmsearch")  # the command pip's hmmer wheel installs, as users run it
        command = median_run([wheel, "--tblout", str(work / "readme.ref2.tbl"), str(samples), str(proteome)]) \
            if wheel and os.path.realpath(wheel) != os.path.realpath(HMMSEARCH) else None
        entry.update(hmmgpu=ours, hmmsearch=ref, ratio=ours["seconds"] / ref["seconds"],
                     rows_equal=rows(work / "readme.tbl", True) == rows(work / "readme.ref.tbl", True))
        if command:
            entry.update(hmmsearch_command=command, ratio_to_command=ours["seconds"] / command["seconds"])
        bench.save()
        print(f"[readme] hmmgpu {ours['seconds']:.2f}s, hmmsearch {ref['seconds']:.2f}s"
              + (f", the wheel's hmmsearch command {command['seconds']:.2f}s" if command else "") + " (medians of 5)",
              flush=True)
    if "cpu" in todo:
        models = _write_models(many, work / "pfam_cpu.hmm", args.cpu_models)
        bench.workload("cpu", models, proteins, {"default": ([], dict(os.environ, HMMGPU_NO_GPU="1"))})
    if "c" in todo or "b" in todo:
        x4 = _replicate(proteins, work / "proteins_x4.fa", 4)
    if "c" in todo:
        entry = bench.result["workloads"].setdefault("c", {})
        made = work / "proteins_x4.db"
        bench.result["c_makedb"] = run([sys.executable, "-m", "hmmgpu", "makedb", str(x4), str(made)])
        for name in args.c_models.split(","):
            acc = Path(name).name.split(".hmm")[0]
            model = _write_models(_model_file(args.data, name), work / f"{acc}.hmm")
            entry[acc] = bench.workload(f"c.{acc}", model, x4, {tag: routes[tag] for tag in ("cuda", "auto")})
            for tag in filter(None, args.c_made_runs.split(",")):  # the same search of the made database
                r, tbl = bench.hmmgpu(model, made, f"c.{acc}.made.{tag}", routes[tag][0])
                r["speedup_vs_hmmsearch"] = entry[acc]["hmmsearch"]["seconds"] / r["seconds"]
                r["tblout_rows_equal_hmmsearch"] = rows(tbl, split=True) == rows(
                    work / f"c.{acc}.hmmsearch.tbl", split=True)
                entry[acc][f"hmmgpu_{tag}_made_database"] = r
                bench.save()
                print(f"[c.{acc}] hmmgpu {tag} on a made database: {r['seconds']:.2f}s, rows equal hmmsearch's: "
                      f"{r['tblout_rows_equal_hmmsearch']}", flush=True)
    if "b" in todo:
        start, stop = (int(x) for x in args.b_models.split(":"))
        models = _write_models(many, work / "pfam_b.hmm",
                               stop - start, start)
        tools = args.b_tools.split(",")
        bench.result["b_models"] = args.b_models
        bench.workload("b", models, x4, {"auto": ([], None)} if "hmmgpu" in tools else {},
                       with_pyhmmer="pyhmmer" in tools, with_hmmsearch="hmmsearch" in tools)
    bench.save()


if __name__ == "__main__":
    main()
