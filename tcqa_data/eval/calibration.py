"""Calibrated memorization scores: a token's probability weighed by its rarity in a reference corpus
(DC-PDD), and the evaluated model's likelihood against a reference model's (MIMIR's reference attack).

- ``dc_pdd`` (Zhang et al., EMNLP 2024, arXiv 2409.14781, "divergence-based calibration"): for the
  text's tokens x_i, each kept at its first occurrence in the text, ``min(p(x_i) * -log f(x_i), a)``
  averaged, where p(x_i) is the model's probability of the token at its position, f(x_i) the token's
  Laplace-smoothed frequency in a reference corpus, ``(count + 1) / (total + vocab)``, and the bound
  a = :data:`DC_PDD_BOUND` (0.01, the authors' default). A rare token the model predicts confidently
  counts most. Higher = more likely seen.
- ``reference_loss_ratio`` (Carlini et al. 2021; MIMIR's ``ReferenceAttack``): the evaluated model's
  mean token log-probability of the text minus the reference model's, both on the text alone after
  the prefix token: MIMIR's ``target_loss - ref_loss`` in negative log-likelihoods, negated so that
  higher = more likely seen. A text common in any corpus is likely under both models; only what the
  evaluated model saw and the reference did not stands out.

Both read a text **standalone** (``eval.memorization.token_stats``: prefix token, every token
scored), in one extra pass over the distinct ``query`` texts of the task (MC-TACO: one per question
group); they are opt-in (evaluate's ``--reference-frequencies`` and ``--reference-model``) and named in
each doc's ``memorization.query``; the headline does not use them.

Where the frequencies come from (:func:`reference_frequencies`, recorded in results.json's
``memorization.calibration``): the corpus the prepared data was decontaminated against, read once
in its doc order (the index's text store, ``decontam.textstore.TextStore``, or the corpus files
themselves, ``decontam.readers``), up to :data:`MAX_REFERENCE_DOCS` docs; or the shipped demo corpus
(``tcqa_data/data/demo``, 162 Wikipedia articles, its README gives provenance and licence) for a run
with neither. Each is tokenized with the evaluated model's tokenizer, so no table has to match a
vocabulary built elsewhere.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tcqa_data.errors import ConfigError

DC_PDD_BOUND = 0.01
# Docs read from a corpus for the frequency table: enough for stable unigram frequencies, bounded
# so that one evaluate never reads a pretraining corpus whole.
MAX_REFERENCE_DOCS = 20_000
TOKENIZE_BATCH = 256
FREQUENCY_SOURCES = ("none", "auto", "demo")
# the text whose calibrated scores are computed (the decontamination query)
CALIBRATED_TEXT = "query"


@dataclass
class TokenFrequencies:
    """Token counts of a reference corpus under one tokenizer, with where they came from."""

    counts: np.ndarray  # int64 [vocab]
    source: dict[str, Any] = field(default_factory=dict)

    def probabilities(self) -> np.ndarray:
        """Laplace-smoothed frequency of every token id, ``(count + 1) / (total + vocab)``."""
        return (self.counts + 1.0) / (float(self.counts.sum()) + len(self.counts))

    def record(self) -> dict[str, Any]:
        """results.json's account of the table: its source, docs, tokens and a digest of the counts."""
        digest = hashlib.sha256(self.counts.astype("<i8").tobytes()).hexdigest()[:16]
        return {**self.source, "tokens": int(self.counts.sum()), "vocab": len(self.counts),
                "counts_sha256_16": digest}


def count_tokens(tokenizer: Any, texts: Iterable[str], vocab_size: int) -> tuple[np.ndarray, int]:
    """Counts of each token id over ``texts`` (no special tokens), and how many texts were read."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    n = 0
    batch: list[str] = []

    def flush() -> None:
        for ids in tokenizer(batch, add_special_tokens=False)["input_ids"]:
            if ids:
                counts[:] += np.bincount(np.asarray(ids, dtype=np.int64), minlength=vocab_size)[:vocab_size]
        batch.clear()

    for t in texts:
        batch.append(t)
        n += 1
        if len(batch) >= TOKENIZE_BATCH:
            flush()
    if batch:
        flush()
    return counts, n


def _vocab_size(tokenizer: Any) -> int:
    return len(tokenizer)


def frequencies_from_texts(tokenizer: Any, texts: Iterable[str], source: dict[str, Any]) -> TokenFrequencies:
    counts, n = count_tokens(tokenizer, texts, _vocab_size(tokenizer))
    return TokenFrequencies(counts, {**source, "docs": n})


def frequencies_from_index(tokenizer: Any, index_dir: str | Path,
                           max_docs: int = MAX_REFERENCE_DOCS) -> TokenFrequencies:
    """Frequencies of the first ``max_docs`` docs of an index's text store, in doc order."""
    from tcqa_data.decontam.textstore import TextStore

    store = TextStore.open(index_dir)
    take = min(store.num_docs, max_docs)

    def texts() -> Iterable[str]:
        for s in range(0, take, TOKENIZE_BATCH):
            yield from store.texts(range(s, min(s + TOKENIZE_BATCH, take)))

    return frequencies_from_texts(tokenizer, texts(), {"source": "index text store", "path": str(index_dir),
                                                       "max_docs": max_docs})


