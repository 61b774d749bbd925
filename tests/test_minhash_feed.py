"""The full build's MinHash map fed from the compiled JSONL reader as code points
(``minhash/feed.py``, ``ShardWriter.add_codepoints``): the same documents, normalized bytes,
map runs and index files as the ``str`` path."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import zstandard

from tcqa_data.decontam.build import map as build_map
from tcqa_data.decontam.minhash import MinHashParams, write_minhash_shard
from tcqa_data.decontam.minhash import shards as mh_shards
from tcqa_data.decontam.readers import jsonl_batches
from tcqa_data.decontam.readers.documents import SkipStats, iter_documents
from tcqa_data.decontam.readers.inputs import CorpusInput

pytest.importorskip("numba")

# the crafted lines of the compiled reader's tests: escapes, surrogates, Unicode whitespace,
# lines only Python's reader takes
from test_readers import N_ARTICLES, _crafted_corpus  # noqa: E402


@pytest.fixture(scope="module")
def wiki_rows(wiki_sample: Path) -> list[dict]:
    with open(wiki_sample, encoding="utf-8") as fh:
        return [json.loads(next(fh)) for _ in range(N_ARTICLES)]


@pytest.fixture
def kernels_on(monkeypatch):
    monkeypatch.setenv("TCQA_KERNEL", "numba")


def _inp(path: Path) -> CorpusInput:
    fmt = "jsonl.gz" if path.name.endswith(".gz") else "jsonl.zst" if path.name.endswith(".zst") else "jsonl"
    return CorpusInput(str(path), fmt, path.stat().st_size)


@pytest.mark.parametrize("suffix, compress", [
    (".jsonl", lambda b: b), (".jsonl.gz", gzip.compress),
    (".jsonl.zst", lambda b: zstandard.ZstdCompressor().compress(b)),
])
@pytest.mark.parametrize("batch_chars, block_bytes", [(4_000_000, 1 << 22), (20_000, 3000)])
def test_codepoint_batches_equal_the_python_reader_and_the_normalized_reader(
        tmp_path, wiki_rows, monkeypatch, kernels_on, suffix, compress, batch_chars, block_bytes):
    from tcqa_data.decontam.minhash.feed import iter_codepoint_batches, normalized_codepoints

    monkeypatch.setattr(jsonl_batches, "_BLOCK_BYTES", block_bytes)  # small: lines span blocks
    path = tmp_path / f"c{suffix}"
    path.write_bytes(compress(_crafted_corpus(wiki_rows)))
    inp = _inp(path)
    slow_stats, fast_stats = SkipStats(), SkipStats()
    docs = list(iter_documents(inp, on_error="skip", stats=slow_stats))
    batches = list(iter_codepoint_batches(inp, "text", "skip", fast_stats, batch_chars))
    normalized = list(jsonl_batches.iter_normalized_batches(inp, "text", "skip", None, batch_chars))
    assert fast_stats.to_dict() == slow_stats.to_dict()
    assert len(batches) == len(normalized)
    got = []
    for b, nb in zip(batches, normalized, strict=True):
        assert b.chars == nb.chars and np.array_equal(b.rows, nb.rows)
        texts = [b.cps[s:e].tobytes().decode("utf-32-le", "surrogatepass")
                 for s, e in zip(b.doc_start[:-1].tolist(), b.doc_start[1:].tolist(), strict=True)]
        got += list(zip(texts, b.rows.tolist(), strict=True))
        # the n-gram side's bytes, and each doc's start and end as char positions
        data, nstart, at_s, at_e = normalized_codepoints(b.cps, b.doc_start, b.doc_start[:-1],
                                                         b.doc_start[1:])
        assert np.array_equal(data, nb.data) and np.array_equal(nstart, nb.doc_start)
        assert np.array_equal(at_s, nstart[:-1]) and np.array_equal(at_e, nstart[1:] - 1)
    assert got == [(d.text, d.row) for d in docs]


def _wiki_texts(path: Path, n: int) -> list[str]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(next(fh))["text"] for _ in range(n)]


EDGE = ["", "   ", "a", "...", "No tokens: !!! ???", "x\u00a0y\u3000z end. Next one\u2028here.",
        "pair \U0001F600 lone \ud800 surrogate. And \ud83d more.", "Dr. Smith met J. R. R. Tolkien in 1950. "
        "He said: \"It is late.\" Then left.\n\nA new paragraph starts here. End.:320 of the book."]


@pytest.mark.parametrize("params", [MinHashParams(), MinHashParams(verify="text", window_min_words=3,
                                                                    window_max_words=5)])
def test_codepoint_shard_equals_text_shard(wiki_sample, tmp_path, monkeypatch, kernels_on, params):
    """Parts cut inside batches, every file byte for byte."""
    from tcqa_data.decontam.minhash.feed import normalized_codepoints

    monkeypatch.setattr(mh_shards, "PART_WINDOWS", 900)
    texts = EDGE + _wiki_texts(wiki_sample, 60) + EDGE
    texts = [t for t in texts if t.strip()]  # the readers skip empty texts
    ordinals = list(range(5, 5 + 3 * len(texts), 3))
    ref = write_minhash_shard(list(zip(ordinals, texts, strict=True)), tmp_path / "str", 0, params)
    w = mh_shards.ShardWriter(tmp_path / "cps", 0, params)
    for a, b in ((0, 7), (7, 30), (30, len(texts))):
        part = texts[a:b]
        cps = np.frombuffer("".join(part).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        doc_start = np.zeros(len(part) + 1, dtype=np.int64)
        np.cumsum([len(t) for t in part], out=doc_start[1:])
        data, nstart = w.add_codepoints(ordinals[a:b], cps, doc_start)
        assert np.array_equal(data, normalized_codepoints(cps, doc_start, [], [])[0])
    got = w.close()
    files = sorted(p.name for p in ref.iterdir())
    assert len([f for f in files if f.endswith(".band_pairs.npy")]) >= 3
    assert files == sorted(p.name for p in got.iterdir())
    for f in files:
        assert (ref / f).read_bytes() == (got / f).read_bytes(), f


def test_full_build_codepoint_path_equals_text_path(wiki_sample, tmp_path, monkeypatch, kernels_on):
    """index-corpus with MinHash on JSONL inputs: the code point map writes the same index as
    the ``str`` map (every file; the manifest less its timing), several shards and inputs."""
    from tcqa_data.decontam.build import build_index

    lines = wiki_sample.read_text(encoding="utf-8").splitlines()[:90]
    inputs = []
    for k, (a, b) in enumerate(((0, 40), (40, 90))):
        p = tmp_path / f"in{k}.jsonl"
        p.write_text("\n".join(lines[a:b] + [json.dumps({"text": t}) for t in EDGE]) + "\n", encoding="utf-8")
        inputs.append(str(p))
    used = []
    real = build_map._map_minhash_jsonl

    def spy(*a, **kw):
        used.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(build_map, "_map_minhash_jsonl", spy)
    kw = {"workers": 1, "quiet": True, "shard_bytes": 60_000, "batch_chars": 30_000, "text_store": "none"}
    build_index(inputs, tmp_path / "fast", **kw)
    assert len(used) >= 4  # several shards, all through the code point path
    monkeypatch.setattr(build_map, "_minhash_codepoints_ok", lambda *a: False)
    build_index(inputs, tmp_path / "str", **kw)
    _assert_same_index(tmp_path / "str", tmp_path / "fast")


def _assert_same_index(one: Path, other: Path) -> None:
    """Every file of two index folders byte for byte (the manifest less its timing)."""
    names = sorted(str(p.relative_to(one)) for p in one.rglob("*") if p.is_file())
    assert names == sorted(str(p.relative_to(other)) for p in other.rglob("*") if p.is_file())
    for n in names:
        a, b = (one / n).read_bytes(), (other / n).read_bytes()
        if n == "manifest.json":
            # the manifest's own checksum covers the build times too
            a, b = ({k: v for k, v in json.loads(x).items() if k not in ("build", "manifest_xxh3")}
                    for x in (a, b))
        assert a == b, n



@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_str_map_normalizes_once_and_writes_the_same_index(wiki_sample, tmp_path, monkeypatch, kernels_on,
                                                           fmt):
    """Documents the map reads as ``str`` (an id field; Parquet) with MinHash: each batch is cut
    into windows and normalized once on code points, and the n-gram side hashes those bytes
    (``_map_minhash_texts``); the index is the one of the path that normalizes the texts for the
    n-grams and again for the windows (every file; the manifest less its timing)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tcqa_data.decontam.build import build_index

    rows = [json.loads(line) for line in wiki_sample.read_text(encoding="utf-8").splitlines()[:70]]
    # Parquet holds UTF-8 only: no lone surrogate there
    rows += [{"id": f"edge-{k}", "text": t} for k, t in enumerate(EDGE)
             if t and (fmt == "jsonl" or t.encode("utf-8", "surrogatepass").decode("utf-8", "replace") == t)]
    inputs = []
    for k, (a, b) in enumerate(((0, 30), (30, len(rows)))):
        part = [{"id": r["id"], "text": r["text"]} for r in rows[a:b]]
        p = tmp_path / f"in{k}.{fmt}"
        if fmt == "jsonl":
            p.write_text("".join(json.dumps(r) + "\n" for r in part), encoding="utf-8")
        else:
            pq.write_table(pa.Table.from_pylist(part), p, row_group_size=10)
        inputs.append(str(p))
    used = []
    real = build_map._map_minhash_texts
    monkeypatch.setattr(build_map, "_map_minhash_texts", lambda *a: used.append(1) or real(*a))
    kw = {"workers": 1, "quiet": True, "shard_bytes": 60_000, "batch_chars": 30_000, "text_store": "none",
          "id_field": "id"}
    build_index(inputs, tmp_path / "once", **kw)
    assert used  # the str map on code points ran
    monkeypatch.setattr(build_map, "_minhash_texts_ok", lambda *a: False)
    build_index(inputs, tmp_path / "twice", **kw)
    _assert_same_index(tmp_path / "twice", tmp_path / "once")


