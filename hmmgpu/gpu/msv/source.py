"""SSV and J-state MSV kernels: what they compute, the data layout, and why they are exact.

What is computed
----------------
HMMER's first filter, ``p7_MSVFilter``, scores every target against an ungapped,
multi-hit local model in 8-bit saturating arithmetic. It first calls ``p7_SSVFilter``, the
same model without the J state (a single best diagonal), and returns SSV's answer unless
SSV cannot decide (``eslENORESULT``); only then does it run the J-state recurrence. hmmgpu
reproduces that decision exactly. For every target (a "position" of the resident database)
the ``ssv`` kernel computes:

* the SSV maximum ``t`` of ``U(i,k) = max(0, U(i-1,k-1) + bias - cost[x_i][k])`` over every
  cell, in unbounded integers (docs/algorithms.md §5.2 proves this equals HMMER's
  saturating byte code wherever no overflow occurs, and that the overflow tests become
  comparisons of ``t``), then HMMER's decision logic in integers: OK with the score value
  ``xJ``, RANGE (overflow: +inf, always passes) or NORESULT;
* for the NORESULT targets, in the same warp right away, the J-state MSV
  ``S(i,k) = max(0, max(S(i-1,k-1), B) + bias - cost) ``, with ``E``, ``J`` and ``B`` updated
  per row, exactly as ``p7_MSVFilter`` (docs/algorithms.md §4).

A target passes when its status is RANGE or ``xJ >= thr[L]``: ``thr`` is the per-length
integer form of the F1 test (:func:`hmmgpu.stages.stats.msv_thresholds`), exact because the
P-value is monotone in ``xJ``. Passing targets are appended to ``out_pos/out_status/out_xj``
(counter ``OUT``). The ``msvw`` kernel runs the J-state MSV on every target (used by the
audit and the tests to check that recurrence on its own).

The J-state recurrence is computed in the ``max(S, B)`` form (each cell floored at B
instead of 0, which lets the B update be folded into the cells). That form gives HMMER's
``J`` except when no cell ever rises above the initial B: those targets are listed as
*fallback* (counter ``FALLBACK``) and the host finishes them with the CPU reference. On
real data this list has been empty.

Data layout
-----------
A lane group of ``G`` threads works on one target (32/G targets per warp). With 16-bit
lanes (``16x2``, two per 32-bit word) or 8-bit lanes (``8x4``), the group has ``G*P`` lanes
and every thread holds ``Q`` words; model node ``k`` lives in word ``q = (k-1) mod Q`` of
lane ``z = (k-1) div Q`` (HMMER's striping, docs/algorithms.md §3.6, over the group's lanes). Moving from
row ``i-1`` to row ``i`` shifts every lane's last word into the next lane's word 0: a shuffle
and a funnel shift (``shift_up16``). The model table is uint32 ``[x][q][g]`` (one row of
words per residue code, rows padded against bank conflicts), in shared memory when it fits.
In 16-bit lanes the SSV table holds ``-ssv_cost`` and one DPX ``add-max`` instruction per
word computes two cells; the MSV table holds ``bias - cost``.

Why the code looks as it does
-----------------------------
The row loop is unrolled over the ``Q`` words so that every word is a register (the four rows
of a residue word are a loop, which keeps the source, and numba's compile time, small); a kernel is
therefore specialised per (kind, lanes, G, Q, table placement), and the shapes come from a
fixed table (:mod:`hmmgpu.gpu.runtime.tuning`), so a whole Pfam search needs a few dozen
kernels, compiled once per device. Residues arrive four per load. The J/B update needs the
row maximum of the whole group, which is a reduction of 2-5 shuffles; it is only taken when
some lane's maximum reaches the current threshold ``T`` (a warp vote), which on most rows of
most targets it does not. Overflow is checked every 16 words.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from hmmgpu.constants import STATUS_NORESULT, STATUS_OK, STATUS_RANGE
from hmmgpu.gpu.runtime.emit import Emitter, claim_work, jit_decorator, preamble
from hmmgpu.gpu.runtime.kargs import Arg, parameter_list, signature

#: Residue codes in a model table (Easel's amino codes 0..28).
NX = 29
#: Four '~' residues (code 28): cost 255 / SSV cost 127, a no-op row in every filter.
PAD_WORD = 0x1C1C1C1C


class Counter(IntEnum):
    """Slots of the int32 counter array shared by the host and the MSV kernels."""

    WORK = 0  #: next position to hand out (atomic work counter)
    OUT = 1  #: targets written to out_pos/out_status/out_xj
    FALLBACK = 2  #: targets written to fallback_pos (finished on the host)
    NORESULT = 3  #: targets SSV could not decide (the J-state MSV ran on them)


N_COUNTERS = len(Counter)

#: Parameters of both MSV kernels, in order.
ARGS = (
    Arg("residues", "uint32[:]"), Arg("word_offsets", "int64[:]"), Arg("lengths", "int32[:]"),
    Arg("n_targets", "int32"), Arg("ssv_table", "uint32[:]"), Arg("msv_table", "uint32[:]"),
    Arg("tjb_by_length", "int32[:]"), Arg("threshold_by_length", "int32[:]"), Arg("scalars", "int32[:]"),
    Arg("counters", "int32[:]"), Arg("out_pos", "int32[:]"), Arg("out_status", "int8[:]"),
    Arg("out_xj", "int32[:]"), Arg("fallback_pos", "int32[:]"),
)
#: ``scalars`` holds these model values, in this order.
SCALARS = ("bias_b", "tbm_b", "tec_b", "base_b")


def row_stride(G: int, Q: int) -> int:
    """Words per residue row of a model table: ``G*Q``, padded by ``G`` when ``Q`` is even so
    that the rows read by different lane groups of a warp start in different banks."""
    return G * Q if (G == 32 or Q % 2) else G * (Q + 1)


@dataclass(frozen=True)
class MsvSpec:
    """One MSV kernel specialisation."""

    kind: str  #: "ssv" (SSV, J-state MSV inline for NORESULT) or "msvw" (J-state MSV on all)
    lanes: str  #: "16x2" or "8x4"
    G: int  #: threads per target
    Q: int  #: words per thread
    placement: str  #: model table in "static" or "dynamic" shared memory, or "global" (L1)

    @property
    def P(self) -> int:
        """Lanes per 32-bit word."""
        return 2 if self.lanes == "16x2" else 4

    @property
    def table_words(self) -> int:
        return NX * row_stride(self.G, self.Q)

    @property
    def name(self) -> str:
        return f"msv_{self.kind}_{self.lanes}_g{self.G}_q{self.Q}_{self.placement}_v11"

    def source(self, binding: str) -> str:
        """The kernel module's text for lane binding ``binding``."""
        return generate(self, binding)


