"""Reduce: merge MinHash map runs (and an existing index) into the final ``minhash/`` files."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from tcqa_data import FORMAT_VERSION
from tcqa_data.decontam.core import packed
from tcqa_data.decontam.minhash.band_merge import (
    _MERGE_ENTRIES,
    _MIN_BLOCK,
    _merge_band,
    _pairs_doc_dtype,
    _PairsWriter,
    _RangeTableWriter,
    _Run,
)
from tcqa_data.decontam.minhash.params import (
    INDEX_STORAGE_FORMAT,
    MinHashParams,
    band_entries_name,
    index_storage_info,
)
from tcqa_data.decontam.minhash.sketch import STORAGE_FORMAT as RUN_STORAGE_FORMAT
from tcqa_data.errors import IndexMismatchError, TcqaError
from tcqa_data.io_utils import (
    NpyStream,
    atomic_path,
    load_npy,
    read_json,
    write_json_atomic,
)

_MERGE_BLOCK = 1 << 16  # rows copied at a time when concatenating runs
# above this many runs a band is merged in two levels: groups of this many runs first, each into a
# sorted run of its own (one task per band and group), then the groups' runs; every merge then
# reads at most this many runs, so memory stays flat up to GROUP_RUNS**2 runs (~1.2e5 TB of text)
GROUP_RUNS = _MERGE_ENTRIES // _MIN_BLOCK // 2
GROUPS_DIR = "band_groups"  # the groups' runs: build scratch inside the staged minhash/ folder
# Above this many windows per key range, each band's merge is split by key range (a power of two
# of ranges, on directory-cell bounds): one task per band and range merges that range of every
# run and packs it as that range's part of the band table (``merge_minhash_range``), and the band
# task then only joins the parts in key order (shifting words, no entry unpacked). A band task was
# one task per band whatever the corpus (26-way at most: ~2 h at 10 TB on any number of cores).
RANGE_WINDOWS = 1 << 24  # ~2 GB of fresh text (about 7.6 M windows per GB)
RANGES_DIR = "band_ranges"  # the ranges' packed parts: build scratch inside the staged minhash/ folder
_JOIN_BLOCK = 1 << 20  # words or directory offsets copied at a time when joining the ranges' parts


# ---------------------------------------------------------------------------------------------
# .npy streaming helpers (bounded memory: no whole-array loads, no memmap of growing outputs)


class _NpyWriter:
    """Writes a .npy of known shape sequentially (inside an atomic_path). ``header=False``: write
    ``shape`` elements at the file's current position (one band's row of a preallocated table;
    tasks of different bands write disjoint byte ranges of the same file)."""

    def __init__(self, fh, dtype, shape: tuple[int, ...], header: bool = True) -> None:
        self.fh = fh
        self.dtype = np.dtype(dtype)
        if header:
            head = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False,
                    "shape": shape}
            np.lib.format.write_array_header_1_0(fh, head) if _header_fits_v1(shape) else \
                np.lib.format.write_array_header_2_0(fh, head)
        self.left = int(np.prod(shape))

    def write(self, arr: np.ndarray) -> None:
        arr = np.ascontiguousarray(arr, dtype=self.dtype)
        self.left -= arr.size
        self.fh.write(arr.tobytes())

    def close(self) -> None:
        if self.left != 0:
            raise RuntimeError(f"npy writer: {self.left} elements missing")


def _header_fits_v1(shape: tuple[int, ...]) -> bool:
    return len(repr(shape)) < 60000


# ---------------------------------------------------------------------------------------------
# Build: reduce


def _check_params(found: dict[str, Any], params: MinHashParams, where: Path) -> None:
    if MinHashParams.from_dict(found) != params:
        raise IndexMismatchError(f"{where} was built with MinHash parameters {found}, not "
                                 f"{params.to_dict()}; rebuild the index with "
                                 "`tcqa-data index-corpus ... --overwrite`")


def _check_run_storage(meta: dict[str, Any], where: Path) -> None:
    """Map runs of the first layout (32-bit signatures, 64-bit band keys) cannot be merged."""
    fmt = meta.get("storage_format", 1)
    if fmt != RUN_STORAGE_FORMAT:
        raise IndexMismatchError(
            f"{where} holds MinHash map runs of storage format {fmt}, not {RUN_STORAGE_FORMAT}: rerun the "
            "build (`tcqa-data index-corpus ... --overwrite`)")


def _check_index_storage(meta: dict[str, Any], where: Path) -> None:
    """Indexes of older layouts are still queried, but cannot be appended to: say what to do."""
    fmt = (meta.get("storage") or {}).get("storage_format", 1)
    if fmt != INDEX_STORAGE_FORMAT:
        raise IndexMismatchError(
            f"{where} holds MinHash storage format {fmt}; this version writes format {INDEX_STORAGE_FORMAT} "
            "(doc-level bit-packed band tables) and cannot append to it: rebuild the index with "
            "`tcqa-data index-corpus ... --overwrite` (it can still be queried as it is)")


_PARTIAL = ".npy.partial"


def plan_minhash_merge(shard_dirs: Sequence[str | os.PathLike], params: MinHashParams,
                       base_dir: str | os.PathLike | None = None,
                       doc_offsets: Sequence[int] | None = None,
                       group_runs: int | None = None) -> dict[str, Any]:
    """The merge's inputs, checked and ordered (a JSON-able plan the merge steps share): runs in
    doc-ordinal order with their window-id offsets, the totals, the output layout and, with more
    than ``group_runs`` runs (default ``GROUP_RUNS``), the run groups merged first
    (``merge_minhash_group``)."""
    if doc_offsets is not None and len(doc_offsets) != len(shard_dirs):
        raise ValueError("doc_offsets must have one entry per shard dir")
    runs: list[_Run] = []
    n_empty = 0
    base_layout: dict[str, Any] = {}
    n_docs = 0
    if base_dir is not None:
        base = Path(base_dir)
        meta = read_json(base / "params.json")
        _check_params(meta["params"], params, base)
        _check_index_storage(meta, base)
        st = meta["storage"]
        base_layout = {"base_dir_bits": int(st["dir_bits"]), "base_id_bits": int(st["id_bits"])}
        n_docs = int(meta["n_docs"])
        if meta["n_windows"]:
            runs.append(_Run(str(base) + os.sep, meta["n_windows"], 0, max(0, int(st["doc_span"]) - 1),
                             base=True))
        n_empty += meta.get("n_windows_without_tokens", 0)
    doc_span = n_docs
    for si, d in enumerate(shard_dirs):
        d = Path(d)
        shift = int(doc_offsets[si]) if doc_offsets is not None else 0
        if not (d / "shard.json").exists():
            raise TcqaError(f"MinHash shard {d} is incomplete (no shard.json): rerun its map step")
        meta_s = read_json(d / "shard.json")
        _check_params(meta_s["params"], params, d)
        _check_run_storage(meta_s, d)
        n_docs += meta_s["n_docs"]
        n_empty += meta_s["n_windows_without_tokens"]
        for p in meta_s["parts"]:
            runs.append(_Run(str(d / p["name"]) + ".", p["n_windows"], p["first_doc"] + shift,
                             p["last_doc"] + shift, doc_shift=shift))
    runs.sort(key=lambda r: r.first_doc)
    total = 0
    for k, r in enumerate(runs):
        prev = runs[k - 1] if k else None
        if prev is not None and r.first_doc <= prev.last_doc:
            raise ValueError(f"doc ordinals of MinHash runs overlap ({prev.prefix} and {r.prefix}): "
                             f"each doc must be in exactly one shard")
        r.offset = total
        total += r.n
    # doc ordinals are 0..n_docs-1; the span also covers a caller's gaps (docs without windows)
    doc_span = max(n_docs, max((r.last_doc + 1 for r in runs), default=0))
    dir_bits = packed.dir_bits_for(total)
    id_bits = packed.id_bits_for(max(0, doc_span - 1))
    width = packed.entry_width(dir_bits, id_bits)
    group_runs = GROUP_RUNS if group_runs is None else max(2, int(group_runs))
    groups = [[a, min(a + group_runs, len(runs))] for a in range(0, len(runs), group_runs)] \
        if len(runs) > group_runs else []
    # key ranges per band: a power of two, on the directory cells of the output and of an
    # existing index (whose tables are read by cell)
    ranges = 1
    most = min(dir_bits, base_layout.get("base_dir_bits", dir_bits))
    while total > ranges * RANGE_WINDOWS and ranges < 1 << most:
        ranges *= 2
    return {"runs": [asdict(r) for r in runs], "groups": groups, "ranges": ranges,
            "n_windows": total, "n_docs": n_docs,
            "n_windows_without_tokens": n_empty,
            "layout": {"doc_span": doc_span, "dir_bits": dir_bits, "id_bits": id_bits, "entry_bits": width,
                       "cell_dtype": "uint32" if total < 2**32 else "uint64",
                       "doc_windows_dtype": "uint32" if total < 2**32 else "int64", **base_layout}}


def _runs_of(plan: dict[str, Any]) -> list[_Run]:
    return [_Run(**r) for r in plan["runs"]]


def _cells_shape(plan: dict[str, Any], params: MinHashParams) -> tuple[int, int]:
    return params.bands, (1 << plan["layout"]["dir_bits"]) + 1  # type: ignore[return-value]


def start_minhash_merge(plan: dict[str, Any], out_dir: str | os.PathLike, params: MinHashParams) -> None:
    """Reduce, first step: mark ``out_dir`` incomplete and create the band directories
    (``band_cells``) at full size under a temporary name (header written, rows filled in place by
    ``merge_minhash_band``, which writes each band's entries file itself; the existing tables of an
    in-place append are read until ``finish_minhash_merge`` swaps them)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if (out / "params.json").exists():
        (out / "params.json").unlink()  # the folder is incomplete until params.json is back
    shape, dtype = _cells_shape(plan, params), np.dtype(plan["layout"]["cell_dtype"])
    with open(out / f"band_cells{_PARTIAL}", "wb") as fh:
        _NpyWriter(fh, dtype, shape)  # header only
        fh.truncate(fh.tell() + shape[0] * shape[1] * dtype.itemsize)


