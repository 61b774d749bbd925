"""MinHash sentence windows on code points.

``windows.fast_sentence_spans`` and ``windows._units`` on code points (one uint32 per str
character, so offsets are str offsets). Candidates whose Punkt decision needs a table lookup
the fast rules cannot settle exactly are left for Python (``_is_break``)."""

from __future__ import annotations

import numpy as np
from numba import njit

_FNV_OFF = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


@njit(cache=True, nogil=True)
def _grown(arr, n, cap):
    """A copy of ``arr``'s first ``n`` items in a new array of ``cap`` (growable outputs)."""
    out = np.empty(cap, dtype=arr.dtype)
    out[:n] = arr[:n]
    return out


@njit(cache=True, nogil=True, inline="always")
def _isspace(cp, c):
    return c < len(cp) and cp[c]


@njit(cache=True, nogil=True)
def _paragraph_end(text, i, n, space):
    """(start, end) of the paragraph break (``\\n[^\\S\\n]*\\n\\s*``) at or after ``i``; (n, n)
    when there is none."""
    while i < n:
        if text[i] == 10:
            j = i + 1
            while j < n and text[j] != 10 and _isspace(space, text[j]):
                j += 1
            if j < n and text[j] == 10:
                k = j + 1
                while k < n and _isspace(space, text[k]):
                    k += 1
                return i, k
        i += 1
    return n, n


@njit(cache=True, nogil=True)
def _in_sorted(arr, x):
    k = np.searchsorted(arr, x)
    return k < len(arr) and arr[k] == x


@njit(cache=True, nogil=True)
def _fast_decision(text, ws, end, nxt_none, not_word_start, abbrev_h, colloc_first_h, ns, ne,
                   number_colloc_h):
    """1: a sentence break, -1: ask Python (``_is_break``). Only the common cases are decided:
    ``?``/``!``, a lone period, no next word, a plain ASCII word that is no abbreviation,
    ellipsis, number, collocation start or word of <= 2 characters, and a number followed by a
    capitalized ASCII word that is no number collocation (``number_colloc_h``)."""
    last = text[end - 1]
    if last == 63 or last == 33:
        return 1
    w = ws
    while w < end and text[w] < 128 and not_word_start[text[w]]:
        w += 1
    if w == end:
        w = ws  # all stripped: Punkt keeps the chunk
    if end - w == 1 and text[w] == 46:
        return 1
    if nxt_none:
        return 1
    if end - w <= 2:
        return -1
    if text[end - 2] == 46:
        return -1  # ellipsis
    h = _FNV_OFF
    hd = _FNV_OFF  # the part after the last '-'
    for q in range(w, end - 1):
        c = text[q]
        if c >= 128:
            return -1
        if 65 <= c <= 90:
            c += 32
        h = (h ^ np.uint64(c)) * _FNV_PRIME
        if c == 45:
            hd = _FNV_OFF
        else:
            hd = (hd ^ np.uint64(c)) * _FNV_PRIME
    if _in_sorted(abbrev_h, h) or _in_sorted(abbrev_h, hd) or _in_sorted(colloc_first_h, h):
        return -1
    # ^-?[.,]?\d[\d,.-]*\.?$ (Punkt's number pattern)
    q = w
    if text[q] == 45:
        q += 1
    if q < end and (text[q] == 46 or text[q] == 44):
        q += 1
    if q < end and 48 <= text[q] <= 57:
        q += 1
        while q < end and (48 <= text[q] <= 57 or text[q] == 44 or text[q] == 46 or text[q] == 45):
            q += 1
        if q == end:
            # a number (Punkt's type ##number##): a break unless (##number##, next type) is a
            # collocation or the orthographic heuristic says the next word starts no sentence,
            # which it never says of a capitalized one. Decided here when the next word is
            # ASCII letters only, capitalized (the common "... in 2013. The ..."); else Python.
            if ns < 0 or not 65 <= text[ns] <= 90:
                return -1
            h = _FNV_OFF
            for r in range(ns, ne):
                c = text[r]
                if 65 <= c <= 90:
                    c += 32
                elif not 97 <= c <= 122:
                    return -1
                h = (h ^ np.uint64(c)) * _FNV_PRIME
            return -1 if _in_sorted(number_colloc_h, h) else 1
    return 1


@njit(cache=True, nogil=True)
def _next_mark(text, i, end):
    """The first ``.``, ``?`` or ``!`` in ``text[i:end]``, or ``end``."""
    while i < end:
        c = text[i]
        if c == 46 or c == 63 or c == 33:
            return i
        i += 1
    return end


