"""The on-disk n-gram index: exact contents against brute force, lookups, map/reduce pieces."""

from __future__ import annotations

import json
import random
from collections import defaultdict

import numpy as np
import pytest

from tcqa_data.decontam.build import build_index
from tcqa_data.decontam.core.hashing import batch_ngram_hashes, ngram_hashes, token_ngram_hashes
from tcqa_data.decontam.core.normalize import tokenize
from tcqa_data.decontam.index_files import reseal
from tcqa_data.decontam.ngrams import index as ni
from tcqa_data.decontam.ngrams import merge as nmerge
from tcqa_data.decontam.ngrams import reduce as nred
from tcqa_data.decontam.ngrams import runs as nruns
from tcqa_data.errors import IndexMismatchError, TcqaError
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
    keys = list(truth)
    # lm-eval-style n-gram strings are already normalized: hashing them as texts is exact
    hashes, _ = batch_ngram_hashes(keys, [n])[n]
    assert len(hashes) == len(keys)
    # the stored keys are exactly the top key_bits bits of the corpus n-grams' hashes
    stored, bits = idx.all_keys(n)
    assert bits == idx.manifest["ngram_storage"]["key_bits"] < 64
    assert np.all(stored[1:] > stored[:-1])  # sorted, unique
    assert np.array_equal(stored, np.unique(ni.stored_keys(hashes, idx.num_buckets, idx.dir_bits)))
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
    hs, ds = nruns.sort_pairs(h, d)
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
            nruns.write_run(run_dir, 13, r, h, d, nb)
            sources.append(nred.RunSource(str(run_dir), r, offset))
        offset += ndocs
    return sources


@pytest.mark.parametrize("dir_bits", [0, 3, 9])
def test_reduce_chunking_is_invisible(tmp_path, dir_bits):
    """Bounded-memory chunked merging writes the same bytes as a one-chunk merge (chunk cuts
    inside directory cells too: 512 cells, chunks of 500 pairs)."""
    rng = np.random.default_rng(7)
    nb = 4
    sources = _random_runs(tmp_path, rng, nb)
    for b in range(nb):
        k1 = nred.reduce_bucket(tmp_path / "big", 13, b, sources, num_buckets=nb, provenance=2,
                              dir_bits=dir_bits)
        k2 = nred.reduce_bucket(tmp_path / "small", 13, b, sources, num_buckets=nb, provenance=2,
                              chunk_pairs=500, dir_bits=dir_bits)
        assert k1 == k2 and k1.rows > 0
        for kind in ni.BUCKET_FILES:
            a = ni.bucket_paths(tmp_path / "big", 13, b)[kind].read_bytes()
            c = ni.bucket_paths(tmp_path / "small", 13, b)[kind].read_bytes()
            assert a == c, kind
        directory = np.load(ni.bucket_paths(tmp_path / "small", 13, b)["dir"])
        assert len(directory) == 2 ** dir_bits + 1 and directory[-1] == k1.rows
        assert np.diff(directory.astype(np.int64)).max() == k1.max_cell
        arr = np.load(ni.bucket_paths(tmp_path / "small", 13, b)["docs_more"], mmap_mode="r")
        assert arr.shape[1] == 1


