"""benchmarks/differential_check.py on two of its random cases: one hmmsearch case and one hmmscan
case (real Pfam models and real proteins of ../shared/data, options drawn from the seed, some of
the sequences edited into the forms real files take: lower case, '*', rare residues, long, tiny,
rewrapped, repeated names), every output of hmmgpu's pyhmmer and numba routes equal to serial
hmmsearch's and hmmscan's, byte for byte but for the lines that name the program, a time or the
threads.

Skipped where ../shared/data is absent (a user's fresh clone); CI and developer machines have it.
"""
import json
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT, _shared_data

pytestmark = [
    pytest.mark.skipif(_shared_data() is None, reason="../shared/data (real proteins) not present"),
    pytest.mark.skipif(not all(shutil.which(t) for t in ("hmmsearch", "hmmscan", "hmmpress")),
                       reason="HMMER's programs (pip package 'hmmer', in the test extra) not installed"),
]


def test_random_cases_equal_hmmer(tmp_path):
    out = tmp_path / "cases.json"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "differential_check.py"), "--seeds", "1:2",
                          "--routes", "hmmer,numba", "--scan", "0.3", "--edits", "1", "--keep", str(tmp_path / "kept"),
                          "--out", str(out)],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(out.read_text())
    cases = result["cases"]
    # seed 1 draws an hmmscan case and seed 2 an hmmsearch case, neither refused by HMMER
    assert [c["program"] for c in cases] == ["scan", "search"]
    assert all(c["edited"] for c in cases)
    assert not any(c["refused"] or c["differences"] for c in cases)
    assert result["failed"] == 0 and "2 cases, 0 with differences" in run.stdout


def test_edited_records_take_each_form():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from differential_check import EDITS, edited
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    import random

    record = b"sp|P1|X some words\n" + b"MKVLAAGIW" * 10 + b"\nPEPTIDE"
    seq = b"MKVLAAGIW" * 10 + b"PEPTIDE"
    rng = random.Random(3)
    for how in EDITS + ("long",):
        header, _, body = edited(rng, record, how).partition(b"\n")
        lines = body.split(b"\n")
        got = b"".join(lines)
        if how == "twice":
            assert body.count(b">sp|P1|X some words") == 1
            continue
        assert header.startswith(b"sp|P1|X")
        expected = {"lowercase": seq.lower(), "stop": seq + b"*", "tiny": seq[:len(got)],
                    "xrun": b"X" * (len(got) - len(seq)) + seq, "rewrap": seq, "header": seq}
        if how in expected:
            assert got == expected[how], how
        elif how == "rare":
            assert len(got) == len(seq) and set(got) <= set(seq) | set(b"BJZOUX")
        else:  # long
            assert 20_000 <= len(got) <= 60_000 and got.startswith(seq + seq)
    assert 1 <= len(b"".join(edited(random.Random(5), record, "tiny").split(b"\n")[1:])) <= 5
