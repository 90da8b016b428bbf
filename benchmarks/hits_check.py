"""hmmgpu's hit lists on real data: ``TopHits`` states made by ``hmmgpu.stages.hits`` (scores,
keep rule, thresholds, serialization) and ``hmmgpu.report.alidisplay`` against pyhmmer's.

For every model named (default: eight Pfam models of the shared data, M = 23..602), the
targets are the 77,801 real proteins (or the first ``--max-seqs``). pyhmmer's ``search_hmm``
of the model is the reference, under three pipeline settings: the defaults, the model's
gathering cutoffs, and strict E-values (``E = domE = 1e-3``, ``incE = 1e-10``, ``incdomE =
1e-6``). hmmgpu's state of the same search is built from each F3 passer's domain definition,
taken from ``--definitions``:

* ``libhmmer``: libhmmer's own (``HmmerModel.domain_definition``, the OA trace of each
  envelope from ``HmmerModel.envelope``, ``p7_bg_NullOne``, ``p7_ForwardParser``): checks
  the hits stage alone;
* ``hmmgpu``: hmmgpu's CPU references end to end (the Forward and Backward parsers of
  ``hmmgpu.cpu.fwdback``, ``define_domains`` with ``hmmgpu.cpu.domaindef.CpuDomainStages``,
  the null score table): the whole post-filter without libhmmer.

A state equals pyhmmer's when every hit's serialized bytes do (the fields HMMER leaves
uninitialised zeroed on both sides, see ``tests/stages/test_hits.py``), and the ranked
order, counts and domZ. The script prints one line a model (targets, domains, targets with
clustered regions and with overlapping envelopes, and per setting: hits, reported,
included, domains compared) and stops at the first difference with pyhmmer's message.

::

    PYTHONPATH=. python3 benchmarks/hits_check.py --data DIR [--max-seqs N] [--definitions hmmgpu] [MODEL ...]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from types import SimpleNamespace

MODELS = ["PF00096", "PF00400", "PF00023", "PF00041", "PF00072", "PF00005", "PF07690", "PF00133"]
SETTINGS = [{}, dict(bit_cutoffs="gathering"), dict(E=1e-3, domE=1e-3, incE=1e-10, incdomE=1e-6)]


def hmmgpu_definition(tables, codes) -> dict:
    """hmmgpu's CPU references: a target's domain definition, null and Forward scores."""
    from hmmgpu.cpu.domaindef import CpuDomainStages
    from hmmgpu.cpu.fwdback import backward, parse
    from hmmgpu.stages.domaindef import define_domains
    from hmmgpu.stages.profiles import null_table

    forward = parse(tables, codes)
    bck = backward(tables, codes, forward)
    definition = define_domains(CpuDomainStages(tables), codes, forward.xmx, bck.xmx, bck.has_own_scales)
    return dict(definition=definition, nullsc=null_table(codes.size)[codes.size], fwdsc=forward.score)


def check_model(path: Path, seqs, source: str) -> str:
    from pyhmmer.plan7 import HMMFile

    from hmmgpu.stages import hits
    from hmmgpu.stages.forward import ForwardTables
    from tests.stages.test_hits import Search, assert_same_state

    with HMMFile(path) as f:
        hmm = f.read()

    class Checked(Search):
        def define(self, model, codes):
            if source == "libhmmer":
                return super().define(model, codes)
            return hmmgpu_definition(ForwardTables.from_hmmer(model), codes)

    start = time.time()
    search = Checked(hmm, seqs)
    definitions = [t.definition for t in search.targets]
    counts = SimpleNamespace(targets=len(definitions), domains=sum(len(d.domains) for d in definitions),
                             clustered=sum(d.nclustered > 0 for d in definitions),
                             overlaps=sum(d.noverlaps > 0 for d in definitions))
    compared = []
    for kw in SETTINGS:
        if "bit_cutoffs" in kw and not hmm.cutoffs.gathering_available():
            continue
        ref = search.reference(**kw)
        pipeline = hits.pipeline_settings(hmm, **kw)
        if not pipeline["Z_setby"]:
            pipeline["Z"] = float(len(seqs))
        ndom = assert_same_state(search.ours(pipeline), ref)
        compared.append(f"{kw or 'defaults'}: {len(ref['unsrt'])} hits, {ref['nreported']} reported, "
                        f"{ref['nincluded']} included, {ndom} domains")
    return (f"{hmm.name} M={hmm.M}: {counts.targets} targets with domains ({counts.domains} domains, "
            f"{counts.clustered} with clustered regions, {counts.overlaps} with overlaps); states equal: "
            f"{'; '.join(compared)} ({time.time() - start:.0f} s)")


def main() -> None:
    from pyhmmer.easel import SequenceFile

    from tests.helpers import AMINO

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    parser.add_argument("--max-seqs", type=int, default=None)
    parser.add_argument("--definitions", choices=("libhmmer", "hmmgpu"), default="libhmmer")
    parser.add_argument("models", nargs="*", default=MODELS)
    args = parser.parse_args()
    with SequenceFile(args.data / "seqs" / "public_proteins.fa.gz", digital=True, alphabet=AMINO) as f:
        seqs = f.read_block(sequences=args.max_seqs)
    for name in args.models:
        print(check_model(args.data / "pfam" / f"{name}.hmm.gz", seqs, args.definitions), flush=True)


if __name__ == "__main__":
    main()
