"""pyhmmer's stage in worker processes: one process per engine worker, each with its own GIL.

Why processes
-------------
pyhmmer releases the GIL while it computes, so threads would do, were it not for the
rest of the engine: reading models, building hmmgpu's tables, launching the GPU kernels
and finishing their results are interpreter work in the same process, a few milliseconds
per model. With sixteen threads that each need the GIL for a moment before and after every
task, those milliseconds turn into queues: measured on the 16-core GPU machine, the worker
threads spent a fifth of their time waiting for the GIL and the filter threads two thirds,
and the search ran at the speed of the lock rather than of the CPU or the GPU. In worker
processes pyhmmer's stage takes the GIL of its own process only, and the engine's process
keeps its GIL for the work that must be there.

How
---
The database is shared, not copied per process: a database made by ``hmmgpu makedb`` is
mapped by every worker; any other input is saved once in that format to a temporary
directory (in ``/dev/shm`` where it exists) that the workers map and that is removed at
the end. A worker is a fresh interpreter (``python -m hmmgpu.forward_pool``) connected to
its engine thread by a socket pair: unlike :mod:`multiprocessing`'s start methods, this
never re-runs the caller's main module (a script without a ``__main__`` guard, a notebook)
and never forks a process that holds a CUDA context or threads. Workers ignore SIGINT,
which the parent handles, and leave when their socket closes.

Each engine worker thread owns one process: it sends a task (the model only when it
changes, about 30 KB pickled) and waits, without the GIL, for the
:class:`~hmmgpu.forward_stage.TaskResult`. The thread keeps the engine's order (earliest
model first) and does the merging, so a process only ever runs
:meth:`ForwardStage.run <hmmgpu.forward_stage.ForwardStage.run>`, exactly as a thread
would. An error in a worker comes back as a one-line message; a worker that dies is
reported as such.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from multiprocessing.connection import Connection

from .errors import HmmgpuError


class _Model:
    """The part of an engine query that :meth:`ForwardStage.run` reads."""

    def __init__(self, hmm):
        self.hmm = hmm


def _serve(conn) -> None:
    """A worker process: set up from the first message, then run tasks until None or EOF."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from .forward_stage import ForwardStage, Task
    from .seqdb import SequenceDB

    try:
        db_path, options, ftz = conn.recv()
        stage = ForwardStage(SequenceDB.load(db_path), options, ftz=ftz)
    except (EOFError, OSError):
        return
    model = None
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        hmm, positions, z_fixed, filtered, alone = message
        if hmm is not None:
            model = _Model(hmm)
        try:
            task = Task(query=model, positions=positions, z_fixed=z_fixed, filtered=filtered)
            reply = ("ok", stage.run(task, alone=alone))
        except HmmgpuError as error:
            reply = ("error", str(error))
        except Exception as error:  # noqa: BLE001 - reported in the parent as one line
            reply = ("error", f"{type(error).__name__}: {' '.join(str(error).split())}")
        conn.send(reply)


class RemoteStage:
    """One worker process, used by one engine thread: :meth:`run` as ``ForwardStage.run``."""

    def __init__(self, process: subprocess.Popen, conn: Connection):
        self.process = process
        self.conn = conn
        self._model = None  # the query whose model the process holds

    def run(self, task, alone: bool = False):
        query = task.query
        hmm = None if query is self._model else query.hmm
        try:
            self.conn.send((hmm, task.positions, task.z_fixed, task.filtered, alone))
            self._model = query
            status, value = self.conn.recv()
        except (EOFError, OSError):
            raise HmmgpuError(f"a worker process of the Forward stage stopped (exit code "
                              f"{self.process.poll()}); out of memory?") from None
        if status == "error":
            raise HmmgpuError(value)
        return value


class ForwardProcesses:
    """``n`` worker processes running pyhmmer's stage over ``db``; use as a context manager."""

    def __init__(self, db, options, n: int, ftz: bool = False):
        from .seqdb import is_database_dir

        self._tmpdir = None
        if is_database_dir(db.source):
            path = db.source
        else:
            base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
            self._tmpdir = tempfile.mkdtemp(prefix="hmmgpu-db-", dir=base)
            path = os.path.join(self._tmpdir, "db")
            db.save(path)
        package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [package_root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
        self.stages = []
        try:
            for _ in range(n):
                ours, theirs = socket.socketpair()
                process = subprocess.Popen([sys.executable, "-m", "hmmgpu.forward_pool", str(theirs.fileno())],
                                           pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL)
                theirs.close()
                conn = Connection(ours.detach())
                conn.send((path, options, ftz))
                self.stages.append(RemoteStage(process, conn))
        except OSError as error:
            self.close(abort=True)
            raise HmmgpuError(f"cannot start the Forward stage's worker processes: {error.strerror or error}") \
                from None
        except BaseException:
            self.close(abort=True)
            raise

    def close(self, abort: bool = False) -> None:
        """Stop the workers (``abort``: at once, mid-task) and remove the temporary database."""
        for stage in self.stages:
            try:
                if abort:
                    stage.process.kill()
                else:
                    stage.conn.send(None)
            except (OSError, ValueError):
                pass
        for stage in self.stages:
            try:
                stage.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                stage.process.kill()
                stage.process.wait()
            stage.conn.close()
        self.stages = []
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close(abort=exc[0] is not None)


__all__ = ["ForwardProcesses", "RemoteStage"]


if __name__ == "__main__":
    _serve(Connection(int(sys.argv[1])))
