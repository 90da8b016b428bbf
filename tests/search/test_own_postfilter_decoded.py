"""hmmgpu's own post-filter from a device's decodings (``OwnPostFilter.target(..., device=...)``), on the CPU.

On the GPU route the GPU process sends, for each F3 passer its kernels did not flag, the Forward
score and ``p7_DomainDecoding``'s arrays, and the stage starts domain definition from them
(tests/gpu/test_own_postfilter_gpu.py runs that route under the simulator and on a GPU). Here,
without a GPU, over many more targets: for every target the kernels would decode, by their
rule (both parsers unflagged, the last Forward product not tiny, no tiny value met by the
decoding: tests/gpu/fwdback_checks.decoding_meets_tiny), the stage's outcome and hit from that
decoding (the CPU references', which the kernels equal bit for bit) are those from its own
parsers, in pyhmmer's IEEE mode and in hmmsearch's flush-to-zero mode; and a decoding that
meets a tiny value, which the kernel computes in hmmsearch's arithmetic (``ftz_only``), serves a
search in that mode and is left to the host in pyhmmer's.
"""
from __future__ import annotations

import contextlib
from types import SimpleNamespace

import numpy as np
import pyhmmer
import pytest
from pyhmmer.easel import SequenceFile

from hmmgpu.cpu.domaindef import CpuDomainStages
from hmmgpu.cpu.fwdback import FLT_MIN, HOST, SUBNORMAL, backward, length_specials, parse
from hmmgpu.cpu.own_postfilter import OwnPostFilter, TargetOutcome
from hmmgpu.formats.seqdb import SequenceDB
from hmmgpu.host import flush_to_zero
from hmmgpu.options import SearchOptions
from hmmgpu.stages.domaindef import domain_decoding
from hmmgpu.stages.hits import serialize_hit
from tests.gpu.fwdback_checks import decoding_meets_tiny
from tests.helpers import AMINO, MODEL_NAMES, PROTEOME, sample_hmm


@pytest.fixture(scope="module")
def survivors():
    """The proteome, and per sample model the targets past its Viterbi filter with a domain
    (pyhmmer with F3 = 1 and no reporting threshold)."""
    with SequenceFile(PROTEOME, digital=True, alphabet=AMINO) as f:
        block = f.read_block()
    db = SequenceDB.from_block(block)
    position = {seq.name: k for k, seq in enumerate(block)}
    chosen = []
    for index, name in enumerate(MODEL_NAMES):
        hmm = sample_hmm(name)
        hits = pyhmmer.plan7.Pipeline(AMINO, F3=1.0, E=1e9, domE=1e9).search_hmm(hmm, block)
        chosen.append((index, hmm, sorted(position[hit.name] for hit in hits)))
    return db, chosen


def device_decoding(tables, codes):
    """(Forward score, decoding) as the GPU would send them for this target, or None where its
    kernels' flags (or the last Forward product) leave the target to the host."""
    forward = parse(tables, codes)
    bck = backward(tables, codes, forward)
    pmove, ploop = length_specials(codes.size)
    if (forward.flags | bck.flags) & HOST or not np.float32(forward.xc * pmove) > FLT_MIN:
        return None
    if decoding_meets_tiny(forward.xmx, bck.xmx, bck.has_own_scales, ploop):
        return None
    return forward.score, domain_decoding(forward.xmx, bck.xmx, bck.has_own_scales, ploop)


