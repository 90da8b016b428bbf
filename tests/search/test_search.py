"""End to end: `hmmgpu search` tables equal HMMER 3.4's hmmsearch; the Python API equals pyhmmer."""
import json
import shutil
import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np
import pyhmmer
import pytest
from pyhmmer.easel import SequenceFile
from pyhmmer.plan7 import HMMFile, Pipeline as PyhmmerPipeline

import hmmgpu
from hmmgpu.stages.protocol import CascadeBackend
from hmmgpu import costs
from hmmgpu.cpu.backends import NumbaBackend
from hmmgpu.cpu.pyhmmer_stage import PyhmmerStage
from hmmgpu.gpu.process import child_error
from hmmgpu.cli import main
from hmmgpu.errors import HmmgpuError
from hmmgpu.formats.inputs import META_FILE
from hmmgpu.formats.seqdb import SequenceDB
from tests.helpers import (AMINO, COUNTER_KEYS, PROTEOME, SAMPLES, assert_same_pipeline, failed_search,
                           forward_pvalues, hits_table, narrow_f3, sample_hmm)

HMMSEARCH = shutil.which("hmmsearch")


def _rows(path):
    with open(path) as f:
        return [line for line in f if not line.startswith("#")]


def _hmmsearch(tmp_path, hmmfile, args):
    out = {k: tmp_path / f"ref.{k}" for k in ("tblout", "domtblout", "pfamtblout")}
    cmd = [HMMSEARCH, "--cpu", "0", "-o", str(tmp_path / "ref.txt")]
    for k, p in out.items():
        cmd += [f"--{k}", str(p)]
    subprocess.run(cmd + args + [str(hmmfile), str(PROTEOME)], check=True)
    return out


def _hmmgpu(tmp_path, hmmfile, args, db=PROTEOME, backend="numba"):
    out = {k: tmp_path / f"ours.{k}" for k in ("tblout", "domtblout", "pfamtblout")}
    argv = ["search", "--backend", backend, "-o", str(tmp_path / "ours.txt")]
    for k, p in out.items():
        argv += [f"--{k}", str(p)]
    assert main(argv + args + [str(hmmfile), str(db)]) == 0
    return out


OPTION_SETS = [
    ("defaults", "samples.hmm", []),
    ("nobias", "samples.hmm", ["--nobias"]),
    ("strict_E", "samples.hmm", ["-E", "1e-5", "--domE", "1e-3", "--incE", "1e-10"]),
    ("loose_filters", "samples.hmm", ["--F1", "0.2", "--F2", "0.05", "--F3", "1e-3"]),
    ("bit_thresholds", "samples.hmm", ["-T", "20", "--domT", "15", "--incT", "30", "--incdomT", "25"]),
    ("fixed_Z", "samples.hmm", ["-Z", "1000000", "--domZ", "50"]),
    ("cut_ga", "LuxC.hmm", ["--cut_ga"]),
    ("max", "PF02826.hmm", ["--max"]),
    ("F1_zero", "PF02826.hmm", ["--F1", "0"]),
    ("F_above_one", "KR.hmm", ["--F1", "2", "--F2", "5"]),
]


@pytest.mark.skipif(HMMSEARCH is None, reason="hmmsearch (pip package 'hmmer', in the test extra) not installed")
@pytest.mark.parametrize("backend", ["numba", "hmmer"])
@pytest.mark.parametrize("label,hmmfile,args", OPTION_SETS, ids=[o[0] for o in OPTION_SETS])
def test_tables_equal_hmmsearch(tmp_path, monkeypatch, label, hmmfile, args, backend):
    """Both CPU routes, with the work cut into many small tasks (each keeping the hits of a
    serial run by its targets' positions) and merged: hmmsearch's tables, row for row."""
    from hmmgpu.stages import postfilter as forward_stage

    monkeypatch.setattr(forward_stage, "TASK_SECONDS", 1e-4)
    monkeypatch.setattr(forward_stage, "PIPELINE_TASK_SECONDS", 1e-4)
    monkeypatch.setattr(forward_stage, "RANGE_SHARES", 1e4)
    ref = _hmmsearch(tmp_path, SAMPLES / hmmfile, args)
    ours = _hmmgpu(tmp_path, SAMPLES / hmmfile, args, backend=backend)
    for kind in ref:
        assert _rows(ours[kind]) == _rows(ref[kind]), kind
    assert len(_rows(ref["tblout"])) > 0 or label == "cut_ga"


def test_made_database_gives_same_tables(tmp_path):
    assert main(["makedb", str(PROTEOME), str(tmp_path / "db")]) == 0
    a = _hmmgpu(tmp_path, SAMPLES / "PF02826.hmm", [], db=tmp_path / "db")
    rows = _rows(a["tblout"])
    b = _hmmgpu(tmp_path, SAMPLES / "PF02826.hmm", [])
    assert rows == _rows(b["tblout"]) and len(rows) == 22


def test_report_has_pipeline_statistics(tmp_path):
    _hmmgpu(tmp_path, SAMPLES / "PF02826.hmm", [])
    text = (tmp_path / "ours.txt").read_text()
    for line in ("Passed MSV filter:                       130  (0.0619048); expected 42.0 (0.02)",
                 "Passed bias filter:                      130  (0.0619048); expected 42.0 (0.02)",
                 "Passed Vit filter:                        48  (0.0228571); expected 2.1 (0.001)",
                 "Passed Fwd filter:                        22  (0.0104762); expected 0.0 (1e-05)",
                 "Target sequences:                       2100  (682583 residues searched)"):
        assert line in text


@pytest.fixture(scope="module")
def references():
    with HMMFile(SAMPLES / "samples.hmm") as f:
        hmms = list(f)
    with SequenceFile(PROTEOME, digital=True, alphabet=AMINO) as f:
        block = f.read_block()
    return hmms, block, list(pyhmmer.hmmsearch(hmms, block, cpus=1))


@pytest.mark.parametrize("kind", ["path", "made", "block", "seqdb"])
def test_api_hmmsearch_equals_pyhmmer(kind, references, tmp_path):
    hmms, block, expected = references
    sequences = {"path": str(PROTEOME), "block": block, "seqdb": SequenceDB.from_fasta(PROTEOME)}.get(kind)
    if kind == "made":
        SequenceDB.from_fasta(PROTEOME).save(tmp_path / "db")
        sequences = tmp_path / "db"
    results = list(hmmgpu.hmmsearch(hmms, sequences, engine="numba"))
    assert len(results) == len(expected)
    for ours, ref in zip(results, expected):
        assert hits_table(ours) == hits_table(ref)
        assert hits_table(ours, "domains") == hits_table(ref, "domains")
        assert (len(ours), ours.Z, ours.domZ, ours.searched_sequences, ours.searched_residues) == (
            len(ref), ref.Z, ref.domZ, ref.searched_sequences, ref.searched_residues)
        assert_same_pipeline(ours, ref)


def test_api_hmmer_backend_equals_pyhmmer(references):
    hmms, block, expected = references
    for ours, ref in zip(hmmgpu.hmmsearch(hmms, block, engine="hmmer"), expected):
        assert hits_table(ours) == hits_table(ref)


def test_api_options_use_pyhmmer_names(references):
    hmms, block, _ = references
    expected = list(pyhmmer.hmmsearch(hmms, block, cpus=1, E=1e-3, bias_filter=False, Z=5000))
    for ours, ref in zip(hmmgpu.hmmsearch(hmms, block, engine="numba", E=1e-3, bias_filter=False, Z=5000), expected):
        assert hits_table(ours, "domains") == hits_table(ref, "domains")


def test_pipeline_filter_stage_inside_pyhmmer(references):
    """The survivors block finishes the search in pyhmmer with a full run's results."""
    hmms, block, expected = references
    with hmmgpu.Pipeline(block, backend="numba") as pli:
        survivors = pli.filter(hmms[0])
        assert len(survivors) == pli.counts.n_past_vit == 48
    hits = PyhmmerPipeline(AMINO, Z=len(block)).search_hmm(hmms[0], survivors)
    assert hits_table(hits) == hits_table(expected[0])


