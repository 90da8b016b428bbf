"""The Forward bound kernel: HMMER's Forward filter score, to rule targets out before the CPU.

What is computed
----------------
After the Viterbi filter, HMMER's pipeline runs ``p7_ForwardParser`` on every survivor and
drops the ones whose Forward P-value exceeds F3 (hmmer-filters-spec 7.3); on Pfam-scale work
most Viterbi survivors (about 70%) are dropped there, after a float Forward that costs the
CPU stage about a third of its time. This kernel computes the same Forward score on the GPU
for the Viterbi filter's work list, right after the Viterbi kernel and on its stream (no
host round trip): for each item whose Viterbi score may pass F2 (it is at or above the low
edge of the host's F2 band), the sum over all paths of the multi-hit local profile, with
the target's length model (N, J, C loops ``L/(L+3)``, moves ``3/(L+3)``, E to C and to J
each 1/2):

* ``M(k) = e(k, x) * (M'(k-1) tMM + I'(k-1) tIM + D'(k-1) tDM + B' tBM(k))`` (primes: the
  previous row; ``e``: the match emission odds; insert emissions have odds 1 in HMMER 3),
* ``I(k) = M'(k) tMI + I'(k) tII`` and ``D(k) = M(k-1) tMD + D(k-1) tDD``,
* ``E = sum of M(k) + D(k)``, then ``N``, ``C``, ``J`` and the next row's ``B`` as HMMER's
  ``forward_engine``; when ``E > 10^4`` the row and the specials are divided by ``E`` and
  ``log E`` is added to the total, HMMER's sparse rescaling;
* the score is ``total + log(C * move)``, in nats, or NaN for an item not computed.

How the score is used, and why the search stays exact
----------------------------------------------------------
The kernel's odds are ``exp`` of the profile's float scores and its sums run in another
order than HMMER's SSE code, so its score is not HMMER's to the last bit; it differs by a
rounding-sized amount (in the tests, less than 10^-4 nats). It is used only as a bound: the
host drops a Viterbi survivor only when the kernel's score is finite and its bit score is
below the F3 threshold by more than :data:`MARGIN_BITS`, thousands of times any such
difference; every other survivor goes to pyhmmer, whose own Forward filter decides as
before. A target HMMER would pass is therefore never dropped, and a dropped target is one
HMMER drops at the Forward filter: it makes no hit, no kept hit and no count but
``n_past_fwd``'s, which pyhmmer counts over the rest (spec 8: any superset of the Forward
survivors gives the identical output).

Data layout and why the code looks as it does
---------------------------------------------
One warp per target (a persistent grid; warps take items from an atomic counter). The
``N = 32 S`` node slots are cut into 32 runs of ``S`` consecutive nodes, one run per lane:
node ``n`` (0-based) is slot ``j = n mod S`` of lane ``n div S``, stored at column
``j * 32 + lane`` of every table and of the warp's three rows in shared memory (M, I, D), so
that the 32 lanes read 32 consecutive floats (coalesced, and free of bank conflicts). The
padding nodes after node M have zero odds everywhere and stay zero. Tables (one upload per
model, float32, ``[row][column]``): the eight transition rows :data:`TRANSITION_ROWS` (into
node k: MM, IM, DM from node k-1 and BM; out of node k: MI, II, MD, DD), then the
:data:`NX` emission rows.

A row takes two passes over each lane's run. The first computes M and I from the previous
row (a lane first reads the last node of the lane before it, then the warp synchronises,
then everyone writes), and the lane's D->D chain as an affine map ``d_out = a + b d_in``.
The lanes publish their maps in shared memory and each composes those of the lanes before
it (at most 31 multiply-adds), so it knows the D value entering its run; the second pass
writes D and sums ``M + D``, and every lane adds the 32 lane sums in the same order, so all
hold the same E. Long chains of D->D are exact in this form (HMMER's Forward propagates all
of them too), and a row costs ``2 S`` steps per lane and four warp barriers whatever the
model's D->D probabilities (shuffles would take eighteen: the barriers are what numba's CUDA
simulator, which runs the kernel in CI, spends its time on).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...constants import LOG2, STATUS_OK, STATUS_RANGE
from ..emit import Emitter, claim_work, jit_decorator, preamble
from ..kargs import Arg, parameter_list, signature
from ..vit.source import STATUS_UNCERTAIN

#: Transition rows of the table, in order (into node k: MM, IM, DM from node k-1, and BM;
#: out of node k: MI, II, MD, DD).
TRANSITION_ROWS = ("MM", "IM", "DM", "BM", "MI", "II", "MD", "DD")
#: Residue codes (emission rows).
NX = 29
#: A survivor is dropped only when the kernel's bit score is below the F3 threshold by more
#: than this (see the module header).
MARGIN_BITS = 1.0
#: HMMER's sparse rescaling threshold on E (``forward_engine``).
RESCALE_AT = 1.0e4


class Counter:
    """Slots of the int32 counter array the kernel reads and advances."""

    WORK = 0  #: next item of the work list


#: Parameters of the Forward bound kernel, in order.
ARGS = (
    Arg("residues", "uint32[:]"), Arg("word_offsets", "int64[:]"), Arg("lengths", "int32[:]"),
    Arg("items", "int32[:]"), Arg("n_items_at", "int32[:]"), Arg("n_items_slot", "int32"),
    Arg("counters", "int32[:]"), Arg("vit_status", "int8[:]"), Arg("vit_xc", "int32[:]"),
    Arg("vit_from", "int32[:]"), Arg("filtersc", "float32[:]"), Arg("move_by_length", "int32[:]"),
    Arg("vit_band", "float32"), Arg("tables", "float32[:]"), Arg("N", "int32"), Arg("out_score", "float32[:]"),
)


@dataclass(frozen=True)
class FwdSpec:
    """The Forward bound kernel (one specialisation: its loops run over the model's length,
    its rows live in dynamic shared memory)."""

    @property
    def name(self) -> str:
        return "fwd_bound_v1"

    def source(self, binding: str) -> str:
        return generate(binding)


def shared_bytes(N: int) -> int:
    """Dynamic shared memory of one warp (a block) for ``N`` node slots: rows M, I, D, and
    the lanes' D->D maps (a, b) and row sums of E."""
    return (3 * N + 96) * 4


