"""The semantic tier's optional judge (``--judge``, the rule term ``judge``), on real data.

The corpus: a slice of the wiki sample with rephrased MMLU abstract-algebra items injected
(``semantic_devset.py``); the judge: the 2-layer random Llama with the SmolLM2 tokenizer (its chat
template) that the eval tests use (``tiny_model``). Its verdicts mean nothing; what is tested is
which pairs it is asked about, that its probabilities are the model's, and how the rule reads them.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from cli_fixtures import run
from conftest import shared_file
from semantic_devset import english_devset, load_items

from tcqa_data.decontam.detect.rules import DEFAULT_SEMANTIC, Rule
from tcqa_data.errors import ConfigError
from tcqa_data.prep.pipeline import decontaminate

pytest.importorskip("sentence_transformers")

SUBJECT = "abstract_algebra"
WIKI_DOCS = 250
TOP = 6
OVERHANG = 40  # chars: how far past a spliced item its best window may run into the article


@pytest.fixture(scope="module")
def devset(wiki_sample, tmp_path_factory) -> dict:
    folder = shared_file("paraphrase/mmlu_abstract_algebra_test.jsonl").parent
    return english_devset(folder, wiki_sample, tmp_path_factory.mktemp("judge"), SUBJECT, WIKI_DOCS)


@pytest.fixture(scope="module")
def judged(devset, tiny_model, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("judged") / "prep"
    decontaminate(None, [devset["task"]], out, corpus=[devset["corpus"]], data_files=devset["data"],
                  quiet=True, rule="any-ngram|semantic&judge", judge=str(tiny_model), judge_top=TOP)
    return out


def test_the_top_pairs_are_judged_by_the_model_and_the_rule_reads_its_verdict(judged, tiny_model):
    from tcqa_data.decontam.semantic.judge import JUDGE_FLOOR, load_judge

    rows = pq.read_table(judged / f"mmlu_{SUBJECT}" / "test" / "contamination.parquet").to_pylist()
    cos = np.array([np.nan if r["semantic_score"] is None else r["semantic_score"] for r in rows])
    # the TOP highest semantic scores at or above the floor were judged, and no other pair
    above = np.flatnonzero(cos >= JUDGE_FLOOR)
    want = set(above[np.lexsort((above, -cos[above]))][:TOP].tolist())
    got = {i for i, r in enumerate(rows) if r["semantic_judge_probability"] is not None}
    assert len(above) > TOP and got == want
    assert all(r["semantic_judge"] is None for i, r in enumerate(rows) if i not in got)
    p = np.array([rows[i]["semantic_judge_probability"] for i in sorted(got)])
    assert ((p > 0) & (p < 1)).all() and len(set(p.tolist())) > 1
    assert [rows[i]["semantic_judge"] for i in sorted(got)] == (p >= 0.5).tolist()
    # the probabilities are the model's: asked again, one pair at a time
    judge = load_judge(str(tiny_model))
    again = judge.probabilities([(rows[i]["query"], rows[i]["semantic_window"]) for i in sorted(got)],
                                batch_size=1)
    np.testing.assert_allclose(again, p, atol=1e-5)
    # any-ngram | (semantic & judge)
    for r in rows:
        semantic_yes = r["semantic_score"] is not None and r["semantic_score"] >= DEFAULT_SEMANTIC
        lexical = r["testable"] and r["ngram_hits"] > 0
        assert r["doc_dirty"] == (lexical or (semantic_yes and r["semantic_judge"] is True))
    manifest = json.loads((judged / "prep_manifest.json").read_text())
    recorded = manifest["semantic"]["judge"]
    digest = hashlib.sha256((Path(tiny_model) / "model.safetensors").read_bytes()).hexdigest()
    assert recorded["name"] == str(tiny_model) and recorded["weights_sha256"] == digest
    assert recorded["top"] == TOP and recorded["chat_template"] is True
    assert "judge" in manifest["semantic"]["terms"]
    # the report's pairs show the verdict beside the cosine
    report = (judged / f"mmlu_{SUBJECT}" / "test" / "report.md").read_text(encoding="utf-8")
    assert re.search(r"\| (yes|no) 0\.\d+ \|", report)


def test_judge_term_reads_null_as_not_judged():
    rule = Rule.parse("any-ngram|semantic&judge")
    assert str(rule) == f"any-ngram|semantic>={DEFAULT_SEMANTIC}&judge"
    assert rule.uses_judge and rule.uses_semantic
    scores = {"ngram_hits": [0, 0, 0, 2], "testable": [True] * 4, "semantic_score": [0.9, 0.9, None, None],
              "semantic_judge": [True, False, None, None]}
    dirty, fired = rule.evaluate(scores)
    assert dirty.tolist() == [True, False, False, True]
    assert fired[0] == f"semantic>={DEFAULT_SEMANTIC}&judge" and fired[3] == "any-ngram"
    with pytest.raises(ConfigError, match="cannot parse"):
        Rule.parse("judge>=0.5")


def test_a_judge_that_cannot_load_is_refused_before_anything_is_written(devset, tmp_path, monkeypatch,
                                                                         capsys):
    out = tmp_path / "prep"
    missing = str(tmp_path / "missing")
    common = dict(corpus=[devset["corpus"]], data_files=devset["data"], quiet=True)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.json").write_text("{}", encoding="utf-8")
    for judge in (missing, str(tmp_path / "empty")):
        with pytest.raises(ConfigError) as err:
            decontaminate(None, [devset["task"]], out, rule="any-ngram|semantic&judge", judge=judge, **common)
        assert "\n" not in str(err.value) and judge in str(err.value)
        assert not out.exists()
    with pytest.raises(ConfigError, match="--judge MODEL"):  # a judge term with no judge
        decontaminate(None, [devset["task"]], out, rule="semantic&judge", **common)
    with pytest.raises(ConfigError, match="no semantic term"):  # a judge with nothing to judge
        decontaminate(None, [devset["task"]], out, rule="any-ngram", judge=missing, **common)
    assert not out.exists()
    name = Path(devset["task"]).stem
    code, _, err_text = run(["decontaminate", "--corpus", devset["corpus"], "--tasks", devset["task"],
                             "--data-files", f"{name}:test={devset['data'][name]['test']}", "--out", out,
                             "--rule", "any-ngram|semantic&judge", "--judge", missing], monkeypatch, capsys)
    lines = [ln for ln in err_text.splitlines() if ln.strip()]
    assert code != 0 and len(lines) == 1 and lines[0].startswith("Error:") and "--judge" in lines[0]
    assert not out.exists()


def test_purify_drop_with_a_semantic_term_drops_the_docs_of_the_best_windows(devset, judged, tmp_path):
    from tcqa_data.prep.purify import purify

    out = tmp_path / "purified"
    common = dict(data_files=devset["data"], quiet=True)
    with pytest.raises(ConfigError, match="no judge") as err:
        purify([devset["corpus"]], [devset["task"]], out, rule="semantic&judge", mode="drop", **common)
    assert "\n" not in str(err.value) and not out.exists()
    report = purify([devset["corpus"]], [devset["task"]], out, rule="semantic", mode="drop", **common)
    # the docs dropped are the best windows' docs of the items decontaminate flags with `semantic`
    rows = pq.read_table(judged / f"mmlu_{SUBJECT}" / "test" / "contamination.parquet").to_pylist()
    want = {r["semantic_doc_ref"] for r in rows
            if r["semantic_score"] is not None and r["semantic_score"] >= DEFAULT_SEMANTIC}
    log = pq.read_table(out / "removal_log.parquet").to_pylist()
    assert want and {r["doc_ref"] for r in log} == want and all(r["action"] == "dropped" for r in log)
    assert report["semantic"]["docs_dropped"] == report["semantic"]["docs_matched"] == len(want) \
        == report["totals"]["dropped"]
    assert report["semantic"]["model"]["weights_sha256"]
    # every other line is written unchanged
    lines = Path(devset["corpus"]).read_text(encoding="utf-8").splitlines()
    kept = (out / Path(devset["corpus"]).name).read_text(encoding="utf-8").splitlines()
    dropped = {json.loads(line)["id"] for line in lines} - {json.loads(line)["id"] for line in kept}
    assert len(kept) == len(lines) - len(want) and len(dropped) == len(want)
    assert [ln for ln in lines if json.loads(ln)["id"] not in dropped] == kept
    assert sum(d.startswith("inj-") for d in dropped) > len(dropped) / 2  # mostly the injected rephrasings


def test_purify_excise_with_a_semantic_term_cuts_the_best_windows_out(devset, tmp_path):
    from tcqa_data.decontam.stream.excise import WINDOW
    from tcqa_data.prep.purify import purify

    items, texts = load_items(shared_file(f"paraphrase/mmlu_{SUBJECT}_test.jsonl").parent, (SUBJECT,))
    spliced = [texts[(it.subject, it.index)] for it in items
               if it.kind == "spliced" and it.injected == "rephrased"]
    # the devset splices at a paragraph break, and these articles have none: the item ends them;
    # moved to the middle line break, the article runs on after it
    lines = Path(devset["corpus"]).read_text(encoding="utf-8").splitlines()
    moved = 0
    for k, line in enumerate(lines):
        doc = json.loads(line)
        item = next((t for t in spliced if doc["text"].endswith("\n\n" + t)), None)
        if item is not None:
            body = doc["text"][:-len(item) - 2]
            at = body.index("\n", len(body) // 2) + 1
            lines[k] = json.dumps({**doc, "text": body[:at] + item + "\n" + body[at:]})
            moved += 1
    corpus = tmp_path / "in" / Path(devset["corpus"]).name  # the same name: the same doc refs
    corpus.parent.mkdir()
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    outs = {w: tmp_path / f"workers{w}" for w in (1, 2)}
    reports = {w: purify([str(corpus)], [devset["task"]], out, rule="semantic", mode="excise",
                         data_files=devset["data"], quiet=True, workers=w) for w, out in outs.items()}
    for f in (corpus.name, "removal_log.parquet", "purify_report.json"):  # --workers changes no byte
        assert (outs[1] / f).read_bytes() == (outs[2] / f).read_bytes()
    out, report = outs[1], reports[1]
    log = pq.read_table(out / "removal_log.parquet").to_pylist()
    sem = report["semantic"]  # a rephrasing shares no 13-gram: the windows' spans cut every doc
    assert sem["docs_matched"] == sem["docs_cut_by_semantic"] == len(log) and sem["docs_cut_by_ngrams"] == 0
    assert report["totals"]["cut"] + report["totals"]["dropped"] == len(log)
    assert (f"docs cut by a window's span {len(log)}, by n-grams 0, by both 0"
            in (out / "purify_report.md").read_text(encoding="utf-8"))
    ids = [json.loads(lines[r["row"] - 1])["id"] for r in log]
    assert sum(i.startswith("inj-") for i in ids) > len(ids) / 2  # mostly the injected rephrasings
    written = [json.loads(line) for line in (out / corpus.name).read_text(encoding="utf-8").splitlines()]
    # every doc not flagged is written unchanged, in order
    by_row = {r["row"]: r for r in log}
    assert [json.loads(ln) for k, ln in enumerate(lines, 1) if k not in by_row] == \
        [d for d in written if "purify_piece" not in d]
    # a cut doc's pieces are its text less the removed spans, char for char
    pieces: dict[str, list[str]] = {}
    for d in written:
        if "purify_piece" in d:
            pieces.setdefault(d["purify_doc_ref"], []).append(d["text"])
    cut_out = 0
    for r in log:
        text = json.loads(lines[r["row"] - 1])["text"]
        kept, at = [], 0
        for a, b in r["removed_spans"]:
            kept.append(text[at:a])
            at = b
        kept.append(text[at:])
        assert pieces.get(r["doc_ref"], []) == [k for k in kept if k], r["doc_ref"]
        assert r["action"] == ("cut" if r["pieces"] else "dropped")
        # a rephrased item spliced into a long article: its words are gone in one hole no wider
        # than Janitor's margin either side (and a few words the best window runs over); the
        # article before and after it is kept, byte for byte (the pieces above)
        for item in (t for t in spliced if t in text):
            start = text.index(item)
            end = start + len(item)
            (a, b), = r["removed_spans"]
            assert a <= start and b >= end and r["action"] == "cut"
            assert start - a <= WINDOW + OVERHANG and b - end <= WINDOW + OVERHANG
            assert pieces[r["doc_ref"]] == [text[:a], text[b:]]
            cut_out += 1
    assert moved >= 6 and cut_out >= moved // 2  # the others' scores fall below the threshold


def test_a_tokenizer_without_a_chat_template_gets_a_plain_prompt(tiny_model):
    from tcqa_data.decontam.semantic.judge import Judge, load_judge

    chat = load_judge(str(tiny_model))
    chat.loaded.tokenizer.chat_template = None
    plain = Judge("plain", chat.loaded, None)
    assert not plain.chat and plain.prompt("a question", "a window").endswith("\nAnswer:")
    tok = plain.loaded.tokenizer
    assert [tok.decode([i]) for i in plain.answer_ids] == [" True", " False"]
    pairs = [("What is 2 + 2?\nA. 3\nB. 4", "what is two plus two 3 4"), ("Who wrote Hamlet?", "x " * 400)]
    p = plain.probabilities(pairs)
    np.testing.assert_allclose(p, plain.probabilities(pairs[::-1], batch_size=1)[::-1], atol=1e-5)
    assert ((p > 0) & (p < 1)).all()


def test_purify_takes_every_window_the_threshold_reaches_not_the_best_alone(devset, tmp_path):
    """A rephrased item's doc again, under another id, later in the corpus: decontaminate's evidence
    names one window (the first copy's), and purify drops both copies, and nothing else more."""
    from tcqa_data.prep.purify import purify

    common = dict(data_files=devset["data"], quiet=True, rule="semantic", mode="drop")
    purify([devset["corpus"]], [devset["task"]], tmp_path / "once", **common)
    dropped = {r["doc_ref"] for r in pq.read_table(tmp_path / "once" / "removal_log.parquet").to_pylist()}
    name = Path(devset["corpus"]).name
    lines = Path(devset["corpus"]).read_text(encoding="utf-8").splitlines()
    row = next(k for k, line in enumerate(lines, 1)
               if json.loads(line)["id"].startswith("inj-") and f"{name}:{k}" in dropped)
    copy = {**json.loads(lines[row - 1]), "id": "the-copy"}
    corpus = tmp_path / "in" / name  # the same name: the same doc refs
    corpus.parent.mkdir()
    corpus.write_text("\n".join([*lines, json.dumps(copy)]) + "\n", encoding="utf-8")
    report = purify([str(corpus)], [devset["task"]], tmp_path / "twice", **common)
    again = {r["doc_ref"] for r in pq.read_table(tmp_path / "twice" / "removal_log.parquet").to_pylist()}
    assert again == dropped | {f"{corpus.name}:{len(lines) + 1}"}
    assert report["semantic"]["docs_dropped"] == report["semantic"]["docs_matched"] == len(again)
    written = [json.loads(line)["id"] for line in (tmp_path / "twice" / corpus.name).read_text().splitlines()]
    assert "the-copy" not in written and copy["id"] != json.loads(lines[row - 1])["id"]
