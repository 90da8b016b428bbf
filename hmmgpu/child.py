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


__all__ = ["start_child"]
