"""`analyze` on real lm-evaluation-harness 0.4 `--log_samples` output and on our `evaluate` output
of the same model and docs.

A tiny random-init Llama with the real SmolLM2 tokenizer runs (1) through lm-eval 0.4 on the
exported full-split YAMLs of a prepared folder (real MC-TACO question groups and SQuAD
docs, decontaminated against the real wiki sample index), with --log_samples, and (2) through our
`evaluate`, which runs the analysis at its end. Where the per-doc outputs agree (here: all of
them), both analyses must be identical, and at the rule's own threshold they must equal
evaluate's clean / full / dirty table to the last digit.
"""

from __future__ import annotations

import json
import os

import pytest
from analysis_fixtures import build_prep
from conftest import SHARED_DATA
from eval_fixtures import build_tiny_model

pytestmark = pytest.mark.slow

TASKS = ("mc_taco", "squad_completion")


@pytest.fixture(scope="module")
def runs(wiki_index, mc_taco_dev, squad_validation, tmp_path_factory):
    pytest.importorskip("lm_eval")
    root = tmp_path_factory.mktemp("analysis_lm_eval")
    # 8 MC-TACO questions (5 dirty) and 8 SQuAD docs (3 dirty): a few groups, well under a minute
    prep = build_prep(wiki_index, SHARED_DATA, root, mc_groups=8, squad_first=3816, squad_docs=8)
    model = build_tiny_model(root / "model")
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
        model="hf", model_args=f"pretrained={model},dtype=float32",
        tasks=[f"tcqa_{t}_validation_full" for t in TASKS],
        task_manager=TaskManager(include_path=[str(prep / t / "validation" / "lm_eval") for t in TASKS]),
        device="cpu", batch_size=4, log_samples=True, num_fewshot=0, bootstrap_iters=0,
        evaluation_tracker=tracker, random_seed=0, numpy_random_seed=0, torch_random_seed=0)
    tracker.save_results_aggregated(results=res, samples=res["samples"])
    for name in res["configs"]:
        tracker.save_results_samples(task_name=name, samples=res["samples"][name])

    from tcqa_data.workflow import evaluate

    ours = evaluate(prep, str(model), device="cpu", batch_size=4, output=root / "eval", quiet=True)
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
        assert theirs_docs[task] == ours_docs[task], task
    theirs = analyze(prep, lm_out, tmp_path / "theirs")
    ours = analyze(prep, eval_dir, tmp_path / "ours")
    for task in TASKS:
        a = {k: v for k, v in theirs["tasks"][task].items() if k != "source"}
        b = {k: v for k, v in ours["tasks"][task].items() if k != "source"}
        assert a == b, task
        assert theirs["tasks"][task]["source"]["kind"] == "lm-eval"
    assert (tmp_path / "theirs" / "analysis.json").is_file() and (tmp_path / "ours" / "report.html").is_file()


def test_rule_threshold_equals_evaluate_table_to_the_last_digit(runs):
    prep, lm_out, eval_dir, _ = runs
    from tcqa_data.analysis import analyze

    results = json.loads((eval_dir / "results.json").read_text())
    hook = json.loads((eval_dir / "analysis" / "analysis.json").read_text())
    for analysis in (hook, analyze(prep, lm_out, write=False)):
        for task in TASKS:
            table = results["tasks"][task]
            entry = analysis["tasks"][task]
            assert entry["rule"]["table"]["subsets"] == table["subsets"]
            assert entry["rule"]["table"]["clean_minus_full"] == table["clean_minus_full"]
            sw = entry["sweeps"]["ngram_hits"]
            assert sw["reproduces_rule_split"] is True
            i = sw["thresholds"].index(1.0)
            for metric, per in sw["metrics"].items():
                assert per["above"][i] == table["subsets"]["dirty"]["metrics"][metric]
                assert per["below"][i] == table["subsets"]["clean"]["metrics"][metric]
                assert per["full"] == table["subsets"]["full"]["metrics"][metric]


def test_evaluate_report_includes_the_analysis(runs):
    _, _, eval_dir, ours = runs
    summary = ours["analysis"]
    assert summary["report"] == "analysis/report.html" and set(summary["conclusions"]) == set(TASKS)
    md = (eval_dir / "report.md").read_text()
    assert "## Contamination analysis" in md and "analysis/report.html" in md
    for task in TASKS:
        assert summary["conclusions"][task][0] in md
    assert json.loads((eval_dir / "results.json").read_text())["analysis"] == summary
