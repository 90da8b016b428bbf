"""pyhmmer's own hmmsearch and hmmscan tests pass against hmmgpu's functions, in a fresh interpreter.

The cases are pyhmmer's test classes in tests/pyhmmer_suite_cases.py. pyhmmer's search
tests end by asserting that the process has no thread but its main one (a search leaves
none behind); in this suite's process, tests that ran before leave threads of their own
(dask's, for one), so the cases run unchanged in a fresh interpreter, and this test reads
their outcomes from pytest's JUnit report: every case of every class passes, except the
ones pyhmmer itself marks skipped (``test_pf02826_file`` of its ``parallel="targets"``
classes), which must be reported skipped.
"""
from __future__ import annotations

import subprocess
import sys
import unittest
import xml.etree.ElementTree as ET

import pytest

from tests.helpers import ROOT

pytest.importorskip("pyhmmer.tests.test_hmmer")

import tests.pyhmmer_suite_cases as cases  # noqa: E402  (a module, so that pytest collects none of its classes here)


def _expected(engine: str) -> dict:
    """Each case of the classes for ``engine`` ("Auto", "Numba", "Cuda"): "passed", or
    "skipped" where pyhmmer's own class skips it."""
    loader = unittest.TestLoader()
    outcomes = {}
    for name in dir(cases):
        cls = getattr(cases, name)
        if name.startswith("Test") and name.endswith(engine) and isinstance(cls, type):
            for test in loader.getTestCaseNames(cls):
                skipped = getattr(getattr(cls, test), "__unittest_skip__", False)
                outcomes[f"{name}.{test}"] = "skipped" if skipped else "passed"
    return outcomes


def _run(tmp_path, marker: str) -> dict:
    """Run the cases selected by ``marker`` in a fresh interpreter; each case's outcome."""
    report = tmp_path / "cases.xml"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", marker,
                          f"--junitxml={report}", "tests/pyhmmer_suite_cases.py"],
                         cwd=ROOT, capture_output=True, text=True)
    outcomes = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        kinds = {child.tag for child in case} & {"failure", "error", "skipped"}
        key = f"{case.get('classname').rsplit('.', 1)[-1]}.{case.get('name')}"
        outcomes[key] = kinds.pop() if kinds else "passed"
    assert run.returncode == 0, run.stdout[-6000:]
    return outcomes


def test_pyhmmer_tests_pass(tmp_path):
    outcomes = _run(tmp_path, "not gpu")
    expected = {**_expected("Auto"), **_expected("Numba")}
    assert outcomes == expected
    searches = [case for case in expected if case.startswith("TestHmmsearch")]
    assert sum(expected[case] == "passed" for case in searches) >= 2 * 51   # pyhmmer 0.12.3 has 51, per engine
    assert sum(expected[case] == "passed" for case in expected if case.startswith("TestHMMScan")) >= 2 * 2


@pytest.mark.gpu
def test_pyhmmer_tests_pass_on_the_gpu(tmp_path):
    from hmmgpu.gpu.runtime.context import cuda_available

    if not cuda_available():
        pytest.skip("no CUDA GPU")
    assert _run(tmp_path, "gpu") == _expected("Cuda")
