"""``index-corpus`` reduce side: per-bucket n-gram merges, the docs table, the MinHash merge,
and the idempotent commit that moves staged files into the index folder."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tcqa_data.decontam.build.map import _minhash_module, arrow_int64, arrow_repeated_string
from tcqa_data.decontam.core.map_files import MAP_COUNTS, MAP_FORMAT, MAP_HASHES, staged_anchor_file
from tcqa_data.decontam.ngrams import index as ni
from tcqa_data.decontam.ngrams import reduce as nred
from tcqa_data.decontam.textstore.store import STORE_DIR, _key
from tcqa_data.engines import Engine, run_tasks
from tcqa_data.errors import TcqaError
from tcqa_data.io_utils import atomic_path, write_json_atomic
from tcqa_data.outputs import (
    commit_dir,
    fault_point,
    link_or_copy,
    make_own_dir,
    next_generation_dir,
    write_owner,
)
from tcqa_data.progress import progress_bar, rate_text

KIND = "tcqa-ngram-index"
DOCS_ROW_GROUP = 1 << 20
_DOCS_SCHEMA = pa.schema([("doc_ordinal", pa.int64()), ("doc_ref", pa.string()),
                          ("input", pa.string()), ("row", pa.int64())])


def _bucket_task(bucket: int, n: int, stage: str, sources_by_n: dict, groups_by_n: dict, num_buckets: int,
                 provenance: int, old: Any, chunk_pairs: int, dir_bits: int) -> nred.BucketStats:
    """A reduce task: merge one bucket of one n-gram size (of its groups' runs, if the first level
    ran). The run lists come once per build (shared), not per bucket."""
    groups = groups_by_n.get(n)
    sources = (nred.group_sources(os.path.join(stage, nred.GROUPS_DIR, f"n{n}"), bucket, len(groups))
               if groups else sources_by_n[n])
    return nred.reduce_bucket(stage, n, bucket, sources, num_buckets=num_buckets, provenance=provenance,
                              old=old, chunk_pairs=chunk_pairs, dir_bits=dir_bits)


def _bucket_group_task(bucket: int, n: int, group: int, stage: str, sources_by_n: dict, groups_by_n: dict,
                       num_buckets: int, chunk_pairs: int, dir_bits: int, doc_dtype: str) -> int:
    """A first-level reduce task (many runs): one bucket of one group of runs as one run."""
    a, b = groups_by_n[n][group]
    return nred.merge_bucket_group(os.path.join(stage, nred.GROUPS_DIR, f"n{n}"), n, bucket, group,
                                   sources_by_n[n][a:b], dir_bits=dir_bits, num_buckets=num_buckets,
                                   chunk_pairs=chunk_pairs, doc_dtype=doc_dtype)


def _dir_bits(params: dict, cfg: dict, ns: list[int], all_inputs: list[dict], old_manifest: dict | None
              ) -> int:
    """The n-gram directory width: the existing index's on ``--append`` (the bits it dropped are
    gone; build_index refused any other), else ``cfg["ngram_dir_bits"]`` if given, else chosen
    from the map's n-gram counts."""
    if old_manifest is not None:
        return int(old_manifest["ngram_storage"]["dir_bits"])
    if cfg.get("ngram_dir_bits") is not None:
        return int(cfg["ngram_dir_bits"])
    most = max(sum(e["ngrams"][str(n)] for e in all_inputs) for n in ns)
    return ni.choose_dir_bits(most, params["num_buckets"])


