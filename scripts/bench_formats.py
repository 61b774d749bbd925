"""Reader cost per corpus format (issue 39): the shared wiki sample (20.6 MB, 1,411 articles) as
plain JSONL, .jsonl.gz, .jsonl.zst, .jsonl.bz2, .ndjson.xz, JSONL with the text nested
(``metadata.text``) and a ``datasets`` ``save_to_disk`` folder (Arrow), each read as the stream pass
reads it: the compiled JSONL reader (``iter_normalized_batches``) where it applies, else
``iter_documents`` + ``encode_normalized`` (the Python path). CPU-s and wall of this process, best
of 3 after a warm-up read.

    nice .venv/bin/python scripts/bench_formats.py [--work /tmp/bench_formats]
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import json
import lzma
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SAMPLE = REPO.parent / "shared" / "data" / "corpus" / "wiki_sample.jsonl"


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    import datasets
    import zstandard

    from tcqa_data.decontam.core.hashing import encode_normalized
    from tcqa_data.decontam.readers import (
        iter_documents,
        iter_normalized_batches,
        normalized_batches_supported,
        resolve_inputs,
    )

    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench_formats"))
    work = ap.parse_args().work
    work.mkdir(parents=True, exist_ok=True)
    raw = SAMPLE.read_bytes()
    rows = [json.loads(x) for x in raw.splitlines()]
    nested = "".join(json.dumps({"id": r["id"], "metadata": {"text": r["text"]}}, ensure_ascii=False) + "\n"
                     for r in rows).encode()
    cases = [("plain.jsonl", raw, "text"), ("c.jsonl.gz", gzip.compress(raw), "text"),
             ("c.jsonl.zst", zstandard.compress(raw), "text"), ("c.jsonl.bz2", bz2.compress(raw), "text"),
             ("c.ndjson.xz", lzma.compress(raw), "text"), ("nested.jsonl", nested, "metadata.text")]
    for name, data, _ in cases:
        (work / name).write_bytes(data)
    datasets.Dataset.from_list(rows).save_to_disk(str(work / "saved"))
    cases.append(("saved", b"", "text"))
    for name, _, field in cases:
        (inp,) = resolve_inputs([str(work / name)])
        fast = normalized_batches_supported(inp.format, field, None, "janitor")
        best = None
        for rep in range(4):
            c0, t0 = _cpu(), time.perf_counter()
            if fast:
                docs = sum(len(b.rows) for b in iter_normalized_batches(inp, field))
            else:
                docs = 0
                for d in iter_documents(inp, field):
                    encode_normalized(d.text)
                    docs += 1
            took = (_cpu() - c0, time.perf_counter() - t0)
            if rep and (best is None or took[0] < best[0]):
                best = took
        assert best is not None
        print(json.dumps({"input": name, "format": inp.format, "compiled_reader": fast, "docs": docs,
                          "cpu_s": round(best[0], 2), "wall_s": round(best[1], 2)}), flush=True)


if __name__ == "__main__":
    main()
