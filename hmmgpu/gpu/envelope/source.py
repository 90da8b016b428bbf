"""The posterior decoding and optimal accuracy kernel of envelope rescoring: what it computes,
why it is exact, why the code looks as it does, and what the rest of the envelope needs.

What is computed
----------------
Domain definition rescores every envelope ``i..j`` of an F3 passer alone
(``rescore_isolated_domain``, hmmer-domaindef-spec.md §3; CPU reference
:func:`hmmgpu.cpu.envelope.rescore_isolated_domain`): full unihit Forward and Backward
matrices of the slice with the whole target's length model, their posterior decoding
(``p7_Decoding``), the optimal accuracy matrix (``p7_OptimalAccuracy``) and its score
``oasc``, the OA trace (``p7_OATrace``), and for an unclustered envelope the null2 odds by
expectation. This kernel runs the two middle steps on envelopes whose Forward and Backward
matrices are in device memory, each envelope by a group of four threads, thread z its SSE
lane z (the Forward parser kernel's scheme, :mod:`hmmgpu.gpu.fwdback.source`):

* ``decode_rows`` (:func:`hmmgpu.cpu.decoding.posterior_rows`): ``sp = f32(1.0 / (double)
  B[0].N)``; row i: ``t = sp F[i].SCALE``, ``M = (fM bM) t``, ``I = (fI bI) t``, ``D = 0``;
  N, J, C ``= ((F[i-1].X B[i].X) xf[X][LOOP]) sp`` and E = B = 0; with Backward's own scale
  factors ``sp = sp (F[i].SCALE / B[i].SCALE)``. The posterior is written over the Backward
  matrix, as HMMER writes it (its SCALE column stays). eslERANGE when ``sp`` ends infinite:
  the domain is dropped, OA does not run.
* ``oa_rows`` (:func:`hmmgpu.cpu.optacc.oa_rows`), over the Forward matrix: Forward's
  recursion with SSE's ``maxps`` for the sums (``a > b ? a : b``), a term whose transition is
  0 masked to +0.0, the row's start and the D->D carries shifted right with -inf into lane 0,
  four D->D passes without early exit, E the ``esl_sse_hmax_ps`` of the four lanes (lanes 0
  and 1, 2 and 3, then the two), the specials J, C, N, B; ``oasc = C(Ld)``.

* ``null2_expectation`` (:func:`hmmgpu.cpu.null2.null2_by_expectation`): the posterior's M
  and I cells summed over the rows (lane z of vector q in row order, into the posterior's
  row 0, as HMMER sums them there), normalised, then per residue the four-lane sum over q of
  ``w_M rfv[x]`` and ``w_I``, the horizontal sum and the N, C, J weight, and the degenerate
  codes averaged: the null2 odds of an unclustered envelope (the host takes glibc's ``logf``).

* ``oa_trace`` (:func:`hmmgpu.cpu.optacc.oa_trace_states`): lane 0 walks the OA matrix back
  from C at row Ld (at most ``2 (Ld + M) + 6`` states), each predecessor chosen by HMMER's
  rules and ties, each state given its posterior, then the trace reversed.

Outputs per envelope: the status, ``oasc``, the flags, the null2 odds, the OA trace, and the
two matrices in place (which need not come back).

Why the result is exact
-----------------------
The cells of lane z of a vector q depend only on lane z of the same and earlier vectors,
except where HMMER's code crosses lanes, which the group does with warp shuffles: the right
shifts (from lane z-1) and the horizontal maximum of E (the four lanes gathered, reduced in
HMMER's order). Every product and sum is an explicitly rounded IEEE operation (``fmul``,
``fadd``, ``fdiv``: numba-cuda would fuse a plain ``a * b + c``); the maxima and the masks
are selections, which round nothing. The one double operation, ``1.0 / (double) B[0].N``,
is an IEEE double division rounded to float (libdevice's ``ddiv_rn``; NVVM makes it the float
reciprocal ``rcp.rn.f32``, the same number). The kernel is compiled without fast math, so
subnormals are IEEE's (pyhmmer's mode): the matrices are libhmmer's bit for bit. The flags
are the CPU reference's: a posterior value met by a tiny factor is TINY_ROWS when itself
tiny and SUBNORMAL when a normal number (0 under flush-to-zero, hmmsearch's mode), and OA
raises SUBNORMAL where a tiny posterior it adds is not absorbed by the sum. One thing is
not libhmmer's bits: a decoding that overflows (``sp`` infinite, the domain dropped) leaves
NaN where 0 meets inf, and a GPU's NaN is 0x7FFFFFFF where x86's is 0xFFC00000.

Why the code looks as it does
-----------------------------
Each thread reads and writes only its own lane's cells (``dp[((i 3 + s) Q + q) 4 + z]``,
the layout of :class:`hmmgpu.cpu.fwdback.StripedMatrix`: the four threads of a group touch
four consecutive words), so there is no memory hazard between the threads of a group but
the specials lane 0 writes and the trace lane 0 walks over every lane's cells; the special states are computed by all four alike in registers, and lane 0 stores them.
The group syncs its warp after the threads have read ``B[0].N`` and before lane 0 zeroes
the posterior's row 0, between the decoding and OA (OA reads the posterior specials lane 0
wrote), and before the trace (lane 0 reads the OA cells of every lane: a shuffle orders no
memory, ``syncwarp`` does). Groups take envelopes from an atomic counter.

The rest of the envelope on the GPU (the plan)
----------------------------------------------
* Full Forward and Backward matrices: the parser kernels (:mod:`hmmgpu.gpu.fwdback`) with
  HMMER's ``do_full``: the same row arithmetic (the CPU references are literally the parsers
  with a ``dp`` argument, :func:`hmmgpu.cpu.fwdback.forward_matrix`), each row's cells
  stored to global memory in this layout instead of kept in one row, on the slice
  ``dsq[i..j]`` with the unihit xE transitions (1, 0) and ``pmove = 2 / (L + 2)`` of the
  WHOLE target length. Backward reuses Forward's stored scale factors. Memory:
  ``(Ld + 1) (48 Q + 24)`` bytes per matrix; a batch of envelopes is sized to the device.
* This kernel, on the matrices where they are.
* The host takes ``logf`` of the null2 odds (glibc's, not CUDA's) and forms ``iali``,
  ``jali`` and ``domcorrection``, as :func:`hmmgpu.cpu.envelope.rescore_isolated_domain` does.
* Flags: as the CPU references; the unihit Forward's row check ``xB min tBM >= 2^-101``
  and Backward's tiny E are conservative in unihit (B decays after the domain), so that
  many envelopes are flagged for flush-to-zero runs; a per-cell absorption check would
  clear most (see :mod:`hmmgpu.cpu.envelope`).
"""
from __future__ import annotations