def _cell(spec: MsvSpec, kind: str, prev: str, tab: str) -> str:
    """Expression of one word's new cells from the previous row's word ``prev``."""
    m16 = spec.lanes == "16x2"
    if kind == "ssv":
        return f"addmax16({prev}, {tab}, ZERO)" if m16 else f"subus8(add32({prev}, BIASV), {tab})"
    return f"addmax16({prev}, {tab}, Bv)" if m16 else f"maxu8(subus8(add32({prev}, BIASV), {tab}), Bv)"


def _fold(spec: MsvSpec, e: Emitter, acc: str, names) -> None:
    """Fold words ``names`` into the running lane-wise maximum ``acc``."""
    names = list(names)
    if spec.lanes == "16x2":
        while len(names) >= 2:
            a, b = names.pop(), names.pop()
            e(f"{acc} = max3_16({acc}, {a}, {b})")
        if names:
            e(f"{acc} = max16({acc}, {names.pop()})")
    else:
        for a in names:
            e(f"{acc} = maxu8({acc}, {a})")


def _dp(e: Emitter, spec: MsvSpec, kind: str, table: str, words: str) -> None:
    """The dynamic programming over the group's target, ``words`` residue words long.

    ``kind`` "ssv" leaves the group maximum in ``t``; "msvw" leaves ``tall`` (the maximum of
    every cell), ``J``, ``Binit`` and ``rng`` (overflow).
    """
    G, Q = spec.G, spec.Q
    m16 = spec.lanes == "16x2"
    ssv = kind == "ssv"
    shift = "shift_up16" if m16 else "shift_up8"
    bcast = "bcast16" if m16 else "bcast8"
    hmax = "hmax16" if m16 else "hmaxu8"
    vmax = "max16" if m16 else "maxu8"
    v = "u_" if ssv else "w_"
    if ssv:
        e(*[f"u_{q} = ZERO" for q in range(Q)], "R = ZERO")
        fill = "ZERO"
    else:
        e("tjbm = (tjb + tbm) & 255", "B = base - tjbm")
        with e.block("if B < 0:"):
            e("B = 0")
        e("Binit = B", "J = 0", f"Bv = {bcast}(B)", "T = min(top, base + tec + 1)")
        e(*[f"w_{q} = Bv" for q in range(Q)], "Rall = Bv", "rng = False")
        fill = "Bv"
    e(f"nwk = {words}", "done = nwk == 0", "nwmax = group_max(nwk, 32)", "iw = 0")
    with e.block("while iw < nwmax:"):
        e("rw = PAD")
        with e.block("if iw < nwk:"):
            e("rw = residues[wb + iw]")
        with e.block("for r in range(4):"):  # the word's four residues, one row each
            e("x = (rw >> u32(8 * r)) & u32(255)", "tb = x * GQ + g", f"sh = {shift}({v}{Q - 1}, first, {fill})")
            for q in range(Q - 1, 0, -1):
                e(f"{v}{q} = {_cell(spec, kind, f'{v}{q - 1}', f'{table}[tb + {q * G}]')}")
            e(f"{v}0 = {_cell(spec, kind, 'sh', f'{table}[tb]')}")
            if ssv:
                _fold(spec, e, "R", [f"u_{q}" for q in range(Q)])
            else:  # J-state MSV: the row maximum decides the J and B update (docs/algorithms.md §4.1)
                e(f"rm = {v}0")
                _fold(spec, e, "rm", [f"w_{q}" for q in range(1, Q)])
                e(f"Rall = {vmax}(Rall, rm)", f"t = {hmax}(rm)",
                  "bal = cuda.ballot_sync(FULL, (t >= T) and not done)")
                with e.block("if bal != 0:"):
                    e("E = group_max(t, G)")
                    with e.block("if ((bal >> gshift) & GMASK) != 0:"):
                        with e.block("if E >= top:"):
                            e("rng = True", "done = True")
                        with e.block("else:"):
                            e("J = E - tec", "B = J - tjbm")
                            with e.block("if B < 0:"):
                                e("B = 0")
                            e(f"Bv = {bcast}(B)", "T = min(top, J + tec + 1)")
                            e(*[f"w_{q} = {vmax}(w_{q}, Bv)" for q in range(Q)])
        e("iw += 1")
        with e.block("if (iw & 15) == 0:"):
            if ssv:
                e(f"ov = {hmax}(R) >= lim", "bal = cuda.ballot_sync(FULL, ov)")
                with e.block("if ((bal >> gshift) & GMASK) != 0:"):
                    e("done = True")
            with e.block("if cuda.ballot_sync(FULL, not done) == 0:"):
                e("break")
    e(f"t = group_max({hmax}(R), G)" if ssv else f"tall = group_max({hmax}(Rall), G)")


