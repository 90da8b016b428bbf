"""Domain definition's CPU references against libhmmer's own functions, bit for bit: Easel's
fast generator and vector helpers, p7_DomainDecoding, p7_StochasticTrace + p7_trace_Index,
p7_Null2_ByExpectation, and the whole p7_domaindef_ByPosteriorHeuristics (hmmgpu.stages.domaindef
driving hmmgpu.cpu.domaindef's stages) on the sample models' hits in the sample proteome and on
generated multi-domain targets, clustered regions included."""
import numpy as np
import pytest

from hmmgpu.cpu.hmmerlib import HmmerModel, easel_choices, easel_uniforms, libhmmer_available
from tests.helpers import (AMINO, MODEL_NAMES, PROTEOME, assert_definition_equal, bits, clustered_regions,
                           consensus_codes, sample_hmm, sampled_hmm)

pytestmark = pytest.mark.skipif(not libhmmer_available(), reason="pyhmmer's libhmmer is not loadable")


def _generated_targets(hmm, seed):
    """Targets built from the model's consensus that give multi-domain (often clustered) regions."""
    rng = np.random.default_rng(seed)
    cons = consensus_codes(hmm)
    M = cons.size

    def mutated(p):
        c = cons.copy()
        mask = rng.random(M) < p
        c[mask] = rng.integers(0, 20, mask.sum())
        return c

    targets = {
        "overlap_halves": np.concatenate([cons[:2 * M // 3], cons[M // 3:]]),
        "shifted_tandem": np.concatenate([cons[M // 2:], cons, cons[:M // 2]]),
        "mutated_pair_far": np.concatenate([mutated(0.4), rng.integers(0, 20, 30), mutated(0.4)]),
        "noisy_x4": np.concatenate([mutated(0.5) for _ in range(4)]),
    }
    return {name: codes.astype(np.uint8) for name, codes in targets.items()}


@pytest.fixture(scope="module")
def targets():
    """(model name, hmm, target name, codes): the sample models' hits in the sample proteome and
    generated targets of each sample model and of a sampled 30-node model."""
    import pyhmmer
    from pyhmmer.easel import SequenceFile

    with SequenceFile(str(PROTEOME), digital=True, alphabet=AMINO) as f:
        proteome = f.read_block()
    hmms = {name: sample_hmm(name) for name in MODEL_NAMES}
    out = []
    for name, hits in zip(MODEL_NAMES, pyhmmer.hmmsearch(list(hmms.values()), proteome)):
        by_name = {seq.name: seq for seq in proteome}
        for hit in hits:
            out.append((name, hmms[name], str(hit.name), np.asarray(by_name[hit.name].sequence, np.uint8)))
    hmms["sampled"] = sampled_hmm(30, 4)
    for seed, (name, hmm) in enumerate(hmms.items()):
        out += [(name, hmm, key, codes) for key, codes in _generated_targets(hmm, seed).items()]
    return out


def _by_model(targets):
    models = {}
    for name, hmm, target, codes in targets:
        models.setdefault(name, (hmm, []))[1].append((target, codes))
    return models


def test_uniform_table_is_easels_fast_generator():
    from hmmgpu.cpu.stotrace import uniform_table

    for seed in (42, 1, 7, 123456789, 2 ** 31 - 1):
        assert uniform_table(seed, 10_000).tobytes() == easel_uniforms(seed, 10_000).tobytes()


def test_vector_helpers_match_easel():
    from hmmgpu.cpu.stotrace import fchoose, fnorm, fsum, uniform_table

    rng = np.random.default_rng(3)
    rows = []
    for n in (2, 4):
        rows.append(rng.random((400, n)))
        rows.append(rng.random((400, n)) * 10.0 ** rng.uniform(-38, 30, (400, n)))  # wide spreads
        rows.append(np.where(rng.random((400, n)) < 0.5, 0.0, rng.random((400, n))))  # zeros, all-zero rows
        rows.append(rng.random((400, n)) * 1e-40)  # subnormals
        big = rng.random((400, n))
        big[:, 0] *= 1e30
        rows.append(big)  # one dominant weight
    for block in rows:
        block = block.astype(np.float32)
        sums, normed, choices = easel_choices(block, 42)
        uniforms = uniform_table(42, block.shape[0])
        for z, row in enumerate(block):
            assert bits(fsum(row, row.size)) == bits(sums[z])
            mine = row.copy()
            fnorm(mine, mine.size)
            assert bits(mine).tobytes() == bits(normed[z]).tobytes()
            assert fchoose(uniforms, z, mine, mine.size) == (choices[z], 0)


def test_domain_decoding_matches_libhmmer(targets):
    from hmmgpu.stages.domaindef import domain_decoding
    from hmmgpu.stages.forward import length_specials

    for name, (hmm, items) in _by_model(targets).items():
        with HmmerModel(hmm) as model:
            for target, codes in items:
                status, *theirs = model.domain_decoding(codes)
                _, _, fwd_rows, _ = model.forward_parser(codes)
                _, _, bck_rows, _, own = model.backward_parser(codes)
                mine = domain_decoding(fwd_rows, bck_rows, own, length_specials(codes.size)[1])
                assert mine[0] == status, (name, target)
                for a, b in zip(mine[1:], theirs):
                    assert bits(a).tobytes() == bits(b).tobytes(), (name, target)


def test_stochastic_traces_match_libhmmer(targets):
    """Every one of the 200 traces of the first clustered regions of each model: states, nodes,
    residues and the domain index, on libhmmer's own region Forward matrix."""
    from hmmgpu.cpu.fwdback import special_transitions
    from hmmgpu.cpu.stotrace import stochastic_traces
    from hmmgpu.stages.forward import ForwardTables

    regions = 0
    for name, (hmm, items) in _by_model(targets).items():
        with HmmerModel(hmm) as model:
            tables = ForwardTables.from_hmmer(model)
            for target, codes in items:
                for i, j in clustered_regions(model, codes)[:1]:
                    matrix, theirs = model.stochastic_traces(codes, i, j)
                    mine = stochastic_traces(matrix, tables, special_transitions(tables, codes.size))
                    for t, ((a, da), (b, db)) in enumerate(zip(mine, theirs)):
                        where = (name, target, i, j, t)
                        assert a.st.tobytes() == b.st.tobytes(), where
                        assert a.k.tobytes() == b.k.tobytes(), where
                        assert a.i.tobytes() == b.i.tobytes(), where
                        assert da.tobytes() == db.tobytes(), where
                    regions += 1
    assert regions >= 8


def test_null2_by_expectation_matches_libhmmer(targets):
    from hmmgpu.cpu.fwdback import DP_I, DP_M
    from hmmgpu.cpu.null2 import null2_by_expectation
    from hmmgpu.stages.forward import ForwardTables

    checked = 0
    for name, (hmm, items) in _by_model(targets).items():
        with HmmerModel(hmm) as model:
            rfv = ForwardTables.from_hmmer(model).rfv
            for target, codes in items[:4]:
                for domain in model.domain_definition(codes)["domains"]:
                    out = model.envelope(codes, domain["ienv"], domain["jenv"])
                    pp = out["posterior"]
                    mine = null2_by_expectation(pp.dp[:, DP_M], pp.dp[:, DP_I], pp.xmx, rfv)
                    assert bits(mine).tobytes() == bits(out["null2"]).tobytes(), (name, target)
                    checked += 1
    assert checked >= 10


def test_null2_by_expectation_reads_tiny_values_as_flush_to_zero(targets):
    """``flush_tiny``: the odds of the posterior matrix with its tiny values set to 0 (as the
    envelope's flush-to-zero check computes them), on libhmmer's posteriors with tiny values put
    in some M, I, N, C and J cells."""
    from hmmgpu.cpu.fwdback import DP_I, DP_M, FLT_MIN
    from hmmgpu.cpu.null2 import null2_by_expectation
    from hmmgpu.stages.forward import ForwardTables

    rng = np.random.default_rng(3)
    checked = 0
    for name, (hmm, items) in _by_model(targets).items():
        with HmmerModel(hmm) as model:
            rfv = ForwardTables.from_hmmer(model).rfv
            for target, codes in items[:2]:
                for domain in model.domain_definition(codes)["domains"][:2]:
                    pp = model.envelope(codes, domain["ienv"], domain["jenv"])["posterior"]
                    dp, xmx = pp.dp.copy(), pp.xmx.copy()
                    dp[rng.random(dp.shape) < 0.05] = np.float32(3e-39)
                    xmx[rng.random(xmx.shape) < 0.2] = np.float32(FLT_MIN)
                    flushed = [np.where((a > 0) & (a <= FLT_MIN), np.float32(0), a) for a in (dp, xmx)]
                    mine = null2_by_expectation(dp[:, DP_M], dp[:, DP_I], xmx, rfv, flush_tiny=True)
                    want = null2_by_expectation(flushed[0][:, DP_M], flushed[0][:, DP_I], flushed[1], rfv)
                    assert bits(mine).tobytes() == bits(want).tobytes(), (name, target)
                    checked += 1
    assert checked >= 6


def test_define_domains_matches_libhmmer(targets):
    """The whole domain definition: counters, nexpected, every n2sc bit, and each dcl entry,
    against libhmmer in IEEE mode (pyhmmer's), and where no HOST flag is raised, also under
    flush-to-zero (hmmsearch's); and every other target of a model in one batch of the batched
    driver, from libhmmer's own decodings (as from a device's), equal to libhmmer's too."""
    from hmmgpu.cpu.domaindef import CpuDomainStages
    from hmmgpu.host import flush_to_zero
    from hmmgpu.stages.domaindef import define_domains, define_domains_batched
    from hmmgpu.stages.forward import HOST, ForwardTables

    counts = dict(targets=0, regions=0, clustered=0, domains=0, ftz=0, batched=0, batched_clustered=0)
    for name, (hmm, items) in _by_model(targets).items():
        with HmmerModel(hmm) as model:
            stages = CpuDomainStages(ForwardTables.from_hmmer(model))
            batch, expected = [], []
            for k, (target, codes) in enumerate(items):
                where = (name, target)
                theirs = model.domain_definition(codes)
                _, _, fwd_rows, _ = model.forward_parser(codes)
                _, _, bck_rows, _, own = model.backward_parser(codes)
                mine = define_domains(stages, codes, fwd_rows, bck_rows, own)
                assert_definition_equal(where, mine, theirs)
                if k % 2 == 0:
                    batch.append((codes, model.domain_decoding(codes)))
                    expected.append((where + ("batched",), theirs))
                if not mine.flags & HOST:
                    with flush_to_zero():
                        assert_definition_equal(where + ("FTZ",), mine, model.domain_definition(codes))
                    counts["ftz"] += 1
                counts["targets"] += 1
                counts["regions"] += mine.nregions
                counts["clustered"] += mine.nclustered
                counts["domains"] += mine.ndom
            for (where, theirs), definition in zip(expected, define_domains_batched(stages, batch)):
                assert_definition_equal(where, definition, theirs)
                counts["batched"] += 1
                counts["batched_clustered"] += definition.nclustered
    assert counts["targets"] >= 50 and counts["clustered"] >= 12 and counts["domains"] >= 80, counts
    assert counts["batched"] >= 25 and counts["batched_clustered"] >= 6, counts


def test_stochastic_trace_reports_short_tables_and_buffers():
    """A trace that runs out of draws (EXHAUSTED) or of buffer (FULL) says so; with room it is
    libhmmer's first trace, the cursor after it its number of draws (one per step, none from N)."""
    from hmmgpu.cpu.fwdback import special_transitions
    from hmmgpu.cpu.stotrace import EXHAUSTED, FULL, OK, ST_N, stochastic_trace, uniform_table
    from hmmgpu.stages.forward import ForwardTables

    hmm = sampled_hmm(30, 4)
    codes = _generated_targets(hmm, 4)["noisy_x4"]
    with HmmerModel(hmm) as model:
        tables = ForwardTables.from_hmmer(model)
        (i, j), = clustered_regions(model, codes)
        matrix, theirs = model.stochastic_traces(codes, i, j, nsamples=1)
    dp, xf = matrix.dp, special_transitions(tables, codes.size)

    def run(draws, size):
        st, tk, ti = np.zeros(size, np.uint8), np.zeros(size, np.int32), np.zeros(size, np.int32)
        N, cursor, status, _ = stochastic_trace(uniform_table(42, draws), 0, dp[:, 0], dp[:, 1], dp[:, 2],
                                                matrix.xmx, tables.tfv, xf, j - i + 1, st, tk, ti)
        return status, cursor, st[:N], tk[:N], ti[:N]

    assert run(3, 4096)[:2] == (EXHAUSTED, 3)
    assert run(4096, 4)[0] == FULL
    status, cursor, st, tk, ti = run(4096, 4096)
    trace = theirs[0][0]
    assert status == OK and st.tobytes() == trace.st.tobytes()
    assert tk.tobytes() == trace.k.tobytes() and ti.tobytes() == trace.i.tobytes()
    assert cursor == st.size - 2 - int((st == ST_N).sum())  # a draw a step after T and C, none from N


def test_ftz_choice_follows_flushed_arithmetic():
    """Two subnormal paths: IEEE normalises them to (0.25, 0.75), FTZ flushes both to 0 and
    chooses with (0.5, 0.5); a normal path with a subnormal one chooses alike in both modes."""
    from hmmgpu.cpu.stotrace import _ftz_choice, fchoose, fnorm

    one = np.ones(4, np.float32)
    for fa, roll, same in (([1e-39, 3e-39], 0.3, False), ([1e-39, 3e-39], 0.6, True), ([0.5, 1e-40], 0.3, True)):
        fa = np.array(fa + [0, 0], np.float32)
        path = fa[:2] * one[:2]
        fnorm(path, 2)
        choice, status = fchoose(np.array([roll]), 0, path, 2)
        assert status == 0
        for inclusive in (False, True):
            assert (_ftz_choice(fa, one, one, 2, roll, inclusive) == choice) == same


def test_flush_to_zero_rechoices_only_where_a_tiny_value_is_met(monkeypatch):
    """The sampler makes a choice again with flushed arithmetic only where the choice meets a
    tiny value (its matrix values and products, and ``fnorm``'s): on regions whose matrices are
    scaled near the subnormal range (some choices differ under flush-to-zero there) and on the
    same regions unscaled, the ensembles and their ``ftz_differs`` equal the sampler's that
    makes every choice again (the pure-Python sampler with ``stotrace._tiny`` answering yes)."""
    from hmmgpu.cpu import stotrace
    from hmmgpu.cpu.stotrace import NSAMPLES
    from tests.gpu.ensemble_checks import region_requests, tandem_targets, with_tiny_cells

    hmms = [sampled_hmm(5, 3), sampled_hmm(12, 4), sampled_hmm(30, 5)]
    items = region_requests(hmms, lambda hmm, seed: tandem_targets(hmm, seed)[:2] if seed < 2 else
                            tandem_targets(hmm, seed)[2:], limit=1)
    items += with_tiny_cells(items)
    regions = [request for request, _ in items]
    ours = [stotrace.trace_ensemble(r.matrix, r.tables, r.xf, r.codes, r.i, r.j, nsamples=NSAMPLES) for r in regions]
    sampler = stotrace.stochastic_trace.py_func
    asked = []
    monkeypatch.setattr(stotrace, "_tiny", lambda v: asked.append(1) or True)
    monkeypatch.setattr(stotrace, "stochastic_trace", sampler)
    monkeypatch.setattr(stotrace, "_ensemble", stotrace._ensemble.py_func)
    every = [stotrace.trace_ensemble(r.matrix, r.tables, r.xf, r.codes, r.i, r.j, nsamples=NSAMPLES) for r in regions]
    assert asked and any(e.ftz_differs for e in every) and not all(e.ftz_differs for e in every)
    for a, b in zip(ours, every):
        assert (a.draws, a.ftz_differs) == (b.draws, b.ftz_differs)
        assert np.array_equal(bits(a.acc), bits(b.acc)) and np.array_equal(a.pairs, b.pairs)
