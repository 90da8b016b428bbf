"""The report formatted in a child process beside the search (report/aside.py): the same blocks,
the same outputs, and a child that dies is a one-line error that leaves no output."""
import re
from types import SimpleNamespace

import pyhmmer
import pytest
from pyhmmer.easel import SequenceFile

from hmmgpu.cli import main
from hmmgpu.options import ReportOptions
from hmmgpu.report import aside
from hmmgpu.report.outputs import QueryFormatter, formatted
from tests.helpers import AMINO, MODEL_NAMES, PROTEOME, SAMPLES, sample_hmm

#: The lines that time or date the run (the report's times, the tables' date).
_TIMED = re.compile(rb"^# (CPU time|Mc/sec|Date):.*$", re.MULTILINE)


@pytest.fixture(scope="module")
def results():
    """The four sample models' pyhmmer hits on the proteome, as the engine's results carry them."""
    with SequenceFile(PROTEOME, digital=True, alphabet=AMINO) as f:
        block = f.read_block()
    hmms = [sample_hmm(name) for name in MODEL_NAMES]
    return [SimpleNamespace(hmm=hmm, hits=hits) for hmm, hits in zip(hmms, pyhmmer.hmmsearch(hmms, block))]


def _untimed(blocks) -> list:
    return [(b.name, _TIMED.sub(b"", b.report), b.alignment, b.tables) for b in blocks]


def test_the_child_makes_the_blocks_this_process_makes(results, tmp_path):
    """Report, ``-A`` alignment and the three tables of every query: the same bytes from the
    child as from ``formatted`` here (the per-query times aside), in the same order."""
    formatter = QueryFormatter(report=True, options=ReportOptions(), tables=("tblout", "domtblout", "pfamtblout"),
                               alignment_path=str(tmp_path / "a.sto"))
    here = _untimed(formatted(results, formatter))
    there = _untimed(aside.formatted_aside(iter(results), formatter))
    assert there == here and len(here) == 4 and all(report for _, report, _, _ in here)
    assert sum(bool(alignment) for _, _, alignment, _ in here) >= 3


def test_many_large_queries_go_through_without_waiting_on_each_other():
    """Queries whose messages and answers are each larger than the socket's buffers (the sample
    models' hits on the proteome written eight times), sent while the child sends back: every
    block comes back, in order, within a minute (the child's answers are taken off the socket by
    a thread as they come; read between sends only, both ends waited for each other)."""
    import pickle
    import threading

    from pyhmmer.easel import DigitalSequenceBlock

    with SequenceFile(PROTEOME, digital=True, alphabet=AMINO) as f:
        block = f.read_block()
    copies = DigitalSequenceBlock(AMINO, [seq for _ in range(8) for seq in block])
    hmms = [sample_hmm(name) for name in MODEL_NAMES]
    large = [SimpleNamespace(hmm=hmm, hits=hits) for hmm, hits in zip(hmms, pyhmmer.hmmsearch(hmms, copies))]
    assert max(len(pickle.dumps(r.hits)) for r in large) > 1 << 18   # a socket buffer holds about 208 KiB
    formatter = QueryFormatter(report=True, options=ReportOptions(), tables=("tblout", "domtblout"))
    many = [large[k % len(large)] for k in range(24)]
    got, done = [], threading.Event()

    def run():
        got.extend(b.name for b in aside.formatted_aside(iter(many), formatter))
        done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(60), f"stuck after {len(got)} of {len(many)} queries"
    assert got == [r.hmm.name for r in many]


def test_formatted_results_takes_the_child_for_many_queries_and_a_report(monkeypatch):
    """The child only where the report is formatted and the run has at least ASIDE_MIN_QUERIES queries."""
    taken = []
    monkeypatch.setattr(aside, "formatted_aside", lambda results, formatter: taken.append("aside") or iter(()))
    monkeypatch.setattr("hmmgpu.report.outputs.formatted", lambda results, formatter: taken.append("here") or iter(()))
    report, tables = (QueryFormatter(report=r, options=ReportOptions(), tables=("tblout",)) for r in (True, False))
    for formatter, queries in ((report, aside.ASIDE_MIN_QUERIES), (report, aside.ASIDE_MIN_QUERIES - 1),
                               (tables, 10 ** 6), (report, None)):
        aside.formatted_results([], formatter, queries)
    assert taken == ["aside", "here", "here", "here"]


def test_the_command_line_writes_the_same_outputs_with_the_child(tmp_path, monkeypatch):
    """``hmmgpu search`` with the report formatted in the child (every run taken there): the
    report, the tables and the alignments (their times and dates aside) equal a run formatting
    them itself."""
    samples = str(SAMPLES / "samples.hmm")

    def run():   # the same paths each time: the report's header and the tables' tails name them
        out = {kind: tmp_path / f"r.{kind}" for kind in ("out", "tbl", "dom", "sto")}
        assert main(["search", "--backend", "hmmer", "--cpu", "2", "-o", str(out["out"]), "--tblout", str(out["tbl"]),
                     "--domtblout", str(out["dom"]), "-A", str(out["sto"]), samples, str(PROTEOME)]) == 0
        return {kind: _TIMED.sub(b"", path.read_bytes()) for kind, path in out.items()}

    here = run()
    monkeypatch.setattr(aside, "ASIDE_MIN_QUERIES", 1)
    spawned = []
    start = aside.formatted_aside
    monkeypatch.setattr(aside, "formatted_aside", lambda *a, **k: spawned.append(1) or start(*a, **k))
    there = run()
    assert spawned == [1]
    assert there == here and all(there.values())


def test_a_child_that_dies_is_a_one_line_error_and_leaves_no_output(tmp_path, capsys, monkeypatch):
    """The formatting process killed as it starts: the search stops with one line naming it,
    exit status non-zero, no traceback, the report and table not written."""
    from hmmgpu import child

    start = child.start_worker

    def killed(*args):
        process, conn = start(*args)
        process.kill()
        process.wait()
        return process, conn

    monkeypatch.setattr(child, "start_worker", killed)
    monkeypatch.setattr(aside, "ASIDE_MIN_QUERIES", 1)
    report, table = tmp_path / "r.out", tmp_path / "r.tbl"
    code = main(["search", "--backend", "hmmer", "--cpu", "2", "-o", str(report), "--tblout", str(table),
                 str(SAMPLES / "samples.hmm"), str(PROTEOME)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and "Traceback" not in "\n".join(err)
    assert err[-1] == "hmmgpu: error: the report's formatting process stopped unexpectedly (out of memory?)"
    assert not report.exists() and not table.exists()
