"""The semantic tier's prefilter (``decontam/semantic/prefilter.py``): a static embedding model
screens the (sub-span, view) pairs, and the transformer scores only the pairs past its bar.

Real data: MMLU abstract-algebra items of ../shared/data/paraphrase with their rephrasings and
same-subject training items in a small corpus; the bundled models (MiniLM and WordLlama).
"""

from __future__ import annotations

import json
import logging
import shutil

import numpy as np
import pytest
from conftest import shared_file

from tcqa_data.errors import ConfigError

pytest.importorskip("sentence_transformers")
pytest.importorskip("wordllama")


def test_static_model_is_the_pinned_wordllama_and_embeds_as_its_library_does(wiki_sample):
    from tcqa_data.decontam.core.normalize import tokenize
    from tcqa_data.decontam.semantic import prefilter

    m = prefilter.load_static_model()
    assert m.digest == prefilter.STATIC_SHA256
    with open(wiki_sample, encoding="utf-8") as fh:
        texts = [" ".join(tokenize(json.loads(next(fh))["text"], "janitor")[:n]) for n in (5, 40, 160, 600)]
    texts += ["a man is eating food", "a man is eating a piece of bread", "a man is riding a horse", ""]
    ours = m.encode(texts)
    # wordllama's own inference on the same files (its WordLlama.load looks for the bundled
    # tokenizer in a folder the wheel does not have, and configures the root logger: restored)
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    from wordllama.inference import WordLlamaInference

    root.handlers[:] = handlers
    root.setLevel(level)
    folder = prefilter.static_model_dir()
    lib = WordLlamaInference(load_file(str(folder / prefilter.STATIC_WEIGHTS))["embedding.weight"],
                             Tokenizer.from_file(str(folder / prefilter.STATIC_TOKENIZER)))
    theirs = lib.embed(texts[:-1], norm=True)
    assert np.abs(ours[:-1] - theirs).max() < 1e-4
    assert not ours[-1].any()  # no word piece: zeros, cosine 0 with anything
    sims = ours[4:7] @ ours[4:7].T
    assert sims[0, 1] > sims[0, 2] + 0.2


def test_a_wrong_static_weights_file_is_refused_in_one_line(tmp_path, monkeypatch):
    from tcqa_data.decontam.semantic import prefilter

    src = prefilter.static_model_dir()
    bad = tmp_path / "wordllama"
    for rel in (prefilter.STATIC_WEIGHTS, prefilter.STATIC_TOKENIZER):
        (bad / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, bad / rel)
    data = bytearray((bad / prefilter.STATIC_WEIGHTS).read_bytes())
    data[-1] ^= 0xFF  # one byte changed
    (bad / prefilter.STATIC_WEIGHTS).write_bytes(bytes(data))
    monkeypatch.setattr(prefilter, "static_model_dir", lambda: bad)
    with pytest.raises(ConfigError) as err:
        prefilter.load_static_model()
    line = str(err.value)
    assert "\n" not in line and "l2_supercat_256.safetensors" in line and "pip install" in line


def test_only_rules_the_prefilter_keeps_exact_use_it():
    from tcqa_data.decontam.detect.rules import Rule
    from tcqa_data.decontam.semantic.prefilter import SAFE_FROM, prefilter_safe

    def safe(rule: str, judge: bool = False) -> bool:
        return prefilter_safe([t.threshold for t in Rule.parse(rule).terms if t.name == "semantic"], judge)

    assert safe("any-ngram|semantic") and safe(f"semantic>={SAFE_FROM}|aligned>=0.3")
    assert not safe("any-ngram|semantic>=0.5") and not safe("semantic|semantic>=0.6")
    assert not safe("any-ngram|semantic&judge", judge=True)


