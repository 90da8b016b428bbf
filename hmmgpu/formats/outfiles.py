"""Output files that appear whole or not at all.

hmmsearch opens ``-o``, ``-A``, ``--tblout``, ``--domtblout`` and ``--pfamtblout`` with
``fopen(path, "w")`` before it searches, so a run that fails (a bad model halfway through
a Pfam file, an interrupt, a full disk) leaves truncated files behind, and an earlier run's
good table is lost. Here each output is written to a temporary file in the target's own
directory (so that the final rename stays on one file system and is atomic) and renamed
over the target only when the whole run has succeeded; on any failure the temporary files
are removed and existing files are untouched.

Opening happens at the start of a run, so a path that cannot be written (a missing
directory, no permission, a directory in the way) is reported before any search time is
spent. A renamed file gets the permissions ``fopen`` would have given it: the old file's,
or 0666 less the umask. Targets that are not regular files (``/dev/stdout``, a FIFO) are
written in place, since they cannot be replaced. Two options naming the same regular file
are an error: the later would silently overwrite the earlier; so is an output that names
an input (:func:`refuse_inputs`, checked before any output is opened), which the run
would otherwise replace. A stopping signal (:mod:`hmmgpu.host`) never leaves a temporary
file behind: creating one and recording it for removal, and renaming the outputs into
place, are steps it does not cut in two.
"""
from __future__ import annotations

import os
import stat
import tempfile
import weakref
from typing import BinaryIO, Iterable, Mapping

from hmmgpu.errors import HmmgpuError, InputError
from hmmgpu.host import signals_deferred


def refuse_inputs(outputs: Mapping[str, object], inputs: Iterable[object]) -> None:
    """One-line :class:`~hmmgpu.errors.InputError` if an output path (``outputs``: option ->
    path, None for an output not written) names an input: the same file under any spelling
    (a link, a relative path, a hard link), or a path inside an input directory (a made
    database). ``-`` (standard input) and outputs that are not regular files or directories
    (``/dev/null``, a terminal) are left alone."""
    held = []
    for source in inputs:
        if source is None or os.fspath(source) == "-":
            continue
        try:
            info = os.stat(source)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode):
            held.append((os.fspath(source), info, os.path.realpath(source)))
    for option, path in outputs.items():
        if path is None:
            continue
        try:
            info = os.stat(path)
        except OSError:
            info = None
        if info is not None and not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
            continue
        real = os.path.realpath(path)
        for source, source_info, source_real in held:
            same = info is not None and (info.st_dev, info.st_ino) == (source_info.st_dev, source_info.st_ino)
            inside = stat.S_ISDIR(source_info.st_mode) and real.startswith(source_real.rstrip(os.sep) + os.sep)
            if same or inside:
                where = "names the input" if same else "lies inside the input"
                raise InputError(f"{option} {os.fspath(path)}: {where} {source} (an output may not overwrite "
                                 "an input)")


#: Every OutputFiles with files not yet renamed or removed (see :func:`discard_unfinished`).
_UNFINISHED: "weakref.WeakSet[OutputFiles]" = weakref.WeakSet()


def discard_unfinished() -> None:
    """Remove the temporary files of every :class:`OutputFiles` not yet committed or discarded:
    the command line's last word on an interrupted run, for a signal that came between an
    output's opening and the ``with`` block that would have removed it."""
    for files in list(_UNFINISHED):
        files.discard()


class OutputFiles:
    """The output files of one run; use as a context manager.

    ``open(path, option)`` returns a binary file to write; leaving the ``with`` block
    normally renames every file into place, leaving it by an exception removes them all.
    """

    def __init__(self):
        self._files: list[tuple[BinaryIO, str | None, str]] = []   # (file, temporary path or None, target)
        self._options: dict[str, str] = {}
        umask = os.umask(0)
        os.umask(umask)
        self._new_mode = 0o666 & ~umask

    def open(self, path, option: str) -> BinaryIO:
        """A file for the output ``path`` given with ``option`` (named in errors)."""
        target = os.path.realpath(os.fspath(path))
        try:
            info = os.stat(target)
        except FileNotFoundError:
            info = None
        except OSError as exc:
            raise HmmgpuError(f"{option} {os.fspath(path)}: cannot open for writing: {exc.strerror}") from None
        if info is None or stat.S_ISREG(info.st_mode):  # /dev/null may take every output
            if target in self._options:
                raise HmmgpuError(f"{self._options[target]} and {option} name the same file {os.fspath(path)}")
            self._options[target] = option
        if info is not None and stat.S_ISDIR(info.st_mode):
            raise HmmgpuError(f"{option} {os.fspath(path)}: is a directory")
        with signals_deferred():   # a temporary file is recorded for removal as soon as it exists
            try:
                if info is not None and not stat.S_ISREG(info.st_mode):
                    handle = open(target, "wb")
                    self._files.append((handle, None, target))
                    return handle
                fd, temporary = tempfile.mkstemp(dir=os.path.dirname(target),
                                                 prefix=f".{os.path.basename(target)}.", suffix=".partial")
            except OSError as exc:
                raise HmmgpuError(f"{option} {os.fspath(path)}: cannot open for writing: {exc.strerror}") from None
            handle = os.fdopen(fd, "wb")
            self._files.append((handle, temporary, target))
            _UNFINISHED.add(self)
            return handle

    def commit(self) -> None:
        """Close every file and rename it over its target (a stopping signal waits until every
        file is in place)."""
        with signals_deferred():
            self._commit()

    def _commit(self) -> None:
        for handle, temporary, target in self._files:   # every file complete on disk before any rename
            handle.flush()
            if temporary is not None:
                os.fsync(handle.fileno())
            handle.close()
            if temporary is None:
                continue
            try:
                mode = stat.S_IMODE(os.stat(target).st_mode)
            except FileNotFoundError:
                mode = self._new_mode
            os.chmod(temporary, mode)
        for _, temporary, target in self._files:
            if temporary is not None:
                os.replace(temporary, target)
        self._files.clear()
        _UNFINISHED.discard(self)

    def discard(self) -> None:
        """Close every file and remove the temporary ones; targets are left as they were."""
        with signals_deferred():
            self._discard()

    def _discard(self) -> None:
        for handle, temporary, _ in self._files:
            try:
                handle.close()
            except OSError:
                pass
            if temporary is not None:
                try:
                    os.remove(temporary)
                except OSError:
                    pass
        self._files.clear()
        _UNFINISHED.discard(self)

    def __enter__(self) -> "OutputFiles":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            try:
                self.commit()
            except OSError as error:
                self.discard()
                raise HmmgpuError(f"cannot write output: {error.strerror or error}") from None
        else:
            self.discard()


__all__ = ["OutputFiles", "refuse_inputs", "discard_unfinished"]
