"""N-gram index, reduce side: merge one bucket of every map run into the final format-2 files.

:func:`reduce_bucket` reads run slices (and, on ``--append``, the existing index's bucket) with
explicit positioned reads in bounded blocks, never memory maps, so its memory does not grow with
the corpus (mapped run pages would count in the worker's RSS). The layout it writes is described
in :mod:`ngram_index`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

import numpy as np

from tcqa_data.decontam import kernel
from tcqa_data.decontam.ngram_index import (
    _M32,
    BUCKET_FILES,
    DEFAULT_NUM_BUCKETS,
    DEFAULT_PROVENANCE,
    DF_OVERFLOW,
    DOC_DTYPE,
    DOC_NONE,
    ROW_LIMIT,
    SUFFIX_BITS,
    _bucket_range,
    bucket_paths,
    key_bits,
)
from tcqa_data.decontam.ngram_runs import _sort_by_hash, _sort_by_hash_compiled, run_doc_base, run_file
from tcqa_data.errors import TcqaError
from tcqa_data.io_utils import NpyRowReader, NpyStream, load_npy, write_npy_atomic

# Pairs per reduce chunk: bounds the reduce's memory whatever the corpus size.
DEFAULT_CHUNK_PAIRS = 1_000_000


# --------------------------------------------------------------------------- reduce side


class _Cursor:
    """Forward reader of the rows ``[start, end)`` of a sorted hash column, in blocks of about
    ``step`` rows: :meth:`take` returns the next rows whose hash is below a bound. Holds at most
    one unconsumed block."""

    def __init__(self, hashes: NpyRowReader, start: int, end: int, step: int) -> None:
        self.reader = hashes
        self.pos = start  # first row not yet returned
        self.read_to = start  # first row not yet read
        self.end = end
        self.step = max(1, step)
        self.buf = np.empty(0, dtype=np.uint64)

    def take(self, bound: int | None) -> tuple[int, int, np.ndarray]:
        """``(a, b, hashes)``: rows ``[a, b)`` with hash < ``bound`` (all remaining if None)."""
        parts = []
        while True:
            if not len(self.buf):
                if self.read_to >= self.end:
                    break
                k = min(self.end, self.read_to + self.step)
                self.buf = self.reader.read(self.read_to, k)
                self.read_to = k
            cut = len(self.buf) if bound is None else int(np.searchsorted(self.buf, np.uint64(bound)))
            parts.append(self.buf[:cut])
            self.buf = self.buf[cut:]
            if len(self.buf):
                break
        if len(self.buf) * 2 < self.step and len(self.buf):
            self.buf = self.buf.copy()  # do not keep a whole block alive for a small tail
        a = self.pos
        self.pos += sum(len(p) for p in parts)
        h = parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else self.buf[:0]
        return a, self.pos, h


@dataclass(frozen=True)
class RunSource:
    """One map run of one input: its run directory, run number and the input's doc offset."""

    run_dir: str
    run: int
    doc_offset: int


@dataclass(frozen=True)
class OldIndex:
    """An existing index merged on ``--append``: its ordinals move by ``shift[k]`` for ordinals
    in ``[starts[k], starts[k+1])`` (new inputs may sort before old ones)."""

    root: str
    starts: tuple[int, ...]
    shifts: tuple[int, ...]

    def remap(self, ords: np.ndarray) -> np.ndarray:
        if not len(self.starts):
            return ords
        k = np.searchsorted(np.asarray(self.starts, dtype=np.int64), ords, side="right") - 1
        return ords + np.asarray(self.shifts, dtype=np.int64)[np.clip(k, 0, None)]


class BucketStats(NamedTuple):
    rows: int  # unique stored keys
    max_cell: int  # most keys in one directory cell


