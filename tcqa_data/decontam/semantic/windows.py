"""Candidate windows: corpus spans that share enough of an item's rare-word weight.

Every corpus doc is read whole as overlapping windows of ``WINDOW_WORDS`` words, one every
``WINDOW_STRIDE`` words (a long article is not truncated: an item spliced into its middle is in
some window). Per batch of normalized docs (``hash_normalized``'s layout, so the stream pass's
own buffer), the tokens are hashed as 1-grams, looked up among the items' rare words
(``RareWordTable``) and expanded to the items holding each; a window is a candidate for an item
when the distinct rare words they share weigh at least ``MIN_SHARE`` of the item's rare weight
(at most ``SHARE_CAP``: a rephrasing of a long item may keep only its question) and
number at least ``MIN_SHARED`` (or all the item's rare words, when it has fewer).

Per item only the best ``TOP_PER_QUERY`` candidate docs are kept (by shared weight, then doc
ordinal, then window: a total order, so any cut of the corpus into batches and shards keeps the
same ones), each as its best window's verification span: ``SPAN_SCALE`` times the item's length in
words (clamped to ``SPAN_MIN_WORDS``..``SPAN_MAX_WORDS``; a rephrasing may be longer than its item,
and the centre of the shared words need not be the item's) centred on the shared words, and that
span's normalized text (verification scores its sub-spans too). Memory is bounded by the benchmark
side: items x ``TOP_PER_QUERY``.

The windows are scored by a compiled kernel (``_numba_kernels/semantic.py``: one pass over the
rare-word hits, per window its distinct words and the segments holding them, a core that items
share counted once for all of them: ``cores.py``); the numpy fallback expands every (hit, item)
pair and sorts them, with the same result. On the 206 MB wiki sample x10 against 12,068 items
the pass with candidate windows costs ~5.1 CPU-s against the n-gram pass's 1.5 (11.6 with a
counter per item; numpy: ~150).
"""

from __future__ import annotations

import json
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tcqa_data.decontam.core import kernel
from tcqa_data.decontam.semantic.cores import CoreSegments, core_segments
from tcqa_data.decontam.semantic.rarewords import RareWordTable

WINDOW_WORDS = 64
WINDOW_STRIDE = 32
MIN_SHARE = 0.25
SHARE_CAP = 2000  # a long item (a passage and its question) needs this much shared weight at most
MIN_SHARED = 3
TOP_PER_QUERY = 4
SPAN_SCALE = 1.5
SPAN_MIN_WORDS = 16
SPAN_MAX_WORDS = 160

_COLUMNS = ("query", "doc", "window", "weight", "shared", "start", "end")


