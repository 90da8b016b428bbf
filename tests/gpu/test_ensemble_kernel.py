"""The stochastic-trace ensemble kernel (hmmgpu.gpu.ensemble) bit for bit against the CPU
reference of ``region_trace_ensemble``'s sampling (tests/gpu/ensemble_checks.py): under numba's
CUDA simulator, and on a GPU (``pytest -m gpu``); and the rounding of its source."""
import ast
from pathlib import Path

import numpy as np
import pyhmmer
import pytest

from hmmgpu.cpu.hmmerlib import libhmmer_available
from tests.helpers import assert_rounded_ptx, run_simulated, simulated_rows

pytestmark = pytest.mark.skipif(not libhmmer_available(), reason="pyhmmer's bundled libhmmer is unavailable")
ROOT = Path(__file__).resolve().parents[2]

_FLOAT_ARRAYS = {"dp", "xmx", "tfv", "rfv", "item_xf", "work", "acc", "uniforms", "null2", "lanes",
                 "dpr", "xr", "tr", "rr", "wr", "ar"}  # the last six: a region's slices of dp, xmx, tfv, rfv, work, acc
_ROUNDED = {"fmul", "fadd", "fsub", "fdiv", "dadd", "dmul", "ddiv", "rcp_double", "flushed", "ftz_path"}
#: Float parameters of the module's device functions.
_FLOAT_PARAMS = {"v", "s", "c", "a", "b", "roll", "p0", "p1", "p2", "p3", "a0", "b0", "a1", "b1", "c1", "a2", "b2",
                 "a3", "b3"}


def test_kernel_source_rounds_every_float_operation():
    """No float value of the kernel or its device functions meets a plain ``*``, ``+``, ``-``
    or ``/`` (numba-cuda would be free to fuse them): every float operation goes through the
    rounding helpers (``__f*_rn``, ``__d*_rn``). The GPU test checks the PTX itself."""
    from hmmgpu.gpu.ensemble.source import EnsembleSpec

    source = EnsembleSpec().source("cuda")
    assert "fma" not in source
    tree = ast.parse(source)
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert {"kernel", "step_choice", "ftz_choice", "pick", "kahan"} <= {f.name for f in functions}
    floats = {"F0", "F1", "HALF", "QUARTER", "FMIN", "D0", "e_move", "e_loop", "n_move", "j_move", "j_loop",
              "c_loop"} | _FLOAT_PARAMS
    for _ in range(3):  # names bound to float values, to a fixed point
        for fn in functions:
            for node in ast.walk(fn):
                if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                    v = node.value
                    if (isinstance(v, ast.Call) and getattr(v.func, "id", "") in _ROUNDED) or (
                            isinstance(v, ast.Subscript) and getattr(v.value, "id", "") in _FLOAT_ARRAYS) or (
                            isinstance(v, ast.Name) and v.id in floats) or (
                            isinstance(v, ast.IfExp) and getattr(v.body, "id", "") in floats):
                        floats.add(node.targets[0].id)
    assert {"norm", "term", "total", "total_ftz", "dnorm", "o0", "o19", "wq", "y", "t", "d", "c2", "m1"} <= floats

    def is_float(side) -> bool:
        if isinstance(side, ast.Name):
            return side.id in floats
        if isinstance(side, ast.Subscript):
            return getattr(side.value, "id", "") in _FLOAT_ARRAYS
        return isinstance(side, ast.Call) and getattr(side.func, "id", "") in _ROUNDED

    checked = 0
    arithmetic = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)
    for fn in functions:
        for node in ast.walk(fn):
            if isinstance(node, (ast.BinOp, ast.AugAssign)) and isinstance(node.op, arithmetic):
                operands = [node.left, node.right] if isinstance(node, ast.BinOp) else [node.target, node.value]
                assert not any(is_float(side) for side in operands), ast.unparse(node)
                checked += 1
    assert checked > 50  # the integer index arithmetic


