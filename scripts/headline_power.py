"""Measurement (not a test): the power of each memorization component and of candidate headline
combinations across three exposure kinds (docs/concepts/memorization.md, "Measured"; issue 41).

A 2-layer random Llama with the SmolLM2 tokenizer (tests/eval_fixtures.fine_tuned_tiny_model) is
fine-tuned on half of the first --groups MC-TACO test question groups, three ways: the decontamination
queries in query order ("{question} {sentence}"), the task's prompts, and source passages (each seen
sentence between two other seen ones; docs labelled by their sentence). evaluate runs with
--memorization-context both, so every component is in the samples; prints the AUROC of seen vs
unseen docs per component and per combination of the default's components.

    PYTHONPATH=. .venv/bin/python scripts/headline_power.py --groups 24
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("SHARED_DATA", REPO.parent / "shared" / "data"))
sys.path.insert(0, str(REPO / "tests"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=24)
    args = ap.parse_args()

    import numpy as np
    import torch
    from eval_fixtures import fine_tuned_tiny_model, read_mc_taco, write_task
    from sklearn.metrics import roc_auc_score

    from tcqa_data.eval.memorization import add_headline, rank_normalise
    from tcqa_data.eval.runner import evaluate
    from tcqa_data.prep.prepared import load_task

    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp(prefix="headline_power_"))
    prep = root / "prep"
    write_task(prep, "mc_taco", "test", read_mc_taco(SHARED / "mc_taco" / "test_9442.tsv", args.groups),
               dirty_every=2)
    data = load_task(prep, "mc_taco", "test")
    seen_sentences = sorted({d["sentence"] for d in data.docs})[::2]
    seen_docs = [d for d, clean in zip(data.docs, data.clean, strict=True) if not clean]
    exposures = {
        "queries": sorted({data.spec.decontamination_query(d) for d in seen_docs}),
        "prompts": sorted({data.spec.text(d) for d in seen_docs}),
        "passages": [f"{seen_sentences[i - 1]} {s} {seen_sentences[(i + 1) % len(seen_sentences)]}"
                     for i, s in enumerate(seen_sentences)],
    }
    fields = ["query", "question@standalone", "sentence@standalone"]
    table: dict[str, dict[str, float]] = {}
    for exposure, texts in exposures.items():
        model = fine_tuned_tiny_model(root / f"model_{exposure}", texts)
        res = evaluate(prep, str(model), device="cpu", batch_size=8, output=root / f"eval_{exposure}",
                       quiet=True, bootstrap=0, memorization_context="both", write=False)
        samples = [s for s in res["_samples"] if s["task"] == "mc_taco"]
        by_id = {d["doc_id"]: d for d in data.docs}
        seen = [by_id[s["doc_id"]]["sentence"] in set(seen_sentences) if exposure == "passages"
                else s["subset"] == "dirty" for s in samples]

        def values(comp: str, samples=samples) -> np.ndarray:
            return np.array([np.nan if (v := (s["memorization"].get(comp) or {}).get("min_k_pp_20")) is None
                             else v for s in samples], dtype=float)

        for comp in ("query", "query@standalone", "question@standalone", "sentence"):
            table.setdefault(comp, {})[exposure] = float(roc_auc_score(seen, values(comp)))
        both_max = np.fmax(rank_normalise(values("query")), rank_normalise(values("query@standalone")))
        table.setdefault("max rank: query, query@standalone", {})[exposure] = float(
            roc_auc_score(seen, both_max))
        lead_max = np.fmax(rank_normalise(values("query")), rank_normalise(values("question@standalone")))
        table.setdefault("max rank: query, question@standalone", {})[exposure] = float(
            roc_auc_score(seen, lead_max))
        for label, keep in (("default headline (fields)", fields),
                            ("headline of both", [*fields, "query@standalone"])):
            per_doc = [{"memorization": {k: copy.deepcopy(v) for k, v in s["memorization"].items()
                                         if k in keep}} for s in samples]
            add_headline(per_doc, also=keep[1:])
            table.setdefault(label, {})[exposure] = float(roc_auc_score(
                seen, [o["memorization"]["headline"]["score"] for o in per_doc]))
        print(exposure, "done", flush=True)
    for name, row in table.items():
        print(f"{name:40s}", json.dumps({k: round(v, 3) for k, v in row.items()}))


if __name__ == "__main__":
    main()
