"""The full-matrix Forward and Backward kernels (hmmgpu.gpu.fwdback.matrix_source, launched by
hmmgpu.gpu.fwdback.matrix_launch.produce_matrices) against the CPU references
(hmmgpu.cpu.fwdback.forward_matrix, backward_matrix), bit for bit: every cell, every row of
specials, flags, score, totscale and has_own_scales. Run by tests/gpu/test_matrix_kernel.py
under numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1`` in a subprocess, since the simulator
is chosen at numba import), and on a GPU by its ``gpu`` test.

    NUMBA_ENABLE_CUDASIM=1 PYTHONPATH=. python3 tests/gpu/matrix_checks.py simulator_matrix_checks
"""
from __future__ import annotations

import weakref

import numpy as np

from tests.helpers import bits

#: The model of each job's tables (made here), for the comparison with libhmmer's own matrices.
_HMM_OF: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _tables(hmm):
    from hmmgpu.cpu.hmmerlib import HmmerModel
    from hmmgpu.stages.forward import ForwardTables

    with HmmerModel(hmm) as model:
        tables = ForwardTables.from_hmmer(model)
    _HMM_OF[tables] = hmm
    return tables


def matrix_jobs(cases):
    """MatrixJobs of ``cases`` (M, seed, max_len, homolog): each target of
    :func:`tests.gpu.fwdback_checks.fwd_case` whole (multihit; Backward too on targets of even
    length) and two slices (unihit with Backward, as an envelope; multihit, as a region, with
    Backward on targets of odd length), and a lone '*' (multihit, and unihit with Backward)."""
    from hmmgpu.gpu.fwdback.matrix_launch import MatrixJob
    from tests.gpu.fwdback_checks import fwd_case

    jobs = []
    for M, seed, max_len, homolog in cases:
        hmm, db = fwd_case(M, seed, n_random=1, max_len=max_len, homolog=homolog)
        tables = _tables(hmm)
        for t in range(db.n):
            codes = db.codes(t)
            L = codes.size
            jobs += [MatrixJob(tables, codes, 1, L, backward=L % 2 == 0),
                     MatrixJob(tables, codes, 1 + L // 4, L - L // 5, unihit=True, backward=True),
                     MatrixJob(tables, codes, 1 + L // 3, L, unihit=False, backward=L % 2 == 1)]
        stop = np.array([27], np.uint8)  # a lone '*': the final C is 0 (RANGE, libhmmer's eslERANGE)
        jobs += [MatrixJob(tables, stop, 1, 1), MatrixJob(tables, stop, 1, 1, unihit=True, backward=True)]
    return jobs


def _equal(what: str, got, want) -> None:
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    if got.shape != want.shape:
        raise AssertionError(f"{what}: shape {got.shape}, reference {want.shape}")
    if not np.array_equal(bits(got), bits(want)):
        bad = tuple(np.argwhere(bits(got) != bits(want))[0])
        raise AssertionError(f"{what}{list(bad)}: {got[bad]!r}, reference {want[bad]!r}")


def _equal_result(what: str, got, want) -> None:
    """A MatrixResult against the reference's: cells, specials, flags (but the reference's
    diagnostic ANY_TINY), score, totscale, has_own_scales."""
    from hmmgpu.stages.forward import ANY_TINY

    _equal(f"{what} dp", got.matrix.dp, want.matrix.dp)
    _equal(f"{what} xmx", got.matrix.xmx, want.matrix.xmx)
    if got.flags != want.flags & ~ANY_TINY:
        raise AssertionError(f"{what}: flags {got.flags}, reference {want.flags}")
    for name, a, b in (("score", got.score, want.score), ("totscale", got.matrix.totscale, want.matrix.totscale)):
        if bits(a) != bits(b) and not (np.isnan(a) and np.isnan(b)):
            raise AssertionError(f"{what}: {name} {a!r}, reference {b!r}")
    if got.matrix.has_own_scales != want.matrix.has_own_scales:
        raise AssertionError(f"{what}: has_own_scales {got.matrix.has_own_scales}")


def _equal_libhmmer(what: str, got, score, matrix) -> None:
    """A MatrixResult against libhmmer's own full matrix (``HmmerModel.forward_matrix`` or
    ``backward_matrix``) where libhmmer's status is OK: cells, specials, score, totscale,
    has_own_scales."""
    _equal(f"{what} dp (libhmmer)", got.matrix.dp, matrix.dp)
    _equal(f"{what} xmx (libhmmer)", got.matrix.xmx, matrix.xmx)
    if (bits(got.score), bits(got.matrix.totscale), got.matrix.has_own_scales) != (
            bits(score), bits(matrix.totscale), matrix.has_own_scales):
        raise AssertionError(f"{what}: score, totscale or has_own_scales differ from libhmmer's")


def check_jobs(jobs, **options) -> dict:
    """:func:`produce_matrices` on ``jobs`` (``options`` its keywords) against the references, job
    by job, with the matrices copied back two ways (every job at once, and one job alone); and
    against libhmmer's own ``p7_Forward`` and ``p7_Backward`` matrices where libhmmer's status is
    OK (``libhmmer``: how many matrices). With ``ftz=True`` (the kernels in hmmsearch's float
    mode) the references and libhmmer run under flush-to-zero, the x86 mode itself."""
    from hmmgpu.cpu.hmmerlib import HmmerModel
    from hmmgpu.gpu.fwdback.matrix_launch import produce_matrices
    from hmmgpu.host import flush_to_zero

    batch = produce_matrices(jobs, **options)
    forward, backward = batch.host_results(), batch.host_results(backward=True)
    with flush_to_zero(bool(options.get("ftz"))):
        return _check_results(jobs, batch, forward, backward, HmmerModel)


def _check_results(jobs, batch, forward, backward, HmmerModel) -> dict:
    """:func:`check_jobs`' comparisons, in the calling thread's float mode."""
    from hmmgpu.cpu import fwdback as ref

    report = dict(jobs=len(jobs), backward=0, unihit=0, rescaled=0, backward_rescaled=0, range=0,
                  models=len({id(j.tables) for j in jobs}), libhmmer=0)
    models = {id(job.tables): HmmerModel(_HMM_OF[job.tables]) for job in jobs}
    try:
        for k, job in enumerate(jobs):
            model = models[id(job.tables)]
            what = f"job {k} ({job.i}..{job.j} of L={len(job.codes)}, M={job.tables.M}, unihit={job.unihit})"
            status, score, matrix = model.forward_matrix(job.codes, job.i, job.j, unihit=job.unihit)
            if status == 0:
                _equal_libhmmer(f"{what} Forward", forward[k], score, matrix)
                report["libhmmer"] += 1
            if job.backward:
                status, score, matrix = model.backward_matrix(job.codes, job.i, job.j, unihit=job.unihit)
                if status == 0:
                    _equal_libhmmer(f"{what} Backward", backward[k], score, matrix)
                    report["libhmmer"] += 1
    finally:
        for model in models.values():
            model.close()
    for k, job in enumerate(jobs):
        what = f"job {k} ({job.i}..{job.j} of L={len(job.codes)}, M={job.tables.M}, unihit={job.unihit})"
        fwd = ref.forward_matrix(job.tables, job.codes, job.i, job.j, unihit=job.unihit)
        _equal_result(f"{what} Forward", forward[k], fwd)
        report["unihit"] += int(job.unihit)
        report["rescaled"] += int((fwd.matrix.xmx[:, ref.XSCALE] > 1).any())
        report["range"] += int(bool(fwd.flags & ref.RANGE))
        if job.backward:
            bck = ref.backward_matrix(job.tables, job.codes, fwd, job.i, job.j, unihit=job.unihit)
            _equal_result(f"{what} Backward", backward[k], bck)
            report["backward"] += 1
            report["backward_rescaled"] += int((bck.matrix.xmx[:, ref.XSCALE] > 1).any())
        elif backward[k] is not None:
            raise AssertionError(f"{what}: a Backward matrix nobody asked for")
    last = len(jobs) - 1
    _equal_result("the last job alone", batch.host_result(last), ref.forward_matrix(
        jobs[last].tables, jobs[last].codes, jobs[last].i, jobs[last].j, unihit=jobs[last].unihit))
    wants = np.array([job.backward for job in jobs])
    if wants.any() and not wants.all() and batch.dp_base[wants].max() > batch.dp_base[~wants].min():
        raise AssertionError("the Backward jobs are not laid out first")
    return report


def check_own_scales(M: int = 12, seed: int = 5, length: int = 60) -> dict:
    """``has_own_scales`` in the Backward matrix kernel: on a homolog of a sampled model, with
    Forward rows whose scale factors are all 1 (the kernel reads nothing else of them), Backward's
    B passes 1e16 and it switches to its own scale factors; the kernel alone against
    :func:`hmmgpu.cpu.fwdback.backward_parser` given the same scale factors (libhmmer cannot be
    given such rows)."""
    from hmmgpu.cpu import fwdback as ref
    from hmmgpu.gpu.fwdback.matrix_source import BWD_ARGS, BwdMatrixSpec
    from hmmgpu.gpu.runtime import build
    from hmmgpu.gpu.runtime.device import GpuDevice
    from hmmgpu.gpu.runtime.kargs import arguments
    from hmmgpu.stages.forward import backward_score_from_scales
    from tests.helpers import sampled_hmm

    tables = _tables(sampled_hmm(M, seed))
    k = np.arange(M)
    codes = np.resize(tables.rfv[:20, k % tables.Q, k // tables.Q].argmax(axis=0), length).astype(np.uint8)
    fwd_scale = np.ones(length + 1, np.float32)
    xmx = np.zeros((length + 1, 6), np.float32)
    dp = np.zeros((length + 1, 3, tables.Q, 4), np.float32)
    pmove, ploop = ref.length_specials(length, tables.nj)
    flags, own, totscale, score = ref.backward_parser(codes, tables.rfv, tables.tfv, pmove, ploop, tables.xe_move,
                                                      tables.xe_loop, fwd_scale, xmx, dp)
    if not own:
        raise AssertionError("Backward did not switch to its own scale factors")
    rows = np.zeros((length + 1, 6), np.float32)
    rows[:, ref.XSCALE] = fwd_scale
    device = GpuDevice.open(0)
    dev, empty = device.runtime.to_device, device.runtime.device_array
    out = dict(fwd_rows=dev(rows.ravel()), out_rows=empty(6 * (length + 1), np.float32),
               out_cells=empty(dp.size, np.float32),
               **{name: empty(1, np.int32) for name in ("out_flags", "out_own", "out_nscale")},
               out_scales=empty(length, np.float32), out_xn=empty(1, np.float32))
    word = np.zeros(4 * ((length + 3) // 4), np.uint8)
    word[:length] = codes
    values = dict(
        residues=dev(word.view("<u4").astype(np.uint32)), word_offsets=dev(np.zeros(1, np.int64)),
        lengths=dev(np.array([length], np.int32)), items=dev(np.zeros(1, np.int32)),
        item_model=dev(np.zeros(1, np.int32)),
        item_xf=dev(np.array([pmove, ploop, tables.xe_move, tables.xe_loop], np.float32)), n_items=1,
        counters=dev(np.zeros(1, np.int32)), rfv=dev(tables.rfv.ravel()), tfv=dev(tables.tfv.ravel()),
        model_q=dev(np.array([tables.Q], np.int32)), model_m=dev(np.array([tables.M], np.int32)),
        model_rfv=dev(np.zeros(1, np.int64)), model_tfv=dev(np.zeros(1, np.int64)),
        model_f=dev(np.array([tables.xe_move, tables.xe_loop, tables.tbm_min], np.float32)),
        scratch=empty(3 * tables.Q * 4, np.float32), n_threads=4, row_base=dev(np.zeros(1, np.int64)),
        cell_base=dev(np.zeros(1, np.int64)), scale_base=dev(np.zeros(1, np.int64)), **out)
    build.load(BwdMatrixSpec("global"), device)[1, 4, None, 0](*arguments(BWD_ARGS, **values))
    got_flags, got_own = int(out["out_flags"].copy_to_host()[0]), bool(out["out_own"].copy_to_host()[0])
    if got_flags != flags & ~ref.ANY_TINY or not got_own:
        raise AssertionError(f"kernel flags {got_flags}, own scales {got_own}; CPU reference {flags}, True")
    _equal("own scales xmx", out["out_rows"].copy_to_host().reshape(xmx.shape), xmx)
    _equal("own scales dp", out["out_cells"].copy_to_host().reshape(dp.shape), dp)
    n = int(out["out_nscale"].copy_to_host()[0])
    tot, sc = backward_score_from_scales(out["out_scales"].copy_to_host()[:n], out["out_xn"].copy_to_host()[0])
    if bits(tot) != bits(totscale) or bits(sc) != bits(score):
        raise AssertionError(f"own scales: totscale {tot!r}, score {sc!r}; reference {totscale!r}, {score!r}")
    own_rows = int((xmx[1:length, ref.XSCALE] != fwd_scale[1:length]).sum())
    return dict(L=length, own_scales=got_own, rows_own_scale=own_rows, flags=got_flags)


def real_jobs(hmm, db, targets: int) -> tuple:
    """Jobs of a real model on its first ``targets`` targets of ``db`` that libhmmer's domain
    definition gives a domain: every clustered region (multihit, Forward alone) and every
    domain's envelope (unihit, with Backward), and libhmmer's ``envsc`` of each envelope job
    (by job index): the score of its unihit Forward matrix."""
    from hmmgpu.cpu.hmmerlib import HmmerModel
    from hmmgpu.gpu.fwdback.matrix_launch import MatrixJob
    from hmmgpu.stages.forward import ForwardTables
    from tests.helpers import clustered_regions

    jobs, envsc = [], {}
    with HmmerModel(hmm) as model:
        tables = ForwardTables.from_hmmer(model)
        _HMM_OF[tables] = hmm
        for t in range(db.n):
            codes = db.codes(t)
            domains = model.domain_definition(codes)["domains"] if codes.size else []
            if not domains:
                continue
            jobs += [MatrixJob(tables, codes, i, j) for i, j in clustered_regions(model, codes)]
            for d in domains:
                envsc[len(jobs)] = d["envsc"]
                jobs.append(MatrixJob(tables, codes, d["ienv"], d["jenv"], unihit=True, backward=True))
            targets -= 1
            if targets == 0:
                break
    return jobs, envsc


def check_real(hmm, db, targets: int, **options) -> dict:
    """:func:`check_jobs` on :func:`real_jobs`, and each envelope's Forward score against
    libhmmer's ``envsc``."""
    from hmmgpu.gpu.fwdback.matrix_launch import produce_matrices

    jobs, envsc = real_jobs(hmm, db, targets)
    report = check_jobs(jobs, **options)
    batch = produce_matrices([jobs[k] for k in envsc], **options)
    for summary, (k, score) in zip(batch.forward, envsc.items()):
        if bits(summary.score) != bits(score):
            raise AssertionError(f"job {k}: envelope score {summary.score!r}, libhmmer's envsc {score!r}")
    report["envelopes"] = len(envsc)
    return report


def check_ensemble_handoff(jobs) -> dict:
    """The ensemble kernel sampling the multihit jobs' regions where a batch left their
    matrices (:func:`hmmgpu.gpu.ensemble.launch.sample_regions` given the batch) gives what it
    gives from the CPU reference's matrices uploaded from the host; and the stage function
    (:func:`hmmgpu.gpu.ensemble.stages.region_ensembles`) given the batch, the second region's
    matrix flagged SUBNORMAL (sampled by the CPU reference from its matrix copied back), gives
    the CPU stages' results (``flagged``: how many regions the CPU reference sampled)."""
    from hmmgpu.cpu import fwdback as ref
    from hmmgpu.cpu.domaindef import CpuDomainStages
    from hmmgpu.gpu.ensemble import stages
    from hmmgpu.gpu.ensemble.launch import RegionRequest, sample_regions
    from hmmgpu.gpu.fwdback.matrix_launch import produce_matrices

    batch = produce_matrices(jobs)
    regions = [k for k, job in enumerate(jobs) if not job.unihit]
    requests = [RegionRequest(matrix=None, tables=jobs[k].tables, xf=ref.special_transitions(jobs[k].tables,
                                                                                             len(jobs[k].codes)),
                              codes=jobs[k].codes, i=jobs[k].i, j=jobs[k].j) for k in regions]
    from_device = sample_regions(requests, batch=batch, jobs=regions)
    forwards = [ref.forward_matrix(jobs[k].tables, jobs[k].codes, jobs[k].i, jobs[k].j) for k in regions]
    for r, forward in zip(requests, forwards):
        r.matrix = forward.matrix
    from_host = sample_regions(requests)
    for k, a, b in zip(regions, from_device, from_host):
        if a.status != b.status or (a.ensemble is not None and not (
                np.array_equal(bits(a.ensemble.acc), bits(b.ensemble.acc))
                and np.array_equal(a.ensemble.pairs, b.ensemble.pairs) and a.ensemble.draws == b.ensemble.draws)):
            raise AssertionError(f"job {k}: the ensemble from the device matrices differs")
    flags = [batch.forward[k].flags | (ref.SUBNORMAL if n == 1 else 0) for n, k in enumerate(regions)]
    sampled = stages.region_ensembles(requests, flags, batch=batch, jobs=regions)
    for n, (k, forward, got) in enumerate(zip(regions, forwards, sampled)):
        want = CpuDomainStages(jobs[k].tables).region_ensemble(forward, jobs[k].codes, jobs[k].i, jobs[k].j)
        if not (np.array_equal(bits(got.n2sc), bits(want.n2sc)) and np.array_equal(got.envelopes, want.envelopes)
                and got.flags == (want.flags & ~ref.ANY_TINY) | (ref.SUBNORMAL if n == 1 else 0)):
            raise AssertionError(f"job {k}: the region's result from the device matrices is not the CPU stages'")
    return dict(regions=len(regions), sampled=sum(a.ensemble is not None for a in from_device),
                flagged=sum(1 for f, a in zip(flags, from_device) if f & ref.HOST or a.ensemble is None))


def check_envelope_handoff(jobs) -> dict:
    """The envelope kernel run on the unihit Backward jobs' matrices where a batch left them
    (:func:`hmmgpu.gpu.envelope.launch.decode_produced`) gives what
    :func:`~hmmgpu.gpu.envelope.launch.decode_oa` gives on the CPU references' host matrices:
    status, oasc, flags (but the references' diagnostic ANY_TINY), null2 odds, OA trace, and
    the posterior and OA matrices of the one envelope asked for (the first; ``matrices``: how
    many came back)."""
    from hmmgpu.cpu import fwdback as ref
    from hmmgpu.gpu.envelope.launch import decode_oa, decode_produced
    from hmmgpu.gpu.fwdback.matrix_launch import produce_matrices

    batch = produce_matrices(jobs)
    envs = [k for k, job in enumerate(jobs) if job.unihit and job.backward]
    got = decode_produced(batch, envs, matrices=lambda e, decoded: e == 0)
    references = []
    for k in envs:
        uni = ref.unihit_tables(jobs[k].tables)
        fwd = ref.forward_matrix(jobs[k].tables, jobs[k].codes, jobs[k].i, jobs[k].j, unihit=True)
        bck = ref.backward_matrix(jobs[k].tables, jobs[k].codes, fwd, jobs[k].i, jobs[k].j, unihit=True)
        references.append((fwd, bck, uni, ref.special_transitions(uni, len(jobs[k].codes))))
    for k, mine, want in zip(envs, got, decode_oa(references, batch.device)):
        if (mine.status, bits(mine.oasc), mine.flags) != (want.status, bits(want.oasc), want.flags & ~ref.ANY_TINY):
            raise AssertionError(f"job {k}: envelope status, oasc or flags differ from the host matrices'")
        if mine.posterior.matrix is not None:
            _equal(f"job {k} posterior dp", mine.posterior.matrix.dp, want.posterior.matrix.dp)
            _equal(f"job {k} posterior xmx", mine.posterior.matrix.xmx, want.posterior.matrix.xmx)
        if want.status != 0:
            continue
        if mine.oa is not None:
            _equal(f"job {k} OA dp", mine.oa.matrix.dp, want.oa.matrix.dp)
            _equal(f"job {k} OA xmx", mine.oa.matrix.xmx, want.oa.matrix.xmx)
        if not (np.array_equal(bits(mine.null2), bits(want.null2)) and np.array_equal(mine.trace.st, want.trace.st)
                and np.array_equal(mine.trace.k, want.trace.k) and np.array_equal(mine.trace.i, want.trace.i)
                and np.array_equal(bits(mine.trace.pp), bits(want.trace.pp))):
            raise AssertionError(f"job {k}: envelope null2 odds or OA trace differ from the host matrices'")
    return dict(envelopes=len(envs), decoded=sum(d.status == 0 for d in got),
                matrices=sum(d.posterior.matrix is not None for d in got))


def check_envelope_finish(jobs, ftz: bool = False, clustered: bool = True, tiny=()) -> dict:
    """The envelopes of a batch finished at once (:func:`hmmgpu.gpu.envelope.launch.finish_produced`)
    equal, field for field and bit for bit, what each envelope's own finish gives
    (:func:`~hmmgpu.gpu.envelope.launch.decode_produced`, then :func:`hmmgpu.cpu.envelope.finish_envelope`
    and :func:`hmmgpu.cpu.domaindef.envelope_result`, with the posterior copied back where the
    null2 odds' flush-to-zero check needs it): every second envelope as a clustered region's (its
    null2 scores given), the others unclustered (every one with ``clustered`` False); ``ftz``: the
    matrices and the host's part in
    hmmsearch's float mode; ``tiny``: envelopes whose Forward matrices are marked TINY_ROWS (as a
    long homolog's are), in both runs, so that an unclustered one's posterior comes back. Counts the
    envelopes, those dropped, the clustered ones and those whose posterior came back."""
    from hmmgpu.cpu import fwdback as ref
    from hmmgpu.cpu.domaindef import envelope_result
    from hmmgpu.cpu.envelope import finish_envelope
    from hmmgpu.gpu.envelope.launch import decode_produced, finish_produced, launch_produced
    from hmmgpu.gpu.fwdback.matrix_launch import produce_matrices
    from hmmgpu.host import flush_to_zero
    from hmmgpu.stages.domaindef import EnvelopeSpan

    jobs = [job for job in jobs if job.unihit and job.backward and len(job.codes) > 1]
    rng = np.random.default_rng(7)
    given = [clustered and k % 2 == 1 for k in range(len(jobs))]
    spans = [EnvelopeSpan(job.codes, job.i, job.j, given[k],
                          rng.standard_normal(len(job.codes) + 1).astype(np.float32) if given[k] else None)
             for k, job in enumerate(jobs)]
    wanted = []

    def needs_posterior(k, decoded):
        return decoded.status == 0 and not spans[k].null2_is_done and bool(decoded.flags & ref.TINY_ROWS)

    def marked(batch):
        for k in tiny:
            batch.forward.flags[k] |= ref.TINY_ROWS
        return batch

    batch = marked(produce_matrices(jobs, ftz=ftz))
    decoded = decode_produced(batch, range(len(jobs)), matrices=needs_posterior)
    with flush_to_zero(ftz):
        for k, (job, span, d) in enumerate(zip(jobs, spans, decoded)):
            wanted.append(envelope_result(finish_envelope(ref.unihit_tables(job.tables), span.codes, span.i, span.j,
                                                          span.null2_is_done, span.n2sc, batch.forward[k].score,
                                                          d.status, d.posterior, d.oasc, d.flags, d.trace, d.null2)))
    got = finish_produced(launch_produced(marked(produce_matrices(jobs, ftz=ftz))), spans).envelopes()
    assert len(got) == len(wanted)
    for k, (mine, want) in enumerate(zip(got, wanted)):
        same = (mine.flags == want.flags and mine.dropped == want.dropped and mine.iali == want.iali
                and mine.jali == want.jali and type(mine.envsc) is type(want.envsc)
                and type(mine.oasc) is type(want.oasc))
        for name in ("envsc", "oasc"):
            a, b = getattr(mine, name), getattr(want, name)
            same = same and ((a is None and b is None) or (a is not None and b is not None and bits(a) == bits(b)))
        if want.trace is not None:
            for name in ("st", "k", "i", "pp"):
                a, b = getattr(mine.trace, name), getattr(want.trace, name)
                same = same and a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))
        else:
            same = same and mine.trace is None
        if want.n2sc is None:
            same = same and mine.n2sc is None
        else:
            same = same and mine.n2sc is not None and mine.n2sc.dtype == want.n2sc.dtype and np.array_equal(
                bits(mine.n2sc), bits(want.n2sc))
        if not same:
            raise AssertionError(f"envelope {k}: finished at once, it differs from its own finish")
    return dict(envelopes=len(jobs), dropped=sum(w.dropped for w in wanted),
                clustered=sum(s.null2_is_done for s in spans),
                posterior=sum(d.posterior.matrix is not None for d in decoded))


#: The sampled cases (M, seed, longest random target, homolog run): one node; padding lanes
#: (M = 5: Q = 2, three lanes of padding); M = 18 with a homolog run that rescales; M = 100 (the
#: D->D carry passes' early exit).
CASES = ((1, 1, 10, 0), (5, 3, 10, 0), (18, 2, 8, 36), (100, 5, 6, 0))


def simulator_matrix_checks():
    """Every job of :data:`CASES` in one batch (several models, multihit and unihit, with and
    without Backward, whole targets and slices, rows in shared memory); a few of them again
    with their rows in global scratch run by one group in turn, on a stream of their own; the
    switch to Backward's own scale factors; the ensemble and envelope kernels reading a batch's
    device matrices (regions laid out after envelopes)."""
    from hmmgpu.gpu.fwdback.matrix_launch import MatrixJob
    from hmmgpu.gpu.runtime.device import GpuDevice

    jobs = matrix_jobs(CASES)
    out = [("one batch", check_jobs(jobs))]
    few = [job for job in jobs if job.tables.M == 18][-5:]  # the homolog's (rescaled) and the lone '*''s
    device = GpuDevice.open(0)
    report = check_jobs(few, device=device, storage="global", scratch_bytes=48 * few[0].tables.Q,
                        stream=device.runtime.stream())
    out.append(("global scratch, one group, a stream", report))
    five = [job for job in jobs if job.tables.M == 5 and len(job.codes) > 1]  # regions among envelopes
    out.append(("ensemble from the device", check_ensemble_handoff(five[:2] + five[3:6])))
    out.append(("envelopes from the device", check_envelope_handoff(five[:2] + five[3:6])))
    out.append(("envelopes finished at once", check_envelope_finish(jobs, tiny=(0, 1, 2))))
    out.append(("own scales", check_own_scales()))
    out.append(("hmmsearch's float mode", check_ftz_jobs()))
    whole = [MatrixJob(job.tables, job.codes, 1, len(job.codes), unihit=True, backward=True) for job in ftz_jobs()]
    out.append(("envelopes finished at once, subnormal cells", check_envelope_finish(whole, clustered=False)))
    out.append(("envelopes finished at once, hmmsearch's float mode", check_envelope_finish(ftz_jobs(), ftz=True)))
    return out


def ftz_jobs() -> list:
    """A homolog whose rows rescale and a run of 150 '*' between residues (cells that decay
    through the subnormal range), whole and sliced, multihit and unihit."""
    from hmmgpu.gpu.fwdback.matrix_launch import MatrixJob
    from tests.gpu.fwdback_checks import fwd_case

    hmm, db = fwd_case(18, 2, n_random=1, max_len=40, homolog=60, stops=True)
    tables = _tables(hmm)
    jobs = []
    for t in range(db.n):
        codes = db.codes(t)
        L = codes.size
        if L > 1:
            jobs += [MatrixJob(tables, codes, 1, L, backward=True),
                     MatrixJob(tables, codes, 1 + L // 4, L - L // 5, unihit=True, backward=True)]
    return jobs


def check_ftz_jobs() -> dict:
    """The kernels in hmmsearch's float mode (``ftz``) on a homolog whose rows rescale and a
    run of 150 '*' between residues, whose cells decay through the subnormal range, whole and
    sliced, multihit and unihit: every cell, row, flag and score equal to the references' and
    libhmmer's under flush-to-zero (:func:`check_jobs`); ``flushed`` counts the Forward matrices
    whose references differ between the two modes (where the flushing mattered)."""
    from hmmgpu.cpu import fwdback as ref
    from hmmgpu.host import flush_to_zero

    jobs = ftz_jobs()
    report = check_jobs(jobs, ftz=True)
    flushed = 0
    for job in jobs:
        ieee = ref.forward_matrix(job.tables, job.codes, job.i, job.j, unihit=job.unihit)
        with flush_to_zero():
            mine = ref.forward_matrix(job.tables, job.codes, job.i, job.j, unihit=job.unihit)
        flushed += int(not np.array_equal(bits(ieee.matrix.dp), bits(mine.matrix.dp)))
    return dict(report, flushed=flushed)


if __name__ == "__main__":
    import sys

    from tests.helpers import run_named_checks

    run_named_checks(globals(), sys.argv[1:])
