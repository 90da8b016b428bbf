"""The own post-filter's worker threads run the CPU references in parallel: every numba
function of the references it calls releases the GIL (``nogil``), and is cached on disk where
numba can cache it (all but the loop that calls glibc's ``logf`` through a ctypes pointer)."""
import importlib

import pytest
from numba.core.caching import NullCache
from numba.core.registry import CPUDispatcher

MODULES = ["hmmgpu.cpu.fwdback", "hmmgpu.cpu.optacc", "hmmgpu.cpu.decoding", "hmmgpu.cpu.envelope",
           "hmmgpu.cpu.stotrace", "hmmgpu.cpu.null2", "hmmgpu.cpu.spensemble"]
#: numba cannot cache a function that calls through a ctypes pointer.
UNCACHEABLE = {"hmmgpu.cpu.null2._glibc_logf_loop"}


def _dispatchers(name):
    module = importlib.import_module(name)
    return {f"{name}.{attr}": fn for attr, fn in vars(module).items()
            if isinstance(fn, CPUDispatcher) and fn.py_func.__module__ == name}


@pytest.mark.parametrize("name", MODULES)
def test_references_release_the_gil(name):
    found = _dispatchers(name)
    if name != "hmmgpu.cpu.envelope":  # composes the others' functions, defines none
        assert found
    for qualified, fn in found.items():
        assert fn.targetoptions.get("nogil"), f"{qualified} holds the GIL"
        assert not isinstance(fn._cache, NullCache) or qualified in UNCACHEABLE, f"{qualified} is not cached"
