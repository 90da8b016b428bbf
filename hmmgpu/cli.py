"""Command line: ``hmmgpu search``, ``makedb``, ``audit`` and ``warmup``.

The search options, their defaults, choices and help come from
:class:`hmmgpu.options.SearchOptions` (written once there); this module only spells them
as hmmsearch does (``--cut_ga``, ``--nobias``, ``--max``, ``--cpu``) and checks hmmsearch's
option incompatibilities.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import MISSING, fields

from . import __version__
from .errors import HmmgpuError
from .options import GROUPS, SearchOptions, choices

#: Options that ``SearchOptions`` holds but the command line spells otherwise.
_SPECIAL = {"bit_cutoffs", "bias_filter", "null2"}
#: hmmsearch's incompatible option pairs (esl_getopts "incomp" lists), by destination name.
_THRESHOLDS = ("E", "T", "domE", "domT", "incE", "incT", "incdomE", "incdomT")
_INCOMPATIBLE = [("E", "T"), ("domE", "domT"), ("incE", "incT"), ("incdomE", "incdomT")] + \
    [(cut, t) for cut in ("cut_ga", "cut_tc", "cut_nc") for t in _THRESHOLDS] + \
    [("cut_ga", "cut_tc"), ("cut_ga", "cut_nc"), ("cut_tc", "cut_nc")] + \
    [("max", f) for f in ("F1", "F2", "F3", "nobias")]
_SPELLING = {"E": "-E", "T": "-T", "Z": "-Z", "cpus": "--cpu"}


def _spelled(dest: str) -> str:
    return _SPELLING.get(dest, f"--{dest}")


def add_search_options(parser: argparse.ArgumentParser) -> None:
    """hmmsearch's threshold, filter and execution options, from :class:`SearchOptions`."""
    groups = {key: parser.add_argument_group(title) for key, title in GROUPS.items() if key != "output"}
    for f in fields(SearchOptions):
        if f.name in _SPECIAL:
            continue
        meta = f.metadata
        group = groups[meta["group"]]
        kind = {"float": float, "float | None": float, "int": int, "int | None": int}.get(f.type, str)
        opt = choices(f.name)
        default = f.default if f.default is not MISSING else None
        help_text = meta["help"] + (f" (default: {default})" if default not in (None, "") else "")
        group.add_argument(meta["flag"] or f"--{f.name}", dest=f.name, type=kind if not opt else str,
                           choices=opt or None, default=None, metavar=meta.get("metavar"), help=help_text)
    report = groups["report"]
    for tag, what in (("ga", "gathering"), ("tc", "trusted"), ("nc", "noise")):
        report.add_argument(f"--cut_{tag}", action="store_true", help=f"use the models' {what} (--cut_{tag}) cutoffs "
                            "for every threshold")
    groups["filters"].add_argument("--nobias", action="store_true", help="turn off the composition bias filter")
    groups["filters"].add_argument("--max", action="store_true",
                                   help="turn off every filter (F1 = F2 = F3 = 1, no bias filter)")
    groups["other"].add_argument("--nonull2", action="store_true", help="turn off the null2 score correction")


def search_options(args) -> SearchOptions:
    """The :class:`SearchOptions` of parsed arguments (hmmsearch's incompatibilities checked)."""
    given = {f.name for f in fields(SearchOptions) if getattr(args, f.name, None) is not None}
    flags = given | {k for k in ("cut_ga", "cut_tc", "cut_nc", "nobias", "max") if getattr(args, k, False)}
    for a, b in _INCOMPATIBLE:
        if a in flags and b in flags:
            raise HmmgpuError(f"option {_spelled(a)} is incompatible with {_spelled(b)}")
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
    return SearchOptions(**values)


