"""Alignment anchors: winnowed k-grams of every corpus doc, the candidates for alignment.

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

import os
from collections import deque
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tcqa_data.decontam import packed
from tcqa_data.decontam.arrays import sorted_unique
from tcqa_data.decontam.textstore.store import META, STORE_DIR, _key
from tcqa_data.io_utils import load_npy, read_json, write_npy_atomic

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
    from tcqa_data.decontam.readers.inputs import CorpusInput
    from tcqa_data.decontam.readers.jsonl_batches import iter_normalized_batches

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
                    arr = load_npy(root / STORE_DIR / run)
                else:
                    arr = tuple(load_npy(root / STORE_DIR / f"{run['name']}.{part}.npy")
                                for part in ("cells", "words")) \
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