@pytest.mark.parametrize("kernel_choice", ["auto", "numpy"])
@pytest.mark.parametrize("dir_bits", [0, 9])
def test_two_level_reduce_equals_one_level(tmp_path, monkeypatch, kernel_choice, dir_bits):
    """Past GROUP_RUNS runs, each bucket of each group of runs is merged into one run first, then
    the groups' runs: the same bucket files as one merge of every run (chunked or not, with the
    kernels or the numpy fallback, and appending to an old index)."""
    monkeypatch.setenv("TCQA_KERNEL", kernel_choice)
    nb = 4
    sources = _random_runs(tmp_path / "runs", np.random.default_rng(5), nb)
    groups = nred.run_groups(len(sources), group_runs=2)
    assert groups == [(0, 2), (2, 4), (4, 6)] and nred.run_groups(len(sources)) == []
    kw = dict(num_buckets=nb, dir_bits=dir_bits)
    old = nred.OldIndex(str(tmp_path / "old"), (0,), (0,))
    for b in range(nb):
        nred.reduce_bucket(tmp_path / "one", 13, b, sources, provenance=2, **kw)
        nred.reduce_bucket(tmp_path / "old", 13, b, sources[:2], provenance=2, **kw)
        for g, (lo, hi) in enumerate(groups):
            pairs = nred.merge_bucket_group(tmp_path / "groups", 13, b, g, sources[lo:hi], chunk_pairs=300,
                                            **kw)
            run = nruns.run_paths(tmp_path / "groups" / f"b{b:05d}", 13, g)
            h, d = np.load(run["hashes"]), np.load(run["docs"])
            assert len(h) == pairs and d.dtype == np.uint32
            # one sorted run of distinct (hash, doc) pairs, holding only this bucket
            assert np.all((h[1:] > h[:-1]) | ((h[1:] == h[:-1]) & (d[1:] > d[:-1])))
            off = np.load(run["offsets"])
            assert off[b] == 0 and off[b + 1] == pairs and off[nb] == pairs
        grouped = nred.group_sources(tmp_path / "groups", b, len(groups))
        nred.reduce_bucket(tmp_path / "two", 13, b, grouped, provenance=2, chunk_pairs=700, **kw)
        app = nred.group_sources(tmp_path / "groups", b, len(groups))[1:]  # inputs 1 and 2 on "old"
        nred.reduce_bucket(tmp_path / "app", 13, b, app, provenance=2, old=old, **kw)
        for kind in ni.BUCKET_FILES:
            want = ni.bucket_paths(tmp_path / "one", 13, b)[kind].read_bytes()
            assert ni.bucket_paths(tmp_path / "two", 13, b)[kind].read_bytes() == want, kind
            assert ni.bucket_paths(tmp_path / "app", 13, b)[kind].read_bytes() == want, kind


def test_two_level_build_on_the_local_pool_equals_one_level(built, wiki_slice, tmp_path, monkeypatch):
    """A whole build whose n-gram runs outnumber GROUP_RUNS (a run per 60 k pairs, groups of 2),
    on the local process pool: the same n-gram files and docs table as the one-level build, and
    no group scratch left behind."""
    out, _ = built
    monkeypatch.setattr(nred, "GROUP_RUNS", 2)
    planned = []
    plan_groups = nred.run_groups
    monkeypatch.setattr(nred, "run_groups", lambda runs: planned.append(plan_groups(runs)) or planned[-1])
    two = tmp_path / "two"
    build_index([str(wiki_slice)], two, ngram_sizes=(8, 13), workers=2, minhash=False, quiet=True,
                num_buckets=16, provenance=P, run_pairs=60_000, chunk_pairs=20_000, text_store="none",
                batch_chars=100_000)
    assert len(planned) == 2 and all(len(g) >= 3 for g in planned)  # per n-gram size: 3+ groups
    files = sorted(p.relative_to(out) for p in (out / "ngrams").rglob("*.npy"))
    assert len(files) == 2 * 16 * len(ni.BUCKET_FILES)
    assert files == sorted(p.relative_to(two) for p in (two / "ngrams").rglob("*.npy"))
    for f in [*files, "docs.parquet"]:
        assert (two / f).read_bytes() == (out / f).read_bytes(), f
    assert not (two / "_work").exists()


def test_reduce_rereads_a_run_rewritten_in_place(tmp_path):
    """A process keeps each run's offsets and headers across buckets; a run rewritten under the
    same name (a rerun map) is read again, not served from that cache."""
    rng = np.random.default_rng(11)
    nb = 2
    sources = _random_runs(tmp_path / "runs", rng, nb)
    for b in range(nb):
        nred.reduce_bucket(tmp_path / "first", 13, b, sources, num_buckets=nb, dir_bits=3)
    h = rng.integers(0, 5000, size=3000).astype(np.uint64) * np.uint64(6148914691236517)
    d = rng.integers(0, 15, size=3000)
    nruns.write_run(sources[0].run_dir, 13, sources[0].run, h, d, nb)  # same file names, new pairs
    fresh = _random_runs(tmp_path / "copy", np.random.default_rng(11), nb)  # the old runs, new names
    nruns.write_run(fresh[0].run_dir, 13, fresh[0].run, h, d, nb)
    for b in range(nb):
        nred.reduce_bucket(tmp_path / "again", 13, b, sources, num_buckets=nb, dir_bits=3)
        nred.reduce_bucket(tmp_path / "fresh", 13, b, fresh, num_buckets=nb, dir_bits=3)
        for kind in ni.BUCKET_FILES:
            assert ni.bucket_paths(tmp_path / "again", 13, b)[kind].read_bytes() == \
                ni.bucket_paths(tmp_path / "fresh", 13, b)[kind].read_bytes(), kind
    assert any(ni.bucket_paths(tmp_path / "again", 13, b)["keys"].read_bytes()
               != ni.bucket_paths(tmp_path / "first", 13, b)["keys"].read_bytes() for b in range(nb))


