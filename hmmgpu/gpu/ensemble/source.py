"""The stochastic-trace ensemble kernel of a clustered region (``region_trace_ensemble``'s
sampling): what it computes, why it is exact, why the code looks as it does.

What is computed
----------------
Domain definition samples 200 paths through the multihit Forward matrix of every region that
may hold several domains (hmmer-domaindef-spec.md §2.3-§2.6; CPU reference
:func:`hmmgpu.cpu.stotrace.trace_ensemble`). For each region of a batch (of any targets and
models) this kernel draws the ``nsamples`` stochastic traces with the pipeline's random stream
draw for draw, and gives the host what the rest needs:

* ``pairs``: every sampled domain as (sample, i, j, k, m), its first and last M residue in
  target coordinates and its first and last M node, in sample and trace order: the input of
  ``p7_spensemble_Cluster`` (:func:`hmmgpu.cpu.spensemble.cluster`);
* ``acc[1..Lr]``: the region's null2 sums, per residue the float32 sum over the samples of the
  residue's ``p7_Null2_ByTrace`` odds in its sampled domain, 1 outside domains (and at a
  domain's first M residue), in sample order;
* ``draws`` (the random numbers read), ``status`` and ``ftz``: some choice could have gone
  otherwise under flush-to-zero (hmmsearch's mode), the CPU reference's ``ftz_differs``.

The host then does what is small and must be glibc's or sequential: ``n2sc = logf(acc /
200)`` with the C library's ``logf``, the single-linkage clustering, the domination filter
(:func:`hmmgpu.cpu.domaindef.region_result`). A region whose status is not OK (the table of
draws or the pair buffer ran out, a path Easel would abort on, a step outside the matrix that
only a zero-probability path reaches) is sampled again by the CPU reference.

The random numbers
------------------
Every clustered region reseeds Easel's fast generator to the pipeline's seed, so every region
reads the same stream ``u[0], u[1], ...``: one device table of doubles
(:func:`hmmgpu.cpu.stotrace.uniform_table`) and a cursor per region. Each step of a trace
draws once, except from N (no draw); the cursor runs on from sample to sample.

One thread per region, one region per warp
------------------------------------------
The samples of a region are sequential (sample t+1 starts at the draw where sample t ended)
and so are the steps of a trace (a Markov chain): one thread runs a region from its first
draw to its last; regions are independent, and threads take them from an atomic counter
(long and short regions balance over the launch). The parallel work inside a step is small
(two or four paths, or the E step's prefix sum, which must be sequential in double, below).
The running thread is the first lane of a warp of its own (``REGION_LANES`` threads a region,
the others leave at once): 32 regions in one warp would step through every state's branch,
the E step's loop and the domains' null2 sums of each other, one after another (on a GPU;
the simulator, which runs every thread in Python, gives a region one thread).

The trace is never stored. HMMER builds it backwards from T, reverses it, indexes its
domains (``p7_trace_Index``: B..E, first and last M) and counts each domain's emitting states
(``p7_Null2_ByTrace``); all of that is read here during the backward walk itself:

* walking back, a domain is met from its E to its B: the first M met is its last M (``j``,
  ``m``), the last M met its first (``i``, ``k``); at B the domain is complete;
* ``p7_Null2_ByTrace`` counts, from B to E, every element with a residue: M and I states
  (both in the M cell of their node, as HMMER addresses it); B, E and D carry none, and N, C, J
  never lie inside a domain. A path passes a node once, in M (after its I states, walking
  back) or in D, so a node's counts are one run of the walk: the run is counted in a register
  (``fadd`` of 1.0 from 0, the values a count row in memory would take) and stored into the
  striped count row ``[Q][4]`` of the region's scratch when the walk leaves the node or the
  domain ends;
* a trace's domains do not share residues, so each residue of a sample receives exactly one
  addition to ``acc``: the odds of the domain it lies in (after the domain's first M residue,
  up to its last), else 1.0. The additions to one residue are in sample order, as HMMER's;
  the order in which one sample's residues are visited does not matter;
* the sample's pairs are written as the walk meets them (last domain first) and reversed when
  the sample ends, which gives HMMER's insertion order;
* once the walk reaches N, the rest of the trace is N down to S: no draw, nothing recorded.

Why the result is exact
-----------------------
Every choice is HMMER's arithmetic, operation for operation, as in the CPU reference: float32
products of a matrix value and a striped transition (explicitly rounded ``fmul``, never fused),
``esl_vec_FNorm``'s Kahan sum and divisions (``fadd``, ``fsub``, ``fdiv``), ``esl_rnd_FChoose``'s
double sums and quotients (``dadd``, ``ddiv``: libdevice's IEEE double operations), the E
step's ``norm = (float) (1.0 / (double) E)`` (a double division rounded to float) and its
double running sum over q, the four M lanes, then the four D lanes, which starts again at
q = 0 without resetting when a pass ends without a choice. The kernel is compiled without fast
math: subnormals are IEEE's, pyhmmer's mode.

``p7_Null2_ByTrace``'s sum over the model is per lane ``r`` a float sum over the vectors q of
``w[q][r] rfv[x][q][r]`` (then ``+ w_I = +0``), then ``(l0 + l1) + (l2 + l3)`` and the N, C, J
weight (+0). The kernel adds only the nodes from the smallest to the largest node the domain
visited, in the same q order: every other term is ``0 rfv = +0`` (``rfv`` of a residue is
finite) and adding +0 to a sum of non-negative terms returns it unchanged, so the sums are
bit for bit HMMER's while the work is the domain's width, not the model's. The 20 residues'
sums of a lane are independent chains: one pass over q advances all 20 (each chain's
additions still in increasing q), so the domain's counts are read once a vector and the
thread never waits on one chain's last addition (with one residue's chain after another's,
every domain cost 80 dependent chains: the launches over 600 Pfam models' 9,321 regions took
47 s on an H200, about 6 ms per residue of each launch's longest region). The weights are
``count (float) (1.0 / (double) (float) Ld)``; the degenerate codes get Easel's
``esl_abc_FAvgScVec`` averages (a float sum in ascending residue order over the float count).

Flush-to-zero
-------------
As the CPU reference, each choice is also checked against flush-to-zero arithmetic. A
choice none of whose values (matrix values, products, Kahan terms, sums and corrections,
normalised paths) is tiny (``0 < |v| <= FLT_MIN``) is made identically with every result
flushed, so only a choice that meets a tiny value is made again with flushed arithmetic
(:func:`hmmgpu.cpu.stotrace._ftz_choice`'s two variants, FLT_MIN counted both ways); the E
step keeps its flushed running sum beside the exact one (a term whose cell or product is tiny
adds 0 to it) and differs when the draw has not been passed there. The region's flag is the
CPU reference's ``ftz_differs`` exactly.

Why the code looks as it does
-----------------------------
A thread's step waits on memory and on its own arithmetic, and nothing else in its warp
hides that wait, so the code keeps each step's waits few: the node's vector and lane ``(q,
r)`` follow ``kk`` as it steps down (no 64-bit division a step), a domain's count row is
written once a node rather than read and written once a state, and the additions to ``acc``
load :data:`ACC_UNROLL` residues before they add (one wait a group, not one a residue). They
gained little: on one H200, the 493 clustered regions of six Pfam models' 250 best hits each
(benchmarks/ensemble_check.py, kernel launches with their transfers, the best of three) took
0.956 s against 0.998 s before (b693139), bit for bit the CPU reference's in both. That launch
lasts as long as its longest region, 906 residues and 190,690 draws: about 5 microseconds a
draw on one GPU thread, where the CPU reference takes 0.35-0.6 (13-23 s for the 38.2 M draws,
one thread). So a thread is about ten times slower than a core at this chain, and the kernel
gains only from having many regions at once. Nsight Compute on that launch
(session_ncu_ensemble_h200_2026-11-28_s7call8.log, SM clock held at 1.5 GHz: 592 ms, 888 M
cycles) says what the step costs: one warp a scheduler, 4.5 cycles between its instructions,
half of them waits on the previous instruction's fixed latency, memory throughput 1.2% of the
device's: the thread is bound by the number of its instructions, about a thousand a draw
(888 M cycles / 4.5 over the longest region's 190,690 draws), not by memory. No tiny value was
met in real regions (PF00133's, under the simulator), so the flush-to-zero re-choices do not
run. Two things therefore cut instructions, not loads:

* **32-bit offsets within a region, never wrapped.** The kernel's PTX was mostly 64-bit
  integer work (1,045 ``add.s64``, 295 ``mul.lo.s64``, 188 ``selp.b64``, 175 ``and.b64``, 164
  ``shr.s64`` of 4,708 instructions, against 246 ``add.rn.f32``): index arithmetic in 64 bits
  and numba's wrap-around of negative indices on every access. A region's arrays are now
  slices taken once (``dpr``, ``xr``, ``tr``, ``rr``, ``cr``, ``wr``, ``ar``, ``pr``), and every
  index into them is ``U(offset)``, an unsigned 32-bit integer: numba wraps no unsigned index,
  and the truncation lets LLVM do the offset's arithmetic in 32 bits. A region whose matrix
  has more cells than 32 bits address (:data:`MAX_REGION_CELLS`, a region of about 100,000
  residues against a model of 10,000 nodes) is not launched (:data:`LARGE`: the CPU reference
  samples it). Under the simulator ``U`` raises on a negative offset instead.
* **``esl_rnd_FChoose`` without its divisions** (:func:`below`): the draw is compared with
  each running sum over the norm, a double division each, which a GPU runs as a chain of
  dependent fused operations. ``roll norm`` is computed once, and a sum is decided from it
  wherever the product lies outside ``total (1 -+ 2^-50)``: rounding moves the products and the
  quotient by at most 2^-53 of themselves, so the answer is the division's; the division runs
  only inside that margin, that is, almost never.

Compiled for sm_90 (ptxas, disassembled), the kernel went from 7,920 SASS instructions and
218 registers to 5,976 and 168.

Matrices are read where the envelope kernels will leave them, in the layout of
:class:`hmmgpu.cpu.fwdback.StripedMatrix` (cells ``[Lr+1][3][Q][4]``, M, D, I; rows
``[Lr+1][6]``), each region at its own offsets of two flat arrays, so a batch holds regions of
several targets and models (per region its model's ``tfv``/``rfv`` offset and the 8 special
transitions at the target's length). The count row and the pair buffer are per-region slices
of flat arrays; the 29 null2 odds are a thread-local array. A thread's steps wait on memory
(its loads depend on its last choice), so what can be loaded together is: a step's two or
four paths, and in the E step a vector's eight cells before they are summed in order.
Every float value goes through the rounding helpers (``fmul``, ``fadd``, ``fsub``, ``fdiv``,
``dadd``, ``dmul``, ``ddiv``, ``rcp_double``), so no plain operator can be contracted into a fused
multiply-add.
"""
from __future__ import annotations

