"""The Backward parser kernel: what it computes, why it is exact, why the code looks as it does.

What is computed
----------------
HMMER's ``p7_BackwardParser`` (``fwdback.c: backward_engine`` with ``do_full = 0``, the SSE
implementation of HMMER 3.4), as ``p7_Pipeline`` runs it on a target that passed the F3
gate, right after the Forward parser on the same target, whose scale factors it reuses. For
each target of a work list four threads run the scaled Backward recursion of the multihit
local profile in float32 probability space, rows L down to 0, and write:

* every row of special states ``xmx[i][E N J B C SCALE]``, i = 0..L (the rows that
  ``p7_DomainDecoding`` reads with the Forward parser's rows);
* ``has_own_scales``: whether the target switched to Backward's own scale factors;
* exactness flags, by the rule of the CPU reference (:mod:`hmmgpu.cpu.fwdback`).

Its input is the Forward parser's rows of the same target, as the Forward kernel
(:mod:`.source`) wrote them on the device, read for their SCALE column: the launch
(:mod:`.launch`) runs this kernel after the Forward kernel on the same stream, with the same
items. The host forms ``totscale`` and the score from the rows (the SCALE column and row 0's
N) with libm's ``log``, in HMMER's order (:func:`hmmgpu.stages.forward.backward_score`).

The recursion, in HMMER's order (hmmer-postfilter-spec.md section 4; each step below is a
function of this generator and carries the name of the CPU reference's step):

* ``bwd_last_row``: row L: C = pmove, E = C xf[E][MOVE], M = D = E, I = 0, then the first
  D->D pass from ``lsh(D[Q-1])`` over q = Q-1..0, with ``lsh(v) = [v1 v2 v3 0]``;
* ``bwd_main_pass`` (row i < L, residue i+1's emissions ``e``): I complete, D the M->D part, M
  the M and I part, the lane sums of B->M, over q = Q-1..0; the M, I and D transitions into
  node k+1 are the q-1 vector's (``lsh`` of vector 0's at the start);
* ``bwd_specials``: B the horizontal sum ``(l0 + l1) + (l2 + l3)``, then C, J, N, E;
* ``bwd_dd_first_pass``: the {M,D}->E paths and the first D->D pass from ``lsh(D[0] + E)``;
* ``bwd_dd_carry_passes``: three passes, each from the left-shifted carry, with no early
  exit (Backward has none);
* ``bwd_md_pass``: M += ``lsh(D)[q] tMD``;
* ``bwd_rescale_row``: the row's scale factor ``s`` (the Forward row's, or after a B above
  1e16 the row's own B where it exceeds 1e4, sticky), the specials divided by ``s`` and every
  cell multiplied by ``1/s``;
* ``bwd_first_row``: row 0: B from residue 1 summed over q = 0..Q-1, then N.

Why the result is exact
-----------------------
As in the Forward kernel: HMMER's striped layout and its own tables, the float operations
in HMMER's order, each an explicitly rounded IEEE operation (``fmul``/``fadd``/``fdiv``:
libdevice's ``__f*_rn``, never contracted into a fused multiply-add), IEEE subnormals (the
kernel is compiled without fast math, pyhmmer's mode), and the logarithms on the host.
HMMER multiplies the row by ``_mm_set1_ps(1.0 / s)``, a double quotient rounded to float;
the kernel divides in float (``fdiv(1, s)``), which gives the same float: a quotient of two
floats rounded first to double and then to float is the correctly rounded float quotient
(double has more than 2 x 24 + 2 bits of precision). ``(double) xB > 1e16`` is compared in
double, as HMMER does. A test asserts that no float value of the kernel meets a plain
arithmetic operator and, on a GPU, that its PTX holds no ``fma``.

What the kernel cannot promise is flagged for the host as in the CPU reference:
:data:`~hmmgpu.stages.forward.SUBNORMAL` when a tiny summand (``0 < v <= FLT_MIN``) changed a
sum or a kept value is tiny (under flush-to-zero, hmmsearch's mode, it would differ),
:data:`~hmmgpu.stages.forward.TINY_ROWS` when a stored special value (in practice C, which
decays like Forward's N) is subnormal, :data:`~hmmgpu.stages.forward.RANGE` when row 0's N is
NaN, 0 or infinite (libhmmer's ``eslERANGE``). A target's Backward rows are exact when
neither this kernel's flags nor the Forward kernel's hold a
:data:`~hmmgpu.stages.forward.HOST` flag: Backward divides by Forward's scale factors.

Why the code looks as it does
-----------------------------
The Forward kernel's thread mapping (:mod:`.source`): a group of four threads per target,
thread z its SSE lane z, each thread's row (3 Q floats: its lane's M, D and I) in shared
memory or in a global scratch array, one kernel for every model (Q per model), targets
claimed from an atomic counter in the launch's order. The lanes meet where HMMER's vectors
cross them: the left shifts (a warp shuffle from lane z+1, 0 into lane 3), the horizontal
sums of B (the four lane sums gathered by every thread), and the transitions read across
lanes (``lsh`` of vector 0's MM, IM, DM, which the thread reads from the table at lane
z+1). The special states are computed by all four threads alike; lane 0 writes the rows,
and the flags of the four lanes are OR-ed at the end. Residues are read from the packed
words one at a time, backwards (a few loads per row of Q cells).

That group of four is the kernel of rows in global memory and the full-matrix kernel's
(:mod:`.matrix_source`). Where the rows fit in shared memory the parser runs the *segmented*
kernel (:func:`segmented_body`), for the Forward kernel's reason (:mod:`.source`, "The segmented
kernel": a target's latency, not arithmetic, set the time): a warp a target, two row buffers
(``nxt``: row i+1, ``cur``: row i). Every cell that reads only row i+1 (the main pass: I, the
M->D part of D, the M and I part of M) or the final D (the M->D pass) or E (the M->E paths) is
computed at once by the thread of its vector; segment 0's four threads run what is a chain
along q: the first D->D pass with its D->E paths, the three carry passes and the lanes' sums of
B. The lanes meet through the group's exchange area in shared memory (each pass's carries out,
shifted left as HMMER's ``lsh``; the lanes' sums), read after a ``syncwarp``; a value another
lane's chain will overwrite (its D[0], its D[Q-1]) is read before the ``syncwarp`` that lets
that chain start. Each lane's own D[0] + E, which HMMER computes before the shift discards it,
is still computed for its check. The operations and their order are the group of four's, so
the rows are the same bits: `forward_batches.py --backward` gave one digest for both kernels
over 36,000 targets of 600 Pfam models (both parsers' rows, Backward's flags, own-scales choice,
totscale and score), the rounds taking 1.54 s against 2.05 s on one H200.
"""
from __future__ import annotations

