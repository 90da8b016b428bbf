"""Exactness checks of the GPU kernels against HMMER (pyhmmer, libhmmer) and hmmgpu.cpu.filters.

Used by the tests on a GPU (``pytest -m gpu``) and, under numba's CUDA simulator, by
``tests/gpu/test_kernels.py`` (which runs ``python tests/gpu/kernel_checks.py`` with
``NUMBA_ENABLE_CUDASIM=1`` in a subprocess, since the simulator is chosen at numba import).
"""
from __future__ import annotations

import os

import numpy as np

from tests.helpers import assert_same_pipeline, forward_pvalues, hits_table, narrow_f3

STATUS_RANGE = 16


def sample_case(M: int, seed: int, nseq: int, max_len: int):
    """A sampled model, and short targets: random, planted homologous segments (J-state
    use), degenerate codes, a planted overflow, a lone '*' and an empty sequence."""
    import pyhmmer
    from pyhmmer.easel import Alphabet, DigitalSequence, DigitalSequenceBlock, Randomness

    from hmmgpu.stages.profiles import ModelProfile
    from hmmgpu.formats.seqdb import SequenceDB

    abc = Alphabet.amino()
    hmm = pyhmmer.plan7.HMM.sample(abc, M, Randomness(seed))
    prof = ModelProfile.from_hmm(hmm)
    r = np.random.default_rng(seed)
    me = np.asarray(hmm.match_emissions)[1:, :20].astype(np.float64)
    me /= me.sum(axis=1, keepdims=True)

    def emit(a, b):
        return np.array([r.choice(20, p=me[k]) for k in range(a, b)], np.uint8)

    seqs = []
    for i in range(nseq):
        L = int(r.integers(1, max_len))
        s = r.integers(0, 20, L).astype(np.uint8)
        kind = i % 4
        if kind == 1:
            a = int(r.integers(0, M))
            b = min(M, a + int(r.integers(1, M + 1)))
            s = np.concatenate([s[: L // 2], emit(a, b), s[L // 2:]])
        elif kind == 2:
            s = np.concatenate([emit(0, max(1, M // 3)), s, emit(max(1, M // 3), M)])
        elif kind == 3:
            s[r.integers(0, L, 3)] = r.integers(20, 29, 3)
        seqs.append(s)
    # two full homologous copies: the J state is used (SSV answers NORESULT, J-state MSV runs)
    seqs.append(np.concatenate([emit(0, M), r.integers(0, 20, 5).astype(np.uint8), emit(0, M)]))
    best = np.argmin(prof.byte.cost[:20], axis=0).astype(np.uint8)
    seqs.append(np.concatenate([best, best]))  # overflow
    seqs.append(np.array([27], np.uint8))  # '*' alone: SSV floor vs J-state MSV
    seqs.append(np.zeros(0, np.uint8))  # skipped
    blk = DigitalSequenceBlock(abc, [DigitalSequence(abc, name=f"s{i}".encode(), sequence=s)
                                     for i, s in enumerate(seqs)])
    return hmm, prof, SequenceDB.from_block(blk)


def hmmer_msv_scores(hmm, db, indices=None):
    """pyhmmer's p7_MSVFilter (SSV first) per target, om.L set as hmmsearch does (float32)."""
    import pyhmmer

    abc = hmm.alphabet
    gm = pyhmmer.plan7.Profile(hmm.M, abc)
    gm.configure(hmm, pyhmmer.plan7.Background(abc), 100)
    om = gm.to_optimized()
    idx = np.arange(db.n) if indices is None else np.asarray(indices)
    out = np.empty(idx.size, np.float32)
    for j, i in enumerate(idx):
        L = int(db.lengths[i])
        om.L = L
        seq = pyhmmer.easel.DigitalSequence(abc, sequence=db.codes(int(i)))
        out[j] = om.msv_filter(seq)
    return out


def gpu_scores(idx, st, xj, db):
    from hmmgpu.stages.profiles import msv_score, tjb_table

    tjb = tjb_table(max(int(db.max_length), 1))
    sc = msv_score(xj, tjb[np.asarray(db.lengths)[idx]])
    return np.where(st == STATUS_RANGE, np.float32(np.inf), sc).astype(np.float32)


def msv_stage(db, lanes="16x2", placement=None, max_bytes=None):
    """An :class:`MsvStage` over ``db`` resident on device 0 (or the simulator)."""
    from hmmgpu.gpu.runtime.device import GpuDevice
    from hmmgpu.gpu.msv.launch import MsvStage
    from hmmgpu.gpu.resident import ResidentDatabase

    device = GpuDevice.open(0)
    with device.activate():
        resident = ResidentDatabase(db, device, max_bytes=max_bytes)
    return MsvStage(resident, lanes=lanes, placement=placement)


def check_msv(stage, hmm, prof, db, hmmer=True, cpu=True, force=True, thr_value=None):
    """Run the MSV stage for ``prof``; compare every target with HMMER and the CPU reference."""
    from hmmgpu.cpu import filters as cpu_filters

    nz = np.nonzero(np.asarray(db.lengths) > 0)[0]
    idx, st, xj = stage.run(prof)
    if list(idx) != list(nz):
        raise AssertionError(f"returned targets differ: {len(idx)} vs {len(nz)}")
    report = dict(n=int(nz.size), statuses=np.bincount(st, minlength=20)[[0, 16]].tolist(),
                  noresult=stage.last.get("noresult"))
    if cpu:
        rst, rxj = cpu_filters.msv_filter(prof, db, indices=nz)
        bad = np.nonzero((rst != st) | (rxj != xj))[0]
        if bad.size:
            raise AssertionError(f"{bad.size} mismatches vs cpu_filters, e.g. target {nz[bad[0]]}: "
                                 f"gpu {st[bad[0]]},{xj[bad[0]]} cpu {rst[bad[0]]},{rxj[bad[0]]}")
    if hmmer:
        ref = hmmer_msv_scores(hmm, db, nz)
        mine = gpu_scores(idx, st, xj, db)
        bad = np.nonzero(~((ref == mine) | (np.isinf(ref) & np.isinf(mine))))[0]
        if bad.size:
            raise AssertionError(f"{bad.size} mismatches vs HMMER, e.g. target {nz[bad[0]]}: "
                                 f"gpu {mine[bad[0]]} hmmer {ref[bad[0]]}")
        report["hmmer_equal"] = int(nz.size)
    if force:
        fidx, fst, fxj = stage.run(prof, force_msv=True)
        rst, rxj = cpu_filters.msv_filter(prof, db, indices=nz, force_msv=True)
        if list(fidx) != list(nz) or (rst != fst).any() or (rxj != fxj).any():
            bad = np.nonzero((rst != fst) | (rxj != fxj))[0]
            raise AssertionError(f"force_msv: {bad.size} mismatches vs cpu_filters")
        report["force_equal"] = int(nz.size)
    if thr_value is not None:
        thr = np.full(int(db.max_length) + 1, thr_value, np.int32)
        tidx, tst, txj = stage.run(prof, thr)
        keep = (st != 0) | (xj >= thr_value)
        if list(tidx) != list(idx[keep]) or (tst != st[keep]).any() or (txj != xj[keep]).any():
            raise AssertionError("thresholded survivors differ")
        report["thr_survivors"] = int(tidx.size)
    return report


def simulator_shared_array_checks():
    """The simulator's ``cuda.shared.array`` is one array for the whole block even when every
    thread looks it up at once: a thread switch is forced between each lookup and its store
    (numba's own lookup then gives each thread its own array, and the rotation below reads
    values nobody wrote)."""
    import time

    from numba import cuda, int32
    from numba.cuda.simulator import kernelapi

    from hmmgpu.gpu.runtime.simulator import install

    install()

    class SlowLookups(dict):
        def get(self, key, default=None):
            found = super().get(key, default)
            time.sleep(0.002)  # other threads run between this lookup and the caller's store
            return found

    numbas_init = kernelapi.FakeCUDAShared.__init__

    def slow_init(self, dynshared_size):
        numbas_init(self, dynshared_size)
        self._allocations = SlowLookups()

    # the simulator swaps in its fake ``cuda`` through the kernel's globals, so the kernel is
    # made in a namespace of its own rather than as a closure over this function's import
    namespace = dict(cuda=cuda, int32=int32)
    exec("def rotate(out):\n"
         "    a = cuda.shared.array(32, int32)\n"
         "    t = cuda.threadIdx.x\n"
         "    a[t] = t\n"
         "    cuda.syncthreads()\n"
         "    out[t] = a[(t + 1) % 32]\n", namespace)
    rotate = cuda.jit(namespace["rotate"])

    kernelapi.FakeCUDAShared.__init__ = slow_init
    try:
        out = np.full(32, -1, np.int32)
        rotate[1, 32](out)
    finally:
        kernelapi.FakeCUDAShared.__init__ = numbas_init
    expected = (np.arange(32) + 1) % 32
    if not (out == expected).all():
        raise AssertionError(f"threads read {np.count_nonzero(out != expected)} shared cells nobody wrote")
    return [("shared_array", "rotation_equal", 32)]


def simulator_msv_checks():
    """The MSV kernels under the simulator: both lane modes, every table placement, chunking."""
    out = []
    for M, seed, nseq, maxL, modes in [(20, 7, 4, 30, ("16x2", "8x4")), (70, 3, 2, 20, ("16x2",))]:
        hmm, prof, db = sample_case(M, seed, nseq, maxL)
        for lanes in modes:
            stage = msv_stage(db, lanes=lanes)
            rep = check_msv(stage, hmm, prof, db, thr_value=180 if not out else None)
            out.append((M, lanes, stage.last["spec"].name, rep))
    hmm, prof, db = sample_case(20, 7, 4, 30)
    for placement in ("dynamic", "global"):  # the placements of big models' tables
        stage = msv_stage(db, placement=placement)
        out.append((20, placement, stage.last.get("spec"), check_msv(stage, hmm, prof, db, force=False, cpu=False)))
    stage = msv_stage(db, max_bytes=300)  # a tiny memory budget forces chunks: same results
    assert stage.resident.n_chunks > 1
    out.append((20, "chunked", stage.resident.n_chunks, check_msv(stage, hmm, prof, db, force=False)))
    return out


def packing_checks(scale: int = 1):
    """The resident database's slots, packed on the device (:mod:`hmmgpu.gpu.pack`) and on
    the host (:func:`~hmmgpu.gpu.layout.pack_residues`), byte for byte: targets in
    scattered database order, lengths of every remainder mod 4, longer than a warp's 128
    residues, empty ones; a budget that holds the slots but not the residues beside them
    packs on the host, a smaller one chunks. ``scale`` multiplies the targets (on a GPU)."""
    from hmmgpu.gpu import pack, resident
    from hmmgpu.gpu.runtime.device import GpuDevice
    from hmmgpu.formats.seqdb import SequenceDB

    rng = np.random.default_rng(11)
    lengths = np.concatenate([rng.integers(0, 300, 40 * scale), [0, 1, 2, 3, 4, 5, 128, 129, 131, 300]])
    rng.shuffle(lengths)
    names, offsets = [], [0]
    for k in range(lengths.size):
        names.append(b"t%d" % k)
        offsets.append(offsets[-1] + len(names[-1]))
    db = SequenceDB(rng.integers(0, 29, int(lengths.sum()), dtype=np.uint8), lengths.astype(np.int64),
                    np.frombuffer(b"".join(names), np.uint8), np.array(offsets, np.int64), np.zeros(0, np.uint8),
                    np.zeros(lengths.size + 1, np.int64), source="packing checks")
    device = GpuDevice.open(0)
    used = []
    on_device = pack.pack_on_device

    def spy(*args):
        used.append("device")
        return on_device(*args)

    pack.pack_on_device = spy
    out = []
    try:
        kept = lengths[lengths > 0]
        slots = int(((kept + 3) // 4 * 4 + resident.PER_TARGET_BYTES).sum())
        # the slots and the residues fit; the slots only; a quarter of the slots
        for label, budget, route in (("device", None, ["device"]), ("host", slots + db.residues.nbytes - 1, []),
                                     ("chunked", slots // 4, [])):
            used.clear()
            with device.activate():
                res = resident.ResidentDatabase(db, device, max_bytes=budget)
                for chunk in res.chunks():
                    starts = np.asarray(db.offsets)[res.indices[chunk.lo:chunk.hi]]
                    want, woff = resident.pack_residues(db.residues, starts, res.lengths[chunk.lo:chunk.hi])
                    got = chunk.residues.copy_to_host().view(np.uint8)
                    if not (np.array_equal(got, want) and np.array_equal(chunk.word_offsets.copy_to_host(), woff)):
                        raise AssertionError(f"{label}: slots of positions {chunk.lo}..{chunk.hi} differ")
            if used != route or (label == "chunked") != (res.n_chunks > 1):
                raise AssertionError(f"{label}: packed on {used or ['host']} in {res.n_chunks} chunks")
            out.append((label, res.n, res.n_chunks))
    finally:
        pack.pack_on_device = on_device
    return out


def simulator_pack_checks():
    """The packing kernel under the simulator."""
    return packing_checks()


def vit_stage(db, transitions=None):
    """A :class:`VitStage` over ``db`` resident on device 0 (or the simulator); ``transitions``
    forces where the kernel reads its transition rows from."""
    from hmmgpu.gpu.runtime.device import GpuDevice
    from hmmgpu.gpu.resident import ResidentDatabase
    from hmmgpu.gpu.vit.launch import VitStage

    device = GpuDevice.open(0)
    with device.activate():
        return VitStage(ResidentDatabase(db, device), transitions=transitions)


def hmmer_vit_scores(hmm, db, indices):
    """HMMER's own p7_ViterbiFilter (libhmmer through ctypes) per target: (status, score)."""
    from hmmgpu.cpu.hmmerlib import HmmerModel

    with HmmerModel(hmm) as ref:
        out = ref.score_all(db.codes(int(t)) for t in indices)
    return np.asarray(out["vf_status"]), np.asarray(out["vf"], np.float32)


def check_vit(stage, hmm, prof, db, indices=None, cpu=True, hmmer=True):
    """The Viterbi filter kernel against the CPU reference and HMMER, target by target."""
    from hmmgpu.cpu import filters as cpu_filters
    from hmmgpu.stages.cascade import ViterbiResult

    idx = np.flatnonzero(np.asarray(db.lengths) > 0) if indices is None else np.asarray(indices)
    st, xc = stage.run(prof, idx)
    report = dict(n=int(idx.size), uncertain=stage.last.get("uncertain"), cpu_reason=stage.last.get("cpu_reason"))
    if cpu:
        rst, rxc = cpu_filters.viterbi_filter(prof, db, idx)
        bad = np.flatnonzero((rst != st) | (rxc != xc))
        if bad.size:
            raise AssertionError(f"{bad.size} Viterbi mismatches vs cpu_filters, e.g. target {idx[bad[0]]}: "
                                 f"gpu {st[bad[0]]},{xc[bad[0]]} cpu {rst[bad[0]]},{rxc[bad[0]]}")
        report["cpu_equal"] = int(idx.size)
    if hmmer:
        ref_st, ref = hmmer_vit_scores(hmm, db, idx)
        mine = ViterbiResult(idx, st, xc).scores(db.lengths)
        bad = np.flatnonzero(~((ref == mine) | (np.isinf(ref) & np.isinf(mine) & (np.sign(ref) == np.sign(mine)))))
        if bad.size:
            raise AssertionError(f"{bad.size} Viterbi mismatches vs HMMER, e.g. target {idx[bad[0]]}: "
                                 f"gpu {mine[bad[0]]} hmmer {ref[bad[0]]}")
        report["hmmer_equal"] = int(idx.size)
    return report


def calibrated(hmm):
    """``hmm`` read back from its text with STATS lines of a Pfam model's size added (a sampled
    model has none; any consistent values serve to compare hmmgpu with HMMER)."""
    import io

    from pyhmmer.plan7 import HMMFile

    buf = io.BytesIO()
    hmm.write(buf)
    stats = (b"STATS LOCAL MSV       -9.0000  0.71000\nSTATS LOCAL VITERBI   -9.5000  0.71000\n"
             b"STATS LOCAL FORWARD   -3.5000  0.71000\n")
    text = buf.getvalue().replace(b"\nHMM ", b"\n" + stats + b"HMM ", 1)
    with HMMFile(io.BytesIO(text)) as f:
        return f.read()


def vit_case(M, seed, n_random, max_len, long_cases=True):
    """A sampled model and short targets for the Viterbi filter: random ones, gap/stop/missing
    codes inside, lone stops, degenerate codes and, with ``long_cases``, a homolog with a
    deletion (D->D runs) and a repeated one that overflows (+inf)."""
    import pyhmmer
    from pyhmmer.easel import DigitalSequence, DigitalSequenceBlock

    from hmmgpu.stages.profiles import ModelProfile
    from hmmgpu.formats.seqdb import SequenceDB

    abc = pyhmmer.easel.Alphabet.amino()
    hmm = calibrated(pyhmmer.plan7.HMM.sample(abc, M, pyhmmer.easel.Randomness(seed)))
    prof = ModelProfile.from_hmm(hmm)
    r = np.random.default_rng(seed)
    seqs = [r.integers(0, 20, int(r.integers(1, max_len))) for _ in range(n_random)]
    seqs += [np.array([27]), np.array([20, 27, 28]), np.concatenate([r.integers(0, 20, 5), [27], r.integers(0, 20, 5)]),
             np.full(6, 26), np.array([21, 22, 23, 24, 25])]
    best = np.argmax(prof.word.rw[:20], axis=0)
    if long_cases:
        seqs.append(np.concatenate([best[: M // 3], best[2 * M // 3:]]))  # a deletion: D->D paths
        seqs.append(np.tile(best, max(2, 160 // M)))  # overflow (+inf)
    blk = DigitalSequenceBlock(abc, [DigitalSequence(abc, name=f"t{i}".encode(), sequence=np.asarray(s, np.uint8))
                                     for i, s in enumerate(seqs)])
    return hmm, prof, SequenceDB.from_block(blk)


def simulator_vit_checks():
    """The Viterbi filter kernel under the simulator: several shapes and both transition
    placements, special rows, D->D runs, overflow."""
    out = []
    for M, seed, n_random, max_len, long_cases, transitions in ((12, 3, 3, 16, False, None),
                                                               (70, 5, 1, 8, False, None),
                                                               (20, 9, 1, 8, True, "shared")):
        hmm, prof, db = vit_case(M, seed, n_random, max_len, long_cases)
        stage = vit_stage(db, transitions=transitions)
        out.append((M, stage.kernels.spec(M).name, check_vit(stage, hmm, prof, db)))
    return out


def check_forward_gate(backend, hmm, prof, db, options, result) -> dict:
    """The Forward gate of one model's cascade ``result`` (on ``backend``, CUDA or numba):
    its Forward scores are libhmmer's ``p7_ForwardParser`` scores bit for bit (targets it left
    undecided are those libhmmer fails on, or flagged), and it sent on exactly the Viterbi
    filter's survivors whose Forward P-value, from HMMER's own functions and arithmetic, is
    <= F3, with the undecided ones; and, unless hmmgpu's own post-filter follows, nothing more
    (no decodings of the passers)."""
    from hmmgpu.cpu.hmmerlib import HmmerModel
    from hmmgpu.stages.forward import STATUS_UNSURE

    gate, past_vit = result.forward, result.past_vit
    if result.decoded is not None and options.run.postfilter != "hmmgpu":
        raise AssertionError("the cascade decoded F3 passers for pyhmmer's post-filter")
    if gate is None:
        if past_vit.size == 0 and result.survivors.size == 0:  # nothing to decide
            return dict(passed=0, failed=0, unsure=0)
        raise AssertionError("the cascade ran no Forward gate")
    fwd = backend.forward(prof, past_vit)
    with HmmerModel(hmm) as model:
        expected = [model.forward_parser(db.codes(int(t)))[:2] for t in past_vit]
    for t, st, sc, (ref_st, ref_sc) in zip(past_vit, fwd.status, fwd.scores, expected):
        if st == STATUS_UNSURE:
            continue
        if st != ref_st or (st == 0 and np.float32(sc).view(np.uint32) != np.float32(ref_sc).view(np.uint32)):
            raise AssertionError(f"target {t}: Forward {st} {sc!r}, libhmmer {ref_st} {ref_sc!r}")
    decided = fwd.status != STATUS_UNSURE
    pvalues = forward_pvalues(hmm, db, past_vit, options.bias_filter)
    want = past_vit[~decided | (pvalues <= options.F3)]
    if not np.array_equal(result.survivors, want):
        raise AssertionError(f"F3 = {options.F3!r}: the gate sent on {result.survivors}, HMMER passes {want}")
    counts = (gate.passed, gate.failed, int(gate.unsure.size))
    if counts != (int((decided & (pvalues <= options.F3)).sum()), int((decided & ~(pvalues <= options.F3)).sum()),
                  int((~decided).sum())) or not np.array_equal(gate.unsure, past_vit[~decided]):
        raise AssertionError(f"gate counts {counts} differ from its decisions")
    return dict(passed=counts[0], failed=counts[1], unsure=counts[2])


def check_cascade(hmm, db, lanes="auto", **options):
    """The whole search on the cuda backend against a full pyhmmer search: tables, counters,
    every bias score the GPU decided with against the CPU reference, and the Forward gate
    (:func:`check_forward_gate`)."""
    import pyhmmer

    from hmmgpu.cpu import filters as cpu_filters
    from hmmgpu.gpu.backend import CudaBackend
    from hmmgpu.search.engine import SearchEngine
    from hmmgpu.gpu.bias import Decision
    from hmmgpu.gpu.msv.source import Counter
    from hmmgpu.options import SearchOptions
    from hmmgpu.stages.profiles import ModelProfile

    opts = SearchOptions.from_kwargs(backend="cuda", cpus=1, lanes=lanes, **options)
    backend = CudaBackend(db, lanes=lanes)
    ours = next(iter(SearchEngine(db, opts, backend).search([hmm])))
    ref = pyhmmer.plan7.Pipeline(hmm.alphabet, **opts.pipeline_kwargs()).search_hmm(hmm, db.block())
    rows = [hits_table(hits) for hits in (ours.hits, ref)]
    if rows[0] != rows[1]:
        raise AssertionError(f"tables differ:\n{rows[0].decode()}\nvs\n{rows[1].decode()}")
    assert_same_pipeline(ours.hits, ref)
    # the GPU's bias scores, where it decided with them, equal the CPU reference's
    prof = ModelProfile.from_hmm(hmm)
    ticket = backend.gpu.submit(prof, opts)
    result = ticket.result()
    gate = check_forward_gate(backend, hmm, prof, db, opts, result)
    h = ticket.slot.host
    n = int(h["counters"][Counter.OUT])
    pos = backend.resident.indices[h["msv_pos"][:n]]
    decided = h["decision"][:n] != Decision.HOST
    if opts.bias_filter and decided.any():
        ref_fsc = cpu_filters.bias_filter(prof, db, pos[decided])
        if not np.array_equal(ref_fsc, h["filtersc"][:n][decided]):
            raise AssertionError("GPU bias filter scores differ from the CPU reference")
    backend.close()
    counters = ref.__getstate__()["pipeline"]
    n_past = [counters[k] for k in ("n_past_msv", "n_past_bias", "n_past_vit", "n_past_fwd")]
    if gate["unsure"] == 0 and n_past[3] != gate["passed"]:
        raise AssertionError(f"pyhmmer passed {n_past[3]} targets through Forward, the gate {gate['passed']}")
    return dict(hits=len(ref), n_past=n_past, gpu_bias_scores=int(decided.sum()), gate=gate)


def simulator_cascade_checks():
    """The whole GPU cascade (MSV, bias, Viterbi kernels and the host's part) under the simulator."""
    out = []
    hmm, prof, db = vit_case(24, 11, 3, 12, long_cases=True)
    for options in (dict(), dict(E=1e-3), dict(F2=1.0)):
        out.append((options, check_cascade(hmm, db, **options)))
    # every target through the filters, the all-stop ones (Forward: eslERANGE) left undecided
    # by the gate and sent on (pyhmmer raises on them, as it would without the gate)
    from hmmgpu.gpu.backend import CudaBackend
    from hmmgpu.options import SearchOptions

    backend = CudaBackend(db)
    opts = SearchOptions.from_kwargs(F1=1.0, F2=1.0)
    out.append(("undecided", check_forward_gate(backend, hmm, prof, db, opts, backend.cascade(prof, opts))))
    backend.close()
    # every target through MSV: without the all-stop targets, on which HMMER's Forward fails
    keep = [i for i in range(db.n) if (db.codes(i) < 20).any()]
    from hmmgpu.formats.seqdb import SequenceDB

    db = SequenceDB.from_block(db.block(keep))
    for options in (dict(F1=1.0), dict(F1=1.0, bias_filter=False)):
        out.append((options, check_cascade(hmm, db, **options)))
    # F3 between two survivors' Forward P-values, as narrowly as a double allows: a P-value
    # itself (that target passes) and the double below it (it fails)
    past_vit = check_cascade_survivors(hmm, db, F1=1.0, F2=1.0)
    for F3 in narrow_f3(forward_pvalues(hmm, db, past_vit))[:2]:
        out.append((dict(F1=1.0, F2=1.0, F3=F3), check_cascade(hmm, db, F1=1.0, F2=1.0, F3=F3)))
    return out


def simulator_gate_batch_checks():
    """Several models' Forward gates in one batch: three models submitted, their filters
    finished (gates queued), one launch for all three; each model's result equals the one it
    gets alone, and the gate's survivors equal HMMER's F3 decisions (:func:`check_forward_gate`)."""
    from hmmgpu.gpu.backend import CudaBackend
    from hmmgpu.options import SearchOptions

    cases = [vit_case(M, seed, 3, 12, long_cases=False) for M, seed in ((24, 11), (40, 3), (17, 5))]
    db = cases[0][2]
    opts = SearchOptions.from_kwargs(F1=1.0, F2=1.0)
    backend = CudaBackend(db)
    try:
        profiles = [backend.prepare(hmm) for hmm, _, _ in cases]
        gated = [backend.gpu.submit(prof, opts).filtered() for prof in profiles]
        if any(g.batch is not None for g in gated):
            raise AssertionError("a gate was launched before its batch filled or was flushed")
        backend.flush_gates()
        if len({id(g.batch) for g in gated}) != 1:
            raise AssertionError("the three models' gates did not share one batch")
        out = []
        for (hmm, _, _), prof, g in zip(cases, profiles, gated):
            together = g.result()
            alone = backend.cascade(prof, opts)
            if not (np.array_equal(together.survivors, alone.survivors)
                    and np.array_equal(together.past_vit, alone.past_vit)):
                raise AssertionError(f"M={hmm.M}: the batched gate sent on other targets than the model's own")
            out.append((f"batched M{hmm.M}", check_forward_gate(backend, hmm, prof, db, opts, together)))
        return out
    finally:
        backend.close()


def check_cascade_survivors(hmm, db, **options):
    """The Viterbi filter's survivors of ``hmm`` over ``db`` on the GPU cascade."""
    from hmmgpu.gpu.backend import CudaBackend
    from hmmgpu.options import SearchOptions

    backend = CudaBackend(db)
    try:
        return backend.cascade(backend.prepare(hmm), SearchOptions.from_kwargs(**options)).past_vit
    finally:
        backend.close()


def simulator_cascade_host_checks():
    """The host's part of the GPU cascade: every bias score flagged uncertain and every
    Viterbi filter row flagged as a possible overflow, so HMMER's own functions finish every
    target; the search must still equal pyhmmer's."""
    import dataclasses
    from types import SimpleNamespace

    from hmmgpu.gpu import rounding
    from hmmgpu.gpu.vit import launch

    real = rounding.float_helpers("python")
    rounding.float_helpers = lambda binding, ftz=False: SimpleNamespace(**{**vars(real), "certain": lambda r: False})
    tables = launch.tables
    launch.tables = lambda *a: dataclasses.replace(tables(*a), overflow_at=np.full(29, -32768, np.int32))
    hmm, prof, db = vit_case(24, 11, 3, 12, long_cases=True)
    return [(options, check_cascade(hmm, db, **options)) for options in (dict(), dict(F2=1.0))]

def simulator_gpu_process_checks():
    """The search engine's CUDA backend: the cascade in a child process (under the simulator
    too, inherited through the environment), several models in flight, results in order;
    tables and counters equal pyhmmer's."""
    import io

    import pyhmmer

    from hmmgpu.search.engine import SearchEngine
    from hmmgpu.errors import HmmgpuError
    from hmmgpu.gpu.process import CudaProcessBackend
    from hmmgpu.options import SearchOptions

    cases = [vit_case(M, seed, 3, 12, long_cases=False) for M, seed in ((24, 11), (40, 3), (17, 5))]
    hmms = [c[0] for c in cases]
    db = cases[0][2]
    opts = SearchOptions.from_kwargs(backend="cuda", cpus=2, E=100.0)
    backend = CudaProcessBackend(db)
    try:
        backend.prepare_for([h.M for h in hmms])
        results = list(SearchEngine(db, opts, backend).search(hmms * 3))
        details = backend.details()
    finally:
        backend.close()
    if not details.get("kernel_ms"):
        raise AssertionError(f"no statistics from the GPU process: {details}")
    out = []
    for result, hmm in zip(results, hmms * 3):
        ref = pyhmmer.plan7.Pipeline(hmm.alphabet, **opts.pipeline_kwargs()).search_hmm(hmm, db.block())
        rows = [hits_table(hits) for hits in (result.hits, ref)]
        if rows[0] != rows[1] or result.hmm is not hmm:
            raise AssertionError(f"model {result.index}: tables differ")
        assert_same_pipeline(result.hits, ref)
        out.append((result.index, str(hmm.name), len(ref)))
    # the command line: the child started before the database is read, reading the file itself
    import contextlib
    import tempfile
    from pathlib import Path

    from hmmgpu.cli import main

    samples = Path(__file__).resolve().parents[2] / "pfam_samples"
    with pyhmmer.plan7.HMMFile(samples / "PF02826.hmm") as fh:
        model = fh.read()
    with pyhmmer.easel.SequenceFile(str(next(samples.glob("*.faa"))), digital=True) as fh:
        proteome = fh.read_block()
    found = {h.name for h in pyhmmer.plan7.Pipeline(model.alphabet).search_hmm(model, proteome)}
    chosen = [s for s in proteome if s.name in found][:4] + [s for s in proteome if s.name not in found][:4]
    with tempfile.TemporaryDirectory() as tmp:
        fasta, hmmfile, table = (os.path.join(tmp, name) for name in ("db.fa", "m.hmm", "m.tbl"))
        with open(fasta, "wb") as fh:
            for seq in chosen:
                seq.textize().write(fh)
        with open(hmmfile, "wb") as fh:
            model.write(fh)
        with contextlib.redirect_stderr(io.StringIO()) as err:
            code = main(["search", "--backend", "cuda", "--cpu", "2", "-o", os.devnull, "--tblout", table,
                         hmmfile, fasta])
        if code != 0 or "backend cuda" not in err.getvalue():
            raise AssertionError(f"command line: exit {code}: {err.getvalue()}")
        with open(table, "rb") as fh:
            rows = [line.split() for line in fh if not line.startswith(b"#")]
        block = pyhmmer.easel.DigitalSequenceBlock(proteome.alphabet, chosen)
        ref = pyhmmer.plan7.Pipeline(model.alphabet).search_hmm(model, block)
        if rows != [line.split() for line in hits_table(ref).splitlines()] or not rows:
            raise AssertionError(f"command line: {len(rows)} rows differ from pyhmmer's {len(ref)}")
        out.append(("command line", len(rows)))
    # a child that dies is reported as one line, not a hang
    backend = CudaProcessBackend(db)
    backend._process.kill()
    try:
        backend.submit(backend.prepare(hmms[0]), opts).result()
        raise AssertionError("a dead GPU process went unnoticed")
    except HmmgpuError as error:
        if "the GPU process stopped" not in str(error):
            raise
    finally:
        backend.close()
    return out


if __name__ == "__main__":
    import sys

    from tests.helpers import run_named_checks

    run_named_checks(globals(), sys.argv[1:])
