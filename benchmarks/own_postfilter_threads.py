"""hmmgpu's own post-filter stage in worker threads: does its per-target work run in parallel?

The stage (:class:`hmmgpu.cpu.own_postfilter.OwnPostFilter`) runs each F3 passer's steps in
the post-filter's worker threads: the CPU references' parsers, domain definition and its
stages, the hit. Those threads only run in parallel while they are in compiled code that
releases the interpreter lock (numba's ``nogil``); the Python between the compiled calls
holds it, and a thread waiting for it is busy but not running.

For the models named (default: :data:`own_postfilter_profile.MODELS`) and the first
``--max-seqs`` real proteins of the shared data, the F3 passers are found by the numba route,
then every passer's steps (as :mod:`own_postfilter_profile` times them one by one) are run
by 1, 2, ... ``--threads`` threads, the passers dealt round robin. Per thread count the script
prints the wall time, the process's CPU time, the threads' busy time (wall time inside their
work, summed) and CPU / busy: about 1 where no thread waited (for the interpreter lock, or
for a core: give the run cores to itself), less where they did; and the speedup over one
thread. Every run's hits must be the first run's (the serialized states compared).

::

    PYTHONPATH=. python3 benchmarks/own_postfilter_threads.py [--data DIR] [--max-seqs N] [--threads 1,2,4] [MODEL ...]
"""
from __future__ import annotations

import argparse
import os
import threading
import time
from pathlib import Path

from own_postfilter_profile import MODELS, proteins, read_model


def passers_of(hmm, db, options) -> tuple:
    """The model's :class:`~hmmgpu.cpu.own_postfilter.QueryModel` and its F3 passers (the numba route)."""
    from hmmgpu.cpu.backends import NumbaBackend
    from hmmgpu.cpu.own_postfilter import QueryModel

    backend = NumbaBackend(db)
    return QueryModel.of(hmm, options), backend.cascade(backend.prepare(hmm), options).survivors.tolist()


def target_hit(model, db, position: int, Z: float):
    """One passer's post-filter steps: parsers, domain definition, the hit (or None)."""
    from hmmgpu.cpu.fwdback import backward, parse
    from hmmgpu.stages.domaindef import define_domains
    from hmmgpu.stages.hits import pipeline_hit
    from hmmgpu.stages.profiles import null_table

    codes = db.codes(position)
    fwd = parse(model.tables, codes)
    bck = backward(model.tables, codes, fwd)
    definition = define_domains(model.stages, codes, fwd.xmx, bck.xmx, bck.has_own_scales)
    L = int(codes.size)
    return pipeline_hit(definition, codes, db.name(position), db.accession(position), db.description(position),
                        null_table(L)[L], fwd.score, model.hit_model, model.settings, Z)


def run_threads(work: list, db, nthreads: int) -> dict:
    """Every (model, position, Z) of ``work`` by ``nthreads`` threads: times and the serialized hits."""
    from hmmgpu.stages.hits import serialize_hit

    hits = [None] * len(work)
    busy, cpu = [0.0] * nthreads, [0.0] * nthreads

    def worker(k):
        wall, clock = time.perf_counter(), time.thread_time()
        for n in range(k, len(work), nthreads):
            model, position, Z = work[n]
            hits[n] = target_hit(model, db, position, Z)
        busy[k], cpu[k] = time.perf_counter() - wall, time.thread_time() - clock

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(nthreads)]
    wall, clock = time.perf_counter(), time.process_time()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return dict(wall=time.perf_counter() - wall, process_cpu=time.process_time() - clock, busy=sum(busy),
                thread_cpu=sum(cpu), hits=[None if h is None else serialize_hit(h) for h in hits])


def main() -> None:
    from hmmgpu.options import SearchOptions

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="../shared/data")
    parser.add_argument("--max-seqs", type=int, default=5000)
    parser.add_argument("--threads", default=",".join(str(n) for n in (1, 2, 4, 8, 16) if n <= (os.cpu_count() or 1)))
    parser.add_argument("models", nargs="*", default=MODELS)
    args = parser.parse_args()
    data = Path(args.data)
    _, db = proteins(data, args.max_seqs)
    options = SearchOptions()
    work = []
    for name in args.models:
        model, passers = passers_of(read_model(data, name), db, options)
        work += [(model, p, float(len(passers))) for p in passers]
    run_threads(work, db, 1)   # loads (or compiles) the numba functions first
    first = None
    for n in (int(t) for t in args.threads.split(",")):
        r = run_threads(work, db, n)
        first = first or r
        print(f"threads {n:3d}: passers {len(work)} wall {r['wall']:.2f} s, process CPU {r['process_cpu']:.2f} s, "
              f"busy {r['busy']:.2f} s, CPU/busy {r['thread_cpu'] / r['busy']:.2f}, "
              f"speedup {first['wall'] / r['wall']:.2f}x | hits as the first run's: {r['hits'] == first['hits']} "
              f"(load {os.getloadavg()[0]:.1f})", flush=True)


if __name__ == "__main__":
    main()