def test_a_device_decoding_gives_the_references_outcome(survivors):
    """Every Viterbi-filter survivor with a domain of the four sample models on the proteome
    that the kernels would decode: the same outcome and hit bytes from the decoding as from
    the stage's own parsers, in both float modes; a few (the models' strong homologs whose
    parsers' C goes subnormal) are left to the host."""
    db, chosen = survivors
    stage = OwnPostFilter(db, SearchOptions())
    compared = left_out = hits = 0
    for index, hmm, positions in chosen:
        query = SimpleNamespace(index=index, hmm=hmm)
        model = stage._model(query)
        for position in positions:
            device = device_decoding(model.tables, db.codes(position))
            if device is None:
                left_out += 1
                continue
            for ftz in (False, True):
                with flush_to_zero() if ftz else contextlib.nullcontext():
                    here = stage.target(query, model, position, True, None)
                    there = stage.target(query, model, position, True, None, device)
                assert here[0] == there[0] != TargetOutcome.FAILED, (hmm.name, position, ftz)
                assert (here[1] is None) == (there[1] is None)
                if here[1] is not None:
                    assert serialize_hit(here[1]) == serialize_hit(there[1]), (hmm.name, position, ftz)
                    hits += 1
            compared += 1
    assert compared >= 75 and hits >= 2 * 33 and left_out >= 1   # 79, 158 and 7 with the four sample models


def test_a_definition_of_the_gpu_process_gives_the_references_hit(survivors):
    """The same targets defined as the GPU process defines them (stages.defined.split_defined on
    their decodings, in IEEE arithmetic as the device computes; the CPU stages here, which the
    GPU's equal bit for bit): every definition sent (no HOST flag) gives the stage the outcome
    and hit bytes its own parsers and domain definition give, in both float modes, in a batch
    where every other target is defined by the stage itself; the others come back as their
    decodings (tests/test_audit.py has one such)."""
    from hmmgpu.stages.decoded import DecodedTargets
    from hmmgpu.stages.defined import split_defined

    db, chosen = survivors
    stage = OwnPostFilter(db, SearchOptions())
    sent = kept = hits = 0
    for index, hmm, positions in chosen:
        query = SimpleNamespace(index=index, hmm=hmm)
        model = stage._model(query)
        made = {p: device_decoding(model.tables, db.codes(p)) for p in positions}
        made = {p: d for p, d in made.items() if d is not None}
        decoded = DecodedTargets.gather(list(made), [s for s, _ in made.values()], [d[0] for _, d in made.values()],
                                        *([d[n] for _, d in made.values()] for n in (1, 2, 3)))
        defined, rest = split_defined(CpuDomainStages(model.tables, seed=42), db.codes, decoded)
        assert sorted(defined.indices.tolist() + rest.indices.tolist()) == sorted(made)
        order = defined.indices.tolist()
        for ftz in (False, True):
            with flush_to_zero() if ftz else contextlib.nullcontext():
                here = stage.targets(query, model, order, [True] * len(order), None, [None] * len(order))
                there = stage.targets(query, model, order, [True] * len(order), None, [None] * len(order),
                                      [defined.target(k) if k % 2 else None for k in range(len(order))])
            for position, a, b in zip(order, here, there, strict=True):
                assert a[0] == b[0] == TargetOutcome.PASSED and (a[1] is None) == (b[1] is None), (hmm.name, position)
                if a[1] is not None:
                    assert serialize_hit(a[1]) == serialize_hit(b[1]), (hmm.name, position, ftz)
                    hits += 1
        sent += len(defined)
        kept += len(rest)
    assert sent + kept >= 75 and sent >= 70 and hits >= 2 * 70   # 79 sent, 158 hits, none kept with the samples


