"""Query side: ``MinHashIndex`` memory-maps a built ``minhash/`` folder."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from tcqa_data.decontam.core import packed
from tcqa_data.decontam.core.arrays import sorted_unique
from tcqa_data.decontam.minhash.feed import window_signatures
from tcqa_data.decontam.minhash.params import INDEX_STORAGE_FORMAT, MinHashParams, band_entries_name
from tcqa_data.decontam.minhash.sketch import (
    EMPTY_HASH,
    band_keys,
    stored_band_keys,
    stored_signatures,
)
from tcqa_data.errors import TcqaError
from tcqa_data.io_utils import load_npy, read_json

_U32 = np.uint32
_VERIFY_DOCS = 256  # candidate docs signed (or read) at a time
_SIGN_THREADS = 2  # text-verified candidate batches signed at once (the machine's 2 cores)


# ---------------------------------------------------------------------------------------------
# Query


class MinHashIndex:
    """Memory-mapped MinHash index: ``open``, ``query``, ``window_docs``.

    Storage format 3 (``band_cells``/``band_entries_NNN``: per band, 32-bit band keys -> docs, see
    ``decontam/core/packed.py``; ``doc_windows``: each doc's first window id; ``signatures`` only
    with ``verify="signatures"``). Formats 1 and 2 (per-window signatures and band tables of
    window ids) are still queried."""

    def __init__(self, folder: Path, meta: dict[str, Any],
                 doc_texts: Callable[[Sequence[int]], list[str]] | None = None, checks: Any = None) -> None:
        self.folder = folder
        self.meta = meta
        self.params = MinHashParams.from_dict(meta["params"])
        self.n_windows = int(meta["n_windows"])
        self.storage = meta.get("storage") or {}
        self.storage_format = int(self.storage.get("storage_format", 1))
        self._doc_texts = doc_texts
        self._store: Any = None  # the index's own text store, once opened (not with a doc_texts callable)
        self._paged_keys: np.ndarray | None = None  # the band keys of the last page-in (prefetch)

        def load(name: str) -> np.ndarray:
            if checks is not None:  # the index's block checksums (index_files.IndexChecks): the file whole
                checks.check_rows(folder / f"{name}.npy")
            try:
                return load_npy(folder / f"{name}.npy")
            except (OSError, ValueError) as e:
                raise TcqaError(f"MinHash index {folder} is damaged ({name}.npy: {e}); rebuild it") from None

        p = self.params
        if self.storage_format >= INDEX_STORAGE_FORMAT:
            st = self.storage
            self.dir_bits, self.id_bits = int(st["dir_bits"]), int(st["id_bits"])
            self.doc_windows = load("doc_windows")
            self.band_cells = load("band_cells")
            width = packed.entry_width(self.dir_bits, self.id_bits)
            expected = {"doc_windows": (int(st["doc_span"]) + 1,),
                        "band_cells": (p.bands, (1 << self.dir_bits) + 1)}
            if self.band_cells.shape == expected["band_cells"]:
                # per band: its distinct (key, doc) pairs, the last directory offset
                self.band_entries = [load(band_entries_name(b)) for b in range(p.bands)]
                for b, arr in enumerate(self.band_entries):
                    want = (packed.n_words(int(self.band_cells[b, -1]), width),)
                    if arr.shape != want:
                        raise TcqaError(f"MinHash index {folder} is damaged: {band_entries_name(b)}.npy has "
                                        f"shape {arr.shape}, expected {want}; rebuild it")
            if p.verify == "signatures":
                self.signatures = load("signatures")
                expected["signatures"] = (self.n_windows, p.num_perm)
        else:
            self.signatures = load("signatures")
            self.window_doc = load("window_doc")
            self.band_keys = load("band_keys")
            self.band_windows = load("band_windows")
            expected = {"signatures": (self.n_windows, p.num_perm), "window_doc": (self.n_windows,),
                        "band_keys": (p.bands, self.n_windows), "band_windows": (p.bands, self.n_windows)}
        for name, shape in expected.items():
            if getattr(self, name).shape != shape:
                raise TcqaError(f"MinHash index {folder} is damaged: {name}.npy has shape "
                                f"{getattr(self, name).shape}, expected {shape}; rebuild it")

    @classmethod
    def open(cls, index_dir: str | os.PathLike,
             doc_texts: Callable[[Sequence[int]], list[str]] | None = None) -> MinHashIndex:
        """Open ``INDEX_DIR`` (or its ``minhash/`` folder). TcqaError if missing or incomplete.

        ``doc_texts`` (doc ordinals -> texts) verifies candidates of a ``verify="text"`` index;
        by default the index's text store (``INDEX_DIR/textstore``) is read."""
        root = Path(index_dir)
        checks = None
        if (root / "manifest.json").exists():  # a whole index: checked before its files are read
            from tcqa_data.decontam.index_files import index_checks, open_manifest

            checks = index_checks(root, open_manifest(root))
        for folder in (root / "minhash", root):
            if (folder / "params.json").exists():
                meta = read_json(folder / "params.json")
                if meta.get("kind") == "tcqa-minhash-index":
                    return cls(folder, meta, doc_texts, checks)
        raise TcqaError(f"no complete MinHash index in {root} (missing minhash/params.json); "
                        f"build one with `tcqa-data index-corpus`")

    def _open_store(self) -> Any:
        from tcqa_data.decontam.textstore.store import TextStore, has_text_store

        root = self.folder.parent
        if not has_text_store(root):
            raise TcqaError(f"MinHash index {self.folder} verifies candidates against the corpus text "
                            f"(verify='text') but {root} has no text store: rerun index-corpus on the "
                            "same inputs to build it")
        return TextStore.open(root)

    def _use_own_store(self) -> None:
        """Verify against the index's own text store, opened once."""
        if self._store is None:
            self._store = self._open_store()
            self._doc_texts = self._store.texts

    def _texts(self, docs: Sequence[int]) -> list[str]:
        if self._doc_texts is None:
            self._use_own_store()
        return self._doc_texts(docs)

    def doc_signatures(self, docs: Sequence[int]) -> list[np.ndarray]:
        """Per doc, the signatures of its windows (window id order): the stored 16-bit values, or
        (``verify="text"``) full 32-bit values recomputed from the doc's text."""
        return self._sign_docs(docs, self._texts)

    def _sign_docs(self, docs: Sequence[int], texts_of: Callable[[Sequence[int]], list[str]]
                   ) -> list[np.ndarray]:
        docs = [int(d) for d in docs]
        first = np.asarray(self.doc_windows[docs], dtype=np.int64)
        last = np.asarray(self.doc_windows[np.asarray(docs, dtype=np.int64) + 1], dtype=np.int64)
        if self.params.verify == "signatures":
            return [np.asarray(self.signatures[a:b])
                    for a, b in zip(first.tolist(), last.tolist(), strict=True)]
        # the whole batch at once, as the build's map cuts and signs windows
        win_doc, sigs, counts = window_signatures(texts_of(docs), self.params)
        keep = counts > 0  # as the map: windows without tokens were not indexed
        sigs, own = sigs[keep], np.asarray(win_doc, dtype=np.int64)[keep]
        bounds = np.searchsorted(own, np.arange(len(docs) + 1))
        out = [sigs[bounds[j]:bounds[j + 1]] for j in range(len(docs))]
        for j, d in enumerate(docs):
            if len(out[j]) != last[j] - first[j]:
                raise TcqaError(f"doc {d}: its text gives {len(out[j])} MinHash windows, the index has "
                                f"{last[j] - first[j]}; the corpus (or the window code) changed after "
                                "indexing: rebuild the index")
        return out

    def query(self, sigs: np.ndarray, max_candidates_per_band: int = 256) -> tuple[np.ndarray, np.ndarray]:
        """Best verified match per query signature: ``(best_sim float64[q], best_window int64[q])``.

        Candidates are windows (format 3: every window of the docs) sharing at least one band key;
        each is verified by the fraction of equal signature values (the Jaccard estimate). The
        best is returned even when below the threshold (ties: lowest window id); -1 and 0.0 when
        there is no candidate or the query has no shingles. At most ``max_candidates_per_band``
        entries are taken per band key (the lowest ids): a key shared by more windows marks
        boilerplate repeated across the corpus.
        """
        sigs = np.asarray(sigs)
        if sigs.ndim == 1:
            sigs = sigs[None, :]
        p = self.params
        if sigs.ndim != 2 or sigs.shape[1] != p.num_perm:
            raise ValueError(f"signatures must have shape [q, {p.num_perm}], got {sigs.shape}")
        if sigs.dtype != _U32:
            if sigs.size and (sigs.min() < 0 or sigs.max() > 0xFFFFFFFF):
                raise ValueError("signature values must fit in uint32 (affine32 scheme)")
            sigs = sigs.astype(_U32)
        q = len(sigs)
        best_sim = np.zeros(q, dtype=np.float64)
        best_win = np.full(q, -1, dtype=np.int64)
        if q == 0 or self.n_windows == 0:
            return best_sim, best_win
        if self.storage_format >= INDEX_STORAGE_FORMAT:
            return self._query_docs(sigs, max_candidates_per_band, best_sim, best_win)
        return self._query_windows(sigs, max_candidates_per_band, best_sim, best_win)

    def _query_docs(self, sigs: np.ndarray, cap: int, best_sim: np.ndarray, best_win: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
        """Format 3: candidate docs from the band tables, then every window of each candidate doc
        compared (docs in ordinal order, a batch at a time: each doc's windows are signed once)."""
        p = self.params
        has_shingles = ~(sigs == EMPTY_HASH).all(axis=1)
        keys = stored_band_keys(band_keys(sigs, p))
        cmp_sigs = stored_signatures(sigs) if p.verify == "signatures" else sigs
        pair_q, pair_d = [], []
        live = np.flatnonzero(has_shingles)
        if self._paged_keys is None or not np.array_equal(self._paged_keys, keys[live]):
            self._page_in(keys[live])  # else a prefetch of these signatures requested the pages
        for band in range(p.bands):  # type: ignore[arg-type]
            owner, docs = packed.lookup(self.band_cells[band], self.band_entries[band], keys[live, band],
                                        self.dir_bits, self.id_bits, cap)
            pair_q.append(live[owner])
            pair_d.append(docs)
        if not pair_q or not sum(map(len, pair_q)):
            return best_sim, best_win
        code = sorted_unique(np.concatenate(pair_d) * len(sigs) + np.concatenate(pair_q), in_place=True)
        ds, qs = np.divmod(code, len(sigs))  # sorted by doc, then query
        bounds = np.flatnonzero(np.r_[True, ds[1:] != ds[:-1], True])  # each candidate doc's pairs
        cand_docs = ds[bounds[:-1]]
        # equal values counted in the narrowest type that holds num_perm (a bool sum in int64 costs
        # about twice as much); the same counts, so the same similarities
        count_dtype = np.uint8 if p.num_perm < 256 else np.int64
        starts = range(0, len(cand_docs), _VERIFY_DOCS)
        for b0, doc_sigs in zip(starts, self._signed_batches([cand_docs[b:b + _VERIFY_DOCS] for b in starts]),
                                strict=True):
            batch = cand_docs[b0:b0 + _VERIFY_DOCS]
            first = np.asarray(self.doc_windows[batch], dtype=np.int64)
            for j in range(len(batch)):
                a, b = int(bounds[b0 + j]), int(bounds[b0 + j + 1])
                ws = doc_sigs[j]
                if not len(ws):
                    continue
                for c0 in range(a, b, 256):  # bounded [queries, windows, num_perm] comparisons
                    qq = qs[c0:min(c0 + 256, b)]
                    eq = ws[None, :, :] == cmp_sigs[qq][:, None, :]
                    sims = np.add.reduce(eq, axis=2, dtype=count_dtype) / p.num_perm
                    k = sims.argmax(axis=1)  # first maximum: the lowest window id
                    s = sims[np.arange(len(qq)), k]
                    # docs ascend, so on equal similarity the window found first (lower id) stays
                    upd = (s > best_sim[qq]) | (best_win[qq] < 0)
                    best_sim[qq[upd]] = s[upd]
                    best_win[qq[upd]] = first[j] + k[upd]
        return best_sim, best_win

    def _page_in(self, keys: np.ndarray) -> None:
        """Cold page cache: request the band-table pages that lookups of these stored band keys
        ``[q, bands]`` read, of all bands at once (``decontam/core/pagein.py``)."""
        bands = range(self.params.bands)  # type: ignore[arg-type]
        packed.page_in_lookups([(self.band_cells[b], self.band_entries[b]) for b in bands],
                               [keys[:, b] for b in bands], self.dir_bits, self.id_bits)
        self._paged_keys = keys

    def prefetch(self, sigs: np.ndarray) -> None:
        """Request the pages ``query(sigs)`` will read from the band tables (storage format 3; other
        formats: nothing), so a caller can have them read while it does other work."""
        sigs = np.asarray(sigs, dtype=_U32)
        if self.storage_format < INDEX_STORAGE_FORMAT or sigs.ndim != 2 or not len(sigs):
            return
        live = ~(sigs == EMPTY_HASH).all(axis=1)
        self._page_in(stored_band_keys(band_keys(sigs[live], self.params)))

    def _signed_batches(self, batches: list[np.ndarray]) -> Iterator[list[np.ndarray]]:
        """``doc_signatures`` of each batch, in order. Verified against the index's own text store:
        every batch's text reads are queued at once (they overlap the signing), and
        :data:`_SIGN_THREADS` threads sign batches ahead, each with its own store (the window and
        signature kernels release the GIL)."""
        custom = self._doc_texts is not None and self._store is None  # a caller's doc_texts: as given
        if self.params.verify != "text" or len(batches) < 2 or custom:
            for b in batches:
                yield self.doc_signatures(b)
            return
        self._use_own_store()
        self._store.prefetch(np.concatenate(batches))
        local = threading.local()

        def sign(batch: np.ndarray) -> list[np.ndarray]:
            if not hasattr(local, "store"):
                local.store = self._open_store()
            return self._sign_docs(batch, local.store.texts)

        with ThreadPoolExecutor(_SIGN_THREADS, thread_name_prefix="tcqa-verify") as pool:
            ahead = [pool.submit(sign, b) for b in batches[:_SIGN_THREADS + 1]]
            for i in range(len(batches)):
                got = ahead[i].result()
                if i + _SIGN_THREADS + 1 < len(batches):
                    ahead.append(pool.submit(sign, batches[i + _SIGN_THREADS + 1]))
                ahead[i] = None  # type: ignore[call-overload]
                yield got

    def _query_windows(self, sigs: np.ndarray, cap: int, best_sim: np.ndarray, best_win: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray]:
        """Formats 1 and 2: band tables of window ids, each candidate window verified."""
        p = self.params
        q = len(sigs)
        has_shingles = ~(sigs == EMPTY_HASH).all(axis=1)
        keys = band_keys(sigs, p)
        # storage format 2 keeps 32-bit band keys and 16-bit signature values (format 1: full)
        if self.band_keys.dtype == _U32:
            keys = stored_band_keys(keys)
        if self.signatures.dtype == np.uint16:
            sigs = stored_signatures(sigs)
        for c0 in range(0, q, 1024):  # bounded candidate lists even when keys are very common
            c1 = min(c0 + 1024, q)
            pair_q, pair_w = [], []
            for band in range(p.bands):  # type: ignore[arg-type]
                row = self.band_keys[band]
                lo = np.searchsorted(row, keys[c0:c1, band], side="left")
                hi = np.searchsorted(row, keys[c0:c1, band], side="right")
                cnt = np.minimum(hi - lo, cap)
                cnt[~has_shingles[c0:c1]] = 0
                total = int(cnt.sum())
                if total == 0:
                    continue
                first = np.cumsum(cnt) - cnt
                pos = np.repeat(lo - first, cnt) + np.arange(total)
                pair_q.append(np.repeat(np.arange(c0, c1), cnt))
                pair_w.append(np.asarray(self.band_windows[band][pos], dtype=np.int64))
            if not pair_q:
                continue
            code = sorted_unique(np.concatenate(pair_q) * self.n_windows + np.concatenate(pair_w),
                                 in_place=True)
            qs, ws = np.divmod(code, self.n_windows)
            sims = np.empty(len(code), dtype=np.float64)
            for v0 in range(0, len(code), 8192):
                v1 = min(v0 + 8192, len(code))
                cand = self.signatures[ws[v0:v1]]
                sims[v0:v1] = (cand == sigs[qs[v0:v1]]).sum(axis=1) / p.num_perm
            order = np.lexsort((ws, -sims, qs))  # per query: highest similarity, then lowest id
            qs, ws, sims = qs[order], ws[order], sims[order]
            first = np.r_[True, qs[1:] != qs[:-1]]
            best_sim[qs[first]] = sims[first]
            best_win[qs[first]] = ws[first]
        return best_sim, best_win

    def window_docs(self, window_ids: np.ndarray | Sequence[int]) -> np.ndarray:
        """Doc ordinal of each window id (-1 stays -1)."""
        ids = np.asarray(window_ids, dtype=np.int64)
        out = np.full(ids.shape, -1, dtype=np.int64)
        ok = ids >= 0
        if ok.any():
            if ids[ok].max() >= self.n_windows:
                raise IndexError(f"window id out of range (index has {self.n_windows} windows)")
            if self.storage_format >= INDEX_STORAGE_FORMAT:
                out[ok] = np.searchsorted(self.doc_windows, ids[ok], side="right") - 1
            else:
                out[ok] = self.window_doc[ids[ok]]
        return out
