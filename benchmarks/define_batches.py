"""define_batches: domain definition on the GPU (hmmgpu's own post-filter) of one fixed set of F3
passers, timed, with a digest of every answer to compare two versions bit for bit.

A search's runs differ in which passers the GPU process defines (how many it takes depends on
timing), so their rates move by 20% from run to run (docs/performance.md, "Step (1) begun"). This
script holds the work still: every ``--every``-th of the first ``--models`` models of a model file
is filtered against the first ``--max-seqs`` proteins on one GPU (``CudaBackend``: the filters and
the Forward gate, whose decided passers are the F3 passers), then all their passers are decoded
and defined ``--repeat`` times through ``CudaBackend.define_passers``, the call the engine makes
when it takes queued tasks back, ``--batch-passers`` passers a call (models in file order). For
each round it prints the wall time, the passers a second, the definitions' step seconds
(``GpuCascade.define_seconds``: full matrices, ensembles, decoding and optimal accuracy, the
envelopes' finish) and the digest: the SHA-256 of every answer (decodings left and definitions
sent, pickled) in order, equal for two versions that agree bit for bit.

``--offset`` picks which of every ``--every`` models (so that several processes take disjoint
sets), ``--threads`` makes the calls of a round from that many threads at once (each its share of
the calls, the answers still digested in call order), and ``--barrier DIR:N`` holds the first
round until N processes have their passers ready (each leaves a file in DIR), so that processes
started together define together after their filters: the three tell whether the definitions' pace is the GPU's or the host's.
``--ftz`` defines as for a search in hmmsearch's float mode (the command line's: every definition
in that mode, in one pass; ``CudaBackend.set_float_mode``); without it, as for a search in IEEE
arithmetic (the API's default), which leaves the passers that hold in hmmsearch's mode only, and
those whose definitions are flagged, to pyhmmer (up to fd7f854 it defined them too, in two more
passes whose answers such a search never used: digests of that mode from before then differ).

    python3 benchmarks/define_batches.py [--models 600] [--every 3] [--offset 0] [--max-seqs 0]
        [--repeat 3] [--batch-passers 4096] [--threads 1] [--barrier DIR:N] [--ftz] [--models-file PATH]
        [--proteins PATH] [--json OUT]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import pickle
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import header, resolve, save  # noqa: E402
from forward_batches import _models  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=int, default=600)
    ap.add_argument("--every", type=int, default=3, help="every n-th of those models")
    ap.add_argument("--offset", type=int, default=0, help="the first model taken, of every --every")
    ap.add_argument("--threads", type=int, default=1, help="threads making a round's calls")
    ap.add_argument("--barrier", default="", help="DIR:N: the first round waits for N processes' files in DIR")
    ap.add_argument("--ftz", action="store_true", help="as for a search in hmmsearch's float mode")
    ap.add_argument("--max-seqs", type=int, default=0, help="the first proteins only (0: all)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batch-passers", type=int, default=4096)
    ap.add_argument("--models-file", default="data:pfam_db/pfam35_sample600.hmm.gz")
    ap.add_argument("--proteins", default="data:seqs/public_proteins.fa.gz")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)

    import pyhmmer

    from hmmgpu.formats.seqdb import SequenceDB
    from hmmgpu.gpu.backend import CudaBackend
    from hmmgpu.gpu.cascade import _passers
    from hmmgpu.options import SearchOptions

    clock = time.perf_counter()
    proteins = resolve(args.proteins)
    if args.max_seqs:
        with pyhmmer.easel.SequenceFile(str(proteins), digital=True) as fh:
            db = SequenceDB.from_block(fh.read_block(sequences=args.max_seqs))
    else:
        db = SequenceDB.from_fasta(proteins)
    hmms = _models(resolve(args.models_file), args.models)[args.offset::args.every]
    options = SearchOptions.from_kwargs(backend="cuda")
    backend = CudaBackend(db)
    backend.set_float_mode(args.ftz)
    try:
        profiles = [backend.prepare(hmm) for hmm in hmms]
        items = []
        for profile, ticket in zip(profiles, [backend.submit(p, options) for p in profiles]):
            passers = _passers(ticket.result())   # the survivors the gate passed, as a gate batch takes them
            if passers.size:
                items.append((profile, options.seed, passers))
        batches, batch, count = [], [], 0
        for item in items:
            batch.append(item)
            count += int(item[2].size)
            if count >= args.batch_passers:
                batches.append(batch)
                batch, count = [], 0
        batches += [batch] if batch else []
        passers = sum(int(item[2].size) for item in items)
        print(f"# data ready in {time.perf_counter() - clock:.1f} s: {len(hmms)} models, {db.n} sequences, "
              f"{passers} F3 passers of {len(items)} models in {len(batches)} calls; {backend.description}", flush=True)
        report = {}
        if args.barrier:
            folder, _, count = args.barrier.rpartition(":")
            Path(folder, f"ready.{args.offset}").touch()
            while len(list(Path(folder).glob("ready.*"))) < int(count):
                time.sleep(0.01)
        for round_ in range(args.repeat):
            before = dict(backend.gpu.define_seconds)
            clock = time.perf_counter()
            with ThreadPoolExecutor(max(1, args.threads)) as pool:
                answers = [answer for got in pool.map(backend.define_passers, batches) for answer in got]
            wall = time.perf_counter() - clock
            digest = hashlib.sha256()
            defined = 0
            for decoded, definitions in answers:
                digest.update(pickle.dumps((decoded, definitions), protocol=5))
                defined += 0 if definitions is None else len(definitions)
            steps = {k: round(v - before.get(k, 0.0), 3) for k, v in backend.gpu.define_seconds.items()}
            report = dict(round=round_, offset=args.offset, threads=args.threads, ftz=args.ftz, wall_s=round(wall, 3), passers=passers, defined=defined,
                          passers_per_s=round(passers / wall, 1), steps=steps, digest=digest.hexdigest())
            print("# " + json.dumps(report), flush=True)
    finally:
        backend.close()
    if args.json:
        save(dict(header("define_batches"), models=len(hmms), sequences=db.n, calls=len(batches), **report),
             Path(args.json))
    return 0


if __name__ == "__main__":
    sys.exit(main())
