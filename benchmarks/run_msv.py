"""GPU SSV/MSV benchmark: kernel and wall GCUPS per model, both lane modes, and the CPU baseline
(pyhmmer's MSV stage in 16 processes, pyhmmer hmmsearch cpus=16, hmmsearch --cpu 16) on the
same machine. GCUPS = M x residues / seconds.

    python benchmarks/run_msv.py --data .bench --out OUTDIR [--models N] [--cpu-models N]

Writes OUTDIR/msv_bench.json and OUTDIR/msv_gcups.png.
"""
from __future__ import annotations

import argparse
import datetime
import glob
import gzip
import json
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


class RepDB:
    """A database replicated ``k`` times (duck-types hmmgpu.seqdb.SequenceDB for the GPU filter)."""

    def __init__(self, db, k):
        self.residues = np.tile(db.residues, k)
        n = db.n
        self.lengths = np.tile(db.lengths, k)
        tot = int(db.residues.size)
        self.offsets = np.concatenate([db.offsets + j * tot for j in range(k)])
        self.order = np.argsort(-self.lengths, kind="stable")
        self.n = n * k
        self.max_length = int(self.lengths.max())
        self.total_residues = int(self.residues.size)


def load_models(data):
    import pyhmmer

    out = []
    for path in sorted(glob.glob(os.path.join(data, "*.hmm.gz"))):
        with gzip.open(path, "rb") as fh, pyhmmer.plan7.HMMFile(fh) as hf:
            for hmm in hf:
                out.append((os.path.basename(path).split(".")[0], hmm))
    out.sort(key=lambda t: t[1].M)
    return out


_CPU = {}


def _cpu_msv_worker(j):
    """One process's share of pyhmmer's MSV stage (p7_MSVFilter, SSV first, om.L per target).
    The database and model come from the parent through fork; returns this worker's seconds."""
    import pyhmmer

    hmm, seqs = _CPU["hmm"], _CPU["parts"][abs(j) - 1]
    if j < 0:
        seqs = seqs[:20]
    abc = hmm.alphabet
    gm = pyhmmer.plan7.Profile(hmm.M, abc)
    gm.configure(hmm, pyhmmer.plan7.Background(abc), 100)
    om = gm.to_optimized()
    t = time.perf_counter()
    for s in seqs:
        om.L = len(s)
        om.msv_filter(s)
    return time.perf_counter() - t


def _write_fasta(db, path):
    alpha = "ACDEFGHIKLMNPQRSTVWY-BJZOUX*~"
    with open(path, "w") as fh:
        for i in range(db.n):
            s = db.residues[db.offsets[i]:db.offsets[i] + db.lengths[i]]
            fh.write(f">s{i}\n" + "".join(alpha[c] for c in s) + "\n")


def _hmmsearch_binary():
    import shutil

    cands = [shutil.which("hmmsearch")]
    try:
        import hmmer

        cands.append(os.path.join(os.path.dirname(hmmer.__file__), "data", "bin", "hmmsearch"))
    except ImportError:
        pass
    cands += [p for p in glob.glob("/tmp/site/bin/hmmsearch")]
    for c in cands:
        if c and os.path.exists(c):
            return c
    return None


def cpu_msv_stage(models, db, nproc):
    """pyhmmer's MSV stage (OptimizedProfile.msv_filter per target, om.L set) in nproc processes
    over the database split in nproc parts (pyhmmer holds the GIL in msv_filter: processes)."""
    import multiprocessing as mp

    bounds = np.linspace(0, db.n, nproc + 1).astype(int)
    seqs = list(db.block())
    _CPU["parts"] = [seqs[bounds[j]:bounds[j + 1]] for j in range(nproc)]
    ctx = mp.get_context("fork")
    res = []
    for name, hmm in models:
        _CPU["hmm"] = hmm
        with ctx.Pool(nproc) as pool:
            pool.map(_cpu_msv_worker, range(-1, -nproc - 1, -1))  # warm-up (process start, imports)
            t = time.perf_counter()
            per = pool.map(_cpu_msv_worker, range(1, nproc + 1))
            t_msv = time.perf_counter() - t
        cells = hmm.M * db.total_residues
        row = dict(model=name, M=hmm.M, residues=db.total_residues, pyhmmer_msv_s=t_msv,
                   pyhmmer_msv_slowest_worker_s=max(per), pyhmmer_msv_gcups=cells / t_msv / 1e9)
        print("CPU", row, flush=True)
        res.append(row)
    return res


