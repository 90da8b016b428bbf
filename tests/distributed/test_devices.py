"""Several devices searching together (``--devices``, ``devices=``) write exactly what one device writes.

There is no GPU in CI, so the devices' backends here are hmmgpu's exact CPU filters
(``NumbaBackend``), one per "device", made where routing makes a GPU process
(``routing.device_backend``), with the machine said to have two GPUs. Everything else is the
real route: the options, the routing plan, :class:`~hmmgpu.search.multidevice.MultiDeviceBackend`
(its shared queue, feeders and collectors), the engine, the merge and the outputs. Each
device holds at most one model at a time, so that both take models. The report and the
three tables equal a one-device run byte for byte (but the per-query timing lines), and the
tables equal hmmsearch's row for row; hmmscan's narrowing over two devices gives the same
survivors as over one. Errors: ``--devices`` naming a GPU the machine lacks is one line.
"""
import collections
import threading
import time

import pytest

import hmmgpu
import hmmgpu.distributed
import hmmgpu.search.engine as engine
import hmmgpu.search.multidevice as multidevice
from hmmgpu.cli import build_parser, main
from hmmgpu.cpu.backends import NumbaBackend
from hmmgpu.formats.hmmfile import read_models
from hmmgpu.formats.seqdb import SequenceDB
from hmmgpu.gpu.runtime import context
from hmmgpu.options import SearchOptions
from hmmgpu.search import routing
from hmmgpu.search.scan import CascadeNarrowing, ProfileDatabase
from tests.cpu.test_pyhmmer_processes import threads_then_processes
from tests.distributed.test_cluster import MODELS, OUTPUTS, _search, _steady, tables_equal_hmmsearch
from tests.helpers import PIPELINE_KEYS, PROTEOME, assert_same_pipeline, hits_table
from tests.search.test_scan import first_sequences



@pytest.fixture
def two_devices(monkeypatch):
    """A machine with two "GPUs" whose backends are hmmgpu's exact CPU filters, each holding at
    most one model at a time; the made backends, by device, in ``made``."""
    made = {}

    def device_backend(run, device, db=None, **kwargs):
        made.setdefault(device, []).append(NumbaBackend(db))
        return made[device][-1]

    monkeypatch.setattr(routing, "device_backend", device_backend)
    monkeypatch.setattr(context, "cuda_device_count", lambda: 2)
    monkeypatch.setattr(multidevice, "MODELS_AHEAD_PER_DEVICE", 1)
    return made


def test_two_devices_write_what_one_writes_and_hmmsearch(tmp_path, capsys, two_devices):
    code, err, ours = _search(tmp_path / "devices", ["--backend", "cuda", "--devices", "all", "--cpu", "2",
                                                      str(MODELS), str(PROTEOME)], capsys)
    assert code == 0, err
    assert "backend numba on 2 devices (ids 0,1): numba (hmmgpu's exact CPU filters); numba" in err
    assert sorted(two_devices) == [0, 1]
    code, err, one = _search(tmp_path / "one", ["--backend", "cuda", "--devices", "1", "--cpu", "2", str(MODELS),
                                                 str(PROTEOME)], capsys)
    assert code == 0, err
    assert set(ours) == set(OUTPUTS.values())
    for name in OUTPUTS.values():   # the tables' tail too: --devices is left out of the recorded command
        assert _steady(ours[name]) == _steady(one[name]), name
    tables_equal_hmmsearch(tmp_path, ours)


