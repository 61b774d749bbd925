"""Write an analysis: analysis.json, analysis.parquet (long table), report.md and report.html.

report.md and report.html are two renderings of one list of blocks (``tcqa_data.report_render``);
the HTML adds the curves: metric vs threshold with 95% bands (at/above, below, all), EPG vs
threshold, and the share of groups flagged, one figure per score.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from tcqa_data.eval.results import table_rows
from tcqa_data.io_utils import write_json_atomic, write_parquet_atomic, write_text_atomic
from tcqa_data.report_render import (
    Block,
    Bullets,
    Code,
    Figure,
    Heading,
    Paragraph,
    Table,
    percent,
    percent_ci,
    png_bytes,
    to_html,
    to_markdown,
)

SUBSETS = ("clean", "full", "dirty")
ROW_SCHEMA = pa.schema([
    ("task", pa.string()), ("split", pa.string()), ("section", pa.string()), ("score", pa.string()),
    ("threshold", pa.float64()), ("L", pa.int64()), ("subset", pa.string()), ("metric", pa.string()),
    ("value", pa.float64()), ("ci_low", pa.float64()), ("ci_high", pa.float64()), ("docs", pa.int64()),
    ("groups", pa.int64()), ("share_flagged_docs", pa.float64()), ("share_flagged_groups", pa.float64()),
    ("is_rule_threshold", pa.bool_()), ("mu_n", pa.float64()), ("sigma_n", pa.float64()),
    ("zn", pa.float64()), ("zn_method", pa.string()),
])


def analysis_rows(analysis: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (task, section, score, threshold or L, subset, metric); see docs/ARCHITECTURE.md."""
    rows: list[dict[str, Any]] = []

    def add(task: str, e: dict[str, Any], section: str, subset: str, metric: str, m: dict[str, Any],
            **extra: Any) -> None:
        lo, hi = m.get("ci95") or [None, None]
        rows.append({"task": task, "split": e["split"], "section": section, "subset": subset,
                     "metric": metric, "value": m.get("value"), "ci_low": lo, "ci_high": hi,
                     **{k: m.get(k) for k in ("mu_n", "sigma_n", "zn", "zn_method")}, **extra})

    for task, e in analysis["tasks"].items():
        table = e["rule"]["table"]
        for sub in SUBSETS:
            s = table["subsets"][sub]
            for metric, m in s["metrics"].items():
                add(task, e, "rule", sub, metric, m, docs=s["docs"], groups=s["groups"])
        for metric, m in table["clean_minus_full"].items():
            add(task, e, "rule", "clean_minus_full", metric, m)
        for score, sw in e["sweeps"].items():
            for i, t in enumerate(sw["thresholds"]):
                common = {"score": score, "threshold": t, "share_flagged_docs": sw["share_flagged_docs"][i],
                          "share_flagged_groups": sw["share_flagged_groups"][i],
                          "is_rule_threshold": t in sw["rule_thresholds"]}
                for metric, per in sw["metrics"].items():
                    add(task, e, "sweep", "above", metric, per["above"][i], groups=sw["flagged_groups"][i],
                        docs=sw["flagged_docs"][i], **common)
                    add(task, e, "sweep", "below", metric, per["below"][i],
                        groups=e["groups"] - sw["flagged_groups"][i], docs=e["docs"] - sw["flagged_docs"][i],
                        **common)
                    add(task, e, "sweep", "epg", metric, per["epg"][i], **common)
            for metric, per in sw["metrics"].items():
                add(task, e, "sweep", "full", metric, per["full"], score=score, docs=e["docs"],
                    groups=e["groups"])
        for s in e["llama2"].get("subsets", []):
            for metric, m in s["metrics"].items():
                add(task, e, "llama2", s["subset"], metric, m, L=s["L"], docs=s["docs"], groups=s["groups"])
        for s in e["labels"].get("subsets", []):
            for metric, m in s["metrics"].items():
                add(task, e, "labels", s["subset"], metric, m, docs=s["docs"], groups=s["groups"])
    return rows


