"""kernels: GCUPS of the GPU filter kernels (SSV/MSV and Viterbi) and of the Forward parser
against HMMER's SSE code.

For every model of ``model_sets`` (the 29 Pfam and 24 CUDAMPF models of the shared data;
M = 23..2405) the kernels run on one GPU, timed by CUDA events, second of two runs:

* SSV/MSV (the fused stage, ``MsvStage``) over all of the real proteins (29 M residues);
* the Viterbi filter over all targets of a random sample of them (``sample_residues``) and
  over the MSV survivors of the whole set (the targets the cascade gives it);
* the Forward parser (the F3 gate's kernel, :class:`hmmgpu.gpu.fwdback.launch.ForwardStage`,
  one model's targets in one batch) over the same two sets, and over the sample again with its
  rows in the global scratch array for every model (``all_targets_global``; a search keeps
  them in shared memory where a block's rows fit). Its GCUPS count the cells of the
  targets the kernel ran: those over its cost cap (``FWD_MAX_CELLS``, residues x model length)
  are left to libhmmer in a search and are not timed here (``on_gpu`` says how many ran).

The CPU baseline is HMMER's own ``p7_MSVFilter``, ``p7_ViterbiFilter`` and ``p7_ForwardParser``
(libhmmer from the pyhmmer wheel, through ctypes; the Forward parser with the model configured
to each target's length, as ``p7_Pipeline`` runs it) in ``--threads`` processes on
``cpu_targets`` targets of the sample, timing only those calls; the Viterbi and Forward scores
are compared with the kernels', target by target (the Forward scores' float bits, on the
targets the kernel ran). GCUPS = model length x residues / seconds. Writes
``kernels_<device>_<date>.json`` and ``.png``.

``--ptx`` needs no GPU: numba compiles every SSV/MSV, Viterbi and bias kernel shape to PTX for
sm_90 and ``ptxas -v`` (the CUDA toolkit's) reports registers, spills and shared memory
(``kernels_ptx_<date>.json``).
"""
from __future__ import annotations

import gzip
import io
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from common import WORKLOADS, cores, header, resolve, result_path, save, say, today


def add_arguments(ap) -> None:
    w = WORKLOADS["kernels"]
    ap.add_argument("--threads", type=int, default=cores(), help="processes of the CPU baseline (default: the cores)")
    ap.add_argument("--sample-residues", type=float, default=w["sample_residues"])
    ap.add_argument("--cpu-targets", type=int, default=w["cpu_targets"])
    ap.add_argument("--models", type=int, default=0, help="only the first N models (0: all)")
    ap.add_argument("--ptx", action="store_true", help="registers and spills of every shape, no GPU (needs ptxas)")
    ap.add_argument("--family", default="all", choices=["msv", "vit", "bias", "all"], help="with --ptx")


def _models(n: int = 0) -> list:
    import pyhmmer

    out = []
    for ref in WORKLOADS["kernels"]["model_sets"]:
        folder = resolve(ref)
        for path in sorted(folder.glob("*.hmm.gz")):
            with gzip.open(path, "rb") as fh, pyhmmer.plan7.HMMFile(fh) as hf:
                out.append((folder.name, hf.read()))
    return out[:n] if n else out


def _cpu_worker(text, seqs):
    """One process of the CPU baseline: HMMER's p7_MSVFilter and p7_ViterbiFilter on ``seqs``
    (digital codes), timing only the calls (the model's set-up is left out)."""
    import pyhmmer

    from hmmgpu.cpu.hmmerlib import HmmerModel

    with pyhmmer.plan7.HMMFile(io.BytesIO(text)) as hf:
        hmm = hf.read()
    with HmmerModel(hmm) as ref:
        ref.viterbi_filter(seqs[0])  # the first call allocates the DP matrix
        ref.msv(seqs[0])
        ref.forward_parser(seqs[0])
        start = time.perf_counter()
        for c in seqs:
            ref.msv(c)
        msv_seconds = time.perf_counter() - start
        start = time.perf_counter()
        rows = [ref.viterbi_filter(c) for c in seqs]
        vit_seconds = time.perf_counter() - start
        start = time.perf_counter()
        forward = [ref.forward_parser(c)[:2] for c in seqs]
        fwd_seconds = time.perf_counter() - start
    return rows, msv_seconds, vit_seconds, forward, fwd_seconds


