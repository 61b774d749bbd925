"""MinHash near-duplicate index over corpus *windows*.

Why windows. A benchmark item is a sentence or a paragraph. The Jaccard similarity of its
shingle set to a whole corpus document is at most |item| / |document|, which is tiny for a long
document even when the item was copied into it verbatim (a 20-word sentence inside a 5,000-word
article scores about 0.004). So corpus documents are cut into windows comparable in size to an
item, and an item (cut the same way by the caller) is compared with windows.

Windows. ``split_windows`` splits a text into paragraphs at blank lines, each paragraph into
sentences with NLTK Punkt (``punkt_tab``), and cuts any sentence longer than
``window_max_words`` into equal pieces. A window starts at EVERY sentence and takes following
sentences until it has at least ``window_min_words`` whitespace-separated words; so windows
overlap, and a copied item that starts at a sentence boundary meets a window that starts where
it starts. Near the end of the text, windows that cannot reach ``window_min_words`` are dropped
(the window before holds them), unless the whole text is shorter: then it is one window. So
the window count is at most the sentence count, whatever ``window_min_words`` is.

Default ``window_min_words=10``: MC-TACO sentences are 10-32 words (median 17). A verbatim copy
of an item of L >= W words has J = 1 with the window starting where it starts; a shorter one
only about L / (L + next sentence). The 28 MC-TACO sentences that occur verbatim in the wiki
sample all have exact J = 1 with a window at W = 10; at W = 15, 26 of 28 reach 0.5, at W = 20
only 20 of 28. A smaller W does not add windows (one per sentence either way); it makes them
shorter. Limitation: an item that Punkt joins to corpus text around it (e.g. a sentence after
"he said:" on the same line) lies inside a larger window and scores about |item| / |window|.

Signatures. Tokens are ``normalize.tokenize(text, params.normalization)``; shingles are
``shingle_words`` consecutive tokens joined by one space (a window with fewer tokens than that is
ONE shingle of all its tokens, so short items still get a signature; a window with no tokens has
no signature and is never indexed). Each shingle is hashed with ``shingle_hash`` (xxh32 of its
UTF-8, seed 0), and the signature is datasketch 2.0's ``"affine32"`` MinHash:
``min over shingles of (a_k * fmix32(h) + b_k) mod 2**32`` with ``a, b`` drawn by
``numpy.random.RandomState(seed)`` exactly as ``datasketch.MinHash(num_perm, seed,
hashfunc=shingle_hash)`` draws them. ``signatures`` computes it for many windows at once (all
shingles x permutations, then ``np.minimum.reduceat`` per window); tests check the values equal
datasketch's ``hashvalues`` updated one shingle at a time. ``shingle_words=2``: changing 10% of
a window's words keeps about 81% of its 2-word shingles (J about 0.68) but only 73% of 3-word
(J about 0.57) and 59% of 5-word ones (J about 0.42). With the 0.5 threshold, the LSH finds 93%
of 10%-edited sentences planted in wiki articles with 2-word shingles, 64% with 3-word ones.
Function-word pairs ("of the") do not make unrelated windows match: querying the 478 MC-TACO
sentences that are not in the wiki sample against all of it, the highest unrelated score is
0.19 ("at the age of"), and every score >= 0.3 is a true near-copy ("Durer" for "Dürer", "In a
1945 interview" for "In an interview in 1945").

LSH. ``bands`` x ``rows`` is chosen like datasketch's ``MinHashLSH`` (minimize the equally
weighted false positive and false negative areas of the S-curve around ``threshold``; 25 bands
x 5 rows for 0.5 and 128 permutations) and recorded. A band key is a 64-bit mix of the band's
``rows`` values.

Files (build is map/reduce over paths: pure functions, deterministic, no pickle):

``write_minhash_shard(docs, work_dir, shard_id, params)`` (map) takes ``(doc_ordinal, text)``
pairs with strictly increasing ordinals and writes ``work_dir/minhash-<shard_id>/``: runs
``partNNNNN.{signatures,window_doc,window_shingles,band_keys,band_windows}.npy`` (at most
``PART_WINDOWS`` windows each, cut between documents; band arrays are ``[bands, m]``, each row
sorted by (key, part-local window)) and ``shard.json`` last (a shard without it is incomplete).

``merge_minhash_shards(shard_dirs, out_dir, params, base_dir=None, doc_offsets=None)`` (reduce)
writes ``out_dir`` (normally ``INDEX_DIR/minhash``)::

    signatures.npy       uint32 [n_windows, num_perm]
    window_doc.npy       int64  [n_windows]   doc ordinal of each window
    window_shingles.npy  uint32 [n_windows]   number of shingles (with repeats)
    band_keys.npy        uint64 [bands, n_windows]   each row sorted
    band_windows.npy     uint32 [bands, n_windows]   window id of each key (ties: ascending id);
                                                   int64 from 2**32 windows on
    params.json          written last: params, n_windows, n_docs, format_version

Window ids are ordered by doc ordinal, then window number, so they do not depend on how docs
were sharded. ``base_dir`` (an existing ``minhash/`` folder) is merged as one more run, so
appending shards of new, higher-ordinal docs gives exactly the files of a full rebuild. Memory
is bounded: runs are read in blocks and outputs are written sequentially.

Query: ``MinHashIndex.open(INDEX_DIR)`` memory-maps the files; ``query(sigs)`` looks up each
band key with ``searchsorted``, then verifies every candidate by signature agreement (the
Jaccard estimate) and returns the best window per query.
"""

