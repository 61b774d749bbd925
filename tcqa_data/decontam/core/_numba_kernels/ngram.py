"""N-gram hashing, the map's run partition, sorts and the reduce's merge.

Same results as the numpy fallback's token hashes, partitions, sorts and merge (``hashing``,
``ngrams.runs``, ``ngrams.reduce``), so the index bytes do not depend on which ran."""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import leading_zeros, trailing_zeros

from tcqa_data.decontam.core._numba_kernels.mix import SPACES8, byte_matches, fmix

_K_LEN = np.uint64(0xD6E8FEB86659FD93)

_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], dtype=np.uint64)


@njit(cache=True, nogil=True)
def ngram_hashes(tok, doc_tok, n, base, base_inv, add):
    """Rolling polynomial ``sum_j tok[i+j] * base**j`` per doc (never across docs), mixed:
    ``ngram_hashes_into`` new arrays."""
    ndocs = len(doc_tok) - 1
    m = 0
    for k in range(ndocs):
        c = doc_tok[k + 1] - doc_tok[k] - (n - 1)
        if c > 0:
            m += c
    h = np.empty(m, dtype=np.uint64)
    dd = np.empty(m, dtype=np.int64)
    ngram_hashes_into(tok, doc_tok, n, base, base_inv, add, h, dd, 0, 0)
    return h, dd


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

_LEAF = 4  # keys per part a split aims at
_BIG_DIGIT = 8  # most bits one split of a part beyond _IN_CACHE keys uses
_IN_CACHE = 1 << 15  # keys (16 B each with the payload) that sit in L2
_MAX_DIGIT = 11  # most bits one split uses (a 16 KB count table, in L1)


@njit(cache=True, nogil=True)
def _insertion_sort_by_key(k, p, a, b, lo):
    """Stable insertion sort of ``k[a:b]`` (with ``p``) by ``k >> lo``."""
    for i in range(a + 1, b):
        kv = k[i]
        key = kv >> lo
        if (k[i - 1] >> lo) <= key:
            continue
        pv = p[i]
        j = i - 1
        while j >= a and (k[j] >> lo) > key:
            k[j + 1] = k[j]
            p[j + 1] = p[j]
            j -= 1
        k[j + 1] = kv
        p[j + 1] = pv


