"""The envelope decoding + optimal accuracy kernel (hmmgpu.gpu.envelope) against the CPU
references (hmmgpu.cpu.decoding, hmmgpu.cpu.optacc), bit for bit: run by
tests/gpu/test_envelope_kernel.py under numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1`` in
a subprocess, since the simulator is chosen at numba import).

    NUMBA_ENABLE_CUDASIM=1 PYTHONPATH=. python3 tests/gpu/envelope_checks.py simulator_envelope_checks
"""
from __future__ import annotations

import sys

import numpy as np


def bits(a):
    return np.asarray(a, np.float32).view(np.uint32)


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


def check_cases(cases, binding: str = "python") -> dict:
    from hmmgpu.cpu import fwdback as ref
    from hmmgpu.cpu.decoding import decode
    from hmmgpu.cpu.null2 import null2_by_expectation
    from hmmgpu.cpu.optacc import XF_LOOP, XF_N, oa_trace, optimal_accuracy
    from hmmgpu.gpu.envelope.launch import decode_oa

    batch, mine = [], []
    for tables, codes, i, j in cases:
        uni = ref.unihit_tables(tables)
        xf = ref.special_transitions(uni, codes.size)
        fwd = ref.forward_matrix(tables, codes, i, j, unihit=True)
        bck = ref.backward_matrix(tables, codes, fwd, i, j, unihit=True)
        status, pp = decode(fwd, bck, xf[XF_N, XF_LOOP])
        oa = optimal_accuracy(pp, uni.tfv, xf) if status == 0 else None
        batch.append((fwd, bck, uni, xf))
        mine.append((status, pp, oa, uni, xf))
    gpu = decode_oa(batch, binding)
    report = dict(envelopes=len(cases), dropped=0)
    for k, ((status, pp, oa, uni, xf), got) in enumerate(zip(mine, gpu)):
        what = f"envelope {k}: {cases[k][2]}..{cases[k][3]} of L={cases[k][1].size}, M={uni.M}"
        if got.status != status or not np.array_equal(bits(got.posterior.matrix.dp[1:]), bits(pp.matrix.dp[1:])):
            raise AssertionError(f"{what}: posterior cells or status differ")
        if not np.array_equal(bits(got.posterior.matrix.xmx), bits(pp.matrix.xmx)):
            raise AssertionError(f"{what}: posterior specials differ")
        if status != 0:
            report["dropped"] += 1
            continue
        odds = null2_by_expectation(pp.matrix.dp[:, 0], pp.matrix.dp[:, 2], pp.matrix.xmx, uni.rfv)
        if not np.array_equal(bits(got.null2), bits(odds)):
            raise AssertionError(f"{what}: null2 odds differ")
        oasc, oam = oa
        if got.flags != oam.flags:
            raise AssertionError(f"{what}: flags {got.flags} != {oam.flags}")
        if bits(got.oasc) != bits(oasc) or not np.array_equal(bits(got.oa.matrix.dp), bits(oam.matrix.dp)):
            raise AssertionError(f"{what}: oasc or OA cells differ")
        if not np.array_equal(bits(got.oa.matrix.xmx[:, :5]), bits(oam.matrix.xmx[:, :5])):
            raise AssertionError(f"{what}: OA specials differ")
        a = got.trace
        b = oa_trace(oam, pp, uni.tfv, xf, uni.M)
        if not (np.array_equal(a.st, b.st) and np.array_equal(a.k, b.k) and np.array_equal(a.i, b.i)
                and np.array_equal(bits(a.pp), bits(b.pp))):
            raise AssertionError(f"{what}: OA traces differ")
    return report


def simulator_envelope_checks():
    """Every case of :func:`envelope_cases` in one batch (several envelopes per launch)."""
    return [("sampled models", check_cases(envelope_cases()))]


if __name__ == "__main__":
    for name, report in globals()[sys.argv[1]]():
        print(name, report, flush=True)
    print("simulator checks OK")
