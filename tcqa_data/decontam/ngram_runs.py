"""N-gram index, map side: documents -> sorted runs of unique ``(hash, local doc)`` pairs.

A :class:`RunWriter` hashes batches of one input's documents and spills *runs* (pairs sorted by
hash then doc, deduplicated, with per-bucket row offsets) to ``run_dir``; the reduce
(:mod:`ngram_reduce`) merges one bucket of every run. The run files are build scratch, not index
format: local doc ordinals are stored as uint32 when they fit.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tcqa_data.decontam import kernel
from tcqa_data.decontam.arrays import narrow_ordinals
from tcqa_data.decontam.hashing import batch_ngram_hashes, hash_normalized
from tcqa_data.decontam.ngram_index import DEFAULT_NUM_BUCKETS, _bucket_range
from tcqa_data.io_utils import write_npy_atomic

# Pairs per spilled run: bounds the map's memory whatever the corpus size.
DEFAULT_RUN_PAIRS = 2_000_000


# --------------------------------------------------------------------------- sorting


def _sort_by_hash(h: np.ndarray, d: np.ndarray, *rest: np.ndarray) -> list[np.ndarray]:
    """``h`` sorted, with ``d`` and ``rest`` permuted alike; equal hashes ordered by ``d``.

    Two levels: a stable radix partition on the most significant byte that varies, then a
    SIMD argsort inside each cache-sized partition (2-3x faster than one big argsort, whose
    random gathers miss the cache). Only runs of equal hashes are then re-sorted by ``d``.
    """
    n = len(h)
    if n == 0:
        return [h, d, *rest]
    if n < 1 << 15:
        order = np.argsort(h)
        out = [h[order], d[order], *(r[order] for r in rest)]
    else:
        shift = max(0, (int(h.min()) ^ int(h.max())).bit_length() - 8)
        part = ((h >> np.uint64(shift)) & np.uint64(0xFF)).astype(np.uint8)
        order = np.argsort(part, kind="stable")  # radix sort for 8-bit keys
        out = [h[order], d[order], *(r[order] for r in rest)]
        del order
        bounds = np.cumsum(np.bincount(part, minlength=256))
        a = 0
        for b in bounds.tolist():
            if b - a > 1:
                sub = np.argsort(out[0][a:b])
                for arr in out:
                    arr[a:b] = arr[a:b][sub]
            a = b
    hs, ds = out[0], out[1]
    eq = hs[1:] == hs[:-1]
    if eq.any():
        member = np.zeros(n, dtype=bool)
        member[1:] |= eq
        member[:-1] |= eq
        idx = np.flatnonzero(member)
        sub = idx[np.lexsort((ds[idx], hs[idx]))]
        for arr in out[1:]:
            arr[idx] = arr[sub]
    return out


def _sort_by_hash_compiled(h: np.ndarray, d: np.ndarray, *rest: np.ndarray) -> list[np.ndarray]:
    """``_sort_by_hash`` with the numba kernels (same result, so the same bytes on disk).

    The kernel's stable radix sort, then each run of equal hashes ordered by ``d``. Also for a
    concatenation of sorted runs (the reduce): about 2x faster than numpy's stable argsort
    (timsort merging the runs) on hundreds of runs, and the same permutation."""
    k = kernel.kernels()
    n = len(h)
    h = np.ascontiguousarray(h, dtype=np.uint64)
    hs, order = _radix_sort_pairs(k, h, np.arange(n, dtype=np.int64))
    ds = np.ascontiguousarray(d[order], dtype=np.int64)
    pos = np.arange(n, dtype=np.int64)
    k["order_ties"](hs, ds, pos)
    idx = order[pos]
    return [hs, ds.astype(d.dtype, copy=False), *(r[idx] for r in rest)]


def _radix_sort_pairs(k: dict, h: np.ndarray, payload: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's stable radix sort of ``h`` (uint64, contiguous) with ``payload``, on the low
    bytes where the hashes differ."""
    shift = max(0, (int(h.min()) ^ int(h.max())).bit_length() - 8) if len(h) else 0
    return k["sort_pairs"](h, payload, shift)


