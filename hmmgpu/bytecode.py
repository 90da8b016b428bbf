"""The compiled bytecode of the modules a search imports, written ahead of time.

Why
---
Every search imports numpy and pyhmmer, and a process that compiles kernels numba as well.
Python runs a module from its cached bytecode (``__pycache__``, which pip writes at install time and
Python itself at first import) or else compiles the source first. An environment that sets
``PYTHONDONTWRITEBYTECODE`` and whose packages were installed without bytecode (uv, for
one, installs without it by default) compiles them again in every process: measured on the
H200 machine, 0.2 s more for ``import numpy`` and 0.35 s more for ``import numba.cuda`` in
each process, and a search on the GPU runs two processes
(``benchmarks/results/bytecode_probe_h200_2026-11-24x.log``). Python still reads cached
bytecode where it may not write it, so writing it once, as ``python -m compileall`` would,
starts every later run as fast as in an installation that has it. ``hmmgpu warmup`` calls
:func:`compile_search_imports`.

Which modules
-------------
Those a search imports, found by importing :data:`SEARCH_IMPORTS` in a fresh interpreter
and listing every top-level package it then holds outside the standard library (pyhmmer
brings psutil, numba brings llvmlite, and so on): the bytecode of each whole package is
written, as pip would have written it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

#: What a search imports: the command line and engine, pyhmmer's route, the GPU process, and
#: numba's CUDA target for the kernels a first search compiles.
SEARCH_IMPORTS = ("hmmgpu.cli", "hmmgpu.search.engine", "hmmgpu.cpu.pyhmmer_stage", "hmmgpu.formats.seqdb",
                  "hmmgpu.report.outputs", "hmmgpu.report.text", "pyhmmer", "numpy", "hmmgpu.gpu.process",
                  "hmmgpu.gpu.cascade", "numba.cuda")

_LIST_SOURCES = """
import importlib, json, os, sys, sysconfig
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception:
        pass
stdlib = {os.path.realpath(sysconfig.get_path(key)) + os.sep for key in ("stdlib", "platstdlib")}
found = set()
for name, module in list(sys.modules.items()):
    path = getattr(module, "__file__", None)
    if "." in name or not path:
        continue
    real = os.path.realpath(path)
    if "site-packages" not in real and "dist-packages" not in real and real.startswith(tuple(stdlib)):
        continue
    found.update(getattr(module, "__path__", None) or [real])
print(json.dumps(sorted(found)))
"""


def search_import_sources(modules=None) -> list:
    """The source directories (packages) and files (single modules) outside the standard
    library that importing ``modules`` (default :data:`SEARCH_IMPORTS`) loads, in a fresh
    interpreter with this one's module path."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    run = subprocess.run([sys.executable, "-c", _LIST_SOURCES, *(SEARCH_IMPORTS if modules is None else modules)],
                         capture_output=True, text=True, env=env)
    return json.loads(run.stdout) if run.returncode == 0 and run.stdout.strip() else []


def compile_search_imports(modules=None) -> tuple:
    """Write the missing or out-of-date bytecode of every source :func:`search_import_sources`
    finds (where ``sys.pycache_prefix`` puts it, if set); return (the sources compiled,
    those whose directory cannot be written)."""
    import compileall

    compiled, refused = [], []
    for source in search_import_sources(modules):
        directory = source if os.path.isdir(source) else os.path.dirname(source)
        if sys.pycache_prefix is None and not os.access(directory, os.W_OK):
            refused.append(source)
            continue
        if os.path.isdir(source):
            compileall.compile_dir(source, quiet=2, workers=0)
        elif source.endswith(".py"):
            compileall.compile_file(source, quiet=2)
        else:
            continue  # an extension module: nothing to compile
        compiled.append(source)
    return compiled, refused


__all__ = ["SEARCH_IMPORTS", "search_import_sources", "compile_search_imports"]
