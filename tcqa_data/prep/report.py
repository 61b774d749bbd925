"""Per-split contamination reports: report.json (machine-readable), report.md and report.html.

Everything in a report is a function of the inputs (no timestamps, sorted keys, rounded floats,
PNGs without the Software/date metadata), so reruns give byte-identical files.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from tcqa_data.io_utils import write_json_atomic, write_text_atomic
from tcqa_data.prep.taskspec import TaskSpec

TOP_K = 20
UNTESTABLE_LIST = 50
FRACTION_BINS = [round(x, 1) for x in np.linspace(0.0, 1.0, 11)]


def _r(x: float) -> float | None:
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return None
    return round(float(x), 6)


def summarize(spec: TaskSpec, split: str, source: str, full: pa.Table, cont: pa.Table,
              config: dict[str, Any], index_summary: dict[str, Any]) -> dict[str, Any]:
    """The report.json content."""
    c = cont.to_pydict()
    k = len(c["doc_id"])
    dirty = np.asarray(c["dirty"], dtype=bool)
    doc_dirty = np.asarray(c["doc_dirty"], dtype=bool)
    testable = np.asarray(c["testable"], dtype=bool)
    status = c["status"]
    gids = np.asarray(c["group_id"], dtype=np.int64)
    groups = int(gids.max()) + 1 if k else 0
    dirty_groups = len(set(gids[dirty].tolist()))
    frac = np.asarray(c["ngram_fraction"], dtype=np.float64)
    longest = np.asarray(c["longest_match"], dtype=np.int64)
    counts = {
        "docs": k,
        "groups": groups,
        "dirty_docs": int(dirty.sum()),
        "clean_docs": int(k - dirty.sum()),
        "dirty_groups": dirty_groups,
        "clean_groups": groups - dirty_groups,
        "docs_flagged_by_rule": int(doc_dirty.sum()),
        "docs_dirty_by_group_policy_only": int((dirty & ~doc_dirty).sum()),
        "untestable_docs": int(sum(s == "untestable" for s in status)),
        "ngram_untestable_docs": int((~testable).sum()),
        "clean_share_docs": _r(1.0 - dirty.mean()) if k else None,
        "clean_share_groups": _r((groups - dirty_groups) / groups) if groups else None,
    }
    hist_f, _ = np.histogram(frac[testable], bins=FRACTION_BINS)
    lbins = _longest_bins(int(c["ngram_n"][0]) if k else 13, int(longest.max()) if k else 0)
    hist_l, _ = np.histogram(longest[testable], bins=lbins)
    fields: dict[str, dict[str, int]] = {}
    for names, words, matched, mf in zip(c["field_names"], c["field_words"], c["field_matched_words"],
                                         c["match_field"], strict=False):
        for f, w, m in zip(names, words, matched, strict=False):
            e = fields.setdefault(f, {"words": 0, "matched_words": 0, "docs_mostly_from_field": 0})
            e["words"] += w
            e["matched_words"] += m
        if mf:
            e = fields.setdefault(mf, {"words": 0, "matched_words": 0, "docs_mostly_from_field": 0})
            e["docs_mostly_from_field"] += 1
    by: dict[str, Any] = {}
    for f in spec.report_by:
        if f not in full.column_names:
            continue
        values = [str(v) for v in full.column(f).to_pylist()]
        per: dict[str, dict[str, Any]] = {}
        for v in sorted(set(values)):
            m = np.asarray([x == v for x in values])
            g_all = set(gids[m].tolist())
            g_dirty = set(gids[m & dirty].tolist())
            per[v] = {"docs": int(m.sum()), "dirty_docs": int((m & dirty).sum()), "groups": len(g_all),
                      "dirty_groups": len(g_dirty),
                      "clean_share_groups": _r(1 - len(g_dirty) / len(g_all)) if g_all else None}
        by[f] = per
    top = _top_docs(c, full, spec)
    untestable_ids = [i for i, s in zip(c["doc_id"], status, strict=False) if s == "untestable"]
    mh = np.asarray(c["minhash_sim"], dtype=np.float64)
    return {
        "task": spec.task,
        "split": split,
        "source": source,
        "method": {
            **config,
            "index": index_summary,
            "query_template": spec.doc_to_decontamination_query or spec.doc_to_text,
            "attribution_fields": spec.query_fields(),
            "group_by": list(spec.group_by),
        },
        "counts": counts,
        "distributions": {
            "ngram_fraction": {"bins": FRACTION_BINS, "counts": hist_f.tolist(),
                               "mean_testable": _r(frac[testable].mean()) if testable.any() else None},
            "longest_match": {"bins": lbins, "counts": hist_l.tolist(),
                              "max": int(longest.max()) if k else 0},
            "minhash_sim": {"max": _r(np.nanmax(mh)) if k and not np.all(np.isnan(mh)) else None,
                            "docs_with_candidate": int(np.sum(mh >= 0))},
        },
        "field_attribution": fields,
        "by": by,
        "untestable_doc_ids": untestable_ids[:UNTESTABLE_LIST],
        "top_contaminated": top,
    }


def _longest_bins(n: int, mx: int) -> list[int]:
    edges = [0, 1, n, n + 5, n + 10, n + 20, n + 50, n + 100]
    edges = sorted(set(edges))
    if mx + 1 > edges[-1]:
        edges.append(mx + 1)
    return edges


def _top_docs(c: dict[str, list], full: pa.Table, spec: TaskSpec) -> list[dict[str, Any]]:
    k = len(c["doc_id"])
    cand = [i for i in range(k) if c["doc_dirty"][i]]
    mh = [x if x is not None and not np.isnan(x) else -1.0 for x in c["minhash_sim"]]
    # most convincing evidence first; doc_id breaks ties so the order is stable
    cand.sort(key=lambda i: (-c["longest_match"][i], -c["ngram_fraction"][i], -mh[i], i))
    # one doc per group: an MC-TACO group repeats the same query for every candidate answer
    seen: set[int] = set()
    out = []
    extra = [f for f in spec.report_by if f in full.column_names]
    for i in cand:
        g = c["group_id"][i]
        if g in seen:
            continue
        seen.add(g)
        row = {
            "doc_id": c["doc_id"][i], "group_id": g, "query": c["query"][i],
            "match_spans": c["match_spans"][i], "match_fields": c["match_fields"][i],
            "ngram_hits": c["ngram_hits"][i], "ngram_total": c["ngram_total"][i],
            "ngram_fraction": _r(c["ngram_fraction"][i]), "longest_match": c["longest_match"][i],
            "min_doc_freq": c["min_doc_freq"][i], "matched_doc_refs": c["matched_doc_refs"][i],
            "matched_doc_ngrams": c["matched_doc_ngrams"][i], "minhash_sim": _r(c["minhash_sim"][i]),
            "minhash_doc_ref": c["minhash_doc_ref"][i], "minhash_query_window": c["minhash_query_window"][i],
            "rule_fired": c["rule_fired"][i], "match_field": c["match_field"][i],
        }
        for f in extra:
            row[f] = full.column(f)[i].as_py()
        if not row["match_spans"] and row["minhash_query_window"]:
            # flagged by MinHash alone: show the query window that matched instead
            start = row["query"].find(row["minhash_query_window"])
            if start >= 0:
                row["minhash_span"] = [start, start + len(row["minhash_query_window"])]
        out.append(row)
        if len(out) >= TOP_K:
            break
    return out


# ---- rendering ------------------------------------------------------------------------------
def _highlight_html(text: str, spans: list[list[int]]) -> str:
    out, pos = [], 0
    for s, e in sorted(spans):
        if s < pos:
            s = pos
        if e <= s:
            continue
        out.append(html.escape(text[pos:s]))
        out.append(f"<mark>{html.escape(text[s:e])}</mark>")
        pos = e
    out.append(html.escape(text[pos:]))
    return "".join(out).replace("\n", "<br>")


def _highlight_md(text: str, spans: list[list[int]]) -> str:
    out, pos = [], 0
    for s, e in sorted(spans):
        s = max(s, pos)
        if e <= s:
            continue
        out.append(text[pos:s])
        out.append(f"**{text[s:e]}**")
        pos = e
    out.append(text[pos:])
    return "".join(out).replace("\n", " ").replace("|", "\\|")


def _mh_spans(t: dict[str, Any]) -> list[list[int]]:
    return [t["minhash_span"]] if t.get("minhash_span") else []


def _png(fig) -> str:
    buf = io.BytesIO()
    # No Software/creation metadata: the PNG bytes depend only on the data.
    fig.savefig(buf, format="png", dpi=80, metadata={"Software": None})
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _plots(rep: dict[str, Any]) -> list[tuple[str, str]]:
    from matplotlib.figure import Figure

    plots = []
    d = rep["distributions"]
    fig = Figure(figsize=(6, 3))
    ax = fig.subplots()
    b = d["ngram_fraction"]["bins"]
    mids = [(x + y) / 2 for x, y in zip(b[:-1], b[1:], strict=True)]
    ax.bar(mids, d["ngram_fraction"]["counts"], width=0.09, color="#c44")
    ax.set_xlabel(f"fraction of query {rep['method']['ngram']}-grams found in the corpus")
    ax.set_ylabel("docs")
    ax.set_yscale("symlog")
    fig.tight_layout()
    plots.append(("Distribution of n-gram overlap fraction (testable docs)", _png(fig)))
    fig = Figure(figsize=(6, 3))
    ax = fig.subplots()
    lb = d["longest_match"]["bins"]
    labels = [f"{x}-{y - 1}" if y - 1 > x else f"{x}" for x, y in zip(lb[:-1], lb[1:], strict=False)]
    ax.bar(range(len(labels)), d["longest_match"]["counts"], color="#48c")
    ax.set_xticks(range(len(labels)), labels, rotation=30, fontsize=7)
    ax.set_xlabel("longest run of consecutive matched words")
    ax.set_ylabel("docs")
    ax.set_yscale("symlog")
    fig.tight_layout()
    plots.append(("Distribution of longest match", _png(fig)))
    for field, per in sorted(rep["by"].items()):
        names = list(per)
        fig = Figure(figsize=(6, 0.4 * len(names) + 1))
        ax = fig.subplots()
        shares = [per[v]["clean_share_groups"] or 0.0 for v in names]
        ax.barh(range(len(names)), shares, color="#4a4")
        ax.set_yticks(range(len(names)), names, fontsize=8)
        ax.set_xlim(0, 1)
        ax.set_xlabel("clean share of question groups")
        fig.tight_layout()
        plots.append((f"Clean share by {field}", _png(fig)))
    return plots


def render_markdown(rep: dict[str, Any]) -> str:
    m, c = rep["method"], rep["counts"]
    lines = [
        f"# Contamination report: {rep['task']} / {rep['split']}",
        "",
        f"- Data: `{rep['source']}`",
        f"- Index: `{m['index'].get('path')}` (normalization `{m['normalization']}`, "
        f"n-gram sizes {m['index'].get('ngram_sizes', '?')})",
        f"- Rule: `{m['rule']}` ({m['rule_help']}); n = {m['ngram']} ({m['ngram_choice']})",
        f"- Query template: `{m['query_template']!s}`".replace("\n", "\\n"),
        f"- Group policy: `{m['group_policy']}` "
        f"(group_by {m['group_by'] or 'none: each doc is its own group'})",
        f"- Max corpus frequency: {m['max_corpus_freq'] if m['max_corpus_freq'] is not None else 'none'}",
        f"- Untestable: {m['untestable_policy']}",
        "",
        "## Counts",
        "",
        "| | docs | groups |",
        "|---|---:|---:|",
        f"| total | {c['docs']} | {c['groups']} |",
        f"| dirty | {c['dirty_docs']} | {c['dirty_groups']} |",
        f"| clean | {c['clean_docs']} | {c['clean_groups']} |",
        f"| flagged by the rule itself | {c['docs_flagged_by_rule']} | |",
        f"| dirty only through the group policy | {c['docs_dirty_by_group_policy_only']} | |",
        f"| untestable (query < n words, no other test; kept in clean) | {c['untestable_docs']} | |",
        f"| shorter than n words (n-grams cannot test them) | {c['ngram_untestable_docs']} | |",
        "",
        f"Clean share: {c['clean_share_docs']} of docs, {c['clean_share_groups']} of groups.",
        "",
    ]
    if rep["field_attribution"]:
        lines += ["## Where matches come from", "", "| field | words | matched words | docs mostly from it |",
                  "|---|---:|---:|---:|"]
        for f, e in rep["field_attribution"].items():
            lines.append(f"| {f} | {e['words']} | {e['matched_words']} | {e['docs_mostly_from_field']} |")
        lines.append("")
    for field, per in sorted(rep["by"].items()):
        lines += [f"## Clean share by {field}", "",
                  f"| {field} | docs | groups | dirty groups | clean share |", "|---|---:|---:|---:|---:|"]
        for v, e in per.items():
            lines.append(f"| {v} | {e['docs']} | {e['groups']} | {e['dirty_groups']} | "
                         f"{e['clean_share_groups']} |")
        lines.append("")
    lines += ["## Top contaminated docs (one per group; matched text in bold: n-gram matches, or the "
              "MinHash-matched window when only MinHash fired)", ""]
    if not rep["top_contaminated"]:
        lines.append("None.")
    for t in rep["top_contaminated"]:
        lines += [
            f"- doc {t['doc_id']} (group {t['group_id']}): {t['ngram_hits']}/{t['ngram_total']} n-grams, "
            f"longest {t['longest_match']} words, minhash {t['minhash_sim']}, fired `{t['rule_fired']}`, "
            f"from field `{t['match_field']}`; corpus docs {t['matched_doc_refs']}",
            f"  > {_highlight_md(t['query'], t['match_spans'] or _mh_spans(t))}",
        ]
    if rep["untestable_doc_ids"]:
        lines += ["", "## Untestable docs (first ids)", "", ", ".join(map(str, rep["untestable_doc_ids"]))]
    return "\n".join(lines) + "\n"


def render_html(rep: dict[str, Any]) -> str:
    md_head = render_markdown(rep).split("## Counts")[0]
    c = rep["counts"]
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(rep['task'])} / {html.escape(rep['split'])}: contamination</title>",
        "<style>body{font-family:sans-serif;max-width:60em;margin:auto}mark{background:#fc8}"
        "td,th{padding:2px 8px;border-bottom:1px solid #ddd}.q{font-family:serif;margin:4px 0 12px 1em}"
        "</style></head><body>",
        f"<h1>Contamination report: {html.escape(rep['task'])} / {html.escape(rep['split'])}</h1>",
        "<ul>" + "".join(f"<li>{html.escape(x[2:])}</li>" for x in md_head.splitlines() if x.startswith("- "))
        + "</ul>",
        "<h2>Counts</h2><table><tr><th></th><th>docs</th><th>groups</th></tr>",
        f"<tr><td>total</td><td>{c['docs']}</td><td>{c['groups']}</td></tr>",
        f"<tr><td>dirty</td><td>{c['dirty_docs']}</td><td>{c['dirty_groups']}</td></tr>",
        f"<tr><td>clean</td><td>{c['clean_docs']}</td><td>{c['clean_groups']}</td></tr>",
        f"<tr><td>untestable (kept in clean)</td><td>{c['untestable_docs']}</td><td></td></tr></table>",
    ]
    for title, b64 in _plots(rep):
        parts.append(f"<h2>{html.escape(title)}</h2><img alt='{html.escape(title)}' "
                     f"src='data:image/png;base64,{b64}'>")
    parts.append("<h2>Top contaminated docs (matched text highlighted: n-gram matches, or the "
                 "MinHash-matched window when only MinHash fired)</h2>")
    if not rep["top_contaminated"]:
        parts.append("<p>None.</p>")
    for t in rep["top_contaminated"]:
        meta = (f"doc {t['doc_id']} (group {t['group_id']}): {t['ngram_hits']}/{t['ngram_total']} n-grams, "
                f"longest match {t['longest_match']} words, MinHash {t['minhash_sim']}, rule "
                f"{t['rule_fired']}, mostly from field {t['match_field'] or '-'}; corpus docs "
                f"{', '.join(t['matched_doc_refs']) or '-'}")
        quote = _highlight_html(t["query"], t["match_spans"] or _mh_spans(t))
        parts.append(f"<p>{html.escape(meta)}</p><div class='q'>{quote}</div>")
    if rep["untestable_doc_ids"]:
        parts.append("<h2>Untestable docs (first ids)</h2><p>"
                     + ", ".join(map(str, rep["untestable_doc_ids"])) + "</p>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def write_reports(spec: TaskSpec, split: str, source: str, full: pa.Table, cont: pa.Table,
                  split_dir: str | Path, *, config: dict[str, Any], index_summary: dict[str, Any]
                  ) -> dict[str, Any]:
    """Write report.json/md/html into ``split_dir``; return the counts (for the prep manifest)."""
    rep = summarize(spec, split, source, full, cont, config, index_summary)
    split_dir = Path(split_dir)
    write_json_atomic(split_dir / "report.json", rep)
    write_text_atomic(split_dir / "report.md", render_markdown(rep))
    write_text_atomic(split_dir / "report.html", render_html(rep))
    return rep["counts"]
