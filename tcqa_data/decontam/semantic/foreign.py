"""Translated items: corpus text in another script, matched to the benchmark by a multilingual model.

A translation keeps none of an item's English words (names are transliterated, terms translated),
so the rare-word gate (``windows.py``) passes almost none (7 of 126 Chinese translations of the
development set). But in a corpus written in one script, text in another is a small share, so
every such span can be embedded. With a multilingual model (``is_multilingual``), the pass reads
each doc of a batch that holds letters of a non-Latin script (``FOREIGN_LETTER``: Greek, Cyrillic,
CJK, Arabic, ...): its foreign spans are the runs of tokens holding such letters (up to
``FOREIGN_GAP`` Latin words between two: numbers, symbols and Latin names inside a translation),
with at least ``FOREIGN_MIN_LETTERS`` letters (a name in its own script in an English article has
fewer), cut into pieces of at most ``FOREIGN_MAX_CHARS`` characters. Each piece is embedded alone
(its vector depends on its text only, so any cut of the corpus into batches and shards keeps the
same candidates) and compared with every item of the run (``ForeignItems``: each item's whole text,
embedded once by the driver and shipped with the rare-word table).

Cross-lingual cosines are compressed: on the development set a Chinese translation and its item
have cosine 0.58-0.80 (10th percentile to median) with USE multilingual, and a span of one subject
is nearly as close to its other items. What tells a translation from a text on the same topic is
that it is nearer to its own item than to any other (the margin criterion of bitext mining,
Artetxe & Schwenk 2019). So a span is a candidate for one item per task: the item of that task it is
nearest, and its evidence is that margin, ``distinct = clip((cosine - runner-up) / MARGIN_FULL, 0,
1)`` (runner-up: the span's best cosine with another item of the same task), in place of the kept
share of particulars in ``semantic_score = 0.6 x cosine + 0.4 x distinct`` (``semantic_kept`` holds it
for such a pair). Per item the best ``TOP_PER_QUERY`` spans are kept, as ``Candidates`` rows
numbered from the table's item count up (``item + num_items``: cut apart from the rare-word
candidates, never competing with them); the verification embeds them again in one fixed order and
scores them against the items (``foreign_matches``).

Cost: one embedding per foreign piece (USE multilingual: ~11 CPU-ms), paid where the pass reads
it (a worker), and the items once in the driver (~16 CPU-ms each); none in a run with an
English-only model. It grows with the corpus's text in other scripts, not with the benchmark:
a corpus that is mostly in another script is not what this check is for (it embeds all of it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tcqa_data.decontam.semantic.matches import SemanticMatches, combined_score
from tcqa_data.decontam.semantic.windows import Candidates

FOREIGN_LETTER = re.compile(r"[^\W\d_\x00-\u036f]")  # a letter past Latin and its diacritics (U+0370..)
_LATIN_WORD = re.compile(r"[a-z\u00e0-\u024f]{3}")
FOREIGN_MIN_LETTERS = 12
FOREIGN_GAP = 3
FOREIGN_MAX_CHARS = 600
MARGIN_FULL = 0.05  # a span this much nearer its item than any other is fully distinct
_LEAD = 0xCD  # every letter from U+0370 on is encoded from a lead byte >= 0xCD (U+0340)
# U+2000..U+2FFF (dashes, quotes, arrows, math): common in English text, no script's letters
# (but Coptic, Glagolitic and Tifinagh, left out)
_PUNCTUATION_LEAD = 0xE2
_MULTILINGUAL_NAMES = ("multilingual", "labse")
_MODELS: dict[tuple[str, str | None], Any] = {}  # (name, digest) -> the model, in this process


def is_multilingual(model: object) -> bool:
    """Whether ``model`` (an ``EmbeddingModel``) embeds many languages in one space: the bundled
    USE multilingual, or a model whose name says so (``paraphrase-multilingual-*``, LaBSE)."""
    from tcqa_data.decontam.semantic.model import MULTILINGUAL_MODEL

    name = str(getattr(model, "name", "")).lower()
    return name == MULTILINGUAL_MODEL or any(k in name for k in _MULTILINGUAL_NAMES)


@dataclass
class ForeignItems:
    """The run's items for the foreign-span check: each item's whole normalized text embedded by
    the run's multilingual model (``vectors``, L2-normalized), each item's task (``groups``), and
    the model's name and weights digest (a worker loads the same one)."""

    model_name: str
    model_digest: str | None
    vectors: np.ndarray
    groups: np.ndarray

    @classmethod
    def build(cls, queries: Sequence[str], groups: Sequence[int] | None, model: Any, scheme: str
              ) -> ForeignItems:
        from tcqa_data.decontam.core.normalize import tokenize

        texts = [" ".join(tokenize(q, scheme)) for q in queries]
        vectors = np.asarray(model.encode(texts), np.float32) if texts else np.zeros((0, 1), np.float32)
        group = np.asarray(list(groups) if groups is not None else [0] * len(queries), np.int64)
        return cls(str(model.name), getattr(model, "digest", None), vectors, group)

    @property
    def num_items(self) -> int:
        return len(self.vectors)

    def save(self, folder: Path) -> None:
        from tcqa_data.io_utils import write_npy_atomic

        write_npy_atomic(folder / "foreign.vectors.npy", self.vectors)
        write_npy_atomic(folder / "foreign.groups.npy", self.groups)
        meta = {"model": self.model_name, "digest": self.model_digest}
        (folder / "foreign.json").write_text(json.dumps(meta), encoding="utf-8")

    @classmethod
    def load(cls, folder: Path) -> ForeignItems | None:
        from tcqa_data.io_utils import load_npy

        if not (folder / "foreign.json").is_file():
            return None
        meta = json.loads((folder / "foreign.json").read_text(encoding="utf-8"))
        return cls(meta["model"], meta["digest"], np.array(load_npy(folder / "foreign.vectors.npy", None)),
                   np.array(load_npy(folder / "foreign.groups.npy", None)))

    def model(self) -> Any:
        """The run's model, loaded once per process (its digest checked: the driver's weights; not
        asked again per batch, since each load call also runs a full garbage collection)."""
        from tcqa_data.decontam.semantic.model import load_embedding_model

        key = (self.model_name, self.model_digest)
        if key not in _MODELS:
            _MODELS[key] = load_embedding_model(self.model_name, expected_sha256=self.model_digest)
        return _MODELS[key]

    def nearest(self, span_vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per span and task: the nearest item, its cosine, and ``distinct`` (module doc); as flat
        arrays (span row, item, cosine, distinct), one entry per (span, task)."""
        cos = np.asarray(span_vectors, np.float64) @ self.vectors.astype(np.float64).T
        rows, items, cosine, distinct = [], [], [], []
        for g in np.unique(self.groups).tolist():
            idx = np.flatnonzero(self.groups == g)
            sub = cos[:, idx]
            best = np.argmax(sub, axis=1)
            rows.append(np.arange(len(sub)))
            items.append(idx[best])
            cosine.append(sub[np.arange(len(sub)), best])
            distinct.append(_distinct(sub, best))
        if not rows:
            empty = np.empty(0)
            return empty.astype(np.int64), empty.astype(np.int64), empty, empty
        return (np.concatenate(rows), np.concatenate(items), np.concatenate(cosine), np.concatenate(distinct))


def _distinct(sub: np.ndarray, own: np.ndarray) -> np.ndarray:
    """``distinct`` (module doc) of each row of ``sub`` (spans x the items of one task) for the item
    at its column ``own``: how much nearer it is than the row's best other item, over
    ``MARGIN_FULL``, clipped to [0, 1]."""
    at = np.arange(len(sub))
    if sub.shape[1] > 1:
        others = sub.copy()
        others[at, own] = -np.inf
        runner = others.max(axis=1)
    else:  # a task of one item: nothing to be nearer than (an unrelated text is about 0)
        runner = np.zeros(len(sub))
    return np.clip((sub[at, own] - runner) / MARGIN_FULL, 0.0, 1.0)


def translation_model(model: Any) -> Any:
    """``model`` when it is multilingual (``is_multilingual``: a run with it also reads the corpus's
    text in other scripts), else None."""
    return model if model is not None and is_multilingual(model) else None


def foreign_spans(arr: np.ndarray, doc_start: np.ndarray) -> list[tuple[int, int, int, str]]:
    """The foreign spans (module doc) of a normalized batch (``hash_normalized``'s layout): per span
    its batch-local doc, word span ``[start, end)`` and text, in doc then word order."""
    raw = arr.tobytes() if not isinstance(arr, bytes | bytearray) else bytes(arr)
    byte = np.frombuffer(raw, np.uint8)
    high = np.flatnonzero((byte >= _LEAD) & (byte != _PUNCTUATION_LEAD))
    if not len(high):
        return []
    starts = np.asarray(doc_start, np.int64)
    out = []
    for d in np.unique(np.searchsorted(starts, high, side="right") - 1).tolist():
        if d < 0 or d >= len(starts) - 1:
            continue
        text = raw[int(starts[d]):int(starts[d + 1])].decode("utf-8", "replace")
        if not FOREIGN_LETTER.search(text):  # dashes and quotes, no letters of another script
            continue
        tokens = [t for t in text.split(" ") if t]  # the pass's tokens: runs of non-space bytes
        letters = [len(FOREIGN_LETTER.findall(t)) for t in tokens]
        out += [(d, a, b, " ".join(tokens[a:b])) for a, b in _runs(tokens, letters)]
    return out


def _runs(tokens: list[str], letters: list[int]) -> list[tuple[int, int]]:
    """The word spans of the foreign runs of one doc, cut into pieces (module doc). Only a Latin
    word (``_LATIN_WORD``: three letters or more) counts toward the gap: numbers, symbols and single
    letters ("s5", "x", an option's "a") are part of a translated item's text."""
    marked = [i for i, n in enumerate(letters) if n]
    out = []
    k = 0
    while k < len(marked):
        j = k
        while j + 1 < len(marked) and sum(
                1 for t in tokens[marked[j] + 1:marked[j + 1]] if _LATIN_WORD.search(t)) <= FOREIGN_GAP:
            j += 1
        lo, hi = marked[k], marked[j] + 1
        k = j + 1
        if sum(letters[lo:hi]) < FOREIGN_MIN_LETTERS:
            continue
        a, chars = lo, 0
        for i in range(lo, hi):  # pieces of at most FOREIGN_MAX_CHARS (a longer token is a piece alone)
            if i > a and chars + 1 + len(tokens[i]) > FOREIGN_MAX_CHARS:
                out.append((a, i))
                a, chars = i, 0
            chars += len(tokens[i]) + (1 if i > a else 0)
        out.append((a, hi))
    return [(a, b) for a, b in out if sum(letters[a:b]) >= FOREIGN_MIN_LETTERS]


def scan_foreign(foreign: ForeignItems, arr: np.ndarray, doc_start: np.ndarray, doc_base: int,
                 into: Candidates) -> Candidates:
    """The foreign-span candidates of one normalized batch merged into ``into`` (module doc): per
    span and task, its nearest item, ranked by the span's ``semantic_score`` against it."""
    spans = foreign_spans(arr, doc_start)
    if not spans or not foreign.num_items:
        return into
    model = foreign.model()
    vectors = np.stack([model.encode([text])[0] for *_, text in spans])  # each alone: its text's vector
    row, item, cosine, distinct = foreign.nearest(vectors)
    weight = np.round(combined_score(cosine, distinct) * 1e6).astype(np.int64)
    doc = np.array([s[0] for s in spans], np.int64)[row]
    start = np.array([s[1] for s in spans], np.int64)[row]
    end = np.array([s[2] for s in spans], np.int64)[row]
    batch = Candidates({"query": item + foreign.num_items, "doc": doc + doc_base, "window": start,
                        "weight": weight, "shared": np.zeros(len(row), np.int64), "start": start, "end": end},
                       [spans[r][3] for r in row.tolist()])
    return into.merged(batch)


def foreign_rows(cands: Candidates, num_items: int) -> tuple[Candidates, Candidates]:
    """``cands`` split into the rare-word candidates and the foreign-span ones, the latter
    numbered by their item (``query - num_items``)."""
    foreign = cands.cols["query"] >= num_items
    lexical, other = cands.take(~foreign), cands.take(foreign)
    other.cols["query"] = other.cols["query"] - num_items
    return lexical, other


def foreign_matches(queries: Sequence[str], cands: Candidates, model: Any, items: ForeignItems
                    ) -> SemanticMatches:
    """The best foreign span of each item of ``queries`` (the table's items, by number) among
    ``cands`` (``foreign_rows``' second part): every span embedded again by ``model`` in one fixed
    order, and scored against its item and the item's task (module doc). ``kept`` holds each
    pair's ``distinct``; ``others``: the item's other spans, best first."""
    out = SemanticMatches.empty(len(queries))
    q = cands.cols["query"]
    out.candidates = np.bincount(q, minlength=len(queries)).astype(np.int64)
    if not len(cands):
        return out
    vectors = np.asarray(model.encode(cands.texts), np.float64)
    cosine, distinct = np.empty(len(q)), np.empty(len(q))
    item_vectors = items.vectors.astype(np.float64)
    for lo in range(0, len(q), 1024):  # rows x items at a time: bounded however many rows
        rows = np.arange(lo, min(lo + 1024, len(q)))
        cos = vectors[rows] @ item_vectors.T
        cosine[rows] = cos[np.arange(len(rows)), q[rows]]
        for g in np.unique(items.groups[q[rows]]).tolist():  # each row against its item's task
            mine = np.flatnonzero(items.groups[q[rows]] == g)
            idx = np.flatnonzero(items.groups == g)
            distinct[rows[mine]] = _distinct(cos[np.ix_(mine, idx)], np.searchsorted(idx, q[rows][mine]))
    score = np.round(combined_score(cosine, distinct), 6)
    order = np.lexsort((np.arange(len(q)), -score, q))
    first = np.ones(len(order), bool)
    first[1:] = q[order][1:] != q[order][:-1]
    doc, start, end = (cands.cols[c] for c in ("doc", "start", "end"))
    for j in order[~first].tolist():
        out.others[int(q[j])].append((int(doc[j]), [int(start[j]), int(end[j])], float(score[j])))
    for j in order[first].tolist():
        i = int(q[j])
        out.score[i], out.cosine[i] = score[j], round(float(cosine[j]), 6)
        out.kept[i] = round(float(distinct[j]), 6)
        out.docs[i] = int(doc[j])
        out.spans[i] = [int(start[j]), int(end[j])]
        out.windows[i] = cands.texts[j]
        out.model[i] = getattr(model, "name", None)
        out.source[i] = "foreign-script"
    out.stats = {"foreign_pairs_scored": len(q), "texts_embedded": len(q)}
    return out
