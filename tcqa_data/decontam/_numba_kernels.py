"""The numba kernels behind ``kernel`` (imported only when numba is installed and enabled).

Top-level functions with ``cache=True``: compiled once per install into ``__pycache__``, then
loaded by every later process (closures would miss the cache and recompile each time).
"""

from __future__ import annotations

import numpy as np
from numba import njit

_F1 = np.uint64(0xBF58476D1CE4E5B9)
_F2 = np.uint64(0x94D049BB133111EB)
_K_LEN = np.uint64(0xD6E8FEB86659FD93)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)

@njit(cache=True, nogil=True)
def fmix(z):
    z ^= z >> _S30
    z *= _F1
    z ^= z >> _S27
    z *= _F2
    z ^= z >> _S31
    return z

_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], dtype=np.uint64)

@njit(cache=True, nogil=True)
def ngram_hashes(tok, doc_tok, n, base, base_inv, add):
    """Rolling polynomial ``sum_j tok[i+j] * base**j`` per doc (never across docs), mixed."""
    ndocs = len(doc_tok) - 1
    m = 0
    for k in range(ndocs):
        c = doc_tok[k + 1] - doc_tok[k] - (n - 1)
        if c > 0:
            m += c
    h = np.empty(m, dtype=np.uint64)
    dd = np.empty(m, dtype=np.int64)
    top = np.uint64(1)
    for _ in range(n - 1):
        top *= base
    out = 0
    for k in range(ndocs):
        a, b = doc_tok[k], doc_tok[k + 1]
        if b - a < n:
            continue
        s = np.uint64(0)
        p = np.uint64(1)
        for j in range(n):
            s += tok[a + j] * p
            p *= base
        for i in range(a, b - n + 1):
            if i > a:
                s = (s - tok[i - 1]) * base_inv + tok[i + n - 1] * top
            h[out] = fmix(s + add)
            dd[out] = k
            out += 1
    return h, dd

@njit(cache=True, nogil=True)
def order_ties(h, d, w):
    """Within each run of equal hashes, order (d, w) by d (insertion sort: runs are short and
    usually already in order). An empty ``w`` means no second array."""
    n = len(h)
    has_w = len(w) == n and n > 0
    i = 0
    while i < n:
        j = i + 1
        while j < n and h[j] == h[i]:
            j += 1
        for a in range(i + 1, j):
            dv = d[a]
            wv = w[a] if has_w else 0
            b = a - 1
            while b >= i and d[b] > dv:
                d[b + 1] = d[b]
                if has_w:
                    w[b + 1] = w[b]
                b -= 1
            d[b + 1] = dv
            if has_w:
                w[b + 1] = wv
        i = j


@njit(cache=True, nogil=True)
def dedupe_pairs(h, d):
    n = len(h)
    keep = 0
    for i in range(n):
        if i == 0 or h[i] != h[i - 1] or d[i] != d[i - 1]:
            h[keep] = h[i]
            d[keep] = d[i]
            keep += 1
    return h[:keep], d[:keep]

@njit(cache=True, nogil=True)
def merge_sorted(h, d, w, provenance, none, docs_out):
    """Unique hashes of (hash, doc)-sorted pairs, summed weights and the first P docs."""
    n = len(h)
    nu = 0
    for i in range(n):
        if i == 0 or h[i] != h[i - 1]:
            nu += 1
    hu = np.empty(nu, dtype=np.uint64)
    df = np.empty(nu, dtype=np.uint32)
    docs = docs_out[:nu]
    docs[:] = none
    u = -1
    rank = 0
    for i in range(n):
        if i == 0 or h[i] != h[i - 1]:
            u += 1
            hu[u] = h[i]
            df[u] = 0
            rank = 0
        df[u] += w[i]
        if rank < provenance:
            docs[u, rank] = d[i]
        rank += 1
    return hu, df, docs


# ------------------------------------------------------------------------------ JSONL reader

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
def _scan_line(buf, a, b, key, out, out_cps, o, amap, plain, cps):
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
                i, o_end, nonspace = _decode_text_cps(buf, i + 1, b, out_cps, o, amap, plain)
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
def _next_line(buf, pos, end):
    """(index of the newline ending the line at ``pos``, or ``end``; whether the line is blank:
    only ``bytes.strip()`` whitespace)."""
    nl = pos
    while nl < end and buf[nl] != 10:
        nl += 1
    for q in range(pos, nl):
        c = buf[q]
        if not (c == 32 or 9 <= c <= 13):
            return nl, False
    return nl, True


