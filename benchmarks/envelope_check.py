"""Envelope rescoring on real data: the CPU references (``hmmgpu.cpu.envelope`` and the
matrices under it) against libhmmer's own domain definition and its envelope matrices.

For every model of the shared data (29 Pfam and 24 CUDAMPF models), the targets are the
model's F3 passers among the 77,801 real proteins (hmmgpu's numba cascade, default
thresholds; at most ``--max`` a model). For each, libhmmer's
``p7_domaindef_ByPosteriorHeuristics`` gives the domains (``dcl``) and ``n2sc``, and the
script counts, bit for bit:

* ``dom_mismatch``: domains whose ``rescore_isolated_domain`` (null2 given: libhmmer's
  ``n2sc``) differs from the ``dcl`` entry in envsc, oasc, iali, jali or domcorrection;
* ``n2sc_mismatch``: domains of targets without a clustered region whose null2 by expectation
  (``logf`` of the odds, our own) differs from libhmmer's ``n2sc`` over the envelope;
* ``matrix_mismatch``: envelopes whose unihit Forward, Backward, posterior or OA matrix,
  ``oasc`` or OA trace differs from libhmmer's (``HmmerModel.envelope``), IEEE mode;
* ``ftz_mismatch``: the same in flush-to-zero mode (hmmsearch's), for envelopes no flag
  sends to the host (the Forward and Backward special rows with subnormals zeroed);
* ``full_mismatch``: targets whose whole-target multihit full Forward or Backward matrix differs;
* ``host``: envelopes flagged; of those, ``host_outputs_differ``: envelopes whose envsc, oasc,
  trace (states, nodes, residues) or null2 odds in IEEE mode differ from libhmmer's
  flush-to-zero run (the flags are cell-level; these are the outputs that matter);
* ``ftz_run_mismatch``: envelopes whose references run under flush-to-zero differ from
  libhmmer's flush-to-zero run in any matrix, score or trace.

::

    PYTHONPATH=. python3 benchmarks/envelope_check.py --data DIR [--max N] [MODEL ...]

About a minute a model on one core at ``--max 300``. Result: ``benchmarks/results/envelope_check_2026-11-28.log``:
the 29 Pfam models (4,206 targets, 9,675 domains) and 12 CUDAMPF models (839 targets, 2,111
domains, M up to 2,405): 0 mismatches of any kind; 1,546 envelopes flagged for flush-to-zero
runs. On the 8 most flagged Pfam models (400 targets, 554 domains, 265 flagged): the flagged
envelopes' outputs were all the same under flush-to-zero, and the references run under
flush-to-zero equal libhmmer's flush-to-zero run on every envelope.
"""
from __future__ import annotations

import argparse
import gzip
import json
import time
from pathlib import Path

import numpy as np

from common import shared_model_paths


def bits(v):
    return np.asarray(v, np.float32).view(np.uint32)


def same(a, b) -> bool:
    return np.array_equal(bits(a), bits(b))


def zero_tiny(rows):
    out = np.array(rows, np.float32)
    out[(out > 0) & (out <= np.float32(2.0 ** -126))] = 0
    return out


def matrices_equal(mine, theirs, ftz: bool) -> bool:
    """The envelope's matrices, oasc and trace (``mine``: the references' chain) against
    libhmmer's ``HmmerModel.envelope``."""
    def tidy(a):
        return zero_tiny(a) if ftz else a

    def eq(a, b, columns=6):
        return same(tidy(a.dp), b.dp) and same(tidy(a.xmx[:, :columns]), b.xmx[:, :columns])

    ok = same(mine["forward"].score, theirs["envsc"]) and eq(mine["forward"].matrix, theirs["forward"])
    ok = ok and eq(mine["backward"].matrix, theirs["backward"])
    ok = ok and mine["decoding_status"] == theirs["decoding_status"] and eq(mine["posterior"].matrix,
                                                                           theirs["posterior"])
    if not ok or mine["decoding_status"] != 0:
        return ok
    a, b = mine["trace"], theirs["trace"]
    return (same(mine["oasc"], theirs["oasc"]) and eq(mine["oa"].matrix, theirs["oa"], columns=5)
            and a.N == b.N and np.array_equal(a.st, b.st) and np.array_equal(a.k, b.k)
            and np.array_equal(a.i, b.i) and same(tidy(a.pp), b.pp))


def chain(tables, codes, i, j) -> dict:
    from hmmgpu.cpu import fwdback as ref
    from hmmgpu.cpu.decoding import decode
    from hmmgpu.cpu.optacc import XF_LOOP, XF_N, oa_trace, optimal_accuracy

    uni = ref.unihit_tables(tables)
    xf = ref.special_transitions(uni, codes.size)
    fwd = ref.forward_matrix(tables, codes, i, j, unihit=True)
    bck = ref.backward_matrix(tables, codes, fwd, i, j, unihit=True)
    status, pp = decode(fwd, bck, xf[XF_N, XF_LOOP])
    out = dict(forward=fwd, backward=bck, decoding_status=status, posterior=pp)
    if status == 0:
        out["oasc"], out["oa"] = optimal_accuracy(pp, uni.tfv, xf)
        out["trace"] = oa_trace(out["oa"], pp, uni.tfv, xf, uni.M).shifted(i - 1)
    return out


