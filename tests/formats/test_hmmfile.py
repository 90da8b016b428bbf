"""The profile reader: every file kind, MMU as HMMER reads it, and one-line errors for every fault."""
import gzip
import io
import itertools
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
from pyhmmer.plan7 import HMMFile

from hmmgpu.errors import HmmgpuError
from hmmgpu.formats.hmmfile import check_model, hmm_strings, model_lengths, model_records, read_models
from tests.helpers import ROOT, SAMPLES

SAMPLE = SAMPLES / "samples.hmm"
NAMES = ["2-Hacid_dh_C", "LuxC", "Thioesterase", "KR"]
HMMPRESS = shutil.which("hmmpress")


def stats_mmu(text: bytes) -> list:
    """STATS LOCAL MSV mu of every model, as HMMER stores it (atof, then float)."""
    return [float(np.float32(float(line.split()[3]))) for line in text.splitlines()
            if line.startswith(b"STATS LOCAL MSV")]


def names(models):
    return [m.hmm.name for m in models]


def test_plain_file():
    models = list(read_models(SAMPLE))
    assert names(models) == NAMES and [m.index for m in models] == [0, 1, 2, 3]
    assert [m.mmu for m in models] == stats_mmu(SAMPLE.read_bytes())


def test_gzip_by_magic_and_multimember(tmp_path):
    text = SAMPLE.read_bytes()
    cut = text.index(b"HMMER3", 10)
    path = tmp_path / "models.dat"
    path.write_bytes(gzip.compress(text[:cut]) + gzip.compress(text[cut:]))
    models = list(read_models(path))
    assert names(models) == NAMES and [m.mmu for m in models] == stats_mmu(text)


def test_standard_input(monkeypatch):
    class Stdin:
        buffer = io.BytesIO(gzip.compress(SAMPLE.read_bytes()))
    monkeypatch.setattr(sys, "stdin", Stdin)
    assert names(read_models("-")) == NAMES


@pytest.mark.skipif(HMMPRESS is None, reason="hmmpress (pip package 'hmmer') not installed")
def test_pressed_database_and_binary_file(tmp_path):
    db = tmp_path / "db.hmm"
    shutil.copy(SAMPLE, db)
    subprocess.run([HMMPRESS, str(db)], check=True, capture_output=True)
    expected = [(m.hmm.name, m.mmu, m.hmm.M) for m in read_models(SAMPLE)]
    db.write_bytes(b"not read: the models come from db.hmm.h3m\n")
    for source in (db, tmp_path / "db.hmm.h3m"):
        assert [(m.hmm.name, m.mmu, m.hmm.M) for m in read_models(source)] == expected


def test_models_come_one_at_a_time(tmp_path):
    """The first model is yielded before a fault further on is even read."""
    path = tmp_path / "bad_tail.hmm"
    path.write_bytes(SAMPLE.read_bytes().split(b"//\n")[0] + b"//\n" + b"HMMER3/f\nNAME broken\n")
    models = read_models(path)
    assert next(models).hmm.name == NAMES[0]
    with pytest.raises(HmmgpuError, match="model 2 \\(broken\\): truncated"):
        next(models)


@pytest.mark.parametrize("cores", [1, 2, 8])
@pytest.mark.parametrize("fault", ["record", "truncated"])
def test_models_in_order_whoever_parses_them(monkeypatch, tmp_path, cores, fault):
    """On fewer than four cores the caller's thread parses each record, on more a pool of
    threads does: either way the models come in file order, and a fault in a record or in
    the file's structure comes after every model before it."""
    from hmmgpu import options

    monkeypatch.setattr(options, "usable_cores", lambda: cores)
    text = SAMPLE.read_bytes()
    tail, message = {"record": (b"HMMER3/f\nNAME y\nLENG x\n//\n", "model 21 \\(y\\): no valid ALPH line"),
                     "truncated": (text[:6000], "model 21 \\(2-Hacid_dh_C\\): truncated")}[fault]
    path = tmp_path / "many.hmm"
    path.write_bytes(text * 5 + tail)
    seen = []
    with pytest.raises(HmmgpuError, match=message):
        for model in read_models(path):
            seen.append((model.index, model.hmm.name))
    assert seen == [(i, NAMES[i % 4]) for i in range(20)]


def model_text(name="PF02826.hmm") -> bytes:
    return (SAMPLES / name).read_bytes()


def first_match_line(text: bytes) -> int:
    lines = text.split(b"\n")
    return next(i for i, line in enumerate(lines) if line.split()[:1] == [b"1"] and len(line.split()) > 20)


