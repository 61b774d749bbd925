"""Corpus- and reference-calibrated memorization scores (``eval.calibration``): DC-PDD's token
frequencies are the same whether read from an index's text store or streamed from the corpus
files, and evaluate's ``--reference-model`` / ``--reference-frequencies`` put the named components
into each doc's ``memorization.query``."""

from __future__ import annotations

import math

import numpy as np
import pytest
from eval_fixtures import build_prep_dir, fine_tuned_tiny_model

from tcqa_data.errors import ConfigError
from tcqa_data.eval.calibration import (
    DC_PDD_BOUND,
    dc_pdd,
    frequencies_from_corpus,
    frequencies_from_index,
    reference_frequencies_for,
)


def test_dc_pdd_keeps_first_occurrences_and_bounds_each_token():
    # token 5 twice (its second occurrence is left out), token 9 with a frequency so low that its
    # term passes the bound
    ids = [5, 7, 5, 9]
    logprob = np.log([0.5, 0.001, 0.9, 0.2])
    probs = np.full(10, 0.1)
    probs[9] = 1e-30
    terms = [min(0.5 * -math.log(0.1), DC_PDD_BOUND), 0.001 * -math.log(0.1), DC_PDD_BOUND]
    assert dc_pdd(logprob, ids, probs) == pytest.approx(sum(terms) / 3)
    assert dc_pdd(np.zeros(0), [], probs) is None


@pytest.fixture(scope="module")
def corpus_and_index(wiki_sample, tmp_path_factory):
    """The first 8 real wiki articles as a JSONL corpus, and an n-gram index of it (its text store
    holds their locations)."""
    from tcqa_data.decontam.build import build_index

    root = tmp_path_factory.mktemp("calibration")
    corpus = root / "corpus.jsonl"
    corpus.write_text("\n".join(wiki_sample.read_text(encoding="utf-8").splitlines()[:8]) + "\n",
                      encoding="utf-8")
    build_index([str(corpus)], root / "index", quiet=True, workers=1, minhash=False)
    return corpus, root / "index"


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


def test_frequencies_from_the_index_equal_those_streamed_from_the_corpus(corpus_and_index, tokenizer,
                                                                          tiny_model):
    from tcqa_data.eval.memorization import encode_for_scoring, token_stats
    from tcqa_data.eval.models import load_model
    from tcqa_data.eval.scoring import Engine

    corpus, index = corpus_and_index
    from_index = frequencies_from_index(tokenizer, index)
    streamed = frequencies_from_corpus(tokenizer, [str(corpus)])
    assert from_index.record()["docs"] == streamed.record()["docs"] == 8
    assert from_index.counts.sum() > 10_000
    np.testing.assert_array_equal(from_index.counts, streamed.counts)
    # evaluate's `auto` finds each from the prepared data's manifest, and the DC-PDD scores agree
    by_index = reference_frequencies_for(tokenizer, "auto", {"index": {"path": str(index)}})
    by_stream = reference_frequencies_for(tokenizer, "auto", {"index": {"inputs": [{"path": str(corpus)}]}})
    demo = reference_frequencies_for(tokenizer, "auto", {"index": {"path": "/nonexistent"}})
    assert (by_index.source["source"], by_stream.source["source"], demo.source["source"]) == \
        ("index text store", "corpus stream", "shipped demo corpus")
    engine = Engine(load_model(str(tiny_model), device="cpu"), 4)
    text = "Some of the people who took advantage of her through a loan program were sent to jail."
    stats = token_stats(engine, [text])[0]
    ids = encode_for_scoring(tokenizer, [text], 2048)[0][1:]
    a, b, c = (dc_pdd(stats.logprob, ids, f.probabilities()) for f in (by_index, by_stream, demo))
    assert a == pytest.approx(b, rel=1e-12) and 0 < a <= DC_PDD_BOUND
    assert c != pytest.approx(a, rel=1e-6)  # another corpus, other frequencies
    with pytest.raises(ConfigError, match="--reference-frequencies"):
        reference_frequencies_for(tokenizer, "wiki", None)


def test_evaluate_adds_the_reference_ratio_and_dc_pdd(tmp_path, tiny_model):
    from conftest import SHARED_DATA, shared_file

    from tcqa_data.api import evaluate
    from tcqa_data.eval.memorization import memorization_scores, token_stats
    from tcqa_data.eval.models import load_model
    from tcqa_data.eval.scoring import Engine
    from tcqa_data.prep.prepared import load_task

    shared_file("mc_taco/dev_3783.tsv")
    prep = build_prep_dir(tmp_path / "prep", SHARED_DATA, mc_groups=3, squad_docs=0, dirty_every=2)
    data = load_task(prep, "mc_taco", "validation")
    model = fine_tuned_tiny_model(tmp_path / "tuned", sorted({data.spec.decontamination_query(d)
                                                              for d in data.docs[:8]}), steps=5)
    res = evaluate(prep, model=str(model), device="cpu", batch_size=4, quiet=True, analysis=False,
                   out=tmp_path / "eval", memorization_context="standalone", reference_model=str(tiny_model),
                   reference_frequencies="demo")
    cal = res["memorization"]["calibration"]
    assert cal["dc_pdd"]["frequencies"]["source"] == "shipped demo corpus"
    assert cal["dc_pdd"]["frequencies"]["docs"] == 162
    assert cal["reference_loss_ratio"]["source"] == str(tiny_model)
    ref = Engine(load_model(str(tiny_model), device="cpu"), 4)
    for s in res["_samples"][:3]:
        query = s["memorization"]["query"]
        text = data.spec.decontamination_query(data.docs[s["doc_id"]])
        ref_loss = memorization_scores(token_stats(ref, [text])[0], text)["loss"]
        assert query["reference_loss_ratio"] == pytest.approx(query["loss"] - ref_loss, rel=1e-4, abs=1e-5)
        assert 0 < query["dc_pdd"] <= DC_PDD_BOUND
        assert "dc_pdd" not in s["memorization"]["sentence"]  # the query only
    with pytest.raises(ConfigError, match="need --memorization"):
        evaluate(prep, model=str(model), device="cpu", quiet=True, analysis=False, out=tmp_path / "e2",
                 memorization=False, reference_frequencies="demo")
