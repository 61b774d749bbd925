"""Hash mixing and byte masks shared by the kernels (``ngram``, ``minhash``, ``jsonl``)."""

from __future__ import annotations

import numpy as np
from numba import njit

_F1 = np.uint64(0xBF58476D1CE4E5B9)
_F2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)

@njit(cache=True, nogil=True)
def fmix(z):
    z ^= z >> _S30
    z *= _F1
    z ^= z >> _S27
    z *= _F2
    z ^= z >> _S31
    return z


# the zero-byte test on 8 bytes at once, ``(x - ONES8) & ~x & HIGH8``: a token's end, a line's end
ONES8 = np.uint64(0x0101010101010101)
SPACES8 = np.uint64(0x2020202020202020)  # eight spaces: a token scan's, a JSON string's plain bytes
HIGH8 = np.uint64(0x8080808080808080)
