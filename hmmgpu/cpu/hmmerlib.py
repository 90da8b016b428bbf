"""HMMER's own filter functions through ctypes: the reference oracle for tests and ``hmmgpu audit``.

The C libraries are the ones the pyhmmer wheel ships (``pyhmmer.libs/liblib{easel,hmmer}.so``).
Each model is configured exactly as hmmsearch configures it (docs/algorithms.md §2.2), and each
target gets ``p7_bg_SetLength`` and ``p7_oprofile_ReconfigLength`` before it is scored.

Struct offsets in ``P7_OPROFILE`` were measured with ``offsetof`` against the wheel's headers
(``sizeof(P7_OPROFILE) == 448``); a run-time check refuses a library whose layout differs.
Loading the libraries replaces Easel's exception handler, process-wide, by one that records the
message instead of aborting; pyhmmer then reports such errors as ``UnexpectedError``.
"""
import ctypes
import io
import math
import os

import numpy as np

from hmmgpu.constants import BASE_B, BASE_W, KP, SCALE_B, SCALE_W, STATUS_NORESULT, STATUS_OK, STATUS_RANGE

__all__ = ["HmmerModel", "easel_choices", "easel_uniforms", "libhmmer_available"]

_ESL_AMINO = 3  # eslAMINO
_P7_LOCAL = 1  # p7_LOCAL: multihit local, as hmmsearch
_CONFIG_L = 100  # hmmsearch's length for p7_ProfileConfig
_SENTINEL = 255  # eslDSQ_SENTINEL

# P7_OPROFILE field offsets (x86-64, pyhmmer 0.12.3 wheel).
_OM_RBV = 0  # __m128i **
_OM_SBV = 8  # __m128i **
_OM_TBM_B = 16  # uint8_t
_OM_TEC_B = 17  # uint8_t
_OM_TJB_B = 18  # uint8_t
_OM_SCALE_B = 20  # float
_OM_BASE_B = 24  # uint8_t
_OM_BIAS_B = 25  # uint8_t
_OM_RWV = 32  # __m128i **
_OM_TWV = 40  # __m128i *
_OM_XW = 48  # int16_t [4][2], [E, N, J, C][MOVE, LOOP]
_OM_SCALE_W = 64  # float
_OM_BASE_W = 68  # int16_t
_OM_DDBOUND_W = 70  # int16_t
_OM_RFV = 80  # __m128 **: Forward match emission odds [Kp][Q4]
_OM_TFV = 88  # __m128 *: Forward transitions [8*Q4]
_OM_XF = 96  # float [4][2], [E, N, J, C][MOVE, LOOP]
_OM_EVPARAM = 272  # float [6]: MMU, MLAMBDA, VMU, VLAMBDA, FTAU, FLAMBDA
_OM_COMPO = 320  # float [20]
_COMPO_K = 20  # the amino alphabet's canonical residues (om->compo[p7_MAXABET])
_OM_ABC = 400  # const ESL_ALPHABET *
_OM_M = 412  # int
_OM_MODE = 436  # int
_OM_NJ = 440  # float: expected J uses (1 multihit, 0 unihit)
_HMM_M = 0  # P7_HMM.M (int)
# P7_OMX field offsets (x86-64, impl_sse.h; sizeof(P7_OMX) == 112).
_OX_M = 0  # int
_OX_L = 4  # int
_OX_XMX = 72  # float *: [i * 6 + (E N J B C SCALE)]
_OX_TOTSCALE = 92  # float
_OX_HAS_OWN_SCALES = 96  # int: Backward switched to its own scale factors
_OX_DPF = 8  # __m128 **: rows [i][q * 3 + (M D I)]
# P7_TRACE field offsets (hmmer.h).
_TR_N = 0  # int
_TR_ST = 8  # char *
_TR_K = 16  # int *
_TR_I = 24  # int *
_TR_PP = 32  # float *
_NULL2_CODES = 32  # p7_MAXCODE: the null2 array p7_Null2_ByExpectation fills (Kp used)
_PIPELINE_SEED = 42  # p7_pipeline_Create's default seed (the domaindef RNG, reseeded per region)

_XW_N, _MOVE = 1, 0  # p7O_N, p7O_MOVE
_EXTRA_SB = 17  # p7O_EXTRA_SB

_c = ctypes
_p = _c.c_void_p
_PROTOTYPES = {
    "esl_alphabet_Create": (_p, [_c.c_int]),
    "esl_alphabet_Destroy": (None, [_p]),
    "esl_exception_SetHandler": (None, [_p]),
    "p7_hmmfile_OpenBuffer": (_c.c_int, [_c.c_char_p, _c.c_int, _p]),
    "p7_hmmfile_Read": (_c.c_int, [_p, _p, _p]),
    "p7_hmmfile_Close": (None, [_p]),
    "p7_hmm_Destroy": (None, [_p]),
    "p7_bg_Create": (_p, [_p]),
    "p7_bg_Destroy": (None, [_p]),
    "p7_bg_SetFilter": (_c.c_int, [_p, _c.c_int, _p]),
    "p7_bg_SetLength": (_c.c_int, [_p, _c.c_int]),
    "p7_bg_NullOne": (_c.c_int, [_p, _p, _c.c_int, _p]),
    "p7_bg_FilterScore": (_c.c_int, [_p, _p, _c.c_int, _p]),
    "p7_profile_Create": (_p, [_c.c_int, _p]),
    "p7_profile_Destroy": (None, [_p]),
    "p7_ProfileConfig": (_c.c_int, [_p, _p, _p, _c.c_int, _c.c_int]),
    "p7_oprofile_Create": (_p, [_c.c_int, _p]),
    "p7_oprofile_Destroy": (None, [_p]),
    "p7_oprofile_Convert": (_c.c_int, [_p, _p]),
    "p7_oprofile_ReconfigLength": (_c.c_int, [_p, _c.c_int]),
    "p7_omx_Create": (_p, [_c.c_int, _c.c_int, _c.c_int]),
    "p7_omx_GrowTo": (_c.c_int, [_p, _c.c_int, _c.c_int, _c.c_int]),
    "p7_omx_Destroy": (None, [_p]),
    "p7_SSVFilter": (_c.c_int, [_p, _c.c_int, _p, _p]),
    "p7_MSVFilter": (_c.c_int, [_p, _c.c_int, _p, _p, _p]),
    "p7_ViterbiFilter": (_c.c_int, [_p, _c.c_int, _p, _p, _p]),
    "p7_ForwardParser": (_c.c_int, [_p, _c.c_int, _p, _p, _p]),
    "p7_BackwardParser": (_c.c_int, [_p, _c.c_int, _p, _p, _p, _p]),
    # full matrices, envelope rescoring and domain definition
    "p7_oprofile_ReconfigUnihit": (_c.c_int, [_p, _c.c_int]),
    "p7_oprofile_ReconfigMultihit": (_c.c_int, [_p, _c.c_int]),
    "p7_Forward": (_c.c_int, [_p, _c.c_int, _p, _p, _p]),
    "p7_Backward": (_c.c_int, [_p, _c.c_int, _p, _p, _p, _p]),
    "p7_Decoding": (_c.c_int, [_p, _p, _p, _p]),
    "p7_OptimalAccuracy": (_c.c_int, [_p, _p, _p, _p]),
    "p7_OATrace": (_c.c_int, [_p, _p, _p, _p]),
    "p7_Null2_ByExpectation": (_c.c_int, [_p, _p, _p]),
    "p7_trace_CreateWithPP": (_p, []),
    "p7_trace_Reuse": (_c.c_int, [_p]),
    "p7_trace_Destroy": (None, [_p]),
    "p7_domaindef_Create": (_p, [_p]),
    "p7_domaindef_Destroy": (None, [_p]),
    "p7_domaindef_ByPosteriorHeuristics": (_c.c_int, [_p, _p, _p, _p, _p, _p, _p, _p, _p, _c.c_int, _p, _p, _p]),
    "esl_randomness_CreateFast": (_p, [_c.c_int]),
    "esl_randomness_Destroy": (None, [_p]),
    "esl_sq_CreateDigitalFrom": (_p, [_p, _c.c_char_p, _p, _c.c_int64, _c.c_char_p, _c.c_char_p, _c.c_char_p]),
    "esl_sq_Destroy": (None, [_p]),
}

