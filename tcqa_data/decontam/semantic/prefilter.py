"""The verification's first stage: a static embedding model screens candidates for the transformer.

The transformer (``model.py``, all-MiniLM-L6-v2: ~43 CPU-ms a text) dominates the semantic tier's
cost: most candidates of a clean benchmark are topical windows (a SQuAD passage and the Wikipedia
article it came from share its names), not rephrasings, and each item's views and each candidate's
sub-spans are embedded. A static model (one vector per word piece, averaged) costs ~0.01 ms a text.
So ``matches.verify`` scores every candidate twice when the model carries a prefilter:

1. every (sub-span, view) pair with ``StaticEmbeddingModel``: its cosine, and the screening score
   ``0.5 x cosine + 0.5 x kept`` (``kept``: the kept share of the particulars, ``matches.kept_share``, the
   same as the transformer's score uses; a static cosine rises with the words two texts share, so
   it gets less weight here than in ``combined_score``: measured, the same safety passes ~2x fewer
   pairs);
2. only the pairs whose screening score reaches ``PREFILTER_BAR``, with the transformer: only their
   sub-spans and views are embedded by it.

``PREFILTER_BAR`` is set so that on the development set every item the transformer alone scores at
``SAFE_FROM`` (0.7, below the shipped 0.8) or more has the pair that gives it that score past the
bar, with a margin (docs/semantic-prefilter.md): its score, cosine, kept share, span and window are
the transformer's, the same as without the prefilter, and a rule ``semantic>=T`` with
``T >= SAFE_FROM`` flags the same items. Below ``SAFE_FROM`` a score is the best of the pairs that
passed, so at most the transformer's own. A rule with a lower semantic threshold, or a judge (it
reads pairs from 0.5), runs without the prefilter (``load_embedding_model(..., prefilter=False)``,
decided by the pipeline: ``prefilter_safe``, ``model_for_rule``). With the prefilter, the
transformer also skips the pairs that cannot reach the rule's lowest threshold (its ``floor``),
whatever their cosine (``matches.reaches``): at the shipped 0.8, those that keep under half the
particulars; their stage-1 score is below the floor too, for the same reason. So every score at or
above the floor is the transformer's, and the flags are the same. An item with no pair past the
bar (or able to reach the floor) keeps its stage-1 evidence (best span, window, shared words)
and its static cosine, kept share and ``combined_score`` of them, which is below the floor or
0.58 (< ``SAFE_FROM``: screening < 0.48 and ``combined = screening + 0.1 x (cosine - kept)`` with
``KEPT_WEIGHT`` 0.4); ``SemanticMatches.model`` (the ``semantic_model`` column) names the model
that gave each item's scores.

The static model is WordLlama ``l2_supercat`` 256-d (MIT; token embeddings of Llama 2's vocabulary
trained for sentence similarity), whose wheel ``wordllama`` ships the weights
(``wordllama/weights/l2_supercat_256.safetensors``, sha256 pinned: ``STATIC_SHA256``) and the
tokenizer. It is read here with ``safetensors`` and ``tokenizers`` (the library's own loader
configures the root logger when imported). Texts reach it normalized (single-space separated
words), and the tokenizer never merges across a word boundary (its pieces start at ``▁``), so a
text's mean token vector is its words' token-vector sums over their token counts: each distinct
word is tokenized once.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from tcqa_data.errors import ConfigError

STATIC_MODEL = "wordllama-l2-supercat-256"
STATIC_PACKAGE = "wordllama"
STATIC_WEIGHTS = "weights/l2_supercat_256.safetensors"
STATIC_TOKENIZER = "tokenizers/l2_supercat_tokenizer_config.json"
# wordllama 0.4.0.post1, wordllama/weights/l2_supercat_256.safetensors
STATIC_SHA256 = "64b47a2dc493cb8e85944076601189739852d7b64e0e1eedcb1937a251cd9fd5"
# A pair reaches the transformer when 0.5 x static cosine + 0.5 x kept share >= 0.48 (module doc)
SCREEN_KEPT_WEIGHT = 0.5
PREFILTER_BAR = 0.48
SAFE_FROM = 0.7  # semantic>=T with T at least this flags what the transformer alone flags
INSTALL_HINT = "pip install 'tcqa-data[semantic]' (or pip install wordllama==0.4.0.post1)"


def static_model_dir() -> Path:
    """The ``wordllama`` package's folder, found without importing it."""
    spec = importlib.util.find_spec(STATIC_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"the semantic tier's prefilter model {STATIC_MODEL} is not installed; "
                          f"{INSTALL_HINT}")
    return Path(next(iter(spec.submodule_search_locations)))


