"""Where the GPU process's CPU time goes per model (the work :mod:`hmmgpu.gpu.process` does).

    python3 benchmarks/host_profile.py HMMFILE SEQS [--lanes auto] [--top 25]

Runs, in this process and one thread, the GPU process's loop for every model of HMMFILE
over SEQS, each step under cProfile and timed apart: unpickling the model as it arrives,
configuring pyhmmer's profile and building hmmgpu's tables from it (*profile*), queuing the
cascade on the GPU, up to the cascade's ring of slots ahead (*submit*), waiting for and
finishing a model's result on the host (*finish*) and pickling the result for the parent
(*reply*). Prints the time of each step per model and the functions that take it. With a
small database the kernels take well under a millisecond per model, so these steps are what
sets the pace of a many-model search.
"""
from __future__ import annotations

import argparse
import cProfile
import collections
import pickle
import pstats
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("hmmfile")
    ap.add_argument("seqs")
    ap.add_argument("--lanes", default="auto")
    ap.add_argument("--top", type=int, default=25)
    opts = ap.parse_args()

    import pyhmmer.plan7 as p7
    from pyhmmer.easel import Alphabet

    from hmmgpu.gpu.backend import CudaBackend
    from hmmgpu.formats.hmmfile import read_models
    from hmmgpu.gpu.cascade import SLOTS
    from hmmgpu.options import SearchOptions
    from hmmgpu.stages.profiles import ModelProfile
    from hmmgpu.formats.seqdb import open_database

    db = open_database(opts.seqs, None, arrays=True)
    models = [pickle.dumps((m.hmm, m.mmu)) for m in read_models(opts.hmmfile)]
    backend = CudaBackend(db, lanes=opts.lanes)
    backend.prepare_for([pickle.loads(m)[0].M for m in models])
    options = SearchOptions()
    background = p7.Background(Alphabet.amino())
    profilers = {name: cProfile.Profile() for name in ("profile", "submit", "finish", "reply")}
    seconds = collections.Counter()

    def step(name, fn, *args):
        t0 = time.perf_counter()
        profilers[name].enable()
        value = fn(*args)
        profilers[name].disable()
        seconds[name] += time.perf_counter() - t0
        return value

    def configured(message):
        hmm, mmu = pickle.loads(message)
        gm = p7.Profile(hmm.M, hmm.alphabet)
        gm.configure(hmm, background, 100)
        return ModelProfile.from_profile(hmm, gm, mmu)

    def finish(ticket):
        return ticket.result()

    t0 = time.perf_counter()
    pending: collections.deque = collections.deque()
    for message in models:
        profile = step("profile", configured, message)
        pending.append(step("submit", backend.submit, profile, options))
        if len(pending) >= SLOTS:
            step("reply", pickle.dumps, step("finish", finish, pending.popleft()))
    while pending:
        step("reply", pickle.dumps, step("finish", finish, pending.popleft()))
    wall = time.perf_counter() - t0
    n = len(models)
    for name, prof in profilers.items():
        print(f"== {name}: {1e3 * seconds[name] / n:.2f} ms per model", flush=True)
        pstats.Stats(prof).sort_stats("tottime").print_stats(opts.top)
    print(f"{n} models over {db.n} targets ({db.total_residues} residues): {wall:.2f} s, "
          f"{1e3 * wall / n:.2f} ms per model ("
          + ", ".join(f"{name} {1e3 * seconds[name] / n:.2f}" for name in profilers) + f"); GPU busy "
          f"{backend.gpu_seconds():.2f} s; kernel ms {backend.details()['kernel_ms']}", flush=True)
    backend.close()


if __name__ == "__main__":
    main()
