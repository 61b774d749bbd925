"""The numba kernels behind ``kernel`` (imported only when numba is installed and enabled), one
module per concern:

- ``jsonl``: JSONL text into Janitor bytes (n-gram map) or code points (MinHash map);
- ``ngram``: n-gram hashing, the map's run sort, the reduce's merge and bucket columns;
- ``minhash``: window signatures and band tables;
- ``sentences``: sentence windows on code points (Punkt's rules where they settle a break);
- ``packed``: bit-packed tables (packing, lookups);
- ``anchors``: the text store's winnowed anchor hashes;
- ``semantic``: the semantic tier's candidate windows;
- ``mix``: the hash mixer ``ngram`` and ``minhash`` share.

Top-level functions with ``cache=True``: compiled once per install into ``__pycache__``, then
loaded by every later process (closures would miss the cache and recompile each time). Numba
checks a cached kernel against its own module's file only: after editing ``mix.py``, also touch
``ngram.py`` and ``minhash.py`` (or clear ``__pycache__``) so their callers recompile.
"""

from __future__ import annotations

from tcqa_data.decontam.core._numba_kernels import anchors, jsonl, minhash, ngram, packed, semantic, sentences

KERNELS = {**jsonl.KERNELS, **ngram.KERNELS, **minhash.KERNELS, **sentences.KERNELS, **packed.KERNELS,
           **anchors.KERNELS, **semantic.KERNELS}
