"""`hmmgpu search` and `hmmgpu scan` as a user runs them, beside hmmsearch and hmmscan 3.4.

Reports are compared line by line (less the banner and timing lines), tables byte for byte
(less their '#' tail, whose program, version, command line, directory and date differ),
and bad input must give one line on stderr and exit status 1 (HMMER's).
"""
import gzip
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from pyhmmer.easel import Alphabet, SequenceFile
from pyhmmer.plan7 import HMMFile, Pipeline as PyhmmerPipeline

import hmmgpu
from hmmgpu.cli import ERROR_STATUS, main
from hmmgpu.formats.seqdb import SequenceDB
from tests.helpers import PROTEOME, ROOT, SAMPLES
from tests.report.test_report import assert_same_report, real_pfam_inputs
from tests.search.test_scan import first_sequences, pressed, without_tail
from tests.formats.test_seqdb import uniprot_record

HMMSEARCH, HMMSCAN = shutil.which("hmmsearch"), shutil.which("hmmscan")
pytestmark = pytest.mark.skipif(HMMSEARCH is None or HMMSCAN is None, reason="HMMER binaries (pip 'hmmer') missing")
TABLES = ("tblout", "domtblout", "pfamtblout")


def run_hmmer(program, tmp_path, args, stdin=None):
    """The HMMER binary's report and tables (run in tmp_path, outputs named ref.*)."""
    flags = ["-o", "ref.out"] + [x for kind in TABLES for x in (f"--{kind}", f"ref.{kind}")]
    done = subprocess.run([program, *flags, *args], cwd=tmp_path, stdin=stdin, capture_output=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return (tmp_path / "ref.out").read_bytes(), {k: (tmp_path / f"ref.{k}").read_bytes() for k in TABLES}


def run_hmmgpu(tmp_path, args, capsys=None):
    """hmmgpu's report and tables, written under the same names (ref.*) from tmp_path."""
    flags = ["-o", "ref.out"] + [x for kind in TABLES for x in (f"--{kind}", f"ref.{kind}")]
    os.chdir(tmp_path)
    try:
        for kind in TABLES + ("out",):
            (tmp_path / f"ref.{kind}").unlink(missing_ok=True)
        code = main([*args[:1], *flags, *args[1:]])
    finally:
        os.chdir(ROOT)
    assert code == 0, capsys.readouterr().err if capsys else code
    return (tmp_path / "ref.out").read_bytes(), {k: (tmp_path / f"ref.{k}").read_bytes() for k in TABLES}


def assert_same_run(ours, ref):
    assert_same_report(ours[0], ref[0])
    for kind in TABLES:
        assert without_tail(ours[1][kind]) == without_tail(ref[1][kind]), kind
        tail = ours[1][kind][len(without_tail(ours[1][kind])):]
        assert tail.startswith(b"#\n# Program:         hmmgpu ") and tail.endswith(b"# [ok]\n"), tail


SEARCHES = [
    ("hmmer", ["--cpu", "0"]),
    ("numba", ["--acc", "-E", "1e-5", "--domE", "1e-3"]),
    ("hmmer", ["--notextw", "--nonull2", "--cut_ga", "--cpu", "1"]),
    ("numba", ["--noali", "--textw", "150", "-Z", "1e6", "--domZ", "50", "--max"]),
]


@pytest.mark.parametrize("backend,args", SEARCHES, ids=["default", "acc_E", "notextw_nonull2_cutga", "noali_Z_max"])
def test_search_equals_hmmsearch(tmp_path, capsys, backend, args):
    hmm = SAMPLES / ("LuxC.hmm" if "--cut_ga" in args else "PF02826.hmm" if "--max" in args else "samples.hmm")
    ref = run_hmmer(HMMSEARCH, tmp_path, [*args, str(hmm), str(PROTEOME)])
    ours = run_hmmgpu(tmp_path, ["search", "--backend", backend, *args, str(hmm), str(PROTEOME)], capsys)
    assert_same_run(ours, ref)


def test_search_alignment_option(tmp_path, capsys):
    args = ["-A", "ali.sto", str(SAMPLES / "samples.hmm"), str(PROTEOME)]
    ref = run_hmmer(HMMSEARCH, tmp_path, args)
    ref_ali = (tmp_path / "ali.sto").read_bytes()
    ours = run_hmmgpu(tmp_path, ["search", "--backend", "hmmer", *args], capsys)
    assert_same_run(ours, ref)
    author = re.compile(rb"^#=GF AU .*$", re.M)
    assert author.sub(b"", (tmp_path / "ali.sto").read_bytes()) == author.sub(b"", ref_ali)


def test_search_made_database_and_stdin(tmp_path, capsys):
    SequenceDB.from_fasta(PROTEOME).save(tmp_path / "made")
    ref = run_hmmer(HMMSEARCH, tmp_path, [str(SAMPLES / "samples.hmm"), str(PROTEOME)])
    assert_same_run(run_hmmgpu(tmp_path, ["search", str(SAMPLES / "samples.hmm"), str(tmp_path / "made")], capsys),
                    (ref[0].replace(str(PROTEOME).encode(), str(tmp_path / "made").encode()), ref[1]))
    code = subprocess.run([sys.executable, "-m", "hmmgpu", "search", "--tblout", str(tmp_path / "stdin.tbl"),
                           "-o", os.devnull, str(SAMPLES / "samples.hmm"), "-"],
                          stdin=open(PROTEOME, "rb"), cwd=ROOT, capture_output=True)
    assert code.returncode == 0, code.stderr
    assert without_tail((tmp_path / "stdin.tbl").read_bytes()) == without_tail(ref[1]["tblout"])


def test_models_from_standard_input(tmp_path, capsys):
    args = [str(SAMPLES / "samples.hmm"), str(PROTEOME)]
    ref = run_hmmer(HMMSEARCH, tmp_path, args)
    code = subprocess.run([sys.executable, "-m", "hmmgpu", "search", "--tblout", str(tmp_path / "m.tbl"),
                           "-o", os.devnull, "/dev/stdin", str(PROTEOME)],
                          stdin=open(SAMPLES / "samples.hmm", "rb"), cwd=ROOT, capture_output=True)
    assert code.returncode == 0, code.stderr
    assert without_tail((tmp_path / "m.tbl").read_bytes()) == without_tail(ref[1]["tblout"])


def test_tformat_uniprot_equals_hmmsearch(tmp_path, capsys):
    db = SequenceDB.from_fasta(PROTEOME)
    records = [uniprot_record(b"P%d_BACTE" % i, b"Q%05d" % i, b"protein number %d" % i,
                              db.block([i])[0].textize().sequence.encode()) for i in range(db.n)]
    (tmp_path / "proteins.dat").write_bytes(b"".join(records))
    args = ["--tformat", "uniprot", "--acc", str(SAMPLES / "samples.hmm"), "proteins.dat"]
    ref = run_hmmer(HMMSEARCH, tmp_path, args)
    assert b"Q00" in ref[1]["tblout"]   # the accession column is filled
    for backend in ("hmmer", "numba"):
        assert_same_run(run_hmmgpu(tmp_path, ["search", "--backend", backend, *args], capsys), ref)


def test_description_bytes_that_are_not_utf8(tmp_path, capsys):
    data = PROTEOME.read_bytes().replace(b" # ", b" \xe9\xff # ")
    (tmp_path / "latin1.fa").write_bytes(data)
    args = [str(SAMPLES / "samples.hmm"), "latin1.fa"]
    ref = run_hmmer(HMMSEARCH, tmp_path, args)
    assert_same_run(run_hmmgpu(tmp_path, ["search", "--backend", "numba", *args], capsys), ref)


SCANS = [[], ["--acc", "-E", "1e-3", "--notextw"], ["--noali", "-T", "5", "--cpu", "0"]]


@pytest.mark.parametrize("args", SCANS, ids=["default", "acc_E_notextw", "noali_T_cpu0"])
def test_scan_equals_hmmscan(tmp_path, capsys, args):
    models = pressed(tmp_path, (SAMPLES / "samples.hmm").read_bytes())
    seqs = first_sequences(tmp_path, 400)
    ref = run_hmmer(HMMSCAN, tmp_path, [*args, str(models), str(seqs)])
    gz = tmp_path / "models.hmm.gz"
    gz.write_bytes(gzip.compress((SAMPLES / "samples.hmm").read_bytes()))
    assert_same_run(run_hmmgpu(tmp_path, ["scan", *args, str(models), str(seqs)], capsys), ref)
    ours = run_hmmgpu(tmp_path, ["scan", *args, str(gz), str(seqs)], capsys)
    assert_same_run((ours[0].replace(str(gz).encode(), str(models).encode()), ours[1]), ref)


# ---------------------------------------------------------------- bad input: one line, exit 1


def one_line_error(capsys, argv, *fragments):
    assert main(argv) == ERROR_STATUS
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("hmmgpu: error: ")]
    assert len(errors) == 1 and "Traceback" not in "\n".join(err), err
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]


