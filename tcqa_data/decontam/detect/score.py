"""Score benchmark docs against the evidence of a corpus.

For each doc's decontamination query this computes, with the corpus's own normalization and hash,
from an evidence source (``evidence.py``; an opened index: ``IndexEvidence``):

- ``ngram_hits`` / ``ngram_total`` / ``ngram_fraction``: how many of the query's word n-grams
  occur in the corpus (PaLM-style overlap fraction);
- ``longest_match``: the longest run of consecutive query words covered by matched n-grams
  (ConTAM's "longest match", approximated by chaining overlapping matched n-grams);
- the corpus docs the matched n-grams come from, and the n-grams' corpus doc frequency;
- ``minhash_sim``: the best verified MinHash Jaccard estimate of any query window (the whole
  query, and each attributed field on its own) against a corpus window;
- per-field attribution: how many matched words fall inside each template field;
- ``semantic_*`` (with ``semantic_model``: the semantic tier, ``decontam/semantic``): the score of
  the corpus span most like the query among its rare-word candidates (``semantic_score``: its cosine
  and the share of the query's rare-word weight it keeps, ``semantic_cosine``, ``semantic_kept``),
  that span's doc, word span and normalized text, the rare words it shares with the query, the
  candidates scored, and where the span came from (``semantic_source``: ``rare-words``, or
  ``foreign-script`` for text in another script read by a multilingual model, whose
  ``semantic_kept`` is then how much nearer the span is to this item than to any other of its
  task: ``semantic/foreign.py``).
  With a judge (``--judge``), its verdict on the top pairs and the probability it gave "same item".

A query shorter than ``n`` words has no n-gram: ``testable`` is False and n-gram rules cannot
flag it. Such docs are reported as "untestable", never silently as clean (see
:func:`tcqa_data.decontam.detect.rules.doc_status`). With ``short_min_words`` (where the evidence
can answer: a stream pass, or an index with a text store; ``evidence.whole_problem`` is None), a
query of ``short_min_words`` to ``n - 1`` words is matched whole instead, as its one m-gram
(m = its length, ``evidence.whole_hits``): testable, ``ngram_total`` 1.

The flag rules over these scores (``Rule``, ``doc_status``, ``DEFAULT_RULE``) live in ``rules.py``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from tcqa_data.decontam.detect.evidence import EvidenceSource

DEFAULT_NGRAM = 13
# GPT-3 (Brown et al. 2020, appendix C): N = 5th percentile of query length in words, in 8..13.
AUTO_NGRAM_MIN, AUTO_NGRAM_MAX, AUTO_NGRAM_PERCENTILE = 8, 13, 5
# MinHash on very short windows is noise (a handful of shingles): such windows are not queried.
MINHASH_MIN_WORDS = 10
TOP_DOCS = 5
_WINDOW_BATCH = 4096  # query paragraphs cut into MinHash windows per call

_PARAGRAPH_BREAK = re.compile(r"\n[^\S\n]*\n\s*")  # a blank line, as the MinHash windows use


def auto_ngram(query_word_counts: Sequence[int]) -> int:
    """GPT-3's per-benchmark n: the 5th percentile of query length in words, clamped to 8..13."""
    if len(query_word_counts) == 0:
        return DEFAULT_NGRAM
    p = float(np.percentile(np.asarray(query_word_counts, dtype=np.float64), AUTO_NGRAM_PERCENTILE))
    return int(min(AUTO_NGRAM_MAX, max(AUTO_NGRAM_MIN, int(p))))


@dataclass
class QueryDoc:
    """What detection needs from one benchmark doc."""

    query: str
    fields: dict[str, str]  # attribution field -> its rendered value (order = template order)


def _find_sub(hay: list[str], needle: list[str], start: int) -> int:
    """First index >= start where ``needle`` occurs in ``hay`` as a contiguous token run, else -1."""
    m = len(needle)
    if m == 0:
        return -1
    first = needle[0]
    for i in range(start, len(hay) - m + 1):
        if hay[i] == first and hay[i:i + m] == needle:
            return i
    return -1


