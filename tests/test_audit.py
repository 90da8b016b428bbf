"""`hmmgpu audit`: a clear table, zero disagreements on real data, exit 1 when a stage is wrong."""
import numpy as np
import pytest

from hmmgpu.cpu import filters as cpu_filters
from hmmgpu.audit import run_audit
from hmmgpu.cli import main
from hmmgpu.options import SearchOptions
from tests.helpers import PROTEOME, SAMPLES

#: The sample proteome's first proteins: three of them are F3 passers of PF02826.
SLICE = 320


@pytest.fixture(scope="module")
def proteome_slice(tmp_path_factory):
    """The first :data:`SLICE` proteins of the sample proteome, as a FASTA file."""
    path = tmp_path_factory.mktemp("audit") / "slice.faa"
    path.write_text(">" + ">".join(PROTEOME.read_text().split(">")[1:SLICE + 1]))
    return path


def _rows(out: str, stage: str) -> list:
    """(compared, agree, disagree) of every table row of ``stage`` in the audit's output."""
    return [tuple(int(cell) for cell in line.split("│")[2:5]) for line in out.splitlines() if stage in line]


def test_audit_all_samples_agree(capsys):
    assert main(["audit", "--backend", "numba", str(SAMPLES / "samples.hmm"), str(PROTEOME)]) == 0
    out = capsys.readouterr().out
    for stage in ("null score", "SSV", "MSV", "bias filter", "Viterbi filter", "Forward parser", "final hits"):
        assert stage in out
    assert "all stages agree with HMMER" in out
    assert "2100" in out
    for stage in ("Backward parser", "domain list"):   # per model, on its F3 passers (22, 1, 1, 9)
        rows = _rows(out, stage)
        assert len(rows) == 4 and all(compared == agree > 0 and disagree == 0 for compared, agree, disagree in rows)


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


def test_audit_reports_a_broken_backward_score(monkeypatch, capsys, proteome_slice):
    """A Backward score one ulp off on one F3 passer is a disagreement of the Backward parser
    stage, and the command exits 1. The references ran in hmmsearch's float mode."""
    from hmmgpu.cpu import fwdback
    from hmmgpu.host import set_flush_to_zero

    real = fwdback.backward_scores
    modes = []

    def off_by_one_ulp(*args, **kwargs):
        modes.append(set_flush_to_zero(True))   # the mode it was in (left as it was)
        status, scores, recomputed = real(*args, **kwargs)
        scores[0] = np.nextafter(scores[0], np.float32(np.inf))
        return status, scores, recomputed

    monkeypatch.setattr(fwdback, "backward_scores", off_by_one_ulp)
    assert main(["audit", "--backend", "numba", str(SAMPLES / "PF02826.hmm"), str(proteome_slice)]) == 1
    assert modes == [True]
    out = capsys.readouterr().out
    assert out.rstrip().splitlines()[-1] == "DISAGREEMENTS FOUND"
    assert _rows(out, "Backward parser") == [(3, 2, 1)]   # PF02826's F3 passers among the slice's proteins
    assert _rows(out, "domain list") == [(3, 3, 0)]


def test_audit_reports_a_broken_domain(monkeypatch, capsys, proteome_slice):
    """One domain's envelope score one ulp off in hmmgpu's domain definition of one F3 passer
    is a disagreement of the domain list, and the command exits 1."""
    from hmmgpu.stages import domaindef

    real = domaindef.define_domains
    calls = []

    def one_envelope_off(*args, **kwargs):
        definition = real(*args, **kwargs)
        calls.append(definition)
        if len(calls) == 2:
            definition.domains[0].envsc = np.nextafter(definition.domains[0].envsc, np.float32(np.inf))
        return definition

    monkeypatch.setattr(domaindef, "define_domains", one_envelope_off)
    assert main(["audit", "--backend", "numba", str(SAMPLES / "PF02826.hmm"), str(proteome_slice)]) == 1
    out = capsys.readouterr().out
    assert out.rstrip().splitlines()[-1] == "DISAGREEMENTS FOUND"
    assert _rows(out, "domain list") == [(3, 2, 1)]
    assert "domain 1 envsc hmmgpu" in out
    assert _rows(out, "Backward parser") == [(3, 3, 0)]


@pytest.mark.parametrize("defined", [False, True])
def test_audit_domain_list_from_a_devices_decodings(monkeypatch, capsys, proteome_slice, defined):
    """The domain list's device branch (``--backend cuda``: domain definition from the GPU's
    decodings of the F3 passers, as the own post-filter's search takes them; ``defined``: the
    passers defined as the GPU process defines them, stages.defined.split_defined, here with
    the CPU stages): with decodings made by the CPU references in the cascade's result, every
    passer agrees and the label counts them."""
    from dataclasses import replace

    from hmmgpu.cpu.domaindef import CpuDomainStages
    from hmmgpu.stages.defined import split_defined

    from hmmgpu.cpu.backends import NumbaBackend
    from hmmgpu.cpu.fwdback import ForwardTables, backward, parse
    from hmmgpu.stages.decoded import DecodedTargets
    from hmmgpu.stages.domaindef import domain_decoding
    from hmmgpu.stages.forward import length_specials
    from hmmgpu.stages.profiles import configured_profile

    real = NumbaBackend.cascade

    def decoded_cascade(self, profile, options):
        result = real(self, profile, options)
        tables = ForwardTables.from_optimized(configured_profile(profile.hmm).to_optimized())
        passers = np.setdiff1d(result.survivors, result.forward.unsure)
        made = []
        for t in passers.tolist():
            codes = self.db.codes(t)
            fwd = parse(tables, codes)
            bck = backward(tables, codes, fwd)
            made.append((fwd.score, domain_decoding(fwd.xmx, bck.xmx, bck.has_own_scales,
                                                    length_specials(codes.size)[1])))
        decoded = DecodedTargets.gather(passers, [score for score, _ in made], [d[0] for _, d in made],
                                        *([d[k] for _, d in made] for k in (1, 2, 3)))
        if not defined:
            return replace(result, decoded=decoded)
        sent, rest = split_defined(CpuDomainStages(tables, seed=options.seed), self.db.codes, decoded)
        return replace(result, decoded=rest, defined=sent)

    monkeypatch.setattr(NumbaBackend, "cascade", decoded_cascade)
    assert main(["audit", "--backend", "numba", str(SAMPLES / "PF02826.hmm"), str(proteome_slice)]) == 0
    out = capsys.readouterr().out
    assert _rows(out, "domain list") == [(3, 3, 0)]
    assert "3 decoded on the" in out
    label = " ".join(out.replace("│", " ").split())   # the table's wrapped cells read as one text
    assert ("3 decoded on the GPU, 2 of them defined there]" in label) == defined   # the third flagged
