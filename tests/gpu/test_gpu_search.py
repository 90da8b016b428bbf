"""On a CUDA GPU: `--backend cuda` gives hmmsearch's tables and zero audit disagreements.

Run on the GPU machine with `python3 -m pytest -m gpu`.
"""
import gzip
import io
import shutil
import subprocess

import pytest

from hmmgpu.audit import run_audit
from hmmgpu.cli import main
from hmmgpu.options import SearchOptions
from tests.helpers import PROTEOME, SAMPLES, SHARED, assert_same_pipeline, hits_table

pytestmark = pytest.mark.gpu
HMMSEARCH = shutil.which("hmmsearch")


@pytest.fixture(scope="module", autouse=True)
def gpu():
    from hmmgpu.gpu.runtime.context import cuda_available

    if not cuda_available():
        pytest.skip("no CUDA GPU")
PROTEINS = SHARED / "seqs" / "public_proteins.fa.gz"


def _rows(path):
    with open(path) as f:
        return [line for line in f if not line.startswith("#")]


def _compare(tmp_path, hmm, db, lanes, ref_db=None):
    ref = {k: tmp_path / f"ref.{k}" for k in ("tblout", "domtblout")}
    ours = {k: tmp_path / f"ours.{k}" for k in ("tblout", "domtblout")}
    subprocess.run([HMMSEARCH, "--cpu", "0", "-o", "/dev/null", "--tblout", str(ref["tblout"]),
                    "--domtblout", str(ref["domtblout"]), str(hmm), str(ref_db or db)], check=True)
    assert main(["search", "--backend", "cuda", "--lanes", lanes, "-o", str(tmp_path / "report"),
                 "--tblout", str(ours["tblout"]), "--domtblout", str(ours["domtblout"]), str(hmm), str(db)]) == 0
    for kind in ref:
        assert _rows(ours[kind]) == _rows(ref[kind]), kind


@pytest.mark.skipif(HMMSEARCH is None, reason="hmmsearch not installed")
@pytest.mark.parametrize("lanes", ["8x4", "16x2"])
def test_cuda_tables_equal_hmmsearch_samples(tmp_path, lanes):
    _compare(tmp_path, SAMPLES / "samples.hmm", PROTEOME, lanes)


@pytest.mark.skipif(HMMSEARCH is None or not PROTEINS.exists(), reason="hmmsearch or ../shared/data missing")
@pytest.mark.parametrize("lanes", ["8x4", "16x2"])
@pytest.mark.parametrize("model", ["PF00096", "PF00005", "PF00873", "PF05088"])
def test_cuda_tables_equal_hmmsearch_real_pfam(tmp_path, model, lanes):
    hmm = tmp_path / f"{model}.hmm"
    hmm.write_bytes(gzip.decompress((SHARED / "pfam" / f"{model}.hmm.gz").read_bytes()))
    _compare(tmp_path, hmm, PROTEINS, lanes)


@pytest.mark.parametrize("lanes", ["8x4", "16x2"])
def test_cuda_audit_zero_disagreements(lanes):
    """Every row agrees, the Backward parser's from the GPU's kernels and the domain list from
    the GPU's decodings of the F3 passers (the others by the CPU references)."""
    from rich.console import Console

    console = Console(file=io.StringIO(), width=400)   # a table row a line
    assert run_audit(str(SAMPLES / "samples.hmm"), str(PROTEOME), SearchOptions.from_kwargs(backend="cuda", lanes=lanes),
                     console=console) is True
    out = console.file.getvalue()
    assert "cuda" in out
    for stage in ("Backward parser (p7_BackwardParser) [cuda", "decoded on the GPU"):
        rows = [line.split("│")[2:5] for line in out.splitlines() if stage in line]
        assert len(rows) == 4 and all(int(compared) == int(agree) > 0 for compared, agree, _ in rows), stage


def test_packing_on_the_device_equals_the_hosts():
    """The database's slots packed on the GPU equal the host's packing, byte for byte (80,010
    targets), and the host's packing and chunks are chosen where the budget says."""
    from tests.gpu.kernel_checks import packing_checks

    rows = {label: chunks for label, _, chunks in packing_checks(scale=2000)}
    assert rows["device"] == rows["host"] == 1 and rows["chunked"] > 1


