"""``index-corpus`` map side: one input shard -> n-gram runs, docs table, MinHash map part.

Also the driver-side loop that runs the maps (a local process pool or an engine) with one
progress bar. Pure over paths: a map writes only under ``_work/maps/<key>/`` and its
``done.json`` last, so a killed map is simply redone.
"""

from __future__ import annotations

import gc
import hashlib
import queue
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tcqa_data.decontam.core.map_files import MAP_COUNTS, MAP_HASHES
from tcqa_data.decontam.ngrams import runs as nruns
from tcqa_data.decontam.readers.documents import SkipStats, batch_documents, iter_documents
from tcqa_data.decontam.readers.hf_stream import iter_hf_documents
from tcqa_data.decontam.readers.inputs import CorpusInput, InputShard
from tcqa_data.decontam.readers.jsonl_batches import iter_normalized_batches, normalized_batches_supported
from tcqa_data.engines import Engine, quiet_worker
from tcqa_data.io_utils import atomic_path, read_json, write_json_atomic, write_npy_atomic
from tcqa_data.progress import progress_bar, rate_text

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

# Texts hashed together (bounds the per-batch numpy arrays, ~10 x this in memory).
BATCH_CHARS = 4_000_000


def _minhash_module():
    """The MinHash module's build side, or None while it is not available."""
    try:
        from tcqa_data.decontam import minhash
    except ImportError:
        return None
    return minhash


def _shard_key(sha: str, shard_index: int) -> str:
    return f"{sha[:32]}-{shard_index:05d}"


_progress_q = None  # set in pool workers by the initializer


def _init_worker(q, parent: int | None = None) -> None:
    global _progress_q
    _progress_q = q
    quiet_worker(parent)  # dies with the parent; Ctrl-C: the parent answers it, once
    gc.enable()  # forked from a build that paused it (build._pause_cyclic_gc)
    _fixed_mmap_threshold()


def _fixed_mmap_threshold() -> None:
    """Fix glibc's malloc thresholds so that peak memory stays flat as the corpus grows.

    glibc raises its mmap threshold after each large free, after which ever bigger temporary
    arrays come from the heap and freed ones stay resident: RSS then creeps up with every batch.
    Fixed thresholds stop that. They are set high (32 MiB, glibc's maximum; heap tops above
    128 MiB go back to the OS) because every mmap-ed array is page-faulted in afresh on first
    touch: at 1 MiB the n-gram map spent 2.2 of its 5.2 CPU-s per 128 MB in the kernel, mostly
    page faults; at 32 MiB the 5-30 MB batch arrays are reused from the heap (1.1 CPU-s of
    system time), for ~60 MB more peak RSS per worker.
    """
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD: 32 MiB, and no dynamic adjustment
        libc.mallopt(-1, 128 << 20)  # M_TRIM_THRESHOLD: give back heap tops above 128 MiB
    except (OSError, AttributeError):
        pass  # not glibc: nothing to tune


# Arrow arrays built from buffers: ``pa.array`` (even of a numpy array) and ``pq.read_table``
# import pandas to check for pandas types (~0.5 CPU-s per process, a quarter of a small build).


def arrow_int64(values: np.ndarray) -> pa.Array:
    """An int64 Arrow array of ``values`` without importing pandas."""
    values = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


def arrow_strings(strings: list[str]) -> pa.Array:
    """A string Arrow array of ``strings`` without importing pandas."""
    enc = [x.encode("utf-8") for x in strings]
    ends = np.cumsum(np.fromiter(map(len, enc), dtype=np.int64, count=len(enc)))
    if len(ends) and ends[-1] >= 1 << 31:  # beyond 32-bit offsets: let pyarrow chunk it
        return pa.array(strings, pa.string())
    offsets = np.zeros(len(enc) + 1, dtype=np.int32)
    offsets[1:] = ends
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(enc))]
    return pa.Array.from_buffers(pa.string(), len(enc), buffers)


