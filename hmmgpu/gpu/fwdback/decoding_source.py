"""The domain decoding kernel (``p7_DomainDecoding``): what it computes, why it is exact.

What is computed
----------------
The first step of HMMER's domain definition (``p7_domaindef.c: p7_DomainDecoding``,
hmmer-postfilter-spec.md section 5.1), from the two parsers' special-state rows of a target,
which the Forward and Backward kernels (:mod:`.source`, :mod:`.backward_source`) left on the
device: for each residue i = 1..L the posterior probability ``mocc[i]`` that it lies in a
domain and the cumulative expected numbers of domain starts ``btot[i]`` and ends ``etot[i]``
(row 0 all 0), the status (``eslERANGE`` when the scale product overflows) and a flag for
flush-to-zero (below). With the
scale product ``sp = 1 / bxmx[0][N]``, in HMMER's order, row after row:

* ``btot[i] = btot[i-1] + ((fx[i-1].B bx[i-1].B) fx[i-1].SCALE) sp``;
* with ``has_own_scales``: ``sp = sp (fx[i-1].SCALE / bx[i-1].SCALE)``;
* ``etot[i] = etot[i-1] + ((fx[i].E bx[i].E) fx[i].SCALE) sp``;
* ``njcp`` = the N, J and C terms ``((fx[i-1].X bx[i].X) xf[X][LOOP]) sp`` added in that order;
* ``mocc[i] = (float) (1.0 - (double) njcp)``.

This is what the device-independent driver of domain definition computes on the host
(:func:`hmmgpu.stages.domaindef.domain_decoding`, the reference it is checked against, with
libhmmer's own ``p7_DomainDecoding``); the GPU computes it where the rows are, and the host
receives three floats a residue instead of twelve.

Flush-to-zero
-------------
The kernel computes hmmsearch's arithmetic: SSE flush-to-zero on (a result that underflows
is 0), denormals-are-zero off (hmmsearch's MXCSR, hmmer-postfilter-spec.md section 6). Its
inputs are the parsers' rows, computed in IEEE arithmetic; on a target whose parsers raised
no HOST flag they differ from hmmsearch's rows only where a stored value is tiny (``0 < v <=
FLT_MIN``, the parsers' TINY_ROWS), which hmmsearch holds as 0. So every value the kernel
reads and every result it computes is flushed as the x86 unit flushes it: a value below
FLT_MIN becomes 0. FLT_MIN itself is the one value two conventions of detecting tininess
(before or after rounding) could leave either way: where one is read or computed the kernel
raises :data:`~hmmgpu.stages.forward.SUBNORMAL`, and the target is left to the host. The
values are never negative (products and sums of probabilities and scale factors; ``mocc =
1 - njcp`` is never tiny: a float below 1 is at most ``1 - 2^-24``), so the test is one
comparison.

Where the kernel flushed a value that was not 0 (a tiny value read or computed), pyhmmer's
IEEE arithmetic could give other bits: the kernel then raises
:data:`~hmmgpu.stages.forward.FTZ_ONLY`. The decoding is hmmsearch's; a search in pyhmmer's
mode (the API's default) leaves such a target to the host, as it did every target meeting a
tiny value before the kernel flushed them (on the GPU machine, 3,445 of the 16,008 F3
passers of 600 Pfam models that the GPU decoded at 29 M residues: 21%). Where nothing was
flushed, the two modes compute the same floats, and the decoding serves both. On the sample
proteome against the four sample Pfam models (8,400 targets) the IEEE kernel met a tiny value
on 7 targets, and libhmmer's ``p7_DomainDecoding`` gave the same bits in both modes on every
other target checked; the flushed kernel equals libhmmer's decoding under flush-to-zero on
all of them (tests/gpu/test_backward_kernel.py).

Why the result is exact, and why the code looks as it does
----------------------------------------------------------
Every product and sum is an explicitly rounded float operation in HMMER's order, the running
sums and the scale product sequential. HMMER's two double operations give the float the kernel
computes in float: ``sp = 1.0 / N`` assigned to a float is the float quotient ``fdiv(1, N)``, and
``(float) (1.0 - (double) njcp)`` the float difference ``fsub(1, njcp)``: a sum, difference or
quotient of floats rounded to double and then to float equals the correctly rounded float
result (double has more than 2 x 24 + 2 bits). The recursion is sequential along the target
and costs O(L) against the parsers' O(L M): one thread runs one target (a launch's items, in
its order), reading the rows of both parsers and writing the three arrays at the offsets of
the target's rows divided by 6.
"""
from __future__ import annotations

from dataclasses import dataclass

from hmmgpu.stages.forward import FLT_MIN, FTZ_ONLY, STATUS_OK, STATUS_RANGE, SUBNORMAL, XB, XC, XE, XJ, XN, XSCALE
from hmmgpu.gpu.runtime.emit import Emitter, kernel_module
from hmmgpu.gpu.runtime.kargs import Arg