from dataclasses import dataclass

from hmmgpu.stages.forward import OWN_SCALES_AT
from hmmgpu.gpu.runtime.emit import Emitter, kernel_module
from hmmgpu.gpu.runtime.kargs import Arg
from hmmgpu.gpu.fwdback.source import (SCRATCH_PER_Q, chain_loop, claim_target, from_lane, group_head, indented,
                                       module_lines, or_flags, segmented_head, segmented_target,
                                       store_specials, tiny_test)

#: Parameters of the Backward parser kernel, in order: the Forward kernel's target list and
#: model tables (:data:`hmmgpu.gpu.fwdback.source.ARGS`), the Forward rows of each item
#: (``fwd_rows``, at ``row_base[k]``, where this kernel writes its own rows in ``out_rows``).
ARGS = (
    Arg("residues", "uint32[:]"), Arg("word_offsets", "int64[:]"), Arg("lengths", "int32[:]"),
    Arg("items", "int32[:]"), Arg("item_model", "int32[:]"), Arg("n_items", "int32"), Arg("counters", "int32[:]"),
    Arg("rfv", "float32[:]"), Arg("tfv", "float32[:]"), Arg("model_q", "int32[:]"),
    Arg("model_rfv", "int64[:]"), Arg("model_tfv", "int64[:]"), Arg("model_f", "float32[:]"),
    Arg("pmove_by_length", "float32[:]"), Arg("ploop_by_length", "float32[:]"),
    Arg("scratch", "float32[:]"), Arg("n_threads", "int32"),
    Arg("row_base", "int64[:]"), Arg("fwd_rows", "float32[:]"),
    Arg("out_flags", "int32[:]"), Arg("out_own", "int32[:]"), Arg("out_rows", "float32[:]"),
)

# tfv offsets, in floats, of the transitions of vector q (relative to 28 q): 7 vectors of 4 lanes
_BM, _MM, _IM, _DM, _MD, _MI, _II = (4 * t for t in range(7))


def _lsh(e: Emitter, v: str) -> None:
    """Shift ``v`` left by one lane across the group, 0 into lane 3 (``lsh``: HMMER's
    ``_mm_move_ss`` and shuffle)."""
    e(f"shifted = cuda.shfl_sync(gmask, {v}, lane + 1 if z < 3 else lane)", f"{v} = shifted if z < 3 else F0")


