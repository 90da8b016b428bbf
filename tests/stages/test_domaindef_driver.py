"""The domain definition driver's own logic (hmmgpu.stages.domaindef), with stage functions
that return chosen answers: the order of calls, the counters where an envelope is dropped,
the null2 scores and domcorrection, and the decoding overflow."""
import numpy as np

from hmmgpu.constants import STATUS_OK, STATUS_RANGE
from hmmgpu.stages.domaindef import (RT1, RT2, RT3, DomainStages, Envelope, RegionEnsemble, define_domains,
                                     define_domains_batched, define_domains_decoded, define_domains_grouped,
                                     domain_decoding, fsum,
                                     is_multidomain_region, region_scan, scan_regions, scan_targets)
from hmmgpu.stages.forward import XB, XC, XE, XJ, XN, XSCALE

F32 = np.float32


def _rows(L, spans, starts, ends):
    """Parser rows (Forward, Backward; all scale factors 1) whose decoding (with ploop = 1)
    gives ``mocc`` 1 on the residues of ``spans`` ((first, last) pairs) and 0 elsewhere, a
    domain start (B) of weight w before each residue s of ``starts`` {s: w} and an end (E) of
    weight w at each residue e of ``ends`` {e: w}."""
    fx = np.zeros((L + 1, 6), F32)
    bx = np.zeros((L + 1, 6), F32)
    fx[:, XSCALE] = 1
    bx[:, XSCALE] = 1
    bx[0, XN] = 1
    inside = np.zeros(L + 1, bool)
    for first, last in spans:
        inside[first:last + 1] = True
    for i in range(1, L + 1):
        if not inside[i]:
            fx[i - 1, XN] = bx[i, XN] = 1  # N -> N at residue i: njcp = 1
    for s, w in starts.items():
        fx[s - 1, XB], bx[s - 1, XB] = w, 1
    for e, w in ends.items():
        fx[e, XE], bx[e, XE] = w, 1
    return fx, bx


def _two_domains(L, joined=False):
    """Domains 5..20 and 30..50; ``joined``: the first end weak (0.5) and 21..29 inside too, so
    that one region 5..50 holds an end followed by a start (clustered)."""
    spans = [(5, 50)] if joined else [(5, 20), (30, 50)]
    return _rows(L, spans, {5: 1, 30: 1}, {20: 0.5 if joined else 1, 50: 1})


class _Stub(DomainStages):
    """Records the calls; the region's ensemble and the envelopes' answers are given."""

    def __init__(self, envelopes, failing=()):
        self.envelopes = np.array(envelopes)
        self.failing = set(failing)
        self.calls = []

    def region_forward(self, codes, i, j):
        self.calls.append(("forward", i, j))
        return ("matrix", i, j)

    def region_ensemble(self, matrix, codes, i, j):
        assert matrix == ("matrix", i, j)
        self.calls.append(("ensemble", i, j))
        return RegionEnsemble(n2sc=np.arange(i, j + 1, dtype=F32) / F32(100), envelopes=self.envelopes)

    def rescore_envelope(self, codes, i, j, null2_is_done, n2sc):
        assert n2sc[i:j + 1].any() == null2_is_done  # a clustered region's scores are in before its envelopes
        self.calls.append(("rescore", i, j, null2_is_done))
        if (i, j) in self.failing:
            return Envelope(flags=4, dropped=True)
        return Envelope(flags=1 if i == 35 else 0, envsc=F32(i), oasc=F32(j), iali=i + 1, jali=j - 1,
                        n2sc=None if null2_is_done else np.full(j - i + 1, F32(0.5)))


def test_region_scan_and_multidomain_test():
    status, mocc, btot, etot = domain_decoding(*_two_domains(60), False, F32(1.0))
    assert status == STATUS_OK
    assert region_scan(mocc, btot, etot) == [(5, 20), (30, 50)]
    assert not is_multidomain_region(btot, etot, 5, 20)
    status, mocc, btot, etot = domain_decoding(*_two_domains(60, joined=True), False, F32(1.0))
    assert region_scan(mocc, btot, etot) == [(5, 50)]
    assert is_multidomain_region(btot, etot, 5, 50)  # an end (20, 0.5) then a start (30) inside


