"""Every option of a search, written once: its name, default, valid range, choices and help.

Three frozen, keyword-only dataclasses hold them, as pyhmmer keeps its ``PipelineOptions``
apart from ``backend`` and ``cpus``. :class:`SearchOptions` decides *what* is computed
(thresholds, filters, statistics: pyhmmer's names and defaults, so that
:meth:`SearchOptions.from_kwargs` takes what ``pyhmmer.plan7.Pipeline`` takes);
:class:`RunOptions` decides *where* it runs (backend, lanes, CPU threads, GPU device), and a
search's options carry it as ``options.run``; the routing plan (:mod:`hmmgpu.search.routing`)
reads only that. :class:`ReportOptions` decides how the readable report looks. The command line (:mod:`hmmgpu.cli`) builds its arguments from the field
metadata below, so a default, a choice or a help text is never written twice; the Python
API passes the same names as keyword arguments.

Ranges follow hmmsearch 3.4's option table: E-value thresholds and search-space sizes must
be > 0, ``--seed`` and ``--cpu`` >= 0, ``--textw`` >= 120. Values outside raise
:class:`~hmmgpu.errors.HmmgpuError` with one line naming the option.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Literal, get_args

from hmmgpu.errors import InputError
from hmmgpu.host import usable_cores

Backend = Literal["auto", "cuda", "numba", "hmmer"]
Lanes = Literal["auto", "16x2", "8x4"]
BitCutoffs = Literal["gathering", "trusted", "noise"]
PostFilter = Literal["pyhmmer", "hmmgpu"]

#: Command-line groups, in the order ``--help`` shows them.
GROUPS = {
    "report": "reporting thresholds (as hmmsearch)",
    "include": "inclusion thresholds (as hmmsearch)",
    "filters": "acceleration heuristics (as hmmsearch)",
    "other": "other options (as hmmsearch)",
    "run": "where and how it runs",
    "output": "output format (as hmmsearch)",
}


def _option(default, help: str, *, flag: str | None = None, group: str = "other", check=None, metavar=None):
    """A dataclass field with its command-line metadata.

    ``flag``: the command-line spelling (default ``--<name>``; ``""`` keeps it off the
    command line). ``check``: ``(predicate, text)``, the valid range, as hmmsearch states it.
    """
    return field(default=default, metadata=dict(help=help, flag=flag, group=group, check=check, metavar=metavar))


_POSITIVE = (lambda v: v > 0, "must be > 0")
_NONNEGATIVE = (lambda v: v >= 0, "must be >= 0")


@dataclass(frozen=True, kw_only=True)
class SearchOptions:
    """Thresholds, filters and execution settings of a search (pyhmmer's names and defaults).

    Every field is also a command-line option of ``hmmgpu search`` and ``hmmgpu scan``.
    """

    E: float = _option(10.0, "report sequences with E-value <= E", flag="-E", group="report", check=_POSITIVE)
    T: float | None = _option(None, "report sequences with bit score >= T", flag="-T", group="report")
    domE: float = _option(10.0, "report domains with E-value <= domE", group="report", check=_POSITIVE)
    domT: float | None = _option(None, "report domains with bit score >= domT", group="report")
    incE: float = _option(0.01, "include sequences with E-value <= incE", group="include", check=_POSITIVE)
    incT: float | None = _option(None, "include sequences with bit score >= incT", group="include")
    incdomE: float = _option(0.01, "include domains with E-value <= incdomE", group="include", check=_POSITIVE)
    incdomT: float | None = _option(None, "include domains with bit score >= incdomT", group="include")
    bit_cutoffs: BitCutoffs | None = _option(
        None, "use the models' gathering, trusted or noise cutoffs for every threshold "
        "(--cut_ga, --cut_tc, --cut_nc)", flag="", group="report")
    F1: float = _option(0.02, "MSV filter: pass targets with P <= F1", group="filters")
    F2: float = _option(1e-3, "Viterbi filter: pass targets with P <= F2", group="filters")
    F3: float = _option(1e-5, "Forward filter: pass targets with P <= F3", group="filters")
    bias_filter: bool = _option(True, "composition bias filter (--nobias turns it off)", flag="", group="filters")
    null2: bool = _option(True, "null2 biased-composition score correction (--nonull2 turns it off)", flag="",
                          group="other")
    seed: int = _option(42, "random seed of domain definition (0: a one-time arbitrary seed)", group="other",
                        check=_NONNEGATIVE)
    Z: float | None = _option(None, "number of comparisons for E-values (default: the number of targets)",
                              flag="-Z", group="other", check=_POSITIVE)
    domZ: float | None = _option(None, "number of significant targets for domain E-values", group="other",
                                 check=_POSITIVE)
    run: "RunOptions" = field(default_factory=lambda: RunOptions(), metadata=dict(
        help="where the search runs", flag="", group="run"))

    def __post_init__(self):
        _validate(self)

    @classmethod
    def from_kwargs(cls, **kwargs) -> "SearchOptions":
        """Options from keyword arguments, :class:`RunOptions`' names among them (``backend``,
        ``cpus``, ...); an unknown name is a one-line :class:`~hmmgpu.errors.InputError`."""
        run = {name: kwargs.pop(name) for name in RUN_FIELDS if name in kwargs}
        names = {f.name for f in fields(cls)} - {"run"}
        unknown = sorted(set(kwargs) - names)
        if unknown:
            raise InputError(f"unknown search option(s): {', '.join(unknown)}")
        return cls(**kwargs, run=RunOptions(**run))

    def replace(self, **changes) -> "SearchOptions":
        """A copy with some fields changed, :class:`RunOptions`' among them (validated again)."""
        run = {name: changes.pop(name) for name in RUN_FIELDS if name in changes}
        if run:
            changes["run"] = replace(self.run, **run)
        return replace(self, **changes)

    def pipeline_kwargs(self, **overrides) -> dict:
        """Keyword arguments for ``pyhmmer.plan7.Pipeline`` (every threshold and filter option)."""
        kw = {name: getattr(self, name) for name in PIPELINE_FIELDS}
        kw.update(overrides)
        return kw

    @property
    def by_evalue(self) -> bool:
        """Sequences are reported by E-value (not by a bit score or the models' cutoffs)."""
        return self.T is None and self.bit_cutoffs is None


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """Where a search runs: hmmgpu's backend and GPU settings, and the CPU threads."""

    backend: Backend = _option("auto", "where the filters run: cuda (GPU), numba (hmmgpu's CPU filters), hmmer "
                               "(pyhmmer end to end) or auto (the fastest exact route for the work)", group="run")
    lanes: Lanes = _option("auto", "GPU lanes per 32-bit word (auto: 16x2 on sm_90 and newer, else 8x4)", group="run")
    cpus: int | None = _option(None, "CPU threads (default: all cores; 0: no worker threads, as hmmsearch)",
                               flag="--cpu", group="run", check=_NONNEGATIVE)
    device: int = _option(0, "CUDA device id of the GPU", group="run", check=_NONNEGATIVE)
    devices: str | None = _option(None, "search on several GPUs at once: all, or their ids (0,2); one GPU process "
                                  "each, the database resident on each, output identical to one GPU's", group="run",
                                  metavar="all|IDS")
    postfilter: PostFilter = _option(
        "pyhmmer", "the post-filter stage after hmmgpu's filters (Forward, Backward, domain definition, scores): "
        "pyhmmer (its pipeline; the default while it is the faster) or hmmgpu (hmmgpu's own exact code on the "
        "CPU, pyhmmer's pipeline for the few targets it cannot promise bit for bit); the results are the same",
        group="run")

    def __post_init__(self):
        _validate(self)
        if self.devices is not None:
            object.__setattr__(self, "devices", devices_text(self.devices))
            if self.device != 0:
                raise InputError("--device and --devices: give one of them (--devices N is --device N)")

    @property
    def threads(self) -> int:
        """Worker threads to use: ``cpus``, all cores by default, at least one."""
        return usable_cores() if self.cpus is None else max(1, self.cpus)


