"""Faults and edges of the command line (issue 32), as a user meets them: interrupts (SIGINT,
and SIGTERM, which behaves as SIGINT) in real processes, outputs that cannot be opened or
that name an input, ``makedb`` over an old database, and the small things (``-T -inf``,
``--cpu`` above the cores, ``--device`` without its GPU, nucleotide queries, the backend
line on a machine without a GPU).

Every fault ends with one line on standard error, a non-zero exit status, no traceback,
the old outputs, inputs and databases as they were, and no temporary file left behind.
These tests need no HMMER binaries.
"""
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from hmmgpu.cli import ERROR_STATUS, main
from hmmgpu.formats.seqdb import SequenceDB
from hmmgpu.host import Interrupted, signals_deferred, stop_on_signals
from tests.helpers import PROTEOME, ROOT, SAMPLES

HMM, DB = str(SAMPLES / "LuxC.hmm"), str(PROTEOME)
OLD = "yesterday's results\n"
SAID = {signal.SIGINT: "hmmgpu: interrupted", signal.SIGTERM: "hmmgpu: terminated (SIGTERM)"}


def _messages(err: str) -> list:
    """The lines of standard error that are not hmmgpu's '#' notes."""
    return [line for line in err.splitlines() if not line.startswith("# hmmgpu")]


def one_line_error(capsys, argv, *fragments, status=ERROR_STATUS):
    assert main(argv) == status
    lines = _messages(capsys.readouterr().err)
    assert len(lines) == 1 and lines[0].startswith("hmmgpu: error: "), lines
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def _listing(path) -> dict:
    """Every file under ``path`` (hidden ones too) with its bytes."""
    found = {}
    for top, _, names in os.walk(path):
        for name in names:
            full = os.path.join(top, name)
            found[os.path.relpath(full, path)] = open(full, "rb").read()
    return found


# ---------------------------------------------------------------- signals in real processes


def _start(tmp_path, argv, stdin=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "hmmgpu", *argv], cwd=tmp_path, env=env, stdin=stdin,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _wait_for(condition, what, timeout=60.0):
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.02)


def _unread(pipe) -> int:
    """The bytes written to ``pipe`` that its reader has not read yet."""
    import fcntl
    import termios
    from array import array

    count = array("i", [0])
    fcntl.ioctl(pipe.fileno(), termios.FIONREAD, count)
    return count[0]


def _partials(tmp_path) -> list:
    return [name for name in os.listdir(tmp_path) if name.endswith(".partial")]


def _interrupt(tmp_path, process, signum, started_line: bool, partials: int):
    """Send ``signum`` once the run is under way (its temporary outputs exist and, with
    ``started_line``, its '#' line says the search began); return (status, stderr, seconds
    from the signal to the exit)."""
    first = process.stderr.readline() if started_line else ""
    assert not started_line or first.startswith("# hmmgpu"), first
    _wait_for(lambda: len(_partials(tmp_path)) >= partials, "the temporary outputs")
    time.sleep(0.3)
    process.send_signal(signum)
    sent = time.monotonic()
    try:
        err = process.communicate(timeout=30)[1]
    finally:
        process.kill()
    return process.returncode, first + err, time.monotonic() - sent


def _assert_stopped(status, err, seconds, signum, before, tmp_path):
    assert status == 128 + signum, err
    assert _messages(err) == [SAID[signum]], err
    assert "Traceback" not in err
    assert _listing(tmp_path) == before   # old outputs as they were, inputs untouched, no temporary file
    assert seconds < 10, seconds


def _mid_run(tmp_path, program):
    """Inputs and outputs of a run that takes many seconds on two threads (``--max``: every
    target through Forward), so that the signal comes while it searches."""
    for name in ("r.txt", "t.tbl"):
        (tmp_path / name).write_text(OLD)
    if program == "sw":
        queries = b">".join(PROTEOME.read_bytes().split(b">")[:41])
        (tmp_path / "q.fa").write_bytes(queries)
        return ["sw", "--cpu", "2", "-o", "r.txt", "q.fa", DB], 1
    models = tmp_path / "models.hmm"
    models.write_bytes((SAMPLES / "samples.hmm").read_bytes() * 5)
    tables = ["--cpu", "2", "--max", "-o", "r.txt", "--tblout", "t.tbl"]
    if program == "search":
        return ["search", *tables, str(models), DB], 2
    return ["scan", *tables, str(models), DB], 2


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("program", ["search", "scan", "sw"])
def test_a_signal_during_the_search_removes_the_outputs(tmp_path, program, signum):
    """SIGINT or SIGTERM while the search runs: one line, status 130 or 143, within seconds
    (worker threads are not waited for), the old outputs intact, no temporary file."""
    argv, partials = _mid_run(tmp_path, program)
    before = _listing(tmp_path)
    status, err, seconds = _interrupt(tmp_path, _start(tmp_path, argv), signum, True, partials)
    _assert_stopped(status, err, seconds, signum, before, tmp_path)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("program", ["search", "scan", "sw"])
