"""hmmgpu's own post-filter stage (``--postfilter hmmgpu``, hmmgpu.cpu.own_postfilter) end to end.

On the numba route (hmmgpu's exact CPU filters and Forward gate), the stage runs the F3 passers
with hmmgpu's CPU references; its searches must equal hmmsearch's (tables, report, -A
alignment) and the pyhmmer route's (every hit's serialized bytes, order, counts, counters).
A target the references flag goes to pyhmmer's pipeline and is counted.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from types import SimpleNamespace

import numpy as np

import pyhmmer
import pytest
from pyhmmer.easel import SequenceFile
from pyhmmer.plan7 import HMMFile

import hmmgpu
from hmmgpu.cli import main
from hmmgpu.cpu import own_postfilter
from hmmgpu.cpu.backends import NumbaBackend
from hmmgpu.cpu.own_postfilter import OwnPostFilter
from hmmgpu.formats.seqdb import SequenceDB
from hmmgpu.options import SearchOptions
from hmmgpu.cpu.pyhmmer_stage import PyhmmerStage
from hmmgpu.cpu.pyhmmer_processes import ProcessPlan, PyhmmerProcesses
from hmmgpu.search.engine import EngineStats, SearchEngine, post_filter_stage
from hmmgpu.stages import postfilter as planning
from hmmgpu.stages.forward import RANGE
from tests.helpers import AMINO, COUNTER_KEYS, PIPELINE_KEYS, PROTEOME, SAMPLES, sample_hmm
from tests.report.test_report import assert_same_report
from tests.stages.test_hits import normalized

HMMSEARCH = shutil.which("hmmsearch")
#: State keys compared besides the hits (pyhmmer's pipeline fields that HMMER never sets in a
#: protein search, n_output, pos_output, strands, block_length, hold malloc's leftovers).
STATE_KEYS = ("hit", "N", "Nalloc", "nreported", "nincluded", "is_sorted_by_sortkey", "is_sorted_by_seqidx")


@pytest.fixture
def small_tasks(monkeypatch):
    """Tasks of a few targets each: the exact merge and the keep rule by position at work."""
    monkeypatch.setattr(planning, "TASK_SECONDS", 1e-4)


@pytest.fixture(scope="module")
def samples():
    with HMMFile(SAMPLES / "samples.hmm") as f:
        hmms = list(f)
    with SequenceFile(PROTEOME, digital=True, alphabet=AMINO) as f:
        block = f.read_block()
    return hmms, block


def assert_same_states(ours, ref) -> int:
    """Two searches' ``TopHits`` states are equal: hits byte for byte (the fields HMMER never
    sets zeroed), order, counts and counters. Returns the number of hits."""
    a, b = ours.__getstate__(), ref.__getstate__()
    assert [normalized(h) for h in a["unsrt"]] == [normalized(h) for h in b["unsrt"]]
    for key in STATE_KEYS:
        assert a[key] == b[key], key
    for key in PIPELINE_KEYS + ("nmodels", "nnodes", "F1", "F2", "F3", "E", "domE", "incE", "incdomE"):
        assert a["pipeline"][key] == b["pipeline"][key], key
    return len(b["unsrt"])


def search(models, block, forward_gate: bool = True, **options) -> tuple:
    """A search on the numba route (``forward_gate``: with the numba Forward gate): (results,
    the engine's statistics)."""
    db = SequenceDB.from_block(block)
    engine = SearchEngine(db, SearchOptions.from_kwargs(backend="numba", **options),
                          NumbaBackend(db, forward_gate=forward_gate), model_lengths=[hmm.M for hmm in models])
    return list(engine.search(models)), engine.stats


OUTPUTS = ("-o", "out.txt", "-A", "out.sto", "--tblout", "out.tblout", "--domtblout", "out.domtblout",
           "--pfamtblout", "out.pfamtblout")


def run_cli(path, monkeypatch, args: list) -> None:
    """``hmmgpu search`` on the numba route in the folder ``path`` (the outputs' names as
    hmmsearch's, so that the report's header is the same)."""
    path.mkdir()
    monkeypatch.chdir(path)
    assert main(["search", "--backend", "numba", "--cpu", "2", *OUTPUTS, *args, str(SAMPLES / "samples.hmm"),
                 str(PROTEOME)]) == 0


def rows(path) -> list:
    return [line for line in path.read_bytes().split(b"\n") if not line.startswith(b"#")]


@pytest.mark.skipif(HMMSEARCH is None, reason="hmmsearch (pip package 'hmmer', in the test extra) not installed")
@pytest.mark.parametrize("args", [[], ["-Z", "1000", "--domE", "1e-3", "--incE", "1e-10"]], ids=["default", "Z"])
def test_cli_outputs_equal_hmmsearch(tmp_path, capsys, monkeypatch, small_tasks, args):
    """The three tables, the report and the -A alignment of ``--postfilter hmmgpu`` (in
    hmmsearch's float mode: the flagged targets on pyhmmer's pipeline) are hmmsearch's and the
    pyhmmer route's."""
    ref, route, ours = tmp_path / "hmmsearch", tmp_path / "pyhmmer", tmp_path / "hmmgpu"
    ref.mkdir()
    subprocess.run([HMMSEARCH, "--cpu", "2", *OUTPUTS, *args, str(SAMPLES / "samples.hmm"), str(PROTEOME)],
                   check=True, cwd=ref)
    run_cli(route, monkeypatch, args)
    capsys.readouterr()
    run_cli(ours, monkeypatch, ["--postfilter", "hmmgpu", *args])
    said = capsys.readouterr().err
    assert re.search(r"post-filter on hmmgpu's side: [1-9]\d* F3 passers done by hmmgpu's code \([\d.]+ s CPU\), "
                     r"\d+ targets sent to pyhmmer's pipeline \(exactness flags", said), said
    for kind in ("tblout", "domtblout", "pfamtblout"):
        assert rows(ours / f"out.{kind}") == rows(ref / f"out.{kind}") == rows(route / f"out.{kind}"), kind
    assert_same_report((ours / "out.txt").read_bytes(), (ref / "out.txt").read_bytes())
    author = re.compile(rb"^#=GF AU .*$", re.M)
    assert author.sub(b"", (ours / "out.sto").read_bytes()) == author.sub(b"", (ref / "out.sto").read_bytes())


@pytest.mark.parametrize("options", [dict(cpus=2), dict(cpus=0, T=10.0, incdomT=20.0), dict(cpus=3, bias_filter=False)],
                         ids=["threads", "serial_T", "nobias"])
def test_api_states_equal_pyhmmer(samples, small_tasks, options):
    """The API's ``TopHits`` of ``postfilter="hmmgpu"`` (pyhmmer's IEEE mode: no target is sent
    to pyhmmer's pipeline) equal the pyhmmer route's state for state, and pyhmmer's own
    search's hits and counters."""
    hmms, block = samples
    ours = list(hmmgpu.hmmsearch(hmms, block, engine="numba", postfilter="hmmgpu", **options))
    route = list(hmmgpu.hmmsearch(hmms, block, engine="numba", **options))
    pyhmmer_options = {k: v for k, v in options.items() if k != "cpus"}
    direct = list(pyhmmer.hmmsearch(hmms, block, cpus=1, **pyhmmer_options))
    assert sum(assert_same_states(a, b) for a, b in zip(ours, route, strict=True)) > 0
    _, stats = search(hmms, block, postfilter="hmmgpu", **options)
    assert stats.postfilter["host"] == 0 and stats.postfilter["passed"] == sum(
        hits.__getstate__()["pipeline"]["n_past_fwd"] for hits in ours)
    for a, b in zip(ours, direct, strict=True):
        sa, sb = a.__getstate__(), b.__getstate__()
        assert [normalized(h) for h in sa["unsrt"]] == [normalized(h) for h in sb["unsrt"]]
        assert (sa["hit"], sa["nreported"], sa["nincluded"]) == (sb["hit"], sb["nreported"], sb["nincluded"])
        for key in PIPELINE_KEYS:
            assert sa["pipeline"][key] == sb["pipeline"][key], key


def test_undecided_targets_are_decided_f3_here(samples):
    """Without the numba Forward gate every Viterbi-filter survivor reaches the stage undecided:
    it decides F3 as HMMER (n_past_fwd, hits) and counts the targets that failed."""
    hmms, block = samples
    gated, gated_stats = search(hmms, block, postfilter="hmmgpu", cpus=2)
    undecided, stats = search(hmms, block, forward_gate=False, postfilter="hmmgpu", cpus=2)
    for a, b in zip(undecided, gated, strict=True):
        assert a.pipeline == b.pipeline
        assert_same_states(a.hits, b.hits)
    assert stats.postfilter["failed"] > 0 and stats.postfilter["host"] == 0
    assert stats.postfilter["passed"] == gated_stats.postfilter["passed"] == sum(r.pipeline["n_past_fwd"] for r in gated)
    assert stats.forward_gate == dict(passed=0, failed=0, unsure=0)


def test_undecided_targets_of_the_gpu_process_get_their_bias_filter_here(samples):
    """A query of the GPU process carries no filter tables here: the stage makes them for the
    bias filter of its undecided targets, and scores them as the numba backend does."""
    hmms, block = samples
    db = SequenceDB.from_block(block)
    stage = OwnPostFilter(db, SearchOptions())
    backend = NumbaBackend(db)
    query = SimpleNamespace(index=0, hmm=hmms[0], profile=object())
    made = stage.filter_profile(query)
    assert stage.filter_profile(query) is made
    indices = np.arange(0, db.n, 7)
    assert backend.bias(made, indices).tobytes() == backend.bias(backend.prepare(hmms[0]), indices).tobytes()


def test_flagged_targets_go_to_pyhmmer_and_are_counted(samples, small_tasks, monkeypatch):
    """Targets whose Backward parser is flagged RANGE (forced here on every third target
    with a hit and on the first four: runs of consecutive flagged targets within a task) are run
    by pyhmmer's pipeline; the search's states are still the pyhmmer route's, and they are counted."""
    hmms, block = samples
    expected = list(hmmgpu.hmmsearch(hmms, block, engine="numba", cpus=2))
    names = [hit.name for hits in expected for hit in hits]
    chosen = set(names[::3] + names[:4])
    flagged_codes = {bytes(seq.sequence) for seq in block if seq.name in chosen}
    backward = own_postfilter.backward

    def flagged(tables, codes, forward=None):
        result = backward(tables, codes, forward)
        if codes.tobytes() in flagged_codes:
            result.flags |= RANGE
        return result

    monkeypatch.setattr(own_postfilter, "backward", flagged)
    ours, stats = search(hmms, block, postfilter="hmmgpu", cpus=2)
    for a, b in zip(ours, expected, strict=True):
        assert_same_states(a.hits, b)
    p = stats.postfilter
    assert p["host"] == sum(len([h for h in hits if h.name in chosen]) for hits in expected) > 4
    assert p["passed"] > 0
    assert f"{p['host']} targets sent to pyhmmer's pipeline" in stats.postfilter_line()


def test_seed_is_honoured(samples):
    """``--seed`` reaches domain definition's random numbers: with seed 7 the stage equals
    pyhmmer's search with seed 7 (KR's hits on the proteome depend on it), and differs from its
    own with the default seed; with seed 0 (never reseeded in HMMER) its tasks run on pyhmmer's
    pipeline."""
    hmm = sample_hmm("KR")
    block = samples[1]
    ours = {seed: search([hmm], block, postfilter="hmmgpu", cpus=2, seed=seed) for seed in (7, 42)}
    for seed in (7, 42):
        direct = pyhmmer.plan7.Pipeline(AMINO, seed=seed).search_hmm(hmm, block)
        for key in COUNTER_KEYS:
            assert ours[seed][0][0].pipeline[key] == direct.__getstate__()["pipeline"][key]
        assert [normalized(h) for h in ours[seed][0][0].hits.__getstate__()["unsrt"]] == \
            [normalized(h) for h in direct.__getstate__()["unsrt"]]
    assert [normalized(h) for h in ours[7][0][0].hits.__getstate__()["unsrt"]] != \
        [normalized(h) for h in ours[42][0][0].hits.__getstate__()["unsrt"]]
    unseeded, stats = search([hmm], block, postfilter="hmmgpu", cpus=2, seed=0)
    assert stats.postfilter["whole_tasks"] > 0 and stats.postfilter["passed"] == 0
    assert len(unseeded[0].hits) == len(ours[42][0][0].hits)


def test_postfilter_option(capsys):
    """``--postfilter hmmgpu`` picks the stage; hmmgpu scan, which has no such stage, refuses it."""
    assert post_filter_stage("hmmgpu") is OwnPostFilter and post_filter_stage("pyhmmer") is PyhmmerStage
    plan = ProcessPlan("db.fa", "fasta", 2, 16)
    behind = post_filter_stage("pyhmmer", plan)   # pyhmmer's stage in worker processes, with their plan
    assert behind.func is PyhmmerProcesses and behind.keywords == dict(plan=plan)
    assert main(["scan", "--postfilter", "hmmgpu", str(SAMPLES / "KR.hmm"), str(PROTEOME)]) == 1
    assert "--postfilter hmmgpu: not available for hmmgpu scan" in capsys.readouterr().err


def test_the_statistics_line_tells_the_fallback_from_the_work_split():
    """Of the targets sent to pyhmmer's pipeline on the GPU route, those the GPU process declined
    (its backlog full) and those with a clustered region it left (DEFINE_CLUSTERED off) are a
    split of the work; only the rest is the fallback, whose share of the passers the line gives."""
    stats = EngineStats(postfilter=dict(passed=900, host=100, failed=0, whole_tasks=0, own_seconds=1.0),
                        backend=dict(decoding=dict(declined=60, left_clustered=30)))
    line = stats.postfilter_line()
    assert "100 targets sent to pyhmmer's pipeline" in line and "60 of them passers the GPU process declined" in line
    assert "30 of them passers with a clustered region" in line and "the other 10 (1.00%) the fallback" in line
    stats.backend = dict(decoding=dict(declined=0, left_clustered=0))
    assert "fallback" not in stats.postfilter_line().split("(exactness flags")[1]
