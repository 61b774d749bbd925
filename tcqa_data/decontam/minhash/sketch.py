"""Shingles, MinHash signatures (datasketch's affine32 scheme) and LSH band keys."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import xxhash

from tcqa_data.decontam.core import kernel
from tcqa_data.decontam.core.normalize import tokenize
from tcqa_data.decontam.minhash.params import MinHashParams

EMPTY_HASH = np.uint32(0xFFFFFFFF)  # datasketch's initial value: a window without shingles
_CHUNK_SHINGLES = 8192  # shingles x permutations block (4 MiB at 128): stays in cache

_U32 = np.uint32
_U64 = np.uint64


# ---------------------------------------------------------------------------------------------
# Signatures


def shingle_hash(shingle: str | bytes) -> int:
    """The 32-bit hash of one shingle (pass it as ``hashfunc`` to ``datasketch.MinHash``)."""
    if isinstance(shingle, str):
        # surrogatepass: JSON escapes can carry lone surrogates ("\ud83d"); hash them, don't crash.
        shingle = shingle.encode("utf-8", "surrogatepass")
    return xxhash.xxh32_intdigest(shingle, 0)


def shingles(text: str, params: MinHashParams) -> list[str]:
    """Shingles of one window: ``shingle_words`` normalized tokens joined by a space."""
    toks = tokenize(text, params.normalization)
    k = params.shingle_words
    if len(toks) < k:
        return [" ".join(toks)] if toks else []
    return list(map(" ".join, zip(*(toks[i:] for i in range(k)), strict=False)))


@lru_cache(maxsize=16)
def _permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) of datasketch 2.0's affine32 scheme: odd a, any b, from RandomState(seed)."""
    gen = np.random.RandomState(seed)
    a = gen.randint(0, 1 << 31, num_perm, dtype=_U32) * _U32(2) + _U32(1)
    b = gen.randint(0, 1 << 32, num_perm, dtype=_U32)
    a.flags.writeable = False
    b.flags.writeable = False
    return a, b


