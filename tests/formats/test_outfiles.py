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