def test_cli_runs_as_console_script(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "hmmgpu.cli", "search", "--backend", "numba",
                           "--tblout", str(tmp_path / "t"), str(SAMPLES / "Thioesterase.hmm"), str(PROTEOME)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "backend numba" in proc.stderr
    assert "Query:       Thioesterase  [M=243]" in proc.stdout
    assert np.sum([not r.startswith("#") for r in open(tmp_path / "t")]) >= 1


def test_flush_to_zero_mode_is_scoped():
    import numpy as np

    from hmmgpu.host import flush_to_zero

    tiny = np.float64(1e-300)
    with flush_to_zero():
        assert tiny * np.float64(1e-10) == 0.0  # subnormal flushed, as in hmmsearch
    assert tiny * np.float64(1e-10) > 0.0  # and restored afterwards


@pytest.mark.parametrize("cpus", [1, 3, 8])
def test_parallel_forward_stage_equals_serial_run(references, cpus):
    """Survivors split over threads, merged: the same hits, kept set, Z and domZ as one serial run."""
    hmms, block, expected = references
    for ours, ref in zip(hmmgpu.hmmsearch(hmms, block, engine="numba", cpus=cpus), expected):
        assert len(ours) == len(ref)
        assert hits_table(ours, "domains") == hits_table(ref, "domains")
        assert_same_pipeline(ours, ref)


@pytest.mark.parametrize("lengths,M,ranges", [([100] * 600, 100, 1), ([100] * 20, 100, 3), ([100] * 4, 100, 5),
                                              ([100] * 29 + [1000], 1000, 16), ([100] * 29 + [1000], 100, 1)])
def test_pyhmmer_route_sizes_range_tasks_by_the_whole_run(monkeypatch, lengths, M, ranges):
    """On pyhmmer's route a query is cut into ranges of at most the run's estimated time over
    RANGE_SHARES x threads (and at least 0.1 s): a model of 0.59 s (by the CPU estimate) is not
    cut among 600 on 16 threads, is cut into three among 20 and into five (its time) among 4;
    among 29 such models, one ten times longer is cut into 16 and the others not at all."""
    from types import SimpleNamespace

    from hmmgpu.stages import postfilter as forward_stage
    from hmmgpu.search.engine import Query
    from hmmgpu.options import SearchOptions

    db = SequenceDB.from_fasta(PROTEOME)
    monkeypatch.setattr(forward_stage, "CPU_CELLS_PER_SECOND", 100 * db.total_residues / 0.59)
    monkeypatch.setattr(forward_stage, "SPLIT_MIN_CELLS", 1e12)  # the time decides, not the lower bound
    stage = PyhmmerStage(db, SearchOptions(), threads=16, model_lengths=lengths)
    tasks = stage.plan(Query(index=0, hmm=SimpleNamespace(M=M)))
    assert len(tasks) == ranges
    assert np.array_equal(np.concatenate([t.positions for t in tasks]), np.arange(db.n))


@pytest.mark.parametrize("backend", ["hmmer", "numba"])
def test_single_query_is_split_over_every_thread(references, backend, monkeypatch):
    """One model alone is cut into a task per thread (not one per estimated 0.1 s of work), and
    the merged hits, kept set, Z and domZ are still those of one serial run."""
    from hmmgpu.stages import postfilter as forward_stage

    monkeypatch.setattr(forward_stage, "SPLIT_MIN_CELLS", 1.0e5)
    hmms, block, expected = references
    for hmm, ref in zip(hmms, expected):
        with hmmgpu.Pipeline(block, backend=backend, cpus=8) as pli:
            ours = pli.search_hmm(hmm)
            # the pyhmmer route splits every target; the filtered route its few survivors (those
            # the Forward gate sent on: one for two of the models), by cost
            gate = pli.stats.forward_gate
            assert pli.stats.tasks >= (8 if backend == "hmmer" else min(2, gate["passed"] + gate["unsure"]))
            assert backend == "hmmer" or gate["passed"] == ref.__getstate__()["pipeline"]["n_past_fwd"]
        assert hits_table(ours, "domains") == hits_table(ref, "domains")
        assert_same_pipeline(ours, ref)


def _auto_route(monkeypatch, residues: float, warm: bool = True, source: str = "proteins.fa"):
    """``auto``'s choice (``backends._select``) on a GPU machine with 16 threads against a
    database of ``residues`` read from ``source``, as a function ``chosen(models, started=None)``
    of the models' lengths and a GPU process started early: "gpu", ``started`` itself, or the
    ``HmmerBackend``. ``warm``: the kernel cache holds compiled kernels (else its state on
    disk decides)."""
    from types import SimpleNamespace

    from hmmgpu.search import routing as backends
    from hmmgpu.gpu.runtime import build

    if warm:
        monkeypatch.setattr(build, "any_compiled", lambda: True)
    monkeypatch.delenv("HMMGPU_NO_GPU", raising=False)
    monkeypatch.setattr("hmmgpu.gpu.runtime.context.cuda_driver_present", lambda: True)
    monkeypatch.setattr(backends, "cuda_available", lambda device: True)
    monkeypatch.setattr(backends, "_cuda", lambda run, db, gpu_process, started: started or "gpu")
    options = SimpleNamespace(backend="auto", threads=16, device=0, devices=None)
    db = SimpleNamespace(total_residues=residues, source=source)

    def chosen(models, started=None):
        return backends._select(options, db, float(sum(models)) * residues, True, started, len(models), None)

    return chosen


@pytest.mark.parametrize("models,residues,route", [
    ([250] * 600, 29e6, "gpu"),   # (a) Pfam-scale work
    ([200], 116e6, "cpu"),        # one model: every thread runs it before the GPU process could start
    ([200] * 4, 116e6, "gpu"),    # a few models against a large database (the CPU route pays per residue)
    ([250] * 600, 0.8e6, "cpu"),  # many models, a small proteome
    ([180] * 20000, 0.8e6, "cpu"),  # Pfam-A against a proteome: small models, whatever their number
    ([180] * 20000, 5e6, "gpu"),  # Pfam-A against a few proteomes
    ([200] * 4, 0.8e6, "cpu"),    # the README's search
    ([200], 29e6, "cpu"),         # one model, a mid-sized database: the GPU's start-up dominates
    ([166] * 600, 3e6, "cpu"),    # (g): where the routes cross (the mean model's cells at the bound)
    ([166] * 600, 6e6, "gpu"),    # (g): measured 3.21 s on the GPU against 4.38 s on pyhmmer's route
    ([166] * 30, 29e6, "gpu"),    # a few tens of models against (a)'s database
    ([196] * 20, 29e6, "gpu"),    # (h): measured 1.49 s on the GPU against 2.05 s on pyhmmer's route
    ([179] * 10, 29e6, "cpu"),    # (h): 1.59 s against 1.68 s, level
    ([96] * 5, 29e6, "cpu"),
])
def test_auto_weighs_the_cpu_route_against_the_gpu_start_up(monkeypatch, models, residues, route):
    chosen = _auto_route(monkeypatch, residues)(models)
    assert (chosen if chosen == "gpu" else "cpu") == route


@pytest.mark.parametrize("residues,route", [(116e6, "gpu"), (29e6, "cpu"), (0.8e6, "cpu")])  # 4.7, 1.2, 0.03 s estimated
def test_auto_weighs_one_model_against_a_made_database(monkeypatch, tmp_path, residues, route):
    """One model against a made database (no piece by piece route: pyhmmer's would make every
    target into its sequence object) takes the GPU when the work pays for its start."""
    made = tmp_path / "made"
    made.mkdir()
    (made / META_FILE).write_text("{}")
    chosen = _auto_route(monkeypatch, residues, source=str(made))([200])
    assert (chosen if chosen == "gpu" else "cpu") == route


def test_auto_pays_for_compiling_the_kernels_only_with_enough_work(monkeypatch, tmp_path):
    """On a machine where no GPU kernel has been compiled (an empty cache), ``auto`` takes the
    GPU only for work that pays for compiling them first, and says why on the backend line;
    once a kernel is in the cache, the warm threshold holds."""
    from hmmgpu.search import routing as backends
    from hmmgpu.gpu.runtime import build

    monkeypatch.setenv("HMMGPU_CACHE_DIR", str(tmp_path / "cache"))
    chosen = _auto_route(monkeypatch, 29e6, warm=False)
    mid, large = [196] * 20, [166] * 600  # (h)'s 20 models: 1.87 s estimated; (a)
    assert not build.any_compiled()
    assert chosen(mid).description.endswith(backends._COLD_KERNELS) and "hmmgpu warmup" in backends._COLD_KERNELS
    assert chosen(large) == "gpu"
    (tmp_path / "cache" / "kernels" / "cuda").mkdir(parents=True)
    (tmp_path / "cache" / "kernels" / "cuda" / "k_16x2.sm90.cubin").write_bytes(b"{}\n")
    assert build.any_compiled()
    assert chosen(mid) == "gpu"


def test_auto_keeps_a_gpu_process_started_early_for_work_near_the_threshold(monkeypatch):
    """A GPU process started on the file's estimate is kept when the exact count puts the work
    just under the threshold (pyhmmer's route over the file read whole is the slower), and
    stopped for small models; without one, the exact count decides."""
    from hmmgpu.search import routing as backends

    chosen = _auto_route(monkeypatch, 29e6)
    near, small = [179] * 10, [10] * 600   # (h)'s 10 models: 1.48 s estimated; small models
    assert backends.cpu_route_seconds(float(sum(near)) * 29e6, 29e6, 16) <= backends.GPU_ROUTE_SECONDS
    assert chosen(near, "early") == "early"
    assert isinstance(chosen(near, None), backends.HmmerBackend)
    assert isinstance(chosen(small, "early"), backends.HmmerBackend)


def test_auto_takes_pyhmmer_route_before_reading_when_the_file_size_decides(monkeypatch, tmp_path):
    """``auto`` decides on pyhmmer's route before reading the file when even the file's size
    (an upper bound on its residues) puts the work there, or, when half as many residues would,
    the share of residue bytes in the file's head does, with the reason the backend line gives;
    ``--backend hmmer`` always, ``--backend cuda`` never; work that neither decides waits for
    the exact count. Measured on the H200: 10 Pfam models against 29 M residues took 1.86 s
    read first and searched by ranges, 1.52 s piece by piece."""
    from types import SimpleNamespace

    from hmmgpu.gpu.runtime import context as kernels
    from hmmgpu.search import routing as backends
    from hmmgpu.gpu.runtime import build

    monkeypatch.setattr(build, "any_compiled", lambda: True)  # a machine whose kernel cache is warm
    monkeypatch.delenv("HMMGPU_NO_GPU", raising=False)
    monkeypatch.setattr(kernels, "cuda_driver_present", lambda: True)
    fasta = tmp_path / "db.fa"
    with open(fasta, "wb") as fh:
        fh.truncate(29_000_000)  # its size alone is read
    options = SimpleNamespace(backend="auto", threads=16, devices=None)
    decided = backends.cpu_route_before_reading
    assert decided(options, str(fasta), [180] * 5) == backends._SMALL_WORK
    assert decided(options, str(fasta), [180]) == backends._ONE_QUERY
    assert decided(options, str(fasta), [180] * 20) is None   # the GPU may pay: read, then count
    assert decided(options, str(fasta), [10] * 600) == backends._SMALL_MODELS
    assert decided(options, str(tmp_path / "absent.fa"), [180] * 10) is None
    # a file whose size leaves the choice open but whose sequence lines decide it: 38 MB, 20 M
    # residues (long headers), as (h)'s 10 models against 37.6 MB and 29 M residues
    record = b">" + b"h" * 899 + b"\n" + b"A" * 1000 + b"\n"
    with open(tmp_path / "long_headers.fa", "wb") as fh:
        fh.write(record * 20_000)
    assert backends.residues_estimate(str(tmp_path / "long_headers.fa"), sample=True) == 20e6
    assert decided(options, str(tmp_path / "long_headers.fa"), [179] * 10) == backends._SMALL_WORK
    with open(tmp_path / "no_lines.fa", "wb") as fh:
        fh.truncate(37_600_000)  # as large, and every byte a possible residue: the exact count decides
    assert decided(options, str(tmp_path / "no_lines.fa"), [179] * 10) is None
    # one query against a made database: no piece by piece route there, so its size decides
    for residues, reason in ((116e6, None), (0.7e6, backends._SMALL_MODELS)):
        made = tmp_path / f"made_{residues:.0f}"
        made.mkdir()
        (made / META_FILE).write_text(json.dumps({"total_residues": residues}))
        assert decided(options, str(made), [180]) == reason
    assert decided(SimpleNamespace(backend="hmmer", threads=16, devices=None), str(fasta), [180] * 30) == ""
    assert decided(SimpleNamespace(backend="cuda", threads=16, devices=None), str(fasta), [180] * 10) is None
    monkeypatch.setattr(kernels, "cuda_driver_present", lambda: False)  # a machine without a GPU
    assert decided(options, str(fasta), [180] * 30) == backends._NO_GPU
    monkeypatch.setattr(kernels, "cuda_driver_present", lambda: True)
    for n in (2, 10, 30, 100, 600):  # never where the exact count would take the GPU
        for residues in (1e5, 1e6, 3e6, 1e7, 2.9e7):
            with open(fasta, "wb") as fh:
                fh.truncate(int(residues))
            if decided(options, str(fasta), [180] * n) is not None:
                cells = 180.0 * n * residues
                for exact in (residues, residues / 2):
                    assert (backends.small_on_average(180.0 * n * exact, n) or
                            backends.cpu_route_seconds(180.0 * n * exact, exact, 16) <= backends.GPU_ROUTE_SECONDS), cells


class _StartingBackend(NumbaBackend):
    """A cascade backend that starts in the background, as the GPU process does: numba's
    filters once ``ready`` has been asked ``answers_before_ready`` times, or, with ``error``,
    a start that fails (the child's answer when it finds no GPU)."""

    def __init__(self, db, answers_before_ready: int = 0, error: str | None = None):
        super().__init__(db)
        self.answers_before_ready, self.error = answers_before_ready, error
        self.asked, self.closed = 0, False

    def ready(self, timeout=None):
        if self.error is not None:
            raise child_error(self.error)
        self.asked += 1
        return timeout is None or self.asked > self.answers_before_ready  # None: waits until ready

    def attach(self, db):
        self.attached = db

    def close(self, wait=True):
        self.closed = True


def test_a_gpu_process_that_read_another_database_is_an_error():
    import threading
    from types import SimpleNamespace

    from hmmgpu.gpu.process import CudaProcessBackend

    for residues, error in ((10, None), (11, "the GPU process read 3 sequences \\(10 residues\\) where this process read 3 \\(11\\)")):
        child = object.__new__(CudaProcessBackend)  # its answer to "init" as received
        child._receive_lock, child._ready_reply, child._device = threading.Lock(), None, 0
        child._receive = lambda: ("ready", "backend cuda on a GPU", "16x2", (3, 10))
        child._conn = SimpleNamespace(poll=lambda timeout: True)  # the answer has arrived
        child.attach(SimpleNamespace(n=3, total_residues=residues))
        if error is None:
            assert child.ready() and child.description == "backend cuda on a GPU"
        else:
            with pytest.raises(HmmgpuError, match=error):
                child.ready(timeout=0)
            assert child.description.startswith("backend cuda, device 0: the GPU process read")


def test_the_gpu_process_starts_without_asking_the_driver_here(monkeypatch, tmp_path, references):
    """The early GPU process gets the model lengths and is started without cuInit in this
    process, and nothing waits for it; a child that finds no GPU stops the search with
    --backend cuda's one-line error, and auto goes on with pyhmmer's route (the same hits)."""
    from types import SimpleNamespace

    from hmmgpu.gpu.runtime import context as kernels
    from hmmgpu.search import routing as backends
    from hmmgpu.gpu import process as gpu_process
    from hmmgpu.search.engine import SearchEngine
    from hmmgpu.options import SearchOptions

    def no_cuinit(device=0):
        raise AssertionError("cuInit in the searching process")

    started = []
    monkeypatch.setattr(backends, "cuda_available", no_cuinit)
    monkeypatch.setattr(kernels, "cuda_driver_present", lambda: True)
    monkeypatch.setattr(gpu_process, "CudaProcessBackend", lambda **kw: started.append(kw) or "child")
    fasta = tmp_path / "db.fa"
    fasta.write_bytes(b">s\nACDEF\n")
    options = SimpleNamespace(backend="cuda", threads=16, device=0, lanes="auto", devices=None)
    assert backends.start_gpu_early(options, str(fasta), None, [120, 300]) == "child"
    assert started[0]["lengths"] == [120, 300] and started[0]["source"] == (str(fasta), None)

    hmms, block, expected = references
    db = SequenceDB.from_block(block)
    for mode in ("cuda", "auto"):
        child = _StartingBackend(db, error=f"{gpu_process.NO_DEVICE} 0")
        assert isinstance(child, CascadeBackend)
        options = SearchOptions.from_kwargs(backend=mode, cpus=3)
        assert backends.select_backend(options.run, db, 1e15, started=child) is child and child.attached is db
        engine = SearchEngine(db, options, child)
        if mode == "cuda":
            with pytest.raises(HmmgpuError, match=r"^--backend cuda: no usable CUDA GPU with id 0 \(try"):
                list(engine.search(hmms))
        else:
            for ours, ref in zip(engine.search(hmms), expected):
                assert hits_table(ours.hits, "domains") == hits_table(ref, "domains")
            assert engine.stats.pipeline_queries == len(hmms) and "no usable CUDA GPU" in engine.stats.fallback


def test_auto_starts_no_gpu_process_early_for_small_models(monkeypatch, tmp_path):
    """With auto, the same work (model cells) starts the GPU process early for large models;
    small ones are decided for pyhmmer's route before reading (the command line then starts
    nothing)."""
    from types import SimpleNamespace

    from hmmgpu.gpu.runtime import context as kernels
    from hmmgpu.search import routing as backends
    from hmmgpu.gpu import process as gpu_process

    monkeypatch.setattr(kernels, "cuda_driver_present", lambda: True)
    monkeypatch.setattr(gpu_process, "CudaProcessBackend", lambda **kw: "child")
    monkeypatch.delenv("HMMGPU_NO_GPU", raising=False)
    fasta = tmp_path / "db.fa"
    fasta.write_bytes(b">s\n" + b"A" * 2_000_000 + b"\n")
    options = SimpleNamespace(backend="auto", threads=16, device=0, lanes="auto", devices=None)
    assert backends.cpu_route_before_reading(options, str(fasta), [1000] * 2000) is None
    assert backends.start_gpu_early(options, str(fasta), None, [1000] * 2000) == "child"
    assert backends.cpu_route_before_reading(options, str(fasta), [100] * 20000) == backends._SMALL_MODELS


def test_few_models_go_to_pyhmmer_while_the_backend_starts(monkeypatch, references):
    """With auto and fewer models than threads, while the backend is not ready, models take
    pyhmmer's whole pipeline (a large one only from REROUTE_AFTER_SECONDS into the search, a
    small one at once); once it is, its filters: every result equals the serial run's
    whichever route its model took. With as many models as threads, or a backend named
    explicitly, every large model goes through the filters (the search waits for the
    backend); a small model (here: any, the sample proteome being small) does not wait."""
    from hmmgpu.search import engine as engine_module
    from hmmgpu.search.engine import SearchEngine
    from hmmgpu.options import SearchOptions

    hmms, block, expected = references
    db = SequenceDB.from_block(block)
    # the rule for models without a head start (whose plan is one range); head starts:
    # test_a_head_start_on_the_whole_pipeline_gives_a_serial_run
    monkeypatch.setattr(engine_module.SearchEngine, "head_start", lambda engine, query: None)
    for backend_name, cpus, small, delay, rerouted in (
            ("auto", 8, False, 0.0, 2), ("auto", 8, False, 60.0, 0), ("auto", 4, False, 0.0, 0),
            ("auto", 4, True, 60.0, 2), ("auto", 0, True, 0.0, 0), ("cuda", 8, True, 0.0, 0)):
        monkeypatch.setattr(costs, "SMALL_MODEL_CELLS", 5e8 if small else 0.0)
        monkeypatch.setattr(engine_module, "REROUTE_AFTER_SECONDS", delay)
        backend = _StartingBackend(db, answers_before_ready=2)
        engine = SearchEngine(db, SearchOptions.from_kwargs(backend=backend_name, cpus=cpus), backend,
                              model_lengths=[h.M for h in hmms])
        for ours, ref in zip(engine.search(hmms), expected):
            assert len(ours.hits) == len(ref)
            assert hits_table(ours.hits, "domains") == hits_table(ref, "domains")
            assert_same_pipeline(ours.pipeline, ref, COUNTER_KEYS)  # the engine's counters
        stats = engine.stats
        case = (backend_name, cpus, small, delay)
        assert (stats.pipeline_queries, stats.filtered_queries) == (rerouted, len(hmms) - rerouted), case
        assert stats.forward_seconds > 0 and stats.ready_seconds is not None
        assert (stats.pipeline_seconds > 0) == bool(rerouted)


class _ReadyAfterRanges(_StartingBackend):
    """A starting backend that becomes ready once ``ranges`` tasks on pyhmmer's whole
    pipeline have run (None: never, though a caller that waits without a timeout gets it)."""

    def __init__(self, db, ranges):
        super().__init__(db)
        self.ranges, self.ran = ranges, 0

    def ready(self, timeout=None):
        return timeout is None or (self.ranges is not None and self.ran >= self.ranges)


@pytest.mark.parametrize("ranges, as_text", [(2, True), (None, True), (2, False)])
def test_a_head_start_on_the_whole_pipeline_gives_a_serial_run(references, tmp_path, monkeypatch, ranges, as_text):
    """One model with auto while the backend starts: its ranges of a made database go to
    pyhmmer's whole pipeline at once, claimed in order; once the backend is ready (here after
    two ranges ran) the filters take the targets not yet claimed (a range claimed after those
    two waits until they have: on a loaded machine the workers could otherwise claim every
    range before the engine looks at the backend again). Hits, the kept set, Z,
    domZ and every counter equal one serial run's, at an E where HMMER's keep rule drops hits,
    with names repeated inside a range and across ranges. A backend that is never ready leaves
    every range to the whole pipeline. Where the ranges would first make every target a
    sequence object (not read as text), there is no head start: the model is rerouted whole."""
    from hmmgpu.stages import postfilter as forward_stage
    from hmmgpu.search import engine as engine_module
    from hmmgpu.search.engine import SearchEngine
    from hmmgpu.options import SearchOptions

    monkeypatch.setattr(costs, "SMALL_MODEL_CELLS", 0.0)
    monkeypatch.setattr(engine_module, "REROUTE_AFTER_SECONDS", 0.0)
    if not as_text:
        monkeypatch.setattr(forward_stage, "TEXT_SECONDS_PER_RESIDUE", 1.0)
    hmm, E, renamed, expected, db = _made_database_case(references, tmp_path, monkeypatch)
    n = len(renamed)
    backend = _ReadyAfterRanges(db, ranges)
    run = PyhmmerStage.run

    def counted(stage, task, alone=False):
        head = task.query.head
        if ranges is not None and head is not None and not task.filtered and task.part >= ranges:
            give_up = time.monotonic() + 30
            while not head._stopped and time.monotonic() < give_up:   # the engine saw the backend ready
                time.sleep(0.001)
        outcome = run(stage, task, alone)
        backend.ran += not task.filtered
        return outcome

    monkeypatch.setattr(PyhmmerStage, "run", counted)
    engine = SearchEngine(db, SearchOptions.from_kwargs(backend="auto", cpus=3, E=E), backend, model_lengths=[hmm.M])
    assert len(engine.forward.plan(SimpleNamespace(hmm=hmm))) > 5
    result = next(engine.search([hmm]))
    assert len(result.hits) == len(expected)
    assert hits_table(result.hits, "domains") == hits_table(expected, "domains")
    assert_same_pipeline(result.hits, expected)
    assert_same_pipeline(result.pipeline, expected, COUNTER_KEYS)
    stats = engine.stats
    assert engine.forward.ranges_make_sequences == (not as_text)
    if ranges is None or not as_text:
        assert (stats.filtered_queries, stats.pipeline_queries, stats.head_start_targets) == (0, 1, 0)
    else:
        assert (stats.filtered_queries, stats.pipeline_queries) == (1, 0)
        assert 0 < stats.head_start_targets < n and stats.forward_seconds > 0 and stats.pipeline_seconds > 0
        assert any("searched on the whole pipeline while the filters started" in line for line in stats.lines())


class _BehindBackend(NumbaBackend):
    """A ready cascade backend that says, the first ``behind`` times it is asked, that
    ``SHARE_BACKLOG`` models are waiting for its answer (a GPU process that is behind)."""

    def __init__(self, db, behind: int):
        super().__init__(db)
        self.behind = behind

    def waiting(self):
        from hmmgpu.search.engine import SHARE_BACKLOG

        self.behind -= 1
        return SHARE_BACKLOG if self.behind >= 0 else 0


class _OutOfOrderBackend(NumbaBackend):
    """A ready cascade backend whose results come back in any order, as the GPU process's do:
    once the engine has asked after every one of the ``models`` (all of them sent and waiting
    in its finishing thread: a model submitted but not yet handed to that thread is not
    asked after), each :meth:`receive` answers the newest model not yet answered; the order in
    which the engine took the results is kept (``taken``)."""

    answers_in_order = False

    def __init__(self, db, models: int):
        super().__init__(db)
        self.models, self.submitted, self.unanswered, self.taken = models, 0, [], []

    def submit(self, profile, options):
        ticket = _HeldTicket(self, self.submitted, super().submit(profile, options))
        self.unanswered.append(ticket)
        self.submitted += 1
        return ticket

    def receive(self, timeout):
        if self.unanswered and sum(ticket.asked for ticket in self.unanswered) + len(self.taken) == self.models:
            self.unanswered.pop().done = True

    def waiting(self):
        return len(self.unanswered)


class _HeldTicket:
    def __init__(self, backend, number, finished):
        self.backend, self.number, self.finished, self.done, self.asked = backend, number, finished, False, False

    def answered(self):
        self.asked = True
        return self.done

    def result(self):
        assert self.done, "a result taken before it was answered"
        self.backend.taken.append(self.number)
        return self.finished.result()


def test_results_that_come_back_out_of_order_are_taken_as_they_come(references):
    """A backend whose results come in any order (the GPU process): the engine cuts each model's
    work into tasks as its result comes, not in the order the models were sent, and yields every
    model's hits, equal to pyhmmer's, in query order."""
    from hmmgpu.search.engine import SearchEngine
    from hmmgpu.options import SearchOptions

    hmms, block, expected = references
    db = SequenceDB.from_block(block)
    backend = _OutOfOrderBackend(db, len(hmms))
    engine = SearchEngine(db, SearchOptions.from_kwargs(backend="cuda", cpus=2), backend)
    results = list(engine.search(hmms))
    assert [r.hits.query.name for r in results] == [h.name for h in hmms]
    for ours, ref in zip(results, expected):
        assert hits_table(ours.hits) == hits_table(ref) and hits_table(ours.hits, "domains") == hits_table(ref, "domains")
        assert_same_pipeline(ours.pipeline, ref, COUNTER_KEYS)
    assert backend.taken == list(range(len(hmms)))[::-1]


def test_the_gpu_process_answers_each_model_by_its_number():
    """The GPU process sends a model's result as soon as it is done, with the model's number,
    whatever the models before it (``_send_ready``); the parent gives each answer to that
    model's ticket, an error included, and a child that stops answers every model left."""
    import threading
    from types import SimpleNamespace

    from hmmgpu.gpu import process as gpu_process

    class Entry:  # a GateTicket: done or not
        def __init__(self, done, value):
            self.done, self.value = done, value

        def ready(self):
            return self.done

        def result(self):
            return self.value

    sent = []
    gating = [(0, "model", Entry(False, "a")), (1, "model", Entry(True, "b")), (2, "error", "bad model"),
              (3, "model", Entry(True, "d"))]
    left = gpu_process._send_ready(SimpleNamespace(send=lambda message, failed=None: sent.append(message)), gating)
    assert sent == [("done", 1, "b"), ("error", 2, "bad model"), ("done", 3, "d")] and [e[0] for e in left] == [0]

    child = object.__new__(gpu_process.CudaProcessBackend)
    child._receive_lock, child._send_lock, child._ready_reply = threading.Lock(), threading.Lock(), ("ready",)
    child._unanswered, child._sent, child._answers = {}, 0, {}
    child._conn = SimpleNamespace(send=lambda message: None, poll=lambda timeout: True)
    tickets = [child.submit(SimpleNamespace(hmm=None, mmu=None), None) for _ in range(4)]
    replies = iter(sent + [("done", 0, "a")])
    child._receive = lambda: next(replies)
    child.receive(0.0)   # every reply that has come: models 1, 2, 3 and then 0
    assert [t.answered() for t in tickets] == [True] * 4 and child.waiting() == 0
    assert [tickets[k].result() for k in (0, 1, 3)] == ["a", "b", "d"]
    with pytest.raises(HmmgpuError, match="bad model"):
        tickets[2].result()
    more = [child.submit(SimpleNamespace(hmm=None, mmu=None), None) for _ in range(2)]

    def stopped():
        raise HmmgpuError("the GPU process stopped (exit code 1)")

    child._receive = stopped
    with pytest.raises(HmmgpuError, match="stopped"):
        more[1].result()
    with pytest.raises(HmmgpuError, match="stopped"):
        more[0].result()



def test_the_gpu_process_writes_its_answers_in_order_from_a_thread():
    """The GPU process's answers go out through ``_Sender``: in the order queued, each read
    whole by the parent's end of a real socket pair; an answer that cannot be pickled replaced
    by its failure; ``close`` returns once every answer queued is written; with the parent gone,
    answers are dropped and ``close`` still returns."""
    import multiprocessing
    import threading

    from hmmgpu.gpu import process as gpu_process

    parent, child = multiprocessing.Pipe()
    big = np.arange(3_000_000, dtype=np.int64)   # 24 MB: far more than the socket holds
    sender = gpu_process._Sender(child)
    sender.send(("done", 0, big))
    sender.send(("done", 1, threading.Lock()), lambda error: ("error", 1, type(error).__name__))
    sender.send(("stats", {"n": 2}))
    got = [parent.recv() for _ in range(3)]
    sender.close()
    assert got[0][:2] == ("done", 0) and np.array_equal(got[0][2], big)
    assert got[1] == ("error", 1, "TypeError") and got[2] == ("stats", {"n": 2})
    parent.close()
    sender = gpu_process._Sender(child)
    sender.send(("done", 2, big))
    sender.send(("done", 3, "x"))
    sender.close()
    child.close()

def test_small_models_go_to_pyhmmer_while_the_backend_is_behind(monkeypatch, references):
    """With auto, a small model goes to pyhmmer's whole pipeline when the workers are short of
    work and the backend is behind, and to the filters once it has caught up; a large model,
    or any with a backend named explicitly, always goes to the filters. Every result equals
    the serial run's."""
    from hmmgpu.search.engine import SearchEngine
    from hmmgpu.options import SearchOptions

    hmms, block, expected = references
    db = SequenceDB.from_block(block)
    small = costs.SMALL_MODEL_CELLS
    assert max(h.M for h in hmms) * db.total_residues <= small  # all small here
    for backend_name, limit, rerouted in (("auto", small, 3), ("auto", 0.0, 0), ("cuda", small, 0)):
        monkeypatch.setattr(costs, "SMALL_MODEL_CELLS", limit)
        engine = SearchEngine(db, SearchOptions.from_kwargs(backend=backend_name, cpus=8), _BehindBackend(db, behind=3))
        for ours, ref in zip(engine.search(hmms), expected):
            assert hits_table(ours.hits) == hits_table(ref) and hits_table(ours.hits, "domains") == hits_table(ref, "domains")
            assert_same_pipeline(ours.pipeline, ref, COUNTER_KEYS)
        stats = engine.stats
        assert (stats.pipeline_queries, stats.filtered_queries) == (rerouted, len(hmms) - rerouted), backend_name
        assert (stats.pipeline_seconds > 0) == bool(rerouted) and stats.forward_seconds > 0


def test_odd_names_descriptions_and_residues_survive_the_pyhmmer_stage(tmp_path):
    """Homologs renamed with odd headers and sprinkled with B/Z/X/*/gaps: tables equal pyhmmer's."""
    from pyhmmer.plan7 import HMMFile

    with HMMFile(SAMPLES / "PF02826.hmm") as f:
        hmm = f.read()
    db = SequenceDB.from_fasta(PROTEOME)
    hits = next(hmmgpu.hmmsearch([hmm], db, engine="numba"))
    names = {h.name if isinstance(h.name, bytes) else h.name.encode() for h in hits.reported}
    headers = [b"odd|name:1 two  spaces   and trailing   ", b"tab\tdesc", b"gt>in>name has > in desc",
               b"x", b"unicode_\xc3\xa9 caf\xc3\xa9", b"brackets[1] (desc) {x}"]
    records = []
    for k, i in enumerate(i for i in range(db.n) if db.name(i) in names):
        seq = bytearray(b"ACDEFGHIKLMNPQRSTVWY.BJZOUX*~"[c] for c in db.codes(i))
        for j, ch in zip(range(5, len(seq), 37), b"BZX*.JU~"):
            seq[j] = ch
        records.append(b">" + headers[k % len(headers)] + b"_%d\n" % k + bytes(seq) + b"\n")
    fasta = tmp_path / "odd.fa"
    fasta.write_bytes(b"".join(records))
    with SequenceFile(str(fasta), format="fasta", digital=True, alphabet=AMINO) as f:
        expected = next(pyhmmer.hmmsearch([hmm], f.read_block(), cpus=1))
    ours = next(hmmgpu.hmmsearch([hmm], str(fasta), engine="numba", cpus=3))
    assert len(expected.reported) >= 10
    assert len(ours) == len(expected)
    assert hits_table(ours, "domains") == hits_table(expected, "domains")


@pytest.mark.parametrize("backend", ["hmmer", "numba"])
def test_a_name_repeated_in_another_task_is_kept_by_its_own_position(references, backend, monkeypatch):
    """HMMER keeps a hit while it searches if P x (its position + 1) <= E. A late target named
    like the first one is judged at its own position, not at the first's: the kept set (the
    number of hits, the tables' name width) equals one serial run's."""
    from pyhmmer.easel import DigitalSequenceBlock

    from hmmgpu.stages import postfilter as forward_stage

    monkeypatch.setattr(forward_stage, "SPLIT_MIN_CELLS", 1.0e5)
    block = references[1]
    # a hit in the last quarter, and E just under what keeping it there needs: its task starts
    # before the middle (two tasks), so its own P x (task start + 1) is within E
    hmm, _, _, E, late = _late_hit_model(references)
    first = block[0].copy()
    first.name = late.name
    renamed = DigitalSequenceBlock(AMINO, [first] + list(block)[1:])
    expected = PyhmmerPipeline(AMINO, E=E).search_hmm(hmm, renamed)
    with hmmgpu.Pipeline(renamed, backend=backend, cpus=2, E=E) as pli:
        ours = pli.search_hmm(hmm)
        assert pli.stats.tasks >= 2
    assert late.name not in {h.name for h in expected}
    assert len(ours) == len(expected)
    assert hits_table(ours, "domains") == hits_table(expected, "domains")


@pytest.mark.parametrize("postfilter", ["pyhmmer", "hmmgpu"])
def test_a_database_holding_its_targets_twice_is_cut_by_occurrence(references, postfilter):
    """Every name twice (the proteome written twice, as a replicated benchmark database is):
    a query's survivors are cut into tasks in which no name repeats, each name's first
    occurrence in one and its second in another, not into a task for each repeated target; the
    kept set, tables and counters equal one serial run's at an E where HMMER's keep rule drops
    hits (a hit's position is found from its name within its task), with pyhmmer's stage and
    hmmgpu's own."""
    from pyhmmer.easel import DigitalSequenceBlock

    block = references[1]
    hmm, _, _, E, _ = _late_hit_model(references)
    doubled = DigitalSequenceBlock(AMINO, list(block) + list(block))
    expected = PyhmmerPipeline(AMINO, E=E).search_hmm(hmm, doubled)
    with hmmgpu.Pipeline(doubled, backend="numba", cpus=2, E=E, postfilter=postfilter) as pli:
        ours = pli.search_hmm(hmm)
        tasks = pli.stats.tasks
    assert len(expected) < len(PyhmmerPipeline(AMINO, Z=1, E=E).search_hmm(hmm, doubled))  # the rule drops some
    assert len(ours) == len(expected) and hits_table(ours, "domains") == hits_table(expected, "domains")
    assert_same_pipeline(ours, expected)
    assert 2 <= tasks <= 4 < len(expected)


def _late_hit_model(references) -> tuple:
    """A sample model with a significant hit in the last quarter of the proteome, and an E
    just under what keeping that hit at its position needs (HMMER's keep rule, P x (position
    + 1) <= E, then drops hits): (model, each target's position by name, each model's hits
    with Z = 1, E, the late hit)."""
    hmms, block, _ = references
    position = {s.name: p for p, s in enumerate(block)}
    scored = {hmm.name: PyhmmerPipeline(AMINO, Z=1, E=1e9).search_hmm(hmm, block) for hmm in hmms}
    hmm, late = next((hmm, h) for hmm in hmms for h in scored[hmm.name]
                     if position[h.name] > 3 * len(block) // 4 and h.pvalue < 1e-4)
    return hmm, position, scored, 0.9 * late.pvalue * (position[late.name] + 1), late


def _renamed_fasta(tmp_path, block, renames: dict, descriptions: dict):
    """``block`` as a FASTA file, the targets at the positions of ``renames`` given those names
    (written after blanks where the name starts with one), those of ``descriptions`` those."""
    lines = []
    for p, seq in enumerate(block):
        text = seq.textize()
        name = renames.get(p, text.name)
        lines.append(f">{name} {descriptions.get(p, text.description)}\n{text.sequence}\n")
    path = tmp_path / "renamed.fa"
    path.write_text("".join(lines))
    return path


@pytest.mark.parametrize("cpus", [0, 3])
def test_a_file_searched_piece_by_piece_gives_a_serial_run(references, tmp_path, cpus):
    """One model on pyhmmer's route over a file cut into pieces that pyhmmer reads itself
    (about 30 KB each here): hits, the kept set, Z, domZ and counters of one serial run, at an
    E where HMMER's keep rule (P x position <= E) drops hits, with names repeated in one piece
    and across pieces, a name written after blanks (a hit's position is then found from
    pyhmmer's sequences, or by running its targets alone) and a '>' in a description (which
    does not start a record)."""
    from hmmgpu.cpu.backends import HmmerBackend
    from hmmgpu.search.engine import SearchEngine
    from hmmgpu.options import SearchOptions
    from hmmgpu.formats.seqdb import FastaPieces

    block = references[1]
    hmm, position, scored, E, late = _late_hit_model(references)
    borderline = [position[h.name] for h in scored[hmm.name] if h.pvalue <= E < h.pvalue * (position[h.name] + 1)]
    n = len(block)
    renames = {0: late.name, n // 2 + 1: block[n // 2].name, n - 1: block[n - 2].name}
    renames[borderline[0] - 1] = block[borderline[0]].name  # a borderline hit's name, twice in its piece
    for b in (borderline[len(borderline) // 4], borderline[-1]):  # names after blanks
        renames[b] = "  " + block[b].name
    descriptions = {borderline[len(borderline) // 2] + 1: "a > in a description"}
    path = _renamed_fasta(tmp_path, block, renames, descriptions)
    with SequenceFile(str(path), digital=True, alphabet=AMINO) as f:
        renamed = f.read_block()
    expected = PyhmmerPipeline(AMINO, E=E).search_hmm(hmm, renamed)
    db = FastaPieces.open(path, 30_000)
    assert len(db.pieces) > 10
    options = SearchOptions.from_kwargs(backend="hmmer", cpus=cpus, E=E)
    engine = SearchEngine(db, options, HmmerBackend(db), model_lengths=[hmm.M])
    ours = next(engine.search([hmm])).hits
    assert len(expected) < len(PyhmmerPipeline(AMINO, Z=1, E=E).search_hmm(hmm, renamed))  # the rule drops some
    assert len(ours) == len(expected)
    assert hits_table(ours, "domains") == hits_table(expected, "domains")
    assert_same_pipeline(ours, expected)


def _made_database_case(references, tmp_path, monkeypatch) -> tuple:
    """One model's search of a made database cut into many ranges (small ranges allowed), at
    an E where HMMER's keep rule drops hits, with a name repeated inside one range and across
    ranges: (model, E, the targets, one serial pyhmmer run's hits, the made database)."""
    from hmmgpu.stages import postfilter as forward_stage

    monkeypatch.setattr(forward_stage, "SPLIT_MIN_CELLS", 1.0e5)
    monkeypatch.setattr(forward_stage, "PIECE_BYTES_MIN", 30_000)
    block = references[1]
    hmm, position, scored, E, late = _late_hit_model(references)
    n = len(block)
    middle = sorted(position[h.name] for h in scored[hmm.name])[len(scored[hmm.name]) // 2]
    renames = {0: late.name, middle + 3: block[middle].name, n - 1: block[n - 2].name}
    with SequenceFile(str(_renamed_fasta(tmp_path, block, renames, {})), digital=True, alphabet=AMINO) as f:
        renamed = f.read_block()
    expected = PyhmmerPipeline(AMINO, E=E).search_hmm(hmm, renamed)
    assert len(expected) < len(PyhmmerPipeline(AMINO, Z=1, E=E).search_hmm(hmm, renamed))  # the rule drops some
    SequenceDB.from_block(renamed).save(tmp_path / "made")
    return hmm, E, renamed, expected, SequenceDB.load(tmp_path / "made")


@pytest.mark.parametrize("as_text", [True, False])
def test_ranges_of_a_made_database_give_a_serial_run(references, tmp_path, monkeypatch, as_text):
    """One model on pyhmmer's route over ranges of a made database, each range read as FASTA
    text (``as_text``) or as sequence objects made once: hits, the kept set, Z, domZ and
    counters of one serial run, at an E where HMMER's keep rule drops hits, with a name
    repeated inside one range (those targets run alone; the rest of the range as runs of
    consecutive targets) and across ranges."""
    from hmmgpu.stages import postfilter as forward_stage
    from hmmgpu.cpu.backends import HmmerBackend
    from hmmgpu.search.engine import SearchEngine
    from hmmgpu.options import SearchOptions

    if not as_text:
        monkeypatch.setattr(forward_stage, "TEXT_SECONDS_PER_RESIDUE", 1.0)
    hmm, E, renamed, expected, db = _made_database_case(references, tmp_path, monkeypatch)
    n = len(renamed)
    engine = SearchEngine(db, SearchOptions.from_kwargs(backend="hmmer", cpus=3, E=E), HmmerBackend(db), model_lengths=[hmm.M])
    assert engine.forward.ranges_as_text == as_text
    tasks = engine.forward.plan(SimpleNamespace(hmm=hmm))
    assert len(tasks) > 5 and all(np.all(np.diff(t.positions) == 1) for t in tasks)
    assert np.array_equal(np.sort(np.concatenate([t.positions for t in tasks])), np.arange(n))
    ours = next(engine.search([hmm])).hits
    assert len(ours) == len(expected)
    assert hits_table(ours, "domains") == hits_table(expected, "domains")
    assert_same_pipeline(ours, expected)
    assert 0 < engine.stats.cpu_seconds["workers"] < 600  # each task's own CPU time


def test_repeated_names_and_name_positions_of_a_made_database():
    """A made database finds its repeated names (short, long, empty; equal first and last
    bytes) as a count of every name would, and a range's targets by name."""
    from collections import Counter

    names = [b"a", b"b", b"a", b"", b"", b"long_name_same_head_1", b"long_name_same_head_2",
             b"long_name_same_head_1", b"x" * 9, b"x" * 10, b"abcdefgh", b"abcdefghi", b"abcdefgh_ends_abcdefgh"]
    block = pyhmmer.easel.DigitalSequenceBlock(AMINO, [
        pyhmmer.easel.TextSequence(name=n.decode(), sequence="ACDE").digitize(AMINO) for n in names])
    db = SequenceDB.from_block(block)
    count = Counter(names)
    assert db.repeated_names.tolist() == [count[n] > 1 for n in names]
    position = db.name_positions(8, 13)
    assert [position(n) for n in names[8:]] == list(range(8, 13))
    assert position(b"a") is None and position(b"x" * 8) is None and position(b"ends") is None
    proteome = SequenceDB.from_fasta(PROTEOME)
    assert not proteome.repeated_names.any()


def test_hit_positions_in_a_piece_are_found_from_its_header_lines(tmp_path):
    """A hit's index in a piece is told from the piece's bytes when every header line starts
    a target, whatever '>' the descriptions hold (UniProt writes 'C->U', 'Beta-(1-->2)'); a
    name that is written twice, or after blanks, or not at all is left to pyhmmer's sequences."""
    from hmmgpu.formats.seqdb import FastaPieces

    path = tmp_path / "gt.fa"
    path.write_text(">a C->U-editing enzyme\nACDE\n>b Beta-(1-->2)glucan >c\nKLMN\n"
                    ">c\nPQRS\n>  d blank\nACDE\n>e\nAC\n>e\nDE\n")
    pieces = FastaPieces.open(path, 1 << 20)
    assert pieces.records_at_most(0) == 9  # every ">" byte: an upper bound on the targets
    found = pieces.record_indices(0, 6, [b"a", b"b", b"c", b"d", b"e", b"x"])
    assert found == {b"a": 0, b"b": 1, b"c": 2, b"d": None, b"e": None, b"x": None}
    assert pieces.record_indices(0, 7, [b"a"]) == {b"a": None}  # Easel counted otherwise: tell nothing


def test_a_gzip_file_is_cut_into_pieces_by_its_text_size(tmp_path):
    """The piece size of a file searched piece by piece comes from its text, which a gzip
    file's size on disk tells only roughly: plain and gzip give the same pieces."""
    import gzip

    from hmmgpu.formats.seqdb import FastaPieces

    text = PROTEOME.read_bytes()
    plain, packed = tmp_path / "p.fa", tmp_path / "p.fa.gz"
    plain.write_bytes(text)
    packed.write_bytes(gzip.compress(text))
    sizes = []
    pieces = [FastaPieces.open(p, lambda left: sizes.append(left) or len(text) // 7) for p in (plain, packed)]
    assert sizes[0] == len(text) and sizes[:len(sizes) // 2] == sizes[len(sizes) // 2:]
    assert pieces[0].pieces == pieces[1].pieces and len(pieces[0].pieces) == 7


def test_a_file_is_cut_into_pieces_that_shrink_towards_its_end(monkeypatch):
    """Guided self-scheduling: each piece is a share of the text not yet cut (within the size
    bounds), so the pieces shrink towards the end of the file; every piece starts a record
    and together they are the whole file."""
    from hmmgpu.stages import postfilter as forward_stage
    from hmmgpu.formats.seqdb import FastaPieces

    monkeypatch.setattr(forward_stage, "PIECE_BYTES_MIN", 4096)
    db = FastaPieces.open(PROTEOME, lambda left: forward_stage.piece_bytes(left, 5000, 2))
    text = PROTEOME.read_bytes()
    sizes = [b - a for a, b in db.pieces]
    assert db.pieces[0][0] == 0 and db.pieces[-1][1] == len(text)
    assert all(a == b for (_, b), (a, _) in zip(db.pieces, db.pieces[1:]))
    assert all(text[a:a + 1] == b">" for a, _ in db.pieces)
    assert sizes[0] >= len(text) // 16 and sizes[0] > 4 * max(sizes[-3:])
    assert all(size >= 4096 for size in sizes[:-1])
    assert forward_stage.piece_bytes(1e12, 200, 16) == forward_stage.PIECE_BYTES_MAX
    # a short model's pieces hold at least PIECE_CELLS_MIN cells; from M = 137, PIECE_BYTES_MIN rules
    assert forward_stage.piece_bytes(0, 20, 16) == int(forward_stage.PIECE_CELLS_MIN / 20)
    monkeypatch.undo()
    assert forward_stage.piece_bytes(0, 137, 16) == forward_stage.PIECE_BYTES_MIN


def test_a_bad_record_late_in_a_file_searched_piece_by_piece_is_a_one_line_error(tmp_path, capsys):
    """A file searched piece by piece: a bad byte in its last record, or a target over
    HMMER's length limit there, stops the search with the reader's one-line error and leaves
    an existing output file as it was."""
    text = PROTEOME.read_text()
    cases = {"bad.fa": (text + ">late\nACDE-FG\n", "line"),
             "long.fa": (text + ">late_long\n" + "A" * 100_001 + "\n", "late_long")}
    for name, (content, said) in cases.items():
        path = tmp_path / name
        path.write_text(content)
        code, err = failed_search(tmp_path, capsys, "--backend", "hmmer", "--cpu", "3",
                                  str(SAMPLES / "Thioesterase.hmm"), str(path))
        assert code != 0
        assert err[-1].startswith("hmmgpu: error:") and said in err[-1], err


def test_a_piece_that_cannot_be_written_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    """The pieces of a file go through temporary files: a directory that refuses them is a
    one-line error, not a traceback."""
    from hmmgpu.formats import seqdb

    monkeypatch.setattr(seqdb, "memory_tmpdir", lambda: str(tmp_path / "missing"))
    code = main(["search", "--backend", "hmmer", "--cpu", "3", "-o", "/dev/null", str(SAMPLES / "Thioesterase.hmm"),
                 str(PROTEOME)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0
    assert err[-1].startswith("hmmgpu: error: cannot write a piece of") and "missing" in err[-1], err


@pytest.mark.parametrize("name,bias_filter", [("PF02826", True), ("LuxC", True), ("KR", False)])
def test_forward_gate_decides_f3_as_hmmer(name, bias_filter):
    """The Forward gate of the numba backend (the CPU reference of the GPU's Forward parser):
    at the default F3 and at F3 values that fall between two Viterbi-filter survivors'
    P-values as narrowly as a double allows (a P-value itself, which passes, and the double
    below it), the targets it sends on are exactly those whose Forward P-value, from HMMER's
    own functions, is <= F3; the search's tables, kept hits and every counter equal a full
    pyhmmer search (n_past_fwd: pyhmmer's count on what the gate sent on)."""
    from hmmgpu.options import SearchOptions
    from hmmgpu.search.engine import SearchEngine

    db = SequenceDB.from_fasta(PROTEOME)
    hmm = sample_hmm(name)
    backend = NumbaBackend(db)
    base = SearchOptions.from_kwargs(backend="numba", cpus=2, bias_filter=bias_filter)
    profile = backend.prepare(hmm)
    past_vit = backend.cascade(profile, base).past_vit
    pvalues = forward_pvalues(hmm, db, past_vit, bias_filter)
    values = narrow_f3(pvalues)
    assert len(values) == 4 and np.isfinite(pvalues).all()
    for F3 in [1e-5] + values:
        options = base.replace(F3=F3)
        result = backend.cascade(profile, options)
        gate = result.forward
        want = past_vit[pvalues <= F3]
        assert np.array_equal(result.past_vit, past_vit) and np.array_equal(result.survivors, want), F3
        assert (gate.passed, gate.failed, gate.unsure.size) == (want.size, past_vit.size - want.size, 0)
        engine = SearchEngine(db, options, backend)
        ours = next(iter(engine.search([hmm])))
        ref = PyhmmerPipeline(hmm.alphabet, **options.pipeline_kwargs()).search_hmm(hmm, db.block())
        for fmt in ("targets", "domains"):
            assert hits_table(ours.hits, fmt) == hits_table(ref, fmt), (F3, fmt)
        assert len(ours.hits) == len(ref)
        assert_same_pipeline(ours.hits, ref)
        assert ref.__getstate__()["pipeline"]["n_past_fwd"] == want.size
        assert engine.stats.forward_gate == dict(passed=want.size, failed=past_vit.size - want.size, unsure=0)
        line = engine.stats.forward_gate_line()
        assert f"{past_vit.size - want.size} failed F3" in line and line in engine.stats.lines()
        # the timeline of the filters' answers and of the post-filter's first task
        stats = engine.stats
        assert 0 <= stats.ready_seconds <= stats.last_answer_seconds <= stats.wall_seconds
        models = next(line for line in stats.lines() if line.startswith("models: "))
        assert f"their last answer after {stats.last_answer_seconds:.2f} s" in models
        if want.size:
            assert stats.ready_seconds <= stats.first_task_seconds <= stats.wall_seconds
            assert f"first task after {stats.first_task_seconds:.2f} s" in models


def test_forward_gate_line_gives_the_forward_kernels_gcups():
    """The statistics' Forward filter line gives the Forward parser kernel's throughput, model
    length x residues it ran (the GPU backend's ``forward_gate`` cells) over its kernel time."""
    from hmmgpu.search.engine import EngineStats

    stats = EngineStats(forward_gate=dict(passed=3, failed=5, unsure=1),
                        backend=dict(kernel_ms=dict(forward=2000.0), forward_gate=dict(passed=3, failed=5, unsure=1,
                                                                                   cells=4 * 10 ** 12)))
    line = stats.forward_gate_line()
    assert "9 Viterbi-filter survivors, 5 failed F3" in line
    assert line.endswith("Forward kernel 2000.0 ms, 2000.0 GCUPS (model length x residues it ran)"), line
    assert "GCUPS" not in EngineStats(forward_gate=dict(passed=1, failed=0, unsure=0)).forward_gate_line()


def test_gpu_process_cpu_time_joins_the_run_statistics():
    """The GPU processes' CPU time (their statistics' ``process_cpu_seconds``) is the CPU time
    line's ``gpu_processes``: one process's, several devices' summed, none on the CPU route."""
    from hmmgpu.search.engine import gpu_process_cpu_seconds

    assert gpu_process_cpu_seconds({"kernel_ms": {}, "process_cpu_seconds": 12.5}) == 12.5
    assert gpu_process_cpu_seconds({"device 0": {"models": 3, "process_cpu_seconds": 2.0},
                                    "device 1": {"models": 4, "process_cpu_seconds": 3.5}}) == 5.5
    assert gpu_process_cpu_seconds({"kernel_ms": {"msv": 1.0}}) is None
    assert gpu_process_cpu_seconds({}) is None
    from hmmgpu.search.engine import EngineStats

    total, part = EngineStats(), EngineStats()   # a part's statistics (a worker process's) add up, GPU processes too
    part.cpu_seconds.update(workers=2.0, gpu_processes=3.0)
    total.add(part)
    total.add(part)
    assert total.cpu_seconds["workers"] == 4.0 and total.cpu_seconds["gpu_processes"] == 6.0


def test_take_last_hands_the_gpu_the_tasks_queued_last(monkeypatch):
    """Once the filters are done the engine hands the GPU process the tasks the workers would reach
    last: the fewest whose F3 passers make up the share asked of every eligible task's queued (at
    most RECLAIM_MAX_PASSERS), none when that is under RECLAIM_MIN_PASSERS; every other entry (an
    ineligible task, the workers' stop marks) stays queued, in its order. The share is the
    margin's part of the GPU's speed over both speeds."""
    import queue

    from hmmgpu.search import engine

    def filled():
        work = queue.PriorityQueue()
        for index in range(6):   # query index, part, task: tasks of 100 passers, query 3's ineligible
            work.put((index, 0, SimpleNamespace(name=index, passers=None if index == 3 else np.arange(100))))
        work.put((np.iinfo(np.int64).max, 0, None))
        return work

    def names(work):
        out = []
        while not work.empty():
            index, _, task = work.get()
            out.append(index if task is None else task.name)
        return out

    monkeypatch.setattr(engine, "RECLAIM_MARGIN", 0.8)
    assert engine.reclaim_share(1000.0, 3000.0) == pytest.approx(0.2) and engine.reclaim_share(0.0, 0.0) == 0.0
    monkeypatch.setattr(engine, "RECLAIM_MARGIN", 1e9)
    assert engine.reclaim_share(1.0, 1e6) == 1.0
    monkeypatch.setattr(engine, "RECLAIM_MIN_PASSERS", 200)
    work = filled()
    taken = engine._take_last(work, lambda task: task.passers, 0.5)
    assert [task.name for task, _ in taken] == [2, 4, 5]   # half of 500 eligible passers: 5, 4, 2 reach it
    assert names(work) == [0, 1, 3, np.iinfo(np.int64).max]
    monkeypatch.setattr(engine, "RECLAIM_MAX_PASSERS", 100)
    monkeypatch.setattr(engine, "RECLAIM_MIN_PASSERS", 100)
    taken = engine._take_last(work := filled(), lambda task: task.passers, 0.5)
    assert [task.name for task, _ in taken] == [5] and len(names(work)) == 6
    monkeypatch.setattr(engine, "RECLAIM_MIN_PASSERS", 101)   # the share capped at 100: under the least
    assert engine._take_last(work := filled(), lambda task: task.passers, 0.5) == [] and len(names(work)) == 7