from __future__ import annotations

import math
import os
import re
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from tcqa_data import FORMAT_VERSION
from tcqa_data.decontam.normalize import check_scheme, tokenize
from tcqa_data.errors import IndexMismatchError, TcqaError
from tcqa_data.io_utils import NpyRowReader, atomic_path, read_json, write_json_atomic, write_npy_atomic

SCHEME = "affine32"  # datasketch 2.0's default permutation scheme
SHINGLE_HASH = "xxh32-utf8-seed0"
EMPTY_HASH = np.uint32(0xFFFFFFFF)  # datasketch's initial value: a window without shingles

PART_WINDOWS = 65536  # windows per map-side run (32 MiB of signatures at 128 permutations)
_BATCH_WINDOWS = 4096  # windows per signatures() call on the build side
_CHUNK_SHINGLES = 8192  # shingles x permutations block (4 MiB at 128): stays in cache
_MERGE_BLOCK = 1 << 16  # rows copied at a time when concatenating runs
_MERGE_ENTRIES = 1 << 21  # (key, window) entries held over all runs in the band merge
_MIN_BLOCK = 4096

_U32 = np.uint32
_U64 = np.uint64


# ---------------------------------------------------------------------------------------------
# Parameters


def _lsh_error(threshold: float, b: int, r: int, grid: int = 2049) -> tuple[float, float]:
    """False positive area below ``threshold`` and false negative area above it (Simpson)."""

    def simpson(f, lo: float, hi: float) -> float:
        if hi <= lo:
            return 0.0
        x = np.linspace(lo, hi, grid)
        y = f(x)
        h = (hi - lo) / (grid - 1)
        return float(h / 3 * (y[0] + y[-1] + 4 * y[1:-1:2].sum() + 2 * y[2:-1:2].sum()))

    fp = simpson(lambda s: 1 - (1 - s ** r) ** b, 0.0, threshold)
    fn = simpson(lambda s: (1 - s ** r) ** b, threshold, 1.0)
    return fp, fn


