"""Corpus text reachable from the index: doc locations or a compact copy, per input.

Alignment (``decontam/align.py``) needs the **text** of candidate corpus docs, which the hashed
n-gram and MinHash indexes do not keep. ``INDEX_DIR/textstore/`` makes it reachable:

- uncompressed JSONL: **locations**, the byte offset of each doc's line in the file
  (``<key>.offsets.npy``, int64, 8 bytes per doc); reading a doc is one seek and one line;
- Parquet: **locations**, the 0-based row of each doc (``<key>.rows.npy``); reading decodes
  the doc's row group (cached, so candidates from one row group cost one decode);
- ``.txt``: the file itself (one doc per file), nothing stored;
- ``.jsonl.gz``, ``.jsonl.zst`` and Hugging Face streams: a **copy** of the texts
  (``<key>.texts.parquet``: one ``text`` column, zstd, row groups of ``COPY_ROW_GROUP`` docs,
  so reading one doc decompresses about one row group).

``mode="copy"`` copies every input (for corpora that will move or be deleted); ``"none"`` builds
nothing. ``<key>`` is the first 32 hex digits of the input's sha256. ``meta.json`` is written last:
without it the store is absent, and a rebuild only redoes inputs whose entry does not match the
index manifest (so ``--append`` adds only the new inputs, and ``--overwrite`` never leaves a stale
entry). The store is built after the index commits, by a second pass over the inputs (a newline
scan for JSONL; a full read for copies; a second stream for Hugging Face datasets). The anchors of
a plain JSONL input come from the compiled reader (``readers.iter_normalized_batches``: no ``str``
per doc) and the compiled winnowing kernel, checked line for line against ``docs.parquet``; any
other input, or one whose docs differ from the index's (an id field the index skipped docs for),
is read as ``str`` per doc: the files are the same either way (tests compare them).

Location entries keep the absolute path, size and mtime of the file: a moved or changed corpus
file is a clear error at read time, never wrong text.

**Anchors** (``<key>.anchors-<run>.cells.npy`` and ``.words.npy``): candidate docs for alignment
when no n-gram of the index survives the edits. Winnowing (Schleimer et al. 2003) over the hashes
of word ``ANCHOR_K``-grams: of every ``ANCHOR_W`` consecutive k-grams of a doc the smallest hash
is kept, so any run of at least ``ANCHOR_W + ANCHOR_K - 1`` (6) words shared by a query and a doc
shares a kept k-gram, at about half an entry per corpus word. Entries are ``(hash >> 32, doc)``
(input-local doc number), sorted, unique, stored as a packed table (``decontam/packed.py``: a
directory on the hash's top bits, then the rest of the 32 bits and the doc number bit-packed,
about 16 + log2(docs) + 2 bits per entry instead of 64); one table per run of up to
``ANCHOR_RUN`` entries (bounded memory). The 32-bit hash is lossy: a query k-gram not in a doc
matches one of a run's ``n`` entries by chance with probability about ``n / 2**32``
(``anchor_chance_match_rate`` in ``meta.json``, shown by ``index-info``); a chance match only
adds a candidate doc, which alignment then checks. Stores of version 2 (one uint64 per entry) are
still read.

A query looks up all its k-grams, ignores those in more than ``ANCHOR_MAX_DF`` docs, and ranks
docs by the summed inverse document frequency of the k-grams they share with it; docs sharing a
single kept k-gram are a second, weak tier (``candidate_tiers``), which alignment uses only for
queries with no other candidate.
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tcqa_data.decontam import packed
from tcqa_data.decontam.arrays import sorted_unique
from tcqa_data.errors import ConfigError, TcqaError
from tcqa_data.io_utils import atomic_path, read_json, write_json_atomic, write_npy_atomic

if TYPE_CHECKING:
    from tcqa_data.decontam.engines import Engine

STORE_DIR = "textstore"
META = "meta.json"
MODES = ("auto", "copy", "none")
STORE_VERSION = 3  # 3: packed anchor tables (2: uint64 anchor entries, still read)
COPY_ROW_GROUP = 256  # docs per row group of a copy: ~1 MB of text for Wikipedia-sized docs
_SCAN_CHUNK = 64 << 20
_CACHE_GROUPS = 4
ANCHOR_K = 4  # words per hashed k-gram
ANCHOR_W = 3  # winnowing window (k-grams): shared runs of >= ANCHOR_W + ANCHOR_K - 1 words are found
ANCHOR_RUN = 1 << 24  # entries per sorted run (128 MiB while held, as uint64)
ANCHOR_MAX_DF = 64  # a k-gram in more docs is no evidence of a copy
ANCHOR_MIN_SHARED = 2  # kept k-grams a doc must share with a query to be aligned (cost)
_ANCHOR_THREADS = 2  # anchor runs looked up at once (query side)
_ANCHOR_BATCH_CHARS = 4_000_000
_LOW32 = np.uint64(0xFFFFFFFF)
_TABLE_BLOCK = 1 << 20  # entries per TableWriter.add (the file does not depend on it)


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ConfigError(f"--text-store must be one of {', '.join(MODES)}, not {mode!r}")
    return mode


def _key(entry: dict[str, Any]) -> str:
    return str(entry["sha256"])[:32]


def _entry_id(entry: dict[str, Any], manifest: dict[str, Any]) -> dict[str, Any]:
    """What a stored input must agree with to be reused."""
    return {"sha256": entry["sha256"], "doc_offset": int(entry["doc_offset"]), "docs": int(entry["docs"]),
            "text_field": manifest.get("text_field"), "id_field": manifest.get("id_field")}


def _doc_rows(index_dir: Path, entry: dict[str, Any]) -> np.ndarray:
    """The ``row`` (1-based line/row) of each doc of one input, from docs.parquet (row groups
    outside the input's ordinals are skipped by their statistics)."""
    lo, k = int(entry["doc_offset"]), int(entry["docs"])
    # row groups read one by one, columns as buffers: ``pq.read_table(filters=...)`` and arrow's
    # ``to_numpy`` import pandas (~1.5 CPU-s, most of a 20 MB build's text store pass)
    pf = pq.ParquetFile(index_dir / "docs.parquet")
    col = pf.schema_arrow.get_field_index("doc_ordinal")
    ords, rows_ = [], []
    for g in range(pf.metadata.num_row_groups):
        st = pf.metadata.row_group(g).column(col).statistics
        if st is not None and st.has_min_max and (st.max < lo or st.min >= lo + k):
            continue
        t = pf.read_row_group(g, columns=["doc_ordinal", "row"])
        o, r = _int64_column(t.column("doc_ordinal")), _int64_column(t.column("row"))
        sel = (o >= lo) & (o < lo + k)
        ords.append(o[sel])
        rows_.append(r[sel])
    o = np.concatenate(ords) if ords else np.zeros(0, np.int64)
    rows = np.concatenate(rows_)[np.argsort(o, kind="stable")] if rows_ else np.zeros(0, np.int64)
    if len(rows) != k:
        raise TcqaError(f"{index_dir}/docs.parquet: {len(rows)} rows for input {entry['path']}, "
                        f"manifest says {k}")
    return rows.astype(np.int64)


def _int64_column(col: pa.ChunkedArray) -> np.ndarray:
    """An int64 column without nulls as numpy, from its buffers (no pandas import)."""
    parts = [np.frombuffer(c.buffers()[1], dtype=np.int64, count=c.offset + len(c))[c.offset:]
             for c in col.chunks if len(c)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def jsonl_line_offsets(path: str | os.PathLike, lines: np.ndarray) -> np.ndarray:
    """Byte offset of each 1-based line number in ``lines`` (ascending) of an uncompressed file."""
    lines = np.asarray(lines, dtype=np.int64)
    out = np.zeros(len(lines), dtype=np.int64)
    # line k starts right after newline number k-1 (1-based); line 1 starts at 0
    need = lines - 2  # index of the newline ending line k-1
    done = 0
    seen, base = 0, 0  # newlines seen before this chunk, byte offset of the chunk
    with open(path, "rb") as fh:
        while done < len(lines):
            while done < len(lines) and need[done] < seen:
                done += 1  # line 1 (need -1): offset 0
            buf = fh.read(_SCAN_CHUNK)
            if not buf:
                break
            nl = np.flatnonzero(np.frombuffer(buf, dtype=np.uint8) == 10)
            hi = np.searchsorted(need, seen + len(nl), side="left")
            if hi > done:
                out[done:hi] = base + nl[need[done:hi] - seen] + 1
                done = hi
            seen += len(nl)
            base += len(buf)
    if done < len(lines):
        raise TcqaError(f"{path}: has fewer lines than the index recorded; was it changed after indexing?")
    return out


def _write_copy(path: Path, texts: Iterable[str]) -> int:
    schema = pa.schema([("text", pa.string())])
    n = 0
    with atomic_path(path) as tmp:
        with pq.ParquetWriter(tmp, schema, compression="zstd") as pw:
            buf: list[str] = []
            for t in texts:
                buf.append(t)
                if len(buf) >= COPY_ROW_GROUP:
                    pw.write_table(pa.table({"text": pa.array(buf, pa.string())}),
                                   row_group_size=COPY_ROW_GROUP)
                    n += len(buf)
                    buf = []
            if buf:
                pw.write_table(pa.table({"text": pa.array(buf, pa.string())}), row_group_size=COPY_ROW_GROUP)
                n += len(buf)
    return n


def _copied_texts(path: Path) -> Iterable[str]:
    for batch in pq.ParquetFile(path).iter_batches(batch_size=COPY_ROW_GROUP, columns=["text"]):
        yield from batch.column(0).to_pylist()


def _input_texts(entry: dict[str, Any], manifest: dict[str, Any], hf: dict[str, Any] | None) -> Iterable[str]:
    """The input's documents again, in index order (the build validated them: skip mode)."""
    from tcqa_data.decontam.readers import CorpusInput, iter_documents, iter_hf_documents

    tf, idf = manifest.get("text_field", "text"), manifest.get("id_field")
    if entry["format"] == "hf":
        if hf is None:
            raise TcqaError(f"{entry['path']}: a Hugging Face input needs its dataset name to be copied")
        docs = iter_hf_documents(hf["name"], hf.get("config"), hf.get("split", "train"), tf, idf,
                                 on_error="skip")
    else:
        docs = iter_documents(CorpusInput(entry["path"], entry["format"], int(entry["size"])), tf, idf,
                              on_error="skip")
    return (d.text for d in docs)


def winnow(texts: Sequence[str], scheme: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Kept k-gram hashes (upper 32 bits) and the index in ``texts`` of their doc (see module doc)."""
    from tcqa_data.decontam.hashing import batch_ngram_hashes

    flat, owner = batch_ngram_hashes(list(texts), [ANCHOR_K], scheme, seed)[ANCHOR_K]
    return winnow_hashes(flat, owner)


def winnow_hashes(flat: np.ndarray, owner: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``winnow`` of k-gram hashes already computed: ``flat`` (uint64) and their doc ``owner``
    (int64, non-decreasing, as ``hashing`` returns them); the compiled kernel when enabled."""
    from tcqa_data.decontam import kernel

    flat = np.asarray(flat, dtype=np.uint64)
    owner = np.asarray(owner, dtype=np.int64)
    if kernel.enabled():
        return kernel.kernels()["winnow_hashes"](flat, owner, ANCHOR_W)
    if len(flat) < ANCHOR_W:
        return (flat >> np.uint64(32)).astype(np.uint32), owner
    win = np.lib.stride_tricks.sliding_window_view(flat, ANCHOR_W)
    pos = win.argmin(axis=1) + np.arange(len(win))
    inside = owner[:len(win)] == owner[ANCHOR_W - 1:]  # windows within one doc
    keep = np.zeros(len(flat), dtype=bool)
    keep[pos[inside]] = True
    counts = np.bincount(owner)
    keep |= counts[owner] < ANCHOR_W  # docs with fewer k-grams than a window: keep them all
    return (flat[keep] >> np.uint64(32)).astype(np.uint32), owner[keep]


def _write_anchor_table(store: Path, name: str, entries: np.ndarray, id_bits: int) -> dict[str, Any]:
    """One run of sorted unique ``hash << 32 | doc`` entries as a packed table; returns its meta."""
    n = len(entries)
    dir_bits = packed.dir_bits_for(n)
    cells: list[np.ndarray] = []
    words: list[np.ndarray] = []
    table = packed.TableWriter(cells.append, words.append, n, dir_bits, id_bits)
    for i in range(0, n, _TABLE_BLOCK):  # sorted blocks: the writer's scratch stays small
        block = entries[i:i + _TABLE_BLOCK]
        table.add(block >> np.uint64(32), (block & _LOW32).astype(np.int64))
    table.close()
    write_npy_atomic(store / f"{name}.cells.npy", np.concatenate(cells).astype(np.uint32))
    write_npy_atomic(store / f"{name}.words.npy", np.concatenate(words))
    return {"name": name, "entries": n, "dir_bits": dir_bits, "id_bits": id_bits}


def _winnowed_texts(texts: Iterable[str], scheme: str, seed: int
                    ) -> Iterable[tuple[np.ndarray, np.ndarray, int]]:
    """``winnow`` of ``texts`` in batches of about ``_ANCHOR_BATCH_CHARS`` chars: per batch, the
    kept hashes, their doc in the batch and the batch's doc count."""
    batch: list[str] = []
    size = 0
    for t in texts:
        batch.append(t)
        size += len(t)
        if size >= _ANCHOR_BATCH_CHARS:
            yield (*winnow(batch, scheme, seed), len(batch))
            batch, size = [], 0
    if batch:
        yield (*winnow(batch, scheme, seed), len(batch))


class _NotIndexOrder(Exception):
    """The compiled reader's documents are not the index's (see ``_winnowed_jsonl``)."""


def _winnowed_jsonl(path: str, size: int, text_field: str, seed: int, rows: np.ndarray
                    ) -> Iterable[tuple[np.ndarray, np.ndarray, int]]:
    """``_winnowed_texts`` of a JSONL input read by the compiled reader (no ``str`` per doc; the
    same batches, hence the same runs). ``rows``: the 1-based line of each doc of the index; the
    reader knows no id field, so a doc the index skipped (a missing id) raises ``_NotIndexOrder``."""
    from tcqa_data.decontam.hashing import hash_normalized
    from tcqa_data.decontam.readers import CorpusInput, iter_normalized_batches

    done = 0
    for b in iter_normalized_batches(CorpusInput(path, "jsonl", size), text_field, "skip", None,
                                     _ANCHOR_BATCH_CHARS):
        k = len(b.rows)
        if not np.array_equal(b.rows, rows[done:done + k]):
            raise _NotIndexOrder
        done += k
        flat, owner = hash_normalized(b.data, b.doc_start, [ANCHOR_K], seed)[ANCHOR_K]
        yield (*winnow_hashes(flat, owner), k)
    if done != len(rows):
        raise _NotIndexOrder


def _write_anchor_runs(store: Path, key: str, batches: Iterable[tuple[np.ndarray, np.ndarray, int]],
                       n_docs: int) -> list[dict[str, Any]]:
    """Anchor entries of one input's docs, as sorted packed tables; returns their meta.
    ``batches``: per batch of docs in index order, ``winnow``'s result and the batch's doc count."""
    names: list[dict[str, Any]] = []
    id_bits = packed.id_bits_for(max(0, n_docs - 1))
    parts: list[np.ndarray] = []
    held = 0
    base = 0

    def flush() -> None:
        nonlocal held
        if not parts:
            return
        entries = np.concatenate(parts)
        parts.clear()  # before the sort: the runs are held once, not twice
        entries = sorted_unique(entries, in_place=True)
        names.append(_write_anchor_table(store, f"{key}.anchors-{len(names):04d}", entries, id_bits))
        held = 0

    for h, d, k in batches:
        parts.append((h.astype(np.uint64) << np.uint64(32)) | (d + base).astype(np.uint64))
        held += len(h)
        base += k
        if held >= ANCHOR_RUN:
            flush()
    flush()
    return names


class AnchorIndex:
    """Candidate corpus docs for queries, from the anchors of a text store."""

    def __init__(self, index_dir: str | os.PathLike) -> None:
        root = Path(index_dir)
        manifest = read_json(root / "manifest.json")
        meta = read_json(root / STORE_DIR / META)
        self.scheme = manifest["normalization"]
        self.seed = int(manifest["hash"]["seed"])
        self.num_docs = int(manifest["counts"]["docs"])
        # per run: (uint64 entries of a version-2 store, or (cells, words, dir_bits, id_bits)), doc offset
        self.runs: list[tuple[Any, int]] = []
        for e in manifest["inputs"]:
            rec = meta["inputs"].get(_key(e), {})
            for run in rec.get("anchors", []):
                if isinstance(run, str):  # store version 2
                    arr = np.load(root / STORE_DIR / run, mmap_mode="r", allow_pickle=False)
                else:
                    arr = tuple(np.load(root / STORE_DIR / f"{run['name']}.{part}.npy", mmap_mode="r",
                                        allow_pickle=False) for part in ("cells", "words")) \
                        + (int(run["dir_bits"]), int(run["id_bits"]))
                self.runs.append((arr, int(e["doc_offset"])))

    @property
    def available(self) -> bool:
        return bool(self.runs)

    def candidates(self, texts: Sequence[str], top: int, min_shared: int = ANCHOR_MIN_SHARED
                   ) -> list[list[int]]:
        """Per text, up to ``top`` doc ordinals sharing at least ``min_shared`` of its kept k-grams
        (rarer ones weigh more), best first."""
        return self.candidate_tiers(texts, top, min_shared, 0)[0]

    def candidate_tiers(self, texts: Sequence[str], top: int, min_shared: int = ANCHOR_MIN_SHARED,
                        weak_top: int = 0) -> tuple[list[list[int]], list[list[int]]]:
        """Per text: up to ``top`` docs sharing at least ``min_shared`` kept k-grams (strong), and up to
        ``weak_top`` more sharing fewer (weak: an edited copy can keep a single 6-word run), each
        best first (summed inverse document frequency of the shared k-grams)."""
        from tcqa_data.decontam.hashing import batch_ngram_hashes

        out: list[list[int]] = [[] for _ in texts]
        weak: list[list[int]] = [[] for _ in texts]
        if not self.runs or not texts:
            return out, weak
        flat, owner = batch_ngram_hashes(list(texts), [ANCHOR_K], self.scheme, self.seed)[ANCHOR_K]
        # distinct (k-gram, query) pairs
        keys = sorted_unique((np.asarray(flat, dtype=np.uint64) >> np.uint64(32) << np.uint64(32))
                             | np.asarray(owner, dtype=np.uint64), in_place=True)
        qh = keys >> np.uint64(32) << np.uint64(32)
        q_owner = (keys & _LOW32).astype(np.int64)
        # the distinct k-gram hashes of all queries, and the docs of each in every run
        uh, inv = np.unique(qh >> np.uint64(32), return_inverse=True)
        df = np.zeros(len(uh), dtype=np.int64)
        hits: list[tuple[np.ndarray, np.ndarray]] = []
        alive = np.ones(len(uh), dtype=bool)  # k-grams in at most ANCHOR_MAX_DF docs so far

        def lookup(arr: Any, live: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            """(k-gram, doc) of the run's entries for k-grams ``live``, k-grams ascending."""
            lh = uh[live]
            if isinstance(arr, tuple):
                cells, words, dir_bits, id_bits = arr
                # a k-gram in more than ANCHOR_MAX_DF docs is dropped anyway: read no more of it
                k, d = packed.lookup(cells, words, lh, dir_bits, id_bits, ANCHOR_MAX_DF + 1)
            else:
                lo = np.searchsorted(arr, lh << np.uint64(32), side="left")
                hi = np.searchsorted(arr, (lh << np.uint64(32)) | _LOW32, side="right")
                n = hi - lo
                k = np.repeat(np.arange(len(lh)), n)
                d = (np.asarray(arr[np.repeat(lo, n) + np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n)])
                     & _LOW32).astype(np.int64)
            return live[k], d

        # The runs are looked up by _ANCHOR_THREADS threads (the kernel releases the GIL), a few runs
        # ahead of the one whose hits are counted: a lookup may still include k-grams that an
        # earlier run has dropped since; those hits are dropped here, so the result is the same.
        from concurrent.futures import ThreadPoolExecutor

        runs = iter(self.runs)
        ahead: deque = deque()
        with ThreadPoolExecutor(_ANCHOR_THREADS) as pool:

            def more() -> None:
                for arr, doc_offset in runs:
                    ahead.append((pool.submit(lookup, arr, np.flatnonzero(alive)), doc_offset))
                    return

            for _ in range(_ANCHOR_THREADS):  # one thread: each run sees the live set before it (HEAD's loop)
                if alive.any():
                    more()
            while ahead:
                fut, doc_offset = ahead.popleft()
                g, d = fut.result()
                live_now = alive[g]
                g, d = g[live_now], d[live_now]
                # g ascends (lookups return hits in query order): count per k-gram without a
                # table the size of all query k-grams (this loop runs once per run of every input)
                gg, run_df = np.unique(g, return_counts=True)
                df[gg] += run_df
                keep = np.repeat(run_df, run_df) <= ANCHOR_MAX_DF  # more in one run is more in all
                hits.append((g[keep], d[keep] + doc_offset))
                alive[gg[df[gg] > ANCHOR_MAX_DF]] = False
                if alive.any():
                    more()
        use = (df > 0) & (df <= ANCHOR_MAX_DF)
        idf = np.log1p(self.num_docs / np.maximum(df, 1))
        # per hash, its (hash, doc) hits; then every query holding that hash gets them
        hk = np.concatenate([k for k, _ in hits])
        hd = np.concatenate([d for _, d in hits])
        sel = use[hk]
        hk, hd = hk[sel], hd[sel]
        order = np.argsort(hk, kind="stable")
        hk, hd = hk[order], hd[order]
        first = np.searchsorted(hk, inv, side="left")
        n = np.searchsorted(hk, inv, side="right") - first
        docs_l, owners_l, w_l = [], [], []
        if n.sum():
            pos = np.repeat(first, n) + np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n)
            docs_l.append(hd[pos])
            owners_l.append(np.repeat(q_owner, n))
            w_l.append(np.repeat(idf[inv], n))
        if not docs_l:
            return out, weak
        docs, owners, w = np.concatenate(docs_l), np.concatenate(owners_l), np.concatenate(w_l)
        pair = owners * (self.num_docs + 1) + docs
        uniq, inv = np.unique(pair, return_inverse=True)
        score = np.bincount(inv, weights=w)
        shared = np.bincount(inv)
        u_owner, u_doc = uniq // (self.num_docs + 1), uniq % (self.num_docs + 1)
        order = np.lexsort((u_doc, -score, u_owner))
        for tier, cap, sel in ((out, top, shared[order] >= min_shared),
                               (weak, weak_top, shared[order] < min_shared)):
            if cap <= 0:
                continue
            for j in order[sel].tolist():
                lst = tier[int(u_owner[j])]
                if len(lst) < cap:
                    lst.append(int(u_doc[j]))
        return out, weak


def build_text_store(index_dir: str | os.PathLike, mode: str = "auto", *,
                     hf: dict[str, Any] | None = None, workers: int = 1,
                     engine: Engine | None = None) -> dict[str, Any]:
    """Build (or complete) ``INDEX_DIR/textstore`` for a finished index; returns its meta.

    ``hf``: ``{"name", "config", "split"}`` of the index's Hugging Face input, if any.
    ``workers``: processes, one input each (the files do not depend on it). ``engine``: run the
    inputs as its tasks instead (Ray: spread over the cluster like the map; the same files).
    """
    check_mode(mode)
    root = Path(index_dir)
    store = root / STORE_DIR
    if mode == "none":
        return {}
    manifest = read_json(root / "manifest.json")
    old = read_json(store / META) if (store / META).is_file() else {"inputs": {}}
    if old.get("version") != STORE_VERSION:
        old = {"inputs": {}}
    entries: dict[str, Any] = {}
    todo: list[dict[str, Any]] = []
    for e in manifest["inputs"]:
        key = _key(e)
        prev = old["inputs"].get(key)
        if prev is not None and prev.get("id") == _entry_id(e, manifest) \
                and prev.get("kind") == _kind(e["format"], mode) and _files_ok(store, prev):
            entries[key] = prev
        else:
            todo.append(e)
    if todo:
        store.mkdir(parents=True, exist_ok=True)
    calls = [(str(root), e, manifest, mode, hf) for e in todo]
    if engine is not None and todo:
        recs = engine.map(_store_input, [{"e": e} for e in todo], desc="index-textstore",
                          shared={"root_dir": str(root), "manifest": manifest, "mode": mode, "hf": hf})
    elif workers > 1 and len(todo) > 1:
        # inputs are independent: one task per input (the pass reads and hashes every doc)
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=min(workers, len(todo))) as pool:
            recs = list(pool.map(_store_input, *zip(*calls, strict=True)))
    else:
        recs = [_store_input(*c) for c in calls]
    for e, rec in zip(todo, recs, strict=True):
        entries[_key(e)] = rec
    entries = dict(sorted(entries.items()))
    meta = {"version": STORE_VERSION, "mode": mode, "inputs": entries}
    if store.is_dir():
        keep = {META} | {r["file"] for r in entries.values() if "file" in r} \
            | {f for r in entries.values() for f in _anchor_files(r)}
        for f in store.iterdir():
            if f.name not in keep and not f.name.startswith("."):
                f.unlink()
    write_json_atomic(store / META, meta)
    return meta


def _store_input(root_dir: str, e: dict[str, Any], manifest: dict[str, Any], mode: str,
                 hf: dict[str, Any] | None) -> dict[str, Any]:
    """Write one input's text store files (locations or copy, and anchors); returns its meta entry."""
    root = Path(root_dir)
    store = root / STORE_DIR
    key = _key(e)
    kind = _kind(e["format"], mode)
    rec: dict[str, Any] = {"id": _entry_id(e, manifest), "kind": kind, "format": e["format"],
                           "path": e["path"]}
    if kind in ("offsets", "rows", "file"):
        p = os.path.abspath(e["path"])
        st = os.stat(p)
        rec.update({"abs_path": p, "size": st.st_size, "mtime_ns": st.st_mtime_ns})
    scheme, seed = manifest["normalization"], int(manifest["hash"]["seed"])
    if kind == "offsets":
        rec["file"] = f"{key}.offsets.npy"
        rows = _doc_rows(root, e)
        write_npy_atomic(store / rec["file"], jsonl_line_offsets(e["path"], rows))
        if _fast_anchors(e, manifest):
            try:
                rec["anchors"] = _write_anchor_runs(
                    store, key, _winnowed_jsonl(e["path"], int(e["size"]), manifest.get("text_field", "text"),
                                                seed, rows), int(e["docs"]))
            except _NotIndexOrder:
                pass  # the Python reader below decides (skipped ids, or a changed input: its error)
    elif kind == "rows":
        rec["file"] = f"{key}.rows.npy"
        write_npy_atomic(store / rec["file"], _doc_rows(root, e) - 1)
    if "anchors" not in rec:  # the Python reader: a str per doc
        counted = [0]

        def texts() -> Iterable[str]:
            for t in _input_texts(e, manifest, hf):
                counted[0] += 1
                yield t

        source = texts()
        if kind == "copy":
            # the input is read once; the anchors then read the (local, fast) copy
            rec["file"] = f"{key}.texts.parquet"
            _write_copy(store / rec["file"], source)
            source = _copied_texts(store / rec["file"])
        rec["anchors"] = _write_anchor_runs(store, key, _winnowed_texts(source, scheme, seed), int(e["docs"]))
        if counted[0] != int(e["docs"]):
            raise TcqaError(f"{e['path']}: read {counted[0]} documents for the text store, the index has "
                            f"{e['docs']}; was the input changed after indexing?")
    rec["anchor_entries"] = sum(r["entries"] for r in rec["anchors"])
    # a query k-gram absent from a run matches one of its n entries' 32-bit hashes by chance
    rec["anchor_chance_match_rate"] = rec["anchor_entries"] / 2.0 ** 32
    return rec


def _fast_anchors(e: dict[str, Any], manifest: dict[str, Any]) -> bool:
    """True when a JSONL input's anchors come from the compiled reader (``_winnowed_jsonl``): the
    rows of docs.parquet then say which lines are docs, so an id field needs no reading."""
    from tcqa_data.decontam.readers import normalized_batches_supported

    return normalized_batches_supported(e["format"], manifest.get("text_field", "text"), None,
                                        manifest["normalization"])


def _kind(fmt: str, mode: str) -> str:
    if mode == "copy":
        return "copy"
    return {"jsonl": "offsets", "parquet": "rows", "txt": "file"}.get(fmt, "copy")


def _anchor_files(rec: dict[str, Any]) -> list[str]:
    return [f for r in rec.get("anchors", []) for f in
            ([r] if isinstance(r, str) else [f"{r['name']}.cells.npy", f"{r['name']}.words.npy"])]


def _files_ok(store: Path, rec: dict[str, Any]) -> bool:
    files = ([rec["file"]] if "file" in rec else []) + _anchor_files(rec)
    return all((store / f).is_file() for f in files)


def has_text_store(index_dir: str | os.PathLike) -> bool:
    return (Path(index_dir) / STORE_DIR / META).is_file()


def store_summary(index_dir: str | os.PathLike) -> dict[str, Any] | None:
    """What the text store holds (None if absent): its mode, bytes of doc locations / text copies
    / anchors, anchor entries and their chance-match rate (``index-info`` shows it)."""
    d = Path(index_dir) / STORE_DIR
    if not (d / META).is_file():
        return None
    meta = read_json(d / META)
    out: dict[str, Any] = {"version": meta.get("version"), "mode": meta.get("mode"),
                           "bytes": {"locations": 0, "copy": 0, "anchors": 0}, "anchor_entries": 0,
                           "anchor_chance_match_rate": 0.0}
    for rec in meta.get("inputs", {}).values():
        if "file" in rec and (d / rec["file"]).is_file():
            out["bytes"]["copy" if rec["kind"] == "copy" else "locations"] += (d / rec["file"]).stat().st_size
        out["bytes"]["anchors"] += sum((d / f).stat().st_size for f in _anchor_files(rec)
                                       if (d / f).is_file())
        out["anchor_entries"] += int(rec.get("anchor_entries", 0))
        # per query k-gram: a chance match in any input's runs
        out["anchor_chance_match_rate"] += float(rec.get("anchor_chance_match_rate", 0.0))
    return out


def store_bytes(index_dir: str | os.PathLike) -> int:
    """Bytes on disk of the text store (0 if absent)."""
    d = Path(index_dir) / STORE_DIR
    return sum(p.stat().st_size for p in d.iterdir() if p.is_file()) if d.is_dir() else 0


class TextStore:
    """Read doc texts by doc ordinal (``TextStore.open(INDEX_DIR).texts([0, 5])``)."""

    def __init__(self, root: Path, manifest: dict[str, Any], meta: dict[str, Any]) -> None:
        self.root = root
        self.text_field = manifest.get("text_field", "text")
        self._inputs = sorted(manifest["inputs"], key=lambda e: int(e["doc_offset"]))
        self._starts = np.asarray([int(e["doc_offset"]) for e in self._inputs], dtype=np.int64)
        self._meta = meta
        self._arrays: dict[str, np.ndarray] = {}
        self._groups: OrderedDict[tuple[str, int], list[str]] = OrderedDict()
        self._checked: set[str] = set()

    @classmethod
    def open(cls, index_dir: str | os.PathLike) -> TextStore:
        root = Path(index_dir)
        mpath = root / STORE_DIR / META
        if not mpath.is_file():
            raise TcqaError(f"{root}: the index has no text store (built with --text-store none, or an older "
                            "tcqa-data); rebuild it with index-corpus to use alignment terms")
        manifest = read_json(root / "manifest.json")
        meta = read_json(mpath)
        for e in manifest["inputs"]:
            rec = meta["inputs"].get(_key(e))
            if rec is None or rec.get("id") != _entry_id(e, manifest):
                raise TcqaError(f"{root}: the text store does not match input {e['path']}; "
                                "rerun index-corpus")
        return cls(root, manifest, meta)

    def _entry(self, ordinal: int) -> tuple[dict[str, Any], dict[str, Any], int]:
        i = int(np.searchsorted(self._starts, ordinal, side="right")) - 1
        e = self._inputs[i]
        j = ordinal - int(e["doc_offset"])
        if i < 0 or not 0 <= j < int(e["docs"]):
            raise TcqaError(f"{self.root}: doc ordinal {ordinal} is not in the index")
        return e, self._meta["inputs"][_key(e)], j

    def _array(self, rec: dict[str, Any]) -> np.ndarray:
        f = rec["file"]
        if f not in self._arrays:
            self._arrays[f] = np.load(self.root / STORE_DIR / f, mmap_mode="r", allow_pickle=False)
        return self._arrays[f]

    def _check_file(self, rec: dict[str, Any]) -> str:
        p = rec["abs_path"]
        if p not in self._checked:
            try:
                st = os.stat(p)
            except OSError:
                raise TcqaError(f"{p}: corpus file of the index is gone; alignment and MinHash verification "
                                "read doc text from it (build the index with --text-store copy to keep a "
                                "copy)") from None
            if st.st_size != rec["size"] or st.st_mtime_ns != rec["mtime_ns"]:
                raise TcqaError(f"{p}: corpus file changed since it was indexed; rebuild the index")
            self._checked.add(p)
        return p

    def _group(self, path: Path, g: int, column: str) -> list[str]:
        k = (str(path), g)
        if k not in self._groups:
            pf = pq.ParquetFile(path)
            col = pf.read_row_group(g, columns=[column]).column(0)
            self._groups[k] = [x if isinstance(x, str) else bytes(x).decode("utf-8")
                               for x in col.to_pylist()]
            if len(self._groups) > _CACHE_GROUPS:
                self._groups.popitem(last=False)
        else:
            self._groups.move_to_end(k)
        return self._groups[k]

    def _parquet_row(self, path: Path, row: int, column: str) -> str:
        k = str(path)
        if k not in self._arrays:
            meta = pq.ParquetFile(path).metadata
            sizes = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
            self._arrays[k] = np.cumsum([0] + sizes, dtype=np.int64)
        firsts = self._arrays[k]
        g = int(np.searchsorted(firsts, row, side="right")) - 1
        if not 0 <= g < len(firsts) - 1:
            raise TcqaError(f"{path}: row {row + 1} is past the end of the file")
        return self._group(path, g, column)[row - int(firsts[g])]

    def text(self, ordinal: int) -> str:
        e, rec, j = self._entry(int(ordinal))
        kind = rec["kind"]
        if kind == "copy":
            return self._parquet_row(self.root / STORE_DIR / rec["file"], j, "text")
        p = self._check_file(rec)
        if kind == "file":
            with open(p, "rb") as fh:
                raw = fh.read()
            return raw.removeprefix(b"\xef\xbb\xbf").decode("utf-8")
        if kind == "rows":
            return self._parquet_row(Path(p), int(self._array(rec)[j]), self.text_field)
        with open(p, "rb") as fh:
            fh.seek(int(self._array(rec)[j]))
            raw = fh.readline().removeprefix(b"\xef\xbb\xbf")
        return json.loads(raw.decode("utf-8"))[self.text_field]

    def texts(self, ordinals: Sequence[int] | np.ndarray) -> list[str]:
        """Texts of the docs with these ordinals (in this order)."""
        ords = [int(o) for o in ordinals]
        self.prefetch(ords)
        got = {o: self.text(o) for o in sorted(set(ords))}  # file order: row groups decode once
        return [got[o] for o in ords]

    def prefetch(self, ordinals: Sequence[int] | np.ndarray) -> None:
        """Ask the OS to read these docs' lines of uncompressed JSONL inputs ahead (other kinds:
        nothing). Candidate docs lie anywhere in a large corpus: one synchronous disk read per doc
        would wait on each in turn, while these reads are queued together, in file order."""
        if not hasattr(os, "posix_fadvise"):
            return
        if not self._inputs:
            return
        ords = sorted_unique(np.asarray(ordinals, dtype=np.int64))
        ords = ords[(ords >= 0) & (ords < int(self._starts[-1]) + int(self._inputs[-1]["docs"]))]
        which = np.searchsorted(self._starts, ords, side="right") - 1
        inputs = sorted_unique(which).tolist()
        recs = [self._meta["inputs"][_key(self._inputs[i])] for i in inputs]
        new = [r for r in recs if r["kind"] == "offsets" and r["file"] not in self._arrays]
        if len(new) > 1:  # cold page cache: each offsets file's header is a disk read; many at once
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(16) as pool:
                list(pool.map(self._array, new))
        for i, rec in zip(inputs, recs, strict=True):
            e = self._inputs[i]
            if rec["kind"] != "offsets":
                continue
            offs = self._array(rec)
            local = ords[which == i] - int(e["doc_offset"])
            start = np.asarray(offs[local], dtype=np.int64)
            nxt = local + 1
            end = np.full(len(local), int(rec["size"]), dtype=np.int64)  # the last doc: to the end
            inside = nxt < len(offs)
            end[inside] = np.asarray(offs[nxt[inside]], dtype=np.int64)
            try:
                fd = os.open(self._check_file(rec), os.O_RDONLY)
            except OSError:
                continue  # text() reports a missing file
            try:
                for a, b in zip(start.tolist(), end.tolist(), strict=True):
                    os.posix_fadvise(fd, a, max(b - a, 1), os.POSIX_FADV_WILLNEED)
            finally:
                os.close(fd)
