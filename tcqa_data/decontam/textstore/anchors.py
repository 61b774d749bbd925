"""Alignment anchors: winnowed k-grams of every corpus doc, the candidates for alignment.

**Anchors** (``<key>.anchors-<run>.cells.npy`` and ``.words.npy``): candidate docs for alignment
when no n-gram of the index survives the edits. Winnowing (Schleimer et al. 2003) over the hashes
of word ``ANCHOR_K``-grams: of every ``ANCHOR_W`` consecutive k-grams of a doc the smallest hash
is kept, so any run of at least ``ANCHOR_W + ANCHOR_K - 1`` (6) words shared by a query and a doc
shares a kept k-gram, at about half an entry per corpus word. Entries are ``(hash >> 32, doc)``
(input-local doc number), sorted, unique, stored as a packed table (``decontam/packed.py``: a
directory on the hash's top bits, then the rest of the 32 bits and the doc number bit-packed,
about 16 + log2(docs) + 2 bits per entry instead of 64); one table per run of up to
``ANCHOR_RUN`` entries (bounded memory). The build then merges every input's runs into one table
(``plan_anchor_parts``, ``write_anchor_part``): entries ``(hash, global doc ordinal)``, cut into
key ranges of directory cells ``[c0, c1)`` holding about ``ANCHOR_RUN`` entries each, a part's
directory being that slice of the table's (``packed.TableWriter(cells=...)``; past
``build.ANCHOR_MERGE_GROUP`` runs, groups of runs are merged first into intermediate tables of
the same kind, which the final parts read: the same cuts and entries); a lookup in a part
shifts its keys down by ``c0 << (32 - dir_bits)``. The 32-bit hash is lossy: a query k-gram not in
a doc matches one of a table's ``n`` entries by chance with probability about ``n / 2**32``
(``anchor_chance_match_rate`` of ``store_summary``, shown by ``index-info``); a chance match only
adds a candidate doc, which alignment then checks. Stores of version 3 (per-input runs) and 2 (one
uint64 per entry) are still read.

A query looks up all its k-grams (in the merged table's parts, then the runs of inputs the table
does not hold: the candidates are the same either way), ignores those in more than
``ANCHOR_MAX_DF`` docs, and ranks docs by the summed inverse document frequency of the k-grams
they share with it; docs sharing a single kept k-gram are a second, weak tier
(``candidate_tiers``), which alignment uses only for queries with no other candidate.
"""

from __future__ import annotations

import math
import os
from collections import deque
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from tcqa_data.decontam import packed
from tcqa_data.decontam.arrays import sorted_unique
from tcqa_data.decontam.textstore.store import META, STORE_DIR, _entry_id, _id_key, _key, merged_covers
from tcqa_data.errors import TcqaError
from tcqa_data.io_utils import cached_row_reader, load_npy, read_json, write_npy_atomic

ANCHOR_K = 4  # words per hashed k-gram
ANCHOR_W = 3  # winnowing window (k-grams): shared runs of >= ANCHOR_W + ANCHOR_K - 1 words are found
ANCHOR_RUN = 1 << 24  # entries per sorted run (128 MiB while held, as uint64)
ANCHOR_MAX_DF = 64  # a k-gram in more docs is no evidence of a copy
ANCHOR_MIN_SHARED = 2  # kept k-grams a doc must share with a query to be aligned (cost)
_ANCHOR_THREADS = 2  # anchor runs looked up at once (query side)
_ANCHOR_BATCH_CHARS = 4_000_000
_LOW32 = np.uint64(0xFFFFFFFF)
_TABLE_BLOCK = 1 << 20  # entries per TableWriter.add (the file does not depend on it)


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