def test_sparse_provenance_and_uint8_df(built):
    """First doc dense (uint32), the other P-1 only for n-grams in 2+ docs, df as uint8;
    lookup still gives int64 docs with -1 for none."""
    out, texts = built
    idx = ni.NgramIndex.open(out)
    truth = _brute_force(texts, 13)
    multi = sum(len(v) >= 2 for v in truth.values())
    more_rows = 0
    for b in range(16):
        f = {k: np.load(p) for k, p in ni.bucket_paths(out, 13, b).items()}
        assert f["keys"].dtype == f["dir"].dtype == f["docs"].dtype == np.uint32
        assert f["df"].dtype == np.uint8 and f["docs"].ndim == 1 and f["docs_more"].shape[1] == P - 1
        assert len(f["df_over_rows"]) == 0  # no wiki 13-gram is in 255 docs
        # the side table holds exactly the rows in 2+ docs
        assert np.array_equal(f["docs_more_rows"], np.flatnonzero(f["df"] >= 2))
        assert (f["docs_more"][:, 0] != ni.DOC_NONE).all()
        more_rows += len(f["docs_more_rows"])
    assert more_rows == multi and 0 < multi < len(truth) // 10
    keys = list(truth)[:3000]
    hit = idx.lookup(batch_ngram_hashes(keys, [13])[13][0], 13)
    assert hit.docs.dtype == np.int64 and (hit.docs == -1).any() and hit.docs.min() == -1
    assert hit.docs.tolist() == [(truth[k] + [-1] * P)[:P] for k in keys]


def _as_int64_docs(root, n, buckets):
    """Rewrite an index's provenance files with int64 ordinals (-1 = none), as built with
    ``doc_dtype=int64`` for corpora of 2**32 - 1 docs or more."""
    for b in range(buckets):
        for kind in ("docs", "docs_more"):
            p = ni.bucket_paths(root, n, b)[kind]
            d = np.load(p).astype(np.int64)
            d[d == ni.DOC_NONE] = -1
            np.save(p, d)
    if (root / "manifest.json").exists():
        reseal(root)  # rewritten on purpose: its manifest records the files as they are now


def test_int64_provenance_read(built, tmp_path):
    out, texts = built
    import shutil

    copy = tmp_path / "old"
    shutil.copytree(out, copy)
    _as_int64_docs(copy, 13, 16)
    h = batch_ngram_hashes(texts[:30], [13])[13][0]
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
    kw = dict(num_buckets=nb, provenance=2, dir_bits=4)
    for b in range(nb):
        nred.reduce_bucket(tmp_path / "full", 13, b, sources, **kw)
        nred.reduce_bucket(tmp_path / "old", 13, b, first, **kw)
    if old_int64:
        _as_int64_docs(tmp_path / "old", 13, nb)
    old = nred.OldIndex(str(tmp_path / "old"), (0,), (0,))
    for b in range(nb):
        nred.reduce_bucket(tmp_path / "app", 13, b, rest, old=old, chunk_pairs=700, **kw)
        for kind in ni.BUCKET_FILES:
            assert ni.bucket_paths(tmp_path / "app", 13, b)[kind].read_bytes() == \
                ni.bucket_paths(tmp_path / "full", 13, b)[kind].read_bytes()


