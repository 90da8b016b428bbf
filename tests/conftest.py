"""Shared fixtures: the shared data folder, and the sample proteome as a ``SequenceDB``."""
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


@pytest.fixture(scope="module")
def proteome():
    """The sample proteome (pfam_samples, 2,100 proteins) as a :class:`~hmmgpu.formats.seqdb.SequenceDB`."""
    from hmmgpu.formats.seqdb import SequenceDB
    from tests.helpers import PROTEOME

    return SequenceDB.from_fasta(PROTEOME)
