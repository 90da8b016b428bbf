"""hmmgpu against HMMER's own programs on random models, proteins and options.

What it checks
--------------
Each *case* is drawn from a seed: a few of the 600 Pfam-35 models of the shared data
(``pfam_db/pfam35_sample600.hmm.gz``, sometimes with one of the ``cudampf/`` models, M up to
2,405), a random sample of the 77,801 real proteins (``seqs/public_proteins.fa.gz``), and a
random set of the options users give: reporting and inclusion thresholds (``-E``, ``--domE``,
``-T``, ``--domT``, ``--incE``, ``--incdomE``), the models' cutoffs (``--cut_ga/tc/nc``),
``-Z``, ``--domZ``, the filters (``--max``, ``--F1``/``--F3``, ``--nobias``), ``--nonull2``,
``--seed`` (never 0: HMMER's "one-time arbitrary seed" is not reproducible), ``--acc``,
``--noali``, ``--textw``/``--notextw``. With ``--edits P`` a share P of the cases have some of
their sequences in the forms real files hold (:func:`edited`: lower case, ``*``, rare residues,
long and tiny sequences, runs of X, other line widths, long descriptions, a record twice),
drawn by a generator of their own. hmmgpu reads the targets as the FASTA file, or gzipped, or as
a database made from it by ``hmmgpu makedb``, or from standard input (hmmsearch the FASTA file:
it cannot rewind a gzip file or standard input for a second query), or both programs read it as
an EMBL flat file or a SELEX alignment (``hmmalign``'s, to the case's models), their format guessed. ``hmmsearch --cpu 0`` runs the case and so does
``hmmgpu search`` on every route asked (``--routes``): its report (``-o``), its three tables
and its alignment file (``-A``) must equal hmmsearch's byte for byte, but for the lines that
name the program, a time or the threads (the report's first four lines, ``# CPU time``,
``# Mc/sec``, ``# number of worker threads``, hmmscan's ``# multithread parallelization``,
``#=GF AU``) and the output paths the report's header repeats; both programs must refuse the
same option sets. With ``--scan`` a share of the cases are ``hmmscan`` cases instead: 5-60 of
the Pfam models pressed by ``hmmpress`` as the database, 3-80 proteins as the queries,
``hmmgpu scan`` on the routes asked of ``hmmer``, ``numba`` and ``cuda`` (``scan`` has no
``--postfilter hmmgpu``).

The reference is HMMER's serial run, which hmmgpu's output equals whatever its ``--cpu``: with
worker threads (``--cpu N``, N >= 1) each of hmmsearch's threads tests a target against Z = the
targets that thread has seen so far (``p7_pli_NewSeq``), not the targets before it in the file,
so it may keep more hits that are not reported in the end, and their names can widen the name
columns of its tables and report (docs/exactness.md). Its rows are the serial run's.

This is the check of "hidden data": tests/test_shared_parity.py fixes its cases, this one
draws new ones at every seed.

Routes: ``hmmer`` (pyhmmer's pipeline), ``numba`` (hmmgpu's filters on the CPU), ``own``
(``numba`` with ``--postfilter hmmgpu``: hmmgpu's own post-filter stage on the CPU), ``cuda``
and ``cuda-own`` (the same two on the GPU).

::

    PYTHONPATH=. python3 benchmarks/differential_check.py [--seeds 1:100] [--routes hmmer,numba,own]
        [--scan 0.3] [--keep DIR] [--out FILE.json]

It prints a line a case and the differences found, keeps the files of a failing case under
``--keep`` (default /tmp/hmmgpu-differential), and exits 1 if any case failed.
"""
from __future__ import annotations

import argparse
import gzip
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from common import ROOT, header, plain, save, say, shared_data

ROUTES = {"hmmer": ["--backend", "hmmer"], "numba": ["--backend", "numba"],
          "own": ["--backend", "numba", "--postfilter", "hmmgpu"],
          "cuda": ["--backend", "cuda"], "cuda-own": ["--backend", "cuda", "--postfilter", "hmmgpu"]}
SCAN_ROUTES = ("hmmer", "numba", "cuda")
#: Lines that differ by design: times, the alignment's author line, the threads asked for (the
#: reference is serial, hmmgpu runs with two).
_FREE = re.compile(rb"^#=GF AU |^# (CPU time|Mc/sec|number of worker threads|multithread parallelization):")
_THRESHOLDS = ("-E", "--domE", "-T", "--domT", "--incE", "--incdomE")