from dataclasses import dataclass

from hmmgpu.constants import K, KP
from hmmgpu.cpu.null2 import DEGENERATE_RESIDUES
from hmmgpu.cpu.optacc import STATE_B, STATE_C, STATE_D, STATE_E, STATE_I, STATE_J, STATE_M, STATE_N, STATE_S, STATE_T
from hmmgpu.gpu.runtime.emit import Emitter, kernel_module
from hmmgpu.gpu.runtime.kargs import Arg
from hmmgpu.stages.forward import FLT_MIN, STATUS_RANGE, SUBNORMAL, TINY_ROWS

#: Parameters of the kernel, in order. Item k: its Forward matrix's cells at ``fwd_dp[dp_base[k]:]``
#: and rows at ``fwd_x[x_base[k]:]`` (float32, layout of StripedMatrix), its Backward's at the same
#: offsets of ``bck_dp`` and ``bck_x``; ``lengths[k]`` rows after row 0, ``item_q[k]`` vectors; its
#: model's transitions ``tfv[item_tfv[k]:]`` ([8Q][4]), special transitions ``item_xf[8k:8k+8]``
#: ([E N J C][MOVE LOOP]), ``own_scales[k]`` (Backward's has_own_scales), match emission odds
#: ``rfv[item_rfv[k]:]`` ([Kp][Q][4]); ``out_null2[Kp k:Kp (k+1)]`` receives the null2 odds, and
#: ``out_st``, ``out_k``, ``out_i``, ``out_pp`` from ``trace_base[k]`` the OA trace, ``out_n[k]`` long.
ARGS = (
    Arg("fwd_dp", "float32[:]"), Arg("bck_dp", "float32[:]"), Arg("fwd_x", "float32[:]"), Arg("bck_x", "float32[:]"),
    Arg("dp_base", "int64[:]"), Arg("x_base", "int64[:]"), Arg("lengths", "int32[:]"), Arg("item_q", "int32[:]"),
    Arg("tfv", "float32[:]"), Arg("item_tfv", "int64[:]"), Arg("item_xf", "float32[:]"),
    Arg("own_scales", "int32[:]"), Arg("rfv", "float32[:]"), Arg("item_rfv", "int64[:]"), Arg("n_items", "int32"),
    Arg("counters", "int32[:]"), Arg("n_threads", "int32"), Arg("out_status", "int32[:]"), Arg("out_oasc", "float32[:]"),
    Arg("out_flags", "int32[:]"), Arg("out_null2", "float32[:]"), Arg("trace_base", "int64[:]"),
    Arg("out_n", "int32[:]"), Arg("out_st", "int32[:]"), Arg("out_k", "int32[:]"), Arg("out_i", "int32[:]"),
    Arg("out_pp", "float32[:]"),
)
_E, _N, _J, _B, _C, _SCALE = range(6)  # p7X_ columns of a row of specials
_XF_E, _XF_N, _XF_J, _XF_C = (2 * r for r in range(4))  # rows of xf, MOVE at +0 and LOOP at +1
_BM, _MM, _IM, _DM, _MD, _MI, _II = (4 * t for t in range(7))  # tfv offsets of vector q's transitions


