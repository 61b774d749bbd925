"""Per-doc memorization scores in evaluate: which texts, computed once, equal to the direct scores,
switched off and on their own; the task YAML's memorization_text."""

from __future__ import annotations

import pytest
import yaml
from conftest import SHARED_DATA, shared_file
from eval_fixtures import build_prep_dir

from tcqa_data.eval.memorization import SCORE_NAMES, memorization_scores, token_stats
from tcqa_data.eval.models import load_model
from tcqa_data.eval.runner import evaluate
from tcqa_data.eval.scoring import Engine
from tcqa_data.prep.prepared import load_task


@pytest.fixture(scope="module")
def prep(tmp_path_factory):
    shared_file("mc_taco/dev_3783.tsv")
    shared_file("based_squad/validation.jsonl")
    return build_prep_dir(tmp_path_factory.mktemp("prep"), SHARED_DATA, mc_groups=3, squad_docs=4)


@pytest.fixture(scope="module")
def lm(tiny_model):
    return load_model(str(tiny_model), device="cpu")


def test_each_doc_has_scores_of_its_query_and_attribution_fields(prep, lm, tmp_path):
    res = evaluate(prep, lm, batch_size=4, output=tmp_path, quiet=True, memorization_context="standalone")
    assert res["memorization"]["computed"] and res["memorization"]["scores"] == list(SCORE_NAMES)
    assert res["memorization"]["context"] == "standalone"
    engine = Engine(lm, 4)
    for task, names in (("mc_taco", {"sentence", "question"}), ("squad_completion", {"context", "question"})):
        data = load_task(prep, task)
        assert set(data.spec.query_fields()) == names
        fields = ["query", *data.spec.query_fields()]
        samples = [s for s in res["_samples"] if s["task"] == task]
        assert res["tasks"][task]["memorization_texts"] == fields
        assert res["timings"][task]["memorization_s"] > 0
        assert res["tasks"][task]["memorization_context"] == {"prompt": 0,
                                                              "standalone": len(fields) * len(samples)}
        for doc, s in zip(data.docs, samples, strict=True):
            assert list(s["memorization"]) == [*fields, "headline"]
            assert 0 < s["memorization"]["headline"]["score"] <= 1
            assert s["memorization_context"] == dict.fromkeys(fields, "standalone")
            texts = {"query": data.spec.decontamination_query(doc),
                     **{f: str(doc[f]) for f in fields[1:]}}
            for name, text in texts.items():
                want = memorization_scores(token_stats(engine, [text])[0], text)
                for score in SCORE_NAMES:
                    assert s["memorization"][name][score] == pytest.approx(want[score], rel=1e-4, abs=1e-5)
    # MC-TACO's candidates of one question share query, sentence and question: equal scores
    mc = [s for s in res["_samples"] if s["task"] == "mc_taco"]
    first = [s for s in mc if s["group_id"] == mc[0]["group_id"]]
    assert len(first) > 1 and all(s["memorization"] == first[0]["memorization"] for s in first)
    # different questions differ
    assert len({s["memorization"]["query"]["min_k_pp_20"] for s in mc}) >= 3


def test_prompt_context_reads_every_text_from_the_prompt_and_keeps_the_task_numbers(prep, lm, tmp_path):
    res = evaluate(prep, lm, batch_size=4, output=tmp_path / "on", quiet=True, memorization_context="prompt")
    off = evaluate(prep, lm, batch_size=4, output=tmp_path / "off", quiet=True, memorization=False)
    assert res["memorization"]["context"] == "prompt"
    for task in ("mc_taco", "squad_completion"):
        samples = [s for s in res["_samples"] if s["task"] == task]
        fields = res["tasks"][task]["memorization_texts"]
        # every text of these docs is located in its prompt: no standalone pass
        assert res["tasks"][task]["memorization_context"] == {"prompt": len(fields) * len(samples),
                                                              "standalone": 0}
        assert all(s["memorization_context"] == dict.fromkeys(fields, "prompt") for s in samples)
        assert all(v is not None for s in samples for t in s["memorization"].values() for v in t.values())
        assert res["tasks"][task]["subsets"] == off["tasks"][task]["subsets"]
    strip = ("memorization", "memorization_context")
    assert [{k: v for k, v in s.items() if k not in strip} for s in res["_samples"]] == off["_samples"]
    # in-prompt scores differ from standalone ones (other tokens, other predictions), so the two are
    # labelled apart
    alone = evaluate(prep, lm, batch_size=4, output=tmp_path / "alone", quiet=True, tasks=["mc_taco"],
                     memorization_context="standalone", memorization_only=True)
    mc = [s for s in res["_samples"] if s["task"] == "mc_taco"]
    assert all(a["memorization"]["question"] != b["memorization"]["question"]
               for a, b in zip(mc, alone["_samples"], strict=True))


