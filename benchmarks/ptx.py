"""Kernel profiles without a GPU: numba compiles a kernel to PTX for sm_90 (a fake device stands
in for the GPU) and the CUDA toolkit's ``ptxas -v`` reports registers, spills and shared memory.

Used by ``run.py kernels --ptx`` (every SSV/MSV, Viterbi and bias shape: :func:`ptxas_report`)
and ``run.py sw --sass`` (the Smith-Waterman cell loop: :func:`sw_report`). For the latter,
when ``nvdisasm`` is found (``$NVDISASM`` or on PATH) the cubin is disassembled and:

* the opcodes of the whole kernel are counted;
* the hot loop, the innermost backward ``BRA`` whose body holds the 16x2 DPX instructions,
  is counted by class (DPX VIADDMNMX/VIMNMX3/VIMNMX/VIADD, PRMT, LDS, SHFL, other integer ALU,
  branches/predicates, memory), per iteration and per cell. One iteration is ``rows`` (the
  unrolled row steps of the source, checked against the SASS: one ``VIMNMX.RELU`` per row and
  column) x ``Q`` columns of a target pair per thread. ``full`` is the kernel as launched,
  whose body includes the boundary-column reads and writes of the middle tiles of a query
  longer than one tile; ``single_tile`` is the same source with ``first`` and ``last`` fixed
  to 1 (a query in one tile: those blocks compiled away);
* H200 throughput bounds are derived (GCUPS over the padded columns, every row valid): issue
  (4 warp-instructions/clk/SM), DPX alone (61.4 lane-ops/clk/SM, ../shared/docs/gpu-notes.md),
  the integer ALU pipe if DPX shares it (an assumption: 64 lane-ops/clk/SM for DPX, PRMT,
  ISETP and the other non-IMAD integer instructions), LDS (one conflict-free 32-bit warp load
  per clk/SM) and SHFL (one warp shuffle per clk/SM); and the resident warps per SM of the
  launch (``tuning.persistent_grid`` with the H200's limits).
"""
from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
import tempfile
from types import SimpleNamespace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hmmgpu.gpu.sw.source import SwSpec

PTXAS = os.environ.get("PTXAS", shutil.which("ptxas") or "ptxas")


def fake_device() -> None:
    """Let numba compile for sm_90 on a machine without a GPU."""
    import numba.cuda.cuda_paths as cp

    cp._get_nvrtc_path = lambda: cp._env_path_tuple("none", None)
    import numba.cuda.cudadrv.nvrtc as nv

    nv.get_supported_ccs = lambda: ((9, 0),)
    import numba.cuda.dispatcher as disp

    disp.get_current_device = lambda: type("Device", (), {"compute_capability": (9, 0)})()


def ptxas_report(spec, binding: str = "dpx") -> str:
    """ptxas's resource line for one kernel spec (after :func:`fake_device`)."""
    from numba import cuda

    source = spec.source(binding)
    lines = source.splitlines()
    sig_line = lines[next(k for k, line in enumerate(lines) if line.startswith("def kernel(")) - 1]  # the kernel's,
    # not a device helper's decorator
    signature = sig_line.split("(", 1)[1].rsplit(", cache=True)", 1)[0]
    namespace = {}
    exec(compile(source.replace(sig_line, "@cuda.jit"), spec.name, "exec"), namespace)
    ptx, _ = cuda.compile_ptx(namespace["kernel"].py_func, eval(signature), cc=(9, 0))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.ptx")
        with open(path, "w") as fh:
            fh.write(ptx)
        out = subprocess.run([PTXAS, "-arch=sm_90", "-v", path, "-o", path + ".cubin"], capture_output=True,
                             text=True)
    lines = [line.split(":", 1)[-1].strip() for line in out.stderr.splitlines()
             if "registers" in line or "spill" in line or "error" in line.lower()]
    return " | ".join(lines) or out.stderr.strip()


# ---------------------------------------------------------------- the Smith-Waterman cell loop

#: H200 (sm_90): SMs, clock (GHz), registers and shared memory per SM, lane-ops per clk per SM.
H200 = dict(sms=132, ghz=1.98, regs_per_sm=65536, max_warps=64, smem_per_sm=233472,
            issue=4 * 32, dpx=61.4, int_pipe=64.0, lds=32, shfl=32)
DPX = ("VIADDMNMX", "VIMNMX3", "VIMNMX", "VIADD")
CONTROL = {"BRA", "BSSY", "BSYNC", "WARPSYNC", "YIELD", "EXIT", "BAR", "ISETP", "PLOP3", "P2R", "R2P",
           "VOTE", "VOTEU", "UISETP", "UPLOP3", "NOP"}
MEMORY = {"LD", "ST", "LDG", "STG", "LDC", "ULDC", "LDL", "STL", "ATOM", "ATOMG", "RED", "ATOMS", "STS"}
INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P[T0-9]+\s+)?([A-Z][A-Za-z0-9_.]*)([^;]*);")
LABEL = re.compile(r"^\s*(\.L_x_\d+):")
TARGET = re.compile(r"`\((\.L_x_\d+)\)")


