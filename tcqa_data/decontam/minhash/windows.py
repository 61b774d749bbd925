"""Corpus text -> overlapping sentence windows (see the package docstring)."""

from __future__ import annotations

import codecs
import os
import re
import sys
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from tcqa_data import data as packaged_data
from tcqa_data.decontam.minhash.params import MinHashParams
from tcqa_data.errors import TcqaError

# ---------------------------------------------------------------------------------------------
# Windows


_NO_PUNKT = ("NLTK Punkt sentence tables (punkt_tab) were not found, neither on NLTK's search path "
             "nor in this install of tcqa-data (tcqa_data/data/nltk_data, missing: reinstall tcqa-data). "
             "Set NLTK_DATA to a folder that holds tokenizers/punkt_tab, or run "
             "`python -m nltk.downloader punkt_tab`.")


@lru_cache(maxsize=4)
def _punkt(language: str = "english"):
    import nltk.data
    from nltk.tokenize.punkt import PunktTokenizer

    try:
        return PunktTokenizer(language)
    except LookupError:
        pass
    # NLTK found none of its own: the tables shipped with tcqa-data, searched last so that
    # NLTK_DATA and ~/nltk_data still win. NLTK reads model files only under its search path.
    shipped = packaged_data.nltk_data_root(language)
    if shipped is None:
        raise TcqaError(_NO_PUNKT) from None
    if shipped not in nltk.data.path:
        nltk.data.path.append(shipped)
    try:
        return PunktTokenizer(language)
    except LookupError:
        raise TcqaError(_NO_PUNKT) from None


_PARAGRAPH_BREAK = re.compile(r"\n[^\S\n]*\n\s*")
_WORD = re.compile(r"\S+")

# ---------------------------------------------------------------------------------------------
# Fast sentence boundaries with Punkt's parameters (``sentence_splitter="punkt-fast"``)
#
# NLTK's Punkt spends ~100 us per candidate boundary (tokenizing a context, token objects, regex
# timeouts). The boundary decision itself needs only Punkt's learned tables: abbreviation types,
# collocations, sentence starters and orthographic context. Here one regex pass finds the
# candidates (whitespace-separated chunks ending in . ? or !, optionally followed by closing
# quotes/brackets), and each is decided with those tables by Punkt's rules: ? and ! always end a
# sentence; a period ends one unless the word is a known abbreviation, an ellipsis, an initial or
# a number, and those four are re-decided from the next word (collocation, orthographic
# heuristic, sentence starters). Breaks are only between chunks (Punkt can also break inside a
# chunk such as "end.(Next", which moves no word from one sentence to another for our tokens
# anyway, since closing punctuation is deleted by normalization). ``_is_break`` is the rules'
# reference: the kernels (``_numba_kernels.sentences._fast_decision``, ``_punkt_decision``)
# apply the same rules to ASCII words and tokens and leave the others to it; tests run every
# candidate of a real corpus through both.

# a sentence-ending mark followed by whitespace, the end, or punctuation (Punkt's candidates)
_CANDIDATE = re.compile(r"[.?!](?=[)\";}\]*:@'({\[\u2018\u2019\u201c\u201d\xab\xbb?!]|\s|$)")
_REALIGN = re.compile(r"([\"')\]}]+?)(?:\s+|(?=--)|$)")
_NOT_WORD_START = "(\"`{[:;&#*@)}]-,"
_NEXT_WORD = re.compile(r"\s+(\S+)")
_NUMERIC = re.compile(r"^-?[.,]?\d[\d,.-]*\.?$")
_INITIAL = re.compile(r"[^\W\d]\.$")
_NON_WORD = re.compile(r"[)\";}\]*:@'({\[\u2018\u2019\u201c\u201d\xab\xbb?!]")
_ORTHO_BEG_UC, _ORTHO_MID_UC, _ORTHO_UNK_UC = 1 << 1, 1 << 2, 1 << 3
_ORTHO_BEG_LC, _ORTHO_MID_LC, _ORTHO_UNK_LC = 1 << 4, 1 << 5, 1 << 6
_ORTHO_UC = _ORTHO_BEG_UC | _ORTHO_MID_UC | _ORTHO_UNK_UC
_ORTHO_LC = _ORTHO_BEG_LC | _ORTHO_MID_LC | _ORTHO_UNK_LC


@lru_cache(maxsize=4)
def _tables_of(punkt) -> tuple[frozenset, frozenset, frozenset, dict, frozenset]:
    """Punkt's learned tables as plain sets/dicts, once per loaded tokenizer."""
    p = punkt._params
    return _tables(p.abbrev_types, p.collocations, p.sent_starters, p.ortho_context)


