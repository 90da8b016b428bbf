"""The Forward parser kernel: what it computes, why it is exact, why the code looks as it does.

What is computed
----------------
HMMER's ``p7_ForwardParser`` (``fwdback.c: forward_engine`` with ``do_full = 0``, the SSE
implementation of HMMER 3.4), which ``p7_Pipeline`` runs on every target that passed the
Viterbi filter and whose score is the F3 gate. For each target of a work list, four threads
run the scaled Forward recursion of the multihit local profile in float32 probability
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
each lane in its own thread, which is equivalent: within one q step the lanes do not read
each other), and uses HMMER's own tables ``om->rfv``, ``om->tfv``
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
A group of four threads runs a target, thread z its SSE lane z: within one q step the four
lanes never read each other, so each thread runs its lane's recursion exactly as HMMER's
vector does, and the lanes meet only where HMMER's code crosses them: the right shift of
row i-1's last vector at the row's start and of the D->D carry before each pass (a warp
shuffle from lane z-1, 0 into lane 0), the early exit of the carry passes (a vote of the
four lanes, as ``_mm_movemask_ps`` of the OR of their compares), and xE's horizontal sum
(the four lane sums gathered, added in HMMER's order ``(l0 + l1) + (l2 + l3)``). The special
states are computed by all four threads alike; lane 0 writes the outputs, and the flags of
the four lanes are OR-ed at the end. A first version ran a target in one thread emulating
the four lanes one after the other: the same arithmetic, but four times the latency per
target, and on 600 Pfam models the longest targets of each batch set its length (kernel
time 15.8 s against 3.1 s for this one on one H200, measured with the same batches).

Each thread's row is a single buffer updated in place, as the parser's own (every read of
row i-1 at q precedes the store of row i at q): 3 Q floats (its lane's M, D and I), in
shared memory when a warp's rows fit there (``storage="shared"``: models of up to about
590 vectors), else in a global scratch array, interleaved by thread (cell c of thread t at
``c * T + t``), so that the threads of a warp touch consecutive words. ``Q`` and ``M`` are
per model, not compile-time shapes: one kernel serves every model, and one launch takes the
targets of many models (:mod:`.launch`). Groups take targets from an atomic counter, costliest
first; each group runs as many targets as it claims.

The segmented kernel
--------------------
The group of four threads above is the kernel of targets whose rows live in global memory, and
its row functions are those of the full-matrix and Backward kernels (:mod:`.matrix_source`,
:mod:`.backward_source`). Where the rows fit in shared memory (every Pfam model) the parser runs
the *segmented* kernel (:func:`segmented_body`), for a reason Nsight Compute showed on one H200
(600 Pfam models' batches of 17 models x 240 targets, `forward_batches.py`): a group of four
threads ran a target at about 400 cycles a vector of a row, a warp's eight targets' rows took so
much shared memory that a multiprocessor held 3 warps (5 at most: one warp per scheduler, an
instruction every 4.9 cycles), and since every group took one target the launch lasted as long
as its longest target while most multiprocessors idled (the SMs active 11% of the kernel's
time). So the cost was latency, not arithmetic, and a target's latency is what to cut.

In a row only a few steps are chains along q: xE's sum of the M cells, the D->D passes, xE's
sum of the D cells (a float sum or a carry each, in HMMER's order). Everything else, each cell's
M and I and its M->D term, reads only row i-1. The segmented kernel therefore runs a target on a
group of ``4 S`` threads (``S`` = :data:`~hmmgpu.gpu.runtime.tuning.FWD_SEGMENTS`; 8: a warp a
target): thread (seg, z) computes lane z's cells of the vectors q = seg, seg + S, ... of the
main pass, all at once, into the group's row buffer for row i while row i-1 stays in the other
(two buffers of ``12 Q + 4`` floats: M, I, D, and the four lanes' carries out of the main pass),
and then segment 0's four threads run the lanes' chains on the shared row, meeting through an
exchange area of the group's shared memory (each pass's carries, the carry passes' vote, the
lanes' sums) that every thread reads after a ``syncwarp``, so that the whole group takes the
same branches (and meets the same warp intrinsics, which numba's simulator needs; the other
threads wait there, which costs the warp nothing: its instructions are the same whether 4 of
its threads run a chain or 32).

The arithmetic is the same operations on the same values in the same order as the group of
four's, so the results are the same bits (the digest of `forward_batches.py` over 144,000
targets is the group of four's). A target takes 24 Q + 20 floats of shared memory, twice the
group of four's 12 Q, but a warp holds one target where it held eight, so a multiprocessor
holds several times as many warps. The chains are emitted in blocks of
:data:`CHAIN_UNROLL` steps, the block's loads first, so that a chain waits for memory once a
block. On one H200 the batches' rounds took 2.21 s with the group of four, 1.67, 1.21 and 1.08 s
with 2, 4 and 8 segments, 0.87 s with the chains in blocks and 0.75-0.78 s with segment 0 alone
on them (docs/performance.md, "Forward parser").
"""
from __future__ import annotations

