"""The full-matrix wrappers (cpu.fwdback.forward_matrix, backward_matrix, cpu.decoding.decode)
allocate their matrices uninitialised but for row 0: the compiled parsers and posterior decoding
must write every other cell. Checked by running them into buffers filled with NaN (row 0 zero)
and into zeroed ones: the same bits, multihit and unihit, on sampled models and random targets."""
import numpy as np
import pytest

from hmmgpu.cpu import fwdback as ref
from hmmgpu.cpu.decoding import posterior_rows
from hmmgpu.stages.forward import XSCALE, ForwardTables
from hmmgpu.stages.profiles import configured_profile
from tests.helpers import bits, sampled_hmm


def _buffers(shape):
    nan = np.full(shape, np.nan, np.float32)
    nan[0] = 0.0
    return nan, np.zeros(shape, np.float32)


@pytest.mark.parametrize("M, L, unihit", [(7, 1, False), (30, 57, False), (30, 57, True), (101, 40, True)])
def test_every_cell_but_row_0_is_written(M, L, unihit):
    tables = ForwardTables.from_optimized(configured_profile(sampled_hmm(M, 3)).to_optimized())
    t = ref.unihit_tables(tables) if unihit else tables
    codes = np.random.default_rng(M + L).integers(0, 20, L).astype(np.uint8)
    pmove, ploop = ref.length_specials(L + 50, t.nj)   # a slice of a longer target
    shape = (L + 1, 3, t.Q, 4)
    fwd, bck, pp = {}, {}, {}
    for key, (dp, xmx) in (("nan", (_buffers(shape)[0], _buffers((L + 1, 6))[0])),
                           ("zero", (_buffers(shape)[1], _buffers((L + 1, 6))[1]))):
        ref.forward_parser(codes, t.M, t.rfv, t.tfv, pmove, ploop, t.xe_move, t.xe_loop, t.tbm_min, xmx,
                           np.zeros(L, np.float32), dp)
        fwd[key] = (dp, xmx)
    for key in ("nan", "zero"):
        dp, xmx = _buffers(shape)[key == "zero"], _buffers((L + 1, 6))[key == "zero"]
        own = ref.backward_parser(codes, t.rfv, t.tfv, pmove, ploop, t.xe_move, t.xe_loop,
                                  np.ascontiguousarray(fwd[key][1][:, XSCALE]), xmx, dp)[1]
        bck[key] = (dp, xmx)
        pp_dp, pp_xmx = _buffers(shape)[key == "zero"], _buffers((L + 1, 6))[key == "zero"]
        posterior_rows(*fwd[key], *bck[key], own, ploop, ploop, ploop, pp_dp, pp_xmx)
        pp_xmx[:, XSCALE] = xmx[:, XSCALE]
        pp[key] = (pp_dp, pp_xmx)
    for what in (fwd, bck, pp):
        for a, b in zip(what["nan"], what["zero"]):
            assert bits(a).tobytes() == bits(b).tobytes()


def test_special_transitions_of_many_targets_equal_each_targets_own():
    """The batch form the GPU stages use (one array for a launch's items) against the one-target
    form, bit for bit: multihit and unihit tables of two models mixed, lengths 0 to 100,000."""
    multi = [ForwardTables.from_optimized(configured_profile(sampled_hmm(M, 5)).to_optimized()) for M in (9, 40)]
    tables = multi + [ref.unihit_tables(t) for t in multi]
    rng = np.random.default_rng(11)
    lengths = np.concatenate([np.arange(0, 300), rng.integers(300, 100001, 300)])
    chosen = [tables[k] for k in rng.integers(0, len(tables), lengths.size)]
    got = ref.special_transitions_of(chosen, lengths)
    want = np.array([ref.special_transitions(t, int(L)) for t, L in zip(chosen, lengths)], np.float32)
    assert got.shape == (lengths.size, 4, 2) and np.array_equal(bits(got), bits(want))
    assert ref.special_transitions_of([], []).shape == (0, 4, 2)
