"""Align benchmark queries against the text of candidate corpus docs (edited contamination).

Exact n-grams miss a copied passage whose words were edited here and there (re-wrapping,
revisions, boilerplate): a 10% edit rate leaves few intact 13-word runs. Following Llama 2
(Touvron et al. 2023, appendix A.6), a query token is **contaminated** when it lies in a match
between the query and a corpus doc of at least ``min_len`` tokens that allows up to
``max_mismatches`` mismatched tokens inside; the **aligned share** is the fraction of the query's
tokens that are contaminated.

How, per query and candidate doc (candidates come from the index: docs of n-gram hits at every
size the index holds, and of the best MinHash window of each query window):

1. tokens are the index's normalized tokens (``normalize.tokenize``), so "edits" are word edits;
2. each template field of the query is located in the doc: the window of the field's length
   holding the most field words, each weighted by 1 / its count in the doc (so rare words lead;
   linear in the doc, unlike a character-level partial ratio), widened by half the field's
   length on both sides;
3. rapidfuzz's ``Levenshtein.opcodes`` over token ids aligns the field to that window; the
   alignment's columns are equal / replaced / query-only / corpus-only tokens;
4. a sliding window over the columns marks every span that starts and ends on equal tokens,
   holds at least ``min_len`` equal tokens and at most ``max_mismatches`` other columns: the
   query tokens inside such spans are contaminated.

The doc that covers the most query tokens is reported, with its char span, the mismatched
corpus tokens (for display) and the field it covers most.
"""

from __future__ import annotations

import dataclasses
import re
import string
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from dataclasses import field as dc_field
from typing import Any

import numpy as np
import pyarrow as pa

from tcqa_data.decontam.textstore.anchors import ANCHOR_MIN_SHARED

# Llama 2 counted matches of more than 10 (subword) tokens; these are words, so 9 words is still the
# stricter test. 9 rather than 10: a 10-word sentence with one edit still counts (BENCHMARKS.md,
# "Edited contamination": 8 words starts to flag unrelated questions)
DEFAULT_MIN_LEN = 9
DEFAULT_MAX_MISMATCHES = 4  # Llama 2: a skip budget of 4 tokens
DEFAULT_MAX_CANDIDATES = 8
DEFAULT_ANCHOR_WEAK_TOP = 2
_DOC_CACHE = 512
_P = re.escape(string.punctuation)
_JANITOR_TOKEN = re.compile(rf"(?<!\S)[{_P}]*([^\s{_P}](?:\S*[^\s{_P}])?)[{_P}]*(?!\S)")


@dataclass(frozen=True)
class AlignParams:
    min_len: int = DEFAULT_MIN_LEN
    max_mismatches: int = DEFAULT_MAX_MISMATCHES
    max_candidates: int = DEFAULT_MAX_CANDIDATES
    # kept 4-grams a doc must share with the query to become a candidate
    anchor_min_shared: int = ANCHOR_MIN_SHARED
    # a query with no other candidate (n-gram, anchors, MinHash) gets up to this many docs sharing
    # fewer (best first): a copy whose edits left a single intact 6-word run is still found
    anchor_weak_top: int = DEFAULT_ANCHOR_WEAK_TOP

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


@dataclass
class FieldAlignment:
    """One field of a query aligned to one corpus doc."""

    covered: np.ndarray  # bool per field token: contaminated
    mismatches: int  # non-equal alignment columns inside the contaminated spans
    # (query token, doc token, equal) per alignment column of the spans; -1 = no token on that side
    doc_tokens: list[tuple[int, int, bool]] = dc_field(default_factory=list)
    doc_token_range: tuple[int, int] | None = None  # [first, last + 1) doc tokens of the spans


