"""The run summary at the PREP_DIR root: every task x split of one ``decontaminate`` run in one table.

``summary.json`` (machine), ``summary.md`` and ``summary.html`` (one block list, two renderings) and
``contamination_report.csv``: one row per task in the CONDA Data Contamination Database's format
(https://huggingface.co/spaces/CONDA-Workshop/Data-Contamination-Database), ready to be added to
its file by a pull request. Both modes (index, stream) write the same files; only the evidence
source differs. No figure: the summary is cheap to write on the stream path.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tcqa_data.decontam.detect.rules import SEMANTIC_TERMS
from tcqa_data.io_utils import write_json_atomic, write_text_atomic
from tcqa_data.report_render import (
    Block,
    Bullets,
    Code,
    Heading,
    Link,
    Paragraph,
    Table,
    to_html,
    to_markdown,
)

# The database's header, byte for byte (its file: `;` delimiters, one row per dataset, subset,
# source and method); the split columns are percentages 0-100, the PR number is the database's.
CONDA_HEADER = ("Evaluation Dataset", "Subset", "Contaminated Source", "Model or corpus", "Train Split",
                "Development Split", "Test Split", "Approach", "Reference", "PR")
CONDA_SPLIT_COLUMNS = {"train": "Train Split", "validation": "Development Split", "test": "Test Split"}
# The method each rule follows (Reference column): text alignment is Llama 2's appendix A.6, MinHash
# windows near-duplicate detection (Lee et al. 2022), n-gram overlap GPT-3's appendix C.
REFERENCE_ALIGNED = "https://arxiv.org/abs/2307.09288"
REFERENCE_MINHASH = "https://arxiv.org/abs/2107.06499"
REFERENCE_NGRAM = "https://arxiv.org/abs/2005.14165"
# rephrased items: LLM Decontaminator (Yang et al. 2023), whose embedding step the semantic tier refines
REFERENCE_SEMANTIC = "https://arxiv.org/abs/2311.04850"
# Where a dirty doc's matches fall besides the template fields (rows of the field table)
OUTSIDE_FIELDS = "(template text outside the fields)"
NO_MATCH = "(no n-gram or aligned match: group policy or MinHash)"


def _pct(part: int, whole: int) -> float | None:
    return round(100.0 * part / whole, 2) if whole else None


def conda_role(role: str, split: str, declared: bool) -> str:
    """Which CONDA split column a split fills: its declared role (validation, test), else a guess
    from its name (a ``--data-files`` split the task does not declare: ``train*`` is train,
    ``valid*``/``dev*`` development, anything else test)."""
    if declared and role in CONDA_SPLIT_COLUMNS:
        return role
    name = split.lower()
    if name.startswith("train"):
        return "train"
    if name.startswith(("valid", "dev")):
        return "validation"
    return "test"


# `datasets`' builders of local files: a dataset_path that names a file format, not a dataset
LOCAL_BUILDERS = frozenset({"json", "csv", "parquet", "text", "arrow", "pandas", "webdataset"})


def dataset_id(spec: Any) -> tuple[str, str]:
    """(hub dataset id, config) of a task, as the database names evaluation datasets; a task without
    a hub dataset (none given, or local files read by a builder such as ``json``) is named by its
    task name. A config named ``default`` is no subset."""
    lm_task = getattr(spec, "lm_task", None)
    config = getattr(lm_task, "config", None) if lm_task is not None else spec
    path = getattr(config, "dataset_path", None)
    if not path or str(path) in LOCAL_BUILDERS:
        return spec.task, ""
    name = getattr(config, "dataset_name", None) or ""
    return str(path), "" if name == "default" else str(name)


def split_row(spec: Any, split: str, role: str, declared: bool, ngram: int,
              contamination: pa.Table) -> dict[str, Any]:
    """One task x split of the summary, from its ``contamination.parquet`` table."""
    dirty = contamination.column("dirty").to_numpy(zero_copy_only=False).astype(bool)
    gids = contamination.column("group_id").to_numpy()
    docs = len(dirty)
    groups = len(np.unique(gids))
    dirty_groups = len(np.unique(gids[dirty]))
    # the list columns of the dirty docs only (a few percent of a split): Python objects are the cost
    c = contamination.filter(pa.array(dirty)).select(
        [n for n in ("field_names", "field_matched_words", "matched_words", "aligned_field", "aligned_words")
         if n in contamination.column_names]).to_pydict()
    fields = list(spec.query_fields())
    where = {f: 0 for f in fields}
    outside = no_match = 0
    aligned_field = c.get("aligned_field")
    aligned_words = c.get("aligned_words")
    for i in range(len(c["matched_words"])):
        hit = {f for f, m in zip(c["field_names"][i], c["field_matched_words"][i], strict=True) if m > 0}
        # n-gram matched words that no field holds, or an aligned span mostly outside the fields
        off = c["matched_words"][i] > sum(c["field_matched_words"][i])
        if aligned_field is not None and aligned_words[i]:
            if aligned_field[i] in where:
                hit.add(aligned_field[i])
            else:
                off = True
        for f in hit:
            where[f] += 1
        if off:
            outside += 1
        elif not hit:
            no_match += 1
    dataset, subset = dataset_id(spec)
    return {
        "task": spec.task, "split": split, "role": conda_role(role, split, declared),
        "dataset": dataset, "subset": subset, "ngram": ngram, "group_by": list(spec.group_by),
        "docs": docs, "dirty_docs": int(dirty.sum()), "dirty_docs_pct": _pct(int(dirty.sum()), docs),
        "groups": groups, "dirty_groups": dirty_groups, "dirty_groups_pct": _pct(dirty_groups, groups),
        "untestable_docs": int(pc.sum(pc.equal(contamination.column("status"), "untestable")).as_py() or 0),
        "fields": fields,
        # dirty docs whose matches fall in each field (a doc may count in several)
        "dirty_docs_matched_in": {**where, OUTSIDE_FIELDS: outside, NO_MATCH: no_match},
        **({"dirty_docs_by_tier": tier_counts(contamination)}
           if "semantic_score" in contamination.column_names else {}),
        **({"semantic_dirty_docs_by_source": semantic_source_counts(contamination)}
           if "semantic_source" in contamination.column_names else {}),
    }


def tier_counts(contamination: pa.Table) -> dict[str, int]:
    """Docs the rule flagged (``doc_dirty``) by which tier's clauses fired: lexical only (n-grams,
    alignment, MinHash), semantic only, or both."""
    fired = contamination.column("rule_fired").to_pylist()
    flagged = contamination.column("doc_dirty").to_pylist()
    out = {"lexical_only": 0, "semantic_only": 0, "both": 0}
    for f, d in zip(fired, flagged, strict=True):
        if not d:
            continue
        semantic_clause = [_semantic_clause(c) for c in f.split("|")]
        sem, lex = any(semantic_clause), not all(semantic_clause)
        out["both" if sem and lex else "semantic_only" if sem else "lexical_only"] += 1
    return out


def semantic_source_counts(contamination: pa.Table) -> dict[str, int]:
    """Docs the rule flagged through a semantic clause, by where their best span came from
    (``semantic_source``): a rare-word candidate window, or text in another script (a translation
    read by a multilingual model)."""
    fired = contamination.column("rule_fired").to_pylist()
    flagged = contamination.column("doc_dirty").to_pylist()
    source = contamination.column("semantic_source").to_pylist()
    out = {"rare-words": 0, "foreign-script": 0}
    for f, d, s in zip(fired, flagged, source, strict=True):
        if d and s in out and any(_semantic_clause(c) for c in f.split("|")):
            out[s] += 1
    return out


def _semantic_clause(clause: str) -> bool:
    """Whether a fired clause of ``rule_fired`` has a semantic term."""
    return any(t in clause for t in SEMANTIC_TERMS)


def reference_for(rule: Any) -> str:
    """The method paper a rule follows, for the database's Reference column (a rule with a semantic
    term: its lexical method's paper, then LLM Decontaminator's)."""
    if rule.uses_alignment:
        lexical = REFERENCE_ALIGNED
    elif rule.uses_minhash and not rule.uses_ngrams:
        lexical = REFERENCE_MINHASH
    else:
        lexical = REFERENCE_NGRAM
    if getattr(rule, "uses_semantic", False):
        return REFERENCE_SEMANTIC if not rule.uses_ngrams and not rule.uses_minhash else \
            f"{lexical} {REFERENCE_SEMANTIC}"
    return lexical


def build_summary(rows: Sequence[Mapping[str, Any]], *, config: Mapping[str, Any],
                  evidence: Mapping[str, Any], contaminated_source: str, reference: str,
                  versions: Mapping[str, Any]) -> dict[str, Any]:
    """summary.json: the run's settings, where its evidence came from, and one row per task x split."""
    totals = {k: sum(r[k] for r in rows) for k in ("docs", "dirty_docs", "groups", "dirty_groups",
                                                   "untestable_docs")}
    totals["dirty_docs_pct"] = _pct(totals["dirty_docs"], totals["docs"])
    totals["dirty_groups_pct"] = _pct(totals["dirty_groups"], totals["groups"])
    return {
        **versions,
        "rule": config["rule"], "group_policy": config["group_policy"],
        "normalization": config["normalization"], "max_corpus_freq": config["max_corpus_freq"],
        "warnings": list(config.get("warnings", [])),
        "evidence": dict(evidence),
        "conda": {"contaminated_source": contaminated_source, "reference": reference,
                  "approach": "data-based", "model_or_corpus": "corpus"},
        "rows": [dict(r) for r in rows],
        "totals": totals,
    }


