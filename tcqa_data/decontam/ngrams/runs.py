"""N-gram index, map side: documents -> runs of ``(hash, local doc)`` pairs partitioned into cells.

A :class:`RunWriter` hashes batches of one input's documents and spills *runs* to ``run_dir``;
the reduce (:mod:`reduce`) merges one bucket of every run. A run is only partitioned, not
sorted: its pairs are scattered (stably, so each cell keeps its pairs in doc order) into the
cells of the top :func:`cell_bits` bits of the hash, with the cells' row offsets; repeated
pairs stay (the reduce sorts each chunk by key anyway, and dedupes there). The run files are
build scratch, not index format (:func:`write_run`):

* ``hashes.npy``: uint64, cell by cell;
* ``docs.npy``: docs relative to the run's first doc, as uint16 or uint32 when they fit;
* ``offsets.npy`` (written last: marks the run complete): int64, the ``2**cell_bits + 1`` cell
  row offsets, then the run's first doc, then ``cell_bits``.

A run spanning fewer than ``2**cell_bits`` docs is *packed* (``offsets.npy`` ends with
``-cell_bits``): each ``hashes.npy`` word holds the hash's bits below the cell's (the cell
gives the top ``cell_bits``) over the doc relative to the run's first doc, and ``docs.npy`` is
empty: 8 bytes a pair instead of 10 (the map's scratch writes cost ~3 ns a byte), the same pairs.

The reduce also reads runs *sorted* by (hash, doc) with per-bucket offsets (``num_buckets + 1``
row offsets, then the first doc; the two-level reduce's group runs, and the map's runs before
the partition): a sorted run can be cut at any hash, a partitioned one only at cell bounds.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tcqa_data.decontam.core import kernel
from tcqa_data.decontam.core.hashing import batch_ngram_hashes, hash_normalized, hash_normalized_into
from tcqa_data.decontam.ngrams.index import DEFAULT_NUM_BUCKETS
from tcqa_data.io_utils import write_npy_atomic

# Pairs per spilled run: bounds the map's memory whatever the corpus size.
DEFAULT_RUN_PAIRS = 2_000_000
# Fewest cells a run is partitioned into over the whole hash space: 2 x GROUP_RUNS (the most
# runs one reduce level reads, reduce.py). The reduce reads partitioned runs at cell bounds
# only, so a cell of all of a level's runs must fit in a reduce chunk: it holds about
# GROUP_RUNS x run_pairs / 2**13 = run_pairs / 2 pairs (= the default chunk_pairs) at most,
# whatever the corpus size (the second level reads sorted runs, cut anywhere). More cells cost
# the map more (one counting-scatter pass: ~5 ns a pair into 2**8 cells, ~13 into 2**13, ~20
# into 2**16, whose count table and scatter targets no longer fit the caches) and each run
# 8 bytes per cell of offsets (64 KB), read by the reduce in blocks, never whole.
MIN_CELL_BITS = 13


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
    """The kernel's stable radix sort of ``h`` (uint64) with ``payload`` (int64), as new arrays."""
    hs = np.array(h, dtype=np.uint64, copy=True)
    ps = np.array(payload, dtype=np.int64, copy=True)
    k["msd_sort"](hs, ps, np.empty_like(hs), np.empty_like(ps), 0)
    return hs, ps


