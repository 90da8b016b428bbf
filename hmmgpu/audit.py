"""``hmmgpu audit``: every hmmgpu stage against HMMER's own C functions, target by target.

What it compares
----------------
For each model, one row a stage: how many targets were compared, how many agree, and the
first disagreements. hmmgpu's side of a row is the backend's (``--backend numba``: the exact
CPU code; ``cuda``: the GPU kernels); HMMER's is libhmmer's own function on the same target
(:class:`hmmgpu.cpu.hmmerlib.HmmerModel`, ctypes into the pyhmmer wheel's ``libhmmer``), or
pyhmmer's pipeline, which is libhmmer's ``p7_Pipeline``:

* the null score, SSV, MSV, the bias filter and the Viterbi filter, on every target
  (:func:`audit_filters`);
* the Forward parser, on the Viterbi filter's survivors (:func:`audit_forward`), and the
  Backward parser after it, on the F3 passers (:func:`audit_backward`): status and the
  score's float bits against ``p7_ForwardParser`` and ``p7_BackwardParser``;
* the domain list of every F3 passer (:func:`audit_domains`): hmmgpu's own post-filter
  (domain definition, then ``p7_Pipeline``'s scoring, composed as
  :class:`~hmmgpu.cpu.own_postfilter.OwnPostFilter` composes them in a search) against
  libhmmer's ``p7_domaindef_ByPosteriorHeuristics`` and ``p7_Pipeline``: the number of
  domains and, per domain, envelope, alignment coordinates, envelope score, null2
  correction and bias, bit score, oasc and the independent and conditional E-values;
* the final hits: hmmgpu's search against a full pyhmmer search (tables, counters).

The F3 passers are HMMER's: the Viterbi filter's survivors whose Forward score from
``p7_ForwardParser`` passes the Forward filter against ``p7_bg_FilterScore`` (or the null
score without the bias filter), in ``p7_Pipeline``'s arithmetic. A target that hmmgpu's code
does not promise bit for bit goes, as in a search, to libhmmer: the parsers' targets their
exactness flags mark (:mod:`hmmgpu.cpu.fwdback`), the domain definitions the own post-filter
sends to pyhmmer's pipeline (a range error anywhere); each row's label counts them.

Why it looks as it does
-----------------------
The audit computes in hmmsearch's float mode (SSE flush-to-zero), the one ``hmmgpu search``
runs in (:func:`run_audit`): hmmgpu's CPU code, libhmmer's functions and pyhmmer's pipeline
all run in the calling thread, whose mode they share, and hmmgpu's search runs its worker
threads in it too (``SearchEngine(ftz=True)``, as the command line). The GPU's kernels compute
IEEE subnormals; the targets where the two modes could differ are the flagged ones, which
libhmmer computes here as in a search.

E-values depend on the whole search: a domain's independent E-value is its P-value times
the search's Z, its conditional one the P-value times domZ (the number of reported targets).
Each side's come from its own search, the one the final-hits row compares: hmmgpu's search
for hmmgpu's domains, the pyhmmer search for libhmmer's. The domains of every F3 passer are
compared, reported or not: libhmmer's are those of a pyhmmer pipeline run on the passers
alone with every filter and reporting threshold open (``F1 = F2 = F3 = 1``, ``E = inf``),
which keeps a hit for every passer with a domain; domain definition reseeds its random
generator at every region, so a target's domains do not depend on the targets around it.
"""
from __future__ import annotations

import io
import math
from dataclasses import dataclass, field

import numpy as np

from hmmgpu.constants import STATUS_NORESULT, STATUS_OK, STATUS_RANGE
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


def _backend_name(backend) -> str:
    """Where a backend's stages run, as the rows' labels say it."""
    return "cuda" if hasattr(backend, "device") else "numba"


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
    where = _backend_name(backend)
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


