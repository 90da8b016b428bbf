"""Shared fixtures for the kernel tests (hmmgpu.gpu)."""
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _shared_data():
    for cand in (os.environ.get("HMMGPU_SHARED_DATA"), ROOT.parent / "shared" / "data", ROOT / ".bench"):
        if cand and (Path(cand) / "public_proteins.fa.gz").exists() or (cand and (Path(cand) / "seqs").exists()):
            return Path(cand)
    return None


@pytest.fixture(scope="session")
def shared_data():
    """The shared data folder (``../shared/data``, or ``.bench`` on the GPU machine); skips if absent."""
    d = _shared_data()
    if d is None:
        pytest.skip("shared data (../shared/data) not present")
    return d
