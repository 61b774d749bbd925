"""The semantic tier's candidate windows (``decontam/semantic/windows.py``): per corpus window,
the items sharing enough of their rare-word weight, in one pass over the hits and the segments
(``semantic/cores.py``) holding each word, instead of expanding every (rare-word hit, item) pair
and sorting them."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _grow(a, n):
    out = np.empty(max(2 * len(a), n), dtype=a.dtype)
    out[:len(a)] = a
    return out


@njit(cache=True, nogil=True)
def window_groups(v, doc, pos, doc_len, seg_start, seg_post, weight, item_core, core_items_start, core_items,
                  core_need_weight, core_need_words, need_weight, need_words, window_words, stride):
    """The passing (item, doc, window) groups of one batch: ``v``/``doc``/``pos``: each rare-word
    hit's row in the table, doc and word position, in token order (doc, then position). Window
    ``w`` of a doc holds words ``[w * stride, w * stride + window_words)`` (``window_words`` is two
    strides) and exists while ``w * stride < max(doc_len - window_words + stride, 1)``. A word's
    segments (``semantic/cores.py``: an item's residual, or a core its cluster shares) are
    counted per window; an item is its residual plus its core, evaluated when its residual is
    touched or its core alone meets the cluster's least need. Per group, over the distinct rare
    words of the window (each at its first position): the summed weight, the count, and the
    floor of their mean position. Returns (query, doc, window, weight, shared, centre) of the
    groups with ``weight * 100 >= need_weight`` and ``shared >= need_words``, in no set order."""
    n = len(v)
    nq = len(need_weight)
    seen = np.full(len(weight), -1, dtype=np.int64)  # per word: the window that saw it last
    acc = np.zeros((nq + len(core_need_weight), 4), dtype=np.int64)  # per segment, in one cache
    acc[:, 0] = -1  # line: the window that touched it last, then its weight, word count, position sum
    evaluated = np.full(nq, -1, dtype=np.int64)  # per item: the window that evaluated it last
    touched = np.empty(len(acc), dtype=np.int64)
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
                    for j in range(seg_start[r], seg_start[r + 1]):
                        s = seg_post[j]
                        if acc[s, 0] != stamp:
                            acc[s, 0] = stamp
                            acc[s, 1] = wt
                            acc[s, 2] = 1
                            acc[s, 3] = p
                            touched[ntouched] = s
                            ntouched += 1
                        else:
                            acc[s, 1] += wt
                            acc[s, 2] += 1
                            acc[s, 3] += p
                hi += 1
            for t in range(ntouched):
                s = touched[t]
                if s < nq:  # an item's residual: that item
                    first, last, from_core = s, s + 1, False
                else:  # a core: its items, when it alone meets the least need among them
                    c = s - nq
                    if acc[s, 1] * 100 < core_need_weight[c] or acc[s, 2] < core_need_words[c]:
                        continue
                    first, last, from_core = core_items_start[c], core_items_start[c + 1], True
                for i in range(first, last):
                    q = core_items[i] if from_core else i
                    if evaluated[q] == stamp:
                        continue
                    evaluated[q] = stamp
                    tw, tn, tp = 0, 0, 0
                    if acc[q, 0] == stamp:
                        tw, tn, tp = acc[q, 1], acc[q, 2], acc[q, 3]
                    cs = item_core[q]
                    if cs >= 0 and acc[cs, 0] == stamp:
                        tw += acc[cs, 1]
                        tn += acc[cs, 2]
                        tp += acc[cs, 3]
                    if tw * 100 < need_weight[q] or tn < need_words[q]:
                        continue
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
                    o_wt[k] = tw
                    o_s[k] = tn
                    o_c[k] = tp // tn
                    k += 1
            stamp += 1
        a = b
    return o_q[:k], o_d[:k], o_w[:k], o_wt[:k], o_s[:k], o_c[:k]


KERNELS = {"window_groups": window_groups}