HMM, DB = str(SAMPLES / "PF02826.hmm"), str(PROTEOME)
BAD_OPTIONS = {
    "E_negative": (["-E", "-1"], "-E must be > 0"),
    "E_zero": (["-E", "0"], "-E must be > 0"),
    "Z_zero": (["-Z", "0"], "-Z must be > 0"),
    "Z_negative": (["-Z", "-5"], "-Z must be > 0"),
    "domZ_zero": (["--domZ", "0"], "--domZ must be > 0"),
    "E_word": (["-E", "ten"], "-E: invalid real value: 'ten'"),
    "textw_small": (["--textw", "100"], "--textw must be >= 120"),
    "E_and_T": (["-E", "1", "-T", "20"], "-E", "-T"),
    "cut_ga_and_E": (["--cut_ga", "-E", "1"], "--cut_ga", "-E"),
    "max_and_F1": (["--max", "--F1", "0.1"], "--max", "--F1"),
    "textw_and_notextw": (["--textw", "150", "--notextw"], "--textw", "--notextw"),
    "unknown_option": (["--bogus"], "unrecognized arguments: --bogus"),
    "bad_tformat": (["--tformat", "fastq"], "fastq is not a recognized sequence database file format"),
    "cpu_negative": (["--cpu", "-1"], "--cpu must be >= 0"),
}