@njit(cache=True, nogil=True)
def jsonl_scan(buf, pos, end, key, amap, out, o, doc_pos, doc_line, ndocs, line,
               chars, limit, counts):
    """Read JSONL lines from ``buf[pos:end]`` (whole lines; the last may lack its newline) into
    one hashing batch: each document's normalized text goes to ``out[o:]`` followed by a space,
    with its start in ``doc_pos`` and its line number in ``doc_line``; ``chars`` sums their chars.
    Blank lines and empty texts are counted in ``counts[0]``/``counts[1]``. Stops at the end
    (``SCAN_END``), when the batch reaches ``limit`` chars (``SCAN_BATCH_FULL``), before a line
    Python's reader must handle (``SCAN_DEFER``: it starts at the returned pos) or when
    ``out``/the doc arrays may be too small for the next line (``SCAN_ROOM``). Returns (status,
    pos, o, ndocs, line, chars)."""
    plain = _plain_bytes(amap)
    no_cps = np.empty(0, dtype=np.uint32)
    while pos < end:
        nl, blank = _next_line(buf, pos, end)
        if blank:
            counts[0] += 1
            line += 1
            pos = nl + 1
            continue
        if ndocs == len(doc_pos) or o + (nl - pos) + 2 > len(out):
            return SCAN_ROOM, pos, o, ndocs, line, chars
        o2, c, nonspace = _scan_line(buf, pos, nl, key, out, no_cps, o, amap, plain, False)
        if o2 < 0:
            return SCAN_DEFER, pos, o, ndocs, line, chars
        line += 1
        pos = nl + 1
        if not nonspace:
            counts[1] += 1
            continue
        doc_pos[ndocs] = o
        doc_line[ndocs] = line
        ndocs += 1
        out[o2] = 32
        o = o2 + 1
        chars += c
        if chars >= limit:
            return SCAN_BATCH_FULL, pos, o, ndocs, line, chars
    return SCAN_END, min(pos, end), o, ndocs, line, chars


# ------------------------------------------------------------------------------ MinHash windows

_M32 = np.uint64(0xFFFFFFFF)
_P32_1 = np.uint64(0x9E3779B1)
_P32_2 = np.uint64(0x85EBCA77)
_P32_3 = np.uint64(0xC2B2AE3D)
_P32_4 = np.uint64(0x27D4EB2F)
_P32_5 = np.uint64(0x165667B1)


@njit(cache=True, nogil=True, inline="always")
def _rotl32(x, r):
    return ((x << np.uint64(r)) | (x >> np.uint64(32 - r))) & _M32


@njit(cache=True, nogil=True, inline="always")
def _read32(buf, i):  # little-endian
    return (np.uint64(buf[i]) | (np.uint64(buf[i + 1]) << np.uint64(8))
            | (np.uint64(buf[i + 2]) << np.uint64(16)) | (np.uint64(buf[i + 3]) << np.uint64(24)))


@njit(cache=True, nogil=True)
def xxh32(buf, off, n):
    """xxHash32 (seed 0) of ``buf[off:off + n]``; 32-bit arithmetic in uint64 registers, masked."""
    i = off
    n += off
    if n - off >= 16:
        v1 = (_P32_1 + _P32_2) & _M32
        v2 = _P32_2
        v3 = np.uint64(0)
        v4 = (np.uint64(0x100000000) - _P32_1) & _M32
        while i + 16 <= n:
            v1 = (_rotl32((v1 + _read32(buf, i) * _P32_2) & _M32, 13) * _P32_1) & _M32
            v2 = (_rotl32((v2 + _read32(buf, i + 4) * _P32_2) & _M32, 13) * _P32_1) & _M32
            v3 = (_rotl32((v3 + _read32(buf, i + 8) * _P32_2) & _M32, 13) * _P32_1) & _M32
            v4 = (_rotl32((v4 + _read32(buf, i + 12) * _P32_2) & _M32, 13) * _P32_1) & _M32
            i += 16
        h = (_rotl32(v1, 1) + _rotl32(v2, 7) + _rotl32(v3, 12) + _rotl32(v4, 18)) & _M32
    else:
        h = _P32_5
    h = (h + np.uint64(n - off)) & _M32
    while i + 4 <= n:
        h = (h + _read32(buf, i) * _P32_3) & _M32
        h = (_rotl32(h, 17) * _P32_4) & _M32
        i += 4
    while i < n:
        h = (h + np.uint64(buf[i]) * _P32_5) & _M32
        h = (_rotl32(h, 11) * _P32_1) & _M32
        i += 1
    h ^= h >> np.uint64(15)
    h = (h * _P32_2) & _M32
    h ^= h >> np.uint64(13)
    h = (h * _P32_3) & _M32
    h ^= h >> np.uint64(16)
    return h