def tiny_test(v: str) -> str:
    """A result flush-to-zero may flush (values here are never negative)."""
    return f"((({v}) > F0) & (({v}) <= FMIN))"


def cell(i: str, s: int, q: str) -> str:
    """The index of lane z's cell of state s (M 0, D 1, I 2), vector q, row i of the item."""
    return f"db + ((({i}) * 3 + {s}) * QQ + ({q})) * 4 + z"


def _rsh_inf(e: Emitter, v: str) -> None:
    """Shift ``v`` right by one lane across the group, -inf into lane 0 (``esl_sse_rightshift_ps``)."""
    e(f"shifted = cuda.shfl_sync(gmask, {v}, lane - 1 if z > 0 else lane)", f"{v} = shifted if z > 0 else NEG_INF")


def decode_rows(e: Emitter) -> None:
    """``p7_Decoding`` into the Backward matrix, lane z's cells; lane 0 the specials."""
    e("# decode_rows", f"sp = rcp_double(bck_x[xb + {_N}])",
      f"bad = {tiny_test('sp')}", "cuda.syncwarp(gmask)")
    with e.block("if z == 0:"):
        for c in (_E, _N, _J, _B, _C):
            e(f"bck_x[xb + {c}] = F0")
    with e.block("for q in range(QQ):"):
        for s in range(3):
            e(f"bck_dp[{cell('0', s, 'q')}] = F0")
    with e.block("for i in range(1, L + 1):"):
        e(f"t = fmul(sp, fwd_x[xb + 6 * i + {_SCALE}])", f"bad = bad | {tiny_test('t')}")
        with e.block("for q in range(QQ):"):
            for s, name in ((0, "m"), (2, "v")):
                e(f"a = {cell('i', s, 'q')}", "fb = fmul(fwd_dp[a], bck_dp[a])", f"{name} = fmul(fb, t)",
                  f"bck_dp[a] = {name}")
                e(f"flags |= flushed({tiny_test('fb')}, {name})")
            e(f"bck_dp[{cell('i', 1, 'q')}] = F0")
        with e.block("if z == 0:"):
            e("o = xb + 6 * i", f"bck_x[o + {_E}] = F0", f"bck_x[o + {_B}] = F0")
            for col, xf in ((_N, _XF_N), (_J, _XF_J), (_C, _XF_C)):
                e(f"f = fwd_x[o - 6 + {col}]", f"b = bck_x[o + {col}]", "a2 = fmul(f, b)",
                  f"lp = fmul(a2, xf[{xf + 1}])", "v2 = fmul(lp, sp)", f"bck_x[o + {col}] = v2",
                  "flags |= flushed(" + " | ".join(tiny_test(x) for x in ("f", "b", "a2", "lp")) + ", v2)")
        with e.block("if own != 0:"):
            e(f"sp = fmul(sp, fdiv(fwd_x[xb + 6 * i + {_SCALE}], bck_x[xb + 6 * i + {_SCALE}]))",
              f"bad = bad | {tiny_test('sp')}")
    with e.block("if bad:"):
        e("flags |= SUBNORMAL")