@lru_cache(maxsize=64)
def optimal_bands_rows(threshold: float, num_perm: int, false_positive_weight: float = 0.5,
                       false_negative_weight: float = 0.5) -> tuple[int, int]:
    """(bands, rows) minimizing the weighted false positive + false negative areas, searched the
    way datasketch's ``MinHashLSH`` does (all b, r with b * r <= num_perm; first minimum wins)."""
    best, opt = math.inf, (1, 1)
    for b in range(1, num_perm + 1):
        for r in range(1, num_perm // b + 1):
            fp, fn = _lsh_error(threshold, b, r)
            err = fp * false_positive_weight + fn * false_negative_weight
            if err < best:
                best, opt = err, (b, r)
    return opt


@dataclass(frozen=True)
class MinHashParams:
    """MinHash and LSH settings; ``bands``/``rows`` are derived from ``threshold`` when None."""

    num_perm: int = 128
    seed: int = 1
    shingle_words: int = 2
    window_min_words: int = 10
    window_max_words: int = 64
    threshold: float = 0.5
    bands: int | None = None
    rows: int | None = None
    normalization: str = "janitor"

    def __post_init__(self) -> None:
        if self.num_perm < 1 or self.shingle_words < 1 or self.window_min_words < 1:
            raise ValueError("num_perm, shingle_words and window_min_words must be positive")
        if self.window_max_words < self.window_min_words:
            raise ValueError("window_max_words must be >= window_min_words")
        if not 0.0 < self.threshold < 1.0:
            raise ValueError("threshold must be between 0 and 1")
        check_scheme(self.normalization)
        if self.bands is None and self.rows is None:
            b, r = optimal_bands_rows(float(self.threshold), self.num_perm)
            object.__setattr__(self, "bands", b)
            object.__setattr__(self, "rows", r)
        if self.bands is None or self.rows is None or self.bands < 1 or self.rows < 1:
            raise ValueError("give both bands and rows (positive), or neither")
        if self.bands * self.rows > self.num_perm:
            raise ValueError(f"bands * rows = {self.bands * self.rows} exceeds num_perm = {self.num_perm}")

    def to_dict(self) -> dict[str, Any]:
        """For the manifest: every field plus the fixed scheme and shingle hash names."""
        d = asdict(self)
        d["scheme"] = SCHEME
        d["shingle_hash"] = SHINGLE_HASH
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MinHashParams:
        if d.get("scheme", SCHEME) != SCHEME or d.get("shingle_hash", SHINGLE_HASH) != SHINGLE_HASH:
            raise IndexMismatchError(
                f"MinHash index uses scheme {d.get('scheme')!r} / hash {d.get('shingle_hash')!r}; "
                f"this version computes {SCHEME!r} / {SHINGLE_HASH!r}: rebuild the index")
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


# ---------------------------------------------------------------------------------------------
# Windows


@lru_cache(maxsize=4)
def _punkt(language: str = "english"):
    from nltk.tokenize.punkt import PunktTokenizer

    try:
        return PunktTokenizer(language)
    except LookupError:
        raise TcqaError(
            "NLTK Punkt sentence tables (punkt_tab) were not found. Set NLTK_DATA to a folder that "
            "holds tokenizers/punkt_tab (e.g. NLTK_DATA=../shared/data/nltk_data), or run "
            "`python -m nltk.downloader punkt_tab`."
        ) from None


_PARAGRAPH_BREAK = re.compile(r"\n[^\S\n]*\n\s*")
_WORD = re.compile(r"\S+")


def _units(text: str, max_words: int) -> list[tuple[int, int, int]]:
    """(start, end, words) of each sentence, or piece of an over-long sentence, in ``text``."""
    punkt = _punkt()
    units = []
    para_start = 0
    breaks = [(m.start(), m.end()) for m in _PARAGRAPH_BREAK.finditer(text)] + [(len(text), len(text))]
    for brk_start, brk_end in breaks:
        para = text[para_start:brk_start]
        if para.strip():
            for s, e in punkt.span_tokenize(para):
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


def split_windows(text: str, params: MinHashParams) -> list[str]:
    """Overlapping windows of ``text``: one per sentence, extended by the following sentences
    until it has ``params.window_min_words`` words (see the module docstring)."""
    units = _units(text, params.window_max_words)
    windows = []
    for i in range(len(units)):
        words, j = 0, i
        while j < len(units) and words < params.window_min_words:
            words += units[j][2]
            j += 1
        if words < params.window_min_words and i > 0:
            # Ran out of text: the previous window already holds this tail, and more.
            break
        windows.append(text[units[i][0]:units[j - 1][1]])
    return windows


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


def signatures(texts: Sequence[str], params: MinHashParams) -> np.ndarray:
    """MinHash signatures (uint32 ``[len(texts), num_perm]``) of windows; equal to datasketch's
    ``hashvalues`` (affine32, ``hashfunc=shingle_hash``, one ``update`` per shingle). A text with
    no tokens gets datasketch's empty value (all ``0xFFFFFFFF``), which never matches a query."""
    flat, counts = _shingle_hashes(texts, params)
    return _minhash_from_hashes(flat, counts, params)


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


# ---------------------------------------------------------------------------------------------
# .npy streaming helpers (bounded memory: no whole-array loads, no memmap of growing outputs)


class _NpyWriter:
    """Writes a .npy of known shape sequentially (inside an atomic_path)."""

    def __init__(self, fh, dtype, shape: tuple[int, ...]) -> None:
        self.fh = fh
        self.dtype = np.dtype(dtype)
        header = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False,
                  "shape": shape}
        np.lib.format.write_array_header_1_0(fh, header) if _header_fits_v1(shape) else \
            np.lib.format.write_array_header_2_0(fh, header)
        self.left = int(np.prod(shape))

    def write(self, arr: np.ndarray) -> None:
        arr = np.ascontiguousarray(arr, dtype=self.dtype)
        self.left -= arr.size
        self.fh.write(arr.tobytes())

    def close(self) -> None:
        if self.left != 0:
            raise RuntimeError(f"npy writer: {self.left} elements missing")