def _sort_dedupe_in_place(k: dict, h: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``sort_pairs`` of uint64 ``h`` and int64 ``d`` that it may overwrite (views of them are
    returned)."""
    n = len(h)
    k["msd_sort"](h, d, np.empty(n, dtype=np.uint64), np.empty(n, dtype=np.int64), 0)
    k["order_ties"](h, d, np.empty(0, dtype=np.int64))
    return k["dedupe_pairs"](h, d)


def sort_pairs(h: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort ``(hash, doc)`` pairs by hash then doc and drop repeated pairs."""
    if kernel.enabled():
        return _sort_dedupe_in_place(kernel.kernels(), np.array(h, dtype=np.uint64, copy=True),
                                     np.array(d, dtype=np.int64, copy=True))
    hs, ds = _sort_by_hash(h, d)
    if len(hs) > 1:
        keep = np.ones(len(hs), dtype=bool)
        keep[1:] = (hs[1:] != hs[:-1]) | (ds[1:] != ds[:-1])
        if not keep.all():
            hs, ds = hs[keep], ds[keep]
    return hs, ds


# --------------------------------------------------------------------------- map side


def cell_bits(num_buckets: int) -> int:
    """The cell bits of a run for ``num_buckets`` buckets: at least MIN_CELL_BITS, and every
    bucket a whole number of cells."""
    return max(MIN_CELL_BITS, num_buckets.bit_length() - 1)


def run_file(run_dir: str | os.PathLike, n: int, run: int, kind: str) -> str:
    """One file of a run (``kind``: hashes, docs or offsets), as a string: cheaper than a Path
    where the reduce looks up every run once per bucket."""
    return os.path.join(run_dir, f"n{n}", f"run{run:05d}.{kind}.npy")


def run_paths(run_dir: str | os.PathLike, n: int, run: int) -> dict[str, Path]:
    return {k: Path(run_file(run_dir, n, run, k)) for k in ("hashes", "docs", "offsets")}


def _doc_dtype(base: int, top: int) -> np.dtype:
    """The width a run stores its docs in, relative to ``base``: uint16 where the run spans under
    65536 docs (10 instead of 12 bytes per pair on the build's scratch disk; page-cache writes
    cost ~3 ns a byte), else uint32, else int64; the reduce widens them to int64 whatever it is."""
    span = top - base
    return np.dtype(np.uint16 if span < 1 << 16 else np.uint32 if span <= 0xFFFFFFFF else np.int64)


def partition_pairs(h: np.ndarray, d: np.ndarray, bits: int, *, scratch: list | None = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, bool]:
    """``(hashes, docs, offsets, base, packed)``: the pairs grouped by cell ``h >> (64 - bits)``,
    stably (each cell keeps the input order), ``offsets`` the ``2**bits + 1`` cells' row
    offsets, docs as ``d - base`` (``base`` the smallest doc) in :func:`_doc_dtype`'s width, or
    ``packed`` into the hashes (docs then empty) when they span under ``2**bits`` (see the
    module's doc). ``scratch``: with the kernels, a list holding the output hash array, grown
    and kept there for the next call (a map's runs reuse it: fresh arrays are page-faulted in
    again); the hashes returned are then a view of it."""
    n = len(h)
    shift = 64 - bits
    offsets = np.empty((1 << bits) + 1, dtype=np.int64)
    if kernel.enabled():
        k = kernel.kernels()
        h = np.ascontiguousarray(h, dtype=np.uint64)
        d = np.ascontiguousarray(d, dtype=np.int64)
        base, top = (int(x) for x in k["cell_counts"](h, d, shift, offsets)) if n else (0, 0)
        packed = top - base < 1 << bits
        if scratch is None:
            scratch = []
        if not scratch or len(scratch[0]) < n:
            scratch[:] = [np.empty(n, dtype=np.uint64)]
        hs = scratch[0][:n]
        ds = np.empty(0 if packed else n, dtype=_doc_dtype(base, top))
        if n:
            k["scatter_cells"](h, d, base, shift, offsets, hs, ds, packed)
        return hs, ds, offsets, base, packed
    h = np.asarray(h, dtype=np.uint64)
    d = np.asarray(d, dtype=np.int64)
    base, top = (int(d.min()), int(d.max())) if n else (0, 0)
    packed = top - base < 1 << bits
    cells = (h >> np.uint64(shift)).astype(np.uint16 if bits <= 16 else np.uint32)
    order = np.argsort(cells, kind="stable")  # a radix sort for 16-bit keys
    offsets[0] = 0
    np.cumsum(np.bincount(cells, minlength=1 << bits), out=offsets[1:])
    if packed:
        hs = h[order] << np.uint64(bits)
        hs |= (d[order] - base).astype(np.uint64)
        return hs, np.empty(0, dtype=_doc_dtype(base, top)), offsets, base, packed
    ds = np.empty(n, dtype=_doc_dtype(base, top))
    np.subtract(d[order], base, out=ds, casting="unsafe")
    return h[order], ds, offsets, base, packed


def write_run(run_dir: str | os.PathLike, n: int, run: int, h: np.ndarray, d: np.ndarray,
              num_buckets: int, *, scratch: list | None = None) -> int:
    """Partition (:func:`partition_pairs`, cells of :func:`cell_bits`) and write one run; returns
    its number of pairs. ``offsets.npy`` is last. No sort, no dedupe: the reduce does both. ``d``
    non-decreasing (a map's pairs come doc by doc) leaves each cell's docs in order, which the
    reduce's merge expects in its common case (it handles any order). ``scratch``: see
    :func:`partition_pairs`."""
    bits = cell_bits(num_buckets)
    hs, ds, cells, base, packed = partition_pairs(h, d, bits, scratch=scratch)
    offsets = np.empty(len(cells) + 2, dtype=np.int64)
    offsets[:-2] = cells
    offsets[-2] = base
    offsets[-1] = -bits if packed else bits
    p = run_paths(run_dir, n, run)
    write_npy_atomic(p["hashes"], hs)
    write_npy_atomic(p["docs"], ds)
    write_npy_atomic(p["offsets"], offsets)
    return len(hs)


@dataclass
class RunWriter:
    """Map side for one input shard: hash batches of documents, spill partitioned runs to ``run_dir``.

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
        # With the kernels, each n's pairs go into one buffer kept across runs and partitioned
        # at each spill (into one output buffer kept too): no per-batch arrays, no
        # concatenation, and pages faulted in once per map instead of once per run.
        self._compiled = kernel.enabled()
        self._buf: dict[int, list] = {n: [np.empty(0, np.uint64), np.empty(0, np.int64), 0]
                                      for n in self.ngram_sizes}
        self._scratch: list = []

    def add_batch(self, texts: Sequence[str]) -> None:
        self._add(batch_ngram_hashes(texts, self.ngram_sizes, self.scheme, self.seed), len(texts))

    def add_normalized(self, data: np.ndarray, doc_start: np.ndarray,
                       tokens: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        """``add_batch`` for documents already normalized into one buffer (``hash_normalized``'s
        layout, e.g. from ``readers.iter_normalized_batches``); ``tokens``: its
        ``hashing.normalized_tokens``, when the caller has them."""
        if self._compiled:
            counts = hash_normalized_into(data, doc_start, self.ngram_sizes, self.seed, self._reserve,
                                          self.docs, tokens)
            for n, m in counts.items():
                self._buf[n][2] += m
                self.ngrams[n] += m
            self._added(len(doc_start) - 1, max(counts.values(), default=0))
            return
        self._add(hash_normalized(data, doc_start, self.ngram_sizes, self.seed), len(doc_start) - 1)

    def _reserve(self, n: int, m: int) -> tuple[np.ndarray, np.ndarray, int]:
        """n's buffer (hashes, docs) with room for ``m`` more pairs, and where they go."""
        buf = self._buf[n]
        hb, db, used = buf
        if used + m > len(hb):
            cap = max(used + m, self.run_pairs + m, len(hb) + len(hb) // 2)
            h2, d2 = np.empty(cap, np.uint64), np.empty(cap, np.int64)
            h2[:used], d2[:used] = hb[:used], db[:used]
            buf[0], buf[1] = h2, d2
        return buf[0], buf[1], used

    def _add(self, res: dict[int, tuple[np.ndarray, np.ndarray]], ndocs: int) -> None:
        for n, (h, d) in res.items():
            if self._compiled:
                hb, db, used = self._reserve(n, len(h))
                hb[used:used + len(h)] = h
                np.add(d, self.docs, out=db[used:used + len(h)])
                self._buf[n][2] += len(h)
            else:
                d += self.docs
                self._pending[n].append((h, d))
            self.ngrams[n] += len(h)
        self._added(ndocs, max((len(h) for h, _ in res.values()), default=0))

    def _added(self, ndocs: int, pairs: int) -> None:
        self.docs += ndocs
        self._pending_len += pairs
        if self._pending_len >= self.run_pairs:
            self.spill()

    def spill(self) -> None:
        for n in self.ngram_sizes:
            buf = self._buf[n]
            if buf[2]:
                used, buf[2] = buf[2], 0
                write_run(self.run_dir, n, self._runs[n], buf[0][:used], buf[1][:used], self.num_buckets,
                          scratch=self._scratch)
                self._runs[n] += 1
                continue
            parts = self._pending[n]
            if not parts:
                continue
            self._pending[n] = []
            h = np.concatenate([p[0] for p in parts])
            d = np.concatenate([p[1] for p in parts])
            del parts  # free the batch arrays before partitioning: peak memory is ~3 x run_pairs x 16 B
            if len(h):
                write_run(self.run_dir, n, self._runs[n], h, d, self.num_buckets)
                self._runs[n] += 1
            del h, d
        self._pending_len = 0

    def close(self) -> dict[str, Any]:
        self.spill()
        return {"docs": self.docs, "ngrams": {str(n): c for n, c in self.ngrams.items()},
                "runs": {str(n): c for n, c in self._runs.items()}}