def oa_main_pass(e: Emitter) -> None:
    """Row i's M, the delayed D store, the M->D carry and I (optacc.c's first loop), lane z."""
    e("# oa_main_pass")
    for v, s in (("mpv", 0), ("dpv", 1), ("ipv", 2)):
        e(f"{v} = fwd_dp[{cell('i - 1', s, 'QQ - 1')}]")
        _rsh_inf(e, v)
    e("dcv = NEG_INF", "xEv = NEG_INF")
    with e.block("for q in range(QQ):"):
        e("tq = tb + q * 28 + z",
          f"sv = masked(tfv[tq + {_BM}], xB)",
          f"sv = fmax(sv, masked(tfv[tq + {_MM}], mpv))",
          f"sv = fmax(sv, masked(tfv[tq + {_IM}], ipv))",
          f"sv = fmax(sv, masked(tfv[tq + {_DM}], dpv))",
          f"pp = bck_dp[{cell('i', 0, 'q')}]", "s2 = fadd(sv, pp)",
          f"flags |= SUBNORMAL if {tiny_test('pp')} & (s2 != sv) else 0", "sv = s2",
          "xEv = fmax(xEv, sv)",
          f"mpv = fwd_dp[{cell('i - 1', 0, 'q')}]", f"dpv = fwd_dp[{cell('i - 1', 1, 'q')}]",
          f"ipv = fwd_dp[{cell('i - 1', 2, 'q')}]",
          f"fwd_dp[{cell('i', 0, 'q')}] = sv", f"fwd_dp[{cell('i', 1, 'q')}] = dcv",
          f"dcv = masked(tfv[tq + {_MD}], sv)",
          f"iv = masked(tfv[tq + {_MI}], mpv)", f"iv = fmax(iv, masked(tfv[tq + {_II}], ipv))",
          f"pp = bck_dp[{cell('i', 2, 'q')}]", "s2 = fadd(iv, pp)",
          f"flags |= SUBNORMAL if {tiny_test('pp')} & (s2 != iv) else 0",
          f"fwd_dp[{cell('i', 2, 'q')}] = s2")


def oa_dd_passes(e: Emitter) -> None:
    """The four D->D passes (no early exit), then E: the lane's maximum over M and D, and the
    maximum of the four lanes in ``esl_sse_hmax_ps``'s order."""
    e("# oa_dd_passes")
    _rsh_inf(e, "dcv")
    with e.block("for q in range(QQ):"):
        e(f"a = {cell('i', 1, 'q')}", "d = fmax(dcv, fwd_dp[a])", "fwd_dp[a] = d", "dcv = masked(tfv[dd + q * 4 + z], d)")
    with e.block("for jpass in range(3):"):
        _rsh_inf(e, "dcv")
        with e.block("for q in range(QQ):"):
            e(f"a = {cell('i', 1, 'q')}", "fwd_dp[a] = fmax(dcv, fwd_dp[a])", "dcv = masked(tfv[dd + q * 4 + z], dcv)")
    with e.block("for q in range(QQ):"):
        e(f"xEv = fmax(xEv, fwd_dp[{cell('i', 1, 'q')}])")
    for k in range(4):
        e(f"l{k} = cuda.shfl_sync(gmask, xEv, base + {k})")
    e("xE = fmax(fmax(l0, l1), fmax(l2, l3))")


def oa_specials(e: Emitter) -> None:
    """Row i's J, C, N, B from the posterior specials (every thread alike, in registers);
    lane 0 stores the row."""
    e("# oa_specials", "o = xb + 6 * i")
    for reg, col, loop in (("xJ", _J, _XF_J + 1), ("xC", _C, _XF_C + 1), ("xN", _N, _XF_N + 1)):
        e(f"pp = bck_x[o + {col}]", f"lt = F0 if xf[{loop}] == F0 else fadd({reg}, pp)")
        with e.block(f"if xf[{loop}] != F0 and {tiny_test('pp')} and lt != {reg}:"):
            e("flags |= SUBNORMAL")
        e(f"{reg}_loop = lt")
    e(f"xJ = fmax(xJ_loop, F0 if xf[{_XF_E + 1}] == F0 else xE)",
      f"xC = fmax(xC_loop, F0 if xf[{_XF_E}] == F0 else xE)",
      "xN = xN_loop",
      f"xB = fmax(F0 if xf[{_XF_N}] == F0 else xN, F0 if xf[{_XF_J}] == F0 else xJ)")
    with e.block("if z == 0:"):
        e(f"fwd_x[o + {_E}] = xE", f"fwd_x[o + {_N}] = xN", f"fwd_x[o + {_J}] = xJ", f"fwd_x[o + {_B}] = xB",
          f"fwd_x[o + {_C}] = xC")


