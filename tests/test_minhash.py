"""MinHash windows, signatures (equal to datasketch), LSH index build/merge/append and queries,
on real wiki articles and MC-TACO sentences."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import numpy as np
import pytest

from tcqa_data.decontam.minhash import (
    MinHashIndex,
    MinHashParams,
    band_keys,
    datasketch_signatures,
    merge_minhash_shards,
    shingle_hash,
    shingles,
    signatures,
    split_windows,
    write_minhash_shard,
)
from tcqa_data.decontam.minhash import band_merge as mh_band
from tcqa_data.decontam.minhash import merge as mh_merge
from tcqa_data.decontam.minhash import shards as mh_shards
from tcqa_data.decontam.minhash import windows as mh_windows
from tcqa_data.errors import IndexMismatchError, TcqaError

P = MinHashParams()
FILES = ("signatures.npy", "doc_windows.npy", "band_cells.npy", "params.json",
         *(f"band_entries_{b:03d}.npy" for b in range(P.bands)))
PT = MinHashParams(verify="text")  # no stored signatures: candidates verified against the text


def _wiki(path: Path, picks) -> list[str]:
    want = set(picks)
    out = {}
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if i in want:
                out[i] = json.loads(line)["text"]
            if i >= max(want):
                break
    return [out[i] for i in picks]


def _mc_taco_sentences(path: Path) -> list[str]:
    with open(path, encoding="utf-8") as fh:
        return sorted({line.split("\t")[0] for line in fh})


def _build(docs: list[str], root: Path, params: MinHashParams = P, shards: int = 1,
           ordinals: list[int] | None = None) -> Path:
    ordinals = ordinals if ordinals is not None else list(range(len(docs)))
    pairs = list(zip(ordinals, docs, strict=True))
    cut = np.linspace(0, len(pairs), shards + 1).astype(int)
    dirs = [write_minhash_shard(pairs[a:b], root / "_work", i, params) for i, (a, b) in
            enumerate(zip(cut[:-1], cut[1:], strict=True))]
    merge_minhash_shards(dirs[::-1], root / "minhash", params)  # merge order must not matter
    return root


def _exact_jaccard(a: str, b: str) -> float:
    sa, sb = set(shingles(a, P)), set(shingles(b, P))
    return len(sa & sb) / len(sa | sb)


def _edit(text: str, frac: float, rng: random.Random) -> str:
    words = text.split()
    for i in rng.sample(range(len(words)), max(1, round(frac * len(words)))):
        words[i] = rng.choice(["zebra", "quantum", "violet", "harbor", "pencil", "meadow"]) + str(i)
    return " ".join(words)


# --- parameters -------------------------------------------------------------------------------


def test_default_lsh_params_equal_datasketch():
    from datasketch.lsh import _optimal_param

    assert (P.bands, P.rows) == _optimal_param(0.5, 128, 0.5, 0.5) == (25, 5)
    p8 = MinHashParams(threshold=0.8, num_perm=64)
    assert (p8.bands, p8.rows) == _optimal_param(0.8, 64, 0.5, 0.5)


def test_params_dict_roundtrip_and_checks():
    d = P.to_dict()
    assert d["scheme"] == "affine32" and d["shingle_hash"] == "xxh32-utf8-seed0" and d["bands"] == 25
    assert MinHashParams.from_dict(json.loads(json.dumps(d))) == P
    with pytest.raises(IndexMismatchError, match="rebuild the index"):
        MinHashParams.from_dict({**d, "scheme": "legacy"})
    with pytest.raises(ValueError, match="exceeds num_perm"):
        MinHashParams(bands=20, rows=7)
    with pytest.raises(ValueError, match="both bands and rows"):
        MinHashParams(bands=20)
    assert MinHashParams(bands=16, rows=8).to_dict()["rows"] == 8


# --- windows ----------------------------------------------------------------------------------


def test_split_windows_on_a_wiki_article(wiki_sample):
    (text,) = _wiki(wiki_sample, [0])
    wins = split_windows(text, P)
    starts = [0]
    for w in wins[1:]:
        starts.append(text.index(w, starts[-1] + 1))  # windows are substrings, in text order
    sentence_starts = [text.index(s) for s in mh_windows._punkt().tokenize(text)[:5]]
    assert starts[:5] == sentence_starts  # one window per sentence start
    assert all(len(w.split()) >= P.window_min_words for w in wins[:-1])
    assert all(len(w.split()) < P.window_min_words + P.window_max_words for w in wins)
    # A sentence that is long enough is a window on its own.
    first = "Anarchism is a political philosophy that advocates stateless societies"
    assert wins[0].startswith(first) and wins[0].endswith("free associations.")
    assert split_windows("", P) == [] and split_windows(" \n\n ", P) == []
    short = "Too short. Still short."
    assert split_windows(short, P) == [short]  # a short item is one window


def test_split_windows_merges_short_sentences_and_cuts_run_ons():
    text = "Born 1950. Died 2001. He wrote eleven books about the sea and its many creatures."
    assert split_windows(text, P) == [
        text, "Died 2001. He wrote eleven books about the sea and its many creatures.",
        "He wrote eleven books about the sea and its many creatures."]
    run_on = " ".join(f"w{i}" for i in range(150))  # no sentence punctuation at all
    wins = split_windows(run_on, P)
    assert [len(w.split()) for w in wins] == [50, 50, 50]  # 3 equal pieces of <= 64 words
    # Blank lines end a paragraph even without a full stop.
    assert split_windows("Heading\n\nBody text here.", MinHashParams(window_min_words=1)) == [
        "Heading", "Body text here."]


def test_missing_punkt_tables_say_how_to_fix(monkeypatch, tmp_path):
    import nltk

    import tcqa_data.data

    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])
    monkeypatch.setattr(tcqa_data.data, "NLTK_DATA", tmp_path / "not_installed")  # a broken install
    mh_windows._punkt.cache_clear()
    try:
        with pytest.raises(TcqaError, match=r"NLTK_DATA.*python -m nltk\.downloader punkt_tab"):
            split_windows("One sentence. Another one.", P)
    finally:
        mh_windows._punkt.cache_clear()


# --- signatures -------------------------------------------------------------------------------


@pytest.mark.parametrize("params", [
    P, MinHashParams(num_perm=64, seed=7, shingle_words=5, window_min_words=20)])
def test_vectorized_signatures_equal_datasketch(wiki_sample, mc_taco_dev, params):
    from datasketch import MinHash

    texts = [w for doc in _wiki(wiki_sample, [1, 2]) for w in split_windows(doc, params)][:300]
    texts += _mc_taco_sentences(mc_taco_dev)[:50]
    texts += ["Paris", "New York", "", "!!! ...", " ".join(["word"] * 5000),  # short, empty, huge
              json.loads('"a broken emoji \\ud83d from a JSON escape"')]
    sigs = signatures(texts, params)
    assert sigs.dtype == np.uint32 and sigs.shape == (len(texts), params.num_perm)
    ref = []
    for text in texts:
        m = MinHash(num_perm=params.num_perm, seed=params.seed, hashfunc=shingle_hash)
        for s in shingles(text, params):
            m.update(s)
        ref.append(m.hashvalues)
    np.testing.assert_array_equal(sigs, np.array(ref))
    np.testing.assert_array_equal(datasketch_signatures(texts[:20], params), sigs[:20])
    # The agreement fraction is datasketch's Jaccard estimate.
    a = MinHash(num_perm=params.num_perm, seed=params.seed, hashvalues=sigs[0], scheme="affine32")
    b = MinHash(num_perm=params.num_perm, seed=params.seed, hashvalues=sigs[1], scheme="affine32")
    assert a.jaccard(b) == np.mean(sigs[0] == sigs[1])
    # Fewer tokens than a shingle: one shingle of all tokens; no tokens: the empty value.
    assert shingles("New York", MinHashParams(shingle_words=3)) == ["new york"]
    assert shingles("!!!", P) == [] and shingles("Hello, World! Bye", P) == ["hello world", "world bye"]
    assert (sigs[texts.index("")] == 0xFFFFFFFF).all()


# --- index on real text -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def planted(wiki_sample, tmp_path_factory):
    """30 wiki articles; sentences of 10 articles outside the corpus planted verbatim into them."""
    corpus = _wiki(wiki_sample, list(range(30)))
    outside = _wiki(wiki_sample, list(range(600, 610)))
    rng = random.Random(7)
    planted = []  # (host doc, copied text)
    for k, src in enumerate(outside):
        sents = [s for s in mh_windows._punkt().tokenize(src) if 15 <= len(s.split()) <= 40 and "\n" not in s]
        for s in rng.sample(sents, min(3, len(sents))):
            host = (3 * k + len(planted)) % len(corpus)
            paras = corpus[host].split("\n")
            # A new sentence after a paragraph that ends one, in the middle of a long article. (After
            # "as follows:" Punkt would join it to that sentence, and the window would be larger.)
            at = rng.choice([i for i in range(len(paras) // 4, 3 * len(paras) // 4)
                             if paras[i].endswith(".")])
            paras[at] = paras[at] + " " + s
            corpus[host] = "\n".join(paras)
            planted.append((host, s))
    root = _build(corpus, tmp_path_factory.mktemp("planted"), shards=3)
    unrelated = [s for src in _wiki(wiki_sample, list(range(900, 906)))
                 for s in mh_windows._punkt().tokenize(src) if len(s.split()) >= 12][:150]
    return corpus, planted, root, unrelated


def _best(index: MinHashIndex, items: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Best (similarity, window) per item over the item's windows, as a detector would do."""
    per = [split_windows(t, P) for t in items]
    owner = np.repeat(np.arange(len(items)), [len(w) for w in per])
    sim, win = index.query(signatures([w for ws in per for w in ws], P))
    best_sim, best_win = np.zeros(len(items)), np.full(len(items), -1)
    for i in range(len(items)):
        j = np.flatnonzero(owner == i)
        if len(j):
            k = j[np.argmax(sim[j])]
            best_sim[i], best_win[i] = sim[k], win[k]
    return best_sim, best_win


