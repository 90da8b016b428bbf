"""Where the GPU process's start-up goes, step by step, in a fresh interpreter.

    python3 benchmarks/startup_probe.py MODELS.hmm SEQS.fa [--out FILE.json]

The steps of :func:`hmmgpu.gpu.process._serve` before it answers ``ready``, each timed
apart: importing numpy and pyhmmer, opening the device (its context), loading every kernel
the models' lengths need (the exported cubins, through the CUDA driver), reading the
database with the numpy reader and putting it on the device. Kernels the cache lacks are
compiled first and reported apart (run the probe twice for a warm cache's numbers). The
first kernel's load is profiled. The last line says whether numba was imported.
"""

if __name__ == "__main__":
    import time

    t_start = time.perf_counter()
    import argparse
    import json
    import sys

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("hmmfile")
    parser.add_argument("seqfile")
    parser.add_argument("--out")
    args = parser.parse_args()
    steps = {}

    def mark(name, since):
        steps[name] = round(time.perf_counter() - since, 4)
        return time.perf_counter()

    import importlib

    clock = time.perf_counter()
    for module in ("numpy", "pyhmmer.plan7"):
        importlib.import_module(module)
        clock = mark(f"import {module}", clock)
    from hmmgpu.formats.hmmfile import model_lengths
    from hmmgpu.gpu.runtime import build
    from hmmgpu.gpu.cascade import needed_specs
    from hmmgpu.gpu.runtime.device import GpuDevice
    from hmmgpu.gpu.msv.launch import MsvKernels
    from hmmgpu.gpu.vit.launch import VitKernels
    clock = mark("import hmmgpu's kernels", clock)
    device = GpuDevice.open(0)
    clock = mark("device open (context)", clock)
    lengths = model_lengths(args.hmmfile)
    specs = needed_specs(MsvKernels(device, "auto"), VitKernels(device), lengths)
    clock = mark("model lengths and specs", clock)
    compiled = build.compile_ahead(specs, device, processes=len(specs))
    clock = mark(f"compile missing ({compiled} of {len(specs)})", clock)
    kernels = []
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    with device.activate():
        for spec in specs:
            t0 = time.perf_counter()
            if not kernels:  # the first load
                profiler.enable()
            build.load(spec, device)
            profiler.disable()
            kernels.append(dict(name=spec.name, load_s=round(time.perf_counter() - t0, 4)))
    clock = mark("kernels (exported cubins into the context)", clock)
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(25)
    print("\n".join(line[:160] for line in text.getvalue().splitlines()[:45]))
    from hmmgpu.formats.seqdb import open_database
    clock = mark("import seqdb", clock)
    db = open_database(args.seqfile, None, arrays=True)
    clock = mark("database read (numpy reader)", clock)
    from hmmgpu.gpu.backend import CudaBackend
    backend = CudaBackend(db, device=0)
    clock = mark("resident (upload)", clock)
    steps["total since interpreter's first line"] = round(time.perf_counter() - t_start, 4)
    result = dict(steps=steps, kernels=kernels, targets=int(db.n), residues=int(db.total_residues))
    print(json.dumps(steps, indent=1))
    for k in sorted(kernels, key=lambda k: -k["load_s"])[:8]:
        print(k)
    result["numba_imported"] = "numba" in sys.modules
    print(f"kernels: {len(kernels)}, load {sum(k['load_s'] for k in kernels):.3f} s; "
          f"numba imported: {result['numba_imported']}")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1)
    sys.exit(0)
