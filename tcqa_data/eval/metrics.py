"""Metrics as pure functions, plus bootstrap intervals.

Two MC-TACO metric families exist and are often confused; names say which is which:
* ``lm_eval/acc``, ``lm_eval/f1``: lm-evaluation-harness's per-candidate accuracy and sklearn's
  binary F1 pooled over all candidates ("yes" = 1 positive).
* ``official/strict_acc``, ``official/f1``: CogComp's evaluator (github CogComp/MCTACO,
  ``experiments/evaluator.py``): a question counts as right only when every candidate is right;
  F1 is computed per question and averaged (precision 1 when nothing is predicted yes, recall 1
  when nothing is gold yes, 0 when both are 0).

Bootstrap: every metric is a function of per-unit sufficient statistics (a unit is an MC-TACO
question or a doc), so a resample is a weighted sum of the unit rows: vectorized and exact.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

LM_ACC = "lm_eval/acc"
LM_F1 = "lm_eval/f1"
LM_CONTAINS = "lm_eval/contains"
OFFICIAL_STRICT_ACC = "official/strict_acc"
OFFICIAL_F1 = "official/f1"

BOOTSTRAP_SAMPLES = 1000
BOOTSTRAP_SEED = 20240521
LEVEL = 0.95
# what one bootstrap draw resamples (results.json and analysis.json record it)
BOOTSTRAP_UNIT = "question group (group_id); a doc where the task has no groups"
# Fewer question groups than this behind a value (for a difference: on either side of it): the value
# is given without an interval, with the words "too few groups". The percentile bootstrap's coverage
# falls far below its level with a handful of groups (2 groups have 3 distinct resamples, and the
# interval can exclude the estimate); from about 20 it is close to nominal for means of bounded scores.
MIN_GROUPS_FOR_INTERVAL = 20
INTERVAL_METHOD = (f"percentile bootstrap over question groups; no interval below {MIN_GROUPS_FOR_INTERVAL} "
                   "groups")


# ---- point metrics -------------------------------------------------------------------------
def accuracy(gold: Sequence[int], pred: Sequence[int]) -> float:
    """lm-eval ``acc`` aggregated: mean of pred == gold."""
    g, p = np.asarray(gold), np.asarray(pred)
    return float(np.mean(g == p)) if len(g) else float("nan")


def pooled_f1(gold: Sequence[int], pred: Sequence[int]) -> float:
    """lm-eval's ``f1`` aggregation: sklearn ``f1_score`` over all (gold, pred) pairs."""
    from sklearn.metrics import f1_score

    if len(gold) == 0:
        return float("nan")
    return float(f1_score(list(gold), list(pred), zero_division=0.0))


def contains_score(generation: str, target: str) -> int:
    """squad_completion's ``contains``: the stripped target, regex-escaped, found case-insensitively."""
    return int(bool(re.search(re.compile(re.escape(target.strip()), re.IGNORECASE), generation)))


