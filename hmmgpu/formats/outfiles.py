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
are an error: the later would silently overwrite the earlier.
"""
from __future__ import annotations

import os
import stat
import tempfile
from typing import BinaryIO

from hmmgpu.errors import HmmgpuError


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
        target = os.path.abspath(os.fspath(path))
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
        return handle

    def commit(self) -> None:
        """Close every file and rename it over its target."""
        for handle, temporary, target in self._files:
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
            os.replace(temporary, target)
        self._files.clear()

    def discard(self) -> None:
        """Close every file and remove the temporary ones; targets are left as they were."""
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


__all__ = ["OutputFiles"]