def _checked_add(e: Emitter, out: str, a: str, b: str) -> None:
    """``out = a + b`` (names of values, ``out`` a fresh name), with the CPU reference's
    ``checked_add``: a tiny summand that changed the sum raises SUBNORMAL (under FTZ it is 0)."""
    e(*_checked_add_lines(out, a, b))


def _checked_add_lines(out: str, a: str, b: str) -> tuple:
    """:func:`_checked_add`'s lines, for a caller that places them itself."""
    return (f"{out} = fadd({a}, {b})",
            f"bad = bad | ({tiny_test(a)} & ({out} != {b})) | ({tiny_test(b)} & ({out} != {a}))")


def _descending(e: Emitter):
    """``for q = Q-1 .. 0`` (the block's body follows)."""
    return e.block("for q in range(QQ - 1, -1, -1):")


def _residue(e: Emitter, j: str) -> None:
    """``eb``: where residue ``j`` (0-based: HMMER's ``dsq[j + 1]``) has its emission row in ``rfv``."""
    e(f"w = residues[wb + ({j} >> 2)]", f"x = int32((w >> u32(8 * ({j} & 3))) & u32(255))",
      "eb = rb0 + np.int64(x) * QQ * 4")


def bwd_last_row(e: Emitter) -> None:
    """Row L before its carry passes (spec 4.1): M = D = E, I = 0, the first D->D pass from
    ``lsh(D[Q-1])``; ``dcv`` ends holding its last carry."""
    e("# bwd_last_row", "xJ = F0", "xB = F0", "xN = F0", "xC = pmove", "xE = fmul(xC, xe_move)")
    with e.block("for q in range(QQ):"):
        e("a = q * T + slot", "row[a] = xE", "row[D0 + a] = xE", "row[I0 + a] = F0")
    e("dpv = row[D0 + (QQ - 1) * T + slot]")
    _lsh(e, "dpv")
    with _descending(e):
        e("a = D0 + q * T + slot", "dcv = fmul(dpv, tfv[DD + q * 4 + z])", "d = row[a]")
        _checked_add(e, "s", "d", "dcv")
        e("row[a] = s", "dpv = s")


def bwd_main_pass(e: Emitter) -> None:
    """Phase 1 of a row i < L (spec 4.2), q = Q-1..0: I complete, D = the M->D part, M = the M
    and I part; ``xBv`` the lane's sum of B->M. The transitions into node k+1 start as
    ``lsh`` of vector 0's (read at lane z+1) and are the previous q's after."""
    e("# bwd_main_pass", "tmmv = F0", "timv = F0", "tdmv = F0")
    with e.block("if z < 3:"):
        e(f"tmmv = tfv[tb + {_MM} + z + 1]", f"timv = tfv[tb + {_IM} + z + 1]", f"tdmv = tfv[tb + {_DM} + z + 1]")
    e("mpv = fmul(row[slot], rfv[eb + z])")
    _lsh(e, "mpv")
    e("xBv = F0")
    with _descending(e):
        e("a = q * T + slot", "t = tb + q * 28 + z", "ipv = row[I0 + a]",
          f"p1 = fmul(ipv, tfv[t + {_II}])", "p2 = fmul(mpv, timv)")
        _checked_add(e, "iv", "p1", "p2")
        e("row[I0 + a] = iv", "row[D0 + a] = fmul(mpv, tdmv)",
          f"p3 = fmul(ipv, tfv[t + {_MI}])", "p4 = fmul(mpv, tmmv)")
        _checked_add(e, "mcv", "p3", "p4")
        e("mpv = fmul(row[a], rfv[eb + q * 4 + z])", "row[a] = mcv",
          f"tdmv = tfv[t + {_DM}]", f"timv = tfv[t + {_IM}]", f"tmmv = tfv[t + {_MM}]",
          f"p5 = fmul(mpv, tfv[t + {_BM}])")
        _checked_add(e, "sb", "xBv", "p5")
        e("xBv = sb", f"bad = bad | {tiny_test('iv')}")


def _sum_b(e: Emitter) -> None:
    """xB: the horizontal sum of the four lanes' ``xBv``, ``(l0 + l1) + (l2 + l3)``, checked."""
    for k in range(4):
        from_lane(e, f"l{k}", "xBv", str(k))
    _sum_b_of_lanes(e)


def _sum_b_of_lanes(e: Emitter) -> None:
    """xB from the four lanes' sums ``l0``..``l3``: ``(l0 + l1) + (l2 + l3)``, checked."""
    _checked_add(e, "s01", "l0", "l1")
    _checked_add(e, "s23", "l2", "l3")
    _checked_add(e, "xB", "s01", "s23")


