"""A sampling profiler for every thread of a Python program (no tools needed on the machine).

    python3 benchmarks/sample_profile.py [--interval 0.005] [--top 25] -m hmmgpu search ...

Every ``--interval`` seconds it records, for each thread, the innermost frame that belongs to
hmmgpu (or the innermost frame at all), and at exit prints the most frequent ones per thread
name: where each stage's threads spend their time, GIL waits included (a thread waiting for
the GIL shows the line it is about to run).
"""
from __future__ import annotations

import argparse
import collections
import runpy
import sys
import threading
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--interval", type=float, default=0.005)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("-m", dest="module", required=True)
    ap.add_argument("args", nargs=argparse.REMAINDER)
    opts = ap.parse_args()
    counts: collections.Counter = collections.Counter()
    stop = threading.Event()
    def sample():
        me = threading.get_ident()  # the sampler itself
        names = {}
        while not stop.is_set():
            for t in threading.enumerate():
                names[t.ident] = t.name.rsplit("-", 1)[0] if t.name.startswith("hmmgpu-worker") else t.name
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                where = None
                f = frame
                while f is not None:
                    if "hmmgpu" in f.f_code.co_filename:
                        where = f"{f.f_code.co_filename.rsplit('/', 2)[-1]}:{f.f_lineno} {f.f_code.co_name}"
                        break
                    f = f.f_back
                if where is None:
                    where = f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno} {frame.f_code.co_name}"
                counts[(names.get(ident, "?"), where)] += 1
            time.sleep(opts.interval)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    sys.argv = [opts.module] + opts.args
    try:
        runpy.run_module(opts.module, run_name="__main__", alter_sys=True)
    except SystemExit:
        pass
    finally:
        stop.set()
        by_thread = collections.defaultdict(list)
        for (thread, where), n in counts.items():
            by_thread[thread].append((n, where))
        for thread, rows in sorted(by_thread.items()):
            total = sum(n for n, _ in rows)
            print(f"--- {thread}: {total} samples", file=sys.stderr)
            for n, where in sorted(rows, reverse=True)[: opts.top]:
                print(f"{100 * n / total:5.1f}%  {where}", file=sys.stderr)


if __name__ == "__main__":
    main()
