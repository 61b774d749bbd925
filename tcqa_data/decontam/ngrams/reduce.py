"""N-gram index, reduce side: merge one bucket of every map run into the final format-2 files.

:func:`reduce_bucket` reads run slices (and, on ``--append``, the existing index's bucket) with
explicit positioned reads in bounded blocks, never memory maps, so its memory does not grow with
the corpus (mapped run pages would count in the worker's RSS). The layout it writes is described
in :mod:`index`, the runs it reads in :mod:`runs`: the map's runs are partitioned
into cells of the hash's top bits, not sorted nor deduplicated, so a bucket is read in chunks of
whole cells, and each chunk is sorted by key and deduplicated here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

import numpy as np

from tcqa_data.decontam.core import kernel
from tcqa_data.decontam.ngrams.index import (
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
from tcqa_data.decontam.ngrams.merge import _distinct_pairs, _merge_keys, _merge_pairs
from tcqa_data.decontam.ngrams.runs import run_file
from tcqa_data.errors import TcqaError
from tcqa_data.io_utils import NpyRowReader, NpyStream, write_npy_atomic

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


class _RunFiles(NamedTuple):
    """A run's readers and what its offsets file says about it (:mod:`runs`)."""

    hashes: NpyRowReader
    docs: NpyRowReader
    offsets: NpyRowReader
    doc_base: int  # the doc ordinal its stored docs are relative to
    cell_bits: int | None  # a partitioned run's cells; None: sorted, with bucket offsets
    buckets: np.ndarray | None  # the buckets' row offsets, where kept (see _run_files)
    packed: bool = False  # docs packed into the hash words (runs.py)


# Runs whose bucket offsets the cache keeps: up to 1,024 buckets, 8 KB a run at most (64 MB for
# the cache's 8,192 runs); with more, each bucket reads its own two offsets.
_KEEP_BUCKETS = 1024


def _run_files(run_dir: str, n: int, run: int, num_buckets: int) -> _RunFiles:
    """A map run's (or group run's) readers. A worker reduces many buckets of the same runs:
    their .npy headers and bucket offsets are read once per worker, not once per bucket (with
    hundreds of runs that was most of a small bucket's time); a partitioned run's cell offsets
    (64 KB or more) are not kept: a bucket cut in several chunks reads its cells' offsets.
    Keyed by the files' identity, so a run rewritten under the same name is read again."""
    # offsets.npy is written last, after hashes and docs, each by a rename: a rewritten run has
    # a new offsets file (one stat per run and bucket)
    st = os.stat(run_file(run_dir, n, run, "offsets"))
    return _run_files_cached(run_dir, n, run, num_buckets, (st.st_ino, st.st_mtime_ns, st.st_size))


@lru_cache(maxsize=8192)  # ~2 KB per run with 64 buckets (three readers, 65 offsets)
def _run_files_cached(run_dir: str, n: int, run: int, num_buckets: int, stamp: tuple) -> _RunFiles:
    offsets = NpyRowReader(run_file(run_dir, n, run, "offsets"))
    hashes, docs = (NpyRowReader(run_file(run_dir, n, run, k)) for k in ("hashes", "docs"))
    rows = len(offsets)
    keep = num_buckets <= _KEEP_BUCKETS
    if rows > num_buckets + 2:  # partitioned: 2**bits + 1 cell offsets (2**bits >= buckets), base, bits
        base, bits = (int(x) for x in offsets.read(rows - 2, rows))
        packed, bits = bits < 0, abs(bits)
        if rows != (1 << bits) + 3:
            raise TcqaError(f"{offsets.path}: {rows} offsets do not match {bits} cell bits")
        per = (1 << bits) // num_buckets
        buckets = offsets.read(0, rows - 2)[::per].copy() if keep else None
        return _RunFiles(hashes, docs, offsets, base, bits, buckets, packed)
    # sorted: num_buckets + 1 bucket offsets, then the base (absent in the earliest runs)
    base = int(offsets.read(rows - 1, rows)[0]) if rows > num_buckets + 1 else 0
    buckets = offsets.read(0, num_buckets + 1) if keep else None
    return _RunFiles(hashes, docs, offsets, base, None, buckets)


def _bucket_rows(f: _RunFiles, bucket: int, per: int) -> tuple[int, int]:
    """Run ``f``'s rows of ``bucket``, whose offsets are ``per`` entries apart (cells a bucket;
    1 for a sorted run)."""
    if f.buckets is not None:
        return int(f.buckets[bucket]), int(f.buckets[bucket + 1])
    if per == 1:
        a, b = f.offsets.read(bucket, bucket + 2)
        return int(a), int(b)
    a, b = (int(f.offsets.read(c, c + 1)[0]) for c in (bucket * per, (bucket + 1) * per))
    return a, b