def _reduce(out: Path, work: Path, params: dict, cfg: dict, ns: list[int], entries: list[dict],
            old_manifest: dict | None, pool, chunk_pairs: int, quiet: bool,
            engine: Engine | None = None) -> dict[str, Any]:
    stage = work / "stage"
    if stage.exists():
        shutil.rmtree(stage)
    stage.mkdir(parents=True)
    old_inputs = [dict(e, _old=True) for e in (old_manifest or {}).get("inputs", [])]
    all_inputs = old_inputs + sorted((dict(e) for e in entries), key=lambda e: (e["path"], e["sha256"]))
    offset = 0
    starts, shifts = [], []
    for e in all_inputs:
        if e.get("_old"):
            starts.append(e["doc_offset"])
            shifts.append(offset - e["doc_offset"])
        e["doc_offset"] = offset
        offset += e["docs"]
    old = nred.OldIndex(str(out), tuple(starts), tuple(shifts)) if old_manifest is not None else None

    dir_bits = _dir_bits(params, cfg, ns, all_inputs, old_manifest)
    maps = work / "maps"
    sources_by_n: dict[int, tuple] = {}
    for n in ns:
        sources = []
        for e in all_inputs:
            if e.get("_old"):
                continue
            doff = e["doc_offset"]
            # the runs each map reported (a listing per map folder is a metadata round trip per
            # shard on shared storage: ~150 k at 10 TB)
            for key, nd, runs in zip(e["shards"], e["shard_docs"], e["shard_runs"], strict=True):
                run_dir = str(maps / key / "ngrams")
                sources += [nred.RunSource(run_dir, r, doff) for r in range(int(runs[str(n)]))]
                doff += nd
        sources_by_n[n] = tuple(sources)
    # many runs: the first level merges each bucket of each group of runs into one run
    groups_by_n = {n: g for n in ns if (g := nred.run_groups(len(sources_by_n[n])))}
    nb = params["num_buckets"]
    # group-major: a worker's cached run headers serve every bucket of a group
    group_calls = [{"bucket": b, "n": n, "group": g} for n, gs in groups_by_n.items()
                   for g in range(len(gs)) for b in range(nb)]
    bucket_calls = [{"bucket": b, "n": n} for n in ns for b in range(nb)]
    shared = {"stage": str(stage), "sources_by_n": sources_by_n, "groups_by_n": groups_by_n,
              "num_buckets": nb, "chunk_pairs": chunk_pairs, "dir_bits": dir_bits}
    t0 = time.time()
    uniq = {n: 0 for n in ns}
    max_cell = {n: 0 for n in ns}
    with progress_bar(quiet) as bar:
        tid = bar.add_task("merging", total=len(group_calls) + len(bucket_calls), rate="")

        finished = [0]

        def task_done(i: int, k: Any) -> None:
            finished[0] += 1
            bar.update(tid, advance=1, rate=rate_text(finished[0], time.time() - t0, "tasks"))

        if group_calls:
            doc_dtype = "uint32" if offset < 2**32 else "int64"
            run_tasks(_bucket_group_task, group_calls, desc="index-reduce-groups",
                      shared={**shared, "doc_dtype": doc_dtype}, engine=engine, pool=pool, on_done=task_done,
                      chunksize=8)
        stats = run_tasks(_bucket_task, bucket_calls, desc="index-reduce",
                          shared={**shared, "provenance": params["provenance_docs"], "old": old},
                          engine=engine, pool=pool, on_done=task_done, chunksize=8)
        for call, k in zip(bucket_calls, stats, strict=True):
            uniq[call["n"]] += k.rows
            max_cell[call["n"]] = max(max_cell[call["n"]], k.max_cell)
    shutil.rmtree(stage / nred.GROUPS_DIR, ignore_errors=True)  # scratch: free the disk now

    _write_docs_table(stage / "docs.parquet", all_inputs, out, maps)
    _stage_map_anchors(stage / STORE_DIR, all_inputs, maps)

    mh_counts = None
    if params["minhash"] is not None:
        mh_counts = _reduce_minhash(stage / "minhash", all_inputs, out, maps, params, old_manifest,
                                    pool=pool, engine=engine)

    inputs_out = []
    for e in all_inputs:
        e = {k: v for k, v in e.items()
             if k not in ("_old", "shards", "shard_docs", "shard_runs", "shard_anchors", "hf")}
        inputs_out.append(e)
    docs_total = sum(e["docs"] for e in all_inputs)
    counts = {
        "inputs": len(all_inputs),
        "docs": docs_total,
        "text_chars": sum(e.get("text_chars", 0) for e in all_inputs),
        "input_bytes": sum(e["size"] for e in all_inputs),
        # false-positive rates of the stored keys, computed from this index's cells (index-info)
        "ngrams": {str(n): {"total": sum(e["ngrams"][str(n)] for e in all_inputs), "unique": uniq[n],
                            **ni.false_positive_rates(uniq[n], max_cell[n], params["num_buckets"], dir_bits)}
                   for n in ns},
    }
    if mh_counts is not None:
        counts["minhash"] = mh_counts
    manifest = dict(params)
    manifest.update({"kind": KIND, "inputs": inputs_out, "counts": counts,
                     "ngram_storage": ni.storage_info(params["num_buckets"], dir_bits)})
    return manifest


