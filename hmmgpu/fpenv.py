"""The hmmsearch program's floating-point mode: SSE flush-to-zero.

``hmmsearch`` calls ``impl_Init()``, which sets the MXCSR flush-to-zero bit in every
thread, so a subnormal result (an E-value below 2.2e-308, say) becomes 0. pyhmmer leaves
the mode alone. :func:`flush_to_zero` sets the bit in the calling thread for the duration
of a ``with`` block, so that pyhmmer's Forward, domain definition and table writing give
hmmsearch's numbers. On processors without SSE it does nothing.
"""
from __future__ import annotations

import contextlib
import platform

_FTZ = 0x8000  # MXCSR bit 15
_X86 = platform.machine().lower() in ("x86_64", "amd64", "i686", "x86")

if _X86:
    from llvmlite import ir
    from numba import njit, types
    from numba.core import cgutils
    from numba.extending import intrinsic

    def _mxcsr_call(builder, name, ptr):
        fnty = ir.FunctionType(ir.VoidType(), [ir.PointerType(ir.IntType(8))])
        fn = cgutils.get_or_insert_function(builder.module, fnty, name)
        builder.call(fn, [builder.bitcast(ptr, ir.PointerType(ir.IntType(8)))])

    @intrinsic
    def _stmxcsr(typingctx):
        def codegen(context, builder, signature, args):
            slot = cgutils.alloca_once(builder, ir.IntType(32))
            _mxcsr_call(builder, "llvm.x86.sse.stmxcsr", slot)
            return builder.load(slot)

        return types.uint32(), codegen

    @intrinsic
    def _ldmxcsr(typingctx, value):
        def codegen(context, builder, signature, args):
            slot = cgutils.alloca_once_value(builder, args[0])
            _mxcsr_call(builder, "llvm.x86.sse.ldmxcsr", slot)
            return context.get_dummy_value()

        return types.void(types.uint32), codegen

    @njit(cache=True)
    def get_mxcsr():
        """The calling thread's MXCSR register."""
        return _stmxcsr()

    @njit(cache=True)
    def set_mxcsr(value):
        """Load ``value`` into the calling thread's MXCSR register."""
        _ldmxcsr(value)


@contextlib.contextmanager
def flush_to_zero(enabled: bool = True):
    """Run the block with SSE flush-to-zero on, as hmmsearch does; restore the mode after."""
    if not (enabled and _X86):
        yield
        return
    import numpy as np

    saved = get_mxcsr()
    set_mxcsr(np.uint32(saved | _FTZ))
    try:
        yield
    finally:
        set_mxcsr(saved)
