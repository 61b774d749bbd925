"""One pass over a corpus, looking its n-gram hashes up in the benchmark table (``table.py``).

Per corpus batch (the index build's readers: ``iter_normalized_batches`` for JSONL, compiled,
else ``iter_documents``) the n-gram hashes of every n of the table are computed by the index's
kernels and looked up in the table; for each query n-gram this counts the corpus docs holding it
(exact: only the benchmark's n-grams are counted) and remembers the first ``provenance`` of them,
as the index does. Corpus docs are numbered in the order ``index-corpus`` numbers them (inputs
sorted, then line or row), so "first doc" means the same in both. Only docs with a hit are named
(``refs``, ``where``): memory is bounded by the benchmark side and its matches, not by the corpus.

With anchors (``aligned*`` terms), every corpus doc's 4-grams are winnowed as the text store
winnows them and the kept ones looked up among the queries' 4-grams: (anchor, doc) pairs are kept
while the anchor is in at most ``ANCHOR_MAX_DF`` docs, as ``AnchorIndex`` uses them.

The pass is cut into input shards (``readers.split_input``): each shard is scanned on its own
(``scan_shard``: doc numbers local to the shard) and the shards' hits are merged in shard order
(``_Merge``), so one worker or many (``workers``: shards as tasks on ``tcqa_data.engines``, the
table's keys and each shard's hits passed as ``.npy`` files) give the same result.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tcqa_data.decontam.readers import (
    CorpusInput,
    InputShard,
    SkipStats,
    batch_documents,
    iter_documents,
    iter_normalized_batches,
    normalized_batches_supported,
    split_input,
)
from tcqa_data.decontam.readers.storage import is_url
from tcqa_data.decontam.semantic.rarewords import RareWordTable
from tcqa_data.decontam.semantic.windows import Candidates
from tcqa_data.decontam.stream.table import BenchmarkTable, StreamConfig

BATCH_CHARS = 4_000_000
SHARD_BYTES = 64 << 20  # a shard per 64 MB of plain JSONL (Parquet: row groups; compressed: whole)


@dataclass
class StreamHits:
    """What one pass found: per n, each query n-gram's corpus doc frequency (``df``) and first
    docs (``docs``, int64 ``[K, provenance]``, -1 = none); which docs matched (``refs``: ordinal ->
    doc ref; ``where``: ordinal -> (input number, line or row)); with ``keep_pairs`` every
    (n-gram row, doc) hit (``pairs``); the anchors' doc frequency and (anchor, doc) pairs."""

    table: BenchmarkTable
    inputs: list[CorpusInput]
    df: dict[int, np.ndarray]
    docs: dict[int, np.ndarray]
    num_docs: int = 0
    chars: int = 0
    refs: dict[int, str] = field(default_factory=dict)
    where: dict[int, tuple[int, int]] = field(default_factory=dict)
    pairs: dict[int, list[tuple[np.ndarray, np.ndarray]]] = field(default_factory=dict)
    anchor_df: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    anchor_pairs: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    skipped: SkipStats = field(default_factory=SkipStats)
    semantic: Candidates | None = None  # the semantic tier's candidate windows (``cfg.semantic``)

    def hit_pairs(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Every (n-gram row, doc) hit of size ``n`` (``keep_pairs``), sorted by doc then row."""
        return _sorted_pairs(self.pairs.get(n, []), by_doc=True)


def _sorted_pairs(parts: list[tuple[np.ndarray, np.ndarray]], by_doc: bool = False
                  ) -> tuple[np.ndarray, np.ndarray]:
    rows = np.concatenate([r for r, _ in parts]) if parts else np.empty(0, np.int64)
    docs = np.concatenate([d for _, d in parts]) if parts else np.empty(0, np.int64)
    order = np.lexsort((rows, docs) if by_doc else (docs, rows))
    return rows[order], docs[order]


@dataclass
class ShardHits:
    """One shard's hits, doc numbers local to the shard: per n and per anchor table, the distinct
    (row, doc) pairs (n-grams: all of them; anchors: those of anchors in at most ``ANCHOR_MAX_DF``
    of the shard's docs) and each row's doc count; the matched docs' (local number, ref, line/row)."""

    pairs: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    counts: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    named: list[tuple[int, str, int]] = field(default_factory=list)
    num_docs: int = 0
    chars: int = 0
    skipped: SkipStats = field(default_factory=SkipStats)
    semantic: Candidates | None = None

    ARRAYS = ("pairs", "counts")

    def save(self, folder: Path) -> dict[str, Any]:
        """The arrays as ``.npy`` files in ``folder``; returns the rest (plain JSON values)."""
        from tcqa_data.io_utils import write_npy_atomic

        folder.mkdir(parents=True, exist_ok=True)
        for kind in self.ARRAYS:
            for key, (a, b) in getattr(self, kind).items():
                write_npy_atomic(folder / f"{kind}.{key}.0.npy", a)
                write_npy_atomic(folder / f"{kind}.{key}.1.npy", b)
        return {"keys": {kind: sorted(getattr(self, kind)) for kind in self.ARRAYS},
                "named": [list(x) for x in self.named], "num_docs": self.num_docs, "chars": self.chars,
                "skipped": self.skipped.to_dict(),
                "semantic": None if self.semantic is None else self.semantic.save(folder)}

    @classmethod
    def load(cls, folder: Path, meta: dict[str, Any]) -> ShardHits:
        from tcqa_data.io_utils import load_npy

        out = cls(named=[(int(a), str(b), int(c)) for a, b, c in meta["named"]], num_docs=meta["num_docs"],
                  chars=meta["chars"], skipped=SkipStats.from_dict(meta["skipped"]))
        for kind in cls.ARRAYS:
            for key in meta["keys"][kind]:
                getattr(out, kind)[key] = (np.array(load_npy(folder / f"{kind}.{key}.0.npy", None)),
                                           np.array(load_npy(folder / f"{kind}.{key}.1.npy", None)))
        if meta.get("semantic") is not None:
            out.semantic = Candidates.load(folder, meta["semantic"])
        return out


class _ShardScan:
    """The accumulators of one shard (see ``ShardHits``)."""

    def __init__(self, table: BenchmarkTable) -> None:
        self.table = table
        self.out = ShardHits(semantic=Candidates() if table.rare is not None else None)
        self.parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}

    def add(self, by_n: dict[int, tuple[np.ndarray, np.ndarray]], ndocs: int,
            name: Callable[[np.ndarray], list[tuple[str, int]]],
            buffer: tuple[np.ndarray, np.ndarray] | None = None,
            tokens: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        """One batch: ``by_n`` n -> (hashes, batch-local doc) from the kernels; ``name(local docs)``
        gives the (ref, line/row) of the batch's docs that matched; ``buffer``: the batch's
        normalized buffer and doc starts, read for the semantic tier's candidate windows
        (``tokens``: its token hashes, where the caller has them)."""
        base = self.out.num_docs
        matched: list[np.ndarray] = []
        if self.out.semantic is not None and buffer is not None:
            from tcqa_data.decontam.semantic.windows import scan_windows

            assert self.table.rare is not None
            sem = self.out.semantic = scan_windows(self.table.rare, buffer[0], buffer[1], self.table.cfg.seed,
                                                   base, tokens, into=self.out.semantic)
            if self.table.rare.foreign is not None:  # a multilingual model: text in other scripts too
                from tcqa_data.decontam.semantic.foreign import scan_foreign

                sem = scan_foreign(self.table.rare.foreign, buffer[0], buffer[1], base, sem)
                self.out.semantic = sem
            entered = sem.cols["doc"][sem.cols["doc"] >= base]
            if len(entered):  # a candidate doc is named too: its ref goes in the evidence
                matched.append(np.unique(entered - base))
        lookups: list[tuple[str, Any, Callable]] = [(str(n), by_n[n], lambda h, n=n: self.table.lookup(h, n))
                                                    for n in self.table.cfg.ngram_sizes]
        if self.table.cfg.anchors:
            from tcqa_data.decontam.textstore.anchors import ANCHOR_K, winnow_hashes

            lookups.append(("anchors", winnow_hashes(*by_n[ANCHOR_K]), self.table.anchor_lookup))
        for key, (h, d), lookup in lookups:
            rows, found = lookup(np.asarray(h, dtype=np.uint64))
            if not found.any():
                continue
            rows, d = rows[found], np.asarray(d, dtype=np.int64)[found]
            # distinct (row, doc) pairs: a doc frequency counts docs, not occurrences
            pair = np.unique(rows * ndocs + d)
            self.parts.setdefault(key, []).append((pair // ndocs, pair % ndocs + base))
            matched.append(pair % ndocs)
        if matched:
            local = np.unique(np.concatenate(matched))
            for o, (ref, row) in zip(local.tolist(), name(local), strict=True):
                self.out.named.append((base + o, ref, row))
        self.out.num_docs += ndocs

    def finish(self) -> ShardHits:
        from tcqa_data.decontam.textstore.anchors import ANCHOR_MAX_DF

        for key, parts in self.parts.items():
            rows, docs = _sorted_pairs(parts)
            uniq, counts = np.unique(rows, return_counts=True)
            self.out.counts[key] = (uniq, counts)
            if key == "anchors":  # an anchor in more docs is no evidence (AnchorIndex drops it)
                keep = np.repeat(counts, counts) <= ANCHOR_MAX_DF
                rows, docs = rows[keep], docs[keep]
            self.out.pairs[key] = (rows, docs)
        return self.out


def scan_shard(table: BenchmarkTable, shard: InputShard, progress: Callable[[int, int], None] | None = None
               ) -> ShardHits:
    """Stream one input shard against ``table``: its hits, doc numbers local to the shard;
    ``progress(chars, docs)`` after each batch."""
    from tcqa_data.decontam.core import kernel
    from tcqa_data.decontam.core.hashing import (
        hash_normalized,
        hash_normalized_present,
        normalized_buffer,
        normalized_tokens,
    )
    from tcqa_data.decontam.textstore.anchors import ANCHOR_K

    cfg = table.cfg
    ns = sorted(set(cfg.ngram_sizes) | ({ANCHOR_K} if cfg.anchors else set()))
    scan = _ShardScan(table)
    stats = scan.out.skipped
    inp = shard.input
    if inp.format == "hf":
        docs = _hf_documents(cfg, stats)
    elif normalized_batches_supported(inp.format, cfg.text_field, cfg.id_field, cfg.normalization):
        # without anchors (which winnow every 4-gram) only the n-grams passing the table's presence
        # filter leave the kernel: the lookup then sees the same hits
        present = table.presence_bits() if not cfg.anchors else None
        for b in iter_normalized_batches(shard, cfg.text_field, cfg.on_error, stats, BATCH_CHARS):

            def name(local: np.ndarray, rows: np.ndarray = b.rows) -> list[tuple[str, int]]:
                return [(f"{inp.path}:{r}", r) for r in rows[local].tolist()]

            # the candidate windows hash the same tokens: tokenized once for both
            tokens = normalized_tokens(b.data, b.doc_start, cfg.seed) if table.rare is not None else None
            by_n = (hash_normalized_present(b.data, b.doc_start, cfg.seed, present, tokens)
                    if present is not None else hash_normalized(b.data, b.doc_start, ns, cfg.seed, tokens))
            scan.add(by_n, len(b.rows), name, (b.data, b.doc_start), tokens)
            scan.out.chars += b.chars
            if progress is not None:
                progress(b.chars, len(b.rows))
        return scan.finish()
    else:
        docs = iter_documents(shard, cfg.text_field, cfg.id_field, cfg.on_error, stats)
    for batch in batch_documents(docs, BATCH_CHARS):

        def name_docs(local: np.ndarray, batch: list = batch) -> list[tuple[str, int]]:
            return [(batch[i].ref, batch[i].row) for i in local.tolist()]

        buffer = normalized_buffer([d.text for d in batch], cfg.normalization)
        tokens = normalized_tokens(*buffer, cfg.seed) if table.rare is not None and kernel.enabled() else None
        scan.add(hash_normalized(*buffer, ns, cfg.seed, tokens), len(batch), name_docs, buffer, tokens)
        chars = sum(len(d.text) for d in batch)
        scan.out.chars += chars
        if progress is not None:
            progress(chars, len(batch))
    return scan.finish()


class _Merge:
    """Shards' hits merged in shard order into one ``StreamHits``."""

    def __init__(self, table: BenchmarkTable, inputs: list[CorpusInput]) -> None:
        cfg = table.cfg
        self.table = table
        self.hits = StreamHits(
            table, inputs,
            df={n: np.zeros(len(table.keys[n]), np.int64) for n in cfg.ngram_sizes},
            docs={n: np.full((len(table.keys[n]), cfg.provenance), -1, np.int64) for n in cfg.ngram_sizes},
            anchor_df=np.zeros(len(table.anchor_keys), np.int64),
            semantic=Candidates() if table.rare is not None else None)
        self.kept = {n: np.zeros(len(table.keys[n]), np.int64) for n in cfg.ngram_sizes}

    def add(self, part: ShardHits, input_number: int) -> None:
        hits = self.hits
        base = hits.num_docs
        for n in self.table.cfg.ngram_sizes:
            if str(n) not in part.pairs:
                continue
            rows, docs = part.pairs[str(n)]
            docs = docs + base
            uniq, counts = part.counts[str(n)]
            hits.df[n][uniq] += counts
            # the first `provenance` docs of each n-gram: shards arrive in doc order, and a
            # shard's pairs are sorted by row, then doc
            first = np.repeat(np.cumsum(counts) - counts, counts)
            slot = self.kept[n][rows] + np.arange(len(rows)) - first
            ok = slot < hits.docs[n].shape[1]
            hits.docs[n][rows[ok], slot[ok]] = docs[ok]
            self.kept[n][uniq] = np.minimum(self.kept[n][uniq] + counts, hits.docs[n].shape[1])
            if self.table.cfg.keep_pairs:
                hits.pairs.setdefault(n, []).append((rows, docs))
        if "anchors" in part.counts:
            uniq, counts = part.counts["anchors"]
            hits.anchor_df[uniq] += counts
            rows, docs = part.pairs["anchors"]
            hits.anchor_pairs.append((rows, docs + base))
        if hits.semantic is not None and part.semantic is not None:
            hits.semantic = hits.semantic.merged(part.semantic.shifted(base))
        for o, ref, row in part.named:
            hits.refs[base + o] = ref
            hits.where[base + o] = (input_number, row)
        hits.num_docs += part.num_docs
        hits.chars += part.chars
        hits.skipped.merge(part.skipped)

    def finish(self) -> StreamHits:
        from tcqa_data.decontam.textstore.anchors import ANCHOR_MAX_DF

        hits = self.hits
        if hits.anchor_pairs:
            k, d = _sorted_pairs(hits.anchor_pairs)
            live = hits.anchor_df[k] <= ANCHOR_MAX_DF
            hits.anchor_pairs = [(k[live], d[live])]
        return hits


def scan_corpus(table: BenchmarkTable, inputs: Sequence[CorpusInput],
                progress: Callable[[int, int], None] | None = None, *, workers: int = 1,
                shard_bytes: int = SHARD_BYTES, engine: Any = None, work_dir: str | None = None
                ) -> StreamHits:
    """Stream ``inputs`` against ``table`` (see the module doc); ``progress(chars, docs)`` per batch
    (one process) or shard.
    ``workers`` > 1: the shards as tasks on a local engine; ``engine``: on that engine (e.g. a
    ``RayEngine``), their files in a temporary folder in ``work_dir`` (a folder every node sees;
    default: the system's temporary folder), or, when every input is a URL (object storage), the
    keys sent to the tasks and their hits returned through the engine: no shared folder. The same
    result either way."""
    merge = _Merge(table, list(inputs))
    if workers <= 1 and engine is None:
        # one process: each input as one shard, read in order (the same hits as any cut into
        # shards), with no pass counting a plain file's newlines to number its shards' lines
        for k, inp in enumerate(inputs):
            for shard in split_input(inp, max(shard_bytes, inp.size)):
                merge.add(scan_shard(table, shard, progress), k)
        return merge.finish()
    shards = [(k, s) for k, inp in enumerate(inputs) for s in split_input(inp, shard_bytes)]
    from contextlib import nullcontext

    from tcqa_data.engines import LocalEngine, run_tasks
    from tcqa_data.io_utils import write_npy_atomic

    if engine is not None and all(is_url(inp.path) for inp in inputs):
        # every input in object storage: no folder need be shared by the nodes; the table's keys
        # go to the tasks once through the engine (Ray's object store), their hits come back as results
        calls = [{"path": s.input.path, "format": s.input.format, "size": s.input.size,
                  "shard": [s.index, s.kind, s.start, s.end, s.first_line]} for _, s in shards]

        def arrived(i: int, part: ShardHits) -> None:
            if progress is not None:
                progress(part.chars, part.num_docs)

        parts = run_tasks(scan_shard_keys_task, calls, desc="stream", engine=engine, on_done=arrived,
                          shared={"cfg": _cfg_dict(table.cfg), "keys": table.keys,
                                  "anchor_keys": table.anchor_keys, "rare": table.rare})
        for (k, _), part in zip(shards, parts, strict=True):
            merge.add(part, k)
        return merge.finish()

    owned = LocalEngine(workers) if engine is None else nullcontext(engine)
    with tempfile.TemporaryDirectory(prefix=".tcqa-stream-", dir=work_dir) as work, owned as eng:
        folder = Path(work)
        eng.check_shared_paths(work, [s.input.path for _, s in shards if s.input.format != "hf"])
        for n in table.cfg.ngram_sizes:
            write_npy_atomic(folder / f"keys.{n}.npy", table.keys[n])
        write_npy_atomic(folder / "keys.anchors.npy", table.anchor_keys)
        if table.rare is not None:
            table.rare.save(folder)
        calls = [{"index": i, "path": s.input.path, "format": s.input.format, "size": s.input.size,
                  "shard": [s.index, s.kind, s.start, s.end, s.first_line]}
                 for i, (_, s) in enumerate(shards)]

        def done(i: int, meta: dict[str, Any]) -> None:
            if progress is not None:
                progress(meta["chars"], meta["num_docs"])

        metas = run_tasks(scan_shard_task, calls, desc="stream", engine=eng, on_done=done,
                          shared={"work": work, "cfg": _cfg_dict(table.cfg)})
        for i, ((k, _), meta) in enumerate(zip(shards, metas, strict=True)):
            merge.add(ShardHits.load(folder / f"shard{i:05d}", meta), k)
    return merge.finish()


def _cfg_dict(cfg: StreamConfig) -> dict[str, Any]:
    import dataclasses

    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(cfg).items()}


def scan_shard_task(work: str, cfg: dict[str, Any], index: int, path: str, format: str, size: int,
                    shard: list) -> dict[str, Any]:
    """``scan_shard`` as an engine task: the table's keys read from ``work``, the shard's hits
    written to ``work/shard{index}``; returns the rest of them (``ShardHits.save``)."""
    from tcqa_data.io_utils import load_npy

    folder = Path(work)
    config = StreamConfig(**{**cfg, "ngram_sizes": tuple(cfg["ngram_sizes"])})
    keys = {n: load_npy(folder / f"keys.{n}.npy", None) for n in config.ngram_sizes}
    rare = RareWordTable.load(folder) if config.semantic else None
    table = BenchmarkTable.from_keys(config, keys, load_npy(folder / "keys.anchors.npy", None), rare)
    inp = CorpusInput(path, format, size)
    part = scan_shard(table, InputShard(inp, *shard))
    return part.save(folder / f"shard{index:05d}")


def scan_shard_keys_task(cfg: dict[str, Any], keys: dict[int, np.ndarray], anchor_keys: np.ndarray,
                         rare: RareWordTable | None, path: str, format: str, size: int, shard: list
                         ) -> ShardHits:
    """``scan_shard`` as an engine task given the table's keys (and, with ``cfg.semantic``, the
    items' rare-word table: the semantic tier's candidates come back with the hits); returns the
    shard's hits (the path of ``scan_corpus`` for inputs in object storage: nothing written on any
    node)."""
    config = StreamConfig(**{**cfg, "ngram_sizes": tuple(cfg["ngram_sizes"])})
    table = BenchmarkTable.from_keys(config, keys, anchor_keys, rare)
    return scan_shard(table, InputShard(CorpusInput(path, format, size), *shard))


def hf_input(cfg: StreamConfig) -> CorpusInput:
    """The input a Hugging Face dataset of ``cfg`` is read as (as ``index-corpus`` names it)."""
    name = f"hf://{cfg.hf_dataset}" + (f"/{cfg.hf_config}" if cfg.hf_config else "")
    return CorpusInput(f"{name}:{cfg.hf_split}", "hf", 0)


def _hf_documents(cfg: StreamConfig, stats: SkipStats | None) -> Iterator[Any]:
    from tcqa_data.decontam.readers import iter_hf_documents

    assert cfg.hf_dataset is not None
    return iter_hf_documents(cfg.hf_dataset, cfg.hf_config, cfg.hf_split, cfg.text_field, cfg.id_field,
                             on_error=cfg.on_error, stats=stats)


def read_texts(hits: StreamHits, ordinals: Sequence[int]) -> dict[int, str]:
    """The texts of matched corpus docs, read again from their inputs (one read per input holding
    any): a stream keeps no text, so aligned evidence costs a second read of those inputs only."""
    cfg = hits.table.cfg
    want: dict[int, dict[int, int]] = {}
    for o in ordinals:
        number, row = hits.where[o]
        want.setdefault(number, {})[row] = o
    out: dict[int, str] = {}
    for number, rows in sorted(want.items()):
        left = len(rows)
        inp = hits.inputs[number]
        docs = (_hf_documents(cfg, None) if inp.format == "hf"
                else iter_documents(inp, cfg.text_field, cfg.id_field, cfg.on_error))
        for doc in docs:
            o = rows.get(doc.row)
            if o is not None:
                out[o] = doc.text
                left -= 1
                if not left:
                    break
    return out
