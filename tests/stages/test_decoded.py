"""The decodings a device sends with a model's cascade result (hmmgpu.stages.decoded): found by
database index, each target's arrays its own and its float-mode mark, one pickled message of about
their bytes."""
import pickle

import numpy as np

from hmmgpu.constants import STATUS_OK, STATUS_RANGE
from hmmgpu.stages.decoded import DecodedTargets


def test_targets_are_found_by_index_with_their_own_arrays():
    rng = np.random.default_rng(3)
    indices = [40, 7, 19]   # any order in, sorted inside
    lengths = [5, 1, 12]
    arrays = [[rng.random(L + 1).astype(np.float32) for L in lengths] for _ in range(3)]
    scores = np.array([1.5, -2.0, 30.25], np.float32)
    status = [STATUS_OK, STATUS_RANGE, STATUS_OK]
    ftz_only = [False, False, True]   # the decoding of index 19 is hmmsearch's only
    decoded = DecodedTargets.gather(indices, scores, status, *arrays, ftz_only=ftz_only)
    assert decoded.indices.tolist() == [7, 19, 40] and len(decoded) == 3
    assert decoded.ftz_only.tolist() == [False, True, False]
    assert decoded.find(8) == -1 and decoded.find(41) == -1 and decoded.find(0) == -1
    asked = [41, 19, 0, 7, 8, 40, 19]   # one search for many: each as find gives it
    assert decoded.find_all(np.array(asked)).tolist() == [decoded.find(i) for i in asked] == [-1, 1, -1, 0, -1, 2, 1]
    for n, index in enumerate(indices):
        score, (st, mocc, btot, etot) = decoded.target(decoded.find(index))
        assert score == scores[n] and st == status[n]
        for got, want in zip((mocc, btot, etot), (a[n] for a in arrays)):
            assert got.dtype == np.float32 and np.array_equal(got.view(np.uint32), want.view(np.uint32))
    empty = DecodedTargets.gather([], [], [], [], [], [])
    assert len(empty) == 0 and empty.find(7) == -1 and empty.ftz_only.size == 0
    assert empty.find_all([7, 9]).tolist() == [-1, -1]
    message = pickle.dumps(decoded, protocol=pickle.HIGHEST_PROTOCOL)
    assert decoded.nbytes == 3 * 8 + 3 * 4 + 3 * 4 + 4 * 8 + 3 * 4 * 21 + 3 and len(message) < decoded.nbytes + 1000