@dataclass
class Candidates:
    """Candidate (item, corpus doc) spans: per row the item, the doc ordinal, the window number,
    the shared rare weight and word count, the span ``[start, end)`` in doc words, and its text;
    ``windows``/``passed``: windows read and windows that were candidates (before the top cut)."""

    cols: dict[str, np.ndarray] = field(default_factory=lambda: {c: np.empty(0, np.int64) for c in _COLUMNS})
    texts: list[str] = field(default_factory=list)
    windows: int = 0
    passed: int = 0

    def __len__(self) -> int:
        return len(self.texts)

    def shifted(self, base: int) -> Candidates:
        """The same candidates with doc ordinals moved by ``base`` (a shard's docs in the corpus)."""
        cols = dict(self.cols)
        cols["doc"] = cols["doc"] + base
        return Candidates(cols, list(self.texts), self.windows, self.passed)

    def take(self, mask: np.ndarray) -> Candidates:
        """The rows ``mask`` marks, in their order (the windows read and passed unchanged)."""
        rows = np.flatnonzero(mask)
        return Candidates({c: v[rows] for c, v in self.cols.items()}, [self.texts[i] for i in rows.tolist()],
                          self.windows, self.passed)

    def merged(self, other: Candidates) -> Candidates:
        """Both sets, cut to the best ``TOP_PER_QUERY`` docs per item (module doc), in ``_top``'s
        order, as ``_top`` of both would give. These rows are in that order (every ``Candidates``
        that is not a batch's own comes from ``_top``), so only the items of ``other`` are ranked
        again: the stream merges each batch into all the candidates so far, and ranking them all
        took two sorts of ~30,000 rows a batch (0.55 of 3.4 CPU-s of a 206 MB pass)."""
        windows, passed = self.windows + other.windows, self.passed + other.passed
        touched = np.isin(self.cols["query"], other.cols["query"])
        if not len(other) or touched.all():
            cols = {c: np.concatenate([self.cols[c], other.cols[c]]) for c in _COLUMNS}
            return _top(Candidates(cols, self.texts + other.texts, windows, passed))
        again = self.take(touched)
        again = _top(Candidates({c: np.concatenate([again.cols[c], other.cols[c]]) for c in _COLUMNS},
                                again.texts + other.texts))
        kept = np.flatnonzero(~touched)
        # no item is in both parts, and each is in _top's order: a stable sort by item merges them
        order = np.argsort(np.concatenate([self.cols["query"][kept], again.cols["query"]]), kind="stable")
        cols = {c: np.concatenate([self.cols[c][kept], again.cols[c]])[order] for c in _COLUMNS}
        texts = [self.texts[i] for i in kept.tolist()] + again.texts
        return Candidates(cols, [texts[i] for i in order.tolist()], windows, passed)

    def save(self, folder: Path) -> dict[str, Any]:
        from tcqa_data.io_utils import write_npy_atomic

        folder.mkdir(parents=True, exist_ok=True)
        for c in _COLUMNS:
            write_npy_atomic(folder / f"semantic.{c}.npy", self.cols[c])
        (folder / "semantic.texts.json").write_text(json.dumps(self.texts), encoding="utf-8")
        return {"windows": self.windows, "passed": self.passed}

    @classmethod
    def load(cls, folder: Path, meta: dict[str, Any]) -> Candidates:
        from tcqa_data.io_utils import load_npy

        cols = {c: np.array(load_npy(folder / f"semantic.{c}.npy", None)) for c in _COLUMNS}
        texts = json.loads((folder / "semantic.texts.json").read_text(encoding="utf-8"))
        return cls(cols, texts, int(meta["windows"]), int(meta["passed"]))


def _top(c: Candidates) -> Candidates:
    """Per (item, doc) the best window, then per item the best ``TOP_PER_QUERY`` docs."""
    q, d, w, wt = (c.cols[k] for k in ("query", "doc", "window", "weight"))
    if not len(q):
        return c
    order = np.lexsort((w, -wt, d, q))  # per (item, doc) adjacent, its best window first
    qs, ds = q[order], d[order]
    first_of_pair = np.ones(len(order), bool)
    first_of_pair[1:] = (qs[1:] != qs[:-1]) | (ds[1:] != ds[:-1])
    order = order[first_of_pair]
    order = order[np.lexsort((w[order], d[order], -wt[order], q[order]))]
    qs = q[order]
    new_q = np.ones(len(order), bool)
    new_q[1:] = qs[1:] != qs[:-1]
    group_start = np.maximum.accumulate(np.where(new_q, np.arange(len(order)), 0))
    order = order[np.arange(len(order)) - group_start < TOP_PER_QUERY]
    return Candidates({k: v[order] for k, v in c.cols.items()}, [c.texts[i] for i in order.tolist()],
                      c.windows, c.passed)