def bwd_specials(e: Emitter) -> None:
    """Phase 2 (spec 4.2): B, then C, J, N, E in HMMER's order. C decays (its product is not
    checked: a tiny C is allowed where its E term does not change E)."""
    e("# bwd_specials")
    _sum_b(e)
    _bwd_specials_after_b(e)


def _bwd_specials_after_b(e: Emitter) -> None:
    """C, J, N, E from B (:func:`bwd_specials`)."""
    e("xC = fmul(xC, ploop)", "pb = fmul(xB, pmove)", "pj = fmul(xJ, ploop)")
    _checked_add(e, "xJ", "pb", "pj")
    e("pn = fmul(xN, ploop)")
    _checked_add(e, "xN", "pb", "pn")
    e("pce = fmul(xC, xe_move)", "pje = fmul(xJ, xe_loop)")
    _checked_add(e, "xE", "pce", "pje")
    e("bad = bad | " + " | ".join(tiny_test(v) for v in ("xB", "xJ", "xN", "xE")))


def bwd_dd_first_pass(e: Emitter) -> None:
    """Phase 3 (spec 4.2): the {M,D}->E paths and the first D->D pass from ``lsh(D[0] + E)``."""
    e("# bwd_dd_first_pass", "d = row[D0 + slot]")
    _checked_add(e, "dpv", "d", "xE")
    _lsh(e, "dpv")
    with _descending(e):
        e("a = q * T + slot", "dcv = fmul(dpv, tfv[DD + q * 4 + z])")
        _checked_add(e, "de", "dcv", "xE")
        e("d = row[D0 + a]")
        _checked_add(e, "s", "d", "de")
        e("row[D0 + a] = s", "dpv = s", "mm = row[a]")
        _checked_add(e, "me", "mm", "xE")
        e("row[a] = me")


def bwd_dd_carry_passes(e: Emitter) -> None:
    """Phase 4 (spec 4.1, 4.2): three carry passes, q = Q-1..0, each from the left-shifted
    carry, no early exit: ``dcv = dcv tDD``, ``D += dcv``."""
    e("# bwd_dd_carry_passes")
    with e.block("for jpass in range(3):"):
        _lsh(e, "dcv")
        with _descending(e):
            e("a = D0 + q * T + slot", "dcv = fmul(dcv, tfv[DD + q * 4 + z])", "d = row[a]")
            _checked_add(e, "s", "d", "dcv")
            e("row[a] = s")


def bwd_md_pass(e: Emitter) -> None:
    """Phase 5 (spec 4.1, 4.2): M += ``lsh(D)[q] tMD``, q = Q-1..0; M and D are then final,
    and neither may be tiny."""
    e("# bwd_md_pass", "dcv = row[D0 + slot]")
    _lsh(e, "dcv")
    with _descending(e):
        e("a = q * T + slot", f"pm = fmul(dcv, tfv[tb + q * 28 + {_MD} + z])", "mm = row[a]")
        _checked_add(e, "s", "mm", "pm")
        e("row[a] = s", "dcv = row[D0 + a]", f"bad = bad | {tiny_test('s')} | {tiny_test('dcv')}")


def row_scale(e: Emitter) -> None:
    """Row i's scale factor ``scale`` (spec 4.3): Forward's, or once B has passed 1e16 (in
    double, as HMMER compares) the row's own B where it is above 1e4 (``own``, sticky)."""
    with e.block("if np.float64(xB) > OWN_SCALES_AT:"):
        e("own = True")
    with e.block("if own:"):
        e("scale = xB if xB > RESCALE_AT else F1")
    with e.block("else:"):
        e("scale = fwd_rows[rb + 6 * i + 5]")


def bwd_rescale_row(e: Emitter, i: str) -> None:
    """The row's scale factor ``scale`` (set before) applied when above 1 (spec 4.3), then row
    ``i``'s specials stored (TINY_ROWS where one is subnormal)."""
    e("# bwd_rescale_row")

    def cells():
        with e.block(f"for c in range({SCRATCH_PER_Q} * QQ):"):
            e("a = c * T + slot", "v = fmul(row[a], rcp)", "row[a] = v", f"bad = bad | {tiny_test('v')}")
    _rescaled(e, i, cells, "z == 0")


