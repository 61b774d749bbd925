"""Map: window, sign and band one shard of documents into sorted runs."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from tcqa_data import FORMAT_VERSION
from tcqa_data.decontam.core.arrays import narrow_ordinals
from tcqa_data.decontam.minhash.params import MinHashParams
from tcqa_data.decontam.minhash.sketch import (
    STORAGE_FORMAT,
    band_keys_normalized,
    band_pairs,
    sign_normalized,
    stored_band_keys_t,
    stored_signatures,
)
from tcqa_data.io_utils import write_json_atomic, write_npy_atomic

PART_WINDOWS = 65536  # windows per map-side run (16 MiB of signatures at 128 permutations)
_BATCH_CHARS = 1 << 20  # characters of documents per feed.window_signatures() call

_U32 = np.uint32


# ---------------------------------------------------------------------------------------------
# Build: map


def _shard_name(shard_id: int | str) -> str:
    return f"minhash-{shard_id:06d}" if isinstance(shard_id, int) else f"minhash-{shard_id}"


def _write_run(prefix: Path, sigs: np.ndarray, docs: np.ndarray, params: MinHashParams) -> None:
    """One run of windows with signatures ``sigs`` and docs ``docs`` (``_write_keyed_run``)."""
    stored = stored_signatures(sigs) if params.verify == "signatures" else None
    _write_keyed_run(prefix, stored_band_keys_t(sigs, params), docs, stored)


def _write_keyed_run(prefix: Path, keys: np.ndarray, docs: np.ndarray, stored_sigs: np.ndarray | None
                     ) -> None:
    """One run: each window's doc and, per band, ``key << 32 | doc - docs[0]`` sorted (the
    (key, doc) pairs the merge reads; ``band_pairs`` of the ``[bands, m]`` stored band keys);
    stored signatures only when the index keeps them (``verify="signatures"``): a text-verified
    index re-signs candidates from the text, and at 256 B per window they were most of the
    map's disk."""
    docs = np.asarray(docs, dtype=np.int64)
    pairs = band_pairs(keys, docs - docs[0] if len(docs) else docs)
    if stored_sigs is not None:
        write_npy_atomic(Path(f"{prefix}.signatures.npy"), stored_sigs)
    write_npy_atomic(Path(f"{prefix}.window_doc.npy"), narrow_ordinals(docs))
    write_npy_atomic(Path(f"{prefix}.band_pairs.npy"), pairs)


