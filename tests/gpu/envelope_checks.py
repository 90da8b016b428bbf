"""The envelope decoding + optimal accuracy kernel (hmmgpu.gpu.envelope) against the CPU
references (hmmgpu.cpu.decoding, hmmgpu.cpu.optacc, hmmgpu.cpu.null2), bit for bit: run by
tests/gpu/test_envelope_kernel.py under numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1`` in
a subprocess, since the simulator is chosen at numba import) and on a GPU.

    NUMBA_ENABLE_CUDASIM=1 PYTHONPATH=. python3 tests/gpu/envelope_checks.py simulator_envelope_checks

Float arrays are compared by their bits, except that a NaN equals any NaN: the one place NaN
arises is the posterior of an envelope whose decoding overflowed (``sp`` infinite, so
``0 * inf``; status eslERANGE, the domain dropped, its matrix never read), and the bits of
that NaN are the machine's: x86's default NaN 0xFFC00000 (libhmmer's SSE, numpy, the CPU
reference), an NVIDIA GPU's canonical 0x7FFFFFFF (the simulator check is given the GPU's:
:func:`gpu_nan_under_simulator`). A difference is reported with the first differing cell
(its index, both values and their bits) and the count.
"""
from __future__ import annotations

import sys

import numpy as np


def bits(a):
    return np.asarray(a, np.float32).view(np.uint32)


def first_difference(got, want, nan_bits: bool = False) -> str | None:
    """None where the float32 arrays ``got`` and ``want`` hold the same bits (any NaN equal to
    any NaN unless ``nan_bits``), else where they first differ, both values, and how many cells."""
    got, want = np.atleast_1d(np.asarray(got, np.float32)), np.atleast_1d(np.asarray(want, np.float32))
    if got.shape != want.shape:
        return f"shapes {got.shape} != {want.shape}"
    differ = bits(got) != bits(want)
    if not nan_bits:
        differ &= ~(np.isnan(got) & np.isnan(want))
    if not differ.any():
        return None
    at = tuple(int(x) for x in np.argwhere(differ)[0])
    g, w = got[at], want[at]
    return (f"at {at} got {float(g)!r} (0x{int(bits(g)):08x}) want {float(w)!r} (0x{int(bits(w)):08x}), "
            f"{int(differ.sum())} of {differ.size} differ")