def _fmix32(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 32-bit finalizer (datasketch pre-mixes every input hash with it)."""
    h = h ^ (h >> _U32(16))
    h *= _U32(0x85EBCA6B)
    h ^= h >> _U32(13)
    h *= _U32(0xC2B2AE35)
    h ^= h >> _U32(16)
    return h


def _shingle_hashes(texts: Sequence[str], params: MinHashParams) -> tuple[np.ndarray, np.ndarray]:
    """All shingle hashes (uint32, window after window) and the number per window."""
    parts, counts = [], np.zeros(len(texts), dtype=np.int64)
    hfun = xxhash.xxh32_intdigest
    for i, text in enumerate(texts):
        sh = shingles(text, params)
        counts[i] = len(sh)
        if sh:
            parts.append(np.fromiter((hfun(s.encode("utf-8", "surrogatepass")) for s in sh), dtype=_U32,
                                    count=len(sh)))
    flat = np.concatenate(parts) if parts else np.zeros(0, dtype=_U32)
    return flat, counts


def _minhash_from_hashes(flat: np.ndarray, counts: np.ndarray, params: MinHashParams) -> np.ndarray:
    """[len(counts), num_perm] signatures from concatenated per-window shingle hashes."""
    a, b = _permutations(params.num_perm, params.seed)
    out = np.full((len(counts), params.num_perm), EMPTY_HASH, dtype=_U32)
    if flat.size == 0:
        return out
    mixed = _fmix32(flat.astype(_U32, copy=True))
    window_of = np.repeat(np.arange(len(counts)), counts)
    # Blocks of shingles (not windows), so one huge window cannot blow up memory.
    for s0 in range(0, flat.size, _CHUNK_SHINGLES):
        s1 = min(s0 + _CHUNK_SHINGLES, flat.size)
        w = window_of[s0:s1]
        starts = np.flatnonzero(np.r_[True, w[1:] != w[:-1]])
        p = np.multiply.outer(a, mixed[s0:s1])  # [num_perm, shingles], wraps mod 2**32 like datasketch
        p += b[:, None]
        mins = np.minimum.reduceat(p, starts, axis=1).T
        rows = w[starts]
        out[rows] = np.minimum(out[rows], mins)
    return out


def _sign_compiled(texts: Sequence[str], params: MinHashParams) -> tuple[np.ndarray, np.ndarray]:
    """Signatures and shingle counts with the numba kernel (Janitor normalization): the windows'
    normalized bytes (``encode_normalized``, as the n-gram hashing) in one buffer, then one
    pass per window: tokens, shingle bytes, xxh32, fmix32, the permutation minimum."""
    from tcqa_data.decontam.core.hashing import _blank_unicode_whitespace, encode_normalized

    parts = [encode_normalized(t, "janitor") for t in texts]
    lens = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
    ends = np.cumsum(lens + 1) - 1
    data = bytearray(b" ".join(parts))
    data += b"   "  # _blank_unicode_whitespace looks two bytes ahead
    arr = np.frombuffer(data, dtype=np.uint8)
    if not data.isascii():
        _blank_unicode_whitespace(arr)
    a, b = _permutations(params.num_perm, params.seed)
    return kernel.kernels()["window_signatures"](arr, ends - lens, ends, params.shingle_words, a, b)


def sign_spans(texts: Sequence[str], win_doc: np.ndarray, starts: np.ndarray, ends: np.ndarray,
               params: MinHashParams) -> tuple[np.ndarray, np.ndarray]:
    """``sign`` of the windows ``texts[win_doc[i]][starts[i]:ends[i]]``. The kernel path
    normalizes each document once (the same bytes ``encode_normalized`` gives each window,
    since Janitor normalization is per character) and signs byte ranges of it."""
    if not (params.normalization == "janitor" and kernel.enabled()):
        return sign([texts[d][s:e] for d, s, e in zip(win_doc.tolist(), starts.tolist(), ends.tolist(),
                                                       strict=True)], params)
    from tcqa_data.decontam.core.hashing import _blank_unicode_whitespace
    from tcqa_data.decontam.core.normalize import JANITOR_BYTES_DELETE, JANITOR_BYTES_TABLE

    k = kernel.kernels()
    raw = b"".join([t.encode("utf-8", "surrogatepass") for t in texts])
    doc_start = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)), out=doc_start[1:])
    offs = k["janitor_char_offsets"](np.frombuffer(raw, dtype=np.uint8), int(doc_start[-1]),
                                     _janitor_deleted())
    data = bytearray(raw.translate(JANITOR_BYTES_TABLE, JANITOR_BYTES_DELETE))
    data += b"   "  # _blank_unicode_whitespace looks two bytes ahead
    arr = np.frombuffer(data, dtype=np.uint8)
    if not raw.isascii():
        _blank_unicode_whitespace(arr)
    first = doc_start[win_doc]
    a, b = _permutations(params.num_perm, params.seed)
    return k["window_signatures"](arr, offs[first + starts], offs[first + ends], params.shingle_words, a, b)


def sign_normalized(data: np.ndarray, starts: np.ndarray, ends: np.ndarray, params: MinHashParams
                    ) -> tuple[np.ndarray, np.ndarray]:
    """``sign`` of windows given as byte ranges ``data[starts[i]:ends[i]]`` of Janitor-normalized
    text (non-ASCII whitespace blanked: ``feed.normalized_codepoints``); the kernel path only."""
    a, b = _permutations(params.num_perm, params.seed)
    return kernel.kernels()["window_signatures"](data, np.asarray(starts, dtype=np.int64),
                                                 np.asarray(ends, dtype=np.int64), params.shingle_words, a, b)


def band_keys_normalized(data: np.ndarray, starts: np.ndarray, ends: np.ndarray, params: MinHashParams
                         ) -> tuple[np.ndarray, np.ndarray]:
    """``(stored_band_keys_t(signatures), shingle counts)`` of the windows ``sign_normalized``
    signs, without their signatures (an index that keeps none: ``verify="text"``)."""
    a, b = _permutations(params.num_perm, params.seed)
    return kernel.kernels()["window_band_keys"](data, np.asarray(starts, dtype=np.int64),
                                                np.asarray(ends, dtype=np.int64), params.shingle_words, a, b,
                                                params.bands, params.rows)


@lru_cache(maxsize=1)
def _janitor_deleted() -> np.ndarray:
    from tcqa_data.decontam.core.normalize import JANITOR_BYTES_DELETE

    out = np.zeros(128, dtype=np.bool_)
    out[list(JANITOR_BYTES_DELETE)] = True
    return out


def sign(texts: Sequence[str], params: MinHashParams) -> tuple[np.ndarray, np.ndarray]:
    """``(signatures, shingle counts)`` of windows: the numba kernel when enabled (Janitor
    normalization), else the numpy path; both give datasketch's values."""
    if params.normalization == "janitor" and kernel.enabled():
        return _sign_compiled(texts, params)
    flat, counts = _shingle_hashes(texts, params)
    return _minhash_from_hashes(flat, counts, params), counts


def signatures(texts: Sequence[str], params: MinHashParams) -> np.ndarray:
    """MinHash signatures (uint32 ``[len(texts), num_perm]``) of windows; equal to datasketch's
    ``hashvalues`` (affine32, ``hashfunc=shingle_hash``, one ``update`` per shingle). A text with
    no tokens gets datasketch's empty value (all ``0xFFFFFFFF``), which never matches a query."""
    return sign(texts, params)[0]


def datasketch_signatures(texts: Sequence[str], params: MinHashParams) -> np.ndarray:
    """The plain datasketch loop (one ``MinHash`` per window, one ``update`` per shingle): the
    reference ``signatures`` equals, and the baseline the benchmark compares it with."""
    from datasketch import MinHash

    out = np.empty((len(texts), params.num_perm), dtype=_U32)
    for i, text in enumerate(texts):
        m = MinHash(num_perm=params.num_perm, seed=params.seed, hashfunc=shingle_hash)
        for sh in shingles(text, params):
            m.update(sh)
        out[i] = m.hashvalues
    return out


# Map runs keep less than the 32-bit values and 64-bit keys computed here: the low 16 bits of
# each signature value and the top 32 bits of each band key (``params.SIGNATURE_BITS``/
# ``BAND_KEY_BITS``; ``params.index_storage_info`` gives the costs). Run storage format 3: band
# tables of (key, doc) pairs (``band_pairs``; 2 had (key, window) and a window -> doc lookup).
STORAGE_FORMAT = 3


def stored_signatures(sigs: np.ndarray) -> np.ndarray:
    """Signature values as stored (format 2): their low 16 bits."""
    return np.asarray(sigs, dtype=_U32).astype(np.uint16)  # the cast keeps the low 16 bits


def stored_band_keys(keys: np.ndarray) -> np.ndarray:
    """Band keys as stored (format 2): the top 32 bits of the 64-bit mix."""
    return (np.asarray(keys, dtype=_U64) >> _U64(32)).astype(_U32)


def band_keys(sigs: np.ndarray, params: MinHashParams) -> np.ndarray:
    """uint64 ``[len(sigs), bands]``: a 64-bit mix of each band's ``rows`` signature values."""
    sigs = np.asarray(sigs)
    bands, rows = params.bands, params.rows
    assert bands is not None and rows is not None
    keys = np.empty((len(sigs), bands), dtype=_U64)
    for band in range(bands):
        h = np.full(len(sigs), (0x9E3779B97F4A7C15 * (band + 1)) & 0xFFFFFFFFFFFFFFFF, dtype=_U64)
        for j in range(band * rows, (band + 1) * rows):
            h ^= sigs[:, j].astype(_U64)
            h *= _U64(0xFF51AFD7ED558CCD)
            h ^= h >> _U64(32)
        # splitmix64 finalizer: spread the last values into the high bits too
        h ^= h >> _U64(30)
        h *= _U64(0xBF58476D1CE4E5B9)
        h ^= h >> _U64(27)
        h *= _U64(0x94D049BB133111EB)
        h ^= h >> _U64(31)
        keys[:, band] = h
    return keys


def stored_band_keys_t(sigs: np.ndarray, params: MinHashParams) -> np.ndarray:
    """The stored band keys of ``sigs`` by band: uint32 ``[bands, len(sigs)]``."""
    sigs = np.ascontiguousarray(sigs, dtype=_U32)
    if kernel.enabled():
        return kernel.kernels()["band_keys32"](sigs, params.bands, params.rows)
    return np.ascontiguousarray(stored_band_keys(band_keys(sigs, params)).T)


def band_pairs(keys: np.ndarray, docs: np.ndarray) -> np.ndarray:
    """uint64 ``[bands, m]``: per band (row of ``keys``, ``stored_band_keys_t``), ``key << 32 |
    doc`` of every window sorted, ``docs`` being each window's doc, non-decreasing,
    ``0 <= doc < 2**32`` (a map run's band tables: what the merge reads, no window -> doc lookup)."""
    keys = np.ascontiguousarray(keys, dtype=_U32)
    docs = np.ascontiguousarray(docs, dtype=np.int64)
    if len(docs) and not (int(docs[0]) >= 0 and int(docs[-1]) < 1 << 32):
        raise ValueError("band_pairs: docs must lie in [0, 2**32)")
    if kernel.enabled():
        return kernel.kernels()["band_key_pairs"](keys, docs)
    order = np.argsort(keys, axis=1, kind="stable")  # equal keys keep window order: doc order
    return (np.take_along_axis(keys, order, axis=1).astype(_U64) << _U64(32)) | docs[order].astype(_U64)