def _sweep_plot(name: str, sw: dict[str, Any], metric: str) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per = sw["metrics"][metric]
    th = sw["thresholds"]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.2))

    def band(ax, series, label, color):
        v = [m["value"] * 100 if m["value"] is not None else float("nan") for m in series]
        lo = [m["ci95"][0] * 100 if m["ci95"][0] is not None else float("nan") for m in series]
        hi = [m["ci95"][1] * 100 if m["ci95"][1] is not None else float("nan") for m in series]
        ax.plot(th, v, marker=".", label=label, color=color)
        ax.fill_between(th, lo, hi, alpha=0.2, color=color)

    band(axes[0], per["above"], "at/above", "#c92a2a")
    band(axes[0], per["below"], "below", "#2b8a3e")
    band(axes[0], [per["full"]] * len(th), "all", "#495057")
    axes[0].set_ylabel(f"{metric} (%)")
    axes[0].legend(fontsize=7)
    band(axes[1], per["epg"], "EPG", "#1c7ed6")
    axes[1].axhline(0, color="black", lw=0.5)
    axes[1].set_ylabel("EPG (points)")
    axes[2].plot(th, [x * 100 for x in sw["share_flagged_groups"]], marker=".", color="#5f3dc4")
    axes[2].set_ylabel("groups flagged (%)")
    for ax in axes:
        ax.set_xlabel(f"{name} threshold")
        for t in sw["rule_thresholds"]:
            ax.axvline(t, color="gray", ls="--", lw=0.8)
    fig.suptitle(f"{name}: {metric} vs threshold (95% bands; dashed: the rule's threshold)", fontsize=9)
    fig.tight_layout()
    data = png_bytes(fig)
    plt.close(fig)
    return data


