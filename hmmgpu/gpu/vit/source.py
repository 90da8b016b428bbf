"""The Viterbi filter kernel: what it computes, the data layout, and why it is exact.

What is computed
----------------
HMMER's second filter, ``p7_ViterbiFilter``, scores a target against the full multi-hit
local profile (match, insert and delete states, the N/B/E/C/J special states) in
saturating signed 16-bit arithmetic ("words", 1/500 bit units, -32768 standing for -inf).
For every target of a work list this kernel returns HMMER's integer ``C`` value (the score
follows from it on the host with HMMER's float steps), or *uncertain* for the rare targets
it leaves to the CPU reference (below). Row by row (residue ``x`` of the target):

* ``M(k) = sat(max(B + tBM(k), M'(k-1) + tMM(k), I'(k-1) + tIM(k), D'(k-1) + tDM(k)) + rw[x][k])``
  (primes: the previous row), ``I(k) = max(M'(k) + tMI(k), I'(k) + tII(k))``, and the
  partial ``D(k+1) = M(k) + tMD(k)``;
* ``E`` = the row's largest M; ``C = max(C, E - 500)``, ``J = max(J, E - 500)`` and the next
  row's ``B = max(J, N) + move(L)``;
* the *lazy-F* test: only when ``max D + ddbound > B`` are the D->D paths propagated along
  the row, ``D(k) = max(D(k), D(k-1) + tDD(k-1))`` (HMMER's own bound, docs/algorithms.md §6.4 and §7.3).

Data layout
-----------
One warp per target: 32 threads, each holding ``Q`` words of two 16-bit lanes, 64 lanes in
all, every lane a run of ``Q`` consecutive *slots*. Slot ``s`` (0..64Q-1) lives in word
``s mod Q`` of lane ``s div Q``; thread ``t`` holds lanes ``2t`` (low half) and ``2t+1``
(high half). Node ``k`` is slot ``s = k - 1 + pad`` with ``pad = 64Q - M``: the *padding is
at the front*, so node M is always the warp's very last slot. Moving a value from node k-1
to node k is, for word 0 of each lane, a shuffle and a funnel shift (``shift_up16``). Every
per-node table is a row of ``32 Q`` words ordered ``[q][t]``, so that the 32 threads read 32
consecutive words. The emission rows (one per residue code) sit in shared memory; the seven
transition rows are loaded into registers once per launch for small ``Q``, or read from
shared memory for large ``Q`` (``tuning.VIT_TRANSITIONS_IN_REGISTERS_MAX_Q``).

Why the code looks as it does
-----------------------------
Hopper's DPX instruction ``max(a + b, c)`` on two 16-bit lanes (``addmax16``) does a cell's
add-and-compare in one instruction, but its add wraps around instead of saturating, and
saturating 16-bit adds are emulated (5x slower). So the kernel keeps every M, I and D value
at or above a floor ``FLOOR = -16384`` instead of HMMER's -32768: each update is
``max(value + transition, FLOOR)``, one ``addmax16``, and with values >= FLOOR and finite
transitions >= -16384 no sum can wrap. A warp-wide vote per row (``ballot``) replaces the
row reductions: the group maximum of E is taken only when some lane's E exceeds the largest
E so far (only then do J and B change), the D->D pass runs only when some lane's D passes
HMMER's bound, and a possible overflow is caught before it could wrap.

Why the result is exact
-----------------------
Clamping at FLOOR changes a value only where HMMER's is below FLOOR, and such a value can
never decide anything: every M cell is at least ``B + tBM(k)``, and the host checks per model
(``launch.exactness_conditions``) that ``Bmin + tBM(k) >= FLOOR`` and
``Bmin + tBM(k) + rw[x][k] >= FLOOR`` for every node and real residue (``Bmin`` is B's
smallest value, at the database's longest length), so a term carried from a clamped value
(at most ``FLOOR + transition <= FLOOR``) never wins a maximum, every M is exact, and so are
E, C, J and B; the clamped maximum of D equals HMMER's whenever HMMER's is >= FLOOR, and
otherwise both lazy-F tests fail (the host checks ``FLOOR + ddbound <= Bmin``). Three cases
keep HMMER's own arithmetic: residues with no emission score (gap, ``*``, ``~``: every
``rw = -32768``) take ``max(m - 32768, -32768)`` as two wrap-free steps of -16384 (their
emission row holds -16384 and a second step adds it again; for every other residue the
second step adds 0), with E from the row maximum of ``m`` in 32-bit integers; node M's ``M -> D`` value (``M(M) - 32768``,
which HMMER's maximum of D includes) is computed wrap-free through a guard word; and a row
where some ``m + rw`` could reach 32767 (HMMER's overflow, +inf) stops the target, which is
marked *uncertain* and finished by the CPU reference (:func:`hmmgpu.cpu.filters.viterbi_filter`).
The padding slots get transitions that keep them at most ``max(B - Bmin - 32768, FLOOR)``,
below every real cell, so they never reach a real node, E, or the maximum of D. Models
that fail a condition (none of the Pfam models tested) run the filter on the CPU.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from hmmgpu.constants import STATUS_OK
from hmmgpu.gpu.runtime.emit import Emitter, claim_work, jit_decorator, preamble
from hmmgpu.gpu.runtime.kargs import Arg, parameter_list, signature

#: The floor that replaces -32768 in the kernel (see the module header).
FLOOR = -16384
#: Residue codes whose emission scores are all -inf (gap, '*', '~').
SPECIAL_CODES = (20, 27, 28)
#: Transition rows, in table order: into node k (BM, MM, IM, DM), out of node k (MD, MI, II, DD).
TRANSITION_ROWS = ("BM", "MM", "IM", "DM", "MD", "MI", "II", "DD")
#: Residue codes in the emission table.
NX = 29
#: Status of a target the kernel leaves to the CPU reference.
STATUS_UNCERTAIN = -1


class Counter(IntEnum):
    """Slots of the int32 counter array the Viterbi kernel reads and advances."""

    WORK = 0  #: next item of the work list


#: Parameters of the Viterbi filter kernel, in order.
ARGS = (
    Arg("residues", "uint32[:]"), Arg("word_offsets", "int64[:]"), Arg("lengths", "int32[:]"),
    Arg("items", "int32[:]"), Arg("n_items_at", "int32[:]"), Arg("n_items_slot", "int32"),
    Arg("counters", "int32[:]"), Arg("emissions", "uint32[:]"), Arg("transitions", "uint32[:]"),
    Arg("dd_sums", "int32[:]"), Arg("overflow_at", "int32[:]"), Arg("ddbound", "int32"),
    Arg("move_by_length", "int32[:]"), Arg("out_status", "int8[:]"), Arg("out_xc", "int32[:]"),
)


@dataclass(frozen=True)
class VitSpec:
    """One Viterbi filter kernel specialisation: ``Q`` words per thread, and where the
    transition rows are read from (``registers`` or ``shared``)."""

    Q: int
    transitions: str  #: "registers" or "shared"
    shared: str = "static"  #: the block's shared memory: "static" (<= 48 KB) or "dynamic"

    @property
    def capacity(self) -> int:
        """Model nodes one warp holds."""
        return 64 * self.Q

    @property
    def emission_words(self) -> int:
        return NX * 32 * self.Q

    @property
    def transition_words(self) -> int:
        return len(TRANSITION_ROWS) * 32 * self.Q

    @property
    def shared_words(self) -> int:
        """Shared memory of one block, in 32-bit words."""
        return self.emission_words + (self.transition_words if self.transitions == "shared" else 0)

    @property
    def name(self) -> str:
        return f"vit_q{self.Q}_{self.transitions}_{self.shared}_v2"

    def source(self, binding: str) -> str:
        """The kernel module's text for lane binding ``binding``."""
        return generate(self, binding)


