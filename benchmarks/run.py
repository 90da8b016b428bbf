"""The benchmarks of hmmgpu, by name.

    python3 benchmarks/run.py NAME [options]        (NAME -h for its options)

    e2e       hmmgpu search against hmmsearch --cpu N and pyhmmer.hmmsearch(cpus=N), as shipped
              and with flush-to-zero; tables checked against hmmsearch's (GPU optional)
    kernels   GCUPS of the SSV/MSV, Viterbi filter and Forward parser kernels against HMMER's SSE code
              (GPU); --ptx: registers and spills of every kernel shape, without a GPU (ptxas)
    sw        Smith-Waterman search against CUDASW++4 and pyopal (GPU); --sass: the cell loop's
              SASS and bounds without a GPU; --shape-sweep: the kernel shapes' speeds (GPU)
    scaling   the search over threads and GPUs; pyhmmer's stage over threads and processes
    prune     keep only the newest result per benchmark and device in benchmarks/results/

Workloads and settings: benchmarks/workloads.json. Inputs: the shared data
(HMMGPU_SHARED_DATA, else ../shared/data). Results: --out, default $OUT where set (the
GPU machine), else benchmarks/results/, named <benchmark>[_<workload>]_<device>_<date>.<ext>.
On the GPU machine, benchmarks/gpu_session.sh sets up the environment and calls this.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

BENCHMARKS = ("e2e", "kernels", "sw", "scaling")


def _module(name: str):
    import importlib

    return importlib.import_module(f"bench_{name}")


def prune(args) -> int:
    """Keep, per (benchmark, device, extension), the file of the newest date in its name (ties:
    the file committed last, then the name), and every file that README.md, CHANGELOG.md or
    docs/ names; delete the rest (with --apply; the history stays in git)."""
    results = HERE / "results"
    root = HERE.parent
    docs = [root / "README.md", root / "CHANGELOG.md", *sorted((root / "docs").glob("*.md")), HERE / "README.md",
            HERE / "NOTES.md"]
    cited_text = "".join(p.read_text() for p in docs if p.exists())
    pattern = re.compile(r"^(?P<bench>.+?)_(?:(?P<dev>[a-z]\d{2,4}|\d+cores)_)?(?P<date>\d{4}-\d{2}-\d{2})"
                         r"(?P<suffix>[^.]*)\.(?P<ext>[\w.]+)$")

    def committed(path: Path) -> int:
        out = subprocess.run(["git", "-C", str(root), "log", "-1", "--format=%ct", "--", str(path)],
                             capture_output=True, text=True).stdout.strip()
        return int(out) if out else 2 ** 40  # not committed yet: the newest

    groups: dict = {}
    for path in sorted(results.iterdir()):
        found = pattern.match(path.name)
        key = (found["bench"], found["dev"] or "-", found["ext"]) if found else (path.name, "-", "")
        groups.setdefault(key, []).append((found["date"] if found else "", path))
    keep = {max(group, key=lambda d_p: (d_p[0], committed(d_p[1]), d_p[1].name))[1] for group in groups.values()}
    keep |= {p for group in groups.values() for _, p in group if p.name in cited_text}
    drop = sorted(p for group in groups.values() for _, p in group if p not in keep)
    for p in drop:
        print(("deleting " if args.apply else "would delete ") + str(p.relative_to(root)))
        if args.apply:
            subprocess.run(["git", "-C", str(root), "rm", "-q", "--ignore-unmatch", str(p)], check=False)
            p.unlink(missing_ok=True)
    print(f"{len(keep)} kept, {len(drop)} {'deleted' if args.apply else 'to delete (--apply)'}")
    return 0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="benchmarks/run.py", description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="name", metavar="NAME", required=True)
    default_out = os.environ.get("OUT") or str(HERE / "results")
    for name in BENCHMARKS:
        module = _module(name)
        p = sub.add_parser(name, help=module.__doc__.splitlines()[0].split(": ", 1)[1], description=module.__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("--out", default=default_out, help=f"results folder (default {default_out})")
        module.add_arguments(p)
        p.set_defaults(main=module.main)
    p = sub.add_parser("prune", help="keep only the newest result per benchmark and device", description=prune.__doc__)
    p.add_argument("--apply", action="store_true", help="delete (default: list what would be deleted)")
    p.set_defaults(main=prune)
    return ap


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    return args.main(args) or 0


if __name__ == "__main__":
    sys.exit(main())