def test_gpu_process_runs_the_exported_kernels_without_numba():
    """The GPU process loads the cubins numba compiled (exported by ``kernels.build``) and
    launches them through the CUDA driver: once every kernel is exported it never imports
    numba, and its searches equal pyhmmer's, counters included."""
    import pyhmmer

    from hmmgpu.search.engine import SearchEngine
    from hmmgpu.gpu.process import CudaProcessBackend
    from hmmgpu.formats.seqdb import SequenceDB

    with pyhmmer.plan7.HMMFile(SAMPLES / "samples.hmm") as fh:
        hmms = list(fh)
    db = SequenceDB.from_fasta(PROTEOME)
    opts = SearchOptions.from_kwargs(backend="cuda", cpus=4)
    for attempt in ("compiles what is missing", "finds every kernel exported"):
        backend = CudaProcessBackend(db)
        try:
            backend.prepare_for([h.M for h in hmms])
            results = list(SearchEngine(db, opts, backend).search(hmms))
            details = backend.details()
        finally:
            backend.close()
    assert details["numba_imported"] is False, details
    assert details["kernel_ms"]["msv"] > 0
    for result, hmm in zip(results, hmms):
        ref = pyhmmer.plan7.Pipeline(hmm.alphabet, **opts.pipeline_kwargs()).search_hmm(hmm, db.block())
        assert hits_table(result.hits) == hits_table(ref)
        assert_same_pipeline(result.hits, ref)


def _pipeline_lines(path) -> list:
    """The pipeline statistics of a report (hmmsearch's "Passed ... filter" and target lines)."""
    keep = (b"Query model(s):", b"Target sequences:", b"Passed MSV filter:", b"Passed bias filter:",
            b"Passed Vit filter:", b"Passed Fwd filter:", b"Initial search space", b"Domain search space")
    with open(path, "rb") as f:
        return [line.split() for line in f if line.strip().startswith(keep)]


def test_cuda_forward_gate_samples_equal_hmmsearch(tmp_path, capsys):
    """The four pfam_samples models against the sample proteome on the GPU, the Forward gate
    on (the default): in this process, tables (targets, domains), kept hits and every counter
    equal a full pyhmmer search; the gate failed some Viterbi-filter survivors (pyhmmer never
    saw them), left none undecided, passed exactly pyhmmer's n_past_fwd, and its kernel time
    is counted; each model's gate sent on exactly the targets whose Forward P-value (HMMER's
    functions) is <= F3, its scores libhmmer's bit for bit. Then the command line (the GPU
    process): tables and the report's pipeline statistics equal hmmsearch's, and the run's
    statistics show the gate."""
    import pyhmmer

    from hmmgpu.formats.seqdb import SequenceDB
    from hmmgpu.gpu.backend import CudaBackend
    from hmmgpu.search.engine import SearchEngine
    from tests.gpu.kernel_checks import check_forward_gate

    with pyhmmer.plan7.HMMFile(SAMPLES / "samples.hmm") as fh:
        hmms = list(fh)
    assert len(hmms) == 4
    db = SequenceDB.from_fasta(PROTEOME)
    opts = SearchOptions.from_kwargs(backend="cuda", cpus=4)
    backend = CudaBackend(db)
    try:
        engine = SearchEngine(db, opts, backend)
        results = list(engine.search(hmms))
        details = backend.details()
        n_past_vit = n_past_fwd = 0
        for result, hmm in zip(results, hmms):
            ref = pyhmmer.plan7.Pipeline(hmm.alphabet, **opts.pipeline_kwargs()).search_hmm(hmm, db.block())
            for fmt in ("targets", "domains"):
                assert hits_table(result.hits, fmt) == hits_table(ref, fmt), (hmm.name, fmt)
            assert len(result.hits) == len(ref)
            assert_same_pipeline(result.hits, ref)
            counters = ref.__getstate__()["pipeline"]
            n_past_vit += counters["n_past_vit"]
            n_past_fwd += counters["n_past_fwd"]
            prof = backend.prepare(hmm)
            print(hmm.name, check_forward_gate(backend, hmm, prof, db, opts, backend.cascade(prof, opts)))
    finally:
        backend.close()
    gate = engine.stats.forward_gate
    assert gate["failed"] > 0 and gate["unsure"] == 0, gate
    assert gate["passed"] == n_past_fwd and gate["passed"] + gate["failed"] == n_past_vit, gate
    assert details["kernel_ms"]["forward"] > 0 and details["forward_gate"]["failed"] >= gate["failed"]
    assert details["forward_gate"]["cells"] > 0 and "GCUPS" in engine.stats.forward_gate_line()
    ref_out = {k: tmp_path / f"ref.{k}" for k in ("txt", "tblout", "domtblout")}
    ours = {k: tmp_path / f"ours.{k}" for k in ("txt", "tblout", "domtblout")}
    if HMMSEARCH is not None:
        subprocess.run([HMMSEARCH, "--cpu", "0", "-o", str(ref_out["txt"]), "--tblout", str(ref_out["tblout"]),
                        "--domtblout", str(ref_out["domtblout"]), str(SAMPLES / "samples.hmm"), str(PROTEOME)],
                       check=True)
    capsys.readouterr()
    assert main(["search", "--backend", "cuda", "-o", str(ours["txt"]), "--tblout", str(ours["tblout"]),
                 "--domtblout", str(ours["domtblout"]), str(SAMPLES / "samples.hmm"), str(PROTEOME)]) == 0
    err = capsys.readouterr().err
    assert f"{gate['failed']} failed F3" in err and "Forward kernel" in err, err
    if HMMSEARCH is not None:
        for kind in ("tblout", "domtblout"):
            assert _rows(ours[kind]) == _rows(ref_out[kind]), kind
        assert _pipeline_lines(ours["txt"]) == _pipeline_lines(ref_out["txt"]) != []


