"""The readable report, the -A alignment and the tables' tail equal HMMER 3.4's hmmsearch, line by line.

hmmsearch (the pip package 'hmmer') runs side by side with hmmgpu's writer on the same inputs;
only the banner lines (program, version, licence) and the two timing lines may differ.
"""
import gzip
import io
import re
import shutil
import subprocess

import pytest
from pyhmmer.easel import Alphabet, SequenceFile
from pyhmmer.plan7 import Pipeline

from hmmgpu.host import flush_to_zero
from hmmgpu.report.hitlist import read_tophits
from hmmgpu.formats.hmmfile import read_models
from hmmgpu.options import ReportOptions, SearchOptions
from hmmgpu.report.text import (REPORT_END, Query, Stopwatch, alignment_note, header_settings, program_header, query_report, tabular_tail, write_alignment)
from tests.helpers import PROTEOME, SAMPLES

HMMSEARCH = shutil.which("hmmsearch")
pytestmark = pytest.mark.skipif(HMMSEARCH is None, reason="hmmsearch (pip package 'hmmer') not installed")
AMINO = Alphabet.amino()

# hmmsearch's options as this harness maps them onto SearchOptions / ReportOptions fields.
_VALUED = {"-E": "E", "-T": "T", "--domE": "domE", "--domT": "domT", "--incE": "incE", "--incT": "incT",
           "--incdomE": "incdomE", "--incdomT": "incdomT", "-Z": "Z", "--domZ": "domZ", "--F1": "F1", "--F2": "F2",
           "--F3": "F3"}
_SWITCHES = {"--nonull2": dict(null2=False), "--nobias": dict(bias_filter=False),
             "--cut_ga": dict(bit_cutoffs="gathering"),
             "--cut_tc": dict(bit_cutoffs="trusted"), "--max": dict(F1=1.0, F2=1.0, F3=1.0, bias_filter=False)}


def parse(args, program="search"):
    """(SearchOptions, ReportOptions, header settings) of an hmmsearch/hmmscan argument list."""
    search, report, given, i = {}, {}, {}, 0
    while i < len(args):
        flag = args[i]
        if flag in _VALUED:
            search[_VALUED[flag]] = float(args[i + 1])
            given[flag] = (args[i + 1], float(args[i + 1]))
            i += 2
        elif flag == "--textw":
            report["textw"] = int(args[i + 1])
            given[flag] = (args[i + 1], int(args[i + 1]))
            i += 2
        elif flag in _SWITCHES or flag in ("--acc", "--noali", "--notextw"):
            search.update(_SWITCHES.get(flag, {}))
            if flag in ("--acc", "--noali"):
                report[flag[2:]] = True
            if flag == "--notextw":
                report["textw"] = None
            given[flag] = ("", True)
            i += 1
        else:
            raise ValueError(flag)
    given["--cpu"] = ("0", 0)
    return SearchOptions.from_kwargs(**search), ReportOptions(**report), header_settings(program, given)


def hmmgpu_run(hmmfile, seqfile, args, alignment=None, output="ref.out"):
    """The report hmmgpu writes for a search of every model of hmmfile (pyhmmer's TopHits);
    the header names ``output`` as hmmsearch's ``-o`` file."""
    search, report, settings = parse(args)
    settings["-o"] = output
    if alignment:
        settings["-A"] = str(alignment)
    with SequenceFile(str(seqfile), digital=True, alphabet=AMINO) as fh:
        block = fh.read_block()
    out, ali = io.BytesIO(), io.BytesIO()
    out.write(program_header("search", str(hmmfile), str(seqfile), settings))
    for model in read_models(hmmfile):
        watch = Stopwatch().start()
        with flush_to_zero():
            hits = Pipeline(AMINO, **search.pipeline_kwargs()).search_hmm(model.hmm, block)
            text = query_report(Query.from_hmm(model.hmm), hits, report, watch.stop())
        out.write(text)
        if alignment:
            out.write(alignment_note(write_alignment(ali, hits, model.hmm, report.textw), str(alignment)))
    out.write(REPORT_END)
    if alignment:
        alignment.write_bytes(ali.getvalue())
    return out.getvalue()