@njit(cache=True, nogil=True)
def sentence_candidates(text, doc_start, space, follow, not_word_start, abbrev_h, colloc_first_h,
                        number_colloc_h):
    """Punkt break candidates of each paragraph of each doc, in text order: the mark's
    position, the start of its word (after the last whitespace, at least the paragraph start),
    the next word's start (-1: none; -2: a punctuation character right after the mark) and a
    decision (1 break, 0 not, -1 undecided)."""
    cap = 1024
    mark = np.empty(cap, dtype=np.int64)
    wstart = np.empty(cap, dtype=np.int64)
    nstart = np.empty(cap, dtype=np.int64)
    nend = np.empty(cap, dtype=np.int64)
    decision = np.empty(cap, dtype=np.int8)
    nc = 0
    for d in range(len(doc_start) - 1):
        n = doc_start[d + 1]
        ps = doc_start[d]
        while ps < n:
            pe, brk_end = _paragraph_end(text, ps, n, space)
            last_space = ps - 1  # the last whitespace before position ``seen``
            seen = ps
            i = ps - 1
            while True:
                # the marks alone, in a loop of their own: a whitespace test per character cost
                # more than the rest of the kernel (a branch no predictor learns)
                i = _next_mark(text, i + 1, pe)
                if i == pe:
                    break
                end = i + 1
                if end < pe:
                    f = text[end]
                    if not (_isspace(space, f) or (f < len(follow) and follow[f])):
                        continue
                    if f == 46 or f == 63 or f == 33:
                        continue  # a run such as "?!": decided at its last character
                q = i - 1  # the last whitespace before the mark: back to what is already known
                while q >= seen and not _isspace(space, text[q]):
                    q -= 1
                if q >= seen:
                    last_space = q
                seen = i
                if nc == cap:
                    cap *= 2
                    mark = _grown(mark, nc, cap)
                    wstart = _grown(wstart, nc, cap)
                    nstart = _grown(nstart, nc, cap)
                    nend = _grown(nend, nc, cap)
                    decision = _grown(decision, nc, cap)
                ws = last_space + 1
                if end < pe and not _isspace(space, text[end]):
                    ns = -2
                    ne = end + 1
                else:
                    ns = end
                    while ns < pe and _isspace(space, text[ns]):
                        ns += 1
                    ne = ns
                    while ne < pe and not _isspace(space, text[ne]):
                        ne += 1
                    if ns == pe:
                        ns = -1
                mark[nc] = i
                wstart[nc] = ws
                nstart[nc] = ns
                nend[nc] = ne
                decision[nc] = _fast_decision(text, ws, end, ns == -1, not_word_start, abbrev_h,
                                              colloc_first_h, ns, ne, number_colloc_h)
                nc += 1
            ps = brk_end
    return mark[:nc], wstart[:nc], nstart[:nc], nend[:nc], decision[:nc]


@njit(cache=True, nogil=True)
def _realign(text, end, pe, space, closer):
    """Punkt's realignment after a break before punctuation: ``([\"')\\]}]+?)(?:\\s+|(?=--)|$)``
    at ``end``: (end of the closing run, where the next sentence starts), or (-1, -1)."""
    j = end
    while j < pe and text[j] < 128 and closer[text[j]]:
        j += 1
        if j == pe:
            return j, j
        if _isspace(space, text[j]):
            k = j
            while k < pe and _isspace(space, text[k]):
                k += 1
            return j, k
        if j + 1 < pe and text[j] == 45 and text[j + 1] == 45:
            return j, j
    return -1, -1


@njit(cache=True, nogil=True)
def _count_words(text, s, e, space):
    # branch-free (a word starts where a space ends: no pattern a branch predictor learns):
    # 2.4x faster sentence_windows
    nw = 0
    prev = True
    nsp = len(space)
    for q in range(s, e):
        c = text[q]
        sp = c < nsp and space[c]
        nw += prev and not sp
        prev = sp
    return nw


@njit(cache=True, nogil=True)
def _add_unit(units, nu, s, e, nw):
    if nu == len(units):
        u2 = np.empty((2 * nu, 3), dtype=np.int64)
        u2[:nu] = units[:nu]
        units = u2
    units[nu, 0] = s
    units[nu, 1] = e
    units[nu, 2] = nw
    return units, nu + 1


