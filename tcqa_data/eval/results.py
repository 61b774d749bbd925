"""Write an evaluation's outputs: results.json, samples.jsonl, report.md, report.html (with a plot)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tcqa_data.io_utils import write_json_atomic, write_text_atomic
from tcqa_data.report_render import (
    Block,
    Code,
    Figure,
    Heading,
    Paragraph,
    Table,
    percent_ci,
    png_bytes,
    to_html,
    to_markdown,
)

SUBSET_ORDER = ("clean", "full", "dirty")


def table_rows(task: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the clean / full / dirty table of one task (metrics in percent)."""
    subsets = [s for s in SUBSET_ORDER if s in task["subsets"]]
    diff = task.get("clean_minus_full")  # absent with --clean-only: there is no full score
    header = ["metric"] + [f"{s} (n={task['subsets'][s]['docs']})" for s in subsets]
    header += ["clean - full"] if diff is not None else []
    rows = []
    for name in metric_names(task):
        rows.append([name] + [percent_ci(task["subsets"][s]["metrics"].get(name)) for s in subsets]
                    + ([percent_ci(diff.get(name), signed=True)] if diff is not None else []))
    return header, rows


def metric_names(task: dict[str, Any]) -> list[str]:
    """The task's metric names, in the order of its first subset (full, or clean with --clean-only)."""
    first = next(s for s in ("full", "clean") if s in task["subsets"])
    return list(task["subsets"][first]["metrics"])


def selection_notes(entry: dict[str, Any]) -> list[str]:
    """How a task's docs were chosen, and what that means for its columns (empty for a whole split)."""
    sel = entry.get("selection")
    if not sel or sel.get("method") == "all":
        return []
    notes = [f"Evaluated: {sel['description']}."]
    if sel.get("method") == "sample" and not sel.get("clean_only") and sel.get("groups"):
        in_sample = sel["dirty_groups"] / sel["groups"]
        in_split = sel["dirty_groups_available"] / max(sel["groups_available"], 1)
        if in_sample > in_split:
            notes.append(f"The sample over-represents dirty groups ({in_sample:.0%} of it, {in_split:.0%} "
                         "of the split), so its full column and clean - full describe the sample, not the "
                         "split; its clean and dirty columns are random samples (or all) of the split's "
                         "clean and dirty groups.")
    return notes


def report_blocks(results: dict[str, Any]) -> list[Block]:
    """The evaluation report as one document model: report.md, report.html and the printed
    summary all render these blocks, so they cannot drift apart. The analysis summary that
    ``tcqa_data.workflow.evaluate`` adds comes after them (``extra``)."""
    model = results["model"]
    blocks: list[Block] = [
        Heading(1, f"Evaluation: {model['name']}"),
        Paragraph(["Model ", Code(str(model["source"])),
                   f" on {model['device']} ({model['dtype']}). Values in percent with 95% bootstrap "
                   f"intervals ({results['bootstrap']['samples']} resamples of question groups, "
                   f"seed {results['bootstrap']['seed']})."]),
        Paragraph(["Metric families: ", Code("lm_eval/*"), " are lm-evaluation-harness 0.4's numbers "
                   "(MC-TACO: per-candidate accuracy and pooled F1); ", Code("official/*"), " are CogComp's "
                   "MC-TACO evaluator's (per-question strict accuracy and per-question F1 averaged over "
                   "questions). They differ; do not compare across families."]),
    ]
    up = results.get("upstream")
    if up:
        index = up.get("index")
        where = index.get("path", index.get("dir")) if isinstance(index, dict) else index
        blocks.append(Paragraph(["Upstream: rule ", Code(str(up.get("rule"))), ", index ",
                                 Code(str(where)), "."]))
    for task, entry in results["tasks"].items():
        header, rows = table_rows(entry)
        groups = {s: entry["subsets"][s]["groups"] for s in entry["subsets"]}
        blocks.append(Heading(2, f"{task} ({entry['split']})"))
        blocks += [Paragraph(n) for n in selection_notes(entry)]
        blocks.append(Paragraph("groups: " + ", ".join(f"{s} {n}" for s, n in groups.items())))
        blocks.append(Table(header, rows))
    return blocks


def render_markdown(results: dict[str, Any], extra: Sequence[Block] = ()) -> str:
    """report.md: the evaluation's blocks, then ``extra`` (the analysis summary of
    ``tcqa_data.workflow.evaluate``)."""
    return to_markdown([*report_blocks(results), *extra])


def render_plot(results: dict[str, Any]) -> bytes:
    """Bar chart: each metric of each task for clean / full / dirty, with 95% intervals (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, series = [], {s: ([], [], []) for s in SUBSET_ORDER}
    for task, entry in results["tasks"].items():
        for name in metric_names(entry):
            labels.append(f"{task}\n{name}")
            for s in SUBSET_ORDER:
                m = (entry["subsets"].get(s) or {}).get("metrics", {}).get(name) or {}
                v = m.get("value")
                lo, hi = m.get("ci95") or [None, None]
                series[s][0].append(v * 100 if v is not None else float("nan"))  # no bar, not a 0 %
                series[s][1].append((v - lo) * 100 if v is not None and lo is not None else 0.0)
                series[s][2].append((hi - v) * 100 if v is not None and hi is not None else 0.0)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(labels) + 2), 4.0), dpi=100)
    width = 0.27
    colors = {"clean": "#2b8a3e", "full": "#495057", "dirty": "#c92a2a"}
    for k, s in enumerate(SUBSET_ORDER):
        xs = [i + (k - 1) * width for i in range(len(labels))]
        vals, lo, hi = series[s]
        ax.bar(xs, vals, width, yerr=[lo, hi], capsize=3, label=s, color=colors[s])
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylabel("score (%)")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=8)
    ax.set_title(f"{results['model']['name']}: clean vs full vs dirty (95% CI)")
    fig.tight_layout()
    png = png_bytes(fig, dpi=100)  # no metadata: identical results give identical bytes
    plt.close(fig)
    return png


def render_html(results: dict[str, Any], extra: Sequence[Block] = ()) -> str:
    """report.html: the blocks of report.md, then the plot."""
    plot = Figure("clean vs full vs dirty (95% CI)", lambda: render_plot(results))
    blocks = [*report_blocks(results), *extra, plot]
    return to_html(blocks, title=f"tcqa-data evaluation: {results['model']['name']}")


def write_outputs(out_dir: str | Path, results: dict[str, Any], samples: list[dict[str, Any]],
                  extra: Sequence[Block] = ()) -> None:
    """All four files, each written atomically; results.json last (its presence = complete). ``extra``:
    blocks both reports carry after the evaluation's own."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    clean = {k: v for k, v in results.items() if not k.startswith("_")}
    write_text_atomic(out_dir / "samples.jsonl",
                      "".join(json.dumps(s, sort_keys=True, ensure_ascii=False) + "\n" for s in samples))
    write_text_atomic(out_dir / "report.md", render_markdown(clean, extra))
    write_text_atomic(out_dir / "report.html", render_html(clean, extra))
    write_json_atomic(out_dir / "results.json", clean)
