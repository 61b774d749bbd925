"""The numba kernels and the numpy fallback compute the same n-gram hashes and write the same
index bytes, on real wiki text (and on edge cases the hash scheme treats specially)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from packed_fixtures import packed_table

from tcqa_data.decontam.core import hashing, kernel
from tcqa_data.decontam.ngrams import index as ni
from tcqa_data.decontam.ngrams import merge as nmerge
from tcqa_data.decontam.ngrams import runs as nruns
from tcqa_data.errors import ConfigError

pytest.importorskip("numba")

EDGE = [
    "", "   ", "a", "one two", "x" * 65 + " after a 65-byte token", "y" * 200 + " " + "z" * 64,
    "Ünïcode\u00a0no-break\u3000ideographic\u2028line sep\u0085next", "lone \ud83d surrogate",
    "Punctuation!!! only ... words; (here) -- and [there].", "tab\tsep\nnew\x1cline\x1f",
]


def _texts(wiki_sample: Path, k: int = 120) -> list[str]:
    out = []
    with open(wiki_sample, encoding="utf-8") as fh:
        for line in fh:
            out.append(json.loads(line)["text"])
            if len(out) == k:
                break
    return out + EDGE


def _both(monkeypatch, fn):
    monkeypatch.setenv(kernel.ENV, "numba")
    assert kernel.enabled()
    a = fn()
    monkeypatch.setenv(kernel.ENV, "numpy")
    assert not kernel.enabled()
    b = fn()
    return a, b


def test_kernel_hashes_equal_numpy_hashes(wiki_sample, monkeypatch):
    texts = _texts(wiki_sample)
    a, b = _both(monkeypatch, lambda: hashing.batch_ngram_hashes(texts, [1, 2, 5, 13], seed=3))
    for n in (1, 2, 5, 13):
        assert len(a[n][0]) > 1000
        assert np.array_equal(a[n][0], b[n][0]) and np.array_equal(a[n][1], b[n][1])
    # the long-token path (xxh3) and non-ASCII whitespace were exercised
    assert any(len(t) > 64 for s in EDGE for t in s.split())



def test_present_hashes_are_the_filtered_hashes(wiki_sample, monkeypatch):
    """The stream pass's fused kernel keeps exactly the n-grams whose top bits pass the filter, in
    the order (and with the docs) of the numpy fallback's full hashes."""
    texts = _texts(wiki_sample)
    parts = [hashing.encode_normalized(t) for t in texts]
    data = np.frombuffer(b" " + b" ".join(parts) + b" " * 9, dtype=np.uint8).copy()
    if not bytes(data).isascii():
        hashing._blank_unicode_whitespace(data)
    starts = np.cumsum([1] + [len(p) + 1 for p in parts])
    monkeypatch.setenv(kernel.ENV, "numpy")
    full = hashing.hash_normalized(data, starts, [5, 13], seed=3)
    monkeypatch.setenv(kernel.ENV, "numba")
    rng = np.random.default_rng(1)
    shift, mask = 64 - 16, (1 << 16) - 1
    bits = {n: [np.packbits(rng.random(1 << 16) < 0.3, bitorder="little") for _ in range(2)] for n in (5, 13)}
    filters = {n: (hi, shift, lo, mask) for n, (hi, lo) in bits.items()}
    got = hashing.hash_normalized_present(data, starts, 3, filters)
    for n in (5, 13):
        h, d = full[n]
        hi, lo = bits[n]
        v = (h >> np.uint64(shift)).astype(np.int64)
        w = (h & np.uint64(mask)).astype(np.int64)
        keep = ((hi[v >> 3] >> (v & 7)) & 1 == 1) & ((lo[w >> 3] >> (w & 7)) & 1 == 1)
        assert 0 < keep.sum() < len(h)
        assert np.array_equal(got[n][0], h[keep]) and np.array_equal(got[n][1], d[keep])

def test_kernel_sort_and_merge_equal_numpy(monkeypatch):
    rng = np.random.default_rng(0)
    h = rng.integers(0, 2**63, 200_000, dtype=np.uint64) * np.uint64(2)
    h[::5] = h[:40_000]  # many repeated hashes, from different docs
    d = np.sort(rng.integers(0, 5000, len(h)))
    a, b = _both(monkeypatch, lambda: nruns.sort_pairs(h, d))
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    hs, ds = a
    assert np.all((hs[1:] > hs[:-1]) | ((hs[1:] == hs[:-1]) & (ds[1:] > ds[:-1])))
    # a merge of two sorted runs whose docs interleave (append with new inputs sorting first)
    w = rng.integers(1, 4, len(hs))
    cut = len(hs) // 2
    hh = np.concatenate([hs[cut:], hs[:cut]])
    dd = np.concatenate([ds[cut:], ds[:cut]])
    ww = np.concatenate([w[cut:], w[:cut]])
    for dtype in (ni.DOC_DTYPE, np.dtype(np.int64)):
        m1, m2 = _both(monkeypatch, lambda dt=dtype: nmerge._merge(hh, dd, ww, 3, dt))
        assert all(np.array_equal(x, y) for x, y in zip(m1, m2, strict=True))