def test_prefilter_keeps_the_transformers_scores_where_they_count(wiki_sample):
    """Rephrased abstract-algebra items (own docs and spliced into an article) beside same-subject
    training items verbatim and 60 wiki articles, and US-history items not in it: with the
    prefilter, every item the transformer alone scores at ``SAFE_FROM`` or more has the same score,
    span and window; the items it cut carry the static model's name and a stage-1 score below
    SAFE_FROM; the transformer embeds fewer texts."""
    from semantic_devset import _jsonl, item_query

    from tcqa_data.decontam.semantic import DEFAULT_THRESHOLD, load_embedding_model, semantic_from_texts
    from tcqa_data.decontam.semantic.model import DEFAULT_MODEL
    from tcqa_data.decontam.semantic.prefilter import SAFE_FROM, STATIC_MODEL

    folder = shared_file("paraphrase/mmlu_abstract_algebra_test.jsonl").parent
    rows = _jsonl(folder / "mmlu_abstract_algebra_test.jsonl")[:40]
    reph = _jsonl(folder / "mmlu_abstract_algebra_test_rephrased_en.jsonl")[:40]
    with open(wiki_sample, encoding="utf-8") as fh:
        wiki = [json.loads(next(fh))["text"] for _ in range(60)]
    article = next(a for a in wiki if len(a.split()) > 1500)
    paras = article.split("\n\n")
    docs = [item_query(r) for i, r in enumerate(rows) if i % 4 == 2] + [a for a in wiki if a != article]
    injected = [i for i in range(len(rows)) if i % 4 == 0 and reph[i]["text"].strip()]
    half = len(injected) // 2
    docs += [reph[i]["text"] for i in injected[:half]]
    docs.append("\n\n".join(paras[:3] + [reph[i]["text"] for i in injected[half:]] + paras[3:]))
    # and US-history items, not in the corpus: their candidates are wiki windows on the same topic
    history = _jsonl(folder / "mmlu_high_school_us_history_test.jsonl")[:16]
    queries = [item_query(rows[i]) for i in range(len(rows)) if i % 4 != 2] + [item_query(r) for r in history]

    def run(prefilter: bool, floor: float | None = None):
        model = load_embedding_model(prefilter=prefilter, floor=floor)
        return semantic_from_texts(queries, len(docs), lambda ids: [docs[d] for d in ids], model,
                                   "janitor", 0)

    full, staged = run(False), run(True)
    assert set(full.model) <= {DEFAULT_MODEL, None}
    high = np.flatnonzero(np.nan_to_num(full.score, nan=0.0) >= SAFE_FROM)
    assert len(high) >= 5
    assert np.allclose(staged.score[high], full.score[high], atol=1e-5)
    assert np.allclose(staged.cosine[high], full.cosine[high], atol=1e-5)
    for i in high.tolist():
        assert staged.model[i] == DEFAULT_MODEL
        assert (staged.docs[i], staged.spans[i], staged.windows[i]) == (full.docs[i], full.spans[i],
                                                                         full.windows[i])
    cut = [i for i, m in enumerate(staged.model) if m == STATIC_MODEL]
    assert cut and all(staged.score[i] < 0.58 and staged.windows[i] for i in cut)  # prefilter.py's bound
    rest = [i for i, m in enumerate(staged.model) if m == DEFAULT_MODEL]
    assert all(staged.score[i] <= full.score[i] + 1e-5 for i in rest)  # the best of the pairs that passed
    assert np.isnan(staged.score).tolist() == np.isnan(full.score).tolist()  # the same items have candidates
    assert staged.stats["texts_embedded"] < full.stats["texts_embedded"] / 2
    # with the rule's threshold as the floor: the items at or above it are the transformer's as
    # before, the same items reach it, and fewer texts are embedded
    floored = run(True, DEFAULT_THRESHOLD)
    top = np.flatnonzero(np.nan_to_num(full.score, nan=0.0) >= DEFAULT_THRESHOLD)
    assert len(top) >= 3
    assert np.flatnonzero(np.nan_to_num(floored.score, nan=0.0) >= DEFAULT_THRESHOLD).tolist() == top.tolist()
    for i in top.tolist():
        assert floored.model[i] == DEFAULT_MODEL and abs(floored.score[i] - full.score[i]) < 1e-5
        assert (floored.docs[i], floored.spans[i]) == (full.docs[i], full.spans[i])
    assert all(floored.score[i] < DEFAULT_THRESHOLD for i, m in enumerate(floored.model) if m == STATIC_MODEL)
    assert floored.stats["texts_embedded"] < staged.stats["texts_embedded"]