from dataclasses import dataclass

from hmmgpu.stages.forward import ABSORB, DD_EARLY_EXIT_M, FLT_MIN, RANGE, RESCALE_AT, SUBNORMAL, TINY_ROWS
from hmmgpu.gpu.runtime.emit import Emitter, kernel_module
from hmmgpu.gpu.runtime.kargs import Arg

#: Parameters of the Forward parser kernel, in order. A launch holds the targets of several
#: models: item k is target ``items[k]`` against model ``item_model[k]``, whose striped tables
#: start at ``model_rfv[m]`` and ``model_tfv[m]`` of the concatenated ``rfv`` and ``tfv``, with
#: ``model_q[m]`` vectors, ``model_m[m]`` nodes and the scalars ``model_f[3m:3m+3]`` (xE's move
#: and loop transitions, the smallest B->M transition).
ARGS = (
    Arg("residues", "uint32[:]"), Arg("word_offsets", "int64[:]"), Arg("lengths", "int32[:]"),
    Arg("items", "int32[:]"), Arg("item_model", "int32[:]"), Arg("n_items", "int32"), Arg("counters", "int32[:]"),
    Arg("rfv", "float32[:]"), Arg("tfv", "float32[:]"), Arg("model_q", "int32[:]"), Arg("model_m", "int32[:]"),
    Arg("model_rfv", "int64[:]"), Arg("model_tfv", "int64[:]"), Arg("model_f", "float32[:]"),
    Arg("pmove_by_length", "float32[:]"), Arg("ploop_by_length", "float32[:]"),
    Arg("scratch", "float32[:]"), Arg("n_threads", "int32"),
    Arg("out_flags", "int32[:]"), Arg("out_xc", "float32[:]"), Arg("out_nscale", "int32[:]"),
    Arg("scale_base", "int64[:]"), Arg("out_scales", "float32[:]"),
    Arg("want_rows", "int32"), Arg("row_base", "int64[:]"), Arg("out_rows", "float32[:]"),
)
#: Floats of scratch per thread per vector of the model: M, D and I of the thread's lane.
SCRATCH_PER_Q = 3
LANES = range(4)

# tfv offsets, in floats, of the transitions of vector q (relative to 28 q): 7 vectors of 4 lanes
_BM, _MM, _IM, _DM, _MD, _MI, _II = (4 * t for t in range(7))


def tiny_test(v: str) -> str:
    """The test of a result that flush-to-zero may flush (values here are never negative)."""
    return f"((({v}) > F0) & (({v}) <= FMIN))"


def from_lane(e: Emitter, out: str, v: str, src: str) -> None:
    """``out`` = the value ``v`` of the group's lane ``src`` (a warp shuffle among its four threads)."""
    e(f"{out} = cuda.shfl_sync(gmask, {v}, base + {src})")


def _rsh(e: Emitter, v: str) -> None:
    """Shift ``v`` right by one lane across the group, 0 into lane 0 (``esl_sse_rightshift_ps``)."""
    e(f"shifted = cuda.shfl_sync(gmask, {v}, lane - 1 if z > 0 else lane)", f"{v} = shifted if z > 0 else F0")


