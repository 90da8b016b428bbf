"""Generated kernels, compiled once per device and kept on disk.

A kernel family describes each specialisation with a frozen *spec* object that has a
``name`` and a ``source(binding)`` method returning the text of a small Python module with
one ``@cuda.jit(signature, cache=True)`` function called ``kernel``. numba compiles it: the
text is written to ``<cache>/kernels/<cuda|sim>/<name>.py`` (only when it changed, so
numba's own cache, keyed on the file, stays valid) and imported.

On a GPU the compiled kernel is then *exported*: its cubin, entry name and argument kinds go
to ``<name>.sm<cc>.cubin`` beside the source (one JSON header line, then the cubin), keyed
by a digest of the source text. :func:`load` runs kernels from these files through the CUDA
driver (:mod:`hmmgpu.gpu.runtime.driver`), so a process that finds every kernel exported never
imports numba. Under numba's simulator :func:`load` returns numba's own kernel.

The cache lives under ``$HMMGPU_CACHE_DIR`` or ``$XDG_CACHE_HOME/hmmgpu`` (default
``~/.cache/hmmgpu``). :func:`compile_ahead` finds what is missing for a device, prints one
line while it compiles, and compiles the missing kernels in parallel processes (``hmmgpu
warmup`` calls it for every shape).

Some kernels also ship with hmmgpu, compiled ahead of time for the GPUs the project runs on
(:data:`SHIPPED_DIR`, written by ``python3 -m hmmgpu.gpu.prebuilt_kernels``): a fresh machine
then runs them without compiling (numba's pipeline takes 4-13 s a kernel). A shipped file
has the exported format, gzip-compressed, and its header also holds a digest of the hmmgpu
modules the kernel module imports (:func:`helpers_digest`: the lane and warp helpers, and
the float helpers of :mod:`hmmgpu.gpu.rounding`), whose device functions are
compiled into the kernel but whose text the source does not contain: a shipped kernel is
used only while both digests match the code, and one that does not, or that the driver
refuses to load, is compiled as before.
"""
from __future__ import annotations

import functools
import gzip
import hashlib
import importlib.util
import json
import os
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

from hmmgpu.errors import HmmgpuError
from hmmgpu.host import modules_hidden, usable_cores

#: One import (and compile) of a kernel module at a time, so that every thread gets the same
#: kernel object (its launch attributes, such as the dynamic shared-memory limit, are set
#: once): the driver's kernels under the first lock, numba's under the second (taken after
#: the first where both are), which is also taken where numba's kernel is asked for outside
#: :func:`load` (:func:`numba_kernel`, an export).
_LOAD_LOCK = threading.Lock()
_NUMBA_LOCK = threading.Lock()


def cache_root() -> Path:
    """hmmgpu's cache directory (created on first use)."""
    base = os.environ.get("HMMGPU_CACHE_DIR")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg, "hmmgpu")
    return Path(base)


def any_compiled() -> bool:
    """Whether a GPU search here may find its kernels without compiling them: a cubin in the
    cache (after a GPU search or ``hmmgpu warmup``), or, where the cache has none, kernels
    shipped for the architecture of GPU 0 (:data:`SHIPPED_DIR`; the driver is asked for it
    then, 0.1-0.2 s). False on a fresh machine whose GPU has no kernels shipped, until a GPU
    search or ``hmmgpu warmup``. Creates nothing."""
    try:
        if next((cache_root() / "kernels" / "cuda").glob("*.cubin"), None) is not None:
            return True
    except OSError:
        pass
    from hmmgpu.gpu.runtime.context import compute_capability

    cc = compute_capability(0)
    return cc is not None and next(SHIPPED_DIR.glob(f"*.sm{cc[0]}{cc[1]}.cubin.gz"), None) is not None


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


def load(spec, device):
    """The compiled kernel of ``spec`` for ``device``: numba's own under the simulator; on a GPU
    a :class:`~hmmgpu.gpu.runtime.driver.Kernel` from the exported cubin (compiled and exported
    here first if missing)."""
    with _LOAD_LOCK:
        if device.simulator:
            with _NUMBA_LOCK:
                return _numba_kernel(spec, "python")
        return _driver_kernel(spec, device)


