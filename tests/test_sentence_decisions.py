"""punkt-fast's boundary decisions in the kernels (``_numba_kernels.sentences``) against their
reference, ``windows._is_break``: every candidate of a real corpus and of crafted texts for each
of Punkt's rules, with the English tables and with made-up ones; and the windows they cut equal
the Python splitter's."""

from __future__ import annotations

import itertools
import json
import re

import numpy as np
import pytest

from tcqa_data.decontam.minhash import MinHashParams
from tcqa_data.decontam.minhash import windows as mh_windows

pytest.importorskip("numba")


@pytest.fixture
def kernels_on(monkeypatch):
    monkeypatch.setenv("TCQA_KERNEL", "numba")


def _candidates(texts: list[str], tables: tuple) -> list[tuple[str, str | None, int, bool]]:
    """(chunk, next chunk, kernel decision (1, 0, -1: Python's), ``_is_break``) of every
    candidate the kernel finds in ``texts``."""
    from tcqa_data.decontam.core import kernel

    space, follow, nws, _ = mh_windows._char_tables()
    cps, doc_start = mh_windows.texts_codepoints(texts)
    mark, ws, ns, ne, dec = kernel.kernels()["sentence_candidates"](
        cps, doc_start, space, follow, nws, mh_windows._key_table(tables))
    text = "".join(texts)  # offsets into cps are offsets into the joined str
    out = []
    for m, w, n, e, d in zip(mark.tolist(), ws.tolist(), ns.tolist(), ne.tolist(), dec.tolist(), strict=True):
        chunk = text[w:m + 1]
        nxt = None if n == -1 else text[m + 1] if n == -2 else text[n:e]
        out.append((chunk, nxt, d, mh_windows._is_break(chunk, nxt, tables)))
    return out


def _assert_same(cands, min_decided: float = 1.0) -> None:
    wrong = [(c, n, d, b) for c, n, d, b in cands if d >= 0 and bool(d) != b]
    assert not wrong, wrong[:20]
    # where the chunk and the next chunk are ASCII, the kernel decides
    left = [(c, n) for c, n, d, _ in cands if d < 0 and c.isascii() and (n or "").isascii()]
    assert not left, left[:20]
    assert sum(d >= 0 for *_, d, _ in cands) >= min_decided * len(cands)


def test_every_candidate_of_a_real_corpus_decided_as_is_break(wiki_sample, kernels_on):
    """The whole wiki sample (~160 k candidates): each decision the kernel takes equals
    ``_is_break``'s, and it takes all but the non-ASCII ones (~1%)."""
    with open(wiki_sample, encoding="utf-8") as fh:
        texts = [json.loads(line)["text"] for line in fh]
    cands = _candidates(texts, mh_windows._punkt_tables())
    assert len(cands) > 150_000
    _assert_same(cands, min_decided=0.98)


def _ortho_samples(ortho: dict) -> list[str]:
    """An ASCII type of each orthographic-context value in the table (the heuristic's cases)."""
    seen: dict[int, str] = {}
    for typ, v in sorted(ortho.items()):
        if typ.isascii() and typ.isalpha():
            seen.setdefault(v, typ)
    return list(seen.values())


def _crafted(tables: tuple) -> list[str]:
    """Paragraphs with a word of each kind before a next token of each kind, the next token
    after whitespace, right after the mark (Punkt's "-2" case), across a paragraph end, and
    none (the text's end)."""
    abbrevs, collocations, starters, ortho, _ = tables
    words = ["U.S.", "St.", "...", "A.", "J.", "v.", "Dr.", "Inc.", "c.", "(c.", "1.", ").", "e.g.-ish.",
             "x-dr.", "x-Dr.", "foo_bar.", "_.", "__.", "a1.", "1a.", "-3.", ".5.", ",5.", "1,000.", "2-3.",
             "-.5.", "--5.", "..5.", "1990..", "##number##.", "#5.", "Mr.", "mr.", "etc.", "word.", "it.",
             "i.e.", "no.", "vs.", "U.S.A.", "a..", "....", "_x.", "Z.", "z.", "1990.", "'A.", '"Dr.', "A.B.",
             "x.", "(.", "-.", "&.", "@Dr.", "a-.", "-dr.", "word?", "Word!", "wow?!", "caf\u00e9.",
             "\u00c9.", "na\u00efve.", "\u00e9t\u00e9-dr.", "\u212a."]
    words += [f"{w}." for w in sorted(abbrevs)[:40] if w.isascii() and " " not in w]
    words += [f"{a.capitalize()}." for a, _ in sorted(collocations)[:12] if a != "##number##"]
    nexts = ["The", "the", "business", "Business", "(The", '"The', "\u201cThe", "\u2018x", "\xabLe", "The,",
             "the,", "a,b,", "a,,", "Smith,", "1990", "1990.", "1990,", "2.", "Mr.", "mr.", "Dr.", "Inc.",
             "...", "x..", ",", ";", ":", ".", "!", "?", "-", "-x", "&c", "#1", "*", "\u00dcber", "\u00fcber",
             "\u00e9", "\u00e9.", "THE", "However", "however", "I", "i", "_x", "x_y", "A", "a", "S.", "s.",
             "dr.-x.", "e.g.", "x-dr.", "x-dr,", "Dr.,", "it's", "\u201c", "\xbb", "(", ")", "a)", "b;",
             "\u212a", "\u0130", "1.5.", ".5", "-1"]
    nexts += [w for t in _ortho_samples(ortho) for w in (t, t.capitalize(), t.upper(), f"{t}.", f"{t},")]
    nexts += [s.capitalize() for s in sorted(starters)] + [b for _, b in sorted(collocations)]
    nexts += [b.capitalize() for _, b in sorted(collocations)]
    paras = [f"Some words {w} {n} more words." for w, n in itertools.product(words, nexts)]
    paras += [f"Some words {w}{p} next one." for w in words
              for p in ['"', ")", ":320", "'", "\u201d", "]", "*"]]
    paras += [f"Words {w}\n\n{n} more." for w in words for n in ("The", "the", "1990")]
    paras += [f"Words {w}" for w in words]
    paras += [f"{a} {b}. {b.capitalize()} {a}." for a, b in sorted(collocations)]
    return ["\n\n".join(paras[i:i + 50]) for i in range(0, len(paras), 50)]