def test_own_postfilter_over_two_devices_writes_what_one_writes(tmp_path, capsys, monkeypatch, two_devices):
    """With ``--postfilter hmmgpu`` each device holds the own post-filter's window of models
    (:data:`~hmmgpu.search.engine.MODELS_IN_FLIGHT_OWN_POSTFILTER_MIN`, here one model): both take
    models, and the outputs equal one device's byte for byte."""
    args = ["--backend", "cuda", "--postfilter", "hmmgpu", "--cpu", "2", str(MODELS), str(PROTEOME)]
    code, err, one = _search(tmp_path / "one", ["--devices", "0", *args], capsys)
    assert code == 0, err
    monkeypatch.setattr(engine, "MODELS_IN_FLIGHT_OWN_POSTFILTER_MIN", 1)
    budgets = []
    init = multidevice.MultiDeviceBackend.__init__
    monkeypatch.setattr(multidevice.MultiDeviceBackend, "__init__",
                        lambda self, *a, **k: budgets.append(k.get("models_ahead")) or init(self, *a, **k))
    filtered = collections.Counter()   # models filtered, by backend
    msv = NumbaBackend.msv
    monkeypatch.setattr(NumbaBackend, "msv", lambda self, *a, **k: filtered.update([id(self)]) or msv(self, *a, **k))
    code, err, ours = _search(tmp_path / "two", ["--devices", "all", *args], capsys)
    assert code == 0, err
    assert "on 2 devices (ids 0,1)" in err and len(two_devices[1]) == 1 and budgets == [1]
    assert all(filtered[id(backends[-1])] > 0 for backends in two_devices.values())
    assert set(ours) == set(OUTPUTS.values())
    for name in OUTPUTS.values():
        assert _steady(ours[name]) == _steady(one[name]), name


def test_post_filter_processes_behind_two_devices_write_what_the_threads_write(tmp_path, capsys, monkeypatch,
                                                                               two_devices):
    """pyhmmer's post-filter stage in worker processes (:mod:`hmmgpu.cpu.pyhmmer_processes`, the
    route of ``--devices`` on a host of many cores) behind two devices: the outputs byte for
    byte those of the engine's threads."""
    threads_then_processes(tmp_path, capsys, monkeypatch, ["--backend", "cuda", "--devices", "all", "--cpu", "2",
                                                           str(MODELS), str(PROTEOME)])
    assert sorted(two_devices) == [0, 1]


def test_api_devices_equal_one_device(two_devices):
    hmms = hmmgpu.read_hmms(MODELS) * 2
    with hmmgpu.Pipeline(str(PROTEOME), backend="cuda", devices=[1, 0], cpus=2) as pipeline:
        ours = [hits for _, hits in pipeline.search_hmms(hmms)]
        ran = {device: part["models"] for device, part in pipeline.backend.details().items()}
    assert sum(ran.values()) == len(hmms) and all(ran.values()), ran   # both devices took models
    with hmmgpu.Pipeline(str(PROTEOME), backend="cuda", devices="0", cpus=2) as pipeline:   # one device
        ref = [hits for _, hits in pipeline.search_hmms(hmms)]
    for a, b in zip(ours, ref, strict=True):
        for fmt in ("targets", "domains", "pfam"):
            assert hits_table(a, fmt) == hits_table(b, fmt)
        assert_same_pipeline(a, b, PIPELINE_KEYS)


def test_scan_narrowing_over_two_devices(tmp_path, two_devices):
    """hmmscan's narrowing: each model's cascade on one of two devices, the survivors and
    counters per sequence those of one device."""
    db = SequenceDB.from_fasta(first_sequences(tmp_path, 300))
    options = SearchOptions.from_kwargs(backend="cuda", devices="0,1")
    backend = routing.select_backend(options.run, db)
    assert isinstance(backend, multidevice.MultiDeviceBackend)
    one = NumbaBackend(db)
    try:
        narrowed = [CascadeNarrowing(db, b, options) for b in (backend, one)]
        for model in read_models(str(MODELS)):
            for narrowing in narrowed:
                narrowing.add(model)
        ours, ref = (n.survivors() for n in narrowed)
    finally:
        backend.close()
    assert [(list(a.indices), a.counts) for a in ours] == [(list(b.indices), b.counts) for b in ref]
    assert len(ProfileDatabase.read(str(MODELS))) == 4
    # models in flight per device (each device's budget), not one GPU's ring in all
    assert narrowed[0].window == 2 * multidevice.MODELS_AHEAD_PER_DEVICE and narrowed[1].window == 8


