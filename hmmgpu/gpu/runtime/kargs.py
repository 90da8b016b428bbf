"""Kernel arguments declared once: the generated source and the launch code both read them.

:func:`argument_kind` says how the driver passes an argument of a compiled kernel.

A family declares its kernels' parameters as a tuple of :class:`Arg` (name and numba type).
The generator writes the signature and the ``def`` line from it (:func:`signature`,
:func:`parameter_list`); the launcher passes values by name (:func:`arguments`), so a
kernel's parameter order is written in exactly one place.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: struct formats of numba's scalar kernel parameters, by numba type name
SCALAR_FORMATS = {"int8": "b", "uint8": "B", "int16": "h", "uint16": "H", "int32": "i", "uint32": "I",
                  "int64": "q", "uint64": "Q", "float32": "f", "float64": "d"}

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


def argument_kind(numba_type) -> str:
    """How an argument of this numba type is passed: ``"array:<dtype>"`` (one dimension) or
    the scalar's type name (a key of :data:`SCALAR_FORMATS`)."""
    ndim = getattr(numba_type, "ndim", None)
    if ndim is not None:
        if ndim != 1:
            raise TypeError(f"kernel argument {numba_type}: only one-dimensional arrays are passed")
        return f"array:{numba_type.dtype}"
    name = str(numba_type)
    if name not in SCALAR_FORMATS:
        raise TypeError(f"kernel argument of type {name} has no driver launch format")
    return name