def _tables(abbrevs, collocations, starters, ortho_context) -> tuple:
    return frozenset(abbrevs), frozenset(collocations), frozenset(starters), dict(ortho_context), \
        frozenset(a for a, _ in collocations)


def _nltk_data_dirs() -> list[str]:
    """NLTK's data search path before any in-process change (``nltk.data.path``'s defaults), then
    the folder of Punkt tables shipped with tcqa-data."""
    dirs = [os.path.expanduser(d) for d in os.environ.get("NLTK_DATA", "").split(os.pathsep) if d]
    if os.path.expanduser("~/") != "~/":
        dirs.append(os.path.expanduser("~/nltk_data"))
    if os.name != "nt":
        dirs += [os.path.join(sys.prefix, "nltk_data"), os.path.join(sys.prefix, "share", "nltk_data"),
                 os.path.join(sys.prefix, "lib", "nltk_data"), "/usr/share/nltk_data",
                 "/usr/local/share/nltk_data", "/usr/lib/nltk_data", "/usr/local/lib/nltk_data"]
    shipped = packaged_data.nltk_data_root()  # tcqa-data's own tables, last (as ``_punkt`` uses them)
    if shipped is not None:
        dirs.append(shipped)
    return dirs


@lru_cache(maxsize=4)
def _tables_from_files(language: str, nltk_data: str | None) -> tuple | None:
    """Punkt's tables read from the ``punkt_tab`` files the way NLTK's loader reads them, without
    importing NLTK (whose import pulls in scipy: ~2.7 CPU-s in every build process). None when
    the first match on the search path is not a plain folder (a zip): NLTK decides then."""
    del nltk_data  # part of the cache key only
    for root in _nltk_data_dirs():
        folder = os.path.join(root, "tokenizers", "punkt_tab", language)
        if not os.path.isdir(folder):
            if os.path.exists(os.path.join(root, "tokenizers", "punkt_tab.zip")):
                return None
            continue

        def lines(name: str, folder: str = folder) -> list[str]:
            with open(os.path.join(folder, name), encoding="utf-8") as f:  # NLTK: rm_nl per line
                return [x[:-1] if x.endswith("\n") else x for x in f]

        try:
            return _tables(set(lines("abbrev_types.txt")),
                           {tuple(x.split("\t")) for x in lines("collocations.tab")},
                           set(lines("sent_starters.txt")),
                           {a: int(b) for a, b in (x.split("\t") for x in lines("ortho_context.tab"))})
        except OSError:
            return None  # an incomplete model: NLTK's loader says what is missing
    return None


def _punkt_tables(language: str = "english") -> tuple:
    """Punkt's tables for ``fast_sentence_spans``: from NLTK's tokenizer when NLTK is already
    imported (its ``nltk.data.path`` may have been changed in-process), else from the files."""
    if "nltk" not in sys.modules:
        tables = _tables_from_files(language, os.environ.get("NLTK_DATA"))
        if tables is not None:
            return tables
    return _tables_of(_punkt(language))


def _type(word: str) -> str:
    return "##number##" if _NUMERIC.match(word) else word.lower()


def _next_token(chunk: str, abbrevs: frozenset) -> tuple[str, str]:
    """(token, type without a sentence-final period) of the first Punkt word token of ``chunk``."""
    if chunk[0] in _NOT_WORD_START or _NON_WORD.match(chunk):
        tok = chunk[0]
    else:
        m = _NON_WORD.search(chunk)
        tok = chunk[:m.start()] if m and m.start() > 0 else chunk
        comma = tok.find(",", 1)
        if comma > 0 and comma == len(tok) - 1:
            tok = tok[:-1]
    typ = _type(tok)
    if len(typ) > 1 and typ.endswith(".") and not tok.endswith(".."):
        base = tok[:-1].lower()
        if base not in abbrevs and base.split("-")[-1] not in abbrevs:
            typ = typ[:-1]  # it would end a sentence itself: its type drops the period
    return tok, typ


def _ortho_says_starter(tok: str, typ: str, ortho_context: dict) -> bool | None:
    """Punkt's orthographic heuristic: True, False or None (unknown)."""
    if tok in (";", ":", ",", ".", "!", "?"):
        return False
    ortho = ortho_context.get(typ, 0)
    if tok[0].isupper() and ortho & _ORTHO_LC and not ortho & _ORTHO_MID_UC:
        return True
    if tok[0].islower() and (ortho & _ORTHO_UC or not ortho & _ORTHO_BEG_LC):
        return False
    return None


