"""hmmscan mode: tables and report equal HMMER 3.4's hmmscan; model subsets give the full scan's result."""
import gzip
import io
import random
import re
import shutil
import subprocess

import pytest

import hmmgpu.search.scan as scan_module
from hmmgpu.errors import HmmgpuError
from hmmgpu.host import flush_to_zero
from hmmgpu.report.hitlist import read_tophits
from hmmgpu.options import SearchOptions
from hmmgpu.report.text import REPORT_END, Query, program_header, query_report
from hmmgpu.cpu.backends import NumbaBackend
from hmmgpu.cli import main
from hmmgpu.search.scan import CascadeNarrowing, ProfileDatabase, Survivors, scan, scan_sequence
from hmmgpu.formats.seqdb import SequenceDB
from tests.helpers import PROTEOME, SAMPLES
from tests.report.test_report import assert_same_report, parse

HMMSCAN, HMMPRESS = shutil.which("hmmscan"), shutil.which("hmmpress")
pytestmark = pytest.mark.skipif(HMMSCAN is None or HMMPRESS is None,
                                reason="hmmscan (pip package 'hmmer') not installed")
TABLES = {"tblout": "targets", "domtblout": "domains", "pfamtblout": "pfam"}


def pressed(tmp_path, text: bytes, name="models.hmm"):
    path = tmp_path / name
    path.write_bytes(text)
    subprocess.run([HMMPRESS, "-f", str(path)], check=True, capture_output=True)
    return path


def query_of(db, i):
    return Query(name=db.name(i), accession=db.accession(i) or None, description=db.description(i) or None,
                 length=int(db.lengths[i]))


def hmmgpu_scan(models, seqfile, args, cpus=None, filters=False):
    """hmmgpu's scan report and tables (bytes, without the tables' '#' tail); ``filters``:
    narrowed by hmmgpu's filter cascade (numba backend), as the GPU narrows it."""
    search, report, settings = parse(args, "scan")
    search = search.replace(cpus=cpus)
    db = SequenceDB.from_fasta(seqfile)
    narrowing = CascadeNarrowing(db, NumbaBackend(db), search) if filters else None
    database = ProfileDatabase.read(models, each=narrowing.add if filters else None)
    narrow = narrowing.survivors().__getitem__ if filters else None
    settings.update({"-o": "ref.out", **{f"--{kind}": f"ref.{kind}" for kind in TABLES}})
    out = io.BytesIO(program_header("scan", str(seqfile), str(models), settings))
    out.seek(0, 2)
    tables = {kind: io.BytesIO() for kind in TABLES}
    for i, hits in scan(db, database, search, narrow=narrow):
        with flush_to_zero():
            out.write(query_report(query_of(db, i), hits, report))
            for kind, buf in tables.items():
                hits.write(buf, format=TABLES[kind], header=(i == 0))
    out.write(REPORT_END)
    return out.getvalue(), {k: v.getvalue() for k, v in tables.items()}


def hmmscan_run(tmp_path, models, seqfile, args):
    tables = {kind: tmp_path / f"ref.{kind}" for kind in TABLES}
    flags = [x for kind in TABLES for x in (f"--{kind}", f"ref.{kind}")]
    subprocess.run([HMMSCAN, "--cpu", "0", "-o", "ref.out", *flags, *args, str(models), str(seqfile)],
                   check=True, cwd=tmp_path)
    return (tmp_path / "ref.out").read_bytes(), {k: without_tail(p.read_bytes()) for k, p in tables.items()}


def without_tail(table: bytes) -> bytes:
    """A table less the '#' lines p7_tophits_TabularTail() appends."""
    return table[:table.rindex(b"#\n# Program:")]


def first_sequences(tmp_path, n, source=PROTEOME):
    data = source.read_bytes()
    records = data.split(b"\n>")[:n]
    path = tmp_path / f"first{n}.fa"
    path.write_bytes(b"\n>".join(records) + b"\n")
    return path


def assert_same_scan(ours, ref):
    report, tables = ours
    ref_report, ref_tables = ref
    assert_same_report(report, ref_report)
    for kind in TABLES:
        assert tables[kind] == ref_tables[kind], kind


SCAN_OPTIONS = [
    ("default", []),
    ("E_domE", ["-E", "1e-3", "--domE", "1e-2", "--incE", "1e-8"]),
    ("Z_T", ["-Z", "1000", "-T", "5", "--domT", "2"]),
    ("acc_noali", ["--acc", "--noali"]),
    ("notextw_nonull2", ["--notextw", "--nonull2"]),
    ("textw_nobias", ["--textw", "150", "--nobias", "--F1", "0.1"]),
]