def test_clustered_region_counters_and_null2():
    """Envelopes 10..30, 25..40 (dropped: decoding overflow), 35..45 of one clustered region:
    three envelopes, two domains, one overlap (25 <= 30; 35 is compared with the last kept end, 30)."""
    L = 60
    fx, bx = _two_domains(L, joined=True)
    stub = _Stub([(10, 30), (25, 40), (35, 45)], failing={(25, 40)})
    codes = np.zeros(L, np.uint8)
    result = define_domains(stub, codes, fx, bx, False)
    assert stub.calls == [("forward", 5, 50), ("ensemble", 5, 50), ("rescore", 10, 30, True),
                          ("rescore", 25, 40, True), ("rescore", 35, 45, True)]
    assert (result.nregions, result.nclustered, result.nenvelopes, result.noverlaps, result.ndom) == (1, 1, 3, 1, 2)
    assert result.flags == 5  # the dropped envelope's flags count too
    expected = np.zeros(L + 1, F32)
    expected[5:51] = np.arange(5, 51, dtype=F32) / F32(100)
    assert result.n2sc.tobytes() == expected.tobytes()
    first = result.domains[0]
    assert (first.ienv, first.jenv, first.iali, first.jali, first.envsc, first.oasc) == (10, 30, 11, 29, 10, 30)
    total = F32(0)
    for v in expected[10:31]:
        total = F32(total + v)
    assert first.domcorrection == total
    assert result.n2sc_sum == fsum(expected)


def test_unclustered_regions_take_null2_by_expectation():
    L = 60
    fx, bx = _two_domains(L)
    stub = _Stub([])
    result = define_domains(stub, np.zeros(L, np.uint8), fx, bx, False)
    assert stub.calls == [("rescore", 5, 20, False), ("rescore", 30, 50, False)]
    assert (result.nregions, result.nclustered, result.nenvelopes, result.ndom) == (2, 0, 2, 2)
    assert result.n2sc[5:21].tolist() == [0.5] * 16 and result.n2sc[21:30].tolist() == [0.0] * 9
    assert result.domains[1].domcorrection == F32(0.5) * 21


def test_decoding_overflow_fails_the_target():
    L = 10
    fx, bx = _rows(L, [(2, 8)], {2: 1}, {8: 1})
    bx[0, XN] = 0  # 1 / 0: an infinite scale product, eslERANGE
    result = define_domains(_Stub([]), np.zeros(L, np.uint8), fx, bx, False)
    assert result.status == STATUS_RANGE and result.ndom == 0 and result.nregions == 0


class _Batches(_Stub):
    """:class:`_Stub` that also records the sizes of the batches the driver hands it."""

    def __init__(self, envelopes, failing=()):
        super().__init__(envelopes, failing)
        self.batches = []

    def region_ensembles(self, regions):
        self.batches.append(("regions", len(regions)))
        return super().region_ensembles(regions)

    def rescore_envelopes(self, envelopes):
        self.batches.append(("envelopes", len(envelopes)))
        return super().rescore_envelopes(envelopes)


def test_batched_driver_equals_each_target_alone():
    """Four targets in one batch (a clustered region with a dropped envelope, two unclustered
    regions, a decoding overflow, the clustered one again): one call for the two clustered
    regions, one for the eight envelopes, after all the regions; each definition (counters,
    flags, n2sc bits, domains) equals the target's alone."""
    decodings = [domain_decoding(*rows, False, F32(1.0)) for rows in (
        _two_domains(60, joined=True), _two_domains(60), _rows(10, [(2, 8)], {2: 1}, {8: 1}),
        _two_domains(70, joined=True))]
    decodings[2] = (STATUS_RANGE,) + decodings[2][1:]
    codes = [np.zeros(d[1].size - 1, np.uint8) for d in decodings]
    envelopes, failing = [(10, 30), (25, 40), (35, 45)], {(25, 40)}
    stub = _Batches(envelopes, failing)
    together = define_domains_batched(stub, list(zip(codes, decodings)))
    assert stub.batches == [("regions", 2), ("envelopes", 8)]
    assert [c[0] for c in stub.calls] == ["forward", "ensemble"] * 2 + ["rescore"] * 8
    for c, decoding, mine in zip(codes, decodings, together):
        alone = define_domains_decoded(_Stub(envelopes, failing), c, decoding)
        for key in ("status", "nregions", "nclustered", "noverlaps", "nenvelopes", "flags"):
            assert getattr(mine, key) == getattr(alone, key), key
        assert mine.nexpected == alone.nexpected and mine.n2sc.tobytes() == alone.n2sc.tobytes()
        assert [(d.ienv, d.jenv, d.iali, d.jali, d.envsc, d.domcorrection, d.oasc) for d in mine.domains] == \
            [(d.ienv, d.jenv, d.iali, d.jali, d.envsc, d.domcorrection, d.oasc) for d in alone.domains]
    assert [d.ndom for d in together] == [2, 2, 0, 2]


