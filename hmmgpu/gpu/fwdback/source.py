"""The Forward parser kernel: what it computes, why it is exact, why the code looks as it does.

What is computed
----------------
HMMER's ``p7_ForwardParser`` (``fwdback.c: forward_engine`` with ``do_full = 0``, the SSE
implementation of HMMER 3.4), which ``p7_Pipeline`` runs on every target that passed the
Viterbi filter and whose score is the F3 gate. For each target of a work list, one thread
runs the scaled Forward recursion of the multihit local profile in float32 probability
space and returns:

* the final ``xC`` (before its multiplication by ``xf[C][MOVE]``);
* the scale factors of the rescaled rows, in row order (``xmx[i][SCALE]`` where it is not 1);
* optionally every row of special states ``xmx[i][E N J B C SCALE]``, i = 0..L, which
  domain definition reads later;
* exactness flags (below).

The host forms the score from the scale factors and ``xC`` exactly as ``forward_engine``
does (:func:`hmmgpu.cpu.fwdback.forward_score`): ``totscale = f32(totscale + log(scale))``
row after row, then ``f32(totscale + log(f32(xC * pmove)))``, with libm's double ``log``.
The device's ``log`` is not glibc's (hmmer-postfilter-spec.md 7.6), and only a few rows per
target are rescaled, so the logarithms cost the host little.

The recursion, row i (residue x), in HMMER's order (spec section 2; the names are the
generator's functions below and the CPU reference's, :mod:`hmmgpu.cpu.fwdback`):

* ``main_pass``: for q = 0..Q-1 and each lane, ``sv = (((xB tBM + mpv tMM) + ipv tIM) + dpv tDM)
  e``, ``xEv += sv``; load row i-1's M, D, I at q; store M = sv and D = the previous q's
  M->D term; ``dcv = sv tMD``; ``I = mpv tMI + ipv tII``. The vectors start from row i-1's
  last vector shifted right by one lane.
* ``dd_first_pass``: the carry shifted right, ``D[0] = 0``; ``D(q) += dcv``, ``dcv = D(q) tDD``.
* ``dd_carry_passes``: three passes ``D(q) += dcv``, ``dcv = dcv tDD``, each after a lane
  shift; on models of M >= 100 a pass that raised no D ends them (a strict float compare).
* ``sum_e``: ``xEv += D(q)``, then ``xE = (l0 + l1) + (l2 + l3)``.
* ``update_specials``: ``xN = xN ploop``; ``xC = xC ploop + xE xf[E][MOVE]``;
  ``xJ = xJ ploop + xE xf[E][LOOP]``; ``xB = xJ pmove + xN pmove``.
* ``rescale_row``: if ``xE > 1e4``: xN, xC, xJ, xB divided by xE, every cell multiplied by
  ``1/xE``, the scale factor kept, ``xE = 1``.

Why the result is exact
-----------------------
The bits of HMMER's result depend on the order of its float operations, which the
striped layout fixes: ``Q = max(2, (M-1)//4 + 1)`` vectors of 4 lanes, node ``k = q + 1 + zQ``
in lane z of vector q. The kernel keeps that layout and that order exactly (it computes
the four lanes of a vector one after the other, which is equivalent: within one q step
the lanes do not read each other), and uses HMMER's own tables ``om->rfv``, ``om->tfv``
(read from libhmmer's optimized profile, not recomputed with the device's ``expf``).
Every multiply, add and divide is an explicitly rounded IEEE operation
(``__fmul_rn``/``__fadd_rn``/``__fdiv_rn`` through libdevice): numba-cuda contracts a plain
``a * b + c`` into a fused multiply-add even without fastmath, and HMMER's SSE code never
fuses. The kernel is compiled without fast math, so subnormals are IEEE's (pyhmmer's mode).
``1/xE`` is a float division and the row is multiplied by it, as HMMER does. The logs are
the host's. A test asserts that the kernel's PTX holds no ``fma`` instruction.

What the kernel cannot promise is handed to the host (flags, :mod:`hmmgpu.cpu.fwdback`):

* ``RANGE``: the final ``xC`` is NaN, 0 or infinite, or ``xE`` went non-finite: libhmmer
  returns ``eslERANGE`` there (an all-``*`` target, for example).
* ``SUBNORMAL``: a subnormal result could make hmmsearch (which runs with flush-to-zero)
  differ from IEEE arithmetic in the score or in a kept value. The checks are the
  reference's: the stored M, the M->D term, the I products, the special-state products,
  the rescaled values are never tiny (``0 < v <= FLT_MIN``); the row checks
  ``f32(xB min tBM) >= 2^-101``, which makes every tiny term of the M sum vanish in it; a
  tiny D->D carry must leave the D it meets unchanged; a tiny ``xN pmove`` must leave ``xB``
  unchanged. Measured with the CPU reference (``benchmarks/fwdback_flags.py``) on 30,848
  targets, the Viterbi-filter survivors of the shared data's 53 models (29 Pfam, 24
  CUDAMPF; M = 23..2405) among its 77,801 real proteins: no target was flagged RANGE or
  SUBNORMAL, and each one's score equals libhmmer's with and without flush-to-zero. The
  naive rule (any subnormal result anywhere: the D->D carries decay into subnormals on
  most rows of long models) would have flagged 26,766 of them (87%).
* ``TINY_ROWS`` (information, not a fallback): a stored special value, in practice N,
  which every rescaling divides, is subnormal. The score and every other value are then
  the same under flush-to-zero, and hmmsearch's rows are these rows with the subnormal
  entries set to 0. 1,852 of the 30,848 targets (6.0%): exactly those whose rows libhmmer
  writes differently under flush-to-zero.

Why the code looks as it does
-----------------------------
This is the simplest correct design, as the first step: one thread per target, emulating
HMMER's four SSE lanes as four scalar variables (the generator writes the lanes out, so
each lane's running values ``mpv``, ``dpv``, ``ipv``, ``dcv``, ``xEv`` live in registers). The
row is a single buffer updated in place, as the parser's own (every read of row i-1 at q
precedes the store of row i at q): 12 Q floats per thread (M, D, I, four lanes each) in
global scratch memory, interleaved by thread (cell c of thread t at ``c * T + t``), so that
the threads of a warp, which step through the same q together, touch consecutive words.
``Q`` and ``M`` are arguments, not compile-time shapes: one kernel serves every model. Threads
take targets from an atomic counter (the resident database lists the longest first), and
the number of threads is chosen by the host so that the scratch stays within a budget;
each thread runs as many targets as it claims.

What would make it faster (in the order it would probably pay):

* Tables in shared memory: ``rfv`` is 29 x 16Q bytes and ``tfv`` 32Q bytes, read by every
  thread at the same q; for M up to ~400 both fit in 48 KB.
* Rows in shared memory or registers for small Q instead of global scratch (for Q <= 8 the
  whole row fits in a thread's registers, with the q loop unrolled by the generator).
* Several threads per target: the four lanes of a q step are independent, so four (or 4n,
  striping q) threads could each own a lane, exchanging only the right shift at the row
  start and the carries of the D->D passes (warp shuffles), at the price of a 4-way
  horizontal sum per row; the sequential dependence is along q only.
* Fewer checks per cell: the tiny tests can be folded into one integer minimum per row
  (``bits(v) - 1`` is below ``0x00800000`` exactly for tiny non-negative v), and most are
  provably unnecessary for models whose tables are far from the subnormal range.
* A compact output of the scale factors (a count and a short list per target instead of
  room for L), and no row output on the F3 gate.
"""
from __future__ import annotations