def hmmsearch_run(tmp_path, hmmfile, seqfile, args, alignment=None):
    extra = ["-A", str(alignment)] if alignment else []
    subprocess.run([HMMSEARCH, "--cpu", "0", "-o", "ref.out", *extra, *args, str(hmmfile), str(seqfile)],
                   check=True, cwd=tmp_path)
    return (tmp_path / "ref.out").read_bytes()


_FREE = re.compile(rb"^# (CPU time|Mc/sec):")


def comparable(report: bytes) -> list[bytes]:
    """The report's lines less the four banner lines and the timing lines."""
    lines = report.split(b"\n")
    return [line for line in lines[4:] if not _FREE.match(line)]


def assert_same_report(ours: bytes, ref: bytes):
    a, b = comparable(ours), comparable(ref)
    for n, (x, y) in enumerate(zip(a, b)):
        assert x == y, f"line {n + 5}:\n ours: {x!r}\n ref:  {y!r}"
    assert len(a) == len(b)


OPTION_SETS = [
    ("default", "samples.hmm", []),
    ("acc", "samples.hmm", ["--acc"]),
    ("noali", "samples.hmm", ["--noali"]),
    ("textw150", "samples.hmm", ["--textw", "150"]),
    ("notextw", "samples.hmm", ["--notextw"]),
    ("E", "samples.hmm", ["-E", "1e-5"]),
    ("domE_incE", "samples.hmm", ["--domE", "1e-3", "--incE", "1e-10", "--incdomE", "1e-5"]),
    ("cut_ga", "LuxC.hmm", ["--cut_ga"]),
    ("Z", "samples.hmm", ["-Z", "1e6", "--domZ", "50"]),
    ("nonull2", "samples.hmm", ["--nonull2"]),
    ("bit_thresholds", "samples.hmm", ["-T", "20", "--domT", "15", "--incT", "30", "--incdomT", "25"]),
    ("max", "PF02826.hmm", ["--max"]),
    ("filters", "samples.hmm", ["--F1", "0.1", "--F2", "0.01", "--F3", "1e-4", "--nobias"]),
    ("no_hits", "PF02826.hmm", ["-E", "1e-300"]),
    ("no_domains", "samples.hmm", ["--domT", "1000"]),
]


@pytest.mark.parametrize("label,hmmfile,args", OPTION_SETS, ids=[o[0] for o in OPTION_SETS])
def test_report_equals_hmmsearch(tmp_path, label, hmmfile, args):
    ours = hmmgpu_run(SAMPLES / hmmfile, PROTEOME, args)
    assert_same_report(ours, hmmsearch_run(tmp_path, SAMPLES / hmmfile, PROTEOME, args))


@pytest.mark.parametrize("args", [[], ["--notextw"]], ids=["stockholm", "pfam"])
def test_alignment_file_equals_hmmsearch(tmp_path, args):
    ref_ali, our_ali = tmp_path / "ref.sto", tmp_path / "ours.sto"
    ref = hmmsearch_run(tmp_path, SAMPLES / "samples.hmm", PROTEOME, args, alignment=ref_ali)
    ours = hmmgpu_run(SAMPLES / "samples.hmm", PROTEOME, args, alignment=our_ali)
    ours = ours.replace(str(our_ali).encode(), str(ref_ali).encode())
    assert_same_report(ours, ref)
    author = re.compile(rb"^#=GF AU .*$", re.M)
    assert author.sub(b"", our_ali.read_bytes()) == author.sub(b"", ref_ali.read_bytes())
    assert b"#=GF AU hmmgpu" in our_ali.read_bytes()


def test_alignment_file_without_included_hits(tmp_path):
    note = hmmgpu_run(SAMPLES / "PF02826.hmm", PROTEOME, ["-E", "1e-300"], alignment=tmp_path / "a.sto")
    assert b"# No hits satisfy inclusion thresholds; no alignment saved\n" in note
    assert (tmp_path / "a.sto").read_bytes() == b""


