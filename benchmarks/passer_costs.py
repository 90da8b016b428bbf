"""Where an F3 passer's CPU time goes in pyhmmer's post-filter stage: parsers against domain definition.

The default route's worker threads run pyhmmer's whole pipeline (``F1 = F2 = 1``) on each F3
passer the GPU's Forward gate sends them. This measures, on one thread, over the passers with a
domain of a sample of the models against a protein file, in hmmsearch's float mode:

* ``pipeline``: that pipeline on the model's passers (``Pipeline(F1=1, F2=1).search_hmm``);
* ``parsers``: libhmmer's ``p7_ForwardParser`` and ``p7_BackwardParser`` on each passer
  (:class:`hmmgpu.cpu.hmmerlib.HmmerModel`, through ctypes);
* ``definition``: the same parsers and ``p7_domaindef_ByPosteriorHeuristics`` on each passer,
  as ``p7_Pipeline`` runs them (``HmmerModel.domain_definition``).

``definition - parsers`` is domain definition's own time, and ``parsers / pipeline`` the most a
post-filter stage saves by taking both parsers' rows from a device (docs/performance.md).

    python3 benchmarks/passer_costs.py MODELS.hmm PROTEINS.fa [--every 30] [--out FILE.json]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models")
    parser.add_argument("proteins")
    parser.add_argument("--every", type=int, default=30, help="take every N-th model of the file (default 30)")
    parser.add_argument("--out", help="write the result as JSON here")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))

    import numpy as np
    import pyhmmer

    from benchmarks.common import header, save
    from hmmgpu.cpu.hmmerlib import HmmerModel
    from hmmgpu.host import set_flush_to_zero

    alphabet = pyhmmer.easel.Alphabet.amino()
    with pyhmmer.plan7.HMMFile(args.models) as fh:
        hmms = [hmm for k, hmm in enumerate(fh) if k % args.every == 0]
    with pyhmmer.easel.SequenceFile(args.proteins, digital=True, alphabet=alphabet) as fh:
        block = fh.read_block()
    index = {seq.name: k for k, seq in enumerate(block)}
    set_flush_to_zero(True)   # hmmsearch's float mode, as the default route's worker threads
    rows, totals = [], dict(passers=0, residues=0, pipeline=0.0, parsers=0.0, definition=0.0)
    for hmm in hmms:
        hits = pyhmmer.plan7.Pipeline(alphabet, E=1e9, domE=1e9).search_hmm(hmm, block)
        chosen = sorted(index[hit.name] for hit in hits)
        if not chosen:
            continue
        passers = pyhmmer.easel.DigitalSequenceBlock(alphabet, [block[k] for k in chosen])
        codes = [np.asarray(seq.sequence, np.uint8) for seq in passers]
        start = time.thread_time()
        pyhmmer.plan7.Pipeline(alphabet, F1=1.0, F2=1.0).search_hmm(hmm, passers)
        pipeline = time.thread_time() - start
        with HmmerModel(hmm) as model:
            start = time.thread_time()
            for c in codes:
                model.backward_parser(c)   # the Forward parser, then the Backward parser on its rows
            parsers = time.thread_time() - start
            start = time.thread_time()
            for c in codes:
                model.domain_definition(c)
            definition = time.thread_time() - start
        row = dict(model=str(hmm.name), M=hmm.M, passers=len(codes), residues=int(sum(c.size for c in codes)),
                   pipeline=round(pipeline, 4), parsers=round(parsers, 4), definition=round(definition, 4))
        rows.append(row)
        for key in totals:
            totals[key] += row[key]
        print(row, flush=True)
    share = totals["parsers"] / totals["pipeline"] if totals["pipeline"] else float("nan")
    own = (totals["definition"] - totals["parsers"]) / totals["pipeline"] if totals["pipeline"] else float("nan")
    summary = dict(totals, models=len(rows), parsers_share_of_pipeline=round(share, 3),
                   definition_alone_share_of_pipeline=round(own, 3),
                   ms_per_passer=dict(pipeline=round(1e3 * totals["pipeline"] / max(totals["passers"], 1), 3),
                                      parsers=round(1e3 * totals["parsers"] / max(totals["passers"], 1), 3),
                                      definition=round(1e3 * totals["definition"] / max(totals["passers"], 1), 3)))
    print(summary)
    if args.out:
        save(dict(header("passer_costs"), every=args.every, summary=summary, rows=rows), Path(args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