def envelope_cases():
    """(tables, codes, i, j) of small sampled models (one node, padding lanes, M = 18 with a
    homolog run that rescales, a '*' run whose decoding overflows)."""
    from hmmgpu.cpu import fwdback as ref
    from hmmgpu.cpu.hmmerlib import HmmerModel
    from tests.gpu.fwdback_checks import fwd_case

    cases = []
    for M, seed, max_len in ((1, 1, 40), (5, 3, 40), (18, 2, 40)):
        hmm, db = fwd_case(M, seed, n_random=2, max_len=max_len, homolog=max(M // 3, 30), stops=True)
        with HmmerModel(hmm) as model:
            tables = ref.ForwardTables.from_hmmer(model)
        for t in range(db.n):
            codes = db.codes(t)
            L = codes.size
            cases += [(tables, codes, 1, L), (tables, codes, 1 + L // 3, L - L // 3)]
    return cases


def references(cases) -> tuple:
    """The kernel's batch (Forward, Backward, unihit tables, xf) of each case and the CPU
    references' results (status, posterior, OA result or None, unihit tables, xf)."""
    from hmmgpu.cpu import fwdback as ref
    from hmmgpu.cpu.decoding import decode
    from hmmgpu.cpu.optacc import XF_LOOP, XF_N, optimal_accuracy

    batch, expected = [], []
    for tables, codes, i, j in cases:
        uni = ref.unihit_tables(tables)
        xf = ref.special_transitions(uni, codes.size)
        fwd = ref.forward_matrix(tables, codes, i, j, unihit=True)
        bck = ref.backward_matrix(tables, codes, fwd, i, j, unihit=True)
        status, pp = decode(fwd, bck, xf[XF_N, XF_LOOP])
        oa = optimal_accuracy(pp, uni.tfv, xf) if status == 0 else None
        batch.append((fwd, bck, uni, xf))
        expected.append((status, pp, oa, uni, xf))
    return batch, expected


def differences(expected, got, nan_bits: bool = False) -> list:
    """What differs between one envelope's references (an item of :func:`references`) and the
    kernel's :class:`~hmmgpu.gpu.envelope.launch.DecodedEnvelope`: a line per field."""
    from hmmgpu.cpu.null2 import null2_by_expectation
    from hmmgpu.cpu.optacc import oa_trace

    status, pp, oa, uni, xf = expected
    out = []
    if got.status != status:
        out.append(f"status {got.status} != {status}")
    for name, a, b in (("posterior cells (rows 1..)", got.posterior.matrix.dp[1:], pp.matrix.dp[1:]),
                       ("posterior specials", got.posterior.matrix.xmx, pp.matrix.xmx)):
        d = first_difference(a, b, nan_bits)
        if d:
            out.append(f"{name}: {d}")
    if status != 0 or got.status != 0:
        return out
    odds = null2_by_expectation(pp.matrix.dp[:, 0], pp.matrix.dp[:, 2], pp.matrix.xmx, uni.rfv)
    oasc, oam = oa
    for name, a, b in (("null2 odds", got.null2, odds), ("oasc", got.oasc, oasc), ("OA cells", got.oa.matrix.dp, oam.matrix.dp),
                       ("OA specials", got.oa.matrix.xmx[:, :5], oam.matrix.xmx[:, :5])):
        d = first_difference(a, b, nan_bits)
        if d:
            out.append(f"{name}: {d}")
    if got.flags != oam.flags:
        out.append(f"flags {got.flags} != {oam.flags}")
    a, b = got.trace, oa_trace(oam, pp, uni.tfv, xf, uni.M)
    if not (np.array_equal(a.st, b.st) and np.array_equal(a.k, b.k) and np.array_equal(a.i, b.i)
            and np.array_equal(bits(a.pp), bits(b.pp))):
        out.append(f"OA traces differ: got st {a.st.tolist()} k {a.k.tolist()} i {a.i.tolist()}; "
                   f"want st {b.st.tolist()} k {b.k.tolist()} i {b.i.tolist()}; pp {first_difference(a.pp, b.pp)}")
    return out


def describe(case, expected) -> str:
    tables, codes, i, j = case
    return f"{i}..{j} of L={codes.size}, M={expected[3].M}"


def check_cases(cases, device=None, block: int | None = None) -> dict:
    """The cases in one launch on ``device`` (GPU 0, or the simulator, if None; ``block``
    threads a block), each against the references; the first envelope that differs raises,
    with every field that differs."""
    from hmmgpu.gpu.envelope.launch import decode_oa

    batch, expected = references(cases)
    gpu = decode_oa(batch, device, block)
    report = dict(envelopes=len(cases), dropped=0)
    for k, (want, got) in enumerate(zip(expected, gpu)):
        found = differences(want, got)
        if found:
            raise AssertionError(f"envelope {k}: {describe(cases[k], want)}: " + "; ".join(found))
        report["dropped"] += want[0] != 0
    return report


def gpu_nan_under_simulator() -> None:
    """Make the simulator's float operations give a GPU's NaN (0x7FFFFFFF, canonical) where
    numpy's give x86's (0xFFC00000), so that the simulator check meets the NaN the GPU check
    meets. Called before the kernel is built (its module binds the helpers when imported)."""
    from hmmgpu.gpu import rounding

    plain = rounding.float_helpers
    gpu_nan = np.uint32(0x7FFFFFFF).view(np.float32)

    def canonical(op):
        def rounded(a, b):
            r = op(a, b)
            return gpu_nan if np.isnan(r) else r
        return rounded

    def float_helpers(binding, ftz=False):
        helpers = plain(binding, ftz)
        if binding == "python":
            for name in ("fmul", "fadd", "fsub", "fdiv"):
                setattr(helpers, name, canonical(getattr(helpers, name)))
        return helpers

    rounding.float_helpers = float_helpers


def simulator_envelope_checks():
    """Every case of :func:`envelope_cases` in one batch (several envelopes per launch), the
    simulator's NaN the GPU's."""
    gpu_nan_under_simulator()
    return [("sampled models", check_cases(envelope_cases()))]


if __name__ == "__main__":
    for name, report in globals()[sys.argv[1]]():
        print(name, report, flush=True)
    print("simulator checks OK")
