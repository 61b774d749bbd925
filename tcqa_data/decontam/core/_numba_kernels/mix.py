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


ONES8 = np.uint64(0x0101010101010101)
SPACES8 = np.uint64(0x2020202020202020)  # eight spaces: a token scan's, a JSON string's plain bytes
HIGH8 = np.uint64(0x8080808080808080)


@njit(cache=True, nogil=True, inline="always")
def byte_matches(word, pattern8):
    """The zero-byte test on ``word ^ pattern8`` (8 bytes at once): the high bit of each byte of
    ``word`` equal to ``pattern8``'s byte (a space, a newline, a quote), exact up to the first such
    byte (a borrow may mark bytes after it), so ``trailing_zeros(m) >> 3`` is the first one's index."""
    x = word ^ pattern8
    return (x - ONES8) & ~x & HIGH8