def edit_field(text: bytes, value: bytes, field: int = 1, line_offset: int = 0) -> bytes:
    """Replace field `field` of the first match line (or a line `line_offset` below it)."""
    lines = text.split(b"\n")
    i = first_match_line(text) + line_offset
    parts = lines[i].split()
    parts[field] = value
    lines[i] = b"      " + b"  ".join(parts)
    return b"\n".join(lines)


def without(text: bytes, prefix: bytes) -> bytes:
    return b"\n".join(line for line in text.split(b"\n") if not line.startswith(prefix))


BAD_MODELS = {
    "nan_emission": (edit_field(model_text(), b"nan"), "node 1: match emission probability nan is not in [0, 1]"),
    "inf_emission": (edit_field(model_text(), b"-inf"), "match emission probability inf is not in [0, 1]"),
    "negative_log": (edit_field(model_text(), b"-2.5"), "probability 12.1825 is not in [0, 1]"),
    "word": (edit_field(model_text(), b"abcde"), "node 1: match emissions sum to"),
    "transition_nan": (edit_field(model_text(), b"nan", field=0, line_offset=2), "transition probability nan"),
    "insert_sum": (edit_field(model_text(), b"0.1", field=0, line_offset=1), "insert emissions sum to"),
    "no_stats": (without(model_text(), b"STATS"), "not calibrated"),
    "lambda_nan": (model_text().replace(b"0.70685", b"nan", 1), "invalid STATS LOCAL values"),
    "ga_nan": (model_text("LuxC.hmm").replace(b"GA    ", b"GA    nan ", 1), "cutoff is not a number"),
    "dna": ((ROOT / "tests" / "data" / "bmyD.hmm").read_bytes(), "is a DNA model"),
    "empty": (b"", "HMM file is empty"),
    "blank": (b"\n  \n\t\n", "HMM file is empty"),
    "random_bytes": (bytes(np.random.default_rng(3).integers(0, 256, 4000, dtype=np.uint8)), "not a valid HMMER"),
    "header_only": (b"HMMER3/f [3.4 | Aug 2023]\nNAME  x\n", "model 1 (x): truncated"),
    "cut_in_body": (model_text()[:6000], "model 1 (2-Hacid_dh_C): truncated"),
    "cut_before_slashes": (model_text().rstrip()[:-2], "truncated (the file ends before its closing //)"),
    "garbage_record": (model_text() + b"HMMER3/f\nNAME y\nLENG x\n//\n", "model 2 (y): no valid ALPH line"),
    "no_alph": (model_text().replace(b"ALPH  amino", b"ALP  amino"), "model 1 (2-Hacid_dh_C): no valid ALPH line"),
    "huge_leng": (model_text().replace(b"LENG  178", b"LENG  1780000"),
                  "invalid model length on the LENG line (1780000)"),
    "negative_leng": (model_text().replace(b"LENG  178", b"LENG  -178"), "invalid model length"),
    "no_consensus": (model_text().replace(b"CONS  yes", b"CONS  no"), "has no consensus residues"),
    "stats_word": (model_text().replace(b"MSV      -10.2529", b"MSV      abc"), "invalid number 'abc' on the STATS line"),
    "ga_word": (model_text("LuxC.hmm").replace(b"GA    ", b"GA    x", 1), "on the GA line"),
    "only_slashes": (b"//\n", "not a valid HMMER profile file"),
}


@pytest.mark.parametrize("case", sorted(BAD_MODELS))
def test_bad_models_one_line_error(tmp_path, case):
    data, fragment = BAD_MODELS[case]
    path = tmp_path / "bad.hmm"
    path.write_bytes(data)
    for source in (path, _gz(tmp_path, data)):
        with pytest.raises(HmmgpuError) as info:
            list(read_models(source))
        message = str(info.value)
        assert "\n" not in message and str(source) in message and fragment in message, message


def _gz(tmp_path, data):
    path = tmp_path / "bad.hmm.gz"
    path.write_bytes(gzip.compress(data))
    return path


def test_missing_and_directory(tmp_path):
    with pytest.raises(HmmgpuError, match="no such file"):
        list(read_models(tmp_path / "nope.hmm"))
    with pytest.raises(HmmgpuError, match="is a directory"):
        list(read_models(tmp_path))


def test_damaged_gzip(tmp_path):
    data = gzip.compress(SAMPLE.read_bytes())
    path = tmp_path / "cut.hmm.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(HmmgpuError, match="truncated gzip"):
        list(read_models(path))