def _fourth_best(c: Candidates, num_items: int) -> np.ndarray:
    """Per item, the least weight among its kept docs when it has ``TOP_PER_QUERY`` of them (a
    later doc must weigh at least this to enter), else -1 (rows past ``num_items``, a foreign
    span's (``foreign.py``), are not an item's)."""
    mine = c.cols["query"] < num_items
    q_rare, weight = c.cols["query"][mine], c.cols["weight"][mine]
    out = np.full(num_items, -1, np.int64)
    full = np.bincount(q_rare, minlength=num_items) >= TOP_PER_QUERY
    least = np.full(num_items, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(least, q_rare, weight)
    out[full] = least[full]
    return out


def _span_texts(arr: np.ndarray, doc_start: np.ndarray, doc_len: np.ndarray, doc: np.ndarray,
                start: np.ndarray, end: np.ndarray) -> list[str]:
    """The text of words ``[start, end)`` of each batch-local ``doc`` of a normalized buffer (its
    tokens: the runs of non-space bytes), reading only those docs."""
    raw = arr.tobytes() if not isinstance(arr, bytes | bytearray) else bytes(arr)
    out = [""] * len(doc)
    if not len(doc):
        return out
    order = np.argsort(doc, kind="stable")
    docs, first = np.unique(doc[order], return_index=True)
    for d, rows in zip(docs.tolist(), np.split(order, first[1:]), strict=True):
        a, b = int(doc_start[d]), int(doc_start[d + 1])  # the doc and its space, after a space
        edge = np.diff((np.frombuffer(raw, np.uint8, b - a + 1, a - 1) != 32).view(np.int8))
        tok_start, tok_end = np.flatnonzero(edge == 1) + a, np.flatnonzero(edge == -1) + a
        if len(tok_start) != doc_len[d]:  # the kernels' tokens are the buffer's runs of non-space bytes
            raise RuntimeError(f"semantic windows: {len(tok_start)} tokens in a doc of the buffer, "
                               f"{doc_len[d]} hashed")
        for i in rows.tolist():
            out[i] = raw[tok_start[start[i]]:tok_end[end[i] - 1]].decode("utf-8", "replace")
    return out


def _needs(rare: RareWordTable) -> tuple[np.ndarray, np.ndarray]:
    """Each item's need (module doc): shared weight x 100 and distinct shared words."""
    need_weight = np.minimum(rare.query_total, SHARE_CAP) * int(MIN_SHARE * 100)
    return need_weight, np.maximum(np.minimum(MIN_SHARED, rare.query_rare), 2)


def _passes(rare: RareWordTable, gq: np.ndarray, weight: np.ndarray, shared: np.ndarray) -> np.ndarray:
    """Which (item, doc, window) groups are candidates (module doc)."""
    need_weight, need_words = _needs(rare)
    return (weight * 100 >= need_weight[gq]) & (shared >= need_words[gq])


# each table's segments and its items' needs, built once per process (the table's arrays do not
# change), not per batch
_SEGMENTS: weakref.WeakKeyDictionary[RareWordTable, CoreSegments] = weakref.WeakKeyDictionary()


def _segments(rare: RareWordTable) -> CoreSegments:
    if rare not in _SEGMENTS:
        _SEGMENTS[rare] = core_segments(rare, *_needs(rare))
    return _SEGMENTS[rare]


def _window_groups(rare: RareWordTable, v: np.ndarray, doc: np.ndarray, pos: np.ndarray, doc_len: np.ndarray
                   ) -> tuple[np.ndarray, ...]:
    """The candidate (item, doc, window) groups (``_passes``): item, doc, window, shared weight,
    shared word count and mean position of the distinct shared words (each at its first
    position), from the rare-word hits (row ``v`` in the table, ``doc``, word ``pos``, in token
    order). The compiled kernel does it in one pass over the hits; the numpy path expands every
    (hit, item holding the word) pair and sorts them: the same groups (the order differs; the
    caller's ``_top`` sorts them)."""
    if kernel.enabled():
        seg = _segments(rare)
        return kernel.kernels()["window_groups"](
            v, doc, pos, doc_len, seg.seg_start, seg.seg_post, rare.weight, seg.item_core,
            seg.core_items_start, seg.core_items, seg.core_need_weight, seg.core_need_words,
            seg.need_weight, seg.need_words, WINDOW_WORDS, WINDOW_STRIDE)
    # every (hit, item holding the word)
    cnt = rare.post_start[v + 1] - rare.post_start[v]
    hit = np.repeat(np.arange(len(v)), cnt)
    within = np.arange(len(hit)) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    q = rare.post_query[rare.post_start[v][hit] + within]
    v, doc, pos = v[hit], doc[hit], pos[hit]
    # each word is in two windows: the one it starts the second half of, and the next
    win = pos // WINDOW_STRIDE
    q2 = np.concatenate([q, q])
    doc2 = np.concatenate([doc, doc])
    v2 = np.concatenate([v, v])
    pos2 = np.concatenate([pos, pos])
    win2 = np.concatenate([win, win - 1])
    keep = (win2 >= 0) & (win2 * WINDOW_STRIDE < np.maximum(doc_len[doc2] - WINDOW_WORDS + WINDOW_STRIDE, 1))
    q2, doc2, v2, pos2, win2 = q2[keep], doc2[keep], v2[keep], pos2[keep], win2[keep]
    # distinct (item, doc, window, word), at its first position
    order = np.lexsort((pos2, v2, win2, doc2, q2))
    q2, doc2, v2, pos2, win2 = q2[order], doc2[order], v2[order], pos2[order], win2[order]
    first = np.ones(len(q2), bool)
    first[1:] = (q2[1:] != q2[:-1]) | (doc2[1:] != doc2[:-1]) | (win2[1:] != win2[:-1]) | (v2[1:] != v2[:-1])
    q2, doc2, v2, pos2, win2 = q2[first], doc2[first], v2[first], pos2[first], win2[first]
    # per (item, doc, window): shared weight, shared words, mean position
    grp = np.ones(len(q2), bool)
    grp[1:] = (q2[1:] != q2[:-1]) | (doc2[1:] != doc2[:-1]) | (win2[1:] != win2[:-1])
    starts = np.flatnonzero(grp)
    if not len(starts):
        empty = np.empty(0, np.int64)
        return empty, empty, empty, empty, empty, empty
    weight = np.add.reduceat(rare.weight[v2], starts)
    shared = np.diff(np.append(starts, len(q2)))
    centre = np.add.reduceat(pos2, starts) // shared
    ok = _passes(rare, q2[starts], weight, shared)
    return q2[starts][ok], doc2[starts][ok], win2[starts][ok], weight[ok], shared[ok], centre[ok]


def scan_windows(rare: RareWordTable, arr: np.ndarray, doc_start: np.ndarray, seed: int,
                 doc_base: int = 0, tokens: tuple[np.ndarray, np.ndarray] | None = None,
                 into: Candidates | None = None) -> Candidates:
    """The candidate spans of one normalized batch, merged into ``into`` (the candidates of the
    docs before it; module doc); docs numbered from ``doc_base``; ``tokens``: the batch's
    ``normalized_tokens``, where the n-gram pass has them. A group weighing less than an item's
    fourth best so far cannot enter its top, and only the spans that enter are decoded."""
    from tcqa_data.decontam.core.hashing import hash_normalized

    into = into if into is not None else Candidates()
    ndocs = len(doc_start) - 1
    h, tok_doc = hash_normalized(arr, doc_start, [1], seed, tokens)[1]
    tok_doc = np.asarray(tok_doc, np.int64)
    doc_first = np.searchsorted(tok_doc, np.arange(ndocs + 1))  # each doc's first token (+ the end)
    doc_len = np.diff(doc_first)
    windows = int(np.maximum(1, -(-(doc_len - WINDOW_WORDS) // WINDOW_STRIDE) + 1)[doc_len > 0].sum())
    out = Candidates(into.cols, into.texts, into.windows + windows, into.passed)
    rows, found = rare.lookup(np.asarray(h, np.uint64))
    tok = np.flatnonzero(found)
    if not len(tok) or not rare.num_queries:
        return out
    v = rows[tok]
    doc = tok_doc[tok]
    pos = tok - doc_first[doc]
    gq, gdoc, gwin, weight, shared, centre = _window_groups(rare, v, doc, pos, doc_len)
    out.passed += len(gq)
    can_enter = weight >= _fourth_best(into, rare.num_queries)[gq]
    if not can_enter.any():
        return out
    gq, gdoc, gwin, weight, shared, centre = (x[can_enter] for x in (gq, gdoc, gwin, weight, shared, centre))
    span = np.clip((rare.query_words[gq] * SPAN_SCALE).astype(np.int64), SPAN_MIN_WORDS, SPAN_MAX_WORDS)
    start = np.clip(centre - span // 2, 0, None)
    end = np.minimum(start + span, doc_len[gdoc])
    start = np.maximum(np.minimum(start, end - span), 0)
    batch = Candidates({"query": gq, "doc": gdoc + doc_base, "window": gwin, "weight": weight,
                        "shared": shared, "start": start, "end": end}, [""] * len(gq))
    out = out.merged(batch)  # into's docs come before the batch's: its texts are kept
    new = np.flatnonzero(out.cols["doc"] >= doc_base)
    texts = _span_texts(arr, doc_start, doc_len, out.cols["doc"][new] - doc_base, out.cols["start"][new],
                        out.cols["end"][new])
    for i, text in zip(new.tolist(), texts, strict=True):
        out.texts[i] = text
    return out
