"""Stable 64-bit hashes of normalized word n-grams, vectorized with numpy.

Scheme ``tcqa-word64-poly64-splitmix64-v1`` (recorded in every index manifest):

* token hash: the token's UTF-8 bytes read as little-endian 8-byte words ``w_0, w_1, ...``
  (the last one zero-padded); ``x = w_0 + len * K_LEN + salt_tok``, then for each further word
  ``x = fmix(x) ^ w_k``; the token hash is ``fmix(x)``. Tokens longer than 64 bytes use
  ``xxh3_64(bytes, seed=salt_tok)`` instead. Tokens of at most 8 bytes never collide.
* n-gram hash: ``fmix(sum_j tok_{i+j} * B2**j mod 2**64 + n * K_N + salt_ngram)``;
* ``fmix`` is the splitmix64 finalizer; the salts are derived from the seed.

The polynomial is evaluated for every n-gram at once with a prefix sum: ``B2`` is odd, hence
invertible mod 2**64, so a window sum is ``(S[i + n] - S[i]) * B2**-i``. There is no
Python-level work per token. With numba installed the same values come from compiled kernels
(``kernel``: one pass for tokens, one rolling pass for n-grams); ``TCQA_KERNEL=numpy`` keeps
the numpy passes, which tests compare with the kernels. The hash depends only on
the token strings, never on whitespace or document layout, and n-grams never cross documents.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import xxhash

from tcqa_data.decontam.core import kernel
from tcqa_data.decontam.core.normalize import (
    JANITOR_BYTES_DELETE,
    JANITOR_BYTES_TABLE,
    check_scheme,
    janitor_bytes,
    normalize,
    tokenize,
)

HASH_NAME = "tcqa-word64-poly64-splitmix64-v1"

_M64 = (1 << 64) - 1
_B2 = 0xC2B2AE3D27D4EB4F
_K_LEN = np.uint64(0xD6E8FEB86659FD93)
_K_N = np.uint64(0xA0761D6478BD642F)
_F1 = np.uint64(0xBF58476D1CE4E5B9)
_F2 = np.uint64(0x94D049BB133111EB)

_MASK = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], dtype=np.uint64)
_MAX_WORDS = 8  # tokens longer than this many 8-byte words are hashed with xxh3 one by one

# UTF-8 forms of non-ASCII str.split() whitespace (\x85, \xa0, \u1680, \u2000-\u200a, \u2028,
# \u2029, \u202f, \u205f, \u3000), by lead byte -> {second byte: allowed third bytes or None}
_UTF8_WS = {
    0xC2: {0x85: None, 0xA0: None},
    0xE1: {0x9A: (0x80,)},
    0xE2: {0x80: (*range(0x80, 0x8B), 0xA8, 0xA9, 0xAF), 0x81: (0x9F,)},
    0xE3: {0x80: (0x80,)},
}


# The Janitor byte translation for ASCII as one array (the JSONL kernel's map): the output byte,
# or -1 for a deleted (punctuation) byte.
JANITOR_ASCII_MAP = np.frombuffer(JANITOR_BYTES_TABLE[:128], dtype=np.uint8).astype(np.int16)
JANITOR_ASCII_MAP[np.frombuffer(JANITOR_BYTES_DELETE, dtype=np.uint8)] = -1


def _blank_unicode_whitespace(arr: np.ndarray) -> None:
    """Overwrite the UTF-8 bytes of non-ASCII whitespace with spaces, in place (length kept)."""
    cand = np.flatnonzero((arr[:-2] >= 0xC2) & (arr[:-2] <= 0xE3))
    if not len(cand):
        return
    lead = arr[cand]
    for lb, seconds in _UTF8_WS.items():
        pos = cand[lead == lb]
        for sb, thirds in seconds.items():
            p = pos[arr[pos + 1] == sb]
            if thirds is None:
                arr[p] = 32
                arr[p + 1] = 32
                continue
            p = p[np.isin(arr[p + 2], thirds)]
            arr[p] = 32
            arr[p + 1] = 32
            arr[p + 2] = 32


def _fmix_scalar(z: int) -> int:
    z &= _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def _salts(seed: int) -> tuple[np.uint64, np.uint64]:
    s = (int(seed) * 0x9E3779B97F4A7C15) & _M64
    return np.uint64(_fmix_scalar(s ^ 0x1234567)), np.uint64(_fmix_scalar(s ^ 0x89ABCDEF))


def _fmix_inplace(z: np.ndarray) -> np.ndarray:
    z ^= z >> np.uint64(30)
    z *= _F1
    z ^= z >> np.uint64(27)
    z *= _F2
    z ^= z >> np.uint64(31)
    return z


class _Powers:
    """Cached B**i and B**-i mod 2**64 for i < size, grown by doubling."""

    def __init__(self, base: int) -> None:
        self.base = base
        self.inv = pow(base, -1, 1 << 64)
        self.pow = np.ones(1, dtype=np.uint64)
        self.ipow = np.ones(1, dtype=np.uint64)

    def ensure(self, size: int) -> None:
        while len(self.pow) < size:
            k = len(self.pow)
            self.pow = np.concatenate([self.pow, self.pow * np.uint64(pow(self.base, k, 1 << 64))])
            self.ipow = np.concatenate([self.ipow, self.ipow * np.uint64(pow(self.inv, k, 1 << 64))])


_P2 = _Powers(_B2)


def encode_normalized(text: str, scheme: str = "janitor") -> bytes:
    """UTF-8 of the normalized text, split by ``bytes.split()`` into exactly ``tokenize``'s tokens."""
    if scheme == "janitor":
        # non-ASCII whitespace is turned into spaces later, vectorized over the whole batch
        return janitor_bytes(text)
    check_scheme(scheme)
    return " ".join(normalize(text, scheme).split()).encode("utf-8", "surrogatepass")


