"""What the block checksums cost a `decontaminate` run (not a test; numbers go to BENCHMARKS.md).

Target (issue 40): checking every block a run reads (the index's n-gram, MinHash, anchor and
text-store files, and the corpus bytes the text store reads) costs at most 5% of the run, and the
flags are byte-identical with and without the checks.

The run: MC-TACO test + based-squad validation against an index of the 20 MB wiki sample (or of
``--copies`` concatenated copies of it with distinct ids: 10 copies = 207 MB), rule
``any-ngram|aligned-field>=0.8`` (n-gram lookups, anchors and corpus text read). Each repeat runs
the same decontaminate twice in fresh processes, checks on and off (off: the readers get no
checks, the text store no corpus digests, as before checksums), in alternating order; the page
cache is warm for both (the first, unmeasured run warms it). Reported: the median wall and CPU
seconds of the decontaminate call, their ratio, and whether the prepared data files (the
``data_sha256`` record of both PREP_DIRs) are identical.

Also timed: digesting the corpus input (block digests, the text store's build-time cost) against
the sha256 the index already computes.

    NLTK_DATA=../shared/data/nltk_data .venv/bin/python scripts/bench_checksums.py
    NLTK_DATA=../shared/data/nltk_data .venv/bin/python scripts/bench_checksums.py --copies 10

Work files go under .bench/checksums (git-ignored); the index is kept for reruns.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
os.environ.setdefault("NLTK_DATA", str(DATA / "nltk_data"))
RULE = "any-ngram|aligned-field>=0.8"
BENCH = {"mc_taco": {"test": str(DATA / "mc_taco" / "test_9442.tsv")},
         "squad_completion": {"validation": str(DATA / "based_squad" / "validation.jsonl")}}


def _checks_off() -> None:
    """The readers as before checksums: no index block checks, no corpus digests (size only)."""
    import tcqa_data.decontam.index_files as index_files
    import tcqa_data.decontam.textstore.anchor_index as anchor_index
    import tcqa_data.decontam.textstore.store as store

    def none(*args: object) -> None:
        return None

    class _NoCheck:
        complete = True

        def check_all(self) -> None:
            pass

        def check_ranges(self, *args: object) -> None:
            pass

    index_files.index_checks = none
    anchor_index.index_checks = none
    store.index_checks = none
    store.TextStore._corpus_check = lambda self, rec: (self._check_file(rec), _NoCheck())[1]


def _time_checks() -> dict:
    """Count the CPU seconds spent inside the block checks and the blocks they hash (checks on):
    the checks' own cost, below the run-to-run noise of a shared machine."""
    from tcqa_data.checksums import BlockCheck

    spent = {"cpu": 0.0, "blocks": 0, "bytes": 0}
    check_ranges, check_blocks = BlockCheck.check_ranges, BlockCheck._check_blocks

    def timed(self, *a, **k):
        c0 = time.process_time()
        try:
            return check_ranges(self, *a, **k)
        finally:
            spent["cpu"] += time.process_time() - c0

    def counted(self, need):
        spent["blocks"] += len(need)
        spent["bytes"] += len(need) * self.block_bytes
        return check_blocks(self, need)

    BlockCheck.check_ranges, BlockCheck._check_blocks = timed, counted
    return spent


def child(args: argparse.Namespace) -> None:
    spent = _time_checks() if args.checks == "on" else None
    if args.checks == "off":
        _checks_off()
    from tcqa_data.prep.pipeline import decontaminate

    t0, c0 = time.perf_counter(), time.process_time()
    decontaminate(args.index, list(BENCH), args.out, data_files=BENCH, rule=RULE, quiet=True)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    data = json.loads((Path(args.out) / "prep_manifest.json").read_text())["data_sha256"]
    print(json.dumps({"wall": wall, "cpu": cpu, "data_sha256": data, "in_checks": spent}))


