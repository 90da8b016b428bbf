"""The kernels ``hmmgpu sw`` ships compiled: writing them, and which they are.

Why ship compiled kernels
-------------------------
On a machine that has never run hmmgpu, the first ``hmmgpu sw`` would compile each kernel
shape its queries need: numba's pipeline (typing, lowering and NVVM over a kernel whose
columns and rows are unrolled) takes 4 s for the smallest Smith-Waterman shape and 12-13 s
for the largest on one core, and the 20 classic queries need nine kernels (eight shapes
and the residue packing kernel), compiled in parallel processes: 13 s of a 14.6 s cold run
on the H100 machine (benchmarks/results/sw_e2e_h100_2026-11-27.txt), against 1.5 s warm.
The kernels depend only on their shape, the lane binding and the GPU's architecture, not on
the data, so every shape of :data:`hmmgpu.gpu.runtime.tuning.SW_SHAPES` and the packing
kernel are compiled once here, for the GPUs hmmgpu is measured on (:data:`TARGETS`: the
H100 and H200, sm_90, with DPX instructions), and shipped in
:data:`hmmgpu.gpu.runtime.build.SHIPPED_DIR`. :func:`hmmgpu.gpu.runtime.build.load` runs a
shipped kernel when the cache has none, so a fresh sm_90 machine compiles nothing; any other
GPU, or code whose kernel source or lane helpers changed since the files were written,
compiles as before (each file holds the digests of the source and helpers it was made from).

How they are made
-----------------
``python3 -m hmmgpu.gpu.sw.prebuilt`` (no GPU needed): numba-cuda compiles each kernel module
exactly as :func:`hmmgpu.gpu.runtime.build.load` does on a GPU, to PTX, for the target's
compute capability (numba-cuda asks the current device for it, so the builder answers in
its place), and ``ptxas`` (:func:`_ptxas`; of a toolkit no newer than the GPU machines'
driver: CUDA 13.0 for driver 580) turns the PTX into the cubin the driver loads. It needs
libNVVM where numba-cuda finds it (a CUDA toolkit, or the ``nvidia-nvvm`` wheel) and
``ptxas``. Only the missing or out-of-date files are compiled again (``--all``: every one);
``tests/sw/test_prebuilt.py`` fails when a shipped kernel no longer matches the code, saying
to run it. (The kernel's entry name, recorded in the header, carries numba's flags: where
nvJitLink is installed numba-cuda compiles with ``lto`` on, so two builds may differ in that
name and nothing else.)
"""
from __future__ import annotations

import glob
import gzip
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

from hmmgpu.gpu.runtime import build

#: (lane binding, compute capability) of every shipped kernel set.
TARGETS = (("dpx", (9, 0)),)


def specs() -> list:
    """Every kernel ``hmmgpu sw`` can run on a GPU: the residue packing kernel and each
    Smith-Waterman shape."""
    from hmmgpu.gpu.pack import PackSpec
    from hmmgpu.gpu.sw.launch import all_specs

    return [PackSpec(), *all_specs()]


def stale() -> list:
    """(spec, binding, cc) of every kernel of :func:`specs` whose shipped file is missing or
    no longer matches the code."""
    return [(s, binding, cc) for binding, cc in TARGETS for s in specs() if build.shipped(s, binding, cc) is None]