def test_passers_with_a_clustered_region_can_be_left_to_pyhmmer(survivors):
    """``split_defined_grouped(..., clustered=False)`` (the GPU process with
    tuning.DEFINE_CLUSTERED off): a decoded passer whose region scan finds a clustered region is
    not defined but comes back with the rest, as its decoding, and is counted
    (``left_clustered``); every other passer's definition is the one made with clustering on,
    array for array."""
    from hmmgpu.stages.decoded import DecodedTargets
    from hmmgpu.stages.defined import split_defined_grouped
    from hmmgpu.stages.domaindef import scan_regions

    db, chosen = survivors
    stage = OwnPostFilter(db, SearchOptions())
    left = simple = 0
    for index, hmm, positions in chosen:
        model = stage._model(SimpleNamespace(index=index, hmm=hmm))
        made = {p: device_decoding(model.tables, db.codes(p)) for p in positions}
        made = {p: d for p, d in made.items() if d is not None}
        decoded = DecodedTargets.gather(list(made), [s for s, _ in made.values()], [d[0] for _, d in made.values()],
                                        *([d[n] for _, d in made.values()] for n in (1, 2, 3)))
        clustered = {p for p, (_, d) in made.items() if scan_regions(*d[1:])[1].any()}
        counts = {}
        (alone, rest), = split_defined_grouped([(CpuDomainStages(model.tables, seed=42), decoded)], db.codes,
                                               clustered=False, counts=counts)
        (every, _), = split_defined_grouped([(CpuDomainStages(model.tables, seed=42), decoded)], db.codes)
        assert counts.get("left_clustered", 0) == len(clustered)
        assert set(rest.indices.tolist()) >= clustered and not clustered & set(alone.indices.tolist())
        assert sorted(alone.indices.tolist() + rest.indices.tolist()) == sorted(made)
        for k, position in enumerate(alone.indices.tolist()):
            j = every.find(position)
            assert j >= 0
            (score_a, a), (score_e, e) = alone.target(k), every.target(j)
            assert score_a == score_e and a.nclustered == e.nclustered == 0 and a.n2sc_sum == e.n2sc_sum
            assert [(d.ienv, d.jenv, d.iali, d.jali, d.envsc, d.domcorrection, d.oasc) for d in a.domains] == [
                (d.ienv, d.jenv, d.iali, d.jali, d.envsc, d.domcorrection, d.oasc) for d in e.domains]
            assert all(np.array_equal(x, y) for da, de in zip(a.domains, e.domains)
                       for x, y in zip(da.trace, de.trace))
        left += len(clustered)
        simple += len(alone)
    assert left >= 10 and simple >= 60, (left, simple)   # 13 and 66 with the four sample models


def test_a_decoding_in_hmmsearch_mode_only_serves_that_mode(survivors):
    """The targets whose decoding meets a tiny value, which the decoding kernel computes in
    hmmsearch's arithmetic and marks ``ftz_only`` (its flushed values equal libhmmer's under
    flush-to-zero: tests/gpu/test_backward_kernel.py): sent so, such a decoding (here the
    references' under flush-to-zero, which are hmmsearch's) is taken by a search in hmmsearch's
    float mode, where it gives the stage the outcome and hit bytes of its own parsers, and left
    to the host by a search in pyhmmer's (the stage's lookup of what the GPU sent)."""
    from hmmgpu.cpu.own_postfilter import _sent

    db, _ = survivors
    stage = OwnPostFilter(db, SearchOptions(), ftz=True)
    compared = hits = 0
    for hmm, query, model, decoded in flushed_by_model(survivors, stage, marked=True):
        order = decoded.indices.tolist()
        assert _sent(decoded, order, False) == [None] * len(order)
        with flush_to_zero():
            for position, device in zip(order, _sent(decoded, order, True), strict=True):
                here = stage.target(query, model, position, True, None)
                there = stage.target(query, model, position, True, None, device)
                assert here[0] == there[0] != TargetOutcome.FAILED, (hmm.name, position)
                assert (here[1] is None) == (there[1] is None)
                if here[1] is not None:
                    assert serialize_hit(here[1]) == serialize_hit(there[1]), (hmm.name, position)
                    hits += 1
                compared += 1
    assert compared >= 5 and hits >= 5   # the 7 targets the first test leaves out


def flushed_by_model(survivors, stage, marked: bool):
    """For each sample model with such decodings: (hmm, query, the stage's model, its
    :func:`flushed_decodings`)."""
    db, chosen = survivors
    for index, hmm, positions in chosen:
        query = SimpleNamespace(index=index, hmm=hmm)
        model = stage._model(query)
        decoded = flushed_decodings(db, model.tables, positions, marked)
        if decoded is not None:
            yield hmm, query, model, decoded