def _cpu_filters(pool, hmm, db, indices, processes):
    """HMMER's filters and Forward parser per target in ``processes`` processes: (Viterbi
    status, Viterbi scores, MSV seconds, Viterbi seconds, Forward status, Forward scores, Forward
    seconds), the seconds being the slowest process's."""
    import numpy as np

    buf = io.BytesIO()
    hmm.write(buf)
    parts = [p for p in np.array_split(np.asarray(indices), processes) if p.size]
    jobs = [pool.submit(_cpu_worker, buf.getvalue(), [db.codes(int(t)) for t in part]) for part in parts]
    results = [j.result() for j in jobs]
    rows = [r for chunk, *_ in results for r in chunk]
    forward = [f for r in results for f in r[3]]
    return (np.array([r[0] for r in rows]), np.array([r[1] for r in rows], np.float32),
            max(r[1] for r in results), max(r[2] for r in results),
            np.array([f[0] for f in forward]), np.array([f[1] for f in forward], np.float32),
            max(r[4] for r in results))


def _kernel_profile(stage, spec) -> dict:
    """Registers, local memory (spills) and SASS instruction counts of one compiled kernel."""
    from hmmgpu.gpu.runtime import build

    try:
        kernel = build.load(spec, stage.device)
        prof = {name: kernel.attribute(name) for name in ("registers", "local_bytes", "shared_static")}
    except Exception as error:  # noqa: BLE001 - numba's simulator has no attributes
        prof = dict(attributes=f"unavailable: {error}")
    try:
        compiled = build.numba_kernel(spec, stage.device.lane_binding)
        sass = compiled.inspect_sass(next(iter(compiled.overloads)))
        for op in ("VIADDMNMX", "VIMNMX3", "VIMNMX", "VIADD", "LDS", "SHFL", "VOTE", "PRMT", "LDL", "STL"):
            prof[op] = sum(line.split()[1].startswith(op) for line in sass.splitlines()
                           if len(line.split()) > 1 and "/*" in line)
    except Exception as error:  # noqa: BLE001 - nvdisasm may be missing
        prof["sass"] = f"unavailable: {error}"
    return prof


def _gcups(M, residues, ms):
    return M * residues / (ms / 1e3) / 1e9 if ms else None


def _forward_row(stage, tables, indices) -> dict:
    """The Forward parser kernel on one model's ``indices`` in one batch (no libhmmer fallback):
    its kernel time (CUDA events) and GCUPS over the cells of the targets it ran."""
    if not indices.size:
        return dict(targets=0, on_gpu=0, cells=0, kernel_ms=0.0, gcups=None)
    got = stage.run(None, indices, tables=tables, fallback=False)
    ms, cells = stage.last["kernel_ms"], int(stage.last["cells"])
    return dict(targets=int(indices.size), on_gpu=int(got.on_gpu.sum()) if got.on_gpu is not None else 0,
                cells=cells, kernel_ms=ms, gcups=cells / ms / 1e6 if ms else None, reason=got.reason)