def build_parser() -> argparse.ArgumentParser:
    """The ``hmmgpu`` argument parser."""
    parser = argparse.ArgumentParser(prog="hmmgpu", description="HMMER3 protein search with exact answers, "
                                     "GPU-accelerated.")
    parser.add_argument("--version", action="version", version=f"hmmgpu {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    s = sub.add_parser("search", help="search profile HMM(s) against a protein database, like hmmsearch")
    s.add_argument("hmmfile", help="profile HMM file (one or more models)")
    s.add_argument("seqdb", help="protein FASTA (plain or gzip) or a database made by `hmmgpu makedb`")
    s.add_argument("-o", dest="output", default=None, help="write the readable report to this file")
    s.add_argument("--tblout", default=None, help="per-sequence hits table (hmmsearch format)")
    s.add_argument("--domtblout", default=None, help="per-domain hits table (hmmsearch format)")
    s.add_argument("--pfamtblout", default=None, help="Pfam-style hits table (hmmsearch format)")
    add_search_options(s)

    m = sub.add_parser("makedb", help="digitize a protein FASTA into a memory-mapped database")
    m.add_argument("fasta")
    m.add_argument("out", help="output directory")

    a = sub.add_parser("audit", help="check every filter stage against HMMER's own code, target by target")
    a.add_argument("hmmfile")
    a.add_argument("seqdb")
    a.add_argument("--backend", default="numba", choices=["numba", "cuda"])
    a.add_argument("--lanes", default="auto", choices=choices("lanes"))
    a.add_argument("--cpu", dest="cpus", type=int, default=None)
    a.add_argument("--device", type=int, default=0)
    a.add_argument("--show", type=int, default=5, help="disagreements to list per stage")

    w = sub.add_parser("warmup", help="compile every GPU kernel shape ahead of time (once per device)")
    w.add_argument("--lanes", default="auto", choices=choices("lanes"))
    w.add_argument("--device", type=int, default=0)
    return parser


def _estimated_nodes(path: str) -> float:
    """Sum of model lengths of an HMM file, estimated from its size (text: ~400 bytes a node)."""
    import os

    try:
        size = os.path.getsize(path)
        with open(path, "rb") as fh:
            gz = fh.read(2) == b"\x1f\x8b"
    except OSError:
        return 0.0
    return size / (100.0 if gz else 400.0)


def cmd_search(args) -> int:
    """Run ``hmmgpu search``."""
    from .api import iter_hmms, open_sequences
    from .backends import select_backend
    from .checks import check_target_lengths
    from .engine import SearchEngine
    from .fpenv import flush_to_zero
    from .output import format_report, write_table

    options = search_options(args)
    db = open_sequences(args.seqdb)
    check_target_lengths(db)
    backend = select_backend(options, db, cells=_estimated_nodes(args.hmmfile) * db.total_residues)
    print(f"# hmmgpu {__version__}: {backend.description}", file=sys.stderr)
    if db.looks_like_nucleotide():
        print(f"hmmgpu: warning: {args.seqdb} looks like nucleotide sequence; searching it as protein "
              "(as hmmsearch would)", file=sys.stderr)
    out = open(args.output, "w") if args.output else sys.stdout
    tables = {k: open(getattr(args, k), "wb") for k in ("tblout", "domtblout", "pfamtblout") if getattr(args, k)}
    try:
        engine = SearchEngine(db, options, backend, ftz=True)
        out.write(f"# query HMM file:                  {args.hmmfile}\n"
                  f"# target sequence database:        {args.seqdb}\n"
                  f"# backend:                         {backend.description}\n\n")
        start = time.perf_counter()
        n = 0
        for result in engine.search(iter_hmms(args.hmmfile)):
            with flush_to_zero():  # E-values are computed as they are written, as in hmmsearch
                out.write(format_report(result.hmm, result.hits, result.counts, options))
                for kind, fh in tables.items():
                    write_table(fh, result.hits, kind, first=(n == 0))
            n += 1
        out.write(f"[ok] {n} quer{'y' if n == 1 else 'ies'} in {time.perf_counter() - start:.2f}s\n")
        for line in engine.stats.lines():
            print(f"# hmmgpu: {line}", file=sys.stderr)
    finally:
        backend.close()
        for fh in tables.values():
            fh.close()
        if out is not sys.stdout:
            out.close()
    return 0


def cmd_makedb(args) -> int:
    """Run ``hmmgpu makedb``."""
    from .seqdb import SequenceDB

    start = time.perf_counter()
    db = SequenceDB.from_fasta(args.fasta)
    db.save(args.out)
    print(f"{args.out}: {db.n} sequences, {db.total_residues} residues ({time.perf_counter() - start:.2f}s)")
    return 0


def cmd_audit(args) -> int:
    """Run ``hmmgpu audit``: exit 1 on any disagreement."""
    from .audit import run_audit

    options = SearchOptions(backend=args.backend, lanes=args.lanes, cpus=args.cpus, device=args.device)
    return 0 if run_audit(args.hmmfile, args.seqdb, options, show=args.show) else 1


def cmd_warmup(args) -> int:
    """Run ``hmmgpu warmup``: compile every kernel shape for the device (once)."""
    from .backends import cuda_available
    from .kernels.cascade import compile_all

    if not cuda_available(args.device):
        raise HmmgpuError(f"warmup: no usable CUDA GPU with id {args.device}")
    start = time.perf_counter()
    n = compile_all(args.device, args.lanes)
    print(f"hmmgpu: {n} kernels compiled in {time.perf_counter() - start:.1f}s" if n else
          "hmmgpu: every kernel is already compiled for this device")
    return 0


def main(argv=None) -> int:
    """Entry point of the ``hmmgpu`` console script."""
    args = build_parser().parse_args(argv)
    try:
        return {"search": cmd_search, "makedb": cmd_makedb, "audit": cmd_audit,
                "warmup": cmd_warmup}[args.command](args)
    except HmmgpuError as e:
        print(f"hmmgpu: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"hmmgpu: error: {e.filename or ''}: {e.strerror or e}".replace(": :", ":"), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("hmmgpu: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
