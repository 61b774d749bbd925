"""Benchmark stream `decontaminate --corpus` and `purify` against lm-eval's Janitor (issue 28).

Corpus: the shared wiki sample concatenated ``--copies`` times (default 10: about 206 MB),
written as plain JSONL and as JSONL.zst. Benchmarks: MC-TACO test (9,442 docs) and based-squad
validation (10,570 docs) from ../shared/data, ``any-ngram`` on 13-grams.

Measured in one run, each command as its own process (whole process: interpreter start,
imports, task loading, the pass, every output file), CPU = user + sys of the child, peak memory
= its max RSS:

- ``decontaminate --corpus`` on the plain and the zst corpus, and on one copy (peak memory flat
  in corpus size?);
- ``purify --mode excise --janitor-exact`` on the plain corpus and on one copy;
- the marginal rates: (10 copies - 1 copy) MB over the CPU-seconds between the two runs;
- baseline: ``Janitor.clean_python`` in one Python process, the same queries registered, every
  doc cleaned (what lm-eval offers for the same job); its pieces are compared with purify's, doc
  by doc, for the docs purify cut or dropped;
- for scale, ``wc -w`` of the plain corpus;
- ``--compare DIR``: the stream and purify commands on the plain corpus also with the code of
  another checkout (e.g. the main branch before a change), in the same run, under the same load.

    nice .venv/bin/python scripts/bench_stream.py [--work /tmp/bench_stream] [--copies 10] [--compare ../main]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
TASK_ARGS = ["--tasks", "mc_taco,squad_completion",
             "--data-files", f"mc_taco:test={DATA / 'mc_taco' / 'test_9442.tsv'}",
             "--data-files", f"squad_completion:validation={DATA / 'based_squad' / 'validation.jsonl'}"]


def make_corpus(work: Path, copies: int) -> tuple[Path, Path, Path]:
    import zstandard

    src = (DATA / "corpus" / "wiki_sample.jsonl").read_bytes()
    one, plain = work / "one" / "wiki1.jsonl", work / "plain" / "wiki.jsonl"
    zst = work / "zst" / "wiki.jsonl.zst"
    for p in (one, plain, zst):
        p.parent.mkdir(parents=True, exist_ok=True)
    if not one.exists():
        one.write_bytes(src)
    if not plain.exists():
        with open(plain, "wb") as fh:
            for _ in range(copies):
                fh.write(src)
    if not zst.exists():
        with open(plain, "rb") as fin, open(zst, "wb") as fout:
            zstandard.ZstdCompressor(level=3).copy_stream(fin, fout)
    return one, plain, zst


def run(args: list[str], code: Path = REPO, program: str = sys.executable) -> dict[str, float]:
    """One command in a child process running the package of ``code`` (its folder is the working
    directory too: ``python -m`` puts that first on ``sys.path``): wall, CPU (user + sys) and peak
    RSS of that child alone (``os.wait4``)."""
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(code)}
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([program, *args], env=env, cwd=code, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            err.seek(0)
            raise SystemExit(f"{args}: exit {proc.returncode}\n{err.read()[-2000:].decode(errors='replace')}")
    cpu = usage.ru_utime + usage.ru_stime
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "user_s": round(usage.ru_utime, 2),
            "sys_s": round(usage.ru_stime, 2), "max_rss_mb": round(usage.ru_maxrss / 1024, 1)}


JANITOR = r'''
import json, resource, sys, time
from lm_eval.decontamination.janitor import Janitor
from tcqa_data.prep.benchmarks import load_split
from tcqa_data.prep.taskspec import TaskSpec
corpus, out = sys.argv[1], sys.argv[2]
jan = Janitor()
for task, split, path in json.loads(sys.argv[3]):
    spec = TaskSpec.resolve(task)
    for d in load_split(spec, split, path).docs():
        jan.register_contaminant_python(spec.decontamination_query(d))
changed = {}
with open(corpus, encoding="utf-8") as fh:
    for line, raw in enumerate(fh, 1):
        text = json.loads(raw)["text"]
        pieces = jan.clean_python(text)
        if pieces != [text]:
            changed[line] = pieces
with open(out, "w", encoding="utf-8") as fh:
    json.dump(changed, fh)
'''


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench_stream"))
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("--skip-janitor", action="store_true")
    ap.add_argument("--compare", type=Path, help="another checkout, run on the plain corpus too")
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    one, plain, zst = make_corpus(a.work, a.copies)
    mb = plain.stat().st_size / 1e6
    sizes = {"plain": mb, "zst": zst.stat().st_size / 1e6, "one_copy": one.stat().st_size / 1e6}
    results: dict[str, dict] = {"corpus_mb": {k: round(v, 1) for k, v in sizes.items()}}
    cli = ["-m", "tcqa_data"]
    # numba compiles its kernels into the code's cache on first use: one unrecorded run per code
    for code in [REPO] + ([a.compare.resolve()] if a.compare is not None else []):
        run([*cli, "decontaminate", "--corpus", str(one), *TASK_ARGS, "--out", str(a.work / "prep_warm"),
             "-q"], code=code)
    for name, path in (("stream_one_copy", one), ("stream_plain", plain), ("stream_zst", zst)):
        r = run([*cli, "decontaminate", "--corpus", str(path), *TASK_ARGS,
                 "--out", str(a.work / f"prep_{name}"), "-q"])
        size = one.stat().st_size / 1e6 if name == "stream_one_copy" else mb
        r["mb_per_cpu_s"] = round(size / r["cpu_s"], 1)
        results[name] = r
        print(name, r, flush=True)
    for name, path, size in (("purify_one_copy", one, sizes["one_copy"]), ("purify_excise", plain, mb)):
        r = run([*cli, "purify", str(path), *TASK_ARGS, "--mode", "excise", "--janitor-exact",
                 "--out", str(a.work / ("purified" if path == plain else "purified_one")), "-q"])
        r["mb_per_cpu_s"] = round(size / r["cpu_s"], 1)
        results[name] = r
        print(name, r, flush=True)
    if a.compare is not None:
        code = a.compare.resolve()
        stream = ["decontaminate", "--corpus", str(plain), *TASK_ARGS, "--out", str(a.work / "prep_compare"),
                  "-q"]
        purify = ["purify", str(plain), *TASK_ARGS, "--mode", "excise", "--janitor-exact",
                  "--out", str(a.work / "purified_compare"), "-q"]
        for name, args in (("stream_plain_compare", stream), ("purify_excise_compare", purify)):
            r = run([*cli, *args], code=code)
            r["mb_per_cpu_s"] = round(mb / r["cpu_s"], 1)
            results[name] = {**r, "code": str(code)}
            print(name, r, flush=True)
    r = run(["-w", str(plain)], program="wc")
    r["mb_per_cpu_s"] = round(mb / max(r["cpu_s"], 0.01), 1)
    results["wc_w"] = r
    print("wc_w", r, flush=True)
    # the cost of one more MB: the difference between 10 copies and 1 (fixed costs cancel out)
    extra = mb - sizes["one_copy"]
    results["marginal_mb_per_cpu_s"] = {
        "stream": round(extra / (results["stream_plain"]["cpu_s"] - results["stream_one_copy"]["cpu_s"]), 1),
        "purify": round(extra / (results["purify_excise"]["cpu_s"] - results["purify_one_copy"]["cpu_s"]), 1)}
    if not a.skip_janitor:
        specs = json.dumps([["mc_taco", "test", str(DATA / "mc_taco" / "test_9442.tsv")],
                            ["squad_completion", "validation",
                             str(DATA / "based_squad" / "validation.jsonl")]])
        out = a.work / "janitor_changed.json"
        r = run(["-c", JANITOR, str(plain), str(out), specs])
        r["mb_per_cpu_s"] = round(mb / r["cpu_s"], 2)
        results["janitor_clean_python"] = r
        print("janitor_clean_python", r, flush=True)
        results["purify_speedup_per_cpu_s"] = round(r["cpu_s"] / results["purify_excise"]["cpu_s"], 1)
        results["pieces_identical"] = compare(a.work / "purified" / plain.name, plain, out)
    print(json.dumps(results, indent=1, sort_keys=True))
    (a.work / "results.json").write_text(json.dumps(results, indent=1, sort_keys=True))


def compare(purified: Path, plain: Path, janitor_out: Path) -> dict[str, int]:
    """Per doc Janitor changed (or purify cut/dropped): are the pieces the same?"""
    import pyarrow.parquet as pq

    changed = {int(k): v for k, v in json.loads(janitor_out.read_text()).items()}
    log = {r["row"]: r for r in pq.read_table(purified.parent / "removal_log.parquet").to_pylist()
           if r["action"] != "kept"}
    ours: dict[int, list[str]] = {}
    for raw in purified.read_text(encoding="utf-8").splitlines():
        rec = json.loads(raw)
        if "purify_doc_ref" in rec:
            row = int(rec["purify_doc_ref"].rsplit(":", 1)[1])
            ours.setdefault(row, []).append(rec["text"])
    for row in log:
        ours.setdefault(row, [])
    # Janitor also "changes" every doc of 200 chars or less (it drops them, matched or not):
    # those are not contamination and purify keeps them
    lines = plain.read_text(encoding="utf-8").splitlines()
    texts = {i: json.loads(x)["text"] for i, x in enumerate(lines, 1) if i in changed}
    matched = {k: v for k, v in changed.items() if not (v == [] and len(texts[k]) < 200)}
    same = sum(1 for k in set(matched) | set(ours) if matched.get(k) == ours.get(k, [texts.get(k)]))
    return {"docs_janitor_changed": len(matched), "docs_purify_changed": len(ours), "identical": same,
            "short_docs_janitor_dropped_unmatched": len(changed) - len(matched)}


if __name__ == "__main__":
    main()
