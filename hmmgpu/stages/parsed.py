"""The parser rows a device computed for a model's F3 passers, on their way to the post-filter stage.

What it holds
-------------
On the default route (pyhmmer's post-filter stage) with :data:`hmmgpu.gpu.runtime.tuning.GATE_PARSER_ROWS`,
the GPU process runs the Forward and Backward parsers on each model's F3 passers after its Forward
gate (:mod:`hmmgpu.gpu.cascade`) and sends their special-state rows with the model's result
(:attr:`hmmgpu.stages.cascade.CascadeResult.parsed`). Per target (database index): the Forward
parser's score (float32 nats: the F3 score the hit's scores are formed from), Backward's
``has_own_scales``, a flag saying whether a row stores a tiny value (TINY_ROWS: such a value is
0 in hmmsearch's flush-to-zero arithmetic), and both parsers' rows ``xmx`` float32 [L+1, 6]
(E N J B C SCALE, HMMER's ``p7X_`` order): what ``p7_domaindef_ByPosteriorHeuristics`` reads of
the parsers (``p7_DomainDecoding`` reads nothing else of them). The post-filter stage then runs
domain definition in libhmmer itself on those rows (:mod:`hmmgpu.cpu.libhmmer_domains`) instead
of running pyhmmer's whole pipeline, parsers included, on the target.

Only targets the device can promise bit for bit are here: it leaves out every target whose
Forward or Backward pass raised a flag that could send it to the host
(:data:`~hmmgpu.stages.forward.HOST`: RANGE, SUBNORMAL), whose last Forward product is tiny, that
its cost cap keeps off the device, and every target of a model its tables' argument does not
cover. The rows are IEEE's (pyhmmer's arithmetic); a target without a HOST flag has the same
rows in hmmsearch's, save that a stored tiny value is 0 there (:meth:`ParsedTargets.target` flushes
them for a search in that mode: measured equal to libhmmer's rows under flush-to-zero on every
TINY_ROWS target checked, tests/cpu/test_libhmmer_domains.py).

Why it looks as it does
-----------------------
As with the decodings (:mod:`hmmgpu.stages.decoded`), a model's rows are concatenated into two
flat arrays (``offsets`` say where each target's L+1 rows start): one pickled message a model.
48 bytes a residue: for the 600 Pfam models against 29 M residues (33,600 passers of about 550
residues) about 0.9 GB over the run, 1.5 MB a model. ``indices`` are sorted (the gate's passers
are), so a target is found by bisection.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hmmgpu.stages.forward import FLT_MIN

__all__ = ["ParsedTargets"]


@dataclass
class ParsedTargets:
    """One model's F3 passers as a device parsed them (see the module header)."""

    indices: np.ndarray  #: int64 database indices, sorted
    scores: np.ndarray  #: float32: the Forward parser's score (nats)
    has_own_scales: np.ndarray  #: bool: Backward switched to its own scale factors
    tiny: np.ndarray  #: bool: a row stores a tiny value (TINY_ROWS), 0 under flush-to-zero
    offsets: np.ndarray  #: int64 [n+1]: where each target's rows start (in rows of 6 floats)
    forward: np.ndarray  #: float32 [R, 6]: every target's Forward rows, one after the other
    backward: np.ndarray  #: float32 [R, 6]: the same of Backward

    @classmethod
    def gather(cls, indices, scores, has_own_scales, tiny, forward: list, backward: list) -> "ParsedTargets":
        """From per-target values and [L+1, 6] row arrays (any order)."""
        indices = np.asarray(indices, np.int64)
        order = np.argsort(indices, kind="stable").tolist()
        sizes = np.array([forward[k].shape[0] for k in order], np.int64)

        def flat(arrays):
            return np.concatenate([arrays[k] for k in order]).astype(np.float32, copy=False) \
                if order else np.zeros((0, 6), np.float32)

        return cls(indices=indices[order], scores=np.asarray(scores, np.float32).reshape(-1)[order],
                   has_own_scales=np.asarray(has_own_scales, bool).reshape(-1)[order],
                   tiny=np.asarray(tiny, bool).reshape(-1)[order],
                   offsets=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
                   forward=flat(forward), backward=flat(backward))

    def __len__(self) -> int:
        return int(self.indices.size)

    @property
    def nbytes(self) -> int:
        """The arrays' bytes (what the message carries, less pickle's few framing bytes)."""
        return sum(a.nbytes for a in (self.indices, self.scores, self.has_own_scales, self.tiny, self.offsets,
                                      self.forward, self.backward))

    def find(self, index: int) -> int:
        """The position of database index ``index`` here, or -1."""
        k = int(np.searchsorted(self.indices, index))
        return k if k < self.indices.size and int(self.indices[k]) == index else -1

    def target(self, k: int, ftz: bool) -> tuple:
        """(Forward score, Forward rows, Backward rows, has_own_scales) of the target at position
        ``k``, the rows as the parsers store them in the search's float mode (``ftz``: hmmsearch's,
        each tiny value 0; the arrays are then copies, else views)."""
        a, b = int(self.offsets[k]), int(self.offsets[k + 1])
        fwd, bwd = self.forward[a:b], self.backward[a:b]
        if ftz and self.tiny[k]:
            fwd, bwd = (np.where(np.abs(rows) < FLT_MIN, np.float32(0.0), rows).astype(np.float32) for rows in (fwd, bwd))
        return self.scores[k], fwd, bwd, bool(self.has_own_scales[k])
