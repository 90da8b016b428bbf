"""HMMER's filter cascade (spec section 7.3) over a sequence database, with per-stage counters.

hmmgpu's own filters (a :mod:`hmmgpu.backends` backend) decide which targets survive
MSV, the bias filter and the Viterbi filter; the survivors go to pyhmmer's pipeline at
their database positions among empty placeholders (:func:`write_positional_fasta`), so pyhmmer
counts Z exactly as a full serial ``hmmsearch`` does while computing Forward, Backward and
domain definition for the survivors only: the hits are those of a full run.
"""
from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields

import numpy as np
from numba import njit

from . import cpu_filters
from .constants import AMINO_SYMBOLS, LOG2, MAX_TARGET_LENGTH, STATUS_RANGE
from .errors import HmmgpuError
from .fpenv import flush_to_zero
from .profiles import ModelProfile, msv_score, null_table, tjb_table, viterbi_score, xw_move_table

F32 = np.float32


@dataclass
class SearchOptions:
    """Reporting, inclusion and filter thresholds, with pyhmmer's option names and defaults."""

    E: float = 10.0
    T: float | None = None
    domE: float = 10.0
    domT: float | None = None
    incE: float = 0.01
    incT: float | None = None
    incdomE: float = 0.01
    incdomT: float | None = None
    F1: float = 0.02
    F2: float = 1e-3
    F3: float = 1e-5
    bias_filter: bool = True
    null2: bool = True
    seed: int = 42
    Z: float | None = None
    domZ: float | None = None
    bit_cutoffs: str | None = None  #: "gathering", "trusted" or "noise"

    @classmethod
    def from_kwargs(cls, **kwargs) -> "SearchOptions":
        """Options from pyhmmer-style keyword arguments; unknown names raise HmmgpuError."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - names)
        if unknown:
            raise HmmgpuError(f"unknown search option(s): {', '.join(unknown)}")
        opts = cls(**kwargs)
        for name in ("F1", "F2", "F3"):
            v = getattr(opts, name)
            if not 0.0 < v <= 1.0:
                raise HmmgpuError(f"{name} must be in (0, 1], got {v}")
        if opts.bit_cutoffs not in (None, "gathering", "trusted", "noise"):
            raise HmmgpuError(f"bit_cutoffs must be gathering, trusted or noise, not {opts.bit_cutoffs!r}")
        return opts

    def pyhmmer_kwargs(self) -> dict:
        """Keyword arguments for ``pyhmmer.plan7.Pipeline``."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass
class StageCounts:
    """hmmsearch's per-query pipeline statistics."""

    query: str = ""
    M: int = 0
    nseqs: int = 0
    nres: int = 0
    n_past_msv: int = 0
    n_past_bias: int = 0
    n_past_vit: int = 0
    n_past_fwd: int = 0
    n_reported: int = 0
    n_included: int = 0
    seconds: dict = field(default_factory=dict)  #: wall time of each stage


# ---------------------------------------------------------------- exact P-values (Easel)


@njit(cache=True)
def _gumbel_surv(x, mu, lam):
    y = lam * (x - mu)
    ey = -math.exp(-y)
    if abs(ey) < 5e-9:
        return -ey
    return 1.0 - math.exp(ey)


@njit(cache=True)
def _bits(sc, base):
    """``(float)((sc - base) / eslCONST_LOG2)``: float subtraction, double division."""
    return np.float32(np.float64(np.float32(sc - base)) / LOG2)


@njit(cache=True)
def gumbel_pvalues(scores, base, mu, lam):
    """P-values of filter scores (nats) against per-target null scores, as ``p7_Pipeline``."""
    out = np.empty(scores.shape[0], np.float64)
    for i in range(scores.shape[0]):
        out[i] = _gumbel_surv(np.float64(_bits(scores[i], base[i])), mu, lam)
    return out