def _doc_of_windows(r: _Run):
    """Doc ordinal of each window of a run, in blocks (sorted)."""
    if r.base:
        dw = r.reader("doc_windows")
        for d0 in range(0, len(dw) - 1, _MERGE_BLOCK):
            off = dw.read(d0, min(d0 + _MERGE_BLOCK, len(dw) - 1) + 1).astype(np.int64)
            yield np.repeat(np.arange(d0, d0 + len(off) - 1, dtype=np.int64), np.diff(off))
        return
    rd = r.reader("window_doc")
    for s in range(0, r.n, _MERGE_BLOCK):
        yield rd.read(s, min(s + _MERGE_BLOCK, r.n)).astype(np.int64) + np.int64(r.doc_shift)


def write_minhash_columns(plan: dict[str, Any], out_dir: str | os.PathLike, params: MinHashParams) -> None:
    """Reduce, per-window files: ``doc_windows`` (each doc's first window id) and, with
    ``verify="signatures"``, the runs' signatures concatenated."""
    out, runs, total, lay = Path(out_dir), _runs_of(plan), plan["n_windows"], plan["layout"]
    span = lay["doc_span"]
    with atomic_path(out / "doc_windows.npy") as tmp, open(tmp, "wb") as fh:
        w = _NpyWriter(fh, np.dtype(lay["doc_windows_dtype"]), (span + 1,))
        offsets = packed.OffsetsWriter(w.write, span)
        for r in runs:
            for docs in _doc_of_windows(r):
                offsets.add(docs)
        offsets.close()
        w.close()
    if params.verify != "signatures":
        return
    with atomic_path(out / "signatures.npy") as tmp, open(tmp, "wb") as fh:
        w = _NpyWriter(fh, np.uint16, (total, params.num_perm))
        for r in runs:
            rd = r.reader("signatures")
            for s in range(0, r.n, _MERGE_BLOCK):
                w.write(rd.read(s, min(s + _MERGE_BLOCK, r.n)))
        w.close()


