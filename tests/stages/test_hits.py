"""hmmgpu's hits (hmmgpu.stages.hits, hmmgpu.report.alidisplay) equal pyhmmer's, byte for byte.

For each target of a search, libhmmer's own domain definition (``HmmerModel.domain_definition``:
the dcl entries, n2sc and counters p7_Pipeline sees), its null and Forward scores, and the
optimal accuracy trace of every envelope (``HmmerModel.envelope``) go through hmmgpu's
scoring, alignment displays, keep rule, thresholds and serialization; the resulting
``TopHits`` state must equal pyhmmer's ``search_hmm`` state for the same search: every hit's
serialized bytes (scores, flags, domains, alignments), the ranked order, the counts and
domZ. Only the fields HMMER never sets in a protein search (a hit's window_length, seqidx,
subseq_start; a domain's iorf, jorf: whatever malloc left there) are zeroed on both sides.
"""
from __future__ import annotations

import ctypes
import dataclasses
import functools
import io
import os
import struct
from types import SimpleNamespace

import numpy as np
import pytest
from pyhmmer.easel import DigitalSequence, DigitalSequenceBlock, SequenceFile
from pyhmmer.plan7 import Pipeline, TopHits

from hmmgpu.cpu.hmmerlib import HmmerModel, libhmmer_available
from hmmgpu.report.alidisplay import encode_posterior
from hmmgpu.report.hitlist import read_hit
from hmmgpu.report.text import Query, query_report, write_alignment
from hmmgpu.stages import hits
from hmmgpu.stages.forward import ForwardTables
from tests.helpers import AMINO, MODEL_NAMES, PROTEOME, adversarial_block, hits_table, sample_hmm

pytestmark = pytest.mark.skipif(not libhmmer_available(), reason="pyhmmer's bundled libhmmer is unavailable")

F32 = np.float32
#: Pipeline settings checked on every model: defaults, E-value, bit-score and Z options,
#: the models' own cutoffs (where a model has them) and no null2.
VARIANTS = [
    {},
    dict(E=1e-3, domE=1e-2, incE=1e-6, incdomE=1e-4),
    dict(T=20.0, domT=15.0, incT=60.0, incdomT=30.0),
    dict(Z=1e6, domZ=123.0, incE=1.0),
    dict(bit_cutoffs="trusted"),
    dict(null2=False, incE=10.0, incdomE=10.0),
]


#: The pipeline settings of a search state (the rest are counters, and pyhmmer's own fields).
THRESHOLD_KEYS = ("by_E", "E", "T", "dom_by_E", "domE", "domT", "use_bit_cutoffs", "inc_by_E", "incE", "incT",
                  "incdom_by_E", "incdomE", "incdomT", "Z_setby", "domZ_setby", "do_null2")


def kahan_sum(values) -> np.float32:
    """Easel's ``esl_vec_FSum``: a compensated float sum, in order."""
    s = c = F32(0.0)
    for v in np.asarray(values, np.float32).tolist():
        y = F32(F32(v) - c)
        t = F32(s + y)
        c = F32(F32(t - s) - y)
        s = t
    return s


def normalized(blob) -> bytes:
    """A serialized hit with the fields p7_Pipeline never sets zeroed (see the module header)."""
    b = bytearray(bytes(blob))
    size, ndom = struct.unpack_from(">I", b, 0)[0], struct.unpack_from(">i", b, 72)[0]
    b[4:8] = bytes(4)        # window_length
    b[92:108] = bytes(16)    # seqidx, subseq_start
    pos = size
    for _ in range(ndom):
        b[pos + 36:pos + 52] = bytes(16)  # iorf, jorf
        pos += struct.unpack_from(">I", b, pos)[0]
        pos += struct.unpack_from(">I", b, pos)[0]  # its alignment display
    assert pos == len(b)
    return bytes(b)


def text(value) -> bytes:
    return (value or "").encode()