def _device_threads() -> list:
    return [t.name for t in threading.enumerate() if t.name.startswith("hmmgpu-device")]


def test_device_threads_end_with_the_work(two_devices):
    """The multi-device backend's threads (each device's start, feeder and collector) end when
    every model is answered, without close(wait=True); new work starts them again."""
    db = SequenceDB.from_fasta(PROTEOME)
    options = SearchOptions.from_kwargs(backend="cuda", devices="0,1")
    backend = routing.select_backend(options.run, db)
    try:
        for _ in range(2):
            tickets = [backend.submit(backend.prepare(model.hmm), options) for model in read_models(str(MODELS))]
            assert all(ticket.result().survivors.size for ticket in tickets)
            for _ in range(200):
                if not _device_threads():
                    break
                time.sleep(0.01)
            assert _device_threads() == []
    finally:
        backend.close(wait=False)


def _scan_argv(seqs, models) -> list:
    """The inputs of ``hmmgpu scan`` in the order its parser takes them."""
    scan = next(a for a in build_parser()._subparsers._group_actions if a.choices).choices["scan"]
    names = [a.dest for a in scan._actions if not a.option_strings]
    return [str(seqs) if name.startswith("seq") else str(models) for name in names]


def test_scan_command_over_two_devices(tmp_path, monkeypatch, two_devices):
    seqs = first_sequences(tmp_path, 200)
    outputs = {}
    for label, run in (("devices", ["--backend", "cuda", "--devices", "0,1"]), ("one", ["--backend", "cuda",
                                                                                       "--devices", "1"])):
        (tmp_path / label).mkdir()
        monkeypatch.chdir(tmp_path / label)   # the same output names: the tables' tail records them
        assert main(["scan", *run, "--cpu", "2", "-o", "report", "--tblout", "tbl", "--domtblout", "domtbl"]
                    + _scan_argv(seqs, MODELS)) == 0
        outputs[label] = {name: (tmp_path / label / name).read_bytes() for name in ("report", "tbl", "domtbl")}
    for name in ("report", "tbl", "domtbl"):
        assert _steady(outputs["devices"][name]) == _steady(outputs["one"][name]), name
    assert sorted(two_devices) == [0, 1]


@pytest.mark.parametrize("args,line", [
    (["--devices", "7"], "hmmgpu: error: --devices 7: no CUDA GPU with id 7 (this machine has 2 CUDA GPUs (ids 0-1))"),
    (["--devices", "0,2,3"], "hmmgpu: error: --devices 0,2,3: no CUDA GPU with id 2,3 (this machine has 2 CUDA GPUs "
                             "(ids 0-1))"),
    (["--devices", "0,x"], "hmmgpu: error: --devices: '0,x' is not 'all' or a list of GPU ids such as 0,2"),
    (["--devices", "all", "--backend", "hmmer"], "hmmgpu: error: --devices names GPUs for the GPU route; --backend "
                                                 "hmmer runs none (use --backend auto or cuda)"),
])
def test_devices_errors_are_one_line(tmp_path, capsys, monkeypatch, args, line):
    monkeypatch.setattr(context, "cuda_device_count", lambda: 2)
    assert main(["search", *args, "--tblout", str(tmp_path / "t.tbl"), str(MODELS), str(PROTEOME)]) != 0
    assert capsys.readouterr().err.strip().splitlines()[-1] == line
    assert not (tmp_path / "t.tbl").exists()