def test_no_memorization_and_memorization_only(prep, lm, tmp_path):
    off = evaluate(prep, lm, batch_size=4, output=tmp_path / "off", quiet=True, memorization=False)
    assert off["memorization"] == {"computed": False, "why": "--no-memorization"}
    assert all("memorization" not in s for s in off["_samples"])
    only = evaluate(prep, lm, batch_size=4, output=tmp_path / "only", quiet=True, memorization_only=True,
                    tasks=["mc_taco"])
    assert only["memorization"]["only"]
    assert all(set(s) == {"task", "doc_id", "group_id", "subset", "memorization", "memorization_context"}
               for s in only["_samples"])
    assert only["tasks"]["mc_taco"]["subsets"]["full"]["docs"] == 0


def test_memorization_text_names_another_template(prep, lm, tmp_path):
    path = prep / "mc_taco" / "task.yaml"
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    raw["memorization_text"] = "{{question}}"
    own = tmp_path / "prep"
    import shutil

    shutil.copytree(prep, own)
    (own / "mc_taco" / "task.yaml").write_text(yaml.safe_dump(raw), encoding="utf-8")
    res = evaluate(own, lm, batch_size=4, output=tmp_path / "e", quiet=True, memorization_only=True,
                   tasks=["mc_taco"])
    for s in res["_samples"]:
        assert s["memorization"]["query"] == s["memorization"]["question"]


def test_a_unique_text_scores_the_same_once_or_per_doc(prep, lm, tmp_path):
    """The default context (fields): each attribution field also alone, each distinct text run through
    the model once however many docs hold it, and its scores those of the text scored on its own."""
    from tcqa_data.eval.memorization import doc_memorization

    res = evaluate(prep, lm, batch_size=4, output=tmp_path, quiet=True, write=False)
    assert res["memorization"]["context"] == "fields"
    # SQuAD's query renders the prompt itself (no field of its own), which it begins: no extra pass
    assert res["tasks"]["squad_completion"]["memorization_context"]["standalone_pass"] == 0
    assert all(s["memorization"]["query@standalone"] == s["memorization"]["query"]
               for s in res["_samples"] if s["task"] == "squad_completion")
    data = load_task(prep, "mc_taco")
    samples = [s for s in res["_samples"] if s["task"] == "mc_taco"]
    texts = [data.spec.memorization_texts(d) for d in data.docs]
    engine = Engine(lm, 4)
    computed: list[int] = []
    forward = engine.forward

    def counting(rows, *args, **kwargs):
        computed.append(sum(len(r.tokens) for r in rows))
        return forward(rows, *args, **kwargs)

    engine.forward = counting  # type: ignore[method-assign]
    per_doc = doc_memorization(engine, [{"question": t["question"]} for t in texts])
    questions = sorted({t["question"] for t in texts})
    assert len(questions) < len(texts)  # MC-TACO's candidates of a question share it
    # one prefix token + each distinct question's tokens, once
    own = [len(engine.tokenizer(q, add_special_tokens=False)["input_ids"]) for q in questions]
    assert sum(computed) <= len(questions) + sum(own)
    for s, t, got in zip(samples, texts, per_doc, strict=True):
        alone = memorization_scores(token_stats(engine, [t["question"]])[0], t["question"])
        assert got["question"] == pytest.approx(alone, rel=1e-4, abs=1e-5)
        assert s["memorization"]["question@standalone"] == pytest.approx(alone, rel=1e-4, abs=1e-5)
        assert s["memorization_context"]["question@standalone"] == "standalone"
        # the sentence begins the prompt: its standalone scores are its in-prompt ones
        assert s["memorization"]["sentence@standalone"] == s["memorization"]["sentence"]
        assert "query@standalone" not in s["memorization"]  # its fields stand for it
    assert res["tasks"]["mc_taco"]["memorization_context"]["standalone_pass"] == len(samples)
