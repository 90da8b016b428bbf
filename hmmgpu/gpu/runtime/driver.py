"""Compiled kernels run through the CUDA driver API (ctypes), with no numba in the process.

Why
---
numba-cuda compiles hmmgpu's kernels, but running a kernel compiled earlier needs none of
it. The GPU process of a search used to spend most of its start-up in numba: importing
``numba.cuda`` (0.35 s on the H200 machine) and, at the first kernel loaded from numba's
cache, setting up its typing and target registries (0.5 s), while the driver had the
device's context ready after 0.2 s. :mod:`.build` keeps each kernel's cubin when numba
compiles it; this module loads it (``cuModuleLoadData``) and launches it
(``cuLaunchKernel``) with plain driver calls, which also leave the interpreter's lock free
while the driver works.

What it provides is the part of numba's API that the launch code uses, under the same
names, so that the code reads the same on a GPU and under numba's simulator (which CI
runs; :class:`hmmgpu.gpu.runtime.simulator.SimulatorRuntime` is its counterpart):
:class:`DeviceArray` (1-D device memory: ``size``, slices, ``view``, ``copy_to_device``,
``copy_to_host``), pinned host arrays, :class:`Stream`, :class:`Event` and :class:`Kernel`
(``kernel[grid, block, stream, shared](*args)``), all made by a :class:`DriverRuntime`, one
per device, on the device's primary context.

Arguments in numba's kernel ABI
-------------------------------
numba passes a one-dimensional array as seven parameters (meminfo and parent pointers,
null on the device, the element count, the item size, the data pointer, the shape and the
stride) and a scalar as itself. The export records each argument's kind
(:func:`~hmmgpu.gpu.runtime.kargs.argument_kind`), and :class:`Kernel` checks the parameter count and every size
against the cubin's own parameter table (``cuFuncGetParamInfo``) when it loads it, so that
a change of numba's ABI fails loudly instead of passing wrong arguments.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import struct
import weakref

import numpy as np

from hmmgpu.errors import HmmgpuError
from hmmgpu.gpu.runtime import libcuda, tuning
from hmmgpu.gpu.runtime.kargs import SCALAR_FORMATS
from hmmgpu.gpu.runtime.libcuda import primary_context
from hmmgpu.gpu.runtime.libcuda import call

#: ``CU_STREAM_NON_BLOCKING``: a :class:`Stream` that does not synchronise with the default stream.
NON_BLOCKING = 1
#: ``CUdevice_attribute`` values read by :meth:`DriverRuntime.attribute`.
DEVICE_ATTRIBUTES = dict(sm_count=16, smem_per_sm=81, smem_per_block_optin=97, cc_major=75, cc_minor=76,
                         memory_pools=115)
#: ``CU_MEMPOOL_ATTR_RELEASE_THRESHOLD``: the bytes a memory pool keeps when a stream synchronises.
POOL_RELEASE_THRESHOLD = 4
#: ``CUfunction_attribute`` values read by :meth:`Kernel.attribute`.
#: ``CUDA_ERROR_NOT_READY``: what ``cuEventQuery`` returns while the work is still running.
NOT_READY = 600
FUNCTION_ATTRIBUTES = dict(max_threads=0, shared_static=1, local_bytes=3, registers=4, max_dynamic_shared=8)
#: a one-dimensional array: meminfo, parent, count, item size, data, shape, stride
ARRAY_FORMAT = "QQqqQqq"


def _is_array(kind: str) -> bool:
    return kind.startswith("array:")


def parameter_format(kinds) -> str:
    """The struct format (native alignment, as the kernel's parameter space) of the kinds."""
    return "@" + "".join(ARRAY_FORMAT if _is_array(k) else SCALAR_FORMATS[k] for k in kinds)


def parameter_layout(kinds) -> list:
    """(offset, size) of every parameter the arguments of ``kinds`` make, natural alignment."""
    fmt = parameter_format(kinds)[1:]
    layout, at = [], 0
    for ch in fmt:
        size = struct.calcsize(ch)
        at = -(-at // size) * size
        layout.append((at, size))
        at += size
    return layout


def argument_values(kinds, args) -> list:
    """The parameter values of ``args`` (device arrays and scalars) in numba's kernel ABI; an
    array of another element type than the kernel's is refused, as numba's typed kernels do."""
    if len(args) != len(kinds):
        raise TypeError(f"the kernel takes {len(kinds)} arguments, {len(args)} given")
    values = []
    for element, value in zip(_element_types(tuple(kinds)), args):
        if element is None:
            values.append(value)
            continue
        dtype = value.dtype
        if dtype != element:
            raise TypeError(f"a kernel argument of {element.name} elements was given {dtype.name}")
        n, item = value.size, dtype.itemsize
        values += (0, 0, n, item, value.ptr, n, item)
    return values


@functools.lru_cache(maxsize=None)
def _element_types(kinds: tuple) -> tuple:
    """The numpy element type of each array kind, None for a scalar (once per kernel signature)."""
    return tuple(np.dtype(k[6:]) if _is_array(k) else None for k in kinds)


@contextlib.contextmanager
def current(context):
    """Make ``context`` current in the calling thread for the block (the driver keeps a stack)."""
    call("cuCtxPushCurrent_v2", context)
    try:
        yield
    finally:
        call("cuCtxPopCurrent_v2", ctypes.byref(ctypes.c_void_p()))


class _Memory:
    """One device allocation (in ``context``), freed when the last array on it goes."""

    __slots__ = ("context", "__weakref__")

    def __init__(self, context):
        self.context = context


def _free(function: str, context, handle, stream=None) -> None:
    """A finalizer: free ``handle`` with ``function`` in ``context`` (errors ignored: the
    process may be ending); with a ``stream`` (a stream-ordered allocation, kept alive until
    then), on that stream, after the work queued there, which is all the work that used it."""
    lib = libcuda.load()
    if lib.cuCtxPushCurrent_v2(context) != 0:
        return
    getattr(lib, function)(handle, *(() if stream is None else (stream.handle,)))
    lib.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))


