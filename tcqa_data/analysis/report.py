"""Write an analysis: analysis.json, analysis.parquet (long table), report.md and report.html.

report.md and report.html are two renderings of one list of blocks (``tcqa_data.report_render``);
the HTML adds the curves: metric vs threshold with 95% bands (at/above, below, all), EPG vs
threshold, and the share of groups flagged, one figure per score.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from tcqa_data.analysis.model_side import HEADLINE, context_line, score_label
from tcqa_data.analysis.model_side import PREFIX as MODEL_PREFIX
from tcqa_data.eval import metrics as M
from tcqa_data.eval.results import (
    link_line,
    plot_title,
    prep_links,
    relative_href,
    table_plot,
    table_rows,
    verdict,
)
from tcqa_data.io_utils import write_json_atomic, write_parquet_atomic, write_text_atomic
from tcqa_data.report_render import (
    Block,
    Bullets,
    Code,
    Details,
    Figure,
    Heading,
    Inline,
    Link,
    Paragraph,
    Table,
    interval_note,
    percent_ci,
    png_bytes,
    share,
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
        for score, a in ((e.get("model_side") or {}).get("agreement") or {}).items():
            for flag, m in a["auroc"].items():
                add(task, e, "model_agreement", flag, "auroc", m, score=score, docs=m["dirty_docs"],
                    groups=m["dirty_groups"])
            for corpus, m in a["spearman"].items():
                add(task, e, "model_agreement", corpus, "spearman", m, score=score, docs=a["docs"])
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


def _sweep_blocks(name: str, sw: dict[str, Any], metric: str, figure: bool = True) -> list[Block]:
    """One score's sweep folded: its per-threshold table, and (``figure``) its three curves."""
    per = sw["metrics"][metric]
    rows = [[f"{t:g}" + (" (rule)" if t in sw["rule_thresholds"] else ""),
             f"{sw['flagged_groups'][i]} ({share(sw['share_flagged_groups'][i])})",
             percent_ci(per["above"][i]), percent_ci(per["below"][i]),
             percent_ci(per["epg"][i], signed=True)]
            for i, t in enumerate(sw["thresholds"])]
    inner: list[Block] = [Table(["threshold", "groups flagged", "at/above", "below", "EPG"], rows)]
    if figure:
        inner.append(Figure(f"{name}: {metric}, EPG and share flagged vs threshold",
                            lambda name=name, sw=sw, metric=metric: _sweep_plot(name, sw, metric)))
    return [Details(f"{name}: {len(rows)} thresholds", inner)]


