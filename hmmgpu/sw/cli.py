"""``hmmgpu sw``: the Smith-Waterman search on the command line.

``add_parser(subparsers)`` adds the command to hmmgpu's parser; ``run(args)`` executes it and
returns the exit status (2 with one ``hmmgpu: error: ...`` line for bad input).
"""
from __future__ import annotations

import argparse
import importlib
import sys
import threading
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

    The order of the start is the GPU's: the device's context (the driver's start-up, 0.3-0.4
    s on the GPU machine) is made in a thread before anything else, and everything that needs
    no device (the imports, the queries, the database) is done while it is made; numba's
    import and the traceback passes load in another thread meanwhile (see
    :data:`SWITCH_INTERVAL`).
    """
    started = getattr(args, "started", None) or time.perf_counter()
    if args.backend != "cpu" and args.devices is None:  # the driver's start-up and the device's context, first
        from hmmgpu.gpu.runtime.context import open_primary_context

        threading.Thread(target=open_primary_context, args=(0 if args.device is None else args.device,),
                         daemon=True).start()
    threading.Thread(target=_warm_tracebacks, daemon=True).start()  # numpy's import in it too, at once
    interval = sys.getswitchinterval()
    sys.setswitchinterval(min(interval, SWITCH_INTERVAL))
    try:
        return _run(args, started)
    finally:
        sys.setswitchinterval(interval)


#: The interpreter's switch interval (seconds) while ``hmmgpu sw`` runs (CPython's default is
#: 0.005). numba's import and the traceback passes' load hold the interpreter's lock for most
#: of a few tenths of a second, in a thread, while the main and scan threads set the GPU up
#: and feed it with short driver calls, each of which lets the lock go (ctypes) and must then
#: wait for it: up to a whole interval each while another thread runs Python, hundreds of
#: calls before the first scores. A shorter interval bounds that wait; a thread alone never
#: switches, so it costs nothing once numba is loaded but the interleaving of the scan
#: thread, the output and the tracebacks' Python, which it also makes finer.
SWITCH_INTERVAL = 0.0002


def _run(args, started: float) -> int:
    """:func:`run`'s work, under the switch interval."""
    import io

    from hmmgpu.formats.outfiles import OutputFiles, refuse_inputs
    from hmmgpu.sw.api import SwParams, SwStats, _read_queries, check_threads

    try:
        check_threads(args.threads)
        refuse_inputs({"-o": args.output}, (args.queries, args.db))
        devices = None if args.devices is None else _devices(args)
        device = devices[0] if devices else 0 if args.device is None else args.device
        if devices is not None and args.backend != "cpu":  # as above, for the first of the devices
            from hmmgpu.gpu.runtime.context import open_primary_context

            threading.Thread(target=open_primary_context, args=(device,), daemon=True).start()
        stats = SwStats()
        stats.started = started
        with OutputFiles() as files:
            out = io.TextIOWrapper(files.open(args.output, "-o"), encoding="utf-8") if args.output else sys.stdout
            t = time.perf_counter()
            queries = _read_queries(args.queries)
            stats.add("reading", time.perf_counter() - t)
            if devices is not None and len(devices) > 1:
                if args.backend != "cpu":
                    _compile_kernels(queries, device, stats)
                from hmmgpu.sw.devices import write_on_devices

                write_on_devices(args, devices, queries, out)
            else:
                SwParams.resolve(args.matrix, args.gapopen, args.gapextend)  # checked and loaded before the wait
                db = _open_database(args.db, args.backend != "cpu", stats)
                if args.backend != "cpu":
                    _compile_kernels(queries, device, stats)
                _search_on_one(args, device, queries, db, out, stats)
        if args.stats:
            stats.wall = time.perf_counter() - started
            for line in stats.lines():
                print(f"# hmmgpu sw: {line}", file=sys.stderr)
    except HmmgpuError as e:
        print(f"hmmgpu: error: {e}", file=sys.stderr)
        return ERROR_STATUS
    except OSError as e:
        print(f"hmmgpu: error: {e.filename or ''}: {e.strerror or e}".replace(": :", ":"), file=sys.stderr)
        return ERROR_STATUS
    return 0


def _warm_tracebacks() -> None:
    """numba's import and the traceback passes' load (:func:`hmmgpu.sw.api._warm_tracebacks`),
    asked for from a thread of their own: :mod:`hmmgpu.sw.api` and numpy are imported there,
    so that numba's import starts as soon as numpy's ends, beside the main thread's."""
    from hmmgpu.sw.api import _warm_tracebacks as warm

    warm()


def _open_database(path, gpu: bool, stats):
    """The database, opened (into arrays: no pyhmmer) before the GPU is waited for; on the
    GPU route the scanner's modules are imported meanwhile too."""
    from hmmgpu.formats.seqdb import open_database

    t = time.perf_counter()
    db = open_database(path, arrays=True)
    stats.add("database", time.perf_counter() - t)
    if gpu:
        from hmmgpu.gpu.runtime.context import cuda_driver_present

        if cuda_driver_present():
            for name in ("concurrent.futures", "hmmgpu.gpu.runtime.driver", "hmmgpu.gpu.resident", "hmmgpu.gpu.pack",
                         "hmmgpu.gpu.sw.launch"):
                importlib.import_module(name)
    return db


def _devices(args) -> tuple:
    """The GPUs ``--devices`` names, checked (one-line errors); ``--device`` with it is refused."""
    from hmmgpu.sw.devices import device_ids

    if args.device is not None:
        raise HmmgpuError("--device and --devices: give one of them (--devices N is --device N)")
    return device_ids(args.devices, args.backend)


def _search_on_one(args, device: int, queries: list, db, out, stats) -> None:
    """The search of ``db`` (opened) on one device (or the CPU), its output written to ``out``
    in query order."""
    from hmmgpu._version import __version__
    from hmmgpu.sw.api import SwSearch, looks_like_nucleotide
    from hmmgpu.sw.output import done_line, format_report, write_tabular

    with SwSearch(db, matrix=args.matrix, gap_open=args.gapopen, gap_extend=args.gapextend,
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

    gpu = GpuDevice.open(device)  # waits for the context the thread makes
    stats.arrived("device")
    t = time.perf_counter()
    stats.count("kernels_compiled", compile_for([q.size for _, q in queries], gpu))
    stats.add("kernels compiled", time.perf_counter() - t)


def main(argv=None) -> int:
    """``python -m hmmgpu.sw ...``: the command without the rest of hmmgpu's parser. Called
    without ``argv`` (the process's own command line), the process ends when the command is
    done (:func:`hmmgpu.host.end_process`)."""
    from hmmgpu.host import end_process, stop_on_signals
    from hmmgpu.preflight import finish_interrupted, prepare_run

    parser = argparse.ArgumentParser(prog="hmmgpu")
    add_parser(parser.add_subparsers(dest="command", required=True))
    with stop_on_signals():
        try:
            args = parser.parse_args(["sw", *(sys.argv[1:] if argv is None else argv)])
            prepare_run(args)
            status = run(args)
        except KeyboardInterrupt as interrupt:
            status = finish_interrupted(interrupt)
    if argv is None:
        end_process(status)  # the process's own command line: the exit's teardown skipped
    return status