# Domain definition's own steps (hmmer-domaindef-spec.md sections 1 and 2): the oracle of
# hmmgpu.stages.domaindef and the CPU references it drives.
_PROTOTYPES.update({
    "esl_random": (_c.c_double, [_p]),
    "p7_domaindef_GrowTo": (_c.c_int, [_p, _c.c_int]),
    "p7_DomainDecoding": (_c.c_int, [_p, _p, _p, _p]),
    "p7_StochasticTrace": (_c.c_int, [_p, _p, _c.c_int, _p, _p, _p]),
    "p7_trace_Index": (_c.c_int, [_p]),
    "esl_vec_FSum": (_c.c_float, [_p, _c.c_int64]),
    "esl_vec_FNorm": (None, [_p, _c.c_int64]),
    "esl_rnd_FChoose": (_c.c_int, [_p, _p, _c.c_int]),
})
_TR_NDOM = 48  # int: P7_TRACE.ndom, then the int * arrays tfrom, tto, sqfrom, sqto, hmmfrom, hmmto
_TR_INDEX = 56


def easel_uniforms(seed: int, n: int) -> np.ndarray:
    """The first ``n`` ``esl_random`` draws (float64) of Easel's fast generator after
    ``esl_randomness_CreateFast(seed)``: domain definition's random numbers."""
    lib = _lib()
    rng = lib.esl_randomness_CreateFast(seed)
    try:
        return np.array([lib.esl_random(rng) for _ in range(int(n))], dtype=np.float64)
    finally:
        lib.esl_randomness_Destroy(rng)


def easel_choices(vectors, seed: int) -> tuple:
    """For each float32 row of ``vectors`` (finite, non-negative: Easel aborts on others), in
    order, with one fast generator ``esl_randomness_CreateFast(seed)``: ``esl_vec_FSum`` of the
    row, the row after ``esl_vec_FNorm``, and ``esl_rnd_FChoose`` on the normalised row.
    Returns (sums float32 [n], normalised float32 [n][m], choices int32 [n])."""
    lib = _lib()
    rows = np.array(vectors, dtype=np.float32, ndmin=2)
    if not (np.isfinite(rows).all() and (rows >= 0).all()):
        raise ValueError("esl_rnd_FChoose aborts on NaN, infinite or negative weights")
    sums = np.empty(rows.shape[0], dtype=np.float32)
    choices = np.empty(rows.shape[0], dtype=np.int32)
    rng = lib.esl_randomness_CreateFast(seed)
    try:
        for z, row in enumerate(rows):
            sums[z] = lib.esl_vec_FSum(row.ctypes.data, row.size)
            lib.esl_vec_FNorm(row.ctypes.data, row.size)
            choices[z] = lib.esl_rnd_FChoose(rng, row.ctypes.data, row.size)
    finally:
        lib.esl_randomness_Destroy(rng)
    return sums, rows, choices

_HANDLER_TYPE = _c.CFUNCTYPE(None, _c.c_int, _c.c_int, _c.c_char_p, _c.c_int, _c.c_char_p, _p)
_state = {}  # 'lib': namespace of bound functions, or 'error': why loading failed
_messages = []  # Easel exception messages recorded since the last C call that checked them


def _on_easel_exception(errcode, use_errno, sourcefile, sourceline, fmt, argp):
    buf = _c.create_string_buffer(1024)
    _state["lib"].vsnprintf(buf, len(buf), fmt, argp)
    where = (sourcefile or b"?").decode(errors="replace")
    _messages.append(f"{buf.value.decode(errors='replace')} (Easel status {errcode}, {where}:{sourceline})")


_HANDLER = _HANDLER_TYPE(_on_easel_exception)


class _Lib:
    """The bound C functions of liblibhmmer and liblibeasel."""

    def __init__(self):
        import pyhmmer.easel  # noqa: F401  (pyhmmer installs its own handler on import; ours goes after it)
        import pyhmmer.plan7  # noqa: F401

        libdir = os.path.join(os.path.dirname(pyhmmer.__file__), os.pardir, "pyhmmer.libs")
        easel = _c.CDLL(os.path.join(libdir, "liblibeasel.so"), mode=_c.RTLD_GLOBAL)
        hmmer = _c.CDLL(os.path.join(libdir, "liblibhmmer.so"))
        for name, (restype, argtypes) in _PROTOTYPES.items():
            fn = getattr(hmmer if name.startswith("p7_") else easel, name)
            fn.restype, fn.argtypes = restype, argtypes
            setattr(self, name, fn)
        self.vsnprintf = _c.CDLL(None).vsnprintf
        self.vsnprintf.restype, self.vsnprintf.argtypes = _c.c_int, [_c.c_char_p, _c.c_size_t, _c.c_char_p, _p]