class Inputs:
    """The shared models (as text, one a model) and proteins (as FASTA records)."""

    def __init__(self, data: Path):
        text = plain(data / "pfam_db" / "pfam35_sample600.hmm.gz")
        self.models = [b"HMMER3/f" + t for t in text.split(b"HMMER3/f")[1:]]
        self.extra = sorted((data / "cudampf").glob("*.hmm.gz"))
        records = plain(data / "seqs" / "public_proteins.fa.gz").split(b"\n>")
        self.records = [records[0].lstrip(b">")] + records[1:]

    def fasta(self, rng, n: int, edits=None) -> bytes:
        """``n`` records drawn by ``rng``; with ``edits`` (a random generator of its own), about
        a fifth of them changed as :func:`edited` changes them, and one or two made long."""
        records = [r.rstrip(b"\n") for r in rng.sample(self.records, n)]
        if edits is not None:
            long = set(edits.sample(range(n), min(n, edits.randint(1, 2))))
            records = [edited(edits, r, "long") if k in long else edited(edits, r) if edits.random() < 0.2 else r
                       for k, r in enumerate(records)]
        return b"".join(b">" + r + b"\n" for r in records)


#: The ways :func:`edited` changes a record, each a form real sequence files take.
EDITS = ("lowercase", "stop", "rare", "tiny", "xrun", "rewrap", "header", "twice")


