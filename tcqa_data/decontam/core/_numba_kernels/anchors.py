"""Text-store anchors: winnowed hashes."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def winnow_hashes(h, doc, w):
    """``textstore.winnow_hashes``: of every ``w`` consecutive k-gram hashes ``h`` of one doc
    (``doc`` non-decreasing) the first smallest is kept; a doc with fewer than ``w`` keeps all.
    Returns the kept hashes' top 32 bits and their docs, in input order."""
    n = len(h)
    keep = np.zeros(n, dtype=np.bool_)
    a = 0
    while a < n:
        b = a + 1
        while b < n and doc[b] == doc[a]:
            b += 1
        if b - a < w:
            keep[a:b] = True
        else:
            for i in range(a, b - w + 1):
                # selects, not branches: which hash is smallest is random (mispredicted)
                j = i
                hj = h[i]
                for t in range(i + 1, i + w):
                    less = h[t] < hj
                    j = t if less else j
                    hj = h[t] if less else hj
                keep[j] = True
        a = b
    m = 0
    for i in range(n):
        m += keep[i]
    out_h = np.empty(m + 1, dtype=np.uint32)
    out_d = np.empty(m + 1, dtype=np.int64)
    k = 0
    for i in range(n):  # every item written, the next one overwrites it unless it is kept
        out_h[k] = np.uint32(h[i] >> np.uint64(32))
        out_d[k] = doc[i]
        k += keep[i]
    return out_h[:m], out_d[:m]


KERNELS = {"winnow_hashes": winnow_hashes}