def _stage_map_anchors(dst: Path, all_inputs: list[dict], maps: Path) -> None:
    """The maps' text-store anchors of each new input (``textstore.anchors.map_anchor_batches``),
    moved next to the index's text store by ``_commit``; an input whose maps did not all winnow
    (another reader) gets none. Hard links, not moves: the map folders stay whole, so a run killed
    after this step (the reduce's stage is redone, the finished maps reused) finds them again."""
    for e in all_inputs:
        if e.get("_old") or not e.get("shard_anchors"):
            continue
        dst.mkdir(parents=True, exist_ok=True)
        key = _key(e)
        for i, shard in enumerate(e["shards"]):
            for name in (MAP_HASHES, MAP_COUNTS):
                target = dst / staged_anchor_file(key, i, name)
                if not target.is_file():
                    link_or_copy(maps / shard / name, target)
        write_json_atomic(dst / f"{key}.map.json", {"shard_docs": [int(n) for n in e["shard_docs"]],
                                                     "map_format": MAP_FORMAT})


def _as_type(column: pa.ChunkedArray, typ: pa.DataType) -> pa.ChunkedArray:
    # cast only when needed: the first cast imports pyarrow.compute (~0.25 CPU-s per process)
    return column if column.type == typ else column.cast(typ)


def _write_docs_table(path: Path, all_inputs: list[dict], out: Path, maps: Path) -> None:
    """docs.parquet in canonical order, in fixed-size row groups (bytes independent of how
    the rows arrived: an append writes the same file as a full rebuild)."""
    old_reader = None
    if any(e.get("_old") for e in all_inputs):
        old_reader = _RowStream(pq.ParquetFile(out / "docs.parquet").iter_batches(
            batch_size=65536, columns=["doc_ref", "row"]))
    buf: list[pa.Table] = []
    buffered = 0
    with atomic_path(path) as tmp:
        with pq.ParquetWriter(tmp, _DOCS_SCHEMA, compression="zstd") as pw:
            def flush(final: bool) -> None:
                nonlocal buf, buffered
                if not buf:
                    return
                t = pa.concat_tables(buf)
                while len(t) >= DOCS_ROW_GROUP or (final and len(t)):
                    pw.write_table(t.slice(0, DOCS_ROW_GROUP), row_group_size=DOCS_ROW_GROUP)
                    t = t.slice(DOCS_ROW_GROUP)
                buf, buffered = ([t] if len(t) else []), len(t)

            for e in all_inputs:
                if e.get("_old"):
                    parts = list(old_reader.take(e["docs"]))
                else:
                    parts = [pq.ParquetFile(maps / key / "docs.parquet").read() for key in e["shards"]]
                ordinal = e["doc_offset"]
                for t in parts:
                    k = len(t)
                    buf.append(pa.Table.from_arrays([
                        arrow_int64(np.arange(ordinal, ordinal + k)),
                        _as_type(t.column("doc_ref"), pa.string()),
                        arrow_repeated_string(e["path"], k),
                        _as_type(t.column("row"), pa.int64()),
                    ], schema=_DOCS_SCHEMA))
                    ordinal += k
                    buffered += k
                    if buffered >= DOCS_ROW_GROUP:
                        flush(False)
            flush(True)


class _RowStream:
    """Hands out exactly k rows at a time from an iterator of record batches."""

    def __init__(self, batches: Iterator[pa.RecordBatch]) -> None:
        self._it = batches
        self._rest: pa.Table | None = None

    def take(self, k: int) -> Iterator[pa.Table]:
        while k > 0:
            if self._rest is None or len(self._rest) == 0:
                try:
                    self._rest = pa.Table.from_batches([next(self._it)])
                except StopIteration as e:
                    raise TcqaError("existing index docs.parquet is shorter than its manifest") from e
            t = self._rest.slice(0, k)
            self._rest = self._rest.slice(len(t))
            k -= len(t)
            yield t