def test_description_bytes_that_are_not_utf8(tmp_path):
    """hmmsearch prints a description's bytes as they are; so does the report (no decoding)."""
    records = PROTEOME.read_bytes().split(b"\n>")[:400]
    records = [r.replace(b" # ", b" \xff\xfe caf\xe9 # ", 1) if i % 3 == 0 else r for i, r in enumerate(records)]
    fasta = tmp_path / "latin1.fa"
    fasta.write_bytes(b"\n>".join(records) + b"\n")
    ours = hmmgpu_run(SAMPLES / "samples.hmm", fasta, [])
    assert b"\xff\xfe caf\xe9" in ours
    assert_same_report(ours, hmmsearch_run(tmp_path, SAMPLES / "samples.hmm", fasta, []))


def test_table_tail_lines_as_hmmsearch(tmp_path):
    table = tmp_path / "ref.tbl"
    subprocess.run([HMMSEARCH, "--cpu", "0", "-o", "/dev/null", "--tblout", str(table), str(SAMPLES / "KR.hmm"),
                    str(PROTEOME)], check=True)
    ref_tail = table.read_bytes().split(b"\n#\n")[-1].split(b"\n")
    ours = tabular_tail("search", str(SAMPLES / "KR.hmm"), str(PROTEOME), "hmmgpu search ...")
    assert ours.startswith(b"#\n") and ours.endswith(b"# [ok]\n")
    our_tail = ours[2:].split(b"\n")
    assert [line[:19] for line in our_tail] == [line[:19] for line in ref_tail]
    same = (b"# Pipeline mode:", b"# Query file:", b"# Target file:", b"# [ok]")
    assert [x for x in our_tail if x.startswith(same)] == [y for y in ref_tail if y.startswith(same)]
    assert tabular_tail("scan", "q.fa", "db.hmm", "x", table="domtblout").count(b"SCAN") == 1
    assert b"SEARCH" in tabular_tail("scan", "q.fa", "db.hmm", "x", table="pfamtblout")   # as hmmscan.c


def test_hitlist_reads_every_field():
    with SequenceFile(str(PROTEOME), digital=True, alphabet=AMINO) as fh:
        block = fh.read_block()
    model = next(read_models(SAMPLES / "PF02826.hmm"))
    hits = Pipeline(AMINO).search_hmm(model.hmm, block)
    hitlist = read_tophits(hits)
    assert len(hitlist.hits) == len(hits) and hitlist.nreported == len(hits.reported)
    for ours, theirs in zip(hitlist.hits, hits):
        assert ours.name == theirs.name.encode() and ours.score == theirs.score
        assert ours.included == theirs.included and len(ours.domains) == len(theirs.domains)
        for d, e in zip(ours.domains, theirs.domains):
            assert (d.ienv, d.jenv, d.bitscore) == (e.env_from, e.env_to, e.score)
            assert d.alignment.aseq.decode() == e.alignment.target_sequence
            assert d.alignment.pp.decode() == e.alignment.posterior_probabilities
    assert hitlist.accounting.nseqs == 2100 and hitlist.accounting.nnodes == model.hmm.M


REAL_MODELS = ["PF00001", "PF00005", "PF00096", "PF00400"]


def real_pfam_inputs(shared_data, tmp):
    """A few real Pfam models (PF00001 has an RF line) and the first 3,000 public proteins."""
    models = tmp / "models.hmm"
    models.write_bytes(b"".join(gzip.decompress((shared_data / "pfam" / f"{m}.hmm.gz").read_bytes())
                                for m in REAL_MODELS))
    with gzip.open(shared_data / "seqs" / "public_proteins.fa.gz", "rb") as fh:
        data = fh.read(3_000_000)
    proteins = tmp / "proteins.fa"
    proteins.write_bytes(data[:data.rindex(b"\n>") + 1])
    return models, proteins


@pytest.fixture(scope="module")
def real_inputs(shared_data, tmp_path_factory):
    return real_pfam_inputs(shared_data, tmp_path_factory.mktemp("real"))


@pytest.mark.parametrize("args", [[], ["--acc", "--notextw", "--cut_ga"]], ids=["default", "acc_notextw_cut_ga"])
def test_real_pfam_report_equals_hmmsearch(tmp_path, real_inputs, args):
    models, proteins = real_inputs
    assert_same_report(hmmgpu_run(models, proteins, args), hmmsearch_run(tmp_path, models, proteins, args))
