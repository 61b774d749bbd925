"""The analysis of one model pass: library entry points behind `tcqa-data analyze`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow.parquet as pq

from tcqa_data import FORMAT_VERSION, __version__
from tcqa_data.analysis import labels as LB
from tcqa_data.analysis import lm_eval_metrics as LM
from tcqa_data.analysis.llama2 import (
    CLEAN_BELOW,
    DIRTY_FROM,
    ZN_SAMPLES,
    ZN_SEED,
    ZnReference,
    lengths_supported,
    llama2_subsets,
    token_shares,
)
from tcqa_data.analysis.model_side import PREFIX as MODEL_PREFIX
from tcqa_data.analysis.model_side import model_side
from tcqa_data.analysis.sources import ScoredSplit, load_scored
from tcqa_data.analysis.sweep import (
    make_units,
    masked_metrics,
    score_columns,
    sweep_scores,
    unit_flags,
    value_ci,
)
from tcqa_data.deprecation import moved_to_top
from tcqa_data.errors import ConfigError, TcqaError
from tcqa_data.eval import metrics as M
from tcqa_data.eval.results import verdict
from tcqa_data.eval.tables import subset_table, task_stats
from tcqa_data.io_utils import read_json_file
from tcqa_data.prep.prepared import read_manifest
from tcqa_data.report_render import percent_ci

if TYPE_CHECKING:  # only a type here: the eval stage (torch) is not imported to analyze files
    from tcqa_data.eval.runner import EvaluatedTask

TOKEN_SHARE_PREFIX = "token_share_L"


def rule_thresholds(rule: str | None) -> dict[str, list[float]]:
    """Score column -> thresholds of the decontaminate rule's terms (none for an unparsable rule)."""
    from tcqa_data.decontam.detect.rules import Rule

    if not rule:
        return {}
    try:
        parsed = Rule.parse(rule)
    except ConfigError:
        return {}
    out: dict[str, list[float]] = {}
    for t in parsed.terms:
        out.setdefault(t.metric, []).append(float(t.threshold))
    return out