def test_verbatim_copy_in_a_long_article_is_found(planted):
    corpus, planted_items, root, _ = planted
    index = MinHashIndex.open(root)
    assert index.params == P and index.n_windows > 3000
    sim, win = _best(index, [s for _, s in planted_items])
    hosts = np.array([h for h, _ in planted_items])
    assert (sim >= 0.99).all(), sim
    np.testing.assert_array_equal(index.window_docs(win), hosts)
    # Against the whole host document the same item has a tiny Jaccard: the reason for windows.
    h, s = planted_items[0]
    assert _exact_jaccard(s, corpus[h]) < 0.01


def test_lightly_edited_copy_scores_high_and_unrelated_low(planted):
    corpus, planted_items, root, unrelated = planted
    index = MinHashIndex.open(root)
    rng = random.Random(3)
    edited = [_edit(s, 0.10, rng) for _, s in planted_items]
    sim, win = _best(index, edited)
    hosts = np.array([h for h, _ in planted_items])
    found = index.window_docs(win) == hosts
    assert found.mean() >= 0.85, sim
    assert np.median(sim[found]) >= 0.55
    # The estimate is verified against the signature, so it tracks the exact Jaccard.
    for (h, s), e, ok in zip(planted_items, edited, found, strict=True):
        if ok:
            exact = max(_exact_jaccard(e, x) for x in split_windows(corpus[h], P) if s[:30] in x)
            assert abs(sim[edited.index(e)] - exact) < 0.2
    sim_u, _ = _best(index, unrelated)
    assert len(unrelated) >= 100
    assert np.quantile(sim_u, 0.95) < 0.1 and sim_u.max() < 0.5, np.sort(sim_u)[-5:]