def sort_pairs(h: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort ``(hash, doc)`` pairs by hash then doc and drop repeated pairs."""
    if kernel.enabled():
        k = kernel.kernels()
        hs, ds = _radix_sort_pairs(k, np.ascontiguousarray(h, dtype=np.uint64),
                                   np.ascontiguousarray(d, dtype=np.int64))
        k["order_ties"](hs, ds, np.empty(0, dtype=np.int64))
        return k["dedupe_pairs"](hs, ds)
    hs, ds = _sort_by_hash(h, d)
    if len(hs) > 1:
        keep = np.ones(len(hs), dtype=bool)
        keep[1:] = (hs[1:] != hs[:-1]) | (ds[1:] != ds[:-1])
        if not keep.all():
            hs, ds = hs[keep], ds[keep]
    return hs, ds


# --------------------------------------------------------------------------- map side


def run_file(run_dir: str | os.PathLike, n: int, run: int, kind: str) -> str:
    """One file of a run (``kind``: hashes, docs or offsets), as a string: cheaper than a Path
    where the reduce looks up every run once per bucket."""
    return os.path.join(run_dir, f"n{n}", f"run{run:05d}.{kind}.npy")


def run_paths(run_dir: str | os.PathLike, n: int, run: int) -> dict[str, Path]:
    return {k: Path(run_file(run_dir, n, run, k)) for k in ("hashes", "docs", "offsets")}


def list_runs(run_dir: str | os.PathLike, n: int) -> list[int]:
    base = Path(run_dir) / f"n{n}"
    if not base.is_dir():
        return []
    return sorted(int(p.name[3:8]) for p in base.glob("run*.offsets.npy"))


def write_run(run_dir: str | os.PathLike, n: int, run: int, h: np.ndarray, d: np.ndarray,
              num_buckets: int) -> int:
    """Sort, dedupe and write one run; returns its number of pairs. ``offsets.npy`` is last."""
    hs, ds = sort_pairs(h, d)
    lo = np.array([_bucket_range(b, num_buckets)[0] for b in range(num_buckets)], dtype=np.uint64)
    offsets = np.empty(num_buckets + 1, dtype=np.int64)
    offsets[:-1] = np.searchsorted(hs, lo)
    offsets[-1] = len(hs)
    p = run_paths(run_dir, n, run)
    write_npy_atomic(p["hashes"], hs)
    # local doc ordinals as uint32 (12 instead of 16 bytes per pair on the build's scratch disk);
    # the reduce widens them to int64 whatever the width
    write_npy_atomic(p["docs"], narrow_ordinals(ds))
    write_npy_atomic(p["offsets"], offsets)
    return len(hs)


@dataclass
class RunWriter:
    """Map side for one input shard: hash batches of documents, spill sorted runs to ``run_dir``.

    Docs get local ordinals ``0, 1, ...`` in the order added; the reduce adds the input's offset.
    """

    run_dir: str
    ngram_sizes: Sequence[int]
    scheme: str = "janitor"
    seed: int = 0
    num_buckets: int = DEFAULT_NUM_BUCKETS
    run_pairs: int = DEFAULT_RUN_PAIRS

    def __post_init__(self) -> None:
        self.docs = 0
        self.ngrams = {n: 0 for n in self.ngram_sizes}
        self._pending: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {n: [] for n in self.ngram_sizes}
        self._pending_len = 0
        self._runs = {n: 0 for n in self.ngram_sizes}

    def add_batch(self, texts: Sequence[str]) -> None:
        self._add(batch_ngram_hashes(texts, self.ngram_sizes, self.scheme, self.seed), len(texts))

    def add_normalized(self, data: np.ndarray, doc_start: np.ndarray) -> None:
        """``add_batch`` for documents already normalized into one buffer (``hash_normalized``'s
        layout, e.g. from ``readers.iter_normalized_batches``)."""
        self._add(hash_normalized(data, doc_start, self.ngram_sizes, self.seed), len(doc_start) - 1)

    def _add(self, res: dict[int, tuple[np.ndarray, np.ndarray]], ndocs: int) -> None:
        for n, (h, d) in res.items():
            d += self.docs
            self._pending[n].append((h, d))
            self.ngrams[n] += len(h)
        self.docs += ndocs
        self._pending_len += max((len(h) for h, _ in res.values()), default=0)
        if self._pending_len >= self.run_pairs:
            self.spill()

    def spill(self) -> None:
        for n in self.ngram_sizes:
            parts = self._pending[n]
            if not parts:
                continue
            self._pending[n] = []
            h = np.concatenate([p[0] for p in parts])
            d = np.concatenate([p[1] for p in parts])
            del parts  # free the batch arrays before sorting: peak memory is ~4 x run_pairs x 16 B
            if len(h):
                write_run(self.run_dir, n, self._runs[n], h, d, self.num_buckets)
                self._runs[n] += 1
            del h, d
        self._pending_len = 0

    def close(self) -> dict[str, Any]:
        self.spill()
        return {"docs": self.docs, "ngrams": {str(n): c for n, c in self.ngrams.items()},
                "runs": {str(n): c for n, c in self._runs.items()}}