def oa_rows(e: Emitter) -> None:
    """``p7_OptimalAccuracy`` over the Forward matrix, from the posterior."""
    e("# oa_rows: row 0")
    with e.block("for q in range(QQ):"):
        for s in range(3):
            e(f"fwd_dp[{cell('0', s, 'q')}] = NEG_INF")
    e("xE = NEG_INF", "xN = F0", "xJ = NEG_INF", "xB = F0", "xC = NEG_INF")
    with e.block("if z == 0:"):
        e(f"fwd_x[xb + {_E}] = xE", f"fwd_x[xb + {_N}] = xN", f"fwd_x[xb + {_J}] = xJ", f"fwd_x[xb + {_B}] = xB",
          f"fwd_x[xb + {_C}] = xC")
    with e.block("for i in range(1, L + 1):"):
        oa_main_pass(e)
        oa_dd_passes(e)
        oa_specials(e)


def null2_expectation(e: Emitter) -> None:
    """``p7_Null2_ByExpectation`` (:func:`hmmgpu.cpu.null2.null2_by_expectation`): lane z's
    posterior M and I cells summed over rows 1..Ld in row order into row 0 (as HMMER sums them
    there), times ``norm = f32(1.0 / (double) f32(Ld))``; N, C, J likewise; then per residue
    the lane's sum over q of ``w_M rfv[x]`` then ``w_I``, the four lanes' horizontal sum and the
    N, C, J weight; lane 0 averages the degenerate codes (Easel's ``esl_abc_FAvgScVec``)."""
    e("# null2_expectation", "norm = rcp_double(float32(L))")
    with e.block("for q in range(QQ):"):
        for s in (0, 2):
            e(f"acc = bck_dp[{cell('1', s, 'q')}]")
            with e.block("for i in range(2, L + 1):"):
                e(f"acc = fadd(bck_dp[{cell('i', s, 'q')}], acc)")
            e(f"bck_dp[{cell('0', s, 'q')}] = fmul(acc, norm)")
    for reg, col in (("sn", _N), ("sc", _C), ("sj", _J)):
        e(f"{reg} = bck_x[xb + 6 + {col}]")
    with e.block("for i in range(2, L + 1):"):
        for reg, col in (("sn", _N), ("sc", _C), ("sj", _J)):
            e(f"{reg} = fadd({reg}, bck_x[xb + 6 * i + {col}])")
    e("xfactor = fadd(fadd(fmul(sn, norm), fmul(sc, norm)), fmul(sj, norm))", "nb = np.int64(k) * KP")
    with e.block(f"for x in range({K}):"):
        e("sv = F0")
        with e.block("for q in range(QQ):"):
            e(f"sv = fadd(sv, fmul(bck_dp[{cell('0', 0, 'q')}], rfv[rb + (x * QQ + q) * 4 + z]))",
              f"sv = fadd(sv, bck_dp[{cell('0', 2, 'q')}])")
        for k in range(4):
            e(f"l{k} = cuda.shfl_sync(gmask, sv, base + {k})")
        with e.block("if z == 0:"):
            e("out_null2[nb + x] = fadd(fadd(fadd(l0, l1), fadd(l2, l3)), xfactor)")
    with e.block("if z == 0:"):
        for x, residues in DEGENERATE_RESIDUES.items():
            e("t = F0", *(f"t = fadd(t, out_null2[nb + {a}])" for a in residues),
              f"out_null2[nb + {x}] = fdiv(t, float32({len(residues)}))")
        for x in (K, KP - 2, KP - 1):
            e(f"out_null2[nb + {x}] = np.float32(1.0)")


def cell_of(i: str, s: int, q: str, r: str) -> str:
    """The index of lane r's cell of state s, vector q, row i (the trace reads any lane)."""
    return f"db + ((({i}) * 3 + {s}) * QQ + ({q})) * 4 + ({r})"