def _write_anchor_table(store: Path, name: str, entries: np.ndarray, id_bits: int,
                        dir_bits: int | None = None, cells: tuple[int, int] | None = None) -> dict[str, Any]:
    """One run of sorted unique ``hash << 32 | doc`` entries as a packed table; returns its meta.
    ``cells``: the entries' directory cells ``[c0, c1)`` of a table of ``dir_bits`` (a key-range
    part of the merged table: its directory is that slice, offsets from 0)."""
    n = len(entries)
    dir_bits = packed.dir_bits_for(n) if dir_bits is None else dir_bits
    cell_parts: list[np.ndarray] = []
    words: list[np.ndarray] = []
    table = packed.TableWriter(cell_parts.append, words.append, n, dir_bits, id_bits, cells=cells)
    for i in range(0, n, _TABLE_BLOCK):  # sorted blocks: the writer's scratch stays small
        block = entries[i:i + _TABLE_BLOCK]
        table.add(block >> np.uint64(32), (block & _LOW32).astype(np.int64))
    table.close()
    assert n < 2**32  # a run or a part holds about ANCHOR_RUN entries: 32-bit directory offsets
    write_npy_atomic(store / f"{name}.cells.npy", np.concatenate(cell_parts).astype(np.uint32))
    write_npy_atomic(store / f"{name}.words.npy", np.concatenate(words))
    out: dict[str, Any] = {"name": name, "entries": n, "dir_bits": dir_bits, "id_bits": id_bits}
    if cells is not None:
        out["cells"] = [int(cells[0]), int(cells[1])]
    return out


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
    from tcqa_data.decontam.readers.inputs import CorpusInput
    from tcqa_data.decontam.readers.jsonl_batches import iter_normalized_batches

    done = 0
    for b in iter_normalized_batches(CorpusInput(path, "jsonl", size), text_field, "skip", None,
                                     _ANCHOR_BATCH_CHARS):
        k = len(b.rows)
        if not np.array_equal(b.rows, rows[done:done + k]):
            raise _NotIndexOrder
        done += k
        yield (*winnow_normalized(b.data, b.doc_start, seed), k)
    if done != len(rows):
        raise _NotIndexOrder