from dataclasses import dataclass

from hmmgpu.stages.forward import ABSORB, DD_EARLY_EXIT_M, FLT_MIN, RANGE, RESCALE_AT, SUBNORMAL, TINY_ROWS
from hmmgpu.gpu.runtime.emit import Emitter, kernel_module
from hmmgpu.gpu.runtime.kargs import Arg

#: Parameters of the Forward parser kernel, in order.
ARGS = (
    Arg("residues", "uint32[:]"), Arg("word_offsets", "int64[:]"), Arg("lengths", "int32[:]"),
    Arg("items", "int32[:]"), Arg("n_items", "int32"), Arg("counters", "int32[:]"),
    Arg("rfv", "float32[:]"), Arg("tfv", "float32[:]"), Arg("Q", "int32"), Arg("M", "int32"),
    Arg("pmove_by_length", "float32[:]"), Arg("ploop_by_length", "float32[:]"),
    Arg("xe_move", "float32"), Arg("xe_loop", "float32"), Arg("tbm_min", "float32"),
    Arg("scratch", "float32[:]"), Arg("n_threads", "int32"),
    Arg("out_flags", "int32[:]"), Arg("out_xc", "float32[:]"), Arg("out_nscale", "int32[:]"),
    Arg("scale_base", "int64[:]"), Arg("out_scales", "float32[:]"),
    Arg("want_rows", "int32"), Arg("row_base", "int64[:]"), Arg("out_rows", "float32[:]"),
)
#: Floats of scratch per thread per vector of the model: M, D and I, four lanes each.
SCRATCH_PER_Q = 12
LANES = range(4)