def _assert_same_definition(x, y) -> None:
    """Two targets' definitions are equal: counters, null2 scores (bits) and every domain."""
    for key in ("status", "nregions", "nclustered", "noverlaps", "nenvelopes", "flags", "nexpected"):
        assert getattr(x, key) == getattr(y, key), key
    assert x.n2sc.tobytes() == y.n2sc.tobytes()
    assert [(d.ienv, d.jenv, d.iali, d.jali, d.envsc, d.domcorrection, d.oasc) for d in x.domains] == \
        [(d.ienv, d.jenv, d.iali, d.jali, d.envsc, d.domcorrection, d.oasc) for d in y.domains]


class _Grouped(_Stub):
    """:class:`_Stub` whose class records the calls over several models the driver makes."""

    grouped: list = []

    @classmethod
    def region_ensembles_of(cls, work):
        cls.grouped.append(("regions", [len(regions) for _, regions in work]))
        return super().region_ensembles_of(work)

    @classmethod
    def rescore_envelopes_of(cls, work):
        cls.grouped.append(("envelopes", [len(envelopes) for _, envelopes in work]))
        return super().rescore_envelopes_of(work)


def test_grouped_driver_equals_each_model_alone(monkeypatch):
    """Three models' targets in one call of the driver (a model of two targets, one with
    none, one of three with a decoding overflow; the models answer with different envelopes):
    one call over every model per phase, each model's regions and envelopes handed to its own
    stages; every definition equals the model's batch alone. Stages of two classes are refused."""
    import pytest

    monkeypatch.setattr(_Grouped, "grouped", [])
    rows = [_two_domains(60, joined=True), _two_domains(60), _rows(10, [(2, 8)], {2: 1}, {8: 1}),
            _two_domains(70, joined=True)]
    decodings = [domain_decoding(*r, False, F32(1.0)) for r in rows]
    decodings[2] = (STATUS_RANGE,) + decodings[2][1:]
    codes = [np.zeros(d[1].size - 1, np.uint8) for d in decodings]
    targets = list(zip(codes, decodings))
    answers = ([(10, 30), (25, 40), (35, 45)], {(25, 40)}), ([(8, 20), (30, 44)], set()), ([(12, 18)], set())
    work = [targets[:2], [], targets[1:]]
    stages = [_Grouped(*a) for a in answers]
    together = define_domains_grouped(list(zip(stages, work)))
    assert _Grouped.grouped == [("regions", [1, 0, 1]), ("envelopes", [5, 0, 3])]
    assert [len(s.calls) for s in stages] == [2 + 5, 0, 2 + 3]
    for a, group, mine in zip(answers, work, together):
        alone = define_domains_batched(_Stub(*a), group)
        assert len(mine) == len(alone) == len(group)
        for x, y in zip(mine, alone):
            _assert_same_definition(x, y)
    assert [[d.ndom for d in group] for group in together] == [[2, 2], [], [2, 0, 1]]
    assert define_domains_grouped([]) == []
    with pytest.raises(TypeError):
        define_domains_grouped([(_Grouped(*answers[0]), targets[:1]), (_Stub(*answers[0]), targets[:1])])


def _decoding_by_arrays(fx, bx, has_own_scales, ploop):
    """``p7_DomainDecoding`` written with numpy's sequential float32 accumulations: the same
    operations in the same order as the driver's loop, a second formulation to check it by."""
    L = fx.shape[0] - 1
    with np.errstate(all="ignore"):
        sp0 = F32(1.0 / np.float64(bx[0, XN]))
        ratios = fx[:L, XSCALE] / bx[:L, XSCALE] if has_own_scales else np.ones(L, F32)
        sp = np.multiply.accumulate(np.concatenate([[sp0], ratios]).astype(F32), dtype=F32)
        before, after = (sp[:L], sp[1:]) if has_own_scales else (np.full(L, sp0), np.full(L, sp0))
        njcp = ((fx[:L, XN] * bx[1:, XN]) * ploop) * after
        njcp = njcp + ((fx[:L, XJ] * bx[1:, XJ]) * ploop) * after
        njcp = njcp + ((fx[:L, XC] * bx[1:, XC]) * ploop) * after
        btot = np.add.accumulate(np.concatenate([[F32(0)], ((fx[:L, XB] * bx[:L, XB]) * fx[:L, XSCALE]) * before]),
                                 dtype=F32)
        etot = np.add.accumulate(np.concatenate([[F32(0)], ((fx[1:, XE] * bx[1:, XE]) * fx[1:, XSCALE]) * after]),
                                 dtype=F32)
        mocc = np.concatenate([[F32(0)], (1.0 - njcp.astype(np.float64)).astype(F32)])
    return mocc, btot, etot


