"""The domain definitions the GPU process sends with a model's cascade result
(hmmgpu.stages.defined): found by database index, each target's counters, domains and traces
its own, bit for bit, one pickled message of about their bytes. (That a sent definition gives
the stage the hit its own definition gives: tests/search/test_own_postfilter_decoded.py; that
the GPU process's definitions equal the CPU stages': tests/gpu/test_own_postfilter_gpu.py.)"""
import pickle

import numpy as np

from hmmgpu.cpu.optacc import Trace
from hmmgpu.stages.defined import DefinedTargets
from hmmgpu.stages.domaindef import DefinedBatch, Domain, DomainDefinition

F32 = np.float32


def _definition(rng, ndom: int, L: int) -> DomainDefinition:
    domains = []
    for d in range(ndom):
        n = int(rng.integers(3, 9))
        trace = Trace(st=rng.integers(0, 12, n).astype(np.uint8), k=rng.integers(0, 50, n).astype(np.int32),
                      i=rng.integers(0, L, n).astype(np.int32), pp=rng.random(n).astype(F32))
        domains.append(Domain(ienv=d + 1, jenv=d + 5, iali=d + 2, jali=d + 4, envsc=F32(rng.normal()),
                              domcorrection=F32(rng.random()), oasc=F32(rng.random() * 9), trace=trace))
    return DomainDefinition(status=0, domains=domains, nregions=ndom + 1, nclustered=ndom // 2, noverlaps=ndom % 2,
                            nenvelopes=ndom + 2, nexpected=F32(rng.random() * 3),
                            n2sc=rng.random(L + 1).astype(F32))


def _batch(definitions: list) -> DefinedBatch:
    """The driver's answer (arrays) holding ``definitions``, in order."""
    domains = [d for x in definitions for d in x.domains]

    def offsets(sizes):
        return np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64)

    def flat(name, dtype):
        return np.concatenate([getattr(d.trace, name) for d in domains] + [np.zeros(0, dtype)]).astype(dtype)

    return DefinedBatch(
        status=np.array([x.status for x in definitions], np.int32), flags=np.array([x.flags for x in definitions]),
        counters=np.array([[x.nregions, x.nclustered, x.noverlaps, x.nenvelopes] for x in definitions],
                          np.int32).reshape(-1, 4),
        nexpected=np.array([x.nexpected for x in definitions], F32),
        n2sc_offsets=offsets([x.n2sc.size for x in definitions]),
        n2sc=np.concatenate([x.n2sc for x in definitions] + [np.zeros(0, F32)]).astype(F32),
        domain_offsets=offsets([len(x.domains) for x in definitions]),
        bounds=np.array([[d.ienv, d.jenv, d.iali, d.jali] for d in domains], np.int64).reshape(-1, 4),
        domain_scores=np.array([[d.envsc, d.domcorrection, d.oasc] for d in domains], F32).reshape(-1, 3),
        trace_offsets=offsets([d.trace.st.size for d in domains]), st=flat("st", np.uint8), k=flat("k", np.int32),
        i=flat("i", np.int32), pp=flat("pp", F32))


def _bits(value) -> np.ndarray:
    return np.asarray(value, F32).view(np.uint32)


def test_definitions_are_found_by_index_with_their_own_domains():
    rng = np.random.default_rng(5)
    indices = [31, 4, 17]   # any order in, sorted inside
    definitions = [_definition(rng, ndom, 40) for ndom in (2, 0, 3)]
    scores = np.array([12.5, -1.0, 7.25], F32)
    batch = _batch([_definition(rng, 1, 9)] + definitions)   # the first target not sent
    defined = DefinedTargets.of_batch(batch, [1, 2, 3], indices, scores, ftz_only=[True, False, False])
    assert defined.indices.tolist() == [4, 17, 31] and len(defined) == 3
    assert defined.ftz_only.tolist() == [False, False, True]   # index 31's definition is hmmsearch's only
    assert defined.find(5) == -1 and defined.find(32) == -1 and defined.find(0) == -1
    for n, index in enumerate(indices):
        score, got = defined.target(defined.find(index))
        want = definitions[n]
        assert _bits(score) == _bits(scores[n]) and got.status == 0 and got.flags == 0
        assert (got.nregions, got.nclustered, got.noverlaps, got.nenvelopes) == (
            want.nregions, want.nclustered, want.noverlaps, want.nenvelopes)
        assert _bits(got.nexpected) == _bits(want.nexpected) and _bits(got.n2sc_sum) == _bits(want.n2sc_sum)
        assert len(got.domains) == len(want.domains)
        for a, b in zip(got.domains, want.domains):
            assert (a.ienv, a.jenv, a.iali, a.jali) == (b.ienv, b.jenv, b.iali, b.jali)
            assert all(_bits(getattr(a, f)) == _bits(getattr(b, f)) for f in ("envsc", "domcorrection", "oasc"))
            for f in ("st", "k", "i", "pp"):
                x, y = getattr(a.trace, f), getattr(b.trace, f)
                assert x.dtype == y.dtype and np.array_equal(x, y)
    empty = DefinedTargets.of_batch(batch, [], [], [])
    assert len(empty) == 0 and empty.find(4) == -1 and empty.ftz_only.size == 0
    message = pickle.dumps(defined, protocol=pickle.HIGHEST_PROTOCOL)
    assert len(message) < defined.nbytes + 1500
