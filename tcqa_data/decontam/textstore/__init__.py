"""Corpus text reachable from the index: doc locations or a compact copy, per input.

Alignment (``decontam/detect/align.py``) needs the **text** of candidate corpus docs, which the hashed
n-gram and MinHash indexes do not keep. ``INDEX_DIR/textstore/`` makes it reachable:

- uncompressed JSONL: **locations**, the byte offset of each doc's line in the file
  (``<key>.offsets.npy``, int64, 8 bytes per doc); reading a doc is one seek and one line;
- Parquet: **locations**, the 0-based row of each doc (``<key>.rows.npy``); reading decodes
  the doc's row group (cached, so candidates from one row group cost one decode);
- ``.txt``: the file itself (one doc per file), nothing stored;
- ``.jsonl.gz``, ``.jsonl.zst`` and Hugging Face streams: a **copy** of the texts
  (``<key>.texts.parquet``: one ``text`` column, zstd, row groups of ``COPY_ROW_GROUP`` docs,
  so reading one doc decompresses about one row group).

``mode="copy"`` copies every input (for corpora that will move or be deleted); ``"none"`` builds
nothing. ``<key>`` is the first 32 hex digits of the input's sha256. ``meta.json`` is written last:
without it the store is absent, and a rebuild only redoes inputs whose entry does not match the
index manifest (so ``--append`` adds only the new inputs, and ``--overwrite`` never leaves a stale
entry). The store is built after the index commits, by a second pass over the inputs (a newline
scan for JSONL; a full read for copies; a second stream for Hugging Face datasets). The anchors of
a JSONL input the build's map read with the compiled reader come from the map, which winnowed the
bytes it had normalized (``anchors.map_anchor_batches``: staged beside the store until the pass
deletes them), so the pass does not read such an input's text again; otherwise, those of a plain
JSONL input come from the compiled reader (``readers.iter_normalized_batches``: no ``str`` per
doc) and the compiled winnowing kernel, checked line for line against ``docs.parquet``; any other
input, or one whose docs differ from the index's (an id field the index skipped docs for), is read
as ``str`` per doc: the files are the same every way (tests compare them).

Anchors (``anchors``): each input's task writes its runs (input-local doc ids); once at least
``build.ANCHOR_MERGE_RUNS`` runs lie outside it (fewer are looked up one by one), the build
merges all runs into **one** table of key-range parts (``anchors-g<generation>-<part>``, global doc
ordinals, ``meta.json["anchors"]`` names them and the inputs they hold) and deletes the runs, so a
query looks each k-gram up once whatever the number of inputs. Past ``build.ANCHOR_MERGE_GROUP``
runs the merge takes two levels (each group of that many runs into an intermediate table, then
the final parts from those: no task reads more runs, the work per run stays flat), writing the
same table as one level. ``--append`` merges the table with
the new inputs' runs into the next generation; a build over a version-3 store (runs per input,
still read as they are) merges its runs without reading the corpus; a merged table that no longer
matches the manifest's inputs is not used and its inputs' anchors are recomputed from text. An
index of 2**32 docs or more keeps per-input runs (ordinals past the 32-bit id).

Location entries keep the absolute path and size of the file and the xxh3-64 of each 64 KiB block
of it (``<key>.blocks.npy``, ``tcqa_data/checksums.py``): a read checks the blocks holding the
bytes it reads (once per block and store), so a moved or changed corpus file is a clear error at
read time, never wrong text, even when its size and mtime were kept. A store written before block
digests is checked against the input's sha256 (the whole file, once per store opened).

Modules: ``store`` (the layout, ``TextStore``: doc texts by ordinal, ``has_text_store``,
``store_summary``, ``store_bytes``), ``anchors`` (winnowing, the per-input anchor tables),
``anchor_merge`` (merging them into one table), ``anchor_index`` (``AnchorIndex``: candidate docs
for a query), ``build`` (``build_text_store``: the pass over the inputs that writes
the store). Every public name of these modules is importable from the package
(``from tcqa_data.decontam.textstore import TextStore``): the documented API.
"""

from tcqa_data.decontam.textstore.anchor_index import AnchorIndex
from tcqa_data.decontam.textstore.anchors import (
    ANCHOR_K,
    ANCHOR_MAX_DF,
    ANCHOR_MIN_SHARED,
    ANCHOR_RUN,
    ANCHOR_W,
    WHOLE_MIN_WORDS,
    winnow,
    winnow_hashes,
)
from tcqa_data.decontam.textstore.build import (
    COPY_ROW_GROUP,
    MODES,
    STORE_VERSION,
    build_text_store,
    check_mode,
    jsonl_line_offsets,
)
from tcqa_data.decontam.textstore.store import (
    META,
    STORE_DIR,
    TextStore,
    has_text_store,
    store_bytes,
    store_summary,
)

__all__ = [
    "ANCHOR_K",
    "ANCHOR_MAX_DF",
    "ANCHOR_MIN_SHARED",
    "ANCHOR_RUN",
    "ANCHOR_W",
    "COPY_ROW_GROUP",
    "META",
    "MODES",
    "STORE_DIR",
    "STORE_VERSION",
    "WHOLE_MIN_WORDS",
    "AnchorIndex",
    "TextStore",
    "build_text_store",
    "check_mode",
    "has_text_store",
    "jsonl_line_offsets",
    "store_bytes",
    "store_summary",
    "winnow",
    "winnow_hashes",
]