@njit(cache=True, nogil=True)
def window_signatures(data, win_start, win_end, k_words, a, b):
    """MinHash signatures of windows ``data[win_start[i]:win_end[i]]`` (normalized bytes,
    tokens separated by spaces): shingles of ``k_words`` tokens joined by one space (fewer
    tokens: one shingle of all), xxh32 of each, fmix32, then ``min((a * h + b) mod 2**32)``.
    Returns (uint32 [n, P] signatures, shingle count per window)."""
    nw = len(win_start)
    nperm = len(a)
    sigs = np.full((nw, nperm), np.uint32(0xFFFFFFFF), dtype=np.uint32)
    counts = np.zeros(nw, dtype=np.int64)
    buf = np.empty(256, dtype=np.uint8)
    ts = np.empty(64, dtype=np.int64)
    te = np.empty(64, dtype=np.int64)
    row = np.empty(nperm, dtype=np.uint32)
    for w in range(nw):
        # tokens of the window, branch-free: a token starts after a space and ends at one (space
        # and non-space alternate every few bytes in no pattern a branch predictor learns)
        start = win_start[w]
        end = win_end[w]
        if end - start + 2 > len(ts):
            ts = np.empty(2 * (end - start) + 2, dtype=np.int64)
            te = np.empty(2 * (end - start) + 2, dtype=np.int64)
        nt = 0
        ne = 0
        prev = True
        for i in range(start, end):
            sp = data[i] == 32
            ts[nt] = i
            nt += prev and not sp
            te[ne] = i
            ne += sp and not prev
            prev = sp
        te[ne] = end  # the end of a token running to the window's end
        if nt == 0:
            continue
        nsh = nt - k_words + 1 if nt >= k_words else 1
        span = k_words if nt >= k_words else nt
        counts[w] = nsh
        row[:] = np.uint32(0xFFFFFFFF)
        for j in range(nsh):
            # the shingle's bytes: tokens j .. j+span-1 joined by one space
            need = 0
            for t in range(j, j + span):
                need += te[t] - ts[t] + 1
            if need - 1 == te[j + span - 1] - ts[j]:
                h = xxh32(data, ts[j], need - 1)  # tokens one space apart: hash in place
            else:
                if need > len(buf):
                    buf = np.empty(2 * need, dtype=np.uint8)
                m = 0
                for t in range(j, j + span):
                    if t > j:
                        buf[m] = 32
                        m += 1
                    for q in range(ts[t], te[t]):
                        buf[m] = data[q]
                        m += 1
                h = xxh32(buf, 0, m)
            # datasketch pre-mixes each hash with MurmurHash3's fmix32
            h ^= h >> np.uint64(16)
            h = (h * np.uint64(0x85EBCA6B)) & _M32
            h ^= h >> np.uint64(13)
            h = (h * np.uint64(0xC2B2AE35)) & _M32
            h ^= h >> np.uint64(16)
            h32 = np.uint32(h)
            for k in range(nperm):  # 32-bit lanes: the compiler vectorizes this loop
                v = np.uint32(a[k] * h32 + b[k])
                row[k] = min(row[k], v)
        for k in range(nperm):
            sigs[w, k] = row[k]
    return sigs, counts


KERNELS = {"ngram_hashes": ngram_hashes, "dedupe_pairs": dedupe_pairs, "jsonl_scan": jsonl_scan,
           "order_ties": order_ties, "merge_sorted": merge_sorted, "xxh32": xxh32,
           "window_signatures": window_signatures}


# ------------------------------------------------------------------- MinHash sentence windows
# ``windows.fast_sentence_spans`` and ``windows._units`` on code points (one uint32 per str
# character, so offsets are str offsets). Candidates whose Punkt decision needs a table lookup
# the fast rules cannot settle exactly are left for Python (``_is_break``).

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
            last_space = ps - 1
            for i in range(ps, pe):
                c = text[i]
                if _isspace(space, c):
                    last_space = i
                    continue
                if c != 46 and c != 63 and c != 33:
                    continue
                end = i + 1
                if end < pe:
                    f = text[end]
                    if not (_isspace(space, f) or (f < len(follow) and follow[f])):
                        continue
                    if f == 46 or f == 63 or f == 33:
                        continue  # a run such as "?!": decided at its last character
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


KERNELS.update({"sentence_candidates": sentence_candidates, "sentence_windows": sentence_windows})


