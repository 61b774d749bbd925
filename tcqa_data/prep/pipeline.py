"""Stage 2: flag contaminated benchmark docs against an index and write clean/dirty splits.

``decontaminate(index_dir, tasks, out_dir)`` is the library entry point; the CLI only parses options.
Outputs are deterministic: the same inputs give byte-identical files (no timestamps, sorted keys).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

import tcqa_data
from tcqa_data.decontam.detect.evidence import IndexEvidence
from tcqa_data.decontam.detect.rules import DEFAULT_RULE, Rule, doc_status
from tcqa_data.decontam.detect.score import auto_ngram, score_docs
from tcqa_data.decontam.semantic.judge import JUDGE_TOP
from tcqa_data.deprecation import moved_to_top
from tcqa_data.errors import ConfigError, IndexMismatchError, TcqaError
from tcqa_data.io_utils import write_json_atomic, write_parquet_atomic, write_text_atomic
from tcqa_data.outputs import check_name, code_digests, resolve_inside, writes_output
from tcqa_data.prep.benchmarks import BenchmarkSplit, group_ids
from tcqa_data.prep.doc_refs import portable_doc_refs, portable_path, portable_ref
from tcqa_data.prep.ground_truth import Labels, read_labels
from tcqa_data.prep.lm_eval_export import export_lm_eval, export_lm_eval_task, exportable, lm_eval_task_name
from tcqa_data.prep.report import write_reports
from tcqa_data.prep.splits import GROUP_POLICIES, add_ids, check_invariants, group_flags, split_table
from tcqa_data.prep.summary import build_summary, reference_for, split_row, write_summary
from tcqa_data.prep.task_jobs import TaskJob, check_task_files, query_docs, task_jobs
from tcqa_data.prep.taskspec import TaskSpec
from tcqa_data.progress import progress_bar, rate_text

if TYPE_CHECKING:
    from tcqa_data.prep.lm_eval_tasks import LmEvalTask


def _index_summary(idx: Any, index_dir: str | os.PathLike) -> dict[str, Any]:
    """The index manifest (long lists shortened, paths made portable) for the prep manifest and reports."""
    summary: dict[str, Any] = {"path": portable_path(index_dir)}
    for key, value in sorted(idx.manifest.items()):
        if key == "build":  # timestamps and durations: would make reruns differ byte-wise
            continue
        if key in ("files", "manifest_xxh3", "block_checksums"):  # the index's integrity record
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
    from tcqa_data.decontam.index_files import unsealed_warning

    unchecked = unsealed_warning(portable_path(index_dir), idx.manifest)
    if unchecked:  # read as before checksums existed: refusing would strand every old index
        warnings.append(unchecked)
    from tcqa_data.decontam.stream.evidence import duplicate_input_warning

    dupes = duplicate_input_warning(idx.manifest.get("skipped_inputs", []),
                                    f"the index {portable_path(index_dir)}")
    if dupes:  # as a stream over the same files says
        warnings.append(dupes)
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
    semantic_model: Any = None  # the semantic tier's EmbeddingModel (a ``semantic`` rule term)
    judge: Any = None  # the semantic tier's judge (``--judge``): a ``semantic.judge.Judge``
    labels: Labels | None = None  # ground truth (``--labels``): measured in the reports only
    # known once the evidence is filled (after a stream's pass)
    index_summary: dict[str, Any] = dataclasses.field(default_factory=dict)
    fix_ref: Callable[[str | None], str | None] | None = None  # corpus doc refs as PREP_DIR records them


def _task_files_first(fn: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """Task YAMLs given as paths are read and checked before ``writes_output`` claims the output: a
    refused task file leaves no lock or staging folder behind."""
    @functools.wraps(fn)
    def run(index_dir: Any, tasks: Sequence[str] | str, out_dir: Any, **kwargs: Any) -> dict[str, Any]:
        check_task_files([t.strip() for t in tasks.split(",")] if isinstance(tasks, str) else tasks)
        return fn(index_dir, tasks, out_dir, **kwargs)

    return run


# The files and folders of PREP_DIR's own and of each task folder's own, which no task or split
# name may take; a split name's longest use is the file name lm-eval gives the exported task's
# samples in `evaluate --backend lm-eval` (its timestamp is 26 characters).
PREP_DIR_OWN = ("prep_manifest.json", "summary.json", "summary.md", "summary.html",
                "contamination_report.csv", "eval")
TASK_FOLDER_OWN = ("task.yaml",)
_LONGEST_SPLIT_USE = "samples_{}_2026-01-01T00-00-00.000000.jsonl"


def check_prep_names(jobs: Sequence[TaskJob]) -> None:
    """Every task and split name of ``jobs`` as PREP_DIR folder names (``outputs.check_name``): not
    one of the folder's own files (a task ``eval`` would replace the model results, a split
    ``task.yaml`` the spec), and short enough for every file name built from it."""
    for job in jobs:
        task = job.task.task
        splits = [check_name(b.split, "split name", f"task {task!r}", reserved=TASK_FOLDER_OWN)
                  for b, _, _ in job.parts]
        longest_split = max(splits, key=lambda x: len(x.encode("utf-8")), default="")
        escaped = longest_split.replace("{", "{{").replace("}", "}}")  # a format string, as check_name takes
        check_name(task, "task name", "--tasks", reserved=PREP_DIR_OWN,
                   longest_use=_LONGEST_SPLIT_USE.replace("{}", lm_eval_task_name("{}", escaped, "clean")))


# PREP_DIR is committed whole or not at all, and a rerun replaces it whole (carry=False): another
# run's task folders would stay beside the new manifest, which does not list them
@moved_to_top("decontaminate")
@_task_files_first
@writes_output("out_dir", "decontaminate", carry=False)
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
    allow_task_code: bool = False,
    embedding_model: str | None = None,
    judge: str | None = None,
    judge_top: int = JUDGE_TOP,
    labels: str | os.PathLike | None = None,
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

    ``embedding_model``: the semantic tier's sentence-transformers model (name, folder or hub id;
    default: the bundled ``all-MiniLM-L6-v2``), loaded (and its weights digest checked) before
    anything is written when the rule has a ``semantic`` term. ``judge``: a causal LM (folder,
    ``.gguf`` file, hub id or ``smollm2-135m-gguf``) asked of each split's ``judge_top`` best pairs
    whether they are the same item (``decontam/semantic/judge.py``; the rule term ``judge``); it
    needs a semantic term and is loaded, like the embedding model, before anything is written.

    ``labels``: a file of ground truth (CSV, JSONL or Parquet: ``task``, ``doc_id`` or ``group_id``,
    ``contaminated``, optional ``split``; :mod:`tcqa_data.prep.ground_truth`), read and tied to the
    run's docs before the corpus is read; each labelled split's reports measure the rule, its terms
    and every score's precision / recall curve against it (:mod:`tcqa_data.prep.flag_quality`).
    Labels change no flag, split or other file.

    ``source_name``: the corpus as ``contamination_report.csv`` names it (the CONDA database's
    "Contaminated Source", e.g. a hub id); default: its hub dataset or file names
    (:func:`default_source_name`).

    Every template of every task is rendered on each of its docs in the sandbox with budgets
    (:mod:`tcqa_data.prep.templates`) before anything is exported; ``allow_task_code`` lets lm-eval
    import Python that task YAMLs outside the installed lm-eval package name (refused by default).

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
    ground_truth = read_labels(labels) if labels is not None else None  # its own fields, first
    stream = corpus is not None or hf_dataset is not None
    semantic_model = judge_model = None
    if parsed_rule.uses_judge and judge is None:
        raise ConfigError(f"rule {str(parsed_rule)!r} has the term 'judge', which needs a judge model: "
                          "--judge MODEL (e.g. --judge smollm2-135m-gguf)")
    if judge is not None and not parsed_rule.uses_semantic:
        raise ConfigError(f"--judge {judge}: the judge verifies the semantic tier's pairs, and rule "
                          f"{str(parsed_rule)!r} has no semantic term; e.g. "
                          "--rule 'any-ngram|semantic&judge'")
    if parsed_rule.uses_semantic:  # a model that cannot load is refused before anything is written
        from tcqa_data.decontam.semantic.prefilter import model_for_rule

        semantic_model = model_for_rule(embedding_model, parsed_rule.semantic_thresholds, judge is not None)
        if judge is not None:
            from tcqa_data.decontam.semantic.judge import load_judge

            judge_model = load_judge(judge, top=judge_top)
    if stream == (index_dir is not None):
        raise ConfigError("give either an index folder (INDEX_DIR) or a corpus (--corpus, --hf-dataset), "
                          "not both or neither")
    if stream:
        from tcqa_data.decontam.stream.table import StreamConfig

        run = _open_stream_run(list(corpus or []), StreamConfig(
            normalization=normalization or "janitor", anchors=parsed_rule.uses_alignment,
            semantic=parsed_rule.uses_semantic, text_field=text_field, id_field=id_field, on_error=on_error,
            hf_dataset=hf_dataset,
            hf_config=hf_config, hf_split=hf_split), out_dir, parsed_rule, fixed_n,
            max_corpus_freq=max_corpus_freq, group_policy=group_policy, quiet=quiet,
            short_min_words=short_min_words)
    else:
        run = _open_run(index_dir, out_dir, parsed_rule, fixed_n, normalization=normalization,
                        max_corpus_freq=max_corpus_freq, group_policy=group_policy, quiet=quiet,
                        short_min_words=short_min_words)
    run.semantic_model, run.judge = semantic_model, judge_model
    if stream:  # a multilingual model: the pass reads text in other scripts too (translations)
        from tcqa_data.decontam.semantic.foreign import translation_model

        run.evidence.translation_model = translation_model(semantic_model)
    jobs = task_jobs(tasks, data_files, splits, group_by=group_by, lm_eval_include=lm_eval_include,
                     lm_eval_include_defaults=lm_eval_include_defaults, allow_task_code=allow_task_code)
    check_prep_names(jobs)  # before the (stream) pass: refused before any work
    if ground_truth is not None:  # every label tied to a doc (or group) of this run, before the pass
        ground_truth.check({job.task.task: {b.split: group_ids(job.task, b.table) for b, _, _ in job.parts}
                            for job in jobs})
    run.labels = ground_truth
    manifest_tasks: dict[str, Any] = {}
    summary: dict[str, Any] = {"out_dir": str(run.out), "rule": str(parsed_rule),
                               "warnings": run.config["warnings"], "tasks": {}}
    if stream:  # every task's queries in one table, the corpus read once against it
        _stream_pass(run, jobs, {"workers": workers, "engine": engine, "ray_address": ray_address,
                                 "out": run.out})
        if run.evidence.num_docs == 0:  # (config and summary hold this list: every report shows it)
            run.config["warnings"].append("the corpus holds 0 documents: nothing was searched, so every doc "
                                          "below is reported clean")
    elif semantic_model is not None:  # index mode: its text store read once for every split's items
        run.evidence.plan_semantic([[q for _, qs, _ in job.parts for q in qs] for job in jobs])
    if semantic_model is not None:
        run.config["semantic"] = _semantic_config(run)
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
    from tcqa_data.prep.prepared import DATA_KEY, data_digests

    manifest[DATA_KEY] = data_digests(run.out)  # evaluate and analyze check them before a model loads
    write_json_atomic(run.out / "prep_manifest.json", manifest)
    return summary


def _semantic_config(run: _Run) -> dict[str, Any]:
    """What the manifest and reports say of the semantic tier: the model and its weights digest,
    the shipped threshold, and (stream) how many corpus windows became candidates."""
    from tcqa_data.decontam.detect.rules import DEFAULT_SEMANTIC
    from tcqa_data.decontam.semantic import foreign, matches, windows

    out: dict[str, Any] = {
        "model": run.semantic_model.manifest(), "default_threshold": DEFAULT_SEMANTIC,
        "score": f"{1 - matches.KEPT_WEIGHT:g} * cosine + {matches.KEPT_WEIGHT:g} * kept share of the item's "
                 f"particulars (rare words, numbers), out of at least {matches.KEPT_MIN_WEIGHT}",
        "sub_span_words": list(matches.SUB_SPAN_WORDS),
        "terms": [str(t) for t in run.rule.terms if t.uses_semantic],
        "candidates": {"window_words": windows.WINDOW_WORDS, "window_stride": windows.WINDOW_STRIDE,
                       "min_share": windows.MIN_SHARE, "top_per_query": windows.TOP_PER_QUERY}}
    if run.judge is not None:
        out["judge"] = run.judge.manifest()
    if foreign.is_multilingual(run.semantic_model):  # text in other scripts read too (foreign.py)
        out["foreign_script"] = {
            "min_letters": foreign.FOREIGN_MIN_LETTERS, "max_latin_words_between": foreign.FOREIGN_GAP,
            "max_chars": foreign.FOREIGN_MAX_CHARS,
            "score": f"{1 - matches.KEPT_WEIGHT:g} * cosine + {matches.KEPT_WEIGHT:g} * clip((cosine - the "
                     f"best cosine with another item of the task) / {foreign.MARGIN_FULL:g}, 0, 1)"}
    found = getattr(getattr(run.evidence, "hits", None), "semantic", None) if run.stream else None
    if found is not None:
        out["candidates"].update({"windows": found.windows, "windows_passed": found.passed,
                                  "pairs_kept": len(found)})
        if "foreign_script" in out:
            items = run.evidence.hits.table.rare.num_queries
            out["foreign_script"]["pairs_kept"] = int((found.cols["query"] >= items).sum())
    return out


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
    if rule.uses_semantic and not idx.has_text:
        raise IndexMismatchError(f"rule {str(rule)!r} reads corpus windows (semantic), but index "
                                 f"{index_dir} has no text store; rebuild it with one or use --corpus")
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
    from tcqa_data.decontam.stream.evidence import MINHASH_REFUSAL, StreamEvidence, duplicate_input_warning

    if rule.uses_minhash:
        raise ConfigError(f"rule {str(rule)!r}: {MINHASH_REFUSAL}")
    idx = StreamEvidence.open(corpus, stream_config)
    dupes = duplicate_input_warning(idx.skipped_inputs, "the corpus")
    config = _run_config(rule, group_policy, max_corpus_freq, idx.normalization, False,
                         "off: stream mode (--corpus) computes no MinHash", [dupes] if dupes else [])
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


def _process_task(job: TaskJob, run: _Run, rows: list[dict[str, Any]]
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


def _stream_pass(run: _Run, jobs: Sequence[TaskJob], where: dict[str, Any]) -> None:
    """Fill the run's ``StreamEvidence`` with every query of ``jobs`` at each task's n (``fill_stream``)."""
    from tcqa_data.decontam.stream.evidence import fill_stream

    groups = []
    for job in jobs:
        queries = [q for _, qs, _ in job.parts for q in qs]
        groups.append((_choose_n(job.task.task, queries, run)[0], queries))
    fill_stream(run.evidence, groups, quiet=run.quiet, short_min_words=run.short_min_words, **where)


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

        # alignment against corpus text (aligned_* columns) runs when the rule has an aligned term;
        # the semantic tier scores only the docs whose flag it can change, unless a judge or the
        # labels' curves read every score
        decided = (None if run.judge is not None or run.labels is not None
                   else lambda c: rule.decided_without(c, "semantic_score"))
        cols = score_docs(qdocs, run.evidence, n, max_corpus_freq=run.max_corpus_freq,
                          use_minhash=run.use_minhash, progress=step, align=rule.uses_alignment,
                          short_min_words=run.short_min_words, semantic_model=run.semantic_model,
                          judge=run.judge, semantic_skip=decided)
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
                           config=config, index_summary=run.index_summary,
                           labels=run.labels.for_split(spec.task, b.split) if run.labels else None)
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
    for name, typ in SEMANTIC_COLUMN_TYPES.items():  # present when the rule has a semantic term
        if name in cols:
            data[name] = pa.array(cols[name], type=typ)
    return pa.table(data)


SEMANTIC_COLUMN_TYPES = {
    "semantic_score": pa.float64(), "semantic_cosine": pa.float64(), "semantic_kept": pa.float64(),
    "semantic_doc_ref": pa.string(), "semantic_span": pa.list_(pa.int64()),
    "semantic_window": pa.string(), "semantic_shared_words": pa.list_(pa.string()),
    "semantic_candidates": pa.int64(), "semantic_model": pa.string(), "semantic_source": pa.string(),
    "semantic_judge": pa.bool_(), "semantic_judge_probability": pa.float64()}  # with --judge