def build_document(analysis: dict[str, Any]) -> list[Block]:
    b = analysis["bootstrap"]
    blocks: list[Block] = [
        Heading(1, "Contamination analysis"),
        Paragraph(["Model outputs from ", Code(str(analysis.get("results", "evaluate"))),
                   ", prepared split in ", Code(analysis["prep_dir"]),
                   f". Values in percent; 95% intervals from {b['samples']} "
                   f"bootstrap resamples of question groups (seed {b['seed']}), the same resamples for "
                   "every threshold. EPG = metric on all docs minus metric on the docs below the threshold "
                   "(ConTAM); Zn as in Llama 2 (appendix A.6)."]),
    ]
    for path, why in sorted((analysis.get("skipped_samples") or {}).items()):
        blocks.append(Paragraph(["Left out ", Code(path), f": {why}"]))
    for task, e in analysis["tasks"].items():
        metric = e["metrics"][0]
        blocks += [Heading(2, f"{task} ({e['split']}): {e['docs']} docs, {e['groups']} groups"),
                   Heading(3, "Conclusion"), Bullets(e["conclusion"])]
        # evaluate's table, rendered as evaluate's report renders it
        blocks += [Heading(3, ["The rule's own split: ", Code(str(e["rule"]["rule"]))]),
                   Table(*table_rows(e["rule"]["table"]))]
        blocks.append(Heading(3, f"Threshold sweeps ({metric})"))
        for name, sw in e["sweeps"].items():
            per = sw["metrics"][metric]
            rows = [[f"{t:g}" + (" (rule)" if t in sw["rule_thresholds"] else ""),
                     f"{sw['flagged_groups'][i]} ({percent(sw['share_flagged_groups'][i])}%)",
                     percent_ci(per["above"][i]), percent_ci(per["below"][i]),
                     percent_ci(per["epg"][i], signed=True)]
                    for i, t in enumerate(sw["thresholds"])]
            blocks += [Heading(4, name),
                       Table(["threshold", "groups flagged", "at/above", "below", "EPG"], rows),
                       Figure(f"{name}: {metric}, EPG and share flagged vs threshold",
                              lambda name=name, sw=sw, metric=metric: _sweep_plot(name, sw, metric))]
        llama = e["llama2"]
        blocks.append(Heading(3, "Llama 2 subsets (contaminated-token share)"))
        if "subsets" in llama:
            how = sorted({s["metrics"][m].get("zn_method") or "" for s in llama["subsets"]
                          for m in e["metrics"]} - {""})
            blocks.append(Paragraph(
                f"Share of a query's words inside matched runs of at least L words (L = "
                f"{', '.join(map(str, llama['L']))}; the index's n is {llama['ngram_n']}). mu_n, sigma_n: "
                f"the metric over random subsets of the same number of groups; computed {' / '.join(how)}. "
                "Contamination is called only where |Zn| > 2."))
            rows = []
            for s in llama["subsets"]:
                for m in e["metrics"]:
                    x = s["metrics"][m]
                    rows.append([str(s["L"]), f"{s['subset']} ({s['rule']})", str(s["groups"]), m,
                                 percent_ci(x), "n/a" if x.get("zn") is None else f"{x['zn']:+.2f}"])
            blocks.append(Table(["L", "subset", "groups", "metric", "value", "Zn"], rows))
        else:
            blocks.append(Paragraph(f"Skipped: {llama['skipped']}."))
        labels = e["labels"]
        blocks.append(Heading(3, "Input vs input+label contamination"))
        if "subsets" in labels:
            blocks.append(Paragraph(
                f"A flagged group is input+label when a member's label ({', '.join(labels['label_fields'])}) "
                f"occurs within {labels['window_words']} words of the matched text in a matched corpus doc."))
            blocks.append(Table(["subset", "groups", "docs"] + e["metrics"],
                                [[s["subset"], str(s["groups"]), str(s["docs"])]
                                 + [percent_ci(s["metrics"][m]) for m in e["metrics"]]
                                 for s in labels["subsets"]]))
        else:
            blocks.append(Paragraph(f"Skipped: {labels['skipped']}."))
    return blocks


def summary_blocks(summary: dict[str, Any]) -> list[Block]:
    """The short analysis section of evaluate's report, from the summary results.json keeps."""
    blocks: list[Block] = [Heading(2, "Contamination analysis")]
    if summary.get("error"):
        blocks.append(Paragraph(f"The analysis failed: {summary['error']}"))
    for task, lines in (summary.get("conclusions") or {}).items():
        blocks += [Paragraph(f"{task}:"), Bullets(lines)]
    for task, why in (summary.get("skipped") or {}).items():
        blocks.append(Paragraph(f"{task}: skipped ({why})."))
    if summary.get("report"):
        blocks.append(Paragraph(["Sweeps over every threshold, Llama 2 subsets and the curves: ",
                                 Code(summary["report"]), " (data: ", Code(f"{summary['dir']}/analysis.json"),
                                 ", ", Code(f"{summary['dir']}/analysis.parquet"), ")."]))
    return blocks


def write_analysis(out_dir: str | Path, analysis: dict[str, Any]) -> None:
    """All four files, each atomically; analysis.json last (its presence = complete). Everything is
    rendered before the first file is written, so a failure leaves no partial analysis."""
    out_dir = Path(out_dir)
    clean = {k: v for k, v in analysis.items() if not k.startswith("_") and k != "output_dir"}
    table = pa.Table.from_pylist(analysis_rows(clean), schema=ROW_SCHEMA)
    blocks = build_document(clean)
    md = to_markdown(blocks)
    page = to_html(blocks, title="tcqa-data contamination analysis")
    write_parquet_atomic(out_dir / "analysis.parquet", table)
    write_text_atomic(out_dir / "report.md", md)
    write_text_atomic(out_dir / "report.html", page)
    write_json_atomic(out_dir / "analysis.json", clean)