def run_gpu(args) -> int:
    import numpy as np

    from hmmgpu.cpu.hmmerlib import HmmerModel
    from hmmgpu.formats.seqdb import SequenceDB
    from hmmgpu.gpu.fwdback.launch import STATUS_OK, ForwardStage
    from hmmgpu.gpu.msv.launch import MsvStage
    from hmmgpu.gpu.resident import ResidentDatabase
    from hmmgpu.gpu.runtime import build
    from hmmgpu.gpu.runtime.device import GpuDevice
    from hmmgpu.gpu.vit.launch import VitKernels, VitStage
    from hmmgpu.stages import stats
    from hmmgpu.stages.forward import ForwardTables
    from hmmgpu.stages.profiles import ModelProfile, viterbi_score, xw_move_table

    w = WORKLOADS["kernels"]
    path = result_path(Path(args.out), "kernels")
    t0 = time.perf_counter()
    full = SequenceDB.from_fasta(resolve(w["proteins"]))
    rng = np.random.default_rng(w["seed"])
    order = rng.permutation(full.n)
    take = order[: int(np.searchsorted(np.cumsum(full.lengths[order]), args.sample_residues)) + 1]
    sample = SequenceDB.from_block(full.block(np.sort(take)))
    models = _models(args.models)
    device = GpuDevice.open(0)
    with device.activate():
        res_full = ResidentDatabase(full, device)
        res_sample = ResidentDatabase(sample, device)
    vit_full, vit_sample, msv_full = VitStage(res_full), VitStage(res_sample), MsvStage(res_full)
    fwd_full, fwd_sample = ForwardStage(res_full), ForwardStage(res_sample)
    fwd_global = ForwardStage(res_sample, storage="global")
    specs = sorted({vit_full.kernels.spec(h.M) for _, h in models if vit_full.kernels.spec(h.M)}, key=lambda s: s.Q)
    clock = time.perf_counter()
    compiled = build.compile_ahead(specs + [msv_full.kernels.spec(h.M) for _, h in models], device)
    compile_s = time.perf_counter() - clock
    say(f"data ready in {time.perf_counter() - t0:.1f} s; compiled {compiled} kernels in {compile_s:.1f} s")
    result = header("kernels")
    result.update(device_description=device.description, compile_seconds=compile_s, threads=args.threads,
                  databases=dict(sample=dict(sequences=int(sample.n), residues=int(sample.lengths.sum())),
                                 full=dict(sequences=int(full.n), residues=int(full.total_residues))),
                  msv_lanes=msv_full.lanes, models=[])
    sample_idx = np.flatnonzero(sample.lengths > 0)
    sample_res = int(sample.lengths.sum())
    full_res = int(full.total_residues)
    cpu_idx = sample_idx[rng.permutation(sample_idx.size)[: args.cpu_targets]]
    pool = ProcessPoolExecutor(args.threads, mp_context=multiprocessing.get_context("spawn"))
    for source, hmm in models:
        prof = ModelProfile.from_hmm(hmm)
        M = hmm.M
        row = dict(model=str(hmm.name), source=source, M=M)
        thr = stats.msv_thresholds(prof, full.max_length, w["msv_F1"])
        msv_full.run(prof, thr)  # warm-up (first launch of the shape)
        surv, _, _ = msv_full.run(prof, thr)
        last = msv_full.last
        row["msv"] = dict(spec=last["spec"].name, residues=full_res, kernel_ms=last["kernel_ms"],
                          survivors=int(surv.size), fallback=last["fallback"],
                          gcups=_gcups(M, full_res, last["kernel_ms"]))
        vit_sample.run(prof, sample_idx[:64])  # warm-up
        vit_sample.run(prof, sample_idx)
        last = vit_sample.last
        row.update(spec=last["spec"].name if last["spec"] else None, cpu_reason=last["cpu_reason"],
                   all_targets=dict(targets=int(sample_idx.size), residues=sample_res, kernel_ms=last["kernel_ms"],
                                    uncertain=last["uncertain"], gcups=_gcups(M, sample_res, last["kernel_ms"])))
        vit_full.run(prof, surv)
        vit_full.run(prof, surv)
        last = vit_full.last
        surv_res = int(full.lengths[surv].sum())
        row["msv_survivors"] = dict(targets=int(surv.size), residues=surv_res, kernel_ms=last["kernel_ms"],
                                    uncertain=last["uncertain"], gcups=_gcups(M, surv_res, last["kernel_ms"]))
        with HmmerModel(hmm) as model:
            ftables = ForwardTables.from_hmmer(model)
        fwd_sample.run(None, sample_idx[:64], tables=ftables, fallback=False)  # warm-up
        fwd_global.run(None, sample_idx[:64], tables=ftables, fallback=False)  # warm-up
        row["forward"] = dict(all_targets=_forward_row(fwd_sample, ftables, sample_idx),
                              all_targets_global=_forward_row(fwd_global, ftables, sample_idx),
                              msv_survivors=_forward_row(fwd_full, ftables, surv))
        st, xc = vit_sample.run(prof, cpu_idx)
        fwd = fwd_sample.run(None, cpu_idx, tables=ftables, fallback=False)
        ref_st, ref_sc, msv_s, vit_s, ref_fst, ref_fsc, fwd_s = _cpu_filters(pool, hmm, sample, cpu_idx, args.threads)
        ran = (fwd.status == STATUS_OK) & ~fwd.host
        fwd_same = ran & (ref_fst == STATUS_OK) & (fwd.scores.view(np.int32) == ref_fsc.view(np.int32))
        L = sample.lengths[cpu_idx]
        mine = np.where(st == 16, np.float32(np.inf), viterbi_score(xc, xw_move_table(int(L.max()))[L]))
        same = (mine == ref_sc) | (np.isinf(mine) & np.isinf(ref_sc))
        cpu_res = int(L.sum())
        row["cpu"] = dict(processes=args.threads, targets=int(cpu_idx.size), residues=cpu_res,
                          msv_seconds=msv_s, msv_gcups=M * cpu_res / msv_s / 1e9,
                          vit_seconds=vit_s, vit_gcups=M * cpu_res / vit_s / 1e9,
                          vit_scores_equal_hmmer=int(same.sum()),
                          fwd_seconds=fwd_s, fwd_gcups=M * cpu_res / fwd_s / 1e9,
                          fwd_compared=int(ran.sum()), fwd_scores_equal_hmmer=int(fwd_same.sum()))
        gpu = row["all_targets"]["gcups"]
        row["vit_all_targets_vs_cpu"] = gpu / row["cpu"]["vit_gcups"] if gpu else None
        row["msv_vs_cpu"] = row["msv"]["gcups"] / row["cpu"]["msv_gcups"] if row["msv"]["gcups"] else None
        fgpu = row["forward"]["all_targets"]["gcups"]
        row["fwd_all_targets_vs_cpu"] = fgpu / row["cpu"]["fwd_gcups"] if fgpu else None
        result["models"].append(row)
        save(result, path)
        say(f"{row['model']:>14} M={M:5d}: MSV {row['msv']['gcups'] or 0:7.0f} GCUPS (CPU {row['cpu']['msv_gcups']:6.1f}); "
            f"Viterbi {row['spec']} all {gpu or 0:6.0f}, survivors {row['msv_survivors']['gcups'] or 0:6.0f} "
            f"({surv.size}) GCUPS (CPU {row['cpu']['vit_gcups']:5.1f}); equal {int(same.sum())}/{cpu_idx.size}; "
            f"Forward all {fgpu or 0:6.0f} (rows in global memory "
            f"{row['forward']['all_targets_global']['gcups'] or 0:6.0f}), survivors {row['forward']['msv_survivors']['gcups'] or 0:6.0f} GCUPS "
            f"(CPU {row['cpu']['fwd_gcups']:5.1f}); equal {int(fwd_same.sum())}/{int(ran.sum())}")
    pool.shutdown()
    result["kernel_profiles"] = {s.name: _kernel_profile(vit_full, s) for s in specs}
    result["vit_shapes"] = [s.name for s in VitKernels(device).all_specs()]
    save(result, path)
    _plot(result["models"], path.with_suffix(".png"), device.description)
    bad = [r["model"] for r in result["models"] if r["cpu"]["vit_scores_equal_hmmer"] != r["cpu"]["targets"]
           or r["cpu"]["fwd_scores_equal_hmmer"] != r["cpu"]["fwd_compared"]]
    if bad:
        say(f"Viterbi or Forward scores differ from HMMER's for {bad}")
    say(f"wrote {path}")
    return 1 if bad else 0


