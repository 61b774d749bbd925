"""Reduce: merge MinHash map runs (and an existing index) into the final ``minhash/`` files."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tcqa_data import FORMAT_VERSION
from tcqa_data.decontam.minhash.params import MinHashParams
from tcqa_data.decontam.minhash.sketch import STORAGE_FORMAT, storage_info
from tcqa_data.errors import IndexMismatchError, TcqaError
from tcqa_data.io_utils import NpyRowReader, atomic_path, read_json, write_json_atomic

_MERGE_BLOCK = 1 << 16  # rows copied at a time when concatenating runs
_MERGE_ENTRIES = 1 << 21  # (key, window) entries held over all runs in the band merge
_MIN_BLOCK = 4096

_U32 = np.uint32
_U64 = np.uint64


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


@dataclass
class _Run:
    prefix: str  # file name prefix: ".../partNNNNN." or ".../" for a final index folder
    n: int
    first_doc: int
    last_doc: int
    offset: int = 0  # window id of the run's first window in the output
    doc_shift: int = 0  # added to the run's doc ordinals (maps that numbered docs from 0)

    def reader(self, name: str) -> NpyRowReader:
        return NpyRowReader(Path(self.prefix + name + ".npy"))


def _check_params(found: dict[str, Any], params: MinHashParams, where: Path) -> None:
    if MinHashParams.from_dict(found) != params:
        raise IndexMismatchError(f"{where} was built with MinHash parameters {found}, not {params.to_dict()}")


def _check_storage(meta: dict[str, Any], where: Path) -> None:
    """Runs and indexes of the first MinHash layout (32-bit signatures, 64-bit band keys) cannot be
    merged into the current one (their band order differs): say how to get rid of them."""
    fmt = meta.get("storage_format", (meta.get("storage") or {}).get("storage_format", 1))
    if fmt != STORAGE_FORMAT:
        raise IndexMismatchError(
            f"{where} holds MinHash storage format {fmt}; this version writes format {STORAGE_FORMAT} "
            "(16-bit signatures, 32-bit band keys) and cannot append to it: rebuild the index with "
            "`tcqa-data index-corpus ... --overwrite` (it can still be queried as it is)")


def _merge_band(runs: list[_Run], band: int, keys_out: _NpyWriter, wins_out: _NpyWriter) -> None:
    """K-way merge of one band's sorted (key, window) runs, a block per run at a time.

    Window ids are unique, so (key, window) pairs are totally ordered: every pair <= the smallest
    "last pair of a block" over runs that have more data is final and can be written.
    """
    block = max(_MIN_BLOCK, _MERGE_ENTRIES // max(1, len(runs)))  # bounded memory whatever the run count
    kr = [r.reader("band_keys") for r in runs]
    wr = [r.reader("band_windows") for r in runs]
    pos = [0] * len(runs)
    key_type = kr[0].dtype.type if kr else _U32
    cur_k: list[np.ndarray] = [np.zeros(0, key_type) for _ in runs]
    cur_w: list[np.ndarray] = [np.zeros(0, np.int64) for _ in runs]
    while True:
        for i, r in enumerate(runs):
            if len(cur_k[i]) == 0 and pos[i] < r.n:
                stop = min(pos[i] + block, r.n)
                cur_k[i] = kr[i].read_row_span(band, pos[i], stop)
                cur_w[i] = wr[i].read_row_span(band, pos[i], stop).astype(np.int64) + r.offset
                pos[i] = stop
        live = [i for i in range(len(runs)) if len(cur_k[i])]
        if not live:
            return
        more = [i for i in live if pos[i] < runs[i].n]
        if more:
            bk, bw = min((int(cur_k[i][-1]), int(cur_w[i][-1])) for i in more)
        ks, ws = [], []
        for i in live:
            k, w = cur_k[i], cur_w[i]
            if more:
                take = int(np.searchsorted(k, key_type(bk), side="left"))
                eq = int(np.searchsorted(k, key_type(bk), side="right"))
                take += int(np.searchsorted(w[take:eq], bw, side="right"))
            else:
                take = len(k)
            ks.append(k[:take])
            ws.append(w[:take])
            cur_k[i], cur_w[i] = k[take:], w[take:]
        k = np.concatenate(ks)
        w = np.concatenate(ws)
        order = np.lexsort((w, k))
        keys_out.write(k[order])
        wins_out.write(w[order])


def _window_id_dtype(n_windows: int) -> np.dtype:
    """uint32 window ids while they fit (halves the band tables), int64 beyond 2**32 windows."""
    return np.dtype(_U32) if n_windows < 2**32 else np.dtype(np.int64)


_PARTIAL = ".npy.partial"


def plan_minhash_merge(shard_dirs: Sequence[str | os.PathLike], params: MinHashParams,
                       base_dir: str | os.PathLike | None = None,
                       doc_offsets: Sequence[int] | None = None) -> dict[str, Any]:
    """The merge's inputs, checked and ordered (a JSON-able plan the merge steps share): runs in
    doc-ordinal order with their window-id offsets, the totals and the output dtypes."""
    if doc_offsets is not None and len(doc_offsets) != len(shard_dirs):
        raise ValueError("doc_offsets must have one entry per shard dir")
    runs: list[_Run] = []
    n_empty = 0
    if base_dir is not None:
        base = Path(base_dir)
        meta = read_json(base / "params.json")
        _check_params(meta["params"], params, base)
        _check_storage(meta, base)
        if meta["n_windows"]:
            docs = NpyRowReader(base / "window_doc.npy")
            runs.append(_Run(str(base) + os.sep, meta["n_windows"], int(docs.read(0, 1)[0]),
                             int(docs.read(meta["n_windows"] - 1, meta["n_windows"])[0])))
        n_empty += meta.get("n_windows_without_tokens", 0)
    n_docs = 0 if base_dir is None else meta["n_docs"]
    for si, d in enumerate(shard_dirs):
        d = Path(d)
        shift = int(doc_offsets[si]) if doc_offsets is not None else 0
        if not (d / "shard.json").exists():
            raise TcqaError(f"MinHash shard {d} is incomplete (no shard.json): rerun its map step")
        meta_s = read_json(d / "shard.json")
        _check_params(meta_s["params"], params, d)
        _check_storage(meta_s, d)
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
    last_doc = max((r.last_doc for r in runs), default=0)
    return {"runs": [asdict(r) for r in runs], "n_windows": total, "n_docs": n_docs,
            "n_windows_without_tokens": n_empty,
            "window_doc_dtype": "uint32" if last_doc < 2**32 else "int64",
            "window_id_dtype": _window_id_dtype(total).name}


def _runs_of(plan: dict[str, Any]) -> list[_Run]:
    return [_Run(**r) for r in plan["runs"]]


def start_minhash_merge(plan: dict[str, Any], out_dir: str | os.PathLike, params: MinHashParams) -> None:
    """Reduce, first step: mark ``out_dir`` incomplete and create the two band tables at full size
    under temporary names (header written, rows filled in place by ``merge_minhash_band``; the
    existing tables of an in-place append are read until ``finish_minhash_merge`` swaps them)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if (out / "params.json").exists():
        (out / "params.json").unlink()  # the folder is incomplete until params.json is back
    total, bands = plan["n_windows"], params.bands
    for name, dtype in (("band_keys", _U32), ("band_windows", np.dtype(plan["window_id_dtype"]))):
        with open(out / f"{name}{_PARTIAL}", "wb") as fh:
            _NpyWriter(fh, dtype, (bands, total))  # header only
            fh.truncate(fh.tell() + bands * total * np.dtype(dtype).itemsize)


