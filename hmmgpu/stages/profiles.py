"""Quantized profile tables of HMMER 3.4's filters, built from a pyhmmer HMM.

Everything here follows docs/algorithms.md: byte costs for SSV/MSV (§3), word scores for
the Viterbi filter (§6), per-length scalars (§2.2), and a striped layout for vector kernels
(§3.6). Tables are per node (node ``k`` in
column ``k - 1``) unless striped.

Float steps reproduce C exactly: float32 products and quotients through numpy float32,
C ``roundf`` (half away from zero), and glibc's ``logf``/``log`` called through ctypes,
the same functions HMMER calls; the per-length tables call them over whole arrays through
Easel's ``esl_vec_FLog``/``esl_vec_DLog`` (pyhmmer's libeasel: the same C library functions
in a C loop), checked against the one-by-one calls before use.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import math
import struct
from dataclasses import dataclass, field

import numpy as np

from hmmgpu.constants import BASE_B, BASE_W, K, MAX_TARGET_LENGTH, SCALE_B, SCALE_W
from hmmgpu.stages.forward import ForwardTables

_libm = ctypes.CDLL(ctypes.util.find_library("m"))
_libm.logf.restype = ctypes.c_float
_libm.logf.argtypes = [ctypes.c_float]
_libm.log.restype = ctypes.c_double
_libm.log.argtypes = [ctypes.c_double]

F32 = np.float32
NEG_INF = F32(-np.inf)

# HMM transition indices (p7H_*) in pyhmmer's HMM.transition_probabilities.
_H_MM, _H_MI, _H_MD, _H_IM, _H_II, _H_DM, _H_DD = range(7)
#: Row order of :attr:`WordProfile.tw`.
TW_ROWS = ("BM", "MM", "IM", "DM", "MD", "MI", "II", "DD")


def logf(x) -> np.float32:
    """glibc ``logf`` (float in, float out), as HMMER calls it."""
    return F32(_libm.logf(float(F32(x))))


def clog(x) -> np.float32:
    """C ``(float) log((double) x)``: double-precision libm log stored as float."""
    x = float(x)
    return NEG_INF if x == 0.0 else F32(_libm.log(x))


def clog_array(x) -> np.ndarray:
    """:func:`clog` of an array: numpy's double log, and glibc's where rounding could differ.

    numpy's and glibc's double ``log`` agree to a few units in the last place; the float
    rounding of the result can only differ where the double lies that close to a float
    rounding boundary, which the margin (2^-44 relative, thousands of units) detects.
    """
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.log(x)
        margin = np.abs(r) * 2.0 ** -44
        unsure = (r - margin).astype(F32) != (r + margin).astype(F32)
    out = r.astype(F32)
    for i in np.flatnonzero(unsure):
        out.flat[i] = clog(x.flat[i])
    return out


def roundf(v: np.ndarray) -> np.ndarray:
    """C ``roundf`` (half away from zero) of float32 values, exactly, returned as float64."""
    v = np.asarray(v, dtype=np.float64)  # float32 -> float64 is exact, and so is |v| + 0.5
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(v), np.copysign(np.floor(np.abs(v) + 0.5), v), v)


def _cost(s: np.ndarray) -> np.ndarray:
    """``-roundf(scale_b * s)`` in float (+inf for s = -inf)."""
    return -roundf(F32(SCALE_B) * np.asarray(s, dtype=F32))


def unbiased_byteify(s) -> np.ndarray:
    """HMMER's ``unbiased_byteify``: cost in 1/3 bits, saturated at 255 (input <= 0)."""
    c = _cost(s)
    return np.where(c > 255, 255, c).astype(np.int64)


def biased_byteify(s, bias: int) -> np.ndarray:
    """HMMER's ``biased_byteify``: cost + bias, 255 when it would exceed 255."""
    c = _cost(s)
    with np.errstate(invalid="ignore"):
        out = np.where(c > 255 - bias, 255, np.nan_to_num(c, posinf=0) + bias)
    return out.astype(np.int64) & 0xFF


def wordify(s) -> np.ndarray:
    """HMMER's ``wordify``: score in 1/500 bits, saturated to int16 (-inf -> -32768)."""
    v = roundf(F32(SCALE_W) * np.asarray(s, dtype=F32))
    return np.clip(np.nan_to_num(v, posinf=32767, neginf=-32768), -32768, 32767).astype(np.int64)


def configured_profile(hmm):
    """pyhmmer ``Profile`` configured as hmmsearch configures it (multihit local, L = 100)."""
    import pyhmmer.plan7 as p7

    gm = p7.Profile(hmm.M, hmm.alphabet)
    gm.configure(hmm, p7.Background(hmm.alphabet), 100)
    return gm


