"""A pyhmmer ``TopHits`` read back as plain records, every string as the bytes HMMER holds.

Why this module exists
----------------------
The readable report (:mod:`hmmgpu.report.text`) prints every field of every hit, domain and
alignment exactly as ``p7_tophits_Targets()``, ``p7_tophits_Domains()`` and
``p7_alidisplay_Print()`` do. pyhmmer 0.12.3 exposes most of them as properties, but not
all: a domain's ``oasc`` (the "acc" column), an alignment's RF/CS/MM lines, a hit's
``nexpected`` and the pipeline's accounting are missing, and every string property decodes
the C string as UTF-8, so a sequence description with a byte such as ``\\xff`` raises
``UnicodeDecodeError`` where hmmsearch simply prints the byte.

``TopHits.__getstate__()`` (pyhmmer's pickle support) holds everything: one buffer per hit
in HMMER's own network-byte-order serialization (``p7_hit_Serialize()``, followed by
``p7_domain_Serialize()`` and ``p7_alidisplay_Serialize()`` for each domain; HMMER 3.4
``src/p7_hit.c``, ``src/p7_domain.c``, ``src/p7_alidisplay.c``), the ranked order, and the
pipeline's thresholds and counters. :func:`read_tophits` decodes those buffers with
``struct``; strings stay ``bytes``; floats keep their single-precision values, because the
report must do the same float arithmetic as C (``pre_score - score`` is a float
subtraction in HMMER).

The layout is checked as it is read (each record starts with its own serialized size), so
a pyhmmer that changed it gives a clear error rather than a wrong report.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Literal

from hmmgpu.errors import HmmgpuError

#: ``p7_hitflags_e`` (HMMER 3.4 ``src/hmmer.h``).
IS_INCLUDED, IS_REPORTED, IS_NEW, IS_DROPPED, IS_DUPLICATE = 1, 2, 4, 8, 16
#: ``p7_zsetby_e``: Z and domZ counted from the targets, or set by an option.
ZSETBY_NTARGETS, ZSETBY_OPTION = 0, 1

#: The records of pyhmmer's serialized TopHits (the ``hits`` bytes of its ``__getstate__``): a
#: hit, a domain and an alignment display, each followed by its variable parts; which optional
#: parts are present is a bit set (``HIT_HAS_*``, ``ALI_HAS_*``).
HIT_STRUCT = struct.Struct(">Iidfffdddfiiiii" "Iiiiqq" "B")
DOMAIN_STRUCT = struct.Struct(">Iqqqqqq" "fffff" "d" "iii")
ALIDISPLAY_STRUCT = struct.Struct(">IIiiiqqqB")
HIT_HAS_ACCESSION, HIT_HAS_DESCRIPTION = 1, 2
ALI_HAS_RF, ALI_HAS_MM, ALI_HAS_CS, ALI_HAS_PP, ALI_HAS_ASEQ, ALI_HAS_NTSEQ = 1, 2, 4, 8, 16, 32
#: An alignment display's annotation lines before its nucleotide sequence, in their order, each
#: with the bit that says it is present (0: always), as ``p7_alidisplay_Serialize()`` writes them.
_ALIGNMENT_LINES = ((ALI_HAS_RF, "rf"), (ALI_HAS_MM, "mm"), (ALI_HAS_CS, "cs"), (0, "model"), (0, "match"),
                    (ALI_HAS_ASEQ, "aseq"))


@dataclass(frozen=True, slots=True)
class AlignmentDisplay:
    """One domain's alignment (``P7_ALIDISPLAY``): coordinates, annotation lines and names."""

    hmm_from: int
    hmm_to: int
    M: int
    seq_from: int
    seq_to: int
    L: int
    rf: bytes | None
    mm: bytes | None
    cs: bytes | None
    model: bytes
    match: bytes
    aseq: bytes
    pp: bytes | None
    hmm_name: bytes
    hmm_acc: bytes
    hmm_desc: bytes
    seq_name: bytes
    seq_acc: bytes
    seq_desc: bytes

    @property
    def N(self) -> int:
        """Number of alignment columns."""
        return len(self.model)


