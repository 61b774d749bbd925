"""Query side of MinHash verification (``verify="text"``): candidate docs are cut into windows and
signed on code points with the build's chain (``feed.window_signatures``), the same windows and
signatures as the ``str`` path (``window_spans`` + ``sign_spans``); the text store reads candidate
lines in batches (``TextStore.texts``), the same texts as one ``text`` per doc."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_minhash_feed import EDGE
from test_readers import CRAFTED, PYTHON_LINES
from test_textstore_build import _corpus

from tcqa_data.decontam.build import build_index
from tcqa_data.decontam.core import kernel
from tcqa_data.decontam.minhash import MinHashIndex, MinHashParams, feed
from tcqa_data.decontam.minhash.sketch import sign_spans
from tcqa_data.decontam.minhash.windows import texts_codepoints, window_spans
from tcqa_data.decontam.textstore.store import TextStore

pytest.importorskip("numba")

# whitespace and case edges: Unicode spaces Janitor blanks and str.isspace knows (NEL, line and
# paragraph separators, information separators), zero-width chars it does not, case mappings that
# change length, combining marks, lone surrogates next to sentence ends, CRLF paragraphs
MORE_EDGE = [
    "\x1c\x1d\x1e\x1f sep chars. Then\x85NEL line. And\u2029para sep. Zero\u200bwidth\ufeffbom here.",
    "İstanbul ǅ ß ﬁ ŉ. Straße GROSS. Ὀδυσσεύς ΣΟΦΟΣ. e\u0301 cafe\u0301. End\ud800. Next\udfff one.",
    "Line one.\r\n\r\nLine two after CRLF.\r\nSame para. \t\v\f Tabs. \u00a0\u2007\u202f.",
    "日本語の文です。次の文。 混合 text with 中文 words. Ünïcödé wörds åll över. Dr. Ünal came.",
    "  \n\n  leading blanks. " + "word " * 150 + "over-long run-on sentence without a stop",
    "ok",
]


@pytest.fixture(scope="module")
def real_texts(wiki_sample: Path) -> list[str]:
    with open(wiki_sample, encoding="utf-8") as fh:
        return [json.loads(next(fh))["text"] for _ in range(80)]


@pytest.fixture
def kernels_on(monkeypatch):
    monkeypatch.setenv(kernel.ENV, "numba")


def _str_path(texts, params):
    win_doc, starts, ends = window_spans(texts, params)
    return (win_doc, *sign_spans(texts, win_doc, starts, ends, params))


def test_texts_codepoints_are_one_uint32_per_char():
    texts = EDGE + MORE_EDGE + ["", "ascii only", "é", "\U0001F600\ud83d"]
    cps, doc_start = texts_codepoints(texts)
    assert cps.dtype == np.uint32 and doc_start.dtype == np.int64
    assert np.array_equal(cps, np.frombuffer("".join(texts).encode("utf-32-le", "surrogatepass"), np.uint32))
    assert doc_start.tolist() == np.cumsum([0] + [len(t) for t in texts]).tolist()
    cps, doc_start = texts_codepoints([])
    assert len(cps) == 0 and doc_start.tolist() == [0]


@pytest.mark.parametrize("params", [MinHashParams(verify="text"),
                                    MinHashParams(verify="text", window_min_words=3, window_max_words=5),
                                    MinHashParams(verify="text", shingle_words=3, num_perm=64)])
def test_codepoint_signatures_equal_the_str_path(real_texts, kernels_on, params):
    """Real wiki articles (non-ASCII in many) between crafted edge cases, several batch shapes:
    the same windows (text index and count) and the same 32-bit signatures and shingle counts."""
    texts = EDGE + real_texts[:40] + MORE_EDGE + real_texts[40:] + EDGE
    for batch in (texts, texts[:1], MORE_EDGE, [t for t in texts if t.strip()], [""], []):
        got = feed.window_signatures(batch, params)
        want = _str_path(batch, params)
        assert len(got[0]) == len(want[0])
        for a, b in zip(got, want, strict=True):
            assert a.dtype == b.dtype and np.array_equal(a, b)
    win_doc, sigs, counts = feed.window_signatures(texts, params)
    assert len(win_doc) > 1000 and (counts == 0).any() and (counts > 0).any()


def test_other_settings_keep_the_str_path(real_texts, monkeypatch):
    """No kernels, or the NLTK splitter: ``window_spans`` and ``sign_spans`` as before."""
    texts = real_texts[:3] + MORE_EDGE
    monkeypatch.setenv(kernel.ENV, "numpy")
    p = MinHashParams(verify="text")
    for a, b in zip(feed.window_signatures(texts, p), _str_path(texts, p), strict=True):
        assert np.array_equal(a, b)
    monkeypatch.setenv(kernel.ENV, "numba")
    p = MinHashParams(verify="text", sentence_splitter="punkt")
    for a, b in zip(feed.window_signatures(texts, p), _str_path(texts, p), strict=True):
        assert np.array_equal(a, b)


@pytest.fixture(scope="module")
def edge_index(tmp_path_factory, wiki_sample) -> Path:
    """A text-verified MinHash index over real articles and the edge cases (JSONL, text store)."""
    root = tmp_path_factory.mktemp("verify_cps")
    with open(wiki_sample, encoding="utf-8") as fh:
        rows = [json.loads(next(fh)) for _ in range(60)]
    docs = [{"title": r["title"], "text": r["text"]} for r in rows]
    docs += [{"title": f"edge{k}", "text": t} for k, t in enumerate(EDGE + MORE_EDGE) if t.strip()]
    path = root / "c.jsonl"
    # non-ASCII as UTF-8 in half the lines (lone surrogates only as escapes)
    path.write_text("".join(json.dumps(d, ensure_ascii=k % 2 == 0 or d["title"].startswith("edge")) + "\n"
                            for k, d in enumerate(docs)), encoding="utf-8")
    build_index([str(path)], root / "idx", id_field="title", quiet=True, workers=1,
                minhash=MinHashParams(verify="text", window_min_words=5))
    return root / "idx"


def test_doc_signatures_equal_the_str_path(edge_index, kernels_on):
    """Every doc of a built index re-signed from the text store: the windows the index holds
    (``doc_windows``), the signatures of the ``str`` path."""
    mh = MinHashIndex.open(edge_index)
    assert mh.params.verify == "text" and mh.params.window_min_words == 5
    docs = list(range(len(mh.doc_windows) - 1))
    got = mh.doc_signatures(docs[::-1])[::-1]
    texts = TextStore.open(edge_index).texts(docs)
    win_doc, sigs, counts = _str_path(texts, mh.params)
    keep = counts > 0
    for d in docs:
        want = sigs[keep & (win_doc == d)]
        assert got[d].shape == want.shape and np.array_equal(got[d], want)
        assert len(want) == mh.doc_windows[d + 1] - mh.doc_windows[d]


def test_store_texts_equal_one_text_per_doc(tmp_path, wiki_sample):
    """Batched line reads of a JSONL input with a byte order mark, lines the index skipped (so
    offsets that are not consecutive lines), and a last line without a newline."""
    with open(wiki_sample, encoding="utf-8") as fh:
        wiki = [json.dumps({"title": r["title"], "text": r["text"]}, ensure_ascii=k % 2 == 0).encode()
                for k, r in enumerate(json.loads(next(fh)) for _ in range(30))]
    path = tmp_path / "c.jsonl"
    path.write_bytes(_corpus(wiki, CRAFTED + PYTHON_LINES))
    second = tmp_path / "d.jsonl"
    second.write_bytes(b"\n".join(wiki[:5]) + b"\n\n\n" + b"\n".join(wiki[5:9]) + b"\n")
    index = tmp_path / "idx"
    build_index([str(path), str(second)], index, minhash=False, quiet=True, workers=1, on_error="skip")
    store = TextStore.open(index)
    n = sum(int(e["docs"]) for e in store._inputs)
    one = [store.text(o) for o in range(n)]
    assert one[0].startswith("bom on line one") and one[-1] == json.loads(wiki[8])["text"]
    rng = np.random.default_rng(3)
    for ords in (list(range(n)), rng.permutation(n).tolist() + [0, n - 1, 0], [n - 1], []):
        assert TextStore.open(index).texts(ords) == [one[o] for o in ords]
    # the last doc of the first input: its line ends the file without a newline
    first_docs = int(store._inputs[0]["docs"])
    assert store.texts([first_docs - 1]) == [one[first_docs - 1]]
    assert one[first_docs - 1].startswith("no newline at the end")
