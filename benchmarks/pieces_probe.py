"""How a FASTA file is cut into pieces for a single model on pyhmmer's route (settings of
``hmmgpu.forward_stage``, e.g. ``PIECE_SHARES=8``), timed against ``hmmsearch --cpu N`` on the
same machine, runs alternating.

    python3 benchmarks/pieces_probe.py --data DATA --out OUT [--settings "PIECE_SHARES=8;PIECE_SHARES=16"]
        [--baseline DIR] [--models PF00005,...]

Each model of DATA/pfam against the real proteins replicated 4x (116 M residues), ``--repeats``
times per setting; the command's wall time, as ``bench_engine.py`` measures it. ``--baseline``:
a directory holding another version of the ``hmmgpu`` package (an earlier commit's), run as
the setting ``baseline``. Writes OUT/pieces_probe.json with date, commit, command and versions.
"""
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def main() -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_engine import Bench, _replicate, bench_arguments

    ap = bench_arguments(__doc__)
    ap.add_argument("--settings", default="PIECE_SHARES=8", help="';'-separated forward_stage settings to compare")
    ap.add_argument("--baseline", type=Path, help="a directory with another version of the hmmgpu package")
    ap.add_argument("--models", default="PF00005,PF07690,PF00873,PF00067")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    bench = Bench(args)
    bench.result["benchmark"] = "pieces of a FASTA file, one model on pyhmmer's route"
    work = bench.work.resolve()
    (work / "p.fa").write_bytes(gzip.decompress((args.data / "seqs" / "public_proteins.fa.gz").read_bytes()))
    x4 = _replicate(work / "p.fa", work / "x4.fa", 4)
    settings = args.settings.split(";") + (["baseline"] if args.baseline else []) + ["hmmsearch"]
    for acc in args.models.split(","):
        hmm = work / f"{acc}.hmm"
        hmm.write_bytes(gzip.decompress((args.data / "pfam" / f"{acc}.hmm.gz").read_bytes()))
        times = bench.result["workloads"].setdefault(acc, {})
        for _ in range(args.repeats):
            for setting in settings:
                env, cwd = None, None
                search = ["search", "--cpu", str(args.threads), "-o", "/dev/null", "--tblout", str(work / "o.tbl"),
                          str(hmm), str(x4)]
                if setting == "hmmsearch":
                    cmd = ["hmmsearch", "--cpu", str(args.threads), "-o", "/dev/null", "--tblout",
                           str(work / "h.tbl"), str(hmm), str(x4)]
                elif setting == "baseline":  # run from its directory: "-m" puts the working directory first
                    cmd = [sys.executable, "-m", "hmmgpu", *search]
                    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(args.baseline.resolve()),
                                                                      os.environ.get("PYTHONPATH", "")]))
                    cwd = args.baseline.resolve()
                else:
                    cmd = [sys.executable, "-c", "import sys; from hmmgpu import forward_stage; "
                           f"forward_stage.{setting}; from hmmgpu.cli import main; sys.exit(main(sys.argv[1:]))",
                           *search]
                start = time.perf_counter()
                subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=cwd)
                times.setdefault(setting, []).append(round(time.perf_counter() - start, 3))
        print(acc, times, flush=True)
        with open(args.out / "pieces_probe.json", "w") as fh:
            json.dump(bench.result, fh, indent=1)


if __name__ == "__main__":
    main()
