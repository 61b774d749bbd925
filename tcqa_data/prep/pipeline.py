"""Stage 2: flag contaminated benchmark docs against an index and write clean/dirty splits.

``decontaminate(index_dir, tasks, out_dir)`` is the library entry point; the CLI only parses options.
Outputs are deterministic: the same inputs give byte-identical files (no timestamps, sorted keys).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import tcqa_data
from tcqa_data.decontam.detect import (
    DEFAULT_RULE,
    QueryDoc,
    Rule,
    auto_ngram,
    doc_status,
    has_minhash,
    score_docs,
)
from tcqa_data.errors import ConfigError, IndexMismatchError
from tcqa_data.io_utils import write_json_atomic, write_parquet_atomic, write_text_atomic
from tcqa_data.prep.benchmarks import BenchmarkSplit, group_ids, load_split
from tcqa_data.prep.lm_eval_export import export_lm_eval
from tcqa_data.prep.report import write_reports
from tcqa_data.prep.splits import GROUP_POLICIES, add_ids, check_invariants, group_flags, split_table
from tcqa_data.prep.taskspec import TaskSpec
from tcqa_data.progress import progress_bar, rate_text


def parse_data_files(items: Iterable[str], tasks: Sequence[str]) -> dict[str, dict[str, str]]:
    """``TASK:SPLIT=PATH`` (or ``SPLIT=PATH`` when there is one task) -> {task: {split: path}}."""
    out: dict[str, dict[str, str]] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--data-files {item!r}: expected TASK:SPLIT=PATH, e.g. "
                              "mc_taco:test=../shared/data/mc_taco/test_9442.tsv")
        key, path = item.split("=", 1)
        if ":" in key:
            task, split = key.split(":", 1)
        elif len(tasks) == 1:
            task, split = tasks[0], key
        else:
            raise ConfigError(f"--data-files {item!r}: with several tasks name the task: TASK:SPLIT=PATH")
        # with a task given as a YAML path, its spec's `task` name is checked later, in decontaminate
        if task not in tasks and not any(t.endswith((".yaml", ".yml")) for t in tasks):
            raise ConfigError(f"--data-files {item!r}: task {task!r} is not among --tasks {list(tasks)}")
        out.setdefault(task, {})[split] = path
    return out


def _index_summary(idx: Any, index_dir: str | os.PathLike) -> dict[str, Any]:
    """The index manifest (long lists shortened) plus its path, for the prep manifest and reports."""
    summary: dict[str, Any] = {"path": str(Path(index_dir).resolve())}
    for key, value in sorted(idx.manifest.items()):
        if key == "build":  # timestamps and durations: would make reruns differ byte-wise
            continue
        if isinstance(value, list) and len(value) > 20:
            value = value[:20] + [f"... {len(value) - 20} more"]
        summary[key] = value
    return summary


def decontaminate(
    index_dir: str | os.PathLike,
    tasks: Sequence[str] | str,
    out_dir: str | os.PathLike,
    *,
    data_files: Mapping[str, Mapping[str, str | os.PathLike]] | None = None,
    splits: Sequence[str] | None = None,
    rule: str = DEFAULT_RULE,
    ngram: str | int = "13",
    max_corpus_freq: int | None = None,
    group_policy: str = "any",
    normalization: str | None = None,
    quiet: bool = False,
) -> dict[str, Any]:
    """Score every doc of ``tasks`` against the index, write PREP_DIR, return the summary.

    ``data_files`` maps task -> split -> local file; a task with local files processes exactly those
    splits, others load their declared splits from the hub. ``splits`` restricts the split names.
    ``ngram`` is an int n that the index holds, or "auto" (GPT-3's per-benchmark n).
    ``normalization``, when given, must equal the index's (else IndexMismatchError).
    """
    from tcqa_data.decontam.ngram_index import NgramIndex

    if isinstance(tasks, str):
        tasks = [t.strip() for t in tasks.split(",") if t.strip()]
    if not tasks:
        raise ConfigError("no tasks given; e.g. --tasks mc_taco,squad_completion")
    if group_policy not in GROUP_POLICIES:
        raise ConfigError(f"unknown group policy {group_policy!r}; choose one of {GROUP_POLICIES}")
    if max_corpus_freq is not None and max_corpus_freq < 1:
        raise ConfigError("--max-corpus-freq must be >= 1")
    parsed_rule = Rule.parse(rule)
    fixed_n: int | None = None
    if str(ngram) != "auto":
        try:
            fixed_n = int(ngram)
        except ValueError as exc:
            raise ConfigError(f"--ngram must be an integer or 'auto', not {ngram!r}") from exc
    idx = NgramIndex.open(str(index_dir))
    if normalization is not None and normalization != idx.normalization:
        raise IndexMismatchError(
            f"index {index_dir} was built with normalization {idx.normalization!r}, but "
            f"{normalization!r} was asked; rebuild the index or ask for {idx.normalization!r}")
    minhash_ok = has_minhash(str(index_dir))
    if parsed_rule.uses_minhash and not minhash_ok:
        raise IndexMismatchError(f"rule {str(parsed_rule)!r} uses MinHash, but index {index_dir} has no "
                                 "MinHash section; rebuild it with MinHash or use an n-gram rule")
    sizes = sorted(int(s) for s in idx.ngram_sizes)
    index_summary = _index_summary(idx, index_dir)
    out = Path(out_dir)
    data_files = {k: dict(v) for k, v in (data_files or {}).items()}
    specs = [TaskSpec.resolve(t) for t in tasks]
    # local files may be keyed by the name given in `tasks` (maybe a YAML path) or by spec.task
    known = set(tasks) | {s.task for s in specs}
    unknown = sorted(set(data_files) - known)
    if unknown:
        raise ConfigError(f"data files given for tasks {unknown} that are not among {list(tasks)}")

    config = {
        "rule": str(parsed_rule),
        "rule_help": "dirty if any '|'-separated clause holds; '&' joins terms of a clause",
        "group_policy": group_policy,
        "max_corpus_freq": max_corpus_freq,
        "normalization": idx.normalization,
        "minhash_available": minhash_ok,
        "untestable_policy": "docs shorter than n words with no other rule term firing are kept in the "
                             "clean split and reported as 'untestable'",
    }
    manifest_tasks: dict[str, Any] = {}
    summary: dict[str, Any] = {"out_dir": str(out), "rule": str(parsed_rule), "tasks": {}}
    for task_name, spec in zip(tasks, specs, strict=True):
        local = data_files.get(task_name) or data_files.get(spec.task) or {}
        role_of = {name: role for role, name in spec.splits().items()}
        if local:
            wanted = list(local)
        else:
            wanted = list(spec.splits().values())
        if splits:
            wanted = [s for s in wanted if s in splits]
        if not wanted:
            declared = list(spec.splits().values())
            raise ConfigError(f"task {spec.task!r}: no split to process (declared {declared}, "
                              f"local files {list(local)}, --splits {list(splits or [])})")
        loaded: list[BenchmarkSplit] = [load_split(spec, s, local.get(s)) for s in wanted]
        queries = {b.split: [spec.decontamination_query(d) for d in b.docs()] for b in loaded}
        if fixed_n is None:
            from tcqa_data.decontam.normalize import tokenize

            counts = [len(tokenize(q, idx.normalization)) for qs in queries.values() for q in qs]
            n = auto_ngram(counts)
            how = "auto (GPT-3: 5th percentile of query length in words, clamped to 8..13)"
        else:
            n, how = fixed_n, "fixed"
        if n not in sizes:
            raise IndexMismatchError(
                f"task {spec.task!r} needs {n}-grams ({how}), but index {index_dir} holds n-gram sizes "
                f"{sizes}; rebuild the index with --ngram {n} or pass --ngram with one of {sizes}")
        task_dir = out / spec.task
        write_text_atomic(task_dir / "task.yaml", spec.to_yaml())
        manifest_tasks[spec.task] = {"ngram": n, "ngram_choice": how, "splits": {}}
        summary["tasks"][spec.task] = {}
        for b in loaded:
            counts = _process_split(
                spec, b, queries[b.split], role_of.get(b.split, "test"), task_dir / b.split,
                index_dir=str(index_dir), n=n, rule=parsed_rule, max_corpus_freq=max_corpus_freq,
                group_policy=group_policy, use_minhash=minhash_ok,
                config={**config, "ngram": n, "ngram_choice": how}, index_summary=index_summary, quiet=quiet)
            manifest_tasks[spec.task]["splits"][b.split] = counts
            summary["tasks"][spec.task][b.split] = counts
    manifest = {
        "format_version": tcqa_data.FORMAT_VERSION,
        "tcqa_data_version": tcqa_data.__version__,
        "index": index_summary,
        **config,
        "tasks": manifest_tasks,
    }
    write_json_atomic(out / "prep_manifest.json", manifest)
    return summary


def _process_split(spec: TaskSpec, b: BenchmarkSplit, queries: list[str], role: str, split_dir: Path, *,
                   index_dir: str, n: int, rule: Rule, max_corpus_freq: int | None, group_policy: str,
                   use_minhash: bool, config: dict[str, Any], index_summary: dict[str, Any],
                   quiet: bool) -> dict[str, Any]:
    import time

    docs = b.docs()
    fields = spec.query_fields()
    qdocs = [QueryDoc(q, {f: str(d[f]) for f in fields if d.get(f) is not None})
             for q, d in zip(queries, docs, strict=True)]
    with progress_bar(quiet) as prog:
        t0 = time.perf_counter()
        task_id = prog.add_task(f"{spec.task}/{b.split}", total=len(qdocs), rate="")
        done = [0]

        def step(k: int) -> None:
            done[0] += k
            if done[0] % 500 == 0 or done[0] == len(qdocs):
                prog.update(task_id, completed=done[0],
                            rate=rate_text(done[0], time.perf_counter() - t0, "docs"))

        cols = score_docs(qdocs, index_dir, n, max_corpus_freq=max_corpus_freq, use_minhash=use_minhash,
                          progress=step)
    gids = group_ids(spec, b.table)
    dirty_doc, fired = rule.evaluate(cols)
    dirty = group_flags(dirty_doc, gids, group_policy)
    status = doc_status(dirty, np.asarray(cols["testable"]), rule, cols["minhash_windows"])
    full = add_ids(b.table, gids)
    clean_t, dirty_t = split_table(full, dirty)
    check_invariants(full, clean_t, dirty_t)
    contamination = _contamination_table(cols, gids, n, dirty_doc, dirty, status, fired)
    write_parquet_atomic(split_dir / "full.parquet", full)
    write_parquet_atomic(split_dir / "clean.parquet", clean_t)
    write_parquet_atomic(split_dir / "dirty.parquet", dirty_t)
    write_parquet_atomic(split_dir / "contamination.parquet", contamination)
    export_lm_eval(spec, b.split, role, split_dir)
    counts = write_reports(spec, b.split, b.source, full, contamination, split_dir, config=config,
                           index_summary=index_summary)
    return counts


def _contamination_table(cols: dict[str, list], gids: list[int], n: int, dirty_doc: np.ndarray,
                         dirty: np.ndarray, status: list[str], fired: list[str]) -> pa.Table:
    k = len(gids)
    data: dict[str, pa.Array] = {
        "doc_id": pa.array(np.arange(k, dtype=np.int64)),
        "group_id": pa.array(np.asarray(gids, dtype=np.int64)),
        "status": pa.array(status, type=pa.string()),
        "dirty": pa.array(np.asarray(dirty, dtype=bool)),
        "doc_dirty": pa.array(np.asarray(dirty_doc, dtype=bool)),
        "rule_fired": pa.array(fired, type=pa.string()),
        "ngram_n": pa.array(np.full(k, n, dtype=np.int64)),
    }
    types = {
        "query": pa.string(), "query_words": pa.int64(), "testable": pa.bool_(), "ngram_total": pa.int64(),
        "ngram_hits": pa.int64(), "ngram_common": pa.int64(), "ngram_fraction": pa.float64(),
        "longest_match": pa.int64(), "matched_words": pa.int64(), "min_doc_freq": pa.int64(),
        "max_doc_freq": pa.int64(), "matched_doc_refs": pa.list_(pa.string()),
        "matched_doc_ngrams": pa.list_(pa.int64()), "match_spans": pa.list_(pa.list_(pa.int64())),
        "match_fields": pa.list_(pa.string()), "field_names": pa.list_(pa.string()),
        "field_words": pa.list_(pa.int64()), "field_matched_words": pa.list_(pa.int64()),
        "match_field": pa.string(), "minhash_windows": pa.int64(), "minhash_sim": pa.float64(),
        "minhash_query_window": pa.string(),
        "minhash_doc_ref": pa.string(),
    }
    for name, typ in types.items():
        data[name] = pa.array(cols[name], type=typ)
    return pa.table(data)
