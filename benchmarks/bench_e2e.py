"""e2e: hmmgpu's whole search against the strongest CPU baselines, each run as a user runs it.

Every tool is a fresh process started from this one, and its wall time covers everything a
user waits for: start-up, reading the models and the sequences (plain FASTA), the search and
writing ``--tblout``. The tools (``workloads.json``'s ``tools``, in that order):

* ``pyhmmer``: ``pyhmmer.hmmsearch(all queries, cpus=N)`` as shipped (flush-to-zero off);
* ``pyhmmer_ftz``: the same with flush-to-zero set in the calling thread
  (``hmmgpu.host.set_flush_to_zero``; pyhmmer's worker threads inherit it), the float mode
  hmmsearch runs in and hmmgpu's pyhmmer stage uses (about 1.3x faster on the H200);
* ``hmmgpu``: ``hmmgpu search --cpu N`` (``--backend``, default ``auto``), after an untimed
  ``hmmgpu warmup`` (kernels compiled into the cache; its time is recorded apart);
* ``hmmsearch``: ``hmmsearch --cpu N``, the HMMER 3.4 binary itself (not the ``hmmer``
  wheel's Python command in front of it).

hmmgpu's table is compared row for row with hmmsearch's (split on white space: threaded
hmmsearch pads the name column by a run-dependent set of unreported hits), or with the
flush-to-zero pyhmmer's where hmmsearch did not run. One JSON per workload,
``e2e_<workload>_<device>_<date>.json``, written after every step.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from common import (ROOT, WORKLOADS, compare_tables, cores, count_models, engine_stats, header, hmmsearch_binary,
                    median_run, resolve, residues, result_path, save, say, timed, work_dir, write_models,
                    write_proteins)

#: ``pyhmmer.hmmsearch`` over every query at once, as its users run it; flush-to-zero set in the
#: calling thread first when asked (after the reads: pyhmmer's worker threads start in the search).
PYHMMER_SCRIPT = """
import sys
hmmfile, seqfile, cpus, tblout, ftz, root = sys.argv[1:7]
import pyhmmer
with pyhmmer.plan7.HMMFile(hmmfile) as f:
    hmms = list(f)
with pyhmmer.easel.SequenceFile(seqfile, digital=True) as f:
    block = f.read_block()
if ftz == "1":
    sys.path.insert(0, root)
    from hmmgpu.host import set_flush_to_zero
    set_flush_to_zero(True)
with open(tblout, "wb") as out:
    for i, hits in enumerate(pyhmmer.hmmsearch(hmms, block, cpus=int(cpus))):
        hits.write(out, format="targets", header=i == 0)
"""

#: hmmgpu's command line with module settings changed first (``--set hmmgpu.stages.postfilter.TASK_SECONDS=0.2``):
#: the search process's settings only (the GPU process and worker processes keep their defaults).
SETTINGS_SCRIPT = """
import importlib, json, sys
for key, value in json.loads(sys.argv[1]).items():
    module, name = key.rsplit(".", 1)
    module = importlib.import_module(module)
    setattr(module, name, type(getattr(module, name))(value))
from hmmgpu.cli import main
sys.exit(main(sys.argv[2:]))
"""

TOOLS = ("pyhmmer", "pyhmmer_ftz", "hmmgpu", "hmmsearch")
#: the result's key of each tool's wall time (the post-filter issue's e2e format)
KEYS = dict(hmmgpu="hmmgpu_s", pyhmmer="pyhmmer16_s", pyhmmer_ftz="pyhmmer16_ftz_s", hmmsearch="hmmsearch16_s")


def add_arguments(ap) -> None:
    names = [k for k in WORKLOADS["e2e"] if not k.startswith("_")]
    ap.add_argument("workloads", nargs="?", default="pfam600_29M",
                    help=f"comma-separated, of workloads.json: {', '.join(names)} (default pfam600_29M)")
    ap.add_argument("--tools", help=f"comma-separated, in order, of {', '.join(TOOLS)} (default: the workload's)")
    ap.add_argument("--models", metavar="START:STOP", help="only these models of the file (e.g. 0:300)")
    ap.add_argument("--repeats", type=int, help="runs of each tool; the median is reported (default: the workload's)")
    ap.add_argument("--threads", type=int, default=cores(), help="N of --cpu N and cpus=N (default: the usable cores)")
    ap.add_argument("--backend", default="auto", help="hmmgpu's --backend (default auto)")
    ap.add_argument("--hmmgpu-args", default="", help="more arguments for hmmgpu search (one string)")
    ap.add_argument("--set", action="append", default=[], metavar="MODULE.NAME=VALUE",
                    help="change an hmmgpu setting in the search process first (repeatable)")
    ap.add_argument("--no-warmup", action="store_true", help="no hmmgpu warmup before the timed runs")


def _environment() -> dict:
    """This checkout's hmmgpu first on the path of every Python tool."""
    path = os.environ.get("PYTHONPATH", "")
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT)] + ([path] if path else [])))


