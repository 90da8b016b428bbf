"""Exactness checks of the Forward parser kernel (hmmgpu.gpu.runtime.context.fwdback) against HMMER's own
``p7_ForwardParser`` (libhmmer through hmmgpu.cpu.hmmerlib) and the CPU reference
(hmmgpu.cpu.fwdback).

Used by ``tests/test_fwdback.py``: under numba's CUDA simulator (it runs
``python tests/gpu/fwdback_checks.py simulator_fwd_checks`` with ``NUMBA_ENABLE_CUDASIM=1`` in a
subprocess, since the simulator is chosen at numba import) and on a GPU (``pytest -m gpu``).
"""
from __future__ import annotations

import numpy as np

from hmmgpu.stages.forward import STATUS_UNSURE
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


def _equal_rows(got, expected, what: str) -> None:
    if not np.array_equal(_bits(got), _bits(expected)):
        bad = np.argwhere(_bits(got) != _bits(expected))[0]
        raise AssertionError(f"{what}[{bad[0]}][{bad[1]}] {got[tuple(bad)]!r}, libhmmer {expected[tuple(bad)]!r}")


def decoding_meets_tiny(fx, bx, has_own_scales: bool, ploop) -> bool:
    """Whether ``p7_DomainDecoding`` on these rows reads or computes a tiny value (``0 < v <=
    FLT_MIN``): the decoding kernel's SUBNORMAL flag, computed here with numpy, in HMMER's order
    (the values as :func:`hmmgpu.stages.domaindef.domain_decoding` computes them)."""
    from hmmgpu.stages.forward import FLT_MIN, XB, XC, XE, XJ, XN, XSCALE

    f32 = np.float32
    fx, bx = np.asarray(fx, f32), np.asarray(bx, f32)
    L = fx.shape[0] - 1
    with np.errstate(all="ignore"):
        sp0 = f32(1.0 / np.float64(bx[0, XN]))
        after = np.full(L, sp0, f32)
        values = [bx[0, XN], sp0]
        if has_own_scales:
            ratios = fx[:L, XSCALE] / bx[:L, XSCALE]
            after = np.multiply.accumulate(np.concatenate([[sp0], ratios]).astype(f32), dtype=f32)[1:]
            values += [ratios, after]
        before = np.concatenate([[sp0], after[:-1]]).astype(f32)

        def term(f, b, by, sp):
            ab = f * b
            abc = ab * by
            t = abc * sp
            values.extend([f, b, ab, by, abc, t])
            return t

        bt = np.add.accumulate(term(fx[:L, XB], bx[:L, XB], fx[:L, XSCALE], before), dtype=f32)
        et = np.add.accumulate(term(fx[1:, XE], bx[1:, XE], fx[1:, XSCALE], after), dtype=f32)
        ploop = np.full(L, ploop, f32)
        njcp = term(fx[:L, XN], bx[1:, XN], ploop, after)
        for col in (XJ, XC):
            njcp = njcp + term(fx[:L, col], bx[1:, col], ploop, after)
            values.append(njcp)
        values += [bt, et, (1.0 - njcp.astype(np.float64)).astype(f32)]
    return any(bool(((np.asarray(v) > 0) & (np.asarray(v) <= FLT_MIN)).any()) for v in values)


def _equal_decoding(dec, j, codes, model, what: str) -> None:
    """Target ``j``'s domain decoding in ``dec`` (a DecodingResults) against libhmmer's
    ``p7_DomainDecoding``: status (or undecided, where the flags leave the target to libhmmer and
    it did not run), and mocc, btot and etot bit for bit: against libhmmer in hmmsearch's float
    mode (flush-to-zero, its parsers included) where the kernel flushed a tiny value (FTZ_ONLY),
    else in IEEE arithmetic (which is then the same)."""
    from hmmgpu.host import flush_to_zero
    from hmmgpu.stages.forward import FTZ_ONLY

    with flush_to_zero(bool(dec.flags[j] & FTZ_ONLY)):
        status, *arrays = model.domain_decoding(codes)
    if dec.status[j] != status and not (dec.host[j] and dec.status[j] == STATUS_UNSURE):
        raise AssertionError(f"{what}: decoding status {dec.status[j]}, libhmmer {status}")
    for name, expected in zip(("mocc", "btot", "etot"), arrays):
        got = getattr(dec, name)[j]
        if not np.array_equal(_bits(got), _bits(expected)):
            bad = int(np.flatnonzero(_bits(got) != _bits(expected))[0])
            raise AssertionError(f"{what}: {name}[{bad}] {got[bad]!r}, libhmmer {expected[bad]!r}")


