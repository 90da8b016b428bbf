"""``hmmgpu audit``: every hmmgpu stage against HMMER's own C functions, target by target."""
from __future__ import annotations

import io
from dataclasses import dataclass, field

import numpy as np

from hmmgpu.constants import STATUS_NORESULT, STATUS_RANGE
from hmmgpu.errors import HmmgpuError

F32 = np.float32


@dataclass
class StageAudit:
    """One stage's comparison: how many targets, how many agree, the first disagreements."""

    stage: str
    compared: int = 0
    agree: int = 0
    examples: list = field(default_factory=list)

    @property
    def disagree(self) -> int:
        return self.compared - self.agree


def _scores_from_status(status, values) -> np.ndarray:
    out = values.astype(F32)
    out[status == STATUS_RANGE] = np.inf
    out[status == STATUS_NORESULT] = np.nan
    return out


def _compare(name, db, idx, ours, ref, ours_status=None, ref_status=None, show=5) -> StageAudit:
    ours = np.asarray(ours, F32)
    ref = np.asarray(ref, F32)
    same = (ours == ref) | (np.isnan(ours) & np.isnan(ref))
    if ours_status is not None:
        same &= np.asarray(ours_status) == np.asarray(ref_status)
    res = StageAudit(name, compared=int(idx.size), agree=int(same.sum()))
    for j in np.flatnonzero(~same)[:show]:
        t = int(idx[j])
        res.examples.append(f"{db.name(t).decode(errors='replace')}: hmmgpu {ours[j]!r} vs HMMER {ref[j]!r}")
    return res


def audit_filters(hmm, db, backend, show: int = 5) -> list:
    """Compare null score, SSV, MSV, bias filter and Viterbi filter with HMMER for every target.

    The MSV, bias and Viterbi filter stages run on ``backend`` (a
    :class:`~hmmgpu.stages.protocol.FilterBackend`: numba or the GPU) through its stage methods;
    the label of each row says where it ran.
    """
    from hmmgpu.cpu import filters as cpu_filters
    from hmmgpu.cpu.hmmerlib import HmmerModel, libhmmer_available
    from hmmgpu.stages.profiles import ModelProfile, msv_score, null_table, tjb_table

    if not libhmmer_available():
        raise HmmgpuError("audit needs HMMER's C library from the pyhmmer wheel (pyhmmer.libs/liblibhmmer.so), not found")
    prof = ModelProfile.from_hmm(hmm)
    idx = np.flatnonzero(db.lengths > 0)
    L = db.lengths[idx]
    max_len = max(int(db.max_length), 1)
    where = "cuda" if hasattr(backend, "device") else "numba"
    with HmmerModel(hmm) as ref_model:
        ref = ref_model.score_all(db.codes(int(t)) for t in idx)

    results = [_compare("null score (p7_bg_NullOne)", db, idx, null_table(max_len)[L], ref["null"], show=show)]

    st, xj = cpu_filters.msv_filter(prof, db, idx, ssv_only=True)
    ssv = _scores_from_status(st, msv_score(xj, tjb_table(max_len)[L]))
    results.append(_compare("SSV (p7_SSVFilter) [numba]", db, idx, ssv, ref["ssv"], st, ref["ssv_status"], show))

    msv = backend.msv(prof)
    if not np.array_equal(msv.indices, idx):
        raise HmmgpuError(f"the {where} MSV stage returned a different set of targets than asked for")
    results.append(_compare(f"MSV, SSV first (p7_MSVFilter) [{where}]", db, idx, msv.scores(db.lengths),
                            ref["msv"], msv.status, ref["msv_status"], show))

    bias = backend.bias(prof, idx)
    results.append(_compare(f"bias filter (p7_bg_FilterScore) [{where}]", db, idx, bias, ref["bias"], show=show))

    vit = backend.viterbi(prof, idx)
    results.append(_compare(f"Viterbi filter (p7_ViterbiFilter) [{where}]", db, idx, vit.scores(db.lengths),
                            ref["vf"], vit.status, ref["vf_status"], show))
    return results


def audit_forward(hmm, db, backend, options, show: int = 5) -> StageAudit:
    """Compare hmmgpu's Forward parser with HMMER's ``p7_ForwardParser`` (libhmmer), bit for
    bit, on every target that passes the Viterbi filter (the targets of the Forward gate):
    the status (eslERANGE where HMMER's Forward fails) and the score's float bits. hmmgpu's
    score is the backend's: the GPU kernel with the cuda backend, the lane-exact CPU
    reference with numba; the few targets either flags as beyond its exactness argument are
    computed by libhmmer, as in a search, and the stage's label counts them."""
    from hmmgpu.cpu.hmmerlib import HmmerModel
    from hmmgpu.stages.profiles import ModelProfile

    prof = ModelProfile.from_hmm(hmm)
    where = "cuda" if hasattr(backend, "device") else "numba"
    idx = np.asarray(backend.cascade(prof, options).past_vit, np.int64)
    fwd = backend.forward(prof, idx, fallback=True)
    if fwd is None or not np.array_equal(fwd.indices, idx):
        raise HmmgpuError(f"the {where} backend did not run the Forward parser on the targets asked for")
    with HmmerModel(hmm) as ref_model:
        ref = [ref_model.forward_parser(db.codes(int(t)))[:2] for t in idx]
    ref_status = np.array([st for st, _ in ref], np.int32)
    ref_scores = np.array([sc for _, sc in ref], F32)
    ours = np.asarray(fwd.scores, F32)
    ok = ref_status == 0
    same = (np.asarray(fwd.status) == ref_status) & (~ok | (ours.view(np.uint32) == ref_scores.view(np.uint32)))
    label = f"Forward parser (p7_ForwardParser) [{where}]"
    if fwd.recomputed:
        label += f" ({fwd.recomputed} flagged, by libhmmer)"
    res = StageAudit(label, compared=int(idx.size), agree=int(same.sum()))
    for j in np.flatnonzero(~same)[:show]:
        res.examples.append(f"{db.name(int(idx[j])).decode(errors='replace')}: hmmgpu status {int(fwd.status[j])} "
                            f"{ours[j]!r} vs HMMER status {int(ref_status[j])} {ref_scores[j]!r}")
    return res


