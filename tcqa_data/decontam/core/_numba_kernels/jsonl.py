"""JSONL text into Janitor bytes or code points: the compiled reader's line scan.

``jsonl_scan`` decodes each line's top-level text field into Janitor-normalized bytes (the n-gram
map) or into one uint32 per ``str`` character (the MinHash map, ``minhash/feed.py``),
then ``janitor_from_cps`` gives the Janitor bytes of those code points with each character's offset
there. ``janitor_char_offsets`` maps ``str`` offsets to normalized byte offsets for the str path."""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import trailing_zeros

from tcqa_data.decontam.core._numba_kernels.mix import HIGH8, SPACES8, byte_matches

# jsonl_scan statuses
SCAN_END, SCAN_BATCH_FULL, SCAN_DEFER, SCAN_ROOM = 0, 1, 2, 3
_MAX_DEPTH = 64  # deeper nesting goes to Python's json (its own recursion limits apply)


@njit(cache=True, nogil=True, inline="always")
def _is_json_ws(c):
    return c == 32 or c == 9 or c == 10 or c == 13


@njit(cache=True, nogil=True)
def _utf8_seq_len(buf, i, end):
    """Length of the valid UTF-8 sequence at ``buf[i]`` (exactly what Python's strict decoder
    accepts: no overlongs, no encoded surrogates, <= U+10FFFF), 0 if invalid or cut off."""
    b0 = buf[i]
    if b0 < 0x80:
        return 1
    if b0 < 0xC2:
        return 0
    if b0 < 0xE0:
        return 2 if i + 1 < end and (buf[i + 1] & 0xC0) == 0x80 else 0
    if b0 < 0xF0:
        if i + 2 >= end:
            return 0
        b1 = buf[i + 1]
        if (b1 & 0xC0) != 0x80 or (buf[i + 2] & 0xC0) != 0x80:
            return 0
        if (b0 == 0xE0 and b1 < 0xA0) or (b0 == 0xED and b1 >= 0xA0):
            return 0
        return 3
    if b0 < 0xF5:
        if i + 3 >= end:
            return 0
        b1 = buf[i + 1]
        if (b1 & 0xC0) != 0x80 or (buf[i + 2] & 0xC0) != 0x80 or (buf[i + 3] & 0xC0) != 0x80:
            return 0
        if (b0 == 0xF0 and b1 < 0x90) or (b0 == 0xF4 and b1 >= 0x90):
            return 0
        return 4
    return 0


@njit(cache=True, nogil=True)
def _utf8_is_space(buf, i, n):
    """True if the n-byte UTF-8 sequence at ``buf[i]`` is a non-ASCII ``str.isspace()`` char
    (U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000)."""
    b0 = buf[i]
    if n == 2:
        return b0 == 0xC2 and (buf[i + 1] == 0x85 or buf[i + 1] == 0xA0)
    if n != 3:
        return False
    b1, b2 = buf[i + 1], buf[i + 2]
    if b0 == 0xE1:
        return b1 == 0x9A and b2 == 0x80
    if b0 == 0xE2:
        if b1 == 0x80:
            return b2 <= 0x8A or b2 == 0xA8 or b2 == 0xA9 or b2 == 0xAF
        return b1 == 0x81 and b2 == 0x9F
    return b0 == 0xE3 and b1 == 0x80 and b2 == 0x80


@njit(cache=True, nogil=True, inline="always")
def _hex4(buf, i, end):
    """Value of the 4 hex digits at ``buf[i:i + 4]``, -1 if not 4 hex digits."""
    if i + 4 > end:
        return -1
    v = 0
    for k in range(4):
        c = buf[i + k]
        if 48 <= c <= 57:
            d = c - 48
        elif 97 <= c <= 102:
            d = c - 87
        elif 65 <= c <= 70:
            d = c - 55
        else:
            return -1
        v = v * 16 + d
    return v