def check_backward(stage, hmm, db, indices=None, fallback: bool = False) -> dict:
    """The stage's Forward and Backward parsers and the domain decoding in one batch
    (``run(..., rows=True, decoding=True)``) on ``indices`` (default: every target) against libhmmer's
    ``p7_ForwardParser``, ``p7_BackwardParser`` and ``p7_DomainDecoding``, target by target: both
    parsers' special-state rows, Backward's status, ``totscale``, score and
    ``has_own_scales``, the decoding's status, mocc, btot and etot (:func:`_equal_decoding`); the
    Backward kernel's flags and host decision against the CPU reference's, and the decoding's
    FTZ_ONLY flag against numpy's test of its IEEE values (:func:`decoding_meets_tiny`). Without ``fallback`` the kernel's own rows are
    checked on every target it ran (flagged ones too: its values are IEEE's, as libhmmer's
    here) but those libhmmer reports a range error for (NaN rows); with it, libhmmer's
    recomputed values on the targets the flags leave to it. Raises AssertionError at the
    first difference."""
    from hmmgpu.cpu import fwdback as ref
    from hmmgpu.cpu.hmmerlib import HmmerModel
    from hmmgpu.stages.forward import FTZ_ONLY

    idx = np.flatnonzero(np.asarray(db.lengths) > 0) if indices is None else np.asarray(indices)
    with HmmerModel(hmm) as model:
        got = stage.run(model, idx, rows=True, decoding=True, fallback=fallback)
        bwd = got.backward
        tables = ref.ForwardTables.from_hmmer(model)
        report = dict(n=int(idx.size), host=int(bwd.host.sum()), rescaled=0, range=0, tiny_rows=0, own=0,
                      decoding_tiny=0)
        for j, i in enumerate(idx):
            codes = db.codes(int(i))
            what = f"target {int(i)} (L={codes.size}, M={hmm.M})"
            fstatus, _, fxmx, _ = model.forward_parser(codes)
            status, score, xmx, totscale, own = model.backward_parser(codes)
            report["rescaled"] += int((xmx[:, ref.XSCALE] > 1).any())
            report["range"] += int(status != 0 or fstatus != 0)
            if not got.on_gpu[j]:
                report["not_run"] = report.get("not_run", 0) + 1
                if fallback:
                    _equal_rows(bwd.rows[j], xmx, f"{what}: Backward xmx")
                    _equal_decoding(got.decoding, j, codes, model, what)
                continue
            mine = ref.backward(tables, codes)
            if (bwd.flags[j] & ~ref.ANY_TINY) != (mine.flags & ~ref.ANY_TINY):
                raise AssertionError(f"{what}: Backward kernel flags {bwd.flags[j]}, CPU reference {mine.flags}")
            if bool(bwd.host[j]) != (mine.needs_host or bool(got.host[j])):
                raise AssertionError(f"{what}: Backward host {bool(bwd.host[j])}, reference flags {mine.flags} "
                                     f"{mine.forward_flags}")
            report["tiny_rows"] += int(bool(bwd.flags[j] & ref.TINY_ROWS))
            if not mine.needs_host:
                tiny = decoding_meets_tiny(ref.parse(tables, codes).xmx, mine.xmx, mine.has_own_scales,
                                           ref.length_specials(codes.size)[1])
                if bool(got.decoding.flags[j] & FTZ_ONLY) != tiny or got.decoding.flags[j] & ref.SUBNORMAL:
                    raise AssertionError(f"{what}: decoding flags {got.decoding.flags[j]}, numpy's tiny test {tiny}")
                report["decoding_tiny"] += int(tiny)
            report["own"] += int(bool(bwd.has_own_scales[j]))
            if bool(bwd.has_own_scales[j]) != own:
                raise AssertionError(f"{what}: has_own_scales {bool(bwd.has_own_scales[j])}, libhmmer {own}")
            if status != 0 or fstatus != 0:
                if not (fallback or bwd.host[j]):
                    raise AssertionError(f"{what}: libhmmer's range error not left to it")
                if not fallback:
                    continue
            _equal_rows(got.rows[j], fxmx, f"{what}: Forward xmx")
            _equal_rows(bwd.rows[j], xmx, f"{what}: Backward xmx")
            if bwd.host[j] and not fallback:
                continue
            if bwd.status[j] != status or _bits(bwd.totscale[j]) != _bits(totscale):
                raise AssertionError(f"{what}: status {bwd.status[j]}, totscale {bwd.totscale[j]!r}; libhmmer "
                                     f"{status}, {totscale!r}")
            if status == 0 and _bits(bwd.scores[j]) != _bits(score):
                raise AssertionError(f"{what}: Backward score {bwd.scores[j]!r}, libhmmer {score!r}")
            _equal_decoding(got.decoding, j, codes, model, what)
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
        lengths = np.asarray(db.lengths)
        cells = sum(int(lengths[got.indices[got.on_gpu]].sum()) * hmm.M for hmm, got in zip(hmms, results))
        if batch.cells != cells or not cells:  # the GCUPS' numerator: model length x residues the kernel ran
            raise AssertionError(f"the batch counts {batch.cells} cells, its targets {cells}")
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


