"""``hmmgpu sw --devices``: the Smith-Waterman search on several GPUs at once, output in query order.

What it is for
--------------
:class:`~hmmgpu.sw.api.SwSearch` holds the database on one GPU, in the process that calls it.
To put several GPUs of a host to work, this module starts one *device process* per GPU (a
fresh interpreter, ``python -m hmmgpu.sw.devices FD``, started as :mod:`hmmgpu.child` starts
the GPU process of the HMM search), each with its own ``SwSearch`` on its device and the
whole database resident there. The queries are split between them; every query's hits and
statistics depend only on the query and the whole database (the search space is the whole
database's), so each device process formats its queries' output exactly as one GPU's run
formats it, and this process writes the blocks in query order: the output is one GPU's byte
for byte (but the final timing line).

How the work is split
---------------------
By estimated cost, pulled rather than dealt, as :mod:`hmmgpu.search.multidevice` splits models:
the queries are cut, in order, into batches of about equal cost (query length x the
database's residues), :data:`BATCHES_PER_DEVICE` a device, and put on one queue. A feeder
thread per device sends the next batch whenever its device holds fewer than
:data:`BATCHES_AHEAD` (one scanning, one waiting, so that it never waits for work); a
collector thread per device receives each batch's formatted queries. A faster device takes
more batches; at the end the devices finish within about one batch of each other. A batch
is several queries, because a GPU scans many queries in flight (:mod:`hmmgpu.gpu.sw.batches`).

Protocol
--------
The parent sends ``("init", database, settings, backend, device)``, where ``settings`` are
:class:`~hmmgpu.sw.api.SwSearch`'s keyword arguments and the output format; the child
answers ``("ready", notice, whether the database looks like nucleotides)`` or ``("error", message)``. Then ``("batch", number, queries)``
((name, codes) pairs) for each batch, each answered ``("done", number, texts)`` (one block of
output a query) or ``("error", message)``; finally ``None``. ``backend`` is the device
processes' own (``cuda``; the tests run ``cpu`` "devices" where there is no GPU).
"""
from __future__ import annotations

import signal
import sys
import threading
from collections import deque
from multiprocessing.connection import Connection

from hmmgpu.child import start_child
from hmmgpu.errors import HmmgpuError, InputError, WorkerError
from hmmgpu.host import end_process

#: Batches a device gets over the run, about (more balance the end; fewer cost fewer hand-offs).
BATCHES_PER_DEVICE = 4
#: Batches sent to a device and not yet answered, at most.
BATCHES_AHEAD = 2


def device_ids(devices, backend: str) -> tuple:
    """The GPUs ``--devices`` names (``all`` or ids), checked against the GPUs present as the
    HMM search checks them (:func:`hmmgpu.gpu.runtime.context.device_ids`); ``--backend cpu`` runs
    none (one-line errors)."""
    from hmmgpu.options import RunOptions
    from hmmgpu.gpu.runtime.context import device_ids as checked

    if backend == "cpu":
        raise InputError("--devices names GPUs; --backend cpu runs none (use --backend auto or cuda)")
    return checked(RunOptions(backend="cuda", devices=devices))


def batches(queries: list, count: int) -> list:
    """``queries`` ((name, codes) pairs) cut, in order, into about ``count`` batches of about
    equal cost (query residues; the database is the same for all): lists of (index, query)."""
    total = sum(int(codes.size) for _, codes in queries)
    target = max(1.0, total / max(1, count))
    out, batch, cost = [], [], 0
    for index, query in enumerate(queries):
        batch.append((index, query))
        cost += int(query[1].size)
        if cost >= target:
            out.append(batch)
            batch, cost = [], 0
    return out + [batch] * bool(batch)


