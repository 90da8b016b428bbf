"""Real Pfam models against 77,801 real proteins (../shared/data): tables equal hmmsearch 3.4.

Skipped where ../shared/data is absent (a user's fresh clone); CI and developer machines
have it. PF00873 has a hit whose E-value is subnormal (2.6e-314 in pyhmmer, 0 in
hmmsearch, which flushes subnormals to zero): the CLI must print hmmsearch's 0.

The reference is serial hmmsearch (`--cpu 0`): with worker threads, each thread counts
its own targets for the running Z that decides which unreported hits are kept, and those
set the width of the name column, so threaded runs can differ from each other in spaces.
"""
import gzip
import shutil
import subprocess

import pytest

from hmmgpu.cli import main
from hmmgpu.formats.seqdb import SequenceDB
from tests.helpers import SHARED

PROTEINS = SHARED / "seqs" / "public_proteins.fa.gz"
MODELS = ["PF00096", "PF00005", "PF07690", "PF00873", "PF05088"]
HMMSEARCH = shutil.which("hmmsearch")

pytestmark = [
    pytest.mark.skipif(not PROTEINS.exists(), reason="../shared/data (real proteins) not present"),
    pytest.mark.skipif(HMMSEARCH is None, reason="hmmsearch (pip package 'hmmer', in the test extra) not installed"),
]


@pytest.fixture(scope="module")
def made_db(tmp_path_factory):
    out = tmp_path_factory.mktemp("shared") / "public_proteins"
    SequenceDB.from_fasta(PROTEINS).save(out)
    return out


def _rows(path):
    with open(path) as f:
        return [line for line in f if not line.startswith("#")]


def test_many_models_equal_serial_hmmsearch(tmp_path):
    """100 Pfam 35 models in one file against the sample proteome: every row, every width."""
    from tests.helpers import PROTEOME

    models = tmp_path / "pfam100.hmm"
    text = gzip.decompress((SHARED / "pfam_db" / "pfam35_sample600.hmm.gz").read_bytes()).decode()
    models.write_text("//\n".join(text.split("//\n")[:100]) + "//\n")
    ref, ours = tmp_path / "ref.dom", tmp_path / "ours.dom"
    subprocess.run([HMMSEARCH, "--cpu", "0", "-o", "/dev/null", "--domtblout", str(ref), str(models), str(PROTEOME)],
                   check=True)
    assert main(["search", "--backend", "numba", "-o", str(tmp_path / "r"), "--domtblout", str(ours),
                 str(models), str(PROTEOME)]) == 0
    assert _rows(ours) == _rows(ref) and len(_rows(ref)) > 100


@pytest.mark.parametrize("model", MODELS)
def test_real_pfam_tables_equal_hmmsearch(model, made_db, tmp_path):
    hmm = tmp_path / f"{model}.hmm"
    hmm.write_bytes(gzip.decompress((SHARED / "pfam" / f"{model}.hmm.gz").read_bytes()))
    ref = {k: tmp_path / f"ref.{k}" for k in ("tblout", "domtblout")}
    ours = {k: tmp_path / f"ours.{k}" for k in ("tblout", "domtblout")}
    subprocess.run([HMMSEARCH, "--cpu", "0", "-o", "/dev/null", "--tblout", str(ref["tblout"]),
                    "--domtblout", str(ref["domtblout"]), str(hmm), str(PROTEINS)], check=True)
    assert main(["search", "--backend", "numba", "-o", str(tmp_path / "report"), "--tblout", str(ours["tblout"]),
                 "--domtblout", str(ours["domtblout"]), str(hmm), str(made_db)]) == 0
    for kind in ref:
        assert _rows(ours[kind]) == _rows(ref[kind]), kind
    assert len(_rows(ref["tblout"])) > 0