def _token_hashes(data: bytearray, starts: np.ndarray, ends: np.ndarray, salt: np.uint64) -> np.ndarray:
    """Hash of each token ``data[starts[i]:ends[i]]``: its bytes read 8 at a time as little-endian
    words (unaligned gathers, no per-byte work), mixed with its length; xxh3 for long tokens."""
    lens = ends - starts
    # every 8-byte window of data as one uint64 (stride 1: unaligned reads are fine on numpy)
    words = np.ndarray((len(data) - 7,), dtype="<u8", buffer=data, offset=0, strides=(1,))
    x = words[starts]  # fancy indexing: .take() would first copy the strided view
    x &= _MASK.take(np.minimum(lens, 8))
    x += lens.astype(np.uint64) * _K_LEN
    x += salt
    long_ = np.flatnonzero(lens > 8)
    if len(long_):
        huge = lens[long_] > _MAX_WORDS * 8
        if huge.any():  # rare (URLs, blobs): one xxh3 call each instead of many numpy passes
            for i in long_[huge].tolist():
                x[i] = np.uint64(xxhash.xxh3_64_intdigest(bytes(data[starts[i]:ends[i]]), int(salt)))
            long_ = long_[~huge]
        k = 1
        while len(long_):
            xs = x.take(long_)
            _fmix_inplace(xs)
            pos = starts.take(long_) + 8 * k
            w = words[pos]
            w &= _MASK.take(np.minimum(ends.take(long_) - pos, 8))
            xs ^= w
            x[long_] = xs
            k += 1
            long_ = long_[lens.take(long_) > 8 * k]
    return _fmix_inplace(x)


def _hash_parts(parts: Sequence[bytes], ns: Sequence[int], seed: int
                ) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """N-gram hashes of already-normalized documents ``parts`` for every n in ``ns``."""
    return hash_normalized(*_normalized_buffer(parts), ns, seed)


