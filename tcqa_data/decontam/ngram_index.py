"""On-disk n-gram index: hash-partitioned buckets of sorted unique uint64 n-gram hashes.

Per n and bucket (``ngrams/n{N}/{bucket:05d}.*.npy``): ``hashes`` (uint64, sorted unique),
``df`` (uint32, number of corpus docs containing the n-gram) and ``docs`` (uint32 ``[k, P]``,
the P smallest doc ordinals containing it, padded with ``DOC_NONE`` = 0xFFFFFFFF; indexes
written before this change hold int64 padded with -1, and both are read). :meth:`NgramIndex.lookup`
returns int64 ordinals with -1 for none either way. The bucket of a hash is its top bits.

Build side, as pure functions over paths so any engine can schedule them:

* map: :class:`RunWriter` turns documents of one input into sorted *runs* (unique
  ``(hash, local doc)`` pairs sorted by hash then doc, with per-bucket offsets);
* reduce: :func:`reduce_bucket` merges the slices of one bucket from every run (and, on
  ``--append``, the bucket of the existing index) into the final files. It reads its inputs
  with explicit positioned reads in bounded blocks, never memory maps, so its memory does not
  grow with the corpus (mapped run pages would count in the worker's RSS).

Outputs depend only on the inputs (never on worker count or scheduling), so builds are
byte-reproducible and an append equals a full rebuild.
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
from tcqa_data.decontam.hashing import HASH_NAME, batch_ngram_hashes
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


def bucket_paths(root: str | os.PathLike, n: int, bucket: int) -> dict[str, Path]:
    base = Path(root) / "ngrams" / f"n{n}"
    return {k: base / f"{bucket:05d}.{k}.npy" for k in ("hashes", "df", "docs")}


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
    write_npy_atomic(p["docs"], ds.astype(np.int64, copy=False))
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
        res = batch_ngram_hashes(texts, self.ngram_sizes, self.scheme, self.seed)
        for n, (h, d) in res.items():
            d += self.docs
            self._pending[n].append((h, d))
            self.ngrams[n] += len(h)
        self.docs += len(texts)
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


def reduce_bucket(out_root: str | os.PathLike, n: int, bucket: int, sources: Sequence[RunSource], *,
                  num_buckets: int = DEFAULT_NUM_BUCKETS, provenance: int = DEFAULT_PROVENANCE,
                  old: OldIndex | None = None, chunk_pairs: int = DEFAULT_CHUNK_PAIRS,
                  doc_dtype: np.dtype | str = DOC_DTYPE) -> int:
    """Merge bucket ``bucket`` of every run in ``sources`` (and of ``old``) into final files under
    ``out_root``; returns the number of unique n-grams. Memory is bounded by ``chunk_pairs``:
    the bucket's hash range is cut into equal sub-ranges merged one at a time, and inputs are
    read in blocks (no memory maps). ``doc_dtype``: uint32 (default; ordinals up to
    0xFFFFFFFE) or int64 (for corpora of 2**32 - 1 docs or more; readers accept both)."""
    lo, hi = _bucket_range(bucket, num_buckets)
    runs: list[tuple[NpyRowReader, NpyRowReader, int, int, int]] = []  # hashes, docs, a, b, doc offset
    total = 0
    for src in sources:
        p = run_paths(src.run_dir, n, src.run)
        off = np.load(p["offsets"], allow_pickle=False)
        a, b = int(off[bucket]), int(off[bucket + 1])
        if b > a:
            runs.append((NpyRowReader(p["hashes"]), NpyRowReader(p["docs"]), a, b, src.doc_offset))
            total += b - a
    old_files = None
    if old is not None:
        op = bucket_paths(old.root, n, bucket)
        oh = NpyRowReader(op["hashes"])
        if len(oh):
            old_files = (oh, NpyRowReader(op["df"]), NpyRowReader(op["docs"]))
            total += len(oh) * max(1, provenance)
    ddtype = np.dtype(doc_dtype)
    if ddtype not in (DOC_DTYPE, np.dtype(np.int64)):
        raise ValueError(f"doc_dtype must be uint32 or int64, not {ddtype}")

    out = bucket_paths(out_root, n, bucket)
    writers = [_NpyStream(out["hashes"], np.uint64), _NpyStream(out["df"], np.uint32),
               _NpyStream(out["docs"], ddtype, provenance)]
    try:
        nchunks = max(1, -(-total // chunk_pairs))
        cuts = [lo + (hi - lo) * i // nchunks for i in range(nchunks)] + [hi]
        # Each input is read forward in blocks of about its share of one chunk (+1/4 slack), so
        # the pairs held at once stay near ``chunk_pairs`` however big the bucket is.
        def step(rows: int) -> int:
            return rows // nchunks + rows // (4 * nchunks) + 1024

        old_cur = None
        if old_files is not None:
            old_cur = _Cursor(old_files[0], 0, len(old_files[0]), step(len(old_files[0])))
        curs = [(_Cursor(rh, a, b, step(b - a)), rd, doff) for rh, rd, a, b, doff in runs]
        for c in range(nchunks):
            bound = cuts[c + 1] if cuts[c + 1] < 1 << 64 else None
            # sources in doc-ordinal order (the old index first): then a concatenation whose
            # hashes do not decrease is already sorted by (hash, doc)
            hs, ds, ws = [], [], []
            if old_cur is not None:
                a, b, h = old_cur.take(bound)
                if b > a:
                    _explode_old(h, old_files[1].read(a, b), old_files[2].read(a, b), old, hs, ds, ws)
            for cur, rd, doff in curs:
                a, b, h = cur.take(bound)
                if b > a:
                    hs.append(h)
                    ds.append(rd.read(a, b).astype(np.int64, copy=False) + doff)
                    ws.append(np.ones(b - a, dtype=np.int64))
            if not hs:
                continue
            h_all, d_all, w_all = np.concatenate(hs), np.concatenate(ds), np.concatenate(ws)
            del hs, ds, ws
            h_u, df, docs = _merge(h_all, d_all, w_all, provenance, ddtype)
            del h_all, d_all, w_all
            writers[0].write(h_u)
            writers[1].write(df)
            writers[2].write(docs)
            del h_u, df, docs
        for w in writers:
            w.close()
    except BaseException as exc:
        for w in writers:
            if not w._fh.closed:
                w.abort(exc)
        raise
    return writers[0].rows


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
    """Read-only access to a finished index directory (memory-mapped buckets)."""

    def __init__(self, root: Path, manifest: dict[str, Any]) -> None:
        self.root = root
        self.manifest = manifest
        self.ngram_sizes: list[int] = [int(n) for n in manifest["ngram_sizes"]]
        self.normalization: str = manifest["normalization"]
        self.hash_seed: int = int(manifest["hash"]["seed"])
        self.hash_name: str = manifest["hash"]["name"]
        self.num_buckets: int = int(manifest["num_buckets"])
        self.provenance: int = int(manifest["provenance_docs"])
        self._buckets: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
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

        if manifest.get("format_version") != FORMAT_VERSION:
            raise TcqaError(f"{mpath}: index format {manifest.get('format_version')} "
                            f"but this tcqa-data reads format {FORMAT_VERSION}; rebuild the index")
        index = cls(root, manifest)
        # Query hashes must come from the function that built the index, or nothing would match.
        if index.hash_name != HASH_NAME:
            raise IndexMismatchError(
                f"index {root} was built with n-gram hash {index.hash_name!r}, but this tcqa-data computes "
                f"{HASH_NAME!r}: its lookups would find nothing; rebuild the index with index-corpus")
        return index

    def _bucket(self, n: int, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        key = (n, b)
        if key not in self._buckets:
            p = bucket_paths(self.root, n, b)
            self._buckets[key] = (_load(p["hashes"]), _load(p["df"]), _load(p["docs"]))
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
        for grp in np.split(order, bounds):
            hs, df, dd = self._bucket(n, int(bk[grp[0]]))
            if not len(hs):
                continue
            qq = q[grp]
            pos = np.searchsorted(hs, qq)
            pos_c = np.minimum(pos, len(hs) - 1)
            ok = np.asarray(hs[pos_c]) == qq
            hit = grp[ok]
            found[hit] = True
            dfreq[hit] = df[pos_c[ok]]
            got = np.asarray(dd[pos_c[ok]])
            if got.dtype == DOC_DTYPE:
                got = np.where(got == DOC_NONE, np.int64(-1), got.astype(np.int64))
            docs[hit] = got
        return LookupResult(found, dfreq, docs)

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
