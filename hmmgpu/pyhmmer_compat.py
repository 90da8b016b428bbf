"""pyhmmer's calling conventions, so that ``hmmgpu.hmmsearch`` and ``hmmgpu.hmmscan`` drop in.

A script written for ``pyhmmer.hmmsearch(queries, sequences, cpus=..., callback=...,
backend=..., parallel=..., **options)`` must run unchanged with hmmgpu's function and get
the same ``TopHits``. pyhmmer's functions accept more kinds of input than hmmgpu's engine
searches, and their keywords mean pyhmmer's things; this module holds what translates one
into the other, so that :mod:`hmmgpu.api` only routes:

* :class:`Dispatch` holds pyhmmer's dispatch keywords with pyhmmer's defaults, written once:
  ``cpus`` (0 or less: all cores; 1: everything in the calling thread), ``callback``,
  ``backend`` (``"threading"`` or ``"multiprocessing"``, pyhmmer's parallel backend) and
  ``parallel`` (``"queries"`` or ``"targets"``). hmmgpu's own choice of where the filters run,
  the command line's ``--backend``, is the keyword ``engine`` here, so the two never clash;
  :func:`search_options` turns the remaining keywords into a
  :class:`~hmmgpu.options.SearchOptions`. pyhmmer's ``alphabet`` and ``background`` pipeline
  options are kept aside for pyhmmer's route (:data:`PYHMMER_ONLY`).
* :class:`Targets` reads what pyhmmer takes as a database (a ``DigitalSequenceBlock``, any
  iterable of ``DigitalSequence``, a digital ``SequenceFile``) as well as hmmgpu's own (a
  path, a made database, a ``SequenceDB``), with pyhmmer's checks, and says whether hmmgpu's
  engine can search it: amino sequences, none over HMMER's length limit.
* :func:`check_query` raises what pyhmmer raises for a query: ``TypeError`` for an object
  that is not a model, :class:`AlphabetMismatch` and :class:`MissingCutoffs`, each also an
  :class:`~hmmgpu.errors.InputError` (so ``except HmmgpuError`` and ``except ValueError``
  catch them as before). :func:`engine_searches` says whether the engine takes a checked
  query: a calibrated protein ``HMM`` under the default background. Everything else
  (``Profile`` and ``OptimizedProfile`` queries, models from ``HMM.sample`` without E-value
  parameters, nucleotide models, a custom background) goes to pyhmmer's own function, which
  computes exactly what it always did.

The results never depend on the route: the engine's ``TopHits`` equal pyhmmer's
(docs/exactness.md), and pyhmmer's route is pyhmmer.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from itertools import chain
from typing import Callable, Literal, get_args

from pyhmmer import errors as pyhmmer_errors

from hmmgpu.errors import InputError
from hmmgpu.options import PIPELINE_FIELDS, RUN_FIELDS, SearchOptions, choices

ParallelBackend = Literal["threading", "multiprocessing"]
Parallel = Literal["queries", "targets"]
#: pyhmmer's pipeline options that hmmgpu's engine does not take: searches that set them take pyhmmer's route.
PYHMMER_ONLY = ("alphabet", "background")
#: hmmgpu's keywords beside pyhmmer's, by :class:`~hmmgpu.options.RunOptions`' names: ``engine`` is its
#: ``backend`` (``cpus`` is pyhmmer's, :class:`Dispatch`).
HMMGPU_KEYWORDS = {"engine": "backend", **{name: name for name in RUN_FIELDS if name not in ("backend", "cpus")}}


class AlphabetMismatch(InputError, pyhmmer_errors.AlphabetMismatch):
    """A query whose alphabet is not the targets' (pyhmmer's ``AlphabetMismatch``, and an ``InputError``)."""


class MissingCutoffs(InputError, pyhmmer_errors.MissingCutoffs):
    """A query without the bit score cutoffs that ``bit_cutoffs`` asks for (pyhmmer's
    ``MissingCutoffs``, and an ``InputError``)."""


@dataclass(frozen=True, kw_only=True)
class Dispatch:
    """pyhmmer's dispatch keywords of ``hmmsearch``/``hmmscan``, with pyhmmer's defaults and meaning."""

    cpus: int = 0  #: threads: 0 or less for all cores, 1 for none beside the calling thread
    callback: Callable | None = None  #: called as ``callback(query, n)`` when the n-th query's result is ready
    backend: ParallelBackend = "threading"  #: pyhmmer's parallel backend (on pyhmmer's route)
    parallel: Parallel | None = None  #: pyhmmer's parallel strategy (on pyhmmer's route; None: pyhmmer's choice)

    def __post_init__(self):
        if isinstance(self.cpus, bool) or not isinstance(self.cpus, int):
            raise TypeError(f"cpus must be an int, not {type(self.cpus).__name__}")
        if self.callback is not None and not callable(self.callback):
            raise TypeError(f"callback must be callable, not {type(self.callback).__name__}")
        if self.backend not in get_args(ParallelBackend):
            hint = f"; hmmgpu's route is chosen with engine={self.backend!r}" if self.backend in choices("backend") \
                else ""
            raise InputError(f"invalid backend {self.backend!r}: pyhmmer's parallel backend is 'threading' or "
                             f"'multiprocessing'{hint}")
        if self.parallel is not None and self.parallel not in get_args(Parallel):
            raise InputError(f"invalid parallel {self.parallel!r}: choose 'queries', 'targets' or None")

    @property
    def engine_cpus(self) -> int | None:
        """:class:`~hmmgpu.options.RunOptions`' ``cpus`` of the same meaning: all cores (None)
        for 0 or less, the calling thread alone (0, as ``hmmsearch --cpu 0``) for 1."""
        return None if self.cpus <= 0 else 0 if self.cpus == 1 else self.cpus

    def pyhmmer_kwargs(self, program: str) -> dict:
        """The keywords for pyhmmer's own ``program`` (``hmmsearch`` also takes ``parallel``)."""
        kwargs = dict(cpus=self.cpus, backend=self.backend)
        if program == "hmmsearch":
            kwargs["parallel"] = self.parallel
        return kwargs


