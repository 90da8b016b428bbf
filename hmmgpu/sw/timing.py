"""Where a Smith-Waterman search's time goes: the numbers ``hmmgpu sw --stats`` prints.

A search's steps run in three kinds of threads at once (:mod:`hmmgpu.sw.api`): the scan's
thread (profiles, the GPU's batches, selection), a pool of traceback threads, and the
caller's thread (output). So :class:`SwStats` keeps, per step, the seconds that step took
wherever it ran (busy time summed over threads for the tracebacks), the GPU's busy
intervals (CUDA events; their union is the GPU scan's time), and when the first and last
scores and hits arrived, which shows what the wall time waited for. The process's start-up
(interpreter, imports, argument parsing) happens before the command can time anything; on
Linux it is read from ``/proc`` (:func:`process_age`), elsewhere it is not shown.
"""
from __future__ import annotations

import os
import threading
import time


def process_age() -> float | None:
    """Seconds since this process started (Linux: /proc, to 10 ms), None where unknown."""
    try:
        with open("/proc/self/stat") as fh:
            start = int(fh.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
        with open("/proc/uptime") as fh:
            return float(fh.read().split()[0]) - start
    except (OSError, ValueError, IndexError):
        return None


class SwStats:
    """Where a search's time went (``hmmgpu sw --stats``): seconds per step, thread-safe.

    Steps overlap: the scan runs in a thread beside the tracebacks (a pool of threads) and the
    caller's output, so the steps need not add up to the wall time. ``GPU scan`` is the union
    of the GPU's busy intervals measured with CUDA events; ``tracebacks`` is busy time summed
    over the threads; ``waiting`` is the time the caller waited for the next query's hits;
    ``start-up`` the time from the process's start to the command's (the interpreter, the
    imports, the arguments); ``traceback passes loaded`` the thread that imports numba and
    loads the traceback's compiled passes, beside the rest.
    """

    STEPS = ("start-up", "reading", "database", "GPU set-up", "kernels compiled", "traceback passes loaded",
             "profiles", "GPU scan", "scan (pyopal)", "rescoring", "selection", "tracebacks", "formatting", "waiting")

    def __init__(self):
        self._lock = threading.Lock()
        self.seconds = dict.fromkeys(self.STEPS, 0.0)
        self.counts = dict(queries=0, query_residues=0, targets=0, residues=0, batches=0, hits=0, traced=0,
                           rescored=0, kernels_compiled=0)
        self.gpu_intervals: list = []
        self.threads = 1
        self.backend = ""
        self.gpu = False
        self.started = time.perf_counter()
        self.wall = 0.0
        self.arrivals: dict = {}  #: event -> (first, last) seconds from ``started``

    def arrived(self, event: str) -> None:
        """Note that ``event`` happened now (its first and last time are kept)."""
        now = time.perf_counter() - self.started
        with self._lock:
            self.arrivals[event] = (self.arrivals.get(event, (now, now))[0], now)

    def add(self, step: str, seconds: float) -> None:
        with self._lock:
            self.seconds[step] = self.seconds.get(step, 0.0) + float(seconds)

    def count(self, key: str, n: int) -> None:
        with self._lock:
            self.counts[key] = self.counts.get(key, 0) + int(n)

    def gpu_seconds(self) -> float:
        """The union of the GPU's busy intervals (seconds)."""
        from hmmgpu.gpu.sw.launch import _union_ms

        return _union_ms(self.gpu_intervals) / 1e3

    def lines(self) -> list:
        """Two or three lines (without a prefix) for the end of a run."""
        c, s = self.counts, dict(self.seconds)
        cells = float(c["query_residues"]) * float(c["residues"])
        now = time.perf_counter()
        wall = self.wall or (now - self.started)
        age = process_age()
        if age is not None:
            s["start-up"] = max(0.0, age - (now - self.started))
        gpu = self.gpu_seconds()
        s["GPU scan"] = gpu
        rate = lambda t: f" ({cells / t / 1e9:,.0f} GCUPS)" if t > 0 and cells else ""  # noqa: E731
        notes = {"GPU scan": " (CUDA events)" + rate(gpu), "scan (pyopal)": rate(s["scan (pyopal)"]),
                 "rescoring": f" ({c['rescored']} targets)",
                 "tracebacks": f" (busy, {self.threads} thread{'s' * (self.threads > 1)})",
                 "kernels compiled": f" ({c['kernels_compiled']})"}
        always = ("start-up" if age is not None else "", "GPU scan" if self.gpu else "scan (pyopal)",
                  "profiles" if self.gpu else "", "selection", "tracebacks", "formatting")
        if not c["kernels_compiled"]:
            s["kernels compiled"] = 0.0
        shown = [f"{step} {s[step]:.2f} s{notes.get(step, '')}" for step in self.STEPS if s[step] > 0 or step in always]
        return [
            f"{c['queries']} quer{'y' if c['queries'] == 1 else 'ies'} ({c['query_residues']:,} residues) x "
            f"{c['targets']:,} targets ({c['residues']:,} residues): {cells:.3g} cells in {c['batches']} "
            f"batch{'es' * (c['batches'] != 1)}; {c['hits']:,} hits, {c['traced']:,} traced back; {self.backend}",
            f"wall {wall:.2f} s: " + ", ".join(shown),
            "steps overlap (scans in a thread, tracebacks in a pool, output in the main thread): they need not "
            "add up to the wall time" + self._timeline(),
        ]

    def _timeline(self) -> str:
        """When the GPU was ready (its context made), the scores and the hits arrived, from the
        command's start."""
        a = self.arrivals
        parts = [f"the GPU was ready at {a['device'][0]:.2f} s"] if "device" in a else []
        parts += [f"scores arrived from {a['scores'][0]:.2f} s to {a['scores'][1]:.2f} s"] if "scores" in a else []
        parts += [f"the last hits were ready at {a['hits'][1]:.2f} s"] if "hits" in a else []
        return "; " + ", ".join(parts) if parts else ""
