"""``index-corpus``: readers -> map (per input shard) -> reduce (per bucket) -> commit.

Work directory ``INDEX_DIR/_work`` (removed when the build completes)::

    plan.json                  parameters and map layout of the build in progress (resume
                               only if both are equal)
    maps/<key>/                one map output per input shard: runs, docs.parquet, minhash part,
                               done.json (written last: a shard without it is redone)
    stage/                     reduce output (ngrams/, docs.parquet, minhash/)
    commit.json                the final manifest, written before the staged files move in

Each build or ``--append`` writes a new generation: the commit assembles it beside the index
(``.tcqa-staging-<name>.next``), runs the text store pass on it, seals its manifest with every
file's size and checksum (``index_files``) and swaps it with the index folder in one atomic step
(``reduce._commit``). One writer at a time: ``outputs.output_lock``.

Doc ordinals follow the order of inputs (the first build's sorted by path, then each
``--append``'s new inputs after the indexed ones, sorted by path) and the order of documents in
each input, so they never depend on workers or sharding. Existing ordinals never move (the
MinHash merge relies on that too), so appending inputs that sort after the indexed ones (new
shards) is byte-identical to a full rebuild; otherwise only the doc ordinals differ.
A kill -9 at any point leaves the previous generation as it was (or, for a first build, no
manifest); a rerun with the same parameters reuses finished map shards, and finishes an
interrupted commit.

The map side (``map_shard``, the pool/engine loop) is in ``build/map.py``, the reduce and commit
in ``build/reduce.py``, the checks before anything is written in ``build/preflight.py``.
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tcqa_data import FORMAT_VERSION, __version__
from tcqa_data.decontam.build.map import (
    BATCH_CHARS,
    _fixed_mmap_threshold,
    _init_worker,
    _minhash_module,
    _run_maps,
    _shard_key,
)
from tcqa_data.decontam.build.preflight import check_build, check_output_apart
from tcqa_data.decontam.build.reduce import _commit, _reduce, _regenerate
from tcqa_data.decontam.core.hashing import HASH_NAME
from tcqa_data.decontam.core.map_files import MAP_FORMAT
from tcqa_data.decontam.core.normalize import check_scheme
from tcqa_data.decontam.ngrams import index as ni
from tcqa_data.decontam.ngrams import reduce as nred
from tcqa_data.decontam.ngrams import runs as nruns
from tcqa_data.decontam.readers.documents import SkipStats
from tcqa_data.decontam.readers.inputs import CorpusInput, resolve_inputs, split_input, text_progress_total
from tcqa_data.decontam.readers.storage import content_sha256
from tcqa_data.deprecation import moved_to_top
from tcqa_data.engines import Engine, check_writable_dir, local_output_dir, make_engine, run_tasks, stop_pool
from tcqa_data.errors import ConfigError, IndexMismatchError
from tcqa_data.io_utils import read_json, write_json_atomic
from tcqa_data.outputs import (
    check_output_dir,
    check_owned,
    next_generation_dir,
    output_lock,
    removed_on_full_disk,
)

# Uncompressed JSONL / Parquet inputs are cut into shards of this size so one big file still
# uses every worker. A fixed constant: sharding never changes the output anyway.
SHARD_BYTES = 64 << 20


@dataclass(frozen=True)
class HfSpec:
    name: str
    config: str | None = None
    split: str = "train"

    @property
    def path(self) -> str:
        return f"hf://{self.name}" + (f"/{self.config}" if self.config else "") + f":{self.split}"


# --------------------------------------------------------------------------- helpers


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


# --------------------------------------------------------------------------- build


def _describe_diff(old: dict, new: dict) -> str:
    keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    return "; ".join(f"{k}: index has {old.get(k)!r}, asked for {new.get(k)!r}" for k in keys)


def _pause_cyclic_gc() -> bool:
    """Turn Python's cyclic garbage collector off; True if it was on (the caller turns it back
    on). The map and reduce make few reference cycles, but their thousands of small allocations
    (per batch, per bucket) kept triggering collections that traverse every object numba and
    pyarrow loaded: about 0.1 CPU-s of a 200 MB build. Pool workers forked meanwhile turn it
    back on (``map._init_worker``)."""
    if not gc.isenabled():
        return False
    gc.disable()
    return True


@moved_to_top("build_index")
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
    run_pairs: int = nruns.DEFAULT_RUN_PAIRS,
    chunk_pairs: int = nred.DEFAULT_CHUNK_PAIRS,
    batch_chars: int = BATCH_CHARS,
    shard_bytes: int = SHARD_BYTES,
    engine: str | Engine = "local",
    ray_address: str | None = None,
    text_store: str = "auto",
    ngram_dir_bits: int | None = None,
) -> dict[str, Any]:
    """Build (or extend with ``append``) the index in ``out_dir``; returns the manifest.

    ``engine``: ``"local"`` (``workers`` processes on this machine), ``"ray"`` (Ray tasks: a local
    instance, or the cluster at ``ray_address``; see docs/CLUSTER.md) or an ``Engine``. Every
    engine runs the same map and reduce functions and writes the same bytes.

    ``ngram_dir_bits``: the n-gram directory width (``ngram_storage.dir_bits`` in the manifest);
    None chooses it from the corpus at the first build, and ``append`` keeps the index's. A full
    rebuild given an appended index's value writes the same bytes as the append (but for the text
    store's merged anchor table, written anew by each append: the same entries, its generation and
    key ranges may differ).
    """
    t0 = time.time()
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    check_scheme(normalization)
    from tcqa_data.decontam.textstore.build import check_mode

    check_mode(text_store)
    ns = sorted({int(n) for n in ngram_sizes})
    if not ns or ns[0] < 1:
        raise ConfigError(f"n-gram sizes must be positive integers, got {list(ngram_sizes)}")
    if on_error not in ("raise", "skip"):
        raise ConfigError(f"--on-error must be 'raise' or 'skip', not {on_error!r}")
    if provenance < 1:
        raise ConfigError("provenance must be >= 1")
    try:
        ni._shift(num_buckets)
        if ngram_dir_bits is not None:
            ni.check_dir_bits(ngram_dir_bits, num_buckets)
    except ValueError as e:
        raise ConfigError(str(e)) from e
    if not inputs and not hf_dataset:
        raise ConfigError("give corpus files, globs or folders, or --hf-dataset")
    # A distributed engine runs the same map/reduce functions; "local" keeps the pool below.
    eng: Engine | None = engine if isinstance(engine, Engine) else (
        None if engine == "local" and ray_address is None else make_engine(engine, workers, ray_address))
    workers = max(1, int(workers or os.cpu_count() or 1))
    mh_params = _minhash_params(minhash, num_perm, normalization)
    if minhash is True and text_store != "none":
        # MinHash candidates are verified against the text store's text: no stored signatures
        mh_params = dataclasses.replace(mh_params, verify="text")

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
           "minhash": params["minhash"], "run_pairs": run_pairs, "batch_chars": batch_chars,
           "ngram_dir_bits": ngram_dir_bits,
           # the map winnows the text store's anchors where it reads JSONL with the compiled reader
           "text_anchors": text_store != "none"}

    out = local_output_dir(out_dir)  # object-storage URIs are refused with the reason
    if out.is_symlink() and out.is_dir():  # the commit swaps folders: the link's target is the index
        out = out.resolve()
    check_output_dir(out)  # a file there, a name too long or undecodable, not writable: one line
    # resolve first: a typo in an input must not cost the existing index (--overwrite)
    skipped_files: list[dict[str, str]] = []
    specs = [os.fspath(p) for p in inputs]
    resolved: list[CorpusInput] = resolve_inputs(specs, skipped=skipped_files) if inputs else []
    # everything checkable before the first write (no _work/ left behind, nothing overwritten for nothing)
    check_build(out, resolved, mh_params, streamed=bool(hf_dataset))
    check_output_apart(out, specs, resolved)
    # the commit replaces the folder whole: a folder index-corpus did not write is refused
    check_owned(out, "index-corpus")
    # a full disk: the work folders go too (a kill keeps them, so that the rerun resumes)
    with output_lock(out, "index-corpus"), removed_on_full_disk(next_generation_dir(out), out / "_work"):
        check_owned(out, "index-corpus")  # as it is now that no other writer runs
        return _build_locked(
            out, resolved, skipped_files, params=params, cfg=cfg, ns=ns, mh_params=mh_params, eng=eng,
            engine=engine, workers=workers, append=append, overwrite=overwrite, quiet=quiet,
            hf_dataset=hf_dataset, hf_config=hf_config, hf_split=hf_split, text_field=text_field,
            id_field=id_field, text_store=text_store, ngram_dir_bits=ngram_dir_bits, shard_bytes=shard_bytes,
            chunk_pairs=chunk_pairs, t0=t0, started=started)


def _base_id(manifest: dict | None) -> str | None:
    """Which generation a build in ``_work`` extends: the sealed manifest's own checksum (None for
    a first build or ``--overwrite``). A staged reduce is committed only onto that generation."""
    from tcqa_data.decontam.index_files import SEAL_KEY, manifest_checksum

    if manifest is None:
        return None
    return str(manifest.get(SEAL_KEY) or manifest_checksum(manifest))


def _build_locked(out: Path, resolved: list[CorpusInput], skipped_files: list[dict[str, str]], *,
                  params: dict, cfg: dict, ns: list[int], mh_params: Any, eng: Engine | None,
                  engine: str | Engine, workers: int, append: bool, overwrite: bool, quiet: bool,
                  hf_dataset: str | None, hf_config: str | None, hf_split: str, text_field: str,
                  id_field: str | None, text_store: str, ngram_dir_bits: int | None, shard_bytes: int,
                  chunk_pairs: int, t0: float, started: str) -> dict[str, Any]:
    """``build_index`` once it holds the output's lock (no other writer runs)."""
    from tcqa_data.decontam.index_files import open_manifest
    from tcqa_data.outputs import remove_stale_staging

    work = out / "_work"
    mpath = out / ni.MANIFEST
    # --overwrite leaves the existing index as it is until the new one replaces it whole; an
    # existing index is checked (parsed, its own checksum, every file there with its size)
    old_manifest = open_manifest(out) if mpath.exists() and not overwrite else None

    def params_of(m: dict) -> dict:
        return {k: m.get(k) for k in params}

    if old_manifest is not None and params_of(old_manifest) != params:
        raise IndexMismatchError(f"{out}: an index with other parameters exists "
                                 f"({_describe_diff(params_of(old_manifest), params)}); "
                                 "pass --overwrite to replace it")
    if old_manifest is not None and ngram_dir_bits is not None \
            and ngram_dir_bits != old_manifest["ngram_storage"]["dir_bits"]:
        # the index dropped the hash bits below its keys: its directory width cannot change
        raise IndexMismatchError(f"{out}: the index stores n-grams with "
                                 f"{old_manifest['ngram_storage']['dir_bits']} directory bits, asked for "
                                 f"{ngram_dir_bits}; leave --ngram-dir-bits out, or pass --overwrite "
                                 "to rebuild")
    base = _base_id(old_manifest)
    resume_commit = False
    if work.exists():
        plan = read_json(work / "plan.json") if (work / "plan.json").is_file() else None
        same_params = plan is not None and plan.get("params") == params
        if not same_params or plan.get("map_format") != MAP_FORMAT:
            # An interrupted build with other parameters, or whose maps another version of this
            # code wrote: restart cleanly.
            shutil.rmtree(work)
        elif (work / "commit.json").is_file():
            # a staged reduce is committed only onto the generation it extends
            resume_commit = plan.get("base", False) == base
            if not resume_commit:
                (work / "commit.json").unlink()
    # left by killed writers (the lock says none runs now); the next generation of a commit
    # to finish is kept
    remove_stale_staging(out, keep=next_generation_dir(out) if resume_commit else None)

    def finish_store(root: Path) -> None:
        _finish_text_store(root, text_store, hf_dataset, hf_config, hf_split, workers, eng)

    def close_engine() -> None:
        if eng is not None and eng is not engine:
            eng.close()  # ours: stops a local Ray instance

    if resume_commit:
        try:
            return _commit(out, read_json(work / "commit.json"), ns, finish_store, old_manifest)
        finally:
            close_engine()

    # ---- inputs
    pool = q = None
    reduced = False
    if eng is None and workers > 1:
        import multiprocessing as mp  # here: one worker never loads it
        from concurrent.futures import ProcessPoolExecutor

        q = mp.get_context().Queue()
        pool = ProcessPoolExecutor(max_workers=workers, initializer=_init_worker,
                                   initargs=(q, os.getpid()))
    gc_paused = _pause_cyclic_gc()  # for the map and reduce (not the text store pass's pools)
    failed = True
    try:
        paths = [c.path for c in resolved]
        if eng is not None:
            eng.check_shared_paths(out, paths)  # every node sees the inputs and can write out
            workers = eng.parallelism
        else:
            check_writable_dir(out)  # a clear error naming the folder, not a traceback
            # this process reads every input (checksums, the split's newline count) and may run
            # the maps itself: with glibc's default thresholds each 16 MB read buffer is fresh
            # memory, page-faulted in again (~20 k faults per 200 MB)
            _fixed_mmap_threshold()
        sums = run_tasks(content_sha256, [{"path": p} for p in paths], desc="index-checksum", engine=eng,
                         pool=pool)
        entries: list[dict[str, Any]] = []
        skipped_inputs: list[dict[str, str]] = []
        seen: dict[str, str] = {}
        old_by_sum = {e["sha256"]: e for e in (old_manifest or {}).get("inputs", [])}
        old_by_path = {e["path"]: e for e in (old_manifest or {}).get("inputs", [])}
        for c, s in zip(resolved, sums, strict=True):
            prev = old_by_path.get(c.path)
            if prev is not None and prev["sha256"] != s:
                # indexing it again would hold its old documents twice, under one path
                raise IndexMismatchError(
                    f"{c.path}: this path is in the index {out} with other content (it changed after "
                    f"it was indexed: sha256 {prev['sha256'][:12]} then, {s[:12]} now); an index "
                    "holds each input once: rebuild with --overwrite, or give the new content "
                    "another file name")
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
                    if "files" not in old_manifest:
                        # an index written before sealed generations: a text store pass cut short
                        # is finished now
                        finish_store(out)
                    elif text_store != "none" and _store_mode(out) != text_store:
                        # another --text-store mode: the store is redone as a new generation (a
                        # store that is there is kept for "none": it costs a reader nothing)
                        return _regenerate(out, old_manifest, finish_store)
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
        write_json_atomic(work / "plan.json", {"params": params, "map_format": MAP_FORMAT, "base": base})
        files = [e for e in entries if "hf" not in e]
        split_calls = [{"inp": CorpusInput(e["path"], e["format"], e["size"]), "target_bytes": shard_bytes}
                       for e in files]
        # Cutting a file into byte ranges counts its newlines: a pass over it, so on the engine too.
        splits = run_tasks(split_input, split_calls, desc="index-split", engine=eng)
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
        results = _run_maps(tasks, str(work), cfg, pool, q, text_progress_total(entries), quiet,
                            engine=eng)
        by_path: dict[str, list[dict]] = {}
        for t, r in zip(tasks, results, strict=True):
            by_path.setdefault(t["path"], []).append(r)
        for e in entries:
            shards = sorted(by_path[e["path"]], key=lambda r: r["index"])
            e["shards"] = [r["key"] for r in shards]
            e["docs"] = sum(r["docs"] for r in shards)
            e["shard_docs"] = [r["docs"] for r in shards]
            e["shard_runs"] = [r["runs"] for r in shards]  # {n: runs}: the reduce lists no folders
            e["shard_anchors"] = all("text_anchors" in r for r in shards)  # for the text store pass
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
        reduced = True
        failed = False
    finally:
        if gc_paused:
            gc.enable()
        if pool is not None:
            stop_pool(pool, kill=failed)
        if not reduced:
            close_engine()

    # ---- manifest
    total_skip = SkipStats()
    for e in manifest["inputs"]:
        total_skip.merge(SkipStats.from_dict(e["skipped"]))
    prior = (old_manifest or {}).get("build", {})
    manifest["skipped"] = total_skip.to_dict()
    manifest["skipped_inputs"] = sorted(skipped_inputs + skipped_files, key=lambda x: x["path"])
    manifest["build"] = {
        "started": prior.get("started", started) if old_manifest else started,
        "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "seconds": round(time.time() - t0 + (prior.get("seconds", 0.0) if old_manifest else 0.0), 3),
        "last_run_seconds": round(time.time() - t0, 3),
        "workers": workers,
        "appended_inputs": [e["path"] for e in entries] if old_manifest else [],
        "tcqa_data_version": __version__,
    }
    try:
        write_json_atomic(work / "commit.json", manifest)
        return _commit(out, manifest, ns, finish_store, old_manifest)
    finally:
        close_engine()


