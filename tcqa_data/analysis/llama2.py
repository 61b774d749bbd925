"""Llama 2's contamination analysis (Touvron et al. 2023, appendix A.6).

Per doc, the contaminated-token share at minimum match length L: the fraction of the
decontamination query's words that lie in a matched run of at least L words (the runs are the
evidence's ``match_spans``: maximal runs of query words covered by n-grams found in the corpus,
so L can be any length >= the index's n). Four subsets: Clean (share < 20%), Not clean (>= 20%),
Not dirty (< 80%), Dirty (>= 80%); a question group takes its largest member's share. For each
subset of n groups, Zn = (metric - mu_n) / sigma_n, where mu_n and sigma_n are the mean and
standard deviation of the metric over random subsets of n groups drawn without replacement:

* exact when the metric is a plain mean of per-group values (official/*; lm_eval/acc and
  contains when every group has the same number of docs): mu_n is the population mean and
  sigma_n^2 = var / n * (N - n) / (N - 1) (finite-population correction);
* otherwise (ratios over groups of different sizes, pooled F1) estimated from ``ZN_SAMPLES``
  random subsets drawn with the recorded seed.

Contamination is called only where |Zn| > 2.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from tcqa_data.eval import metrics as M

CLEAN_BELOW, DIRTY_FROM = 0.2, 0.8
SUBSETS = ("clean", "not_clean", "not_dirty", "dirty")
SUBSET_HELP = {"clean": "share < 20%", "not_clean": "share >= 20%", "not_dirty": "share < 80%",
               "dirty": "share >= 80%"}
# Llama 2 reports L from 10 to 50 words
L_GRID = (10, 20, 30, 40, 50)
ZN_SAMPLES = 2000
ZN_SEED = 20230718
Z_CALL = 2.0


def lengths_supported(n: int, longest: np.ndarray) -> list[int]:
    """L values the evidence supports: runs are built from n-grams, so L >= n; L beyond the
    longest match anywhere would only repeat an all-clean split."""
    top = int(np.max(longest)) if len(longest) else 0
    return sorted({n} | {L for L in L_GRID if n <= L <= max(top, n)})


def token_shares(table: pa.Table, lengths: list[int], scheme: str) -> dict[int, np.ndarray]:
    """Per L: per doc, the share of query words inside matched runs of >= L words."""
    from tcqa_data.decontam.core.normalize import token_char_spans

    queries = table.column("query").to_pylist()
    spans = table.column("match_spans").to_pylist()
    words = np.asarray(table.column("query_words").to_numpy(zero_copy_only=False), dtype=np.float64)
    run_lengths: list[list[int]] = []
    cache: dict[tuple, list[int]] = {}
    for q, sp in zip(queries, spans, strict=True):
        if not sp:
            run_lengths.append([])
            continue
        key = (q, tuple(tuple(s) for s in sp))
        if key not in cache:
            starts = np.asarray([a for a, _ in token_char_spans(q, scheme)], dtype=np.int64)
            # a run [a, b) in characters holds the tokens that start inside it
            cache[key] = [int(np.searchsorted(starts, b) - np.searchsorted(starts, a)) for a, b in sp]
        run_lengths.append(cache[key])
    out = {}
    for L in lengths:
        covered = np.asarray([sum(r for r in runs if r >= L) for runs in run_lengths], dtype=np.float64)
        out[L] = np.where(words > 0, covered / np.where(words > 0, words, 1), 0.0)
    return out


def subset_masks(unit_share: np.ndarray) -> dict[str, np.ndarray]:
    return {"clean": unit_share < CLEAN_BELOW, "not_clean": unit_share >= CLEAN_BELOW,
            "not_dirty": unit_share < DIRTY_FROM, "dirty": unit_share >= DIRTY_FROM}


class ZnReference:
    """mu_n and sigma_n of a metric over random n-group subsets (exact or sampled, see module doc)."""

    def __init__(self, n_units: int, samples: int = ZN_SAMPLES, seed: int = ZN_SEED) -> None:
        self.n_units, self.samples, self.seed = n_units, samples, seed
        self._rank: np.ndarray | None = None

    def rank(self) -> np.ndarray:
        # one set of random permutations serves every n: the subset is the first n of each
        if self._rank is None:
            keys = np.random.default_rng(self.seed).random((self.samples, self.n_units))
            self._rank = keys.argsort(1).argsort(1)
        return self._rank

    @staticmethod
    def exact_values(metric: str, stats: np.ndarray) -> np.ndarray | None:
        """Per-unit values whose plain mean is the metric, when it is one; else None."""
        if metric == M.LM_F1 or stats.shape[1] != 2 or len(stats) == 0:
            return None
        count = stats[:, 1]
        if count[0] <= 0 or not np.all(count == count[0]):
            return None
        return stats[:, 0] / count[0]

    def mu_sigma(self, metric: str, stats: np.ndarray, n: int) -> tuple[float, float, str]:
        N = self.n_units
        x = self.exact_values(metric, stats)
        if x is not None:
            fpc = (N - n) / (N - 1) if N > 1 else 0.0
            return float(x.mean()), float(np.sqrt(x.var() / n * fpc)), "exact"
        sel = (self.rank() < n).astype(np.float64)
        values = M.metric_from_stats(metric, sel @ stats)
        values = values[np.isfinite(values)]
        sd = float(values.std(ddof=1)) if len(values) > 1 else float("nan")
        return float(values.mean()), sd, f"sampled ({self.samples} subsets, seed {self.seed})"


def zn(value: float | None, mu: float, sigma: float) -> float | None:
    if value is None or not np.isfinite(sigma) or sigma <= 0:
        return None
    return float((value - mu) / sigma)


def llama2_subsets(shares: dict[int, np.ndarray], unit_share_of: Any, stats: dict[str, np.ndarray],
                   weights: np.ndarray, ref: ZnReference) -> list[dict[str, Any]]:
    """Per L and subset: groups, docs, and per metric value, 95% interval, mu_n, sigma_n, Zn."""
    from tcqa_data.analysis.sweep import masked_metrics, value_ci

    out = []
    for L, share in shares.items():
        unit_share, docs_per_unit = unit_share_of(share)
        masks = subset_masks(unit_share)
        arr = np.stack([masks[s] for s in SUBSETS])
        res = masked_metrics(stats, arr, weights)
        for i, name in enumerate(SUBSETS):
            n = int(arr[i].sum())
            entry: dict[str, Any] = {"L": L, "subset": name, "rule": SUBSET_HELP[name], "groups": n,
                                     "docs": int(docs_per_unit[arr[i]].sum()), "metrics": {}}
            for metric, (point, boot) in res.items():
                m = value_ci(point[i], boot[:, i], n)
                if n:
                    mu, sigma, how = ref.mu_sigma(metric, stats[metric], n)
                    m.update({"mu_n": mu, "sigma_n": sigma if np.isfinite(sigma) else None,
                              "zn": zn(m["value"], mu, sigma), "zn_method": how})
                else:
                    m.update({"mu_n": None, "sigma_n": None, "zn": None, "zn_method": None})
                entry["metrics"][metric] = m
            out.append(entry)
    return out