def _janitor_from_cps_reference(cps: np.ndarray, doc_start: np.ndarray, at_start: np.ndarray,
                                at_end: np.ndarray) -> tuple[bytes, list, list, list]:
    """``janitor_from_cps`` by its definition: each doc's ``encode_normalized`` bytes (non-ASCII
    whitespace as spaces) after a space; a start bound at its char, an end bound at the end of
    the first doc ending there, else at its char."""
    from tcqa_data.decontam.core.hashing import encode_normalized

    out = bytearray(b" ")
    char_at, end_at, nstart = {}, {}, []
    for d in range(len(doc_start) - 1):
        nstart.append(len(out))
        for ci in range(doc_start[d], doc_start[d + 1]):
            char_at[ci] = len(out)
            ch = chr(cps[ci])
            b = encode_normalized(ch)
            out += b" " * len(b) if ch.isspace() else b
        end_at.setdefault(int(doc_start[d + 1]), len(out))
        out += b" "
    nstart.append(len(out))
    out += b" " * 8
    return (bytes(out), nstart, [char_at[int(v)] for v in at_start],
            [end_at.get(int(v), char_at.get(int(v))) for v in at_end])


def test_janitor_from_cps_equals_its_definition(kernels_on):
    """Window bounds anywhere (doc starts and ends, empty docs, runs of equal bounds) and
    non-ASCII, whitespace and punctuation chars: the kernel's bytes and offsets."""
    from tcqa_data.decontam.core import kernel
    from tcqa_data.decontam.core.hashing import JANITOR_ASCII_MAP

    rng = np.random.default_rng(7)
    alphabet = np.array([ord(c) for c in "abcXYZ 09.,;!\"'-\u00e9\u00a0\u3000\u4e2d\U0001f600\t"],
                        dtype=np.uint32)
    for _ in range(20):
        lens = rng.integers(0, 30, size=int(rng.integers(1, 12)))
        doc_start = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        n = int(doc_start[-1])
        cps = alphabet[rng.integers(0, len(alphabet), size=n)]
        if n == 0:
            continue
        at_start = np.sort(rng.integers(0, n, size=int(rng.integers(0, 2 * n))))
        at_end = np.sort(np.concatenate([rng.integers(1, n + 1, size=int(rng.integers(0, 2 * n))),
                                         doc_start[1:]]))
        got = kernel.kernels()["janitor_from_cps"](cps, doc_start, JANITOR_ASCII_MAP, at_start, at_end)
        want = _janitor_from_cps_reference(cps, doc_start, at_start, at_end)
        assert bytes(got[0]) == want[0]
        assert got[1].tolist() == want[1]
        assert got[2].tolist() == want[2]
        assert got[3].tolist() == want[3]