def _header_fits_v1(shape: tuple[int, ...]) -> bool:
    return len(repr(shape)) < 60000


# ---------------------------------------------------------------------------------------------
# Build: map


_FILES = ("signatures", "window_doc", "window_shingles", "band_keys", "band_windows")


def _shard_name(shard_id: int | str) -> str:
    return f"minhash-{shard_id:06d}" if isinstance(shard_id, int) else f"minhash-{shard_id}"


def _write_run(prefix: Path, sigs: np.ndarray, docs: np.ndarray, nshingles: np.ndarray,
               params: MinHashParams) -> None:
    """One sorted run: signatures plus, per band, (key, window) sorted by key then window."""
    keys = band_keys(sigs, params)  # [m, bands]
    order = np.argsort(keys, axis=0, kind="stable")  # stable: ties keep ascending window order
    sorted_keys = np.take_along_axis(keys, order, axis=0).T.copy()
    write_npy_atomic(Path(f"{prefix}.signatures.npy"), sigs)
    write_npy_atomic(Path(f"{prefix}.window_doc.npy"), docs.astype(np.int64))
    write_npy_atomic(Path(f"{prefix}.window_shingles.npy"), nshingles.astype(_U32))
    write_npy_atomic(Path(f"{prefix}.band_keys.npy"), sorted_keys)
    write_npy_atomic(Path(f"{prefix}.band_windows.npy"), order.T.astype(_window_id_dtype(len(sigs))))


