"""One pass over a corpus, looking its n-gram hashes up in the benchmark table (``table.py``).

Per corpus batch (the index build's readers: ``iter_normalized_batches`` for JSONL, compiled,
else ``iter_documents``) the n-gram hashes of every n of the table are computed by the index's
kernels and looked up with one ``np.searchsorted``; for each query n-gram this counts the corpus
docs holding it (exact: only the benchmark's n-grams are counted) and remembers the first
``provenance`` of them, as the index does. Corpus docs are numbered in the order ``index-corpus``
numbers them (inputs sorted, then line or row), so "first doc" means the same in both. Only docs
with a hit are named (``refs``, ``where``): memory is bounded by the benchmark side and its
matches, not by the corpus.

With anchors (``aligned*`` terms), every corpus doc's 4-grams are winnowed as the text store
winnows them and the kept ones looked up among the queries' 4-grams: (anchor, doc) pairs are kept
while the anchor is in at most ``ANCHOR_MAX_DF`` docs, as ``AnchorIndex`` uses them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from tcqa_data.decontam.readers import (
    CorpusInput,
    SkipStats,
    iter_documents,
    iter_normalized_batches,
    normalized_batches_supported,
)
from tcqa_data.decontam.stream.table import BenchmarkTable

BATCH_CHARS = 4_000_000


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

    def hit_pairs(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Every (n-gram row, doc) hit of size ``n`` (``keep_pairs``), sorted by doc then row."""
        parts = self.pairs.get(n, [])
        rows = np.concatenate([r for r, _ in parts]) if parts else np.empty(0, np.int64)
        docs = np.concatenate([d for _, d in parts]) if parts else np.empty(0, np.int64)
        order = np.lexsort((rows, docs))
        return rows[order], docs[order]


class _Pass:
    """The accumulators of one pass (see ``StreamHits``)."""

    def __init__(self, table: BenchmarkTable, inputs: list[CorpusInput]) -> None:
        cfg = table.cfg
        self.table = table
        self.hits = StreamHits(
            table, inputs,
            df={n: np.zeros(len(table.keys[n]), np.int64) for n in cfg.ngram_sizes},
            docs={n: np.full((len(table.keys[n]), cfg.provenance), -1, np.int64) for n in cfg.ngram_sizes},
            anchor_df=np.zeros(len(table.anchor_keys), np.int64))
        self.kept = {n: np.zeros(len(table.keys[n]), np.int64) for n in cfg.ngram_sizes}

    def add(self, by_n: dict[int, tuple[np.ndarray, np.ndarray]], ndocs: int,
            name: Callable[[np.ndarray], list[tuple[str, int]]], input_number: int) -> None:
        """One batch: ``by_n`` n -> (hashes, batch-local doc) from the kernels; ``name(local docs)``
        gives the (ref, line/row) of the batch's docs that matched."""
        base = self.hits.num_docs
        matched: list[np.ndarray] = []
        for n in self.table.cfg.ngram_sizes:
            h, d = by_n[n]
            rows, found = self.table.lookup(np.asarray(h, dtype=np.uint64), n)
            if not found.any():
                continue
            rows, d = rows[found], np.asarray(d, dtype=np.int64)[found]
            # distinct (n-gram, doc) pairs, by n-gram then doc: df counts docs, not occurrences
            key = np.unique(rows * ndocs + d)
            rows, d = key // ndocs, key % ndocs
            self._count(n, rows, d + base)
            matched.append(d)
        if self.table.cfg.anchors:
            from tcqa_data.decontam.textstore.anchors import ANCHOR_K, winnow_hashes

            kept, owner = winnow_hashes(*by_n[ANCHOR_K])
            rows, found = self.table.anchor_lookup(kept)
            if found.any():
                rows, d = rows[found], np.asarray(owner, dtype=np.int64)[found]
                key = np.unique(rows * ndocs + d)
                rows, d = key // ndocs, key % ndocs
                self._count_anchors(rows, d + base)
                matched.append(d)
        if matched:
            local = np.unique(np.concatenate(matched))
            for o, (ref, row) in zip(local.tolist(), name(local), strict=True):
                self.hits.refs[base + o] = ref
                self.hits.where[base + o] = (input_number, row)
        self.hits.num_docs += ndocs

    def _count(self, n: int, rows: np.ndarray, docs: np.ndarray) -> None:
        hits = self.hits
        uniq, first, counts = np.unique(rows, return_index=True, return_counts=True)
        hits.df[n][uniq] += counts
        # the first `provenance` docs of each n-gram: docs arrive in ascending order
        rank = np.arange(len(rows)) - np.repeat(first, counts)
        slot = self.kept[n][rows] + rank
        ok = slot < hits.docs[n].shape[1]
        hits.docs[n][rows[ok], slot[ok]] = docs[ok]
        self.kept[n][uniq] = np.minimum(self.kept[n][uniq] + counts, hits.docs[n].shape[1])
        if self.table.cfg.keep_pairs:
            hits.pairs.setdefault(n, []).append((rows, docs))

    def _count_anchors(self, rows: np.ndarray, docs: np.ndarray) -> None:
        from tcqa_data.decontam.textstore.anchors import ANCHOR_MAX_DF

        hits = self.hits
        uniq, counts = np.unique(rows, return_counts=True)
        hits.anchor_df[uniq] += counts
        # an anchor in more than ANCHOR_MAX_DF docs is no evidence (AnchorIndex drops it): its
        # pairs are not kept, so memory stays bounded by the queries' anchors
        live = hits.anchor_df[rows] <= ANCHOR_MAX_DF
        if live.any():
            hits.anchor_pairs.append((rows[live], docs[live]))

    def finish(self) -> StreamHits:
        from tcqa_data.decontam.textstore.anchors import ANCHOR_MAX_DF

        hits = self.hits
        if hits.anchor_pairs:
            k = np.concatenate([r for r, _ in hits.anchor_pairs])
            d = np.concatenate([x for _, x in hits.anchor_pairs])
            live = hits.anchor_df[k] <= ANCHOR_MAX_DF
            hits.anchor_pairs = [(k[live], d[live])]
        return hits