_BK_MUL = np.uint64(0xFF51AFD7ED558CCD)
_BK_SEED = np.uint64(0x9E3779B97F4A7C15)




# ------------------------------------------------------------------- packed tables (query side)
@njit(cache=True, nogil=True, inline="always")
def _packed_entry(words, i, width, mask):
    """Entry ``i`` of a packed table (``packed.unpack`` for one index)."""
    pos = i * width
    w = pos >> 6
    shift = np.uint64(pos & 63)
    v = words[w] >> shift
    if shift > np.uint64(64 - width):
        v |= words[w + 1] << (np.uint64(64) - shift)
    return v & mask


@njit(cache=True, nogil=True)
def packed_lookup(cells, words, keys, dir_bits, id_bits, cap):
    """``packed.lookup``: per key, a binary search of its remainder in its directory cell, then
    the run of equal remainders (at most ``cap``; ``cap`` < 0: all). Returns (query index, id)."""
    width = 32 - dir_bits + id_bits
    mask = np.uint64(0xFFFFFFFFFFFFFFFF) if width == 64 else (np.uint64(1) << np.uint64(width)) - np.uint64(1)
    rbits = np.uint64(32 - dir_bits)
    rmask = (np.uint64(1) << rbits) - np.uint64(1)
    ib = np.uint64(id_bits)
    nq = len(keys)
    first = np.empty(nq, dtype=np.int64)
    count = np.empty(nq, dtype=np.int64)
    total = 0
    for q in range(nq):
        key = np.uint64(keys[q])
        c = np.int64(key >> rbits)
        a = np.int64(cells[c])
        hi = np.int64(cells[c + 1])
        rem = key & rmask
        b = hi
        while a < b:
            m = (a + b) >> 1
            if (_packed_entry(words, m, width, mask) >> ib) < rem:
                a = m + 1
            else:
                b = m
        e = a
        while e < hi and (cap < 0 or e - a < cap) and (_packed_entry(words, e, width, mask) >> ib) == rem:
            e += 1
        first[q] = a
        count[q] = e - a
        total += e - a
    owner = np.empty(total, dtype=np.int64)
    ids = np.empty(total, dtype=np.int64)
    idmask = (np.uint64(1) << ib) - np.uint64(1)
    k = 0
    for q in range(nq):
        for i in range(first[q], first[q] + count[q]):
            owner[k] = q
            ids[k] = np.int64(_packed_entry(words, i, width, mask) & idmask)
            k += 1
    return owner, ids


KERNELS.update({"packed_lookup": packed_lookup})


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


KERNELS.update({"janitor_char_offsets": janitor_char_offsets})


# ------------------------------------------------------------------- text-store anchors
@njit(cache=True, nogil=True)
def winnow_hashes(h, doc, w):
    """``textstore.winnow_hashes``: of every ``w`` consecutive k-gram hashes ``h`` of one doc
    (``doc`` non-decreasing) the first smallest is kept; a doc with fewer than ``w`` keeps all.
    Returns the kept hashes' top 32 bits and their docs, in input order."""
    n = len(h)
    keep = np.zeros(n, dtype=np.bool_)
    a = 0
    while a < n:
        b = a + 1
        while b < n and doc[b] == doc[a]:
            b += 1
        if b - a < w:
            keep[a:b] = True
        else:
            for i in range(a, b - w + 1):
                # selects, not branches: which hash is smallest is random (mispredicted)
                j = i
                hj = h[i]
                for t in range(i + 1, i + w):
                    less = h[t] < hj
                    j = t if less else j
                    hj = h[t] if less else hj
                keep[j] = True
        a = b
    m = 0
    for i in range(n):
        m += keep[i]
    out_h = np.empty(m + 1, dtype=np.uint32)
    out_d = np.empty(m + 1, dtype=np.int64)
    k = 0
    for i in range(n):  # every item written, the next one overwrites it unless it is kept
        out_h[k] = np.uint32(h[i] >> np.uint64(32))
        out_d[k] = doc[i]
        k += keep[i]
    return out_h[:m], out_d[:m]


@njit(cache=True, nogil=True)
def pack_bits(values, width):
    """``packed.pack``: ``len(values)`` (a multiple of 64) values of ``width`` bits, each below
    ``2**width``, as ``len * width / 64`` little-endian bit-packed uint64 words."""
    n = len(values)
    nw = n * width // 64
    out = np.zeros(nw + 1, dtype=np.uint64)
    for i in range(n):
        pos = i * width
        wi = pos >> 6
        s = pos & 63
        v = values[i]
        out[wi] |= v << np.uint64(s)
        if s + width > 64:
            out[wi + 1] |= v >> np.uint64(64 - s)
    return out[:nw]


