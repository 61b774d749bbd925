"""The numba kernels behind ``kernel`` (imported only when numba is installed and enabled).

Top-level functions with ``cache=True``: compiled once per install into ``__pycache__``, then
loaded by every later process (closures would miss the cache and recompile each time).
"""

from __future__ import annotations

import numpy as np
from numba import njit

_F1 = np.uint64(0xBF58476D1CE4E5B9)
_F2 = np.uint64(0x94D049BB133111EB)
_K_LEN = np.uint64(0xD6E8FEB86659FD93)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)

@njit(cache=True, nogil=True)
def fmix(z):
    z ^= z >> _S30
    z *= _F1
    z ^= z >> _S27
    z *= _F2
    z ^= z >> _S31
    return z

_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], dtype=np.uint64)

@njit(cache=True, nogil=True, inline="always")
def _next_token(data, i, end):
    """(start, end) of the next space-separated token in ``data[i:end]``; start == end: none."""
    while i < end and data[i] == 32:
        i += 1
    s = i
    while i < end and data[i] != 32:
        i += 1
    return s, i


@njit(cache=True, nogil=True)
def token_hashes(data, words, doc_start, salt_tok, max_bytes):
    """Token hashes and the token index where each doc starts; tokens longer than
    ``max_bytes`` get 0 here and are listed in ``huge`` (hashed with xxh3 by the caller).
    ``words[i]`` is the little-endian uint64 at byte ``i`` of ``data`` (a stride-1 view; the
    data is padded so every token's 8-byte reads stay inside)."""
    n = len(data)
    ntok = 0
    prev_space = True
    for i in range(n):
        sp = data[i] == 32
        if prev_space and not sp:
            ntok += 1
        prev_space = sp
    tok = np.empty(ntok, dtype=np.uint64)
    starts = np.empty(ntok, dtype=np.int64)
    ends = np.empty(ntok, dtype=np.int64)
    doc_tok = np.empty(len(doc_start), dtype=np.int64)
    nhuge = 0
    t = 0
    d = 0
    i = 0
    while True:
        s, i = _next_token(data, i, n)
        if s == n:
            break
        while d < len(doc_start) and doc_start[d] <= s:
            doc_tok[d] = t
            d += 1
        length = i - s
        starts[t] = s
        ends[t] = i
        if length > max_bytes:
            nhuge += 1
            tok[t] = 0
        else:
            x = (words[s] & _MASKS[min(length, 8)]) + np.uint64(length) * _K_LEN + salt_tok
            pos = s + 8
            while pos < i:
                x = fmix(x) ^ (words[pos] & _MASKS[min(i - pos, 8)])
                pos += 8
            tok[t] = fmix(x)
        t += 1
    while d < len(doc_start):
        doc_tok[d] = t
        d += 1
    huge = np.empty(nhuge, dtype=np.int64)
    k = 0
    for j in range(ntok):
        if ends[j] - starts[j] > max_bytes:
            huge[k] = j
            k += 1
    return tok, doc_tok, huge, starts, ends

@njit(cache=True, nogil=True)
def ngram_hashes(tok, doc_tok, n, base, base_inv, add):
    """Rolling polynomial ``sum_j tok[i+j] * base**j`` per doc (never across docs), mixed."""
    ndocs = len(doc_tok) - 1
    m = 0
    for k in range(ndocs):
        c = doc_tok[k + 1] - doc_tok[k] - (n - 1)
        if c > 0:
            m += c
    h = np.empty(m, dtype=np.uint64)
    dd = np.empty(m, dtype=np.int64)
    top = np.uint64(1)
    for _ in range(n - 1):
        top *= base
    out = 0
    for k in range(ndocs):
        a, b = doc_tok[k], doc_tok[k + 1]
        if b - a < n:
            continue
        s = np.uint64(0)
        p = np.uint64(1)
        for j in range(n):
            s += tok[a + j] * p
            p *= base
        for i in range(a, b - n + 1):
            if i > a:
                s = (s - tok[i - 1]) * base_inv + tok[i + n - 1] * top
            h[out] = fmix(s + add)
            dd[out] = k
            out += 1
    return h, dd