# tfv offsets, in floats, of the transitions of vector q (relative to 28 q): 7 vectors of 4 lanes
_BM, _MM, _IM, _DM, _MD, _MI, _II = (4 * t for t in range(7))


def _tiny(v: str) -> str:
    """The test of a result that flush-to-zero may flush (values here are never negative)."""
    return f"((({v}) > F0) & (({v}) <= FMIN))"


def _rsh(e: Emitter, v: str) -> None:
    """Shift the four lanes of ``v`` right by one, 0 into lane 0 (``esl_sse_rightshift_ps``)."""
    e(f"{v}3 = {v}2", f"{v}2 = {v}1", f"{v}1 = {v}0", f"{v}0 = F0")


def main_pass(e: Emitter) -> None:
    """M, the delayed D store, the M->D carry and I over q = 0..Q-1 (spec 2.1)."""
    e("# main_pass: row i-1's last vector shifted right by a lane starts the recursion",
      "mpv0 = F0", "dpv0 = F0", "ipv0 = F0", "a = (QQ - 1) * 4 * T + slot")
    for z in (1, 2, 3):
        e(f"mpv{z} = scratch[a + {z - 1} * T]", f"dpv{z} = scratch[D0 + a + {z - 1} * T]",
          f"ipv{z} = scratch[I0 + a + {z - 1} * T]")
    e(*(f"dcv{z} = F0" for z in LANES), *(f"xEv{z} = F0" for z in LANES), "bad = False")
    with e.block("for q in range(QQ):"):
        e("c = q * 4 * T + slot", "t = q * 28", "er = eb + q * 4")
        for z in LANES:
            e(f"sv = fadd(fmul(xB, tfv[t + {_BM + z}]), fmul(mpv{z}, tfv[t + {_MM + z}]))",
              f"sv = fadd(sv, fmul(ipv{z}, tfv[t + {_IM + z}]))",
              f"sv = fadd(sv, fmul(dpv{z}, tfv[t + {_DM + z}]))",
              f"sv = fmul(sv, rfv[er + {z}])",
              f"xEv{z} = fadd(xEv{z}, sv)",
              f"a = c + {z} * T",
              f"mpv{z} = scratch[a]", f"dpv{z} = scratch[D0 + a]", f"ipv{z} = scratch[I0 + a]",
              "scratch[a] = sv", f"scratch[D0 + a] = dcv{z}",
              f"dcv{z} = fmul(sv, tfv[t + {_MD + z}])",
              f"pmi = fmul(mpv{z}, tfv[t + {_MI + z}])", f"pii = fmul(ipv{z}, tfv[t + {_II + z}])",
              "scratch[I0 + a] = fadd(pmi, pii)",
              f"bad = bad | {_tiny('sv')} | {_tiny(f'dcv{z}')} | {_tiny('pmi')} | {_tiny('pii')}")