def _parser_row(stage: str, function: str, backend, db, idx, result, parser, show) -> tuple:
    """A parser's row: hmmgpu's ``result`` of ``stage`` on the targets ``idx`` (a
    :class:`~hmmgpu.stages.cascade.ForwardResult` from ``backend``) against libhmmer's
    ``parser`` (``function``, a method of :class:`~hmmgpu.cpu.hmmerlib.HmmerModel` giving
    (status, score, ...) of a target's codes): statuses, and the score's float bits where the
    status is OK. Returns (the row, libhmmer's statuses int32, scores float32)."""
    where = _backend_name(backend)
    if result is None or not np.array_equal(result.indices, idx):
        raise HmmgpuError(f"the {where} backend did not run the {stage} on the targets asked for")
    ref = [parser(db.codes(int(t)))[:2] for t in idx]
    ref_status = np.array([st for st, _ in ref], np.int32)
    ref_scores = np.array([sc for _, sc in ref], F32)
    ours = np.asarray(result.scores, F32)
    ok = ref_status == STATUS_OK
    same = (np.asarray(result.status) == ref_status) & (~ok | (ours.view(np.uint32) == ref_scores.view(np.uint32)))
    label = f"{stage} ({function}) [{where}]"
    if result.recomputed:
        label += f" ({result.recomputed} flagged, by libhmmer)"
    res = StageAudit(label, compared=int(idx.size), agree=int(same.sum()))
    for j in np.flatnonzero(~same)[:show]:
        res.examples.append(f"{db.name(int(idx[j])).decode(errors='replace')}: hmmgpu status {int(result.status[j])} "
                            f"{ours[j]!r} vs HMMER status {int(ref_status[j])} {ref_scores[j]!r}")
    return res, ref_status, ref_scores


def audit_forward(prof, ref_model, db, backend, options, past_vit, show: int = 5) -> tuple:
    """Compare hmmgpu's Forward parser with HMMER's ``p7_ForwardParser`` (libhmmer's
    ``ref_model``), bit for bit, on every target that passes the Viterbi filter (``past_vit``:
    the targets of the Forward gate): the status (eslERANGE where HMMER's Forward fails) and
    the score's float bits. hmmgpu's score is the backend's: the GPU kernel with the cuda
    backend, the lane-exact CPU reference with numba; the few targets either flags as beyond
    its exactness argument are computed by libhmmer, as in a search, and the stage's label
    counts them. Returns (the row, HMMER's F3 passers: the database indices among ``past_vit``
    whose ``p7_ForwardParser`` score passes ``p7_Pipeline``'s Forward filter)."""
    from hmmgpu.stages import stats

    idx = np.asarray(past_vit, np.int64)
    row, ref_status, ref_scores = _parser_row("Forward parser", "p7_ForwardParser", backend, db, idx,
                                              backend.forward(prof, idx, fallback=True), ref_model.forward_parser,
                                              show)

    filter_score = ref_model.bias_filter_score if options.bias_filter else ref_model.null_score
    filtersc = np.array([filter_score(db.codes(int(t))) for t in idx], F32)
    tau, lam = ref_model.evalue_parameters()[4:6]
    scored = ref_status == STATUS_OK
    passed = np.zeros(idx.size, bool)
    passed[scored] = stats.passes_exponential(ref_scores[scored], filtersc[scored], tau, lam, options.F3)
    return row, idx[passed]


def audit_backward(prof, ref_model, db, backend, passers, show: int = 5) -> StageAudit:
    """Compare hmmgpu's Backward parser with HMMER's ``p7_BackwardParser`` (after
    ``p7_ForwardParser``, as ``p7_Pipeline`` runs them) on the F3 passers ``passers``: status
    and the score's float bits. hmmgpu's score is the backend's (the GPU's Backward kernel after
    its Forward kernel, or the CPU references); flagged targets are libhmmer's and counted, as
    in :func:`audit_forward`."""
    idx = np.asarray(passers, np.int64)
    return _parser_row("Backward parser", "p7_BackwardParser", backend, db, idx,
                       backend.backward(prof, idx, fallback=True), ref_model.backward_parser, show)[0]


#: What the domain list compares of each domain, in order: ``P7_DOMAIN``'s fields that
#: domain definition and ``p7_Pipeline`` set, then the independent and conditional E-values.
DOMAIN_FIELDS = ("ienv", "jenv", "iali", "jali", "envsc", "domcorrection", "dombias", "oasc", "bitscore",
                 "i_evalue", "c_evalue")


