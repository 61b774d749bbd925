"""Purify's output shards written as objects (``tcqa-data purify --out s3://bucket/prefix``): the
object-store twin of ``purify_shards`` (same shard digest, same bytes, same reuse after ``kill -9``),
committed by ``object_outputs``' manifest written last instead of a folder rename.

Under ``OUT/_tcqa_work/`` (``object_outputs.WORK``) until the commit:

    run.json          the run's digest and inputs: a run whose record differs empties the work
    dirty.<n>.npy     the flagged benchmark n-gram hashes of size n (the tasks' lookups)
    done/<k>.json     input k's done-record, written after its shard object: the input's size and
                      fingerprint (an object's ETag as listed, a local file's sha256), the shard
                      digest, the object's size, sha256 and etag, the removals

Each task writes its shard to a temporary local file on its own node, uploads it to ``OUT/<rel>``
(one PUT, or a multipart upload that is invisible until complete), then writes its done-record. A
rerun reuses a shard whose done-record matches the input, the digest and the object as the store
lists it (size and etag): no shared filesystem, and no download to check it.
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tcqa_data.decontam.readers import CorpusInput
from tcqa_data.decontam.readers.storage import content_fingerprint
from tcqa_data.decontam.stream.purify import PurifyConfig, purify_input
from tcqa_data.decontam.stream.purify_shards import RECORD_VERSION, removal_dict, spans_by_row
from tcqa_data.decontam.stream.table import BenchmarkTable, StreamConfig
from tcqa_data.object_outputs import COMMIT, WORK, ObjectFolder
from tcqa_data.outputs import file_sha256


def open_object_work(folder: ObjectFolder, run_record: Mapping[str, Any], dirty: Mapping[int, np.ndarray]
                     ) -> None:
    """The work of a run with ``run_record`` under ``OUT/_tcqa_work``: kept when a killed run left
    one with the same record, else emptied; an earlier commit is withdrawn first (its objects are
    about to be written again); the flagged hashes written for the tasks."""
    import json

    record = {"version": RECORD_VERSION, **run_record}
    if folder.read_json(f"{WORK}/run.json") != json.loads(json.dumps(record)):
        # the record first: the prefix always holds a commit or a run's record (check_ours); an
        # older run's done-records left by a kill here name another shard digest: never reused
        folder.write_json(f"{WORK}/run.json", record)
        folder.remove([n for n in folder.list() if n.startswith(WORK + "/") and n != f"{WORK}/run.json"])
    folder.uncommit()
    for n, keys in dirty.items():
        buf = io.BytesIO()
        np.save(buf, np.asarray(keys, dtype=np.uint64), allow_pickle=False)
        folder.write_bytes(f"{WORK}/dirty.{n}.npy", buf.getvalue())


def purify_object_task(out: str, cfg: dict[str, Any], index: int, path: str, format: str, size: int,
                       rel: str, rows: list[list[Any]], shard: str, word_spans: list[list[Any]] | None = None
                       ) -> dict[str, Any]:
    """Input ``index`` written as the object ``out/rel`` without the contamination of ``rows`` and
    ``word_spans`` (as ``purify_shards.purify_shard_task``), unless
    its done-record shows the same shard already there; returns ``{"removals", "reused",
    "object"}`` (the object's size and sha256, for the commit)."""
    folder = ObjectFolder(out)
    record_rel = f"{WORK}/done/{index:06d}.json"
    want = {"version": RECORD_VERSION, "input": rel, "input_size": size,
            "input_fingerprint": content_fingerprint(path), "shard": shard}
    record = folder.read_json(record_rel)
    if isinstance(record, dict) and all(record.get(k) == v for k, v in want.items()):
        now = folder.info(rel)
        listed = None if now is None else (now["size"], now["etag"])
        if listed == (record.get("output_size"), record.get("output_etag")):
            assert now is not None
            return {"removals": record["removals"], "reused": True,
                    "object": {"size": now["size"], "sha256": record["output_sha256"]}}
    folder.remove([record_rel] if record is not None else [])
    config = PurifyConfig(**{**cfg, "whole_sizes": tuple(cfg["whole_sizes"])})
    sizes = (config.n, *config.whole_sizes)
    keys = {}
    for n in sizes:
        data = folder.read_bytes(f"{WORK}/dirty.{n}.npy")
        assert data is not None, f"{out}/{WORK}/dirty.{n}.npy is missing"
        keys[n] = np.load(io.BytesIO(data), allow_pickle=False)
    table = BenchmarkTable.from_keys(StreamConfig(ngram_sizes=sizes), keys, np.empty(0, np.uint64))

    def is_dirty(hashes: np.ndarray, n: int) -> np.ndarray:
        return table.lookup(hashes, n)[1]

    refs = {int(r): str(ref) for r, ref in rows}
    with tempfile.TemporaryDirectory(prefix=".tcqa-purify-") as tmp:
        dest = Path(tmp) / Path(rel).name
        removals = [removal_dict(r) for r in purify_input(CorpusInput(path, format, size), dest, refs, config,
                                                          is_dirty, spans_by_row(word_spans))]
        sha = file_sha256(dest)
        now = folder.put_file(rel, str(dest))
    folder.write_json(record_rel, {**want, "output_size": now["size"], "output_sha256": sha,
                                   "output_etag": now["etag"], "removals": removals})
    return {"removals": removals, "reused": False, "object": {"size": now["size"], "sha256": sha}}


def commit_objects(folder: ObjectFolder, shards: Mapping[str, Mapping[str, Any]], stage: Path,
                   run: Mapping[str, Any]) -> None:
    """Upload the driver's files in ``stage`` (the log and reports), write the commit manifest
    naming them and every shard, last; then delete the run's work and any object it does not
    name (a killed run's leftovers: never output, as the manifest does not name them)."""
    objects = {rel: {**v, "kind": "shard"} for rel, v in shards.items()}
    for p in sorted(stage.iterdir()):
        info = folder.put_file(p.name, str(p))
        objects[p.name] = {"size": info["size"], "sha256": file_sha256(p), "kind": "report"}
    folder.commit(objects, dict(run))
    folder.remove([n for n in folder.list() if n != COMMIT and n not in objects])
