"""Benchmark the semantic tier (``--rule 'any-ngram|semantic'``): recall / false positives, and cost.

``recall``: the three MMLU subjects of ../shared/data/paraphrase, a quarter of each subject's items
rephrased and a quarter translated into Chinese, injected into the wiki sample (own documents,
spliced into long articles, re-wrapped; tests/semantic_devset.py), the other half not injected
(hard negatives: same subject, not in the corpus). One stream ``decontaminate`` of the three
subjects with every evidence column, then per subject and injection kind the share flagged by
- ``semantic`` at the shipped threshold (and ``any-ngram|semantic``),
- the lexical rules (``any-ngram``, ``any-ngram|aligned>=0.5``, ``aligned>=0.3``),
- LLM Decontaminator's embedding-only method (Yang et al. 2023): every corpus doc embedded whole
  (the model reads its first 256 word pieces), each item's top-1 neighbour, flagged at a cosine
  threshold (their GPT-4 judge left out),
and the threshold sweep on the calibration subject (``--calibrate``, default sociology).

``cost``: the shared wiki sample concatenated ``--copies`` times (10: 207 MB), stream
``decontaminate`` of MC-TACO test + based-squad validation + MMLU sociology (the third task) with
``any-ngram`` and with ``any-ngram|semantic``, each a whole process (CPU seconds of the child:
user + system), side by side; then a projection to 1 TB on 256 cores, with and without a GPU.

    nice .venv/bin/python scripts/bench_semantic.py recall [--work /tmp/bench_semantic]
    nice .venv/bin/python scripts/bench_semantic.py cost [--copies 10]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
sys.path.insert(0, str(REPO / "tests"))

from semantic_devset import SUBJECTS, load_items, mmlu_yaml, write_corpus  # noqa: E402

LEXICAL = ("any-ngram", "any-ngram|aligned>=0.5", "aligned>=0.3")


def mmlu_task(work: Path, subject: str) -> tuple[str, str]:
    """A task YAML for one MMLU subject and its ``--data-files`` entry."""
    task = work / f"mmlu_{subject}.yaml"
    task.write_text(mmlu_yaml(subject), encoding="utf-8")
    return str(task), f"mmlu_{subject}:test={DATA / 'paraphrase' / f'mmlu_{subject}_test.jsonl'}"


def recall(args: argparse.Namespace) -> None:
    import pyarrow.parquet as pq

    from tcqa_data.decontam.detect.rules import DEFAULT_SEMANTIC, Rule
    from tcqa_data.prep.pipeline import decontaminate
    from tcqa_data.prep.task_jobs import parse_data_files

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    items, texts = load_items(DATA / "paraphrase")
    corpus = write_corpus(DATA / "corpus" / "wiki_sample.jsonl", items, texts, work / "corpus.jsonl")
    tasks, files = zip(*(mmlu_task(work, s) for s in SUBJECTS), strict=True)
    out = work / "prep"
    t0 = time.process_time()
    decontaminate(None, list(tasks), out, corpus=[str(corpus)], quiet=True,
                  data_files=parse_data_files(list(files), list(tasks)),
                  rule="any-ngram|aligned>=0.3|semantic>=0.0", embedding_model=args.embedding_model)
    cpu = time.process_time() - t0
    manifest = json.loads((out / "prep_manifest.json").read_text())
    cols: dict[str, list] = defaultdict(list)
    for s in SUBJECTS:
        for r in pq.read_table(out / f"mmlu_{s}" / "test" / "contamination.parquet").to_pylist():
            for k in ("ngram_hits", "testable", "aligned_share", "aligned_field_share", "semantic_cosine",
                      "query"):
                cols[k].append(r[k])
    cols["ngram_fraction"] = [0.0] * len(items)
    cols["longest_match"] = [0] * len(items)
    baseline = llm_decontaminator_top1(corpus, [it.query for it in items], args.embedding_model)

    def flags(rule: str) -> np.ndarray:
        return Rule.parse(rule).evaluate(cols)[0]

    cos = np.array([np.nan if c is None else c for c in cols["semantic_cosine"]])
    calib = np.array([it.subject == args.calibrate for it in items])
    neg = np.array([it.injected is None for it in items])
    reph = np.array([it.injected == "rephrased" for it in items])
    print(f"corpus {corpus} ({corpus.stat().st_size / 1e6:.1f} MB), one stream pass + scoring: "
          f"{cpu:.0f} CPU-s; candidates: {manifest['semantic']['candidates']}")
    print(f"\n## threshold sweep on {args.calibrate} (rephrased recall / FP on same-subject negatives)")
    for t in (0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9):
        f = cos >= t
        b = baseline >= t
        print(f"T={t:.2f}: semantic {f[calib & reph].mean():.3f} / {f[calib & neg].mean():.3f}   "
              f"LLM-Decontaminator top-1 {b[calib & reph].mean():.3f} / {b[calib & neg].mean():.3f}")
    rules = {f"semantic (>= {DEFAULT_SEMANTIC})": flags("semantic"),
             "any-ngram|semantic": flags("any-ngram|semantic"),
             **{r: flags(r) for r in LEXICAL},
             f"LLM-Decontaminator top-1 (>= {DEFAULT_SEMANTIC})": baseline >= DEFAULT_SEMANTIC}
    groups: dict[str, np.ndarray] = {}
    for s in SUBJECTS:
        for how in ("rephrased", "translated"):
            for kind in ("own", "spliced", "rewrapped"):
                groups[f"{s} {how} {kind}"] = np.array(
                    [it.subject == s and it.injected == how and it.kind == kind for it in items])
        groups[f"{s} negatives (FP)"] = np.array([it.subject == s and it.injected is None for it in items])
    print("\n| subject / injected / kind | n | " + " | ".join(rules) + " |")
    print("|---|---|" + "---|" * len(rules))
    for name, g in groups.items():
        shares = " | ".join(f"{f[g].mean():.2f}" for f in rules.values())
        print(f"| {name} | {int(g.sum())} | {shares} |")
    for s in SUBJECTS:
        g = np.array([it.subject == s for it in items])
        print(f"{s}: rephrased recall any-ngram|semantic {rules['any-ngram|semantic'][g & reph].mean():.3f}, "
              f"FP {rules['any-ngram|semantic'][g & neg].mean():.3f}")


def llm_decontaminator_top1(corpus: Path, queries: list[str], model_name: str | None) -> np.ndarray:
    """LLM Decontaminator's embedding step: every corpus doc embedded whole, each item's top-1."""
    from tcqa_data.decontam.semantic.model import load_embedding_model

    model = load_embedding_model(model_name)
    docs = [json.loads(line)["text"] for line in corpus.read_text(encoding="utf-8").split("\n") if line]
    emb_docs = model.encode(docs)
    emb_items = model.encode(queries)
    return (emb_items @ emb_docs.T).max(axis=1).astype(np.float64)


def cost(args: argparse.Namespace) -> None:
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / f"wiki_x{args.copies}.jsonl"
    if not corpus.exists():
        src = (DATA / "corpus" / "wiki_sample.jsonl").read_bytes()
        with corpus.open("wb") as fh:
            for _ in range(args.copies):
                fh.write(src)
    task, files = mmlu_task(work, "sociology")
    base = [sys.executable, "-m", "tcqa_data", "decontaminate", "--corpus", str(corpus), "--quiet",
            "--tasks", f"mc_taco,squad_completion,{task}",
            "--data-files", f"mc_taco:test={DATA / 'mc_taco' / 'test_9442.tsv'}",
            "--data-files", f"squad_completion:validation={DATA / 'based_squad' / 'validation.jsonl'}",
            "--data-files", files]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    got = {}
    for rule in ("any-ngram", "any-ngram|semantic"):
        out = work / ("out_" + rule.replace("|", "_"))
        subprocess.run(["rm", "-rf", str(out)], check=True)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.time()
        subprocess.run([*base, "--rule", rule, "--out", str(out)], check=True, env=env)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        got[rule] = cpu
        extra = ""
        if "semantic" in rule:
            m = json.loads((out / "prep_manifest.json").read_text())["semantic"]["candidates"]
            share = m["windows_passed"] / m["windows"]
            extra = (f"; windows {m['windows']}, passed {m['windows_passed']} ({share:.1%}), "
                     f"pairs scored {m['pairs_kept']}")
        print(f"{rule}: {cpu:.0f} CPU-s, {time.time() - t0:.0f} s wall{extra}", flush=True)
    size = corpus.stat().st_size
    ratio = got["any-ngram|semantic"] / got["any-ngram"]
    print(f"corpus {size / 1e6:.0f} MB; ratio {ratio:.2f}x (target <= 4x)")
    tb = 1e12 / size
    for rule, cpu in got.items():
        print(f"projection {rule}: {cpu * tb / 3600:.0f} CPU-h per TB, "
              f"{cpu * tb / 256 / 3600:.1f} h on 256 cores (CPU only, linear in corpus size)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("recall", "cost"))
    ap.add_argument("--work", default="/tmp/bench_semantic")
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("--calibrate", default="sociology")
    ap.add_argument("--embedding-model", default=None)
    args = ap.parse_args()
    recall(args) if args.what == "recall" else cost(args)


if __name__ == "__main__":
    main()
