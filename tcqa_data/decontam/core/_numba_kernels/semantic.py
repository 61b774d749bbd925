"""The semantic tier's candidate windows (``decontam/semantic/windows.py``): per corpus window,
the items sharing enough of their rare-word weight, in one pass instead of expanding every
(rare-word hit, item) pair and sorting them."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _grow(a, n):
    out = np.empty(max(2 * len(a), n), dtype=a.dtype)
    out[:len(a)] = a
    return out


@njit(cache=True, nogil=True)
def window_groups(v, doc, pos, doc_len, post_start, post_query, weight, query_total, query_rare,
                  window_words, stride, share_cap, min_share_pct, min_shared):
    """The passing (item, doc, window) groups of one batch: ``v``/``doc``/``pos``: each rare-word
    hit's row in the table, doc and word position, in token order (doc, then position). Window
    ``w`` of a doc holds words ``[w * stride, w * stride + window_words)`` (``window_words`` is two
    strides) and exists while ``w * stride < max(doc_len - window_words + stride, 1)``. Per group,
    over the distinct rare words of the window (each at its first position): the summed weight,
    the count, and the floor of their mean position. Returns (query, doc, window, weight,
    shared, centre) of the groups passing ``windows.scan_windows``'s test, in no set order."""
    n = len(v)
    nq = len(query_total)
    seen = np.full(len(weight), -1, dtype=np.int64)  # per word: the window that saw it last
    acc = np.zeros((nq, 4), dtype=np.int64)  # per item, in one cache line: the window that touched
    acc[:, 0] = -1  # it last, then its shared weight, word count and position sum
    touched = np.empty(nq, dtype=np.int64)
    cap = 1024
    o_q = np.empty(cap, dtype=np.int64)
    o_d = np.empty(cap, dtype=np.int64)
    o_w = np.empty(cap, dtype=np.int64)
    o_wt = np.empty(cap, dtype=np.int64)
    o_s = np.empty(cap, dtype=np.int64)
    o_c = np.empty(cap, dtype=np.int64)
    k = 0
    stamp = 0
    a = 0
    while a < n:
        d = doc[a]
        b = a + 1
        while b < n and doc[b] == d:
            b += 1
        limit = max(doc_len[d] - window_words + stride, 1)
        nwin = (limit + stride - 1) // stride
        first_w = max(pos[a] // stride - 1, 0)
        last_w = min(pos[b - 1] // stride, nwin - 1)
        lo = a
        for w in range(first_w, last_w + 1):
            start = w * stride
            while lo < b and pos[lo] < start:
                lo += 1
            hi = lo
            ntouched = 0
            while hi < b and pos[hi] < start + window_words:
                r = v[hi]
                if seen[r] != stamp:
                    seen[r] = stamp
                    wt = weight[r]
                    p = pos[hi]
                    for j in range(post_start[r], post_start[r + 1]):
                        q = post_query[j]
                        if acc[q, 0] != stamp:
                            acc[q, 0] = stamp
                            acc[q, 1] = wt
                            acc[q, 2] = 1
                            acc[q, 3] = p
                            touched[ntouched] = q
                            ntouched += 1
                        else:
                            acc[q, 1] += wt
                            acc[q, 2] += 1
                            acc[q, 3] += p
                hi += 1
            for t in range(ntouched):
                q = touched[t]
                s = acc[q, 2]
                if s < 2:  # most items a window touches share one word with it
                    continue
                if acc[q, 1] * 100 >= min(query_total[q], share_cap) * min_share_pct and \
                        s >= min(min_shared, query_rare[q]):
                    if k == len(o_q):
                        o_q = _grow(o_q, k + 1)
                        o_d = _grow(o_d, k + 1)
                        o_w = _grow(o_w, k + 1)
                        o_wt = _grow(o_wt, k + 1)
                        o_s = _grow(o_s, k + 1)
                        o_c = _grow(o_c, k + 1)
                    o_q[k] = q
                    o_d[k] = d
                    o_w[k] = w
                    o_wt[k] = acc[q, 1]
                    o_s[k] = s
                    o_c[k] = acc[q, 3] // s
                    k += 1
            stamp += 1
        a = b
    return o_q[:k], o_d[:k], o_w[:k], o_wt[:k], o_s[:k], o_c[:k]


KERNELS = {"window_groups": window_groups}
