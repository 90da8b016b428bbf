"""hmmgpu.stages.forward's per-length special transitions: one target's (numpy scalars, the
per-target path of the post-filter) are the bits of the same lengths' array form, multihit and
unihit (libhmmer's own values are checked on the array form in tests/gpu/test_fwdback.py)."""
import numpy as np

from hmmgpu.stages.forward import length_specials


def test_one_length_equals_the_array_form():
    lengths = np.concatenate([np.arange(0, 1001), np.random.default_rng(2).integers(1001, 200001, 200)])
    for nj in (np.float32(1.0), np.float32(0.0)):
        pmove, ploop = length_specials(lengths, nj)
        for L, mv, lp in zip(lengths.tolist(), pmove.tolist(), ploop.tolist()):
            one = length_specials(L, nj)
            assert all(type(v) is np.float32 for v in one)
            assert (one[0], one[1]) == (np.float32(mv), np.float32(lp)), L
        one = length_specials(np.int64(lengths[-1]), nj)
        assert one == (pmove[-1], ploop[-1])
