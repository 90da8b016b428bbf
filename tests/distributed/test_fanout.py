"""Many small models searched by worker processes (hmmgpu.distributed.processes) write exactly what the
engine in one process writes: every output file, the report, and the faults, in order."""
import re

import pytest

from hmmgpu.distributed import processes as fanout
from hmmgpu.search import routing
from hmmgpu.cpu.backends import HmmerBackend, NumbaBackend
from hmmgpu.cli import ERROR_STATUS, main
from hmmgpu.errors import HmmgpuError
from hmmgpu.options import ReportOptions, SearchOptions
from hmmgpu.report.outputs import QueryFormatter
from tests.helpers import PROTEOME, SAMPLES, failed_search, kill_on_start

OUTPUTS = ("-o", "--tblout", "--domtblout", "--pfamtblout", "-A")
#: lines that differ between two runs of one search: each query's timings, the tables' date, and
#: the header's --cpu (the runs differ in it)
_VARYING = re.compile(rb"^# (CPU time|Mc/sec|number of worker threads|Date:)")


def _steady(data: bytes) -> bytes:
    """``data`` without the lines that differ between two runs of one search (:data:`_VARYING`)."""
    return b"".join(line for line in data.splitlines(True) if not _VARYING.match(line))


@pytest.fixture
def processes_for_two_cpus(monkeypatch):
    """``--cpu 2`` takes worker processes on a sample-sized file (the defaults ask more)."""
    monkeypatch.setattr(routing, "MIN_PROCESSES", 2)
    monkeypatch.setattr(routing, "MIN_MODELS", 2)


def _models_file(tmp_path, copies=4, bad_model=None, truncated=False):
    """The four sample models written ``copies`` times; model ``bad_model`` (from 1) with a
    probability above 1; the last model without its closing ``//`` when ``truncated``."""
    records = [r + b"//\n" for r in (SAMPLES / "samples.hmm").read_bytes().split(b"//\n") if r.strip()] * copies
    if bad_model is not None:
        lines = records[bad_model - 1].split(b"\n")
        at = next(i for i, line in enumerate(lines) if line.split()[:1] == [b"1"])   # node 1's match line
        fields = lines[at].split()
        lines[at] = lines[at].replace(fields[1], b"-0.69315", 1)   # a probability of 2
        records[bad_model - 1] = b"\n".join(lines)
    text = b"".join(records)
    if truncated:
        text = text[:text.rindex(b"//\n")]
    path = tmp_path / f"models_{copies}_{bad_model}_{truncated}.hmm"
    path.write_bytes(text)
    return path


def _search(tmp_path, capsys, hmmfile, cpus, tag):
    (tmp_path / tag).mkdir()
    outputs = {flag: tmp_path / tag / flag.strip("-") for flag in OUTPUTS}
    argv = ["search", "--backend", "hmmer", "--cpu", str(cpus)]
    for flag, path in outputs.items():
        argv += [flag, str(path)]
    code = main(argv + [str(hmmfile), str(PROTEOME)])
    err = capsys.readouterr().err
    files = {flag: _steady(path.read_bytes())
             .replace(str(tmp_path / tag).encode(), b"DIR").replace(b"--cpu %d " % cpus, b"--cpu N ")
             for flag, path in outputs.items() if path.exists()}
    return code, err, files


def test_worker_processes_write_what_the_engine_writes(tmp_path, capsys, processes_for_two_cpus):
    """16 models on two worker processes against one thread of the engine: every output
    (report, three tables, -A alignment) equal byte for byte but the timing lines."""
    hmmfile = _models_file(tmp_path)
    code, err, ours = _search(tmp_path, capsys, hmmfile, 2, "processes")
    assert code == 0, err
    assert "2 worker processes of one thread (busy " in err and "queries 16," in err
    busy = float(re.search(r"of one thread \(busy ([0-9.]+) s, ([0-9]+)% of processes x wall", err).group(1))
    searched = float(re.search(r"workers ([0-9.]+) s", err).group(1))
    prepared = float(re.search(r"busy: prepare ([0-9.]+) s", err).group(1))
    assert 0 < searched + prepared <= busy   # the processes' busy time holds their parsing and searching
    code, err, engine = _search(tmp_path, capsys, hmmfile, 1, "engine")
    assert code == 0, err
    assert "worker processes" not in err
    assert set(ours) == set(engine) == set(OUTPUTS)
    for flag in OUTPUTS:
        assert ours[flag] == engine[flag], flag
    assert ours["--tblout"].count(b"\n") > 20 and ours["-A"].count(b"# STOCKHOLM") > 4


