"""On-disk n-gram index: hash-partitioned buckets of the sorted unique n-gram hashes' keys.

Format 2, per n and bucket (``ngrams/n{N}/{bucket:05d}.*.npy``, :data:`BUCKET_FILES`): each
uint64 hash keeps its top ``key_bits = b + d + 32`` bits: the bucket implies the top b bits, a
directory (``dir``, uint32, 2**d + 1 row offsets) the next d, and the next 32 are stored
(``keys``, uint32, sorted within each directory cell). ``df`` is uint8 (255: the uint32 value is
in ``df_over_rows``/``df_over``); ``docs`` holds each n-gram's smallest doc ordinal and
``docs_more_rows``/``docs_more`` the next P - 1 only for n-grams in 2+ docs (uint32, ``DOC_NONE``
= 0xFFFFFFFF = none; int64 with -1 for corpora of 2**32 - 1 docs or more). d is chosen at the
first build and kept by ``--append`` (manifest ``ngram_storage``). A query n-gram that is not in
the corpus is found by chance with probability (keys in its cell) / 2**32
(:func:`false_positive_rates`). Format 1 (``hashes`` uint64, ``df`` uint32, ``docs`` [k, P]) is
still read for lookups. :meth:`NgramIndex.lookup` returns int64 ordinals with -1 for none either
way.

Build side, as pure functions over paths so any engine can schedule them:

* map: :class:`RunWriter` turns documents of one input into sorted *runs* (unique
  ``(hash, local doc)`` pairs sorted by hash then doc, with per-bucket offsets);
* reduce: :func:`reduce_bucket` merges the slices of one bucket from every run (and, on
  ``--append``, the bucket of the existing index) into the final files. It reads its inputs
  with explicit positioned reads in bounded blocks, never memory maps, so its memory does not
  grow with the corpus (mapped run pages would count in the worker's RSS).

Outputs depend only on the inputs and d (never on worker count or scheduling), so builds are
byte-reproducible and an append equals a full rebuild with the same d.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from tcqa_data.decontam import kernel
from tcqa_data.decontam.hashing import HASH_NAME, batch_ngram_hashes, hash_normalized
from tcqa_data.errors import IndexMismatchError, TcqaError
from tcqa_data.io_utils import NpyRowReader, atomic_path, read_json, write_npy_atomic

MANIFEST = "manifest.json"
DEFAULT_NUM_BUCKETS = 64
DEFAULT_PROVENANCE = 2
# Pairs per spilled run and per reduce chunk: bounds memory whatever the corpus size.
DEFAULT_RUN_PAIRS = 2_000_000
DEFAULT_CHUNK_PAIRS = 1_000_000
_HEADER_LEN = 128
# Provenance doc ordinals on disk: uint32, this value = no doc (lookup returns int64, -1 = none).
DOC_DTYPE = np.dtype(np.uint32)
DOC_NONE = 0xFFFFFFFF


def _shift(num_buckets: int) -> int:
    if num_buckets < 1 or num_buckets & (num_buckets - 1) or num_buckets > 1 << 16:
        raise ValueError(f"num_buckets must be a power of two <= 65536, got {num_buckets}")
    return 64 - (num_buckets.bit_length() - 1)


def bucket_of(hashes: np.ndarray, num_buckets: int) -> np.ndarray:
    """Bucket number (top bits) of each hash."""
    s = _shift(num_buckets)
    if s == 64:
        return np.zeros(len(hashes), dtype=np.int64)
    return (np.asarray(hashes, dtype=np.uint64) >> np.uint64(s)).astype(np.int64)


def _bucket_range(bucket: int, num_buckets: int) -> tuple[int, int]:
    s = _shift(num_buckets)
    return bucket << s, (bucket + 1) << s  # hi may be 2**64 (exclusive)


def bucket_paths(root: str | os.PathLike, n: int, bucket: int, layout: int = 2) -> dict[str, Path]:
    """The files of one bucket: format 2 (:data:`BUCKET_FILES`) or format 1 (``layout=1``)."""
    base = Path(root) / "ngrams" / f"n{n}"
    return {k: base / f"{bucket:05d}.{k}.npy" for k in (BUCKET_FILES if layout == 2 else V1_BUCKET_FILES)}


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

    A concatenation of sorted runs (the reduce) is merged by numpy's stable sort (timsort finds
    the runs); unsorted pairs (the map) go through a radix sort. Both are stable, and each run
    of equal hashes is then ordered by ``d``."""
    k = kernel.kernels()
    n = len(h)
    h = np.ascontiguousarray(h, dtype=np.uint64)
    if rest:
        order = np.argsort(h, kind="stable")
        hs = h[order]
    else:
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