def _regions_by_loop(mocc, btot, etot):
    """The scan and the multidomain test as plain Python loops over float32 differences."""
    regions, i, triggered = [], -1, False
    for j in range(1, mocc.size):
        if not triggered:
            if F32(mocc[j] - F32(btot[j] - btot[j - 1])) < RT2 or i == -1:
                i = j
            triggered = bool(mocc[j] >= RT1)
        elif F32(mocc[j] - F32(etot[j] - etot[j - 1])) < RT2:
            best = -1.0
            for z in range(i, j + 1):
                e, b = F32(etot[z] - etot[i - 1]), F32(btot[j] - btot[z - 1])
                best = max(best, float(e if e < b else b))
            regions.append((i, j, best >= RT3))
            i, triggered = -1, False
    return regions


def test_decoding_and_scan_equal_plain_formulations():
    """Random parser rows (own scale factors or not, rescaled rows): the compiled decoding's
    mocc, btot, etot bits and the scan's regions and clustered flags equal the formulations
    above, on 40 targets."""
    rng = np.random.default_rng(5)
    for t in range(40):
        L = int(rng.integers(1, 300))
        fx = rng.random((L + 1, 6)).astype(F32)
        bx = rng.random((L + 1, 6)).astype(F32)
        rescaled = rng.random(L + 1) < 0.1
        fx[:, XSCALE] = np.where(rescaled, rng.uniform(1, 1e5, L + 1), 1).astype(F32)
        bx[:, XSCALE] = np.where(rescaled, fx[:, XSCALE] * rng.uniform(0.5, 2, L + 1), 1).astype(F32)
        fx[:, XN] *= F32(3.0)  # spans of mocc above and below the thresholds
        own, ploop = bool(t % 2), F32(rng.uniform(0.9, 1.0))
        status, mocc, btot, etot = domain_decoding(fx, bx, own, ploop)
        assert status == STATUS_OK
        for mine, theirs in zip((mocc, btot, etot), _decoding_by_arrays(fx, bx, own, ploop)):
            assert mine.tobytes() == theirs.tobytes()
        regions, clustered = scan_regions(mocc, btot, etot)
        assert [(i, j, c) for (i, j), c in zip(regions.tolist(), clustered.tolist())] == \
            _regions_by_loop(mocc, btot, etot)


def test_scan_of_many_targets_equals_each_targets_scan():
    """The driver's one compiled scan over many targets (:func:`scan_targets`: their rows
    concatenated) gives each target the regions and clustered flags of its own scan, in order;
    a target whose decoding overflowed gets none (the driver defines no region of it)."""
    rng = np.random.default_rng(11)
    decodings = []
    for t in range(60):
        L = int(rng.integers(1, 400))
        fx = rng.random((L + 1, 6)).astype(F32)
        bx = rng.random((L + 1, 6)).astype(F32)
        fx[:, XSCALE] = bx[:, XSCALE] = 1
        fx[:, XN] *= F32(rng.uniform(1.0, 4.0))
        status, mocc, btot, etot = domain_decoding(fx, bx, False, F32(rng.uniform(0.9, 1.0)))
        decodings.append((STATUS_RANGE if t % 17 == 3 else status, mocc, btot, etot))
    found = scan_targets(decodings)
    assert len(found) == len(decodings)
    assert sum(len(regions) for regions, _ in found) > 60  # the targets have regions to compare
    for (status, mocc, btot, etot), (regions, clustered) in zip(decodings, found):
        if status != STATUS_OK:
            assert regions.shape == (0, 2) and clustered.size == 0
            continue
        own_regions, own_clustered = scan_regions(mocc, btot, etot)
        assert regions.tolist() == own_regions.tolist()
        assert clustered.tolist() == own_clustered.tolist()
    assert scan_targets([]) == []


class _Overlapping(_Grouped):
    """:class:`_Grouped` whose stages ask the driver to rescore the unclustered regions'
    envelopes beside the ensembles (in a thread of the driver)."""

    overlaps_phases = True

    @classmethod
    def rescore_envelopes_of(cls, work, aside=False):
        cls.grouped.append(("aside" if aside else "envelopes", [len(envelopes) for _, envelopes in work]))
        return DomainStages.rescore_envelopes_of.__func__(cls, work)


