"""Kernel shapes and launch settings, kept as data.

Every kernel is specialised to a shape (threads per target ``G``, words per thread ``Q``),
and a search only ever uses the shapes listed here, so a whole Pfam search needs a few
dozen kernels, compiled once per device (:mod:`hmmgpu.gpu.runtime.build`). A model of ``M``
nodes takes the first row whose capacity ``G * lanes_per_word * Q`` is at least ``M``.

The MSV rows were chosen on an NVIDIA H200 (benchmarks/NOTES.md): at least ~9 words per
thread where the model allows it (more independent words hide the per-row shuffle and
residue decoding), and lane groups of at least 4 threads (narrower groups put more targets
per warp in lockstep, with uncoalesced residue loads and shared-memory bank conflicts).
The Viterbi filter uses a whole warp per target (its per-row reductions are warp-wide), so
its rows differ only in ``Q``.
"""
from __future__ import annotations

#: (G, Q) rows of the MSV kernels in 16-bit lanes (2 per word), by increasing capacity.
MSV_16X2 = ((4, 3), (4, 5), (4, 8), (4, 12), (4, 16), (8, 10), (8, 12), (8, 16), (16, 10), (16, 12),
            (16, 16), (32, 10), (32, 12), (32, 16), (32, 20), (32, 24), (32, 32), (32, 40), (32, 48), (32, 64))
#: (G, Q) rows of the MSV kernels in 8-bit lanes (4 per word).
MSV_8X4 = ((4, 3), (4, 5), (4, 8), (4, 12), (4, 16), (8, 10), (8, 12), (8, 16), (16, 10), (16, 12),
           (16, 16), (32, 10), (32, 12), (32, 16), (32, 20), (32, 24), (32, 32))
#: Q rows of the Viterbi filter kernel (G = 32, 2 lanes per word: capacity 64 * Q).
VIT_Q = (1, 2, 3, 4, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64)
#: Viterbi filter: transition words stay in registers up to this Q, above it they are read
#: from shared memory (registers per thread would otherwise exceed what keeps a useful
#: number of warps resident).
VIT_TRANSITIONS_IN_REGISTERS_MAX_Q = 12

#: Call the CUDA driver's functions that return at once (:data:`hmmgpu.gpu.runtime.libcuda.QUICK`)
#: with the interpreter's lock kept, so that a thread's launches do not wait for it after each call
#: while another thread of the process runs Python.
DRIVER_QUICK_CALLS_KEEP_LOCK = True

