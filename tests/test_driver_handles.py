"""Which handle each CUDA driver function is called through (hmmgpu.gpu.runtime.libcuda): the
functions that return at once keep the interpreter's lock, the others give it up. No GPU is
needed: two stand-in libraries record the calls; tests/gpu/test_driver_lock.py measures the
effect on the real driver."""
import pytest

from hmmgpu.errors import HmmgpuError
from hmmgpu.gpu.runtime import libcuda, tuning


class _Library:
    """A stand-in for one handle on libcuda: every function returns ``result`` and records its
    name under this handle's ``label``."""

    def __init__(self, label, calls, result=0):
        self.label, self.calls, self.result = label, calls, result

    def __getattr__(self, name):
        def fn(*args):
            self.calls.append((self.label, name))
            return self.result
        return fn


@pytest.fixture
def libraries(monkeypatch):
    calls = []
    monkeypatch.setattr(libcuda, "load", lambda: _Library("gives up the lock", calls))
    monkeypatch.setattr(libcuda, "_load_keeping_lock", lambda: _Library("keeps the lock", calls))
    return calls


@pytest.mark.parametrize("name", sorted(libcuda.QUICK))
def test_a_call_that_returns_at_once_keeps_the_lock(libraries, name):
    libcuda.call(name)
    assert libraries == [("keeps the lock", name)]


@pytest.mark.parametrize("name", ["cuStreamSynchronize", "cuEventSynchronize", "cuMemcpyDtoH_v2", "cuMemcpyHtoD_v2",
                                  "cuMemcpyDtoHAsync_v2", "cuMemcpyHtoDAsync_v2", "cuMemFree_v2", "cuMemAlloc_v2",
                                  "cuModuleLoadData", "cuMemHostAlloc", "cuMemFreeHost", "cuStreamDestroy_v2"])
def test_a_call_that_may_wait_gives_the_lock_up(libraries, name):
    assert name in libcuda.SIGNATURES and name not in libcuda.QUICK
    libcuda.call(name)
    assert libraries == [("gives up the lock", name)]


def test_every_quick_function_is_declared():
    assert libcuda.QUICK <= set(libcuda.SIGNATURES)


def test_the_tuning_setting_sends_every_call_through_the_lock_giving_handle(libraries, monkeypatch):
    monkeypatch.setattr(tuning, "DRIVER_QUICK_CALLS_KEEP_LOCK", False)
    libcuda.call("cuLaunchKernel")
    assert libraries == [("gives up the lock", "cuLaunchKernel")]


def test_a_failed_call_is_one_line_with_the_drivers_error(monkeypatch):
    calls = []
    monkeypatch.setattr(libcuda, "load", lambda: _Library("gives up the lock", calls))
    monkeypatch.setattr(libcuda, "_load_keeping_lock", lambda: _Library("keeps the lock", calls, result=700))
    with pytest.raises(HmmgpuError, match="^CUDA driver: cuLaunchKernel failed with ") as error:
        libcuda.call("cuLaunchKernel")
    assert "\n" not in str(error.value)


def test_no_driver_is_a_one_line_error(monkeypatch):
    monkeypatch.setattr(libcuda, "load", lambda: None)
    with pytest.raises(HmmgpuError, match=r"the CUDA driver library \(libcuda.so.1\) does not load"):
        libcuda.call("cuEventRecord")