#: The fields of :class:`RunOptions`, which :meth:`SearchOptions.from_kwargs` also takes.
RUN_FIELDS = ("backend", "lanes", "cpus", "device", "devices", "postfilter")


def devices_text(devices) -> str:
    """``--devices`` (``devices=`` in the API) in one spelling: ``"all"``, or the distinct ids
    in the order given, joined by commas (``"0,2"``), from that text, an int or ids in a list;
    which GPUs exist is asked where the search starts (:func:`hmmgpu.gpu.runtime.context.device_ids`)."""
    if isinstance(devices, str):
        text = devices.strip()
        if text.lower() == "all":
            return "all"
        words = [w.strip() for w in text.split(",")]
    elif isinstance(devices, int) and not isinstance(devices, bool):
        words = [str(devices)]
    else:
        try:
            words = [str(d) for d in devices]
        except TypeError:
            words = [repr(devices)]
    if not words or not all(w.isdigit() for w in words):
        raise InputError(f"--devices: {devices!r} is not 'all' or a list of GPU ids such as 0,2")
    return ",".join(dict.fromkeys(str(int(w)) for w in words))
#: The fields that ``pyhmmer.plan7.Pipeline`` takes.
PIPELINE_FIELDS = ("E", "T", "domE", "domT", "incE", "incT", "incdomE", "incdomT", "bit_cutoffs",
                   "F1", "F2", "F3", "bias_filter", "null2", "seed", "Z", "domZ")