def merge_minhash_band(plan: dict[str, Any], out_dir: str | os.PathLike, params: MinHashParams,
                       band: int) -> int:
    """Reduce, one task per band: k-way merge of that band's sorted runs into its row of
    ``band_cells`` (``start_minhash_merge`` created it) and its own ``band_entries_NNN`` file; with
    key ranges, the join of the ranges' packed tables (``merge_minhash_range``). Returns the band
    number."""
    out, lay = Path(out_dir), plan["layout"]
    cshape, cdt = _cells_shape(plan, params), np.dtype(lay["cell_dtype"])
    # the entries' count is known only at the end: a stream whose header is written last
    entries = NpyStream(out / f"{band_entries_name(band)}{_PARTIAL}", np.uint64)
    try:
        with open(out / f"band_cells{_PARTIAL}", "r+b") as fc:
            np.lib.format.read_magic(fc)
            np.lib.format.read_array_header_1_0(fc) if _header_fits_v1(cshape) else \
                np.lib.format.read_array_header_2_0(fc)
            fc.seek(fc.tell() + band * cshape[1] * cdt.itemsize)
            wc = _NpyWriter(fc, cdt, (cshape[1],), header=False)
            if plan.get("ranges", 1) > 1:
                _join_ranges(out_dir, band, plan["ranges"], lay, wc, entries)
            else:
                table = packed.TableWriter(wc.write, entries.write, None, lay["dir_bits"], lay["id_bits"])
                _merge_band(band_runs(plan, out_dir, band), band, table, lay)
                table.close()
            wc.close()
    except BaseException as exc:
        entries.abort(exc)
        raise
    entries.close()
    return band


