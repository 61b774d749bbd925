"""``StreamEvidence``: the ``EvidenceSource`` (``detect/evidence.py``) a corpus pass fills.

It answers what ``IndexEvidence`` answers, from one pass over the corpus (``scan.py``) against
the benchmark table (``table.py``) instead of an index:

- ``ngram_hits``: per query n-gram, found, its corpus doc frequency (exact: an index stores a
  lossy key, so two corpus n-grams can share an entry there) and its first ``provenance`` docs;
- ``alignment_candidates``: the text store's anchor ranking (``anchor_index.rank_candidates``)
  over the anchor hits of the pass, so the same docs in the same order;
- ``text``/``texts``: the matched docs' own text, read again from their inputs (no text store);
- ``semantic_matches``: the semantic tier's candidate windows, collected in the same pass from
  each batch's normalized buffer (``cfg.semantic``), verified by the embedding model once;
- MinHash: not answered (``has_minhash`` False). A MinHash term would need every corpus window
  cut and signed (sentence splitting: most of an index build's time) and banded against the
  queries; stream mode refuses ``minhash>=`` terms (see ``prep/pipeline.py``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tcqa_data.decontam.core.hashing import word_counts
from tcqa_data.decontam.detect.evidence import NgramHits
from tcqa_data.decontam.readers import CorpusInput
from tcqa_data.decontam.readers.inputs import text_progress_total
from tcqa_data.decontam.stream.scan import SHARD_BYTES, StreamHits, hf_input, read_texts, scan_corpus
from tcqa_data.decontam.stream.table import BenchmarkTable, StreamConfig
from tcqa_data.errors import ConfigError
from tcqa_data.progress import progress_bar

if TYPE_CHECKING:
    from tcqa_data.engines import Engine

MINHASH_REFUSAL = ("stream mode (--corpus) gives n-gram and aligned evidence only: a minhash>= term "
                   "needs every corpus window signed and banded, which an index build does; build one "
                   "with `tcqa-data index-corpus` or drop the minhash term")


def distinct_inputs(inputs: Sequence[CorpusInput]) -> tuple[list[CorpusInput], list[dict[str, str]]]:
    """``inputs`` with every file whose bytes equal an earlier one's left out, and the left-out
    ``{"path", "reason"}`` records. ``index-corpus`` holds each content once (it skips an input
    with the sha256 of another), so a stream counts it once too: otherwise a doc in two copies
    has corpus frequency 2 in a stream and 1 in an index, and ``--max-corpus-freq 1`` gives other
    flags. Only files whose size another input shares are read for their sha256 (a stream reads
    its corpus once; distinct sizes need no digest)."""
    from collections import Counter

    from tcqa_data.outputs import file_sha256

    sizes = Counter(i.size for i in inputs)
    seen: dict[str, str] = {}
    kept, skipped = [], []
    for inp in inputs:
        if sizes[inp.size] > 1:
            digest = file_sha256(inp.path)
            if digest in seen:
                skipped.append({"path": inp.path, "reason": f"same content as {seen[digest]}"})
                continue
            seen[digest] = inp.path
        kept.append(inp)
    return kept, skipped


def duplicate_input_warning(skipped: Sequence[dict[str, str]], where: str) -> str | None:
    """The warning for inputs left out as copies of another (None if none): each content counts once."""
    same = [s for s in skipped if str(s.get("reason", "")).startswith("same content as")]
    if not same:
        return None
    first = f"{same[0]['path']} ({same[0]['reason']})"
    more = f" and {len(same) - 1} more" if len(same) > 1 else ""
    return (f"{where}: {first}{more} left out: a corpus file with the same bytes as another is counted "
            "once (corpus frequencies count distinct files' docs, in an index and in a stream alike)")


class StreamEvidence:
    """Evidence from one pass of ``inputs`` against the queries (see the module doc).

    ``open`` resolves the inputs (the ``index-corpus`` input specs); ``fill`` builds the table of
    all the queries to be scored and streams the corpus once. Every question below is answered
    after ``fill``."""

    has_minhash = False
    has_text = True

    def __init__(self, inputs: Sequence[CorpusInput], cfg: StreamConfig,
                 skipped_inputs: Sequence[dict[str, str]] = ()) -> None:
        self.inputs = list(inputs)
        # inputs left out as the same content as another (``distinct_inputs``), as an index skips them
        self.skipped_inputs = list(skipped_inputs)
        self.cfg = cfg
        self.normalization: str = cfg.normalization
        self.hash_seed: int = cfg.seed
        self.ngram_sizes: list[int] = sorted(cfg.ngram_sizes)
        self._hits: StreamHits | None = None
        self._texts: dict[int, str] = {}
        self._queries: list[str] = []
        self._semantic: Any = None  # the table's SemanticVerifier, once asked
        # with a multilingual embedding model (``semantic.foreign``): the pass also reads text in
        # other scripts, against the items embedded by this model
        self.translation_model: Any = None

    @classmethod
    def open(cls, specs: Sequence[str], cfg: StreamConfig, *, distinct: bool = True) -> StreamEvidence:
        """``distinct``: a file with the bytes of an earlier one is left out (``distinct_inputs``:
        detection counts each content once, as an index does); ``purify`` keeps every file, since
        each is written out."""
        from tcqa_data.decontam.core.normalize import check_scheme
        from tcqa_data.decontam.readers import resolve_inputs

        check_scheme(cfg.normalization)
        inputs = resolve_inputs(list(specs)) if specs else []
        inputs, skipped = distinct_inputs(inputs) if distinct else (inputs, [])
        if cfg.hf_dataset:
            inputs.append(hf_input(cfg))
        if not inputs:
            raise ConfigError("give corpus files, globs or folders (--corpus), or --hf-dataset")
        return cls(inputs, cfg, skipped)

    def fill(self, queries: Sequence[str], ngram_sizes: Sequence[int], progress: Any = None, *,
             whole: Mapping[int, Sequence[int]] | None = None, workers: int = 1,
             shard_bytes: int = SHARD_BYTES, engine: Any = None, work_dir: str | None = None,
             groups: Sequence[int] | None = None) -> StreamEvidence:
        """Stream the corpus against ``queries`` at every n of ``ngram_sizes`` (once), on ``workers``
        local processes or on ``engine`` (``scan_corpus``; the same result for any). ``whole``: size
        m -> the queries of m words matched whole (``BenchmarkTable``); ``ngram_hits`` answers at
        those sizes too, but ``ngram_sizes`` (the sizes alignment candidates come from) stays as
        asked. ``groups``: each query's task (``BenchmarkTable``)."""
        import dataclasses

        self.cfg = dataclasses.replace(self.cfg, ngram_sizes=tuple(sorted(set(ngram_sizes))))
        self.ngram_sizes = sorted(self.cfg.ngram_sizes)
        table = BenchmarkTable(queries, self.cfg, whole, groups)
        if table.rare is not None and self.translation_model is not None:
            from tcqa_data.decontam.semantic.foreign import ForeignItems

            table.rare.foreign = ForeignItems.build(queries, groups, self.translation_model,
                                                    self.normalization)
        self._queries = list(queries)
        self._hits = scan_corpus(table, self.inputs, progress, workers=workers, shard_bytes=shard_bytes,
                                 engine=engine, work_dir=work_dir)
        return self

    @property
    def hits(self) -> StreamHits:
        if self._hits is None:
            raise RuntimeError("StreamEvidence.fill was not called: no corpus pass yet")
        return self._hits

    @property
    def num_docs(self) -> int:
        return self.hits.num_docs

    @property
    def manifest(self) -> dict[str, Any]:
        """What an index manifest would say of the same corpus (inputs, counts, parameters)."""
        h = self.hits
        return {"mode": "stream", "normalization": self.normalization, "hash": {"seed": self.hash_seed},
                "ngram_sizes": self.ngram_sizes, "provenance_docs": self.cfg.provenance,
                "inputs": [{"path": i.path, "format": i.format, "size": i.size} for i in self.inputs],
                "skipped_inputs": self.skipped_inputs,
                "counts": {"docs": h.num_docs, "chars": h.chars}, "skipped": h.skipped.to_dict()}

    # ---- n-grams -------------------------------------------------------------------------------

    def ngram_hits(self, hashes: np.ndarray, n: int, *, paced: bool = False) -> NgramHits:
        if n not in self.hits.df:
            raise ValueError(f"the stream matched n-gram sizes {self.ngram_sizes}, not {n}")
        rows, found = self.hits.table.lookup(np.asarray(hashes, dtype=np.uint64), n)
        df = np.where(found, self.hits.df[n][rows], 0)
        found &= df > 0
        docs = np.where(found[:, None], self.hits.docs[n][rows], -1)
        return NgramHits(found, df.astype(np.int64), docs.astype(np.int64))

    def doc_refs(self, ordinals: Sequence[int] | np.ndarray) -> list[str]:
        return [self.hits.refs[int(o)] for o in np.asarray(ordinals).tolist()]

    # the pass matched the short queries ``fill`` was given whole, at their own size
    whole_problem: str | None = None

    def whole_hits(self, queries: Sequence[str], m: int) -> NgramHits:
        """Each query's (of exactly ``m`` words, given to ``fill`` in ``whole``) one m-gram."""
        from tcqa_data.decontam.core.hashing import batch_ngram_hashes

        flat, _ = batch_ngram_hashes(list(queries), [m], self.normalization, self.hash_seed)[m]
        return self.ngram_hits(np.asarray(flat, dtype=np.uint64), m)

    # ---- semantic tier -------------------------------------------------------------------------

    def semantic_matches(self, queries: Sequence[str], model: Any, skip: Sequence[bool] | None = None
                         ) -> Any:
        """``SemanticMatches`` of ``queries`` (given to ``fill``) from the pass's candidates;
        ``skip``: queries that need no score (``SemanticVerifier``)."""
        from tcqa_data.decontam.semantic import SemanticVerifier

        table = self.hits.table
        if table.rare is None or self.hits.semantic is None:
            raise RuntimeError("the corpus pass collected no semantic candidates (StreamConfig.semantic)")
        if self._semantic is None:
            self._semantic = SemanticVerifier(self._queries, table.rare, self.hits.semantic,
                                              self.normalization)
        return self._semantic.matches(queries, model, skip)

    # ---- MinHash: refused (module doc) ---------------------------------------------------------

    @property
    def minhash_params(self) -> Any:
        return None

    def minhash_prefetch(self, sigs: np.ndarray) -> None:
        raise NotImplementedError(MINHASH_REFUSAL)

    def minhash_matches(self, sigs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError(MINHASH_REFUSAL)

    # ---- text ----------------------------------------------------------------------------------

    def alignment_candidates(self, queries: Sequence[str], top: int, min_shared: int, weak_top: int
                             ) -> tuple[list[list[int]], list[list[int]]]:
        from tcqa_data.decontam.textstore.anchor_index import query_anchors, rank_candidates

        table = self.hits.table
        if not len(table.anchor_keys) or not queries:
            return [[] for _ in queries], [[] for _ in queries]
        uh, inv, q_owner = query_anchors(queries, self.normalization, self.hash_seed)
        rows, found = table.anchor_lookup(uh)
        # the pass's anchor rows -> rows of uh (these queries' anchors); others are left out
        to_uh = np.full(len(table.anchor_keys), -1, np.int64)
        to_uh[rows[found]] = np.flatnonzero(found)
        df = np.where(found, self.hits.anchor_df[rows], 0)
        k, d = self.hits.anchor_pairs[0] if self.hits.anchor_pairs else (np.empty(0, np.int64),) * 2
        hk = to_uh[k]
        keep = hk >= 0
        return rank_candidates(hk[keep], d[keep], df, inv, q_owner, self.num_docs, len(queries), top,
                               min_shared, weak_top)

    def prefetch_texts(self, ordinals: Sequence[int]) -> None:
        need = sorted({int(o) for o in ordinals} - self._texts.keys())
        if need:
            self._texts.update(read_texts(self.hits, need))

    def text(self, ordinal: int) -> str:
        return self.texts([ordinal])[0]

    def texts(self, ordinals: Sequence[int]) -> list[str]:
        self.prefetch_texts(ordinals)
        return [self._texts[int(o)] for o in ordinals]


def fill_stream(evidence: StreamEvidence, groups: Sequence[tuple[int, Sequence[str]]], *, quiet: bool,
                short_min_words: int | None, workers: int = 1, engine: str | Engine = "local",
                ray_address: str | None = None, out: str | os.PathLike | None = None) -> list[str]:
    """One corpus pass of a ``StreamEvidence`` against each group's queries at its n, those of
    ``short_min_words`` up to n - 1 words whole; returns the table's queries (distinct, sorted: a
    query's number in the table is its place here). ``workers``, ``engine``, ``ray_address``: where
    the shards run (``engines.make_engine``; or an ``Engine`` the caller made and closes, which
    runs the shards whatever ``workers`` says); on Ray their files go beside ``out``."""
    from tcqa_data.decontam.semantic.rarewords import first_task
    from tcqa_data.engines import Engine, make_engine

    queries = sorted({q for _, qs in groups for q in qs})
    number = {q: i for i, q in enumerate(queries)}
    task = first_task([qs for _, qs in groups])
    whole: dict[int, set[int]] = {}
    for n, qs in groups:
        distinct = list(set(qs)) if short_min_words else []
        for q, m in zip(distinct, word_counts(distinct, evidence.normalization).tolist(), strict=True):
            if short_min_words <= m < n:
                whole.setdefault(m, set()).add(number[q])
    given = isinstance(engine, Engine)
    eng = engine if given else make_engine(engine, workers, ray_address) if engine != "local" else None
    work_dir = None
    if eng is not None and eng.name == "ray" and out is not None:
        work_dir = Path(out).resolve().parent
        work_dir.mkdir(parents=True, exist_ok=True)
    with nullcontext() if eng is None or given else eng, progress_bar(quiet, bytes_mode=True) as prog:
        bar = prog.add_task("stream corpus", total=text_progress_total(evidence.inputs), rate="")
        evidence.fill(queries, sorted({n for n, _ in groups}), workers=workers, engine=eng,
                      work_dir=None if work_dir is None else str(work_dir),
                      whole={m: sorted(v) for m, v in whole.items()}, groups=[task[q] for q in queries],
                      progress=lambda nbytes, ndocs: prog.update(bar, advance=nbytes))
        if text_progress_total(evidence.inputs) is None:  # the total is known now: what was read
            prog.update(bar, total=max(next(t.completed for t in prog.tasks if t.id == bar), 1))
    return queries
