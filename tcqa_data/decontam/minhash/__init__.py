"""MinHash near-duplicate index over corpus *windows*.

Why windows. A benchmark item is a sentence or a paragraph. The Jaccard similarity of its
shingle set to a whole corpus document is at most |item| / |document|, which is tiny for a long
document even when the item was copied into it verbatim (a 20-word sentence inside a 5,000-word
article scores about 0.004). So corpus documents are cut into windows comparable in size to an
item, and an item (cut the same way by the caller) is compared with windows.

Windows. ``split_windows`` splits a text into paragraphs at blank lines, each paragraph into
sentences by Punkt's rules and ``punkt_tab`` tables (``sentence_splitter``: ``"punkt-fast"``, the
default, applies them in ``windows.fast_sentence_spans``; ``"punkt"`` runs NLTK's tokenizer),
and cuts any sentence longer than
``window_max_words`` into equal pieces. A window starts at EVERY sentence and takes following
sentences until it has at least ``window_min_words`` whitespace-separated words; so windows
overlap, and a copied item that starts at a sentence boundary meets a window that starts where
it starts. Near the end of the text, windows that cannot reach ``window_min_words`` are dropped
(the window before holds them), unless the whole text is shorter: then it is one window. So
the window count is at most the sentence count, whatever ``window_min_words`` is.

Default ``window_min_words=10``: MC-TACO sentences are 10-32 words (median 17). A verbatim copy
of an item of L >= W words has J = 1 with the window starting where it starts; a shorter one
only about L / (L + next sentence). The 28 MC-TACO sentences that occur verbatim in the wiki
sample all have exact J = 1 with a window at W = 10; at W = 15, 26 of 28 reach 0.5, at W = 20
only 20 of 28. A smaller W does not add windows (one per sentence either way); it makes them
shorter. Limitation: an item that Punkt joins to corpus text around it (e.g. a sentence after
"he said:" on the same line) lies inside a larger window and scores about |item| / |window|.

Signatures. Tokens are ``normalize.tokenize(text, params.normalization)``; shingles are
``shingle_words`` consecutive tokens joined by one space (a window with fewer tokens than that is
ONE shingle of all its tokens, so short items still get a signature; a window with no tokens has
no signature and is never indexed). Each shingle is hashed with ``shingle_hash`` (xxh32 of its
UTF-8, seed 0), and the signature is datasketch 2.0's ``"affine32"`` MinHash:
``min over shingles of (a_k * fmix32(h) + b_k) mod 2**32`` with ``a, b`` drawn by
``numpy.random.RandomState(seed)`` exactly as ``datasketch.MinHash(num_perm, seed,
hashfunc=shingle_hash)`` draws them. ``signatures`` computes it for many windows at once (all
shingles x permutations, then ``np.minimum.reduceat`` per window); tests check the values equal
datasketch's ``hashvalues`` updated one shingle at a time. ``shingle_words=2``: changing 10% of
a window's words keeps about 81% of its 2-word shingles (J about 0.68) but only 73% of 3-word
(J about 0.57) and 59% of 5-word ones (J about 0.42). With the 0.5 threshold, the LSH finds 93%
of 10%-edited sentences planted in wiki articles with 2-word shingles, 64% with 3-word ones.
Function-word pairs ("of the") do not make unrelated windows match: querying the 478 MC-TACO
sentences that are not in the wiki sample against all of it, the highest unrelated score is
0.19 ("at the age of"), and every score >= 0.3 is a true near-copy ("Durer" for "Dürer", "In a
1945 interview" for "In an interview in 1945").

LSH. ``bands`` x ``rows`` is chosen like datasketch's ``MinHashLSH`` (minimize the equally
weighted false positive and false negative areas of the S-curve around ``threshold``; 25 bands
x 5 rows for 0.5 and 128 permutations) and recorded. A band key is a 64-bit mix of the band's
``rows`` values, of which the files keep the top 32 bits (see ``params.index_storage_info`` for
the error rates of the lossy parts).

Files (build is map/reduce over paths: pure functions, deterministic, no pickle):

``write_minhash_shard(docs, work_dir, shard_id, params)`` (map) takes ``(doc_ordinal, text)``
pairs with strictly increasing ordinals and writes ``work_dir/minhash-<shard_id>/``: runs
``partNNNNN.{window_doc,band_pairs}.npy`` (+ ``signatures`` when ``verify="signatures"``; at
most ``PART_WINDOWS`` windows each, cut between documents; ``band_pairs`` is uint64
``[bands, m]``, each row the sorted ``key << 32 | doc - first doc of the run``) and
``shard.json`` last (a shard without it is incomplete). ``ShardWriter`` is the same map fed in
batches; the full build feeds it JSONL documents as code points (``feed.py``: one compiled
decode per document, the normalized bytes shared with the n-gram side).

``merge_minhash_shards(shard_dirs, out_dir, params, base_dir=None, doc_offsets=None)`` (reduce)
writes ``out_dir`` (normally ``INDEX_DIR/minhash``), storage format 3::

    band_cells.npy        uint32 [bands, 2**dir_bits + 1]   per band: directory of a packed table
    band_entries_NNN.npy  uint64 [words]   band NNN: top 32 bits of each window's band key -> its
                                           doc ordinal, each distinct pair once, sorted, bit-packed
                                           (decontam/core/packed.py)
    doc_windows.npy   uint32 [n_docs + 1]   first window id of each doc (int64 from 2**32 windows)
    signatures.npy    uint16 [n_windows, num_perm]   low 16 bits of each value; only with
                                                     params.verify == "signatures"
    params.json       written last: params, n_windows, n_docs, format_version, storage

``verify="text"`` (``index-corpus`` unless ``--text-store none``) keeps no signatures: candidates
are verified by windowing and signing the candidate docs' text again (from the text store).
Formats 1 and 2 (per-window signatures and band tables of window ids) are still queried; appending
to them is refused with a message naming ``--overwrite``. The reduce is also available as separate
steps an engine runs as tasks (``plan_minhash_merge``, ``start_minhash_merge``, then
``write_minhash_columns``, with many runs one ``merge_minhash_group`` per band and run group, with
many windows one ``merge_minhash_range`` per band and key range, one ``merge_minhash_band`` per band,
``finish_minhash_merge``).

Window ids are ordered by doc ordinal, then window number, so they do not depend on how docs
were sharded. ``base_dir`` (an existing ``minhash/`` folder) is merged as one more run (its
tables decoded: they keep all 32 key bits), so appending shards of new, higher-ordinal docs gives
exactly the files of a full rebuild. Memory is bounded: runs are read in blocks and outputs are
written sequentially.

Query: ``MinHashIndex.open(INDEX_DIR)`` memory-maps the files; ``query(sigs)`` looks up each
band key in the packed tables, takes every window of each candidate doc (stored signatures, or
signed again from the doc's text) and returns the best window per query by signature agreement
(the Jaccard estimate).

Modules: ``params`` (MinHashParams), ``windows`` (split_windows), ``sketch`` (shingles,
signatures, band keys), ``shards`` (map), ``merge`` (the reduce steps), ``band_merge`` (their
k-way merge of one band's sorted (key, doc) runs), ``query`` (MinHashIndex). Every public name
is re-exported here.
"""