@njit(cache=True, nogil=True, inline="always")
def _json_escape(buf, i, end):
    """(code point, index after it) of the backslash escape at ``buf[i]``; code point -1: not one
    the compiled readers decode (Python's reader then handles the line). A high and a low
    surrogate escape make one char, as in Python's json."""
    if i + 1 >= end:
        return -1, i
    e = np.int64(buf[i + 1])
    if e == 117:
        cp = _hex4(buf, i + 2, end)
        if cp < 0:
            return -1, i
        i += 6
        if 0xD800 <= cp <= 0xDBFF and i + 1 < end and buf[i] == 92 and buf[i + 1] == 117:
            lo = _hex4(buf, i + 2, end)
            if lo < 0:
                return -1, i
            if 0xDC00 <= lo <= 0xDFFF:
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00)
                i += 6
        return cp, i
    if e == 34 or e == 92 or e == 47:
        return e, i + 2
    if e == 110:
        return np.int64(10), i + 2
    if e == 116:
        return np.int64(9), i + 2
    if e == 114:
        return np.int64(13), i + 2
    if e == 98:
        return np.int64(8), i + 2
    if e == 102:
        return np.int64(12), i + 2
    return -1, i


@njit(cache=True, nogil=True)
def _skip_string(buf, i, end):
    """Position after the JSON string whose opening quote is at ``i - 1``; -1 if it is not one
    that Python's ``json`` surely accepts the same way (then the line goes to Python)."""
    while i < end:
        c = buf[i]
        if c == 34:
            return i + 1
        if c == 92:
            if i + 1 >= end:
                return -1
            e = buf[i + 1]
            if e == 117:
                if _hex4(buf, i + 2, end) < 0:
                    return -1
                i += 6
            elif e == 34 or e == 92 or e == 47 or e == 98 or e == 102 or e == 110 or e == 114 or e == 116:
                i += 2
            else:
                return -1
        elif c < 0x20:
            return -1
        elif c < 0x80:
            i += 1
        else:
            n = _utf8_seq_len(buf, i, end)
            if n == 0:
                return -1
            i += n
    return -1


@njit(cache=True, nogil=True)
def _skip_number(buf, i, end):
    """Position after the JSON number at ``i`` (strict grammar), -1 if none."""
    if i < end and buf[i] == 45:
        i += 1
    if i >= end:
        return -1
    if buf[i] == 48:
        i += 1
    elif 49 <= buf[i] <= 57:
        first = i
        while i < end and 48 <= buf[i] <= 57:
            i += 1
        if i - first > 4000:  # Python's int() refuses > 4300 digits (ValueError, not a JSON error)
            return -1
    else:
        return -1
    if i < end and buf[i] == 46:
        i += 1
        if i >= end or not 48 <= buf[i] <= 57:
            return -1
        while i < end and 48 <= buf[i] <= 57:
            i += 1
    if i < end and (buf[i] == 101 or buf[i] == 69):
        i += 1
        if i < end and (buf[i] == 43 or buf[i] == 45):
            i += 1
        if i >= end or not 48 <= buf[i] <= 57:
            return -1
        while i < end and 48 <= buf[i] <= 57:
            i += 1
    return i


@njit(cache=True, nogil=True)
def _skip_ws(buf, i, end):
    while i < end and _is_json_ws(buf[i]):
        i += 1
    return i


@njit(cache=True, nogil=True)
def _skip_literal(buf, i, end, word):
    if i + len(word) > end:
        return -1
    for k in range(len(word)):
        if buf[i + k] != word[k]:
            return -1
    return i + len(word)


_TRUE = np.frombuffer(b"true", dtype=np.uint8)
_FALSE = np.frombuffer(b"false", dtype=np.uint8)
_NULL = np.frombuffer(b"null", dtype=np.uint8)


@njit(cache=True, nogil=True)
def _skip_key(buf, i, end):
    """Position after an object key and its colon (``"key" :``) starting at ``i``, -1 if none."""
    if i >= end or buf[i] != 34:
        return -1
    i = _skip_string(buf, i + 1, end)
    if i < 0:
        return -1
    i = _skip_ws(buf, i, end)
    if i >= end or buf[i] != 58:
        return -1
    return i + 1