from dataclasses import dataclass

from hmmgpu.cpu.null2 import DEGENERATE_RESIDUES
from hmmgpu.cpu.stotrace import EXHAUSTED, FATAL, FULL, OK, ST_B, ST_C, ST_D, ST_E, ST_I, ST_J, ST_M, ST_N
from hmmgpu.constants import K, KP
from hmmgpu.gpu.runtime.emit import kernel_module
from hmmgpu.gpu.runtime.kargs import Arg
from hmmgpu.stages.forward import FLT_MIN, XB, XC, XE, XJ, XN, XSCALE

#: A step left the matrix (row -1 or node 0): only a path of probability 0 goes there, chosen
#: where every path of a step is 0 (``esl_vec_FNorm``'s uniform fallback); the CPU reference
#: then reads wrapped-around cells, so the region is left to it.
OUTSIDE = 4

#: The region's matrix has more cells than the kernel's 32-bit offsets within a region reach
#: (:data:`MAX_REGION_CELLS`): the region is left to the CPU reference, unlaunched.
LARGE = 5

#: Cells of a region's Forward matrix the kernel addresses at most: every index within a
#: region's arrays is an unsigned 32-bit offset (a matrix's cells are its largest array).
MAX_REGION_CELLS = (1 << 32) - 1

#: Parameters of the kernel, in order. Region k: its Forward matrix's cells at
#: ``dp[dp_base[k]:]`` and rows at ``xmx[x_base[k]:]``; ``lengths[k]`` residues, ``item_q[k]``
#: vectors; its model's ``tfv[item_tfv[k]:]`` ([8Q][4]) and ``rfv[item_rfv[k]:]`` ([Kp][Q][4]);
#: ``item_xf[8k:8k+8]`` the multihit special transitions at the target's length ([E N J C]
#: [MOVE LOOP]); its residue codes ``codes[code_base[k]:]``, ``first_residue[k]`` (the region's
#: first residue, 1-based); scratch ``work[work_base[k]:]`` (4Q floats); outputs ``acc[acc_base[k]:]``
#: (Lr+1 floats) and ``pairs[5 pair_base[k]:]`` (``pair_cap[k]`` pairs).
ARGS = (
    Arg("dp", "float32[:]"), Arg("xmx", "float32[:]"), Arg("dp_base", "int64[:]"), Arg("x_base", "int64[:]"),
    Arg("lengths", "int32[:]"), Arg("item_q", "int32[:]"),
    Arg("tfv", "float32[:]"), Arg("item_tfv", "int64[:]"), Arg("rfv", "float32[:]"), Arg("item_rfv", "int64[:]"),
    Arg("item_xf", "float32[:]"), Arg("codes", "uint8[:]"), Arg("code_base", "int64[:]"),
    Arg("first_residue", "int32[:]"), Arg("uniforms", "float64[:]"), Arg("nsamples", "int32"),
    Arg("work", "float32[:]"), Arg("work_base", "int64[:]"), Arg("n_items", "int32"), Arg("counters", "int32[:]"),
    Arg("n_threads", "int32"),
    Arg("acc", "float32[:]"), Arg("acc_base", "int64[:]"), Arg("pairs", "int32[:]"), Arg("pair_base", "int64[:]"),
    Arg("pair_cap", "int32[:]"),
    Arg("out_status", "int32[:]"), Arg("out_npairs", "int32[:]"), Arg("out_draws", "int32[:]"),
    Arg("out_ftz", "int32[:]"),
)


