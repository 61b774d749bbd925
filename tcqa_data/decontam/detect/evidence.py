"""The evidence detection reads for benchmark docs, and the index that gives it.

``score_docs`` (``score.py``) never opens a file: it asks an evidence source (``EvidenceSource``)

- how the corpus was normalized and hashed (``normalization``, ``hash_seed``): queries are
  tokenized and hashed the same way; the n-gram sizes it answers (``ngram_sizes``);
- ``ngram_hits(hashes, n)``: per query n-gram hash, whether the corpus holds it, in how many
  corpus docs, and the first of those docs;
- ``minhash_params`` (None: no MinHash evidence; how query windows are cut and signed) and
  ``minhash_matches(sigs)``: per query window signature, the best verified similarity to a corpus
  window and that window's doc;
- ``alignment_candidates(queries, ...)``: corpus docs sharing rare 4-grams with each query, and
  ``text`` / ``texts`` of candidate docs (``has_text``: whether it can give texts);
- ``doc_refs(ordinals)``: how corpus docs are named in the reports;
- ``semantic_matches(queries, model, skip)``: the semantic tier (``decontam/semantic``): per query, the
  corpus window most like it by the embedding ``model`` among its rare-word candidates;
- ``whole_hits(queries, m)``: for short queries of exactly ``m`` words (fewer than n: no n-gram),
  the query's one m-gram as ``ngram_hits`` answers an n-gram (``whole_problem``: why it cannot,
  or None).

``IndexEvidence`` answers from an index folder opened once (``IndexEvidence.open(INDEX_DIR)``):
its manifest and n-gram index at once, its MinHash index, text store and anchors on first use.
It matches short queries whole from its text store: the anchors give every doc that can hold the
query's words as one run (``AnchorIndex.holding_candidates``, exact from ``WHOLE_MIN_WORDS``
words), and the candidates' texts are hashed at m as a corpus pass hashes them
(``whole_sequence_hits``), so the answer is a stream's. Without a usable text store
``whole_problem`` says why, and such queries stay untestable.
A corpus stream (one pass over the corpus filling a table of the benchmark's n-grams and
windows) can answer the same questions: the scores and the rules over them do not know where
their evidence came from.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np

# Hash lookups are batched; this bounds the temporary arrays.
LOOKUP_BATCH = 1 << 20
_WHOLE_TEXT_BATCH = 512  # candidate docs read and hashed at once (short queries matched whole)


class NgramHits(NamedTuple):
    """Per query n-gram hash: whether the corpus holds it, the number of corpus docs holding it,
    and the first of those docs (int64 ``[k, P]``, -1 = none)."""

    found: np.ndarray
    doc_freq: np.ndarray
    docs: np.ndarray


class EvidenceSource(Protocol):
    """What detection asks of a corpus (see the module docstring)."""

    normalization: str
    hash_seed: int
    ngram_sizes: list[int]
    has_minhash: bool
    has_text: bool

    @property
    def minhash_params(self) -> Any: ...

    def ngram_hits(self, hashes: np.ndarray, n: int, *, paced: bool = False) -> NgramHits: ...

    def minhash_prefetch(self, sigs: np.ndarray) -> None: ...

    def minhash_matches(self, sigs: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

    def alignment_candidates(self, queries: Sequence[str], top: int, min_shared: int, weak_top: int
                             ) -> tuple[list[list[int]], list[list[int]]]: ...

    def prefetch_texts(self, ordinals: Sequence[int]) -> None: ...

    def text(self, ordinal: int) -> str: ...

    def texts(self, ordinals: Sequence[int]) -> list[str]: ...

    def doc_refs(self, ordinals: Sequence[int] | np.ndarray) -> list[str]: ...

    @property
    def whole_problem(self) -> str | None: ...

    def whole_hits(self, queries: Sequence[str], m: int) -> NgramHits: ...

    def semantic_matches(self, queries: Sequence[str], model: Any, skip: Sequence[bool] | None = None
                         ) -> Any: ...


def whole_sequence_hits(queries: Sequence[str], m: int, candidates: Sequence[np.ndarray],
                        texts: Callable[[Sequence[int]], list[str]], scheme: str, seed: int,
                        provenance: int) -> NgramHits:
    """``NgramHits`` of each query's one m-gram (queries of exactly ``m`` words) among the docs
    ``candidates`` (per query, every doc that can hold it): the candidates' texts are tokenized and
    hashed at m as a corpus pass hashes them, so a doc holds the query when it has that hash (doc
    freq: such docs; docs: the first ``provenance`` of them)."""
    from tcqa_data.decontam.core.hashing import batch_ngram_hashes

    qh, _ = batch_ngram_hashes(list(queries), [m], scheme, seed)[m]
    qh = np.asarray(qh, dtype=np.uint64)
    if len(qh) != len(queries):
        raise ValueError(f"whole_sequence_hits: every query must have exactly {m} words")
    wanted = np.unique(qh)
    holders: dict[int, set[int]] = {}
    pool = np.unique(np.concatenate([np.asarray(c, dtype=np.int64) for c in candidates])) \
        if len(candidates) else np.empty(0, np.int64)
    for lo in range(0, len(pool), _WHOLE_TEXT_BATCH):
        chunk = pool[lo:lo + _WHOLE_TEXT_BATCH]
        flat, owner = batch_ngram_hashes(texts(chunk.tolist()), [m], scheme, seed)[m]
        flat = np.asarray(flat, dtype=np.uint64)
        hit = np.flatnonzero(np.isin(flat, wanted))
        for h, o in zip(flat[hit].tolist(), np.asarray(owner)[hit].tolist(), strict=True):
            holders.setdefault(h, set()).add(int(chunk[o]))
    docs = np.full((len(queries), provenance), -1, dtype=np.int64)
    df = np.zeros(len(queries), dtype=np.int64)
    for i, h in enumerate(qh.tolist()):
        got = sorted(holders.get(h, ()))
        df[i] = len(got)
        docs[i, :min(provenance, len(got))] = got[:provenance]
    return NgramHits(df > 0, df, docs)


class IndexEvidence:
    """An index folder opened once: manifest, n-grams, MinHash, text store (``EvidenceSource``).

    ``open`` reads the manifest and opens the n-gram index (TcqaError if missing or incomplete);
    the MinHash index, the text store and its anchors are opened when first asked for."""

    def __init__(self, path: Path, ngrams: Any) -> None:
        from tcqa_data.decontam.textstore.store import has_text_store

        self.path = path
        self.ngrams = ngrams  # NgramIndex
        self.manifest: dict[str, Any] = ngrams.manifest
        self.normalization: str = ngrams.normalization
        self.hash_seed: int = ngrams.hash_seed
        self.ngram_sizes: list[int] = sorted(int(s) for s in ngrams.ngram_sizes)
        self.has_minhash = bool(self.manifest.get("minhash"))  # the manifest has a MinHash section
        self.has_text = has_text_store(path)
        self._semantic_queries: list[str] | None = None  # the run's items (``plan_semantic``)
        self._semantic_groups: list[int] | None = None  # and each one's task
        self._semantic: Any = None  # the SemanticVerifier of those items

    @classmethod
    def open(cls, index_dir: str | os.PathLike) -> IndexEvidence:
        from tcqa_data.decontam.ngrams.index import NgramIndex

        return cls(Path(index_dir), NgramIndex.open(index_dir))

    # ---- the index's parts, opened on first use ----------------------------------------------

    @cached_property
    def minhash(self) -> Any:
        """The MinHash index (``MinHashIndex``; it verifies candidates against the text store itself)."""
        from tcqa_data.decontam.minhash import MinHashIndex

        return MinHashIndex.open(self.path)

    @cached_property
    def store(self) -> Any:
        """The text store (``TextStore``): corpus doc texts by ordinal."""
        from tcqa_data.decontam.textstore.store import TextStore

        return TextStore.open(self.path)

    @cached_property
    def anchors(self) -> Any:
        """The text store's anchors (``AnchorIndex``): candidate docs for alignment."""
        from tcqa_data.decontam.textstore.anchor_index import AnchorIndex

        return AnchorIndex(self.path)

    # ---- n-grams -------------------------------------------------------------------------------

    def ngram_hits(self, hashes: np.ndarray, n: int, *, paced: bool = False) -> NgramHits:
        """``NgramIndex.lookup`` of ``hashes`` (found, doc freq int64, docs int64[k, P]), each distinct
        hash looked up once, in hash order: queries repeat n-grams (SQuAD repeats each passage for
        about five questions), and sorted lookups read each index page once, in file order (cold
        cache). ``paced``: the lookup runs in the background, its page-ins paced behind other reads
        (``pagein.behind_other_reads``)."""
        if paced:
            from tcqa_data.decontam.core.pagein import behind_other_reads

            with behind_other_reads():
                return self._lookup_distinct(hashes, n)
        return self._lookup_distinct(hashes, n)

    def _lookup_distinct(self, flat: np.ndarray, n: int) -> NgramHits:
        uniq, inv = np.unique(flat, return_inverse=True)
        found = np.zeros(len(uniq), dtype=bool)
        dfreq = np.zeros(len(uniq), dtype=np.int64)
        doc_cols: np.ndarray | None = None
        for lo in range(0, len(uniq), LOOKUP_BATCH):
            hit = self.ngrams.lookup(uniq[lo:lo + LOOKUP_BATCH], n)
            found[lo:lo + LOOKUP_BATCH] = np.asarray(hit.found, dtype=bool)
            dfreq[lo:lo + LOOKUP_BATCH] = np.asarray(hit.doc_freq, dtype=np.int64)
            hd = np.asarray(hit.docs, dtype=np.int64)
            if hd.ndim == 1:
                hd = hd[:, None]
            if doc_cols is None:
                doc_cols = np.full((len(uniq), hd.shape[1]), -1, dtype=np.int64)
            doc_cols[lo:lo + LOOKUP_BATCH] = hd
        if doc_cols is None:
            return NgramHits(found, dfreq, np.full((0, 1), -1, dtype=np.int64))
        inv = inv.ravel()
        return NgramHits(found[inv], dfreq[inv], doc_cols[inv])

    def doc_refs(self, ordinals: Sequence[int] | np.ndarray) -> list[str]:
        return self.ngrams.doc_refs(ordinals)

    # ---- MinHash -------------------------------------------------------------------------------

    @property
    def minhash_params(self) -> Any:
        """How the corpus windows were cut and signed (``MinHashParams``), or None without MinHash."""
        return self.minhash.params if self.has_minhash else None

    def minhash_prefetch(self, sigs: np.ndarray) -> None:
        """Request the band-table pages ``minhash_matches(sigs)`` will read."""
        self.minhash.prefetch(sigs)

    def minhash_matches(self, sigs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per query window signature: the best verified similarity to a corpus window (float64,
        -1 = no candidate) and that window's corpus doc (int64, -1 = none)."""
        sims, wins = self.minhash.query(sigs)
        wins = np.asarray(wins)
        docs = np.full(len(wins), -1, dtype=np.int64)
        hit = wins >= 0
        if hit.any():
            docs[hit] = np.asarray(self.minhash.window_docs(wins[hit].astype(np.int64)), dtype=np.int64)
        return np.asarray(sims, dtype=np.float64), docs

    # ---- text ----------------------------------------------------------------------------------

    def alignment_candidates(self, queries: Sequence[str], top: int, min_shared: int, weak_top: int
                             ) -> tuple[list[list[int]], list[list[int]]]:
        """Per query, the docs sharing at least ``min_shared`` kept 4-grams (at most ``top``), and
        the ``weak_top`` docs sharing one (``AnchorIndex.candidate_tiers``)."""
        return self.anchors.candidate_tiers(list(queries), top, min_shared, weak_top)

    def prefetch_texts(self, ordinals: Sequence[int]) -> None:
        self.store.prefetch(ordinals)

    def text(self, ordinal: int) -> str:
        return self.store.text(ordinal)

    def texts(self, ordinals: Sequence[int]) -> list[str]:
        return self.store.texts(ordinals)

    # ---- short queries matched whole -----------------------------------------------------------

    @cached_property
    def whole_problem(self) -> str | None:
        """Why this index cannot match short queries whole (its text store is missing, stale, or
        its anchors or corpus files do not cover every input), or None when it can."""
        from tcqa_data.errors import TcqaError

        if not self.has_text:
            return ("the index has no text store (built with --text-store none), so no part of it can "
                    "find every doc holding a short query")
        try:
            missing = self.anchors.missing_inputs
            problem = self.store.unreadable()
        except TcqaError as e:
            return f"its text store cannot be read: {e}"
        if missing:
            return (f"its text store has no anchors for input {missing[0]}"
                    + (f" and {len(missing) - 1} more" if len(missing) > 1 else "") + "; rerun index-corpus")
        return problem

    def plan_semantic(self, per_task: Sequence[Sequence[str]]) -> None:
        """Every item the run will ask ``semantic_matches`` about (all its splits; ``per_task``: each
        task's queries): the text store is then read once for all of them, as a stream pass reads
        the corpus once for its table."""
        from tcqa_data.decontam.semantic.rarewords import first_task

        task = first_task(per_task)
        self._semantic_queries = list(task)
        self._semantic_groups = list(task.values())
        self._semantic = None

    def semantic_matches(self, queries: Sequence[str], model: Any, skip: Sequence[bool] | None = None) -> Any:
        """``SemanticMatches`` of ``queries``: every text-store doc read as candidate windows
        (``verifier_from_texts``), the candidates verified by ``model`` (``skip``: queries that need
        no score); the text store read once per run for the planned items (``plan_semantic``), else
        once per call."""
        from tcqa_data.decontam.semantic import verifier_from_texts
        from tcqa_data.decontam.semantic.foreign import translation_model

        foreign = translation_model(model)  # a multilingual model reads text in other scripts too
        if not self.has_text:
            raise RuntimeError("the index has no text store (built with --text-store none): the semantic "
                               "tier reads corpus text")
        planned = self._semantic_queries
        if planned is None or not set(queries) <= set(planned):
            return verifier_from_texts(queries, int(self.ngrams.num_docs()), self.store.texts,
                                       self.normalization, self.hash_seed,
                                       foreign_model=foreign).matches(queries, model, skip)
        if self._semantic is None:
            self._semantic = verifier_from_texts(planned, int(self.ngrams.num_docs()), self.store.texts,
                                                 self.normalization, self.hash_seed, self._semantic_groups,
                                                 foreign_model=foreign)
        return self._semantic.matches(queries, model, skip)

    def whole_hits(self, queries: Sequence[str], m: int) -> NgramHits:
        """Each query's (of exactly ``m`` words) one m-gram in the corpus: candidates from the anchors,
        verified against their text (``whole_sequence_hits``). Only where ``whole_problem`` is None."""
        from tcqa_data.decontam.textstore.anchors import WHOLE_MIN_WORDS

        if m < WHOLE_MIN_WORDS:
            raise ValueError(f"an index finds short queries of at least {WHOLE_MIN_WORDS} words, not {m}")
        if self.whole_problem is not None:
            raise RuntimeError(self.whole_problem)
        cands = self.anchors.holding_candidates(list(queries))
        return whole_sequence_hits(queries, m, cands, self.store.texts, self.normalization, self.hash_seed,
                                   int(self.ngrams.provenance))