@njit(cache=True, nogil=True)
def _skip_value(buf, i, end):
    """Position after the JSON value at ``i`` (objects and arrays validated to the end, with an
    explicit stack), -1 where Python's json might differ (NaN, Infinity, deep nesting, errors)."""
    stack = np.empty(_MAX_DEPTH, dtype=np.uint8)  # 123 object / 91 array
    depth = 0
    while True:
        i = _skip_ws(buf, i, end)
        if i >= end:
            return -1
        c = buf[i]
        # one scalar or an opening bracket
        if c == 34:
            i = _skip_string(buf, i + 1, end)
        elif c == 123 or c == 91:
            if depth == _MAX_DEPTH:
                return -1
            i = _skip_ws(buf, i + 1, end)
            if i < end and buf[i] == (125 if c == 123 else 93):
                i += 1  # empty container
            else:
                stack[depth] = c
                depth += 1
                if c == 123:  # first key
                    i = _skip_key(buf, i, end)
                    if i < 0:
                        return -1
                continue
        elif c == 116:
            i = _skip_literal(buf, i, end, _TRUE)
        elif c == 102:
            i = _skip_literal(buf, i, end, _FALSE)
        elif c == 110:
            i = _skip_literal(buf, i, end, _NULL)
        else:
            i = _skip_number(buf, i, end)
        if i < 0:
            return -1
        # after a value: close containers or move to the next element
        while True:
            if depth == 0:
                return i
            i = _skip_ws(buf, i, end)
            if i >= end:
                return -1
            c = buf[i]
            top = stack[depth - 1]
            if c == (125 if top == 123 else 93):
                depth -= 1
                i += 1
                continue
            if c != 44:
                return -1
            i += 1
            if top == 123:
                i = _skip_key(buf, _skip_ws(buf, i, end), end)
                if i < 0:
                    return -1
            break


@njit(cache=True, nogil=True, inline="always")
def _put_cp(out, o, cp, amap):
    """Append code point ``cp`` as normalized UTF-8 (Janitor map for ASCII, spaces for Unicode
    whitespace, surrogates as 3 bytes like ``surrogatepass``); returns (new o, is non-space)."""
    if cp < 0x80:
        m = amap[cp]
        if m >= 0:
            out[o] = m
            o += 1
        return o, m != 32
    if cp < 0x800:
        nonspace = not (cp == 0x85 or cp == 0xA0)
        out[o] = 0xC0 | (cp >> 6) if nonspace else 32
        out[o + 1] = 0x80 | (cp & 0x3F) if nonspace else 32
        return o + 2, nonspace
    if cp < 0x10000:
        nonspace = not (cp == 0x1680 or 0x2000 <= cp <= 0x200A or cp == 0x2028 or cp == 0x2029
                        or cp == 0x202F or cp == 0x205F or cp == 0x3000)
        out[o] = 0xE0 | (cp >> 12) if nonspace else 32
        out[o + 1] = 0x80 | ((cp >> 6) & 0x3F) if nonspace else 32
        out[o + 2] = 0x80 | (cp & 0x3F) if nonspace else 32
        return o + 3, nonspace
    out[o] = 0xF0 | (cp >> 18)
    out[o + 1] = 0x80 | ((cp >> 12) & 0x3F)
    out[o + 2] = 0x80 | ((cp >> 6) & 0x3F)
    out[o + 3] = 0x80 | (cp & 0x3F)
    return o + 4, True


@njit(cache=True, nogil=True)
def _decode_text(buf, i, end, out, o, amap, plain):
    """Decode the JSON string whose opening quote is at ``i - 1`` into ``out[o:]``, normalized.
    ``plain``: ``amap`` for printable ASCII other than quote and backslash, -2 for the other
    bytes (one lookup for the common case). Returns (position after the string or -1, new o,
    chars, has a non-space char)."""
    chars = 0
    nonspace = False
    while i < end:
        c = buf[i]
        m = plain[c]
        if m >= -1:
            # a run of such bytes without branches: the mapped byte is always stored and
            # kept (o advanced) unless deleted (-1); the room check left space for the store
            i0 = i
            while True:
                out[o] = m
                o += m >= 0
                nonspace |= m != 32
                i += 1
                if i >= end:
                    break
                m = plain[buf[i]]
                if m < -1:
                    break
            chars += i - i0
            continue
        if c == 34:
            return i + 1, o, chars, nonspace
        chars += 1
        if c == 92:
            cp, i = _json_escape(buf, i, end)
            if cp < 0:
                return -1, o, chars, nonspace
            o, ns = _put_cp(out, o, cp, amap)
            nonspace |= ns
        elif c < 0x20:
            return -1, o, chars, nonspace
        else:  # printable ASCII took the ``plain`` path above: a UTF-8 sequence
            n = _utf8_seq_len(buf, i, end)
            if n == 0:
                return -1, o, chars, nonspace
            if _utf8_is_space(buf, i, n):
                for k in range(n):
                    out[o + k] = 32
            else:
                nonspace = True
                for k in range(n):
                    out[o + k] = buf[i + k]
            o += n
            i += n
    return -1, o, chars, nonspace