def _normalized_buffer(parts: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """``parts`` (normalized UTF-8) in ``hash_normalized``'s layout: the buffer and ``doc_start``."""
    ndocs = len(parts)
    # One space before each doc and padding after: every token has a space on both sides and
    # 8-byte reads never run off the end. Doc boundaries are kept as byte offsets.
    data = bytearray(b" ")
    data += b" ".join(parts)
    data += b"         "
    lens = np.fromiter(map(len, parts), dtype=np.int64, count=ndocs)
    doc_start = np.empty(ndocs + 1, dtype=np.int64)
    doc_start[0] = 1
    np.cumsum(lens + 1, out=doc_start[1:])
    doc_start[1:] += 1

    arr = np.frombuffer(data, dtype=np.uint8)
    if not data.isascii():
        _blank_unicode_whitespace(arr)
    return arr, doc_start


def normalized_buffer(texts: Sequence[str], scheme: str = "janitor") -> tuple[np.ndarray, np.ndarray]:
    """``texts`` normalized into ``hash_normalized``'s layout (the buffer and ``doc_start``), for
    callers that read the normalized bytes as well as hashing them (the semantic tier's windows)."""
    return _normalized_buffer([encode_normalized(t, scheme) for t in texts])


def word_counts(texts: Sequence[str], scheme: str = "janitor") -> np.ndarray:
    """``len(tokenize(text, scheme))`` of each text (int64), from one compiled tokenizing pass
    over all of them instead of a list of token strings per text."""
    if not kernel.enabled():
        return np.array([len(tokenize(t, scheme)) for t in texts], dtype=np.int64)
    arr, doc_start = _normalized_buffer([encode_normalized(t, scheme) for t in texts])
    _, doc_tok = _tokens_compiled(kernel.kernels(), arr, doc_start, np.uint64(0))
    return np.diff(doc_tok)


def hash_normalized(arr: np.ndarray, doc_start: np.ndarray, ns: Sequence[int], seed: int,
                    tokens: tuple[np.ndarray, np.ndarray] | None = None
                    ) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """N-gram hashes of documents already normalized into one buffer (``batch_ngram_hashes``'s
    result). ``arr``: uint8, a space, then each document's normalized UTF-8 with non-ASCII
    whitespace blanked, each followed by a space, then >= 8 bytes of spaces; document ``k``
    starts at ``doc_start[k]``, and ``doc_start[-1]`` is the end of the last one plus one.
    ``tokens``: ``normalized_tokens`` of the same buffer and seed, when the caller has them."""
    salt_tok, salt_ng = _salts(seed)
    ndocs = len(doc_start) - 1
    for n in ns:
        if n < 1:
            raise ValueError(f"n-gram size must be >= 1, got {n}")
    if kernel.enabled():
        return _hash_parts_compiled(arr, doc_start, ns, salt_tok, salt_ng, tokens)
    edge = np.diff((arr != 32).view(np.int8))
    starts = np.flatnonzero(edge == 1) + 1
    ends = np.flatnonzero(edge == -1) + 1
    del edge
    ntok = len(starts)
    tok = _token_hashes(arr, starts, ends, salt_tok)

    # token offsets of each doc
    doc_tok = np.searchsorted(starts, doc_start)
    per_doc = np.diff(doc_tok)
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    if ntok:
        _P2.ensure(ntok + 1)
        w = np.empty(ntok + 1, dtype=np.uint64)
        w[0] = 0
        np.multiply(tok, _P2.pow[:ntok], out=w[1:])
        np.cumsum(w, out=w)
    for n in ns:
        if ntok < n:
            out[n] = (np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.int64))
            continue
        m = ntok - n + 1
        h = w[n:] - w[:m]  # window sums, still scaled by B2**i
        h *= _P2.ipow[:m]
        h += np.uint64((n * int(_K_N)) & _M64)
        h += salt_ng
        _fmix_inplace(h)
        counts = np.maximum(per_doc - (n - 1), 0)
        if counts.sum() != m:  # drop windows that cross a document boundary
            bad = np.zeros(m + 1, dtype=np.int32)
            cut = doc_tok[1:-1]  # first token of every doc but the first
            np.add.at(bad, np.minimum(np.maximum(cut - (n - 1), doc_tok[:-2]), m), 1)
            np.add.at(bad, np.minimum(cut, m), -1)
            h = h[np.cumsum(bad[:m]) == 0]
        out[n] = (h, np.repeat(np.arange(ndocs, dtype=np.int64), counts))
    return out


def _hash_parts_compiled(arr: np.ndarray, doc_start: np.ndarray, ns: Sequence[int], salt_tok: np.uint64,
                         salt_ng: np.uint64, tokens: tuple[np.ndarray, np.ndarray] | None = None
                         ) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """``_hash_parts`` with the numba kernels (same values: see ``kernel``)."""
    k = kernel.kernels()
    tok, doc_tok = tokens if tokens is not None else _tokens_compiled(k, arr, doc_start, salt_tok)
    inv = np.uint64(_P2.inv)
    out = {}
    for n in ns:
        add = np.uint64((n * int(_K_N) + int(salt_ng)) & _M64)
        out[n] = k["ngram_hashes"](tok, doc_tok, n, np.uint64(_B2), inv, add)
    return out


def hash_normalized_present(arr: np.ndarray, doc_start: np.ndarray, seed: int,
                            presence: Mapping[int, tuple[np.ndarray, int, np.ndarray, int]],
                            tokens: tuple[np.ndarray, np.ndarray] | None = None
                            ) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """``hash_normalized`` keeping, per n, only the hashes that pass two bit filters: ``presence``
    maps n -> (high bits, shift, low bits, mask); bit ``v & 7`` of byte ``v >> 3`` of ``high`` is
    set for the values ``v = hash >> shift``, of ``low`` for ``v = hash & mask``, worth looking up
    (``stream.table``). The compiled kernels only; the same hashes and docs as ``hash_normalized``
    for those kept, in the same order, with no array of every n-gram. ``tokens``: as in
    ``hash_normalized``."""
    salt_tok, salt_ng = _salts(seed)
    k = kernel.kernels()
    tok, doc_tok = tokens if tokens is not None else _tokens_compiled(k, arr, doc_start, salt_tok)
    inv = np.uint64(_P2.inv)
    out = {}
    for n, (high, shift, low, mask) in presence.items():
        if n < 1:
            raise ValueError(f"n-gram size must be >= 1, got {n}")
        h = np.empty(len(tok), dtype=np.uint64)
        d = np.empty(len(tok), dtype=np.int64)
        add = np.uint64((n * int(_K_N) + int(salt_ng)) & _M64)
        m = k["ngram_hashes_present"](tok, doc_tok, n, np.uint64(_B2), inv, add, high, shift, low, mask, h, d)
        out[n] = (h[:m], d[:m])
    return out