def _plot(rows, path, device) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    M = [r["M"] for r in rows]
    ax.scatter(M, [r["msv"]["gcups"] or 0 for r in rows], s=14, label="GPU SSV/MSV, 29 M residues")
    ax.scatter(M, [r["all_targets"]["gcups"] or 0 for r in rows], s=14, label="GPU Viterbi, all targets of the sample")
    ax.scatter(M, [r["msv_survivors"]["gcups"] or 0 for r in rows], s=14, label="GPU Viterbi, MSV survivors")
    ax.scatter(M, [r["cpu"]["msv_gcups"] for r in rows], s=14, marker="x", label="HMMER p7_MSVFilter, CPU processes")
    ax.scatter(M, [r["cpu"]["vit_gcups"] for r in rows], s=14, marker="+", label="HMMER p7_ViterbiFilter, CPU processes")
    ax.scatter(M, [r["forward"]["all_targets"]["gcups"] or 0 for r in rows], s=14, label="GPU Forward parser, all targets of the sample")
    ax.scatter(M, [r["cpu"]["fwd_gcups"] for r in rows], s=14, marker="1", label="HMMER p7_ForwardParser, CPU processes")
    ax.set(xlabel="model length M", ylabel="GCUPS", yscale="log", title=f"filter and Forward kernels, {device}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def run_ptx(args) -> int:
    import ptx

    ptx.fake_device()
    from hmmgpu.gpu.bias import BiasSpec
    from hmmgpu.gpu.msv.source import NX, MsvSpec, row_stride
    from hmmgpu.gpu.runtime import tuning
    from hmmgpu.gpu.vit.source import VitSpec

    specs = []
    if args.family in ("msv", "all"):
        for G, Q in tuning.MSV_16X2:
            placement = "static" if NX * row_stride(G, Q) * 4 <= tuning.STATIC_SHARED_MAX_BYTES else "dynamic"
            specs.append(MsvSpec("ssv", "16x2", G, Q, placement))
    if args.family in ("vit", "all"):
        for Q in tuning.VIT_Q:
            transitions = "registers" if Q <= tuning.VIT_TRANSITIONS_IN_REGISTERS_MAX_Q else "shared"
            words = VitSpec(Q, transitions).shared_words
            specs.append(VitSpec(Q, transitions, "static" if words * 4 <= tuning.STATIC_SHARED_MAX_BYTES else "dynamic"))
    if args.family in ("bias", "all"):
        specs.append(BiasSpec())
    result = header("kernels --ptx")
    result.update(device="ptxas_sm90", kernels={})
    path = Path(args.out) / f"kernels_ptx_{today()}.json"
    for spec in specs:
        line = ptx.ptxas_report(spec)
        result["kernels"][spec.name] = line
        say(spec.name, line)
    save(result, path)
    say(f"wrote {path}")
    return 0


def main(args) -> int:
    return run_ptx(args) if args.ptx else run_gpu(args)
