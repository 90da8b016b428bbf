"""forward_batches: the Forward parser kernel (the F3 gate's) on mixed batches of many models, as a
search launches it, timed by CUDA events, with a digest of every output to compare two versions
of the kernel bit for bit.

The gate of a search launches the Viterbi-filter survivors of about 70 Pfam models at once (a
batch of ``FWD_GATE_TARGETS`` targets, :mod:`hmmgpu.gpu.cascade`). This script forms such batches
from the first ``--models`` models of a model file and ``--targets`` random non-empty targets of
the proteins per model (seeded: the same targets on every run and machine; the Forward kernel's
work per cell does not depend on whether a target is a homolog), runs each batch ``--repeat``
times on one GPU through :class:`hmmgpu.gpu.fwdback.launch.ForwardStage` (no libhmmer fallback)
and reports, for the last round, the kernel time summed over the batches, its GCUPS (model length
x residues of the targets the kernel ran) and the wall time of the round. The digest is the
SHA-256 of every target's status, flags, final C, score bits and scale factors, in batch order
(with ``--backward`` also both parsers' special-state rows and the Backward parser's status,
flags, own-scales choice, ``totscale`` and score):
two kernels that agree bit for bit print the same digest. With ``--check N`` the first N targets
of every batch are compared with libhmmer's ``p7_ForwardParser`` (score bits).

    python3 benchmarks/forward_batches.py [--models 600] [--targets 240] [--repeat 2] [--check 8]
        [--backward] [--models-file PATH] [--proteins PATH] [--json OUT]
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import header, resolve, save  # noqa: E402


def _models(path: Path, n: int) -> list:
    import pyhmmer

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh, pyhmmer.plan7.HMMFile(fh) as hf:
        out = []
        for hmm in hf:
            out.append(hmm)
            if len(out) == n:
                break
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=int, default=600)
    ap.add_argument("--targets", type=int, default=240, help="random targets per model")
    ap.add_argument("--batch-targets", type=int, default=0, help="targets a batch (default: the gate's)")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--check", type=int, default=0, help="targets a batch compared with libhmmer")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--models-file", default="data:pfam_db/pfam35_sample600.hmm.gz")
    ap.add_argument("--proteins", default="data:seqs/public_proteins.fa.gz")
    ap.add_argument("--backward", action="store_true",
                    help="the Backward parser after the Forward parser, both parsers' rows in the digest")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)

    from hmmgpu.cpu.hmmerlib import HmmerModel
    from hmmgpu.formats.seqdb import SequenceDB
    from hmmgpu.gpu.fwdback.launch import ForwardJob, ForwardStage
    from hmmgpu.gpu.resident import ResidentDatabase
    from hmmgpu.gpu.runtime import tuning
    from hmmgpu.gpu.runtime.device import GpuDevice
    from hmmgpu.stages.forward import ForwardTables

    clock = time.perf_counter()
    db = SequenceDB.from_fasta(resolve(args.proteins))
    hmms = _models(resolve(args.models_file), args.models)
    tables = []
    for hmm in hmms:
        with HmmerModel(hmm) as model:
            tables.append(ForwardTables.from_hmmer(model))
    rng = np.random.default_rng(args.seed)
    nonempty = np.flatnonzero(db.lengths > 0)
    jobs = [ForwardJob(t, np.sort(rng.choice(nonempty, args.targets, replace=False))) for t in tables]
    per_batch = max(1, (args.batch_targets or tuning.FWD_GATE_TARGETS) // args.targets)
    batches = [list(range(k, min(k + per_batch, len(jobs)))) for k in range(0, len(jobs), per_batch)]
    device = GpuDevice.open(0)
    with device.activate():
        stage = ForwardStage(ResidentDatabase(db, device))
    print(f"# data ready in {time.perf_counter() - clock:.1f} s: {len(hmms)} models, {db.n} sequences, "
          f"{len(batches)} batches of {per_batch} models; {device.description}", flush=True)
    report = {}
    for round_ in range(args.repeat):
        clock = time.perf_counter()
        launched = [stage.launch([jobs[m] for m in batch], rows=args.backward, backward=args.backward)
                    for batch in batches]
        results = [b.results() for b in launched]
        wall = time.perf_counter() - clock
        kernel_ms = sum(b.kernel_ms for b in launched)
        cells = sum(b.cells for b in launched)
        digest = hashlib.sha256()
        host = 0
        for batch in results:
            for got in batch:
                host += int(got.host.sum())
                parts = [got.status, got.flags, got.xc, got.scores.view(np.int32)]
                parts += list(got.scales) + list(got.rows or [])
                if got.backward is not None:
                    b = got.backward
                    parts += [b.status, b.flags, b.has_own_scales, b.host, b.totscale.view(np.int32),
                              b.scores.view(np.int32)] + list(b.rows or [])
                for part in parts:
                    digest.update(np.ascontiguousarray(part).tobytes())
        report = dict(round=round_, wall_s=round(wall, 3), kernel_ms=round(kernel_ms, 1), cells=cells,
                      gcups=round(cells / kernel_ms / 1e6, 2) if kernel_ms else None, host_targets=host,
                      digest=digest.hexdigest())
        print("# " + json.dumps(report), flush=True)
    if args.check:
        bad = compared = 0
        for m, got in zip([m for batch in batches for m in batch], [got for answers in results for got in answers]):
            with HmmerModel(hmms[m]) as model:
                for j in range(min(args.check, got.indices.size)):
                    if got.host[j]:
                        continue
                    _, score, _, _ = model.forward_parser(db.codes(int(got.indices[j])))
                    compared += 1
                    bad += int(np.float32(score).view(np.int32) != got.scores[j].view(np.int32))
        report.update(libhmmer_compared=compared, libhmmer_differ=bad)
        print(f"# libhmmer: {compared} scores compared, {bad} differ", flush=True)
    if args.json:
        save(dict(header("forward_batches"), device_description=device.description, segments=tuning.FWD_SEGMENTS,
                  backward=args.backward,
                  models=len(hmms), targets_per_model=args.targets, **report), Path(args.json))
    return 1 if report.get("libhmmer_differ") else 0


if __name__ == "__main__":
    sys.exit(main())
