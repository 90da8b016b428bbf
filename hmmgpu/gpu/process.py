"""The GPU filter cascade in a process of its own: the search engine's CUDA backend.

Why a process
-------------
Per model, the host's side of the GPU cascade is interpreter work: building the quantized
tables from the model, staging them, launching three kernels and finishing their results
(about 5 ms of CPU per Pfam model). In the engine's process that work shares one GIL
with the sixteen threads that hand tasks to pyhmmer's Forward stage, and each side keeps
the other waiting: measured on the 16-core GPU machine with 600 Pfam models, the filter
threads were busy three times as long as their CPU time, and the GPU side, not the CPU
or the GPU, set the pace of the search. Here it runs in a child process with its own GIL;
the engine's process sends each model (about 30 KB pickled) and receives its survivors.
One process per GPU is also how several GPUs share a search (``--devices``,
:mod:`hmmgpu.search.multidevice`): each child owns one device id.

Protocol
--------
The child is a fresh interpreter (``python -m hmmgpu.gpu.process FD``) on one end of a
socket pair; it inherits standard error (compile notices). The parent sends, in order:
``("init", database path, format, lanes, device, max_bytes, model lengths or None, span or None)``
(``span``: ``(first, end)``, only those targets of a made database: a dask worker's shard), then any number of
``("compile", model lengths)``, ``("model", hmm, mmu, options, ftz)`` (``ftz``: the search's float mode,
:meth:`~hmmgpu.stages.protocol.Backend.set_float_mode`), ``("define", {key: hmm},
[(key, seed, passers), ...])`` and ``("stats",)``, and finally ``None``. The child answers ``("ready",
description, lanes, (targets, residues))`` or ``("error", message)`` to the first; ``("done", k,
CascadeResult)`` or ``("error", k, message)`` for the k-th model (counted from 0) as soon as its
result is finished, whatever the models before it; ``("compiled", n)`` and ``("stats", details,
GPU seconds)`` once every model sent before the request is answered; ``("defined", [(decoded,
defined), ...])`` or ``("error", message)`` to a ``define`` at once (the engine sends it only once
every model is answered: the post-filter's tasks still queued when the filters are done, their
F3 passers decoded and defined here, :meth:`~hmmgpu.gpu.cascade.GpuCascade.define_passers`). Models are queued on the GPU as they arrive, up to the
cascade's ring of :data:`~hmmgpu.gpu.cascade.SLOTS`. Results go back out of order because
with hmmgpu's own post-filter a model's result waits seconds for its gate batch's domain
definitions, and the models of the batches declined to pyhmmer's pipeline
(:data:`~hmmgpu.gpu.runtime.tuning.DEFINE_BACKLOG_PASSERS`) must not wait for them. With
hmmgpu's own post-filter (the model's options say ``postfilter="hmmgpu"``) a model's result
also carries its F3 passers' Forward scores and domain decodings
(:class:`~hmmgpu.stages.decoded.DecodedTargets`, twelve bytes a residue: about 370 KB a Pfam
model against 29 M residues), and goes back once their second launch is done; here domain
definition then runs on the decoded passers with the GPU's stages
(:meth:`~hmmgpu.gpu.cascade.GpuCascade.define_domains_of`, seeded with the options' ``--seed``),
and the passers whose definitions no exactness flag marks go back as those definitions
(:class:`~hmmgpu.stages.defined.DefinedTargets`: counters, domains, traces) instead of their
decodings.

The database is never pickled: the child opens the same file itself (a database made by
``hmmgpu makedb`` is mapped, a sequence file is read while the parent reads it too, so the
GPU starts up at the same time), and input that cannot be read twice (standard input) is
saved once in ``makedb``'s format to a temporary directory (in ``/dev/shm`` where it
exists), removed when the backend closes. The constructor returns at once; ``ready(0)``
says whether the child has answered (the engine sends models to pyhmmer's route until it
has), and the first call that needs the child (``prepare_for``, a result) waits for it.

The child starts the CUDA driver and creates the device's context in a thread while it
imports numpy and pyhmmer and reads the database (plain driver calls, which leave the
interpreter's lock free: 0.3-0.4 s on the GPU machine,
:func:`~hmmgpu.gpu.runtime.context.open_primary_context`). Then it loads the kernels for the model
lengths of the ``init`` message and puts the database on the device. The kernels are the cubins numba compiled and :mod:`hmmgpu.gpu.runtime.build`
exported, or those shipped for sm_90, loaded and launched through the CUDA driver
(:mod:`hmmgpu.gpu.runtime.driver`): the child imports numba's CUDA target only when a kernel
it needs was neither shipped nor compiled on this machine, domain definition's kernels of
``--postfilter hmmgpu`` included (whose CPU references import numba's CPU compiler; the
statistics say which were imported: ``numba_imported``, ``numba_cuda_imported``). Loading
numba's CUDA target and its cached kernels took 0.85 s of this start-up before.
"""
from __future__ import annotations

