"""Map: window, sign and band one shard of documents into sorted runs."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from tcqa_data import FORMAT_VERSION
from tcqa_data.decontam.minhash.merge import _window_id_dtype
from tcqa_data.decontam.minhash.params import MinHashParams
from tcqa_data.decontam.minhash.sketch import (
    STORAGE_FORMAT,
    band_keys,
    sign,
    stored_band_keys,
    stored_signatures,
)
from tcqa_data.decontam.minhash.windows import split_windows
from tcqa_data.io_utils import write_json_atomic, write_npy_atomic

PART_WINDOWS = 65536  # windows per map-side run (16 MiB of signatures at 128 permutations)
_BATCH_WINDOWS = 4096  # windows per signatures() call on the build side

_U32 = np.uint32


# ---------------------------------------------------------------------------------------------
# Build: map


_FILES = ("signatures", "window_doc", "window_shingles", "band_keys", "band_windows")


def _shard_name(shard_id: int | str) -> str:
    return f"minhash-{shard_id:06d}" if isinstance(shard_id, int) else f"minhash-{shard_id}"


def _write_run(prefix: Path, sigs: np.ndarray, docs: np.ndarray, nshingles: np.ndarray,
               params: MinHashParams) -> None:
    """One sorted run: signatures plus, per band, (key, window) sorted by key then window."""
    keys = stored_band_keys(band_keys(sigs, params))  # [m, bands]
    order = np.argsort(keys, axis=0, kind="stable")  # stable: ties keep ascending window order
    sorted_keys = np.take_along_axis(keys, order, axis=0).T.copy()
    write_npy_atomic(Path(f"{prefix}.signatures.npy"), stored_signatures(sigs))
    write_npy_atomic(Path(f"{prefix}.window_doc.npy"), docs.astype(np.int64))
    write_npy_atomic(Path(f"{prefix}.window_shingles.npy"), np.minimum(nshingles, 0xFFFF).astype(np.uint16))
    write_npy_atomic(Path(f"{prefix}.band_keys.npy"), sorted_keys)
    write_npy_atomic(Path(f"{prefix}.band_windows.npy"), order.T.astype(_window_id_dtype(len(sigs))))


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
    buf_sh: list[np.ndarray] = []
    pend_texts: list[str] = []
    pend_docs: list[int] = []
    n_docs = n_windows = n_empty = 0
    last = None

    def sign_pending() -> None:
        nonlocal n_empty
        if not pend_texts:
            return
        sigs, counts = sign(pend_texts, params)
        keep = counts > 0  # no tokens, no signature: such a window could only match by accident
        n_empty += int((~keep).sum())
        buf_sigs.append(sigs[keep])
        buf_docs.append(np.asarray(pend_docs, dtype=np.int64)[keep])
        buf_sh.append(counts[keep].astype(_U32))
        pend_texts.clear()
        pend_docs.clear()

    def flush_part() -> None:
        nonlocal n_windows
        sign_pending()
        sigs = np.concatenate(buf_sigs) if buf_sigs else np.zeros((0, params.num_perm), _U32)
        if len(sigs):
            wdocs = np.concatenate(buf_docs)
            name = f"part{len(parts):05d}"
            _write_run(out / name, sigs, wdocs, np.concatenate(buf_sh), params)
            parts.append({"name": name, "n_windows": len(sigs), "first_doc": int(wdocs[0]),
                          "last_doc": int(wdocs[-1])})
            n_windows += len(sigs)
        buf_sigs.clear()
        buf_docs.clear()
        buf_sh.clear()

    buffered = 0
    for ordinal, text in docs:
        ordinal = int(ordinal)
        if last is not None and ordinal <= last:
            raise ValueError(f"doc ordinals must be strictly increasing: {ordinal} after {last}")
        last = ordinal
        n_docs += 1
        wins = split_windows(text, params)
        pend_texts.extend(wins)
        pend_docs.extend([ordinal] * len(wins))
        buffered += len(wins)
        if len(pend_texts) >= _BATCH_WINDOWS:
            sign_pending()
        # Parts end between documents, so one doc's windows are in one run (ordinal ranges of
        # runs never overlap, which the merge relies on).
        if buffered >= PART_WINDOWS:
            flush_part()
            buffered = 0
    flush_part()
    write_json_atomic(out / "shard.json", {
        "kind": "tcqa-minhash-shard", "format_version": FORMAT_VERSION, "storage_format": STORAGE_FORMAT,
        "params": params.to_dict(),
        "n_docs": n_docs, "n_windows": n_windows, "n_windows_without_tokens": n_empty, "parts": parts,
    })
    return out
