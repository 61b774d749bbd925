"""``index-corpus``: readers -> map (per input shard) -> reduce (per bucket) -> commit.

Work directory ``INDEX_DIR/_work`` (removed when the build completes)::

    plan.json                  parameters of the build in progress (resume only if equal)
    maps/<key>/                one map output per input shard: runs, docs.parquet, minhash part,
                               done.json (written last: a shard without it is redone)
    stage/                     reduce output (ngrams/, docs.parquet, minhash/)
    commit.json                the final manifest, written before the staged files move in

Doc ordinals follow the order of inputs (the first build's sorted by path, then each
``--append``'s new inputs after the indexed ones, sorted by path) and the order of documents in
each input, so they never depend on workers or sharding. Existing ordinals never move (the
MinHash merge relies on that too), so appending inputs that sort after the indexed ones (new
shards) is byte-identical to a full rebuild; otherwise only the doc ordinals differ.
A kill -9 at any point leaves either the old complete index or no manifest; a rerun with the
same parameters reuses finished map shards, and finishes an interrupted commit.
"""

from __future__ import annotations

import hashlib
import os
import queue
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tcqa_data import FORMAT_VERSION, __version__
from tcqa_data.decontam import ngram_index as ni
from tcqa_data.decontam.engines import Engine, check_writable_dir, local_output_dir, make_engine
from tcqa_data.decontam.hashing import HASH_NAME
from tcqa_data.decontam.normalize import check_scheme
from tcqa_data.decontam.readers import (
    CorpusInput,
    InputShard,
    SkipStats,
    iter_documents,
    iter_hf_documents,
    resolve_inputs,
    split_input,
)
from tcqa_data.errors import ConfigError, IndexMismatchError, TcqaError
from tcqa_data.io_utils import atomic_path, read_json, write_json_atomic
from tcqa_data.progress import progress_bar, rate_text

KIND = "tcqa-ngram-index"
# Texts hashed together (bounds the per-batch numpy arrays, ~10 x this in memory).
BATCH_CHARS = 4_000_000
# Uncompressed JSONL / Parquet inputs are cut into shards of this size so one big file still
# uses every worker. A fixed constant: sharding never changes the output anyway.
SHARD_BYTES = 64 << 20
DOCS_ROW_GROUP = 1 << 20
_DOCS_SCHEMA = pa.schema([("doc_ordinal", pa.int64()), ("doc_ref", pa.string()),
                          ("input", pa.string()), ("row", pa.int64())])


@dataclass(frozen=True)
class HfSpec:
    name: str
    config: str | None = None
    split: str = "train"

    @property
    def path(self) -> str:
        return f"hf://{self.name}" + (f"/{self.config}" if self.config else "") + f":{self.split}"


# --------------------------------------------------------------------------- helpers


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def _minhash_module():
    """The MinHash module's build side, or None while it is not available."""
    try:
        from tcqa_data.decontam import minhash
    except ImportError:
        return None
    return minhash


def _minhash_params(minhash: bool | Any, num_perm: int | None, normalization: str) -> Any:
    """``minhash`` is True (defaults), False/None (no MinHash index) or a ``MinHashParams``."""
    if minhash is False or minhash is None:
        return None
    mh = _minhash_module()
    if mh is None:
        raise ConfigError("MinHash index requested but tcqa_data.decontam.minhash is unavailable; "
                          "pass --no-minhash")
    if minhash is True:
        kw: dict[str, Any] = {"normalization": normalization}
        if num_perm:
            kw["num_perm"] = int(num_perm)
        try:
            return mh.MinHashParams(**kw)
        except ValueError as e:
            raise ConfigError(f"MinHash parameters: {e}") from e
    return minhash


# --------------------------------------------------------------------------- map


def _shard_key(sha: str, shard_index: int) -> str:
    return f"{sha[:32]}-{shard_index:05d}"


_progress_q = None  # set in pool workers by the initializer


def _init_worker(q) -> None:
    global _progress_q
    _progress_q = q
    _fixed_mmap_threshold()


