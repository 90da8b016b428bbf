"""Bad input: one clear line on stderr, exit status 1 (HMMER's), never a traceback or silent output."""
import gzip
import re
import subprocess
import sys

import pytest

from hmmgpu.cli import ERROR_STATUS, main
from tests.helpers import PROTEOME, ROOT, SAMPLES

GOOD_HMM = str(SAMPLES / "PF02826.hmm")
GOOD_DB = str(PROTEOME)


def _write(path, data):
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return str(path)


def _cases(tmp):
    long_seq = ">huge\n" + "A" * 100_001 + "\n>ok\nMKV\n"
    return {
        "missing_hmm": (["search", str(tmp / "nope.hmm"), GOOD_DB], "no such file"),
        "missing_db": (["search", GOOD_HMM, str(tmp / "nope.fa")], "no such file"),
        "empty_hmm": (["search", _write(tmp / "e.hmm", ""), GOOD_DB], "empty"),
        "empty_db": (["search", GOOD_HMM, _write(tmp / "e.fa", "")], "no sequences"),
        "blank_db": (["search", GOOD_HMM, _write(tmp / "b.fa", "\n\n  \n")], "no sequences"),
        "malformed_hmm": (["search", _write(tmp / "m.hmm", "this is not an HMM\n"), GOOD_DB], "not a valid HMMER profile"),
        "truncated_hmm": (["search", _write(tmp / "t.hmm", open(GOOD_HMM).read()[:6000]), GOOD_DB], "truncated"),
        "malformed_fasta": (["search", GOOD_HMM, _write(tmp / "m.fa", "MKVLA\nGGT\n")], "m.fa"),
        "hmm_as_db": (["search", GOOD_HMM, GOOD_HMM], "PF02826.hmm"),
        "odd_characters": (["search", GOOD_HMM, _write(tmp / "o.fa", ">s1\nMKV@LA\n")], "'@'"),
        "digits_in_sequence": (["search", GOOD_HMM, _write(tmp / "d.fa", ">s1\nMKV1LA\n")], "'1'"),
        "dna_model": (["search", str(ROOT / "tests" / "data" / "bmyD.hmm"), GOOD_DB], "DNA model"),
        "directory_as_hmm": (["search", str(tmp), GOOD_DB], "directory"),
        "directory_as_db": (["search", GOOD_HMM, str(tmp)], str(tmp)),
        "too_long_target": (["search", GOOD_HMM, _write(tmp / "l.fa", long_seq)], "100000"),
        "bad_gzip": (["search", GOOD_HMM, _write(tmp / "g.fa.gz", gzip.compress(b">a\nMKV\n")[:12])], "g.fa.gz"),
        "cut_ga_missing": (["search", "--cut_ga", str(SAMPLES / "KR.hmm"), GOOD_DB], "no GA"),
        "makedb_missing": (["makedb", str(tmp / "nope.fa"), str(tmp / "out")], "no such file"),
        "audit_dna_model": (["audit", str(ROOT / "tests" / "data" / "bmyD.hmm"), GOOD_DB], "DNA model"),
    }


CASE_NAMES = [
    "missing_hmm", "missing_db", "empty_hmm", "empty_db", "blank_db", "malformed_hmm", "truncated_hmm",
    "malformed_fasta", "hmm_as_db", "odd_characters", "digits_in_sequence", "dna_model", "directory_as_hmm",
    "directory_as_db", "too_long_target", "bad_gzip", "cut_ga_missing", "makedb_missing", "audit_dna_model",
]


def test_case_list_is_complete(tmp_path):
    assert sorted(_cases(tmp_path)) == sorted(CASE_NAMES)


@pytest.mark.parametrize("case", CASE_NAMES)
def test_bad_input_one_line_error(case, tmp_path, capsys):
    argv, needle = _cases(tmp_path)[case]
    assert main(["search", "--backend", "numba"] + argv[1:] if argv[0] == "search" else argv) == ERROR_STATUS
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("hmmgpu: error:")]
    assert len(errors) == 1, err
    assert needle in errors[0], errors[0]
    assert "Traceback" not in "\n".join(err)


def test_zero_length_sequences_count_in_Z(tmp_path):
    fa = _write(tmp_path / "z.fa", ">empty1\n>s1\n" + open(PROTEOME).read().split(">", 2)[1].split("\n", 1)[1] + ">empty2\n\n")
    out = tmp_path / "t"
    assert main(["search", "--backend", "numba", "--tblout", str(out), "-o", str(tmp_path / "r"), GOOD_HMM, fa]) == 0
    assert re.search(r"^Target sequences: +3  \(", (tmp_path / "r").read_text(), re.M)


def test_error_exit_code_from_real_process(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "hmmgpu.cli", "search", GOOD_HMM, str(tmp_path / "none.fa")],
                          capture_output=True, text=True)
    assert proc.returncode == ERROR_STATUS
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"hmmgpu: error: {tmp_path / 'none.fa'}: no such file")