def _epg_curves(sweeps: dict[str, Any], metric: str, title: str) -> bytes:
    """Every score's EPG against the share of groups it flags, one line per score (the sweeps in one
    picture; a dot where the EPG has an interval that excludes 0, uncorrected)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    for name, sw in sweeps.items():
        epg = sw["metrics"][metric]["epg"]
        x = [v * 100 for v in sw["share_flagged_groups"]]
        y = [e["value"] * 100 if e["value"] is not None else float("nan") for e in epg]
        (line,) = ax.plot(x, y, lw=1, label=name.removeprefix(MODEL_PREFIX))
        hit = [(a, b) for a, b, e in zip(x, y, epg, strict=True)
               if e["ci95"][0] is not None and (e["ci95"][0] > 0 or e["ci95"][1] < 0)]
        if hit:
            ax.plot(*zip(*hit, strict=True), ".", color=line.get_color())
    ax.axhline(0, color="black", lw=0.5)
    ax.set_xlabel("groups flagged (%)")
    ax.set_ylabel(f"EPG, {metric} (points)")
    ax.legend(fontsize=6, ncol=2, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    data = png_bytes(fig)
    plt.close(fig)
    return data


def _number_ci(m: dict[str, Any]) -> str:
    if m.get("value") is None:
        return f"n/a ({m.get('note', 'undefined')})"
    lo, hi = m["ci95"]
    note = interval_note(m)
    ci = f" [{lo:.2f}, {hi:.2f}]" if lo is not None else ""
    return f"{m['value']:.2f}{ci}" + (f" ({note})" if note else "")


def _model_plot(agree: dict[str, Any], text: str) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in agree if n.split(":")[1] == text]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    for n in names:
        roc = agree[n]["curves"].get("roc")
        if roc:
            axes[0].plot(roc["fpr"], roc["tpr"], lw=1,
                         label=f"{n.split(':')[2]} ({agree[n]['auroc']['dirty']['value']:.2f})")
    axes[0].plot([0, 1], [0, 1], color="gray", ls="--", lw=0.8)
    axes[0].set_xlabel("false positive rate (corpus-clean)")
    axes[0].set_ylabel("true positive rate (corpus-dirty)")
    if any(agree[n]["curves"].get("roc") for n in names):
        axes[0].legend(fontsize=6)
    else:  # no corpus-dirty (or no clean) doc: no curve to draw
        axes[0].text(0.5, 0.5, "no ROC: one class only", ha="center", fontsize=8)
    for ax, score in zip(axes[1:], (HEADLINE[1], "loss"), strict=True):
        hist = agree.get(f"{MODEL_PREFIX}{text}:{score}", {}).get("curves", {}).get("histogram")
        if not hist:
            continue
        edges = hist["edges"]
        for key, color in (("clean", "#2b8a3e"), ("dirty", "#c92a2a")):
            total = max(1, sum(hist[key]))
            ax.stairs([c / total for c in hist[key]], edges, color=color, label=f"corpus-{key}")
        ax.set_xlabel(score_label(f"{MODEL_PREFIX}{text}:{score}"))
        ax.set_ylabel("share of docs")
        ax.legend(fontsize=7)
    fig.suptitle(f"Memorization scores of {text}: ROC for corpus-dirty vs clean; distributions", fontsize=9)
    fig.tight_layout()
    data = png_bytes(fig)
    plt.close(fig)
    return data


def model_side_blocks(e: dict[str, Any], metric: str) -> list[Block]:
    """The model side: agreement of the memorization scores with the corpus evidence, the plots, and
    the headline score's sweeps (every score's sweep is in analysis.json / analysis.parquet)."""
    side = e.get("model_side") or {}
    if "agreement" not in side:
        return [Paragraph(f"Not available: {side.get('absent', 'no memorization scores')}.")]
    agree = side["agreement"]
    blocks: list[Block] = [Paragraph(
        "Per-doc scores of the model itself (higher = more likely seen in training). AUROC: "
        "how well a score separates corpus-dirty (positive) from corpus-clean docs, 0.5 = not at all; "
        "below 0.5 the flagged docs look less familiar to the model, which is no sign of memorization. "
        "Spearman: rank correlation with each corpus score. 95% intervals from the same group "
        f"bootstrap; none where fewer than {side['min_groups_for_interval']} dirty or clean groups.")]
    blocks.append(Bullets([side["conclusion"]]))
    if side.get("contexts"):
        blocks.append(Paragraph("Tokens scored (in the prompt: where the text occurs in the task's prompt, "
                                "from the task's own forward pass; standalone: the text alone after the "
                                f"prefix token): {context_line(side['contexts'])}."))
    flags = side["flags"]
    blocks.append(Table(["score", "docs"] + [f"AUROC vs {f}" for f in flags],
                        [[score_label(n), str(a["docs"])] + [_number_ci(a["auroc"][f]) for f in flags]
                         for n, a in agree.items()]))
    if side["corpus_scores"]:
        corpus = side["corpus_scores"]
        # one row per (model score, corpus score): a table as wide as the page, however many scores
        blocks.append(Details(f"Spearman rank correlation with {len(corpus)} corpus scores", [
            Table(["model score", "corpus score", "Spearman"],
                  [[score_label(n), c, _number_ci(agree[n]["spearman"][c])] for n in agree for c in corpus],
                  align=["l", "l", "r"])]))
    for text in dict.fromkeys(n.split(":")[1] for n in agree):
        blocks.append(Figure(f"memorization scores of {text}: ROC and distributions",
                             lambda text=text: _model_plot(agree, text)))
        name = f"{MODEL_PREFIX}{text}:{'score' if text == 'headline' else HEADLINE[1]}"
        if name in e["sweeps"]:
            blocks += _sweep_blocks(name, e["sweeps"][name], metric, figure=False)
    return blocks


def _llama2_blocks(e: dict[str, Any]) -> list[Block]:
    llama = e["llama2"]
    if "subsets" not in llama:
        return [Paragraph(f"Skipped: {llama['skipped']}.")]
    how = sorted({s["metrics"][m].get("zn_method") or "" for s in llama["subsets"]
                  for m in e["metrics"]} - {""})
    rows = []
    for s in llama["subsets"]:
        for m in e["metrics"]:
            x = s["metrics"][m]
            rows.append([str(s["L"]), f"{s['subset']} ({s['rule']})", str(s["groups"]), m,
                         percent_ci(x), "n/a" if x.get("zn") is None else f"{x['zn']:+.2f}"])
    return [Paragraph(
        f"Share of a query's words inside matched runs of at least L words (L = "
        f"{', '.join(map(str, llama['L']))}; the index's n is {llama['ngram_n']}). mu_n, sigma_n: "
        f"the metric over random subsets of the same number of groups; computed {' / '.join(how)}. "
        "Contamination is called only where |Zn| > 2."),
        Table(["L", "subset", "groups", "metric", "value", "Zn"], rows)]


def _labels_blocks(e: dict[str, Any]) -> list[Block]:
    labels = e["labels"]
    if "subsets" not in labels:
        return [Paragraph(f"Skipped: {labels['skipped']}.")]
    return [Paragraph(
        f"A flagged group is input+label when a member's label ({', '.join(labels['label_fields'])}) "
        f"occurs within {labels['window_words']} words of the matched text in a matched corpus doc."),
        Table(["subset", "groups", "docs"] + e["metrics"],
              [[s["subset"], str(s["groups"]), str(s["docs"])]
               + [percent_ci(s["metrics"][m]) for m in e["metrics"]] for s in labels["subsets"]])]


def _links(analysis: dict[str, Any], at: Path) -> list[Block]:
    """Links to the evaluation this analysis belongs to and to the prepared splits' reports."""
    links: list[Inline] = []
    results = Path(str(analysis.get("results", "")))
    if (results / "report.html").is_file() or (results / "results.json").is_file():
        links.append(Link("the evaluation report", relative_href(results / "report.html", at)))
    links += prep_links(analysis["prep_dir"], [(t, e["split"]) for t, e in analysis["tasks"].items()], at)
    return [link_line("See also: ", links)] if links else []