def _domain_values(ienv, jenv, iali, jali, envsc, domcorrection, dombias, oasc, bitscore, lnP, Z, domZ) -> tuple:
    """One domain's :data:`DOMAIN_FIELDS`: float32 values as float32, the E-values in double
    (``exp(lnP) * Z``, ``exp(lnP) * domZ``, as HMMER and pyhmmer form them)."""
    return (int(ienv), int(jenv), int(iali), int(jali), F32(envsc), F32(domcorrection), F32(dombias), F32(oasc),
            F32(bitscore), math.exp(lnP) * Z, math.exp(lnP) * domZ)


def _bits(value):
    """A value as compared: its float bits (float32 or double), or the integer itself."""
    if isinstance(value, np.float32):
        return ("f", int(value.view(np.uint32)))
    if isinstance(value, float):
        return ("d", int(np.float64(value).view(np.uint64)))
    return value


def _first_difference(ours: tuple, ref: tuple) -> str | None:
    """How a target's (status, domains) differ from HMMER's, the first difference only."""
    (status, domains), (ref_status, ref_domains) = ours, ref
    if status != ref_status:
        return f"status {status} vs HMMER {ref_status}"
    if len(domains) != len(ref_domains):
        return f"{len(domains)} domains vs HMMER {len(ref_domains)}"
    for d, (mine, theirs) in enumerate(zip(domains, ref_domains)):
        for name, a, b in zip(DOMAIN_FIELDS, mine, theirs):
            if _bits(a) != _bits(b):
                return f"domain {d + 1} {name} hmmgpu {a!r} vs HMMER {b!r}"
    return None


def _libhmmer_domains(hmm, ref_model, db, options, passers, search) -> list:
    """HMMER's (status, domains) of each F3 passer: ``p7_domaindef_ByPosteriorHeuristics``
    (libhmmer's ``ref_model``) for the definition, ``p7_Pipeline`` (a pyhmmer pipeline over the
    passers with every threshold open) for the scores, ``search`` (pyhmmer's ``TopHits``) for
    Z and domZ."""
    import pyhmmer.plan7 as p7

    from hmmgpu.report.hitlist import read_hit

    definitions = [ref_model.domain_definition(db.codes(int(t)), seed=options.seed) for t in passers]
    scored = [t for t, d in zip(passers, definitions) if d["status"] == STATUS_OK and d["domains"]]
    records = []
    if scored:
        pipeline = p7.Pipeline(hmm.alphabet, **options.pipeline_kwargs(F1=1.0, F2=1.0, F3=1.0, E=math.inf, T=None,
                                                                       bit_cutoffs=None))
        records = [read_hit(blob) for blob in pipeline.search_hmm(hmm, db.block(scored)).__getstate__()["unsrt"]]
    if len(records) != len(scored):
        raise HmmgpuError(f"libhmmer's pipeline kept {len(records)} of the {len(scored)} F3 passers with domains")
    hits = iter(records)
    out = []
    for t, d in zip(passers, definitions):
        domains = d["domains"] if d["status"] == STATUS_OK else []
        hit = next(hits) if domains else None
        if hit is not None and (hit.name != db.name(int(t)) or len(hit.domains) != len(domains)):
            raise HmmgpuError(f"libhmmer's pipeline and domain definition disagree on {db.name(int(t))!r}")
        values = []
        for dom, rec in zip(domains, hit.domains if hit is not None else ()):
            if (rec.ienv, rec.jenv, rec.iali, rec.jali) != (dom["ienv"], dom["jenv"], dom["iali"], dom["jali"]):
                raise HmmgpuError(f"libhmmer's pipeline and domain definition disagree on {db.name(int(t))!r}")
            values.append(_domain_values(dom["ienv"], dom["jenv"], dom["iali"], dom["jali"], dom["envsc"],
                                         dom["domcorrection"], rec.dombias, dom["oasc"], rec.bitscore, rec.lnP,
                                         search.Z, search.domZ))
        out.append((int(d["status"]), tuple(values)))
    return out