def arrow_repeated_string(value: str, count: int) -> pa.Array:
    """``arrow_strings([value] * count)`` without a Python string per row (the docs table's input
    column: encoding each row's copy cost ~40% of writing docs.parquet)."""
    b = value.encode("utf-8")
    if len(b) * count >= 1 << 31:
        return arrow_strings([value] * count)
    offsets = np.arange(count + 1, dtype=np.int32) * np.int32(len(b))
    return pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(b * count)])


def _docs_table(refs: list[str], rows: np.ndarray) -> pa.Table:
    """The map's docs table part."""
    return pa.Table.from_arrays([arrow_strings(refs), arrow_int64(rows)], names=["doc_ref", "row"])


def _line_refs_table(path: str, lines: np.ndarray) -> pa.Table:
    """The docs table part of a compiled reader's batch: refs "path:line", as ``iter_documents``
    makes them without an id field."""
    return _docs_table([f"{path}:{r}" for r in lines.tolist()], lines)


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
    # n-grams only from JSONL: the compiled reader (no Python object per document)
    fast = (not task.get("hf") and cfg.get("minhash") is None
            and normalized_batches_supported(task["format"], cfg["text_field"], cfg["id_field"],
                                             cfg["normalization"]))
    if task.get("hf"):
        hf = task["hf"]
        docs = iter_hf_documents(hf["name"], hf.get("config"), hf.get("split", "train"),
                                 cfg["text_field"], cfg["id_field"], on_error=cfg["on_error"], stats=stats)
    else:
        inp = CorpusInput(task["path"], task["format"], task["size"])
        shard = InputShard(inp, task["index"], task["kind"], task["start"], task["end"], task["first_line"])
        if not fast:
            docs = iter_documents(shard, cfg["text_field"], cfg["id_field"], cfg["on_error"], stats)

    writer = nruns.RunWriter(str(out / "ngrams"), cfg["ngram_sizes"], cfg["normalization"], cfg["seed"],
                          cfg["num_buckets"], cfg.get("run_pairs", nruns.DEFAULT_RUN_PAIRS))
    anchors = _MapAnchors(cfg["seed"]) if cfg.get("text_anchors") else None
    text_bytes = 0
    content = hashlib.sha256() if task.get("hf") else None
    with atomic_path(out / "docs.parquet") as tmp:
        with pq.ParquetWriter(tmp, pa.schema([("doc_ref", pa.string()), ("row", pa.int64())]),
                              compression="zstd") as pw:

            def text_batches() -> Iterator[list[str]]:
                # the docs' texts in batches, their refs written; the caller feeds the n-gram side
                nonlocal text_bytes
                for batch in batch_documents(docs, cfg.get("batch_chars", BATCH_CHARS)):
                    texts = [d.text for d in batch]
                    nbytes = sum(len(t) for t in texts)
                    pw.write_table(_docs_table([d.ref for d in batch],
                                               np.fromiter((d.row for d in batch), np.int64, len(batch))))
                    if content is not None:
                        for t in texts:
                            content.update(t.encode("utf-8", "surrogatepass") + b"\0")
                    text_bytes += nbytes
                    report(nbytes, len(batch))
                    yield texts

            def docs_with_ordinals() -> Iterator[tuple[int, str]]:
                # One pass over the input feeds both indexes: the n-gram side here, the MinHash
                # map (which pulls this generator) with shard-local ordinals.
                for texts in text_batches():
                    first = writer.docs
                    writer.add_batch(texts)
                    yield from zip(range(first, first + len(texts)), texts, strict=True)

            mh_summary = None
            if cfg.get("minhash") is not None:
                mh = _minhash_module()
                mh_params = mh.MinHashParams.from_dict(cfg["minhash"])
                if _minhash_codepoints_ok(task, cfg, mh_params):
                    shard_dir, text_bytes = _map_minhash_jsonl(shard, cfg, mh_params, writer, pw, out, stats,
                                                               report, anchors)
                elif _minhash_texts_ok(cfg, mh_params):
                    shard_dir = _map_minhash_texts(text_batches(), mh_params, writer, out)
                else:
                    shard_dir = mh.write_minhash_shard(docs_with_ordinals(), out, "0", mh_params)
                meta = read_json(shard_dir / "shard.json")
                mh_summary = {"dir": shard_dir.name, "n_docs": meta["n_docs"], "n_windows": meta["n_windows"]}
            elif fast:
                if anchors is not None:
                    anchors.used = True
                for b in iter_normalized_batches(shard, cfg["text_field"], cfg["on_error"], stats,
                                                 cfg.get("batch_chars", BATCH_CHARS)):
                    tokens = anchors.add(b.data, b.doc_start) if anchors is not None else None
                    writer.add_normalized(b.data, b.doc_start, tokens)
                    pw.write_table(_line_refs_table(inp.path, b.rows))
                    text_bytes += b.chars
                    report(b.chars, len(b.rows))
            else:
                for _ in docs_with_ordinals():
                    pass
    summary = writer.close()
    summary.update({"key": task["key"], "path": task["path"], "index": task["index"],
                    "text_chars": text_bytes, "skipped": stats.to_dict()})
    if anchors is not None and anchors.used:
        summary["text_anchors"] = anchors.write(out)
    if mh_summary is not None:
        summary["minhash"] = mh_summary
    if content is not None:
        summary["content_sha256"] = content.hexdigest()
    write_json_atomic(done, summary)
    return summary


