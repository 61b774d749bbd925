"""The scoring engines: lm-eval's encoding, and packed (shared-prefix) vs plain computation."""

from __future__ import annotations

import json

import pytest
from conftest import shared_file

from tcqa_data.eval.models import load_model
from tcqa_data.eval.packing import pack
from tcqa_data.eval.scoring import (
    Engine,
    LLRequest,
    encode_pairs,
    generate_until,
    loglikelihoods,
    tok_encode_batch,
)


@pytest.fixture(scope="module")
def tiny(tiny_model):
    return load_model(str(tiny_model), device="cpu")


def test_encode_pair_moves_trailing_space_and_splits_whole_encoding(tiny):
    tok = tiny.tokenizer
    (ctx, cont), = encode_pairs(tok, [("Answer: yes\nPlausible: ", "no")])
    assert ctx == tok.encode("Answer: yes\nPlausible:")
    whole = tok.encode("Answer: yes\nPlausible: no")
    assert ctx + cont == whole and cont == whole[len(ctx):]


def test_no_bos_unless_the_tokenizer_adds_one(tiny):
    tok = tiny.tokenizer
    ids = tok_encode_batch(tok, ["Hello world"])[0]
    assert ids == tok("Hello world")["input_ids"]
    # a string already starting with the BOS text gets no second one
    marked = tok_encode_batch(tok, [tok.bos_token + "Hello"])[0]
    assert marked == tok(tok.bos_token + "Hello", add_special_tokens=False)["input_ids"]


def test_pack_layout():
    p = pack([[1, 2, 3, 4], [1, 2, 5], [1, 2]])
    assert p.tokens == [1, 2, 3, 4, 5]
    assert p.positions == [0, 1, 2, 3, 2]
    assert p.segments == [0, 0, 1, 1, 2]
    assert p.maps == [[0, 1, 2, 3], [0, 1, 4], [0, 1]]


def _mc_requests(tiny, n_groups=4):
    path = shared_file("mc_taco/dev_3783.tsv")
    rows, groups = [], {}
    for line in open(path, encoding="utf-8").read().splitlines():
        s, q, a, *_ = line.split("\t")
        gid = groups.setdefault((s, q), len(groups))
        if gid >= n_groups:
            break
        rows.append((gid, f"{s}\nQuestion: {q}\nAnswer: {a}\nPlausible:"))
    # add a multi-token continuation so the general path (not just one-token) is covered
    pairs = [(ctx, c) for _, ctx in rows for c in (" no", " yes", " not at all")]
    shares = [g for g, _ in rows for _ in range(3)]
    enc = encode_pairs(tiny.tokenizer, pairs)
    return [LLRequest(c, k, s) for (c, k), s in zip(enc, shares, strict=True)]


def test_packed_loglikelihoods_equal_plain(tiny):
    reqs = _mc_requests(tiny)
    packed_engine = Engine(tiny, batch_size=3)
    assert packed_engine.packing
    packed = loglikelihoods(packed_engine, reqs)
    plain = loglikelihoods(Engine(tiny, batch_size=5, packing=False), reqs)
    assert [g for _, g in packed] == [g for _, g in plain]
    assert [ll for ll, _ in packed] == pytest.approx([ll for ll, _ in plain], abs=1e-4)
    assert any(len(r.continuation_enc) > 1 for r in reqs)


def test_packed_generation_equals_plain(tiny):
    path = shared_file("based_squad/validation.jsonl")
    texts = [json.loads(line)["text"].strip() for line, _ in zip(open(path, encoding="utf-8"), range(12),
                                                                  strict=False)]
    ctxs = tok_encode_batch(tiny.tokenizer, texts, for_generation=True)
    a = generate_until(Engine(tiny, batch_size=4), ctxs, ["\n"], 48)
    b = generate_until(Engine(tiny, batch_size=3, packing=False), ctxs, ["\n"], 48)
    assert a == b
    assert all("\n" not in g for g in a)
