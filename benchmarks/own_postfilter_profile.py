"""Where hmmgpu's own post-filter stage spends its time, per F3 passer, against pyhmmer's pipeline.

For each model named (default: PF00005, PF07690, PF00096, PF00400, PF00072 of the shared
data) and the first ``--max-seqs`` real proteins, hmmgpu's exact CPU filters and Forward gate
(the numba route) find the F3 passers; each passer then goes through the steps of
:class:`hmmgpu.cpu.own_postfilter.OwnPostFilter` one by one, each timed in CPU seconds of
this thread (``time.thread_time``: the machine may be shared):

* ``forward``: the Forward parser with its rows (``cpu.fwdback.parse``);
* ``backward``: the Backward parser's rows (``cpu.fwdback.backward``);
* domain definition, split as its stages split: ``dd_driver`` (``p7_DomainDecoding``, the
  region scan and the bookkeeping of ``stages.domaindef.define_domains`` itself),
  ``region_forward`` (multihit full Forward of clustered regions), ``region_ensemble``
  (200 stochastic traces, null2 by trace, clustering), ``rescore_envelope`` (unihit Forward,
  Backward, decoding, optimal accuracy and its trace, null2 by expectation);
* ``hits``: the null score and ``stages.hits.pipeline_hit`` (scores, alignment displays).

The reference is pyhmmer's pipeline on the same passers in the same thread
(``Pipeline(F1=1, F2=1).search_hmm``: its MSV, bias and Viterbi filters on them are included,
a few per cent of its time). The script prints, per model and in total, the passers, the
clustered regions and envelopes, the milliseconds per passer of each part and of pyhmmer,
and checks that the hits equal pyhmmer's (every hit's bytes, the fields HMMER never sets
zeroed; IEEE mode, as pyhmmer).

::

    PYTHONPATH=. python3 benchmarks/own_postfilter_profile.py [--data DIR] [--max-seqs N] [MODEL ...]
"""
from __future__ import annotations

import argparse
import gzip
import time
from collections import defaultdict
from pathlib import Path

from hmmgpu.stages.domaindef import DomainStages

MODELS = ["PF00005", "PF07690", "PF00096", "PF00400", "PF00072"]
PARTS = ("forward", "backward", "dd_driver", "region_forward", "region_ensemble", "rescore_envelope", "hits")


class TimedStages(DomainStages):
    """A :class:`~hmmgpu.stages.domaindef.DomainStages` that times another's calls (its batch
    methods run the one-item methods below, item by item)."""

    def __init__(self, stages, seconds: dict):
        self.stages, self.seconds = stages, seconds

    def _timed(self, name, *args):
        start = time.thread_time()
        try:
            return getattr(self.stages, name)(*args)
        finally:
            self.seconds[name] += time.thread_time() - start

    def region_forward(self, *args):
        return self._timed("region_forward", *args)

    def region_ensemble(self, *args):
        return self._timed("region_ensemble", *args)

    def rescore_envelope(self, *args):
        return self._timed("rescore_envelope", *args)


def profile_model(hmm, db, block, options) -> dict:
    """The timed parts (seconds), counts and pyhmmer's time for one model's F3 passers."""
    from pyhmmer.plan7 import Pipeline

    from hmmgpu.cpu.backends import NumbaBackend
    from hmmgpu.cpu.fwdback import backward, parse
    from hmmgpu.cpu.own_postfilter import QueryModel
    from hmmgpu.formats.seqdb import sequence_block
    from hmmgpu.stages.domaindef import define_domains
    from hmmgpu.stages.hits import pipeline_hit, tophits_state
    from hmmgpu.stages.profiles import null_table
    from tests.stages.test_hits import normalized

    backend = NumbaBackend(db)
    passers = backend.cascade(backend.prepare(hmm), options).survivors
    model = QueryModel.of(hmm, options)
    seconds = defaultdict(float)
    stages = TimedStages(model.stages, seconds)
    pipeline = dict(model.settings, Z=float(len(passers)), Z_setby=1)
    hits, counts = [], defaultdict(int)
    for p in passers.tolist():
        codes = db.codes(p)
        clock = time.thread_time()
        fwd = parse(model.tables, codes)
        t1 = time.thread_time()
        bck = backward(model.tables, codes, fwd)
        t2 = time.thread_time()
        before = sum(seconds[k] for k in ("region_forward", "region_ensemble", "rescore_envelope"))
        definition = define_domains(stages, codes, fwd.xmx, bck.xmx, bck.has_own_scales)
        t3 = time.thread_time()
        after = sum(seconds[k] for k in ("region_forward", "region_ensemble", "rescore_envelope"))
        L = int(codes.size)
        hit = pipeline_hit(definition, codes, db.name(p), db.accession(p), db.description(p), null_table(L)[L],
                           fwd.score, model.hit_model, pipeline)
        t4 = time.thread_time()
        seconds["forward"] += t1 - clock
        seconds["backward"] += t2 - t1
        seconds["dd_driver"] += (t3 - t2) - (after - before)
        seconds["hits"] += t4 - t3
        counts["regions"] += definition.nregions
        counts["clustered"] += definition.nclustered
        counts["envelopes"] += definition.nenvelopes
        counts["flagged"] += bool((fwd.flags | bck.flags | definition.flags) & 3)
        if hit is not None:
            hits.append(hit)
    ours = tophits_state(hits, pipeline)
    sub = sequence_block([block[p] for p in passers.tolist()])
    clock = time.thread_time()
    ref = Pipeline(hmm.alphabet, **options.pipeline_kwargs(F1=1.0, F2=1.0, Z=float(len(passers)))).search_hmm(hmm, sub)
    pyhmmer_seconds = time.thread_time() - clock
    ref = ref.__getstate__()
    same = [normalized(h) for h in ours["unsrt"]] == [normalized(h) for h in ref["unsrt"]] and \
        ours["hit"] == ref["hit"]
    return dict(seconds=seconds, counts=counts, passers=int(len(passers)), hits=len(hits), pyhmmer=pyhmmer_seconds,
                same=same)


