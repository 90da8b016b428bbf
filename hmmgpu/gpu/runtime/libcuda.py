"""The CUDA driver library (``libcuda.so.1``) through ctypes: loaded once, each function hmmgpu
calls declared with its C types, and every result checked.

Declaring the types matters: ctypes passes an undeclared Python integer as a C ``int``, which
would cut a 64-bit device pointer or handle in half. Functions the installed driver lacks
stay undeclared (:func:`has` says so; ``cuFuncGetParamInfo`` needs a CUDA 12.4 driver).
:func:`primary_context` retains a device's primary context with blocking synchronisation, the
one context every launch uses.

Each function is called through one of two handles on the library. ctypes gives up the
interpreter's lock for every call of a ``CDLL`` function and takes it back on return; where
another thread of the process runs Python (the GPU process's domain definitions beside its
filters' loop), taking it back can wait up to a switch interval (5 ms) each time, and a loop
that makes thousands of calls (a launch is three: the context pushed, the launch, the context
popped) then waits more than it works. The functions of :data:`QUICK` return at once (they
queue work, or read or set a value; none waits for the device), so they are called through a
``PyDLL`` handle, which keeps the lock (:data:`~hmmgpu.gpu.runtime.tuning.DRIVER_QUICK_CALLS_KEEP_LOCK`);
every function that may wait (a synchronisation, a copy that pageable memory makes
synchronous, a module load, a free) gives it up, so that other threads run meanwhile.

No numpy here: the search's own process asks the driver whether a GPU is there
(:func:`hmmgpu.gpu.runtime.context.cuda_available`) before it imports anything heavy.
"""
from __future__ import annotations

import ctypes
import functools

from hmmgpu.errors import HmmgpuError
from hmmgpu.gpu.runtime import tuning

_p = ctypes.c_void_p
_int = ctypes.c_int
_uint = ctypes.c_uint
_size = ctypes.c_size_t
_dptr = ctypes.c_uint64  #: CUdeviceptr
_P = ctypes.POINTER

#: argument types of every driver function hmmgpu calls (all return a ``CUresult``)
SIGNATURES = {
    "cuInit": (_uint,),
    "cuDeviceGetCount": (_P(_int),),
    "cuDeviceGet": (_P(_int), _int),
    "cuDeviceGetName": (ctypes.c_char_p, _int, _int),
    "cuDeviceGetAttribute": (_P(_int), _int, _int),
    "cuDevicePrimaryCtxSetFlags_v2": (_int, _uint),
    "cuDevicePrimaryCtxRetain": (_P(_p), _int),
    "cuCtxPushCurrent_v2": (_p,),
    "cuCtxPopCurrent_v2": (_P(_p),),
    "cuMemGetInfo_v2": (_P(_size), _P(_size)),
    "cuMemAlloc_v2": (_P(_dptr), _size),
    "cuMemFree_v2": (_dptr,),
    "cuMemAllocAsync": (_P(_dptr), _size, _p),
    "cuMemFreeAsync": (_dptr, _p),
    "cuDeviceGetDefaultMemPool": (_P(_p), _int),
    "cuMemPoolSetAttribute": (_p, _int, _p),
    "cuMemHostAlloc": (_P(_p), _size, _uint),
    "cuMemFreeHost": (_p,),
    "cuMemcpyHtoD_v2": (_dptr, _p, _size),
    "cuMemcpyDtoH_v2": (_p, _dptr, _size),
    "cuMemcpyHtoDAsync_v2": (_dptr, _p, _size, _p),
    "cuMemcpyDtoHAsync_v2": (_p, _dptr, _size, _p),
    "cuStreamCreate": (_P(_p), _uint),
    "cuStreamSynchronize": (_p,),
    "cuStreamDestroy_v2": (_p,),
    "cuEventCreate": (_P(_p), _uint),
    "cuEventRecord": (_p, _p),
    "cuEventSynchronize": (_p,),
    "cuEventQuery": (_p,),
    "cuEventElapsedTime": (_P(ctypes.c_float), _p, _p),
    "cuEventDestroy_v2": (_p,),
    "cuModuleLoadData": (_P(_p), _p),
    "cuModuleGetFunction": (_P(_p), _p, ctypes.c_char_p),
    "cuFuncGetAttribute": (_P(_int), _int, _p),
    "cuFuncSetAttribute": (_p, _int, _int),
    "cuFuncGetParamInfo": (_p, _size, _P(_size), _P(_size)),
    "cuLaunchKernel": (_p, _uint, _uint, _uint, _uint, _uint, _uint, _uint, _p, _P(_p), _P(_p)),
    "cuGetErrorName": (_int, _P(ctypes.c_char_p)),
}