class StaticEmbeddingModel:
    """Mean-pooled static token embeddings, L2-normalized (module doc); ``encode`` as the
    transformer's ``EmbeddingModel.encode``, on normalized texts."""

    def __init__(self, name: str, digest: str, vectors: np.ndarray, tokenizer: object) -> None:
        self.name = name
        self.digest = digest
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self.tokenizer = tokenizer
        self._row: dict[str, int] = {}  # word -> row of _sums / _counts
        self._sums = np.empty((0, self.vectors.shape[1]), np.float32)
        self._counts = np.empty(0, np.float32)

    def manifest(self) -> dict[str, object]:
        return {"name": self.name, "weights_sha256": self.digest, "bar": PREFILTER_BAR,
                "safe_from": SAFE_FROM}

    def _add_words(self, words: list[str]) -> None:
        """Each new word's token-vector sum and token count."""
        encs = self.tokenizer.encode_batch(words, add_special_tokens=False)  # type: ignore[attr-defined]
        ids = [e.ids for e in encs]
        lens = np.array([len(i) for i in ids], np.int64)
        flat = np.fromiter((t for i in ids for t in i), np.int64, int(lens.sum()))
        np.clip(flat, 0, len(self.vectors) - 1, out=flat)
        sums = np.zeros((len(words), self.vectors.shape[1]), np.float32)
        nonempty = lens > 0
        if flat.size:
            starts = np.concatenate([[0], np.cumsum(lens)[:-1]])[nonempty]
            sums[nonempty] = np.add.reduceat(self.vectors[flat], starts, axis=0)
        base = len(self._counts)
        self._row.update((w, base + k) for k, w in enumerate(words))
        self._sums = np.concatenate([self._sums, sums])
        self._counts = np.concatenate([self._counts, lens.astype(np.float32)])

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalized float32 embeddings of ``texts`` (normalized, words separated by one space),
        in their order; a text with no word piece embeds as zeros (cosine 0 with anything)."""
        from scipy.sparse import csr_matrix

        split = [t.split() for t in texts]
        new = [w for w in dict.fromkeys(w for ws in split for w in ws) if w not in self._row]
        if new:
            self._add_words(new)
        indptr = np.concatenate([[0], np.cumsum([len(ws) for ws in split])]).astype(np.int64)
        cols = np.fromiter((self._row[w] for ws in split for w in ws), np.int64, int(indptr[-1]))
        bag = csr_matrix((np.ones(len(cols), np.float32), cols, indptr),
                         shape=(len(texts), len(self._counts)))
        emb = np.asarray(bag @ self._sums, dtype=np.float32)
        emb /= np.maximum(bag @ self._counts, 1.0).astype(np.float32)[:, None]
        norm = np.linalg.norm(emb, axis=1, keepdims=True)
        return (emb / np.maximum(norm, 1e-12)).astype(np.float32)


def load_static_model(expected_sha256: str = STATIC_SHA256) -> StaticEmbeddingModel:
    """The bundled static model, its weights checked against the pinned digest (one-line
    ConfigError: not installed, or another file)."""
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer

    from tcqa_data.decontam.semantic.model import _file_sha256

    folder = static_model_dir()
    weights, tok = folder / STATIC_WEIGHTS, folder / STATIC_TOKENIZER
    if not weights.is_file() or not tok.is_file():
        raise ConfigError(f"prefilter model {STATIC_MODEL}: {weights if not weights.is_file() else tok} is "
                          f"missing; reinstall it ({INSTALL_HINT})")
    st = weights.stat()
    digest = _file_sha256(str(weights), st.st_size, st.st_mtime_ns)
    if digest != expected_sha256:
        raise ConfigError(f"prefilter model {STATIC_MODEL}: {weights} has sha256 {digest[:16]}..., not the "
                          f"pinned {expected_sha256[:16]}...; reinstall it ({INSTALL_HINT})")
    try:
        vectors = load_file(str(weights))["embedding.weight"]
        tokenizer = Tokenizer.from_file(str(tok))
    except Exception as e:  # noqa: BLE001 - a corrupt file is one line naming it
        raise ConfigError(f"prefilter model {STATIC_MODEL} cannot be loaded from {folder} ({e}); "
                          f"{INSTALL_HINT}") from None
    return StaticEmbeddingModel(STATIC_MODEL, digest, vectors, tokenizer)


def prefilter_safe(semantic_thresholds: Iterable[float], judge: bool) -> bool:
    """Whether a run may screen with the prefilter: every ``semantic>=T`` term of its rule has
    ``T >= SAFE_FROM`` and no judge reads its pairs (the judge's floor is lower)."""
    return not judge and min(semantic_thresholds, default=1.0) >= SAFE_FROM


def model_for_rule(name: str | None, semantic_thresholds: Sequence[float], judge: bool) -> object:
    """The embedding model ``name`` as a run whose rule has these ``semantic>=T`` thresholds uses
    it: with the prefilter where ``prefilter_safe``, and then the rule's lowest threshold as the
    floor below which no pair is embedded (``matches``: its flags are the same)."""
    from tcqa_data.decontam.semantic.model import load_embedding_model

    safe = prefilter_safe(semantic_thresholds, judge)
    return load_embedding_model(name, prefilter=safe, floor=min(semantic_thresholds) if safe else None)


def pairs_past_bar(cosines: Sequence[np.ndarray], kept: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Per candidate, which of its (sub-span, view) pairs the transformer scores: those whose
    screening score (``SCREEN_KEPT_WEIGHT``: the static cosine and the kept rare-word share, per
    pair) reaches ``PREFILTER_BAR``."""
    w = SCREEN_KEPT_WEIGHT
    return [(1.0 - w) * cos + w * k >= PREFILTER_BAR for cos, k in zip(cosines, kept, strict=True)]