def attribute_fields(tokens: list[str], fields: dict[str, str], tokenize: Callable[[str], list[str]]
                     ) -> list[str]:
    """Per query token, the name of the field it came from ('' = template literal text).

    Each field's value is tokenized the same way and located in the query tokens, in template
    order (falling back to a search from the start), so any template works without knowing it.
    """
    owner = [""] * len(tokens)
    for name, (start, end) in field_positions(tokens, fields, tokenize).items():
        if not any(owner[start:end]):  # usually: no earlier field there, one slice assignment
            owner[start:end] = [name] * (end - start)
            continue
        for j in range(start, end):
            if not owner[j]:
                owner[j] = name
    return owner


def field_positions(tokens: list[str], fields: dict[str, str], tokenize: Callable[[str], list[str]]
                    ) -> dict[str, tuple[int, int]]:
    """Field name -> its ``[start, end)`` token positions in the query (fields not found are left out)."""
    # the tokens joined by NUL: a field's token run is found by one str.find (in C) and its
    # position is the NULs before the match; the token loop (_find_sub) where a token holds a NUL
    joined = "\0" + "\0".join(tokens) + "\0"
    if joined.count("\0") != len(tokens) + 1:
        return _field_positions_by_loop(tokens, fields, tokenize)
    out: dict[str, tuple[int, int]] = {}
    cursor = 0  # where the next search starts: the NUL after the last field found
    for name, value in fields.items():
        ftoks = tokenize(value)
        if not ftoks or "\0" in value:
            if ftoks:
                return _field_positions_by_loop(tokens, fields, tokenize)
            continue
        needle = "\0" + "\0".join(ftoks) + "\0"
        at = joined.find(needle, cursor)
        if at < 0:
            at = joined.find(needle)
        if at < 0:
            continue
        pos = joined.count("\0", 0, at)
        out[name] = (pos, pos + len(ftoks))
        cursor = at + len(needle) - 1
    return out


def _field_positions_by_loop(tokens: list[str], fields: dict[str, str], tokenize: Callable[[str], list[str]]
                             ) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    cursor = 0
    for name, value in fields.items():
        ftoks = tokenize(value)
        pos = _find_sub(tokens, ftoks, cursor)
        if pos < 0:
            pos = _find_sub(tokens, ftoks, 0)
        if pos < 0:
            continue
        out[name] = (pos, pos + len(ftoks))
        cursor = pos + len(ftoks)
    return out


def _longest_run(mask: np.ndarray) -> int:
    if not mask.any():
        return 0
    padded = np.concatenate(([0], mask.astype(np.int8), [0]))
    d = np.diff(padded)
    starts, ends = np.flatnonzero(d == 1), np.flatnonzero(d == -1)
    return int((ends - starts).max())


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    padded = np.concatenate(([0], mask.astype(np.int8), [0]))
    d = np.diff(padded)
    return list(zip(np.flatnonzero(d == 1).tolist(), np.flatnonzero(d == -1).tolist(), strict=False))


