"""Domain definition's GPU stages (hmmgpu.gpu.domaindef.GpuDomainStages) against the CPU stages,
envelope by envelope: run by tests/gpu/test_domaindef_stages.py under numba's CUDA simulator
(``NUMBA_ENABLE_CUDASIM=1`` in a subprocess, since the simulator is chosen at numba import).

    NUMBA_ENABLE_CUDASIM=1 PYTHONPATH=. python3 tests/gpu/domaindef_checks.py simulator_domaindef_checks
"""
from __future__ import annotations

import sys

import numpy as np


def bits(a):
    return np.asarray(a, np.float32).view(np.uint32)


def check_rescored_envelopes(cases, device, ftz: bool = False) -> dict:
    """``rescore_envelopes`` of the GPU stages (a model's envelopes in runs of at most 64 KB of
    matrices, largest first, a decoding + OA launch a run: several launches of several
    envelopes, answers back in order) equals the CPU stages' on every envelope of
    ``cases`` ((tables, codes, i, j), as tests/gpu/envelope_checks.envelope_cases gives them):
    whether dropped, the flags, and unless dropped envsc, oasc, iali, jali, the trace, and for
    the envelopes whose null2 is not done (every other one) the n2sc bits. With ``ftz`` the GPU
    stages in hmmsearch's float mode against the CPU stages under flush-to-zero (the x86 mode
    itself); ``differ`` counts the envelopes whose result in that mode differs from IEEE's."""
    from hmmgpu.cpu.domaindef import CpuDomainStages
    from hmmgpu.gpu.domaindef import GpuDomainStages, runs_by_size
    from hmmgpu.gpu.fwdback.matrix_launch import matrix_bytes
    from hmmgpu.host import flush_to_zero
    from hmmgpu.stages.domaindef import EnvelopeSpan
    from hmmgpu.stages.forward import ANY_TINY

    rng = np.random.default_rng(1)
    by_model = {}
    for k, (tables, codes, i, j) in enumerate(cases):
        n2sc = rng.standard_normal(codes.size + 1).astype(np.float32)   # a clustered region's scores, given
        by_model.setdefault(id(tables), (tables, []))[1].append(EnvelopeSpan(codes, i, j, k % 2 == 1, n2sc))
    report = dict(envelopes=0, dropped=0, null2=0, launches=0, differ=0)
    for tables, spans in by_model.values():
        gpu = GpuDomainStages(tables, device=device, batch_bytes=64 << 10, ftz=ftz)
        report["launches"] += len(runs_by_size([2 * matrix_bytes(s.j - s.i + 1, tables.Q) for s in spans], 64 << 10))
        mine = gpu.rescore_envelopes(spans)
        with flush_to_zero(ftz):
            theirs = CpuDomainStages(tables).rescore_envelopes(spans)
        if ftz:
            ieee = CpuDomainStages(tables).rescore_envelopes(spans)
            report["differ"] += sum(not b.dropped and (bits(b.envsc) != bits(c.envsc) or bits(b.oasc) != bits(c.oasc)
                                                       or not np.array_equal(bits(b.trace.pp), bits(c.trace.pp)))
                                    for b, c in zip(theirs, ieee))
        for span, a, b in zip(spans, mine, theirs):
            what = f"envelope {span.i}..{span.j} of L={span.codes.size}, M={tables.M}"
            assert (a.dropped, a.flags) == (b.dropped, b.flags & ~ANY_TINY), what  # ANY_TINY: the references' alone
            report["envelopes"] += 1
            if b.dropped:
                report["dropped"] += 1
                continue
            assert (bits(a.envsc), bits(a.oasc), a.iali, a.jali) == (bits(b.envsc), bits(b.oasc), b.iali, b.jali), what
            assert all(np.array_equal(x, y) for x, y in zip((a.trace.st, a.trace.k, a.trace.i, bits(a.trace.pp)),
                                                            (b.trace.st, b.trace.k, b.trace.i, bits(b.trace.pp)))), what
            assert (a.n2sc is None) == (b.n2sc is None) == span.null2_is_done, what
            if b.n2sc is not None:
                assert np.array_equal(bits(a.n2sc), bits(b.n2sc)), what
                report["null2"] += 1
    return report


def _subnormal_cases() -> list:
    """Envelopes (whole targets and slices) of a homolog whose rows rescale and of a run of 150
    '*' between residues, whose matrices' cells pass through the subnormal range: in hmmsearch's
    float mode they hold zeros where IEEE's hold subnormals (tests/gpu/matrix_checks.check_ftz_jobs)."""
    from tests.gpu.fwdback_checks import fwd_case
    from tests.gpu.matrix_checks import _tables

    hmm, db = fwd_case(18, 2, n_random=1, max_len=40, homolog=60, stops=True)
    tables = _tables(hmm)
    cases = []
    for t in range(db.n):
        codes = db.codes(t)
        if codes.size > 1:
            cases += [(tables, codes, 1, codes.size), (tables, codes, 1 + codes.size // 4, codes.size - codes.size // 5)]
    return cases


def simulator_domaindef_checks():
    """The envelopes of every other target of the envelope kernel's simulator check (sampled
    models of 1, 5 and 18 nodes, whole targets and slices, '*' runs whose decoding overflows;
    each target's two envelopes are consecutive cases): their full matrices are made by the
    full-matrix kernels too, which doubles the simulator's time a case."""
    from tests.gpu.envelope_checks import envelope_cases

    from hmmgpu.gpu.domaindef import kernel_specs, load_kernels
    from hmmgpu.gpu.runtime import build
    from hmmgpu.gpu.runtime.device import GpuDevice

    device = GpuDevice.open(0)
    cases = [case for n, case in enumerate(envelope_cases()) if n // 2 % 2 == 0]
    out = [("envelopes", check_rescored_envelopes(cases, device)),
           ("envelopes ftz", check_rescored_envelopes(cases + _subnormal_cases(), device, ftz=True))]
    # warmup's (and the GPU process's early) load gives the very kernels the stages then launch
    loaded = load_kernels(device)
    same = all(build.load(spec, device) is build.load(spec, GpuDevice.open(0)) for spec in kernel_specs())
    out.append(("kernels", dict(loaded=loaded, names=sorted(spec.name for spec in kernel_specs()), same=same)))
    return out


if __name__ == "__main__":
    for name, report in globals()[sys.argv[1]]():
        print(name, report, flush=True)
    print("simulator checks OK")