def _predecessors(e: Emitter, row: str) -> None:
    """M, D, I of node k-1 in row ``row`` (vector q-1, or the last vector's lane r-1 for q = 0;
    0 for node 0, as ``esl_sse_rightshiftz_float`` shifts zeros in), into m, d, v."""
    with e.block("if q > 0:"):
        e(*(f"{v} = fwd_dp[{cell_of(row, s, 'q - 1', 'r')}]" for v, s in (("m", 0), ("d", 1), ("v", 2))))
    with e.block("elif r > 0:"):
        e(*(f"{v} = fwd_dp[{cell_of(row, s, 'QQ - 1', 'r - 1')}]" for v, s in (("m", 0), ("d", 1), ("v", 2))))
    with e.block("else:"):
        e("m = F0", "d = F0", "v = F0")


def oa_trace(e: Emitter) -> None:
    """``p7_OATrace`` by lane 0 (:func:`hmmgpu.cpu.optacc.oa_trace_states`): from T and C at
    row Ld back to S, each state with ``get_postprob``'s posterior and
    ``p7_trace_AppendWithPP``'s conventions, then ``p7_trace_Reverse``."""
    e("# oa_trace: the OA cells of every lane, written by their threads, read by lane 0", "cuda.syncwarp(gmask)")
    with e.block("if z == 0:"):
        e("tz = trace_base[k]", "i = L", "kk = 0")
        for z in (0, 1):
            e(f"out_st[tz + {z}] = {STATE_T if z == 0 else STATE_C}", f"out_k[tz + {z}] = 0", f"out_i[tz + {z}] = 0",
              f"out_pp[tz + {z}] = F0")
        e("n = 2", f"s0 = {STATE_C}")
        with e.block(f"while s0 != {STATE_S}:"):
            e("q = (kk - 1) % QQ", "r = (kk - 1) // QQ", f"s1 = {STATE_S}")
            with e.block(f"if s0 == {STATE_M}:"):
                _predecessors(e, "i - 1")
                e("tq = tb + 28 * q + r",
                  f"bp = NEG_INF if tfv[tq + {_BM}] == F0 else fwd_x[xb + 6 * (i - 1) + {_B}]",
                  f"mp = NEG_INF if tfv[tq + {_MM}] == F0 else m", f"ip = NEG_INF if tfv[tq + {_IM}] == F0 else v",
                  f"dp = NEG_INF if tfv[tq + {_DM}] == F0 else d",
                  f"s1 = {STATE_M}", "top = mp")
                for var, state in (("ip", STATE_I), ("dp", STATE_D), ("bp", STATE_B)):
                    with e.block(f"if {var} > top:"):
                        e(f"s1 = {state}", f"top = {var}")
                e("kk -= 1", "i -= 1")
            with e.block(f"elif s0 == {STATE_D}:"):
                _predecessors(e, "i")
                with e.block("if q > 0:"):
                    e(f"tmd = tfv[tb + 28 * (q - 1) + {_MD} + r]", "tdd = tfv[dd + (q - 1) * 4 + r]")
                with e.block("elif r > 0:"):
                    e(f"tmd = tfv[tb + 28 * (QQ - 1) + {_MD} + r - 1]", "tdd = tfv[dd + (QQ - 1) * 4 + r - 1]")
                with e.block("else:"):
                    e("tmd = F0", "tdd = F0")
                e("mp = NEG_INF if tmd == F0 else m", "dp = NEG_INF if tdd == F0 else d",
                  f"s1 = {STATE_M} if mp >= dp else {STATE_D}", "kk -= 1")
            with e.block(f"elif s0 == {STATE_I}:"):
                e(f"mp = NEG_INF if tfv[tb + 28 * q + {_MI} + r] == F0 else fwd_dp[{cell_of('i - 1', 0, 'q', 'r')}]",
                  f"ip = NEG_INF if tfv[tb + 28 * q + {_II} + r] == F0 else fwd_dp[{cell_of('i - 1', 2, 'q', 'r')}]",
                  f"s1 = {STATE_M} if mp >= ip else {STATE_I}", "i -= 1")
            with e.block(f"elif s0 == {STATE_N}:"):
                e(f"s1 = {STATE_S} if i == 0 else {STATE_N}")
            for state, col, loop, to_e in ((STATE_C, _C, _XF_C + 1, _XF_E), (STATE_J, _J, _XF_J + 1, _XF_E + 1)):
                with e.block(f"elif s0 == {state}:"):
                    e(f"lp = NEG_INF if xf[{loop}] == F0 else fadd(fwd_x[xb + 6 * (i - 1) + {col}], "
                      f"bck_x[xb + 6 * i + {col}])",
                      f"ep = NEG_INF if xf[{to_e}] == F0 else fwd_x[xb + 6 * i + {_E}]",
                      f"s1 = {state} if lp > ep else {STATE_E}")
            with e.block(f"elif s0 == {STATE_E}:"):
                e("top = NEG_INF", f"s1 = {STATE_M}", "kk = 0")
                with e.block("for qe in range(QQ):"):
                    for s, op, state in ((0, ">=", STATE_M), (1, ">", STATE_D)):
                        with e.block("for re in range(4):"):
                            e(f"val = fwd_dp[{cell_of('i', s, 'qe', 're')}]")
                            with e.block(f"if val {op} top:"):
                                e("top = val", f"s1 = {state}", "kk = re * QQ + qe + 1")
            with e.block("else:"):
                e(f"np_ = NEG_INF if xf[{_XF_N}] == F0 else fwd_x[xb + 6 * i + {_N}]",
                  f"jp = NEG_INF if xf[{_XF_J}] == F0 else fwd_x[xb + 6 * i + {_J}]",
                  f"s1 = {STATE_N} if np_ > jp else {STATE_J}")
            e("a = tz + n", "out_st[a] = s1", "out_k[a] = 0", "out_i[a] = 0", "out_pp[a] = F0",
              "q = (kk - 1) % QQ", "r = (kk - 1) // QQ")
            with e.block(f"if s1 == {STATE_M} or s1 == {STATE_I}:"):
                e("out_k[a] = kk", "out_i[a] = i",
                  f"out_pp[a] = bck_dp[{cell_of('i', 0, 'q', 'r')}] if s1 == {STATE_M} else "
                  f"bck_dp[{cell_of('i', 2, 'q', 'r')}]")
            with e.block(f"elif s1 == {STATE_D}:"):
                e("out_k[a] = kk")
            with e.block(f"elif (s1 == {STATE_N} or s1 == {STATE_C} or s1 == {STATE_J}) and out_st[a - 1] == s1:"):
                e("out_i[a] = i",
                  f"out_pp[a] = bck_x[xb + 6 * i + ({_N} if s1 == {STATE_N} else ({_C} if s1 == {STATE_C} else {_J}))]")
            e("n += 1")
            with e.block(f"if (s1 == {STATE_N} or s1 == {STATE_J} or s1 == {STATE_C}) and s1 == s0:"):
                e("i -= 1")
            e("s0 = s1")
        e("# p7_trace_Reverse: N, C, J emissions one state earlier, then the arrays reversed")
        with e.block("for w in range(n - 1):"):
            e("a = tz + w", "sw = out_st[a]")
            with e.block(f"if (sw == {STATE_N} or sw == {STATE_C} or sw == {STATE_J}) and out_st[a + 1] == sw "
                         "and out_i[a] == 0 and out_i[a + 1] > 0:"):
                e("out_i[a] = out_i[a + 1]", "out_i[a + 1] = 0", "out_pp[a] = out_pp[a + 1]", "out_pp[a + 1] = F0")
        with e.block("for w in range(n // 2):"):
            e("a = tz + w", "b2 = tz + n - 1 - w")
            for arr in ("out_st", "out_k", "out_i", "out_pp"):
                e(f"tmp_{arr} = {arr}[a]", f"{arr}[a] = {arr}[b2]", f"{arr}[b2] = tmp_{arr}")
        e("out_n[k] = n")


