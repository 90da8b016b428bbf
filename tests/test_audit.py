"""`hmmgpu audit`: a clear table, zero disagreements on real data, exit 1 when a stage is wrong."""
import numpy as np

from hmmgpu.cpu import filters as cpu_filters
from hmmgpu.audit import run_audit
from hmmgpu.cli import main
from hmmgpu.options import SearchOptions
from tests.helpers import PROTEOME, SAMPLES


def test_audit_all_samples_agree(capsys):
    assert main(["audit", "--backend", "numba", str(SAMPLES / "samples.hmm"), str(PROTEOME)]) == 0
    out = capsys.readouterr().out
    for stage in ("null score", "SSV", "MSV", "bias filter", "Viterbi filter", "Forward parser", "final hits"):
        assert stage in out
    assert "all stages agree with HMMER" in out
    assert "2100" in out


def test_audit_reports_a_broken_stage(monkeypatch, capsys):
    real = cpu_filters.bias_filter

    def off_by_one_ulp(*args, **kwargs):
        out = real(*args, **kwargs)
        out[3] = np.nextafter(out[3], np.float32(np.inf))
        return out

    monkeypatch.setattr(cpu_filters, "bias_filter", off_by_one_ulp)
    assert run_audit(str(SAMPLES / "PF02826.hmm"), str(PROTEOME), SearchOptions.from_kwargs(backend="numba")) is False
    out = capsys.readouterr().out
    assert "DISAGREEMENTS FOUND" in out
    assert "bias filter" in out


def test_audit_reports_a_broken_forward_score(monkeypatch, capsys):
    """A Forward score one ulp off on one Viterbi-filter survivor is a disagreement of the
    Forward parser stage (and the audit fails)."""
    from hmmgpu.cpu import fwdback

    real = fwdback.score_targets

    def off_by_one_ulp(*args, **kwargs):
        status, scores, recomputed = real(*args, **kwargs)
        scores[1] = np.nextafter(scores[1], np.float32(np.inf))
        return status, scores, recomputed

    monkeypatch.setattr(fwdback, "score_targets", off_by_one_ulp)
    assert run_audit(str(SAMPLES / "PF02826.hmm"), str(PROTEOME), SearchOptions.from_kwargs(backend="numba")) is False
    out = capsys.readouterr().out
    assert "DISAGREEMENTS FOUND" in out
    row = next(line for line in out.splitlines() if "Forward parser" in line).split("│")
    compared, agree, disagree = (int(cell) for cell in row[2:5])
    assert compared == 48 and agree == 47 and disagree == 1  # PF02826's Viterbi-filter survivors
