"""Searches over a real dask cluster (hmmgpu.distributed.cluster) write exactly what one process writes.

A local cluster of two worker processes of one thread each (``LocalCluster``, and ``dask
scheduler`` + ``dask worker`` as separate processes, as a user starts them) searches the four
sample models against a made database cut into several shards: the report (less its timing
lines), the three tables (less the date and directory of their tail) equal a search in one
process byte for byte, and the tables equal hmmsearch's row for row; also when a worker
process is killed in the middle of a task.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

distributed = pytest.importorskip("distributed")

import hmmgpu  # noqa: E402
import hmmgpu.distributed  # noqa: E402
from hmmgpu.cli import ERROR_STATUS, main  # noqa: E402
from hmmgpu.distributed import cluster  # noqa: E402
from hmmgpu.formats.seqdb import SequenceDB  # noqa: E402
from hmmgpu.options import SearchOptions  # noqa: E402
from hmmgpu.stages import postfilter  # noqa: E402
from tests.helpers import PIPELINE_KEYS, PROTEOME, ROOT, SAMPLES, assert_same_pipeline, hits_table  # noqa: E402
from tests.report.test_report import assert_same_report  # noqa: E402
from tests.search.test_scan import without_tail  # noqa: E402

HMMSEARCH = shutil.which("hmmsearch")
MODELS = SAMPLES / "samples.hmm"
OUTPUTS = {"-o": "report", "--tblout": "tblout", "--domtblout": "domtblout", "--pfamtblout": "pfamtblout"}
#: lines that differ between two runs of one search: each query's timings, and the tables'
#: directory and date
_VARYING = re.compile(rb"^# (CPU time|Mc/sec|Current dir|Date):")


def _steady(data: bytes) -> bytes:
    return b"".join(line for line in data.splitlines(True) if not _VARYING.match(line))


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The sample proteome as a made database."""
    path = tmp_path_factory.mktemp("made") / "proteome"
    SequenceDB.from_fasta(PROTEOME).save(path)
    return path


