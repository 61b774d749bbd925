"""The semantic tier: benchmark items that were rephrased or translated before they reached a corpus.

N-grams cannot see a rephrased item; a sentence embedding of every corpus window would cost far
more than the corpus pass. So the tier works in two steps, both from the benchmark side:

1. candidates, lexically, at stream speed (``rarewords.py``, ``windows.py``): each item's rare
   words in an inverted index; every corpus doc read whole as overlapping windows, and a window
   becomes a candidate for an item when it shares enough of that item's rare-word weight (a small
   share of windows pass; only the best few docs per item are kept);
2. verification (``model.py``, ``matches.py``): a sentence-embedding model scores each candidate
   span against its item (cosine), batched, on the GPU when there is one;
3. with a multilingual model, translations (``foreign.py``): a translation keeps no English rare
   word, so the pass also embeds the corpus's runs of text in another script, each a candidate
   for the item of each task it is nearest, scored by how much nearer.

The result answers an evidence source's ``semantic_matches`` (``detect/evidence.py``): a stream
pass fills the candidates as it reads each batch (``stream/scan.py``), an index reads its text
store (``semantic_from_texts``). The rule term ``semantic>=T`` (bare ``semantic``:
``DEFAULT_THRESHOLD``) and the ``semantic_*`` columns do not know which.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tcqa_data.decontam.semantic.matches import DEFAULT_THRESHOLD, SemanticMatches, SemanticVerifier, verify
from tcqa_data.decontam.semantic.model import DEFAULT_MODEL, EmbeddingModel, load_embedding_model
from tcqa_data.decontam.semantic.rarewords import RareWordTable
from tcqa_data.decontam.semantic.windows import Candidates, scan_windows

TEXT_BATCH = 2048  # text-store docs normalized and scanned at once (index mode)

__all__ = ["DEFAULT_MODEL", "DEFAULT_THRESHOLD", "Candidates", "EmbeddingModel", "RareWordTable",
           "SemanticMatches", "SemanticVerifier", "load_embedding_model", "scan_windows",
           "semantic_from_texts", "verifier_from_texts", "verify"]


def verifier_from_texts(queries: Sequence[str], num_docs: int, texts: Callable[[Sequence[int]], list[str]],
                        scheme: str, seed: int, groups: Sequence[int] | None = None,
                        foreign_model: EmbeddingModel | None = None) -> SemanticVerifier:
    """A ``SemanticVerifier`` of ``queries`` against corpus docs ``0..num_docs-1`` read by ``texts``
    (an index's text store), in batches of ``TEXT_BATCH`` docs; ``groups``: each query's task;
    ``foreign_model``: a multilingual model, with which text in other scripts is read too
    (``foreign.py``)."""
    from tcqa_data.decontam.core.hashing import normalized_buffer
    from tcqa_data.decontam.semantic.foreign import ForeignItems, scan_foreign

    rare = RareWordTable.build(queries, scheme, seed, groups)
    if foreign_model is not None:
        rare.foreign = ForeignItems.build(queries, groups, foreign_model, scheme)
    cands = Candidates()
    for lo in range(0, num_docs, TEXT_BATCH):
        arr, doc_start = normalized_buffer(texts(list(range(lo, min(num_docs, lo + TEXT_BATCH)))), scheme)
        cands = scan_windows(rare, arr, doc_start, seed, lo, into=cands)
        if rare.foreign is not None:
            cands = scan_foreign(rare.foreign, arr, doc_start, lo, cands)
    return SemanticVerifier(queries, rare, cands, scheme)


def semantic_from_texts(queries: Sequence[str], num_docs: int, texts: Callable[[Sequence[int]], list[str]],
                        model: EmbeddingModel, scheme: str, seed: int, groups: Sequence[int] | None = None
                        ) -> SemanticMatches:
    """``SemanticMatches`` of every item of ``queries`` (``verifier_from_texts``), by ``model``."""
    return verifier_from_texts(queries, num_docs, texts, scheme, seed, groups).matches(queries, model)
