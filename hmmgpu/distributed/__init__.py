"""Searches spread over worker processes and dask clusters (CPU and GPU workers), merged exactly.

``hmmgpu.distributed.hmmsearch(queries, database, client=client, **options)`` searches a
database made by ``hmmgpu makedb`` over a ``dask.distributed.Client``'s workers
(:mod:`hmmgpu.distributed.cluster`, which imports dask only when it searches). The cluster
module is imported when ``hmmsearch`` is first asked for, not with this package: a search on
one machine imports :mod:`hmmgpu.distributed.processes` only (the cluster module and what it
imports took about 30 ms of the sample command's start-up).
"""


def __getattr__(name: str):
    if name == "hmmsearch":
        from hmmgpu.distributed.cluster import hmmsearch

        return hmmsearch
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["hmmsearch"]