class _BucketWriter:
    """Streams one bucket's format-2 files chunk by chunk (keys in increasing order)."""

    def __init__(self, paths: dict[str, Path], provenance: int, doc_dtype: np.dtype) -> None:
        self.none = DOC_NONE if doc_dtype == DOC_DTYPE else -1
        self.provenance = provenance
        u32 = np.dtype(np.uint32)
        dtypes = {"keys": u32, "dir": u32, "df": np.dtype(np.uint8), "df_over_rows": u32, "df_over": u32,
                  "docs": doc_dtype, "docs_more_rows": u32, "docs_more": doc_dtype}
        self.streams: dict[str, NpyStream] = {}
        for k in BUCKET_FILES:
            self.streams[k] = NpyStream(paths[k], dtypes[k], provenance - 1 if k == "docs_more" else None)
        self.rows = 0
        self.next_cell = 0  # first directory entry not yet written
        self.last_offset = 0
        self.max_cell = 0

    def write(self, local: np.ndarray, df: np.ndarray, docs: np.ndarray, key_end: int) -> None:
        """Rows of sorted local keys (``< key_end``, above every earlier row), then the
        directory entries of the cells that start at or below ``key_end``."""
        base, k = self.rows, len(local)
        if base + k > ROW_LIMIT:
            raise TcqaError(f"an n-gram bucket holds more than {ROW_LIMIT:,} n-grams; "
                            "rebuild with more buckets (--num-buckets)")
        last_cell = key_end >> SUFFIX_BITS
        if k and kernel.enabled():
            self._write_compiled(local, df, docs, last_cell)
            return
        if last_cell >= self.next_cell:
            starts = np.arange(self.next_cell, last_cell + 1, dtype=np.uint64) << np.uint64(SUFFIX_BITS)
            offsets = base + np.searchsorted(local, starts).astype(np.int64)
            self.max_cell = max(self.max_cell, int(np.diff(offsets, prepend=self.last_offset).max()))
            self.last_offset = int(offsets[-1])
            self.next_cell = last_cell + 1
            self.streams["dir"].write(offsets)
        if not k:
            return
        s = self.streams
        s["keys"].write(local & _M32)
        s["df"].write(np.minimum(df, DF_OVERFLOW))
        big = np.flatnonzero(df >= DF_OVERFLOW)
        s["df_over_rows"].write(base + big)
        s["df_over"].write(df[big])
        s["docs"].write(docs[:, 0])
        more = np.flatnonzero(docs[:, 1] != self.none) if self.provenance > 1 else np.empty(0, np.int64)
        s["docs_more_rows"].write(base + more)
        s["docs_more"].write(docs[more, 1:])
        self.rows += k

    def _write_compiled(self, local: np.ndarray, df: np.ndarray, docs: np.ndarray, last_cell: int) -> None:
        """``write`` with one kernel pass making every column (same bytes)."""
        base, k = self.rows, len(local)
        u32 = np.uint32
        cols = [np.empty(k, docs.dtype), np.empty(k, u32), np.empty(k, np.uint8), np.empty(k, u32),
                np.empty(k, u32), np.empty(k, u32)]
        offsets = np.empty(max(0, last_cell + 1 - self.next_cell), np.int64)
        doc0, keys, df8, over_rows, over, more_rows = cols
        no, nm = kernel.kernels()["bucket_columns"](
            np.ascontiguousarray(local, np.uint64), np.ascontiguousarray(df, np.uint32), docs, base,
            self.next_cell, last_cell, self.none, DF_OVERFLOW, doc0, keys, df8, over_rows, over, more_rows,
            offsets)
        if len(offsets):
            self.max_cell = max(self.max_cell, int(np.diff(offsets, prepend=self.last_offset).max()))
            self.last_offset = int(offsets[-1])
            self.next_cell = last_cell + 1
            self.streams["dir"].write(offsets)
        s = self.streams
        s["keys"].write(keys)
        s["df"].write(df8)
        s["df_over_rows"].write(over_rows[:no])
        s["df_over"].write(over[:no])
        s["docs"].write(doc0)
        s["docs_more_rows"].write(more_rows[:nm])
        s["docs_more"].write(docs[more_rows[:nm].astype(np.int64) - base, 1:])
        self.rows += k

    def close(self) -> None:
        for w in self.streams.values():
            w.close()

    def abort(self, exc: BaseException) -> None:
        for w in self.streams.values():
            w.abort(exc)


