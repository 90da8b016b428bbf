"""pyhmmer's post-filter stage in worker processes: every core of a large host busy.

What it is for
--------------
On the GPU route the filters run in the GPU processes and what is left for the host is the
post-filter stage (Forward, Backward, domain definition) on the filters' survivors, which
:class:`~hmmgpu.cpu.pyhmmer_stage.PyhmmerStage` runs in the engine's worker threads
(:mod:`hmmgpu.search.engine`). pyhmmer releases the interpreter's lock while it computes,
but each task's Python around it (its block of sequences, its ``TopHits`` state, the keep
rule's names) holds the lock, which every thread of a process shares. With 16 threads that
costs little (600 Pfam models x 29 M residues on one H200 host: workers busy 77 s for 64 s
of CPU); with 64 it can be the limit: on a 4 x H200 host of 64 cores, one GPU and four alike
took 20.2 and 20.4 s, the workers "busy" 1,012 thread-seconds for 335 s of CPU, while a
LocalCUDACluster of four processes of 16 threads took 15.4 s on the same work
(benchmarks/results/session_scale_h200x4_2026-11-28_s5call2.log). Processes each have their
own lock. Measured since on such hosts (:data:`THREADS_PER_PROCESS`), processes gained 21% in
one session and nothing in the next, where every run used the same 20-30 cores' worth of
CPU a second however it was split: the host, not the lock, was the limit there.

How it works
------------
:class:`PyhmmerProcesses` is the same stage (its plan and its exact merge run here), whose
*filtered* tasks (a query's survivors, by database position) run in worker processes:
each process opens the same database file itself (a made database is mapped; a sequence file
is read again, in every process at once, once this process has read it: while the first
models' filters run, the post-filter's first half second on a 29 M-residue FASTA file) and
runs a ``PyhmmerStage``
in :attr:`ProcessPlan.threads` threads of its own. A task travels as its model and its
targets' positions, and its result comes back as the picklable ``TaskResult`` (``TopHits``
state with the hits HMMER's keep rule would drop already removed, exactly as in a thread
here), so the merge, and every output, is unchanged. An engine thread that takes a task
hands it to the process with the fewest tasks under way and waits for its answer without the
lock; the engine's threads stay its scheduler (earliest model first). Unfiltered tasks
(pyhmmer's whole pipeline over ranges, where a model goes there while the GPU starts) run
here, in the calling thread, as before.

The processes are started as :mod:`hmmgpu.child` starts the GPU process (fresh
interpreters that run nothing of the caller's ``__main__``) when the stage is made, and
stopped by :meth:`PyhmmerProcesses.close`; one that stops unexpectedly fails the search with
a one-line error, and a database a process cannot open, or finds other than this process read
it (a file changed during the search), is that process's first answer's error: positions
would not name the same targets.

When
----
:meth:`hmmgpu.search.routing.SearchPlan.postfilter_processes` decides: the command line's GPU
route (hmmgpu's filters, pyhmmer's post-filter stage) on a database a second reader can read,
with at least :data:`MIN_THREADS` threads; a process per :data:`THREADS_PER_PROCESS` threads.
"""
from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
from concurrent.futures import Future
from dataclasses import dataclass, replace
from types import SimpleNamespace

from hmmgpu.child import inbox
from hmmgpu.cpu.pyhmmer_stage import PyhmmerStage
from hmmgpu.errors import HmmgpuError, WorkerError, one_line

#: Threads of each worker process (its share of ``--cpu``). Measured on a 4 x H200 host of 64
#: cores (600 Pfam models x 116 M residues, --devices all, outputs equal in every run,
#: benchmarks/results/session_scale_h200x4_2026-11-28_s7call{1,2}.log): in one session (a04850e)
#: 4 processes of 16 threads 11.4 s, 8 of 8 15.5 s, 16 of 4 14.5 s, the engine's 64 threads in
#: one process 14.4 s; in the next (4fea378) 4 of 16 9.8 and 9.8 s, 8 of 8 9.8 s, 2 of 32
#: 8.8 s, 64 threads 10.4 and 9.8 s, one GPU 9.9 s with processes and 9.8 s without. There the
#: runs used about 30 cores' CPU time a second whatever the split (about 290 s in 10 s): the
#: host's CPU, not the interpreter's lock, was the limit. On 16 threads, 2 processes of 8 took
#: 20.1 s against 19.7 s in threads, hence :data:`MIN_THREADS`.
THREADS_PER_PROCESS = 16
#: Worker processes are used from this many threads (``--cpu``) up.
MIN_THREADS = 32
#: Seconds a worker process asked to stop (its tasks all answered) is given before it is killed.
STOP_SECONDS = 10.0


@dataclass(frozen=True)
class ProcessPlan:
    """Where the worker processes find the database (``database``, its ``format`` as
    ``--tformat`` names it), how many there are and the threads of each."""

    database: str
    format: str | None
    processes: int
    threads: int


@dataclass(frozen=True)
class _Setup:
    """What a worker process needs, sent once when it starts."""

    database: str
    format: str | None
    options: object  #: the run's SearchOptions
    ftz: bool
    threads: int
    read: tuple  #: (sequences, residues) this process read: a worker that reads otherwise stops the search


