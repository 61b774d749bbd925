"""Merging anchor tables (per-input runs, earlier merged parts) into one table of key-range parts
(see ``anchors``' docstring); apart from ``anchors`` since only the build's merge tasks use it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tcqa_data.decontam.core import packed
from tcqa_data.decontam.core.arrays import sorted_unique
from tcqa_data.decontam.textstore.anchors import ANCHOR_RUN, _write_anchor_table
from tcqa_data.decontam.textstore.store import STORE_DIR
from tcqa_data.io_utils import cached_row_reader, load_npy

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
