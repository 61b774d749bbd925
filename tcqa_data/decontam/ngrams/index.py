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

* map (:mod:`runs`): :class:`RunWriter` turns documents of one input into *runs*
  (``(hash, local doc)`` pairs partitioned into cells of the hash's top bits, with the cells'
  offsets; not sorted, repeats kept);
* reduce (:mod:`reduce`): :func:`reduce_bucket` sorts and merges the slices of one bucket from every run
  (and, on ``--append``, the bucket of the existing index) into the final files, deduplicating
  (hash, doc) pairs. It reads its inputs
  with explicit positioned reads in bounded blocks, never memory maps, so its memory does not
  grow with the corpus (mapped run pages would count in the worker's RSS).

Outputs depend only on the inputs and d (never on worker count or scheduling), so builds are
byte-reproducible and an append equals a full rebuild with the same d.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from tcqa_data.checksums import BlockCheck
from tcqa_data.decontam.core.hashing import HASH_NAME
from tcqa_data.decontam.core.pagein import page_in
from tcqa_data.errors import IndexMismatchError, TcqaError
from tcqa_data.io_utils import NPY_HEADER_LEN, load_npy

MANIFEST = "manifest.json"
DEFAULT_NUM_BUCKETS = 64
DEFAULT_PROVENANCE = 2
# Provenance doc ordinals on disk: uint32, this value = no doc (lookup returns int64, -1 = none).
DOC_DTYPE = np.dtype(np.uint32)
DOC_NONE = 0xFFFFFFFF
_OPEN_THREADS = 16  # buckets opened at once by a lookup


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


def _load(path: Path, check: BlockCheck | None = None) -> np.ndarray:
    """Memory-map a .npy (a zero-length array cannot be mapped, so read it); with ``check``, its
    header's block is checked first (the header says what every row means)."""
    if check is not None:
        check.check_ranges(np.zeros(1, np.int64), np.full(1, NPY_HEADER_LEN, np.int64))
    arr = load_npy(path) if path.stat().st_size > NPY_HEADER_LEN else load_npy(path, mmap_mode=None)
    return arr



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
        # per bucket array, its file's block checks (None: an index older than checksums)
        from tcqa_data.decontam.index_files import index_checks

        self.checks = index_checks(root, manifest)
        self._checks: dict[int, BlockCheck | None] = {}
        self._refs = None

    @classmethod
    def open(cls, path: str | os.PathLike) -> NgramIndex:
        from tcqa_data.decontam.index_files import open_manifest

        root = Path(path)
        mpath = root / MANIFEST
        # parsed, its own checksum and every file's presence and size checked (index_files.py)
        manifest = open_manifest(root)
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
            arrays = {}
            for k, f in p.items():
                check = self.checks.get(f) if self.checks is not None else None
                arrays[k] = _load(f, check)
                self._checks[id(arrays[k])] = check
            self._buckets[key] = arrays
        return self._buckets[key]

    def _check(self, arr: np.ndarray, first: Any = None, last: Any = None) -> None:
        """Check rows ``[first, last)`` of a bucket array (default: all of it) against the index's
        block checksums before they are used (``index_files.block_check``: once per block)."""
        check = self._checks.get(id(arr))
        if check is not None:
            check.check_span(arr, first, last)

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
        split = np.split(order, bounds)
        new = [int(bk[grp[0]]) for grp in split if (n, int(bk[grp[0]])) not in self._buckets]
        if len(new) > 1:  # cold page cache: each file's header is a disk read; many at once
            with ThreadPoolExecutor(_OPEN_THREADS) as pool:
                list(pool.map(lambda b: self._bucket(n, b), new))
        groups = [(self._bucket(n, int(bk[grp[0]])), grp) for grp in split]
        if self.layout == 1:
            for f, grp in groups:
                hit, f_df, f_docs = self._find_v1(f, q[grp])
                found[grp[hit]] = True
                dfreq[grp[hit]] = f_df
                docs[grp[hit]] = f_docs
            return LookupResult(found, dfreq, docs)
        # format 2 in stages (directory, keys, then the hits' df and docs), each stage reading the
        # pages of every bucket at once: on a cold page cache the disk serves them in parallel
        rows = self._search_v2(groups, q)
        page_in([(f[name], r, r + 1) for (f, _), r in zip(groups, rows, strict=True)
                 for name in ("df", "docs")])
        for (f, grp), r in zip(groups, rows, strict=True):
            hit = r >= 0
            f_df, f_docs = self._fetch_v2(f, r[hit])
            found[grp[hit]] = True
            dfreq[grp[hit]] = f_df
            docs[grp[hit]] = f_docs
        return LookupResult(found, dfreq, docs)

    def _find_v1(self, f: dict[str, np.ndarray], qq: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        hs = f["hashes"]
        self._check(hs)  # a binary search reads anywhere in it
        if not len(hs):
            none = np.empty((0, self.provenance), np.int64)
            return np.zeros(len(qq), dtype=bool), np.empty(0, np.uint32), none
        pos = np.minimum(np.searchsorted(hs, qq), len(hs) - 1)
        ok = np.asarray(hs[pos]) == qq
        self._check(f["docs"], pos[ok], pos[ok] + 1)
        self._check(f["df"], pos[ok], pos[ok] + 1)
        got = np.asarray(f["docs"][pos[ok]])
        if got.dtype == DOC_DTYPE:
            got = np.where(got == DOC_NONE, np.int64(-1), got.astype(np.int64))
        return ok, np.asarray(f["df"][pos[ok]], dtype=np.uint32), got

    def _search_v2(self, groups: list[tuple[dict[str, np.ndarray], np.ndarray]], q: np.ndarray
                   ) -> list[np.ndarray]:
        """Per bucket group, the row of each query's stored key (-1: not found)."""
        span = np.uint64((1 << (self.dir_bits + SUFFIX_BITS)) - 1)
        cells, suffixes = [], []
        for _, grp in groups:
            local = stored_keys(q[grp], self.num_buckets, self.dir_bits) & span
            cells.append((local >> np.uint64(SUFFIX_BITS)).astype(np.int64))
            suffixes.append((local & _M32).astype(np.uint32))
        page_in([(f["dir"], c, c + 2) for (f, _), c in zip(groups, cells, strict=True)])
        for (f, _), c in zip(groups, cells, strict=True):
            self._check(f["dir"], c, c + 2)
        ranges = [(np.asarray(f["dir"][c], dtype=np.int64), np.asarray(f["dir"][c + 1], dtype=np.int64))
                  for (f, _), c in zip(groups, cells, strict=True)]
        page_in([(f["keys"], lo, end) for (f, _), (lo, end) in zip(groups, ranges, strict=True)])
        for (f, _), (lo, end) in zip(groups, ranges, strict=True):
            self._check(f["keys"], lo, end)
        out = []
        for (f, _), (lo, end), suffix in zip(groups, ranges, suffixes, strict=True):
            keys = f["keys"]
            lo = lo.copy()
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
            out.append(np.where(ok, lo, -1))
        return out

    def _fetch_v2(self, f: dict[str, np.ndarray], rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(doc freq uint32, docs int64[k, P]) of found rows."""
        self._check(f["df"], rows, rows + 1)
        self._check(f["docs"], rows, rows + 1)
        df = np.asarray(f["df"][rows], dtype=np.uint32)
        big = np.flatnonzero(df == DF_OVERFLOW)
        if len(big):
            self._check(f["df_over_rows"])  # binary searched: read anywhere
            self._check(f["df_over"])
            over_rows = np.asarray(f["df_over_rows"])
            df[big] = np.asarray(f["df_over"])[np.searchsorted(over_rows, rows[big].astype(np.uint32))]
        doc0 = np.asarray(f["docs"][rows])
        out = np.full((len(rows), self.provenance), -1, dtype=np.int64)
        out[:, 0] = doc0.astype(np.int64)  # every stored key has a first doc
        more_rows = f["docs_more_rows"]
        if self.provenance > 1 and len(more_rows) and len(rows):
            self._check(more_rows)
            j = np.minimum(np.searchsorted(more_rows, rows.astype(np.uint32)), len(more_rows) - 1)
            has = np.asarray(more_rows[j]) == rows
            self._check(f["docs_more"], j[has], j[has] + 1)
            got = np.asarray(f["docs_more"][j[has]])
            none = DOC_NONE if got.dtype == DOC_DTYPE else -1
            out[has, 1:] = np.where(got == none, np.int64(-1), got.astype(np.int64))
        return df, out

    def all_keys(self, n: int) -> tuple[np.ndarray, int]:
        """Every stored key of size ``n`` (sorted) and its width in bits: format 2 keys are the
        top ``key_bits`` bits of the n-gram hashes (compare with :func:`stored_keys`), format 1
        the whole 64. Reads the whole index: for tests and benchmarks."""
        parts = []
        for b in range(self.num_buckets):
            f = self._bucket(n, b)
            for arr in f.values():
                self._check(arr)
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

            if self.checks is not None:
                self.checks.check_rows(self.root / "docs.parquet")
            self._refs = pq.read_table(self.root / "docs.parquet", columns=["doc_ref"]).column("doc_ref")
        ords = np.asarray(ordinals, dtype=np.int64)
        if len(ords) and (ords.min() < 0 or ords.max() >= len(self._refs)):
            raise TcqaError(f"{self.root}: doc ordinal out of range 0..{len(self._refs) - 1}")
        return [str(x) for x in self._refs.take(ords).to_pylist()]

    def bucket_files(self) -> list[Path]:
        return sorted((self.root / "ngrams").rglob("*.npy"))