#: The functions that return at once, called with the interpreter's lock kept (module header).
QUICK = frozenset({
    "cuCtxPushCurrent_v2", "cuCtxPopCurrent_v2", "cuLaunchKernel", "cuEventRecord", "cuEventQuery",
    "cuEventCreate", "cuEventDestroy_v2", "cuEventElapsedTime", "cuMemAllocAsync", "cuMemFreeAsync",
    "cuFuncGetAttribute", "cuFuncSetAttribute", "cuFuncGetParamInfo", "cuModuleGetFunction",
    "cuDeviceGetAttribute", "cuGetErrorName",
})


def _declared(kind):
    """The driver library opened as ``kind`` (``ctypes.CDLL`` or ``ctypes.PyDLL``) with every
    function of :data:`SIGNATURES` it has declared, or None where it does not load."""
    try:
        lib = kind("libcuda.so.1")
    except OSError:
        return None
    for name, argtypes in SIGNATURES.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.argtypes = argtypes
            fn.restype = ctypes.c_int
    return lib


@functools.lru_cache(maxsize=None)
def load():
    """The driver library with its functions declared (each call gives up the interpreter's
    lock), or None where it does not load."""
    return _declared(ctypes.CDLL)


@functools.lru_cache(maxsize=None)
def _load_keeping_lock():
    """The same library through a handle whose calls keep the interpreter's lock."""
    return _declared(ctypes.PyDLL)


def function(name: str):
    """Driver function ``name`` as it is called: through the handle that keeps the
    interpreter's lock for a :data:`QUICK` one (when tuning asks for it), else through :func:`load`'s."""
    lib = load()
    if lib is None:
        raise HmmgpuError("the CUDA driver library (libcuda.so.1) does not load")
    if name in QUICK and tuning.DRIVER_QUICK_CALLS_KEEP_LOCK:
        lib = _load_keeping_lock()
    return getattr(lib, name)


def has(name: str) -> bool:
    """The driver library loads and has function ``name``."""
    lib = load()
    return lib is not None and hasattr(lib, name)


def call(name: str, *args) -> None:
    """Call driver function ``name``; raise :class:`HmmgpuError` (one line) if it fails."""
    result = function(name)(*args)
    if result != 0:
        lib = load()
        raise HmmgpuError(f"CUDA driver: {name} failed with {_error_name(lib, result)}")


def _error_name(lib, result: int) -> str:
    text = ctypes.c_char_p()
    if hasattr(lib, "cuGetErrorName") and lib.cuGetErrorName(result, ctypes.byref(text)) == 0 and text.value:
        return text.value.decode()
    return f"error {result}"


#: ``CU_CTX_SCHED_BLOCKING_SYNC``: a thread that waits on an event or a stream sleeps.
CU_CTX_SCHED_BLOCKING_SYNC = 0x4


def set_blocking_sync(device: int):
    """Ask for blocking synchronisation on the primary context of ``device``; the device's
    driver handle, or None where the driver or the device is not there (a driver that refuses
    the flag leaves the default, spinning, which is only slower)."""
    driver = load()
    dev = ctypes.c_int(0)
    if driver is None or driver.cuInit(0) != 0 or driver.cuDeviceGet(ctypes.byref(dev), int(device)) != 0:
        return None
    driver.cuDevicePrimaryCtxSetFlags_v2(dev, CU_CTX_SCHED_BLOCKING_SYNC)
    return dev


def primary_context(device: int):
    """Start the driver and retain the primary context of ``device``, with blocking
    synchronisation set first: (the device's handle, the context's handle), or None where
    the driver or the device is not there."""
    dev = set_blocking_sync(device)
    context = ctypes.c_void_p()
    if dev is None or load().cuDevicePrimaryCtxRetain(ctypes.byref(context), dev) != 0:
        return None
    return dev, context
