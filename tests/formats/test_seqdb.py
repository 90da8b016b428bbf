"""The sequence database digitizes like pyhmmer/Easel, round-trips through the makedb format, fails clearly."""
import gzip
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyhmmer
import pytest

from hmmgpu.formats import seqdb
from hmmgpu.errors import HmmgpuError
from hmmgpu.formats.inputs import META_FILE, read_bytes
from hmmgpu.formats.seqdb import EaselSequenceDB, SequenceDB, is_database_dir, open_database

ROOT = Path(__file__).resolve().parents[2]
PROTEOME = ROOT / "pfam_samples" / "938293.PRJEB85.HG003687.faa"
QUIRKS = ROOT / "tests" / "data" / "seqdb" / "quirks.fa"
AMINO = pyhmmer.easel.Alphabet.amino()


def easel_read(path):
    """What pyhmmer/Easel reads from a FASTA file: the DigitalSequenceBlock."""
    with pyhmmer.easel.SequenceFile(str(path), digital=True, alphabet=AMINO, format="fasta") as fh:
        return fh.read_block()


def assert_same_as_easel(db, block):
    assert db.n == len(block)
    for i, seq in enumerate(block):
        assert db.name(i) == seq.name.encode()
        assert db.description(i) == seq.description.encode()
        np.testing.assert_array_equal(db.codes(i), np.asarray(seq.sequence))
    assert db.total_residues == sum(len(s.sequence) for s in block)


def assert_error(call, path, *fragments):
    """call() raises a one-line HmmgpuError naming path and containing each fragment."""
    with pytest.raises(HmmgpuError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message and "\r" not in message
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message, message
    return message


def write(tmp_path, data: bytes, name="db.fa"):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def numpy_reader(path):
    """hmmgpu's own FASTA reader (what ``from_fasta`` uses for non-ASCII text and for errors)."""
    return SequenceDB.digitize_fasta(read_bytes(path, "a sequence file"), path)


#: Both readers behind ``SequenceDB.from_fasta``: Easel's for ASCII text, and the numpy one.
READERS = pytest.mark.parametrize("reader", [SequenceDB.from_fasta, numpy_reader], ids=["from_fasta", "numpy"])

ARRAY_KEYS = ("residues", "offsets", "lengths", "order", "names_blob", "name_offsets", "descriptions_blob",
              "description_offsets", "accessions_blob", "accession_offsets")


def assert_same_arrays(a, b):
    for key in ARRAY_KEYS:
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key), err_msg=key)
    assert a.total_residues == b.total_residues and a.n == b.n


@pytest.fixture(scope="module")
def proteome_block():
    return easel_read(PROTEOME)


@pytest.fixture(scope="module")
def proteome_db():
    return SequenceDB.from_fasta(PROTEOME)


@READERS
def test_proteome_matches_easel(reader, proteome_block):
    db = reader(PROTEOME)
    assert db.n == 2100
    assert db.source == str(PROTEOME)
    assert_same_as_easel(db, proteome_block)


def test_easel_read_database_equals_the_numpy_reader(proteome_db):
    """ASCII FASTA is read by Easel; its arrays, made on first use, equal the numpy reader's."""
    assert isinstance(proteome_db, EaselSequenceDB)
    numpy_db = numpy_reader(PROTEOME)
    assert type(numpy_db) is SequenceDB
    assert_same_arrays(proteome_db, numpy_db)
    assert [proteome_db.name(i) for i in range(5)] == [numpy_db.name(i) for i in range(5)]
    assert proteome_db.looks_like_nucleotide() is numpy_db.looks_like_nucleotide() is False
    assert proteome_db.block() is proteome_db.block()  # the block Easel read, not a copy
    assert proteome_db.digital_sequence(7) is proteome_db.block()[7]
    assert type(SequenceDB.from_fasta(PROTEOME, arrays=True)) is SequenceDB  # the GPU process's read


def test_non_ascii_text_is_read_by_the_numpy_reader(tmp_path):
    path = write(tmp_path, b">s1 caf\xe9\nACD\n>s2\nKL\n")
    db = SequenceDB.from_fasta(path)
    assert type(db) is SequenceDB and db.description(0) == b"caf\xe9" and db.n == 2