def conda_rows(summary: Mapping[str, Any]) -> list[list[str]]:
    """One database row per task: each split's dirty docs in percent, in its split column (two
    decimals, as the database's data-based rows give them, e.g. 0.03); a column whose split was not
    checked stays empty, and so does PR (the database numbers it). Two splits of one role (local
    files the task does not declare) are pooled: their dirty docs over their docs."""
    c = summary["conda"]
    per_task: dict[str, dict[str, Any]] = {}
    for r in summary["rows"]:
        t = per_task.setdefault(r["task"], {"dataset": r["dataset"], "subset": r["subset"], "roles": {}})
        d, n = t["roles"].get(r["role"], (0, 0))
        t["roles"][r["role"]] = (d + r["dirty_docs"], n + r["docs"])
    out = []
    for t in per_task.values():
        cells = []
        for role in CONDA_SPLIT_COLUMNS:
            d, n = t["roles"].get(role, (0, 0))
            cells.append(f"{100.0 * d / n:.2f}" if n else "")
        out.append([t["dataset"], t["subset"], c["contaminated_source"], c["model_or_corpus"], *cells,
                    c["approach"], c["reference"], ""])
    return out


def conda_csv(summary: Mapping[str, Any]) -> str:
    """contamination_report.csv: the header, then one row per task; `;`-separated, a field holding
    `;`, a quote or a line break quoted as the database's reader (pandas, csv) expects."""
    buf = io.StringIO()
    w = csv.writer(buf, delimiter=";", quoting=csv.QUOTE_MINIMAL, lineterminator="\n")
    w.writerow(CONDA_HEADER)
    w.writerows(conda_rows(summary))
    return buf.getvalue()


