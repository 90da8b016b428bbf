"""pyhmmer's post-filter stage in worker processes (hmmgpu.cpu.pyhmmer_processes) writes exactly what
the engine's threads write: the report and the three tables, byte for byte, on one device and on
two, and the tables equal hmmsearch's; which searches take the processes; the faults (a process
killed mid-run, a database a process cannot read) are one line. Behind two devices:
tests/distributed/test_devices.py.

There is no GPU in CI: the filters are hmmgpu's exact CPU filters (``--backend numba``, and two
"devices" of them as in tests/distributed/test_devices.py), which is the GPU route's engine and
plan; the post-filter processes are real processes."""

import numpy as np
import pytest

from hmmgpu.cli import ERROR_STATUS
from hmmgpu.cpu import pyhmmer_processes
from hmmgpu.cpu.backends import HmmerBackend, NumbaBackend
from hmmgpu.cpu.pyhmmer_processes import ProcessPlan, PyhmmerProcesses
from hmmgpu.errors import HmmgpuError, WorkerError
from hmmgpu.formats.hmmfile import read_models
from hmmgpu.formats.seqdb import open_database
from hmmgpu.options import SearchOptions
from hmmgpu.search import routing
from hmmgpu.search.engine import Query
from hmmgpu.stages.postfilter import Task
from tests.distributed.test_cluster import MODELS, OUTPUTS, _search, _steady, tables_equal_hmmsearch
from tests.helpers import PROTEOME, failed_search, kill_on_start


@pytest.fixture
def processes_for_two_cpus(monkeypatch):
    """``--cpu 2`` takes two post-filter processes of one thread (the defaults ask more threads);
    the plans made, in ``made``."""
    monkeypatch.setattr(pyhmmer_processes, "MIN_THREADS", 2)
    monkeypatch.setattr(pyhmmer_processes, "THREADS_PER_PROCESS", 1)
    made = []
    plan = routing.SearchPlan.postfilter_processes
    monkeypatch.setattr(routing.SearchPlan, "postfilter_processes",
                        lambda self, *a: made.append(plan(self, *a)) or made[-1])
    return made


def threads_then_processes(tmp_path, capsys, monkeypatch, args):
    """The search ``args`` with the engine's threads, then with two post-filter processes."""
    code, err, threads = _search(tmp_path / "threads", args, capsys)
    assert code == 0, err
    assert "post-filter stage in" not in err
    monkeypatch.setattr(pyhmmer_processes, "MIN_THREADS", 2)
    monkeypatch.setattr(pyhmmer_processes, "THREADS_PER_PROCESS", 1)
    code, err, processes = _search(tmp_path / "processes", args, capsys)
    assert code == 0, err
    assert "2 worker threads (pyhmmer's post-filter stage in 2 processes, 1 threads each)" in err
    assert set(processes) == set(OUTPUTS.values())
    for name in OUTPUTS.values():
        assert _steady(processes[name]) == _steady(threads[name]), name
    return processes


def test_processes_write_what_the_threads_write_and_hmmsearch(tmp_path, capsys, monkeypatch):
    ours = threads_then_processes(tmp_path, capsys, monkeypatch,
                                   ["--backend", "numba", "--cpu", "2", str(MODELS), str(PROTEOME)])
    assert ours["tblout"].count(b"\n") > 20   # hits in the table, not an empty search
    assert tables_equal_hmmsearch(tmp_path, ours), "hmmsearch (pip 'hmmer', a test requirement) is missing"


