"""HMMER's alignment display of one domain (``p7_alidisplay_Create``), made from its optimal
accuracy trace, and written in HMMER's serialized form (``p7_alidisplay_Serialize``).

What is computed
----------------
Domain definition aligns each envelope by optimal accuracy (``p7_OATrace``) and hands the
trace, moved to the target's coordinates, to ``p7_alidisplay_Create`` (HMMER 3.4
``src/p7_alidisplay.c``). The display covers the trace from the first M state after its B
to the last M state before its E, one column per M, D or I state:

* ``model``: the model's consensus letter at node k for M and D, ``.`` for I;
* ``match``: for M, the consensus letter when the residue is the consensus residue, ``+``
  when the residue's match emission odds ratio at node k (the optimized profile's Forward
  table, ``p7_oprofile_FGetEmission``) is above 1, else a space; a space for I and D;
* ``aseq``: the residue, upper case for M and lower case for I, ``-`` for D;
* ``pp``: each emitting state's posterior probability as one character,
  ``(p + 0.05 >= 1.0) ? '*' : '0' + (int)((p + 0.05) * 10.0)`` in double (HMMER's
  ``p7_alidisplay_EncodePostProb``), ``.`` for D;
* ``rf`` and ``cs``: the model's reference and consensus structure annotation at node k,
  ``.`` for I, present when the model has them. The model-mask line is never made (HMMER
  3.4 leaves ``mmline`` NULL whatever the model holds);
* coordinates: ``hmm_from/hmm_to`` and ``seq_from/seq_to`` from the first and last M, the
  model length M and the target length L, and the six names (model name, accession and
  description, each "" when unset; target name, accession, description).

The display is :class:`hmmgpu.report.hitlist.AlignmentDisplay`, the same record the report
reads back from a pyhmmer ``TopHits``, so that a display made here and one decoded from
pyhmmer compare field by field, and :func:`serialize_alidisplay` writes it back as the
bytes HMMER's serializer writes (the layout is hitlist's, defined once there).

Why the code looks as it does
-----------------------------
The model's part of every display depends on the model only, so :class:`ModelLines` builds
it once per query as tables by node (an insert column reads index 0, which holds ``.``),
the match line as one letter per residue and node (the consensus test and the odds test
done once); a display is then one pass over the trace's columns that looks each letter up.
That pass is compiled (numba, releasing the interpreter lock): every domain of every
reported target gets a display, in the post-filter's worker threads, and a pass costs less
than the dozens of small numpy calls the same gathers took. HMMER compares the consensus
residue after digitizing its letter with Easel's case-insensitive input map; a letter
outside the alphabet never matches.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from hmmgpu.constants import AMINO_SYMBOLS, KP
from hmmgpu.report.hitlist import (ALI_HAS_ASEQ, ALI_HAS_CS, ALI_HAS_MM, ALI_HAS_PP, ALI_HAS_RF, ALIDISPLAY_STRUCT,
                                   AlignmentDisplay)

#: HMMER's p7T_ state codes of the states a display shows, and of the domain's bounds (those
#: of :class:`hmmgpu.cpu.optacc.Trace`, not imported from there: imports point down).
_M, _D, _I, _B, _E = 1, 2, 3, 6, 7
#: The digital code that no letter of the alphabet has (Easel's eslDSQ_ILLEGAL).
_ILLEGAL = 254


def _symbol_codes() -> np.ndarray:
    """Easel's amino input map for letters: each letter (either case) to its digital code."""
    codes = np.full(256, _ILLEGAL, np.uint8)
    for x, letter in enumerate(AMINO_SYMBOLS):
        codes[ord(letter)] = codes[ord(letter.lower())] = x
    return codes


_CODE_OF = _symbol_codes()
#: A residue's letter in the target line, by state (M, D, I) and digital code.
_LETTERS = np.stack([np.frombuffer(AMINO_SYMBOLS.encode(), np.uint8), np.full(KP, ord("-"), np.uint8),
                     np.frombuffer(AMINO_SYMBOLS.lower().encode(), np.uint8)])