def test_a_signal_while_reading_standard_input_removes_the_outputs(tmp_path, program, signum):
    """The run waits for its sequences on standard input, its outputs already opened (as
    hmmsearch opens them before it searches): the signal removes them."""
    for name in ("r.txt", "t.tbl"):
        (tmp_path / name).write_text(OLD)
    argv = {"search": ["search", "-o", "r.txt", "--tblout", "t.tbl", HMM, "-"],
            "scan": ["scan", "-o", "r.txt", "--tblout", "t.tbl", HMM, "-"],
            "sw": ["sw", "-o", "r.txt", "-", DB]}[program]
    before = _listing(tmp_path)
    process = _start(tmp_path, argv, stdin=subprocess.PIPE)
    process.stdin.write(PROTEOME.read_text()[:5000])   # part of the input; the rest never comes
    process.stdin.flush()
    status, err, seconds = _interrupt(tmp_path, process, signum, False, 1 if program == "sw" else 2)
    _assert_stopped(status, err, seconds, signum, before, tmp_path)


def test_a_signal_waits_for_the_end_of_a_step_that_must_not_be_cut():
    """Under the command line's handlers, SIGTERM raises Interrupted (a KeyboardInterrupt) in
    the main thread, but not inside ``signals_deferred()``: there it waits for the block's
    end. The previous handlers come back afterwards."""
    previous = signal.getsignal(signal.SIGTERM)
    reached = False
    with stop_on_signals():
        with pytest.raises(Interrupted) as caught:
            with signals_deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)
                reached = True
    assert reached and isinstance(caught.value, KeyboardInterrupt)
    assert caught.value.exit_status == 143 and caught.value.message == "terminated (SIGTERM)"
    assert signal.getsignal(signal.SIGTERM) == previous


# ---------------------------------------------------------------- outputs that fail or name an input


@pytest.mark.parametrize("program", ["search", "scan"])
def test_an_output_that_cannot_be_opened_leaves_no_temporary_file(tmp_path, capsys, program):
    """``-o r.txt --tblout /nonexistent/x.tbl``: one line, and neither r.txt's temporary file
    nor anything else left in its directory; an old r.txt is untouched."""
    (tmp_path / "r.txt").write_text(OLD)
    inputs = [HMM, DB]
    one_line_error(capsys, [program, "-o", str(tmp_path / "r.txt"), "--tblout", "/nonexistent/x.tbl", *inputs],
                   "--tblout /nonexistent/x.tbl: cannot open for writing")
    assert _listing(tmp_path) == {"r.txt": OLD.encode()}


def test_an_output_that_names_an_input_is_refused(tmp_path, capsys, monkeypatch):
    """``--tblout in.fa ... in.fa`` (or another spelling of it: ./in.fa, a link) in search,
    scan, sw and makedb: one line before anything is written; the input is intact."""
    fasta = tmp_path / "in.fa"
    fasta.write_bytes(PROTEOME.read_bytes())
    models = tmp_path / "m.hmm"
    models.write_bytes((SAMPLES / "LuxC.hmm").read_bytes())
    os.symlink(fasta, tmp_path / "link.fa")
    monkeypatch.chdir(tmp_path)
    before = _listing(tmp_path)
    cases = [["search", "--tblout", "in.fa", "m.hmm", "in.fa"],
             ["search", "-o", "./in.fa", "m.hmm", str(fasta)],
             ["search", "-A", str(tmp_path / "link.fa"), "m.hmm", "in.fa"],
             ["search", "--domtblout", "m.hmm", "m.hmm", "in.fa"],
             ["scan", "--pfamtblout", "sub/../in.fa", "m.hmm", "in.fa"],
             ["scan", "-o", "m.hmm", "m.hmm", "in.fa"],
             ["sw", "-o", "link.fa", "in.fa", DB],
             ["sw", "-o", "in.fa", DB, "in.fa"],
             ["makedb", "in.fa", "./in.fa"]]
    (tmp_path / "sub").mkdir()
    for argv in cases:
        said = one_line_error(capsys, argv, "names the input", "an output may not overwrite an input")
        assert said.split(": ")[2].split()[0] in ("--tblout", "-o", "-A", "--domtblout", "--pfamtblout",
                                                   "output"), said
    (tmp_path / "sub").rmdir()
    assert _listing(tmp_path) == before


# ---------------------------------------------------------------- makedb over an old database


def _made(tmp_path, fasta_bytes, name="db"):
    source = tmp_path / "in.fa"
    source.write_bytes(fasta_bytes)
    assert main(["makedb", str(source), str(tmp_path / name)]) == 0
    return tmp_path / name


