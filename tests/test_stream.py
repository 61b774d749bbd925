"""Stream mode (``decontaminate --corpus``): no index, one pass, the index mode's PREP_DIR.

Real data: a slice of the wiki sample with MC-TACO test sentences and based-squad contexts
injected (verbatim, re-wrapped into 8-word lines, and edited), scored in both modes.
"""

from __future__ import annotations

import csv
import json
import string
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import assert_same_folder, private_ray

from tcqa_data.errors import ConfigError
from tcqa_data.prep.pipeline import decontaminate

WIKI_DOCS = 300
MC_TACO_ROWS = 600
SQUAD_ROWS = 150


def _rewrap(text: str, words: int = 8) -> str:
    w = text.split()
    return "\n".join(" ".join(w[i:i + words]) for i in range(0, len(w), words))


@pytest.fixture(scope="module")
def bench(mc_taco_test, squad_validation, tmp_path_factory) -> dict[str, dict[str, Path]]:
    """Slices of MC-TACO test and based-squad validation as local data files."""
    root = tmp_path_factory.mktemp("bench")
    mc = root / "mc_taco_test.tsv"
    with open(mc_taco_test, encoding="utf-8") as fh:
        mc.write_text("".join(fh.readline() for _ in range(MC_TACO_ROWS)), encoding="utf-8")
    sq = root / "squad_validation.jsonl"
    with open(squad_validation, encoding="utf-8") as fh:
        sq.write_text("".join(fh.readline() for _ in range(SQUAD_ROWS)), encoding="utf-8")
    return {"mc_taco": {"test": mc}, "squad_completion": {"validation": sq}}


def injected_corpus(wiki_sample: Path, bench: dict[str, dict[str, Path]], out: Path) -> tuple[Path, dict]:
    """``WIKI_DOCS`` wiki articles, then articles with benchmark text pasted in. Returns the file and
    what was injected: verbatim MC-TACO sentences and SQuAD texts, and re-wrapped ones."""
    with open(wiki_sample, encoding="utf-8") as fh:
        wiki = [json.loads(fh.readline()) for _ in range(WIKI_DOCS)]
    rows = list(csv.reader(open(bench["mc_taco"]["test"], encoding="utf-8"), delimiter="\t",
                           quoting=csv.QUOTE_NONE))
    # a query is "question sentence": a sentence of 13+ words holds a 13-gram of it on its own
    sentences = list(dict.fromkeys(r[0] for r in rows if len(r[0].split()) >= 16))
    with open(bench["squad_completion"]["validation"], encoding="utf-8") as fh:
        squad = [json.loads(line)["text"] for line in fh]
    squad = list(dict.fromkeys(squad))
    # a whole query of 8-12 words ("question sentence"): no 13-gram, matched whole in stream mode
    # (words as Janitor normalizes them, written here from its definition)
    table = str.maketrans(string.ascii_uppercase, string.ascii_lowercase, string.punctuation)
    queries = dict.fromkeys(f"{r[1]} {r[0]}" for r in rows)
    short = [q for q in queries if 8 <= len(q.translate(table).split()) < 13]
    injected = {"mc_taco": sentences[0:12:2], "squad": squad[0:30:6], "mc_taco_rewrapped": sentences[13:17],
                "squad_rewrapped": squad[40:42], "mc_taco_short": short[:1]}
    assert all(len(v) == k for v, k in zip(injected.values(), (6, 5, 4, 2, 1), strict=True))
    docs = [dict(w) for w in wiki]
    host = iter(wiki[::7])
    for text in injected["mc_taco"] + injected["squad"] + injected["mc_taco_short"]:
        h = next(host)
        docs.append({**h, "title": h["title"] + " (copy)", "text": h["text"][:900] + "\n\n" + text + " "
                     + h["text"][900:1800]})
    for text in injected["mc_taco_rewrapped"] + injected["squad_rewrapped"]:
        h = next(host)
        docs.append({**h, "title": h["title"] + " (wrapped)", "text": h["text"][:400] + "\n" + _rewrap(text)
                     + "\n" + h["text"][400:700]})
    path = out / "corpus.jsonl"
    path.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs), encoding="utf-8")
    return path, injected


