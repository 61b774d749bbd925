"""A packed (key, id) table (``decontam/core/packed.py``) written to .npy files and memory-mapped, as
the index's anchor and MinHash band tables are read."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tcqa_data.decontam.core import packed


def packed_table(tmp_path: Path, rng: np.random.Generator, n: int, key_range: int, id_bits: int):
    """``n`` random (key, id) draws, distinct pairs kept (a table holds each once), as
    (keys, ids, cells memmap, words memmap, dir_bits)."""
    keys = rng.integers(0, key_range, n, dtype=np.uint64)
    ids = rng.integers(0, 2**id_bits, n, dtype=np.uint64)
    pairs = np.unique(np.stack([keys, ids]), axis=1)
    keys, ids = pairs[0], pairs[1].astype(np.int64)
    dir_bits = packed.dir_bits_for(len(keys))
    cells: list[np.ndarray] = []
    words: list[np.ndarray] = []
    table = packed.TableWriter(cells.append, words.append, None, dir_bits, id_bits)
    table.add(keys, ids)
    table.close()
    np.save(tmp_path / "c.npy", np.concatenate(cells).astype(np.uint32))
    np.save(tmp_path / "w.npy", np.concatenate(words) if words else np.zeros(1, np.uint64))
    c, w = (np.load(tmp_path / f"{x}.npy", mmap_mode="r") for x in "cw")
    return keys, ids, c, w, dir_bits
