"""`hmmgpu search`/`scan` as drop-ins for hmmsearch/hmmscan: argument order, pressed databases
by base name, sequence formats guessed as Easel guesses them, abbreviated options, exit status
and the ``--seed 0`` header, each beside HMMER 3.4's own program."""
import gzip
import math
import os
import shutil
import subprocess
import sys

import pytest

from hmmgpu.cli import ERROR_STATUS, easel_integer, easel_real, main
from tests.helpers import PROTEOME, ROOT, SAMPLES
from tests.search.test_scan import first_sequences, pressed, without_tail
from tests.report.test_report import assert_same_report
from tests.test_cli import HMMSCAN, HMMSEARCH, assert_same_run, one_line_error, run_hmmer, run_hmmgpu

HMMALIGN = shutil.which("hmmalign")
pytestmark = pytest.mark.skipif(HMMSEARCH is None or HMMSCAN is None or HMMALIGN is None,
                                reason="HMMER binaries (pip 'hmmer') missing")
MODEL = SAMPLES / "LuxC.hmm"


def _aligned(tmp_path, fmt: str, name: str):
    """The first 60 proteins aligned to LuxC by hmmalign, written in ``fmt`` to ``name``."""
    seqs = first_sequences(tmp_path, 60)
    path = tmp_path / name
    subprocess.run([HMMALIGN, "--outformat", fmt, "-o", str(path), str(MODEL), str(seqs)], check=True,
                   capture_output=True)
    return path


def _genbank(tmp_path):
    path = tmp_path / "proteins.gbk"
    path.write_text("LOCUS       seqA                      30 aa            linear   BCT 01-JAN-2000\n"
                    "DEFINITION  first protein.\nACCESSION   ACC00001\nVERSION     ACC00001.1\nORIGIN      \n"
                    "        1 mkvlaatlla gcaaaqavsp eeaktlaaaa\n//\n"
                    "LOCUS       seqB                      12 aa            linear   BCT 01-JAN-2000\n"
                    "DEFINITION  second.\nACCESSION   ACC00002\nORIGIN      \n        1 mkkllpqrst vw\n//\n")
    return path


@pytest.mark.parametrize("fmt,name", [("stockholm", "ali.sto"), ("pfam", "ali.pfam"), ("clustal", "ali.aln"),
                                      ("phylip", "ali.phy"), ("selex", "ali.slx"), ("psiblast", "ali.pb")])
def test_alignment_formats_are_guessed_as_hmmsearch_guesses_them(tmp_path, capsys, fmt, name):
    _aligned(tmp_path, fmt, name)
    ref = run_hmmer(HMMSEARCH, tmp_path, [str(MODEL), name])
    assert b"Target sequences:                         60 " in ref[0]
    assert_same_run(run_hmmgpu(tmp_path, ["search", "--backend", "hmmer", str(MODEL), name], capsys), ref)


def test_large_selex_file(tmp_path, capsys):
    """A SELEX file over pyhmmer's limit (about 4 MB: its reader fails or crashes there) is read
    as hmmsearch reads it, named or guessed, from the file or gzipped."""
    seqs = first_sequences(tmp_path, 1000)
    subprocess.run([HMMALIGN, "--outformat", "selex", "-o", str(tmp_path / "big.slx"), str(MODEL), str(seqs)],
                   check=True, capture_output=True)
    assert (tmp_path / "big.slx").stat().st_size > 5_000_000
    (tmp_path / "big.slx.gz").write_bytes(gzip.compress((tmp_path / "big.slx").read_bytes()))
    models = str(SAMPLES / "samples.hmm")
    for backend, args in (("hmmer", [models, "big.slx"]), ("numba", ["--tformat", "selex", models, "big.slx"])):
        ref = run_hmmer(HMMSEARCH, tmp_path, args)
        assert b"Target sequences:                       1000 " in ref[0]
        assert_same_run(run_hmmgpu(tmp_path, ["search", "--backend", backend, *args], capsys), ref)
    gzipped = run_hmmgpu(tmp_path, ["search", "--backend", "hmmer", "--tformat", "selex", models, "big.slx.gz"], capsys)
    for kind, table in gzipped[1].items():   # hmmsearch itself fails on it (Easel's SELEX reader on a stream)
        assert without_tail(table) == without_tail(ref[1][kind]), kind