def _corpus(work: Path, copies: int) -> Path:
    if copies == 1:
        return DATA / "corpus" / "wiki_sample.jsonl"
    path = work / f"wiki_x{copies}.jsonl"
    if not path.exists():
        lines = (DATA / "corpus" / "wiki_sample.jsonl").read_text(encoding="utf-8").splitlines()
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            for c in range(copies):
                for line in lines:
                    rec = json.loads(line)
                    rec["id"] = f"{rec['id']}-{c}"
                    fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
        tmp.rename(path)
    return path


def _run(index: Path, out: Path, checks: str) -> dict:
    import shutil

    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, __file__, "child", "--index", str(index), "--out", str(out),
                           "--checks", checks], capture_output=True, text=True, env=env, check=False)
    if proc.returncode:
        raise SystemExit(f"decontaminate ({checks}) failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main_bench(args: argparse.Namespace) -> None:
    work = REPO / ".bench" / "checksums"
    work.mkdir(parents=True, exist_ok=True)
    corpus = _corpus(work, args.copies)
    index = work / f"index_x{args.copies}"
    if not (index / "manifest.json").exists():
        from tcqa_data.decontam.build import build_index

        t0 = time.perf_counter()
        build_index([str(corpus)], index, quiet=True, workers=args.workers)
        print(f"index of {corpus.name} ({corpus.stat().st_size / 1e6:.0f} MB) built in "
              f"{time.perf_counter() - t0:.0f} s", flush=True)
    from tcqa_data.checksums import digest_blocks
    from tcqa_data.outputs import file_sha256

    t0 = time.perf_counter()
    file_sha256(corpus)
    sha = time.perf_counter() - t0
    t0 = time.perf_counter()
    digest_blocks(corpus)
    blocks = time.perf_counter() - t0
    size = sum(p.stat().st_size for p in index.rglob("*") if p.is_file())
    print(f"corpus {corpus.stat().st_size / 1e6:.0f} MB: sha256 {sha:.2f} s, block digests {blocks:.2f} s "
          f"(warm cache); index {size / 1e6:.0f} MB", flush=True)
    _run(index, work / "prep_warm", "on")  # warms the page cache and numba's cache
    times: dict[str, list[dict]] = {"on": [], "off": []}
    for r in range(args.repeats):
        for checks in (("on", "off") if r % 2 == 0 else ("off", "on")):
            times[checks].append(_run(index, work / f"prep_{checks}", checks))
            print(f"repeat {r + 1} checks {checks}: wall {times[checks][-1]['wall']:.2f} s, "
                  f"cpu {times[checks][-1]['cpu']:.2f} s", flush=True)
    same = all(t["data_sha256"] == times["off"][0]["data_sha256"] for t in times["on"] + times["off"])
    med = {k: {m: statistics.median(t[m] for t in v) for m in ("wall", "cpu")} for k, v in times.items()}
    print(f"\ndecontaminate MC-TACO test + based-squad validation, rule {RULE}, index of {corpus.name}, "
          f"median of {args.repeats}:")
    for m in ("wall", "cpu"):
        ratio = med["on"][m] / med["off"][m]
        print(f"  {m}: checks on {med['on'][m]:.2f} s, off {med['off'][m]:.2f} s, ratio {ratio:.3f} "
              f"({'within' if ratio <= 1.05 else 'OVER'} the 5% target)")
    print(f"  flags byte-identical (every prepared data file's sha256): {same}")
    inside = {k: statistics.median(t["in_checks"][k] for t in times["on"])
              for k in ("cpu", "bytes", "blocks")}
    share = inside["cpu"] / med["on"]["cpu"]
    print(f"  inside the checks (checks on, median): {inside['cpu']:.3f} CPU-s, "
          f"{inside['bytes'] / 1e6:.0f} MB hashed in {inside['blocks']:,.0f} blocks "
          f"({share:.2%} of the run's CPU)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd")
    c = sub.add_parser("child")
    c.add_argument("--index", required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--checks", choices=("on", "off"), required=True)
    ap.add_argument("--copies", type=int, default=1, help="copies of the wiki sample (10: 207 MB)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    if args.cmd == "child":
        child(args)
    else:
        main_bench(args)


if __name__ == "__main__":
    main()
