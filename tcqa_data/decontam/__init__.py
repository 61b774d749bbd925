"""Stage 1: normalize, hash, index a corpus, and detect benchmark docs in it.

Packages, each importing only the ones listed before it:

- ``core/``: text normalization, n-gram hashing, the compiled kernels and their selection, the
  packed (key, id) tables, page-in advice, and the map's scratch layout constants;
- ``readers/``: corpus inputs, their shards and documents;
- ``ngrams/``: the n-gram index (layout and lookups) and its map runs, reduce and merge;
- ``textstore/``: corpus text for alignment and its anchor tables;
- ``minhash/``: the MinHash window index;
- ``build/``: ``build_index`` (``index-corpus``): maps, reduce, commit, over ``tcqa_data.engines``;
- ``detect/``: the evidence of an opened index per benchmark doc, the scores, alignment, and the
  flag rules.
"""
