"""Where a benchmark result comes from: the commit of the code that ran it.

The GPU machine's copy of the tree carries no git metadata, so a session there is told the
commit: ``python3 benchmarks/provenance.py .bench`` writes this checkout's commit and a
digest of its code to ``.bench/commit`` and ``.bench/digest``, and ``gpu_session.sh`` passes
them on as ``HMMGPU_COMMIT`` and ``HMMGPU_CODE_DIGEST``. A result whose code does not match
the digest (the files were written before the last commit) says so in its commit field.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def code_digest() -> str:
    """A digest of the code that runs: hmmgpu's and the benchmarks' Python files."""
    digest = hashlib.sha256()
    for path in sorted([*ROOT.glob("hmmgpu/**/*.py"), *ROOT.glob("benchmarks/*.py")]):
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def commit() -> str:
    """``HMMGPU_COMMIT`` where the session sets it (marked stale when this tree's code does not
    match ``HMMGPU_CODE_DIGEST``), else this checkout's HEAD, with ``-dirty`` when tracked
    files have changed since."""
    given = os.environ.get("HMMGPU_COMMIT")
    if given:
        expected = os.environ.get("HMMGPU_CODE_DIGEST")
        if expected is not None and expected != code_digest():
            return f"{given}-stale (the code that ran is not that commit's)"
        return given

    def git(*args) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "--short", "HEAD")
    return head + "-dirty" * bool(head and git("status", "--porcelain", "--untracked-files=no"))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python3 benchmarks/provenance.py DIR (writes DIR/commit and DIR/digest)")
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    (out / "commit").write_text(commit() + "\n")
    (out / "digest").write_text(code_digest() + "\n")
    print(f"{out}: commit {commit()}, code digest {code_digest()}")