def test_both_inputs_from_standard_input(capsys):
    one_line_error(capsys, ["search", "-", "-"], "not both")
    one_line_error(capsys, ["scan", "-", "-"], "not both")


@pytest.mark.parametrize("case", sorted(BAD_OPTIONS))
def test_bad_options(capsys, case):
    args, *fragments = BAD_OPTIONS[case]
    one_line_error(capsys, ["search", *args, HMM, DB], *fragments)
    if case != "bad_tformat":
        one_line_error(capsys, ["scan", *args, HMM, DB], *fragments)


@pytest.mark.parametrize("args", [["-T", "-inf"], ["-T", "-1000", "--domT", "-1e3"], ["--incT", "-Infinity"]],
                         ids=["T_inf", "T_1000_domT", "incT_inf"])
def test_negative_thresholds_equal_hmmsearch(tmp_path, capsys, args):
    """Negative numbers (``-inf`` and exponents too) are option values, as Easel reads them."""
    ref = run_hmmer(HMMSEARCH, tmp_path, [*args, HMM, DB])
    ours = run_hmmgpu(tmp_path, ["search", *args, HMM, DB], capsys)
    assert_same_run(ours, ref)


def test_cpu_zero_is_accepted(tmp_path, capsys):
    assert main(["search", "--cpu", "0", "-o", str(tmp_path / "r"), HMM, DB]) == 0


def test_nan_model_is_an_error_on_every_backend(tmp_path, capsys):
    text = (SAMPLES / "PF02826.hmm").read_text().replace("2.82670", "nan", 1)
    path = tmp_path / "nan.hmm"
    path.write_text(text)
    for backend in ("hmmer", "numba"):
        one_line_error(capsys, ["search", "--backend", backend, str(path), DB], "nan", "model 1 (2-Hacid_dh_C)")


def test_failed_run_leaves_existing_outputs(tmp_path, capsys):
    """A model that fails after others were searched: earlier outputs stay as they were."""
    bad = (SAMPLES / "samples.hmm").read_text()
    cut = bad.index("HMMER3", 10)
    bad = bad[:cut] + bad[cut:].replace("-10.", "nan", 1)   # a STATS line of the third model
    path = tmp_path / "bad.hmm"
    path.write_text(bad)
    outputs = {name: tmp_path / name for name in ("r.txt", "t.tbl", "d.tbl", "p.tbl", "a.sto")}
    for p in outputs.values():
        p.write_bytes(b"yesterday's results\n")
    one_line_error(capsys, ["search", "-o", str(outputs["r.txt"]), "--tblout", str(outputs["t.tbl"]),
                            "--domtblout", str(outputs["d.tbl"]), "--pfamtblout", str(outputs["p.tbl"]),
                            "-A", str(outputs["a.sto"]), str(path), DB], "model 3 (Thioesterase)")
    assert all(p.read_bytes() == b"yesterday's results\n" for p in outputs.values())
    assert sorted(os.listdir(tmp_path)) == sorted(["bad.hmm", *outputs])


