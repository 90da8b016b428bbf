"""The stochastic-trace ensemble kernel (hmmgpu.gpu.ensemble) against the CPU reference
(hmmgpu.cpu.stotrace.trace_ensemble, itself equal to libhmmer's domain definition), bit for
bit: run by tests/gpu/test_ensemble_kernel.py under numba's CUDA simulator
(``NUMBA_ENABLE_CUDASIM=1`` in a subprocess, since the simulator is chosen at numba import),
and on a GPU.

    NUMBA_ENABLE_CUDASIM=1 PYTHONPATH=. python3 tests/gpu/ensemble_checks.py simulator_ensemble_checks
"""
from __future__ import annotations

import sys

import numpy as np


def bits(a):
    return np.asarray(a, np.float32).view(np.uint32)


def tandem_targets(hmm, seed):
    """Targets made of the model's consensus that give clustered regions: a shifted tandem
    repeat, two overlapping halves, and three mutated copies."""
    from tests.helpers import consensus_codes

    rng = np.random.default_rng(seed)
    cons = consensus_codes(hmm)
    M = cons.size

    def mutated(p):
        c = cons.copy()
        mask = rng.random(M) < p
        c[mask] = rng.integers(0, 20, mask.sum())
        return c

    return [np.concatenate(parts).astype(np.uint8) for parts in (
        [cons[M // 2:], cons, cons[:M // 2]], [cons[:2 * M // 3], cons[M // 3:]], [mutated(0.3) for _ in range(3)])]


def homolog_in_noise(hmm, seed, flank):
    """The model's consensus between two runs of ``flank`` random residues."""
    from tests.helpers import consensus_codes

    rng = np.random.default_rng(seed)
    return np.concatenate([rng.integers(0, 20, flank), consensus_codes(hmm),
                           rng.integers(0, 20, flank)]).astype(np.uint8)


def shortest_homolog_region(name):
    """The shortest clustered region of the sample model ``name``'s hits in the sample
    proteome (PF02826: 72 residues of a real homolog, M = 178), as a one-item list."""
    import pyhmmer
    from pyhmmer.easel import SequenceFile

    from tests.helpers import AMINO, PROTEOME, sample_hmm

    hmm = sample_hmm(name)
    with SequenceFile(str(PROTEOME), digital=True, alphabet=AMINO) as f:
        proteome = f.read_block()
    by_name = {seq.name: np.asarray(seq.sequence, np.uint8) for seq in proteome}
    top = next(pyhmmer.hmmsearch([hmm], proteome))
    items = region_requests([hmm], lambda hmm, seed: [by_name[hit.name] for hit in top])
    return [min(items, key=lambda item: item[0].j - item[0].i)]


def region_requests(hmms, targets_of, limit=None):
    """(request, Forward MatrixResult) of every clustered region of each model's targets."""
    from hmmgpu.cpu.fwdback import forward_matrix, special_transitions
    from hmmgpu.cpu.hmmerlib import HmmerModel
    from hmmgpu.gpu.ensemble.launch import RegionRequest
    from hmmgpu.stages.forward import ForwardTables
    from tests.helpers import clustered_regions

    out = []
    for seed, hmm in enumerate(hmms):
        with HmmerModel(hmm) as model:
            tables = ForwardTables.from_hmmer(model)
            for codes in targets_of(hmm, seed):
                for i, j in clustered_regions(model, codes)[:limit]:
                    forward = forward_matrix(tables, codes, i, j)
                    out.append((RegionRequest(matrix=forward.matrix, tables=tables,
                                              xf=special_transitions(tables, codes.size), codes=codes, i=i, j=j),
                                forward))
    return out


def reference(request):
    from hmmgpu.cpu.stotrace import trace_ensemble

    return trace_ensemble(request.matrix, request.tables, request.xf, request.codes, request.i, request.j)


def check_sampled(requests, **launch) -> dict:
    """The kernel's pairs, null2 sums (acc), draws and flush-to-zero flag equal the CPU
    reference's on every region it samples (status OK); the report counts them."""
    from hmmgpu.cpu.stotrace import OK
    from hmmgpu.gpu.ensemble.launch import sample_regions

    got = sample_regions(requests, **launch)
    report = dict(regions=len(requests), sampled=0, left=0, pairs=0, positions=0, ftz=0, models=len(
        {id(r.tables) for r in requests}))
    for k, (request, sampled) in enumerate(zip(requests, got)):
        if sampled.status != OK:
            report["left"] += 1
            continue
        mine, ref = sampled.ensemble, reference(request)
        what = f"region {k}: {request.i}..{request.j}, M={request.tables.M}"
        if mine.pairs.shape != ref.pairs.shape or not np.array_equal(mine.pairs, ref.pairs):
            raise AssertionError(f"{what}: sampled pairs differ ({mine.pairs.shape} vs {ref.pairs.shape})")
        if not np.array_equal(bits(mine.acc), bits(ref.acc)):
            raise AssertionError(f"{what}: null2 sums differ at {np.flatnonzero(bits(mine.acc) != bits(ref.acc))[:8]}")
        if (mine.draws, mine.ftz_differs, mine.nsamples) != (ref.draws, ref.ftz_differs, ref.nsamples):
            raise AssertionError(f"{what}: draws/ftz/nsamples {mine.draws, mine.ftz_differs, mine.nsamples} != "
                                 f"{ref.draws, ref.ftz_differs, ref.nsamples}")
        report["sampled"] += 1
        report["pairs"] += len(ref.pairs)
        report["positions"] += ref.acc.size - 1
        report["ftz"] += int(ref.ftz_differs)
    return report


def check_results(items, cpu_threads=0, **launch) -> dict:
    """The finished region results (n2sc bits, envelopes, flags) of the GPU stage equal the
    CPU stages' (regions the kernel leaves included: the CPU reference samples them; with
    ``cpu_threads``, the longest regions too, beside the launch: ``cpu_regions`` says how many
    the CPU reference sampled, ``split`` how many :func:`~hmmgpu.gpu.ensemble.stages.split_by_cost`
    gave it)."""
    from hmmgpu.cpu.domaindef import CpuDomainStages
    from hmmgpu.gpu.ensemble.stages import region_ensembles, split_by_cost

    requests = [r for r, _ in items]
    counts = {}
    mine = region_ensembles(requests, [f.flags for _, f in items], cpu_threads=cpu_threads,
                            counts=counts, **launch)
    envelopes = 0
    for k, ((request, forward), got) in enumerate(zip(items, mine)):
        ref = CpuDomainStages(request.tables).region_ensemble(forward, request.codes, request.i, request.j)
        what = f"region {k}: {request.i}..{request.j}, M={request.tables.M}"
        if not np.array_equal(bits(got.n2sc), bits(ref.n2sc)):
            raise AssertionError(f"{what}: n2sc differs")
        if not np.array_equal(np.asarray(got.envelopes), np.asarray(ref.envelopes)) or got.flags != ref.flags:
            raise AssertionError(f"{what}: envelopes or flags differ")
        envelopes += len(ref.envelopes)
    split = split_by_cost([r.j - r.i + 1 for r in requests], cpu_threads, launch.get("step_cost", 24))
    return dict(regions=len(items), envelopes=envelopes, cpu_regions=counts["cpu_regions"], split=len(split))


def with_tiny_cells(items, factor=2.0 ** -106):
    """The same regions with the matrix (cells and E, N, J, B, C, not the scale factors)
    scaled near the subnormal range: the choices are the same in kind, but many paths are
    tiny, and some choices differ under flush-to-zero (at 2^-106, in 2 of the simulator
    check's 6 regions; at 2^-100 in none, at 2^-116 in all)."""
    from dataclasses import replace

    out = []
    for request, forward in items:
        matrix = request.matrix
        xmx = matrix.xmx.copy()
        xmx[:, :5] = xmx[:, :5] * np.float32(factor)
        scaled = replace(matrix, dp=(matrix.dp * np.float32(factor)).astype(np.float32), xmx=xmx)
        out.append((replace(request, matrix=scaled), forward))
    return out


def check_grouped_definitions(models, **stages) -> dict:
    """The batched domain definition of several models' targets (``models``: (hmm, targets)
    pairs) with the GPU stages, in one call of the driver
    (:func:`hmmgpu.stages.domaindef.define_domains_grouped`: every model's clustered regions'
    Forward matrices in one batch of the full-matrix kernels and sampled where they lie in one
    ensemble launch, then every model's envelopes' Forward and Backward matrices in one batch
    and decoded where they lie in one decoding + OA launch; ``stages``: more arguments of the
    stages): each target's definition equals the CPU stages' (their flags but the references'
    diagnostic ANY_TINY) and libhmmer's (counters, n2sc, each domain, its OA trace)."""
    from hmmgpu.cpu.domaindef import CpuDomainStages
    from hmmgpu.cpu.hmmerlib import HmmerModel
    from hmmgpu.gpu.domaindef import GpuDomainStages
    from hmmgpu.stages.domaindef import define_domains_decoded, define_domains_grouped
    from hmmgpu.stages.forward import ANY_TINY, ForwardTables
    from tests.helpers import assert_definition_equal

    prepared = []
    for hmm, targets in models:
        with HmmerModel(hmm) as model:
            prepared.append((ForwardTables.from_hmmer(model), targets, [model.domain_decoding(c) for c in targets],
                             [model.domain_definition(c) for c in targets]))
    grouped = define_domains_grouped([(GpuDomainStages(tables, **stages), list(zip(targets, decodings)))
                                      for tables, targets, decodings, _ in prepared])
    report = dict(targets=0, nclustered=0, envelopes=0, domains=0)
    for m, ((tables, targets, decodings, theirs), batched) in enumerate(zip(prepared, grouped)):
        for k, (codes, decoding, mine, libhmmer) in enumerate(zip(targets, decodings, batched, theirs)):
            assert_definition_equal((m, k), mine, libhmmer)
            ref = define_domains_decoded(CpuDomainStages(tables), codes, decoding)
            assert mine.flags == ref.flags & ~ANY_TINY, (m, k)
            for a, b in zip((d.trace for d in mine.domains), (d.trace for d in ref.domains)):
                assert a.st.tobytes() == b.st.tobytes() and a.k.tobytes() == b.k.tobytes(), (m, k)
                assert a.i.tobytes() == b.i.tobytes() and bits(a.pp).tobytes() == bits(b.pp).tobytes(), (m, k)
            report["targets"] += 1
            report["nclustered"] += mine.nclustered
            report["envelopes"] += mine.nenvelopes
            report["domains"] += mine.ndom
    return report


def simulator_ensemble_checks():
    """Sampled models of 5 (padding lanes), 12 and 30 nodes, tandem targets, their clustered
    regions in one launch with a region of a real PF02826 homolog; two of them beside copies of
    all six scaled near the subnormal range (flush-to-zero flags on two copies only);
    a short table of draws and a small pair buffer (regions left to the CPU reference); the
    domain definitions of a tandem target and a homolog in noise (clustered and unclustered
    envelopes) and of another model's tandem target through the GPU stages in one call of the driver."""
    from hmmgpu.cpu.stotrace import EXHAUSTED, FULL
    from hmmgpu.gpu.ensemble.launch import sample_regions
    from tests.helpers import sampled_hmm

    hmms = [sampled_hmm(5, 3), sampled_hmm(12, 4), sampled_hmm(30, 5)]
    items = region_requests(hmms, lambda hmm, seed: tandem_targets(hmm, seed)[:2] if seed < 2 else
                            tandem_targets(hmm, seed)[2:], limit=1)
    items += shortest_homolog_region("PF02826")
    requests = [r for r, _ in items]
    out = [("sampled models", check_sampled(requests))]
    out.append(("results", check_results(items)))
    out.append(("results split", check_results(items, cpu_threads=2, step_cost=24)))
    tiny = with_tiny_cells(items)
    out.append(("subnormal cells", check_sampled(requests[:2] + [r for r, _ in tiny])))
    short = [r.status for r in sample_regions(requests[:2], table=512)]
    full = [r.status for r in sample_regions(requests[:2], pair_cap=40)]
    out.append(("left to the host", dict(exhausted=short.count(EXHAUSTED), full=full.count(FULL),
                                         **check_results(items[:2], table=512))))
    out.append(("beyond offsets", beyond_offsets(items[:3])))
    noise = homolog_in_noise(hmms[1], 0, 20)   # a clustered and an unclustered region
    out.append(("define_domains", check_grouped_definitions(   # two models' targets in the same launches
        [(hmms[2], tandem_targets(hmms[2], 2)[1:2]), (hmms[1], [tandem_targets(hmms[1], 1)[1], noise])])))
    out.append(("no path", no_path_statuses(requests[0])))
    return out


def beyond_offsets(items) -> dict:
    """With the kernel's reach (:data:`hmmgpu.gpu.ensemble.source.MAX_REGION_CELLS`) set below
    the largest region's cells, that region is left unlaunched (LARGE) and sampled by the CPU
    reference; every region's result still equals the CPU stages'."""
    from hmmgpu.gpu.ensemble import launch as launch_module
    from hmmgpu.gpu.ensemble.source import LARGE

    requests = [r for r, _ in items]
    cells = [(r.j - r.i + 2) * 12 * r.tables.Q for r in requests]
    saved = launch_module.MAX_REGION_CELLS
    launch_module.MAX_REGION_CELLS = max(cells) - 1
    try:
        statuses = [r.status for r in launch_module.sample_regions(requests)]
        results = check_results(items)
    finally:
        launch_module.MAX_REGION_CELLS = saved
    return dict(large=statuses.count(LARGE), beyond=sum(c > max(cells) - 1 for c in cells), **results)


def no_path_statuses(request) -> dict:
    """A NaN matrix stops the kernel where Easel aborts (FATAL); an all-zero one samples
    uniformly until a step leaves the matrix (OUTSIDE) or meets E's NaN norm (FATAL)."""
    from dataclasses import replace

    from hmmgpu.cpu.stotrace import FATAL
    from hmmgpu.gpu.ensemble.launch import sample_regions
    from hmmgpu.gpu.ensemble.source import OUTSIDE

    matrix = request.matrix
    nan = replace(matrix, dp=np.full_like(matrix.dp, np.nan), xmx=np.full_like(matrix.xmx, np.nan))
    zero = replace(matrix, dp=np.zeros_like(matrix.dp), xmx=np.zeros_like(matrix.xmx))
    statuses = [s.status for s in sample_regions([replace(request, matrix=m) for m in (nan, zero)])]
    return dict(nan=statuses[0] == FATAL, zero=statuses[1] in (OUTSIDE, FATAL))


def gpu_ensemble_checks():
    """On a GPU: every clustered region (up to 2 a target) of the four sample models' hits in
    the sample proteome and of tandem targets (4 seeds) of the sample models and of sampled
    models of 5 to 400 nodes, all in one launch; the same regions with subnormal cells."""
    import pyhmmer
    from pyhmmer.easel import SequenceFile

    from tests.helpers import AMINO, MODEL_NAMES, PROTEOME, sample_hmm, sampled_hmm

    with SequenceFile(str(PROTEOME), digital=True, alphabet=AMINO) as f:
        proteome = f.read_block()
    hmms = [sample_hmm(name) for name in MODEL_NAMES]
    by_name = {seq.name: np.asarray(seq.sequence, np.uint8) for seq in proteome}
    homologs = {id(h): [by_name[hit.name] for hit in top] for h, top in zip(hmms, pyhmmer.hmmsearch(hmms, proteome))}
    hmms += [sampled_hmm(M, seed) for M, seed in ((5, 3), (12, 4), (30, 5), (60, 8), (101, 6), (200, 9), (400, 7))]

    def targets(hmm, seed):
        return homologs.get(id(hmm), []) + [t for s in range(4) for t in tandem_targets(hmm, 10 * seed + s)]

    items = region_requests(hmms, targets, limit=2)
    out = [("regions", check_sampled([r for r, _ in items]))]
    out.append(("results", check_results(items)))
    out.append(("results split", check_results(items, cpu_threads=8, step_cost=24)))
    out.append(("subnormal cells", check_sampled([r for r, _ in with_tiny_cells(items)])))
    return out


if __name__ == "__main__":
    for name, report in globals()[sys.argv[1]](*sys.argv[2:]):
        print(name, report, flush=True)
    print("simulator checks OK" if sys.argv[1].startswith("simulator") else "checks OK")