def _t(row: str, q: int, spec: VitSpec) -> str:
    """The transition word of ``row`` for word ``q``: a register, or a shared-memory read."""
    r = TRANSITION_ROWS.index(row)
    if spec.transitions == "registers":
        return f"{row.lower()}{q}"
    return f"smem[TRO + {(r * spec.Q + q) * 32} + t]"


def _row_update(e: Emitter, spec: VitSpec) -> None:
    """One row of the recurrence over the thread's Q words (descending q, in place)."""
    Q = spec.Q
    for q in range(Q - 1, -1, -1):
        mp, ip, dp = ("sm", "si", "sd") if q == 0 else (f"m{q - 1}", f"i{q - 1}", f"d{q - 1}")
        e(f"x1 = add16(Bv, {_t('BM', q, spec)})",
          f"mm = addmax16({mp}, {_t('MM', q, spec)}, x1)",
          f"mm = addmax16({ip}, {_t('IM', q, spec)}, mm)",
          f"mm = addmax16({dp}, {_t('DM', q, spec)}, mm)",
          "mmx = max16(mmx, mm)",
          # the emission; a residue without one adds -16384 twice: M = max(m - 32768, FLOOR), wrap-free
          f"nm = addmax16(addmax16(mm, smem[eo + {q * 32}], FLOORV), second, FLOORV)",
          "ev = max16(ev, nm)",
          f"i{q} = addmax16(i{q}, {_t('II', q, spec)}, addmax16(m{q}, {_t('MI', q, spec)}, FLOORV))")
        if q == Q - 1:  # node M's M->D is -inf in HMMER: guard word makes it max(M, 0) - 32768
            e(f"dlast = addmax16(max16(nm, MDGUARD), {_t('MD', q, spec)}, FLOORV)", "dmx = max16(dmx, dlast)")
        else:
            e(f"d{q + 1} = addmax16(nm, {_t('MD', q, spec)}, FLOORV)", f"dmx = max16(dmx, d{q + 1})")
        e(f"m{q} = nm")


