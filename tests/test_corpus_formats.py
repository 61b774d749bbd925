"""The formats the big open corpora ship in, on real wiki text: Dolma's ``documents/*.json.gz``,
JSON lines under ``.json``/``.ndjson`` with bzip2 and xz, compression told by the first bytes, a
``datasets`` ``save_to_disk`` folder (Arrow IPC), nested text fields and each ``--preset`` layout."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from test_stream import bench  # noqa: F401 - fixture

from tcqa_data.decontam.readers import iter_documents, iter_normalized_batches, resolve_inputs
from tcqa_data.decontam.readers.presets import PRESETS, text_field_for
from tcqa_data.errors import ConfigError, InputError

N = 24


@pytest.fixture(scope="module")
def wiki_rows(wiki_sample: Path) -> list[dict]:
    with open(wiki_sample, encoding="utf-8") as fh:
        return [json.loads(fh.readline()) for _ in range(N)]


def _lines(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")


def _dolma(row: dict, source: str = "wikipedia") -> dict:
    """A wiki article as a Dolma document (dolma's documents format, v1.x)."""
    return {"id": row["id"], "text": row["text"], "source": source, "added": "2023-04-02T00:00:00.000Z",
            "created": "2022-03-01T00:00:00.000Z", "metadata": {"title": row["title"], "url": row["url"],
                                                                "length": len(row["text"])}}


def _texts(specs: list[str], text_field: str = "text") -> list[tuple[str, str]]:
    return [(d.ref, d.text) for inp in resolve_inputs(specs) for d in iter_documents(inp, text_field)]


def test_dolma_documents_folder_is_read(tmp_path, wiki_rows):
    docs = tmp_path / "dolma" / "documents"
    docs.mkdir(parents=True)
    for k in range(2):
        part = wiki_rows[k * N // 2:(k + 1) * N // 2]
        (docs / f"part-{k:04d}.json.gz").write_bytes(gzip.compress(_lines([_dolma(r) for r in part])))
    inputs = resolve_inputs([str(docs)])
    assert [(Path(i.path).name, i.format) for i in inputs] == [("part-0000.json.gz", "jsonl.gz"),
                                                                ("part-0001.json.gz", "jsonl.gz")]
    got = _texts([str(docs / "part-0001.json.gz")], text_field_for("dolma", None))
    assert [t for _, t in got] == [r["text"] for r in wiki_rows[N // 2:]]
    assert got[0][0] == f"{docs / 'part-0001.json.gz'}:1"  # refs stay file:line
    # the compiled reader takes them too, with the same lines
    rows = [r for b in iter_normalized_batches(inputs[0]) for r in b.rows.tolist()]
    assert rows == list(range(1, N // 2 + 1))


@pytest.mark.parametrize("name,compress", [
    ("c.jsonl.bz2", bz2.compress), ("c.ndjson.xz", lzma.compress), ("c.json.zst", zstandard.compress),
    ("c.ndjson", lambda b: b)])
def test_json_lines_names_and_compressions(tmp_path, wiki_rows, name, compress):
    path = tmp_path / name
    path.write_bytes(compress(_lines(wiki_rows)))
    got = _texts([str(tmp_path)])
    assert [t for _, t in got] == [r["text"] for r in wiki_rows]
    assert [ref for ref, _ in got] == [f"{path}:{k}" for k in range(1, N + 1)]
    # the compiled reader gives the same documents, line for line
    (inp,) = resolve_inputs([str(path)])
    batches = list(iter_normalized_batches(inp, batch_chars=50_000))
    assert [r for b in batches for r in b.rows.tolist()] == list(range(1, N + 1))


def test_compression_is_told_by_first_bytes_not_name(tmp_path, wiki_rows):
    gz_named_plain = tmp_path / "a.jsonl"
    gz_named_plain.write_bytes(gzip.compress(_lines(wiki_rows[:5])))
    plain_named_gz = tmp_path / "b.json.gz"  # a download that was decompressed on the way
    plain_named_gz.write_bytes(_lines(wiki_rows[5:9]))
    inputs = resolve_inputs([str(tmp_path)])
    assert [i.format for i in inputs] == ["jsonl.gz", "jsonl"]
    assert [t for _, t in _texts([str(tmp_path)])] == [r["text"] for r in wiki_rows[:9]]


def test_truncated_bz2_and_xz_stop_with_one_line(tmp_path, wiki_rows):
    for name, compress, kind in (("t.jsonl.bz2", bz2.compress, "bzip2"),
                                 ("t.ndjson.xz", lzma.compress, "xz")):
        path = tmp_path / name
        data = compress(_lines(wiki_rows))
        path.write_bytes(data[:len(data) // 2])
        with pytest.raises(InputError, match=rf"{name}: truncated or corrupt {kind} file"):
            _texts([str(path)])


def test_datasets_save_to_disk_folder(tmp_path, wiki_rows):
    import datasets

    ds = datasets.Dataset.from_list(wiki_rows)
    folder = tmp_path / "saved"
    ds.save_to_disk(str(folder), num_shards=2)
    dd = datasets.DatasetDict({"train": ds.select(range(4)), "test": ds.select(range(4, 6))})
    dd.save_to_disk(str(tmp_path / "dict"))
    inputs = resolve_inputs([str(folder)])
    assert [(Path(i.path).name, i.format) for i in inputs] == [("data-00000-of-00002.arrow", "arrow"),
                                                                ("data-00001-of-00002.arrow", "arrow")]
    got = _texts([str(folder)])
    assert [t for _, t in got] == [r["text"] for r in wiki_rows]
    assert got[-1][0] == f"{inputs[1].path}:{N - N // 2}"  # rows numbered per file
    # a DatasetDict folder: its splits' data files, not its metadata
    got = _texts([str(tmp_path / "dict")])
    assert sorted(t for _, t in got) == sorted(r["text"] for r in wiki_rows[:6])
    # an Arrow IPC file (not stream) and an id column
    table = pa.Table.from_pylist(wiki_rows[:3])
    with pa.OSFile(str(tmp_path / "f.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    (inp,) = resolve_inputs([str(tmp_path / "f.arrow")])
    assert [d.ref for d in iter_documents(inp, id_field="title")] == [r["title"] for r in wiki_rows[:3]]
    with pytest.raises(InputError, match=r"f\.arrow: missing text field; columns present: .*'body'"):
        list(iter_documents(inp, "body"))


def test_nested_text_fields_jsonl_and_parquet(tmp_path, wiki_rows):
    nested = [{"id": r["id"], "metadata": {"text": r["text"], "lang": "en"}} for r in wiki_rows]
    (tmp_path / "n.jsonl").write_bytes(_lines(nested))
    pq.write_table(pa.Table.from_pylist(nested), tmp_path / "n.parquet", row_group_size=7)
    want = [r["text"] for r in wiki_rows]
    for name in ("n.jsonl", "n.parquet"):
        got = _texts([str(tmp_path / name)], "metadata.text")
        assert [t for _, t in got] == want, name
        assert got[3][0] == f"{tmp_path / name}:4"
    # a field named with the dot itself wins over the nested one
    (tmp_path / "d.jsonl").write_bytes(_lines([{"metadata.text": "literal", "metadata": {"text": "x"}}]))
    assert _texts([str(tmp_path / "d.jsonl")], "metadata.text") == [(f"{tmp_path / 'd.jsonl'}:1", "literal")]
    (tmp_path / "m.jsonl").write_bytes(_lines([{"metadata": {"body": "x"}}]))
    with pytest.raises(InputError, match=r"m\.jsonl:1: missing text field; fields present: 'body' "
                                         r"\(field 'metadata\.text'\)"):
        _texts([str(tmp_path / "m.jsonl")], "metadata.text")


def _fineweb(row: dict) -> dict:
    return {"text": row["text"], "id": f"<urn:uuid:{row['id']}>", "dump": "CC-MAIN-2024-10",
            "url": row["url"],
            "date": "2024-02-21T00:00:00Z", "file_path": "s3://commoncrawl/crawl-data/x.warc.gz",
            "language": "en", "language_score": 0.97, "token_count": len(row["text"].split())}


def _dclm(row: dict) -> dict:
    return {"text": row["text"], "url": row["url"], "warcinfo": "isPartOf: CC-MAIN-2022-49",
            "metadata": {"Content-Length": str(len(row["text"])), "WARC-Type": "response"},
            "fasttext_openhermes_reddit_eli5_vs_rw_v2_bigram_200k_train_prob": 0.5}


def _redpajama(row: dict) -> dict:
    return {"url": row["url"], "date_download": "2023-06-01T00:00:00Z", "digest": "sha1:" + row["id"],
            "length": len(row["text"]), "nlines": row["text"].count("\n") + 1,
            "source_domain": "wikipedia.org",
            "title": row["title"], "raw_content": row["text"], "cc_segment": "crawl-data/x",
            "original_nlines": 1, "original_length": 1, "line_ids": [0], "language": "en",
            "language_score": 0.9, "perplexity": 300.0, "bucket": "head"}


def test_each_preset_reads_its_layout(tmp_path, wiki_rows):
    part = wiki_rows[:6]
    want = [r["text"] for r in part]
    written = {
        "dolma": ("documents/p.json.gz", gzip.compress(_lines([_dolma(r) for r in part]))),
        "dclm": ("shard/p.jsonl.zst", zstandard.compress(_lines([_dclm(r) for r in part]))),
        "redpajama-v2": ("documents/2023-06/0000/en_head.json.gz",
                         gzip.compress(_lines([_redpajama(r) for r in part]))),
    }
    assert set(PRESETS) == set(written) | {"fineweb"}
    for preset, (rel, data) in written.items():
        path = tmp_path / preset / rel
        path.parent.mkdir(parents=True)
        path.write_bytes(data)
    fw = tmp_path / "fineweb" / "data" / "CC-MAIN-2024-10"
    fw.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([_fineweb(r) for r in part]), fw / "000_00000.parquet")
    for preset in PRESETS:
        field = text_field_for(preset, None)
        assert [t for _, t in _texts([str(tmp_path / preset)], field)] == want, preset
    # the default field misses RedPajama's text, with the fields it has
    with pytest.raises(InputError, match=r"missing text field; fields present: 'url'.*'raw_content'"):
        _texts([str(tmp_path / "redpajama-v2")], text_field_for(None, None))
    assert text_field_for("redpajama-v2", "title") == "title"  # --text-field wins
    with pytest.raises(ConfigError, match=r"--preset 'pile': choose one of"):
        text_field_for("pile", None)


def test_cli_index_corpus_reads_a_dolma_file_and_folder(tmp_path, wiki_rows):
    from typer.testing import CliRunner

    from tcqa_data.cli import app
    from tcqa_data.decontam.index_files import read_manifest

    docs = tmp_path / "dolma" / "documents"
    docs.mkdir(parents=True)
    for k in range(2):
        rows = [_dolma(r) for r in wiki_rows[k * 4:(k + 1) * 4]]
        (docs / f"part-{k:04d}.json.gz").write_bytes(gzip.compress(_lines(rows)))
    out = tmp_path / "idx"
    result = CliRunner().invoke(app, ["index-corpus", str(docs / "part-0000.json.gz"), str(docs), "--out",
                                      str(out), "--preset", "dolma", "--no-minhash", "--workers", "1",
                                      "--quiet"])
    assert result.exit_code == 0, result.output
    assert read_manifest(out)["counts"]["docs"] == 8  # the file named twice is read once


def test_purify_keeps_bz2_xz_and_nested_fields(wiki_sample, bench, tmp_path):  # noqa: F811
    from test_stream import WIKI_DOCS, injected_corpus

    from tcqa_data.prep.purify import purify

    (tmp_path / "c").mkdir()
    plain, _ = injected_corpus(wiki_sample, bench, tmp_path / "c")
    lines = plain.read_bytes().splitlines(keepends=True)
    raw = b"".join(lines[:20] + lines[WIKI_DOCS:])  # 20 clean articles and every one with benchmark text
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.jsonl").write_bytes(raw)
    (src / "b.jsonl.bz2").write_bytes(bz2.compress(raw))
    (src / "c.ndjson.xz").write_bytes(lzma.compress(raw))
    out = tmp_path / "out"
    report = purify([str(src)], ["mc_taco", "squad_completion"], out, data_files=bench, quiet=True)
    assert report["totals"]["contaminated_docs"] > 0
    cleaned = (out / "a.jsonl").read_bytes()
    assert cleaned != raw
    # the same bytes but for the refs, which name each record's own file
    for name, decompress in (("b.jsonl.bz2", bz2.decompress), ("c.ndjson.xz", lzma.decompress)):
        got = decompress((out / name).read_bytes())
        assert got.replace(name.encode() + b":", b"a.jsonl:") == cleaned, name
    # the same corpus with its text nested (metadata.text): the same texts come out, in place
    records = [json.loads(x) for x in raw.decode("utf-8").splitlines()]
    nested = src.parent / "nested"
    nested.mkdir()
    (nested / "n.jsonl").write_bytes(_lines([{"title": r["title"], "metadata": {"text": r["text"]}}
                                             for r in records]))
    purify([str(nested)], ["mc_taco", "squad_completion"], tmp_path / "out_n", data_files=bench,
           text_field="metadata.text", quiet=True)
    got = [json.loads(x) for x in (tmp_path / "out_n" / "n.jsonl").read_text(encoding="utf-8").splitlines()]
    want = [json.loads(x) for x in cleaned.decode("utf-8").splitlines()]
    assert [g["metadata"]["text"] for g in got] == [w["text"] for w in want]
    assert [g.get("purify_piece") for g in got] == [w.get("purify_piece") for w in want]
    assert [g.get("purify_doc_ref", "").replace("n.jsonl:", "") for g in got] == \
        [w.get("purify_doc_ref", "").replace("a.jsonl:", "") for w in want]


def test_a_folders_json_document_is_not_read_as_json_lines(tmp_path, wiki_rows):
    (tmp_path / "docs.json").write_bytes(_lines(wiki_rows[:3]))  # JSON lines under .json
    (tmp_path / "stats.json").write_text(json.dumps({"docs": 3, "source": "wiki"}, indent=2))
    (tmp_path / "ids.json").write_text(json.dumps([r["id"] for r in wiki_rows[:3]]))
    skipped = []
    assert [Path(i.path).name for i in resolve_inputs([str(tmp_path)], skipped=skipped)] == ["docs.json"]
    assert sorted(Path(s["path"]).name for s in skipped) == ["ids.json", "stats.json"]
    assert all(s["reason"].startswith("a JSON document, not JSON lines") for s in skipped)
    # named explicitly, it is read, and its first line is the error
    with pytest.raises(InputError, match=r"stats\.json:1: invalid JSON"):
        _texts([str(tmp_path / "stats.json")])