def _corpus_texts(corpus: Sequence[str], text_field: str, max_docs: int) -> Iterable[str]:
    """The first ``max_docs`` docs' texts of the corpus (files, folders or URLs as ``--corpus``
    takes them), read once in order."""
    from itertools import islice

    from tcqa_data.decontam.readers import iter_documents, resolve_inputs

    def texts() -> Iterable[str]:
        for inp in resolve_inputs(list(corpus)):
            yield from (d.text for d in iter_documents(inp, text_field=text_field))

    return islice(texts(), max_docs)


def frequencies_from_corpus(tokenizer: Any, corpus: Sequence[str], text_field: str = "text",
                            max_docs: int = MAX_REFERENCE_DOCS) -> TokenFrequencies:
    """Frequencies of the first ``max_docs`` docs of the corpus, read once in order."""
    return frequencies_from_texts(tokenizer, _corpus_texts(corpus, text_field, max_docs),
                                  {"source": "corpus stream", "path": [str(c) for c in corpus],
                                   "max_docs": max_docs})


def demo_frequencies(tokenizer: Any) -> TokenFrequencies:
    """Frequencies of the shipped demo corpus (``tcqa_data.data.DEMO_CORPUS``)."""
    from tcqa_data.data import DEMO_CORPUS

    return frequencies_from_texts(tokenizer, _corpus_texts([str(DEMO_CORPUS)], "text", MAX_REFERENCE_DOCS),
                                  {"source": "shipped demo corpus",
                                   "path": "tcqa_data/data/demo/wiki_demo.jsonl.zst"})


def reference_frequencies_for(tokenizer: Any, which: str, upstream: dict[str, Any] | None
                              ) -> TokenFrequencies | None:
    """The table ``--reference-frequencies`` names: ``none``; ``demo``; ``auto`` = the prepared data's
    corpus (its index's text store, else the stream corpus its manifest names) where it can be
    read, else the demo corpus."""
    if which not in FREQUENCY_SOURCES:
        raise ConfigError(f"--reference-frequencies must be one of {', '.join(FREQUENCY_SOURCES)}, "
                          f"not {which!r}")
    if which == "none":
        return None
    if which == "auto" and upstream:
        index = upstream.get("index") or {}
        path = index.get("path")
        if path and Path(path, "textstore").is_dir():
            return frequencies_from_index(tokenizer, path)
        corpus = [e["path"] for e in index.get("inputs") or [] if isinstance(e, dict) and "path" in e]
        if corpus and all(Path(c).is_file() for c in corpus):
            return frequencies_from_corpus(tokenizer, corpus, index.get("text_field", "text"))
    return demo_frequencies(tokenizer)


def dc_pdd(logprob: np.ndarray, ids: Sequence[int], probabilities: np.ndarray,
           bound: float = DC_PDD_BOUND) -> float | None:
    """DC-PDD of one text: the mean over its tokens' first occurrences of ``min(p * -log f, bound)``
    (``logprob``: each token's log-probability under the model, aligned with ``ids``)."""
    if len(ids) == 0:
        return None
    ids_arr = np.asarray(ids, dtype=np.int64)
    _, first = np.unique(ids_arr, return_index=True)
    first = np.sort(first)
    div = np.exp(np.asarray(logprob, dtype=np.float64)[first]) * -np.log(probabilities[ids_arr[first]])
    return float(np.minimum(div, bound).mean())


