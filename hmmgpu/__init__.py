"""hmmgpu: HMMER3 protein search with exact answers, with GPU filter kernels.

``hmmgpu.hmmsearch(queries, sequences, **options)`` yields pyhmmer ``TopHits``;
``hmmgpu.Pipeline`` keeps a database open (on the GPU) across many models.
"""
__version__ = "0.1.0"

_API = ("hmmsearch", "Pipeline", "read_hmms", "open_sequences")


def __getattr__(name):  # import numba and pyhmmer only when the API is used
    if name in _API:
        from . import api

        return getattr(api, name)
    if name == "SequenceDB":
        from .seqdb import SequenceDB

        return SequenceDB
    raise AttributeError(f"module 'hmmgpu' has no attribute {name!r}")


__all__ = [*_API, "SequenceDB", "__version__"]
