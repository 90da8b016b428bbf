"""Command line: ``hmmgpu search``, ``scan``, ``makedb``, ``audit`` and ``warmup``.

``search`` is hmmsearch and ``scan`` is hmmscan: the same options, spelled as HMMER spells
them, with the same ranges and incompatibilities, and the same outputs. The search
options, their defaults, choices and help come from :class:`hmmgpu.options.SearchOptions`
(written once there); the output options map onto :class:`~hmmgpu.options.ReportOptions`.

Every option records the string it was given as well as its value: HMMER's report header
lists an option only when that string differs from the default's (Easel's
``esl_opt_IsUsed()``), and the header is reproduced exactly. Long options may be shortened
to any unambiguous prefix, as Easel's getopts allows (``--domtbl`` for ``--domtblout``);
hmmsearch's options that hmmgpu lacks are known to the parser, so that a prefix ambiguous
for hmmsearch is ambiguous here too, and are refused when given. The sequence file's format
is the one given (``--tformat``, ``--qformat``) or the one Easel would guess
(:mod:`hmmgpu.formats.seqformat`). Every error, from a mistyped option to a damaged input
file, is one line ``hmmgpu: error: ...`` on standard error and exit status 1, HMMER's.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import re
import shlex
import sys
import time
from dataclasses import MISSING, fields

from hmmgpu._version import __version__
from hmmgpu.errors import ERROR_STATUS, DeviceUnavailable, HmmgpuError, InputError
from hmmgpu.host import end_process, stop_on_signals
from hmmgpu.options import GROUPS, ReportOptions, RunOptions, SearchOptions, choices
from hmmgpu.preflight import finish_interrupted, prepare_run

#: Options that ``SearchOptions`` holds but the command line spells otherwise.
_SPECIAL = {"bit_cutoffs", "bias_filter", "null2", "run"}
#: hmmsearch's incompatible option pairs (esl_getopts "incomp" lists), by destination name.
_THRESHOLDS = ("E", "T", "domE", "domT", "incE", "incT", "incdomE", "incdomT")
_INCOMPATIBLE = [("E", "T"), ("domE", "domT"), ("incE", "incT"), ("incdomE", "incdomT")] + \
    [(cut, t) for cut in ("cut_ga", "cut_tc", "cut_nc") for t in _THRESHOLDS] + \
    [("cut_ga", "cut_tc"), ("cut_ga", "cut_nc"), ("cut_tc", "cut_nc")] + \
    [("max", f) for f in ("F1", "F2", "F3", "nobias")] + [("textw", "notextw")]
_SPELLING = {"E": "-E", "T": "-T", "Z": "-Z", "cpus": "--cpu"}
#: C's white space (``isspace``), which ``strtol`` and ``strtod`` skip before a number and
#: Easel's getopts allows after it.
_C_SPACE = "[ \t\n\v\f\r]*"
_C_INTEGER = re.compile(f"{_C_SPACE}([+-]?)([0-9]+){_C_SPACE}")
_C_REAL = re.compile(f"{_C_SPACE}([+-]?)(?:(0[xX](?:[0-9a-fA-F]+\\.?[0-9a-fA-F]*|\\.[0-9a-fA-F]+)(?:[pP][+-]?[0-9]+)?)"
                     f"|((?:[0-9]+\\.?[0-9]*|\\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf(?:inity)?|nan(?:\\([0-9A-Za-z_]*\\))?)){_C_SPACE}",
                     re.IGNORECASE)


def easel_integer(text: str) -> int:
    """An integer option's value as hmmsearch reads it: Easel's getopts takes what ``strtol``
    reads in base 10 (C's white space around it allowed), and ``atoi`` makes it a C ``int``:
    ``strtol`` saturates at 64 bits and the cast keeps the low 32, so 4294967296 is 0 and
    2147483648 is -2147483648 (then outside ``--seed``'s range, as hmmsearch says)."""
    m = _C_INTEGER.fullmatch(text)
    if m is None:
        raise ValueError(text)
    digits = m.group(2).lstrip("0") or "0"
    n = int(digits) if len(digits) <= 19 else 1 << 63   # more digits than a long holds: saturated
    n = min(-n if m.group(1) == "-" else n, (1 << 63) - 1)
    n = max(n, -(1 << 63))
    return (n + (1 << 31)) % (1 << 32) - (1 << 31)


def easel_real(text: str) -> float:
    """A real option's value as hmmsearch reads it (``strtod``: decimal or hexadecimal, ``inf``,
    ``infinity``, ``nan``, C's white space around it allowed; no ``_`` between digits)."""
    m = _C_REAL.fullmatch(text)
    if m is None:
        raise ValueError(text)
    sign, hexadecimal, other = m.groups()
    if hexadecimal is not None:
        return float.fromhex(sign + hexadecimal)
    return float(sign + ("nan" if other.lower().startswith("nan") else other))


_TYPES = {"float": easel_real, "float | None": easel_real, "int": easel_integer, "int | None": easel_integer}
#: What :class:`_Given`'s error calls a value its conversion refused.
_KINDS = {easel_real: "real", easel_integer: "integer", str: "text"}
#: hmmsearch's options (in the ``hmmer`` package's build) that hmmgpu does not implement:
#: known to the parser, so that abbreviations are ambiguous where hmmsearch finds them so
#: (``--r``), and refused when given. hmmscan has none.
_NOT_IMPLEMENTED = {"search": ("--restrictdb_stkey", "--restrictdb_n", "--ssifile"), "scan": ()}


def _spelled(dest: str) -> str:
    return _SPELLING.get(dest, f"--{dest}")


#: A negative number as an option's value, as Easel reads one (``-T -inf``, ``-T -1e3``):
#: argparse's own pattern takes only ``-1000`` and ``-1.5``, and reads the others as options.
_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*([eE][-+]?\d+)?|\.\d+([eE][-+]?\d+)?|inf(inity)?|nan|0x[0-9a-f.]+(p[-+]?\d+)?)$",
                              re.IGNORECASE)