def add_calibrated_scores(engine: Any, per_doc: list[dict[str, Any]], texts: list[dict[str, str]],
                          frequencies: TokenFrequencies | None, reference: Any | None) -> int:
    """Adds ``dc_pdd`` (with ``frequencies``) and ``reference_loss_ratio`` (with ``reference``, an
    ``eval.scoring.Engine`` of the reference model) to each doc's ``memorization[CALIBRATED_TEXT]``;
    each distinct text is scored once per model, standalone. Returns the number of distinct texts."""
    from tcqa_data.eval.memorization import encode_for_scoring, token_stats

    distinct = sorted({t[CALIBRATED_TEXT] for t in texts if CALIBRATED_TEXT in t})
    if not distinct or (frequencies is None and reference is None):
        return 0
    stats = dict(zip(distinct, token_stats(engine, distinct), strict=True))
    extra: dict[str, dict[str, float | None]] = {t: {} for t in distinct}
    if frequencies is not None:
        probs = frequencies.probabilities()
        if len(probs) < _vocab_size(engine.tokenizer):
            raise ConfigError("the reference frequencies do not cover the model's vocabulary")
        seqs = encode_for_scoring(engine.tokenizer, distinct, engine.lm.max_length)
        for t, seq in zip(distinct, seqs, strict=True):
            ids = seq[1:1 + len(stats[t].logprob)]
            extra[t]["dc_pdd"] = dc_pdd(stats[t].logprob, ids, probs)
    if reference is not None:
        for t, ref in zip(distinct, token_stats(reference, distinct), strict=True):
            own = stats[t].logprob
            extra[t]["reference_loss_ratio"] = (float(own.mean() - ref.logprob.mean())
                                                if len(own) and len(ref.logprob) else None)
    for o, ts in zip(per_doc, texts, strict=True):
        t = ts.get(CALIBRATED_TEXT)
        if t is not None and CALIBRATED_TEXT in (o.get("memorization") or {}):
            o["memorization"][CALIBRATED_TEXT] = {**o["memorization"][CALIBRATED_TEXT], **extra[t]}
    return len(distinct)


@dataclass
class Calibration:
    """What evaluate's ``--reference-frequencies`` and ``--reference-model`` loaded: the frequency
    table and the reference model's engine (either None when not asked for)."""

    engine: Any = None
    frequencies: TokenFrequencies | None = None
    reference: Any = None  # eval.scoring.Engine of the reference model

    @staticmethod
    def check(memorization: bool, reference_model: str | None, reference_frequencies: str) -> None:
        """Refuses the options before a model loads."""
        if reference_frequencies not in FREQUENCY_SOURCES:
            raise ConfigError(f"--reference-frequencies must be one of {', '.join(FREQUENCY_SOURCES)}, "
                              f"not {reference_frequencies!r}")
        if not memorization and (reference_model is not None or reference_frequencies != "none"):
            raise ConfigError("--reference-model and --reference-frequencies calibrate the memorization "
                              "scores; they need --memorization")

    @classmethod
    def load(cls, engine: Any, memorization: bool, reference_model: str | None, reference_frequencies: str,
             upstream: dict[str, Any] | None, *, device: str = "auto", dtype: str = "auto",
             trust_remote_code: bool = False, batch_size: int | str = "auto",
             quiet: bool = False) -> Calibration:
        """Loads what is asked for (nothing without ``memorization``, which the calibrated scores extend)."""
        cls.check(memorization, reference_model, reference_frequencies)
        from tcqa_data.eval.models import load_model
        from tcqa_data.eval.scoring import Engine
        from tcqa_data.progress import stage

        out = cls(engine)
        if reference_frequencies != "none":
            with stage(f"reference token frequencies ({reference_frequencies})", quiet):
                out.frequencies = reference_frequencies_for(engine.tokenizer, reference_frequencies, upstream)
        if reference_model is not None:
            with stage(f"loading reference model {reference_model}", quiet):
                ref = load_model(reference_model, device=device, dtype=dtype,
                                 trust_remote_code=trust_remote_code)
                out.reference = Engine(ref, batch_size)
        return out

    def record(self) -> dict[str, Any]:
        """results.json's ``memorization.calibration`` (empty when nothing was asked for)."""
        if self.frequencies is None and self.reference is None:
            return {}
        rec: dict[str, Any] = {"text": CALIBRATED_TEXT, "context": "standalone"}
        if self.frequencies is not None:
            rec["dc_pdd"] = {"bound": DC_PDD_BOUND, "smoothing": "laplace", "tokens": "first occurrences",
                             "frequencies": self.frequencies.record(),
                             "definition": "mean over the text's first-occurrence tokens of "
                                           "min(p(x) * -log f(x), bound) (Zhang et al. 2024, "
                                           "arXiv 2409.14781)"}
        if self.reference is not None:
            rec["reference_loss_ratio"] = {
                "reference_model": self.reference.lm.name, "source": self.reference.lm.source,
                "definition": "mean token log-prob under the evaluated model minus under the reference "
                              "model (MIMIR's reference attack, negated NLL difference)"}
        return {"calibration": rec}

    def add(self, per_doc: list[dict[str, Any]], texts: list[dict[str, str]]) -> int:
        """:func:`add_calibrated_scores` with what was loaded."""
        return add_calibrated_scores(self.engine, per_doc, texts, self.frequencies, self.reference)
