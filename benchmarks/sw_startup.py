"""Where a short ``hmmgpu sw`` run's wall time goes, and two versions of the code side by side (GPU).

    python3 benchmarks/sw_startup.py --base DIR [--repeats 7] [--proteins 2000] [--cudasw DIR] [--out DIR]

The 20 classic queries of CUDASW++4's archive against the 77,801 real proteins, the command of
``bench_sw --e2e`` (top 10, gap costs 10/1, tabular, ``--stats``), as whole processes timed from
outside: the tree ``--base`` (a copy of the hmmgpu package of an earlier commit, e.g. ``git
archive COMMIT hmmgpu | tar -x -C DIR``) and this tree, run in turns (``--repeats`` each, the
median reported), after one untimed run of each (numba's cache of each tree's traceback passes
filled). Variants of this tree with one of its settings changed back show what each one is
worth: ``new, switch interval 5 ms`` (CPython's default instead of
:data:`hmmgpu.sw.cli.SWITCH_INTERVAL`) and ``1 ms``; ``base, switch interval 0.2 ms`` is the
earlier code with the interval alone changed.

Each process's timeline (``--timeline-run``: this file wraps ``hmmgpu.cli.main`` and marks,
from the process's start, when the command started, the device's context was made, the
device opened, the kernels checked, the database uploaded (the scanner made), each batch's
scores arrived, the traceback passes loaded, the first and last traceback ran, the output
ended, and the process's last moment before its exit; the wall time from outside minus that
last moment is the exit; and how many CUDA driver calls were made before the first scores and
after, with the seconds from each call to the interpreter's lock back in the caller's hands:
calls of a few microseconds that take milliseconds waited for the lock) comes from two more
runs of each tree. The outputs of the two trees
must be identical (checked, every variant's). ``--proteins N`` also times one run of N real proteins drawn
from the database (``bench_sw --e2e``'s sample) for each variant; ``--cudasw DIR`` builds
CUDASW++4 and times its ``align`` on the 20 queries (``--repeats``, median).
Writes ``sw_startup_<device>_<date>.json`` and ``.txt``.
"""
from __future__ import annotations

import sys
import time

_T0 = time.perf_counter()


def _timeline_run(argv) -> None:
    """Run ``hmmgpu sw ARGV`` in this process as the command line does, its moments marked
    (see the module text); one ``# timeline:`` line on standard error before the exit."""
    import importlib.abc
    import importlib.machinery
    import threading

    marks, lock = {}, threading.Lock()

    def mark(name, first=True):
        now = time.perf_counter() - _T0
        with lock:
            if not first or name not in marks:
                marks[name] = now

    def wrap(owner, attribute, before=None, after=None, every=False):
        original = getattr(owner, attribute, None)
        if original is None:
            return
        is_class_method = isinstance(owner.__dict__.get(attribute), classmethod)
        function = original.__func__ if is_class_method else original

        def wrapped(*args, **kwargs):
            if before:
                mark(before, not every)
            try:
                return function(*args, **kwargs)
            finally:
                if after:
                    mark(after, not every)

        setattr(owner, attribute, classmethod(wrapped) if is_class_method else wrapped)

    def patch_context(m):
        wrap(m, "open_primary_context", after="context made")

    def patch_device(m):
        wrap(m.GpuDevice, "open", after="device opened")

    def patch_launch(m):
        wrap(m, "compile_for", before="kernels checked (start)", after="kernels checked")
        wrap(m.GpuScanner, "__init__", before="scanner (start)", after="scanner made (database uploaded)")
        wrap(m.GpuScanner, "_enqueue", before="first batch queued (start)", after="first batch queued")
        wrap(m.GpuScanner, "_collect", after="last scores", every=True)
        wrap(m.GpuScanner, "_collect", after="first scores")

    calls = {"before": [0, 0.0, 0.0], "after": [0, 0.0, 0.0]}  # driver calls: count, seconds, longest

    def patch_driver(m):
        original = m.call

        def call(name, *args):
            t = time.perf_counter()
            try:
                return original(name, *args)
            finally:
                spent = time.perf_counter() - t  # the call and the wait for the interpreter's lock after it
                with lock:
                    c = calls["after" if "first scores" in marks else "before"]
                    c[0], c[1], c[2] = c[0] + 1, c[1] + spent, max(c[2], spent)

        m.call = call

    def patch_traceback(m):
        wrap(m, "warm", after="traceback passes loaded")

    def patch_api(m):
        wrap(m.SwSearch, "_trace", before="first traceback (start)")
        wrap(m.SwSearch, "_trace", after="last traceback", every=True)

    def patch_sw_cli(m):
        wrap(m, "_search_on_one", after="output written")
        wrap(m, "run", before="command (start)")

    def patch_cli(m):
        if hasattr(m, "end_process"):  # the process ends in main: the timeline first
            original = m.end_process

            def end_process(status):
                report()
                original(status)

            m.end_process = end_process

    patches = {"hmmgpu.gpu.runtime.context": patch_context, "hmmgpu.gpu.runtime.device": patch_device,
               "hmmgpu.gpu.sw.launch": patch_launch, "hmmgpu.sw.traceback": patch_traceback,
               "hmmgpu.gpu.runtime.driver": patch_driver, "hmmgpu.sw.api": patch_api, "hmmgpu.sw.cli": patch_sw_cli, "hmmgpu.cli": patch_cli}

    class Patcher(importlib.abc.MetaPathFinder):
        """Each module of ``patches`` patched as soon as it has run (importing them here first
        would change the order of the command's start)."""

        def find_spec(self, name, path, target=None):
            if name not in patches:
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is not None and spec.loader is not None:
                run = spec.loader.exec_module

                def exec_module(module):
                    run(module)
                    patches[name](module)

                spec.loader.exec_module = exec_module
            return spec

    def report():
        from hmmgpu.sw.timing import process_age

        mark("end")
        age = process_age()
        shift = (age - marks["end"]) if age is not None else 0.0  # this file's start, from the process's
        print("# timeline: " + ", ".join(f"{k}={v + shift:.3f}" for k, v in sorted(marks.items(), key=lambda kv: kv[1]))
              + f"; start-up before this file {shift:.3f}; driver calls (with the lock's wait after each) "
              + ", ".join(f"{k} the first scores {n} in {t:.3f} s (longest {m * 1e3:.1f} ms)"
                          for k, (n, t, m) in calls.items()), file=sys.stderr, flush=True)

    sys.meta_path.insert(0, Patcher())
    from hmmgpu.cli import main

    sys.argv = ["hmmgpu", *argv]
    status = main()  # a tree with end_process ends the process in it (after report)
    report()  # a tree without: the interpreter's own exit, as its command line has it
    sys.exit(status)


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "--timeline-run":
    _timeline_run(sys.argv[2:])

