"""The Forward parser, bit for bit against HMMER's own ``p7_ForwardParser`` (libhmmer through
hmmgpu.cpu.hmmerlib): the CPU reference (hmmgpu.cpu.fwdback) on real models and proteins and on
generated ones, the GPU kernel (hmmgpu.gpu.runtime.context.fwdback) under numba's CUDA simulator, and on
a GPU (``pytest -m gpu``)."""
import ast
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hmmgpu.cpu import fwdback as ref
from hmmgpu.host import flush_to_zero
from hmmgpu.cpu.hmmerlib import HmmerModel, libhmmer_available
from tests.helpers import MODEL_NAMES, adversarial_results, assert_rounded_ptx, bits, run_simulated, sample_hmm, sampled_hmm, simulated_rows, zero_tiny

pytestmark = pytest.mark.skipif(not libhmmer_available(), reason="pyhmmer's bundled libhmmer is unavailable")
ROOT = Path(__file__).resolve().parents[2]
STATUS_OK, STATUS_RANGE = 0, 16


def compare(model, tables, codes, ftz=True) -> ref.ForwardResult:
    """The CPU reference against libhmmer on one target, in IEEE mode (pyhmmer's) and, for a
    target the reference does not send to the host, in flush-to-zero mode (hmmsearch's)."""
    mine = ref.parse(tables, codes)
    status, score, xmx, _ = model.forward_parser(codes)
    what = f"L={codes.size} M={tables.M} flags={mine.flags}"
    if mine.flags & ref.RANGE:
        assert status == STATUS_RANGE and np.isnan(mine.score), what
        return mine
    assert status == STATUS_OK, what
    assert bits(mine.score) == bits(score), what
    assert np.array_equal(bits(mine.xmx), bits(xmx)), what
    assert np.array_equal(bits(mine.scales), bits(xmx[1:, 5][xmx[1:, 5] != 1])), what
    pmove = ref.length_specials(codes.size)[0]
    assert bits(ref.forward_score(mine.scales, mine.xc, pmove)) == bits(score), what
    assert bits(np.float32(mine.xc)) == bits(xmx[-1, 4]), what
    if ftz and not mine.needs_host:
        with flush_to_zero():
            status2, score2, xmx2, _ = model.forward_parser(codes)
        assert status2 == STATUS_OK and bits(score2) == bits(score), what
        assert np.array_equal(bits(zero_tiny(mine.xmx)), bits(xmx2)), what
        # TINY_ROWS is exactly "hmmsearch's rows differ from pyhmmer's"
        assert bool(mine.flags & ref.TINY_ROWS) == (not np.array_equal(bits(xmx), bits(xmx2))), what
    return mine


