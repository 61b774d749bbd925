"""Purify's output shards as engine tasks that a rerun after ``kill -9`` reuses (``tcqa-data purify``).

Each corpus input is one output shard: ``purify_shard_task`` rewrites it (``purify.purify_input``)
on a worker (a local process or a Ray task), atomically, at its final relative path inside the
run's work area, then writes the shard's done-record; the task returns the shard's removals (plain
JSON values) and the driver writes ``removal_log.parquet`` and the reports from them. The work area
is ``outputs.next_generation_dir(OUT)``, beside ``OUT``, under a fixed name a rerun finds again:

    run.json          the run's digest (options, tasks, flagged n-grams) and inputs (path, size):
                      a run whose record differs starts with an empty work area
    dirty.<n>.npy     the flagged benchmark n-gram hashes of size n, sorted (the tasks' lookups)
    done/<k>.json     input k's done-record: the input's size and sha256, the shard's digest (the
                      run's and the input's contaminated rows), the output's path, size and sha256,
                      and the removals; written after the output, atomically
    out/              what becomes ``OUT`` by one rename: the output shards, then the log and reports

A shard is reused only when its record matches the input (size, sha256), the digest and the output
file as it is now (size, sha256); any other shard is written again, so a rerun writes the bytes an
uninterrupted run writes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tcqa_data.decontam.readers import CorpusInput
from tcqa_data.decontam.readers.storage import content_sha256
from tcqa_data.decontam.stream.purify import PurifyConfig, Removal, purify_input
from tcqa_data.decontam.stream.table import BenchmarkTable, StreamConfig
from tcqa_data.io_utils import load_npy, read_json, write_json_atomic, write_npy_atomic
from tcqa_data.outputs import file_sha256, relative_inside

RECORD_VERSION = 1


def removal_dict(rem: Removal) -> dict[str, Any]:
    """A removal as plain JSON values (a done-record's and a task result's form)."""
    return {"row": rem.row, "action": rem.action, "pieces": rem.pieces,
            "spans": [[a, b] for a, b in rem.spans], "bytes_removed": rem.bytes_removed,
            "ngram_matches": rem.ngram_matches, "span_cuts": rem.span_cuts}


def removal_from_dict(d: Mapping[str, Any]) -> Removal:
    return Removal(int(d["row"]), str(d["action"]), int(d["pieces"]),
                   [(int(a), int(b)) for a, b in d["spans"]], int(d["bytes_removed"]),
                   int(d.get("ngram_matches", 0)), int(d.get("span_cuts", 0)))


def digest(value: Any) -> str:
    """sha256 of a JSON value's canonical text."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def shard_digest(run_digest: str, rows: Mapping[int, str], word_spans: list[list[Any]] | None = None) -> str:
    """What a shard's bytes depend on besides its input: the run's digest, the input's
    contaminated rows (line or row -> doc ref) and the word spans cut from them (``word_spans``
    as the task takes them)."""
    return digest([run_digest, sorted(rows.items()), *([word_spans] if word_spans else [])])


def spans_by_row(word_spans: list[list[Any]] | None) -> dict[int, list[tuple[int, int]]]:
    """A task's ``word_spans`` ([line or row, [[start, end], ...]]) as ``purify_input`` takes them."""
    return {int(r): [(int(a), int(b)) for a, b in spans] for r, spans in word_spans or []}


def open_work_area(work: Path, run_record: Mapping[str, Any], dirty: Mapping[int, np.ndarray]) -> None:
    """The work area of a run with ``run_record``: kept when a killed run left one with the same
    record, else emptied; the flagged hashes (``dirty``: n -> sorted hashes) written for the tasks."""
    record = {"version": RECORD_VERSION, **run_record}
    try:
        same = read_json(work / "run.json") == json.loads(json.dumps(record))
    except (OSError, ValueError):
        same = False
    if not same and work.exists():
        shutil.rmtree(work)
    (work / "done").mkdir(parents=True, exist_ok=True)
    (work / "out").mkdir(exist_ok=True)
    for n, keys in dirty.items():
        write_npy_atomic(work / f"dirty.{n}.npy", np.asarray(keys, dtype=np.uint64))
    if not same:
        write_json_atomic(work / "run.json", record)


def remove_leftovers(out_root: Path, keep: Iterable[str]) -> None:
    """Delete every file under ``out_root`` but the output shards ``keep`` (relative paths): the
    temporary files of writes a kill cut short, and a killed run's log and reports (written again)."""
    wanted = {Path(k) for k in keep}
    for folder, _, files in os.walk(out_root):
        for name in files:
            p = Path(folder, name)
            if p.relative_to(out_root) not in wanted:
                p.unlink()


def _matches(record: Mapping[str, Any], want: Mapping[str, Any], dest: Path) -> bool:
    if any(record.get(k) != v for k, v in want.items()):
        return False
    try:
        if dest.stat().st_size != record.get("output_size"):
            return False
    except OSError:
        return False
    return file_sha256(dest) == record.get("output_sha256")


def purify_shard_task(work: str, cfg: dict[str, Any], index: int, path: str, format: str, size: int,
                      rel: str, rows: list[list[Any]], shard: str, word_spans: list[list[Any]] | None = None
                      ) -> dict[str, Any]:
    """Input ``index`` (``path``, ``format``, ``size``) written to ``work/out/rel`` without the
    contamination of ``rows`` ([line or row, doc ref]) and the ``word_spans`` ([line or row, [[start,
    end], ...]]: ``purify.purify_input``) by ``cfg`` (``PurifyConfig`` as a dict), unless
    its done-record shows the same shard (digest ``shard``) already written; returns ``{"removals":
    [...], "reused": bool}``."""
    folder = Path(work)
    dest = relative_inside(folder / "out", rel, what="output shard")
    record_path = folder / "done" / f"{index:06d}.json"
    want = {"version": RECORD_VERSION, "input": rel, "input_size": size, "input_sha256": content_sha256(path),
            "shard": shard}
    try:
        record = read_json(record_path)
    except (OSError, ValueError):
        record = None
    if isinstance(record, dict) and _matches(record, want, dest):
        return {"removals": record["removals"], "reused": True}
    record_path.unlink(missing_ok=True)
    config = PurifyConfig(**{**cfg, "whole_sizes": tuple(cfg["whole_sizes"])})
    sizes = (config.n, *config.whole_sizes)
    table = BenchmarkTable.from_keys(StreamConfig(ngram_sizes=sizes), {
        n: load_npy(folder / f"dirty.{n}.npy", None) for n in sizes}, np.empty(0, np.uint64))

    def is_dirty(hashes: np.ndarray, n: int) -> np.ndarray:
        return table.lookup(hashes, n)[1]

    refs = {int(r): str(ref) for r, ref in rows}
    removals = [removal_dict(r) for r in purify_input(CorpusInput(path, format, size), dest, refs, config,
                                                      is_dirty, spans_by_row(word_spans))]
    write_json_atomic(record_path, {**want, "output_size": dest.stat().st_size,
                                    "output_sha256": file_sha256(dest), "removals": removals})
    return {"removals": removals, "reused": False}


def config_dict(cfg: PurifyConfig) -> dict[str, Any]:
    """``cfg`` as plain JSON values (a task argument, part of the run's digest)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(cfg).items()}