def _dd_pass(e: Emitter, spec: VitSpec) -> None:
    """Propagate D->D along the whole row: within lanes, a scan across lanes, then the carries."""
    Q = spec.Q
    for q in range(1, Q):
        e(f"d{q} = addmax16(d{q - 1}, {_t('DD', q - 1, spec)}, d{q})")
    e(f"out = addmax16(d{Q - 1}, {_t('DD', Q - 1, spec)}, FLOORV)",
      "out_lo = lo16(out)", "out_hi = hi16(out)",
      # carry c entering the thread's low lane leaves its high lane as max(A, c + S)
      "A = int32(max(out_hi, out_lo + s_hi))", "S = int32(s_lo + s_hi)", "off = 1")
    with e.block("while off < 32:"):
        e("a_up = cuda.shfl_up_sync(FULL, A, off)", "s_up = cuda.shfl_up_sync(FULL, S, off)")
        with e.block("if t >= off:"):
            e("A = int32(max(A, a_up + S))", "S = int32(S + s_up)")
        e("off <<= 1")
    e("cin = cuda.shfl_up_sync(FULL, A, 1)")
    with e.block("if t == 0:"):
        e("cin = FLOOR")
    e("cin = int32(max(cin, FLOOR))", "chi = int32(max(max(out_lo, cin + s_lo), FLOOR))", "v = pack16(cin, chi)")
    for q in range(Q):
        e(f"d{q} = max16(d{q}, v)")
        if q < Q - 1:
            e(f"v = addmax16(d{q}, {_t('DD', q, spec)}, FLOORV)")