def test_doc_ordinal_overflow_is_refused_or_int64():
    h = np.array([1, 2, 2], dtype=np.uint64)
    d = np.array([5, 7, ni.DOC_NONE], dtype=np.int64)
    w = np.ones(3, dtype=np.int64)
    with pytest.raises(TcqaError, match="uint32"):
        nmerge._merge(h, d, w, 2)
    h_u, df, docs = nmerge._merge(h, d, w, 2, np.dtype(np.int64))
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
    cur = nred._Cursor(NpyRowReader(tmp_path / "h.npy"), 100, 900, 37)
    got, pos = [], 100
    for bound in (int(h[0]), int(h[300]), int(h[301]), int(h[850]), None):
        a0, b0, hh = cur.take(bound)
        assert a0 == pos and np.array_equal(hh, h[a0:b0])
        assert bound is None or (hh < np.uint64(bound)).all()
        got.append(hh)
        pos = b0
    assert pos == 900 and np.array_equal(np.concatenate(got), h[100:900])


def _bucket_files(root, n, b):
    return {k: np.load(p) for k, p in ni.bucket_paths(root, n, b).items()}


def test_colliding_keys_are_one_entry(tmp_path):
    """Two corpus n-grams whose hashes differ only below the stored key bits are one entry: df
    is the sum of theirs, provenance the smallest P distinct docs (doc 3 holds both). An append
    of the second one onto an index of the first writes the same bytes."""
    nb, kw = 1, dict(num_buckets=1, provenance=2, dir_bits=0)  # key = top 32 bits
    x, y = np.uint64(0xABCD0123 << 32), np.uint64(0x12345678 << 32)
    h1 = np.array([x | np.uint64(5)] * 2 + [y], dtype=np.uint64)
    d1 = np.array([3, 7, 1])
    h2 = np.array([x | np.uint64(9)] * 2, dtype=np.uint64)
    d2 = np.array([3, 4])
    nruns.write_run(tmp_path / "a", 13, 0, h1, d1, nb)
    nruns.write_run(tmp_path / "b", 13, 0, h2, d2 - 2, nb)  # second input: docs 2.. (offset 2)
    both = [nred.RunSource(str(tmp_path / "a"), 0, 0), nred.RunSource(str(tmp_path / "b"), 0, 2)]
    st = nred.reduce_bucket(tmp_path / "full", 13, 0, both, **kw)
    f = _bucket_files(tmp_path / "full", 13, 0)
    assert st == (2, 2) and f["keys"].tolist() == [0x12345678, 0xABCD0123]
    assert f["df"].tolist() == [1, 4] and f["docs"].tolist() == [1, 3]
    assert f["docs_more_rows"].tolist() == [1] and f["docs_more"].tolist() == [[4]]
    nred.reduce_bucket(tmp_path / "old", 13, 0, both[:1], **kw)
    old = nred.OldIndex(str(tmp_path / "old"), (), ())
    nred.reduce_bucket(tmp_path / "app", 13, 0, both[1:], old=old, **kw)
    for kind in ni.BUCKET_FILES:
        assert ni.bucket_paths(tmp_path / "app", 13, 0)[kind].read_bytes() == \
            ni.bucket_paths(tmp_path / "full", 13, 0)[kind].read_bytes(), kind


def _shared_sentence_corpus(path, docs, start=0):
    """``docs`` lines that all hold one 20-word sentence, each also with words of its own."""
    common = ("the quick brown fox jumps over the lazy dog while seven tired sailors sing old songs "
              "about the sea")
    path.write_text("".join(json.dumps({"text": f"unique{start + i} words{start + i} here. {common}. "
                                                f"tail{start + i} end{start + i}"}) + "\n"
                            for i in range(docs)), encoding="utf-8")
    return common


