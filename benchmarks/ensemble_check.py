"""Whether the GPU stochastic-trace ensemble kernel (``hmmgpu.gpu.ensemble``) equals the CPU
reference (``hmmgpu.cpu.stotrace.trace_ensemble``, itself equal to libhmmer's domain
definition: ``benchmarks/domaindef_check.py``) on real data, bit for bit, and how long each
takes.

For each model (by default the six of hmmer-domaindef-spec.md §9), the targets are its top
hits among the 77,801 proteins of the shared data (pyhmmer's hmmsearch, best first, at most
``--max``); every clustered region of every target (regions from libhmmer's parser rows) gets
its multihit Forward matrix from the CPU reference (``hmmgpu.cpu.fwdback.forward_matrix``).
All regions of all models are then sampled in one launch of the kernel (``--batch`` regions a
launch) and one by one by the CPU reference; the script counts mismatches of the sampled pairs,
the null2 sums (``acc`` bits), the draws and the flush-to-zero flag, and of the finished region
results (``n2sc`` bits after glibc's ``logf``, envelopes, flags), the regions the kernel left
to the host (its status), and prints the kernel's wall time (launches with transfers, after a
warm-up launch that compiles) against the CPU reference's (one thread).

::

    PYTHONPATH=. python3 benchmarks/ensemble_check.py --data DIR [--max 250] [--batch N] [--repeat N] [MODEL ...]

Under numba's simulator (``NUMBA_ENABLE_CUDASIM=1``) use a few small regions only
(``--max 5 --regions 6 PF00096``).
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


def clustered_requests(hmm, codes_list):
    """(request, Forward flags) of every clustered region of the targets."""
    from hmmgpu.cpu.fwdback import forward_matrix, special_transitions
    from hmmgpu.cpu.hmmerlib import HmmerModel
    from hmmgpu.gpu.ensemble.launch import RegionRequest
    from hmmgpu.stages.domaindef import domain_decoding, is_multidomain_region, region_scan
    from hmmgpu.stages.forward import ForwardTables, length_specials

    out = []
    with HmmerModel(hmm) as model:
        tables = ForwardTables.from_hmmer(model)
        for codes in codes_list:
            _, _, fwd_rows, _ = model.forward_parser(codes)
            _, _, bck_rows, _, own = model.backward_parser(codes)
            _, mocc, btot, etot = domain_decoding(fwd_rows, bck_rows, own, length_specials(codes.size)[1])
            for i, j in region_scan(mocc, btot, etot):
                if is_multidomain_region(btot, etot, i, j):
                    forward = forward_matrix(tables, codes, i, j)
                    out.append((RegionRequest(matrix=forward.matrix, tables=tables,
                                              xf=special_transitions(tables, codes.size), codes=codes, i=i, j=j),
                                forward.flags))
    return out


def main() -> None:
    from hmmgpu.cpu.domaindef import region_result
    from hmmgpu.cpu.stotrace import OK, trace_ensemble
    from hmmgpu.gpu.ensemble.launch import sample_regions

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--max", type=int, default=250, help="targets per model (its best hits)")
    ap.add_argument("--regions", type=int, default=0, help="at most this many regions in all (0: every one)")
    ap.add_argument("--batch", type=int, default=4096, help="regions a launch")
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1, help="the kernel's launches this many times (the fastest reported)")
    ap.add_argument("--kernel-only", action="store_true", help="no CPU reference, no comparison (for a profiler)")
    ap.add_argument("models", nargs="*", default=DEFAULT_MODELS)
    args = ap.parse_args()

    proteins, by_name = shared_proteins(args.data)
    items = []
    for name in args.models:
        hmm = shared_pfam_model(args.data, name)
        codes_list = [codes for _, codes in best_hits(hmm, proteins, by_name, args.max, args.cpus)]
        found = clustered_requests(hmm, codes_list)
        print(json.dumps(dict(model=name, M=hmm.M, targets=len(codes_list), clustered_regions=len(found))), flush=True)
        items += found
    if args.regions:
        items = items[:args.regions]
    requests = [r for r, _ in items]

    sample_regions(requests[:1])  # compiles (or loads) the kernel, uploads the table of draws
    runs = []
    for _ in range(args.repeat):
        t0 = time.time()
        gpu = []
        for at in range(0, len(requests), args.batch):
            gpu += sample_regions(requests[at:at + args.batch])
        runs.append(time.time() - t0)
    gpu_s = min(runs)
    if args.kernel_only:
        print(json.dumps(dict(model="all", regions=len(requests), gpu_seconds=round(gpu_s, 3),
                              gpu_runs=[round(x, 3) for x in runs])), flush=True)
        return
    t0 = time.time()
    cpu = [trace_ensemble(r.matrix, r.tables, r.xf, r.codes, r.i, r.j) for r in requests]
    cpu_s = time.time() - t0

    c = dict.fromkeys(("regions", "left_to_host", "pairs", "draws", "positions", "ftz_flagged", "pairs_mismatched",
                       "acc_mismatched", "draws_or_flag_mismatched", "results_mismatched"), 0)
    for (request, flags), got, ref in zip(items, gpu, cpu):
        c["regions"] += 1
        c["pairs"] += len(ref.pairs)
        c["draws"] += ref.draws
        c["positions"] += ref.acc.size - 1
        c["ftz_flagged"] += int(ref.ftz_differs)
        if got.status != OK:
            c["left_to_host"] += 1
            continue
        mine = got.ensemble
        c["pairs_mismatched"] += int(mine.pairs.shape != ref.pairs.shape or not np.array_equal(mine.pairs, ref.pairs))
        c["acc_mismatched"] += int(not np.array_equal(bits(mine.acc), bits(ref.acc)))
        c["draws_or_flag_mismatched"] += int((mine.draws, mine.ftz_differs) != (ref.draws, ref.ftz_differs))
        a, b = region_result(mine, flags), region_result(ref, flags)
        c["results_mismatched"] += int(not np.array_equal(bits(a.n2sc), bits(b.n2sc)) or a.flags != b.flags
                                       or not np.array_equal(np.asarray(a.envelopes), np.asarray(b.envelopes)))
    longest = max(range(len(requests)), key=lambda k: requests[k].j - requests[k].i, default=None)
    if longest is not None:   # a launch lasts about as long as its longest region: its residues and draws
        c["longest_region_residues"] = requests[longest].j - requests[longest].i + 1
        c["longest_region_draws"] = cpu[longest].draws
    print(json.dumps(dict(model="all", gpu_seconds=round(gpu_s, 3), gpu_runs=[round(x, 3) for x in runs],
                          cpu_seconds=round(cpu_s, 3), **c)), flush=True)


if __name__ == "__main__":
    main()
