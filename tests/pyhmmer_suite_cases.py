"""pyhmmer's own hmmsearch and hmmscan test classes, run against ``hmmgpu.hmmsearch`` and ``hmmgpu.hmmscan``.

pyhmmer ships its test suite in its wheel (``pyhmmer/tests/test_hmmer.py`` and the data it
reads). Its test cases call ``pyhmmer.hmmsearch(...)`` and ``pyhmmer.hmmer.hmmscan(...)``
through the name ``pyhmmer`` of their module; each class below is pyhmmer's own, unchanged,
with that name pointing, for the test's duration, at a view of pyhmmer whose ``hmmsearch``
and ``hmmer.hmmscan`` are hmmgpu's (:class:`_WithHmmgpu`). Every assertion is pyhmmer's.

Each class runs with ``engine="auto"`` (what a user gets; without a GPU that is pyhmmer's
route inside hmmgpu's engine) and ``engine="numba"`` (hmmgpu's exact CPU filters, the
reference of the GPU kernels, then pyhmmer's Forward/domain stage), and on a GPU machine
(``-m gpu``) with ``engine="cuda"``.

One thing is changed in pyhmmer's hmmscan tests, the path of their model file: they ask
for ``data/hmms/db/RREFam.hmm.hmm`` (the name given already ends in ``.hmm``), which does
not exist, so in pyhmmer's own run both tests skip themselves. Here they read
``RREFam.hmm``, the pressed database beside it, and run.

pyhmmer's search tests end by checking that the process has no thread but its main one, so
these cases run in a fresh interpreter: tests/test_pyhmmer_suite.py starts one and checks
every outcome (``python3 -m pytest tests/pyhmmer_suite_cases.py`` runs them directly).
"""
from __future__ import annotations

import types
from unittest import mock

import pytest

pyhmmer = pytest.importorskip("pyhmmer")
pyhmmer_tests = pytest.importorskip("pyhmmer.tests.test_hmmer")

import hmmgpu  # noqa: E402


class _WithHmmgpu(types.ModuleType):
    """The ``pyhmmer`` module as pyhmmer's tests see it: everything pyhmmer's, except
    ``hmmsearch`` and ``hmmer.hmmscan``, which are hmmgpu's with the given ``engine``."""

    def __init__(self, engine: str):
        super().__init__("pyhmmer")
        hmmer = types.ModuleType("pyhmmer.hmmer")
        hmmer.__getattr__ = lambda name: getattr(pyhmmer.hmmer, name)
        hmmer.hmmscan = lambda *args, **kwargs: hmmgpu.hmmscan(*args, engine=engine, **kwargs)
        self.hmmer = hmmer
        self.hmmsearch = lambda *args, **kwargs: hmmgpu.hmmsearch(*args, engine=engine, **kwargs)

    def __getattr__(self, name):
        return getattr(pyhmmer, name)


class _Engine:
    """Mixin: pyhmmer's test module sees :class:`_WithHmmgpu` while each test runs."""

    engine = "auto"

    def setUp(self):
        patcher = mock.patch.object(pyhmmer_tests, "pyhmmer", _WithHmmgpu(self.engine))
        patcher.start()
        self.addCleanup(patcher.stop)
        super().setUp()


def _pressed_file(self, name):
    """pyhmmer's ``TestHMMScan.hmm_file`` without the doubled ``.hmm`` (see the module header)."""
    path = pyhmmer_tests.resource_files(pyhmmer_tests.__package__).joinpath("data", "hmms", "db", name)
    if not path.exists():
        self.skipTest("data files not available")
    return pyhmmer.plan7.HMMFile(path)


class _Numba(_Engine):
    engine = "numba"


class _Cuda(_Engine):
    engine = "cuda"

    def setUp(self):
        from hmmgpu.gpu.runtime.context import cuda_available

        if not cuda_available():
            self.skipTest("no CUDA GPU")
        super().setUp()


class _Scan:
    hmm_file = _pressed_file


class TestHmmsearchAuto(_Engine, pyhmmer_tests.TestHmmsearch):
    pass


class TestHmmsearchSingleAuto(_Engine, pyhmmer_tests.TestHmmsearchSingle):
    pass


class TestHmmsearchProcessAuto(_Engine, pyhmmer_tests.TestHmmsearchProcess):
    pass


class TestHmmsearchReverseAuto(_Engine, pyhmmer_tests.TestHmmsearchReverse):
    pass


class TestHmmsearchReverseSingleAuto(_Engine, pyhmmer_tests.TestHmmsearchReverseSingle):
    pass


class TestHmmsearchReverseProcessAuto(_Engine, pyhmmer_tests.TestHmmsearchReverseProcess):
    pass


class TestHMMScanAuto(_Scan, _Engine, pyhmmer_tests.TestHMMScan):
    pass


class TestHmmsearchNumba(_Numba, pyhmmer_tests.TestHmmsearch):
    pass


class TestHmmsearchSingleNumba(_Numba, pyhmmer_tests.TestHmmsearchSingle):
    pass


class TestHmmsearchProcessNumba(_Numba, pyhmmer_tests.TestHmmsearchProcess):
    pass


class TestHmmsearchReverseNumba(_Numba, pyhmmer_tests.TestHmmsearchReverse):
    pass


class TestHmmsearchReverseSingleNumba(_Numba, pyhmmer_tests.TestHmmsearchReverseSingle):
    pass


class TestHmmsearchReverseProcessNumba(_Numba, pyhmmer_tests.TestHmmsearchReverseProcess):
    pass


class TestHMMScanNumba(_Scan, _Numba, pyhmmer_tests.TestHMMScan):
    pass


@pytest.mark.gpu
class TestHmmsearchCuda(_Cuda, pyhmmer_tests.TestHmmsearch):
    pass


@pytest.mark.gpu
class TestHmmsearchSingleCuda(_Cuda, pyhmmer_tests.TestHmmsearchSingle):
    pass


@pytest.mark.gpu
class TestHmmsearchProcessCuda(_Cuda, pyhmmer_tests.TestHmmsearchProcess):
    pass


@pytest.mark.gpu
class TestHmmsearchReverseCuda(_Cuda, pyhmmer_tests.TestHmmsearchReverse):
    pass


@pytest.mark.gpu
class TestHmmsearchReverseSingleCuda(_Cuda, pyhmmer_tests.TestHmmsearchReverseSingle):
    pass


@pytest.mark.gpu
class TestHmmsearchReverseProcessCuda(_Cuda, pyhmmer_tests.TestHmmsearchReverseProcess):
    pass


@pytest.mark.gpu
class TestHMMScanCuda(_Scan, _Cuda, pyhmmer_tests.TestHMMScan):
    pass
