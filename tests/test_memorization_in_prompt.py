"""In-prompt memorization scores (evaluate's default): the scores read from the task's own packed,
batched forward pass equal a direct computation on each doc's prompt alone, and the task's own
numbers stay bit for bit as without them.

The direct side runs the model on one prompt (unpacked, no cache), takes the float64 log-softmax at
every position, finds each field's tokens by decoding the prompt's tokens one prefix at a time (not
the offset mapping the code uses) and applies each score's definition with numpy.
"""

from __future__ import annotations

import csv
import json
from itertools import islice

import pytest
from eval_fixtures import direct_memorization_scores

from tcqa_data.eval.memorization import SCORE_NAMES
from tcqa_data.eval.models import load_model
from tcqa_data.eval.runner import score_generation, score_multiple_choice
from tcqa_data.eval.scoring import Engine
from tcqa_data.prep.taskspec import TaskSpec


def _token_spans(tok, ids: list[int]) -> list[tuple[int, int]]:
    ends = [len(tok.decode(ids[:t + 1])) for t in range(len(ids))]
    return list(zip([0, *ends[:-1]], ends, strict=True))


def _field_tokens(prompt: str, spans: list[tuple[int, int]], value: str, start: int = 0) -> list[int]:
    a = prompt.index(value, start)
    b = a + len(value)
    out = []
    for t, (s, e) in enumerate(spans):
        s = s + len(prompt[s:e]) - len(prompt[s:e].lstrip()) if s < a else s
        if t > 0 and a <= s < e <= b:
            out.append(t)
    return out


def _check(lm, got: dict, ids: list[int], where: dict[str, list[int]], texts: dict[str, str]) -> None:
    assert list(got) == list(texts)
    for name, positions in where.items():
        assert positions, name
        want = direct_memorization_scores(lm, ids, positions, texts[name])
        for score in SCORE_NAMES:
            # packed rows in float32 through a different attention layout: agree to float noise
            assert got[name][score] == pytest.approx(want[score], rel=2e-3, abs=2e-3), (name, score)


def _mc_docs(path, n_rows: int) -> list[dict]:
    spec = TaskSpec.builtin("mc_taco")
    docs = []
    with open(path, encoding="utf-8", newline="") as fh:
        for i, rec in enumerate(islice(csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE), n_rows)):
            doc = dict(zip(spec.tsv_columns, rec, strict=True))
            doc.update(label=spec.label_values[doc["label"]], doc_id=i,
                       group_id=hash((doc["sentence"], doc["question"])) % 1000)
            docs.append(doc)
    return docs


def test_mc_taco_in_prompt_scores_equal_direct_and_leave_the_task_unchanged(smollm2, mc_taco_test):
    spec = TaskSpec.builtin("mc_taco")
    docs = _mc_docs(mc_taco_test, 24)  # a few whole questions, candidates sharing prefixes in a tree
    texts = [spec.memorization_texts(d) for d in docs]
    engine = Engine(smollm2, batch_size=4)
    with_scores = score_multiple_choice(engine, spec, docs, memorization_texts=texts)
    without = score_multiple_choice(Engine(smollm2, batch_size=4), spec, docs)
    for a, b in zip(with_scores, without, strict=True):
        assert {k: v for k, v in a.items() if k != "memorization"} == b  # bit for bit
    tok = smollm2.tokenizer
    for doc, t, o in zip(docs[::5], texts[::5], with_scores[::5], strict=True):
        prompt = spec.text(doc)
        ids = tok(prompt)["input_ids"]
        spans = _token_spans(tok, ids)
        assert "".join(tok.decode([i]) for i in ids) == prompt
        sentence = _field_tokens(prompt, spans, doc["sentence"])
        question = _field_tokens(prompt, spans, doc["question"], len(doc["sentence"]))
        assert sentence[0] == 1 and question  # the first token has no prediction
        _check(smollm2, o["memorization"], ids,
               {"query": sorted(sentence + question), "sentence": sentence, "question": question}, t)
    # a question's candidates share its sentence and question tokens: equal scores
    assert with_scores[0]["memorization"]["question"] == with_scores[1]["memorization"]["question"]