def kernel_body() -> str:
    e = Emitter()
    e("tid = cuda.grid(1)")
    with e.block("if tid >= n_threads:"):
        e("return")
    e("lane = int32(cuda.threadIdx.x & 31)  # a group of four threads per envelope: thread z its lane z",
      "z = lane & 3", "base = lane - z", "gmask = u32(15) << u32(base)")
    with e.block("while True:"):
        e("k = int32(0)")
        with e.block("if z == 0:"):
            e("k = cuda.atomic.add(counters, 0, 1)")
        e("k = cuda.shfl_sync(gmask, k, base)")
        with e.block("if k >= n_items:"):
            e("break")
        e("L = lengths[k]", "QQ = np.int64(item_q[k])", "db = dp_base[k]", "xb = x_base[k]", "tb = item_tfv[k]",
          "dd = tb + 28 * QQ  # the D->D vectors, after the 7 Q others",
          "xf = item_xf[8 * k:8 * k + 8]", "own = own_scales[k]", "rb = item_rfv[k]", "flags = int32(0)")
        decode_rows(e)
        e("flags = flags | cuda.shfl_xor_sync(gmask, flags, 1)", "flags = flags | cuda.shfl_xor_sync(gmask, flags, 2)")
        with e.block("if math.isinf(sp):"):
            with e.block("if z == 0:"):
                e(f"out_status[k] = {STATUS_RANGE}", "out_flags[k] = flags")
            e("continue")
        e("cuda.syncwarp(gmask)")
        oa_rows(e)
        null2_expectation(e)
        oa_trace(e)
        e("flags = flags | cuda.shfl_xor_sync(gmask, flags, 1)", "flags = flags | cuda.shfl_xor_sync(gmask, flags, 2)")
        with e.block("if z == 0:"):
            e("out_status[k] = 0", "out_oasc[k] = xC", "out_flags[k] = flags")
    return "".join(f"    {line}\n" if line else "\n" for line in e.text().splitlines())