def main_pass(e: Emitter) -> None:
    """M, the delayed D store, the M->D carry and I over q = 0..Q-1 (spec 2.1), for this lane."""
    e("# main_pass: row i-1's last vector shifted right by a lane starts the recursion",
      "a = (QQ - 1) * T + slot")
    for v, at in (("mpv", "a"), ("dpv", "D0 + a"), ("ipv", "I0 + a")):
        e(f"last = row[{at}]")
        _rsh(e, "last")
        e(f"{v} = last")
    e("dcv = F0", "xEv = F0", "bad = False")
    with e.block("for q in range(QQ):"):
        e("t = tb + q * 28 + z", "a = q * T + slot",
          f"sv = fadd(fmul(xB, tfv[t + {_BM}]), fmul(mpv, tfv[t + {_MM}]))",
          f"sv = fadd(sv, fmul(ipv, tfv[t + {_IM}]))",
          f"sv = fadd(sv, fmul(dpv, tfv[t + {_DM}]))",
          "sv = fmul(sv, rfv[eb + q * 4 + z])",
          "xEv = fadd(xEv, sv)",
          "mpv = row[a]", "dpv = row[D0 + a]", "ipv = row[I0 + a]",
          "row[a] = sv", "row[D0 + a] = dcv",
          f"dcv = fmul(sv, tfv[t + {_MD}])",
          f"pmi = fmul(mpv, tfv[t + {_MI}])", f"pii = fmul(ipv, tfv[t + {_II}])",
          "row[I0 + a] = fadd(pmi, pii)",
          f"bad = bad | {tiny_test('sv')} | {tiny_test('dcv')} | {tiny_test('pmi')} | {tiny_test('pii')}")


def _dd_step(e: Emitter, carry_only: bool) -> None:
    """One q of a D->D pass: ``D += dcv``; the carry is extended from D (first pass) or from
    itself (carry passes). A tiny carry must leave D unchanged (module header)."""
    e("a = D0 + q * T + slot", "d = row[a]", "s = fadd(dcv, d)")
    if carry_only:
        e("changed = changed | (s > d)")
    e(f"bad = bad | ({tiny_test('dcv')} & (s != d))", "row[a] = s",
      f"dcv = fmul({'dcv' if carry_only else 's'}, tfv[DD + q * 4 + z])")


def dd_first_pass(e: Emitter) -> None:
    """The first D->D pass (spec 2.2)."""
    e("# dd_first_pass")
    _rsh(e, "dcv")
    e("row[D0 + slot] = F0")
    with e.block("for q in range(QQ):"):
        _dd_step(e, carry_only=False)


def dd_carry_passes(e: Emitter) -> None:
    """The three carry passes, with the early exit of models of M >= 100 when no lane's D
    changed (spec 2.3): the four lanes vote."""
    e("# dd_carry_passes")
    with e.block("for jpass in range(3):"):
        _rsh(e, "dcv")
        e("changed = False")
        with e.block("for q in range(QQ):"):
            _dd_step(e, carry_only=True)
        e("vote = int32(changed)", "vote = vote | cuda.shfl_xor_sync(gmask, vote, 1)",
          "vote = vote | cuda.shfl_xor_sync(gmask, vote, 2)")
        with e.block(f"if M >= {DD_EARLY_EXIT_M} and vote == 0:"):
            e("break")
    with e.block("if bad:"):
        e("flags |= SUBNORMAL")


def sum_e(e: Emitter) -> None:
    """xE: the D cells added to the lane's sum, then the horizontal sum of the four lanes'
    sums in HMMER's order (spec 2.4): every thread of the group gets the same xE."""
    e("# sum_e")
    with e.block("for q in range(QQ):"):
        e("xEv = fadd(row[D0 + q * T + slot], xEv)")
    for k in LANES:
        from_lane(e, f"l{k}", "xEv", str(k))
    e("xE = fadd(fadd(l0, l1), fadd(l2, l3))")
    with e.block("if math.isinf(xE) or math.isnan(xE):"):
        e("flags |= RANGE")


def update_specials(e: Emitter) -> None:
    """N, C, J, then B from the new J and N (spec 2.4)."""
    e("# update_specials",
      "xN = fmul(xN, ploop)",
      "pc = fmul(xC, ploop)", "pe = fmul(xE, xe_move)", "xC = fadd(pc, pe)",
      "pj = fmul(xJ, ploop)", "pl = fmul(xE, xe_loop)", "xJ = fadd(pj, pl)",
      "pjm = fmul(xJ, pmove)", "pnm = fmul(xN, pmove)", "xB = fadd(pjm, pnm)")
    checks = " | ".join(tiny_test(v) for v in ("pc", "pe", "pj", "pl", "pjm"))
    with e.block(f"if {checks} | ({tiny_test('pnm')} & (xB != pjm)):"):
        e("flags |= SUBNORMAL")


