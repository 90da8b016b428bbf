"""Where a benchmark result comes from: the commit of the code that ran it."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def commit() -> str:
    """``HMMGPU_COMMIT`` where the session sets it (the GPU machine's copy of the tree carries
    no up-to-date git metadata: ``gpu_session.sh`` reads it from ``.bench/commit``), else this
    checkout's HEAD, with ``-dirty`` when tracked files have changed since."""
    given = os.environ.get("HMMGPU_COMMIT")
    if given:
        return given

    def git(*args) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "--short", "HEAD")
    return head + "-dirty" * bool(head and git("status", "--porcelain", "--untracked-files=no"))