def flushed_decodings(db, tables, positions, marked: bool):
    """The decodings the kernels make in hmmsearch's float mode alone (those meeting a tiny
    value, both parsers unflagged) of ``positions``: the references' under flush-to-zero, which
    are hmmsearch's, as :class:`~hmmgpu.stages.decoded.DecodedTargets` (``marked``: ``ftz_only``
    as the kernels send them; else unmarked), or None where there are none."""
    from hmmgpu.stages.decoded import DecodedTargets

    made = {}
    for position in positions:
        codes = db.codes(position)
        forward = parse(tables, codes)
        bck = backward(tables, codes, forward)
        pmove, ploop = length_specials(codes.size)
        if (forward.flags | bck.flags) & HOST or not np.float32(forward.xc * pmove) > FLT_MIN or \
                device_decoding(tables, codes) is not None:
            continue
        with flush_to_zero():
            forward = parse(tables, codes)
            bck = backward(tables, codes, forward)
            made[position] = forward.score, domain_decoding(forward.xmx, bck.xmx, bck.has_own_scales, ploop)
    if not made:
        return None
    order = sorted(made)
    return DecodedTargets.gather(order, [made[p][0] for p in order], [made[p][1][0] for p in order],
                                 *([made[p][1][n] for p in order] for n in (1, 2, 3)),
                                 ftz_only=[marked] * len(order))


class ModeStages(CpuDomainStages):
    """The CPU stages in IEEE arithmetic or in hmmsearch's float mode (``ftz``: under flush-to-zero,
    the x86 mode itself, as the GPU's ``ftz`` kernels compute it), one class for both (the driver
    groups stages of one class)."""

    def __init__(self, tables, ftz: bool):
        super().__init__(tables, seed=42)
        self.ftz = ftz

    def region_ensembles(self, regions):
        with flush_to_zero(self.ftz):
            return super().region_ensembles(regions)

    def rescore_envelopes(self, envelopes):
        with flush_to_zero(self.ftz):
            return super().rescore_envelopes(envelopes)


def test_a_search_in_hmmsearchs_float_mode_defines_in_it_what_ieee_would_flag(survivors):
    """``split_defined_grouped(..., in_ftz=True)`` (the GPU process of a search in hmmsearch's
    float mode, the command line's) on decodings that meet a tiny value (sent unmarked, so that
    IEEE stages would define them and flag most for flush-to-zero): every one is defined in that
    mode, sent marked ``ftz_only``, equals the CPU stages' definition under flush-to-zero, and the
    stage in hmmsearch's mode forms from it the hit its own parsers give."""
    from hmmgpu.stages.defined import split_defined_grouped
    from hmmgpu.stages.domaindef import define_domains

    db, _ = survivors
    stage = OwnPostFilter(db, SearchOptions(), ftz=True)
    flagged = hits = 0
    for hmm, query, model, decoded in flushed_by_model(survivors, stage, marked=False):
        order = decoded.indices.tolist()
        first = [d.flags for d in dd_batched(CpuDomainStages(model.tables, seed=42), db, decoded)]   # in IEEE
        flushed = ModeStages(model.tables, True)
        (defined, rest), = split_defined_grouped([(flushed, decoded)], db.codes, in_ftz=True)
        assert defined.ftz_only.all(), hmm.name
        for k, position in enumerate(defined.indices.tolist()):
            codes = db.codes(position)
            flagged += int(bool(first[order.index(position)] & SUBNORMAL))
            with flush_to_zero():
                fw = parse(model.tables, codes)
                bk = backward(model.tables, codes, fw)
                want = define_domains(flushed, codes, fw.xmx, bk.xmx, bk.has_own_scales)
                here = stage.target(query, model, position, True, None)
                there, = stage.targets(query, model, [position], [True], None, [None], [defined.target(k)])
            score, got = defined.target(k)
            assert [(d.ienv, d.jenv, d.iali, d.jali) for d in got.domains] == [
                (d.ienv, d.jenv, d.iali, d.jali) for d in want.domains], (hmm.name, position)
            assert here[0] == there[0] and (here[1] is None) == (there[1] is None), (hmm.name, position)
            if here[1] is not None:
                assert serialize_hit(here[1]) == serialize_hit(there[1]), (hmm.name, position)
                hits += 1
    assert flagged >= 3 and hits >= 3   # those IEEE stages flag for flush-to-zero among the sample models' 7


