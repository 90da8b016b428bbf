"""What every benchmark shares: the workload table, inputs, timed processes, table checks, result files.

Not a benchmark itself: ``run.py`` imports the benchmarks, and they import this.
"""
from __future__ import annotations

import datetime
import gzip
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:  # hmmgpu from this checkout, whatever the working directory
    sys.path.insert(0, str(ROOT))

from provenance import commit  # noqa: E402

#: The workloads and tuning values of every benchmark (benchmarks/workloads.json).
WORKLOADS = json.loads((HERE / "workloads.json").read_text())


def shared_data() -> Path:
    """The shared data: ``HMMGPU_SHARED_DATA`` (``.bench/data`` on the GPU machine), else ``../shared/data``."""
    given = os.environ.get("HMMGPU_SHARED_DATA")
    return Path(given) if given else ROOT.parent / "shared" / "data"


def shared_proteins(data: Path):
    """The shared proteins (``seqs/public_proteins.fa.gz`` of ``data``) as a pyhmmer digital
    block, and the same sequences by name."""
    from pyhmmer.easel import Alphabet, SequenceFile

    with SequenceFile(str(data / "seqs" / "public_proteins.fa.gz"), digital=True, alphabet=Alphabet.amino()) as f:
        proteins = f.read_block()
    return proteins, {seq.name: seq for seq in proteins}


def shared_pfam_model(data: Path, name: str):
    """The shared Pfam model ``name`` (``pfam/NAME.hmm.gz`` of ``data``), a pyhmmer HMM."""
    from pyhmmer.plan7 import HMMFile

    with gzip.open(data / "pfam" / f"{name}.hmm.gz") as raw, HMMFile(raw) as hf:
        return hf.read()


def best_hits(hmm, proteins, by_name, most: int, cpus: int) -> list:
    """The ``most`` best hits of ``hmm`` among ``proteins`` (pyhmmer's search, ``by_name``: the
    sequences by name, as :func:`shared_proteins` gives them): (name, digital codes uint8) each."""
    import numpy as np
    import pyhmmer

    hits = list(next(pyhmmer.hmmsearch([hmm], proteins, cpus=cpus)))[:most]
    return [(hit.name, np.asarray(by_name[hit.name].sequence, np.uint8)) for hit in hits]


def shared_model_paths(data: Path, wanted=()) -> list:
    """The shared Pfam and CUDAMPF model files of ``data`` (``pfam/``, ``cudampf/``), those whose
    name contains one of ``wanted`` (every one if none is given)."""
    paths = sorted((data / "pfam").glob("*.hmm.gz")) + sorted((data / "cudampf").glob("*.hmm.gz"))
    return [p for p in paths if not wanted or any(w in p.name for w in wanted)]


def resolve(ref: str, data: Path | None = None) -> Path:
    """A workload's input: ``data:PATH`` (in the shared data), ``repo:PATH`` (in this checkout) or a path."""
    if ref.startswith("data:"):
        return (data or shared_data()) / ref[5:]
    if ref.startswith("repo:"):
        return ROOT / ref[5:]
    return Path(ref)


# ---------------------------------------------------------------- the machine


def device_name() -> str:
    """``h200``, ``h100``, ... from the first GPU's name, or ``<N>cores`` without a GPU (the results' device field)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    name = out.strip().splitlines()[0] if out.strip() else ""
    found = re.search(r"\b([A-Z]\d{2,4})\b", name)
    if found:
        return found.group(1).lower()
    if name:
        return re.sub(r"[^a-z0-9]+", "", name.lower())[:16] or "gpu"
    return f"{cores()}cores"


def gpu_count() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(line.startswith("GPU ") for line in out.splitlines())


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def today() -> str:
    return datetime.date.today().isoformat()


def now() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def hmmsearch_binary() -> str:
    """The hmmsearch executable itself: the ``hmmer`` wheel's binary where that wheel is
    installed (its ``hmmsearch`` command on the PATH is a Python script that starts an
    interpreter first), else the ``hmmsearch`` on the PATH."""
    try:
        import hmmer
    except ImportError:
        return shutil.which("hmmsearch") or "hmmsearch"
    binary = Path(hmmer.__file__).parent / "data" / "bin" / "hmmsearch"
    return str(binary) if os.access(binary, os.X_OK) else shutil.which("hmmsearch") or "hmmsearch"


def versions() -> dict:
    """hmmgpu's, pyhmmer's, numba's, numpy's, Python's and hmmsearch's versions."""
    out = dict(python=platform.python_version())
    for name in ("hmmgpu._version", "pyhmmer", "numba", "numpy", "pyopal"):
        try:
            module = __import__(name, fromlist=["__version__"])
            out[name.split(".")[0]] = module.__version__
        except Exception:  # noqa: BLE001 - a missing package is recorded as such
            out[name.split(".")[0]] = None
    try:
        text = subprocess.run([hmmsearch_binary(), "-h"], capture_output=True, text=True, timeout=20).stdout
        out["hmmsearch"] = next((line[2:] for line in text.splitlines() if line.startswith("# HMMER")), None)
    except (OSError, subprocess.SubprocessError):
        out["hmmsearch"] = None
    return out


def python_bytecode() -> str:
    """How this run's Python processes get their compiled bytecode (every tool shares it)."""
    if sys.dont_write_bytecode:
        return "not written (PYTHONDONTWRITEBYTECODE): modules without bytecode are compiled at every import"
    return f"cached ({'under ' + sys.pycache_prefix if sys.pycache_prefix else 'beside the sources'})"


