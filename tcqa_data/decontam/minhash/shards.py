"""Map: window, sign and band one shard of documents into sorted runs."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from tcqa_data import FORMAT_VERSION
from tcqa_data.decontam.arrays import narrow_ordinals
from tcqa_data.decontam.minhash.merge import _window_id_dtype
from tcqa_data.decontam.minhash.params import MinHashParams
from tcqa_data.decontam.minhash.sketch import (
    STORAGE_FORMAT,
    band_runs,
    sign_spans,
    stored_signatures,
)
from tcqa_data.decontam.minhash.windows import window_spans
from tcqa_data.io_utils import write_json_atomic, write_npy_atomic

PART_WINDOWS = 65536  # windows per map-side run (16 MiB of signatures at 128 permutations)
_BATCH_CHARS = 1 << 20  # characters of documents per window_spans() + sign_spans() call

_U32 = np.uint32


# ---------------------------------------------------------------------------------------------
# Build: map


def _shard_name(shard_id: int | str) -> str:
    return f"minhash-{shard_id:06d}" if isinstance(shard_id, int) else f"minhash-{shard_id}"


def _write_run(prefix: Path, sigs: np.ndarray, docs: np.ndarray, params: MinHashParams) -> None:
    """One sorted run: each window's doc and, per band, (key, window) sorted by key then window;
    signatures only when the index stores them (``verify="signatures"``): a text-verified index
    re-signs candidates from the text, and at 256 B per window they were most of the map's disk."""
    sorted_keys, order = band_runs(sigs, params)  # [bands, m] each
    if params.verify == "signatures":
        write_npy_atomic(Path(f"{prefix}.signatures.npy"), stored_signatures(sigs))
    write_npy_atomic(Path(f"{prefix}.window_doc.npy"), narrow_ordinals(docs))
    write_npy_atomic(Path(f"{prefix}.band_keys.npy"), sorted_keys)
    write_npy_atomic(Path(f"{prefix}.band_windows.npy"), order.astype(_window_id_dtype(len(sigs))))


def write_minhash_shard(docs: Iterable[tuple[int, str]], work_dir: str | os.PathLike, shard_id: int | str,
                        params: MinHashParams) -> Path:
    """Map step: window, sign and band ``(doc_ordinal, text)`` pairs into sorted runs.

    Ordinals must be strictly increasing. Writes ``work_dir/minhash-<shard_id>/`` (replacing a
    stale one from an interrupted run) and returns its path; ``shard.json`` is written last.
    """
    out = Path(work_dir) / _shard_name(shard_id)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    parts: list[dict[str, int]] = []
    buf_sigs: list[np.ndarray] = []
    buf_docs: list[np.ndarray] = []
    n_docs = n_windows = n_empty = 0
    last = None

    def flush_part() -> None:
        nonlocal n_windows
        sigs = np.concatenate(buf_sigs) if buf_sigs else np.zeros((0, params.num_perm), _U32)
        if len(sigs):
            wdocs = np.concatenate(buf_docs)
            name = f"part{len(parts):05d}"
            _write_run(out / name, sigs, wdocs, params)
            parts.append({"name": name, "n_windows": len(sigs), "first_doc": int(wdocs[0]),
                          "last_doc": int(wdocs[-1])})
            n_windows += len(sigs)
        buf_sigs.clear()
        buf_docs.clear()

    buffered = 0
    batch_ordinals: list[int] = []
    batch_texts: list[str] = []
    batch_chars = 0

    def window_batch() -> None:
        """Window and sign the buffered docs in one call each, then cut parts between docs."""
        nonlocal buffered, n_empty
        if not batch_texts:
            return
        win_doc, starts, ends = window_spans(batch_texts, params)
        sigs, counts = sign_spans(batch_texts, win_doc, starts, ends, params)
        keep = counts > 0  # no tokens, no signature: such a window could only match by accident
        n_empty += int((~keep).sum())
        # Parts end between documents, so one doc's windows are in one run (ordinal ranges of
        # runs never overlap, which the merge relies on): a part ends after the doc that brings
        # it to PART_WINDOWS windows (windows without tokens count, as they always did).
        ends_at = np.cumsum(np.bincount(win_doc, minlength=len(batch_texts)))
        ordinals = np.asarray(batch_ordinals, dtype=np.int64)
        lo = 0
        while lo < len(win_doc):
            cut = int(np.searchsorted(ends_at, lo + PART_WINDOWS - buffered, side="left"))
            hi = int(ends_at[cut]) if cut < len(ends_at) else len(win_doc)
            sel = slice(lo, hi)
            k = keep[sel]
            buf_sigs.append(sigs[sel][k])
            buf_docs.append(ordinals[win_doc[sel][k]])
            buffered += hi - lo
            lo = hi
            if buffered >= PART_WINDOWS:
                flush_part()
                buffered = 0
        batch_ordinals.clear()
        batch_texts.clear()

    for ordinal, text in docs:
        ordinal = int(ordinal)
        if last is not None and ordinal <= last:
            raise ValueError(f"doc ordinals must be strictly increasing: {ordinal} after {last}")
        last = ordinal
        n_docs += 1
        batch_ordinals.append(ordinal)
        batch_texts.append(text)
        batch_chars += len(text)
        if batch_chars >= _BATCH_CHARS:
            window_batch()
            batch_chars = 0
    window_batch()
    flush_part()
    write_json_atomic(out / "shard.json", {
        "kind": "tcqa-minhash-shard", "format_version": FORMAT_VERSION, "storage_format": STORAGE_FORMAT,
        "params": params.to_dict(),
        "n_docs": n_docs, "n_windows": n_windows, "n_windows_without_tokens": n_empty, "parts": parts,
    })
    return out
