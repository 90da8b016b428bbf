"""GPU kernels on a real GPU (``pytest -m gpu``): every target's MSV, Viterbi filter and bias
decisions equal HMMER's own functions and hmmgpu.cpu.filters, for every model of the shared
data (Pfam and the CUDAMPF paper's models) against real proteins, both MSV lane modes."""
import gzip
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from tests.gpu.kernel_checks import check_cascade, check_msv, check_vit, msv_stage, sample_case, vit_case, vit_stage

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]
LANES = ["16x2", "8x4"]


@pytest.fixture(scope="module", autouse=True)
def gpu():
    from hmmgpu.gpu.runtime.context import cuda_available

    if not cuda_available():
        pytest.skip("no CUDA GPU")


def _hmms(path):
    import pyhmmer

    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as fh, pyhmmer.plan7.HMMFile(fh) as hf:
        return list(hf)


@pytest.fixture(scope="module")
def samples_db():
    from hmmgpu.formats.seqdb import SequenceDB

    return SequenceDB.from_fasta(ROOT / "pfam_samples" / "938293.PRJEB85.HG003687.faa")


@pytest.fixture(scope="module")
def real_models(shared_data):
    paths = sorted((shared_data / "pfam").glob("*.hmm.gz")) + sorted((shared_data / "cudampf").glob("*.hmm.gz"))
    return [h for p in paths for h in _hmms(p)]


@pytest.fixture(scope="module")
def real_sample(shared_data):
    """Every 389th of the 77,801 real proteins (200, all lengths)."""
    from hmmgpu.formats.seqdb import SequenceDB

    full = SequenceDB.from_fasta(shared_data / "seqs" / "public_proteins.fa.gz")
    return SequenceDB.from_block(full.block(np.arange(0, full.n, 389)))


@pytest.mark.parametrize("lanes", LANES)
def test_msv_pfam_samples_equal_hmmer(samples_db, lanes):
    from hmmgpu.stages.profiles import ModelProfile

    stage = msv_stage(samples_db, lanes=lanes)
    for path in sorted((ROOT / "pfam_samples").glob("*.hmm")):
        for hmm in _hmms(path):
            print(path.name, hmm.M, lanes, check_msv(stage, hmm, ModelProfile.from_hmm(hmm), samples_db, thr_value=185))


@pytest.mark.parametrize("lanes", LANES)
def test_msv_sampled_models_and_chunking(lanes):
    for M, seed in ((1, 1), (20, 2), (70, 3), (400, 4), (1700, 5), (2600, 6)):
        hmm, prof, db = sample_case(M, seed, 40, 600)
        check_msv(msv_stage(db, lanes=lanes), hmm, prof, db, thr_value=185)
        stage = msv_stage(db, lanes=lanes, max_bytes=4000)
        assert stage.resident.n_chunks > 1
        check_msv(stage, hmm, prof, db, force=False)


@pytest.mark.parametrize("lanes", LANES)
def test_msv_real_models_real_proteins(real_models, real_sample, lanes):
    """Every Pfam and CUDAMPF model of the shared data, every target of the sample."""
    from hmmgpu.stages.profiles import ModelProfile

    stage = msv_stage(real_sample, lanes=lanes)
    for hmm in real_models:
        check_msv(stage, hmm, ModelProfile.from_hmm(hmm), real_sample, cpu=False, force=False)


def test_viterbi_sampled_models():
    """Shapes from Q = 1 to 40, gap/stop codes, D->D runs, overflow, against the CPU and HMMER."""
    for M, seed in ((5, 1), (64, 2), (65, 3), (300, 4), (770, 5), (1600, 6), (2500, 7)):
        hmm, prof, db = vit_case(M, seed, 30, 800)
        print(M, check_vit(vit_stage(db), hmm, prof, db))


def test_viterbi_real_models_real_proteins(real_models, real_sample):
    """Every Pfam and CUDAMPF model: each target's Viterbi filter equals HMMER's (libhmmer)."""
    from hmmgpu.stages.profiles import ModelProfile

    stage = vit_stage(real_sample)

    def one(hmm):
        return hmm.name, check_vit(stage, hmm, ModelProfile.from_hmm(hmm), real_sample, cpu=False)

    with ThreadPoolExecutor(8) as pool:
        for name, report in pool.map(one, real_models):
            assert report["hmmer_equal"] == report["n"], name
            assert report["cpu_reason"] is None, (name, report["cpu_reason"])


@pytest.mark.parametrize("lanes", LANES)
def test_cascade_samples_equal_pyhmmer(samples_db, lanes):
    """The whole GPU cascade and search: tables, counters and the GPU's bias scores."""
    for path in sorted((ROOT / "pfam_samples").glob("*.hmm")):
        for hmm in _hmms(path):
            for options in (dict(), dict(F1=1.0), dict(bias_filter=False), dict(F2=1.0)):
                print(path.name, options, check_cascade(hmm, samples_db, lanes=lanes, **options))
