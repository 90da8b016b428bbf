"""Whether hmmgpu's domain definition (``hmmgpu.stages.domaindef.define_domains`` with the
CPU stages of ``hmmgpu.cpu.domaindef``) equals libhmmer's ``p7_domaindef_ByPosteriorHeuristics``
on real data, bit for bit.

For each model (by default the six of hmmer-domaindef-spec.md §9: PF07690, PF00096, PF00400,
PF00023, PF00005, PF00133), the targets are its top hits (pyhmmer's hmmsearch, best first, at
most ``--max``) among the 77,801 proteins of the shared data. Each target's parser rows come
from libhmmer; domain definition then runs twice, as ``p7_Pipeline`` runs it through libhmmer
(``HmmerModel.domain_definition``: seed 42, reseeded per region) and through hmmgpu, and the
script counts mismatches of the counters (nregions, nclustered, noverlaps, nenvelopes),
``nexpected``, every ``n2sc`` bit, and each ``dcl`` entry (ienv, jenv, iali, jali; envsc,
domcorrection, oasc bits), with the numbers of targets, regions, clustered regions, envelopes,
domains and n2sc positions checked, and the targets whose matrices raised a HOST exactness flag
(``flagged_host``: hmmsearch's flush-to-zero arithmetic could differ there; the comparison is
in IEEE mode, pyhmmer's, where the references are exact whatever the flags); the targets with
no such flag are also compared with libhmmer under flush-to-zero (``ftz_checked``,
``ftz_mismatched``).

::

    PYTHONPATH=. python3 benchmarks/domaindef_check.py --data DIR [--max 250] [MODEL ...]

About 3 minutes on 2 cores. Result (``benchmarks/results/domaindef_check_2026-11-28.log``): 1,034
targets, 2,524 regions of which 493 clustered, 2,920 envelopes and domains, 377 overlaps,
675,908 n2sc positions: 0 mismatches; 684 targets flagged HOST (by the envelope rescoring's
flags; the stochastic traces' FTZ check raised none), the other 350 also equal libhmmer's
answer under flush-to-zero.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from common import best_hits, shared_pfam_model, shared_proteins

DEFAULT_MODELS = ["PF07690", "PF00096", "PF00400", "PF00023", "PF00005", "PF00133"]


def bits(v):
    return np.asarray(v, np.float32).view(np.uint32)


def check_target(c, model, stages, codes) -> list:
    """One target through both; counts into ``c``; returns the names of what differed."""
    from hmmgpu.host import flush_to_zero
    from hmmgpu.stages.domaindef import define_domains
    from hmmgpu.stages.forward import HOST

    theirs = model.domain_definition(codes)
    _, _, fwd_rows, _ = model.forward_parser(codes)
    _, _, bck_rows, _, own = model.backward_parser(codes)
    mine = define_domains(stages, codes, fwd_rows, bck_rows, own)
    bad = differences(mine, theirs)
    c["flagged_host"] += int(bool(mine.flags & HOST))
    if not mine.flags & HOST:
        with flush_to_zero():
            c["ftz_mismatched"] += int(bool(differences(mine, model.domain_definition(codes))))
        c["ftz_checked"] += 1
    c["targets"] += 1
    c["regions"] += mine.nregions
    c["clustered_regions"] += mine.nclustered
    c["envelopes"] += mine.nenvelopes
    c["domains"] += mine.ndom
    c["overlaps"] += mine.noverlaps
    c["n2sc_positions"] += codes.size + 1
    c["n2sc_mismatches"] += int((bits(mine.n2sc) != bits(theirs["n2sc"])).sum())
    c["targets_mismatched"] += int(bool(bad))
    return bad


def differences(mine, theirs) -> list:
    """The names of what differs between hmmgpu's DomainDefinition and libhmmer's state."""
    bad = [key for key in ("nregions", "nclustered", "noverlaps", "nenvelopes") if getattr(mine, key) != theirs[key]]
    if mine.status != theirs["status"]:
        bad.append("status")
    if bits(mine.nexpected) != bits(theirs["nexpected"]):
        bad.append("nexpected")
    if (bits(mine.n2sc) != bits(theirs["n2sc"])).any():
        bad.append("n2sc")
    if mine.ndom != len(theirs["domains"]):
        bad.append("ndom")
    else:
        for d, ref in zip(mine.domains, theirs["domains"]):
            bad += [key for key in ("ienv", "jenv", "iali", "jali") if getattr(d, key) != ref[key]]
            bad += [key for key in ("envsc", "domcorrection", "oasc") if bits(getattr(d, key)) != bits(ref[key])]
    return bad


def main() -> None:
    from hmmgpu.cpu.domaindef import CpuDomainStages
    from hmmgpu.cpu.hmmerlib import HmmerModel
    from hmmgpu.stages.forward import ForwardTables

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--max", type=int, default=250, help="targets per model (its best hits)")
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("models", nargs="*", default=DEFAULT_MODELS)
    args = ap.parse_args()

    proteins, by_name = shared_proteins(args.data)
    total = {}
    for name in args.models:
        hmm = shared_pfam_model(args.data, name)
        t0 = time.time()
        c = dict.fromkeys(("targets", "regions", "clustered_regions", "envelopes", "domains", "overlaps",
                           "n2sc_positions", "n2sc_mismatches", "targets_mismatched", "flagged_host", "ftz_checked",
                           "ftz_mismatched"), 0)
        with HmmerModel(hmm) as model:
            stages = CpuDomainStages(ForwardTables.from_hmmer(model))
            for target, codes in best_hits(hmm, proteins, by_name, args.max, args.cpus):
                bad = check_target(c, model, stages, codes)
                if bad:
                    print(f"  MISMATCH {name} {target}: {sorted(set(bad))}", flush=True)
        print(json.dumps(dict(model=name, M=hmm.M, seconds=round(time.time() - t0, 1), **c)), flush=True)
        for key, value in c.items():
            total[key] = total.get(key, 0) + value
    print(json.dumps(dict(model="all", **total)), flush=True)


if __name__ == "__main__":
    main()
