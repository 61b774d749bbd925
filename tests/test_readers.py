"""Corpus readers: formats, refs, shards and every bad-input message, on real wiki text."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from tcqa_data.decontam.readers import jsonl_batches
from tcqa_data.decontam.readers.documents import Document, SkipStats, iter_documents
from tcqa_data.decontam.readers.hf_stream import iter_hf_documents
from tcqa_data.decontam.readers.inputs import FORMATS, CorpusInput, resolve_inputs, split_input
from tcqa_data.errors import InputError, TcqaError

N_ARTICLES = 40


@pytest.fixture(scope="module")
def wiki_rows(wiki_sample: Path) -> list[dict]:
    rows = []
    with open(wiki_sample, encoding="utf-8") as fh:
        for line in fh:
            rows.append(json.loads(line))
            if len(rows) == N_ARTICLES:
                break
    return rows


@pytest.fixture(scope="module")
def wiki_jsonl(tmp_path_factory, wiki_rows) -> Path:
    path = tmp_path_factory.mktemp("wiki") / "wiki.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in wiki_rows), encoding="utf-8")
    return path


def _inp(path: Path) -> CorpusInput:
    (inp,) = resolve_inputs([str(path)])
    return inp


def _docs(path: Path, **kw) -> list[Document]:
    return list(iter_documents(_inp(path), **kw))


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


# --- formats and refs ------------------------------------------------------------------------


def test_all_formats_read_the_same_documents(tmp_path, wiki_rows, wiki_jsonl):
    raw = wiki_jsonl.read_bytes()
    gz = _write(tmp_path / "w.jsonl.gz", gzip.compress(raw))
    zst = _write(tmp_path / "w.jsonl.zst", zstandard.ZstdCompressor().compress(raw))
    pq.write_table(pa.Table.from_pylist(wiki_rows), tmp_path / "w.parquet", row_group_size=7)
    texts = [r["text"] for r in wiki_rows]

    plain = _docs(wiki_jsonl)
    assert [d.text for d in plain] == texts
    assert plain[0].ref == f"{_inp(wiki_jsonl).path}:1" and plain[-1].row == N_ARTICLES
    for path in (gz, zst, tmp_path / "w.parquet"):
        docs = _docs(path)
        assert [d.text for d in docs] == texts, path
        assert [d.ref for d in docs] == [f"{_inp(path).path}:{i}" for i in range(1, N_ARTICLES + 1)]
    by_id = _docs(tmp_path / "w.parquet", id_field="id")
    assert [d.ref for d in by_id] == [str(r["id"]) for r in wiki_rows]
    assert [d.ref for d in _docs(zst, id_field="title")] == [r["title"] for r in wiki_rows]

    # .txt: one document per file, whole text.
    txt = tmp_path / "article.txt"
    txt.write_text(texts[0], encoding="utf-8")
    assert _docs(txt) == [Document(f"{_inp(txt).path}:1", texts[0], 1)]


def test_multi_frame_zstd(tmp_path, wiki_jsonl):
    raw = wiki_jsonl.read_bytes()
    half = raw.index(b"\n", len(raw) // 2) + 1
    c = zstandard.ZstdCompressor()
    path = _write(tmp_path / "multi.jsonl.zst", c.compress(raw[:half]) + c.compress(raw[half:]))
    assert [d.text for d in _docs(path)] == [d.text for d in _docs(wiki_jsonl)]


def test_resolve_inputs_files_globs_folders(tmp_path):
    (tmp_path / "a" / "deep").mkdir(parents=True)
    for rel in ("a/x.jsonl", "a/deep/y.jsonl.gz", "a/deep/z.parquet", "b.txt", "a/notes.md", "a/.tmp.jsonl"):
        (tmp_path / rel).write_bytes(b"")
    got = resolve_inputs([str(tmp_path / "a"), str(tmp_path / "*.txt"), str(tmp_path / "a" / "x.jsonl")])
    assert [os.path.relpath(i.path, tmp_path) for i in got] == [
        "a/deep/y.jsonl.gz", "a/deep/z.parquet", "a/x.jsonl", "b.txt"]  # sorted, deduplicated
    assert [i.format for i in got] == ["jsonl.gz", "parquet", "jsonl", "txt"]
    assert all(i.size == 0 for i in got)

    with pytest.raises(InputError, match=r"nothing\.jsonl: no such file or folder"):
        resolve_inputs([str(tmp_path / "nothing.jsonl")])
    with pytest.raises(InputError, match=r"\*\.csv: pattern matches no corpus files"):
        resolve_inputs([str(tmp_path / "*.csv")])
    with pytest.raises(InputError, match=r"notes\.md: unsupported file type"):
        resolve_inputs([str(tmp_path / "a" / "notes.md")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match=r"empty: folder has no corpus files"):
        resolve_inputs([str(tmp_path / "empty")])


def test_resolve_inputs_names_a_broken_link_in_a_folder(tmp_path):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "ok.jsonl").write_bytes(b"")
    (tmp_path / "c" / "gone.jsonl").symlink_to(tmp_path / "missing.jsonl")
    with pytest.raises(InputError, match=r"gone\.jsonl: cannot read it: .*symbolic link to a missing file"):
        resolve_inputs([str(tmp_path / "c")])


# --- bad input --------------------------------------------------------------------------------


GOOD = b'{"text": "A good document."}\n'


@pytest.mark.parametrize("line, reason, message", [
    (b'{"text": "unterminated}\n', "invalid_json",
     r"bad\.jsonl:2: invalid JSON: Unterminated string starting at \(column 10\)"),
    (b'["text", "an array"]\n', "not_object", r"bad\.jsonl:2: expected a JSON object, got an array"),
    (b'{"body": "x", "id": 3}\n', "missing_field",
     r"bad\.jsonl:2: missing text field; fields present: 'body', 'id' \(field 'text'\)"),
    (b'{"text": 42}\n', "non_string_text",
     r"bad\.jsonl:2: text is a number, expected a string \(field 'text'\)"),
    (b'{"text": null}\n', "non_string_text", r"bad\.jsonl:2: text is null, expected a string"),
    (b'{"text": "caf\xe9"}\n', "invalid_utf8",
     r"bad\.jsonl:2: non-UTF-8 bytes at byte offset 13 of the line \(offset 42 in the file\)"),
])
def test_bad_line_messages_and_skip(tmp_path, line, reason, message):
    path = _write(tmp_path / "bad.jsonl", GOOD + line + GOOD)
    with pytest.raises(InputError, match=message):
        _docs(path)
    stats = SkipStats()
    docs = _docs(path, on_error="skip", stats=stats)
    assert [d.ref for d in docs] == [f"{path}:1", f"{path}:3"]
    assert stats.counts == {reason: 1}
    assert stats.examples and stats.examples[0].startswith(f"{reason}: {path}:2: ")


def test_empty_documents_and_blank_lines_are_skipped_and_counted(tmp_path):
    path = _write(tmp_path / "e.jsonl", GOOD + b'{"text": ""}\n\n{"text": "  \\n "}\n' + GOOD)
    stats = SkipStats()
    docs = _docs(path, stats=stats)  # on_error="raise": empty docs are not errors
    assert [d.row for d in docs] == [1, 5]
    assert stats.counts == {"empty_text": 2, "blank_line": 1}


def test_id_field_errors(tmp_path):
    path = _write(tmp_path / "ids.jsonl", b'{"text": "a", "id": 7}\n{"text": "b"}\n')
    with pytest.raises(InputError, match=r"ids\.jsonl:2: id field is missing \(field 'id'\)"):
        _docs(path, id_field="id")
    assert [d.ref for d in _docs(path, id_field="id", on_error="skip")] == ["7"]


@pytest.mark.parametrize("suffix, compress", [
    (".jsonl.gz", gzip.compress),
    (".jsonl.zst", lambda b: zstandard.ZstdCompressor().compress(b)),
])
def test_truncated_compressed_files(tmp_path, wiki_jsonl, suffix, compress):
    raw = wiki_jsonl.read_bytes()
    data = compress(raw)
    path = _write(tmp_path / f"cut{suffix}", data[: len(data) // 2])
    with pytest.raises(InputError, match=r"cut\.jsonl\.(gz|zst): truncated or corrupt (gzip|zstd) file .*; "
                                          r"\d+ complete lines were read before the damage"):
        _docs(path)
    stats = SkipStats()
    docs = _docs(path, on_error="skip", stats=stats)
    whole = _docs(wiki_jsonl)
    assert 0 < len(docs) < len(whole)
    assert [d.text for d in docs] == [d.text for d in whole[: len(docs)]]  # only complete lines
    assert stats.counts == {"truncated_input": 1}
    assert f"{len(docs)} complete lines" in stats.examples[0]


def test_corrupt_gzip(tmp_path):
    # the first bytes decide: a .gz name on bytes that are not gzip is read as plain JSON lines
    path = _write(tmp_path / "junk.jsonl.gz", b"this is not gzip at all\n")
    with pytest.raises(InputError, match=r"junk\.jsonl\.gz:1: invalid JSON"):
        _docs(path)
    path = _write(tmp_path / "cut.jsonl.gz", gzip.compress(b'{"text": "a b c"}\n' * 50)[:40])
    with pytest.raises(InputError, match=r"cut\.jsonl\.gz: truncated or corrupt gzip file"):
        _docs(path)


def test_parquet_errors(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"body": ["x"], "n": [1]}), path)
    with pytest.raises(InputError, match=r"t\.parquet: missing text field; columns present: 'body', 'n' "
                                         r"\(field 'text'\)"):
        _docs(path)
    with pytest.raises(InputError, match=r"t\.parquet: text column has type int64, expected string"):
        _docs(path, text_field="n")
    pq.write_table(pa.table({"text": ["one", None, "three"]}), path)
    with pytest.raises(InputError, match=r"t\.parquet:2: text is null, expected a string"):
        _docs(path)
    assert [d.ref for d in _docs(path, on_error="skip")] == [f"{path}:1", f"{path}:3"]
    bad = _write(tmp_path / "broken.parquet", b"PAR1 not really")
    with pytest.raises(InputError, match=r"broken\.parquet: not a readable Parquet file"):
        _docs(bad)


def test_txt_non_utf8_names_line_and_offset(tmp_path):
    path = _write(tmp_path / "t.txt", b"first line\nsecond \xff line\n")
    with pytest.raises(InputError, match=r"t\.txt:2: non-UTF-8 bytes at byte offset 7 of the line "
                                         r"\(offset 18 in the file\)"):
        _docs(path)
    empty = _write(tmp_path / "e.txt", b" \n\n")
    stats = SkipStats()
    assert _docs(empty, stats=stats) == [] and stats.counts == {"empty_text": 1}


def test_skip_stats_merge_and_dict():
    a, b = SkipStats(max_examples=2), SkipStats()
    a.add("invalid_json", "f:1: x")
    b.add("invalid_json", "g:2: y")
    b.add("empty_text")
    b.add("invalid_json", "g:9: z")
    a.merge(b)
    assert a.counts == {"invalid_json": 3, "empty_text": 1} and a.total == 4
    assert a.examples == ["invalid_json: f:1: x", "invalid_json: g:2: y"]
    assert SkipStats.from_dict(a.to_dict()).to_dict() == a.to_dict()


def test_on_error_is_checked(wiki_jsonl):
    with pytest.raises(ValueError, match="on_error"):
        _docs(wiki_jsonl, on_error="ignore")


# --- shards -----------------------------------------------------------------------------------


def test_jsonl_shards_equal_whole_file(tmp_path, wiki_jsonl):
    # Awkward content: blank line, CRLF line, bad line (skipped), no newline at the end.
    raw = wiki_jsonl.read_bytes()
    lines = raw.splitlines(keepends=True)
    raw = b"".join(lines[:5]) + b"\n" + lines[5].rstrip(b"\n") + b"\r\n" + b"{oops\n" + b"".join(lines[6:])
    path = _write(tmp_path / "s.jsonl", raw.rstrip(b"\n"))
    inp = _inp(path)
    whole_stats = SkipStats()
    whole = list(iter_documents(inp, on_error="skip", stats=whole_stats))
    assert len(whole) == N_ARTICLES and whole[-1].row == N_ARTICLES + 2
    line_starts = [0] + [i + 1 for i, b in enumerate(raw) if b == 10]
    for target in (1000, 50_000, 123_457, line_starts[7] - 1, line_starts[7], line_starts[7] + 1,
                   inp.size - 1, inp.size):
        shards = split_input(inp, target)
        assert len(shards) == -(-inp.size // target)
        assert all(s.kind == "bytes" for s in shards) or len(shards) == 1
        stats = SkipStats()
        got = [d for s in shards for d in iter_documents(s, on_error="skip", stats=stats)]
        assert got == whole, target
        assert stats.counts == whole_stats.counts


def test_tiny_shards_first_lines(tmp_path):
    path = _write(tmp_path / "tiny.jsonl", b'{"text": "a"}\n\n{"text": "bb"}\n{"text": "c"}')
    inp = _inp(path)
    shards = split_input(inp, 1)
    assert len(shards) == inp.size
    docs = [d for s in shards for d in iter_documents(s)]
    assert [(d.text, d.row) for d in docs] == [("a", 1), ("bb", 3), ("c", 4)]
    # A shard holds the lines whose first byte it covers.
    owners = {d.row: s.index for s in shards for d in iter_documents(s)}
    assert owners == {1: 0, 3: 15, 4: 30}


def test_parquet_shards_by_row_groups(tmp_path, wiki_rows):
    path = tmp_path / "w.parquet"
    pq.write_table(pa.Table.from_pylist(wiki_rows), path, row_group_size=3)
    inp = _inp(path)
    whole = list(iter_documents(inp, id_field="id"))
    for target in (1, 100_000, 10**9):
        shards = split_input(inp, target)
        assert all(s.kind == "row_groups" for s in shards)
        assert [d for s in shards for d in iter_documents(s, id_field="id")] == whole
        assert [d.row for s in shards for d in iter_documents(s)] == list(range(1, N_ARTICLES + 1))
    assert len(split_input(inp, 1)) == -(-N_ARTICLES // 3)


def test_compressed_and_txt_inputs_are_one_shard(tmp_path, wiki_jsonl):
    gz = _write(tmp_path / "w.jsonl.gz", gzip.compress(wiki_jsonl.read_bytes()))
    txt = _write(tmp_path / "w.txt", b"some text")
    for path in (gz, txt):
        (shard,) = split_input(_inp(path), 10)
        assert shard.kind == "whole"
        assert list(iter_documents(shard)) == _docs(path)


# --- Hugging Face -----------------------------------------------------------------------------


def test_hf_unreachable_says_to_pass_local_files(monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'someone/corpus' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(TcqaError, match=r"could not load Hugging Face dataset 'someone/corpus/en'.*"
                                        r"pass local files"):
        list(iter_hf_documents("someone/corpus", "en"))


def test_hf_streams_a_local_dataset_folder(tmp_path, wiki_rows, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = tmp_path / "ds"
    folder.mkdir()
    (folder / "train.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in wiki_rows[:5]), encoding="utf-8")
    docs = list(iter_hf_documents(str(folder), split="train", id_field="title"))
    assert [d.text for d in docs] == [r["text"] for r in wiki_rows[:5]]
    assert [d.ref for d in docs] == [r["title"] for r in wiki_rows[:5]]
    with pytest.raises(InputError, match=r"train:1: missing text field.*\(field 'body'\)"):
        list(iter_hf_documents(str(folder), split="train", text_field="body"))


def test_module_lists_formats():
    assert {fmt for _, fmt in FORMATS} == {"jsonl", "jsonl.gz", "jsonl.zst", "jsonl.bz2", "jsonl.xz",
                                           "parquet", "arrow", "txt"}


# --- the compiled JSONL reader (n-gram build) --------------------------------------------------

# Lines the compiled reader must decode itself, and lines it must leave to the Python reader;
# both kinds must come out exactly as iter_documents reads them.
CRAFTED = [
    b'{"text": "esc \\n\\t\\" \\\\ \\/ \\b\\f\\r \\u0041\\u00e9\\u20ac \\u0000 nul a b c d e f g h"}',
    b'{"text": "pair \\ud83d\\ude00 lone \\ud800 x \\udc00 y \\ud83d\\u0041 \\uDBFF\\uDFFF end a b c d"}',
    b'{"text": "uni\\u00a0ws\\u2003em\\u3000id\\u0085nel\\u2028ls\\u1680og\\u205f \xc2\xa0raw\xe2\x80\x83raw'
    b'\xe3\x80\x80 \xf0\x9f\x98\x80 \xe2\x80\x8b zwsp \xc2\x85 a b c d e f g h i j k l m n o"}',
    b'{"meta": {"text": "nested", "more": [{"text": 1}]}, "text": "outer text a b c d e f g h i j k l m n"}',
    b'{"a": [1, 2.5e-3, -0, 1E+9, true, false, null, {"b": [[]], "c": {}}], "text": "after values a b c"}',
    b'  {"text" : "spaces around a b c d e f g h i j k l m n o p q r s t u"}  \t',
    b'{"text": "crlf line a b c d e f g h i j k l m n o p q r s t u v"}\r',
    b'{"text": "UPPER Case MiXeD, Punct-uation! it\'s a b c d e f g h i j k l m {x} [y] ~z~"}',
    b'{"text": "' + b"long" * 40 + b' token and ' + b"q" * 70 + b' more a b c d e f g h i j k l m"}',
    b'{"id": "x", "text": "!!! ??? ..."}', b'{"text": "   \\u00a0 \\n \\u3000 "}', b'{"text": ""}',
    b"", b"   ", b"\r", b" \x0c ",
]
PYTHON_LINES = [
    b'{"text": "first a b c d e f g h i j k l m n o p", "text": "second q r s t u v w x y z a b c"}',
    b'{"text": 5}', b'{"text": null}', b'{"txt": "no"}', b"[1, 2]", b'"str"', b"{}",
    b'{"text": "bad json"', b'{"text": "x"} trailing', b'{"text": "ctrl\x01char"}', b'{"text": "\xffutf8"}',
    b'{"a": NaN, "text": "nan value a b c d e f g h i j k l m n o p q"}',
    b'{"te\\u0078t": "escaped key a b c d e f g h i j k l m n o p q r s t"}',
    b'{"text": "raw key first", "t\\u0065xt": "escaped key last wins a b c d e f g h i j k l m"}',
    b'{"n": ' + b"7" * 5000 + b', "text": "a 5000-digit number"}',
    b'{"a": 01, "text": "leading zero a b c d e f g h i j k l m n o p"}',
    b'{"a": 1,, "text": "two commas"}', b'{"text": "trailing comma",}', b'\x0b{"text": "vt first"}',
    b'{"text": "bad escape \\x41"}', b'{"text": "short \\u12"}', b'{"text": "surrogate \\ud83d\\u12"}',
    b'{"deep": ' + b"[" * 100 + b"]" * 100 + b', "text": "deep a b c d e f g h i j k l m n"}',
    b'{"text": "raw surrogate \xed\xa0\x80 bytes"}', b'{"text": "overlong \xc0\xaf"}',
    b'\xef\xbb\xbf{"text": "bom not on line 1"}',
]


@pytest.fixture
def kernels_on(monkeypatch):
    """The compiled reader runs with the numba kernels on, whatever TCQA_KERNEL says outside."""
    pytest.importorskip("numba")
    monkeypatch.setenv("TCQA_KERNEL", "numba")


def _crafted_corpus(wiki_rows: list[dict]) -> bytes:
    wiki = [json.dumps(r, ensure_ascii=k % 2 == 0).encode() for k, r in enumerate(wiki_rows)]
    lines = [b'\xef\xbb\xbf{"text": "bom on line one a b c d e f g h i j k l m n o p"}']
    for k, extra in enumerate(CRAFTED + PYTHON_LINES):
        lines += [extra, wiki[k % len(wiki)]]
    return b"\n".join(lines) + b'\n{"text": "last line without a newline a b c d e f g h i j k l m"}'


def _python_batches(docs: list[Document], batch_chars: int) -> list[list[Document]]:
    batches, cur, size = [], [], 0
    for d in docs:
        cur.append(d)
        size += len(d.text)
        if size >= batch_chars:
            batches.append(cur)
            cur, size = [], 0
    return batches + ([cur] if cur else [])


def _assert_batches_equal(fast: list, docs: list[Document], batch_chars: int) -> None:
    from tcqa_data.decontam.core.hashing import batch_ngram_hashes, hash_normalized

    slow = _python_batches(docs, batch_chars)
    assert len(fast) == len(slow)
    for fb, sb in zip(fast, slow, strict=True):
        assert fb.rows.tolist() == [d.row for d in sb]
        assert fb.chars == sum(len(d.text) for d in sb)
        want = batch_ngram_hashes([d.text for d in sb], [1, 3, 13])
        got = hash_normalized(fb.data, fb.doc_start, [1, 3, 13], 0)
        for n in (1, 3, 13):
            assert np.array_equal(got[n][0], want[n][0]) and np.array_equal(got[n][1], want[n][1]), n


@pytest.mark.parametrize("suffix, compress", [
    (".jsonl", lambda b: b), (".jsonl.gz", gzip.compress),
    (".jsonl.zst", lambda b: zstandard.ZstdCompressor().compress(b)),
])
@pytest.mark.parametrize("batch_chars, block_bytes", [(4_000_000, 1 << 22), (20_000, 3000)])
def test_normalized_batches_equal_python_reader(tmp_path, wiki_rows, monkeypatch, kernels_on, suffix,
                                                 compress, batch_chars, block_bytes):
    monkeypatch.setattr(jsonl_batches, "_BLOCK_BYTES", block_bytes)  # small: lines span blocks
    raw = _crafted_corpus(wiki_rows)
    inp = _inp(_write(tmp_path / f"c{suffix}", compress(raw)))
    assert jsonl_batches.normalized_batches_supported(inp.format, "text", None, "janitor")
    slow_stats, fast_stats = SkipStats(), SkipStats()
    docs = list(iter_documents(inp, on_error="skip", stats=slow_stats))
    deferred = []
    python_line = jsonl_batches._jsonl_document

    def recording_python_line(ctx, raw, *args):
        deferred.append(raw.rstrip(b"\r\n"))
        return python_line(ctx, raw, *args)

    monkeypatch.setattr(jsonl_batches, "_jsonl_document", recording_python_line)
    fast = list(jsonl_batches.iter_normalized_batches(inp, "text", "skip", fast_stats, batch_chars))
    _assert_batches_equal(fast, docs, batch_chars)
    assert fast_stats.to_dict() == slow_stats.to_dict()
    assert slow_stats.counts["blank_line"] == 4 and slow_stats.counts["empty_text"] == 2
    # The compiled pass decoded every wiki line and every crafted valid line itself.
    assert set(deferred) == set(PYTHON_LINES) | {raw.split(b"\n")[0]}


def test_normalized_batches_of_shards_equal_whole_file(tmp_path, wiki_rows, monkeypatch, kernels_on):
    monkeypatch.setattr(jsonl_batches, "_BLOCK_BYTES", 5000)
    inp = _inp(_write(tmp_path / "s.jsonl", _crafted_corpus(wiki_rows)))
    docs = list(iter_documents(inp, on_error="skip"))
    for target in (700, 20_000, 123_457, inp.size):
        stats = SkipStats()
        fast = [b for s in split_input(inp, target)
                for b in jsonl_batches.iter_normalized_batches(s, "text", "skip", stats, 10**9)]
        assert [r for b in fast for r in b.rows.tolist()] == [d.row for d in docs], target
        assert sum(b.chars for b in fast) == sum(len(d.text) for d in docs)


@pytest.mark.parametrize("line, message", [
    (b'{"text": "unterminated}\n', r"bad\.jsonl:2: invalid JSON: Unterminated string starting at \(column"),
    (b'{"text": 42}\n', r"bad\.jsonl:2: text is a number, expected a string \(field 'text'\)"),
    (b'{"text": "caf\xe9"}\n', r"bad\.jsonl:2: non-UTF-8 bytes at byte offset 13 of the line \(offset 42 in "
                                r"the file\)"),
])
def test_normalized_batches_errors_name_file_line_and_field(tmp_path, kernels_on, line, message):
    path = _write(tmp_path / "bad.jsonl", GOOD + line + GOOD)
    with pytest.raises(InputError, match=message):
        list(jsonl_batches.iter_normalized_batches(_inp(path)))


def test_normalized_batches_truncated_gzip_keeps_what_was_read(tmp_path, wiki_jsonl, kernels_on):
    data = gzip.compress(wiki_jsonl.read_bytes())
    inp = _inp(_write(tmp_path / "t.jsonl.gz", data[: len(data) // 2]))
    slow_stats, fast_stats = SkipStats(), SkipStats()
    docs = list(iter_documents(inp, on_error="skip", stats=slow_stats))
    fast = list(jsonl_batches.iter_normalized_batches(inp, "text", "skip", fast_stats, 50_000))
    _assert_batches_equal(fast, docs, 50_000)
    assert fast_stats.to_dict() == slow_stats.to_dict() and "truncated_input" in fast_stats.counts
    with pytest.raises(InputError, match="truncated or corrupt gzip file"):
        list(jsonl_batches.iter_normalized_batches(inp))


def test_normalized_batches_supported_only_where_exact(kernels_on, monkeypatch):
    ok = jsonl_batches.normalized_batches_supported
    assert ok("jsonl.zst", "text", None, "janitor") and ok("jsonl", "body", None, "janitor")
    assert not ok("parquet", "text", None, "janitor") and not ok("txt", "text", None, "janitor")
    assert not ok("jsonl", "text", "id", "janitor") and not ok("jsonl", "text", None, "unicode")
    assert not ok("jsonl", 'te"xt', None, "janitor") and not ok("jsonl", "t\\x", None, "janitor")
    monkeypatch.setenv("TCQA_KERNEL", "numpy")
    assert not ok("jsonl", "text", None, "janitor")