def _ptxas() -> str:
    """The CUDA toolkit's ``ptxas`` (``$PTXAS``, else the first found on ``PATH``, in
    ``$CUDA_HOME`` or ``/usr/local/cuda*``)."""
    found = [p for p in [os.environ.get("PTXAS"), shutil.which("ptxas")] if p]
    found += [os.path.join(os.environ[v], "bin", "ptxas") for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    found += sorted(glob.glob("/usr/local/cuda*/bin/ptxas"), reverse=True)
    for path in found:
        if os.access(path, os.X_OK):
            return path
    raise RuntimeError("ptxas not found: set CUDA_HOME to a CUDA toolkit")


def _compile_without_a_gpu(cc) -> None:
    """numba-cuda compiles in this process as on a GPU of compute capability ``cc``: where it
    asks the current device's (for the kernel, its device functions, and the PTX it inspects
    when it creates the kernel), it gets ``cc``; the architectures it asks NVRTC about are
    ``cc`` alone (so no NVRTC library is needed); and a new kernel is not loaded onto a device
    (``bind``), which this process does not have."""
    import numba.cuda.cuda_paths as cuda_paths
    import numba.cuda.cudadrv.devices as devices
    import numba.cuda.cudadrv.nvrtc as nvrtc
    import numba.cuda.dispatcher as dispatcher

    cuda_paths._get_nvrtc_path = lambda: cuda_paths._env_path_tuple("none", None)
    nvrtc.get_supported_ccs = lambda: [tuple(cc)]
    device = SimpleNamespace(compute_capability=tuple(cc))
    dispatcher.get_current_device = lambda: device
    devices.get_context = lambda devnum=None: SimpleNamespace(device=device)
    dispatcher._Kernel.bind = lambda kernel: None


def _kernel(spec, binding: str):
    """numba's kernel of ``spec``, compiled from the module text :func:`build.load
    <hmmgpu.gpu.runtime.build.load>` compiles, less numba's on-disk cache (whose key asks the
    device's context)."""
    text = spec.source(binding)
    if text.count(", cache=True)") != 1:
        raise RuntimeError(f"kernel {spec.name}: its module does not have one cached @cuda.jit")
    path = Path(tempfile.mkdtemp(prefix="hmmgpu-prebuilt-")) / f"{spec.name}_{binding}.py"
    path.write_text(text.replace(", cache=True)", ")"))
    name = f"hmmgpu_kernels.{spec.name}_{binding}"
    module = importlib.util.module_from_spec(importlib.util.spec_from_file_location(name, path))
    sys.modules[name] = module
    module.__spec__.loader.exec_module(module)
    return module.kernel


def compile_kernel(spec, binding: str, cc) -> bytes:
    """The shipped file's content for ``spec``: its header line (entry, argument kinds,
    digests), then the cubin, compiled without a GPU (see the module text)."""
    from hmmgpu.gpu.runtime.kargs import argument_kind

    _compile_without_a_gpu(cc)
    compiled = next(iter(_kernel(spec, binding).overloads.values()))
    library = compiled._codelibrary
    if library._setup_functions or compiled.cooperative:
        raise RuntimeError(f"kernel {spec.name} needs numba's own launch (module set-up or a cooperative grid)")
    with tempfile.TemporaryDirectory(prefix="hmmgpu-prebuilt-") as tmp:
        ptx, cubin = Path(tmp, "kernel.ptx"), Path(tmp, "kernel.cubin")
        ptx.write_text(library.get_asm_str(cc=tuple(cc)))
        subprocess.run([_ptxas(), f"-arch=sm_{cc[0]}{cc[1]}", str(ptx), "-o", str(cubin)], check=True)
        image = cubin.read_bytes()
    header = dict(entry=compiled.entry_name, kinds=[argument_kind(t) for t in compiled.argument_types],
                  **build.shipped_header(spec, binding))
    return json.dumps(header).encode() + b"\n" + image


def _write(job) -> str:
    spec, binding, cc = job
    content = compile_kernel(spec, binding, cc)
    path = build.shipped_path(spec, binding, cc)
    path.parent.mkdir(parents=True, exist_ok=True)
    # a fixed modification time in the gzip header: the same kernel gives the same bytes
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as f:
        f.write(content)
    os.replace(tmp, path)
    return path.name


def main(argv=None) -> int:
    """Compile and write every stale shipped kernel (all of them with ``--all``), in parallel
    processes (nothing of the user's kernel cache changes)."""
    argv = sys.argv[1:] if argv is None else argv
    jobs = [(s, b, cc) for b, cc in TARGETS for s in specs()] if "--all" in argv else stale()
    if not jobs:
        print("every shipped kernel matches the code")
        return 0
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(min(len(jobs), os.cpu_count() or 1)) as pool:
        for name in pool.imap_unordered(_write, jobs):
            print(f"wrote {name}", flush=True)
    for path in sorted(build.SHIPPED_DIR.glob("*.cubin.gz")):
        if not any(path == build.shipped_path(s, b, cc) for b, cc in TARGETS for s in specs()):
            path.unlink()  # a shape no longer in the table
            print(f"removed {path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