def _minhash_codepoints_ok(task: dict[str, Any], cfg: dict[str, Any], params: Any) -> bool:
    """Whether the MinHash map reads this shard as code points (``minhash/feed.py``): JSONL the
    compiled reader takes, compiled ``punkt-fast`` windows, Janitor signatures."""
    return (not task.get("hf") and params.sentence_splitter == "punkt-fast"
            and params.normalization == "janitor"
            and normalized_batches_supported(task["format"], cfg["text_field"], cfg["id_field"],
                                             cfg["normalization"]))


class _MapAnchors:
    """The text store's anchors of a shard's docs, winnowed from the normalized bytes the map
    already holds (``textstore.anchors.map_anchor_batches``): kept hashes and shard-local docs."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.hashes: list[np.ndarray] = []
        self.counts: list[np.ndarray] = []
        self.used = False  # set by the compiled paths: every doc of the shard was added

    def add(self, data: np.ndarray, doc_start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Winnow a batch; returns its token hashes (``hashing.normalized_tokens``): the n-gram
        side hashes the same tokens."""
        from tcqa_data.decontam.core.hashing import normalized_tokens
        from tcqa_data.decontam.textstore.anchors import winnow_normalized

        tokens = normalized_tokens(data, doc_start, self.seed)
        h, d = winnow_normalized(data, doc_start, self.seed, tokens)
        self.hashes.append(h)
        # kept hashes are in doc order: a count per doc says whose each is (an id each: 2x the bytes)
        self.counts.append(np.bincount(d, minlength=len(doc_start) - 1).astype(np.uint32))
        return tokens

    def write(self, out: Path) -> int:
        h = np.concatenate(self.hashes) if self.hashes else np.zeros(0, np.uint32)
        write_npy_atomic(out / MAP_HASHES, h)
        counts = np.concatenate(self.counts) if self.counts else np.zeros(0, np.uint32)
        write_npy_atomic(out / MAP_COUNTS, counts)
        return len(h)


