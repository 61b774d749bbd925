"""lm-eval's ``Janitor.clean`` on one corpus doc, with the benchmark table in place of its n-gram set.

``Janitor.clean_python`` (lm_eval/decontamination/janitor.py, lm-eval 0.4.13):

1. splits the doc on whitespace (``re.finditer(r"\\S+")``), keeping each word's first and last
   char; every window of ``n`` consecutive words is a candidate;
2. a window matches when its words joined by one space and normalized (ASCII lowercase, ASCII
   punctuation deleted) is a registered n-gram (a registered n-gram is the normalized query split
   on whitespace, joined by one space);
3. ``_split_chunks``: per match in order, ``start - window`` .. ``end + window`` is cut; the
   clean text between two cuts is kept when longer than ``minimum_slice_length``; more than
   ``too_dirty_cutoff`` matches drop the doc (no pieces); after the last cut the rest is kept
   from ``end + 1`` when ``end < len - minimum_slice_length``.

``janitor_matches`` gives step 1-2's matches from the table's hashes (the same hash as the index:
``core/hashing.py``), ``janitor_pieces`` is step 3 verbatim.

``cut_spans`` adds cuts Janitor has no n-gram for (the semantic tier's best windows: a rephrased
item shares no 13-gram with its item) to Janitor's pieces: each span widened by ``window`` chars
either side, overlapping cuts merged, a fragment they leave kept when longer than
``minimum_slice`` (Janitor's test for the clean text between two cuts), and the doc dropped when
Janitor's matches and these cuts together number more than ``too_dirty_cutoff``. Pieces no such
cut touches stay Janitor's, to the char.

Quirk kept with ``exact=True`` (``purify``'s default), fixed with ``exact=False`` (``purify
--no-janitor-exact``): a window holding a word that normalizes to nothing ("," "-" "&", or the
"()" WikiExtractor leaves where a template was) never matches in Janitor (its join has two
spaces), though the queries' n-grams skip such words. With ``exact=False`` a window is ``n``
words that keep characters, as the index and ``decontaminate`` see them: text tokenized with
spaces around punctuation, as MC-TACO's sentences are ("a former lover , Tom Ransome , now"),
then no longer hides (on the stream tests' corpus Janitor left a copied MC-TACO sentence in place,
and an index of its output flagged 28 MC-TACO docs), but the cuts are no longer Janitor's: a
copy that ends "... word () word." is cut one window further (the probe of issue 40: 10 chars
more of the second piece of a Wikipedia article), so it is not the default. ``exact`` gives
``clean_python``'s pieces on every doc.

Quirks kept, so that the pieces equal ``clean_python``'s:

- the off-by-one: a middle piece starts at the char ``end + window`` (kept), the last piece one
  char later (``end + 1``, where ``end`` already includes the window);
- a match's window overlapping an earlier cut is measured from that cut (``start - splice``
  can be negative: no piece).

Quirk fixed (``purify``, not here): Janitor returns no piece for any doc of at most 200 chars,
matched or not (its last-piece test also runs on clean docs); a doc with no match is written
unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from tcqa_data.decontam.core.hashing import normalized_ngram_hashes
from tcqa_data.decontam.core.normalize import UNICODE_WHITESPACE, janitor_bytes

# str.isspace(): ASCII whitespace, the separators \x1c-\x1f and the Unicode ones
_SPACE_CODES = np.array(sorted({*map(ord, "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f "), *map(ord, UNICODE_WHITESPACE)}),
                        dtype=np.uint32)
# per code point up to the last space code (and one past it, for every code above): a space?
_IS_SPACE = np.zeros(int(_SPACE_CODES[-1]) + 2, dtype=bool)
_IS_SPACE[_SPACE_CODES] = True
WINDOW = 200
MINIMUM_SLICE = 200
TOO_DIRTY_CUTOFF = 10


def janitor_matches(text: str, n: int, seed: int, is_dirty: Callable[[np.ndarray], np.ndarray],
                    exact: bool = False) -> list[tuple[int, int]]:
    """``(first char, last char)`` of every window of ``n`` words that Janitor would match, in order.

    ``is_dirty(hashes) -> bool array``: whether each n-gram hash (``core/hashing.py``, ``seed``)
    belongs to a registered query. ``exact``: Janitor's windows (no word inside normalizes to
    nothing), else windows of ``n`` words that keep characters (module doc)."""
    starts, ends = _word_bounds(text)
    # each word normalized on its own (one join, one translate, one split: no call per word), as
    # UTF-8 (janitor_bytes: only ASCII changes, so the same as normalizing the str); a word holds
    # no whitespace and normalizing adds none, so the split gives one item per word
    normal = janitor_bytes(" ".join(text.split())).split(b" ") if len(starts) else []
    assert len(normal) == len(starts)
    # words that keep characters, and their place among all words
    place = np.flatnonzero(np.fromiter(map(len, normal), np.int64, len(normal)))
    if len(place) < n:
        return []
    hashes = normalized_ngram_hashes(b" ".join([normal[i] for i in place.tolist()]), n, seed)
    # a window of kept words is Janitor's only when no emptied word lies inside it
    hit = np.asarray(is_dirty(hashes), dtype=bool)
    if exact:
        hit &= place[n - 1:] - place[:len(place) - n + 1] == n - 1
    hit = np.flatnonzero(hit)
    return list(zip(starts[place[hit]].tolist(), (ends[place[hit + n - 1]] - 1).tolist(), strict=True))


def _word_bounds(text: str) -> tuple[np.ndarray, np.ndarray]:
    """Char ``[start, end)`` of each ``\\S+`` word (``re`` and ``str.split`` agree on whitespace:
    ``str.isspace``), from the code points at once."""
    cps = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    space = _IS_SPACE[np.minimum(cps, len(_IS_SPACE) - 1)]
    edge = np.diff(np.concatenate(([1], space.view(np.int8), [1])).astype(np.int8))
    return np.flatnonzero(edge == -1), np.flatnonzero(edge == 1)


def janitor_pieces(text: str, matches: Sequence[tuple[int, int]], window: int = WINDOW,
                   minimum_slice: int = MINIMUM_SLICE, too_dirty_cutoff: int = TOO_DIRTY_CUTOFF
                   ) -> list[tuple[int, int]]:
    """``Janitor._split_chunks`` as char ranges ``[a, b)`` of the pieces kept (module doc, step 3)."""
    pieces = []
    splice = 0
    end = -1
    for i, (start, end) in enumerate(matches):
        if i >= too_dirty_cutoff:
            return []
        start = max(0, start - window)
        end = min(len(text), end + window)
        if start - splice > minimum_slice:
            pieces.append((splice, start))
        splice = end
    if end < len(text) - minimum_slice:
        pieces.append((end + 1, len(text)))
    return pieces


def removed_spans(length: int, pieces: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The char ranges ``[a, b)`` of ``[0, length)`` outside ``pieces``."""
    out = []
    at = 0
    for a, b in pieces:
        if a > at:
            out.append((at, a))
        at = max(at, b)
    if at < length:
        out.append((at, length))
    return out


