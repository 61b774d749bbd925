"""Memorization scores: packed, batched computation equals a direct one-text-at-a-time computation.

The direct side runs the model on each text alone (no packing, no batching, no padding), takes
float64 log-softmax of the logits and applies each score's definition as written in its paper,
with numpy, independently of ``eval.memorization``.
"""

from __future__ import annotations

import csv
import json
from itertools import islice

import pytest
from eval_fixtures import direct_memorization_scores

from tcqa_data.eval.memorization import SCORE_NAMES, memorization_scores, token_stats
from tcqa_data.eval.scoring import Engine
from tcqa_data.prep.taskspec import TaskSpec


def _direct_scores(lm, text: str) -> dict[str, float]:
    """The scores of the text alone: prefix token + its tokens, every token after the prefix scored."""
    tok = lm.tokenizer
    prefix = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    ids = [prefix] + tok(text, add_special_tokens=False)["input_ids"]
    return direct_memorization_scores(lm, ids, list(range(1, len(ids))), text)


def _texts(mc_taco_test, squad_validation) -> list[str]:
    mc = TaskSpec.builtin("mc_taco")
    squad = TaskSpec.builtin("squad_completion")
    texts: list[str] = []
    with open(mc_taco_test, encoding="utf-8", newline="") as fh:
        for rec in islice(csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE), 0, 200, 25):
            doc = dict(zip(mc.tsv_columns, rec, strict=True))
            texts += [mc.decontamination_query(doc), doc["sentence"], doc["question"]]
    with open(squad_validation, encoding="utf-8") as fh:
        for line in islice(fh, 0, 60, 20):
            doc = json.loads(line)
            texts += [squad.decontamination_query(doc), doc["context"], doc["question"]]
    return texts


def test_batched_scores_equal_direct_scores_on_both_tasks(smollm2, mc_taco_test, squad_validation):
    texts = _texts(mc_taco_test, squad_validation)
    texts.append(texts[0])  # a repeated text is computed once and given to both places
    engine = Engine(smollm2, batch_size=4)
    stats = token_stats(engine, texts)
    assert len(stats) == len(texts)
    for text, st in zip(texts, stats, strict=True):
        got = memorization_scores(st, text)
        want = _direct_scores(smollm2, text)
        assert set(got) == set(SCORE_NAMES)
        for name in SCORE_NAMES:
            # packed rows run in float32 through a different attention layout: agree to float noise
            assert got[name] == pytest.approx(want[name], rel=2e-3, abs=2e-3), (name, text[:60])
    # the scores are not all equal across texts: they carry information
    assert len({round(memorization_scores(s, t)["min_k_pp_20"], 4) for s, t in zip(stats, texts,
                                                                                    strict=True)}) > 5


def test_a_text_without_tokens_has_no_scores(smollm2):
    engine = Engine(smollm2, batch_size=2)
    empty, some = token_stats(engine, ["", "The cat sat on the mat."])
    assert memorization_scores(empty, "") == dict.fromkeys(SCORE_NAMES)
    assert all(v is not None for v in memorization_scores(some, "The cat sat on the mat.").values())