@dataclass(frozen=True, eq=False)
class ModelLines:
    """What of a model every alignment display shows, as tables indexed by node k (HMMER's
    1-based strings; index 0 holds ``.``, the letter of an insert column): its names, the
    consensus, reference and structure lines, and the match line's letter of each residue x
    aligned to node k (``match[x][k]``: the consensus letter, ``+`` or a space)."""

    name: bytes
    acc: bytes
    desc: bytes
    M: int
    consensus: np.ndarray  #: uint8 [M+1]
    rf: np.ndarray | None  #: uint8 [M+1], or None
    cs: np.ndarray | None  #: uint8 [M+1], or None
    match: np.ndarray  #: uint8 [Kp][M+1]

    @classmethod
    def from_hmm(cls, hmm, rfv: np.ndarray) -> "ModelLines":
        """The lines of a pyhmmer ``HMM`` and its optimized profile's striped ``rfv`` (float32
        [Kp][Q][4], :class:`hmmgpu.stages.forward.ForwardTables`)."""
        from hmmgpu.formats.hmmfile import hmm_strings

        name, acc, desc = hmm_strings(hmm)
        M = int(hmm.M)

        def per_node(text):
            if text is None:
                return None
            line = np.frombuffer(b"." + text.encode(), np.uint8)
            if line.size != M + 1:
                raise ValueError(f"a model annotation line of {line.size - 1} letters for {M} nodes")
            return line

        consensus = per_node(hmm.consensus)
        rfv = np.asarray(rfv, np.float32)
        Q = rfv.shape[1]
        k = np.arange(1, M + 1)
        odds = rfv[:, (k - 1) % Q, (k - 1) // Q]  # p7_oprofile_FGetEmission(om, k, x) = odds[x][k - 1]
        match = np.full((KP, M + 1), ord(" "), np.uint8)
        match[:, 1:][odds > np.float32(1.0)] = ord("+")
        is_consensus = np.arange(KP)[:, None] == _CODE_OF[consensus[1:]][None, :]
        match[:, 1:] = np.where(is_consensus, consensus[1:][None, :], match[:, 1:])
        return cls(name=name, acc=acc or b"", desc=desc or b"", M=M, consensus=consensus,
                   rf=per_node(hmm.reference), cs=per_node(hmm.consensus_structure), match=match)


_STAR, _ZERO, _SPACE, _DOT, _DASH = (ord(c) for c in "*0 .-")
#: Why a trace has no display (:func:`_display_lines`' status).
_NO_SPAN = {1: "the trace has no domain (no B state)", 2: "the trace's domain has no M state",
            3: "the trace's domain has no E state", 4: "invalid state in trace: not M, D or I"}
#: An annotation line the model lacks (read-only, as the lines a model has: one compiled pass for both).
_NO_LINE = np.zeros(0, np.uint8)
_NO_LINE.setflags(write=False)


def encode_posterior(pp: np.ndarray) -> np.ndarray:
    """HMMER's ``p7_alidisplay_EncodePostProb`` of float32 posterior probabilities, as
    letters (uint8): ``*`` when ``p + 0.05 >= 1``, else the digit ``(int)((p + 0.05) * 10)``,
    in double."""
    pp = np.ascontiguousarray(pp, np.float32)
    out = np.empty(pp.size, np.uint8)
    _encode_all(pp.ravel(), out)
    return out.reshape(pp.shape)


@njit(cache=True, nogil=True, inline="always")
def _posterior_letter(p):
    shifted = np.float64(p) + 0.05
    if shifted >= 1.0:
        return _STAR
    return _ZERO + int(shifted * 10.0)  # C's (char) cast truncates toward zero


@njit(cache=True, nogil=True)
def _encode_all(pp, out):
    for z in range(pp.size):
        out[z] = _posterior_letter(pp[z])


@njit(cache=True, nogil=True)
def _display_lines(st, tk, ti, tpp, codes, consensus, rf, cs, match, letters, out):
    """The display's columns: the trace positions ``z1..z2`` from the first M after the first B
    to the last M before the E that follows it, and for each column its letters into ``out``
    uint8 [6][>= z2-z1+1] (model, match, aseq, pp, rf, cs lines; rf and cs where the model has
    them: ``rf``, ``cs`` not empty). Returns (status, z1, z2), status 0 or a key of
    :data:`_NO_SPAN`."""
    n = st.size
    b = 0
    while b < n and st[b] != _B:
        b += 1
    if b == n:
        return 1, 0, 0
    z1 = b
    while z1 < n and st[z1] != _M:
        z1 += 1
    if z1 == n:
        return 2, 0, 0
    e = z1
    while e < n and st[e] != _E:
        e += 1
    if e == n:
        return 3, 0, 0
    z2 = e - 1
    while st[z2] != _M:
        z2 -= 1
    for z in range(z1, z2 + 1):
        if st[z] < _M or st[z] > _I:
            return 4, 0, 0
    for z in range(z1, z2 + 1):
        c = z - z1
        s = st[z]
        kk = 0 if s == _I else tk[z]  # an insert column reads the "." at index 0
        out[0, c] = consensus[kk]
        if s == _D:
            out[1, c] = _SPACE
            out[2, c] = _DASH
            out[3, c] = _DOT
        else:
            x = codes[ti[z] - 1]
            out[1, c] = match[x, kk] if s == _M else _SPACE
            out[2, c] = letters[0 if s == _M else 2, x]
            out[3, c] = _posterior_letter(tpp[z])
        if rf.size:
            out[4, c] = rf[kk]
        if cs.size:
            out[5, c] = cs[kk]
    return 0, z1, z2


def alidisplay_create(trace, model: ModelLines, codes: np.ndarray, name: bytes, acc: bytes = b"",
                      desc: bytes = b"") -> AlignmentDisplay:
    """``p7_alidisplay_Create`` of the first domain of ``trace`` (a
    :class:`hmmgpu.cpu.optacc.Trace`, residues numbered in the target's coordinates: ``i`` of
    an emitting state is ``codes[i - 1]``), for the target ``codes`` (digital residues,
    length L) named ``name`` with accession ``acc`` and description ``desc`` ("" when unset)."""
    st = trace.st
    codes = np.asarray(codes, np.uint8)
    out = np.empty((6, st.size), np.uint8)
    status, z1, z2 = _display_lines(st, trace.k, trace.i, trace.pp, codes, model.consensus,
                                    _NO_LINE if model.rf is None else model.rf,
                                    _NO_LINE if model.cs is None else model.cs, model.match, _LETTERS, out)
    if status:
        raise ValueError(_NO_SPAN[status])
    n = z2 - z1 + 1
    return AlignmentDisplay(hmm_from=int(trace.k[z1]), hmm_to=int(trace.k[z2]), M=model.M, seq_from=int(trace.i[z1]),
                            seq_to=int(trace.i[z2]), L=int(codes.size),
                            rf=None if model.rf is None else out[4, :n].tobytes(), mm=None,
                            cs=None if model.cs is None else out[5, :n].tobytes(), model=out[0, :n].tobytes(),
                            match=out[1, :n].tobytes(), aseq=out[2, :n].tobytes(), pp=out[3, :n].tobytes(),
                            hmm_name=model.name, hmm_acc=model.acc, hmm_desc=model.desc, seq_name=name, seq_acc=acc,
                            seq_desc=desc)


def warm_display(codes) -> None:
    """Load (or compile) the display's compiled pass for targets whose residues are arrays like
    ``codes`` (a database's: their kind picks the compiled version), displaying nothing. The
    first call in a process also readies numba itself (about a second, under its compiler lock,
    which every other thread's first call then waits for); :class:`hmmgpu.cpu.own_postfilter.OwnPostFilter`
    makes it in a thread of its own as the search starts, so that the worker threads' first
    alignments do not all wait for it."""
    from types import SimpleNamespace

    model = ModelLines(name=b"", acc=b"", desc=b"", M=1, consensus=np.frombuffer(b".A", np.uint8), rf=None, cs=None,
                       match=np.full((KP, 2), _SPACE, np.uint8))
    nothing = SimpleNamespace(st=np.zeros(0, np.uint8), k=np.zeros(0, np.int32), i=np.zeros(0, np.int32),
                              pp=np.zeros(0, np.float32))
    try:
        alidisplay_create(nothing, model, codes, b"")
    except ValueError:   # an empty trace has no domain to display: the compiled pass is loaded
        pass


def serialize_alidisplay(ad: AlignmentDisplay) -> bytes:
    """``p7_alidisplay_Serialize``: the display as HMMER writes it in a serialized hit (network
    byte order; each present line followed by a NUL, then the six NUL-terminated names)."""
    present = 0
    lines = []
    for flag, line in ((ALI_HAS_RF, ad.rf), (ALI_HAS_MM, ad.mm), (ALI_HAS_CS, ad.cs), (0, ad.model), (0, ad.match),
                       (ALI_HAS_ASEQ, ad.aseq), (ALI_HAS_PP, ad.pp)):
        if line is None:
            continue
        present |= flag
        lines.append(line + b"\0")
    names = b"".join(text + b"\0" for text in (ad.hmm_name, ad.hmm_acc, ad.hmm_desc, ad.seq_name, ad.seq_acc,
                                                 ad.seq_desc))
    body = b"".join(lines) + names
    size = ALIDISPLAY_STRUCT.size + len(body)
    head = ALIDISPLAY_STRUCT.pack(size, ad.N, ad.hmm_from, ad.hmm_to, ad.M, ad.seq_from, ad.seq_to, ad.L, present)
    return head + body


__all__ = ["ModelLines", "alidisplay_create", "encode_posterior", "serialize_alidisplay", "warm_display"]