def _full_signatures(corpus: list[str]) -> np.ndarray:
    """32-bit signatures of every window (with shingles) of ``corpus``, in window-id order."""
    sigs = signatures([w for doc in corpus for w in split_windows(doc, P)], P)
    return sigs[~(sigs == 0xFFFFFFFF).all(axis=1)]


def test_band_tables_are_consistent(planted):
    from tcqa_data.decontam.core import packed

    corpus, _, root, _ = planted
    index = MinHashIndex.open(root)
    full = _full_signatures(corpus)
    # storage format 3: low 16 bits of each value; per band, top 32 bits of each 64-bit band key
    # -> doc of the window, bit-packed under a directory of the keys' top bits
    assert index.signatures.dtype == np.uint16
    np.testing.assert_array_equal(np.asarray(index.signatures), (full & 0xFFFF).astype(np.uint16))
    per_doc = [len(_full_signatures([d])) for d in corpus]
    np.testing.assert_array_equal(np.asarray(index.doc_windows), np.r_[0, np.cumsum(per_doc)])
    window_doc = np.repeat(np.arange(len(corpus)), per_doc)
    np.testing.assert_array_equal(index.window_docs(np.arange(index.n_windows)), window_doc)
    keys = (band_keys(full, P) >> np.uint64(32)).astype(np.uint64)
    n_pairs = 0
    for b in range(P.bands):
        k, d = packed.decode_range(np.asarray(index.band_cells[b]), index.band_entries[b], 0,
                                   1 << index.dir_bits, index.dir_bits, index.id_bits)
        # each distinct (key, doc) pair once, sorted
        pairs = np.unique(np.stack([keys[:, b], window_doc.astype(np.uint64)]), axis=1)
        np.testing.assert_array_equal(k, pairs[0])
        np.testing.assert_array_equal(d, pairs[1].astype(np.int64))
        n_pairs += len(k)
    assert n_pairs < P.bands * index.n_windows  # the planted corpus repeats sentences
    # bytes: an entry of 32 - dir_bits + id_bits bits per distinct (key, doc) pair
    width = 32 - index.dir_bits + index.id_bits
    assert sum(e.nbytes for e in index.band_entries) <= n_pairs * width / 8 + 16 * P.bands


def test_packed_tables_round_trip_and_look_up():
    """decontam/core/packed.py: streamed in blocks, decoded back exactly, looked up by binary search
    within directory cells (also a cell holding most entries), at most ``max_per_key`` smallest ids."""
    from tcqa_data.decontam.core import packed

    rng = np.random.default_rng(0)
    for n, key_range, id_bits in ((0, 2**32, 1), (5, 2**32, 11), (5000, 2**32, 20), (5000, 2**12, 7)):
        keys = rng.integers(0, key_range, n, dtype=np.uint64)
        ids = rng.integers(0, 2**id_bits, n)
        order = np.lexsort((ids, keys))
        keys, ids = keys[order], ids[order]
        dir_bits = packed.dir_bits_for(n)
        cells: list[np.ndarray] = []
        words: list[np.ndarray] = []
        table = packed.TableWriter(cells.append, words.append, None, dir_bits, id_bits)
        for s in range(0, n, 77):
            table.add(keys[s:s + 77], ids[s:s + 77])
        assert table.close() == n
        c, w = np.concatenate(cells), np.concatenate(words)
        assert len(c) == 2**dir_bits + 1
        assert len(w) == packed.n_words(n, packed.entry_width(dir_bits, id_bits))
        k2, i2 = packed.decode_range(c, w, 0, 2**dir_bits, dir_bits, id_bits)
        np.testing.assert_array_equal(k2, keys)
        np.testing.assert_array_equal(i2, ids)
        queries = np.r_[keys[:40], rng.integers(0, key_range, 40, dtype=np.uint64)]
        for cap in (None, 2):
            owner, got = packed.lookup(c, w, queries, dir_bits, id_bits, cap)
            for j, q in enumerate(queries):
                np.testing.assert_array_equal(got[owner == j], ids[keys == q][:cap])


