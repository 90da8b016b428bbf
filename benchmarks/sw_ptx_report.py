"""Registers, spills and DPX instruction counts of the Smith-Waterman kernels without a GPU.

Compiles every shape of ``hmmgpu.kernels.tuning.SW_SHAPES`` to PTX for sm_90 (numba's
``compile_ptx`` with a faked device), runs ``ptxas -v`` and, when ``nvdisasm`` is found
(``$NVDISASM`` or on PATH), counts the SASS instructions of the cell loop.
Usage: python benchmarks/sw_ptx_report.py [G,Q ...]
"""
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numba.cuda.cuda_paths as cp

cp._get_nvrtc_path = lambda: cp._env_path_tuple("none", None)
import numba.cuda.cudadrv.nvrtc as nv  # noqa: E402

nv.get_supported_ccs = lambda: ((9, 0),)
from numba import cuda  # noqa: E402
import numba.cuda.dispatcher as _disp  # noqa: E402

_disp.get_current_device = lambda: type("D", (), {"compute_capability": (9, 0)})()

from hmmgpu.kernels import tuning  # noqa: E402
from hmmgpu.kernels.kargs import signature  # noqa: E402
from hmmgpu.kernels.sw.source import ARGS, SwSpec  # noqa: E402


def report(spec: SwSpec, workdir: str) -> str:
    src = spec.source("dpx").replace(f"@cuda.jit({signature(ARGS)!r}, cache=True)", "")
    ns = {}
    exec(compile(src, spec.name, "exec"), ns)
    ptx, _ = cuda.compile_ptx(ns["kernel"], signature(ARGS), cc=(9, 0))
    path = os.path.join(workdir, spec.name + ".ptx")
    with open(path, "w") as fh:
        fh.write(ptx)
    ptxas = os.environ.get("PTXAS", shutil.which("ptxas") or "ptxas")
    p = subprocess.run([ptxas, "-arch=sm_90", "-v", path, "-o", path + ".cubin"], capture_output=True, text=True)
    info = " | ".join(ln.split(":", 1)[-1].strip() for ln in p.stderr.splitlines() if "registers" in ln or "spill" in ln)
    nvdisasm = os.environ.get("NVDISASM", shutil.which("nvdisasm"))
    if nvdisasm and os.path.exists(path + ".cubin"):
        sass = subprocess.run([nvdisasm, path + ".cubin"], capture_output=True, text=True).stdout
        ops = collections.Counter(m.group(1).split(".")[0] for m in re.finditer(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", sass))
        keep = ("VIADDMNMX", "VIMNMX3", "VIMNMX", "VIADD", "PRMT", "LDS", "SHFL", "IADD3", "MOV", "LOP3", "ISETP")
        info += " | SASS " + " ".join(f"{k}={ops[k]}" for k in keep if ops[k]) + f" total={sum(ops.values())}"
    return info


if __name__ == "__main__":
    shapes = [tuple(int(v) for v in a.split(",")) for a in sys.argv[1:]] or list(tuning.SW_SHAPES)
    with tempfile.TemporaryDirectory() as d:
        for G, Q in shapes:
            s = SwSpec(G, Q)
            print(f"G={G:2d} Q={Q:2d} C={s.C:4d} smem={s.table_words * 4}B", report(s, d), flush=True)
