"""A timeline of one ``hmmgpu`` command: when each model is parsed and prepared, when each
task runs, and how many worker threads are busy in each 50 ms.

    python3 benchmarks/route_probe.py search --cpu 16 -o /dev/null --tblout T.tbl MODELS SEQS

Wraps the engine's stages with timers, runs hmmgpu's command line in this process and prints
``probe:`` lines on stderr. ``PROBE_SET=hf.NAME=VALUE,fs.NAME=VALUE`` changes a setting of
``hmmgpu.formats.hmmfile`` (hf), ``forward_stage`` (fs), ``engine`` (en) or ``seqdb`` (sd) first;
``PROBE_SWITCH`` sets the interpreter's switch interval and ``PROBE_NICE`` the worker threads'
nice value. Used for ``results/route_probe_d_c_h200_2026-11-24x.log``.
"""
import collections
import os
import sys
import threading
import time

T0 = time.perf_counter()
if os.environ.get("PROBE_SWITCH"):
    sys.setswitchinterval(float(os.environ["PROBE_SWITCH"]))
EV = collections.defaultdict(list)
LOCK = threading.Lock()


def wrap(obj, attr, name):
    f = getattr(obj, attr)

    def w(*a, **k):
        s = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            e = time.perf_counter()
            with LOCK:
                EV[name].append((s - T0, e - T0, threading.current_thread().name))
    setattr(obj, attr, w)


import hmmgpu.search.engine as en  # noqa: E402
import hmmgpu.forward_stage as fs  # noqa: E402
import hmmgpu.formats.hmmfile as hf  # noqa: E402
import hmmgpu.report.outputs as out  # noqa: E402
import hmmgpu.formats.seqdb as sd  # noqa: E402

for k, v in (x.split("=") for x in os.environ.get("PROBE_SET", "").split(",") if x):
    mod, attr = k.split(".")
    setattr({"hf": hf, "fs": fs, "en": en, "sd": sd}[mod], attr, type(getattr({"hf": hf, "fs": fs, "en": en, "sd": sd}[mod], attr))(v))

_NICE = int(os.environ.get("PROBE_NICE", "0"))
_local = threading.local()
if _NICE:
    _run0 = fs.ForwardStage.run

    def _run_nice(self, *a, **k):
        if not getattr(_local, "niced", False):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), _NICE)
            _local.niced = True
        return _run0(self, *a, **k)
    fs.ForwardStage.run = _run_nice
wrap(fs.ForwardStage, "run", "task")
wrap(fs.ForwardStage, "merge", "merge")
wrap(en.SearchEngine, "prepare", "prepare")
wrap(en.SearchEngine, "plan", "plan")
wrap(en.SearchEngine, "finish", "finish")
wrap(out.RunOutputs, "query", "output")
wrap(hf, "parse_record", "parse")
wrap(sd.FastaPieces, "search", "piece_search")

from hmmgpu.cli import main  # noqa: E402

rc = main(sys.argv[1:])
end = time.perf_counter() - T0
print(f"probe: main returned {rc} at {end:.3f} s (imports before main: counted from probe start)", file=sys.stderr)
for name, ev in EV.items():
    d = [e - s for s, e, _ in ev]
    print(f"probe: {name:13s} n={len(ev):5d} sum={sum(d):7.3f} s first={min(s for s, _, _ in ev):6.3f} "
          f"last_end={max(e for _, e, _ in ev):6.3f} max={max(d):.3f}", file=sys.stderr)
tasks = EV["task"]
if tasks:
    step = 0.05
    bins = int(end / step) + 1
    busy = [0.0] * bins
    for s, e, _ in tasks:
        b = int(s / step)
        while b * step < e and b < bins:
            lo, hi = max(s, b * step), min(e, (b + 1) * step)
            busy[b] += max(0.0, hi - lo) / step
            b += 1
    print("probe: workers busy per 50 ms: " + " ".join(f"{x:.0f}" for x in busy), file=sys.stderr)
for name in ("prepare", "output"):
    ev = sorted(e for _, e, _ in EV.get(name, []))
    if ev:
        marks = [ev[min(len(ev) - 1, int(q * len(ev)))] for q in (0.1, 0.25, 0.5, 0.75, 0.9, 1.0)]
        print(f"probe: {name} done at quantiles 10/25/50/75/90/100%: " + " ".join(f"{m:.2f}" for m in marks),
              file=sys.stderr)
ends = sorted(e for _, e, _ in tasks)
if ends:
    marks = [ends[min(len(ends) - 1, int(q * len(ends)))] for q in (0.1, 0.25, 0.5, 0.75, 0.9, 1.0)]
    print("probe: tasks done at quantiles 10/25/50/75/90/100%: " + " ".join(f"{m:.2f}" for m in marks), file=sys.stderr)
sys.exit(rc)