def _degenerate_lines() -> list:
    """``esl_abc_FAvgScVec`` written out: each degenerate code's float sum in ascending residue
    order, divided by its count; then gap, ``*`` and ``~`` set to 1."""
    lines = []
    for code, residues in DEGENERATE_RESIDUES.items():
        lines.append("total = F0")
        lines += [f"total = fadd(total, null2[{a}])" for a in residues]
        lines.append(f"null2[{code}] = fdiv(total, np.float32({len(residues)}.0))")
    lines += [f"null2[{code}] = F1" for code in (K, KP - 2, KP - 1)]
    return lines


_KERNEL = """
tid = cuda.grid(1)
if tid >= n_threads or tid % REGION_LANES != 0:
    return
null2 = cuda.local.array(KP, float32)
lanes = cuda.local.array(LANE_SUMS, float32)
n_uniforms = uniforms.shape[0]
while True:
    k = cuda.atomic.add(counters, 0, 1)
    if k >= n_items:
        break
    Lr = np.int64(lengths[k])
    QQ = np.int64(item_q[k])
    dpr = dp[dp_base[k]:]  # the region's own arrays: every index below is an offset within them
    xr = xmx[x_base[k]:]
    tr = tfv[item_tfv[k]:]
    rr = rfv[item_rfv[k]:]
    cr = codes[code_base[k]:]
    wr = work[work_base[k]:]
    ar = acc[acc_base[k]:]
    pr = pairs[5 * pair_base[k]:]
    cap = np.int64(pair_cap[k])
    ireg = np.int64(first_residue[k])
    e_move = item_xf[8 * k + XF_E]
    e_loop = item_xf[8 * k + XF_E + 1]
    n_move = item_xf[8 * k + XF_N]
    j_move = item_xf[8 * k + XF_J]
    j_loop = item_xf[8 * k + XF_J + 1]
    c_loop = item_xf[8 * k + XF_C + 1]
    for p in range(Lr + 1):
        ar[U(p)] = F0
    for cell in range(4 * QQ):
        wr[U(cell)] = F0
    cursor = np.int64(0)
    npairs = np.int64(0)
    status = OK
    ftz = False
    for sample in range(nsamples):
        first_pair = npairs
        i = Lr
        kk = np.int64(0)
        q = np.int64(0)
        r = np.int64(0)
        s0 = ST_C
        hi = Lr  # residues hi+1..Lr of this sample have had their addition
        Ld = np.int64(0)
        sqfrom = np.int64(0)
        sqto = np.int64(0)
        hmmfrom = np.int64(0)
        hmmto = np.int64(0)
        kmin = np.int64(0)
        kmax = np.int64(0)
        run_w = np.int64(-1)  # the count row's cell of the node being counted, and its count
        run_n = F0
        while True:
            if cursor >= n_uniforms:
                status = EXHAUSTED
                break
            roll = uniforms[U(cursor)]
            s1 = 0
            if s0 == ST_E:
                # the E step: the double running sum over q, four M lanes then four D lanes
                cursor += 1
                norm = rcp_double(xr[U(6 * i + XE)])
                total = D0
                total_ftz = D0
                q = np.int64(0)
                while True:
                    src = (i * 3 * QQ + q) * 4  # vector q's M lanes; its D lanes at + 4Q
{estep}
                    if s1 != 0:
                        break
                    q += 1
                    if q == QQ:
                        if not total > D0:
                            break
                        q = 0
                if s1 == 0:
                    status = FATAL
                    break
                if not roll < total_ftz:
                    ftz = True
            else:
                n = 2
                c1 = F1
                a2 = F0
                b2 = F0
                a3 = F0
                b3 = F0
                if s0 == ST_M:
                    tv = 28 * q + r
                    a0 = xr[U(6 * (i - 1) + XB)]
                    b0 = tr[U(tv)]
                    a1 = F0
                    a2 = F0
                    a3 = F0
                    if q > 0 or r > 0:
                        src = ((i - 1) * 3 * QQ + q - 1) * 4 + r if q > 0 else ((i - 1) * 3 * QQ + QQ - 1) * 4 + r - 1
                        a1 = dpr[U(src)]
                        a2 = dpr[U(src + 8 * QQ)]
                        a3 = dpr[U(src + 4 * QQ)]
                    b1 = tr[U(tv + 4)]
                    b2 = tr[U(tv + 8)]
                    b3 = tr[U(tv + 12)]
                    n = 4
                elif s0 == ST_D:
                    a0 = F0
                    b0 = F0
                    a1 = F0
                    b1 = F0
                    if q > 0:
                        src = (i * 3 * QQ + q - 1) * 4 + r
                        a0 = dpr[U(src)]
                        b0 = tr[U(28 * (q - 1) + 16 + r)]
                        a1 = dpr[U(src + 4 * QQ)]
                        b1 = tr[U((7 * QQ + q - 1) * 4 + r)]
                    elif r > 0:
                        src = (i * 3 * QQ + QQ - 1) * 4 + r - 1
                        a0 = dpr[U(src)]
                        b0 = tr[U(28 * (QQ - 1) + 16 + r - 1)]
                        a1 = dpr[U(src + 4 * QQ)]
                        b1 = tr[U((8 * QQ - 1) * 4 + r - 1)]
                elif s0 == ST_I:
                    src = ((i - 1) * 3 * QQ + q) * 4 + r
                    a0 = dpr[U(src)]
                    b0 = tr[U(28 * q + 20 + r)]
                    a1 = dpr[U(src + 8 * QQ)]
                    b1 = tr[U(28 * q + 24 + r)]
                elif s0 == ST_C or s0 == ST_J:
                    if i < 1:
                        status = OUTSIDE
                        break
                    if s0 == ST_C:
                        a0 = xr[U(6 * (i - 1) + XC)]
                        b0 = c_loop
                        b1 = e_move
                    else:
                        a0 = xr[U(6 * (i - 1) + XJ)]
                        b0 = j_loop
                        b1 = e_loop
                    a1 = xr[U(6 * i + XE)]
                    c1 = xr[U(6 * i + XSCALE)]
                else:  # B
                    a0 = xr[U(6 * i + XN)]
                    b0 = n_move
                    a1 = xr[U(6 * i + XJ)]
                    b1 = j_move
                choice, meets_tiny = step_choice(roll, n, a0, b0, a1, b1, c1, a2, b2, a3, b3)
                if choice < 0:
                    status = FATAL
                    break
                if meets_tiny and not ftz:
                    ftz = (ftz_choice(roll, n, False, a0, b0, a1, b1, c1, a2, b2, a3, b3) != choice
                           or ftz_choice(roll, n, True, a0, b0, a1, b1, c1, a2, b2, a3, b3) != choice)
                cursor += 1
                s1 = next_state(s0, choice)
            if s0 == ST_M or s0 == ST_D:
                kk -= 1  # node kk's vector q and lane r follow it
                if q == 0:
                    q = QQ - 1
                    r -= 1
                else:
                    q -= 1
                if s0 == ST_M:
                    i -= 1
            elif s0 == ST_I:
                i -= 1
            if s1 == ST_M or s1 == ST_I or s1 == ST_D:
                if kk < 1 or (s1 != ST_D and i < 1):
                    status = OUTSIDE
                    break
            if s1 == ST_M or s1 == ST_I:
                Ld += 1
                w = q * 4 + r
                if w != run_w:  # a node's visits are one run: stored when the walk leaves it
                    if run_w >= 0:
                        wr[U(run_w)] = run_n
                    run_w = w
                    run_n = F1
                else:
                    run_n = fadd(run_n, F1)
                kmin = min(kmin, kk)
                kmax = max(kmax, kk)
                if s1 == ST_M:
                    if sqto == 0:
                        sqto = i
                        hmmto = kk
                    sqfrom = i
                    hmmfrom = kk
            elif s1 == ST_E:  # a domain begins (walking back): the last B, or the sample's start, left no node counted
                Ld = 0
                sqto = 0
                kmin = QQ * 4 + 1
                kmax = 0
            elif s1 == ST_B:
                # the domain is complete: its pair, its null2 odds, its residues' additions
                if npairs >= cap:
                    status = FULL
                    break
                o = npairs * 5
                pr[U(o)] = sample
                pr[U(o + 1)] = sqfrom + ireg - 1
                pr[U(o + 2)] = sqto + ireg - 1
                pr[U(o + 3)] = hmmfrom
                pr[U(o + 4)] = hmmto
                npairs += 1
                if run_w >= 0:
                    wr[U(run_w)] = run_n
                    run_w = np.int64(-1)
                dnorm = rcp_double(np.float32(Ld))
                qn = (kmin - 1) % QQ
                rn = (kmin - 1) // QQ
                for kn in range(kmin, kmax + 1):
                    w = qn * 4 + rn
                    wr[U(w)] = fmul(wr[U(w)], dnorm)
                    qn += 1
                    if qn == QQ:
                        qn = 0
                        rn += 1
{null2_sums}
                for x in range(K):
                    null2[x] = fadd(fadd(fadd(lanes[x], lanes[K + x]), fadd(lanes[2 * K + x], lanes[3 * K + x])), F0)
{degenerate}
{add_ones_domain}
{add_odds}
                hi = sqfrom
                qn = (kmin - 1) % QQ
                rn = (kmin - 1) // QQ
                for kn in range(kmin, kmax + 1):
                    wr[U(qn * 4 + rn)] = F0
                    qn += 1
                    if qn == QQ:
                        qn = 0
                        rn += 1
            elif s1 == ST_N:
                break
            if (s1 == ST_C or s1 == ST_J) and s1 == s0:
                i -= 1
            s0 = s1
        if status != OK:
            break
{add_ones_sample}
        for z in range((npairs - first_pair) // 2):
            lo = (first_pair + z) * 5
            up = (npairs - 1 - z) * 5
            for f in range(5):
                swap = pr[U(lo + f)]
                pr[U(lo + f)] = pr[U(up + f)]
                pr[U(up + f)] = swap
    out_status[k] = status
    out_npairs[k] = npairs
    out_draws[k] = cursor
    out_ftz[k] = 1 if ftz else 0
"""


