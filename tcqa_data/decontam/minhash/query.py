"""Query side: ``MinHashIndex`` memory-maps a built ``minhash/`` folder."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tcqa_data.decontam.minhash.params import MinHashParams
from tcqa_data.decontam.minhash.sketch import EMPTY_HASH, band_keys, stored_band_keys, stored_signatures
from tcqa_data.errors import TcqaError
from tcqa_data.io_utils import read_json

_U32 = np.uint32


# ---------------------------------------------------------------------------------------------
# Query


class MinHashIndex:
    """Memory-mapped MinHash index: ``open``, ``query``, ``window_docs``."""

    def __init__(self, folder: Path, meta: dict[str, Any]) -> None:
        self.folder = folder
        self.meta = meta
        self.params = MinHashParams.from_dict(meta["params"])
        self.n_windows = int(meta["n_windows"])

        def load(name: str) -> np.ndarray:
            try:
                return np.load(folder / f"{name}.npy", mmap_mode="r", allow_pickle=False)
            except (OSError, ValueError) as e:
                raise TcqaError(f"MinHash index {folder} is damaged ({name}.npy: {e}); rebuild it") from None

        self.signatures = load("signatures")
        self.window_doc = load("window_doc")
        self.window_shingles = load("window_shingles")
        self.band_keys = load("band_keys")
        self.band_windows = load("band_windows")
        p = self.params
        expected = {"signatures": (self.n_windows, p.num_perm), "window_doc": (self.n_windows,),
                    "window_shingles": (self.n_windows,), "band_keys": (p.bands, self.n_windows),
                    "band_windows": (p.bands, self.n_windows)}
        for name, shape in expected.items():
            if getattr(self, name).shape != shape:
                raise TcqaError(f"MinHash index {folder} is damaged: {name}.npy has shape "
                                f"{getattr(self, name).shape}, expected {shape}; rebuild it")

    @classmethod
    def open(cls, index_dir: str | os.PathLike) -> MinHashIndex:
        """Open ``INDEX_DIR`` (or its ``minhash/`` folder). TcqaError if missing or incomplete."""
        root = Path(index_dir)
        for folder in (root / "minhash", root):
            if (folder / "params.json").exists():
                meta = read_json(folder / "params.json")
                if meta.get("kind") == "tcqa-minhash-index":
                    return cls(folder, meta)
        raise TcqaError(f"no complete MinHash index in {root} (missing minhash/params.json); "
                        f"build one with `tcqa-data index-corpus`")

    def query(self, sigs: np.ndarray, max_candidates_per_band: int = 256) -> tuple[np.ndarray, np.ndarray]:
        """Best verified match per query signature: ``(best_sim float64[q], best_window int64[q])``.

        Candidates are windows sharing at least one band key; each is verified by the fraction of
        equal signature values (the Jaccard estimate). The best is returned even when below the
        threshold (ties: lowest window id); -1 and 0.0 when there is no candidate or the query
        has no shingles. At most ``max_candidates_per_band`` windows are taken per band key (the
        lowest ids): a key shared by more windows marks boilerplate repeated across the corpus.
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
                cnt = np.minimum(hi - lo, max_candidates_per_band)
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
            code = np.unique(np.concatenate(pair_q) * self.n_windows + np.concatenate(pair_w))
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
            out[ok] = self.window_doc[ids[ok]]
        return out
