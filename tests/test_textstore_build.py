"""Text-store build: the compiled path (JSONL reader, winnowing kernel) writes the same files as
the Python reader and the numpy fallback, on real wiki text and crafted edge-case lines."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from test_readers import CRAFTED, PYTHON_LINES

from tcqa_data.decontam.build import build_index
from tcqa_data.decontam.core import kernel
from tcqa_data.decontam.index_files import reseal
from tcqa_data.decontam.textstore import anchors as ts_anchors
from tcqa_data.decontam.textstore import build as ts_build
from tcqa_data.decontam.textstore.build import build_text_store
from tcqa_data.decontam.textstore.store import STORE_DIR, TextStore
from tcqa_data.errors import TcqaError

N_ARTICLES = 60


@pytest.fixture(scope="module")
def wiki_lines(wiki_sample: Path) -> list[bytes]:
    """Real articles as JSONL lines, half of them with non-ASCII written as \\u escapes."""
    out = []
    with open(wiki_sample, encoding="utf-8") as fh:
        for k, line in enumerate(fh):
            if k == N_ARTICLES:
                break
            row = json.loads(line)
            row = {"title": row["title"], "text": row["text"]}
            out.append(json.dumps(row, ensure_ascii=k % 2 == 0).encode())
    return out


def _corpus(wiki_lines: list[bytes], extra: list[bytes]) -> bytes:
    lines = [b'\xef\xbb\xbf{"title": "bom", "text": "bom on line one a b c d e f g h"}']
    for k, line in enumerate(extra):
        lines += [line, wiki_lines[k % len(wiki_lines)]]
    lines += wiki_lines[len(extra):]
    return b"\n".join(lines) + b'\n{"title": "end", "text": "no newline at the end a b c d e f"}'


def _store_files(index: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted((index / STORE_DIR).iterdir())}


def _build_store_each_way(index: Path, monkeypatch, python_reads: list[str]) -> dict[str, dict[str, bytes]]:
    """The store's files from the compiled reader, the Python reader with the kernel, and numpy;
    ``python_reads`` gets the name of each way that read the input with the Python reader."""
    out = {}
    real_fast, real_texts = ts_build._fast_anchors, ts_build._input_texts
    for name, env, fast in (("compiled", "numba", True), ("python-reader", "numba", False),
                            ("numpy", "numpy", True)):
        monkeypatch.setenv(kernel.ENV, env)
        monkeypatch.setattr(ts_build, "_fast_anchors", real_fast if fast else lambda e, m: False)
        monkeypatch.setattr(ts_build, "_input_texts",
                             lambda *a, name=name: python_reads.append(name) or real_texts(*a))
        shutil.rmtree(index / STORE_DIR, ignore_errors=True)
        build_text_store(index)
        reseal(index)  # the store rebuilt in place on purpose: the manifest records its files
        out[name] = _store_files(index)
    return out


@pytest.mark.parametrize("run_entries, batch_chars", [(ts_anchors.ANCHOR_RUN, ts_anchors._ANCHOR_BATCH_CHARS),
                                                      (20_000, 60_000)])
def test_compiled_store_writes_the_python_readers_files(tmp_path, wiki_lines, monkeypatch, run_entries,
                                                        batch_chars):
    pytest.importorskip("numba")
    monkeypatch.setattr(ts_anchors, "ANCHOR_RUN", run_entries)  # small: several batches and runs
    monkeypatch.setattr(ts_anchors, "_ANCHOR_BATCH_CHARS", batch_chars)
    # the runs kept as written (not merged into one table) so that each way's runs are compared
    monkeypatch.setattr(ts_build, "MERGED_MAX_DOCS", 0)
    path = tmp_path / "c.jsonl"
    path.write_bytes(_corpus(wiki_lines, CRAFTED + PYTHON_LINES))
    index = tmp_path / "idx"
    build_index([str(path)], index, minhash=False, quiet=True, workers=1, on_error="skip", text_store="none")
    fast_reads = []
    real = ts_build._winnowed_jsonl
    monkeypatch.setattr(ts_build, "_winnowed_jsonl", lambda *a: fast_reads.append(1) or real(*a))
    python_reads: list[str] = []
    files = _build_store_each_way(index, monkeypatch, python_reads)
    assert len(fast_reads) == 1  # the compiled reader ran once (numpy: no kernels, no compiled reader)
    assert python_reads == ["python-reader", "numpy"]
    anchors = [f for f in files["compiled"] if ".anchors-" in f]
    assert len(anchors) >= (6 if run_entries < 100_000 else 2)
    assert files["compiled"] == files["python-reader"] == files["numpy"]
    meta = json.loads(files["compiled"]["meta.json"])
    (rec,) = meta["inputs"].values()
    assert rec["kind"] == "offsets" and rec["anchor_entries"] > 0.3 * sum(
        len(t.split()) for t in TextStore.open(index).texts(range(rec["id"]["docs"])))


def test_compiled_store_leaves_docs_the_index_skipped_to_the_python_reader(tmp_path, wiki_lines, monkeypatch):
    """With an id field, the index skips docs without one; the compiled reader (which reads no id)
    sees more docs than the index and hands the input to the Python reader: same files."""
    pytest.importorskip("numba")
    no_id = [b'{"text": "no title here so the index skips it a b c d e f g h"}',
             b'{"title": null, "text": "a null title is skipped too a b c d e f g h i j"}']
    path = tmp_path / "c.jsonl"
    path.write_bytes(_corpus(wiki_lines, no_id + CRAFTED[:3]))
    index = tmp_path / "idx"
    build_index([str(path)], index, id_field="title", minhash=False, quiet=True, workers=1, on_error="skip",
                text_store="none")
    python_reads: list[str] = []
    files = _build_store_each_way(index, monkeypatch, python_reads)
    assert python_reads == ["compiled", "python-reader", "numpy"]  # the compiled reader gave up
    assert files["compiled"] == files["python-reader"] == files["numpy"]
    texts = TextStore.open(index).texts([1, 2])
    assert texts[0].startswith(json.loads(wiki_lines[0])["text"][:50]) and "skipped" not in texts[1]


def test_compiled_store_still_refuses_a_changed_input(tmp_path, wiki_lines, monkeypatch):
    monkeypatch.setenv(kernel.ENV, "numba")
    pytest.importorskip("numba")
    path = tmp_path / "c.jsonl"
    path.write_bytes(b"\n".join(wiki_lines[:5]) + b"\n")
    index = tmp_path / "idx"
    build_index([str(path)], index, minhash=False, quiet=True, workers=1, text_store="none")
    with open(path, "ab") as fh:
        fh.write(wiki_lines[6] + b"\n")
    with pytest.raises(TcqaError, match=r"read 6 documents for the text store, the index has 5"):
        build_text_store(index)


def _random_kgrams(rng: np.random.Generator, lengths: list[int], alphabet: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    # few distinct values: windows with tied minima (the first one is kept); high bits set too
    values = rng.integers(0, alphabet, sum(lengths), dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    owner = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    return values, owner


@pytest.mark.parametrize("alphabet", [3, 1 << 40])
def test_winnow_kernel_equals_numpy(monkeypatch, alphabet):
    pytest.importorskip("numba")
    rng = np.random.default_rng(alphabet)
    cases = [[], [1], [2], [3], [2, 0, 5, 1, 3, 7], [0, 0, 4], list(rng.integers(0, 40, 300))]
    for lengths in cases:
        flat, owner = _random_kgrams(rng, [int(x) for x in lengths], alphabet)
        got = {}
        for mode in ("numba", "numpy"):
            monkeypatch.setenv(kernel.ENV, mode)
            got[mode] = ts_anchors.winnow_hashes(flat, owner)
        (hk, dk), (hn, dn) = got["numba"], got["numpy"]
        assert hk.dtype == hn.dtype == np.uint32 and dk.dtype == dn.dtype == np.int64
        assert np.array_equal(hk, hn) and np.array_equal(dk, dn), lengths
        # every window of ANCHOR_W k-grams of a doc holds a kept one (the winnowing guarantee)
        kept = set(zip(dk.tolist(), hk.tolist(), strict=True))
        for d in range(len(lengths)):
            hs = (flat[owner == d] >> np.uint64(32)).astype(np.uint32).tolist()
            if len(hs) < ts_anchors.ANCHOR_W:
                assert all((d, h) in kept for h in hs)
            for i in range(len(hs) - ts_anchors.ANCHOR_W + 1):
                assert any((d, h) in kept for h in hs[i:i + ts_anchors.ANCHOR_W])


@pytest.mark.parametrize("width", [1, 17, 33, 47, 63, 64])
def test_pack_kernel_equals_numpy(monkeypatch, width):
    """``packed.pack`` (anchor and MinHash band tables): the kernel's words equal numpy's, and
    ``unpack`` reads the values back."""
    pytest.importorskip("numba")
    from tcqa_data.decontam.core import packed

    rng = np.random.default_rng(width)
    for n in (0, 64, 64 * 37):
        top = np.uint64((1 << width) - 1)
        values = rng.integers(0, 2**63, n, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        values &= top
        values[: n // 8] = top  # all bits set: spills into the next word
        words = {}
        for mode in ("numba", "numpy"):
            monkeypatch.setenv(kernel.ENV, mode)
            words[mode] = packed.pack(values, width)
        assert words["numba"].dtype == words["numpy"].dtype == np.uint64
        assert np.array_equal(words["numba"], words["numpy"]) and len(words["numba"]) == n * width // 64
        padded = np.r_[words["numba"], np.zeros(1, np.uint64)]  # the spare word of a table
        assert np.array_equal(packed.unpack(padded, np.arange(n), width), values)


def test_anchor_table_written_in_blocks_equals_one_block(tmp_path, monkeypatch):
    rng = np.random.default_rng(5)
    hashes = rng.integers(0, 2**32, 50_000, dtype=np.uint64) >> rng.integers(0, 20, 50_000, dtype=np.uint64)
    entries = np.unique((hashes << np.uint64(32)) | rng.integers(0, 3000, 50_000, dtype=np.uint64))
    files = {}
    for block in (1 << 20, 333, 64):
        monkeypatch.setattr(ts_anchors, "_TABLE_BLOCK", block)
        out = tmp_path / str(block)
        out.mkdir()
        meta = ts_anchors._write_anchor_table(out, "t", entries, 12)
        files[block] = (meta, {f.name: f.read_bytes() for f in sorted(out.iterdir())})
    assert files[1 << 20] == files[333] == files[64] and files[64][0]["entries"] == len(entries)


def _no_second_pass(monkeypatch) -> None:
    """Fail if the text store winnows docs itself (it takes the map's anchors)."""
    def refuse(*a):
        raise AssertionError("the text store winnowed the docs again")

    monkeypatch.setattr(ts_build, "_winnowed_jsonl", refuse)
    monkeypatch.setattr(ts_build, "_winnowed_texts", refuse)


@pytest.mark.parametrize("minhash, workers, mode",
                         [(False, 1, "auto"), (True, 2, "auto"), (False, 2, "copy")])
def test_map_anchors_write_the_second_passs_files(tmp_path, wiki_lines, monkeypatch, minhash, workers, mode):
    """The full build's map winnows the anchors from the bytes it normalized; the text store pass
    then writes the runs without reading the input: the same files as a pass over the input, with
    several map shards per input and runs that end inside a shard."""
    pytest.importorskip("numba")
    monkeypatch.setattr(ts_anchors, "ANCHOR_RUN", 7_000)
    monkeypatch.setattr(ts_build, "MERGED_MAX_DOCS", 0)  # the runs kept as written, to compare them
    # a copy holds U+FFFD for a lone surrogate, where the map winnowed the original text
    extra = [line for line in CRAFTED if mode != "copy" or b"\\ud8" not in line][:6]
    paths = []
    for i in range(2):
        p = tmp_path / f"c{i}.jsonl"
        p.write_bytes(_corpus(wiki_lines[i * 20:], extra))
        paths.append(str(p))
    kw = {"minhash": minhash, "quiet": True, "workers": workers, "on_error": "skip", "shard_bytes": 150_000}
    reread = tmp_path / "reread"
    build_index(paths, reread, text_store="none", **kw)
    build_text_store(reread, mode, workers=workers)
    with monkeypatch.context() as m:
        _no_second_pass(m)
        mapped = tmp_path / "mapped"
        build_index(paths, mapped, text_store=mode, **kw)
    files = _store_files(mapped)
    assert files == _store_files(reread)
    assert sum(".anchors-" in f for f in files) >= 8 and not any(".map" in f for f in files)
    assert json.loads((mapped / "manifest.json").read_text())["inputs"][0]["docs"] > 40


def test_map_anchors_survive_an_interrupted_text_store_pass(tmp_path, wiki_lines, monkeypatch):
    """A build killed before its text store pass finished leaves the maps' anchors beside the
    store; the pass run again uses them (no read of the input) and writes the usual files."""
    pytest.importorskip("numba")
    path = tmp_path / "c.jsonl"
    path.write_bytes(_corpus(wiki_lines, CRAFTED[:4]))
    index = tmp_path / "idx"
    import tcqa_data.decontam.build.index as build_mod

    with monkeypatch.context() as m:
        m.setattr(build_mod, "_finish_text_store", lambda *a: None)
        build_index([str(path)], index, minhash=False, quiet=True, workers=1, shard_bytes=100_000)
    staged = sorted(f.name for f in (index / STORE_DIR).iterdir())
    assert staged and all(".map" in f for f in staged) and not (index / STORE_DIR / "meta.json").exists()
    kept = {f: (index / STORE_DIR / f).read_bytes() for f in staged}
    with monkeypatch.context() as m:
        _no_second_pass(m)
        build_text_store(index)
    files = _store_files(index)
    assert not any(".map" in f for f in files)
    shutil.rmtree(index / STORE_DIR)
    build_text_store(index)  # no staged anchors: a pass over the input
    assert _store_files(index) == files
    # anchors another version's maps staged (a layout this code does not write) are not read:
    # the pass reads the input, over anchors that would be wrong if they were used
    shutil.rmtree(index / STORE_DIR)
    (index / STORE_DIR).mkdir()
    for f, data in kept.items():
        if f.endswith(".map.json"):
            listing = json.loads(data)
            data = json.dumps(dict(listing, map_format=listing["map_format"] - 1)).encode()
        (index / STORE_DIR / f).write_bytes(data)
        if "hashes" in f:  # every hash 0
            np.save(index / STORE_DIR / f, np.zeros_like(np.load(index / STORE_DIR / f)))
    build_text_store(index)
    assert _store_files(index) == files
    # the pass is part of the commit (build/reduce._commit): a finished build leaves no staged
    # anchors behind
    shutil.rmtree(index)
    build_index([str(path)], index, minhash=False, quiet=True, workers=1)
    assert not any(".map" in f.name for f in (index / STORE_DIR).iterdir())


def test_anchor_runs_do_not_depend_on_the_batches(tmp_path, monkeypatch):
    """A run ends with the doc that brings it to ANCHOR_RUN entries, however the docs come in."""
    monkeypatch.setattr(ts_anchors, "ANCHOR_RUN", 50)
    rng = np.random.default_rng(7)
    counts = rng.integers(0, 30, 40)
    h = rng.integers(0, 2**32, int(counts.sum()), dtype=np.uint64).astype(np.uint32)
    d = np.repeat(np.arange(40), counts)
    written = []
    for cuts in ([0, 40], [0, 1, 7, 8, 30, 40], list(range(41))):
        folder = tmp_path / f"cuts{len(cuts)}"
        folder.mkdir()
        batches = []
        for a, b in zip(cuts[:-1], cuts[1:], strict=True):
            sel = (d >= a) & (d < b)
            batches.append((h[sel], d[sel] - a, b - a))
        meta = ts_anchors._write_anchor_runs(folder, "k", batches, 40)
        written.append((meta, {f.name: f.read_bytes() for f in sorted(folder.iterdir())}))
    assert written[0] == written[1] == written[2]
    assert len(written[0][0]) >= 5  # several runs, cut inside batches


def test_copy_of_a_lone_surrogate(tmp_path):
    """A JSON "\\ud800" escape decodes to a lone surrogate, which UTF-8 (and so a Parquet string)
    cannot hold: the copy keeps the doc, with U+FFFD in its place."""
    path = tmp_path / "c.jsonl.gz"
    import gzip

    path.write_bytes(gzip.compress(b'{"text": "before \\ud800 after a b c d e f g h"}\n'
                                   b'{"text": "plain text a b c d e f g h i j"}\n'))
    index = tmp_path / "idx"
    build_index([str(path)], index, minhash=False, quiet=True, workers=1, text_store="copy")
    texts = TextStore.open(index).texts([0, 1])
    assert texts[0].startswith("before \ufffd") and texts[0].endswith("after a b c d e f g h")
    assert texts[1] == "plain text a b c d e f g h i j"