KERNELS.update({"winnow_hashes": winnow_hashes, "pack_bits": pack_bits})


# ------------------------------------------------------------------- MinHash map feed
# The full build's MinHash map reads JSONL straight into code points (``minhash/feed.py``): the
# JSONL reader's line scan (``_scan_line``'s grammar and helpers) with the text field decoded to
# one uint32 per ``str`` character, then the Janitor bytes of those code points (``_put_cp``) with
# each character's offset there; and the map runs' band tables as (key, doc) pairs.


@njit(cache=True, nogil=True)
def _cp_is_space(cp, amap):
    """Whether code point ``cp`` normalizes to a space (``_put_cp``'s non-space flag negated)."""
    if cp < 0x80:
        return amap[cp] == 32
    return (cp == 0x85 or cp == 0xA0 or cp == 0x1680 or 0x2000 <= cp <= 0x200A or cp == 0x2028
            or cp == 0x2029 or cp == 0x202F or cp == 0x205F or cp == 0x3000)


@njit(cache=True, nogil=True)
def _decode_text_cps(buf, i, end, out, o, amap, plain):
    """``_decode_text`` into code points (one uint32 per ``str`` character, as ``json`` decodes
    the string): (position after the string or -1, new o, has a char that does not normalize to
    a space)."""
    nonspace = False
    while i < end:
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
def jsonl_scan_cps(buf, pos, end, key, amap, out, o, doc_start, doc_line, ndocs, line, limit, counts):
    """``jsonl_scan`` with each document's text as code points: doc ``k`` is
    ``out[doc_start[k]:doc_start[k + 1]]`` (no separators; chars = code points). The same
    documents, statuses and counts as ``jsonl_scan``. Returns (status, pos, o, ndocs, line)."""
    plain = _plain_bytes(amap)
    no_bytes = np.empty(0, dtype=np.uint8)
    while pos < end:
        nl, blank = _next_line(buf, pos, end)
        if blank:
            counts[0] += 1
            line += 1
            pos = nl + 1
            continue
        if ndocs + 1 >= len(doc_start) or o + (nl - pos) + 2 > len(out):
            return SCAN_ROOM, pos, o, ndocs, line
        o2, _, nonspace = _scan_line(buf, pos, nl, key, no_bytes, out, o, amap, plain, True)
        if o2 < 0:
            return SCAN_DEFER, pos, o, ndocs, line
        line += 1
        pos = nl + 1
        if not nonspace:
            counts[1] += 1
            continue
        doc_line[ndocs] = line
        ndocs += 1
        o = o2
        doc_start[ndocs] = o
        if o - doc_start[0] >= limit:
            return SCAN_BATCH_FULL, pos, o, ndocs, line
    return SCAN_END, min(pos, end), o, ndocs, line


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
    out[0] = 32
    o = 1
    for d in range(nd):
        nstart[d] = o
        for ci in range(doc_start[d], doc_start[d + 1]):
            while ia < len(at_start) and at_start[ia] == ci:
                off_start[ia] = o
                ia += 1
            while ib < len(at_end) and at_end[ib] == ci:
                off_end[ib] = o
                ib += 1
            cp = cps[ci]
            if cp < 0x80:  # the common case inline: the Janitor byte, or none (deleted)
                m = amap[cp]
                out[o] = m
                o += m >= 0
            else:
                o, _ = _put_cp(out, o, cp, amap)
        while ib < len(at_end) and at_end[ib] == doc_start[d + 1]:
            off_end[ib] = o
            ib += 1
        out[o] = 32
        o += 1
    nstart[nd] = o
    out[o:o + 8] = 32
    return out[:o + 8], nstart, off_start, off_end


@njit(cache=True, nogil=True)
def band_keys32(sigs, bands, rows):
    """``sketch.stored_band_keys(sketch.band_keys(sigs))`` transposed: uint32 ``[bands, m]``."""
    m = sigs.shape[0]
    out = np.empty((bands, m), dtype=np.uint32)
    seeds = np.empty(bands, dtype=np.uint64)
    for band in range(bands):
        seeds[band] = _BK_SEED * np.uint64(band + 1)
    for i in range(m):  # row by row: one pass over the signatures
        for band in range(bands):
            h = seeds[band]
            for j in range(band * rows, (band + 1) * rows):
                h ^= np.uint64(sigs[i, j])
                h *= _BK_MUL
                h ^= h >> np.uint64(32)
            out[band, i] = np.uint32(fmix(h) >> np.uint64(32))
    return out