def generate(spec: VitSpec, binding: str) -> str:
    """The source of one Viterbi filter kernel module (see the module header)."""
    Q = spec.Q
    e = Emitter()
    preamble(e, f"Viterbi filter kernel {spec.name}.", binding)
    e(f"Q = {Q}; QW = {32 * Q}; EW = {spec.emission_words}; SW = {spec.shared_words}; TRO = {spec.emission_words}",
      f"FLOOR = {FLOOR}; OK = {STATUS_OK}; UNCERTAIN = {STATUS_UNCERTAIN}",
      "FLOORV = np.uint32(0xC000C000); NEGINF = np.uint32(0x80008000); ZERO = np.uint32(0)",
      "MINUSFLOOR = FLOORV",
      "", "")
    e(jit_decorator(signature(ARGS), binding))
    with e.block(f"def kernel({parameter_list(ARGS)}):"):
        e("smem = cuda.shared.array(%s, uint32)" % ("SW" if spec.shared == "static" else "0"))
        with e.block("for j in range(cuda.threadIdx.x, EW, cuda.blockDim.x):"):
            e("smem[j] = emissions[j]")
        if spec.transitions == "shared":
            with e.block(f"for j in range(cuda.threadIdx.x, {spec.transition_words}, cuda.blockDim.x):"):
                e("smem[TRO + j] = transitions[j]")
        e("cuda.syncthreads()", "t = cuda.threadIdx.x & 31")
        if spec.transitions == "registers":
            for r, row in enumerate(TRANSITION_ROWS):
                e(*[f"{row.lower()}{q} = transitions[{(r * Q + q) * 32} + t]" for q in range(Q)])
        e("s_lo = dd_sums[2 * t]", "s_hi = dd_sums[2 * t + 1]",
          "MDGUARD = np.uint32(0x0000C000) if t == 31 else FLOORV",  # node M: high half of thread 31
          "n_items = n_items_at[n_items_slot]")
        with e.block("while True:"):
            claim_work(e, "k", "t == 0", "1", Counter.WORK.value, "n_items")
            e("p = items[k]", "L = lengths[p]", "wb = word_offsets[p]", "move = move_by_length[L]",
              *[f"m{q} = FLOORV; i{q} = FLOORV; d{q} = FLOORV" for q in range(Q)],
              "B = 12000 + move", "Bv = bcast16(B)", "grow_at = int32(12500)",
              "emax = int32(-32768)", "status = OK", "rw = u32(0)", "i = 0")
            with e.block("while i < L:"):
                with e.block("if (i & 3) == 0:"):
                    e("rw = residues[wb + (i >> 2)]")
                e("x = int32((rw >> u32(8 * (i & 3))) & u32(255))",
                  "sm = shift_up16(m{0}, t == 0, FLOORV)".format(Q - 1),
                  "si = shift_up16(i{0}, t == 0, FLOORV)".format(Q - 1),
                  "sd = shift_up16(d{0}, t == 0, FLOORV)".format(Q - 1),
                  "mmx = NEGINF", "ev = NEGINF", "dmx = NEGINF", "eo = x * QW + t",
                  "special = x == 20 or x >= 27", "second = MINUSFLOOR if special else ZERO")
                _row_update(e, spec)
                e("mt = hmax16(mmx)", "et = max(mt - 32768, -32768) if special else hmax16(ev)",
                  "over = mt >= overflow_at[x]")
                e("d0 = shift_up16(dlast, t == 0, FLOORV)")
                with e.block("if cuda.ballot_sync(FULL, over) != 0:"):
                    e("status = UNCERTAIN", "break")
                with e.block("if cuda.ballot_sync(FULL, et > grow_at) != 0:"):
                    # E beats every earlier row and 12500: J and B change (C follows at the end)
                    e("E = group_max(et, 32)", "grow_at = E", "B = E - 500 + move", "Bv = bcast16(B)")
                e("emax = max(emax, et)")
                with e.block("if cuda.ballot_sync(FULL, hmax16(dmx) + ddbound > B) != 0:"):
                    _dd_pass(e, spec)
                e("i += 1")
            e("emax = group_max(emax, 32)")
            with e.block("if t == 0:"):
                e("out_status[k] = status", "out_xc[k] = max(emax - 500, -32768)")
    return e.text()