@pytest.mark.parametrize("filters", [False, True], ids=["pyhmmer", "hmmgpu-filters"])
@pytest.mark.parametrize("label,args", SCAN_OPTIONS, ids=[o[0] for o in SCAN_OPTIONS])
def test_scan_equals_hmmscan(tmp_path, label, args, filters):
    """pyhmmer's hmmscan pipeline over every model, or over the models that pass hmmgpu's
    filter cascade for each sequence (with the cascade's counters): hmmscan's output."""
    models = pressed(tmp_path, (SAMPLES / "samples.hmm").read_bytes())
    seqs = first_sequences(tmp_path, 700)
    assert_same_scan(hmmgpu_scan(models, seqs, args, filters=filters), hmmscan_run(tmp_path, models, seqs, args))


def test_scan_command_with_filter_cascade(tmp_path):
    """`hmmgpu scan --backend numba` narrows each sequence's models by the filter cascade."""
    models = pressed(tmp_path, (SAMPLES / "samples.hmm").read_bytes())
    seqs = first_sequences(tmp_path, 300)
    _, ref_tables = hmmscan_run(tmp_path, models, seqs, [])
    argv = ["scan", "--backend", "numba", "-o", str(tmp_path / "ours.out")]
    for kind in TABLES:
        argv += [f"--{kind}", str(tmp_path / f"ours.{kind}")]
    assert main(argv + [str(models), str(seqs)]) == 0
    for kind in TABLES:
        assert without_tail((tmp_path / f"ours.{kind}").read_bytes()) == ref_tables[kind], kind


@pytest.mark.parametrize("kind", ["plain", "gzip"])
def test_unpressed_models_give_hmmscans_result(tmp_path, kind):
    text = (SAMPLES / "samples.hmm").read_bytes()
    source = tmp_path / ("m.hmm" if kind == "plain" else "m.hmm.gz")
    source.write_bytes(text if kind == "plain" else gzip.compress(text))
    models = pressed(tmp_path, text, name="pressed.hmm")
    seqs = first_sequences(tmp_path, 300)
    ours = hmmgpu_scan(source, seqs, [], cpus=0)
    ref = hmmscan_run(tmp_path, models, seqs, [])
    assert_same_scan((ours[0].replace(str(source).encode(), str(models).encode()), ours[1]), ref)


def test_max_sensitivity_on_a_few_sequences(tmp_path):
    models = pressed(tmp_path, (SAMPLES / "samples.hmm").read_bytes())
    seqs = first_sequences(tmp_path, 25)
    assert_same_scan(hmmgpu_scan(models, seqs, ["--max"]), hmmscan_run(tmp_path, models, seqs, ["--max"]))


def test_cut_ga_and_a_model_without_ga(tmp_path):
    """Like hmmscan: an error once a model without GA lines reaches the domain stage."""
    models = pressed(tmp_path, (SAMPLES / "samples.hmm").read_bytes())
    seqs = first_sequences(tmp_path, 12)   # the 10th protein has a KR domain; KR has no GA line
    ref = subprocess.run([HMMSCAN, "--cpu", "0", "--cut_ga", str(models), str(seqs)], capture_output=True, text=True)
    assert ref.returncode != 0 and "GA bit thresholds unavailable on model KR" in ref.stdout + ref.stderr
    database, db = ProfileDatabase.read(models), SequenceDB.from_fasta(seqs)
    scan_sequence(db.digital_sequence(0), database, SearchOptions(bit_cutoffs="gathering"))
    with pytest.raises(HmmgpuError, match="model 'KR' has no GA line, needed by --cut_ga"):
        scan_sequence(db.digital_sequence(9), database, SearchOptions(bit_cutoffs="gathering"))


def tables_of(hits) -> bytes:
    buf = io.BytesIO()
    hits.write(buf, format="domains")
    return buf.getvalue()


def check_subsets(db, database, options, fraction, seed, count):
    """Random supersets of each sequence's hitting models give the full scan's hits;
    return how many hits the position rule dropped."""
    dropped = []
    combine = scan_module._combine

    def spy(sequence, parts, *rest):
        hits = combine(sequence, parts, *rest)
        dropped.append(sum(len(state["unsrt"]) for _, state in parts) - len(hits))
        return hits

    rng = random.Random(seed)
    scan_module._combine = spy
    try:
        for i in range(count):
            sequence = db.digital_sequence(i)
            full = scan_sequence(sequence, database, options)
            hit = {h.name.encode() for h in full}
            subset = [k for k, name in enumerate(database.names) if name in hit or rng.random() < fraction]
            part = scan_sequence(sequence, database, options, subset)
            assert tables_of(part) == tables_of(full) and len(part) == len(full)
            with flush_to_zero():
                a, b = query_report(query_of(db, i), part), query_report(query_of(db, i), full)
            assert a.split(b"Internal pipeline")[0] == b.split(b"Internal pipeline")[0]
    finally:
        scan_module._combine = combine
    return sum(dropped)