import argparse  # noqa: E402 - the timeline run above needs none of what follows
import os  # noqa: E402
import re  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, WORKLOADS, header, resolve, result_path, save, say, today  # noqa: E402


def _run(root: Path, argv: list, patch: str = "", timeline: bool = False) -> dict:
    """One ``hmmgpu sw`` process of the tree ``root``: wall seconds from outside, its ``--stats``
    and ``# timeline`` lines."""
    if timeline:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--timeline-run", "sw", *argv]
    elif patch:
        cmd = [sys.executable, "-c", f"import sys; {patch}; from hmmgpu.cli import main; main()", "sw", *argv]
    else:
        cmd = [sys.executable, "-m", "hmmgpu", "sw", *argv]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    start = time.perf_counter()
    p = subprocess.run(cmd, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    if p.returncode:
        raise RuntimeError(f"{' '.join(cmd)} in {root} failed ({p.returncode}): {p.stderr[-3000:]}")
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("# hmmgpu sw:") or ln.startswith("# timeline:")]
    return dict(seconds=round(wall, 3), lines=lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=Path, required=True, help="a tree with the hmmgpu package of the earlier code")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--proteins", type=int, default=2000, help="real proteins as queries, one run a tree (0: none)")
    ap.add_argument("--cudasw", type=Path, default=None, help="CUDASW++4's folder (tarball, build.sh): time its align")
    ap.add_argument("--real", default=WORKLOADS["sw"]["default"]["real"],
                    help="the database's proteins (a FASTA; default the workload's real proteins)")
    ap.add_argument("--out", default=os.environ.get("OUT", str(ROOT / "benchmarks" / "results")))
    args = ap.parse_args()
    import bench_sw

    base, new = args.base.resolve(), ROOT
    res = header("sw startup")
    path = result_path(Path(args.out), "sw_startup")
    log = []

    def note(*parts):
        log.append(" ".join(str(p) for p in parts))
        say(log[-1])
        path.with_suffix(".txt").write_text("\n".join(log) + "\n")

    work = Path(tempfile.mkdtemp(prefix="hmmgpu-sw-startup-"))
    note(f"# sw startup on {res['device']}, commit {res['commit']}, base {base}; work {work}")
    real = resolve(args.real).resolve()
    subprocess.run([sys.executable, "-m", "hmmgpu", "makedb", str(real), str(work / "hdb")], check=True,
                   capture_output=True, cwd=new)
    cudasw = args.cudasw or Path(".bench/cudasw4")
    q20 = bench_sw.queries_from_tarball(cudasw.resolve(), work)

    def argv(queries, out):
        return ["--outfmt", "6", "--max-hits", "10", "-E", "1e30", "--gapopen", str(bench_sw.CUDASW4_GAP_OPEN),
                "--gapextend", str(bench_sw.GAP_EXTEND), "--stats", "-o", str(out), str(queries), str(work / "hdb")]

    variants = {"base": (base, ""), "new": (new, ""),
                "new, switch interval 5 ms": (new, "import hmmgpu.sw.cli as c; c.SWITCH_INTERVAL = 0.005"),
                "new, switch interval 1 ms": (new, "import hmmgpu.sw.cli as c; c.SWITCH_INTERVAL = 0.001"),
                "base, switch interval 0.2 ms": (base, "sys.setswitchinterval(0.0002)")}
    outputs = {}
    for name, (root, patch) in variants.items():  # untimed: numba's cache of each tree filled, files read once
        out = work / f"variant{len(outputs)}.tsv"
        _run(root, argv(q20, out), patch)
        outputs[name] = out.read_bytes()
    same = len(set(outputs.values())) == 1
    note(f"20 queries: every variant's output identical: {same} ({len(outputs['new'])} bytes)")
    runs = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name, (root, patch) in variants.items():
            runs[name].append(_run(root, argv(q20, work / "timed.tsv"), patch))
    res["twenty"] = {}
    for name, rs in runs.items():
        secs = [r["seconds"] for r in rs]
        median = sorted(rs, key=lambda r: r["seconds"])[len(rs) // 2]
        res["twenty"][name] = dict(median_s=statistics.median(secs), all_s=secs, median_stats=median["lines"])
        note(f"{name}, 20 queries: median {statistics.median(secs):.3f} s, all {secs}",
             *[f"\n  {ln}" for ln in median["lines"]])
    save(res, path)
    res["timelines"] = {}
    for name in ("base", "new"):
        root = variants[name][0]
        res["timelines"][name] = []
        for _ in range(2):
            try:
                r = _run(root, argv(q20, work / "timeline.tsv"), timeline=True)
            except RuntimeError as error:  # the timed runs above stand; say why this one has none
                note(f"{name} timeline failed: {error}")
                break
            res["timelines"][name].append(r)
            line = next((ln for ln in r["lines"] if ln.startswith("# timeline:")), "")
            end = re.search(r"\bend=(\S+?),?(?:\s|;|$)", line)
            exit_s = r["seconds"] - float(end.group(1)) if end else float("nan")
            note(f"{name} timeline (wall {r['seconds']:.3f} s from outside, exit after 'end' {exit_s:.3f} s):\n  {line}")
    save(res, path)
    if args.proteins:
        from hmmgpu.formats.seqdb import open_database

        proteins = bench_sw._sample_proteins(open_database(work / "hdb"), args.proteins, work / "proteins.fa")
        res["proteins"] = {}
        for k, (name, (root, patch)) in enumerate(variants.items()):
            out = work / f"proteins{k}.tsv"
            r = _run(root, argv(proteins, out), patch)
            res["proteins"][name] = dict(seconds=r["seconds"], stats=r["lines"])
            note(f"{name}, {args.proteins} proteins: {r['seconds']:.3f} s", *[f"\n  {ln}" for ln in r["lines"]])
        same = len({(work / f"proteins{k}.tsv").read_bytes() for k in range(len(variants))}) == 1
        res["proteins"]["outputs_identical"] = same
        note(f"{args.proteins} proteins: every variant's output identical: {same}")
        save(res, path)
    if args.cudasw:
        bin_dir = bench_sw.build_cudasw(args.cudasw.resolve(), work / "build")
        (work / "cdb").mkdir()
        subprocess.run([str(bin_dir / "makedb"), str(real), str(work / "cdb" / "db")], check=True, capture_output=True)
        cmd = bench_sw._cudasw_align(bin_dir, q20, work / "cdb" / "db", work / "c20.tsv")
        secs = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True)
            secs.append(round(time.perf_counter() - start, 3))
        res["cudasw4_20_s"] = dict(median_s=statistics.median(secs), all_s=secs)
        note(f"CUDASW++4 align, 20 queries: median {statistics.median(secs):.3f} s, all {secs}")
        save(res, path)
    res["date"] = today()
    save(res, path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