def match_scores(gm) -> np.ndarray:
    """Float match emission scores ``msc[x][k]`` (KP, M) of a configured pyhmmer ``Profile``."""
    rsc = np.asarray(gm.emission_scores, dtype=F32)  # (KP, 2(M+1)): match/insert interleaved
    return np.ascontiguousarray(rsc[:, 2::2][:, : gm.M])


def transition_scores(hmm) -> np.ndarray:
    """Float transition scores ``tsc[k][t]`` of ``p7_ProfileConfig(..., p7_LOCAL)``.

    Shape (M + 1, 8), columns MM, IM, DM, BM, MD, DD, MI, II (``p7P_*``); row k holds the
    transitions leaving node k, and ``[k-1, BM]`` is the local entry into M_k.

    The occupancy recurrence runs on Python floats, each float operation rounded to float32
    by :func:`_f32`: a sum or product of two float32 values is exact or correctly rounded in
    double, so rounding it once more to float32 gives the float32 operation's result.
    """
    M = hmm.M
    t = np.asarray(hmm.transition_probabilities, dtype=F32)
    tsc = np.full((M + 1, 8), NEG_INF, dtype=F32)
    # Occupancy: float products, the (1.0 - occ) term in double (C promotion), stored as float.
    stay = (t[:, _H_MM] + t[:, _H_MI]).tolist()  # float32 sums
    enter_from_delete = t[:, _H_DM].tolist()
    occ = [0.0] * (M + 1)
    occ[1] = stay[0]
    for k in range(2, M + 1):
        previous = occ[k - 1]
        occ[k] = _f32(_f32(previous * stay[k - 1]) + (1.0 - previous) * enter_from_delete[k - 1])
    Z = 0.0
    for k in range(1, M + 1):
        Z = _f32(Z + _f32(occ[k] * (M - k + 1)))
    tsc[:M, 3] = clog_array(np.array(occ[1:], F32) / F32(Z))
    tsc[1:M, [0, 1, 2, 4, 5, 6, 7]] = clog_array(t[1:M][:, [_H_MM, _H_IM, _H_DM, _H_MD, _H_DD, _H_MI, _H_II]])
    return tsc


_FLOAT32 = struct.Struct("f")


def _f32(x: float) -> float:
    """``x`` rounded to float32 (to nearest, as a C float store), as a Python float."""
    return _FLOAT32.unpack(_FLOAT32.pack(x))[0]