def _group_prefix(out_dir: str | os.PathLike, band: int, group: int) -> str:
    return os.path.join(out_dir, GROUPS_DIR, f"b{band:03d}_g{group:06d}.")


def merge_minhash_group(plan: dict[str, Any], out_dir: str | os.PathLike, params: MinHashParams,
                        band: int, group: int) -> list[int]:
    """Reduce, first level (plans with ``groups``): merge band ``band`` of the runs of group
    ``group`` into one sorted run of distinct (key, doc) pairs under ``out_dir/band_groups``, which
    ``merge_minhash_band`` then reads in place of the group's runs. Returns ``[band, group]``."""
    a, b = plan["groups"][group]
    os.makedirs(os.path.join(out_dir, GROUPS_DIR), exist_ok=True)
    out = _PairsWriter(_group_prefix(out_dir, band, group), _pairs_doc_dtype(plan))
    try:
        _merge_band(_runs_of(plan)[a:b], band, out, plan["layout"])
    except BaseException as exc:
        out.abort(exc)
        raise
    out.close()
    return [band, group]


def _range_prefix(out_dir: str | os.PathLike, band: int, rng: int) -> str:
    return os.path.join(out_dir, RANGES_DIR, f"b{band:03d}_r{rng:06d}.")


def _range_cells(layout: dict[str, Any], ranges: int, rng: int) -> tuple[int, int]:
    """The directory cells of key range ``rng`` of ``ranges`` (the plan puts ranges on cells)."""
    per = (1 << layout["dir_bits"]) // ranges
    return rng * per, (rng + 1) * per


def merge_minhash_range(plan: dict[str, Any], out_dir: str | os.PathLike, params: MinHashParams,
                        band: int, rng: int) -> list[int]:
    """Reduce, one task per band and key range (plans with ``ranges`` > 1): merge the keys in
    range ``rng`` of band ``band`` of every run (or of the groups' runs) and pack them as that
    range's part of the band table (``_RangeTableWriter``) under ``out_dir/band_ranges``; the band
    task then joins the parts without unpacking them. Returns ``[band, rng]``."""
    span = (1 << packed.KEY_BITS) // plan["ranges"]
    os.makedirs(os.path.join(out_dir, RANGES_DIR), exist_ok=True)
    lay = plan["layout"]
    out = _RangeTableWriter(_range_prefix(out_dir, band, rng), lay, _range_cells(lay, plan["ranges"], rng))
    try:
        _merge_band(band_runs(plan, out_dir, band), band, out, lay, (rng * span, (rng + 1) * span))
    except BaseException as exc:
        out.abort(exc)
        raise
    out.close()
    return [band, rng]


