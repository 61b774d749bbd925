"""MinHash windows' signatures (xxh32 shingles, datasketch's affine permutations) and the map runs'
band tables as (key, doc) pairs."""

from __future__ import annotations

import numpy as np
from numba import njit

from tcqa_data.decontam.core._numba_kernels.mix import fmix

_M32 = np.uint64(0xFFFFFFFF)
_P32_1 = np.uint64(0x9E3779B1)
_P32_2 = np.uint64(0x85EBCA77)
_P32_3 = np.uint64(0xC2B2AE3D)
_P32_4 = np.uint64(0x27D4EB2F)
_P32_5 = np.uint64(0x165667B1)


@njit(cache=True, nogil=True, inline="always")
def _rotl32(x, r):
    return ((x << np.uint64(r)) | (x >> np.uint64(32 - r))) & _M32


@njit(cache=True, nogil=True, inline="always")
def _read32(buf, i):
    """Little-endian; unsigned indices (no negative-index fix-up) let the compiler make the four
    byte loads one."""
    j = np.uint64(i)
    return (np.uint64(buf[j]) | (np.uint64(buf[j + np.uint64(1)]) << np.uint64(8))
            | (np.uint64(buf[j + np.uint64(2)]) << np.uint64(16))
            | (np.uint64(buf[j + np.uint64(3)]) << np.uint64(24)))


@njit(cache=True, nogil=True)
def xxh32(buf, off, n):
    """xxHash32 (seed 0) of ``buf[off:off + n]``; 32-bit arithmetic in uint64 registers, masked."""
    return _xxh32(buf, off, n)


@njit(cache=True, nogil=True, inline="always")
def _xxh32(buf, off, n):
    """``xxh32``, inlined in the window kernel (a call per shingle: ~a third of the hash's time)."""
    i = off
    n += off
    if n - off >= 16:
        v1 = (_P32_1 + _P32_2) & _M32
        v2 = _P32_2
        v3 = np.uint64(0)
        v4 = (np.uint64(0x100000000) - _P32_1) & _M32
        while i + 16 <= n:
            v1 = (_rotl32((v1 + _read32(buf, i) * _P32_2) & _M32, 13) * _P32_1) & _M32
            v2 = (_rotl32((v2 + _read32(buf, i + 4) * _P32_2) & _M32, 13) * _P32_1) & _M32
            v3 = (_rotl32((v3 + _read32(buf, i + 8) * _P32_2) & _M32, 13) * _P32_1) & _M32
            v4 = (_rotl32((v4 + _read32(buf, i + 12) * _P32_2) & _M32, 13) * _P32_1) & _M32
            i += 16
        h = (_rotl32(v1, 1) + _rotl32(v2, 7) + _rotl32(v3, 12) + _rotl32(v4, 18)) & _M32
    else:
        h = _P32_5
    h = (h + np.uint64(n - off)) & _M32
    while i + 4 <= n:
        h = (h + _read32(buf, i) * _P32_3) & _M32
        h = (_rotl32(h, 17) * _P32_4) & _M32
        i += 4
    while i < n:
        h = (h + np.uint64(buf[np.uint64(i)]) * _P32_5) & _M32
        h = (_rotl32(h, 11) * _P32_1) & _M32
        i += 1
    h ^= h >> np.uint64(15)
    h = (h * _P32_2) & _M32
    h ^= h >> np.uint64(13)
    h = (h * _P32_3) & _M32
    h ^= h >> np.uint64(16)
    return h


@njit(cache=True, nogil=True, inline="always")
def _affine_min(row, a, b, h0, h1, h2, h3):
    """``row[k] = min(row[k], (a[k] * h + b[k]) mod 2**32)`` for four shingle hashes at once: one
    load and store of the row per four shingles (32-bit lanes: the compiler vectorizes it)."""
    for k in range(len(row)):
        ak = a[k]
        bk = b[k]
        v = min(min(np.uint32(ak * h0 + bk), np.uint32(ak * h1 + bk)),
                min(np.uint32(ak * h2 + bk), np.uint32(ak * h3 + bk)))
        row[k] = min(row[k], v)


