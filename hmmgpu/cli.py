"""Command line: ``hmmgpu search``, ``hmmgpu makedb``, ``hmmgpu audit``."""
from __future__ import annotations

import argparse
import sys
import time

from . import __version__
from .errors import HmmgpuError


def _text(v) -> str:
    return v.decode(errors="replace") if isinstance(v, (bytes, bytearray)) else str(v)


def _search_options(args) -> dict:
    opts = dict(E=args.E, domE=args.domE, incE=args.incE, incdomE=args.incdomE,
                T=args.T, domT=args.domT, incT=args.incT, incdomT=args.incdomT,
                F1=args.F1, F2=args.F2, F3=args.F3, bias_filter=not args.nobias,
                Z=args.Z, domZ=args.domZ, seed=args.seed)
    if args.max:
        opts.update(F1=1.0, F2=1.0, F3=1.0, bias_filter=False)
    cuts = [name for name, flag in (("gathering", args.cut_ga), ("trusted", args.cut_tc), ("noise", args.cut_nc)) if flag]
    if len(cuts) > 1:
        raise HmmgpuError("choose at most one of --cut_ga, --cut_tc, --cut_nc")
    opts["bit_cutoffs"] = cuts[0] if cuts else None
    return opts


def _add_search_args(p: argparse.ArgumentParser) -> None:
    rep = p.add_argument_group("reporting and inclusion thresholds (as hmmsearch)")
    rep.add_argument("-E", type=float, default=10.0, help="report sequences with E-value <= E")
    rep.add_argument("-T", type=float, default=None, help="report sequences with score >= T")
    rep.add_argument("--domE", type=float, default=10.0)
    rep.add_argument("--domT", type=float, default=None)
    rep.add_argument("--incE", type=float, default=0.01)
    rep.add_argument("--incT", type=float, default=None)
    rep.add_argument("--incdomE", type=float, default=0.01)
    rep.add_argument("--incdomT", type=float, default=None)
    rep.add_argument("--cut_ga", action="store_true", help="use the models' GA gathering cutoffs")
    rep.add_argument("--cut_tc", action="store_true", help="use the models' TC trusted cutoffs")
    rep.add_argument("--cut_nc", action="store_true", help="use the models' NC noise cutoffs")
    acc = p.add_argument_group("acceleration heuristics (as hmmsearch)")
    acc.add_argument("--F1", type=float, default=0.02, help="MSV filter P-value threshold")
    acc.add_argument("--F2", type=float, default=1e-3, help="Viterbi filter P-value threshold")
    acc.add_argument("--F3", type=float, default=1e-5, help="Forward filter P-value threshold")
    acc.add_argument("--nobias", action="store_true", help="turn off the composition bias filter")
    acc.add_argument("--max", action="store_true", help="turn off all filters (F1=F2=F3=1, no bias filter)")
    oth = p.add_argument_group("other")
    oth.add_argument("-Z", type=float, default=None, help="number of comparisons for E-values")
    oth.add_argument("--domZ", type=float, default=None, help="number of significant sequences for domain E-values")
    oth.add_argument("--seed", type=int, default=42, help="random seed of domain definition")
    oth.add_argument("--cpu", type=int, default=None, help="CPU threads for the CPU stages")
    oth.add_argument("--backend", default="auto", choices=["auto", "cuda", "numba", "hmmer"],
                     help="where the filters run (default: cuda if a GPU is found, else hmmer)")
    oth.add_argument("--lanes", default="auto", choices=["auto", "8x4", "16x2"],
                     help="GPU lane layout in 32-bit words (cuda backend)")


def build_parser() -> argparse.ArgumentParser:
    """The ``hmmgpu`` argument parser."""
    parser = argparse.ArgumentParser(prog="hmmgpu", description="HMMER3 protein search with exact answers, GPU-accelerated.")
    parser.add_argument("--version", action="version", version=f"hmmgpu {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    s = sub.add_parser("search", help="search profile HMM(s) against a protein database, like hmmsearch")
    s.add_argument("hmmfile", help="profile HMM file (one or more models)")
    s.add_argument("seqdb", help="protein FASTA (plain or gzip) or a database made by `hmmgpu makedb`")
    s.add_argument("-o", dest="output", default=None, help="write the readable report to this file")
    s.add_argument("--tblout", default=None, help="per-sequence hits table (hmmsearch format)")
    s.add_argument("--domtblout", default=None, help="per-domain hits table (hmmsearch format)")
    s.add_argument("--pfamtblout", default=None, help="Pfam-style hits table (hmmsearch format)")
    _add_search_args(s)

    m = sub.add_parser("makedb", help="digitize a protein FASTA into a memory-mapped database")
    m.add_argument("fasta")
    m.add_argument("out", help="output directory")

    a = sub.add_parser("audit", help="check every filter stage against HMMER's own code, target by target")
    a.add_argument("hmmfile")
    a.add_argument("seqdb")
    a.add_argument("--backend", default="numba", choices=["numba", "cuda"])
    a.add_argument("--lanes", default="auto", choices=["auto", "8x4", "16x2"])
    a.add_argument("--cpu", type=int, default=None)
    a.add_argument("--show", type=int, default=5, help="disagreements to list per stage")
    return parser


def cmd_search(args) -> int:
    """Run ``hmmgpu search``."""
    from rich.progress import Progress

    from .api import Pipeline, read_hmms
    from .fpenv import flush_to_zero
    from .output import format_report, write_table

    hmms = read_hmms(args.hmmfile)
    options = _search_options(args)
    out = open(args.output, "w") if args.output else sys.stdout
    tables = {k: open(getattr(args, k), "wb") for k in ("tblout", "domtblout", "pfamtblout") if getattr(args, k)}
    try:
        with Pipeline(args.seqdb, backend=args.backend, lanes=args.lanes, cpus=args.cpu, ftz=True, **options) as pli:
            print(f"# hmmgpu {__version__}: {pli.notice}", file=sys.stderr)
            if pli.db.looks_like_nucleotide():
                print(f"hmmgpu: warning: {args.seqdb} looks like nucleotide sequence; searching it as protein "
                      "(as hmmsearch would)", file=sys.stderr)
            out.write(f"# query HMM file:                  {args.hmmfile}\n"
                      f"# target sequence database:        {args.seqdb}\n"
                      f"# backend:                         {pli.notice}\n\n")
            start = time.perf_counter()
            with Progress(transient=True, disable=not sys.stderr.isatty()) as bar:
                task = bar.add_task("searching", total=len(hmms))
                for i, (hmm, hits) in enumerate(pli.search_hmms(hmms)):
                    bar.update(task, description=f"searched {_text(hmm.name)}")
                    with flush_to_zero():  # E-values are computed as they are written, as in hmmsearch
                        out.write(format_report(hmm, hits, pli.counts, pli.options))
                        for kind, fh in tables.items():
                            write_table(fh, hits, kind, first=(i == 0))
                    bar.advance(task)
            out.write(f"[ok] {len(hmms)} quer{'y' if len(hmms) == 1 else 'ies'} in {time.perf_counter() - start:.2f}s\n")
    finally:
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

    return 0 if run_audit(args.hmmfile, args.seqdb, backend=args.backend, lanes=args.lanes,
                          cpus=args.cpu, show=args.show) else 1


def main(argv=None) -> int:
    """Entry point of the ``hmmgpu`` console script."""
    args = build_parser().parse_args(argv)
    try:
        return {"search": cmd_search, "makedb": cmd_makedb, "audit": cmd_audit}[args.command](args)
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
