"""Numbers shared by every stage: the amino alphabet, Easel status codes, HMMER's fixed scales.

Status codes are Easel's own, so a filter result compares directly with HMMER's.
"""
import numpy as np

#: Easel's amino alphabet, in digital-code order (20 residues, gap, degenerates, '*', '~').
AMINO_SYMBOLS = "ACDEFGHIKLMNPQRSTVWY-BJZOUX*~"
K = 20  #: canonical residues
KP = 29  #: all digital codes

#: Easel status codes returned by the filters.
STATUS_OK = 0
STATUS_RANGE = 16  #: eslERANGE: score overflowed the integer range -> +inf, always passes
STATUS_NORESULT = 19  #: eslENORESULT: SSV cannot decide, the J-state MSV must run

#: Byte (MSV/SSV) and word (Viterbi filter) quantization (docs/algorithms.md §3 and §6).
LOG2 = 0.69314718055994529
SCALE_B = np.float32(3.0 / LOG2)
BASE_B = 190
SCALE_W = np.float32(500.0 / LOG2)
BASE_W = 12000

#: hmmsearch refuses targets longer than this.
MAX_TARGET_LENGTH = 100_000
