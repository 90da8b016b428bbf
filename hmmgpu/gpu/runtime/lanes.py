"""Lane arithmetic on 32-bit words: 2 x 16-bit signed lanes and 4 x 8-bit unsigned lanes.

Every helper takes and returns uint32 words (lane 0 in the low bits). :func:`helpers` gives
one of three bindings of the same names, chosen by the caller (a generated kernel module
names the binding it was generated for; nothing is bound at import):

* ``"dpx"`` (sm_90 and newer): the 16-bit add-max and 3-way max are single DPX
  instructions (``add.s16x2`` + ``max.s16x2`` inline PTX, which ptxas fuses into
  VIADDMNMX / VIMNMX3);
* ``"swar"`` (any GPU): a portable SWAR formulation in plain integer code;
* ``"python"`` (numba's CUDA simulator): the pure-Python twins ``py_*``.

The twins are always importable: tests check them against numpy, and the device versions
against the twins on a GPU.
"""
from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Literal

import numpy as np

M32 = 0xFFFFFFFF
Binding = Literal["python", "dpx", "swar"]

# ---------------------------------------------------------------- pure-Python twins


def _s16(v):
    v &= 0xFFFF
    return v - 0x10000 if v & 0x8000 else v


def _split16(w):
    w = int(w) & M32
    return _s16(w), _s16(w >> 16)


def _pack16(lo, hi):
    return (int(lo) & 0xFFFF) | ((int(hi) & 0xFFFF) << 16)


def _split8(w):
    w = int(w) & M32
    return [(w >> (8 * i)) & 0xFF for i in range(4)]


def _pack8(v):
    return sum((int(x) & 0xFF) << (8 * i) for i, x in enumerate(v))


def py_add16(a, b):
    """Lanewise wrap-around 16-bit add."""
    (a0, a1), (b0, b1) = _split16(a), _split16(b)
    return _pack16(a0 + b0, a1 + b1)


def py_max16(a, b):
    """Lanewise signed 16-bit max."""
    (a0, a1), (b0, b1) = _split16(a), _split16(b)
    return _pack16(max(a0, b0), max(a1, b1))


def py_addmax16(a, b, c):
    """max(a + b, c) per signed 16-bit lane, the add wrapping (``__viaddmax_s16x2``)."""
    return py_max16(py_add16(a, b), c)


def py_max3_16(a, b, c):
    """3-way signed 16-bit max (``__vimax3_s16x2``)."""
    return py_max16(py_max16(a, b), c)


def py_lo16(a):
    """The low 16-bit lane as a signed int."""
    return _split16(a)[0]


def py_hi16(a):
    """The high 16-bit lane as a signed int."""
    return _split16(a)[1]


def py_pack16(lo, hi):
    """Word with 16-bit lanes ``lo`` (low) and ``hi`` (high)."""
    return _pack16(lo, hi)


def py_max3relu16(a, b, c):
    """3-way signed 16-bit max floored at 0 per lane (``__vimax3_s16x2_relu``)."""
    return py_max16(py_max3_16(a, b, c), 0)


def py_lo16s(a, b):
    """Word of the low 16-bit lanes of ``a`` (low half) and ``b`` (high half) (``prmt 0x5410``)."""
    return (int(a) & 0xFFFF) | ((int(b) & 0xFFFF) << 16)


def py_hi16s(a, b):
    """Word of the high 16-bit lanes of ``a`` (low half) and ``b`` (high half) (``prmt 0x7632``)."""
    return ((int(a) & M32) >> 16) | (int(b) & 0xFFFF0000)


def py_hmax16(a):
    """Signed max of the two 16-bit lanes, as an int."""
    return max(_split16(a))


def py_bcast16(v):
    """Word with both 16-bit lanes equal to v."""
    return _pack16(v, v)


def py_shift16(w, prev):
    """Move every lane up by one: lane 0 gets the top lane of ``prev``."""
    return (((int(w) << 16) | ((int(prev) & M32) >> 16)) & M32)


def py_add32(a, b):
    """Plain 32-bit wrap-around add."""
    return (int(a) + int(b)) & M32


def py_addus8(a, b):
    """Lanewise unsigned saturating 8-bit add."""
    return _pack8([min(255, x + y) for x, y in zip(_split8(a), _split8(b))])


def py_subus8(a, b):
    """Lanewise unsigned saturating 8-bit subtract."""
    return _pack8([max(0, x - y) for x, y in zip(_split8(a), _split8(b))])


def py_maxu8(a, b):
    """Lanewise unsigned 8-bit max."""
    return _pack8([max(x, y) for x, y in zip(_split8(a), _split8(b))])


def py_hmaxu8(a):
    """Max of the four unsigned 8-bit lanes, as an int."""
    return max(_split8(a))


def py_bcast8(v):
    """Word with all four 8-bit lanes equal to v."""
    return _pack8([v] * 4)