def check_backward_batch(stage, hmms, db) -> dict:
    """Several models' targets in one batch with the Backward parser and the domain decoding:
    each model's Forward and Backward rows, Backward's ``totscale`` and score, the decoding's
    mocc, btot and etot against libhmmer's, bit for bit, where the kernels gave them; every
    target of every model is asked for. The same batch without the rows gives the same
    decodings and no rows."""
    from hmmgpu.cpu.hmmerlib import HmmerModel
    from hmmgpu.gpu.fwdback.launch import ForwardJob
    from hmmgpu.stages.forward import ForwardTables

    idx = np.flatnonzero(np.asarray(db.lengths) > 0)
    models = [HmmerModel(hmm) for hmm in hmms]
    try:
        jobs = [ForwardJob(ForwardTables.from_hmmer(model), idx) for model in models]
        batch = stage.launch(jobs, rows=True, decoding=True)
        report = dict(models=len(hmms), n=0, host=0, launches=len(batch._launches))
        # the decodings alone (the rows stay on the device): the same values
        for got, alone in zip(batch.results(), stage.launch(jobs, decoding=True).results()):
            if alone.rows is not None or alone.backward.rows is not None:
                raise AssertionError("rows came back without being asked for")
            for name in ("mocc", "btot", "etot"):
                if not all(np.array_equal(_bits(a), _bits(b)) for a, b in zip(getattr(got.decoding, name),
                                                                                getattr(alone.decoding, name))):
                    raise AssertionError(f"{name} without the rows differs from {name} with them")
            if not (np.array_equal(got.decoding.status, alone.decoding.status)
                    and np.array_equal(got.backward.has_own_scales, alone.backward.has_own_scales)):
                raise AssertionError("the decodings' status or has_own_scales differ without the rows")
        for hmm, model, got in zip(hmms, models, batch.results()):
            bwd = got.backward
            for j, i in enumerate(idx):
                codes = db.codes(int(i))
                if bwd.host[j]:
                    report["host"] += 1
                    continue
                what = f"target {int(i)}, M={hmm.M}"
                _equal_rows(got.rows[j], model.forward_parser(codes)[2], f"{what}: Forward xmx")
                status, score, xmx, totscale, own = model.backward_parser(codes)
                _equal_rows(bwd.rows[j], xmx, f"{what}: Backward xmx")
                if status != 0 or _bits(bwd.scores[j]) != _bits(score) or _bits(bwd.totscale[j]) != _bits(totscale):
                    raise AssertionError(f"{what}: batch score {bwd.scores[j]!r}, libhmmer {score!r} (status {status})")
                _equal_decoding(got.decoding, j, codes, model, what)
                report["n"] += 1
    finally:
        for model in models:
            model.close()
    return report