@njit(cache=True, nogil=True)
def msd_sort(k, p, tk, tp, lo):
    """Stable in-place sort of ``k`` (uint64, payload ``p``) by ``k >> lo``: MSD radix sort from
    the highest bit that varies, ping-ponging between ``k``/``p`` and the scratch ``tk``/``tp``
    (at least as long). Each partition is split on as many bits as leave about ``_LEAF``
    keys per part (at most ``_MAX_DIGIT``), and parts of ``2 * _LEAF`` or fewer keys are finished
    by insertion sort: random 64-bit keys need two scatter passes, against 8 for an LSD sort
    on every byte."""
    n = len(k)
    if n < 2:
        return
    lo_ = np.uint64(lo)
    first = k[0] >> lo_
    x = np.uint64(0)
    for i in range(n):
        x |= (k[i] >> lo_) ^ first
    if x == 0:
        return
    nbits = 64 - leading_zeros(x)
    cap = 64 * (1 << _MAX_DIGIT)
    st_a = np.empty(cap, dtype=np.int64)
    st_b = np.empty(cap, dtype=np.int64)
    st_t = np.empty(cap, dtype=np.int64)
    st_f = np.empty(cap, dtype=np.int64)
    st_a[0], st_b[0], st_t[0], st_f[0] = 0, n, nbits, 0
    sp = 1
    bounds = np.empty((1 << _MAX_DIGIT) + 1, dtype=np.int64)
    pos = np.empty(1 << _MAX_DIGIT, dtype=np.int64)
    while sp > 0:
        sp -= 1
        a, b, top, f = st_a[sp], st_b[sp], st_t[sp], st_f[sp]
        if f:
            sk, spp, dk, dp = tk, tp, k, p
        else:
            sk, spp, dk, dp = k, p, tk, tp
        m = b - a
        w = 64 - leading_zeros(np.uint64(m // _LEAF))
        # out-of-cache parts: few destinations (a scatter to 2048 places misses the cache and the
        # TLB on every write: 5x slower than to 256)
        w = max(1, min(w, _MAX_DIGIT if m <= _IN_CACHE else _BIG_DIGIT, top))
        low = top - w  # the digit's bits: [low, top) above lo
        sh = np.uint64(lo + low)
        mask = np.uint64((1 << w) - 1)
        nv = 1 << w
        bounds[:nv + 1] = 0
        for i in range(a, b):
            bounds[((sk[i] >> sh) & mask) + 1] += 1
        single = False
        for v in range(1, nv + 1):
            if bounds[v] == m:
                single = True
                break
        if single:  # one digit value: go lower without moving anything
            if low == 0:
                if f:
                    dk[a:b] = sk[a:b]
                    dp[a:b] = spp[a:b]
            else:
                st_a[sp], st_b[sp], st_t[sp], st_f[sp] = a, b, low, f
                sp += 1
            continue
        bounds[0] = a
        for v in range(nv):
            bounds[v + 1] += bounds[v]
            pos[v] = bounds[v]
        for i in range(a, b):
            kv = sk[i]
            v = (kv >> sh) & mask
            j = pos[v]
            dk[j] = kv
            dp[j] = spp[i]
            pos[v] = j + 1
        # the parts are now in dk (k itself when f, else the scratch)
        for v in range(nv):
            ca, cb = bounds[v], bounds[v + 1]
            c = cb - ca
            if c == 0:
                continue
            if c <= 2 * _LEAF or low == 0:
                if not f:  # element loops: a slice copy costs more than these few keys
                    for q in range(ca, cb):
                        k[q] = tk[q]
                        p[q] = tp[q]
                if c > 1 and low > 0:
                    _insertion_sort_by_key(k, p, ca, cb, lo_)
            else:
                st_a[sp], st_b[sp], st_t[sp], st_f[sp] = ca, cb, low, 1 - f
                sp += 1


@njit(cache=True, nogil=True)
def _distinct_pair_count(h, d):
    """Distinct ``(h, d)`` pairs of one key group (``d`` non-decreasing): a stable sort by hash
    keeps equal hashes' docs in order, so repeats are adjacent."""
    order = np.argsort(h, kind="mergesort")
    c = 0
    for q in range(len(order)):
        o = order[q]
        if q == 0:
            c = 1
        else:
            p = order[q - 1]
            if h[o] != h[p] or d[o] != d[p]:
                c += 1
    return c


@njit(cache=True, nogil=True)
def merge_sorted_keys(h, d, drop, provenance, none, docs_out):
    """The reduce's merge of ``(hash, doc)`` pairs sorted by key ``h >> drop`` (repeats allowed):
    each key once, its number of distinct (hash, doc) pairs (df) and its first ``provenance``
    distinct docs, smallest first. A key group normally holds one hash with its docs in order
    (map runs in doc order, each cell of a run in doc order, a stable sort by key): df is then
    its number of distinct docs. A group with docs out of order is sorted by doc (``d`` may be
    reordered), and one with several hashes (keys shared by distinct n-grams) has its distinct
    (hash, doc) pairs counted exactly."""
    n = len(h)
    sh = np.uint64(drop)
    nu = 0
    prev = np.uint64(0)
    for i in range(n):
        t = h[i] >> sh
        if i == 0 or t != prev:
            nu += 1
        prev = t
    tu = np.empty(nu, dtype=np.uint64)
    df = np.empty(nu, dtype=np.uint32)
    docs = docs_out[:nu]
    docs[:] = none
    i = 0
    u = 0
    while i < n:
        h0 = h[i]
        t = h0 >> sh
        j = i + 1
        ordered = True
        single = True
        while j < n and (h[j] >> sh) == t:
            if d[j] < d[j - 1]:
                ordered = False
            if h[j] != h0:
                single = False
            j += 1
        if not ordered:
            # stable: each hash's docs end up in order too
            order = np.argsort(d[i:j], kind="mergesort")
            hs = h[i:j][order]
            ds = d[i:j][order]
            h[i:j] = hs
            d[i:j] = ds
        if single:
            c = 1
            for q in range(i + 1, j):
                if d[q] != d[q - 1]:
                    c += 1
        else:
            c = _distinct_pair_count(h[i:j], d[i:j])
        tu[u] = t
        df[u] = c
        if provenance > 0:
            docs[u, 0] = d[i]
        r = 1
        for q in range(i + 1, j):
            if r >= provenance:
                break
            if d[q] != d[q - 1]:
                docs[u, r] = d[q]
                r += 1
        u += 1
        i = j
    return tu, df, docs


@njit(cache=True, nogil=True)
def cell_counts(h, d, shift, offsets):
    """A map run's partition, first pass: ``offsets`` (length cells + 1) becomes the row offsets
    of the cells ``h >> shift``; returns the smallest and largest doc of ``d``."""
    offsets[:] = 0
    sh = np.uint64(shift)
    lo = d[0] if len(d) else 0
    hi = lo
    for i in range(len(h)):
        offsets[(h[i] >> sh) + 1] += 1
        v = d[i]
        if v < lo:
            lo = v
        if v > hi:
            hi = v
    for c in range(1, len(offsets)):
        offsets[c] += offsets[c - 1]
    return lo, hi


@njit(cache=True, nogil=True)
def scatter_cells(h, d, base, shift, offsets, h_out, d_out, packed):
    """A map run's partition, second pass: each pair to its cell (``cell_counts``' offsets), in
    input order within a cell (stable), docs stored as ``d - base`` in ``d_out``'s width, or
    with ``packed`` in the low ``64 - shift`` bits of ``h_out`` under the hash's bits below the
    cell's (``ngrams.runs.partition_pairs``)."""
    pos = offsets[:-1].copy()
    sh = np.uint64(shift)
    cb = np.uint64(64 - shift)
    for i in range(len(h)):
        hv = h[i]
        c = hv >> sh
        j = pos[c]
        if packed:
            h_out[j] = (hv << cb) | np.uint64(d[i] - base)
        else:
            h_out[j] = hv
            d_out[j] = d[i] - base
        pos[c] = j + 1


@njit(cache=True, nogil=True)
def unpack_cells(w, offs, first_cell, shift, doc_offset, h_out, d_out):
    """A packed run's rows (``scatter_cells``) back into hashes and docs + ``doc_offset``:
    ``offs`` the row offsets of cells ``first_cell, first_cell + 1, ...`` relative to ``w``."""
    sh = np.uint64(shift)
    cb = np.uint64(64 - shift)
    mask = (np.uint64(1) << cb) - np.uint64(1)
    for c in range(len(offs) - 1):
        top = np.uint64(first_cell + c) << sh
        for i in range(offs[c], offs[c + 1]):
            v = w[i]
            h_out[i] = top | (v >> cb)
            d_out[i] = np.int64(v & mask) + doc_offset


@njit(cache=True, nogil=True)
def token_hashes_1p(data, words, doc_start, salt_tok, max_bytes, tok, huge):
    """Token hashes (``hashing._token_hashes``'s values) in one pass over ``data`` into caller
    buffers: ``tok`` (room for every token, e.g. ``len(data) // 2 + 1``) and ``huge`` (start,
    end rows for tokens longer than ``max_bytes``; room for ``len(data) // (max_bytes + 1) + 1``).
    A token's end is found 8 bytes at a time (the first space byte of a word, by the classic
    zero-byte bit trick), so most tokens cost one word load, which is also the word hashed.
    Returns (ntok, doc_tok, nhuge)."""
    n = len(data)
    nd = len(doc_start)
    doc_tok = np.empty(nd, dtype=np.int64)
    t = 0
    d = 0
    nhuge = 0
    i = 0
    while True:
        while i < n and data[i] == 32:
            i += 1
        if i >= n:
            break
        s = i
        while d < nd and doc_start[d] <= s:
            doc_tok[d] = t
            d += 1
        w0 = words[s]
        e = s
        w = w0
        while True:
            z = byte_matches(w, SPACES8)
            if z != 0:
                e += trailing_zeros(z) >> 3
                break
            e += 8
            w = words[e]
        length = e - s
        i = e
        if length > max_bytes:
            huge[nhuge, 0] = t
            huge[nhuge, 1] = s
            huge[nhuge, 2] = e
            nhuge += 1
            tok[t] = 0
        elif length <= 8:
            tok[t] = fmix((w0 & _MASKS[length]) + np.uint64(length) * _K_LEN + salt_tok)
        else:
            x = w0 + np.uint64(length) * _K_LEN + salt_tok
            pos = s + 8
            while pos < e:
                x = fmix(x) ^ (words[pos] & _MASKS[min(e - pos, 8)])
                pos += 8
            tok[t] = fmix(x)
        t += 1
    while d < nd:
        doc_tok[d] = t
        d += 1
    return t, doc_tok, nhuge


@njit(cache=True, nogil=True)
def bucket_columns(local, df, docs, base, first_cell, last_cell, none, df_overflow, doc0, keys, df8,
                   over_rows, over, more_rows, offsets):
    """One pass over a chunk of a bucket's merged entries (``local`` keys sorted, ``df``, ``docs``
    [k, P]) into the format-2 columns, in caller arrays of length k (``offsets``: one per
    directory cell ``first_cell..last_cell``): stored keys (low 32 bits), uint8 df, the
    overflow rows and dfs, the first doc, the rows with a second doc (``base`` + row) and the
    cells' row offsets. Returns (overflow rows, rows with a second doc)."""
    k = len(local)
    m32 = np.uint64(0xFFFFFFFF)
    no = 0
    nm = 0
    cell = first_cell
    has_more = docs.shape[1] > 1
    for i in range(k):
        key = local[i]
        c = np.int64(key >> np.uint64(32))
        while cell <= last_cell and cell <= c:
            offsets[cell - first_cell] = base + i
            cell += 1
        keys[i] = np.uint32(key & m32)
        f = df[i]
        if f >= df_overflow:
            df8[i] = df_overflow
            over_rows[no] = base + i
            over[no] = f
            no += 1
        else:
            df8[i] = f
        doc0[i] = docs[i, 0]
        if has_more and docs[i, 1] != none:
            more_rows[nm] = base + i
            nm += 1
    while cell <= last_cell:
        offsets[cell - first_cell] = base + k
        cell += 1
    return no, nm


@njit(cache=True, nogil=True, inline="always")
def _window_top(n, base):
    """``base ** (n - 1)`` (mod 2**64): the weight of a window's last token in the rolling hash."""
    top = np.uint64(1)
    for _ in range(n - 1):
        top *= base
    return top


@njit(cache=True, nogil=True, inline="always")
def _first_window(tok, a, n, base):
    """The rolling hash's sum of the window ``tok[a:a + n]`` (token j weighted ``base ** j``); the
    kernels roll it on by one token at a time."""
    s = np.uint64(0)
    p = np.uint64(1)
    for j in range(n):
        s += tok[a + j] * p
        p *= base
    return s


@njit(cache=True, nogil=True)
def ngram_hashes_into(tok, doc_tok, n, base, base_inv, add, h_out, d_out, pos, doc_base):
    """The rolling n-gram hashes of every doc (see ``ngram_hashes``) written from ``h_out[pos]`` /
    ``d_out[pos]`` (the caller made room), docs as ``doc_base`` + the doc's index: a map's batches
    go straight into its run buffer. Returns the new end."""
    ndocs = len(doc_tok) - 1
    top = _window_top(n, base)
    out = pos
    for k in range(ndocs):
        a, b = doc_tok[k], doc_tok[k + 1]
        if b - a < n:
            continue
        s = _first_window(tok, a, n, base)
        doc = doc_base + k
        for i in range(a, b - n + 1):
            if i > a:
                s = (s - tok[i - 1]) * base_inv + tok[i + n - 1] * top
            h_out[out] = fmix(s + add)
            d_out[out] = doc
            out += 1
    return out


@njit(cache=True, nogil=True)
def ngram_hashes_present(tok, doc_tok, n, base, base_inv, add, high, shift, low, mask, h_out, d_out):
    """``ngram_hashes`` of every doc, keeping only the hashes that pass two bit filters (uint8, bit
    ``v & 7`` of byte ``v >> 3``): ``high`` on ``v = h >> shift``, then ``low`` on ``v = h & mask``.
    Two small filters stay in a core's cache where one as selective would not: a stream pass
    looks up the few n-grams a benchmark may hold without writing every corpus n-gram out.
    ``h_out``/``d_out`` need room for every n-gram (the caller's buffers). Returns the count."""
    ndocs = len(doc_tok) - 1
    top = _window_top(n, base)
    sh = np.uint64(shift)
    m = np.uint64(mask)
    three, seven, one = np.uint64(3), np.uint64(7), np.uint8(1)
    out = 0
    for k in range(ndocs):
        a, b = doc_tok[k], doc_tok[k + 1]
        if b - a < n:
            continue
        s = _first_window(tok, a, n, base)
        for i in range(a, b - n + 1):
            if i > a:
                s = (s - tok[i - 1]) * base_inv + tok[i + n - 1] * top
            h = fmix(s + add)
            v = h >> sh
            if (high[v >> three] >> (v & seven)) & one:
                v = h & m
                if (low[v >> three] >> (v & seven)) & one:
                    h_out[out] = h
                    d_out[out] = k
                    out += 1
    return out


@njit(cache=True, nogil=True)
def hash_slots(keys, bits):
    """An open-addressing table of distinct uint64 ``keys`` (well mixed: their top ``bits`` bits
    are the home slot; linear probing): ``(slot keys, slot rows)``, row -1 = empty. ``2**bits``
    must exceed ``len(keys)``."""
    size = 1 << bits
    slot_keys = np.zeros(size, dtype=np.uint64)
    slot_rows = np.full(size, -1, dtype=np.int64)
    mask = size - 1
    sh = np.uint64(64 - bits)
    for r in range(len(keys)):
        i = np.int64(keys[r] >> sh)
        while slot_rows[i] >= 0:
            i = (i + 1) & mask
        slot_keys[i] = keys[r]
        slot_rows[i] = r
    return slot_keys, slot_rows


@njit(cache=True, nogil=True)
def hash_slot_lookup(slot_keys, slot_rows, bits, hashes, rows, found):
    """Each hash's row among the keys of ``hash_slots`` (``rows``, ``found``; left as they are
    where absent): about one cache miss a hash, where a binary search takes ~20 steps."""
    mask = (1 << bits) - 1
    sh = np.uint64(64 - bits)
    for j in range(len(hashes)):
        h = hashes[j]
        i = np.int64(h >> sh)
        while slot_rows[i] >= 0:
            if slot_keys[i] == h:
                rows[j] = slot_rows[i]
                found[j] = True
                break
            i = (i + 1) & mask

KERNELS = {"ngram_hashes": ngram_hashes, "dedupe_pairs": dedupe_pairs, "order_ties": order_ties,
           "merge_sorted": merge_sorted, "msd_sort": msd_sort, "merge_sorted_keys": merge_sorted_keys,
           "token_hashes_1p": token_hashes_1p, "bucket_columns": bucket_columns,
           "cell_counts": cell_counts, "scatter_cells": scatter_cells, "unpack_cells": unpack_cells,
           "ngram_hashes_into": ngram_hashes_into,
           "ngram_hashes_present": ngram_hashes_present, "hash_slots": hash_slots,
           "hash_slot_lookup": hash_slot_lookup}