def cpu_full_search(models, db, nproc):
    """Full searches: pyhmmer.hmmer.hmmsearch(cpus=nproc) and hmmsearch --cpu nproc (FASTA input)."""
    import io

    import pyhmmer

    fasta = "/tmp/cpu_subset.fa"
    _write_fasta(db, fasta)
    blk = db.block()
    binary = _hmmsearch_binary()
    res = []
    for name, hmm in models:
        t = time.perf_counter()
        hits = list(pyhmmer.hmmer.hmmsearch([hmm], blk, cpus=nproc))
        t_py = time.perf_counter() - t
        buf = io.BytesIO()
        hmm.write(buf)
        with open("/tmp/q.hmm", "wb") as fh:
            fh.write(buf.getvalue())
        cli = None
        if binary:
            t = time.perf_counter()
            subprocess.run([binary, "--cpu", str(nproc), "-o", "/dev/null", "/tmp/q.hmm", fasta], check=True)
            cli = time.perf_counter() - t
        cells = hmm.M * db.total_residues
        row = dict(model=name, M=hmm.M, residues=db.total_residues, hits=len(hits[0]),
                   pyhmmer_hmmsearch_s=t_py, pyhmmer_hmmsearch_gcups=cells / t_py / 1e9,
                   hmmsearch_cli=binary, hmmsearch_cli_s=cli, hmmsearch_cli_gcups=(cells / cli / 1e9) if cli else None)
        print("CPU", row, flush=True)
        res.append(row)
    return res


