"""Compile generated kernels to PTX on a machine without a GPU (CUDA toolkit present) and run
``ptxas -v`` for registers / spills. Usage: python benchmarks/ptx_report.py [M ...]"""
import os
import subprocess
import sys

import numba.cuda.cuda_paths as cp

cp._get_nvrtc_path = lambda: cp._env_path_tuple("none", None)
import numba.cuda.cudadrv.nvrtc as nv  # noqa: E402

nv.get_supported_ccs = lambda: ((9, 0),)
from numba import cuda  # noqa: E402
import numba.cuda.dispatcher as _disp  # noqa: E402


class _FakeDev:
    compute_capability = (9, 0)


if os.environ.get("HMMGPU_FAKE_DEVICE", "1") == "1":
    _disp.get_current_device = lambda: _FakeDev()

from hmmgpu.kernels import codegen  # noqa: E402
from hmmgpu.kernels.codegen import NX, Spec  # noqa: E402
from hmmgpu.kernels.filter import choose_shape  # noqa: E402

PTXAS = os.environ.get("PTXAS", "/usr/local/cuda/bin/ptxas")


def report(spec):
    src = codegen.generate(spec, cache=False).replace("@cuda.jit('", "KSIG = ('").replace("', cache=False)", "')")
    ns = {}
    exec(compile(src, spec.name, "exec"), ns)
    fn = ns["kernel"]
    ptx, _ = cuda.compile_ptx(fn, ns["KSIG"], cc=(9, 0), lineinfo=False)
    path = f"/tmp/{spec.name}.ptx"
    open(path, "w").write(ptx)
    out = subprocess.run([PTXAS, "-arch=sm_90", "-v", path, "-o", path + ".cubin"], capture_output=True, text=True)
    lines = [l for l in out.stderr.splitlines() if "registers" in l or "spill" in l]
    return " | ".join(l.split(":", 1)[-1].strip() for l in lines)


if __name__ == "__main__":
    Ms = [int(x) for x in sys.argv[1:]] or [40, 200, 400, 1000, 2400]
    for M in Ms:
        for mode in ("16x2", "8x4"):
            G, Q = choose_shape(M, mode)
            tab = NX * codegen.row_stride(G, Q) * 4
            sh = "static" if tab <= 40 * 1024 else "dyn"
            for kind in ("ssv", "msvw"):
                s = Spec(kind, mode, G, Q, sh, True)
                print(M, mode, kind, f"G={G} Q={Q} shared={sh}", report(s), flush=True)