def test_genbank_and_scan_queries_are_guessed(tmp_path, capsys):
    gbk = _genbank(tmp_path)
    ref = run_hmmer(HMMSEARCH, tmp_path, ["--acc", str(MODEL), gbk.name])
    assert_same_run(run_hmmgpu(tmp_path, ["search", "--acc", str(MODEL), gbk.name], capsys), ref)
    models = pressed(tmp_path, (SAMPLES / "samples.hmm").read_bytes())
    ali = _aligned(tmp_path, "stockholm", "queries.sto")
    ref = run_hmmer(HMMSCAN, tmp_path, [str(models), ali.name])
    assert_same_run(run_hmmgpu(tmp_path, ["scan", str(models), ali.name], capsys), ref)


@pytest.mark.parametrize("fmt", ["afa", "a2m"])
def test_aligned_fasta_is_fasta_unless_named(tmp_path, capsys, fmt):
    """Aligned FASTA (and A2M) is guessed to be FASTA, whose reader refuses its gaps (HMMER's
    i23-bad-fasta); ``--tformat afa`` (``a2m``) reads it."""
    path = _aligned(tmp_path, fmt, f"ali.{fmt}")
    assert subprocess.run([HMMSEARCH, str(MODEL), str(path)], capture_output=True).returncode == 1
    one_line_error(capsys, ["search", str(MODEL), str(path)], "invalid character '-'")
    ref = run_hmmer(HMMSEARCH, tmp_path, ["--tformat", fmt, str(MODEL), path.name])
    assert_same_run(run_hmmgpu(tmp_path, ["search", "--tformat", fmt, str(MODEL), path.name], capsys), ref)


def test_ncbi_blast_database(tmp_path, capsys):
    """``--tformat ncbi`` reads a BLAST database by its base name (HMMER's 20aa-alitest)."""
    data = SAMPLES.parent / "tests" / "data" / "hmmer_testsuite" / "testsuite"
    for suffix in ("pin", "phr", "psq"):
        shutil.copy(data / f"20aa-alitest.{suffix}", tmp_path)
    args = ["--tformat", "ncbi", str(data / "20aa.hmm"), "20aa-alitest"]
    ref = run_hmmer(HMMSEARCH, tmp_path, args)
    assert b"Target sequences:                          4 " in ref[0]
    assert_same_run(run_hmmgpu(tmp_path, ["search", *args], capsys), ref)
    one_line_error(capsys, ["search", "--tformat", "ncbi", str(data / "20aa.hmm"), str(tmp_path / "none")],
                   "no NCBI BLAST protein database of this name")
    one_line_error(capsys, ["search", "--tformat", "ncbi", str(data / "20aa.hmm"), "-"], "standard input")


def test_unrecognized_format(tmp_path, capsys):
    path = tmp_path / "notes.txt"
    path.write_text("some notes\n>not first\nACDE\n")
    assert subprocess.run([HMMSEARCH, str(MODEL), str(path)], capture_output=True).returncode == 1
    one_line_error(capsys, ["search", str(MODEL), str(path)], "unrecognized sequence file format",
                   "line 1 starts with 'some notes'", "--tformat")


def test_scan_finds_a_pressed_database_by_its_base_name(tmp_path, capsys):
    models = pressed(tmp_path, (SAMPLES / "samples.hmm").read_bytes())
    seqs = first_sequences(tmp_path, 50)
    ref = run_hmmer(HMMSCAN, tmp_path, [str(models), str(seqs)])
    models.unlink()   # only the files hmmpress wrote are left
    assert_same_run(run_hmmgpu(tmp_path, ["scan", str(models), str(seqs)], capsys), ref)
    (tmp_path / "models.hmm.h3f").unlink()
    one_line_error(capsys, ["scan", str(models), str(seqs)], "models.hmm.h3f: no such file")