class _Cells:
    """The row offsets of cells ``[first, end)`` of a run's offsets file, read forward on demand
    in blocks of ``block`` cells (a bucket of 2**13 cells does not hold them all at once)."""

    def __init__(self, offsets: NpyRowReader, first: int, end: int, block: int = 256) -> None:
        self.reader = offsets
        self.end = end
        self.block = block
        self.at0 = first
        self.buf = np.empty(0, dtype=np.int64)

    def at(self, cell: int) -> int:
        """The first row of ``cell`` (``first <= cell < end``, asked for in increasing order)."""
        i = cell - self.at0
        if not 0 <= i < len(self.buf):
            self.at0, i = cell, 0
            self.buf = self.reader.read(cell, min(self.end, cell + self.block))
        return int(self.buf[i])


class _CellCursor:
    """Forward reader of a partitioned run's rows ``[start, end)`` in a bucket, by whole cells:
    :meth:`take` returns the rows of the cells below a bound (a cell bound: rows inside a cell
    are in no hash order)."""

    def __init__(self, hashes: NpyRowReader, cells: _Cells, start: int, end: int, shift: int) -> None:
        self.reader = hashes
        self.cells = cells
        self.pos = start
        self.end = end
        self.shift = shift
        self.cell = cells.at0  # the cell of row ``pos``

    def take(self, bound: int | None) -> tuple[int, int, np.ndarray]:
        """``(a, b, hashes)``: rows ``[a, b)`` of the cells below ``bound`` (all if None)."""
        cell = self.cells.end if bound is None else bound >> self.shift
        cell = max(self.cell, min(cell, self.cells.end))
        a, b = self.pos, self.end if cell >= self.cells.end else self.cells.at(cell)
        self.pos, self.cell = b, cell
        return a, b, self.reader.read(a, b)

    def take_packed(self, bound: int | None, doc_offset: int) -> tuple[int, int, np.ndarray, np.ndarray]:
        """:meth:`take` of a packed run: ``(a, b, hashes, docs + doc_offset)``."""
        c0 = self.cell
        a, b, w = self.take(bound)
        offs = self.cells.reader.read(c0, self.cell + 1) - a  # the cells' rows in ``w``
        h, d = np.empty(len(w), dtype=np.uint64), np.empty(len(w), dtype=np.int64)
        if kernel.enabled():
            kernel.kernels()["unpack_cells"](w, offs, c0, self.shift, doc_offset, h, d)
        else:
            cb = np.uint64(64 - self.shift)
            cells = np.repeat(np.arange(c0, self.cell, dtype=np.uint64), np.diff(offs))
            np.bitwise_or(cells << np.uint64(self.shift), w >> cb, out=h)
            np.add(w & ((np.uint64(1) << cb) - np.uint64(1)), doc_offset, out=d, casting="unsafe")
        return a, b, h, d


_Chunk = tuple[int, list[np.ndarray], list[np.ndarray], list[np.ndarray]]


class _BucketRun(NamedTuple):
    """One run's share of a bucket."""

    files: _RunFiles
    start: int  # its rows [start, end)
    end: int
    doc_offset: int  # added to its stored docs
    cells: _Cells | None  # a partitioned run's cells in the bucket