def _minhash_merge_task(part: str | int | list, plan: dict, out_dir: str, mh_params: dict
                        ) -> str | int | list:
    """One task of the MinHash reduce: ``"columns"`` (the per-window files), a band number,
    ``["group", band, group]`` (a run group's merge, before the bands) or ``["range", band,
    range]`` (a key range's merge, before its band packs the ranges)."""
    from tcqa_data.decontam import minhash as mh

    params = mh.MinHashParams.from_dict(mh_params)
    if part == "columns":
        mh.write_minhash_columns(plan, out_dir, params)
        return part
    if isinstance(part, list):
        step = mh.merge_minhash_group if part[0] == "group" else mh.merge_minhash_range
        return step(plan, out_dir, params, part[1], part[2])
    return mh.merge_minhash_band(plan, out_dir, params, int(part))


def _reduce_minhash(stage: Path, all_inputs: list[dict], out: Path, maps: Path, params: dict,
                    old_manifest: dict | None, pool=None, engine: Engine | None = None) -> dict[str, Any]:
    """Merge the MinHash map shards (shard-local ordinals, moved by ``doc_offsets``) and, on
    ``--append``, the existing ``minhash/`` folder, whose docs come first. The per-window files
    and each band are separate tasks (on the engine, or the local pool), like the n-gram
    buckets: a band's merge reads only that band's rows of every run."""
    mh = _minhash_module()
    dirs, offsets = [], []
    for e in all_inputs:
        if e.get("_old"):
            continue
        doff = e["doc_offset"]
        for key, nd in zip(e["shards"], e["shard_docs"], strict=True):
            dirs.append(str(maps / key / "minhash-0"))
            offsets.append(doff)
            doff += nd
    base = str(out / "minhash") if old_manifest is not None else None
    mparams = mh.MinHashParams.from_dict(params["minhash"])
    plan = mh.plan_minhash_merge(dirs, mparams, base_dir=base, doc_offsets=offsets)
    mh.start_minhash_merge(plan, stage, mparams)
    # many runs: each band's run groups are merged first (tasks of their own); many windows: each
    # band's key ranges are merged apart, then the band task packs them
    groups = [["group", b, g] for b in range(mparams.bands) for g in range(len(plan["groups"]))]
    ranges = [["range", b, r] for b in range(mparams.bands) for r in range(plan["ranges"])] \
        if plan["ranges"] > 1 else []
    for desc, parts in (("index-minhash-groups", groups), ("index-minhash-ranges", ranges),
                        ("index-minhash-reduce", ["columns", *range(mparams.bands)])):
        if parts:
            shared = {"plan": plan, "out_dir": str(stage), "mh_params": params["minhash"]}
            run_tasks(_minhash_merge_task, [{"part": p} for p in parts], desc=desc, shared=shared,
                      engine=engine, pool=pool)
    summary = mh.finish_minhash_merge(plan, stage, mparams)
    # "storage": the lossy parts of the MinHash files and their computed error rates (index-info)
    return {k: v for k, v in summary.items()
            if k in ("n_windows", "n_docs", "n_windows_without_tokens", "storage")}