@njit(cache=True, nogil=True)
def partition_top_byte(keys, payload, shift):
    """Stable counting scatter of (key, payload) by ``(key >> shift) & 255``; returns the
    scattered arrays and the 257 partition bounds."""
    n = len(keys)
    counts = np.zeros(257, dtype=np.int64)
    sh = np.uint64(shift)
    for i in range(n):
        counts[((keys[i] >> sh) & np.uint64(255)) + 1] += 1
    for v in range(256):
        counts[v + 1] += counts[v]
    offs = counts[:256].copy()
    out_k = np.empty_like(keys)
    out_p = np.empty_like(payload)
    for i in range(n):
        v = (keys[i] >> sh) & np.uint64(255)
        j = offs[v]
        out_k[j] = keys[i]
        out_p[j] = payload[i]
        offs[v] = j + 1
    return out_k, out_p, counts


@njit(cache=True, nogil=True)
def _lsd_in_place(k, p, tk, tp, nbytes):
    """Stable LSD radix sort of k (payload p) on its low ``nbytes`` bytes; tk/tp are scratch."""
    n = len(k)
    counts = np.zeros(256, dtype=np.int64)
    src_k, src_p, dst_k, dst_p = k, p, tk, tp
    swapped = False
    for b in range(nbytes):
        sh = np.uint64(8 * b)
        counts[:] = 0
        for i in range(n):
            counts[(src_k[i] >> sh) & np.uint64(255)] += 1
        if counts.max() == n:
            continue  # this byte is the same everywhere
        acc = 0
        for v in range(256):
            c = counts[v]
            counts[v] = acc
            acc += c
        for i in range(n):
            v = (src_k[i] >> sh) & np.uint64(255)
            j = counts[v]
            dst_k[j] = src_k[i]
            dst_p[j] = src_p[i]
            counts[v] = j + 1
        src_k, dst_k = dst_k, src_k
        src_p, dst_p = dst_p, src_p
        swapped = not swapped
    if swapped:
        k[:] = src_k
        p[:] = src_p


@njit(cache=True, nogil=True)
def sort_pairs(keys, payload, shift):
    """Stable sort by uint64 key: a scatter by the byte at ``shift`` (the top byte that varies)
    into 256 cache-sized partitions, then an in-cache LSD radix sort of each on the bytes
    below it."""
    out_k, out_p, bounds = partition_top_byte(keys, payload, shift)
    nbytes = (shift + 7) // 8
    biggest = 0
    for v in range(256):
        biggest = max(biggest, bounds[v + 1] - bounds[v])
    tk = np.empty(biggest, dtype=keys.dtype)
    tp = np.empty(biggest, dtype=payload.dtype)
    for v in range(256):
        a, b = bounds[v], bounds[v + 1]
        if b - a > 1:
            _lsd_in_place(out_k[a:b], out_p[a:b], tk[:b - a], tp[:b - a], nbytes)
    return out_k, out_p


@njit(cache=True, nogil=True)
def order_ties(h, d, w):
    """Within each run of equal hashes, order (d, w) by d (insertion sort: runs are short and
    usually already in order). An empty ``w`` means no second array."""
    n = len(h)
    has_w = len(w) == n and n > 0
    i = 0
    while i < n:
        j = i + 1
        while j < n and h[j] == h[i]:
            j += 1
        for a in range(i + 1, j):
            dv = d[a]
            wv = w[a] if has_w else 0
            b = a - 1
            while b >= i and d[b] > dv:
                d[b + 1] = d[b]
                if has_w:
                    w[b + 1] = w[b]
                b -= 1
            d[b + 1] = dv
            if has_w:
                w[b + 1] = wv
        i = j


@njit(cache=True, nogil=True)
def dedupe_pairs(h, d):
    n = len(h)
    keep = 0
    for i in range(n):
        if i == 0 or h[i] != h[i - 1] or d[i] != d[i - 1]:
            h[keep] = h[i]
            d[keep] = d[i]
            keep += 1
    return h[:keep], d[:keep]

@njit(cache=True, nogil=True)
def merge_sorted(h, d, w, provenance, none, docs_out):
    """Unique hashes of (hash, doc)-sorted pairs, summed weights and the first P docs."""
    n = len(h)
    nu = 0
    for i in range(n):
        if i == 0 or h[i] != h[i - 1]:
            nu += 1
    hu = np.empty(nu, dtype=np.uint64)
    df = np.empty(nu, dtype=np.uint32)
    docs = docs_out[:nu]
    docs[:] = none
    u = -1
    rank = 0
    for i in range(n):
        if i == 0 or h[i] != h[i - 1]:
            u += 1
            hu[u] = h[i]
            df[u] = 0
            rank = 0
        df[u] += w[i]
        if rank < provenance:
            docs[u, rank] = d[i]
        rank += 1
    return hu, df, docs