def _e_step_lines() -> list:
    """One vector q of the E step: its eight cells (M lanes 0-3, D lanes 0-3) loaded first, so
    that the loads are in flight together, then added to the double running sums in order,
    the first cell whose sum passes the draw chosen (the loads past it read the same row and
    change nothing)."""
    lines = [f"v{z} = dpr[U(src + {z})]" if z < 4 else f"v{z} = dpr[U(src + 4 * QQ + {z - 4})]" for z in range(8)]
    for z in range(8):
        chosen = f"s1 = ST_{'M' if z < 4 else 'D'}", f"kk = {z % 4} * QQ + q + 1", f"r = np.int64({z % 4})"
        lines += ["if s1 == 0:", f"    total, total_ftz, passed = e_term(v{z}, norm, total, total_ftz, roll)",
                  "    if passed:"] + [f"        {line}" for line in chosen]
    return lines


def _null2_lines() -> list:
    """``p7_Null2_ByTrace``'s lane sums of a domain: for each lane r, the K residues' sums over
    the vectors q of the domain's nodes in lane r, in increasing q, each its own chain of
    rounded products and additions (HMMER's order for that residue and lane), all K advanced
    together in one pass over q: the domain's count row is read once a vector, and the K
    chains, independent of one another, are in flight at once (one residue's chain after
    another waited for each addition in turn). ``lanes[r K + x]``: residue x's sum in lane r."""
    sums = [f"o{x}" for x in range(K)]
    lines = ["for r in range(4):",
             "    q_first = max(0, kmin - 1 - r * QQ)",
             "    q_last = min(QQ - 1, kmax - 1 - r * QQ)",
             "    " + " = ".join(sums) + " = F0",
             "    for q in range(q_first, q_last + 1):",
             "        wq = wr[U(q * 4 + r)]",
             "        rq = q * 4 + r"]
    lines += [f"        o{x} = fadd(o{x}, fmul(wq, rr[U(rq + {x} * QQ * 4)]))" for x in range(K)]
    lines += [f"    lanes[r * K + {x}] = o{x}" for x in range(K)]
    return lines