@njit(cache=True)
def _msv_thresholds(tjb, nullsc, mu, lam, F1, scale_b):
    """Smallest integer xJ that passes F1 at each length (256: none does)."""
    thr = np.full(tjb.shape[0], 256, np.int32)
    for L in range(1, tjb.shape[0]):
        lo, hi = 0, 256
        while lo < hi:
            mid = (lo + hi) // 2
            s = np.float32(np.float32(mid - np.int32(tjb[L])) - np.float32(190.0))
            s = np.float32(np.float32(s / scale_b) - np.float32(3.0))
            if _gumbel_surv(np.float64(_bits(s, nullsc[L])), mu, lam) <= F1:
                hi = mid
            else:
                lo = mid + 1
        thr[L] = lo
    return thr


def msv_thresholds(prof: ModelProfile, max_len: int, F1: float) -> np.ndarray:
    """Per-length integer F1 threshold on xJ, exactly equivalent to HMMER's P-value test."""
    mu, lam = prof.evalue_parameters[0], prof.evalue_parameters[1]
    return _msv_thresholds(tjb_table(max_len), null_table(max_len), mu, lam, F1, prof.byte.scale_b)


# ---------------------------------------------------------------- the cascade


def check_target_lengths(db) -> None:
    """hmmsearch stops on a target over 100,000 residues: so does hmmgpu, before searching."""
    if db.n and int(db.max_length) > MAX_TARGET_LENGTH:
        i = int(np.argmax(db.lengths))
        name = db.name(i).decode(errors="replace")
        raise HmmgpuError(
            f"target sequence '{name}' is {int(db.lengths[i])} residues long, over HMMER's "
            f"comparison pipeline limit of {MAX_TARGET_LENGTH} (hmmsearch refuses it too)"
        )


def check_protein_model(hmm) -> None:
    """hmmgpu searches protein databases with protein models."""
    if not hmm.alphabet.is_amino():
        kind = "DNA" if hmm.alphabet.is_dna() else "RNA" if hmm.alphabet.is_rna() else "non-protein"
        raise HmmgpuError(
            f"model '{_text(hmm.name)}' is a {kind} model; hmmgpu searches protein sequences "
            "with protein models (use nhmmer for nucleotide searches)"
        )


def check_cutoffs(hmm, bit_cutoffs) -> None:
    """``--cut_ga/--cut_tc/--cut_nc`` need the model's GA/TC/NC lines, as in hmmsearch."""
    if bit_cutoffs is None:
        return
    c = hmm.cutoffs
    present = {"gathering": c.gathering_available, "trusted": c.trusted_available,
               "noise": c.noise_available}[bit_cutoffs]
    if not present():
        tag = {"gathering": "GA", "trusted": "TC", "noise": "NC"}[bit_cutoffs]
        raise HmmgpuError(f"model '{_text(hmm.name)}' has no {tag} bit score cutoffs (needed by --cut_{tag.lower()})")


def filter_cascade(prof: ModelProfile, db, backend, opts: SearchOptions, bg_freq, counts: StageCounts):
    """Run MSV, bias and Viterbi filters; return the database indices that survive them all."""
    mu, lam, vmu, vlam = prof.evalue_parameters[:4]
    max_len = max(int(db.max_length), 1)
    nullsc = null_table(max_len)
    clock = time.perf_counter()

    thr = msv_thresholds(prof, max_len, opts.F1)
    idx, status, xj = backend.msv(prof, thr)
    lengths = db.lengths[idx]
    usc = np.where(status == STATUS_RANGE, F32(np.inf), msv_score(xj, tjb_table(max_len)[lengths])).astype(F32)
    null = nullsc[lengths]
    P = gumbel_pvalues(usc, null, mu, lam)
    if not (P <= opts.F1).all():  # the integer thresholds are exact: this never fires
        raise AssertionError("MSV integer thresholds disagree with the P-value test")
    counts.n_past_msv = int(idx.size)
    counts.seconds["msv"] = time.perf_counter() - clock

    clock = time.perf_counter()
    if opts.bias_filter and idx.size:
        filtersc = cpu_filters.bias_filter(prof, db, idx, bg_freq)
        P = gumbel_pvalues(usc, filtersc, mu, lam)
        keep = P <= opts.F1
        idx, usc, filtersc, P = idx[keep], usc[keep], filtersc[keep], P[keep]
    else:
        filtersc = null
    counts.n_past_bias = int(idx.size)
    counts.seconds["bias"] = time.perf_counter() - clock

    clock = time.perf_counter()
    need_vit = P > opts.F2  # targets whose MSV P-value is already <= F2 skip the Viterbi filter
    if need_vit.any():
        vidx = idx[need_vit]
        vstatus, xc = backend.viterbi(prof, vidx)
        vsc = np.where(vstatus == STATUS_RANGE, F32(np.inf),
                       viterbi_score(xc, xw_move_table(max_len)[db.lengths[vidx]])).astype(F32)
        Pv = gumbel_pvalues(vsc, filtersc[need_vit], vmu, vlam)
        passed = ~need_vit
        passed[need_vit] = Pv <= opts.F2
        idx = idx[passed]
    counts.n_past_vit = int(idx.size)
    counts.seconds["viterbi"] = time.perf_counter() - clock
    return idx


