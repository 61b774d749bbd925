"""N-gram index, reduce side: the merge of a chunk's pairs into stored keys.

Pure functions on arrays: sorted or unsorted ``(hash or key, doc)`` pairs in, each stored key once
out, with its doc frequency and its first ``provenance`` distinct docs (the compiled kernels, or
the numpy code that gives the same arrays). :mod:`reduce` reads the chunks and writes the
files.
"""

from __future__ import annotations

import numpy as np

from tcqa_data.decontam.core import kernel
from tcqa_data.decontam.ngrams.index import DOC_DTYPE, DOC_NONE
from tcqa_data.decontam.ngrams.runs import (
    _sort_by_hash,
    _sort_by_hash_compiled,
    _sort_dedupe_in_place,
    sort_pairs,
)
from tcqa_data.errors import TcqaError


def _distinct_pairs(hs: list[np.ndarray], ds: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (hash, doc) pairs of runs' pieces, sorted by hash then doc."""
    h, d = np.concatenate(hs), np.concatenate(ds)  # new arrays: sorted in place
    if kernel.enabled():
        return _sort_dedupe_in_place(kernel.kernels(), h, d)
    return sort_pairs(h, d)


def _provenance_dtype(d: np.ndarray, doc_dtype: np.dtype | str) -> tuple[np.dtype, int]:
    """``doc_dtype`` and its empty-slot value; a TcqaError if a doc of ``d`` does not fit it."""
    doc_dtype = np.dtype(doc_dtype)
    if doc_dtype == DOC_DTYPE and len(d) and int(d.max()) >= DOC_NONE:
        raise TcqaError(f"doc ordinal {int(d.max())} does not fit the index's uint32 provenance "
                        f"(at most {DOC_NONE - 1}); build with doc_dtype=int64")
    return doc_dtype, (DOC_NONE if doc_dtype == DOC_DTYPE else -1)


def _merge_pairs(hs: list[np.ndarray], ds: list[np.ndarray], drop: int, provenance: int,
                 doc_dtype: np.dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_merge_keys` of runs' pairs, with the kernels: ``hs`` the runs' hashes in each
    run's order (partitioned runs: cell by cell; keys ``h >> drop``), ``ds`` their docs. Pairs
    may repeat (a doc holding an n-gram twice), never across runs (a doc's pairs are in one
    run). With the runs in doc order (as the build lists them) and each cell in doc order, a
    stable sort by key leaves each key's docs in order: the merge kernel then counts a key's
    distinct docs when it has one hash, and sorts and counts exactly the rare key that has
    several hashes (distinct n-grams sharing a stored key) or docs out of order."""
    k = kernel.kernels()
    h = np.concatenate(hs) if len(hs) > 1 else np.array(hs[0], dtype=np.uint64, copy=True)
    d = np.concatenate(ds) if len(ds) > 1 else ds[0]  # ds[0] is this chunk's own (shifted) array
    doc_dtype, none = _provenance_dtype(d, doc_dtype)
    k["msd_sort"](h, d, np.empty_like(h), np.empty_like(d), drop)
    out = np.empty((len(h), provenance), dtype=doc_dtype)
    return k["merge_sorted_keys"](h, d, drop, provenance, none, out)


def _merge_keys(t: np.ndarray, d: np.ndarray, w: np.ndarray, provenance: int, doc_dtype: np.dtype
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_merge` on stored keys: sorted by (key, doc) first, and a doc that holds two
    n-grams of the same key made one pair (weights add, so df is the sum of their dfs)."""
    if len(t) > 1:
        tie = t[1:] == t[:-1]
        if bool(np.any(t[1:] < t[:-1])) or bool(np.any(tie & (d[1:] < d[:-1]))):
            sort = _sort_by_hash_compiled if kernel.enabled() else _sort_by_hash
            t, d, w = sort(t, d, w)
            tie = t[1:] == t[:-1]
        dup = tie & (d[1:] == d[:-1])
        if dup.any():
            start = np.flatnonzero(np.concatenate([[True], ~dup]))
            t, d, w = t[start], d[start], np.add.reduceat(w, start)
    return _merge(t, d, w, provenance, doc_dtype)


def _merge(h: np.ndarray, d: np.ndarray, w: np.ndarray, provenance: int, doc_dtype: np.dtype = DOC_DTYPE
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    # (key, doc) pairs are distinct (_merge_keys), so a key's df is the sum of its weights.
    doc_dtype, none = _provenance_dtype(d, doc_dtype)
    if kernel.enabled():
        k = kernel.kernels()
        if len(h) > 1 and not bool(np.all(h[1:] >= h[:-1])):
            h, d, w = _sort_by_hash_compiled(h, d, w)
        out = np.empty((len(h), provenance), dtype=doc_dtype)
        return k["merge_sorted"](np.ascontiguousarray(h), np.ascontiguousarray(d, np.int64),
                                 np.ascontiguousarray(w, np.int64), provenance, none, out)
    if len(h) > 1 and not bool(np.all(h[1:] >= h[:-1])):
        h, d, w = _sort_by_hash(h, d, w)
    if len(h) < 2 or bool(np.all(h[1:] != h[:-1])):  # common case: every hash once
        docs = np.full((len(h), provenance), none, dtype=doc_dtype)
        docs[:, 0] = d
        return h, w.astype(np.uint32), docs
    start = np.flatnonzero(np.concatenate([[True], h[1:] != h[:-1]])) if len(h) else np.empty(0, np.int64)
    h_u = h[start]
    df = np.add.reduceat(w, start).astype(np.uint32) if len(h) else np.empty(0, np.uint32)
    docs = np.full((len(start), provenance), none, dtype=doc_dtype)
    grp = np.repeat(np.arange(len(start)), np.diff(np.append(start, len(h))))
    rank = np.arange(len(h)) - start[grp]
    sel = rank < provenance
    docs[grp[sel], rank[sel]] = d[sel]
    return h_u, df, docs