@njit(cache=True, nogil=True)
def _add_sentence(text, s, e, space, max_words, units, nu):
    """``_units``' handling of one sentence span: trimmed, counted, cut into equal pieces when
    longer than ``max_words``."""
    nw = _count_words(text, s, e, space)
    if nw == 0:
        return units, nu
    while _isspace(space, text[s]):
        s += 1
    while _isspace(space, text[e - 1]):
        e -= 1
    if nw <= max_words:
        return _add_unit(units, nu, s, e, nw)
    ws = np.empty(nw, dtype=np.int64)
    we = np.empty(nw, dtype=np.int64)
    k = 0
    prev = True
    for q in range(s, e):
        sp = _isspace(space, text[q])
        if prev and not sp:
            ws[k] = q
        if not prev and sp:
            we[k] = q
            k += 1
        prev = sp
    if not prev:
        we[k] = e
    pieces = -(-nw // max_words)
    prev_cut = 0
    for i in range(1, pieces + 1):
        # round(i * nw / pieces), half to even like Python's round
        q, r = divmod(i * nw, pieces)
        if 2 * r > pieces or (2 * r == pieces and q % 2 == 1):
            q += 1
        units, nu = _add_unit(units, nu, ws[prev_cut], we[q - 1], q - prev_cut)
        prev_cut = q
    return units, nu


@njit(cache=True, nogil=True)
def sentence_windows(text, doc_start, space, closer, mark, wstart, nstart, nend, decision, used_start,
                     min_words, max_words):
    """Windows (doc, start, end) of every doc from the decided candidates (``split_windows``),
    and the candidates whose word starts after an earlier break inside its own chunk (their
    decision was made for ``used_start`` and must be redone for the start returned with them)."""
    units = np.empty((256, 3), dtype=np.int64)
    cap = 1024
    wd = np.empty(cap, dtype=np.int64)
    wsa = np.empty(cap, dtype=np.int64)
    wea = np.empty(cap, dtype=np.int64)
    nwin = 0
    conflicts = np.empty(16, dtype=np.int64)
    conflict_pos = np.empty(16, dtype=np.int64)
    ncf = 0
    c = 0
    nc = len(mark)
    for d in range(len(doc_start) - 1):
        n = doc_start[d + 1]
        ps = doc_start[d]
        nu = 0
        while ps < n:
            pe, brk_end = _paragraph_end(text, ps, n, space)
            has_text = False
            for q in range(ps, pe):
                if not _isspace(space, text[q]):
                    has_text = True
                    break
            pos = ps
            while c < nc and mark[c] < pe:
                i = mark[c]
                end = i + 1
                if pos >= pe:
                    c += 1
                    continue
                want = max(pos, wstart[c])
                if want != used_start[c]:
                    if ncf == len(conflicts):
                        conflicts = _grown(conflicts, ncf, 2 * ncf)
                        conflict_pos = _grown(conflict_pos, ncf, 2 * ncf)
                    conflicts[ncf] = c
                    conflict_pos[ncf] = want
                    ncf += 1
                if decision[c] != 1:
                    c += 1
                    continue
                c += 1
                if has_text:
                    if nstart[c - 1] == -2:
                        r1, r2 = _realign(text, end, pe, space, closer)
                        if r1 >= 0:
                            units, nu = _add_sentence(text, pos, r1, space, max_words, units, nu)
                            pos = r2
                        else:
                            units, nu = _add_sentence(text, pos, end, space, max_words, units, nu)
                            pos = end
                        continue
                    units, nu = _add_sentence(text, pos, end, space, max_words, units, nu)
                    if nstart[c - 1] == -1:
                        pos = pe
                    else:
                        pos = nstart[c - 1]
            if has_text and pos < pe:
                e = pe
                while e > pos and _isspace(space, text[e - 1]):
                    e -= 1
                if e > pos:
                    units, nu = _add_sentence(text, pos, e, space, max_words, units, nu)
            ps = brk_end
        # windows: one per unit, extended by the following units to min_words words
        for i in range(nu):
            words = 0
            j = i
            while j < nu and words < min_words:
                words += units[j, 2]
                j += 1
            if words < min_words and i > 0:
                break
            if nwin == cap:
                cap *= 2
                wd = _grown(wd, nwin, cap)
                wsa = _grown(wsa, nwin, cap)
                wea = _grown(wea, nwin, cap)
            wd[nwin] = d
            wsa[nwin] = units[i, 0]
            wea[nwin] = units[j - 1, 1]
            nwin += 1
    return wd[:nwin], wsa[:nwin], wea[:nwin], conflicts[:ncf], conflict_pos[:ncf]


KERNELS = {"sentence_candidates": sentence_candidates, "sentence_windows": sentence_windows}
