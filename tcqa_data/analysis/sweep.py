"""Threshold sweeps over per-doc contamination scores, with one vectorized group bootstrap.

For every score and threshold t, docs with score >= t are flagged, flags are lifted to question
groups with the prep stage's group policy, and the task's metrics are computed on the groups
at/above and below t, plus EPG = metric(all) - metric(below t) (ConTAM's estimated performance
gain). Intervals come from the same group bootstrap as ``evaluate`` (``metrics.bootstrap_weights``
with its seed): every threshold's subsets are column masks over the same resampled groups, so one
matrix product per metric gives every resample of every subset at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from tcqa_data.eval import metrics as M
from tcqa_data.prep.prepared import group_units
from tcqa_data.prep.splits import group_flags

# contamination.parquet columns that are numbers but not contamination evidence
NON_SCORE_COLUMNS = frozenset({
    "doc_id", "group_id", "ngram_n", "query_words", "ngram_total", "ngram_common", "min_doc_freq",
    "max_doc_freq", "minhash_windows"})
# at most this many distinct values are all used as thresholds; more are cut at quantiles
MAX_DISTINCT_THRESHOLDS = 50
QUANTILES = 41  # 0, 2.5, ..., 100 %


@dataclass
class Units:
    """Docs -> bootstrap units (whole question groups, in order of first appearance)."""

    units: np.ndarray  # unit per doc
    n: int
    group_ids: np.ndarray  # per doc
    first_doc: np.ndarray  # per unit: its first doc


def make_units(group_ids: np.ndarray, grouped: tuple[np.ndarray, int] | None = None) -> Units:
    """The units of ``group_ids``; ``grouped``: ``group_units(group_ids)`` where already computed."""
    units, n = grouped if grouped is not None else group_units(group_ids)
    first = np.full(n, -1, dtype=np.int64)
    first[units[::-1]] = np.arange(len(units))[::-1]
    return Units(units, n, group_ids, first)


def score_columns(table: pa.Table) -> dict[str, np.ndarray]:
    """Every per-doc numeric score column (float64; null -> NaN): ints and floats that are not ids
    or bookkeeping (NON_SCORE_COLUMNS), so scores added by later versions are swept too."""
    out = {}
    for name, col in zip(table.column_names, table.columns, strict=True):
        t = col.type
        if name in NON_SCORE_COLUMNS or not (pa.types.is_integer(t) or pa.types.is_floating(t)):
            continue
        values = np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)
        if np.isfinite(values).any():
            out[name] = values
    return out


def choose_thresholds(values: np.ndarray, extra: list[float] | tuple[float, ...] = ()) -> np.ndarray:
    """Every distinct finite value when there are few, quantiles (actual values) otherwise, plus
    ``extra`` (the decontaminate rule's own thresholds)."""
    finite = values[np.isfinite(values)]
    distinct = np.unique(finite)
    if len(distinct) <= MAX_DISTINCT_THRESHOLDS:
        th = distinct
    else:
        th = np.unique(np.quantile(finite, np.linspace(0, 1, QUANTILES), method="lower"))
    return np.unique(np.concatenate([th, np.asarray(extra, dtype=np.float64)]))


def unit_flags(values: np.ndarray, thresholds: np.ndarray, u: Units, policy: str) -> np.ndarray:
    """[T, n_units]: the group is flagged at each threshold (doc score >= t, lifted by ``policy``).
    A null score (no evidence) is below every threshold."""
    v = np.where(np.isfinite(values), values, -np.inf)
    out = np.zeros((len(thresholds), u.n), dtype=bool)
    for k, t in enumerate(thresholds):
        out[k] = group_flags(v >= t, u.group_ids, policy)[u.first_doc]
    return out


def masked_metrics(stats: dict[str, np.ndarray], masks: np.ndarray, weights: np.ndarray,
                   as_evaluate: np.ndarray | None = None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per metric: (point [T], bootstrap [B, T]) of the metric on each unit mask (row of ``masks``).

    Point values sum each statistic over the masked units in unit order (numpy's pairwise sum, as
    the reference implementations' means do), so they agree with ``evaluate`` to the last digit.
    Resample sums of integer statistics (counts) are exact in any order; for fractional ones
    (official/f1) the rows flagged in ``as_evaluate`` are recomputed by ``metrics.summarize``'s own
    product, so the rule's split reproduces evaluate's intervals bit for bit.
    """
    out = {}
    mf = masks.astype(np.float64)
    for name, s in stats.items():
        k = s.shape[1]
        sums = np.empty((len(masks), k))
        for t, m in enumerate(masks):
            for j in range(k):
                sums[t, j] = np.add.reduce(s[m, j]) if m.any() else 0.0
        with np.errstate(invalid="ignore", divide="ignore"):
            point = np.where(masks.any(1), M.metric_from_stats(name, sums), np.nan)
            # [U, T*k]: each statistic restricted to each mask; one product gives every resample
            x = (mf.T[:, :, None] * s[:, None, :]).reshape(s.shape[0], -1)
            boot = M.metric_from_stats(name, (weights @ x).reshape(len(weights), len(masks), k))
        if as_evaluate is not None and not np.array_equal(s, np.round(s)):
            for t in np.flatnonzero(as_evaluate & masks.any(1)):
                boot[:, t] = M.metric_from_stats(name, (weights * masks[t]) @ s)
        boot[:, ~masks.any(1)] = np.nan
        out[name] = (point, boot)
    return out


def value_ci(point: float, boot: np.ndarray, groups: int, level: float = M.LEVEL) -> dict[str, Any]:
    """``metrics.estimate``: the value, and its interval where ``groups`` (the fewest groups it rests
    on) are enough."""
    return M.estimate(float(point), boot, groups, level)


def epg_ci(point: float, boot: np.ndarray, groups: int) -> dict[str, Any]:
    """An EPG's ``value_ci`` and, where it has an interval, its bootstrap p-value for "EPG = 0"
    (``p``; the analysis corrects them across thresholds)."""
    out = value_ci(point, boot, groups)
    if out["ci95"][0] is not None:
        out["p"] = M.bootstrap_p(boot)
    return out


def sweep_scores(scores: dict[str, np.ndarray], rule_thresholds: dict[str, list[float]], u: Units,
                 policy: str, stats: dict[str, np.ndarray], weights: np.ndarray,
                 extra_thresholds: dict[str, list[float]] | None = None,
                 rule_dirty: np.ndarray | None = None) -> dict[str, Any]:
    """The sweep of every score: thresholds, share flagged, and per metric above / below / EPG.

    ``rule_thresholds`` (the decontaminate rule's terms) are marked in the output;
    ``extra_thresholds`` (e.g. Llama 2's 20% / 80% token shares) are only added. ``rule_dirty``
    (per unit) is the prepared dirty split: thresholds that reproduce it get evaluate's exact intervals.
    """
    full_mask = np.ones((1, u.n), dtype=bool)
    full = masked_metrics(stats, full_mask, weights, np.ones(1, dtype=bool))
    plan: list[tuple[str, np.ndarray, np.ndarray]] = []
    for name, values in scores.items():
        extra = list(rule_thresholds.get(name, [])) + list((extra_thresholds or {}).get(name, []))
        th = choose_thresholds(values, extra)
        flags = unit_flags(values, th, u, policy)
        # a threshold that flags every group leaves nothing below it: no EPG (kept if the rule's)
        keep = ~flags.all(1) | np.isin(th, extra)
        plan.append((name, th[keep], flags[keep]))
    all_flags = np.concatenate([f for _, _, f in plan]) if plan else np.zeros((0, u.n), dtype=bool)
    same = (all_flags == rule_dirty).all(1) if rule_dirty is not None else None
    above = masked_metrics(stats, all_flags, weights, same)
    below = masked_metrics(stats, ~all_flags, weights, same)
    docs_per_unit = np.bincount(u.units, minlength=u.n)
    out: dict[str, Any] = {}
    row = 0
    for name, th, flags in plan:
        sl = slice(row, row + len(th))
        row += len(th)
        entry: dict[str, Any] = {
            "thresholds": [float(t) for t in th],
            "rule_thresholds": [float(t) for t in rule_thresholds.get(name, [])],
            "flagged_groups": [int(x) for x in flags.sum(1)],
            "flagged_docs": [int(x) for x in (flags * docs_per_unit).sum(1)],
            "share_flagged_groups": [float(x) for x in flags.mean(1)],
            "share_flagged_docs": [float(x) for x in (flags * docs_per_unit).sum(1) / docs_per_unit.sum()],
            "metrics": {},
        }
        n_above = [int(x) for x in flags.sum(1)]
        n_below = [u.n - x for x in n_above]
        for metric in stats:
            f_point, f_boot = full[metric]
            a_point, a_boot = above[metric]
            b_point, b_boot = below[metric]
            epg_boot = f_boot[:, :1] - b_boot[:, sl]
            entry["metrics"][metric] = {
                "full": value_ci(f_point[0], f_boot[:, 0], u.n),
                "above": [value_ci(a_point[sl][i], a_boot[:, sl][:, i], n_above[i]) for i in range(len(th))],
                "below": [value_ci(b_point[sl][i], b_boot[:, sl][:, i], n_below[i]) for i in range(len(th))],
                # EPG moves with the flagged groups only: it needs enough on both sides of the threshold
                "epg": [epg_ci(f_point[0] - b_point[sl][i], epg_boot[:, i], min(n_above[i], n_below[i]))
                        for i in range(len(th))],
            }
        out[name] = entry
    return out
