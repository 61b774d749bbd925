"""Benchmark a stream pass over a corpus in object storage against the same corpus on local disk
(issue 39).

Corpus: the shared wiki sample concatenated ``--copies`` times (default 10: about 206 MB), as one
plain JSONL file and as JSONL.zst (``bench_stream.make_corpus``), on disk and uploaded to a local
S3 server (moto's, in its own process on 127.0.0.1, so its CPU is not the client's). Benchmarks:
MC-TACO test and based-squad validation, ``any-ngram`` on 13-grams, as ``bench_stream.py``.

Measured in one run:

1. ``decontaminate --corpus`` (stream mode, ``--workers``) from local disk and from ``s3://``, each
   command its own child process: wall, CPU (user + sys of the child and its workers), peak RSS;
   the S3 server's own CPU during the S3 runs beside it.
2. Requests and bytes fetched per shard of the stream pass: each shard of the plain object
   (``split_input``: byte ranges, ``SHARD_BYTES``) and the zst object (whole) read as the pass reads
   it (``iter_normalized_batches``), counting s3fs's ranged GETs (``S3File._fetch_range``); the
   newline-count pass that numbers the shards' lines too.
3. fsspec (s3fs) against ``pyarrow.fs.S3FileSystem`` on the same server: listing a prefix of
   ``--objects`` small objects, reading the plain object front to back in 8 MB ranges, and 64
   random 1 MB ranges.

    nice .venv/bin/python scripts/bench_objectstore.py [--work /tmp/bench_objectstore] [--copies 10]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO))

from bench_stream import TASK_ARGS, make_corpus, run  # noqa: E402


def start_server() -> tuple[subprocess.Popen, dict[str, str]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            break
        except OSError:
            time.sleep(0.05)
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "bench",
           "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}
    os.environ.update(env)
    return proc, env


def server_cpu(proc: subprocess.Popen) -> float:
    import psutil

    t = psutil.Process(proc.pid).cpu_times()
    return t.user + t.system


def requests_per_shard(urls: list[str]) -> list[dict]:
    """Each shard of each URL read as the stream pass reads it, s3fs's ranged GETs counted."""
    import s3fs.core

    from tcqa_data.decontam.readers import iter_normalized_batches, resolve_inputs, split_input
    from tcqa_data.decontam.stream.scan import SHARD_BYTES

    counts = {"requests": 0, "bytes": 0}
    fetch = s3fs.core.S3File._fetch_range

    def counted(self, start, end):
        data = fetch(self, start, end)
        counts["requests"] += 1
        counts["bytes"] += len(data)
        return data

    s3fs.core.S3File._fetch_range = counted
    rows = []
    try:
        for inp in resolve_inputs(urls):
            counts.update(requests=0, bytes=0)
            t0 = time.perf_counter()
            shards = split_input(inp, SHARD_BYTES)
            rows.append({"input": inp.path, "shard": "split (line numbering)", "range_mb": 0,
                         "requests": counts["requests"], "mb_fetched": round(counts["bytes"] / 1e6, 1),
                         "wall_s": round(time.perf_counter() - t0, 2)})
            for sh in shards:
                counts.update(requests=0, bytes=0)
                t0 = time.perf_counter()
                docs = sum(len(b.rows) for b in iter_normalized_batches(sh))
                rows.append({"input": inp.path, "shard": f"{sh.index} ({sh.kind})",
                             "range_mb": round((sh.end - sh.start) / 1e6, 1), "docs": docs,
                             "requests": counts["requests"], "mb_fetched": round(counts["bytes"] / 1e6, 1),
                             "wall_s": round(time.perf_counter() - t0, 2)})
    finally:
        s3fs.core.S3File._fetch_range = fetch
    return rows