def dd_batched(stages, db, decoded):
    """The definitions of every decoding of ``decoded`` with ``stages`` (in the caller's float mode)."""
    from hmmgpu.stages.domaindef import define_domains_batched

    return define_domains_batched(stages, [(db.codes(int(i)), decoded.target(k)[1])
                                           for k, i in enumerate(decoded.indices.tolist())])


def test_one_pass_in_hmmsearchs_float_mode_equals_ieees_definitions(survivors):
    """The two modes of ``split_defined_grouped`` on the same decodings (those the kernels send
    unmarked, and those that hold in hmmsearch's float mode only, marked ``ftz_only``): in IEEE
    arithmetic (a search in pyhmmer's mode) the marked ones are left with the rest and nothing
    sent is marked; in hmmsearch's mode (``in_ftz``) every decoding is defined and marked, and
    each target both define gets the same definition, bit for bit (why the command line's GPU
    process needs one pass, not IEEE's and then that mode's for the rest)."""
    from hmmgpu.stages.decoded import DecodedTargets
    from hmmgpu.stages.defined import split_defined_grouped

    def entries(defined) -> dict:
        out = {}
        for k, position in enumerate(defined.indices.tolist()):
            score, d = defined.target(k)
            out[position] = (float(score), d.nregions, d.nclustered, d.noverlaps, d.nenvelopes,
                             np.float32(d.nexpected).tobytes(), np.float32(d.n2sc_sum).tobytes(),
                             [(m.ienv, m.jenv, m.iali, m.jali, np.float32([m.envsc, m.domcorrection, m.oasc]).tobytes(),
                               m.trace.st.tobytes(), m.trace.k.tobytes(), m.trace.i.tobytes(), m.trace.pp.tobytes())
                              for m in d.domains])
        return out

    db, chosen = survivors
    stage = OwnPostFilter(db, SearchOptions(), ftz=True)
    both = marked_in_one = 0
    for index, hmm, positions in chosen:
        model = stage._model(SimpleNamespace(index=index, hmm=hmm))
        sent = {p: device_decoding(model.tables, db.codes(p)) for p in positions}
        made = {p: (*got, False) for p, got in sent.items() if got is not None}
        flushed = flushed_decodings(db, model.tables, positions, marked=True)
        if flushed is not None:
            made.update((p, (*flushed.target(k), True)) for k, p in enumerate(flushed.indices.tolist()))
        order = sorted(made)
        decoded = DecodedTargets.gather(order, [made[p][0] for p in order], [made[p][1][0] for p in order],
                                        *([made[p][1][n] for p in order] for n in (1, 2, 3)),
                                        ftz_only=[made[p][2] for p in order])
        (ieee, ieee_rest), = split_defined_grouped([(ModeStages(model.tables, False), decoded)], db.codes)
        (once, _), = split_defined_grouped([(ModeStages(model.tables, True), decoded)], db.codes, in_ftz=True)
        marked = {p for p in order if made[p][2]}
        assert not ieee.ftz_only.any() and marked <= set(ieee_rest.indices.tolist()), hmm.name
        assert once.ftz_only.all(), hmm.name
        by_ieee, by_once = entries(ieee), entries(once)
        assert set(by_ieee) <= set(by_once), hmm.name
        for position, entry in by_ieee.items():
            assert by_once[position] == entry, (hmm.name, position)
        both += len(by_ieee)
        marked_in_one += len(marked & set(by_once))
    assert both >= 50 and marked_in_one >= 3