def rescale_row(e: Emitter, store_when: str, cells=None, leader: str = "z == 0", then: tuple = ()) -> None:
    """The sparse rescaling (spec 2.5), the row's flags and its special-state row (stored
    where ``store_when`` holds: lane 0, and in the parser only when the rows are asked for).
    ``cells()`` emits the loop that multiplies the row's cells by ``rcp`` (default: the thread's
    own 3 Q cells, as a group of four keeps them); the scale factor is kept by ``leader``, and
    the lines ``then`` end the rescaling branch."""
    e("# rescale_row", "scale = F1")
    with e.block("if xE > RESCALE_AT:"):
        e("xN = fdiv(xN, xE)", "xC = fdiv(xC, xE)", "xJ = fdiv(xJ, xE)", "xB = fdiv(xB, xE)", "rcp = fdiv(F1, xE)",
          "bad = " + " | ".join(tiny_test(v) for v in ("xC", "xJ", "xB", "rcp")))
        if cells is None:
            with e.block(f"for c in range({SCRATCH_PER_Q} * QQ):"):
                e("a = c * T + slot", "v = fmul(row[a], rcp)", "row[a] = v", f"bad = bad | {tiny_test('v')}")
        else:
            cells()
        with e.block("if bad:"):
            e("flags |= SUBNORMAL")
        with e.block(f"if {leader}:"):
            e("out_scales[sb + nscale] = xE")
        e("nscale += 1", "scale = xE", "xE = F1", *then)
    with e.block("if " + " | ".join(tiny_test(v) for v in ("xE", "xN", "xJ", "xB", "xC")) + ":"):
        e("flags |= TINY_ROWS")
    with e.block(f"if {store_when}:"):
        store_specials(e, "i", "scale")


def store_specials(e: Emitter, i: str, scale: str) -> None:
    """Lane 0's store of special-state row ``i`` (E N J B C SCALE) at ``out_rows[rb + 6 i]``."""
    e(f"o = rb + 6 * {i}", "out_rows[o] = xE", "out_rows[o + 1] = xN", "out_rows[o + 2] = xJ",
      "out_rows[o + 3] = xB", "out_rows[o + 4] = xC", f"out_rows[o + 5] = {scale}")


def group_head(e: Emitter) -> None:
    """The opening of a kernel of a group of four threads a target (rows in global scratch; in
    shared memory the kernels are segmented): the thread's lane ``z``, and where its row lives
    (``row``: cell c of thread ``slot`` at ``c * T + slot``)."""
    e("tid = cuda.grid(1)")
    with e.block("if tid >= n_threads:"):
        e("return")
    e("lane = int32(cuda.threadIdx.x & 31)  # a group of four threads runs a target: thread z its lane z",
      "z = lane & 3", "base = lane - z", "gmask = u32(15) << u32(base)",
      "row = scratch  # the launch's rows: cell c of thread t at c * T + t",
      "T = np.int64(n_threads)", "slot = np.int64(tid)")


def claim_item(e: Emitter, var: str = "k", leader: str = "z == 0") -> None:
    """The head of a kernel's work loop (inside ``while True:``): the group's first thread
    (``leader``) takes the next item ``var`` from the atomic counter, the group gets it, and
    leaves the loop past the last."""
    e(f"{var} = int32(0)")
    with e.block(f"if {leader}:"):
        e(f"{var} = cuda.atomic.add(counters, 0, 1)")
    from_lane(e, var, var, "0")
    with e.block(f"if {var} >= n_items:"):
        e("break")


def model_head(e: Emitter) -> None:
    """Model ``m``'s shape and where its tables start, and where the lane's D and I cells
    start in its row, which is cleared."""
    e("QQ = np.int64(model_q[m])",
      "rb0 = model_rfv[m]", "tb = model_tfv[m]",
      "D0 = QQ * T  # the lane's D cells, after its M cells",
      "I0 = 2 * QQ * T  # and its I cells",
      "DD = tb + 28 * QQ  # the D->D vectors in tfv, after the 7 Q others")
    with e.block(f"for c in range({SCRATCH_PER_Q} * QQ):"):
        e("row[c * T + slot] = F0")


def claim_target(e: Emitter) -> None:
    """The head of a parser kernel's work loop (inside ``while True:``): lane 0 takes the next
    item ``k`` from the atomic counter, the group reads its target (a database target, the
    length model at its length) and its model's tables, and clears its row."""
    claim_item(e)
    e("p = items[k]", "L = lengths[p]", "wb = word_offsets[p]",
      "pmove = pmove_by_length[L]", "ploop = ploop_by_length[L]",
      "m = item_model[k]", "xe_move = model_f[3 * m]", "xe_loop = model_f[3 * m + 1]")
    model_head(e)


