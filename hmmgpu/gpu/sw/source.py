"""Smith-Waterman scan kernel: what it computes, the data layout, and why it is exact.

What is computed
----------------
For one query and every target of a chunk of the resident database, the optimal local
alignment score with affine gaps (a gap's first residue costs ``go`` = open + extend, every
further one ``ge``)::

    E(i,j) = max(E(i-1,j) - ge, H(i-1,j) - go)       gap along the target, per query column
    F(i,j) = max(F(i,j-1) - ge, H(i,j-1) - go)       gap along the query, within a row
    H(i,j) = max(0, H(i-1,j-1) + S(q_j, t_i), E(i,j), F(i,j))      score = max H

with target residues t_i as rows (streamed) and query columns q_j (in registers).

Data layout
-----------
A lane group of ``G`` threads (``32/G`` groups per warp) aligns a *pair* of targets, the
consecutive positions ``2k`` and ``2k+1`` of the length-sorted database (similar lengths):
every 32-bit word holds one cell of each, target ``2k`` in the low 16-bit lane. Thread ``g``
owns ``Q`` consecutive query columns ``g*Q .. g*Q+Q-1`` of the current *tile* of ``C = G*Q``
columns, as registers ``h_q`` (H of the previous row) and ``e_q`` (E). Rows stream through
the group as a wavefront: at step ``s`` thread ``g`` computes row ``s - g``, taking the last
column's H and the running F of thread ``g-1`` (computed one step earlier) by two shuffles,
and the residue pair by a third; thread 0 reads the residues, four per word. The diagonal
of the first column is the left H received one step before.

The query profile lives in shared memory, one row of 16-bit scores per residue code and a
30th row for padding: word ``w`` of row ``x`` holds ``S(q_2w, x)`` and ``S(q_2w+1, x)``.
Thread ``g`` reads its ``Q/2`` words of the rows of both targets' residues and makes each
column's pair word with one byte permute (``prmt``: low halves, then high halves). Rows are
a multiple of 32 words apart and ``Q/2`` is odd, so the 32 threads of a group read 32
different banks whatever their residues.

A query longer than one tile is cut into tiles launched in turn: the last thread of a group
writes its H and F of every row (the tile's right boundary column) to global memory, and
the first thread of the next tile's launch reads them as its left boundary.

Launches and load balance
-------------------------
A launch is a persistent grid: each warp's lane 0 takes the next ``2 * 32/G`` positions from
an atomic counter until none is left (:func:`hmmgpu.gpu.runtime.emit.claim_work`). Positions are
ordered longest first (:mod:`hmmgpu.gpu.resident`), so the longest targets are claimed
first, by the warps of the first wave, and the short ones fill the end of the launch
(longest-processing-time-first order); claiming the other way round would leave the longest
pairs to a few warps at the end. What this order cannot shorten is one long pair's serial
rows: on the real proteins (longest 8,081 residues) the longest pairs of a G16 launch still
run after every other warp is done (benchmarks/NOTES.md has a model of that tail).

A query costs its launches only: the first tile writes every score (later tiles keep the
maximum), so the scores need no zeroing, and the last warp to leave the work loop (the
``DONE`` counter, after a fence) sets the counters back to zero for the next launch on the
stream.

Why the code looks as it does
-----------------------------
Per cell pair the inner step is one permute, an add and a 3-way max with a floor at 0
(``max.relu.s16x2``), one add and two add-max (``viaddmax``) for E and F, and half a 3-way
max for the running maximum: DPX instructions on sm_90. The column loop is unrolled (every
``h_q``, ``e_q`` a register) and the row loop four times (one residue word per four rows),
so a kernel is specialised per (G, Q) from the table in :mod:`hmmgpu.gpu.runtime.tuning`.
The rest of the row step is kept to a few instructions per cell pair, since most of it
would share the integer pipe with the DPX instructions (benchmarks/sw_ptx_report.py counts
the loop's SASS; benchmarks/NOTES.md has the figures):

* every thread computes a row at every step, with no branch around the cells: the steps of
  the wavefront's fill (``s < g``) and drain (rows past the pair's end) compute padding rows
  (below). A branch made the compiler merge every ``h_q`` and ``e_q`` where it ends, two
  register moves per cell pair;
* the profile index is unsigned 32-bit and a row's ``Q/2`` words are that index plus a
  constant, so every shared-memory load takes an immediate offset from one address per
  target and row. numba checks a signed index for a negative value (Python's wrap-around):
  with ``int64`` indices that cost two compares, a select and an address per load;
* row and step counters are ``int32`` (numba's default integers are 64-bit: two-word
  compares and adds), and the residue pair travels as one ``int32`` (an ``int64`` is two
  shuffles); global indices are ``uint64`` (no wrap-around check);
* the arrays are declared C-contiguous (``[::1]``: an index is scaled by the item size, not
  by the array's stride), so the boundary column of a tiled query is read (thread 0) and
  written (thread ``G-1``) at constant offsets from one address per four rows: in the
  middle tiles of a long query the boundary costs a load or store and a predicate per word.

Why the result is exact
-----------------------
Lanes are 16-bit with wrap-around adds. Let ``LIMIT = 32767 - max(S)``. Take the cells in
dependency order: while every cell so far has exact H below LIMIT, every sum formed is below
32767 (H + S) or decreasing (gaps), and E, F and H stay at or above ``-go``, far from -32768:
no lane wraps, so the next cell is exact too. Hence if the exact maximum is below LIMIT the
whole computation is exact; otherwise the first cell (in that order) whose exact H reaches
LIMIT is itself computed exactly and enters the running maximum, which only grows. So a
reported maximum at or above LIMIT means "saturated" and the host rescores that target
exactly in 32-bit arithmetic; below LIMIT it is the exact score. Padding (rows past a
target's end, code 29; columns past the query's end) scores -1000: such cells lie after every
real cell in both directions, feed none of them, and never exceed the real maximum. In the
drain, thread 0 takes H = 0 and F = NEG from the left, as in the first tile.

The fill steps before thread ``g``'s first row (``g`` of them) see the padding pair (every
thread starts with it), H = 0 from the left (thread ``g-1``'s fill, or its initial value)
and F at most ``-go``: each leaves every H at 0 and sets E to ``-go``. That equals the
initial state: an initial E or F of at most ``ge - go`` never changes a result, because it
lies below H's floor 0 and its next value ``max(E - ge, H - go)`` is ``H - go``.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from hmmgpu.gpu.runtime.emit import Emitter, claim_work, jit_decorator, preamble
from hmmgpu.gpu.runtime.kargs import Arg, parameter_list, signature

#: Profile rows: the 29 Easel codes and the padding row.
NROWS = 30
#: Profile row of padding (rows past a target's end).
PAD_ROW = 29
#: Score of every padding cell.
PAD_SCORE = -1000
#: Initial E and F ("minus infinity", far from wrapping after a few extensions).
NEG = -16384
#: Byte code of the database's padding residue ('~').
PAD_CODE = 28


class Counter(IntEnum):
    """Slots of the int32 counter array of a launch."""

    WORK = 0  #: next position to hand out (atomic work counter)
    DONE = 1  #: warps that have left the work loop


N_COUNTERS = len(Counter)

#: Kernel parameters, in order.
ARGS = (
    Arg("residues", "uint32[::1]"), Arg("word_offsets", "int64[::1]"), Arg("lengths", "int32[::1]"),
    Arg("n_targets", "int32"), Arg("profile", "uint32[::1]"), Arg("prof_stride", "int32"), Arg("tile", "int32"),
    Arg("first", "int32"), Arg("last", "int32"), Arg("go", "int32"), Arg("ge", "int32"),
    Arg("bnd_in", "uint32[::1]"), Arg("bnd_out", "uint32[::1]"), Arg("counters", "int32[::1]"),
    Arg("scores", "int32[::1]"),
)


def row_words(G: int, Q: int) -> int:
    """Words per profile row of one tile: ``G*Q/2`` rounded up to a multiple of 32 (bank alignment)."""
    return (G * Q // 2 + 31) // 32 * 32


@dataclass(frozen=True)
class SwSpec:
    """One Smith-Waterman kernel specialisation: ``G`` threads per target pair, ``Q`` columns per thread."""

    G: int
    Q: int

    def __post_init__(self):
        if self.G not in (1, 2, 4, 8, 16, 32) or self.Q % 2 or (self.Q // 2) % 2 == 0:
            raise ValueError(f"SwSpec needs G a power of two <= 32 and Q/2 odd, not G={self.G} Q={self.Q}")

    @property
    def C(self) -> int:
        """Query columns per tile."""
        return self.G * self.Q

    @property
    def table_words(self) -> int:
        """Shared-memory words of one tile's profile."""
        return NROWS * row_words(self.G, self.Q)

    @property
    def name(self) -> str:
        return f"sw_s16_g{self.G}_q{self.Q}_v2"

    def source(self, binding: str) -> str:
        """The kernel module's text for lane binding ``binding``."""
        return generate(self, binding)


