"""The CUDA driver library (``libcuda.so.1``) through ctypes: loaded once, each function hmmgpu
calls declared with its C types, and every result checked.

Declaring the types matters: ctypes passes an undeclared Python integer as a C ``int``, which
would cut a 64-bit device pointer or handle in half. Functions the installed driver lacks
stay undeclared (:func:`has` says so; ``cuFuncGetParamInfo`` needs a CUDA 12.4 driver).
:func:`primary_context` retains a device's primary context with blocking synchronisation, the
one context every launch uses.

No numpy here: the search's own process asks the driver whether a GPU is there
(:func:`hmmgpu.gpu.runtime.context.cuda_available`) before it imports anything heavy.
"""
from __future__ import annotations

import ctypes
import functools

from hmmgpu.errors import HmmgpuError

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


@functools.lru_cache(maxsize=None)
def load():
    """The driver library with its functions declared, or None where it does not load."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    for name, argtypes in SIGNATURES.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.argtypes = argtypes
            fn.restype = ctypes.c_int
    return lib


def has(name: str) -> bool:
    """The driver library loads and has function ``name``."""
    lib = load()
    return lib is not None and hasattr(lib, name)


def call(name: str, *args) -> None:
    """Call driver function ``name``; raise :class:`HmmgpuError` (one line) if it fails."""
    lib = load()
    if lib is None:
        raise HmmgpuError("the CUDA driver library (libcuda.so.1) does not load")
    result = getattr(lib, name)(*args)
    if result != 0:
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
