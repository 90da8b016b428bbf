"""Smith-Waterman on a real GPU (``pytest -m gpu``): every score against pyopal on the shared
real proteins, the lane helpers, saturated pairs rescored exactly, a 35,000-residue query,
and the CLI on the GPU."""
import numpy as np
import pytest

from sw_kernel_checks import check, make_db, parasail_scores, tiny_case

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", autouse=True)
def _gpu():
    from hmmgpu.gpu.runtime.context import cuda_available, simulator_enabled

    if simulator_enabled() or not cuda_available():
        pytest.skip("no CUDA GPU")


def test_lane_helpers_on_device():
    from numba import cuda

    from hmmgpu.gpu.runtime import lanes

    rng = np.random.default_rng(1)
    a, b, c = (rng.integers(0, 1 << 32, 100_000, dtype=np.uint64).astype(np.uint32) for _ in range(3))
    for binding in ("dpx", "swar"):
        L = lanes.helpers(binding)
        m3, lo, hi = L.max3relu16, L.lo16s, L.hi16s

        @cuda.jit
        def k(a, b, c, out):
            i = cuda.grid(1)
            if i < a.size:
                out[0, i] = m3(a[i], b[i], c[i])
                out[1, i] = lo(a[i], b[i])
                out[2, i] = hi(a[i], b[i])

        out = np.zeros((3, a.size), np.uint32)
        k[(a.size + 255) // 256, 256](a, b, c, out)
        for j, f in enumerate((lanes.py_max3relu16, lanes.py_lo16s, lanes.py_hi16s)):
            idx = np.arange(0, a.size, 97)
            ref = [f(x, y, z) if j == 0 else f(x, y) for x, y, z in zip(a[idx], b[idx], c[idx])]
            assert np.array_equal(out[j, idx], np.array(ref, np.uint32)), (binding, j)


def test_every_shape_small_cases():
    from hmmgpu.gpu.runtime import tuning
    from hmmgpu.gpu.sw.launch import GpuScanner
    from hmmgpu.sw.matrices import load

    q, db = tiny_case(4, 300, 400, 300)
    for shape in tuning.SW_SHAPES:
        check(GpuScanner(db, load("BLOSUM62"), 11, 1, shape=shape), [q, q[:37], q[:1]], db)


def test_real_proteins_every_score(shared_data):
    """Three queries (one tiled) against all 77,801 real proteins: every score equals pyopal's."""
    from hmmgpu.gpu.sw.launch import GpuScanner
    from hmmgpu.formats.seqdb import SequenceDB
    from hmmgpu.sw.cpu import CpuScanner
    from hmmgpu.sw.matrices import load

    db = SequenceDB.from_fasta(shared_data / "seqs" / "public_proteins.fa.gz")
    m = load("BLOSUM62")
    gpu = GpuScanner(db, m, 11, 1)
    cpu = CpuScanner(db, m, 11, 1)
    order = np.argsort(db.lengths)
    queries = [db.codes(int(order[db.n // 2])), db.codes(int(order[-50])), db.codes(int(order[10]))]
    for q, got in zip(queries, gpu.scores_many(queries)):
        ref = cpu.scores(q)
        bad = np.flatnonzero(got != ref)
        assert bad.size == 0, f"{bad.size} of {db.n} scores differ, e.g. {got[bad[0]]} vs {ref[bad[0]]}"


def test_saturated_pairs_rescored_exactly():
    """Scores above 32,767 (long identical pairs): flagged on the GPU, exact after rescoring."""
    from hmmgpu.gpu.sw.launch import GpuScanner
    from hmmgpu.sw.cpu import rescorer
    from hmmgpu.sw.matrices import load

    rng = np.random.default_rng(9)
    q = rng.integers(0, 20, 7000).astype(np.uint8)
    seqs = [q, q[::-1].copy(), np.concatenate([q[:3000], q[3100:]]), rng.integers(0, 20, 5000).astype(np.uint8),
            np.tile(np.array([18], np.uint8), 4000)]
    db = make_db(seqs)
    sc = GpuScanner(db, load("BLOSUM62"), 11, 1, rescore=rescorer(db, load("BLOSUM62"), 11, 1))
    got = sc.scores_many([q, np.tile(np.array([18], np.uint8), 3500)])
    assert sc.last["saturated"] >= 2
    assert np.array_equal(got[0], parasail_scores(q, db, "BLOSUM62", 11, 1))
    assert got[1][4] == 3500 * 11


def test_35000_residue_query():
    from hmmgpu.gpu.sw.launch import GpuScanner
    from hmmgpu.sw.cpu import CpuScanner
    from hmmgpu.sw.matrices import load

    rng = np.random.default_rng(35)
    q = rng.integers(0, 20, 35000).astype(np.uint8)
    seqs = [rng.integers(0, 29, int(n)).astype(np.uint8) for n in rng.integers(1, 3000, 300)]
    seqs += [q[1000:2500].copy(), q[30000:].copy()]
    db = make_db(seqs)
    m = load("BLOSUM62")
    got = GpuScanner(db, m, 11, 1).scores_many([q])[0]
    assert np.array_equal(got, CpuScanner(db, m, 11, 1).scores(q))


def test_api_gpu_equals_cpu(shared_data):
    import hmmgpu.sw as sw
    from hmmgpu.formats.seqdb import SequenceDB

    db = SequenceDB.from_fasta(shared_data / "seqs" / "public_proteins.fa.gz")
    qs = [("a", db.codes(100)), ("b", db.codes(5000))]
    g = sw.search(qs, db, backend="cuda", max_hits=50)
    c = sw.search(qs, db, backend="cpu", max_hits=50)
    for x, y in zip(g, c):
        assert x.to_frame().equals(y.to_frame())


def test_batched_real_proteins_every_score(shared_data):
    """40 real proteins (the longest tiled) in batches of 1 to 8 over two streams (batches of one
    query on alternate streams, queued before the last is waited for): every score equals
    pyopal's, and the per-query call's; the command's pipeline gives the CPU route's hits."""
    import hmmgpu.sw as sw
    from hmmgpu.formats.seqdb import SequenceDB
    from hmmgpu.gpu.sw.batches import by_index
    from hmmgpu.gpu.sw.launch import GpuScanner
    from hmmgpu.sw.cpu import CpuScanner, rescorer
    from hmmgpu.sw.matrices import load

    db = SequenceDB.from_fasta(shared_data / "seqs" / "public_proteins.fa.gz")
    m = load("BLOSUM62")
    order = np.argsort(db.lengths)
    picks = [int(order[i]) for i in np.linspace(10, db.n - 1, 40).astype(int)]
    queries = [np.asarray(db.codes(i)) for i in picks]
    assert max(q.size for q in queries) > 704  # tiled
    gpu = GpuScanner(db, m, 11, 1, rescore=rescorer(db, m, 11, 1), streams=2)
    plan = [(0, 1), (1, 2), (2, 3), (3, 11), (11, 12), (12, 20), (20, 21), (21, 40)]
    got = [None] * len(queries)
    for batch in gpu.batches(queries, plan=plan):
        for r, row in enumerate(by_index(batch, db.n)):
            got[batch.start + r] = row
    cpu = CpuScanner(db, m, 11, 1)
    for q, g in zip(queries, got):
        ref = cpu.scores(q)
        bad = np.flatnonzero(g != ref)
        assert bad.size == 0, f"{bad.size} of {db.n} scores differ, e.g. {g[bad[0]]} vs {ref[bad[0]]}"
    for q, g in zip(queries[:5], got[:5]):
        assert np.array_equal(gpu.scores_many([q])[0], g)
    named = [(f"p{i}", q) for i, q in zip(picks[::8], queries[::8])]
    on_gpu = sw.search(named, db, backend="cuda", max_hits=20)
    for x, y in zip(on_gpu, sw.search(named, db, backend="cpu", max_hits=20)):
        assert x.to_frame().equals(y.to_frame())
