"""The sequence database on the GPU: residues uint8 (packed 4 per uint32 word), word offsets and
lengths, in length-descending order without the zero-length targets.

Each sequence starts on a word boundary and is padded to whole words with code 28 ('~',
cost 255 / ssv cost 127), a no-op row for every filter. The database is uploaded once; if it
does not fit in the memory budget it is split into chunks by position that are uploaded in
turn for every model (identical results, more transfer time).
"""
from __future__ import annotations

import numpy as np

from . import lanes as _lanes

PAD_CODE = 28
_PER_SEQ_BYTES = 8 + 4 + 4 + 1 + 4 + 4 + 4  # woff, lens, out_pos, out_st, out_xj, two lists


class _Chunk:
    def __init__(self, owner, lo, hi, resident):
        self.owner = owner
        self.lo = lo
        self.hi = hi
        self.n = hi - lo
        self.resident = resident
        self._dev = None

    def _upload(self):
        from numba import cuda

        o = self.owner
        lens = o.plens[self.lo:self.hi]
        nw = (lens + 3) // 4
        woff = np.zeros(self.n, dtype=np.int64)
        if self.n:
            np.cumsum(nw[:-1], out=woff[1:])
        total = int(nw.sum()) if self.n else 0
        buf = np.full(max(total, 1) * 4, PAD_CODE, dtype=np.uint8)
        res = o.residues
        starts = o.starts[self.lo:self.hi]
        for j in range(self.n):
            s = int(starts[j])
            L = int(lens[j])
            d = int(woff[j]) * 4
            buf[d:d + L] = res[s:s + L]
        n1 = max(self.n, 1)
        self._dev = dict(
            res=cuda.to_device(buf.view(np.uint32)),
            woff=cuda.to_device(woff if self.n else np.zeros(1, np.int64)),
            lens=cuda.to_device(lens.astype(np.int32) if self.n else np.zeros(1, np.int32)),
            out_pos=cuda.device_array(n1, dtype=np.int32),
            out_st=cuda.device_array(n1, dtype=np.int8),
            out_xj=cuda.device_array(n1, dtype=np.int32),
            list1=cuda.device_array(n1, dtype=np.int32),
            list2=cuda.device_array(n1, dtype=np.int32),
        )
        self.nbytes = buf.nbytes + n1 * _PER_SEQ_BYTES

    def __getattr__(self, name):
        d = self.__dict__.get("_dev")
        if d is None:
            raise AttributeError(name)
        if name in d:
            return d[name]
        raise AttributeError(name)

    def ensure(self):
        if self._dev is None:
            self._upload()
        return self

    def release(self):
        if not self.resident:
            self._dev = None

    def drop(self):
        self._dev = None


class DeviceDB:
    def __init__(self, db, max_device_bytes=None):
        from numba import cuda

        order = np.asarray(db.order, dtype=np.int64)
        lengths = np.asarray(db.lengths, dtype=np.int64)
        lo = lengths[order]
        keep = lo > 0
        self.pos2idx = order[keep]
        self.plens = lo[keep]
        self.starts = np.asarray(db.offsets, dtype=np.int64)[self.pos2idx]
        self.residues = np.asarray(db.residues, dtype=np.uint8)
        self.n = int(self.pos2idx.size)
        self.max_len = int(self.plens.max()) if self.n else 0
        from ..profiles import tjb_table

        self.tjb_d = cuda.to_device(tjb_table(max(self.max_len, 1)).astype(np.int32))
        # chunking by memory budget
        per = ((self.plens + 3) // 4) * 4 + _PER_SEQ_BYTES
        total = int(per.sum())
        if max_device_bytes is None:
            if _lanes.SIM:
                budget = 1 << 40
            else:
                free, _tot = cuda.current_context().get_memory_info()
                budget = int(free * 0.6)
        else:
            budget = int(max_device_bytes)
        self.budget = budget
        bounds = [0]
        if total > budget and self.n:
            acc = 0
            for i, b in enumerate(per):
                if acc + b > budget and i > bounds[-1]:
                    bounds.append(i)
                    acc = 0
                acc += int(b)
        bounds.append(self.n)
        self.resident = len(bounds) == 2
        self._chunks = [_Chunk(self, bounds[i], bounds[i + 1], self.resident) for i in range(len(bounds) - 1)]
        if self.resident:
            for c in self._chunks:
                c.ensure()

    def chunks(self):
        for c in self._chunks:
            yield c.ensure()

    @property
    def n_chunks(self):
        return len(self._chunks)

    def close(self):
        for c in self._chunks:
            c.drop()
        self.tjb_d = None