def test_overlapping_driver_equals_the_sequential_one(monkeypatch):
    """The same three models' targets as above, with unclustered regions among them, through the
    driver that rescores the unclustered regions' envelopes in a call of their own beside the
    ensembles, then the clustered ones': every definition equals the sequential driver's (the
    envelopes' answers merged back in ``dcl`` order), and every envelope is rescored once."""
    monkeypatch.setattr(_Grouped, "grouped", [])
    rows = [_two_domains(60, joined=True), _two_domains(60), _rows(10, [(2, 8)], {2: 1}, {8: 1}),
            _two_domains(70, joined=True), _two_domains(70)]
    decodings = [domain_decoding(*r, False, F32(1.0)) for r in rows]
    decodings[2] = (STATUS_RANGE,) + decodings[2][1:]
    codes = [np.zeros(d[1].size - 1, np.uint8) for d in decodings]
    targets = list(zip(codes, decodings))
    answers = ([(10, 30), (25, 40), (35, 45)], {(25, 40)}), ([(8, 20), (30, 44)], set()), ([(12, 18)], set())
    work = [targets[:2] + targets[4:], [], targets[1:]]
    sequential = define_domains_grouped([(_Grouped(*a), group) for a, group in zip(answers, work)])
    _Grouped.grouped.clear()
    stages = [_Overlapping(*a) for a in answers]
    overlapped = define_domains_grouped(list(zip(stages, work)))
    calls = sorted(_Overlapping.grouped)
    assert [name for name, _ in calls] == ["aside", "envelopes", "regions"], calls
    assert sum(sum(n) for name, n in calls if name != "regions") == sum(len(s.calls) for s in stages) - 2 * sum(
        n for name, counts in calls if name == "regions" for n in counts)
    assert any(n for name, counts in calls if name == "aside" for n in counts)  # unclustered regions were there
    for mine_group, want_group in zip(overlapped, sequential):
        assert len(mine_group) == len(want_group)
        for x, y in zip(mine_group, want_group):
            _assert_same_definition(x, y)


def test_rescored_envelopes_as_arrays_keep_each_answer():
    """The envelopes' answers as arrays (RescoredEnvelopes: what the driver and the GPU's finish
    hand each other) give back each Envelope as it was, in any order taken and joined: kept ones
    with their trace and their null2 scores or none, dropped ones with their flags only."""
    from hmmgpu.stages.domaindef import DomainTrace, Envelope, RescoredEnvelopes

    rng = np.random.default_rng(3)

    def trace(n):
        return DomainTrace(st=rng.integers(0, 12, n).astype(np.uint8), k=rng.integers(0, 40, n).astype(np.int32),
                           i=rng.integers(0, 90, n).astype(np.int32), pp=rng.random(n).astype(F32))

    envelopes = [Envelope(flags=2, envsc=F32(3.5), oasc=F32(7.25), iali=4, jali=20, trace=trace(9),
                          n2sc=rng.random(17).astype(F32)),
                 Envelope(flags=8, dropped=True),
                 Envelope(flags=0, envsc=F32(-1.5), oasc=F32(2.0), iali=30, jali=33, trace=trace(5)),
                 Envelope(flags=1, envsc=F32(0.25), oasc=F32(1.0), iali=40, jali=41, trace=trace(3),
                          n2sc=rng.random(2).astype(F32))]

    def same(a, b):
        assert (a.flags, a.dropped) == (b.flags, b.dropped)
        if a.dropped:
            return
        assert (a.envsc, a.oasc, a.iali, a.jali) == (b.envsc, b.oasc, b.iali, b.jali)
        for name in ("st", "k", "i", "pp"):
            x, y = getattr(a.trace, name), getattr(b.trace, name)
            assert x.dtype == y.dtype and x.tobytes() == y.tobytes()
        assert (a.n2sc is None) == (b.n2sc is None)
        assert a.n2sc is None or a.n2sc.tobytes() == b.n2sc.tobytes()

    answers = RescoredEnvelopes.of(envelopes)
    assert len(answers) == 4 and answers.trace_offsets.tolist() == [0, 9, 9, 14, 17]
    for a, b in zip(answers.envelopes(), envelopes):
        same(a, b)
    order = [3, 1, 0, 2]
    for a, k in zip(answers.take(order).envelopes(), order):
        same(a, envelopes[k])
    joined = RescoredEnvelopes.joined([RescoredEnvelopes.of(envelopes[2:]), RescoredEnvelopes.of(envelopes[:2])])
    for a, b in zip(joined.envelopes(), envelopes[2:] + envelopes[:2]):
        same(a, b)
    assert len(RescoredEnvelopes.joined([])) == 0 and len(answers.take([])) == 0
