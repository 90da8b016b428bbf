"""What hmmgpu's own post-filter costs on the host alone, per F3 passer, whatever device runs its matrices.

Domain definition's driver (:func:`hmmgpu.stages.domaindef.define_domains_batched` on a
model's passers at once, as a post-filter task runs it: domain decoding, the region scans,
the bookkeeping) and the hits (:func:`hmmgpu.stages.hits.pipeline_hit`:
scores, alignment displays; :func:`~hmmgpu.stages.hits.tophits_state`: the serialized state)
run on the host for every passer, on every route; the stage functions (region Forward,
stochastic traces, envelope rescoring) move to the GPU. This script takes those out of the
measurement: for each model named (default: :data:`own_postfilter_profile.MODELS`) and the
first ``--max-seqs`` proteins of the shared data, it runs every F3 passer once with the CPU
references and records their parser rows and the stage functions' answers (by target and
span, so that any order of calls replays), then replays the
host's part ``--reps`` times with stages that hand the recorded answers back, and prints the
fastest replay's CPU milliseconds per passer (``time.thread_time``): ``driver``, ``hits``,
``state``, and a digest of the states (which must not change when the host code does).

::

    PYTHONPATH=.:benchmarks python3 benchmarks/own_postfilter_host.py [--data DIR] [--max-seqs N] [--reps N] [MODEL ...]
"""
from __future__ import annotations

import argparse
import hashlib
import os
import time
from collections import defaultdict
from pathlib import Path

from own_postfilter_profile import MODELS, proteins, read_model
from own_postfilter_threads import passers_of

from hmmgpu.stages.domaindef import DomainStages


class Recording(DomainStages):
    """Another implementation's stages, their answers kept by target (its ``codes`` object) and span."""

    def __init__(self, stages):
        self.stages, self.answers = stages, {}

    def region_forward(self, codes, i, j):
        return self.stages.region_forward(codes, i, j)

    def region_ensemble(self, matrix, codes, i, j):
        answer = self.answers[id(codes), i, j] = self.stages.region_ensemble(matrix, codes, i, j)
        return answer

    def rescore_envelope(self, codes, i, j, null2_is_done, n2sc):
        answer = self.answers[id(codes), i, j, null2_is_done] = self.stages.rescore_envelope(codes, i, j,
                                                                                            null2_is_done, n2sc)
        return answer


class Replay(DomainStages):
    """Stages that hand a :class:`Recording`'s answers back (in any order of calls)."""

    def __init__(self, answers):
        self.answers = answers

    def region_forward(self, codes, i, j):
        return None

    def region_ensemble(self, matrix, codes, i, j):
        return self.answers[id(codes), i, j]

    def rescore_envelope(self, codes, i, j, null2_is_done, n2sc):
        return self.answers[id(codes), i, j, null2_is_done]


def decoded(targets: list) -> list:
    """(codes, decoding) of each recorded target, from its parser rows."""
    from hmmgpu.cpu.fwdback import length_specials
    from hmmgpu.stages.domaindef import domain_decoding

    return [(codes, domain_decoding(*rows, length_specials(codes.size)[1])) for _, codes, rows, _ in targets]


def record(model, db, passers: list) -> tuple:
    """Each passer's codes, parser rows and Forward score, and the stages' answers of them all."""
    from hmmgpu.cpu.fwdback import backward, parse
    from hmmgpu.stages.domaindef import define_domains_batched

    targets = []
    for p in passers:
        codes = db.codes(p)
        fwd = parse(model.tables, codes)
        bck = backward(model.tables, codes, fwd)
        targets.append((p, codes, (fwd.xmx, bck.xmx, bck.has_own_scales), fwd.score))
    stages = Recording(model.stages)
    define_domains_batched(stages, decoded(targets))
    return targets, stages.answers


def replay(recorded: list, db, seconds: dict) -> list:
    """The host's part of every recorded passer, timed into ``seconds``: a model's passers
    defined in one batch (as a post-filter task's), their hits, each model's state. The
    driver's time includes ``p7_DomainDecoding`` (as the per-target driver's did)."""
    from hmmgpu.stages.domaindef import define_domains_batched
    from hmmgpu.stages.hits import pipeline_hit, tophits_state
    from hmmgpu.stages.profiles import null_table

    states = []
    for model, pipeline, (targets, answers) in recorded:
        start = time.thread_time()
        definitions = define_domains_batched(Replay(answers), decoded(targets))
        seconds["driver"] += time.thread_time() - start
        start = time.thread_time()
        hits = []
        for (p, codes, _, fwdsc), definition in zip(targets, definitions):
            L = int(codes.size)
            hit = pipeline_hit(definition, codes, db.name(p), db.accession(p), db.description(p), null_table(L)[L],
                               fwdsc, model.hit_model, pipeline)
            if hit is not None:
                hits.append(hit)
        seconds["hits"] += time.thread_time() - start
        start = time.thread_time()
        states.append(tophits_state(hits, dict(pipeline)))
        seconds["state"] += time.thread_time() - start
    return states


def digest(states: list) -> str:
    """The states' hits, order, counts and domZ (their pipelines' other fields hold malloc's leftovers)."""
    h = hashlib.sha256()
    for state in states:
        for hit in state["unsrt"]:
            h.update(bytes(hit))
        h.update(repr((state["hit"], state["nreported"], state["nincluded"], state["pipeline"]["domZ"])).encode())
    return h.hexdigest()[:16]


def main() -> None:
    from hmmgpu.options import SearchOptions

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="../shared/data")
    parser.add_argument("--max-seqs", type=int, default=5000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("models", nargs="*", default=MODELS)
    args = parser.parse_args()
    data = Path(args.data)
    _, db = proteins(data, args.max_seqs)
    options = SearchOptions()
    recorded = []
    for name in args.models:
        model, passers = passers_of(read_model(data, name), db, options)
        recorded.append((model, dict(model.settings, Z=float(len(passers)), Z_setby=1), record(model, db, passers)))
    n = sum(len(targets) for _, _, (targets, _) in recorded)
    replay(recorded, db, defaultdict(float))   # loads (or compiles) the numba functions first
    best = None
    for _ in range(args.reps):
        seconds = defaultdict(float)
        states = replay(recorded, db, seconds)
        if best is None or sum(seconds.values()) < sum(best.values()):
            best = seconds
    print(f"passers {n}: host ms/passer " + " ".join(f"{k} {1e3 * v / n:.3f}" for k, v in best.items())
          + f" total {1e3 * sum(best.values()) / n:.3f} (fastest of {args.reps}; load {os.getloadavg()[0]:.1f}) "
          + f"| states digest {digest(states)}")


if __name__ == "__main__":
    main()
