"""How often the Forward parser's exactness flags fire on real data, and whether the CPU
reference (``hmmgpu.cpu.fwdback``) equals libhmmer's ``p7_ForwardParser`` on it.

For every model of the shared data (29 Pfam and 24 CUDAMPF models), the targets are the
model's Viterbi-filter survivors among the 77,801 real proteins (hmmgpu's numba cascade,
default thresholds). Each survivor is parsed by the CPU reference and by libhmmer twice, in
IEEE mode (pyhmmer's) and with flush-to-zero (hmmsearch's), and the script counts:

* mismatches of the score bits and of the special-state rows against libhmmer (IEEE);
* for the targets the flags do not send to the host: mismatches against libhmmer under
  FTZ (score bits; the rows with their subnormal entries zeroed);
* each flag: RANGE, SUBNORMAL (sent to libhmmer), TINY_ROWS (a subnormal stored special
  value), and ANY_TINY (the naive rule: some float result was subnormal);
* the targets whose rows differ between the two modes (TINY_ROWS should be exactly these);
* rescaled targets and rows.

With ``--backward`` it does the same for the Backward parser (``p7_BackwardParser`` after the
Forward parser, the reference's :func:`hmmgpu.cpu.fwdback.backward`) on the survivors the
Forward gate passes on (the F3 passers, which ``p7_Pipeline`` runs it on), under keys prefixed
``b_``, and counts the targets on which Backward switched to its own scale factors.

::

    PYTHONPATH=. python3 benchmarks/fwdback_flags.py --data DIR [--backward] [MODEL ...]

``DIR`` holds ``pfam/``, ``cudampf/`` and ``seqs/public_proteins.fa.gz`` (the shared data);
MODEL restricts to files whose name contains it. About 20 minutes on one core. Result:
``benchmarks/results/fwdback_flags_2026-11-27.log``; with ``--backward`` (about 25 minutes on one core):
``benchmarks/results/fwdback_flags_backward_2026-11-28.log``.
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


def zero_tiny(rows):
    """``rows`` with every subnormal (or FLT_MIN) entry set to 0: what flush-to-zero stores."""
    from hmmgpu.cpu import fwdback as ref

    out = rows.copy()
    out[(out > 0) & (out <= ref.FLT_MIN)] = 0
    return out


def count_backward(c, model, tables, codes, forward) -> None:
    """The Backward parser of one target (after ``forward``, the reference's Forward result)
    against libhmmer's in both modes, counted into ``c`` under the ``b_`` keys."""
    from hmmgpu.cpu import fwdback as ref
    from hmmgpu.host import flush_to_zero

    mine = ref.backward(tables, codes, forward)
    status, score, xmx, totscale, own = model.backward_parser(codes)
    with flush_to_zero():
        status2, score2, xmx2, _, _ = model.backward_parser(codes)
    c["b_targets"] += 1
    for key, flag in (("b_range", ref.RANGE), ("b_subnormal", ref.SUBNORMAL), ("b_tiny_rows", ref.TINY_ROWS),
                      ("b_any_tiny", ref.ANY_TINY)):
        c[key] += bool(mine.flags & flag)
    c["b_host"] += mine.needs_host
    c["b_own_scales"] += own
    c["b_ftz_rows_differ"] += not np.array_equal(bits(xmx), bits(xmx2))
    same_score = bool(mine.flags & ref.RANGE) == (status == 16) and (status != 0 or bits(score) == bits(mine.score))
    c["b_score_mismatch"] += not (same_score and bits(totscale) == bits(mine.totscale) and own == mine.has_own_scales)
    c["b_row_mismatch"] += not np.array_equal(bits(xmx), bits(mine.xmx))
    if not mine.needs_host:
        c["b_ftz_mismatch"] += not (status2 == status and bits(score2) == bits(score)
                                    and np.array_equal(bits(zero_tiny(mine.xmx)), bits(xmx2)))


def main() -> None:
    import pyhmmer

    from hmmgpu.cpu import fwdback as ref
    from hmmgpu.cpu.backends import NumbaBackend
    from hmmgpu.stages.cascade import run_cascade
    from hmmgpu.host import flush_to_zero
    from hmmgpu.cpu.hmmerlib import HmmerModel
    from hmmgpu.options import SearchOptions
    from hmmgpu.stages.profiles import ModelProfile
    from hmmgpu.formats.seqdb import SequenceDB

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--backward", action="store_true", help="check the Backward parser too")
    ap.add_argument("models", nargs="*")
    a = ap.parse_args()
    db = SequenceDB.from_fasta(a.data / "seqs" / "public_proteins.fa.gz")
    paths = shared_model_paths(a.data, a.models)
    backend = NumbaBackend(db)
    keys = ("targets", "score_mismatch", "row_mismatch", "ftz_mismatch", "host", "range", "subnormal", "tiny_rows",
            "any_tiny", "ftz_rows_differ", "rescaled", "rescaled_rows")
    if a.backward:
        keys += ("b_targets", "b_score_mismatch", "b_row_mismatch", "b_ftz_mismatch", "b_host", "b_range",
                 "b_subnormal", "b_tiny_rows", "b_any_tiny", "b_ftz_rows_differ", "b_own_scales")
    total = dict.fromkeys(keys, 0)

    for path in paths:
        with gzip.open(path, "rb") as fh, pyhmmer.plan7.HMMFile(fh) as hf:
            hmm = hf.read()
        t0 = time.time()
        cascade = run_cascade(backend, ModelProfile.from_hmm(hmm), SearchOptions(), db)
        f3_passers = set(np.asarray(cascade.survivors).tolist())
        c = dict.fromkeys(keys, 0)
        with HmmerModel(hmm) as model:
            tables = ref.ForwardTables.from_hmmer(model)
            if tables.exactness_conditions() is not None:
                print(path.name, "host only:", tables.exactness_conditions())
            for i in cascade.past_vit:
                codes = db.codes(int(i))
                mine = ref.parse(tables, codes)
                status, score, xmx, _ = model.forward_parser(codes)
                with flush_to_zero():
                    status2, score2, xmx2, _ = model.forward_parser(codes)
                c["targets"] += 1
                for key, flag in (("range", ref.RANGE), ("subnormal", ref.SUBNORMAL), ("tiny_rows", ref.TINY_ROWS),
                                  ("any_tiny", ref.ANY_TINY)):
                    c[key] += bool(mine.flags & flag)
                c["host"] += mine.needs_host
                n = int((xmx[:, 5] > 1).sum())
                c["rescaled"] += n > 0
                c["rescaled_rows"] += n
                c["ftz_rows_differ"] += not np.array_equal(bits(xmx), bits(xmx2))
                if a.backward and int(i) in f3_passers:
                    count_backward(c, model, tables, codes, mine)
                if mine.flags & ref.RANGE:
                    c["score_mismatch"] += status != 16
                    continue
                c["score_mismatch"] += not (status == 0 and bits(score) == bits(mine.score))
                c["row_mismatch"] += not np.array_equal(bits(xmx), bits(mine.xmx))
                if not mine.needs_host:
                    c["ftz_mismatch"] += not (status2 == 0 and bits(score2) == bits(score)
                                              and np.array_equal(bits(zero_tiny(mine.xmx)), bits(xmx2)))
        for key in keys:
            total[key] += c[key]
        print(path.name, f"M={hmm.M}", json.dumps(c), f"{time.time() - t0:.1f}s", flush=True)
    print("TOTAL", json.dumps(total))


if __name__ == "__main__":
    main()
