"""Writers: hmmsearch's tabular files (via HMMER's own formatter) and a readable report."""
from __future__ import annotations

import io

from .cascade import StageCounts
from .options import SearchOptions

TABLE_FORMATS = {"tblout": "targets", "domtblout": "domains", "pfamtblout": "pfam"}


def write_table(stream, hits, kind: str, first: bool) -> None:
    """Append one query's ``--tblout``/``--domtblout``/``--pfamtblout`` rows, header with the first."""
    buf = io.BytesIO()
    hits.write(buf, format=TABLE_FORMATS[kind], header=first)
    stream.write(buf.getvalue())


def _text(v) -> str:
    if v is None:
        return ""
    return v.decode(errors="replace") if isinstance(v, (bytes, bytearray)) else str(v)


def format_report(hmm, hits, counts: StageCounts, opts: SearchOptions) -> str:
    """hmmsearch-style per-query report: hit table, then the pipeline statistics."""
    lines = [
        f"Query:       {_text(hmm.name)}  [M={hmm.M}]",
    ]
    if hmm.accession:
        lines.append(f"Accession:   {_text(hmm.accession)}")
    if hmm.description:
        lines.append(f"Description: {_text(hmm.description)}")
    lines += [
        "Scores for complete sequences (score includes all domains):",
        "   --- full sequence ---   --- best 1 domain ---   -#dom-",
        "    E-value  score  bias    E-value  score  bias      N  Sequence                 Description",
        "    ------- ------ -----    ------- ------ -----   ----  --------                 -----------",
    ]
    shown_threshold = False
    reported = [h for h in hits if h.reported]
    for h in reported:
        if not h.included and not shown_threshold:
            lines.append("  ------ inclusion threshold ------")
            shown_threshold = True
        d = h.best_domain
        mark = " " if h.included else "?"
        lines.append(
            f"{mark} {h.evalue:9.2g} {h.score:6.1f} {h.bias:5.1f}  {d.i_evalue:9.2g} {d.score:6.1f} {d.bias:5.1f}"
            f"   {len(h.domains):4d}  {_text(h.name):<24} {_text(h.description)}"
        )
    if not reported:
        lines.append("\n   [No hits detected that satisfy reporting thresholds]")
    lines += ["", *pipeline_statistics(counts, opts, hits), "//"]
    return "\n".join(lines) + "\n"


def pipeline_statistics(counts: StageCounts, opts: SearchOptions, hits) -> list:
    """hmmsearch's 'Internal pipeline statistics summary' lines for one query."""
    n = max(counts.nseqs, 1)

    def row(label, value, F):
        return f"{label:<31}{value:>10}  ({value / n:.4g}); expected {counts.nseqs * F:.1f} ({F:g})"

    F1 = opts.F1
    F2 = opts.F2
    total = counts.seconds.get("total", 0.0)
    mcs = counts.M * counts.nres / total / 1e6 if total > 0 else float("inf")
    z_note = "[as set by --Z on cmdline]" if opts.Z is not None else "[actual number of targets]"
    domz_note = "[as set by --domZ on cmdline]" if opts.domZ is not None else "[number of targets reported over threshold]"
    stages = ", ".join(f"{k} {v:.3f}s" for k, v in counts.seconds.items() if k != "total")
    return [
        "Internal pipeline statistics summary:",
        "-------------------------------------",
        f"{'Query model(s):':<31}{1:>10}  ({counts.M} nodes)",
        f"{'Target sequences:':<31}{counts.nseqs:>10}  ({counts.nres} residues searched)",
        row("Passed MSV filter:", counts.n_past_msv, F1),
        row("Passed bias filter:", counts.n_past_bias, F1 if opts.bias_filter else 1.0),
        row("Passed Vit filter:", counts.n_past_vit, F2),
        row("Passed Fwd filter:", counts.n_past_fwd, opts.F3),
        f"{'Initial search space (Z):':<31}{hits.Z:>10.0f}  {z_note}",
        f"{'Domain search space  (domZ):':<31}{hits.domZ:>10.0f}  {domz_note}",
        f"# wall time: {total:.2f}s" + (f"  ({stages})" if stages else ""),
        f"# Mc/sec: {mcs:.2f}",
    ]
