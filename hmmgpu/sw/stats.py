"""Karlin-Altschul statistics of the Smith-Waterman hits: bit scores and E-values as NCBI BLAST.

The parameters are NCBI BLAST's gapped values (``blast_stat.c``: lambda, K, H, alpha, beta for
each matrix and gap-cost pair; the gap costs are BLAST's: a gap of length k costs
``open + k * extend``). Only the pairs BLAST publishes are accepted, as in ``blastp``.

For a query of length m against a database of n residues in N sequences, BLAST's
finite-size correction subtracts a length adjustment l from the query and from every
target (``BLAST_ComputeLengthAdjustment``: the largest integer below the fixed point of
``l = beta + (alpha / lambda) * (ln K + ln((m - l)(n - N l)))``, found by the same bounded
iteration). With ``m' = m - l`` and ``n' = max(1, n - N l)``::

    bit score = (lambda * S - ln K) / ln 2
    E-value   = K * m' * n' * exp(-lambda * S)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hmmgpu.errors import HmmgpuError

#: (open, extend) -> (lambda, K, H, alpha, beta), NCBI blast_stat.c, gapped rows.
_TABLES = {
    "BLOSUM45": {
        (13, 3): (0.207, 0.049, 0.14, 1.5, -22), (12, 3): (0.199, 0.039, 0.11, 1.8, -34),
        (11, 3): (0.190, 0.031, 0.095, 2.0, -38), (10, 3): (0.179, 0.023, 0.075, 2.4, -51),
        (16, 2): (0.210, 0.051, 0.14, 1.5, -24), (15, 2): (0.203, 0.041, 0.12, 1.7, -31),
        (14, 2): (0.195, 0.032, 0.10, 1.9, -36), (13, 2): (0.185, 0.024, 0.084, 2.2, -45),
        (12, 2): (0.171, 0.016, 0.061, 2.8, -65), (19, 1): (0.205, 0.040, 0.11, 1.9, -43),
        (18, 1): (0.198, 0.032, 0.10, 2.0, -43), (17, 1): (0.189, 0.024, 0.079, 2.4, -57),
        (16, 1): (0.176, 0.016, 0.063, 2.8, -67),
    },
    "BLOSUM50": {
        (13, 3): (0.212, 0.063, 0.19, 1.1, -16), (12, 3): (0.206, 0.055, 0.17, 1.2, -18),
        (11, 3): (0.197, 0.042, 0.14, 1.4, -25), (10, 3): (0.186, 0.031, 0.11, 1.7, -34),
        (9, 3): (0.172, 0.022, 0.082, 2.1, -48), (16, 2): (0.215, 0.066, 0.20, 1.05, -15),
        (15, 2): (0.210, 0.058, 0.17, 1.2, -20), (14, 2): (0.202, 0.045, 0.14, 1.4, -27),
        (13, 2): (0.193, 0.035, 0.12, 1.6, -32), (12, 2): (0.181, 0.025, 0.095, 1.9, -41),
        (19, 1): (0.212, 0.057, 0.18, 1.2, -21), (18, 1): (0.207, 0.050, 0.15, 1.4, -28),
        (17, 1): (0.198, 0.037, 0.12, 1.6, -33), (16, 1): (0.186, 0.025, 0.10, 1.9, -42),
        (15, 1): (0.171, 0.015, 0.063, 2.7, -76),
    },
    "BLOSUM62": {
        (11, 2): (0.297, 0.082, 0.27, 1.1, -10), (10, 2): (0.291, 0.075, 0.23, 1.3, -15),
        (9, 2): (0.279, 0.058, 0.19, 1.5, -19), (8, 2): (0.264, 0.045, 0.15, 1.8, -26),
        (7, 2): (0.239, 0.027, 0.10, 2.5, -46), (6, 2): (0.201, 0.012, 0.061, 3.3, -58),
        (13, 1): (0.292, 0.071, 0.23, 1.2, -11), (12, 1): (0.283, 0.059, 0.19, 1.5, -19),
        (11, 1): (0.267, 0.041, 0.14, 1.9, -30), (10, 1): (0.243, 0.024, 0.10, 2.5, -44),
        (9, 1): (0.206, 0.010, 0.052, 4.0, -87),
    },
    "BLOSUM80": {
        (25, 2): (0.342, 0.17, 0.66, 0.52, -1.6), (13, 2): (0.336, 0.15, 0.57, 0.59, -3),
        (9, 2): (0.319, 0.11, 0.42, 0.76, -6), (8, 2): (0.308, 0.090, 0.35, 0.89, -9),
        (7, 2): (0.293, 0.070, 0.27, 1.1, -14), (6, 2): (0.268, 0.045, 0.19, 1.4, -19),
        (11, 1): (0.314, 0.095, 0.35, 0.90, -9), (10, 1): (0.299, 0.071, 0.27, 1.1, -14),
        (9, 1): (0.279, 0.048, 0.20, 1.4, -19),
    },
    "PAM30": {
        (7, 2): (0.305, 0.15, 0.87, 0.35, -3), (6, 2): (0.287, 0.11, 0.68, 0.42, -4),
        (5, 2): (0.264, 0.079, 0.45, 0.59, -7), (10, 1): (0.309, 0.15, 0.88, 0.35, -3),
        (9, 1): (0.294, 0.11, 0.61, 0.48, -6), (8, 1): (0.270, 0.072, 0.40, 0.68, -10),
    },
    "PAM70": {
        (8, 2): (0.301, 0.12, 0.54, 0.56, -5), (7, 2): (0.286, 0.093, 0.43, 0.67, -7),
        (6, 2): (0.264, 0.064, 0.29, 0.90, -12), (11, 1): (0.305, 0.12, 0.52, 0.59, -6),
        (10, 1): (0.291, 0.091, 0.41, 0.71, -9), (9, 1): (0.270, 0.060, 0.28, 0.97, -14),
    },
    "PAM250": {
        (15, 3): (0.205, 0.049, 0.13, 1.6, -23), (14, 3): (0.200, 0.043, 0.12, 1.7, -26),
        (13, 3): (0.194, 0.036, 0.10, 1.9, -31), (12, 3): (0.186, 0.029, 0.085, 2.2, -41),
        (11, 3): (0.174, 0.020, 0.070, 2.5, -48), (17, 2): (0.204, 0.047, 0.12, 1.7, -28),
        (16, 2): (0.198, 0.038, 0.11, 1.8, -29), (15, 2): (0.191, 0.031, 0.087, 2.2, -44),
        (14, 2): (0.182, 0.024, 0.073, 2.5, -53), (13, 2): (0.171, 0.017, 0.059, 2.9, -64),
        (21, 1): (0.205, 0.045, 0.11, 1.8, -34), (20, 1): (0.199, 0.037, 0.10, 1.9, -35),
        (19, 1): (0.192, 0.029, 0.083, 2.3, -52), (18, 1): (0.183, 0.021, 0.070, 2.6, -60),
        (17, 1): (0.171, 0.014, 0.052, 3.3, -86),
    },
}

LN2 = math.log(2.0)


def supported_gaps(matrix: str) -> list:
    """The (open, extend) pairs NCBI BLAST has statistics for with ``matrix``."""
    return sorted(_TABLES[matrix], key=lambda p: (-p[1], -p[0]))


@dataclass(frozen=True)
class KarlinAltschul:
    """Gapped Karlin-Altschul parameters of one matrix and gap-cost pair."""

    lam: float
    K: float
    H: float
    alpha: float
    beta: float

    @classmethod
    def lookup(cls, matrix: str, gap_open: int, gap_extend: int) -> "KarlinAltschul":
        """NCBI's parameters; HmmgpuError for a pair BLAST does not support."""
        table = _TABLES[matrix]
        key = (int(gap_open), int(gap_extend))
        if key not in table:
            pairs = ", ".join(f"{o}/{e}" for o, e in supported_gaps(matrix))
            raise HmmgpuError(f"gap costs --gapopen {gap_open} --gapextend {gap_extend} are not supported with "
                              f"{matrix} (NCBI BLAST has statistics for open/extend {pairs})")
        return cls(*table[key])

    def length_adjustment(self, m: int, n: int, N: int) -> int:
        """BLAST's length adjustment for a query of ``m`` residues, ``n`` database residues in
        ``N`` sequences (``BLAST_ComputeLengthAdjustment``)."""
        m, n, N = float(m), float(n), float(N)
        logK = math.log(self.K)
        adl = self.alpha / self.lam
        a, mb, c = N, m * N + n, n * m - max(m, n) / self.K
        if c < 0:
            return 0
        ell_max = 2 * c / (mb + math.sqrt(mb * mb - 4 * a * c))
        ell_min, ell_next, converged = 0.0, 0.0, False
        for i in range(1, 21):
            ell = ell_next
            ss = (m - ell) * (n - N * ell)
            ell_bar = adl * (logK + math.log(ss)) + self.beta
            if ell_bar >= ell:
                ell_min = ell
                if ell_bar - ell_min <= 1.0:
                    converged = True
                    break
                if ell_min == ell_max:
                    break
            else:
                ell_max = ell
            if ell_min <= ell_bar <= ell_max:
                ell_next = ell_bar
            else:
                ell_next = ell_max if i == 1 else (ell_min + ell_max) / 2
        adjust = int(ell_min)
        if converged:
            ell = math.ceil(ell_min)
            if ell <= ell_max:
                ss = (m - ell) * (n - N * ell)
                if adl * (logK + math.log(ss)) + self.beta >= ell:
                    adjust = int(ell)
        return adjust

    def search_space(self, m: int, n: int, N: int) -> float:
        """Effective search space ``m' * n'`` of a query of length ``m`` (see the module text)."""
        adj = self.length_adjustment(m, n, N)
        return float(max(1, n - N * adj)) * float(m - adj)

    def bit_scores(self, scores) -> np.ndarray:
        """Bit scores of raw scores (float64)."""
        s = np.asarray(scores, dtype=np.float64)
        return (self.lam * s - math.log(self.K)) / LN2

    def evalues(self, scores, search_space: float) -> np.ndarray:
        """E-values of raw scores in a search space (float64)."""
        s = np.asarray(scores, dtype=np.float64)
        return self.K * search_space * np.exp(-self.lam * s)