def generate(binding: str) -> str:
    """The source of the kernel module (see the module header)."""
    from ...constants import BASE_W, SCALE_W

    e = Emitter()
    preamble(e, "Forward bound kernel.", binding)
    e("import math", "from numba import float32, float64",
      f"OK = {STATUS_OK}; RANGE = {STATUS_RANGE}; UNCERTAIN = {STATUS_UNCERTAIN}; LOG2 = {LOG2!r}",
      f"BASE_W = float32({float(BASE_W)!r}); SCALE_W = float32({float(SCALE_W)!r})",
      "F0 = float32(0.0); F1 = float32(1.0); F3 = float32(3.0); HALF = float32(0.5)",
      f"RESCALE_AT = float32({RESCALE_AT!r}); NAN = float32(np.nan); NEG_INF = float32(-np.inf)",
      *[f"T_{row} = {r}" for r, row in enumerate(TRANSITION_ROWS)], f"EMISSIONS = {len(TRANSITION_ROWS)}", "", "")
    e(jit_decorator(signature(ARGS), binding))
    with e.block(f"def kernel({parameter_list(ARGS)}):"):
        e("rows = cuda.shared.array(0, float32)", "lane = int32(cuda.threadIdx.x & 31)",
          "mo = int32(0); io = N; do = 2 * N; ao = 3 * N; bo = ao + 32; eo_sum = bo + 32", "S = N >> 5",
          "tmm = T_MM * N; tim = T_IM * N; tdm = T_DM * N; tbm = T_BM * N",
          "tmi = T_MI * N; tii = T_II * N; tmd = T_MD * N; tdd = T_DD * N",
          "n_items = n_items_at[n_items_slot]")
        with e.block("while True:"):
            claim_work(e, "k", "lane == 0", "1", Counter.WORK, "n_items")
            e("score = NAN", "p = items[k]", "L = lengths[p]", "status = vit_status[k]", "run = status == RANGE")
            with e.block("if status == OK and vit_xc[k] > -32768:"):
                e("v = (float32(vit_xc[k]) + float32(move_by_length[L]) - BASE_W) / SCALE_W - F3",
                  "run = float32(float64(v - filtersc[vit_from[k]]) / LOG2) >= vit_band")
            with e.block("if run:"):
                _forward(e)
            with e.block("if lane == 0:"):
                e("out_score[k] = score")
    return e.text()


