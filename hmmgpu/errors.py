"""The one exception type that the CLI turns into a one-line message and exit code."""


class HmmgpuError(Exception):
    """A user-facing error: bad input, missing file, unsupported option.

    The command line prints ``hmmgpu: error: <message>`` and exits with status 2.
    """