def score_docs(docs: Sequence[QueryDoc], evidence: EvidenceSource, n: int, *,
               max_corpus_freq: int | None = None, use_minhash: bool = True,
               progress: Callable[[int], None] | None = None, align: bool | None = None,
               align_params: Any = None, short_min_words: int | None = None,
               semantic_model: Any = None, judge: Any = None,
               semantic_skip: Callable[[dict[str, list]], Sequence[bool]] | None = None) -> dict[str, list]:
    """Score every doc against ``evidence`` (e.g. ``IndexEvidence.open(INDEX_DIR)``); returns column
    name -> per-doc values.

    ``max_corpus_freq``: n-grams found in more than this many corpus docs are ignored (counted in
    ``ngram_common``), so boilerplate shared by many docs does not flag a query.
    ``align``: align queries against candidate corpus docs' text (``aligned_*`` columns, see
    ``align.py``); None = when the evidence has corpus texts. ``align_params``: ``AlignParams``.
    ``short_min_words``: queries of that many words up to ``n - 1`` are matched whole (module doc;
    the evidence must answer ``whole_hits``). ``semantic_model``: an ``EmbeddingModel``: the
    ``semantic_*`` columns (``evidence.semantic_matches``). ``judge``: with ``semantic_model``, a
    ``semantic.judge.Judge`` asked of the top pairs (``semantic_judge``, ``semantic_judge_probability``).
    ``semantic_skip``: given the other columns, which docs need no semantic score (e.g. a rule's
    ``decided_without``): their ``semantic_*`` columns are empty, their candidates still counted.
    """
    # MC-TACO repeats one query for every candidate answer of a question: score each distinct
    # (query, fields) once and copy the result to its docs.
    key_of: dict[tuple, int] = {}
    unique: list[QueryDoc] = []
    where: list[int] = []
    for d in docs:
        key = (d.query, tuple(d.fields.items()))
        j = key_of.get(key)
        if j is None:
            j = key_of[key] = len(unique)
            unique.append(d)
        where.append(j)

    def step(k: int) -> None:
        if progress is not None:
            progress(k)

    if align is None:
        align = evidence.has_text
    cols = _score_unique(unique, evidence, n, max_corpus_freq=max_corpus_freq, use_minhash=use_minhash,
                         progress=step, align=align, align_params=align_params,
                         short_min_words=short_min_words)
    if semantic_model is not None:
        skip = semantic_skip(cols) if semantic_skip is not None else None
        cols.update(semantic_columns([d.query for d in unique], evidence, semantic_model, skip))
        if judge is not None:  # each distinct query's pair judged once
            cols.update(judge.columns([d.query for d in unique], cols["semantic_window"],
                                      cols["semantic_score"]))
    step(len(docs) - len(unique))
    return {name: [values[j] for j in where] for name, values in cols.items()}