class _Parser(argparse.ArgumentParser):
    """argparse, with each error raised as one line rather than printed after the usage."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE_NUMBER

    def error(self, message):
        raise InputError(message)


class _Given(argparse.Action):
    """Store an option's value and record the string given for it (``given[flag]``). An
    option given twice is an error, as in Easel's getopts."""

    def __init__(self, option_strings, dest, convert=str, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.convert = convert

    def __call__(self, parser, namespace, values, option_string=None):
        if self.nargs == 0:
            text, value = "", True
        else:
            text = values
            try:
                value = self.convert(values)
            except ValueError:
                raise argparse.ArgumentError(self, f"invalid {_KINDS.get(self.convert, 'value')} value: "
                                                   f"{values!r}") from None
        given = dict(getattr(namespace, "given", None) or {})
        if self.option_strings[0] in given:
            raise InputError(f"option {self.option_strings[0]} has already been set on the command line")
        setattr(namespace, self.dest, value)
        given[self.option_strings[0]] = (text, value)
        namespace.given = given


def refuse_options_as_values(parser: argparse.ArgumentParser, argv) -> None:
    """Easel's getopts for ``search`` and ``scan``: a text option's value (a file name, a
    format) given as the next word and starting with ``-`` is refused as an option taken for
    a value ("Arg looks like option?"); ``--tblout=-`` and ``-o-`` name a file ``-``, as in
    hmmsearch. Numbers are not text (``-T -5`` is a value)."""
    if not argv or argv[0] not in ("search", "scan"):
        return
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    table = commands.choices[argv[0]]._option_string_actions
    words = list(argv[1:])
    for k, word in enumerate(words[:-1]):
        if word == "--":
            return
        if word.startswith("--") and "=" not in word:   # a long option, or an unambiguous prefix of one
            actions = {table[word]} if word in table else {a for name, a in table.items() if name.startswith(word)}
        elif word in table and not word.startswith("--"):
            actions = {table[word]}
        else:
            continue
        if len(actions) != 1:
            continue
        action = actions.pop()
        if isinstance(action, _Given) and action.nargs != 0 and action.convert is str and words[k + 1].startswith("-"):
            name = action.option_strings[0]
            raise InputError(f"Arg looks like option? Use {name}{'=' if name.startswith('--') else ''}{words[k + 1]} "
                             "if you really mean it.")


class _NotImplemented(argparse.Action):
    """An hmmsearch option that hmmgpu does not implement: an error when given."""

    def __call__(self, parser, namespace, values, option_string=None):
        raise InputError(f"{self.option_strings[0]} (an hmmsearch option) is not supported by hmmgpu")


def _switch(group, flag: str, help: str, dest: str | None = None) -> None:
    group.add_argument(flag, dest=dest or flag.lstrip("-"), action=_Given, nargs=0, default=False, help=help)


def add_search_options(parser: argparse.ArgumentParser) -> None:
    """hmmsearch's threshold, filter and execution options, from :class:`SearchOptions`."""
    groups = {key: parser.add_argument_group(title) for key, title in GROUPS.items() if key != "output"}
    for f in (*fields(SearchOptions), *fields(RunOptions)):
        if f.name in _SPECIAL:
            continue
        meta = f.metadata
        default = f.default if f.default is not MISSING else None
        help_text = meta["help"] + (f" (default: {default})" if default not in (None, "") else "")
        groups[meta["group"]].add_argument(
            meta["flag"] or f"--{f.name}", dest=f.name, action=_Given, convert=_TYPES.get(f.type, str),
            choices=choices(f.name) or None, default=None, metavar=meta.get("metavar"), help=help_text)
    for tag, what in (("ga", "gathering"), ("tc", "trusted"), ("nc", "noise")):
        _switch(groups["report"], f"--cut_{tag}", f"use the models' {what} (--cut_{tag}) cutoffs for every threshold")
    _switch(groups["filters"], "--nobias", "turn off the composition bias filter")
    _switch(groups["filters"], "--max", "turn off every filter (F1 = F2 = F3 = 1, no bias filter)")
    _switch(groups["other"], "--nonull2", "turn off the null2 score correction")


def add_output_options(parser: argparse.ArgumentParser, program: str) -> None:
    """hmmsearch's (``program="search"``) or hmmscan's output options."""
    out = parser.add_argument_group(GROUPS["output"])
    out.add_argument("-o", dest="output", action=_Given, default=None, metavar="FILE",
                     help="write the readable report to FILE, not standard output")
    if program == "search":
        out.add_argument("-A", dest="alignment", action=_Given, default=None, metavar="FILE",
                         help="save the multiple alignment of the included hits to FILE (Stockholm)")
    for kind, what in (("tblout", "per-sequence" if program == "search" else "per-model"),
                       ("domtblout", "per-domain"), ("pfamtblout", "Pfam-style")):
        out.add_argument(f"--{kind}", dest=kind, action=_Given, default=None, metavar="FILE",
                         help=f"save a table of {what} hits to FILE")
    for f in fields(ReportOptions):
        if f.name != "textw":
            _switch(out, f"--{f.name}", f.metadata["help"])
    out.add_argument("--textw", dest="textw", action=_Given, convert=easel_integer, default=None, metavar="N",
                     help="maximum width of report lines (default: 120)")
    _switch(out, "--notextw", "unlimited width of report lines")
    fmt = "--tformat" if program == "search" else "--qformat"
    out.add_argument(fmt, dest="seqformat", action=_Given, default=None, metavar="FORMAT",
                     help=f"{'target' if program == 'search' else 'query'} sequence file format, as Easel names it "
                          "(fasta, embl, genbank, uniprot, stockholm, afa, ncbi, ...; default: guessed as Easel "
                          "guesses it)")
    for flag in _NOT_IMPLEMENTED[program]:
        parser.add_argument(flag, action=_NotImplemented, help=argparse.SUPPRESS)


def search_options(args) -> SearchOptions:
    """The :class:`SearchOptions` of parsed arguments (hmmsearch's incompatibilities checked)."""
    given = {f.name for cls in (SearchOptions, RunOptions) for f in fields(cls)
             if f.name != "run" and getattr(args, f.name, None) is not None}
    flags = given | {k for k in ("cut_ga", "cut_tc", "cut_nc", "nobias", "max", "notextw") if getattr(args, k, False)}
    if getattr(args, "textw", None) is not None:
        flags.add("textw")
    for a, b in _INCOMPATIBLE:
        if a in flags and b in flags:
            raise InputError(f"option {_spelled(a)} is incompatible with {_spelled(b)}")
    values = {name: getattr(args, name) for name in given}
    cut = [w for tag, w in (("ga", "gathering"), ("tc", "trusted"), ("nc", "noise")) if getattr(args, f"cut_{tag}")]
    if cut:
        values["bit_cutoffs"] = cut[0]
    if args.nobias:
        values["bias_filter"] = False
    if args.nonull2:
        values["null2"] = False
    if args.max:
        values.update(F1=1.0, F2=1.0, F3=1.0, bias_filter=False)
    return SearchOptions.from_kwargs(**values)


def report_options(args) -> ReportOptions:
    """The :class:`ReportOptions` of parsed arguments."""
    textw = None if args.notextw else (args.textw if args.textw is not None else ReportOptions().textw)
    return ReportOptions(acc=args.acc, noali=args.noali, textw=textw)


def build_parser() -> argparse.ArgumentParser:
    """The ``hmmgpu`` argument parser."""
    parser = _Parser(prog="hmmgpu", description="HMMER3 protein search with exact answers, GPU-accelerated.",
                     allow_abbrev=False)
    parser.add_argument("--version", action="version", version=f"hmmgpu {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    s = sub.add_parser("search",
                       help="search profile HMM(s) against a protein database, like hmmsearch")
    s.add_argument("hmmfile", help="profile HMM file (one or more models; plain, gzip, binary; - for stdin)")
    s.add_argument("seqdb", help="protein sequences (FASTA, EMBL, UniProt, GenBank, alignments; plain or gzip; "
                                 "- for stdin) or a database made by `hmmgpu makedb`")
    add_output_options(s, "search")
    add_search_options(s)
    dask = s.add_argument_group("over a dask cluster (a database made by `hmmgpu makedb` on a path every worker reads)")
    dask.add_argument("--scheduler", default=None, metavar="ADDRESS",
                      help="search over the workers of the dask scheduler at ADDRESS (tcp://host:8786)")
    dask.add_argument("--scheduler-file", dest="scheduler_file", default=None, metavar="PATH",
                      help="... or of the scheduler that `dask scheduler --scheduler-file PATH` describes")

    c = sub.add_parser("scan",
                       help="search protein sequences against a profile database, like hmmscan")
    c.add_argument("hmmdb", help="profile HMM database: hmmpress-ed (found by its base name), plain or gzip; "
                                 "- for stdin")
    c.add_argument("seqfile", help="query protein sequences (FASTA, EMBL, UniProt, GenBank, alignments; plain or "
                                   "gzip; - for stdin)")
    add_output_options(c, "scan")
    add_search_options(c)

    m = sub.add_parser("makedb", allow_abbrev=False,
                       help="digitize a protein FASTA into a memory-mapped database, or check one")
    m.add_argument("fasta", nargs="?", help="protein sequence file (FASTA, plain or gzip; - for stdin)")
    m.add_argument("out", nargs="?", help="output directory")
    m.add_argument("--tformat", default=None, metavar="FORMAT",
                   help="sequence file format (default: guessed as Easel guesses it)")
    m.add_argument("--check", default=None, metavar="DIR",
                   help="verify every checksum of the made database DIR (residues included)")

    a = sub.add_parser("audit", allow_abbrev=False,
                       help="check every stage (filters, parsers, domains, hits) against HMMER's own code, "
                            "target by target")
    a.add_argument("hmmfile")
    a.add_argument("seqdb")
    a.add_argument("--backend", default="numba", choices=["numba", "cuda"])
    a.add_argument("--lanes", default="auto", choices=choices("lanes"))
    a.add_argument("--cpu", dest="cpus", type=int, default=None)
    a.add_argument("--device", type=int, default=0)
    a.add_argument("--show", type=int, default=5, help="disagreements to list per stage")

    w = sub.add_parser("warmup", allow_abbrev=False,
                       help="write the Python bytecode of hmmgpu and its imports, and compile every GPU kernel "
                            "shape ahead of time (once per device)")
    w.add_argument("--lanes", default="auto", choices=choices("lanes"))
    w.add_argument("--device", type=int, default=0)

    from hmmgpu.sw.cli import add_parser as add_sw_parser

    add_sw_parser(sub)
    return parser


def _run_outputs(args, program: str, query_file: str, target_file: str, progress: str, options: SearchOptions):
    from hmmgpu.report.outputs import RunOutputs
    from hmmgpu.report.text import header_settings

    if query_file == target_file == "-":
        both = "<hmmfile> or <seqdb>" if program == "search" else "<hmmdb> or <seqfile>"
        raise InputError(f"Either {both} may be '-' (to read from stdin), but not both")
    paths = {"-o": args.output, "-A": getattr(args, "alignment", None), "tblout": args.tblout,
             "domtblout": args.domtblout, "pfamtblout": args.pfamtblout}
    return RunOutputs(program, query_file, target_file, paths={k: v for k, v in paths.items() if v},
                      settings=header_settings(program, getattr(args, "given", None) or {}),
                      report_options=report_options(args), command_line=args.command_line, progress=progress,
                      filter_thresholds=(options.F1, options.F2, options.F3))


@contextlib.contextmanager
def _abandoned_on_error(plan):
    """Stop the GPU process a plan started early when the block fails; once a backend has
    taken it, the backend stops it."""
    try:
        yield
    except BaseException:
        plan.abandon()
        raise


def cmd_search(args) -> int:
    """Run ``hmmgpu search``."""
    from hmmgpu.formats.hmmfile import model_lengths
    from hmmgpu.formats.seqformat import sequence_format
    from hmmgpu.search.routing import SearchPlan

    options = search_options(args)
    if args.scheduler is not None or args.scheduler_file is not None:   # over a dask cluster
        _single_host_postfilter(options, "a search over a dask cluster")
        from hmmgpu.distributed.cluster import local_command_line, search_command

        args.command_line = local_command_line(args.command_line)   # the tables' tail: as in one process
        return search_command(args.hmmfile, args.seqdb, options, scheduler=args.scheduler,
                              scheduler_file=args.scheduler_file, seqformat=args.seqformat,
                              outputs=lambda: _run_outputs(args, "search", args.hmmfile, args.seqdb, "searching",
                                                           options))
    timeline = _Timeline(args.started)
    # The GPU process, where the work may need it, starts before this process imports numpy,
    # pyhmmer and the engine (0.3-0.4 s on the GPU machine), so that its start-up overlaps them.
    lengths = None if args.hmmfile == "-" else model_lengths(args.hmmfile)
    seqformat = sequence_format(args.seqdb, args.seqformat)
    plan = SearchPlan.before_reading(options, args.seqdb, seqformat, lengths)
    timeline.mark("model lengths")
    with _abandoned_on_error(plan):
        from hmmgpu.distributed.processes import WorkerProcesses
        from hmmgpu.formats.checks import check_target_lengths
        from hmmgpu.formats.hmmfile import read_models
        from hmmgpu.formats.seqdb import open_database
        from hmmgpu.report.outputs import formatted
        from hmmgpu.search.engine import SearchEngine

        opened = contextlib.ExitStack()
        outputs = opened.enter_context(_run_outputs(args, "search", args.hmmfile, args.seqdb, "searching", options))
    with opened:
        with _abandoned_on_error(plan):
            db = plan.pieces()
            if db is None:
                db = open_database(args.seqdb, seqformat)
                check_target_lengths(db)
        timeline.mark("database read" if db.pieces is None else "database cut into pieces")
        backend = plan.backend(db)
        timeline.mark("backend ready")
        try:
            if lengths:
                backend.prepare_for(lengths)
                timeline.mark("kernels ready")
            shown = backend.description
            print(f"# hmmgpu {__version__}: {shown}", file=sys.stderr)
            if db.looks_like_nucleotide():
                print(f"hmmgpu: warning: {args.seqdb} looks like nucleotide sequence; searching it as protein "
                      "(as hmmsearch would)", file=sys.stderr)
            processes = plan.worker_processes(db, backend, args.seqdb)
            if processes:
                search = WorkerProcesses(args.seqdb, seqformat, options, outputs.formatter,
                                         processes=processes, queries=plan.queries)
                for blocks in search.search(args.hmmfile):
                    outputs.write(blocks)
                stats = search.stats
            else:
                engine = SearchEngine(db, options, backend, ftz=True, model_lengths=lengths,
                                      processes=plan.postfilter_processes(db, backend, args.seqdb))
                for blocks in formatted(engine.search(read_models(args.hmmfile)), outputs.formatter):
                    outputs.write(blocks)
                stats = engine.stats
            timeline.mark("search")
        finally:
            backend.close(wait=False)
    timeline.mark("outputs closed")
    for line in stats.lines(shown) + [timeline.line()]:
        print(f"# hmmgpu: {line}", file=sys.stderr)
    return 0


def _single_host_postfilter(options: SearchOptions, what: str) -> None:
    """``--postfilter hmmgpu`` is a search's on one host (:mod:`hmmgpu.search.engine`): a one-line
    error for ``what``, which runs pyhmmer's post-filter stage only."""
    if options.run.postfilter != "pyhmmer":
        raise InputError(f"--postfilter {options.run.postfilter}: not available for {what} (pyhmmer's pipeline only)")


class _Timeline:
    """Seconds spent in each step of a run (the first from ``start``, when the command began)."""

    def __init__(self, start: float):
        self._last = start
        self._steps: list = []

    def mark(self, step: str) -> None:
        now = time.perf_counter()
        self._steps.append((step, now - self._last))
        self._last = now

    def line(self) -> str:
        return "timeline: " + ", ".join(f"{step} {seconds:.2f} s" for step, seconds in self._steps)


def check_scan_order(hmmdb: str, seqfile: str) -> None:
    """The one-line error of ``hmmgpu scan`` given its files in the other order (earlier
    versions of hmmgpu took the sequences first): ``hmmdb`` is no HMM file and ``seqfile`` is one."""
    from hmmgpu.formats.hmmfile import looks_like_hmm_file

    if looks_like_hmm_file(seqfile) and not looks_like_hmm_file(hmmdb):
        raise InputError(f"{seqfile} is an HMM file and {hmmdb} is not: the two files look swapped (hmmgpu scan "
                         "takes the profile database first, then the sequences, as hmmscan does: "
                         "hmmgpu scan [options] hmmdb seqfile)")


def cmd_scan(args) -> int:
    """Run ``hmmgpu scan``: each query sequence against every model (hmmscan)."""
    from hmmgpu.formats.checks import check_target_lengths
    from hmmgpu.formats.hmmfile import model_lengths
    from hmmgpu.formats.seqformat import sequence_format
    from hmmgpu.report.text import Query, Stopwatch
    from hmmgpu.formats.seqdb import open_database
    from hmmgpu.search.routing import SearchPlan
    from hmmgpu.search.scan import CascadeNarrowing, ProfileDatabase, scan
    from hmmgpu.stages.protocol import CascadeBackend

    options = search_options(args)
    _single_host_postfilter(options, "hmmgpu scan")
    check_scan_order(args.hmmdb, args.seqfile)
    seqformat = sequence_format(args.seqfile, args.seqformat)
    with _run_outputs(args, "scan", args.seqfile, args.hmmdb, "scanning", options) as outputs:
        db = open_database(args.seqfile, seqformat)
        check_target_lengths(db)
        lengths = None if args.hmmdb == "-" else model_lengths(args.hmmdb)
        backend = SearchPlan(options, lengths).backend(db)
        try:
            narrowing = CascadeNarrowing(db, backend, options) if isinstance(backend, CascadeBackend) else None
            if narrowing is not None and lengths:
                backend.prepare_for(lengths)
            database = ProfileDatabase.read(args.hmmdb, each=narrowing.add if narrowing else None)
            survivors = narrowing.survivors() if narrowing else None
        finally:
            backend.close(wait=False)
        threads = "no worker threads" if options.run.cpus == 0 else f"{options.run.threads} threads"
        filters = f"hmmgpu's filters on {backend.description[len('backend '):]}, then " if narrowing else ""
        print(f"# hmmgpu {__version__}: scan of {len(database)} models: {filters}pyhmmer's hmmscan pipeline on the "
              f"CPU ({threads})", file=sys.stderr)
        if db.looks_like_nucleotide():
            print(f"hmmgpu: warning: {args.seqfile} looks like nucleotide sequence; scanning it as protein "
                  "(as hmmscan would)", file=sys.stderr)
        watch = Stopwatch().start()
        for i, hits in scan(db, database, options, narrow=survivors.__getitem__ if survivors else None):
            query = Query(name=db.name(i), accession=db.accession(i) or None, description=db.description(i) or None,
                          length=int(db.lengths[i]))
            outputs.query(query, hits, watch.stop())
            watch = Stopwatch().start()
    return 0


def cmd_makedb(args) -> int:
    """Run ``hmmgpu makedb``: make a database, or check one (``--check DIR``)."""
    from hmmgpu.formats.seqdb import SequenceDB, check_database

    start = time.perf_counter()
    if args.check:
        if args.fasta or args.out or args.tformat:
            raise InputError("makedb --check DIR takes no other argument")
        db = check_database(args.check)
        print(f"{args.check}: {db.n} sequences, {db.total_residues} residues: sizes, offsets, lengths and every "
              f"checksum verified ({time.perf_counter() - start:.2f}s)")
        return 0
    if not (args.fasta and args.out):
        raise InputError("makedb needs a sequence file and an output directory (or --check DIR)")
    from hmmgpu.formats.outfiles import refuse_inputs
    from hmmgpu.formats.seqdb import check_destination

    refuse_inputs({"output directory": args.out}, [args.fasta])
    check_destination(args.out)   # before the input is read
    db = SequenceDB.from_file(args.fasta, args.tformat)
    db.save(args.out)
    print(f"{args.out}: {db.n} sequences, {db.total_residues} residues ({time.perf_counter() - start:.2f}s)")
    return 0


def cmd_audit(args) -> int:
    """Run ``hmmgpu audit``: exit 1 on any disagreement."""
    from hmmgpu.audit import run_audit

    options = SearchOptions.from_kwargs(backend=args.backend, lanes=args.lanes, cpus=args.cpus, device=args.device)
    return 0 if run_audit(args.hmmfile, args.seqdb, options, show=args.show) else 1


def cmd_warmup(args) -> int:
    """Run ``hmmgpu warmup``: write the Python bytecode later runs import
    (:mod:`hmmgpu.bytecode`), then compile every kernel shape for the device (once)."""
    from hmmgpu.search.routing import cuda_available
    from hmmgpu.bytecode import compile_search_imports

    start = time.perf_counter()
    compiled, refused = compile_search_imports()
    print(f"hmmgpu: Python bytecode of {len(compiled)} packages and modules up to date "
          f"({time.perf_counter() - start:.1f}s)" + (f"; {len(refused)} in directories this user cannot write "
                                                     f"(the first: {refused[0]})" if refused else ""), flush=True)
    from hmmgpu.sw.traceback import warm as warm_sw_traceback

    warm_sw_traceback()  # the Smith-Waterman traceback's compiled passes (numba, cached on disk), GPU or not
    from hmmgpu.cpu.own_postfilter import warm as warm_own_postfilter

    start = time.perf_counter()
    warm_own_postfilter()  # --postfilter hmmgpu's CPU references (numba, cached on disk), GPU or not
    print(f"hmmgpu: --postfilter hmmgpu's CPU references compiled or loaded from numba's cache in "
          f"{time.perf_counter() - start:.1f}s", flush=True)
    if not cuda_available(args.device):
        raise DeviceUnavailable(f"warmup: no usable CUDA GPU with id {args.device} (the Python bytecode is written; "
                          "no GPU kernel was compiled)")
    from hmmgpu.gpu.runtime import build
    from hmmgpu.gpu import cascade
    from hmmgpu.gpu.runtime.device import GpuDevice
    from hmmgpu.gpu.sw import launch as sw_launch

    start = time.perf_counter()
    device = GpuDevice.open(args.device)
    n = build.compile_ahead(cascade.all_specs(device, args.lanes) + sw_launch.all_specs(), device)
    print(f"hmmgpu: {n} kernels compiled in {time.perf_counter() - start:.1f}s" if n else
          "hmmgpu: every kernel is already compiled for this device", flush=True)
    from hmmgpu.gpu.domaindef import load_kernels as load_definition_kernels

    start = time.perf_counter()
    n = load_definition_kernels(device)
    print(f"hmmgpu: {n} kernels of --postfilter hmmgpu's domain definition loaded (compiled first where none "
          f"shipped or was cached) in {time.perf_counter() - start:.1f}s")
    return 0


_COMMANDS = {"search": cmd_search, "scan": cmd_scan, "makedb": cmd_makedb, "audit": cmd_audit,
             "warmup": cmd_warmup}


#: Set for the command's process (and its GPU process) unless the user set them: hmmgpu does no
#: linear algebra, and numpy's OpenBLAS otherwise starts a thread per core when numpy is
#: imported (measured: 40 ms of a 0.3 s search on a 2-core machine).
PROCESS_ENVIRONMENT = {"OPENBLAS_NUM_THREADS": "1"}


@stop_on_signals()   # SIGTERM stops a run as Ctrl-C does: outputs removed, one line, exit status 143
def main(argv=None) -> int:
    """Entry point of the ``hmmgpu`` console script. Called without ``argv`` (the process's
    own command line: the console script, ``python -m hmmgpu``), ``hmmgpu sw`` ends the
    process when it is done (:func:`hmmgpu.host.end_process`)."""
    started = time.perf_counter()
    for name, value in PROCESS_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    own_command_line = argv is None
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        parser = build_parser()
        refuse_options_as_values(parser, argv)
        args = parser.parse_args(argv)
        args.command_line = shlex.join(["hmmgpu", *argv])
        args.started = started
        prepare_run(args)
        if args.command == "sw":
            from hmmgpu.sw.cli import run as run_sw

            status = run_sw(args)
            if own_command_line:
                end_process(status)
            return status
        return _COMMANDS[args.command](args)
    except HmmgpuError as e:
        print(f"hmmgpu: error: {e}", file=sys.stderr)
        return ERROR_STATUS
    except BrokenPipeError:   # the reader of the report went away (| head): stop quietly, as HMMER does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as e:
        print(f"hmmgpu: error: {e.filename or ''}: {e.strerror or e}".replace(": :", ":"), file=sys.stderr)
        return ERROR_STATUS
    except KeyboardInterrupt as interrupt:   # Ctrl-C or SIGTERM
        return finish_interrupted(interrupt)


if __name__ == "__main__":
    sys.exit(main())