def test_ensemble_kernel_under_simulator(tmp_path):
    """Sampled models of 5, 12 and 30 nodes with tandem-repeat targets, their clustered regions
    and the shortest clustered region of PF02826's hits in the sample proteome, in one launch: the sampled pairs, the null2 sums (acc bits), the draws and the flush-to-zero
    flag equal the CPU reference's, and so do the finished regions (n2sc, envelopes, flags);
    two of them beside copies of all six scaled near the subnormal range, in one launch: the
    flags are raised alike, on two copies only; regions the kernel leaves (a short table of draws, a small pair buffer,
    a matrix beyond its 32-bit offsets) come out right from the CPU reference; three targets' domain definitions, of two models,
    with the GPU stages in one call of the driver (both models' regions and envelopes in the
    same launches: ensembles and envelope decoding + OA by the kernels) equal the CPU stages'
    and libhmmer's; matrices with no path stop the kernel (NaN: FATAL, as Easel aborts; all
    zero: FATAL or OUTSIDE)."""
    stdout = run_simulated(ROOT / "tests" / "gpu" / "ensemble_checks.py", "simulator_ensemble_checks", cache_dir=tmp_path)
    rows = simulated_rows(stdout)
    sampled = rows["sampled models"]
    assert sampled["models"] == 4 and sampled["regions"] >= 6 and sampled["left"] == 0, sampled
    assert sampled["sampled"] == sampled["regions"] and sampled["pairs"] >= 1500
    assert rows["results"]["envelopes"] >= 3 and rows["results"]["cpu_regions"] == 0   # every region on the kernel
    split = rows["results split"]   # the longest regions sampled by the CPU reference beside the launch
    assert split["cpu_regions"] == split["split"] >= 1 and split["envelopes"] == rows["results"]["envelopes"], split
    tiny = rows["subnormal cells"]
    assert tiny["ftz"] == 2 and tiny["sampled"] == tiny["regions"] == 8, tiny
    left = rows["left to the host"]
    assert left["exhausted"] == 2 and left["full"] == 2, left
    beyond = rows["beyond offsets"]   # a region past the kernel's 32-bit offsets: the CPU reference's
    assert beyond["large"] == beyond["beyond"] == beyond["cpu_regions"] >= 1, beyond
    batched = rows["define_domains"]
    assert batched["targets"] == 3 and batched["nclustered"] == 3 and batched["envelopes"] == 4, batched
    assert rows["no path"] == dict(nan=True, zero=True)


def test_split_by_cost_moves_the_longest_regions_while_it_pays():
    """The cost model of the kernel/CPU split: the long tail moves to the CPU, longest first,
    until the pool's share passes the kernel's; regions of one length move together or stay on
    the kernel together (moving one would not shorten the launch: a database holding a protein
    several times, as the 116 M residue benchmark's four copies, has its longest regions so, and
    moving them one at a time once left every region to the kernel); no threads, nothing moves."""
    from hmmgpu.gpu.ensemble.stages import split_by_cost

    lengths = [300] * 500 + [5000, 2000, 900]
    assert split_by_cost(lengths, 8, 24) == [500, 501, 502]
    assert split_by_cost([300] * 500, 8, 24) == []
    assert split_by_cost([100, 5000], 1, 24) == [1]
    assert split_by_cost([100, 5000], 1, 0.01) == []   # a kernel step as cheap as the reference's: nothing moves
    assert split_by_cost(lengths, 0, 24) == []
    copies = [300] * 500 + [5000] * 4 + [2000] * 4
    assert split_by_cost(copies, 8, 24) == [500, 501, 502, 503, 504, 505, 506, 507]
    assert split_by_cost([5000] * 4 + [300] * 500, 8, 24) == [0, 1, 2, 3]


@pytest.mark.gpu
def test_ensemble_kernel_on_gpu(tmp_path):
    """On a GPU: every clustered region (up to two a target) of the four sample models' hits
    in the sample proteome, of tandem targets of those models and of sampled models of 5 to
    400 nodes, in one launch, equal to the CPU reference (pairs, null2 sums, draws, flags), the
    finished regions too, and again with subnormal cells. The kernel's PTX holds no fused
    multiply-add and no flush-to-zero operation."""
    from hmmgpu.gpu.ensemble.source import EnsembleSpec
    from hmmgpu.gpu.runtime import build
    from hmmgpu.gpu.runtime.context import cuda_available
    from hmmgpu.gpu.runtime.device import GpuDevice
    from tests.gpu.ensemble_checks import gpu_ensemble_checks

    if not cuda_available():
        pytest.skip("no CUDA GPU")
    binding = GpuDevice.open(0).lane_binding
    assert_rounded_ptx(build.numba_kernel(EnsembleSpec(), binding), "mul.rn.f32", "add.rn.f32", "div.rn.f32",
                       "div.rn.f64", "mul.rn.f64")
    rows = dict(gpu_ensemble_checks())
    print(rows)
    assert rows["regions"]["sampled"] == rows["regions"]["regions"] >= 100
    assert rows["results split"]["cpu_regions"] == rows["results split"]["split"] >= 1
    assert rows["subnormal cells"]["ftz"] >= 1