def audit_hits(hmm, db, backend, options, show: int = 5) -> StageAudit:
    """Compare hmmgpu's final hits (tblout and domtblout rows, counters) with a full pyhmmer search."""
    import pyhmmer.plan7 as p7

    from hmmgpu.search.engine import SearchEngine

    ours = next(iter(SearchEngine(db, options, backend).search([hmm])))
    ref = p7.Pipeline(hmm.alphabet, **options.pipeline_kwargs()).search_hmm(hmm, db.block())
    rows = []
    for fmt in ("targets", "domains"):
        a, b = io.BytesIO(), io.BytesIO()
        ours.hits.write(a, format=fmt, header=False)
        ref.write(b, format=fmt, header=False)
        rows.append((a.getvalue().splitlines(), b.getvalue().splitlines()))
    counters = ("n_past_msv", "n_past_bias", "n_past_vit", "n_past_fwd", "nseqs", "nres")
    theirs = ref.__getstate__()["pipeline"]
    res = StageAudit("final hits vs full pyhmmer search", compared=len(rows[0][1]) + len(rows[1][1]) + len(counters) + 1)
    agree = 0
    for ours_rows, ref_rows in rows:
        for k, ref_row in enumerate(ref_rows):
            if k < len(ours_rows) and ours_rows[k] == ref_row:
                agree += 1
            elif len(res.examples) < show:
                got = ours_rows[k].decode(errors="replace") if k < len(ours_rows) else "(missing)"
                res.examples.append(f"row {k + 1}: hmmgpu {got!r} vs pyhmmer {ref_row.decode(errors='replace')!r}")
        if len(ours_rows) > len(ref_rows):
            res.compared += len(ours_rows) - len(ref_rows)
            if len(res.examples) < show:
                res.examples.append(f"hmmgpu reports {len(ours_rows) - len(ref_rows)} extra rows")
    mine = ours.hits.__getstate__()["pipeline"]
    for name in counters:
        if mine[name] == theirs[name]:
            agree += 1
        elif len(res.examples) < show:
            res.examples.append(f"{name}: hmmgpu {mine[name]} vs pyhmmer {theirs[name]}")
    if len(ours.hits) == len(ref):
        agree += 1
    elif len(res.examples) < show:
        res.examples.append(f"hits kept: hmmgpu {len(ours.hits)} vs pyhmmer {len(ref)}")
    res.agree = agree
    return res


def run_audit(hmmfile, seqdb, options, show=5, console=None) -> bool:
    """Audit every model of ``hmmfile`` against ``seqdb``, print a table per model; True if all agree."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from hmmgpu.formats.checks import check_model, check_target_lengths
    from hmmgpu.formats.hmmfile import read_models
    from hmmgpu.formats.seqdb import open_database
    from hmmgpu.search.routing import select_backend

    console = console or Console()
    db = open_database(seqdb)
    check_target_lengths(db)
    backend = select_backend(options.run, db, gpu_process=False)
    ok = True
    try:
        for hmm in (model.hmm for model in read_models(hmmfile)):
            check_model(hmm, options)
            stages = audit_filters(hmm, db, backend, show) + [audit_forward(hmm, db, backend, options, show),
                                                               audit_hits(hmm, db, backend, options, show)]
            name = hmm.name.decode() if isinstance(hmm.name, bytes) else hmm.name
            table = Table(title=escape(f"audit of {name} (M={hmm.M}) on {db.n} targets: {backend.description}"))
            for col in ("stage", "compared", "agree", "disagree", "first disagreements"):
                table.add_column(col, justify="right" if col in ("compared", "agree", "disagree") else "left")
            for s in stages:
                table.add_row(escape(s.stage), str(s.compared), str(s.agree),
                              f"[red]{s.disagree}[/red]" if s.disagree else "0",
                              escape("\n".join(s.examples)) or "-")
                ok &= s.disagree == 0
            console.print(table)
    finally:
        backend.close()
    console.print("[green]all stages agree with HMMER[/green]" if ok else "[red]DISAGREEMENTS FOUND[/red]")
    return ok
