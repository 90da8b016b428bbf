"""Source generation for the SSV / MSV kernels, specialised per model size.

Each specialisation (filter kind, lane mode, group size G, words per thread Q, table in
shared memory or not, DPX or portable 16-bit ops) is written out as a small Python module
with the row loop fully unrolled over the Q words, into a cache directory, and imported from
there, so that numba's ``cache=True`` keeps the compiled kernel on disk across runs.

Striped layout (spec 2.7, generalised): a group of G threads holds G*P lanes (P = 2 for
16-bit, 4 for 8-bit lanes); node k lives in word q = (k-1) mod Q of lane z = (k-1) div Q,
lane z being sub-lane z % P of thread z // P. A model table is uint32 [x][q][g] (29*Q*G words).
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from dataclasses import dataclass

from . import lanes

NX = 29
PAD_RES = 0x1C1C1C1C  # four '~' (code 28): cost 255 / ssv 127, a no-op row for every filter
VERSION = "9"


def row_stride(G: int, Q: int) -> int:
    """Words per residue row of a model table: G*Q, padded by G when Q is even so that the
    rows read by the different lane groups of a warp start in different shared-memory banks."""
    return G * Q if (G == 32 or Q % 2) else G * (Q + 1)


def cache_dir() -> str:
    d = os.environ.get("HMMGPU_KERNEL_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "hmmgpu", "kernels")
    os.makedirs(d, exist_ok=True)
    return d


@dataclass(frozen=True)
class Spec:
    kind: str  # "ssv", "msvw" (J-state MSV, max(S,B) form), "msvs" (plain S form)
    mode: str  # "16x2" or "8x4"
    G: int
    Q: int
    shared: str  # 'static' (<= 48 KB), 'dyn' (dynamic, opt-in above 48 KB) or 'global' (L1)
    dpx: bool

    @property
    def P(self) -> int:
        return 2 if self.mode == "16x2" else 4

    @property
    def name(self) -> str:
        return (f"hk_{self.kind}_{self.mode}_{'dpx' if self.dpx else 'swar'}_g{self.G}_q{self.Q}"
                f"_{self.shared}_v{VERSION}")


def _cell(spec: Spec, prev: str, tab: str) -> str:
    m16 = spec.mode == "16x2"
    if spec.kind == "ssv":
        return f"addmax16({prev}, {tab}, ZERO)" if m16 else f"subus8(add32({prev}, BIASV), {tab})"
    if spec.kind == "msvw":
        return f"addmax16({prev}, {tab}, Bv)" if m16 else f"maxu8(subus8(add32({prev}, BIASV), {tab}), Bv)"
    return (f"addmax16(max16({prev}, Bv), {tab}, ZERO)" if m16
            else f"subus8(add32(maxu8({prev}, Bv), BIASV), {tab})")


def _fold(spec: Spec, acc: str, names) -> list:
    """Lines folding words ``names`` into the running max ``acc``."""
    out = []
    names = list(names)
    if spec.mode == "16x2":
        while len(names) >= 2:
            a, b = names.pop(), names.pop()
            out.append(f"{acc} = max3_16({acc}, {a}, {b})")
        if names:
            out.append(f"{acc} = max16({acc}, {names.pop()})")
    else:
        for a in names:
            out.append(f"{acc} = maxu8({acc}, {a})")
    return out


def _emit_dp(b, spec: Spec, kind: str, ind: int, tab: str, nw_expr: str):
    """Emit one filter's dynamic programming over the group's target (state init, row loop,
    group maximum). ``kind``: "ssv" (leaves ``t``), "msvw"/"msvs" (leave ``tall``, ``J``,
    ``Binit``, ``rng``)."""
    G, Q = spec.G, spec.Q
    m16 = spec.mode == "16x2"
    ssv = kind == "ssv"
    form_w = kind == "msvw"
    cs = Spec(kind, spec.mode, G, Q, spec.shared, spec.dpx)
    shift = "shift_up16" if m16 else "shift_up8"
    bcast = "bcast16" if m16 else "bcast8"
    hmax = "hmax16" if m16 else "hmaxu8"
    vmax = "max16" if m16 else "maxu8"
    v = "u_" if ssv else "w_"
    if ssv:
        for q in range(Q):
            b(f"u_{q} = ZERO", ind)
        b("R = ZERO", ind)
        fill = "ZERO"
    else:
        b("tjbm = (tjb + tbm) & 255", ind)
        b("B = base - tjbm", ind)
        b("if B < 0:", ind)
        b("B = 0", ind + 1)
        b("Binit = B", ind)
        b("J = 0", ind)
        b(f"Bv = {bcast}(B)", ind)
        b("T = min(top, base + tec + 1)", ind)
        init = "Bv" if form_w else "ZERO"
        for q in range(Q):
            b(f"w_{q} = {init}", ind)
        b(f"Rall = {init}", ind)
        b("rng = False", ind)
        fill = "Bv" if form_w else "ZERO"
    b(f"nwk = {nw_expr}", ind)
    b("done = nwk == 0", ind)
    b("nwmax = group_max(nwk, 32)", ind)
    b("iw = 0", ind)
    b("while iw < nwmax:", ind)
    i1 = ind + 1
    b("rw = PAD", i1)
    b("if iw < nwk:", i1)
    b("rw = res[wb + iw]", i1 + 1)
    for r in range(4):
        b(f"x = (rw >> {8 * r}) & 255" if r else "x = rw & 255", i1)
        b("tb = x * GQ + g", i1)
        b(f"sh = {shift}({v}{Q - 1}, first, {fill})", i1)
        for q in range(Q - 1, 0, -1):
            b(f"{v}{q} = {_cell(cs, f'{v}{q - 1}', f'{tab}[tb + {q * G}]')}", i1)
        b(f"{v}0 = {_cell(cs, 'sh', f'{tab}[tb]')}", i1)
        if ssv:
            for line in _fold(cs, "R", [f"u_{q}" for q in range(Q)]):
                b(line, i1)
        else:
            b(f"rm = {v}0", i1)
            for line in _fold(cs, "rm", [f"w_{q}" for q in range(1, Q)]):
                b(line, i1)
            b(f"Rall = {vmax}(Rall, rm)", i1)
            b(f"t = {hmax}(rm)", i1)
            b("bal = cuda.ballot_sync(FULL, (t >= T) and not done)", i1)
            b("if bal != 0:", i1)
            b("E = group_max(t, G)", i1 + 1)
            b("if ((bal >> gshift) & GMASK) != 0:", i1 + 1)
            b("if E >= top:", i1 + 2)
            b("rng = True", i1 + 3)
            b("done = True", i1 + 3)
            b("else:", i1 + 2)
            b("J = E - tec", i1 + 3)
            b("B = J - tjbm", i1 + 3)
            b("if B < 0:", i1 + 3)
            b("B = 0", i1 + 4)
            b(f"Bv = {bcast}(B)", i1 + 3)
            b("T = min(top, J + tec + 1)", i1 + 3)
            if form_w:
                for q in range(Q):
                    b(f"w_{q} = {vmax}(w_{q}, Bv)", i1 + 3)
    b("iw += 1", i1)
    b("if (iw & 15) == 0:", i1)
    if ssv:
        b(f"ov = {hmax}(R) >= lim", i1 + 1)
        b("bal = cuda.ballot_sync(FULL, ov)", i1 + 1)
        b("if ((bal >> gshift) & GMASK) != 0:", i1 + 1)
        b("done = True", i1 + 2)
    b("if cuda.ballot_sync(FULL, not done) == 0:", i1 + 1)
    b("break", i1 + 2)
    if ssv:
        b(f"t = group_max({hmax}(R), G)", ind)
    else:
        b(f"tall = group_max({hmax}(Rall), G)", ind)


def _emit_msv_out(b, ind: int, form_w: bool, cond: str):
    b(f"if {cond}:", ind)
    b("if rng:", ind + 1)
    b("k = cuda.atomic.add(ctr, 3, 1)", ind + 2)
    b("out_pos[k] = p", ind + 2)
    b("out_st[k] = RANGE", ind + 2)
    b("out_xj[k] = 0", ind + 2)
    if form_w:
        b("elif J == 0 and tall <= Binit:", ind + 1)
        b("k = cuda.atomic.add(ctr, 5, 1)", ind + 2)
        b("nxt_pos[k] = p", ind + 2)
    b("else:", ind + 1)
    b("xj = tall - tec", ind + 2)
    b("if xj < 0:", ind + 2)
    b("xj = 0", ind + 3)
    b("if xj >= thr[L]:", ind + 2)
    b("k = cuda.atomic.add(ctr, 3, 1)", ind + 3)
    b("out_pos[k] = p", ind + 3)
    b("out_st[k] = OK", ind + 3)
    b("out_xj[k] = xj", ind + 3)


def generate(spec: Spec, cache: bool) -> str:
    """Kernel source. "ssv": SSV over positions 0..n_items-1; targets SSV cannot decide run the
    J-state MSV in the same warp right away (MSV table read through L1), those whose MSV maximum
    stays at the B floor go to the fallback list (ctr[5]). "msvw": J-state MSV (max(S, B) form)
    over a list or all positions; "msvs": plain S-form MSV over the fallback list."""
    G, Q = spec.G, spec.Q
    ssv = spec.kind == "ssv"
    tabw = NX * row_stride(G, Q)
    L = []
    a = L.append
    a('"""Generated by hmmgpu.kernels.codegen: do not edit."""')
    a("import numpy as np")
    a("from numba import cuda, int32, uint32")
    a("from hmmgpu.kernels import lanes")
    a("from hmmgpu.kernels.warp import shift_up16, shift_up8, group_max")
    a(f"addmax16 = lanes.impl16('addmax16', {spec.dpx})")
    a(f"max3_16 = lanes.impl16('max3_16', {spec.dpx})")
    a(f"max16 = lanes.impl16('max16', {spec.dpx})")
    a("hmax16 = lanes.hmax16; bcast16 = lanes.bcast16; add32 = lanes.add32")
    a("subus8 = lanes.subus8; maxu8 = lanes.maxu8; hmaxu8 = lanes.hmaxu8; bcast8 = lanes.bcast8")
    a("u32 = lanes.u32")
    a(f"G = {G}; Q = {Q}; GQ = {row_stride(G, Q)}; TABW = {tabw}; WPG = {32 // G}; "
      f"GMASK = {(1 << G) - 1 if G < 32 else 0xFFFFFFFF}")
    a("FULL = 0xFFFFFFFF")
    a(f"PAD = np.uint32({PAD_RES})")
    a("OK = 0; RANGE = 16; NORESULT = 19")
    if ssv:
        sig = ("void(uint32[:], int64[:], int32[:], int32, uint32[:], uint32[:], int32[:], int32[:], int32[:], "
               "int32[:], int32[:], int8[:], int32[:], int32[:])")
        args = "res, woff, lens, n_items, tab, tabm, tjbtab, thr, sc, ctr, out_pos, out_st, out_xj, nxt_pos"
    else:
        sig = ("void(uint32[:], int64[:], int32[:], int32, uint32[:], int32[:], int32[:], int32[:], int32[:], "
               "int32[:], int32, int32, int32[:], int8[:], int32[:], int32[:])")
        args = ("res, woff, lens, n_direct, tab, tjbtab, thr, sc, ctr, in_pos, in_cnt, work, "
                "out_pos, out_st, out_xj, nxt_pos")
    sigarg = f"'{sig}', " if not lanes.SIM else ""
    a("")
    a(f"@cuda.jit({sigarg}cache={cache})")
    a(f"def kernel({args}):")
    b = lambda s, n=1: a("    " * n + s)  # noqa: E731
    if spec.shared in ("static", "dyn"):
        b("stab = cuda.shared.array(%s, uint32)" % ("TABW" if spec.shared == "static" else "0"))
        b("for j in range(cuda.threadIdx.x, TABW, cuda.blockDim.x):")
        b("stab[j] = tab[j]", 2)
        b("cuda.syncthreads()")
    else:
        b("stab = tab")
    b("lane = cuda.threadIdx.x & 31")
    b("g = lane & (G - 1)")
    b("gi = lane // G")
    b("first = g == 0")
    b("gshift = gi * G")
    b("bias = sc[0]; tbm = sc[1]; tec = sc[2]; base = sc[3]")
    b("ZERO = u32(0)")
    b("BIASV = bcast8(bias)")
    b("top = 255 - bias")
    b("lim = 127 - bias")
    if ssv:
        b("wk = 0")
    else:
        b("n_items = n_direct")
        b("if in_cnt >= 0:")
        b("n_items = ctr[in_cnt]", 2)
        b("wk = work")
    b("while True:")
    b("b0 = int32(0)", 2)
    b("if lane == 0:", 2)
    b("b0 = cuda.atomic.add(ctr, wk, WPG)", 3)
    b("b0 = cuda.shfl_sync(FULL, b0, 0)", 2)
    b("if b0 >= n_items:", 2)
    b("break", 3)
    b("item = b0 + gi", 2)
    b("valid = item < n_items", 2)
    b("p = 0", 2)
    b("L = 0", 2)
    b("wb = 0", 2)
    b("if valid:", 2)
    b("p = item", 3)
    if not ssv:
        b("if in_cnt >= 0:", 3)
        b("p = in_pos[item]", 4)
    b("L = lens[p]", 3)
    b("wb = woff[p]", 3)
    b("tjb = tjbtab[L]", 2)
    b("nw = int32((L + 3) >> 2)", 2)
    if ssv:
        b("pre_ok = valid and (tjb + tbm + tec + bias < 127)", 2)
        _emit_dp(b, spec, "ssv", 2, "stab", "nw if pre_ok else int32(0)")
        # SSV decision (spec 4.2 with the unbounded-int maximum t), in every thread of the group
        b("st = OK", 2)
        b("xj = 0", 2)
        b("if not pre_ok:", 2)
        b("st = NORESULT", 3)
        b("else:", 2)
        b("B0 = base - tjb - tbm", 3)
        b("if t >= lim:", 3)
        b("st = NORESULT if B0 < 128 else RANGE", 4)
        b("else:", 3)
        b("V = B0 + t", 4)
        b("if V >= top:", 4)
        b("st = RANGE", 5)
        b("else:", 4)
        b("xj = V - tec", 5)
        b("if xj > base:", 5)
        b("st = NORESULT", 6)
        b("xj = 0", 6)
        b("if valid and first and st != NORESULT:", 2)
        b("if st == RANGE or xj >= thr[L]:", 3)
        b("k = cuda.atomic.add(ctr, 3, 1)", 4)
        b("out_pos[k] = p", 4)
        b("out_st[k] = st", 4)
        b("out_xj[k] = xj", 4)
        b("need = valid and st == NORESULT", 2)
        b("if need and first:", 2)
        b("cuda.atomic.add(ctr, 6, 1)", 3)
        b("if cuda.ballot_sync(FULL, need) != 0:", 2)
        _emit_dp(b, spec, "msvw", 3, "tabm", "nw if need else int32(0)")
        _emit_msv_out(b, 3, True, "need and first")
    else:
        _emit_dp(b, spec, spec.kind, 2, "stab", "nw if valid else int32(0)")
        _emit_msv_out(b, 2, spec.kind == "msvw", "valid and first")
    a("")
    return "\n".join(L) + "\n"


_loaded = {}


def module_path(spec: Spec) -> str:
    sub = "sim" if lanes.SIM else "dev"
    d = os.path.join(cache_dir(), sub)
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, spec.name + ".py")


def write_source(spec: Spec) -> str:
    path = module_path(spec)
    src = generate(spec, cache=not lanes.SIM)
    digest = hashlib.sha1(src.encode()).hexdigest()
    old = None
    if os.path.exists(path):
        with open(path) as fh:
            old = fh.read()
    if old is None or hashlib.sha1(old.encode()).hexdigest() != digest:
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as fh:
            fh.write(src)
        os.replace(tmp, path)
    return path


def load(spec: Spec):
    """The compiled kernel of ``spec`` (generated, imported, cached on disk)."""
    if spec in _loaded:
        return _loaded[spec]
    path = write_source(spec)
    modname = "hmmgpu_gen." + spec.name
    mspec = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(mspec)
    sys.modules[modname] = mod
    mspec.loader.exec_module(mod)
    _loaded[spec] = mod.kernel
    return mod.kernel


def _warm_one(t):
    load(Spec(*t))
    return t


def warm(specs, processes=8):
    """Compile many specialisations in parallel processes (each fills numba's disk cache)."""
    specs = [s for s in dict.fromkeys(specs) if s not in _loaded]
    if lanes.SIM or not specs:
        return
    for s in specs:
        write_source(s)
    if len(specs) == 1 or processes <= 1:
        for s in specs:
            load(s)
        return
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    with ctx.Pool(min(processes, len(specs))) as pool:
        pool.map(_warm_one, [(s.kind, s.mode, s.G, s.Q, s.shared, s.dpx) for s in specs])
    for s in specs:
        load(s)
