"""The GPU's post-filter parsers on real data: the Forward and Backward parser kernels and the
domain decoding kernel (``hmmgpu.gpu.fwdback``, one batch of every model's F3 passers) against
libhmmer's ``p7_ForwardParser``, ``p7_BackwardParser`` and ``p7_DomainDecoding``, bit for bit, and
their kernel time against the Forward gate's alone on the same targets.

For every model of the shared data (29 Pfam and 24 CUDAMPF models) the targets are its F3
passers among the 77,801 real proteins (hmmgpu's numba cascade, default thresholds: the
targets ``p7_Pipeline`` runs Backward and domain definition on). All models' passers go to the
GPU as one batch three times: the Forward parser alone (the F3 gate's launch), with
``decoding=True`` (Forward with rows on the device, Backward, decoding: what the own post-filter
launches) and with the rows sent back too; the script prints the kernel times (CUDA events
around each batch) and the host time to collect each. Then every passer
is compared with libhmmer in IEEE mode (pyhmmer's): the Forward rows, the Backward rows,
``totscale``, ``has_own_scales``, and ``mocc``, ``btot``, ``etot``; the keys count mismatches
(``*_mismatch``, expected 0), the targets left to the host by each stage's flags, the TINY_ROWS
flags and the targets whose Backward switched to its own scale factors.

::

    PYTHONPATH=. python3 benchmarks/parsers_check.py --data DIR [--limit N] [MODEL ...]

``DIR`` holds ``pfam/``, ``cudampf/`` and ``seqs/public_proteins.fa.gz`` (the shared data);
MODEL restricts to files whose name contains it; ``--limit`` keeps each model's N shortest
passers (a smoke run under numba's CUDA simulator: ``NUMBA_ENABLE_CUDASIM=1``). Needs a GPU
otherwise.
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


def passers(db, backend, path, limit: int):
    """(hmm, its F3 passers as database indices) of the model file ``path`` (the cascade run by
    ``backend``)."""
    import pyhmmer

    from hmmgpu.options import SearchOptions
    from hmmgpu.stages.cascade import run_cascade
    from hmmgpu.stages.profiles import ModelProfile

    with gzip.open(path, "rb") as fh, pyhmmer.plan7.HMMFile(fh) as hf:
        hmm = hf.read()
    cascade = run_cascade(backend, ModelProfile.from_hmm(hmm), SearchOptions(), db)
    idx = np.asarray(cascade.survivors, np.int64)
    idx = idx[np.asarray(db.lengths)[idx] > 0]
    if limit:
        idx = np.sort(idx[np.argsort(np.asarray(db.lengths)[idx], kind="stable")[:limit]])
    return hmm, idx


def compare(c, model, codes, j, got) -> None:
    """One passer's GPU results (``got``: the model's ForwardResults with Backward and decoding)
    against libhmmer's, counted into ``c``."""
    from hmmgpu.stages.forward import TINY_ROWS

    bwd, dec = got.backward, got.decoding
    c["targets"] += 1
    c["fwd_host"] += bool(got.host[j])
    c["bwd_host"] += bool(bwd.host[j])
    c["decoding_host"] += bool(dec.host[j])
    c["tiny_rows"] += bool((got.flags[j] | bwd.flags[j]) & TINY_ROWS)
    c["own_scales"] += bool(bwd.has_own_scales[j])
    if dec.host[j]:
        return
    status, score, fxmx, _ = model.forward_parser(codes)
    c["fwd_mismatch"] += not (status == 0 and bits(score) == bits(got.scores[j])
                              and np.array_equal(bits(fxmx), bits(got.rows[j])))
    status, _, bxmx, totscale, own = model.backward_parser(codes)
    c["bwd_mismatch"] += not (status == bwd.status[j] and bits(totscale) == bits(bwd.totscale[j])
                              and own == bool(bwd.has_own_scales[j]) and np.array_equal(bits(bxmx), bits(bwd.rows[j])))
    status, *arrays = model.domain_decoding(codes)
    c["decoding_mismatch"] += not (status == dec.status[j] and all(
        np.array_equal(bits(a), bits(getattr(dec, name)[j])) for name, a in zip(("mocc", "btot", "etot"), arrays)))


def main() -> None:
    from hmmgpu.cpu.backends import NumbaBackend
    from hmmgpu.cpu.hmmerlib import HmmerModel
    from hmmgpu.formats.seqdb import SequenceDB
    from hmmgpu.gpu.fwdback.launch import ForwardJob, ForwardStage
    from hmmgpu.gpu.resident import ResidentDatabase
    from hmmgpu.gpu.runtime.device import GpuDevice
    from hmmgpu.stages.forward import ForwardTables

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--limit", type=int, default=0, help="each model's N shortest passers only (0: all)")
    ap.add_argument("models", nargs="*")
    a = ap.parse_args()
    db = SequenceDB.from_fasta(a.data / "seqs" / "public_proteins.fa.gz")
    paths = shared_model_paths(a.data, a.models)
    t0 = time.time()
    backend = NumbaBackend(db)
    chosen = [passers(db, backend, path, a.limit) for path in paths]
    print(f"F3 passers: {sum(idx.size for _, idx in chosen)} of {len(chosen)} models, {time.time() - t0:.0f}s",
          flush=True)
    # the GPU holds the passers only: a database of them, each model's passers renumbered
    union = np.unique(np.concatenate([idx for _, idx in chosen]))
    sub = SequenceDB.from_block(db.block(union))
    models = [HmmerModel(hmm) for hmm, _ in chosen]
    device = GpuDevice.open(0)
    with device.activate():
        stage = ForwardStage(ResidentDatabase(sub, device), max_cells=1 << 40)
    jobs = [ForwardJob(ForwardTables.from_hmmer(model), np.searchsorted(union, idx))
            for model, (_, idx) in zip(models, chosen)]
    stage.launch(jobs[:1], decoding=True).results()  # compiles or loads the three kernels
    timing = {}
    for name, kwargs in (("forward", {}), ("forward+backward+decoding", dict(decoding=True)),
                         ("the same with the rows", dict(rows=True, decoding=True))):  # the last is checked
        batch = stage.launch(jobs, **kwargs)
        t = time.perf_counter()
        results = batch.results()
        timing[name] = dict(kernel_ms=round(batch.kernel_ms, 1), collect_s=round(time.perf_counter() - t, 2))
    print(device.description, json.dumps(timing), flush=True)
    keys = ("targets", "fwd_mismatch", "bwd_mismatch", "decoding_mismatch", "fwd_host", "bwd_host", "decoding_host",
            "tiny_rows", "own_scales")
    total = dict.fromkeys(keys, 0)
    for path, model, (hmm, idx), got in zip(paths, models, chosen, results):
        c = dict.fromkeys(keys, 0)
        for j, i in enumerate(idx.tolist()):
            compare(c, model, db.codes(i), j, got)
        model.close()
        for key in keys:
            total[key] += c[key]
        print(path.name, f"M={hmm.M}", json.dumps(c), flush=True)
    print("TOTAL", json.dumps(total))


if __name__ == "__main__":
    main()