def test_makedb_swaps_a_rebuilt_database_in_whole(tmp_path, capsys):
    """A rebuild is written beside the old database and swapped in: the directory then holds
    the new database only, and nothing else is left in the parent."""
    records = PROTEOME.read_bytes().split(b">")
    db = _made(tmp_path, b">".join(records[:101]))
    assert SequenceDB.load(db).n == 100
    old_inode = os.stat(db).st_ino
    (tmp_path / "in.fa").write_bytes(b">".join(records[:51]))
    assert main(["makedb", str(tmp_path / "in.fa"), str(db)]) == 0
    assert SequenceDB.load(db, check="full").n == 50 and os.stat(db).st_ino != old_inode
    assert sorted(os.listdir(tmp_path)) == ["db", "in.fa"]


def test_a_failed_rebuild_leaves_the_old_database(tmp_path, capsys):
    """A rebuild from a damaged file, or into a place that is not a database: one line, the old
    database as it was, no temporary directory."""
    db = _made(tmp_path, PROTEOME.read_bytes()[:20000].rsplit(b"\n>", 1)[0] + b"\n")
    before = _listing(tmp_path)
    (tmp_path / "bad.fa").write_text(">a\nMKV\n>b\nMK-1V\n")
    one_line_error(capsys, ["makedb", str(tmp_path / "bad.fa"), str(db)], "bad.fa")
    (tmp_path / "bad.fa").unlink()
    assert _listing(tmp_path) == before
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("keep me\n")
    one_line_error(capsys, ["makedb", str(tmp_path / "in.fa"), str(tmp_path / "notes")],
                   "is not a hmmgpu database", "mine.txt")
    assert (tmp_path / "notes" / "mine.txt").read_text() == "keep me\n"
    one_line_error(capsys, ["makedb", str(tmp_path / "in.fa"), str(tmp_path / "in.fa")], "names the input")
    assert SequenceDB.load(db, check="full").n > 0


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_rebuild_leaves_the_old_database(tmp_path, signum):
    """makedb reading its sequences from standard input over an old database, stopped by a
    signal: the old database as it was, no temporary directory."""
    db = _made(tmp_path, PROTEOME.read_bytes()[:20000].rsplit(b"\n>", 1)[0] + b"\n")
    before = _listing(tmp_path)
    process = _start(tmp_path, ["makedb", "-", "db"], stdin=subprocess.PIPE)
    process.stdin.write(PROTEOME.read_text()[:5000])
    process.stdin.flush()
    _wait_for(lambda: _unread(process.stdin) == 0, "makedb to read its input")   # up, and reading
    time.sleep(0.2)
    process.send_signal(signum)
    try:
        err = process.communicate(timeout=30)[1]
    finally:
        process.kill()
    assert process.returncode == 128 + signum and _messages(err) == [SAID[signum]], err
    assert _listing(tmp_path) == before
    assert SequenceDB.load(db, check="full").n > 0


def test_a_save_stopped_halfway_leaves_the_old_database(tmp_path):
    """A signal that arrives while the new database's arrays are written (here sent by the
    writer itself, after two of them): the old database is untouched and the half-written
    one is removed."""
    records = PROTEOME.read_bytes().split(b">")
    old = SequenceDB.from_fasta(_write(tmp_path / "old.fa", b">".join(records[:31])))
    old.save(tmp_path / "db")
    before = _listing(tmp_path)

    class Stopped(SequenceDB):
        calls = 0

        def _arrays(self):
            Stopped.calls += 1
            if Stopped.calls == 3:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)
            return super()._arrays()

    new = SequenceDB.digitize_fasta(PROTEOME.read_bytes(), str(PROTEOME))
    halfway = Stopped.__new__(Stopped)
    halfway.__dict__.update(new.__dict__)
    with stop_on_signals():
        with pytest.raises(Interrupted):
            halfway.save(tmp_path / "db")
    assert Stopped.calls == 3
    assert _listing(tmp_path) == before
    np.testing.assert_array_equal(SequenceDB.load(tmp_path / "db", check="full").lengths, old.lengths)


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


# ---------------------------------------------------------------- small things


def test_negative_thresholds_are_accepted_as_hmmsearch_accepts_them(tmp_path, capsys):
    """``-T -inf``, ``-T -1000``, ``--domT -1e3``: values, not options; the header shows them
    as hmmsearch does (``%g``)."""
    for flag, value, shown in (("-T", "-inf", b"score >= -inf"), ("-T", "-1000", b"score >= -1000"),
                               ("--domT", "-1e3", b"score >= -1000"), ("--incT", "-Infinity", b"score >= -inf")):
        out = tmp_path / "r.txt"
        assert main(["search", flag, value, "-o", str(out), HMM, DB]) == 0, capsys.readouterr().err
        assert shown in out.read_bytes()
    one_line_error(capsys, ["search", "-T", "-nan", HMM, DB], "-T: nan is not a number")


