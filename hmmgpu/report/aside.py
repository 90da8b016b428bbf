"""The report of a search formatted in a child process, beside the search.

What it does
------------
:func:`formatted_aside` is :func:`hmmgpu.report.outputs.formatted` with each query's blocks
(report, ``-A`` alignment, table rows) made by the run's own
:class:`~hmmgpu.report.outputs.QueryFormatter` in one child process (``python -m
hmmgpu.report.aside FD``, :mod:`hmmgpu.child`) instead of the searching process: each result
is sent there as it comes (the query, its pyhmmer ``TopHits``, which pickles with its query
model, and the query's stopwatch), and the blocks come back in the queries' order, the same
bytes, for :meth:`~hmmgpu.report.outputs.RunOutputs.write` to append. A fault in the child is
a one-line :class:`~hmmgpu.errors.WorkerError`.

Why
---
The report is Python work: decoding each query's hits and laying out its hit list, domain
tables and alignments, about 1 s of one core for 600 Pfam models against 29 M residues (a
55 MB report). In the searching process it holds the interpreter's lock that the engine's
threads need between pyhmmer's calls, and it is still running when the last query's hits come.
Measured on one H200 (16 cores, the default route, warm, three pairs of runs in one session,
``benchmarks/results/session_report_h200_2026-11-29_s9call7.log``): writing the report took
6.57-7.23 s against 5.81-5.96 s with ``-o /dev/null``. A search with fewer queries than
:data:`ASIDE_MIN_QUERIES` formats them itself, as a child's start (about 0.2 s of its own CPU
time, importing pyhmmer and this package's report modules) would cost a small run more than it
saves.
"""
from __future__ import annotations

import signal
import sys
from typing import Iterator

from hmmgpu.report.text import Query, Stopwatch

#: The fewest queries for which :func:`formatted_aside` formats in a child process (see the module header).
ASIDE_MIN_QUERIES = 64


def formatted_results(results, formatter, queries: int | None) -> Iterator:
    """The blocks of ``results`` for a run of ``queries`` queries (None: not known): made in a
    child process (:func:`formatted_aside`) where the report is formatted and there are at least
    :data:`ASIDE_MIN_QUERIES`, else here (:func:`~hmmgpu.report.outputs.formatted`)."""
    from hmmgpu.report.outputs import formatted

    aside = formatter.report and queries is not None and queries >= ASIDE_MIN_QUERIES
    return formatted_aside(results, formatter) if aside else formatted(results, formatter)


def formatted_aside(results, formatter, first: bool = True) -> Iterator:
    """:func:`hmmgpu.report.outputs.formatted` of ``results`` (:class:`~hmmgpu.search.engine.SearchResult`,
    in order), each query's :class:`~hmmgpu.report.outputs.QueryBlocks` made in a child process
    while the next results are searched; the same blocks, in the same order."""
    from hmmgpu.child import inbox, start_worker

    process, conn = start_worker("hmmgpu.report.aside", formatter, "the report's formatting process")
    # a thread takes the child's answers off the socket as they come: were this thread to read
    # them only between its own sends, a large query sent while the child sends a large report
    # back would leave both waiting for the other
    answers = inbox(conn)
    pending = 0
    try:
        watch = Stopwatch().start()
        for result in results:
            model = result.hmm if formatter.alignment_path is not None else None   # -A's alignments read it
            _send(conn, (Query.from_hmm(result.hmm), result.hits, watch.stop(), model, first))
            first, watch = False, Stopwatch().start()
            pending += 1
            while pending and not answers.empty():
                yield _answer(answers.get())
                pending -= 1
        while pending:
            yield _answer(answers.get())
            pending -= 1
    finally:
        try:
            conn.send(None) if pending == 0 else process.kill()
        except OSError:
            pass
        conn.close()
        process.wait()


def _send(conn, message) -> None:
    try:
        conn.send(message)
    except OSError:
        raise _stopped() from None


def _answer(answer):
    """The next query's blocks from the child (an answer of :func:`hmmgpu.child.inbox`), or its
    fault raised (None: the child has gone)."""
    from hmmgpu.errors import WorkerError

    if answer is None:
        raise _stopped()
    if isinstance(answer, str):
        raise WorkerError(answer)
    return answer


def _stopped():
    from hmmgpu.errors import WorkerError

    return WorkerError("the report's formatting process stopped unexpectedly (out of memory?)")


def _serve(conn) -> None:
    """The child: the formatter, then (query, hits, stopwatch, model, first) messages until None
    or EOF, each answered with its blocks, or a fault's one line (after which it stops)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the parent stops the run on Ctrl-C
    try:
        formatter = conn.recv()
        while (message := conn.recv()) is not None:
            query, hits, watch, hmm, first = message
            try:
                blocks = formatter.blocks(query, hits, watch, hmm=hmm, first=first)
            except Exception as error:   # noqa: BLE001 - a fault of hmmgpu's: one line for the parent to raise
                conn.send(f"formatting the report of '{query.name.decode('utf-8', 'replace')}' failed: "
                          f"{type(error).__name__}: {' '.join(str(error).split())}")
                return
            conn.send(blocks)
    except (EOFError, OSError):   # the parent has gone
        return


__all__ = ["ASIDE_MIN_QUERIES", "formatted_aside", "formatted_results"]


if __name__ == "__main__":
    from multiprocessing.connection import Connection

    from hmmgpu.report.aside import _serve as serve   # the package's module: what it sends is unpickled by that name

    serve(Connection(int(sys.argv[1])))
