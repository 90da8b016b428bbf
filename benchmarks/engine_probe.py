"""Runs ``hmmgpu search`` several times in one process with different engine settings.

    python3 benchmarks/engine_probe.py HMMFILE SEQS [--cpu 16] [--backend cuda]
        --config task=0.1,pipeline_task=0.25 --config ...

Each ``--config`` sets, for one run, the forward stage's task sizes (seconds of estimated
work per task on the survivors route and on pyhmmer's route) and the interpreter's thread
switch interval, then runs the command line in this process and prints the wall time and
the engine's statistics (busy and CPU time of each stage). The first run pays the start-up
(GPU context, kernels from the cache); later runs reuse them. Used to choose the defaults.
"""
from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("hmmfile")
    ap.add_argument("seqs")
    ap.add_argument("--cpu", default="16")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--config", action="append", default=[])
    ap.add_argument("--json")
    ap.add_argument("--profile", action="store_true",
                    help="profile the CPU time of the prepare, submit, finish and output stages (last run)")
    opts = ap.parse_args()
    from hmmgpu import cli, forward_stage

    profiles = _install_profiles() if opts.profile else {}

    rows = []
    for config in opts.config or [""]:
        settings = dict(kv.split("=") for kv in config.split(",") if kv)
        if "task" in settings:
            forward_stage.TASK_SECONDS = float(settings["task"])
        if "pipeline_task" in settings and hasattr(forward_stage, "PIPELINE_TASK_SECONDS"):
            forward_stage.PIPELINE_TASK_SECONDS = float(settings["pipeline_task"])
        sys.setswitchinterval(float(settings.get("switch", 0.005)))
        t0 = time.perf_counter()
        rc = cli.main(["search", "--cpu", opts.cpu, "--backend", opts.backend, "-o", "/dev/null",
                       "--tblout", "/dev/null", opts.hmmfile, opts.seqs])
        wall = time.perf_counter() - t0
        print(f"== {config or 'defaults'}: rc {rc}, wall {wall:.2f} s", flush=True)
        rows.append(dict(config=config, wall=wall, rc=rc))
    for name, prof in profiles.items():
        print(f"== CPU profile of {name} (cProfile, thread CPU time, all runs)")
        pstats.Stats(prof).sort_stats("tottime").print_stats(22)
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(rows, f, indent=1)


def _install_profiles() -> dict:
    """One cProfile (timed by thread CPU time, so waits for the GIL do not count) per stage,
    switched on around the stage's entry point in whichever thread runs it."""
    from hmmgpu.search import engine
    from hmmgpu.report import outputs as output

    profiles = {}
    for name, owner, attr in (("prepare", engine.SearchEngine, "prepare"), ("submit", engine.SearchEngine, "submit"),
                              ("finish (cascade end, planning)", engine.SearchEngine, "plan"),
                              ("output", output.RunOutputs, "query")):
        profiles[name] = prof = cProfile.Profile(timer=time.thread_time)

        def wrapped(*args, _fn=getattr(owner, attr), _prof=prof, **kwargs):
            _prof.enable()
            try:
                return _fn(*args, **kwargs)
            finally:
                _prof.disable()

        setattr(owner, attr, wrapped)
    return profiles


if __name__ == "__main__":
    main()