class _BucketPairs:
    """The pairs of bucket ``bucket`` of ``sources`` (map runs, or a first level's group runs, in
    doc-ordinal order) and of ``old`` (a format-2 index with the same ``dir_bits``), read forward
    by key range: the bucket's local key range is cut into equal sub-ranges of about
    ``chunk_pairs`` pairs, at the runs' cell bounds when a run is partitioned (a level reads at
    most GROUP_RUNS runs, whose pairs in one cell stay under about run_pairs / 2: see
    ``runs.MIN_CELL_BITS``). Sorted inputs are read in blocks of about their share of a
    chunk (+1/4 slack), partitioned ones by their cells in the chunk, so the pairs held at once
    stay near ``chunk_pairs`` however big the bucket is."""

    def __init__(self, n: int, bucket: int, sources: Sequence[RunSource], *, dir_bits: int, num_buckets: int,
                 provenance: int, old: OldIndex | None, chunk_pairs: int) -> None:
        self.lo = _bucket_range(bucket, num_buckets)[0]
        self.drop = np.uint64(64 - key_bits(num_buckets, dir_bits))
        self.span = 1 << (dir_bits + SUFFIX_BITS)  # local keys (without the bucket bits): [0, span)
        bucket_bits = num_buckets.bit_length() - 1
        runs: list[_BucketRun] = []
        total = 0
        align = 0  # cells of a bucket that chunks must cut at (the coarsest partitioned run's)
        for src in sources:
            f = _run_files(src.run_dir, n, src.run, num_buckets)
            per = 1 if f.cell_bits is None else 1 << (f.cell_bits - bucket_bits)
            a, b = _bucket_rows(f, bucket, per)
            cells = None if f.cell_bits is None else _Cells(f.offsets, bucket * per, (bucket + 1) * per)
            if b > a:
                runs.append(_BucketRun(f, a, b, src.doc_offset + f.doc_base, cells))
                total += b - a
                if cells is not None:
                    align = min(align or per, per)
        self.first_doc = min((r.doc_offset for r in runs), default=0)  # no doc of the runs is below it
        old_rows = len(NpyRowReader(bucket_paths(old.root, n, bucket)["keys"])) if old is not None else 0
        total += old_rows * max(1, provenance)
        # enough chunks for the pairs and for the directory entries each chunk writes (at most
        # 2**(32 - bucket bits) / align of them when chunks are cut at cells)
        self.nchunks = max(1, -(-total // chunk_pairs), -(-(1 << dir_bits) // chunk_pairs))
        if align:
            self.nchunks = min(self.nchunks, align)
        self.align = align
        self._runs = runs
        self._old = (old, n, bucket, dir_bits, old_rows)

    @property
    def has_old(self) -> bool:
        """The old index has entries in this bucket."""
        return self._old[4] > 0

    def _step(self, rows: int) -> int:
        return rows // self.nchunks + rows // (4 * self.nchunks) + 1024

    def _key_end(self, c: int) -> int:
        """Chunk ``c``'s local key bound: at a cell bound when a run is partitioned."""
        if self.align:
            return self.span // self.align * (self.align * (c + 1) // self.nchunks)
        return self.span * (c + 1) // self.nchunks

    def chunks(self, keys: bool) -> Iterator[_Chunk]:
        """``(key_end, hashes, docs, weights)`` per chunk: the pairs with local key below
        ``key_end``, as one array per input (the old index first), docs as absolute int64
        ordinals; the runs' pairs may repeat (a doc's n-gram twice) and come in each run's
        order (partitioned runs: by cell, each cell's docs in order). ``keys``: stored keys
        (``hash >> drop``) and weights (the old index's entries carry their df beyond the
        stored docs) instead of the runs' hashes and no weights (new runs only); the runs'
        pairs then come as one array of distinct (hash, doc) pairs."""
        old, n, bucket, dir_bits, old_rows = self._old
        old_bucket = _OldBucket(old.root, n, bucket, dir_bits, self._step(old_rows)) if old_rows else None
        if old_bucket is not None and not keys:
            raise ValueError("an old index's entries come as weighted keys: use keys=True")
        curs: list[tuple[_Cursor | _CellCursor, NpyRowReader, int, bool]] = []
        for r in self._runs:
            cur = (_Cursor(r.files.hashes, r.start, r.end, self._step(r.end - r.start)) if r.cells is None
                   else _CellCursor(r.files.hashes, r.cells, r.start, r.end, 64 - r.files.cell_bits))
            curs.append((cur, r.files.docs, r.doc_offset, r.files.packed))
        for c in range(self.nchunks):
            key_end = self._key_end(c)
            bound = self.lo + (key_end << int(self.drop))
            bound = bound if bound < 1 << 64 else None
            ts, ds, ws = [], [], []
            if old_bucket is not None:
                old_bucket.take(key_end, old, ts, ds, ws)
            hs, dn = [], []
            for cur, rd, doff, packed in curs:
                if packed:
                    a, b, h, d = cur.take_packed(bound, doff)
                else:
                    a, b, h = cur.take(bound)
                    d = np.add(rd.read(a, b), doff, dtype=np.int64) if b > a else None  # widened and moved
                if b > a:
                    hs.append(h)
                    dn.append(d)
            if keys and hs:
                h, d = _distinct_pairs(hs, dn)
                del hs, dn
                ts.append(h >> self.drop)
                ds.append(d)
                ws.append(np.ones(len(h), dtype=np.int64))
                del h, d
            else:
                ts, ds = ts + hs, ds + dn
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
    # that also dedupes (hash, doc) pairs (see _merge_pairs); else distinct (hash, doc) pairs
    # as weighted keys (_BucketPairs.chunks) and _merge_keys
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
# runs, so no merge reads more than GROUP_RUNS runs. Same index bytes as one level. (The map's
# runs' cell count, runs.MIN_CELL_BITS, is sized on GROUP_RUNS.)
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
    runs, in doc order) as one sorted run (``runs``: bucket offsets), number ``group``,
    holding only that bucket: its distinct (hash, doc) pairs sorted by hash then doc (the
    second level can cut it at any key: a bucket of every group holds the whole corpus's
    pairs of that bucket, more than whole cells allow). Docs are stored relative to
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
            h, d = _distinct_pairs(ts, ds)
            del ts, ds
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