class DeviceArray:
    """One-dimensional device memory: numba's ``DeviceNDArray`` as far as the launch code uses
    it. Its copies make the allocation's context current themselves."""

    __slots__ = ("ptr", "size", "dtype", "_memory")

    def __init__(self, ptr: int, size: int, dtype, memory):
        self.ptr = ptr
        self.size = size
        self.dtype = np.dtype(dtype)
        self._memory = memory  #: keeps the allocation alive

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __getitem__(self, key: slice) -> "DeviceArray":
        if not isinstance(key, slice):
            raise TypeError("a device array takes slices only")
        start, stop, step = key.indices(self.size)
        if step != 1:
            raise ValueError("a device array takes contiguous slices only")
        return DeviceArray(self.ptr + start * self.dtype.itemsize, max(stop - start, 0), self.dtype, self._memory)

    def view(self, dtype) -> "DeviceArray":
        dtype = np.dtype(dtype)
        if self.nbytes % dtype.itemsize:
            raise ValueError(f"{self.nbytes} bytes are not a whole number of {dtype}")
        return DeviceArray(self.ptr, self.nbytes // dtype.itemsize, dtype, self._memory)

    def copy_to_device(self, host, stream=None) -> None:
        """Copy the host array ``host`` (same size in bytes) here; asynchronous on ``stream``."""
        host = np.ascontiguousarray(host)
        if host.nbytes != self.nbytes:
            raise ValueError(f"copy of {host.nbytes} bytes into a device array of {self.nbytes}")
        if not self.nbytes:
            return
        with current(self._memory.context):
            if stream:
                call("cuMemcpyHtoDAsync_v2", self.ptr, host.ctypes.data, self.nbytes, stream.handle)
            else:
                call("cuMemcpyHtoD_v2", self.ptr, host.ctypes.data, self.nbytes)

    def copy_to_host(self, host=None, stream=None) -> np.ndarray:
        """This array's contents in ``host`` (a new array when None); asynchronous on ``stream``."""
        if host is None:
            host = np.empty(self.size, self.dtype)
        if host.nbytes != self.nbytes or not host.flags.c_contiguous:
            raise ValueError(f"copy of a device array of {self.nbytes} bytes into {host.nbytes} bytes")
        if self.nbytes:
            with current(self._memory.context):
                if stream:
                    call("cuMemcpyDtoHAsync_v2", host.ctypes.data, self.ptr, self.nbytes, stream.handle)
                else:
                    call("cuMemcpyDtoH_v2", host.ctypes.data, self.ptr, self.nbytes)
        return host


class _Handle:
    """A driver object (``handle``) made in ``context`` and destroyed when it goes: the
    subclass names its create, destroy and synchronise functions."""

    _create = _destroy = _synchronize = ""

    def __init__(self, context, flags: int = 0):
        self.context = context
        self.handle = ctypes.c_void_p()
        with current(context):
            call(self._create, ctypes.byref(self.handle), flags)
        weakref.finalize(self, _free, self._destroy, context, self.handle).atexit = False

    def synchronize(self) -> None:
        with current(self.context):
            call(self._synchronize, self.handle)


class Stream(_Handle):
    """A CUDA stream: synchronising with the legacy default stream, as numba's, or with
    ``flags`` :data:`NON_BLOCKING` not (``CU_STREAM_NON_BLOCKING``: its work then neither waits
    for the default stream's nor holds back a synchronous copy, which do not wait for it
    either: a copy of what its kernels wrote follows its synchronisation)."""

    _create, _destroy, _synchronize = "cuStreamCreate", "cuStreamDestroy_v2", "cuStreamSynchronize"


class Event(_Handle):
    """A CUDA event with timing."""

    _create, _destroy, _synchronize = "cuEventCreate", "cuEventDestroy_v2", "cuEventSynchronize"

    def record(self, stream=None) -> None:
        with current(self.context):
            call("cuEventRecord", self.handle, stream.handle if stream else None)

    def query(self) -> bool:
        """Whether the work before the event's record is done (``cuEventQuery``: no wait)."""
        with current(self.context):
            result = libcuda.function("cuEventQuery")(self.handle)
        if result == NOT_READY:
            return False
        if result != 0:
            call("cuEventQuery", self.handle)  # raises with the driver's name of the error
        return True


class Kernel:
    """A compiled kernel loaded from its cubin into ``context``:
    ``kernel[grid, block, stream, shared](*args)`` launches it (asynchronously)."""

    def __init__(self, context, image: bytes, entry: str, kinds):
        self.context = context
        self.entry = entry
        self.kinds = tuple(kinds)
        self._module = ctypes.c_void_p()
        call("cuModuleLoadData", ctypes.byref(self._module), image)
        self.function = ctypes.c_void_p()
        call("cuModuleGetFunction", ctypes.byref(self.function), self._module, entry.encode())
        self._format = struct.Struct(parameter_format(self.kinds))
        self._offsets = [at for at, _ in parameter_layout(self.kinds)]
        self._check_parameters()
        self.registers = self.attribute("registers")
        self.max_threads = self.attribute("max_threads")

    def _check_parameters(self) -> None:
        """The cubin's parameter table has exactly the count and sizes the kinds make."""
        if not libcuda.has("cuFuncGetParamInfo"):
            return
        offset, size = ctypes.c_size_t(), ctypes.c_size_t()
        got = []
        info = libcuda.function("cuFuncGetParamInfo")
        while info(self.function, len(got), ctypes.byref(offset), ctypes.byref(size)) == 0:
            got.append(int(size.value))
        want = [s for _, s in parameter_layout(self.kinds)]
        if got and got != want:  # (none: the driver cannot tell for this kernel)
            raise HmmgpuError(f"kernel {self.entry}: the cubin's parameters ({len(got)}) are not numba's "
                              f"argument layout ({len(want)}); run `hmmgpu warmup` again")

    def attribute(self, name: str) -> int:
        """A ``CUfunction_attribute`` (:data:`FUNCTION_ATTRIBUTES`) of the kernel."""
        value = ctypes.c_int()
        call("cuFuncGetAttribute", ctypes.byref(value), FUNCTION_ATTRIBUTES[name], self.function)
        return int(value.value)

    def allow_dynamic_shared(self, nbytes: int) -> None:
        """Let launches use ``nbytes`` of dynamic shared memory (needed above 48 KB)."""
        call("cuFuncSetAttribute", self.function, FUNCTION_ATTRIBUTES["max_dynamic_shared"], int(nbytes))

    def __getitem__(self, config) -> functools.partial:
        grid, block, *rest = config  # numba's [grid, block], [grid, block, stream] or with shared bytes
        stream = rest[0] if rest else None
        shared = rest[1] if len(rest) > 1 else 0
        return functools.partial(self.launch, int(grid), int(block), stream, int(shared))

    def launch(self, grid: int, block: int, stream, shared: int, *args) -> None:
        """Launch on ``grid`` blocks of ``block`` threads with ``shared`` bytes of dynamic shared memory."""
        buffer = ctypes.create_string_buffer(self._format.pack(*argument_values(self.kinds, args)))
        base = ctypes.addressof(buffer)
        params = (ctypes.c_void_p * len(self._offsets))(*(base + at for at in self._offsets))
        with current(self.context):
            call("cuLaunchKernel", self.function, grid, 1, 1, block, 1, 1, shared,
                 stream.handle if stream else None, params, None)


class DriverRuntime:
    """Memory, streams, events and kernels on one device's primary context."""

    def __init__(self, device_id: int):
        opened = primary_context(int(device_id))
        if opened is None:
            raise HmmgpuError(f"no usable CUDA GPU with id {device_id}")
        self._device, self.context = opened
        self.stream_ordered = self._keep_pool(tuning.DEVICE_POOL_KEEP_BYTES)

    def _keep_pool(self, nbytes: int) -> bool:
        """Whether stream-ordered allocation works here (a CUDA 11.2 driver and a device with
        memory pools); if so, the device's default pool keeps up to ``nbytes`` freed bytes for
        the next allocations instead of giving them back at each synchronisation."""
        if not (libcuda.has("cuMemAllocAsync") and libcuda.has("cuDeviceGetDefaultMemPool")
                and self.attribute("memory_pools")):
            return False
        pool = ctypes.c_void_p()
        call("cuDeviceGetDefaultMemPool", ctypes.byref(pool), self._device)
        keep = ctypes.c_uint64(int(nbytes))
        call("cuMemPoolSetAttribute", pool, POOL_RELEASE_THRESHOLD, ctypes.byref(keep))
        return True

    # ------------------------------------------------------------ the device
    def attribute(self, name: str) -> int:
        """A ``CUdevice_attribute`` (:data:`DEVICE_ATTRIBUTES`) of the device."""
        value = ctypes.c_int()
        call("cuDeviceGetAttribute", ctypes.byref(value), DEVICE_ATTRIBUTES[name], self._device)
        return int(value.value)

    @property
    def name(self) -> str:
        text = ctypes.create_string_buffer(256)
        call("cuDeviceGetName", text, 256, self._device)
        return text.value.decode(errors="replace")

    def activate(self):
        """Make the device's context current in the calling thread for the block (every object
        here makes it current for its own driver calls as well)."""
        return current(self.context)

    def free_memory(self) -> int:
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        with self.activate():
            call("cuMemGetInfo_v2", ctypes.byref(free), ctypes.byref(total))
        return int(free.value)

    # ------------------------------------------------------------ objects (each in the context)
    def device_array(self, n: int, dtype, stream=None) -> DeviceArray:
        """``n`` uninitialised elements of ``dtype`` on the device. With a ``stream``, allocated
        and freed in that stream's order (``cuMemAllocAsync``, ``cuMemFreeAsync`` once the array
        goes), for work on that stream only: neither waits for the rest of the device, where
        ``cuMemFree`` waits for every stream's work."""
        dtype = np.dtype(dtype)
        ptr = ctypes.c_uint64()
        nbytes = max(int(n) * dtype.itemsize, 1)
        memory = _Memory(self.context)
        with self.activate():
            if stream is not None and self.stream_ordered:
                call("cuMemAllocAsync", ctypes.byref(ptr), nbytes, stream.handle)
                weakref.finalize(memory, _free, "cuMemFreeAsync", self.context, ptr.value, stream).atexit = False
            else:
                call("cuMemAlloc_v2", ctypes.byref(ptr), nbytes)
                weakref.finalize(memory, _free, "cuMemFree_v2", self.context, ptr.value).atexit = False
        return DeviceArray(ptr.value, int(n), dtype, memory)

    def to_device(self, host, stream=None) -> DeviceArray:
        """A device copy of the host array ``host`` (flattened); with a ``stream``, allocated
        (:meth:`device_array`) and copied in that stream's order (the copy of pageable memory is
        staged before the call returns, so ``host`` may go at once)."""
        host = np.ascontiguousarray(host).reshape(-1)
        out = self.device_array(host.size, host.dtype, stream=stream)
        out.copy_to_device(host, stream=stream)
        return out

    def pinned_array(self, n: int, dtype) -> np.ndarray:
        """A host array of ``n`` elements in page-locked memory (asynchronous copies)."""
        dtype = np.dtype(dtype)
        nbytes = max(int(n) * dtype.itemsize, 1)
        ptr = ctypes.c_void_p()
        with self.activate():
            call("cuMemHostAlloc", ctypes.byref(ptr), nbytes, 0)
        buffer = (ctypes.c_char * nbytes).from_address(ptr.value)
        weakref.finalize(buffer, _free, "cuMemFreeHost", self.context, ptr.value).atexit = False
        return np.frombuffer(buffer, dtype, count=int(n))

    def stream(self, non_blocking: bool = False) -> Stream:
        return Stream(self.context, NON_BLOCKING if non_blocking else 0)

    def event(self) -> Event:
        return Event(self.context)

    @staticmethod
    def elapsed_ms(start: Event, stop: Event) -> float:
        """Milliseconds between two recorded events."""
        ms = ctypes.c_float()
        with current(start.context):
            call("cuEventElapsedTime", ctypes.byref(ms), start.handle, stop.handle)
        return float(ms.value)

    def load_kernel(self, image: bytes, entry: str, kinds) -> Kernel:
        """Load a cubin into the device's context and find its kernel ``entry``."""
        with self.activate():
            return Kernel(self.context, image, entry, kinds)