def header(benchmark: str) -> dict:
    """The fields every result starts with."""
    return dict(benchmark=benchmark, device=device_name(), date=now(), commit=commit(), command=" ".join(sys.argv),
                host=platform.node(), cores=cores(), versions=versions(), python_bytecode=python_bytecode())


# ---------------------------------------------------------------- results


def result_path(out: Path, *parts: str, ext: str = "json") -> Path:
    """``OUT/<parts>_<device>_<date>.<ext>``: the name benchmarks/results/ keeps (newest per name and device)."""
    out.mkdir(parents=True, exist_ok=True)
    return out / f"{'_'.join(p for p in parts if p)}_{device_name()}_{today()}.{ext}"


def save(result: dict, path: Path) -> None:
    """Written after every step: a run that fails leaves what it measured."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".part")
    tmp.write_text(json.dumps(result, indent=1, default=str) + "\n")
    tmp.replace(path)


def say(*args) -> None:
    print(*args, flush=True)


# ---------------------------------------------------------------- inputs


def plain(path) -> bytes:
    """A file's bytes, gunzipped if it is gzip (by its magic bytes)."""
    data = Path(path).read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def write_models(src, dst: Path, first: int = 0, stop: int | None = None) -> Path:
    """Models ``first`` to ``stop`` (all when None) of a (gzip) HMM file, as plain text."""
    text = plain(src)
    if first or stop is not None:
        records = [r for r in text.split(b"//\n") if r.strip()]
        text = b"//\n".join(records[first:stop]) + b"//\n"
    dst.write_bytes(text)
    return dst


def count_models(path) -> int:
    return plain(path).count(b"\n//")


def write_proteins(src, dst: Path, copies: int = 1) -> Path:
    """A (gzip) FASTA file as plain text, ``copies`` times, the copies' names suffixed ``_r1``.. (unique)."""
    text = plain(src)
    with open(dst, "wb") as out:
        if copies == 1:
            out.write(text)
        for r in range(1, copies + 1) if copies > 1 else ():
            for line in text.split(b"\n"):
                if line.startswith(b">"):
                    name, sep, rest = line.partition(b" ")
                    line = name + b"_r%d" % r + sep + rest
                out.write(line + b"\n")
    return dst


def residues(fasta) -> int:
    """Residues of a plain FASTA file (every byte of its sequence lines but white space)."""
    total = 0
    with open(fasta, "rb") as fh:
        for line in fh:
            if not line.startswith(b">"):
                total += len(line.strip())
    return total


def work_dir(name: str) -> Path:
    """A scratch folder outside $OUT (only result files go back from the GPU machine)."""
    base = Path(os.environ.get("BENCH_WORK", tempfile.gettempdir())) / f"hmmgpu-bench-{name}"
    base.mkdir(parents=True, exist_ok=True)
    return base


# ---------------------------------------------------------------- timed processes


class GpuMemory:
    """Peak GPU memory in use (MiB) while a block runs (nvidia-smi polled every 50 ms)."""

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


#: GNU time starts each command from its own small process: Linux keeps a process's peak
#: resident size across ``exec``, so a command started from this (large) process would
#: report this process's size as its own when that is larger.
GNU_TIME = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else None