@pytest.mark.parametrize("name", ["PF02826", "LuxC", "Thioesterase", "KR"])
def test_cuda_forward_gate_at_narrow_f3(name):
    """On the GPU, F3 between two Viterbi-filter survivors' Forward P-values as narrowly as a
    double allows (a P-value itself, which passes, and the double below it, which fails):
    the search equals pyhmmer's (tables, counters) and the gate sends on exactly HMMER's
    passers (tests/gpu/kernel_checks.py, check_cascade)."""
    from hmmgpu.formats.seqdb import SequenceDB
    from tests.gpu.kernel_checks import check_cascade, check_cascade_survivors
    from tests.helpers import forward_pvalues, narrow_f3, sample_hmm

    db = SequenceDB.from_fasta(PROTEOME)
    hmm = sample_hmm(name)
    values = narrow_f3(forward_pvalues(hmm, db, check_cascade_survivors(hmm, db)))
    assert len(values) == 4
    reports = [check_cascade(hmm, db, F3=F3) for F3 in values]
    print(name, values, reports)
    for passes, fails in (reports[:2], reports[2:]):
        assert fails["gate"]["failed"] > passes["gate"]["failed"]


HMMSCAN, HMMPRESS = shutil.which("hmmscan"), shutil.which("hmmpress")


@pytest.mark.skipif(HMMSCAN is None or HMMPRESS is None, reason="hmmscan not installed")
def test_cuda_scan_equals_hmmscan(tmp_path):
    """`hmmgpu scan --backend cuda`: each sequence's models narrowed by the GPU cascade; tables
    equal hmmscan's (the cascade's per-sequence counters included, in the report)."""
    models = tmp_path / "models.hmm"
    models.write_bytes((SAMPLES / "samples.hmm").read_bytes())
    subprocess.run([HMMPRESS, "-f", str(models)], check=True, capture_output=True)
    ref = {k: tmp_path / f"ref.{k}" for k in ("tblout", "domtblout")}
    ours = {k: tmp_path / f"ours.{k}" for k in ("tblout", "domtblout")}
    subprocess.run([HMMSCAN, "--cpu", "0", "-o", "/dev/null", "--tblout", str(ref["tblout"]), "--domtblout",
                    str(ref["domtblout"]), str(models), str(PROTEOME)], check=True)
    assert main(["scan", "--backend", "cuda", "-o", str(tmp_path / "report"), "--tblout", str(ours["tblout"]),
                 "--domtblout", str(ours["domtblout"]), str(models), str(PROTEOME)]) == 0
    for kind in ref:
        assert _rows(ours[kind]) == _rows(ref[kind]), kind
