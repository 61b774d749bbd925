"""Flag rules, GPT-3's auto n, field attribution, and scoring against a real index."""

from __future__ import annotations

import numpy as np
import pytest

from tcqa_data.decontam.detect.rules import Rule, doc_status
from tcqa_data.decontam.detect.score import attribute_fields, auto_ngram
from tcqa_data.errors import ConfigError


def _scores(**cols):
    k = len(next(iter(cols.values())))
    base = {"ngram_hits": [0] * k, "ngram_fraction": [0.0] * k, "longest_match": [0] * k,
            "minhash_sim": [-1.0] * k, "testable": [True] * k}
    base.update(cols)
    return {key: np.asarray(v) for key, v in base.items()}


def test_rule_grammar_and_evaluation():
    r = Rule.parse("ngram-fraction>=0.5|minhash>=0.8")
    assert str(r) == "ngram-fraction>=0.5|minhash>=0.8" and r.uses_minhash
    s = _scores(ngram_fraction=[0.6, 0.2, 0.2, 0.9], minhash_sim=[0.0, 0.85, 0.1, 0.9])
    dirty, fired = r.evaluate(s)
    assert dirty.tolist() == [True, True, False, True]
    assert fired == ["ngram-fraction>=0.5", "minhash>=0.8", "", "ngram-fraction>=0.5|minhash>=0.8"]
    both = Rule.parse("longest >= 20 & minhash>=0.5")
    d2, _ = both.evaluate(_scores(longest_match=[25, 25, 5], minhash_sim=[0.6, 0.1, 0.9]))
    assert d2.tolist() == [True, False, False]
    anyr = Rule.parse("any-ngram")
    d3, _ = anyr.evaluate(_scores(ngram_hits=[0, 1, 3]))
    assert d3.tolist() == [False, True, True]


@pytest.mark.parametrize("bad", ["", "ngram>=3", "minhash>=1.5", "longest>=2.5", "any-ngram>=2", "minhash",
                                 "longest>=0", "a|"])
def test_rule_errors(bad):
    with pytest.raises(ConfigError):
        Rule.parse(bad)


def test_untestable_is_never_silently_clean():
    r = Rule.parse("any-ngram")
    s = _scores(ngram_hits=[0, 0, 2], testable=[True, False, True])
    dirty, _ = r.evaluate(s)
    assert doc_status(dirty, s["testable"], r) == ["clean", "untestable", "dirty"]
    # n-gram terms never fire on an untestable doc, a MinHash term still can
    rm = Rule.parse("longest>=1|minhash>=0.8")
    s2 = _scores(longest_match=[5, 0], minhash_sim=[0.1, 0.9], testable=[False, False])
    d2, _ = rm.evaluate(s2)
    assert d2.tolist() == [False, True]
    assert doc_status(d2, s2["testable"], rm) == ["clean", "dirty"]
    # ... but not when the doc had no MinHash window long enough to query
    assert doc_status(d2, s2["testable"], rm, [0, 1]) == ["untestable", "dirty"]


def test_auto_ngram_is_gpt3_percentile_clamped():
    assert auto_ngram([20] * 100) == 13
    assert auto_ngram([3] * 100) == 8
    lengths = list(range(1, 101))  # 5th percentile = 5.95 -> clamped to 8
    assert auto_ngram(lengths) == 8
    lengths = [10] * 20 + [40] * 180  # 5th percentile = 10
    assert auto_ngram(lengths) == 10


def test_attribution_locates_fields_in_the_query():
    from tcqa_data.decontam.core.normalize import tokenize

    query = "How long was he gone? He left at noon, ate lunch and came back."
    toks = tokenize(query)
    owner = attribute_fields(toks, {"question": "How long was he gone?",
                                    "sentence": "He left at noon, ate lunch and came back."}, tokenize)
    assert owner == ["question"] * 5 + ["sentence"] * 9
    # squad style: one pre-rendered field, located parts, template words left unattributed
    text = "The passage here.\n\nQuestion: What is here?\nAnswer:"
    owner = attribute_fields(tokenize(text), {"context": "The passage here.", "question": "What is here?"},
                             tokenize)
    assert owner == ["context"] * 3 + [""] + ["question"] * 3 + [""]