@njit(cache=True, nogil=True)
def _scan_line(buf, words, a, b, key, out, out_cps, o, amap, plain, cps):
    """One JSONL line ``buf[a:b]`` (no newline): a JSON object whose top-level ``key`` field is
    a string, decoded and normalized into ``out[o:]`` (bytes), or with ``cps`` decoded into code
    points in ``out_cps[o:]``. Returns (new o, chars, non-space), or new o = -1 when Python's
    reader must handle the line (anything else, valid or not)."""
    i = _skip_ws(buf, a, b)
    if i >= b or buf[i] != 123:
        return -1, 0, False
    i = _skip_ws(buf, i + 1, b)
    found = False
    chars = 0
    nonspace = False
    o_end = o
    if i < b and buf[i] == 125:
        return -1, 0, False  # {}: no text field
    while True:
        if i >= b or buf[i] != 34:
            return -1, 0, False
        k0 = i + 1
        i = _skip_string(buf, k0, b)
        if i < 0:
            return -1, 0, False
        klen = i - 1 - k0
        is_key = klen == len(key)
        for k in range(klen):
            c = buf[k0 + k]
            if c == 92:  # an escaped key may spell the text field: let Python decide
                return -1, 0, False
            if is_key and c != key[k]:
                is_key = False
        i = _skip_ws(buf, i, b)
        if i >= b or buf[i] != 58:
            return -1, 0, False
        i = _skip_ws(buf, i + 1, b)
        if is_key:
            if found or i >= b or buf[i] != 34:
                return -1, 0, False  # repeated key (last wins) or not a string
            found = True
            if cps:
                i, o_end, nonspace = _decode_text_cps(buf, words, i + 1, b, out_cps, o, amap, plain)
                chars = o_end - o
            else:
                i, o_end, chars, nonspace = _decode_text(buf, i + 1, b, out, o, amap, plain)
        else:
            i = _skip_value(buf, i, b)
        if i < 0:
            return -1, 0, False
        i = _skip_ws(buf, i, b)
        if i >= b:
            return -1, 0, False
        if buf[i] == 125:
            break
        if buf[i] != 44:
            return -1, 0, False
        i = _skip_ws(buf, i + 1, b)
    if not found or _skip_ws(buf, i + 1, b) != b:
        return -1, 0, False
    return o_end, chars, nonspace


@njit(cache=True, nogil=True)
def _plain_bytes(amap):
    """Per byte: ``amap``'s mapping for printable ASCII that needs no decoding, -2 otherwise."""
    plain = np.full(256, -2, dtype=np.int16)
    for c in range(32, 128):
        if c != 34 and c != 92:
            plain[c] = amap[c]
    return plain


@njit(cache=True, nogil=True, inline="always")
def _is_blank(buf, a, b):
    """Whether ``buf[a:b]`` is only ``bytes.strip()`` whitespace."""
    for q in range(a, b):
        c = buf[q]
        if not (c == 32 or 9 <= c <= 13):
            return False
    return True


_NL8 = np.uint64(0x0A0A0A0A0A0A0A0A)


@njit(cache=True, nogil=True, inline="always")
def _line_end(buf, words, pos, end):
    """The newline ending the line at ``pos`` (or ``end``), found 8 bytes at a time: ``words[i]``
    is ``buf[i:i + 8]`` as a little-endian uint64 (an overlapping view, ``len(buf) - 7`` long),
    and the zero-byte test on ``word ^ 0x0A..0A`` marks the first newline byte (as
    ``token_hashes_1p`` finds spaces): a byte at a time took ~30% longer (documents are lines of
    KBs)."""
    nl = pos
    while nl + 8 <= end and nl < len(words):
        z = byte_matches(words[nl], _NL8)
        if z != 0:
            return nl + (trailing_zeros(z) >> 3)
        nl += 8
    while nl < end and buf[nl] != 10:
        nl += 1
    return nl