# ------------------------------------------------------------------------------------------
# tables and per-length constants
# ------------------------------------------------------------------------------------------
def test_length_specials_equal_hmmer():
    """pmove = 3/(L+3) and ploop = 1 - pmove in float, as p7_oprofile_ReconfigLength sets N, J, C."""
    lengths = np.concatenate([np.arange(1, 2001), np.random.default_rng(1).integers(2001, 100001, 300), [100000]])
    pmove, ploop = ref.length_specials(lengths)
    with HmmerModel(sample_hmm("PF02826")) as model:
        for L, mv, lp in zip(lengths.tolist(), pmove, ploop):
            xf = model.forward_specials(L)
            assert np.array_equal(bits(xf[1:, 0]), bits([mv] * 3)) and np.array_equal(bits(xf[1:, 1]), bits([lp] * 3)), L
            assert bits(xf[0, 0]) == bits(xf[0, 1]) == bits(0.5)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_forward_tables_equal_pyhmmer(name):
    """The ctypes read of om->rfv / om->tfv equals pyhmmer's view of the same tables; padding
    lanes are 0; the model meets the flags' conditions."""
    from pyhmmer.plan7 import Background, Profile

    hmm = sample_hmm(name)
    profile = Profile(hmm.M, hmm.alphabet)
    profile.configure(hmm, Background(hmm.alphabet), L=100)
    om = profile.to_optimized()
    with HmmerModel(hmm) as model:
        t = model.forward_tables()
        tables = ref.ForwardTables.from_hmmer(model)
    Q = ref.nqf(hmm.M)
    assert t["rfv"].shape == (29, Q, 4) and t["tfv"].shape == (8 * Q, 4) and t["nj"] == 1
    assert np.array_equal(bits(np.asarray(om.rfv)).reshape(29, Q, 4), bits(t["rfv"]))
    assert np.array_equal(bits(np.asarray(om.tfv)).reshape(8 * Q, 4), bits(t["tfv"]))
    k = np.arange(Q)[:, None] + 1 + np.arange(4)[None, :] * Q
    assert (t["rfv"][:, k > hmm.M] == 0).all() and (t["tfv"][7 * Q:][k >= hmm.M] == 0).all()
    assert tables.exactness_conditions() is None and tables.tbm_min > 0
    # the Forward gate reads them from pyhmmer's profile (a libhmmer model costs 20x more)
    mine = ref.ForwardTables.from_optimized(om)
    assert (mine.M, mine.Q) == (tables.M, tables.Q) and mine.nj == tables.nj == 1
    assert bits(mine.xe_move) == bits(tables.xe_move) == bits(mine.xe_loop) == bits(tables.xe_loop) == bits(0.5)
    assert np.array_equal(bits(mine.rfv), bits(tables.rfv)) and np.array_equal(bits(mine.tfv), bits(tables.tfv))
    assert bits(mine.tbm_min) == bits(tables.tbm_min)


# ------------------------------------------------------------------------------------------
# the CPU reference against libhmmer
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_cpu_reference_equals_libhmmer_on_the_proteome(name, proteome):
    """Every target of the sample proteome (2,100 real proteins), score and every special-state
    row bit for bit, in both floating-point modes; the homologs rescale."""
    with HmmerModel(sample_hmm(name)) as model:
        tables = ref.ForwardTables.from_hmmer(model)
        results = [compare(model, tables, proteome.codes(i)) for i in range(proteome.n)]
    flags = np.array([r.flags for r in results])
    rescaled = sum(r.scales.size > 0 for r in results)
    assert not (flags & ref.HOST).any()
    assert rescaled >= (0 if name == "Thioesterase" else 1)
    if name in ("PF02826", "KR"):  # homologs whose N state goes subnormal after many rescalings
        assert (flags & ref.TINY_ROWS).any()


def test_cpu_reference_equals_libhmmer_long_model(proteome):
    """A sampled model of M = 1203 (301 vectors) on every 7th protein and the 20 longest."""
    hmm = sampled_hmm(1203, 9)
    longest = np.argsort(-np.asarray(proteome.lengths), kind="stable")[:20]
    with HmmerModel(hmm) as model:
        tables = ref.ForwardTables.from_hmmer(model)
        for i in sorted(set(range(0, proteome.n, 7)) | set(longest.tolist())):
            compare(model, tables, proteome.codes(i))


@pytest.mark.parametrize("name", ["PF02826", "sampled"])
def test_cpu_reference_adversarial_targets(name):
    """Length 1, stops only (libhmmer: eslERANGE), all X, degenerate codes, gaps and missing
    data, a strong homolog repeated (many rescalings), 20,000 random residues, every code."""
    out = adversarial_results(name, compare)
    assert out["stop_only"].flags & ref.RANGE and out["stop_one"].flags & ref.RANGE
    assert out["consensus_x3"].scales.size > 0


def test_subnormal_rows_go_to_the_host():
    """150 '*' between residues: every M and D is 0 and the I cells decay to subnormals, which
    raises SUBNORMAL (libhmmer recomputes the target); the reference's values are still
    pyhmmer's."""
    hmm = sampled_hmm(18, 2)
    codes = np.concatenate([np.full(4, 3), np.full(150, 27), np.full(4, 5)]).astype(np.uint8)
    with HmmerModel(hmm) as model:
        mine = compare(model, ref.ForwardTables.from_hmmer(model), codes)
    assert mine.flags & ref.SUBNORMAL and mine.needs_host


