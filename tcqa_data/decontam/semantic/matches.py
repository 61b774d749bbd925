"""Verification: each item's candidate spans scored by the embedding model; the best one kept.

``SemanticMatches`` is what an evidence source answers for a list of items (``semantic_matches``):
per item the best span's cosine (NaN: no candidate), corpus doc ordinal (-1: none), word span in
that doc, normalized text, the rare words it shares with the item, and how many candidates were
scored. An item is compared as its best view (``item_views``: whole, each line, question with
each option): a rephrasing often keeps the question and its answer only. Items and spans are
embedded in their normalized form (the corpus pass keeps no other),
in one deterministic order, so the same candidates give the same bytes on any machine split.

``DEFAULT_THRESHOLD`` is what a bare ``semantic`` rule term means; see ``scripts/bench_semantic.py``
for how it was calibrated (one MMLU subject of ``../shared/data/paraphrase``, the others reported).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tcqa_data.decontam.semantic.rarewords import RareWordTable
from tcqa_data.decontam.semantic.windows import Candidates

DEFAULT_THRESHOLD = 0.8
VIEW_MIN_WORDS = 4
VIEW_MAX_LINES = 8


@dataclass
class SemanticMatches:
    """Per item: best cosine, doc, span, window text, shared rare words, candidates scored."""

    cosine: np.ndarray
    docs: np.ndarray
    spans: list[list[int] | None]
    windows: list[str | None]
    shared_words: list[list[str]]
    candidates: np.ndarray
    stats: dict[str, int] = field(default_factory=dict)

    @classmethod
    def empty(cls, k: int) -> SemanticMatches:
        return cls(np.full(k, np.nan), np.full(k, -1, np.int64), [None] * k, [None] * k,
                   [[] for _ in range(k)], np.zeros(k, np.int64))

    def take(self, rows: Sequence[int]) -> SemanticMatches:
        idx = np.asarray(rows, np.int64)
        return SemanticMatches(self.cosine[idx], self.docs[idx], [self.spans[i] for i in idx.tolist()],
                               [self.windows[i] for i in idx.tolist()],
                               [self.shared_words[i] for i in idx.tolist()], self.candidates[idx], self.stats)


def _encode_distinct(model: object, texts: Sequence[str]) -> np.ndarray:
    """``model.encode`` of each distinct text once (SQuAD's five questions share a passage), in
    first-seen order, so the batches are the same for the same inputs."""
    distinct = list(dict.fromkeys(texts))
    row = {t: i for i, t in enumerate(distinct)}
    emb = model.encode(distinct)  # type: ignore[attr-defined]
    return emb[[row[t] for t in texts]] if len(texts) else emb


def item_views(query: str, scheme: str) -> list[str]:
    """What of an item a rephrasing may keep, each normalized: the whole item, each line of at
    least ``VIEW_MIN_WORDS`` words (a passage, a question), and, for a short item of a few lines
    (a question and its options), the first line with each other line (a question and its answer)."""
    from tcqa_data.decontam.core.normalize import tokenize

    def norm(text: str) -> str:
        return " ".join(tokenize(text, scheme))

    lines = [ln for ln in query.split("\n") if tokenize(ln, scheme)]
    views = [norm(query)]
    views += [norm(ln) for ln in lines if len(tokenize(ln, scheme)) >= VIEW_MIN_WORDS]
    if 2 < len(lines) <= VIEW_MAX_LINES:
        views += [norm(lines[0] + " " + ln) for ln in lines[1:]]
    return list(dict.fromkeys(v for v in views if v))


def verify(queries: Sequence[str], rare: RareWordTable, cands: Candidates, model: object, scheme: str
           ) -> SemanticMatches:
    """The best candidate span of each item of ``queries`` (the table's items, by number)."""
    out = SemanticMatches.empty(len(queries))
    out.stats = {"windows": cands.windows, "windows_passed": cands.passed, "pairs_scored": len(cands)}
    if not len(cands):
        return out
    q = cands.cols["query"]
    items = np.unique(q)
    view_text: list[str] = []
    view_start = [0]
    for i in items.tolist():
        views = item_views(queries[i], scheme)
        view_text.extend(views)
        view_start.append(len(view_text))
    emb_views = _encode_distinct(model, view_text)
    emb_windows = _encode_distinct(model, cands.texts)
    row_of = np.searchsorted(items, q)
    cos = np.full(len(q), -1.0)
    for r in range(len(items)):  # the best view of the item, per candidate
        mine = np.flatnonzero(row_of == r)
        sims = emb_windows[mine] @ emb_views[view_start[r]:view_start[r + 1]].T
        cos[mine] = sims.max(axis=1)
    # per item, the best span (ties: the candidates' own order)
    order = np.lexsort((np.arange(len(q)), -cos, q))
    first = np.ones(len(order), bool)
    first[1:] = q[order][1:] != q[order][:-1]
    counts = np.bincount(q, minlength=len(queries))
    out.candidates = counts.astype(np.int64)
    for j in order[first].tolist():
        i = int(q[j])
        out.cosine[i] = round(float(cos[j]), 6)  # the same printed value from any batch split
        out.docs[i] = int(cands.cols["doc"][j])
        out.spans[i] = [int(cands.cols["start"][j]), int(cands.cols["end"][j])]
        out.windows[i] = cands.texts[j]
        out.shared_words[i] = rare.shared_words(queries[i], cands.texts[j], scheme)
    return out