def timed(cmd, env=None, check: bool = True, cwd=None) -> dict:
    """Run one process (in the folder ``cwd``): wall seconds, peak RSS (MB; GNU time where
    present, else ``wait4``), peak GPU memory, and its stderr's ``# hmmgpu`` lines."""
    with tempfile.TemporaryFile() as err, tempfile.NamedTemporaryFile("r") as peak, GpuMemory() as gpu:
        launch = [GNU_TIME, "-f", "%M", "-o", peak.name] if GNU_TIME else []
        start = time.perf_counter()
        proc = subprocess.Popen(launch + [str(c) for c in cmd], env=env, stdout=subprocess.DEVNULL, stderr=err, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        code = os.waitstatus_to_exitcode(status)
        err.seek(0)
        stderr = err.read().decode(errors="replace")
        reported = peak.read().split()
    if code != 0 and check:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({code}): {stderr[-2000:]}")
    peak_kb = int(reported[-1]) if GNU_TIME and reported and reported[-1].isdigit() else usage.ru_maxrss
    stats = [line.split(": ", 1)[1] for line in stderr.splitlines() if line.startswith("# hmmgpu") and ": " in line]
    return dict(seconds=round(wall, 3), peak_rss_mb=round(peak_kb / 1024, 1), peak_gpu_mb=gpu.peak, returncode=code,
                stats=stats, command=" ".join(map(str, cmd)), **({"stderr_tail": stderr[-2000:]} if code else {}))


def median_run(cmd, times: int, env=None) -> dict:
    """:func:`timed` ``times`` times: the run of median wall time, with every time."""
    runs = sorted((timed(cmd, env) for _ in range(max(1, times))), key=lambda r: r["seconds"])
    best = dict(runs[len(runs) // 2])
    if len(runs) > 1:
        best["all_seconds"] = [r["seconds"] for r in runs]
    return best


def engine_stats(lines: list) -> dict:
    """hmmgpu's end-of-run statistics (its ``# hmmgpu:`` lines) as numbers."""
    text = "\n".join(lines)

    def number(pattern, cast=float):
        found = re.search(pattern, text)
        return cast(found.group(1)) if found else None

    cpu_line = re.search(r"CPU time: (.*)", text)
    cpu = {k: float(v) for k, v in re.findall(r"(\w+) ([\d.]+) s", cpu_line.group(1))} if cpu_line else None
    targets_line = re.search(r"targets through each stage[^:]*: (.*)", text)
    targets = {k: int(v) for k, v in re.findall(r"([A-Za-z ]+?) (\d+)(?:,|$)", targets_line.group(1))} \
        if targets_line else None
    out = dict(
        wall_s=number(r"wall ([\d.]+) s"), threads=number(r"(\d+) worker threads", int),
        processes=number(r"(\d+) worker processes", int), tasks=number(r"(\d+) tasks", int),
        gpu_busy_s=number(r"GPU busy ([\d.]+) s"), workers_busy_s=number(r"workers ([\d.]+) s"),
        forward_busy_s=number(r"Forward/domain stage ([\d.]+) s"), pipeline_busy_s=number(r"whole pipeline ([\d.]+) s"),
        filters_ready_s=number(r"filters ready after ([\d.]+) s"), cpu_seconds=cpu,
        fallback_targets=number(r"(\d+) targets sent to pyhmmer's pipeline", int)   # --postfilter hmmgpu's line
        or number(r"(\d+) left to pyhmmer undecided", int),
        targets={k.strip(): v for k, v in targets.items()} if targets else None, backend=lines[0] if lines else None)
    busy, n = out["workers_busy_s"], out["threads"] or out["processes"]
    if busy and n and out["wall_s"]:
        out["wall_over_busy_per_thread"] = round(out["wall_s"] / (busy / n), 3)
    return out


# ---------------------------------------------------------------- tables


def table_rows(path, split: bool = True) -> list:
    """A ``--tblout`` file's rows (comment lines left out), split on white space unless ``split`` is False."""
    with open(path, "rb") as fh:
        lines = [line for line in fh.read().splitlines() if not line.startswith(b"#")]
    return [line.split() for line in lines] if split else lines


def compare_tables(ours, ref) -> dict:
    """``rows_equal``: row for row after splitting on white space (threaded hmmsearch pads the
    name column by a run-dependent set of unreported hits); ``bytes_equal``: byte for byte."""
    a, b = table_rows(ours), table_rows(ref)
    out = dict(rows_equal=a == b, bytes_equal=table_rows(ours, False) == table_rows(ref, False), rows=len(a),
               reference_rows=len(b))
    if a != b:
        first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        out["first_difference"] = first
    return out