def libhmmer_definition(model, codes) -> dict:
    """libhmmer's domain definition of a target (a namespace: the counters, ``n2sc_sum`` and
    the domains with their OA ``trace``), its null and Forward parser scores."""
    found = model.domain_definition(codes)
    domains = [SimpleNamespace(**d, trace=model.envelope(codes, d["ienv"], d["jenv"])["trace"])
               for d in found["domains"]]
    definition = SimpleNamespace(**found | dict(domains=domains), n2sc_sum=kahan_sum(found["n2sc"]))
    return dict(definition=definition, nullsc=model.null_score(codes), fwdsc=model.forward_parser(codes)[1])


class Search:
    """A model and a database, with libhmmer's post-filter results of every F3 passer that has
    a domain (the targets p7_Pipeline may add to its hit list), computed once."""

    def __init__(self, hmm, seqs):
        self.hmm, self.seqs = hmm, seqs
        every = Pipeline(AMINO, E=1e300, domE=1e300).search_hmm(hmm, seqs)  # keeps every such target
        passers = {hit.name for hit in every}
        self.targets = []
        with HmmerModel(hmm) as model:
            self.model = hits.HitModel.from_hmm(hmm, ForwardTables.from_hmmer(model).rfv)
            assert (self.model.tau, self.model.lam) == model.evalue_parameters()[4:6]
            for pos, seq in enumerate(seqs):
                if seq.name in passers:
                    codes = np.asarray(seq.sequence, np.uint8)
                    self.targets.append(SimpleNamespace(pos=pos, seq=seq, codes=codes, **self.define(model, codes)))

    def define(self, model, codes) -> dict:
        """A target's domain definition, null and Forward scores (:func:`libhmmer_definition`)."""
        return libhmmer_definition(model, codes)

    def reference(self, **kw):
        return Pipeline(AMINO, **kw).search_hmm(self.hmm, self.seqs).__getstate__()

    def ours(self, pipeline: dict) -> dict:
        """hmmgpu's state of the search with the ``pipeline`` settings (a state's dictionary)."""
        return hits.tophits_state(self.kept(pipeline), pipeline)

    def kept(self, pipeline: dict) -> list:
        """The hits p7_Pipeline adds to its list, in search order."""
        kept = []
        for t in self.targets:
            Z = pipeline["Z"] if pipeline["Z_setby"] else t.pos + 1  # the running count while searching
            hit = hits.pipeline_hit(t.definition, t.codes, t.seq.name.encode(), text(t.seq.accession),
                                    text(t.seq.description), t.nullsc, t.fwdsc, self.model, pipeline, Z)
            if hit is not None:
                kept.append(hit)
        return kept


def assert_same_state(ours: dict, ref: dict) -> int:
    """The two states are equal (hits compared after :func:`normalized`); returns the domains."""
    assert len(ours["unsrt"]) == len(ref["unsrt"])
    for mine, theirs in zip(ours["unsrt"], ref["unsrt"]):
        if normalized(mine) != normalized(theirs):  # a readable message first, then the bytes
            a, b = read_hit(normalized(mine)), read_hit(normalized(theirs))
            assert a == b
            assert normalized(mine) == normalized(theirs)
    for key in ("hit", "N", "Nalloc", "nreported", "nincluded", "is_sorted_by_sortkey", "is_sorted_by_seqidx",
                "_empty"):
        assert ours[key] == ref[key], key
    assert ours["pipeline"]["domZ"] == ref["pipeline"]["domZ"]
    return sum(len(read_hit(blob).domains) for blob in ref["unsrt"])


def database(hmm) -> DigitalSequenceBlock:
    """The sample proteome, then the model's adversarial targets (its consensus repeated, in
    noise...: multidomain and clustered regions)."""
    with SequenceFile(PROTEOME, digital=True, alphabet=AMINO) as f:
        block = f.read_block()
    block.extend(adversarial_block(hmm))
    return block


