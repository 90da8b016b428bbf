"""Whether hmmgpu's CPU references, run entirely under flush-to-zero (the parsers and the whole
domain definition), equal libhmmer run under flush-to-zero (hmmsearch's arithmetic) on every
target, the targets their exactness flags mark included (the own post-filter runs them so in
hmmsearch's mode: hmmgpu.cpu.own_postfilter).

::

    PYTHONPATH=. python3 benchmarks/ftz_references_check.py N [MODEL ...]

N: each model's best hits (pyhmmer's hmmsearch) among the shared data's 77,801 proteins
(``common.shared_data()``). One JSON line a model: targets, flagged (a
HOST flag raised anywhere), mismatched (domain definition: counters, nexpected, n2sc, every
dcl field), parser_mismatch (Forward score, both parsers' rows), domains. Result:
benchmarks/results/ftz_references_2026-11-28.log (1,623 targets, 1,111 flagged, 3,521 domains, 0
mismatches).
"""
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import best_hits, shared_data, shared_pfam_model, shared_proteins  # noqa: E402
from domaindef_check import bits, differences  # noqa: E402


def main():
    from hmmgpu.cpu.domaindef import CpuDomainStages
    from hmmgpu.cpu.hmmerlib import HmmerModel
    from hmmgpu.cpu.fwdback import parse, backward
    from hmmgpu.stages.forward import ForwardTables, HOST
    from hmmgpu.stages.domaindef import define_domains
    from hmmgpu.host import flush_to_zero
    data = shared_data()
    proteins, by = shared_proteins(data)
    names = sys.argv[2:] or ["PF00001", "PF07690", "PF00005", "PF00133"]
    nmax = int(sys.argv[1])
    tot = dict(targets=0, flagged=0, mismatched=0, parser_mismatch=0, domains=0)
    for name in names:
        hmm = shared_pfam_model(data, name)
        targets = best_hits(hmm, proteins, by, nmax, 2)
        c = dict(targets=0, flagged=0, mismatched=0, parser_mismatch=0, domains=0)
        t0 = time.time()
        with HmmerModel(hmm) as model:
            tables = ForwardTables.from_hmmer(model)
            stages = CpuDomainStages(tables)
            for tn, codes in targets:
                with flush_to_zero():
                    theirs = model.domain_definition(codes)
                    st, sc, frows, _ = model.forward_parser(codes)
                    _, _, brows, _, own = model.backward_parser(codes)
                    fw = parse(tables, codes)
                    bw = backward(tables, codes, fw)
                    flagged = bool((fw.flags | bw.flags) & HOST)
                    if bits(fw.score) != bits(sc) or (bits(fw.xmx) != bits(frows)).any() or (bits(bw.xmx) != bits(brows)).any():
                        c["parser_mismatch"] += 1
                    mine = define_domains(stages, codes, fw.xmx, bw.xmx, bw.has_own_scales)
                flagged |= bool(mine.flags & HOST)
                bad = differences(mine, theirs)
                c["targets"] += 1
                c["flagged"] += flagged
                c["mismatched"] += bool(bad)
                c["domains"] += mine.ndom
                if bad:
                    print("MISMATCH", name, tn, bad, flush=True)
        print(json.dumps(dict(model=name, seconds=round(time.time()-t0, 1), **c)), flush=True)
        for k in tot:
            tot[k] += c[k]
    print(json.dumps(dict(model="all", **tot)))


if __name__ == "__main__":
    main()
