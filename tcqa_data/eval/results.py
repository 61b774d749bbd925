"""Write an evaluation's outputs: results.json, samples.jsonl, report.md, report.html (with a plot)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tcqa_data.eval import metrics as M
from tcqa_data.io_utils import write_json_atomic, write_text_atomic
from tcqa_data.report_render import (
    Block,
    Code,
    Details,
    Figure,
    Heading,
    Inline,
    Link,
    Paragraph,
    Table,
    percent,
    percent_ci,
    png_bytes,
    share,
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


def verdict(task: dict[str, Any], metrics: Sequence[str] | None = None) -> str:
    """How much of the score is contamination, for every metric (``metrics``: those only), worded by
    what the numbers support: an effect, with its sign and size, for each metric whose clean - full
    interval excludes 0 (those first); "no measurable effect" only for those whose interval contains
    0; "too few groups" where there is no interval."""
    names = list(metrics) if metrics is not None else metric_names(task)
    subs = task["subsets"]
    if "full" not in subs:  # --clean-only: nothing to compare with
        scores = "; ".join(f"{m} {percent_ci(_metric(subs, 'clean', m))}" for m in names)
        return (f"Clean groups only ({subs['clean']['groups']}): {scores}; no full or dirty score was "
                "computed, so this run cannot say how much contamination adds.")
    groups, dirty = subs["full"]["groups"], subs["dirty"]["groups"]
    if not dirty:
        scores = "; ".join(f"{m} {percent_ci(_metric(subs, 'full', m))}" for m in names)
        return f"No group of {groups} was found in the corpus: the full score is the clean score, {scores}."
    if not subs["clean"]["groups"]:
        return f"Every group ({groups}) was found in the corpus: there is no clean score to compare with."
    part = f"{dirty} of {groups} groups ({share(dirty / groups)}) are dirty"
    effects = [_effect(task, m) for m in names]
    if len(effects) == 1:
        return _one_metric_verdict(effects[0], part)
    by_kind: dict[str, list[_Effect]] = {}
    for e in effects:
        by_kind.setdefault(e.kind, []).append(e)
    sentences = [_effect_sentence(e) for e in effects if e.kind in ("inflates", "lower")]
    if by_kind.get("none"):
        none = by_kind["none"]
        listed = _and_or([f"{e.metric} ({e.diff})" for e in none], "or")
        each = "each 95% interval contains" if len(none) > 1 else "the 95% interval contains"
        sentences.append(f"No measurable effect of contamination on {listed}: clean - full in points, "
                         f"{each} 0.")
    if by_kind.get("few"):
        listed = _and_or([f"{e.metric} ({e.diff} points)" for e in by_kind["few"]], "and")
        sentences.append(f"Too few groups on one side to tell clean - full from chance for {listed}.")
    if by_kind.get("missing"):
        listed = _and_or([e.metric for e in by_kind["missing"]], "and")
        sentences.append(f"No value on one of the subsets for {listed}.")
    return " ".join(sentences) + f" {part[0].upper()}{part[1:]}."


@dataclass(frozen=True)
class _Effect:
    """One metric's clean - full, classified: inflates (interval below 0), lower (above 0), none
    (contains 0), few (no interval), missing (no value)."""
    metric: str
    kind: str
    clean: str
    full: str
    diff: str


def _metric(subs: dict[str, Any], subset: str, metric: str) -> dict[str, Any]:
    return (subs.get(subset) or {}).get("metrics", {}).get(metric) or {}


def _effect(task: dict[str, Any], metric: str) -> _Effect:
    subs = task["subsets"]
    diff = (task.get("clean_minus_full") or {}).get(metric) or {}
    lo, hi = diff.get("ci95") or [None, None]
    if diff.get("value") is None:
        kind = "missing"
    elif lo is None:
        kind = "few"
    else:
        kind = "inflates" if hi < 0 else ("lower" if lo > 0 else "none")
    return _Effect(metric, kind, percent(_metric(subs, "clean", metric).get("value")),
                   percent(_metric(subs, "full", metric).get("value")), percent_ci(diff, signed=True))


def _effect_sentence(e: _Effect) -> str:
    if e.kind == "inflates":
        return (f"Contamination inflates {e.metric}: {e.full} on all groups, {e.clean} on the clean ones, "
                f"clean - full {e.diff} points (95% interval excludes 0).")
    return (f"The dirty groups score lower than the clean ones on {e.metric}: {e.clean} clean vs {e.full} "
            f"full, clean - full {e.diff} points (95% interval excludes 0): contamination does not inflate "
            "it.")


def _one_metric_verdict(e: _Effect, part: str) -> str:
    """The sentence of a task with one metric: the effect and the dirty share in one."""
    if e.kind == "missing":
        return f"{part}; {e.metric} has no value on one of the subsets."
    if e.kind == "few":
        return (f"{part}: {e.metric} is {e.clean} on the clean groups and {e.full} on all, a difference of "
                f"{e.diff} points; too few groups on one side to tell it from chance.")
    if e.kind == "inflates":
        return (f"Contamination inflates {e.metric}: {e.full} on all groups, {e.clean} on the clean ones, "
                f"clean - full {e.diff} points (95% interval excludes 0); {part}.")
    if e.kind == "lower":
        return (f"The dirty groups score lower than the clean ones: {e.metric} {e.clean} clean vs {e.full} "
                f"full, clean - full {e.diff} points (95% interval excludes 0): contamination does not "
                f"inflate it; {part}.")
    return (f"No measurable effect of contamination on {e.metric}: {e.clean} clean vs {e.full} full, "
            f"clean - full {e.diff} points (the 95% interval contains 0); {part}.")


def _and_or(items: list[str], word: str) -> str:
    """"a", "a or b", "a, b or c"."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {word} {items[-1]}"