class _OldBucket:
    """Reads a format-2 bucket of the index being appended to, forward, by key ranges."""

    def __init__(self, root: str, n: int, bucket: int, dir_bits: int, step: int) -> None:
        p = bucket_paths(root, n, bucket)
        self.r = {k: NpyRowReader(p[k]) for k in BUCKET_FILES}
        self.rows = len(self.r["keys"])
        self.ncells = 1 << dir_bits
        self.base = np.uint64(bucket << (dir_bits + SUFFIX_BITS))
        self.pos = 0
        self.key_pos = 0
        self.over = _Cursor(self.r["df_over_rows"], 0, len(self.r["df_over_rows"]), step)
        self.more = _Cursor(self.r["docs_more_rows"], 0, len(self.r["docs_more_rows"]), step)

    def _rows_below(self, key_end: int) -> int:
        cell = key_end >> SUFFIX_BITS
        if cell >= self.ncells:
            return self.rows
        lo, hi = (int(x) for x in self.r["dir"].read(cell, cell + 2))
        suffix = key_end & 0xFFFFFFFF
        while lo < hi:  # binary search in the cell by single reads: bounded memory however full
            mid = (lo + hi) // 2
            if int(self.r["keys"].read(mid, mid + 1)[0]) < suffix:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def take(self, key_end: int, old: OldIndex, ts: list, ds: list, ws: list) -> None:
        """The rows with local key below ``key_end`` as weighted (key, doc) pairs."""
        a, b = self.pos, self._rows_below(key_end)
        first_cell, last_cell = self.key_pos >> SUFFIX_BITS, (key_end - 1) >> SUFFIX_BITS
        self.pos, self.key_pos = b, key_end
        if b <= a:
            return
        bounds = self.r["dir"].read(first_cell, min(last_cell + 2, self.ncells + 1)).astype(np.int64)
        counts = np.diff(np.clip(bounds, a, b))
        cells = np.repeat(np.arange(first_cell, first_cell + len(counts), dtype=np.uint64), counts)
        t = self.base | (cells << np.uint64(SUFFIX_BITS)) | self.r["keys"].read(a, b).astype(np.uint64)
        df = self.r["df"].read(a, b).astype(np.int64)
        oa, ob, orows = self.over.take(b)
        df[orows.astype(np.int64) - a] = self.r["df_over"].read(oa, ob)
        doc0 = self.r["docs"].read(a, b)
        none = DOC_NONE if doc0.dtype == DOC_DTYPE else -1
        docs = np.full((b - a, self.r["docs_more"].row_items + 1), none, dtype=doc0.dtype)
        docs[:, 0] = doc0
        ma, mb, mrows = self.more.take(b)
        docs[mrows.astype(np.int64) - a, 1:] = self.r["docs_more"].read(ma, mb)
        _explode_old(t, df, docs, old, ts, ds, ws)


def _run_files(run_dir: str, n: int, run: int) -> tuple[NpyRowReader, NpyRowReader, np.ndarray]:
    """A map run's readers (hashes, docs) and bucket offsets. A worker reduces many buckets of
    the same runs: their .npy headers and offsets are read once per worker, not once per bucket
    (with hundreds of runs that was most of a small bucket's time). Keyed by the files' identity,
    so a run rewritten under the same name is read again."""
    # offsets.npy is written last, after hashes and docs, each by a rename: a rewritten run has
    # a new offsets file (one stat per run and bucket)
    st = os.stat(run_file(run_dir, n, run, "offsets"))
    return _run_files_cached(run_dir, n, run, (st.st_ino, st.st_mtime_ns, st.st_size))


@lru_cache(maxsize=8192)  # ~2 KB per run (two readers, 66 offsets by default)
def _run_files_cached(run_dir: str, n: int, run: int, stamp: tuple) -> tuple[NpyRowReader, NpyRowReader,
                                                                             np.ndarray]:
    offsets = load_npy(run_file(run_dir, n, run, "offsets"), mmap_mode=None)
    offsets.setflags(write=False)  # shared by every bucket's task in this process
    hashes, docs = (NpyRowReader(run_file(run_dir, n, run, k)) for k in ("hashes", "docs"))
    return hashes, docs, offsets


_Chunk = tuple[int, list[np.ndarray], list[np.ndarray], list[np.ndarray]]