def test_text_verified_index_needs_no_signatures(planted, tmp_path):
    """verify="text": the same best windows, exact (32-bit) similarities, signatures recomputed
    from the docs' text; a text that no longer gives the indexed windows is an error."""
    corpus, planted_items, root, _ = planted
    troot = _build(corpus, tmp_path / "t", params=PT, shards=2)
    assert not (troot / "minhash" / "signatures.npy").exists()
    calls: list[list[int]] = []

    def texts(docs):
        calls.append(list(docs))
        return [corpus[d] for d in docs]

    text_index = MinHashIndex.open(troot, doc_texts=texts)
    rng = random.Random(5)
    items = [s for _, s in planted_items] + [_edit(s, 0.10, rng) for _, s in planted_items]
    (s1, w1), (s2, w2) = _best(MinHashIndex.open(root), items), _best(text_index, items)
    np.testing.assert_array_equal(w1, w2)
    assert np.abs(s1 - s2).max() <= 2 / P.num_perm
    assert calls and all(c == sorted(set(c)) for c in calls)  # each candidate doc read once per batch
    with pytest.raises(TcqaError, match="no text store"):
        MinHashIndex.open(troot).query(signatures([planted_items[0][1]], P))
    changed = MinHashIndex.open(troot, doc_texts=lambda docs: ["Short. Text."] * len(docs))
    with pytest.raises(TcqaError, match="changed after indexing"):
        changed.query(signatures([planted_items[0][1]], P))


def test_mc_taco_sentences_found_verbatim_in_wiki(wiki_sample, mc_taco_dev, tmp_path):
    """Real contamination: MC-TACO dev sentences that occur verbatim in the wiki sample."""
    docs = [json.loads(line)["text"] for line in open(wiki_sample, encoding="utf-8")]
    sentences = _mc_taco_sentences(mc_taco_dev)
    everything = "\x00".join(docs)
    verbatim = [s for s in sentences if s in everything]
    assert len(verbatim) >= 5
    hosts = sorted({i for s in verbatim for i, d in enumerate(docs) if s in d})
    picks = sorted(set(hosts) | set(range(0, 1411, 150)))  # plus unrelated articles
    index = MinHashIndex.open(_build([docs[i] for i in picks], tmp_path, ordinals=picks))
    sim, win = _best(index, sentences)
    is_verbatim = np.array([s in verbatim for s in sentences])
    assert (sim[is_verbatim] == 1.0).all()
    for s, w in zip(sentences, win, strict=True):
        if s in verbatim:
            assert s in docs[index.window_docs([w])[0]]
    assert (sim[~is_verbatim] < 0.5).mean() > 0.9


# --- build: shards, append, determinism, errors -----------------------------------------------


def _bytes(root: Path) -> dict[str, bytes]:
    folder = root / "minhash"
    assert sorted(f.name for f in folder.iterdir()) == sorted(f for f in FILES if (folder / f).exists())
    return {f: (folder / f).read_bytes() for f in FILES if (folder / f).exists()}


@pytest.mark.parametrize("P", [P, PT], ids=["signatures", "text"])
def test_shards_parts_and_append_equal_a_full_rebuild(wiki_sample, tmp_path, monkeypatch, P):
    docs = _wiki(wiki_sample, list(range(40, 52)))
    docs[5] = docs[2]  # duplicate article: equal band keys, ties ordered by window id
    docs[7] = "The same boilerplate sentence repeats here. " * 40
    monkeypatch.setattr(mh_shards, "PART_WINDOWS", 150)  # several runs per shard
    monkeypatch.setattr(mh_band, "_MIN_BLOCK", 17)  # many merge steps
    monkeypatch.setattr(mh_band, "_MERGE_ENTRIES", 64)
    full = _bytes(_build(docs, tmp_path / "one", P, shards=1))
    assert _bytes(_build(docs, tmp_path / "four", P, shards=4)) == full
    assert _bytes(_build(docs, tmp_path / "again", P, shards=1)) == full  # deterministic
    assert ("signatures.npy" in full) == (P.verify == "signatures")

    base = _build(docs[:8], tmp_path / "app", P, shards=2)
    new = write_minhash_shard(list(enumerate(docs))[8:], tmp_path / "app" / "_work", "new", P)
    summary = merge_minhash_shards([new], base / "minhash", P, base_dir=base / "minhash")  # in place
    assert summary["n_docs"] == len(docs)
    assert _bytes(base) == full
    # Maps that numbered their docs from 0: the merge shifts them to global ordinals.
    local = [write_minhash_shard(list(enumerate(docs[a:b])), tmp_path / "loc", i, P)
             for i, (a, b) in enumerate([(0, 5), (5, 12)])]
    merge_minhash_shards(local, tmp_path / "loc" / "minhash", P, doc_offsets=[0, 5])
    assert _bytes(tmp_path / "loc") == full

    with pytest.raises(ValueError, match="overlap"):
        merge_minhash_shards([new, new], tmp_path / "x", P)
    with pytest.raises(IndexMismatchError):
        merge_minhash_shards([new], tmp_path / "x", MinHashParams(seed=2, verify=P.verify))
    (new / "shard.json").unlink()
    with pytest.raises(TcqaError, match="incomplete"):
        merge_minhash_shards([new], tmp_path / "x", P)
    with pytest.raises(ValueError, match="strictly increasing"):
        write_minhash_shard([(3, "a b c"), (3, "d e f")], tmp_path / "w", 0, P)