def _install_handler(lib):
    """Route Easel exceptions to ``_messages`` instead of abort(); process-wide."""
    lib.esl_exception_SetHandler(_c.cast(_HANDLER, _p))
    return lib


def _lib():
    if "lib" not in _state:
        if "error" in _state:
            raise RuntimeError(f"HMMER's C library is unavailable: {_state['error']}")
        try:
            _state["lib"] = _install_handler(_Lib())
        except (ImportError, OSError, AttributeError) as exc:
            _state["error"] = str(exc)
            raise RuntimeError(f"HMMER's C library is unavailable: {exc}") from exc
    return _state["lib"]


def libhmmer_available() -> bool:
    """True if pyhmmer's bundled HMMER libraries load and export every function the oracle needs."""
    try:
        _lib()
    except RuntimeError:
        return False
    return True


def _check(status, what, allowed=(STATUS_OK,)):
    messages = " ".join(_messages)
    _messages.clear()
    if status not in allowed:
        raise RuntimeError(f"{what} failed with Easel status {status}" + (f": {messages}" if messages else ""))
    return status


def _read(ctype, address):
    return ctype.from_address(address).value


def _destripe(raw, q, lanes, m):
    """Rows of ``q`` striped vectors of ``lanes`` lanes -> per-node columns (node k at column k-1)."""
    rows = raw.reshape(raw.shape[0], q, lanes)
    return np.ascontiguousarray(rows.transpose(0, 2, 1).reshape(raw.shape[0], q * lanes)[:, :m])


class _Domain(_c.Structure):
    """HMMER's ``P7_DOMAIN`` (hmmer.h; 104 bytes)."""

    _fields_ = [("ienv", _c.c_int64), ("jenv", _c.c_int64), ("iali", _c.c_int64), ("jali", _c.c_int64),
                ("iorf", _c.c_int64), ("jorf", _c.c_int64), ("envsc", _c.c_float), ("domcorrection", _c.c_float),
                ("dombias", _c.c_float), ("oasc", _c.c_float), ("bitscore", _c.c_float), ("lnP", _c.c_double),
                ("is_reported", _c.c_int), ("is_included", _c.c_int), ("scores_per_pos", _p), ("ad", _p)]


class _DomainDef(_c.Structure):
    """HMMER's ``P7_DOMAINDEF`` (hmmer.h; 160 bytes)."""

    _fields_ = [("mocc", _p), ("btot", _p), ("etot", _p), ("L", _c.c_int), ("Lalloc", _c.c_int),
                ("n2sc", _c.POINTER(_c.c_float)), ("r", _p), ("do_reseeding", _c.c_int), ("sp", _p), ("tr", _p),
                ("gtr", _p), ("rt1", _c.c_float), ("rt2", _c.c_float), ("rt3", _c.c_float), ("nsamples", _c.c_int),
                ("min_overlap", _c.c_float), ("of_smaller", _c.c_int), ("max_diagdiff", _c.c_int),
                ("min_posterior", _c.c_float), ("min_endpointp", _c.c_float), ("dcl", _c.POINTER(_Domain)),
                ("ndom", _c.c_int), ("nalloc", _c.c_int), ("nexpected", _c.c_float), ("nregions", _c.c_int),
                ("nclustered", _c.c_int), ("noverlaps", _c.c_int), ("nenvelopes", _c.c_int)]