def _own_domains(model, db, position: int, decoded, defined, search) -> tuple | None:
    """hmmgpu's (status, domains) of the F3 passer at ``position`` as its own post-filter makes
    them (:class:`~hmmgpu.cpu.own_postfilter.OwnPostFilter`: the device's definition where its
    process made one, else domain definition from the device's decoding where it made one, else
    from the CPU references' parsers; ``p7_Pipeline``'s scores), Z and domZ from ``search``
    (hmmgpu's ``TopHits``); None where the search sends the target to pyhmmer's pipeline (a
    range error). On the GPU route the search also leaves a passer the device did not decode,
    or decoded but did not define (a flag raised), to pyhmmer's pipeline; the audit checks the
    CPU references on it all the same (they are the stage without a GPU)."""
    from hmmgpu.cpu.fwdback import RANGE, backward, parse
    from hmmgpu.stages.domaindef import define_domains, define_domains_decoded
    from hmmgpu.stages.hits import score_target
    from hmmgpu.stages.profiles import null_table

    codes = db.codes(position)
    L = int(codes.size)
    k = decoded.find(position) if decoded is not None else -1
    sent = defined.find(position) if defined is not None else -1
    if sent >= 0:
        fwdsc, definition = defined.target(sent)
    elif k >= 0:
        fwdsc, decoding = decoded.target(k)
        definition = define_domains_decoded(model.stages, codes, decoding)
    else:
        forward = parse(model.tables, codes)
        if forward.flags & RANGE:
            return None
        bck = backward(model.tables, codes, forward)
        if (bck.flags | bck.forward_flags) & RANGE:
            return None
        fwdsc = forward.score
        definition = define_domains(model.stages, codes, forward.xmx, bck.xmx, bck.has_own_scales)
    if definition.status != STATUS_OK or definition.flags & RANGE:
        return None
    scores = score_target(definition.domains, definition.n2sc_sum, L, null_table(L)[L], fwdsc, model.hit_model.tau,
                          model.hit_model.lam, model.settings["do_null2"])
    if scores is None:
        return STATUS_OK, ()
    return STATUS_OK, tuple(_domain_values(dom.ienv, dom.jenv, dom.iali, dom.jali, dom.envsc, dom.domcorrection,
                                           score.dombias, dom.oasc, score.bitscore, score.lnP, search.Z, search.domZ)
                            for dom, score in zip(definition.domains, scores.domains))


def audit_domains(hmm, ref_model, db, options, passers, decoded, searches, show: int = 5,
                  defined=None) -> StageAudit:
    """Compare the domain list of every F3 passer (``passers``) made by hmmgpu's own
    post-filter with libhmmer's (see the module header). ``decoded``: the device's decodings
    of the passers (the cascade's :class:`~hmmgpu.stages.decoded.DecodedTargets`, None on the
    CPU); ``defined``: the passers the device's process defined (the cascade's
    :class:`~hmmgpu.stages.defined.DefinedTargets`, not among ``decoded``; None: none); ``searches``: (hmmgpu's ``TopHits``, pyhmmer's ``TopHits``) of the whole search, for
    each side's Z and domZ."""
    from hmmgpu.cpu.own_postfilter import QueryModel

    if options.seed == 0:
        return StageAudit("domain list: not compared (--seed 0: domain definition's random numbers are arbitrary)")
    ours_search, ref_search = searches
    model = QueryModel.of(hmm, options)
    own = model.covered   # else the search runs pyhmmer's pipeline on every passer
    ref = _libhmmer_domains(hmm, ref_model, db, options, passers, ref_search)
    label = f"domain list ({sum(len(domains) for _, domains in ref)} domains; p7_domaindef, p7_Pipeline scores) [numba"
    if decoded is not None:
        on_gpu = int(np.isin(passers, decoded.indices).sum())
        by_gpu = int(np.isin(passers, defined.indices).sum()) if defined is not None else 0
        label += f", {on_gpu + by_gpu} decoded on the GPU" + (f", {by_gpu} of them defined there" if by_gpu else "")
    res = StageAudit(label + "]", compared=int(len(passers)))
    by_libhmmer = 0
    for t, theirs in zip(np.asarray(passers).tolist(), ref):
        ours = _own_domains(model, db, t, decoded, defined, ours_search) if own else None
        if ours is None:
            ours = theirs
            by_libhmmer += 1
        difference = _first_difference(ours, theirs)
        if difference is None:
            res.agree += 1
        elif len(res.examples) < show:
            res.examples.append(f"{db.name(t).decode(errors='replace')}: {difference}")
    if by_libhmmer:
        res.stage += f" ({by_libhmmer} by libhmmer)"
    return res