def test_ascii_check_in_pieces(monkeypatch):
    """The ASCII check of a large file, split over threads, finds a byte above 127 in any piece."""
    monkeypatch.setattr(seqdb, "_ASCII_PIECE", 7)
    text = b">a desc\nACDEFGHIKLMNPQRSTVWY\n" * 5
    assert seqdb._is_ascii(text)
    for at in (0, 8, len(text) - 1):
        assert not seqdb._is_ascii(text[:at] + b"\xe9" + text[at + 1:])


@READERS
def test_gzip_detected_by_magic_not_extension(reader, tmp_path, proteome_block):
    path = write(tmp_path, gzip.compress(PROTEOME.read_bytes()), name="proteome.dat")
    assert_same_as_easel(reader(path), proteome_block)


@READERS
def test_multimember_gzip(reader, tmp_path, proteome_block):
    data = PROTEOME.read_bytes()
    cut = data.index(b"\n>", len(data) // 2) + 1
    path = write(tmp_path, gzip.compress(data[:cut]) + gzip.compress(data[cut:]), name="bgzip.fa.gz")
    assert_same_as_easel(reader(path), proteome_block)


def test_small_chunks_give_the_same_database(monkeypatch, proteome_db):
    monkeypatch.setattr(seqdb, "_CHUNK", 3000)
    assert_same_arrays(numpy_reader(PROTEOME), proteome_db)


@READERS
def test_quirks_file_matches_easel(reader):
    db = reader(QUIRKS)
    assert_same_as_easel(db, easel_read(QUIRKS))
    assert db.name(0) == b"seq1" and db.description(0) == b"first description  with  spaces   "
    assert [db.name(i) for i in (3, 4)] == [b"leading_blanks", b"mid_line_record"]
    assert db.lengths[2] == 0


# Inputs Easel accepts; each must digitize identically.
ACCEPTED = {
    "every_letter_both_cases": b">s\nABCDEFGHIJKLMNOPQRSTUVWXYZ\nabcdefghijklmnopqrstuvwxyz\n",
    "stop_gap_missing": b">s\nA*C.D_E~F*\n",
    "crlf": b">s1 d e s c \r\nACD\r\nEFG\r\n>s2\r\n\r\nKL\r\n",
    "lone_cr": b">s1\rACD\rEF\r>s2 x\rK\r",
    "blank_lines_and_blank_prefix": b"\n \t\x0b\x0c\r\n>s1\n\nACD\n\n\nEF\n\n>s2\n\n",
    "blanks_inside_sequence": b">s\nA C\tD  E\r\n",
    "zero_length_records": b">s1\n>s2 d\nAC\n>s3\n",
    "no_final_newline": b">s1\nACD",
    "gt_mid_line": b">s1\nAC>D\nEF\n",
    "name_after_blanks": b">  \t s1  \t desc  with   spaces  \nACD\n",
    "vt_ff_end_name": b">s1\x0bdesc\n>s2\x0cx y\nA\n",
    "double_gt": b">>s1\nACD\n",
    "nul_and_ctrl_a_in_header": b">s1\x00x desc\n>s2 d\x01more\nAC\n",
    "utf8_header": ">sé dé\n".encode() + b"ACD\n",
    "duplicate_names": b">s1\nA\n>s1\nC\n",
}


@pytest.mark.parametrize("data", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_accepted_like_easel(tmp_path, data):
    path = write(tmp_path, data)
    db, numpy_db = SequenceDB.from_fasta(path), numpy_reader(path)
    assert_same_as_easel(db, easel_read(path))
    assert_same_as_easel(numpy_db, easel_read(path))
    assert_same_arrays(db, numpy_db)


# Inputs Easel rejects; each must raise HmmgpuError with file, line and culprit.
REJECTED = {
    "at_sign": (b">s1\nACD\n>seq3 x\nAC@D\n", "line 4: invalid character '@' in sequence 'seq3'"),
    "digit": (b">s1\n10 ACDE\n", "line 2: invalid character '1' in sequence 's1'"),
    "dash_gap": (b">s1\nAC-D\n", "invalid character '-'"),
    "semicolon": (b">s1\nAC;D\n", "invalid character ';'"),
    "vertical_tab": (b">s1\nA\x0bC\n", "invalid character '\\x0b'"),
    "non_ascii": (b">s1\nAC\xc3\xa9D\n", "invalid character '\\xc3'"),
    "nul": (b">s1\nAC\x00D\n", "invalid character '\\x00'"),
    "crlf_line_count": (b">s1\r\nAC\r\n>s2\r\nA@\r\n", "line 4: invalid character '@' in sequence 's2'"),
    "lone_cr_line_count": (b">s1\rAC\r>s2\rA@\r", "line 4:"),
    "no_name": (b">\nACD\n", "line 1: '>' header has no sequence name"),
    "blank_name": (b">s1\nA\n>  \t\nACD\n", "line 3: '>' header has no sequence name"),
    "vt_name": (b">\x0bs1\nACD\n", "line 1: '>' header has no sequence name"),
    "text_before_first_record": (b"hello\n>s1\nACD\n", "not a FASTA file: line 1 starts with 'hello'"),
    "comment_line": (b"\n;comment\n>s1\nACD\n", "not a FASTA file: line 2 starts with ';comment'"),
}


@pytest.mark.parametrize("data,fragment", REJECTED.values(), ids=REJECTED.keys())
def test_rejected_like_easel(tmp_path, data, fragment):
    path = write(tmp_path, data)
    with pytest.raises(ValueError):   # Easel rejects it too
        easel_read(path)
    assert_error(lambda: SequenceDB.from_fasta(path), path, fragment)


def test_first_fault_in_file_order_is_reported(tmp_path, monkeypatch):
    path = write(tmp_path, b">a\nAAAA\n>b\nCC#C\n>\nDD\n>c\nE!E\n")
    for chunk in (1 << 20, 4):
        monkeypatch.setattr(seqdb, "_CHUNK", chunk)
        assert_error(lambda: SequenceDB.from_fasta(path), path, "line 4: invalid character '#' in sequence 'b'")


@pytest.mark.parametrize("data", [b"", b"  \n\n\t\r\n"], ids=["zero_bytes", "whitespace"])
def test_empty_file(tmp_path, data):
    path = write(tmp_path, data)
    assert_error(lambda: open_database(path), path, "contains no sequences")
    gz = write(tmp_path, gzip.compress(data), name="db.fa.gz")
    assert_error(lambda: open_database(gz), gz, "contains no sequences")


def test_hmm_file_is_not_fasta(tmp_path):
    path = ROOT / "pfam_samples" / "KR.hmm"
    assert_error(lambda: open_database(path), path, "unrecognized sequence file format (line 1 starts with 'HMMER3",
                 "--tformat")
    assert_error(lambda: open_database(path, "fasta"), path, "not a FASTA file: line 1 starts with 'HMMER3")


def test_binary_garbage_is_not_fasta(tmp_path):
    path = write(tmp_path, bytes(range(256)) * 4, name="garbage.bin")
    assert_error(lambda: open_database(path), path, "unrecognized sequence file format")
    assert_error(lambda: open_database(path, "fasta"), path, "not a FASTA file", "expected '>'")


def test_missing_file(tmp_path):
    path = tmp_path / "nope.fa"
    assert_error(lambda: open_database(path), path, "no such file or directory")
    assert_error(lambda: SequenceDB.from_fasta(path), path, "no such file or directory")


def test_directory_that_is_not_a_database(tmp_path):
    (tmp_path / "stuff.txt").write_text("x")
    assert not is_database_dir(tmp_path)
    assert_error(lambda: open_database(tmp_path), tmp_path, "not a hmmgpu database", "makedb")
    assert_error(lambda: SequenceDB.from_fasta(tmp_path), tmp_path, "is a directory")


def test_truncated_gzip(tmp_path):
    data = gzip.compress(PROTEOME.read_bytes())
    path = write(tmp_path, data[: len(data) // 2], name="cut.fa.gz")
    assert_error(lambda: open_database(path), path, "truncated gzip")
    path = write(tmp_path, data[:5], name="stub.fa.gz")
    assert_error(lambda: open_database(path), path, "gzip")


def test_corrupt_gzip(tmp_path):
    data = bytearray(gzip.compress(PROTEOME.read_bytes()))
    data[100:200] = bytes(100)
    path = write(tmp_path, bytes(data), name="bad.fa.gz")
    assert_error(lambda: open_database(path), path, "corrupt gzip")
    path = write(tmp_path, gzip.compress(b">s\nAC\n") + b"trailing junk", name="junk.fa.gz")
    assert_error(lambda: open_database(path), path, "corrupt gzip")


def test_nucleotide_file_is_accepted_but_flagged(tmp_path, proteome_db):
    path = write(tmp_path, b">chr1 dna\n" + b"ACGTTGCANNACGTAGCTAGCTGATCGAT\n" * 50)
    db = open_database(path)
    assert db.n == 1 and db.total_residues == 29 * 50
    assert db.looks_like_nucleotide()
    assert not proteome_db.looks_like_nucleotide()


def test_very_long_sequence_parses(tmp_path):
    rng = np.random.default_rng(1)
    residues = rng.choice(list(b"ACDEFGHIKLMNPQRSTVWY"), size=100_001).astype(np.uint8).tobytes()
    lines = b"\n".join(residues[i:i + 60] for i in range(0, len(residues), 60))
    path = write(tmp_path, b">short\nMKV\n>huge giant\n" + lines + b"\n")
    db = SequenceDB.from_fasta(path)
    assert db.lengths.tolist() == [3, 100_001]
    assert db.max_length == 100_001 and db.order.tolist() == [1, 0]
    assert_same_as_easel(db, easel_read(path))


def test_order_is_stable_length_descending(proteome_db):
    order, lengths = proteome_db.order, proteome_db.lengths
    assert sorted(order.tolist()) == list(range(proteome_db.n))
    assert np.all(np.diff(lengths[order]) <= 0)
    same = np.diff(lengths[order]) == 0
    assert np.all(np.diff(order)[same] > 0)   # ties keep file order
    assert proteome_db.max_length == lengths.max()


def test_offsets_and_zero_length_sequences(tmp_path):
    db = SequenceDB.from_fasta(write(tmp_path, b">a\nACD\n>empty desc\n>b\nK\n>end\n"))
    assert db.n == 4 and db.lengths.tolist() == [3, 0, 1, 0]
    assert db.offsets.tolist() == [0, 3, 3, 4] and db.total_residues == 4
    assert db.codes(1).size == 0 and db.description(1) == b"desc"
    assert db.order.tolist() == [0, 2, 1, 3]


def test_digital_sequence_and_block_equal_easel(proteome_db, proteome_block):
    assert proteome_db.digital_sequence(7) == proteome_block[7]
    assert proteome_db.block() == proteome_block
    picked = proteome_db.order[:5]
    block = proteome_db.block(picked)
    assert isinstance(block, pyhmmer.easel.DigitalSequenceBlock)
    assert [s.name for s in block] == [proteome_block[int(i)].name for i in picked]
    assert all(s == proteome_block[int(i)] for s, i in zip(block, picked))


def test_names_and_sequences_of_every_kind_of_database(tmp_path, proteome_db, proteome_block):
    """``names()`` (read at once) and ``name(i)`` agree with Easel's names for the numpy
    reader's database, a made (memory-mapped) one and Easel's own; the made database's
    sequences (sliced through memoryviews) equal Easel's."""
    expected = [seq.name.encode() for seq in proteome_block]
    proteome_db.save(tmp_path / "made")
    made = SequenceDB.load(tmp_path / "made")
    for db in (numpy_reader(PROTEOME), made, proteome_db):
        assert db.names() == expected
        assert [db.name(i) for i in range(db.n)] == expected
    assert made.block() == proteome_block
    assert [made.description(i) for i in range(made.n)] == [seq.description.encode() for seq in proteome_block]


def test_save_load_round_trip(tmp_path, proteome_db, proteome_block):
    out = tmp_path / "made"
    proteome_db.save(out)
    assert is_database_dir(out)
    loaded = SequenceDB.load(out)
    for key in ("residues", "offsets", "lengths", "order", "names_blob", "name_offsets",
                "descriptions_blob", "description_offsets"):
        array = getattr(loaded, key)
        assert isinstance(array, np.memmap), key
        np.testing.assert_array_equal(array, getattr(proteome_db, key))
    assert loaded.source == str(out) and loaded.max_length == proteome_db.max_length
    assert_same_as_easel(loaded, proteome_block)
    assert open_database(out).n == proteome_db.n
    assert loaded.digital_sequence(3) == proteome_block[3]


def test_a_made_database_records_what_the_range_route_needs(tmp_path, proteome_block):
    """makedb records whether the targets write as FASTA and how many names repeat; a load
    takes them from there (none repeating: no pass over the names), and a database made
    before they were recorded works them out as any database does."""
    seqs = list(proteome_block)
    cases = {"plain": seqs, "repeated": seqs[:5] + [seqs[1]] + seqs[5:],
             "accession": [pyhmmer.easel.DigitalSequence(AMINO, name=b"s1", accession=b"A1",
                                                         sequence=seqs[0].sequence)] + seqs[1:3]}
    for label, targets in cases.items():
        made = SequenceDB.from_block(pyhmmer.easel.DigitalSequenceBlock(AMINO, targets))
        made.save(tmp_path / label)
        facts = json.loads((tmp_path / label / META_FILE).read_text())["facts"]
        assert facts == dict(writes_as_fasta=label != "accession", repeated_names=2 * (label == "repeated")), label
        loaded = SequenceDB.load(tmp_path / label)
        assert "writes_as_fasta" in loaded.__dict__ and loaded.writes_as_fasta == made.writes_as_fasta
        assert ("repeated_names" in loaded.__dict__) == (label != "repeated")
        np.testing.assert_array_equal(loaded.repeated_names, made.repeated_names)
        meta = json.loads((tmp_path / label / META_FILE).read_text())
        del meta["facts"]  # as a database made before the facts were recorded
        (tmp_path / label / META_FILE).write_text(json.dumps(meta))
        old = SequenceDB.load(tmp_path / label)
        assert "writes_as_fasta" not in old.__dict__ and "repeated_names" not in old.__dict__
        assert old.writes_as_fasta == made.writes_as_fasta
        np.testing.assert_array_equal(old.repeated_names, made.repeated_names)


def test_from_block_round_trip(tmp_path, proteome_block):
    db = SequenceDB.from_block(proteome_block)
    assert_same_as_easel(db, proteome_block)
    db.save(tmp_path / "db")
    assert_same_as_easel(SequenceDB.load(tmp_path / "db"), proteome_block)


def test_from_block_rejects_nucleotides():
    dna = pyhmmer.easel.Alphabet.dna()
    block = pyhmmer.easel.DigitalSequenceBlock(dna, [pyhmmer.easel.DigitalSequence(dna, name=b"x")])
    with pytest.raises(HmmgpuError, match="amino"):
        SequenceDB.from_block(block)


def test_damaged_databases(tmp_path):
    db = SequenceDB.from_fasta(QUIRKS)
    out = tmp_path / "db"
    db.save(out)
    meta = (out / seqdb.META_FILE).read_text()

    (out / seqdb.META_FILE).write_text(meta.replace(f'"version": {seqdb.FORMAT_VERSION}', '"version": 99'))
    assert_error(lambda: SequenceDB.load(out), out, "version 99 is not supported")
    (out / seqdb.META_FILE).write_text("{not json")
    assert_error(lambda: open_database(out), out, "unreadable hmmgpu-db.json")
    (out / seqdb.META_FILE).write_text('{"format": "something-else"}')
    assert_error(lambda: open_database(out), out, "does not describe a hmmgpu sequence database")
    (out / seqdb.META_FILE).write_text(meta)
    np.save(out / "lengths.npy", np.zeros(3, dtype=np.int64))
    assert_error(lambda: open_database(out), out, "damaged database: lengths.npy")
    os.remove(out / "residues.npy")
    assert_error(lambda: open_database(out), out, "damaged database: cannot map residues.npy")


def test_save_refuses_to_overwrite_its_own_files(tmp_path):
    out = tmp_path / "db"
    SequenceDB.from_fasta(QUIRKS).save(out)
    loaded = SequenceDB.load(out)
    assert_error(lambda: loaded.save(out), out, "over itself")
    loaded.save(tmp_path / "copy")
    assert SequenceDB.load(tmp_path / "copy").n == loaded.n


def test_save_replaces_an_old_database_whole(tmp_path):
    """A save over a database (whole, or half written: its files only) swaps the new one in:
    none of the old files stay, nothing is left beside it; a link to a database replaces the
    database it names and stays a link; an empty directory is taken as it is."""
    small = SequenceDB.from_fasta(QUIRKS)
    big = SequenceDB.digitize_fasta(PROTEOME.read_bytes(), str(PROTEOME))
    out = tmp_path / "db"
    big.save(out)
    small.save(out)
    assert SequenceDB.load(out, check="full").n == small.n
    assert sorted(os.listdir(tmp_path)) == ["db"]
    os.remove(out / META_FILE)   # as a save cut short by an older hmmgpu left it
    big.save(out)
    assert SequenceDB.load(out, check="full").n == big.n
    os.symlink(out, tmp_path / "link")
    small.save(tmp_path / "link")
    assert os.path.islink(tmp_path / "link") and SequenceDB.load(out, check="full").n == small.n
    (tmp_path / "empty").mkdir()
    small.save(tmp_path / "empty")
    assert sorted(os.listdir(tmp_path)) == ["db", "empty", "link"]


def test_save_refuses_what_is_not_a_database(tmp_path):
    """A file, a directory holding other files, or a missing parent: one-line errors, and the
    file or directory is left as it was."""
    db = SequenceDB.from_fasta(QUIRKS)
    (tmp_path / "file").write_text("mine\n")
    assert_error(lambda: db.save(tmp_path / "file"), tmp_path / "file", "is not a directory")
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "notes.txt").write_text("mine\n")
    assert_error(lambda: db.save(tmp_path / "dir"), tmp_path / "dir", "is not a hmmgpu database", "notes.txt")
    assert_error(lambda: db.save(tmp_path / "no" / "db"), tmp_path / "no" / "db", "parent directory does not exist")
    assert (tmp_path / "file").read_text() == (tmp_path / "dir" / "notes.txt").read_text() == "mine\n"
    assert sorted(os.listdir(tmp_path)) == ["dir", "file"] and os.listdir(tmp_path / "dir") == ["notes.txt"]


# ---------------------------------------------------------------- made databases are checked at open


@pytest.fixture()
def made(tmp_path, proteome_db):
    out = tmp_path / "made"
    proteome_db.save(out)
    return out


def _rewrite(path, edit):
    """Apply edit() to the array in a .npy file and write it back (a new modification time)."""
    array = np.load(path).copy()
    edit(array)
    np.save(path, array)


def test_edited_lengths_are_refused(made):
    def swap_two(lengths):   # same size and same sum: only the checksum sees it
        lengths[[0, 1]] = lengths[[1, 0]]
    _rewrite(made / "lengths.npy", swap_two)
    assert_error(lambda: open_database(made), made, "damaged database")


def test_edited_residues_are_refused_by_default(made):
    _rewrite(made / "residues.npy", lambda residues: residues.__setitem__(1000, (residues[1000] + 1) % 20))
    assert_error(lambda: open_database(made), made, "residues.npy was changed", "remake")


def test_edited_residues_with_old_times_need_the_full_check(made):
    path = made / "residues.npy"
    info = os.stat(path)
    with open(path, "r+b") as fh:   # an edit in place that restores the modification time
        fh.seek(info.st_size - 10)
        byte = fh.read(1)
        fh.seek(info.st_size - 10)
        fh.write(bytes([(byte[0] + 1) % 20]))
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
    assert SequenceDB.load(made).n == 2100
    assert_error(lambda: seqdb.check_database(made), made, "residues.npy was changed")


@pytest.mark.parametrize("key,edit,fragment", [
    ("offsets", lambda a: a.__setitem__(5, a[5] + 1), "offsets.npy and lengths.npy disagree"),
    ("order", lambda a: a.__setitem__(0, a[1]), "order.npy"),
    ("names", lambda a: a.__setitem__(3, ord("Z")), "names.npy was changed"),
    ("description_offsets", lambda a: a.__setitem__(-1, a[-1] + 1), "description_offsets.npy"),
], ids=["offsets", "order", "names", "description_offsets"])
def test_edited_small_arrays_are_refused(made, key, edit, fragment):
    _rewrite(made / f"{key}.npy", edit)
    assert_error(lambda: open_database(made), made, fragment)


def test_copied_database_passes_the_full_check(made, tmp_path, proteome_block):
    copy = tmp_path / "copy"
    copy.mkdir()
    for item in made.iterdir():
        (copy / item.name).write_bytes(item.read_bytes())   # new modification times, same content
    assert_same_as_easel(seqdb.check_database(copy), proteome_block)
    assert_same_as_easel(open_database(copy), proteome_block)


def test_metadata_without_checksums_is_refused(made):
    meta = json.loads((made / seqdb.META_FILE).read_text())
    del meta["files"]["residues"]["sha256"]
    (made / seqdb.META_FILE).write_text(json.dumps(meta))
    assert_error(lambda: open_database(made), made, "lacks sizes or checksums")


# ---------------------------------------------------------------- standard input, --tformat, bytes


def test_standard_input(monkeypatch, proteome_block):
    class Stdin:
        buffer = io.BytesIO(gzip.compress(PROTEOME.read_bytes()))
    monkeypatch.setattr(sys, "stdin", Stdin)
    db = open_database("-")
    assert db.source == "-"
    assert_same_as_easel(db, proteome_block)


def test_dev_stdin_pipe(tmp_path):
    script = "from hmmgpu.formats.seqdb import open_database; print(open_database('/dev/stdin').n)"
    for stdin in (dict(input=PROTEOME.read_bytes()), dict(stdin=open(PROTEOME, "rb"))):   # a pipe, a file
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, cwd=ROOT, **stdin)
        assert done.stdout.strip() == b"2100", done.stderr


def test_errors_on_standard_input_name_it(monkeypatch):
    class Stdin:
        buffer = io.BytesIO(b">a\nMK1V\n")
    monkeypatch.setattr(sys, "stdin", Stdin)
    with pytest.raises(HmmgpuError, match=r"^standard input: line 2: invalid character '1'"):
        open_database("-")


def uniprot_record(name, accession, description, sequence: bytes) -> bytes:
    lines = [b"ID   %s   Reviewed;   %d AA." % (name, len(sequence)), b"AC   %s;" % accession,
             b"DE   %s" % description, b"SQ   SEQUENCE   %d AA;" % len(sequence)]
    lines += [b"     " + b" ".join(sequence[i + j:i + j + 10] for j in range(0, 60, 10) if sequence[i + j:i + j + 10])
              for i in range(0, len(sequence), 60)]
    return b"\n".join(lines) + b"\n//\n"


def test_tformat_uniprot_keeps_accessions(tmp_path, proteome_db):
    path = tmp_path / "proteins.dat"
    path.write_bytes(b"".join(
        uniprot_record(b"P%d_HUMAN" % i, b"Q%05d" % i, b"protein %d" % i, proteome_db.block([i])[0].textize().sequence.encode())
        for i in range(20)))
    db = open_database(path, format="UniProt")
    with pyhmmer.easel.SequenceFile(str(path), format="uniprot", digital=True, alphabet=AMINO) as fh:
        block = fh.read_block()
    assert_same_as_easel(db, block)
    assert db.accession(3) == b"Q00003" and db.name(3) == b"P3_HUMAN"
    assert db.digital_sequence(3).accession == "Q00003"
    for i in range(20):
        np.testing.assert_array_equal(db.codes(i), proteome_db.codes(i))
    out = tmp_path / "made"
    db.save(out)
    assert SequenceDB.load(out).accession(19) == b"Q00019"


def test_tformat_errors(tmp_path):
    path = write(tmp_path, b">a\nMKV\n")
    assert_error(lambda: open_database(path, format="fastq"), "fastq", "not a recognized sequence database file format")
    assert_error(lambda: open_database(path, format="embl"), path, "not a valid embl file")
    assert open_database(path, format="FASTA").n == 1


def test_description_bytes_are_kept(tmp_path):
    db = open_database(write(tmp_path, b">s1 caf\xe9 \xff\xfe\nMKV\n"))
    assert db.description(0) == b"caf\xe9 \xff\xfe"
    assert db.block()[0].sequence is not None


@pytest.mark.parametrize("data", [ACCEPTED[k] for k in ("every_letter_both_cases", "stop_gap_missing", "crlf",
                                                         "zero_length_records", "name_after_blanks", "double_gt",
                                                         "nul_and_ctrl_a_in_header", "utf8_header", "duplicate_names")]
                         + [QUIRKS.read_bytes()])
def test_fasta_text_reads_back_as_the_same_targets(tmp_path, data):
    """A made database's targets written as FASTA text (pyhmmer's route over ranges reads them
    so) are, read by Easel, the same targets: names, descriptions (trailing blanks kept) and
    every residue code (gaps, '*', '~', zero-length targets); any range of them."""
    db = numpy_reader(write(tmp_path, data))
    assert db.writes_as_fasta
    for start, stop in ((0, db.n), (1, db.n), (0, db.n - 1), (db.n - 1, db.n)):
        if start == stop:
            assert db.fasta_text(start, stop) == b""
            continue
        block = pyhmmer.easel.SequenceFile(io.BytesIO(db.fasta_text(start, stop)), format="fasta", digital=True,
                                           alphabet=AMINO).read_block()
        assert [(s.name, s.description, bytes(s.sequence)) for s in block] == [
            (db.name(i).decode(), db.description(i).decode(), db.codes(i).tobytes()) for i in range(start, stop)]


def test_fasta_text_of_the_proteome_equals_its_file(proteome_db, proteome_block):
    """The sample proteome's text, written from its arrays, reads back as Easel reads its file."""
    text = proteome_db.fasta_text(0, proteome_db.n)
    assert_same_as_easel(SequenceDB.digitize_fasta(text, "text"), proteome_block)
    assert proteome_db.fasta_text(5, 5) == b""


@pytest.mark.parametrize("change", ["accession", "name_blank", "description_blank", "description_cr", "code"])
def test_targets_fasta_cannot_write_are_said_so(proteome_block, change):
    """A target whose accession, name or description FASTA text cannot carry (a database made
    from another format): ``writes_as_fasta`` is False. A residue code that is none (edited
    arrays) is written as '-', which Easel refuses (one line, not a wrong target)."""
    seqs = [s.copy() for s in list(proteome_block)[:20]]
    edit = {"accession": lambda s: setattr(s, "accession", "Q12345"),
            "name_blank": lambda s: setattr(s, "name", "two words"),
            "description_blank": lambda s: setattr(s, "description", " leading blank"),
            "description_cr": lambda s: setattr(s, "description", "a\rb")}
    if change in edit:
        edit[change](seqs[7])
    db = SequenceDB.from_block(pyhmmer.easel.DigitalSequenceBlock(AMINO, seqs))
    if change == "code":
        db.residues[3] = 29
        assert db.writes_as_fasta and db.fasta_text(0, 1).split(b"\n")[1][3:4] == b"-"
        with pytest.raises(HmmgpuError, match="invalid character '-'"):
            SequenceDB.digitize_fasta(db.fasta_text(0, 1), "text")
        return
    assert not db.writes_as_fasta
