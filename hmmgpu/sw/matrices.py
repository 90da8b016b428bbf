"""Substitution matrices of the Smith-Waterman search, and hmmgpu's mapping of residues to them.

The matrices are NCBI's (BLOSUM45, BLOSUM50, BLOSUM62, BLOSUM80, PAM30, PAM70, PAM250) as the
``scoring-matrices`` package ships them: 24 rows, ``ARNDCQEGHILKMFPSTWYVBZX*``.

Residue mapping. hmmgpu digitizes sequences into Easel's amino codes
(``ACDEFGHIKLMNPQRSTVWY-BJZOUX*~``, 0..28). Every code whose letter is a matrix row scores with
that row; every other code (J, O, U, the gap ``-`` read from ``.`` or ``_``, and ``~``) scores
with the ``*`` row. That is what both CPU references do with letters outside their alphabet:
parasail maps them to the matrix's last row (``*``) and pyopal encodes them as its last letter
(``*``), so a target's score is the same whether the references read its original letters or
hmmgpu's codes. (NCBI BLAST instead scores U and O as X and J with its own row: see the README.)
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal

import numpy as np

from hmmgpu.constants import AMINO_SYMBOLS
from hmmgpu.errors import HmmgpuError

MatrixName = Literal["BLOSUM45", "BLOSUM50", "BLOSUM62", "BLOSUM80", "PAM30", "PAM70", "PAM250"]
#: The matrices hmmgpu sw accepts (those NCBI BLAST publishes gapped statistics for).
from hmmgpu.sw import MATRICES  # noqa: E402 - the names live in the package (light to import)
#: Row letters of every matrix, in order.
ALPHABET = "ARNDCQEGHILKMFPSTWYVBZX*"
#: Number of Easel amino codes.
NCODES = len(AMINO_SYMBOLS)


def code_rows() -> np.ndarray:
    """Matrix row of every Easel amino code (int64, length 29): its letter's row, else ``*``'s."""
    star = ALPHABET.index("*")
    return np.array([ALPHABET.index(s) if s in ALPHABET else star for s in AMINO_SYMBOLS], np.int64)


@dataclass(frozen=True)
class Matrix:
    """A substitution matrix: its name, 24x24 scores, and the scores by Easel code."""

    name: str
    scores: np.ndarray  #: int32 (24, 24) in ``ALPHABET`` order
    by_code: np.ndarray  #: int32 (29, 29): score of Easel code a against code b

    @property
    def max_score(self) -> int:
        """The largest entry (a bound on one cell's gain)."""
        return int(self.scores.max())

    @property
    def min_score(self) -> int:
        return int(self.scores.min())


@functools.lru_cache(maxsize=None)
def load(name: str) -> Matrix:
    """The matrix called ``name`` (case-insensitive); HmmgpuError when hmmgpu does not offer it."""
    key = str(name).upper()
    if key not in MATRICES:
        raise HmmgpuError(f"unknown substitution matrix {name!r}; choose one of {', '.join(MATRICES)}")
    from scoring_matrices import ScoringMatrix

    sm = ScoringMatrix.from_name(key)
    if str(sm.alphabet) != ALPHABET:
        raise HmmgpuError(f"matrix {key}: unexpected alphabet {sm.alphabet!r}")
    scores = np.asarray(sm, dtype=np.float64)
    if not np.array_equal(scores, np.round(scores)):
        raise HmmgpuError(f"matrix {key} is not an integer matrix")
    scores = scores.astype(np.int32)
    rows = code_rows()
    by_code = np.ascontiguousarray(scores[rows][:, rows])
    scores.setflags(write=False)
    by_code.setflags(write=False)
    return Matrix(name=key, scores=scores, by_code=by_code)


def letters(codes: np.ndarray) -> str:
    """Easel codes as text (for the reports)."""
    table = np.frombuffer(AMINO_SYMBOLS.encode(), dtype=np.uint8)
    return table[np.asarray(codes, dtype=np.int64)].tobytes().decode()
