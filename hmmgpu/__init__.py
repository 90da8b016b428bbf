"""hmmgpu: HMMER3 protein search with exact answers, with GPU filter kernels.

``hmmgpu.hmmsearch(queries, sequences, **options)`` and ``hmmgpu.hmmscan`` yield pyhmmer ``TopHits``;
``hmmgpu.Pipeline`` keeps a database open (on the GPU) across many models.
"""
from hmmgpu._version import __version__

_API = ("hmmsearch", "hmmscan", "Pipeline", "read_hmms", "open_sequences")


def __getattr__(name):  # import numba and pyhmmer only when the API is used
    if name in _API:
        from hmmgpu import api

        return getattr(api, name)
    if name == "SequenceDB":
        from hmmgpu.formats.seqdb import SequenceDB

        return SequenceDB
    raise AttributeError(f"module 'hmmgpu' has no attribute {name!r}")


__all__ = [*_API, "SequenceDB", "__version__"]