def fsspec_vs_pyarrow(bucket: str, key: str, size: int, objects: int) -> dict:
    import pyarrow.fs as pafs
    import s3fs

    fs = s3fs.S3FileSystem()
    for i in range(objects):
        fs.pipe(f"{bucket}/many/part-{i:05d}.jsonl", b'{"text": "x"}\n')
    endpoint = os.environ["AWS_ENDPOINT_URL"].removeprefix("http://")
    pa_fs = pafs.S3FileSystem(endpoint_override=endpoint, scheme="http", access_key="bench",
                              secret_key="bench", region="us-east-1")
    out: dict[str, dict] = {"fsspec (s3fs)": {}, "pyarrow.fs": {}}

    def timed(fn):
        t0, c0 = time.perf_counter(), time.process_time()
        n = fn()
        return {"wall_s": round(time.perf_counter() - t0, 3), "cpu_s": round(time.process_time() - c0, 3),
                "result": n}

    fs.invalidate_cache()
    out["fsspec (s3fs)"]["list"] = timed(lambda: len(fs.find(f"{bucket}/many")))
    out["pyarrow.fs"]["list"] = timed(lambda: len(pa_fs.get_file_info(pafs.FileSelector(f"{bucket}/many",
                                                                                          recursive=True))))
    block = 8 << 20

    def s3fs_seq():
        n = 0
        with fs.open(f"{bucket}/{key}", "rb", block_size=block, cache_type="readahead") as fh:
            while chunk := fh.read(block):
                n += len(chunk)
        return n

    def pa_seq():
        n = 0
        with pa_fs.open_input_stream(f"{bucket}/{key}", buffer_size=block) as fh:
            while chunk := fh.read(block):
                n += len(chunk)
        return n

    out["fsspec (s3fs)"]["sequential_8mb"] = timed(s3fs_seq)
    out["pyarrow.fs"]["sequential_8mb"] = timed(pa_seq)
    offsets = [random.Random(k).randrange(0, size - (1 << 20)) for k in range(64)]

    def s3fs_ranges():
        n = 0
        with fs.open(f"{bucket}/{key}", "rb", cache_type="none") as fh:
            for o in offsets:
                fh.seek(o)
                n += len(fh.read(1 << 20))
        return n

    def pa_ranges():
        with pa_fs.open_input_file(f"{bucket}/{key}") as fh:
            return sum(len(fh.read_at(1 << 20, o)) for o in offsets)

    out["fsspec (s3fs)"]["random_1mb_x64"] = timed(s3fs_ranges)
    out["pyarrow.fs"]["random_1mb_x64"] = timed(pa_ranges)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench_objectstore"))
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--objects", type=int, default=1000, help="small objects listed in part 3")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    _, plain, zst = make_corpus(args.work, args.copies)
    server, env = start_server()
    results: dict = {"corpus_mb": round(plain.stat().st_size / 1e6, 1), "copies": args.copies,
                     "workers": args.workers, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    try:
        import s3fs

        fs = s3fs.S3FileSystem()
        fs.mkdir("bench")
        t0 = time.perf_counter()
        fs.put_file(str(plain), "bench/plain/wiki.jsonl")
        fs.put_file(str(zst), "bench/zst/wiki.jsonl.zst")
        results["upload_s"] = round(time.perf_counter() - t0, 1)
        passes = []
        for label, spec in (("local plain", str(plain.parent)), ("s3 plain", "s3://bench/plain/"),
                            ("local zst", str(zst.parent)), ("s3 zst", "s3://bench/zst/")):
            out = args.work / f"prep_{label.replace(' ', '_')}"
            before = server_cpu(server)
            r = run(["-m", "tcqa_data", "decontaminate", "--corpus", spec, *TASK_ARGS, "--out", str(out),
                     "--workers", str(args.workers), "-q"])
            r["server_cpu_s"] = round(server_cpu(server) - before, 2)
            passes.append({"pass": label, **r})
            print(json.dumps(passes[-1]), flush=True)
        results["stream_pass"] = passes
        results["per_shard"] = requests_per_shard(["s3://bench/plain/", "s3://bench/zst/"])
        for row in results["per_shard"]:
            print(json.dumps(row), flush=True)
        results["fsspec_vs_pyarrow"] = fsspec_vs_pyarrow("bench", "plain/wiki.jsonl", plain.stat().st_size,
                                                         args.objects)
        print(json.dumps(results["fsspec_vs_pyarrow"]), flush=True)
    finally:
        server.terminate()
        server.wait()
    (args.work / "results.json").write_text(json.dumps(results, indent=1))
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
