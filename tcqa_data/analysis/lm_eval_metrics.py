"""Metrics of tasks resolved through lm-eval (no task.yaml): the per-doc values lm-eval logs.

A task that ``decontaminate`` resolved through lm-eval's TaskManager (prep_manifest.json
``tasks.<task>.source.lm_eval_task``) has no TaskSpec to recompute scores with: its prompts,
choices and metrics may be Jinja over lists, Python functions or filters. lm-eval's
``--log_samples`` records hold each metric's per-doc value (``rec[<metric>]``, the names in
``rec["metrics"]``), one record per doc and filter, so those values are the per-doc scores.

A metric is analyzed when its aggregation (the exported YAML's ``metric_list``, else lm-eval's
default for the metric) is

* ``mean``: a plain mean over docs (acc, acc_norm, exact_match, ...). The group bootstrap resamples
  per-group sums and counts (``metrics.mean_unit_stats``); point values are computed as lm-eval's
  ``mean`` does (``sum(values) / len(values)`` in doc order);
* ``f1`` (filter ``none``) on 0/1 labels: per doc lm-eval logs the (gold, pred) pair, and its
  ``f1_score`` aggregation is sklearn's binary F1 over all pairs: ``metrics.LM_F1``.

Any other aggregation (corpus-level bleu, chrf, ter, mcc, perplexities, a custom function) is left
out, with the reason recorded in analysis.json. Metrics are named as lm-eval names them
(``<metric>`` for filter ``none``, else ``<metric>,<filter>``), prefixed ``lm_eval/`` like the
built-in tasks' lm-eval metrics.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tcqa_data.eval import metrics as M
from tcqa_data.eval.tables import TaskStats
from tcqa_data.prep.lm_eval_export import FunctionRef, lm_eval_task_name, read_exported_yaml
from tcqa_data.prep.prepared import group_units

MEAN, F1 = "mean", "f1"
NO_FILTER = "none"


@dataclass(frozen=True)
class LoggedMetric:
    """One (metric, filter) that lm-eval logs per doc, as analyzed."""

    name: str         # reported: lm_eval/<metric>[,<filter>]
    metric: str       # lm-eval's metric name (the sample record's key)
    filter: str       # lm-eval's filter name (the sample record's "filter")
    aggregation: str  # MEAN or F1


def metric_name(metric: str, filter_name: str) -> str:
    return f"lm_eval/{metric}" if filter_name == NO_FILTER else f"lm_eval/{metric},{filter_name}"


def declared_aggregations(split_dir: Path, task: str, split: str) -> dict[str, Any] | None:
    """metric -> the aggregation its metric_list entry declares (None: not declared), from the
    exported full-split YAML; None when it has no metric_list (lm-eval's defaults apply)."""
    path = split_dir / "lm_eval" / f"{lm_eval_task_name(task, split, 'full')}.yaml"
    if not path.is_file():
        return None
    entries = read_exported_yaml(path).get("metric_list")
    if not isinstance(entries, list):
        return None
    return {str(e["metric"]): e.get("aggregation") for e in entries if isinstance(e, dict) and "metric" in e}


def _default_aggregation(metric: str) -> tuple[str | None, str | None]:
    """lm-eval's default aggregation of a metric: (name, None) or (None, why it is unknown)."""
    try:
        from lm_eval.api.registry import get_aggregation, get_metric_aggregation
    except ImportError:
        return None, "its metric_list declares no aggregation and lm-eval (for the default) is not installed"
    fn = get_metric_aggregation(metric)
    if fn is None:
        return None, "lm-eval has no default aggregation for it"
    for name in (MEAN, F1):
        if fn is get_aggregation(name):
            return name, None
    return getattr(fn, "__name__", repr(fn)), None


def aggregation_of(metric: str, declared: dict[str, Any] | None) -> tuple[str | None, str | None]:
    """(aggregation name, None), or (None, why the metric cannot be analyzed)."""
    agg = (declared or {}).get(metric)
    if isinstance(agg, FunctionRef):
        return None, f"its aggregation is a custom function ({agg.qual})"
    name, why = (agg, None) if isinstance(agg, str) else _default_aggregation(metric)
    return name, why


def choose_metrics(logged: list[str], filters: list[str], declared: dict[str, Any] | None
                   ) -> tuple[list[LoggedMetric], dict[str, str]]:
    """The metrics to analyze (in lm-eval's order, per filter) and the skipped ones with reasons."""
    chosen: list[LoggedMetric] = []
    skipped: dict[str, str] = {}
    for f in filters:
        for metric in logged:
            name = metric_name(metric, f)
            agg, why = aggregation_of(metric, declared)
            if why is None and agg == F1 and f != NO_FILTER:
                why = f"f1 under filter {f!r} is not supported (only filter 'none')"
            elif why is None and agg not in (MEAN, F1):
                why = f"aggregation {agg!r} is not a mean over docs (corpus-level)"
            if why is None:
                chosen.append(LoggedMetric(name, metric, f, str(agg)))
            else:
                skipped[name] = why
    return chosen, skipped


def doc_value(m: LoggedMetric, value: Any) -> float | tuple[int, int] | None:
    """The per-doc value as analyzed, or None when it is not of the kind the aggregation takes."""
    if m.aggregation == MEAN:
        if isinstance(value, (bool, int, float)) and np.isfinite(float(value)):
            return float(value)
        return None
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(
            isinstance(x, (bool, int)) and int(x) in (0, 1) for x in value):
        return int(value[0]), int(value[1])
    return None


def unit_stats_of(metrics: list[LoggedMetric], per_doc: list[dict[str, Any]], units: np.ndarray,
                  n_units: int) -> dict[str, np.ndarray]:
    """Per metric, the per-unit statistics that ``metrics.metric_from_stats`` turns into its value."""
    out = {}
    for m in metrics:
        if m.aggregation == MEAN:
            out[m.name] = M.mean_unit_stats(np.asarray([d[m.name] for d in per_doc]), units, n_units)
        else:
            gold, pred = (np.asarray([d[m.name][k] for d in per_doc], dtype=np.int64) for k in (0, 1))
            out[m.name] = M.unit_stats(M.LM_F1, gold, pred, units, n_units)
    return out


def task_stats(metrics: list[LoggedMetric], docs: list[dict[str, Any]], per_doc: list[dict[str, Any]]
               ) -> TaskStats:
    """The logged metrics of a task resolved through lm-eval as ``eval.tables`` takes a task's outputs."""
    group_ids = np.asarray([int(d["group_id"]) for d in docs], dtype=np.int64)
    units, n_units = group_units(group_ids)
    return TaskStats(group_ids, units, n_units, unit_stats_of(metrics, per_doc, units, n_units),
                     point_functions(metrics, per_doc))


def point_functions(metrics: list[LoggedMetric], per_doc: list[dict[str, Any]]
                    ) -> dict[str, Callable[[np.ndarray], float]]:
    """Per metric, its value on a doc mask as lm-eval aggregates it."""
    out: dict[str, Callable[[np.ndarray], float]] = {}
    for m in metrics:
        if m.aggregation == MEAN:
            values = np.asarray([d[m.name] for d in per_doc], dtype=np.float64)
            # lm-eval's `mean`: Python's sum over the docs, divided by their number
            out[m.name] = lambda mask, v=values: float(sum(v[mask].tolist()) / int(mask.sum()))
        else:
            gold, pred = (np.asarray([d[m.name][k] for d in per_doc], dtype=np.int64) for k in (0, 1))
            out[m.name] = lambda mask, g=gold, p=pred: M.pooled_f1(g[mask], p[mask])
    return out
