"""The CPU references run under flush-to-zero give hmmsearch's values themselves.

hmmsearch computes with SSE flush-to-zero on. The references do HMMER's float operations as
scalar SSE operations, which flush under the same MXCSR bit, so run in that mode they must
equal libhmmer run in that mode, also on the targets whose exactness flags say that the two
float modes could differ there (the own post-filter relies on it: hmmgpu.cpu.own_postfilter).
Here: the Forward and Backward parsers' scores and rows and the whole domain definition, on
the sample models' hits in the proteome, flagged targets included.
"""
from __future__ import annotations

import numpy as np
import pyhmmer

from hmmgpu.cpu.domaindef import CpuDomainStages
from hmmgpu.cpu.fwdback import HOST, backward, parse
from hmmgpu.cpu.hmmerlib import HmmerModel
from hmmgpu.host import flush_to_zero
from hmmgpu.stages.domaindef import define_domains
from hmmgpu.stages.forward import ForwardTables
from tests.helpers import MODEL_NAMES, assert_definition_equal, bits, sample_hmm

#: Hits a model, the best first.
HITS = 12


def test_references_under_flush_to_zero_equal_libhmmer_under_flush_to_zero(proteome):
    checked = flagged = domains = 0
    for name in MODEL_NAMES:
        hmm = sample_hmm(name)
        hits = next(pyhmmer.hmmsearch([hmm], proteome.block(), cpus=1))
        as_bytes = (lambda n: n if isinstance(n, bytes) else n.encode())
        names = [as_bytes(hit.name) for hit in hits][:HITS]
        where = {as_bytes(n): i for i, n in enumerate(proteome.names())}
        with HmmerModel(hmm) as model:
            tables = ForwardTables.from_hmmer(model)
            stages = CpuDomainStages(tables)
            for target in names:
                codes = proteome.codes(where[target])
                with flush_to_zero():
                    theirs = model.domain_definition(codes)
                    _, score, fwd_rows, _ = model.forward_parser(codes)
                    _, _, bck_rows, _, _ = model.backward_parser(codes)
                    fwd = parse(tables, codes)
                    bck = backward(tables, codes, fwd)
                    mine = define_domains(stages, codes, fwd.xmx, bck.xmx, bck.has_own_scales)
                assert bits(fwd.score) == bits(score), (name, target)
                assert np.array_equal(bits(fwd.xmx), bits(fwd_rows)), (name, target)
                assert np.array_equal(bits(bck.xmx), bits(bck_rows)), (name, target)
                assert_definition_equal((name, target), mine, theirs)
                checked += 1
                domains += mine.ndom
                flagged += bool((fwd.flags | bck.flags | mine.flags) & HOST)
    assert checked >= 20 and domains > checked   # 23 targets (some models have fewer hits)
    assert flagged > 0, flagged   # the comparison covers targets whose flags say the float modes could differ
