"""The band merge: a k-way merge of sorted (key, doc) runs of one MinHash band, in bounded
memory, into a packed band table, a group's run or a key range's part of the table; the reduce
steps in ``merge`` run it as their tasks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tcqa_data.decontam.core import kernel, packed
from tcqa_data.decontam.minhash.params import band_entries_name
from tcqa_data.io_utils import NpyRowReader, NpyStream, cached_row_reader, load_npy

_U32 = np.uint32
_U64 = np.uint64

# (key, doc) entries read ahead over all runs in the band merge, shared among the runs so the
# memory of a band task does not grow with their number (runs hold at most 1.5 blocks each;
# a floor of 4,096 per run made it grow past 512 runs: ~0.75 GB per task at 1,600)
_MERGE_ENTRIES = 1 << 21
# entries read from a run at a time, at least (a read costs ~25 us whatever its size up to
# 16 KB): above _MERGE_ENTRIES / _MIN_BLOCK runs (8,192) the read-ahead grows with the run count
_MIN_BLOCK = 256
_RADIX_RUNS = 8  # runs in one merge pass from which the radix sort beats numpy's timsort


@dataclass
class _Run:
    prefix: str  # file name prefix: ".../partNNNNN." or ".../" for a final index folder
    n: int
    first_doc: int
    last_doc: int
    offset: int = 0  # window id of the run's first window in the output
    doc_shift: int = 0  # added to the run's doc ordinals (maps that numbered docs from 0)
    base: bool = False  # an existing index folder (format 3 files), not a map run
    pairs: bool = False  # a group's merged run of one band: keys.npy, docs.npy (global doc ordinals)

    def reader(self, name: str) -> NpyRowReader:
        return cached_row_reader(self.prefix + name + ".npy")


def _key_rows(column: np.ndarray, lo: int, hi: int, shift: int = 0) -> tuple[int, int]:
    """The rows ``[a, b)`` of a sorted column whose ``value >> shift`` is in ``[lo, hi)``: a binary
    search of a memory map, which touches a few pages (explicit reads cost a call each)."""
    top = 1 << packed.KEY_BITS
    # the bound in the column's own dtype: a wider one would make numpy convert the whole column
    a, b = (int(np.searchsorted(column, column.dtype.type(x << shift))) if x < top else len(column)
            for x in (lo, hi))
    return a, b


def _run_sources(r: _Run, band: int, block: int, layout: dict[str, Any], ops: type[_Narrow] | type[_Wide],
                 keys: tuple[int, int] = (0, 1 << packed.KEY_BITS)):
    """Sorted blocks of (key, doc) pairs (in ``ops``' form) of one band of one run, the keys in
    ``[keys[0], keys[1])`` only (for an existing index: bounds on its directory cells)."""
    lo, hi = keys
    whole = (lo, hi) == (0, 1 << packed.KEY_BITS)
    if r.pairs:
        kr, dr = r.reader("keys"), r.reader("docs")
        a, b = (0, len(kr)) if whole else _key_rows(load_npy(r.prefix + "keys.npy"), lo, hi)
        for s in range(a, b, block):
            e = min(s + block, b)
            yield ops.from_keys_docs(kr.read(s, e), dr.read(s, e))
        return
    if r.base:
        # an existing format-3 index: decode its band table a range of directory cells at a time
        d, ib = layout["base_dir_bits"], layout["base_id_bits"]
        cells = r.reader("band_cells")
        words = load_npy(r.prefix + band_entries_name(band) + ".npy")
        rbits = packed.KEY_BITS - d
        step = max(1, block // packed.LOAD)
        for c0 in range(lo >> rbits, hi >> rbits, step):
            c1 = min(c0 + step, hi >> rbits)
            k, doc = packed.decode_range(cells.read_row_span(band, c0, c1 + 1), words, c0, c1, d, ib)
            if len(k):
                yield ops.from_keys_docs(k, doc)
        return
    # a map run: per band, (key << 32 | doc - its first doc) sorted (``shards._write_keyed_run``);
    # the run's first_doc already includes its doc_shift
    pr = r.reader("band_pairs")
    if whole:
        a, b = 0, r.n
    else:
        a, b = _key_rows(load_npy(r.prefix + "band_pairs.npy")[band], lo, hi, 32)
    for s in range(a, b, block):
        # no local names for the blocks: a suspended generator would keep them alive, a block
        # more per run on top of what the merge holds
        yield ops.from_run_pairs(pr.read_row_span(band, s, min(s + block, b)), r.first_doc)


class _Narrow:
    """The band merge's blocks while every doc ordinal is below 2**32 (an index of up to 4 G docs):
    one uint64 ``key << 32 | doc`` per pair, sorted by (key, doc) as plain integers, so each step
    is one array operation where two arrays took two or three."""

    empty = np.zeros(0, dtype=_U64)

    @staticmethod
    def from_keys_docs(k: np.ndarray, d: np.ndarray) -> np.ndarray:
        return (np.asarray(k, dtype=_U64) << _U64(32)) | np.asarray(d).astype(_U64)

    @staticmethod
    def from_run_pairs(pairs: np.ndarray, first_doc: int) -> np.ndarray:
        pairs += _U64(first_doc)  # a map run's docs count from its first: no carry below 2**32
        return pairs

    @staticmethod
    def size(b: np.ndarray) -> int:
        return len(b)

    @staticmethod
    def last(b: np.ndarray) -> int:
        return int(b[-1])

    @staticmethod
    def first(b: np.ndarray) -> int:
        return int(b[0])

    @staticmethod
    def upto(b: np.ndarray, bound: int) -> int:
        """How many pairs of ``b`` are <= ``bound``."""
        return int(np.searchsorted(b, _U64(bound), side="right"))

    @staticmethod
    def head(b: np.ndarray, n: int) -> np.ndarray:
        return b[:n]

    @staticmethod
    def tail(b: np.ndarray, n: int) -> np.ndarray:
        return b[n:]

    @staticmethod
    def concat(bs: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(bs)

    @staticmethod
    def sorted_unique(b: np.ndarray, runs: int, scratch: np.ndarray) -> np.ndarray:
        """The distinct pairs of ``b`` in order; ``b`` (consumed) is ``runs`` sorted blocks one
        after the other, the docs of each above those of the blocks before it (one block per run,
        runs in doc order). numpy's stable sort (a timsort for 64-bit keys) merges a few runs at
        ~8 ns a pair, but ~26 at 64 runs and ~40 at 512; from ``_RADIX_RUNS`` runs the compiled
        radix sort on the key (``scratch``: its second buffer, at least as long) takes ~10 ns
        whatever their number. Both give the same pairs."""
        if runs >= _RADIX_RUNS and kernel.enabled():
            return kernel.kernels()["sorted_unique_pairs"](b, scratch)
        b.sort(kind="stable")
        return b[np.r_[True, b[1:] != b[:-1]]] if len(b) > 1 else b

    @staticmethod
    def add(out: Any, b: np.ndarray) -> None:
        out.add_pairs(b)


class _Wide:
    """The band merge's blocks past 2**32 docs: (keys uint64, docs int64) array pairs."""

    empty = (np.zeros(0, dtype=_U64), np.zeros(0, dtype=np.int64))

    @staticmethod
    def from_keys_docs(k: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(k, dtype=_U64), np.asarray(d).astype(np.int64)

    @staticmethod
    def from_run_pairs(pairs: np.ndarray, first_doc: int) -> tuple[np.ndarray, np.ndarray]:
        return pairs >> _U64(32), (pairs & _U64(0xFFFFFFFF)).view(np.int64) + np.int64(first_doc)

    @staticmethod
    def size(b: tuple[np.ndarray, np.ndarray]) -> int:
        return len(b[0])

    @staticmethod
    def last(b: tuple[np.ndarray, np.ndarray]) -> tuple[int, int]:
        return int(b[0][-1]), int(b[1][-1])

    @staticmethod
    def first(b: tuple[np.ndarray, np.ndarray]) -> tuple[int, int]:
        return int(b[0][0]), int(b[1][0])

    @staticmethod
    def upto(b: tuple[np.ndarray, np.ndarray], bound: tuple[int, int]) -> int:
        k, d = b
        take = int(np.searchsorted(k, _U64(bound[0]), side="left"))
        eq = int(np.searchsorted(k, _U64(bound[0]), side="right"))
        return take + int(np.searchsorted(d[take:eq], bound[1], side="right"))

    @staticmethod
    def head(b: tuple[np.ndarray, np.ndarray], n: int) -> tuple[np.ndarray, np.ndarray]:
        return b[0][:n], b[1][:n]

    @staticmethod
    def tail(b: tuple[np.ndarray, np.ndarray], n: int) -> tuple[np.ndarray, np.ndarray]:
        return b[0][n:], b[1][n:]

    @staticmethod
    def concat(bs: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
        return np.concatenate([b[0] for b in bs]), np.concatenate([b[1] for b in bs])

    @staticmethod
    def sorted_unique(b: tuple[np.ndarray, np.ndarray], runs: int, scratch: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray]:
        """The distinct pairs in (key, doc) order (a two-key lexsort: docs past 32 bits)."""
        k, d = b
        order = np.lexsort((d, k))
        k, d = k[order], d[order]
        del order
        new = np.r_[True, (k[1:] != k[:-1]) | (d[1:] != d[:-1])]
        return k[new], d[new]

    @staticmethod
    def add(out: Any, b: tuple[np.ndarray, np.ndarray]) -> None:
        out.add(*b)


def _pair_ops(layout: dict[str, Any]) -> type[_Narrow] | type[_Wide]:
    return _Narrow if int(layout["doc_span"]) <= 1 << 32 else _Wide


def _merge_band(runs: list[_Run], band: int, out: packed.TableWriter | _PairsWriter | _RangeTableWriter,
                layout: dict[str, Any],
                keys: tuple[int, int] = (0, 1 << packed.KEY_BITS)) -> None:
    """K-way merge of one band's sorted (key, doc) runs, a block per run at a time; a (key, doc)
    pair is written once (a doc's overlapping or repeated windows often share band keys).

    Docs of different runs differ, and within a run (key, window) order is (key, doc) order, so
    every pair <= the smallest "last pair of a block" over runs that have more data is final."""
    ops = _pair_ops(layout)
    prev: Any = None
    block = max(_MIN_BLOCK, _MERGE_ENTRIES // max(1, len(runs)))  # bounded memory whatever the run count
    its = [_run_sources(r, band, block, layout, ops, keys) for r in runs]
    cur: list[Any] = [None] * len(runs)
    done = [False] * len(runs)
    scratch = np.zeros(0, dtype=_U64)  # the radix sort's second buffer, kept from pass to pass
    while True:
        # Top up every run holding less than half a block, not only the exhausted ones: else each
        # pass frees about one run's block and the passes number the blocks of all runs, each
        # looping over every run (quadratic in the run count; hours per band at 10 GB).
        for i in range(len(runs)):
            if not done[i] and (cur[i] is None or ops.size(cur[i]) < block // 2):
                nxt = next(its[i], None)
                if nxt is None:
                    done[i] = True
                    if cur[i] is None:
                        cur[i] = ops.empty
                elif cur[i] is None or not ops.size(cur[i]):
                    cur[i] = nxt
                else:
                    cur[i] = ops.concat([cur[i], nxt])
        live = [i for i in range(len(runs)) if cur[i] is not None and ops.size(cur[i])]
        if not live:
            return
        more = [i for i in live if not done[i]]
        bound = min(ops.last(cur[i]) for i in more) if more else None
        parts = []
        for i in live:
            take = ops.upto(cur[i], bound) if more else ops.size(cur[i])
            parts.append(ops.head(cur[i], take))
            cur[i] = ops.tail(cur[i], take)
        nruns = sum(1 for x in parts if ops.size(x))
        b = ops.concat(parts)
        del parts
        if len(scratch) < ops.size(b):
            scratch = np.empty(max(ops.size(b), 2 * len(scratch)), dtype=_U64)
        b = ops.sorted_unique(b, nruns, scratch)
        if ops.size(b) and prev is not None and ops.first(b) == prev:
            b = ops.tail(b, 1)
        if ops.size(b):
            prev = ops.last(b)
        ops.add(out, b)


class _PairsWriter:
    """``_merge_band``'s output as a group run: keys (uint32) and docs, streamed."""

    def __init__(self, prefix: str, doc_dtype: np.dtype) -> None:
        self.keys = NpyStream(prefix + "keys.npy", _U32)
        self.docs = NpyStream(prefix + "docs.npy", doc_dtype)

    def add(self, k: np.ndarray, d: np.ndarray) -> None:
        self.keys.write(k)
        self.docs.write(d)

    def add_pairs(self, pairs: np.ndarray) -> None:
        self.add(pairs >> _U64(32), pairs & _U64(0xFFFFFFFF))

    def close(self) -> None:
        self.keys.close()
        self.docs.close()

    def abort(self, exc: BaseException) -> None:
        self.keys.abort(exc)
        self.docs.abort(exc)


def _pairs_doc_dtype(plan: dict[str, Any]) -> np.dtype:
    """Docs of a group run: 32-bit where the merge holds its pairs as one uint64 (``_Narrow``)."""
    return np.dtype(_U32 if _pair_ops(plan["layout"]) is _Narrow else np.int64)


class _RangeTableWriter:
    """``_merge_band``'s output for one key range: the band table's part for that range, packed
    on its own (its directory cells from offset 0, its words from bit 0), streamed."""

    def __init__(self, prefix: str, layout: dict[str, Any], cells: tuple[int, int]) -> None:
        self.cells = NpyStream(prefix + "cells.npy", np.dtype(layout["cell_dtype"]))
        self.words = NpyStream(prefix + "words.npy", _U64)
        self.table = packed.TableWriter(self.cells.write, self.words.write, None, layout["dir_bits"],
                                        layout["id_bits"], cells)

    def add(self, k: np.ndarray, d: np.ndarray) -> None:
        self.table.add(k, d)

    def add_pairs(self, pairs: np.ndarray) -> None:
        self.table.add_pairs(pairs)

    def close(self) -> None:
        self.table.close()
        self.cells.close()
        self.words.close()

    def abort(self, exc: BaseException) -> None:
        self.cells.abort(exc)
        self.words.abort(exc)