def contaminated_spans(is_equal: np.ndarray, min_len: int, max_mismatches: int) -> list[tuple[int, int]]:
    """Column ranges ``[lo, hi)`` of the maximal matches: start and end on an equal column, at least
    ``min_len`` equal columns, at most ``max_mismatches`` other columns. Overlapping ranges merge.

    ``is_equal[c]``: alignment column c pairs two equal tokens (else it is a replaced, query-only
    or corpus-only token).
    """
    n = len(is_equal)
    eq = np.asarray(is_equal, dtype=bool)
    if n == 0 or int(eq.sum()) < min_len:
        return []
    mis_cum = np.concatenate(([0], np.cumsum(~eq)))
    eq_cum = np.concatenate(([0], np.cumsum(eq)))
    next_eq = np.full(n + 1, n, dtype=np.int64)  # first equal column >= c
    for c in range(n - 1, -1, -1):
        next_eq[c] = c if eq[c] else next_eq[c + 1]
    diff = np.zeros(n + 1, dtype=np.int64)
    lo = 0
    for r in range(n):
        while mis_cum[r + 1] - mis_cum[lo] > max_mismatches:
            lo += 1
        if not eq[r]:
            continue
        start = next_eq[lo]
        if start <= r and eq_cum[r + 1] - eq_cum[start] >= min_len:
            diff[start] += 1
            diff[r + 1] -= 1
    on = np.cumsum(diff[:-1]) > 0
    padded = np.concatenate(([False], on, [False])).astype(np.int8)
    d = np.diff(padded)
    return list(zip(np.flatnonzero(d == 1).tolist(), np.flatnonzero(d == -1).tolist(), strict=True))


def _shift_ties(cols_q: list[int], cols_d: list[int], cols_eq: list[bool], d_ids: list[int]) -> None:
    """Among equal-cost alignments prefer the tight one, in place: a query token matched to a doc
    token that recurs right after a run of corpus-only tokens ("the [greater the] quick") is
    matched to the later occurrence instead, so the run lies outside the match."""
    n = len(cols_q)
    c = 0
    while c < n:
        if cols_eq[c] and c + 1 < n and cols_q[c + 1] == -1:
            e = c + 1
            while e < n and cols_q[e] == -1:
                e += 1
            if e < n and d_ids[cols_d[e - 1]] == d_ids[cols_d[c]]:
                q, d0 = cols_q[c], cols_d[c]
                cols_q[c:e] = [-1] * (e - 1 - c) + [q]
                cols_d[c:e] = list(range(d0, d0 + e - c))
                cols_eq[c:e] = [False] * (e - 1 - c) + [True]
            c = e
        else:
            c += 1


def align_tokens(query: Sequence[str], doc: Sequence[str], params: AlignParams) -> FieldAlignment:
    """Align query tokens to (a window of) doc tokens; see the module docstring, steps 3-4."""
    from rapidfuzz.distance import Levenshtein

    vocab: dict[str, int] = {}
    q_ids = [vocab.setdefault(t, len(vocab)) for t in query]
    d_ids = [vocab.setdefault(t, len(vocab)) for t in doc]
    cols_q: list[int] = []  # query token index of each column, -1 for a corpus-only token
    cols_d: list[int] = []
    cols_eq: list[bool] = []
    for op in Levenshtein.opcodes(q_ids, d_ids):
        qi, qj, di, dj = op.src_start, op.src_end, op.dest_start, op.dest_end
        if op.tag == "equal":
            cols_q += range(qi, qj)
            cols_d += range(di, dj)
            cols_eq += [True] * (qj - qi)
        elif op.tag == "replace":
            k = max(qj - qi, dj - di)
            cols_q += [qi + t if qi + t < qj else -1 for t in range(k)]
            cols_d += [di + t if di + t < dj else -1 for t in range(k)]
            cols_eq += [False] * k
        elif op.tag == "delete":
            cols_q += range(qi, qj)
            cols_d += [-1] * (qj - qi)
            cols_eq += [False] * (qj - qi)
        else:  # insert: corpus-only tokens
            cols_q += [-1] * (dj - di)
            cols_d += range(di, dj)
            cols_eq += [False] * (dj - di)
    _shift_ties(cols_q, cols_d, cols_eq, d_ids)
    eq = np.asarray(cols_eq, dtype=bool)
    qcol = np.asarray(cols_q, dtype=np.int64)
    dcol = np.asarray(cols_d, dtype=np.int64)
    covered = np.zeros(len(query), dtype=bool)
    spans = contaminated_spans(eq, params.min_len, params.max_mismatches)
    mismatches = 0
    doc_tokens: list[tuple[int, int, bool]] = []
    first = last = None
    for lo, hi in spans:
        q = qcol[lo:hi]
        covered[q[q >= 0]] = True
        mismatches += int((~eq[lo:hi]).sum())
        d = dcol[lo:hi]
        dd = d[d >= 0]
        if len(dd):
            first = int(dd.min()) if first is None else min(first, int(dd.min()))
            last = int(dd.max()) if last is None else max(last, int(dd.max()))
        doc_tokens += [(int(a), int(b), bool(e)) for a, b, e in zip(q, d, eq[lo:hi], strict=True)]
    rng = (first, last + 1) if first is not None and last is not None else None
    return FieldAlignment(covered, mismatches, doc_tokens, rng)


