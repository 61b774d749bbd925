"""Write an evaluation's outputs: results.json, samples.jsonl, report.md, report.html (with a plot)."""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path
from typing import Any

from tcqa_data.io_utils import write_json_atomic, write_text_atomic

SUBSET_ORDER = ("clean", "full", "dirty")


def _fmt(m: dict[str, Any] | None, pct: bool = True) -> str:
    if not m or m.get("value") is None:
        return "n/a"
    k = 100.0 if pct else 1.0
    lo, hi = m.get("ci95") or [None, None]
    ci = f" [{lo * k:.1f}, {hi * k:.1f}]" if lo is not None and hi is not None else ""
    return f"{m['value'] * k:.1f}{ci}"


def _fmt_diff(m: dict[str, Any] | None) -> str:
    if not m or m.get("value") is None:
        return "n/a"
    lo, hi = m.get("ci95") or [None, None]
    ci = f" [{lo * 100:+.1f}, {hi * 100:+.1f}]" if lo is not None and hi is not None else ""
    return f"{m['value'] * 100:+.1f}{ci}"


def table_rows(task: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the clean / full / dirty table of one task (metrics in percent)."""
    subsets = [s for s in SUBSET_ORDER if s in task["subsets"]]
    diff = task.get("clean_minus_full")  # absent with --clean-only: there is no full score
    header = ["metric"] + [f"{s} (n={task['subsets'][s]['docs']})" for s in subsets]
    header += ["clean - full"] if diff is not None else []
    rows = []
    for name in metric_names(task):
        rows.append([name] + [_fmt(task["subsets"][s]["metrics"].get(name)) for s in subsets]
                    + ([_fmt_diff(diff.get(name))] if diff is not None else []))
    return header, rows


def metric_names(task: dict[str, Any]) -> list[str]:
    """The task's metric names, in the order of its first subset (full, or clean with --clean-only)."""
    first = next(s for s in ("full", "clean") if s in task["subsets"])
    return list(task["subsets"][first]["metrics"])


def render_markdown(results: dict[str, Any]) -> str:
    model = results["model"]
    lines = [f"# Evaluation: {model['name']}", "",
             f"Model `{model['source']}` on {model['device']} ({model['dtype']}). Values in percent with "
             f"95% bootstrap intervals ({results['bootstrap']['samples']} resamples of question groups, "
             f"seed {results['bootstrap']['seed']}).", "",
             "Metric families: `lm_eval/*` are lm-evaluation-harness 0.4's numbers (MC-TACO: per-candidate "
             "accuracy and pooled F1); `official/*` are CogComp's MC-TACO evaluator's (per-question strict "
             "accuracy and per-question F1 averaged over questions). They differ; do not compare across "
             "families.", ""]
    up = results.get("upstream")
    if up:
        index = up.get("index")
        where = index.get("path", index.get("dir")) if isinstance(index, dict) else index
        lines += [f"Upstream: rule `{up.get('rule')}`, index `{where}`.", ""]
    for task, entry in results["tasks"].items():
        header, rows = table_rows(entry)
        groups = {s: entry["subsets"][s]["groups"] for s in entry["subsets"]}
        lines += [f"## {task} ({entry['split']})", "",
                  "groups: " + ", ".join(f"{s} {n}" for s, n in groups.items()), "",
                  "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        lines.append("")
    return "\n".join(lines)


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
    buf = io.BytesIO()
    # no Software/date metadata: identical results give identical bytes
    fig.savefig(buf, format="png", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def render_html(results: dict[str, Any], png: bytes) -> str:
    model = results["model"]
    parts = ["<!doctype html><html><head><meta charset='utf-8'>",
             f"<title>tcqa-data evaluation: {html.escape(model['name'])}</title>",
             "<style>body{font-family:sans-serif;max-width:1000px;margin:2em auto}"
             "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}"
             "td:first-child,th:first-child{text-align:left}</style></head><body>",
             f"<h1>Evaluation: {html.escape(model['name'])}</h1>",
             f"<p>Model <code>{html.escape(model['source'])}</code> on {html.escape(model['device'])} "
             f"({html.escape(model['dtype'])}). Percent, with 95% bootstrap intervals. "
             "<code>lm_eval/*</code>: lm-evaluation-harness 0.4's metrics; <code>official/*</code>: "
             "CogComp's MC-TACO evaluator (per-question strict accuracy, averaged per-question F1).</p>"]
    for task, entry in results["tasks"].items():
        header, rows = table_rows(entry)
        parts.append(f"<h2>{html.escape(task)} ({html.escape(entry['split'])})</h2><table><tr>"
                     + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>")
        for r in rows:
            parts.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>")
        parts.append("</table>")
    parts.append(f"<p><img alt='clean vs full vs dirty' src='data:image/png;base64,"
                 f"{base64.b64encode(png).decode('ascii')}'></p></body></html>")
    return "\n".join(parts) + "\n"


def write_outputs(out_dir: str | Path, results: dict[str, Any], samples: list[dict[str, Any]]) -> None:
    """All four files, each written atomically; results.json last (its presence = complete)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    clean = {k: v for k, v in results.items() if not k.startswith("_")}
    write_text_atomic(out_dir / "samples.jsonl",
                      "".join(json.dumps(s, sort_keys=True, ensure_ascii=False) + "\n" for s in samples))
    write_text_atomic(out_dir / "report.md", render_markdown(clean) + "\n")
    write_text_atomic(out_dir / "report.html", render_html(clean, render_plot(clean)))
    write_json_atomic(out_dir / "results.json", clean)