def _fixed_mmap_threshold() -> None:
    """Make glibc return freed large numpy buffers to the OS at once.

    glibc raises its mmap threshold after each large free (up to 32 MiB), after which big
    temporary arrays come from the heap and freed ones stay resident: RSS then creeps up with
    every batch. A fixed threshold keeps peak memory flat as the corpus grows.
    """
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD: 1 MiB, and no dynamic adjustment
        libc.mallopt(-1, 1 << 24)  # M_TRIM_THRESHOLD: give back heap tops above 16 MiB
    except (OSError, AttributeError):
        pass  # not glibc: nothing to tune


def _batches(docs: Iterator, limit: int) -> Iterator[list]:
    batch, size = [], 0
    for d in docs:
        batch.append(d)
        size += len(d.text)
        if size >= limit:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def map_shard(task: dict[str, Any], work_dir: str, cfg: dict[str, Any],
              progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Map one input shard into ``work_dir/maps/<key>/``: n-gram runs, docs table, MinHash part.

    Pure over paths: everything comes from ``task`` (the shard) and ``cfg`` (build parameters);
    ``done.json`` is written last, so a killed map is simply redone.
    """
    out = Path(work_dir) / "maps" / task["key"]
    done = out / "done.json"
    if done.is_file():
        return read_json(done)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    report = progress or (lambda b, d: _progress_q.put((b, d)) if _progress_q is not None else None)

    stats = SkipStats()
    if task.get("hf"):
        hf = task["hf"]
        docs = iter_hf_documents(hf["name"], hf.get("config"), hf.get("split", "train"),
                                 cfg["text_field"], cfg["id_field"], on_error=cfg["on_error"], stats=stats)
    else:
        inp = CorpusInput(task["path"], task["format"], task["size"])
        shard = InputShard(inp, task["index"], task["kind"], task["start"], task["end"], task["first_line"])
        docs = iter_documents(shard, cfg["text_field"], cfg["id_field"], cfg["on_error"], stats)

    writer = ni.RunWriter(str(out / "ngrams"), cfg["ngram_sizes"], cfg["normalization"], cfg["seed"],
                          cfg["num_buckets"], cfg.get("run_pairs", ni.DEFAULT_RUN_PAIRS))
    text_bytes = 0
    content = hashlib.sha256() if task.get("hf") else None
    with atomic_path(out / "docs.parquet") as tmp:
        with pq.ParquetWriter(tmp, pa.schema([("doc_ref", pa.string()), ("row", pa.int64())]),
                              compression="zstd") as pw:

            def docs_with_ordinals() -> Iterator[tuple[int, str]]:
                # One pass over the input feeds both indexes: the n-gram side here, the MinHash
                # map (which pulls this generator) with shard-local ordinals.
                nonlocal text_bytes
                for batch in _batches(docs, cfg.get("batch_chars", BATCH_CHARS)):
                    texts = [d.text for d in batch]
                    nbytes = sum(len(t) for t in texts)
                    first = writer.docs
                    writer.add_batch(texts)
                    pw.write_table(pa.Table.from_arrays(
                        [pa.array([d.ref for d in batch], pa.string()),
                         pa.array(np.fromiter((d.row for d in batch), np.int64, len(batch)))],
                        names=["doc_ref", "row"]))
                    if content is not None:
                        for t in texts:
                            content.update(t.encode("utf-8", "surrogatepass") + b"\0")
                    text_bytes += nbytes
                    report(nbytes, len(batch))
                    yield from zip(range(first, first + len(texts)), texts, strict=True)

            mh_summary = None
            if cfg.get("minhash") is not None:
                mh = _minhash_module()
                shard_dir = mh.write_minhash_shard(docs_with_ordinals(), out, "0",
                                                   mh.MinHashParams.from_dict(cfg["minhash"]))
                meta = read_json(shard_dir / "shard.json")
                mh_summary = {"dir": shard_dir.name, "n_docs": meta["n_docs"], "n_windows": meta["n_windows"]}
            else:
                for _ in docs_with_ordinals():
                    pass
    summary = writer.close()
    summary.update({"key": task["key"], "path": task["path"], "index": task["index"],
                    "text_chars": text_bytes, "skipped": stats.to_dict()})
    if mh_summary is not None:
        summary["minhash"] = mh_summary
    if content is not None:
        summary["content_sha256"] = content.hexdigest()
    write_json_atomic(done, summary)
    return summary


# --------------------------------------------------------------------------- build


def _clear_index(out: Path) -> None:
    """Remove what a build writes (manifest first, so nothing looks complete meanwhile)."""
    (out / ni.MANIFEST).unlink(missing_ok=True)
    for name in ("ngrams", "minhash", "_work"):
        if (out / name).exists():
            shutil.rmtree(out / name)
    (out / "docs.parquet").unlink(missing_ok=True)


def _describe_diff(old: dict, new: dict) -> str:
    keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    return "; ".join(f"{k}: index has {old.get(k)!r}, asked for {new.get(k)!r}" for k in keys)


def build_index(
    inputs: Sequence[str | os.PathLike],
    out_dir: str | os.PathLike,
    *,
    ngram_sizes: Sequence[int] = (13,),
    normalization: str = "janitor",
    text_field: str = "text",
    id_field: str | None = None,
    workers: int | None = None,
    append: bool = False,
    overwrite: bool = False,
    on_error: str = "raise",
    minhash: bool | Any = True,
    num_perm: int | None = None,
    quiet: bool = False,
    hf_dataset: str | None = None,
    hf_config: str | None = None,
    hf_split: str = "train",
    seed: int = 0,
    num_buckets: int = ni.DEFAULT_NUM_BUCKETS,
    provenance: int = ni.DEFAULT_PROVENANCE,
    run_pairs: int = ni.DEFAULT_RUN_PAIRS,
    chunk_pairs: int = ni.DEFAULT_CHUNK_PAIRS,
    batch_chars: int = BATCH_CHARS,
    shard_bytes: int = SHARD_BYTES,
    engine: str | Engine = "local",
    ray_address: str | None = None,
) -> dict[str, Any]:
    """Build (or extend with ``append``) the index in ``out_dir``; returns the manifest.

    ``engine``: ``"local"`` (``workers`` processes on this machine), ``"ray"`` (Ray tasks: a local
    instance, or the cluster at ``ray_address``; see docs/CLUSTER.md) or an ``Engine``. Every
    engine runs the same map and reduce functions and writes the same bytes.
    """
    t0 = time.time()
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    check_scheme(normalization)
    ns = sorted({int(n) for n in ngram_sizes})
    if not ns or ns[0] < 1:
        raise ConfigError(f"n-gram sizes must be positive integers, got {list(ngram_sizes)}")
    if on_error not in ("raise", "skip"):
        raise ConfigError(f"--on-error must be 'raise' or 'skip', not {on_error!r}")
    if provenance < 1:
        raise ConfigError("provenance must be >= 1")
    try:
        ni._shift(num_buckets)
    except ValueError as e:
        raise ConfigError(str(e)) from e
    if not inputs and not hf_dataset:
        raise ConfigError("give corpus files, globs or folders, or --hf-dataset")
    # A distributed engine runs the same map/reduce functions; "local" keeps the pool below.
    eng: Engine | None = engine if isinstance(engine, Engine) else (
        None if engine == "local" and ray_address is None else make_engine(engine, workers, ray_address))
    workers = max(1, int(workers or os.cpu_count() or 1))
    mh_params = _minhash_params(minhash, num_perm, normalization)

    params = {
        "format_version": FORMAT_VERSION,
        "normalization": normalization,
        "ngram_sizes": ns,
        "hash": {"name": HASH_NAME, "seed": int(seed)},
        "num_buckets": int(num_buckets),
        "provenance_docs": int(provenance),
        "text_field": text_field,
        "id_field": id_field,
        "minhash": mh_params.to_dict() if mh_params is not None else None,
    }
    cfg = {"ngram_sizes": ns, "normalization": normalization, "seed": int(seed), "num_buckets": num_buckets,
           "text_field": text_field, "id_field": id_field, "on_error": on_error,
           "minhash": params["minhash"], "run_pairs": run_pairs, "batch_chars": batch_chars}

    out = local_output_dir(out_dir)  # object-storage URIs are refused with the reason
    work = out / "_work"
    mpath = out / ni.MANIFEST
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out}: exists and is not a folder")
    # resolve first: a typo in an input must not cost the existing index (--overwrite)
    resolved: list[CorpusInput] = resolve_inputs([os.fspath(p) for p in inputs]) if inputs else []
    if overwrite:
        _clear_index(out)
    old_manifest = read_json(mpath) if mpath.is_file() else None

    def params_of(m: dict) -> dict:
        return {k: m.get(k) for k in params}

    if old_manifest is not None and params_of(old_manifest) != params:
        raise IndexMismatchError(f"{out}: an index with other parameters exists "
                                 f"({_describe_diff(params_of(old_manifest), params)}); "
                                 "pass --overwrite to replace it")
    if work.exists():
        plan = read_json(work / "plan.json") if (work / "plan.json").is_file() else None
        if plan is None or plan.get("params") != params:
            # An interrupted build with other parameters: restart cleanly.
            if old_manifest is None:
                _clear_index(out)
            else:
                shutil.rmtree(work)
        elif (work / "commit.json").is_file():
            _commit(out, read_json(work / "commit.json"), ns)
            old_manifest = read_json(mpath)

    # ---- inputs
    pool = q = None
    if eng is None and workers > 1:
        import multiprocessing as mp

        q = mp.get_context().Queue()
        pool = ProcessPoolExecutor(max_workers=workers, initializer=_init_worker, initargs=(q,))
    try:
        paths = [c.path for c in resolved]
        if eng is not None:
            eng.check_shared_paths(out, paths)  # every node sees the inputs and can write out
            workers = eng.parallelism
            sums = eng.map(sha256_file, [{"path": p} for p in paths], desc="index-checksum")
        else:
            check_writable_dir(out)  # a clear error naming the folder, not a traceback
            sums = list(pool.map(sha256_file, paths)) if pool else [sha256_file(p) for p in paths]
        entries: list[dict[str, Any]] = []
        skipped_inputs: list[dict[str, str]] = []
        seen: dict[str, str] = {}
        old_by_sum = {e["sha256"]: e for e in (old_manifest or {}).get("inputs", [])}
        for c, s in zip(resolved, sums, strict=True):
            if s in seen:
                skipped_inputs.append({"path": c.path, "reason": f"same content as {seen[s]}"})
                continue
            seen[s] = c.path
            if s in old_by_sum:
                if old_by_sum[s]["path"] != c.path:
                    skipped_inputs.append({"path": c.path,
                                           "reason": f"already indexed as {old_by_sum[s]['path']}"})
                continue
            entries.append({"path": c.path, "format": c.format, "size": c.size, "sha256": s})
        if hf_dataset:
            spec = HfSpec(hf_dataset, hf_config, hf_split)
            s = hashlib.sha256(f"{spec.path}\0{text_field}\0{id_field}".encode()).hexdigest()
            if s not in old_by_sum:
                entries.append({"path": spec.path, "format": "hf", "size": 0, "sha256": s,
                                "hf": {"name": hf_dataset, "config": hf_config, "split": hf_split}})

        requested = set(seen) | ({entries[-1]["sha256"]} if hf_dataset and entries else set())
        if old_manifest is not None:
            if not append:
                if not entries and requested == set(old_by_sum):
                    return old_manifest  # same inputs, same parameters: already built
                raise IndexMismatchError(
                    f"{out}: an index of other inputs exists; pass --append to add inputs "
                    "or --overwrite to rebuild it")
            if not entries:
                if work.exists():
                    shutil.rmtree(work)
                return old_manifest
        if not entries and old_manifest is None:
            raise ConfigError("no inputs left to index")

        # ---- map
        work.mkdir(parents=True, exist_ok=True)
        write_json_atomic(work / "plan.json", {"params": params})
        files = [e for e in entries if "hf" not in e]
        split_calls = [{"inp": CorpusInput(e["path"], e["format"], e["size"]), "target_bytes": shard_bytes}
                       for e in files]
        # Cutting a file into byte ranges counts its newlines: a pass over it, so on the engine too.
        splits = (eng.map(split_input, split_calls, desc="index-split") if eng is not None
                  else [split_input(**c) for c in split_calls])
        shards_of = {e["path"]: sh for e, sh in zip(files, splits, strict=True)}
        tasks = []
        for e in entries:
            if "hf" in e:
                tasks.append({"key": _shard_key(e["sha256"], 0), "path": e["path"], "index": 0,
                              "hf": e["hf"]})
                continue
            for sh in shards_of[e["path"]]:
                tasks.append({"key": _shard_key(e["sha256"], sh.index), "path": e["path"],
                              "format": e["format"], "size": e["size"], "index": sh.index,
                              "kind": sh.kind, "start": sh.start, "end": sh.end, "first_line": sh.first_line})
        results = _run_maps(tasks, str(work), cfg, pool, q, sum(e["size"] for e in entries), quiet,
                            engine=eng)
        by_path: dict[str, list[dict]] = {}
        for t, r in zip(tasks, results, strict=True):
            by_path.setdefault(t["path"], []).append(r)
        for e in entries:
            shards = sorted(by_path[e["path"]], key=lambda r: r["index"])
            e["shards"] = [r["key"] for r in shards]
            e["docs"] = sum(r["docs"] for r in shards)
            e["shard_docs"] = [r["docs"] for r in shards]
            e["text_chars"] = sum(r["text_chars"] for r in shards)
            e["ngrams"] = {str(n): sum(r["ngrams"][str(n)] for r in shards) for n in ns}
            sk = SkipStats()
            for r in shards:
                sk.merge(SkipStats.from_dict(r["skipped"]))
            e["skipped"] = sk.to_dict()
            if shards and "content_sha256" in shards[0]:
                e["content_sha256"] = shards[0]["content_sha256"]

        # ---- reduce
        manifest = _reduce(out, work, params, cfg, ns, entries, old_manifest, pool, chunk_pairs, quiet,
                           engine=eng)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
        if eng is not None and eng is not engine:
            eng.close()  # ours: stops a local Ray instance

    # ---- manifest
    total_skip = SkipStats()
    for e in manifest["inputs"]:
        total_skip.merge(SkipStats.from_dict(e["skipped"]))
    prior = (old_manifest or {}).get("build", {})
    manifest["skipped"] = total_skip.to_dict()
    manifest["skipped_inputs"] = sorted(skipped_inputs, key=lambda x: x["path"])
    manifest["build"] = {
        "started": prior.get("started", started) if old_manifest else started,
        "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "seconds": round(time.time() - t0 + (prior.get("seconds", 0.0) if old_manifest else 0.0), 3),
        "last_run_seconds": round(time.time() - t0, 3),
        "workers": workers,
        "appended_inputs": [e["path"] for e in entries] if old_manifest else [],
        "tcqa_data_version": __version__,
    }
    write_json_atomic(work / "commit.json", manifest)
    _commit(out, manifest, ns)
    return manifest


def _map_shard_task(task: dict[str, Any], work_dir: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """``map_shard`` as an engine task, with the memory tuning the pool's workers get."""
    _fixed_mmap_threshold()
    return map_shard(task, work_dir, cfg)


def _run_maps(tasks: list[dict], work_dir: str, cfg: dict, pool: ProcessPoolExecutor | None, q,
              total_bytes: int, quiet: bool, engine: Engine | None = None) -> list[dict]:
    t0 = time.time()
    done_docs = [0]
    with progress_bar(quiet, bytes_mode=True) as bar:
        tid = bar.add_task("indexing", total=max(total_bytes, 1), rate="")

        def advance(nbytes: int, ndocs: int) -> None:
            done_docs[0] += ndocs
            bar.update(tid, advance=nbytes, rate=rate_text(done_docs[0], time.time() - t0, "docs"))

        if engine is not None:
            # Progress per finished shard: engine workers have no queue back to this bar.
            def shard_done(i: int, r: dict) -> None:
                t = tasks[i]
                advance(t["end"] - t["start"] if "end" in t else 0, r["docs"])

            results = engine.map(_map_shard_task, [{"task": t} for t in tasks], desc="index-map",
                                 shared={"work_dir": work_dir, "cfg": cfg}, on_done=shard_done)
        elif pool is None or len(tasks) <= 1:
            _fixed_mmap_threshold()
            results = [map_shard(t, work_dir, cfg, advance) for t in tasks]
        else:
            results_by_i: dict[int, dict] = {}
            futs = {pool.submit(map_shard, t, work_dir, cfg): i for i, t in enumerate(tasks)}
            pending = set(futs)
            while pending:
                fin, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                _drain(q, advance)
                for f in fin:
                    results_by_i[futs[f]] = f.result()  # re-raises InputError from the worker
            _drain(q, advance)
            results = [results_by_i[i] for i in range(len(tasks))]
        bar.update(tid, completed=max(total_bytes, 1))
    return results


def _drain(q, advance: Callable[[int, int], None]) -> None:
    while True:
        try:
            b, d = q.get_nowait()
        except queue.Empty:
            return
        advance(b, d)


def _reduce_task(args: tuple) -> int:
    stage, n, b, sources, num_buckets, provenance, old, chunk_pairs = args
    return ni.reduce_bucket(stage, n, b, sources, num_buckets=num_buckets, provenance=provenance,
                            old=old, chunk_pairs=chunk_pairs)


def _reduce_bucket_task(bucket: int, n: int, stage: str, sources_by_n: dict, num_buckets: int,
                        provenance: int, old: Any, chunk_pairs: int) -> int:
    """A reduce task on an engine: the run list comes once per build (shared), not per bucket."""
    return ni.reduce_bucket(stage, n, bucket, sources_by_n[n], num_buckets=num_buckets,
                            provenance=provenance, old=old, chunk_pairs=chunk_pairs)


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
    old = ni.OldIndex(str(out), tuple(starts), tuple(shifts)) if old_manifest is not None else None

    maps = work / "maps"
    jobs = []
    for n in ns:
        sources = []
        for e in all_inputs:
            if e.get("_old"):
                continue
            doff = e["doc_offset"]
            for key, nd in zip(e["shards"], e["shard_docs"], strict=True):
                run_dir = str(maps / key / "ngrams")
                sources += [ni.RunSource(run_dir, r, doff) for r in ni.list_runs(run_dir, n)]
                doff += nd
        for b in range(params["num_buckets"]):
            jobs.append((str(stage), n, b, tuple(sources), params["num_buckets"], params["provenance_docs"],
                         old, chunk_pairs))
    t0 = time.time()
    with progress_bar(quiet) as bar:
        tid = bar.add_task("merging", total=len(jobs), rate="")
        if engine is not None:
            def bucket_done(i: int, k: int) -> None:
                bar.update(tid, advance=1, rate=rate_text(i + 1, time.time() - t0, "buckets"))

            shared = {"stage": str(stage), "sources_by_n": {j[1]: j[3] for j in jobs},
                      "num_buckets": params["num_buckets"], "provenance": params["provenance_docs"],
                      "old": old, "chunk_pairs": chunk_pairs}
            it = iter(engine.map(_reduce_bucket_task, [{"bucket": j[2], "n": j[1]} for j in jobs],
                                 desc="index-reduce", shared=shared, on_done=bucket_done))
        else:
            it = pool.map(_reduce_task, jobs, chunksize=8) if pool else map(_reduce_task, jobs)
        uniq = {n: 0 for n in ns}
        for i, (job, k) in enumerate(zip(jobs, it, strict=True)):
            uniq[job[1]] += k
            if engine is None:  # an engine's tasks advance the bar as they finish (bucket_done)
                bar.update(tid, advance=1, rate=rate_text(i + 1, time.time() - t0, "buckets"))

    _write_docs_table(stage / "docs.parquet", all_inputs, out, maps)

    mh_counts = None
    if params["minhash"] is not None:
        mh_counts = _reduce_minhash(stage / "minhash", all_inputs, out, maps, params, old_manifest)

    inputs_out = []
    for e in all_inputs:
        e = {k: v for k, v in e.items() if k not in ("_old", "shards", "shard_docs", "hf")}
        inputs_out.append(e)
    docs_total = sum(e["docs"] for e in all_inputs)
    counts = {
        "inputs": len(all_inputs),
        "docs": docs_total,
        "text_chars": sum(e.get("text_chars", 0) for e in all_inputs),
        "input_bytes": sum(e["size"] for e in all_inputs),
        "ngrams": {str(n): {"total": sum(e["ngrams"][str(n)] for e in all_inputs), "unique": uniq[n]}
                   for n in ns},
    }
    if mh_counts is not None:
        counts["minhash"] = mh_counts
    manifest = dict(params)
    manifest.update({"kind": KIND, "inputs": inputs_out, "counts": counts})
    return manifest


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
                    parts = [pq.read_table(maps / key / "docs.parquet") for key in e["shards"]]
                ordinal = e["doc_offset"]
                for t in parts:
                    k = len(t)
                    buf.append(pa.Table.from_arrays([
                        pa.array(np.arange(ordinal, ordinal + k, dtype=np.int64)),
                        t.column("doc_ref").cast(pa.string()),
                        pa.array([e["path"]] * k, pa.string()),
                        t.column("row").cast(pa.int64()),
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


def _reduce_minhash(stage: Path, all_inputs: list[dict], out: Path, maps: Path, params: dict,
                    old_manifest: dict | None) -> dict[str, Any]:
    """Merge the MinHash map shards (shard-local ordinals, moved by ``doc_offsets``) and, on
    ``--append``, the existing ``minhash/`` folder, whose docs come first."""
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
    summary = mh.merge_minhash_shards(dirs, stage, mparams, base_dir=base, doc_offsets=offsets)
    return {k: v for k, v in summary.items() if k in ("n_windows", "n_docs", "n_windows_without_tokens")}


def _commit(out: Path, manifest: dict, ns: list[int]) -> None:
    """Move staged files into place, then write the manifest. Idempotent: rerun after a kill."""
    work = out / "_work"
    stage = work / "stage"
    (out / ni.MANIFEST).unlink(missing_ok=True)
    for n in ns:
        src = stage / "ngrams" / f"n{n}"
        if src.is_dir():
            dst = out / "ngrams" / f"n{n}"
            dst.mkdir(parents=True, exist_ok=True)
            for f in sorted(src.iterdir()):
                if f.name.startswith(".") and f.name.endswith(".tmp"):
                    f.unlink()  # left by a reduce task killed mid-write; its retry wrote the file
                    continue
                os.replace(f, dst / f.name)
    if (stage / "docs.parquet").exists():
        os.replace(stage / "docs.parquet", out / "docs.parquet")
    if (stage / "minhash").is_dir():
        if (out / "minhash").exists():
            shutil.rmtree(out / "minhash")
        os.replace(stage / "minhash", out / "minhash")
    write_json_atomic(out / ni.MANIFEST, manifest)
    shutil.rmtree(work, ignore_errors=True)


def index_info(index_dir: str | os.PathLike) -> dict[str, Any]:
    """The manifest of a finished index (TcqaError if missing or incomplete)."""
    return ni.NgramIndex.open(index_dir).manifest