def _forward(e: Emitter) -> None:
    """One target's Forward score into ``score`` (the whole warp)."""
    with e.block("for j in range(S):"):
        e("c = j * 32 + lane", "rows[mo + c] = F0", "rows[io + c] = F0", "rows[do + c] = F0")
    e("wb = word_offsets[p]", "move = F3 / (float32(L) + F3)", "loop = F1 - move",
      "xN = F1; xJ = F0; xC = F0; xB = move", "total = float64(0.0)", "w = uint32(0)", "i = 0")
    with e.block("while i < L:"):
        with e.block("if (i & 3) == 0:"):
            e("w = residues[wb + (i >> 2)]")
        e("eo = (EMISSIONS + int32((w >> uint32(8 * (i & 3))) & uint32(255))) * N",
          "pm = F0; pi = F0; pd = F0", "cuda.syncwarp(FULL)")
        with e.block("if lane > 0:"):  # the last node of the lane before, from the previous row
            e("c = (S - 1) * 32 + lane - 1", "pm = rows[mo + c]", "pi = rows[io + c]", "pd = rows[do + c]")
        e("cuda.syncwarp(FULL)", "a = F0; b = F1")
        with e.block("for j in range(S):"):
            e("c = j * 32 + lane", "om = rows[mo + c]; oi = rows[io + c]; od = rows[do + c]",
              "m = tables[eo + c] * (pm * tables[tmm + c] + pi * tables[tim + c] + pd * tables[tdm + c]"
              " + xB * tables[tbm + c])",
              "rows[mo + c] = m", "rows[io + c] = om * tables[tmi + c] + oi * tables[tii + c]",
              "a = m * tables[tmd + c] + a * tables[tdd + c]", "b = b * tables[tdd + c]",
              "pm = om; pi = oi; pd = od")
        e("rows[ao + lane] = a", "rows[bo + lane] = b", "cuda.syncwarp(FULL)", "d = F0")
        with e.block("for j in range(lane):"):  # the D value entering this lane's run
            e("d = rows[ao + j] + rows[bo + j] * d")
        e("row_e = F0")
        with e.block("for j in range(S):"):
            e("c = j * 32 + lane", "m = rows[mo + c]", "rows[do + c] = d", "row_e += m + d",
              "d = m * tables[tmd + c] + d * tables[tdd + c]")
        e("rows[eo_sum + lane] = row_e", "cuda.syncwarp(FULL)", "row_e = F0")
        with e.block("for j in range(32):"):  # every lane sums in the same order
            e("row_e += rows[eo_sum + j]")
        e("xN = xN * loop", "xC = xC * loop + row_e * HALF", "xJ = xJ * loop + row_e * HALF",
          "xB = xJ * move + xN * move")
        with e.block("if row_e > RESCALE_AT:"):
            e("inv = F1 / row_e", "xN = xN * inv; xC = xC * inv; xJ = xJ * inv; xB = xB * inv",
              "total += math.log(float64(row_e))")
            with e.block("for j in range(S):"):
                e("c = j * 32 + lane", "rows[mo + c] = rows[mo + c] * inv", "rows[io + c] = rows[io + c] * inv",
                  "rows[do + c] = rows[do + c] * inv")
        e("i += 1")
    e("last = xC * move", "score = NEG_INF")
    with e.block("if last > F0:"):
        e("score = float32(total + math.log(float64(last)))")
