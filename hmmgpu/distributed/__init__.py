"""Searches spread over worker processes and dask clusters (CPU and GPU workers), merged exactly.

``hmmgpu.distributed.hmmsearch(queries, database, client=client, **options)`` searches a
database made by ``hmmgpu makedb`` over a ``dask.distributed.Client``'s workers
(:mod:`hmmgpu.distributed.cluster`, which imports dask only when it searches).
"""
from hmmgpu.distributed.cluster import hmmsearch

__all__ = ["hmmsearch"]
