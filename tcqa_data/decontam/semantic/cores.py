"""Shared cores: the rare words a cluster of items all hold, walked once for all of them.

A SQuAD passage is the context of about five questions, an MC-TACO sentence of several: their
items share most of their rare words, so a corpus word of the passage would update five items'
counters in every window that holds it (on the wiki sample with MC-TACO + SQuAD + an MMLU subject,
SQuAD's items made 88% of the kernel's work). Items whose rare words overlap by at least
``LINK_SHARE`` of both totals are linked; a linked cluster's core is the words all its items
hold, and each item keeps its other words as its own residual. The window kernel walks a word's
segments (a core once, not per item) and sums an item as its residual plus its core.

Exact, not a filter: an item's shared weight and word count are those of its residual plus its
core (the two are disjoint). An item is evaluated when its residual is touched or when its core
alone meets the least need (``need_weight``, ``need_words``) of its cluster's items: an item
whose residual is untouched passes only on its core, so no passing item is missed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tcqa_data.decontam.semantic.rarewords import RareWordTable

LINK_SHARE = 0.5  # 0.3 to 0.6 gave the same work on the wiki sample


@dataclass(frozen=True)
class CoreSegments:
    """Segments: item ``q``'s residual is segment ``q``; core ``c`` is segment ``num_items + c``.
    ``seg_start``/``seg_post``: each word's segments (CSR over the table's words);
    ``item_core``: each item's core segment (-1: none); ``core_items_start``/``core_items``: each
    core's items; ``need_weight``/``need_words``: each item's need, as the window test reads it;
    ``core_need_weight``/``core_need_words``: the least need of a core's items."""

    seg_start: np.ndarray
    seg_post: np.ndarray
    item_core: np.ndarray
    core_items_start: np.ndarray
    core_items: np.ndarray
    need_weight: np.ndarray
    need_words: np.ndarray
    core_need_weight: np.ndarray
    core_need_words: np.ndarray

    @property
    def num_cores(self) -> int:
        return len(self.core_need_weight)


def _clusters(rare: RareWordTable, word: np.ndarray) -> np.ndarray:
    """Each item's cluster: the connected components of items linked by their overlap."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    nq, nw = rare.num_queries, len(rare.weight)
    held = sp.csr_matrix((np.ones(len(word)), (rare.post_query, word)), shape=(nq, nw))
    weighted = sp.csr_matrix((rare.weight[word].astype(np.float64), (rare.post_query, word)), shape=(nq, nw))
    overlap = (weighted @ held.T).tocoo()  # [q, p]: the weight of q's words that p holds too
    total = rare.query_total.astype(np.float64)
    # symmetric: overlap[q, p] == overlap[p, q]; each pair once
    link = (overlap.row < overlap.col) & (overlap.data >= LINK_SHARE * total[overlap.row]) \
        & (overlap.data >= LINK_SHARE * total[overlap.col])
    graph = sp.csr_matrix((np.ones(int(link.sum())), (overlap.row[link], overlap.col[link])), shape=(nq, nq))
    return connected_components(graph, directed=False)[1]


def core_segments(rare: RareWordTable, need_weight: np.ndarray, need_words: np.ndarray) -> CoreSegments:
    """The table's words as segments (module doc), with each item's ``need_weight`` and
    ``need_words``."""
    nq, nw = rare.num_queries, len(rare.weight)
    word = np.repeat(np.arange(nw, dtype=np.int64), np.diff(rare.post_start))
    label = _clusters(rare, word) if len(word) else np.arange(nq, dtype=np.int64)
    size = np.bincount(label, minlength=nq)
    # a (cluster, word) entry held by every item of a cluster of two or more is a core word
    key = label[rare.post_query].astype(np.int64) * nw + word
    uniq, count = np.unique(key, return_counts=True)
    core_keys = uniq[(count == size[uniq // nw]) & (size[uniq // nw] >= 2)]
    clusters = np.unique(core_keys // nw)
    core_of_cluster = np.full(len(size), -1, np.int64)
    core_of_cluster[clusters] = nq + np.arange(len(clusters))
    in_core = np.isin(key, core_keys)
    seg = np.where(in_core, core_of_cluster[label[rare.post_query]], rare.post_query)
    span = nq + len(clusters)
    pairs = np.unique(word * span + seg)  # a core word once per word, not per item
    seg_start = np.zeros(nw + 1, np.int64)
    np.cumsum(np.bincount(pairs // span, minlength=nw), out=seg_start[1:])
    item_core = core_of_cluster[label]
    held = np.flatnonzero(item_core >= 0)
    core = item_core[held] - nq
    core_items_start = np.zeros(len(clusters) + 1, np.int64)
    np.cumsum(np.bincount(core, minlength=len(clusters)), out=core_items_start[1:])
    most = np.iinfo(np.int64).max
    core_need_weight = np.full(len(clusters), most, np.int64)
    core_need_words = np.full(len(clusters), most, np.int64)
    np.minimum.at(core_need_weight, core, need_weight[held])
    np.minimum.at(core_need_words, core, need_words[held])
    return CoreSegments(seg_start, (pairs % span).astype(np.int64), item_core.astype(np.int64),
                        core_items_start, held[np.argsort(core, kind="stable")].astype(np.int64),
                        need_weight, need_words, core_need_weight, core_need_words)