def check_target(c, model, tables, codes) -> None:
    from hmmgpu.cpu import fwdback as ref
    from hmmgpu.cpu.envelope import rescore_isolated_domain
    from hmmgpu.host import flush_to_zero

    dd = model.domain_definition(codes)
    c["targets"] += 1
    c["clustered_targets"] += dd["nclustered"] > 0
    for d in dd["domains"]:
        i, j = d["ienv"], d["jenv"]
        c["domains"] += 1
        r = rescore_isolated_domain(tables, codes, i, j, True, dd["n2sc"])
        c["dom_mismatch"] += not (same(r.envsc, d["envsc"]) and same(r.oasc, d["oasc"])
                                  and (r.iali, r.jali) == (d["iali"], d["jali"])
                                  and same(r.domcorrection, d["domcorrection"]))
        c["host"] += r.needs_host
        with flush_to_zero():
            theirs_ftz = model.envelope(codes, i, j)
            c["ftz_run_mismatch"] += not matrices_equal(chain(tables, codes, i, j), theirs_ftz, False)
        if r.needs_host and not r.dropped:
            own = rescore_isolated_domain(tables, codes, i, j)
            t = theirs_ftz["trace"]
            c["host_outputs_differ"] += not (same(own.envsc, theirs_ftz["envsc"]) and same(own.oasc, theirs_ftz["oasc"])
                                             and np.array_equal(own.trace.st, t.st) and np.array_equal(own.trace.k, t.k)
                                             and np.array_equal(own.trace.i, t.i) and same(own.null2, theirs_ftz["null2"]))
        if dd["nclustered"] == 0:
            own = rescore_isolated_domain(tables, codes, i, j)
            c["n2sc_checked"] += 1
            c["n2sc_mismatch"] += not same(own.n2sc, dd["n2sc"][i:j + 1])
        mine = chain(tables, codes, i, j)
        c["matrix_mismatch"] += not matrices_equal(mine, model.envelope(codes, i, j), False)
        if not r.needs_host:
            c["ftz_checked"] += 1
            c["ftz_mismatch"] += not matrices_equal(mine, theirs_ftz, True)
    fwd = ref.forward_matrix(tables, codes)
    bck = ref.backward_matrix(tables, codes, fwd)
    _, fsc, fm = model.forward_matrix(codes)
    _, bsc, bm = model.backward_matrix(codes)
    c["full_mismatch"] += not (same(fwd.score, fsc) and same(fwd.matrix.dp, fm.dp) and same(fwd.matrix.xmx, fm.xmx)
                               and same(bck.score, bsc) and same(bck.matrix.dp, bm.dp)
                               and same(bck.matrix.xmx, bm.xmx))


def main() -> None:
    import pyhmmer

    from hmmgpu.cpu import fwdback as ref
    from hmmgpu.cpu.backends import NumbaBackend
    from hmmgpu.cpu.hmmerlib import HmmerModel
    from hmmgpu.formats.seqdb import SequenceDB
    from hmmgpu.options import SearchOptions
    from hmmgpu.stages.cascade import run_cascade
    from hmmgpu.stages.profiles import ModelProfile

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--max", type=int, default=400, help="F3 passers checked per model")
    ap.add_argument("models", nargs="*")
    a = ap.parse_args()
    db = SequenceDB.from_fasta(a.data / "seqs" / "public_proteins.fa.gz")
    paths = shared_model_paths(a.data, a.models)
    backend = NumbaBackend(db)
    keys = ("targets", "clustered_targets", "domains", "dom_mismatch", "n2sc_checked", "n2sc_mismatch",
            "matrix_mismatch", "ftz_checked", "ftz_mismatch", "full_mismatch", "host", "host_outputs_differ",
            "ftz_run_mismatch")
    total = dict.fromkeys(keys, 0)
    for path in paths:
        with gzip.open(path, "rb") as fh, pyhmmer.plan7.HMMFile(fh) as hf:
            hmm = hf.read()
        t0 = time.time()
        cascade = run_cascade(backend, ModelProfile.from_hmm(hmm), SearchOptions(), db)
        passers = sorted(np.asarray(cascade.survivors).tolist())[:a.max]
        c = dict.fromkeys(keys, 0)
        with HmmerModel(hmm) as model:
            tables = ref.ForwardTables.from_hmmer(model)
            for t in passers:
                check_target(c, model, tables, db.codes(int(t)))
        for key in keys:
            total[key] += c[key]
        print(path.name, f"M={hmm.M}", json.dumps(c), f"{time.time() - t0:.1f}s", flush=True)
    print("TOTAL", json.dumps(total))


if __name__ == "__main__":
    main()
