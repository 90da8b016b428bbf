"""Output files appear whole or not at all; a failed run leaves existing files untouched."""
import os
import stat

import pytest

from hmmgpu.errors import HmmgpuError
from hmmgpu.formats.outfiles import OutputFiles


def test_success_renames_into_place(tmp_path):
    target = tmp_path / "hits.tbl"
    target.write_bytes(b"old table\n")
    os.chmod(target, 0o640)
    with OutputFiles() as outputs:
        fh = outputs.open(target, "--tblout")
        fh.write(b"new ")
        assert target.read_bytes() == b"old table\n"   # nothing visible while the run goes on
        fh.write(b"table\n")
    assert target.read_bytes() == b"new table\n"
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hits.tbl"]


def test_failure_leaves_old_files_and_no_debris(tmp_path):
    old = tmp_path / "hits.tbl"
    old.write_bytes(b"good table from yesterday\n")
    with pytest.raises(HmmgpuError):
        with OutputFiles() as outputs:
            outputs.open(old, "--tblout").write(b"half a tab")
            outputs.open(tmp_path / "new.out", "-o").write(b"partial")
            raise HmmgpuError("model 7: bad")
    assert old.read_bytes() == b"good table from yesterday\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hits.tbl"]


def test_interrupt_discards(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with OutputFiles() as outputs:
            outputs.open(tmp_path / "a", "-o").write(b"x")
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_new_file_gets_fopen_permissions(tmp_path):
    umask = os.umask(0o027)
    try:
        with OutputFiles() as outputs:
            outputs.open(tmp_path / "new", "-o").write(b"x")
    finally:
        os.umask(umask)
    assert stat.S_IMODE(os.stat(tmp_path / "new").st_mode) == 0o640


def test_unwritable_targets_fail_at_open(tmp_path):
    outputs = OutputFiles()
    with pytest.raises(HmmgpuError, match="^--tblout .*/missing/t.tbl: cannot open for writing"):
        outputs.open(tmp_path / "missing" / "t.tbl", "--tblout")
    with pytest.raises(HmmgpuError, match="^-o .*: is a directory"):
        outputs.open(tmp_path, "-o")
    outputs.open(tmp_path / "same", "-o")
    with pytest.raises(HmmgpuError, match="^-o and --domtblout name the same file"):
        outputs.open(tmp_path / "same", "--domtblout")
    outputs.open("/dev/null", "--tblout")  # as hmmsearch: /dev/null takes any number of outputs
    outputs.open("/dev/null", "--pfamtblout")
    outputs.discard()
    assert list(tmp_path.iterdir()) == []


def test_devices_are_written_in_place(tmp_path):
    with OutputFiles() as outputs:
        outputs.open("/dev/null", "-o").write(b"discarded")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- outputs that name an input


def test_an_output_naming_an_input_is_refused_under_any_spelling(tmp_path, monkeypatch):
    """The same file as an input, spelled as given, relatively, through a link or a hard
    link, is refused with one line naming the option; other paths, ``-`` and devices pass."""
    from hmmgpu.errors import InputError
    from hmmgpu.formats.outfiles import refuse_inputs

    fasta = tmp_path / "in.fa"
    fasta.write_text(">a\nMKV\n")
    (tmp_path / "sub").mkdir()
    os.symlink(fasta, tmp_path / "link.fa")
    os.link(fasta, tmp_path / "hard.fa")
    monkeypatch.chdir(tmp_path / "sub")
    for spelling in (str(fasta), "../in.fa", str(tmp_path / "sub" / ".." / "in.fa"), str(tmp_path / "link.fa"),
                     "../hard.fa"):
        with pytest.raises(InputError, match=r"^--tblout .*: names the input .*in\.fa \(an output may not "
                                             r"overwrite an input\)$"):
            refuse_inputs({"-o": "r.txt", "--tblout": spelling}, ["-", str(fasta)])
    refuse_inputs({"-o": "r.txt", "--tblout": "/dev/null", "-A": None}, ["-", str(fasta), str(tmp_path / "nope")])
    assert fasta.read_text() == ">a\nMKV\n"


def test_an_output_inside_an_input_directory_is_refused(tmp_path):
    """A made database is a directory: an output among its files is refused too."""
    from hmmgpu.errors import InputError
    from hmmgpu.formats.outfiles import refuse_inputs

    made = tmp_path / "made"
    made.mkdir()
    (made / "residues.npy").write_bytes(b"x")
    with pytest.raises(InputError, match="^-o .*residues.npy: lies inside the input"):
        refuse_inputs({"-o": str(made / "residues.npy")}, [str(made)])
    with pytest.raises(InputError, match="^--domtblout .*new.tbl: lies inside the input"):
        refuse_inputs({"--domtblout": str(made / "new.tbl")}, [str(made)])
    refuse_inputs({"-o": str(tmp_path / "made.txt")}, [str(made)])   # a sibling that shares the prefix


def test_a_link_to_an_output_is_written_through(tmp_path):
    """An output given as a symbolic link is written where the link points, as fopen does
    (the link stays a link), and two spellings of one file are one output named twice."""
    real = tmp_path / "real.tbl"
    real.write_bytes(b"old\n")
    os.symlink(real, tmp_path / "link.tbl")
    with OutputFiles() as outputs:
        outputs.open(tmp_path / "link.tbl", "--tblout").write(b"new\n")
        with pytest.raises(HmmgpuError, match="^--tblout and -o name the same file"):
            outputs.open(real, "-o")
    assert os.path.islink(tmp_path / "link.tbl") and real.read_bytes() == b"new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.tbl", "real.tbl"]


def test_discard_unfinished_removes_what_a_run_left_open(tmp_path):
    """The command line's last word on an interrupt: temporary files of outputs never
    committed or discarded are removed, committed outputs stay."""
    from hmmgpu.formats.outfiles import discard_unfinished

    done = OutputFiles()
    done.open(tmp_path / "kept", "-o").write(b"kept")
    done.commit()
    left = OutputFiles()
    left.open(tmp_path / "a", "-o").write(b"x")
    left.open(tmp_path / "b", "--tblout").write(b"y")
    assert len(list(tmp_path.iterdir())) == 3
    discard_unfinished()
    assert [p.name for p in tmp_path.iterdir()] == ["kept"]
