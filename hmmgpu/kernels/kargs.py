"""Kernel arguments declared once: the generated source and the launch code both read them.

A family declares its kernels' parameters as a tuple of :class:`Arg` (name and numba type).
The generator writes the signature and the ``def`` line from it (:func:`signature`,
:func:`parameter_list`); the launcher passes values by name (:func:`arguments`), so a
kernel's parameter order is written in exactly one place.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_SCALARS = {"int32": np.int32, "int64": np.int64, "uint32": np.uint32, "float32": np.float32,
            "float64": np.float64}


@dataclass(frozen=True)
class Arg:
    """One kernel parameter: its name and numba type (``"uint32[:]"``, ``"int32"``, ...)."""

    name: str
    type: str


def signature(args) -> str:
    """The numba signature string, e.g. ``void(uint32[:], int32)``."""
    return "void(" + ", ".join(a.type for a in args) + ")"


def parameter_list(args) -> str:
    """The kernel's ``def`` parameters, e.g. ``res, n``."""
    return ", ".join(a.name for a in args)


def arguments(args, **values) -> tuple:
    """The launch arguments in declaration order; scalars are cast to their declared type.

    Every declared name must be given, and nothing else.
    """
    names = [a.name for a in args]
    missing = [n for n in names if n not in values]
    extra = sorted(set(values) - set(names))
    if missing or extra:
        raise TypeError(f"kernel arguments: missing {missing}, unexpected {extra}")
    out = []
    for a in args:
        v = values[a.name]
        cast = _SCALARS.get(a.type)
        out.append(cast(v) if cast else v)
    return tuple(out)
