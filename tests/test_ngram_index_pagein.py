"""Query-side page-in (``decontam/core/pagein.py``): lookups return the same arrays whether or not their
pages were requested first."""

from __future__ import annotations

import mmap

import numpy as np
from packed_fixtures import packed_table

from tcqa_data.decontam.core import kernel, packed, pagein


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
    from tcqa_data.decontam.ngrams import index as ni

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


def test_page_in_advises_the_rows_bytes_of_the_file(tmp_path, monkeypatch):
    """A ``np.memmap`` whose data starts past the allocation granularity (the mapping starts at a
    file offset): the requests name the file bytes of the rows asked for (``posix_fadvise``, which
    releases the GIL), and the data reads back unchanged."""
    if not hasattr(pagein.os, "posix_fadvise"):
        return
    gran = mmap.ALLOCATIONGRANULARITY
    offset = 3 * gran + 40
    data = np.arange(3_000_000, dtype=np.uint32)
    path = tmp_path / "raw.bin"
    path.write_bytes(b"\0" * offset + data.tobytes())
    arr = np.memmap(path, dtype=np.uint32, mode="r", offset=offset, shape=(len(data),))
    assert pagein._mapped_file(arr) == (str(path), 3 * gran)
    assert pagein._mapped_file(arr[100:]) == (str(path), 3 * gran)  # slices keep the file's mapping
    assert pagein._mapped_file(data) is None
    advised: list[tuple[int, int]] = []
    real = pagein.os.posix_fadvise
    monkeypatch.setattr(pagein.os, "posix_fadvise",
                        lambda fd, start, length, advice: advised.append((start, start + length))
                        or real(fd, start, length, advice))
    first = np.array([0, 1_000_000, 2_999_000], dtype=np.int64)
    last = first + np.array([10, 500_000, 1000])
    assert pagein.page_in([(arr, first, last)]) > 0
    covered = pagein.spans(np.array([a for a, _ in advised]), np.array([b for _, b in advised]), gap=1)
    for a, b in zip(first, last, strict=True):  # each row range's bytes lie in one advised span
        lo, hi = offset + int(a) * 4, offset + int(b) * 4
        assert ((covered[0] <= lo) & (covered[1] >= hi)).any()
    assert covered[0][0] >= 3 * gran and covered[1][-1] <= path.stat().st_size + pagein.PAGE
    assert np.array_equal(np.asarray(arr[first]), data[first])


def test_page_in_behind_other_reads_paces_its_requests(tmp_path, monkeypatch):
    """Inside ``behind_other_reads`` a page-in requests from the calling thread, in file order, and
    waits for its oldest request once more than ``in_flight`` bytes are pending; outside, the
    thread's page-ins are as before. Lookups read the same data."""
    if not hasattr(pagein.os, "posix_fadvise"):
        return
    data = np.random.default_rng(4).integers(0, 2**63, 2_000_000, dtype=np.uint64)  # 16 MB
    np.save(tmp_path / "a.npy", data)
    arr = np.load(tmp_path / "a.npy", mmap_mode="r")
    rows = np.arange(0, len(data), 100_000, dtype=np.int64)  # 800 KB apart: a request each
    events: list[tuple[str, int, int]] = []
    real_advise, real_pread = pagein.os.posix_fadvise, pagein.os.pread
    monkeypatch.setattr(pagein.os, "posix_fadvise", lambda fd, start, length, advice: events.append(
        ("advise", start, pagein.threading.get_ident())) or real_advise(fd, start, length, advice))
    monkeypatch.setattr(pagein.os, "pread", lambda fd, n, at: events.append(
        ("wait", at, pagein.threading.get_ident())) or real_pread(fd, n, at))
    with pagein.behind_other_reads(in_flight=pagein.PAGE):
        assert pagein.page_in([(arr, rows, rows + 1)]) == len(rows)
    advised = [at for kind, at, _ in events if kind == "advise"]
    waits = [at for kind, at, _ in events if kind == "wait"]
    assert len(advised) == len(rows) and advised == sorted(advised)
    assert {t for _, _, t in events} == {pagein.threading.get_ident()}
    # a page pending at most (each request is one page): from the second request on, the oldest
    # is waited for (its last byte); the last one is left in flight
    assert [kind for kind, _, _ in events] == ["advise"] + ["advise", "wait"] * (len(rows) - 1)
    assert waits == [a + pagein.PAGE - 1 for a in advised[:-1]]
    events.clear()
    pagein.page_in([(arr, rows, rows + 1)])  # outside the block: no waits
    assert [kind for kind, _, _ in events] == ["advise"] * len(rows)
    assert np.array_equal(np.asarray(arr[rows]), data[rows])


def test_minhash_query_after_prefetch_pages_in_once(wiki_index, wiki_sample, monkeypatch):
    """``MinHashIndex.prefetch(sigs)`` then ``query(sigs)``: the band-table pages are requested once
    (the query's own request is skipped for the same signatures, not for others); same matches."""
    import json

    from tcqa_data.decontam.minhash import MinHashIndex, signatures
    from tcqa_data.decontam.minhash import query as mq

    lines = wiki_sample.read_text(encoding="utf-8").splitlines()
    texts = [json.loads(line)["text"][:600] for line in lines[:40:4]]
    mh = MinHashIndex.open(wiki_index)
    sigs = signatures(texts, mh.params)
    want = mh.query(sigs)
    calls = []
    real = mq.packed.page_in_lookups
    monkeypatch.setattr(mq.packed, "page_in_lookups", lambda *a: calls.append(1) or real(*a))
    fresh = MinHashIndex.open(wiki_index)
    fresh.prefetch(sigs)
    got = fresh.query(sigs)
    assert len(calls) == 1 and (got[1] >= 0).any()
    assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
    fresh.query(sigs[:3])  # other signatures: their pages requested
    assert len(calls) == 2