def _score_unique(docs: Sequence[QueryDoc], evidence: EvidenceSource, n: int, *,
                  max_corpus_freq: int | None, use_minhash: bool, progress: Callable[[int], None],
                  align: bool = False, align_params: Any = None, short_min_words: int | None = None
                  ) -> dict[str, list]:
    from tcqa_data.decontam.core.hashing import batch_ngram_hashes
    from tcqa_data.decontam.core.normalize import token_char_spans, tokenize

    scheme = evidence.normalization
    seed = evidence.hash_seed

    def tok(text: str) -> list[str]:
        return tokenize(text, scheme)

    # Cold page cache, the order of the disk reads: the MinHash band-table pages first (requested
    # once the query signatures are known), read at full speed while the queries are hashed; then the
    # n-gram lookups in the background, their pages paced behind other reads
    # (pagein.behind_other_reads) while the MinHash candidates are verified (CPU, and small reads of
    # their texts, which the pacing keeps from queueing behind gigabytes of n-gram pages).
    mh_pre = _minhash_prepare(docs, evidence, tok) if use_minhash else None
    if mh_pre is not None:
        mh_pre.start_prefetch()

    # 1) hash every query in one vectorized batch, then look all hashes up at once
    all_tokens = [tok(d.query) for d in docs]
    flat, owner_doc = batch_ngram_hashes([d.query for d in docs], [n], scheme, seed)[n]
    flat = np.asarray(flat, dtype=np.uint64)
    offsets = np.zeros(len(docs) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum(np.bincount(np.asarray(owner_doc, dtype=np.int64), minlength=len(docs)))
    # the background thread is one: these lookups start once the band-table pages are requested
    ngram_lookup = _background().submit(evidence.ngram_hits, flat, n, paced=True)
    mh_cands: list[list[int]] | None = [[] for _ in docs] if align else None
    sims, wins, wrefs, nwin = _minhash_scores(mh_pre, evidence, mh_cands) if mh_pre else (None,) * 4
    found, dfreq, doc_cols = ngram_lookup.result()
    common = found & (dfreq > max_corpus_freq) if max_corpus_freq is not None else np.zeros_like(found)
    counted = found & ~common
    whole = _whole_hits(docs, all_tokens, evidence, n, short_min_words, max_corpus_freq)

    cols: dict[str, list[Any]] = {k: [] for k in (
        "query", "query_words", "testable", "ngram_total", "ngram_hits", "ngram_common", "ngram_fraction",
        "longest_match", "matched_words", "min_doc_freq", "max_doc_freq", "matched_doc_refs",
        "matched_doc_ngrams", "match_spans", "match_fields", "field_names", "field_words",
        "field_matched_words", "match_field")}
    pending_refs: list[list[int]] = []
    # field values repeat across docs (a SQuAD passage has about five questions, an MC-TACO
    # sentence several candidates): each distinct value tokenized once
    field_tok = lru_cache(maxsize=4096)(tok)
    for i, d in enumerate(docs):
        tokens = all_tokens[i]
        lo, hi = offsets[i], offsets[i + 1]
        c, k, d_cols, d_freq, n_common, width = (counted[lo:hi], hi - lo, doc_cols[lo:hi], dfreq[lo:hi],
                                                 int(common[lo:hi].sum()), n)
        if i in whole:  # a short query matched whole: its one m-gram
            c, k, d_cols, d_freq, n_common, width = whole[i]
        covered = np.zeros(len(tokens), dtype=bool)
        hit = bool(c.any())  # most docs have no hit: their match columns are empty, computed for none
        if hit:
            diff = np.zeros(len(tokens) + 1, dtype=np.int32)
            starts = np.flatnonzero(c)
            np.add.at(diff, starts, 1)
            np.add.at(diff, starts + width, -1)
            covered = np.cumsum(diff[:-1]) > 0
        owner = attribute_fields(tokens, d.fields, field_tok) if d.fields else [""] * len(tokens)
        names = list(d.fields)
        fw = Counter(owner)
        fm = Counter(o for o, cov in zip(owner, covered.tolist(), strict=False) if cov) if hit else Counter()
        spans_w = _runs(covered) if hit else []
        char_spans = token_char_spans(d.query, scheme) if spans_w else []
        spans = [[int(char_spans[s][0]), int(char_spans[e - 1][1])] for s, e in spans_w]
        span_fields = [_majority_owner(owner[s:e]) for s, e in spans_w]
        ords = d_cols[c]
        ords = ords[ords >= 0]
        top = Counter(ords.tolist()).most_common()
        top.sort(key=lambda t: (-t[1], t[0]))
        top = top[:TOP_DOCS]
        pending_refs.append([o for o, _ in top])
        df_hit = d_freq[c]
        hits = int(c.sum())
        cols["query"].append(d.query)
        cols["query_words"].append(len(tokens))
        cols["testable"].append(bool(k > 0))
        cols["ngram_total"].append(int(k))
        cols["ngram_hits"].append(hits)
        cols["ngram_common"].append(n_common)
        cols["ngram_fraction"].append(float(hits / k) if k else 0.0)
        cols["longest_match"].append(_longest_run(covered))
        cols["matched_words"].append(int(covered.sum()))
        cols["min_doc_freq"].append(int(df_hit.min()) if hits else 0)
        cols["max_doc_freq"].append(int(df_hit.max()) if hits else 0)
        cols["matched_doc_ngrams"].append([cnt for _, cnt in top])
        cols["match_spans"].append(spans)
        cols["match_fields"].append(span_fields)
        cols["field_names"].append(names)
        cols["field_words"].append([fw.get(f, 0) for f in names])
        cols["field_matched_words"].append([fm.get(f, 0) for f in names])
        best = max(names, key=lambda f: fm.get(f, 0)) if names else ""
        cols["match_field"].append(best if fm.get(best, 0) else ("template" if fm else ""))
        progress(1)
    uniq = sorted({o for refs in pending_refs for o in refs})
    ref_of = dict(zip(uniq, evidence.doc_refs(np.asarray(uniq, dtype=np.int64)), strict=True)) if uniq else {}
    cols["matched_doc_refs"] = [[str(ref_of[o]) for o in refs] for refs in pending_refs]

    k = len(docs)
    if align:
        from tcqa_data.decontam.detect.align import alignment_columns

        ng_cands = _ngram_candidates(docs, evidence, n, doc_cols, counted, offsets)
        results = _align(docs, all_tokens, evidence, scheme, ng_cands, mh_cands or [[] for _ in docs], tok,
                         align_params)
        got = sorted({r.doc_ordinal for r in results if r.covered_words})
        refs = dict(zip(got, evidence.doc_refs(np.asarray(got, dtype=np.int64)), strict=True)) if got else {}
        cols.update(alignment_columns(results, refs))
    cols["minhash_windows"] = nwin if nwin is not None else [0] * k
    cols["minhash_sim"] = sims if sims is not None else [float("nan")] * k
    cols["minhash_query_window"] = wins if wins is not None else [None] * k
    cols["minhash_doc_ref"] = wrefs if wrefs is not None else [None] * k
    return cols


SEMANTIC_COLUMNS = ("semantic_score", "semantic_cosine", "semantic_kept", "semantic_doc_ref", "semantic_span",
                    "semantic_window", "semantic_shared_words", "semantic_candidates", "semantic_model",
                    "semantic_source")


def semantic_columns(queries: Sequence[str], evidence: EvidenceSource, model: Any,
                     skip: Sequence[bool] | None = None) -> dict[str, list]:
    """The ``semantic_*`` columns of ``queries`` (module doc); cosine None where no candidate or
    ``skip``."""
    sm = evidence.semantic_matches(list(queries), model, skip)
    have = np.flatnonzero(sm.docs >= 0)
    refs: list[str | None] = [None] * len(queries)
    if len(have):
        for i, r in zip(have.tolist(), evidence.doc_refs(sm.docs[have]), strict=True):
            refs[i] = str(r)
    def floats(a: np.ndarray) -> list[float | None]:
        return [None if x != x else float(x) for x in a.tolist()]

    return {"semantic_score": floats(sm.score), "semantic_cosine": floats(sm.cosine),
            "semantic_kept": floats(sm.kept),
            "semantic_doc_ref": refs, "semantic_span": list(sm.spans), "semantic_window": list(sm.windows),
            "semantic_shared_words": [list(w) for w in sm.shared_words],
            "semantic_candidates": sm.candidates.tolist(), "semantic_model": list(sm.model),
            "semantic_source": list(sm.source)}


def _whole_hits(docs: Sequence[QueryDoc], all_tokens: list[list[str]], evidence: EvidenceSource, n: int,
                short_min_words: int | None, max_corpus_freq: int | None) -> dict[int, tuple]:
    """Per short query matched whole (module doc): its one m-gram as the loop reads an n-gram run
    (counted, total 1, docs, doc freq, common count, width m)."""
    out: dict[int, tuple] = {}
    if not short_min_words:
        return out
    by_m: dict[int, list[int]] = {}
    for i, tokens in enumerate(all_tokens):
        if short_min_words <= len(tokens) < n:
            by_m.setdefault(len(tokens), []).append(i)
    for m, idx in sorted(by_m.items()):
        found, dfreq, cols = evidence.whole_hits([docs[i].query for i in idx], m)
        common = found & (dfreq > max_corpus_freq) if max_corpus_freq is not None else np.zeros_like(found)
        for j, i in enumerate(idx):
            counted = np.array([found[j] and not common[j]])
            out[i] = (counted, 1, cols[j:j + 1], dfreq[j:j + 1], int(common[j]), m)
    return out


def _majority_owner(owners: list[str]) -> str:
    counts = Counter(o or "template" for o in owners)
    return max(sorted(counts), key=lambda f: counts[f])


@dataclass
class _MinHashQueries:
    evidence: EvidenceSource
    docs: int
    texts: list[str]  # the query windows
    owner: list[int]  # each window's doc
    sigs: np.ndarray | None
    prefetch: Future | None  # the band-table pages of the windows' lookups, requested in the background

    def start_prefetch(self) -> None:
        if self.sigs is not None and self.prefetch is None:
            self.prefetch = _background().submit(self.evidence.minhash_prefetch, self.sigs)


def _minhash_prepare(docs: Sequence[QueryDoc], evidence: EvidenceSource, tok: Callable[[str], list[str]]
                     ) -> _MinHashQueries | None:
    """The MinHash query windows (whole query, and each field alone) and their signatures (their
    band-table pages can then be requested early: ``start_prefetch``). None when the evidence has
    no MinHash part."""
    if not evidence.has_minhash:
        return None
    from tcqa_data.decontam.minhash import signatures
    from tcqa_data.decontam.minhash.windows import window_spans

    params = evidence.minhash_params
    # Windows shorter than the corpus windows are noise-prone (a handful of shingles).
    min_words = max(MINHASH_MIN_WORDS, int(params.window_min_words))
    texts: list[str] = []
    owner: list[int] = []
    # Windows are cut per blank-line paragraph, once per distinct paragraph (SQuAD repeats each
    # passage for ~5 questions), all paragraphs in one batch (a call per paragraph costs more
    # than its text).
    windows_of: dict[str, list[str]] = {}
    for d in docs:
        for source in (d.query, *d.fields.values()):
            for para in _PARAGRAPH_BREAK.split(source):
                if para.strip():
                    windows_of.setdefault(para, [])
    paras = list(windows_of)
    for p0 in range(0, len(paras), _WINDOW_BATCH):
        batch = paras[p0:p0 + _WINDOW_BATCH]
        win_doc, starts, ends = window_spans(batch, params)
        for j, a, b in zip(win_doc.tolist(), starts.tolist(), ends.tolist(), strict=True):
            windows_of[batch[j]].append(batch[j][a:b])

    def windows(text: str) -> list[str]:
        out = []
        for para in _PARAGRAPH_BREAK.split(text):
            if para.strip():
                out.extend(windows_of[para])
        return out

    for i, d in enumerate(docs):
        seen: set[str] = set()
        for source in (d.query, *d.fields.values()):
            for w in windows(source):
                if w in seen or len(tok(w)) < min_words:
                    continue
                seen.add(w)
                texts.append(w)
                owner.append(i)
    return _MinHashQueries(evidence, len(docs), texts, owner, signatures(texts, params) if texts else None,
                           None)


@lru_cache(maxsize=1)
def _background() -> ThreadPoolExecutor:
    # one thread: its tasks run in turn (the band-table page-in, then the n-gram lookups)
    return ThreadPoolExecutor(1, thread_name_prefix="tcqa-detect-background")


def _minhash_scores(pre: _MinHashQueries, evidence: EvidenceSource, candidates: list[list[int]] | None = None
                    ) -> tuple[Any, Any, Any, Any]:
    """Best verified MinHash similarity of any query window (whole query, and each field alone),
    its window text, the corpus doc of the best window, and the number of windows queried.

    ``candidates``: when given, each doc's list gets the corpus doc of every query window's best
    candidate window, most similar first (alignment candidates)."""
    texts, owner = pre.texts, pre.owner
    n_docs = pre.docs
    if pre.prefetch is not None:
        pre.prefetch.result()  # its requests are queued (an error there is raised here)
    nwin = np.bincount(np.asarray(owner, dtype=np.int64), minlength=n_docs).tolist()
    best = [-1.0] * n_docs
    best_text: list[str | None] = [None] * n_docs
    best_doc = [-1] * n_docs
    if texts:
        sims, docs = evidence.minhash_matches(pre.sigs)
        for j, (s, o) in enumerate(zip(sims.tolist(), docs.tolist(), strict=True)):
            i = owner[j]
            if o >= 0 and s > best[i]:
                best[i], best_text[i], best_doc[i] = s, texts[j], o
        if candidates is not None:
            hit = np.flatnonzero(docs >= 0)
            for t in sorted(range(len(hit)), key=lambda t: -float(sims[hit[t]])):
                candidates[owner[int(hit[t])]].append(int(docs[hit[t]]))
    refs: list[str | None] = [None] * n_docs
    have = [i for i, o in enumerate(best_doc) if o >= 0]
    if have:
        names = evidence.doc_refs(np.asarray([best_doc[i] for i in have], dtype=np.int64))
        for i, r in zip(have, names, strict=True):
            refs[i] = str(r)
    return best, best_text, refs, nwin


def _ngram_candidates(docs: Sequence[QueryDoc], evidence: EvidenceSource, n: int, doc_cols: np.ndarray,
                      counted: np.ndarray, offsets: np.ndarray) -> list[list[int]]:
    """Per doc, corpus docs of its matched n-grams at every size the index holds, most hits first."""
    from tcqa_data.decontam.core.hashing import batch_ngram_hashes

    counts: list[Counter] = [Counter() for _ in docs]
    for i in range(len(docs)):
        lo, hi = offsets[i], offsets[i + 1]
        ords = doc_cols[lo:hi][counted[lo:hi]]
        counts[i].update(ords[ords >= 0].tolist())
    other_sizes = [m for m in evidence.ngram_sizes if m != n]
    by_size = batch_ngram_hashes([d.query for d in docs], other_sizes, evidence.normalization,
                                 evidence.hash_seed) if other_sizes else {}
    for m, (flat, owner) in by_size.items():
        owner = np.asarray(owner, dtype=np.int64)
        found, _, hd = evidence.ngram_hits(np.asarray(flat, dtype=np.uint64), m)
        for j in np.flatnonzero(found):
            counts[int(owner[j])].update(o for o in hd[j].tolist() if o >= 0)
    return [[o for o, _ in sorted(c.items(), key=lambda t: (-t[1], t[0]))] for c in counts]


def _align(docs: Sequence[QueryDoc], all_tokens: list[list[str]], evidence: EvidenceSource, scheme: str,
           ng_cands: list[list[int]], mh_cands: list[list[int]], tok: Callable[[str], list[str]],
           params: Any) -> list[Any]:
    """Align each query to its candidate docs: n-gram candidates first, then the text store's
    anchor candidates (shared rare 4-grams), then MinHash ones."""
    from tcqa_data.decontam.detect.align import Aligner

    aligner = Aligner(evidence, scheme, params)
    an_cands, weak_cands = evidence.alignment_candidates(
        [d.query for d in docs], aligner.params.max_candidates, aligner.params.anchor_min_shared,
        aligner.params.anchor_weak_top)
    cand_lists = [list(dict.fromkeys(ng + an + mh))
                  for ng, an, mh in zip(ng_cands, an_cands, mh_cands, strict=True)]
    # the docs the aligner will read (as Aligner.align picks them), their reads queued at once
    top = aligner.params.max_candidates
    evidence.prefetch_texts([c for cands, weak in zip(cand_lists, weak_cands, strict=True)
                            for c in ([c for c in cands if c >= 0][:top] if cands else weak)])
    out = []
    for d, tokens, cands, weak in zip(docs, all_tokens, cand_lists, weak_cands, strict=True):
        pos = field_positions(tokens, d.fields, tok) if d.fields else {}
        # weak anchor candidates (one shared kept 4-gram) only as a fallback: most queries have none
        # in the corpus, and aligning every weak doc of every query would double the cost
        out.append(aligner.align(d.query, tokens, pos, d.fields, cands, tok, [] if cands else weak))
    return out