def _is_break(chunk: str, next_chunk: str | None, tables: tuple) -> bool:
    abbrevs, collocations, starters, ortho_context, colloc_first = tables
    core = chunk
    if core.endswith(("?", "!")):
        return True
    word = core.lstrip(_NOT_WORD_START) or core
    if word == ".":
        return True
    if next_chunk is None:
        return True
    ellipsis = word.endswith("..")
    base = word[:-1].lower()
    abbr = not ellipsis and (base in abbrevs or base.split("-")[-1] in abbrevs)
    brk = not (ellipsis or abbr)
    if brk and len(word) > 2 and base not in colloc_first and not _NUMERIC.match(word):
        return True  # the common case: an ordinary word (no initial, number or collocation)
    typ = _type(word)
    typ_np = typ[:-1] if len(typ) > 1 and typ.endswith(".") else typ
    nxt, next_typ = _next_token(next_chunk, abbrevs)
    if (typ_np, next_typ) in collocations:
        return False
    initial = bool(_INITIAL.match(word))
    if (abbr or ellipsis) and not initial:
        if _ortho_says_starter(nxt, next_typ, ortho_context) is True:
            return True
        if nxt[0].isupper() and next_typ in starters:
            return True
        return brk
    if initial or typ_np == "##number##":
        starter = _ortho_says_starter(nxt, next_typ, ortho_context)
        if starter is False:
            return False
        lower_seen = ortho_context.get(next_typ, 0) & _ORTHO_LC
        if starter is None and initial and nxt[0].isupper() and not lower_seen:
            return False
    return brk


def fast_sentence_spans(para: str) -> list[tuple[int, int]]:
    """Sentence ``(start, end)`` spans of a paragraph by Punkt's rules and tables (see above)."""
    tables = _punkt_tables()
    spans = []
    pos = 0
    n = len(para)
    for m in _CANDIDATE.finditer(para):
        end = m.end()
        if end < n and para[end] in ".?!":
            continue  # a run such as "!!!" or "?!": decided at its last character
        # the word ending here starts after the last whitespace (searching back is cheaper than
        # a regex that matches whole chunks)
        start = max(pos, para.rfind(" ", pos, m.start()) + 1, para.rfind("\n", pos, m.start()) + 1,
                    para.rfind("\t", pos, m.start()) + 1)
        word = para[start:end]
        if not word.isprintable():
            word = word.split()[-1]  # other whitespace (\r, no-break space...) inside
        if end < n and not para[end].isspace():
            # punctuation right after (a closing quote, ":320" page references): Punkt's next
            # token is that character, and a break goes right after the sentence-ending mark
            nxt: str | None = para[end:end + 1]
            nm = None
        else:
            nm = _NEXT_WORD.match(para, end)
            nxt = nm.group(1) if nm else None
        if not _is_break(word, nxt, tables):
            continue
        if nm is None and nxt is not None:
            # Punkt's realignment: closing quotes/brackets followed by whitespace stay with the
            # sentence they close
            r = _REALIGN.match(para, end)
            if r:
                spans.append((pos, r.end(1)))
                pos = r.end()
            else:
                spans.append((pos, end))
                pos = end
            continue
        spans.append((pos, end))
        if nm is None:
            pos = n
            break
        pos = nm.start(1)
    if pos < n and para[pos:].strip():
        spans.append((pos, len(para.rstrip())))
    return spans


