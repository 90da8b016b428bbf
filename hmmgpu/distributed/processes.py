"""Many small models on pyhmmer's route, searched by worker processes.

What it is for
--------------
Pfam-A (about 20,000 models) against a proteome is the commonest annotation job, and there
each model's whole pipeline is a few milliseconds of pyhmmer's C code. In one process the
interpreter work around each model (splitting and parsing its record, checking it, planning
its task, merging, formatting its outputs) holds the GIL, which every thread of the process
shares: on the 16-core H200 machine, 19,800 Pfam models against the 2,100-protein sample
proteome kept the engine's 16 worker threads (:mod:`hmmgpu.search.engine`) busy only 60% of the
time, waiting for that work, and ``pyhmmer.hmmsearch`` parses every model in one thread
before it searches. Processes each have an interpreter of their own.

How it works
------------
This process splits the model file into records (:func:`hmmgpu.formats.hmmfile.model_records`: the
checks of the file's structure stay in one place) and hands batches of consecutive records
to worker processes of one thread each. Each worker reads the database once (a small one:
this route serves small models only), parses and checks its records
(:func:`hmmgpu.formats.hmmfile.parse_record`), runs the engine serially on them (pyhmmer's whole
pipeline over every target: each model's ``TopHits`` are one serial hmmsearch's), and
formats each query's outputs with the run's :class:`~hmmgpu.report.outputs.QueryFormatter`. This
process writes the formatted queries in order. At most :data:`BATCHES_IN_FLIGHT_PER_PROCESS`
batches per worker are out at once, so memory stays flat however long the model file is. The
workers are started as :mod:`hmmgpu.child` starts the GPU process: fresh interpreters that
run nothing of the caller's ``__main__``.

The outputs equal those of the engine in one process byte for byte: the same pipeline on
the same targets and the same formatter. A fault in a model is raised when the run reaches
it, once every query before it is written, as the engine does.

When
----
:meth:`hmmgpu.search.routing.SearchPlan.worker_processes` decides: on pyhmmer's route (no
filter backend), for a model file whose average model is small against the database, of
many models, with enough threads allowed, and a database a second reader can read (not
standard input); a worker process per thread.
"""
from __future__ import annotations

import math
import os
import resource
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass
from typing import Iterator

from hmmgpu.errors import HmmgpuError, WorkerError

#: Batches of models: about this many per worker process over the run, of at most
#: :data:`BATCH_MODELS_MAX` models each (larger batches cost fewer hand-offs; smaller ones
#: balance the end of the run).
BATCHES_PER_PROCESS = 8
BATCH_MODELS_MAX = 16
#: Batches sent to a worker and not yet answered, at most (one searched, one waiting, so that
#: it never waits for the next), and batches per worker not yet delivered in order, at most.
BATCHES_QUEUED_PER_PROCESS = 2
BATCHES_IN_FLIGHT_PER_PROCESS = 4


@dataclass(frozen=True)
class _Setup:
    """What every worker process needs, sent once when it starts."""

    database: str
    format: str | None
    options: object  #: the run's SearchOptions
    formatter: object  #: the run's QueryFormatter
    label: str  #: the model file as errors name it


@dataclass
class _Batch:
    """A batch's outcome: its queries' formatted outputs, in order, then the fault that
    stopped it (if any), and the worker's statistics for it."""

    blocks: list
    error: BaseException | None
    stats: object
    pid: int
    peak_rss_mb: float  #: the worker's peak memory so far


class _Worker:
    """A worker process's database and serial engine (set up once, in the worker)."""

    def __init__(self, setup: _Setup):
        self.setup, self.engine, self.error = setup, None, None
        try:
            from hmmgpu.cpu.backends import HmmerBackend
            from hmmgpu.search.engine import SearchEngine
            from hmmgpu.formats.seqdb import open_database

            db = open_database(setup.database, setup.format)
            self.engine = SearchEngine(db, setup.options.replace(cpus=0), HmmerBackend(db), ftz=True)
        except (HmmgpuError, OSError) as error:   # raised in the parent at the first batch
            self.error = error if isinstance(error, HmmgpuError) else HmmgpuError(
                f"{setup.database}: {error.strerror or error}")

    def search(self, records: list) -> _Batch:
        from hmmgpu.search.engine import EngineStats
        from hmmgpu.formats.hmmfile import parse_record
        from hmmgpu.report.outputs import formatted

        if self.error is not None:
            return _Batch([], self.error, EngineStats(), os.getpid(), _peak_rss_mb())
        start = time.perf_counter()
        faults: list = []
        engine, blocks = self.engine, []
        stats = engine.stats = EngineStats(threads=1)

        def models():
            for number, record in records:
                t0, c0 = time.perf_counter(), time.thread_time()
                try:
                    model = parse_record(record, self.setup.label, number)
                except HmmgpuError as error:   # the queries before it are still searched
                    faults.append(error)
                    return
                stats.prepare_seconds += time.perf_counter() - t0   # parsing is this process's prepare step
                stats.cpu_seconds["prepare"] += time.thread_time() - c0
                yield model

        try:
            for query in formatted(engine.search(models()), self.setup.formatter, first=records[0][0] == 1):
                blocks.append(query)
        except HmmgpuError as error:   # from a model searched (the parse of the next never started)
            faults.append(error)
        stats.processes_busy_seconds = time.perf_counter() - start
        return _Batch(blocks, faults[0] if faults else None, stats, os.getpid(), _peak_rss_mb())


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _serve(conn) -> None:
    """A worker process: its set-up, then batches until None or EOF, each answered with
    (batch number, :class:`_Batch`). A thread takes each message off the socket as it
    comes, so that the parent's send of the next batch never waits for this one's search."""
    from hmmgpu.child import inbox

    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the parent stops the run on Ctrl-C
    messages = inbox(conn)
    setup = messages.get()
    if setup is None:
        return
    worker = _Worker(setup)
    while (message := messages.get()) is not None:
        number, records = message
        try:
            batch = worker.search(records)
        except Exception as error:   # noqa: BLE001 - a fault of hmmgpu's: one line for the parent to raise
            from hmmgpu.search.engine import EngineStats

            batch = _Batch([], WorkerError(f"a worker process failed: {type(error).__name__}: "
                                           f"{' '.join(str(error).split())}"), EngineStats(), os.getpid(),
                           _peak_rss_mb())
        try:
            conn.send((number, batch))
        except OSError:   # the parent has gone
            return