class ShardWriter:
    """Map step: window, sign and band documents into sorted runs under
    ``work_dir/minhash-<shard_id>/`` (a stale folder from an interrupted run is replaced);
    ``close`` writes ``shard.json`` last and returns the folder. Documents come as ``str``
    (``add_texts``) or as code points (``add_codepoints``, the full build's JSONL path); their
    ordinals must be strictly increasing. The files are the same either way. A part's windows
    are buffered as their band keys (and stored signatures), not their 32-bit signatures."""

    def __init__(self, work_dir: str | os.PathLike, shard_id: int | str, params: MinHashParams) -> None:
        self.params = params
        self.out = Path(work_dir) / _shard_name(shard_id)
        if self.out.exists():
            shutil.rmtree(self.out)
        self.out.mkdir(parents=True)
        self.parts: list[dict[str, int]] = []
        self.buf_keys: list[np.ndarray] = []
        self.buf_sigs: list[np.ndarray] = []
        self.buf_docs: list[np.ndarray] = []
        self.buffered = 0  # windows in the buffers (with those without tokens)
        self.n_docs = self.n_windows = self.n_empty = 0
        self.last: int | None = None

    def _ordinals(self, ordinals) -> np.ndarray:
        o = np.asarray(ordinals, dtype=np.int64)
        if len(o):
            bad = np.flatnonzero(np.diff(o) <= 0)
            if self.last is not None and o[0] <= self.last:
                raise ValueError(f"doc ordinals must be strictly increasing: {int(o[0])} after {self.last}")
            if len(bad):
                raise ValueError(f"doc ordinals must be strictly increasing: {int(o[bad[0] + 1])} after "
                                 f"{int(o[bad[0]])}")
            self.last = int(o[-1])
        self.n_docs += len(o)
        return o

    def add_texts(self, ordinals, texts: Sequence[str]) -> None:
        """Window and sign ``texts`` (one call each: batch them, ~1 M chars)."""
        ords = self._ordinals(ordinals)
        if not len(ords):
            return
        from tcqa_data.decontam.minhash.feed import window_signatures

        self._add(ords, *window_signatures(texts, self.params))

    def add_codepoints(self, ordinals, cps: np.ndarray, doc_start: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray]:
        """``add_texts`` of docs given as code points (``feed.CodepointBatch``: doc ``k`` is
        ``cps[doc_start[k]:doc_start[k + 1]]``); compiled ``punkt-fast`` windows and Janitor
        normalization only. Returns the docs' normalized bytes and their doc starts
        (``feed.codepoint_windows``: the n-gram side hashes the same buffer)."""
        from tcqa_data.decontam.minhash.feed import codepoint_windows

        ords = self._ordinals(ordinals)
        win_doc, data, nstart, ws, we = codepoint_windows(cps, doc_start, self.params)
        if len(ords) and self.params.verify == "signatures":
            sigs, counts = sign_normalized(data, ws, we, self.params)
            self._add(ords, win_doc, sigs, counts)
        elif len(ords):
            keys, counts = band_keys_normalized(data, ws, we, self.params)
            keep = counts > 0
            self._add_keys(ords, win_doc, keys if keep.all() else keys[:, keep], keep, None)
        return data, nstart

    def _add(self, ordinals: np.ndarray, win_doc: np.ndarray, sigs: np.ndarray, counts: np.ndarray) -> None:
        keep = counts > 0  # no tokens, no signature: such a window could only match by accident
        kept = sigs if keep.all() else sigs[keep]  # most batches have none: no 512-byte copy per window
        stored = stored_signatures(kept) if self.params.verify == "signatures" else None
        self._add_keys(ordinals, win_doc, stored_band_keys_t(kept, self.params), keep, stored)

    def _add_keys(self, ordinals: np.ndarray, win_doc: np.ndarray, keys: np.ndarray, keep: np.ndarray,
                  stored: np.ndarray | None) -> None:
        """Buffer windows by their stored band keys (``[bands, kept windows]``: those whose
        ``keep`` is set, the windows with tokens) and stored signatures, cutting parts."""
        self.n_empty += int((~keep).sum())
        kept_before = np.zeros(len(keep) + 1, dtype=np.int64)
        np.cumsum(keep, out=kept_before[1:])
        # Parts end between documents, so one doc's windows are in one run (ordinal ranges of
        # runs never overlap, which the merge relies on): a part ends after the doc that brings
        # it to PART_WINDOWS windows (windows without tokens count, as they always did).
        ends_at = np.cumsum(np.bincount(win_doc, minlength=len(ordinals)))
        lo = 0
        while lo < len(win_doc):
            cut = int(np.searchsorted(ends_at, lo + PART_WINDOWS - self.buffered, side="left"))
            hi = int(ends_at[cut]) if cut < len(ends_at) else len(win_doc)
            k0, k1 = int(kept_before[lo]), int(kept_before[hi])
            self.buf_keys.append(keys[:, k0:k1])
            if stored is not None:
                self.buf_sigs.append(stored[k0:k1])
            self.buf_docs.append(ordinals[win_doc[lo:hi][keep[lo:hi]]])
            self.buffered += hi - lo
            lo = hi
            if self.buffered >= PART_WINDOWS:
                self._flush_part()

    def _flush_part(self) -> None:
        docs = np.concatenate(self.buf_docs) if self.buf_docs else np.zeros(0, np.int64)
        if len(docs):
            name = f"part{len(self.parts):05d}"
            _write_keyed_run(self.out / name, np.concatenate(self.buf_keys, axis=1), docs,
                             np.concatenate(self.buf_sigs) if self.buf_sigs else None)
            self.parts.append({"name": name, "n_windows": len(docs), "first_doc": int(docs[0]),
                               "last_doc": int(docs[-1])})
            self.n_windows += len(docs)
        self.buf_keys.clear()
        self.buf_sigs.clear()
        self.buf_docs.clear()
        self.buffered = 0

    def close(self) -> Path:
        self._flush_part()
        write_json_atomic(self.out / "shard.json", {
            "kind": "tcqa-minhash-shard", "format_version": FORMAT_VERSION, "storage_format": STORAGE_FORMAT,
            "params": self.params.to_dict(), "n_docs": self.n_docs, "n_windows": self.n_windows,
            "n_windows_without_tokens": self.n_empty, "parts": self.parts,
        })
        return self.out


def write_minhash_shard(docs: Iterable[tuple[int, str]], work_dir: str | os.PathLike, shard_id: int | str,
                        params: MinHashParams) -> Path:
    """Map step: window, sign and band ``(doc_ordinal, text)`` pairs into sorted runs.

    Ordinals must be strictly increasing. Writes ``work_dir/minhash-<shard_id>/`` (replacing a
    stale one from an interrupted run) and returns its path; ``shard.json`` is written last.
    """
    w = ShardWriter(work_dir, shard_id, params)
    ordinals: list[int] = []
    texts: list[str] = []
    chars = 0
    for ordinal, text in docs:
        ordinals.append(int(ordinal))
        texts.append(text)
        chars += len(text)
        if chars >= _BATCH_CHARS:
            w.add_texts(ordinals, texts)
            ordinals, texts, chars = [], [], 0
    w.add_texts(ordinals, texts)
    return w.close()
