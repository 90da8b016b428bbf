"""Whether the GPU full-matrix kernels (``hmmgpu.gpu.fwdback.matrix_launch.produce_matrices``)
equal the CPU references (``hmmgpu.cpu.fwdback.forward_matrix``, ``backward_matrix``) on real
data, bit for bit, and how long each takes.

For each model (by default the six of hmmer-domaindef-spec.md §9), the targets are its top
hits among the proteins of the shared data (pyhmmer's hmmsearch, best first, at most
``--max``); the jobs are every clustered region of every target (regions from libhmmer's parser
rows: a multihit Forward matrix each, as the stochastic traces need) and every domain's envelope
of libhmmer's domain definition (unihit Forward and Backward matrices, as envelope rescoring
needs). All jobs of all models are produced on the GPU in batches of ``--batch`` jobs (after a
warm-up batch that compiles the kernels), timed with the summaries' transfer (the matrices stay
on the device), then copied back and compared with the CPU references run one by one (one
thread, timed): cells, special rows, flags, score, totscale, has_own_scales; each envelope's
Forward score also against libhmmer's ``envsc``.

::

    PYTHONPATH=. python3 benchmarks/matrix_check.py --data DIR [--max 100] [--batch 2048] [MODEL ...]

Under numba's simulator (``NUMBA_ENABLE_CUDASIM=1``) use a few small jobs only
(``--max 2 --jobs 4 PF00096``).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from common import best_hits, shared_pfam_model, shared_proteins

DEFAULT_MODELS = ["PF07690", "PF00096", "PF00400", "PF00023", "PF00005", "PF00133"]


def bits(v):
    return np.asarray(v, np.float32).view(np.uint32)


def model_jobs(hmm, codes_list) -> tuple:
    """(jobs, libhmmer's envsc by job index) of one model's targets: every clustered region
    (multihit, Forward alone) and every envelope (unihit, Forward and Backward)."""
    from hmmgpu.cpu.hmmerlib import HmmerModel
    from hmmgpu.gpu.fwdback.matrix_launch import MatrixJob
    from hmmgpu.stages.domaindef import domain_decoding, is_multidomain_region, region_scan
    from hmmgpu.stages.forward import ForwardTables, length_specials

    jobs, envsc = [], {}
    with HmmerModel(hmm) as model:
        tables = ForwardTables.from_hmmer(model)
        for codes in codes_list:
            _, _, fwd_rows, _ = model.forward_parser(codes)
            _, _, bck_rows, _, own = model.backward_parser(codes)
            _, mocc, btot, etot = domain_decoding(fwd_rows, bck_rows, own, length_specials(codes.size)[1])
            jobs += [MatrixJob(tables, codes, i, j) for i, j in region_scan(mocc, btot, etot)
                     if is_multidomain_region(btot, etot, i, j)]
            for d in model.domain_definition(codes)["domains"]:
                envsc[len(jobs)] = d["envsc"]
                jobs.append(MatrixJob(tables, codes, d["ienv"], d["jenv"], unihit=True, backward=True))
    return jobs, envsc


def same(a, b) -> bool:
    """Two MatrixResults equal bit for bit (the reference's diagnostic ANY_TINY flag aside)."""
    from hmmgpu.stages.forward import ANY_TINY

    return (a.flags == b.flags & ~ANY_TINY and np.array_equal(bits(a.matrix.dp), bits(b.matrix.dp))
            and np.array_equal(bits(a.matrix.xmx), bits(b.matrix.xmx))
            and (bits(a.score) == bits(b.score) or (np.isnan(a.score) and np.isnan(b.score)))
            and bits(a.matrix.totscale) == bits(b.matrix.totscale)
            and a.matrix.has_own_scales == b.matrix.has_own_scales)


def main() -> None:
    from hmmgpu.cpu.fwdback import backward_matrix, forward_matrix
    from hmmgpu.gpu.fwdback.matrix_launch import job_bytes, produce_matrices

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--max", type=int, default=100, help="targets per model (its best hits)")
    ap.add_argument("--jobs", type=int, default=0, help="at most this many jobs in all (0: every one)")
    ap.add_argument("--batch", type=int, default=2048, help="jobs a batch")
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("models", nargs="*", default=DEFAULT_MODELS)
    args = ap.parse_args()

    proteins, by_name = shared_proteins(args.data)
    jobs, envsc = [], {}
    for name in args.models:
        hmm = shared_pfam_model(args.data, name)
        codes_list = [codes for _, codes in best_hits(hmm, proteins, by_name, args.max, args.cpus)]
        found, scores = model_jobs(hmm, codes_list)
        print(json.dumps(dict(model=name, M=hmm.M, targets=len(codes_list), jobs=len(found),
                              envelopes=len(scores))), flush=True)
        envsc.update({len(jobs) + k: v for k, v in scores.items()})
        jobs += found
    if args.jobs:
        jobs = jobs[:args.jobs]

    produce_matrices(jobs[:1])  # compiles (or loads) the kernels
    t0 = time.time()
    batches = [produce_matrices(jobs[at:at + args.batch]) for at in range(0, len(jobs), args.batch)]
    gpu_s = time.time() - t0
    t0 = time.time()
    cpu = []
    for job in jobs:
        fwd = forward_matrix(job.tables, job.codes, job.i, job.j, unihit=job.unihit)
        cpu.append((fwd, backward_matrix(job.tables, job.codes, fwd, job.i, job.j, unihit=job.unihit)
                    if job.backward else None))
    cpu_s = time.time() - t0

    c = dict.fromkeys(("jobs", "backward", "cells", "forward_mismatched", "backward_mismatched", "envsc_mismatched",
                       "flagged", "own_scales"), 0)
    k = 0
    for batch in batches:
        for fwd, bck in zip(batch.host_results(), batch.host_results(backward=True)):
            want_f, want_b = cpu[k]
            c["jobs"] += 1
            c["cells"] += want_f.matrix.dp.size
            c["forward_mismatched"] += int(not same(fwd, want_f))
            c["flagged"] += int(bool(want_f.needs_host or (want_b is not None and want_b.needs_host)))
            if k in envsc:
                c["envsc_mismatched"] += int(bits(fwd.score) != bits(envsc[k]))
            if want_b is not None:
                c["backward"] += 1
                c["backward_mismatched"] += int(not same(bck, want_b))
                c["own_scales"] += int(want_b.matrix.has_own_scales)
            k += 1
    print(json.dumps(dict(model="all", gpu_seconds=round(gpu_s, 3), cpu_seconds=round(cpu_s, 3),
                          device_mb=round(sum(job_bytes(job) for job in jobs) / 2 ** 20, 1), **c)), flush=True)


if __name__ == "__main__":
    main()