def _commands(tool, models: Path, proteins: Path, tbl: Path, args) -> list:
    t = str(args.threads)
    if tool in ("pyhmmer", "pyhmmer_ftz"):
        return [sys.executable, "-c", PYHMMER_SCRIPT, models, proteins, t, tbl, "1" if tool == "pyhmmer_ftz" else "0",
                ROOT]
    if tool == "hmmsearch":
        return [hmmsearch_binary(), "--cpu", t, "-o", os.devnull, "--tblout", tbl, models, proteins]
    search = ["search", "--cpu", t, "--backend", args.backend, "-o", os.devnull, "--tblout", tbl,
              *args.hmmgpu_args.split(), models, proteins]
    if args.set:
        settings = dict(kv.split("=", 1) for kv in args.set)
        return [sys.executable, "-c", SETTINGS_SCRIPT, json.dumps(settings), *search]
    return [sys.executable, "-m", "hmmgpu", *search]


def run_workload(name: str, args) -> dict:
    spec = dict(WORKLOADS["e2e"][name])
    tools = (args.tools.split(",") if args.tools else spec["tools"])
    unknown = set(tools) - set(TOOLS)
    if unknown:
        raise SystemExit(f"unknown tools {sorted(unknown)}; choose from {', '.join(TOOLS)}")
    repeats = args.repeats or spec.get("repeats", 1)
    work = work_dir(f"e2e-{name}")
    first, stop = (int(x) for x in args.models.split(":")) if args.models else (0, None)
    models = write_models(resolve(spec["models"]), work / "models.hmm", first, stop)
    proteins = write_proteins(resolve(spec["proteins"]), work / "proteins.fa", spec.get("copies", 1))
    tag = name + (f"_models{first}-{stop}" if args.models else "")
    path = result_path(Path(args.out), "e2e", tag)
    result = header("e2e")
    result.update(workload=name, workload_spec=spec, tools=tools, repeats=repeats, threads=args.threads,
                  models=count_models(models), models_slice=args.models, residues=residues(proteins),
                  hmmgpu_backend=args.backend, hmmgpu_settings=args.set or None,
                  hmmgpu_s=None, pyhmmer16_s=None, pyhmmer16_ftz_s=None, hmmsearch16_s=None, tables_identical=None,
                  tables_compared_with=None, cpu_thread_s=None, gpu_busy_s=None, fallback_targets=None, runs={},
                  tables={})
    save(result, path)
    env = _environment()
    if "hmmgpu" in tools and not args.no_warmup:
        # without a GPU it writes the bytecode and exits 2 (no kernel to compile): not an error here
        result["warmup"] = timed([sys.executable, "-m", "hmmgpu", "warmup"], env=env, check=False)
        result["warmup_s"] = result["warmup"]["seconds"]
        save(result, path)
        say(f"[{name}] hmmgpu warmup {result['warmup_s']:.2f} s (exit {result['warmup']['returncode']})")
    tables = {}
    for tool in tools:
        tbl = work / f"{tool}.tbl"
        run = median_run(_commands(tool, models, proteins, tbl, args), repeats, env=env)
        result["runs"][tool] = run
        result[KEYS[tool]] = run["seconds"]
        tables[tool] = tbl
        if tool == "hmmgpu":
            stats = engine_stats(run["stats"])
            result["hmmgpu_stats"] = stats
            result["gpu_busy_s"] = stats["gpu_busy_s"]
            result["cpu_thread_s"] = round(sum(stats["cpu_seconds"].values()), 3) if stats["cpu_seconds"] else None
            #: Viterbi-filter survivors the GPU's Forward gate leaves to pyhmmer's stage undecided
            result["fallback_targets"] = stats["fallback_targets"] or 0
        save(result, path)
        say(f"[{name}] {tool}: {run['seconds']:.2f} s" + (f" (median of {repeats})" if repeats > 1 else ""))
    if "hmmgpu" in tables:
        for ref in ("hmmsearch", "pyhmmer_ftz", "pyhmmer"):
            if ref in tables:
                result["tables"][f"hmmgpu_vs_{ref}"] = compare_tables(tables["hmmgpu"], tables[ref])
        reference = next((r for r in ("hmmsearch", "pyhmmer_ftz") if r in tables), None)
        if reference:
            result["tables_compared_with"] = reference
            result["tables_identical"] = result["tables"][f"hmmgpu_vs_{reference}"]["rows_equal"]
    if "pyhmmer_ftz" in tables and "hmmsearch" in tables:
        result["tables"]["pyhmmer_ftz_vs_hmmsearch"] = compare_tables(tables["pyhmmer_ftz"], tables["hmmsearch"])
    ours = result["hmmgpu_s"]
    if ours:
        result["speedup"] = {key[:-2]: round(result[key] / ours, 3) for key in KEYS.values()
                             if key != "hmmgpu_s" and result[key]}
    save(result, path)
    say(f"[{name}] " + ", ".join(f"{tool} {result[KEYS[tool]]:.2f} s" for tool in tools)
        + f"; tables identical ({result['tables_compared_with']}): {result['tables_identical']}; "
          f"GPU busy {result['gpu_busy_s']} s, CPU thread-s {result['cpu_thread_s']}; {path}")
    return result


def main(args) -> int:
    ok = True
    for name in args.workloads.split(","):
        if name not in WORKLOADS["e2e"] or name.startswith("_"):
            raise SystemExit(f"unknown e2e workload {name!r}")
        result = run_workload(name, args)
        ok = ok and result["tables_identical"] is not False
    return 0 if ok else 1