def winnow_normalized(data: np.ndarray, doc_start: np.ndarray, seed: int,
                      tokens: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``winnow`` of documents already Janitor-normalized into one buffer (``hashing.hash_normalized``'s
    layout: the compiled readers' batches, the map's buffers); ``tokens``: its token hashes
    (``hashing.normalized_tokens``), when the caller has them."""
    from tcqa_data.decontam.hashing import hash_normalized

    flat, owner = hash_normalized(data, doc_start, [ANCHOR_K], seed, tokens)[ANCHOR_K]
    return winnow_hashes(flat, owner)


def _write_anchor_runs(store: Path, key: str, batches: Iterable[tuple[np.ndarray, np.ndarray, int]],
                       n_docs: int) -> list[dict[str, Any]]:
    """Anchor entries of one input's docs, as sorted packed tables; returns their meta.
    ``batches``: per batch of docs in index order, ``winnow``'s result and the batch's doc count.
    A run ends with the doc that brings it to ``ANCHOR_RUN`` entries, whatever the batches: the
    map's anchors (``map_anchor_batches``) and a pass over the input write the same runs."""
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
        d = np.asarray(d, dtype=np.int64)  # non-decreasing: winnowing keeps doc order
        lo = 0
        while lo < len(h):
            full = held + len(h) - lo >= ANCHOR_RUN
            # a full run ends with the doc holding its ANCHOR_RUN-th entry
            hi = int(np.searchsorted(d, d[lo + ANCHOR_RUN - held - 1], side="right")) if full else len(h)
            parts.append((h[lo:hi].astype(np.uint64) << np.uint64(32)) | (d[lo:hi] + base).astype(np.uint64))
            held += hi - lo
            lo = hi
            if full:
                flush()
        base += k
    flush()
    return names


# The map's anchors (the full build's compiled JSONL path): each map shard winnows the normalized
# bytes it already holds and keeps the kept hashes (in doc order) and their count per doc; the
# reduce stages them as ``<key>.map-<shard>.{hashes,counts}.npy`` with ``<key>.map.json`` (the
# shards' doc counts) in the store's folder, and the text store pass writes the input's runs from
# them instead of reading and normalizing the input again. The store's cleanup deletes them.
MAP_HASHES, MAP_COUNTS = "anchors.hashes.npy", "anchors.counts.npy"


def map_anchor_batches(store: Path, key: str, n_docs: int
                       ) -> Iterable[tuple[np.ndarray, np.ndarray, int]] | None:
    """The staged map anchors of input ``key`` as ``_write_anchor_runs`` batches (one per map
    shard), or None when the map left none (another reader, an older build), another version's
    maps wrote them (``build_map.MAP_FORMAT``) or they do not count ``n_docs`` docs."""
    from tcqa_data.decontam.build_map import MAP_FORMAT

    listing = store / f"{key}.map.json"
    if not listing.is_file():
        return None
    staged = read_json(listing)
    if staged.get("map_format") != MAP_FORMAT:
        return None
    shard_docs = [int(n) for n in staged["shard_docs"]]
    names = [(store / f"{key}.map-{i:05d}.{MAP_HASHES}", store / f"{key}.map-{i:05d}.{MAP_COUNTS}")
             for i in range(len(shard_docs))]
    if sum(shard_docs) != n_docs or not all(h.is_file() and c.is_file() for h, c in names):
        return None

    def batches() -> Iterable[tuple[np.ndarray, np.ndarray, int]]:
        for (h, c), k in zip(names, shard_docs, strict=True):
            counts = load_npy(c, mmap_mode=None)
            if len(counts) != k:
                raise TcqaError(f"{c}: anchors of {len(counts)} docs, the index has {k} in that shard")
            yield load_npy(h, mmap_mode=None), np.repeat(np.arange(k, dtype=np.int64), counts), k

    return batches()


# A merged table's entries are (hash, global doc ordinal) as ``hash << 32 | doc``, as the
# per-input runs' are (hash, input-local doc): ordinals must stay below 2**32 to merge.
MERGED_MAX_DOCS = 1 << 32
_PLAN_CELL = 64  # planning cells average at most ANCHOR_RUN / _PLAN_CELL entries (fine cuts)


def anchor_sources(merged: dict[str, Any] | None, runs: Iterable[tuple[dict[str, Any], int]]
                   ) -> list[dict[str, Any]]:
    """The packed tables a merge reads (JSON, sent to its tasks): the parts of an existing merged
    table (ids already global) and per-input runs with their input's doc offset. ``runs``: (an
    input's meta record, its doc offset) per input with runs."""
    out = []
    if merged is not None:
        out += [{"name": p["name"], "entries": int(p["entries"]), "dir_bits": int(merged["dir_bits"]),
                 "id_bits": int(merged["id_bits"]), "cells": [int(c) for c in p["cells"]], "doc_offset": 0}
                for p in merged["parts"]]
    for rec, doc_offset in runs:
        out += [{"name": r["name"], "entries": int(r["entries"]), "dir_bits": int(r["dir_bits"]),
                 "id_bits": int(r["id_bits"]), "cells": [0, 1 << int(r["dir_bits"])],
                 "doc_offset": int(doc_offset)} for r in rec["anchors"]]
    return out


def plan_anchor_parts(store: Path, sources: Sequence[dict[str, Any]], n_docs: int) -> dict[str, Any]:
    """The merged table's layout: directory bits for all the sources' entries, id bits for
    ``n_docs`` ordinals, and its key ranges (directory cells ``[c0, c1)``), each holding about
    ``ANCHOR_RUN`` entries at most (a part is sorted in memory). Kept hashes are not uniform
    (winnowing keeps window minima: low hashes are ~3x denser), so the cuts follow the sources'
    directories, summed at ``p`` bits (a source with fewer directory bits spreads each cell's
    count evenly over the planning cells it covers)."""
    total = sum(s["entries"] for s in sources)
    dir_bits = packed.dir_bits_for(total)
    id_bits = packed.id_bits_for(max(0, n_docs - 1))
    packed.entry_width(dir_bits, id_bits)  # fits in 64 bits (raises otherwise)
    p = min(dir_bits, int(_PLAN_CELL * total // ANCHOR_RUN).bit_length())
    levels: dict[int, np.ndarray] = {}  # directory bits -> entry counts per cell at that level
    for s in sources:
        d, (a, b) = s["dir_bits"], s["cells"]
        if not s["entries"]:
            continue
        cells = load_npy(store / f"{s['name']}.cells.npy")
        if d <= p:
            level, start, counts = d, a, np.diff(np.asarray(cells, dtype=np.int64))
        else:  # every 2**(d - p)-th offset (a part's bounds need not be aligned to them)
            sh = d - p
            k0, k1 = a >> sh, ((b - 1) >> sh) + 1
            j = np.clip(np.arange(k0, k1 + 1, dtype=np.int64) << sh, a, b) - a
            level, start, counts = p, k0, np.diff(np.asarray(cells[j], dtype=np.int64))
        hist = levels.setdefault(level, np.zeros(1 << level, dtype=np.int64))
        hist[start:start + len(counts)] += counts
    per_cell = np.zeros(1 << p, dtype=np.float64)
    for level, hist in levels.items():
        per_cell += np.repeat(hist / float(1 << (p - level)), 1 << (p - level))
    cum = np.concatenate([[0.0], np.cumsum(per_cell)])
    cuts = [0]
    while cuts[-1] < 1 << p:
        c = cuts[-1]
        cuts.append(max(c + 1, int(np.searchsorted(cum, cum[c] + ANCHOR_RUN, side="right")) - 1))
    sh = dir_bits - p
    return {"entries": total, "dir_bits": dir_bits, "id_bits": id_bits,
            "ranges": [[a << sh, b << sh] for a, b in zip(cuts[:-1], cuts[1:], strict=True)]}


def anchor_overlaps(sources: Sequence[dict[str, Any]], dir_bits: int, ranges: Sequence[Sequence[int]]
                    ) -> list[list[dict[str, Any]]]:
    """Per key range (directory cells ``[c0, c1)`` of a table of ``dir_bits``), the sources
    (``anchor_sources`` records) holding entries in it: a key-range part is read only by the new
    parts whose range it meets (a merge of many parts then sends each task a few, not all)."""
    if not sources:
        return [[] for _ in ranges]
    lo = np.array([s["cells"][0] << (32 - s["dir_bits"]) for s in sources], dtype=np.int64)
    hi = np.array([s["cells"][1] << (32 - s["dir_bits"]) for s in sources], dtype=np.int64)
    nonempty = np.array([s["entries"] > 0 for s in sources])
    out = []
    for c0, c1 in ranges:
        h0, h1 = int(c0) << (32 - dir_bits), int(c1) << (32 - dir_bits)
        out.append([sources[i] for i in np.flatnonzero((lo < h1) & (hi > h0) & nonempty).tolist()])
    return out


def _read_cells_range(store: Path, s: dict[str, Any], j0: int, j1: int
                      ) -> tuple[np.ndarray, np.ndarray | None]:
    """The directory offsets of cells ``[j0, j1]`` of source ``s`` and the words holding their
    entries (None: no entries), the offsets made relative to the first word read. Read, not
    mapped: a merge task reads a small range of thousands of files, and a memory map with its
    header costs ~0.4 ms a file (most of a small range's cost); headers are parsed once a process."""
    a = s["cells"][0]
    cells = cached_row_reader(store / f"{s['name']}.cells.npy").read(j0 - a, j1 - a + 1).astype(np.int64)
    lo, hi = int(cells[0]), int(cells[-1])
    if lo == hi:
        return cells, None
    width = packed.entry_width(s["dir_bits"], s["id_bits"])
    e0 = lo - lo % (64 // math.gcd(64, width))  # an entry that starts a word: read from its word
    # to the word after the last entry's (``unpack`` reads a word past each entry's; a table
    # ends with a spare word)
    w0, w1 = e0 * width >> 6, ((hi * width - 1) >> 6) + 2
    words = cached_row_reader(store / f"{s['name']}.words.npy").read(w0, w1)
    return cells - e0, words


def write_anchor_part(root_dir: str, sources: Sequence[dict[str, Any]], dir_bits: int, id_bits: int,
                      cells: Sequence[int], name: str, ranged: Sequence[dict[str, Any]] = ()
                      ) -> dict[str, Any]:
    """One key range (directory cells ``cells`` of a table of ``dir_bits``) of a merged table:
    the range's entries of every source (``sources``, and ``ranged``: the key-range parts that
    meet the range, see ``anchor_overlaps``), their ids made global, sorted, packed. A task of
    ``build_text_store`` (parts are independent: a cluster writes them in parallel)."""
    store = Path(root_dir) / STORE_DIR
    c0, c1 = int(cells[0]), int(cells[1])
    h0, h1 = c0 << (32 - dir_bits), c1 << (32 - dir_bits)
    chunks: list[np.ndarray] = []
    for s in [*ranged, *sources]:
        d, (a, b) = s["dir_bits"], s["cells"]
        r = 32 - d
        # the source's own cells covering [h0, h1) (its directory has its own bits)
        j0, j1 = max(a, h0 >> r), min(b, ((h1 - 1) >> r) + 1)
        if j0 >= j1 or not s["entries"]:
            continue
        sc, words = _read_cells_range(store, s, j0, j1)
        if words is None:
            continue
        k, ids = packed.decode_range(sc, words, j0, j1, d, s["id_bits"])
        sel = (k >= np.uint64(h0)) & (k < np.uint64(h1))  # a coarser source cell spans more keys
        chunks.append((k[sel] << np.uint64(32)) | (ids[sel] + s["doc_offset"]).astype(np.uint64))
    entries = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.uint64)
    chunks.clear()
    # sources hold disjoint docs: sorting is all that is needed (unique is a check)
    entries = sorted_unique(entries, in_place=True)
    return _write_anchor_table(store, name, entries, id_bits, dir_bits, (c0, c1))


class _Table(NamedTuple):
    """A packed anchor table to look up: a per-input run (cells ``[0, 2**dir_bits)``) or a key-range
    part of the merged table (the directory slice ``[first_cell, end_cell)``)."""

    cells: np.ndarray
    words: np.ndarray
    dir_bits: int
    id_bits: int
    first_cell: int
    end_cell: int


def _table_files(root: Path, name: str) -> tuple[np.ndarray, np.ndarray]:
    return load_npy(root / STORE_DIR / f"{name}.cells.npy"), load_npy(root / STORE_DIR / f"{name}.words.npy")


class AnchorIndex:
    """Candidate corpus docs for queries, from the anchors of a text store."""

    def __init__(self, index_dir: str | os.PathLike) -> None:
        root = Path(index_dir)
        manifest = read_json(root / "manifest.json")
        meta = read_json(root / STORE_DIR / META)
        self.scheme = manifest["normalization"]
        self.seed = int(manifest["hash"]["seed"])
        self.num_docs = int(manifest["counts"]["docs"])
        # the tables to look up, each with the doc offset of its ids: the merged table's key-range
        # parts (global ids) when it holds only the manifest's inputs as they are now, then the
        # runs of inputs it does not hold (all of them in a store of version 2 or 3)
        self.runs: list[tuple[_Table | np.ndarray, int]] = []
        covered = merged_covers(meta, manifest)
        merged = meta.get("anchors")
        if covered:
            for part in merged["parts"]:
                cells, words = _table_files(root, part["name"])
                self.runs.append((_Table(cells, words, int(merged["dir_bits"]), int(merged["id_bits"]),
                                         int(part["cells"][0]), int(part["cells"][1])), 0))
        for e in manifest["inputs"]:
            if _id_key(_entry_id(e, manifest)) in covered:
                continue
            rec = meta["inputs"].get(_key(e), {})
            for run in rec.get("anchors", []):
                if isinstance(run, str):  # store version 2
                    arr: _Table | np.ndarray = load_npy(root / STORE_DIR / run)
                else:
                    cells, words = _table_files(root, run["name"])
                    arr = _Table(cells, words, int(run["dir_bits"]), int(run["id_bits"]), 0,
                                 1 << int(run["dir_bits"]))
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

        def lookup(arr: _Table | np.ndarray, live: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            """(k-gram, doc) of the table's entries for k-grams ``live``, k-grams ascending."""
            if isinstance(arr, _Table):
                lh = uh[live]
                if arr.end_cell - arr.first_cell != 1 << arr.dir_bits:
                    # a merged part: the live k-grams in its key range, as keys of its directory
                    # slice (the cell index relative to the slice's first cell)
                    rbits = 32 - arr.dir_bits
                    lo, hi = np.searchsorted(lh, np.array([arr.first_cell << rbits, arr.end_cell << rbits],
                                                          dtype=np.uint64))
                    live = live[lo:hi]
                    lh = lh[lo:hi] - np.uint64(arr.first_cell << rbits)
                # a k-gram in more than ANCHOR_MAX_DF docs is dropped anyway: read no more of it
                k, d = packed.lookup(arr.cells, arr.words, lh, arr.dir_bits, arr.id_bits, ANCHOR_MAX_DF + 1)
            else:
                lh = uh[live]
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
