"""Query-side page-in (``decontam/pagein.py``): lookups return the same arrays whether or not their
pages were requested first."""

from __future__ import annotations

import mmap

import numpy as np
from packed_fixtures import packed_table

from tcqa_data.decontam import kernel, packed, pagein


def test_page_offsets_cover_exactly_the_rows_pages(tmp_path):
    data = np.arange(100_000, dtype=np.uint32)
    np.save(tmp_path / "a.npy", data)
    arr = np.load(tmp_path / "a.npy", mmap_mode="r")
    first = np.array([0, 5, 5000, 5001, 99_990, 70_000], dtype=np.int64)
    last = np.array([1, 2000, 5002, 5001, 100_000, 69_000], dtype=np.int64)  # two empty ranges
    s, e = pagein.page_ranges(arr, first, last)
    assert (s[1:] > e[:-1]).all()  # sorted, disjoint, not touching
    addr = arr.ctypes.data
    want = {(addr + byte) // pagein.PAGE
            for a, b in zip(first, last, strict=True) for byte in range(a * 4, b * 4)}
    assert sorted(want) == _pages(s, e).tolist()
    assert len(pagein.page_ranges(arr, np.array([3]), np.array([3]))[0]) == 0
    pages = np.array([1, 2, 3, 10, 80, 81], dtype=np.int64)
    s, e = pagein.spans(pages, pages + 1, gap=7)  # 7 joins, 70 not
    assert s.tolist() == [1, 80] and e.tolist() == [11, 82]
    s, e = pagein.spans(np.array([50, 10, 12, 11]), np.array([60, 40, 13, 12]), gap=1)  # nested, unsorted
    assert s.tolist() == [10, 50] and e.tolist() == [40, 60]


def _pages(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    return np.concatenate([np.arange(a, b) for a, b in zip(s, e, strict=True)]) if len(s) else s


def test_page_in_requests_pages_and_changes_nothing(tmp_path):
    data = np.random.default_rng(0).integers(0, 2**63, 2_000_000, dtype=np.uint64)
    np.save(tmp_path / "a.npy", data)
    arr = np.load(tmp_path / "a.npy", mmap_mode="r")
    rows = np.arange(0, len(data), 3000, dtype=np.int64)
    parts = [(arr, rows, rows + 1), (arr[10:], rows[:5], rows[:5] + 900)]
    got = pagein.page_in([*parts, (data, rows, rows + 1)])  # an array in memory is skipped
    want = np.unique(np.concatenate([_pages(*pagein.page_ranges(a, f, t)) for a, f, t in parts]))
    assert got == len(want) > 0
    assert np.array_equal(np.asarray(arr[rows]), data[rows])
    assert np.array_equal(np.asarray(arr[10:][rows[:5] + 899]), data[rows[:5] + 909])
    assert isinstance(arr._mmap, mmap.mmap)
    assert pagein.page_in([]) == 0


def test_packed_lookup_same_after_page_in(tmp_path, monkeypatch):
    """``packed.page_in_lookups`` before lookups (MinHash band tables): the same (query, id) arrays,
    kernel and numpy, with repeats, absent keys, caps and a cell holding most entries."""
    rng = np.random.default_rng(2)
    for n, key_range, id_bits in ((0, 2**32, 1), (9, 2**32, 3), (30_000, 2**32, 21), (30_000, 2**8, 12),
                                  (3000, 2**32, 32 + packed.dir_bits_for(3000))):
        keys, ids, c, w, dir_bits = packed_table(tmp_path, rng, n, key_range, id_bits)
        queries = np.r_[keys[::3], keys[:50], rng.integers(0, key_range, 800, dtype=np.uint64)]
        rng.shuffle(queries)
        for cap in (None, 1, 3):
            for mode in ("numba", "numpy"):
                monkeypatch.setenv(kernel.ENV, mode)
                before = packed.lookup(c, w, queries, dir_bits, id_bits, cap)
                packed.page_in_lookups([(c, w), (c, w)], [queries, queries[:7]], dir_bits, id_bits)
                after = packed.lookup(c, w, queries, dir_bits, id_bits, cap)
                assert all(np.array_equal(x, y) for x, y in zip(before, after, strict=True))
            for j in range(0, len(queries), 97):
                assert np.array_equal(after[1][after[0] == j], ids[keys == queries[j]][:cap])


def test_ngram_lookup_same_with_and_without_page_in(wiki_index, monkeypatch):
    """NgramIndex.lookup reads its pages first (every bucket's at once) or not: the same result."""
    from tcqa_data.decontam import ngram_index as ni

    idx = ni.NgramIndex.open(wiki_index)
    n = idx.ngram_sizes[0]
    stored, _ = idx.all_keys(n)
    rng = np.random.default_rng(3)
    bits = idx.manifest["ngram_storage"]["key_bits"]
    # stored keys back as hashes (low bits random: they are not stored), plus random absent hashes
    present = (stored[rng.integers(0, len(stored), 5000)] << np.uint64(64 - bits)) \
        | rng.integers(0, 2 ** (64 - bits), 5000, dtype=np.uint64)
    q = np.r_[present, rng.integers(0, 2**64 - 1, 5000, dtype=np.uint64, endpoint=True)]
    calls = []
    real = pagein.page_in
    monkeypatch.setattr(ni, "page_in", lambda parts: calls.append(real(parts)) or calls[-1])
    a = ni.NgramIndex.open(wiki_index).lookup(q, n)
    assert sum(calls) > 0
    monkeypatch.setattr(ni, "page_in", lambda parts: 0)
    b = ni.NgramIndex.open(wiki_index).lookup(q, n)
    assert a.found[:5000].all() and a.found[5000:].sum() <= 1
    for x, y in zip(a, b, strict=True):
        assert np.array_equal(x, y)
