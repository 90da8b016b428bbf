"""Compile hmmgpu's kernels for sm_90 without a GPU and report registers, spills and shared memory.

    python3 benchmarks/ptx_report.py [--family msv|vit|bias|all] [--q 1 8 16 ...]

numba compiles each generated kernel to PTX (a fake device stands in for the GPU), then the
CUDA toolkit's ``ptxas -arch=sm_90 -v`` reports what the GPU would run: registers per
thread, spill stores/loads, shared memory. It checks the device typing of every kernel too.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

PTXAS = os.environ.get("PTXAS", "ptxas")


def _fake_device():
    """Let numba compile for sm_90 on a machine without a GPU."""
    import numba.cuda.cuda_paths as cp

    cp._get_nvrtc_path = lambda: cp._env_path_tuple("none", None)
    import numba.cuda.cudadrv.nvrtc as nv

    nv.get_supported_ccs = lambda: ((9, 0),)
    import numba.cuda.dispatcher as disp

    class Device:
        compute_capability = (9, 0)

    disp.get_current_device = lambda: Device()


def report(spec, binding: str = "dpx") -> str:
    """ptxas's resource line for one kernel spec."""
    from numba import cuda

    source = spec.source(binding)
    sig_line = next(line for line in source.splitlines() if line.startswith("@cuda.jit("))
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="all", choices=["msv", "vit", "bias", "all"])
    ap.add_argument("--q", type=int, nargs="*", default=None, help="Viterbi filter Q values (default: all)")
    args = ap.parse_args()
    _fake_device()
    from hmmgpu.gpu.runtime import tuning
    from hmmgpu.gpu.bias import BiasSpec
    from hmmgpu.gpu.msv.source import NX, MsvSpec, row_stride
    from hmmgpu.gpu.vit.source import VitSpec

    if args.family in ("msv", "all"):
        for G, Q in tuning.MSV_16X2:
            placement = "static" if NX * row_stride(G, Q) * 4 <= tuning.STATIC_SHARED_MAX_BYTES else "dynamic"
            spec = MsvSpec("ssv", "16x2", G, Q, placement)
            print(spec.name, report(spec), flush=True)
    if args.family in ("vit", "all"):
        for Q in args.q or tuning.VIT_Q:
            transitions = "registers" if Q <= tuning.VIT_TRANSITIONS_IN_REGISTERS_MAX_Q else "shared"
            words = VitSpec(Q, transitions).shared_words
            spec = VitSpec(Q, transitions, "static" if words * 4 <= tuning.STATIC_SHARED_MAX_BYTES else "dynamic")
            print(spec.name, report(spec), flush=True)
    if args.family in ("bias", "all"):
        print(BiasSpec().name, report(BiasSpec()), flush=True)


if __name__ == "__main__":
    main()
