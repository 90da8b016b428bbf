"""A progress bar that shows only on a terminal and never mixes with the report.

The bar is drawn on standard error, and only when standard error is a terminal: a log file
or a pipe gets no bar and no control characters. When the report goes to a terminal too
(hmmsearch's default, standard output), the two would interleave on the screen, so
:meth:`ProgressBar.clear` takes the bar off the screen for the time the report is written
and draws it again after.
"""
from __future__ import annotations

import contextlib
import os
import sys
from typing import BinaryIO, Iterator


def _is_terminal(stream) -> bool:
    try:
        return os.isatty(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return False


class ProgressBar:
    """``total`` steps named ``what``; a no-op unless standard error is a terminal."""

    def __init__(self, total: int | None, what: str, report: BinaryIO | None = None):
        self._progress = None
        self._shares_screen = report is not None and _is_terminal(report)
        if not _is_terminal(sys.stderr):
            return
        from rich.console import Console
        from rich.progress import Progress

        self._progress = Progress(console=Console(file=sys.stderr), transient=True)
        self._task = self._progress.add_task(what, total=total)

    @property
    def shown(self) -> bool:
        """Whether a bar is drawn at all (standard error is a terminal)."""
        return self._progress is not None

    def advance(self, description: str | None = None) -> None:
        """One step done; ``description`` replaces the bar's label."""
        if self._progress is not None:
            self._progress.update(self._task, advance=1, **({"description": description} if description else {}))

    @contextlib.contextmanager
    def clear(self) -> Iterator[None]:
        """Take the bar off the screen while the block writes to a terminal report."""
        if self._progress is None or not self._shares_screen:
            yield
            return
        self._progress.stop()
        try:
            yield
        finally:
            self._progress.start()

    def row(self, what: str, total: int | None = None) -> "ProgressRow":
        """Another bar in this one's display, drawn and cleared with it (a search over a dask
        cluster counts its tasks there, under the queries written); a no-op where this is."""
        return ProgressRow(self._progress, what, total)

    def __enter__(self) -> "ProgressBar":
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()


class ProgressRow:
    """One more bar of a :class:`ProgressBar` (:meth:`ProgressBar.row`)."""

    def __init__(self, progress, what: str, total: int | None):
        self._progress = progress
        self._task = None if progress is None else progress.add_task(what, total=total)

    def advance(self, steps: int = 1) -> None:
        """``steps`` more done."""
        if self._progress is not None:
            self._progress.update(self._task, advance=steps)

    def total(self, total: int | None) -> None:
        """The number of steps, once known (or grown)."""
        if self._progress is not None:
            self._progress.update(self._task, total=total)


__all__ = ["ProgressBar", "ProgressRow"]