def line(label, passers, seconds, pyhmmer, counts, extra="") -> str:
    ms = {k: 1e3 * seconds[k] / max(1, passers) for k in PARTS}
    own = sum(ms.values())
    return (f"{label:10s} passers {passers:5d} regions {counts['regions']:5d} clustered {counts['clustered']:4d} "
            f"envelopes {counts['envelopes']:5d} | ms/passer " + " ".join(f"{k} {v:.2f}" for k, v in ms.items())
            + f" | own {own:.2f} pyhmmer {1e3 * pyhmmer / max(1, passers):.2f} ({own / max(1e-9, 1e3 * pyhmmer / max(1, passers)):.1f}x)"
            + extra)


def proteins(data: Path, max_seqs: int) -> tuple:
    """The first ``max_seqs`` proteins of the shared data: (pyhmmer block, :class:`~hmmgpu.formats.seqdb.SequenceDB`)."""
    from pyhmmer.easel import Alphabet, SequenceFile

    from hmmgpu.formats.seqdb import SequenceDB

    fasta = Path("/tmp") / f"own_postfilter_profile_{max_seqs}.fa"
    if not fasta.exists():
        with gzip.open(data / "seqs" / "public_proteins.fa.gz", "rt") as src, open(fasta, "w") as out:
            n = 0
            for text in src:
                n += text.startswith(">")
                if n > max_seqs:
                    break
                out.write(text)
    with SequenceFile(str(fasta), digital=True, alphabet=Alphabet.amino()) as f:
        block = f.read_block()
    return block, SequenceDB.from_block(block)


def read_model(data: Path, name: str):
    """A Pfam model of the shared data."""
    from pyhmmer.plan7 import HMMFile

    with HMMFile(gzip.open(data / "pfam" / f"{name}.hmm.gz")) as f:
        return f.read()


def main() -> None:
    from hmmgpu.options import SearchOptions

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="../shared/data")
    parser.add_argument("--max-seqs", type=int, default=5000)
    parser.add_argument("models", nargs="*", default=MODELS)
    args = parser.parse_args()
    data = Path(args.data)
    block, db = proteins(data, args.max_seqs)
    options = SearchOptions()
    total, total_counts, total_passers, total_pyhmmer = defaultdict(float), defaultdict(int), 0, 0.0
    for name in args.models:
        hmm = read_model(data, name)
        if name == args.models[0]:
            profile_model(hmm, db, block, options)   # loads (or compiles) the numba functions first
        r = profile_model(hmm, db, block, options)
        print(line(f"{name} M={hmm.M}", r["passers"], r["seconds"], r["pyhmmer"], r["counts"],
                   f" | hits {r['hits']} equal pyhmmer's: {r['same']}, flagged (HOST) {r['counts']['flagged']}"),
              flush=True)
        for k, v in r["seconds"].items():
            total[k] += v
        for k, v in r["counts"].items():
            total_counts[k] += v
        total_passers += r["passers"]
        total_pyhmmer += r["pyhmmer"]
    print(line("total", total_passers, total, total_pyhmmer, total_counts))
    share = {k: 100 * total[k] / max(1e-9, sum(total[j] for j in PARTS)) for k in PARTS}
    print("share of own time: " + ", ".join(f"{k} {v:.0f}%" for k, v in share.items()))


if __name__ == "__main__":
    main()
