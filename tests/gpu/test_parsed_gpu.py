"""The default route with the GPU's parser rows (``tuning.GATE_PARSER_ROWS``): the F3 passers'
Forward and Backward parsers on the GPU, libhmmer's domain definition on their rows in the
post-filter's worker threads (tests/gpu/parsed_checks.py says what is checked).
Under numba's CUDA simulator on a few sample targets (in a subprocess: the simulator is chosen
when numba is imported), and on a GPU over the whole sample proteome (``pytest -m gpu``)."""
import ast
from pathlib import Path

import pytest

from tests.helpers import run_simulated

ROOT = Path(__file__).resolve().parents[2]


def _rows(out: str) -> dict:
    rows = {}
    for line in out.splitlines():
        if line.endswith("}") and "{" in line:
            rows[line[:line.index("{")].strip()] = ast.literal_eval(line[line.index("{"):])
    return rows


def _assert_rows(rows: dict, models: list) -> None:
    parsed = [rows[f"parsed {name}"] for name in models]
    assert all(got["parsed"] <= got["passers"] for got in parsed) and sum(got["parsed"] for got in parsed) > 0
    engine, parsing = rows["engine"], rows["parsing"]
    assert engine["hits"] > 0 and engine["rows_defined"] == sum(got["parsed"] for got in parsed) == parsing["parsed"]
    assert parsing["bytes"] == sum(got["bytes"] for got in parsed if got["parsed"])   # (a model with none: nothing sent)


def test_parser_rows_on_the_default_route_under_simulator(tmp_path):
    """KR and Thioesterase against a few targets (KR's three shortest hits among them; none of
    Thioesterase's is that short): the rows the GPU sends equal the CPU references', the
    engine's states pyhmmer's, every passer sent defined by libhmmer."""
    out = run_simulated(ROOT / "tests" / "gpu" / "parsed_checks.py", "simulator_parsed_checks", cache_dir=tmp_path)
    _assert_rows(_rows(out), ["KR", "Thioesterase"])


@pytest.mark.gpu
def test_parser_rows_on_the_default_route():
    """The four sample models against the whole sample proteome on a GPU."""
    from hmmgpu.gpu.runtime.context import cuda_available
    from tests.gpu.parsed_checks import gpu_parsed_checks

    if not cuda_available():
        pytest.skip("no CUDA GPU")
    rows = dict(gpu_parsed_checks())
    print(rows)
    models = ["2-Hacid_dh_C", "LuxC", "Thioesterase", "KR"]
    _assert_rows(rows, models)
    assert all(rows[f"parsed {name}"]["parsed"] > 0 for name in models)
