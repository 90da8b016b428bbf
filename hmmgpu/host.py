"""What this process runs on: the cores it may use, the signals that stop it, and hmmsearch's
floating-point mode.

:func:`usable_cores` is the number of CPU threads a search takes by default (the modules
that size thread pools ask it here, not through the options).

Signals: the command line (:func:`stop_on_signals`) makes SIGTERM stop a run as SIGINT
(Ctrl-C) does: each raises :class:`Interrupted`, a ``KeyboardInterrupt``, in the main thread,
so that every ``with`` block on the way out runs (output files discarded, workers stopped).
A few steps must not be cut in two by it: a temporary file created but not yet recorded for
removal, or outputs half renamed into place. They run under :func:`signals_deferred`, which
holds a signal back until the step is over.

Imports: :func:`modules_hidden` makes an import of the named modules fail for the duration of
a ``with`` block (where they are not yet imported), for libraries that probe for optional
modules at import and pay for them (numba's BLAS and cffi probes).

The end: :func:`end_process` ends the process at once, its outputs complete, skipping an
exit that would only tear down (``hmmgpu sw``'s command line and its device processes).

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
import signal
import sys
import threading

def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the system has one), at least one."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


#: The signals that stop a run, as Ctrl-C does.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """A run stopped by SIGINT or SIGTERM (:func:`stop_on_signals`)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_status(self) -> int:
        """The shell's status of a process stopped by this signal: 130 (SIGINT), 143 (SIGTERM)."""
        return 128 + self.signum

    @property
    def message(self) -> str:
        """One line for standard error."""
        return "interrupted" if self.signum == signal.SIGINT else f"terminated ({signal.Signals(self.signum).name})"


class _SignalState:
    received: int | None = None  #: the first stopping signal received
    deferring = 0  #: depth of signals_deferred() blocks in the main thread
    pending: int | None = None  #: a signal held back by them


def _on_signal(signum, frame) -> None:
    if _SignalState.received is None:
        _SignalState.received = signum
    if _SignalState.deferring:
        _SignalState.pending = signum
        return
    raise Interrupted(signum)


@contextlib.contextmanager
def stop_on_signals():
    """For the block, SIGINT and SIGTERM raise :class:`Interrupted` in the main thread (the
    previous handlers come back after it). Elsewhere than in the main thread it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _on_signal) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _SignalState.received = _SignalState.pending = None


def interrupted() -> bool:
    """A stopping signal has been received (under :func:`stop_on_signals`): the process is
    on its way out, and need not wait for work it no longer wants."""
    return _SignalState.received is not None


@contextlib.contextmanager
def signals_deferred():
    """Hold a stopping signal received during the block back until the block is over, then
    raise its :class:`Interrupted`. Only the main thread's blocks defer (Python runs signal
    handlers there); elsewhere the block just runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _SignalState.deferring += 1
    try:
        yield
    finally:
        _SignalState.deferring -= 1
        if not _SignalState.deferring and _SignalState.pending is not None:
            signum, _SignalState.pending = _SignalState.pending, None
            raise Interrupted(signum)


_FTZ = 0x8000  # MXCSR bit 15
_MXCSR_OFFSET = 28  # glibc x86-64 fenv_t: 28 bytes of x87 environment, then the MXCSR word


@contextlib.contextmanager
def modules_hidden(names):
    """Within the block, an import of any of ``names`` (or of any part of it) that is not yet
    imported raises ImportError, as if it were not installed; afterwards they import again."""
    hidden = [name for name in names if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None
    try:
        yield
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


def end_process(status: int) -> None:
    """End the process now with ``status``, once standard output and error are flushed; the
    caller's outputs are complete and closed. What a normal exit would do after ``hmmgpu sw``
    is all teardown: the interpreter's finalisation frees every object of numba and llvmlite
    (a tenth of a second and more, ``gc.freeze()`` avoiding only the collections over them),
    idle threads are joined, and the CUDA driver's exit handlers take the device's context
    down (the operating system frees what the process holds in any case). Only for a
    process's own command line, never for a caller sharing the process."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader gone away (| head) or a closed stream: nothing left to say
            pass
    os._exit(status)


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