@functools.lru_cache(maxsize=None)
def searched(name: str) -> Search:
    hmm = sample_hmm(name)
    return Search(hmm, database(hmm))


@pytest.fixture(params=MODEL_NAMES)
def search(request):
    return searched(request.param)


def test_states_equal_pyhmmers(search):
    """Every pipeline variant: hmmgpu's state of the search is pyhmmer's."""
    checked = 0
    for kw in VARIANTS:
        if "bit_cutoffs" in kw and search.hmm.cutoffs.trusted is None:
            continue
        ref = search.reference(**kw)
        pipeline = hits.pipeline_settings(search.hmm, **kw)
        for key in THRESHOLD_KEYS:
            assert pipeline[key] == ref["pipeline"][key], key
        if not pipeline["Z_setby"]:  # the search's Z: its number of targets
            pipeline["Z"] = float(len(search.seqs))
        checked += assert_same_state(search.ours(pipeline), ref)
    assert checked > 0


def test_outputs_equal_pyhmmers():
    """The report, the three tables and the -A alignment written from hmmgpu's state (loaded
    into a TopHits, as the merge loads task states) are pyhmmer's."""
    found = searched("PF02826")
    ref = found.reference()
    ours = found.ours(dict(ref["pipeline"], domZ=0.0))
    outputs = []
    for state in (ours, ref):
        tophits = TopHits(found.hmm)
        tophits.__setstate__(state)
        stream = io.BytesIO()
        nseq = write_alignment(stream, tophits, found.hmm)
        outputs.append([query_report(Query.from_hmm(found.hmm), tophits), stream.getvalue(), nseq]
                       + [hits_table(tophits, fmt) for fmt in ("targets", "domains", "pfam")])
    assert outputs[0] == outputs[1] and outputs[0][2] > 0


ALIGNMENT_FIELDS = ("hmm_from", "hmm_to", "hmm_length", "hmm_name", "hmm_accession", "hmm_sequence", "target_from",
                    "target_to", "target_length", "target_name", "target_sequence", "identity_sequence",
                    "posterior_probabilities")


DOMAIN_FIELDS = ("env_from", "env_to", "score", "bias", "correction", "envelope_score", "c_evalue", "i_evalue",
                 "pvalue", "reported", "included")


def test_alignments_read_through_pyhmmer():
    """Every domain's alignment, read through pyhmmer's own ``Domain.alignment`` properties
    from hmmgpu's state, is the one pyhmmer made."""
    found = searched("KR")
    ref = found.reference(domE=1e300)
    tophits = [TopHits(found.hmm) for _ in range(2)]
    tophits[0].__setstate__(found.ours(dict(ref["pipeline"], domZ=0.0)))
    tophits[1].__setstate__(ref)
    domains = [[dom for hit in th for dom in hit.domains] for th in tophits]
    assert len(domains[0]) == len(domains[1]) > 0
    for ours, theirs in zip(*domains):
        for name in ALIGNMENT_FIELDS:
            assert getattr(ours.alignment, name) == getattr(theirs.alignment, name), name
        for name in DOMAIN_FIELDS:
            assert getattr(ours, name) == getattr(theirs, name), name


def test_posterior_letters_equal_libhmmers():
    """p7_alidisplay_EncodePostProb (through ctypes) on the probabilities around every step."""
    lib = _libhmmer()
    lib.p7_alidisplay_EncodePostProb.restype = ctypes.c_char
    lib.p7_alidisplay_EncodePostProb.argtypes = [ctypes.c_float]
    steps = np.arange(0.05, 1.0, 0.1, dtype=np.float32)
    pp = np.concatenate([steps, np.nextafter(steps, F32(0)), np.nextafter(steps, F32(1)),
                         np.linspace(0, 1, 1001, dtype=np.float32), [0.0, 1.0, 0.95, 1.5, -0.01]]).astype(np.float32)
    want = bytes(lib.p7_alidisplay_EncodePostProb(float(p))[0] for p in pp)
    assert encode_posterior(pp).tobytes() == want


