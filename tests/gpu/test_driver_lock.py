"""On a CUDA GPU: the driver calls that return at once keep the interpreter's lock, so that a
thread's launches and event records do not wait for it while another thread runs Python
(hmmgpu.gpu.runtime.libcuda; the GPU process's filters' loop beside its domain definitions).

Run on the GPU machine with `python3 -m pytest -m gpu`.
"""
import sys
import threading
import time

import pytest

from hmmgpu.gpu.runtime import tuning

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", autouse=True)
def gpu():
    from hmmgpu.gpu.runtime.context import cuda_available

    if not cuda_available():
        pytest.skip("no CUDA GPU")


def _records_beside_a_python_thread(n: int) -> float:
    """Seconds that ``n`` event records (each: the context pushed, the record, the context
    popped) take while another thread runs Python without pause."""
    from hmmgpu.gpu.runtime.device import GpuDevice

    rt = GpuDevice.open(0).runtime
    stream, event = rt.stream(non_blocking=True), rt.event()
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            pass

    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.005)  # CPython's default, whatever the test run set
    other = threading.Thread(target=spin)
    other.start()
    try:
        start = time.perf_counter()
        for _ in range(n):
            event.record(stream)
        return time.perf_counter() - start
    finally:
        stop.set()
        other.join()
        sys.setswitchinterval(interval)
        stream.synchronize()


def test_quick_driver_calls_do_not_wait_for_the_lock(monkeypatch):
    n = 200
    kept = _records_beside_a_python_thread(n)
    monkeypatch.setattr(tuning, "DRIVER_QUICK_CALLS_KEEP_LOCK", False)
    given_up = _records_beside_a_python_thread(n)
    print(f"{n} event records beside a Python thread: {kept * 1e3:.1f} ms with the lock kept, "
          f"{given_up * 1e3:.1f} ms with it given up at each call")
    # given up, each of the 3 n calls waits for the lock, up to a switch interval (5 ms)
    assert kept < 0.1 and given_up > 10 * kept