#: The options that spread a search over a dask cluster or several GPUs, left out of the
#: command line the tables' tail records (:func:`local_command_line`).
PLACEMENT_OPTIONS = ("--scheduler", "--scheduler-file", "--devices")


def local_command_line(command_line: str) -> str:
    """``command_line`` without :data:`PLACEMENT_OPTIONS` and their values: the command a
    search in one process on one GPU would have been given. The tables' tail records it
    (:class:`~hmmgpu.report.outputs.RunOutputs`), so that a search's outputs do not depend on the
    cluster or the GPUs it ran on."""
    import shlex

    words, kept = shlex.split(command_line), []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word in PLACEMENT_OPTIONS:
            skip = True
        elif not word.startswith(tuple(option + "=" for option in PLACEMENT_OPTIONS)):
            kept.append(word)
    return shlex.join(kept)


@dataclass(frozen=True, kw_only=True)
class ReportOptions:
    """How the readable report looks (hmmsearch's output options)."""

    acc: bool = _option(False, "prefer accessions over names in the output", group="output")
    noali: bool = _option(False, "do not print alignments (smaller output)", group="output")
    textw: int | None = _option(120, "maximum width of report lines (--notextw: unlimited)", group="output",
                                check=(lambda v: v >= 120, "must be >= 120"))

    def __post_init__(self):
        _validate(self)


def _validate(options) -> None:
    """Check every field against its choices and range; one-line HmmgpuError naming the option."""
    for f in fields(options):
        value = getattr(options, f.name)
        if value is None or isinstance(value, str):
            allowed = _literal_choices(f.name)
            if allowed and value is not None and value not in allowed:
                raise InputError(f"{_flag(f)}: invalid choice {value!r} (choose from {', '.join(allowed)})")
            continue
        if isinstance(value, float) and math.isnan(value):
            raise InputError(f"{_flag(f)}: {value!r} is not a number")
        check = f.metadata.get("check")
        if check and not isinstance(value, bool) and not check[0](value):
            raise InputError(f"{_flag(f)} {check[1]} (got {value if isinstance(value, int) else format(value, 'g')})")


def _literal_choices(name: str) -> tuple:
    return {"bit_cutoffs": get_args(BitCutoffs), "backend": get_args(Backend), "lanes": get_args(Lanes),
            "postfilter": get_args(PostFilter)}.get(name, ())


def _flag(f) -> str:
    flag = f.metadata.get("flag")
    return flag if flag else f"--{f.name}"


def option_flag(name: str) -> str:
    """The command-line spelling of the option called ``name``."""
    return _flag(next(f for cls in (SearchOptions, RunOptions) for f in fields(cls) if f.name == name))


def choices(name: str) -> tuple:
    """The valid values of a choice option (``backend``, ``lanes``, ``bit_cutoffs``)."""
    return _literal_choices(name)


__all__ = ["SearchOptions", "RunOptions", "RUN_FIELDS", "devices_text", "PLACEMENT_OPTIONS", "local_command_line", "ReportOptions", "Backend", "Lanes", "BitCutoffs", "PostFilter", "PIPELINE_FIELDS", "GROUPS",
           "option_flag", "choices"]