def test_edited_made_database_is_refused(tmp_path, capsys):
    SequenceDB.from_fasta(PROTEOME).save(tmp_path / "made")
    lengths = np.load(tmp_path / "made" / "lengths.npy")
    lengths[[3, 4]] = lengths[[4, 3]]
    np.save(tmp_path / "made" / "lengths.npy", lengths)
    one_line_error(capsys, ["search", HMM, str(tmp_path / "made")], "damaged database")
    one_line_error(capsys, ["makedb", "--check", str(tmp_path / "made")], "damaged database")


def test_makedb_check(tmp_path, capsys):
    assert main(["makedb", DB, str(tmp_path / "made")]) == 0
    assert main(["makedb", "--check", str(tmp_path / "made")]) == 0
    assert "every checksum verified" in capsys.readouterr().out
    one_line_error(capsys, ["makedb", "--check", str(tmp_path / "made"), DB], "takes no other argument")
    one_line_error(capsys, ["makedb", DB], "needs a sequence file and an output directory")


def test_errors_from_a_real_process(tmp_path):
    done = subprocess.run([sys.executable, "-m", "hmmgpu", "scan", "-E", "0", HMM, DB], capture_output=True,
                          text=True, cwd=ROOT)
    assert done.returncode == 1 and done.stderr.strip() == "hmmgpu: error: -E must be > 0 (got 0)"


def test_no_progress_bar_when_stderr_is_not_a_terminal(tmp_path):
    done = subprocess.run([sys.executable, "-m", "hmmgpu", "search", "-o", os.devnull, HMM, DB],
                          capture_output=True, cwd=ROOT)
    assert done.returncode == 0
    lines = done.stderr.splitlines()
    assert all(line.startswith(b"# hmmgpu") for line in lines), done.stderr
    assert b"\x1b" not in done.stderr
    said = lines[0].split(b": ", 1)[1]  # the backend, said once: it did not change during the search
    assert said.startswith(b"backend ") and sum(said in line for line in lines) == 1, done.stderr


def test_pipeline_filter_without_gpu(monkeypatch):
    """The README's hmmgpu.Pipeline(...).filter(hmm), on a machine without a GPU."""
    monkeypatch.setenv("HMMGPU_NO_GPU", "1")
    with HMMFile(SAMPLES / "PF02826.hmm") as f:
        hmm = f.read()
    with hmmgpu.Pipeline(str(PROTEOME)) as pipeline:
        survivors = pipeline.filter(hmm)
    assert pipeline.counts.n_past_vit == len(survivors) == 48
    amino = Alphabet.amino()
    with SequenceFile(str(PROTEOME), digital=True, alphabet=amino) as fh:
        everything = fh.read_block()
    finished = PyhmmerPipeline(amino, Z=len(everything)).search_hmm(hmm, survivors)
    full = PyhmmerPipeline(amino).search_hmm(hmm, everything)
    assert [(h.name, h.score, h.evalue) for h in finished if h.reported] == \
        [(h.name, h.score, h.evalue) for h in full if h.reported]


@pytest.fixture(scope="module")
def real_inputs(shared_data, tmp_path_factory):
    return real_pfam_inputs(shared_data, tmp_path_factory.mktemp("real"))


@pytest.mark.parametrize("backend", ["numba", "hmmer"])
def test_real_pfam_search_equals_hmmsearch(tmp_path, capsys, real_inputs, backend):
    """Real Pfam models (one with an RF line) and 3,000 public proteins, through the engine."""
    models, proteins = real_inputs
    args = ["-A", "ali.sto", str(models), str(proteins)]
    ref = run_hmmer(HMMSEARCH, tmp_path, args)
    assert_same_run(run_hmmgpu(tmp_path, ["search", "--backend", backend, *args], capsys), ref)


