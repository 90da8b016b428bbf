"""The default route with the GPU's parser rows (``tuning.GATE_PARSER_ROWS``): the checks.

After each gate batch the GPU process runs the Forward and Backward parsers on its models' F3
passers and sends their special-state rows (hmmgpu.gpu.cascade._ParsingStep); pyhmmer's post-filter
stage runs libhmmer's domain definition on them (hmmgpu.cpu.libhmmer_domains). Checked here:
every target a model's result carries is an F3 passer of the gate, its Forward score and both
parsers' rows equal the CPU references' bit for bit (the IEEE rows the kernels compute, which
tests/cpu/test_libhmmer_domains.py checks against libhmmer's in both float modes), its
``has_own_scales`` and tiny-value flag too; and the engine's search on that route (in this process,
pyhmmer's IEEE mode) equals pyhmmer's states, the statistics saying libhmmer defined the passers
from the rows. Run under numba's CUDA simulator on a few sample targets by
tests/gpu/test_parsed_gpu.py, and on a GPU over the whole sample proteome."""
from __future__ import annotations

import numpy as np

from tests.gpu.postfilter_checks import PROTEOME, ROOT, sample_models, sample_targets


def _bits(a) -> np.ndarray:
    return np.asarray(a, np.float32).view(np.uint32)


def check_parsed(hmm, db, result) -> dict:
    """One model's cascade result with the rows asked for (see the module header)."""
    from hmmgpu.cpu.fwdback import TINY_ROWS, backward, parse
    from hmmgpu.stages.forward import ForwardTables
    from hmmgpu.stages.profiles import configured_profile

    parsed = result.parsed
    passers = np.setdiff1d(result.survivors, result.forward.unsure)
    if parsed is None or not np.isin(parsed.indices, passers).all():
        raise AssertionError(f"{hmm.name}: parsed targets that are not F3 passers")
    tables = ForwardTables.from_optimized(configured_profile(hmm).to_optimized())
    tiny = 0
    for k, index in enumerate(parsed.indices.tolist()):
        codes = db.codes(index)
        forward = parse(tables, codes)
        bck = backward(tables, codes, forward)
        score, fwd_rows, bwd_rows, own = parsed.target(k, ftz=False)
        same = (_bits(score) == _bits(forward.score) and np.array_equal(_bits(fwd_rows), _bits(forward.xmx))
                and np.array_equal(_bits(bwd_rows), _bits(bck.xmx)) and own == bck.has_own_scales
                and bool(parsed.tiny[k]) == bool((forward.flags | bck.flags) & TINY_ROWS))
        if not same:
            raise AssertionError(f"{hmm.name} target {index}: the GPU's score or rows differ from the references'")
        tiny += bool(parsed.tiny[k])
    return dict(passers=int(passers.size), parsed=len(parsed), tiny=tiny, bytes=parsed.nbytes)


def check_engine(backend, db, hmms, **options) -> list:
    """The search engine on ``backend`` with the rows asked for: each model's rows
    (:func:`check_parsed`, from the cascade results the engine got), and its hits equal
    pyhmmer's search's (byte for byte, in order; its counts and counters). Rows: per model,
    then the engine's."""
    import pyhmmer

    from hmmgpu.gpu.runtime import tuning
    from hmmgpu.options import SearchOptions
    from hmmgpu.search.engine import SearchEngine
    from tests.helpers import PIPELINE_KEYS
    from tests.stages.test_hits import normalized

    opts = SearchOptions.from_kwargs(backend="cuda", **options)
    engine = SearchEngine(db, opts, backend, model_lengths=[hmm.M for hmm in hmms])
    tickets = []
    submit = backend.submit

    def recorded(profile, submitted):
        tickets.append(submit(profile, submitted))
        return tickets[-1]

    backend.submit = recorded
    tuning.GATE_PARSER_ROWS = True
    try:
        results = list(engine.search(hmms))
    finally:
        tuning.GATE_PARSER_ROWS = False
        del backend.submit
    rows = [(f"parsed {hmm.name}", check_parsed(hmm, db, ticket.result())) for hmm, ticket in zip(hmms, tickets, strict=True)]
    hits = 0
    for result, hmm in zip(results, hmms, strict=True):
        ours = result.hits.__getstate__()
        ref = pyhmmer.plan7.Pipeline(hmm.alphabet, **opts.pipeline_kwargs()).search_hmm(hmm, db.block()).__getstate__()
        same = [normalized(h) for h in ours["unsrt"]] == [normalized(h) for h in ref["unsrt"]] and all(
            ours[key] == ref[key] for key in ("hit", "N", "nreported", "nincluded")) and all(
            ours["pipeline"][key] == ref["pipeline"][key] for key in PIPELINE_KEYS)
        if not same:
            raise AssertionError(f"{hmm.name}: the engine's hits or counters differ from pyhmmer's")
        hits += ref["N"]
    p = engine.stats.postfilter
    parsing = backend.details().get("parsing", {})
    if not p.get("rows_defined") or p["rows_defined"] != parsing.get("parsed"):
        raise AssertionError(f"the post-filter defined no passer from the GPU's rows, or not all: {p} {parsing}")
    return rows + [("engine", dict(hits=hits, **p)), ("parsing", parsing)]


def simulator_parsed_checks():
    """Under the simulator: KR and Thioesterase against a few proteome targets (their shortest
    hits, Viterbi-filter survivors that fail F3, others)."""
    from hmmgpu.formats.seqdb import SequenceDB
    from hmmgpu.gpu.backend import CudaBackend

    hmms = sample_models(["KR", "Thioesterase"])
    db = SequenceDB.from_block(sample_targets(hmms, hits=3, misses=2, others=4, max_length=260))
    backend = CudaBackend(db)
    try:
        return [("targets", db.n)] + check_engine(backend, db, hmms, cpus=2)
    finally:
        backend.close()


def gpu_parsed_checks():
    """On a GPU: the four sample models against the whole sample proteome (2,100 targets)."""
    import pyhmmer

    from hmmgpu.formats.seqdb import SequenceDB
    from hmmgpu.gpu.backend import CudaBackend

    hmms = sample_models(["PF02826", "LuxC", "Thioesterase", "KR"])
    with pyhmmer.easel.SequenceFile(str(PROTEOME), digital=True) as fh:
        db = SequenceDB.from_block(fh.read_block())
    backend = CudaBackend(db)
    try:
        return check_engine(backend, db, hmms, cpus=4)
    finally:
        backend.close()


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(ROOT))
    from tests.helpers import run_named_checks

    run_named_checks(globals(), sys.argv[1:])
