"""Exactness checks of the GPU kernels against HMMER (pyhmmer, libhmmer) and hmmgpu.cpu_filters.

Used by the tests on a GPU (``pytest -m gpu``) and, under numba's CUDA simulator, by
``tests/test_kernels.py`` (which runs ``python tests/kernel_checks.py`` with
``NUMBA_ENABLE_CUDASIM=1`` in a subprocess, since the simulator is chosen at numba import).
"""
from __future__ import annotations

import numpy as np

STATUS_RANGE = 16


def sample_case(M: int, seed: int, nseq: int, max_len: int):
    """A sampled model, and short targets: random, planted homologous segments (J-state
    use), degenerate codes, a planted overflow, a lone '*' and an empty sequence."""
    import pyhmmer
    from pyhmmer.easel import Alphabet, DigitalSequence, DigitalSequenceBlock, Randomness

    from hmmgpu.profiles import ModelProfile
    from hmmgpu.seqdb import SequenceDB

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
    from hmmgpu.profiles import msv_score, tjb_table

    tjb = tjb_table(max(int(db.max_length), 1))
    sc = msv_score(xj, tjb[np.asarray(db.lengths)[idx]])
    return np.where(st == STATUS_RANGE, np.float32(np.inf), sc).astype(np.float32)


def msv_stage(db, lanes="16x2", placement=None, max_bytes=None):
    """An :class:`MsvStage` over ``db`` resident on device 0 (or the simulator)."""
    from hmmgpu.kernels.device import GpuDevice
    from hmmgpu.kernels.msv.launch import MsvStage
    from hmmgpu.kernels.resident import ResidentDatabase

    device = GpuDevice.open(0)
    with device.activate():
        resident = ResidentDatabase(db, device, max_bytes=max_bytes)
    return MsvStage(resident, lanes=lanes, placement=placement)


def check_msv(stage, hmm, prof, db, hmmer=True, cpu=True, force=True, thr_value=None):
    """Run the MSV stage for ``prof``; compare every target with HMMER and the CPU reference."""
    from hmmgpu import cpu_filters

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


if __name__ == "__main__":
    import sys
    import time

    t = time.time()
    for name in sys.argv[1:]:
        for row in globals()[name]():
            print(*row, flush=True)
    print(f"simulator checks OK in {time.time() - t:.1f}s")
