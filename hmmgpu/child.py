"""Python child processes of this package, each spoken to over a socket.

The GPU process (:mod:`hmmgpu.gpu.process`) and the worker processes of many small models
(:mod:`hmmgpu.distributed.processes`) run as ``python -m hmmgpu.<module> FD``: a fresh interpreter that
imports only what its module needs, with the package this process runs first on its path,
and a :class:`multiprocessing.connection.Connection` on the inherited socket ``FD`` for
pickled messages. Unlike :mod:`multiprocessing`'s start methods, nothing of the caller's
``__main__`` is run again in the child, so a script that calls hmmgpu without an
``if __name__ == "__main__"`` guard is safe.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from multiprocessing.connection import Connection


def start_child(module: str) -> tuple[subprocess.Popen, Connection]:
    """Start ``python -m module FD``; the process and this end of its connection. Its
    standard input is closed; its standard error is this process's."""
    ours, theirs = socket.socketpair()
    try:
        package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [package_root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
        process = subprocess.Popen([sys.executable, "-m", module, str(theirs.fileno())],
                                   pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL)
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    return process, Connection(ours.detach())


def start_worker(module: str, setup, what: str) -> tuple[subprocess.Popen, Connection]:
    """:func:`start_child`, then ``setup`` sent as its first message; a failure to do either is a
    one-line :class:`~hmmgpu.errors.WorkerError` ("cannot start ``what``: ...")."""
    from hmmgpu.errors import WorkerError

    try:
        process, conn = start_child(module)
        conn.send(setup)
    except OSError as error:
        raise WorkerError(f"cannot start {what}: {error.strerror or error}") from None
    return process, conn


def inbox(conn: Connection):
    """A queue that a daemon thread fills with the messages of ``conn`` as they come, so that
    the other end's sends never wait for this process's work; None once the other end sent
    None or has gone."""
    import queue
    import threading

    messages: queue.SimpleQueue = queue.SimpleQueue()

    def receive():
        try:
            while (message := conn.recv()) is not None:
                messages.put(message)
        except (EOFError, OSError):   # the other end has gone
            pass
        messages.put(None)

    threading.Thread(target=receive, name="hmmgpu-inbox", daemon=True).start()
    return messages


__all__ = ["inbox", "start_child", "start_worker"]