def search_hmm(hmm, db, backend, opts: SearchOptions, bg_freq=None, threads: int = 1, ftz: bool = False):
    """Search one protein model against ``db``: (pyhmmer ``TopHits``, :class:`StageCounts`).

    The hits, their order, scores, E-values and the pipeline counters stored in the
    ``TopHits`` are those of a full serial pyhmmer/hmmsearch run over the whole database.
    ``threads`` runs the pyhmmer stage in parallel parts; ``ftz`` computes it in the
    hmmsearch program's float mode (:mod:`hmmgpu.fpenv`).
    """
    import pyhmmer.plan7 as p7

    check_protein_model(hmm)
    check_cutoffs(hmm, opts.bit_cutoffs)
    if hmm.evalue_parameters.m_lambda is None:
        raise HmmgpuError(f"model '{_text(hmm.name)}' has no E-value calibration (no STATS lines); "
                          "build it with hmmbuild")
    counts = StageCounts(query=_text(hmm.name), M=hmm.M, nseqs=int(db.n), nres=int(db.total_residues))
    kwargs = opts.pyhmmer_kwargs()
    start = time.perf_counter()
    if backend.name == "hmmer":
        with flush_to_zero(ftz):
            hits = p7.Pipeline(hmm.alphabet, **kwargs).search_hmm(hmm, backend.block)
        state = hits.__getstate__()["pipeline"]
        counts.n_past_msv, counts.n_past_bias, counts.n_past_vit = (
            state["n_past_msv"], state["n_past_bias"], state["n_past_vit"])
    else:
        if bg_freq is None:
            bg_freq = np.asarray(p7.Background(hmm.alphabet).residue_frequencies, dtype=F32)
        prof = ModelProfile.from_hmm(hmm)
        survivors = filter_cascade(prof, db, backend, opts, bg_freq, counts)
        clock = time.perf_counter()
        hits = forward_stage(hmm, db, survivors, kwargs, threads=threads, ftz=ftz)
        counts.seconds["forward"] = time.perf_counter() - clock
        hits = _with_counters(hits, counts)
    counts.n_past_fwd = hits.__getstate__()["pipeline"]["n_past_fwd"]
    counts.n_reported = len(hits.reported)
    counts.n_included = len(hits.included)
    counts.seconds["total"] = time.perf_counter() - start
    return hits, counts


#: Easel's amino symbols by digital code, with '.' for the gap (Easel reads '-' as invalid in FASTA).
_LETTERS = np.frombuffer(AMINO_SYMBOLS.replace("-", ".").encode(), dtype=np.uint8)
_PLACEHOLDER = b">p\n"