def _join_ranges(out_dir: str | os.PathLike, band: int, ranges: int, layout: dict[str, Any],
                 cells_out: _NpyWriter, entries: NpyStream) -> None:
    """One band's table from its key ranges' parts, in key order: each part's directory offset by
    the entries before it, its words shifted by their bits (``packed.WordsJoin``)."""
    width = packed.entry_width(layout["dir_bits"], layout["id_bits"])
    join = packed.WordsJoin(entries.write, width)
    before = 0  # entries of the ranges before this one
    for rng in range(ranges):
        prefix = _range_prefix(out_dir, band, rng)
        cells = load_npy(prefix + "cells.npy")
        n, last = int(cells[-1]), len(cells) - 1  # a range's last offset is the next one's first
        for c in range(0, last, _JOIN_BLOCK):
            cells_out.write(np.asarray(cells[c:min(c + _JOIN_BLOCK, last)], dtype=np.int64) + before)
        words = load_npy(prefix + "words.npy")
        bits = n * width
        for w in range(0, -(-bits // 64), _JOIN_BLOCK):
            join.add(words[w:w + _JOIN_BLOCK], min(bits - 64 * w, 64 * _JOIN_BLOCK))
        before += n
        del cells, words
    cells_out.write(np.array([before], dtype=np.int64))
    join.close()


def band_runs(plan: dict[str, Any], out_dir: str | os.PathLike, band: int) -> list[_Run]:
    """The runs the merge of band ``band`` reads: the plan's, or its groups' merged runs."""
    runs = _runs_of(plan)
    if not plan.get("groups"):
        return runs
    return [_Run(_group_prefix(out_dir, band, g), 0, runs[a].first_doc, runs[b - 1].last_doc, pairs=True)
            for g, (a, b) in enumerate(plan["groups"])]


_FILES = ("doc_windows", "signatures", "band_cells")


def finish_minhash_merge(plan: dict[str, Any], out_dir: str | os.PathLike, params: MinHashParams
                         ) -> dict[str, Any]:
    """Reduce, last step: ``params.json`` (marks the folder complete); returns it."""
    out, total, lay = Path(out_dir), plan["n_windows"], plan["layout"]
    for name in ("band_cells", *map(band_entries_name, range(params.bands))):
        os.replace(out / f"{name}{_PARTIAL}", out / f"{name}.npy")
    shutil.rmtree(out / GROUPS_DIR, ignore_errors=True)
    shutil.rmtree(out / RANGES_DIR, ignore_errors=True)
    for name in ("window_doc", "window_shingles", "band_keys", "band_windows") + \
            (("signatures",) if params.verify != "signatures" else ()):
        (out / f"{name}.npy").unlink(missing_ok=True)  # an older layout's files (in-place append)
    sizes = {f"{name}.npy": (out / f"{name}.npy").stat().st_size for name in _FILES
             if (out / f"{name}.npy").exists()}
    sizes["band_entries_*.npy"] = sum((out / f"{band_entries_name(b)}.npy").stat().st_size
                                      for b in range(params.bands))
    layout = {k: lay[k] for k in ("doc_span", "dir_bits", "id_bits", "entry_bits")}
    summary = {"kind": "tcqa-minhash-index", "format_version": FORMAT_VERSION, "params": params.to_dict(),
               "n_windows": total, "n_docs": plan["n_docs"],
               "n_windows_without_tokens": plan["n_windows_without_tokens"],
               "storage": {**index_storage_info(total, params, layout), "bytes": sizes}}
    write_json_atomic(out / "params.json", summary)
    return summary


def merge_minhash_shards(shard_dirs: Sequence[str | os.PathLike], out_dir: str | os.PathLike,
                         params: MinHashParams, base_dir: str | os.PathLike | None = None,
                         doc_offsets: Sequence[int] | None = None, group_runs: int | None = None
                         ) -> dict[str, Any]:
    """Reduce step: merge shard runs (and optionally an existing index ``base_dir``) into the
    final ``out_dir`` files. Returns the summary also written to ``out_dir/params.json``.

    The same steps an engine runs as tasks (``plan_minhash_merge``, ``start_minhash_merge``,
    ``write_minhash_columns``, one ``merge_minhash_group`` per band and run group when the runs
    are more than ``group_runs``, one ``merge_minhash_range`` per band and key range when the
    windows are more than ``RANGE_WINDOWS``, one ``merge_minhash_band`` per band,
    ``finish_minhash_merge``), here one after the other; the bytes are the same either way.

    ``doc_offsets[i]`` (optional) is added to the doc ordinals of ``shard_dirs[i]``, for map steps
    that numbered their docs from 0 before global ordinals were known. ``out_dir`` may be
    ``base_dir`` (each file is replaced after it is written), but a crash part-way then leaves a
    folder without ``params.json`` that must be rebuilt; merging into a new folder and swapping it
    in is safer."""
    plan = plan_minhash_merge(shard_dirs, params, base_dir, doc_offsets, group_runs)
    start_minhash_merge(plan, out_dir, params)
    write_minhash_columns(plan, out_dir, params)
    for band in range(params.bands):
        for group in range(len(plan["groups"])):
            merge_minhash_group(plan, out_dir, params, band, group)
    for band in range(params.bands):
        for rng in range(plan["ranges"] if plan["ranges"] > 1 else 0):
            merge_minhash_range(plan, out_dir, params, band, rng)
    for band in range(params.bands):
        merge_minhash_band(plan, out_dir, params, band)
    return finish_minhash_merge(plan, out_dir, params)