def _commit(out: Path, manifest: dict, ns: list[int], text_store: Callable[[Path], None],
            base: dict | None) -> dict[str, Any]:
    """Make the staged build the index, whole or not at all; returns the sealed manifest.

    The next generation is assembled beside ``out`` (``outputs.next_generation_dir``): the staged
    files moved in, on ``--append`` the previous generation's text store files linked in (hard
    links: no copy, and the previous generation keeps its own), its manifest written, the text
    store pass run on it (``text_store``), and the manifest sealed with every file's size and
    checksum (``index_files.seal``). Only then is it swapped with ``out`` in one atomic step
    (``outputs.commit_dir``), which also drops the previous generation and its ``_work``. Killed at
    any point before the swap, ``out`` is still the previous generation, complete and readable;
    every step is idempotent, so a rerun (``_work/commit.json``) finishes the same commit.
    ``base``: the manifest of the generation this one extends (``--append``), else None.
    """
    from tcqa_data.decontam.index_files import seal

    work = out / "_work"
    stage = work / "stage"
    nxt = make_own_dir(next_generation_dir(out), "the index's next generation")  # never a link
    for n in ns:
        src = stage / "ngrams" / f"n{n}"
        if src.is_dir():
            dst = nxt / "ngrams" / f"n{n}"
            dst.mkdir(parents=True, exist_ok=True)
            for f in sorted(src.iterdir()):
                if f.name.startswith(".") and f.name.endswith(".tmp"):
                    f.unlink()  # left by a reduce task killed mid-write; its retry wrote the file
                    continue
                os.replace(f, dst / f.name)
    if (stage / "docs.parquet").exists():
        os.replace(stage / "docs.parquet", nxt / "docs.parquet")
    if (stage / "minhash").is_dir():
        if (nxt / "minhash").exists():
            shutil.rmtree(nxt / "minhash")
        os.replace(stage / "minhash", nxt / "minhash")
    if (stage / STORE_DIR).is_dir():  # the maps' anchors, for the text store pass (it deletes them)
        (nxt / STORE_DIR).mkdir(exist_ok=True)
        for f in sorted((stage / STORE_DIR).iterdir()):
            os.replace(f, nxt / STORE_DIR / f.name)
    if base is not None and (out / STORE_DIR).is_dir():
        # the pass keeps the previous inputs' files and writes only the new ones (and replaces
        # files by rename, never in place, so the links leave the previous generation's bytes alone)
        (nxt / STORE_DIR).mkdir(exist_ok=True)
        for f in sorted((out / STORE_DIR).iterdir()):
            if f.is_file() and not f.name.startswith(".") and not (nxt / STORE_DIR / f.name).exists():
                link_or_copy(f, nxt / STORE_DIR / f.name)
    write_json_atomic(nxt / ni.MANIFEST, manifest)  # the text store pass reads it
    fault_point("index-staged")
    text_store(nxt)
    fault_point("index-text-store")
    sealed = seal(manifest, nxt, reuse=(out, base) if base is not None else None)
    # no fsync: a kill leaves the page cache whole, and after a power loss the seal reports a file
    # that did not reach the disk (its size at every open, its bytes with index-info --verify),
    # where an fsync of the whole index cost ~20% of a small build
    write_json_atomic(nxt / ni.MANIFEST, sealed)
    write_owner(nxt, "index-corpus")  # beside the sealed files (index_files leaves it out)
    fault_point("index-sealed")
    commit_dir(nxt, out)
    fault_point("index-committed")
    return sealed


def _regenerate(out: Path, manifest: dict, text_store: Callable[[Path], None]) -> dict[str, Any]:
    """The index as it is with its text store redone (a rerun that asks for another
    ``--text-store`` mode), as a new generation: every file hard-linked beside it, the text store
    pass run there (it replaces files by rename, so the links leave the current generation's bytes
    alone), sealed, then swapped in like any commit. Killed before the swap, the index is as it was
    and the leftover is removed by the next run."""
    from tcqa_data.decontam.index_files import FILES_KEY, SEAL_KEY, seal

    nxt = next_generation_dir(out)
    if nxt.is_symlink():  # a planted link: refused, never followed (remove_stale_staging)
        make_own_dir(nxt, "the index's next generation")
    shutil.rmtree(nxt, ignore_errors=True)
    shutil.copytree(out, nxt, copy_function=link_or_copy, ignore=shutil.ignore_patterns("_work"))
    bare = {k: v for k, v in manifest.items() if k not in (FILES_KEY, SEAL_KEY)}
    write_json_atomic(nxt / ni.MANIFEST, bare)  # the text store pass reads it
    text_store(nxt)
    sealed = seal(bare, nxt, reuse=(out, manifest))
    write_json_atomic(nxt / ni.MANIFEST, sealed)
    write_owner(nxt, "index-corpus")
    fault_point("index-sealed")
    commit_dir(nxt, out)
    return sealed