def numba_kernel(spec, binding: str):
    """numba's kernel of ``spec`` (compiled for numba's current device, or loaded from numba's
    cache), for the tools and tests that inspect a kernel's code (every route launches through
    :func:`load`)."""
    with _NUMBA_LOCK:
        return _numba_kernel(spec, binding)


@functools.lru_cache(maxsize=None)
def _numba_kernel(spec, binding: str):
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


@functools.lru_cache(maxsize=None)
def _driver_kernel(spec, device):
    exported = _exported(spec, device, cubin=True)
    if exported is not None and "helpers" in exported[0]:  # a shipped kernel (only theirs name the helpers)
        try:
            return device.runtime.load_kernel(exported[1], exported[0]["entry"], exported[0]["kinds"])
        except HmmgpuError:  # one this driver does not take: compiled here, as where none is shipped
            exported = None
    if exported is None:
        _compile_one((spec, device.lane_binding, device.id, device.cc))
        exported = _exported(spec, device, cubin=True)
        if exported is None:
            raise HmmgpuError(f"kernel {spec.name}: its compiled cubin was not written to {_export_path(spec, device)}")
    header, image = exported
    return device.runtime.load_kernel(image, header["entry"], header["kinds"])


@functools.lru_cache(maxsize=None)
def _source_digest(spec, binding: str) -> str:
    return hashlib.sha256(spec.source(binding).encode()).hexdigest()[:20]


def _export_path(spec, device) -> Path:
    return kernel_dir(False) / f"{spec.name}_{device.lane_binding}.sm{device.cc[0]}{device.cc[1]}.cubin"


def _exported(spec, device, cubin: bool = False) -> tuple | None:
    """(header, cubin) of ``spec``'s exported kernel for ``device``, read in one pass (the
    cubin None unless asked for), or None where there is none or it was compiled from another
    source text; where the cache has none, the shipped one (:func:`shipped`)."""
    try:
        with open(_export_path(spec, device), "rb") as f:
            header = json.loads(f.readline())
            image = f.read() if cubin else None
    except (OSError, ValueError):
        return shipped(spec, device.lane_binding, device.cc)
    if header.get("source") == _source_digest(spec, device.lane_binding):
        return header, image
    return shipped(spec, device.lane_binding, device.cc)


#: Kernels compiled ahead of time and shipped with hmmgpu (see the module text).
SHIPPED_DIR = Path(__file__).resolve().parent.parent / "prebuilt"
#: The directory that holds the ``hmmgpu`` package.
_PACKAGE_PARENT = Path(__file__).resolve().parents[3]


def imported_modules(text: str) -> list:
    """The files of the hmmgpu modules a generated kernel module's ``text`` imports, in the
    order it names them: ``from hmmgpu.a import b, c as d`` names ``a/b.py`` and ``a/c.py``
    where those are modules, else ``a.py`` (or ``a/__init__.py``); ``import hmmgpu.a`` names
    ``a.py``."""
    files = []
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 4 and words[0] == "from" and words[1].startswith("hmmgpu.") and words[2] == "import":
            package = _PACKAGE_PARENT.joinpath(*words[1].split("."))
            for name in (item.split()[0] for item in line.split(" import ", 1)[1].split(",")):
                files.append(package / f"{name}.py" if (package / f"{name}.py").is_file() else _module_file(package))
        elif len(words) >= 2 and words[0] == "import" and words[1].startswith("hmmgpu."):
            files.append(_module_file(_PACKAGE_PARENT.joinpath(*words[1].split("."))))
    return list(dict.fromkeys(files))


def _module_file(path: Path) -> Path:
    """``path``'s module file: ``path.py``, or the package's ``__init__.py``."""
    return path.with_name(path.name + ".py") if path.with_name(path.name + ".py").is_file() else path / "__init__.py"


@functools.lru_cache(maxsize=None)
def helpers_digest(spec, binding: str) -> str:
    """Digest of the hmmgpu modules ``spec``'s kernel module imports (:func:`imported_modules`:
    their device functions are compiled into the kernel), part of a shipped kernel's key."""
    h = hashlib.sha256()
    for path in imported_modules(spec.source(binding)):
        h.update(path.read_bytes())
    return h.hexdigest()[:20]


