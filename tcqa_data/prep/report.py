"""Per-split contamination reports: report.json (machine-readable), report.md and report.html.

Everything in a report is a function of the inputs (no timestamps, sorted keys, rounded floats,
PNGs without the Software/date metadata), so reruns give byte-identical files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from tcqa_data.io_utils import write_json_atomic, write_text_atomic
from tcqa_data.prep.ground_truth import SplitLabels
from tcqa_data.prep.taskspec import TaskSpec
from tcqa_data.report_render import (
    Block,
    Bullets,
    Code,
    Details,
    Figure,
    Heading,
    Link,
    Paragraph,
    Quote,
    Table,
    highlight,
    png_bytes,
    share,
    to_html,
    to_markdown,
)

TOP_K = 20
UNTESTABLE_LIST = 50
FRACTION_BINS = [round(x, 1) for x in np.linspace(0.0, 1.0, 11)]


def _r(x: float) -> float | None:
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return None
    return round(float(x), 6)


def summarize(spec: TaskSpec, split: str, source: str, full: pa.Table, cont: pa.Table,
              config: dict[str, Any], index_summary: dict[str, Any],
              labels: SplitLabels | None = None) -> dict[str, Any]:
    """The report.json content; ``labels`` (the split's ``decontaminate --labels``) adds
    ``ground_truth``: the flags measured against them (``prep/flag_quality.py``)."""
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
        # queries shorter than n matched whole, as one word sequence (--short-min-words)
        "short_whole_docs": int((testable & (np.asarray(c["query_words"]) < np.asarray(c["ngram_n"]))).sum()),
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
        # shown first in report.md/html: an empty index, MinHash evidence left out
        "warnings": list(config.get("warnings", [])),
        "method": {
            **{k: v for k, v in config.items() if k != "warnings"},
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
        **({"semantic_pairs": _semantic_pairs(c, config)} if "semantic_score" in c else {}),
        **({"ground_truth": _ground_truth(c, config, labels)} if labels is not None else {}),
    }


def _ground_truth(c: dict[str, list], config: dict[str, Any], labels: SplitLabels) -> dict[str, Any]:
    from tcqa_data.decontam.detect.rules import Rule
    from tcqa_data.prep.flag_quality import measure

    return measure(c, labels, Rule.parse(config["rule"]))


def _semantic_pairs(c: dict[str, list], config: dict[str, Any]) -> list[dict[str, Any]]:
    """The semantic tier's best pairs (one per group, by ``semantic_score``, highest first): the item and its
    best corpus window, with the rare words they share located in both (character spans)."""
    import regex

    from tcqa_data.decontam.core.normalize import token_char_spans, tokenize

    scheme = config.get("normalization") or "janitor"
    have = [i for i, x in enumerate(c["semantic_score"]) if x is not None]
    have.sort(key=lambda i: (-c["semantic_score"][i], i))
    out, seen = [], set()
    for i in have:
        if c["group_id"][i] in seen:
            continue
        seen.add(c["group_id"][i])
        shared = set(c["semantic_shared_words"][i])
        query, window = c["query"][i], c["semantic_window"][i] or ""
        tokens = tokenize(query, scheme)
        q_spans = [list(s) for s, t in zip(token_char_spans(query, scheme), tokens, strict=False)
                   if t in shared]
        w_spans = [[m.start(), m.end()] for m in regex.finditer(r"\S+", window) if m.group(0) in shared]
        out.append({"doc_id": c["doc_id"][i], "group_id": c["group_id"][i],
                    "score": _r(c["semantic_score"][i]), "cosine": _r(c["semantic_cosine"][i]),
                    "kept": _r(c["semantic_kept"][i]), "doc_dirty": c["doc_dirty"][i],
                    "rule_fired": c["rule_fired"][i], "query": query, "query_marks": q_spans,
                    "corpus_ref": c["semantic_doc_ref"][i], "corpus_span_words": c["semantic_span"][i],
                    "corpus_window": window, "window_marks": w_spans,
                    "shared_words": c["semantic_shared_words"][i],
                    "source": c["semantic_source"][i] if "semantic_source" in c else None,
                    **({"judge": c["semantic_judge"][i],
                        "judge_probability": c["semantic_judge_probability"][i]}
                       if "semantic_judge" in c else {})})
        if len(out) >= TOP_K:
            break
    return out


def _judge_cell(pair: dict[str, Any]) -> list[str]:
    """The judge's verdict on a pair and its P(same item), or a dash where it was not asked."""
    if pair.get("judge") is None:
        return ["-"]
    return [f"{'yes' if pair['judge'] else 'no'} {_fmt(pair['judge_probability'])}"]


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
        if c.get("aligned_text") and c["aligned_text"][i]:
            # edited-contamination evidence (decontam/detect/align.py): the corpus span and its mismatches
            row.update({key: c[key][i] for key in (
                "aligned_ref", "aligned_span", "aligned_text", "aligned_text_marks", "aligned_query_spans",
                "aligned_mismatches", "aligned_field", "aligned_words")})
            row["aligned_share"] = _r(c["aligned_share"][i])
            # the share an `aligned-field>=` term tests: within the best-covered field, not the query
            if c.get("aligned_field_share"):
                row["aligned_field_share"] = _r(c["aligned_field_share"][i])
        if not row["match_spans"] and row["minhash_query_window"]:
            # flagged by MinHash alone: show the query window that matched instead
            start = row["query"].find(row["minhash_query_window"])
            if start >= 0:
                row["minhash_span"] = [start, start + len(row["minhash_query_window"])]
        out.append(row)
        if len(out) >= TOP_K:
            break
    return out


# ---- rendering: one document model (tcqa_data.report_render) rendered to report.md and report.html ----
def _mh_spans(t: dict[str, Any]) -> list[list[int]]:
    return [t["minhash_span"]] if t.get("minhash_span") else []


def _fmt(x: Any) -> str:
    return "n/a" if x is None else str(x)


def _fraction_plot(rep: dict[str, Any]) -> bytes:
    d = rep["distributions"]["ngram_fraction"]
    b = d["bins"]
    mids = [(x + y) / 2 for x, y in zip(b[:-1], b[1:], strict=True)]
    return _docs_histogram(mids, d["counts"], f"fraction of query {rep['method']['ngram']}-grams found in "
                           "the corpus", width=0.09, color="#c44")


def _longest_plot(rep: dict[str, Any]) -> bytes:
    d = rep["distributions"]["longest_match"]
    lb = d["bins"]
    labels = [f"{x}-{y - 1}" if y - 1 > x else f"{x}" for x, y in zip(lb[:-1], lb[1:], strict=False)]
    return _docs_histogram(range(len(labels)), d["counts"], "longest run of consecutive matched words",
                           labels=labels, color="#48c")


def _docs_histogram(x: Any, counts: list[int], xlabel: str, labels: list[str] | None = None,
                    **bar: Any) -> bytes:
    """Docs per bin as bars (symlog count axis), PNG; ``labels``: the bins' tick labels."""
    from matplotlib.figure import Figure as MplFigure

    fig = MplFigure(figsize=(6, 3))
    ax = fig.subplots()
    ax.bar(x, counts, **bar)
    if labels is not None:
        ax.set_xticks(range(len(labels)), labels, rotation=30, fontsize=7)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("docs")
    ax.set_yscale("symlog")
    fig.tight_layout()
    return png_bytes(fig)


def _clean_share_plot(per: dict[str, dict[str, Any]]) -> bytes:
    from matplotlib.figure import Figure as MplFigure

    names = list(per)
    fig = MplFigure(figsize=(6, 0.4 * len(names) + 1))
    ax = fig.subplots()
    shares = [100 * (per[v]["clean_share_groups"] or 0.0) for v in names]
    ax.barh(range(len(names)), shares, color="#4a4")
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.set_xlim(0, 100)
    ax.set_xlabel("clean share of question groups (%)")
    fig.tight_layout()
    return png_bytes(fig)


def _warnings(rep: dict[str, Any]) -> list[Block]:
    """Things a reader must see before any number: an empty index, MinHash evidence left out."""
    notes = rep.get("warnings") or []
    if not notes:
        return []
    return [Heading(2, "Warnings"), Bullets(list(notes))]


def _method(rep: dict[str, Any]) -> Bullets:
    m = rep["method"]
    idx = m["index"]
    return Bullets([
        ["Data: ", Code(rep["source"])],
        ["Index: ", Code(str(idx.get("path"))), " (normalization ", Code(m["normalization"]),
         f", n-gram sizes {idx.get('ngram_sizes', '?')}, {_fmt(idx.get('counts', {}).get('docs'))} docs)"],
        ["Rule: ", Code(m["rule"]), f" ({m['rule_help']}); n = {m['ngram']} ({m['ngram_choice']})"],
        ["Query template: ", Code(str(m["query_template"]))],
        ["Group policy: ", Code(m["group_policy"]),
         f" (group_by {m['group_by'] or 'none: each doc is its own group'})"],
        f"Max corpus frequency: {m['max_corpus_freq'] if m['max_corpus_freq'] is not None else 'none'}",
        f"MinHash evidence: {m.get('minhash_evidence', 'on' if m.get('minhash_available') else 'off')}",
        f"Untestable: {m['untestable_policy']}",
    ])


def _counts(rep: dict[str, Any]) -> list[Block]:
    c = rep["counts"]
    return [
        Heading(2, "Counts"),
        Table(["", "docs", "groups"], [
            ["total", str(c["docs"]), str(c["groups"])],
            ["dirty", str(c["dirty_docs"]), str(c["dirty_groups"])],
            ["clean", str(c["clean_docs"]), str(c["clean_groups"])],
            ["flagged by the rule itself", str(c["docs_flagged_by_rule"]), ""],
            ["dirty only through the group policy", str(c["docs_dirty_by_group_policy_only"]), ""],
            ["untestable (query < n words, no other test; kept in clean)", str(c["untestable_docs"]), ""],
            ["shorter than n words, not tested (n-grams cannot; not matched whole)",
             str(c["ngram_untestable_docs"]), ""],
            ["shorter than n words, matched whole (tested)", str(c.get("short_whole_docs", 0)), ""],
        ]),
        Paragraph(f"Clean share: {share(c['clean_share_docs'])} of docs, "
                  f"{share(c['clean_share_groups'])} of groups."),
    ]


def _evidence(t: dict[str, Any]) -> list[Block]:
    """The evidence shown for one contaminated doc: a summary line, then the query with the matched
    words marked. Further per-doc evidence (e.g. aligned corpus spans) goes here, as more blocks."""
    refs = ", ".join(t["matched_doc_refs"]) or "-"
    summary: list[str | Code] = [
        f"doc {t['doc_id']} (group {t['group_id']}): {t['ngram_hits']}/{t['ngram_total']} n-grams, "
        f"longest match {t['longest_match']} words, MinHash {_fmt(t['minhash_sim'])}, rule ",
        Code(t["rule_fired"] or "-"), f", mostly from field {t['match_field'] or '-'}; corpus docs {refs}"]
    spans = t["match_spans"] or _mh_spans(t) or t.get("aligned_query_spans") or []
    blocks: list[Block] = [Paragraph(summary), Quote(highlight(t["query"], spans))]
    if t.get("aligned_text"):
        s, e = t["aligned_span"]
        field = t["aligned_field"] or "-"
        # both shares, named: `aligned>=` tests the query's, `aligned-field>=` the field's
        in_field = (f", {share(t['aligned_field_share'])} of field {field}"
                    if t.get("aligned_field_share") is not None else f", field {field}")
        blocks += [Paragraph(
            [f"aligned corpus span: {t['aligned_ref']} chars {s}-{e}: {t['aligned_words']} query words "
             f"contaminated ({share(t['aligned_share'])} of the query{in_field}), "
             f"{t['aligned_mismatches']} mismatched tokens; corpus words that differ are marked"]),
            Quote(highlight(t["aligned_text"], t["aligned_text_marks"]))]
    return blocks


def build_document(rep: dict[str, Any]) -> list[Block]:
    """The whole report as blocks; report.md and report.html are two renderings of this list."""
    blocks: list[Block] = [Heading(1, f"Contamination report: {rep['task']} / {rep['split']}")]
    # PREP_DIR/<task>/<split>/report.html: the run's summary is two folders up
    blocks.append(Paragraph(["Every task and split of this run: ",
                             Link("the decontamination summary", "../../summary.html"), "."]))
    blocks += _warnings(rep)
    c = rep["counts"]
    blocks.append(Paragraph(
        f"{c['dirty_groups']} of {c['groups']} question groups ({share(1 - c['clean_share_groups'])}) and "
        f"{c['dirty_docs']} of {c['docs']} docs are dirty under the rule "
        f"{rep['method']['rule']}; the other {c['clean_docs']} docs form the clean split."
        if c["groups"] else "The split holds no docs."))
    if "ground_truth" in rep:  # measured against the user's labels: the answer they asked for, early
        from tcqa_data.prep.flag_quality import report_blocks

        blocks += report_blocks(rep["ground_truth"], rep["method"]["group_policy"])
    blocks += _counts(rep)
    blocks.append(Details("How the docs were tested", [_method(rep)]))
    if rep["field_attribution"]:
        blocks += [Heading(2, "Where matches come from"),
                   Table(["field", "words", "matched words", "docs mostly from it"],
                         [[f, str(e["words"]), str(e["matched_words"]), str(e["docs_mostly_from_field"])]
                          for f, e in rep["field_attribution"].items()])]
    blocks += [Heading(2, "Distributions"),
               Figure("Distribution of n-gram overlap fraction (testable docs)",
                      lambda: _fraction_plot(rep)),
               Figure("Distribution of longest match", lambda: _longest_plot(rep))]
    for fld, per in sorted(rep["by"].items()):
        blocks += [Heading(2, f"Clean share by {fld}"),
                   Table([fld, "docs", "groups", "dirty groups", "clean share"],
                         [[v, str(e["docs"]), str(e["groups"]), str(e["dirty_groups"]),
                           share(e["clean_share_groups"])] for v, e in per.items()]),
                   Figure(f"Clean share by {fld}", lambda per=per: _clean_share_plot(per))]
    blocks.append(Heading(2, "Top contaminated docs (one per group; matched text highlighted: n-gram "
                             "matches, or the MinHash-matched window when only MinHash fired)"))
    if not rep["top_contaminated"]:
        blocks.append(Paragraph("None."))
    for t in rep["top_contaminated"]:
        blocks += _evidence(t)
    if "semantic_pairs" in rep:
        from tcqa_data.decontam.semantic.matches import KEPT_WEIGHT

        # with --judge: its verdict and P(same item) beside the score
        judged = ["judge", "r"] if any("judge" in t for t in rep["semantic_pairs"]) else []
        blocks += [Heading(2, f"Semantic tier: best item / corpus window pairs (by score: "
                              f"{1 - KEPT_WEIGHT:g} x cosine + {KEPT_WEIGHT:g} x kept share of the item's "
                              "particulars, rare words and numbers; shared ones highlighted; the window as "
                              "normalized text; for a window in another script, kept is how much nearer it "
                              "is to this item than to any other)"),
                   Table(["doc", "score", "cosine", "kept", *judged[:1], "flagged", "benchmark item",
                          "corpus window"],
                         [[str(t["doc_id"]), _fmt(t["score"]), _fmt(t["cosine"]), _fmt(t["kept"]),
                           *_judge_cell(t)[:len(judged)],
                           "yes" if t["doc_dirty"] else "no",
                           highlight(t["query"], t["query_marks"]),
                           [f"{t['corpus_ref']} words {'-'.join(map(str, t['corpus_span_words']))}"
                            f"{' (another script)' if t.get('source') == 'foreign-script' else ''}: ",
                            *highlight(t["corpus_window"], t["window_marks"])]]
                          for t in rep["semantic_pairs"]],
                         align=["r", "r", "r", "r", *judged[1:], "l", "l", "l"])
                   if rep["semantic_pairs"] else Paragraph("No candidate window for any item.")]
    if rep["untestable_doc_ids"]:
        blocks += [Heading(2, "Untestable docs (first ids)"),
                   Paragraph(", ".join(map(str, rep["untestable_doc_ids"])))]
    return blocks


def write_reports(spec: TaskSpec, split: str, source: str, full: pa.Table, cont: pa.Table,
                  split_dir: str | Path, *, config: dict[str, Any], index_summary: dict[str, Any],
                  labels: SplitLabels | None = None) -> dict[str, Any]:
    """Write report.json/md/html into ``split_dir``; return the counts (for the prep manifest).
    ``labels``: as :func:`summarize` takes them (the counts do not change)."""
    rep = summarize(spec, split, source, full, cont, config, index_summary, labels)
    split_dir = Path(split_dir)
    write_json_atomic(split_dir / "report.json", rep)
    blocks = build_document(rep)  # one document, two renderings
    write_text_atomic(split_dir / "report.md", to_markdown(blocks))
    title = f"{rep['task']} / {rep['split']}: contamination"
    write_text_atomic(split_dir / "report.html", to_html(blocks, title=title))
    return rep["counts"]