class _Process:
    """One worker process and the numbers of the batches sent to it and not yet answered."""

    def __init__(self, setup: _Setup):
        from hmmgpu.child import start_worker

        self.process, self.conn = start_worker("hmmgpu.distributed.processes", setup, "a worker process")
        self.sent: deque = deque()

    def send(self, message) -> None:
        try:
            self.conn.send(message)
        except OSError:
            raise _stopped() from None

    def receive(self):
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            raise _stopped() from None

    def stop(self, now: bool) -> None:
        """Ask it to stop (``now``: kill it) and wait for it."""
        try:
            if now:
                self.process.kill()
            else:
                self.conn.send(None)
        except OSError:
            pass
        self.conn.close()
        self.process.wait()


def _stopped() -> HmmgpuError:
    return WorkerError("a worker process stopped unexpectedly (out of memory?); try fewer threads with --cpu")


class WorkerProcesses:
    """Searches the models of a file in worker processes (see the module header).

    ``WorkerProcesses(database, format, options, formatter, processes=..., queries=...)``;
    :meth:`search` yields each query's :class:`~hmmgpu.report.outputs.QueryBlocks` in order;
    :attr:`stats` sums the workers' :class:`~hmmgpu.search.engine.EngineStats`.
    """

    def __init__(self, database: str, format: str | None, options, formatter, *, processes: int,
                 queries: int):
        from hmmgpu.search.engine import EngineStats

        self.database, self.format, self.options, self.formatter = database, format, options, formatter
        self.processes = processes
        self.batch_models = max(1, min(BATCH_MODELS_MAX, math.ceil(queries / (processes * BATCHES_PER_PROCESS))))
        self.stats = EngineStats(threads=processes, processes=processes)
        self._peaks: dict = {}   # each worker's peak memory (MB), by process id

    def search(self, source) -> Iterator:
        """The formatted outputs of every model of the profile file ``source``, in order."""
        from hmmgpu.formats.hmmfile import model_records, no_models

        start = time.perf_counter()
        label, records = model_records(source)
        setup = _Setup(os.path.abspath(self.database), self.format, self.options, self.formatter, label)
        workers: list = []
        finished = False
        try:
            workers = [_Process(setup) for _ in range(self.processes)]
            yield from self._dispatched(workers, _batches(records, self.batch_models))
            if self.stats.queries == 0:
                raise no_models(label)
            finished = True
        finally:
            for worker in workers:
                worker.stop(now=not finished)
            self.stats.wall_seconds = time.perf_counter() - start

    def _dispatched(self, workers: list, batches) -> Iterator:
        """Send the batches to the workers (each keeps :data:`BATCHES_QUEUED_PER_PROCESS` at
        most, and :data:`BATCHES_IN_FLIGHT_PER_PROCESS` per worker at most are not yet
        delivered) and deliver their outputs in order. A fault in the file's structure is
        raised once every batch before it is delivered."""
        from multiprocessing.connection import wait

        answered: dict = {}
        sent = delivered = 0
        read, fault = False, None   # the whole file read (or stopped by ``fault``)
        window = BATCHES_IN_FLIGHT_PER_PROCESS * len(workers)
        while True:
            for worker in workers:
                while not read and len(worker.sent) < BATCHES_QUEUED_PER_PROCESS and sent - delivered < window:
                    try:
                        batch = next(batches, None)
                    except HmmgpuError as error:
                        batch, fault = None, error
                    if batch is None:
                        read = True
                        break
                    worker.send((sent, batch))
                    worker.sent.append(sent)
                    sent += 1
            while delivered in answered:
                yield from self._delivered(answered.pop(delivered))
                delivered += 1
            if delivered == sent:
                if read:   # and every batch delivered
                    break
                continue
            busy = {worker.conn: worker for worker in workers if worker.sent}
            for conn in wait(list(busy)):
                number, batch = busy[conn].receive()
                busy[conn].sent.remove(number)
                answered[number] = batch
        if fault is not None:
            raise fault

    def _delivered(self, batch: _Batch) -> Iterator:
        self.stats.add(batch.stats)
        self._peaks[batch.pid] = batch.peak_rss_mb
        self.stats.processes_peak_rss_mb = sum(self._peaks.values())
        yield from batch.blocks
        if batch.error is not None:
            raise batch.error


def _batches(records, size: int) -> Iterator[list]:
    """Consecutive records in lists of ``size``."""
    batch = []
    for record in records:
        batch.append(record)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


__all__ = ["WorkerProcesses"]


if __name__ == "__main__":
    from multiprocessing.connection import Connection

    from hmmgpu.distributed.processes import _serve as serve   # the package's module: what it sends is unpickled by that name

    serve(Connection(int(sys.argv[1])))