def cut_spans(length: int, pieces: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]],
              matches: int, window: int = WINDOW, minimum_slice: int = MINIMUM_SLICE,
              too_dirty_cutoff: int = TOO_DIRTY_CUTOFF) -> tuple[list[tuple[int, int]], int]:
    """Janitor's ``pieces`` of a doc of ``length`` chars (from ``matches`` n-gram matches) less the
    char ranges ``spans`` ``[a, b)`` (module doc); returns the pieces kept and how many cuts the
    spans made (after merging)."""
    cuts: list[list[int]] = []
    for a, b in sorted((max(0, a - window), min(length, b + window)) for a, b in spans):
        if cuts and a <= cuts[-1][1]:
            cuts[-1][1] = max(cuts[-1][1], b)
        else:
            cuts.append([a, b])
    if matches + len(cuts) > too_dirty_cutoff:
        return [], len(cuts)
    out = []
    for a, b in pieces:
        at, touched = a, False
        for c, d in cuts:
            if d <= at or c >= b:
                continue
            touched = True
            if c - at > minimum_slice:
                out.append((at, c))
            at = max(at, d)
        if not touched:
            out.append((a, b))  # Janitor's piece as it was
        elif b - at > minimum_slice:
            out.append((at, b))
    return out, len(cuts)