def _fmt_pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}"


def summary_blocks(summary: Mapping[str, Any]) -> list[Block]:
    """summary.md and summary.html: the settings, the evidence source, one table of counts and one of
    where the matches fall."""
    ev = summary["evidence"]
    blocks: list[Block] = [Heading(1, "Contamination summary: every task x split")]
    if summary["warnings"]:
        blocks += [Heading(2, "Warnings"), Bullets(list(summary["warnings"]))]
    blocks.append(Bullets([
        ["Rule: ", Code(summary["rule"]), " (group policy ", Code(summary["group_policy"]),
         ", normalization ", Code(summary["normalization"]), ")"],
        ["Evidence: ", Code(ev["source"]), f" ({ev['mode']} mode)"],
        ["CONDA row: ", Code("contamination_report.csv"), " (contaminated source ",
         Code(summary["conda"]["contaminated_source"]), ")"],
    ]))
    rows = summary["rows"]

    def counts(r: Mapping[str, Any]) -> list[str]:
        return [str(r["docs"]), str(r["dirty_docs"]), _fmt_pct(r["dirty_docs_pct"]), str(r["groups"]),
                str(r["dirty_groups"]), _fmt_pct(r["dirty_groups_pct"]), str(r["untestable_docs"])]

    blocks += [Heading(2, "Counts"),
               Table(["task", "split", "docs", "dirty docs", "dirty %", "groups", "dirty groups",
                      "dirty groups %", "untestable", "n"],
                     # each split's own report, relative: PREP_DIR/<task>/<split>/report.html
                     [[[Link(r["task"], f"{r['task']}/{r['split']}/report.html")], r["split"], *counts(r),
                       str(r["ngram"])] for r in rows]
                     + [["all", "", *counts(summary["totals"]), ""]],
                     align=["l", "l", "r", "r", "r", "r", "r", "r", "r", "r"]),
               Paragraph("Groups: question groups of tasks with group_by (whole groups are dirty or clean), "
                         "else each doc is its own group. Untestable: queries shorter than n words that no "
                         "other rule term tested (kept in the clean split).")]
    blocks += [Heading(2, "Where the matches fall"),
               Table(["task", "split", "field", "dirty docs with matches there"],
                     [[r["task"], r["split"], f, str(k)] for r in rows
                      for f, k in r["dirty_docs_matched_in"].items()
                      if f in r["fields"] or k],  # the two catch-alls only where they hold docs
                     align=["l", "l", "l", "r"]),
               Paragraph("A dirty doc counts under every template field its n-gram (or aligned) matches fall "
                         "in, so a row's fields may add up to more than its dirty docs.")]
    tiers = [r for r in rows if "dirty_docs_by_tier" in r]
    if tiers:
        blocks += [Heading(2, "Which tier flagged the docs"),
                   Table(["task", "split", "lexical only", "semantic only", "both"],
                         [[r["task"], r["split"], *(str(r["dirty_docs_by_tier"][k])
                                                    for k in ("lexical_only", "semantic_only", "both"))]
                          for r in tiers], align=["l", "l", "r", "r", "r"]),
                   Paragraph("Docs the rule flagged (before the group policy), by the clauses that fired: "
                             "lexical (n-gram, alignment, MinHash) or semantic (a rephrasing found by the "
                             "embedding model among rare-word candidate windows, or, with a multilingual "
                             "model, a translation in another script).")]
        if any(r.get("semantic_dirty_docs_by_source", {}).get("foreign-script") for r in tiers):
            blocks += [Table(["task", "split", "semantic: rare-word windows", "semantic: another script"],
                             [[r["task"], r["split"], *(str(r["semantic_dirty_docs_by_source"][k])
                                                        for k in ("rare-words", "foreign-script"))]
                              for r in tiers if "semantic_dirty_docs_by_source" in r],
                             align=["l", "l", "r", "r"])]
    return blocks


def write_summary(out: str | Path, summary: Mapping[str, Any]) -> None:
    """Write summary.json, summary.md, summary.html and contamination_report.csv into ``out``."""
    out = Path(out)
    write_json_atomic(out / "summary.json", summary)
    blocks = summary_blocks(summary)
    write_text_atomic(out / "summary.md", to_markdown(blocks))
    write_text_atomic(out / "summary.html", to_html(blocks, title="Contamination summary"))
    write_text_atomic(out / "contamination_report.csv", conda_csv(summary))
