"""Every output of one ``hmmgpu search`` or ``hmmgpu scan`` run, written in hmmsearch's order.

A run writes, as hmmsearch and hmmscan do: the report (``-o`` or standard output) that
opens with the program header once the first query is done, one block per query and
``[ok]``; the tables (``--tblout``, ``--domtblout``, ``--pfamtblout``), one block of rows
per query (written by HMMER's own formatter through pyhmmer) and the ``#`` tail; and, for
a search, the ``-A`` alignments of each query's included domains.

Files are opened at the start through :class:`~hmmgpu.formats.outfiles.OutputFiles`, so they
appear only if the whole run succeeds; an output that names an input is refused first, and
one that cannot be opened removes those opened before it. Each query's E-values are formatted in hmmsearch's
float mode (flush-to-zero), as HMMER formats them. A progress bar on standard error (shown
only on a terminal) is cleared around every write of a report that goes to a terminal.
"""
from __future__ import annotations

import io
import os
import sys
from dataclasses import dataclass, field, replace
from typing import Iterator, Literal, Mapping

from hmmgpu.host import flush_to_zero
from hmmgpu.report.hitlist import read_tophits
from hmmgpu.options import ReportOptions, local_command_line
from hmmgpu.formats.outfiles import OutputFiles, refuse_inputs
from hmmgpu.report.progress import ProgressBar
from hmmgpu.report.text import (REPORT_END, Program, Query, Stopwatch, alignment_note, program_header, query_report, tabular_tail, write_alignment)

#: pyhmmer's ``TopHits.write`` format of each table option.
TABLE_FORMATS = {"tblout": "targets", "domtblout": "domains", "pfamtblout": "pfam"}
TableKind = Literal["tblout", "domtblout", "pfamtblout"]


@dataclass(frozen=True, slots=True)
class QueryBlocks:
    """One query's outputs, formatted: what :meth:`RunOutputs.write` appends to each file."""

    name: str  #: the query's name (shown by the progress bar)
    report: bytes = b""  #: its report block (with the ``-A`` note), empty when the report is discarded
    alignment: bytes = b""  #: its ``-A`` alignment
    tables: dict = field(default_factory=dict)  #: its rows of each table kind written


@dataclass(frozen=True, slots=True)
class QueryFormatter:
    """How each query's outputs are formatted. Picklable: worker processes
    (:mod:`hmmgpu.distributed.processes`) format their own queries with the run's formatter."""

    report: bool  #: the report is formatted (not ``-o /dev/null``)
    options: ReportOptions
    tables: tuple = ()  #: the table kinds written
    alignment_path: str | None = None  #: ``-A``, named in the report's note
    #: the F1, F2, F3 the statistics show (see :class:`RunOutputs`)
    filter_thresholds: tuple[float, float, float] | None = None

    def blocks(self, query: Query, hits, stopwatch: Stopwatch | None = None, hmm=None,
               first: bool = False) -> QueryBlocks:
        """One query's report block, table rows (with the tables' header when ``first``, the
        run's first query) and, for a search with ``-A``, its alignment."""
        report, alignment, tables = io.BytesIO(), b"", {}
        with flush_to_zero():
            if self.report:
                hitlist = read_tophits(hits)
                if self.filter_thresholds is not None:
                    F1, F2, F3 = (min(1.0, F) for F in self.filter_thresholds)   # as p7_pipeline_Create() caps them
                    hitlist = replace(hitlist, accounting=replace(hitlist.accounting, F1=F1, F2=F2, F3=F3))
                report.write(query_report(query, hitlist, self.options, stopwatch))
            if self.alignment_path is not None:
                buffer = io.BytesIO()
                nseq = write_alignment(buffer, hits, hmm, self.options.textw)
                alignment = buffer.getvalue()
                if self.report:
                    report.write(alignment_note(nseq, self.alignment_path))
            for kind in self.tables:
                buffer = io.BytesIO()
                hits.write(buffer, format=TABLE_FORMATS[kind], header=first)
                tables[kind] = buffer.getvalue()
        return QueryBlocks(name=query.name.decode("utf-8", "replace"), report=report.getvalue(),
                           alignment=alignment, tables=tables)


