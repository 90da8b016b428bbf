"""Compiling a kernel for a GPU this machine need not have, into the file hmmgpu ships.

What it makes
-------------
:func:`compile_kernel` turns a kernel spec (any family's: see :mod:`.build`) into the content
of a shipped kernel file: the header line :func:`hmmgpu.gpu.runtime.build.load` reads (entry
name, argument kinds, and the digests of the kernel's source text and of the hmmgpu modules
it imports, :func:`hmmgpu.gpu.runtime.build.shipped_header`), then the cubin for one lane
binding and compute capability. :func:`write` gzips it into
:data:`hmmgpu.gpu.runtime.build.SHIPPED_DIR`, :func:`stale` says which of a list of kernels
have no current file there, and :func:`write_all` rewrites those in parallel processes and
removes the files of kernels no longer listed. Which kernels ship is not decided here
(:mod:`hmmgpu.gpu.prebuilt_kernels` lists them).

How, without a GPU
------------------
numba-cuda compiles each kernel module exactly as :func:`hmmgpu.gpu.runtime.build.load` does
on a GPU, to PTX, for the target's compute capability: numba-cuda asks the current device for
it (for the kernel, its device functions, and the PTX it inspects when it creates the
kernel), so :func:`_compile_without_a_gpu` answers in the device's place, tells it that NVRTC
supports that architecture alone (no NVRTC library is needed) and keeps it from loading the
new kernel onto a device. ``ptxas`` (:func:`_ptxas`; of a toolkit no newer than the GPU
machines' driver: CUDA 13.0 for driver 580) turns the PTX into the cubin the driver loads.
It needs libNVVM where numba-cuda finds it (a CUDA toolkit, or the ``nvidia-nvvm`` wheel)
and ``ptxas``. The kernel's entry name, recorded in the header, carries numba's flags: where
nvJitLink is installed numba-cuda compiles with ``lto`` on, so two builds may differ in that
name and nothing else. The gzip header's time is fixed, so the same kernel gives the same
bytes.
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
    """numba-cuda compiles in this process as on a GPU of compute capability ``cc`` (see the
    module text)."""
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


def write(job) -> str:
    """Compile ``job`` = (spec, binding, cc) and write its shipped file (replaced atomically);
    returns the file's name."""
    spec, binding, cc = job
    content = compile_kernel(spec, binding, cc)
    path = build.shipped_path(spec, binding, cc)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as f:
        f.write(content)
    os.replace(tmp, path)
    return path.name


def stale(jobs) -> list:
    """The jobs (spec, binding, cc) whose shipped file is missing or no longer matches the code."""
    return [(s, b, cc) for s, b, cc in jobs if build.shipped(s, b, cc) is None]


def write_all(jobs, every: bool = False, say=print) -> int:
    """Write the shipped file of every stale job (of every job with ``every``), in parallel
    processes, and remove the shipped files of kernels not among ``jobs``; returns how many
    were written. Nothing of the user's kernel cache changes."""
    jobs = list(jobs)
    todo = jobs if every else stale(jobs)
    if todo:
        import multiprocessing as mp

        with mp.get_context("spawn").Pool(min(len(todo), os.cpu_count() or 1)) as pool:
            for name in pool.imap_unordered(write, todo, chunksize=1):
                say(f"wrote {name}")
    listed = {build.shipped_path(s, b, cc) for s, b, cc in jobs}
    for path in sorted(build.SHIPPED_DIR.glob("*.cubin.gz")):
        if path not in listed:
            path.unlink()
            say(f"removed {path.name}")
    return len(todo)