@pytest.mark.parametrize("fault", ["bad_model", "truncated"])
def test_a_fault_stops_the_worker_processes_where_the_engine_stops(tmp_path, capsys, processes_for_two_cpus, fault):
    """A model with a probability above 1 (the 11th of 16), or a file cut before its last
    ``//``: the same one-line error and exit status as the engine, no existing output file
    touched, and on standard output the report of every query before the fault."""
    hmmfile = _models_file(tmp_path, bad_model=11 if fault == "bad_model" else None, truncated=fault == "truncated")
    results = []
    for cpus in (2, 1):
        table = tmp_path / "kept.tbl"
        table.write_text("an older table\n")
        code = main(["search", "--backend", "hmmer", "--cpu", str(cpus), "--tblout", str(table), str(hmmfile),
                     str(PROTEOME)])
        out, err = capsys.readouterr()
        assert table.read_text() == "an older table\n"
        results.append((code, err.strip().splitlines()[-1], _steady(out.encode())))
    (code, said, report), engine = results
    assert code == ERROR_STATUS and said.startswith("hmmgpu: error:") and "Traceback" not in said
    assert ("model 11" in said) if fault == "bad_model" else ("truncated" in said)
    assert results[0] == engine
    assert report.count(b"\nQuery:  ") == (10 if fault == "bad_model" else 15)


def test_which_searches_take_worker_processes(tmp_path):
    """Pyhmmer's route, small models, enough threads and models, a database file: yes;
    otherwise the engine's threads."""
    class Db:
        pieces, total_residues = None, 1_000_000

    db = Db()
    options = SearchOptions.from_kwargs(backend="hmmer", cpus=16)
    hmmer = HmmerBackend(db)
    lengths = [200] * routing.MIN_MODELS

    def worker_processes(options, db, backend, lengths, database):
        return routing.SearchPlan(options, lengths).worker_processes(db, backend, database)
    assert worker_processes(options, db, hmmer, lengths, str(PROTEOME)) == 16
    assert worker_processes(options.replace(cpus=4), db, hmmer, lengths, str(PROTEOME)) == 4
    assert worker_processes(options, db, hmmer, lengths[1:], str(PROTEOME)) == 0     # too few models
    assert worker_processes(options, db, hmmer, [2000] * len(lengths), str(PROTEOME)) == 0  # large models
    assert worker_processes(options.replace(cpus=2), db, hmmer, lengths, str(PROTEOME)) == 0
    assert worker_processes(options.replace(cpus=0), db, hmmer, lengths, str(PROTEOME)) == 0
    assert worker_processes(options, db, hmmer, None, str(PROTEOME)) == 0             # lengths unknown
    assert worker_processes(options, db, hmmer, lengths, "-") == 0
    assert worker_processes(options, db, hmmer, lengths, str(tmp_path / "gone.fa")) == 0
    assert worker_processes(options, db, NumbaBackend.__new__(NumbaBackend), lengths, str(PROTEOME)) == 0


def test_a_worker_that_cannot_read_the_database_reports_it_in_one_line(tmp_path):
    """The database gone before a worker reads it: the worker's batch carries the reader's
    one-line error, raised by the parent as the search's error."""
    formatter = QueryFormatter(report=False, options=ReportOptions())
    setup = fanout._Setup(str(tmp_path / "gone.fa"), None, SearchOptions(), formatter, "models.hmm")
    record = (SAMPLES / "KR.hmm").read_bytes()
    batch = fanout._Worker(setup).search([(1, record)])
    assert batch.blocks == [] and isinstance(batch.error, HmmgpuError)
    assert "gone.fa" in str(batch.error) and "\n" not in str(batch.error)


def test_a_worker_process_that_dies_is_a_one_line_error(tmp_path, capsys, processes_for_two_cpus, monkeypatch):
    """A worker killed (as by the kernel's out-of-memory killer) stops the search with one
    line and a non-zero status, leaving an existing output file as it was."""
    kill_on_start(monkeypatch, fanout._Process)
    code, err = failed_search(tmp_path, capsys, "--backend", "hmmer", "--cpu", "2", str(_models_file(tmp_path)),
                              str(PROTEOME))
    assert code == ERROR_STATUS and err[-1] == ("hmmgpu: error: a worker process stopped unexpectedly (out of memory?); "
                                                "try fewer threads with --cpu")