class HmmerModel:
    """HMMER's own C structures for one protein model, configured as hmmsearch configures them."""

    _FIELDS = ("_oxb", "_ox", "_om", "_gm", "_bg", "_hmm", "_abc")

    def __init__(self, hmm):
        for name in self._FIELDS:
            setattr(self, name, None)
        lib = _lib()
        if not hmm.alphabet.is_amino():
            raise ValueError("HmmerModel needs a protein (amino) model")
        buf = io.BytesIO()
        hmm.write(buf)
        text = buf.getvalue()

        self._abc = lib.esl_alphabet_Create(_ESL_AMINO)
        hfp = _p()
        _check(lib.p7_hmmfile_OpenBuffer(text, len(text), _c.byref(hfp)), "p7_hmmfile_OpenBuffer")
        abc, c_hmm = _p(self._abc), _p()
        try:
            _check(lib.p7_hmmfile_Read(hfp, _c.byref(abc), _c.byref(c_hmm)), "p7_hmmfile_Read")
        finally:
            lib.p7_hmmfile_Close(hfp)
        self._hmm = c_hmm.value
        self.M = hmm.M
        if _read(_c.c_int, self._hmm + _HMM_M) != self.M:
            self.close()
            raise RuntimeError("P7_HMM layout of the loaded libhmmer differs from the one hmmerlib expects")

        self._bg = lib.p7_bg_Create(self._abc)
        self._gm = lib.p7_profile_Create(self.M, self._abc)
        _check(lib.p7_ProfileConfig(self._hmm, self._bg, self._gm, _CONFIG_L, _P7_LOCAL), "p7_ProfileConfig")
        self._om = lib.p7_oprofile_Create(self.M, self._abc)
        _check(lib.p7_oprofile_Convert(self._gm, self._om), "p7_oprofile_Convert")
        self._ox = lib.p7_omx_Create(self.M, 0, 0)
        self._oxb = lib.p7_omx_Create(self.M, 0, 0)
        if not all(getattr(self, name) for name in self._FIELDS):
            self.close()
            raise MemoryError("HMMER could not allocate the model structures")
        self._check_layout()
        self._take_in_memory_values(hmm)
        _check(lib.p7_bg_SetFilter(self._bg, self.M, self._om + _OM_COMPO), "p7_bg_SetFilter")

    def _check_layout(self):
        om = self._om
        if not (
            _read(_c.c_int, om + _OM_M) == self.M
            and _read(_c.c_void_p, om + _OM_ABC) == self._abc
            and _read(_c.c_int, om + _OM_MODE) == _P7_LOCAL
            and np.float32(_read(_c.c_float, om + _OM_SCALE_B)) == SCALE_B
            and _read(_c.c_uint8, om + _OM_BASE_B) == BASE_B
            and np.float32(_read(_c.c_float, om + _OM_SCALE_W)) == SCALE_W
            and _read(_c.c_int16, om + _OM_BASE_W) == BASE_W
        ):
            self.close()
            raise RuntimeError("P7_OPROFILE layout of the loaded libhmmer differs from the one hmmerlib expects")

    def _take_in_memory_values(self, hmm) -> None:
        """The model's values as the pyhmmer ``hmm`` holds them, over those its text gave: the
        text keeps 4 or 5 digits, and a model made in memory (``pyhmmer.plan7.Builder``) has more,
        which pyhmmer's pipeline computes with. Taken from the optimized profile pyhmmer makes
        of it (configured as hmmsearch configures it): the MSV and SSV bytes, the Forward tables,
        the composition (the bias filter's null model is made from it) and the E-value
        parameters. The Viterbi filter's words, which pyhmmer does not show, stay the text's:
        measured equal to the in-memory model's on 100 such models. For a model read from a file
        every value is the same."""
        from hmmgpu.stages.profiles import configured_profile

        mine = configured_profile(hmm).to_optimized()
        for field, table in ((_OM_RBV, mine.rbv), (_OM_SBV, mine.sbv), (_OM_RFV, mine.rfv)):
            values = np.ascontiguousarray(np.asarray(table))
            rows = (_c.c_void_p * KP).from_address(_read(_c.c_void_p, self._om + field))
            if values.shape[0] != KP:
                raise RuntimeError("pyhmmer's optimized profile differs in shape from libhmmer's")
            for x in range(KP):
                _c.memmove(rows[x], values[x].ctypes.data, values[x].nbytes)
        tfv = np.ascontiguousarray(np.asarray(mine.tfv, np.float32))
        _c.memmove(_read(_c.c_void_p, self._om + _OM_TFV), tfv.ctypes.data, tfv.nbytes)
        for offset, value in ((_OM_TBM_B, mine.tbm), (_OM_TEC_B, mine.tec), (_OM_BIAS_B, mine.bias_b)):
            _c.c_uint8.from_address(self._om + offset).value = int(value)
        compo = np.ascontiguousarray(np.asarray(mine.compositions, np.float32)[:_COMPO_K])
        _c.memmove(self._om + _OM_COMPO, compo.ctypes.data, compo.nbytes)
        if hmm.evalue_parameters.m_lambda is not None:
            evparam = np.ascontiguousarray(np.asarray(hmm.evalue_parameters.as_vector(), np.float32))
            _c.memmove(self._om + _OM_EVPARAM, evparam.ctypes.data, evparam.nbytes)

    # --- life cycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Free the C structures (idempotent)."""
        lib = _state.get("lib")
        if lib is None:
            return
        self._close_full()
        destroyers = (lib.p7_omx_Destroy, lib.p7_omx_Destroy, lib.p7_oprofile_Destroy, lib.p7_profile_Destroy,
                      lib.p7_bg_Destroy, lib.p7_hmm_Destroy, lib.esl_alphabet_Destroy)
        for name, destroy in zip(self._FIELDS, destroyers):
            ptr = getattr(self, name, None)
            if ptr:
                setattr(self, name, None)
                destroy(ptr)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    # --- per-target calls -------------------------------------------------------------------

    def _target(self, codes):
        """Digital codes -> sentinel-padded dsq, with bg and om set to its length as hmmsearch does."""
        if self._om is None:
            raise ValueError("HmmerModel is closed")
        codes = np.asarray(codes, dtype=np.uint8).ravel()
        n = codes.size
        if n == 0:
            raise ValueError("empty target (hmmsearch skips L = 0)")
        if codes.max() >= KP:
            raise ValueError(f"digital codes must be < {KP}")
        dsq = np.empty(n + 2, dtype=np.uint8)
        dsq[0] = dsq[-1] = _SENTINEL
        dsq[1:-1] = codes
        lib = _state["lib"]
        _check(lib.p7_bg_SetLength(self._bg, n), "p7_bg_SetLength")
        _check(lib.p7_oprofile_ReconfigLength(self._om, n), "p7_oprofile_ReconfigLength")
        _check(lib.p7_omx_GrowTo(self._ox, self.M, 0, n), "p7_omx_GrowTo")
        return dsq, n

    def _null(self, dsq, n):
        sc = _c.c_float()
        _check(_state["lib"].p7_bg_NullOne(self._bg, dsq.ctypes.data, n, _c.byref(sc)), "p7_bg_NullOne")
        return sc.value

    def _bias(self, dsq, n):
        sc = _c.c_float()
        _check(_state["lib"].p7_bg_FilterScore(self._bg, dsq.ctypes.data, n, _c.byref(sc)), "p7_bg_FilterScore")
        return sc.value

    def _filter(self, name, dsq, n, allowed):
        sc = _c.c_float()
        fn = getattr(_state["lib"], name)
        if name == "p7_SSVFilter":
            status = fn(dsq.ctypes.data, n, self._om, _c.byref(sc))
        else:
            status = fn(dsq.ctypes.data, n, self._om, self._ox, _c.byref(sc))
        _check(status, name, allowed)
        if status == STATUS_RANGE:
            return status, math.inf
        if status == STATUS_NORESULT:
            return status, math.nan
        return status, sc.value

    def _ssv(self, dsq, n):
        return self._filter("p7_SSVFilter", dsq, n, (STATUS_OK, STATUS_RANGE, STATUS_NORESULT))

    def _msv(self, dsq, n):
        return self._filter("p7_MSVFilter", dsq, n, (STATUS_OK, STATUS_RANGE))

    def _vf(self, dsq, n):
        return self._filter("p7_ViterbiFilter", dsq, n, (STATUS_OK, STATUS_RANGE))

    def null_score(self, codes) -> float:
        """Null-model score ``p7_bg_NullOne`` (nats)."""
        return self._null(*self._target(codes))

    def ssv(self, codes) -> tuple:
        """``p7_SSVFilter``: (status, nats); nan on ENORESULT, +inf on ERANGE."""
        return self._ssv(*self._target(codes))

    def msv(self, codes) -> tuple:
        """``p7_MSVFilter`` (which runs SSV first): (status, nats); +inf on ERANGE."""
        return self._msv(*self._target(codes))

    def bias_filter_score(self, codes) -> float:
        """Bias-filter score ``p7_bg_FilterScore`` (nats)."""
        return self._bias(*self._target(codes))

    def viterbi_filter(self, codes) -> tuple:
        """``p7_ViterbiFilter``: (status, nats); +inf on ERANGE."""
        return self._vf(*self._target(codes))

    SCORE_DTYPE = np.dtype([
        ("null", np.float32), ("ssv_status", np.int32), ("ssv", np.float32), ("msv_status", np.int32),
        ("msv", np.float32), ("bias", np.float32), ("vf_status", np.int32), ("vf", np.float32),
    ])

    def score_all(self, sequences) -> np.ndarray:
        """Every per-target score for each code array, as a ``SCORE_DTYPE`` row (L = 0: nan scores, status 0)."""
        rows = []
        for codes in sequences:
            if np.size(codes) == 0:
                rows.append((math.nan, 0, math.nan, 0, math.nan, math.nan, 0, math.nan))
                continue
            dsq, n = self._target(codes)
            rows.append((self._null(dsq, n), *self._ssv(dsq, n), *self._msv(dsq, n),
                         self._bias(dsq, n), *self._vf(dsq, n)))
        return np.array(rows, dtype=self.SCORE_DTYPE)

    # --- quantized tables -------------------------------------------------------------------

    def _vectors(self, field, nvec, lanes, dtype):
        """Rows ``om->field[x]`` (x < Kp), each ``nvec`` vectors of 16 bytes, as a (Kp, nvec*lanes) array."""
        rows = (_c.c_void_p * KP).from_address(_read(_c.c_void_p, self._om + field))
        return np.stack([np.frombuffer(_c.string_at(rows[x], 16 * nvec), dtype=dtype) for x in range(KP)])

    def byte_tables(self) -> dict:
        """MSV/SSV bytes per node: 'rbv' uint8 (29, M), 'sbv' int8 (29, M), and 'tbm', 'tec', 'bias', 'base'."""
        q = max(2, -(-self.M // 16))
        om = self._om
        return {
            "rbv": _destripe(self._vectors(_OM_RBV, q, 16, np.uint8), q, 16, self.M),
            "sbv": _destripe(self._vectors(_OM_SBV, q + _EXTRA_SB, 16, np.int8)[:, :16 * q], q, 16, self.M),
            "tbm": _read(_c.c_uint8, om + _OM_TBM_B),
            "tec": _read(_c.c_uint8, om + _OM_TEC_B),
            "bias": _read(_c.c_uint8, om + _OM_BIAS_B),
            "base": _read(_c.c_uint8, om + _OM_BASE_B),
        }

    def word_tables(self) -> dict:
        """Viterbi-filter words per node: 'rw' (29, M); 'tw' (8, M), rows BM MM IM DM MD MI II DD;
        'ddbound'; 'xw' (4, 2), indexed [E, N, J, C][MOVE, LOOP]."""
        q = max(2, -(-self.M // 8))
        om = self._om
        twv = np.frombuffer(_c.string_at(_read(_c.c_void_p, om + _OM_TWV), 16 * 8 * q), dtype=np.int16)
        twv = twv.reshape(8 * q, 8)
        blocks = np.concatenate([twv[:7 * q].reshape(q, 7, 8).transpose(1, 0, 2), twv[7 * q:][None]])
        return {
            "rw": _destripe(self._vectors(_OM_RWV, q, 8, np.int16), q, 8, self.M),
            "tw": _destripe(blocks.reshape(8, 8 * q), q, 8, self.M),
            "ddbound": _read(_c.c_int16, om + _OM_DDBOUND_W),
            "xw": np.array((_c.c_int16 * 8).from_address(om + _OM_XW), dtype=np.int16).reshape(4, 2),
        }

    def length_scalars(self, L) -> tuple:
        """(tjb_b, xw[N][MOVE], null score) after reconfiguring to target length ``L`` >= 1."""
        dsq, n = self._target(np.zeros(L, dtype=np.uint8))
        return (_read(_c.c_uint8, self._om + _OM_TJB_B),
                _read(_c.c_int16, self._om + _OM_XW + 2 * (2 * _XW_N + _MOVE)),
                self._null(dsq, n))

    # --- Forward (hmmer-postfilter-spec.md sections 1 and 2) -------------------------------

    def forward_parser(self, codes) -> tuple:
        """``p7_ForwardParser`` as ``p7_Pipeline`` runs it before the Forward filter (the model
        reconfigured to the target's length, the one-row matrix grown to it): (status, score in
        nats (float32; NaN unless status is OK), the special-state rows ``xmx`` float32 [L+1, 6]
        (E N J B C SCALE), ``totscale``). Status RANGE (NaN, underflow or overflow of the final
        C) is returned, not raised. Runs in the calling thread's floating-point mode
        (:func:`hmmgpu.host.flush_to_zero` gives hmmsearch's)."""
        dsq, n = self._target(codes)
        return self._forward(dsq, n)

    def _forward(self, dsq, n) -> tuple:
        """``p7_ForwardParser`` into the Forward matrix on a target :meth:`_target` prepared."""
        sc = _c.c_float(math.nan)
        status = _check(_state["lib"].p7_ForwardParser(dsq.ctypes.data, n, self._om, self._ox, _c.byref(sc)),
                        "p7_ForwardParser", (STATUS_OK, STATUS_RANGE))
        return (status, np.float32(sc.value) if status == STATUS_OK else np.float32(math.nan),
                *self._rows(self._ox, n))

    def _rows(self, ox, n) -> tuple:
        """A parser matrix's special-state rows float32 [n+1, 6] and its ``totscale``."""
        if _read(_c.c_int, ox + _OX_M) != self.M or _read(_c.c_int, ox + _OX_L) != n:
            raise RuntimeError("P7_OMX layout of the loaded libhmmer differs from the one hmmerlib expects")
        xmx = np.frombuffer(_c.string_at(_read(_c.c_void_p, ox + _OX_XMX), 4 * 6 * (n + 1)), dtype=np.float32)
        return xmx.reshape(n + 1, 6).copy(), np.float32(_read(_c.c_float, ox + _OX_TOTSCALE))

    def _parsers(self, dsq, n, score=None) -> int:
        """``p7_ForwardParser`` then ``p7_BackwardParser`` on ``dsq`` as ``p7_Pipeline`` runs them
        (the rows left in the model's parser matrices); Backward's status, its score into
        ``score`` (a ``c_float``) when given."""
        lib = _state["lib"]
        self._forward(dsq, n)
        _check(lib.p7_omx_GrowTo(self._oxb, self.M, 0, n), "p7_omx_GrowTo")
        return _check(lib.p7_BackwardParser(dsq.ctypes.data, n, self._om, self._ox, self._oxb,
                                            None if score is None else _c.byref(score)),
                      "p7_BackwardParser", (STATUS_OK, STATUS_RANGE))

    def backward_parser(self, codes) -> tuple:
        """``p7_BackwardParser`` as ``p7_Pipeline`` runs it on an F3 passer: after
        ``p7_ForwardParser`` on the same target, whose per-row scale factors it reuses (it runs
        whatever the Forward status; the Forward parser's own results are :meth:`forward_parser`'s).
        Returns (status, score in nats (float32; NaN unless status is OK), the special-state rows
        ``xmx`` float32 [L+1, 6] (E N J B C SCALE), ``totscale``, ``has_own_scales`` (True where
        Backward switched to its own scale factors)). Status RANGE (NaN, underflow or overflow of
        the final N) is returned, not raised. Runs in the calling thread's floating-point mode."""
        dsq, n = self._target(codes)
        sc = _c.c_float(math.nan)
        status = self._parsers(dsq, n, sc)
        xmx, totscale = self._rows(self._oxb, n)
        score = np.float32(sc.value) if status == STATUS_OK else np.float32(math.nan)
        return status, score, xmx, totscale, bool(_read(_c.c_int, self._oxb + _OX_HAS_OWN_SCALES))

    def forward_tables(self) -> dict:
        """HMMER's own striped Forward tables (``p7_oprofile_Convert``'s ``fb_conversion``):
        'M', 'Q', 'rfv' float32 [Kp][Q][4], 'tfv' float32 [8Q][4] (per q: BM MM IM DM MD MI II,
        then the Q DD vectors), 'xf' float32 [4][2] ([E N J C][MOVE LOOP], for the length of the
        last target) and 'nj'. Lane z of vector q is node q + 1 + z Q."""
        q = max(2, (self.M - 1) // 4 + 1)
        om = self._om
        rfv = self._vectors(_OM_RFV, q, 4, np.float32).reshape(KP, q, 4)
        tfv = np.frombuffer(_c.string_at(_read(_c.c_void_p, om + _OM_TFV), 16 * 8 * q), dtype=np.float32)
        xf = np.array((_c.c_float * 8).from_address(om + _OM_XF), dtype=np.float32).reshape(4, 2)
        return dict(M=self.M, Q=q, rfv=np.ascontiguousarray(rfv), tfv=tfv.reshape(8 * q, 4).copy(), xf=xf,
                    nj=np.float32(_read(_c.c_float, om + _OM_NJ)))

    def forward_specials(self, L) -> np.ndarray:
        """``om->xf`` [E N J C][MOVE LOOP] (float32) after ``p7_oprofile_ReconfigLength(om, L)``."""
        self._target(np.zeros(int(L), dtype=np.uint8))
        return np.array((_c.c_float * 8).from_address(self._om + _OM_XF), dtype=np.float32).reshape(4, 2)

    def evalue_parameters(self) -> tuple:
        """``om->evparam``: (MMU, MLAMBDA, VMU, VLAMBDA, FTAU, FLAMBDA)."""
        return tuple(float(v) for v in (_c.c_float * 6).from_address(self._om + _OM_EVPARAM))

    # --- full matrices: envelope rescoring and domain definition -----------------------------
    # (hmmer-domaindef-spec.md sections 2.2 and 3; hmmer-postfilter-spec.md section 5.2)

    _fwd = _bck = _trace = None  # full P7_OMX matrices and a P7_TRACE with pp, made on first use

    def _close_full(self) -> None:
        lib = _state["lib"]
        for name, destroy in (("_fwd", lib.p7_omx_Destroy), ("_bck", lib.p7_omx_Destroy),
                              ("_trace", lib.p7_trace_Destroy)):
            ptr = getattr(self, name)
            if ptr:
                setattr(self, name, None)
                destroy(ptr)

    def _full(self, n) -> None:
        """The two full matrices, grown to ``n`` rows after row 0."""
        lib = _state["lib"]
        for name in ("_fwd", "_bck"):
            if getattr(self, name) is None:
                setattr(self, name, lib.p7_omx_Create(self.M, n, n))
                if not getattr(self, name):
                    raise MemoryError("HMMER could not allocate a full DP matrix")
            _check(lib.p7_omx_GrowTo(getattr(self, name), self.M, n, n), "p7_omx_GrowTo")
        if self._trace is None:
            self._trace = lib.p7_trace_CreateWithPP()

    def _slice(self, codes, i, j, unihit):
        """The target prepared as :meth:`_target` does, the model set to unihit or multihit at the
        full target length (as ``p7_domaindef_ByPosteriorHeuristics`` sets it), the full matrices
        grown: (dsq, L, address of ``dsq + i - 1``, Ld)."""
        dsq, n = self._target(codes)
        j = n if j is None else int(j)
        if not 1 <= int(i) <= j <= n:
            raise ValueError(f"slice {i}..{j} is not within 1..{n}")
        reconfig = _state["lib"].p7_oprofile_ReconfigUnihit if unihit else _state["lib"].p7_oprofile_ReconfigMultihit
        _check(reconfig(self._om, n), "p7_oprofile_Reconfig")
        self._full(j - int(i) + 1)
        return dsq, n, dsq.ctypes.data + int(i) - 1, j - int(i) + 1

    def _multihit(self, n) -> None:
        """Back to hmmsearch's configuration (multihit, length ``n``)."""
        _check(_state["lib"].p7_oprofile_ReconfigMultihit(self._om, n), "p7_oprofile_ReconfigMultihit")

    def _matrix(self, ox, n):
        """A full P7_OMX of ``n`` rows after row 0 as a :class:`hmmgpu.cpu.fwdback.StripedMatrix`."""
        from hmmgpu.cpu.fwdback import StripedMatrix

        if _read(_c.c_int, ox + _OX_M) != self.M or _read(_c.c_int, ox + _OX_L) != n:
            raise RuntimeError("P7_OMX layout of the loaded libhmmer differs from the one hmmerlib expects")
        q = max(2, (self.M - 1) // 4 + 1)
        rows = (_c.c_void_p * (n + 1)).from_address(_read(_c.c_void_p, ox + _OX_DPF))
        dp = np.stack([np.frombuffer(_c.string_at(rows[r], 48 * q), dtype=np.float32) for r in range(n + 1)])
        xmx, totscale = self._rows(ox, n)
        return StripedMatrix(dp=np.ascontiguousarray(dp.reshape(n + 1, q, 3, 4).transpose(0, 2, 1, 3)), xmx=xmx,
                             totscale=totscale, has_own_scales=bool(_read(_c.c_int, ox + _OX_HAS_OWN_SCALES)))

    def _write_matrix(self, ox, mx) -> None:
        """Copy a :class:`~hmmgpu.cpu.fwdback.StripedMatrix` into a full P7_OMX grown to its size."""
        n = mx.L
        _c.c_int.from_address(ox + _OX_M).value = self.M
        _c.c_int.from_address(ox + _OX_L).value = n
        _c.c_float.from_address(ox + _OX_TOTSCALE).value = float(mx.totscale)
        _c.c_int.from_address(ox + _OX_HAS_OWN_SCALES).value = int(mx.has_own_scales)
        rows = (_c.c_void_p * (n + 1)).from_address(_read(_c.c_void_p, ox + _OX_DPF))
        hmmer_rows = np.ascontiguousarray(np.asarray(mx.dp, np.float32).transpose(0, 2, 1, 3))
        for r in range(n + 1):
            _c.memmove(rows[r], hmmer_rows[r].ctypes.data, hmmer_rows[r].nbytes)
        xmx = np.ascontiguousarray(mx.xmx, np.float32)
        _c.memmove(_read(_c.c_void_p, ox + _OX_XMX), xmx.ctypes.data, xmx.nbytes)

    def _read_trace(self):
        """The P7_TRACE as a :class:`hmmgpu.cpu.optacc.Trace`."""
        from hmmgpu.cpu.optacc import Trace

        tr = self._trace
        n = _read(_c.c_int, tr + _TR_N)

        def field(offset, dtype):
            return np.frombuffer(_c.string_at(_read(_c.c_void_p, tr + offset), n * np.dtype(dtype).itemsize),
                                 dtype=dtype).copy()

        return Trace(st=field(_TR_ST, np.uint8), k=field(_TR_K, np.int32), i=field(_TR_I, np.int32),
                     pp=field(_TR_PP, np.float32))

    def _score_call(self, name, *args):
        sc = _c.c_float(math.nan)
        status = _check(getattr(_state["lib"], name)(*args, _c.byref(sc)), name, (STATUS_OK, STATUS_RANGE))
        return status, np.float32(sc.value) if status == STATUS_OK else np.float32(math.nan)

    def forward_matrix(self, codes, i=1, j=None, unihit=False) -> tuple:
        """``p7_Forward`` (full matrix) on the slice ``dsq[i..j]`` (1-based, inclusive; the whole
        target by default) of a target, the model multihit (as ``region_trace_ensemble`` runs it)
        or unihit (as ``rescore_isolated_domain``), its length the FULL target length. Returns
        (status, score in nats (float32; NaN unless OK), the :class:`StripedMatrix`). The model
        is left configured as hmmsearch configures it (multihit)."""
        dsq, n, sub, ld = self._slice(codes, i, j, unihit)
        try:
            status, score = self._score_call("p7_Forward", sub, ld, self._om, self._fwd)
            return status, score, self._matrix(self._fwd, ld)
        finally:
            self._multihit(n)

    def backward_matrix(self, codes, i=1, j=None, unihit=False) -> tuple:
        """``p7_Backward`` (full matrix) after ``p7_Forward`` on the same slice, configured as
        :meth:`forward_matrix`: (status, score (float32 nats; NaN unless OK), the Backward
        :class:`StripedMatrix`). HMMER computes no cells of its row 0 (they hold whatever the
        matrix held); they are returned as zeros."""
        dsq, n, sub, ld = self._slice(codes, i, j, unihit)
        try:
            self._score_call("p7_Forward", sub, ld, self._om, self._fwd)
            status, score = self._score_call("p7_Backward", sub, ld, self._om, self._fwd, self._bck)
            bck = self._matrix(self._bck, ld)
            bck.dp[0] = 0
            return status, score, bck
        finally:
            self._multihit(n)

    def envelope(self, codes, i, j) -> dict:
        """``rescore_isolated_domain``'s calls on the envelope ``i..j`` of a target, in its order
        and on its matrices (unihit, the full target length): ``p7_Forward`` -> 'envsc' (float32
        nats), 'forward'; ``p7_Backward`` -> 'backward' (row 0's cells zeroed, see
        :meth:`backward_matrix`); ``p7_Decoding`` in place of the Backward matrix ->
        'decoding_status', 'posterior'; then, unless decoding failed (eslERANGE: the domain is
        dropped, the keys below are None), ``p7_OptimalAccuracy`` in place of the Forward matrix
        -> 'oasc', 'oa'; ``p7_OATrace`` -> 'trace' (a :class:`hmmgpu.cpu.optacc.Trace`, its
        residues moved by ``i - 1`` to the target's coordinates, as rescore_isolated_domain
        moves them); ``p7_Null2_ByExpectation`` on the posterior matrix -> 'null2' float32 [Kp]
        (the odds ratios an unclustered envelope's n2sc is the ``logf`` of)."""
        lib = _state["lib"]
        dsq, n, sub, ld = self._slice(codes, i, j, True)
        try:
            out = dict.fromkeys(("oasc", "oa", "trace", "null2"))
            out["forward_status"], out["envsc"] = self._score_call("p7_Forward", sub, ld, self._om, self._fwd)
            out["forward"] = self._matrix(self._fwd, ld)
            _check(lib.p7_Backward(sub, ld, self._om, self._fwd, self._bck, None), "p7_Backward",
                   (STATUS_OK, STATUS_RANGE))
            out["backward"] = self._matrix(self._bck, ld)
            out["backward"].dp[0] = 0
            out["decoding_status"] = _check(lib.p7_Decoding(self._om, self._fwd, self._bck, self._bck),
                                            "p7_Decoding", (STATUS_OK, STATUS_RANGE))
            out["posterior"] = self._matrix(self._bck, ld)
            if out["decoding_status"] != STATUS_OK:
                return out
            oasc = _c.c_float()
            _check(lib.p7_OptimalAccuracy(self._om, self._bck, self._fwd, _c.byref(oasc)), "p7_OptimalAccuracy")
            out["oasc"], out["oa"] = np.float32(oasc.value), self._matrix(self._fwd, ld)
            _check(lib.p7_trace_Reuse(self._trace), "p7_trace_Reuse")
            _check(lib.p7_OATrace(self._om, self._bck, self._fwd, self._trace), "p7_OATrace")
            out["trace"] = self._read_trace().shifted(int(i) - 1)
            null2 = (_c.c_float * _NULL2_CODES)()
            _check(lib.p7_Null2_ByExpectation(self._om, self._bck, null2), "p7_Null2_ByExpectation")
            out["null2"] = np.array(null2, dtype=np.float32)[:KP]
            return out
        finally:
            self._multihit(n)

    def null2_by_expectation(self, posterior) -> np.ndarray:
        """``p7_Null2_ByExpectation`` on a posterior :class:`StripedMatrix` (``p7_Decoding``'s
        layout): the null2 odds ratios float32 [Kp]."""
        if self._om is None:
            raise ValueError("HmmerModel is closed")
        self._full(posterior.L)
        self._write_matrix(self._bck, posterior)
        null2 = (_c.c_float * _NULL2_CODES)()
        _check(_state["lib"].p7_Null2_ByExpectation(self._om, self._bck, null2), "p7_Null2_ByExpectation")
        return np.array(null2, dtype=np.float32)[:KP]

    def domain_definition(self, codes, seed: int = _PIPELINE_SEED) -> dict:
        """``p7_domaindef_ByPosteriorHeuristics`` on a target as ``p7_Pipeline`` runs it on an F3
        passer (whether or not this target passes): the Forward and Backward parsers, then domain
        definition with a fresh pipeline RNG (Easel's fast generator, ``seed``: the pipeline's,
        42 by default; reseeded per region). Returns 'status', 'nexpected', 'nregions',
        'nclustered', 'noverlaps', 'nenvelopes', 'n2sc' float32 [L+1], and 'domains': one dict
        per ``dcl`` entry (ienv, jenv, iali, jali, envsc, domcorrection, oasc), in ``dcl`` order."""
        lib = _state["lib"]
        dsq, n = self._target(codes)
        self._parsers(dsq, n)
        self._full(1)
        rng = lib.esl_randomness_CreateFast(int(seed))
        ddef = lib.p7_domaindef_Create(rng)
        sq = lib.esl_sq_CreateDigitalFrom(self._abc, b"target", dsq.ctypes.data, n, None, None, None)
        try:
            if not (rng and ddef and sq):
                raise MemoryError("HMMER could not allocate the domain definition structures")
            dd = _DomainDef.from_address(ddef)
            dd.do_reseeding = 1
            status = _check(lib.p7_domaindef_ByPosteriorHeuristics(sq, None, self._om, self._ox, self._oxb,
                                                                    self._fwd, self._bck, ddef, self._bg, 0, None,
                                                                    None, None),
                            "p7_domaindef_ByPosteriorHeuristics", (STATUS_OK, STATUS_RANGE))
            names = ("ienv", "jenv", "iali", "jali", "envsc", "domcorrection", "oasc")
            domains = [{name: (np.float32 if name in ("envsc", "domcorrection", "oasc") else int)(
                getattr(dd.dcl[d], name)) for name in names} for d in range(dd.ndom)]
            return dict(status=status, nexpected=np.float32(dd.nexpected), nregions=dd.nregions,
                        nclustered=dd.nclustered, noverlaps=dd.noverlaps, nenvelopes=dd.nenvelopes,
                        n2sc=np.ctypeslib.as_array(dd.n2sc, shape=(n + 1,)).copy(), domains=domains)
        finally:
            for ptr, destroy in ((sq, lib.esl_sq_Destroy), (ddef, lib.p7_domaindef_Destroy),
                                 (rng, lib.esl_randomness_Destroy)):
                if ptr:
                    destroy(ptr)
            self._multihit(n)

    # --- domain definition's steps (hmmer-domaindef-spec.md sections 1 and 2) ----------------

    def domain_decoding(self, codes) -> tuple:
        """``p7_DomainDecoding`` on the parser rows of a target, as ``p7_domaindef`` runs it
        (after :meth:`backward_parser`'s two parsers): (status, mocc, btot, etot float32 [L+1])."""
        lib = _state["lib"]
        dsq, n = self._target(codes)
        self._parsers(dsq, n)
        rng = lib.esl_randomness_CreateFast(_PIPELINE_SEED)
        ddef = lib.p7_domaindef_Create(rng)
        try:
            if not (rng and ddef):
                raise MemoryError("HMMER could not allocate the domain definition structures")
            _check(lib.p7_domaindef_GrowTo(ddef, n), "p7_domaindef_GrowTo")
            status = _check(lib.p7_DomainDecoding(self._om, self._ox, self._oxb, ddef), "p7_DomainDecoding",
                            (STATUS_OK, STATUS_RANGE))
            dd = _DomainDef.from_address(ddef)
            return (status, *(np.frombuffer(_c.string_at(getattr(dd, name), 4 * (n + 1)), dtype=np.float32).copy()
                              for name in ("mocc", "btot", "etot")))
        finally:
            for ptr, destroy in ((ddef, lib.p7_domaindef_Destroy), (rng, lib.esl_randomness_Destroy)):
                if ptr:
                    destroy(ptr)

    def stochastic_traces(self, codes, i, j, nsamples=200, seed=_PIPELINE_SEED) -> tuple:
        """What ``region_trace_ensemble`` samples on the region ``i..j`` (1-based) of a target:
        the region's multihit ``p7_Forward`` matrix (:meth:`forward_matrix`), then, the
        generator ``esl_randomness_CreateFast(seed)``, ``nsamples`` x ``p7_StochasticTrace``
        and ``p7_trace_Index``. Returns (the Forward :class:`StripedMatrix`, traces): each a
        :class:`hmmgpu.cpu.optacc.Trace` (residues relative to the region; ``pp`` not set) and
        its domains int32 [ndom][6] (tfrom, tto, sqfrom, sqto, hmmfrom, hmmto)."""
        lib = _state["lib"]
        dsq, n, sub, ld = self._slice(codes, i, j, False)
        rng = lib.esl_randomness_CreateFast(seed)
        try:
            _check(lib.p7_Forward(sub, ld, self._om, self._fwd, None), "p7_Forward")
            matrix = self._matrix(self._fwd, ld)
            traces = []
            for _ in range(int(nsamples)):
                _check(lib.p7_trace_Reuse(self._trace), "p7_trace_Reuse")
                _check(lib.p7_StochasticTrace(rng, sub, ld, self._om, self._fwd, self._trace), "p7_StochasticTrace")
                _check(lib.p7_trace_Index(self._trace), "p7_trace_Index")
                ndom = _read(_c.c_int, self._trace + _TR_NDOM)
                index = [np.frombuffer(_c.string_at(_read(_c.c_void_p, self._trace + _TR_INDEX + 8 * f), 4 * ndom),
                                       dtype=np.int32) for f in range(6)]
                trace = self._read_trace()
                trace.pp[:] = 0
                traces.append((trace, np.stack(index, axis=1).reshape(ndom, 6).copy()))
            return matrix, traces
        finally:
            lib.esl_randomness_Destroy(rng)
            self._multihit(n)
