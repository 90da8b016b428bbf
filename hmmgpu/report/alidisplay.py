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
The model's part of every display (letters per node, the digital code of each consensus
letter, the odds ratios destriped to ``[residue][node]``) depends on the model only, so
:class:`ModelLines` builds it once per query; a display is then a few numpy gathers over
the trace's columns. HMMER compares the consensus residue after digitizing its letter with
Easel's case-insensitive input map; a letter outside the alphabet never matches.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hmmgpu.constants import AMINO_SYMBOLS, KP
from hmmgpu.report.hitlist import _ALIDISPLAY, _ASEQ, _CS, _MM, _PP, _RF, AlignmentDisplay

#: HMMER's p7T_ state codes of the states a display shows, and of the domain's bounds.
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
_UPPER = np.frombuffer(AMINO_SYMBOLS.encode(), np.uint8)
_LOWER = np.frombuffer(AMINO_SYMBOLS.lower().encode(), np.uint8)


@dataclass(frozen=True, eq=False)
class ModelLines:
    """What of a model every alignment display shows: its names, its per-node letters
    (index k for node k, index 0 unused, as HMMER's 1-based strings), the digital code of
    each consensus letter, and the match emission odds ratios ``odds[x][k]``."""

    name: bytes
    acc: bytes
    desc: bytes
    M: int
    consensus: np.ndarray  #: uint8 [M+1]: consensus letters
    consensus_codes: np.ndarray  #: uint8 [M+1]: their digital codes (254: not in the alphabet)
    rf: np.ndarray | None  #: uint8 [M+1]: reference annotation, or None
    cs: np.ndarray | None  #: uint8 [M+1]: consensus structure, or None
    odds: np.ndarray  #: float32 [Kp][M+1]: the Forward match emission odds ratios

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
            line = np.frombuffer(b" " + text.encode(), np.uint8)
            if line.size != M + 1:
                raise ValueError(f"a model annotation line of {line.size - 1} letters for {M} nodes")
            return line

        consensus = per_node(hmm.consensus)
        rfv = np.asarray(rfv, np.float32)
        Q = rfv.shape[1]
        odds = np.zeros((KP, M + 1), np.float32)
        k = np.arange(1, M + 1)
        odds[:, 1:] = rfv[:, (k - 1) % Q, (k - 1) // Q]
        return cls(name=name, acc=acc or b"", desc=desc or b"", M=M, consensus=consensus,
                   consensus_codes=_CODE_OF[consensus], rf=per_node(hmm.reference),
                   cs=per_node(hmm.consensus_structure), odds=odds)


def encode_posterior(pp: np.ndarray) -> np.ndarray:
    """HMMER's ``p7_alidisplay_EncodePostProb`` of float32 posterior probabilities, as
    letters (uint8): ``*`` when ``p + 0.05 >= 1``, else the digit ``(int)((p + 0.05) * 10)``,
    in double."""
    shifted = np.asarray(pp, np.float32).astype(np.float64) + 0.05
    digits = (shifted * 10.0).astype(np.int64)  # C's (char) cast truncates toward zero
    return np.where(shifted >= 1.0, ord("*"), ord("0") + digits).astype(np.uint8)


def alidisplay_create(trace, model: ModelLines, codes: np.ndarray, name: bytes, acc: bytes = b"",
                      desc: bytes = b"") -> AlignmentDisplay:
    """``p7_alidisplay_Create`` of the first domain of ``trace`` (a
    :class:`hmmgpu.cpu.optacc.Trace`, residues numbered in the target's coordinates: ``i`` of
    an emitting state is ``codes[i - 1]``), for the target ``codes`` (digital residues,
    length L) named ``name`` with accession ``acc`` and description ``desc`` ("" when unset)."""
    st = np.asarray(trace.st)
    begins = np.flatnonzero(st == _B)
    if begins.size == 0:
        raise ValueError("the trace has no domain (no B state)")
    is_match = st == _M
    after_b = np.flatnonzero(is_match[begins[0]:]) + begins[0]
    if after_b.size == 0:
        raise ValueError("the trace's domain has no M state")
    z1 = int(after_b[0])
    ends = np.flatnonzero(st[z1:] == _E)
    if ends.size == 0:
        raise ValueError("the trace's domain has no E state")
    z2 = int(np.flatnonzero(is_match[:z1 + int(ends[0])])[-1])
    cols = slice(z1, z2 + 1)
    s, k, i = st[cols], np.asarray(trace.k[cols], np.int64), np.asarray(trace.i[cols], np.int64)
    if not np.isin(s, (_M, _D, _I)).all():
        raise ValueError("invalid state in trace: not M, D or I")
    m, d, ins = s == _M, s == _D, s == _I
    x = np.where(d, 0, np.asarray(codes, np.uint8)[np.maximum(i - 1, 0)])
    kk = np.where(ins, 0, k)

    model_line = np.where(ins, ord("."), model.consensus[kk]).astype(np.uint8)
    plus = model.odds[x, kk] > np.float32(1.0)
    match = np.where(m & (x == model.consensus_codes[kk]), model_line,
                     np.where(m & plus, ord("+"), ord(" "))).astype(np.uint8)
    aseq = np.where(m, _UPPER[x], np.where(ins, _LOWER[x], ord("-"))).astype(np.uint8)
    pp = np.where(d, ord("."), encode_posterior(trace.pp[cols])).astype(np.uint8)

    def annotation(line):
        return None if line is None else np.where(ins, ord("."), line[kk]).astype(np.uint8).tobytes()

    return AlignmentDisplay(hmm_from=int(k[0]), hmm_to=int(k[-1]), M=model.M, seq_from=int(i[0]),
                            seq_to=int(i[-1]), L=int(np.size(codes)), rf=annotation(model.rf), mm=None,
                            cs=annotation(model.cs), model=model_line.tobytes(), match=match.tobytes(),
                            aseq=aseq.tobytes(), pp=pp.tobytes(), hmm_name=model.name, hmm_acc=model.acc,
                            hmm_desc=model.desc, seq_name=name, seq_acc=acc, seq_desc=desc)


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
