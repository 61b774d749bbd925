"""Stage 2: flag contaminated benchmark docs against an index and write clean/dirty splits.

``decontaminate(index_dir, tasks, out_dir)`` is the library entry point; the CLI only parses options.
Outputs are deterministic: the same inputs give byte-identical files (no timestamps, sorted keys).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

import tcqa_data
from tcqa_data.decontam.detect.evidence import IndexEvidence
from tcqa_data.decontam.detect.rules import DEFAULT_RULE, Rule, doc_status
from tcqa_data.decontam.detect.score import QueryDoc, auto_ngram, score_docs
from tcqa_data.errors import ConfigError, IndexMismatchError, TcqaError
from tcqa_data.io_utils import write_json_atomic, write_parquet_atomic, write_text_atomic
from tcqa_data.outputs import check_name, code_digests, resolve_inside, writes_output
from tcqa_data.prep.benchmarks import BenchmarkSplit, group_ids, load_split
from tcqa_data.prep.lm_eval_export import export_lm_eval, export_lm_eval_task, exportable, lm_eval_task_name
from tcqa_data.prep.report import write_reports
from tcqa_data.prep.splits import GROUP_POLICIES, add_ids, check_invariants, group_flags, split_table
from tcqa_data.prep.summary import build_summary, reference_for, split_row, write_summary
from tcqa_data.prep.taskspec import TaskSpec, is_task_yaml_path, is_tcqa_task
from tcqa_data.progress import progress_bar, rate_text

if TYPE_CHECKING:
    from tcqa_data.engines import Engine
    from tcqa_data.prep.lm_eval_tasks import LmEvalTask


def parse_data_files(items: Iterable[str], tasks: Sequence[str]) -> dict[str, dict[str, str]]:
    """``TASK:SPLIT=PATH`` items -> {task: {split: path}}; any other form is refused with the expected one.

    Both names are required: ``mc_taco=PATH`` would otherwise read as a split named "mc_taco".
    """
    out: dict[str, dict[str, str]] = {}
    for item in items:
        key, _, path = item.partition("=")
        task, _, split = key.partition(":")
        if not (task.strip() and split.strip() and path.strip()):
            raise ConfigError(f"--data-files {item!r}: expected TASK:SPLIT=PATH (task, split and file), "
                              "e.g. mc_taco:test=../shared/data/mc_taco/test_9442.tsv")
        # with a task given as a YAML path, its spec's `task` name is checked later, in decontaminate
        if not is_tcqa_task(task) and task in tasks:
            raise ConfigError(f"--data-files {item!r}: task {task!r} is resolved through lm-eval, which "
                              "reads its data as its YAML says; point dataset_path/dataset_kwargs "
                              "(e.g. dataset_path: json, data_files) at local files in a task YAML "
                              "under --lm-eval-include instead")
        if task not in tasks and not any(t.endswith((".yaml", ".yml")) for t in tasks):
            raise ConfigError(f"--data-files {item!r}: task {task!r} is not among --tasks {list(tasks)}")
        out.setdefault(task, {})[check_name(split, "split name", "--data-files")] = path
    return out


def portable_path(path: str | os.PathLike) -> str:
    """A path as PREP_DIR files record it: the file or folder name (hub and hf:// ids unchanged).

    Files in PREP_DIR never hold absolute paths, so a prepared folder can be moved or shared, and
    the same inputs give the same bytes wherever they and the output live. Content is identified
    by checksums (the index manifest's sha256 per input), not by where it was read from.
    """
    text = os.fspath(path)
    if text.startswith(("hub:", "hf://")):
        return text
    return Path(text).resolve().name or text


def portable_ref(index_dir: str | os.PathLike, manifest: Mapping[str, Any] | None = None
                 ) -> Callable[[str | None], str | None]:
    """A function that rewrites a ``"<input path>:<line>"`` corpus doc ref of the index at
    ``index_dir`` (its ``manifest``, read from there when not given) to ``"<file name>:<line>"``,
    as PREP_DIR files record it.

    Doc refs without an id field embed the input path as given to index-corpus; PREP_DIR files
    must not. Refs from an id field (titles, urls) are left as they are.
    """
    if manifest is None:
        from tcqa_data.decontam.ngrams.index import MANIFEST
        from tcqa_data.io_utils import read_json

        manifest = read_json(Path(index_dir) / MANIFEST)
    inputs = manifest.get("inputs", [])
    renamed = {e["path"] + ":": portable_path(e["path"]) + ":" for e in inputs}

    def fix(ref: str | None) -> str | None:
        # the longest input path + ":" that starts the ref: every such prefix ends at one of the
        # ref's colons, so a lookup per colon, from the last (a loop over the inputs cost
        # ~0.25 ms a ref against an index of 487 inputs: 5 CPU-s of a decontaminate run)
        if ref is not None:
            i = ref.rfind(":")
            while i >= 0:
                new = renamed.get(ref[:i + 1])
                if new is not None:
                    return new + ref[i + 1:]
                i = ref.rfind(":", 0, i)
        return ref

    return fix


def portable_doc_refs(cols: dict[str, list], fix: Callable[[str | None], str | None]) -> None:
    """Rewrite the corpus doc refs in ``cols`` (columns ``*_ref``, ``*_refs``) with ``fix``
    (``portable_ref``)."""
    for name in cols:  # every corpus doc ref column is named *_ref or *_refs
        if name.endswith(("_ref", "_refs")):
            cols[name] = [[fix(r) for r in v] if isinstance(v, list) else fix(v) for v in cols[name]]


def _index_summary(idx: Any, index_dir: str | os.PathLike) -> dict[str, Any]:
    """The index manifest (long lists shortened, paths made portable) for the prep manifest and reports."""
    summary: dict[str, Any] = {"path": portable_path(index_dir)}
    for key, value in sorted(idx.manifest.items()):
        if key == "build":  # timestamps and durations: would make reruns differ byte-wise
            continue
        if key in ("files", "manifest_xxh3"):  # the index's own integrity record (index-info --verify)
            continue
        if key in ("inputs", "skipped_inputs"):
            value = [{**e, "path": portable_path(e["path"])} for e in value]
            for e in value:
                if "reason" in e:  # "same content as PATH", "already indexed as PATH"
                    head, sep, other = e["reason"].rpartition(" as ")
                    e["reason"] = head + sep + portable_path(other) if sep else e["reason"]
        if isinstance(value, list) and len(value) > 20:
            value = value[:20] + [f"... {len(value) - 20} more"]
        summary[key] = value
    return summary


def _minhash_and_index_checks(idx: IndexEvidence, index_dir: str | os.PathLike, rule: Rule
                              ) -> tuple[bool, str, list[str]]:
    """Whether MinHash evidence is computed, how the reports describe it, and warnings for every report.

    MinHash windows may need NLTK Punkt. A rule with a MinHash term cannot run without it: refused
    before anything is written, with the fix. MinHash only as evidence: left out, said once.
    """
    warnings: list[str] = []
    if idx.manifest.get("counts", {}).get("docs", 0) == 0:
        warnings.append(f"the index {portable_path(index_dir)} holds 0 documents: nothing was searched, "
                        "so every doc below is reported clean")
    if not idx.has_minhash:
        return False, "off: the index has no MinHash section", warnings
    from tcqa_data.decontam.build.preflight import minhash_windows_problem
    from tcqa_data.decontam.minhash import MinHashParams

    problem = minhash_windows_problem(MinHashParams.from_dict(idx.manifest["minhash"]))
    if problem is None:
        return True, "on", warnings
    if rule.uses_minhash:
        raise TcqaError(f"rule {str(rule)!r} uses MinHash, which needs sentence windows: {problem}")
    warnings.append(f"MinHash evidence (minhash_sim) was left out: {problem}")
    return False, "off: MinHash windows cannot be cut here (see the warning)", warnings


@dataclasses.dataclass
class _Run:
    """What every task and split of one ``decontaminate`` run is scored and written with."""

    evidence: Any  # IndexEvidence or StreamEvidence, opened once
    index_dir: str | os.PathLike  # as given (error messages name it); "stream" in stream mode
    out: Path
    rule: Rule
    fixed_n: int | None  # None: "auto" (GPT-3's n per task)
    max_corpus_freq: int | None
    group_policy: str
    use_minhash: bool  # MinHash evidence is computed (the index has it, and windows can be cut here)
    config: dict[str, Any]  # the settings every report and the manifest record
    quiet: bool
    stream: bool = False  # the evidence is a corpus pass (--corpus), not an index
    short_min_words: int | None = None  # shorter queries of at least this many words whole (None: off)
    # known once the evidence is filled (after a stream's pass)
    index_summary: dict[str, Any] = dataclasses.field(default_factory=dict)
    fix_ref: Callable[[str | None], str | None] | None = None  # corpus doc refs as PREP_DIR records them


@dataclasses.dataclass
class _TaskJob:
    """One task's splits, each as (docs, their queries, their role); ``source``: how lm-eval
    resolved the task (None for built-in and YAML tasks)."""

    task: TaskSpec | LmEvalTask
    parts: list[tuple[BenchmarkSplit, list[str], str]]
    source: dict[str, Any] | None = None


@writes_output("out_dir", "decontaminate")  # PREP_DIR is committed whole or not at all
def decontaminate(
    index_dir: str | os.PathLike | None,
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
    lm_eval_include: Sequence[str | os.PathLike] | str | os.PathLike | None = None,
    group_by: Mapping[str, Sequence[str]] | None = None,
    lm_eval_include_defaults: bool = True,
    quiet: bool = False,
    corpus: Sequence[str] | None = None,
    text_field: str = "text",
    id_field: str | None = None,
    on_error: str = "raise",
    workers: int = 1,
    short_min_words: int | None = 8,
    engine: str = "local",
    ray_address: str | None = None,
    hf_dataset: str | None = None,
    hf_config: str | None = None,
    hf_split: str = "train",
    source_name: str | None = None,
) -> dict[str, Any]:
    """Score every doc of ``tasks`` against the index, write PREP_DIR, return the summary.

    ``data_files`` maps task -> split -> local file; a task with local files processes exactly those
    splits, others load their declared splits from the hub. ``splits`` restricts the split names.
    ``ngram`` is an int n that the index holds, or "auto" (GPT-3's per-benchmark n).
    ``normalization``, when given, must equal the index's (else IndexMismatchError).
    A task name that is neither built in nor a YAML path is resolved through lm-eval
    (:mod:`tcqa_data.prep.lm_eval_tasks`): ``lm_eval_include`` adds folders of lm-eval task YAMLs,
    groups and tags expand to their tasks, and ``group_by`` maps a task name to the doc fields
    that form its question groups (any task; default: each doc is its own group).
    ``lm_eval_include_defaults=False`` skips indexing lm-eval's shipped tasks.

    Stream mode: ``corpus`` (``index-corpus`` input specs, with ``text_field``, ``id_field`` and
    ``on_error`` as there) in place of ``index_dir``: every task's queries go into one table and
    the corpus is read once against it (``decontam/stream``), its shards on ``workers`` local
    processes (``engine="ray"``: Ray tasks, ``ray_address`` as ``index-corpus`` takes it); the
    PREP_DIR is the index mode's. ``hf_dataset`` (``hf_config``, ``hf_split``): a Hugging Face
    dataset streamed as one more corpus input (``index-corpus --hf-dataset``).

    A query of ``short_min_words`` words up to n - 1 (shorter than n: no n-gram) is matched whole,
    as one word sequence (NeMo Curator's minimum, 8), in both modes: an index answers from its
    text store (its anchors find every doc that can hold the query, from 6 words; each is
    verified against its text), and an index without a usable text store keeps such queries
    "untestable", its ``untestable_policy`` saying why. None or 0: off (all "untestable").

    ``source_name``: the corpus as ``contamination_report.csv`` names it (the CONDA database's
    "Contaminated Source", e.g. a hub id); default: its hub dataset or file names
    (:func:`default_source_name`).

    Steps: the options checked; the evidence opened once (``IndexEvidence``, or ``StreamEvidence``)
    and checked against the rule; the tasks resolved (all refusals before anything is written);
    every task's splits loaded (a stream needs all queries before its one pass); then each split
    scored and written in turn; the run summary (``summary.json/md/html``,
    ``contamination_report.csv``); ``prep_manifest.json`` last.
    """
    if isinstance(tasks, str):
        tasks = [t.strip() for t in tasks.split(",") if t.strip()]
    if not tasks:
        raise ConfigError("no tasks given; e.g. --tasks mc_taco,squad_completion")
    parsed_rule, fixed_n = _check_options(rule, ngram, max_corpus_freq, group_policy)
    stream = corpus is not None or hf_dataset is not None
    if stream == (index_dir is not None):
        raise ConfigError("give either an index folder (INDEX_DIR) or a corpus (--corpus, --hf-dataset), "
                          "not both or neither")
    if stream:
        from tcqa_data.decontam.stream.table import StreamConfig

        run = _open_stream_run(list(corpus or []), StreamConfig(
            normalization=normalization or "janitor", anchors=parsed_rule.uses_alignment,
            text_field=text_field, id_field=id_field, on_error=on_error, hf_dataset=hf_dataset,
            hf_config=hf_config, hf_split=hf_split), out_dir, parsed_rule, fixed_n,
            max_corpus_freq=max_corpus_freq, group_policy=group_policy, quiet=quiet,
            short_min_words=short_min_words)
    else:
        run = _open_run(index_dir, out_dir, parsed_rule, fixed_n, normalization=normalization,
                        max_corpus_freq=max_corpus_freq, group_policy=group_policy, quiet=quiet,
                        short_min_words=short_min_words)
    jobs = task_jobs(tasks, data_files, splits, group_by=group_by, lm_eval_include=lm_eval_include,
                     lm_eval_include_defaults=lm_eval_include_defaults)
    manifest_tasks: dict[str, Any] = {}
    summary: dict[str, Any] = {"out_dir": str(run.out), "rule": str(parsed_rule),
                               "warnings": run.config["warnings"], "tasks": {}}
    if stream:  # every task's queries in one table, the corpus read once against it
        _stream_pass(run, jobs, {"workers": workers, "engine": engine, "ray_address": ray_address,
                                 "out": run.out})
        if run.evidence.num_docs == 0:  # (config and summary hold this list: every report shows it)
            run.config["warnings"].append("the corpus holds 0 documents: nothing was searched, so every doc "
                                          "below is reported clean")
    run.fix_ref = portable_ref(run.index_dir, run.evidence.manifest)
    run.index_summary = _index_summary(run.evidence, run.index_dir)
    rows: list[dict[str, Any]] = []
    for job in jobs:
        manifest_tasks[job.task.task], summary["tasks"][job.task.task] = _process_task(job, run, rows)
    write_summary(run.out, build_summary(
        rows, config=run.config, evidence=_evidence_source(run),
        contaminated_source=source_name or default_source_name(run, hf_dataset, corpus),
        reference=reference_for(parsed_rule),
        versions={"format_version": tcqa_data.FORMAT_VERSION, "tcqa_data_version": tcqa_data.__version__}))
    manifest = {
        "format_version": tcqa_data.FORMAT_VERSION,
        "tcqa_data_version": tcqa_data.__version__,
        "index": run.index_summary,
        **run.config,
        "tasks": manifest_tasks,
    }
    write_json_atomic(run.out / "prep_manifest.json", manifest)
    return summary


def _input_names(run: _Run, hf_dataset: str | None) -> list[str]:
    """The evidence's corpus inputs by name: hub datasets by their id, files by file name."""
    names = []
    for e in run.evidence.manifest.get("inputs", []):
        if e.get("format") == "hf":
            names.append((e.get("hf") or {}).get("name") or hf_dataset or e["path"])
        else:
            names.append(portable_path(e["path"]))
    return sorted(set(names))


def default_source_name(run: _Run, hf_dataset: str | None, corpus: Sequence[str] | None) -> str:
    """The corpus as the CONDA row names it when ``--source-name`` is not given: its inputs (hub ids,
    file names) up to three; past that the index folder, or the corpus specs as given."""
    names = _input_names(run, hf_dataset)
    if 0 < len(names) <= 3:
        return " + ".join(names)
    if not run.stream:
        return portable_path(run.index_dir)
    return " + ".join([portable_path(c) for c in corpus or []] + ([hf_dataset] if hf_dataset else []))


def _evidence_source(run: _Run) -> dict[str, str]:
    """Where the evidence came from, as the run summary says it: the index folder, or the streamed
    corpus inputs (the first 5 named)."""
    if not run.stream:
        return {"mode": "index", "source": portable_path(run.index_dir)}
    names = _input_names(run, None)
    more = f" ... {len(names) - 5} more" if len(names) > 5 else ""
    return {"mode": "stream", "source": ", ".join(names[:5]) + more}


def _check_options(rule: str, ngram: str | int, max_corpus_freq: int | None, group_policy: str
                   ) -> tuple[Rule, int | None]:
    """The parsed rule and the fixed n-gram size (None for "auto"); bad options refused."""
    if group_policy not in GROUP_POLICIES:
        raise ConfigError(f"unknown group policy {group_policy!r}; choose one of {GROUP_POLICIES}")
    if max_corpus_freq is not None and max_corpus_freq < 1:
        raise ConfigError("--max-corpus-freq must be >= 1")
    parsed_rule = Rule.parse(rule)
    if str(ngram) == "auto":
        return parsed_rule, None
    try:
        return parsed_rule, int(ngram)
    except ValueError as exc:
        raise ConfigError(f"--ngram must be an integer or 'auto', not {ngram!r}") from exc


def _open_run(index_dir: str | os.PathLike, out_dir: str | os.PathLike, rule: Rule, fixed_n: int | None,
              *, normalization: str | None, max_corpus_freq: int | None, group_policy: str, quiet: bool,
              short_min_words: int | None = None) -> _Run:
    """The index opened once (every split reads its evidence) and checked against the options: its
    normalization, the MinHash section and text store the rule's terms need, and whether its text
    store can match short queries whole (``IndexEvidence.whole_problem``)."""
    from tcqa_data.decontam.textstore.anchors import WHOLE_MIN_WORDS

    if short_min_words and short_min_words < WHOLE_MIN_WORDS:
        raise ConfigError(f"--short-min-words {short_min_words}: an index finds every corpus doc holding a "
                          f"short item from {WHOLE_MIN_WORDS} words (its anchors are winnowed 4-grams); "
                          f"give {WHOLE_MIN_WORDS} or more, 0 (off), or a corpus (--corpus) instead")
    idx = IndexEvidence.open(index_dir)
    if normalization is not None and normalization != idx.normalization:
        raise IndexMismatchError(
            f"index {index_dir} was built with normalization {idx.normalization!r}, but "
            f"{normalization!r} was asked; rebuild the index or ask for {idx.normalization!r}")
    if rule.uses_minhash and not idx.has_minhash:
        raise IndexMismatchError(f"rule {str(rule)!r} uses MinHash, but index {index_dir} has no "
                                 "MinHash section; rebuild it with MinHash or use an n-gram rule")
    if rule.uses_alignment and not idx.has_text:
        raise IndexMismatchError(f"rule {str(rule)!r} aligns against corpus text, but index "
                                 f"{index_dir} has no text store; rebuild it with --text-store auto")
    use_minhash, minhash_evidence, warnings = _minhash_and_index_checks(idx, index_dir, rule)
    config = _run_config(rule, group_policy, max_corpus_freq, idx.normalization, idx.has_minhash,
                         minhash_evidence, warnings)
    problem = idx.whole_problem if short_min_words else None
    if problem is None:
        _short_policy(config, short_min_words, "the text store's anchors give every corpus doc that can "
                                               "hold it, each verified against its stored text")
    else:  # no guess: the short queries stay untestable, and the reports say why
        config["untestable_policy"] += (f"; a query of {short_min_words} to n - 1 words could be matched "
                                        f"whole, but not with this index: {problem}")
        config["short_min_words"] = None
    return _Run(idx, index_dir, Path(out_dir), rule, fixed_n, max_corpus_freq, group_policy, use_minhash,
                config, quiet, short_min_words=short_min_words if problem is None else None)


def _open_stream_run(corpus: list[str], stream_config: Any, out_dir: str | os.PathLike, rule: Rule,
                     fixed_n: int | None, *, max_corpus_freq: int | None, group_policy: str, quiet: bool,
                     short_min_words: int | None) -> _Run:
    """Stream mode's evidence (``StreamEvidence``, filled later by one corpus pass); a MinHash
    term is refused (it needs every corpus window signed, which is what an index build does)."""
    from tcqa_data.decontam.stream.evidence import MINHASH_REFUSAL, StreamEvidence

    if rule.uses_minhash:
        raise ConfigError(f"rule {str(rule)!r}: {MINHASH_REFUSAL}")
    idx = StreamEvidence.open(corpus, stream_config)
    config = _run_config(rule, group_policy, max_corpus_freq, idx.normalization, False,
                         "off: stream mode (--corpus) computes no MinHash", [])
    _short_policy(config, short_min_words, "found in the corpus pass")
    return _Run(idx, "stream", Path(out_dir), rule, fixed_n, max_corpus_freq, group_policy, False, config,
                quiet, stream=True, short_min_words=short_min_words)


def _short_policy(config: dict[str, Any], short_min_words: int | None, how: str) -> None:
    """Record in ``config`` that queries of ``short_min_words`` to n - 1 words are matched whole."""
    config["short_min_words"] = short_min_words or None
    if short_min_words:
        config["untestable_policy"] += (f"; a query of {short_min_words} to n - 1 words is matched whole, as "
                                        f"one word sequence (testable; {how})")


def _run_config(rule: Rule, group_policy: str, max_corpus_freq: int | None, normalization: str,
                minhash_available: bool, minhash_evidence: Any, warnings: list[str]) -> dict[str, Any]:
    """The settings every report and the manifest record."""
    return {
        "rule": str(rule),
        "rule_help": "dirty if any '|'-separated clause holds; '&' joins terms of a clause",
        "group_policy": group_policy,
        "max_corpus_freq": max_corpus_freq,
        "normalization": normalization,
        "minhash_available": minhash_available,
        "minhash_evidence": minhash_evidence,
        "warnings": warnings,
        "untestable_policy": "docs shorter than n words with no other rule term firing are kept in the "
                             "clean split and reported as 'untestable'",
    }


def task_jobs(tasks: Sequence[str], data_files: Mapping[str, Mapping[str, str | os.PathLike]] | None,
              splits: Sequence[str] | None, *, group_by: Mapping[str, Sequence[str]] | None = None,
              lm_eval_include: Any = None, lm_eval_include_defaults: bool = True) -> list[_TaskJob]:
    """Every task's splits loaded, with their queries, as ``decontaminate`` takes ``tasks`` (built-in,
    YAML, or lm-eval names) and its options; ``purify`` loads its tasks through this too. All
    refusals (names, splits, data files) come before anything is written."""
    local = {k: dict(v) for k, v in (data_files or {}).items()}
    for per_task in local.values():  # split names become folder names: refused before any write
        for split_name in per_task:
            check_name(split_name, "split name", "data_files (--data-files)")
    own, lm_tasks = _resolve_tasks(tasks, local, {k: tuple(v) for k, v in (group_by or {}).items()},
                                   lm_eval_include, lm_eval_include_defaults)
    return list(_task_jobs(own, lm_tasks, local, splits))


def query_docs(spec: TaskSpec | LmEvalTask, b: BenchmarkSplit, queries: Sequence[str]) -> list[QueryDoc]:
    """A split's docs as the scorer takes them: each query with the doc fields matches are
    attributed to."""
    fields = spec.query_fields()
    return [QueryDoc(q, {f: str(d[f]) for f in fields if d.get(f) is not None})
            for q, d in zip(queries, b.docs(), strict=True)]


def _resolve_tasks(tasks: Sequence[str], data_files: dict[str, dict[str, str | os.PathLike]],
                   group_by: dict[str, tuple[str, ...]], lm_eval_include: Any, lm_eval_include_defaults: bool
                   ) -> tuple[list[tuple[str, TaskSpec]], list[LmEvalTask]]:
    """The built-in and YAML tasks (each with the name it was given as) and the tasks resolved
    through lm-eval. Refused here, before anything is written: data files or ``group_by`` for
    tasks not given, a task given twice."""
    own = [t for t in tasks if is_tcqa_task(t)]
    specs = [TaskSpec.resolve(t) for t in own]
    specs = [dataclasses.replace(s, group_by=group_by.pop(t, group_by.pop(s.task, s.group_by)))
             for t, s in zip(own, specs, strict=True)]
    # local files may be keyed by the name given in `tasks` (maybe a YAML path) or by spec.task
    known = set(own) | {s.task for s in specs}
    unknown = sorted(set(data_files) - known)
    if unknown:
        raise ConfigError(f"data files given for tasks {unknown} that are not among the built-in or YAML "
                          f"tasks {own}")
    lm_names = [t for t in tasks if not is_tcqa_task(t)]
    lm_tasks: list[LmEvalTask] = []
    if lm_names:
        from tcqa_data.prep.lm_eval_tasks import resolve_lm_eval_tasks

        lm_tasks = resolve_lm_eval_tasks(lm_names, include_path=lm_eval_include, group_by=group_by,
                                         include_defaults=lm_eval_include_defaults)
    elif group_by:
        raise ConfigError(f"--group-by names task(s) {sorted(group_by)} that are not among {list(tasks)}")
    for task_name, spec in zip(own, specs, strict=True):
        declared = list(spec.splits().values())
        if not is_task_yaml_path(task_name) and declared:
            # a built-in task has fixed splits: a misspelled one (tset) is refused before any file
            # is read (a task YAML of your own keeps free names)
            for split in data_files.get(task_name) or data_files.get(spec.task) or {}:
                if split not in declared:
                    raise ConfigError(f"task {spec.task!r} has no split {split!r} (--data-files "
                                      f"{task_name}:{split}=...); its splits are {declared}")
    names = [s.task for s in specs] + [t.task for t in lm_tasks]
    if len(set(names)) != len(names):
        raise ConfigError(f"tasks {sorted({n for n in names if names.count(n) > 1})} are given twice")
    return list(zip(own, specs, strict=True)), lm_tasks


def _task_jobs(own: list[tuple[str, TaskSpec]], lm_tasks: list[LmEvalTask],
               data_files: dict[str, dict[str, str | os.PathLike]], splits: Sequence[str] | None
               ) -> Iterator[_TaskJob]:
    """Each task's splits, loaded when its turn comes: built-in and YAML tasks first, then those
    resolved through lm-eval."""
    for name, spec in own:
        yield _spec_job(spec, data_files.get(name) or data_files.get(spec.task) or {}, splits)
    for lt in lm_tasks:
        yield _lm_eval_job(lt, splits)


def _spec_job(spec: TaskSpec, local: dict[str, str | os.PathLike], splits: Sequence[str] | None) -> _TaskJob:
    """A built-in or YAML task: its local files' splits, else its declared ones (from the hub),
    those in ``splits`` only; each split's queries from the task's template."""
    role_of = {name: role for role, name in spec.splits().items()}
    wanted = list(local) if local else list(spec.splits().values())
    if splits:
        wanted = [s for s in wanted if s in splits]
    if not wanted:
        declared = list(spec.splits().values())
        raise ConfigError(f"task {spec.task!r}: no split to process (declared {declared}, "
                          f"local files {list(local)}, --splits {list(splits or [])})")
    loaded = [load_split(spec, s, local.get(s)) for s in wanted]
    return _TaskJob(spec, [(b, [spec.decontamination_query(d) for d in b.docs()],
                            role_of.get(b.split, "test")) for b in loaded])


def _lm_eval_job(lt: LmEvalTask, splits: Sequence[str] | None) -> _TaskJob:
    """A task resolved through lm-eval: the split lm-eval evaluates, its docs and queries as lm-eval
    gives them."""
    if splits and lt.split not in splits:
        raise ConfigError(f"lm-eval task {lt.task!r} evaluates split {lt.split!r}, which --splits "
                          f"{list(splits)} leaves out")
    b = BenchmarkSplit(task=lt.task, split=lt.split, source=lt.source, table=lt.table)
    return _TaskJob(lt, [(b, lt.queries, lt.role)],
                    {"lm_eval_task": lt.task, "requested_as": lt.requested_as, "query": lt.query_description,
                     "group_by": list(lt.group_by)})


def _choose_n(task: str, queries: Iterable[str], run: _Run) -> tuple[int, str]:
    """The task's n-gram size and how it was chosen; refused unless the index holds it."""
    if run.fixed_n is None:
        from tcqa_data.decontam.core.hashing import word_counts

        n = auto_ngram(word_counts(list(queries), run.evidence.normalization).tolist())
        how = "auto (GPT-3: 5th percentile of query length in words, clamped to 8..13)"
    else:
        n, how = run.fixed_n, "fixed"
    sizes = run.evidence.ngram_sizes
    if n not in sizes and not run.stream:  # a stream matches every n the tasks need
        raise IndexMismatchError(
            f"task {task!r} needs {n}-grams ({how}), but index {run.index_dir} holds n-gram sizes "
            f"{sizes}; rebuild the index with --ngram {n} or pass --ngram with one of {sizes}")
    return n, how


def _process_task(job: _TaskJob, run: _Run, rows: list[dict[str, Any]]
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
    """One task's splits at one n-gram size, its PREP_DIR files; returns its manifest entry and
    its summary (split -> counts); appends each split's run-summary row to ``rows``."""
    task = job.task
    n, how = _choose_n(task.task, (q for _, queries, _ in job.parts for q in queries), run)
    # names were checked where they were read; resolve_inside also refuses a folder that a link
    # leads out of --out
    task_dir = resolve_inside(run.out, task.task, what="task folder")
    if isinstance(task, TaskSpec):
        write_text_atomic(task_dir / "task.yaml", task.to_yaml())
    entry: dict[str, Any] = {"ngram": n, "ngram_choice": how, "splits": {}, "lm_eval_export": {}}
    if job.source is not None:
        entry["source"] = job.source
    summary: dict[str, Any] = {}
    config = {**run.config, "ngram": n, "ngram_choice": how}
    for b, queries, role in job.parts:
        split_name = check_name(b.split, "split name", f"task {task.task!r}")
        # (the whole PREP_DIR is staged and committed at once: ``writes_output``)
        split_dir = resolve_inside(run.out, task.task, split_name, what="split folder")
        counts, export, row = _process_split(task, b, queries, role, split_dir, run, n, config)
        rows.append(row)
        entry["splits"][b.split] = counts
        entry["lm_eval_export"][b.split] = export
        summary[b.split] = counts
    return entry, summary


def _stream_pass(run: _Run, jobs: Sequence[_TaskJob], where: dict[str, Any]) -> None:
    """Fill the run's ``StreamEvidence`` with every query of ``jobs`` at each task's n (``fill_stream``)."""
    groups = []
    for job in jobs:
        queries = [q for _, qs, _ in job.parts for q in qs]
        groups.append((_choose_n(job.task.task, queries, run)[0], queries))
    fill_stream(run.evidence, groups, quiet=run.quiet, short_min_words=run.short_min_words, **where)


def fill_stream(evidence: Any, groups: Sequence[tuple[int, Sequence[str]]], *, quiet: bool,
                short_min_words: int | None, workers: int = 1, engine: str | Engine = "local",
                ray_address: str | None = None, out: str | os.PathLike | None = None) -> list[str]:
    """One corpus pass of a ``StreamEvidence`` against each group's queries at its n, those of
    ``short_min_words`` up to n - 1 words whole; returns the table's queries (distinct, sorted: a
    query's number in the table is its place here). ``workers``, ``engine``, ``ray_address``: where
    the shards run (``engines.make_engine``; or an ``Engine`` the caller made and closes, which
    runs the shards whatever ``workers`` says); on Ray their files go beside ``out``."""
    from contextlib import nullcontext

    from tcqa_data.decontam.core.hashing import word_counts
    from tcqa_data.engines import Engine, make_engine

    queries = sorted({q for _, qs in groups for q in qs})
    number = {q: i for i, q in enumerate(queries)}
    whole: dict[int, set[int]] = {}
    for n, qs in groups:
        distinct = list(set(qs)) if short_min_words else []
        for q, m in zip(distinct, word_counts(distinct, evidence.normalization).tolist(), strict=True):
            if short_min_words <= m < n:
                whole.setdefault(m, set()).add(number[q])
    given = isinstance(engine, Engine)
    eng = engine if given else make_engine(engine, workers, ray_address) if engine != "local" else None
    work_dir = None
    if eng is not None and eng.name == "ray" and out is not None:
        work_dir = Path(out).resolve().parent
        work_dir.mkdir(parents=True, exist_ok=True)
    with nullcontext() if eng is None or given else eng, progress_bar(quiet, bytes_mode=True) as prog:
        bar = prog.add_task("stream corpus", total=sum(i.size for i in evidence.inputs), rate="")
        evidence.fill(queries, sorted({n for n, _ in groups}), workers=workers, engine=eng,
                      work_dir=None if work_dir is None else str(work_dir),
                      whole={m: sorted(v) for m, v in whole.items()},
                      progress=lambda nbytes, ndocs: prog.update(bar, advance=nbytes))
    return queries



def _process_split(spec: TaskSpec | LmEvalTask, b: BenchmarkSplit, queries: list[str], role: str,
                   split_dir: Path, run: _Run, n: int, config: dict[str, Any]
                   ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """One split: scored against the index, flagged by the rule, its files written; returns its
    report counts, where its lm-eval export is, and its row of the run summary."""
    import time

    rule = run.rule
    qdocs = query_docs(spec, b, queries)
    with progress_bar(run.quiet) as prog:
        t0 = time.perf_counter()
        task_id = prog.add_task(f"{spec.task}/{b.split}", total=len(qdocs), rate="")
        done = [0]

        def step(k: int) -> None:
            done[0] += k
            if done[0] % 500 == 0 or done[0] == len(qdocs):
                prog.update(task_id, completed=done[0],
                            rate=rate_text(done[0], time.perf_counter() - t0, "docs"))

        # alignment against corpus text (aligned_* columns) runs when the rule has an aligned term
        cols = score_docs(qdocs, run.evidence, n, max_corpus_freq=run.max_corpus_freq,
                          use_minhash=run.use_minhash, progress=step, align=rule.uses_alignment,
                          short_min_words=run.short_min_words)
    portable_doc_refs(cols, run.fix_ref)
    gids = group_ids(spec, b.table)
    dirty_doc, fired = rule.evaluate(cols)
    dirty = group_flags(dirty_doc, gids, run.group_policy)
    status = doc_status(dirty, np.asarray(cols["testable"]), rule, cols["minhash_windows"],
                        cols.get("aligned_tested"))
    full = add_ids(b.table, gids)
    clean_t, dirty_t = split_table(full, dirty)
    check_invariants(full, clean_t, dirty_t)
    contamination = _contamination_table(cols, gids, n, dirty_doc, dirty, status, fired)
    write_parquet_atomic(split_dir / "full.parquet", full)
    write_parquet_atomic(split_dir / "clean.parquet", clean_t)
    write_parquet_atomic(split_dir / "dirty.parquet", dirty_t)
    write_parquet_atomic(split_dir / "contamination.parquet", contamination)
    if isinstance(spec, TaskSpec):
        export_lm_eval(spec, b.split, role, split_dir)
        reason = None
    elif (reason := exportable(spec.lm_task)) is None:
        export_lm_eval_task(spec, split_dir)
    counts = write_reports(spec, b.split, portable_path(b.source), full, contamination, split_dir,
                           config=config, index_summary=run.index_summary)
    # where lm-eval finds the exported tasks (relative to PREP_DIR), for `lm_eval --include_path`
    if reason is None:
        # lm-eval runs the exported Python and renders the YAMLs' templates unsandboxed: their
        # sha256 lets `evaluate --backend lm-eval` refuse a folder whose code was changed since
        export = {"include_path": f"{spec.task}/{b.split}/lm_eval",
                  "tasks": {w: lm_eval_task_name(spec.task, b.split, w) for w in ("clean", "full")},
                  "code_sha256": code_digests(split_dir / "lm_eval")}
    else:
        export = {"include_path": None, "tasks": {}, "not_exported": reason}
    row = split_row(spec, b.split, role, b.split in spec.splits().values(), n, contamination)
    return counts, export, row


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
    # null where no MinHash candidate was found or MinHash was not computed (never -1.0 / NaN, so a
    # plain mean over the column is the mean over docs that have a candidate)
    sims = cols["minhash_sim"]
    data["minhash_sim"] = pa.array([None if x is None or not x >= 0 else float(x) for x in sims],
                                   type=pa.float64())
    from tcqa_data.decontam.detect.align import ALIGNED_COLUMN_TYPES

    for name, typ in ALIGNED_COLUMN_TYPES.items():  # present when the index has a text store
        if name in cols:
            data[name] = pa.array(cols[name], type=typ)
    return pa.table(data)