def module_lines(binding: str, ftz: bool = False) -> tuple:
    """Imports, constants and the selection helpers of the kernel's module (``ftz``: its float
    operations hmmsearch's, flush-to-zero: :func:`hmmgpu.gpu.rounding.float_helpers`)."""
    device = "" if binding == "python" else "@cuda.jit(device=True, forceinline=True)\n"
    if binding == "python":
        rcp = ("def rcp_double(x):\n    \"\"\"f32(1.0 / (double) x), IEEE (1/0 is inf).\"\"\"\n"
               "    with np.errstate(divide='ignore'):\n        return to_float(np.float64(1.0) / np.float64(x))\n")
    else:
        rcp = ("from numba.cuda import libdevice\n" + device + "def rcp_double(x):\n"
               "    \"\"\"f32(1.0 / (double) x): libdevice's IEEE double division, rounded to float.\"\"\"\n"
               "    return to_float(libdevice.ddiv_rn(np.float64(1.0), np.float64(x)))\n")
    return ("import math", "from numba import float32", "from hmmgpu.gpu import rounding as _rounding",
            f"_F = _rounding.float_helpers({binding!r}, ftz={bool(ftz)!r})",
            "fmul = _F.fmul; fadd = _F.fadd; fdiv = _F.fdiv; to_float = _F.to_float",
            f"SUBNORMAL = {SUBNORMAL}; TINY_ROWS = {TINY_ROWS}; KP = {KP}",
            "F0 = np.float32(0.0); NEG_INF = np.float32(-np.inf)",
            f"FMIN = np.float32({float(FLT_MIN)!r})",
            "",
            f"{device}def fmax(a, b):\n    \"\"\"SSE's maxps: a > b ? a : b.\"\"\"\n    return a if a > b else b\n",
            f"{device}def masked(t, v):\n    \"\"\"v where the transition t exists, else +0.0 (SSE's and with t > 0).\"\"\"\n"
            "    return v if t > F0 else F0\n",
            rcp,
            f"{device}def flushed(any_tiny, v):\n"
            "    \"\"\"0, or TINY_ROWS / SUBNORMAL where flush-to-zero makes v 0 (hmmgpu.cpu.decoding.flushed).\"\"\"\n"
            f"    if not any_tiny and not {tiny_test('v')}:\n        return int32(0)\n"
            f"    return int32(TINY_ROWS) if (v == F0) | {tiny_test('v')} else int32(SUBNORMAL)\n")


@dataclass(frozen=True)
class DecodeOASpec:
    """The envelope decoding + optimal accuracy kernel (a group of four threads per envelope).
    ``ftz``: in hmmsearch's float mode (flush-to-zero), on matrices computed in it."""

    ftz: bool = False

    @property
    def name(self) -> str:
        return "envelope_decode_oa_v4" + ("_ftz" if self.ftz else "")

    def source(self, binding: str) -> str:
        return kernel_module("Envelope posterior decoding and optimal accuracy (p7_Decoding, p7_OptimalAccuracy).",
                             binding, ARGS, kernel_body(), *module_lines(binding, self.ftz))