@pytest.fixture(scope="module")
def local_cluster():
    """Two worker processes of one thread each."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  worker_dashboard_address=":0") as lc:
        with distributed.Client(lc, set_as_default=False) as client:
            yield lc, client


@pytest.fixture
def several_shards(monkeypatch):
    """The sample-sized search cut into 4 shards and 2 model batches (the defaults make one task of it)."""
    monkeypatch.setattr(cluster, "SHARD_RESIDUES_MIN", 100_000)
    monkeypatch.setattr(cluster, "SHARDS_PER_PROCESS", 2)
    monkeypatch.setattr(cluster, "BATCH_MODELS_MAX", 2)


def _search(where, args, capsys=None):
    """``hmmgpu search`` in this process, from the directory ``where`` with outputs under the same
    names; (exit status, stderr, {output: bytes})."""
    where.mkdir(exist_ok=True)
    argv = ["search"] + [x for flag, name in OUTPUTS.items() for x in (flag, name)] + list(args)
    os.chdir(where)
    try:
        code = main(argv)
    finally:
        os.chdir(ROOT)
    err = capsys.readouterr().err if capsys is not None else ""
    return code, err, {name: (where / name).read_bytes() for name in OUTPUTS.values() if (where / name).exists()}


@pytest.fixture(scope="module")
def one_process(made, tmp_path_factory):
    """The outputs of the search in one process, by option set."""
    runs = {}

    def run(options: tuple):
        if options not in runs:
            code, _, files = _search(tmp_path_factory.mktemp("one"), [*options, str(MODELS), str(made)])
            assert code == 0
            runs[options] = files
        return runs[options]

    return run


def tables_equal_hmmsearch(where, ours: dict) -> bool:
    """Whether hmmsearch is there to compare with; if so, asserts that the three tables of
    ``ours`` (the sample models against the sample proteome) equal its own row for row (it
    runs in ``where``)."""
    if HMMSEARCH is None:
        return False
    flags = [x for flag, name in OUTPUTS.items() if flag != "-o" for x in (flag, f"ref.{name}")]
    subprocess.run([HMMSEARCH, "--cpu", "0", "-o", "/dev/null", *flags, str(MODELS), str(PROTEOME)], check=True,
                   cwd=where)
    for flag, name in OUTPUTS.items():
        if flag != "-o":
            assert without_tail(ours[name]) == without_tail((where / f"ref.{name}").read_bytes()), name
    return True


def _assert_identical(ours: dict, ref: dict) -> None:
    assert set(ours) == set(ref) == set(OUTPUTS.values())
    for name in OUTPUTS.values():
        assert _steady(ours[name]) == _steady(ref[name]), name


@pytest.mark.parametrize("options", [(), ("-E", "1", "--domE", "1", "--incE", "1e-3")], ids=["default", "E1"])
def test_cli_equals_one_process_and_hmmsearch(tmp_path, capsys, made, local_cluster, one_process, several_shards,
                                              options):
    lc, _ = local_cluster
    code, err, ours = _search(tmp_path / "cluster", ["--scheduler", lc.scheduler_address, *options, str(MODELS),
                                                     str(made)], capsys)
    assert code == 0, err
    assert re.search(r"2 workers, \d+ threads; 2100 targets in 4 shards", err), err
    assert "8 tasks (2 model batches x 4 database shards)" in err, err
    assert all(line.startswith("# hmmgpu") for line in err.splitlines()), err   # no bar off a terminal
    _assert_identical(ours, one_process(options))
    # the tables' tail records the command as one process would have been given it
    assert b"--scheduler" not in ours["tblout"]
    if HMMSEARCH is None:
        pytest.skip("hmmsearch (pip 'hmmer') missing")
    hmmer = tmp_path / "hmmer"
    hmmer.mkdir()
    done = subprocess.run([HMMSEARCH, *(x for flag, name in OUTPUTS.items() for x in (flag, name)), *options,
                           str(MODELS), str(PROTEOME)], cwd=hmmer, capture_output=True)
    assert done.returncode == 0, done.stderr
    for name in ("tblout", "domtblout", "pfamtblout"):
        assert without_tail(ours[name]) == without_tail((hmmer / name).read_bytes()), name
    report = (hmmer / "report").read_bytes().replace(str(PROTEOME).encode(), str(made).encode())
    assert_same_report(ours["report"], report)


@pytest.mark.parametrize("shards,models_per_batch", [(3, 2), (7, 1), (1, None)])
def test_api_equals_one_process(made, local_cluster, shards, models_per_batch):
    _, client = local_cluster
    ours = list(hmmgpu.distributed.hmmsearch(str(MODELS), str(made), client=client, shards=shards,
                                             models_per_batch=models_per_batch))
    ref = list(hmmgpu.hmmsearch(str(MODELS), str(made), engine="hmmer"))
    assert len(ours) == len(ref) == 4
    for a, b in zip(ours, ref):
        assert len(a) == len(b)   # kept-but-unreported hits included
        for fmt in ("targets", "domains", "pfam"):
            assert hits_table(a, fmt) == hits_table(b, fmt)
        assert_same_pipeline(a, b, PIPELINE_KEYS)


@pytest.mark.parametrize("backend", ["numba", "hmmer"])
def test_parts_on_the_worker_threads(made, monkeypatch, backend):
    """Each model's work on a shard cut into many parts, run by the workers' post-filter threads
    (worker threads of this process, so that the small part sizes set here apply): after
    hmmgpu's numba filters as the workers' filter stage (where a GPU's plugs in: each shard's
    survivors made global positions) and on pyhmmer's whole pipeline (ranges of the shard);
    the merge equals one process."""
    monkeypatch.setattr(postfilter, "TASK_SECONDS", 1e-4)
    monkeypatch.setattr(postfilter, "PIPELINE_TASK_SECONDS", 1e-4)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0",
                                  worker_dashboard_address=":0") as lc, \
            distributed.Client(lc, set_as_default=False) as client:
        search = cluster.ClusterSearch(client, str(made), SearchOptions.from_kwargs(backend=backend), shards=3,
                                       models_per_batch=3)
        ours = [result.hits for result in search.search(hmmgpu.read_hmms(MODELS))]
    assert search.stats.tasks == 2 * 3 and search.stats.parts > 4 * 3 * 2 and search.stats.post_filter_seconds > 0
    ref = list(hmmgpu.hmmsearch(str(MODELS), str(made), engine="hmmer"))
    for a, b in zip(ours, ref, strict=True):
        assert len(a) == len(b)
        assert hits_table(a, "domains") == hits_table(b, "domains")
        assert_same_pipeline(a, b, PIPELINE_KEYS)


# ---------------------------------------------------------------- a worker killed mid-run
def _slow_first_task(marks: str, seconds: float) -> int:
    """Run on each worker process (``client.run``): its first task waits ``seconds`` after
    writing the worker's process id to ``marks``. A worker restarted by its nanny runs tasks at
    full speed."""
    held = cluster._held_database
    first = [True]

    def slow(ref):
        if first[0]:
            first[0] = False
            with open(os.path.join(marks, str(os.getpid())), "w"):
                pass
            time.sleep(seconds)
        return held(ref)

    cluster._held_database = slow
    return os.getpid()


@pytest.fixture
def dask_processes(tmp_path):
    """``dask scheduler`` and ``dask worker --nworkers 2 --nthreads 1`` as a user starts them."""
    dask = shutil.which("dask")
    if dask is None:
        pytest.skip("the dask command is missing")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    scheduler_file = tmp_path / "scheduler.json"
    started = [subprocess.Popen([dask, "scheduler", "--scheduler-file", str(scheduler_file), "--port", "0",
                                 "--dashboard-address", ":0", "--no-show"], cwd=tmp_path, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        for _ in range(300):
            if scheduler_file.exists() and scheduler_file.stat().st_size:
                break
            time.sleep(0.05)
        started.append(subprocess.Popen([dask, "worker", "--scheduler-file", str(scheduler_file), "--nworkers", "2",
                                         "--nthreads", "1", "--no-dashboard"], cwd=tmp_path, env=env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        with distributed.Client(scheduler_file=str(scheduler_file), set_as_default=False, timeout=30) as client:
            client.wait_for_workers(2, timeout=60)
            yield scheduler_file, client
            client.shutdown()   # the scheduler and the workers
    finally:
        for process in reversed(started):
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.mark.parametrize("shards", [4, 1])
def test_a_worker_killed_mid_run_changes_nothing(tmp_path, capsys, monkeypatch, made, one_process, several_shards,
                                                 dask_processes, shards):
    """A worker killed in the middle of its first task: its tasks run again elsewhere and the
    outputs equal one process's; with four shards (each a home worker) and with one (the whole
    database on every worker, the batches given to the workers in turn)."""
    if shards == 1:
        monkeypatch.setattr(cluster, "SHARD_RESIDUES_MIN", 10 ** 12)
    scheduler_file, client = dask_processes
    import cloudpickle

    marks = tmp_path / "marks"
    marks.mkdir()
    cloudpickle.register_pickle_by_value(sys.modules[__name__])   # the workers cannot import this file
    try:
        pids = client.run(_slow_first_task, str(marks), 3.0)
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    killed = []

    def kill_the_first_busy_worker():
        for _ in range(600):
            busy = sorted(marks.iterdir())
            if busy:
                pid = int(busy[0].name)
                os.kill(pid, signal.SIGKILL)   # in the middle of its first task
                killed.append(pid)
                return
            time.sleep(0.02)

    killer = threading.Thread(target=kill_the_first_busy_worker, daemon=True)
    killer.start()
    code, err, ours = _search(tmp_path / "cluster", ["--scheduler-file", str(scheduler_file), str(MODELS), str(made)],
                              capsys)
    killer.join(timeout=1)
    assert code == 0, err
    assert killed and killed[0] in pids.values()
    assert f"{2 * shards} tasks (2 model batches x {shards} database shards)" in err
    _assert_identical(ours, one_process(()))


# ---------------------------------------------------------------- one-line errors
def _error(capsys, argv) -> str:
    """The one error line of a failed run (after the line naming the cluster, once it was reached)."""
    assert main(argv) == ERROR_STATUS
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) <= 2 and lines[:-1] == [line for line in lines if line.startswith("# hmmgpu ")], lines
    return lines[-1]


def test_errors_are_one_line(tmp_path, capsys, monkeypatch, made, local_cluster):
    lc, _ = local_cluster
    monkeypatch.setattr(cluster, "CONNECT_SECONDS", 1.0)
    assert _error(capsys, ["search", "--scheduler", "tcp://127.0.0.1:1", str(MODELS), str(made)]) == \
        "hmmgpu: error: cannot reach the dask scheduler at tcp://127.0.0.1:1 within 1 s"
    line = _error(capsys, ["search", "--scheduler", lc.scheduler_address, str(MODELS), str(PROTEOME)])
    assert "needs a database made by `hmmgpu makedb`" in line
    line = _error(capsys, ["search", "--scheduler-file", str(tmp_path / "none.json"), str(MODELS), str(made)])
    assert line.startswith(f"hmmgpu: error: --scheduler-file {tmp_path / 'none.json'}: No such file")
    line = _error(capsys, ["search", "--scheduler", lc.scheduler_address, "--backend", "cuda", str(MODELS), str(made)])
    assert re.fullmatch(r"hmmgpu: error: dask worker tcp://\S+: --backend cuda: this dask worker has no usable CUDA "
                        r"GPU \(start GPU workers with `dask cuda worker`\)", line), line
    # a database the workers cannot open (here: the tasks name a path that is not there)
    opened = cluster.open_shared_database(str(made))
    gone = (cluster.DatabaseRef(path=str(tmp_path / "gone"), identity=opened[0].identity, n=opened[0].n,
                                residues=opened[0].residues), opened[1])
    monkeypatch.setattr(cluster, "open_shared_database", lambda *args: gone)
    assert not (tmp_path / "out.tbl").exists()
    line = _error(capsys, ["search", "--scheduler", lc.scheduler_address, "--tblout", str(tmp_path / "out.tbl"),
                           str(MODELS), str(made)])
    assert re.fullmatch(r"hmmgpu: error: dask worker tcp://\S+ cannot open the database: \S+/gone: .*", line), line
    assert not (tmp_path / "out.tbl").exists()


def test_a_bar_over_tasks_on_a_terminal():
    from tests.report.test_progress import run

    script = ("import sys, time\n"
              "from hmmgpu.report.progress import ProgressBar\n"
              "with ProgressBar(None, 'searching', report=sys.stdout) as bar:\n"
              "    tasks = bar.row('tasks', 4)\n"
              "    for i in range(4):\n"
              "        time.sleep(0.15)\n"
              "        tasks.advance()\n")
    _, screen = run(stdout_tty=False, stderr_tty=True, argv=["-c", script])
    assert b"tasks" in screen and b"100%" in screen
    _, stderr = run(stdout_tty=False, stderr_tty=False, argv=["-c", script])
    assert stderr == b""


# ---------------------------------------------------------------- the plan
def test_plan_cuts_shards_by_residues_and_batches_by_cost():
    lengths = [100] * 1000
    shards = cluster.cut_shards(lengths, 3)
    assert [(s.first, s.end) for s in shards] == [(0, 334), (334, 667), (667, 1000)]
    assert sum(s.residues for s in shards) == 100_000
    assert [(s.first, s.end) for s in cluster.cut_shards([5, 0, 0, 5], 8)] == [(0, 1), (1, 4)]   # by residues
    assert [(s.first, s.end) for s in cluster.cut_shards([], 4)] == [(0, 0)]
    # 600 Pfam-sized models against 100 M residues on 8 processes of 4 threads: a shard a
    # process, and batches that give each process TASKS_PER_PROCESS tasks of its wall time
    cells = 600 * 250 * 1e8
    plan = cluster.plan_work([250] * 600, [250] * 400_000, processes=8, threads=32)
    assert len(plan.shards) == 8 and plan.worker_rate == 4 * cluster.CELLS_PER_SECOND
    assert plan.task_seconds == pytest.approx(cells / (8 * plan.worker_rate) / cluster.TASKS_PER_PROCESS)
    assert len(plan.batch_sizes([250] * 600)) == cluster.TASKS_PER_PROCESS
    # the same on GPU workers: their rate (the threads' post-filter rate, under the GPU's); the
    # database whole on every worker (one shard), and the models cut into as many tasks
    plan = cluster.plan_work([250] * 600, [250] * 400_000, processes=8, threads=32, gpus=8)
    assert plan.worker_rate == min(cluster.GPU_CELLS_PER_SECOND, 4 * cluster.GPU_ROUTE_CELLS_PER_SECOND)
    assert plan.task_seconds == pytest.approx(cells / (8 * plan.worker_rate) / cluster.TASKS_PER_PROCESS)
    batches = len(plan.batch_sizes([250] * 600))   # about TASKS_PER_PROCESS a worker (each fills to the task's cost)
    assert len(plan.shards) == 1 and 8 * (cluster.TASKS_PER_PROCESS - 1) < batches <= 8 * cluster.TASKS_PER_PROCESS
    # the benchmark's run (600 Pfam-35 models, sum of M 99,749, x 115.9 M residues) on 2 GPU
    # workers of 16 threads: 16 batches against the whole database, each task about 1.5 s
    plan = cluster.plan_work([166] * 600 + [149], [372] * 311_454, processes=2, threads=32, gpus=2)
    assert len(plan.shards) == 1 and len(plan.batch_sizes([166] * 600 + [149])) == 2 * cluster.TASKS_PER_PROCESS
    assert 1.0 < plan.task_seconds < 2.0
    # GPU workers are given shards when the models are too few for 8 tasks a worker, when the
    # database is larger than one worker holds whole, or when one worker has no GPU
    assert len(cluster.plan_work([250] * 15, [250] * 400_000, processes=2, threads=32, gpus=2).shards) == 2
    assert len(cluster.plan_work(None, [250] * 400_000, processes=2, threads=32, gpus=2).shards) == 2
    big = [cluster.WHOLE_DATABASE_RESIDUES_MAX // 1000 + 1] * 1000
    assert len(cluster.plan_work([250] * 600, big, processes=2, threads=32, gpus=2).shards) == 2
    assert len(cluster.plan_work([250] * 600, [250] * 400_000, processes=2, threads=32, gpus=1).shards) == 2
    # one long model: one batch; a small database: one shard
    plan = cluster.plan_work([2000], [250] * 400_000, processes=8, threads=32)
    assert len(plan.shards) == 8 and plan.batch_sizes([2000]) == [1]
    assert cluster.plan_work([250], [250] * 4000, processes=8, threads=32).shards[0].end == 4000


def test_one_shard_goes_to_the_workers_in_turn():
    """With one shard (the whole database, held by every worker) each batch's task goes first to
    the next worker; with several, each shard's task to the shard's home."""
    search = cluster.ClusterSearch.__new__(cluster.ClusterSearch)
    search._homes = {}
    search.plan = cluster.plan_work([250] * 64, [250] * 400_000, processes=4, threads=64, gpus=4)
    search._home_shards({"tcp://b:1": 16, "tcp://a:1": 16, "tcp://c:1": 16, "tcp://d:1": 16})
    assert len(search.plan.shards) == 1
    assert [search._home(k, search.plan.shards[0]) for k in range(5)] == [
        ["tcp://a:1"], ["tcp://b:1"], ["tcp://c:1"], ["tcp://d:1"], ["tcp://a:1"]]
    search.plan = cluster.plan_work([250] * 64, [250] * 400_000, processes=2, threads=32)
    search._homes = {}
    search._home_shards({"tcp://b:1": 16, "tcp://a:1": 16})
    assert len(search.plan.shards) == 2
    homes = [search._home(0, shard) for shard in search.plan.shards]
    assert sorted(h[0] for h in homes) == ["tcp://a:1", "tcp://b:1"]
    assert [search._home(5, shard) for shard in search.plan.shards] == homes


def test_post_filter_threads_are_each_workers_share_of_its_cores():
    a, b, c, d = "tcp://10.0.0.1:1", "tcp://10.0.0.1:2", "tcp://10.0.0.2:1", "tcp://10.0.0.2:2"
    every, low, high = tuple(range(32)), tuple(range(16)), tuple(range(16, 32))
    workers = {a: 1, b: 1, c: 1, d: 24}
    # two unpinned workers on a host share its cores; workers pinned to one NUMA node each
    # (dask-cuda's) have their node's; more dask threads than the share: the threads
    facts = {a: (every, True), b: (every, True), c: (low, True), d: (high, True)}
    assert cluster.core_shares(workers, facts) == {a: 16, b: 16, c: 16, d: 24}
    # a worker that did not answer: its dask threads
    assert cluster.core_shares(workers, {a: (every, False)}) == {a: 16, b: 1, c: 1, d: 24}


def test_a_shard_is_planned_in_parts_for_the_worker_threads(made, monkeypatch):
    """``plan_shard``: pyhmmer's whole pipeline over a shard cut into consecutive ranges that
    cover it (several a thread), the survivors cut by cost as in one process."""
    from hmmgpu.cpu.pyhmmer_stage import PyhmmerStage
    from hmmgpu.options import SearchOptions
    from hmmgpu.search.engine import Query

    monkeypatch.setattr(postfilter, "PIPELINE_TASK_SECONDS", 1e-4)
    db = SequenceDB.load(made)
    hmm = hmmgpu.read_hmms(MODELS)[1]
    stage = PyhmmerStage(db, SearchOptions(), threads=2)
    for first, end in ((0, 700), (700, 2100), (5, 6), (9, 9)):
        tasks = stage.plan_shard(Query(index=0, hmm=hmm), first, end)
        covered = sorted(int(p) for t in tasks for p in t.positions)
        assert covered == list(range(first, end)) and all(not t.filtered for t in tasks)
        assert len(tasks) == (1 if end - first < 128 else postfilter.RANGE_SHARES * 2)
    survivors = db.lengths.argsort()[-300:]
    survivors.sort()
    tasks = stage.plan_shard(Query(index=0, hmm=hmm), 0, 2100, survivors=survivors)
    assert [t.positions.tolist() for t in tasks] == \
        [t.positions.tolist() for t in stage.plan(Query(index=0, hmm=hmm), survivors)]
    assert len(tasks) > 1 and all(t.filtered for t in tasks)


def test_a_shard_is_a_database_of_its_own(made):
    db = SequenceDB.load(made)
    for first, end in ((0, 5), (700, 1400), (2099, 2100), (10, 10)):
        shard = db.shard(first, end)
        assert shard.n == end - first and shard.total_residues == int(db.lengths[first:end].sum())
        for k in range(shard.n):
            assert shard.name(k) == db.name(first + k) and shard.description(k) == db.description(first + k)
            assert bytes(shard.codes(k)) == bytes(db.codes(first + k))
        assert shard.max_length == (int(db.lengths[first:end].max()) if end > first else 0)


def test_local_command_line():
    line = ("hmmgpu search --scheduler tcp://h:8786 --tblout t.tbl --scheduler-file=s.json --devices 0,2 --devices=all "
            "m.hmm 'my db'")
    assert cluster.local_command_line(line) == "hmmgpu search --tblout t.tbl m.hmm 'my db'"
