"""The headline memorization score (``memorization.headline``) under evaluate's default context
(``--memorization-context fields``).

Ground truth: a tiny random Llama (SmolLM2 tokenizer) fine-tuned on half of a real MC-TACO sample,
once on the decontamination queries in query order ("{question} {sentence}", as a corpus could hold
them), once on the task's prompts, and once on source passages (each seen sentence inside real
wiki text, as a pretraining corpus shows it); the headline must rank the seen docs above the others
in all three, with no knowledge of which exposure happened. Each distinct text is scored once per context; its
scores equal those of the text scored on its own.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SHARED_DATA, shared_file
from eval_fixtures import (
    fine_tuned_tiny_model,
    one_question_per_sentence,
    read_mc_taco,
    source_passages,
    write_task,
)
from sklearn.metrics import roc_auc_score

from tcqa_data.eval.memorization import add_headline, memorization_scores, rank_normalise, token_stats
from tcqa_data.prep.prepared import load_task

N_GROUPS = 24
HEADLINE_AUROC = 0.8


def test_headline_is_fishers_combination_of_the_components_ranks():
    """Docs 0 and 1 top one component each and head the headline; a component that ranks every doc
    alike (no evidence) leaves the order alone, where a max of ranks would let it lift the others;
    a missing component is skipped."""
    per_doc = [{"memorization": {"query": {"min_k_pp_20": p}, "question@standalone": {"min_k_pp_20": s},
                                 "sentence@standalone": {"min_k_pp_20": 0.0}}}
               for p, s in ((-1.0, -9.0), (-9.0, -1.0), (-5.0, -5.0), (-6.0, None), (-7.0, -8.0))]
    name = add_headline(per_doc, also=["question@standalone", "sentence@standalone"])
    assert name == ("Fisher rank combination of min_k_pp_20 over query, question@standalone, "
                    "sentence@standalone")
    heads = [o["memorization"]["headline"]["score"] for o in per_doc]
    # p-values (share scoring at least as high, 1/n added): query 0.2, 1.0, 0.4, 0.6, 0.8 and
    # question 1.0, 0.25, 0.5, -, 0.75: -log sums 1.61, 1.39, 1.61, 0.51, 0.51
    assert min(heads[0], heads[2]) > heads[1] > max(heads[3], heads[4])
    assert 0 < min(heads) and max(heads) <= 1
    # the same order without the component that ranks every doc alike
    bare = [{"memorization": {k: v for k, v in o["memorization"].items() if k.startswith("q")}}
            for o in per_doc]
    add_headline(bare, also=["question@standalone"])
    b = [o["memorization"]["headline"]["score"] for o in bare]
    assert min(b[0], b[2]) > b[1] > max(b[3], b[4])
    np.testing.assert_allclose(rank_normalise(np.array([3.0, np.nan, 1.0, 3.0])), [0.8333333, np.nan, 1 / 3,
                                                                                   0.8333333], rtol=1e-6)
    assert add_headline([{"memorization": {}}]) is None


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """The MC-TACO sample, with torch on one thread while this module trains and scores (tiny
    matrices: a second thread only spins on a loaded machine)."""
    import torch

    shared_file("mc_taco/test_9442.tsv")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("headline")
    prep = root / "prep"
    # even groups "dirty": the model sees them; odd groups never
    write_task(prep, "mc_taco", "test", read_mc_taco(SHARED_DATA / "mc_taco" / "test_9442.tsv", N_GROUPS),
               dirty_every=2)
    yield root, prep, load_task(prep, "mc_taco", "test")
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def sample_by_sentence(tmp_path_factory):
    """One question group per distinct MC-TACO sentence (N_GROUPS sentences), every other one seen:
    a passage shows a sentence, so an unseen group must not share its sentence with a seen one."""
    import torch

    shared_file("mc_taco/test_9442.tsv")
    wiki = shared_file("corpus/wiki_sample.jsonl")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("passages")
    prep = root / "prep"
    rows = one_question_per_sentence(read_mc_taco(SHARED_DATA / "mc_taco" / "test_9442.tsv", 8 * N_GROUPS),
                                     N_GROUPS)
    write_task(prep, "mc_taco", "test", rows, dirty_every=2)
    yield root, prep, load_task(prep, "mc_taco", "test"), wiki
    torch.set_num_threads(threads)


@pytest.mark.slow
def test_headline_finds_the_docs_whose_source_passage_was_seen(sample_by_sentence):
    root, prep, data, wiki = sample_by_sentence
    seen = sorted({d["sentence"] for d, c in zip(data.docs, data.clean, strict=True) if not c})
    assert len(seen) == N_GROUPS // 2
    assert not set(seen) & {d["sentence"] for d, c in zip(data.docs, data.clean, strict=True) if c}
    passages = source_passages(seen, wiki)
    assert all(s in p and len(p) > 3 * len(s) for s, p in zip(seen, passages, strict=True))
    # a passage is about five times a query's tokens: 25 full-batch steps leave the 2-layer model
    # with the passages half learned (every score of the sentence but Min-K%++ at AUROC 1.0, Min-K%++
    # 0.76); 40 learn them (Min-K%++ 1.0). Fine-tuned SmolLM2 itself: headline 0.96 after 5 epochs
    # (scripts/memorization_exposure_table.py --smollm2)
    model = fine_tuned_tiny_model(root / "model_passages", passages, steps=40)
    _, _, auc = _headline_auroc(prep, model, root / "eval_passages")
    print("passages", {k: round(v, 3) for k, v in auc.items()})
    assert auc["headline"] >= HEADLINE_AUROC, auc


def _headline_auroc(prep, model, out):
    from tcqa_data.eval.runner import evaluate

    # evaluate's defaults, as a user runs it
    res = evaluate(prep, str(model), device="cpu", batch_size=8, output=out, quiet=True, bootstrap=0,
                   write=False)
    samples = [s for s in res["_samples"] if s["task"] == "mc_taco"]
    dirty = [s["subset"] == "dirty" for s in samples]

    def auroc(get):
        return float(roc_auc_score(dirty, [get(s["memorization"]) for s in samples]))

    return res, samples, {"headline": auroc(lambda m: m["headline"]["score"]),
                          "prompt": auroc(lambda m: m["query"]["min_k_pp_20"]),
                          "standalone": auroc(lambda m: m["question@standalone"]["min_k_pp_20"])}


@pytest.mark.slow
@pytest.mark.parametrize("exposure", ["queries", "prompts"])
def test_headline_finds_the_seen_docs_whichever_way_they_were_seen(sample, exposure):
    root, prep, data = sample
    seen = [d for d, c in zip(data.docs, data.clean, strict=True) if not c]
    texts = sorted({data.spec.decontamination_query(d) if exposure == "queries" else data.spec.text(d)
                    for d in seen})
    model = fine_tuned_tiny_model(root / f"model_{exposure}", texts)
    res, samples, auc = _headline_auroc(prep, model, root / f"eval_{exposure}")
    print(exposure, {k: round(v, 3) for k, v in auc.items()})
    assert auc["headline"] >= HEADLINE_AUROC, auc
    if exposure == "queries":
        # each distinct text once per context, and its scores are those of the text on its own
        from tcqa_data.eval.models import load_model
        from tcqa_data.eval.scoring import Engine

        engine = Engine(load_model(str(model), device="cpu"), 4)
        for s in samples[:4]:
            doc = data.docs[s["doc_id"]]
            assert s["memorization_context"]["question@standalone"] == "standalone"
            text = doc["question"]
            want = memorization_scores(token_stats(engine, [text])[0], text)
            assert s["memorization"]["question@standalone"] == pytest.approx(want, rel=1e-4, abs=1e-5)
            # the sentence begins the prompt: its standalone scores are its in-prompt ones
            assert s["memorization"]["sentence@standalone"] == s["memorization"]["sentence"]
        count = res["tasks"]["mc_taco"]["memorization_context"]
        # the question scored alone for each doc (the pass scores each distinct text once)
        assert count["standalone_pass"] == len(samples)
        assert samples[0]["memorization"]["headline"]["name"] == \
            "Fisher rank combination of min_k_pp_20 over query, question@standalone, sentence@standalone"
