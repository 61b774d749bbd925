"""Alignment anchors: winnowed k-grams of every corpus doc, the candidates for alignment.

**Anchors** (``<key>.anchors-<run>.cells.npy`` and ``.words.npy``): candidate docs for alignment
when no n-gram of the index survives the edits. Winnowing (Schleimer et al. 2003) over the hashes
of word ``ANCHOR_K``-grams: of every ``ANCHOR_W`` consecutive k-grams of a doc the smallest hash
is kept, so any run of at least ``ANCHOR_W + ANCHOR_K - 1`` (6) words shared by a query and a doc
shares a kept k-gram, at about half an entry per corpus word. Entries are ``(hash >> 32, doc)``
(input-local doc number), sorted, unique, stored as a packed table (``decontam/core/packed.py``: a
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

This module writes the per-input runs; ``anchor_merge`` merges them into one table and
``anchor_index`` (``AnchorIndex``) looks queries up in the tables.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tcqa_data.decontam.core import packed
from tcqa_data.decontam.core.arrays import sorted_unique
from tcqa_data.decontam.core.map_files import MAP_COUNTS, MAP_FORMAT, MAP_HASHES, staged_anchor_file
from tcqa_data.errors import TcqaError
from tcqa_data.io_utils import load_npy, read_json, write_npy_atomic

ANCHOR_K = 4  # words per hashed k-gram
ANCHOR_W = 3  # winnowing window (k-grams): shared runs of >= ANCHOR_W + ANCHOR_K - 1 words are found
# the shortest word run every doc holding it is found for (``AnchorIndex.holding_candidates``)
WHOLE_MIN_WORDS = ANCHOR_W + ANCHOR_K - 1
ANCHOR_RUN = 1 << 24  # entries per sorted run (128 MiB while held, as uint64)
ANCHOR_MAX_DF = 64  # a k-gram in more docs is no evidence of a copy
ANCHOR_MIN_SHARED = 2  # kept k-grams a doc must share with a query to be aligned (cost)
_ANCHOR_BATCH_CHARS = 4_000_000
_LOW32 = np.uint64(0xFFFFFFFF)
_TABLE_BLOCK = 1 << 20  # entries per TableWriter.add (the file does not depend on it)


def winnow(texts: Sequence[str], scheme: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Kept k-gram hashes (upper 32 bits) and the index in ``texts`` of their doc (see module doc)."""
    from tcqa_data.decontam.core.hashing import batch_ngram_hashes

    flat, owner = batch_ngram_hashes(list(texts), [ANCHOR_K], scheme, seed)[ANCHOR_K]
    return winnow_hashes(flat, owner)


def winnow_hashes(flat: np.ndarray, owner: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``winnow`` of k-gram hashes already computed: ``flat`` (uint64) and their doc ``owner``
    (int64, non-decreasing, as ``hashing`` returns them); the compiled kernel when enabled."""
    from tcqa_data.decontam.core import kernel

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
    from tcqa_data.decontam.core.hashing import hash_normalized

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


def map_anchor_batches(store: Path, key: str, n_docs: int
                       ) -> Iterable[tuple[np.ndarray, np.ndarray, int]] | None:
    """The staged map anchors of input ``key`` as ``_write_anchor_runs`` batches (one per map
    shard), or None when the map left none (another reader, an older build), another version's
    maps wrote them (``core.map_files.MAP_FORMAT``) or they do not count ``n_docs`` docs."""
    listing = store / f"{key}.map.json"
    if not listing.is_file():
        return None
    staged = read_json(listing)
    if staged.get("map_format") != MAP_FORMAT:
        return None
    shard_docs = [int(n) for n in staged["shard_docs"]]
    names = [(store / staged_anchor_file(key, i, MAP_HASHES), store / staged_anchor_file(key, i, MAP_COUNTS))
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