def forward_start(e: Emitter) -> None:
    """The specials of row 0 (``xB = pmove``), the flags, the count of scale factors and where
    they go (``sb``)."""
    e("M = model_m[m]", "tbm_min = model_f[3 * m + 2]",
      "xE = F0", "xN = F1", "xJ = F0", "xB = pmove", "xC = F0", "flags = int32(0)", "nscale = 0",
      "sb = scale_base[k]")


def row_head(e: Emitter) -> None:
    """The start of Forward row i: residue i's emission row ``eb`` (the packed word read every
    fourth row into ``w``) and the check that every tiny term of the M sums vanishes in them."""
    e("j = i - 1")
    with e.block("if (j & 3) == 0:"):
        e("w = residues[wb + (j >> 2)]")
    e("x = int32((w >> u32(8 * (j & 3))) & u32(255))", "eb = rb0 + np.int64(x) * QQ * 4")
    with e.block("if not (fmul(xB, tbm_min) >= ABSORB):"):
        e("flags |= SUBNORMAL")


def forward_rows(e: Emitter, store_when: str, after_row=None) -> None:
    """Rows 1..L of the Forward recursion on the target's packed residues (from word ``wb``),
    each row's specials stored where ``store_when`` holds (:func:`rescale_row`), then
    ``after_row(e)`` (e.g. a full matrix's store of the row's cells); then the final C's range
    check and the four lanes' flags OR-ed. The parser and the full-matrix kernel
    (:mod:`.matrix_source`) both run it."""
    e("w = u32(0)")
    with e.block("for i in range(1, L + 1):"):
        row_head(e)
        main_pass(e)
        dd_first_pass(e)
        dd_carry_passes(e)
        sum_e(e)
        update_specials(e)
        rescale_row(e, store_when)
        if after_row is not None:
            after_row(e)
    with e.block("if math.isnan(xC) or (L > 0 and xC == F0) or math.isinf(xC):"):
        e("flags |= RANGE")
    or_flags(e)


def or_flags(e: Emitter, segments: int = 1) -> None:
    """``flags``: the OR of the flags of the group's ``4 segments`` threads, in every thread."""
    step = 1
    while step < 4 * segments:
        e(f"flags = flags | cuda.shfl_xor_sync(gmask, flags, {step})")
        step *= 2


def kernel_body(spec: "FwdSpec") -> str:
    """The kernel's body (the lines under its ``def``)."""
    e = Emitter()
    group_head(e)
    with e.block("while True:"):
        claim_target(e)
        forward_start(e)
        e("rb = np.int64(0)")
        with e.block("if want_rows != 0 and z == 0:"):
            e("rb = row_base[k]")
            store_specials(e, "0", "F1")
        forward_rows(e, "want_rows != 0 and z == 0")
        with e.block("if z == 0:"):
            e("out_flags[k] = flags", "out_xc[k] = xC", "out_nscale[k] = nscale")
    return indented(e)


def indented(e: Emitter) -> str:
    """The emitted lines as a kernel's body (under its ``def``)."""
    return "".join(f"    {line}\n" if line else "\n" for line in e.text().splitlines())


# ---------------------------------------------------------------- the segmented parser (rows in shared memory)

def seg_main_pass(e: Emitter, S: int) -> None:
    """The main pass (spec 2.1) of row i, the group's threads taking the vectors q = seg, seg + S, ...:
    every cell reads only row i-1 (buffer ``prv``), so they run at once. Thread (seg, z) stores M and
    I at q and the M->D term at q + 1 (at q = Q-1 the carry slot, read by lane z + 1's first D->D
    pass); row i-1's vector q-1 (for q = 0: its last vector shifted right by a lane) comes from the
    shared row itself."""
    e("# main_pass: the vectors q = seg, seg + S, ... of this lane")
    with e.block(f"for q in range(seg, QQ, {S}):"):
        e("t = tb + q * 28 + z")
        with e.block("if q > 0:"):
            e("a = prv + (q - 1) * 4 + z")
        with e.block("else:"):
            e("a = prv + (QQ - 1) * 4 + z - 1  # lane z-1's last vector (lane 0: zeros)")
        e("mpv = row[a] if (q > 0 or z > 0) else F0", "ipv = row[a + 4 * QQ] if (q > 0 or z > 0) else F0",
          "dpv = row[a + 8 * QQ] if (q > 0 or z > 0) else F0",
          f"sv = fadd(fmul(xB, tfv[t + {_BM}]), fmul(mpv, tfv[t + {_MM}]))",
          f"sv = fadd(sv, fmul(ipv, tfv[t + {_IM}]))",
          f"sv = fadd(sv, fmul(dpv, tfv[t + {_DM}]))",
          "sv = fmul(sv, rfv[eb + q * 4 + z])",
          "c = cur + q * 4 + z", "row[c] = sv",
          f"mdv = fmul(sv, tfv[t + {_MD}])", "row[c + 8 * QQ + 4] = mdv  # D at q + 1",
          "p = prv + q * 4 + z",
          f"pmi = fmul(row[p], tfv[t + {_MI}])", f"pii = fmul(row[p + 4 * QQ], tfv[t + {_II}])",
          "row[c + 4 * QQ] = fadd(pmi, pii)",
          f"bad = bad | {tiny_test('sv')} | {tiny_test('mdv')} | {tiny_test('pmi')} | {tiny_test('pii')}")
    with e.block("if seg == 0:"):
        e("row[cur + 8 * QQ + z] = F0  # D at q = 0")
    e("cuda.syncwarp(gmask)")