def _store_mode(out: Path) -> str:
    """The ``--text-store`` mode the index's store was built with ("none" without a store)."""
    from tcqa_data.decontam.textstore.store import META, STORE_DIR

    meta = out / STORE_DIR / META
    return str(read_json(meta).get("mode", "auto")) if meta.is_file() else "none"


def _finish_text_store(out: Path, mode: str, hf_dataset: str | None, hf_config: str | None,
                       hf_split: str, workers: int, engine: Engine | None) -> None:
    """Corpus text for alignment (decontam/textstore/): a pass after the commit, with its own
    meta written last; a rerun redoes only what is missing. On the build's engine when it has one
    (one task per input, as the map), else on ``workers`` local processes."""
    from tcqa_data.decontam.textstore.build import build_text_store

    build_text_store(out, mode, hf={"name": hf_dataset, "config": hf_config, "split": hf_split}
                     if hf_dataset else None, workers=workers, engine=engine)


def index_info(index_dir: str | os.PathLike, verify: bool = False) -> dict[str, Any]:
    """The manifest of a finished index (TcqaError if missing or incomplete, DamagedIndexError if
    a file does not match it; ``verify``: every file's checksum too)."""
    from tcqa_data.decontam.index_files import open_manifest

    open_manifest(index_dir, verify=verify)
    return ni.NgramIndex.open(index_dir).manifest
