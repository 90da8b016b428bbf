"""``hmmgpu.hmmsearch`` and ``hmmgpu.hmmscan`` in place of pyhmmer's: inputs, keywords, errors, results.

pyhmmer's own tests (tests/test_pyhmmer_suite.py) check results to printed precision; here
every hit is compared with ``pyhmmer.hmmsearch``'s/``pyhmmer.hmmscan``'s bit for bit
(:func:`assert_same_hits`), for each kind of input pyhmmer takes, on hmmgpu's routes without
a GPU (``auto``, which is then pyhmmer's route in hmmgpu's engine, and ``numba``, hmmgpu's CPU
filters; ``cuda`` on a GPU machine, ``pytest -m gpu``), and each error is checked to be both
pyhmmer's type and hmmgpu's.
"""
from __future__ import annotations

import threading
from importlib.resources import files

import pytest
import pyhmmer
from pyhmmer.easel import Alphabet, DigitalSequence, DigitalSequenceBlock, Randomness, SequenceFile, TextSequence
from pyhmmer.errors import AlphabetMismatch, MissingCutoffs
from pyhmmer.plan7 import HMM, Background, HMMFile, Profile

import hmmgpu
from hmmgpu.errors import HmmgpuError, InputError
from tests.helpers import AMINO, PROTEOME, SAMPLES, assert_same_pipeline, hits_table

