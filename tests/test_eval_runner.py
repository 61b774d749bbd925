"""The evaluate stage end to end on a tiny random model: slicing, outputs, bad input."""

from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
import pytest
import yaml
from conftest import SHARED_DATA, shared_file
from eval_fixtures import build_prep_dir

from tcqa_data.errors import ConfigError, TcqaError
from tcqa_data.eval import metrics as M
from tcqa_data.eval.runner import evaluate

MC_GROUPS = 5


@pytest.fixture(scope="module")
def prep(tmp_path_factory):
    shared_file("mc_taco/dev_3783.tsv")
    shared_file("based_squad/validation.jsonl")
    return build_prep_dir(tmp_path_factory.mktemp("prep"), SHARED_DATA, mc_groups=MC_GROUPS, squad_docs=6)


@pytest.fixture(scope="module")
def full_run(prep, tiny_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("eval")
    return evaluate(prep, str(tiny_model), device="cpu", batch_size=3, output=out, quiet=True), out


def test_subsets_are_slices_of_one_pass(full_run, prep):
    res, out = full_run
    clean_ids = set(pq.read_table(prep / "mc_taco/validation/clean.parquet").column("doc_id").to_pylist())
    samples = [s for s in res["_samples"] if s["task"] == "mc_taco"]
    assert {s["doc_id"] for s in samples if s["subset"] == "clean"} == clean_ids
    task = res["tasks"]["mc_taco"]
    for sub in ("clean", "dirty", "full"):
        chosen = [s for s in samples if sub in ("full", s["subset"])]
        assert task["subsets"][sub]["docs"] == len(chosen)
        assert task["subsets"][sub]["groups"] == len({s["group_id"] for s in chosen})
        gold = [s["gold"] for s in chosen]
        pred = [s["pred"] for s in chosen]
        m = task["subsets"][sub]["metrics"]
        assert m[M.LM_ACC]["value"] == pytest.approx(M.accuracy(gold, pred))
        assert m[M.LM_F1]["value"] == pytest.approx(M.pooled_f1(gold, pred))
        groups = [s["group_id"] for s in chosen]
        assert m[M.OFFICIAL_F1]["value"] == pytest.approx(
            M.official_f1([g == 1 for g in gold], [p == 1 for p in pred], groups))
        for s in chosen:
            assert s["pred"] == max(range(2), key=lambda i: (s["loglikelihoods"][i], -i))
    assert task["subsets"]["full"]["groups"] == MC_GROUPS
    diff = task["clean_minus_full"][M.LM_ACC]
    assert diff["value"] == pytest.approx(task["subsets"]["clean"]["metrics"][M.LM_ACC]["value"]
                                          - task["subsets"]["full"]["metrics"][M.LM_ACC]["value"])


def test_outputs_written(full_run):
    res, out = full_run
    written = json.loads((out / "results.json").read_text())
    assert "_samples" not in written
    # the eval stage alone: no analysis (tcqa_data.workflow.evaluate adds it)
    assert "analysis" not in written and not (out / "analysis").exists()
    assert written["tasks"]["squad_completion"]["subsets"]["full"]["docs"] == 6
    assert written["upstream"]["rule"].startswith("test fixture")
    assert {"torch", "transformers", "python"} <= set(written["versions"])
    assert written["model"]["device"] == "cpu" and written["model"]["dtype"] == "float32"
    lines = (out / "samples.jsonl").read_text().splitlines()
    assert len(lines) == len(res["_samples"])
    squad = [json.loads(x) for x in lines if '"squad_completion"' in x]
    assert all({"generation", "contains", "target", "subset", "doc_id"} <= set(s) for s in squad)
    md = (out / "report.md").read_text()
    assert "official/strict_acc" in md and "lm_eval/acc" in md and "clean - full" in md
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html


def test_clean_only_scores_the_same_clean_docs(full_run, prep, tiny_model, tmp_path):
    res, _ = full_run
    only = evaluate(prep, str(tiny_model), tasks=["mc_taco"], clean_only=True, device="cpu", batch_size=2,
                    output=tmp_path, quiet=True)
    # only clean docs ran: no full or dirty score, and no clean-minus-full difference to report
    assert set(only["tasks"]["mc_taco"]["subsets"]) == {"clean"}
    assert "clean_minus_full" not in only["tasks"]["mc_taco"]
    assert "clean - full" not in (tmp_path / "report.md").read_text()
    before = {s["doc_id"]: s for s in res["_samples"] if s["task"] == "mc_taco" and s["subset"] == "clean"}
    after = {s["doc_id"]: s for s in only["_samples"]}
    assert set(after) == set(before)
    for k, s in after.items():
        assert s["loglikelihoods"] == pytest.approx(before[k]["loglikelihoods"], abs=1e-4)
        assert s["pred"] == before[k]["pred"]
    assert only["tasks"]["mc_taco"]["subsets"]["clean"]["metrics"][M.LM_ACC]["value"] == pytest.approx(
        res["tasks"]["mc_taco"]["subsets"]["clean"]["metrics"][M.LM_ACC]["value"])


def test_outputs_are_deterministic(prep, tiny_model, tmp_path):
    runs = []
    for name in ("a", "b"):
        evaluate(prep, str(tiny_model), tasks=["mc_taco"], device="cpu", batch_size=4, output=tmp_path / name,
                 quiet=True)
        r = json.loads((tmp_path / name / "results.json").read_text())
        r.pop("timings")
        runs.append(r)
    assert runs[0] == runs[1]
    for f in ("report.md", "report.html", "samples.jsonl"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()


def test_empty_clean_split_reports_zero_docs(tiny_model, tmp_path):
    shared_file("mc_taco/dev_3783.tsv")
    prep = build_prep_dir(tmp_path / "prep", SHARED_DATA, mc_groups=2, squad_docs=0, dirty_every=1)
    res = evaluate(prep, str(tiny_model), device="cpu", output=tmp_path / "out", quiet=True)
    clean = res["tasks"]["mc_taco"]["subsets"]["clean"]
    assert clean["docs"] == 0 and clean["metrics"][M.LM_ACC]["value"] is None
    assert res["tasks"]["mc_taco"]["subsets"]["dirty"]["docs"] > 0
    assert "n/a" in (tmp_path / "out" / "report.md").read_text()
    only = evaluate(prep, str(tiny_model), clean_only=True, device="cpu", output=tmp_path / "o2", quiet=True)
    assert only["tasks"]["mc_taco"]["subsets"]["clean"]["docs"] == 0


def test_limit_groups_takes_whole_groups(prep, tiny_model):
    res = evaluate(prep, str(tiny_model), tasks=["mc_taco"], limit_groups=2, device="cpu", quiet=True,
                   write=False)
    full = pq.read_table(prep / "mc_taco/validation/full.parquet").to_pylist()
    expected = sum(1 for d in full if d["group_id"] < 2)
    assert res["tasks"]["mc_taco"]["subsets"]["full"]["docs"] == expected
    assert res["tasks"]["mc_taco"]["subsets"]["full"]["groups"] == 2


def test_bad_limits_and_metrics_are_refused_before_the_model_loads(prep, tmp_path):
    # a model path that does not exist: the option errors must come first
    with pytest.raises(ConfigError, match="--limit-groups must be a positive"):
        evaluate(prep, str(tmp_path / "no-model"), limit_groups=0, device="cpu", quiet=True, write=False)
    custom = tmp_path / "prep"
    shutil.copytree(prep, custom, ignore=shutil.ignore_patterns("eval"))
    spec = yaml.safe_load((custom / "mc_taco/task.yaml").read_text())
    spec["metric_list"] = [{"metric": "acc"}, {"metric": "bleu"}]
    (custom / "mc_taco/task.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(ConfigError, match=r"\['bleu'\].*not supported"):
        evaluate(custom, str(tmp_path / "no-model"), tasks=["mc_taco"], device="cpu", quiet=True, write=False)
    spec["metric_list"] = [{"metric": "acc"}, {"metric": "f1"}]
    spec["doc_to_choice"] = ["no", "yes", "maybe"]
    (custom / "mc_taco/task.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(ConfigError, match="needs exactly 2 choices"):
        evaluate(custom, str(tmp_path / "no-model"), tasks=["mc_taco"], device="cpu", quiet=True, write=False)


def test_metric_list_selects_the_lm_eval_metrics(prep, tiny_model, tmp_path):
    custom = tmp_path / "prep"
    shutil.copytree(prep, custom, ignore=shutil.ignore_patterns("eval"))
    spec = yaml.safe_load((custom / "mc_taco/task.yaml").read_text())
    spec["metric_list"] = [{"metric": "acc"}]
    (custom / "mc_taco/task.yaml").write_text(yaml.safe_dump(spec))
    res = evaluate(custom, str(tiny_model), tasks=["mc_taco"], limit_groups=1, device="cpu", quiet=True,
                   write=False)
    assert list(res["tasks"]["mc_taco"]["subsets"]["full"]["metrics"]) == [
        M.LM_ACC, M.OFFICIAL_STRICT_ACC, M.OFFICIAL_F1]


def test_missing_task_and_incompatible_version(prep, tiny_model, tmp_path):
    with pytest.raises(TcqaError, match="task 'hellaswag' is not in"):
        evaluate(prep, str(tiny_model), tasks=["hellaswag"], device="cpu", quiet=True, write=False)
    old = tmp_path / "old"
    shutil.copytree(prep, old, ignore=shutil.ignore_patterns("eval"))
    manifest = json.loads((old / "prep_manifest.json").read_text())
    manifest["format_version"] = 999
    (old / "prep_manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(TcqaError, match="format version 999"):
        evaluate(old, str(tiny_model), device="cpu", quiet=True, write=False)


def test_bad_models_and_devices(prep, tiny_model, tmp_path):
    import torch

    with pytest.raises(TcqaError, match="model folder does not exist"):
        evaluate(prep, str(tmp_path / "no_such_model"), device="cpu", quiet=True, write=False)
    not_a_model = tmp_path / "empty"
    not_a_model.mkdir()
    with pytest.raises(TcqaError, match="cannot load"):
        evaluate(prep, str(not_a_model), device="cpu", quiet=True, write=False)
    no_tok = tmp_path / "no_tok"
    no_tok.mkdir()
    for f in ("config.json", "model.safetensors"):
        shutil.copy(tiny_model / f, no_tok / f)
    with pytest.raises(TcqaError, match="tokenizer"):
        evaluate(prep, str(no_tok), device="cpu", quiet=True, write=False)
    if not torch.cuda.is_available():
        with pytest.raises(TcqaError, match="CUDA is not available"):
            evaluate(prep, str(tiny_model), device="cuda", quiet=True, write=False)


def test_evaluate_killed_before_its_commit_leaves_the_previous_output(full_run, prep, tiny_model, tmp_path):
    """EVAL_DIR (results, samples, reports, analysis/) is committed whole: a run killed at the commit
    hook leaves the previous folder byte for byte, and no staging folder is seen as the output."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from test_faults import snapshot

    _, previous = full_run
    out = tmp_path / "eval"
    shutil.copytree(previous, out)
    before = snapshot(out)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]), TCQA_FAULT_AT="output-commit")
    args = ["evaluate", str(prep), "--model", str(tiny_model), "--device", "cpu", "--batch-size", "3",
            "--tasks", "mc_taco", "--out", str(out), "-q"]
    killed = subprocess.run([sys.executable, "-m", "tcqa_data", *args], env=env, capture_output=True,
                            text=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert snapshot(out) == before