def search_both(hmm, db, backend, options) -> tuple:
    """hmmgpu's search of ``hmm`` (in hmmsearch's float mode, as the command line runs it) and a
    full pyhmmer search (in the calling thread's mode): their ``TopHits``."""
    import pyhmmer.plan7 as p7

    from hmmgpu.search.engine import SearchEngine

    ours = next(iter(SearchEngine(db, options, backend, ftz=True).search([hmm]))).hits
    ref = p7.Pipeline(hmm.alphabet, **options.pipeline_kwargs()).search_hmm(hmm, db.block())
    return ours, ref


def audit_hits(ours, ref, show: int = 5) -> StageAudit:
    """Compare hmmgpu's final hits (tblout and domtblout rows, counters) with a full pyhmmer
    search (:func:`search_both`'s two ``TopHits``)."""
    rows = []
    for fmt in ("targets", "domains"):
        a, b = io.BytesIO(), io.BytesIO()
        ours.write(a, format=fmt, header=False)
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
    mine = ours.__getstate__()["pipeline"]
    for name in counters:
        if mine[name] == theirs[name]:
            agree += 1
        elif len(res.examples) < show:
            res.examples.append(f"{name}: hmmgpu {mine[name]} vs pyhmmer {theirs[name]}")
    if len(ours) == len(ref):
        agree += 1
    elif len(res.examples) < show:
        res.examples.append(f"hits kept: hmmgpu {len(ours)} vs pyhmmer {len(ref)}")
    res.agree = agree
    return res


def audit_model(hmm, db, backend, options, show: int = 5) -> list:
    """Every row of one model's audit (see the module header), in the calling thread's float mode."""
    from hmmgpu.cpu.hmmerlib import HmmerModel
    from hmmgpu.stages.profiles import ModelProfile

    rows = audit_filters(hmm, db, backend, show)
    prof = ModelProfile.from_hmm(hmm)
    # the cascade as a search with hmmgpu's own post-filter runs it: the GPU decodes the F3 passers it can promise
    cascade = backend.cascade(prof, options.replace(postfilter="hmmgpu"))
    searches = search_both(hmm, db, backend, options)
    with HmmerModel(hmm) as ref_model:
        forward, passers = audit_forward(prof, ref_model, db, backend, options, cascade.past_vit, show)
        rows += [forward, audit_backward(prof, ref_model, db, backend, passers, show),
                 audit_domains(hmm, ref_model, db, options, passers, cascade.decoded, searches, show,
                               defined=cascade.defined)]
    return rows + [audit_hits(*searches, show)]


def run_audit(hmmfile, seqdb, options, show=5, console=None) -> bool:
    """Audit every model of ``hmmfile`` against ``seqdb``, print a table per model; True if all
    agree. Everything runs in hmmsearch's float mode (flush-to-zero), as ``hmmgpu search`` does."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from hmmgpu.formats.checks import check_model, check_target_lengths
    from hmmgpu.formats.hmmfile import read_models
    from hmmgpu.formats.seqdb import open_database
    from hmmgpu.host import flush_to_zero
    from hmmgpu.search.routing import select_backend

    console = console or Console()
    db = open_database(seqdb)
    check_target_lengths(db)
    backend = select_backend(options.run, db, gpu_process=False)
    ok = True
    try:
        for hmm in (model.hmm for model in read_models(hmmfile)):
            check_model(hmm, options)
            with flush_to_zero():
                stages = audit_model(hmm, db, backend, options, show)
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