def _rescaled(e: Emitter, i: str, cells, leader: str) -> None:
    """Where ``scale`` is above 1 the specials divided by it and the row's cells (``cells()``
    emits their loop) multiplied by its reciprocal; TINY_ROWS where a special is subnormal; row
    ``i``'s specials stored by the group's ``leader``."""
    with e.block("if scale > F1:"):
        e("xE = fdiv(xE, scale)", "xN = fdiv(xN, scale)", "xJ = fdiv(xJ, scale)", "xB = fdiv(xB, scale)",
          "xC = fdiv(xC, scale)", "rcp = fdiv(F1, scale)",
          "bad = bad | " + " | ".join(tiny_test(v) for v in ("xE", "xN", "xJ", "xB", "rcp")))
        cells()
    with e.block("if " + " | ".join(tiny_test(v) for v in ("xE", "xN", "xJ", "xB", "xC")) + ":"):
        e("flags |= TINY_ROWS")
    with e.block(f"if {leader}:"):
        store_specials(e, i, "scale")


def bwd_first_row(e: Emitter) -> None:
    """Row 0 (spec 4.4): B the lane sums over q = 0..Q-1 of ``(M[q] e[q]) tBM[q]`` (residue 1),
    then N; the row (E 0, N, J 0, B, C 0, SCALE 1) stored."""
    e("# bwd_first_row")
    _residue(e, "0")
    e("xBv = F0")
    with e.block("for q in range(QQ):"):
        e("mp = fmul(row[q * T + slot], rfv[eb + q * 4 + z])", f"p5 = fmul(mp, tfv[tb + q * 28 + {_BM} + z])")
        _checked_add(e, "sb", "xBv", "p5")
        e("xBv = sb")
    _sum_b(e)
    _first_row_specials(e, "z == 0")


def _first_row_specials(e: Emitter, leader: str) -> None:
    """Row 0's N from its B, its flags, and its specials stored by the group's ``leader``."""
    e("pb = fmul(xB, pmove)", "pn = fmul(xN, ploop)")
    _checked_add(e, "xN", "pb", "pn")
    e(f"bad = bad | {tiny_test('xB')} | {tiny_test('xN')}", "xE = F0", "xJ = F0", "xC = F0")
    with e.block(f"if {tiny_test('xN')} | {tiny_test('xB')}:"):
        e("flags |= TINY_ROWS")
    with e.block(f"if {leader}:"):
        store_specials(e, "0", "F1")
    with e.block("if math.isnan(xN) or xN == F0 or math.isinf(xN):"):
        e("flags |= RANGE")


def backward_rows(e: Emitter, after_row=None) -> None:
    """Rows L down to 0 of the Backward recursion on the target's packed residues (from word
    ``wb``), with Forward's scale factors read from its special rows at ``fwd_rows[rb:]`` (own
    scale factors after a B above 1e16: ``own``); after each row i = L..1 is rescaled and its
    specials stored, ``after_row(e, i)`` (e.g. a full matrix's store of the row's cells). The
    parser and the full-matrix kernel (:mod:`.matrix_source`) both run it; ``flags``, ``bad``
    and ``own`` are set before."""
    bwd_last_row(e)
    bwd_dd_carry_passes(e)
    bwd_md_pass(e)
    e("scale = fwd_rows[rb + 6 * L + 5]")
    bwd_rescale_row(e, "L")
    if after_row is not None:
        after_row(e, "L")
    with e.block("for i in range(L - 1, 0, -1):"):
        _residue(e, "i")
        bwd_main_pass(e)
        bwd_specials(e)
        bwd_dd_first_pass(e)
        bwd_dd_carry_passes(e)
        bwd_md_pass(e)
        row_scale(e)
        bwd_rescale_row(e, "i")
        if after_row is not None:
            after_row(e, "i")
    bwd_first_row(e)
    with e.block("if bad:"):
        e("flags |= SUBNORMAL")
    or_flags(e)


def kernel_body(spec: "BwdSpec") -> str:
    """The kernel's body (the lines under its ``def``)."""
    e = Emitter()
    group_head(e)
    with e.block("while True:"):
        claim_target(e)
        e("rb = row_base[k]", "flags = int32(0)", "bad = False", "own = False")
        backward_rows(e)
        with e.block("if z == 0:"):
            e("out_flags[k] = flags", "out_own[k] = int32(own)")
    return indented(e)


# ---------------------------------------------------------------- the segmented parser (rows in shared memory)

def _cell(buf: str, region: str, q: str, lane: str = "z") -> str:
    """The shared-memory address of ``lane``'s cell at vector ``q`` of ``region`` (M, I, D) of
    the row buffer ``buf``."""
    return f"{buf} + {dict(M=0, I=4, D=8)[region]} * QQ + ({q}) * 4 + {lane}"