def _dd_step(e: Emitter, carry_only: bool) -> None:
    """One q of a D->D pass: ``D += dcv``; the carry is extended from D (first pass) or from
    itself (carry passes). A tiny carry must leave D unchanged (module header)."""
    e("a = D0 + q * 4 * T + slot", "t = DD + q * 4")
    for z in LANES:
        e(f"d = scratch[a + {z} * T]", f"s = fadd(dcv{z}, d)")
        if carry_only:
            e("changed = changed | (s > d)")
        e(f"bad = bad | ({_tiny(f'dcv{z}')} & (s != d))", f"scratch[a + {z} * T] = s",
          f"dcv{z} = fmul({f'dcv{z}' if carry_only else 's'}, tfv[t + {z}])")


def dd_first_pass(e: Emitter) -> None:
    """The first D->D pass (spec 2.2)."""
    e("# dd_first_pass")
    _rsh(e, "dcv")
    e(*(f"scratch[D0 + slot + {z} * T] = F0" for z in LANES))
    with e.block("for q in range(QQ):"):
        _dd_step(e, carry_only=False)


def dd_carry_passes(e: Emitter) -> None:
    """The three carry passes, with the early exit of models of M >= 100 (spec 2.3)."""
    e("# dd_carry_passes")
    with e.block("for jpass in range(3):"):
        _rsh(e, "dcv")
        e("changed = False")
        with e.block("for q in range(QQ):"):
            _dd_step(e, carry_only=True)
        with e.block(f"if M >= {DD_EARLY_EXIT_M} and not changed:"):
            e("break")
    with e.block("if bad:"):
        e("flags |= SUBNORMAL")


def sum_e(e: Emitter) -> None:
    """xE: the D cells added to the lane sums, then the horizontal sum (spec 2.4)."""
    e("# sum_e")
    with e.block("for q in range(QQ):"):
        e("a = D0 + q * 4 * T + slot", *(f"xEv{z} = fadd(scratch[a + {z} * T], xEv{z})" for z in LANES))
    e("xE = fadd(fadd(xEv0, xEv1), fadd(xEv2, xEv3))")
    with e.block("if math.isinf(xE) or math.isnan(xE):"):
        e("flags |= RANGE")


def update_specials(e: Emitter) -> None:
    """N, C, J, then B from the new J and N (spec 2.4)."""
    e("# update_specials",
      "xN = fmul(xN, ploop)",
      "pc = fmul(xC, ploop)", "pe = fmul(xE, xe_move)", "xC = fadd(pc, pe)",
      "pj = fmul(xJ, ploop)", "pl = fmul(xE, xe_loop)", "xJ = fadd(pj, pl)",
      "pjm = fmul(xJ, pmove)", "pnm = fmul(xN, pmove)", "xB = fadd(pjm, pnm)")
    checks = " | ".join(_tiny(v) for v in ("pc", "pe", "pj", "pl", "pjm"))
    with e.block(f"if {checks} | ({_tiny('pnm')} & (xB != pjm)):"):
        e("flags |= SUBNORMAL")


def rescale_row(e: Emitter) -> None:
    """The sparse rescaling (spec 2.5), the row's flags and its special-state row."""
    e("# rescale_row", "scale = F1")
    with e.block("if xE > RESCALE_AT:"):
        e("xN = fdiv(xN, xE)", "xC = fdiv(xC, xE)", "xJ = fdiv(xJ, xE)", "xB = fdiv(xB, xE)", "rcp = fdiv(F1, xE)",
          "bad = " + " | ".join(_tiny(v) for v in ("xC", "xJ", "xB", "rcp")))
        with e.block(f"for c in range({SCRATCH_PER_Q} * QQ):"):
            e("a = c * T + slot", "v = fmul(scratch[a], rcp)", "scratch[a] = v", f"bad = bad | {_tiny('v')}")
        with e.block("if bad:"):
            e("flags |= SUBNORMAL")
        e("out_scales[sb + nscale] = xE", "nscale += 1", "scale = xE", "xE = F1")
    with e.block("if " + " | ".join(_tiny(v) for v in ("xE", "xN", "xJ", "xB", "xC")) + ":"):
        e("flags |= TINY_ROWS")
    with e.block("if want_rows != 0:"):
        _store_row(e, "i", "scale")