def sass_report(f, M, out):
    """Registers, local memory and SASS instruction mix of the kernels for a model of M nodes."""
    from hmmgpu.kernels import codegen

    lines = []
    for spec in f.specs(M)[:2]:
        k = codegen.load(spec)
        regs = k.get_regs_per_thread()
        lmem = k.get_local_mem_per_thread()
        try:
            sass = k.inspect_sass()
            if isinstance(sass, dict):
                sass = "\n".join(sass.values())
        except Exception as e:  # noqa: BLE001
            sass = f"(inspect_sass failed: {e})"
        mix = {}
        for ln in sass.splitlines():
            ln = ln.strip()
            if not ln.startswith("/*") or "*/" not in ln:
                continue
            body = ln.split("*/", 1)[1].strip()
            if not body or body.startswith("/*"):
                continue
            tok = body.split()[0]
            if tok.startswith("@"):
                tok = body.split()[1] if len(body.split()) > 1 else tok
            op = tok.split(".")[0].rstrip(";")
            if op.isalnum() and op[0].isalpha():
                mix[op] = mix.get(op, 0) + 1
        top = sorted(mix.items(), key=lambda t: -t[1])[:25]
        lines.append(f"== {spec.name}: regs={regs} local_mem={lmem}\n   mix: {top}")
        with open(os.path.join(out, "sass.txt"), "a") as fh:
            fh.write(f"\n\n==== {spec.name} regs={regs} local={lmem}\n{sass}")
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=".bench")
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--replicate", type=int, default=4)
    ap.add_argument("--models", default="all", help="'all' or comma list of model names")
    ap.add_argument("--lanes", default="16x2,8x4")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cpu-models", default="", help="comma list of model names for the CPU baseline")
    ap.add_argument("--cpu-every", type=int, default=8, help="CPU MSV baseline on every k-th sequence")
    ap.add_argument("--cpu-full-models", default="", help="models for the full-search CPU baselines")
    ap.add_argument("--cpu-full-every", type=int, default=32, help="full-search baselines on every k-th sequence")
    ap.add_argument("--nproc", type=int, default=16)
    ap.add_argument("--no-force", action="store_true")
    ap.add_argument("--sass", default="", help="comma list of M values for the SASS report")
    ap.add_argument("--variants", default="", help="launch shapes to try, e.g. 128x16,256x8 (block x blocks/SM)")
    ap.add_argument("--variant-models", default="", help="models for --variants")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    from numba import cuda

    import pyhmmer
    from hmmgpu.kernels import GpuMsvFilter, codegen, device_description
    from hmmgpu.pipeline import msv_thresholds
    from hmmgpu.profiles import ModelProfile
    from hmmgpu.seqdb import SequenceDB

    t0 = time.time()
    fa = os.path.join(a.data, "public_proteins.fa.gz")
    base = SequenceDB.from_fasta(fa)
    db = RepDB(base, a.replicate)
    print(f"db: {db.n} seqs, {db.total_residues} residues, read in {time.time() - t0:.1f}s", flush=True)
    models = load_models(a.data)
    if a.models != "all":
        keep = set(a.models.split(","))
        models = [m for m in models if m[0] in keep]
    profs = [(name, hmm, ModelProfile.from_hmm(hmm)) for name, hmm in models]
    info = dict(device=device_description(), date=datetime.datetime.now(datetime.timezone.utc).isoformat(),
                commit=os.environ.get("HMMGPU_COMMIT", "unknown"), command=" ".join(sys.argv),
                versions=dict(numba=__import__("numba").__version__,
                              numba_cuda=__import__("numba_cuda").__version__ if _has("numba_cuda") else None,
                              numpy=np.__version__, pyhmmer=pyhmmer.__version__, python=sys.version.split()[0]),
                database=dict(source="public_proteins.fa.gz", replicate=a.replicate, sequences=db.n,
                              residues=db.total_residues),
                gcups="M x residues / seconds; kernel = CUDA-event time of the kernels; wall = run() "
                      "including table upload, survivor compaction and D2H")
    results = []
    sass_lines = []
    for lanes in a.lanes.split(","):
        tu = time.time()
        f = GpuMsvFilter(db, lanes=lanes)
        print(f"[{lanes}] upload {time.time() - tu:.2f}s chunks={f.ddb.n_chunks}", flush=True)
        tc = time.time()
        specs = []
        for _, _, p in profs:
            s = f.specs(p.M)
            specs += [s[0], s[1]]
        codegen.warm(specs, processes=a.nproc)
        print(f"[{lanes}] compiled {len(set(specs))} kernels in {time.time() - tc:.1f}s", flush=True)
        for name, hmm, prof in profs:
            thr = msv_thresholds(prof, db.max_length, 0.02)
            row = dict(model=name, M=prof.M, lanes=lanes)
            f.run(prof.byte, thr)  # warm-up
            ks, km, walls = [], [], []
            for _ in range(a.reps):
                t = time.perf_counter()
                idx, st, xj = f.run(prof.byte, thr)
                walls.append(time.perf_counter() - t)
                ks.append(f.last["kernel_ms"]["ssv"])
                km.append(f.last["gpu_ms"])
            cells = prof.M * db.total_residues
            row.update(G=f.last["G"], Q=f.last["Q"], shared=f.last["shared"], grid=f.last["grid"],
                       block=f.last["block"], survivors=int(idx.size),
                       n_msv=f.last["n_msv"], ssv_kernel_ms=float(np.median(ks)), stage_kernel_ms=float(np.median(km)),
                       wall_ms=float(np.median(walls)) * 1e3,
                       ssv_kernel_gcups=cells / (np.median(ks) / 1e3) / 1e9,
                       stage_kernel_gcups=cells / (np.median(km) / 1e3) / 1e9,
                       wall_gcups=cells / np.median(walls) / 1e9)
            if not a.no_force:
                f.run(prof.byte, thr, force_msv=True)
                t = time.perf_counter()
                f.run(prof.byte, thr, force_msv=True)
                wf = time.perf_counter() - t
                row.update(msv_kernel_ms=f.last["gpu_ms"], msv_kernel_gcups=cells / (f.last["gpu_ms"] / 1e3) / 1e9,
                           msv_wall_gcups=cells / wf / 1e9, msv_fallback=f.last["n_fallback"])
            print(json.dumps({k: (round(v, 2) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)
            results.append(row)
        for Ms in [int(x) for x in a.sass.split(",") if x]:
            try:
                sass_lines += sass_report(f, Ms, a.out)
            except Exception as e:  # noqa: BLE001
                print("sass report failed:", e)
        vm = set(a.variant_models.split(","))
        for var in [v for v in a.variants.split(",") if v]:
            f.block, f.blocks_per_sm, f.min_q, f._shape = None, None, None, {}
            if var.startswith("q"):
                f.min_q = int(var[1:])
            else:
                f.block, f.blocks_per_sm = (int(x) for x in var.split("x"))
            for name, hmm, prof in profs:
                if name not in vm:
                    continue
                f.run(prof.byte, None)
                ks = []
                for _ in range(a.reps):
                    f.run(prof.byte, None)
                    ks.append(f.last["kernel_ms"]["ssv"])
                cells = prof.M * db.total_residues
                row = dict(variant=var, model=name, M=prof.M, lanes=lanes, G=f.last["G"], Q=f.last["Q"],
                           grid=f.last["grid"], block=f.last["block"], ssv_kernel_ms=float(np.median(ks)),
                           ssv_kernel_gcups=cells / (np.median(ks) / 1e3) / 1e9)
                print("VARIANT", json.dumps(row), flush=True)
                info.setdefault("variants", []).append(row)
        f.block, f.blocks_per_sm, f.min_q, f._shape = None, None, None, {}
        f.close()
    for ln in sass_lines:
        print(ln)
    if a.cpu_models:
        keep = a.cpu_models.split(",")
        sub = SequenceDB.from_block(base.block(np.arange(0, base.n, a.cpu_every)))
        rows = cpu_msv_stage([(n, h) for n, h, _ in profs if n in keep], sub, a.nproc)
        info["cpu_msv_stage"] = dict(subset=f"every {a.cpu_every}th sequence of public_proteins", sequences=sub.n,
                                     residues=sub.total_residues, processes=a.nproc, results=rows)
    if a.cpu_full_models:
        keep = a.cpu_full_models.split(",")
        sub = SequenceDB.from_block(base.block(np.arange(0, base.n, a.cpu_full_every)))
        rows = cpu_full_search([(n, h) for n, h, _ in profs if n in keep], sub, a.nproc)
        info["cpu_full_search"] = dict(subset=f"every {a.cpu_full_every}th sequence of public_proteins",
                                       sequences=sub.n, residues=sub.total_residues, threads=a.nproc, results=rows)
    info["gpu"] = results
    info["elapsed_s"] = time.time() - t0
    with open(os.path.join(a.out, "msv_bench.json"), "w") as fh:
        json.dump(info, fh, indent=1)
    try:
        plot(info, os.path.join(a.out, "msv_gcups.png"))
    except Exception as e:  # noqa: BLE001
        print("plot failed:", e)
    print(f"done in {time.time() - t0:.1f}s")


def _has(mod):
    try:
        __import__(mod)
        return True
    except ImportError:
        return False


def plot(info, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.5))
    for lanes, mk in (("16x2", "o"), ("8x4", "s")):
        rows = sorted([r for r in info["gpu"] if r["lanes"] == lanes], key=lambda r: r["M"])
        if not rows:
            continue
        M = [r["M"] for r in rows]
        ax.plot(M, [r["ssv_kernel_gcups"] for r in rows], mk + "-", label=f"SSV kernel {lanes}")
        ax.plot(M, [r["wall_gcups"] for r in rows], mk + ":", label=f"SSV+MSV stage wall {lanes}")
        if "msv_kernel_gcups" in rows[0]:
            ax.plot(M, [r["msv_kernel_gcups"] for r in rows], mk + "--", label=f"J-state MSV kernel {lanes}")
    cpu = sorted(info.get("cpu_msv_stage", {}).get("results", []), key=lambda r: r["M"])
    if cpu:
        ax.plot([r["M"] for r in cpu], [r["pyhmmer_msv_gcups"] for r in cpu], "k^-", label="CPU: pyhmmer MSV stage, 16 procs")
    full = sorted(info.get("cpu_full_search", {}).get("results", []), key=lambda r: r["M"])
    if full:
        ax.plot([r["M"] for r in full], [r["hmmsearch_cli_gcups"] or np.nan for r in full], "kv:",
                label="CPU: hmmsearch --cpu 16 (full search)")
        ax.plot([r["M"] for r in full], [r["pyhmmer_hmmsearch_gcups"] for r in full], "k<:",
                label="CPU: pyhmmer hmmsearch cpus=16 (full search)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("model length M")
    ax.set_ylabel("GCUPS")
    ax.set_title(f"SSV/MSV on {info['device']}, {info['database']['residues'] / 1e6:.0f} M residues")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
