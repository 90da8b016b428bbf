"""What this process runs on: the cores it may use, and hmmsearch's floating-point mode.

:func:`usable_cores` is the number of CPU threads a search takes by default (the modules
that size thread pools ask it here, not through the options).

Flush-to-zero: ``hmmsearch`` calls ``impl_Init()``, which sets the MXCSR flush-to-zero bit in every
thread, so a subnormal result (an E-value below 2.2e-308, say) becomes 0. pyhmmer leaves
the mode alone. :func:`flush_to_zero` sets the bit in the calling thread for the duration
of a ``with`` block, so that pyhmmer's Forward stage and the E-values written to the tables
are hmmsearch's. It goes through glibc's ``fegetenv``/``fesetenv`` (whose x86-64 ``fenv_t``
ends with the MXCSR word), so it needs no compiled code and imports nothing heavy. On
other processors or C libraries it does nothing.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
import platform

def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the system has one), at least one."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


_FTZ = 0x8000  # MXCSR bit 15
_MXCSR_OFFSET = 28  # glibc x86-64 fenv_t: 28 bytes of x87 environment, then the MXCSR word


class _FenvT(ctypes.Structure):
    _fields_ = [("x87", ctypes.c_uint8 * _MXCSR_OFFSET), ("mxcsr", ctypes.c_uint32)]


@functools.lru_cache(maxsize=None)
def _libm():
    """glibc's libm on x86-64, or None where the MXCSR cannot be reached this way."""
    if platform.machine().lower() not in ("x86_64", "amd64") or platform.libc_ver()[0] != "glibc":
        return None
    # PyDLL: the calls keep the GIL (a CDLL call gives it up and must wait to take it back,
    # behind every other thread of a busy search, twice per query written)
    lib = ctypes.PyDLL(ctypes.util.find_library("m"))
    for name in ("fegetenv", "fesetenv"):
        getattr(lib, name).argtypes = [ctypes.POINTER(_FenvT)]
        getattr(lib, name).restype = ctypes.c_int
    return lib


def set_flush_to_zero(enabled: bool) -> bool:
    """Set or clear flush-to-zero in the calling thread; return the previous setting."""
    lib = _libm()
    if lib is None:
        return False
    env = _FenvT()
    lib.fegetenv(ctypes.byref(env))
    previous = bool(env.mxcsr & _FTZ)
    env.mxcsr = (env.mxcsr | _FTZ) if enabled else (env.mxcsr & ~_FTZ)
    lib.fesetenv(ctypes.byref(env))
    return previous


@contextlib.contextmanager
def flush_to_zero(enabled: bool = True):
    """Run the block with SSE flush-to-zero on (as hmmsearch does); restore the mode after."""
    if not enabled:
        yield
        return
    previous = set_flush_to_zero(True)
    try:
        yield
    finally:
        set_flush_to_zero(previous)