def test_empty_index_empty_queries_and_bad_input(tmp_path):
    root = _build(["", "!!!"], tmp_path / "e")
    index = MinHashIndex.open(root / "minhash")  # the minhash folder itself also opens
    assert index.n_windows == 0
    sim, win = index.query(signatures(["some text to look for here"], P))
    assert sim.tolist() == [0.0] and win.tolist() == [-1]

    root = _build(["Some text. More of the same text in a longer sentence here."], tmp_path / "one")
    index = MinHashIndex.open(root)
    sim, win = index.query(signatures(["", "Some text. More of the same text in a longer sentence here."], P))
    assert win[0] == -1 and sim[1] == 1.0 and win[1] >= 0
    assert index.window_docs([-1, int(win[1])]).tolist() == [-1, 0]
    with pytest.raises(ValueError, match="shape"):
        index.query(np.zeros((2, 64), dtype=np.uint32))

    with pytest.raises(TcqaError, match="no complete MinHash index"):
        MinHashIndex.open(tmp_path / "nowhere")
    keys = root / "minhash" / "band_entries_003.npy"
    keys.write_bytes(keys.read_bytes()[:-8])
    with pytest.raises(TcqaError, match="damaged"):
        MinHashIndex.open(root)


def test_fast_sentence_splitter_keeps_punkt_boundaries(wiki_sample):
    """punkt-fast (Punkt's tables and rules without NLTK's per-candidate machinery) starts
    sentences at the words Punkt starts them at, on real wiki articles."""
    from tcqa_data.decontam.minhash.windows import _PARAGRAPH_BREAK, fast_sentence_spans

    texts = _wiki(wiki_sample, range(0, 1400, 25))
    paras = [p for t in texts for p in _PARAGRAPH_BREAK.split(t) if p.strip()]
    punkt = mh_windows._punkt()
    same = total = 0
    for para in paras:
        def starts(spans, para=para):
            return {len(para[:s].split()) for s, e in spans if para[s:e].split()}

        a, b = starts(punkt.span_tokenize(para)), starts(fast_sentence_spans(para))
        same += len(a & b)
        total += len(a | b)
    assert total > 5000
    assert same / total >= 0.995, same / total
    # the edge cases the rules are about
    assert [para[s:e] for para in ["Dr. Smith arrived. He left at 5 p.m. on Monday. Really?! Yes."]
            for s, e in fast_sentence_spans(para)] == ["Dr. Smith arrived.", "He left at 5 p.m. on Monday.",
                                                        "Really?!", "Yes."]


def test_sentence_splitter_is_a_recorded_parameter():
    assert MinHashParams().sentence_splitter == "punkt-fast"
    assert MinHashParams().to_dict()["sentence_splitter"] == "punkt-fast"
    old = {k: v for k, v in MinHashParams().to_dict().items() if k != "sentence_splitter"}
    assert MinHashParams.from_dict(old).sentence_splitter == "punkt"  # indexes from before the option
    with pytest.raises(ValueError, match="sentence_splitter"):
        MinHashParams(sentence_splitter="spacy")


def test_lossy_storage_rates_are_recorded(planted):
    _, _, root, _ = planted
    meta = json.loads((root / "minhash" / "params.json").read_text())
    st = meta["storage"]
    assert st["storage_format"] == 3 and st["signature_bits"] == 16 and st["band_key_bits"] == 32
    assert st["verify"] == "signatures" and st["similarity_estimate_max_bias"] == 2.0 ** -16
    assert st["chance_candidates_per_query"] == pytest.approx(P.bands * meta["n_windows"] / 2**32)
    assert st["entry_bits"] == 32 - st["dir_bits"] + st["id_bits"]
    files = ("signatures.npy", "doc_windows.npy", "band_cells.npy")
    entries = sum(f.stat().st_size for f in (root / "minhash").glob("band_entries_*.npy"))
    assert st["bytes"] == {**{f: (root / "minhash" / f).stat().st_size for f in files},
                           "band_entries_*.npy": entries}


def _write_format1(corpus: list[str], folder: Path) -> None:
    """The first MinHash layout (32-bit signatures, 64-bit band keys), written by hand."""
    full = _full_signatures(corpus)
    keys = band_keys(full, P)
    order = np.argsort(keys, axis=0, kind="stable")
    folder.mkdir(parents=True)
    per_doc = [sum(1 for w in split_windows(d, P) if shingles(w, P)) for d in corpus]
    np.save(folder / "signatures.npy", full)
    np.save(folder / "window_doc.npy", np.repeat(np.arange(len(corpus), dtype=np.int64), per_doc))
    np.save(folder / "window_shingles.npy", np.ones(len(full), dtype=np.uint32))
    np.save(folder / "band_keys.npy", np.take_along_axis(keys, order, axis=0).T.copy())
    np.save(folder / "band_windows.npy", order.T.astype(np.uint32))
    (folder / "params.json").write_text(json.dumps({
        "kind": "tcqa-minhash-index", "format_version": 1, "params": P.to_dict(), "n_windows": len(full),
        "n_docs": len(corpus), "n_windows_without_tokens": 0}))


