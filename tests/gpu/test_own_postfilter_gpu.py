"""hmmgpu's own post-filter on the GPU route (``--backend cuda --postfilter hmmgpu``): the F3
passers' Forward and Backward parsers and domain decoding on the GPU, domain definition in the
GPU's process with the GPU's stages, the scores and hits on the host from those definitions
(tests/gpu/postfilter_checks.py says what is checked).
Under numba's CUDA simulator on a few dozen sample targets (in a subprocess: the simulator is
chosen when numba is imported), and on a GPU over the whole sample proteome (``pytest -m gpu``)."""
import ast
from pathlib import Path

import pytest

from tests.helpers import run_simulated

ROOT = Path(__file__).resolve().parents[2]


def _rows(out: str) -> dict:
    """The checks' printed rows: name -> the dict printed after it."""
    rows = {}
    for line in out.splitlines():
        if line.endswith("}") and "{" in line:
            rows[line[:line.index("{")].strip()] = ast.literal_eval(line[line.index("{"):])
    return rows


def _assert_rows(rows: dict, models: list) -> None:
    decodings = [rows[f"decodings {name}"] for name in models]
    assert all(got["decoded"] + got["left_to_host"] == got["passers"] for got in decodings)
    assert sum(got["decoded"] for got in decodings) > 0
    assert sum(got["defined"] for got in decodings) > 0   # domain definition's stages ran in the GPU's process
    engine = rows["engine"]
    # the engine searches in pyhmmer's float mode: its GPU process defines in IEEE arithmetic and
    # leaves the decodings that hold in hmmsearch's mode only to pyhmmer's pipeline
    ftz_only = sum(got["ftz_only"] for got in decodings)
    assert engine["hits"] > 0 and engine["decoded_on_gpu"] == sum(got["decoded"] for got in decodings) - ftz_only
    assert engine["defined_on_gpu"] == sum(got["defined"] - got["ftz_defined"] for got in decodings)
    # every passer the GPU did not decode, or decoded and did not define (a flag raised), went to
    # pyhmmer's pipeline (with the targets the gate left undecided)
    assert engine["host"] >= sum(got["left_to_host"] + got["decoded"] - got["defined"] for got in decodings)
    steps = rows["definition seconds"]   # the backend's statistics time domain definition's steps
    assert set(steps) == {"matrices", "ensembles", "decoding", "finish"} and steps["matrices"] > 0 < steps["decoding"]
    timeline = rows["definition timeline"]   # each batch: 4 times, its passers, 5 step seconds
    assert timeline["widths"] == [10] and timeline["passers"] == sum(got["decoded"] for got in decodings)
    assert timeline["matrices"] > 0 < timeline["decoding"]
    if "command line" in rows:   # the GPU run (under the simulator the GPU process's route costs minutes)
        # in hmmsearch's float mode (its tables equal to hmmsearch's: check_command_line) every decoding
        # and definition sent is taken, those that hold in that mode only too: at least IEEE's, at most
        # every passer
        line = rows["command line"]
        passers = sum(got["passers"] for got in decodings)
        assert sum(got["decoded"] for got in decodings) <= line["decoded_on_gpu"] <= passers
        assert sum(got["defined"] for got in decodings) <= line["defined_on_gpu"] <= line["decoded_on_gpu"]
        assert line["domain_rows"] > 0


def _simulate(checks: str, tmp_path) -> dict:
    stdout = run_simulated(ROOT / "tests" / "gpu" / "postfilter_checks.py", checks, cache_dir=tmp_path)
    return _rows(stdout)


def test_own_postfilter_on_the_gpu_route_under_simulator(tmp_path):
    """KR against nine targets (its shortest hits, Viterbi-filter survivors that fail F3,
    others): the decodings equal the CPU references' and libhmmer's, the definitions the GPU
    process made with the GPU's stages (every passer's here) the CPU stages', the engine's
    states pyhmmer's (the command line's outputs against hmmsearch's: the GPU test)."""
    _assert_rows(_simulate("simulator_own_postfilter_checks", tmp_path), ["KR"])


def test_declined_passers_go_to_pyhmmer_under_simulator(tmp_path):
    """The GPU process declining every gate batch (its definitions' backlog at 0): no passer
    decoded or defined there, every one counted declined and run by pyhmmer's pipeline, the
    engine's states pyhmmer's."""
    got = _simulate("simulator_declined_checks", tmp_path)["declined"]
    assert got["passers"] > 0 and got["declined"] == got["passers"] and got["host"] >= got["passers"]
    assert got["hits"] > 0


def test_declined_passers_taken_back_after_the_filters_under_simulator(tmp_path):
    """The same search with the GPU process taking the queued tasks back once the filters are
    done: the declined passers of those tasks decoded and defined there after all, the engine's
    states pyhmmer's, the statistics saying so."""
    got = _simulate("simulator_reclaim_checks", tmp_path)["reclaimed"]
    assert got["tasks"] > 1 and got["hits"] > 0
    assert 0 < got["defined"] <= got["reclaimed"] <= got["passers"] and got["decoded"] >= got["defined"]
    assert got["host"] >= got["passers"] - got["defined"]   # the rest on pyhmmer's pipeline
    assert f"{got['reclaimed']} F3 passers of {got['tasks']} queued tasks taken back by the GPU process" in got["line"]


def test_decodings_of_several_models_share_a_step_under_simulator(tmp_path):
    """Three sampled models' gates in one batch, their passers decoded in one second launch,
    each model's decodings its own and equal to the references'; a model of the same batch
    without the own post-filter gets none (with --seed 0, so that no passer is defined: the
    first test's definitions suffice)."""
    rows = _simulate("simulator_decoding_batch_checks", tmp_path)
    batched = [rows[f"batched M{M}"] for M in (24, 40, 17)]
    assert all(r["decoded"] > 0 for r in batched)
    assert rows["decoding counts"]["decoded"] == sum(r["decoded"] for r in batched)
    assert rows["decoding counts"]["defined"] == 0   # --seed 0: no definition in the GPU process


@pytest.mark.gpu
def test_own_postfilter_on_the_gpu_route():
    """The four sample models against the whole sample proteome on a GPU."""
    from hmmgpu.gpu.runtime.context import cuda_available
    from tests.gpu.postfilter_checks import gpu_own_postfilter_checks

    if not cuda_available():
        pytest.skip("no CUDA GPU")
    rows = dict(gpu_own_postfilter_checks())
    print(rows)
    _assert_rows(rows, ["2-Hacid_dh_C", "LuxC", "Thioesterase", "KR"])


@pytest.mark.gpu
def test_passers_taken_back_after_the_filters_on_the_command_line():
    """The command line's GPU process declining every gate batch, the engine taking the queued
    tasks back after the filters: the tables hmmsearch's, the passers defined in the GPU process."""
    from hmmgpu.gpu.runtime.context import cuda_available
    from tests.gpu.postfilter_checks import gpu_reclaim_command_line_checks

    if not cuda_available():
        pytest.skip("no CUDA GPU")
    got = gpu_reclaim_command_line_checks()
    print(got)
    assert got["reclaimed"] > 0 and got["tasks"] > 1 and got["domain_rows"] > 0
