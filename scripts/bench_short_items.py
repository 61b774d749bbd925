"""Benchmark index mode's whole matching of short benchmark items (issue 28, part 3).

Corpus: the shared wiki sample concatenated ``--copies`` times (default 1: 20.6 MB, 1,411 docs;
with copies every run is in ``copies`` docs, so candidates and verified docs grow with them),
indexed once (13-grams, no MinHash, text store ``auto``). Benchmarks: based-squad validation with
the question alone as the query (a task YAML, ``{{question}}``: 10,570 docs, most of 8-12
words) and MC-TACO test (2 questions of 8-12 words), ``any-ngram``.

Measured in one run, each command as its own process (whole process: start, imports, task
loading, scoring, every output file), CPU = user + sys of the child:

- ``decontaminate INDEX --short-min-words 0`` (the baseline: short items untestable) and ``8``
  (matched whole from the text store): the ratio and the CPU per short query;
- ``decontaminate --corpus`` (stream mode, ``8``) on the same corpus: its flags must equal index
  mode's (checked here: every contamination table);
- in this process: ``AnchorIndex.holding_candidates`` and ``IndexEvidence.whole_hits`` on the
  distinct short queries (seconds, candidates per query, docs verified).

    nice .venv/bin/python scripts/bench_short_items.py [--work /tmp/bench_short] [--copies 1]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"


def run(args: list[str]) -> dict[str, float]:
    """One CLI command as a child process: wall and CPU seconds (user + sys)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "tcqa_data", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"{' '.join(args)} failed:\n{proc.stderr}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"wall_s": round(wall, 2),
            "cpu_s": round(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", default="/tmp/bench_short")
    ap.add_argument("--copies", type=int, default=1)
    opts = ap.parse_args()
    work = Path(opts.work)
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / f"wiki{opts.copies}.jsonl"
    if not corpus.exists():
        src = (DATA / "corpus" / "wiki_sample.jsonl").read_bytes()
        corpus.write_bytes(src * opts.copies)
    index = work / f"index{opts.copies}"
    if not (index / "manifest.json").exists():
        print("build:", run(["index-corpus", str(corpus), "--out", str(index), "--ngram", "13",
                             "--no-minhash", "--workers", "1", "-q"]))

    sys.path.insert(0, str(REPO))
    from tcqa_data.prep.taskspec import TaskSpec

    raw = TaskSpec.resolve("squad_completion").to_dict()
    raw.update(task="squad_questions", doc_to_decontamination_query="{{question}}", attribution_fields=[])
    spec = work / "squad_questions.yaml"
    spec.write_text(TaskSpec.from_dict(raw).to_yaml())
    tasks = ["--tasks", f"{spec},mc_taco",
             "--data-files", f"squad_questions:validation={DATA / 'based_squad' / 'validation.jsonl'}",
             "--data-files", f"mc_taco:test={DATA / 'mc_taco' / 'test_9442.tsv'}", "-q"]
    res: dict[str, dict[str, float]] = {}
    for smw in (0, 8):
        res[f"index_short{smw}"] = run(["decontaminate", str(index), *tasks, "--short-min-words", str(smw),
                                        "--out", str(work / f"prep{smw}")])
    res["stream_short8"] = run(["decontaminate", "--corpus", str(corpus), *tasks,
                                "--out", str(work / "stream")])

    import pyarrow.parquet as pq

    for part in ("squad_questions/validation", "mc_taco/test"):
        a = pq.read_table(work / "prep8" / part / "contamination.parquet").to_pylist()
        b = pq.read_table(work / "stream" / part / "contamination.parquet").to_pylist()
        assert a == b, f"{part}: index and stream mode differ"
    man = json.loads((work / "prep8" / "prep_manifest.json").read_text())
    counts = {t: {s: {k: c[k] for k in ("docs", "dirty_docs", "short_whole_docs", "ngram_untestable_docs")}
                  for s, c in v["splits"].items()} for t, v in man["tasks"].items()}

    # the whole matching alone, on the distinct short queries
    from tcqa_data.decontam.core.normalize import tokenize
    from tcqa_data.decontam.detect.evidence import IndexEvidence

    queries = sorted({r["query"] for part in ("squad_questions/validation", "mc_taco/test")
                      for r in pq.read_table(work / "prep8" / part / "contamination.parquet",
                                             columns=["query", "query_words"]).to_pylist()
                      if 8 <= r["query_words"] < 13})
    ev = IndexEvidence.open(index)
    t0 = time.process_time()
    cands = ev.anchors.holding_candidates(queries)
    t_cand = time.process_time() - t0
    by_m: dict[int, list[str]] = {}
    for q in queries:
        by_m.setdefault(len(tokenize(q)), []).append(q)
    t0 = time.process_time()
    found = sum(int(ev.whole_hits(qs, m).found.sum()) for m, qs in by_m.items())
    t_whole = time.process_time() - t0
    sizes = [len(c) for c in cands]
    base, short = res["index_short0"]["cpu_s"], res["index_short8"]["cpu_s"]
    out = {"copies": opts.copies, "corpus_mb": round(corpus.stat().st_size / 1e6, 1), "runs": res,
           "cpu_ratio_short8_over_off": round(short / base, 3), "counts": counts,
           "short_queries": len(queries), "found": found,
           "candidates": {"total": sum(sizes), "mean": round(sum(sizes) / max(1, len(sizes)), 2),
                          "max": max(sizes, default=0),
                          "distinct": len({d for c in cands for d in c.tolist()})},
           "holding_candidates_cpu_s": round(t_cand, 3), "whole_hits_cpu_s": round(t_whole, 3),
           "whole_hits_ms_per_query": round(1000 * t_whole / max(1, len(queries)), 3)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