def test_scores_and_evidence_on_a_small_real_index(tmp_path):
    """Exact scores against an index built from a tiny corpus with known overlaps."""
    import json

    from tcqa_data.decontam.build import build_index
    from tcqa_data.decontam.detect.evidence import IndexEvidence
    from tcqa_data.decontam.detect.score import QueryDoc, score_docs

    seen = "the quick brown fox jumps over the lazy dog near the quiet river bank at dawn"  # 16 words
    corpus = [
        {"id": "a", "text": f"Intro words here. {seen.capitalize()}. More text follows here."},
        {"id": "b", "text": f"Another doc repeats it: {seen}!"},
        {"id": "c", "text": "Something unrelated about trains, stations and timetables in winter."},
    ]
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in corpus))
    idx = tmp_path / "idx"
    build_index([str(path)], idx, id_field="id", minhash=False, quiet=True, workers=1)
    question = "What did the fox do this morning before breakfast time?"  # 10 words, unseen
    sentence = "The QUICK brown fox, jumps over the lazy dog near the quiet river bank at dawn."
    docs = [
        QueryDoc(f"{question} {sentence}", {"question": question, "sentence": sentence}),
        QueryDoc("Completely different words that never appear in that corpus at all today", {}),
        QueryDoc("too short to test", {}),
    ]
    evidence = IndexEvidence.open(idx)
    cols = score_docs(docs, evidence, 13, use_minhash=False)
    assert cols["query_words"] == [26, 12, 4]
    assert cols["testable"] == [True, False, False]
    assert cols["ngram_total"] == [14, 0, 0]
    # the 16 seen words give 4 matching 13-grams, all inside the sentence field
    assert cols["ngram_hits"][0] == 4
    assert cols["ngram_fraction"][0] == 4 / 14
    assert cols["longest_match"][0] == 16 and cols["matched_words"][0] == 16
    assert cols["match_field"][0] == "sentence"
    assert cols["field_names"][0] == ["question", "sentence"]
    assert cols["field_matched_words"][0] == [0, 16]
    (s, e), = cols["match_spans"][0]
    assert docs[0].query[s:e] == sentence[:-1]  # the highlight is trimmed of the final period
    assert cols["matched_doc_refs"][0] == ["a", "b"] and cols["matched_doc_ngrams"][0] == [4, 4]
    assert cols["min_doc_freq"][0] == cols["max_doc_freq"][0] == 2
    assert cols["ngram_hits"][1:] == [0, 0] and cols["longest_match"][1:] == [0, 0]
    # n-grams found in more than one corpus doc are ignored with max_corpus_freq=1
    strict = score_docs(docs, evidence, 13, max_corpus_freq=1, use_minhash=False)
    assert strict["ngram_hits"][0] == 0 and strict["ngram_common"][0] == 4
    assert strict["longest_match"][0] == 0


def test_field_positions_equal_the_token_loop():
    """The NUL-joined search finds each field where the token-by-token loop finds it: repeated
    words, fields found only before the cursor, fields absent, empty fields, partial-word overlaps."""
    import random

    from tcqa_data.decontam.detect.score import _find_sub, field_positions

    def by_loop(tokens, fields):
        out, cursor = {}, 0
        for name, value in fields.items():
            ftoks = value.split()
            pos = _find_sub(tokens, ftoks, cursor)
            if pos < 0:
                pos = _find_sub(tokens, ftoks, 0)
            if pos >= 0:
                out[name] = (pos, pos + len(ftoks))
                cursor = pos + len(ftoks)
        return out

    rng = random.Random(7)
    vocab = ["a", "ab", "b", "ba", "the", "he", "then", "x"] * 4 + ["a\0b"]  # NUL: the loop path
    found = absent = 0
    for _ in range(3000):
        tokens = [rng.choice(vocab) for _ in range(rng.randint(0, 12))]
        fields = {}
        for k in range(rng.randint(1, 3)):
            if tokens and rng.random() < 0.7:
                i = rng.randrange(len(tokens))
                fields[f"f{k}"] = " ".join(tokens[i:i + rng.randint(0, 4)])
            else:
                fields[f"f{k}"] = " ".join(rng.choice(vocab) for _ in range(rng.randint(1, 3)))
        got = field_positions(tokens, fields, str.split)
        assert got == by_loop(tokens, fields), (tokens, fields)
        found += len(got)
        absent += len(fields) - len(got)
    assert found > 1000 and absent > 100