def test_which_searches_take_post_filter_processes(tmp_path, monkeypatch):
    """hmmgpu's filters, pyhmmer's post-filter stage, enough threads and a database file: a
    process per THREADS_PER_PROCESS threads; otherwise the engine's threads."""
    class Db:
        pieces, total_residues = None, 1_000_000

    db = Db()
    numba = NumbaBackend.__new__(NumbaBackend)
    options = SearchOptions.from_kwargs(backend="numba", cpus=64)

    def plan(options, backend=numba, database=str(PROTEOME), fmt="fasta"):
        return routing.SearchPlan(options, [200] * 10, fmt=fmt).postfilter_processes(db, backend, database)

    per = pyhmmer_processes.THREADS_PER_PROCESS
    assert plan(options) == ProcessPlan(str(PROTEOME), "fasta", 64 // per, per)
    monkeypatch.setattr(pyhmmer_processes, "THREADS_PER_PROCESS", 8)
    assert plan(options.replace(cpus=36)) == ProcessPlan(str(PROTEOME), "fasta", 4, 9)
    assert plan(options.replace(cpus=pyhmmer_processes.MIN_THREADS)).processes >= 2
    assert plan(options.replace(cpus=pyhmmer_processes.MIN_THREADS - 1)) is None
    assert plan(options.replace(cpus=0)) is None
    assert plan(options.replace(postfilter="hmmgpu")) is None
    assert plan(options, backend=HmmerBackend(db)) is None   # pyhmmer's route: no filters of hmmgpu's
    assert plan(options, database="-") is None
    assert plan(options, database=str(tmp_path / "gone.fa")) is None
    db.pieces = object()
    assert plan(options) is None


def _filtered_task(db):
    """A filtered task of the first sample model over the first 200 targets."""
    hmm = next(iter(read_models(str(MODELS)))).hmm
    return Task(query=Query(index=0, hmm=hmm), positions=np.arange(200), z_fixed=1.0, filtered=True)


def test_a_task_equals_the_threads_and_the_processes_stop_on_close():
    db = open_database(str(PROTEOME))
    options = SearchOptions.from_kwargs(cpus=2)
    stage = PyhmmerProcesses(db, options, ftz=True, threads=2, plan=ProcessPlan(str(PROTEOME), None, 2, 1))
    processes = [p.process for p in stage._processes]
    try:
        task = _filtered_task(db)
        ours = stage.run(task)
        ref = _run_in_this_process(db, options, task)
        assert ours.filtered and ours.cpu_seconds > 0
        assert _hits(task, ours.state) == _hits(task, ref.state) and len(_hits(task, ours.state)) == 2
    finally:
        stage.close()
    assert all(p.poll() is not None for p in processes)


def _hits(task, state) -> list:
    """A task's hits and their domains, every field the outputs print (the state's bytes hold
    pointers and fields pyhmmer leaves unset, which differ between processes)."""
    from pyhmmer.plan7 import TopHits

    hits = TopHits(task.query.hmm)
    hits.__setstate__(state)
    return [(h.name, h.score, h.bias, h.evalue, h.pvalue, h.included, h.reported,
             [(d.env_from, d.env_to, d.score, d.bias, d.c_evalue, d.i_evalue, d.alignment.target_sequence)
              for d in h.domains]) for h in hits]


def _run_in_this_process(db, options, task):
    from hmmgpu.cpu.pyhmmer_stage import PyhmmerStage
    from hmmgpu.host import flush_to_zero

    with flush_to_zero(True):
        return PyhmmerStage(db, options, ftz=True, threads=1).run(task)


def test_a_process_killed_mid_run_is_a_one_line_error():
    db = open_database(str(PROTEOME))
    stage = PyhmmerProcesses(db, SearchOptions(), threads=1, plan=ProcessPlan(str(PROTEOME), None, 1, 1))
    try:
        stage._processes[0].process.kill()
        with pytest.raises(WorkerError) as caught:
            stage.run(_filtered_task(db))
        assert str(caught.value) == ("a post-filter worker process stopped unexpectedly (out of memory?); try fewer "
                                     "threads with --cpu")
    finally:
        stage.close(now=True)


def test_a_database_a_process_cannot_read_is_a_one_line_error(tmp_path):
    db = open_database(str(PROTEOME))
    gone = tmp_path / "gone.fa"
    stage = PyhmmerProcesses(db, SearchOptions(), threads=1, plan=ProcessPlan(str(gone), None, 1, 1))
    try:
        with pytest.raises(HmmgpuError) as caught:
            stage.run(_filtered_task(db))
        assert "gone.fa" in str(caught.value) and "\n" not in str(caught.value)
    finally:
        stage.close()


def test_a_database_changed_under_the_search_is_a_one_line_error(tmp_path):
    """The file rewritten (one sequence fewer) after this process read it: positions would not
    name the same targets, so the worker's answer is the error."""
    path = tmp_path / "proteome.fa"
    text = PROTEOME.read_text()
    path.write_text(text)
    db = open_database(str(path))
    path.write_text(text[:text.rindex(">")])
    stage = PyhmmerProcesses(db, SearchOptions(), threads=1, plan=ProcessPlan(str(path), None, 1, 1))
    try:
        with pytest.raises(HmmgpuError) as caught:
            stage.run(_filtered_task(db))
        assert str(caught.value) == (f"a post-filter worker process read {db.n - 1} sequences "
                                     f"({db.total_residues - int(db.lengths[-1])} residues) where the search read "
                                     f"{db.n} ({db.total_residues}); was the file changed during the search?")
    finally:
        stage.close()


def test_a_search_whose_process_dies_exits_with_one_line(tmp_path, capsys, monkeypatch, processes_for_two_cpus):
    """Both processes killed once they started: the command's last line is the error, its status
    1, no traceback, and an existing output file is left as it was."""
    kill_on_start(monkeypatch, pyhmmer_processes._Process)
    code, err = failed_search(tmp_path, capsys, "--backend", "numba", "--cpu", "2", str(MODELS), str(PROTEOME))
    assert code == ERROR_STATUS and err[-1].startswith("hmmgpu: error: a post-filter worker process stopped")
    assert processes_for_two_cpus and processes_for_two_cpus[-1].processes == 2