def _cells(e: Emitter, spec: SwSpec) -> None:
    """One row of the thread's Q columns (``d`` holds the first column's diagonal, ``f`` F)."""
    QW = spec.Q // 2
    e("ba = u32(xa * PW + gq)", "bb = u32(xb * PW + gq)")
    for k in range(QW):
        e(f"A = sprof[ba + u32({k})]", f"B = sprof[bb + u32({k})]")
        for half in (0, 1):
            q = 2 * k + half
            e(f"p = {'lo16s' if half == 0 else 'hi16s'}(A, B)",
              f"hn = max3relu16(add16(d, p), e_{q}, f)",
              f"d = h_{q}", f"h_{q} = hn",
              "tg = add16(hn, NGO)",
              f"e_{q} = addmax16(e_{q}, NGE, tg)",
              "f = addmax16(f, NGE, tg)")
        e(f"m = max3_16(m, h_{2 * k}, h_{2 * k + 1})")


def generate(spec: SwSpec, binding: str) -> str:
    """The source of one Smith-Waterman kernel module (see the module header)."""
    G, Q = spec.G, spec.Q
    e = Emitter()
    preamble(e, f"Smith-Waterman kernel {spec.name}.", binding)
    e("from numba import uint64",
      "max3relu16 = _L.max3relu16; lo16s = _L.lo16s; hi16s = _L.hi16s",
      f"G = {G}; Q = {Q}; QW = {Q // 2}; WPG = {32 // G}; PW = {row_words(G, Q)}; TABW = {spec.table_words}",
      f"PAD_ROW = {PAD_ROW}; PAD_PAIR = {PAD_ROW | PAD_ROW << 8}; NEG = {NEG}", "")
    e(jit_decorator(signature(ARGS), binding))
    with e.block(f"def kernel({parameter_list(ARGS)}):"):
        e("sprof = cuda.shared.array(TABW, uint32)", "t0 = tile * PW")
        with e.block("for j in range(cuda.threadIdx.x, TABW, cuda.blockDim.x):"):
            e("x = j // PW", "sprof[j] = profile[x * prof_stride + t0 + (j - x * PW)]")
        e("cuda.syncthreads()")
        e("lane = int32(cuda.threadIdx.x & 31)", "g = int32(lane & (G - 1))", "gi = int32(lane // G)",
          "gq = int32(g * QW)", "NGO = bcast16(-go)", "NGE = bcast16(-ge)", "NEGW = bcast16(NEG)", "ZERO = u32(0)")
        with e.block("while True:"):
            claim_work(e, "b0", "lane == 0", "2 * WPG", Counter.WORK.value, "n_targets")
            e("pa = int32(b0 + 2 * gi)", "pb = int32(pa + 1)", "La = int32(0)", "Lb = int32(0)",
              "wa = uint64(0)", "wb = uint64(0)")
            with e.block("if pa < n_targets:"):
                e("La = lengths[pa]", "wa = uint64(word_offsets[pa])")
            with e.block("if pb < n_targets:"):
                e("Lb = lengths[pb]", "wb = uint64(word_offsets[pb])")
            e("rows = max(La, Lb)", "bb2 = wa * uint64(8)", "nsteps = group_max(int32(rows + (G - 1)), 32)")
            e(*[f"h_{q} = ZERO" for q in range(Q)], *[f"e_{q} = NEGW" for q in range(Q)])
            e("m = ZERO", "hprev = ZERO", "hlast = ZERO", "fout = NEGW", "xw = int32(PAD_PAIR)", "s = int32(0)")
            with e.block("while s < nsteps:"):
                e("ra = u32(0)", "rb = u32(0)", "sw = uint64(s >> 2)",
                  "bi = bb2 + uint64(2 * s)")
                with e.block("if g == 0:"):
                    with e.block("if s < La:"):
                        e("ra = residues[wa + sw]")
                    with e.block("if s < Lb:"):
                        e("rb = residues[wb + sw]")
                for u in range(4):
                    e(f"r = int32(s + ({u} - g))",
                      "hl = u32(cuda.shfl_up_sync(FULL, i32(hlast), 1))",
                      "fl = u32(cuda.shfl_up_sync(FULL, i32(fout), 1))",
                      "xw = cuda.shfl_up_sync(FULL, xw, 1)")
                    with e.block("if g == 0:"):
                        e(f"xa = int32((ra >> u32({8 * u})) & u32(255)) if r < La else int32(PAD_ROW)",
                          f"xb = int32((rb >> u32({8 * u})) & u32(255)) if r < Lb else int32(PAD_ROW)",
                          "xw = int32(xa | (xb << 8))")
                        with e.block("if first != 0 or r >= rows:"):
                            e("hl = ZERO", "fl = NEGW")
                        with e.block("else:"):
                            e(f"hl = bnd_in[bi + uint64({2 * u})]", f"fl = bnd_in[bi + uint64({2 * u + 1})]")
                    e("xa = int32(xw & 255)", "xb = int32(xw >> 8)", "d = hprev", "hprev = hl", "f = fl")
                    _cells(e, spec)
                    e(f"hlast = h_{Q - 1}", "fout = f")
                    with e.block("if g == G - 1 and last == 0 and r >= 0 and r < rows:"):
                        at = [2 * (u - (G - 1)) + k for k in (0, 1)]  # thread G-1's row s + u - (G-1), from bi
                        e(*[f"bnd_out[bi {'+' if a >= 0 else '-'} uint64({abs(a)})] = {v}"
                            for a, v in zip(at, ("hlast", "fout"))])
                e("s = int32(s + 4)")
            # the pair's maxima over the group, lane by lane
            e("off = G >> 1")
            with e.block("while off > 0:"):
                e("m = max16(m, u32(cuda.shfl_xor_sync(FULL, i32(m), off)))", "off >>= 1")
            with e.block("if g == 0:"):
                e("lo = int32(m & 0xFFFF)", "hi = int32((m >> 16) & 0xFFFF)")
                with e.block("if lo >= 32768:"):
                    e("lo -= 65536")
                with e.block("if hi >= 32768:"):
                    e("hi -= 65536")
                with e.block("if pa < n_targets and (first != 0 or lo > scores[pa]):"):
                    e("scores[pa] = lo")
                with e.block("if pb < n_targets and (first != 0 or hi > scores[pb]):"):
                    e("scores[pb] = hi")
        # the last warp out leaves the counters at zero for the next launch
        with e.block("if lane == 0:"):
            e("cuda.threadfence()")
            with e.block(f"if cuda.atomic.add(counters, {Counter.DONE.value}, 1) == "
                         "cuda.gridDim.x * ((cuda.blockDim.x + 31) // 32) - 1:"):
                e(f"counters[{Counter.WORK.value}] = 0", f"counters[{Counter.DONE.value}] = 0")
    return e.text()