def test_index_files_identical_with_kernel_and_fallback(wiki_sample, tmp_path, monkeypatch):
    """Several runs per shard, chunked merges and an append: every file equal byte for byte."""
    from tcqa_data.decontam.build import build_index

    texts = _texts(wiki_sample, 160)
    parts = []
    for i, chunk in enumerate((texts[:100], texts[100:])):
        p = tmp_path / f"part{i}.jsonl"
        p.write_text("".join(json.dumps({"text": t}) + "\n" for t in chunk), encoding="utf-8")
        parts.append(str(p))
    roots = {}
    for mode in ("numba", "numpy"):
        monkeypatch.setenv(kernel.ENV, mode)
        root = tmp_path / mode
        kw = dict(ngram_sizes=(8, 13), workers=1, minhash=False, quiet=True, run_pairs=20_000,
                  chunk_pairs=5_000, num_buckets=8)
        build_index(parts[:1], root, **kw)
        build_index(parts, root, append=True, **kw)
        roots[mode] = root
    files = sorted(p.relative_to(roots["numba"]) for p in (roots["numba"] / "ngrams").rglob("*.npy"))
    assert len(files) == 2 * 8 * len(ni.BUCKET_FILES)
    for f in files:
        assert (roots["numba"] / f).read_bytes() == (roots["numpy"] / f).read_bytes(), f


def test_env_var_selects_the_path(monkeypatch):
    monkeypatch.setenv(kernel.ENV, "numpy")
    assert kernel.name() == "numpy"
    monkeypatch.setenv(kernel.ENV, "auto")
    assert kernel.name() == "numba"
    monkeypatch.setenv(kernel.ENV, "fortran")
    with pytest.raises(ConfigError, match="TCQA_KERNEL"):
        kernel.enabled()


def test_minhash_kernel_signatures_equal_numpy_and_datasketch(wiki_sample, monkeypatch):
    from tcqa_data.decontam.minhash import MinHashParams, datasketch_signatures, sign, split_windows

    for params in (MinHashParams(), MinHashParams(num_perm=64, shingle_words=3)):
        windows = [w for t in _texts(wiki_sample, 15) for w in split_windows(t, params)] + EDGE
        (s1, c1), (s2, c2) = _both(monkeypatch, lambda p=params, w=windows: sign(w, p))
        assert len(windows) > 500
        assert np.array_equal(s1, s2) and np.array_equal(c1, c2)
        assert np.array_equal(s1[-len(EDGE):], datasketch_signatures(EDGE, params))
        assert (c1 == 0).sum() == 2  # "" and "   " have no shingles


def test_window_band_keys_equal_band_keys_of_signatures(wiki_sample, monkeypatch):
    """The fused kernel (``verify="text"`` maps: no signatures kept) gives the band keys of the
    windows' signatures, windows without tokens and double spaces included."""
    from tcqa_data.decontam.minhash import MinHashParams, sketch
    from tcqa_data.decontam.minhash.feed import codepoint_windows
    from tcqa_data.decontam.minhash.windows import texts_codepoints

    monkeypatch.setenv(kernel.ENV, "numba")
    k = kernel.kernels()
    for params in (MinHashParams(verify="text"), MinHashParams(num_perm=64, shingle_words=3, verify="text")):
        _, data, _, ws, we = codepoint_windows(*texts_codepoints(_texts(wiki_sample, 15)), params)
        extra = np.frombuffer(b"one  two three   ", dtype=np.uint8)  # double spaces, trailing ones
        data = np.concatenate([data, extra])
        n = len(data) - len(extra)
        ws = np.concatenate([ws, [n, n + 3, n + 14, n, n + 1]])
        we = np.concatenate([we, [n + 17, n + 3, n + 17, n + 9, n + 8]])
        sigs, counts = sketch.sign_normalized(data, ws, we, params)
        keys, counts2 = sketch.band_keys_normalized(data, ws, we, params)
        assert len(ws) > 500 and (counts == 0).sum() == 2
        assert np.array_equal(counts, counts2)
        assert np.array_equal(keys, k["band_keys32"](sigs, params.bands, params.rows))
        assert np.array_equal(keys, sketch.stored_band_keys(sketch.band_keys(sigs, params)).T)