def scan_corpus(table: BenchmarkTable, inputs: Sequence[CorpusInput],
                progress: Callable[[int, int], None] | None = None) -> StreamHits:
    """Stream ``inputs`` against ``table`` (see the module doc). ``progress(bytes, docs)`` per batch."""
    from tcqa_data.decontam.core.hashing import hash_normalized
    from tcqa_data.decontam.textstore.anchors import ANCHOR_K

    cfg = table.cfg
    ns = sorted(set(cfg.ngram_sizes) | ({ANCHOR_K} if cfg.anchors else set()))
    state = _Pass(table, list(inputs))
    stats = state.hits.skipped
    for number, inp in enumerate(inputs):
        if normalized_batches_supported(inp.format, cfg.text_field, cfg.id_field, cfg.normalization):
            for b in iter_normalized_batches(inp, cfg.text_field, cfg.on_error, stats, BATCH_CHARS):
                by_n = hash_normalized(b.data, b.doc_start, ns, cfg.seed)
                rows = b.rows

                def name(local: np.ndarray, rows: np.ndarray = rows, path: str = inp.path
                         ) -> list[tuple[str, int]]:
                    return [(f"{path}:{r}", r) for r in rows[local].tolist()]

                state.add(by_n, len(b.rows), name, number)
                state.hits.chars += b.chars
                if progress is not None:
                    progress(b.chars, len(b.rows))
            continue
        for batch in _batches(iter_documents(inp, cfg.text_field, cfg.id_field, cfg.on_error, stats)):
            from tcqa_data.decontam.core.hashing import batch_ngram_hashes

            by_n = batch_ngram_hashes([d.text for d in batch], ns, cfg.normalization, cfg.seed)

            def name_docs(local: np.ndarray, batch: list = batch) -> list[tuple[str, int]]:
                return [(batch[i].ref, batch[i].row) for i in local.tolist()]

            chars = sum(len(d.text) for d in batch)
            state.add(by_n, len(batch), name_docs, number)
            state.hits.chars += chars
            if progress is not None:
                progress(chars, len(batch))
    return state.finish()


def _batches(docs: Iterator, limit: int = BATCH_CHARS) -> Iterator[list]:
    batch: list = []
    size = 0
    for d in docs:
        batch.append(d)
        size += len(d.text)
        if size >= limit:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


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
        for doc in iter_documents(hits.inputs[number], cfg.text_field, cfg.id_field, cfg.on_error):
            o = rows.get(doc.row)
            if o is not None:
                out[o] = doc.text
                left -= 1
                if not left:
                    break
    return out