#: Steps of a chain along q that the segmented kernel's serial passes emit as one block: the
#: block's loads first, then the chain's operations in order, then its stores, so that the
#: chain waits for one round of loads a block instead of one a step.
CHAIN_UNROLL = 4


def chain_loop(e: Emitter, loads, steps, stores=None, descending: bool = False) -> None:
    """A chain along q of lane z's cells (q = 0..QQ-1, or QQ-1..0 when ``descending``), run by
    segment 0's threads: blocks of :data:`CHAIN_UNROLL` steps, then the steps left one at a
    time. ``loads(k, q)`` and ``stores(k, q)`` give the lines of step ``k`` at vector ``q`` (an
    expression), ``steps(k)`` its operations; the values of step k are named with the suffix k
    in a block, with none in the loop of single steps."""
    U = CHAIN_UNROLL
    if descending:
        e("q = QQ - 1")
        loops = ((f"while q >= {U - 1}:", U, "-"), ("while q >= 0:", 1, "-"))
    else:
        e("q = np.int64(0)")
        loops = ((f"while q + {U} <= QQ:", U, "+"), ("while q < QQ:", 1, "+"))
    for header, count, sign in loops:
        with e.block(header):
            names = [str(k) for k in range(count)] if count > 1 else [""]
            at = [f"q {sign} {k}" if count > 1 else "q" for k in range(count)]
            for name, q in zip(names, at):
                e(*loads(name, q))
            for name in names:
                e(*steps(name))
            if stores is not None:
                for name, q in zip(names, at):
                    e(*stores(name, q))
            e(f"q {sign}= {count}")


def seg_serial_passes(e: Emitter) -> None:
    """The parts of the row that are chains along q, lane by lane (spec 2.2-2.4): xE's sum of the
    M cells, the first D->D pass, the carry passes and xE's sum of the D cells. Segment 0's four
    threads run them, thread z on lane z's cells; the lanes meet through the group's exchange
    area ``xa`` in shared memory (each pass's carry out, each carry pass's vote, each lane's sum),
    which every thread of the group reads after a ``syncwarp``, so that all of them take the
    same branches and meet the same warp intrinsics (which numba's simulator needs)."""
    e("# serial passes: lane z's chains along q, by segment 0's threads",
      "mz = cur + z", "dz = cur + 8 * QQ + z", "chain_bad = False", "xEv = F0", "dcv = F0", "shifted = F0")

    def d_loads(k, q):
        return f"d{k} = row[dz + ({q}) * 4]", f"u{k} = tfv[DD + ({q}) * 4 + z]"

    def d_stores(k, q):
        return (f"row[dz + ({q}) * 4] = s{k}",)

    def first_steps(k):
        return (f"xEv = fadd(xEv, mc{k})", f"s{k} = fadd(dcv, d{k})",
                f"chain_bad = chain_bad | ({tiny_test('dcv')} & (s{k} != d{k}))", f"dcv = fmul(s{k}, u{k})")

    def carry_steps(k):
        return (f"s{k} = fadd(dcv, d{k})", f"changed = changed | (s{k} > d{k})",
                f"chain_bad = chain_bad | ({tiny_test('dcv')} & (s{k} != d{k}))", f"dcv = fmul(dcv, u{k})")

    with e.block("if seg == 0:"):
        e("# the first D->D pass, from lane z-1's carry out of the main pass, with xE's sum of the M cells",
          "dcv = row[dz + 4 * QQ - 1] if z > 0 else F0")
        chain_loop(e, lambda k, q: (f"mc{k} = row[mz + ({q}) * 4]",) + d_loads(k, q), first_steps, d_stores)
        e("row[xa + z] = dcv  # the pass's carry out")
    e("cuda.syncwarp(gmask)")
    with e.block("for jpass in range(3):"):
        with e.block("if seg == 0:"):
            e("shifted = row[xa + z - 1] if z > 0 else F0  # lane z-1's carry out of the pass before")
        e("cuda.syncwarp(gmask)")
        with e.block("if seg == 0:"):
            e("dcv = shifted", "changed = False")
            chain_loop(e, d_loads, carry_steps, d_stores)
            e("row[xa + z] = dcv", "row[xa + 4 + z] = F1 if changed else F0")
        e("cuda.syncwarp(gmask)",
          "vote = (row[xa + 4] != F0) | (row[xa + 5] != F0) | (row[xa + 6] != F0) | (row[xa + 7] != F0)")
        with e.block(f"if M >= {DD_EARLY_EXIT_M} and not vote:"):
            e("break")
    with e.block("if seg == 0:"):
        e("# xE's sum of the D cells")
        chain_loop(e, lambda k, q: (f"d{k} = row[dz + ({q}) * 4]",), lambda k: (f"xEv = fadd(d{k}, xEv)",))
        e("row[xa + 8 + z] = xEv")
    e("cuda.syncwarp(gmask)")
    for k in LANES:
        e(f"l{k} = row[xa + {8 + k}]")
    e("xE = fadd(fadd(l0, l1), fadd(l2, l3))")
    with e.block("if bad or chain_bad:"):
        e("flags |= SUBNORMAL")
    with e.block("if math.isinf(xE) or math.isnan(xE):"):
        e("flags |= RANGE")
    e("cuda.syncwarp(gmask)")