def build_document(analysis: dict[str, Any], at: str | Path | None = None) -> list[Block]:
    """The analysis report: first the answer (per task one sentence of verdict, the clean / full / dirty
    table with its intervals, one plot), then every detail folded. ``at``: the folder the report is
    read from, for its relative links (none without it)."""
    b = analysis["bootstrap"]
    tasks = analysis["tasks"]
    blocks: list[Block] = [Heading(1, "Contamination analysis")]
    if at is not None:
        blocks += _links(analysis, Path(at))
    for path, why in sorted((analysis.get("skipped_samples") or {}).items()):
        blocks.append(Paragraph(["Left out ", Code(path), f": {why}"]))
    for task, e in tasks.items():
        table = e["rule"]["table"]
        blocks += [Heading(2, f"{task} ({e['split']}): {e['docs']} docs, {e['groups']} groups"),
                   Paragraph(verdict(table, e["metrics"])), Table(*table_rows(table))]
    if tasks:
        tables = {t: e["rule"]["table"] for t, e in tasks.items()}
        rule_title = plot_title(tables, "the rule's split")
        blocks.append(Figure(rule_title, lambda t=rule_title: table_plot(tables, t, primary_only=True)))
    for task, e in tasks.items():
        metric = e["metrics"][0]
        detail: list[Block] = [Details("Every finding", [Bullets(e["conclusion"])])]
        corpus = {n: sw for n, sw in e["sweeps"].items() if not n.startswith(MODEL_PREFIX)}
        models = {n: sw for n, sw in e["sweeps"].items() if n.startswith(MODEL_PREFIX)}
        sweep: list[Block] = [Paragraph(
            "EPG (ConTAM) = the metric on all groups minus the metric on the groups below a threshold, "
            "for every threshold of every per-doc score; a dot marks an EPG whose 95% interval excludes 0 "
            "before any correction (the findings above apply Benjamini-Hochberg across thresholds).")]
        for title, group in (("corpus scores", corpus), ("memorization scores", models)):
            if group:
                sweep.append(Figure(f"EPG vs share of groups flagged, {title} ({metric})",
                                    lambda g=group, t=title, m=metric: _epg_curves(g, m, t)))
        for name, sw in corpus.items():
            sweep += _sweep_blocks(name, sw, metric)
        detail.append(Details(f"Threshold sweeps: {len(corpus)} corpus scores, {len(models)} memorization "
                              f"scores ({metric})", sweep))
        detail.append(Details("Model side: memorization scores vs the corpus evidence",
                              model_side_blocks(e, metric)))
        detail.append(Details("Llama 2 subsets (contaminated-token share)", _llama2_blocks(e)))
        detail.append(Details("Input vs input+label contamination", _labels_blocks(e)))
        blocks.append(Details(f"{task}: the detail", detail))
    blocks.append(Details("How these numbers were made", [Paragraph(
        ["Model outputs from ", Code(str(analysis.get("results", "evaluate"))), ", prepared split in ",
         Code(analysis["prep_dir"]), f". Values in percent; 95% intervals from {b['samples']} bootstrap "
         f"resamples of question groups (seed {b['seed']}), the same resamples for every threshold; the "
         f"percentile interval where at least {M.MIN_GROUPS_FOR_INTERVAL} groups stand behind a value (for a "
         "difference: on each side), else the value alone with \"too few groups\". Claims across thresholds: "
         "Benjamini-Hochberg over the thresholds tested. EPG = metric on all docs minus metric on the docs "
         "below the threshold (ConTAM); Zn as in Llama 2 (appendix A.6)."])]))
    return blocks


