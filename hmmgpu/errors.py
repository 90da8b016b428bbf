"""The errors hmmgpu raises on purpose: one base, four kinds, each also a built-in type.

Every one is a user-facing problem that the command line prints as one line
(``hmmgpu: error: <message>``) with a non-zero exit status, never a traceback. As in
pyhmmer, each kind also derives from the built-in exception a Python caller would expect,
so ``except ValueError`` catches bad input from hmmgpu as it does from pyhmmer. Where the
Python drop-ins ``hmmgpu.hmmsearch``/``hmmscan`` refuse what pyhmmer refuses, they raise
pyhmmer's own type as well: :mod:`hmmgpu.pyhmmer_compat` defines ``AlphabetMismatch`` and
``MissingCutoffs``, each an :class:`InputError` and pyhmmer's class of that name (they need
pyhmmer, which this module, imported by everything, does not import).
"""


class HmmgpuError(Exception):
    """A user-facing error: bad input, missing file, unsupported option, a failed device.

    The command line prints ``hmmgpu: error: <message>`` and exits with :data:`ERROR_STATUS`.
    """


#: The exit status of the command line after an error: 1, as HMMER's programs exit on any
#: error (a bad option included).
ERROR_STATUS = 1


class InputError(HmmgpuError, ValueError):
    """An input that cannot be searched: a model or sequence file, a format, an option value."""


class DatabaseError(HmmgpuError, ValueError):
    """A database made by ``hmmgpu makedb`` that is missing, damaged or of another version."""


class DeviceUnavailable(HmmgpuError, RuntimeError):
    """No usable GPU with the id asked for, or one that could not be started."""

    @classmethod
    def for_backend(cls, device: int) -> "DeviceUnavailable":
        """The error of ``--backend cuda`` without a usable GPU ``device``."""
        return cls(f"--backend cuda: no usable CUDA GPU with id {device} (try --backend hmmer or numba)")


class WorkerError(HmmgpuError, RuntimeError):
    """A worker process (the GPU process, or a process of a fanned-out search) failed or stopped."""


def one_line(error: BaseException) -> str:
    """An exception's message on one line (its white space runs made single spaces), or its
    type's name where it has none: what an error message quotes of a cause."""
    return " ".join(str(error).split()) or type(error).__name__


__all__ = ["ERROR_STATUS", "HmmgpuError", "InputError", "DatabaseError", "DeviceUnavailable", "WorkerError",
           "one_line"]