def opclass(op: str) -> str:
    """Class of one SASS opcode (``VIADD.16x2`` -> ``VIADD``; the 32-bit VIADD/VIMNMX are ALU)."""
    base = op.split(".")[0]
    if base in DPX and "16X2" in op.upper():
        return base
    if base in ("PRMT", "LDS", "SHFL"):
        return base
    if base in CONTROL:
        return "control"
    if base in MEMORY:
        return "memory"
    return "alu"


def on_int_pipe(op: str) -> bool:
    """Whether an opcode counts on the integer ALU pipe of the bound (an assumption: DPX, PRMT,
    ISETP and the other integer ops; not IMAD/MOV (FMA pipe), uniform-datapath ``U*`` ops,
    branches, LDS, SHFL or memory)."""
    base = op.split(".")[0]
    return (opclass(op) in (*DPX, "PRMT") or opclass(op) in ("alu", "control")
            and base not in ("BRA", "BSSY", "BSYNC", "WARPSYNC", "YIELD", "EXIT", "BAR", "NOP")
            and not op.startswith(("IMAD", "MOV", "U", "CS2R", "S2R", "S2UR")))


def parse_sass(text: str):
    """Instructions (index order) as (line, predicate, opcode) and the index each label names."""
    instrs, labels = [], {}
    for line in text.splitlines():
        m = LABEL.match(line)
        if m:
            labels[m.group(1)] = len(instrs)
            continue
        m = INSTR.search(line)
        if m:
            instrs.append((line.rstrip(), (m.group(2) or "").strip(), m.group(3)))
    return instrs, labels


def hot_loop(instrs, labels):
    """(first, last) index of the innermost loop whose body holds VIADDMNMX and VIMNMX3 (16x2).

    A loop is a backward ``BRA`` whose range contains no other backward branch leaving it: this
    drops the jumps back from the out-of-line code of divergent shuffles (``BRA.DIV`` paths)."""
    back = []
    for i, (line, _, op) in enumerate(instrs):
        m = TARGET.search(line) if op == "BRA" else None
        if m and labels.get(m.group(1), i + 1) <= i:
            back.append((labels[m.group(1)], i))
    best = None
    for lo, hi in back:
        body = {opclass(o) for _, _, o in instrs[lo:hi + 1]}
        leaves = any(lo <= j <= hi and t < lo for t, j in back)
        if {"VIADDMNMX", "VIMNMX3"} <= body and not leaves and (best is None or hi - lo < best[1] - best[0]):
            best = (lo, hi)
    return best


def loop_profile(sass: str, spec: SwSpec, rows: int) -> dict:
    """Counts of the hot loop's body: by class, by opcode, per iteration and per cell pair."""
    instrs, labels = parse_sass(sass)
    span = hot_loop(instrs, labels)
    if span is None:
        return {}
    body = instrs[span[0]:span[1] + 1]
    classes = collections.Counter(opclass(op) for _, _, op in body)
    ops = collections.Counter(op for _, _, op in body)
    relu = sum(n for op, n in ops.items() if op.startswith("VIMNMX.") and "RELU" in op)
    pairs = rows * spec.Q
    n = len(body)
    dpx = sum(classes[k] for k in DPX)
    int_pipe = sum(c for op, c in ops.items() if on_int_pipe(op))
    return dict(instructions=n, cell_pairs=pairs, rows=rows, rows_from_sass=relu / spec.Q,
                per_cell_pair=round(n / pairs, 3), dpx=dpx, int_pipe=int_pipe,
                classes={k: classes[k] for k in (*DPX, "PRMT", "LDS", "SHFL", "alu", "control", "memory")},
                per_cell_pair_by_class={k: round(classes[k] / pairs, 3) for k in (*DPX, "PRMT", "LDS", "SHFL", "alu",
                                                                                 "control", "memory")},
                opcodes=dict(ops.most_common()), sass="\n".join(line for line, _, _ in body))


def bounds(loop: dict, regs: int, smem: int, hw=H200) -> dict:
    """H200 throughput bounds (GCUPS over the padded columns) of one loop profile, and occupancy."""
    from hmmgpu.gpu.runtime import tuning

    cells = 32 * 2 * loop["cell_pairs"]  # cells of one warp's iteration (32 threads, 2 targets)
    scale = hw["sms"] * hw["ghz"] * cells / 32  # lane-ops/clk/SM -> GCUPS per instruction per iteration
    out = {name: round(scale * hw[name] / count, 1) for name, count in
           (("issue", loop["instructions"]), ("dpx", loop["dpx"]), ("int_pipe", loop["int_pipe"]),
            ("lds", loop["classes"]["LDS"]), ("shfl", loop["classes"]["SHFL"])) if count}
    kernel = SimpleNamespace(registers=regs, max_threads=1024)
    device = SimpleNamespace(simulator=False, smem_per_sm=hw["smem_per_sm"], sm_count=1)
    blocks, block = tuning.persistent_grid(kernel, device, smem, False)
    out["warps_per_sm"] = blocks * block // 32
    return out