def analyze_task(scored: ScoredSplit, manifest: dict[str, Any] | None, bootstrap: int = M.BOOTSTRAP_SAMPLES,
                 seed: int = M.BOOTSTRAP_SEED, zn_samples: int = ZN_SAMPLES, corpus: bool = True,
                 index_dir: str | Path | None = None) -> dict[str, Any]:
    """Every analysis of one task split: the rule's table, sweeps, Llama 2 subsets, input vs label.

    ``index_dir``: the corpus index, to read matched corpus text for input vs input+label (default:
    the index prep_manifest.json names, if it is found beside PREP_DIR or the working directory).
    """
    data = scored.data
    spec = data.spec
    docs = data.docs
    cont_path = data.path / "contamination.parquet"
    if not cont_path.is_file():
        raise TcqaError(f"{cont_path} is missing: analysis needs the decontaminate stage's scores "
                        "(re-run `tcqa-data decontaminate`)")
    cont = pq.read_table(cont_path)
    for col in ("doc_id", "group_id"):
        if col not in cont.column_names:
            raise TcqaError(f"{cont_path}: column {col!r} is missing; re-run `tcqa-data decontaminate`")
    row_of = {int(x): i for i, x in enumerate(cont.column("doc_id").to_pylist())}
    missing = [int(d["doc_id"]) for d in docs if int(d["doc_id"]) not in row_of]
    if missing:
        raise TcqaError(f"{cont_path}: no scores for doc_id {missing[0]} ({len(missing)} docs of "
                        f"{data.path / 'full.parquet'}); the prepared folder is inconsistent")
    cont = cont.take([row_of[int(d["doc_id"])] for d in docs])

    if scored.evaluated is not None:  # evaluate's own statistics, resamples and table of these outputs
        ts, weights, rule_table = scored.evaluated.stats, scored.evaluated.weights, scored.evaluated.table
    else:  # a task resolved through lm-eval (no spec): the metric values it logged per doc
        ts = task_stats(spec, docs, scored.per_doc) if spec is not None else \
            LM.task_stats(scored.metrics or [], docs, scored.per_doc)
        weights = M.bootstrap_weights(ts.n_units, bootstrap, seed)
        # the rule's own split, by evaluate's own function: equal to evaluate's table to the last digit
        rule_table = subset_table(ts, data.clean, weights)
    names, stats = list(ts.stats), ts.stats
    u = make_units(ts.group_ids, (ts.units, ts.n_units))
    docs_per_unit = np.bincount(u.units, minlength=u.n)

    manifest = manifest or {}
    rule = manifest.get("rule")
    policy = manifest.get("group_policy") or "any"
    scheme = manifest.get("normalization") or "janitor"

    scores = score_columns(cont)
    rule_th = rule_thresholds(rule)
    extra_th: dict[str, list[float]] = {}
    llama: dict[str, Any] = {"skipped": "contamination.parquet holds no match spans"}
    if {"query", "match_spans", "query_words"} <= set(cont.column_names):
        n = int(cont.column("ngram_n")[0].as_py()) if "ngram_n" in cont.column_names and len(cont) else 13
        longest = np.asarray(cont.column("longest_match").to_numpy(zero_copy_only=False)) \
            if "longest_match" in cont.column_names else np.zeros(0)
        lengths = lengths_supported(n, longest)
        shares = token_shares(cont, lengths, scheme)
        for L, share in shares.items():
            scores[f"{TOKEN_SHARE_PREFIX}{L}"] = share
            extra_th[f"{TOKEN_SHARE_PREFIX}{L}"] = [CLEAN_BELOW, DIRTY_FROM]

        def unit_share_of(share: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            out = np.zeros(u.n)
            np.maximum.at(out, u.units, share)
            return out, docs_per_unit

        ref = ZnReference(u.n, zn_samples, ZN_SEED)
        llama = {"L": lengths, "ngram_n": n, "zn_samples": zn_samples, "zn_seed": ZN_SEED,
                 "subsets": llama2_subsets(shares, unit_share_of, stats, weights, ref)}
    # the model side (evaluate's memorization scores) against the corpus flags and scores, then swept
    # like the corpus scores
    cont_flags = {}
    if "doc_dirty" in cont.column_names:
        flag = cont.column("doc_dirty").to_numpy(zero_copy_only=False)
        cont_flags["doc_dirty"] = np.asarray(flag, dtype=bool)
    models, side = model_side(scored.per_doc, data.clean, cont_flags, scores, u.units, u.n, weights)
    scores = {**scores, **models}
    unit_clean = np.zeros(u.n, dtype=bool)
    unit_clean[u.units[data.clean]] = True
    sweeps = sweep_scores(scores, rule_th, u, policy, stats, weights, extra_th, rule_dirty=~unit_clean)
    single = [(name, ths[0]) for name, ths in rule_th.items() if len(ths) == 1] if len(rule_th) == 1 else []
    for name, entry in sweeps.items():
        # does a single-term rule's threshold reproduce the prepared clean/dirty split?
        entry["reproduces_rule_split"] = None
        if single and single[0][0] == name:
            flags = unit_flags(scores[name], np.asarray([single[0][1]]), u, policy)[0]
            entry["reproduces_rule_split"] = bool(np.array_equal(flags, ~unit_clean))

    index = Path(index_dir) if index_dir is not None else LB.find_index(manifest, data.path.parent.parent)
    if spec is None:
        label_table = {"skipped": "task resolved through lm-eval: no task.yaml says which field is its label"}
    elif corpus:
        label_table = _labels(spec, docs, cont, scheme, index, u, stats, weights, docs_per_unit)
    else:
        label_table = {"skipped": "corpus lookup turned off"}
    entry = {
        "split": data.split, "docs": len(docs), "groups": u.n, "metrics": names,
        "prepared_split": str(data.path), "source": scored.source,
        "rule": {"rule": rule, "group_policy": policy, "table": rule_table},
        "sweeps": sweeps, "llama2": llama, "labels": label_table, "model_side": side,
    }
    if scored.skipped_metrics:
        entry["skipped_metrics"] = dict(scored.skipped_metrics)
    entry["conclusion"] = conclusions(entry)
    return entry


def _labels(spec, docs, cont, scheme, index_dir, u, stats, weights, docs_per_unit) -> dict[str, Any]:
    fields = LB.label_fields(spec)
    if not fields:
        return {"skipped": f"task {spec.task!r} has no label text field"}
    need = {"doc_dirty", "query", "match_spans", "matched_doc_refs"}
    if not need <= set(cont.column_names):
        return {"skipped": f"contamination.parquet lacks {sorted(need - set(cont.column_names))}"}
    if index_dir is None or not (Path(index_dir) / "docs.parquet").is_file():
        return {"skipped": "corpus text unavailable: the index is not found (give it with --index)"}
    dirty = np.asarray(cont.column("doc_dirty").to_numpy(zero_copy_only=False), dtype=bool)
    refs = {r for i in np.flatnonzero(dirty) for r in (cont.column("matched_doc_refs")[int(i)].as_py() or [])}
    if "minhash_doc_ref" in cont.column_names:
        refs |= {r for i in np.flatnonzero(dirty) if (r := cont.column("minhash_doc_ref")[int(i)].as_py())}
    try:
        texts = LB.corpus_texts(index_dir, refs) if refs else {}
    except (OSError, TcqaError) as exc:
        return {"skipped": f"corpus text unavailable ({exc})"}
    status = LB.doc_label_status(spec, docs, cont, scheme, texts)
    cats = LB.group_categories(status, u.units, u.n)
    masks = np.stack([cats == k for k in range(len(LB.CATEGORIES))])
    res = masked_metrics(stats, masks, weights)
    rows = []
    for k, name in enumerate(LB.CATEGORIES):
        n = int(masks[k].sum())
        rows.append({"subset": name, "groups": n, "docs": int(docs_per_unit[masks[k]].sum()),
                     "metrics": {m: value_ci(p[k], b[:, k], n) for m, (p, b) in res.items()}})
    return {"label_fields": fields, "window_words": LB.WINDOW_WORDS, "index": str(index_dir),
            "docs_input_label": int(sum(s == "input+label" for s in status)),
            "docs_input": int(sum(s == "input" for s in status)), "subsets": rows}


FDR = 0.05  # the false discovery rate of the claims made across thresholds


def significant_thresholds(entry: dict[str, Any], metric: str, model: bool) -> tuple[int, list[str]]:
    """(how many thresholds were tested, the ones whose EPG differs from 0 after the Benjamini-Hochberg
    correction at ``FDR`` over all of them): the corpus scores' thresholds, or with ``model`` the
    memorization scores'. A threshold is tested where its EPG has an interval (enough groups)."""
    from scipy.stats import false_discovery_control

    tested: list[tuple[str, float, dict[str, Any]]] = []
    for name, sw in entry["sweeps"].items():
        if name.startswith(MODEL_PREFIX) != model:
            continue
        for t, e in zip(sw["thresholds"], sw["metrics"][metric]["epg"], strict=True):
            if e.get("p") is not None:
                tested.append((name, t, e))
    if not tested:
        return 0, []
    adjusted = false_discovery_control([e["p"] for _, _, e in tested], method="bh")
    return len(tested), [f"{name} >= {t:g}: {percent_ci(e, signed=True)}"
                         for (name, t, e), q in zip(tested, adjusted, strict=True) if q <= FDR]


def threshold_claim(entry: dict[str, Any], metric: str, model: bool) -> str | None:
    """The one sentence on the EPG across every tested threshold, its correction named; None when no
    threshold could be tested."""
    tested, hits = significant_thresholds(entry, metric, model)
    if not tested:
        return None
    how = (f"Benjamini-Hochberg correction over the {tested} thresholds tested, false discovery rate "
           f"{FDR:.0%}, bootstrap p-values")
    if not hits:
        return f"EPG on {metric} differs from 0 at none of {tested} score thresholds ({how})."
    shown = "; ".join(hits[:4]) + (f"; and {len(hits) - 4} more" if len(hits) > 4 else "")
    return f"EPG on {metric} differs from 0 at {len(hits)} of {tested} score thresholds ({how}): {shown}."


def llama2_claim(subsets: list[dict[str, Any]], metric: str) -> str:
    """Llama 2's call (|Zn| > 2) over every L and subset, with the Benjamini-Hochberg correction across
    them (p-values from Zn read as a normal score)."""
    from scipy.stats import false_discovery_control, norm

    tested = [s for s in subsets if s["metrics"][metric].get("zn") is not None]
    calls = [s for s in tested if abs(s["metrics"][metric]["zn"]) > 2]
    if not calls:
        return f"Llama 2 test: no subset has |Zn| > 2 on {metric}: no contamination effect is called."
    q = false_discovery_control([2 * norm.sf(abs(s["metrics"][metric]["zn"])) for s in tested], method="bh")
    kept = {id(s) for s, v in zip(tested, q, strict=True) if v <= FDR}
    shown = "; ".join(
        f"{s['subset']} at L={s['L']} (n={s['groups']} groups, Zn {s['metrics'][metric]['zn']:+.2f}"
        + ("" if id(s) in kept else ", not after the correction") + ")" for s in calls)
    n_kept = sum(id(s) in kept for s in calls)
    return (f"Llama 2 test: |Zn| > 2 for {len(calls)} of {len(tested)} subsets, {n_kept} after the "
            f"Benjamini-Hochberg correction over the {len(tested)} (false discovery rate {FDR:.0%}, "
            f"p from Zn as a normal score): {shown}.")


def conclusions(entry: dict[str, Any]) -> list[str]:
    """Plain-language findings: the rule's verdict for every metric, then the sweeps and tests for the
    primary metric (the task's first)."""
    metric = entry["metrics"][0]
    out = []
    rule = entry["rule"]
    out.append(f"Rule `{rule['rule']}`: {verdict(rule['table'], entry['metrics'])}")
    for name, sw in entry["sweeps"].items():
        for t in sw["rule_thresholds"]:
            if t in sw["thresholds"]:
                i = sw["thresholds"].index(t)
                out.append(f"EPG at {name} >= {t:g} (the rule's threshold): "
                           f"{percent_ci(sw['metrics'][metric]['epg'][i], signed=True)} points ({metric}).")
    corpus_claim, model_claim = (threshold_claim(entry, metric, model=m) for m in (False, True))
    out.append(corpus_claim or f"No threshold of any corpus score has enough groups on both sides "
                               f"(at least {M.MIN_GROUPS_FOR_INTERVAL}) to test its EPG on {metric}.")
    llama = entry["llama2"]
    if "subsets" in llama:
        out.append(llama2_claim(llama["subsets"], metric))
    labels = entry["labels"]
    if "subsets" in labels:
        out.append(f"Input vs input+label: {labels['docs_input']} flagged docs have only their input in "
                   f"the corpus, {labels['docs_input_label']} also their label "
                   f"({', '.join(labels['label_fields'])}) next to it.")
    side = entry.get("model_side") or {}
    if side:
        out.append(side["conclusion"] if "conclusion" in side else f"Model side: {side['absent']}.")
    if model_claim:
        out.append(f"Memorization scores swept as thresholds: {model_claim}")
    for name, why in (entry.get("skipped_metrics") or {}).items():
        out.append(f"Not analyzed: {name} ({why}).")
    return out


def analyze_scored(scored: list[ScoredSplit], prep_dir: str | Path, *, bootstrap: int = M.BOOTSTRAP_SAMPLES,
                   seed: int = M.BOOTSTRAP_SEED, zn_samples: int = ZN_SAMPLES, corpus: bool = True,
                   index_dir: str | Path | None = None) -> dict[str, Any]:
    """The analysis.json object for model outputs already matched to the prepared splits."""
    prep_dir = Path(prep_dir)
    manifest = read_manifest(prep_dir)
    tasks = {s.task: analyze_task(s, manifest, bootstrap, seed, zn_samples, corpus, index_dir)
             for s in scored}
    return {
        "format_version": FORMAT_VERSION, "tcqa_data_version": __version__, "prep_dir": str(prep_dir),
        "bootstrap": {"samples": bootstrap, "seed": seed, "level": M.LEVEL, "unit": M.BOOTSTRAP_UNIT,
                      "method": "one resample of groups gives every threshold's subsets (as evaluate)"},
        "epg": "metric on all docs minus metric on the docs below the threshold (ConTAM)",
        "tasks": tasks,
    }


@moved_to_top("analyze")
def analyze(prep_dir: str | Path, results: str | Path, output: str | Path | None = None, *,
            tasks: list[str] | None = None, split: str | None = None, bootstrap: int | None = None,
            seed: int | None = None, zn_samples: int = ZN_SAMPLES, corpus: bool = True,
            index_dir: str | Path | None = None, write: bool = True) -> dict[str, Any]:
    """Analyze one model pass (``results``: an evaluate folder or lm-eval samples) against PREP_DIR.

    Writes analysis.json, analysis.parquet, report.md, report.html to ``output`` (default:
    ``<results folder>/analysis``). Bootstrap samples and seed default to the evaluate run's.
    """
    results = Path(results)
    skipped: dict[str, str] = {}
    scored = load_scored(prep_dir, results, tasks, split, skipped)
    if scored[0].source.get("kind") == "tcqa-evaluate":
        res = read_json_file(results / "results.json", "results.json")
        boot = (res.get("bootstrap") if isinstance(res, dict) else None) or {}
        bootstrap = bootstrap if bootstrap is not None else boot.get("samples")
        seed = seed if seed is not None else boot.get("seed")
    analysis = analyze_scored(scored, prep_dir, bootstrap=bootstrap or M.BOOTSTRAP_SAMPLES,
                              seed=seed if seed is not None else M.BOOTSTRAP_SEED, zn_samples=zn_samples,
                              corpus=corpus, index_dir=index_dir)
    analysis["results"] = str(results)
    if skipped:
        analysis["skipped_samples"] = skipped
    if write:
        from tcqa_data.analysis.report import write_analysis
        from tcqa_data.outputs import staged_output

        base = results if results.is_dir() else results.parent
        out = Path(output) if output is not None else base / "analysis"
        # whole or not at all, one writer at a time; the default folder is never a link (followed,
        # it would write outside the results folder)
        with staged_output(out, "analyze", follow_link=output is not None) as stage:
            write_analysis(stage, analysis, at=out)
        analysis["output_dir"] = str(out)
    return analysis


def analyze_after_evaluate(prep_dir: Path, evaluated: list[EvaluatedTask], out_dir: Path, bootstrap: int,
                           seed: int, results_dir: Path | None = None) -> dict[str, Any]:
    """The analysis of the model pass just made (``runner.run_evaluation``'s tasks: docs, per-doc outputs
    and each table with its statistics and resamples, reused here) into ``out_dir`` (``results_dir``:
    the evaluate folder it belongs to); returns a short summary for results.json
    (``tcqa_data.workflow.evaluate`` calls it). A task without contamination scores is skipped with
    the reason; an analysis error is reported there instead of losing the pass."""
    from tcqa_data.analysis.report import write_analysis

    splits = [ScoredSplit(t.data, t.per_doc, {"kind": "tcqa-evaluate (in process)"}, evaluated=t.table)
              for t in evaluated]
    usable = [s for s in splits if (s.data.path / "contamination.parquet").is_file() and s.data.docs]
    skipped = {s.task: "no contamination.parquet in the prepared split" for s in splits if s not in usable}
    if not usable:
        return {"skipped": skipped}
    try:
        analysis = analyze_scored(usable, prep_dir, bootstrap=bootstrap, seed=seed)
        # the evaluate folder it will be committed as (out_dir may lie in its staging folder)
        analysis["results"] = str(results_dir if results_dir is not None else out_dir.parent)
        write_analysis(out_dir, analysis,
                       at=(results_dir / out_dir.name) if results_dir is not None else out_dir)
    except TcqaError as exc:
        return {"error": str(exc), "skipped": skipped}
    return {"dir": out_dir.name, "report": f"{out_dir.name}/report.html", "skipped": skipped,
            "conclusions": {t: e["conclusion"] for t, e in analysis["tasks"].items()}}