def test_the_gpu_process_starts_before_numpy_is_imported():
    """What ``hmmgpu search`` needs to start the GPU process early (the backend choice and the
    process itself) imports neither numpy nor pyhmmer, so that the child's start-up overlaps
    the parent's imports."""
    code = ("import sys; from hmmgpu.search.routing import start_gpu_early, residues_estimate, cpu_route_before_reading; "
            "from hmmgpu.gpu.process import CudaProcessBackend; from hmmgpu.formats.hmmfile import model_lengths; "
            f"assert residues_estimate({str(PROTEOME)!r}, sample=True) > 0; assert model_lengths({str(SAMPLES / 'samples.hmm')!r}); "
            "print(sorted(m for m in ('numpy', 'pyhmmer', 'numba') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_gpu_process_started_early_is_stopped_when_the_search_cannot_go_on(monkeypatch, tmp_path, capsys):
    """The GPU process started before the imports is stopped (not left running) when an output
    cannot be opened or the database cannot be read, and the error is one line."""
    from hmmgpu.search import routing as backends

    class Early:
        closed = []

        def close(self, wait=True):
            Early.closed.append(wait)

    monkeypatch.setattr(backends, "start_gpu_early", lambda *a: Early())
    bad_fasta = tmp_path / "bad.fa"
    bad_fasta.write_bytes(b"no header line\n")
    for args in (["--tblout", str(tmp_path / "missing" / "t.tbl"), str(SAMPLES / "samples.hmm"), str(PROTEOME)],
                 ["-o", os.devnull, str(SAMPLES / "samples.hmm"), str(bad_fasta)]):
        Early.closed.clear()
        assert main(["search", "--backend", "cuda", *args]) != 0
        assert Early.closed == [False], args
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("hmmgpu: error:"), err


def test_warmup_writes_bytecode_that_python_reads_where_it_may_not_write(monkeypatch, tmp_path, capsys):
    """`hmmgpu warmup` writes the compiled bytecode of the packages a search imports (here a
    package of its own), which a process under PYTHONDONTWRITEBYTECODE then runs from, and
    loads the own post-filter's CPU references; without a GPU it says so in one line and
    exits 1, the bytecode written."""
    import importlib.util

    from hmmgpu import bytecode
    from hmmgpu.search import routing as backends

    package = tmp_path / "warm_probe"
    package.mkdir()
    (package / "__init__.py").write_text("from .inner import VALUE\n")
    (package / "inner.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(bytecode, "SEARCH_IMPORTS", ("warm_probe", "no_such_package_here"))
    monkeypatch.setattr(backends, "cuda_available", lambda device=0: False)
    monkeypatch.setattr(sys, "pycache_prefix", None)
    sources = bytecode.search_import_sources()
    assert str(package) in sources
    assert not {"_pytest", "hypothesis"} & {os.path.basename(s) for s in sources}
    code = main(["warmup"])
    out, err = capsys.readouterr()
    assert code == ERROR_STATUS
    assert out.startswith("hmmgpu: Python bytecode of ") and "packages and modules up to date" in out
    assert "hmmgpu: --postfilter hmmgpu's CPU references compiled or loaded from numba's cache in " in out
    assert err.strip().splitlines() == ["hmmgpu: error: warmup: no usable CUDA GPU with id 0 (the Python bytecode "
                                        "is written; no GPU kernel was compiled)"]
    cached = [importlib.util.cache_from_source(str(package / name)) for name in ("__init__.py", "inner.py")]
    assert all(os.path.exists(path) for path in cached)
    # a process that may not write bytecode runs the cached one: a source changed behind its back
    # (same size and time stamp, which is what the cache is checked against) still gives 42
    source = package / "inner.py"
    stamp = source.stat()
    source.write_text("VALUE = 43\n")
    os.utime(source, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    run = subprocess.run([sys.executable, "-c", "import warm_probe; print(warm_probe.VALUE)"], cwd=tmp_path,
                         env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"), capture_output=True, text=True)
    assert run.stdout.strip() == "42", run.stderr
    # a package in a directory this user cannot write is named, not written, and not an error
    writable = os.access
    monkeypatch.setattr(bytecode.os, "access", lambda path, mode: "warm_probe" not in str(path) and writable(path, mode))
    assert main(["warmup"]) == ERROR_STATUS
    out = capsys.readouterr().out
    assert f"1 in directories this user cannot write (the first: {package})" in out




def test_auto_searches_a_few_small_models_piece_by_piece(tmp_path, capsys, monkeypatch):
    """With fewer models than threads and work that the file's size already puts on pyhmmer's
    route, ``auto`` does not read the file first: it is cut into pieces that pyhmmer reads in
    every thread, as with ``--backend hmmer``; the report and tables are hmmsearch's. (As on a
    machine of 8 cores: ``--cpu`` above the cores is capped to them.)"""
    monkeypatch.setattr("hmmgpu.preflight.usable_cores", lambda: 8)
    args = ["--cpu", "8", str(SAMPLES / "samples.hmm"), str(PROTEOME)]
    ref = run_hmmer(HMMSEARCH, tmp_path, args)
    ours = run_hmmgpu(tmp_path, ["search", *args], capsys)
    err = capsys.readouterr().err
    assert "backend hmmer (pyhmmer on the CPU): the models are small against this database" in err
    assert "database cut into pieces" in err
    assert_same_run(ours, ref)
