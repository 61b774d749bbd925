"""Detection: benchmark docs scored against the evidence of a corpus.

- ``evidence.py``: ``IndexEvidence``, an index opened once (manifest, n-grams, MinHash, text
  store) as the evidence source of benchmark docs: n-gram hits, MinHash candidates, corpus texts;
- ``score.py``: ``score_docs``, the per-doc columns (overlap, longest match, attribution, MinHash
  similarity, alignment) from an evidence source;
- ``align.py``: alignment of a query to candidate corpus texts (edited copies);
- ``rules.py``: the flag rules over those columns (``Rule``, ``doc_status``).
"""
