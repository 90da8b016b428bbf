"""Fuzzing the readers: random bytes, truncations and one-byte mutations of valid inputs.

Every input either reads as exactly what pyhmmer (Easel, HMMER's reader) reads from it and
searches to the same hits, or is refused with a one-line HmmgpuError; never a traceback, never
a silently different database or model.
"""
import gzip
import io
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyhmmer.easel import Alphabet, SequenceFile
from pyhmmer.plan7 import HMMFile, Pipeline

from hmmgpu.errors import HmmgpuError
from hmmgpu.formats.hmmfile import read_models
from hmmgpu.formats.seqdb import SequenceDB, open_database
from tests.helpers import PROTEOME, SAMPLES

AMINO = Alphabet.amino()
FASTA = b"\n>".join(PROTEOME.read_bytes().split(b"\n>")[:30]) + b"\n"
MODEL_TEXT = (SAMPLES / "PF02826.hmm").read_bytes()
FUZZ = settings(max_examples=int(os.environ.get("HMMGPU_FUZZ_EXAMPLES", 40)), deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


def mutated(data: bytes):
    """Random bytes, a truncation, or a one-byte change (replacement, insertion or deletion)."""
    n = len(data)
    return st.one_of(
        st.binary(max_size=400),
        st.integers(0, n).map(lambda k: data[:k]),
        st.tuples(st.integers(0, n - 1), st.integers(0, 255)).map(
            lambda t: data[:t[0]] + bytes([t[1]]) + data[t[0] + 1:]),
        st.tuples(st.integers(0, n), st.integers(0, 255)).map(lambda t: data[:t[0]] + bytes([t[1]]) + data[t[0]:]),
        st.integers(0, n - 1).map(lambda k: data[:k] + data[k + 1:]),
    )


def one_line_error(call):
    """Run call(); return its result, or None after checking it raised a one-line HmmgpuError."""
    try:
        return call()
    except HmmgpuError as exc:
        message = str(exc)
        assert message and "\n" not in message and "\r" not in message
        return None


def easel_block(path):
    try:
        with SequenceFile(str(path), format="fasta", digital=True, alphabet=AMINO) as fh:
            return fh.read_block()
    except (ValueError, EOFError):
        return None


def fasta_of(block) -> bytes:
    """The sequences as Easel writes them (C strings, no decoding)."""
    buf = io.BytesIO()
    for seq in block:
        seq.write(buf)
    return buf.getvalue()


def table(hits) -> bytes:
    buf = io.BytesIO()
    hits.write(buf, format="domains")
    return buf.getvalue()


@pytest.fixture(scope="module")
def model():
    return next(read_models(SAMPLES / "PF02826.hmm")).hmm


@FUZZ
@given(data=mutated(FASTA), compress=st.booleans())
def test_fasta_reader(tmp_path_factory, model, data, compress):
    path = tmp_path_factory.mktemp("fa") / "db.fa"
    path.write_bytes(gzip.compress(data) if compress else data)
    db = one_line_error(lambda: open_database(path))
    if db is None:
        return
    path.write_bytes(data)
    block = easel_block(path)
    assert block is not None and db.n == len(block)
    assert fasta_of(db.block()) == fasta_of(block)   # names and descriptions compared as bytes
    if db.n and db.max_length <= 100_000:
        assert table(Pipeline(AMINO).search_hmm(model, db.block())) == table(Pipeline(AMINO).search_hmm(model, block))


class MadeDatabase:
    """A made database, the database it holds, and its files' bytes (short repr for hypothesis)."""

    def __init__(self, out, db):
        self.out, self.db = out, db
        self.files = {p.name: p.read_bytes() for p in out.iterdir()}

    def __repr__(self):
        return f"MadeDatabase({self.out})"


@pytest.fixture(scope="module")
def made_database(tmp_path_factory):
    db = SequenceDB.from_fasta(PROTEOME)
    out = tmp_path_factory.mktemp("made") / "db"
    db.save(out)
    return MadeDatabase(out, db)


@FUZZ
@given(which=st.sampled_from(["lengths.npy", "offsets.npy", "order.npy", "names.npy", "name_offsets.npy",
                              "descriptions.npy", "residues.npy", "hmmgpu-db.json"]), change=st.data())
def test_made_database_reader(made_database, which, change):
    out, original = made_database.out, made_database.db
    data = change.draw(mutated(made_database.files[which]), label="new file content")
    try:
        (out / which).write_bytes(data)
        db = one_line_error(lambda: SequenceDB.load(out))
        if db is not None:   # only an edit that changes nothing may pass (JSON white space, say)
            for key in ("residues", "lengths", "offsets", "order", "names_blob", "name_offsets",
                        "descriptions_blob", "description_offsets"):
                assert np.array_equal(getattr(db, key), getattr(original, key)), key
    finally:
        (out / which).write_bytes(made_database.files[which])


def pyhmmer_models(path):
    try:
        with HMMFile(str(path)) as fh:
            return list(fh)
    except (ValueError, EOFError):
        return None


class Block(list):
    """Digital sequences with a short repr (hypothesis prints the fixtures of a failing example)."""

    def __repr__(self):
        return f"Block({len(self)} sequences)"


@pytest.fixture(scope="module")
def small_block():
    from pyhmmer.easel import DigitalSequenceBlock

    with SequenceFile(str(PROTEOME), digital=True, alphabet=AMINO) as fh:
        block = fh.read_block()[:300]
    return Block([DigitalSequenceBlock(AMINO, block)])


@FUZZ
@given(data=mutated(MODEL_TEXT), compress=st.booleans())
def test_hmm_reader(tmp_path_factory, small_block, data, compress):
    path = tmp_path_factory.mktemp("hmm") / "model.hmm"
    path.write_bytes(gzip.compress(data) if compress else data)
    models = one_line_error(lambda: [m.hmm for m in read_models(path)])
    if models is None:
        return
    path.write_bytes(data)
    reference = pyhmmer_models(path)
    assert reference is not None and len(reference) == len(models)
    for ours, theirs in zip(models, reference):
        assert table(Pipeline(AMINO).search_hmm(ours, small_block[0])) == \
            table(Pipeline(AMINO).search_hmm(theirs, small_block[0]))


def binary_model() -> bytes:
    buf = io.BytesIO()
    next(read_models(SAMPLES / "PF02826.hmm")).hmm.write(buf, binary=True)
    return buf.getvalue()


BINARY = binary_model()


@FUZZ
@given(data=mutated(BINARY))
def test_binary_hmm_reader(tmp_path_factory, small_block, data):
    """HMMER's own binary reader crashes on damaged sizes; hmmgpu must not."""
    path = tmp_path_factory.mktemp("h3m") / "model.h3m"
    path.write_bytes(data)
    models = one_line_error(lambda: [m.hmm for m in read_models(path)])
    if models is None:
        return
    assert len(models) == 1
    reference = pyhmmer_models(path)
    assert table(Pipeline(AMINO).search_hmm(models[0], small_block[0])) == \
        table(Pipeline(AMINO).search_hmm(reference[0], small_block[0]))


# ---------------------------------------------------------------- the same, through `hmmgpu search`


def cli(argv, capfd) -> int:
    """Run the command line; on failure, check the one-line error and exit status 1."""
    from hmmgpu.cli import ERROR_STATUS, main

    code = main(argv)
    err = capfd.readouterr().err
    if code != 0:
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == ERROR_STATUS and len([x for x in lines if x.startswith("hmmgpu: error: ")]) == 1, err
        assert "Traceback" not in err
    return code


def tblout_rows(path) -> bytes:
    data = path.read_bytes()
    return data[:data.rindex(b"#\n# Program:")]


@pytest.fixture(scope="module")
def small_fasta(tmp_path_factory):
    path = tmp_path_factory.mktemp("db") / "small.fa"
    path.write_bytes(b"\n>".join(PROTEOME.read_bytes().split(b"\n>")[:300]) + b"\n")
    return path


CLI_FUZZ = settings(max_examples=int(os.environ.get("HMMGPU_FUZZ_EXAMPLES", 15)), deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@CLI_FUZZ
@given(data=mutated(MODEL_TEXT))
def test_search_command_with_damaged_models(tmp_path_factory, capfd, small_fasta, small_block, data):
    tmp = tmp_path_factory.mktemp("cli")
    (tmp / "m.hmm").write_bytes(data)
    code = cli(["search", "--backend", "numba", "-o", str(tmp / "out"), "--tblout", str(tmp / "t"),
                str(tmp / "m.hmm"), str(small_fasta)], capfd)
    if code == 0:
        models = pyhmmer_models(tmp / "m.hmm")
        expected = b""
        for k, hmm in enumerate(models):
            buf = io.BytesIO()
            Pipeline(AMINO).search_hmm(hmm, small_block[0]).write(buf, format="targets", header=(k == 0))
            expected += buf.getvalue()
        assert tblout_rows(tmp / "t") == expected


@CLI_FUZZ
@given(data=mutated(FASTA))
def test_search_command_with_damaged_fasta(tmp_path_factory, capfd, model, data):
    tmp = tmp_path_factory.mktemp("cli")
    (tmp / "db.fa").write_bytes(data)
    code = cli(["search", "--backend", "numba", "-o", str(tmp / "out"), "--tblout", str(tmp / "t"),
                str(SAMPLES / "PF02826.hmm"), str(tmp / "db.fa")], capfd)
    if code == 0:
        buf = io.BytesIO()
        Pipeline(AMINO).search_hmm(model, easel_block(tmp / "db.fa")).write(buf, format="targets")
        assert tblout_rows(tmp / "t") == buf.getvalue()