def official_question_scores(gold_yes: Sequence[bool], pred_yes: Sequence[bool],
                             groups: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Per question (in order of first appearance): (all candidates right, F1) as CogComp computes them."""
    order: dict[Any, int] = {}
    for g in groups:
        order.setdefault(g, len(order))
    n = len(order)
    all_right = np.ones(n, dtype=bool)
    tp = np.zeros(n)
    n_pred = np.zeros(n)
    n_gold = np.zeros(n)
    for gy, py, g in zip(gold_yes, pred_yes, groups, strict=True):
        q = order[g]
        all_right[q] &= bool(gy) == bool(py)
        tp[q] += bool(gy) and bool(py)
        n_pred[q] += bool(py)
        n_gold[q] += bool(gy)
    p = np.where(n_pred > 0, tp / np.maximum(n_pred, 1), 1.0)
    r = np.where(n_gold > 0, tp / np.maximum(n_gold, 1), 1.0)
    f1 = np.where(p + r > 0, 2 * p * r / np.where(p + r > 0, p + r, 1), 0.0)
    return all_right.astype(float), f1


def official_strict_acc(gold_yes: Sequence[bool], pred_yes: Sequence[bool], groups: Sequence[Any]) -> float:
    right, _ = official_question_scores(gold_yes, pred_yes, groups)
    return float(right.mean()) if len(right) else float("nan")


def official_f1(gold_yes: Sequence[bool], pred_yes: Sequence[bool], groups: Sequence[Any]) -> float:
    _, f1 = official_question_scores(gold_yes, pred_yes, groups)
    return float(f1.mean()) if len(f1) else float("nan")


# ---- sufficient statistics per unit ----------------------------------------------------------
def _f1_from(tp: np.ndarray, fp: np.ndarray, fn: np.ndarray) -> np.ndarray:
    denom = 2 * tp + fp + fn
    return np.where(denom > 0, 2 * tp / np.where(denom > 0, denom, 1), 0.0)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)


def mean_unit_stats(values: np.ndarray, units: np.ndarray, n_units: int) -> np.ndarray:
    """[n_units, 2]: per unit the sum of its docs' values and its doc count: the statistics of a
    plain mean over docs (lm-eval's ``mean`` aggregation: acc, contains, exact_match, ...)."""
    return np.stack([np.bincount(units, weights=np.asarray(values).astype(float), minlength=n_units),
                     np.bincount(units, weights=np.ones(len(units)), minlength=n_units)], 1)


def unit_stats(metric: str, gold: np.ndarray, pred: np.ndarray, units: np.ndarray,
               n_units: int, scores: np.ndarray | None = None) -> np.ndarray:
    """Per-unit statistics [n_units, k] whose column sums determine ``metric``."""
    def per_unit(values: np.ndarray) -> np.ndarray:
        return np.bincount(units, weights=values.astype(float), minlength=n_units)

    if metric == LM_ACC:
        return mean_unit_stats(gold == pred, units, n_units)
    if metric == LM_CONTAINS:
        assert scores is not None
        return mean_unit_stats(scores, units, n_units)
    if metric == LM_F1:
        g, p = gold == 1, pred == 1
        return np.stack([per_unit(g & p), per_unit(~g & p), per_unit(g & ~p)], 1)
    if metric in (OFFICIAL_STRICT_ACC, OFFICIAL_F1):
        right, f1 = official_question_scores(gold == 1, pred == 1, units)
        # units are 0..n-1 in first-appearance order only if numbered so; map back explicitly
        order: dict[int, int] = {}
        for u in units:
            order.setdefault(int(u), len(order))
        col = np.zeros(n_units)
        present = np.zeros(n_units)
        for u, q in order.items():
            col[u] = right[q] if metric == OFFICIAL_STRICT_ACC else f1[q]
            present[u] = 1.0
        return np.stack([col, present], 1)
    raise KeyError(metric)


def metric_from_stats(metric: str, sums: np.ndarray) -> np.ndarray:
    """The metric from column sums (works on [k] or [B, k])."""
    if metric == LM_F1:
        return _f1_from(sums[..., 0], sums[..., 1], sums[..., 2])
    return _ratio(sums[..., 0], sums[..., 1])


def bootstrap_weights(n_units: int, n_samples: int = BOOTSTRAP_SAMPLES,
                      seed: int = BOOTSTRAP_SEED) -> np.ndarray:
    """[n_samples, n_units] resample counts (units drawn with replacement)."""
    rng = np.random.default_rng(seed)
    if n_units == 0:
        return np.zeros((n_samples, 0))
    draws = rng.integers(0, n_units, size=(n_samples, n_units))
    w = np.zeros((n_samples, n_units))
    np.add.at(w, (np.arange(n_samples)[:, None], draws), 1.0)
    return w


def interval(values: np.ndarray, level: float = LEVEL) -> list[float | None]:
    """Percentile interval, ignoring resamples where the metric is undefined."""
    v = values[np.isfinite(values)]
    if len(v) == 0:
        return [None, None]
    a = (1 - level) / 2
    return [float(np.quantile(v, a)), float(np.quantile(v, 1 - a))]


def too_few_groups(groups: int) -> str:
    """The note of a value given without an interval."""
    return f"too few groups for an interval ({groups}; at least {MIN_GROUPS_FOR_INTERVAL} needed)"


def estimate(point: float | None, boot: np.ndarray, groups: int, level: float = LEVEL) -> dict[str, Any]:
    """``{"value", "ci95"[, "note"]}`` of a point value and its resamples, valid at the sample size:
    below ``MIN_GROUPS_FOR_INTERVAL`` groups (``groups``: the fewest groups the value rests on) no
    interval, the note says why; an interval that is one point, or that leaves out its own estimate
    (skewed resamples), is kept with a note that says so."""
    if point is None or not np.isfinite(point):
        return {"value": None, "ci95": [None, None]}
    out: dict[str, Any] = {"value": float(point)}
    if groups < MIN_GROUPS_FOR_INTERVAL:
        out.update(ci95=[None, None], note=too_few_groups(groups))
        return out
    lo, hi = interval(boot, level)
    out["ci95"] = [lo, hi]
    if lo is None or hi is None:
        out["note"] = "undefined in every resample"
    elif lo == hi:
        out["note"] = "every resample gives the same value"
    elif not lo - 1e-12 <= point <= hi + 1e-12:
        out["note"] = "the estimate lies outside its percentile interval: the resamples are skewed"
    return out


def bootstrap_p(boot: np.ndarray) -> float | None:
    """Two-sided bootstrap p-value of "the difference is 0": twice the smaller share of resamples on
    either side of 0 (counting the observed sample, so never 0); None without finite resamples."""
    v = boot[np.isfinite(boot)]
    if len(v) == 0:
        return None
    tail = min(int((v <= 0).sum()), int((v >= 0).sum()))
    return float(min(1.0, 2 * (tail + 1) / (len(v) + 1)))


def summarize(metric: str, stats: np.ndarray, subsets: dict[str, np.ndarray], weights: np.ndarray,
              level: float = LEVEL) -> dict[str, Any]:
    """For each subset (a boolean mask over units): value and interval; plus clean - full.

    The difference is a paired bootstrap: one resample of the full set's units gives both the
    full metric and the clean metric (the clean units inside it), so shared noise cancels.
    """
    out: dict[str, Any] = {}
    boot: dict[str, np.ndarray] = {}
    for name, mask in subsets.items():
        point = metric_from_stats(metric, stats[mask].sum(0)) if mask.any() else np.nan
        boot[name] = metric_from_stats(metric, (weights * mask) @ stats) if mask.any() else \
            np.full(len(weights), np.nan)
        out[name] = estimate(float(point), boot[name], int(mask.sum()), level)
    if "clean" in out and "full" in out:
        c, f = out["clean"]["value"], out["full"]["value"]
        # the difference moves only with the groups outside clean: it needs enough of both kinds
        outside = int((subsets["full"] & ~subsets["clean"]).sum())
        out["clean_minus_full"] = estimate(None if c is None or f is None else c - f,
                                           boot["clean"] - boot["full"],
                                           min(int(subsets["clean"].sum()), outside), level)
    return out