def search_options(options: dict, dispatch: Dispatch) -> tuple[SearchOptions, dict]:
    """The :class:`SearchOptions` of a call's pipeline ``options`` (pyhmmer's names, and
    hmmgpu's :data:`HMMGPU_KEYWORDS`), and the options only pyhmmer's route takes
    (:data:`PYHMMER_ONLY`). An unknown name is a ``TypeError``, as in pyhmmer."""
    unknown = sorted(set(options) - set(PIPELINE_FIELDS) - set(PYHMMER_ONLY) - set(HMMGPU_KEYWORDS))
    if unknown:
        raise TypeError(f"unexpected keyword argument(s): {', '.join(unknown)}")
    kwargs = {HMMGPU_KEYWORDS.get(name, name): value for name, value in options.items() if name not in PYHMMER_ONLY}
    extra = {name: options[name] for name in PYHMMER_ONLY if name in options}
    return SearchOptions.from_kwargs(**kwargs, cpus=dispatch.engine_cpus), extra


class Targets:
    """The database of a search, from whatever pyhmmer or hmmgpu takes as one.

    ``alphabet``: the targets' pyhmmer alphabet. :meth:`database` is what hmmgpu's engine
    opens (a :class:`~hmmgpu.formats.seqdb.SequenceDB`, opened once), :meth:`block` the
    ``DigitalSequenceBlock`` pyhmmer's route searches, and :attr:`engine_ready` whether the
    engine can search them at all.
    """

    def __init__(self, alphabet, *, block=None, source=None):
        self.alphabet = alphabet
        self._block = block
        self._source = source
        self._db = None

    @classmethod
    def of(cls, sequences, alphabet=None, models=()) -> tuple["Targets", object]:
        """The sequences ``sequences`` as pyhmmer reads them: a block, a digital ``SequenceFile``
        (read again from its path, as pyhmmer's workers do, so the caller's handle is left as it
        was), or any iterable of digital sequences (in ``alphabet``, else the first of
        ``models``', the models they meet, else amino); or hmmgpu's: a path or a ``SequenceDB``
        (amino). Returns them and ``models``, the same items still to come where the first was
        looked at."""
        from pyhmmer.easel import Alphabet, DigitalSequenceBlock, SequenceFile

        from hmmgpu.formats.seqdb import SequenceDB

        if isinstance(sequences, (str, os.PathLike, SequenceDB)):
            return cls(Alphabet.amino(), source=sequences), models
        if isinstance(sequences, SequenceFile):
            if sequences.name is None:
                raise InputError("expected named `SequenceFile` for targets")
            if not sequences.digital:
                raise InputError("expected digital mode `SequenceFile` for targets")
            with SequenceFile(sequences.name, format=sequences.format, digital=True,
                              alphabet=alphabet or sequences.alphabet) as again:
                return cls(again.alphabet, block=again.read_block()), models
        if isinstance(sequences, DigitalSequenceBlock):
            if alphabet is not None and sequences.alphabet != alphabet:
                raise AlphabetMismatch(alphabet, sequences.alphabet)   # as pyhmmer's pipeline does, later
            return cls(sequences.alphabet, block=sequences), models
        if alphabet is None:
            first, models = _first(models)
            alphabet = getattr(first, "alphabet", None) or Alphabet.amino()
        return cls(alphabet, block=DigitalSequenceBlock(alphabet, sequences)), models

    def database(self):
        """The targets as hmmgpu's :class:`~hmmgpu.formats.seqdb.SequenceDB` (made once)."""
        if self._db is None:
            from hmmgpu.formats.seqdb import SequenceDB, open_database

            source = self._source
            self._db = SequenceDB.from_block(self._block) if self._block is not None else \
                source if isinstance(source, SequenceDB) else open_database(source)
        return self._db

    def block(self):
        """The targets as a pyhmmer ``DigitalSequenceBlock``."""
        return self.database().block() if self._block is None else self._block

    @property
    def engine_ready(self) -> bool:
        """hmmgpu's engine can search these targets: amino, and (for pyhmmer's inputs) none over
        HMMER's length limit, which pyhmmer's own route does not enforce; hmmgpu's own inputs
        keep hmmsearch's refusal of such a target."""
        from hmmgpu.constants import MAX_TARGET_LENGTH

        if not self.alphabet.is_amino():
            return False
        return self._block is None or int(self.database().max_length) <= MAX_TARGET_LENGTH


