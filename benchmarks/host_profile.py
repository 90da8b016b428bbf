"""Where the host's CPU time goes per model, each stage alone in one thread (no GIL contention).

    python3 benchmarks/host_profile.py HMMFILE SEQS [--backend cuda] [--forward-models 100]

Runs, one after another and each under cProfile: the engine's *prepare* of every model,
the filter cascade of every model (*submit* eight ahead, then *finish* in order, as the
engine does), and pyhmmer's stage on the survivors of the first ``--forward-models``
models, cut into the engine's tasks (*forward*). Prints each stage's time per model and its
top functions. What it shows is the interpreter-bound work each stage puts on the one
lock the engine's threads share.
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("hmmfile")
    ap.add_argument("seqs")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--forward-models", type=int, default=100)
    ap.add_argument("--top", type=int, default=25)
    opts = ap.parse_args()

    from hmmgpu.backends import select_backend
    from hmmgpu.engine import SearchEngine
    from hmmgpu.hmmfile import read_models
    from hmmgpu.options import SearchOptions
    from hmmgpu.seqdb import SequenceDB

    db = SequenceDB.from_fasta(opts.seqs)
    options = SearchOptions(backend=opts.backend, cpus=1)
    backend = select_backend(options, db)
    models = list(read_models(opts.hmmfile))
    backend.prepare_for([m.hmm.M for m in models])
    engine = SearchEngine(db, options, backend)

    def stage(name, fn):
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        value = fn()
        prof.disable()
        seconds = time.perf_counter() - t0
        print(f"== {name}: {seconds:.2f} s", flush=True)
        pstats.Stats(prof).sort_stats("tottime").print_stats(opts.top)
        return value, seconds

    queries, prep_s = stage("prepare", lambda: [engine.prepare(i, m) for i, m in enumerate(models)])

    def cascade():
        tickets, planned = [], []
        for q in queries:
            tickets.append((q, engine.submit(q)))
            if len(tickets) > 8:
                q0, t0 = tickets.pop(0)
                planned.append((q0, engine.plan(q0, t0)))
        planned += [(q, engine.plan(q, t)) for q, t in tickets]
        return planned

    planned, filt_s = stage("submit + finish + plan", cascade)

    def forward():
        n = 0
        for q, tasks in planned[:opts.forward_models]:
            q.n_tasks = len(tasks)
            for task in tasks:
                q.states[task.part] = engine.forward.run(task, alone=len(tasks) == 1)
                n += 1
            engine.finish(q)
        return n

    n_tasks, fwd_s = stage(f"forward stage of the first {opts.forward_models} models", forward)
    k = min(opts.forward_models, len(models))
    print(f"per model: prepare {1e3 * prep_s / len(models):.2f} ms, filters (host) {1e3 * filt_s / len(models):.2f} ms, "
          f"forward {1e3 * fwd_s / k:.2f} ms ({n_tasks} tasks)")
    backend.close()


if __name__ == "__main__":
    main()
