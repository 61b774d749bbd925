"""How good a run's flags are against ground truth (``decontaminate --labels``): the report section.

The metrics are pure functions of arrays, as scikit-learn's ``metrics`` are: :func:`confusion`
(TP / FP / FN / TN, precision = TP / (TP + FP), recall = TP / (TP + FN)) and
:func:`precision_recall_points` (``sklearn.metrics.precision_recall_curve``'s points: one per
distinct score, flagging every unit scoring at least it). :func:`measure` applies them to one
split's ``contamination.parquet`` columns and its labels (``prep/ground_truth.py``): the rule as it
flagged the docs (``doc_dirty``), the dirty split after the group policy (``dirty``), each term of
the rule alone, and a curve for every score a rule term can threshold (read as the rule reads it:
``rules.metric_values``). :func:`report_blocks` renders the section: one sentence first, a table,
and (HTML) the curves with the rule's operating point marked.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tcqa_data.decontam.detect.rules import TERM_KINDS, Rule, metric_values
from tcqa_data.prep.ground_truth import SplitLabels
from tcqa_data.report_render import Block, Code, Figure, Heading, Paragraph, Table, png_bytes

# every score a rule term compares with a threshold it is given (not a yes/no term's 1), and how
# that threshold is written: a "count" term takes 1 or more, a "share" term 0..1
CURVE_METRICS = {k.metric: k.threshold for k in TERM_KINDS if k.threshold != "none"}


def _r(x: float | None) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), 6)


def confusion(truth: Sequence[bool] | np.ndarray, flagged: Sequence[bool] | np.ndarray) -> dict[str, Any]:
    """TP, FP, FN, TN of ``flagged`` against ``truth`` (both bool per unit), precision
    TP / (TP + FP) and recall TP / (TP + FN); None where a denominator is 0 (nothing flagged,
    nothing contaminated)."""
    t = np.asarray(truth, dtype=bool)
    f = np.asarray(flagged, dtype=bool)
    tp, fp = int((t & f).sum()), int((~t & f).sum())
    fn, tn = int((t & ~f).sum()), int((~t & ~f).sum())
    return {"tp": tp, "fp": fp, "fn": fn, "tn": tn,
            "precision": _r(tp / (tp + fp)) if tp + fp else None,
            "recall": _r(tp / (tp + fn)) if tp + fn else None}


def precision_recall_points(truth: Sequence[bool] | np.ndarray, scores: Sequence[float] | np.ndarray
                            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(thresholds, precision, recall)`` of flagging the units with ``scores >= threshold``, one
    point per distinct score, thresholds ascending (as ``sklearn.metrics.precision_recall_curve``
    without its closing (recall 0, precision 1) point). A NaN score is never flagged (a rule term
    cannot fire there) but its unit still counts in recall's denominator. Recall is NaN when no
    unit is contaminated."""
    t = np.asarray(truth, dtype=bool)
    s = np.asarray(scores, dtype=np.float64)
    scored = ~np.isnan(s)
    order = np.argsort(-s[scored], kind="stable")
    ranked, hits = s[scored][order], t[scored][order]
    if not len(ranked):
        return np.empty(0), np.empty(0), np.empty(0)
    last = np.r_[np.flatnonzero(np.diff(ranked)), len(ranked) - 1]  # the last unit at each score
    tp = np.cumsum(hits)[last]
    flagged = last + 1
    positives = int(t.sum())
    recall = tp / positives if positives else np.full(len(last), np.nan)
    return ranked[last][::-1], (tp / flagged)[::-1], recall[::-1]


def _per_unit(values: np.ndarray, labels: SplitLabels, group_ids: np.ndarray) -> np.ndarray:
    """Per-doc ``values`` at the labelled units: a doc's own, or a group's highest (a bool: any of
    its docs; NaN only when every doc of the group is NaN)."""
    if labels.unit == "doc":
        return values[labels.ids]
    if values.dtype == bool:
        out = np.zeros(int(group_ids.max()) + 1, dtype=bool)
        np.logical_or.at(out, group_ids, values)
    else:
        out = np.full(int(group_ids.max()) + 1, np.nan)
        np.fmax.at(out, group_ids, values)
    return out[labels.ids]


