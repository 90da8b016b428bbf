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
done once); a display is then a few numpy gathers over the trace's columns. HMMER compares
the consensus residue after digitizing its letter with Easel's case-insensitive input map;
a letter outside the alphabet never matches.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hmmgpu.constants import AMINO_SYMBOLS, KP
from hmmgpu.report.hitlist import _ALIDISPLAY, _ASEQ, _CS, _MM, _PP, _RF, AlignmentDisplay

#: HMMER's p7T_ state codes of the states a display shows, and of the domain's bounds (those
#: of :class:`hmmgpu.cpu.optacc.Trace`, not imported from there: that module needs numba).
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


def encode_posterior(pp: np.ndarray) -> np.ndarray:
    """HMMER's ``p7_alidisplay_EncodePostProb`` of float32 posterior probabilities, as
    letters (uint8): ``*`` when ``p + 0.05 >= 1``, else the digit ``(int)((p + 0.05) * 10)``,
    in double."""
    shifted = np.asarray(pp, np.float32).astype(np.float64) + 0.05
    digits = (shifted * 10.0).astype(np.int64)  # C's (char) cast truncates toward zero
    return np.where(shifted >= 1.0, ord("*"), ord("0") + digits).astype(np.uint8)


def _span(st: np.ndarray) -> tuple:
    """The trace positions ``z1..z2`` a display shows: the first M after the first B, the
    last M before the E that follows it."""
    b = int(np.argmax(st == _B))
    if st[b] != _B:
        raise ValueError("the trace has no domain (no B state)")
    z1 = b + int(np.argmax(st[b:] == _M))
    if st[z1] != _M:
        raise ValueError("the trace's domain has no M state")
    e = z1 + int(np.argmax(st[z1:] == _E))
    if st[e] != _E:
        raise ValueError("the trace's domain has no E state")
    return z1, e - 1 - int(np.argmax(st[e - 1::-1] == _M))


def alidisplay_create(trace, model: ModelLines, codes: np.ndarray, name: bytes, acc: bytes = b"",
                      desc: bytes = b"") -> AlignmentDisplay:
    """``p7_alidisplay_Create`` of the first domain of ``trace`` (a
    :class:`hmmgpu.cpu.optacc.Trace`, residues numbered in the target's coordinates: ``i`` of
    an emitting state is ``codes[i - 1]``), for the target ``codes`` (digital residues,
    length L) named ``name`` with accession ``acc`` and description ``desc`` ("" when unset)."""
    st = np.asarray(trace.st)
    z1, z2 = _span(st)
    s = st[z1:z2 + 1]
    if s.min() < _M or s.max() > _I:
        raise ValueError("invalid state in trace: not M, D or I")
    k, i = trace.k[z1:z2 + 1], trace.i[z1:z2 + 1]
    ins = s == _I
    kk = np.where(ins, 0, k)  # an insert column reads the "." at index 0
    codes = np.asarray(codes, np.uint8)
    x = codes[i - 1]  # a D column (i = 0) reads codes[-1], which no line of it uses
    match = np.where(s == _M, model.match[x, kk], ord(" ")).astype(np.uint8)
    pp = np.where(s == _D, ord("."), encode_posterior(trace.pp[z1:z2 + 1])).astype(np.uint8)
    return AlignmentDisplay(hmm_from=int(k[0]), hmm_to=int(k[-1]), M=model.M, seq_from=int(i[0]),
                            seq_to=int(i[-1]), L=int(codes.size),
                            rf=None if model.rf is None else model.rf[kk].tobytes(), mm=None,
                            cs=None if model.cs is None else model.cs[kk].tobytes(),
                            model=model.consensus[kk].tobytes(), match=match.tobytes(),
                            aseq=_LETTERS[s - _M, x].tobytes(), pp=pp.tobytes(), hmm_name=model.name,
                            hmm_acc=model.acc, hmm_desc=model.desc, seq_name=name, seq_acc=acc, seq_desc=desc)


def serialize_alidisplay(ad: AlignmentDisplay) -> bytes:
    """``p7_alidisplay_Serialize``: the display as HMMER writes it in a serialized hit (network
    byte order; each present line followed by a NUL, then the six NUL-terminated names)."""
    present = 0
    lines = []
    for flag, line in ((_RF, ad.rf), (_MM, ad.mm), (_CS, ad.cs), (0, ad.model), (0, ad.match), (_ASEQ, ad.aseq),
                       (_PP, ad.pp)):
        if line is None:
            continue
        present |= flag
        lines.append(line + b"\0")
    names = b"".join(text + b"\0" for text in (ad.hmm_name, ad.hmm_acc, ad.hmm_desc, ad.seq_name, ad.seq_acc,
                                                 ad.seq_desc))
    body = b"".join(lines) + names
    size = _ALIDISPLAY.size + len(body)
    return _ALIDISPLAY.pack(size, ad.N, ad.hmm_from, ad.hmm_to, ad.M, ad.seq_from, ad.seq_to, ad.L, present) + body


__all__ = ["ModelLines", "alidisplay_create", "encode_posterior", "serialize_alidisplay"]