def _map_minhash_jsonl(shard: InputShard, cfg: dict[str, Any], params: Any, writer: nruns.RunWriter,
                       pw: pq.ParquetWriter, out: Path, stats: SkipStats,
                       report: Callable[[int, int], None], anchors: _MapAnchors | None = None
                       ) -> tuple[Path, int]:
    """The map of a JSONL shard with MinHash: one compiled decode per document into code points
    (the windows), their normalized bytes (the n-gram hashes, the window signatures and the text
    store's ``anchors``, the same bytes ``iter_normalized_batches`` gives), docs, refs and batches
    as ``iter_documents`` gives them. Returns the MinHash shard folder and the chars read."""
    from tcqa_data.decontam.minhash.feed import iter_codepoint_batches
    from tcqa_data.decontam.minhash.shards import ShardWriter

    mhw = ShardWriter(out, "0", params)
    chars = 0
    if anchors is not None:
        anchors.used = True
    for b in iter_codepoint_batches(shard, cfg["text_field"], cfg["on_error"], stats,
                                    cfg.get("batch_chars", BATCH_CHARS)):
        first = writer.docs
        data, doc_start = mhw.add_codepoints(np.arange(first, first + len(b.rows)), b.cps, b.doc_start)
        tokens = anchors.add(data, doc_start) if anchors is not None else None
        writer.add_normalized(data, doc_start, tokens)
        pw.write_table(_line_refs_table(shard.input.path, b.rows))
        chars += b.chars
        report(b.chars, len(b.rows))
    return mhw.close(), chars


def _minhash_texts_ok(cfg: dict[str, Any], params: Any) -> bool:
    """Whether the MinHash map of documents read as ``str`` runs on code points
    (``_map_minhash_texts``): compiled ``punkt-fast`` windows, Janitor everywhere."""
    from tcqa_data.decontam.minhash.feed import codepoints_supported

    return cfg["normalization"] == "janitor" and codepoints_supported(params)


def _map_minhash_texts(batches: Iterator[list[str]], params: Any, writer: nruns.RunWriter, out: Path) -> Path:
    """The map of documents read as ``str`` with MinHash on code points: each batch copied into
    code points once, cut into windows and normalized once (``ShardWriter.add_codepoints``), and
    the n-gram side hashes those normalized bytes (``add_batch`` would normalize the texts again).
    Returns the MinHash shard folder."""
    from tcqa_data.decontam.minhash.shards import ShardWriter
    from tcqa_data.decontam.minhash.windows import texts_codepoints

    mhw = ShardWriter(out, "0", params)
    for texts in batches:
        first = writer.docs
        data, doc_start = mhw.add_codepoints(np.arange(first, first + len(texts)), *texts_codepoints(texts))
        writer.add_normalized(data, doc_start)
    return mhw.close()


def _map_shard_task(task: dict[str, Any], work_dir: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """``map_shard`` as an engine task, with the memory tuning the pool's workers get."""
    _fixed_mmap_threshold()
    return map_shard(task, work_dir, cfg)


def _run_maps(tasks: list[dict], work_dir: str, cfg: dict, pool: ProcessPoolExecutor | None, q,
              total_bytes: int | None, quiet: bool, engine: Engine | None = None) -> list[dict]:
    """Every map task, with one progress bar over the text read (``total_bytes``:
    ``inputs.text_progress_total``, None where the inputs' sizes do not bound their text)."""
    t0 = time.time()
    done_docs = [0]
    with progress_bar(quiet, bytes_mode=True) as bar:
        tid = bar.add_task("indexing", total=None if total_bytes is None else max(total_bytes, 1), rate="")

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
            # this process's malloc thresholds: fixed by build_index before its checksum reads
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
        if total_bytes is not None:
            bar.update(tid, completed=max(total_bytes, 1))
        else:  # the total is known now: what was read (the last line says 100%, done)
            bar.update(tid, total=max(next(t.completed for t in bar.tasks if t.id == tid), 1))
    return results


def _drain(q, advance: Callable[[int, int], None]) -> None:
    while True:
        try:
            b, d = q.get_nowait()
        except queue.Empty:
            return
        advance(b, d)
