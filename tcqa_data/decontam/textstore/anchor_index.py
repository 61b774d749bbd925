"""``AnchorIndex``: candidate corpus docs for queries, looked up in a text store's anchor tables
(see ``anchors``' docstring); the query side, apart from the build's writing and merging.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from tcqa_data.decontam.core import packed
from tcqa_data.decontam.core.arrays import sorted_unique
from tcqa_data.decontam.index_files import IndexChecks, index_checks, open_manifest
from tcqa_data.decontam.textstore.anchors import (
    _LOW32,
    ANCHOR_K,
    ANCHOR_MAX_DF,
    ANCHOR_MIN_SHARED,
    winnow,
)
from tcqa_data.decontam.textstore.store import META, STORE_DIR, _entry_id, _id_key, _key, merged_covers
from tcqa_data.io_utils import load_npy, read_json

_ANCHOR_THREADS = 2  # anchor runs looked up at once (query side)


class _Table(NamedTuple):
    """A packed anchor table to look up: a per-input run (cells ``[0, 2**dir_bits)``) or a key-range
    part of the merged table (the directory slice ``[first_cell, end_cell)``)."""

    cells: np.ndarray
    words: np.ndarray
    dir_bits: int
    id_bits: int
    first_cell: int
    end_cell: int


def _table_files(root: Path, name: str, checks: IndexChecks | None) -> tuple[np.ndarray, np.ndarray]:
    paths = (root / STORE_DIR / f"{name}.cells.npy", root / STORE_DIR / f"{name}.words.npy")
    if checks is not None:  # the index's block checksums: the tables whole
        for p in paths:
            checks.check_rows(p)
    return load_npy(paths[0]), load_npy(paths[1])


class AnchorIndex:
    """Candidate corpus docs for queries, from the anchors of a text store."""

    def __init__(self, index_dir: str | os.PathLike) -> None:
        root = Path(index_dir)
        manifest = open_manifest(root)
        checks = index_checks(root, manifest)
        meta = read_json(root / STORE_DIR / META)
        self.scheme = manifest["normalization"]
        self.seed = int(manifest["hash"]["seed"])
        self.num_docs = int(manifest["counts"]["docs"])
        # the tables to look up, each with the doc offset of its ids: the merged table's key-range
        # parts (global ids) when it holds only the manifest's inputs as they are now, then the
        # runs of inputs it does not hold (all of them in a store of version 2 or 3)
        self.runs: list[tuple[_Table | np.ndarray, int]] = []
        covered = merged_covers(meta, manifest)
        # inputs whose docs have entries in none of the tables (a stale merged table, a store
        # without anchors): a lookup cannot find their docs (``missing_inputs``)
        self.missing_inputs: list[str] = []
        merged = meta.get("anchors")
        if covered:
            for part in merged["parts"]:
                cells, words = _table_files(root, part["name"], checks)
                self.runs.append((_Table(cells, words, int(merged["dir_bits"]), int(merged["id_bits"]),
                                         int(part["cells"][0]), int(part["cells"][1])), 0))
        for e in manifest["inputs"]:
            if _id_key(_entry_id(e, manifest)) in covered:
                continue
            rec = meta["inputs"].get(_key(e), {})
            no_entries = rec.get("anchor_entries") == 0 and rec.get("id") == _entry_id(e, manifest)
            if not rec.get("anchors") and not no_entries:
                self.missing_inputs.append(str(e["path"]))
            for run in rec.get("anchors", []):
                if isinstance(run, str):  # store version 2
                    if checks is not None:
                        checks.check_rows(root / STORE_DIR / run)
                    arr: _Table | np.ndarray = load_npy(root / STORE_DIR / run)
                else:
                    cells, words = _table_files(root, run["name"], checks)
                    arr = _Table(cells, words, int(run["dir_bits"]), int(run["id_bits"]), 0,
                                 1 << int(run["dir_bits"]))
                self.runs.append((arr, int(e["doc_offset"])))

    @property
    def available(self) -> bool:
        return bool(self.runs)

    def holding_candidates(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Per text of at least ``WHOLE_MIN_WORDS`` words: every doc that can hold its words as one
        run (sorted ordinals; a superset, to be verified against the docs' text). A doc holding the
        run kept the smallest k-gram of each window inside it, so it has every k-gram the text's own
        winnowing keeps: the candidates are the docs having all of them (no ``ANCHOR_MAX_DF`` cap:
        common k-grams are read whole). Complete only when ``missing_inputs`` is empty."""
        kept, owner = winnow(list(texts), self.scheme, self.seed)
        pairs = sorted_unique((kept.astype(np.uint64) << np.uint64(32)) | owner.astype(np.uint64))
        uh, inv = np.unique(pairs >> np.uint64(32), return_inverse=True)
        q_owner = (pairs & _LOW32).astype(np.int64)
        ks, ds = [], []
        for arr, doc_offset in self.runs:
            k, d = _table_lookup(arr, uh, np.arange(len(uh)), None)
            ks.append(k)
            ds.append(d + doc_offset)
        hk = np.concatenate(ks) if ks else np.empty(0, np.int64)
        hd = np.concatenate(ds) if ds else np.empty(0, np.int64)
        order = np.lexsort((hd, hk))
        hk, hd = hk[order], hd[order]
        start = np.searchsorted(hk, np.arange(len(uh) + 1))
        out: list[np.ndarray | None] = [None] * len(texts)
        for row, q in zip(inv.ravel().tolist(), q_owner.tolist(), strict=True):
            docs = hd[start[row]:start[row + 1]]
            got = out[q]
            out[q] = docs if got is None else np.intersect1d(got, docs, assume_unique=True)
        return [np.empty(0, np.int64) if d is None else np.unique(d) for d in out]

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
        if not self.runs or not texts:
            return [[] for _ in texts], [[] for _ in texts]
        # the distinct k-gram hashes of all queries, and the docs of each in every run
        uh, inv, q_owner = query_anchors(texts, self.scheme, self.seed)
        df = np.zeros(len(uh), dtype=np.int64)
        hits: list[tuple[np.ndarray, np.ndarray]] = []
        alive = np.ones(len(uh), dtype=bool)  # k-grams in at most ANCHOR_MAX_DF docs so far

        def lookup(arr: _Table | np.ndarray, live: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            # a k-gram in more than ANCHOR_MAX_DF docs is dropped anyway: read no more of it
            return _table_lookup(arr, uh, live, ANCHOR_MAX_DF + 1)

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
        hk = np.concatenate([k for k, _ in hits]) if hits else np.empty(0, np.int64)
        hd = np.concatenate([d for _, d in hits]) if hits else np.empty(0, np.int64)
        return rank_candidates(hk, hd, df, inv, q_owner, self.num_docs, len(texts), top, min_shared, weak_top)


def _table_lookup(arr: _Table | np.ndarray, uh: np.ndarray, live: np.ndarray, cap: int | None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(row of ``uh``, doc) of a table's entries for the k-grams ``uh[live]`` (``uh`` ascending),
    k-grams ascending; at most ``cap`` docs (the smallest) per k-gram when given. Docs are the
    table's own ids (input-local in a per-input run)."""
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
        k, d = packed.lookup(arr.cells, arr.words, lh, arr.dir_bits, arr.id_bits, cap)
    else:  # store version 2: one sorted uint64 ``hash << 32 | doc`` per entry
        lh = uh[live]
        lo = np.searchsorted(arr, lh << np.uint64(32), side="left")
        hi = np.searchsorted(arr, (lh << np.uint64(32)) | _LOW32, side="right")
        n = hi - lo
        if cap is not None:
            n = np.minimum(n, cap)
        k = np.repeat(np.arange(len(lh)), n)
        d = (np.asarray(arr[np.repeat(lo, n) + np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n)])
             & _LOW32).astype(np.int64)
    return live[k], d


def query_anchors(texts: Sequence[str], scheme: str, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The queries' k-grams as anchors are looked up: the distinct upper-32-bit hashes (``uh``,
    ascending) and, per distinct (k-gram, query) pair, its row in ``uh`` (``inv``) and its query."""
    from tcqa_data.decontam.core.hashing import batch_ngram_hashes

    flat, owner = batch_ngram_hashes(list(texts), [ANCHOR_K], scheme, seed)[ANCHOR_K]
    # distinct (k-gram, query) pairs
    keys = sorted_unique((np.asarray(flat, dtype=np.uint64) >> np.uint64(32) << np.uint64(32))
                         | np.asarray(owner, dtype=np.uint64), in_place=True)
    qh = keys >> np.uint64(32) << np.uint64(32)
    q_owner = (keys & _LOW32).astype(np.int64)
    uh, inv = np.unique(qh >> np.uint64(32), return_inverse=True)
    return uh, inv, q_owner


def rank_candidates(hk: np.ndarray, hd: np.ndarray, df: np.ndarray, inv: np.ndarray, q_owner: np.ndarray,
                    num_docs: int, ntexts: int, top: int, min_shared: int, weak_top: int
                    ) -> tuple[list[list[int]], list[list[int]]]:
    """``candidate_tiers`` from the anchor hits, wherever they were found (the text store's tables
    or a corpus stream): ``hk``/``hd`` the (k-gram row of ``uh``, doc) hits, ``df`` each k-gram's
    doc frequency, ``inv``/``q_owner`` as ``query_anchors`` returns them."""
    out: list[list[int]] = [[] for _ in range(ntexts)]
    weak: list[list[int]] = [[] for _ in range(ntexts)]
    use = (df > 0) & (df <= ANCHOR_MAX_DF)
    idf = np.log1p(num_docs / np.maximum(df, 1))
    # per hash, its (hash, doc) hits; then every query holding that hash gets them
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
    pair = owners * (num_docs + 1) + docs
    uniq, inv = np.unique(pair, return_inverse=True)
    score = np.bincount(inv, weights=w)
    shared = np.bincount(inv)
    u_owner, u_doc = uniq // (num_docs + 1), uniq % (num_docs + 1)
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