def test_descriptions_that_are_not_utf8(tmp_path):
    text = model_text().replace(b"DESC  D-isomer", b"DESC  \xe9-isomer").replace(b"ACC   PF02826.20", b"ACC   PF\xff")
    path = tmp_path / "latin1.hmm"
    path.write_bytes(text)
    model = next(read_models(path))
    name, accession, description = hmm_strings(model.hmm)
    assert name == b"2-Hacid_dh_C" and accession == b"PF\xff"
    assert description.startswith(b"\xe9-isomer specific")
    path.write_bytes(text.replace(b"NAME  2-Hacid", b"NAME  \xff2-Hacid"))
    with pytest.raises(HmmgpuError, match=r"model 1 \(\\xff2-Hacid_dh_C\): the model name is not UTF-8 text"):
        list(read_models(path))


def test_check_model_names_the_model():
    with HMMFile(ROOT / "tests" / "data" / "bmyD.hmm") as f:
        hmm = f.read()
    with pytest.raises(HmmgpuError, match=r"^here \(bmyD\): is a DNA model"):
        check_model(hmm, "here")


def test_pfam_sample_mmu_and_speed(shared_data):
    path = shared_data / "pfam_db" / "pfam35_sample600.hmm.gz"
    start = time.process_time()  # this process's CPU time: other work on the machine does not count
    models = list(read_models(path))
    elapsed = time.process_time() - start
    assert len(models) == 600
    assert [m.mmu for m in models] == stats_mmu(gzip.decompress(path.read_bytes()))
    assert elapsed < 2.0, elapsed   # about 0.4 s on one core of a laptop; generous for CI


def binary_models() -> bytes:
    buf = io.BytesIO()
    for model in read_models(SAMPLE):
        model.hmm.write(buf, binary=True)
    return buf.getvalue()


@pytest.mark.parametrize("offset,value,fragment", [
    (8, b"\xff\xff\xff\x7f", "damaged binary model header (M=2147483647"),
    (8, b"\x00\x00\x00\x00", "damaged binary model header (M=0"),
    (12, b"\x09\x00\x00\x00", "alphabet type 9"),
    (4, b"\xff\xff\xff\xff", "damaged binary model header"),
    (0, b"\x00\x00", "not a valid HMMER profile file"),
], ids=["huge_M", "zero_M", "alphabet", "flags", "magic"])
def test_damaged_binary_models(tmp_path, offset, value, fragment):
    """HMMER's binary reader trusts these fields (it crashes or exits); hmmgpu checks them first."""
    data = bytearray(binary_models())
    data[offset:offset + len(value)] = value
    path = tmp_path / "models.h3m"
    path.write_bytes(bytes(data))
    with pytest.raises(HmmgpuError, match=re.escape(fragment)):
        list(read_models(path))


def test_binary_models_truncated_anywhere(tmp_path):
    data = binary_models()
    path = tmp_path / "models.h3m"
    for cut in range(1, len(data), 997):
        path.write_bytes(data[:cut])
        with pytest.raises(HmmgpuError):
            list(read_models(path))
    path.write_bytes(data)
    assert names(read_models(path)) == NAMES


@pytest.mark.parametrize("chunk", [7, 100, 4096, 16 << 20])
def test_model_lengths_are_read_in_chunks(monkeypatch, tmp_path, chunk):
    """The models' LENG lines are found in chunks of the file (a Pfam-A file is never held
    whole), whatever line or ``//`` a chunk cuts, plain or gzip, one per record as
    :func:`model_records` cuts the file (a slash inside a line ends nothing; a last record
    without its ``//`` still counts); a file that is not HMMER3 text, an empty one and a
    missing one give None."""
    from hmmgpu.formats import inputs

    monkeypatch.setattr(inputs, "CHUNK", chunk)
    text = SAMPLE.read_bytes()
    odd = text.replace(b"\nDESC ", b"\nDESC a/b //c ", 1) + text.split(b"//\n")[0]   # no closing //
    expected = [int(m) for m in re.findall(rb"\nLENG[ \t]+(\d+)", odd)]
    assert len(expected) == 5
    paths = {"plain": tmp_path / "odd.hmm", "gzip": tmp_path / "odd.hmm.gz"}
    paths["plain"].write_bytes(odd)
    paths["gzip"].write_bytes(gzip.compress(odd))
    for path in paths.values():
        assert model_lengths(str(path)) == expected
    assert model_lengths(str(SAMPLE)) == expected[:4]
    records = model_records(str(paths["plain"]))[1]
    assert [record for _, record in itertools.islice(records, 4)] == \
        [part + b"//\n" for part in odd.split(b"//\n")[:4]]
    for name, content in (("seqs.fa", b">a\nACDE\n"), ("empty.hmm", b""), ("short.hmm", b"HMM"),
                          ("slash.hmm", b"/")):
        (tmp_path / name).write_bytes(content)
        assert model_lengths(str(tmp_path / name)) is None
    assert model_lengths(str(tmp_path / "missing.hmm")) is None

