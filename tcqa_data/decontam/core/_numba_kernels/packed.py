"""Bit-packed tables: packing (build side) and lookups (query side)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True, inline="always")
def _packed_entry(words, i, width, mask):
    """Entry ``i`` of a packed table (``packed.unpack`` for one index)."""
    pos = i * width
    w = pos >> 6
    shift = np.uint64(pos & 63)
    v = words[w] >> shift
    if shift > np.uint64(64 - width):
        v |= words[w + 1] << (np.uint64(64) - shift)
    return v & mask


@njit(cache=True, nogil=True)
def packed_lookup(cells, words, keys, dir_bits, id_bits, cap):
    """``packed.lookup``: per key, a binary search of its remainder in its directory cell, then
    the run of equal remainders (at most ``cap``; ``cap`` < 0: all). Returns (query index, id)."""
    width = 32 - dir_bits + id_bits
    mask = np.uint64(0xFFFFFFFFFFFFFFFF) if width == 64 else (np.uint64(1) << np.uint64(width)) - np.uint64(1)
    rbits = np.uint64(32 - dir_bits)
    rmask = (np.uint64(1) << rbits) - np.uint64(1)
    ib = np.uint64(id_bits)
    nq = len(keys)
    first = np.empty(nq, dtype=np.int64)
    count = np.empty(nq, dtype=np.int64)
    total = 0
    for q in range(nq):
        key = np.uint64(keys[q])
        c = np.int64(key >> rbits)
        a = np.int64(cells[c])
        hi = np.int64(cells[c + 1])
        rem = key & rmask
        b = hi
        while a < b:
            m = (a + b) >> 1
            if (_packed_entry(words, m, width, mask) >> ib) < rem:
                a = m + 1
            else:
                b = m
        e = a
        while e < hi and (cap < 0 or e - a < cap) and (_packed_entry(words, e, width, mask) >> ib) == rem:
            e += 1
        first[q] = a
        count[q] = e - a
        total += e - a
    owner = np.empty(total, dtype=np.int64)
    ids = np.empty(total, dtype=np.int64)
    idmask = (np.uint64(1) << ib) - np.uint64(1)
    k = 0
    for q in range(nq):
        for i in range(first[q], first[q] + count[q]):
            owner[k] = q
            ids[k] = np.int64(_packed_entry(words, i, width, mask) & idmask)
            k += 1
    return owner, ids


@njit(cache=True, nogil=True)
def pack_bits(values, width):
    """``packed.pack``: ``len(values)`` (a multiple of 64) values of ``width`` bits, each below
    ``2**width``, as ``len * width / 64`` little-endian bit-packed uint64 words."""
    n = len(values)
    nw = n * width // 64
    out = np.zeros(nw + 1, dtype=np.uint64)
    for i in range(n):
        pos = i * width
        wi = pos >> 6
        s = pos & 63
        v = values[i]
        out[wi] |= v << np.uint64(s)
        if s + width > 64:
            out[wi + 1] |= v >> np.uint64(64 - s)
    return out[:nw]


KERNELS = {"packed_lookup": packed_lookup, "pack_bits": pack_bits}
