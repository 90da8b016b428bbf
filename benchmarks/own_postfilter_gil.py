"""How long hmmgpu's own post-filter holds the interpreter lock per F3 passer on the CPU route.

For the models named and the first N proteins of the shared data, the F3 passers (numba
route) go through :meth:`hmmgpu.cpu.own_postfilter.OwnPostFilter.targets` (one call a model,
as a task; on commits before it existed, ``target`` a passer at a time), each model's parsers,
domain definition with the CPU stages and hits, in one thread. After a warm-up pass (every
specialization compiled), every numba function with ``nogil`` that hmmgpu's modules call from
Python is wrapped to add up the CPU time inside it; the fastest of three passes is printed:
CPU ms per passer in all, inside those compiled calls (the lock released), and the rest, the
Python that holds the lock (an upper bound: each wrapped call's own two clock reads count
there, some microseconds a passer's hundreds of calls).

::

    python3 benchmarks/own_postfilter_gil.py N MODEL ...   (from the repository's root)
"""
import sys
import time
from pathlib import Path
from types import SimpleNamespace
sys.path[:0] = [".", "benchmarks"]
from own_postfilter_profile import proteins, read_model
from own_postfilter_threads import passers_of
from hmmgpu.options import SearchOptions
from hmmgpu.cpu.own_postfilter import OwnPostFilter

data = Path("/work/shared/data")
models = sys.argv[2:]
_, db = proteins(data, int(sys.argv[1]))
options = SearchOptions()
stage = OwnPostFilter(db, options)
work = []
for index, name in enumerate(models):
    hmm = read_model(data, name)
    model, passers = passers_of(hmm, db, options)
    work.append((SimpleNamespace(index=index, hmm=hmm), model, passers))
batched = hasattr(stage, "targets")

def run_all():
    n = 0
    for query, model, passers in work:
        if batched:
            stage.targets(query, model, passers, [True] * len(passers), None, [None] * len(passers))
        else:
            for p in passers:
                stage.target(query, model, p, True, None)
        n += len(passers)
    return n

run_all()  # warm-up: every specialization compiled
inside = [0.0]
from numba.core.registry import CPUDispatcher
wrapped = 0
for modname in list(sys.modules):
    if not modname.startswith("hmmgpu."):
        continue
    mod = sys.modules[modname]
    for attr, value in list(vars(mod).items()):
        if isinstance(value, CPUDispatcher) and value.targetoptions.get("nogil"):
            def wrapper(*a, _f=value, **k):
                t = time.thread_time()
                try:
                    return _f(*a, **k)
                finally:
                    inside[0] += time.thread_time() - t
            setattr(mod, attr, wrapper)
            wrapped += 1
best = None
for rep in range(3):
    inside[0] = 0.0
    t = time.thread_time()
    n = run_all()
    total = time.thread_time() - t
    if best is None or total - inside[0] < best[0] - best[1]:
        best = (total, inside[0])
total, nogil = best
print(f"{'batched' if batched else 'per-target'}: passers {n}, wrapped {wrapped} dispatchers: ms/passer total {1e3*total/n:.3f}, in nogil compiled calls {1e3*nogil/n:.3f}, holding the GIL {1e3*(total-nogil)/n:.3f} ({100*(total-nogil)/total:.0f}%)")
