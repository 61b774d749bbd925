"""The math word-problem development set of the semantic tier (tests/data/svamp_paraphrase, subject
``svamp`` of ``semantic_devset.py``): it loads, its rephrasings pair with its test items, and the
items split into injected / negative / train as ``scripts/bench_semantic.py`` reads them."""

from __future__ import annotations

import json
import re
import shutil

import pytest
import semantic_devset
import yaml
from semantic_devset import SUBJECTS, SVAMP, SVAMP_FOLDER, load_items, svamp_yaml

from tcqa_data.prep.taskspec import TaskSpec


def _rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (SVAMP_FOLDER / name).read_text(encoding="utf-8").splitlines()]


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower()))  # numbers left out: a variation changes only them


def test_svamp_devset_loads_and_pairs():
    test, reph, train = (_rows(f"svamp_{n}.jsonl") for n in ("test", "test_rephrased_en", "train"))
    assert len(test) == len(reph) == 160 and len(train) == 200
    assert [r["id"] for r in reph] == [r["id"] for r in test] and len({r["id"] for r in test}) == 160
    for item, r in zip(test, reph, strict=True):
        assert r["text"].strip() and r["text"] != item["question"]
        # "Please keep the numbers": the same numbers, digits as digits
        assert sorted(re.findall(r"\d+(?:\.\d+)?", r["text"])) == sorted(
            re.findall(r"\d+(?:\.\d+)?", item["question"])), item["id"]
    # no two test items, and no train and test item, tell one story (word-set Jaccard < 0.5)
    test_words = [_words(r["question"]) for r in test]
    for k, w in enumerate(test_words):
        assert all(len(w & t) / len(w | t) < 0.5 for t in test_words[k + 1:]), test[k]["id"]
    for row in train:
        w = _words(row["question"])
        assert all(len(w & t) / len(w | t) < 0.5 for t in test_words), row["id"]

    items, texts = load_items(None, (SVAMP,), train_verbatim=True)
    checked = [it for it in items if it.injected != "train"]
    assert [it.index for it in checked] == list(range(160))
    assert [it.injected for it in checked] == ["rephrased", None] * 80
    assert [it.kind for it in checked[::2]] == ["own", "spliced"] * 40
    assert all(texts[(SVAMP, it.index)] == reph[it.index]["text"] for it in checked[::2])
    assert sum(it.injected == "train" for it in items) == 200
    # the query decontamination checks: gsm8k's prompt, there being no decontamination query
    spec = TaskSpec.from_dict(yaml.safe_load(svamp_yaml()))
    assert spec.doc_to_decontamination_query is None
    assert [spec.decontamination_query(row) for row in test] == [it.query for it in checked]
    assert SVAMP not in SUBJECTS  # the MMLU runs do not change


def test_a_rephrasing_out_of_step_is_refused_with_its_line(tmp_path, monkeypatch):
    shutil.copytree(SVAMP_FOLDER, tmp_path / "svamp")
    path = tmp_path / "svamp" / "svamp_test_rephrased_en.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[3], lines[4] = lines[4], lines[3]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    monkeypatch.setattr(semantic_devset, "SVAMP_FOLDER", tmp_path / "svamp")
    with pytest.raises(ValueError, match=r"svamp_test_rephrased_en.jsonl line 4: id"):
        load_items(None, (SVAMP,))