def seg_rescale_row(e: Emitter, S: int, store_when: str) -> None:
    """:func:`rescale_row` with the row's cells shared among the group's threads (the specials
    stored where ``store_when`` holds)."""

    def cells():
        with e.block(f"for c in range(g, 12 * QQ, {4 * S}):"):
            e("v = fmul(row[cur + c], rcp)", "row[cur + c] = v", f"bad = bad | {tiny_test('v')}")

    rescale_row(e, store_when, cells, leader="g == 0", then=("cuda.syncwarp(gmask)",))


def segmented_head(e: Emitter, S: int) -> None:
    """The opening of a segmented kernel: the thread's group of ``4 S`` threads, its place ``g``
    there, its SSE lane ``z`` and segment ``seg``, and where the group's shared memory starts
    (``gb``: its two row buffers, then its exchange area)."""
    G = 4 * S
    e("tid = cuda.grid(1)")
    with e.block("if tid >= n_threads:"):
        e("return")
    e("lane = int32(cuda.threadIdx.x & 31)",
      f"g = lane % {G}  # the thread's place in its group", "z = g & 3  # its SSE lane", "seg = g >> 2  # its segment",
      "base = lane - g",
      f"gmask = u32({(1 << G) - 1}) << u32(base)",
      "row = cuda.shared.array(0, float32)",
      f"gb = np.int64(cuda.threadIdx.x // {G}) * group_floats  # the group's two row buffers")


def segmented_target(e: Emitter) -> None:
    """The head of a segmented kernel's work loop (inside ``while True:``): the group claims
    target ``k``, reads it and its model (the length model at its length), and places its row
    buffers and exchange area (:func:`segmented_buffers`)."""
    claim_item(e, leader="g == 0")
    e("p = items[k]", "L = lengths[p]", "wb = word_offsets[p]",
      "pmove = pmove_by_length[L]", "ploop = ploop_by_length[L]",
      "m = item_model[k]", "xe_move = model_f[3 * m]", "xe_loop = model_f[3 * m + 1]")
    segmented_buffers(e)


def segmented_buffers(e: Emitter) -> None:
    """Model ``m``'s shape and where its tables start, and where the group's row buffers
    (``first``, ``second``: ``BUF`` floats each, M, I, D of the four lanes) and its exchange area
    ``xa`` (12 floats: the lanes' carries, votes and sums) lie in its shared memory ``gb``."""
    e("QQ = np.int64(model_q[m])", "rb0 = model_rfv[m]", "tb = model_tfv[m]",
      "DD = tb + 28 * QQ  # the D->D vectors in tfv, after the 7 Q others",
      "BUF = 12 * QQ + 4", "first = gb", "second = gb + BUF",
      "xa = gb + group_floats - 12  # the exchange area: the lanes' carries, votes and sums")