@pytest.mark.parametrize("M,seed", [(1, 1), (2, 2), (5, 3), (18, 2), (101, 5)])
def test_score_targets_equal_libhmmer(M, seed):
    """The CPU Forward gate's scores (:func:`hmmgpu.cpu.fwdback.score_targets`, with tables read
    from pyhmmer's profile): libhmmer's bit for bit where the status is OK; the targets the
    flags send to the host are left undecided without a model (a '*'-only target: eslERANGE;
    150 '*' between residues: subnormal I cells) and are libhmmer's own with one."""
    from hmmgpu.stages.profiles import configured_profile
    from tests.gpu.fwdback_checks import fwd_case

    hmm, db = fwd_case(M, seed, n_random=6, max_len=60, homolog=3 * M, stops=True)
    tables = ref.ForwardTables.from_optimized(configured_profile(hmm).to_optimized())
    idx = np.arange(db.n)
    status, scores, recomputed = ref.score_targets(tables, db, idx)
    with HmmerModel(hmm) as model:
        expected = [model.forward_parser(db.codes(i))[:2] for i in idx]
        status2, scores2, recomputed2 = ref.score_targets(tables, db, idx, model)
    unsure = status == ref.STATUS_UNSURE
    assert recomputed == 0 and recomputed2 == unsure.sum() >= 1 and set(status2) <= {STATUS_OK, STATUS_RANGE}
    assert np.isnan(scores[unsure]).all() and (status[~unsure] == STATUS_OK).all()
    for j, (status_ref, sc) in enumerate(expected):
        assert status2[j] == status_ref
        if status_ref == STATUS_OK:
            assert bits(scores2[j]) == bits(sc)
            assert unsure[j] or bits(scores[j]) == bits(sc)
        else:
            assert unsure[j]


@settings(max_examples=60, deadline=None)
@given(M=st.integers(1, 130), seed=st.integers(1, 10 ** 6),
       codes=st.lists(st.integers(0, 28), min_size=1, max_size=250))
def test_cpu_reference_equals_libhmmer_generated(M, seed, codes):
    """Sampled models of any size (Q from 2, padding lanes, below and above the M >= 100 early
    exit) against arbitrary digital sequences (every code, gaps, stops, missing data)."""
    with HmmerModel(sampled_hmm(M, seed)) as model:
        compare(model, ref.ForwardTables.from_hmmer(model), np.array(codes, np.uint8))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(1, 10 ** 6), start=st.integers(0, 170), n=st.integers(1, 400))