def run_paths(run_dir: str | os.PathLike, n: int, run: int) -> dict[str, Path]:
    base = Path(run_dir) / f"n{n}"
    return {k: base / f"run{run:05d}.{k}.npy" for k in ("hashes", "docs", "offsets")}


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
    small = not len(ds) or int(ds.max()) <= 0xFFFFFFFF
    write_npy_atomic(p["docs"], ds.astype(np.uint32 if small else np.int64, copy=False))
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


# --------------------------------------------------------------------------- reduce side


class _NpyStream:
    """Write a 1-D or 2-D C-order .npy in chunks (fixed 128-byte header patched at the end)."""

    def __init__(self, path: Path, dtype: np.dtype, cols: int | None = None) -> None:
        self.dtype = np.dtype(dtype)
        self.cols = cols
        self.rows = 0
        self._ctx = atomic_path(path)
        tmp = self._ctx.__enter__()
        self._fh = open(tmp, "wb")
        self._fh.write(b"\0" * _HEADER_LEN)

    def write(self, arr: np.ndarray) -> None:
        arr = np.ascontiguousarray(arr, dtype=self.dtype)
        self._fh.write(arr.tobytes())
        self.rows += arr.shape[0]

    def close(self) -> None:
        shape = f"({self.rows},)" if self.cols is None else f"({self.rows}, {self.cols})"
        d = f"{{'descr': '{self.dtype.str}', 'fortran_order': False, 'shape': {shape}, }}"
        d = d.ljust(_HEADER_LEN - 10 - 1) + "\n"
        self._fh.seek(0)
        self._fh.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(d)) + d.encode("latin1"))
        self._fh.close()
        self._ctx.__exit__(None, None, None)

    def abort(self, exc: BaseException) -> None:
        self._fh.close()
        self._ctx.__exit__(type(exc), exc, exc.__traceback__)


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


def _load(path: Path) -> np.ndarray:
    """Memory-map a .npy (a zero-length array cannot be mapped, so read it)."""
    arr = np.load(path, mmap_mode="r", allow_pickle=False) if path.stat().st_size > _HEADER_LEN \
        else np.load(path, allow_pickle=False)
    return arr


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


# --------------------------------------------------------------------------- format 2 key layout
#
# A hash's stored key is its top ``key_bits = b + d + 32`` bits (b: bucket bits, d: directory
# bits). The bucket implies the top b, a directory of 2**d + 1 uint32 row offsets implies the
# next d, and the 32 bits after those are stored (uint32, sorted within each directory cell).
# d is chosen once, at the first build, and kept by every --append (the dropped bits are gone).

SUFFIX_BITS = 32
_M32 = np.uint64(0xFFFFFFFF)
# n-grams per directory cell the first build aims at (8 <= per cell < 16 on fresh text): the
# directory then costs at most 0.5 B per n-gram and a query n-gram that is not in the corpus
# matches by chance with probability (n-grams in its cell) / 2**32.
CELL_TARGET = 8
DF_OVERFLOW = 255  # df is stored as uint8; 255 means "look in the overflow table"
ROW_LIMIT = (1 << 32) - 1  # row numbers and offsets are uint32
BUCKET_FILES = ("keys", "dir", "df", "df_over_rows", "df_over", "docs", "docs_more_rows", "docs_more")
V1_BUCKET_FILES = ("hashes", "df", "docs")


def _bucket_bits(num_buckets: int) -> int:
    return 64 - _shift(num_buckets)


def max_dir_bits(num_buckets: int) -> int:
    """The directory width at which keys keep all 64 bits (the layout is then exact)."""
    return 64 - SUFFIX_BITS - _bucket_bits(num_buckets)


def check_dir_bits(dir_bits: int, num_buckets: int) -> int:
    top = max_dir_bits(num_buckets)
    if not 0 <= int(dir_bits) <= top:
        raise ValueError(f"n-gram directory bits must be 0..{top} with {num_buckets} buckets, got {dir_bits}")
    return int(dir_bits)