@njit(cache=True, nogil=True)
def jsonl_scan(buf, words, pos, end, key, amap, out, out_cps, cps, o, docs, doc_line, ndocs, line,
               chars, limit, counts):
    """Read JSONL lines from ``buf[pos:end]`` (whole lines; the last may lack its newline) into
    one batch, each document's text as Janitor-normalized bytes into ``out[o:]`` followed by a
    space, with its start in ``docs`` (``doc_pos``), or with ``cps`` as code points into
    ``out_cps[o:]``, doc ``k`` being ``out_cps[docs[k]:docs[k + 1]]`` (``doc_start``, no
    separators); its line number goes to ``doc_line``, and ``chars`` sums the normalized docs'
    chars. Blank lines and empty texts are counted in ``counts[0]``/``counts[1]``. Stops at the
    end (``SCAN_END``), when the batch reaches ``limit`` chars (``SCAN_BATCH_FULL``), before a line
    Python's reader must handle (``SCAN_DEFER``: it starts at the returned pos) or when the output
    or the doc arrays may be too small for the next line (``SCAN_ROOM``). The same documents,
    statuses and counts either way. Returns (status, pos, o, ndocs, line, chars). ``words``:
    ``buf`` as overlapping uint64 (``_line_end``)."""
    plain = _plain_bytes(amap)
    room = len(out_cps) if cps else len(out)
    while pos < end:
        nl = _line_end(buf, words, pos, end)
        if _is_blank(buf, pos, nl):
            counts[0] += 1
            line += 1
            pos = nl + 1
            continue
        if ndocs + cps >= len(docs) or o + (nl - pos) + 2 > room:
            return SCAN_ROOM, pos, o, ndocs, line, chars
        o2, c, nonspace = _scan_line(buf, words, pos, nl, key, out, out_cps, o, amap, plain, cps)
        if o2 < 0:
            return SCAN_DEFER, pos, o, ndocs, line, chars
        line += 1
        pos = nl + 1
        if not nonspace:
            counts[1] += 1
            continue
        doc_line[ndocs] = line
        if cps:
            ndocs += 1
            o = o2
            docs[ndocs] = o
            full = o - docs[0] >= limit
        else:
            docs[ndocs] = o
            ndocs += 1
            out[o2] = 32
            o = o2 + 1
            chars += c
            full = chars >= limit
        if full:
            return SCAN_BATCH_FULL, pos, o, ndocs, line, chars
    return SCAN_END, min(pos, end), o, ndocs, line, chars


@njit(cache=True, nogil=True)
def janitor_char_offsets(raw, nchars, delete):
    """For ``raw``, the UTF-8 of ``nchars`` characters (surrogatepass): where each character's
    bytes start in ``raw.translate(JANITOR_BYTES_TABLE, JANITOR_BYTES_DELETE)``, plus the end;
    so window ``text[s:e]`` normalized is ``data[offs[s]:offs[e]]``."""
    offs = np.empty(nchars + 1, dtype=np.int64)
    o = 0
    ci = 0
    for i in range(len(raw)):
        c = raw[i]
        if c < 128:
            offs[ci] = o
            ci += 1
            if not delete[c]:
                o += 1
        else:
            if c >= 0xC0:  # a lead byte starts a character; continuation bytes do not
                offs[ci] = o
                ci += 1
            o += 1
    offs[nchars] = o
    return offs


@njit(cache=True, nogil=True)
def _cp_is_space(cp, amap):
    """Whether code point ``cp`` normalizes to a space (``_put_cp``'s non-space flag negated)."""
    if cp < 0x80:
        return amap[cp] == 32
    return (cp == 0x85 or cp == 0xA0 or cp == 0x1680 or 0x2000 <= cp <= 0x200A or cp == 0x2028
            or cp == 0x2029 or cp == 0x202F or cp == 0x205F or cp == 0x3000)


_QUOTE8 = np.uint64(0x2222222222222222)
_BSLASH8 = np.uint64(0x5C5C5C5C5C5C5C5C)


@njit(cache=True, nogil=True, inline="always")
def _plain8(w):
    """Whether the 8 bytes of ``w`` are all printable ASCII other than quote and backslash (the
    ``plain`` bytes): no high bit, none below 0x20, no 0x22, no 0x5C (zero-byte tests, exact)."""
    bad = w | ((w - SPACES8) & ~w) | byte_matches(w, _QUOTE8) | byte_matches(w, _BSLASH8)
    return (bad & HIGH8) == 0


