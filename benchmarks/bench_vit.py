"""Viterbi filter kernel benchmark: GCUPS over the model-length sweep, against HMMER on the CPU.

    python3 benchmarks/bench_vit.py --data DIR --out OUT [--threads 16] [--sample-residues 8e6]

DIR holds ``pfam/*.hmm.gz``, ``cudampf/*.hmm.gz`` and ``seqs/public_proteins.fa.gz``. For
every model the kernel runs (CUDA-event time, second of two runs) on

* *all targets* of a random sample of the real proteins (``--sample-residues``), and
* the *MSV survivors* of the whole 29 M-residue set (the targets the pipeline gives it);

the CPU baseline is HMMER's own ``p7_ViterbiFilter`` (libhmmer from the pyhmmer wheel,
through ctypes) in ``--threads`` processes on ``--cpu-targets`` targets of the sample, timing
only the filter calls, and its scores are compared with the kernel's, target by target.
GCUPS = model length x residues / seconds. Writes ``vit_bench.json`` and ``vit_gcups.png``.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import sys
import time
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from provenance import commit

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def _models(data):
    import pyhmmer

    out = []
    for sub in ("pfam", "cudampf"):
        for path in sorted((data / sub).glob("*.hmm.gz")):
            with gzip.open(path, "rb") as fh, pyhmmer.plan7.HMMFile(fh) as hf:
                out.append((sub, hf.read()))
    return out


def _cpu_worker(text, seqs):
    """One process of the CPU baseline: HMMER's p7_ViterbiFilter on ``seqs`` (digital codes),
    timing only the calls (the model's setup is left out)."""
    import io

    import pyhmmer

    from hmmgpu.cpu.hmmerlib import HmmerModel

    with pyhmmer.plan7.HMMFile(io.BytesIO(text)) as hf:
        hmm = hf.read()
    with HmmerModel(hmm) as ref:
        ref.viterbi_filter(seqs[0])  # first call allocates the DP matrix
        start = time.perf_counter()
        rows = [ref.viterbi_filter(c) for c in seqs]
        seconds = time.perf_counter() - start
    return rows, seconds


def _cpu_viterbi(pool, hmm, db, indices, processes):
    """HMMER's p7_ViterbiFilter per target in ``processes`` processes (no GIL between them):
    (status, scores, seconds), seconds being the slowest process's time in the filter."""
    import io

    buf = io.BytesIO()
    hmm.write(buf)
    parts = [p for p in np.array_split(np.asarray(indices), processes) if p.size]
    jobs = [pool.submit(_cpu_worker, buf.getvalue(), [db.codes(int(t)) for t in part]) for part in parts]
    results = [j.result() for j in jobs]
    rows = [r for chunk, _ in results for r in chunk]
    seconds = max(sec for _, sec in results)
    return np.array([r[0] for r in rows]), np.array([r[1] for r in rows], np.float32), seconds


def _kernel_profile(stage, spec):
    """Registers, local memory (spills) and a DPX/LDS instruction count of one compiled kernel."""
    from hmmgpu.gpu.runtime import build

    kernel = build.load(spec, stage.device)
    prof = {name: kernel.attribute(name) for name in ("registers", "local_bytes", "shared_static")}
    try:
        compiled = build.numba_kernel(spec, stage.device.lane_binding)
        sass = compiled.inspect_sass(next(iter(compiled.overloads)))
        for op in ("VIADDMNMX", "VIMNMX3", "VIMNMX", "VIADD", "LDS", "SHFL", "VOTE", "PRMT", "LDL", "STL"):
            prof[op] = sum(line.split()[1].startswith(op) for line in sass.splitlines()
                           if len(line.split()) > 1 and "/*" in line)
    except Exception as error:  # noqa: BLE001 - nvdisasm may be missing
        prof["sass"] = f"unavailable: {error}"
    return prof


def main() -> None:
    from pathlib import Path

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--sample-residues", type=float, default=8e6)
    ap.add_argument("--cpu-targets", type=int, default=3200)
    ap.add_argument("--models", type=int, default=0, help="only the first N models (0: all)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    import pyhmmer

    from hmmgpu._version import __version__
    from hmmgpu.stages import stats
    from hmmgpu.gpu.runtime import build
    from hmmgpu.gpu.runtime.device import GpuDevice
    from hmmgpu.gpu.msv.launch import MsvStage
    from hmmgpu.gpu.resident import ResidentDatabase
    from hmmgpu.gpu.vit.launch import VitKernels, VitStage
    from hmmgpu.stages.profiles import ModelProfile, viterbi_score, xw_move_table
    from hmmgpu.formats.seqdb import SequenceDB

    t0 = time.perf_counter()
    full = SequenceDB.from_fasta(args.data / "seqs" / "public_proteins.fa.gz")
    rng = np.random.default_rng(1)
    order = rng.permutation(full.n)
    take = order[: int(np.searchsorted(np.cumsum(full.lengths[order]), args.sample_residues)) + 1]
    sample = SequenceDB.from_block(full.block(np.sort(take)))
    models = _models(args.data)
    if args.models:
        models = models[: args.models]
    device = GpuDevice.open(0)
    with device.activate():
        res_full = ResidentDatabase(full, device)
        res_sample = ResidentDatabase(sample, device)
    vit_full, vit_sample = VitStage(res_full), VitStage(res_sample)
    msv_full = MsvStage(res_full)
    specs = sorted({vit_full.kernels.spec(h.M) for _, h in models if vit_full.kernels.spec(h.M)}, key=lambda s: s.Q)
    clock = time.perf_counter()
    compiled = build.compile_ahead(specs + [msv_full.kernels.spec(h.M) for _, h in models], device)
    compile_s = time.perf_counter() - clock
    print(f"data ready in {time.perf_counter() - t0:.1f}s; compiled {compiled} kernels in {compile_s:.1f}s", flush=True)

    sample_idx = np.flatnonzero(sample.lengths > 0)
    sample_res = int(sample.lengths.sum())
    cpu_idx = sample_idx[rng.permutation(sample_idx.size)[: args.cpu_targets]]
    rows = []
    pool = ProcessPoolExecutor(args.threads, mp_context=multiprocessing.get_context("spawn"))
    for source, hmm in models:
        prof = ModelProfile.from_hmm(hmm)
        M = hmm.M
        row = dict(model=str(hmm.name), source=source, M=M)
        vit_sample.run(prof, sample_idx[:64])  # warm-up (first launch of the shape)
        vit_sample.run(prof, sample_idx)
        last = vit_sample.last
        row.update(spec=last["spec"].name if last["spec"] else None, cpu_reason=last["cpu_reason"],
                   all_targets=dict(targets=int(sample_idx.size), residues=sample_res, kernel_ms=last["kernel_ms"],
                                    uncertain=last["uncertain"],
                                    gcups=M * sample_res / (last["kernel_ms"] / 1e3) / 1e9 if last["kernel_ms"] else None))
        thr = stats.msv_thresholds(prof, full.max_length, 0.02)
        surv, _, _ = msv_full.run(prof, thr)
        vit_full.run(prof, surv)
        vit_full.run(prof, surv)
        last = vit_full.last
        surv_res = int(full.lengths[surv].sum())
        row["msv_survivors"] = dict(targets=int(surv.size), residues=surv_res, kernel_ms=last["kernel_ms"],
                                    uncertain=last["uncertain"],
                                    gcups=M * surv_res / (last["kernel_ms"] / 1e3) / 1e9 if last["kernel_ms"] else None)
        st, xc = vit_sample.run(prof, cpu_idx)
        ref_st, ref_sc, cpu_s = _cpu_viterbi(pool, hmm, sample, cpu_idx, args.threads)
        L = sample.lengths[cpu_idx]
        mine = np.where(st == 16, np.float32(np.inf), viterbi_score(xc, xw_move_table(int(L.max()))[L]))
        same = (mine == ref_sc) | (np.isinf(mine) & np.isinf(ref_sc))
        cpu_res = int(L.sum())
        row["cpu"] = dict(threads=args.threads, targets=int(cpu_idx.size), residues=cpu_res, seconds=cpu_s,
                          gcups=M * cpu_res / cpu_s / 1e9, scores_equal_hmmer=int(same.sum()))
        gpu = row["all_targets"]["gcups"]
        row["ratio_all_targets_vs_cpu"] = gpu / row["cpu"]["gcups"] if gpu else None
        rows.append(row)
        print(f"{row['model']:>14} M={M:5d} {row['spec']}: all {gpu or 0:8.0f} GCUPS, survivors "
              f"{row['msv_survivors']['gcups'] or 0:8.0f} GCUPS ({surv.size} targets), CPU {args.threads} threads "
              f"{row['cpu']['gcups']:6.1f} GCUPS, equal {int(same.sum())}/{cpu_idx.size}", flush=True)
    kernels = VitKernels(device)
    profiles = {s.name: _kernel_profile(vit_full, s) for s in specs}
    result = dict(
        benchmark="Viterbi filter kernel", device=device.description, date=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        commit=commit(), command=" ".join(sys.argv), compile_seconds=compile_s,
        versions=dict(hmmgpu=__version__, pyhmmer=pyhmmer.__version__, python=platform.python_version(),
                      numba=__import__("numba").__version__),
        databases=dict(sample=dict(sequences=int(sample.n), residues=sample_res),
                       full=dict(sequences=int(full.n), residues=int(full.total_residues))),
        kernel_profiles=profiles, shapes=[s.name for s in kernels.all_specs()], models=rows)
    with open(args.out / "vit_bench.json", "w") as fh:
        json.dump(result, fh, indent=1)
    _plot(rows, args.out / "vit_gcups.png", device.description)


def _plot(rows, path, device):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    M = [r["M"] for r in rows]
    for key, label in (("all_targets", "all targets (8 M-residue sample)"), ("msv_survivors", "MSV survivors (29 M residues)")):
        ax.scatter(M, [r[key]["gcups"] or 0 for r in rows], s=14, label=f"GPU, {label}")
    ax.scatter(M, [r["cpu"]["gcups"] for r in rows], s=14, marker="x", label="HMMER p7_ViterbiFilter, CPU processes")
    ax.set_xlabel("model length M")
    ax.set_ylabel("GCUPS")
    ax.set_yscale("log")
    ax.set_title(f"Viterbi filter, {device}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