@njit(cache=True, nogil=True)
def band_key_pairs(keys, docs):
    """A map run's band tables: per band (row of ``keys``, uint32), ``key << 32 | docs[window]``
    of every window sorted, ``docs`` (each window's doc relative to the run's first, below
    2**32) being non-decreasing: a stable LSD radix sort on the key in three 11-bit digits (the
    counts stay in L1; a byte-wise scatter into 256 small partitions cost twice as much) keeps equal
    keys in window order, hence in doc order."""
    bands, m = keys.shape
    out = np.empty((bands, m), dtype=np.uint64)
    a = np.empty(m, dtype=np.uint64)
    b = np.empty(m, dtype=np.uint64)
    counts = np.empty(2048, dtype=np.int64)
    mask = np.uint64(2047)
    for band in range(bands):
        for i in range(m):
            a[i] = (np.uint64(keys[band, i]) << np.uint64(32)) | np.uint64(docs[i])
        src, dst = a, b
        for shift in (32, 43, 54):
            sh = np.uint64(shift)
            counts[:] = 0
            for i in range(m):
                counts[(src[i] >> sh) & mask] += 1
            acc = 0
            for v in range(2048):
                c = counts[v]
                counts[v] = acc
                acc += c
            for i in range(m):
                v = (src[i] >> sh) & mask
                dst[counts[v]] = src[i]
                counts[v] += 1
            src, dst = dst, src
        out[band] = src
    return out


KERNELS.update({"jsonl_scan_cps": jsonl_scan_cps, "janitor_from_cps": janitor_from_cps,
                "band_keys32": band_keys32, "band_key_pairs": band_key_pairs})


# ------------------------------------------------------------------- n-gram build
# The map's run sort and the reduce's re-sort (``msd_sort``: stable, in place), the reduce's merge
# on stored keys (``merge_sorted_keys``) and one-pass token hashing (``token_hashes_1p``). Same
# results as the numpy fallback's sorts, merge and token hashes (``ngram_runs``, ``ngram_reduce``,
# ``hashing``), so the index bytes do not depend on which ran.
from numba.cpython.unsafe.numbers import leading_zeros, trailing_zeros  # noqa: E402

_LEAF = 4  # keys per part a split aims at
_BIG_DIGIT = 8  # most bits one split of a part beyond _IN_CACHE keys uses
_IN_CACHE = 1 << 15  # keys (16 B each with the payload) that sit in L2
_MAX_DIGIT = 11  # most bits one split uses (a 16 KB count table, in L1)


@njit(cache=True, nogil=True)
def _insertion_sort_by_key(k, p, a, b, lo):
    """Stable insertion sort of ``k[a:b]`` (with ``p``) by ``k >> lo``."""
    for i in range(a + 1, b):
        kv = k[i]
        key = kv >> lo
        if (k[i - 1] >> lo) <= key:
            continue
        pv = p[i]
        j = i - 1
        while j >= a and (k[j] >> lo) > key:
            k[j + 1] = k[j]
            p[j + 1] = p[j]
            j -= 1
        k[j + 1] = kv
        p[j + 1] = pv