from tcqa_data.decontam.minhash.merge import (
    finish_minhash_merge,
    merge_minhash_band,
    merge_minhash_group,
    merge_minhash_range,
    merge_minhash_shards,
    plan_minhash_merge,
    start_minhash_merge,
    write_minhash_columns,
)
from tcqa_data.decontam.minhash.params import SCHEME, SHINGLE_HASH, MinHashParams, optimal_bands_rows
from tcqa_data.decontam.minhash.query import MinHashIndex
from tcqa_data.decontam.minhash.shards import PART_WINDOWS, write_minhash_shard
from tcqa_data.decontam.minhash.sketch import (
    EMPTY_HASH,
    band_keys,
    datasketch_signatures,
    shingle_hash,
    shingles,
    sign,
    signatures,
)
from tcqa_data.decontam.minhash.windows import split_windows

__all__ = [
    "EMPTY_HASH", "PART_WINDOWS", "SCHEME", "SHINGLE_HASH", "MinHashIndex", "MinHashParams", "band_keys",
    "datasketch_signatures", "finish_minhash_merge", "merge_minhash_band", "merge_minhash_group",
    "merge_minhash_range", "merge_minhash_shards",
    "optimal_bands_rows", "plan_minhash_merge", "shingle_hash", "shingles", "sign", "signatures",
    "split_windows", "start_minhash_merge", "write_minhash_columns", "write_minhash_shard",
]
