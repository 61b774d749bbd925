"""Normalization equals lm-eval's Janitor; n-gram hashes are stable, exact and layout-independent."""

from __future__ import annotations

import json
import string

import numpy as np
import pytest

from tcqa_data.decontam.core.hashing import (
    HASH_NAME,
    batch_ngram_hashes,
    ngram_hashes,
    token_ngram_hashes,
)
from tcqa_data.decontam.core.normalize import normalize, token_char_spans, tokenize
from tcqa_data.errors import ConfigError

janitor_mod = pytest.importorskip("lm_eval.decontamination.janitor",
                                  reason="lm-eval (test extra) not installed")

# Every kind of whitespace str.split() knows, ASCII punctuation inside and around words,
# non-ASCII letters/punctuation (kept by the Janitor), a lone surrogate, control chars.
TRICKY = ("Hello,\u00a0WORLD!\tIt's\u2003a  \"test\"\u3000of\x1cthe\x1dsplit\x1e(rules)\x1f"
          "\u2028next\u2029line\u0085nel\u202fnnbsp\u205fmmsp\u1680ogham  --- ... "
          "Straße «Ünïcode» café—dash \ud800 x\x00y \u200bzero-width \x0bvt\x0cff\r\n")


def _wiki_texts(path, k):
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line)["text"] for _, line in zip(range(k), fh, strict=False)]


def test_janitor_tokens_equal_lm_eval_on_real_text(wiki_sample):
    jan = janitor_mod.Janitor()
    texts = _wiki_texts(wiki_sample, 200) + [TRICKY, "", "   ", "!!! ,,, ..."]
    for text in texts:
        expected = jan.normalize_string(text).split()
        assert normalize(text) == jan.normalize_string(text)
        assert tokenize(text) == expected
        # the fast byte path behind the hashes sees exactly the same tokens
        h = ngram_hashes(text, 1)
        assert len(h) == len(expected)
        assert np.array_equal(h, token_ngram_hashes(expected, 1))


def test_our_13grams_equal_lm_eval_word_ngrams(wiki_sample):
    jan = janitor_mod.Janitor()
    for text in _wiki_texts(wiki_sample, 30)[10:30] + [TRICKY * 3]:
        theirs = list(janitor_mod.word_ngrams(jan.normalize_string(text), 13))
        ours = ngram_hashes(text, 13)
        assert len(ours) == len(theirs)
        # hashing lm-eval's n-gram strings gives our hashes, position by position
        assert batch_ngram_hashes(theirs, [13])[13][0].tolist() == ours.tolist()
    assert int(token_ngram_hashes(theirs[7].split(), 13)[0]) == int(ours[7])


def test_token_char_spans_point_at_the_tokens(wiki_sample):
    for text in _wiki_texts(wiki_sample, 5) + [TRICKY]:
        toks = tokenize(text)
        spans = token_char_spans(text)
        assert len(spans) == len(toks)
        for tok, (a, b) in zip(toks, spans, strict=True):
            assert normalize(text[a:b]) == tok
            assert text[a] not in string.punctuation and text[b - 1] not in string.punctuation
    text = "Mr. Smith's car—it's (very) fast!"
    assert [text[a:b] for a, b in token_char_spans(text)] == ["Mr", "Smith's", "car—it's", "very", "fast"]


def test_unicode_scheme():
    text = "Ｆｕｌｌ-width STRASSE Straße «quoted» l’été… ﬁne"
    assert tokenize(text, "unicode") == ["fullwidth", "strasse", "strasse", "quoted", "lété", "fine"]
    assert ngram_hashes("Straße", 1, "unicode")[0] == ngram_hashes("STRASSE", 1, "unicode")[0]
    assert ngram_hashes("Straße", 1)[0] != ngram_hashes("STRASSE", 1)[0]  # janitor keeps ß
    spans = token_char_spans(text, "unicode")
    assert len(spans) == 6 and text[spans[0][0]:spans[0][1]] == "Ｆｕｌｌ-width"
    with pytest.raises(ConfigError):
        tokenize("x", "nfc")


def test_hash_is_stable_and_seeded():
    assert HASH_NAME == "tcqa-word64-poly64-splitmix64-v1"
    h = ngram_hashes("The quick brown fox jumps over the lazy dog", 3)
    # Golden values: an index built by one version must be readable by the next.
    assert [hex(int(x)) for x in h[:3]] == ["0x3d58cf7787aa2f38", "0xdb545127d4a3d639", "0xcb47b1daad7e0d7c"]
    assert hex(int(ngram_hashes("The quick brown fox jumps over the lazy dog", 3, seed=7)[0])) \
        == "0xf112aeb342124e68"
    assert h.dtype == np.uint64 and len(h) == 7
    # normalization and whitespace layout do not matter, token order does
    assert np.array_equal(h, ngram_hashes("the QUICK, brown\n\nfox jumps -- over the lazy dog!", 3))
    assert ngram_hashes("fox brown quick", 3)[0] != ngram_hashes("quick brown fox", 3)[0]
    # different n never collide on the same tokens
    assert ngram_hashes("a b c", 3)[0] != ngram_hashes("a b c", 2)[0]
    assert len(ngram_hashes("one two", 13)) == 0 and len(ngram_hashes("", 1)) == 0


