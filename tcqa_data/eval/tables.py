"""The clean / full / dirty table of one task's per-doc model outputs.

One table, two readers: ``evaluate`` writes it into results.json (``tasks.<task>``), and the analysis
shows it as the rule's own split (``analysis.json`` ``tasks.<task>.rule.table``). The outputs are
reduced once to per-unit statistics (``TaskStats``: a unit is a whole question group, see
``prep.prepared.group_units``); the table, and every sweep of the analysis, are weighted sums of
those rows (``metrics``), with point values from the reference implementations.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tcqa_data.errors import ConfigError
from tcqa_data.eval import metrics as M
from tcqa_data.prep.prepared import SUBSETS, group_units
from tcqa_data.prep.taskspec import TaskSpec

# The metrics a task's `metric_list` may name, per output type (lm-eval's names).
SUPPORTED_METRICS = {"multiple_choice": ("acc", "f1"), "generate_until": ("contains",)}


def is_mc_taco(spec: TaskSpec) -> bool:
    return spec.task.startswith("mc_taco")


def task_metric_names(spec: TaskSpec) -> list[str]:
    """The metrics reported for a task: its `metric_list` in the lm_eval family, plus CogComp's
    official pair for MC-TACO. Raises ConfigError for what this stage cannot compute."""
    supported = SUPPORTED_METRICS.get(spec.output_type)
    if supported is None:
        raise ConfigError(f"task {spec.task!r}: output_type {spec.output_type!r} is not supported by "
                          f"evaluate (supported: {sorted(SUPPORTED_METRICS)})")
    declared = [str(m["metric"]) for m in spec.metric_list] or list(supported)
    unknown = [m for m in declared if m not in supported]
    if unknown:
        raise ConfigError(f"task {spec.task!r}: metric(s) {unknown} in metric_list are not supported for "
                          f"{spec.output_type} (supported: {list(supported)})")
    if "f1" in declared and len(spec.choices()) != 2:
        raise ConfigError(f"task {spec.task!r}: f1 is binary F1 and needs exactly 2 choices, "
                          f"not {len(spec.choices())}")
    names = [f"lm_eval/{m}" for m in declared]
    if spec.output_type == "multiple_choice" and is_mc_taco(spec):
        names += [M.OFFICIAL_STRICT_ACC, M.OFFICIAL_F1]
    return names


@dataclass
class TaskStats:
    """One task's per-doc outputs, reduced once for every table and sweep of them."""

    group_ids: np.ndarray  # per doc
    units: np.ndarray  # bootstrap unit per doc (``group_units(group_ids)``)
    n_units: int
    stats: dict[str, np.ndarray]  # per metric, in report order: per-unit statistics (``metrics.unit_stats``)
    points: dict[str, Callable[[np.ndarray], float]]  # per metric: its value on a doc mask (reference)


@dataclass
class TaskTable:
    """The clean / full / dirty table and what it was computed from, so that an analysis of the same
    outputs (``tcqa_data.workflow.evaluate``) reuses all three instead of computing them again."""

    stats: TaskStats
    weights: np.ndarray  # ``metrics.bootstrap_weights(stats.n_units, bootstrap, seed)``
    table: dict[str, Any]