def test_cpu_reference_equals_libhmmer_homolog_fragments(proteome, seed, start, n):
    """PF02826 against windows of its proteome homologs with random point changes (rescaled rows
    at varying places)."""
    rng = np.random.default_rng(seed)
    hits = [828, 1471, 112, 1210, 1327, 1616, 1121, 441]  # homologs of PF02826 in the proteome
    target = proteome.codes(hits[seed % len(hits)]).copy()
    window = target[start:start + n] if start < target.size else target
    window = window.copy()
    flips = rng.integers(0, window.size, max(1, window.size // 20))
    window[flips] = rng.integers(0, 20, flips.size)
    with HmmerModel(sample_hmm("PF02826")) as model:
        compare(model, ref.ForwardTables.from_hmmer(model), window)


# ------------------------------------------------------------------------------------------
# the kernel
# ------------------------------------------------------------------------------------------
_FLOAT_ARRAYS = {"row", "model_f", "tfv", "rfv", "pmove_by_length", "ploop_by_length", "out_rows", "out_scales", "out_xc",
                 "fwd_rows", "bwd_rows", "item_xf", "out_cells", "out_xn"}


#: Float values each parser kernel must be seen to compute (the check below found them).
_KERNEL_FLOATS = {
    "forward": {"sv", "xE", "xN", "xC", "xJ", "xB", "mpv", "dcv", "xEv", "l0", "l3", "shifted", "pmove", "d", "s"},
    "backward": {"xE", "xN", "xC", "xJ", "xB", "mpv", "dcv", "dpv", "xBv", "l0", "l3", "s01", "shifted", "pmove",
                 "tmmv", "ipv", "iv", "mcv", "rcp", "scale", "d", "s", "pm"},
    "decoding": {"sp", "bt", "et", "t", "njcp", "ploop"},
}
_KERNEL_FLOATS["forward_matrix"] = _KERNEL_FLOATS["forward"] | {"xe_move"}
_KERNEL_FLOATS["backward_matrix"] = _KERNEL_FLOATS["backward"] | {"xe_move"}


@pytest.mark.parametrize("kernel_name,storage", [("forward", "shared"), ("forward", "global"), ("backward", "shared"),
                                                 ("backward", "global"), ("decoding", None),
                                                 ("forward_matrix", "shared"), ("forward_matrix", "global"),
                                                 ("backward_matrix", "shared"), ("backward_matrix", "global")])
def test_kernel_source_rounds_every_float_operation(kernel_name, storage):
    """In the generated kernels of the parsers (Forward, Backward), of the full matrices and of
    the domain decoding no float value meets a plain ``*``, ``+``, ``-`` or ``/`` (which numba-cuda
    would be free to contract into a fused multiply-add): every float operation goes through
    fmul/fadd/fsub/fdiv (``__f*_rn``). The GPU tests check the PTX itself."""
    from hmmgpu.gpu.fwdback.backward_source import BwdSpec
    from hmmgpu.gpu.fwdback.decoding_source import DecodeSpec
    from hmmgpu.gpu.fwdback.matrix_source import BwdMatrixSpec, FwdMatrixSpec
    from hmmgpu.gpu.fwdback.source import FwdSpec

    specs = dict(forward=FwdSpec, backward=BwdSpec, forward_matrix=FwdMatrixSpec, backward_matrix=BwdMatrixSpec)
    spec = DecodeSpec() if kernel_name == "decoding" else specs[kernel_name](storage)
    tree = ast.parse(spec.source("cuda"))
    kernel = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "kernel")
    floats = {"xe_move", "xe_loop", "tbm_min", "F0", "F1", "FMIN", "ABSORB", "RESCALE_AT"}
    for node in ast.walk(kernel):  # names bound to float values: results of fmul/fadd/fdiv, float reads
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            v = node.value
            shuffled = (isinstance(v, ast.Call) and getattr(v.func, "attr", "") == "shfl_sync"
                        and getattr(v.args[1], "id", "") in floats)  # a float from another lane
            chosen = isinstance(v, ast.IfExp) and (getattr(v.body, "id", "") in floats or (
                isinstance(v.body, ast.Subscript) and getattr(v.body.value, "id", "") in _FLOAT_ARRAYS) or (
                isinstance(v.body, ast.Call) and getattr(v.body.func, "id", "") in ("fmul", "fadd", "fsub", "fdiv")))
            if (isinstance(v, ast.Call) and getattr(v.func, "id", "") in ("fmul", "fadd", "fsub", "fdiv")) or (
                    isinstance(v, ast.Subscript) and getattr(v.value, "id", "") in _FLOAT_ARRAYS) or (
                    isinstance(v, ast.Name) and v.id in floats) or shuffled or chosen:
                floats.add(node.targets[0].id)
    assert _KERNEL_FLOATS[kernel_name] <= floats, _KERNEL_FLOATS[kernel_name] - floats
    arithmetic = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)

    def is_float(side) -> bool:
        if isinstance(side, ast.Name):
            return side.id in floats
        if isinstance(side, ast.Subscript):
            return getattr(side.value, "id", "") in _FLOAT_ARRAYS
        if isinstance(side, ast.Call):
            return (getattr(side.func, "id", "") in ("fmul", "fadd", "fsub", "fdiv")
                    or getattr(side.func, "attr", "") == "float32")
        return False

    checked = 0
    for node in ast.walk(kernel):
        if isinstance(node, (ast.BinOp, ast.AugAssign)) and isinstance(node.op, arithmetic):
            operands = [node.left, node.right] if isinstance(node, ast.BinOp) else [node.target, node.value]
            assert not any(is_float(side) for side in operands), ast.unparse(node)
            checked += 1
    assert checked > (5 if kernel_name == "decoding" else 50)  # the integer index arithmetic
    assert "fma" not in spec.source("cuda")