def hash_normalized_into(arr: np.ndarray, doc_start: np.ndarray, ns: Sequence[int], seed: int,
                         reserve: Callable[[int, int], tuple[np.ndarray, np.ndarray, int]], doc_base: int,
                         tokens: tuple[np.ndarray, np.ndarray] | None = None) -> dict[int, int]:
    """``hash_normalized`` with the kernels, written into the caller's buffers (no arrays per
    batch): for each n, ``reserve(n, count)`` returns ``(hashes, docs, pos)`` with room for
    ``count`` pairs from ``pos``; docs are ``doc_base`` + the doc's index. Returns the counts."""
    for n in ns:
        if n < 1:
            raise ValueError(f"n-gram size must be >= 1, got {n}")
    salt_tok, salt_ng = _salts(seed)
    k = kernel.kernels()
    tok, doc_tok = tokens if tokens is not None else _tokens_compiled(k, arr, doc_start, salt_tok)
    per_doc = np.diff(doc_tok)
    inv = np.uint64(_P2.inv)
    counts = {}
    for n in ns:
        m = int(np.maximum(per_doc - (n - 1), 0).sum())
        hb, db, pos = reserve(n, m)
        add = np.uint64((n * int(_K_N) + int(salt_ng)) & _M64)
        end = k["ngram_hashes_into"](tok, doc_tok, n, np.uint64(_B2), inv, add, hb, db, pos, doc_base)
        assert end == pos + m
        counts[n] = m
    return counts


def normalized_tokens(arr: np.ndarray, doc_start: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The token hashes of a normalized buffer (``hash_normalized``'s layout) and each doc's
    first token (plus the end), for callers that hash several n-gram sizes of one buffer in
    separate calls (``tokens=``); the compiled kernels only."""
    return _tokens_compiled(kernel.kernels(), arr, doc_start, _salts(seed)[0])


def _tokens_compiled(k: dict, arr: np.ndarray, doc_start: np.ndarray, salt_tok: np.uint64
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Token hashes of a normalized batch and each doc's first token (plus the end), compiled."""
    words = np.ndarray((len(arr) - 7,), dtype="<u8", buffer=arr, offset=0, strides=(1,))
    # one pass into buffers with room for every token (a token and its space take 2+ bytes):
    # only the pages the tokens fill are touched
    tok = np.empty(len(arr) // 2 + 1, dtype=np.uint64)
    huge = np.empty((len(arr) // (_MAX_WORDS * 8 + 1) + 1, 3), dtype=np.int64)  # token, start, end
    ntok, doc_tok, nhuge = k["token_hashes_1p"](arr, words, doc_start[:-1], salt_tok, _MAX_WORDS * 8,
                                                tok, huge)
    tok = tok[:ntok]
    doc_tok = np.append(doc_tok, ntok)
    if nhuge:
        raw = arr.tobytes()
        spans = huge[:nhuge, 1:].tolist()
        x = np.array([xxhash.xxh3_64_intdigest(raw[s:e], int(salt_tok)) for s, e in spans], dtype=np.uint64)
        tok[huge[:nhuge, 0]] = _fmix_inplace(x)
    return tok, doc_tok


def batch_ngram_hashes(texts: Sequence[str], ns: Sequence[int], scheme: str = "janitor", seed: int = 0
                       ) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """For each n: ``(hashes uint64, doc int64)`` of every n-gram of every text, in text order.

    ``doc[k]`` is the index in ``texts`` of the text n-gram ``k`` comes from.
    """
    return _hash_parts([encode_normalized(t, scheme) for t in texts], ns, seed)


def ngram_hashes(text: str, n: int, scheme: str = "janitor", seed: int = 0) -> np.ndarray:
    """Element ``i`` is the hash of the word n-gram starting at token ``i`` of ``tokenize(text)``."""
    return _hash_parts([encode_normalized(text, scheme)], [n], seed)[n][0]


def token_ngram_hashes(tokens: Sequence[str], n: int, seed: int = 0) -> np.ndarray:
    """Like ``ngram_hashes`` over already-normalized tokens (e.g. lm-eval's n-gram strings split)."""
    return normalized_ngram_hashes(" ".join(tokens).encode("utf-8", "surrogatepass"), n, seed)


def normalized_ngram_hashes(data: bytes, n: int, seed: int = 0) -> np.ndarray:
    """Like ``ngram_hashes`` over already-normalized UTF-8 (tokens between spaces)."""
    return _hash_parts([data], [n], seed)[n][0]