@dataclass(frozen=True, slots=True)
class DomainRecord:
    """One domain (``P7_DOMAIN``): envelope, scores in HMMER's units, flags, alignment."""

    ienv: int
    jenv: int
    iali: int
    jali: int
    envsc: float
    domcorrection: float
    dombias: float       #: nats (the report shows bits)
    oasc: float          #: sum of the posterior probabilities of the aligned residues
    bitscore: float
    lnP: float
    reported: bool
    included: bool
    alignment: AlignmentDisplay


@dataclass(frozen=True, slots=True)
class HitRecord:
    """One target (``P7_HIT``). ``name``, ``acc`` and ``desc`` are the bytes HMMER holds."""

    name: bytes
    acc: bytes | None
    desc: bytes | None
    sortkey: float
    score: float
    pre_score: float
    sum_score: float
    lnP: float
    nexpected: float
    flags: int
    nreported: int
    nincluded: int
    best_domain: int
    seqidx: int
    domains: tuple[DomainRecord, ...]

    @property
    def reported(self) -> bool:
        return bool(self.flags & IS_REPORTED)

    @property
    def included(self) -> bool:
        return bool(self.flags & IS_INCLUDED)


@dataclass(frozen=True, slots=True)
class PipelineAccounting:
    """The pipeline's thresholds and counters that the report prints (``P7_PIPELINE``)."""

    mode: Literal["search", "scan"]
    nmodels: int
    nseqs: int
    nres: int
    nnodes: int
    n_past_msv: int
    n_past_bias: int
    n_past_vit: int
    n_past_fwd: int
    F1: float
    F2: float
    F3: float
    Z: float
    domZ: float
    Z_setby: int
    domZ_setby: int

    @property
    def ntargets(self) -> int:
        """Targets compared with each query: sequences (search) or models (scan)."""
        return self.nseqs if self.mode == "search" else self.nmodels


@dataclass(frozen=True, slots=True)
class HitList:
    """A ranked hit list: every hit kept by the pipeline (reported or not), best first."""

    hits: tuple[HitRecord, ...]
    nreported: int
    nincluded: int
    accounting: PipelineAccounting

    @property
    def mode(self) -> Literal["search", "scan"]:
        return self.accounting.mode


def read_tophits(tophits) -> HitList:
    """Decode a pyhmmer ``TopHits`` (sorted and thresholded, as a pipeline returns it)."""
    state = tophits.__getstate__()
    unsorted = [read_hit(blob) for blob in state["unsrt"]]
    pli = state["pipeline"]
    accounting = PipelineAccounting(
        mode="search" if pli["mode"] == 0 else "scan",
        **{name: pli[name] for name in PipelineAccounting.__slots__ if name != "mode"})
    return HitList(hits=tuple(unsorted[i] for i in state["hit"]), nreported=state["nreported"],
                   nincluded=state["nincluded"], accounting=accounting)


def read_hit(blob) -> HitRecord:
    """One hit of a ``TopHits`` state (a buffer holding ``p7_hit_Serialize()``'s bytes)."""
    return _read_hit(bytes(blob))


# The readers below take the record's bytes and slice them directly (no memoryview, no copy of
# the rest of the buffer to find a NUL): a 29 M-residue search's report reads some 30,000 hits
# and 40,000 alignments here, in the thread that also hands pyhmmer's threads their work.
def _cstring(buf: bytes, pos: int) -> tuple[bytes, int]:
    """The NUL-terminated string at ``pos`` and the position after its NUL."""
    end = buf.index(0, pos)
    return buf[pos:end], end + 1


