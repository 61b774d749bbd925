"""Verification: each item's candidate spans scored by the embedding model; the best one kept.

``SemanticMatches`` is what an evidence source answers for a list of items (``semantic_matches``):
per item the best span's score, cosine and kept rare-word share (NaN: no candidate), corpus doc
ordinal (-1: none), word span in that doc, normalized text, the rare words it shares with the
item, how many candidates were scored, and the name of the model that gave the scores.

A model with a static prefilter (``prefilter.py``) scores the pairs below in two stages: every
pair with the static model, then the pairs past its bar with the model itself; an item none of
whose pairs passed keeps the static model's best pair. With a ``floor`` (``EmbeddingModel.floor``:
the lowest ``semantic>=T`` of the run's rule) the model scores only the pairs that can reach it:
a cosine is at most 1, so a pair whose kept share is below ``(floor - 0.6) / 0.4`` cannot (at the
shipped 0.8, half the particulars). Scores at or above the floor are the model's either way.

``SemanticVerifier`` verifies items on demand, each once: an item whose flag the rule's other
terms already decide (``skip``: flagged by an n-gram, say, under ``any-ngram|semantic``) is not
scored at all; its ``semantic_candidates`` still counts its candidates.

Each candidate span is scored whole, as its densest sub-spans and as the tightest run that holds
the item's particulars it shares (``sub_spans``: an item spliced into a long article is a short
part of its span); an item is compared as each of its views (``item_views``: whole, each line,
question with each option: a rephrasing often keeps the question and its answer only). A
(sub-span, view) pair scores

    semantic_score = (1 - KEPT_WEIGHT) * cosine + KEPT_WEIGHT * kept

``kept``: the share of the view's particulars (rare words and numbers, ``rarewords.word_weight``;
a number word counts as its digits) that the sub-span holds, by weight (``kept_share``). A
rephrasing keeps an item's names, numbers and terms; another item of the same subject or template
is as close in topic (cosine) but keeps few of its particulars: a word problem of the same
template has other numbers. The item's best pair is its ``semantic_score``. Items and spans are
embedded in their normalized form (the corpus pass keeps no other), in one deterministic order, so
the same candidates give the same bytes on any machine split.

``DEFAULT_THRESHOLD`` is what a bare ``semantic`` rule term means: calibrated leave-one-subject-out
on ``../shared/data/paraphrase`` (``scripts/bench_semantic.py recall``, docs/semantic.md).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import numpy as np

from tcqa_data.decontam.semantic.rarewords import NUMBER_WORDS, RareWordTable, word_weight
from tcqa_data.decontam.semantic.windows import Candidates

DEFAULT_THRESHOLD = 0.8
VIEW_MIN_WORDS = 4
VIEW_MAX_LINES = 8
VIEW_SAME_SHARE = 0.1  # a view differing from an earlier one in at most this share of its words adds none
KEPT_WEIGHT = 0.4  # semantic_score = 0.6 * cosine + 0.4 * kept share of the particulars
SUB_SPAN_WORDS = (16, 32, 48)  # sub-spans scored besides the whole candidate span
KEPT_MIN_WEIGHT = 1500  # the least total a kept share is out of: about four rare words or numbers
TIGHT_MARGIN = 1  # words kept either side of the run from the first to the last shared particular


@dataclass
class SemanticMatches:
    """Per item: the best span's cosine, doc, span, window text, shared rare words, candidates
    scored, and its ``semantic_score`` and kept rare-word share (NaN: no candidate); ``others``:
    its other candidates a model scored, each (doc, span, ``semantic_score``), best first (purify
    takes every window a flag's threshold reaches, not the best alone)."""

    cosine: np.ndarray
    docs: np.ndarray
    spans: list[list[int] | None]
    windows: list[str | None]
    shared_words: list[list[str]]
    candidates: np.ndarray
    stats: dict[str, int] = field(default_factory=dict)
    score: np.ndarray = field(default_factory=lambda: np.empty(0))
    kept: np.ndarray = field(default_factory=lambda: np.empty(0))
    model: list[str | None] = field(default_factory=list)  # the model that gave the item's scores
    others: list[list[tuple[int, list[int], float]]] = field(default_factory=list)
    # where the best span came from: "rare-words" (the candidate windows) or "foreign-script"
    # (``foreign.py``: text in another script); None: no candidate
    source: list[str | None] = field(default_factory=list)

    @classmethod
    def empty(cls, k: int) -> SemanticMatches:
        return cls(np.full(k, np.nan), np.full(k, -1, np.int64), [None] * k, [None] * k,
                   [[] for _ in range(k)], np.zeros(k, np.int64), {}, np.full(k, np.nan), np.full(k, np.nan),
                   [None] * k, [[] for _ in range(k)], [None] * k)

    def put(self, rows: np.ndarray, other: SemanticMatches) -> None:
        """Copy ``other``'s entries at ``rows`` (the same numbering) into these."""
        for name in ("cosine", "docs", "score", "kept", "candidates"):
            getattr(self, name)[rows] = getattr(other, name)[rows]
        for name in ("spans", "windows", "shared_words", "model", "others", "source"):
            mine, theirs = getattr(self, name), getattr(other, name)
            for i in rows.tolist():
                mine[i] = theirs[i]

    def take(self, rows: Sequence[int]) -> SemanticMatches:
        idx = np.asarray(rows, np.int64)
        return SemanticMatches(self.cosine[idx], self.docs[idx], [self.spans[i] for i in idx.tolist()],
                               [self.windows[i] for i in idx.tolist()],
                               [self.shared_words[i] for i in idx.tolist()], self.candidates[idx], self.stats,
                               self.score[idx], self.kept[idx], [self.model[i] for i in idx.tolist()],
                               [self.others[i] for i in idx.tolist()], [self.source[i] for i in idx.tolist()])


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
    (a question and its options), the first line with each other line (a question and its answer).
    A view whose words are all but ``VIEW_SAME_SHARE`` those of an earlier one is left out: a
    passage item's passage line, or the passage with its one-word "Answer:" line, is the whole item
    again, and each is a long text to embed (a SQuAD item had four such views of ~130 words)."""
    from tcqa_data.decontam.core.normalize import tokenize

    lines = [(ln, toks) for ln in query.split("\n") if (toks := tokenize(ln, scheme))]
    views = [tokenize(query, scheme)]  # each view's tokens, each line's tokenized once
    views += [toks for _, toks in lines if len(toks) >= VIEW_MIN_WORDS]
    if 2 < len(lines) <= VIEW_MAX_LINES:
        views += [tokenize(lines[0][0] + " " + ln, scheme) for ln, _ in lines[1:]]
    out: dict[str, None] = {}
    seen: list[set[str]] = []
    for toks in views:
        view = " ".join(toks)
        if not view or view in out:
            continue
        words = set(toks)
        if not any(len(words ^ k) <= VIEW_SAME_SHARE * max(len(words), len(k)) for k in seen):
            out[view] = None
            seen.append(words)
    return list(out)


def _canonical(words: Sequence[str]) -> Iterator[str]:
    """``rarewords.canonical_word`` of each word (a C-level map: it runs on every span word)."""
    return map(NUMBER_WORDS.get, words, words)


def _rare_weights(words: Sequence[str]) -> dict[str, int]:
    """Each distinct particular of ``words`` (normalized), in its canonical form, with its weight."""
    weights = ((w, word_weight(w)) for w in dict.fromkeys(_canonical(words)))
    return {w: v for w, v in weights if v}


def sub_spans(words: Sequence[str], rare: dict[str, int]) -> list[tuple[int, int]]:
    """The candidate span itself; per length of ``SUB_SPAN_WORDS`` shorter than it, the sub-span of
    that length that holds the most of the item's particulars' weight (first such); and the run
    from the first to the last particular it holds (``TIGHT_MARGIN`` words either side). An item
    spliced into a long article is a short part of its span, and the article's words around it
    dilute the span's embedding; the run cuts them off where the item starts and ends."""
    out = [(0, len(words))]
    w = np.fromiter(map(rare.get, _canonical(words), repeat(0)), np.int64, len(words))
    csum = np.concatenate([[0], np.cumsum(w)])
    for n in SUB_SPAN_WORDS:
        if n < len(words):
            start = int(np.argmax(csum[n:] - csum[:-n]))
            out.append((start, start + n))
    held = np.flatnonzero(w)
    if len(held):
        out.append((max(0, int(held[0]) - TIGHT_MARGIN), min(len(words), int(held[-1]) + 1 + TIGHT_MARGIN)))
    return list(dict.fromkeys(out))


def kept_share(view_rare: dict[str, int], span_words: set[str], total: int | None = None) -> float:
    """The share of a view's particulars' weight that a span keeps (both in canonical form), out of
    at least ``KEPT_MIN_WEIGHT``: a view with one or two particulars ("7 balloons") gets no full
    share from a window that happens to hold just those (0.0: no particular, nothing in the view
    tells one item from another). ``total``: the view's weight, where the caller has it."""
    if total is None:
        total = sum(view_rare.values())
    kept = sum(v for w, v in view_rare.items() if w in span_words)
    return kept / max(total, KEPT_MIN_WEIGHT) if total else 0.0


def combined_score(cosine: Any, kept: Any) -> Any:
    """``semantic_score``: ``(1 - KEPT_WEIGHT) * cosine + KEPT_WEIGHT * kept`` (module doc), of
    arrays or numbers."""
    return (1.0 - KEPT_WEIGHT) * cosine + KEPT_WEIGHT * kept


def reaches(kept: Any, floor: float) -> Any:
    """Which pairs of these kept shares (an array, or one number) can score ``floor`` or more:
    with a cosine of 1, the most a cosine can be (module doc)."""
    return combined_score(1.0, kept) >= floor - 1e-9


def _particular_forms(rare: dict[str, int]) -> frozenset[str]:
    """The words a text may hold an item's particulars (canonical forms) as: each, and each number
    word of a particular number."""
    return frozenset(rare) | {w for w, digits in NUMBER_WORDS.items() if digits in rare}


def _held(words: Sequence[str], forms: frozenset[str]) -> set[str]:
    """The item's particulars that ``words`` hold, canonical (the only words a kept share reads),
    without the canonical set of every word of the span."""
    return set(_canonical(forms.intersection(words)))


def _candidate_pairs(queries: Sequence[str], cands: Candidates, scheme: str, floor: float | None = None
                     ) -> dict[str, Any]:
    """What both verification stages score, model-independent: each candidate item's views (text,
    particulars), each candidate's sub-spans (word offsets and text) and, per candidate, the kept
    share of the particulars of each (sub-span, view) pair. ``floor``: a candidate whose whole span
    keeps too few of any view's particulars to reach it (``reaches``; a sub-span keeps no more than
    its span) is not ``live``: its kept shares are its whole span's, no model embeds it, and its
    sub-span text is empty."""
    q = cands.cols["query"]
    items = np.unique(q)
    view_text: list[str] = []
    view_start = [0]
    view_rare: list[dict[str, int]] = []
    item_rare: dict[int, dict[str, int]] = {}
    for i in items.tolist():
        views = item_views(queries[i], scheme)  # the whole item first: it holds every view's words
        weights = item_rare[i] = _rare_weights(views[0].split())
        view_text.extend(views)
        view_rare.append(weights)
        view_rare.extend({w: weights[w] for w in dict.fromkeys(_canonical(v.split())) if w in weights}
                         for v in views[1:])
        view_start.append(len(view_text))
    view_total = [sum(vr.values()) for vr in view_rare]

    def shares(words: set[str], v0: int, v1: int) -> list[float]:  # each view's total summed once
        return [kept_share(view_rare[v], words, view_total[v]) for v in range(v0, v1)]

    row_of = np.searchsorted(items, q)
    forms = {i: _particular_forms(w) for i, w in item_rare.items()}
    span_words = [t.split() for t in cands.texts]
    subs, sub_text, kept = [], [], []
    live = np.ones(len(q), bool)
    for j, (words, i) in enumerate(zip(span_words, q.tolist(), strict=True)):
        r = int(row_of[j])
        v0, v1 = view_start[r], view_start[r + 1]
        whole = shares(_held(words, forms[i]), v0, v1)
        if floor is not None and not reaches(max(whole), floor):  # the best view decides
            ss, rows = [(0, len(words))], [whole]
            live[j] = False
            sub_text.append("")  # no model embeds it
        else:
            ss = sub_spans(words, item_rare[i])  # the whole span first
            rows = [whole] + [shares(_held(words[a:b], forms[i]), v0, v1) for a, b in ss[1:]]
            sub_text.extend(" ".join(words[a:b]) for a, b in ss)
        subs.append(ss)
        kept.append(np.array(rows))
    sub_start = np.concatenate([[0], np.cumsum([len(ss) for ss in subs])]).astype(np.int64)
    return {"view_text": view_text, "view_start": view_start, "row_of": row_of, "span_words": span_words,
            "subs": subs, "sub_text": sub_text, "sub_start": sub_start, "kept": kept, "live": live}


def _pair_scores(pairs: dict[str, Any], model: object, masks: list[np.ndarray] | None = None
                 ) -> tuple[list[tuple[np.ndarray, np.ndarray]], int]:
    """Per candidate, its (sub-span x view) ``semantic_score`` and cosine matrices by ``model``'s
    embeddings, and how many distinct texts were embedded. ``masks`` (per candidate, the same
    shape): only the pairs it marks are scored, and only their sub-spans and views embedded; the
    others score -inf."""
    view_start, sub_start, row_of = pairs["view_start"], pairs["sub_start"], pairs["row_of"]
    n = len(row_of)
    need_view = np.zeros(len(pairs["view_text"]), bool)
    need_sub = np.zeros(len(pairs["sub_text"]), bool)
    # the candidates with a pair to score (past a prefilter: a few)
    scored = [True] * n if masks is None else [bool(m.any()) for m in masks]
    for j in range(n):
        if not scored[j]:
            continue
        r = int(row_of[j])
        v0, v1, s0, s1 = view_start[r], view_start[r + 1], int(sub_start[j]), int(sub_start[j + 1])
        if masks is None:
            need_view[v0:v1] = need_sub[s0:s1] = True
        else:
            need_view[v0:v1] |= masks[j].any(axis=0)
            need_sub[s0:s1] |= masks[j].any(axis=1)
    emb = []
    embedded = 0
    for need, texts in ((need_view, pairs["view_text"]), (need_sub, pairs["sub_text"])):
        idx = np.flatnonzero(need)
        embedded += len({texts[i] for i in idx.tolist()})
        got = _encode_distinct(model, [texts[i] for i in idx.tolist()])  # in candidate order
        full = np.zeros((len(texts), got.shape[1] if got.ndim == 2 else 0), np.float32)
        full[idx] = got
        emb.append(full)
    emb_views, emb_subs = emb
    out = []
    for j in range(n):
        r = int(row_of[j])
        v0, v1, s0, s1 = view_start[r], view_start[r + 1], int(sub_start[j]), int(sub_start[j + 1])
        if not scored[j]:  # its sub-spans were not embedded (zeros): every pair -inf
            out.append((np.full((s1 - s0, v1 - v0), -np.inf), np.zeros((s1 - s0, v1 - v0), np.float32)))
            continue
        cos = emb_subs[s0:s1] @ emb_views[v0:v1].T  # sub-spans x views
        score = combined_score(cos, pairs["kept"][j])
        if masks is not None:
            score = np.where(masks[j], score, -np.inf)
        out.append((score, cos))
    return out, embedded


def verify(queries: Sequence[str], rare: RareWordTable, cands: Candidates, model: object, scheme: str
           ) -> SemanticMatches:
    """The best candidate span of each item of ``queries`` (the table's items, by number): per
    candidate, each of its sub-spans against each of the item's views, the best ``semantic_score``.
    A model with a ``prefilter`` (``prefilter.py``) scores every pair with it first, and only the
    pairs past its bar (and able to reach the model's ``floor``) with the model itself."""
    from tcqa_data.decontam.semantic.prefilter import pairs_past_bar

    out = SemanticMatches.empty(len(queries))
    out.stats = {"windows": cands.windows, "windows_passed": cands.passed, "pairs_scored": len(cands)}
    if not len(cands):
        return out
    q = cands.cols["query"]
    stage1 = getattr(model, "prefilter", None)
    floor = getattr(model, "floor", None) if stage1 is not None else None
    pairs = _candidate_pairs(queries, cands, scheme, floor)
    if stage1 is None:
        scored, embedded = _pair_scores(pairs, model)
        by_model = np.ones(len(q), bool)
    else:  # the model scores the pairs past the static model's bar; an item with none keeps stage 1's
        live = [np.full(k.shape, bool(x)) for k, x in zip(pairs["kept"], pairs["live"], strict=True)]
        screened, _ = _pair_scores(pairs, stage1, live)
        masks = pairs_past_bar([cos for _, cos in screened], pairs["kept"])
        if floor is not None:
            masks = [m & reaches(k, floor) for m, k in zip(masks, pairs["kept"], strict=True)]
        second, embedded = _pair_scores(pairs, model, masks)
        item_verified = np.zeros(len(queries), bool)
        item_verified[q[[bool(m.any()) for m in masks]]] = True
        by_model = item_verified[q]
        scored = [b if m else a for a, b, m in zip(screened, second, by_model.tolist(), strict=True)]
        out.stats["pairs_verified"] = int(sum(int(m.sum()) for m in masks))
    out.stats["texts_embedded"] = embedded  # by the model itself (not the prefilter)
    best = np.full(len(q), -np.inf)
    best_at: list[tuple[int, float, float]] = [(0, 0.0, 0.0)] * len(q)  # (sub-span, cosine, kept)
    for j, (score, cos) in enumerate(scored):
        kept = pairs["kept"][j]
        k = int(np.argmax(score))  # the first best (sub-span, view): row-major
        s, v = divmod(k, score.shape[1])
        best[j] = score[s, v]
        # a candidate no model scored (not live): its whole span, with its best kept share
        best_at[j] = ((s, float(cos[s, v]), float(kept[s, v])) if best[j] > -np.inf
                      else (0, np.nan, float(kept.max())))
    # per item, the best candidate (then the most kept, then the candidates' own order)
    order = np.lexsort((np.arange(len(q)), -np.array([b[2] for b in best_at]), -np.round(best, 6), q))
    first = np.ones(len(order), bool)
    first[1:] = q[order][1:] != q[order][:-1]
    counts = np.bincount(q, minlength=len(queries))
    out.candidates = counts.astype(np.int64)
    names = (getattr(model, "name", None), getattr(stage1, "name", None))
    span_words, subs = pairs["span_words"], pairs["subs"]

    def span(j: int) -> list[int]:  # candidate j's best sub-span, in words of its doc
        a, b = subs[j][best_at[j][0]]
        return [int(cands.cols["start"][j]) + a, int(cands.cols["start"][j]) + b]

    for j in order[~first].tolist():  # the others, best first: where a copy weaker than the best is
        if best[j] > -np.inf:
            out.others[int(q[j])].append((int(cands.cols["doc"][j]), span(j), round(float(best[j]), 6)))
    for j in order[first].tolist():
        i = int(q[j])
        s, cos_j, kept_j = best_at[j]
        a, b = subs[j][s]
        if best[j] > -np.inf:  # the same printed values from any batch split
            out.score[i], out.cosine[i] = round(float(best[j]), 6), round(cos_j, 6)
            out.model[i] = names[0] if by_model[j] else names[1]
        out.kept[i] = round(kept_j, 6)
        out.source[i] = "rare-words"
        out.docs[i] = int(cands.cols["doc"][j])
        out.spans[i] = span(j)
        out.windows[i] = " ".join(span_words[j][a:b])
        out.shared_words[i] = rare.shared_words(queries[i], out.windows[i], scheme)
    return out


class SemanticVerifier:
    """The items of a table (``queries``, ``rare``) and their candidates, verified on demand: each
    item once per model, an item asked with ``skip`` not at all (module doc)."""

    def __init__(self, queries: Sequence[str], rare: RareWordTable, cands: Candidates, scheme: str) -> None:
        self.queries, self.rare, self.cands, self.scheme = list(queries), rare, cands, scheme
        self.foreign: Candidates | None = None  # foreign-script spans (``foreign.py``), by item
        if rare.foreign is not None:
            from tcqa_data.decontam.semantic.foreign import foreign_rows

            self.cands, self.foreign = foreign_rows(cands, len(self.queries))
        self.number = {x: i for i, x in enumerate(self.queries)}
        self._model: object = None
        self._found = SemanticMatches.empty(0)
        self._done = np.zeros(0, bool)

    def matches(self, queries: Sequence[str], model: object, skip: Sequence[bool] | None = None
                ) -> SemanticMatches:
        """``SemanticMatches`` of ``queries`` (items of the table); ``skip``: per query, whether it
        needs no score (its evidence is empty, its candidates counted)."""
        q = self.cands.cols["query"]
        if model is not self._model:
            self._model = model
            self._found = SemanticMatches.empty(len(self.queries))
            self._found.candidates = np.bincount(q, minlength=len(self.queries)).astype(np.int64)
            if self.foreign is not None:
                self._found.candidates += np.bincount(self.foreign.cols["query"], minlength=len(self.queries))
            self._found.stats = {"windows": self.cands.windows, "windows_passed": self.cands.passed,
                                 "pairs_scored": 0, "texts_embedded": 0}
            self._done = np.zeros(len(self.queries), bool)
        rows = np.array([self.number[x] for x in queries], np.int64)
        want = rows if skip is None else rows[~np.asarray(skip, bool)]
        todo = np.zeros(len(self.queries), bool)
        todo[want] = True
        todo &= ~self._done
        if todo.any():
            found = verify(self.queries, self.rare, self.cands.take(todo[q]), model, self.scheme)
            if self.foreign is not None:
                found = self._with_foreign(found, todo, model)
            self._found.put(np.flatnonzero(todo), found)
            for k, v in found.stats.items():
                if k.startswith(("pairs_", "texts_")):
                    self._found.stats[k] = self._found.stats.get(k, 0) + v
            self._done |= todo
        return self._found.take(rows)

    def _with_foreign(self, found: SemanticMatches, todo: np.ndarray, model: object) -> SemanticMatches:
        """``found`` (the rare-word candidates' best) with each ``todo`` item's foreign spans
        scored too (``foreign.foreign_matches``): an item's best pair is the better of the two, the
        rest its ``others``, best first."""
        from tcqa_data.decontam.semantic.foreign import foreign_matches

        assert self.foreign is not None
        fq = self.foreign.cols["query"]
        other = foreign_matches(self.queries, self.foreign.take(todo[fq]), model, self.rare.foreign)
        mine, theirs = np.nan_to_num(found.score, nan=-np.inf), np.nan_to_num(other.score, nan=-np.inf)
        both = np.flatnonzero(todo & np.isfinite(theirs))
        better = both[theirs[both] > mine[both]]
        won = set(better.tolist())
        merged = {}  # every pair but the best is an other, best first
        for i in both.tolist():
            pairs = found.others[i] + other.others[i]
            loser = other if i in won else found
            if np.isfinite(loser.score[i]):
                pairs.append((int(loser.docs[i]), list(loser.spans[i] or []), float(loser.score[i])))
            merged[i] = sorted(pairs, key=lambda p: -p[2])
        found.put(better, other)
        for i, pairs in merged.items():
            found.others[i] = pairs
        found.candidates = found.candidates + other.candidates
        for k, v in other.stats.items():
            found.stats[k] = found.stats.get(k, 0) + v
        return found