def test_kernel_exact_under_simulator(tmp_path):
    """The kernel under numba's CUDA simulator (tests/gpu/fwdback_checks.py): sampled models with
    M = 18 and 101 and KR (M = 262) with two real homologs, every score and special-state row
    equal to libhmmer's, flags, final C and scale factors equal to the CPU reference's;
    rescaling, a range error, a subnormal fallback, rows in shared and in global memory,
    several targets per thread, chunks, two models in one batch, a target left to the host
    for its cost, and run by a job whose own cap (the own post-filter's) allows it."""
    stdout = run_simulated(ROOT / "tests" / "gpu" / "fwdback_checks.py", "simulator_fwd_checks", cache_dir=tmp_path)
    rows = simulated_rows(stdout)
    assert set(rows) == {"M18 shared", "M18 global, one group", "M18 chunked, global", "M18 chunked, shared", "M101",
                         "M18 + M101 in one batch", "KR", "M18, a costly target to the host"}, stdout
    assert rows["M18 shared"] == dict(n=7, host=2, rescaled=1, range=1, tiny_rows=0)
    assert rows["M18 global, one group"] == rows["M18 shared"]
    for storage in ("global", "shared"):
        chunked = rows[f"M18 chunked, {storage}"]
        assert chunked["chunks"] > 1 and chunked["storage"] == storage
        assert {k: chunked[k] for k in rows["M18 shared"]} == rows["M18 shared"]
    assert rows["M101"]["rescaled"] == 1 and rows["M101"]["host"] == 0
    batch = rows["M18 + M101 in one batch"]
    assert batch["models"] == 2 and batch["n"] + batch["host"] == 14 and batch["n"] >= 10
    assert rows["KR"] == dict(n=2, host=0, rescaled=2, range=0, tiny_rows=1)
    assert rows["M18, a costly target to the host"]["host"] == rows["M18 shared"]["host"] + 1


@pytest.mark.gpu
def test_kernel_exact_on_gpu(proteome):
    """On a GPU: the four pfam_samples models against every target of the sample proteome
    (2,100 real proteins), sampled models from M = 1 to 2600 with short targets, and a chunked
    database with a small scratch budget; every score and special-state row equals libhmmer's,
    flags, final C and scale factors the CPU reference's. The kernel's PTX holds no fused
    multiply-add and no flush-to-zero operation."""
    from hmmgpu.gpu.runtime import build
    from hmmgpu.gpu.runtime.context import cuda_available
    from hmmgpu.gpu.runtime.device import GpuDevice
    from hmmgpu.gpu.fwdback.source import FwdSpec
    from tests.gpu.fwdback_checks import check_forward, forward_stage, fwd_case

    if not cuda_available():
        pytest.skip("no CUDA GPU")
    device = GpuDevice.open(0)
    assert_rounded_ptx(build.numba_kernel(FwdSpec("shared"), device.lane_binding), "mul.rn.f32", "add.rn.f32",
                       "div.rn.f32")
    # every target on the GPU, the longest too (a search leaves those above
    # tuning.FWD_MAX_CELLS to pyhmmer; the kernel's exactness does not depend on it)
    stage = forward_stage(proteome, max_cells=1 << 40)
    for name in MODEL_NAMES:
        report = check_forward(stage, sample_hmm(name), proteome)
        print(name, report)
        assert report["n"] == proteome.n and report["host"] == 0 and "not_run" not in report
    for M, seed in ((1, 1), (2, 2), (5, 3), (99, 4), (100, 5), (400, 6), (2600, 7)):
        hmm, db = fwd_case(M, seed, n_random=30, max_len=400, homolog=3 * M, stops=True)
        print(M, check_forward(forward_stage(db), hmm, db))
        report = check_forward(forward_stage(db, max_bytes=4000, scratch_bytes=48 * ref.nqf(M) * 3,
                                             storage="global"), hmm, db)
        print(M, "chunked", report)