def test_scan_arguments_in_the_old_order(tmp_path, capsys):
    one_line_error(capsys, ["scan", str(PROTEOME), str(MODEL)], "look swapped", "hmmgpu scan [options] hmmdb seqfile")


@pytest.mark.parametrize("abbreviation", ["--noal", "--nob", "--m", "--cut_g", "--incdomE"])
def test_abbreviated_long_options(tmp_path, capsys, abbreviation):
    value = ["0.001"] if abbreviation == "--incdomE" else []
    ref = run_hmmer(HMMSEARCH, tmp_path, [abbreviation, *value, str(MODEL), str(PROTEOME)])
    assert_same_run(run_hmmgpu(tmp_path, ["search", abbreviation, *value, str(MODEL), str(PROTEOME)], capsys), ref)


def test_abbreviated_table_option(tmp_path, capsys):
    subprocess.run([HMMSEARCH, "-o", "/dev/null", "--domtbl", "ref.dtbl", str(MODEL), str(PROTEOME)], cwd=tmp_path,
                   check=True)
    assert main(["search", "-o", "/dev/null", "--domtbl", str(tmp_path / "our.dtbl"), str(MODEL), str(PROTEOME)]) == 0
    assert without_tail((tmp_path / "our.dtbl").read_bytes()) == without_tail((tmp_path / "ref.dtbl").read_bytes())


@pytest.mark.parametrize("argv,said", [(["--inc", "1"], "ambiguous option: --inc could match"),
                                       (["-E", "1", "-E", "2"], "option -E has already been set"),
                                       (["--max", "--ma"], "option --max has already been set"),
                                       (["--r", "1"], "ambiguous option: --r could match"),
                                       (["--nonsense"], "unrecognized arguments: --nonsense"),
                                       (["--ssifile", "x"], "--ssifile (an hmmsearch option) is not supported"),
                                       (["--tblout", "-"], "Arg looks like option? Use --tblout=- if you really"),
                                       (["--domtbl", "-x"], "Arg looks like option? Use --domtblout=-x if you"),
                                       (["-o", "-"], "Arg looks like option? Use -o- if you really mean it."),
                                       (["-A", "--noali"], "Arg looks like option? Use -A--noali if you")])
def test_bad_options_exit_as_hmmsearch_exits(capsys, argv, said):
    done = subprocess.run([HMMSEARCH, *argv, str(MODEL), str(PROTEOME)], capture_output=True)
    expected = 0 if argv[0] == "--ssifile" else 1   # hmmsearch takes --ssifile alone and ignores it
    assert done.returncode == expected and ERROR_STATUS == 1
    if "Arg looks like option" in said:
        assert said.encode() in done.stdout + done.stderr
    one_line_error(capsys, ["search", *argv, str(MODEL), str(PROTEOME)], said)


@pytest.mark.parametrize("read,text,value", [
    # integers: strtol in base 10, then atoi's C int (what hmmsearch's --seed, --cpu and --textw get)
    *((easel_integer, text, value) for text, value in [
        ("42", 42), (" 7 ", 7), ("+7", 7), ("4294967301", 5), ("4294967296", 0), ("2147483648", -2147483648),
        ("99999999999999999999999", -1), ("-99999999999999999999", 0)]),
    # reals: strtod
    *((easel_real, text, value) for text, value in [
        ("1e-5", 1e-5), ("0x1p-3", 0.125), ("-0x1.8p1", -3.0), (" .5 ", 0.5), ("5.", 5.0), ("-Infinity", -math.inf),
        ("1e400", math.inf)]),
    # what neither takes (None)
    *((easel_integer, text, None) for text in ["1_0", "1.5", "0x10", "", "seven"]),
    *((easel_real, text, None) for text in ["1_000", "0x", "1e", "e5", "1.5x"]),
])
def test_numbers_read_as_easel_reads_them(read, text, value):
    if value is None:
        with pytest.raises(ValueError):
            read(text)
    else:
        assert read(text) == value


@pytest.mark.parametrize("argv", [["--seed", "4294967301"], ["--textw", "4294967416"], ["-E", "0x1p-3"],
                                  ["-T", "-0x1p3"]])
