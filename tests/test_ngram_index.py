"""The on-disk n-gram index: exact contents against brute force, lookups, map/reduce pieces."""

from __future__ import annotations

import json
import random
from collections import defaultdict

import numpy as np
import pytest

from tcqa_data.decontam import ngram_index as ni
from tcqa_data.decontam.build import build_index
from tcqa_data.decontam.hashing import batch_ngram_hashes, ngram_hashes, token_ngram_hashes
from tcqa_data.decontam.normalize import tokenize
from tcqa_data.errors import TcqaError
from tcqa_data.io_utils import NpyRowReader

P = 3


@pytest.fixture(scope="module")
def wiki_slice(wiki_sample, tmp_path_factory):
    """The first 120 articles (~2 MB) of the real wiki sample, plus the Apollo_program article."""
    lines = []
    apollo = None
    with open(wiki_sample, encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if i < 120:
                lines.append(line)
            elif json.loads(line)["title"] == "Apollo program":
                apollo = line
    assert apollo is not None
    lines.append(apollo)
    path = tmp_path_factory.mktemp("slice") / "wiki.jsonl"
    path.write_text("".join(lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def built(wiki_slice, tmp_path_factory):
    out = tmp_path_factory.mktemp("idx") / "index"
    build_index([str(wiki_slice)], out, ngram_sizes=(8, 13), workers=1, minhash=False, quiet=True,
                num_buckets=16, provenance=P, run_pairs=60_000, chunk_pairs=20_000)
    return out, [json.loads(x)["text"] for x in wiki_slice.read_text(encoding="utf-8").splitlines()]


def _brute_force(texts, n):
    """n-gram string -> sorted list of docs containing it (plain Python sets)."""
    where = defaultdict(set)
    for d, t in enumerate(texts):
        toks = tokenize(t)
        for i in range(len(toks) - n + 1):
            where[" ".join(toks[i:i + n])].add(d)
    return {k: sorted(v) for k, v in where.items()}


@pytest.mark.parametrize("n", [8, 13])
def test_index_equals_brute_force(built, n):
    out, texts = built
    idx = ni.NgramIndex.open(out)
    truth = _brute_force(texts, n)
    assert idx.manifest["counts"]["ngrams"][str(n)]["unique"] == len(truth)
    all_h = np.concatenate([np.load(ni.bucket_paths(out, n, b)["hashes"]) for b in range(16)])
    assert len(all_h) == len(truth) and np.all(np.diff(all_h.astype(object)) > 0)  # sorted, unique
    keys = list(truth)
    # lm-eval-style n-gram strings are already normalized: hashing them as texts is exact
    hashes, _ = batch_ngram_hashes(keys, [n])[n]
    assert len(hashes) == len(keys)
    hit = idx.lookup(hashes, n)
    assert hit.found.all()
    assert hit.doc_freq.tolist() == [len(truth[k]) for k in keys]
    expected_docs = [(truth[k] + [-1] * P)[:P] for k in keys]
    assert hit.docs.tolist() == expected_docs


def test_known_article_found_random_text_not(built):
    out, texts = built
    idx = ni.NgramIndex.open(out)
    apollo = texts[-1]
    h = ngram_hashes(apollo, 13, idx.normalization, idx.hash_seed)
    assert len(h) > 1000
    hit = idx.lookup(h, 13)
    assert hit.found.all()
    assert (hit.docs[:, 0] <= len(texts) - 1).all()
    ref = idx.doc_refs([len(texts) - 1])[0]
    assert ref.endswith(f":{len(texts)}")  # file:line of the article
    assert ni.NgramIndex.open(out).doc_refs(hit.docs[:5, 0]) == [ref] * 5 or hit.doc_freq[:5].max() > 1
    rng = random.Random(0)
    vocab = sorted(set(tokenize(" ".join(texts[:20]))))
    for _ in range(20):
        random_text = " ".join(rng.choice(vocab) for _ in range(60))
        assert not idx.lookup(ngram_hashes(random_text, 13), 13).found.any()
    # a real sentence with one word changed misses exactly the n-grams covering that word
    toks = tokenize(apollo)[100:140]
    toks[20] = "zzzunseen"
    found = idx.lookup(token_ngram_hashes(toks, 13), 13).found
    assert found.tolist() == [i + 12 < 20 or i > 20 for i in range(len(toks) - 12)]


def test_lookup_edge_cases(built):
    out, _ = built
    idx = ni.NgramIndex.open(out)
    empty = idx.lookup(np.empty(0, dtype=np.uint64), 13)
    assert empty.found.shape == (0,) and empty.docs.shape == (0, P)
    extremes = np.array([0, 2**64 - 1, 2**63], dtype=np.uint64)
    hit = idx.lookup(extremes, 8)
    assert not hit.found.any() and (hit.docs == -1).all() and (hit.doc_freq == 0).all()
    with pytest.raises(TcqaError, match="n-gram sizes"):
        idx.lookup(extremes, 5)
    with pytest.raises(TcqaError, match="out of range"):
        idx.doc_refs([10**6])


def test_open_missing_or_incomplete(tmp_path):
    with pytest.raises(TcqaError, match="no index"):
        ni.NgramIndex.open(tmp_path / "nothing")
    (tmp_path / "half" / "_work").mkdir(parents=True)
    with pytest.raises(TcqaError, match="incomplete"):
        ni.NgramIndex.open(tmp_path / "half")


def test_sort_pairs_matches_python():
    rng = np.random.default_rng(1)
    h = rng.integers(0, 50, size=5000).astype(np.uint64) * np.uint64(2**58)
    d = rng.integers(0, 40, size=5000)
    hs, ds = ni.sort_pairs(h, d)
    pairs = sorted(set(zip(h.tolist(), d.tolist(), strict=True)))
    assert list(zip(hs.tolist(), ds.tolist(), strict=True)) == pairs


def _random_runs(tmp_path, rng, nb):
    sources = []
    offset = 0
    for s in range(3):
        run_dir = tmp_path / f"in{s}"
        ndocs = 30
        for r in range(2):  # two runs, docs split between them
            k = 4000
            h = (rng.integers(0, 3000, size=k).astype(np.uint64) * np.uint64(6148914691236517))
            d = rng.integers(r * 15, r * 15 + 15, size=k)
            ni.write_run(run_dir, 13, r, h, d, nb)
            sources.append(ni.RunSource(str(run_dir), r, offset))
        offset += ndocs
    return sources


def test_reduce_chunking_is_invisible(tmp_path):
    """Bounded-memory chunked merging writes the same bytes as a one-chunk merge."""
    rng = np.random.default_rng(7)
    nb = 4
    sources = _random_runs(tmp_path, rng, nb)
    for b in range(nb):
        k1 = ni.reduce_bucket(tmp_path / "big", 13, b, sources, num_buckets=nb, provenance=2)
        k2 = ni.reduce_bucket(tmp_path / "small", 13, b, sources, num_buckets=nb, provenance=2,
                              chunk_pairs=500)
        assert k1 == k2 > 0
        for kind in ("hashes", "df", "docs"):
            a = ni.bucket_paths(tmp_path / "big", 13, b)[kind].read_bytes()
            c = ni.bucket_paths(tmp_path / "small", 13, b)[kind].read_bytes()
            assert a == c
        arr = np.load(ni.bucket_paths(tmp_path / "small", 13, b)["docs"], mmap_mode="r")
        assert arr.shape[1] == 2


def test_provenance_stored_as_uint32(built):
    """Doc ordinals are stored as uint32 (DOC_NONE = none); lookup still gives int64 with -1."""
    out, _ = built
    docs = np.load(ni.bucket_paths(out, 13, 0)["docs"])
    assert docs.dtype == np.uint32 and docs.shape[1] == P
    assert (docs == ni.DOC_NONE).any() and (docs[:, 0] != ni.DOC_NONE).all()
    h = np.load(ni.bucket_paths(out, 13, 0)["hashes"])[:50]
    hit = ni.NgramIndex.open(out).lookup(h, 13)
    assert hit.docs.dtype == np.int64 and (hit.docs == -1).any() and hit.docs.min() == -1


def _as_int64_docs(root, n, buckets):
    """Rewrite an index's provenance files in the earlier int64 layout (-1 = none)."""
    for b in range(buckets):
        p = ni.bucket_paths(root, n, b)["docs"]
        d = np.load(p).astype(np.int64)
        d[d == ni.DOC_NONE] = -1
        np.save(p, d)


def test_earlier_int64_provenance_still_read(built, tmp_path):
    out, _ = built
    import shutil

    copy = tmp_path / "old"
    shutil.copytree(out, copy)
    _as_int64_docs(copy, 13, 16)
    h = np.concatenate([np.load(ni.bucket_paths(out, 13, b)["hashes"])[:200] for b in range(16)])
    h = np.concatenate([h, np.array([1, 2**64 - 1], dtype=np.uint64)])
    a, b = ni.NgramIndex.open(out).lookup(h, 13), ni.NgramIndex.open(copy).lookup(h, 13)
    for x, y in zip(a, b, strict=True):
        assert x.dtype == y.dtype and np.array_equal(x, y)


@pytest.mark.parametrize("old_int64", [False, True])
def test_reduce_with_old_index_equals_full_merge(tmp_path, old_int64):
    """Appending (old bucket + new runs) equals merging every run, whatever the old docs dtype."""
    rng = np.random.default_rng(3)
    nb = 4
    sources = _random_runs(tmp_path, rng, nb)
    first, rest = sources[:2], sources[2:]  # input 0 (docs 0..29), inputs 1 and 2
    for b in range(nb):
        ni.reduce_bucket(tmp_path / "full", 13, b, sources, num_buckets=nb, provenance=2)
        ni.reduce_bucket(tmp_path / "old", 13, b, first, num_buckets=nb, provenance=2)
    if old_int64:
        _as_int64_docs(tmp_path / "old", 13, nb)
    old = ni.OldIndex(str(tmp_path / "old"), (0,), (0,))
    for b in range(nb):
        ni.reduce_bucket(tmp_path / "app", 13, b, rest, num_buckets=nb, provenance=2, old=old,
                         chunk_pairs=700)
        for kind in ("hashes", "df", "docs"):
            assert ni.bucket_paths(tmp_path / "app", 13, b)[kind].read_bytes() == \
                ni.bucket_paths(tmp_path / "full", 13, b)[kind].read_bytes()


def test_doc_ordinal_overflow_is_refused_or_int64():
    h = np.array([1, 2, 2], dtype=np.uint64)
    d = np.array([5, 7, ni.DOC_NONE], dtype=np.int64)
    w = np.ones(3, dtype=np.int64)
    with pytest.raises(TcqaError, match="uint32"):
        ni._merge(h, d, w, 2)
    h_u, df, docs = ni._merge(h, d, w, 2, np.dtype(np.int64))
    assert h_u.tolist() == [1, 2] and df.tolist() == [1, 2]
    assert docs.tolist() == [[5, -1], [7, ni.DOC_NONE]]


def test_npy_reader_reads_rows(tmp_path):
    a = np.arange(30, dtype=np.uint32).reshape(10, 3)
    np.save(tmp_path / "a.npy", a)
    r = NpyRowReader(tmp_path / "a.npy")
    assert len(r) == 10 and np.array_equal(r.read(2, 5), a[2:5]) and r.read(4, 4).shape == (0, 3)
    assert np.array_equal(r.read_row_span(3, 1, 3), a[3, 1:3])
    np.save(tmp_path / "f.npy", np.asfortranarray(a))
    with pytest.raises(TcqaError, match="f.npy"):
        NpyRowReader(tmp_path / "f.npy")
    h = np.sort(np.random.default_rng(0).integers(0, 2**63, size=1000).astype(np.uint64))
    np.save(tmp_path / "h.npy", h)
    cur = ni._Cursor(NpyRowReader(tmp_path / "h.npy"), 100, 900, 37)
    got, pos = [], 100
    for bound in (int(h[0]), int(h[300]), int(h[301]), int(h[850]), None):
        a0, b0, hh = cur.take(bound)
        assert a0 == pos and np.array_equal(hh, h[a0:b0])
        assert bound is None or (hh < np.uint64(bound)).all()
        got.append(hh)
        pos = b0
    assert pos == 900 and np.array_equal(np.concatenate(got), h[100:900])
