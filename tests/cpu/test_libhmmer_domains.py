"""Domain definition by libhmmer from parser rows computed elsewhere, on the CPU.

On the GPU route with ``tuning.GATE_PARSER_ROWS`` the GPU process sends each model's F3 passers
with both parsers' special-state rows (IEEE arithmetic, the kernels' flags), and pyhmmer's
post-filter stage runs libhmmer's ``p7_domaindef_ByPosteriorHeuristics`` on them instead of
pyhmmer's whole pipeline (hmmgpu.cpu.libhmmer_domains). Here, without a GPU, the rows are the CPU
references' (which the kernels equal bit for bit: tests/gpu/test_backward_kernel.py), over the
four sample models' Viterbi-filter survivors with a domain on the sample proteome:

* ``HmmerModel.define_from_rows`` on libhmmer's own parser rows gives ``domain_definition``'s
  definition (which runs the parsers itself), in both float modes;
* IEEE rows with their tiny values flushed (``ParsedTargets.target`` in hmmsearch's mode) are
  libhmmer's rows under flush-to-zero, on every target whose rows hold one;
* a filtered task whose F3 passers have rows gives the ``TopHits`` state pyhmmer's pipeline
  gives for the same task, hit for hit and counter for counter, in both float modes and with
  the targets without rows (left undecided by the gate) mixed in.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pyhmmer
import pytest
from pyhmmer.easel import SequenceFile

from hmmgpu.cpu.fwdback import FLT_MIN, HOST, TINY_ROWS, backward, length_specials, parse
from hmmgpu.cpu.hmmerlib import HmmerModel
from hmmgpu.cpu.pyhmmer_stage import PyhmmerStage
from hmmgpu.formats.seqdb import SequenceDB
from hmmgpu.host import flush_to_zero
from hmmgpu.options import SearchOptions
from hmmgpu.stages.forward import ForwardTables
from hmmgpu.stages.parsed import ParsedTargets
from hmmgpu.stages.postfilter import Task
from hmmgpu.stages.profiles import configured_profile
from tests.helpers import AMINO, MODEL_NAMES, PIPELINE_KEYS, PROTEOME, sample_hmm
from tests.stages.test_hits import normalized

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _bits(a) -> np.ndarray:
    return np.asarray(a, np.float32).view(np.uint32)


@pytest.fixture(scope="module")
def survivors():
    """The proteome, and per sample model the targets past its Viterbi filter with a domain
    (pyhmmer with F3 = 1 and no reporting threshold), and which of them pass F3."""
    with SequenceFile(PROTEOME, digital=True, alphabet=AMINO) as f:
        block = f.read_block()
    db = SequenceDB.from_block(block)
    position = {seq.name: k for k, seq in enumerate(block)}
    chosen = []
    for index, name in enumerate(MODEL_NAMES):
        hmm = sample_hmm(name)
        hits = pyhmmer.plan7.Pipeline(AMINO, F3=1.0, E=1e9, domE=1e9).search_hmm(hmm, block)
        positions = sorted(position[hit.name] for hit in hits)
        passes = []
        for p in positions:   # the F3 decision of p7_Pipeline on the target alone
            one = pyhmmer.easel.DigitalSequenceBlock(AMINO, [block[p]])
            passes.append(pyhmmer.plan7.Pipeline(AMINO, F1=1.0, F2=1.0, E=1e9, domE=1e9)
                          .search_hmm(hmm, one).__getstate__()["pipeline"]["n_past_fwd"] == 1)
        chosen.append((index, hmm, positions, passes))
    return db, chosen


def device_rows(tables, codes):
    """(Forward score, Forward rows, Backward rows, has_own_scales, tiny) as the GPU would send
    them for this target (IEEE arithmetic), or None where its kernels' flags (or the last Forward
    product) leave the target to the host."""
    forward = parse(tables, codes)
    bck = backward(tables, codes, forward)
    pmove, _ = length_specials(codes.size)
    if (forward.flags | bck.flags) & HOST or not np.float32(forward.xc * pmove) > FLT_MIN:
        return None
    return forward.score, forward.xmx, bck.xmx, bck.has_own_scales, bool((forward.flags | bck.flags) & TINY_ROWS)


def test_definition_from_libhmmers_own_rows_is_its_definition(survivors):
    db, chosen = survivors
    compared = domains = 0
    for _, hmm, positions, _ in chosen:
        with HmmerModel(hmm) as oracle, HmmerModel(hmm) as model:
            for ftz in (False, True):
                with flush_to_zero(ftz):
                    for p in positions[:40]:
                        codes = db.codes(p)
                        want = oracle.domain_definition(codes)
                        oracle.forward_parser(codes)
                        _, _, bwd_rows, _, own = oracle.backward_parser(codes)
                        fwd_rows = oracle._rows(oracle._ox, codes.size)[0]
                        status, nullsc, got = model.define_from_rows(codes, fwd_rows, bwd_rows, own, name=db.name(p))
                        assert status == want["status"]
                        assert _bits(nullsc) == _bits(oracle.null_score(codes))
                        definition, displays = got
                        assert len(displays) == len(definition.domains) == len(want["domains"])
                        for dom, ref in zip(definition.domains, want["domains"]):
                            assert (dom.ienv, dom.jenv, dom.iali, dom.jali) == tuple(
                                ref[k] for k in ("ienv", "jenv", "iali", "jali"))
                            assert all(_bits(getattr(dom, k)) == _bits(ref[k]) for k in ("envsc", "domcorrection", "oasc"))
                        assert (definition.nregions, definition.nclustered, definition.noverlaps,
                                definition.nenvelopes) == tuple(want[k] for k in ("nregions", "nclustered", "noverlaps",
                                                                                   "nenvelopes"))
                        assert _bits(definition.nexpected) == _bits(want["nexpected"])
                        compared += 1
                        domains += len(displays)
    assert compared >= 150 and domains >= compared   # 156 with the four sample models


def test_flushed_ieee_rows_are_the_flush_to_zero_rows(survivors):
    """The rows the GPU sends (IEEE) of every target whose rows hold a tiny value, flushed as
    ``ParsedTargets.target`` flushes them in hmmsearch's mode, are libhmmer's under flush-to-zero;
    in pyhmmer's mode they are libhmmer's as they are."""
    db, chosen = survivors
    tiny = plain = 0
    for _, hmm, positions, _ in chosen:
        tables = ForwardTables.from_optimized(configured_profile(hmm).to_optimized())
        with HmmerModel(hmm) as oracle:
            for p in positions:
                codes = db.codes(p)
                sent = device_rows(tables, codes)
                if sent is None:
                    continue
                parsed = ParsedTargets.gather([p], [sent[0]], [sent[3]], [sent[4]], [sent[1]], [sent[2]])
                for ftz in (False, True):
                    with flush_to_zero(ftz):
                        oracle.forward_parser(codes)
                        _, _, bwd_rows, _, own = oracle.backward_parser(codes)
                        fwd_rows = oracle._rows(oracle._ox, codes.size)[0]
                    score, fwd, bwd, has_own = parsed.target(0, ftz)
                    assert np.array_equal(_bits(fwd), _bits(fwd_rows)) and np.array_equal(_bits(bwd), _bits(bwd_rows))
                    assert has_own == own
                tiny += sent[4]
                plain += not sent[4]
    assert tiny >= 5 and plain >= 75   # 6 and 80 with the four sample models


@pytest.mark.parametrize("ftz", [False, True])
def test_a_task_of_parsed_passers_gives_pyhmmers_state(survivors, ftz):
    """Each model's survivors as one filtered task, the F3 passers with rows (but every fifth,
    left undecided as the gate leaves a target over its cost cap), the failing survivors
    without: the stage's state is pyhmmer's pipeline's over the same task."""
    db, chosen = survivors
    stage = PyhmmerStage(db, SearchOptions(), ftz=ftz)
    defined = 0
    for index, hmm, positions, passes in chosen:
        tables = ForwardTables.from_optimized(configured_profile(hmm).to_optimized())
        rows = [(p, device_rows(tables, db.codes(p))) for k, (p, ok) in enumerate(zip(positions, passes))
                if ok and k % 5]
        rows = [(p, sent) for p, sent in rows if sent is not None]
        parsed = ParsedTargets.gather([p for p, _ in rows], *([sent[i] for _, sent in rows] for i in (0, 3, 4, 1, 2)))
        query = SimpleNamespace(index=index, hmm=hmm, counts=SimpleNamespace(parsed=parsed))
        task = Task(query=query, positions=np.array(positions, np.int64), z_fixed=float(positions[0] + 1),
                    filtered=True)
        with flush_to_zero(ftz):
            ours = stage.run(task).state
            ref = stage._run_pipeline(task).state
        assert [normalized(h) for h in ours["unsrt"]] == [normalized(h) for h in ref["unsrt"]], hmm.name
        assert all(ours[key] == ref[key] for key in ("hit", "N", "nreported", "nincluded", "Nalloc"))
        assert all(ours["pipeline"][key] == ref["pipeline"][key] for key in PIPELINE_KEYS), hmm.name
        stage._parsed.release(query)  # the query's libhmmer structures freed, as merging its results does
        defined += len(parsed)
    details = stage.details()
    assert details["rows_defined"] == defined >= 20 and details["rows_host"] > 0   # 23 with the four sample models
