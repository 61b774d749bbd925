"""The n-gram build's compiled paths (run sort, reduce merge and columns, one-pass token hashes,
run buffers) against the numpy fallback: same arrays, same bytes."""

from __future__ import annotations

import numpy as np
import pytest

from tcqa_data.decontam.core import hashing, kernel
from tcqa_data.decontam.ngrams import index as ni
from tcqa_data.decontam.ngrams import reduce as nred
from tcqa_data.decontam.ngrams import runs as nruns
from tcqa_data.io_utils import write_npy_atomic

pytest.importorskip("numba")


def _k():
    return kernel.kernels()


@pytest.mark.parametrize("n", [0, 1, 2, 9, 40, 3000, 70_000])
def test_msd_sort_is_a_stable_sort_by_shifted_key(n):
    rng = np.random.default_rng(n)
    keysets = [
        rng.integers(0, 2**64 - 1, n, dtype=np.uint64),  # random: the build's case
        rng.integers(0, 50, n).astype(np.uint64) << np.uint64(58),  # few values, top bits only
        rng.integers(0, 3000, n).astype(np.uint64) * np.uint64(6148914691236517),
        np.full(n, 7, dtype=np.uint64),
        rng.integers(0, 2**12, n, dtype=np.uint64),
        np.sort(rng.integers(0, 2**64 - 1, n, dtype=np.uint64)),  # concatenated sorted runs
    ]
    keysets[-1] = np.concatenate([np.sort(x) for x in np.array_split(keysets[-1][::-1].copy(), 5)])
    d = rng.integers(0, 100, n)
    for h in keysets:
        for lo in (0, 3, 20, 40):
            k, p = h.copy(), d.copy()
            _k()["msd_sort"](k, p, np.empty_like(k), np.empty_like(p), lo)
            order = np.argsort(h >> np.uint64(lo), kind="stable")
            assert np.array_equal(k, h[order]) and np.array_equal(p, d[order])