#: Model tables up to this size go to static shared memory, larger ones to dynamic shared
#: memory (opted in above 48 KB), and beyond the device's limit to global memory (L1).
STATIC_SHARED_MAX_BYTES = 40 * 1024
#: Resident warps per SM the launches aim for (more do not help these kernels).
TARGET_WARPS_PER_SM = 48
#: Bias filter kernel: threads per block (one thread per target) and blocks per SM.
BIAS_BLOCK = 128
BIAS_BLOCKS_PER_SM = 4
#: Forward parser kernel (:mod:`.fwdback`): threads per block of its global-memory variant
#: (four threads per target), the global scratch its rows may take there (3 Q floats per
#: thread: it sets the number of threads of a launch), the largest target (residues x model
#: nodes) it takes (a group of four threads runs a target, so the costliest set the length of
#: a batch; larger ones are left to pyhmmer's stage, undecided: issue 31's fallback, at most 1%
#: of the F3 passers), the streams its batches rotate over, and the targets the cascade collects
#: before it launches a batch (many models' survivors together: one Pfam model's would fill a
#: few of the GPU's multiprocessors). Measured with 600 Pfam models against 29 M real residues:
#: caps of 8, 2, 1 and 0.5 M cells took 18.6, 8.2, 7.5 and 6.4 s on one H200 (batches of 16k
#: targets); batches of 8k, 16k, 32k and 64k targets 7.1-7.4 s from 16k up on one H100, and
#: launching smaller batches whenever none ran (2k targets) 14.4 s (each small batch waits for
#: its own longest targets). Launching the targets between 0.5 and 2 M cells at once, a model's
#: on their own, took 20.5 s of kernel time instead of 1.9 s and 27 s of wall instead of 9 s on
#: one H100 (0bf5f49): four threads run such a target latency-bound, a row after another. On one
#: H200 (the default route, warm, outputs equal): batches of 4k targets against 16k, in five
#: pairs of runs over two sessions (session_gatebatch_h200_2026-11-28_s8call6.log,
#: session_e2e_h200_2026-11-28_s8call7.log), 6.54, 6.77, 5.97, 6.22, 6.17 s against 6.91, 6.97,
#: 6.24, 6.28, 6.45 s (one run of 8k: 7.23 s): the worker threads get their first passers sooner
#: (84-87% busy against 79-83%), for 10-20% more GPU time. With those 4k batches the cap is 2 M
#: cells (one session, warm, tables and domain tables equal; session_gatecap_h200_2026-11-29_s12call1.log):
#: 0.5, 1 and 2 M cells left 698, 75 and 7 survivors undecided at 29 M residues (2.1%, 0.22% and
#: 0.02% of the F3 passers) and 2,792, 300 and 28 at 116 M; 29 M took 5.88 and 6.10 s, 6.09 and
#: 6.69 s, 6.19 and 6.59 s (Forward kernel 6.4-6.8, 9.7-9.9, 12.9-13.0 s of kernel time over its
#: streams), 116 M 21.00, 19.29 and 19.05 s (worker threads' CPU 280, 262 and 255 s): where the
#: CPU's stage sets the pace, what the GPU decides is CPU time saved.
#: The segmented parser kernels (rows in shared memory, :func:`hmmgpu.gpu.fwdback.source.segmented_body`
#: and the Backward one): a group of 4 x FWD_SEGMENTS threads runs a target, the cells that need no
#: chain along the row spread over the segments. Measured on one H200 (benchmarks/forward_batches.py,
#: 600 Pfam models' batches as the gate launches them, d35d60f, one call): a round of the 36 batches
#: took 1.67, 1.21 and 1.08 s with 2, 4 and 8 segments, against 2.21 s for the group of four.
FWD_SEGMENTS = 8
FWD_BLOCK = 128
FWD_SCRATCH_BYTES = 256 << 20
FWD_MAX_CELLS = 2 << 20
FWD_STREAMS = 8
FWD_GATE_TARGETS = 4096
#: The first gate batch's targets on the default route, doubled at each batch up to
#: FWD_GATE_TARGETS: the post-filter's threads wait for the first batch's passers. On one H200,
#: 600 Pfam x 29 M, warm, three alternating pairs in one session (4c000f0,
#: session_gateramp_h200_2026-11-29_s10call4.log): 5.96, 5.68, 5.82 s against 6.14, 6.39, 5.89 s
#: without it (4096), 6.30 s from 128; at 116 M 18.30, 17.36 s against 18.40, 16.66 s. Outputs equal.
FWD_GATE_FIRST_TARGETS = 512
#: The same with hmmgpu's own post-filter (``--postfilter hmmgpu``), whose full-sized gate batches
#: are also its definitions' batches (9c55c5f). Its first batches are smaller too (from
#: FWD_GATE_FIRST_TARGETS, doubling), and their passers go to pyhmmer's pipeline
#: (:meth:`hmmgpu.gpu.cascade.GpuCascade.take_definitions`): with every batch full-sized the post-filter's
#: threads waited 2.5-3.8 s for their first task. On one H200, 600 Pfam, warm, tables equal (85fd3c0,
#: session_ownramp_h200_2026-11-29_s18call7.log): first task after 0.21-0.25 s; 29 M 11.11 s against
#: 11.66-12.84 s before (1d6a341, another machine of the kind), 116 M 24.21 s against 30.80 s.
FWD_GATE_TARGETS_OWN_POSTFILTER = 16384
#: Domain definition's stages (:mod:`hmmgpu.gpu.domaindef`): the full matrices a launch holds at
#: most (an envelope's Forward and Backward, a region's Forward; item sizes are capped by
#: FWD_MAX_CELLS, since only the passers the parsers' kernels decoded come here), largest items
#: first; each run of launches waits for its longest item, so fewer runs wait less. The GPU
#: process takes less on a GPU with less memory (:meth:`hmmgpu.gpu.cascade.GpuCascade.definition_batch_bytes`).
#: Measured on one H200 (benchmarks/define_batches.py, every 4th of 600 Pfam models' 8,536 F3
#: passers against 29 M residues in one call, hmmsearch's float mode, warm, 4f990ab; the answers'
#: digest the same in all): 1 GB 4.15 s (the envelopes in seven runs of launches), 4 GB 3.43 s,
#: 8 GB 3.66 s, 16 GB 3.47 s; in calls of 4,096 passers 1 GB 4.72 s, 8 GB 4.51 s
#: (session_defbytes_h200_2026-11-29_s18call2.log). Earlier, in whole searches where the GPU's
#: definitions stretched the filters: 256 MB 25.5 and 23.9 s, 1 GB 20.9 and 23.5 s (9c55c5f, 9fea915).
DOMAINDEF_BATCH_BYTES = 4 << 30
#: The stochastic-trace ensemble kernel (:mod:`hmmgpu.gpu.ensemble`) runs a region on one thread,
#: its 200 traces a step after another, so a launch lasts as long as its longest region, while
#: the CPU reference runs one far faster: the longest regions of a launch are sampled by the CPU
#: reference in this many threads of the GPU process while the kernel runs on the others
#: (:func:`hmmgpu.gpu.ensemble.stages.split_by_cost`), and a step of the kernel's thread is taken
#: to cost this many of the reference's (residues of a region being its steps on both sides).
#: Measured (600 Pfam x 29 M, one H200, warm, one session at e49f04b, outputs equal): 8 threads
#: 23.5 s with 45.3 s of the GPU process's CPU time, 2 threads 22.1 s with 30.0 s, none (the
#: kernel samples every region it can) 22.4 s with 24.6 s; at 116 M, 3,471 regions on 8
#: threads cost 105 s of CPU and no wall time (81.7 s against 77.5 s with none, pyhmmer 7%
#: slower in the first session too): the regions the CPU takes do not shorten the run. Again at
#: 1ab5110 (29 M, one call, alternating): none 10.49 and 13.90 s, two 10.57 and 10.26 s.
ENSEMBLE_CPU_THREADS = 2
ENSEMBLE_GPU_STEP_COST = 24
#: Threads that finish a launch's clustered regions on the host (glibc's ``logf``, the clustering,
#: compiled and outside the interpreter's lock, the domination filter), as soon as their sampler
#: has given them: the kernel's regions in four chunks a thread, each CPU-sampled region alone
#: (:func:`hmmgpu.gpu.ensemble.stages.region_ensembles`). Before, the CPU
#: sampler's threads finished every region once all were sampled: py-spy of one call of 8,536
#: passers (one H200, af2561a) put that clustering at about 0.6 s of the ensembles' 1.25 s step.
#: With it (and the special transitions of a launch formed at once) that call took 4.15 s against
#: 4.82 s, the same digest (4f990ab, session_defbytes_h200_2026-11-29_s18call2.log).
ENSEMBLE_FINISH_THREADS = 4
#: Threads of the GPU process that define gate batches' decoded passers at the same time
#: (:meth:`hmmgpu.gpu.cascade.GpuCascade.definer`), each launching on a stream of its own:
#: a definition's launches are latency-bound (a few threads run an item, row after row, and a
#: launch waits for its longest item), so one batch's leave most of the GPU idle, and the
#: host's part of one batch runs while another's kernels do. Measured (600 Pfam x 29 M, one
#: H200, warm, the same session each pair): 4 threads 32.1, 27.6, 25.5, 23.9 s against 1 thread
#: 30.4, 25.8, 23.4, 23.9 s (4e19d9b, 9c49627, 9c55c5f, 9fea915), 8 threads 31.5, 30.8, 22.3 s,
#: 2 threads 24.8 s, and 1 thread 23.1 s against 4 threads 25.1 s (8c6e1c9): no gain from more
#: threads, each step of a batch taking about twice as long with four at once (the statistics'
#: definition_timeline). Several GPU processes on the one GPU, each with an interpreter of its own (86a3ca9, reverted),
#: were slower still: 2, 4 and 8 processes 34.5, 35.4 and 36.2 s against one's 25.6 s (same
#: session): the GPU runs one process's context at a time, and each process's latency-bound
#: launches then waited for the others' (a process's Forward gate kernel took 6.3 s for a
#: quarter of the models, against 2.2 s for all of them in one process). A py-spy --gil
#: profile of a warm run puts the interpreter's lock at about 14 s of its 25.5 s (e2e6204):
#: not saturated, so the batches' latency (kernels waiting for each other and for the filters'
#: on the one GPU, and the host's part between them) is the limit. One thread was as fast as
#: four or up to 2 s faster in each of five paired sessions, all with eight ensemble CPU
#: threads; with two and the own route's window of models (c2a5537), 1, 4 and 8 threads took
#: 22.8, 23.7 and 21.4 s: four stay. Since a definitions call rescores envelopes beside its
#: ensembles and finishes regions in threads of its own (f21f0e0, 4f990ab): 1, 2 and 4 threads
#: 11.00, 9.22 and 9.25 s at 29 M, 1 and 4 threads 18.23 and 18.10 s at 116 M (b8978db, one H200,
#: session_definers_h200_2026-11-29_s18call8.log).
DEFINE_THREADS = 4
#: F3 passers the GPU process holds for decoding and definition at most (taken and not yet
#: defined): a gate batch whose passers would go beyond is declined, and pyhmmer's pipeline
#: runs them in the post-filter's threads (:meth:`hmmgpu.gpu.cascade.GpuCascade.take_definitions`),
#: so that the GPU's definitions and the CPU's share the work and neither waits for the other.
#: A batch is taken whenever none are held; 0 declines every batch (pyhmmer's post-filter).
#: Measured on one H200 (600 Pfam, warm, every output equal to the default route's), with the
#: own route's window of models (:data:`hmmgpu.search.engine.MODELS_IN_FLIGHT_OWN_POSTFILTER_MIN`):
#: at 29 M residues 3,000, 6,000 and 12,000 passers took 14.3, 12.6, 17.3 s (d3d3379) and 12.6,
#: 11.6, 16.0 s (1e25cbb, results out of order), against 20.9-23.1 s with no bound and the
#: default route's 5.4-8.1 s; at 116 M 6,000 took 40.8 and 41.7 s, 3,000 46.3 s and 12,000
#: 45.4 and 40.7 s, against the default route's 22.4-30.6 s (three sessions) and no bound's
#: 81.7 s (3c56735). Before that window (e2e6204) the models the GPU process held kept the
#: filters waiting: 17.9-19.5 s at 29 M.
DEFINE_BACKLOG_PASSERS = 6000
#: Whether the GPU process of a search in hmmsearch's float mode (the command line's) defines its
#: passers in that mode, with domain definition's kernels in that mode too (their ``ftz`` variants:
#: :func:`hmmgpu.gpu.rounding.float_helpers`), those whose decoding holds in that mode only among them
#: (the decoding kernel flushed a tiny value: ``FTZ_ONLY``, :mod:`hmmgpu.gpu.fwdback.decoding_source`;
#: :attr:`hmmgpu.gpu.cascade.GpuCascade.defines_in_ftz`); False defines in IEEE arithmetic and leaves
#: those to pyhmmer's pipeline with the passers the GPU did not decode, as a search in IEEE
#: arithmetic does. Such passers are the long, high-scoring homologs whose parsers' rows go
#: subnormal. With the IEEE kernels alone, defining them was a loss (6b7cbbb, one H200, 600 Pfam x
#: 29 M residues, warm, one session, benchmarks/results/session_ftzdecode_h200_2026-11-28_s6call2.log):
#: 1,734 of the 6,187 passers decoded were such, their envelopes' exactness flags sent nearly all
#: of them to pyhmmer afterwards (1,920 decoded passers came out flagged), and the search took
#: 15.8 s against 13.4 s without them (3,052 of 8,878 decoded were such, 592 came out flagged).
#: With the kernels in hmmsearch's mode (2e8a0fa, session_ftzdefine_h200_2026-11-28_s6call3.log):
#: 12.7 s against 12.1 s without them, 338 of 8,621 decoded passers flagged (592 of 8,878), the
#: fallback 3.0% of the F3 passers (12.7%). A definition the IEEE stages flag for flush-to-zero
#: alone made again in that mode (DEFINE_FLAGGED_AGAIN; 04061b1, s6call4): every decoded passer defined (11,719),
#: the fallback 2.0% (the 698 passers the Forward gate leaves undecided, over its cost cap), 17.5 s
#: against 14.2 s without them in that session (the second launches of a batch's flagged
#: definitions wait for their longest items); at 116 M residues 23.1 s against the default route's
#: 19.1 s. Outputs equal to the default route's in every run. That second pass (DEFINE_FLAGGED_AGAIN,
#: e2e0018: 18.3 s with it, 15.5 s without, the fallback 2.0% against 3.0%) is gone since fd7f854:
#: such a search defines every passer in hmmsearch's mode at once (a definition no flag marks is
#: the same in both modes), one pass of launches where it took up to three (define_batches.py on
#: one H200: 5.27-5.66 s against 5.98-6.37 s for 8,536 passers, docs/performance.md).
DEFINE_FTZ_ONLY = True
#: Whether the GPU process defines the decoded passers whose region scan finds a clustered region
#: (their definitions sample stochastic-trace ensembles, the serial kernel whose longest region
#: sets the length of a batch's launches); False leaves them to pyhmmer's pipeline in the
#: post-filter's threads (:func:`hmmgpu.stages.defined.split_defined_grouped`), counted apart
#: from the fallback (the statistics' ``left_clustered``). Measured (600 Pfam x 29 M, one H200, warm,
#: d6de268/f6323c6, outputs equal): off 13.93, 15.18, 15.37, 15.56 s, on 17.21, 17.69, 21.53 s, the
#: default route 5.77-6.22 s. It stays on: issue 31 asks for the clustering on the GPU, and this route
#: is slower than the default one either way (docs/performance.md).
DEFINE_CLUSTERED = True
#: The GPU process's interpreter switch interval (seconds; CPython's default 0.005), and how
#: long its loop waits for a request at a time while it waits for a model's result.
GPU_PROCESS_SWITCH_INTERVAL = 0.001
GPU_PROCESS_POLL_SECONDS = 0.002
#: Bytes the device's memory pool keeps for the next stream-ordered allocations (the
#: definition's and the Forward parser's launches: :meth:`hmmgpu.gpu.runtime.driver.DriverRuntime.device_array`)
#: instead of giving them back to the driver at each synchronisation.
DEVICE_POOL_KEEP_BYTES = 4 << 30
#: Threads a block of domain definition's full-matrix launches of a group of four threads a job
#: (:func:`hmmgpu.gpu.fwdback.matrix_launch.produce_matrices`: those with their rows in global
#: scratch; in shared memory they are segmented, FWD_SEGMENTS):
#: four, one job's group, so that no job's rows wait on another's in the same warp (jobs of
#: different models and lengths; the envelope kernel's launches are so too). Measured on 600
#: Pfam models x 29 M residues on one H200: the matrices' step 8.2 s with blocks of 32 (98f5256),
#: 6.7 s with 4 (f19d116), the run's wall time within the runs' noise (31-34 s); the ensemble
#: kernel had gained 4x from a warp a region (40 -> 10 s).
DOMAINDEF_MATRIX_BLOCK = 4
#: Residue packing kernel (:mod:`.pack`): threads per block (a warp per target) and blocks per SM.
PACK_BLOCK = 256
PACK_BLOCKS_PER_SM = 8


