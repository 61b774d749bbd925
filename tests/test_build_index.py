"""index-corpus end to end: determinism, --append, kill -9 recovery, refusals, bad input."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from typer.testing import CliRunner

from tcqa_data.cli import app
from tcqa_data.decontam.build import build_index, map_shard
from tcqa_data.decontam.core.hashing import HASH_NAME, ngram_hashes
from tcqa_data.decontam.core.map_files import MAP_FORMAT
from tcqa_data.decontam.ngrams.index import NgramIndex
from tcqa_data.errors import IndexMismatchError, InputError, TcqaError

REPO = Path(__file__).resolve().parents[1]
SMALL = {"run_pairs": 40_000, "num_buckets": 16, "quiet": True}


@pytest.fixture(scope="module")
def wiki_lines(wiki_sample):
    with open(wiki_sample, encoding="utf-8") as fh:
        return [line for _, line in zip(range(90), fh, strict=False)]


@pytest.fixture
def corpus(tmp_path, wiki_lines):
    """Three real JSONL inputs (~0.5 MB each); c sorts last."""
    paths = []
    for name, lo, hi in (("a", 0, 30), ("b", 30, 60), ("c", 60, 90)):
        p = tmp_path / "corpus" / f"{name}.jsonl"
        p.parent.mkdir(exist_ok=True)
        p.write_text("".join(wiki_lines[lo:hi]), encoding="utf-8")
        paths.append(str(p))
    return paths


def _files(index: Path) -> dict[str, bytes]:
    """Every file of an index except the manifest (which records times)."""
    return {str(p.relative_to(index)): p.read_bytes() for p in sorted(index.rglob("*"))
            if p.is_file() and p.name != "manifest.json"}


def _assert_same(a: Path, b: Path, appended: bool = False) -> None:
    fa, fb = _files(a), _files(b)
    if appended and "anchors" in json.loads(fa.get("textstore/meta.json", b"{}")):
        # the text store's merged anchor table: an append writes a new generation of it (its file
        # names) from the old table and the new inputs' runs, whose key ranges may be cut elsewhere
        # than a full build's; its entries are the same
        from test_textstore_merge import _merged_entries

        assert np.array_equal(_merged_entries(a), _merged_entries(b))
        ma, mb = (json.loads(f.pop("textstore/meta.json")) for f in (fa, fb))
        for m in (ma, mb):
            m["anchors"] = {k: v for k, v in m["anchors"].items() if k not in ("generation", "parts")}
        assert ma == mb
        for f in (fa, fb):
            for k in [k for k in f if k.startswith("textstore/anchors-g")]:
                del f[k]
    assert sorted(fa) == sorted(fb)
    diff = [k for k in fa if fa[k] != fb[k]]
    assert not diff, f"files differ: {diff[:5]}"
    ma, mb = json.loads((a / "manifest.json").read_text()), json.loads((b / "manifest.json").read_text())
    for key in ("counts", "ngram_sizes", "hash", "minhash", "normalization"):
        assert ma[key] == mb[key]
    assert [(e["path"], e["sha256"], e["docs"]) for e in ma["inputs"]] == \
        [(e["path"], e["sha256"], e["docs"]) for e in mb["inputs"]]


def test_manifest_and_workers_do_not_change_bytes(tmp_path, corpus):
    one = tmp_path / "one"
    m = build_index(corpus, one, ngram_sizes=(8, 13), workers=1, minhash=False, **SMALL)
    assert not (one / "_work").exists()
    assert m["format_version"] == 2 and m["kind"] == "tcqa-ngram-index"
    assert m["hash"] == {"name": HASH_NAME, "seed": 0} and m["normalization"] == "janitor"
    assert m["ngram_sizes"] == [8, 13] and m["minhash"] is None
    assert [e["path"] for e in m["inputs"]] == corpus
    for e in m["inputs"]:
        assert e["sha256"] == hashlib.sha256(Path(e["path"]).read_bytes()).hexdigest()
        assert e["size"] == os.path.getsize(e["path"]) and e["docs"] == 30
    assert [e["doc_offset"] for e in m["inputs"]] == [0, 30, 60]
    assert m["counts"]["docs"] == 90 and m["counts"]["ngrams"]["13"]["unique"] > 100_000
    assert m["build"]["seconds"] > 0 and m["skipped"]["counts"] == {}
    assert json.loads((one / "manifest.json").read_text()) == m
    docs = pq.read_table(one / "docs.parquet").to_pydict()
    assert docs["doc_ordinal"] == list(range(90))
    assert docs["doc_ref"][31] == f"{corpus[1]}:2" and docs["input"][31] == corpus[1] and docs["row"][31] == 2

    # two workers, inputs cut into many shards and runs: the same bytes
    two = tmp_path / "two"
    build_index(corpus, two, ngram_sizes=(8, 13), workers=2, minhash=False, shard_bytes=100_000,
                **dict(SMALL, run_pairs=7_000))
    _assert_same(one, two)


def test_append_equals_full_rebuild(tmp_path, corpus):
    inc = tmp_path / "inc"
    first = build_index(corpus[:1], inc, workers=1, **SMALL)
    copy = tmp_path / "corpus" / "copy_of_a.jsonl"
    copy.write_bytes(Path(corpus[0]).read_bytes())
    m = build_index([*corpus[1:], str(copy), corpus[0]], inc, workers=2, append=True, **SMALL)
    assert m["build"]["appended_inputs"] == corpus[1:]
    assert m["skipped_inputs"] == [{"path": str(copy), "reason": f"same content as {corpus[0]}"}]
    # the append keeps the first build's n-gram directory width; a full rebuild given it writes
    # the same bytes (left to itself, it picks a wider one for the 3x bigger corpus)
    dir_bits = first["ngram_storage"]["dir_bits"]
    assert m["ngram_storage"]["dir_bits"] == dir_bits
    full = tmp_path / "full"
    build_index(corpus, full, workers=2, ngram_dir_bits=dir_bits, **SMALL)
    assert (full / "minhash" / "params.json").exists()
    _assert_same(full, inc)
    auto = build_index(corpus, tmp_path / "auto", workers=1, minhash=False, **SMALL)
    assert auto["ngram_storage"]["dir_bits"] > dir_bits
    rate = {k: x["counts"]["ngrams"]["13"]["false_positive_rate"] for k, x in (("auto", auto), ("inc", m))}
    assert rate["auto"] < rate["inc"]
    # nothing new: a no-op that keeps the index as it is
    again = build_index(corpus, inc, append=True, **SMALL)
    assert again["build"]["finished"] == m["build"]["finished"]


def test_append_in_small_chunks_and_runs(tmp_path, corpus):
    """Bounded-memory settings (tiny runs and merge chunks, several appends) change no byte."""
    tiny = dict(SMALL, run_pairs=5_000, chunk_pairs=3_000, minhash=False, provenance=3)
    inc = tmp_path / "inc"
    for k in range(1, 4):
        m = build_index(corpus[:k], inc, workers=2, append=k > 1, **tiny)
    full = tmp_path / "full"
    build_index(corpus, full, workers=1, ngram_dir_bits=m["ngram_storage"]["dir_bits"],
                **dict(tiny, run_pairs=10**7, chunk_pairs=10**7))
    _assert_same(full, inc, appended=True)


def _spawn_build(corpus, out):
    code = ("import sys; from tcqa_data.decontam.build import build_index, map_shard; "
            f"build_index({corpus!r}, {str(out)!r}, workers=1, run_pairs=20_000, num_buckets=64, quiet=True)")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, "-c", code], env=env, cwd=REPO)


def _kill_when(proc, cond, timeout=120.0):
    t0 = time.time()
    while not cond():
        if proc.poll() is not None:
            pytest.fail("the build finished before it could be killed")
        if time.time() - t0 > timeout:
            proc.kill()
            pytest.fail("timed out waiting for the build")
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


@pytest.mark.parametrize("phase", ["map", "reduce"])
def test_kill9_never_looks_complete_and_rerun_recovers(tmp_path, corpus, phase):
    out = tmp_path / "killed"
    maps = out / "_work" / "maps"
    if phase == "map":
        cond = lambda: len(list(maps.glob("*/done.json"))) >= 1  # noqa: E731
    else:
        cond = lambda: any((out / "_work" / "stage" / "ngrams").rglob("*.docs.npy"))  # noqa: E731
    _kill_when(_spawn_build(corpus, out), cond)
    assert not (out / "manifest.json").exists()
    with pytest.raises(TcqaError, match="incomplete"):
        NgramIndex.open(out)
    if phase == "map":
        # finished map shards are reused as they are: map_shard returns their done.json
        done = sorted(maps.glob("*/done.json"))
        before = [p.stat().st_mtime_ns for p in done]
        for p in done:
            assert map_shard({"key": p.parent.name}, str(out / "_work"), {}) == json.loads(p.read_text())
        assert [p.stat().st_mtime_ns for p in done] == before
    m = build_index(corpus, out, workers=1, run_pairs=20_000, num_buckets=64, quiet=True)
    assert m["counts"]["docs"] == 90
    clean = tmp_path / "clean"
    build_index(corpus, clean, workers=2, run_pairs=20_000, num_buckets=64, quiet=True)
    _assert_same(clean, out)


def test_a_resume_by_code_with_another_map_layout_redoes_the_maps(tmp_path, corpus):
    """Finished maps are build scratch in the layout of the code that wrote them: a build resumed
    by code whose maps write another layout (``MAP_FORMAT`` in plan.json) maps again."""
    out = tmp_path / "killed"
    maps = out / "_work" / "maps"
    _kill_when(_spawn_build(corpus, out), lambda: len(list(maps.glob("*/done.json"))) >= 1)
    plan_path = out / "_work" / "plan.json"
    plan = json.loads(plan_path.read_text())
    assert plan["map_format"] == MAP_FORMAT
    # stand-ins for an older layout's files: reading them again would fail the build
    for done in maps.glob("*/done.json"):
        (done.parent / "docs.parquet").write_bytes(b"not parquet")
    plan_path.write_text(json.dumps(dict(plan, map_format=MAP_FORMAT - 1)))
    build_index(corpus, out, workers=1, run_pairs=20_000, num_buckets=64, quiet=True)
    clean = tmp_path / "clean"
    build_index(corpus, clean, workers=1, run_pairs=20_000, num_buckets=64, quiet=True)
    _assert_same(clean, out)


def test_refuses_other_parameters_unless_overwrite(tmp_path, corpus):
    out = tmp_path / "idx"
    m = build_index(corpus[:2], out, minhash=False, **SMALL)
    for kw in ({"ngram_sizes": (8,)}, {"normalization": "unicode"}, {"seed": 5}, {"num_buckets": 32},
               {"minhash": True}):
        args = dict(SMALL, minhash=False)
        args.update(kw)
        with pytest.raises(IndexMismatchError, match="other parameters"):
            build_index(corpus[:2], out, **args)
    # same inputs and parameters: nothing to do
    assert build_index(corpus[:2], out, minhash=False, **SMALL)["build"] == m["build"]
    with pytest.raises(IndexMismatchError, match="--append"):
        build_index(corpus, out, minhash=False, **SMALL)
    # --append keeps the n-gram directory width: asking for another one is refused
    with pytest.raises(IndexMismatchError, match="directory bits.*--overwrite"):
        build_index(corpus, out, minhash=False, append=True,
                    ngram_dir_bits=m["ngram_storage"]["dir_bits"] + 1, **SMALL)
    with pytest.raises(TcqaError, match="directory bits must be 0..28 with 16 buckets"):
        build_index(corpus, tmp_path / "other", minhash=False, ngram_dir_bits=29, **SMALL)
    assert not (tmp_path / "other").exists()
    m2 = build_index(corpus, out, ngram_sizes=(8,), minhash=False, overwrite=True, **SMALL)
    assert m2["ngram_sizes"] == [8] and m2["counts"]["docs"] == 90
    assert not (out / "ngrams" / "n13").exists()


def _write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def test_bad_inputs_give_clear_messages(tmp_path, wiki_lines):
    good = wiki_lines[0].encode()
    bad_json = _write(tmp_path / "bad.jsonl", good + b'{"text": "unterminated\n' + wiki_lines[1].encode())
    with pytest.raises(InputError, match=r"bad\.jsonl:2: .*JSON"):
        build_index([bad_json], tmp_path / "i1", minhash=False, **SMALL)
    assert not (tmp_path / "i1" / "manifest.json").exists()
    m = build_index([bad_json], tmp_path / "i2", minhash=False, on_error="skip", **SMALL)
    assert m["counts"]["docs"] == 2 and m["skipped"]["counts"] == {"invalid_json": 1}
    assert m["inputs"][0]["skipped"]["counts"] == {"invalid_json": 1}
    assert "bad.jsonl:2" in m["skipped"]["examples"][0]

    no_field = _write(tmp_path / "nofield.jsonl", good + b'{"body": "x"}\n')
    with pytest.raises(InputError, match=r"nofield\.jsonl:2: .*'text'"):
        build_index([no_field], tmp_path / "i3", minhash=False, **SMALL)
    m = build_index([no_field], tmp_path / "i3b", minhash=False, text_field="body", on_error="skip", **SMALL)
    assert m["counts"]["docs"] == 1 and m["skipped"]["counts"] == {"missing_field": 1}

    latin1 = _write(tmp_path / "latin1.jsonl", good + '{"text": "caf\u00e9"}\n'.encode("latin-1"))
    with pytest.raises(InputError, match=r"latin1\.jsonl:2: .*UTF-8"):
        build_index([latin1], tmp_path / "i4", minhash=False, **SMALL)

    empty = _write(tmp_path / "empty.jsonl", b'{"text": ""}\n{"text": "  \\n "}\n' + good)
    m = build_index([empty], tmp_path / "i5", minhash=False, **SMALL)
    assert m["counts"]["docs"] == 1 and m["skipped"]["counts"] == {"empty_text": 2}

    payload = b"".join(line.encode() for line in wiki_lines[:30])
    gz = gzip.compress(payload)
    zst = zstandard.ZstdCompressor().compress(payload)
    for name, blob in (("cut.jsonl.gz", gz[: len(gz) // 2]), ("cut.jsonl.zst", zst[: len(zst) // 2])):
        path = _write(tmp_path / name, blob)
        with pytest.raises(InputError, match=rf"{name}.*(truncated|corrupt)"):
            build_index([path], tmp_path / f"i-{name}", minhash=False, **SMALL)
        m = build_index([path], tmp_path / f"s-{name}", minhash=False, on_error="skip", **SMALL)
        assert m["skipped"]["counts"].get("truncated_input") == 1 and 0 < m["counts"]["docs"] < 30


def test_formats_agree_and_cli(tmp_path, wiki_lines):
    texts = [json.loads(x)["text"] for x in wiki_lines[:6]]
    payload = "".join(wiki_lines[:6]).encode()
    base = tmp_path / "fmt"
    base.mkdir()
    _write(base / "a.jsonl.gz", gzip.compress(payload))
    _write(base / "b.jsonl.zst", zstandard.ZstdCompressor().compress(payload))
    pq.write_table(pa.table({"text": texts}), base / "c.parquet")
    (base / "d.txt").write_text(texts[0], encoding="utf-8")
    res = CliRunner().invoke(app, ["index-corpus", str(base), "--out", str(tmp_path / "idx"),
                                   "--ngram", "8,13", "--no-minhash", "--workers", "2", "--quiet",
                                   "--num-buckets", "16"])
    assert res.exit_code == 0, res.output
    idx = NgramIndex.open(tmp_path / "idx")
    assert idx.num_buckets == 16
    assert len(list((tmp_path / "idx" / "ngrams" / "n13").glob("*.keys.npy"))) == 16
    assert idx.manifest["counts"]["docs"] == 6 * 3 + 1
    assert [e["format"] for e in idx.manifest["inputs"]] == ["jsonl.gz", "jsonl.zst", "parquet", "txt"]
    for n in (8, 13):
        hit = idx.lookup(ngram_hashes(texts[0], n), n)
        assert hit.found.all() and (hit.doc_freq >= 4).all()
        refs = set(idx.doc_refs(hit.docs[:1, :2].ravel()))
        assert refs == {f"{base / 'a.jsonl.gz'}:1", f"{base / 'b.jsonl.zst'}:1"}
        hit = idx.lookup(ngram_hashes(texts[5], n), n)
        assert (hit.doc_freq == 3).all() or (np.unique(hit.doc_freq) >= 3).all()
    info = CliRunner().invoke(app, ["index-info", str(tmp_path / "idx")], env={"COLUMNS": "250"})
    assert info.exit_code == 0 and HASH_NAME in info.output and "c.parquet" in info.output
    st = idx.manifest["ngram_storage"]
    rate = idx.manifest["counts"]["ngrams"]["13"]["false_positive_rate"]
    assert f"{st['key_bits']}-bit keys" in info.output and f"{rate:.1e} per query n-gram" in info.output
    # the real entry point prints user errors without a traceback and exits 2
    proc = subprocess.run([sys.executable, "-m", "tcqa_data", "index-corpus", str(base), "--out",
                           str(tmp_path / "idx"), "--ngram", "13", "--no-minhash", "--quiet",
                           "--num-buckets", "16"],
                          capture_output=True, text=True, cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.returncode == 2 and "other parameters" in proc.stderr and "Traceback" not in proc.stderr


def test_hf_dataset_input(tmp_path, wiki_lines, monkeypatch):
    """--hf-dataset streams through `datasets` (a local folder here: no network in tests)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    folder = tmp_path / "hfds"
    folder.mkdir()
    (folder / "train.jsonl").write_text("".join(wiki_lines[:4]), encoding="utf-8")
    m = build_index([], tmp_path / "idx", hf_dataset=str(folder), minhash=False, **SMALL)
    assert m["counts"]["docs"] == 4 and m["inputs"][0]["format"] == "hf"
    idx = NgramIndex.open(tmp_path / "idx")
    text = json.loads(wiki_lines[2])["text"]
    hit = idx.lookup(ngram_hashes(text, 13), 13)
    assert hit.found.all() and idx.doc_refs([2]) == [f"{folder}:train:3"]


def test_arrow_repeated_string_is_the_same_array_as_one_string_per_row():
    """docs.parquet's input column is built from one encoded copy of the path, not one per row:
    the same Arrow array (so the same file bytes) as ``arrow_strings`` of the repeated value."""
    from tcqa_data.decontam.build.map import arrow_repeated_string, arrow_strings

    cases = (("/data/ü/part-0001.jsonl", 7), ("", 4), ("x", 0), ("hf://org/set/cfg:train", 50_000))
    for value, count in cases:
        got = arrow_repeated_string(value, count)
        assert got.equals(arrow_strings([value] * count)), (value, count)
        assert got.to_pylist()[:3] == [value] * min(count, 3)
