"""What every command does with its arguments before it runs, and how an interrupted run ends.

:func:`prepare_run` adjusts and checks the parsed arguments of ``search``, ``scan``,
``audit`` and ``sw`` in the ways that do not depend on the command: ``--cpu`` above the
cores this process may use is capped to them, with a note on standard error (a thread per
requested CPU would start, 10,000 of them for ``--cpu 10000``); a ``--device N`` given where
no usable GPU has the id N is said in one line (the run goes on on the CPU: only
``--backend cuda`` makes it an error, as before). :func:`finish_interrupted` ends a run
stopped by SIGINT or SIGTERM: the one line on standard error and the exit status (130 or
143), once every output file of the run is gone.
"""
from __future__ import annotations

import sys

from hmmgpu.host import Interrupted, usable_cores

#: The attribute that holds ``--cpu`` in each command's arguments.
_THREADS = {"search": "cpus", "scan": "cpus", "audit": "cpus", "sw": "threads"}


def prepare_run(args) -> None:
    """Cap ``--cpu`` to the usable cores and say so; say when ``--device N`` names no usable GPU."""
    attribute = _THREADS.get(getattr(args, "command", None))
    if attribute is None:
        return
    requested, cores = getattr(args, attribute, None), usable_cores()
    if isinstance(requested, int) and requested > cores:
        print(f"hmmgpu: note: --cpu {requested} is more than the {cores} cores this process may use; "
              f"using {cores}", file=sys.stderr)
        setattr(args, attribute, cores)
    _check_device(args)


def _check_device(args) -> None:
    """One line on standard error for ``--device N`` given (not defaulted) without a usable GPU
    N, where the backend is not ``cuda`` (which refuses it with its own error)."""
    if args.command == "sw":
        device, given = args.device, args.device is not None
    elif args.command in ("search", "scan"):
        device, given = args.device, "--device" in (getattr(args, "given", None) or {})
    else:
        return
    if not given or getattr(args, "backend", None) == "cuda":
        return
    from hmmgpu.gpu.runtime.context import cuda_available

    if not cuda_available(device):
        print(f"hmmgpu: warning: --device {device}: no usable CUDA GPU with this id; the run goes on on the CPU",
              file=sys.stderr)


def finish_interrupted(interrupt: KeyboardInterrupt) -> int:
    """Remove what is left of the run's outputs, say in one line that it was interrupted (or
    terminated) and return the exit status: 128 + the signal's number (130 for Ctrl-C)."""
    from hmmgpu.formats.outfiles import discard_unfinished

    discard_unfinished()
    if isinstance(interrupt, Interrupted):
        print(f"hmmgpu: {interrupt.message}", file=sys.stderr)
        return interrupt.exit_status
    print("hmmgpu: interrupted", file=sys.stderr)
    return 130


__all__ = ["prepare_run", "finish_interrupted"]