def formatted(results, formatter: QueryFormatter, first: bool = True) -> Iterator[QueryBlocks]:
    """The search results ``results`` (:class:`~hmmgpu.search.engine.SearchResult`, in order), each
    formatted as it comes and timed from the end of the one before (the report's per-query
    times, as hmmsearch's stopwatch); ``first``: the first of them is the run's first query."""
    watch = Stopwatch().start()
    for result in results:
        yield formatter.blocks(Query.from_hmm(result.hmm), result.hits, watch.stop(), hmm=result.hmm, first=first)
        first = False
        watch = Stopwatch().start()


class RunOutputs:
    """The outputs of one run; use as a context manager (files are kept only on success).

    ``paths`` maps ``"-o"``, ``"-A"`` and the table kinds to the paths given (absent: not
    written; no ``-o``: the report goes to standard output). ``settings`` are the options
    the header shows (see :func:`hmmgpu.report.text.header_settings`); ``command_line`` goes to
    the tables' tail, less the options that spread a run (:func:`local_command_line`).
    ``filter_thresholds``: the F1, F2, F3 the statistics show, for hits
    that did not come out of one pyhmmer pipeline run with them (hmmgpu's filter backends
    run pyhmmer's stage with its own filters off).
    """

    def __init__(self, program: Program, query_file: str, target_file: str, *, paths: Mapping[str, str],
                 settings: Mapping[str, object], report_options: ReportOptions, command_line: str,
                 progress: str, filter_thresholds: tuple[float, float, float] | None = None):
        self.program, self.query_file, self.target_file = program, query_file, target_file
        self.settings = dict(settings)
        self.command_line = local_command_line(command_line)
        refuse_inputs({("--" if option in TABLE_FORMATS else "") + option: path for option, path in paths.items()},
                      (query_file, target_file))
        self._files = OutputFiles()
        try:   # an output that cannot be opened: those opened before it are removed
            self.report = self._files.open(paths["-o"], "-o") if paths.get("-o") else sys.stdout.buffer
            self.alignment = self._files.open(paths["-A"], "-A") if paths.get("-A") else None
            self.tables = {kind: self._files.open(paths[kind], f"--{kind}") for kind in TABLE_FORMATS
                           if paths.get(kind)}
        except BaseException:
            self._files.discard()
            raise
        self.progress = ProgressBar(None, progress, report=self.report)
        self.queries = 0
        #: how each query is formatted; ``-o /dev/null`` (how scripts keep only the tables): the
        #: report is not formatted at all
        self.formatter = QueryFormatter(report=not _is_null_device(paths.get("-o")), options=report_options,
                                        tables=tuple(self.tables), alignment_path=paths.get("-A"),
                                        filter_thresholds=filter_thresholds)

    def __enter__(self) -> "RunOutputs":
        self._files.__enter__()
        self.progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        try:
            if exc[0] is None:
                self.finish()
        except BaseException:
            self._files.discard()
            raise
        finally:
            self.progress.__exit__(*exc)
        self._files.__exit__(*exc)

    def _write_report(self, text: bytes) -> None:
        with self.progress.clear():
            self.report.write(text)
            self.report.flush()

    def query(self, query: Query, hits, stopwatch: Stopwatch | None = None, hmm=None) -> None:
        """One query's report block, table rows and (search, with ``-A``) alignment."""
        self.write(self.formatter.blocks(query, hits, stopwatch, hmm, first=self.queries == 0))

    def write(self, blocks: QueryBlocks) -> None:
        """Append one query's formatted outputs (the next query in order) to the files."""
        if self.formatter.report:
            header = program_header(self.program, self.query_file, self.target_file, self.settings) \
                if self.queries == 0 else b""   # as hmmsearch: the header once the first query is under way
            self._write_report(header + blocks.report)
        if self.alignment is not None:
            self.alignment.write(blocks.alignment)
        for kind, stream in self.tables.items():
            stream.write(blocks.tables[kind])
        self.queries += 1
        self.progress.advance(blocks.name)

    def finish(self) -> None:
        """``[ok]`` after the last query, and each table's ``#`` tail."""
        for kind, stream in self.tables.items():
            stream.write(tabular_tail(self.program, self.query_file, self.target_file, self.command_line, kind))
        if self.formatter.report:
            self._write_report(REPORT_END)


def _is_null_device(path) -> bool:
    """``path`` is the null device (``/dev/null`` or a link to it)."""
    try:
        return path is not None and os.path.samefile(path, os.devnull)
    except OSError:
        return False


__all__ = ["RunOutputs", "QueryFormatter", "QueryBlocks", "formatted", "TABLE_FORMATS"]