def test_gate_batches_grow_to_their_size(monkeypatch):
    """The first Forward gate batches are smaller, doubling from FWD_GATE_FIRST_TARGETS up to
    FWD_GATE_TARGETS (the post-filter's threads wait for the first batch's passers); with
    hmmgpu's own post-filter up to FWD_GATE_TARGETS_OWN_POSTFILTER, and the passers of the first,
    smaller batches are declined (pyhmmer's pipeline takes them), of the full ones taken."""
    from types import SimpleNamespace

    from hmmgpu.gpu.cascade import GpuCascade
    from hmmgpu.gpu.runtime import tuning

    monkeypatch.setattr(tuning, "FWD_GATE_FIRST_TARGETS", 512)
    monkeypatch.setattr(tuning, "FWD_GATE_TARGETS", 4096)
    sizes = [GpuCascade._gate_batch_targets(SimpleNamespace(_gate_batches=k), False) for k in (0, 1, 2, 3, 4, 40)]
    assert sizes == [512, 1024, 2048, 4096, 4096, 4096]
    monkeypatch.setattr(tuning, "FWD_GATE_TARGETS_OWN_POSTFILTER", 4096 * 4)
    monkeypatch.setattr(tuning, "DEFINE_BACKLOG_PASSERS", 6000)
    own = [GpuCascade._gate_batch_targets(SimpleNamespace(_gate_batches=k), True) for k in (0, 1, 4, 5, 40)]
    assert own == [512, 1024, 8192, 16384, 16384]
    import threading

    cascade = SimpleNamespace(_lock=threading.Lock(), _backlog=0, decoding_counts={"declined": 0})
    assert not GpuCascade.take_definitions(cascade, 100, full=False) and cascade.decoding_counts["declined"] == 100
    assert GpuCascade.take_definitions(cascade, 100) and cascade._backlog == 100


@pytest.mark.parametrize("segments", [1, 2, 4, 8])
def test_segmented_launch_fits_the_shared_memory_it_claims(monkeypatch, segments):
    """On the GPUs whose kernels ship (an H100 or H200), the parsers' segmented launch for the
    largest model :meth:`ForwardStage._shared_q` admits takes at most the shared memory a block may
    opt in to (less the 1 KB the driver keeps), one vector more would not fit, every Pfam model
    (up to about 2,700 nodes: 675 vectors) is admitted at the shipped segment count, and a grid
    has no more blocks than its targets fill or than the multiprocessors hold."""
    from types import SimpleNamespace

    from hmmgpu.gpu.fwdback.launch import ForwardStage, segmented_launch
    from hmmgpu.gpu.prebuilt_kernels import TARGETS
    from hmmgpu.gpu.runtime import tuning

    device = TARGETS[0]
    monkeypatch.setattr(tuning, "FWD_SEGMENTS", segments)
    q = ForwardStage._shared_q(SimpleNamespace(storage=None, device=device))
    room = device.smem_per_block_optin - 1024
    assert segmented_launch(device, segments, 10, q)[2] <= room < segmented_launch(device, segments, 10, q + 1)[2]
    if segments == 8:
        assert q >= 675
    for items in (1, 7, 10 ** 6):
        blocks, block, shared, group_floats, threads = segmented_launch(device, segments, items, 100)
        per_block = block // (4 * segments)
        assert threads == blocks * block and shared == 4 * group_floats * per_block
        assert 1 <= blocks <= min(-(-items // per_block), device.sm_count * 32)