ENGINES = ["auto", "numba", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.fixture(autouse=True)
def _gpu_present(request):
    """A test of ``engine="cuda"`` (``pytest -m gpu``) runs only where a CUDA GPU is."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and callspec.params.get("engine") == "cuda":
        from hmmgpu.gpu.runtime.context import cuda_available

        if not cuda_available():
            pytest.skip("no CUDA GPU")


def assert_same_hits(ours, ref) -> None:
    """Two ``TopHits`` hold the same hits in the same order, every score, P-value, E-value,
    flag, domain and alignment equal, and the same counters and search space."""
    assert len(ours) == len(ref)
    assert (len(ours.reported), len(ours.included)) == (len(ref.reported), len(ref.included))
    for fmt in ("targets", "domains"):
        assert hits_table(ours, fmt) == hits_table(ref, fmt)
    for a, b in zip(ours, ref):
        assert (a.name, a.accession, a.description) == (b.name, b.accession, b.description)
        assert (a.score, a.pre_score, a.sum_score, a.bias, a.pvalue, a.evalue) == \
               (b.score, b.pre_score, b.sum_score, b.bias, b.pvalue, b.evalue)
        assert (a.reported, a.included, a.dropped, a.duplicate) == (b.reported, b.included, b.dropped, b.duplicate)
        assert len(a.domains) == len(b.domains)
        for x, y in zip(a.domains, b.domains):
            assert (x.env_from, x.env_to, x.score, x.bias, x.correction, x.envelope_score, x.c_evalue,
                    x.i_evalue, x.pvalue, x.reported, x.included) == \
                   (y.env_from, y.env_to, y.score, y.bias, y.correction, y.envelope_score, y.c_evalue,
                    y.i_evalue, y.pvalue, y.reported, y.included)
            assert (x.alignment.target_sequence, x.alignment.hmm_sequence) == \
                   (y.alignment.target_sequence, y.alignment.hmm_sequence)
    assert_same_pipeline(ours, ref)


@pytest.fixture
def threads() -> set:
    """The threads alive as the test starts (tests before it may have left some)."""
    return set(threading.enumerate())


def assert_no_thread_left(before: set) -> None:
    """No thread has been started since ``before`` and is still alive (pyhmmer's tests check
    the same of the whole process)."""
    left = set(threading.enumerate()) - before
    assert not left, left


@pytest.fixture(scope="module")
def proteome():
    with SequenceFile(PROTEOME, digital=True, alphabet=AMINO) as f:
        return f.read_block()


@pytest.fixture(scope="module")
def models():
    with HMMFile(SAMPLES / "samples.hmm") as f:
        return list(f)


def _optimized(hmm):
    profile = Profile(hmm.M, hmm.alphabet)
    profile.configure(hmm, Background(hmm.alphabet), 400)
    return profile.to_optimized()


@pytest.mark.parametrize("engine", ENGINES)
def test_every_query_kind_equals_pyhmmer(engine, models, proteome, threads):
    """HMMs, a Profile, an OptimizedProfile and a model from HMM.sample (no E-value
    parameters) in one iterable: the same TopHits as pyhmmer's, in order, with the callback
    called once per query in order."""
    sampled = HMM.sample(AMINO, 120, Randomness(3))
    profile = Profile(models[1].M, AMINO)
    profile.configure(models[1], Background(AMINO), 400)
    queries = [models[0], profile, models[2], _optimized(models[3]), sampled, models[3]]
    seen = []
    ours = list(hmmgpu.hmmsearch(queries, proteome, engine=engine, cpus=2, E=1e-3,
                                 callback=lambda query, n: seen.append((query, n))))
    ref = list(pyhmmer.hmmsearch(queries, proteome, cpus=2, E=1e-3))
    assert len(ours) == len(ref) == len(queries)
    for a, b in zip(ours, ref):
        assert_same_hits(a, b)
    assert [n for _, n in seen] == list(range(1, len(queries) + 1))
    assert [q for q, _ in seen] == [hits.query for hits in ours]
    assert_no_thread_left(threads)


@pytest.mark.parametrize("engine", ENGINES)
def test_models_built_in_memory_equal_pyhmmer(engine, proteome):
    """Models made by ``pyhmmer.plan7.Builder`` (calibrated in memory: their MSV location has
    more digits than a file's ``%.4f`` keeps): the same TopHits and counters as pyhmmer's. With
    the location read back from the model's text instead, hmmgpu's filters passed 31 targets
    past the bias filter with the first (pyhmmer 32) and 149 past MSV with the second (148)."""
    background = Background(AMINO)
    hmms = [pyhmmer.plan7.Builder(AMINO).build(proteome[k], background)[0] for k in (495, 963)]
    ours = list(hmmgpu.hmmsearch(hmms, proteome, engine=engine, cpus=2))
    ref = list(pyhmmer.hmmsearch(hmms, proteome, cpus=2))
    for a, b in zip(ours, ref, strict=True):
        assert_same_hits(a, b)


@pytest.mark.parametrize("engine", ENGINES)
def test_every_target_kind_equals_pyhmmer(engine, models, proteome, threads):
    """A block, a list of sequences, a digital SequenceFile (left as it was), a path, with
    options, and cpus=1 (all in the calling thread) and 0 (all cores)."""
    options = dict(E=1e-2, domE=1e-2, Z=5000, bias_filter=False)
    with SequenceFile(PROTEOME, digital=True, alphabet=AMINO) as handle:
        targets = [proteome, list(proteome), handle, str(PROTEOME)]
        for cpus, target in zip([1, 0, 2, 1], targets):
            ours = list(hmmgpu.hmmsearch(models, target, engine=engine, cpus=cpus, **options))
            ref = list(pyhmmer.hmmsearch(models, proteome, cpus=cpus, **options))
            for a, b in zip(ours, ref, strict=True):
                assert_same_hits(a, b)
        assert handle.read() is not None   # hmmgpu read the file again, by its name
    assert_no_thread_left(threads)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_failing_callback_stops_the_search_and_its_threads(engine, models, proteome, threads):
    """pyhmmer's callback tests use models from HMM.sample, which take pyhmmer's route: here
    calibrated models on hmmgpu's engine, many in flight; the callback's error reaches the
    caller at the second query and no thread is left behind (pyhmmer's tests check that)."""
    class Stop(Exception):
        pass

    def callback(query, n):
        if n == 2:
            raise Stop(query.name)

    results = hmmgpu.hmmsearch(models * 8, proteome, engine=engine, cpus=2, callback=callback)
    assert next(results) is not None
    with pytest.raises(Stop):
        next(results)
    assert_no_thread_left(threads)


def test_hmmfile_and_cutoffs_equal_pyhmmer(proteome):
    """An open HMMFile as queries (read one model at a time) and bit_cutoffs: the results of
    the models before the first without trusted cutoffs (the third), then MissingCutoffs."""
    def until_error(search, path):
        found = []
        with HMMFile(path) as f, pytest.raises(MissingCutoffs):
            for hits in search(f, proteome, cpus=2, bit_cutoffs="trusted"):
                found.append(hits)
        return found

    ours = until_error(lambda *args, **kwargs: hmmgpu.hmmsearch(*args, engine="numba", **kwargs),
                       SAMPLES / "samples.hmm")
    ref = until_error(pyhmmer.hmmsearch, SAMPLES / "samples.hmm")
    assert len(ref) == 2
    for a, b in zip(ours, ref, strict=True):
        assert_same_hits(a, b)


def test_errors_are_pyhmmers_and_hmmgpus(models, proteome):
    """Each error is the type pyhmmer raises and, where hmmgpu raises it, an HmmgpuError."""
    dna = DigitalSequenceBlock(Alphabet.dna(), [TextSequence(name=b"d", sequence="ACGT").digitize(Alphabet.dna())])
    with pytest.raises(AlphabetMismatch) as caught:
        next(hmmgpu.hmmsearch(models[0], dna))
    assert isinstance(caught.value, HmmgpuError) and isinstance(caught.value, ValueError)
    with pytest.raises(AlphabetMismatch):   # pyhmmer's own, when the list is made a block
        hmmgpu.hmmsearch(models[0], [dna[0]])
    uncut = HMM.sample(AMINO, 50, Randomness(1))
    with pytest.raises(MissingCutoffs) as caught:
        next(hmmgpu.hmmsearch([uncut], proteome, bit_cutoffs="gathering"))
    assert isinstance(caught.value, InputError) and "gathering" in str(caught.value)
    with pytest.raises(TypeError, match="Unsupported query type for `hmmsearch`: str"):
        next(hmmgpu.hmmsearch(["PF02826"], proteome))
    with pytest.raises(TypeError, match="foo"):
        hmmgpu.hmmsearch(models, proteome, foo=1)
    with pytest.raises(ValueError, match="engine='numba'"):
        hmmgpu.hmmsearch(models, proteome, backend="numba")
    with pytest.raises(ValueError, match="digital"):
        hmmgpu.hmmsearch(models, SequenceFile(PROTEOME))
    with pytest.raises(ValueError, match="parallel"):
        hmmgpu.hmmsearch(models, proteome, parallel="sequences")
    assert next(hmmgpu.hmmsearch([], proteome), None) is None


@pytest.mark.parametrize("engine", ENGINES)
def test_hmmscan_equals_pyhmmer(engine, models, proteome, threads):
    """Sequences against HMMs (hmmgpu's filters choose the models each is scanned with, on
    ``numba``), a pressed file's optimized profiles, and a path: pyhmmer's TopHits, with
    pyhmmer's float mode (no flush to zero), and the callback once per sequence."""
    hit = {hit.name for hits in pyhmmer.hmmsearch(models, proteome, cpus=2) for hit in hits}
    queries = DigitalSequenceBlock(AMINO, [seq for k, seq in enumerate(proteome) if seq.name in hit or k < 40])
    ref = list(pyhmmer.hmmscan(queries, models, cpus=2, E=1e3, domE=1e3))
    assert sum(len(hits) for hits in ref) > 30
    seen = []
    ours = list(hmmgpu.hmmscan(queries, models, engine=engine, cpus=2, E=1e3, domE=1e3,
                               callback=lambda query, n: seen.append(n)))
    for a, b in zip(ours, ref, strict=True):
        assert a.query.name == b.query.name
        assert_same_hits(a, b)
    assert seen == list(range(1, len(queries) + 1))
    pressed = files("pyhmmer.tests").joinpath("data", "hmms", "db", "RREFam.hmm")
    with HMMFile(pressed) as f:
        rre = list(f)
    for profiles in (rre, str(pressed)):
        ours = list(hmmgpu.hmmscan(queries, profiles, engine=engine, cpus=1, E=1e3, domE=1e3))
        ref = list(pyhmmer.hmmscan(queries, rre, cpus=1, E=1e3, domE=1e3))
        for a, b in zip(ours, ref, strict=True):
            assert_same_hits(a, b)
    ref = list(pyhmmer.hmmscan(proteome, models, cpus=2))
    for sequences in (str(PROTEOME), hmmgpu.open_sequences(str(PROTEOME))):   # hmmgpu's own inputs
        for a, b in zip(hmmgpu.hmmscan(sequences, models, engine=engine, cpus=2), ref, strict=True):
            assert_same_hits(a, b)
    with HMMFile(pressed) as f:
        ours = list(hmmgpu.hmmscan(queries[0], f.optimized_profiles(), engine=engine, cpus=1, E=1e3))
    assert len(ours) == 1
    assert_same_hits(ours[0], next(pyhmmer.hmmscan(queries[0], rre, cpus=1, E=1e3)))
    assert_no_thread_left(threads)


def test_hmmscan_errors_are_pyhmmers(models, proteome):
    with pytest.raises(TypeError, match="foo"):
        hmmgpu.hmmscan(proteome[:2], models, foo=1)
    with pytest.raises(AlphabetMismatch):
        list(hmmgpu.hmmscan(proteome[:2], [HMM.sample(Alphabet.dna(), 30, Randomness(2))], cpus=1))
    with pytest.raises(TypeError, match="Unsupported query type for `hmmscan`"):
        list(hmmgpu.hmmscan(["x"], models, cpus=1))
    seq = DigitalSequence(AMINO, name=b"q", sequence=proteome[0].sequence)
    assert len(list(hmmgpu.hmmscan(seq, models, cpus=1))) == 1