def write_minhash_columns(plan: dict[str, Any], out_dir: str | os.PathLike, params: MinHashParams) -> None:
    """Reduce, per-window files: the runs' signatures, doc ordinals and shingle counts, concatenated."""
    out, runs, total = Path(out_dir), _runs_of(plan), plan["n_windows"]
    for name, dtype, shape in (("signatures", np.uint16, (total, params.num_perm)),
                               ("window_doc", np.dtype(plan["window_doc_dtype"]), (total,)),
                               ("window_shingles", np.uint16, (total,))):
        with atomic_path(out / f"{name}.npy") as tmp, open(tmp, "wb") as fh:
            w = _NpyWriter(fh, dtype, shape)
            for r in runs:
                rd = r.reader(name)
                for s in range(0, r.n, _MERGE_BLOCK):
                    block = rd.read(s, min(s + _MERGE_BLOCK, r.n))
                    w.write(block + np.int64(r.doc_shift) if name == "window_doc" else block)
            w.close()


def merge_minhash_band(plan: dict[str, Any], out_dir: str | os.PathLike, params: MinHashParams,
                       band: int) -> int:
    """Reduce, one task per band: k-way merge of that band's sorted runs into its row of the band
    tables (``start_minhash_merge`` created them). Returns the band number."""
    out, runs, total = Path(out_dir), _runs_of(plan), plan["n_windows"]
    with open(out / f"band_keys{_PARTIAL}", "r+b") as fk, open(out / f"band_windows{_PARTIAL}", "r+b") as fw:
        wdt = np.dtype(plan["window_id_dtype"])
        for fh, dt in ((fk, np.dtype(_U32)), (fw, wdt)):
            np.lib.format.read_magic(fh)
            np.lib.format.read_array_header_1_0(fh) if _header_fits_v1((params.bands, total)) else \
                np.lib.format.read_array_header_2_0(fh)
            fh.seek(fh.tell() + band * total * dt.itemsize)
        wk, ww = _NpyWriter(fk, _U32, (total,), header=False), _NpyWriter(fw, wdt, (total,), header=False)
        _merge_band(runs, band, wk, ww)
        wk.close()
        ww.close()
    return band


