"""Plot and tabulate many-model benchmark results (``bench_engine.py``'s JSON files).

    python3 benchmarks/plot_engine.py RESULT.json [RESULT.json ...] --png OUT.png

Later files add to earlier ones, workload by workload; the (b) workload may come in slices of
its models (``--b-models START:STOP``), whose hmmsearch wall times are added up (every tool
searches each query on its own, so the slices' times sum to one whole run's, less one
start-up). Prints a Markdown table: wall time of each tool, end to end, and hmmgpu's speed-up.
"""
from __future__ import annotations

import argparse
import json

WORKLOADS = [("a", "(a) 600 models x 29 M residues"), ("b", "(b) 600 models x 116 M residues"),
             ("d", "(d) 600 models x 2,100 proteins"),
             ("f", "(f) 19,800 models (the 600 x33) x 2,100 proteins"),
             ("readme", "README command (4 models x 2,100 proteins)")]


def merge(paths) -> dict:
    """Workload name -> tool -> wall seconds (hmmsearch's slices of (b) added up)."""
    out: dict = {}
    for path in paths:
        with open(path) as fh:
            result = json.load(fh)
        sliced = result.get("b_models", "0:600") != "0:600"
        workloads = dict(result["workloads"])
        for model, entry in workloads.pop("c", {}).items():  # (c): one entry per model
            workloads[f"c.{model}"] = entry
        for name, entry in workloads.items():
            tools = out.setdefault(name, {})
            for tool, run in entry.items():
                if not (isinstance(run, dict) and "seconds" in run):
                    continue
                if name == "b" and sliced:
                    if tool == "hmmsearch":
                        tools["hmmsearch"] = tools.get("hmmsearch", 0.0) + run["seconds"]
                        tools["hmmsearch_slices"] = tools.get("hmmsearch_slices", 0) + 1
                    continue
                tools[tool] = run["seconds"]
    return out


def ours(tools: dict):
    """hmmgpu's time on a workload: the default backend (``auto``) where it ran, else
    ``--backend cuda``, on the same input as the baselines (the FASTA file, not a made database)."""
    return tools.get("hmmgpu_auto", tools.get("hmmgpu_cuda", tools.get("hmmgpu")))


def table(data: dict) -> str:
    lines = ["| workload | hmmgpu | pyhmmer.hmmsearch, 16 threads | hmmsearch --cpu 16 | vs pyhmmer | vs hmmsearch |",
             "|---|---|---|---|---|---|"]
    for key, label in WORKLOADS:
        tools = data.get(key, {})
        t = ours(tools)
        if t is None:
            continue
        py, hs = tools.get("pyhmmer"), tools.get("hmmsearch")
        cells = [f"{t:.2f} s", f"{py:.2f} s" if py else "-", f"{hs:.2f} s" if hs else "-",
                 f"{py / t:.2f}x" if py else "-", f"{hs / t:.2f}x" if hs else "-"]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    models = sorted(k[2:] for k in data if k.startswith("c."))
    for acc in models:
        tools = data[f"c.{acc}"]
        t, py, hs = ours(tools), tools["pyhmmer"], tools["hmmsearch"]
        lines.append(f"| (c) {acc} x 116 M residues | {t:.2f} s | {py:.2f} s | {hs:.2f} s | {py / t:.2f}x | {hs / t:.2f}x |")
    return "\n".join(lines)


def plot(data: dict, png: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(key, label, data[key]) for key, label in WORKLOADS if key in data]
    rows += [("c", f"(c) {k[2:]}", v) for k, v in sorted(data.items()) if k.startswith("c.")]
    fig, ax = plt.subplots(figsize=(11, 5))
    width = 0.27
    for j, (tool, colour) in enumerate((("hmmgpu", "tab:green"), ("pyhmmer", "tab:blue"), ("hmmsearch", "tab:grey"))):
        ys = []
        for key, _, tools in rows:
            ys.append(ours(tools) if tool == "hmmgpu" else tools.get(tool, float("nan")))
        ax.bar([i + (j - 1) * width for i in range(len(rows))], ys, width, label=tool, color=colour)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([label.split(" (")[0] if label.startswith("README") else label.replace(" residues", "")
                        for _, label, _ in rows], rotation=25, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("wall time, end to end (s, log scale)")
    ax.set_title("hmmgpu against pyhmmer (16 threads) and hmmsearch --cpu 16, H200 machine")
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+")
    ap.add_argument("--png")
    args = ap.parse_args()
    data = merge(args.results)
    print(table(data))
    if args.png:
        plot(data, args.png)


if __name__ == "__main__":
    main()
