"""Several GPUs filtering one search together: one backend per device, one shared queue of models.

What it is for
--------------
``hmmgpu search --devices all`` (and ``scan``, and ``devices=`` in the API) puts every listed
GPU to work on one search. Each GPU gets a GPU process of its own
(:class:`~hmmgpu.gpu.process.CudaProcessBackend`, one device id per process, as one GPU does
already), and each process keeps the *whole* database resident on its device. What is split
is the models: each model's filter cascade (MSV, bias, Viterbi filter) runs on one device over
every target, so its survivors and counters are the ones a single GPU gives, with the same
global positions. Nothing downstream changes: the engine (:mod:`hmmgpu.search.engine`) cuts
the survivors into tasks for pyhmmer's Forward/domain stage on this process's threads and
merges them (:mod:`hmmgpu.stages.merge`, Z and domZ the whole database's), in query order.
The output is therefore byte for byte a one-GPU run's whichever device ran a model.

:class:`MultiDeviceBackend` is itself a :class:`~hmmgpu.stages.protocol.CascadeBackend`, so
the engine, hmmscan's narrowing (:class:`~hmmgpu.search.scan.CascadeNarrowing`) and the API
take it where they take one GPU. It only says where each model goes; routing
(:mod:`hmmgpu.search.routing`) decides that there are several devices and makes their
backends (any ``CascadeBackend`` will do: the tests use hmmgpu's exact CPU filters as
"devices").

How the work is split
---------------------
By estimated cost, pulled rather than dealt. ``submit`` puts the model on one queue shared
by every device, in query order. Each device has a *feeder* thread that takes the next model
from the queue whenever the work the device holds (models sent and not yet answered) is under
its budget, and a *collector* thread that waits for the device's answers in order and hands
each to its model's ticket. A model's cost is its length times the database's residues (model
cells, :mod:`hmmgpu.costs`), and the budget is :data:`MODELS_AHEAD_PER_DEVICE` models of the
average cost seen so far: enough to keep the GPU process's ring of 8 models full, with the
next ones waiting. A faster device, or one that drew short models, comes back for more
sooner, so the devices finish together without any static split: at the end each holds at
most its budget, about 0.3 s of one H100's work for 600 Pfam models against 116 M residues.
A caller that waits for its models in order keeps :attr:`MultiDeviceBackend.models_in_flight`
submitted (every device's budget), not one device's ring: hmmscan's narrowing does. With
hmmgpu's own post-filter (``--postfilter hmmgpu``) a model's answer waits seconds for its
passers' domain definitions in the GPU process, so there each device's budget (``models_ahead``,
set by :mod:`~hmmgpu.search.routing`) is the engine's window on that route
(:data:`~hmmgpu.search.engine.MODELS_IN_FLIGHT_OWN_POSTFILTER_MIN` models): a budget of 16
would hold the filters back as the window of 256 models did on one GPU.

The threads live only while there is work: a device's feeder starts when a model is queued
and ends when the queue is empty, its collector starts when a model is sent to it and ends
when every model sent is answered, and a thread a device waits for its start and ends. When
a search's last model is answered, no thread of this object is left, closed or not (pyhmmer's
functions leave none, and the API's callers need not close with ``wait=True``).

The same object with one device serves a dask worker's GPU (:func:`~hmmgpu.search.routing.shard_backend`):
the GPU process takes one submitting and one waiting thread, and the feeder and collector
let every task thread of the worker submit and wait at once, none of them blocked on a full
socket while the GPU process waits for its answers to be read.

The queue is first in, first out, not largest first. The engine waits for the models' results
in query order and feeds pyhmmer's threads from them, so a model held back behind larger ones
would stall everything after it; dealing in query order keeps the CPU threads fed from the
start, and the budget bounds the imbalance at the end instead.

Faults
------
A device that cannot start (or fails later) fails the search with its one-line error: its
feeder waits for its backend to be ready before it takes a model, so no model is lost in a
device that never started, and ``ready`` raises the first failure. Closing stops the feeders,
closes every device's backend and fails the tickets still waiting.
"""
from __future__ import annotations

import math
import queue
import threading
import time
from collections import deque

from hmmgpu.errors import HmmgpuError, WorkerError
from hmmgpu.stages.protocol import CascadeBackend

#: A device's budget, in models of the average cost so far: the GPU process runs
#: :data:`~hmmgpu.gpu.cascade.SLOTS` (8) models at once, and as many more wait in its queue so
#: that it never waits for the next one.
MODELS_AHEAD_PER_DEVICE = 16


class _Prepared:
    """A model as one device's backend prepared it (the devices hold the same database, so any
    device's preparation does for all), and its estimated cost."""

    def __init__(self, model, cost: float):
        self.model = model
        self.cost = cost


