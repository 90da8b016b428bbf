"""Generated kernels, compiled once per device and kept on disk.

A kernel family describes each specialisation with a frozen *spec* object that has a
``name`` and a ``source(binding)`` method returning the text of a small Python module with
one ``@cuda.jit(signature, cache=True)`` function called ``kernel``. :func:`load` writes
that text to ``<cache>/kernels/<cuda|sim>/<name>.py`` (only when it changed, so numba's
cache, keyed on the file, stays valid), imports it, and returns the kernel: numba compiles
it at import for the current device, or loads the cubin it saved the first time.

The cache lives under ``$HMMGPU_CACHE_DIR`` or ``$XDG_CACHE_HOME/hmmgpu`` (default
``~/.cache/hmmgpu``). A marker file per kernel and compute capability records that it has
been compiled, so :func:`compile_ahead` knows what is missing, prints one line while it
compiles, and compiles the missing kernels in parallel processes (``hmmgpu warmup`` calls
it for every shape).
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import sys
import threading
from pathlib import Path

#: One import (and compile) of a kernel module at a time, so that every thread gets the same
#: kernel object (its launch attributes, such as the dynamic shared-memory limit, are set
#: once), and one first load of a kernel's module into a context (:func:`cufunc`).
_LOAD_LOCK = threading.Lock()


def cache_root() -> Path:
    """hmmgpu's cache directory (created on first use)."""
    base = os.environ.get("HMMGPU_CACHE_DIR")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg, "hmmgpu")
    return Path(base)


def kernel_dir(simulator: bool) -> Path:
    """Where the generated kernel modules (and numba's cache of them) live."""
    d = cache_root() / "kernels" / ("sim" if simulator else "cuda")
    d.mkdir(parents=True, exist_ok=True)
    return d


def _write_source(path: Path, text: str) -> None:
    try:
        if path.read_text() == text:
            return
    except OSError:
        pass
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def load(spec, binding: str):
    """The compiled kernel of ``spec`` in lane binding ``binding`` (``python``: simulator)."""
    with _LOAD_LOCK:
        return _load(spec, binding)


def cufunc(kernel):
    """The driver function of a loaded kernel (its registers, limits and handle), its module
    loaded into the current context on first use. numba-cuda 0.30 loads a module into a
    context without a lock: two threads asking first for the same kernel both load it and
    the second fails ("key already in dictionary"), so the first load is taken under
    :data:`_LOAD_LOCK`."""
    with _LOAD_LOCK:
        return kernel.overloads[next(iter(kernel.overloads))]._codelibrary.get_cufunc()


@functools.lru_cache(maxsize=None)
def _load(spec, binding: str):
    simulator = binding == "python"
    name = f"{spec.name}_{binding}"
    path = kernel_dir(simulator) / f"{name}.py"
    _write_source(path, spec.source(binding))
    modname = f"hmmgpu_kernels.{name}"
    mspec = importlib.util.spec_from_file_location(modname, path)
    module = importlib.util.module_from_spec(mspec)
    sys.modules[modname] = module
    with _scipy_hidden():
        mspec.loader.exec_module(module)
    return module.kernel


@contextlib.contextmanager
def _scipy_hidden():
    """numba-cuda sets its CUDA target up at the first kernel compiled or loaded from its cache,
    and there probes for a BLAS by importing ``scipy.linalg`` (``numba.cuda.np.arraymath``):
    0.45 s of a GPU process's start-up on the GPU machine, where scipy is installed, for
    linear algebra no hmmgpu kernel uses. While a kernel module runs, scipy and its
    ``linalg``, where not yet imported, are hidden, so the probe fails at once (numba then
    leaves its BLAS functions out); other modules may have imported scipy itself already."""
    hidden = [name for name in ("scipy", "scipy.linalg") if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # an import of it, or of any part of it, raises ImportError
    try:
        yield
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


def _marker(spec, device) -> Path:
    return kernel_dir(device.simulator) / f"{spec.name}_{device.lane_binding}.sm{device.cc[0]}{device.cc[1]}.ok"


def missing(specs, device) -> list:
    """The specs not yet compiled for ``device``."""
    if device.simulator:
        return []
    return [s for s in dict.fromkeys(specs) if not _marker(s, device).exists()]


def _compile_one(args):
    spec, binding, device_id = args
    from numba import cuda

    with cuda.gpus[device_id]:
        load(spec, binding)
    return spec.name


def compile_ahead(specs, device, processes: int | None = None, notice=None) -> int:
    """Compile the specs that ``device`` lacks, in parallel processes; return how many.

    ``notice(text)`` receives the one-line message printed while compiling (default: stderr).
    """
    todo = missing(specs, device)
    if not todo:
        return 0
    say = notice or (lambda text: print(text, file=sys.stderr, flush=True))
    say(f"hmmgpu: compiling {len(todo)} GPU kernel{'s' * (len(todo) > 1)} for {device.description} "
        f"(once per device; cached in {cache_root()})")
    binding = device.lane_binding
    jobs = [(s, binding, device.id) for s in todo]
    workers = min(len(jobs), processes or os.cpu_count() or 1)
    if workers <= 1:
        for job in jobs:
            _compile_one(job)
    else:
        import multiprocessing as mp

        with mp.get_context("spawn").Pool(workers) as pool:
            pool.map(_compile_one, jobs, chunksize=1)
    for s in todo:
        _marker(s, device).touch()
    return len(todo)