def _append_out(e: Emitter, status: str, xj: str) -> None:
    e(f"k = cuda.atomic.add(counters, {Counter.OUT.value}, 1)", "out_pos[k] = p",
      f"out_status[k] = {status}", f"out_xj[k] = {xj}")


def _msv_result(e: Emitter, cond: str) -> None:
    """Write a J-state MSV result: RANGE, fallback, or OK when ``xJ`` passes F1."""
    with e.block(f"if {cond}:"):
        with e.block("if rng:"):
            _append_out(e, "RANGE", "0")
        with e.block("elif J == 0 and tall <= Binit:"):
            e(f"k = cuda.atomic.add(counters, {Counter.FALLBACK.value}, 1)", "fallback_pos[k] = p")
        with e.block("else:"):
            e("xj = tall - tec")
            with e.block("if xj < 0:"):
                e("xj = 0")
            with e.block("if xj >= threshold_by_length[L]:"):
                _append_out(e, "OK", "xj")


def _ssv_body(e: Emitter, spec: MsvSpec) -> None:
    """SSV on the group's target, its decision, and the J-state MSV where SSV cannot decide."""
    e("pre_ok = valid and (tjb + tbm + tec + bias < 127)")
    _dp(e, spec, "ssv", "stab", "nw if pre_ok else int32(0)")
    # SSV's decision (docs/algorithms.md §5.3 on the unbounded maximum t), in every thread of the group
    e("st = OK", "xj = 0")
    with e.block("if not pre_ok:"):
        e("st = NORESULT")
    with e.block("else:"):
        e("B0 = base - tjb - tbm")
        with e.block("if t >= lim:"):
            e("st = NORESULT if B0 < 128 else RANGE")
        with e.block("else:"):
            e("V = B0 + t")
            with e.block("if V >= top:"):
                e("st = RANGE")
            with e.block("else:"):
                e("xj = V - tec")
                with e.block("if xj > base:"):
                    e("st = NORESULT", "xj = 0")
    with e.block("if valid and first and st != NORESULT:"):
        with e.block("if st == RANGE or xj >= threshold_by_length[L]:"):
            _append_out(e, "st", "xj")
    e("need = valid and st == NORESULT")
    with e.block("if need and first:"):
        e(f"cuda.atomic.add(counters, {Counter.NORESULT.value}, 1)")
    with e.block("if cuda.ballot_sync(FULL, need) != 0:"):
        _dp(e, spec, "msvw", "msv_table", "nw if need else int32(0)")
        _msv_result(e, "need and first")