@njit(cache=True, nogil=True)
def _decode_text_cps(buf, words, i, end, out, o, amap, plain):
    """``_decode_text`` into code points (one uint32 per ``str`` character, as ``json`` decodes
    the string): (position after the string or -1, new o, has a char that does not normalize to
    a space). ``words``: ``buf`` as overlapping uint64 (``_line_end``): runs of plain bytes are
    copied 8 at a time (the kernel ~25% faster on English Wikipedia JSONL)."""
    nonspace = False
    while i < end:
        if i + 8 <= end:
            w = words[i]
            if _plain8(w):
                if not nonspace:  # until the first char that does not normalize to a space
                    for k in range(8):
                        nonspace |= plain[buf[i + k]] != 32
                for k in range(8):
                    out[o + k] = (w >> np.uint64(8 * k)) & np.uint64(0xFF)
                o += 8
                i += 8
                continue
        c = buf[i]
        m = plain[c]
        if m >= -1:
            out[o] = c
            o += 1
            i += 1
            if m != 32:
                nonspace = True
            continue
        if c == 34:
            return i + 1, o, nonspace
        if c == 92:
            cp, i = _json_escape(buf, i, end)
            if cp < 0:
                return -1, o, nonspace
            out[o] = cp
            o += 1
            if not _cp_is_space(cp, amap):
                nonspace = True
        elif c < 0x20:
            return -1, o, nonspace
        else:
            n = _utf8_seq_len(buf, i, end)
            if n == 0:
                return -1, o, nonspace
            if not _utf8_is_space(buf, i, n):
                nonspace = True
            if n == 2:
                cp = ((c & 0x1F) << 6) | (buf[i + 1] & 0x3F)
            elif n == 3:
                cp = ((c & 0x0F) << 12) | ((buf[i + 1] & 0x3F) << 6) | (buf[i + 2] & 0x3F)
            else:
                cp = (((c & 0x07) << 18) | ((buf[i + 1] & 0x3F) << 12) | ((buf[i + 2] & 0x3F) << 6)
                      | (buf[i + 3] & 0x3F))
            out[o] = cp
            o += 1
            i += n
    return -1, o, nonspace


@njit(cache=True, nogil=True)
def janitor_from_cps(cps, doc_start, amap, at_start, at_end):
    """The Janitor-normalized UTF-8 of documents given as code points, in ``hash_normalized``'s
    layout (a space first, a space after each doc, 8 spaces of padding: the bytes
    ``iter_normalized_batches`` yields), its doc starts, and the byte offsets there of the char
    positions ``at_start`` and ``at_end`` (each sorted; window starts and ends: an end at a doc's
    end is that doc's end, not the next doc's start). No per-char offset array: at 8 bytes a
    char, fresh each batch, its page faults cost more than the encoding."""
    n = doc_start[len(doc_start) - 1] - doc_start[0]
    nd = len(doc_start) - 1
    out = np.empty(4 * n + nd + 9, dtype=np.uint8)
    nstart = np.empty(nd + 1, dtype=np.int64)
    off_start = np.empty(len(at_start), dtype=np.int64)
    off_end = np.empty(len(at_end), dtype=np.int64)
    ia = 0
    ib = 0
    na = len(at_start)
    nb = len(at_end)
    out[0] = 32
    o = 1
    for d in range(nd):
        nstart[d] = o
        ci = doc_start[d]
        cend = doc_start[d + 1]
        while ci < cend:
            while ia < na and at_start[ia] == ci:
                off_start[ia] = o
                ia += 1
            while ib < nb and at_end[ib] == ci:
                off_end[ib] = o
                ib += 1
            # the chars before the next window bound in a loop without the bound checks
            stop = cend
            if ia < na and ci < at_start[ia] < stop:
                stop = at_start[ia]
            if ib < nb and ci < at_end[ib] < stop:
                stop = at_end[ib]
            for c2 in range(ci, stop):
                cp = cps[c2]
                if cp < 0x80:  # the common case inline: the Janitor byte, or none (deleted)
                    m = amap[cp]
                    out[o] = m
                    o += m >= 0
                else:
                    o, _ = _put_cp(out, o, cp, amap)
            ci = stop
        while ib < nb and at_end[ib] == cend:
            off_end[ib] = o
            ib += 1
        out[o] = 32
        o += 1
    nstart[nd] = o
    out[o:o + 8] = 32
    return out[:o + 8], nstart, off_start, off_end


KERNELS = {"jsonl_scan": jsonl_scan, "janitor_from_cps": janitor_from_cps,
           "janitor_char_offsets": janitor_char_offsets}