@dataclass
class _DocText:
    text: str
    tokens: list[str]
    hashes: set[int]  # the distinct token ids: most candidate docs are rejected with this set alone
    _ids: np.ndarray | None = None
    _unique: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    _spans: list[tuple[int, int]] | None = None

    @property
    def ids(self) -> np.ndarray:
        """int64 id of each token (Python's str hash: only compared within this process); built
        for docs a field is located in (most candidates fail ``shared_tokens`` first)."""
        if self._ids is None:
            self._ids = np.fromiter(map(hash, self.tokens), dtype=np.int64, count=len(self.tokens))
        return self._ids

    def _distinct(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(sorted distinct ids, each token's place among them, each distinct id's count), once per doc."""
        if self._unique is None:
            self._unique = np.unique(self.ids, return_inverse=True, return_counts=True)
        return self._unique

    @property
    def weight(self) -> np.ndarray:
        """1 / occurrences of each token in this doc: rare words locate a copy best."""
        _, inv, counts = self._distinct()
        return 1.0 / counts[inv]

    def _present(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each of ``ids``: whether the doc holds it, and its place among the distinct ids."""
        uniq = self._distinct()[0]
        if not len(uniq):
            return np.zeros(len(ids), dtype=bool), np.zeros(len(ids), dtype=np.int64)
        pos = np.minimum(np.searchsorted(uniq, ids), len(uniq) - 1)
        return uniq[pos] == ids, pos

    def shared_tokens(self, ids: np.ndarray) -> int:
        """How many of ``ids`` (with repeats) occur anywhere in this doc: an upper bound of those in
        any window of it. Most candidates (chance band-key or anchor matches) share few words, so
        this rejects them without locating the field (a set lookup per field token, no sort of the
        doc's ids)."""
        h = self.hashes
        return sum(1 for i in ids.tolist() if i in h)

    def holds(self, ids: np.ndarray) -> np.ndarray:
        """``np.isin(self.ids, ids)`` from the doc's distinct ids (a doc is tested against many fields)."""
        hit, pos = self._present(ids)
        mark = np.zeros(len(self._distinct()[0]), dtype=bool)
        mark[pos[hit]] = True
        return mark[self._distinct()[1]]

    def char_spans(self, scheme: str) -> list[tuple[int, int]]:
        if self._spans is None:
            from tcqa_data.decontam.core.normalize import token_char_spans

            spans = None
            if scheme == "janitor":
                # one regex pass: each whitespace chunk holding a non-punctuation character is one
                # token, its span trimmed of punctuation (as token_char_spans does, chunk by chunk)
                spans = [m.span(1) for m in _JANITOR_TOKEN.finditer(self.text)]
                if len(spans) != len(self.tokens):
                    spans = None
            self._spans = spans if spans is not None else token_char_spans(self.text, scheme)
        return self._spans


def _doc_text(text: str, scheme: str) -> _DocText:
    from tcqa_data.decontam.core.normalize import tokenize

    toks = tokenize(text, scheme)
    return _DocText(text, toks, set(map(hash, toks)))


def locate(field_tokens: Sequence[str], doc: _DocText) -> tuple[int, int]:
    """Doc token window ``[lo, hi)`` where the field most likely lies: the window of the field's
    length holding the most (rarity-weighted) field words, widened by half its length each side."""
    n, m = len(doc.tokens), len(field_tokens)
    if n <= m:
        return 0, n
    f_ids = np.fromiter(map(hash, field_tokens), dtype=np.int64, count=m)
    w = np.where(doc.holds(f_ids), doc.weight, 0.0)
    cs = np.concatenate(([0.0], np.cumsum(w)))
    start = int(np.argmax(cs[m:] - cs[:-m]))
    return max(0, start - m // 2 - 1), min(n, start + m + m // 2 + 1)


def align_field(field_tokens: Sequence[str], doc: _DocText, params: AlignParams) -> FieldAlignment:
    """Locate the field in the doc (``locate``), then align tokens in that window."""
    if len(field_tokens) < params.min_len or len(doc.tokens) < params.min_len:
        return FieldAlignment(np.zeros(len(field_tokens), dtype=bool), 0)
    f_ids = np.fromiter(map(hash, field_tokens), dtype=np.int64, count=len(field_tokens))
    # the window test below counts field words inside the located window; fewer in the whole doc
    # fails it too, so such a doc is not located at all (same result)
    if doc.shared_tokens(f_ids) < params.min_len:
        return FieldAlignment(np.zeros(len(field_tokens), dtype=bool), 0)
    lo, hi = locate(field_tokens, doc)
    window = set(doc.ids[lo:hi].tolist())
    if sum(1 for i in f_ids.tolist() if i in window) < params.min_len:
        return FieldAlignment(np.zeros(len(field_tokens), dtype=bool), 0)  # too few shared words
    fa = align_tokens(field_tokens, doc.tokens[lo:hi], params)
    if fa.doc_token_range is not None:
        fa.doc_token_range = (fa.doc_token_range[0] + lo, fa.doc_token_range[1] + lo)
        fa.doc_tokens = [(q, d + lo if d >= 0 else -1, e) for q, d, e in fa.doc_tokens]
    return fa


@dataclass
class QueryAlignment:
    """The best candidate doc of one query, and what it covers."""

    share: float = 0.0
    covered_words: int = 0
    mismatches: int = 0
    doc_ordinal: int = -1
    field: str = ""
    field_share: float = 0.0
    doc_span: list[int] | None = None  # [start, end) chars in the corpus doc
    doc_excerpt: str | None = None  # the corpus text of doc_span
    excerpt_marks: list[list[int]] = dc_field(default_factory=list)  # mismatched corpus tokens
    query_spans: list[list[int]] = dc_field(default_factory=list)  # contaminated runs, chars in the query
    candidates: int = 0
    tested: bool = False  # the query has at least min_len tokens: alignment could flag it


class Aligner:
    """Aligns queries to candidate corpus docs, caching doc texts and field alignments.

    ``source`` gives the docs' texts by ordinal (``text(o)``, ``texts(os)``): an evidence source
    (``evidence.py``) or a ``TextStore``."""

    def __init__(self, source: Any, scheme: str, params: AlignParams | None = None) -> None:
        self.store = source
        self.scheme = scheme
        self.params = params or AlignParams()
        self._docs: OrderedDict[int, _DocText] = OrderedDict()
        self._fields: dict[tuple[str, int], FieldAlignment] = {}

    def _doc(self, ordinal: int) -> _DocText:
        d = self._docs.get(ordinal)
        if d is None:
            d = self._docs[ordinal] = _doc_text(self.store.text(ordinal), self.scheme)
            if len(self._docs) > _DOC_CACHE:
                self._docs.popitem(last=False)
        else:
            self._docs.move_to_end(ordinal)
        return d

    def _load(self, parts: Sequence[tuple[str, str, int, int]], ordinals: Sequence[int]) -> None:
        """Read the docs that aligning ``parts`` to ``ordinals`` will need and the cache lacks, in
        one batch (``TextStore.texts``: one open file per input, not one per doc)."""
        need = [o for o in ordinals if o not in self._docs
                and any((text, o) not in self._fields for _, text, _, _ in parts)]
        if not need:
            return
        for o, text in zip(need, self.store.texts(need), strict=True):
            self._docs[o] = _doc_text(text, self.scheme)
        while len(self._docs) > _DOC_CACHE:
            self._docs.popitem(last=False)

    def _field(self, text: str, tokens: list[str], ordinal: int) -> FieldAlignment:
        key = (text, ordinal)
        fa = self._fields.get(key)
        if fa is None:
            fa = self._fields[key] = align_field(tokens, self._doc(ordinal), self.params)
        return fa

    def align(self, query: str, query_tokens: list[str], field_pos: dict[str, tuple[int, int]],
              fields: dict[str, str], candidates: Sequence[int],
              tokenize: Callable[[str], list[str]], weak: Sequence[int] = ()) -> QueryAlignment:
        """``field_pos``: field name -> [start, end) query token positions (fields not located are
        missing); without fields the whole query is aligned as one part. ``weak``: more candidates,
        aligned after the first ``max_candidates`` of ``candidates``."""
        n = len(query_tokens)
        cands = list(dict.fromkeys(int(c) for c in candidates if c >= 0))[: self.params.max_candidates]
        cands = list(dict.fromkeys(cands + [int(c) for c in weak if c >= 0]))
        out = QueryAlignment(candidates=len(cands), tested=n >= self.params.min_len)
        if not n or not cands:
            return out
        parts = [(name, fields[name], s, e) for name, (s, e) in field_pos.items()] or [("", query, 0, n)]
        best: tuple[int, int] | None = None
        best_parts: list[tuple[str, int, int, FieldAlignment]] = []
        self._load(parts, cands)
        for o in cands:
            covered = np.zeros(n, dtype=bool)
            got = []
            for name, text, s, e in parts:
                fa = self._field(text, query_tokens[s:e] if name else query_tokens, o)
                covered[s:e] |= fa.covered
                got.append((name, s, e, fa))
            score = (int(covered.sum()), -o)
            if best is None or score > best:
                best, best_parts, out.doc_ordinal = score, got, o
        if best is None or best[0] == 0:
            return out
        covered = np.zeros(n, dtype=bool)
        field_cov: dict[str, tuple[int, int]] = {}
        for name, s, e, fa in best_parts:
            covered[s:e] |= fa.covered
            field_cov[name] = (int(fa.covered.sum()), e - s)
        out.covered_words = int(covered.sum())
        out.share = out.covered_words / n
        out.mismatches = sum(fa.mismatches for *_, fa in best_parts)
        out.field = max(sorted(field_cov), key=lambda f: field_cov[f][0])
        out.field_share = max(c / t for c, t in field_cov.values() if t)
        # query-side runs of contaminated tokens, as char spans of the query
        from tcqa_data.decontam.core.normalize import token_char_spans

        qspans = token_char_spans(query, self.scheme)
        padded = np.concatenate(([0], covered.astype(np.int8), [0]))
        d = np.diff(padded)
        out.query_spans = [[int(qspans[s][0]), int(qspans[e - 1][1])]
                           for s, e in zip(np.flatnonzero(d == 1), np.flatnonzero(d == -1), strict=True)]
        # corpus span: from the first to the last doc token of the matches of the covering parts
        doc = self._doc(out.doc_ordinal)
        ranges = [fa.doc_token_range for *_, fa in best_parts if fa.doc_token_range is not None]
        first, last = min(r[0] for r in ranges), max(r[1] for r in ranges) - 1
        cs = doc.char_spans(self.scheme)
        c0, c1 = cs[first][0], cs[last][1]
        out.doc_span = [int(c0), int(c1)]
        out.doc_excerpt = doc.text[c0:c1]
        marks = sorted({d for *_, fa in best_parts for _, d, e in fa.doc_tokens if d >= 0 and not e})
        out.excerpt_marks = [[int(cs[m][0] - c0), int(cs[m][1] - c0)] for m in marks if first <= m <= last]
        return out


def alignment_columns(results: Sequence[QueryAlignment], refs: dict[int, str]) -> dict[str, list[Any]]:
    """contamination.parquet columns for a list of query alignments (``refs``: ordinal -> doc ref)."""
    return {
        "aligned_share": [r.share for r in results],
        "aligned_field_share": [r.field_share for r in results],
        "aligned_words": [r.covered_words for r in results],
        "aligned_mismatches": [r.mismatches for r in results],
        "aligned_field": [r.field or None for r in results],
        "aligned_ref": [refs.get(r.doc_ordinal) if r.covered_words else None for r in results],
        "aligned_span": [r.doc_span for r in results],
        "aligned_text": [r.doc_excerpt for r in results],
        "aligned_text_marks": [r.excerpt_marks for r in results],
        "aligned_query_spans": [r.query_spans for r in results],
        "aligned_candidates": [r.candidates for r in results],
        "aligned_tested": [r.tested for r in results],
    }


# Arrow types of the alignment columns in contamination.parquet (absent when no alignment ran).
ALIGNED_COLUMN_TYPES = {
    "aligned_share": pa.float64(), "aligned_field_share": pa.float64(), "aligned_words": pa.int64(),
    "aligned_mismatches": pa.int64(), "aligned_field": pa.string(), "aligned_ref": pa.string(),
    "aligned_span": pa.list_(pa.int64()), "aligned_text": pa.string(),
    "aligned_text_marks": pa.list_(pa.list_(pa.int64())),
    "aligned_query_spans": pa.list_(pa.list_(pa.int64())),
    "aligned_candidates": pa.int64(), "aligned_tested": pa.bool_(),
}
