"""Exactness checks of the Forward parser kernel (hmmgpu.gpu.runtime.context.fwdback) against HMMER's own
``p7_ForwardParser`` (libhmmer through hmmgpu.cpu.hmmerlib) and the CPU reference
(hmmgpu.cpu.fwdback).

Used by ``tests/test_fwdback.py``: under numba's CUDA simulator (it runs
``python tests/gpu/fwdback_checks.py simulator_fwd_checks`` with ``NUMBA_ENABLE_CUDASIM=1`` in a
subprocess, since the simulator is chosen at numba import) and on a GPU (``pytest -m gpu``).
"""
from __future__ import annotations

import numpy as np

from tests.helpers import sampled_hmm


def _bits(a) -> np.ndarray:
    return np.asarray(a, np.float32).view(np.uint32)


def forward_stage(db, max_bytes=None, **kwargs):
    """A :class:`ForwardStage` over ``db`` resident on device 0 (or the simulator)."""
    from hmmgpu.gpu.runtime.device import GpuDevice
    from hmmgpu.gpu.fwdback.launch import ForwardStage
    from hmmgpu.gpu.resident import ResidentDatabase

    device = GpuDevice.open(0)
    with device.activate():
        resident = ResidentDatabase(db, device, max_bytes=max_bytes)
    return ForwardStage(resident, **kwargs)


def check_forward(stage, hmm, db, indices=None) -> dict:
    """The stage's Forward parser on ``indices`` (default: every target) against libhmmer,
    target by target: status, score bits and every special-state row; and, for each target
    the kernel finished itself, its flags, final C and scale factors against the CPU
    reference's. Raises AssertionError at the first difference."""
    from hmmgpu.cpu import fwdback as ref
    from hmmgpu.cpu.hmmerlib import HmmerModel

    idx = np.flatnonzero(np.asarray(db.lengths) > 0) if indices is None else np.asarray(indices)
    with HmmerModel(hmm) as model:
        got = stage.run(model, idx, rows=True)
        tables = ref.ForwardTables.from_hmmer(model)
        report = dict(n=int(idx.size), host=int(got.host.sum()), rescaled=0, range=0, tiny_rows=0)
        for j, i in enumerate(idx):
            codes = db.codes(int(i))
            status, score, xmx, _ = model.forward_parser(codes)
            what = f"target {int(i)} (L={codes.size}, M={hmm.M})"
            if got.status[j] != status:
                raise AssertionError(f"{what}: status {got.status[j]}, libhmmer {status}")
            if status == 0 and _bits(got.scores[j]) != _bits(score):
                raise AssertionError(f"{what}: score {got.scores[j]!r}, libhmmer {score!r}")
            if status != 0 and not np.isnan(got.scores[j]):
                raise AssertionError(f"{what}: a score {got.scores[j]!r} where libhmmer fails")
            if not np.array_equal(_bits(got.rows[j]), _bits(xmx)):
                bad = np.argwhere(_bits(got.rows[j]) != _bits(xmx))[0]
                raise AssertionError(f"{what}: xmx[{bad[0]}][{bad[1]}] {got.rows[j][tuple(bad)]!r}, "
                                     f"libhmmer {xmx[tuple(bad)]!r}")
            if not np.array_equal(_bits(got.scales[j]), _bits(xmx[1:, 5][xmx[1:, 5] != 1])):
                raise AssertionError(f"{what}: scale factors differ from libhmmer's")
            report["rescaled"] += int(got.scales[j].size > 0)
            report["range"] += int(status != 0)
            if not got.on_gpu[j]:  # the model's tables or the target's cost kept it from the kernel
                report["not_run"] = report.get("not_run", 0) + 1
                continue
            mine = ref.parse(tables, codes, rows=False)
            if (got.flags[j] & ~ref.ANY_TINY) != (mine.flags & ~ref.ANY_TINY):
                raise AssertionError(f"{what}: kernel flags {got.flags[j]}, CPU reference {mine.flags}")
            if bool(got.host[j]) != mine.needs_host:
                raise AssertionError(f"{what}: host fallback {bool(got.host[j])}, reference flags {mine.flags}")
            report["tiny_rows"] += int(bool(got.flags[j] & ref.TINY_ROWS))
            if not got.host[j] and not (_bits(got.xc[j]) == _bits(mine.xc)
                                        and np.array_equal(_bits(got.scales[j]), _bits(mine.scales))):
                raise AssertionError(f"{what}: final C or scale factors differ from the CPU reference's")
    return report