def check_own_scales(M: int = 18, seed: int = 2, length: int = 160) -> dict:
    """``has_own_scales``, which real targets never reach with Forward's scale factors: the
    Backward kernel alone (one group, rows in global scratch) on a homolog of sampled model
    ``(M, seed)`` whose Forward rows are libhmmer's with every scale factor set to 1 but one,
    so that Backward's B passes 1e16 and the target switches to its own scale factors; its
    rows, flags and switch against the CPU reference's, which follows HMMER's source (libhmmer
    cannot be given such rows); then the decoding kernel on both row sets (the scale product
    folds Forward's and Backward's factors) against :func:`hmmgpu.stages.domaindef.domain_decoding`."""
    from hmmgpu.cpu import fwdback as ref
    from hmmgpu.cpu.hmmerlib import HmmerModel
    from hmmgpu.gpu.fwdback import decoding_source
    from hmmgpu.gpu.fwdback.backward_source import ARGS, BwdSpec
    from hmmgpu.host import flush_to_zero
    from hmmgpu.stages.domaindef import domain_decoding
    from hmmgpu.stages.forward import FTZ_ONLY
    from hmmgpu.gpu.runtime import build
    from hmmgpu.gpu.runtime.kargs import arguments
    from pyhmmer.easel import Alphabet, DigitalSequence, DigitalSequenceBlock
    from hmmgpu.formats.seqdb import SequenceDB

    hmm = sampled_hmm(M, seed)
    with HmmerModel(hmm) as model:
        tables = ref.ForwardTables.from_hmmer(model)
    k = np.arange(M)
    codes = np.resize(tables.rfv[:20, k % tables.Q, k // tables.Q].argmax(axis=0), length).astype(np.uint8)
    abc = Alphabet.amino()
    db = SequenceDB.from_block(DigitalSequenceBlock(abc, [DigitalSequence(abc, name=b"h", sequence=codes)]))
    fwd = ref.parse(tables, codes)
    fwd.xmx[:, ref.XSCALE] = 1
    fwd.xmx[length // 2, ref.XSCALE] = np.float32(3e4)
    mine = ref.backward(tables, codes, fwd)
    if not mine.has_own_scales:
        raise AssertionError("the synthetic Forward rows did not make Backward switch to its own scale factors")
    stage = forward_stage(db)
    rt, chunk = stage.device.runtime, next(iter(stage.resident.chunks()))
    with stage.device.activate():
        out = dict(out_flags=rt.device_array(1, np.int32), out_own=rt.device_array(1, np.int32),
                   out_rows=rt.device_array(6 * (length + 1), np.float32))
        fwd_rows, items = rt.to_device(fwd.xmx.reshape(-1)), rt.to_device(np.zeros(1, np.int32))
        args = arguments(
            ARGS, residues=chunk.residues, word_offsets=chunk.word_offsets, lengths=chunk.lengths,
            items=items, item_model=rt.to_device(np.zeros(1, np.int32)), n_items=1,
            counters=rt.to_device(np.zeros(1, np.int32)), rfv=rt.to_device(tables.rfv.reshape(-1)),
            tfv=rt.to_device(tables.tfv.reshape(-1)), model_q=rt.to_device(np.array([tables.Q], np.int32)),
            model_rfv=rt.to_device(np.zeros(1, np.int64)), model_tfv=rt.to_device(np.zeros(1, np.int64)),
            model_f=rt.to_device(np.array([tables.xe_move, tables.xe_loop, tables.tbm_min], np.float32)),
            pmove_by_length=stage._pmove_dev, ploop_by_length=stage._ploop_dev,
            scratch=rt.device_array(3 * tables.Q * 4, np.float32), n_threads=4,
            row_base=rt.to_device(np.zeros(1, np.int64)), fwd_rows=fwd_rows, **out)
        build.load(BwdSpec("global"), stage.device)[1, 4, rt.stream(), 0](*args)
        flags, own = int(out["out_flags"].copy_to_host()[0]), bool(out["out_own"].copy_to_host()[0])
        rows = out["out_rows"].copy_to_host().reshape(length + 1, 6)
        dec = dict(out_status=rt.device_array(1, np.int32), out_flags=rt.device_array(1, np.int32),
                   **{f"out_{name}": rt.device_array(length + 1, np.float32) for name in ("mocc", "btot", "etot")})
        args = arguments(decoding_source.ARGS, lengths=chunk.lengths, items=items, n_items=1,
                         ploop_by_length=stage._ploop_dev, row_base=rt.to_device(np.zeros(1, np.int64)),
                         fwd_rows=fwd_rows, bwd_rows=out["out_rows"], bwd_own=out["out_own"], **dec)
        build.load(decoding_source.DecodeSpec(), stage.device)[1, 1, rt.stream(), 0](*args)
        decoded = [dec[name].copy_to_host() for name in ("out_status", "out_mocc", "out_btot", "out_etot")]
        decoding_flags = int(dec["out_flags"].copy_to_host()[0])
    if (flags & ~ref.ANY_TINY) != (mine.flags & ~ref.ANY_TINY) or not own:
        raise AssertionError(f"kernel flags {flags}, own scales {own}; CPU reference {mine.flags}, True")
    if not np.array_equal(_bits(rows), _bits(mine.xmx)):
        bad = np.argwhere(_bits(rows) != _bits(mine.xmx))[0]
        raise AssertionError(f"xmx[{bad[0]}][{bad[1]}] {rows[tuple(bad)]!r}, CPU reference {mine.xmx[tuple(bad)]!r}")
    tiny = decoding_meets_tiny(fwd.xmx, mine.xmx, True, ref.length_specials(length)[1])
    if bool(decoding_flags & FTZ_ONLY) != tiny or decoding_flags & ref.SUBNORMAL:
        raise AssertionError(f"decoding flags {decoding_flags} differ from numpy's tiny test")
    # the kernel flushes as hmmsearch does: the reference under flush-to-zero, on the rows as
    # hmmsearch holds them (their tiny values 0)
    with flush_to_zero(tiny):
        expected = domain_decoding(*(np.where(x < ref.FLT_MIN, np.float32(0), x) if tiny else x
                                     for x in (fwd.xmx, mine.xmx)), True, ref.length_specials(length)[1])
    if decoded[0][0] != expected[0]:
        raise AssertionError(f"decoding status {decoded[0][0]}, reference {expected[0]}")
    for name, got, want in zip(("mocc", "btot", "etot"), decoded[1:], expected[1:]):
        if not np.array_equal(_bits(got), _bits(want)):
            bad = int(np.flatnonzero(_bits(got) != _bits(want))[0])
            raise AssertionError(f"{name}[{bad}] {got[bad]!r}, reference {want[bad]!r}")
    own_rows = int((rows[1:length, ref.XSCALE] != fwd.xmx[1:length, ref.XSCALE]).sum())
    return dict(L=length, own_scales=own, rows_own_scale=own_rows, flags=flags, decoding_flags=decoding_flags)


def simulator_bwd_checks():
    """The Backward kernel under the simulator, after the Forward kernel in the same batch: a
    model with M < 100 and one with M >= 100, padding lanes in both, rows that rescale, a range
    error, a subnormal flag, libhmmer's fallback; rows in shared memory and in global scratch,
    several targets per group and several chunks; two models in one batch; KR (M = 262) with
    two real homologs, one rescaled 14 times with a subnormal C (TINY_ROWS)."""
    out = []
    hmm, db = fwd_case(18, 2, n_random=2, homolog=40, stops=True)
    out.append(("M18 shared", check_backward(forward_stage(db), hmm, db)))
    stage = forward_stage(db, max_bytes=200, storage="global", scratch_bytes=12 * 5 * 4)
    report = check_backward(stage, hmm, db, fallback=True)
    if stage.last["groups"] != 1 or stage.last["storage"] != "global" or stage.resident.n_chunks < 2:
        raise AssertionError(f"expected one group with its rows in global memory, several chunks: {stage.last}")
    out.append(("M18 global, one group, chunked, fallback", report))
    hmm101, db101 = fwd_case(101, 5, n_random=1, max_len=6, homolog=20)
    out.append(("M101", check_backward(forward_stage(db101), hmm101, db101)))
    out.append(("M18 + M101 in one batch", check_backward_batch(forward_stage(db101), [hmm, hmm101], db101)))
    hmm, db = real_case("KR", [261, 9])
    out.append(("KR", check_backward(forward_stage(db), hmm, db)))
    out.append(("own scales", check_own_scales()))
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
