"""Benchmark `analyze` on the whole MC-TACO test split (9,442 docs, 1,332 question groups).

Contamination scores are real: the split is decontaminated against an index of the real wiki
sample (../shared/data/corpus/wiki_sample.jsonl; 520 docs dirty under any-ngram). Per-doc model
predictions are synthesized deterministically (seeded; a "model" right 70% of the time, 90% on
the dirty groups) because running a model on 9,442 docs is not what is measured here.

Measured: the analysis computation (every score column, every threshold, 1,000 group bootstrap
resamples, Llama 2 subsets with Zn, input vs input+label), then the report writing (JSON,
Parquet, Markdown, HTML with plots) separately. Target: analysis <= 10 s on one core.
Baseline in the same run: evaluate's own per-subset bootstrap (``metrics.summarize``), called
once per threshold, i.e. what a user would do without a vectorized sweep.

With ``--model-scores``, the per-doc outputs are a real model pass instead: a tiny random-init
model (tests/eval_fixtures.build_tiny_model: 2 layers, SmolLM2 tokenizer) evaluated on the whole
split with its memorization scores (in-prompt, 3 texts x 8 scores), so the analysis also sweeps the
24 model scores and computes their AUROC / Spearman intervals (the model side).

    nice .venv/bin/python scripts/bench_analyze.py [--work /tmp/bench_analyze] [--model-scores]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

# one core, as the target says (set before numpy loads its BLAS)
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"


def prepare(work: Path) -> Path:
    from tcqa_data.decontam.build import build_index
    from tcqa_data.prep.pipeline import decontaminate

    idx, prep = work / "index", work / "prep"
    if not (idx / "manifest.json").is_file():
        build_index([str(DATA / "corpus" / "wiki_sample.jsonl")], idx, id_field="title", quiet=True,
                    workers=1)
    if not (prep / "prep_manifest.json").is_file():
        decontaminate(idx, ["mc_taco"], prep, quiet=True,
                      data_files={"mc_taco": {"test": DATA / "mc_taco" / "test_9442.tsv"}})
    return prep


def synthetic_outputs(prep: Path):
    from tcqa_data.analysis.sources import ScoredSplit
    from tcqa_data.prep.prepared import load_task

    data = load_task(prep, "mc_taco", "test")
    rng = np.random.default_rng(0)
    gold = np.asarray([data.spec.target_index(d) for d in data.docs])
    p_right = np.where(data.clean, 0.7, 0.9)
    right = rng.random(len(gold)) < p_right
    pred = np.where(right, gold, 1 - gold)
    per_doc = [{"gold": int(g), "pred": int(p)} for g, p in zip(gold, pred, strict=True)]
    return ScoredSplit(data, per_doc, {"kind": "synthetic", "seed": 0})


def model_outputs(prep: Path, work: Path):
    """The split's per-doc outputs of a tiny random-init model, memorization scores included."""
    import sys

    sys.path.insert(0, str(REPO / "tests"))
    from eval_fixtures import build_tiny_model

    from tcqa_data.analysis.sources import ScoredSplit
    from tcqa_data.eval.models import load_model
    from tcqa_data.eval.runner import run_evaluation

    folder = work / "tiny_model"
    if not (folder / "config.json").is_file():
        build_tiny_model(folder)
    t0 = time.perf_counter()
    run = run_evaluation(prep, load_model(str(folder), device="cpu"), tasks=["mc_taco"], quiet=True,
                         batch_size=16)
    task = run.tasks[0]
    counts = run.results["tasks"]["mc_taco"]["memorization_context"]
    print(f"evaluate (tiny model, memorization {run.results['memorization']['context']}): "
          f"{time.perf_counter() - t0:.1f} s; texts {counts}")
    return ScoredSplit(task.data, task.per_doc, {"kind": "tiny-model", "path": str(folder)})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default="/tmp/bench_analyze")
    ap.add_argument("--baseline-thresholds", type=int, default=20,
                    help="thresholds timed for the per-threshold baseline (extrapolated)")
    ap.add_argument("--model-scores", action="store_true",
                    help="analyze a tiny random-init model's pass (memorization scores included)")
    args = ap.parse_args()
    os.environ.setdefault("NLTK_DATA", str(DATA / "nltk_data"))
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    prep = prepare(work)
    print(f"prepare (index + decontaminate, cached): {time.perf_counter() - t0:.1f} s")
    scored = model_outputs(prep, work) if args.model_scores else synthetic_outputs(prep)

    import sklearn.metrics  # noqa: F401  (imported before timing: a one-off import, not analysis work)

    from tcqa_data.analysis.report import write_analysis
    from tcqa_data.analysis.run import analyze_scored

    t0, c0 = time.perf_counter(), time.process_time()
    analysis = analyze_scored([scored], prep, bootstrap=1000, index_dir=work / "index")
    t_analysis, c_analysis = time.perf_counter() - t0, time.process_time() - c0
    e = analysis["tasks"]["mc_taco"]
    n_th = sum(len(s["thresholds"]) for s in e["sweeps"].values())
    t0 = time.perf_counter()
    write_analysis(work / "analysis", analysis)
    t_write = time.perf_counter() - t0
    print(f"docs {e['docs']}, groups {e['groups']}, scores {len(e['sweeps'])}, thresholds {n_th}, "
          f"metrics {len(e['metrics'])}, bootstrap 1000, model-side scores "
          f"{len((e.get('model_side') or {}).get('scores', []))}")
    print(f"analysis: {t_analysis:.2f} s wall, {c_analysis:.2f} s CPU (one thread; target <= 10 s); "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"reports (json, parquet, md, html with {len(e['sweeps'])} figures): {t_write:.2f} s")

    # baseline: evaluate's summarize once per threshold and metric (no shared resampling)
    from tcqa_data.analysis.sweep import make_units, unit_flags
    from tcqa_data.eval import metrics as M
    from tcqa_data.eval.tables import task_metric_names

    gids = np.asarray([d["group_id"] for d in scored.data.docs])
    u = make_units(gids)
    gold = np.asarray([o["gold"] for o in scored.per_doc])
    pred = np.asarray([o["pred"] for o in scored.per_doc])
    w = M.bootstrap_weights(u.n, 1000)
    import pyarrow.parquet as pq

    longest = pq.read_table(prep / "mc_taco/test/contamination.parquet").column("longest_match").to_numpy()
    th = np.arange(1, args.baseline_thresholds + 1, dtype=float)
    flags = unit_flags(longest.astype(float), th, u, "any")
    t0, c0 = time.perf_counter(), time.process_time()
    for m in task_metric_names(scored.data.spec):
        stats = M.unit_stats(m, gold, pred, u.units, u.n)
        for f in flags:
            M.summarize(m, stats, {"full": np.ones(u.n, bool), "clean": ~f, "dirty": f}, w)
    t_base = (time.perf_counter() - t0) / len(th) * n_th
    c_base = (time.process_time() - c0) / len(th) * n_th
    print(f"baseline (metrics.summarize per threshold, sweeps only, extrapolated to {n_th} thresholds): "
          f"{t_base:.2f} s wall, {c_base:.2f} s CPU -> analysis is {c_base / c_analysis:.1f}x less CPU")


if __name__ == "__main__":
    main()
