"""``tcqa-data purify``: the training corpus minus its contamination.

1. the tasks' docs are loaded as ``decontaminate`` loads them (built-in or YAML tasks, local data
   files or the hub) and their decontamination queries go into one benchmark table;
2. one pass over the corpus (``decontam/stream``) finds every corpus doc holding one of their
   n-grams; the rule (``--rule``, as ``decontaminate`` takes it) picks the benchmark docs that
   count as contaminated, and a corpus doc is contaminated when it holds an n-gram of one of them
   (with ``any-ngram``, the default: of any benchmark doc);
3. every input is written again under ``OUT_DIR`` in its own format, at the same path relative to
   the inputs' common folder, each contaminated doc dropped (``--mode drop``) or cut as lm-eval's
   ``Janitor.clean`` cuts it (``--mode excise``; ``decontam/stream/excise.py``);
4. ``removal_log.parquet`` (a row per contaminated corpus doc: what it matched, what was removed)
   and ``purify_report.json`` / ``purify_report.md``.

The whole of ``OUT_DIR`` is written in a staging folder and renamed into place
(``outputs.staged``): a killed run leaves no partial output, and a rerun writes the same bytes.
An ``OUT_DIR`` that is, holds or lies inside an input is refused before anything is read.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from tcqa_data.decontam.detect.rules import DEFAULT_RULE, Rule
from tcqa_data.decontam.detect.score import QueryDoc, score_docs
from tcqa_data.decontam.stream.evidence import MINHASH_REFUSAL, StreamEvidence
from tcqa_data.decontam.stream.purify import MODES, PurifyConfig, Removal, purify_input
from tcqa_data.decontam.stream.table import StreamConfig
from tcqa_data.errors import ConfigError
from tcqa_data.io_utils import write_json_atomic, write_parquet_atomic, write_text_atomic
from tcqa_data.outputs import staged
from tcqa_data.prep.benchmarks import load_split
from tcqa_data.prep.pipeline import fill_stream, portable_path, portable_ref
from tcqa_data.prep.taskspec import TaskSpec, is_tcqa_task

TOP_BENCHMARK_DOCS = 20


def check_output_outside_inputs(out_dir: str | os.PathLike, specs: Sequence[str], inputs: Sequence[Any]
                                ) -> None:
    """Refuse an output folder that is, holds or lies inside an input file or folder."""
    out = Path(out_dir).resolve()
    for where in [Path(s) for s in specs if Path(s).exists()] + [Path(i.path) for i in inputs]:
        p = where.resolve()
        if p == out or out in p.parents or p in out.parents:
            raise ConfigError(f"--out {out_dir} is, holds or lies inside the input {where}: the purified "
                              "corpus may never overwrite or mix with its input; choose another folder")


def _load_queries(tasks: Sequence[str], data_files: Mapping[str, Mapping[str, str]],
                  splits: Sequence[str] | None) -> list[tuple[str, str, list[QueryDoc]]]:
    """(task, split, its docs' queries) of every split to check, as ``decontaminate`` reads them."""
    out = []
    for name in tasks:
        if not is_tcqa_task(name):
            raise ConfigError(f"purify takes built-in or task-YAML tasks; {name!r} would be resolved "
                              "through lm-eval: write a task YAML for it")
        spec = TaskSpec.resolve(name)
        local = dict(data_files.get(name) or data_files.get(spec.task) or {})
        wanted = list(local) or list(spec.splits().values())
        wanted = [s for s in wanted if not splits or s in splits]
        if not wanted:
            raise ConfigError(f"task {spec.task!r}: no split to check (--splits {list(splits or [])})")
        fields = spec.query_fields()
        for split in wanted:
            b = load_split(spec, split, local.get(split))
            docs = [QueryDoc(spec.decontamination_query(d),
                             {f: str(d[f]) for f in fields if d.get(f) is not None}) for d in b.docs()]
            out.append((spec.task, split, docs))
    return out


def purify(corpus: Sequence[str], tasks: Sequence[str] | str, out_dir: str | os.PathLike, *,
           data_files: Mapping[str, Mapping[str, str]] | None = None, splits: Sequence[str] | None = None,
           rule: str = DEFAULT_RULE, ngram: int = 13, mode: str = "excise", window: int = 200,
           minimum_slice: int = 200, too_dirty_cutoff: int = 10, janitor_exact: bool = False,
           text_field: str = "text", id_field: str | None = None, on_error: str = "raise", workers: int = 1,
           short_min_words: int | None = 8, engine: str = "local", ray_address: str | None = None,
           quiet: bool = False) -> dict[str, Any]:
    """Write ``corpus`` minus its contamination by ``tasks`` to ``out_dir`` (module doc); returns the
    report. ``short_min_words``: benchmark items of that many words up to ``ngram - 1`` are
    matched whole (their word sequence cut as an n-gram's is); off with ``janitor_exact``."""
    if isinstance(tasks, str):
        tasks = [t.strip() for t in tasks.split(",") if t.strip()]
    if mode not in MODES:
        raise ConfigError(f"--mode {mode!r}: choose one of {list(MODES)}")
    if min(window, minimum_slice, too_dirty_cutoff) < 0 or ngram < 1:
        raise ConfigError("--window, --minimum-slice and --too-dirty-cutoff must be >= 0, --ngram >= 1")
    parsed = Rule.parse(rule)
    if parsed.uses_minhash:
        raise ConfigError(f"rule {str(parsed)!r}: {MINHASH_REFUSAL}")
    evidence = StreamEvidence.open(list(corpus), StreamConfig(
        ngram_sizes=(ngram,), anchors=parsed.uses_alignment, keep_pairs=True, text_field=text_field,
        id_field=id_field, on_error=on_error))
    check_output_outside_inputs(out_dir, corpus, evidence.inputs)
    benchmarks = _load_queries(tasks, data_files or {}, splits)

    # Janitor registers n-grams only: --janitor-exact matches no short item whole
    short = None if janitor_exact else short_min_words
    queries = fill_stream(evidence, [(ngram, [d.query for _, _, docs in benchmarks for d in docs])],
                          quiet=quiet, short_min_words=short, workers=workers, engine=engine,
                          ray_address=ray_address, out=out_dir)
    # the benchmark docs the rule flags, and the queries they hold
    number = {q: i for i, q in enumerate(queries)}
    flagged: dict[int, list[tuple[str, str, int]]] = defaultdict(list)
    for task, split, docs in benchmarks:
        dirty, _ = parsed.evaluate(score_docs(docs, evidence, ngram, use_minhash=False,
                                              align=parsed.uses_alignment, short_min_words=short))
        for i in np.flatnonzero(dirty).tolist():
            flagged[number[docs[i].query]].append((task, split, i))
    hits = evidence.hits
    table = hits.table
    dirty_query = np.zeros(len(queries), dtype=bool)
    dirty_query[list(flagged)] = True
    sizes = table.cfg.ngram_sizes  # n, and the sizes of short items matched whole
    row_dirty = {}
    for size in sizes:
        start = table.holder_start[size]
        holder_row = np.repeat(np.arange(len(start) - 1), np.diff(start))
        row_dirty[size] = np.bincount(holder_row, weights=dirty_query[table.holders[size]],
                                      minlength=len(start) - 1) > 0

    def is_dirty(hashes: np.ndarray, size: int) -> np.ndarray:
        rows, found = table.lookup(np.asarray(hashes, dtype=np.uint64), size)
        return found & row_dirty[size][rows]

    # contaminated corpus docs: a hit on an n-gram (or a whole short item) of a flagged benchmark doc
    matched: dict[int, set[int]] = defaultdict(set)
    for size in sizes:
        pair_rows, pair_docs = hits.hit_pairs(size)
        keep = row_dirty[size][pair_rows]
        start, holders = table.holder_start[size], table.holders[size]
        for r, o in zip(pair_rows[keep].tolist(), pair_docs[keep].tolist(), strict=True):
            matched[o].update(q for q in holders[start[r]:start[r + 1]].tolist() if dirty_query[q])
    fix = portable_ref("stream", evidence.manifest)
    per_input: dict[int, dict[int, int]] = defaultdict(dict)  # input -> row -> doc ordinal
    for o in matched:
        inp_no, row = hits.where[o]
        per_input[inp_no][row] = o

    cfg = PurifyConfig(mode=mode, n=ngram, seed=table.cfg.seed, window=window, minimum_slice=minimum_slice,
                       too_dirty_cutoff=too_dirty_cutoff, janitor_exact=janitor_exact, text_field=text_field,
                       whole_sizes=tuple(s for s in sizes if s != ngram))
    root = Path(os.path.commonpath([str(Path(i.path).resolve().parent) for i in evidence.inputs]))
    log: list[tuple[int, int, Removal]] = []  # (input, doc ordinal, removal)
    with staged(out_dir) as stage:
        for k, inp in enumerate(evidence.inputs):
            rows = {row: str(fix(hits.refs[o])) for row, o in per_input.get(k, {}).items()}
            dest = stage / Path(inp.path).resolve().relative_to(root)
            for rem in purify_input(inp, dest, rows, cfg, is_dirty):
                log.append((k, per_input[k][rem.row], rem))
        report = _report(evidence, log, matched, flagged, fix, cfg, str(parsed))
        write_parquet_atomic(stage / "removal_log.parquet", _log_table(evidence, log, matched, flagged, fix))
        write_json_atomic(stage / "purify_report.json", report)
        write_text_atomic(stage / "purify_report.md", _markdown(report))
    return report


def _log_table(evidence: StreamEvidence, log: list[tuple[int, int, Removal]], matched: dict[int, set[int]],
               flagged: dict[int, list[tuple[str, str, int]]], fix: Any) -> pa.Table:
    cols: dict[str, list] = defaultdict(list)
    for k, o, rem in log:
        bench = sorted({b for q in matched[o] for b in flagged[q]})
        cols["input"].append(portable_path(evidence.inputs[k].path))
        cols["doc_ref"].append(str(fix(evidence.hits.refs[o])))
        cols["row"].append(rem.row)
        cols["action"].append(rem.action)
        cols["pieces"].append(rem.pieces)
        cols["matched_tasks"].append([t for t, _, _ in bench])
        cols["matched_splits"].append([s for _, s, _ in bench])
        cols["matched_doc_ids"].append([i for _, _, i in bench])
        cols["removed_spans"].append([list(s) for s in rem.spans])
        cols["bytes_removed"].append(rem.bytes_removed)
    types = {"input": pa.string(), "doc_ref": pa.string(), "row": pa.int64(), "action": pa.string(),
             "pieces": pa.int64(), "matched_tasks": pa.list_(pa.string()),
             "matched_splits": pa.list_(pa.string()),
             "matched_doc_ids": pa.list_(pa.int64()), "removed_spans": pa.list_(pa.list_(pa.int64())),
             "bytes_removed": pa.int64()}
    return pa.table({name: pa.array(cols[name], type=t) for name, t in types.items()})


def _report(evidence: StreamEvidence, log: list[tuple[int, int, Removal]], matched: dict[int, set[int]],
            flagged: dict[int, list[tuple[str, str, int]]], fix: Any, cfg: PurifyConfig, rule: str
            ) -> dict[str, Any]:
    def blank() -> dict[str, int]:
        return {"contaminated_docs": 0, "dropped": 0, "cut": 0, "kept": 0, "bytes_removed": 0}

    totals = blank()
    inputs = {portable_path(i.path): {**blank(), "bytes": i.size} for i in evidence.inputs}
    per_task: dict[str, dict[str, int]] = defaultdict(blank)
    copies: Counter = Counter()
    for k, o, rem in log:
        tasks = {t for q in matched[o] for t, _, _ in flagged[q]}
        for bucket in (totals, inputs[portable_path(evidence.inputs[k].path)], *(per_task[t] for t in tasks)):
            bucket["contaminated_docs"] += 1
            bucket[rem.action] += 1
            bucket["bytes_removed"] += rem.bytes_removed
        copies.update({b for q in matched[o] for b in flagged[q]})
    top = sorted(copies.items(), key=lambda t: (-t[1], t[0]))[:TOP_BENCHMARK_DOCS]
    return {"mode": cfg.mode, "rule": rule, "ngram": cfg.n,
            "janitor": {"window": cfg.window, "minimum_slice": cfg.minimum_slice,
                        "too_dirty_cutoff": cfg.too_dirty_cutoff, "exact": cfg.janitor_exact},
            "corpus": {"docs": evidence.num_docs, "chars": evidence.hits.chars,
                       "skipped": evidence.hits.skipped.to_dict()},
            "totals": totals, "inputs": inputs, "tasks": dict(sorted(per_task.items())),
            "flagged_benchmark_docs": sum(len(v) for v in flagged.values()),
            "top_benchmark_docs": [{"task": t, "split": s, "doc_id": i, "corpus_docs": c}
                                   for (t, s, i), c in top]}


def _markdown(report: Mapping[str, Any]) -> str:
    from tcqa_data.report_render import Heading, Paragraph, Table, to_markdown

    cols = ["contaminated_docs", "dropped", "cut", "kept", "bytes_removed"]
    t = report["totals"]
    blocks = [
        Heading(1, "Purified corpus"),
        Paragraph(f"mode {report['mode']}, rule {report['rule']}, {report['ngram']}-grams; "
                  f"{report['corpus']['docs']} corpus docs read, {t['contaminated_docs']} contaminated: "
                  f"{t['dropped']} dropped, {t['cut']} cut, {t['kept']} kept (no Janitor match), "
                  f"{t['bytes_removed']} bytes removed."),
        Heading(2, "Per input"),
        Table(["input", *cols], [[name, *(str(v[c]) for c in cols)] for name, v in report["inputs"].items()]),
        Heading(2, "Per task (a corpus doc matching two tasks counts in both)"),
        Table(["task", *cols], [[name, *(str(v[c]) for c in cols)] for name, v in report["tasks"].items()]),
        Heading(2, "Benchmark docs with the most corpus copies"),
        Table(["task", "split", "doc_id", "corpus docs"],
              [[d["task"], d["split"], str(d["doc_id"]), str(d["corpus_docs"])]
               for d in report["top_benchmark_docs"]]),
    ]
    return to_markdown(blocks)