def shipped_path(spec, binding: str, cc) -> Path:
    """Where the shipped kernel of ``spec`` for lane binding ``binding`` and compute
    capability ``cc`` lies (whether or not it exists)."""
    return SHIPPED_DIR / f"{spec.name}_{binding}.sm{cc[0]}{cc[1]}.cubin.gz"


def shipped_header(spec, binding: str) -> dict:
    """The digests a shipped kernel's header must hold to be used."""
    return dict(source=_source_digest(spec, binding), helpers=helpers_digest(spec, binding))


def shipped(spec, binding: str, cc) -> tuple | None:
    """(header, cubin) of the kernel shipped for ``spec``, or None where none is shipped or
    its digests are not those of the code (:func:`shipped_header`). A file is read once per
    process (a search asks for its kernels three times: two checks for missing ones, then the
    load), while it stays the same file."""
    path = shipped_path(spec, binding, cc)
    try:
        st = path.stat()
    except OSError:
        return None
    content = _read_shipped(path, st.st_ino, st.st_size, st.st_mtime_ns)
    if content is None or any(content[0].get(k) != v for k, v in shipped_header(spec, binding).items()):
        return None
    return content


@functools.lru_cache(maxsize=None)
def _read_shipped(path: Path, inode: int, size: int, mtime_ns: int) -> tuple | None:
    """(header, cubin) of a shipped file (None: unreadable); the file's identity, size and time
    are part of the key."""
    try:
        with gzip.open(path, "rb") as f:
            return json.loads(f.readline()), f.read()
    except (OSError, ValueError, EOFError):
        return None


def _export(spec, binding: str, device) -> None:
    """Compile (or load from numba's cache) ``spec`` on numba's current device and write its
    cubin, entry name and argument kinds (one file, replaced atomically)."""
    from hmmgpu.gpu.runtime.kargs import argument_kind

    with _NUMBA_LOCK:
        compiled = next(iter(_numba_kernel(spec, binding).overloads.values()))
    library = compiled._codelibrary
    if library._setup_functions or compiled.cooperative:
        raise HmmgpuError(f"kernel {spec.name} needs numba's own launch (module set-up or a cooperative grid)")
    header = dict(entry=compiled.entry_name, kinds=[argument_kind(t) for t in compiled.argument_types],
                  source=_source_digest(spec, binding))
    cubin = library.get_cubin(cc=tuple(device.cc))
    if getattr(cubin, "code_type", "cubin") != "cubin":
        raise HmmgpuError(f"kernel {spec.name}: numba gave {cubin.code_type}, not a cubin")
    path = _export_path(spec, device)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(json.dumps(header).encode() + b"\n" + bytes(getattr(cubin, "code", cubin)))  # cuda.core's ObjectCode
    os.replace(tmp, path)


def _scipy_hidden():
    """numba-cuda sets its CUDA target up at the first kernel compiled or loaded from its cache,
    and there probes for a BLAS by importing ``scipy.linalg`` (``numba.cuda.np.arraymath``):
    0.45 s on the GPU machine, where scipy is installed, in every process that compiles (or,
    as the GPU process did before kernels ran through the driver, loads) a kernel, for
    linear algebra no hmmgpu kernel uses. While a kernel module runs, scipy and its
    ``linalg``, where not yet imported, are hidden, so the probe fails at once (numba then
    leaves its BLAS functions out); other modules may have imported scipy itself already.
    numba's CPU target probes the same way when it is set up (``numba.np.arraymath``), which
    :func:`hmmgpu.sw.traceback.passes` hides too."""
    return modules_hidden(("scipy", "scipy.linalg"))


def missing(specs, device) -> list:
    """The specs not yet compiled and exported for ``device``."""
    if device.simulator:
        return []
    return [s for s in dict.fromkeys(specs) if _exported(s, device) is None]


def _compile_one(args):
    spec, binding, device_id, cc = args
    from numba import cuda

    with cuda.gpus[device_id]:
        _export(spec, binding, SimpleNamespace(cc=cc, lane_binding=binding))
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
    jobs = [(s, device.lane_binding, device.id, device.cc) for s in todo]
    workers = min(len(jobs), processes or usable_cores())
    if workers <= 1:
        for job in jobs:
            _compile_one(job)
    else:
        import multiprocessing as mp

        with mp.get_context("spawn").Pool(workers) as pool:
            pool.map(_compile_one, jobs, chunksize=1)
    return len(todo)