def test_df_overflow_and_append(tmp_path):
    """df >= 255 goes to the overflow table (uint32); lookups give the true df, and an append
    that crosses 255 equals a full rebuild."""
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    common = _shared_sentence_corpus(a, 200)
    _shared_sentence_corpus(b, 100, start=200)
    kw = dict(workers=1, minhash=False, quiet=True, num_buckets=4, text_store="none")
    full = build_index([str(a), str(b)], tmp_path / "full", **kw)
    idx = ni.NgramIndex.open(tmp_path / "full")
    hit = idx.lookup(ngram_hashes(common, 13), 13)
    assert hit.found.all() and (hit.doc_freq == 300).all() and (hit.docs == [0, 1]).all()
    over = [_bucket_files(tmp_path / "full", 13, bk) for bk in range(4)]
    assert sum(len(f["df_over_rows"]) for f in over) == 8  # the sentence's 8 13-grams
    for f in over:
        assert (f["df"][f["df_over_rows"]] == ni.DF_OVERFLOW).all() and (f["df_over"] == 300).all()
        assert (f["df"] == ni.DF_OVERFLOW).sum() == len(f["df_over_rows"])
    build_index([str(a)], tmp_path / "app", **kw)
    app = build_index([str(a), str(b)], tmp_path / "app", append=True, **kw)
    assert app["ngram_storage"] == full["ngram_storage"] and app["counts"] == full["counts"]
    for p in sorted((tmp_path / "full" / "ngrams").rglob("*.npy")):
        assert p.read_bytes() == (tmp_path / "app" / p.relative_to(tmp_path / "full")).read_bytes(), p


def _write_v1(src_root, dst_root, texts, sizes, nb):
    """A format-1 index of ``texts`` (uint64 hashes, uint32 df, dense [k, P] provenance) with the
    manifest of ``src_root``, as tcqa-data wrote before format 2."""
    import shutil

    dst_root.mkdir()
    shutil.copy(src_root / "docs.parquet", dst_root / "docs.parquet")
    m = json.loads((src_root / "manifest.json").read_text())
    m["format_version"] = 1
    del m["ngram_storage"]
    for key in ("files", "manifest_xxh3"):  # format 1 predates sealed manifests
        m.pop(key, None)
    for n in sizes:
        for c in m["counts"]["ngrams"].values():
            for k in ("false_positive_rate", "max_cell_keys", "max_cell_false_positive_rate"):
                c.pop(k, None)
        h, d = batch_ngram_hashes(texts, [n])[n]
        hs, ds = nruns.sort_pairs(h, d)
        h_u, df, docs = nmerge._merge(hs, ds, np.ones(len(hs), np.int64), P)
        bk = ni.bucket_of(h_u, nb)
        for b in range(nb):
            p = ni.bucket_paths(dst_root, n, b, layout=1)
            p["hashes"].parent.mkdir(parents=True, exist_ok=True)
            for kind, arr in (("hashes", h_u), ("df", df), ("docs", docs)):
                np.save(p[kind], arr[bk == b])
    (dst_root / "manifest.json").write_text(json.dumps(m))


def test_format1_index_still_read_and_append_refused(built, wiki_slice, tmp_path):
    out, texts = built
    v1 = tmp_path / "v1"
    _write_v1(out, v1, texts, (8, 13), 16)
    old, new = ni.NgramIndex.open(v1), ni.NgramIndex.open(out)
    assert old.layout == 1 and new.layout == 2
    for n in (8, 13):
        h = batch_ngram_hashes(texts, [n])[n][0]
        h = np.concatenate([h, np.random.default_rng(n).integers(0, 2**63, 5000, dtype=np.uint64)])
        a, b = old.lookup(h, n), new.lookup(h, n)
        for x, y in zip(a, b, strict=True):
            assert x.dtype == y.dtype and np.array_equal(x, y)
        assert a.found.sum() == len(h) - 5000
    with pytest.raises(IndexMismatchError, match=r"format_version.*--overwrite"):
        build_index([str(wiki_slice)], v1, ngram_sizes=(8, 13), workers=1, minhash=False, quiet=True,
                    num_buckets=16, provenance=P, append=True)


