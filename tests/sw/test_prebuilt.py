"""The kernels shipped compiled (hmmgpu.gpu.sw.prebuilt): current, used on a fresh sm_90
machine without compiling, and ignored once they no longer match the code."""
import dataclasses
import gzip
import json
from types import SimpleNamespace

import pytest

from hmmgpu.errors import HmmgpuError
from hmmgpu.gpu.runtime import build
from hmmgpu.gpu.sw import launch, prebuilt
from hmmgpu.gpu.sw.source import SwSpec

#: A GPU of the shipped kind, as build sees one (nothing here opens a device).
SM90 = SimpleNamespace(cc=(9, 0), lane_binding="dpx", simulator=False)
#: The lengths of the 20 classic CUDASW++ queries (41,752 residues: the benchmark's cold run).
CLASSIC_LENGTHS = (144, 189, 222, 375, 464, 567, 657, 729, 850, 1000, 1500, 2005, 2504, 3005, 3564, 4061, 4548,
                   4743, 5147, 5478)


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    """A fresh machine's kernel cache."""
    monkeypatch.setenv("HMMGPU_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_every_shipped_kernel_matches_the_code():
    stale = [f"{s.name}_{b}.sm{cc[0]}{cc[1]}" for s, b, cc in prebuilt.stale()]
    assert not stale, f"shipped kernels missing or out of date: {stale}; run `python3 -m hmmgpu.gpu.sw.prebuilt`"


def test_a_fresh_sm90_machine_compiles_no_kernel_for_sw(empty_cache):
    assert build.missing(prebuilt.specs(), SM90) == []
    assert launch.compile_for(CLASSIC_LENGTHS, SM90) == 0
    assert not empty_cache.exists() or not list(empty_cache.rglob("*.cubin"))


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