def edited(rng, record: bytes, how: str | None = None) -> bytes:
    """A FASTA record (its header line, its sequence lines, no ``>``) in one of the forms of
    :data:`EDITS` (or ``how``): lower case, a final ``*``, rare and degenerate residues (B, J, Z,
    O, U, X), cut to 1-5 residues, a run of X in front, rewrapped at another width, a header
    with a long description, the same record twice (a name repeated), or ``long``: repeated to
    20,000-60,000 residues (beyond the Forward gate's cost cap, so the host finishes it)."""
    header, _, body = record.partition(b"\n")
    seq = body.replace(b"\n", b"")
    how = how or rng.choice(EDITS)
    if how == "lowercase":
        seq = seq.lower()
    elif how == "stop":
        seq += b"*"
    elif how == "rare":
        seq = bytes(c if rng.random() > 0.03 else rng.choice(b"BJZOUX") for c in seq)
    elif how == "long":
        seq = (seq * (rng.randint(20_000, 60_000) // max(len(seq), 1) + 1))[:60_000]
    elif how == "tiny":
        seq = seq[:rng.randint(1, 5)]
    elif how == "xrun":
        seq = b"X" * rng.randint(1, 40) + seq
    elif how == "header":
        header = header.split(b" ")[0] + b" " + b"  ".join([b"word"] * rng.randint(1, 60))
    elif how == "twice":
        return record + b"\n>" + record
    width = rng.choice([30, 60, 80, 200, 100_000]) if how == "rewrap" else 60
    return header + b"\n" + b"\n".join(seq[i:i + width] for i in range(0, len(seq), width))


def embl(fasta: bytes) -> bytes:
    """FASTA records as an EMBL (UniProt) flat file: ``ID`` the name, ``DE`` the description,
    the residues in groups of ten, sixty a line."""
    out = []
    for record in fasta.split(b"\n>"):
        header, _, body = record.lstrip(b">").partition(b"\n")
        name, _, description = header.partition(b" ")
        seq = body.replace(b"\n", b"")
        out.append(b"ID   %s   Reviewed;   %d AA.\n" % (name, len(seq)))
        if description.strip():
            out.append(b"DE   %s\n" % description.strip())
        out.append(b"SQ   SEQUENCE   %d AA;\n" % len(seq))
        for i in range(0, len(seq), 60):
            out.append(b"     " + b" ".join(seq[j:j + 10] for j in range(i, min(i + 60, len(seq)), 10)) + b"\n")
        out.append(b"//\n")
    return b"".join(out)


def draw_options(rng, scan: bool) -> list:
    """A random option set, as a user would give it."""
    opts = []
    for flag, p, values in (("-E", 0.3, ["1", "0.001", "100"]), ("--domE", 0.3, ["1", "1e-5", "50"]),
                            ("-T", 0.0 if scan else 0.15, ["0", "15", "30"]), ("--domT", 0.0 if scan else 0.15, ["0", "10"]),
                            ("--incE", 0.2, ["1e-10", "1"]), ("--incdomE", 0.0 if scan else 0.2, ["1e-10", "1"]),
                            ("-Z", 0.2, ["10", "1000", "5e6"]), ("--domZ", 0.2, ["10", "1e5"])):
        if rng.random() < p:
            opts += [flag, rng.choice(values)]
    if rng.random() < 0.1:  # the models' cutoffs replace the thresholds (hmmsearch refuses both)
        kept = [(a, b) for a, b in zip(opts[::2], opts[1::2]) if a not in _THRESHOLDS]
        opts = [x for pair in kept for x in pair] + [rng.choice(["--cut_ga", "--cut_tc", "--cut_nc"])]
    r = rng.random()
    if r < 0.1:
        opts += ["--max"]
    elif r < 0.25:
        opts += ["--F1", rng.choice(["0.1", "0.005"]), "--F3", rng.choice(["1e-3", "1e-7"])]
    if rng.random() < 0.1 and "--max" not in opts:
        opts += ["--nobias"]
    for flag, p in (("--nonull2", 0.1), ("--acc", 0.2), ("--noali", 0.15)):
        if rng.random() < p:
            opts.append(flag)
    if rng.random() < 0.2:
        opts += ["--seed", rng.choice(["1", "7", "123456"])]
    if not scan and rng.random() < 0.15:
        opts.append(rng.choice(["--notextw", "--textw=150"]))
    return opts


def _body(path: Path, table: bool, other_targets: bool):
    """The lines of an output that must be equal (None: the file is missing): the report's paths
    of this tool's outputs made the same on both sides, and its line naming the targets left out
    where hmmgpu searched another form of hmmsearch's FASTA file (``other_targets``)."""
    if not path.exists():
        return None
    lines = path.read_bytes().splitlines()
    if table:
        return [line for line in lines if not line.startswith(b"#")]
    if path.suffix == ".out":
        lines = lines[4:]  # the program's name, version and licence
    mine = f"/{path.stem}.".encode()
    return [line.replace(mine, b"/X.") for line in lines if not _FREE.match(line)
            and not (other_targets and line.startswith(b"# target sequence database:"))]


def _outputs(d: Path, tag: str, scan: bool) -> list:
    args = ["-o", d / f"{tag}.out", "--tblout", d / f"{tag}.tbl", "--domtblout", d / f"{tag}.dom",
            "--pfamtblout", d / f"{tag}.pfam"] + ([] if scan else ["-A", d / f"{tag}.sto"])
    return [str(a) for a in args]


def run_case(inputs: Inputs, seed: int, routes, scan_share: float, work: Path, edit_share: float = 0.0) -> dict:
    """One case: its description and the differences found. With probability ``edit_share``
    the case's targets (or queries) are partly edited (:func:`edited`), drawn by a generator of
    their own so that the case's other draws are those of the seed without edits."""
    rng = random.Random(seed)
    edit_rng = random.Random(f"edits {seed}")
    edits = edit_rng if edit_rng.random() < edit_share else None
    scan = rng.random() < scan_share
    d = work / f"case{seed}"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    if scan:
        k, n = rng.choice([5, 20, 60]), rng.choice([3, 20, 80])
        models = d / "db.hmm"
        models.write_bytes(b"".join(rng.sample(inputs.models, k)))
        subprocess.run(["hmmpress", "-f", str(models)], capture_output=True, check=True)
        seqs = d / "q.fa"
    else:
        k, n = rng.choice([1, 2, 3, 5, 8]), rng.choice([300, 1000, 3000, 10000])
        text = b"".join(rng.sample(inputs.models, k))
        if inputs.extra and rng.random() < 0.25:
            text += gzip.open(rng.choice(inputs.extra)).read()
        models = d / "m.hmm"
        models.write_bytes(text)
        seqs = d / "s.fa"
    seqs.write_bytes(inputs.fasta(rng, n, edits))
    opts = draw_options(rng, scan)
    program = "scan" if scan else "search"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    targets, form = seqs, "fasta"
    if not scan:  # the targets as users give them: FASTA, gzipped, a made database, standard input
        r = rng.random()
        if r < 0.15:  # hmmsearch reads the plain file: it cannot rewind a gzip file for a second query
            targets, form = d / "s.fa.gz", "gzip"
            targets.write_bytes(gzip.compress(seqs.read_bytes()))
        elif r < 0.35:
            targets, form = d / "db", "made database"
            made = subprocess.run([sys.executable, "-m", "hmmgpu", "makedb", str(seqs), str(targets)],
                                  capture_output=True, env=env)
            if made.returncode != 0:  # then hmmgpu search refuses the missing database, and hmmsearch must refuse the FASTA
                say(f"   makedb refused the targets: {made.stderr.decode(errors='replace').strip()[-200:]}")
        elif r < 0.45:  # standard input, which hmmsearch cannot rewind either
            targets, form = Path("-"), "standard input"
        elif r < 0.52:  # both programs read these, their format guessed
            targets, form = d / "s.embl", "EMBL"
            targets.write_bytes(embl(seqs.read_bytes()))
        elif r < 0.58:
            targets, form = d / "s.slx", "SELEX"
            first = d / "first.hmm"   # hmmalign takes one model
            first.write_bytes(text[:text.index(b"\n//") + 4])
            subprocess.run(["hmmalign", "--outformat", "selex", "-o", str(targets), str(first), str(seqs)],
                           capture_output=True, check=True)
    theirs_targets = targets if form in ("EMBL", "SELEX") else seqs
    ref = subprocess.run([f"hmm{program}", "--cpu", "0", *_outputs(d, "ref", scan), *opts, str(models),
                          str(theirs_targets)], capture_output=True)
    differences = []
    kinds = ("tbl", "dom", "pfam", "out") + (() if scan else ("sto",))
    other = theirs_targets != targets
    theirs = {ext: _body(d / f"ref.{ext}", ext not in ("out", "sto"), other) for ext in kinds} \
        if ref.returncode == 0 else {}
    for route in (r for r in routes if not scan or r in SCAN_ROUTES):
        with open(seqs, "rb") as stdin:
            got = subprocess.run([sys.executable, "-m", "hmmgpu", program, "--cpu", "2", *ROUTES[route],
                                  *_outputs(d, route, scan), *opts, str(models), str(targets)], stdin=stdin,
                                 capture_output=True, env=env)
        if (got.returncode == 0) != (ref.returncode == 0):
            differences.append(f"{route}: exit {got.returncode} against hmm{program}'s {ref.returncode}: "
                               f"{got.stderr.decode(errors='replace')[-300:]!r}")
            continue
        if ref.returncode != 0:
            if b"Traceback" in got.stderr:
                differences.append(f"{route}: a traceback where hmm{program} refused the options")
            continue
        for ext in kinds:
            want, ours = theirs[ext], _body(d / f"{route}.{ext}", ext not in ("out", "sto"), other)
            if want != ours:
                at = next((i for i, (a, b) in enumerate(zip(want or [], ours or [])) if a != b),
                          min(len(want or []), len(ours or [])))
                differences.append(f"{route} {ext}: {len(ours or [])} lines against {len(want or [])}, first "
                                   f"difference at line {at}")
    if not differences:
        shutil.rmtree(d)
    return dict(seed=seed, program=program, models=k, sequences=n, targets=form, edited=edits is not None,
                options=" ".join(opts),
                refused=ref.returncode != 0, differences=differences)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="1:100", help="FIRST:COUNT (default 1:100)")
    ap.add_argument("--routes", default="hmmer,numba,own", help=f"comma-separated, of {', '.join(ROUTES)}")
    ap.add_argument("--scan", type=float, default=0.3, help="the share of hmmscan cases (default 0.3)")
    ap.add_argument("--edits", type=float, default=0.0,
                    help="the share of cases whose sequences are partly edited: lower case, '*', rare residues, "
                         "long, tiny, rewrapped, repeated names (default 0)")
    ap.add_argument("--keep", default="/tmp/hmmgpu-differential", help="where a failing case's files stay")
    ap.add_argument("--out", help="write the summary as JSON here")
    args = ap.parse_args(argv)
    routes = args.routes.split(",")
    unknown = [r for r in routes if r not in ROUTES]
    if unknown:
        ap.error(f"unknown route {unknown[0]}")
    for tool in ("hmmsearch", "hmmscan", "hmmpress"):
        if not shutil.which(tool):
            ap.error(f"{tool} is not on the PATH (pip install hmmer)")
    first, count = (int(x) for x in args.seeds.split(":"))
    inputs = Inputs(shared_data())
    result = dict(header("differential_check"), routes=routes, cases=[])
    failed = 0
    for seed in range(first, first + count):
        start = time.perf_counter()
        case = run_case(inputs, seed, routes, args.scan, Path(args.keep), args.edits)
        case["seconds"] = round(time.perf_counter() - start, 1)
        result["cases"].append(case)
        failed += bool(case["differences"])
        say(f"seed {seed}: hmm{case['program']}, {case['models']} models x {case['sequences']} sequences "
            f"({case['targets']}{', edited' if case['edited'] else ''}), "
            f"{case['options'] or 'defaults'}{' (refused by both)' if case['refused'] else ''}: "
            f"{'DIFFERENT' if case['differences'] else 'equal'} ({case['seconds']} s)")
        for line in case["differences"]:
            say("   ", line)
        if args.out:
            save(dict(result, failed=failed), Path(args.out))
    say(f"{count} cases, {failed} with differences" + (f" (files kept in {args.keep})" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