def seg_bwd_last_row(e: Emitter, S: int) -> None:
    """Row L into ``cur`` (:func:`bwd_last_row`): M = D = E and I = 0 by every thread, then the
    first D->D pass from ``lsh(D[Q-1])`` by segment 0, its carry out to the exchange area."""
    e("# seg_bwd_last_row", "xJ = F0", "xB = F0", "xN = F0", "xC = pmove", "xE = fmul(xC, xe_move)")
    with e.block(f"for q in range(seg, QQ, {S}):"):
        e(f"row[{_cell('cur', 'M', 'q')}] = xE", f"row[{_cell('cur', 'D', 'q')}] = xE", f"row[{_cell('cur', 'I', 'q')}] = F0")
    e("cuda.syncwarp(gmask)")
    with e.block("if seg == 0:"):
        e(f"dpv = row[{_cell('cur', 'D', 'QQ - 1', 'z + 1')}] if z < 3 else F0")
    e("cuda.syncwarp(gmask)  # read before lane z+1's chain writes it")
    with e.block("if seg == 0:"):
        chain_loop(e, lambda k, q: (f"u{k} = tfv[DD + ({q}) * 4 + z]", f"d{k} = row[{_cell('cur', 'D', q)}]"),
                   lambda k: (f"dcv = fmul(dpv, u{k})",) + _checked_add_lines(f"s{k}", f"d{k}", "dcv") + (f"dpv = s{k}",),
                   lambda k, q: (f"row[{_cell('cur', 'D', q)}] = s{k}",), descending=True)
        e("row[xa + z] = dcv  # the pass's carry out")
    e("cuda.syncwarp(gmask)")


def seg_bwd_main_pass(e: Emitter, S: int) -> None:
    """Phase 1 of row i < L (:func:`bwd_main_pass`) from row i+1 (``nxt``) into ``cur``: every
    cell of the vectors q = seg, seg + S, ... at once (the values of vector q+1 that HMMER's
    loop carries, for q = Q-1 vector 0's at lane z+1, read from the row); then segment 0's lane
    sums of B->M, q = Q-1..0, to the exchange area."""
    e("# seg_bwd_main_pass")
    with e.block(f"for q in range(seg, QQ, {S}):"):
        e("t = tb + q * 28 + z")
        with e.block("if q < QQ - 1:"):
            e("t1 = t + 28", f"n1 = {_cell('nxt', 'M', 'q + 1')}", "e1 = eb + (q + 1) * 4 + z")
        with e.block("else:"):
            e("t1 = tb + z + 1", f"n1 = {_cell('nxt', 'M', '0', 'z + 1')}", "e1 = eb + z + 1")
        e("inside = q < QQ - 1 or z < 3",
          "mpv = fmul(row[n1], rfv[e1]) if inside else F0",
          f"tmmv = tfv[t1 + {_MM}] if inside else F0", f"timv = tfv[t1 + {_IM}] if inside else F0",
          f"tdmv = tfv[t1 + {_DM}] if inside else F0",
          f"ipv = row[{_cell('nxt', 'I', 'q')}]",
          f"p1 = fmul(ipv, tfv[t + {_II}])", "p2 = fmul(mpv, timv)", *_checked_add_lines("iv", "p1", "p2"),
          f"row[{_cell('cur', 'I', 'q')}] = iv", f"row[{_cell('cur', 'D', 'q')}] = fmul(mpv, tdmv)",
          f"p3 = fmul(ipv, tfv[t + {_MI}])", "p4 = fmul(mpv, tmmv)", *_checked_add_lines("mcv", "p3", "p4"),
          f"row[{_cell('cur', 'M', 'q')}] = mcv", f"bad = bad | {tiny_test('iv')}")
    with e.block("if seg == 0:"):
        e("xBv = F0")
        chain_loop(e, lambda k, q: (f"mq{k} = fmul(row[{_cell('nxt', 'M', q)}], rfv[eb + ({q}) * 4 + z])",
                                    f"bq{k} = fmul(mq{k}, tfv[tb + ({q}) * 28 + {_BM} + z])"),
                   lambda k: _checked_add_lines("sb", "xBv", f"bq{k}") + ("xBv = sb",), descending=True)
        e("row[xa + 8 + z] = xBv")
    e("cuda.syncwarp(gmask)")
    for k in range(4):
        e(f"l{k} = row[xa + {8 + k}]")