def test_devices_without_any_gpu(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HMMGPU_NO_GPU", "1")
    for devices, said in (("7", "--devices 7: no CUDA GPU with id 7 (this machine has no CUDA GPU)"),
                          ("all", "--devices all: no CUDA GPU found")):
        assert main(["search", "--devices", devices, str(MODELS), str(PROTEOME)]) != 0
        assert capsys.readouterr().err.strip().splitlines()[-1] == f"hmmgpu: error: {said}"


def test_dask_workers_with_a_gpu_run_the_gpu_route(tmp_path, monkeypatch, two_devices):
    """A dask worker with a GPU runs its shard through the GPU process's route
    (``routing.shard_backend``: ``device_backend`` over the shard, positions made global before
    the merge): here in worker threads of this process, whose "GPU" is hmmgpu's CPU filters.
    The merged hits equal one process's; every shard got a backend of its own."""
    distributed = pytest.importorskip("distributed")
    from hmmgpu.formats.seqdb import SequenceDB as Made

    made = tmp_path / "proteome"
    Made.from_fasta(PROTEOME).save(made)
    monkeypatch.setattr(routing, "cuda_available", lambda device=0: True)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0",
                                  worker_dashboard_address=":0") as lc, \
            distributed.Client(lc, set_as_default=False) as client:
        ours = list(hmmgpu.distributed.hmmsearch(str(MODELS), str(made), client=client, shards=3,
                                                 models_per_batch=2, backend="cuda"))
    assert sum(len(made_here) for made_here in two_devices.values()) == 3   # a backend a shard, on "device" 0
    with hmmgpu.Pipeline(str(PROTEOME), backend="cuda", devices="0") as pipeline:
        ref = [hits for _, hits in pipeline.search_hmms(hmmgpu.read_hmms(MODELS))]
    for a, b in zip(ours, ref, strict=True):
        for fmt in ("targets", "domains"):
            assert hits_table(a, fmt) == hits_table(b, fmt)
        assert_same_pipeline(a, b, PIPELINE_KEYS)


# ---------------------------------------------------------------- hmmgpu sw --devices
def test_sw_on_two_device_processes_writes_what_one_writes(tmp_path):
    """``hmmgpu sw --devices``'s orchestrator (hmmgpu.sw.devices): two device processes (here
    on the CPU route, the devices' backend being injectable) pull query batches by cost; the
    blocks, in query order, are what ``hmmgpu sw`` writes in one process (the report, with its
    alignments; the tabular rows come from the same hits)."""
    from hmmgpu.sw import devices as sw_devices
    from hmmgpu.sw.api import _read_queries

    queries_path = first_sequences(tmp_path, 9)
    queries = _read_queries(str(queries_path))
    assert len(sw_devices.batches(queries, 4)) >= 3   # several batches: both processes take some
    settings = dict(matrix="BLOSUM62", gap_open=11, gap_extend=1, max_hits=20, evalue=10.0, threads=1,
                    alignments=5, tracebacks=5, outfmt=0)
    with sw_devices.DeviceSearch(str(PROTEOME), [0, 1], settings, backend="cpu") as search:
        assert search.notice.startswith("2 devices (ids 0,1), a process each: ")
        ours = "".join(search.search(queries))
    one = tmp_path / "one.out"
    assert main(["sw", "--backend", "cpu", "--cpu", "1", "--max-hits", "20", "--alignments", "5", "-o", str(one),
                 str(queries_path), str(PROTEOME)]) == 0
    assert ours == one.read_text().rsplit("[ok] ", 1)[0]   # all but the report's timing line


@pytest.mark.parametrize("args,said", [
    (["--devices", "7"], "--devices 7: no CUDA GPU with id 7 (this machine has no CUDA GPU)"),
    (["--devices", "0,1", "--backend", "cpu"], "--devices names GPUs; --backend cpu runs none (use --backend auto or "
                                               "cuda)"),
    (["--devices", "0", "--device", "1"], "--device and --devices: give one of them (--devices N is --device N)"),
])
def test_sw_devices_errors_are_one_line(tmp_path, capsys, monkeypatch, args, said):
    monkeypatch.setenv("HMMGPU_NO_GPU", "1")
    queries = first_sequences(tmp_path, 2)
    assert main(["sw", *args, str(queries), str(PROTEOME)]) != 0
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"hmmgpu: error: {said}"