def test_subsets_give_the_full_scans_hits(tmp_path):
    text = (SAMPLES / "samples.hmm").read_bytes()
    # the same models twice (hmmpress would refuse the repeated names, hmmgpu reads them):
    # repeated names exercise the split into groups of distinct names
    doubled = tmp_path / "doubled.hmm"
    doubled.write_bytes(text + text.replace(b"NAME  KR", b"NAME  KR2"))
    database = ProfileDatabase.read(doubled)
    db = SequenceDB.from_fasta(first_sequences(tmp_path, 40))
    # with every filter off, weak hits abound; E = 0.5 puts some between P * (subset position + 1)
    # and P * (file position + 1), so that the position rule has hits to drop
    maximal = SearchOptions(F1=1.0, F2=1.0, F3=1.0, bias_filter=False, E=0.5)
    assert check_subsets(db, database, maximal, 0.5, 1, 40) > 0
    assert check_subsets(db, database, SearchOptions(), 0.2, 2, 40) == 0


def test_subset_accounting_and_filter_counts(tmp_path):
    database = ProfileDatabase.read(SAMPLES / "samples.hmm")
    db = SequenceDB.from_fasta(first_sequences(tmp_path, 5))
    sequence = db.digital_sequence(2)
    full = scan_sequence(sequence, database, SearchOptions())
    everything = scan_sequence(sequence, database, SearchOptions(), range(len(database)))
    assert read_tophits(full).accounting == read_tophits(everything).accounting
    none = scan_sequence(sequence, database, SearchOptions(), [], filter_counts={"n_past_msv": 3})
    state = none.__getstate__()["pipeline"]
    assert len(none) == 0 and state["nmodels"] == 4 and state["Z"] == 4.0 and state["n_past_msv"] == 3
    assert state["nnodes"] == sum(p.M for p in database.profiles)
    with pytest.raises(HmmgpuError, match="sorted"):
        scan_sequence(sequence, database, SearchOptions(), [2, 1])


def test_threads_keep_input_order(tmp_path):
    database = ProfileDatabase.read(SAMPLES / "samples.hmm")
    db = SequenceDB.from_fasta(first_sequences(tmp_path, 60))
    serial = [(i, tables_of(h)) for i, h in scan(db, database, SearchOptions.from_kwargs(cpus=0))]
    threaded = [(i, tables_of(h)) for i, h in scan(db, database, SearchOptions.from_kwargs(cpus=2))]
    assert serial == threaded and [i for i, _ in serial] == list(range(60))
    hitting = {i: [k for k, name in enumerate(database.names) if name in tables_of(h)] for i, h in enumerate(
        scan_sequence(db.digital_sequence(i), database) for i in range(60))}
    narrowed = [(i, tables_of(h)) for i, h in scan(db, database, SearchOptions.from_kwargs(cpus=2),
                                                   narrow=lambda i: Survivors(hitting[i]))]
    assert narrowed == serial


@pytest.fixture(scope="module")
def pfam_scan_inputs(shared_data, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pfamscan")
    text = b"".join(gzip.decompress(p.read_bytes()) for p in sorted((shared_data / "pfam").glob("*.hmm.gz")))
    models = pressed(tmp, text)
    with gzip.open(shared_data / "seqs" / "public_proteins.fa.gz", "rb") as fh:
        data = fh.read(400_000)
    seqs = tmp / "proteins.fa"
    seqs.write_bytes(data[:data.rindex(b"\n>") + 1])
    return models, seqs


@pytest.mark.parametrize("args", [["--cut_ga"], ["--acc", "-E", "1"]], ids=["cut_ga", "acc_E1"])
def test_real_pfam_scan_equals_hmmscan(tmp_path, pfam_scan_inputs, args):
    models, seqs = pfam_scan_inputs
    assert_same_scan(hmmgpu_scan(models, seqs, args), hmmscan_run(tmp_path, models, seqs, args))


def test_real_pfam_subsets(pfam_scan_inputs):
    models, seqs = pfam_scan_inputs
    database, db = ProfileDatabase.read(models), SequenceDB.from_fasta(seqs)
    check_subsets(db, database, SearchOptions(), 0.1, 3, 30)
    assert check_subsets(db, database, SearchOptions(F1=1.0, F2=1.0, F3=1.0, bias_filter=False, E=1), 0.3, 4, 6) > 0


def test_report_header_for_scan():
    header = program_header("scan", "q.fa", "db.hmm", {"-E": 0.001, "--cpu": 0, "--incT": 20.0, "--qformat": "fasta"})
    lines = header.decode().splitlines()
    assert lines[5:] == ["# query sequence file:             q.fa",
                         "# target HMM database:             db.hmm",
                         "# profile reporting threshold:     E-value <= 0.001",
                         "# profile inclusion threshold:     score >= 20",
                         "# input seqfile format asserted:   fasta",
                         "# multithread parallelization:     off",
                         "# - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -", ""]
    assert re.match(r"# hmmgpu scan :: search sequence\(s\) against a profile database", lines[0])