def relative_href(target: str | Path, from_dir: str | Path) -> str:
    """``target`` as a link from a report in ``from_dir`` (relative, '/'-separated: it keeps working
    when the folders are moved or served together)."""
    return Path(os.path.relpath(Path(target).resolve(), Path(from_dir).resolve())).as_posix()


def prep_links(prep_dir: str | Path, splits: Sequence[tuple[str, str]], at: str | Path) -> list[Inline]:
    """Links from a report in ``at`` to PREP_DIR's summary and to each (task, split)'s own report,
    where those files exist."""
    prep = Path(prep_dir)
    out: list[Inline] = []
    if (prep / "summary.html").is_file():
        out.append(Link("the decontamination summary", relative_href(prep / "summary.html", at)))
    for task, split in splits:
        page = prep / task / split / "report.html"
        if page.is_file():
            out.append(Link(f"{task} / {split} contamination report", relative_href(page, at)))
    return out


def link_line(lead: str, links: Sequence[Inline]) -> Paragraph:
    """"Lead: link, link, link." as one paragraph."""
    pieces: list[Any] = [lead]
    for i, link in enumerate(links):
        pieces += ([", "] if i else []) + (list(link) if not isinstance(link, (str, Link)) else [link])
    return Paragraph([*pieces, "."])


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


def report_blocks(results: dict[str, Any], at: str | Path | None = None) -> list[Block]:
    """The evaluation report as one document model: report.md, report.html and the printed
    summary all render these blocks, so they cannot drift apart. First the answer (per task a
    verdict and the clean / full / dirty table), then the method, folded. ``at``: the folder the report
    is read from, for its links to PREP_DIR's reports (none without it)."""
    model = results["model"]
    blocks: list[Block] = [Heading(1, f"Evaluation: {model['name']}")]
    if at is not None and results.get("prep_dir"):
        links = prep_links(results["prep_dir"], [(t, e["split"]) for t, e in results["tasks"].items()], at)
        if links:
            blocks.append(link_line("Which items are dirty, and why: ", links))
    for task, entry in results["tasks"].items():
        header, rows = table_rows(entry)
        groups = {s: entry["subsets"][s]["groups"] for s in entry["subsets"]}
        blocks.append(Heading(2, f"{task} ({entry['split']})"))
        blocks.append(Paragraph(verdict(entry)))
        blocks += [Paragraph(n) for n in selection_notes(entry)]
        blocks.append(Table(header, rows))
        blocks.append(Paragraph("groups: " + ", ".join(f"{s} {n}" for s, n in groups.items())))
    method: list[Block] = [
        Paragraph(["Model ", Code(str(model["source"])),
                   f" on {model['device']} ({model['dtype']}). Values in percent with 95% bootstrap "
                   f"intervals ({results['bootstrap']['samples']} resamples of question groups, "
                   f"seed {results['bootstrap']['seed']}); no interval where fewer than "
                   f"{M.MIN_GROUPS_FOR_INTERVAL} groups stand behind a value (\"too few groups\")."]),
        Paragraph(["Metric families: ", Code("lm_eval/*"), " are lm-evaluation-harness 0.4's numbers "
                   "(MC-TACO: per-candidate accuracy and pooled F1); ", Code("official/*"), " are CogComp's "
                   "MC-TACO evaluator's (per-question strict accuracy and per-question F1 averaged over "
                   "questions). They differ; do not compare across families."]),
    ]
    up = results.get("upstream")
    if up:
        index = up.get("index")
        where = index.get("path", index.get("dir")) if isinstance(index, dict) else index
        method.append(Paragraph(["Upstream: rule ", Code(str(up.get("rule"))), ", index ",
                                 Code(str(where)), "."]))
    blocks.append(Details("How these numbers were made", method))
    return blocks


def render_markdown(results: dict[str, Any], extra: Sequence[Block] = (),
                    at: str | Path | None = None) -> str:
    """report.md: the evaluation's blocks, then ``extra`` (the analysis summary of
    ``tcqa_data.workflow.evaluate``)."""
    return to_markdown([*report_blocks(results, at), *extra])


