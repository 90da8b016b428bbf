"""Smith-Waterman protein database search (``hmmgpu sw``): exact scores on the GPU or the CPU,
BLAST-style hits with bit scores and E-values.

``hmmgpu.sw.search(queries, database, matrix="BLOSUM62", gap_open=11, gap_extend=1, ...)``
returns one :class:`QueryHits` per query (columns of numpy arrays; ``to_frame()`` gives a
pandas DataFrame). :class:`SwSearch` keeps a database open (resident on the GPU) for many
queries.
"""
from __future__ import annotations

_API = ("search", "SwSearch", "QueryHits", "SwParams", "SwStats", "Alignment")
#: The substitution matrices (NCBI's), by name.
MATRICES = ("BLOSUM45", "BLOSUM50", "BLOSUM62", "BLOSUM80", "PAM30", "PAM70", "PAM250")


def __getattr__(name):  # numba, pyopal and the kernels load only when used
    if name in _API:
        from hmmgpu.sw import api as _api

        return getattr(_api, name)
    raise AttributeError(f"module 'hmmgpu.sw' has no attribute {name!r}")


__all__ = [*_API, "MATRICES"]