def write_minhash_shard(docs: Iterable[tuple[int, str]], work_dir: str | os.PathLike, shard_id: int | str,
                        params: MinHashParams) -> Path:
    """Map step: window, sign and band ``(doc_ordinal, text)`` pairs into sorted runs.

    Ordinals must be strictly increasing. Writes ``work_dir/minhash-<shard_id>/`` (replacing a
    stale one from an interrupted run) and returns its path; ``shard.json`` is written last.
    """
    out = Path(work_dir) / _shard_name(shard_id)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    parts: list[dict[str, int]] = []
    buf_sigs: list[np.ndarray] = []
    buf_docs: list[np.ndarray] = []
    buf_sh: list[np.ndarray] = []
    pend_texts: list[str] = []
    pend_docs: list[int] = []
    n_docs = n_windows = n_empty = 0
    last = None

    def sign_pending() -> None:
        nonlocal n_empty
        if not pend_texts:
            return
        flat, counts = _shingle_hashes(pend_texts, params)
        sigs = _minhash_from_hashes(flat, counts, params)
        keep = counts > 0  # no tokens, no signature: such a window could only match by accident
        n_empty += int((~keep).sum())
        buf_sigs.append(sigs[keep])
        buf_docs.append(np.asarray(pend_docs, dtype=np.int64)[keep])
        buf_sh.append(counts[keep].astype(_U32))
        pend_texts.clear()
        pend_docs.clear()

    def flush_part() -> None:
        nonlocal n_windows
        sign_pending()
        sigs = np.concatenate(buf_sigs) if buf_sigs else np.zeros((0, params.num_perm), _U32)
        if len(sigs):
            wdocs = np.concatenate(buf_docs)
            name = f"part{len(parts):05d}"
            _write_run(out / name, sigs, wdocs, np.concatenate(buf_sh), params)
            parts.append({"name": name, "n_windows": len(sigs), "first_doc": int(wdocs[0]),
                          "last_doc": int(wdocs[-1])})
            n_windows += len(sigs)
        buf_sigs.clear()
        buf_docs.clear()
        buf_sh.clear()

    buffered = 0
    for ordinal, text in docs:
        ordinal = int(ordinal)
        if last is not None and ordinal <= last:
            raise ValueError(f"doc ordinals must be strictly increasing: {ordinal} after {last}")
        last = ordinal
        n_docs += 1
        wins = split_windows(text, params)
        pend_texts.extend(wins)
        pend_docs.extend([ordinal] * len(wins))
        buffered += len(wins)
        if len(pend_texts) >= _BATCH_WINDOWS:
            sign_pending()
        # Parts end between documents, so one doc's windows are in one run (ordinal ranges of
        # runs never overlap, which the merge relies on).
        if buffered >= PART_WINDOWS:
            flush_part()
            buffered = 0
    flush_part()
    write_json_atomic(out / "shard.json", {
        "kind": "tcqa-minhash-shard", "format_version": FORMAT_VERSION, "params": params.to_dict(),
        "n_docs": n_docs, "n_windows": n_windows, "n_windows_without_tokens": n_empty, "parts": parts,
    })
    return out


# ---------------------------------------------------------------------------------------------
# Build: reduce


@dataclass
class _Run:
    prefix: str  # file name prefix: ".../partNNNNN." or ".../" for a final index folder
    n: int
    first_doc: int
    last_doc: int
    offset: int = 0  # window id of the run's first window in the output
    doc_shift: int = 0  # added to the run's doc ordinals (maps that numbered docs from 0)

    def reader(self, name: str) -> NpyRowReader:
        return NpyRowReader(Path(self.prefix + name + ".npy"))


def _check_params(found: dict[str, Any], params: MinHashParams, where: Path) -> None:
    if MinHashParams.from_dict(found) != params:
        raise IndexMismatchError(f"{where} was built with MinHash parameters {found}, not {params.to_dict()}")