def stripe(per_node: np.ndarray, n_lanes: int, pad) -> np.ndarray:
    """Striped layout: (R, M) -> (R, Q, n_lanes), node k at ``[:, (k-1) % Q, (k-1) // Q]``.

    ``Q = max(1, ceil(M / n_lanes))``; lanes past node M hold ``pad``.
    """
    per_node = np.asarray(per_node)
    R, M = per_node.shape
    Q = max(1, -(-M // n_lanes))
    out = np.full((R, n_lanes * Q), pad, dtype=per_node.dtype)
    out[:, :M] = per_node
    # column c = z*Q + q holds node c+1: reshape to (R, z, q) then swap to (R, q, z)
    return np.ascontiguousarray(out.reshape(R, n_lanes, Q).transpose(0, 2, 1))


@dataclass(frozen=True)
class ByteProfile:
    """SSV/MSV byte costs (docs/algorithms.md §3): ``cost`` uint8 (KP, M), ``ssv_cost`` int8 (KP, M)."""

    M: int
    cost: np.ndarray
    ssv_cost: np.ndarray
    bias_b: int
    tbm_b: int
    tec_b: int
    base_b: int = BASE_B
    scale_b: np.float32 = SCALE_B

    @classmethod
    def from_scores(cls, msc: np.ndarray) -> "ByteProfile":
        """Quantize float match scores ``msc`` (KP, M) as ``mf_conversion``/``sf_conversion`` do."""
        M = msc.shape[1]
        mx = max(0.0, float(np.max(msc[:K]))) if M else 0.0
        bias = int(unbiased_byteify(-F32(mx)))
        cost = biased_byteify(msc, bias).astype(np.uint8)
        ssv = np.minimum(cost.astype(np.int64) - bias, 127).astype(np.int8)
        tbm = int(unbiased_byteify(logf(F32(2.0) / (F32(M) * F32(M + 1)))))
        tec = int(unbiased_byteify(logf(0.5)))
        return cls(M=M, cost=cost, ssv_cost=ssv, bias_b=bias, tbm_b=tbm, tec_b=tec)



@dataclass(frozen=True)
class WordProfile:
    """Viterbi-filter words (docs/algorithms.md §6): ``rw`` int16 (KP, M); ``tw`` int16 (8, M), rows :data:`TW_ROWS`."""

    M: int
    rw: np.ndarray
    tw: np.ndarray
    ddbound: int
    xw_e_move: int = -500
    xw_e_loop: int = -500
    base_w: int = BASE_W
    scale_w: np.float32 = SCALE_W

    @classmethod
    def from_scores(cls, msc: np.ndarray, tsc: np.ndarray) -> "WordProfile":
        """Quantize match and transition scores as ``vf_conversion`` does."""
        M = msc.shape[1]
        rw = wordify(msc).astype(np.int16)
        w = wordify(tsc)  # (M+1, 8) in p7P order MM IM DM BM MD DD MI II
        lo = np.int64(-32768)
        tw = np.full((8, M), lo, dtype=np.int64)
        into = w[:M]  # row k-1: transitions into node k
        tw[0] = np.minimum(into[:, 3], 0)  # BM
        tw[1] = np.minimum(into[:, 0], 0)  # MM
        tw[2] = np.minimum(into[:, 1], 0)  # IM
        tw[3] = np.minimum(into[:, 2], 0)  # DM
        out = w[1:M]  # row k for k < M: transitions out of node k
        tw[4, : M - 1] = np.minimum(out[:, 4], 0)  # MD
        tw[5, : M - 1] = np.minimum(out[:, 6], 0)  # MI
        tw[6, : M - 1] = np.minimum(out[:, 7], -1)  # II
        tw[7, : M - 1] = out[:, 5]  # DD
        # max over k = 2 .. M-2 of DD(k) + DM(k+1) - BM(k+1), at least -32768
        dd = w[2:M - 1, 5] + w[3:M, 2] - w[3:M, 3]
        ddbound = max(-32768, int(dd.max())) if dd.size else -32768
        return cls(M=M, rw=rw, tw=tw.astype(np.int16), ddbound=ddbound)


#: Easel's amino degeneracies: the canonical residues each of codes 21..26 (B, J, Z, O, U, X) stands for.
DEGENERATE_MEMBERS = {21: (2, 11), 22: (7, 9), 23: (3, 13), 24: (8,), 25: (1,), 26: tuple(range(K))}


def bias_emission_odds(bg_freq: np.ndarray, compo: np.ndarray) -> np.ndarray:
    """``eo[x][s]`` (29, 2) float32 of the bias filter's two-state HMM (``esl_hmm_Configure``)."""
    f = np.asarray(bg_freq, dtype=F32)[:20]
    e = (f, np.asarray(compo, dtype=F32)[:20])
    eo = np.ones((29, 2), dtype=F32)
    for s in range(2):
        eo[:20, s] = (e[s] / f).astype(F32)
        for x, members in DEGENERATE_MEMBERS.items():
            num = F32(0.0)
            den = F32(0.0)
            for y in members:
                num = F32(num + e[s][y])
                den = F32(den + f[y])
            eo[x, s] = F32(num / den) if den > 0 else F32(0.0)
    return eo




@dataclass(frozen=True)
class BiasProfile:
    """The bias filter's two-state HMM of one model (``p7_bg_SetFilter``, docs/algorithms.md §8.2)."""

    emission_odds: np.ndarray  #: float32 (29, 2): ``eo[x][state]`` as ``esl_hmm_Configure`` makes it
    t10: np.float32  #: model state -> background state
    t11: np.float32  #: model state -> model state

    @classmethod
    def from_composition(cls, M: int, compo: np.ndarray) -> "BiasProfile":
        L1 = F32(F32(M) / 8.0)
        return cls(emission_odds=bias_emission_odds(background_frequencies(), compo),
                   t10=F32(F32(1.0) / F32(L1 + F32(1.0))), t11=F32(L1 / F32(L1 + F32(1.0))))


@functools.lru_cache(maxsize=None)
def background_frequencies() -> np.ndarray:
    """HMMER's amino background frequencies (``p7_AminoFrequencies``), float32 (20,)."""
    import pyhmmer.plan7 as p7
    from pyhmmer.easel import Alphabet

    f = np.asarray(p7.Background(Alphabet.amino()).residue_frequencies, dtype=F32)[:K].copy()
    f.setflags(write=False)
    return f


@dataclass(frozen=True)
class ModelProfile:
    """Everything hmmgpu's filters need for one query model."""

    name: str
    M: int
    byte: ByteProfile
    word: WordProfile
    evalue_parameters: tuple  #: (MMU, MLAMBDA, VMU, VLAMBDA, FTAU, FLAMBDA)
    bias: BiasProfile  #: the composition bias filter's HMM
    hmm: object = field(default=None, repr=False, compare=False)  #: the pyhmmer HMM it was built from
    #: HMMER's striped Forward tables (:class:`~hmmgpu.stages.forward.ForwardTables`), read from
    #: the optimized profile of the configured profile it was built from
    forward: object = field(default=None, repr=False, compare=False)

    @classmethod
    def from_hmm(cls, hmm, mmu: float | None = None) -> "ModelProfile":
        """Build the filter tables of a protein ``pyhmmer.plan7.HMM``."""
        return cls.from_profile(hmm, configured_profile(hmm), mmu=mmu)

    @classmethod
    def from_profile(cls, hmm, gm, mmu: float | None = None) -> "ModelProfile":
        """The filter tables from ``hmm`` and its profile ``gm`` configured as hmmsearch
        configures it. ``mmu``: the model's MSV location parameter (``STATS LOCAL MSV``) when
        the caller read it from the file."""
        msc = match_scores(gm)
        om = gm.to_optimized()
        # om->compo as p7_pli_NewModel hands it to p7_bg_SetFilter: the model's COMPO line
        # (which p7_oprofile_Convert copies), or the optimized profile's zeros without one
        compo = hmm.composition if hmm.composition is not None else om.compositions
        return cls(
            name=_text(hmm.name),
            M=hmm.M,
            byte=ByteProfile.from_scores(msc),
            word=WordProfile.from_scores(msc, transition_scores(hmm)),
            evalue_parameters=evalue_parameters(hmm, mmu),
            bias=BiasProfile.from_composition(hmm.M, np.asarray(compo, dtype=F32)[:K]),
            hmm=hmm,
            forward=ForwardTables.from_optimized(om) if om.multihit and om.local else None,
        )


def evalue_parameters(hmm, mmu: float | None = None) -> tuple:
    """``(MMU, MLAMBDA, VMU, VLAMBDA, FTAU, FLAMBDA)`` as float32 values widened to float.

    All NaN for a model without STATS lines (never calibrated by hmmbuild). ``mmu``: MMU
    when the caller read it from the file (pyhmmer 0.12.3's ``EvalueParameters.m_mu`` raises);
    else the model's own ``evparam[p7_MMU]``, which pyhmmer's pipeline reads too: for a model
    made in memory (``pyhmmer.plan7.Builder``) it has more digits than the file's ``%.4f`` would.
    """
    ep = hmm.evalue_parameters
    if ep.m_lambda is None:
        return (math.nan,) * 6
    vals = list(ep.as_vector())  # evparam, p7_MMU first
    if mmu is not None:
        vals[0] = mmu
    return tuple(float(F32(v)) for v in vals)


def _text(v) -> str:
    return v.decode() if isinstance(v, (bytes, bytearray)) else str(v or "")


# ---------------------------------------------------------------- per-length tables


@functools.lru_cache(maxsize=None)
def _logs_one_by_one() -> tuple:
    """glibc ``logf`` over a float32 array and ``log`` over a float64 array, one call per element."""
    return (lambda x: np.array([logf(v) for v in np.asarray(x, F32)], dtype=F32),
            lambda x: np.array([_libm.log(float(v)) for v in np.asarray(x, np.float64)], dtype=np.float64))


@functools.lru_cache(maxsize=None)
def _array_logs() -> tuple:
    """(``logf`` over a float32 array, ``log`` over a float64 array): Easel's ``esl_vec_FLog`` and
    ``esl_vec_DLog``, which call the C library's ``logf``/``log`` in a C loop, where a sample
    of 257 values in (0, 1] gives the one-by-one calls' bits; else those calls (0.3 s for a
    database's 65,536 lengths, against 0.006 s)."""
    import os

    import pyhmmer

    one_by_one = _logs_one_by_one()
    try:
        easel = ctypes.CDLL(os.path.join(os.path.dirname(pyhmmer.__file__), os.pardir, "pyhmmer.libs",
                                         "liblibeasel.so"))
        functions = easel.esl_vec_FLog, easel.esl_vec_DLog
    except (OSError, AttributeError):
        return one_by_one
    for fn in functions:
        fn.restype, fn.argtypes = None, [ctypes.c_void_p, ctypes.c_int]

    def over(fn, dtype):
        def apply(x):
            out = np.array(x, dtype=dtype)  # a copy the C loop overwrites
            fn(out.ctypes.data, out.size)
            return out
        return apply

    arrays = over(functions[0], F32), over(functions[1], np.float64)
    sample = np.linspace(1e-6, 1.0, 257, dtype=F32)
    for mine, theirs, dtype in zip(arrays, one_by_one, (F32, np.float64)):
        if mine(sample.astype(dtype)).tobytes() != theirs(sample.astype(dtype)).tobytes():
            return one_by_one
    return arrays


@functools.lru_cache(maxsize=None)
def _length_tables(max_len: int, logs=None):
    """``tjb``, the Viterbi filter's move word, the null score and the bias filter's two
    length-model terms for every length 0..max_len, as HMMER computes them per target
    (``logs``: :func:`_array_logs` unless given)."""
    flogs, dlogs = logs or _array_logs()
    L = np.arange(max_len + 1)
    logp = flogs((F32(3.0) / (L + 3).astype(F32)).astype(F32))  # pmove = 3 / (L + 3)
    tjb = unbiased_byteify(logp).astype(np.uint8)
    xw_move = wordify(logp).astype(np.int16)
    p1 = (L.astype(F32) / (L + 1).astype(F32)).astype(F32)
    p = p1.astype(np.float64)
    # L = 0 gives 0 * -inf and log(0): never used (empty targets are skipped)
    with np.errstate(invalid="ignore", divide="ignore"):
        nullsc = (L * dlogs(p) + dlogs(1.0 - p)).astype(F32)  # in double, as p7_bg_NullOne
        first = (L.astype(F32) * flogs(p1)).astype(F32)
    nullsc[0] = np.nan
    second = flogs((1.0 - p).astype(F32))
    for a in (tjb, xw_move, nullsc, first, second):
        a.setflags(write=False)
    return tjb, xw_move, nullsc, first, second


def _check_len(max_len: int) -> int:
    max_len = int(max_len)
    if not 0 <= max_len <= MAX_TARGET_LENGTH:
        raise ValueError(f"target length {max_len} outside 0..{MAX_TARGET_LENGTH}")
    # share one cached table per power-of-two bucket
    return min(MAX_TARGET_LENGTH, 1 << max(10, (max_len).bit_length()))


def tjb_table(max_len: int) -> np.ndarray:
    """``tjb_b`` (uint8) for every target length 0..max_len (docs/algorithms.md §3.4)."""
    return _length_tables(_check_len(max_len))[0][: max_len + 1]


def xw_move_table(max_len: int) -> np.ndarray:
    """Viterbi-filter N/C/J move word (int16) for every target length (docs/algorithms.md §6.3)."""
    return _length_tables(_check_len(max_len))[1][: max_len + 1]


def bias_length_terms(max_len: int) -> tuple:
    """The bias filter's length-model terms for every length: ``f32(L * logf(p1))`` and
    ``logf(f32(1 - double(p1)))`` with ``p1 = f32(L / (L + 1))`` (float32 arrays)."""
    return _length_tables(_check_len(max_len))[3][: max_len + 1], _length_tables(_check_len(max_len))[4][: max_len + 1]


def null_table(max_len: int) -> np.ndarray:
    """Null model score ``p7_bg_NullOne`` in nats (float32) for every target length (docs/algorithms.md §8.1)."""
    return _length_tables(_check_len(max_len))[2][: max_len + 1]


# ---------------------------------------------------------------- integer -> float scores


def msv_score(xj, tjb) -> np.ndarray:
    """MSV/SSV nats from the integer J value: ``((xJ - tjb) - 190) / scale_b - 3`` in float."""
    d = (np.asarray(xj, dtype=np.int64) - np.asarray(tjb, dtype=np.int64)).astype(F32)
    s = (d - F32(BASE_B)).astype(F32)
    s = (s / SCALE_B).astype(F32)
    return (s - F32(3.0)).astype(F32)


def viterbi_score(xc, xw_move) -> np.ndarray:
    """Viterbi-filter nats from the integer C value (-inf where C is -32768)."""
    xc = np.asarray(xc, dtype=np.int64)
    s = (xc.astype(F32) + np.asarray(xw_move).astype(F32)).astype(F32)
    s = ((s - F32(BASE_W)).astype(F32) / SCALE_W).astype(F32)
    s = (s - F32(3.0)).astype(F32)
    return np.where(xc > -32768, s, NEG_INF).astype(F32)


__all__ = [
    "ByteProfile", "WordProfile", "ModelProfile", "stripe", "tjb_table", "xw_move_table",
    "null_table", "msv_score", "viterbi_score", "configured_profile", "match_scores", "transition_scores", "TW_ROWS",
]