#: Residues whose additions to ``acc`` are loaded together (:func:`_acc_lines`).
ACC_UNROLL = 8


def _acc_lines(first: str, last: str, term) -> list:
    """``acc[p] += term(p)`` for p = first..last (a residue's additions stay in sample order;
    residues are independent): :data:`ACC_UNROLL` residues' loads are issued together, then
    their sums stored, so that the thread waits once for the group instead of once a residue."""
    n = ACC_UNROLL
    lines = [f"p = {first}", f"while p + {n - 1} <= {last}:"]
    lines += [f"    x{z} = ar[U(p + {z})]" for z in range(n)]
    lines += [f"    t{z} = {term(f'p + {z}')}" for z in range(n)]
    lines += [f"    ar[U(p + {z})] = fadd(x{z}, t{z})" for z in range(n)]
    lines += [f"    p += {n}", f"while p <= {last}:", f"    ar[U(p)] = fadd(ar[U(p)], {term('p')})", "    p += 1"]
    return lines


def kernel_body() -> str:
    def indented(lines, depth):
        return "\n".join(" " * depth + line for line in lines)

    degenerate = indented(_degenerate_lines(), 16)
    estep = indented(_e_step_lines(), 20)
    null2_sums = indented(_null2_lines(), 16)
    ones = lambda p: "F1"  # noqa: E731
    odds = lambda p: f"null2[cr[U({p} - 1)]]"  # noqa: E731
    body = _KERNEL.format(degenerate=degenerate, estep=estep, null2_sums=null2_sums,
                          add_ones_domain=indented(_acc_lines("sqto + 1", "hi", ones), 16),
                          add_odds=indented(_acc_lines("sqfrom + 1", "sqto", odds), 16),
                          add_ones_sample=indented(_acc_lines("1", "hi", ones), 8))
    return "".join(f"    {line}\n" if line else "\n" for line in body.strip("\n").splitlines())