def test_parts_merge_into_the_serial_state():
    """The search cut in three parts, each part's state made by hmmgpu (hits kept at their
    global position's running Z, each part's Z its own count of targets), merged by pyhmmer's
    ``TopHits.merge`` (as hmmgpu's merge does): pyhmmer's serial state."""
    found = searched("PF02826")
    ref = found.reference()
    n = len(found.seqs)
    cuts = [0, 900, 1500, n]
    parts = []
    for first, end in zip(cuts, cuts[1:]):
        pipeline = dict(hits.pipeline_settings(found.hmm), Z=float(end - first), nseqs=end - first)
        kept = [hit for hit in found.kept(pipeline) if first <= positions(found)[hit.name] < end]
        part = TopHits(found.hmm)
        part.__setstate__(hits.tophits_state(kept, pipeline))
        parts.append(part)
    assert all(len(part) for part in parts)
    merged = parts[0].merge(*parts[1:]).__getstate__()
    assert [normalized(b) for b in merged["unsrt"]] == [normalized(b) for b in ref["unsrt"]]
    for key in ("hit", "nreported", "nincluded"):
        assert merged[key] == ref[key], key
    for key in ("Z", "domZ", "nseqs"):
        assert merged["pipeline"][key] == ref["pipeline"][key], key


def positions(found: Search) -> dict:
    """Each target's position in the search, by name (the names here are unique)."""
    return {t.seq.name.encode(): t.pos for t in found.targets}