def finish_minhash_merge(plan: dict[str, Any], out_dir: str | os.PathLike, params: MinHashParams
                         ) -> dict[str, Any]:
    """Reduce, last step: ``params.json`` (marks the folder complete); returns it."""
    total = plan["n_windows"]
    for name in ("band_keys", "band_windows"):
        os.replace(Path(out_dir) / f"{name}{_PARTIAL}", Path(out_dir) / f"{name}.npy")
    summary = {"kind": "tcqa-minhash-index", "format_version": FORMAT_VERSION, "params": params.to_dict(),
               "n_windows": total, "n_docs": plan["n_docs"],
               "n_windows_without_tokens": plan["n_windows_without_tokens"],
               "storage": storage_info(total, params)}
    write_json_atomic(Path(out_dir) / "params.json", summary)
    return summary


def merge_minhash_shards(shard_dirs: Sequence[str | os.PathLike], out_dir: str | os.PathLike,
                         params: MinHashParams, base_dir: str | os.PathLike | None = None,
                         doc_offsets: Sequence[int] | None = None) -> dict[str, Any]:
    """Reduce step: merge shard runs (and optionally an existing index ``base_dir``) into the
    final ``out_dir`` files. Returns the summary also written to ``out_dir/params.json``.

    The same steps an engine runs as tasks (``plan_minhash_merge``, ``start_minhash_merge``,
    ``write_minhash_columns`` and one ``merge_minhash_band`` per band, ``finish_minhash_merge``),
    here one after the other; the bytes are the same either way.

    ``doc_offsets[i]`` (optional) is added to the doc ordinals of ``shard_dirs[i]``, for map steps
    that numbered their docs from 0 before global ordinals were known. ``out_dir`` may be
    ``base_dir`` (each file is replaced after it is written), but a crash part-way then leaves a
    folder without ``params.json`` that must be rebuilt; merging into a new folder and swapping it
    in is safer."""
    plan = plan_minhash_merge(shard_dirs, params, base_dir, doc_offsets)
    start_minhash_merge(plan, out_dir, params)
    write_minhash_columns(plan, out_dir, params)
    for band in range(params.bands):
        merge_minhash_band(plan, out_dir, params, band)
    return finish_minhash_merge(plan, out_dir, params)