def test_numbers_beyond_python_s_reading_equal_hmmsearch(tmp_path, capsys, argv):
    """A seed of 2^32 + 5 is seed 5 for hmmsearch, a width of 2^32 + 120 is 120, and hexadecimal
    reals are reals: hmmgpu had taken the first two as Python integers (the seed failing in
    pyhmmer with a traceback from 2^32 up) and refused the last two."""
    ref = run_hmmer(HMMSEARCH, tmp_path, [*argv, str(MODEL), str(PROTEOME)])
    assert_same_run(run_hmmgpu(tmp_path, ["search", "--backend", "numba", *argv, str(MODEL), str(PROTEOME)], capsys), ref)


def test_seeds_hmmsearch_refuses(capsys):
    for seed in ("2147483648", "4294967295"):
        assert subprocess.run([HMMSEARCH, "--seed", seed, str(MODEL), str(PROTEOME)], capture_output=True).returncode == 1
        one_line_error(capsys, ["search", "--seed", seed, str(MODEL), str(PROTEOME)], "--seed must be >= 0 (got -")


def test_a_file_named_dash_as_hmmsearch_names_it(tmp_path):
    """``--tblout=-`` and ``-o-`` write files named ``-``, as in hmmsearch; ``-T -5`` is a number."""
    for flag in ("--tblout=-", "-o-"):
        ref = subprocess.run([HMMSEARCH, flag, "-T", "-5", str(MODEL), str(PROTEOME)], cwd=tmp_path, capture_output=True)
        assert ref.returncode == 0
        theirs = (tmp_path / "-").read_bytes()
        (tmp_path / "-").unlink()
        os.chdir(tmp_path)
        try:
            assert main(["search", "--backend", "hmmer", flag, "-T", "-5", str(MODEL), str(PROTEOME)]) == 0
        finally:
            os.chdir(ROOT)
        ours = (tmp_path / "-").read_bytes()
        if flag == "-o-":
            assert_same_report(ours, theirs)
        else:
            assert without_tail(ours) == without_tail(theirs)


def test_seed_zero_header(tmp_path, capsys):
    ref = run_hmmer(HMMSEARCH, tmp_path, ["--seed", "0", str(MODEL), str(PROTEOME)])
    assert b"# random number seed:              one-time arbitrary\n# random number seed set to:       0\n" in ref[0]
    assert_same_run(run_hmmgpu(tmp_path, ["search", "--seed", "0", str(MODEL), str(PROTEOME)], capsys), ref)


def test_streams_are_read_once(tmp_path):
    """Inputs that are pipes (bash's process substitution) are read once, by their reader:
    nothing looks at their first bytes beforehand (the format guess, the scan order check,
    the models' lengths, the file pieces), so the run sees them whole."""
    models = pressed(tmp_path, (SAMPLES / "samples.hmm").read_bytes())
    seqs = first_sequences(tmp_path, 60)
    run_hmmer(HMMSCAN, tmp_path, [str(models), str(seqs)])
    (tmp_path / "search").mkdir()
    run_hmmer(HMMSEARCH, tmp_path / "search", [str(SAMPLES / "samples.hmm"), str(seqs)])
    hmmgpu = f"PYTHONPATH={ROOT} {sys.executable} -m hmmgpu"
    for program, reference in (("scan", tmp_path), ("search", tmp_path / "search")):
        line = (f"{hmmgpu} {program} -o /dev/null --tblout {tmp_path / 'ours.tbl'} "
                f"<(cat {SAMPLES / 'samples.hmm'}) <(cat {seqs})")
        done = subprocess.run(["bash", "-c", line], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert without_tail((tmp_path / "ours.tbl").read_bytes()) == without_tail((reference / "ref.tblout").read_bytes())
    ali = _aligned(tmp_path, "stockholm", "ali.sto")
    done = subprocess.run(["bash", "-c", f"{hmmgpu} search {MODEL} <(cat {ali})"], capture_output=True, text=True)
    assert done.returncode == ERROR_STATUS and "unrecognized sequence file format" in done.stderr, done.stderr
