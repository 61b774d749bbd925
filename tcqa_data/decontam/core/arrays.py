"""Array helpers shared by the build and the queries."""

from __future__ import annotations

import numpy as np


def narrow_ordinals(ordinals: np.ndarray) -> np.ndarray:
    """Non-negative ordinals as uint32 when all fit (build scratch: 4 bytes instead of 8), else
    int64; readers widen them back to int64."""
    fits = not len(ordinals) or int(ordinals.max()) <= 0xFFFFFFFF
    return ordinals.astype(np.uint32 if fits else np.int64, copy=False)


def sorted_unique(values: np.ndarray, *, in_place: bool = False) -> np.ndarray:
    """``np.unique`` of a 1-d integer array: a sort and a neighbour compare. numpy 2.4's
    ``np.unique`` without ``return_*`` options takes a hash-based path that is ~50x slower than
    sorting on 64-bit integers (1 s vs 0.02 s per million). ``in_place`` sorts ``values`` itself
    (no copy: the callers' arrays can be hundreds of MB)."""
    out = values if in_place else np.array(values, copy=True)
    out.sort()
    if len(out) < 2:
        return out
    new = np.empty(len(out), dtype=bool)
    new[0] = True
    np.not_equal(out[1:], out[:-1], out=new[1:])
    return out[new]


FILTER_BITS = 24  # a presence filter: 16 MB


def presence_filter(keys: np.ndarray, bits: int) -> np.ndarray:
    """One bool per value of the top ``FILTER_BITS`` of ``bits``-bit keys: whether a key has it."""
    out = np.zeros(1 << FILTER_BITS, dtype=bool)
    out[(keys >> np.uint64(bits - FILTER_BITS)).astype(np.int64)] = True
    return out


def sorted_lookup(keys: np.ndarray, hashes: np.ndarray, presence: np.ndarray | None = None, bits: int = 64
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Per hash: its row among sorted distinct ``bits``-bit ``keys`` (0 where not found) and whether
    it is there, by binary search (only of the hashes ``presence_filter`` passes, given one): the
    path without compiled kernels (``key_slots``)."""
    rows = np.zeros(len(hashes), np.int64)
    found = np.zeros(len(hashes), bool)
    if not len(keys):
        return rows, found
    maybe = (np.flatnonzero(presence[hashes >> np.uint64(bits - FILTER_BITS)]) if presence is not None
             else np.arange(len(hashes)))
    i = np.searchsorted(keys, hashes[maybe])
    np.minimum(i, len(keys) - 1, out=i)
    rows[maybe] = i
    found[maybe] = keys[i] == hashes[maybe]
    return rows, found


def key_slots(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """An open-addressing table (at most half full) of distinct uint64 ``keys`` for ``slot_lookup``:
    compiled kernels (``kernel.enabled()``); 1.6 M n-grams looked up in 0.06 CPU-s where a
    presence filter and a binary search took 0.46."""
    from tcqa_data.decontam.core import kernel

    bits = (2 * len(keys)).bit_length()
    return (*kernel.kernels()["hash_slots"](keys, bits), bits)


def slot_lookup(slots: tuple[np.ndarray, np.ndarray, int], hashes: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """Per hash: its row among the keys of ``slots`` (``key_slots``; 0 where not found) and whether
    it is there."""
    from tcqa_data.decontam.core import kernel

    rows = np.zeros(len(hashes), np.int64)
    found = np.zeros(len(hashes), bool)
    kernel.kernels()["hash_slot_lookup"](*slots, hashes, rows, found)
    return rows, found