def test_crafted_candidates_decided_as_is_break(kernels_on):
    """Each rule's cases (abbreviation with the orthographic heuristic and sentence starters,
    collocations, an initial before a capitalized unknown word, a number before a number
    collocation, ellipsis, punctuation right after the mark, the trailing-comma cut, hyphenated
    abbreviations, underscores and digits, one-character tokens, a paragraph's end) with
    English's tables."""
    tables = mh_windows._punkt_tables()
    cands = _candidates(_crafted(tables), tables)
    assert len(cands) > 20_000
    _assert_same(cands, min_decided=0.9)
    assert {b for *_, d, b in cands if d >= 0} == {True, False}


def test_made_up_tables_decided_as_is_break(kernels_on):
    """Tables unlike English's: non-ASCII types, ``##number##`` and digits in each table, an
    empty type, types that are prefixes of each other, a type as long as the longest key (the
    key buffer's edge), collocations of every first type, orthographic values with bits the
    rules do not read."""
    long_type = "x" * 30
    abbrevs = {"e.g", "dr", "ish", "\u00e9t\u00e9", "1", "##number##", "", "v", "a.b", long_type, "x-y"}
    collocations = {("##number##", "business"), ("##number##", "##number##"), ("dr", "the"), ("1", "a"),
                    ("a", "i"), ("x", "\u201c"), ("v", "s"), ("e.g", "##number##"), ("", "the"),
                    (long_type, "the"), ("the", long_type + "y")}
    starters = {"the", "however", "##number##", "s", "\u00fcber", "i"}
    ortho = {"the": 2 | 16 | 128, "however": 2, "business": 16, "smith": 2 | 4, "i": 2 | 4 | 8,
             "a": 16 | 32, "s": 64, "##number##": 32, "\u201c": 2, "x": 0, long_type: 2 | 16}
    tables = mh_windows._tables(abbrevs, collocations, starters, ortho)
    cands = _candidates(_crafted(tables), tables)
    _assert_same(cands, min_decided=0.9)
    assert {b for *_, d, b in cands if d >= 0} == {True, False}


def test_non_word_characters_are_the_candidate_follow_set():
    """The kernels take ``_char_tables``' follow set as ``_NON_WORD`` (one table for both)."""
    _, follow, nws, _ = mh_windows._char_tables()
    chars = [chr(c) for c in range(0x3000)]
    assert [bool(mh_windows._NON_WORD.match(c)) for c in chars] == [c < len(follow) and bool(follow[c])
                                                                    for c in range(0x3000)]
    assert [c in mh_windows._NOT_WORD_START for c in chars[:128]] == nws.tolist()


def test_crafted_windows_equal_the_python_splitter(monkeypatch):
    """The windows the decisions cut, the redone candidates after a break inside their chunk
    included ("end.":320, '"x.").'), equal the Python splitter's (``TCQA_KERNEL=numpy``)."""
    tables = mh_windows._punkt_tables()
    texts = _crafted(tables) + ['He said "end.":320 more. "Hi!" she said -- yes. end.:a.:b.:c. next one.',
                                'A "x.").\' b. (c.). \u2019...\u2019 d. "Dr.". E. \'caf\u00e9.\u2019. F.']
    texts = [re.sub(r"\n\n", " ", t) for t in texts[::7]] + texts
    for params in (MinHashParams(window_min_words=1), MinHashParams()):
        monkeypatch.setenv("TCQA_KERNEL", "numba")
        got = mh_windows.window_spans(texts, params)
        monkeypatch.setenv("TCQA_KERNEL", "numpy")
        want = mh_windows.window_spans(texts, params)
        assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