def measure(columns: dict[str, list], labels: SplitLabels, rule: Rule) -> dict[str, Any]:
    """The report.json ``ground_truth`` section of one split: ``columns`` are its
    ``contamination.parquet`` columns (``to_pydict``), ``labels`` its labels."""
    gids = np.asarray(columns["group_id"], dtype=np.int64)
    truth = labels.contaminated
    units = len(gids) if labels.unit == "doc" else (int(gids.max()) + 1 if len(gids) else 0)

    def at_units(values: Any) -> np.ndarray:
        return _per_unit(np.asarray(values), labels, gids)

    terms = []
    for term in dict.fromkeys(rule.terms):  # a term written twice is measured once
        flags = metric_values(columns, term.metric) >= term.threshold
        terms.append({"term": str(term), "metric": term.metric, "threshold": term.threshold,
                      **confusion(truth, at_units(flags))})
    curves = {}
    for metric in CURVE_METRICS:
        if metric not in columns:
            continue
        thr, prec, rec = precision_recall_points(truth, at_units(metric_values(columns, metric)))
        if CURVE_METRICS[metric] == "count":  # no term can say ">= 0": it would flag every testable doc
            thr, prec, rec = thr[thr >= 1], prec[thr >= 1], rec[thr >= 1]
        if len(thr):
            curves[metric] = {"threshold": [_r(x) for x in thr], "precision": [_r(x) for x in prec],
                              "recall": [_r(x) for x in rec]}
    return {
        **labels.source,
        "labelled": int(len(truth)), "contaminated": int(truth.sum()), "clean": int((~truth).sum()),
        "unlabelled": units - int(len(truth)),
        "rule": {"rule": str(rule), **confusion(truth, at_units(np.asarray(columns["doc_dirty"], bool)))},
        # what dirty.parquet holds: the rule's flags lifted to whole groups by the group policy
        "dirty_split": confusion(truth, at_units(np.asarray(columns["dirty"], bool))),
        "terms": terms,
        "curves": curves,
    }


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def answer(section: dict[str, Any]) -> str:
    """The section's first sentence: how many contaminated units the rule flagged, and at what cost."""
    unit, m = section["unit"], section["rule"]
    head = f"Against your {_plural(section['labelled'], 'label')} ({section['file']}, per {unit})"
    if not section["contaminated"]:
        return (f"{head}, none of them contaminated: recall cannot be measured; the rule "
                f"{m['rule']} flagged {_plural(m['fp'], 'clean ' + unit)} of {section['clean']}.")
    recall = f"recall {m['recall']:.2f}"
    precision = (f"precision {m['precision']:.2f}" if m["precision"] is not None else
                 "precision undefined: it flagged nothing labelled")
    return (f"{head}, the rule {m['rule']} flagged {m['tp']} of {section['contaminated']} contaminated "
            f"{unit}s ({recall}) with {_plural(m['fp'], 'false positive')} ({precision}).")


def _row(name: Any, m: dict[str, Any]) -> list[Any]:
    fmt = [("n/a" if m[k] is None else f"{m[k]:.3f}") for k in ("precision", "recall")]
    return [name, str(m["tp"]), str(m["fp"]), str(m["fn"]), str(m["tn"]), *fmt]


def report_blocks(section: dict[str, Any], group_policy: str) -> list[Block]:
    """The report section: the answer first, the confusion table, the curves (HTML)."""
    unit = section["unit"]
    rows = [_row(["rule ", Code(section["rule"]["rule"])], section["rule"]),
            _row(f"dirty split (group policy {group_policy})", section["dirty_split"])]
    rows += [_row(["term ", Code(t["term"])], t) for t in section["terms"]]
    blocks: list[Block] = [
        Heading(2, "Against your labels"),
        Paragraph(answer(section)),
        Paragraph(f"{section['contaminated']} of the {_plural(section['labelled'], 'labelled ' + unit)} "
                  f"are contaminated, {section['clean']} clean; {_plural(section['unlabelled'], unit)} of "
                  f"the split have no label and are not counted. Labels file sha256 {section['sha256']}."),
        Table([unit + "s flagged by", "TP", "FP", "FN", "TN", "precision", "recall"], rows),
    ]
    if section["curves"]:
        blocks.append(Figure(f"Precision / recall over each score's threshold ({unit}s with a label); "
                             "the rule's operating point a star, each term's a ring",
                             lambda: _pr_plot(section)))
    return blocks


def _pr_plot(section: dict[str, Any]) -> bytes:
    from matplotlib.figure import Figure as MplFigure

    fig = MplFigure(figsize=(6, 4))
    ax = fig.subplots()
    colors = {}
    for metric, c in section["curves"].items():
        (line,) = ax.plot(c["recall"], c["precision"], marker=".", ms=3, lw=1, label=metric)
        colors[metric] = line.get_color()
    for t in section["terms"]:
        if t["precision"] is not None and t["recall"] is not None:
            ax.plot([t["recall"]], [t["precision"]], "o", mfc="none", ms=9,
                    color=colors.get(t["metric"], "#444"), label=f"term {t['term']}")
    m = section["rule"]
    if m["precision"] is not None and m["recall"] is not None:
        ax.plot([m["recall"]], [m["precision"]], "*", ms=14, color="k", label=f"rule {m['rule']}")
    ax.set(xlim=(-0.02, 1.02), ylim=(-0.02, 1.05), ylabel="precision",
           xlabel=f"recall (labelled contaminated {section['unit']}s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))  # beside the curves, not on them
    fig.tight_layout()
    return png_bytes(fig)