@njit(cache=True, nogil=True)
def msd_sort(k, p, tk, tp, lo):
    """Stable in-place sort of ``k`` (uint64, payload ``p``) by ``k >> lo``: MSD radix sort from
    the highest bit that varies, ping-ponging between ``k``/``p`` and the scratch ``tk``/``tp``
    (at least as long). Each partition is split on as many bits as leave about ``_LEAF``
    keys per part (at most ``_MAX_DIGIT``), and parts of ``2 * _LEAF`` or fewer keys are finished
    by insertion sort: random 64-bit keys need two scatter passes, against 8 for an LSD sort
    on every byte."""
    n = len(k)
    if n < 2:
        return
    lo_ = np.uint64(lo)
    first = k[0] >> lo_
    x = np.uint64(0)
    for i in range(n):
        x |= (k[i] >> lo_) ^ first
    if x == 0:
        return
    nbits = 64 - leading_zeros(x)
    cap = 64 * (1 << _MAX_DIGIT)
    st_a = np.empty(cap, dtype=np.int64)
    st_b = np.empty(cap, dtype=np.int64)
    st_t = np.empty(cap, dtype=np.int64)
    st_f = np.empty(cap, dtype=np.int64)
    st_a[0], st_b[0], st_t[0], st_f[0] = 0, n, nbits, 0
    sp = 1
    bounds = np.empty((1 << _MAX_DIGIT) + 1, dtype=np.int64)
    pos = np.empty(1 << _MAX_DIGIT, dtype=np.int64)
    while sp > 0:
        sp -= 1
        a, b, top, f = st_a[sp], st_b[sp], st_t[sp], st_f[sp]
        if f:
            sk, spp, dk, dp = tk, tp, k, p
        else:
            sk, spp, dk, dp = k, p, tk, tp
        m = b - a
        w = 64 - leading_zeros(np.uint64(m // _LEAF))
        # out-of-cache parts: few destinations (a scatter to 2048 places misses the cache and the
        # TLB on every write: 5x slower than to 256)
        w = max(1, min(w, _MAX_DIGIT if m <= _IN_CACHE else _BIG_DIGIT, top))
        low = top - w  # the digit's bits: [low, top) above lo
        sh = np.uint64(lo + low)
        mask = np.uint64((1 << w) - 1)
        nv = 1 << w
        bounds[:nv + 1] = 0
        for i in range(a, b):
            bounds[((sk[i] >> sh) & mask) + 1] += 1
        single = False
        for v in range(1, nv + 1):
            if bounds[v] == m:
                single = True
                break
        if single:  # one digit value: go lower without moving anything
            if low == 0:
                if f:
                    dk[a:b] = sk[a:b]
                    dp[a:b] = spp[a:b]
            else:
                st_a[sp], st_b[sp], st_t[sp], st_f[sp] = a, b, low, f
                sp += 1
            continue
        bounds[0] = a
        for v in range(nv):
            bounds[v + 1] += bounds[v]
            pos[v] = bounds[v]
        for i in range(a, b):
            kv = sk[i]
            v = (kv >> sh) & mask
            j = pos[v]
            dk[j] = kv
            dp[j] = spp[i]
            pos[v] = j + 1
        # the parts are now in dk (k itself when f, else the scratch)
        for v in range(nv):
            ca, cb = bounds[v], bounds[v + 1]
            c = cb - ca
            if c == 0:
                continue
            if c <= 2 * _LEAF or low == 0:
                if not f:  # element loops: a slice copy costs more than these few keys
                    for q in range(ca, cb):
                        k[q] = tk[q]
                        p[q] = tp[q]
                if c > 1 and low > 0:
                    _insertion_sort_by_key(k, p, ca, cb, lo_)
            else:
                st_a[sp], st_b[sp], st_t[sp], st_f[sp] = ca, cb, low, 1 - f
                sp += 1


@njit(cache=True, nogil=True)
def merge_sorted_keys(h, d, drop, provenance, none, docs_out):
    """The reduce's merge of distinct ``(hash, doc)`` pairs sorted by key ``h >> drop``: each key
    once, its pair count (df) and its first ``provenance`` distinct docs, smallest first (a run
    of equal keys whose docs are out of order is sorted first; ``d`` may be reordered)."""
    n = len(h)
    sh = np.uint64(drop)
    nu = 0
    prev = np.uint64(0)
    for i in range(n):
        t = h[i] >> sh
        if i == 0 or t != prev:
            nu += 1
        prev = t
    tu = np.empty(nu, dtype=np.uint64)
    df = np.empty(nu, dtype=np.uint32)
    docs = docs_out[:nu]
    docs[:] = none
    i = 0
    u = 0
    while i < n:
        t = h[i] >> sh
        j = i + 1
        ordered = True
        while j < n and (h[j] >> sh) == t:
            if d[j] < d[j - 1]:
                ordered = False
            j += 1
        if not ordered:
            for q in range(i + 1, j):
                dv = d[q]
                r = q - 1
                while r >= i and d[r] > dv:
                    d[r + 1] = d[r]
                    r -= 1
                d[r + 1] = dv
        tu[u] = t
        df[u] = j - i
        if provenance > 0:
            docs[u, 0] = d[i]
        r = 1
        for q in range(i + 1, j):
            if r >= provenance:
                break
            if d[q] != d[q - 1]:
                docs[u, r] = d[q]
                r += 1
        u += 1
        i = j
    return tu, df, docs


_SP8 = np.uint64(0x2020202020202020)
_ONES8 = np.uint64(0x0101010101010101)
_HIGH8 = np.uint64(0x8080808080808080)


@njit(cache=True, nogil=True)
def token_hashes_1p(data, words, doc_start, salt_tok, max_bytes, tok, huge):
    """Token hashes (``hashing._token_hashes``'s values) in one pass over ``data`` into caller
    buffers: ``tok`` (room for every token, e.g. ``len(data) // 2 + 1``) and ``huge`` (start,
    end rows for tokens longer than ``max_bytes``; room for ``len(data) // (max_bytes + 1) + 1``).
    A token's end is found 8 bytes at a time (the first space byte of a word, by the classic
    zero-byte bit trick), so most tokens cost one word load, which is also the word hashed.
    Returns (ntok, doc_tok, nhuge)."""
    n = len(data)
    nd = len(doc_start)
    doc_tok = np.empty(nd, dtype=np.int64)
    t = 0
    d = 0
    nhuge = 0
    i = 0
    while True:
        while i < n and data[i] == 32:
            i += 1
        if i >= n:
            break
        s = i
        while d < nd and doc_start[d] <= s:
            doc_tok[d] = t
            d += 1
        w0 = words[s]
        e = s
        w = w0
        while True:
            x = w ^ _SP8
            z = (x - _ONES8) & ~x & _HIGH8
            if z != 0:
                e += trailing_zeros(z) >> 3
                break
            e += 8
            w = words[e]
        length = e - s
        i = e
        if length > max_bytes:
            huge[nhuge, 0] = t
            huge[nhuge, 1] = s
            huge[nhuge, 2] = e
            nhuge += 1
            tok[t] = 0
        elif length <= 8:
            tok[t] = fmix((w0 & _MASKS[length]) + np.uint64(length) * _K_LEN + salt_tok)
        else:
            x = w0 + np.uint64(length) * _K_LEN + salt_tok
            pos = s + 8
            while pos < e:
                x = fmix(x) ^ (words[pos] & _MASKS[min(e - pos, 8)])
                pos += 8
            tok[t] = fmix(x)
        t += 1
    while d < nd:
        doc_tok[d] = t
        d += 1
    return t, doc_tok, nhuge


@njit(cache=True, nogil=True)
def bucket_columns(local, df, docs, base, first_cell, last_cell, none, df_overflow, doc0, keys, df8,
                   over_rows, over, more_rows, offsets):
    """One pass over a chunk of a bucket's merged entries (``local`` keys sorted, ``df``, ``docs``
    [k, P]) into the format-2 columns, in caller arrays of length k (``offsets``: one per
    directory cell ``first_cell..last_cell``): stored keys (low 32 bits), uint8 df, the
    overflow rows and dfs, the first doc, the rows with a second doc (``base`` + row) and the
    cells' row offsets. Returns (overflow rows, rows with a second doc)."""
    k = len(local)
    m32 = np.uint64(0xFFFFFFFF)
    no = 0
    nm = 0
    cell = first_cell
    has_more = docs.shape[1] > 1
    for i in range(k):
        key = local[i]
        c = np.int64(key >> np.uint64(32))
        while cell <= last_cell and cell <= c:
            offsets[cell - first_cell] = base + i
            cell += 1
        keys[i] = np.uint32(key & m32)
        f = df[i]
        if f >= df_overflow:
            df8[i] = df_overflow
            over_rows[no] = base + i
            over[no] = f
            no += 1
        else:
            df8[i] = f
        doc0[i] = docs[i, 0]
        if has_more and docs[i, 1] != none:
            more_rows[nm] = base + i
            nm += 1
    while cell <= last_cell:
        offsets[cell - first_cell] = base + k
        cell += 1
    return no, nm


@njit(cache=True, nogil=True)
def ngram_hashes_into(tok, doc_tok, n, base, base_inv, add, h_out, d_out, pos, doc_base):
    """``ngram_hashes`` written from ``h_out[pos]``/``d_out[pos]`` (the caller made room), docs
    as ``doc_base`` + the doc's index: a map's batches go straight into its run buffer.
    Returns the new end."""
    ndocs = len(doc_tok) - 1
    top = np.uint64(1)
    for _ in range(n - 1):
        top *= base
    out = pos
    for k in range(ndocs):
        a, b = doc_tok[k], doc_tok[k + 1]
        if b - a < n:
            continue
        s = np.uint64(0)
        p = np.uint64(1)
        for j in range(n):
            s += tok[a + j] * p
            p *= base
        doc = doc_base + k
        for i in range(a, b - n + 1):
            if i > a:
                s = (s - tok[i - 1]) * base_inv + tok[i + n - 1] * top
            h_out[out] = fmix(s + add)
            d_out[out] = doc
            out += 1
    return out


KERNELS.update({"msd_sort": msd_sort, "merge_sorted_keys": merge_sorted_keys,
                "token_hashes_1p": token_hashes_1p, "bucket_columns": bucket_columns,
                "ngram_hashes_into": ngram_hashes_into})