def _read_hit(buf: bytes) -> HitRecord:
    (size, _window, sortkey, score, pre_score, sum_score, lnP, _pre_lnP, _sum_lnP, nexpected, _nregions,
     _nclustered, _noverlaps, _nenvelopes, ndom, flags, nreported, nincluded, best_domain, seqidx, _subseq,
     present) = HIT_STRUCT.unpack_from(buf, 0)
    pos = HIT_STRUCT.size
    name, pos = _cstring(buf, pos)
    acc = desc = None
    if present & HIT_HAS_ACCESSION:
        acc, pos = _cstring(buf, pos)
    if present & HIT_HAS_DESCRIPTION:
        desc, pos = _cstring(buf, pos)
    _check(pos == size, "hit")
    domains = []
    for _ in range(ndom):
        domain, pos = _read_domain(buf, pos)
        domains.append(domain)
    _check(pos == len(buf), "hit list entry")
    return HitRecord(name=name, acc=acc, desc=desc, sortkey=sortkey, score=score, pre_score=pre_score,
                     sum_score=sum_score, lnP=lnP, nexpected=nexpected, flags=flags, nreported=nreported,
                     nincluded=nincluded, best_domain=best_domain, seqidx=seqidx, domains=tuple(domains))


def _read_domain(buf: bytes, start: int) -> tuple[DomainRecord, int]:
    (size, ienv, jenv, iali, jali, _iorf, _jorf, envsc, domcorrection, dombias, oasc, bitscore, lnP, reported,
     included, n_scores) = DOMAIN_STRUCT.unpack_from(buf, start)
    pos = start + DOMAIN_STRUCT.size + 4 * n_scores
    _check(pos - start == size, "domain")
    alignment, pos = _read_alidisplay(buf, pos)
    return DomainRecord(ienv=ienv, jenv=jenv, iali=iali, jali=jali, envsc=envsc, domcorrection=domcorrection,
                        dombias=dombias, oasc=oasc, bitscore=bitscore, lnP=lnP, reported=bool(reported),
                        included=bool(included), alignment=alignment), pos


def _read_alidisplay(buf: bytes, start: int) -> tuple[AlignmentDisplay, int]:
    """An alignment display: its annotation lines of ``N`` characters (each stored in ``N + 1``
    bytes), those present in ``present``'s order, then six NUL-terminated names that end the record."""
    size, N, hmm_from, hmm_to, M, seq_from, seq_to, L, present = ALIDISPLAY_STRUCT.unpack_from(buf, start)
    pos = start + ALIDISPLAY_STRUCT.size
    lines = {}
    for flag, key in _ALIGNMENT_LINES:
        if flag == 0 or present & flag:
            lines[key], pos = buf[pos:pos + N], pos + N + 1
    if present & ALI_HAS_NTSEQ:
        pos += 3 * N + 1
    if present & ALI_HAS_PP:
        lines["pp"], pos = buf[pos:pos + N], pos + N + 1
    end = start + size
    names = buf[pos:end].split(b"\0")
    _check(end <= len(buf) and len(names) == 7 and not names[6], "alignment")  # six strings, the last NUL the end
    return AlignmentDisplay(hmm_from=hmm_from, hmm_to=hmm_to, M=M, seq_from=seq_from, seq_to=seq_to, L=L,
                            rf=lines.get("rf"), mm=lines.get("mm"), cs=lines.get("cs"), model=lines["model"],
                            match=lines["match"], aseq=lines.get("aseq", b""), pp=lines.get("pp"),
                            hmm_name=names[0], hmm_acc=names[1], hmm_desc=names[2], seq_name=names[3],
                            seq_acc=names[4], seq_desc=names[5]), end


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise HmmgpuError(f"cannot read pyhmmer's serialized {what}: this pyhmmer's layout differs from "
                          "HMMER 3.4's (hmmgpu needs pyhmmer 0.12)")


__all__ = ["read_tophits", "read_hit", "HitList", "HitRecord", "DomainRecord", "AlignmentDisplay", "PipelineAccounting",
           "IS_INCLUDED", "IS_REPORTED", "IS_NEW", "IS_DROPPED", "IS_DUPLICATE", "ZSETBY_NTARGETS", "ZSETBY_OPTION"]