def msv_shape(M: int, lanes: str) -> tuple | None:
    """(G, Q) of the MSV kernels for a model of ``M`` nodes, or None when no row fits."""
    rows, per_word = (MSV_16X2, 2) if lanes == "16x2" else (MSV_8X4, 4)
    for G, Q in rows:
        if G * per_word * Q >= M:
            return G, Q
    return None


def vit_q(M: int) -> int | None:
    """Q of the Viterbi filter kernel for a model of ``M`` nodes, or None when no row fits."""
    for Q in VIT_Q:
        if 64 * Q >= M:
            return Q
    return None


def table_placement(table_bytes: int, device) -> str:
    """Where a model table of ``table_bytes`` goes: "static", "dynamic" or "global"."""
    if table_bytes <= STATIC_SHARED_MAX_BYTES:
        return "static"
    if table_bytes + 1024 <= device.smem_per_block_optin:
        return "dynamic"
    return "global"


def persistent_grid(kernel, device, shared_bytes: int, dynamic: bool) -> tuple:
    """(blocks, threads per block) of a persistent grid that fills every SM.

    Reads the kernel's registers per thread and thread limit (a
    :class:`~hmmgpu.gpu.runtime.driver.Kernel`); raises its dynamic shared-memory limit when
    ``dynamic`` (needed above 48 KB).
    """
    if device.simulator:
        return 1, 32
    regs = max(16, int(kernel.registers))
    max_threads = int(kernel.max_threads)
    if dynamic:
        kernel.allow_dynamic_shared(shared_bytes)
    warps_by_regs = max(1, 65536 // (((regs + 7) // 8 * 8) * 32))
    warps = min(TARGET_WARPS_PER_SM, warps_by_regs)
    if shared_bytes:
        blocks_per_sm = max(1, min(32, (device.smem_per_sm - 1024) // (shared_bytes + 1024)))
    else:
        blocks_per_sm = 8
    blocks_per_sm = min(blocks_per_sm, warps)
    warps_per_block = max(1, min(32, warps // blocks_per_sm))
    block = max(32, min(warps_per_block * 32, max_threads // 32 * 32))
    return device.sm_count * blocks_per_sm, block

#: (G, Q) rows of the Smith-Waterman scan (16-bit lanes, a target pair per lane group): tile
#: widths G*Q of 48 to 704 query columns; Q/2 odd keeps the profile reads free of bank
#: conflicts; every tile's profile (30 rows of G*Q/2 words rounded up to 32) stays within the
#: 48 KB of static shared memory (G32 Q26 and Q30 would not).
SW_SHAPES = ((8, 6), (8, 10), (8, 14), (16, 6), (16, 10), (16, 14), (16, 18), (16, 22), (16, 26), (16, 30),
             (32, 6), (32, 10), (32, 14), (32, 18), (32, 22))
#: Speed of each shape on an H200 (GCUPS over its padded columns, a query in one tile), and
#: what each further tile of a longer query costs (the wavefront's fill and the boundary
#: columns), in seconds per 10^9 target residues: measured with the kernel of 2026-11-24
#: (32-bit profile index) on 2 x 10^8 random residues, one tile against three
#: (benchmarks/sw_shape_sweep.py; results/sw_shape_sweep_h200_2026-11-24d.json). Unmeasured
#: shapes get the default.
SW_SHAPE_GCUPS = {(32, 22): 4357.0, (32, 18): 4334.0, (32, 14): 4083.0, (32, 10): 3783.0,
                  (16, 30): 4130.0, (16, 26): 4408.0, (16, 22): 4323.0, (16, 18): 4332.0, (16, 14): 4085.0,
                  (16, 10): 3709.0}
SW_SHAPE_GCUPS_DEFAULT = 2200.0
SW_TILE_SECONDS_PER_GRESIDUE = 0.002


def sw_shape(query_length: int) -> tuple:
    """(G, Q) of the Smith-Waterman kernel for a query: the shape with the least predicted time,
    tiles x (columns per tile / GCUPS + the per-tile cost)."""
    def seconds(shape):
        columns = shape[0] * shape[1]
        tiles = -(-max(int(query_length), 1) // columns)
        return tiles * (columns / SW_SHAPE_GCUPS.get(shape, SW_SHAPE_GCUPS_DEFAULT) + SW_TILE_SECONDS_PER_GRESIDUE)

    return min(SW_SHAPES, key=lambda s: (seconds(s), s[0] * s[1]))
