"""Benchmark purify's output shards: what resuming after ``kill -9`` saves, and ``--workers 2`` (issue 28).

Corpus: ``--copies`` inputs (default 10), each a copy of the shared wiki sample (20.6 MB: about
206 MB in all), in one folder. Benchmarks: MC-TACO test and based-squad validation (as
``bench_stream.py``), ``any-ngram``, 13-grams, ``--mode excise``. Each command its own process
(``bench_stream.run``: whole process, CPU = user + sys of the child, peak RSS).

- baseline: a fresh ``purify`` on one worker;
- the same command killed (SIGKILL, ``TCQA_FAULT_AT=purify-commit``) after every shard's
  done-record, then run again: the rerun redoes the corpus pass and checks every shard (sha256 of
  its input and its output) instead of writing it. Ratio rerun / fresh (CPU): lower is better;
- a fresh ``purify --workers 2``: wall-clock ratio to the baseline (the cores are shared: noisy).
Every output is compared byte for byte with the baseline's.

    nice .venv/bin/python scripts/bench_purify_shards.py [--work /tmp/bench_purify_shards] [--copies 10]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_stream import DATA, REPO, TASK_ARGS, run  # noqa: E402


def files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def killed(args: list[str], at: str) -> float:
    """A command SIGKILLed at fault point ``at``; returns its CPU-seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TCQA_FAULT_AT": at}
    proc = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True)
    if proc.returncode != -9:
        raise SystemExit(f"{args}: expected a SIGKILL at {at}, got exit {proc.returncode}\n"
                         f"{proc.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench_purify_shards"))
    ap.add_argument("--copies", type=int, default=10)
    a = ap.parse_args()
    corpus = a.work / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    src = DATA / "corpus" / "wiki_sample.jsonl"
    for k in range(a.copies):
        if not (corpus / f"wiki{k:02d}.jsonl").exists():
            shutil.copyfile(src, corpus / f"wiki{k:02d}.jsonl")
    mb = a.copies * src.stat().st_size / 1e6

    def cmd(out: str, *extra: str) -> list[str]:
        shutil.rmtree(a.work / out, ignore_errors=True)
        return ["-m", "tcqa_data", "purify", str(corpus), *TASK_ARGS, "--mode", "excise", "-q",
                "--out", str(a.work / out), *extra]

    results: dict[str, object] = {"corpus_mb": round(mb, 1), "inputs": a.copies}
    results["fresh"] = run(cmd("fresh"))
    results["killed_cpu_s"] = killed(cmd("resumed"), "purify-commit")
    resumed = ["-m", "tcqa_data", "purify", str(corpus), *TASK_ARGS, "--mode", "excise", "-q",
               "--out", str(a.work / "resumed")]
    results["rerun_all_reused"] = run(resumed)
    results["workers2"] = run(cmd("workers2", "--workers", "2"))
    ref = files(a.work / "fresh")
    results["identical"] = {name: files(a.work / name) == ref for name in ("resumed", "workers2")}
    fresh, rerun, two = results["fresh"], results["rerun_all_reused"], results["workers2"]
    results["rerun_over_fresh_cpu"] = round(rerun["cpu_s"] / fresh["cpu_s"], 2)
    results["workers2_over_fresh_wall"] = round(two["wall_s"] / fresh["wall_s"], 2)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