def _merge_band(runs: list[_Run], band: int, keys_out: _NpyWriter, wins_out: _NpyWriter) -> None:
    """K-way merge of one band's sorted (key, window) runs, a block per run at a time.

    Window ids are unique, so (key, window) pairs are totally ordered: every pair <= the smallest
    "last pair of a block" over runs that have more data is final and can be written.
    """
    block = max(_MIN_BLOCK, _MERGE_ENTRIES // max(1, len(runs)))  # bounded memory whatever the run count
    kr = [r.reader("band_keys") for r in runs]
    wr = [r.reader("band_windows") for r in runs]
    pos = [0] * len(runs)
    cur_k: list[np.ndarray] = [np.zeros(0, _U64) for _ in runs]
    cur_w: list[np.ndarray] = [np.zeros(0, np.int64) for _ in runs]
    while True:
        for i, r in enumerate(runs):
            if len(cur_k[i]) == 0 and pos[i] < r.n:
                stop = min(pos[i] + block, r.n)
                cur_k[i] = kr[i].read_row_span(band, pos[i], stop)
                cur_w[i] = wr[i].read_row_span(band, pos[i], stop).astype(np.int64) + r.offset
                pos[i] = stop
        live = [i for i in range(len(runs)) if len(cur_k[i])]
        if not live:
            return
        more = [i for i in live if pos[i] < runs[i].n]
        if more:
            bk, bw = min((int(cur_k[i][-1]), int(cur_w[i][-1])) for i in more)
        ks, ws = [], []
        for i in live:
            k, w = cur_k[i], cur_w[i]
            if more:
                take = int(np.searchsorted(k, _U64(bk), side="left"))
                eq = int(np.searchsorted(k, _U64(bk), side="right"))
                take += int(np.searchsorted(w[take:eq], bw, side="right"))
            else:
                take = len(k)
            ks.append(k[:take])
            ws.append(w[:take])
            cur_k[i], cur_w[i] = k[take:], w[take:]
        k = np.concatenate(ks)
        w = np.concatenate(ws)
        order = np.lexsort((w, k))
        keys_out.write(k[order])
        wins_out.write(w[order])


def _window_id_dtype(n_windows: int) -> np.dtype:
    """uint32 window ids while they fit (halves the band tables), int64 beyond 2**32 windows."""
    return np.dtype(_U32) if n_windows < 2**32 else np.dtype(np.int64)


def merge_minhash_shards(shard_dirs: Sequence[str | os.PathLike], out_dir: str | os.PathLike,
                         params: MinHashParams, base_dir: str | os.PathLike | None = None,
                         doc_offsets: Sequence[int] | None = None) -> dict[str, Any]:
    """Reduce step: merge shard runs (and optionally an existing index ``base_dir``) into the
    final ``out_dir`` files. Returns the summary also written to ``out_dir/params.json``.

    ``doc_offsets[i]`` (optional) is added to the doc ordinals of ``shard_dirs[i]``, for map steps
    that numbered their docs from 0 before global ordinals were known. ``out_dir`` may be
    ``base_dir`` (each file is replaced atomically after it is written), but a crash part-way
    then leaves a folder without ``params.json`` that must be rebuilt; merging into a new folder
    and swapping it in is safer."""
    if doc_offsets is not None and len(doc_offsets) != len(shard_dirs):
        raise ValueError("doc_offsets must have one entry per shard dir")
    runs: list[_Run] = []
    n_empty = 0
    if base_dir is not None:
        base = Path(base_dir)
        meta = read_json(base / "params.json")
        _check_params(meta["params"], params, base)
        if meta["n_windows"]:
            docs = NpyRowReader(base / "window_doc.npy")
            runs.append(_Run(str(base) + os.sep, meta["n_windows"], int(docs.read(0, 1)[0]),
                             int(docs.read(meta["n_windows"] - 1, meta["n_windows"])[0])))
        n_empty += meta.get("n_windows_without_tokens", 0)
    n_docs = 0 if base_dir is None else meta["n_docs"]
    for si, d in enumerate(shard_dirs):
        d = Path(d)
        shift = int(doc_offsets[si]) if doc_offsets is not None else 0
        if not (d / "shard.json").exists():
            raise TcqaError(f"MinHash shard {d} is incomplete (no shard.json): rerun its map step")
        meta_s = read_json(d / "shard.json")
        _check_params(meta_s["params"], params, d)
        n_docs += meta_s["n_docs"]
        n_empty += meta_s["n_windows_without_tokens"]
        for p in meta_s["parts"]:
            runs.append(_Run(str(d / p["name"]) + ".", p["n_windows"], p["first_doc"] + shift,
                             p["last_doc"] + shift, doc_shift=shift))
    runs.sort(key=lambda r: r.first_doc)
    total = 0
    for k, r in enumerate(runs):
        prev = runs[k - 1] if k else None
        if prev is not None and r.first_doc <= prev.last_doc:
            raise ValueError(f"doc ordinals of MinHash runs overlap ({prev.prefix} and {r.prefix}): "
                             f"each doc must be in exactly one shard")
        r.offset = total
        total += r.n
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if (out / "params.json").exists():
        (out / "params.json").unlink()  # the folder is incomplete until params.json is back
    bands = params.bands
    assert bands is not None
    for name, dtype, shape in (("signatures", _U32, (total, params.num_perm)),
                               ("window_doc", np.int64, (total,)),
                               ("window_shingles", _U32, (total,))):
        with atomic_path(out / f"{name}.npy") as tmp, open(tmp, "wb") as fh:
            w = _NpyWriter(fh, dtype, shape)
            for r in runs:
                rd = r.reader(name)
                for s in range(0, r.n, _MERGE_BLOCK):
                    block = rd.read(s, min(s + _MERGE_BLOCK, r.n))
                    w.write(block + np.int64(r.doc_shift) if name == "window_doc" else block)
            w.close()
    with atomic_path(out / "band_keys.npy") as tk, atomic_path(out / "band_windows.npy") as tw, \
            open(tk, "wb") as fk, open(tw, "wb") as fw:
        wk = _NpyWriter(fk, _U64, (bands, total))
        ww = _NpyWriter(fw, _window_id_dtype(total), (bands, total))
        for band in range(bands):
            _merge_band(runs, band, wk, ww)
        wk.close()
        ww.close()
    summary = {"kind": "tcqa-minhash-index", "format_version": FORMAT_VERSION, "params": params.to_dict(),
               "n_windows": total, "n_docs": n_docs, "n_windows_without_tokens": n_empty}
    write_json_atomic(out / "params.json", summary)  # last: marks the folder complete
    return summary


# ---------------------------------------------------------------------------------------------
# Query


class MinHashIndex:
    """Memory-mapped MinHash index: ``open``, ``query``, ``window_docs``."""

    def __init__(self, folder: Path, meta: dict[str, Any]) -> None:
        self.folder = folder
        self.meta = meta
        self.params = MinHashParams.from_dict(meta["params"])
        self.n_windows = int(meta["n_windows"])

        def load(name: str) -> np.ndarray:
            try:
                return np.load(folder / f"{name}.npy", mmap_mode="r", allow_pickle=False)
            except (OSError, ValueError) as e:
                raise TcqaError(f"MinHash index {folder} is damaged ({name}.npy: {e}); rebuild it") from None

        self.signatures = load("signatures")
        self.window_doc = load("window_doc")
        self.window_shingles = load("window_shingles")
        self.band_keys = load("band_keys")
        self.band_windows = load("band_windows")
        p = self.params
        expected = {"signatures": (self.n_windows, p.num_perm), "window_doc": (self.n_windows,),
                    "window_shingles": (self.n_windows,), "band_keys": (p.bands, self.n_windows),
                    "band_windows": (p.bands, self.n_windows)}
        for name, shape in expected.items():
            if getattr(self, name).shape != shape:
                raise TcqaError(f"MinHash index {folder} is damaged: {name}.npy has shape "
                                f"{getattr(self, name).shape}, expected {shape}; rebuild it")

    @classmethod
    def open(cls, index_dir: str | os.PathLike) -> MinHashIndex:
        """Open ``INDEX_DIR`` (or its ``minhash/`` folder). TcqaError if missing or incomplete."""
        root = Path(index_dir)
        for folder in (root / "minhash", root):
            if (folder / "params.json").exists():
                meta = read_json(folder / "params.json")
                if meta.get("kind") == "tcqa-minhash-index":
                    return cls(folder, meta)
        raise TcqaError(f"no complete MinHash index in {root} (missing minhash/params.json); "
                        f"build one with `tcqa-data index-corpus`")

    def query(self, sigs: np.ndarray, max_candidates_per_band: int = 256) -> tuple[np.ndarray, np.ndarray]:
        """Best verified match per query signature: ``(best_sim float64[q], best_window int64[q])``.

        Candidates are windows sharing at least one band key; each is verified by the fraction of
        equal signature values (the Jaccard estimate). The best is returned even when below the
        threshold (ties: lowest window id); -1 and 0.0 when there is no candidate or the query
        has no shingles. At most ``max_candidates_per_band`` windows are taken per band key (the
        lowest ids): a key shared by more windows marks boilerplate repeated across the corpus.
        """
        sigs = np.asarray(sigs)
        if sigs.ndim == 1:
            sigs = sigs[None, :]
        p = self.params
        if sigs.ndim != 2 or sigs.shape[1] != p.num_perm:
            raise ValueError(f"signatures must have shape [q, {p.num_perm}], got {sigs.shape}")
        if sigs.dtype != _U32:
            if sigs.size and (sigs.min() < 0 or sigs.max() > 0xFFFFFFFF):
                raise ValueError("signature values must fit in uint32 (affine32 scheme)")
            sigs = sigs.astype(_U32)
        q = len(sigs)
        best_sim = np.zeros(q, dtype=np.float64)
        best_win = np.full(q, -1, dtype=np.int64)
        if q == 0 or self.n_windows == 0:
            return best_sim, best_win
        has_shingles = ~(sigs == EMPTY_HASH).all(axis=1)
        keys = band_keys(sigs, p)
        for c0 in range(0, q, 1024):  # bounded candidate lists even when keys are very common
            c1 = min(c0 + 1024, q)
            pair_q, pair_w = [], []
            for band in range(p.bands):  # type: ignore[arg-type]
                row = self.band_keys[band]
                lo = np.searchsorted(row, keys[c0:c1, band], side="left")
                hi = np.searchsorted(row, keys[c0:c1, band], side="right")
                cnt = np.minimum(hi - lo, max_candidates_per_band)
                cnt[~has_shingles[c0:c1]] = 0
                total = int(cnt.sum())
                if total == 0:
                    continue
                first = np.cumsum(cnt) - cnt
                pos = np.repeat(lo - first, cnt) + np.arange(total)
                pair_q.append(np.repeat(np.arange(c0, c1), cnt))
                pair_w.append(np.asarray(self.band_windows[band][pos], dtype=np.int64))
            if not pair_q:
                continue
            code = np.unique(np.concatenate(pair_q) * self.n_windows + np.concatenate(pair_w))
            qs, ws = np.divmod(code, self.n_windows)
            sims = np.empty(len(code), dtype=np.float64)
            for v0 in range(0, len(code), 8192):
                v1 = min(v0 + 8192, len(code))
                cand = self.signatures[ws[v0:v1]]
                sims[v0:v1] = (cand == sigs[qs[v0:v1]]).sum(axis=1) / p.num_perm
            order = np.lexsort((ws, -sims, qs))  # per query: highest similarity, then lowest id
            qs, ws, sims = qs[order], ws[order], sims[order]
            first = np.r_[True, qs[1:] != qs[:-1]]
            best_sim[qs[first]] = sims[first]
            best_win[qs[first]] = ws[first]
        return best_sim, best_win

    def window_docs(self, window_ids: np.ndarray | Sequence[int]) -> np.ndarray:
        """Doc ordinal of each window id (-1 stays -1)."""
        ids = np.asarray(window_ids, dtype=np.int64)
        out = np.full(ids.shape, -1, dtype=np.int64)
        ok = ids >= 0
        if ok.any():
            if ids[ok].max() >= self.n_windows:
                raise IndexError(f"window id out of range (index has {self.n_windows} windows)")
            out[ok] = self.window_doc[ids[ok]]
        return out