@njit(cache=True, nogil=True, inline="always")
def _window_row(data, start, end, k_words, a, b, row, bd, hs, buf):
    """Folds the shingles of window ``data[start:end]`` into ``row`` (``window_signatures``);
    scratch ``bd``, ``hs`` and ``buf`` hold ``end - start + 2`` entries. Returns the shingle
    count."""
    # token boundaries, branch-free (space and non-space alternate every few bytes in no pattern
    # a branch predictor learns): every change between space and not, so token t starts at
    # bd[2t] and ends at bd[2t + 1]; unsigned positions: no negative-index fix-up on each access
    nb = np.uint64(0)
    prev = True
    for i in range(np.uint64(start), np.uint64(end)):
        sp = data[i] == 32
        bd[nb] = i
        nb += np.uint64(sp != prev)
        prev = sp
    bd[nb] = end  # the end of a token running to the window's end
    nt = (np.int64(nb) + 1) // 2
    if nt == 0:
        return 0
    nsh = nt - k_words + 1 if nt >= k_words else 1
    span = k_words if nt >= k_words else nt
    # every shingle hash first, then the permutations four shingles at a time: the hashes'
    # dependency chains overlap when nothing else sits between them
    for j in range(nsh):
        # the shingle's bytes: tokens j .. j+span-1 joined by one space
        first = bd[2 * j]
        last = bd[2 * (j + span) - 1]
        need = 0
        for t in range(2 * j, 2 * (j + span), 2):
            need += bd[t + 1] - bd[t] + 1
        if need - 1 == last - first:
            h = _xxh32(data, first, need - 1)  # tokens one space apart: hash in place
        else:
            m = 0
            for t in range(2 * j, 2 * (j + span), 2):
                if t > 2 * j:
                    buf[m] = 32
                    m += 1
                for q in range(bd[t], bd[t + 1]):
                    buf[m] = data[q]
                    m += 1
            h = _xxh32(buf, 0, m)
        # datasketch pre-mixes each hash with MurmurHash3's fmix32
        h ^= h >> np.uint64(16)
        h = (h * np.uint64(0x85EBCA6B)) & _M32
        h ^= h >> np.uint64(13)
        h = (h * np.uint64(0xC2B2AE35)) & _M32
        h ^= h >> np.uint64(16)
        hs[j] = np.uint32(h)
    j = 0
    while j + 4 <= nsh:
        _affine_min(row, a, b, hs[j], hs[j + 1], hs[j + 2], hs[j + 3])
        j += 4
    if j < nsh:  # the last one to three, some repeated (a repeat leaves the minimum as it is)
        last = nsh - 1
        _affine_min(row, a, b, hs[j], hs[min(j + 1, last)], hs[min(j + 2, last)], hs[last])
    return nsh


@njit(cache=True, nogil=True)
def _window_scratch(win_start, win_end):
    """``_window_row``'s scratch for the longest window: bd, hs, buf."""
    n = 2
    for w in range(len(win_start)):
        n = max(n, win_end[w] - win_start[w] + 2)
    return np.empty(n, dtype=np.int64), np.empty(n, dtype=np.uint32), np.empty(n, dtype=np.uint8)


@njit(cache=True, nogil=True)
def window_signatures(data, win_start, win_end, k_words, a, b):
    """MinHash signatures of windows ``data[win_start[i]:win_end[i]]`` (normalized bytes,
    tokens separated by spaces): shingles of ``k_words`` tokens joined by one space (fewer
    tokens: one shingle of all), xxh32 of each, fmix32, then ``min((a * h + b) mod 2**32)``.
    Returns (uint32 [n, P] signatures, shingle count per window)."""
    nw = len(win_start)
    sigs = np.full((nw, len(a)), np.uint32(0xFFFFFFFF), dtype=np.uint32)
    counts = np.zeros(nw, dtype=np.int64)
    bd, hs, buf = _window_scratch(win_start, win_end)
    for w in range(nw):
        counts[w] = _window_row(data, win_start[w], win_end[w], k_words, a, b, sigs[w], bd, hs, buf)
    return sigs, counts


_BK_MUL = np.uint64(0xFF51AFD7ED558CCD)
_BK_SEED = np.uint64(0x9E3779B97F4A7C15)


@njit(cache=True, nogil=True, inline="always")
def _row_band_keys(row, rows, out, i, h):
    """``out[band, i]``: the stored band keys of signature ``row``; ``h``: uint64 scratch, one a
    band. Row step by row step over all bands (not band by band): the bands' multiply chains are
    independent, so consecutive steps overlap (one band's five chained multiplies did not)."""
    bands = out.shape[0]
    for band in range(bands):
        h[band] = _BK_SEED * np.uint64(band + 1)
    for j in range(rows):
        for band in range(bands):
            x = (h[band] ^ np.uint64(row[band * rows + j])) * _BK_MUL
            h[band] = x ^ (x >> np.uint64(32))
    for band in range(bands):
        out[band, i] = np.uint32(fmix(h[band]) >> np.uint64(32))