def test_compiled_jsonl_reader_writes_the_same_index(wiki_sample, tmp_path, monkeypatch):
    """The n-gram build reads JSONL with the compiled reader when the kernels are on: the whole
    index (docs table, manifest counts and skip statistics included) equals the Python reader's."""
    import gzip

    from tcqa_data.decontam.build import build_index
    from tcqa_data.decontam.build import map as build_map

    texts = _texts(wiki_sample, 30)
    lines = [json.dumps({"text": t}, ensure_ascii=k % 2 == 0 or k >= 30).encode()
             for k, t in enumerate(texts)]
    lines[3:3] = [b"", b'{"text": 7}', b'{"text": "a \\ud83d\\ude00 \\u00a0 b"}', b"{bad",
                  b'{"text": " \\n "}', b'{"text": "x", "text": "dup key wins last"}',
                  b'{"meta": {"text": "inner"}, "text": "outer"}']
    raw = b"\n".join(lines) + b"\n"
    paths = [tmp_path / "a.jsonl", tmp_path / "b.jsonl.gz"]
    paths[0].write_bytes(raw)
    paths[1].write_bytes(gzip.compress(raw))
    kw = dict(ngram_sizes=(5, 13), workers=1, minhash=False, quiet=True, on_error="skip",
              run_pairs=30_000, batch_chars=50_000, shard_bytes=100_000, text_store="none")
    used = []
    real = build_map.iter_normalized_batches
    monkeypatch.setattr(build_map, "iter_normalized_batches", lambda *a: used.append(1) or real(*a))
    roots = {}
    for mode in ("numba", "numpy"):
        monkeypatch.setenv(kernel.ENV, mode)
        roots[mode] = tmp_path / mode
        used.clear()
        build_index([str(p) for p in paths], roots[mode], **kw)
        assert (len(used) > 2) == (mode == "numba")  # several shards of a.jsonl, and b.jsonl.gz
    files = sorted(p.relative_to(roots["numba"]) for p in roots["numba"].rglob("*") if p.is_file())
    assert Path("docs.parquet") in files and len(files) > 10
    for f in files:
        a, b = (roots["numba"] / f).read_bytes(), (roots["numpy"] / f).read_bytes()
        if f.name == ni.MANIFEST:
            a, b = (json.loads(x) for x in (a, b))
            a.pop("build"), b.pop("build")
            a.pop("manifest_xxh3"), b.pop("manifest_xxh3")  # it covers the build times too
            counts = {"blank_line": 1, "empty_text": 3, "invalid_json": 1, "non_string_text": 1}
            assert a["inputs"][0]["skipped"]["counts"] == counts
        assert a == b, f


def test_kernel_packed_lookup_equals_numpy(monkeypatch, tmp_path):
    """``packed.lookup`` (anchor and MinHash band tables): the kernel's (query, id) arrays equal the
    numpy binary search's, on memory-mapped tables, with and without a per-key cap, for keys
    that are present, absent, repeated and unsorted, and for a cell holding most entries."""
    from tcqa_data.decontam.core import packed

    rng = np.random.default_rng(1)
    for n, key_range, id_bits in ((0, 2**32, 1), (7, 2**32, 3), (20_000, 2**32, 21), (20_000, 2**10, 9),
                                  (3000, 2**32, 32 + packed.dir_bits_for(3000))):  # 64-bit entries
        keys, ids, c, w, dir_bits = packed_table(tmp_path, rng, n, key_range, id_bits)
        queries = np.r_[keys[::3], keys[:50], rng.integers(0, key_range, 500, dtype=np.uint64)]
        rng.shuffle(queries)
        for cap in (None, 1, 3):
            a, b = _both(monkeypatch, lambda: packed.lookup(c, w, queries, dir_bits, id_bits, cap))  # noqa: B023
            for x, y in zip(a, b, strict=True):
                assert x.dtype == y.dtype == np.int64 and np.array_equal(x, y)
            if n:
                assert len(a[0]) >= len(keys[::3]) and len(a[0]) > 0
            for j in range(0, len(queries), 97):
                assert np.array_equal(a[1][a[0] == j], ids[keys == queries[j]][:cap])


def test_table_lookup_kernel_equals_binary_search(wiki_sample, monkeypatch):
    """The stream table's hash-slot lookup finds what the presence filter and binary search find:
    every query n-gram, no corpus n-gram the queries lack."""
    from tcqa_data.decontam.stream.table import BenchmarkTable, StreamConfig

    texts = _texts(wiki_sample, 60)
    table = BenchmarkTable(texts[:30], StreamConfig(ngram_sizes=(5,)))
    probe = np.concatenate([hashing.batch_ngram_hashes(texts, [5])[5][0], np.arange(1000, dtype=np.uint64)])
    monkeypatch.setenv(kernel.ENV, "numba")
    rows_k, found_k = table.lookup(probe, 5)
    monkeypatch.setenv(kernel.ENV, "numpy")
    rows_n, found_n = table.lookup(probe, 5)
    assert np.array_equal(found_k, found_n) and 0 < found_k.sum() < len(probe)
    assert np.array_equal(rows_k[found_k], rows_n[found_n])
    assert np.array_equal(table.keys[5][rows_k[found_k]], probe[found_k])
    assert rows_k.min() >= 0 and rows_k.max() < len(table.keys[5])