def _units(text: str, max_words: int, splitter: str = "punkt") -> list[tuple[int, int, int]]:
    """(start, end, words) of each sentence, or piece of an over-long sentence, in ``text``."""
    sentence_spans = _punkt().span_tokenize if splitter == "punkt" else fast_sentence_spans
    units = []
    para_start = 0
    breaks = [(m.start(), m.end()) for m in _PARAGRAPH_BREAK.finditer(text)] + [(len(text), len(text))]
    for brk_start, brk_end in breaks:
        para = text[para_start:brk_start]
        if para.strip():
            for s, e in sentence_spans(para):
                sent = para[s:e]
                n = len(sent.split())
                if n == 0:
                    continue
                # Punkt keeps leading whitespace on the first sentence; trim it off the span.
                s += len(sent) - len(sent.lstrip())
                e -= len(sent) - len(sent.rstrip())
                s, e = s + para_start, e + para_start
                if n <= max_words:
                    units.append((s, e, n))
                    continue
                # Run-on "sentences" (lists, tables, unpunctuated text): equal pieces, so a copied
                # item still meets a window of comparable size.
                spans = [(m.start(), m.end()) for m in _WORD.finditer(text, s, e)]
                pieces = -(-n // max_words)
                cuts = [round(i * n / pieces) for i in range(pieces + 1)]
                for a, b in zip(cuts[:-1], cuts[1:], strict=True):
                    units.append((spans[a][0], spans[b - 1][1], b - a))
        para_start = brk_end
    return units


def _window_bounds(text: str, params: MinHashParams) -> list[tuple[int, int]]:
    """``(start, end)`` of each window of ``text`` (Python: any splitter, any kernel setting)."""
    units = _units(text, params.window_max_words, params.sentence_splitter)
    bounds = []
    for i in range(len(units)):
        words, j = 0, i
        while j < len(units) and words < params.window_min_words:
            words += units[j][2]
            j += 1
        if words < params.window_min_words and i > 0:
            # Ran out of text: the previous window already holds this tail, and more.
            break
        bounds.append((units[i][0], units[j - 1][1]))
    return bounds


# ---------------------------------------------------------------------------------------------
# The same windows from compiled code (``punkt-fast`` with the numba kernels): the kernels scan
# code points for paragraphs and candidates and decide them by ``_is_break``'s rules, with
# Punkt's tables in a hash table (``_key_table``); only a candidate whose word, or the token
# after it where the rules read it, has a non-ASCII character (~1% on Wikipedia: "Córdoba.",
# "°C.") goes to ``_is_break`` itself: Unicode's case and character classes stay Python's.


def _flags(chars: str, size: int) -> np.ndarray:
    out = np.zeros(size, dtype=np.bool_)
    out[[ord(c) for c in chars]] = True
    return out


@lru_cache(maxsize=1)
def _char_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(str.isspace per code point up to U+3000 (the last whitespace), Punkt's characters that may
    follow a candidate (``_NON_WORD``'s too), ``_NOT_WORD_START``, the closing characters of
    ``_REALIGN``)."""
    space = np.array([chr(c).isspace() for c in range(0x3001)], dtype=np.bool_)
    follow = _flags(")\";}]*:@'({[\u2018\u2019\u201c\u201d\xab\xbb?!", 0x201E)
    return space, follow, _flags(_NOT_WORD_START, 128), _flags("\"')]}", 128)


_KEY_TABLES: dict[int, tuple] = {}


def _key_table(tables: tuple) -> tuple:
    """Punkt's tables as the kernels look types up in them (``sentences.punkt_key_table``), once
    per tables object (``_punkt_tables`` returns a cached one; its dict makes it unhashable)."""
    got = _KEY_TABLES.get(id(tables))
    if got is None or got[0] is not tables:
        from tcqa_data.decontam.core._numba_kernels.sentences import punkt_key_table

        got = _KEY_TABLES[id(tables)] = (tables, punkt_key_table(*tables))
    return got[1]


def texts_codepoints(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """``(cps, doc_start)`` of ``texts`` as ``codepoint_window_spans`` takes them: one uint32 per
    ``str`` character (surrogatepass: a lone surrogate is one too), text ``k`` being
    ``cps[doc_start[k]:doc_start[k + 1]]``."""
    doc_start = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)), out=doc_start[1:])
    cps = np.empty(int(doc_start[-1]), dtype=np.uint32)
    # each text written in place (a join of UTF-32 copies costs a second pass over 4 bytes a
    # char); an ASCII text as its bytes (a copy, where the UTF-32 codec goes char by char)
    for t, a, b in zip(texts, doc_start[:-1].tolist(), doc_start[1:].tolist(), strict=True):
        if t.isascii():
            cps[a:b] = np.frombuffer(t.encode("ascii"), dtype=np.uint8)
        else:
            cps[a:b] = np.frombuffer(t.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    return cps, doc_start


def _window_spans_compiled(texts: Sequence[str], params: MinHashParams
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return codepoint_window_spans(*texts_codepoints(texts), params)


def codepoint_window_spans(cps: np.ndarray, doc_start: np.ndarray, params: MinHashParams
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``window_spans`` (``punkt-fast``, compiled) of documents given as code points: doc ``k``
    is ``cps[doc_start[k]:doc_start[k + 1]]`` (uint32, one per ``str`` character)."""
    from tcqa_data.decontam.core import kernel

    k = kernel.kernels()
    tables = _punkt_tables()
    space, follow, not_word_start, closer = _char_tables()
    doc_start = np.asarray(doc_start, dtype=np.int64)
    key_table = _key_table(tables)
    mark, wstart, nstart, nend, decision = k["sentence_candidates"](
        cps, doc_start, space, follow, not_word_start, key_table)

    def decide(cands: list[int], starts: list[int]) -> None:
        # Python needs the str of each word and of the token after it: those ranges of code
        # points gathered and decoded in one call (a decode per range cost ~5 ns per corpus
        # byte, decoding whole batches as much: ~5 ns per char)
        if not cands:
            return
        ends = mark[cands] + 1
        ns, ne = nstart[cands], nend[cands]
        first = np.asarray(starts, dtype=np.int64)
        nxt_at = np.where(ns == -2, ends, np.maximum(ns, 0))
        nxt_len = np.where(ns == -2, 1, np.where(ns >= 0, ne - ns, 0))
        at = np.stack([first, nxt_at], axis=1).ravel()
        lens = np.stack([ends - first, nxt_len], axis=1).ravel()
        offs = np.zeros(len(lens) + 1, dtype=np.int64)
        np.cumsum(lens, out=offs[1:])
        t = codecs.utf_32_le_decode(cps[np.repeat(at - offs[:-1], lens) + np.arange(offs[-1])],
                                    "surrogatepass")[0]
        o = offs.tolist()
        decision[cands] = [_is_break(t[o[2 * i]:o[2 * i + 1]],
                                     None if n == -1 else t[o[2 * i + 1]:o[2 * i + 2]], tables)
                           for i, n in enumerate(ns.tolist())]

    undecided = np.flatnonzero(decision < 0)
    decide(undecided.tolist(), wstart[undecided].tolist())
    used_start = wstart.copy()

    def windows_of(d0: int, d1: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Windows of docs d0..d1-1; a candidate after a break inside its own chunk ("end.:320")
        has a shorter word than decided above: the kernel decides it again, or, where that needs
        Python (non-ASCII), returns it; those docs are redone after ``decide`` (rare)."""
        c0, c1 = np.searchsorted(mark, doc_start[[d0, d1]])
        while True:
            win_doc, win_start, win_end, redo, redo_start = k["sentence_windows"](
                cps, doc_start[d0:d1 + 1], space, closer, mark[c0:c1], wstart[c0:c1], nstart[c0:c1],
                nend[c0:c1], decision[c0:c1], used_start[c0:c1], params.window_min_words,
                params.window_max_words, not_word_start, follow, key_table)
            if not len(redo) or d1 - d0 > 1:
                return win_doc + d0, win_start, win_end, redo + c0
            decide((redo + c0).tolist(), redo_start.tolist())
            used_start[redo + c0] = redo_start

    n_docs = len(doc_start) - 1
    win_doc, win_start, win_end, redo = windows_of(0, n_docs)
    if len(redo):
        redo_docs = set((np.searchsorted(doc_start, mark[redo], side="right") - 1).tolist())
        keep = ~np.isin(win_doc, list(redo_docs))
        parts = [(win_doc[keep], win_start[keep], win_end[keep])]
        parts += [windows_of(d, d + 1)[:3] for d in sorted(redo_docs)]
        win_doc, win_start, win_end = (np.concatenate(x) for x in zip(*parts, strict=True))
        order = np.argsort(win_doc, kind="stable")
        win_doc, win_start, win_end = win_doc[order], win_start[order], win_end[order]
    base = doc_start[win_doc]
    return win_doc, win_start - base, win_end - base


def window_spans(texts: Sequence[str], params: MinHashParams) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every window of every text as ``(text index, start, end)`` arrays (int64, text order):
    compiled for ``punkt-fast`` when the kernels are enabled, else Python; the same windows."""
    from tcqa_data.decontam.core import kernel

    if params.sentence_splitter == "punkt-fast" and kernel.enabled():
        return _window_spans_compiled(texts, params)
    bounds = [(d, s, e) for d, text in enumerate(texts) for s, e in _window_bounds(text, params)]
    arr = np.array(bounds, dtype=np.int64).reshape(-1, 3)
    return arr[:, 0].copy(), arr[:, 1].copy(), arr[:, 2].copy()


def check_splitter(params: MinHashParams) -> None:
    """Load what ``window_spans`` needs for ``params`` (NLTK Punkt, or its tables for
    ``punkt-fast``), raising ``TcqaError`` with the fix when it is missing; compiles and runs
    nothing (a build's main process asks, its workers cut the windows)."""
    if params.sentence_splitter == "punkt":
        _punkt()
    else:
        _punkt_tables()


def split_windows(text: str, params: MinHashParams) -> list[str]:
    """Overlapping windows of ``text``: one per sentence, extended by the following sentences
    until it has ``params.window_min_words`` words (see the module docstring)."""
    _, starts, ends = window_spans([text], params)
    return [text[s:e] for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]
