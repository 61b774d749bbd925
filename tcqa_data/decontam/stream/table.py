"""The benchmark side of a stream: every query n-gram hash in one sorted table.

``StreamConfig`` says what is matched. With ``ngram_sizes=(3,)`` and the query "The cat sat on
the mat" (Janitor normalization: lowercase, ASCII punctuation deleted, split on whitespace) the
table holds the hashes of "the cat sat", "cat sat on", "sat on the" and "on the mat", each with
the queries that hold it; a corpus doc "...and the cat sat on a chair" matches on "the cat sat"
only. N-grams are hashed exactly as the index hashes them (``core/hashing.py``, same seed), so a
corpus n-gram and a query n-gram are equal when their hashes are.

``BenchmarkTable`` is the table: per n, the sorted unique hashes (``keys[n]``) and, as a CSR
(``holder_start[n]``, ``holders[n]``), the queries holding each; with ``anchors``, the upper 32
bits of every query 4-gram hash (the text store's alignment anchors, ``textstore/anchors.py``).
A benchmark item shorter than n words has no n-gram; ``whole`` registers such queries (at least
``short_min_words`` words, NeMo Curator's 8) whole: its m words as one m-gram, at size m only.

A lookup is a gather in a presence filter (one byte per value of a hash's top 24 bits: a few
percent of corpus n-grams pass it) and ``np.searchsorted`` for those that pass: a binary search of
every corpus n-gram cost 4 of the 6 CPU-seconds of a 40 MB pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tcqa_data.decontam.core.arrays import (
    FILTER_BITS,
    key_slots,
    presence_filter,
    slot_lookup,
    sorted_lookup,
    sorted_unique,
)
from tcqa_data.decontam.ngrams.index import DEFAULT_PROVENANCE
from tcqa_data.decontam.ngrams.runs import sort_pairs
from tcqa_data.decontam.semantic.rarewords import RareWordTable


@dataclass(frozen=True)
class StreamConfig:
    """How a corpus is streamed against the benchmark table.

    ``ngram_sizes``: every n the rule needs; ``normalization`` and ``seed``: as ``index-corpus``
    (``janitor``, 0); ``provenance``: corpus docs remembered per query n-gram (the first ones, as
    the index's ``provenance_docs``); ``anchors``: also match the alignment anchors (``aligned*``
    terms); ``keep_pairs``: keep every (n-gram, corpus doc) hit (``purify`` needs them: which
    queries each corpus doc matched); the reader options (``hf_*`` too) are ``index-corpus``'s."""

    ngram_sizes: tuple[int, ...] = (13,)
    normalization: str = "janitor"
    seed: int = 0
    provenance: int = DEFAULT_PROVENANCE
    anchors: bool = False
    keep_pairs: bool = False
    # also collect the semantic tier's candidate windows (``decontam/semantic``: a ``semantic`` term)
    semantic: bool = False
    text_field: str = "text"
    id_field: str | None = None
    on_error: str = "raise"
    # a Hugging Face dataset streamed as one more input (``index-corpus --hf-dataset``): its input
    # has format "hf" and path "hf://<name>[/<config>]:<split>"
    hf_dataset: str | None = None
    hf_config: str | None = None
    hf_split: str = "train"