def table_figure(tables: dict[str, dict[str, Any]], title: str, primary_only: bool = False) -> Any:
    """The matplotlib figure of ``table_plot``: bars for every value, an error bar only where the value
    has an interval (none at all where there were too few groups: a zero-length bar would read as a
    degenerate interval)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    present = [s for s in SUBSET_ORDER if any(s in t["subsets"] for t in tables.values())]
    labels: list[str] = []
    # subset -> (bar values, (x index, value, lower, upper) of the values that have an interval)
    Interval = tuple[int, float, float, float]
    series: dict[str, tuple[list[float], list[Interval]]] = {s: ([], []) for s in present}
    for task, entry in tables.items():
        names = metric_names(entry)
        for name in names[:1] if primary_only else names:
            labels.append(f"{task}\n{name}")
            for s in present:
                m = (entry["subsets"].get(s) or {}).get("metrics", {}).get(name) or {}
                v = m.get("value")
                lo, hi = m.get("ci95") or [None, None]
                series[s][0].append(v * 100 if v is not None else float("nan"))  # no bar, not a 0 %
                if v is not None and lo is not None and hi is not None:
                    series[s][1].append((len(labels) - 1, v * 100, lo * 100, hi * 100))
    fig, ax = plt.subplots(figsize=(max(5.0, 1.4 * len(labels) + 1.5), 3.2), dpi=100)
    width = 0.8 / len(present)
    colors = {"clean": "#2b8a3e", "full": "#495057", "dirty": "#c92a2a"}
    for k, s in enumerate(present):
        offset = (k - (len(present) - 1) / 2) * width
        vals, intervals = series[s]
        ax.bar([i + offset for i in range(len(labels))], vals, width, label=s, color=colors[s])
        if intervals:
            ax.errorbar([i + offset for i, *_ in intervals], [v for _, v, _, _ in intervals],
                        yerr=[[v - lo for _, v, lo, _ in intervals], [hi - v for _, v, _, hi in intervals]],
                        fmt="none", ecolor="black", elinewidth=1, capsize=3)
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylabel("score (%)")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=8, loc="upper right", bbox_to_anchor=(1.0, 1.0))
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


def table_plot(tables: dict[str, dict[str, Any]], title: str, primary_only: bool = False) -> bytes:
    """Bar chart of clean / full / dirty tables (task -> table): each metric (``primary_only``: the
    task's first) with its 95% interval where it has one. Only the subsets the tables hold are drawn
    and named (a clean-only run: clean alone). PNG."""
    import matplotlib.pyplot as plt

    fig = table_figure(tables, title, primary_only)
    png = png_bytes(fig, dpi=100)  # no metadata: identical results give identical bytes
    plt.close(fig)
    return png


def plot_title(tables: dict[str, dict[str, Any]], what: str) -> str:
    """"<what>: clean vs full vs dirty (95% CI)", naming only the subsets the tables hold."""
    present = [s for s in SUBSET_ORDER if any(s in t["subsets"] for t in tables.values())]
    return f"{what}: {' vs '.join(present)} (95% CI where enough groups)"


def render_plot(results: dict[str, Any]) -> bytes:
    """The evaluation's bar chart: each metric of each task (PNG)."""
    return table_plot(results["tasks"], plot_title(results["tasks"], results["model"]["name"]))


def render_html(results: dict[str, Any], extra: Sequence[Block] = (), at: str | Path | None = None) -> str:
    """report.html: the blocks of report.md, the plot after the tables (the first screen)."""
    blocks = report_blocks(results, at)
    plot = Figure(plot_title(results["tasks"], "scores"), lambda: render_plot(results))
    first = next((i for i, b in enumerate(blocks) if isinstance(b, Details)), len(blocks))
    blocks = [*blocks[:first], plot, *extra, *blocks[first:]]
    return to_html(blocks, title=f"tcqa-data evaluation: {results['model']['name']}")


def write_outputs(out_dir: str | Path, results: dict[str, Any], samples: list[dict[str, Any]],
                  extra: Sequence[Block] = (), at: str | Path | None = None) -> None:
    """All four files, each written atomically; results.json last (its presence = complete). ``extra``:
    blocks both reports carry after the evaluation's own; ``at``: the folder the files will be read
    from (``out_dir`` where not given; a staging folder's final name), for the reports' relative links."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    at = out_dir if at is None else at
    clean = {k: v for k, v in results.items() if not k.startswith("_")}
    write_text_atomic(out_dir / "samples.jsonl",
                      "".join(json.dumps(s, sort_keys=True, ensure_ascii=False) + "\n" for s in samples))
    write_text_atomic(out_dir / "report.md", render_markdown(clean, extra, at))
    write_text_atomic(out_dir / "report.html", render_html(clean, extra, at))
    write_json_atomic(out_dir / "results.json", clean)
