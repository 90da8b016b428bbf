"""HMMER 3.4's own test suite, run with ``hmmgpu search`` and ``hmmgpu scan`` in place of hmmsearch and hmmscan.

    python3 tests/hmmer_testsuite.py HMMER_SRC [--easel DIR] [--keep DIR] [-v]

``HMMER_SRC`` is HMMER 3.4's source tree (its ``testsuite/`` and ``tutorial/``); no HMMER
build is needed. The other HMMER programs (hmmbuild, hmmpress, hmmemit, phmmer, ...) are the
``hmmer`` package's binaries on ``PATH``; ``--easel DIR`` names a directory holding Easel's
miniapps (``esl-shuffle``, ``esl-reformat``, ``esl-sfetch``, ``esl-afetch``), which that
package does not ship (default: ``HMMER_SRC/easel/miniapps``, where ``./configure && make``
in a HMMER release tree builds them). Steps that need a missing program are reported, never
counted as passed.

HMMER's suite is ``testsuite/testsuite.sqc``, read by Easel's ``sqc``: ``prep`` lines make
inputs, ``exercise`` lines run a command that must exit 0. ``@src/X@`` names a program of
the build, ``!path!`` a file of the source tree, ``%NAME%`` a temporary file, ``@@`` and
``!!`` the build and source directories. Lines run in file order, since a later ``prep``
may remake a file (``%TESTSEQ%`` is made twice). Of the level-1 lines, this harness runs:

* the **option exercises** that run hmmsearch or hmmscan (66 in 3.4): each runs twice, once
  with HMMER's program and once with hmmgpu's, each in its own directory where the inputs
  have the same relative names. It passes when both exit 0 and every output (standard
  output, the ``-o`` report, the tables, the ``-A`` alignment) is the same after the lines
  that only name the program or time the run: the report's four banner lines and its
  ``# CPU time``/``# Mc/sec`` lines, the tables' ``#`` tail (program, command line,
  directory, date) and the alignment's ``#=GF AU`` line. The ``-h`` exercises pass on exit
  status 0 alone: hmmgpu's help lists its own options.
* the **integration scripts** that run hmmsearch or hmmscan (10 exercises: i2 twice, i4, i8,
  i9, i10, i13, i17, i21, i23), run as sqc runs them, against a build directory whose
  ``src/hmmsearch`` and ``src/hmmscan`` are scripts that run ``python3 -m hmmgpu search``
  and ``scan``, whose other ``src/`` programs are the ``hmmer`` package's, and whose
  ``easel/miniapps/`` holds what ``--easel`` gives.

Where hmmgpu does more than HMMER, the check of i17 that expects a refusal is adapted, in a
copy of the script, to expect what hmmgpu does instead: ``hmmscan - seqfile`` (models from
standard input, which hmmscan refuses because it needs pressed files) and ``hmmsearch
models.hmm -`` with several models (hmmsearch cannot rewind standard input; hmmgpu reads it
once) must succeed with the output of the same run from files. Its checks of the error
message for ``hmmsearch - -`` accept hmmgpu's ``hmmgpu: error: `` before HMMER's words.

The pytest test ``tests/test_hmmer_testsuite.py`` runs the option exercises from a copy of
their lines and data in ``tests/data/hmmer_testsuite/`` (no network, no HMMER source).
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: The programs replaced by hmmgpu's commands.
REPLACED = {"hmmsearch": "search", "hmmscan": "scan"}
#: HMMER's integration scripts that run hmmsearch or hmmscan.
INTEGRATION_SCRIPTS = ("i2-search-variation.sh", "i4-zerolength-seqs.sh", "i8-nonresidues.pl",
                       "i9-optional-annotation.pl", "i10-duplicate-names.pl", "i13-msa-integrity.pl",
                       "i17-stdin.pl", "i21-rewind.pl", "i23-bad-fasta.sh")
EASEL_MINIAPPS = ("esl-shuffle", "esl-reformat", "esl-sfetch", "esl-afetch")
_LINE = re.compile(r"^(\d+)\s+(exercise|prep)\s+(\S+)\s+(.*\S)\s*$")
_FREE_REPORT_LINE = re.compile(rb"^# (CPU time|Mc/sec):")
_TABLE_TAIL = b"#\n# Program:"
_ALIGNMENT_AUTHOR = re.compile(rb"^#=GF AU .*\n", re.M)

#: The checks of i17 adapted to what hmmgpu does beyond HMMER (see the module's docstring).
_I17_ADAPTED = [
    ('if ($output !~ /^Either <hmmfile> or <seqdb>/)', 'if ($output !~ /^(hmmgpu: error: )?Either <hmmfile> or <seqdb>/)'),
    ('$output = `cat $arg1 | $prog - $arg2 2>&1`;\n'
     'if (! $?) { die "FAIL: $tag should reject - for $tag1\\n"; }\n'
     'if ($output !~ /^hmmscan cannot read/) { die "FAIL: hmmscan didn\'t give expected error message\\n"; }',
     '`cat $arg1 | $prog - $arg2 | grep -v "^#" > $tmppfx.out3`;   if ($?) { die "FAIL: $tag - $tag2\\n"; }\n'
     '`diff -b $tmppfx.out1 $tmppfx.out3 2>&1 > /dev/null`;\n'
     'if ($?) { die "FAIL: $tag results differ if $tag1 comes from stdin\\n"; }'),
    ('$output = `cat $arg2 | $prog $arg1b - 2>&1`;     if (! $?) { die "FAIL: $prog should fail on multiquery $tag1, stdin $tag2.\\n"; }',
     '`$prog $arg1b $arg2 | grep -v "^#" > $tmppfx.out4`;        if ($?) { die "FAIL: $prog multiquery\\n"; }\n'
     '`cat $arg2 | $prog $arg1b - | grep -v "^#" > $tmppfx.out5`;  if ($?) { die "FAIL: $prog multiquery, stdin $tag2\\n"; }\n'
     '`diff -b $tmppfx.out4 $tmppfx.out5 2>&1 > /dev/null`;\n'
     'if ($?) { die "FAIL: $prog multiquery results differ if $tag2 comes through stdin\\n"; }'),
]


@dataclass
class Outcome:
    """One exercise: its sqc name, whether it passed, and why not."""

    kind: str   #: "option" or "integration"
    name: str
    passed: bool
    reason: str = ""


@dataclass
class Suite:
    """The directories of a run and its outcomes."""

    source: Path    #: the HMMER source tree (or the test's copy of the parts it needs)
    work: Path      #: where everything is written
    easel: Path | None = None
    verbose: bool = False
    outcomes: list = field(default_factory=list)
    missing: set = field(default_factory=set)   #: programs that steps needed and did not find

    @property
    def prep(self) -> Path:
        return self.work / "prep"

    @property
    def build(self) -> Path:
        return self.work / "build"

    def set_up(self) -> None:
        """The build directory: wrappers for the replaced programs, the ``hmmer`` package's
        binaries for the others, the Easel miniapps found."""
        for directory in (self.prep, self.build / "src", self.build / "easel" / "miniapps"):
            directory.mkdir(parents=True, exist_ok=True)
        for program, command in REPLACED.items():
            wrapper = self.build / "src" / program
            wrapper.write_text(hmmgpu_wrapper(command))
            wrapper.chmod(0o755)
        for program in ("hmmalign", "hmmbuild", "hmmconvert", "hmmemit", "hmmfetch", "hmmpress", "hmmstat",
                        "jackhmmer", "nhmmer", "phmmer"):
            found = hmmer_program(program)
            if found:
                (self.build / "src" / program).symlink_to(found)
        for program in EASEL_MINIAPPS:
            found = self.easel / program if self.easel else None
            if found is not None and os.access(found, os.X_OK):
                (self.build / "easel" / "miniapps" / program).symlink_to(found.resolve())

    # ------------------------------------------------------------------ the sqc file
    def run_sqc(self, sqc: Path) -> None:
        """Every level-1 line of ``sqc`` this harness runs, in file order."""
        for text in sqc.read_text().splitlines():
            found = _LINE.match(text)
            if not found or found.group(1) != "1":
                continue
            _, kind, name, command = found.groups()
            program = _program(command)
            if kind == "prep":
                self._prep(name, command)
            elif program in REPLACED:
                self.outcomes.append(self._option_exercise(name, command, program))
            elif any(command.startswith(f"!testsuite/{script}!") for script in INTEGRATION_SCRIPTS):
                self.outcomes.append(self._integration(name, command))

    def _prep(self, name: str, command: str) -> None:
        line = self.substitute(command, self.prep, absolute=True)
        needed = _missing_programs(line)
        if needed:
            self.missing.update(needed)
            self.say(f"prep {name}: skipped, missing {', '.join(sorted(needed))}")
            return
        done = subprocess.run(line, shell=True, cwd=self.prep, capture_output=True)
        if done.returncode:
            self.say(f"prep {name}: failed ({_last_line(done)})")

    def _option_exercise(self, name: str, command: str, program: str) -> Outcome:
        args = shlex.split(self.substitute(command, self.prep, absolute=False))[1:]
        reference, ours = (self._isolated(name, side) for side in ("hmmer", "hmmgpu"))
        ref = subprocess.run([hmmer_program(program, required=True), *args], cwd=reference, capture_output=True)
        mine = subprocess.run([str(self.build / "src" / program), *args], cwd=ours, capture_output=True)
        if ref.returncode or mine.returncode:
            return Outcome("option", name, False, f"exit status {ref.returncode} (HMMER) against {mine.returncode} "
                                                  f"(hmmgpu): {_last_line(mine) or _last_line(ref)}")
        if args == ["-h"]:
            return Outcome("option", name, True, "exit status 0 (help text is hmmgpu's own)")
        differences = [what for what, a, b in _outputs(ref.stdout, mine.stdout, reference, ours) if a != b]
        if differences:
            return Outcome("option", name, False, "differs: " + ", ".join(differences))
        return Outcome("option", name, True)

    def _isolated(self, name: str, side: str) -> Path:
        """An empty directory holding links to every prepared input (same relative names)."""
        directory = self.work / "runs" / f"{name.replace('/', '_')}.{side}"
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        for path in self.prep.iterdir():
            (directory / path.name).symlink_to(path)
        return directory

    def _integration(self, name: str, command: str) -> Outcome:
        script_name = command.split("!")[1]
        script = self.source / script_name
        if script.name == "i17-stdin.pl":
            script = self._adapted(script, _I17_ADAPTED)
        rest = self.substitute(command[len(script_name) + 2:], self.prep, absolute=True)
        line = f"{'perl' if script.suffix == '.pl' else 'sh'} {shlex.quote(str(script))} {rest}"
        done = subprocess.run(line, shell=True, cwd=self.work, capture_output=True, timeout=1800)
        said = (done.stdout + done.stderr).decode(errors="replace").strip()
        if done.returncode == 0:
            return Outcome("integration", name, True, "(checks adapted)" if script.parent == self.work else "")
        needed = {p for p in EASEL_MINIAPPS if p in said and not (self.build / "easel" / "miniapps" / p).exists()}
        self.missing.update(needed)
        reason = said.splitlines()[-1] if said else f"exit status {done.returncode}"
        return Outcome("integration", name, False, reason + (f" (missing: {', '.join(sorted(needed))})" if needed else ""))

    def _adapted(self, script: Path, replacements) -> Path:
        text = script.read_text()
        for old, new in replacements:
            if old not in text:
                raise SystemExit(f"{script}: the check to adapt is not there: {old[:60]!r}")
            text = text.replace(old, new, 1)
        copy = self.work / script.name
        copy.write_text(text)
        return copy

    def substitute(self, command: str, directory: Path, *, absolute: bool) -> str:
        """sqc's substitutions; ``%NAME%`` is a file of ``directory`` (by its relative name
        unless ``absolute``)."""
        command = command.replace("@@", str(self.build)).replace("!!", str(self.source))
        command = re.sub(r"@([^@\s]+)@", lambda m: str(self.build / m.group(1)), command)
        command = re.sub(r"!([^!\s]+)!", lambda m: str(self.source / m.group(1)), command)
        return re.sub(r"%([^%\s]+)%", lambda m: str(directory / m.group(1)) if absolute else m.group(1), command)

    def say(self, text: str) -> None:
        if self.verbose:
            print(text, file=sys.stderr)


def hmmgpu_wrapper(command: str) -> str:
    """A shell script that runs ``python3 -m hmmgpu COMMAND`` with its arguments, from this tree."""
    return (f"#!/bin/sh\nPYTHONPATH={shlex.quote(str(REPO))}${{PYTHONPATH:+:$PYTHONPATH}} "
            f"exec {shlex.quote(sys.executable)} -m hmmgpu {command} \"$@\"\n")


def _program(command: str) -> str:
    first = command.split()[0]
    return first.strip("@").rsplit("/", 1)[-1] if first.startswith("@") else ""


def hmmer_program(program: str, required: bool = False) -> str | None:
    """HMMER's ``program``: the ``hmmer`` package's binary itself where that package is
    installed (its console scripts run a copy under a temporary name, which then shows in
    the banner and makes two runs' outputs differ), else the one on ``PATH``."""
    try:
        import hmmer

        found = os.path.join(hmmer.BIN_DIR, program)
        if os.access(found, os.X_OK):
            return found
    except ImportError:
        pass
    found = shutil.which(program)
    if found is None and required:
        raise SystemExit(f"{program} not found (pip install hmmer)")
    return found


def _missing_programs(line: str) -> set:
    """The line's program, if it cannot be run."""
    word = shlex.split(line)[0]
    found = os.access(word, os.X_OK) if os.sep in word else shutil.which(word) is not None
    return set() if found else {os.path.basename(word)}


def _last_line(done: subprocess.CompletedProcess) -> str:
    lines = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else ""


def comparable_report(report: bytes) -> list:
    """A report's lines less its four banner lines and its timing lines."""
    return [line for line in report.split(b"\n")[4:] if not _FREE_REPORT_LINE.match(line)]


def comparable_file(name: str, data: bytes):
    """An output file less what only names the program or the run: a report's banner and
    timing lines, a table's '#' tail, an alignment's author line."""
    if _TABLE_TAIL in data:
        return data[:data.rindex(_TABLE_TAIL)]
    if data.startswith(b"# STOCKHOLM"):
        return _ALIGNMENT_AUTHOR.sub(b"", data)
    if data.startswith(b"# "):
        return comparable_report(data)
    return data


def _outputs(ref_stdout: bytes, our_stdout: bytes, reference: Path, ours: Path):
    """(what, HMMER's, hmmgpu's) for standard output and each file the runs wrote."""
    yield "standard output", comparable_report(ref_stdout), comparable_report(our_stdout)
    names = {p.name for d in (reference, ours) for p in d.iterdir() if not p.is_symlink()}
    for name in sorted(names):
        a, b = reference / name, ours / name
        if not (a.exists() and b.exists()):
            yield name, a.exists(), b.exists()
        else:
            yield name, comparable_file(name, a.read_bytes()), comparable_file(name, b.read_bytes())


def summary(outcomes: list, missing: set) -> list:
    """The report's lines: each exercise not passed, then the counts."""
    lines = []
    for outcome in outcomes:
        mark = "ok  " if outcome.passed else "FAIL"
        lines.append(f"{mark} {outcome.kind:11} {outcome.name:24} {outcome.reason}".rstrip())
    for kind in ("option", "integration"):
        these = [o for o in outcomes if o.kind == kind]
        lines.append(f"{kind} exercises: {sum(o.passed for o in these)}/{len(these)} passed")
    if missing:
        lines.append(f"programs missing (Easel miniapps are not in the hmmer package; give --easel): "
                     f"{', '.join(sorted(missing))}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("hmmer_source", type=Path, help="HMMER 3.4's source tree")
    parser.add_argument("--easel", type=Path, default=None,
                        help="a directory holding Easel's miniapps (default: HMMER_SRC/easel/miniapps)")
    parser.add_argument("--sqc", type=Path, default=None, help="the sqc file (default: HMMER_SRC/testsuite/testsuite.sqc)")
    parser.add_argument("--keep", type=Path, default=None, help="work in this directory and keep it")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    source = args.hmmer_source.resolve()
    easel = args.easel or source / "easel" / "miniapps"
    with tempfile.TemporaryDirectory(prefix="hmmer-testsuite.") as scratch:
        work = (args.keep or Path(scratch)).resolve()
        work.mkdir(parents=True, exist_ok=True)
        suite = Suite(source=source, work=work, easel=easel, verbose=args.verbose)
        suite.set_up()
        suite.run_sqc(args.sqc or source / "testsuite" / "testsuite.sqc")
    for line in summary(suite.outcomes, suite.missing):
        print(line)
    return 0 if suite.outcomes and all(o.passed for o in suite.outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
