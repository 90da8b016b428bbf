"""The kernels shipped compiled (hmmgpu.gpu.prebuilt_kernels): current, used on a fresh sm_90
machine without compiling (a Pfam search, --postfilter hmmgpu's domain definition, hmmgpu sw),
and ignored once they no longer match the code."""
import dataclasses
import gzip
import json
from types import SimpleNamespace

import pytest

from hmmgpu.errors import HmmgpuError
from hmmgpu.gpu import cascade, domaindef, prebuilt_kernels
from hmmgpu.gpu.bias import BiasSpec
from hmmgpu.gpu.msv.launch import MsvKernels
from hmmgpu.gpu.runtime import build
from hmmgpu.gpu.sw import launch
from hmmgpu.gpu.sw.source import SwSpec
from hmmgpu.gpu.vit.launch import VitKernels

#: A GPU of the shipped kind, as build sees one (nothing here opens a device).
SM90 = SimpleNamespace(cc=(9, 0), lane_binding="dpx", simulator=False)
#: An H100 or H200 as the driver describes it (nothing here opens a device).
H100 = prebuilt_kernels.TARGETS[0]
#: The lengths of the 20 classic CUDASW++ queries (41,752 residues: the benchmark's cold run).
CLASSIC_LENGTHS = (144, 189, 222, 375, 464, 567, 657, 729, 850, 1000, 1500, 2005, 2504, 3005, 3564, 4061, 4548,
                   4743, 5147, 5478)


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    """A fresh machine's kernel cache."""
    monkeypatch.setenv("HMMGPU_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_every_shipped_kernel_matches_the_code():
    stale = [f"{s.name}_{b}.sm{cc[0]}{cc[1]}" for s, b, cc in prebuilt_kernels.stale()]
    assert not stale, (f"shipped kernels missing or out of date: {stale}; "
                       "run `python3 -m hmmgpu.gpu.prebuilt_kernels` (no GPU needed) and commit hmmgpu/gpu/prebuilt")


def test_a_fresh_sm90_machine_compiles_no_kernel_for_sw(empty_cache):
    assert launch.compile_for(CLASSIC_LENGTHS, SM90) == 0
    assert not empty_cache.exists() or not list(empty_cache.rglob("*.cubin"))


@pytest.mark.parametrize("lanes", ["auto", "8x4"])
def test_a_fresh_sm90_machine_compiles_no_kernel_for_a_search(empty_cache, lanes):
    """Models of every length the GPU shapes take (Pfam's longest has about 2,000 nodes), the
    own post-filter's kernels included (its decodings' and its domain definition's)."""
    msv, vit = MsvKernels(H100, lanes), VitKernels(H100)
    specs = cascade.needed_specs(msv, vit, range(1, 4097)) + cascade.all_specs(H100, lanes)
    specs += domaindef.kernel_specs()
    assert len({s.name for s in specs if s.name.startswith("msv_")}) == (20 if msv.lanes == "16x2" else 17)
    assert [s.name for s in build.missing(specs, H100)] == []  # what a search would compile first


def test_a_kernels_key_holds_the_hmmgpu_modules_its_module_imports():
    names = lambda spec: [p.name for p in build.imported_modules(spec.source("dpx"))]  # noqa: E731
    assert names(SwSpec(16, 6)) == ["lanes.py", "warp.py"]
    assert names(BiasSpec()) == ["lanes.py", "warp.py", "rounding.py"]  # its float helpers are compiled in
    text = "from hmmgpu.gpu.runtime import lanes, warp as w\nfrom hmmgpu.gpu import bias as _b\nimport hmmgpu.constants\n"
    assert [str(p.relative_to(build.SHIPPED_DIR.parents[2])) for p in build.imported_modules(text)] == [
        "hmmgpu/gpu/runtime/lanes.py", "hmmgpu/gpu/runtime/warp.py", "hmmgpu/gpu/bias.py", "hmmgpu/constants.py"]
    assert build.helpers_digest(BiasSpec(), "dpx") != build.helpers_digest(SwSpec(16, 6), "dpx")


def _ship(path, header, image=b"\x7fELF-not-a-real-cubin"):
    """Write a shipped file (and forget what build read before: a file rewritten within the
    file system's clock tick could look unchanged)."""
    with gzip.open(path, "wb") as f:
        f.write(json.dumps(header).encode() + b"\n" + image)
    build._read_shipped.cache_clear()


def test_a_shipped_kernel_is_used_only_while_its_digests_match(tmp_path, monkeypatch, empty_cache):
    monkeypatch.setattr(build, "SHIPPED_DIR", tmp_path / "shipped")
    build.SHIPPED_DIR.mkdir()
    spec = SwSpec(16, 6)
    path = build.shipped_path(spec, "dpx", (9, 0))
    good = dict(entry="kernel", kinds=["int32"], **build.shipped_header(spec, "dpx"))
    _ship(path, good)
    assert build.shipped(spec, "dpx", (9, 0)) == (good, b"\x7fELF-not-a-real-cubin")
    assert build.missing([spec], SM90) == []
    assert build.missing([spec], SimpleNamespace(cc=(8, 0), lane_binding="swar", simulator=False)) == [spec]
    for stale in ({"source": "0" * 20}, {"helpers": "0" * 20}):
        _ship(path, {**good, **stale})
        assert build.shipped(spec, "dpx", (9, 0)) is None
        assert build.missing([spec], SM90) == [spec]


@dataclasses.dataclass
class _Driver:
    """A driver that loads any image (returns it with the entry), or refuses the shipped one."""

    refuses_shipped: bool

    def load_kernel(self, image, entry, kinds):
        if self.refuses_shipped and image == b"shipped":
            raise HmmgpuError("CUDA driver: cuModuleLoadData failed with CUDA_ERROR_INVALID_IMAGE")
        return image, entry


@dataclasses.dataclass(frozen=True)
class _Device:
    runtime: _Driver = dataclasses.field(compare=False)
    cc: tuple = (9, 0)
    lane_binding: str = "dpx"
    simulator: bool = False
    id: int = 0


@pytest.mark.parametrize("refused", [False, True])
def test_a_shipped_kernel_is_loaded_or_else_compiled_here(tmp_path, monkeypatch, empty_cache, refused):
    monkeypatch.setattr(build, "SHIPPED_DIR", tmp_path / "shipped")
    build.SHIPPED_DIR.mkdir()
    spec = SwSpec(16, 10)
    _ship(build.shipped_path(spec, "dpx", (9, 0)),
          dict(entry="shipped", kinds=[], **build.shipped_header(spec, "dpx")), b"shipped")
    compiled = []

    def compile_here(job):  # as _compile_one exports a kernel numba compiled on the device
        spec, binding, _, cc = job
        compiled.append(spec)
        header = dict(entry="compiled", kinds=[], source=build._source_digest(spec, binding))
        build._export_path(spec, SimpleNamespace(cc=cc, lane_binding=binding)).write_bytes(
            json.dumps(header).encode() + b"\n" + b"compiled")

    monkeypatch.setattr(build, "_compile_one", compile_here)
    kernel = build._driver_kernel.__wrapped__(spec, _Device(_Driver(refused)))
    assert kernel == ((b"compiled", "compiled") if refused else (b"shipped", "shipped"))
    assert compiled == ([spec] if refused else [])


@pytest.mark.parametrize("cc, ready", [((9, 0), True), ((8, 0), False), (None, False)])
def test_auto_counts_a_gpu_with_shipped_kernels_as_warm(empty_cache, monkeypatch, cc, ready):
    """An H100's cache stays empty (shipped kernels are loaded, not exported), yet its searches
    compile nothing: ``auto`` must not price in compiling there (``None``: no GPU)."""
    from hmmgpu.gpu.runtime import context

    monkeypatch.setattr(context, "compute_capability", lambda device=0: cc)
    assert build.any_compiled() is ready


@pytest.mark.gpu
def test_a_fresh_sm90_gpu_process_defines_domains_with_the_shipped_kernels(empty_cache):
    """On an H100 or H200 with an empty kernel cache: ``--postfilter hmmgpu`` on the four sample
    models and the sample proteome, its F3 passers defined in the GPU process, which compiles
    no kernel and never imports numba's CUDA target."""
    import pyhmmer

    from hmmgpu.formats.seqdb import SequenceDB
    from hmmgpu.gpu.process import CudaProcessBackend
    from hmmgpu.gpu.runtime.context import compute_capability
    from hmmgpu.options import SearchOptions
    from hmmgpu.search.engine import SearchEngine
    from tests.helpers import PROTEOME, SAMPLES

    if compute_capability(0) != H100.cc:
        pytest.skip("no GPU of the shipped kernels' architecture")
    with pyhmmer.plan7.HMMFile(SAMPLES / "samples.hmm") as fh:
        hmms = list(fh)
    db = SequenceDB.from_fasta(PROTEOME)
    backend = CudaProcessBackend(db)
    try:
        backend.prepare_for([h.M for h in hmms])
        results = list(SearchEngine(db, SearchOptions.from_kwargs(backend="cuda", postfilter="hmmgpu", cpus=4),
                                    backend).search(hmms))
        details = backend.details()
    finally:
        backend.close()
    assert sum(len(result.hits) for result in results) > 0
    assert details["decoding"]["defined"] > 0, details
    assert details["numba_cuda_imported"] is False, details
    assert not empty_cache.exists() or not list(empty_cache.rglob("*.cubin"))