# ------------------------------------------------------------------------------ MinHash windows

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
def _read32(buf, i):  # little-endian
    return (np.uint64(buf[i]) | (np.uint64(buf[i + 1]) << np.uint64(8))
            | (np.uint64(buf[i + 2]) << np.uint64(16)) | (np.uint64(buf[i + 3]) << np.uint64(24)))


@njit(cache=True, nogil=True)
def xxh32(buf, off, n):
    """xxHash32 (seed 0) of ``buf[off:off + n]``; 32-bit arithmetic in uint64 registers, masked."""
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
        h = (h + np.uint64(buf[i]) * _P32_5) & _M32
        h = (_rotl32(h, 11) * _P32_1) & _M32
        i += 1
    h ^= h >> np.uint64(15)
    h = (h * _P32_2) & _M32
    h ^= h >> np.uint64(13)
    h = (h * _P32_3) & _M32
    h ^= h >> np.uint64(16)
    return h


@njit(cache=True, nogil=True)
def window_signatures(data, win_start, win_end, k_words, a, b):
    """MinHash signatures of windows ``data[win_start[i]:win_end[i]]`` (normalized bytes,
    tokens separated by spaces): shingles of ``k_words`` tokens joined by one space (fewer
    tokens: one shingle of all), xxh32 of each, fmix32, then ``min((a * h + b) mod 2**32)``.
    Returns (uint32 [n, P] signatures, shingle count per window)."""
    nw = len(win_start)
    nperm = len(a)
    sigs = np.full((nw, nperm), np.uint32(0xFFFFFFFF), dtype=np.uint32)
    counts = np.zeros(nw, dtype=np.int64)
    buf = np.empty(256, dtype=np.uint8)
    ts = np.empty(64, dtype=np.int64)
    te = np.empty(64, dtype=np.int64)
    row = np.empty(nperm, dtype=np.uint32)
    for w in range(nw):
        # tokens of the window
        nt = 0
        i = win_start[w]
        end = win_end[w]
        while True:
            s, i = _next_token(data, i, end)
            if s == end:
                break
            if nt == len(ts):
                ts2 = np.empty(2 * nt, dtype=np.int64)
                te2 = np.empty(2 * nt, dtype=np.int64)
                ts2[:nt] = ts
                te2[:nt] = te
                ts, te = ts2, te2
            ts[nt] = s
            te[nt] = i
            nt += 1
        if nt == 0:
            continue
        nsh = nt - k_words + 1 if nt >= k_words else 1
        span = k_words if nt >= k_words else nt
        counts[w] = nsh
        row[:] = np.uint32(0xFFFFFFFF)
        for j in range(nsh):
            # the shingle's bytes: tokens j .. j+span-1 joined by one space
            need = 0
            for t in range(j, j + span):
                need += te[t] - ts[t] + 1
            if need - 1 == te[j + span - 1] - ts[j]:
                h = xxh32(data, ts[j], need - 1)  # tokens one space apart: hash in place
            else:
                if need > len(buf):
                    buf = np.empty(2 * need, dtype=np.uint8)
                m = 0
                for t in range(j, j + span):
                    if t > j:
                        buf[m] = 32
                        m += 1
                    for q in range(ts[t], te[t]):
                        buf[m] = data[q]
                        m += 1
                h = xxh32(buf, 0, m)
            # datasketch pre-mixes each hash with MurmurHash3's fmix32
            h ^= h >> np.uint64(16)
            h = (h * np.uint64(0x85EBCA6B)) & _M32
            h ^= h >> np.uint64(13)
            h = (h * np.uint64(0xC2B2AE35)) & _M32
            h ^= h >> np.uint64(16)
            h32 = np.uint32(h)
            for k in range(nperm):  # 32-bit lanes: the compiler vectorizes this loop
                v = np.uint32(a[k] * h32 + b[k])
                row[k] = min(row[k], v)
        for k in range(nperm):
            sigs[w, k] = row[k]
    return sigs, counts


KERNELS = {"token_hashes": token_hashes, "ngram_hashes": ngram_hashes, "sort_pairs": sort_pairs,
            "dedupe_pairs": dedupe_pairs, "order_ties": order_ties, "merge_sorted": merge_sorted,
            "xxh32": xxh32, "window_signatures": window_signatures}