import collections
import importlib
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection

from hmmgpu.stages.protocol import CascadeBackend
from hmmgpu.child import start_child
from hmmgpu.errors import DeviceUnavailable, HmmgpuError, WorkerError
from hmmgpu.gpu.runtime import tuning


#: How the child's answer to ``init`` starts when there is no usable device (then its id).
NO_DEVICE = "no usable CUDA GPU with id"


def child_error(message: str) -> HmmgpuError:
    """The typed error of a one-line error that the GPU process sent: no usable device, or
    another failure of the process."""
    return DeviceUnavailable(message) if message.startswith(NO_DEVICE) else WorkerError(message)


def _serve(conn: Connection) -> None:
    """The child: set up the GPU backend, then run models until None or EOF."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and closes the socket
    try:
        _, path, fmt, lanes, device, max_bytes, lengths, span = conn.recv()
    except (EOFError, OSError):
        return
    try:
        from concurrent.futures import ThreadPoolExecutor

        from hmmgpu.gpu.runtime.context import open_primary_context

        startup = {}
        clock = time.perf_counter()
        with ThreadPoolExecutor(1) as driver_thread:  # the driver's start-up beside the imports and the read
            driver = driver_thread.submit(open_primary_context, device)
            importlib.import_module("pyhmmer.plan7")  # beside the driver's start, not at the first model

            from hmmgpu.gpu.backend import CudaBackend
            from hmmgpu.gpu.cascade import SLOTS, forward_tables, load_kernels
            from hmmgpu.gpu.runtime.device import GpuDevice
            from hmmgpu.stages.profiles import ModelProfile
            from hmmgpu.formats.seqdb import open_database

            startup["imports"], clock = time.perf_counter() - clock, time.perf_counter()
            db = open_database(path, fmt, arrays=True)  # the numpy reader: the arrays to upload
            if span is not None:
                db = db.shard(*span)
            startup["database"], clock = time.perf_counter() - clock, time.perf_counter()
            if not driver.result():
                raise DeviceUnavailable(f"{NO_DEVICE} {device}")
        startup["driver_wait"], clock = time.perf_counter() - clock, time.perf_counter()
        opened = GpuDevice.open(device)
        if lengths:  # the kernels the models need, without waiting for the parent to ask
            load_kernels(opened, lanes, lengths)
        startup["device_and_kernels"], clock = time.perf_counter() - clock, time.perf_counter()
        backend = CudaBackend(db, lanes=lanes, device=device, max_bytes=max_bytes)
        startup["resident"] = time.perf_counter() - clock
        startup.update(backend.setup_seconds)
    except HmmgpuError as error:
        conn.send(("error", str(error)))
        return
    except Exception as error:  # noqa: BLE001 - one line in the parent
        conn.send(("error", _one_line(error)))
        return
    conn.send(("ready", backend.description, backend.lanes, (db.n, db.total_residues)))
    sender = _Sender(conn)
    # this process's threads (the loop's filters, the definers, the ensembles' pool) each make
    # many short driver calls, which leave the interpreter's lock: a short switch interval lets
    # a thread back in without waiting for another's Python to be interrupted
    sys.setswitchinterval(tuning.GPU_PROCESS_SWITCH_INTERVAL)
    pending: collections.deque = collections.deque()  # (k, "model", ticket) or (k, "error", message)
    gating: list = []  # (k, "model", GateTicket) or (k, "error", message), oldest first
    received = 0  # models received
    try:
        while True:
            # take requests while the GPU has room (or must, with nothing in flight) ...
            while (not pending and not gating) or (len(pending) < SLOTS and conn.poll(0)):
                try:
                    message = conn.recv()
                except (EOFError, OSError):
                    return
                if message is None:
                    _drain(sender, backend, pending, gating)
                    return
                kind = message[0]
                if kind == "model":
                    try:
                        _, hmm, mmu, options, ftz = message
                        backend.set_float_mode(ftz)
                        pending.append((received, "model", backend.submit(ModelProfile.from_hmm(hmm, mmu), options)))
                    except Exception as error:  # noqa: BLE001
                        pending.append((received, "error", _one_line(error)))
                    received += 1
                elif kind == "compile":
                    _drain(sender, backend, pending, gating)
                    clock = time.perf_counter()
                    sender.send(("compiled", backend.prepare_for(message[1])))
                    startup["kernels"] = time.perf_counter() - clock
                elif kind == "define":
                    try:
                        _, models, items = message
                        tables = {key: forward_tables(hmm) for key, hmm in models.items()}
                        sender.send(("defined", backend.gpu.define_passers(
                            [(tables[key], seed, passers) for key, seed, passers in items])),
                                    lambda error: ("error", _one_line(error)))
                    except Exception as error:  # noqa: BLE001
                        sender.send(("error", _one_line(error)))
                elif kind == "stats":
                    _drain(sender, backend, pending, gating)
                    details = dict(backend.details(), startup={k: round(v, 3) for k, v in startup.items()},
                                   process_cpu_seconds=round(time.process_time(), 3),
                                   numba_imported="numba" in sys.modules,
                                   numba_cuda_imported="numba.cuda" in sys.modules)
                    sender.send(("stats", details, backend.gpu_seconds()))
            # ... then finish the oldest model's filters (its Forward gate joins the next batch),
            # send every result that is done, and, with nothing else to do, launch the gates
            # still queued and wait for a result
            if pending:
                gating.append(_filtered(pending.popleft()))
            backend.advance_decoding()
            gating = _send_ready(sender, gating)
            if gating and not pending and not conn.poll(0):
                if gating[0][1] == "model" and gating[0][2].queued():
                    backend.flush_gates()  # the oldest model's gate waits for a fuller batch: no more
                # wait for a result, or for a request (a gate batch fills while the parent sends
                # models, instead of being launched partial at every wait)
                while not any(_ready(entry) for entry in gating) and not conn.poll(tuning.GPU_PROCESS_POLL_SECONDS):
                    backend.advance_decoding()
    finally:
        sender.close()
        backend.close()


class _Sender:
    """The child's answers, written to the parent in order by a thread of their own. The parent
    reads them in its finishing thread, which shares its interpreter with the post-filter's
    sixteen worker threads; a large answer (a model's definitions: traces and null2 scores)
    then fills the socket, and the write waited, with the loop that feeds the GPU behind it (the
    own post-filter's loop spent 2.5 s of a 17 s search in such writes, py-spy, one H200). Here
    the loop only queues an answer; this thread pickles and writes it. ``send(message,
    failed)``: ``failed(error)`` is sent instead where ``message`` cannot be pickled (its
    model's one-line error). Once the parent has gone, answers are dropped. ``close()`` waits
    until every answer queued is written."""

    def __init__(self, conn: Connection):
        self._conn = conn
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="hmmgpu-sender", daemon=True)
        self._thread.start()

    def send(self, message, failed=None) -> None:
        self._queue.put((message, failed))

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        gone = False
        while True:
            entry = self._queue.get()
            if entry is None:
                return
            message, failed = entry
            if gone:
                continue
            try:
                self._conn.send(message)
            except (OSError, EOFError):
                gone = True
            except Exception as error:  # noqa: BLE001 - an answer that cannot be pickled
                try:
                    self._conn.send(failed(error) if failed else ("error", _one_line(error)))
                except (OSError, EOFError):
                    gone = True


def _ready(entry: tuple) -> bool:
    """Whether an entry of ``gating`` can be sent without waiting (an error always can)."""
    return entry[1] == "error" or entry[2].ready()


def _filtered(entry: tuple) -> tuple:
    """A model's filters finished (its gate queued): (k, "model", GateTicket), or (k, "error", message)."""
    k, kind, value = entry
    if kind == "error":
        return entry
    try:
        return k, "model", value.filtered()
    except Exception as error:  # noqa: BLE001
        return k, "error", _one_line(error)


def _send_gated(sender: "_Sender", entry: tuple) -> None:
    k, kind, value = entry
    if kind == "error":
        sender.send(("error", k, value))
        return
    try:
        sender.send(("done", k, value.result()), lambda error: ("error", k, _one_line(error)))
    except Exception as error:  # noqa: BLE001
        sender.send(("error", k, _one_line(error)))


def _send_ready(sender: "_Sender", gating: list) -> list:
    """Send every entry of ``gating`` that is done; the others, in their order."""
    waiting = []
    for entry in gating:
        if _ready(entry):
            _send_gated(sender, entry)
        else:
            waiting.append(entry)
    return waiting


def _drain(sender: "_Sender", backend, pending: collections.deque, gating: list) -> None:
    """Finish and send everything in flight."""
    while pending:
        gating.append(_filtered(pending.popleft()))
    backend.flush_gates()
    for entry in gating:
        _send_gated(sender, entry)
    gating.clear()


def _one_line(error: BaseException) -> str:
    return str(error) if isinstance(error, HmmgpuError) else f"{type(error).__name__}: {' '.join(str(error).split())}"


class _Model:
    """A model on its way to the child: the pyhmmer HMM and its MSV location parameter (the
    child makes its filter profiles: made here instead, in the engine's prepare thread, they took
    longer, the searching process's interpreter busier; docs/performance.md)."""

    def __init__(self, hmm, mmu):
        self.hmm = hmm
        self.mmu = mmu


class _Ticket:
    """One model sent to the child; :meth:`result` waits for its answer (results arrive in any
    order), :meth:`answered` says whether it has come."""

    def __init__(self, backend):
        self._backend = backend
        self._done = False
        self._value = None

    def answered(self) -> bool:
        return self._done

    def result(self):
        self._backend._wait_for(self)
        if isinstance(self._value, HmmgpuError):
            raise self._value
        return self._value


class CudaProcessBackend(CascadeBackend):
    """The GPU cascade (:class:`~hmmgpu.gpu.backend.CudaBackend`) in a child process, on one
    device (explicit id), over ``db`` or over the sequence file ``source = (path, format)``
    that the caller reads as well; ``span = (first, end)``: only those targets of the made
    database (``db`` is then that shard, :meth:`~hmmgpu.formats.seqdb.SequenceDB.shard`). Use
    from one submitting and one waiting thread at most."""

    answers_in_order = False
    _ftz = False  #: the search's float mode (:meth:`set_float_mode`), sent with every model

    def __init__(self, db=None, *, source: tuple | None = None, lanes: str = "auto", device: int = 0,
                 max_bytes: int | None = None, lengths=None, span: tuple | None = None):
        super().__init__(db)
        self._tmpdir = None
        self._process = None
        self._conn = None
        self._ready_reply = None
        self._unanswered: dict = {}  # the models sent and not yet answered, by number
        self._sent = 0  # models sent
        self._receive_lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._stats = ({}, 0.0)
        self._answers: dict = {}  # answers to requests, received while waiting for a model
        #: the model lengths whose kernels the child loads at its set-up (``init``)
        self._loaded = None if lengths is None else sorted({int(m) for m in lengths})
        self._device = device
        try:
            path, fmt = source if source is not None else (self._shared_path(db), None)
            self._process, self._conn = start_child("hmmgpu.gpu.process")
            self._conn.send(("init", os.path.abspath(path), fmt, lanes, device, max_bytes,
                             None if lengths is None else [int(m) for m in lengths],
                             None if span is None else (int(span[0]), int(span[1]))))
        except OSError as error:
            self.close()
            raise WorkerError(f"cannot start the GPU process: {error.strerror or error}") from None
        except BaseException:
            self.close()
            raise

    def attach(self, db) -> None:
        """Search ``db``, this process's reading of the file the child reads as well: the
        child's count of targets and residues is checked against it when the child is ready."""
        self.db = db

    def _ready(self) -> tuple:
        """Wait for the child's set-up (once): (description, lanes, (targets, residues)). Once
        it has answered, no lock is taken: the waiting thread holds the receive lock while it
        waits for a result, and the submitting thread asks this before every model."""
        if self._ready_reply is None:
            self._receive_ready()
        if isinstance(self._ready_reply, HmmgpuError):
            raise self._ready_reply
        return self._ready_reply

    def _receive_ready(self) -> None:
        with self._receive_lock:
            if self._ready_reply is None:
                reply = self._receive()
                self._ready_reply = reply[1:] if reply[0] != "error" else child_error(reply[1])
                if self.db is not None and not isinstance(self._ready_reply, HmmgpuError):
                    n, residues = self._ready_reply[2]
                    if (n, residues) != (self.db.n, self.db.total_residues):
                        self._ready_reply = HmmgpuError(
                            f"the GPU process read {n} sequences ({residues} residues) where this process read "
                            f"{self.db.n} ({self.db.total_residues}); was the file changed during the search?")

    def ready(self, timeout: float | None = None) -> bool:
        if self._ready_reply is None and timeout is not None:
            with self._receive_lock:
                if self._ready_reply is None and not self._conn.poll(timeout):
                    return False
        self._ready()
        return True

    @property
    def description(self) -> str:
        """The device and lanes once the child is ready (this does not wait for it)."""
        reply = self._ready_reply
        if reply is None:
            return f"backend cuda, device {self._device}: the GPU process is starting"
        return f"backend cuda, device {self._device}: {reply}" if isinstance(reply, HmmgpuError) else reply[0]

    @staticmethod
    def _new_tmpdir() -> str:
        from hmmgpu.formats.inputs import memory_tmpdir

        return tempfile.mkdtemp(prefix="hmmgpu-db-", dir=memory_tmpdir())

    def _shared_path(self, db) -> str:
        """A database directory the child can map: ``db``'s own, or a temporary copy."""
        from hmmgpu.formats.seqdb import is_database_dir

        if is_database_dir(db.source):
            return db.source
        self._tmpdir = self._new_tmpdir()
        path = os.path.join(self._tmpdir, "db")
        db.save(path)
        return path

    # ------------------------------------------------------------ the protocol
    def _send(self, message) -> None:
        try:
            with self._send_lock:
                self._conn.send(message)
        except OSError:
            raise self._stopped() from None

    def _receive(self):
        try:
            return self._conn.recv()
        except (EOFError, OSError):
            raise self._stopped() from None

    def _stopped(self) -> HmmgpuError:
        code = self._process.poll() if self._process is not None else None
        return WorkerError(f"the GPU process stopped (exit code {code})")

    def _answer(self, reply) -> None:
        """Give a model's ``reply`` (``done`` or ``error``, with the model's number) to its ticket."""
        ticket = self._unanswered.pop(reply[1])
        ticket._value = reply[2] if reply[0] == "done" else child_error(reply[2])
        ticket._done = True

    def _take_reply(self) -> None:
        """Receive one reply (the receive lock held): a model's answered, a request's kept; if
        the child stopped, every model answered with that error, which is raised."""
        try:
            reply = self._receive()
        except HmmgpuError as error:
            for k in list(self._unanswered):
                self._answer(("error", k, str(error)))
            raise
        if reply[0] in ("compiled", "stats", "defined"):
            self._answers[reply[0]] = reply
        else:
            self._answer(reply)

    def _wait_for(self, ticket: _Ticket) -> None:
        self._ready()
        with self._receive_lock:
            while not ticket._done:
                self._take_reply()

    def receive(self, timeout: float) -> None:
        """Receive the replies the child has sent, waiting up to ``timeout`` seconds for the
        first (the engine's finishing thread, between its models' :meth:`_Ticket.answered`)."""
        self._ready()
        with self._receive_lock:
            while self._unanswered and self._conn.poll(timeout):
                self._take_reply()
                timeout = 0.0

    def _call(self, message, answer: str):
        """Send a request and wait for its answer (answering the models sent before it)."""
        self._ready()
        self._send(message)
        with self._receive_lock:
            while True:
                reply = self._answers.pop(answer, None) or self._receive()
                if reply[0] == answer:
                    return reply
                if reply[0] == "error" and len(reply) == 2:
                    raise child_error(reply[1])
                self._answer(reply)

    # ------------------------------------------------------------ the backend
    def prepare(self, hmm, mmu=None) -> _Model:
        """The model on its way to the child."""
        return _Model(hmm, mmu)

    def prepare_for(self, lengths) -> None:
        if sorted({int(m) for m in lengths}) != self._loaded:  # not those of the ``init`` message
            self._call(("compile", [int(m) for m in lengths]), "compiled")

    def submit(self, model: _Model, options) -> _Ticket:
        ticket = _Ticket(self)
        with self._send_lock:
            self._unanswered[self._sent] = ticket
            self._sent += 1
            try:
                self._conn.send(("model", model.hmm, model.mmu, options, self._ftz))
            except OSError:
                raise self._stopped() from None
        return ticket

    def set_float_mode(self, ftz: bool) -> None:
        self._ftz = bool(ftz)   # the child's definitions: GpuCascade.search_ftz

    def waiting(self) -> int:
        return len(self._unanswered)

    def define_passers(self, items) -> list:
        """Decode and define F3 passers in the child once the filters are done
        (:meth:`hmmgpu.gpu.cascade.GpuCascade.define_passers`): ``items``, (prepared model,
        ``--seed``, passers) triples; a (decoded, defined) pair each."""
        models = {id(model): model.hmm for model, _, _ in items}
        return self._call(("define", models, [(id(model), int(seed), passers) for model, seed, passers in items]),
                          "defined")[1]

    def _refresh_stats(self) -> None:
        ready = self._ready_reply is not None and not isinstance(self._ready_reply, HmmgpuError)
        if ready and self._conn is not None and self._process.poll() is None:
            try:
                _, details, gpu = self._call(("stats",), "stats")
                self._stats = (details, gpu)
            except HmmgpuError:
                pass

    def gpu_seconds(self) -> float:
        self._refresh_stats()
        return self._stats[1]

    def details(self) -> dict:
        self._refresh_stats()
        return dict(self._stats[0])

    def close(self, wait: bool = True) -> None:
        if self._conn is not None:
            try:
                self._conn.send(None)
            except OSError:
                pass
        if self._process is not None and not wait and self._process.poll() is None:
            if self._ready_reply is None:  # still starting: nothing of it is needed any more
                self._process.kill()
            self._process = None  # else it exits when it reads the stop message (or the closed socket)
        if self._process is not None:
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None


__all__ = ["CudaProcessBackend"]


if __name__ == "__main__":
    _serve(Connection(int(sys.argv[1])))