def compile_cubin(spec: SwSpec, workdir: str, single_tile: bool) -> tuple:
    """(cubin path, ptxas -v stderr) of one Smith-Waterman shape; ``single_tile`` fixes first = last = 1."""
    from numba import cuda

    from hmmgpu.gpu.runtime.kargs import signature
    from hmmgpu.gpu.sw.source import ARGS

    src = spec.source("dpx").replace(f"@cuda.jit({signature(ARGS)!r}, cache=True)", "")
    name = spec.name + ("_single_tile" if single_tile else "")
    if single_tile:
        assert src.count("first != 0") and src.count("last == 0")
        src = src.replace("first != 0", "True").replace("last == 0", "False")
    ns = {}
    exec(compile(src, name, "exec"), ns)
    ptx, _ = cuda.compile_ptx(ns["kernel"], signature(ARGS), cc=(9, 0))
    path = os.path.join(workdir, name + ".ptx")
    with open(path, "w") as fh:
        fh.write(ptx)
    p = subprocess.run([PTXAS, "-arch=sm_90", "-v", path, "-o", path + ".cubin"], capture_output=True, text=True)
    return path + ".cubin", p.stderr


def sw_report(spec: SwSpec, workdir: str) -> dict:
    """ptxas figures and (with nvdisasm) SASS counts of one shape."""
    cubin, err = compile_cubin(spec, workdir, False)
    info = " | ".join(ln.split(":", 1)[-1].strip() for ln in err.splitlines() if "registers" in ln or "spill" in ln)
    regs = re.search(r"Used (\d+) registers", err)
    out = dict(G=spec.G, Q=spec.Q, C=spec.C, kernel=spec.name, smem_bytes=spec.table_words * 4,
               registers=int(regs.group(1)) if regs else None, ptxas=info,
               spills=not re.search(r"0 bytes spill stores, 0 bytes spill loads", err))
    nvdisasm = os.environ.get("NVDISASM", shutil.which("nvdisasm"))
    if not (nvdisasm and os.path.exists(cubin)):
        return out
    rows = spec.source("dpx").count("hl = u32(cuda.shfl_up_sync")  # unrolled row steps per iteration
    sass = subprocess.run([nvdisasm, "-c", cubin], capture_output=True, text=True).stdout
    ops = collections.Counter(op.split(".")[0] for _, _, op in parse_sass(sass)[0])
    keep = ("VIADDMNMX", "VIMNMX3", "VIMNMX", "VIADD", "PRMT", "LDS", "SHFL", "IADD3", "MOV", "LOP3", "ISETP")
    out["kernel_opcodes"] = {k: ops[k] for k in keep if ops[k]} | {"total": sum(ops.values())}
    out["loop"] = {"full": loop_profile(sass, spec, rows)}
    cubin1, err1 = compile_cubin(spec, workdir, True)
    out["loop"]["single_tile"] = loop_profile(subprocess.run([nvdisasm, "-c", cubin1], capture_output=True,
                                                             text=True).stdout, spec, rows)
    regs1 = re.search(r"Used (\d+) registers", err1)
    out["loop"]["single_tile"]["registers"] = int(regs1.group(1)) if regs1 else None
    out["bounds_gcups"] = {k: bounds(v, out["registers"], out["smem_bytes"]) for k, v in out["loop"].items() if v}
    return out


def sw_line(r: dict) -> str:
    s = f"G={r['G']:2d} Q={r['Q']:2d} C={r['C']:4d} smem={r['smem_bytes']}B {r['ptxas']}"
    if "kernel_opcodes" in r:
        s += " | SASS " + " ".join(f"{k}={v}" for k, v in r["kernel_opcodes"].items())
        for k, lp in r["loop"].items():
            if lp:
                c, b = lp["classes"], r["bounds_gcups"][k]
                if lp["rows_from_sass"] != lp["rows"]:
                    s += f"\n    WARNING: {lp['rows_from_sass']} rows in the SASS, {lp['rows']} in the source"
                s += (f"\n    loop {k:11s} {lp['instructions']:4d} instr / {lp['cell_pairs']:3d} cell pairs"
                      f" = {lp['per_cell_pair']:5.2f}/pair ({' '.join(f'{n}={c[n]}' for n in c)})"
                      f"\n    {'':16s} bounds GCUPS issue={b['issue']:.0f} dpx={b['dpx']:.0f}"
                      f" int_pipe={b['int_pipe']:.0f} lds={b['lds']:.0f} shfl={b['shfl']:.0f}"
                      f" warps/SM={b['warps_per_sm']}")
    return s
