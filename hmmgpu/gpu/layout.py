"""The layout the kernels read a database in: word-aligned, padded slots in length order.

Targets are stored in *positions* 0..n-1, ordered by length, longest first, without the
zero-length targets (HMMER skips them; they still count in Z, which the host knows). Each
target's digital residues (Easel codes, one byte each) start on a 32-bit word boundary and
are padded to whole words with code 28 (``~``), so a kernel reads four residues per load:
``residues[word_offsets[p] + w]`` holds residues 4w..4w+3 of position p, lowest byte first.

:func:`slot_offsets` places the slots; :func:`pack_residues` fills them on the host (the
packing kernel, :mod:`hmmgpu.gpu.pack`, fills them on the device). Both the resident
database (:mod:`hmmgpu.gpu.resident`) and the packing kernel depend on this module, and on
nothing else of each other.
"""
from __future__ import annotations

import numpy as np

#: Residue code of the padding ('~', missing data).
PAD_CODE = 28


#: Residues gathered in one numpy operation at most by :func:`pack_residues` (bounds its index array).
GATHER_RESIDUES = 1 << 22
#: Threads that pack the residues for the upload, at most (and at most the usable cores).
#: 116 M residues on 2 cores: 0.34 s in one thread, 0.19 s in two.
PACK_THREADS = 8


def slot_offsets(lengths) -> tuple:
    """(the word offset of each target's slot (int64), the words of all slots) for targets of
    ``lengths`` laid out one after the other."""
    words = (np.asarray(lengths, np.int64) + 3) // 4
    word_offsets = np.zeros(words.size, np.int64)
    np.cumsum(words[:-1], out=word_offsets[1:])
    return word_offsets, int(words.sum())


def pack_residues(residues, starts, lengths, threads: int = 1) -> tuple:
    """(the residues of targets ``starts[k]:starts[k] + lengths[k]`` of ``residues``, one
    after the other in word-aligned, '~'-padded slots (uint8); each slot's word offset).

    Targets of one length are copied together, as the rows of a matrix gathered by one index
    array (in pieces of :data:`GATHER_RESIDUES`), or, where their residues lie one after the
    other, by one copy: the positions are sorted by length, so a database has a few thousand
    runs of equal lengths where it has hundreds of thousands of targets. numpy's gathers leave
    the interpreter's lock free, so ``threads`` threads fill consecutive parts of the slots at
    once; a copy per target cannot (116 M residues, 311,204 targets: 0.25 s on one core)."""
    residues = np.asarray(residues)
    starts = np.asarray(starts, np.int64)
    lengths = np.asarray(lengths, np.int64)
    word_offsets, total_words = slot_offsets(lengths)
    out = np.full(max(total_words, 1) * 4, PAD_CODE, dtype=np.uint8)
    runs = np.concatenate([[0], np.flatnonzero(lengths[1:] != lengths[:-1]) + 1, [lengths.size]])

    def fill(a: int, b: int) -> None:  # the runs of positions a..b-1
        cut = runs[(runs > a) & (runs < b)].tolist()
        for lo, hi in zip([a] + cut, cut + [b]):
            L = int(lengths[lo]) if hi > lo else 0
            if not L:
                continue
            slot, first = 4 * ((L + 3) // 4), int(word_offsets[lo]) * 4
            rows = out[first:first + (hi - lo) * slot].reshape(hi - lo, slot)[:, :L]
            s = starts[lo:hi]
            if hi - lo == 1 or bool((s[1:] - s[:-1] == L).all()):
                rows[:] = residues[int(s[0]):int(s[0]) + (hi - lo) * L].reshape(hi - lo, L)
                continue
            step = max(1, GATHER_RESIDUES // L)
            for k in range(0, hi - lo, step):
                rows[k:k + step] = residues[s[k:k + step, None] + np.arange(L)]

    parts = max(1, min(int(threads), lengths.size))
    cuts = np.searchsorted(np.cumsum(lengths), lengths.sum() * np.arange(1, parts) / parts).tolist()
    bounds = list(zip([0] + cuts, cuts + [lengths.size]))
    if parts == 1:
        fill(0, lengths.size)
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(parts) as pool:
            list(pool.map(lambda ab: fill(*ab), bounds))
    return out, word_offsets
