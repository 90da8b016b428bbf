"""The progress bar: on standard error only when it is a terminal, and off the screen while the
report is written to the same terminal."""
import os
import pty
import re
import subprocess
import sys

from tests.helpers import PROTEOME, ROOT, SAMPLES

SCRIPT = r"""
import sys, time
from hmmgpu.report.progress import ProgressBar
with ProgressBar(3, "searching", report=sys.stdout) as bar:
    for i in range(3):
        time.sleep(0.3)
        with bar.clear():
            sys.stdout.buffer.write(b"REPORT LINE %d OF THE QUERY\n" % i)
            sys.stdout.flush()
        bar.advance(f"model {i}")
"""


def run(stdout_tty: bool, stderr_tty: bool, argv=None):
    """(stdout bytes, stderr bytes) of the script (or of ``python argv``); a tty stream is read
    from a pseudo-terminal."""
    master, slave = pty.openpty()
    out = slave if stdout_tty else subprocess.PIPE
    err = slave if stderr_tty else subprocess.PIPE
    proc = subprocess.Popen([sys.executable, *(argv or ["-c", SCRIPT])], stdout=out, stderr=err, cwd=ROOT,
                            env=dict(os.environ, COLUMNS="100", TERM="xterm"))
    os.close(slave)
    screen = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:   # the terminal closes when the process ends
            break
        if not chunk:
            break
        screen += chunk
    stdout, stderr = (proc.stdout.read() if proc.stdout else b""), (proc.stderr.read() if proc.stderr else b"")
    proc.wait()
    os.close(master)
    assert proc.returncode == 0, stderr
    return (screen if stdout_tty else stdout), (screen if stderr_tty else stderr)


def test_no_bar_when_stderr_is_not_a_terminal():
    stdout, stderr = run(stdout_tty=False, stderr_tty=False)
    assert stderr == b""
    assert stdout.count(b"REPORT LINE") == 3


def test_bar_on_a_terminal_and_report_lines_whole():
    _, screen = run(stdout_tty=False, stderr_tty=True)
    assert b"model" in screen or b"searching" in screen
    stdout, _ = run(stdout_tty=False, stderr_tty=True)
    assert stdout == b"".join(b"REPORT LINE %d OF THE QUERY\n" % i for i in range(3))
    screen, _ = run(stdout_tty=True, stderr_tty=True)
    # one terminal: each report line starts on a line the bar was erased from (or a new one),
    # not glued after the bar's last character
    for i in range(3):
        assert re.search(rb"(\x1b\[2K|\n)REPORT LINE %d OF THE QUERY\r\n" % i, screen), screen


BAR = "\u2501".encode()   # the bar's line character


def test_search_report_and_bar_on_one_terminal():
    screen, _ = run(True, True, ["-m", "hmmgpu", "search", "--cpu", "1", str(SAMPLES / "samples.hmm"), str(PROTEOME)])
    assert BAR in screen                                    # a bar was shown
    assert screen.count(b"Query:       ") == 4
    for start in [m.start() for m in re.finditer(rb"Query:       |\[ok\]", screen)]:
        assert screen[:start].endswith((b"\n", b"\x1b[2K")), screen[start - 80:start + 20]
    assert b"\x1b[2K" in screen[screen.rindex(BAR):]        # and erased at the end