def test_batch_matches_single_and_never_crosses_documents(wiki_sample):
    long_tokens = "x" * 9 + " " + "y" * 64 + " " + "z" * 65 + " " + "w" * 1000 + " https://example.org/" * 3
    texts = _wiki_texts(wiki_sample, 12) + ["", "short doc", TRICKY, "", "", long_tokens, "a", "b c"]
    res = batch_ngram_hashes(texts, [1, 8, 13], seed=3)
    for n, (h, doc) in res.items():
        assert np.all(np.diff(doc) >= 0)
        for i, t in enumerate(texts):
            assert np.array_equal(h[doc == i], ngram_hashes(t, n, seed=3))
    # the last tokens of one doc plus the first of the next form no n-gram
    a, b = "w1 w2 w3", "w4 w5 w6"
    joined = set(ngram_hashes(a + " " + b, 3).tolist())
    split = set(batch_ngram_hashes([a, b], [3])[3][0].tolist())
    assert split < joined and len(split) == 2
    # tokens differing only past byte 8, 64 or 65 hash differently; equal tokens equally
    toks = ["abcdefgh" + s for s in ("", "i", "j", "ij")]
    toks += ["q" * 64, "q" * 63 + "r", "q" * 70, "q" * 69 + "r"]
    h1 = token_ngram_hashes(toks + toks, 1)
    assert len(set(h1[:8].tolist())) == 8 and np.array_equal(h1[:8], h1[8:])


def test_hash_distribution_has_no_collisions_on_real_ngrams(wiki_sample):
    jan = janitor_mod.Janitor()
    texts = _wiki_texts(wiki_sample, 60)
    strings = set()
    for t in texts:
        strings.update(janitor_mod.word_ngrams(jan.normalize_string(t), 13))
    h, _ = batch_ngram_hashes(texts, [13])[13]
    assert len(np.unique(h)) == len(strings)
    # top bits pick the bucket: they must spread evenly
    counts = np.bincount((h >> np.uint64(60)).astype(np.int64), minlength=16)
    assert counts.min() > 0.8 * len(h) / 16


def test_written_out_tables_equal_their_definitions():
    import sys

    from tcqa_data.decontam.core.hashing import JANITOR_ASCII_MAP
    from tcqa_data.decontam.core.normalize import UNICODE_WHITESPACE

    assert UNICODE_WHITESPACE == tuple(chr(c) for c in range(0x80, sys.maxunicode + 1) if chr(c).isspace())
    # the JSONL kernel's ASCII map: str.translate's Janitor table, with str.split()'s whitespace as spaces
    for c in range(128):
        want = normalize(chr(c))
        got = int(JANITOR_ASCII_MAP[c])
        assert (got == -1) == (want == ""), c
        assert got == -1 or chr(got) == (" " if want.isspace() else want), c


def test_hash_normalized_equals_batch_hashes(wiki_sample):
    from tcqa_data.decontam.core.hashing import _blank_unicode_whitespace, encode_normalized, hash_normalized

    texts = _wiki_texts(wiki_sample, 5) + [TRICKY, "", "one"]
    parts = [np.frombuffer(encode_normalized(t), dtype=np.uint8) for t in texts]
    data = np.full(1 + sum(len(p) + 1 for p in parts) + 8, 32, dtype=np.uint8)
    starts = [1]
    for p in parts:
        data[starts[-1]:starts[-1] + len(p)] = p
        starts.append(starts[-1] + len(p) + 1)
    _blank_unicode_whitespace(data)
    got = hash_normalized(data, np.array(starts), [1, 13], seed=2)
    want = batch_ngram_hashes(texts, [1, 13], seed=2)
    for n in (1, 13):
        assert np.array_equal(got[n][0], want[n][0]) and np.array_equal(got[n][1], want[n][1])


@pytest.mark.parametrize("path", ["numba", "numpy"])
@pytest.mark.parametrize("scheme", ["janitor", "unicode"])
def test_word_counts_equal_token_counts(wiki_sample, monkeypatch, path, scheme):
    from tcqa_data.decontam.core import kernel
    from tcqa_data.decontam.core.hashing import word_counts

    if path == "numba":
        pytest.importorskip("numba")
    monkeypatch.setenv(kernel.ENV, path)
    lines = wiki_sample.read_text(encoding="utf-8").splitlines()[:40]
    texts = [json.loads(line)["text"] for line in lines]
    texts += ["", "  ", "tab\tsep\nnew\x1cline\x1f end", "no\u00a0break\u3000wide \u2028 sep", "...",
              "x" * 90, "lone \ud83d surrogate", "Punctuation!!! only ... words; (here) -- and [there]."]
    counts = word_counts(texts, scheme)
    assert counts.dtype == np.int64
    assert counts.tolist() == [len(tokenize(t, scheme)) for t in texts]
    assert counts.max() > 1000 and word_counts([], scheme).tolist() == []