def generate(spec: MsvSpec, binding: str) -> str:
    """The source of one MSV kernel module (see the module header)."""
    G, Q = spec.G, spec.Q
    ssv = spec.kind == "ssv"
    e = Emitter()
    preamble(e, f"MSV kernel {spec.name}.", binding)
    e(f"G = {G}; Q = {Q}; GQ = {row_stride(G, Q)}; TABW = {spec.table_words}; WPG = {32 // G}; "
      f"GMASK = {(1 << G) - 1 if G < 32 else 0xFFFFFFFF}",
      f"PAD = np.uint32({PAD_WORD})",
      f"OK = {STATUS_OK}; RANGE = {STATUS_RANGE}; NORESULT = {STATUS_NORESULT}", "")
    e(jit_decorator(signature(ARGS), binding))
    with e.block(f"def kernel({parameter_list(ARGS)}):"):
        table = "msv_table" if spec.kind == "msvw" else "ssv_table"
        if spec.placement in ("static", "dynamic"):
            e("stab = cuda.shared.array(%s, uint32)" % ("TABW" if spec.placement == "static" else "0"))
            with e.block("for j in range(cuda.threadIdx.x, TABW, cuda.blockDim.x):"):
                e(f"stab[j] = {table}[j]")
            e("cuda.syncthreads()")
        else:
            e(f"stab = {table}")
        e("lane = cuda.threadIdx.x & 31", "g = lane & (G - 1)", "gi = lane // G", "first = g == 0",
          "gshift = gi * G", "bias = scalars[0]; tbm = scalars[1]; tec = scalars[2]; base = scalars[3]",
          "ZERO = u32(0)", "BIASV = bcast8(bias)", "top = 255 - bias", "lim = 127 - bias")
        with e.block("while True:"):
            # one warp takes WPG consecutive positions, one per lane group
            claim_work(e, "b0", "lane == 0", "WPG", Counter.WORK.value, "n_targets")
            e("p = b0 + gi", "valid = p < n_targets", "L = 0", "wb = 0")
            with e.block("if valid:"):
                e("L = lengths[p]", "wb = word_offsets[p]")
            e("tjb = tjb_by_length[L]", "nw = int32((L + 3) >> 2)")
            if ssv:
                _ssv_body(e, spec)
            else:
                _dp(e, spec, "msvw", "stab", "nw if valid else int32(0)")
                _msv_result(e, "valid and first")
    return e.text()
