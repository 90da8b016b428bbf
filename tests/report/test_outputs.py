"""The outputs of one run (report/outputs.py): refused or removed before anything is written."""
import pytest

from hmmgpu.errors import HmmgpuError, InputError
from hmmgpu.options import ReportOptions
from hmmgpu.report.outputs import RunOutputs
from tests.helpers import PROTEOME, SAMPLES


def _outputs(paths, query=str(SAMPLES / "LuxC.hmm"), target=str(PROTEOME)):
    return RunOutputs("search", query, target, paths=paths, settings={}, report_options=ReportOptions(),
                      command_line="hmmgpu search", progress="searching")


def test_an_output_that_cannot_be_opened_removes_those_opened_before_it(tmp_path):
    """``-o r.txt --tblout /nonexistent/x.tbl``: the report's temporary file, opened first, is
    gone when the table's open fails; the old report is untouched."""
    (tmp_path / "r.txt").write_text("old report\n")
    with pytest.raises(HmmgpuError, match="^--tblout .*/missing/x.tbl: cannot open for writing"):
        _outputs({"-o": str(tmp_path / "r.txt"), "-A": str(tmp_path / "a.sto"),
                  "tblout": str(tmp_path / "missing" / "x.tbl")})
    assert [p.name for p in tmp_path.iterdir()] == ["r.txt"]
    assert (tmp_path / "r.txt").read_text() == "old report\n"


def test_an_output_naming_an_input_is_refused_before_any_is_opened(tmp_path):
    fasta = tmp_path / "in.fa"
    fasta.write_bytes(PROTEOME.read_bytes()[:2000])
    with pytest.raises(InputError, match=r"^--domtblout .*in\.fa: names the input"):
        _outputs({"-o": str(tmp_path / "r.txt"), "domtblout": str(tmp_path / "." / "in.fa")}, target=str(fasta))
    with pytest.raises(InputError, match=r"^-o .*LuxC\.hmm: names the input"):
        _outputs({"-o": str(SAMPLES / ".." / "pfam_samples" / "LuxC.hmm")})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.fa"]
    assert fasta.read_bytes() == PROTEOME.read_bytes()[:2000]
