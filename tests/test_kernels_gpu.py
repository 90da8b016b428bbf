"""GPU SSV/MSV kernels on a real GPU (``pytest -m gpu``): per-sequence equality with HMMER
(pyhmmer's msv_filter, SSV first, om.L set per target) and with hmmgpu.cpu_filters, in both
lane modes, with force_msv too."""
import gzip
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parent.parent
LANES = ["16x2", "8x4"]


@pytest.fixture(scope="module")
def gpu():
    from hmmgpu.kernels import cuda_available

    if not cuda_available():
        pytest.skip("no CUDA GPU")


def _hmms(path):
    import pyhmmer

    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as fh, pyhmmer.plan7.HMMFile(fh) as hf:
        return list(hf)


@pytest.fixture(scope="module")
def samples_db():
    from hmmgpu.seqdb import SequenceDB

    return SequenceDB.from_fasta(ROOT / "pfam_samples" / "938293.PRJEB85.HG003687.faa")


@pytest.mark.parametrize("lanes", LANES)
def test_pfam_samples_equal_hmmer(gpu, samples_db, lanes):
    from hmmgpu.kernels import GpuMsvFilter
    from hmmgpu.kernels.selftest import check_filter
    from hmmgpu.profiles import ModelProfile

    f = GpuMsvFilter(samples_db, lanes=lanes)
    for path in sorted((ROOT / "pfam_samples").glob("*.hmm")):
        for hmm in _hmms(path):
            prof = ModelProfile.from_hmm(hmm)
            rep = check_filter(f, hmm, prof, samples_db, thr_value=185)
            print(path.name, hmm.M, lanes, rep)
    f.close()


@pytest.mark.parametrize("lanes", LANES)
def test_sampled_models_and_chunking(gpu, lanes):
    from hmmgpu.kernels import GpuMsvFilter
    from hmmgpu.kernels.selftest import check_filter, sample_case

    for M, seed in ((1, 1), (20, 2), (70, 3), (400, 4), (1700, 5), (2600, 6)):
        hmm, prof, db = sample_case(M, seed, 40, 600)
        f = GpuMsvFilter(db, lanes=lanes)
        check_filter(f, hmm, prof, db, thr_value=185)
        f.close()
        f = GpuMsvFilter(db, lanes=lanes, max_device_bytes=4000)
        assert f.ddb.n_chunks > 1
        check_filter(f, hmm, prof, db, force=False)
        f.close()


@pytest.mark.parametrize("lanes", LANES)
def test_pfam_models_public_proteins(gpu, shared_data, lanes):
    """Every Pfam model of the shared data against a sample of the public proteins."""
    from hmmgpu.kernels import GpuMsvFilter
    from hmmgpu.kernels.selftest import check_filter
    from hmmgpu.profiles import ModelProfile
    from hmmgpu.seqdb import SequenceDB

    fa = shared_data / "seqs" / "public_proteins.fa.gz"
    if not fa.exists():
        fa = shared_data / "public_proteins.fa.gz"
    pf = sorted((shared_data / "pfam").glob("*.hmm.gz")) or sorted(shared_data.glob("PF*.hmm.gz"))
    full = SequenceDB.from_fasta(fa)
    sub = np.arange(0, full.n, 97)  # ~800 sequences, all lengths
    db = SequenceDB.from_block(full.block(sub))
    f = GpuMsvFilter(db, lanes=lanes)
    for path in pf:
        for hmm in _hmms(path):
            check_filter(f, hmm, ModelProfile.from_hmm(hmm), db, cpu=True, force=False)
    f.close()
