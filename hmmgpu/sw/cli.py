"""``hmmgpu sw``: the Smith-Waterman search on the command line.

``add_parser(subparsers)`` adds the command to hmmgpu's parser; ``run(args)`` executes it and
returns the exit status (2 with one ``hmmgpu: error: ...`` line for bad input).
"""
from __future__ import annotations

import argparse
import gc
import sys
import time

from hmmgpu.errors import ERROR_STATUS, HmmgpuError
from hmmgpu.sw import MATRICES


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``sw`` to an argparse subparsers object; returns its parser."""
    p = subparsers.add_parser("sw", help="Smith-Waterman search of protein queries against a protein database",
                              description="Exact local alignment (affine gaps) of every query against every "
                                          "target, with BLAST-style bit scores and E-values.")
    p.add_argument("queries", help="query proteins (FASTA, plain or gzip)")
    p.add_argument("db", help="target proteins: FASTA (plain or gzip) or a database made by `hmmgpu makedb`")
    p.add_argument("--matrix", default="BLOSUM62", type=str.upper, metavar="NAME",
                   help=f"substitution matrix: {', '.join(MATRICES)} (default BLOSUM62)")
    p.add_argument("--gapopen", type=int, default=11, help="gap open cost (a gap of length k costs open + k*extend)")
    p.add_argument("--gapextend", type=int, default=1, help="gap extension cost")
    p.add_argument("--max-hits", type=int, default=500, dest="max_hits", help="hits reported per query (default 500)")
    p.add_argument("-E", type=float, default=10.0, dest="evalue", help="report hits with E-value <= E (default 10)")
    p.add_argument("--outfmt", type=int, choices=[0, 6], default=0,
                   help="0: readable report with alignments (default); 6: BLAST tabular, 12 standard columns")
    p.add_argument("--alignments", type=int, default=50, help="alignments shown per query in the report")
    p.add_argument("-o", dest="output", default=None,
                   help="write the output to this file (default stdout); it appears when the run is done")
    p.add_argument("--backend", default="auto", choices=["auto", "cuda", "cpu"],
                   help="where the scan runs (default: the GPU if one is found, else pyopal on the CPU)")
    p.add_argument("--device", type=int, default=None, help="CUDA device id (default 0)")
    p.add_argument("--devices", default=None, metavar="all|IDS",
                   help="search on several GPUs at once: all, or their ids (0,2); a process each, the database "
                        "resident on each, output identical to one GPU's")
    p.add_argument("--cpu", type=int, default=None, dest="threads",
                   help="CPU threads: the scan on the CPU route, the tracebacks on both (default: every core)")
    p.add_argument("--stats", action="store_true",
                   help="print where the time went on standard error (lines starting '# hmmgpu sw:')")
    return p


def run(args) -> int:
    """Execute ``hmmgpu sw``; returns the exit status.

    The output (``-o``) is written as ``hmmgpu search`` writes its outputs: to a temporary file
    beside it, renamed into place when every query is done (a failed or interrupted run leaves
    an existing file as it was), and refused when it names an input. The report (``--outfmt
    0``) traces back only the hits whose alignments it shows (``--alignments``); tabular rows
    need every hit's.
    """
    import io
    import threading

    started = getattr(args, "started", None) or time.perf_counter()
    from hmmgpu.formats.outfiles import OutputFiles, refuse_inputs
    from hmmgpu.sw.api import SwStats, _read_queries, _warm_tracebacks, check_threads

    try:
        check_threads(args.threads)
        refuse_inputs({"-o": args.output}, (args.queries, args.db))
        _warm_tracebacks()  # numba's import and the traceback passes' load, in a thread from the start
        devices = None if args.devices is None else _devices(args)
        device = devices[0] if devices else 0 if args.device is None else args.device
        if args.backend != "cpu":  # the driver's start-up and the device's context beside the reading
            from hmmgpu.gpu.runtime.context import open_primary_context

            threading.Thread(target=open_primary_context, args=(device,), daemon=True).start()
        stats = SwStats()
        stats.started = started
        with OutputFiles() as files:
            out = io.TextIOWrapper(files.open(args.output, "-o"), encoding="utf-8") if args.output else sys.stdout
            t = time.perf_counter()
            queries = _read_queries(args.queries)
            stats.add("reading", time.perf_counter() - t)
            if args.backend != "cpu":
                _compile_kernels(queries, device, stats)
            if devices is not None and len(devices) > 1:
                from hmmgpu.sw.devices import write_on_devices

                write_on_devices(args, devices, queries, out)
            else:
                _search_on_one(args, device, queries, out, stats)
        if args.stats:
            stats.wall = time.perf_counter() - started
            for line in stats.lines():
                print(f"# hmmgpu sw: {line}", file=sys.stderr)
        # The command's process ends next. The interpreter's garbage collections at its exit
        # walk every object numba made for the traceback passes (0.3-1 s, longer than some
        # whole searches); frozen, they are left to the process's end, which frees them.
        gc.freeze()
    except HmmgpuError as e:
        print(f"hmmgpu: error: {e}", file=sys.stderr)
        return ERROR_STATUS
    except OSError as e:
        print(f"hmmgpu: error: {e.filename or ''}: {e.strerror or e}".replace(": :", ":"), file=sys.stderr)
        return ERROR_STATUS
    return 0


def _devices(args) -> tuple:
    """The GPUs ``--devices`` names, checked (one-line errors); ``--device`` with it is refused."""
    from hmmgpu.sw.devices import device_ids

    if args.device is not None:
        raise HmmgpuError("--device and --devices: give one of them (--devices N is --device N)")
    return device_ids(args.devices, args.backend)


def _search_on_one(args, device: int, queries: list, out, stats) -> None:
    """The search on one device (or the CPU), its output written to ``out`` in query order."""
    from hmmgpu._version import __version__
    from hmmgpu.sw.api import SwSearch, looks_like_nucleotide
    from hmmgpu.sw.output import done_line, format_report, write_tabular

    with SwSearch(args.db, matrix=args.matrix, gap_open=args.gapopen, gap_extend=args.gapextend,
                  max_hits=args.max_hits, evalue=args.evalue, backend=args.backend, device=device,
                  threads=args.threads, alignments=args.alignments,
                  tracebacks=None if args.outfmt == 6 else max(args.alignments, 0), stats=stats) as s:
        print(f"# hmmgpu {__version__}: {s.notice}", file=sys.stderr)
        for path, nucleotide in ((args.queries, looks_like_nucleotide(queries)),
                                 (args.db, s.db.looks_like_nucleotide())):
            if nucleotide:   # as hmmgpu search warns of its targets
                print(f"hmmgpu: warning: {path} looks like nucleotide sequence; aligning it as protein",
                      file=sys.stderr)
        start = time.perf_counter()
        for hits in s.iter_search(queries):
            t = time.perf_counter()
            if args.outfmt == 6:
                write_tabular(out, hits)
            else:
                out.write(format_report(hits, s.db, s.params, args.alignments))
            out.flush()
            stats.add("formatting", time.perf_counter() - t)
        if args.outfmt != 6:
            out.write(done_line(len(queries), time.perf_counter() - start))
        out.flush()


def _compile_kernels(queries, device: int, stats) -> None:
    """On a GPU, compile the kernels the queries need that the cache lacks (a fresh machine
    without ``hmmgpu warmup``), all at once in parallel processes, before the database's upload
    needs the first of them."""
    from hmmgpu.gpu.runtime.context import cuda_available

    if not cuda_available(device):
        return  # the CPU route ("auto"), or SwSearch reports the missing device ("cuda")
    from hmmgpu.gpu.runtime.device import GpuDevice
    from hmmgpu.gpu.sw.launch import compile_for

    t = time.perf_counter()
    stats.count("kernels_compiled", compile_for([q.size for _, q in queries], GpuDevice.open(device)))
    stats.add("kernels compiled", time.perf_counter() - t)


def main(argv=None) -> int:
    """``python -m hmmgpu.sw ...``: the command without the rest of hmmgpu's parser."""
    from hmmgpu.host import stop_on_signals
    from hmmgpu.preflight import finish_interrupted, prepare_run

    parser = argparse.ArgumentParser(prog="hmmgpu")
    add_parser(parser.add_subparsers(dest="command", required=True))
    with stop_on_signals():
        try:
            args = parser.parse_args(["sw", *(sys.argv[1:] if argv is None else argv)])
            prepare_run(args)
            return run(args)
        except KeyboardInterrupt as interrupt:
            return finish_interrupted(interrupt)
