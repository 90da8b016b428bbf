"""The readable report of hmmsearch and hmmscan, the tables' ``#`` tail, and ``-A`` alignments.

What is written
---------------
Byte for byte what HMMER 3.4 writes, apart from the lines that name the program, its
version, the command line and the time taken:

* :func:`program_header`: ``output_header()`` of ``hmmsearch.c``/``hmmscan.c``: a banner,
  the two input files, then one line per option given on the command line, in HMMER's
  order and wording.
* :func:`query_report`: one query's block: ``Query:``/``Accession:``/``Description:``, the
  ranked target list (``p7_tophits_Targets()``), the per-target domain tables and
  alignments (``p7_tophits_Domains()`` and ``p7_alidisplay_Print()``), the pipeline's
  accounting (``p7_pli_Statistics()``) and ``//``.
* :func:`tabular_tail`: the ``#`` lines that ``p7_tophits_TabularTail()`` appends to
  ``--tblout``, ``--domtblout`` and ``--pfamtblout``, ending in ``# [ok]``, so that a
  half-written table is recognisable.
* :func:`write_alignment`: the ``-A`` file: a Stockholm (or, with ``--notextw``, one-block
  Pfam) alignment of the included domains, made by HMMER's own ``p7_tophits_Alignment()``
  through pyhmmer's ``TopHits.to_msa`` exactly as ``hmmsearch.c`` calls it.

Why it looks as it does
-----------------------
Everything is ``bytes``: HMMER prints names and descriptions as the C strings it read, so
a description with a non-UTF-8 byte appears as that byte (:mod:`hmmgpu.report.hitlist` reads the
hits without decoding). Numbers go through Python's ``%`` formatting, which rounds as C's
``printf`` does (both correctly rounded), and each value is computed with the operations C
uses: ``exp(lnP) * Z`` in double, ``pre_score - score`` in float, ``dombias * log2(e)``
in double. Widths follow HMMER's rules: the name column is as wide as the longest name in
the whole hit list (reported or not), descriptions are cut at the text width
(``--textw``, 120 by default; ``None`` is ``--notextw``), alignments wrap at it.
E-values are formatted where the caller has set hmmsearch's float mode (see
:func:`hmmgpu.host.flush_to_zero`), so that a subnormal E-value prints as 0 as in HMMER.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Literal, Mapping

import numpy as np

from hmmgpu._version import __version__
from hmmgpu.report.hitlist import (IS_DROPPED, IS_NEW, ZSETBY_OPTION, AlignmentDisplay, HitList, HitRecord, read_tophits)
from hmmgpu.formats.hmmfile import hmm_strings
from hmmgpu.options import ReportOptions

Program = Literal["search", "scan"]

LOG2R = 1.44269504088896341   #: Easel's eslCONST_LOG2R: bits per nat
MIN_ALIGNMENT_WIDTH = 40      #: p7_tophits_Domains() asks p7_alidisplay_Print() for at least this
RULE = b"# - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -\n"
REPORT_END = b"[ok]\n"

_PURPOSE = {"search": b"search profile(s) against a sequence database",
            "scan": b"search sequence(s) against a profile database"}
_TARGET = {"search": b"Sequence", "scan": b"Model"}

# output_header() of hmmsearch.c and hmmscan.c: (flag, label, format), in HMMER's order. A pair of
# labels holds the hmmsearch and hmmscan wordings; a format of None prints the label alone.
_HEADER_LINES = (
    ("-o", "output directed to file:", b"%s"),
    ("-A", "MSA of all hits saved to file:", b"%s"),
    ("--tblout", "per-seq hits tabular output:", b"%s"),
    ("--domtblout", "per-dom hits tabular output:", b"%s"),
    ("--pfamtblout", "pfam-style tabular hit output:", b"%s"),
    ("--acc", "prefer accessions over names:    yes", None),
    ("--noali", "show alignments in output:       no", None),
    ("--notextw", "max ASCII text line length:      unlimited", None),
    ("--textw", "max ASCII text line length:", b"%d"),
    ("-E", ("sequence reporting threshold:", "profile reporting threshold:"), b"E-value <= %g"),
    ("-T", ("sequence reporting threshold:", "profile reporting threshold:"), b"score >= %g"),
    ("--domE", "domain reporting threshold:", b"E-value <= %g"),
    ("--domT", "domain reporting threshold:", b"score >= %g"),
    ("--incE", ("sequence inclusion threshold:", "profile inclusion threshold:"), b"E-value <= %g"),
    ("--incT", ("sequence inclusion threshold:", "profile inclusion threshold:"), b"score >= %g"),
    ("--incdomE", "domain inclusion threshold:", b"E-value <= %g"),
    ("--incdomT", "domain inclusion threshold:", b"score >= %g"),
    ("--cut_ga", "model-specific thresholding:     GA cutoffs", None),
    ("--cut_nc", "model-specific thresholding:     NC cutoffs", None),
    ("--cut_tc", "model-specific thresholding:     TC cutoffs", None),
    ("--max", "Max sensitivity mode:            on [all heuristic filters off]", None),
    ("--F1", "MSV filter P threshold:       <=", b"%g"),
    ("--F2", "Vit filter P threshold:       <=", b"%g"),
    ("--F3", "Fwd filter P threshold:       <=", b"%g"),
    ("--nobias", "biased composition HMM filter:   off", None),
    ("--nonull2", "null2 bias corrections:          off", None),
    ("-Z", "sequence search space set to:", b"%.0f"),
    ("--domZ", "domain search space set to:", b"%.0f"),
    ("--seed", "random number seed set to:", b"%d"),
    ("--tformat", "targ <seqfile> format asserted:", b"%s"),
    ("--qformat", "input seqfile format asserted:", b"%s"),
    ("--cpu", ("number of worker threads:", "multithread parallelization:"), b"%d"),
)
_LABEL_WIDTH = 33   # "# " + label padded to this width, then the value (HMMER's column 35)

#: Default value strings of HMMER's option tables. Easel calls an option "used" (and the
#: header shows it) only when the string given differs from the default's: ``-E 10.0`` adds
#: no line, ``-E 10`` does. hmmsearch's --cpu default is the build's p7_NCPU (2 in the pip
#: package 'hmmer'); hmmscan's is 0.
HMMER_DEFAULTS = {"-E": "10.0", "--domE": "10.0", "--incE": "0.01", "--incdomE": "0.01", "--F1": "0.02",
                  "--F2": "1e-3", "--F3": "1e-5", "--textw": "120", "--seed": "42"}
_CPU_DEFAULT = {"search": "2", "scan": "0"}


def header_settings(program: Program, given: Mapping[str, tuple[str, object]]) -> dict:
    """The options that HMMER's header would show: ``given`` maps each option on the command
    line to (the string given, its value); those given as their default string are dropped."""
    defaults = dict(HMMER_DEFAULTS, **{"--cpu": _CPU_DEFAULT[program]})
    return {flag: value for flag, (text, value) in given.items() if defaults.get(flag) != text}


@dataclass(frozen=True, slots=True)
class Query:
    """What the report says about a query: its name, accession, description and length.

    ``length`` is the model's M (search) or the sequence's L (scan).
    """

    name: bytes
    accession: bytes | None
    description: bytes | None
    length: int

    @classmethod
    def from_hmm(cls, hmm) -> "Query":
        """A query model (pyhmmer ``HMM``); names that are not UTF-8 are kept as bytes."""
        name, accession, description = hmm_strings(hmm)
        return cls(name=name, accession=accession, description=description, length=hmm.M)


class Stopwatch:
    """CPU and wall time of one query, as ``esl_stopwatch`` measures them (``times()``)."""

    def __init__(self):
        self.user = self.sys = self.elapsed = 0.0
        self._start = None

    def start(self) -> "Stopwatch":
        self._start = (os.times(), time.perf_counter())
        return self

    def stop(self) -> "Stopwatch":
        (t0, w0), t1 = self._start, os.times()
        self.user, self.sys = t1.user - t0.user, t1.system - t0.system
        self.elapsed = time.perf_counter() - w0
        return self


def program_header(program: Program, query_file: str, target_file: str,
                   settings: Mapping[str, object] = {}) -> bytes:
    """The banner and option lines that open the report (``output_header()``).

    ``settings`` maps each option to show (``"-E"``, ``"--cut_ga"``, ...; see
    :func:`header_settings`) to its value (``True`` for switches); options not in HMMER's
    header are ignored.
    """
    hmmfile, seqfile = (query_file, target_file) if program == "search" else (target_file, query_file)
    out = [b"# hmmgpu %s :: %s\n" % (program.encode(), _PURPOSE[program]),
           b"# hmmgpu %s; HMMER 3.4 (Aug 2023) pipeline through pyhmmer; http://hmmer.org/\n" % __version__.encode(),
           b"# HMMER: Copyright (C) 2023 Howard Hughes Medical Institute.\n",
           b"# Freely distributed under the BSD open source license (HMMER) and the MIT license (hmmgpu).\n",
           RULE]
    if program == "search":
        out += [_header_line("query HMM file:", b"%s", hmmfile),
                _header_line("target sequence database:", b"%s", seqfile)]
    else:
        out += [_header_line("query sequence file:", b"%s", seqfile),
                _header_line("target HMM database:", b"%s", hmmfile)]
    for flag, label, fmt in _HEADER_LINES:
        if flag not in settings or (program == "scan" and flag in ("-A", "--tformat")) \
                or (program == "search" and flag == "--qformat"):
            continue
        value = settings[flag]
        if isinstance(label, tuple):
            label = label[0 if program == "search" else 1]
        if flag == "--seed" and value == 0:
            # hmmsearch.c and hmmscan.c print this line, then (their test falls through to
            # the else branch) "set to: 0" as well
            out.append(_header_line("random number seed:              one-time arbitrary", None, value))
        elif flag == "--cpu" and program == "scan":
            label, fmt = "multithread parallelization:", (b"off" if value == 0 else b"%d workers")
        out.append(_header_line(label, fmt, value))
    out.append(RULE + b"\n")
    return b"".join(out)


def _header_line(label: str, fmt: bytes | None, value) -> bytes:
    if fmt is None:
        return b"# %s\n" % label.encode()
    if isinstance(value, str):
        value = os.fsencode(value)
    text = fmt % value if b"%" in fmt else fmt
    return b"# %-*s%s\n" % (_LABEL_WIDTH, label.encode(), text)


def query_report(query: Query, hits, options: ReportOptions = ReportOptions(),
                 stopwatch: Stopwatch | None = None) -> bytes:
    """One query's block of the report, ``Query:`` to ``//``.

    ``hits``: a pyhmmer ``TopHits`` or a :class:`~hmmgpu.report.hitlist.HitList`, sorted and
    thresholded. ``stopwatch``: the query's timing (the two ``#`` timing lines).
    """
    hitlist = hits if isinstance(hits, HitList) else read_tophits(hits)
    unit = b"M" if hitlist.mode == "search" else b"L"
    out = [b"Query:       %s  [%s=%d]\n" % (query.name, unit, query.length)]
    if query.accession:
        out.append(b"Accession:   %s\n" % query.accession)
    if query.description:
        out.append(b"Description: %s\n" % query.description)
    out += [targets_table(hitlist, options), b"\n\n", domain_annotation(hitlist, options), b"\n\n",
            pipeline_statistics(hitlist, stopwatch), b"//\n"]
    return b"".join(out)


def _shown_name(hit: HitRecord, acc: bool) -> bytes:
    return hit.acc if acc and hit.acc else hit.name


def _evalue(lnP: float, Z: float) -> float:
    return math.exp(lnP) * Z


def targets_table(hitlist: HitList, options: ReportOptions = ReportOptions()) -> bytes:
    """The ranked list of targets (``p7_tophits_Targets()``)."""
    pli, textw = hitlist.accounting, options.textw or 0
    namew = max(8, max((len(_shown_name(h, options.acc)) for h in hitlist.hits), default=0))
    descw = max(32, textw - namew - 61)
    row = b"  %9s %6s %5s  %9s %6s %5s  %5s %2s  %-*s %s\n"
    out = [b"Scores for complete sequence%s (score includes all domains):\n" % (b"s" if pli.mode == "search" else b""),
           b"  %22s  %22s  %8s\n" % (b" --- full sequence ---", b" --- best 1 domain ---", b"-#dom-"),
           row % (b"E-value", b" score", b" bias", b"E-value", b" score", b" bias", b"  exp", b"N", namew,
                  _TARGET[pli.mode], b"Description"),
           row % (b"-------", b"------", b"-----", b"-------", b"------", b"-----", b" ----", b"--", namew,
                  b"--------", b"-----------")]
    threshold_shown = False
    for hit in hitlist.hits:
        if not hit.reported:
            continue
        if not hit.included and not threshold_shown:
            out.append(b"  ------ inclusion threshold ------\n")
            threshold_shown = True
        best = hit.domains[hit.best_domain]
        mark = b"+" if hit.flags & IS_NEW else b"-" if hit.flags & IS_DROPPED else b" "
        bias = float(np.float32(hit.pre_score) - np.float32(hit.score))
        out.append(b"%s %9.2g %6.1f %5.1f  %9.2g %6.1f %5.1f  %5.1f %2d  %-*s " % (
            mark, _evalue(hit.lnP, pli.Z), hit.score, bias, _evalue(best.lnP, pli.Z), best.bitscore,
            LOG2R * best.dombias, hit.nexpected, hit.nreported, namew, _shown_name(hit, options.acc)))
        out.append(_cut(b" %s", hit.desc or b"", descw if textw else None) + b"\n")
    if hitlist.nreported == 0:
        out.append(b"\n   [No hits detected that satisfy reporting thresholds]\n")
    return b"".join(out)


def _cut(fmt: bytes, text: bytes, width: int | None) -> bytes:
    """``fmt % text`` with text cut to ``width`` bytes (C's ``%.*s``); uncut if width is None."""
    return fmt % (text if width is None else text[:width])


_DOMAIN_COLUMNS = b" %3s   %6s %5s %9s %9s %7s %7s %2s %7s %7s %2s %7s %7s %2s %4s\n"


def domain_annotation(hitlist: HitList, options: ReportOptions = ReportOptions()) -> bytes:
    """Per-target domain tables and alignments (``p7_tophits_Domains()``)."""
    pli, textw, show_ali = hitlist.accounting, options.textw or 0, not options.noali
    out = [b"Domain annotation for each %s%s:\n" % (b"sequence" if pli.mode == "search" else b"model",
                                                     b" (and alignments)" if show_ali else b"")]
    for hit in hitlist.hits:
        if not hit.reported:
            continue
        name = _shown_name(hit, options.acc)
        descw = max(32, textw - len(name) - 5)
        out.append(b">> %s  " % name + _cut(b"%s", hit.desc or b"", descw if textw else None) + b"\n")
        if hit.nreported == 0:
            out.append(b"   [No individual domains that satisfy reporting thresholds "
                       b"(although complete target did)]\n\n")
            continue
        out.append(_DOMAIN_COLUMNS % (b"#", b"score", b"bias", b"c-Evalue", b"i-Evalue", b"hmmfrom", b"hmm to", b"  ",
                                      b"alifrom", b"ali to", b"  ", b"envfrom", b"env to", b"  ", b"acc"))
        out.append(_DOMAIN_COLUMNS % (b"---", b"------", b"-----", b"---------", b"---------", b"-------", b"-------",
                                      b"  ", b"-------", b"-------", b"  ", b"-------", b"-------", b"  ", b"----"))
        reported = [d for d in hit.domains if d.reported]
        for n, d in enumerate(reported, 1):
            ad = d.alignment
            out.append(b" %3d %c %6.1f %5.1f %9.2g %9.2g %7d %7d %c%c %7d %7d %c%c %7d %7d %c%c %4.2f\n" % (
                n, b"!" if d.included else b"?", d.bitscore, d.dombias * LOG2R, _evalue(d.lnP, pli.domZ),
                _evalue(d.lnP, pli.Z), ad.hmm_from, ad.hmm_to, _open(ad.hmm_from == 1), _close(ad.hmm_to == ad.M),
                ad.seq_from, ad.seq_to, _open(ad.seq_from == 1), _close(ad.seq_to == ad.L),
                d.ienv, d.jenv, _open(d.ienv == 1), _close(d.jenv == ad.L),
                d.oasc / (1.0 + abs(float(np.float32(d.jenv - d.ienv))))))
        if not show_ali:
            out.append(b"\n")
            continue
        out.append(b"\n  Alignments for each domain:\n")
        for n, d in enumerate(reported, 1):
            out.append(b"  == domain %d  score: %.1f bits;  conditional E-value: %.2g\n"
                       % (n, d.bitscore, _evalue(d.lnP, pli.domZ)))
            out.append(alignment_block(d.alignment, textw, options.acc))
            out.append(b"\n")
    if hitlist.nreported == 0:
        out.append(b"\n   [No targets detected that satisfy reporting thresholds]\n")
    return b"".join(out)


def _open(edge: bool) -> bytes:
    return b"[" if edge else b"."


def _close(edge: bool) -> bytes:
    return b"]" if edge else b"."


def _text_width(n: int) -> int:
    """Digits of n (0 for n = 0), as ``integer_textwidth()`` counts them."""
    return len(str(abs(n))) + (n < 0) if n else 0


def alignment_block(ad: AlignmentDisplay, textw: int, acc: bool = False) -> bytes:
    """One domain's alignment, wrapped at ``textw`` (0: one block), as ``p7_alidisplay_Print()``."""
    hmm_name = ad.hmm_acc if acc and ad.hmm_acc else ad.hmm_name
    seq_name = ad.seq_acc if acc and ad.seq_acc else ad.seq_name
    namew = max(len(hmm_name), len(seq_name))
    coordw = max(_text_width(ad.hmm_from), _text_width(ad.hmm_to), _text_width(ad.seq_from), _text_width(ad.seq_to))
    N = ad.N
    width = textw - namew - 2 * coordw - 5 if textw > 0 else N
    if width < N and width < MIN_ALIGNMENT_WIDTH:
        width = MIN_ALIGNMENT_WIDTH
    pad = namew + coordw + 1
    forward = ad.seq_from < ad.seq_to
    out = []
    k1, i1 = ad.hmm_from, ad.seq_from
    for pos in range(0, N, width):
        if pos > 0:
            out.append(b"\n")
        model, aseq = ad.model[pos:pos + width], ad.aseq[pos:pos + width]
        nk = len(model) - model.count(b".")
        ni = len(aseq) - aseq.count(b"-")
        k2 = k1 + nk - 1
        i2 = i1 + ni - 1 if forward else i1 - ni + 1
        for line, tag in ((ad.cs, b"CS"), (ad.rf, b"RF"), (ad.mm, b"MM")):
            if line is not None:
                out.append(b"  %*s %s %s\n" % (pad, b"", line[pos:pos + width], tag))
        out.append(b"  %*s %*d %s %-*d\n" % (namew, hmm_name, coordw, k1, model, coordw, k2))
        out.append(b"  %*s %s\n" % (pad, b" ", ad.match[pos:pos + width]))
        if ni > 0:
            out.append(b"  %*s %*d %s %-*d\n" % (namew, seq_name, coordw, i1, aseq, coordw, i2))
        else:
            out.append(b"  %*s %*s %s %*s\n" % (namew, seq_name, coordw, b"-", aseq, coordw, b"-"))
        if ad.pp is not None:
            out.append(b"  %*s %s PP\n" % (pad, b"", ad.pp[pos:pos + width]))
        k1 += nk
        i1 = i1 + ni if forward else i1 - ni
    return b"".join(out)


def pipeline_statistics(hitlist: HitList, stopwatch: Stopwatch | None = None) -> bytes:
    """'Internal pipeline statistics summary' (``p7_pli_Statistics()``), with the timing lines."""
    pli = hitlist.accounting
    ntargets = pli.ntargets
    out = [b"Internal pipeline statistics summary:\n", b"-------------------------------------\n"]
    models = b"%-29s%15d  (%d nodes)\n" % (b"Query model(s):" if pli.mode == "search" else b"Target model(s):",
                                           pli.nmodels, pli.nnodes)
    seqs = b"%-29s%15d  (%d residues searched)\n" % (
        b"Target sequences:" if pli.mode == "search" else b"Query sequence(s):", pli.nseqs, pli.nres)
    out += [models, seqs] if pli.mode == "search" else [seqs, models]
    for label, passed, F in ((b"Passed MSV filter:", pli.n_past_msv, pli.F1),
                             (b"Passed bias filter:", pli.n_past_bias, pli.F1),
                             (b"Passed Vit filter:", pli.n_past_vit, pli.F2),
                             (b"Passed Fwd filter:", pli.n_past_fwd, pli.F3)):
        out.append(b"%-29s%15d  (%.6g); expected %.1f (%.6g)\n"
                   % (label, passed, _ratio(passed, ntargets), F * ntargets, F))
    out.append(b"Initial search space (Z):    %15.0f  %s\n" % (
        pli.Z, b"[as set by --Z on cmdline]" if pli.Z_setby == ZSETBY_OPTION else b"[actual number of targets]"))
    out.append(b"Domain search space  (domZ): %15.0f  %s\n" % (
        pli.domZ, b"[as set by --domZ on cmdline]" if pli.domZ_setby == ZSETBY_OPTION
        else b"[number of targets reported over threshold]"))
    if stopwatch is not None:
        out.append(b"# CPU time: %.2fu %.2fs %s Elapsed: %s\n" % (
            stopwatch.user, stopwatch.sys, _clock(stopwatch.user + stopwatch.sys), _clock(stopwatch.elapsed)))
        rate = pli.nres * pli.nnodes / (stopwatch.elapsed * 1e6) if stopwatch.elapsed > 0 else math.inf
        out.append(b"# Mc/sec: %.2f\n" % rate)
    return b"".join(out)


def _ratio(a: int, b: int) -> float:
    """C's double division, with 0/0 = nan and x/0 = inf."""
    if b:
        return a / b
    return math.nan if a == 0 else math.inf


def _clock(seconds: float) -> bytes:
    """hh:mm:ss.hs, as ``esl_stopwatch_Display()`` formats a duration."""
    h = int(seconds / 3600.0)
    m = int(seconds / 60.0) - h * 60
    s = int(seconds) - h * 3600 - m * 60
    hs = int(seconds * 100.0) - h * 360000 - m * 6000 - s * 100
    return b"%02d:%02d:%02d.%02d" % (h, m, s, hs)


def tabular_tail(program: Program, query_file: str, target_file: str, command_line: str,
                 table: Literal["tblout", "domtblout", "pfamtblout"] = "tblout") -> bytes:
    """The ``#`` lines that end every table (``p7_tophits_TabularTail()``), last ``# [ok]``."""
    # hmmscan.c passes p7_SEARCH_SEQS for its --pfamtblout tail; its tables say so, and so do ours.
    mode = b"SEARCH" if program == "search" or table == "pfamtblout" else b"SCAN"
    return b"".join([
        b"#\n",
        b"# Program:         hmmgpu %s\n" % program.encode(),
        b"# Version:         %s (hmmgpu; HMMER 3.4 pipeline)\n" % __version__.encode(),
        b"# Pipeline mode:   %s\n" % mode,
        b"# Query file:      %s\n" % os.fsencode(query_file),
        b"# Target file:     %s\n" % os.fsencode(target_file),
        b"# Option settings: %s\n" % os.fsencode(command_line),
        b"# Current dir:     %s\n" % os.fsencode(_cwd()),
        b"# Date:            %s\n" % time.ctime().encode(),
        b"# [ok]\n",
    ])


def _cwd() -> str:
    try:
        return os.getcwd()
    except OSError:
        return "[unknown]"


def write_alignment(stream, hits, hmm, textw: int | None = 120) -> int:
    """Write the ``-A`` alignment of the included domains; return how many sequences it has.

    Nothing is written (and 0 returned) when no domain is included, as in hmmsearch.
    ``textw=None`` (``--notextw``) writes the one-block Pfam format, as hmmsearch does.
    """
    try:
        msa = hits.to_msa(hmm.alphabet, all_consensus_cols=True)
    except ValueError:   # "No included domains found": p7_tophits_Alignment() returned eslFAIL
        return 0
    name, accession, description = hmm_strings(hmm)
    msa.name = name
    if accession is not None:
        msa.accession = accession
    if description is not None:
        msa.description = description
    msa.author = b"hmmgpu %s (HMMER 3.4)" % __version__.encode()
    msa.write(stream, "stockholm" if textw else "pfam")
    return len(msa.sequences)


def alignment_note(nseq: int, path: str) -> bytes:
    """The line hmmsearch writes after a query's ``//`` when ``-A`` is given."""
    if nseq == 0:
        return b"# No hits satisfy inclusion thresholds; no alignment saved\n"
    return b"# Alignment of %d hits satisfying inclusion thresholds saved to: %s\n" % (nseq, os.fsencode(path))


__all__ = ["Query", "Stopwatch", "program_header", "header_settings", "HMMER_DEFAULTS", "query_report",
           "targets_table", "domain_annotation", "alignment_block", "pipeline_statistics", "tabular_tail",
           "write_alignment", "alignment_note", "REPORT_END"]