def test_squad_in_prompt_scores_equal_direct_and_leave_the_task_unchanged(smollm2, squad_validation):
    spec = TaskSpec.builtin("squad_completion")
    with open(squad_validation, encoding="utf-8") as fh:
        docs = [{**json.loads(line), "doc_id": i, "group_id": i}
                for i, line in enumerate(islice(fh, 0, 80, 20))]
    texts = [spec.memorization_texts(d) for d in docs]
    with_scores = score_generation(Engine(smollm2, batch_size=3), spec, docs, memorization_texts=texts)
    without = score_generation(Engine(smollm2, batch_size=3), spec, docs)
    for a, b in zip(with_scores, without, strict=True):
        assert {k: v for k, v in a.items() if k != "memorization"} == b
    tok = smollm2.tokenizer
    for doc, t, o in zip(docs, texts, with_scores, strict=True):
        prompt = spec.text(doc)
        ids = tok(prompt)["input_ids"]
        spans = _token_spans(tok, ids)
        # a field with surrounding whitespace occurs stripped in the prompt
        context = _field_tokens(prompt, spans, doc["context"].strip())
        question = _field_tokens(prompt, spans, doc["question"].strip(), len(doc["context"].strip()))
        # the query {{text}} is the prompt itself: every token but the first
        _check(smollm2, o["memorization"], ids,
               {"query": list(range(1, len(ids))), "context": context, "question": question}, t)


@pytest.fixture(scope="module")
def tiny(tiny_model):
    return load_model(str(tiny_model), device="cpu")


def test_the_models_own_head_gives_the_same_in_prompt_scores(tiny, mc_taco_test):
    # models whose forward does more after the head run it themselves (logits_to_keep): same scores
    spec = TaskSpec.builtin("mc_taco")
    docs = _mc_docs(mc_taco_test, 12)
    texts = [spec.memorization_texts(d) for d in docs]
    split = Engine(tiny, batch_size=4)
    whole = Engine(tiny, batch_size=4)
    whole.split_head = False
    a = score_multiple_choice(split, spec, docs, memorization_texts=texts)
    b = score_multiple_choice(whole, spec, docs, memorization_texts=texts)
    for x, y in zip(a, b, strict=True):
        assert x["pred"] == y["pred"] and x["loglikelihoods"] == pytest.approx(y["loglikelihoods"], abs=1e-5)
        assert list(x["memorization"]) == ["query", "question", "sentence"]
        for name, scores in x["memorization"].items():
            assert y["memorization"][name] == pytest.approx(scores, rel=1e-5, abs=1e-6)


def test_a_text_not_in_the_prompt_is_scored_standalone_and_labelled_so(tiny, squad_validation):
    from tcqa_data.eval.memorization import doc_memorization
    from tcqa_data.eval.runner import add_standalone_scores

    spec = TaskSpec.builtin("squad_completion")
    with open(squad_validation, encoding="utf-8") as fh:
        docs = [{**json.loads(line), "doc_id": i, "group_id": i} for i, line in enumerate(islice(fh, 3))]
    docs[1]["question"] = "A question that the prompt does not hold?"
    texts = [spec.memorization_texts(d) for d in docs]
    engine = Engine(tiny, batch_size=3)
    per_doc = score_generation(engine, spec, docs, memorization_texts=texts)
    assert list(per_doc[1]["memorization"]) == ["query", "context"]  # the question was not located
    count = add_standalone_scores(engine, per_doc, texts)
    assert count == {"prompt": 8, "standalone": 1}
    assert per_doc[1]["memorization_context"] == {"query": "prompt", "context": "prompt",
                                                  "question": "standalone"}
    assert list(per_doc[1]["memorization"]) == ["query", "context", "question"]
    alone = doc_memorization(engine, [{"question": docs[1]["question"]}])[0]["question"]
    assert per_doc[1]["memorization"]["question"] == alone