def test_format1_index_still_answers_queries_but_refuses_append(planted, tmp_path):
    corpus, planted_items, root, _ = planted
    _write_format1(corpus, tmp_path / "v1" / "minhash")
    old, new = MinHashIndex.open(tmp_path / "v1"), MinHashIndex.open(root)
    items = [s for _, s in planted_items][:40]
    (s1, w1), (s2, w2) = _best(old, items), _best(new, items)
    assert (s1 >= 0.5).mean() >= 0.85
    np.testing.assert_array_equal(w1, w2)
    assert np.abs(s1 - s2).max() <= 0.05  # 16-bit values agree by chance at most rarely
    shard = write_minhash_shard([(len(corpus), "One more document. It has two sentences here.")],
                                tmp_path / "_work", 0, P)
    with pytest.raises(IndexMismatchError, match="storage format 1.*--overwrite"):
        merge_minhash_shards([shard], tmp_path / "out", P, base_dir=tmp_path / "v1" / "minhash")


# --- compiled map side (windows, signatures of document ranges, band runs) --------------------

_EDGE_TEXTS = [
    "", " \n\n ", "a", "...", "Dr. Smith arrived. He left at 5 p.m. on Monday. Really?! Yes.",
    'He said "end.":320 more. "Hi!" she said -- yes. end.:a.:b.:c. next one.',
    "a.)--b c. d e.\n", "(x.) y. [z!] w? \u201cq.\u201d r. 1. 2. 3. - 4.5.6. A.B.C. mr. Mr. Smith. etc. Then",
    "x\u00a0y. Z\u2028q. U.S. army. J. Smith. 12.5. \ud83d stop. caf\u00e9. Next \u3000 one.",
    "\U0001F600 emoji. \x85nel. \u65e5\u672c\u8a9e\u3002 A - b . c -- d. ... ! ? end",
    " ".join(f"w{i}" for i in range(150)), "Heading\n\nBody text here.\n \n\tMore text. And more!",
]


def _kernel_modes(monkeypatch, fn):
    from tcqa_data.decontam.core import kernel

    out = []
    for mode in ("numba", "numpy"):
        monkeypatch.setenv(kernel.ENV, mode)
        out.append(fn())
    return out


def test_punkt_tables_read_without_nltk_equal_nltk_tables():
    tables = mh_windows._tables_from_files("english", None)
    assert tables is not None and len(tables[3]) > 1000  # ortho_context
    nltk_tables = mh_windows._tables_of(mh_windows._punkt())
    assert tables[:3] == nltk_tables[:3] and tables[4] == nltk_tables[4]
    # NLTK's ortho_context is a defaultdict(int): tokenizing adds 0 entries for unseen words
    assert tables[3] == {typ: v for typ, v in nltk_tables[3].items() if v}


def test_compiled_windows_equal_python_windows(wiki_sample, monkeypatch):
    """The kernels' punkt-fast windows are exactly the Python splitter's, character for character."""
    texts = _EDGE_TEXTS + _wiki(wiki_sample, range(0, 1400, 14)) + _EDGE_TEXTS
    for params in (P, MinHashParams(window_min_words=1),
                   MinHashParams(window_min_words=3, window_max_words=5)):
        (d1, s1, e1), (d2, s2, e2) = _kernel_modes(
            monkeypatch, lambda p=params: mh_windows.window_spans(texts, p))
        assert len(d1) > 3000
        assert np.array_equal(d1, d2) and np.array_equal(s1, s2) and np.array_equal(e1, e2)
    assert [split_windows(t, P) for t in _EDGE_TEXTS[:4]] == [[], [], ["a"], ["..."]]


def test_signatures_of_document_ranges_equal_window_signatures(wiki_sample, monkeypatch):
    from tcqa_data.decontam.minhash.sketch import sign, sign_spans

    texts = _EDGE_TEXTS + _wiki(wiki_sample, range(3, 1400, 40))
    for params in (P, MinHashParams(num_perm=64, shingle_words=3, window_min_words=1)):
        wd, ws, we = mh_windows.window_spans(texts, params)
        wins = [texts[d][s:e] for d, s, e in zip(wd.tolist(), ws.tolist(), we.tolist(), strict=True)]
        (s1, c1), (s2, c2) = _kernel_modes(
            monkeypatch, lambda p=params, w=(wd, ws, we): sign_spans(texts, *w, p))
        assert np.array_equal(s1, s2) and np.array_equal(c1, c2)
        s3, c3 = sign(wins, params)
        assert np.array_equal(s1, s3) and np.array_equal(c1, c3)
        assert np.array_equal(s1[:40], datasketch_signatures(wins[:40], params))


def test_map_shard_files_identical_with_kernel_and_fallback(wiki_sample, tmp_path, monkeypatch):
    """Small parts and batches (parts cut inside a window batch): every file byte for byte."""
    monkeypatch.setattr(mh_shards, "PART_WINDOWS", 700)
    monkeypatch.setattr(mh_shards, "_BATCH_CHARS", 50_000)
    texts = _EDGE_TEXTS + _wiki(wiki_sample, range(5, 1400, 60))
    dirs = _kernel_modes(monkeypatch, lambda: write_minhash_shard(
        enumerate(texts), tmp_path / str(len(list(tmp_path.iterdir()))), "0", P))
    files = sorted(p.name for p in dirs[0].iterdir())
    assert len({f.split(".")[0] for f in files if f.startswith("part")}) >= 3  # several parts
    assert files == sorted(p.name for p in dirs[1].iterdir())
    # signatures are scratch only where the index stores them
    assert any(f.endswith(".signatures.npy") for f in files) == (P.verify == "signatures")
    text_verified = write_minhash_shard(enumerate(texts[:20]), tmp_path / "text", "0",
                                        dataclasses.replace(P, verify="text"))
    assert list(text_verified.glob("*.window_doc.npy")) and not list(text_verified.glob("*.signatures.npy"))
    for f in files:
        assert (dirs[0] / f).read_bytes() == (dirs[1] / f).read_bytes(), f