def _first(items) -> tuple:
    """The first of ``items`` (None if there is none) and the items again, all of them."""
    if isinstance(items, (list, tuple)):
        return (items[0] if items else None), items
    items = iter(items)
    first = next(items, None)
    return first, items if first is None else chain([first], items)


def check_query(query, alphabet, options: SearchOptions, program: str = "hmmsearch") -> None:
    """Raise what pyhmmer's ``program`` raises for ``query`` against targets in ``alphabet``:
    ``TypeError`` for what is not a model, :class:`AlphabetMismatch`, :class:`MissingCutoffs`."""
    from pyhmmer.plan7 import HMM, OptimizedProfile, Profile

    if not isinstance(query, (HMM, Profile, OptimizedProfile)):
        raise TypeError(f"Unsupported query type for `{program}`: {type(query).__name__}")
    if query.alphabet != alphabet:
        raise AlphabetMismatch(alphabet, query.alphabet)
    if options.bit_cutoffs is not None and not has_cutoffs(query, options.bit_cutoffs):
        raise MissingCutoffs(query.name, options.bit_cutoffs)


def has_cutoffs(model, bit_cutoffs: str) -> bool:
    """``model`` (an HMM or a profile) has the ``bit_cutoffs`` (gathering, trusted, noise) cutoffs."""
    return getattr(model.cutoffs, f"{bit_cutoffs}_available")()


def engine_searches(query, extra: dict) -> bool:
    """hmmgpu's engine takes this checked query: a calibrated ``HMM`` (E-value parameters,
    which ``HMM.sample`` does not give) under the default background (no ``background`` in the
    pyhmmer-only options ``extra``); the targets' alphabet is then amino (:attr:`Targets.engine_ready`)."""
    from pyhmmer.plan7 import HMM

    return (isinstance(query, HMM) and query.evalue_parameters.m_lambda is not None
            and extra.get("background") is None)


__all__ = ["AlphabetMismatch", "MissingCutoffs", "Dispatch", "Targets", "search_options", "check_query",
           "has_cutoffs", "engine_searches", "PYHMMER_ONLY"]