class _Ticket:
    """One model's cascade, answered by whichever device ran it."""

    def __init__(self, prepared: _Prepared, options):
        self.prepared = prepared
        self.options = options
        self.device = None  #: the device that ran it
        self._done = threading.Event()
        self._value = None
        self._error = None

    def finish(self, value=None, error: BaseException | None = None) -> None:
        self._value, self._error = value, error
        self._done.set()

    def result(self):
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value


class MultiDeviceBackend(CascadeBackend):
    """The filter cascade on several devices at once, over one database (see the module header).

    ``members``: device id -> that device's :class:`~hmmgpu.stages.protocol.CascadeBackend`,
    each over the whole database (started already; this object closes them). ``db`` may be
    None until :meth:`attach` gives it (backends started before the database was read).
    """

    def __init__(self, db, members: dict, *, models_ahead: int | None = None):
        if not members:
            raise HmmgpuError("internal: a multi-device backend needs at least one device")
        super().__init__(db)
        self.members = dict(members)
        #: each device's budget, in models of the average cost so far (:data:`MODELS_AHEAD_PER_DEVICE` by default)
        self.models_ahead = models_ahead or MODELS_AHEAD_PER_DEVICE
        self._first = next(iter(self.members.values()))
        self._lock = threading.Condition()
        self._queue: deque = deque()
        self._held = {device: 0.0 for device in self.members}  # estimated cost sent, not answered
        self._sent = {device: 0 for device in self.members}   # models sent, not answered
        self._ran = {device: 0 for device in self.members}    # models answered
        self._started: set = set()
        self._failure: BaseException | None = None
        self._closed = False
        self._costs = [0.0, 0]  # sum and count of the costs submitted (the budget's average)
        self._answers = {device: queue.Queue() for device in self.members}
        self._feeding: set = set()      # devices whose feeder runs
        self._collecting: set = set()   # devices whose collector runs
        self._starting = set(self.members)   # devices whose start is waited for
        for device in self.members:
            threading.Thread(target=self._start, args=(device,), name=f"hmmgpu-device{device}-start",
                             daemon=True).start()

    # ------------------------------------------------------------ each device's threads
    def _start(self, device: int) -> None:
        """Wait for the device's backend to start, then let it take models (this thread ends)."""
        try:
            self.members[device].ready()
        except BaseException as error:  # noqa: BLE001 - the search's error, raised by ready()
            self._fail(error)
            with self._lock:
                self._starting.discard(device)
                self._lock.notify_all()
            return
        with self._lock:
            self._starting.discard(device)
            self._started.add(device)
            self._wake_feeders()
            self._lock.notify_all()

    def _wake_feeders(self) -> None:
        """Start the feeder of every started device that has none while models wait (under the lock)."""
        if not self._queue or self._closed:
            return
        for device in self._started - self._feeding:
            self._feeding.add(device)
            threading.Thread(target=self._feed, args=(device,), name=f"hmmgpu-device{device}-feed",
                             daemon=True).start()

    def _feed(self, device: int) -> None:
        """Send models from the shared queue to ``device`` while its budget allows; end once the
        queue is empty (:meth:`submit` starts a feeder again)."""
        backend = self.members[device]
        while True:
            with self._lock:
                while not self._closed and self._queue and not self._has_room(device, self._queue[0].prepared.cost):
                    self._lock.wait()
                if self._closed or not self._queue:
                    self._feeding.discard(device)
                    self._lock.notify_all()
                    return
                ticket = self._queue.popleft()
                self._held[device] += ticket.prepared.cost
                self._sent[device] += 1
                if device not in self._collecting:
                    self._collecting.add(device)
                    threading.Thread(target=self._collect, args=(device,), name=f"hmmgpu-device{device}-collect",
                                     daemon=True).start()
            ticket.device = device
            try:
                answer = backend.submit(ticket.prepared.model, ticket.options)
            except BaseException as error:  # noqa: BLE001 - the model's error, raised by its result()
                self._answers[device].put((ticket, None, error))
                continue
            self._answers[device].put((ticket, answer, None))

    def _has_room(self, device: int, cost: float) -> bool:
        """Whether ``device`` takes a model of ``cost`` now: it holds nothing, or its work with
        the model stays within its budget (:attr:`models_ahead` average models)."""
        total, count = self._costs
        budget = self.models_ahead * (total / count if count else cost)
        return self._sent[device] == 0 or self._held[device] + cost <= budget

    def _collect(self, device: int) -> None:
        """Hand each of ``device``'s answers, in order, to its model's ticket; end once every
        model sent to it is answered (its feeder starts a collector again)."""
        answers = self._answers[device]
        while True:
            with self._lock:
                if not self._sent[device]:
                    self._collecting.discard(device)
                    self._lock.notify_all()
                    return
            item = answers.get()
            if item is None:   # closed
                with self._lock:
                    self._collecting.discard(device)
                    self._lock.notify_all()
                return
            ticket, answer, error = item
            if error is None:
                try:
                    ticket.finish(answer.result())
                except BaseException as failure:  # noqa: BLE001
                    ticket.finish(error=failure)
            else:
                ticket.finish(error=error)
            with self._lock:
                self._held[device] -= ticket.prepared.cost
                self._sent[device] -= 1
                self._ran[device] += 1
                self._lock.notify_all()

    def _fail(self, error: BaseException) -> None:
        with self._lock:
            if self._failure is None:
                self._failure = error
            self._lock.notify_all()

    # ------------------------------------------------------------ the backend
    def attach(self, db) -> None:
        """Search ``db``, this process's reading of the file the devices' processes read too."""
        self.db = db
        for backend in self.members.values():
            attach = getattr(backend, "attach", None)
            if attach is not None:
                attach(db)

    def ready(self, timeout: float | None = None) -> bool:
        """Whether a device takes models now (the first one ready); raises the first device's
        failure to start."""
        with self._lock:
            if not self._lock.wait_for(lambda: self._started or self._failure is not None, timeout):
                return False
            if self._failure is not None:
                raise self._failure
            return True

    def prepare(self, hmm, mmu: float | None = None) -> _Prepared:
        residues = float(self.db.total_residues) if self.db is not None else 1.0
        return _Prepared(self._first.prepare(hmm, mmu), float(hmm.M) * residues)

    def prepare_for(self, lengths) -> None:
        """Every device gets ready for these model lengths (their kernels), at the same time."""
        lengths = list(lengths)
        failures: list = []

        def one(backend):
            try:
                backend.prepare_for(lengths)
            except BaseException as error:  # noqa: BLE001 - raised below, in this thread
                failures.append(error)

        threads = [threading.Thread(target=one, args=(b,), daemon=True) for b in self.members.values()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failures:
            raise failures[0]

    def set_float_mode(self, ftz: bool) -> None:
        for backend in self.members.values():
            backend.set_float_mode(ftz)

    def submit(self, model: _Prepared, options) -> _Ticket:
        ticket = _Ticket(model, options)
        with self._lock:
            if self._failure is not None:
                raise self._failure
            if self._closed:
                raise WorkerError("the devices' backend is closed")
            self._costs[0] += model.cost
            self._costs[1] += 1
            self._queue.append(ticket)
            self._wake_feeders()
            self._lock.notify_all()
        return ticket

    def waiting(self) -> int:
        """Models not yet answered, per device (the engine compares it with one GPU's ring)."""
        with self._lock:
            unanswered = len(self._queue) + sum(self._sent.values())
        return math.ceil(unanswered / len(self.members))

    @property
    def models_in_flight(self) -> int:
        """Models to keep submitted and not yet taken, so that every device stays busy: its
        budget (:attr:`models_ahead`) each (hmmscan's narrowing keeps this many)."""
        return self.models_ahead * len(self.members)

    def gpu_seconds(self) -> float:
        """Kernel time summed over the devices."""
        return sum(backend.gpu_seconds() for backend in self.members.values())

    @property
    def description(self) -> str:
        """``backend <kind> on N devices (ids ...)``, then each device's own description."""
        ids = ",".join(str(d) for d in self.members)
        words = [backend.description.removeprefix("backend ") for backend in self.members.values()]
        kind = words[0].split(" ", 1)[0].rstrip(",")
        return f"backend {kind} on {len(self.members)} devices (ids {ids}): " + "; ".join(words)

    def details(self) -> dict:
        """Each device's models and its own breakdown."""
        return {f"device {d}": dict(models=self._ran[d], **backend.details()) for d, backend in self.members.items()}

    def close(self, wait: bool = True) -> None:
        with self._lock:
            self._closed = True
            left, self._queue = list(self._queue), deque()
            self._lock.notify_all()
        for ticket in left:
            ticket.finish(error=WorkerError("the search stopped before this model ran"))
        for backend in self.members.values():
            backend.close(wait=wait)
        with self._lock:
            collecting = set(self._collecting)
        for device in collecting:   # (a collector waiting for an answer that will not come)
            self._answers[device].put(None)
        if wait:
            deadline = time.monotonic() + 10
            with self._lock:
                self._lock.wait_for(lambda: not (self._starting or self._feeding or self._collecting),
                                    max(0.0, deadline - time.monotonic()))


__all__ = ["MultiDeviceBackend", "MODELS_AHEAD_PER_DEVICE"]
