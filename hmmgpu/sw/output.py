"""Outputs of the Smith-Waterman search: BLAST tabular (``--outfmt 6``) and a readable report.

Numbers are formatted as NCBI BLAST+ formats them (``CAlignFormatUtil::GetScoreString``):
E-values ``0.0`` below 1e-180, ``%3.2e`` below 0.0009, then ``%4.3f``,
``%3.2f``, ``%2.1f`` and ``%5.0f`` by decade; bit scores ``%5.3e`` above 99999, the integer
part above 99.9, else ``%2.1f``; percent identity ``%.3f``.
"""
from __future__ import annotations

import io


from hmmgpu.sw.matrices import letters

#: The 12 columns of BLAST's ``-outfmt 6``.
TABULAR_COLUMNS = ("qseqid", "sseqid", "pident", "length", "mismatch", "gapopen", "qstart", "qend", "sstart",
                   "send", "evalue", "bitscore")


def format_evalue(e: float) -> str:
    """An E-value as BLAST+ prints it."""
    if e < 1.0e-180:
        return "0.0"
    if e < 0.0009:
        return "%3.2e" % e
    if e < 0.1:
        return "%4.3f" % e
    if e < 1.0:
        return "%3.2f" % e
    if e < 10.0:
        return "%2.1f" % e
    return ("%5.0f" % e).strip()


def format_bits(b: float) -> str:
    """A bit score as BLAST+ prints it."""
    if b > 99999:
        return "%5.3e" % b
    if b > 99.9:
        return "%d" % int(b)
    return "%2.1f" % b


def _text(v) -> str:
    return v.decode(errors="replace") if isinstance(v, (bytes, bytearray)) else str(v)


def write_tabular(fh, hits) -> None:
    """Append one query's hits (a :class:`~hmmgpu.sw.api.QueryHits`) as BLAST tabular rows."""
    q = _text(hits.query_name)
    for r in range(len(hits)):
        fh.write("\t".join((
            q, _text(hits.target_name[r]), "%.3f" % hits.pident[r], str(int(hits.length[r])),
            str(int(hits.mismatch[r])), str(int(hits.gapopen[r])), str(int(hits.q_start[r])),
            str(int(hits.q_end[r])), str(int(hits.t_start[r])), str(int(hits.t_end[r])),
            format_evalue(float(hits.evalue[r])), format_bits(float(hits.bits[r])))) + "\n")


def _pairwise(out, q_codes, t_codes, aln, by_code, width: int = 60) -> None:
    qa, ta = aln.columns(q_codes, t_codes)
    qrow = "".join("-" if c < 0 else letters([c]) for c in qa.tolist())
    trow = "".join("-" if c < 0 else letters([c]) for c in ta.tolist())
    mid = []
    for a, b in zip(qa.tolist(), ta.tolist()):
        if a < 0 or b < 0:
            mid.append(" ")
        elif a == b:
            mid.append(letters([a]))
        elif by_code[a, b] > 0:
            mid.append("+")
        else:
            mid.append(" ")
    mid = "".join(mid)
    qi, ti = aln.q_start, aln.t_start
    pad = len(str(max(aln.q_end, aln.t_end)))
    for c in range(0, len(qrow), width):
        qs, ts = qrow[c:c + width], trow[c:c + width]
        qn = sum(ch != "-" for ch in qs)
        tn = sum(ch != "-" for ch in ts)
        out.write(f"Query  {qi:<{pad}}  {qs}  {qi + qn - 1}\n")
        out.write(f"       {'':<{pad}}  {mid[c:c + width]}\n")
        out.write(f"Sbjct  {ti:<{pad}}  {ts}  {ti + tn - 1}\n\n")
        qi += qn
        ti += tn


def format_report(hits, db, params, show_alignments: int) -> str:
    """A readable report of one query: the hit list, then the alignments of the best hits."""
    out = io.StringIO()
    out.write(f"Query= {_text(hits.query_name)}\n\nLength={hits.query_length}\n\n")
    if not len(hits):
        out.write("***** No hits found *****\n\n")
    else:
        out.write(f"{'':70}{'Score':>7}  {'E':>8}\n")
        out.write(f"{'Sequences producing significant alignments:':70}{'(Bits)':>7}  {'Value':>8}\n\n")
        for r in range(len(hits)):
            label = _text(hits.target_name[r])
            desc = _text(db.description(int(hits.target_index[r])))
            line = f"{label} {desc}".strip()
            if len(line) > 67:
                line = line[:64] + "..."
            out.write(f"{line:<70}{format_bits(float(hits.bits[r])):>7}  {format_evalue(float(hits.evalue[r])):>8}\n")
        out.write("\n")
        for r in range(min(len(hits), show_alignments)):
            ti = int(hits.target_index[r])
            out.write(f"> {_text(hits.target_name[r])} {_text(db.description(ti))}".rstrip() + "\n")
            out.write(f"Length={int(db.lengths[ti])}\n\n")
            out.write(f" Score = {format_bits(float(hits.bits[r]))} bits ({int(hits.score[r])}),  "
                      f"Expect = {format_evalue(float(hits.evalue[r]))}\n")
            n = int(hits.length[r])
            ident, pos, gaps = int(hits.identities[r]), int(hits.positives[r]), int(hits.gaps[r])
            out.write(f" Identities = {ident}/{n} ({round(100 * ident / n)}%), Positives = {pos}/{n} "
                      f"({round(100 * pos / n)}%), Gaps = {gaps}/{n} ({round(100 * gaps / n)}%)\n\n")
            _pairwise(out, hits.query_codes, db.codes(ti), hits.alignments[r], params.matrix.by_code)
    out.write(f"Matrix: {params.matrix.name}  Gap costs: open {params.gap_open}, extend {params.gap_extend}  "
              f"Lambda {params.ka.lam}  K {params.ka.K}  H {params.ka.H}\n")
    out.write(f"Effective search space used: {int(hits.search_space)}\n\n")
    return out.getvalue()


def done_line(queries: int, seconds: float) -> str:
    """The report's last line: the queries searched and the seconds it took."""
    return f"[ok] {queries} quer{'y' if queries == 1 else 'ies'} in {seconds:.2f}s\n"