def test_band_merge_with_small_blocks_and_many_runs_is_identical(wiki_sample, tmp_path, monkeypatch):
    """Many runs merged a few entries at a time (runs topped up before they run dry) give the
    same files as one big block per run."""
    texts = _wiki(wiki_sample, range(0, 600, 20))
    monkeypatch.setattr(mh_shards, "PART_WINDOWS", 200)
    big = _build(texts, tmp_path / "big", shards=4)
    monkeypatch.setattr(mh_band, "_MIN_BLOCK", 8)
    monkeypatch.setattr(mh_band, "_MERGE_ENTRIES", 64)
    small = _build(texts, tmp_path / "small", shards=4)
    files = sorted(p.name for p in (big / "minhash").iterdir())
    assert len(list((big / "_work").rglob("part*.band_pairs.npy"))) > 8  # many runs
    assert files == sorted(p.name for p in (small / "minhash").iterdir())
    for f in files:
        assert (big / "minhash" / f).read_bytes() == (small / "minhash" / f).read_bytes(), f


@pytest.mark.parametrize(("groups", "ranges", "wide"), [(True, False, False), (False, True, False),
                                                   (True, True, False), (True, True, True)],
                         ids=["groups", "ranges", "both", "both-wide-docs"])
def test_band_merge_in_run_groups_or_key_ranges_is_identical(wiki_sample, tmp_path, monkeypatch, groups,
                                                             ranges, wide):
    """Past GROUP_RUNS runs each band's run groups are merged first (their own tasks), then the
    groups' runs; past RANGE_WINDOWS windows each band's key ranges are merged and packed apart,
    then the band joins the ranges' parts. Either way, or both: the same files as one merge of every run,
    also when appending to an index (whose tables are a run of the first group, read by directory
    cell), and no scratch left behind. ``wide``: the merge holds its pairs as for an index past
    2**32 docs (two arrays, not one uint64 each) and writes the same files."""
    texts = _wiki(wiki_sample, range(0, 600, 20))
    monkeypatch.setattr(mh_shards, "PART_WINDOWS", 200)
    one = _bytes(_build(texts, tmp_path / "one", shards=4))
    if wide:
        monkeypatch.setattr(mh_band, "_pair_ops", lambda layout: mh_band._Wide)
    if groups:
        monkeypatch.setattr(mh_merge, "GROUP_RUNS", 3)
    if ranges:
        monkeypatch.setattr(mh_merge, "RANGE_WINDOWS", 150)
    dirs = [write_minhash_shard(list(enumerate(texts))[a:b], tmp_path / "g" / "_work", i, P)
            for i, (a, b) in enumerate([(0, 8), (8, 15), (15, 22), (22, 30)])]
    plan = mh_merge.plan_minhash_merge(dirs, P)
    assert len(plan["runs"]) > 6 and (len(plan["groups"]) >= 3) == groups and (plan["ranges"] >= 8) == ranges
    merge_minhash_shards(dirs, tmp_path / "g" / "minhash", P)
    assert _bytes(tmp_path / "g") == one
    scratch = (mh_merge.GROUPS_DIR, mh_merge.RANGES_DIR)
    assert not any((tmp_path / "g" / "minhash" / d).exists() for d in scratch)

    base = _build(texts[:12], tmp_path / "app", shards=2)
    new = [write_minhash_shard(list(enumerate(texts))[a:b], tmp_path / "app" / "_work", f"n{i}", P)
           for i, (a, b) in enumerate([(12, 20), (20, 30)])]
    plan = mh_merge.plan_minhash_merge(new, P, base_dir=base / "minhash")
    base_cells = 1 << json.loads((base / "minhash" / "params.json").read_text())["storage"]["dir_bits"]
    assert (len(plan["groups"]) >= 2) == groups and (1 < plan["ranges"] <= base_cells) == ranges
    merge_minhash_shards(new, base / "minhash", P, base_dir=base / "minhash")
    assert _bytes(base) == one