@pytest.fixture(scope="module")
def corpus(wiki_sample, bench, tmp_path_factory) -> tuple[Path, dict]:
    return injected_corpus(wiki_sample, bench, tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def index(corpus, tmp_path_factory) -> Path:
    from tcqa_data.decontam.build import build_index

    out = tmp_path_factory.mktemp("index") / "index"
    build_index([str(corpus[0])], out, ngram_sizes=(13,), minhash=False, text_store="auto", quiet=True,
                workers=1)
    return out


def _tables(out: Path) -> dict[str, dict]:
    got = {}
    for f in sorted(out.glob("*/*/*.parquet")):
        got[str(f.relative_to(out))] = pq.read_table(f).to_pylist()
    return got


# The columns that may differ between modes (docs/ARCHITECTURE.md, contamination.parquet): doc
# frequencies are exact in a stream and lossy in an index (two corpus n-grams sharing an index key
# are one entry). On this corpus no two keys collide, so they are compared too.
@pytest.mark.parametrize(("rule", "max_corpus_freq"),
                         [("any-ngram", None), ("aligned>=0.5|longest>=20", None),
                          ("ngram-fraction>=0.2", 1)])
def test_stream_flags_splits_and_evidence_equal_index_mode(corpus, bench, index, tmp_path, rule,
                                                           max_corpus_freq):
    args = dict(data_files=bench, rule=rule, max_corpus_freq=max_corpus_freq, quiet=True)
    decontaminate(index, ["mc_taco", "squad_completion"], tmp_path / "idx", **args)
    # short items are matched whole in both modes (the default); tests/test_short_items_index.py has more
    decontaminate(None, ["mc_taco", "squad_completion"], tmp_path / "stream", corpus=[str(corpus[0])],
                  **args)
    a, b = _tables(tmp_path / "idx"), _tables(tmp_path / "stream")
    assert list(a) == list(b)
    for name in a:
        assert a[name] == b[name], name
    if max_corpus_freq is not None:  # (n-grams in 2+ docs ignored: the injected copies may not flag)
        return
    cont = {t: pq.read_table(tmp_path / "stream" / t / s / "contamination.parquet").to_pandas()
            for t, s in (("mc_taco", "test"), ("squad_completion", "validation"))}
    # the injected items are found, the re-wrapped ones too (newlines are whitespace)
    mc = cont["mc_taco"]
    for sentence in corpus[1]["mc_taco"] + corpus[1]["mc_taco_rewrapped"]:
        assert mc[mc["query"].str.endswith(sentence)]["dirty"].all(), sentence
    sq = cont["squad_completion"]
    for text in corpus[1]["squad"] + corpus[1]["squad_rewrapped"]:
        assert sq[sq["query"] == text]["dirty"].all()
    assert mc["dirty"].sum() > 0 and sq["dirty"].sum() > 0 and not sq["dirty"].all()
    if "aligned" in rule:
        assert (mc["aligned_share"] > 0).sum() > 0 and mc["aligned_ref"].notna().sum() > 0


def test_stream_refuses_minhash_and_needs_one_source(corpus, bench, index, tmp_path):
    with pytest.raises(ConfigError, match="stream mode"):
        decontaminate(None, ["mc_taco"], tmp_path / "o", corpus=[str(corpus[0])], rule="minhash>=0.5",
                      data_files={"mc_taco": bench["mc_taco"]}, quiet=True)
    with pytest.raises(ConfigError, match="not both or neither"):
        decontaminate(index, ["mc_taco"], tmp_path / "o", corpus=[str(corpus[0])],
                      data_files={"mc_taco": bench["mc_taco"]}, quiet=True)
    assert not (tmp_path / "o").exists()


def test_workers_and_shards_give_the_same_hits(corpus, bench, tmp_path):
    """Shards of 256 KB on 2 worker processes: the same hits as one pass (then the same PREP_DIR)."""
    from tcqa_data.decontam.readers import resolve_inputs
    from tcqa_data.decontam.stream.scan import scan_corpus
    from tcqa_data.decontam.stream.table import BenchmarkTable, StreamConfig
    from tcqa_data.prep.benchmarks import load_split
    from tcqa_data.prep.taskspec import TaskSpec

    spec = TaskSpec.resolve("squad_completion")
    split = load_split(spec, "validation", bench["squad_completion"]["validation"])
    queries = sorted({spec.decontamination_query(d) for d in split.docs()})
    table = BenchmarkTable(queries, StreamConfig(ngram_sizes=(8, 13), anchors=True, keep_pairs=True))
    inputs = resolve_inputs([str(corpus[0])])
    one = scan_corpus(table, inputs)
    many = scan_corpus(table, inputs, workers=2, shard_bytes=256 << 10)
    assert one.num_docs == many.num_docs and one.chars == many.chars
    assert one.refs == many.refs and one.where == many.where and len(one.refs) > 10
    for n in (8, 13):
        assert (one.df[n] == many.df[n]).all() and (one.docs[n] == many.docs[n]).all()
        for a, b in zip(one.hit_pairs(n), many.hit_pairs(n), strict=True):
            assert (a == b).all()
    assert (one.anchor_df == many.anchor_df).all()
    for a, b in zip(one.anchor_pairs[0], many.anchor_pairs[0], strict=True):
        assert (a == b).all() and len(a)
    args = dict(data_files={"squad_completion": bench["squad_completion"]}, quiet=True,
                corpus=[str(corpus[0])])
    decontaminate(None, ["squad_completion"], tmp_path / "w1", **args)
    decontaminate(None, ["squad_completion"], tmp_path / "w2", workers=2, **args)
    assert_same_folder(tmp_path / "w1", tmp_path / "w2")


def test_short_items_are_matched_whole_in_stream_mode(corpus, bench, index, tmp_path):
    """MC-TACO's queries of 8-12 words ("Is he with him now? He also promises to `` come to '' him ."):
    no 13-gram; matched whole in stream mode, the injected one dirty, as index mode does from its
    text store; untestable with ``short_min_words=0``."""
    args = dict(data_files={"mc_taco": bench["mc_taco"]}, quiet=True)
    decontaminate(index, ["mc_taco"], tmp_path / "idx", **args)
    decontaminate(index, ["mc_taco"], tmp_path / "off", short_min_words=0, **args)
    decontaminate(None, ["mc_taco"], tmp_path / "stream", corpus=[str(corpus[0])], **args)
    idx, off, st = (pq.read_table(tmp_path / m / "mc_taco" / "test" / "contamination.parquet").to_pandas()
                    for m in ("idx", "off", "stream"))
    short = (st["query_words"] >= 8) & (st["query_words"] < 13)
    assert short.sum() >= 2 and (off[short]["status"] == "untestable").all()
    assert not (st[short]["status"] == "untestable").any() and st[short]["testable"].all()
    assert st.equals(idx)
    injected = st["query"] == corpus[1]["mc_taco_short"][0]
    assert injected.sum() >= 1 and st[injected]["doc_dirty"].all()
    assert all(ref[0].endswith(":" + str(len(corpus[0].read_text().splitlines()) - 6)) for ref in
               st[injected]["matched_doc_refs"])
    assert (st[short & ~injected]["status"] == "clean").all()
    assert st[injected]["longest_match"].eq(st[injected]["query_words"]).all()
    # every other doc is as index mode scored it without short items matched whole
    assert st[~short].drop(columns=["rule_fired"]).equals(off[~short].drop(columns=["rule_fired"]))


def test_bad_corpus_lines_name_file_and_line_or_are_counted(corpus, bench, tmp_path):
    from tcqa_data.errors import InputError

    bad = tmp_path / "bad.jsonl"
    lines = corpus[0].read_text(encoding="utf-8").splitlines(keepends=True)[:40]
    lines[6] = '{"title": "x", "text": 5}\n'
    lines[9] = '{"title": "y", "text": "unterminated\n'
    bad.write_text("".join(lines), encoding="utf-8")
    args = dict(data_files={"mc_taco": bench["mc_taco"]}, quiet=True, corpus=[str(bad)])
    with pytest.raises(InputError, match=r"bad\.jsonl:7.*text"):
        decontaminate(None, ["mc_taco"], tmp_path / "o", **args)
    assert not (tmp_path / "o").exists()
    decontaminate(None, ["mc_taco"], tmp_path / "o", on_error="skip", **args)
    manifest = json.loads((tmp_path / "o" / "prep_manifest.json").read_text())
    assert manifest["index"]["counts"]["docs"] == 38 and manifest["index"]["mode"] == "stream"
    assert sum(manifest["index"]["skipped"]["counts"].values()) == 2


def test_ray_gives_the_bytes_of_one_local_pass(corpus, bench, tmp_path):
    """Shards as Ray tasks (a local instance of 2 CPUs): the PREP_DIR of one local pass."""
    with private_ray():
        args = dict(data_files={"squad_completion": bench["squad_completion"]}, quiet=True,
                    corpus=[str(corpus[0])])
        decontaminate(None, ["squad_completion"], tmp_path / "local", **args)
        decontaminate(None, ["squad_completion"], tmp_path / "ray", engine="ray", **args)
    assert_same_folder(tmp_path / "local", tmp_path / "ray")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tcqa-stream-")]


def test_a_hugging_face_dataset_streams_as_a_file_does(corpus, bench, tmp_path, monkeypatch):
    """--hf-dataset (a local folder here: no network in tests): the same flags as the same lines
    read as a file; refs are the dataset's ("<name>:<split>:<row>")."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    folder = tmp_path / "hfds"
    folder.mkdir()
    (folder / "train.jsonl").write_bytes(corpus[0].read_bytes())
    args = dict(data_files={"squad_completion": bench["squad_completion"]}, quiet=True,
                rule="aligned>=0.5|any-ngram")
    decontaminate(None, ["squad_completion"], tmp_path / "file", corpus=[str(folder / "train.jsonl")], **args)
    decontaminate(None, ["squad_completion"], tmp_path / "hf", hf_dataset=str(folder), **args)
    a, b = (pq.read_table(tmp_path / m / "squad_completion" / "validation" / "contamination.parquet")
            .to_pandas() for m in ("file", "hf"))
    assert a["dirty"].sum() > 0 and (a["dirty"] == b["dirty"]).all()
    assert (a["aligned_share"] == b["aligned_share"]).all()
    refs = [r for refs in b["matched_doc_refs"] for r in refs]
    assert refs and all(r.startswith(f"{folder}:train:") for r in refs)
    rows = [r.rsplit(":", 1)[1] for refs in a["matched_doc_refs"] for r in refs]
    assert rows == [r.rsplit(":", 1)[1] for r in refs]


def test_an_empty_corpus_warns_in_every_report(bench, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"text": ""}\n\n', encoding="utf-8")
    summary = decontaminate(None, ["mc_taco"], tmp_path / "o", corpus=[str(empty)], quiet=True,
                            data_files={"mc_taco": bench["mc_taco"]})
    assert any("0 documents" in w for w in summary["warnings"])
    report = json.loads((tmp_path / "o" / "mc_taco" / "test" / "report.json").read_text())
    assert any("0 documents" in w for w in report["warnings"])
    assert "0 documents" in (tmp_path / "o" / "mc_taco" / "test" / "report.md").read_text()


def test_a_file_given_twice_counts_once_in_both_modes_with_a_warning(corpus, bench, tmp_path):
    """The probe: the same content in two files with --max-corpus-freq 1 flagged 0 MC-TACO groups in
    a stream (every n-gram in 2 docs) and 129 against an index (which holds each content once). Both
    modes now count identical files once, and say so."""
    from tcqa_data.decontam.build import build_index

    files = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        files.append(tmp_path / name / "corpus.jsonl")
        files[-1].write_bytes(corpus[0].read_bytes())
    index = tmp_path / "index"
    build_index([str(f) for f in files], index, ngram_sizes=(13,), minhash=False, quiet=True, workers=1)
    args = dict(data_files=bench, rule="any-ngram", max_corpus_freq=1, quiet=True)
    by_index = decontaminate(index, ["mc_taco", "squad_completion"], tmp_path / "idx", **args)
    by_stream = decontaminate(None, ["mc_taco", "squad_completion"], tmp_path / "stream",
                              corpus=[str(f) for f in files], **args)
    a, b = _tables(tmp_path / "idx"), _tables(tmp_path / "stream")
    assert list(a) == list(b) and all(a[name] == b[name] for name in a)
    dirty = pq.read_table(tmp_path / "stream" / "mc_taco" / "test" / "dirty.parquet").num_rows
    assert dirty > 0
    for summary in (by_index, by_stream):
        notes = summary["warnings"]
        assert any(str(files[1]) in w and "same content as" in w for w in notes), notes