def summary_blocks(summary: dict[str, Any]) -> list[Block]:
    """The short analysis section of evaluate's report, from the summary results.json keeps: a link to
    the analysis report, the findings folded."""
    blocks: list[Block] = [Heading(2, "Contamination analysis")]
    if summary.get("error"):
        blocks.append(Paragraph(f"The analysis failed: {summary['error']}"))
    if summary.get("report"):
        blocks.append(Paragraph(["Sweeps over every threshold, the model side and the curves: ",
                                 Link("the analysis report", summary["report"]), " (data: ",
                                 Code(f"{summary['dir']}/analysis.json"), ", ",
                                 Code(f"{summary['dir']}/analysis.parquet"), ")."]))
    for task, lines in (summary.get("conclusions") or {}).items():
        blocks.append(Details(f"{task}: findings", [Bullets(lines)]))
    for task, why in (summary.get("skipped") or {}).items():
        blocks.append(Paragraph(f"{task}: skipped ({why})."))
    return blocks


def write_analysis(out_dir: str | Path, analysis: dict[str, Any], at: str | Path | None = None) -> None:
    """All four files, each atomically; analysis.json last (its presence = complete). Everything is
    rendered before the first file is written, so a failure leaves no partial analysis. ``at``: the
    folder the files will be read from (``out_dir`` where not given), for the reports' links."""
    out_dir = Path(out_dir)
    clean = {k: v for k, v in analysis.items() if not k.startswith("_") and k != "output_dir"}
    table = pa.Table.from_pylist(analysis_rows(clean), schema=ROW_SCHEMA)
    blocks = build_document(clean, out_dir if at is None else at)
    md = to_markdown(blocks)
    page = to_html(blocks, title="tcqa-data contamination analysis")
    write_parquet_atomic(out_dir / "analysis.parquet", table)
    write_text_atomic(out_dir / "report.md", md)
    write_text_atomic(out_dir / "report.html", page)
    write_json_atomic(out_dir / "analysis.json", clean)