def test_annotated_model():
    """A model with reference, structure and mask lines: the displays carry RF and CS (never
    MM, as HMMER 3.4 makes them), and the names (an accession and description) of both sides."""
    hmm = sample_hmm("PF02826").copy()
    M = hmm.M
    hmm.reference = ("x" * 7 + ".")[:M] * (M // 8) + "x" * (M % 8)
    hmm.consensus_structure = ("HHHEE-<>" * (M // 8 + 1))[:M]
    hmm.model_mask = ("m" * 5 + "." * 3) * (M // 8) + "m" * (M % 8)
    hmm.accession, hmm.description = "PF02826.TEST", "a model with every annotation line"
    with SequenceFile(PROTEOME, digital=True, alphabet=AMINO) as f:
        block = f.read_block()
    found = Search(hmm, block)
    ref = found.reference()
    pipeline = dict(ref["pipeline"], domZ=0.0)
    assert assert_same_state(found.ours(pipeline), ref) > 0
    display = read_hit(ref["unsrt"][0]).domains[0].alignment
    assert display.rf and display.cs and display.mm is None and display.hmm_acc == b"PF02826.TEST"


def test_scan_states_equal_pyhmmers():
    """hmmscan: a chimera of the four sample models' consensus sequences, in noise, scanned
    against them (hits named after the models, Z the running count of models); default
    thresholds and the models' gathering cutoffs (set per model as the hit is made)."""
    import pyhmmer

    from hmmgpu.formats.hmmfile import hmm_strings
    from tests.helpers import consensus_codes

    models = [sample_hmm(name) for name in MODEL_NAMES]
    rng = np.random.default_rng(11)
    codes = np.concatenate([part for hmm in models for part in (rng.integers(0, 20, 60), consensus_codes(hmm))]
                           ).astype(np.uint8)
    query = DigitalSequence(AMINO, name=b"chimera", description=b"four consensus sequences", sequence=codes)
    for kw in ({}, dict(bit_cutoffs="gathering")):
        scanned = [hmm for hmm in models if not kw or hmm.cutoffs.gathering_available()]
        ref = next(iter(pyhmmer.hmmscan([query], scanned, cpus=1, **kw))).__getstate__()
        pipeline = dict(ref["pipeline"], domZ=0.0)
        kept = []
        for n, hmm in enumerate(scanned):
            settings = hits.pipeline_settings(hmm, **kw)
            with HmmerModel(hmm) as model:
                found = libhmmer_definition(model, codes)
                hit = hits.pipeline_hit(found["definition"], codes, b"chimera", b"", b"four consensus sequences",
                                        found["nullsc"], found["fwdsc"],
                                        hits.HitModel.from_hmm(hmm, ForwardTables.from_hmmer(model).rfv),
                                        dict(pipeline, **{k: settings[k] for k in ("T", "domT", "incT", "incdomT")}),
                                        Z=n + 1, hit_names=hmm_strings(hmm))
            if hit is not None:
                kept.append(hit)
        assert len(kept) >= 2
        assert_same_state(hits.tophits_state(kept, pipeline), ref)


def libhmmer_thresholded(hmm, state: dict) -> dict:
    """libhmmer's p7_tophits_Threshold of a state's hits (pyhmmer's merge of one TopHits resets
    the flags, then thresholds), sorted by p7_tophits_SortBySortkey."""
    tophits = TopHits(hmm)
    tophits.__setstate__(dict(state, is_sorted_by_sortkey=False, hit=list(range(state["N"]))))
    tophits.sort(by="key")
    return tophits.merge().__getstate__()


def test_duplicate_alignments_and_ties():
    """HMMER's #h74 workaround (two domains with one alignment: only the better is reported,
    the second on a tie) and the sort's tie-breaks (sortkey, then name, then the first
    domain's start), against libhmmer's own threshold and sort on the same hits."""
    found = searched("PF02826")
    pipeline = dict(found.reference()["pipeline"], domZ=0.0)
    kept = found.kept(pipeline)
    overlapping = [h for h in kept if h.noverlaps and len(h.domains) >= 2]
    assert overlapping
    for hit in overlapping:  # the second domain now has the first's alignment, once better, once equal
        first, second = hit.domains[0], hit.domains[1]
        score = first.bitscore if hit is overlapping[0] else F32(first.bitscore + 1)
        hit.domains[1] = dataclasses.replace(second, iali=first.iali, jali=first.jali, bitscore=score)
    twins = kept[:4]
    for hit in twins:  # equal sortkeys; two of them also share a name
        hit.sortkey = twins[0].sortkey
    twins[2].name = twins[3].name
    ours = hits.tophits_state(kept, pipeline)
    ref = libhmmer_thresholded(found.hmm, ours)
    assert [normalized(b) for b in ours["unsrt"]] == [normalized(b) for b in ref["unsrt"]]
    assert (ours["hit"], ours["nreported"], ours["nincluded"]) == (ref["hit"], ref["nreported"], ref["nincluded"])
    tie, better = overlapping[0].domains, overlapping[-1].domains  # every domain here was reported before
    assert tie[0].is_reported and not tie[1].is_reported and not better[0].is_reported and better[1].is_reported


def _libhmmer():
    """pyhmmer's libhmmer, for functions hmmerlib does not bind (pyhmmer's import has run
    p7_FLogsumInit in it)."""
    import pyhmmer.plan7  # noqa: F401

    return ctypes.CDLL(os.path.join(os.path.dirname(pyhmmer.__file__), os.pardir, "pyhmmer.libs",
                                    "liblibhmmer.so"))


def test_flogsum_equals_libhmmers():
    """p7_FLogsum (called through ctypes) on pairs over the table's whole range and its edges."""
    lib = _libhmmer()
    lib.p7_FLogsum.restype, lib.p7_FLogsum.argtypes = ctypes.c_float, [ctypes.c_float, ctypes.c_float]
    rng = np.random.default_rng(3)
    b = np.concatenate([rng.uniform(-20.0, 1.0, 4000), -rng.uniform(15.6, 15.8, 200), [-15.7, -np.inf, 0.0, 1e-9]])
    for a, x in zip(np.where(np.arange(b.size) % 2, 0.0, rng.uniform(-5, 5, b.size)).astype(np.float32),
                    b.astype(np.float32)):
        want = F32(lib.p7_FLogsum(float(a), float(x)))
        assert hits.flogsum(a, x).view(np.uint32) == want.view(np.uint32), (a, x)
        assert hits.flogsum(x, a).view(np.uint32) == want.view(np.uint32), (x, a)


def test_no_domain_no_hit():
    """A target whose domain definition found nothing is dropped (p7_Pipeline adds no hit)."""
    assert hits.score_target([], F32(0.0), 100, F32(-10.0), F32(5.0), -4.0, 0.7) is None


def test_display_of_a_trace_without_a_domain_is_refused():
    """``p7_alidisplay_Create`` needs a B, then an M, then an E: a trace that lacks one (or shows
    a state other than M, D, I between its first and last M) has no display."""
    from hmmgpu.cpu.optacc import Trace
    from hmmgpu.report.alidisplay import ModelLines, alidisplay_create
    from hmmgpu.stages.profiles import configured_profile

    hmm = sample_hmm("KR")
    lines = ModelLines.from_hmm(hmm, ForwardTables.from_optimized(configured_profile(hmm).to_optimized()).rfv)
    codes = np.zeros(10, np.uint8)

    def trace(states):
        n = len(states)
        emits = [s in (1, 3) for s in states]
        return Trace(st=np.array(states, np.uint8), k=np.array([1 if s in (1, 2, 3) else 0 for s in states], np.int32),
                     i=np.cumsum(emits).astype(np.int32) * emits, pp=np.full(n, 0.5, np.float32))

    ok = alidisplay_create(trace([4, 5, 6, 1, 2, 3, 1, 7, 8, 9]), lines, codes, b"t")
    assert (ok.model[1:2], ok.aseq[1:3], ok.pp) == (lines.consensus[1:2].tobytes(), b"-a", b"5.55")
    for states, why in (([4, 5, 8, 9], "no B"), ([4, 5, 6, 2, 7, 8, 9], "no M"), ([4, 5, 6, 1, 1, 8, 9], "no E"),
                        ([4, 5, 6, 1, 5, 1, 7, 8, 9], "not M, D or I")):
        with pytest.raises(ValueError, match=why):
            alidisplay_create(trace(states), lines, codes, b"t")


def test_display_warm_up_loads_the_searchs_compiled_pass():
    """The alignment display's warm-up (started by the own post-filter as a search begins)
    loads the very compiled version of the display's pass that a real domain's display then
    uses: in a fresh process, the real display adds no version after it."""
    import subprocess
    import sys

    script = """
import numpy as np
from hmmgpu.cpu.optacc import Trace
from hmmgpu.report import alidisplay
from hmmgpu.stages.forward import ForwardTables
from hmmgpu.stages.profiles import configured_profile
from tests.helpers import sample_hmm
hmm = sample_hmm("KR")
lines = alidisplay.ModelLines.from_hmm(hmm, ForwardTables.from_optimized(configured_profile(hmm).to_optimized()).rfv)
codes = np.asarray(np.arange(40) % 20, np.uint8)
alidisplay.warm_display(codes)
warmed = list(alidisplay._display_lines.signatures)
trace = Trace(st=np.array([4, 5, 5, 6, 1, 1, 3, 1, 7, 8, 9], np.uint8),   # S N N B M M I M E C T
              k=np.array([0, 0, 0, 0, 1, 2, 2, 3, 0, 0, 0], np.int32),
              i=np.array([0, 0, 1, 0, 2, 3, 4, 5, 0, 0, 0], np.int32), pp=np.full(11, 0.5, np.float32))
shown = alidisplay.alidisplay_create(trace, lines, codes, b"target")
assert (shown.hmm_from, shown.hmm_to, shown.seq_from, shown.seq_to) == (1, 3, 2, 5), shown
print(len(warmed), len(alidisplay._display_lines.signatures))
"""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=root,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1", "1"]