def choose_dir_bits(ngrams: int, num_buckets: int) -> int:
    """Largest d with 2**d <= n-grams per bucket / CELL_TARGET (``ngrams``: the map's count of
    n-gram occurrences, an upper bound of the unique ones), at most :func:`max_dir_bits`."""
    per_bucket = int(ngrams) // (num_buckets * CELL_TARGET)
    return min(max(per_bucket, 1).bit_length() - 1, max_dir_bits(num_buckets))


def key_bits(num_buckets: int, dir_bits: int) -> int:
    return _bucket_bits(num_buckets) + check_dir_bits(dir_bits, num_buckets) + SUFFIX_BITS


def stored_keys(hashes: np.ndarray, num_buckets: int, dir_bits: int) -> np.ndarray:
    """The key an index with this layout stores for each hash: its top ``key_bits`` bits."""
    return np.asarray(hashes, dtype=np.uint64) >> np.uint64(64 - key_bits(num_buckets, dir_bits))


def storage_info(num_buckets: int, dir_bits: int) -> dict[str, Any]:
    """The manifest's ``ngram_storage``: what the n-gram files keep of each n-gram."""
    return {"format": 2, "dir_bits": int(dir_bits), "suffix_bits": SUFFIX_BITS,
            "key_bits": key_bits(num_buckets, dir_bits), "df_bits": 8, "df_overflow": DF_OVERFLOW,
            "provenance": "first doc dense, further docs only for n-grams in 2+ docs"}


def false_positive_rates(unique: int, max_cell: int, num_buckets: int, dir_bits: int) -> dict[str, float]:
    """Chance that a query n-gram absent from the corpus is reported found.

    A random query hash lands in a uniformly random directory cell and matches when one of the
    cell's stored 32-bit suffixes equals its own: mean ``unique / 2**key_bits`` over cells, and
    ``max_cell / 2**32`` in the fullest cell. At ``key_bits`` = 64 that is the chance collision
    of the full 64-bit hashes."""
    kb = key_bits(num_buckets, dir_bits)
    return {"false_positive_rate": unique / 2.0 ** kb, "max_cell_keys": int(max_cell),
            "max_cell_false_positive_rate": max_cell / 2.0 ** SUFFIX_BITS}


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
        self.streams: dict[str, _NpyStream] = {}
        for k in BUCKET_FILES:
            self.streams[k] = _NpyStream(paths[k], dtypes[k], provenance - 1 if k == "docs_more" else None)
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

    def close(self) -> None:
        for w in self.streams.values():
            w.close()

    def abort(self, exc: BaseException) -> None:
        for w in self.streams.values():
            if not w._fh.closed:
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