def test_cpu_above_the_cores_is_capped_with_a_note(tmp_path, capsys):
    from hmmgpu.host import usable_cores

    cores = usable_cores()
    assert main(["search", "--cpu", "10000", "-o", str(tmp_path / "r.txt"), HMM, DB]) == 0
    err = capsys.readouterr().err
    assert f"hmmgpu: note: --cpu 10000 is more than the {cores} cores this process may use; using {cores}" in err
    assert f"{cores} worker threads" in err or f"{cores} threads" in err, err
    assert main(["sw", "--cpu", "10000", "-o", str(tmp_path / "s.txt"), str(_write(tmp_path / "q.fa", b">q\nMKVLA\n")),
                 DB]) == 0
    err = capsys.readouterr().err
    assert "hmmgpu: note: --cpu 10000 is more than" in err and f"(pyopal, {cores} threads)" in err


def test_sw_refuses_a_negative_cpu_as_search_does(tmp_path, capsys):
    query = str(_write(tmp_path / "q.fa", b">q\nMKVLA\n"))
    said = one_line_error(capsys, ["search", "--cpu", "-1", HMM, DB])
    assert one_line_error(capsys, ["sw", "--cpu", "-1", query, DB]) == said == "hmmgpu: error: --cpu must be >= 0 (got -1)"


def test_nucleotide_queries_are_warned_about_in_scan_and_sw(tmp_path, capsys):
    dna = _write(tmp_path / "dna.fa", b">d1\nACGTACGTTGCAACGTAGCTAGCTAGGCTAACGTACGATCG\n>d2\nGGCATCGATCGATCGTAGCTAGCATCGAT\n")
    assert main(["scan", "-o", str(tmp_path / "r.txt"), HMM, str(dna)]) == 0
    assert f"hmmgpu: warning: {dna} looks like nucleotide sequence; scanning it as protein (as hmmscan would)" \
        in capsys.readouterr().err
    assert main(["sw", "-o", str(tmp_path / "s.txt"), str(dna), DB]) == 0
    err = capsys.readouterr().err
    assert f"hmmgpu: warning: {dna} looks like nucleotide sequence; aligning it as protein" in err
    assert main(["sw", "-o", str(tmp_path / "s.txt"), str(_write(tmp_path / "p.fa", b">p\nMKVLAAGIVG\n")), DB]) == 0
    assert "warning" not in capsys.readouterr().err


def test_a_device_without_its_gpu_is_said(tmp_path, capsys):
    """``--device 7`` where no usable GPU has id 7: one warning line, the run goes on (on the
    CPU); with ``--backend cuda`` it is the error it always was."""
    from hmmgpu.gpu.runtime.context import cuda_available

    if cuda_available(7):
        pytest.skip("this machine has a GPU 7")
    query = str(_write(tmp_path / "q.fa", b">q\nMKVLA\n"))
    for argv in (["search", "--device", "7", "-o", str(tmp_path / "r.txt"), HMM, DB],
                 ["scan", "--device", "7", "-o", str(tmp_path / "r.txt"), HMM, query],
                 ["sw", "--device", "7", "-o", str(tmp_path / "s.txt"), query, DB]):
        assert main(argv) == 0
        said = [line for line in _messages(capsys.readouterr().err) if "--device" in line]
        assert said == ["hmmgpu: warning: --device 7: no usable CUDA GPU with this id; the run goes on on the CPU"]
    one_line_error(capsys, ["search", "--backend", "cuda", "--device", "7", HMM, DB], "no usable CUDA GPU with id 7")


def test_without_a_gpu_the_backend_line_does_not_suggest_warmup(tmp_path, monkeypatch):
    """Work that ``auto`` leaves to pyhmmer only because the GPU kernels are not compiled yet,
    on a machine without a GPU (here: ``HMMGPU_NO_GPU``): the line says there is no GPU, not
    ``hmmgpu warmup``. (The file's 20 MB of blank lines before its records make the estimate
    of its residues, from its size, that of such work.)"""
    big = tmp_path / "big.fa"
    with open(big, "wb") as fh:
        fh.write(b"\n" * 20_000_000)
        fh.write(PROTEOME.read_bytes()[:3000].rsplit(b"\n>", 1)[0] + b"\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), HMMGPU_NO_GPU="1", HMMGPU_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run([sys.executable, "-m", "hmmgpu", "search", "--cpu", "1", "-o", os.devnull,
                           str(SAMPLES / "samples.hmm"), str(big)], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    first = done.stderr.splitlines()[0]
    assert first.endswith("backend hmmer (pyhmmer on the CPU): no CUDA GPU found"), first
    assert "warmup" not in done.stderr
