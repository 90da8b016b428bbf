"""HMMER 3.4's 66 hmmsearch and hmmscan option exercises, with ``hmmgpu search``/``scan`` in their place.

The exercise lines and their data are copies from HMMER's source tree
(``tests/data/hmmer_testsuite/``); :mod:`tests.hmmer_testsuite` runs each with HMMER's
program and with hmmgpu's, and compares every output after the banner and timing lines.
"""
import shutil
from pathlib import Path

import pytest

from tests.hmmer_testsuite import Suite, comparable_file, comparable_report, summary

DATA = Path(__file__).resolve().parent / "data" / "hmmer_testsuite"
pytestmark = pytest.mark.skipif(shutil.which("hmmsearch") is None or shutil.which("hmmbuild") is None,
                                reason="HMMER binaries (pip 'hmmer') missing")


def test_hmmer_option_exercises_give_hmmers_outputs(tmp_path):
    suite = Suite(source=DATA, work=tmp_path)
    suite.set_up()
    suite.run_sqc(DATA / "exercises.sqc")
    assert len(suite.outcomes) == 66 and not suite.missing
    assert all(o.passed for o in suite.outcomes), "\n".join(summary(suite.outcomes, suite.missing))
    compared = [o for o in suite.outcomes if not o.reason]
    assert len(compared) == 64   # all but the two -h exercises compared output by output


def test_the_comparison_sees_a_difference():
    """Only the banner, the timing lines and the tables' tail are left out of the comparison."""
    report = b"# hmmsearch ::\n# HMMER 3.4\n# (C)\n# BSD\n# query HMM file: x\nQuery: a\n# CPU time: 0.01u\n# Mc/sec: 3\n//\n"
    ours = report.replace(b"hmmsearch ::", b"hmmgpu search ::").replace(b"0.01u", b"0.02u").replace(b"3\n", b"9\n")
    assert comparable_report(report) == comparable_report(ours)
    assert comparable_report(report) != comparable_report(report.replace(b"Query: a", b"Query: b"))
    table = b"seq1 - 10.0\n#\n# Program:         hmmsearch\n# [ok]\n"
    assert comparable_file("t.tbl", table) == comparable_file("t.tbl", table.replace(b"hmmsearch", b"hmmgpu"))
    assert comparable_file("t.tbl", table) != comparable_file("t.tbl", table.replace(b"10.0", b"10.1"))