def reduce_bucket(out_root: str | os.PathLike, n: int, bucket: int, sources: Sequence[RunSource], *,
                  dir_bits: int, num_buckets: int = DEFAULT_NUM_BUCKETS,
                  provenance: int = DEFAULT_PROVENANCE, old: OldIndex | None = None,
                  chunk_pairs: int = DEFAULT_CHUNK_PAIRS,
                  doc_dtype: np.dtype | str = DOC_DTYPE) -> BucketStats:
    """Merge bucket ``bucket`` of every run in ``sources`` (and of ``old``, a format-2 index with
    the same ``dir_bits``) into the format-2 files under ``out_root``. Memory is bounded by
    ``chunk_pairs``: the bucket's key range is cut into equal sub-ranges merged one at a time,
    and inputs are read in blocks (no memory maps). ``doc_dtype``: uint32 (default; ordinals up
    to 0xFFFFFFFE) or int64 (for corpora of 2**32 - 1 docs or more; readers accept both).

    Two distinct corpus n-grams with the same stored key are one entry: its df is the sum of
    theirs and its provenance the smallest P distinct docs holding either."""
    lo, _ = _bucket_range(bucket, num_buckets)
    drop = np.uint64(64 - key_bits(num_buckets, dir_bits))
    span = 1 << (dir_bits + SUFFIX_BITS)  # local keys (the key without the bucket bits): [0, span)
    runs: list[tuple[NpyRowReader, NpyRowReader, int, int, int]] = []  # hashes, docs, a, b, doc offset
    total = 0
    for src in sources:
        p = run_paths(src.run_dir, n, src.run)
        off = np.load(p["offsets"], allow_pickle=False)
        a, b = int(off[bucket]), int(off[bucket + 1])
        if b > a:
            runs.append((NpyRowReader(p["hashes"]), NpyRowReader(p["docs"]), a, b, src.doc_offset))
            total += b - a
    old_rows = 0
    if old is not None:
        old_rows = len(NpyRowReader(bucket_paths(old.root, n, bucket)["keys"]))
        total += old_rows * max(1, provenance)
    ddtype = np.dtype(doc_dtype)
    if ddtype not in (DOC_DTYPE, np.dtype(np.int64)):
        raise ValueError(f"doc_dtype must be uint32 or int64, not {ddtype}")
    # enough chunks for the pairs and for the directory entries each chunk writes
    nchunks = max(1, -(-total // chunk_pairs), -(-(1 << dir_bits) // chunk_pairs))
    cuts = [span * i // nchunks for i in range(nchunks + 1)]

    # Each input is read forward in blocks of about its share of one chunk (+1/4 slack), so
    # the pairs held at once stay near ``chunk_pairs`` however big the bucket is.
    def step(rows: int) -> int:
        return rows // nchunks + rows // (4 * nchunks) + 1024

    writer = _BucketWriter(bucket_paths(out_root, n, bucket), provenance, ddtype)
    try:
        old_bucket = _OldBucket(old.root, n, bucket, dir_bits, step(old_rows)) if old_rows else None
        curs = [(_Cursor(rh, a, b, step(b - a)), rd, doff) for rh, rd, a, b, doff in runs]
        mask = np.uint64(span - 1)
        for c in range(nchunks):
            key_end = cuts[c + 1]
            bound = lo + (key_end << int(drop))
            bound = bound if bound < 1 << 64 else None
            # sources in doc-ordinal order (the old index first), as (key, doc, weight)
            ts, ds, ws = [], [], []
            if old_bucket is not None:
                old_bucket.take(key_end, old, ts, ds, ws)
            for cur, rd, doff in curs:
                a, b, h = cur.take(bound)
                if b > a:
                    ts.append(h >> drop)
                    ds.append(rd.read(a, b).astype(np.int64, copy=False) + doff)
                    ws.append(np.ones(b - a, dtype=np.int64))
            if ts:
                t_all, d_all, w_all = np.concatenate(ts), np.concatenate(ds), np.concatenate(ws)
                del ts, ds, ws
                t_u, df, docs = _merge_keys(t_all, d_all, w_all, provenance, ddtype)
                del t_all, d_all, w_all
                writer.write(t_u & mask, df, docs, key_end)
                del t_u, df, docs
            else:
                writer.write(np.empty(0, np.uint64), np.empty(0, np.uint32),
                             np.empty((0, provenance), ddtype), key_end)
        writer.close()
    except BaseException as exc:
        writer.abort(exc)
        raise
    return BucketStats(writer.rows, writer.max_cell)


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
    doc_dtype = np.dtype(doc_dtype)
    none = DOC_NONE if doc_dtype == DOC_DTYPE else -1
    if doc_dtype == DOC_DTYPE and len(d) and int(d.max()) >= DOC_NONE:
        raise TcqaError(f"doc ordinal {int(d.max())} does not fit the index's uint32 provenance "
                        f"(at most {DOC_NONE - 1}); build with doc_dtype=int64")
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


# --------------------------------------------------------------------------- query side


class LookupResult(NamedTuple):
    found: np.ndarray  # bool[k]
    doc_freq: np.ndarray  # uint32[k], 0 where not found
    docs: np.ndarray  # int64[k, P], -1 where none


class NgramIndex:
    """Read-only access to a finished index directory (memory-mapped buckets).

    Reads format 2 and, for lookups, format 1 (full uint64 hashes, uint32 df, dense provenance)."""

    def __init__(self, root: Path, manifest: dict[str, Any]) -> None:
        self.root = root
        self.manifest = manifest
        self.ngram_sizes: list[int] = [int(n) for n in manifest["ngram_sizes"]]
        self.normalization: str = manifest["normalization"]
        self.hash_seed: int = int(manifest["hash"]["seed"])
        self.hash_name: str = manifest["hash"]["name"]
        self.num_buckets: int = int(manifest["num_buckets"])
        self.provenance: int = int(manifest["provenance_docs"])
        self.layout: int = 1 if manifest.get("format_version") == 1 else 2
        self.dir_bits: int | None = (int(manifest["ngram_storage"]["dir_bits"]) if self.layout == 2
                                     else None)
        self._buckets: dict[tuple[int, int], dict[str, np.ndarray]] = {}
        self._refs = None

    @classmethod
    def open(cls, path: str | os.PathLike) -> NgramIndex:
        root = Path(path)
        mpath = root / MANIFEST
        if not mpath.is_file():
            if root.is_dir() and ((root / "_work").exists() or (root / "ngrams").exists()):
                raise TcqaError(f"{root}: incomplete index (no {MANIFEST}); rerun index-corpus to finish it")
            raise TcqaError(f"{root}: no index here (missing {MANIFEST}); build one with index-corpus")
        manifest = read_json(mpath)
        if manifest.get("kind") != "tcqa-ngram-index":
            raise TcqaError(f"{mpath}: not a tcqa-data index manifest")
        from tcqa_data import FORMAT_VERSION

        # format 1 (before the compact n-gram layout) is still read for lookups
        if manifest.get("format_version") not in (1, FORMAT_VERSION):
            raise TcqaError(f"{mpath}: index format {manifest.get('format_version')} "
                            f"but this tcqa-data reads formats 1 and {FORMAT_VERSION}; rebuild the index "
                            "with `tcqa-data index-corpus ... --overwrite`")
        index = cls(root, manifest)
        # Query hashes must come from the function that built the index, or nothing would match.
        if index.hash_name != HASH_NAME:
            raise IndexMismatchError(
                f"index {root} was built with n-gram hash {index.hash_name!r}, but this tcqa-data computes "
                f"{HASH_NAME!r}: its lookups would find nothing; rebuild the index with index-corpus")
        return index

    def _bucket(self, n: int, b: int) -> dict[str, np.ndarray]:
        key = (n, b)
        if key not in self._buckets:
            p = bucket_paths(self.root, n, b, self.layout)
            self._buckets[key] = {k: _load(f) for k, f in p.items()}
        return self._buckets[key]

    def lookup(self, hashes: np.ndarray, n: int) -> LookupResult:
        """Vectorized lookup of n-gram hashes (from ``ngram_hashes(..., n, normalization, hash_seed)``)."""
        if n not in self.ngram_sizes:
            raise TcqaError(f"{self.root}: index has n-gram sizes {self.ngram_sizes}, not {n}")
        q = np.asarray(hashes, dtype=np.uint64).ravel()
        k = len(q)
        found = np.zeros(k, dtype=bool)
        dfreq = np.zeros(k, dtype=np.uint32)
        docs = np.full((k, self.provenance), -1, dtype=np.int64)
        if not k:
            return LookupResult(found, dfreq, docs)
        bk = bucket_of(q, self.num_buckets)
        order = np.argsort(bk, kind="stable")
        bounds = np.flatnonzero(np.diff(bk[order])) + 1
        find = self._find_v1 if self.layout == 1 else self._find_v2
        for grp in np.split(order, bounds):
            hit, f_df, f_docs = find(self._bucket(n, int(bk[grp[0]])), q[grp])
            found[grp[hit]] = True
            dfreq[grp[hit]] = f_df
            docs[grp[hit]] = f_docs
        return LookupResult(found, dfreq, docs)

    def _find_v1(self, f: dict[str, np.ndarray], qq: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        hs = f["hashes"]
        if not len(hs):
            none = np.empty((0, self.provenance), np.int64)
            return np.zeros(len(qq), dtype=bool), np.empty(0, np.uint32), none
        pos = np.minimum(np.searchsorted(hs, qq), len(hs) - 1)
        ok = np.asarray(hs[pos]) == qq
        got = np.asarray(f["docs"][pos[ok]])
        if got.dtype == DOC_DTYPE:
            got = np.where(got == DOC_NONE, np.int64(-1), got.astype(np.int64))
        return ok, np.asarray(f["df"][pos[ok]], dtype=np.uint32), got

    def _find_v2(self, f: dict[str, np.ndarray], qq: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        keys = f["keys"]
        span = 1 << (self.dir_bits + SUFFIX_BITS)
        local = stored_keys(qq, self.num_buckets, self.dir_bits) & np.uint64(span - 1)
        cell = (local >> np.uint64(SUFFIX_BITS)).astype(np.int64)
        suffix = (local & _M32).astype(np.uint32)
        lo = np.asarray(f["dir"][cell], dtype=np.int64)
        end = np.asarray(f["dir"][cell + 1], dtype=np.int64)
        hi = end.copy()
        while True:  # vectorized binary search of each suffix in its cell (sorted there)
            act = np.flatnonzero(lo < hi)
            if not len(act):
                break
            mid = (lo[act] + hi[act]) >> 1
            less = np.asarray(keys[mid]) < suffix[act]
            lo[act[less]] = mid[less] + 1
            hi[act[~less]] = mid[~less]
        ok = lo < end
        ok[ok] = np.asarray(keys[lo[ok]]) == suffix[ok]
        rows = lo[ok]
        df = np.asarray(f["df"][rows], dtype=np.uint32)
        big = np.flatnonzero(df == DF_OVERFLOW)
        if len(big):
            over_rows = np.asarray(f["df_over_rows"])
            df[big] = np.asarray(f["df_over"])[np.searchsorted(over_rows, rows[big].astype(np.uint32))]
        doc0 = np.asarray(f["docs"][rows])
        out = np.full((len(rows), self.provenance), -1, dtype=np.int64)
        out[:, 0] = doc0.astype(np.int64)  # every stored key has a first doc
        more_rows = f["docs_more_rows"]
        if self.provenance > 1 and len(more_rows) and len(rows):
            j = np.minimum(np.searchsorted(more_rows, rows.astype(np.uint32)), len(more_rows) - 1)
            has = np.asarray(more_rows[j]) == rows
            got = np.asarray(f["docs_more"][j[has]])
            none = DOC_NONE if got.dtype == DOC_DTYPE else -1
            out[has, 1:] = np.where(got == none, np.int64(-1), got.astype(np.int64))
        return ok, df, out

    def all_keys(self, n: int) -> tuple[np.ndarray, int]:
        """Every stored key of size ``n`` (sorted) and its width in bits: format 2 keys are the
        top ``key_bits`` bits of the n-gram hashes (compare with :func:`stored_keys`), format 1
        the whole 64. Reads the whole index: for tests and benchmarks."""
        parts = []
        for b in range(self.num_buckets):
            f = self._bucket(n, b)
            if self.layout == 1:
                parts.append(np.asarray(f["hashes"]))
                continue
            counts = np.diff(np.asarray(f["dir"], dtype=np.int64))
            cells = np.repeat(np.arange(len(counts), dtype=np.uint64), counts)
            base = np.uint64(b << (self.dir_bits + SUFFIX_BITS))
            parts.append(base | (cells << np.uint64(SUFFIX_BITS)) | np.asarray(f["keys"]).astype(np.uint64))
        bits = 64 if self.layout == 1 else key_bits(self.num_buckets, self.dir_bits)
        return (np.concatenate(parts) if parts else np.empty(0, np.uint64)), bits

    def contains(self, hashes: np.ndarray, n: int) -> np.ndarray:
        return self.lookup(hashes, n).found

    def num_docs(self) -> int:
        return int(self.manifest["counts"]["docs"])

    def doc_refs(self, ordinals: Sequence[int] | np.ndarray) -> list[str]:
        """``doc_ref`` of each doc ordinal (from docs.parquet)."""
        if self._refs is None:
            import pyarrow.parquet as pq

            self._refs = pq.read_table(self.root / "docs.parquet", columns=["doc_ref"]).column("doc_ref")
        ords = np.asarray(ordinals, dtype=np.int64)
        if len(ords) and (ords.min() < 0 or ords.max() >= len(self._refs)):
            raise TcqaError(f"{self.root}: doc ordinal out of range 0..{len(self._refs) - 1}")
        return [str(x) for x in self._refs.take(ords).to_pylist()]

    def bucket_files(self) -> list[Path]:
        return sorted((self.root / "ngrams").rglob("*.npy"))