def seg_bwd_dd_first_pass(e: Emitter, S: int) -> None:
    """Phase 3 (:func:`bwd_dd_first_pass`): every M cell plus E by every thread; the first D->D
    pass, with the D->E paths, by segment 0 from ``lsh(D[0] + E)`` (each lane's own D[0] + E
    checked too, as HMMER computes it before the shift), its carry out to the exchange area."""
    e("# seg_bwd_dd_first_pass")
    with e.block(f"for q in range(seg, QQ, {S}):"):
        e(f"c = {_cell('cur', 'M', 'q')}", "mm = row[c]", *_checked_add_lines("me", "mm", "xE"), "row[c] = me")
    with e.block("if seg == 0:"):
        e(f"d = row[{_cell('cur', 'D', '0')}]", *_checked_add_lines("own_dpv", "d", "xE"), "dpv = F0")
        with e.block("if z < 3:"):
            e(f"d = row[{_cell('cur', 'D', '0', 'z + 1')}]", *_checked_add_lines("dpv", "d", "xE"))
    e("cuda.syncwarp(gmask)  # D[0] read before lane z+1's chain writes it")
    with e.block("if seg == 0:"):
        chain_loop(e, lambda k, q: (f"u{k} = tfv[DD + ({q}) * 4 + z]", f"d{k} = row[{_cell('cur', 'D', q)}]"),
                   lambda k: ("dcv = fmul(dpv, u{k})".format(k=k),) + _checked_add_lines("de", "dcv", "xE")
                   + _checked_add_lines(f"s{k}", f"d{k}", "de") + (f"dpv = s{k}",),
                   lambda k, q: (f"row[{_cell('cur', 'D', q)}] = s{k}",), descending=True)
        e("row[xa + z] = dcv  # the pass's carry out")
    e("cuda.syncwarp(gmask)")


def seg_bwd_dd_carry_passes(e: Emitter) -> None:
    """Phase 4 (:func:`bwd_dd_carry_passes`): three passes by segment 0, each from the carries
    out of the pass before, shifted left through the exchange area."""
    e("# seg_bwd_dd_carry_passes")
    with e.block("for jpass in range(3):"):
        with e.block("if seg == 0:"):
            e("shifted = row[xa + z + 1] if z < 3 else F0  # lane z+1's carry out of the pass before")
        e("cuda.syncwarp(gmask)")
        with e.block("if seg == 0:"):
            e("dcv = shifted")
            chain_loop(e, lambda k, q: (f"u{k} = tfv[DD + ({q}) * 4 + z]", f"d{k} = row[{_cell('cur', 'D', q)}]"),
                       lambda k: (f"dcv = fmul(dcv, u{k})",) + _checked_add_lines(f"s{k}", f"d{k}", "dcv"),
                       lambda k, q: (f"row[{_cell('cur', 'D', q)}] = s{k}",), descending=True)
            e("row[xa + z] = dcv")
        e("cuda.syncwarp(gmask)")


def seg_bwd_md_pass(e: Emitter, S: int) -> None:
    """Phase 5 (:func:`bwd_md_pass`): M += ``lsh(D)[q] tMD`` for every cell at once (D is final);
    neither M nor D may be tiny."""
    e("# seg_bwd_md_pass")
    with e.block(f"for q in range(seg, QQ, {S}):"):
        with e.block("if q < QQ - 1:"):
            e(f"dcv = row[{_cell('cur', 'D', 'q + 1')}]")
        with e.block("else:"):
            e(f"dcv = row[{_cell('cur', 'D', '0', 'z + 1')}] if z < 3 else F0")
        e(f"pm = fmul(dcv, tfv[tb + q * 28 + {_MD} + z])", f"c = {_cell('cur', 'M', 'q')}", "mm = row[c]",
          *_checked_add_lines("s", "mm", "pm"), "row[c] = s", f"dq = row[{_cell('cur', 'D', 'q')}]",
          f"bad = bad | {tiny_test('s')} | {tiny_test('dq')}")
    e("cuda.syncwarp(gmask)")


def seg_bwd_rescale_row(e: Emitter, S: int, i: str) -> None:
    """:func:`bwd_rescale_row` with the row's cells shared among the group's threads; the group's
    first thread stores the specials."""
    e("# seg_bwd_rescale_row")

    def cells():
        with e.block(f"for c in range(g, 12 * QQ, {4 * S}):"):
            e("v = fmul(row[cur + c], rcp)", "row[cur + c] = v", f"bad = bad | {tiny_test('v')}")
        e("cuda.syncwarp(gmask)")
    _rescaled(e, i, cells, "g == 0")