def seg_forward_rows(e: Emitter, S: int, store_when: str, after_row=None) -> None:
    """Rows 1..L of the segmented Forward recursion (:func:`forward_rows` with a group of ``4 S``
    threads sharing each row in the buffers ``prv`` and ``cur``), each row's specials stored where
    ``store_when`` holds, then ``after_row(e, "i")`` (the row rescaled in ``cur``: a full matrix's
    store of its cells); then the final C's range check and the group's flags OR-ed. The
    segmented parser and full-matrix kernel (:mod:`.matrix_source`) both run it."""
    e("w = u32(0)")
    with e.block("for i in range(1, L + 1):"):
        row_head(e)
        e("bad = False")
        seg_main_pass(e, S)
        seg_serial_passes(e)
        update_specials(e)
        seg_rescale_row(e, S, store_when)
        if after_row is not None:
            after_row(e, "i")
        e("prv, cur = cur, prv")
    with e.block("if math.isnan(xC) or (L > 0 and xC == F0) or math.isinf(xC):"):
        e("flags |= RANGE")
    or_flags(e, S)


def segmented_body(S: int) -> str:
    """The segmented parser kernel's body: a group of 4 S threads runs a target, thread (seg, z)
    its SSE lane z and the vectors q = seg, seg + S, ... of the main pass; the group's two row
    buffers (rows i-1 and i, ``12 Q + 4`` floats each) in shared memory."""
    e = Emitter()
    segmented_head(e, S)
    with e.block("while True:"):
        segmented_target(e)
        e("prv = first", "cur = second")
        with e.block(f"for c in range(g, 2 * BUF, {4 * S}):"):
            e("row[gb + c] = F0")
        e("cuda.syncwarp(gmask)")
        forward_start(e)
        e("rb = np.int64(0)")
        with e.block("if want_rows != 0 and g == 0:"):
            e("rb = row_base[k]")
            store_specials(e, "0", "F1")
        seg_forward_rows(e, S, "want_rows != 0 and g == 0")
        with e.block("if g == 0:"):
            e("out_flags[k] = flags", "out_xc[k] = xC", "out_nscale[k] = nscale")
    return indented(e)


#: Parameters of the segmented kernel: the parser's, and the floats of shared memory a group's two
#: row buffers take (sized by the launch's largest model).
SEGMENTED_ARGS = ARGS + (Arg("group_floats", "int64"),)


@dataclass(frozen=True)
class FwdSpec:
    """The Forward parser kernel: with its rows in shared memory (``storage="shared"``) the
    segmented kernel, a group of ``4 segments`` threads a target (:func:`segmented_body`); with
    them in a global scratch array (``"global"``: models whose rows do not fit a block's shared
    memory) a group of four threads a target, a thread per SSE lane (:func:`kernel_body`). Q and
    M are per model."""

    storage: str = "shared"
    segments: int = 8

    @property
    def name(self) -> str:
        if self.storage == "shared":
            return f"fwdback_parser_v4_shared_s{self.segments}"
        return f"fwdback_parser_v3_{self.storage}"

    @property
    def args(self) -> tuple:
        return SEGMENTED_ARGS if self.storage == "shared" else ARGS

    def source(self, binding: str) -> str:
        body = segmented_body(self.segments) if self.storage == "shared" else kernel_body(self)
        return kernel_module("Forward parser kernel (HMMER's p7_ForwardParser).", binding, self.args, body,
                             *module_lines(binding))


def module_lines(binding: str, ftz: bool = False) -> tuple:
    """The imports and constants of a parser kernel's module: the explicitly rounded float
    operations (``fmul``, ``fadd``, ``fdiv``; with ``ftz`` hmmsearch's, flush-to-zero:
    :func:`hmmgpu.gpu.rounding.float_helpers`), the flags, and HMMER's thresholds."""
    return ("import math", "from numba import float32", "from hmmgpu.gpu import rounding as _rounding",
            f"_F = _rounding.float_helpers({binding!r}, ftz={bool(ftz)!r})", "fmul = _F.fmul; fadd = _F.fadd; fdiv = _F.fdiv",
            f"RANGE = {RANGE}; SUBNORMAL = {SUBNORMAL}; TINY_ROWS = {TINY_ROWS}",
            "F0 = np.float32(0.0); F1 = np.float32(1.0)",
            f"FMIN = np.float32({float(FLT_MIN)!r}); ABSORB = np.float32({float(ABSORB)!r})",
            f"RESCALE_AT = np.float32({float(RESCALE_AT)!r})")