def _serve(conn) -> None:
    """A worker process: its set-up, then tasks until None or EOF, each answered with
    (number, ("done", TaskResult) or ("error", message)) as soon as it is done, by
    :attr:`_Setup.threads` threads; a thread takes each message off the socket as it comes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the parent stops the run on Ctrl-C
    try:
        setup = conn.recv()
    except (EOFError, OSError):
        return
    stage, failure = None, None
    try:
        from hmmgpu.formats.seqdb import open_database

        db = open_database(setup.database, setup.format)
        if (db.n, db.total_residues) != setup.read:
            raise HmmgpuError(f"a post-filter worker process read {db.n} sequences ({db.total_residues} residues) "
                              f"where the search read {setup.read[0]} ({setup.read[1]}); was the file changed during "
                              "the search?")
        stage = PyhmmerStage(db, setup.options, ftz=setup.ftz, threads=setup.threads)
    except HmmgpuError as error:
        failure = str(error)
    except OSError as error:
        failure = f"{setup.database}: {error.strerror or error}"
    messages = inbox(conn)
    sending = threading.Lock()

    def work():
        while (message := messages.get()) is not None:
            number, task = message
            if failure is not None:
                answer = ("error", failure)
            else:
                try:
                    answer = ("done", stage.run(task))
                except HmmgpuError as error:
                    answer = ("error", str(error))
                except Exception as error:  # noqa: BLE001 - a fault of hmmgpu's: one line in the parent
                    answer = ("error", f"a post-filter process failed: {type(error).__name__}: {one_line(error)}")
            try:
                with sending:
                    conn.send((number, answer))
            except OSError:   # the parent has gone
                break
        messages.put(None)   # the next thread stops too

    workers = [threading.Thread(target=work, name=f"hmmgpu-postfilter-{k}") for k in range(max(1, setup.threads))]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()


def _stopped() -> WorkerError:
    return WorkerError("a post-filter worker process stopped unexpectedly (out of memory?); try fewer threads "
                       "with --cpu")


class _Process:
    """One worker process: its tasks under way (number -> Future) and the thread that reads
    its answers."""

    def __init__(self, setup: _Setup):
        from hmmgpu.child import start_worker

        self.process, self.conn = start_worker("hmmgpu.cpu.pyhmmer_processes", setup, "a post-filter worker process")
        self.pending: dict = {}
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name="hmmgpu-postfilter-answers", daemon=True)
        self._reader.start()

    def load(self) -> int:
        return len(self.pending)

    def submit(self, number: int, task) -> Future:
        future: Future = Future()
        with self._lock:
            self.pending[number] = future
            try:
                self.conn.send((number, task))
            except OSError:
                del self.pending[number]
                raise _stopped() from None
        return future

    def _read(self) -> None:
        try:
            while True:
                number, (kind, value) = self.conn.recv()
                with self._lock:
                    future = self.pending.pop(number)
                if kind == "done":
                    future.set_result(value)
                else:
                    future.set_exception(HmmgpuError(value))
        except (EOFError, OSError):
            pass
        with self._lock:
            left, self.pending = list(self.pending.values()), {}
        for future in left:
            future.set_exception(_stopped())

    def stop(self, now: bool) -> None:
        """Ask it to stop (``now``: kill it) and wait for it and its reader (a process that
        has not stopped :data:`STOP_SECONDS` after it was asked is killed)."""
        try:
            if now:
                self.process.kill()
            else:
                with self._lock:
                    self.conn.send(None)
        except OSError:
            pass
        try:
            self.process.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._reader.join()
        self.conn.close()


class PyhmmerProcesses(PyhmmerStage):
    """pyhmmer's post-filter stage with its filtered tasks in worker processes (see the module
    header): ``PyhmmerProcesses(db, options, ftz=..., threads=..., model_lengths=...,
    plan=ProcessPlan(...))``; :meth:`close` stops the processes."""

    def __init__(self, db, options, ftz: bool = False, threads: int = 0, model_lengths=None, *, plan: ProcessPlan):
        super().__init__(db, options, ftz=ftz, threads=threads, model_lengths=model_lengths)
        setup = _Setup(os.path.abspath(plan.database), plan.format, options, ftz, plan.threads,
                       (db.n, db.total_residues))
        self._processes: list = []
        try:
            for _ in range(plan.processes):
                self._processes.append(_Process(setup))
        except BaseException:
            self.close(now=True)
            raise
        self._numbers = itertools.count()
        self._lock = threading.Lock()

    def run(self, task, alone: bool = False):
        """One task's result: a filtered task from a worker process, any other in this thread."""
        if not task.filtered or not self._processes:
            return super().run(task, alone)
        sent = replace(task, query=SimpleNamespace(hmm=task.query.hmm))   # the model, not the engine's query
        with self._lock:
            process = min(self._processes, key=_Process.load)
            future = process.submit(next(self._numbers), sent)
        return future.result()

    def close(self, now: bool = False) -> None:
        """Stop the worker processes (``now``: kill them) and wait for them."""
        processes, self._processes = self._processes, []
        for process in processes:
            process.stop(now)


__all__ = ["MIN_THREADS", "THREADS_PER_PROCESS", "ProcessPlan", "PyhmmerProcesses"]


if __name__ == "__main__":
    from multiprocessing.connection import Connection

    from hmmgpu.cpu.pyhmmer_processes import _serve as serve   # the package's module: what it sends is unpickled by that name

    serve(Connection(int(sys.argv[1])))