#: Parameters of the decoding kernel, in order: a launch's items (the parsers' targets), their
#: rows at ``row_base[k]`` in ``fwd_rows`` and ``bwd_rows``, Backward's ``has_own_scales``; the
#: outputs at ``row_base[k] / 6``.
ARGS = (
    Arg("lengths", "int32[:]"), Arg("items", "int32[:]"), Arg("n_items", "int32"),
    Arg("ploop_by_length", "float32[:]"), Arg("row_base", "int64[:]"), Arg("fwd_rows", "float32[:]"),
    Arg("bwd_rows", "float32[:]"), Arg("bwd_own", "int32[:]"),
    Arg("out_status", "int32[:]"), Arg("out_flags", "int32[:]"), Arg("out_mocc", "float32[:]"),
    Arg("out_btot", "float32[:]"), Arg("out_etot", "float32[:]"),
)


def _tiny(v: str) -> str:
    """The test of a value that flush-to-zero may flush (values here are never negative)."""
    return f"((({v}) > F0) & (({v}) <= FMIN))"


def _flush(e: Emitter, *values: str) -> None:
    """Each of ``values`` as flush-to-zero leaves it (module header): 0 below FLT_MIN; ``ieee``
    records a tiny value (pyhmmer's arithmetic could differ), ``edge`` FLT_MIN itself."""
    for v in values:
        e(f"ieee = ieee | {_tiny(v)}", f"edge = edge | ({v} == FMIN)", f"{v} = F0 if {v} < FMIN else {v}")


def _term(e: Emitter, out: str, fwd_row: str, bwd_row: str, col: int, by: str) -> None:
    """``out = ((fx[fwd_row].col bx[bwd_row].col) by) sp``, left to right, every operand and
    product flushed."""
    e(f"a = fwd_rows[{fwd_row} + {col}]", f"b = bwd_rows[{bwd_row} + {col}]")
    _flush(e, "a", "b")
    e("ab = fmul(a, b)")
    _flush(e, "ab")
    e(f"c = {by}")
    _flush(e, "c")
    e("abc = fmul(ab, c)")
    _flush(e, "abc")
    e(f"{out} = fmul(abc, sp)")
    _flush(e, out)


def kernel_body() -> str:
    """The kernel's body (the lines under its ``def``)."""
    e = Emitter()
    e("k = cuda.grid(1)")
    with e.block("if k >= n_items:"):
        e("return")
    e("L = lengths[items[k]]", "ploop = ploop_by_length[L]", "rb = row_base[k]", "ob = rb // 6",
      "own = bwd_own[k] != 0", "ieee = False", "edge = False", f"n0 = bwd_rows[rb + {XN}]")
    _flush(e, "n0")
    e("sp = fdiv(F1, n0)")
    _flush(e, "sp")
    e("bt = F0", "et = F0", "out_mocc[ob] = F0", "out_btot[ob] = F0", "out_etot[ob] = F0")
    with e.block("for i in range(1, L + 1):"):
        e("prev = rb + 6 * (i - 1)", "cur = rb + 6 * i")
        _term(e, "t", "prev", "prev", XB, f"fwd_rows[prev + {XSCALE}]")
        e("bt = fadd(bt, t)")
        _flush(e, "bt")
        with e.block("if own:"):
            e(f"fs = fwd_rows[prev + {XSCALE}]", f"bs = bwd_rows[prev + {XSCALE}]")
            _flush(e, "fs", "bs")
            e("ratio = fdiv(fs, bs)")
            _flush(e, "ratio")
            e("sp = fmul(sp, ratio)")
            _flush(e, "sp")
        _term(e, "t", "cur", "cur", XE, f"fwd_rows[cur + {XSCALE}]")
        e("et = fadd(et, t)")
        _flush(e, "et")
        _term(e, "njcp", "prev", "cur", XN, "ploop")
        for col in (XJ, XC):
            _term(e, "t", "prev", "cur", col, "ploop")
            e("njcp = fadd(njcp, t)")
            _flush(e, "njcp")
        e("mocc = fsub(F1, njcp)",
          "out_btot[ob + i] = bt", "out_etot[ob + i] = et", "out_mocc[ob + i] = mocc")
    e(f"out_status[k] = {STATUS_RANGE} if math.isinf(sp) else {STATUS_OK}",
      f"out_flags[k] = ({SUBNORMAL} if edge else 0) | ({FTZ_ONLY} if ieee else 0)")
    return "".join(f"    {line}\n" if line else "\n" for line in e.text().splitlines())


@dataclass(frozen=True)
class DecodeSpec:
    """The domain decoding kernel (one thread per target; no shape)."""

    @property
    def name(self) -> str:
        return "fwdback_domain_decoding_v2"

    def source(self, binding: str) -> str:
        return kernel_module(
            "Domain decoding kernel (HMMER's p7_DomainDecoding).", binding, ARGS, kernel_body(),
            "import math", "from hmmgpu.gpu import rounding as _rounding", f"_F = _rounding.float_helpers({binding!r})",
            "fmul = _F.fmul; fadd = _F.fadd; fsub = _F.fsub; fdiv = _F.fdiv",
            "F0 = np.float32(0.0); F1 = np.float32(1.0)", f"FMIN = np.float32({float(FLT_MIN)!r})")
