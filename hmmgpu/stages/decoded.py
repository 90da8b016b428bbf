"""The domain decodings a device made for a model's F3 passers, on their way to the post-filter stage.

What it holds
-------------
With hmmgpu's own post-filter (``--postfilter hmmgpu``) on the GPU route, the GPU process does
more than decide the Forward filter: for each model's F3 passers it runs the Forward and
Backward parsers and ``p7_DomainDecoding`` on the device too (:mod:`hmmgpu.gpu.cascade`), and
sends what domain definition starts from with the model's cascade result
(:attr:`hmmgpu.stages.cascade.CascadeResult.decoded`). Per target (database index): the Forward
parser's score (float32 nats, the F3 score: the hit's scores are formed from it), the decoding's
status (OK, or RANGE when its scale product overflowed, for which ``p7_Pipeline`` fails) and
``mocc``, ``btot``, ``etot`` (float32 [L+1], row 0 all 0), which
:func:`hmmgpu.stages.domaindef.define_domains_decoded` takes as they are
(:class:`hmmgpu.cpu.own_postfilter.OwnPostFilter` does, instead of running the CPU references'
parsers).

Only targets the device can promise bit for bit are here: it leaves out every target whose
Forward or Backward rows or decoding raised an exactness flag that could send it to the host
(:data:`~hmmgpu.stages.forward.HOST`: RANGE, SUBNORMAL), whose last Forward product is tiny,
that its cost cap keeps off the device, and every target of a model its tables' argument does
not cover. The post-filter stage computes those with its CPU references as before, and decides
them by their flags. The decoding kernel computes in hmmsearch's arithmetic (flush-to-zero):
a decoding here is hmmsearch's, and pyhmmer's too unless its ``ftz_only`` entry says the kernel
flushed a tiny value (:data:`~hmmgpu.stages.forward.FTZ_ONLY`; a target whose parsers stored
a tiny special value, TINY_ROWS, always meets one). A search in pyhmmer's float mode leaves
those to the host. The GPU process sends such decodings only where it defines them
(:data:`hmmgpu.gpu.runtime.tuning.DEFINE_FTZ_ONLY`, off while domain definition's kernels
compute in IEEE arithmetic); otherwise they are left to the host with the flagged ones.

Why it looks as it does
-----------------------
The three arrays of all of a model's targets are concatenated (``offsets`` says where each
target's L+1 rows start): one model's result is one pickled message from the GPU process, and
three arrays pickle in one go where a hundred small ones each cost their own overhead. Twelve
bytes a residue: for the 600 Pfam models against 29 M residues (33,600 passers of about 550
residues) about 220 MB over the run, 370 KB a model, where the two parsers' special-state rows
would be four times as much. ``indices`` are sorted (the gate's passers are), so a target is
found by bisection.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["DecodedTargets", "find_sorted"]


@dataclass
class DecodedTargets:
    """One model's F3 passers as a device decoded them (see the module header)."""

    indices: np.ndarray  #: int64 database indices, sorted
    scores: np.ndarray  #: float32: the Forward parser's score (nats)
    status: np.ndarray  #: int32: the decoding's status (STATUS_OK or STATUS_RANGE)
    offsets: np.ndarray  #: int64 [n+1]: where each target's rows start in the three arrays
    mocc: np.ndarray  #: float32: every target's [L+1] rows, one after the other
    btot: np.ndarray
    etot: np.ndarray
    ftz_only: np.ndarray  #: bool: the decoding is hmmsearch's (flush-to-zero) only, not pyhmmer's

    @classmethod
    def gather(cls, indices, scores, status, mocc: list, btot: list, etot: list, ftz_only=None) -> "DecodedTargets":
        """From per-target values and arrays (any order; ``ftz_only`` None: all False)."""
        indices = np.asarray(indices, np.int64)
        order = np.argsort(indices, kind="stable")
        sizes = np.array([mocc[k].size for k in order.tolist()], np.int64)

        def flat(arrays):
            return np.concatenate([arrays[k] for k in order.tolist()]).astype(np.float32, copy=False) \
                if order.size else np.zeros(0, np.float32)

        return cls(indices=indices[order], scores=np.asarray(scores, np.float32)[order],
                   status=np.asarray(status, np.int32)[order],
                   offsets=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
                   mocc=flat(mocc), btot=flat(btot), etot=flat(etot),
                   ftz_only=(np.zeros(indices.size, bool) if ftz_only is None
                             else np.asarray(ftz_only, bool).reshape(-1)[order]))

    def __len__(self) -> int:
        return int(self.indices.size)

    @property
    def nbytes(self) -> int:
        """The arrays' bytes (what the message carries, less pickle's few framing bytes)."""
        return sum(a.nbytes for a in (self.indices, self.scores, self.status, self.offsets, self.mocc, self.btot,
                                      self.etot, self.ftz_only))

    def find(self, index: int) -> int:
        """The position of database index ``index`` here, or -1."""
        return int(find_sorted(self.indices, [index])[0])

    def find_all(self, indices) -> np.ndarray:
        """:meth:`find` of each database index of ``indices`` (int64 array)."""
        return find_sorted(self.indices, indices)

    def target(self, k: int) -> tuple:
        """(Forward score, decoding) of the target at position ``k``: the decoding as
        :func:`~hmmgpu.stages.domaindef.define_domains_decoded` takes it, (status, mocc, btot, etot)."""
        a, b = int(self.offsets[k]), int(self.offsets[k + 1])
        return self.scores[k], (int(self.status[k]), self.mocc[a:b], self.btot[a:b], self.etot[a:b])


def find_sorted(sorted_indices: np.ndarray, wanted) -> np.ndarray:
    """The position of each value of ``wanted`` in ``sorted_indices`` (int64, sorted), or -1
    where it is not there: one search for all of them."""
    wanted = np.asarray(wanted, np.int64).reshape(-1)
    at = np.searchsorted(sorted_indices, wanted)
    found = at < sorted_indices.size
    found[found] = sorted_indices[at[found]] == wanted[found]
    return np.where(found, at, -1).astype(np.int64)
