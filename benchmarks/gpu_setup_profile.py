"""cProfile of the GPU process's set-up steps after its imports: the device's opening and the
kernel loads, then the database's upload.

    python3 benchmarks/gpu_setup_profile.py MODELS.hmm SEQS.fa

Used for the numbers in NOTES.md ("The GPU process's start-up, again";
results/gpu_setup_profile_h200_2026-11-24x.txt).
"""
import cProfile
import importlib
import pstats
import re
import sys
import time


def profiled(step: str, fn, sort: str, rows: int):
    profile = cProfile.Profile()
    start = time.perf_counter()
    profile.enable()
    value = fn()
    profile.disable()
    print(step, round(time.perf_counter() - start, 3), flush=True)
    pstats.Stats(profile).sort_stats(sort).print_stats(rows)
    return value


def main() -> None:
    models, seqs = sys.argv[1], sys.argv[2]
    start = time.perf_counter()
    for name in ("numpy", "pyhmmer.plan7"):  # imported first, as the GPU process does
        importlib.import_module(name)
    from hmmgpu.gpu.backend import CudaBackend
    from hmmgpu.gpu.runtime.context import open_primary_context
    from hmmgpu.gpu.cascade import load_kernels
    from hmmgpu.gpu.runtime.device import GpuDevice
    from hmmgpu.formats.seqdb import open_database

    print("imports", round(time.perf_counter() - start, 3), flush=True)
    start = time.perf_counter()
    open_primary_context(0)
    print("context", round(time.perf_counter() - start, 3), flush=True)
    with open(models, "rb") as fh:
        lengths = [int(m) for m in re.findall(rb"\nLENG[ \t]+(\d+)", fh.read())]
    profiled("device_and_kernels", lambda: load_kernels(GpuDevice.open(0), "auto", lengths), "cumulative", 45)
    start = time.perf_counter()
    db = open_database(seqs, None, arrays=True)
    print("database", round(time.perf_counter() - start, 3))
    profiled("resident", lambda: CudaBackend(db, lanes="auto", device=0), "tottime", 12)


if __name__ == "__main__":
    main()
