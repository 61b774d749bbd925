"""The benchmark side of the semantic tier: each item's rare words, as an inverted index.

A rephrasing keeps most of an item's particulars (names, numbers, terms) and changes the common
words. A word is rare when its Zipf frequency in wordfreq's English reference table (shipped with
the ``wordfreq`` package: no corpus statistics are needed before the pass) is below
``RARE_MAX_ZIPF``; its weight is ``(ZIPF_CEILING - zipf) * WEIGHT_SCALE`` as an integer, so sums
are exact and the same in any order (a stream cut into any shards ranks candidates alike). A
number is a particular however common it is in English ("16 eggs", "$2"): it weighs at least
``NUMBER_WEIGHT`` (a word problem's numbers are what tell it from another of the same template).
A word held by more than ``MAX_HOLDERS`` items of one task is no evidence of one of them and is
left out for that task's items (``groups``: each item's task; another task's items keep it, so a
task's candidates do not depend on which tasks run beside it).

``RareWordTable`` is that index: the words' token hashes (the n-gram kernels' 1-gram hashes, so a
corpus token and an item token are equal when their hashes are), sorted, with the items holding
each (CSR), and per item its total rare weight, rare word count and length in words.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

RARE_MAX_ZIPF = 5.0  # rarer than 100 per million English words
ZIPF_CEILING = 7.0
WEIGHT_SCALE = 100
MAX_HOLDERS = 64
NUMBER_WEIGHT = 400  # a number's least weight (as rare as Zipf 3: ~1 per million English words)
# number words a rephrasing may write as digits or the other way round ("three" / "3")
NUMBER_WORDS = {w: str(i) for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())}


@lru_cache(maxsize=1)
def _english_frequencies() -> dict[str, float]:
    from wordfreq import get_frequency_dict

    return get_frequency_dict("en", "best")


def english_zipf(word: str) -> float:
    """``wordfreq.zipf_frequency(word, "en")``. A word of ASCII lowercase letters is its own one
    token, so its frequency is read from wordfreq's table and rounded as wordfreq rounds it (3
    significant digits, then hundredths of a Zipf unit), at a tenth of the cost of wordfreq's
    tokenizer (the table's ~28,000 words were 1.5 CPU-s of every semantic run); any other word goes
    through ``zipf_frequency`` itself. ``tests/test_semantic_cores.py`` holds the two equal."""
    if word.isascii() and word.isalpha() and word.islower():
        freq = _english_frequencies().get(word)
        if freq is None:
            return 0.0  # wordfreq's minimum: once per billion words or less
        freq = round(freq, math.floor(-math.log(freq, 10)) + 3)
        return round(math.log(freq, 10) + 9, 2)
    from wordfreq import zipf_frequency

    return zipf_frequency(word, "en")


@lru_cache(maxsize=1 << 18)
def word_weight(word: str) -> int:
    """Integer weight of a normalized word as a particular (0: a common word, not one): its rarity,
    and at least ``NUMBER_WEIGHT`` for a number."""
    zipf = english_zipf(word)
    rarity = int(round((ZIPF_CEILING - zipf) * WEIGHT_SCALE)) if zipf < RARE_MAX_ZIPF else 0
    return max(rarity, NUMBER_WEIGHT) if word.isdigit() else rarity


def canonical_word(word: str) -> str:
    """The form two texts are compared in for kept particulars: a number word as its digits."""
    return NUMBER_WORDS.get(word, word)


def word_hashes(words: Sequence[str], seed: int) -> np.ndarray:
    """The 1-gram hash of each normalized word, as the corpus pass hashes its tokens."""
    from tcqa_data.decontam.core.hashing import hash_normalized
    from tcqa_data.decontam.core.hashing import normalized_buffer as buffer

    if not words:
        return np.empty(0, np.uint64)
    arr, doc_start = buffer(list(words), "janitor")  # already normalized: only joined here
    h, owner = hash_normalized(arr, doc_start, [1], seed)[1]
    if len(h) != len(words):
        raise ValueError("word_hashes: every word must be one token")
    return np.asarray(h, dtype=np.uint64)


def first_task(per_task: Sequence[Sequence[str]]) -> dict[str, int]:
    """Each query of the run's tasks (their query lists, in order) with its task: the first that
    holds it (a query two tasks share counts once, for the first), in first-seen order. The
    ``groups`` of ``RareWordTable.build``."""
    out: dict[str, int] = {}
    for g, queries in enumerate(per_task):
        for q in queries:
            out.setdefault(q, g)
    return out


class RareWordTable:
    """Items' rare words as an inverted index (module doc)."""

    ARRAYS = ("keys", "weight", "post_start", "post_query", "query_total", "query_rare", "query_words")

    def __init__(self, arrays: dict[str, np.ndarray], words: list[str] | None = None) -> None:
        for name in self.ARRAYS:
            setattr(self, name, np.asarray(arrays[name]))
        self.words = words  # each key's word (the builder's table only: shared words in reports)
        self.foreign: Any = None  # the items for the foreign-span check (foreign.ForeignItems), if any
        self._known: frozenset[str] | None = None
        self._slots: tuple[np.ndarray, np.ndarray, int] | None = None  # lookup's table, once built

    @classmethod
    def build(cls, queries: Sequence[str], scheme: str, seed: int, groups: Sequence[int] | None = None
              ) -> RareWordTable:
        """The table of ``queries``; ``groups``: each query's task (a word's holders are counted
        per task, module doc; ``None``: one task)."""
        from collections import Counter

        from tcqa_data.decontam.core.normalize import tokenize

        holders: dict[str, list[int]] = {}
        lengths = np.zeros(len(queries), np.int64)
        for q, text in enumerate(queries):
            tokens = tokenize(text, scheme)
            lengths[q] = len(tokens)
            for w in dict.fromkeys(tokens):
                if word_weight(w):
                    holders.setdefault(w, []).append(q)
        group = list(groups) if groups is not None else [0] * len(queries)
        for w, qs in list(holders.items()):
            if len(qs) <= MAX_HOLDERS:  # no task can hold it more often
                continue
            per_group = Counter(group[q] for q in qs)
            holders[w] = [q for q in qs if per_group[group[q]] <= MAX_HOLDERS]
        words = sorted(w for w, qs in holders.items() if qs)
        hashes = word_hashes(words, seed)
        order = np.argsort(hashes, kind="stable")
        keys = hashes[order]
        words = [words[i] for i in order.tolist()]
        weight = np.array([word_weight(w) for w in words], dtype=np.int64)
        counts = np.array([len(holders[w]) for w in words], dtype=np.int64)
        post_start = np.zeros(len(words) + 1, np.int64)
        np.cumsum(counts, out=post_start[1:])
        post_query = np.array([q for w in words for q in holders[w]], dtype=np.int64)
        per_post_weight = np.repeat(weight, counts)
        total = np.bincount(post_query, weights=per_post_weight, minlength=len(queries)).astype(np.int64) \
            if len(post_query) else np.zeros(len(queries), np.int64)
        rare = np.bincount(post_query, minlength=len(queries)).astype(np.int64) if len(post_query) \
            else np.zeros(len(queries), np.int64)
        return cls({"keys": keys, "weight": weight, "post_start": post_start, "post_query": post_query,
                    "query_total": total, "query_rare": rare, "query_words": lengths}, words)

    @property
    def num_queries(self) -> int:
        return len(self.query_total)

    def lookup(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per token hash: its row in ``keys`` (valid where found) and whether it is a rare word:
        compiled, an open-addressing table of the keys (every token of the corpus is looked up:
        3.5 s of binary search on 206 MB); else ``core.arrays.sorted_lookup``."""
        from tcqa_data.decontam.core import kernel
        from tcqa_data.decontam.core.arrays import key_slots, slot_lookup, sorted_lookup

        if not len(self.keys) or not kernel.enabled():
            return sorted_lookup(self.keys, hashes)
        if self._slots is None:
            self._slots = key_slots(self.keys)
        return slot_lookup(self._slots, hashes)

    def shared_words(self, query_text: str, window_text: str, scheme: str) -> list[str]:
        """The item's rare words (those in the table) that the window holds, in the item's order."""
        from tcqa_data.decontam.core.normalize import tokenize

        assert self.words is not None
        if self._known is None:  # once per table: it holds every item's words
            self._known = frozenset(self.words)
        known = self._known
        in_window = set(tokenize(window_text, scheme))
        return [w for w in dict.fromkeys(tokenize(query_text, scheme)) if w in known and w in in_window]

    def save(self, folder: Path) -> None:
        from tcqa_data.io_utils import write_npy_atomic

        folder.mkdir(parents=True, exist_ok=True)
        for name in self.ARRAYS:
            write_npy_atomic(folder / f"rare.{name}.npy", getattr(self, name))
        if self.foreign is not None:
            self.foreign.save(folder)

    @classmethod
    def load(cls, folder: Path) -> RareWordTable:
        from tcqa_data.decontam.semantic.foreign import ForeignItems
        from tcqa_data.io_utils import load_npy

        arrays: dict[str, Any] = {name: np.array(load_npy(folder / f"rare.{name}.npy", None))
                                  for name in cls.ARRAYS}
        table = cls(arrays)
        table.foreign = ForeignItems.load(folder)
        return table