def test_flagged_regions_are_not_sampled_when_asked():
    """``sample_flagged=False`` (the GPU process: a flagged region's target goes to pyhmmer's
    pipeline whatever its ensemble): a region whose matrix is flagged gets no envelope, null2
    scores 0 over its residues and the matrix's flags, without any sampler running."""
    from hmmgpu.gpu.ensemble.launch import RegionRequest
    from hmmgpu.gpu.ensemble.stages import region_ensembles
    from hmmgpu.stages.forward import RANGE, SUBNORMAL

    requests = [RegionRequest(matrix=None, tables=None, xf=None, codes=np.zeros(40, np.uint8), i=i, j=j)
                for i, j in ((3, 12), (20, 40))]
    counts = {}
    got = region_ensembles(requests, [SUBNORMAL, RANGE], sample_flagged=False, counts=counts)
    assert [r.flags for r in got] == [SUBNORMAL, RANGE]
    assert [r.n2sc.size for r in got] == [10, 21] and not any(r.n2sc.any() for r in got)
    assert [len(r.envelopes) for r in got] == [0, 0]
    assert counts["regions"] == 2 and counts["cpu_regions"] == 0


def test_compile_host_code_compiles_the_sampler_a_region_calls():
    """:func:`hmmgpu.gpu.domaindef.compile_host_code` (after its children's compile into numba's
    cache, :func:`~hmmgpu.gpu.domaindef.compile_host_code_aside`) leaves the CPU sampler compiled for the
    argument types :func:`hmmgpu.cpu.stotrace.trace_ensemble` gives it from a region's matrix
    as the GPU stages copy it back (cells [Lr+1][3][Q][4] in one array), so that the first
    region the GPU process samples on the CPU does not compile it."""
    import numba

    from hmmgpu.cpu import stotrace
    from hmmgpu.cpu.fwdback import special_transitions
    from hmmgpu.gpu.domaindef import compile_host_code, compile_host_code_aside
    from hmmgpu.stages.forward import ForwardTables
    from hmmgpu.stages.profiles import configured_profile

    assert compile_host_code_aside()  # both parts compiled (or loaded) in child processes
    compile_host_code()
    hmm = pyhmmer.plan7.HMM.sample(pyhmmer.easel.Alphabet.amino(), 30, pyhmmer.easel.Randomness(3))
    tables = ForwardTables.from_optimized(configured_profile(hmm).to_optimized())
    dp = np.array(np.zeros(7 * 3 * tables.Q * 4, np.float32)).reshape(7, 3, tables.Q, 4)
    args = stotrace._sampler_arguments(stotrace.uniform_table(42, 16), dp, np.zeros((7, 6), np.float32), tables,
                                       special_transitions(tables, 50), np.zeros(6, np.uint8), 4, stotrace.NSAMPLES)
    assert tuple(numba.typeof(a) for a in args) in stotrace._ensemble.signatures


def test_choice_without_division_equals_the_quotients():
    """``pick`` decides ``roll < total / norm`` from ``roll norm`` wherever the product is clear
    of ``total`` by more than rounding can move it: on draws at, just beside and far from every
    quotient of random normalised paths (ties and neighbours of the rounded quotient included),
    its choice is esl_rnd_FChoose's own, by the double divisions."""
    from hmmgpu.gpu.ensemble.source import module_lines

    space = {}
    exec("import numpy as np\n" + "\n".join(module_lines("python")), space)
    pick = space["pick"]

    def fchoose(roll, p):
        norm = 0.0
        for v in p:
            norm += float(v)
        total = 0.0
        for z, v in enumerate(p):
            total += float(v)
            if roll < total / norm:
                return z
        return -1

    rng = np.random.default_rng(7)
    checked = 0
    for _ in range(400):
        n = int(rng.choice([2, 4]))
        p = (rng.random(n) ** rng.integers(1, 30)).astype(np.float32)
        p = (p / np.float32(p.sum())).astype(np.float32) if p.sum() > 0 else np.full(n, 1 / n, np.float32)
        padded = list(p) + [np.float32(0)] * (4 - n)
        norm, total, edges = 0.0, 0.0, []
        for v in p:
            norm += float(v)
        for v in p:
            total += float(v)
            edges.append(total / norm)
        for edge in edges:
            for roll in (edge, np.nextafter(edge, 0.0), np.nextafter(edge, 2.0), edge * (1 - 2 ** -49),
                         rng.random()):
                if 0.0 <= roll < 1.0:
                    assert pick(np.float64(roll), n, *padded) == fchoose(roll, p), (roll, p)
                    checked += 1
    assert checked > 3000