class BenchmarkTable:
    """The queries' n-gram hashes, sorted, with the queries holding each (see the module doc)."""

    def __init__(self, queries: Sequence[str], cfg: StreamConfig,
                 whole: Mapping[int, Sequence[int]] | None = None,
                 groups: Sequence[int] | None = None) -> None:
        """``whole``: size m -> the queries (their numbers) of m words matched whole; the table then
        holds those sizes too (``cfg.ngram_sizes`` widened). ``groups``: each query's task, for the
        semantic tier's rare-word table (``RareWordTable.build``)."""
        import dataclasses

        from tcqa_data.decontam.core.hashing import batch_ngram_hashes
        from tcqa_data.decontam.textstore.anchors import ANCHOR_K

        whole = {m: list(q) for m, q in (whole or {}).items() if m not in cfg.ngram_sizes and len(q)}
        by_whole = {}
        for m, numbers in whole.items():
            texts = [queries[q] for q in numbers]
            flat, owner = batch_ngram_hashes(texts, [m], cfg.normalization, cfg.seed)[m]
            by_whole[m] = (flat, np.asarray(numbers, dtype=np.int64)[np.asarray(owner, dtype=np.int64)])
        cfg = dataclasses.replace(cfg, ngram_sizes=tuple(sorted(set(cfg.ngram_sizes) | set(whole))))
        self.cfg = cfg
        self.num_queries = len(queries)
        self._slots: dict[int, tuple[np.ndarray, np.ndarray, int]] = {}
        self.keys: dict[int, np.ndarray] = {}
        self.filters: dict[int, np.ndarray] = {}
        self.holder_start: dict[int, np.ndarray] = {}
        self.holders: dict[int, np.ndarray] = {}
        ns = sorted((set(cfg.ngram_sizes) - set(whole)) | ({ANCHOR_K} if cfg.anchors else set()))
        by_n = batch_ngram_hashes(list(queries), ns, cfg.normalization, cfg.seed) if queries else {
            n: (np.empty(0, np.uint64), np.empty(0, np.int64)) for n in ns}
        by_n.update(by_whole)
        for n in cfg.ngram_sizes:
            # distinct (hash, query) pairs, by hash then query (the index's radix sort): a query
            # repeating an n-gram holds it once
            flat, owner = sort_pairs(*by_n[n])
            first = np.ones(len(flat), dtype=bool)
            first[1:] = flat[1:] != flat[:-1]
            self.keys[n] = flat[first]
            self.filters[n] = presence_filter(self.keys[n], 64)
            self.holder_start[n] = np.append(np.flatnonzero(first), len(flat)).astype(np.int64)
            self.holders[n] = owner.astype(np.int64)
        # anchors compare the upper 32 bits of a 4-gram hash, as the text store's tables do
        self.anchor_keys = (sorted_unique(np.asarray(by_n[ANCHOR_K][0], dtype=np.uint64) >> np.uint64(32))
                            if cfg.anchors else np.empty(0, np.uint64))
        self.anchor_filter = presence_filter(self.anchor_keys, 32)
        self.rare = (RareWordTable.build(queries, cfg.normalization, cfg.seed, groups) if cfg.semantic
                     else None)

    @classmethod
    def from_keys(cls, cfg: StreamConfig, keys: dict[int, np.ndarray], anchor_keys: np.ndarray,
                  rare: RareWordTable | None = None) -> BenchmarkTable:
        """A table for lookups only (a stream worker's: no queries, no holders; ``rare``: the
        items' rare words, with ``cfg.semantic``)."""
        table = cls.__new__(cls)
        table.cfg, table.num_queries, table._slots = cfg, 0, {}
        table.keys = {n: np.asarray(k, dtype=np.uint64) for n, k in keys.items()}
        table.filters = {n: presence_filter(k, 64) for n, k in table.keys.items()}
        table.holder_start, table.holders = {}, {}
        table.anchor_keys = np.asarray(anchor_keys, dtype=np.uint64)
        table.anchor_filter = presence_filter(table.anchor_keys, 32)
        table.rare = rare
        return table

    def presence_bits(self) -> dict[int, tuple[np.ndarray, int, np.ndarray, int]]:
        """Per n, the pass's two bit filters (``hashing.hash_normalized_present``): on a hash's top
        bits (with the shift) and on its low bits (with the mask), each about 8 bits per key
        (128 KB to 2 MB) so that both stay in a core's cache; together they let ~0.6% of corpus
        n-grams through to the lookup at 8 bits per key. One filter on the top bits alone, on
        353 k keys over a 206 MB pass: 2**22 bits took 1.54 CPU-s, 2**24 1.92, 2**26 2.50 (cache
        misses), and 2**22 let 8% through."""
        if getattr(self, "_bits", None) is None:
            self._bits = {}
            for n, keys in self.keys.items():
                bits = min(FILTER_BITS, max(20, (8 * len(keys)).bit_length()))
                high = np.zeros(1 << bits, dtype=bool)
                high[(keys >> np.uint64(64 - bits)).astype(np.int64)] = True
                low = np.zeros(1 << bits, dtype=bool)
                low[(keys & np.uint64((1 << bits) - 1)).astype(np.int64)] = True
                self._bits[n] = (np.packbits(high, bitorder="little"), 64 - bits,
                                 np.packbits(low, bitorder="little"), (1 << bits) - 1)
        return self._bits

    def lookup(self, hashes: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Per hash: its row in ``keys[n]`` (a valid row; meaningful where found) and whether it is
        there. Compiled: an open-addressing table of the keys (``core.arrays.key_slots``); else the
        presence filter and ``np.searchsorted``."""
        from tcqa_data.decontam.core import kernel

        hashes = np.asarray(hashes, dtype=np.uint64)
        keys = self.keys[n]
        if not len(keys) or not kernel.enabled():
            return sorted_lookup(keys, hashes, self.filters[n], 64)
        if n not in self._slots:
            self._slots[n] = key_slots(keys)
        return slot_lookup(self._slots[n], hashes)

    def anchor_lookup(self, hashes32: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``lookup`` for anchor hashes (upper 32 bits)."""
        return sorted_lookup(self.anchor_keys, np.asarray(hashes32, dtype=np.uint64), self.anchor_filter, 32)

    def queries_of(self, n: int, rows: np.ndarray) -> np.ndarray:
        """The distinct queries holding any of the n-gram rows ``rows`` of ``keys[n]``, ascending."""
        start, stop = self.holder_start[n][rows], self.holder_start[n][np.asarray(rows) + 1]
        if not len(start):
            return np.empty(0, np.int64)
        take = np.concatenate([np.arange(a, b) for a, b in zip(start.tolist(), stop.tolist(), strict=True)])
        return np.unique(self.holders[n][take])