def test_token_hashes_one_pass_equals_the_numpy_path():
    texts = ["x" * 64 + " " + "y" * 65 + " " + "z" * 8 + " " + "w" * 16 + " a bb ccc", "", "   ",
             "one two three four five six seven eight nine ten eleven twelve thirteen fourteen",
             "Ünïcode\u00a0no-break " + "long" * 40]
    rng = np.random.default_rng(5)
    words = ["".join(rng.choice(list("abcdefgh"), size=int(s))) for s in rng.integers(1, 30, 3000)]
    texts.append(" ".join(words))
    parts = [hashing.encode_normalized(t) for t in texts]
    data = bytearray(b" ") + b" ".join(parts) + b"         "
    arr = np.frombuffer(data, dtype=np.uint8).copy()
    hashing._blank_unicode_whitespace(arr)
    lens = np.array([len(p) for p in parts])
    doc_start = np.concatenate([[1], 1 + np.cumsum(lens + 1)])
    salt = hashing._salts(3)[0]
    # the numpy path's tokens and hashes (every token; the kernel leaves those over 64 bytes,
    # which the numpy path hashes with xxh3, to its caller)
    edge = np.diff((arr != 32).view(np.int8))
    starts, ends = np.flatnonzero(edge == 1) + 1, np.flatnonzero(edge == -1) + 1
    tok = hashing._token_hashes(arr, starts, ends, salt)
    huge = np.flatnonzero(ends - starts > 64)
    words8 = np.ndarray((len(arr) - 7,), dtype="<u8", buffer=arr, offset=0, strides=(1,))
    buf = np.empty(len(arr) // 2 + 1, np.uint64)
    hb = np.empty((len(arr) // 65 + 1, 3), np.int64)
    ntok, doc_tok, nhuge = _k()["token_hashes_1p"](arr, words8, doc_start[:-1], salt, 64, buf, hb)
    assert nhuge == len(huge) > 0 and ntok == len(tok)
    small = np.ones(ntok, dtype=bool)
    small[huge] = False
    assert np.array_equal(buf[:ntok][small], tok[small])
    assert np.array_equal(doc_tok, np.searchsorted(starts, doc_start[:-1]))
    assert np.array_equal(hb[:nhuge, 0], huge) and np.array_equal(hb[:nhuge, 1], starts[huge])
    assert np.array_equal(hb[:nhuge, 2], ends[huge])


def _runs(tmp_path, rng, nb, colliding):
    """Runs of three inputs; ``colliding``: few distinct keys, hashes that share stored keys, and
    n-grams in hundreds of docs (df overflow)."""
    sources, offset = [], 0
    for s in range(3):
        run_dir = tmp_path / f"in{s}"
        for r in range(2):
            k = 6000
            if colliding:
                top = rng.integers(0, 40, k).astype(np.uint64) << np.uint64(50)
                h = top | rng.integers(0, 4, k).astype(np.uint64)
            else:
                h = rng.integers(0, 2**64 - 1, k, dtype=np.uint64)
            d = np.sort(rng.integers(r * 300, r * 300 + 300, k))
            nruns.write_run(run_dir, 13, r, h, d, nb)
            sources.append(nred.RunSource(str(run_dir), r, offset))
        offset += 600
    return sources


@pytest.mark.parametrize("colliding", [False, True])
def test_reduce_compiled_equals_numpy(tmp_path, monkeypatch, colliding):
    """The kernels' reduce (one sort by key, merge, columns) writes the numpy path's bytes, with
    colliding keys, df overflow, P = 1 and 3, both doc widths and chunked merges."""
    rng = np.random.default_rng(2)
    nb = 2
    sources = _runs(tmp_path / "runs", rng, nb, colliding)
    for p, dtype, chunk in ((3, "uint32", 1_000_000), (1, "int64", 2000), (3, "uint32", 700)):
        roots = {}
        for mode in ("numba", "numpy"):
            monkeypatch.setenv(kernel.ENV, mode)
            roots[mode] = tmp_path / f"{mode}-{p}-{dtype}-{chunk}"
            for b in range(nb):
                nred.reduce_bucket(roots[mode], 13, b, sources, num_buckets=nb, provenance=p, dir_bits=4,
                                   chunk_pairs=chunk, doc_dtype=dtype)
        for b in range(nb):
            for kind in ni.BUCKET_FILES:
                a = ni.bucket_paths(roots["numba"], 13, b)[kind].read_bytes()
                assert a == ni.bucket_paths(roots["numpy"], 13, b)[kind].read_bytes(), (b, kind)
        if colliding:
            assert len(np.load(ni.bucket_paths(roots["numba"], 13, 0)["df_over"])) > 0


def test_run_docs_relative_and_runs_of_the_earlier_layout_read(tmp_path, monkeypatch):
    """Runs are partitioned into cells (stably: each cell keeps its docs in order) and store docs
    relative to their first doc (uint16 when the span fits; packed into the hash words under
    2**cell_bits docs); runs written in the earlier layouts
    (sorted and deduplicated, with bucket offsets: absolute uint32 docs and no base, or a base)
    reduce to the same bytes."""
    rng = np.random.default_rng(4)
    nb = 2
    h = rng.integers(0, 2**64 - 1, 5000, dtype=np.uint64)
    h[100:200] = h[:100]  # repeated pairs and repeated hashes in other docs
    d = np.sort(rng.integers(100_000, 100_900, 5000))
    bits = nruns.cell_bits(nb)
    order = np.argsort(h >> np.uint64(64 - bits), kind="stable")
    # a run spanning 2**bits docs or more stores its docs; a smaller span packs them
    d_wide = d.copy()
    d_wide[-1] = d[0] + (1 << bits)
    nruns.write_run(tmp_path / "wide", 13, 0, h, d_wide, nb)
    p = nruns.run_paths(tmp_path / "wide", 13, 0)
    off, hs_run, ds_run = np.load(p["offsets"]), np.load(p["hashes"]), np.load(p["docs"])
    assert bits == nruns.MIN_CELL_BITS and len(off) == (1 << bits) + 3 and off[-1] == bits
    assert ds_run.dtype == np.uint16 and off[-2] == int(d.min()) and off[1 << bits] == len(h) == len(hs_run)
    cell = hs_run >> np.uint64(64 - bits)
    assert np.array_equal(np.searchsorted(cell, np.arange((1 << bits) + 1)), off[:-2])
    assert np.array_equal(hs_run, h[order])
    assert np.array_equal(ds_run.astype(np.int64) + int(d.min()), d_wide[order])
    nruns.write_run(tmp_path / "new", 13, 0, h, d, nb)
    p = nruns.run_paths(tmp_path / "new", 13, 0)
    off2, words, ds_run = np.load(p["offsets"]), np.load(p["hashes"]), np.load(p["docs"])
    assert off2[-1] == -bits and off2[-2] == int(d.min()) and np.array_equal(off2[:-2], off[:-2])
    assert len(ds_run) == 0 and words.dtype == np.uint64
    assert np.array_equal(words >> np.uint64(bits), h[order] & np.uint64((1 << (64 - bits)) - 1))
    assert np.array_equal((words & np.uint64((1 << bits) - 1)).astype(np.int64) + int(d.min()), d[order])
    hs, ds = nruns.sort_pairs(h, d)
    bucket_off = np.append(np.searchsorted(hs, np.array([0, 1 << 63], dtype=np.uint64)), len(hs))
    for layout, docs, offsets in (("old", ds.astype(np.uint32), bucket_off),
                                  ("based", (ds - 99_000).astype(np.uint32), np.append(bucket_off, 99_000))):
        q = nruns.run_paths(tmp_path / layout, 13, 0)
        write_npy_atomic(q["hashes"], hs)
        write_npy_atomic(q["docs"], docs)
        write_npy_atomic(q["offsets"], offsets.astype(np.int64))
    q = nruns.run_paths(tmp_path / "unpacked", 13, 0)  # the same pairs, docs not packed
    write_npy_atomic(q["hashes"], h[order])
    write_npy_atomic(q["docs"], (d[order] - d.min()).astype(np.uint16))
    write_npy_atomic(q["offsets"], np.append(off2[:-1], bits))
    layouts = {"new": "numba", "new-numpy": "numpy", "unpacked": "numba", "old": "numba", "based": "numba"}
    for b in range(nb):
        for name, mode in layouts.items():
            monkeypatch.setenv(kernel.ENV, mode)
            src = [nred.RunSource(str(tmp_path / name.removesuffix("-numpy")), 0, 7)]
            nred.reduce_bucket(tmp_path / f"idx-{name}", 13, b, src, num_buckets=nb, dir_bits=3,
                               chunk_pairs=400)
        for kind in ni.BUCKET_FILES:
            want = ni.bucket_paths(tmp_path / "idx-new", 13, b)[kind].read_bytes()
            for layout in ("new-numpy", "unpacked", "old", "based"):
                assert ni.bucket_paths(tmp_path / f"idx-{layout}", 13, b)[kind].read_bytes() == want, kind
    docs = np.load(ni.bucket_paths(tmp_path / "idx-new", 13, 0)["docs"])
    assert docs.min() >= 100_007


def test_run_writer_buffers_write_the_lists_runs(tmp_path, monkeypatch, wiki_sample):
    """The compiled map (batches hashed straight into one buffer per n, partitioned into one
    kept buffer) spills the same runs as the numpy path, mixing normalized batches and text
    batches."""
    import json

    texts = []
    with open(wiki_sample, encoding="utf-8") as fh:
        for line in fh:
            texts.append(json.loads(line)["text"])
            if len(texts) == 60:
                break
    out = {}
    for mode in ("numba", "numpy"):
        monkeypatch.setenv(kernel.ENV, mode)
        w = nruns.RunWriter(str(tmp_path / mode), (5, 13), run_pairs=15_000)
        for i in range(0, 60, 10):
            if i % 20:
                w.add_batch(texts[i:i + 10])
            else:
                parts = [hashing.encode_normalized(t) for t in texts[i:i + 10]]
                data = bytearray(b" ") + b" ".join(parts) + b"         "
                arr = np.frombuffer(data, dtype=np.uint8).copy()
                hashing._blank_unicode_whitespace(arr)
                lens = np.array([len(x) for x in parts])
                w.add_normalized(arr, np.concatenate([[1], 1 + np.cumsum(lens + 1)]))
        out[mode] = w.close()
    assert out["numba"] == out["numpy"] and out["numba"]["runs"]["13"] > 2
    for n in (5, 13):
        for r in range(out["numba"]["runs"][str(n)]):
            for kind, a in nruns.run_paths(tmp_path / "numba", n, r).items():
                assert a.read_bytes() == nruns.run_paths(tmp_path / "numpy", n, r)[kind].read_bytes(), (n, r)


def test_kernels_load_without_scipy_linalg():
    """``kernel.kernels()`` sets numba up without the scipy.linalg import numba's BLAS probe
    makes (~0.3 CPU-s per build process); the kernels still run, and scipy.linalg still imports."""
    import subprocess
    import sys

    pytest.importorskip("scipy")
    code = ("import sys, numpy as np; from tcqa_data.decontam.core import kernel; k = kernel.kernels(); "
            "h, d = k['dedupe_pairs'](np.array([1, 1, 2], np.uint64), np.array([0, 0, 0], np.int64)); "
            "assert h.tolist() == [1, 2], h; assert 'scipy.linalg' not in sys.modules; "
            "import scipy.linalg.cython_blas; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


def _decode_bucket(root, n, bucket, dir_bits):
    """A format-2 bucket as {stored key: (df, provenance docs)} (test decoder)."""
    p = ni.bucket_paths(root, n, bucket)
    keys = np.load(p["keys"]).astype(np.uint64)
    cells = np.repeat(np.arange(2 ** dir_bits, dtype=np.uint64), np.diff(np.load(p["dir"]).astype(np.int64)))
    full = (np.uint64(bucket) << np.uint64(dir_bits + 32)) | (cells << np.uint64(32)) | keys
    df = np.load(p["df"]).astype(np.int64)
    df[np.load(p["df_over_rows"]).astype(np.int64)] = np.load(p["df_over"])
    docs = [[int(x)] for x in np.load(p["docs"])]
    more = np.load(p["docs_more"])
    for r, row in zip(np.load(p["docs_more_rows"]).tolist(), more.tolist(), strict=True):
        docs[r] += [x for x in row if x != ni.DOC_NONE]
    return {int(k): (int(f), d) for k, f, d in zip(full.tolist(), df.tolist(), docs, strict=True)}


@pytest.mark.parametrize(("mode", "keep"), [("numba", True), ("numpy", True), ("numba", False)])
def test_reduce_counts_distinct_pairs_of_partitioned_runs(tmp_path, monkeypatch, mode, keep):
    """Runs are not deduplicated: the reduce makes a key's df its number of distinct (hash, doc)
    pairs (a doc repeating an n-gram counts once; two n-grams of one doc that share a stored key
    count twice) and its provenance the smallest distinct docs, with the kernels and the numpy
    fallback, one or many chunks, one level or two, and docs in or out of order in a run.
    ``keep``: runs' bucket offsets kept by the worker's cache, or read per bucket (as with more
    than _KEEP_BUCKETS buckets)."""
    monkeypatch.setenv(kernel.ENV, mode)
    if not keep:
        monkeypatch.setattr(nred, "_KEEP_BUCKETS", 0)
    rng = np.random.default_rng(9)
    nb, dir_bits, prov = 2, 0, 3
    key_shift = 64 - ni.key_bits(nb, dir_bits)  # stored key = h >> 32
    top = rng.integers(0, 2**32, 40, dtype=np.uint64)  # 40 stored keys: 10 of one n-gram, 30 of 3
    sources, offset, want = [], 0, {}
    for s in range(3):
        for r in range(2):
            k = 3000
            key = rng.integers(0, 40, k)
            h = (top[key] << np.uint64(32)) | (rng.integers(1, 4, k) * (key >= 10)).astype(np.uint64)
            d = rng.integers(r * 50, r * 50 + 50, k)
            if not (s == 1 and r == 0):
                d = np.sort(d)  # a map's runs come doc by doc; one run here does not
            nruns.write_run(tmp_path / f"in{s}", 13, r, h, d, nb)
            sources.append(nred.RunSource(str(tmp_path / f"in{s}"), r, offset))
            for hv, dv in zip(h.tolist(), (d + offset).tolist(), strict=True):
                want.setdefault(hv >> key_shift, set()).add((hv, dv))
        offset += 100
    assert sum(len(p) for p in want.values()) < 6 * 3000 * 0.8  # many repeated pairs
    assert sum(len({hv for hv, _ in p}) > 1 for p in want.values()) == 30  # keys of several n-grams
    want = {key: (len(p), sorted({dv for _, dv in p})[:prov]) for key, p in want.items()}
    assert max(f for f, _ in want.values()) > 255  # df overflow too
    kw = dict(num_buckets=nb, dir_bits=dir_bits, provenance=prov)
    got = {}
    for chunk in (1_000_000, 500):
        for b in range(nb):
            nred.reduce_bucket(tmp_path / f"one{chunk}", 13, b, sources, chunk_pairs=chunk, **kw)
            got.update(_decode_bucket(tmp_path / f"one{chunk}", 13, b, dir_bits))
        assert got == want, chunk
    groups = nred.run_groups(len(sources), group_runs=4)
    got = {}
    for b in range(nb):
        for g, (lo, hi) in enumerate(groups):
            nred.merge_bucket_group(tmp_path / "groups", 13, b, g, sources[lo:hi], chunk_pairs=700,
                                    num_buckets=nb, dir_bits=dir_bits)
        grouped = nred.group_sources(tmp_path / "groups", b, len(groups))
        nred.reduce_bucket(tmp_path / "two", 13, b, grouped, chunk_pairs=900, **kw)
        got.update(_decode_bucket(tmp_path / "two", 13, b, dir_bits))
    assert got == want


def test_merge_kernel_counts_distinct_pairs():
    """``merge_sorted_keys`` on pairs sorted by key: a group of one hash counts its distinct docs;
    a group of several hashes (or docs out of order) counts distinct (hash, doc) pairs."""
    k = kernel.kernels()
    a, b, c = (np.uint64((7 << 32) | 1), np.uint64((7 << 32) | 2), np.uint64(9 << 32))
    h = np.array([a, b, a, a, b, c, c, c], dtype=np.uint64)
    d = np.array([0, 0, 0, 2, 5, 1, 1, 3], dtype=np.int64)
    t, df, docs = k["merge_sorted_keys"](h, d, 32, 2, -1, np.empty((8, 2), np.int64))
    assert t.tolist() == [7, 9] and df.tolist() == [4, 2] and docs.tolist() == [[0, 2], [1, 3]]
    h = np.array([a, a, a, b], dtype=np.uint64)
    d = np.array([4, 1, 4, 1], dtype=np.int64)  # out of order
    t, df, docs = k["merge_sorted_keys"](h, d, 32, 3, -1, np.empty((4, 3), np.int64))
    assert df.tolist() == [3] and docs.tolist() == [[1, 4, -1]]


@pytest.mark.parametrize("mode", ["numba", "numpy"])
def test_build_counts_an_ngram_repeated_in_a_doc_once(tmp_path, monkeypatch, mode):
    """A whole build: a doc repeating an n-gram counts once in its df (runs keep repeats)."""
    import json

    from tcqa_data.decontam.build import build_index
    from tcqa_data.decontam.core.hashing import ngram_hashes

    monkeypatch.setenv(kernel.ENV, mode)
    docs = ["alpha beta gamma " * 4, "beta gamma alpha delta", "alpha beta gamma alpha beta gamma"]
    src = tmp_path / "c.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
    build_index([str(src)], tmp_path / "idx", ngram_sizes=(3,), workers=1, minhash=False, quiet=True,
                text_store="none", num_buckets=4, provenance=3, run_pairs=4)
    idx = ni.NgramIndex.open(tmp_path / "idx")
    res = idx.lookup(ngram_hashes("alpha beta gamma", 3), 3)
    assert res.found.tolist() == [True] and res.doc_freq.tolist() == [2]
    assert res.docs[0].tolist() == [0, 2, -1]
    res = idx.lookup(ngram_hashes("gamma alpha beta", 3), 3)
    assert res.doc_freq.tolist() == [2] and res.docs[0].tolist() == [0, 2, -1]