@njit(cache=True, nogil=True)
def band_keys32(sigs, bands, rows):
    """``sketch.stored_band_keys(sketch.band_keys(sigs))`` transposed: uint32 ``[bands, m]``."""
    m = sigs.shape[0]
    out = np.empty((bands, m), dtype=np.uint32)
    h = np.empty(bands, dtype=np.uint64)
    for i in range(m):  # row by row: one pass over the signatures
        _row_band_keys(sigs[i], rows, out, i, h)
    return out


@njit(cache=True, nogil=True)
def window_band_keys(data, win_start, win_end, k_words, a, b, bands, rows):
    """``band_keys32(window_signatures(...)[0], bands, rows)`` and the shingle counts, each
    window's signature kept only while its band keys are taken (no ``[n, P]`` array: 512 bytes
    a window written and read back)."""
    nw = len(win_start)
    keys = np.empty((bands, nw), dtype=np.uint32)
    counts = np.zeros(nw, dtype=np.int64)
    row = np.empty(len(a), dtype=np.uint32)
    h = np.empty(bands, dtype=np.uint64)
    bd, hs, buf = _window_scratch(win_start, win_end)
    for w in range(nw):
        row[:] = np.uint32(0xFFFFFFFF)
        counts[w] = _window_row(data, win_start[w], win_end[w], k_words, a, b, row, bd, hs, buf)
        _row_band_keys(row, rows, keys, w, h)
    return keys, counts


@njit(cache=True, nogil=True)
def _sort_by_key(src, dst, counts):
    """Stable LSD radix sort of ``key << 32 | doc`` values by their key, in three 11-bit digits
    (the counts stay in L1; a byte-wise scatter into 256 small partitions cost twice as much for
    a map run's band), ping-ponging between ``src`` and ``dst``; returns the one holding the result."""
    m = len(src)
    mask = np.uint64(2047)
    for shift in (32, 43, 54):
        sh = np.uint64(shift)
        counts[:] = 0
        for i in range(m):
            counts[(src[i] >> sh) & mask] += 1
        acc = 0
        for v in range(2048):
            c = counts[v]
            counts[v] = acc
            acc += c
        for i in range(m):
            v = (src[i] >> sh) & mask
            dst[counts[v]] = src[i]
            counts[v] += 1
        src, dst = dst, src
    return src


@njit(cache=True, nogil=True)
def band_key_pairs(keys, docs):
    """A map run's band tables: per band (row of ``keys``, uint32), ``key << 32 | docs[window]``
    of every window sorted, ``docs`` (each window's doc relative to the run's first, below
    2**32) being non-decreasing: a stable radix sort on the key keeps equal keys in window
    order, hence in doc order."""
    bands, m = keys.shape
    out = np.empty((bands, m), dtype=np.uint64)
    a = np.empty(m, dtype=np.uint64)
    b = np.empty(m, dtype=np.uint64)
    counts = np.empty(2048, dtype=np.int64)
    for band in range(bands):
        for i in range(m):
            a[i] = (np.uint64(keys[band, i]) << np.uint64(32)) | np.uint64(docs[i])
        out[band] = _sort_by_key(a, b, counts)
    return out


@njit(cache=True, nogil=True)
def sorted_unique_pairs(pairs, scratch):
    """The distinct ``key << 32 | doc`` values of ``pairs`` in order, where ``pairs`` is sorted runs
    one after the other, the docs of each run above those of the runs before it (the band merge's
    blocks): a stable radix sort on the key then orders equal keys by doc. Time per pair does not
    grow with the number of runs, as a merge's does. ``scratch``: room for ``len(pairs)``; either
    array may hold the result."""
    counts = np.empty(2048, dtype=np.int64)
    out = _sort_by_key(pairs, scratch[:len(pairs)], counts)
    k = 0
    for i in range(len(out)):
        if k == 0 or out[i] != out[k - 1]:
            out[k] = out[i]
            k += 1
    return out[:k]


KERNELS = {"xxh32": xxh32, "window_signatures": window_signatures, "band_keys32": band_keys32,
           "window_band_keys": window_band_keys,
           "band_key_pairs": band_key_pairs, "sorted_unique_pairs": sorted_unique_pairs}
