"""Scaling benchmark of ``index-corpus`` on its two engines (not a test).

    .venv/bin/python scripts/bench_scale.py                 # 1 GB synthetic corpus, n-gram index
    .venv/bin/python scripts/bench_scale.py --gb 0.1 --configs local:1,ray:1   # a quick look
    .venv/bin/python scripts/bench_scale.py --inputs .bench/speed/corpus --minhash --text-store none
        --configs local:1,ray:2 --out /tmp/scale_idx   # (one line) existing files, full build

Measures, on this machine: the build's wall time and throughput with the local engine (1 and 2
worker processes) and with Ray (a local instance with 1 and 2 CPUs), the speedup over one local
worker, Ray's fixed overhead (start a local instance, run one empty task, shut down) and its
per-task overhead, the driver-side serial passes over the input (checksum, shard split), and
whether every configuration wrote the same bytes, the wall and CPU time of each build step
(checksum, split, map, n-gram reduce, MinHash band reduce) and the peak PSS of the process tree.
Then projects wall time and index size for 1 TB and 10 TB of text on 8, 64, 256 and 512 cores
from the measured per-core throughput.

The corpus is ``.bench/synthetic_1gb.jsonl`` (one file, so the build must split it into byte
ranges): copies of ``../shared/data/corpus/wiki_sample.jsonl`` where copy k renames every 10th
word to ``word~k``, so nearly every 13-gram is new, as in fresh text. An existing file of that
name is reused; one this script creates is deleted at the end (``--keep`` keeps it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WIKI = ROOT.parent / "shared" / "data" / "corpus" / "wiki_sample.jsonl"
BENCH = ROOT / ".bench"
# Manifest fields that differ between runs by design: timings, and how the build was run.
RUN_FIELDS = ("started", "finished", "seconds", "last_run_seconds", "workers", "engine")


def make_corpus(path: Path, target_bytes: int) -> None:
    base = [json.loads(line) for line in open(WIKI, encoding="utf-8")]
    tmp = path.with_suffix(".tmp")
    written, k = 0, 0
    with open(tmp, "w", encoding="utf-8") as fh:
        while written < target_bytes:
            for rec in base:
                words = rec["text"].split(" ")
                words[::10] = [f"{w}~{k}" for w in words[::10]]
                line = json.dumps({"id": f"{rec['id']}-{k}", "text": " ".join(words)},
                                  ensure_ascii=False) + "\n"
                fh.write(line)
                written += len(line.encode())
                if written >= target_bytes:
                    break
            k += 1
    os.replace(tmp, path)


def index_digest(index: Path) -> str:
    """sha256 over every file of the index (path + bytes), the manifest without run fields."""
    h = hashlib.sha256()
    for f in sorted(p for p in index.rglob("*") if p.is_file()):
        rel = f.relative_to(index).as_posix()
        h.update(rel.encode() + b"\0")
        if rel == "manifest.json":
            m = json.loads(f.read_text())
            for key in RUN_FIELDS:
                m.get("build", {}).pop(key, None)
            h.update(json.dumps(m, sort_keys=True).encode())
            continue
        with open(f, "rb") as fh:
            while chunk := fh.read(1 << 24):
                h.update(chunk)
    return h.hexdigest()


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def ray_overhead(cpus: int, probe: str, tasks: int = 200) -> dict:
    """Start a private local Ray instance, run one empty task, then many, then shut down."""
    from tcqa_data.engines import RayEngine

    t0 = time.perf_counter()
    eng = RayEngine(num_cpus=cpus).start()
    t1 = time.perf_counter()
    eng.map(os.path.getsize, [{"filename": probe}])
    t2 = time.perf_counter()
    eng.map(os.path.getsize, [{"filename": probe}] * tasks)
    t3 = time.perf_counter()
    eng.close()
    t4 = time.perf_counter()
    return {"cpus": cpus, "start_s": round(t1 - t0, 2), "first_task_s": round(t2 - t1, 3),
            "per_task_ms": round((t3 - t2) / tasks * 1000, 2), "shutdown_s": round(t4 - t3, 2),
            "empty_job_s": round(t4 - t3 + t2 - t0, 2)}


def driver_passes(corpus: Path) -> dict:
    """The passes over the input the driver makes itself: checksum and line-numbered split."""
    from tcqa_data.decontam.build.index import SHARD_BYTES
    from tcqa_data.decontam.readers.inputs import resolve_inputs, split_input
    from tcqa_data.outputs import file_sha256

    size = corpus.stat().st_size
    t0 = time.perf_counter()
    file_sha256(str(corpus))
    t1 = time.perf_counter()
    shards = split_input(resolve_inputs([str(corpus)])[0], SHARD_BYTES)
    t2 = time.perf_counter()
    return {"sha256_mb_per_s": round(size / 1e6 / (t1 - t0), 1),
            "split_mb_per_s": round(size / 1e6 / (t2 - t1), 1), "shards": len(shards)}


def tree_cpu_s() -> float:
    """CPU seconds of this process, its reaped children, and its live descendants (Ray's)."""
    import psutil

    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime
    for proc in psutil.Process().children(recursive=True):
        try:
            t = proc.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def own_cpu_s() -> float:
    """CPU seconds of this process (the driver) alone."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def phase_timed_engine(engine: str, n: int):
    """A Local or Ray engine that records, per step of the build (``desc``), its tasks, wall and CPU time."""
    from tcqa_data.engines import LocalEngine, RayEngine

    base = RayEngine if engine == "ray" else LocalEngine

    class PhaseTimedEngine(base):
        def __init__(self) -> None:
            super().__init__(num_cpus=n) if engine == "ray" else super().__init__(workers=n)
            self.phases: dict[str, dict] = {}

        def map(self, fn, calls, *, desc="", on_done=None, shared=None):
            c0, own0, t0 = tree_cpu_s(), own_cpu_s(), time.perf_counter()
            out = super().map(fn, calls, desc=desc, on_done=on_done, shared=shared)
            p = self.phases.setdefault(desc, {"tasks": 0, "cpu_s": 0.0, "wall_s": 0.0, "driver_cpu_s": 0.0})
            p["tasks"] += len(calls)
            p["cpu_s"] = round(p["cpu_s"] + tree_cpu_s() - c0, 2)
            p["driver_cpu_s"] = round(p["driver_cpu_s"] + own_cpu_s() - own0, 2)
            p["wall_s"] = round(p["wall_s"] + time.perf_counter() - t0, 2)
            return out

    return PhaseTimedEngine()


class PeakMemory:
    """Samples the summed PSS (RSS where PSS is unreadable) of this process and its descendants,
    and the bytes under ``watch_dir`` (the index folder with its build scratch: peak disk)."""

    def __init__(self, every_s: float = 0.5, watch_dir: Path | None = None) -> None:
        import threading

        self.peak, self.every_s = 0, every_s
        self.watch_dir, self.peak_disk = watch_dir, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._stop.is_set():
            total = 0
            for proc in [me, *me.children(recursive=True)]:
                try:
                    info = proc.memory_full_info()
                    total += getattr(info, "pss", info.rss)
                except psutil.Error:
                    pass
            self.peak = max(self.peak, total)
            if self.watch_dir is not None:
                try:
                    self.peak_disk = max(self.peak_disk, du(self.watch_dir))
                except OSError:  # a file renamed or removed while walking
                    pass
            self._stop.wait(self.every_s)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def run_build(corpus: list[Path], out: Path, engine: str, n: int, minhash: bool,
              text_store: str = "auto") -> dict:
    """One build; wall time, and CPU time of every process involved (contention-proof rate)."""
    from tcqa_data.decontam.build import build_index

    if out.exists():
        shutil.rmtree(out)
    load0 = os.getloadavg()[0]
    start_s = 0.0
    with PeakMemory(watch_dir=out) as mem:
        t0 = time.perf_counter()
        eng = phase_timed_engine(engine, n)
        if engine == "ray":
            eng = eng.start()  # started here: the build's wall time excludes it
        start_s = time.perf_counter() - t0
        cpu0, own0 = tree_cpu_s(), own_cpu_s()
        t0 = time.perf_counter()
        manifest = build_index([str(c) for c in corpus], out, engine=eng, workers=n, minhash=minhash,
                               quiet=True, text_store=text_store)
        wall = time.perf_counter() - t0
        cpu, driver = tree_cpu_s() - cpu0, own_cpu_s() - own0
        eng.close()
    size = sum(c.stat().st_size for c in corpus)
    row = {"engine": engine, "workers": n, "wall_s": round(wall, 1), "ray_start_s": round(start_s, 1),
           "cpu_s": round(cpu, 2), "driver_cpu_s": round(driver, 2),
           # the driver's own work outside the engine's steps (planning, docs table, commit);
           # the rest of the tree's CPU outside them is Ray's daemons, which tick with wall time
           "driver_serial_cpu_s": round(driver - sum(p["driver_cpu_s"] for p in eng.phases.values()), 2),
           "mb_per_s": round(size / 1e6 / wall, 2), "mb_per_cpu_s": round(size / 1e6 / cpu, 2),
           "index_bytes": du(out), "index_bytes_per_corpus_byte": round(du(out) / size, 3),
           "docs": manifest["counts"]["docs"], "digest": index_digest(out),
           "peak_tree_mem_bytes": mem.peak, "peak_disk_bytes": mem.peak_disk, "phases": eng.phases,
           "load_avg_before": round(load0, 2), "load_avg_after": round(os.getloadavg()[0], 2)}
    shutil.rmtree(out)
    return row


def project(serial: float, map_: float, reduces: list[tuple[float, int]], fixed_s: float,
            index_ratio: float) -> list[dict]:
    """wall = start-up + serial driver work + map work over all cores + each reduce's work over at
    most as many cores as it has tasks (``reduces``: (rate, tasks) for the n-gram buckets and the
    MinHash bands). Rates are CPU s per MB."""
    rows = []
    for tb in (1, 10):
        mb = tb * 1e6
        for cores in (8, 64, 256, 512):
            serial_h = mb * serial / 3600
            map_h = mb * map_ / cores / 3600
            reduce_h = sum(mb * rate / min(cores, tasks) for rate, tasks in reduces) / 3600
            rows.append({"tb": tb, "cores": cores, "map_h": round(map_h, 2), "reduce_h": round(reduce_h, 2),
                         "serial_h": round(serial_h, 2),
                         "wall_h": round(fixed_s / 3600 + serial_h + map_h + reduce_h, 2),
                         "index_tb": round(tb * index_ratio, 2)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", type=float, default=1.0, help="synthetic corpus size (GB, 1e9 bytes)")
    ap.add_argument("--configs", default="local:1,local:2,ray:1,ray:2",
                    help="engine:workers list, e.g. local:1,ray:2")
    ap.add_argument("--minhash", action="store_true", help="also build the MinHash index")
    ap.add_argument("--keep", action="store_true", help="keep a corpus this script created")
    ap.add_argument("--reduce-tasks", type=int, default=64,
                    help="reduce tasks at scale (buckets x n-gram sizes; default 64 buckets, n=13)")
    ap.add_argument("--json", type=Path, default=BENCH / "bench_scale.json")
    ap.add_argument("--inputs", type=Path, nargs="+",
                    help="index these files (or every *.jsonl in these folders), not the synthetic corpus")
    ap.add_argument("--text-store", default="auto", help="the build's --text-store (none: no text store)")
    ap.add_argument("--out", type=Path, default=BENCH / "scale_idx", help="scratch index folder")
    ap.add_argument("--minhash-range-windows", type=int, default=0,
                    help="split each MinHash band's merge by key range past this many windows per range "
                         "(0: the default, RANGE_WINDOWS; e.g. 2000000 to measure the split at 1 GB)")
    args = ap.parse_args()
    if args.minhash_range_windows:
        from tcqa_data.decontam.minhash import merge as mh_merge

        mh_merge.RANGE_WINDOWS = args.minhash_range_windows  # the plan is made in this process
    if not WIKI.is_file():
        sys.exit(f"needs {WIKI} (the shared real data)")

    BENCH.mkdir(exist_ok=True)
    name = "synthetic_1gb.jsonl" if args.gb == 1.0 else f"synthetic_{args.gb:g}gb.jsonl"
    corpus = BENCH / name
    created = False
    if args.inputs:
        files = sorted(f for i in args.inputs for f in (i.glob("*.jsonl") if i.is_dir() else [i]))
    elif not corpus.is_file() or corpus.stat().st_size < args.gb * 1e9 * 0.99:
        print(f"writing {corpus} ({args.gb:g} GB) ...", flush=True)
        make_corpus(corpus, int(args.gb * 1e9))
        created = True
    if not args.inputs:
        files = [corpus]
    res: dict = {"cpu_count": os.cpu_count(), "corpus": [str(f) for f in files],
                 "corpus_bytes": sum(f.stat().st_size for f in files), "minhash": args.minhash,
                 "text_store": args.text_store, "builds": []}
    try:
        if not args.inputs:
            res["driver_passes"] = driver_passes(corpus)
            print("driver passes", res["driver_passes"], flush=True)
        res["ray_overhead"] = [ray_overhead(c, str(files[0])) for c in (1, 2)]
        print("ray overhead", res["ray_overhead"], flush=True)
        for cfg in filter(None, args.configs.split(",")):
            engine, n = cfg.split(":")
            row = run_build(files, args.out, engine, int(n), args.minhash, args.text_store)
            res["builds"].append(row)
            print("build", row, flush=True)
    finally:
        if created and not args.keep:
            corpus.unlink(missing_ok=True)

    builds = res["builds"]
    if not builds:
        args.json.write_text(json.dumps(res, indent=2) + "\n")
        return
    base = next((b for b in builds if b["engine"] == "local" and b["workers"] == 1), builds[0])
    for b in builds:
        b["speedup_vs_local_1"] = round(base["wall_s"] / b["wall_s"], 2)
    res["identical_indexes"] = len({b["digest"] for b in builds}) == 1
    # The model behind the projection, from the Ray build on the most CPUs. CPU time, not wall
    # time, so other load on this shared machine does not inflate the rates. Map: checksum, split,
    # map tasks and the text store (one task per input); reduce: bucket merges and MinHash band
    # merges; serial: everything outside the engine's steps, when only the driver works
    # (planning, docs table, commit; Ray's daemons count here too).
    ray_builds = [b for b in builds if b["engine"] == "ray"]
    if ray_builds:
        ref = max(ray_builds, key=lambda b: b["workers"])
        mb = res["corpus_bytes"] / 1e6
        ph = ref["phases"]
        # (the MinHash run groups' merges, past 4,096 runs: bands x groups tasks, as parallel as the map)
        # (and the n-gram buckets' run groups, likewise past 4,096 runs: buckets x groups tasks;
        # and the bands' key ranges, past RANGE_WINDOWS windows a range: bands x ranges tasks, a
        # range per ~2 GB of text; the band tasks then only pack the ranges' runs)
        map_cpu = sum(ph.get(k, {}).get("cpu_s", 0.0) for k in (
            "index-checksum", "index-split", "index-map", "index-textstore", "index-minhash-groups",
            "index-reduce-groups", "index-minhash-ranges"))
        ngram_cpu = ph.get("index-reduce", {}).get("cpu_s", 0.0)
        mh = ph.get("index-minhash-reduce", {"cpu_s": 0.0, "tasks": 1})  # 1 + bands tasks, any corpus size
        reduce_cpu = ngram_cpu + mh["cpu_s"]
        # serial: the driver's own work outside the steps, taken as linear in the corpus (an
        # upper bound); Ray's daemons (the tree's other CPU outside the steps) are reported apart
        serial_cpu = ref["driver_serial_cpu_s"]
        daemons_cpu = ref["cpu_s"] - sum(p["cpu_s"] for p in ph.values()) - serial_cpu
        fixed = max((o["start_s"] for o in res.get("ray_overhead", [])), default=0.0)
        res["projection_inputs"] = {
            "from": f"ray:{ref['workers']}", "map_cpu_s_per_mb": round(map_cpu / mb, 4),
            "reduce_cpu_s_per_mb": round(reduce_cpu / mb, 4),
            "minhash_reduce_cpu_s_per_mb": round(mh["cpu_s"] / mb, 4), "minhash_reduce_tasks": mh["tasks"],
            "serial_s_per_mb": round(serial_cpu / mb, 5), "ray_daemons_cpu_s": round(daemons_cpu, 2),
            "reduce_tasks": args.reduce_tasks, "fixed_s": fixed,
            "per_core_mb_s": round(mb / (map_cpu + reduce_cpu), 2),
            "index_bytes_per_corpus_byte": ref["index_bytes_per_corpus_byte"]}
        res["projection"] = project(serial_cpu / mb, map_cpu / mb,
                                    [(ngram_cpu / mb, args.reduce_tasks), (mh["cpu_s"] / mb, mh["tasks"])],
                                    fixed, ref["index_bytes_per_corpus_byte"])
    args.json.write_text(json.dumps(res, indent=2) + "\n")

    print("\n| engine | workers/CPUs | wall (s) | MB/s | speedup vs local 1 | CPU s | MB per CPU s "
          "| peak PSS (GB) | peak disk (GB) | load avg before/after |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for b in builds:
        print(f"| {b['engine']} | {b['workers']} | {b['wall_s']} | {b['mb_per_s']} | "
              f"{b['speedup_vs_local_1']} | {b['cpu_s']} | {b['mb_per_cpu_s']} | "
              f"{b['peak_tree_mem_bytes'] / 1e9:.2f} | {b['peak_disk_bytes'] / 1e9:.2f} | "
              f"{b['load_avg_before']}/{b['load_avg_after']} |")
        print("  steps: " + ", ".join(f"{k} {v['tasks']} tasks {v['cpu_s']} CPU-s / {v['wall_s']} s"
                                      for k, v in b["phases"].items()))
    print(f"\nall builds byte-identical: {res['identical_indexes']}")
    print(f"\nprojection inputs: {res.get('projection_inputs')}")
    print("\n| text | cores | map (h) | reduce (h) | serial driver part (h) | wall (h) | index (TB) |")
    print("|---|---|---|---|---|---|---|")
    for p in res.get("projection", []):
        print(f"| {p['tb']} TB | {p['cores']} | {p['map_h']} | {p['reduce_h']} | {p['serial_h']} | "
              f"{p['wall_h']} | {p['index_tb']} |")
    print(f"\nwritten {args.json}")


if __name__ == "__main__":
    main()