@pytest.mark.parametrize(("dir_bits", "id_bits", "ranges"), [(4, 9, 4), (6, 29, 8), (3, 33, 8), (5, 1, 2)])
def test_packed_key_ranges_joined_equal_one_table(dir_bits, id_bits, ranges):
    """A table packed as key ranges (``TableWriter(cells=...)``, each from bit 0), the parts'
    directories offset and their words joined by ``WordsJoin`` in pieces: the same directory and
    words as the table packed at once, for entry widths that do and do not divide 64 bits,
    empty ranges included."""
    from tcqa_data.decontam.core import packed

    rng = np.random.default_rng(dir_bits * 100 + id_bits)
    n = 3000
    keys = np.sort(rng.integers(0, 2**32, n, dtype=np.uint64))
    keys = keys[(keys >> np.uint64(30)) != 1]  # one empty quarter of the key space
    ids = rng.integers(0, 2**id_bits, len(keys), dtype=np.uint64).astype(np.int64)
    order = np.lexsort((ids, keys))
    keys, ids = keys[order], ids[order]

    def write(parts_of_keys, cells=None):
        c, w = [], []
        t = packed.TableWriter(c.append, w.append, None, dir_bits, id_bits, cells)
        for k, d in parts_of_keys:
            t.add(k, d)
        t.close()
        return np.concatenate(c), np.concatenate(w)

    whole_cells, whole_words = write([(keys, ids)])
    width = packed.entry_width(dir_bits, id_bits)
    span, per = 2**32 // ranges, 2**dir_bits // ranges
    cells_out, words_out = [], []
    join = packed.WordsJoin(lambda w: words_out.append(w.copy()), width)  # it reuses its buffers
    before = 0
    for r in range(ranges):
        sel = (keys >= r * span) & (keys < (r + 1) * span)
        k, d = keys[sel], ids[sel]
        c, w = write([(k[:7], d[:7]), (k[7:], d[7:])], (r * per, (r + 1) * per))
        assert len(c) == per + 1 and int(c[-1]) == len(k)
        cells_out.append(c[:-1] + before)
        bits = len(k) * width
        for a in range(0, -(-bits // 64), 5):  # in pieces of 5 words
            join.add(w[a:a + 5], min(bits - 64 * a, 64 * 5))
        before += len(k)
    cells_out.append(np.array([before]))
    assert join.close() == len(whole_words)
    assert np.array_equal(np.concatenate(cells_out), whole_cells)
    assert np.array_equal(np.concatenate(words_out), whole_words)


def test_packed_offsets_writer_counts_every_value(monkeypatch):
    """``OffsetsWriter`` (the tables' directories, a MinHash index's doc -> window offsets): for
    each value, the items before it, whatever the chunking of the stream (ties across chunks,
    empty chunks, values past one output chunk)."""
    from tcqa_data.decontam.core import packed

    monkeypatch.setattr(packed, "_OFFSET_CHUNK", 7)
    rng = np.random.default_rng(1)
    for _ in range(300):
        size, n = int(rng.integers(1, 60)), int(rng.integers(0, 80))
        values = np.sort(rng.integers(0, size, n))
        cuts = np.sort(rng.integers(0, n + 1, int(rng.integers(0, 5))))
        out: list[np.ndarray] = []
        w = packed.OffsetsWriter(out.append, size)
        for a, b in zip(np.r_[0, cuts], np.r_[cuts, n], strict=True):
            w.add(values[a:b])
        w.close()
        assert np.array_equal(np.concatenate(out), np.searchsorted(values, np.arange(size + 1)))


def _sorted_runs(rng, runs: int):
    """``runs`` sorted blocks of (key, doc) pairs, docs rising from block to block (as a merge
    pass takes them), with keys repeated within a block and across blocks and some pairs twice."""
    ks, ds = [], []
    for r in range(runs):
        k = rng.integers(0, 2**32, 400, dtype=np.uint64)
        k[1::7] = k[::7][: len(k[1::7])]  # keys repeated within a run
        k[:40] = ks[-1][:40] if ks else k[:40]  # and across runs: ties ordered by doc
        d = rng.integers(r * 50, r * 50 + 50, 400).astype(np.int64)
        d[2::9] = d[1::9][: len(d[2::9])]
        order = np.lexsort((d, k))
        ks.append(k[order])
        ds.append(d[order])
    return np.concatenate(ks), np.concatenate(ds)


@pytest.mark.parametrize("runs", [1, 3, 3 * mh_band._RADIX_RUNS])
def test_band_merge_pair_forms_agree(runs):
    """The band merge holds (key, doc) pairs as one uint64 while docs fit 32 bits (``_Narrow``:
    numpy's stable sort, or from _RADIX_RUNS runs the compiled radix sort on the key) and as two
    arrays beyond (``_Wide``: a two-key lexsort): the same distinct pairs in (key, doc) order."""
    k, d = _sorted_runs(np.random.default_rng(runs), runs)
    expect = sorted(set(zip(k.tolist(), d.tolist(), strict=True)))
    scratch = np.empty(len(k) + 3, dtype=np.uint64)
    pairs = mh_band._Narrow.sorted_unique(mh_band._Narrow.from_keys_docs(k, d), runs, scratch)
    assert [(int(p) >> 32, int(p) & 0xFFFFFFFF) for p in pairs] == expect
    wide_k, wide_d = mh_band._Wide.sorted_unique((k.copy(), d + 2**32), runs, scratch)  # docs past 32 bits
    assert list(zip(wide_k.tolist(), (wide_d - 2**32).tolist(), strict=True)) == expect


def test_merge_readers_are_cached_until_a_file_changes(tmp_path):
    """The band and range merges open each run's files once per process (``cached_row_reader``),
    and a file rewritten under the same name (a rerun map) is read again."""
    from tcqa_data.io_utils import cached_row_reader

    path = tmp_path / "run.band_pairs.npy"
    np.save(path, np.arange(12, dtype=np.uint64).reshape(3, 4))
    first = cached_row_reader(path)
    assert cached_row_reader(str(path)) is first and first.shape == (3, 4)
    np.save(tmp_path / "new.npy", np.arange(10, dtype=np.uint64).reshape(2, 5))
    (tmp_path / "new.npy").replace(path)  # as an atomic rewrite does
    again = cached_row_reader(path)
    assert again is not first and again.shape == (2, 5)
    assert again.read_row_span(1, 1, 3).tolist() == [6, 7]