def seg_bwd_first_row(e: Emitter) -> None:
    """Row 0 (:func:`bwd_first_row`) from row 1 (``nxt``): segment 0's lane sums of B over
    q = 0..Q-1, then N; the row stored by the group's first thread."""
    e("# seg_bwd_first_row")
    _residue(e, "0")
    with e.block("if seg == 0:"):
        e("xBv = F0")
        chain_loop(e, lambda k, q: (f"mq{k} = fmul(row[{_cell('nxt', 'M', q)}], rfv[eb + ({q}) * 4 + z])",
                                    f"bq{k} = fmul(mq{k}, tfv[tb + ({q}) * 28 + {_BM} + z])"),
                   lambda k: _checked_add_lines("sb", "xBv", f"bq{k}") + ("xBv = sb",))
        e("row[xa + 8 + z] = xBv")
    e("cuda.syncwarp(gmask)")
    for k in range(4):
        e(f"l{k} = row[xa + {8 + k}]")
    _sum_b_of_lanes(e)
    _first_row_specials(e, "g == 0")


def seg_backward_rows(e: Emitter, S: int, after_row=None) -> None:
    """Rows L down to 0 of the segmented Backward recursion (:func:`backward_rows` with a group of
    ``4 S`` threads sharing each row in the buffers ``cur`` and ``nxt``); after each row i = L..1
    is rescaled and its specials stored, ``after_row(e, i)`` (the row in ``cur``: a full
    matrix's store of its cells). The segmented parser and full-matrix kernel
    (:mod:`.matrix_source`) both run it; ``flags``, ``bad``, ``own`` and the chains' values are
    set before."""
    seg_bwd_last_row(e, S)
    seg_bwd_dd_carry_passes(e)
    seg_bwd_md_pass(e, S)
    e("scale = fwd_rows[rb + 6 * L + 5]")
    seg_bwd_rescale_row(e, S, "L")
    if after_row is not None:
        after_row(e, "L")
    e("nxt, cur = cur, nxt")
    with e.block("for i in range(L - 1, 0, -1):"):
        _residue(e, "i")
        seg_bwd_main_pass(e, S)
        _sum_b_of_lanes(e)
        _bwd_specials_after_b(e)
        seg_bwd_dd_first_pass(e, S)
        seg_bwd_dd_carry_passes(e)
        seg_bwd_md_pass(e, S)
        row_scale(e)
        seg_bwd_rescale_row(e, S, "i")
        if after_row is not None:
            after_row(e, "i")
        e("nxt, cur = cur, nxt")
    seg_bwd_first_row(e)
    with e.block("if bad:"):
        e("flags |= SUBNORMAL")
    or_flags(e, S)


def segmented_body(S: int) -> str:
    """The segmented Backward parser kernel's body (:mod:`.source`, "The segmented kernel"): a
    group of 4 S threads a target, the rows L down to 0 in two shared row buffers (``cur``: row
    i, ``nxt``: row i+1), every cell that reads only row i+1 or the final D at once, the chains
    along q (the D->D passes, the lane sums of B) by segment 0."""
    e = Emitter()
    segmented_head(e, S)
    with e.block("while True:"):
        segmented_target(e)
        e("cur = first", "nxt = second", "rb = row_base[k]", "flags = int32(0)", "bad = False", "own = False",
          "dcv = F0", "dpv = F0", "shifted = F0", "xBv = F0")
        seg_backward_rows(e, S)
        with e.block("if g == 0:"):
            e("out_flags[k] = flags", "out_own[k] = int32(own)")
    return indented(e)


#: Parameters of the segmented Backward kernel: the parser's, and the floats of shared memory a
#: group takes (:func:`hmmgpu.gpu.fwdback.launch.segmented_launch`).
SEGMENTED_ARGS = ARGS + (Arg("group_floats", "int64"),)


@dataclass(frozen=True)
class BwdSpec:
    """The Backward parser kernel: with its rows in shared memory (``storage="shared"``) the
    segmented kernel, a group of ``4 segments`` threads a target (:func:`segmented_body`); with
    them in a global scratch array (``"global"``) a group of four threads a target, a thread per
    SSE lane (:func:`kernel_body`), as the Forward kernel's
    (:class:`hmmgpu.gpu.fwdback.source.FwdSpec`)."""

    storage: str = "shared"
    segments: int = 8

    @property
    def name(self) -> str:
        if self.storage == "shared":
            return f"fwdback_backward_parser_v2_shared_s{self.segments}"
        return f"fwdback_backward_parser_v1_{self.storage}"

    @property
    def args(self) -> tuple:
        return SEGMENTED_ARGS if self.storage == "shared" else ARGS

    def source(self, binding: str) -> str:
        body = segmented_body(self.segments) if self.storage == "shared" else kernel_body(self)
        return kernel_module("Backward parser kernel (HMMER's p7_BackwardParser).", binding, self.args, body,
                             *module_lines(binding), f"OWN_SCALES_AT = {OWN_SCALES_AT!r}")