def py_shift8(w, prev):
    """Move every lane up by one: lane 0 gets the top lane of ``prev``."""
    return (((int(w) << 8) | ((int(prev) & M32) >> 24)) & M32)


def py_u32(v):
    return int(v) & M32


def py_i32(v):
    v = int(v) & M32
    return v - (1 << 32) if v & 0x80000000 else v


TWINS = dict(
    add16=py_add16, max16=py_max16, addmax16=py_addmax16, max3_16=py_max3_16, hmax16=py_hmax16,
    lo16=py_lo16, hi16=py_hi16, pack16=py_pack16,
    max3relu16=py_max3relu16, lo16s=py_lo16s, hi16s=py_hi16s,
    bcast16=py_bcast16, shift16=py_shift16, add32=py_add32, addus8=py_addus8, subus8=py_subus8,
    maxu8=py_maxu8, hmaxu8=py_hmaxu8, bcast8=py_bcast8, shift8=py_shift8, u32=py_u32, i32=py_i32,
)

# ---------------------------------------------------------------- device versions


@functools.lru_cache(maxsize=None)
def _build_device():
    from llvmlite import ir
    from numba import cuda, types
    from numba.cuda.extending import intrinsic

    u32 = np.uint32

    def asm3(template):
        @intrinsic
        def _f(typingctx, a, b, c):
            sig = types.uint32(types.uint32, types.uint32, types.uint32)

            def codegen(context, builder, signature, args):
                i32 = ir.IntType(32)
                fnty = ir.FunctionType(i32, [i32, i32, i32])
                return builder.call(ir.InlineAsm(fnty, template, "=r,r,r,r"), args)

            return sig, codegen

        return _f

    def asm2(template):
        @intrinsic
        def _f(typingctx, a, b):
            sig = types.uint32(types.uint32, types.uint32)

            def codegen(context, builder, signature, args):
                i32 = ir.IntType(32)
                fnty = ir.FunctionType(i32, [i32, i32])
                return builder.call(ir.InlineAsm(fnty, template, "=r,r,r"), args)

            return sig, codegen

        return _f

    _dpx_addmax = asm3("{.reg .b32 t1; add.s16x2 t1, $1, $2; max.s16x2 $0, t1, $3;}")
    _dpx_max3 = asm3("{.reg .b32 t1; max.s16x2 t1, $1, $2; max.s16x2 $0, t1, $3;}")
    _dpx_max = asm2("max.s16x2 $0, $1, $2;")
    _dpx_max3relu = asm3("{.reg .b32 t1; max.s16x2 t1, $1, $2; max.relu.s16x2 $0, t1, $3;}")
    _prmt_lo = asm2("prmt.b32 $0, $1, $2, 0x5410;")
    _prmt_hi = asm2("prmt.b32 $0, $1, $2, 0x7632;")
    _dpx_add = asm2("add.s16x2 $0, $1, $2;")

    dev = dict(device=True, forceinline=True)

    # ---- portable SWAR versions (any GPU)
    @cuda.jit(**dev)
    def swar_add16(a, b):
        a = u32(a)
        b = u32(b)
        s = u32((a & u32(0x7FFF7FFF)) + (b & u32(0x7FFF7FFF)))
        return u32(s ^ ((a ^ b) & u32(0x80008000)))

    @cuda.jit(**dev)
    def swar_max16(a, b):
        a = u32(a)
        b = u32(b)
        # offset binary: signed order becomes unsigned order
        ao = u32(a ^ u32(0x80008000))
        nb = u32(~u32(b ^ u32(0x80008000)))
        # msb of the rounded halving add (a + ~b + 1) / 2 per lane: set iff a >= b
        g = u32(u32((ao | nb) - u32(u32((ao ^ nb) >> u32(1)) & u32(0x7FFF7FFF))) & u32(0x80008000))
        m = u32(u32(g >> u32(15)) * u32(0xFFFF))
        return u32((a & m) | (b & u32(~m)))

    @cuda.jit(**dev)
    def swar_addmax16(a, b, c):
        return swar_max16(swar_add16(a, b), c)

    @cuda.jit(**dev)
    def swar_max3_16(a, b, c):
        return swar_max16(swar_max16(a, b), c)

    @cuda.jit(**dev)
    def swar_max3relu16(a, b, c):
        return swar_max16(swar_max16(swar_max16(a, b), c), u32(0))

    @cuda.jit(**dev)
    def dpx_max3relu16(a, b, c):
        return _dpx_max3relu(u32(a), u32(b), u32(c))

    @cuda.jit(**dev)
    def lo16s(a, b):
        return _prmt_lo(u32(a), u32(b))

    @cuda.jit(**dev)
    def hi16s(a, b):
        return _prmt_hi(u32(a), u32(b))

    @cuda.jit(**dev)
    def dpx_addmax16(a, b, c):
        return _dpx_addmax(u32(a), u32(b), u32(c))

    @cuda.jit(**dev)
    def dpx_max3_16(a, b, c):
        return _dpx_max3(u32(a), u32(b), u32(c))

    @cuda.jit(**dev)
    def dpx_max16(a, b):
        return _dpx_max(u32(a), u32(b))

    @cuda.jit(**dev)
    def dpx_add16(a, b):
        return _dpx_add(u32(a), u32(b))

    @cuda.jit(**dev)
    def hmax16(a):
        a = u32(a)
        lo = np.int32(np.int16(a & u32(0xFFFF)))
        hi = np.int32(np.int16(a >> u32(16)))
        return max(lo, hi)

    @cuda.jit(**dev)
    def lo16(a):
        return np.int32(np.int16(u32(a) & u32(0xFFFF)))

    @cuda.jit(**dev)
    def hi16(a):
        return np.int32(np.int16(u32(a) >> u32(16)))

    @cuda.jit(**dev)
    def pack16(lo, hi):
        return u32((u32(lo) & u32(0xFFFF)) | (u32(u32(hi) & u32(0xFFFF)) << u32(16)))

    @cuda.jit(**dev)
    def bcast16(v):
        v = u32(u32(v) & u32(0xFFFF))
        return u32(v | u32(v << u32(16)))

    @cuda.jit(**dev)
    def shift16(w, prev):
        return u32(u32(u32(w) << u32(16)) | u32(u32(prev) >> u32(16)))

    @cuda.jit(**dev)
    def add32(a, b):
        return u32(u32(a) + u32(b))

    @cuda.jit(**dev)
    def _geu8(a, b):
        # 0x80 in every byte lane where a >= b (unsigned)
        nb = u32(~u32(b))
        a = u32(a)
        return u32(u32((a | nb) - u32(u32((a ^ nb) >> u32(1)) & u32(0x7F7F7F7F))) & u32(0x80808080))

    @cuda.jit(**dev)
    def maxu8(a, b):
        a = u32(a)
        b = u32(b)
        g = _geu8(a, b)
        m = u32(u32(g >> u32(7)) * u32(0xFF))
        return u32((a & m) | (b & u32(~m)))

    @cuda.jit(**dev)
    def subus8(a, b):
        # max(a, b) - b, lanewise: no borrow crosses lanes
        return u32(maxu8(a, b) - u32(b))

    @cuda.jit(**dev)
    def addus8(a, b):
        a = u32(a)
        b = u32(b)
        s = u32((a & u32(0x7F7F7F7F)) + (b & u32(0x7F7F7F7F)))
        s = u32(s ^ ((a ^ b) & u32(0x80808080)))  # lanewise wrap-around sum
        c = u32((a & b) | ((a | b) & u32(~s)))  # carry out of each lane in bit 7
        c = u32(c & u32(0x80808080))
        m = u32(u32(c >> u32(7)) * u32(0xFF))
        return u32(s | m)

    @cuda.jit(**dev)
    def hmaxu8(a):
        a = u32(a)
        m = max(a & u32(0xFF), (a >> u32(8)) & u32(0xFF))
        m2 = max((a >> u32(16)) & u32(0xFF), a >> u32(24))
        return np.int32(max(m, m2))

    @cuda.jit(**dev)
    def bcast8(v):
        v = u32(u32(v) & u32(0xFF))
        return u32(v * u32(0x01010101))

    @cuda.jit(**dev)
    def shift8(w, prev):
        return u32(u32(u32(w) << u32(8)) | u32(u32(prev) >> u32(24)))

    @cuda.jit(**dev)
    def as_u32(v):
        return u32(v)

    @cuda.jit(**dev)
    def as_i32(v):
        return np.int32(v)

    return dict(
        swar=dict(add16=swar_add16, max16=swar_max16, addmax16=swar_addmax16, max3_16=swar_max3_16,
                  max3relu16=swar_max3relu16),
        dpx=dict(add16=dpx_add16, max16=dpx_max16, addmax16=dpx_addmax16, max3_16=dpx_max3_16,
                 max3relu16=dpx_max3relu16),
        common=dict(hmax16=hmax16, lo16=lo16, hi16=hi16, pack16=pack16, bcast16=bcast16, shift16=shift16,
                    add32=add32, addus8=addus8,
                    subus8=subus8, maxu8=maxu8, hmaxu8=hmaxu8, bcast8=bcast8, shift8=shift8,
                    u32=as_u32, i32=as_i32, lo16s=lo16s, hi16s=hi16s),
    )


@functools.lru_cache(maxsize=None)
def helpers(binding: Binding) -> SimpleNamespace:
    """The lane helpers in one binding: ``python`` (simulator twins), ``dpx`` or ``swar`` (device)."""
    if binding == "python":
        return SimpleNamespace(**TWINS)
    dev = _build_device()
    if binding not in dev:
        raise ValueError(f"unknown lane binding {binding!r}")
    return SimpleNamespace(**dev["common"], **dev[binding])
