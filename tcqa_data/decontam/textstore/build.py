"""Building the text store (``build_text_store``): after the index commits, one task per input
(the build's engine, or local processes) writes its doc locations or a copy of its texts, and its
anchor tables (``anchors``); ``meta.json`` is written last. See the package docstring.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tcqa_data.checksums import BLOCK_BYTES, digest_blocks
from tcqa_data.decontam.textstore.anchor_merge import (
    MERGED_MAX_DOCS,
    anchor_overlaps,
    anchor_sources,
    plan_anchor_parts,
    write_anchor_part,
)
from tcqa_data.decontam.textstore.anchors import (
    _NotIndexOrder,
    _winnowed_jsonl,
    _winnowed_texts,
    _write_anchor_runs,
    map_anchor_batches,
)
from tcqa_data.decontam.textstore.store import (
    META,
    STORE_DIR,
    _anchor_files,
    _entry_id,
    _id_key,
    _key,
    merged_covers,
)
from tcqa_data.engines import quiet_worker, run_tasks, stop_pool
from tcqa_data.errors import ConfigError, TcqaError
from tcqa_data.io_utils import atomic_path, read_json, write_json_atomic, write_npy_atomic

if TYPE_CHECKING:
    from tcqa_data.engines import Engine

MODES = ("auto", "copy", "none")
# 4: the inputs' anchors merged into one table of key-range parts (meta "anchors"); 3: packed
# anchor runs per input (read, and merged by a build without reading the corpus again); 2: uint64
# anchor entries (read; a build redoes the store)
STORE_VERSION = 4
_REUSED_VERSIONS = (3, 4)
# Runs not yet in the merged anchor table that make a build merge them (with the table): below,
# a query looks them up one by one (~30 ms each against a 2 M k-gram query batch, 10 GB index),
# while merging costs every build ~0.3 CPU-s per run (144 CPU-s for 487 runs) and ~350 MB of
# memory per task; merged at 10 runs, the 206 MB full build took 9% more CPU. So a small index
# (or a small append) keeps its runs, and they are merged once there are this many.
ANCHOR_MERGE_RUNS = 16
# Most runs one merge task reads: each part's task reads its key range of every run, so a
# one-level merge grows with parts x runs, the square of the corpus. Past this many runs the merge
# runs in two levels, as the n-gram reduce (GROUP_RUNS) and the MinHash band merge do: each group
# of at most this many runs (in doc order) is merged into an intermediate table (key-range parts,
# global ordinals), then each part of the final table reads its key range of the group tables
# (about one part each). Work per run is then flat (level 1: parts of a group x its runs) and the
# table is the same bytes as one level's (the same cuts, planned from the runs; the same entries).
ANCHOR_MERGE_GROUP = 4096
COPY_ROW_GROUP = 256  # docs per row group of a copy: ~1 MB of text for Wikipedia-sized docs
_SCAN_CHUNK = 64 << 20


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ConfigError(f"--text-store must be one of {', '.join(MODES)}, not {mode!r}")
    return mode


def _doc_rows(index_dir: Path, entry: dict[str, Any]) -> np.ndarray:
    """The ``row`` (1-based line/row) of each doc of one input, from docs.parquet (row groups
    outside the input's ordinals are skipped by their statistics)."""
    lo, k = int(entry["doc_offset"]), int(entry["docs"])
    # row groups read one by one, columns as buffers: ``pq.read_table(filters=...)`` and arrow's
    # ``to_numpy`` import pandas (~1.5 CPU-s, most of a 20 MB build's text store pass)
    pf = pq.ParquetFile(index_dir / "docs.parquet")
    col = pf.schema_arrow.get_field_index("doc_ordinal")
    ords, rows_ = [], []
    for g in range(pf.metadata.num_row_groups):
        st = pf.metadata.row_group(g).column(col).statistics
        if st is not None and st.has_min_max and (st.max < lo or st.min >= lo + k):
            continue
        t = pf.read_row_group(g, columns=["doc_ordinal", "row"])
        o, r = _int64_column(t.column("doc_ordinal")), _int64_column(t.column("row"))
        sel = (o >= lo) & (o < lo + k)
        ords.append(o[sel])
        rows_.append(r[sel])
    o = np.concatenate(ords) if ords else np.zeros(0, np.int64)
    rows = np.concatenate(rows_)[np.argsort(o, kind="stable")] if rows_ else np.zeros(0, np.int64)
    if len(rows) != k:
        raise TcqaError(f"{index_dir}/docs.parquet: {len(rows)} rows for input {entry['path']}, "
                        f"manifest says {k}")
    return rows.astype(np.int64)


def _int64_column(col: pa.ChunkedArray) -> np.ndarray:
    """An int64 column without nulls as numpy, from its buffers (no pandas import)."""
    parts = [np.frombuffer(c.buffers()[1], dtype=np.int64, count=c.offset + len(c))[c.offset:]
             for c in col.chunks if len(c)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def jsonl_line_offsets(path: str | os.PathLike, lines: np.ndarray) -> np.ndarray:
    """Byte offset of each 1-based line number in ``lines`` (ascending) of an uncompressed file."""
    lines = np.asarray(lines, dtype=np.int64)
    out = np.zeros(len(lines), dtype=np.int64)
    # line k starts right after newline number k-1 (1-based); line 1 starts at 0
    need = lines - 2  # index of the newline ending line k-1
    done = 0
    seen, base = 0, 0  # newlines seen before this chunk, byte offset of the chunk
    with open(path, "rb") as fh:
        while done < len(lines):
            while done < len(lines) and need[done] < seen:
                done += 1  # line 1 (need -1): offset 0
            buf = fh.read(_SCAN_CHUNK)
            if not buf:
                break
            nl = np.flatnonzero(np.frombuffer(buf, dtype=np.uint8) == 10)
            hi = np.searchsorted(need, seen + len(nl), side="left")
            if hi > done:
                out[done:hi] = base + nl[need[done:hi] - seen] + 1
                done = hi
            seen += len(nl)
            base += len(buf)
    if done < len(lines):
        raise TcqaError(f"{path}: has fewer lines than the index recorded; was it changed after indexing?")
    return out


def _copy_column(texts: list[str]) -> pa.Array:
    try:
        return pa.array(texts, pa.string())
    except UnicodeEncodeError:
        # a lone surrogate (a JSON "\ud800" escape) has no UTF-8: the copy holds U+FFFD for it
        return pa.array([t.encode("utf-8", "surrogatepass").decode("utf-8", "replace") for t in texts],
                        pa.string())


def _write_copy(path: Path, texts: Iterable[str]) -> int:
    schema = pa.schema([("text", pa.string())])
    n = 0
    with atomic_path(path) as tmp:
        with pq.ParquetWriter(tmp, schema, compression="zstd") as pw:
            buf: list[str] = []
            for t in texts:
                buf.append(t)
                if len(buf) >= COPY_ROW_GROUP:
                    pw.write_table(pa.table({"text": _copy_column(buf)}), row_group_size=COPY_ROW_GROUP)
                    n += len(buf)
                    buf = []
            if buf:
                pw.write_table(pa.table({"text": _copy_column(buf)}), row_group_size=COPY_ROW_GROUP)
                n += len(buf)
    return n


def _copied_texts(path: Path) -> Iterable[str]:
    for batch in pq.ParquetFile(path).iter_batches(batch_size=COPY_ROW_GROUP, columns=["text"]):
        yield from batch.column(0).to_pylist()


def _input_texts(entry: dict[str, Any], manifest: dict[str, Any], hf: dict[str, Any] | None) -> Iterable[str]:
    """The input's documents again, in index order (the build validated them: skip mode)."""
    from tcqa_data.decontam.readers.documents import iter_documents
    from tcqa_data.decontam.readers.hf_stream import iter_hf_documents
    from tcqa_data.decontam.readers.inputs import CorpusInput

    tf, idf = manifest.get("text_field", "text"), manifest.get("id_field")
    if entry["format"] == "hf":
        if hf is None:
            raise TcqaError(f"{entry['path']}: a Hugging Face input needs its dataset name to be copied")
        docs = iter_hf_documents(hf["name"], hf.get("config"), hf.get("split", "train"), tf, idf,
                                 on_error="skip")
    else:
        docs = iter_documents(CorpusInput(entry["path"], entry["format"], int(entry["size"])), tf, idf,
                              on_error="skip")
    return (d.text for d in docs)


def build_text_store(index_dir: str | os.PathLike, mode: str = "auto", *,
                     hf: dict[str, Any] | None = None, workers: int = 1,
                     engine: Engine | None = None) -> dict[str, Any]:
    """Build (or complete) ``INDEX_DIR/textstore`` for a finished index; returns its meta.

    ``hf``: ``{"name", "config", "split"}`` of the index's Hugging Face input, if any.
    ``workers``: processes, one input each (the files do not depend on it). ``engine``: run the
    inputs as its tasks instead (Ray: spread over the cluster like the map; the same files).
    """
    check_mode(mode)
    root = Path(index_dir)
    store = root / STORE_DIR
    if mode == "none":
        # maps' anchors staged by an earlier build whose pass never ran are of no use now
        for f in store.glob("*.map*") if store.is_dir() else ():
            f.unlink()
        return {}
    manifest = read_json(root / "manifest.json")
    old = read_json(store / META) if (store / META).is_file() else {"inputs": {}}
    if old.get("version") not in _REUSED_VERSIONS:
        old = {"inputs": {}}
    # the merged anchor table is reused if it holds only the manifest's inputs as they are now and
    # its files are there; else the anchors of the inputs it held are computed again from text
    merged = old.get("anchors") if merged_covers(old, manifest) and _files_ok(store, old["anchors"]) else None
    entries, todo = _reusable(store, manifest, old, mode, merged)
    if merged is not None and any(_id_key(_entry_id(e, manifest)) in _merged_ids(merged) for e in todo):
        # an input it holds is redone (its locations were lost): its entries would count twice
        merged = None
        entries, todo = _reusable(store, manifest, old, mode, merged)
    if todo:
        store.mkdir(parents=True, exist_ok=True)
    # inputs are independent: one task per input (the pass reads and hashes every doc)
    shared = {"root_dir": str(root), "manifest": manifest, "mode": mode, "hf": hf}
    recs = _run(_store_input, [{"e": e} for e in todo], "index-textstore", shared, workers, engine)
    for e, rec in zip(todo, recs, strict=True):
        entries[_key(e)] = rec
    generation = int(old["anchors"]["generation"]) + 1 if old.get("anchors") else 1
    merged = _merge_anchors(root, manifest, entries, merged, generation, workers, engine)
    entries = dict(sorted(entries.items()))
    meta: dict[str, Any] = {"version": STORE_VERSION, "mode": mode, "inputs": entries}
    if merged is not None:
        meta["anchors"] = merged
    # meta.json first, then the files it no longer names (runs merged, an older merged table,
    # inputs gone): killed in between, the store is the new one with files to spare
    write_json_atomic(store / META, meta)
    if store.is_dir():
        keep = {META} | {r["file"] for r in entries.values() if "file" in r} \
            | {r["blocks"]["file"] for r in entries.values() if "blocks" in r} \
            | {f for r in [*entries.values(), *([merged] if merged else [])] for f in _anchor_files(r)}
        for f in store.iterdir():
            if f.name not in keep and not f.name.startswith("."):
                f.unlink()
    return meta


def _merged_ids(merged: dict[str, Any]) -> set[str]:
    return {_id_key(i) for i in merged["inputs"]}


def _reusable(store: Path, manifest: dict[str, Any], old: dict[str, Any], mode: str,
              merged: dict[str, Any] | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The old records still valid (by input key), and the inputs to (re)do. An input's anchors
    are valid in its own runs, in the merged table ``merged``, or when it has none."""
    held = _merged_ids(merged) if merged is not None else set()
    entries: dict[str, Any] = {}
    todo: list[dict[str, Any]] = []
    for e in manifest["inputs"]:
        key = _key(e)
        prev = old["inputs"].get(key)
        if prev is not None and prev.get("id") == _entry_id(e, manifest) \
                and prev.get("kind") == _kind(e, manifest, mode) and _files_ok(store, prev) \
                and (prev.get("anchors") or not prev.get("anchor_entries") or _id_key(prev["id"]) in held):
            entries[key] = prev
        else:
            todo.append(e)
    return entries, todo


def _run(fn: Any, calls: list[dict[str, Any]], desc: str, shared: dict[str, Any], workers: int,
         engine: Engine | None) -> list[Any]:
    """The pass's tasks on ``engine``, else local processes (``workers`` > 1), else inline."""
    if engine is None and workers > 1 and len(calls) > 1:
        from concurrent.futures import ProcessPoolExecutor

        pool = ProcessPoolExecutor(max_workers=min(workers, len(calls)), initializer=quiet_worker,
                                   initargs=(os.getpid(),))
        try:
            results = run_tasks(fn, calls, desc=desc, shared=shared, pool=pool)
        except BaseException:
            stop_pool(pool, kill=True)
            raise
        stop_pool(pool, kill=False)
        return results
    return run_tasks(fn, calls, desc=desc, shared=shared, engine=engine if calls else None)


def _merge_anchors(root: Path, manifest: dict[str, Any], entries: dict[str, Any],
                   merged: dict[str, Any] | None, generation: int, workers: int, engine: Engine | None
                   ) -> dict[str, Any] | None:
    """One anchor table for all inputs (a query then looks each k-gram up once, not once per
    input's run): the existing merged table and the inputs' runs, merged into key-range parts of
    generation ``generation`` (one task each; in two levels past ``ANCHOR_MERGE_GROUP`` runs).
    Returns the merged table's meta (``merged`` when there is nothing to merge); the merged
    inputs' records then list no runs."""
    inputs = sorted(manifest["inputs"], key=lambda e: int(e["doc_offset"]))
    runs = [(entries[_key(e)], int(e["doc_offset"])) for e in inputs if entries[_key(e)].get("anchors")]
    n_docs = max((int(e["doc_offset"]) + int(e["docs"]) for e in inputs), default=0)
    unmerged = sum(len(r["anchors"]) for r, _ in runs)
    if unmerged < ANCHOR_MERGE_RUNS or (merged is None and unmerged < 2):
        return merged  # few runs to look up beside the table (or one table in all): not worth a merge
    if n_docs >= MERGED_MAX_DOCS:
        # global ordinals do not fit the 32-bit id of a ``hash << 32 | doc`` entry: these inputs
        # keep their runs (input-local ids), looked up one by one
        return merged
    store = root / STORE_DIR
    # the cuts of a one-level merge of the table and the runs, whichever the levels
    plan = plan_anchor_parts(store, anchor_sources(merged, runs), n_docs)
    flat, ranged = anchor_sources(None, runs), anchor_sources(merged, [])
    groups: list[dict[str, Any]] = []
    if len(flat) > ANCHOR_MERGE_GROUP:
        for g in range(0, len(flat), ANCHOR_MERGE_GROUP):  # level 1: a table per group of runs
            group = flat[g:g + ANCHOR_MERGE_GROUP]
            gplan = plan_anchor_parts(store, group, n_docs)
            name = f"anchors-g{generation:04d}-l{g // ANCHOR_MERGE_GROUP:05d}"
            gparts = _write_anchor_parts(root, gplan, group, [], name, "index-textstore-merge-groups",
                                         workers, engine)
            groups += anchor_sources({"dir_bits": gplan["dir_bits"], "id_bits": gplan["id_bits"],
                                      "parts": gparts}, [])
        flat = []
    parts = _write_anchor_parts(root, plan, flat, ranged + groups, f"anchors-g{generation:04d}",
                                "index-textstore-merge", workers, engine)
    for s in groups:  # intermediate: no meta names them (a kill leaves them to the cleanup)
        for f in _anchor_files({"anchors": [s]}):
            (store / f).unlink(missing_ok=True)
    entries_n = plan["entries"]
    for rec, _ in runs:
        key = _key(rec["id"])
        entries[key] = {k: v for k, v in rec.items() if k != "anchor_chance_match_rate"} | {"anchors": []}
    return {"generation": generation, "entries": entries_n, "dir_bits": plan["dir_bits"],
            "id_bits": plan["id_bits"],
            # a query k-gram absent from the corpus matches one of the entries' 32-bit hashes by chance
            "chance_match_rate": entries_n / 2.0 ** 32,
            "inputs": [_entry_id(e, manifest) for e in inputs],
            "parts": parts}


def _write_anchor_parts(root: Path, plan: dict[str, Any], flat: list[dict[str, Any]],
                        ranged: list[dict[str, Any]], prefix: str, desc: str, workers: int,
                        engine: Engine | None) -> list[dict[str, Any]]:
    """The parts of a table planned by ``plan_anchor_parts`` (one task each), named ``prefix-NNNNN``,
    from the runs ``flat`` (every task reads them) and the key-range parts ``ranged`` (a task gets
    those that meet its range); returns their meta (name, entries, cells)."""
    meets = anchor_overlaps(ranged, plan["dir_bits"], plan["ranges"])
    calls = [{"cells": c, "name": f"{prefix}-{i:05d}", "ranged": r}
             for i, (c, r) in enumerate(zip(plan["ranges"], meets, strict=True))]
    shared = {"root_dir": str(root), "sources": flat, "dir_bits": plan["dir_bits"],
              "id_bits": plan["id_bits"]}
    parts = _run(write_anchor_part, calls, desc, shared, workers, engine)
    n = sum(p["entries"] for p in parts)
    if n != plan["entries"]:
        raise TcqaError(f"{root / STORE_DIR}: merged anchor table holds {n} entries, its sources "
                        f"{plan['entries']}")
    return [{"name": p["name"], "entries": p["entries"], "cells": p["cells"]} for p in parts]


def _store_input(root_dir: str, e: dict[str, Any], manifest: dict[str, Any], mode: str,
                 hf: dict[str, Any] | None) -> dict[str, Any]:
    """Write one input's text store files (locations or copy, and anchors); returns its meta entry."""
    root = Path(root_dir)
    store = root / STORE_DIR
    key = _key(e)
    kind = _kind(e, manifest, mode)
    rec: dict[str, Any] = {"id": _entry_id(e, manifest), "kind": kind, "format": e["format"],
                           "path": e["path"]}
    if kind in ("offsets", "rows", "file"):
        p = os.path.abspath(e["path"])
        st = os.stat(p)
        rec.update({"abs_path": p, "size": st.st_size, "mtime_ns": st.st_mtime_ns})
        # what each read of it is checked against (a size and mtime can be kept by an edit)
        whole, blocks, size = digest_blocks(p)
        if size != st.st_size:
            raise TcqaError(f"{p}: corpus file changed while the text store was written; rerun index-corpus")
        rec["blocks"] = {"file": f"{key}.blocks.npy", "block_bytes": BLOCK_BYTES, "xxh3": whole}
        write_npy_atomic(store / rec["blocks"]["file"], blocks)
    scheme, seed = manifest["normalization"], int(manifest["hash"]["seed"])
    # the build's map winnowed this input's docs already (its compiled JSONL path): no second read
    staged = map_anchor_batches(store, key, int(e["docs"]))
    if kind == "offsets":
        rec["file"] = f"{key}.offsets.npy"
        rows = _doc_rows(root, e)
        write_npy_atomic(store / rec["file"], jsonl_line_offsets(e["path"], rows))
        if staged is not None:
            rec["anchors"] = _write_anchor_runs(store, key, staged, int(e["docs"]))
        elif _fast_anchors(e, manifest):
            try:
                rec["anchors"] = _write_anchor_runs(
                    store, key, _winnowed_jsonl(e["path"], int(e["size"]), manifest.get("text_field", "text"),
                                                seed, rows), int(e["docs"]))
            except _NotIndexOrder:
                pass  # the Python reader below decides (skipped ids, or a changed input: its error)
    elif kind == "rows":
        rec["file"] = f"{key}.rows.npy"
        write_npy_atomic(store / rec["file"], _doc_rows(root, e) - 1)
    if "anchors" not in rec:  # the Python reader: a str per doc
        counted = [0]

        def texts() -> Iterable[str]:
            for t in _input_texts(e, manifest, hf):
                counted[0] += 1
                yield t

        if kind == "copy":
            # the input is read once; the anchors are the map's, or read from the (local, fast) copy
            rec["file"] = f"{key}.texts.parquet"
            _write_copy(store / rec["file"], texts())
            batches = staged if staged is not None else _winnowed_texts(
                _copied_texts(store / rec["file"]), scheme, seed)
        else:
            batches = _winnowed_texts(texts(), scheme, seed)
        rec["anchors"] = _write_anchor_runs(store, key, batches, int(e["docs"]))
        if counted[0] != int(e["docs"]):
            raise TcqaError(f"{e['path']}: read {counted[0]} documents for the text store, the index has "
                            f"{e['docs']}; was the input changed after indexing?")
    rec["anchor_entries"] = sum(r["entries"] for r in rec["anchors"])
    # a query k-gram absent from a run matches one of its n entries' 32-bit hashes by chance
    rec["anchor_chance_match_rate"] = rec["anchor_entries"] / 2.0 ** 32
    return rec


def _fast_anchors(e: dict[str, Any], manifest: dict[str, Any]) -> bool:
    """True when a JSONL input's anchors come from the compiled reader (``_winnowed_jsonl``): the
    rows of docs.parquet then say which lines are docs, so an id field needs no reading."""
    from tcqa_data.decontam.readers.jsonl_batches import normalized_batches_supported

    return normalized_batches_supported(e["format"], manifest.get("text_field", "text"), None,
                                        manifest["normalization"])


def _kind(e: dict[str, Any], manifest: dict[str, Any], mode: str) -> str:
    """How one input's texts are kept: in place (offsets, rows, file) or a copy. A copy for a
    compressed or Arrow input, an input read by URL (no local file to come back to) and a nested
    text field (``a.b``: the in-place readers take a top-level one)."""
    from tcqa_data.decontam.readers.storage import is_url

    if mode == "copy" or is_url(e["path"]) or "." in manifest.get("text_field", "text"):
        return "copy"
    return {"jsonl": "offsets", "parquet": "rows", "txt": "file"}.get(e["format"], "copy")


def _files_ok(store: Path, rec: dict[str, Any]) -> bool:
    files = ([rec["file"]] if "file" in rec else []) + _anchor_files(rec) \
        + ([rec["blocks"]["file"]] if "blocks" in rec else [])
    return all((store / f).is_file() for f in files)