def write_positional_fasta(path, db, survivors, length: int) -> None:
    """FASTA of targets ``0..length-1``: the survivors in full, every other target an empty record.

    pyhmmer reading it counts targets as hmmsearch does (the running Z that decides which
    hits are kept) while computing only the survivors: an empty target is counted and
    skipped. Placeholders cost a few bytes each and are parsed in C.
    """
    with open(path, "wb") as out:
        prev = 0
        for t in survivors:
            t = int(t)
            out.write(_PLACEHOLDER * (t - prev))
            desc = db.description(t)
            out.write(b">" + db.name(t) + (b" " + desc if desc else b"") + b"\n")
            out.write(_LETTERS[db.codes(t)].tobytes() + b"\n")
            prev = t + 1
        out.write(_PLACEHOLDER * (int(length) - prev))


def forward_stage(hmm, db, survivors, kwargs: dict, threads: int = 1, ftz: bool = False):
    """pyhmmer's Forward, Backward and domain definition of the survivors, as one serial run.

    With ``threads > 1`` the survivors are split into contiguous ranges of equal residue
    counts; each range runs behind empty placeholders for all targets before it (so the
    running Z of each target is its database position, as in a serial run) and reports its
    own range size as Z; pyhmmer's ``TopHits.merge`` then sums Z to the database size and
    thresholds the union, which equals a single serial run.
    """
    import tempfile

    import pyhmmer.plan7 as p7
    from pyhmmer.easel import Alphabet, SequenceFile

    survivors = np.sort(np.asarray(survivors, np.int64))
    n = int(db.n)
    parts = 1 if survivors.size < 2 else min(int(threads), int(survivors.size))
    if parts > 1:
        cum = np.cumsum(db.lengths[survivors])
        cuts = np.unique(np.searchsorted(cum, cum[-1] * np.arange(1, parts) / parts, side="right"))
        groups = [g for g in np.split(survivors, cuts) if g.size]
    else:
        groups = [survivors]
    bounds = [0] + [int(g[0]) for g in groups[1:]] + [n]

    with tempfile.TemporaryDirectory(prefix="hmmgpu-") as tmp:

        def run(i):
            lo, hi = bounds[i], bounds[i + 1]
            path = f"{tmp}/part{i}.fa"
            write_positional_fasta(path, db, groups[i], hi)
            query = hmm if len(groups) == 1 else hmm.copy()  # no shared model between threads
            with flush_to_zero(ftz), SequenceFile(path, format="fasta", digital=True,
                                                  alphabet=Alphabet.amino()) as targets:
                hits = p7.Pipeline(hmm.alphabet, **kwargs).search_hmm(query, targets)
            if len(groups) == 1:
                return hits
            state = hits.__getstate__()
            state["pipeline"]["nseqs"] = hi - lo
            if kwargs.get("Z") is None:
                state["pipeline"]["Z"] = float(hi - lo)
            return _rebuild(hits, state)

        if len(groups) == 1:
            return run(0)
        with ThreadPoolExecutor(len(groups)) as pool:
            done = list(pool.map(run, range(len(groups))))
    with flush_to_zero(ftz):
        return done[0].merge(*done[1:])


def _rebuild(hits, state):
    """A new ``TopHits`` of the same query from a (modified) ``__getstate__`` dictionary."""
    cls, args = hits.__reduce__()[:2]
    out = cls(*args)
    out.__setstate__(state)
    return out


def _with_counters(hits, counts: StageCounts):
    """The same hits, with the whole-database counters of a full run (nres, n_past_*)."""
    state = hits.__getstate__()
    pli = state["pipeline"]
    pli.update(nseqs=counts.nseqs, nres=counts.nres, n_past_msv=counts.n_past_msv,
               n_past_bias=counts.n_past_bias, n_past_vit=counts.n_past_vit)
    return _rebuild(hits, state)


def _text(v) -> str:
    return v.decode() if isinstance(v, (bytes, bytearray)) else str(v or "")


__all__ = ["SearchOptions", "StageCounts", "filter_cascade", "search_hmm", "gumbel_pvalues",
           "msv_thresholds", "check_target_lengths", "check_protein_model", "check_cutoffs"]