class DeviceSearch:
    """The Smith-Waterman search on the devices ``devices`` (ids), one device process each.

    ``settings``: :class:`~hmmgpu.sw.api.SwSearch`'s keyword arguments (matrix, gap costs,
    max_hits, evalue, threads, alignments, tracebacks) and ``outfmt`` (0 or 6). ``backend``:
    what each device process runs (``cuda``). Use as a context manager; :meth:`search`
    yields each query's formatted output in query order.
    """

    def __init__(self, database, devices, settings: dict, backend: str = "cuda"):
        import os

        self.devices = tuple(devices)
        self._children = {}
        self._failure = None
        self._lock = threading.Condition()
        try:
            for device in self.devices:
                process, conn = start_child("hmmgpu.sw.devices")
                self._children[device] = (process, conn)
                conn.send(("init", os.path.abspath(os.fspath(database)), dict(settings), backend, device))
            notices = []
            for device, (_, conn) in self._children.items():
                reply = self._receive(device, conn)
                if reply[0] == "error":
                    raise HmmgpuError(f"device {device}: {reply[1]}")
                notices.append(reply[1])
                self.database_looks_like_nucleotide = reply[2]
        except BaseException:
            self.close()
            raise
        self.notice = f"{len(self.devices)} devices (ids {','.join(map(str, self.devices))}), a process each: " + \
            "; ".join(notices)

    def _receive(self, device: int, conn: Connection):
        try:
            return conn.recv()
        except (EOFError, OSError):
            code = self._children[device][0].poll()
            raise WorkerError(f"the Smith-Waterman process of device {device} stopped (exit code {code})") from None

    def search(self, queries: list):
        """Each query's formatted output (a string), in query order."""
        cut = batches(queries, BATCHES_PER_DEVICE * len(self.devices))
        work = deque(enumerate(cut))
        results: dict = {}
        held = {device: 0 for device in self.devices}
        sent = {device: deque() for device in self.devices}

        def feed(device, conn):
            while True:
                with self._lock:
                    while work and held[device] >= BATCHES_AHEAD and self._failure is None:
                        self._lock.wait()
                    if not work or self._failure is not None:
                        return
                    number, batch = work.popleft()
                    held[device] += 1
                    sent[device].append(number)
                    self._lock.notify_all()
                try:
                    conn.send(("batch", number, [query for _, query in batch]))
                except OSError:
                    return self._fail(WorkerError(f"the Smith-Waterman process of device {device} stopped"))

        def collect(device, conn):
            while True:
                with self._lock:
                    while not sent[device] and (work or held[device]) and self._failure is None:
                        self._lock.wait()
                    if not sent[device] or self._failure is not None:
                        return
                try:
                    reply = self._receive(device, conn)
                except HmmgpuError as error:
                    return self._fail(error)
                if reply[0] == "error":
                    return self._fail(HmmgpuError(f"device {device}: {reply[1]}"))
                with self._lock:
                    number = sent[device].popleft()
                    results[number] = reply[2]
                    held[device] -= 1
                    self._lock.notify_all()

        threads = [threading.Thread(target=loop, args=(device, conn), daemon=True)
                   for device, (_, conn) in self._children.items() for loop in (feed, collect)]
        for thread in threads:
            thread.start()
        for number in range(len(cut)):
            with self._lock:
                while number not in results and self._failure is None:
                    self._lock.wait()
                if self._failure is not None:
                    raise self._failure
                texts = results.pop(number)
            yield from texts

    def _fail(self, error: BaseException) -> None:
        with self._lock:
            if self._failure is None:
                self._failure = error
            self._lock.notify_all()

    def close(self) -> None:
        self._fail(WorkerError("closed"))
        for process, conn in self._children.values():
            try:
                conn.send(None)
            except OSError:
                pass
        for process, conn in self._children.values():
            try:
                process.wait(timeout=30)
            except Exception:  # noqa: BLE001 - a child that does not stop is killed
                process.kill()
                process.wait()
            conn.close()
        self._children = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def write_on_devices(args, devices, queries: list, out) -> None:
    """``hmmgpu sw --devices``'s output (:func:`hmmgpu.sw.cli.run` reads the arguments and
    opens ``out``): the queries on ``devices``, written in query order, as one GPU writes them;
    ``--cpu`` threads shared between the devices' tracebacks."""
    import time

    from hmmgpu._version import __version__
    from hmmgpu.host import usable_cores
    from hmmgpu.sw.api import looks_like_nucleotide
    from hmmgpu.sw.output import done_line

    threads = max(1, (args.threads or usable_cores()) // len(devices))
    settings = dict(matrix=args.matrix, gap_open=args.gapopen, gap_extend=args.gapextend, max_hits=args.max_hits,
                    evalue=args.evalue, threads=threads, alignments=args.alignments,
                    tracebacks=None if args.outfmt == 6 else max(args.alignments, 0), outfmt=args.outfmt)
    with DeviceSearch(args.db, devices, settings) as search:
        print(f"# hmmgpu {__version__}: Smith-Waterman on {search.notice}", file=sys.stderr)
        for path, nucleotide in ((args.queries, looks_like_nucleotide(queries)),
                                 (args.db, search.database_looks_like_nucleotide)):
            if nucleotide:
                print(f"hmmgpu: warning: {path} looks like nucleotide sequence; aligning it as protein",
                      file=sys.stderr)
        start = time.perf_counter()
        for text in search.search(queries):
            out.write(text)
            out.flush()
    if args.outfmt != 6:
        out.write(done_line(len(queries), time.perf_counter() - start))
    out.flush()


def _serve(conn: Connection) -> None:
    """A device process: its ``SwSearch`` on one device, then batches until None."""
    import io

    from hmmgpu.sw.api import SwSearch
    from hmmgpu.sw.output import format_report, write_tabular

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and closes the socket
    try:
        _, database, settings, backend, device = conn.recv()
    except (EOFError, OSError):
        return
    outfmt = settings.pop("outfmt")
    try:
        search = SwSearch(database, backend=backend, device=device, **settings)
    except HmmgpuError as error:
        conn.send(("error", str(error)))
        return
    conn.send(("ready", search.notice, search.db.looks_like_nucleotide()))
    with search:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                return
            if message is None:
                return
            _, number, queries = message
            try:
                texts = []
                for hits in search.iter_search(queries):
                    if outfmt == 6:
                        out = io.StringIO()
                        write_tabular(out, hits)
                        texts.append(out.getvalue())
                    else:
                        texts.append(format_report(hits, search.db, search.params, settings["alignments"]))
                conn.send(("done", number, texts))
            except HmmgpuError as error:
                conn.send(("error", str(error)))


__all__ = ["DeviceSearch", "device_ids", "batches", "write_on_devices"]


if __name__ == "__main__":
    _serve(Connection(int(sys.argv[1])))
    end_process(0)  # its answers sent: the exit's teardown (numba, the device's context) skipped
