"""The CPU cost of the F3 passers' post-filter stage, alone and in many threads, raw and as hmmgpu runs it.

The default route's worker threads spend about 2 ms of CPU on each F3 passer on the GPU machine
(the statistics' ``workers`` CPU over the ``Forward`` count), where one thread of the 2-core
development machine spends about 0.96 ms in pyhmmer's pipeline on the same passers
(``benchmarks/passer_costs.py --every 1``). This tells the causes apart on one machine, over the
passers of the models (every ``--every``-th of the file; the passers are the targets with a hit at
``E = domE = 1e9``, which are the F3 passers of the 600 Pfam models against the 29 M residues):

* ``raw``: pyhmmer's ``Pipeline(F1=1, F2=1).search_hmm`` on each model's passers, in
  hmmsearch's float mode: pyhmmer's own cost;
* ``stage``: the same passers as hmmgpu's default route runs them: the post-filter plan's tasks
  (:class:`hmmgpu.stages.postfilter.TaskPlanner`) through
  :meth:`hmmgpu.cpu.pyhmmer_stage.PyhmmerStage.run` (sequence objects made from the arrays,
  ``TopHits`` state, the kept-hit rule): pyhmmer's cost plus hmmgpu's;

each on 1 thread (every ``--single-every``-th model) and on each count of ``--threads`` (a pool over the models or tasks). Reported: wall
seconds, the threads' CPU seconds (``time.thread_time``), and CPU milliseconds a passer. If the
CPU a passer is the same on 1 and on many threads, the machine's threads are as fast alone as
together; ``stage`` over ``raw`` is hmmgpu's own overhead.

    python3 benchmarks/passer_threads.py MODELS.hmm PROTEINS.fa [--every 1] [--threads 16,8]
        [--single-every N] [--passers FILE.npz] [--out FILE.json]

``--passers`` keeps the passers found (an ``.npz`` of each model's positions) and reads them when
the file exists, so a second machine need not search for them again.
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def find_passers(hmms, block, threads: int) -> list:
    """Each model's passers: the positions of the targets with a hit at E = domE = 1e9."""
    import numpy as np
    import pyhmmer

    index = {seq.name: k for k, seq in enumerate(block)}
    out = []
    for hits in pyhmmer.hmmsearch(hmms, block, cpus=threads, E=1e9, domE=1e9):
        out.append(np.array(sorted(index[hit.name] for hit in hits), np.int64))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models")
    parser.add_argument("proteins")
    parser.add_argument("--every", type=int, default=1, help="take every N-th model of the file (default 1)")
    parser.add_argument("--threads", default=str(os.cpu_count()),
                        help="threads of the parallel runs, a comma-separated list (default: every core)")
    parser.add_argument("--single-every", type=int, default=1,
                        help="the 1-thread runs take every N-th of the chosen models (default 1: all)")
    parser.add_argument("--passers", help="an .npz of each model's passers: read if it exists, else written")
    parser.add_argument("--out", help="write the result as JSON here")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))

    import numpy as np
    import pyhmmer

    from benchmarks.common import header, save
    from hmmgpu.cpu.pyhmmer_stage import PyhmmerStage
    from hmmgpu.formats.seqdb import SequenceDB
    from hmmgpu.host import set_flush_to_zero
    from hmmgpu.options import SearchOptions
    from hmmgpu.search.engine import Query

    threads = [int(t) for t in args.threads.split(",")]
    alphabet = pyhmmer.easel.Alphabet.amino()
    with pyhmmer.plan7.HMMFile(args.models) as fh:
        hmms = [hmm for k, hmm in enumerate(fh) if k % args.every == 0]
    db = SequenceDB.from_file(args.proteins, arrays=True)
    if args.passers and os.path.exists(args.passers):
        saved = np.load(args.passers)
        passers = [saved[f"m{k}"] for k in range(len(hmms))]
    else:
        start = time.perf_counter()
        passers = find_passers(hmms, db.block(), threads[0])
        print(f"passers found in {time.perf_counter() - start:.1f} s", flush=True)
        if args.passers:
            np.savez(args.passers, **{f"m{k}": p for k, p in enumerate(passers)})
    chosen = [k for k in range(len(hmms)) if passers[k].size]
    total = int(sum(passers[k].size for k in chosen))
    print(f"{len(hmms)} models, {len(chosen)} with passers, {total} passers", flush=True)

    options = SearchOptions()
    stage = PyhmmerStage(db, options, ftz=True, threads=threads[0], model_lengths=[h.M for h in hmms])
    # the stage's own sequence objects, made once here: both ways search the same objects, and
    # neither pays for making them inside a timed run
    blocks = {k: stage.sequences.block(passers[k]) for k in chosen}
    local = threading.local()

    def pipeline():
        pli = getattr(local, "pli", None)
        if pli is None:
            set_flush_to_zero(True)
            pli = local.pli = pyhmmer.plan7.Pipeline(alphabet, F1=1.0, F2=1.0)
        return pli

    def raw(k):
        start = time.thread_time()
        pli = pipeline()
        pli.clear()
        pli.search_hmm(hmms[k], blocks[k])
        return time.thread_time() - start

    def tasks_of(models):
        out = []
        for k in models:
            out.extend(stage.plan(Query(index=k, hmm=hmms[k]), passers[k]))
        return out

    def staged(task):
        return stage.run(task).cpu_seconds

    def measure(label, fn, items, count):
        start = time.perf_counter()
        if count == 1:
            cpu = [fn(x) for x in items]
        else:
            with ThreadPoolExecutor(count) as pool:
                cpu = list(pool.map(fn, items))
        wall = time.perf_counter() - start
        n = int(sum(x.positions.size if hasattr(x, "positions") else passers[x].size for x in items))
        row = dict(label=label, threads=count, items=len(items), passers=n, wall_s=round(wall, 3),
                   cpu_s=round(sum(cpu), 3), cpu_ms_per_passer=round(1e3 * sum(cpu) / max(1, n), 4))
        print(row, flush=True)
        return row

    single = chosen[::args.single_every]
    rows = []
    # warm each thread's pipeline before any timing
    measure("warm", raw, chosen[:threads[0]], threads[0])
    rows.append(measure("raw", raw, single, 1))
    rows.append(measure("stage", staged, tasks_of(single), 1))
    for t in threads:
        rows.append(measure("raw", raw, chosen, t))
        rows.append(measure("stage", staged, tasks_of(chosen), t))
    result = dict(header("passer_threads"),
                  models=len(hmms), every=args.every, passers=total, threads=threads,
                  malloc_tunables=os.environ.get("GLIBC_TUNABLES"), rows=rows)
    if args.out:
        save(result, Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