def test_false_positive_rate_computed_and_measured(built, wiki_slice, tmp_path):
    """The manifest's false-positive rate (unique / 2**key_bits) is what random queries see:
    with 32-bit keys (1 bucket, no directory) it is large enough to count."""
    out, _ = built
    m = ni.NgramIndex.open(out).manifest
    for n in ("8", "13"):
        c = m["counts"]["ngrams"][n]
        assert c["false_positive_rate"] == c["unique"] / 2.0 ** m["ngram_storage"]["key_bits"]
        assert c["max_cell_false_positive_rate"] == c["max_cell_keys"] / 2.0 ** 32
        assert 0 < c["false_positive_rate"] < c["max_cell_false_positive_rate"] < 1e-7
    coarse = build_index([str(wiki_slice)], tmp_path / "coarse", workers=1, minhash=False, quiet=True,
                         num_buckets=1, ngram_dir_bits=0, text_store="none")
    assert coarse["ngram_storage"]["key_bits"] == 32
    c = coarse["counts"]["ngrams"]["13"]
    rate = c["false_positive_rate"]
    assert rate == c["unique"] / 2.0 ** 32 and c["max_cell_keys"] == c["unique"]
    queries = np.random.default_rng(0).integers(0, 2**64 - 1, 1_000_000, dtype=np.uint64)
    hits = int(ni.NgramIndex.open(tmp_path / "coarse").lookup(queries, 13).found.sum())
    expected = rate * len(queries)  # ~60; Poisson: 4 sigma is about 31
    assert 20 < expected < 200 and abs(hits - expected) < 4 * expected ** 0.5 + 1
    assert not ni.NgramIndex.open(out).lookup(queries, 13).found.any()  # rate ~1e-9 there


def test_reduce_one_provenance_doc_and_int64_docs(tmp_path):
    """P = 1 (no side table columns) and int64 ordinals hold the same entries as the default."""
    rng = np.random.default_rng(11)
    nb = 4
    sources = _random_runs(tmp_path, rng, nb)
    for b in range(nb):
        nred.reduce_bucket(tmp_path / "p2", 13, b, sources, num_buckets=nb, provenance=2, dir_bits=5)
        nred.reduce_bucket(tmp_path / "p1", 13, b, sources, num_buckets=nb, provenance=1, dir_bits=5,
                         chunk_pairs=900)
        nred.reduce_bucket(tmp_path / "i64", 13, b, sources, num_buckets=nb, provenance=2, dir_bits=5,
                         chunk_pairs=900, doc_dtype="int64")
        p2, p1, i64 = (_bucket_files(tmp_path / x, 13, b) for x in ("p2", "p1", "i64"))
        for kind in ("keys", "dir", "df", "df_over_rows", "df_over", "docs_more_rows"):
            assert np.array_equal(p2[kind], i64[kind])
        for kind in ("keys", "dir", "df", "docs"):
            assert np.array_equal(p2[kind], p1[kind])
        assert p1["docs_more"].shape == (len(p1["docs_more_rows"]), 0)
        assert i64["docs"].dtype == np.int64 and np.array_equal(i64["docs"], p2["docs"])
        assert np.array_equal(i64["docs_more"], p2["docs_more"].astype(np.int64))


_FD_SCRIPT = """
import resource, sys
import numpy as np
from tcqa_data.errors import TcqaError
from tcqa_data.io_utils import load_npy
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if sys.argv[2] == "both":
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
else:
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
maps = []
try:
    for _ in range(300):  # each memory map keeps a descriptor
        maps.append(load_npy(sys.argv[1]))
    print("ok", resource.getrlimit(resource.RLIMIT_NOFILE)[0])
except TcqaError as exc:
    print("error", exc)
"""


@pytest.mark.parametrize("lowered", ["soft", "both"])
def test_index_files_past_the_open_file_limit(tmp_path, lowered):
    """Queries map every index file they read, one open descriptor each (thousands for a large
    corpus of many files): ``load_npy`` raises the soft limit to the hard one, and where the hard
    limit itself is too low says which file and what to do instead of an OSError."""
    import subprocess
    import sys

    resource = pytest.importorskip("resource")
    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 400:
        pytest.skip("this machine's hard limit on open files is below 400")
    path = tmp_path / "a.npy"
    np.save(path, np.arange(10))
    out = subprocess.run([sys.executable, "-c", _FD_SCRIPT, str(path), lowered], capture_output=True,
                         text=True, check=True).stdout
    if lowered == "soft":
        assert out.startswith("ok") and int(out.split()[1]) > 300
    else:
        assert out.startswith("error") and str(path) in out and "ulimit -n" in out
