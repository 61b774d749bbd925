"""Benchmark the semantic tier's judge (``--judge``): does ``semantic&judge`` beat ``semantic`` alone?

The development set of ``scripts/bench_semantic.py recall`` (tests/semantic_devset.py): the three
MMLU subjects of ../shared/data/paraphrase, a quarter of each subject's items rephrased and a
quarter translated into Chinese, injected into the wiki sample (own documents, spliced into long
articles, re-wrapped), the other half not injected (hard negatives, same subject). One stream
``decontaminate`` of the three subjects with ``--rule 'semantic>=0.5&judge' --judge MODEL``, the
``--judge-top`` best pairs of each subject judged (those under cosine 0.5 never are), then, per
subject, for ``semantic>=T`` and ``semantic>=T&judge``: the share of rephrased and of translated
items flagged, the share of negatives flagged (FP), and precision (injected flagged / flagged).
Also: the judge's mean P(same item) on judged injected items and on judged negatives, and the
area under its ROC curve among the judged pairs (0.5: no better than chance).

    nice .venv/bin/python scripts/bench_judge.py [--judge smollm2-135m-gguf] [--judge-top 40]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "scripts"))

from bench_semantic import mmlu_task  # noqa: E402
from semantic_devset import SUBJECTS, load_items, write_corpus  # noqa: E402

THRESHOLDS = (0.6, 0.7, 0.8)


def roc_auc(score: np.ndarray, positive: np.ndarray) -> float:
    """The probability that a random positive scores above a random negative (ties count half)."""
    pos, neg = score[positive], score[~positive]
    if not len(pos) or not len(neg):
        return float("nan")
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(greater / (len(pos) * len(neg)))


def main() -> None:
    import pyarrow.parquet as pq

    from tcqa_data import decontaminate

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="/tmp/bench_judge")
    ap.add_argument("--judge", default="smollm2-135m-gguf")
    ap.add_argument("--judge-top", type=int, default=40)
    ap.add_argument("--subjects", default=",".join(SUBJECTS))
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    subjects = tuple(args.subjects.split(","))
    items, texts = load_items(DATA / "paraphrase", subjects)
    corpus = write_corpus(DATA / "corpus" / "wiki_sample.jsonl", items, texts, work / "corpus.jsonl")
    tasks, files = zip(*(mmlu_task(work, s) for s in subjects), strict=True)
    out = work / "prep"
    t0, c0 = time.perf_counter(), time.process_time()
    decontaminate(None, out=out, tasks=list(tasks), corpus=[str(corpus)], quiet=True, data_files=list(files),
                  rule="semantic>=0.5&judge", judge=args.judge, judge_top=args.judge_top)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    manifest = json.loads((out / "prep_manifest.json").read_text())
    rows = [r for s in subjects
            for r in pq.read_table(out / f"mmlu_{s}" / "test" / "contamination.parquet").to_pylist()]
    cos = np.array([np.nan if r["semantic_cosine"] is None else r["semantic_cosine"] for r in rows])
    yes = np.array([r["semantic_judge"] is True for r in rows])
    prob = np.array([np.nan if r["semantic_judge_probability"] is None else r["semantic_judge_probability"]
                     for r in rows])
    judged = ~np.isnan(prob)
    subject = np.array([it.subject for it in items])
    injected = np.array([it.injected is not None for it in items])
    reph = np.array([it.injected == "rephrased" for it in items])
    trans = np.array([it.injected == "translated" for it in items])
    neg = ~injected
    judge = manifest["semantic"]["judge"]
    print(f"judge {judge['name']} (sha256 {judge['weights_sha256']}, {judge['parameters']} parameters, "
          f"{judge['device']}), top {judge['top']} pairs per subject, floor {judge['floor']}; "
          f"{int(judged.sum())} pairs judged; whole run {wall:.0f} s wall, {cpu:.0f} CPU-s "
          f"(stream pass, embeddings and judge)")
    print("\n| subject | rule | rephrased | translated | negatives (FP) | precision | flagged |")
    print("|---|---|---|---|---|---|---|")
    for s in (*subjects, "all"):
        g = np.ones(len(items), bool) if s == "all" else subject == s
        for t in THRESHOLDS:
            sem = cos >= t
            for name, f in ((f"semantic>={t}", sem), (f"semantic>={t}&judge", sem & yes)):
                flagged = int((f & g).sum())
                precision = (f & g & injected).sum() / flagged if flagged else float("nan")
                print(f"| {s} | {name} | {f[g & reph].mean():.2f} ({int((f & g & reph).sum())}/"
                      f"{int((g & reph).sum())}) | {f[g & trans].mean():.2f} | {f[g & neg].mean():.3f} "
                      f"({int((f & g & neg).sum())}/{int((g & neg).sum())}) | {precision:.2f} | {flagged} |")
    pj, nj = judged & injected, judged & neg
    print(f"\njudged pairs: {int(pj.sum())} injected, mean P(same) {np.mean(prob[pj]):.3f}; "
          f"{int(nj.sum())} negatives, mean P(same) {np.mean(prob[nj]):.3f}; "
          f"ROC AUC of P(same) {roc_auc(prob[judged], injected[judged]):.3f}, "
          f"of the cosine on the same pairs {roc_auc(cos[judged], injected[judged]):.3f}; "
          f"judge said yes to {int((yes & judged).sum())} of {int(judged.sum())}")


if __name__ == "__main__":
    main()
