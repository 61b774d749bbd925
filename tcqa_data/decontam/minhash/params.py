"""MinHash and LSH parameters (``MinHashParams``) and the band/row choice."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from typing import Any

import numpy as np

from tcqa_data.decontam.core.normalize import check_scheme
from tcqa_data.errors import IndexMismatchError

SCHEME = "affine32"  # datasketch 2.0's default permutation scheme
SHINGLE_HASH = "xxh32-utf8-seed0"
SENTENCE_SPLITTERS = ("punkt-fast", "punkt")
VERIFY_MODES = ("signatures", "text")

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
    # "punkt-fast": Punkt's rules and tables applied by ``windows.fast_sentence_spans`` (about
    # 10x faster, 99.3% of Punkt's boundaries on the wiki sample); "punkt": NLTK's tokenizer.
    sentence_splitter: str = "punkt-fast"
    # How LSH candidates are verified: "signatures" stores a 16-bit signature per window (256 B
    # at 128 permutations); "text" stores none and recomputes the candidate docs' window
    # signatures from the corpus text store (what index-corpus does unless --text-store none).
    verify: str = "signatures"

    def __post_init__(self) -> None:
        if self.num_perm < 1 or self.shingle_words < 1 or self.window_min_words < 1:
            raise ValueError("num_perm, shingle_words and window_min_words must be positive")
        if self.window_max_words < self.window_min_words:
            raise ValueError("window_max_words must be >= window_min_words")
        if not 0.0 < self.threshold < 1.0:
            raise ValueError("threshold must be between 0 and 1")
        check_scheme(self.normalization)
        if self.sentence_splitter not in SENTENCE_SPLITTERS:
            raise ValueError(f"sentence_splitter must be one of {', '.join(SENTENCE_SPLITTERS)}, "
                             f"not {self.sentence_splitter!r}")
        if self.verify not in VERIFY_MODES:
            raise ValueError(f"verify must be one of {', '.join(VERIFY_MODES)}, not {self.verify!r}")
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
        kw = {k: v for k, v in d.items() if k in names}
        kw.setdefault("sentence_splitter", "punkt")  # indexes from before the field used NLTK's Punkt
        kw.setdefault("verify", "signatures")  # storage formats 1 and 2 always stored signatures
        return cls(**kw)


# ---------------------------------------------------------------------------------------------
# Index storage (format 3) and what its lossy parts cost

INDEX_STORAGE_FORMAT = 3
SIGNATURE_BITS = 16  # stored signature values (verify="signatures"): their low 16 bits
BAND_KEY_BITS = 32  # band keys: the top 32 bits of the 64-bit mix


def band_entries_name(band: int) -> str:
    """The file (without ``.npy``) of band ``band``'s packed entries in a format-3 index: a file per
    band, since their count (distinct (key, doc) pairs) is known only once the band is merged."""
    return f"band_entries_{band:03d}"


def index_storage_info(n_windows: int, params: MinHashParams, band_layout: dict[str, int]) -> dict[str, Any]:
    """The storage of a format-3 index of ``n_windows`` windows and its computed error rates.

    * Band tables map a band key's top 32 bits to the *doc* of each window (bit-packed, see
      ``decontam/core/packed.py``). An unrelated window shares a band's 32-bit key by chance with
      probability 2**-32, so a query window meets about ``bands * n_windows / 2**32`` chance
      candidate docs. Candidates are verified (below), so they cost time, not false flags.
    * ``verify="signatures"``: 16-bit signature values; two different 32-bit values agree by chance
      with probability 2**-16, so the similarity estimate of a window with Jaccard J has
      expectation J + (1 - J) * 2**-16 (bias <= 1.5e-5). ``verify="text"``: the candidate docs'
      windows are signed again from the text store, with full 32-bit values: no bias.
    """
    sig_bits = SIGNATURE_BITS if params.verify == "signatures" else 32
    bias = 2.0 ** -SIGNATURE_BITS if params.verify == "signatures" else 0.0
    return {"storage_format": INDEX_STORAGE_FORMAT, "verify": params.verify, "signature_bits": sig_bits,
            "band_key_bits": BAND_KEY_BITS, "signature_value_collision_rate": 2.0 ** -sig_bits,
            "similarity_estimate_max_bias": bias,
            "chance_candidates_per_query": params.bands * n_windows / 2.0 ** BAND_KEY_BITS,
            **band_layout}