def _store_row(e: Emitter, i: str, scale: str) -> None:
    e(f"o = rb + 6 * {i}", "out_rows[o] = xE", "out_rows[o + 1] = xN", "out_rows[o + 2] = xJ",
      "out_rows[o + 3] = xB", "out_rows[o + 4] = xC", f"out_rows[o + 5] = {scale}")


def kernel_body() -> str:
    """The kernel's body (the lines under its ``def``)."""
    e = Emitter()
    e("tid = cuda.grid(1)")
    with e.block("if tid >= n_threads:"):
        e("return")
    e("T = np.int64(n_threads)", "slot = np.int64(tid)", "QQ = np.int64(Q)",
      "D0 = 4 * QQ * T  # the D cells of the thread's row, after the M cells",
      "I0 = 8 * QQ * T  # and the I cells",
      "DD = 28 * QQ  # the D->D vectors in tfv, after the 7 Q others")
    with e.block("while True:"):
        e("k = cuda.atomic.add(counters, 0, 1)")
        with e.block("if k >= n_items:"):
            e("break")
        e("p = items[k]", "L = lengths[p]", "wb = word_offsets[p]",
          "pmove = pmove_by_length[L]", "ploop = ploop_by_length[L]")
        with e.block(f"for c in range({SCRATCH_PER_Q} * QQ):"):
            e("scratch[c * T + slot] = F0")
        e("xE = F0", "xN = F1", "xJ = F0", "xB = pmove", "xC = F0", "flags = 0", "nscale = 0",
          "sb = scale_base[k]", "rb = np.int64(0)")
        with e.block("if want_rows != 0:"):
            e("rb = row_base[k]")
            _store_row(e, "0", "F1")
        e("w = u32(0)")
        with e.block("for i in range(1, L + 1):"):
            e("j = i - 1")
            with e.block("if (j & 3) == 0:"):
                e("w = residues[wb + (j >> 2)]")
            e("x = int32((w >> u32(8 * (j & 3))) & u32(255))", "eb = np.int64(x) * QQ * 4")
            with e.block("if not (fmul(xB, tbm_min) >= ABSORB):"):
                e("flags |= SUBNORMAL")
            main_pass(e)
            dd_first_pass(e)
            dd_carry_passes(e)
            sum_e(e)
            update_specials(e)
            rescale_row(e)
        with e.block("if math.isnan(xC) or (L > 0 and xC == F0) or math.isinf(xC):"):
            e("flags |= RANGE")
        e("out_flags[k] = flags", "out_xc[k] = xC", "out_nscale[k] = nscale")
    return "".join(f"    {line}\n" if line else "\n" for line in e.text().splitlines())


@dataclass(frozen=True)
class FwdSpec:
    """The Forward parser kernel (one specialisation: Q and M are arguments)."""

    @property
    def name(self) -> str:
        return "fwdback_parser_v1"

    def source(self, binding: str) -> str:
        return kernel_module(
            "Forward parser kernel (HMMER's p7_ForwardParser).", binding, ARGS, kernel_body(),
            "import math", "from hmmgpu.gpu import bias as _bias", f"_F = _bias.float_helpers({binding!r})",
            "fmul = _F.fmul; fadd = _F.fadd; fdiv = _F.fdiv",
            f"RANGE = {RANGE}; SUBNORMAL = {SUBNORMAL}; TINY_ROWS = {TINY_ROWS}",
            "F0 = np.float32(0.0); F1 = np.float32(1.0)",
            f"FMIN = np.float32({float(FLT_MIN)!r}); ABSORB = np.float32({float(ABSORB)!r})",
            f"RESCALE_AT = np.float32({float(RESCALE_AT)!r})")
