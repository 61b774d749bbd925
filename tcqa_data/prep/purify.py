"""``tcqa-data purify``: the training corpus minus its contamination.

1. the tasks' docs are loaded as ``decontaminate`` loads them (``task_jobs.task_jobs``: built-in or
   YAML tasks with local data files or the hub, and lm-eval task, group or tag names) and their
   decontamination queries go into one benchmark table;
2. one pass over the corpus (``decontam/stream``) finds every corpus doc holding one of their
   n-grams; the rule (``--rule``, as ``decontaminate`` takes it) picks the benchmark docs that
   count as contaminated, and a corpus doc is contaminated when it holds an n-gram of one of them
   (with ``any-ngram``, the default: of any benchmark doc);
3. every input is written again under ``OUT_DIR`` in its own format, at the same path relative to
   the inputs' common folder, each contaminated doc dropped (``--mode drop``) or cut as lm-eval's
   ``Janitor.clean`` cuts it (``--mode excise``; ``decontam/stream/excise.py``): one task per input
   on the engine (``--workers``, ``--engine ray``), written on the worker
   (``decontam/stream/purify_shards.py``);
4. ``removal_log.parquet`` (a row per contaminated corpus doc: what it matched, what was removed)
   and ``purify_report.json`` / ``purify_report.md``, written by the driver from the tasks' results.

Everything is written in a work area beside ``OUT_DIR`` (``outputs.next_generation_dir``) and
renamed into place at the end: ``OUT_DIR`` appears whole or not at all. A run killed on the way
leaves the work area; a rerun with the same inputs and options reuses each output shard whose
done-record still matches (``purify_shards``) and writes the others, so its bytes are those of an
uninterrupted run; other options or inputs start clean. One writer per ``OUT_DIR``
(``outputs.output_lock``). An ``OUT_DIR`` that is, holds or lies inside an input is refused before
anything is written.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import tcqa_data
from tcqa_data.decontam.detect.rules import DEFAULT_RULE, Rule
from tcqa_data.decontam.detect.score import QueryDoc, score_docs
from tcqa_data.decontam.readers.storage import is_url, relative_names
from tcqa_data.decontam.stream.evidence import MINHASH_REFUSAL, StreamEvidence, fill_stream
from tcqa_data.decontam.stream.purify import MODES, PurifyConfig, Removal
from tcqa_data.decontam.stream.purify_objects import commit_objects, open_object_work, purify_object_task
from tcqa_data.decontam.stream.purify_shards import (
    config_dict,
    digest,
    open_work_area,
    purify_shard_task,
    removal_from_dict,
    remove_leftovers,
    shard_digest,
)
from tcqa_data.decontam.stream.table import StreamConfig
from tcqa_data.deprecation import moved_to_top
from tcqa_data.engines import make_engine, run_tasks
from tcqa_data.errors import ConfigError
from tcqa_data.io_utils import write_json_atomic, write_parquet_atomic, write_text_atomic
from tcqa_data.object_outputs import ObjectFolder, object_url
from tcqa_data.outputs import (
    OWNER_MARKER,
    check_output,
    check_owned,
    commit_dir,
    fault_point,
    next_generation_dir,
    output_lock,
    remove_stale_staging,
    removed_on_full_disk,
    resolve_inside,
    write_owner,
)
from tcqa_data.prep.doc_refs import portable_path, portable_ref
from tcqa_data.prep.task_jobs import query_docs, task_jobs
from tcqa_data.progress import note, progress_bar

TOP_BENCHMARK_DOCS = 20
# the files the driver writes beside the output shards
REPORT_FILES = ("removal_log.parquet", "purify_report.json", "purify_report.md")


def check_output_outside_inputs(out_dir: str | os.PathLike, specs: Sequence[str], inputs: Sequence[Any]
                                ) -> None:
    """Refuse an output folder (or prefix) that is, holds or lies inside an input file or folder."""
    url = object_url(out_dir)
    if url is not None:
        for where in [s for s in specs if is_url(s)] + [i.path for i in inputs if is_url(i.path)]:
            where = where.rstrip("/")
            if url == where or url.startswith(where + "/") or where.startswith(url + "/"):
                raise ConfigError(f"--out {out_dir} is, holds or lies inside the input {where}: the purified "
                                  "corpus may never overwrite or mix with its input; choose another prefix")
        return
    out = Path(out_dir).resolve()
    for where in [Path(s) for s in specs if Path(s).exists()] + [Path(i.path) for i in inputs
                                                                 if not is_url(i.path)]:
        p = where.resolve()
        if p == out or out in p.parents or p in out.parents:
            raise ConfigError(f"--out {out_dir} is, holds or lies inside the input {where}: the purified "
                              "corpus may never overwrite or mix with its input; choose another folder")


def _load_queries(tasks: Sequence[str], data_files: Mapping[str, Mapping[str, str]],
                  splits: Sequence[str] | None, lm_eval_include: Any, lm_eval_include_defaults: bool,
                  allow_task_code: bool = False) -> list[tuple[str, str, list[QueryDoc]]]:
    """(task, split, its docs' queries) of every split to check, as ``decontaminate`` reads them."""
    jobs = task_jobs(tasks, data_files, splits, lm_eval_include=lm_eval_include,
                     lm_eval_include_defaults=lm_eval_include_defaults, allow_task_code=allow_task_code)
    return [(job.task.task, b.split, query_docs(job.task, b, queries))
            for job in jobs for b, queries, _ in job.parts]


@moved_to_top("purify")
def purify(corpus: Sequence[str], tasks: Sequence[str] | str, out_dir: str | os.PathLike, *,
           data_files: Mapping[str, Mapping[str, str]] | None = None, splits: Sequence[str] | None = None,
           rule: str = DEFAULT_RULE, ngram: int = 13, mode: str = "excise", window: int = 200,
           minimum_slice: int = 200, too_dirty_cutoff: int = 10, janitor_exact: bool = True,
           text_field: str = "text", id_field: str | None = None, on_error: str = "raise", workers: int = 1,
           short_min_words: int | None = 8, engine: str = "local", ray_address: str | None = None,
           lm_eval_include: Sequence[str | os.PathLike] | str | os.PathLike | None = None,
           lm_eval_include_defaults: bool = True, quiet: bool = False,
           allow_task_code: bool = False, embedding_model: str | None = None) -> dict[str, Any]:
    """Write ``corpus`` minus its contamination by ``tasks`` to ``out_dir`` (module doc); returns the
    report (``purify_report.json``) plus ``shards``: how many output shards were written and how many
    a killed run had finished (reused). ``short_min_words``: benchmark items of that many words up
    to ``ngram - 1`` are matched whole (their word sequence cut as an n-gram's is) in ``drop`` mode
    and with ``janitor_exact=False``; the default, ``janitor_exact``, cuts exactly ``Janitor.clean_python``'s
    pieces (13-grams only, its windows: ``decontam/stream/excise.py``). ``lm_eval_include``,
    ``lm_eval_include_defaults``, ``allow_task_code``: as ``decontaminate``. A semantic rule term
    takes, for each benchmark doc a semantic clause flags, the corpus docs of its best window and
    of every other candidate window scoring at least the rule's least semantic threshold: drops
    them (``drop``) or cuts the windows' spans from them with Janitor's margin and piece rules
    besides any n-gram cuts (``excise``: a rephrasing shares no n-gram to cut); ``embedding_model``
    as ``decontaminate``'s."""
    if isinstance(tasks, str):
        tasks = [t.strip() for t in tasks.split(",") if t.strip()]
    if not tasks:
        raise ConfigError("no tasks given; e.g. --tasks mc_taco,squad_completion")
    if mode not in MODES:
        raise ConfigError(f"--mode {mode!r}: choose one of {list(MODES)}")
    if min(window, minimum_slice, too_dirty_cutoff) < 0 or ngram < 1:
        raise ConfigError("--window, --minimum-slice and --too-dirty-cutoff must be >= 0, --ngram >= 1")
    parsed = Rule.parse(rule)
    if parsed.uses_minhash:
        raise ConfigError(f"rule {str(parsed)!r}: {MINHASH_REFUSAL}")
    semantic_model = None
    if parsed.uses_judge:
        raise ConfigError(f"rule {str(parsed)!r}: purify takes no judge (the term 'judge'); find the pairs a "
                          "judge confirms with `decontaminate --judge MODEL`, or purify with semantic terms")
    if parsed.uses_semantic:
        from tcqa_data.decontam.semantic.prefilter import model_for_rule

        # refused before anything is written
        semantic_model = model_for_rule(embedding_model, parsed.semantic_thresholds, judge=False)
    evidence = StreamEvidence.open(list(corpus), StreamConfig(
        ngram_sizes=(ngram,), anchors=parsed.uses_alignment, semantic=parsed.uses_semantic,
        keep_pairs=True, text_field=text_field,
        id_field=id_field, on_error=on_error), distinct=False)  # every input is written out
    from tcqa_data.decontam.semantic.foreign import translation_model

    evidence.translation_model = translation_model(semantic_model)  # translations in other scripts too
    check_output_outside_inputs(out_dir, corpus, evidence.inputs)
    rels = relative_names([i.path for i in evidence.inputs])
    clash = sorted(set(rels) & {*REPORT_FILES, OWNER_MARKER})
    if clash:
        raise ConfigError(f"input {clash[0]} would be written where purify writes its own {clash[0]}; "
                          "rename it or give its folder's parent")
    bucket = ObjectFolder(url) if (url := object_url(out_dir)) is not None else None
    if bucket is not None:  # committed by a manifest object (object_outputs), staged locally
        bucket.check_ours("purify")
    else:  # a link is checked as its target (the commit swaps folders); someone else's folder is refused
        out = check_output(out_dir, "purify")
    benchmarks = _load_queries(tasks, data_files or {}, splits, lm_eval_include, lm_eval_include_defaults,
                               allow_task_code)
    if bucket is not None:
        out = Path(tempfile.mkdtemp(prefix=".tcqa-purify-")) / "out"

    # Janitor registers n-grams only: Janitor's cuts (excise, --janitor-exact) match no short item
    # whole; --mode drop is no Janitor's and drops their docs too
    short = None if janitor_exact and mode == "excise" else short_min_words
    work = next_generation_dir(out).absolute()  # the tasks' path, on any node and working folder
    try:
        with output_lock(out, "purify"), removed_on_full_disk(work), \
                make_engine(engine, workers, ray_address) as eng:
            check_owned(out, "purify")  # as it is now that no other writer runs
            remove_stale_staging(out, keep=work)
            queries = fill_stream(evidence, [(ngram, [d.query for _, _, docs in benchmarks for d in docs])],
                                  quiet=quiet, short_min_words=short, workers=workers,
                                  engine=eng if engine != "local" or workers > 1 else "local", out=out)
            found = _contamination(evidence, parsed, benchmarks, queries, ngram, short, semantic_model)
            table = evidence.hits.table
            cfg = PurifyConfig(mode=mode, n=ngram, seed=table.cfg.seed, window=window,
                               minimum_slice=minimum_slice, too_dirty_cutoff=too_dirty_cutoff,
                               janitor_exact=janitor_exact, text_field=text_field,
                               whole_sizes=tuple(s for s in table.cfg.ngram_sizes if s != ngram),
                               normalization=table.cfg.normalization)
            includes = ([lm_eval_include] if isinstance(lm_eval_include, (str, os.PathLike))
                        else lm_eval_include)
            options = {"rule": str(parsed), "tasks": list(tasks), "splits": list(splits or []),
                       "data_files": {t: {k: str(v) for k, v in files.items()}
                                      for t, files in (data_files or {}).items()},
                       "lm_eval_include": [str(x) for x in includes or []], "id_field": id_field,
                       "on_error": on_error, "short_min_words": short,
                       **({"embedding_model": semantic_model.manifest()} if semantic_model else {})}
            removals, reused, objects = _write_shards(evidence, found, cfg, options, rels, work, eng, quiet,
                                                      bucket)
            log = [(k, found.per_input[k][rem.row], rem) for k, rems in enumerate(removals) for rem in rems]
            fix = found.fix
            report = _report(evidence, log, found.matched, found.flagged, fix, cfg, str(parsed))
            if semantic_model is not None:  # which model's cosines took docs, (excise) which tier cut them
                report["semantic"] = {"model": semantic_model.manifest(), "docs_matched": found.semantic_docs,
                                      **_cut_by(mode, [rem for _, _, rem in log], found.semantic_docs)}
            stage = work / "out"
            write_parquet_atomic(stage / "removal_log.parquet",
                                 _log_table(evidence, log, found.matched, found.flagged, fix))
            write_json_atomic(stage / "purify_report.json", report)
            write_text_atomic(stage / "purify_report.md", _markdown(report))
            write_owner(stage, "purify")
            fault_point("purify-commit")
            if bucket is not None:
                commit_objects(bucket, objects, stage, {"tcqa_data_version": tcqa_data.__version__})
            else:
                commit_dir(stage, out)
            shutil.rmtree(work, ignore_errors=True)
    finally:
        if bucket is not None:  # the local staging of a bucket output, whether or not it committed
            shutil.rmtree(out.parent, ignore_errors=True)
    return {**report, "shards": {"total": len(rels), "reused": reused, "written": len(rels) - reused}}


@dataclass
class _Found:
    """What the corpus pass and the rule found: ``flagged`` (benchmark query number -> its (task,
    split, doc id)s), ``matched`` (contaminated corpus doc -> the flagged queries it matched),
    ``per_input`` (input -> line or row -> doc ordinal), ``dirty`` (n -> the flagged n-gram hashes,
    sorted) and ``fix`` (doc refs as the outputs record them)."""

    flagged: dict[int, list[tuple[str, str, int]]]
    matched: dict[int, set[int]]
    per_input: dict[int, dict[int, int]]
    dirty: dict[int, np.ndarray]
    fix: Any
    semantic_docs: int = 0  # corpus docs matched by a semantic clause (the best window of a flagged item)
    # corpus doc -> the word spans [start, end) of the flagged items' best windows in it
    word_spans: dict[int, list[tuple[int, int]]] | None = None


def _cut_by(mode: str, removals: Sequence[Removal], semantic_docs: int) -> dict[str, int]:
    """How many corpus docs the semantic term and the n-grams took: ``drop`` drops every doc of a
    best window; ``excise`` counts the docs cut (or dropped) by a window's span, by Janitor's
    n-gram matches, and by both."""
    if mode == "drop":
        return {"docs_dropped": semantic_docs}
    done = [r for r in removals if r.action != "kept"]
    return {"docs_cut_by_semantic": sum(r.span_cuts > 0 for r in done),
            "docs_cut_by_ngrams": sum(r.ngram_matches > 0 for r in done),
            "docs_cut_by_both": sum(r.span_cuts > 0 and r.ngram_matches > 0 for r in done)}


def _contamination(evidence: StreamEvidence, parsed: Rule, benchmarks: list[tuple[str, str, list[QueryDoc]]],
                   queries: list[str], ngram: int, short: int | None, semantic_model: Any = None) -> _Found:
    # the benchmark docs the rule flags, and the queries they hold
    number = {q: i for i, q in enumerate(queries)}
    flagged: dict[int, list[tuple[str, str, int]]] = defaultdict(list)
    by_semantic: set[int] = set()  # flagged queries whose firing clause has a semantic term
    semantic_labels = {str(t) for t in parsed.terms if t.uses_semantic}
    for task, split, docs in benchmarks:
        dirty, fired = parsed.evaluate(score_docs(docs, evidence, ngram, use_minhash=False,
                                                  align=parsed.uses_alignment, short_min_words=short,
                                                  semantic_model=semantic_model))
        for i in np.flatnonzero(dirty).tolist():
            flagged[number[docs[i].query]].append((task, split, i))
            if any(set(c.split("&")) & semantic_labels for c in fired[i].split("|")):
                by_semantic.add(number[docs[i].query])
    hits = evidence.hits
    table = hits.table
    dirty_query = np.zeros(len(queries), dtype=bool)
    dirty_query[list(flagged)] = True
    row_dirty, dirty_keys = {}, {}
    for size in table.cfg.ngram_sizes:  # n, and the sizes of short items matched whole
        start = table.holder_start[size]
        holder_row = np.repeat(np.arange(len(start) - 1), np.diff(start))
        row_dirty[size] = np.bincount(holder_row, weights=dirty_query[table.holders[size]],
                                      minlength=len(start) - 1) > 0
        dirty_keys[size] = table.keys[size][row_dirty[size]]
    # contaminated corpus docs: a hit on an n-gram (or a whole short item) of a flagged benchmark doc
    matched: dict[int, set[int]] = defaultdict(set)
    for size in table.cfg.ngram_sizes:
        pair_rows, pair_docs = hits.hit_pairs(size)
        keep = row_dirty[size][pair_rows]
        start, holders = table.holder_start[size], table.holders[size]
        for r, o in zip(pair_rows[keep].tolist(), pair_docs[keep].tolist(), strict=True):
            matched[o].update(q for q in holders[start[r]:start[r + 1]].tolist() if dirty_query[q])
    # a rephrased item: the corpus doc of its best window (the one the semantic term scored), and
    # of each other window of it that a semantic term's threshold reaches (a weaker copy elsewhere)
    semantic_docs: set[int] = set()
    word_spans: dict[int, set[tuple[int, int]]] = defaultdict(set)
    if by_semantic:
        least = min(parsed.semantic_thresholds)
        sem_q = sorted(by_semantic)
        sm = evidence.semantic_matches([queries[q] for q in sem_q], semantic_model)
        for q, o, span, others in zip(sem_q, sm.docs.tolist(), sm.spans, sm.others, strict=True):
            windows = ([(o, span)] if o >= 0 else []) + [(d, sp) for d, sp, score in others if score >= least]
            for doc, sp in windows:
                matched[doc].add(q)
                semantic_docs.add(doc)
                if sp is not None:
                    word_spans[doc].add((int(sp[0]), int(sp[1])))
    per_input: dict[int, dict[int, int]] = defaultdict(dict)
    for o in matched:
        inp_no, row = hits.where[o]
        per_input[inp_no][row] = o
    return _Found(flagged, matched, per_input, dirty_keys, portable_ref("stream", evidence.manifest),
                  len(semantic_docs), {o: sorted(s) for o, s in word_spans.items()})


def _write_shards(evidence: StreamEvidence, found: _Found, cfg: PurifyConfig, options: dict[str, Any],
                  rels: list[str], work: Path, eng: Any, quiet: bool, bucket: ObjectFolder | None = None
                  ) -> tuple[list[list[Removal]], int, dict[str, Any]]:
    """Each input rewritten as one task on ``eng`` into ``work/out`` (``purify_shards``), or as an
    object in ``bucket`` (``purify_objects``), finished shards of a killed run with the same digest
    (``cfg``, the other ``options``, the flagged n-grams, the inputs) reused; returns each input's
    removals, how many shards were reused and (bucket) each shard object's size and sha256."""
    hits = evidence.hits
    run = {"tcqa_data_version": tcqa_data.__version__, "config": config_dict(cfg), "options": options,
           "dirty": {str(n): digest(k.tolist()) for n, k in found.dirty.items()},
           "inputs": [[rel, inp.size] for rel, inp in zip(rels, evidence.inputs, strict=True)]}
    run_digest = digest(run)
    if bucket is None:
        open_work_area(work, {"digest": run_digest, "inputs": run["inputs"]}, found.dirty)
        remove_leftovers(work / "out", rels)
        eng.check_shared_paths(work, [inp.path for inp in evidence.inputs])
        task, shared = purify_shard_task, {"work": str(work), "cfg": config_dict(cfg)}
    else:
        open_object_work(bucket, {"digest": run_digest, "inputs": run["inputs"]}, found.dirty)
        (work / "out").mkdir(parents=True, exist_ok=True)
        task, shared = purify_object_task, {"out": bucket.url, "cfg": config_dict(cfg)}
    calls = []
    for k, (inp, rel) in enumerate(zip(evidence.inputs, rels, strict=True)):
        rows = {row: str(found.fix(hits.refs[o])) for row, o in found.per_input.get(k, {}).items()}
        # excise cuts the best windows' spans too (drop drops their docs whole)
        spans = (sorted([row, [list(s) for s in found.word_spans[o]]]
                        for row, o in found.per_input.get(k, {}).items() if o in found.word_spans)
                 if cfg.mode == "excise" and found.word_spans else [])
        resolve_inside(work / "out", rel, what="output shard")
        calls.append({"index": k, "path": inp.path, "format": inp.format, "size": inp.size, "rel": rel,
                      "rows": sorted([r, ref] for r, ref in rows.items()),
                      "shard": shard_digest(run_digest, rows, spans),
                      **({"word_spans": spans} if spans else {})})
    with progress_bar(quiet, bytes_mode=True) as prog:
        bar = prog.add_task("purify shards", total=sum(inp.size for inp in evidence.inputs), rate="")

        def done(i: int, result: dict[str, Any]) -> None:
            prog.update(bar, advance=evidence.inputs[i].size)
            fault_point("purify-shard")  # the kill tests: after a shard's done-record

        results = run_tasks(task, calls, desc="purify", engine=eng, on_done=done, shared=shared)
    reused = sum(r["reused"] for r in results)
    if reused:
        note(f"purify: reused {reused} of {len(results)} output shards a killed run had written", quiet)
    objects = {rel: r["object"] for rel, r in zip(rels, results, strict=True) if "object" in r}
    return [[removal_from_dict(d) for d in r["removals"]] for r in results], reused, objects


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


def _semantic_line(sem: Mapping[str, Any]) -> str:
    line = (f"Semantic term: {sem['docs_matched']} corpus docs hold a flagged item's best window "
            f"(model {sem['model'].get('name')})")
    if "docs_cut_by_semantic" in sem:
        line += (f"; docs cut by a window's span {sem['docs_cut_by_semantic']}, by n-grams "
                 f"{sem['docs_cut_by_ngrams']}, by both {sem['docs_cut_by_both']}")
    return line + "."


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
        *([Paragraph(_semantic_line(report["semantic"]))] if "semantic" in report else []),
        Heading(2, "Per input"),
        Table(["input", *cols], [[name, *(str(v[c]) for c in cols)] for name, v in report["inputs"].items()]),
        Heading(2, "Per task (a corpus doc matching two tasks counts in both)"),
        Table(["task", *cols], [[name, *(str(v[c]) for c in cols)] for name, v in report["tasks"].items()]),
    ]
    top = report["top_benchmark_docs"]
    if any(d["corpus_docs"] > 1 for d in top):  # a column of 1s ranks nothing: no table then
        blocks += [Heading(2, "Benchmark docs with the most corpus copies"),
                   Table(["task", "split", "doc_id", "corpus docs"],
                         [[d["task"], d["split"], str(d["doc_id"]), str(d["corpus_docs"])] for d in top])]
    return to_markdown(blocks)