class _BucketPairs:
    """The pairs of bucket ``bucket`` of ``sources`` (map runs, or a first level's group runs, in
    doc-ordinal order) and of ``old`` (a format-2 index with the same ``dir_bits``), read forward
    by key range: the bucket's local key range is cut into equal sub-ranges of about
    ``chunk_pairs`` pairs, and each input is read in blocks of about its share of one (+1/4
    slack), so the pairs held at once stay near ``chunk_pairs`` however big the bucket is."""

    def __init__(self, n: int, bucket: int, sources: Sequence[RunSource], *, dir_bits: int, num_buckets: int,
                 provenance: int, old: OldIndex | None, chunk_pairs: int) -> None:
        self.lo = _bucket_range(bucket, num_buckets)[0]
        self.drop = np.uint64(64 - key_bits(num_buckets, dir_bits))
        self.span = 1 << (dir_bits + SUFFIX_BITS)  # local keys (without the bucket bits): [0, span)
        runs: list[tuple[NpyRowReader, NpyRowReader, int, int, int]] = []  # hashes, docs, a, b, doc offset
        total = 0
        for src in sources:
            hashes, docs, off = _run_files(src.run_dir, n, src.run)
            a, b = int(off[bucket]), int(off[bucket + 1])
            if b > a:
                runs.append((hashes, docs, a, b, src.doc_offset + run_doc_base(off, num_buckets)))
                total += b - a
        self.first_doc = min((r[4] for r in runs), default=0)  # no doc of the runs is below it
        old_rows = len(NpyRowReader(bucket_paths(old.root, n, bucket)["keys"])) if old is not None else 0
        total += old_rows * max(1, provenance)
        # enough chunks for the pairs and for the directory entries each chunk writes
        self.nchunks = max(1, -(-total // chunk_pairs), -(-(1 << dir_bits) // chunk_pairs))
        self._runs = runs
        self._old = (old, n, bucket, dir_bits, old_rows)

    @property
    def has_old(self) -> bool:
        """The old index has entries in this bucket."""
        return self._old[4] > 0

    def _step(self, rows: int) -> int:
        return rows // self.nchunks + rows // (4 * self.nchunks) + 1024

    def chunks(self, keys: bool) -> Iterator[_Chunk]:
        """``(key_end, hashes, docs, weights)`` per chunk: the pairs with local key below
        ``key_end``, as one array per input (the old index first), docs as absolute int64
        ordinals. ``keys``: stored keys (``hash >> drop``) and weights (the old index's entries
        carry their df beyond the stored docs) instead of the runs' hashes and no weights (new
        runs only)."""
        old, n, bucket, dir_bits, old_rows = self._old
        old_bucket = _OldBucket(old.root, n, bucket, dir_bits, self._step(old_rows)) if old_rows else None
        if old_bucket is not None and not keys:
            raise ValueError("an old index's entries come as weighted keys: use keys=True")
        curs = [(_Cursor(rh, a, b, self._step(b - a)), rd, doff) for rh, rd, a, b, doff in self._runs]
        for c in range(self.nchunks):
            key_end = self.span * (c + 1) // self.nchunks
            bound = self.lo + (key_end << int(self.drop))
            bound = bound if bound < 1 << 64 else None
            ts, ds, ws = [], [], []
            if old_bucket is not None:
                old_bucket.take(key_end, old, ts, ds, ws)
            for cur, rd, doff in curs:
                a, b, h = cur.take(bound)
                if b > a:
                    ts.append(h >> self.drop if keys else h)
                    ds.append(np.add(rd.read(a, b), doff, dtype=np.int64))  # widened and moved in one pass
                    if keys:
                        ws.append(np.ones(b - a, dtype=np.int64))
            yield key_end, ts, ds, ws


def reduce_bucket(out_root: str | os.PathLike, n: int, bucket: int, sources: Sequence[RunSource], *,
                  dir_bits: int, num_buckets: int = DEFAULT_NUM_BUCKETS,
                  provenance: int = DEFAULT_PROVENANCE, old: OldIndex | None = None,
                  chunk_pairs: int = DEFAULT_CHUNK_PAIRS,
                  doc_dtype: np.dtype | str = DOC_DTYPE) -> BucketStats:
    """Merge bucket ``bucket`` of every run in ``sources`` (and of ``old``, a format-2 index with
    the same ``dir_bits``) into the format-2 files under ``out_root``. Memory is bounded by
    ``chunk_pairs`` (:class:`_BucketPairs`: inputs read in blocks, no memory maps). ``doc_dtype``:
    uint32 (default; ordinals up to 0xFFFFFFFE) or int64 (for corpora of 2**32 - 1 docs or more;
    readers accept both).

    Two distinct corpus n-grams with the same stored key are one entry: its df is the sum of
    theirs and its provenance the smallest P distinct docs holding either."""
    ddtype = np.dtype(doc_dtype)
    if ddtype not in (DOC_DTYPE, np.dtype(np.int64)):
        raise ValueError(f"doc_dtype must be uint32 or int64, not {ddtype}")
    pairs = _BucketPairs(n, bucket, sources, dir_bits=dir_bits, num_buckets=num_buckets,
                         provenance=provenance, old=old, chunk_pairs=chunk_pairs)
    mask = np.uint64(pairs.span - 1)
    # new runs only, with the kernels: one in-place sort of the hashes by key and one merge pass
    # (the runs are distinct (hash, doc) pairs: see _merge_pairs)
    fast = not pairs.has_old and kernel.enabled()
    writer = _BucketWriter(bucket_paths(out_root, n, bucket), provenance, ddtype)
    try:
        for key_end, ts, ds, ws in pairs.chunks(keys=not fast):
            if ts and fast:
                t_u, df, docs = _merge_pairs(ts, ds, int(pairs.drop), provenance, ddtype)
                del ts, ds
            elif ts:
                t_all, d_all, w_all = np.concatenate(ts), np.concatenate(ds), np.concatenate(ws)
                del ts, ds, ws
                t_u, df, docs = _merge_keys(t_all, d_all, w_all, provenance, ddtype)
                del t_all, d_all, w_all
            else:
                t_u, df, docs = (np.empty(0, np.uint64), np.empty(0, np.uint32),
                                 np.empty((0, provenance), ddtype))
            writer.write(t_u & mask, df, docs, key_end)
            del t_u, df, docs
        writer.close()
    except BaseException as exc:
        writer.abort(exc)
        raise
    return BucketStats(writer.rows, writer.max_cell)


# --------------------------------------------------------------------------- two levels
# A bucket task holds a read block of at least 1,024 pairs per run, and a map spills a run per
# 2 M pairs (about 100 runs per GB of fresh text): one level's memory grows with the corpus
# (~1.2 GB per task at 1 TB). Past GROUP_RUNS runs of one n-gram size the reduce runs in two
# levels, as the MinHash band merge does: each bucket of each group of GROUP_RUNS runs (in doc
# order) is merged into one sorted run of that bucket first, then each bucket merges its groups'
# runs, so no merge reads more than GROUP_RUNS runs. Same index bytes as one level.
GROUP_RUNS = 4096
GROUPS_DIR = "ngram_groups"  # the groups' runs: build scratch in the reduce's stage folder


def run_groups(runs: int, group_runs: int | None = None) -> list[tuple[int, int]]:
    """The ``[a, b)`` ranges of runs merged together at the first level; ``[]`` when one level
    suffices (at most ``group_runs`` runs, default GROUP_RUNS)."""
    group_runs = group_runs or GROUP_RUNS
    if runs <= group_runs:
        return []
    return [(a, min(a + group_runs, runs)) for a in range(0, runs, group_runs)]


def _group_run_dir(groups_dir: str | os.PathLike, bucket: int) -> str:
    return os.path.join(groups_dir, f"b{bucket:05d}")


def group_sources(groups_dir: str | os.PathLike, bucket: int, groups: int) -> list[RunSource]:
    """What the second level of bucket ``bucket`` reads: one run per group (absolute docs)."""
    return [RunSource(_group_run_dir(groups_dir, bucket), g, 0) for g in range(groups)]


def merge_bucket_group(groups_dir: str | os.PathLike, n: int, bucket: int, group: int,
                       sources: Sequence[RunSource], *, dir_bits: int,
                       num_buckets: int = DEFAULT_NUM_BUCKETS, chunk_pairs: int = DEFAULT_CHUNK_PAIRS,
                       doc_dtype: np.dtype | str = DOC_DTYPE) -> int:
    """The first level of a two-level reduce: bucket ``bucket`` of ``sources`` (one group of map
    runs, in doc order) as one run of the map's format, number ``group``, holding only that
    bucket: its distinct (hash, doc) pairs sorted by hash then doc. Docs are stored relative to
    the group's first doc as ``doc_dtype`` (uint32 unless the corpus has 2**32 docs or more).
    Returns the run's number of pairs."""
    pairs = _BucketPairs(n, bucket, sources, dir_bits=dir_bits, num_buckets=num_buckets, provenance=1,
                         old=None, chunk_pairs=chunk_pairs)
    base = pairs.first_doc
    run_dir = _group_run_dir(groups_dir, bucket)
    os.makedirs(os.path.join(run_dir, f"n{n}"), exist_ok=True)
    hashes = NpyStream(run_file(run_dir, n, group, "hashes"), np.uint64)
    docs = NpyStream(run_file(run_dir, n, group, "docs"), doc_dtype)
    try:
        for _, ts, ds, _ in pairs.chunks(keys=False):
            if not ts:
                continue
            h, d = np.concatenate(ts), np.concatenate(ds)
            del ts, ds
            # the runs come in doc order and each is sorted by (hash, doc): a stable sort by
            # hash orders equal hashes by doc
            if kernel.enabled():
                kernel.kernels()["msd_sort"](h, d, np.empty_like(h), np.empty_like(d), 0)
            else:
                h, d = _sort_by_hash(h, d)
            hashes.write(h)
            docs.write(d - base)
            del h, d
        hashes.close()
        docs.close()
    except BaseException as exc:
        hashes.abort(exc)
        docs.abort(exc)
        raise
    offsets = np.zeros(num_buckets + 2, dtype=np.int64)
    offsets[bucket + 1:num_buckets + 1] = hashes.rows
    offsets[num_buckets + 1] = base
    write_npy_atomic(run_file(run_dir, n, group, "offsets"), offsets)  # last: marks the run complete
    return hashes.rows


def _provenance_dtype(d: np.ndarray, doc_dtype: np.dtype | str) -> tuple[np.dtype, int]:
    """``doc_dtype`` and its empty-slot value; a TcqaError if a doc of ``d`` does not fit it."""
    doc_dtype = np.dtype(doc_dtype)
    if doc_dtype == DOC_DTYPE and len(d) and int(d.max()) >= DOC_NONE:
        raise TcqaError(f"doc ordinal {int(d.max())} does not fit the index's uint32 provenance "
                        f"(at most {DOC_NONE - 1}); build with doc_dtype=int64")
    return doc_dtype, (DOC_NONE if doc_dtype == DOC_DTYPE else -1)


def _merge_pairs(hs: list[np.ndarray], ds: list[np.ndarray], drop: int, provenance: int,
                 doc_dtype: np.dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_merge_keys` of runs' pairs, with the kernels: ``hs`` the runs' sorted hashes (keys
    ``h >> drop``), ``ds`` their docs. The pairs are distinct (each run is deduplicated and a
    doc's pairs are in one run), so a key's df is its number of pairs; with the runs in doc
    order (as the build lists them) a stable sort by key leaves each key's docs in order, and
    the merge kernel sorts the docs of the rare key that is not (two hashes of one key in one
    run, or runs out of order)."""
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


def _explode_old(oh: np.ndarray, odf: np.ndarray, odocs: np.ndarray, old: OldIndex,
                 hs: list, ds: list, ws: list) -> None:
    """Old entries as (hash, doc) pairs; the first pair of each hash also carries the docs
    beyond the stored P as weight, so doc frequencies add up exactly."""
    valid = _valid_docs(odocs)
    cnt = valid.sum(axis=1)
    rows = np.repeat(np.arange(len(oh)), cnt)
    docs = old.remap(odocs[valid].astype(np.int64))
    w = np.ones(len(rows), dtype=np.int64)
    first = np.concatenate([[0], np.cumsum(cnt)[:-1]]).astype(np.int64)
    w[first] += odf.astype(np.int64) - cnt
    hs.append(oh[rows])
    ds.append(docs)
    ws.append(w)


def _valid_docs(docs: np.ndarray) -> np.ndarray:
    """Where a stored provenance array holds a doc (uint32: not DOC_NONE; older int64: >= 0)."""
    if docs.dtype == DOC_DTYPE:
        return docs != DOC_NONE
    return docs >= 0


def _merge(h: np.ndarray, d: np.ndarray, w: np.ndarray, provenance: int, doc_dtype: np.dtype = DOC_DTYPE
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    # Pairs are unique across sources (inputs hold distinct docs), so no pair dedupe is needed.
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