def task_stats(spec: TaskSpec, docs: list[dict[str, Any]], per_doc: list[dict[str, Any]]) -> TaskStats:
    """Per metric of the task (``task_metric_names``): its per-unit statistics and its point value on a
    doc mask (the reference implementation), as ``subset_table`` and the analysis take them."""
    group_ids = np.array([int(d["group_id"]) for d in docs], dtype=np.int64)
    units, n_units = group_units(group_ids)
    names = task_metric_names(spec)
    if spec.output_type == "multiple_choice":
        gold = np.array([o["gold"] for o in per_doc], dtype=np.int64)
        pred = np.array([o["pred"] for o in per_doc], dtype=np.int64)
        points = {
            M.LM_ACC: lambda m: M.accuracy(gold[m], pred[m]),
            M.LM_F1: lambda m: M.pooled_f1(gold[m], pred[m]),
            M.OFFICIAL_STRICT_ACC: lambda m: M.official_strict_acc(gold[m] == 1, pred[m] == 1, group_ids[m]),
            M.OFFICIAL_F1: lambda m: M.official_f1(gold[m] == 1, pred[m] == 1, group_ids[m]),
        }
        scores = None
    else:
        gold = pred = np.zeros(len(per_doc), dtype=np.int64)
        scores = np.array([o["contains"] for o in per_doc], dtype=float)
        points = {M.LM_CONTAINS: lambda m: float(scores[m].mean()) if m.any() else float("nan")}
    stats = {name: M.unit_stats(name, gold, pred, units, n_units, scores) for name in names}
    return TaskStats(group_ids, units, n_units, stats, points)


def subset_table(ts: TaskStats, clean: np.ndarray, weights: np.ndarray) -> dict[str, Any]:
    """The full / clean / dirty table: per metric the group-bootstrap intervals (``weights``:
    ``metrics.bootstrap_weights``), with point values from ``ts.points`` (the reference
    implementations), and the paired clean - full difference."""
    group_ids, units, n_units = ts.group_ids, ts.units, ts.n_units
    unit_clean = np.zeros(n_units, dtype=bool)
    unit_clean[units[clean]] = True
    subsets = {"full": np.ones(n_units, dtype=bool), "clean": unit_clean, "dirty": ~unit_clean}
    doc_masks = {"full": np.ones(len(group_ids), dtype=bool), "clean": clean, "dirty": ~clean}
    names = list(ts.stats)
    per_metric = {}
    for name in names:
        summary = M.summarize(name, ts.stats[name], subsets, weights)
        # point values from the reference implementations (sklearn, CogComp's rules, lm-eval's mean)
        for sub in SUBSETS:
            m = doc_masks[sub]
            v = ts.points[name](m) if m.any() else float("nan")
            summary[sub]["value"] = None if not np.isfinite(v) else float(v)
        c, f = summary["clean"]["value"], summary["full"]["value"]
        summary["clean_minus_full"]["value"] = None if c is None or f is None else c - f
        per_metric[name] = summary

    out: dict[str, Any] = {"subsets": {}, "clean_minus_full": {}}
    for sub in SUBSETS:
        m = doc_masks[sub]
        out["subsets"][sub] = {
            "docs": int(m.sum()),
            "groups": int(len(np.unique(group_ids[m]))),
            "metrics": {name: per_metric[name][sub] for name in names},
        }
    out["clean_minus_full"] = {name: per_metric[name]["clean_minus_full"] for name in names}
    return out


def task_table(spec: TaskSpec, docs: list[dict[str, Any]], per_doc: list[dict[str, Any]], clean: np.ndarray,
               bootstrap: int, seed: int) -> TaskTable:
    """The table of one task's outputs (``clean``: per doc), with the statistics and resamples behind it."""
    ts = task_stats(spec, docs, per_doc)
    weights = M.bootstrap_weights(ts.n_units, bootstrap, seed)
    return TaskTable(ts, weights, subset_table(ts, clean, weights))


def task_metrics(spec: TaskSpec, docs: list[dict[str, Any]], per_doc: list[dict[str, Any]],
                 clean: np.ndarray, bootstrap: int, seed: int) -> dict[str, Any]:
    """Metrics for full / clean / dirty with bootstrap intervals and the clean - full difference."""
    return task_table(spec, docs, per_doc, clean, bootstrap, seed).table


def empty_table(spec: TaskSpec) -> dict[str, Any]:
    """The table of a task with no docs to score: every value and interval null."""
    names = task_metric_names(spec)
    empty = {"value": None, "ci95": [None, None]}
    return {"subsets": {s: {"docs": 0, "groups": 0, "metrics": {n: dict(empty) for n in names}}
                        for s in SUBSETS},
            "clean_minus_full": {n: dict(empty) for n in names}}