def region_lanes(binding: str) -> int:
    """Threads a region on a GPU (a warp; its first lane runs the region), one under the simulator."""
    return 1 if binding == "python" else 32


def module_lines(binding: str, ftz: bool = False) -> tuple:
    """Imports, constants and the device functions of the kernel's module (``ftz``: its float
    operations hmmsearch's, flush-to-zero: :func:`hmmgpu.gpu.rounding.float_helpers`)."""
    simulator = binding == "python"
    small = "" if simulator else "@cuda.jit(device=True, forceinline=True)\n"
    device = "" if simulator else "@cuda.jit(device=True)\n"
    if simulator:
        doubles = ("def dadd(a, b):\n    return np.float64(a) + np.float64(b)\n\n"
                   "def dmul(a, b):\n    return np.float64(a) * np.float64(b)\n\n"
                   "def ddiv(a, b):\n    with np.errstate(all='ignore'):\n        return np.float64(a) / np.float64(b)\n\n"
                   "def rcp_double(x):\n    \"\"\"f32(1.0 / (double) x), IEEE (1/0 is inf).\"\"\"\n"
                   "    with np.errstate(all='ignore'):\n        return to_float(np.float64(1.0) / np.float64(x))\n")
    else:
        doubles = ("from numba.cuda import libdevice\n"
                   f"{small}def dadd(a, b):\n    return libdevice.dadd_rn(np.float64(a), np.float64(b))\n\n"
                   f"{small}def dmul(a, b):\n    return libdevice.dmul_rn(np.float64(a), np.float64(b))\n\n"
                   f"{small}def ddiv(a, b):\n    return libdevice.ddiv_rn(np.float64(a), np.float64(b))\n\n"
                   f"{small}def rcp_double(x):\n    \"\"\"f32(1.0 / (double) x): IEEE double division, rounded to float.\"\"\"\n"
                   "    return to_float(libdevice.ddiv_rn(np.float64(1.0), np.float64(x)))\n")
    if simulator:
        index = ("def U(x):\n    \"\"\"An offset within a region's arrays (never negative).\"\"\"\n"
                 "    if x < 0:\n        raise IndexError(f'negative offset {x}')\n    return x\n")
    else:  # an unsigned index: numba emits no wrap-around of negative indices for it
        index = "U = np.uint32\n"
    functions = f'''
{small}def tiny(v):
    """A nonzero value flush-to-zero may flush (FLT_MIN counted too)."""
    return v != F0 and abs(v) <= FMIN


{small}def flushed(v, inclusive):
    """v as flush-to-zero leaves a float32 result (hmmgpu.cpu.stotrace._flushed)."""
    if v != F0 and (abs(v) < FMIN or (inclusive and abs(v) == FMIN)):
        return F0
    return v


{small}def e_term(v, norm, total, total_ftz, roll):
    """One cell of the E step: (double sum, its flushed twin, whether the sum passed the
    draw). A term whose cell or product is tiny adds 0 to the flushed sum (FTZ's term)."""
    term = fmul(v, norm)
    total = dadd(total, np.float64(term))
    if not (tiny(v) or tiny(term)):
        total_ftz = dadd(total_ftz, np.float64(term))
    return total, total_ftz, roll < total


{small}def kahan(s, c, v):
    """One step of esl_vec_FSum: (sum, correction, some value tiny)."""
    y = fsub(v, c)
    t = fadd(s, y)
    d = fsub(t, s)
    c2 = fsub(d, y)
    return t, c2, tiny(y) or tiny(t) or tiny(d) or tiny(c2)


{small}def below(roll, scaled, total, norm):
    """esl_rnd_FChoose's test ``roll < total / norm`` (the quotient rounded to double), exactly,
    with ``scaled = roll norm`` (rounded): where that product lies below ``total (1 - 2^-50)`` or
    above ``total (1 + 2^-50)`` (each rounded) the answer follows without the division, which
    runs only between the two. Rounding moves each product by at most 2^-53 of it, and the
    quotient by as much, so the margin 2^-50 can never be crossed; the paths are normalised,
    so ``norm`` is positive and finite and ``total`` in [0, norm]."""
    if scaled < dmul(total, BELOW_ONE):
        return True
    if scaled > dmul(total, ABOVE_ONE):
        return False
    return roll < ddiv(total, norm)


{small}def pick(roll, n, p0, p1, p2, p3):
    """esl_rnd_FChoose on normalised paths with the draw roll: the index, or -1. Its
    comparisons of the draw with each running sum over the norm are :func:`below`'s: the same
    answers, nearly always without a double division (a chain of dependent fused operations
    on a GPU)."""
    norm = dadd(dadd(D0, np.float64(p0)), np.float64(p1))
    if n == 4:
        norm = dadd(dadd(norm, np.float64(p2)), np.float64(p3))
    scaled = dmul(roll, norm)
    total = dadd(D0, np.float64(p0))
    if below(roll, scaled, total, norm):
        return 0
    total = dadd(total, np.float64(p1))
    if below(roll, scaled, total, norm):
        return 1
    if n == 4:
        total = dadd(total, np.float64(p2))
        if below(roll, scaled, total, norm):
            return 2
        total = dadd(total, np.float64(p3))
        if below(roll, scaled, total, norm):
            return 3
    return -1


{device}def step_choice(roll, n, a0, b0, a1, b1, c1, a2, b2, a3, b3):
    """A step's choice among n paths (a0 b0), (a1 b1) c1, (a2 b2), (a3 b3): esl_vec_FNorm,
    then esl_rnd_FChoose. Returns (index or -1, whether some value met is tiny)."""
    p0 = fmul(a0, b0)
    m1 = fmul(a1, b1)
    p1 = fmul(m1, c1)
    small = tiny(a0) or tiny(p0) or tiny(a1) or tiny(m1) or tiny(p1)
    s, c, met = kahan(F0, F0, p0)
    small = small or met
    s, c, met = kahan(s, c, p1)
    small = small or met
    p2 = F0
    p3 = F0
    if n == 4:
        p2 = fmul(a2, b2)
        p3 = fmul(a3, b3)
        small = small or tiny(a2) or tiny(p2) or tiny(a3) or tiny(p3)
        s, c, met = kahan(s, c, p2)
        small = small or met
        s, c, met = kahan(s, c, p3)
        small = small or met
    if s != F0:
        p0 = fdiv(p0, s)
        p1 = fdiv(p1, s)
        p2 = fdiv(p2, s)
        p3 = fdiv(p3, s)
        small = small or tiny(p0) or tiny(p1) or (n == 4 and (tiny(p2) or tiny(p3)))
    else:
        p0 = HALF if n == 2 else QUARTER
        p1 = p0
        p2 = p0
        p3 = p0
    return pick(roll, n, p0, p1, p2, p3), small


{small}def ftz_path(a, b, c, inclusive):
    return flushed(fmul(flushed(fmul(flushed(a, inclusive), b), inclusive), c), inclusive)


{small}def ftz_kahan(s, c, v, inclusive):
    y = flushed(fsub(v, c), inclusive)
    t = flushed(fadd(s, y), inclusive)
    return t, flushed(fsub(flushed(fsub(t, s), inclusive), y), inclusive)


{device}def ftz_choice(roll, n, inclusive, a0, b0, a1, b1, c1, a2, b2, a3, b3):
    """The same choice with every float result flushed as flush-to-zero flushes it
    (hmmgpu.cpu.stotrace._ftz_choice): the index, or -1."""
    p0 = ftz_path(a0, b0, F1, inclusive)
    p1 = ftz_path(a1, b1, c1, inclusive)
    p2 = ftz_path(a2, b2, F1, inclusive)
    p3 = ftz_path(a3, b3, F1, inclusive)
    s, c = ftz_kahan(F0, F0, p0, inclusive)
    s, c = ftz_kahan(s, c, p1, inclusive)
    if n == 4:
        s, c = ftz_kahan(s, c, p2, inclusive)
        s, c = ftz_kahan(s, c, p3, inclusive)
    if s != F0:
        p0 = flushed(fdiv(p0, s), inclusive)
        p1 = flushed(fdiv(p1, s), inclusive)
        p2 = flushed(fdiv(p2, s), inclusive)
        p3 = flushed(fdiv(p3, s), inclusive)
    else:
        p0 = HALF if n == 2 else QUARTER
        p1 = p0
        p2 = p0
        p3 = p0
    return pick(roll, n, p0, p1, p2, p3)


{small}def next_state(s0, choice):
    """The state chosen from s0 (p7_StochasticTrace's tables)."""
    if s0 == ST_M:
        return ST_B if choice == 0 else ST_M if choice == 1 else ST_I if choice == 2 else ST_D
    if s0 == ST_D:
        return ST_M if choice == 0 else ST_D
    if s0 == ST_I:
        return ST_M if choice == 0 else ST_I
    if s0 == ST_C:
        return ST_C if choice == 0 else ST_E
    if s0 == ST_J:
        return ST_J if choice == 0 else ST_E
    return ST_N if choice == 0 else ST_J
'''
    return ("from numba import float32", "from hmmgpu.gpu import rounding as _rounding",
            f"_F = _rounding.float_helpers({binding!r}, ftz={bool(ftz)!r})",
            "fmul = _F.fmul; fadd = _F.fadd; fsub = _F.fsub; fdiv = _F.fdiv; to_float = _F.to_float",
            f"OK = {OK}; EXHAUSTED = {EXHAUSTED}; FATAL = {FATAL}; FULL = {FULL}; OUTSIDE = {OUTSIDE}",
            f"ST_M = {ST_M}; ST_D = {ST_D}; ST_I = {ST_I}; ST_N = {ST_N}; ST_B = {ST_B}; ST_E = {ST_E}; "
            f"ST_C = {ST_C}; ST_J = {ST_J}",
            f"XE = {XE}; XN = {XN}; XJ = {XJ}; XB = {XB}; XC = {XC}; XSCALE = {XSCALE}",
            "XF_E = 0; XF_N = 2; XF_J = 4; XF_C = 6  # rows of xf ([E N J C]), MOVE at +0 and LOOP at +1",
            f"K = {K}; KP = {KP}; LANE_SUMS = {4 * K}; REGION_LANES = {region_lanes(binding)}",
            "F0 = np.float32(0.0); F1 = np.float32(1.0); HALF = np.float32(0.5); QUARTER = np.float32(0.25)",
            f"FMIN = np.float32({float(FLT_MIN)!r}); D0 = np.float64(0.0)",
            f"BELOW_ONE = np.float64({1.0 - 2.0 ** -50!r}); ABOVE_ONE = np.float64({1.0 + 2.0 ** -50!r})",
            "", doubles, index, functions)


@dataclass(frozen=True)
class EnsembleSpec:
    """The stochastic-trace ensemble kernel (one thread runs a region, a warp of its own on a GPU;
    no shape to specialise). ``ftz``: in hmmsearch's float mode (flush-to-zero), on matrices
    computed in it."""

    ftz: bool = False

    @property
    def name(self) -> str:
        return "ensemble_traces_v1" + ("_ftz" if self.ftz else "")

    def source(self, binding: str) -> str:
        return kernel_module("Stochastic-trace ensembles of clustered regions (region_trace_ensemble's sampling).",
                             binding, ARGS, kernel_body(), *module_lines(binding, self.ftz))