def fwd_case(M: int, seed: int, n_random: int = 2, max_len: int = 12, homolog: int = 0, stops: bool = False):
    """A sampled model and short targets: random ones, degenerate and missing-data codes, a
    lone residue, with ``homolog`` > 0 a run of each node's best residue that long (the rows
    rescale), with ``stops`` a lone '*' (libhmmer: eslERANGE) and a run of 150 '*' between
    residues (its I cells decay to subnormals: flagged, recomputed by libhmmer)."""
    from pyhmmer.easel import Alphabet, DigitalSequence, DigitalSequenceBlock

    from hmmgpu.cpu import fwdback as ref
    from hmmgpu.cpu.hmmerlib import HmmerModel
    from hmmgpu.formats.seqdb import SequenceDB

    hmm = sampled_hmm(M, seed)
    r = np.random.default_rng(seed)
    seqs = [r.integers(0, 20, int(r.integers(1, max_len + 1))) for _ in range(n_random)]
    seqs += [np.array([21, 22, 23, 24, 25, 26, 3, 26, 28, 20, 7]), np.array([int(r.integers(0, 20))])]
    if homolog or stops:
        with HmmerModel(hmm) as model:
            t = ref.ForwardTables.from_hmmer(model)
        k = np.arange(M)
        best = t.rfv[:20, k % t.Q, k // t.Q].argmax(axis=0)
        if homolog:
            seqs.append(np.resize(best, homolog))
        if stops:
            seqs += [np.array([27]), np.concatenate([best[:4], np.full(150, 27), best[:4]])]
    abc = Alphabet.amino()
    blk = DigitalSequenceBlock(abc, [DigitalSequence(abc, name=f"t{i}".encode(), sequence=np.asarray(s, np.uint8))
                                     for i, s in enumerate(seqs)])
    return hmm, SequenceDB.from_block(blk)


def check_batch(stage, hmms, db) -> dict:
    """Several models' targets in one batch (one launch per storage of their rows): each
    model's scores against libhmmer's, target by target, bit for bit, where the kernel gave
    one; every target of every model is asked for."""
    from hmmgpu.cpu.hmmerlib import HmmerModel
    from hmmgpu.gpu.fwdback.launch import ForwardJob
    from hmmgpu.stages.forward import ForwardTables

    idx = np.flatnonzero(np.asarray(db.lengths) > 0)
    models = [HmmerModel(hmm) for hmm in hmms]
    try:
        batch = stage.launch([ForwardJob(ForwardTables.from_hmmer(model), idx) for model in models])
        results = batch.results()
        report = dict(models=len(hmms), n=0, host=0, launches=len(batch._launches))
        for hmm, model, got in zip(hmms, models, results):
            if not np.array_equal(got.indices, idx):
                raise AssertionError("the batch returned other targets than asked")
            for j, i in enumerate(idx):
                status, score, _, _ = model.forward_parser(db.codes(int(i)))
                if got.host[j]:
                    report["host"] += 1
                    continue
                if status != 0 or _bits(got.scores[j]) != _bits(score):
                    raise AssertionError(f"target {int(i)}, M={hmm.M}: batch score {got.scores[j]!r}, "
                                         f"libhmmer {score!r} (status {status})")
                report["n"] += 1
    finally:
        for model in models:
            model.close()
    return report


def simulator_fwd_checks():
    """The kernel under the simulator: a model with M < 100 (all three carry passes) and one
    with M >= 100 (early exit), padding lanes in both, rows that rescale, a range error and
    a subnormal fallback; rows in shared memory and in global scratch, several targets per
    thread, several chunks, and two models in one batch."""
    out = []
    hmm, db = fwd_case(18, 2, n_random=2, homolog=40, stops=True)
    out.append(("M18 shared", check_forward(forward_stage(db), hmm, db)))
    stage = forward_stage(db, storage="global", scratch_bytes=12 * 5 * 4)  # room for one group of threads: every target in turn
    report = check_forward(stage, hmm, db)
    if stage.last["groups"] != 1 or stage.last["storage"] != "global":
        raise AssertionError(f"expected one group with its rows in global memory: {stage.last}")
    out.append(("M18 global, one group", report))
    for storage in ("global", "shared"):
        stage = forward_stage(db, max_bytes=200, storage=storage, scratch_bytes=12 * 5 * 4 * 2)
        if stage.resident.n_chunks < 2:
            raise AssertionError("the small memory budget did not chunk the database")
        report = check_forward(stage, hmm, db)
        report.update(chunks=stage.resident.n_chunks, storage=stage.last["storage"])
        out.append((f"M18 chunked, {storage}", report))
    hmm101, db101 = fwd_case(101, 5, n_random=1, max_len=6, homolog=20)
    out.append(("M101", check_forward(forward_stage(db101), hmm101, db101)))
    out.append(("M18 + M101 in one batch", check_batch(forward_stage(db), [hmm, sampled_hmm(101, 5)], db)))
    # a Pfam model (M = 262) and two real homologs of the proteome: one rescaled once, one
    # rescaled 14 times whose N state goes subnormal (TINY_ROWS)
    hmm, db = real_case("KR", [261, 9])
    report = check_forward(forward_stage(db), hmm, db)
    if report["rescaled"] != 2 or report["tiny_rows"] != 1:
        raise AssertionError(f"KR homologs: expected 2 rescaled targets, 1 with a subnormal N: {report}")
    out.append(("KR", report))
    hmm, db = fwd_case(18, 2, n_random=2, homolog=40, stops=True)
    stage = forward_stage(db, max_cells=18 * 20)  # the 40-residue homolog is too costly for the GPU here
    report = check_forward(stage, hmm, db)
    if report.get("not_run", 0) < 1 or report["host"] < 3:
        raise AssertionError(f"a target above max_cells was not left to libhmmer: {report}")
    out.append(("M18, a costly target to the host", report))
    return out


def real_case(name: str, indices):
    """A model of ``pfam_samples`` and the proteome's targets ``indices`` (in file order)."""
    from hmmgpu.formats.seqdb import SequenceDB
    from tests.helpers import PROTEOME, sample_hmm

    full = SequenceDB.from_fasta(PROTEOME)
    return sample_hmm(name), SequenceDB.from_block(full.block(np.asarray(indices)))


if __name__ == "__main__":
    import sys

    from tests.helpers import run_named_checks

    run_named_checks(globals(), sys.argv[1:])
