"""`tcqa-data decontaminate`: flag contaminated benchmark docs and write clean splits (stage 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from tcqa_data.cli import (
    ALLOW_TASK_CODE_HELP,
    CorpusPreset,
    Engine,
    GroupPolicy,
    Normalization,
    OnError,
    app,
    comma_list,
    ngram_option,
    value_of,
    warning,
)
from tcqa_data.cli.help_format import PanelCommand
from tcqa_data.decontam.detect.rules import DEFAULT_RULE, DEFAULT_SEMANTIC, rule_terms_help
from tcqa_data.decontam.readers.presets import text_field_for
from tcqa_data.decontam.semantic.judge import JUDGE_FLOOR, JUDGE_TOP
from tcqa_data.decontam.semantic.model import DEFAULT_MODEL


@app.command("decontaminate", cls=PanelCommand)
def decontaminate_cmd(
    index_dir: Optional[Path] = typer.Argument(  # noqa: UP045
        None, help="Index folder written by `tcqa-data index-corpus` (or --corpus instead)."),
    corpus: Optional[list[str]] = typer.Option(  # noqa: UP045
        None, "--corpus",
        help="Stream mode, no index: corpus files, globs or folders (as index-corpus takes them), read "
             "once against all tasks' n-grams; repeatable."),
    hf_dataset: Optional[str] = typer.Option(  # noqa: UP045
        None, "--hf-dataset", rich_help_panel="Stream mode",
        help="Stream mode: this Hugging Face dataset too (or alone: no --corpus)."),
    hf_config: Optional[str] = typer.Option(  # noqa: UP045
        None, "--hf-config", rich_help_panel="Stream mode", help="Its config name."),
    hf_split: str = typer.Option("train", "--hf-split", rich_help_panel="Stream mode",
                                 help="Its split."),
    text_field: Optional[str] = typer.Option(  # noqa: UP045
        None, "--text-field", rich_help_panel="Stream mode",
        help="With --corpus: the document text field (default: text); a.b: nested."),
    preset: Optional[CorpusPreset] = typer.Option(  # noqa: UP045
        None, "--preset", rich_help_panel="Stream mode",
        help="With --corpus: a layout's text field: dolma, fineweb, dclm, redpajama-v2."),
    id_field: Optional[str] = typer.Option(  # noqa: UP045
        None, "--id-field", rich_help_panel="Stream mode",
        help="With --corpus: field used as doc ref (default: file:line)."),
    on_error: OnError = typer.Option("raise", "--on-error", rich_help_panel="Stream mode",
                                     help="With --corpus: raise: stop at a bad record; skip: count it."),
    tasks: str = typer.Option("mc_taco,squad_completion", "--tasks",
                              help="Comma-separated built-in task names, task YAML paths, or lm-eval "
                                   "task, group or tag names (needs the lm-eval extra)."),
    out: Path = typer.Option(..., "--out", help="Output folder (PREP_DIR)."),
    data_files: Optional[list[str]] = typer.Option(  # noqa: UP045 - typer needs Optional here
        None, "--data-files",
        help="Local data instead of the hub: TASK:SPLIT=PATH (TSV, JSONL or Parquet; for lm-eval tasks "
             "JSONL, Parquet or CSV with the fields the task's YAML reads); repeatable, e.g. "
             "mc_taco:test=DATA/mc_taco/test_9442.tsv"),
    splits: Optional[str] = typer.Option(None, "--splits",  # noqa: UP045
                                         help="Comma-separated split names to process (default: all)."),
    rule: str = typer.Option(DEFAULT_RULE, "--rule",
                             help=f"Flag rule: {rule_terms_help()}, e.g. "
                                  "'ngram-fraction>=0.5|minhash>=0.8', 'any-ngram|aligned-field>=0.8' or "
                                  f"'any-ngram|semantic' (rephrased items; semantic = "
                                  f"semantic>={DEFAULT_SEMANTIC})."),
    ngram: str = typer.Option("13", "--ngram", rich_help_panel="Matching", callback=ngram_option,
                              help="N-gram size the index holds, or 'auto' (GPT-3: 5th "
                                   "percentile of query length, clamped to 8..13)."),
    max_corpus_freq: Optional[int] = typer.Option(  # noqa: UP045
        None, "--max-corpus-freq", rich_help_panel="Matching", min=1,
        help="Ignore n-grams found in more than K corpus docs (boilerplate)."),
    group_policy: GroupPolicy = typer.Option(
        "any", "--group-policy", rich_help_panel="Matching",
        help="A group is dirty when any | all | majority of its docs are."),
    normalization: Optional[Normalization] = typer.Option(  # noqa: UP045
        None, "--normalization", rich_help_panel="Matching",
        help="Require the index to use this normalization (janitor | unicode)."),
    lm_eval_include: Optional[list[Path]] = typer.Option(  # noqa: UP045
        None, "--lm-eval-include", rich_help_panel="lm-eval tasks",
        help="A folder of your own lm-eval task YAMLs (lm-eval's --include_path); repeatable."),
    group_by: Optional[list[str]] = typer.Option(  # noqa: UP045
        None, "--group-by", rich_help_panel="Matching",
        help="Docs of TASK with equal FIELD values form one question group, kept whole in clean and dirty: "
             "TASK:FIELD[,FIELD...]; repeatable (default: each doc is its own group)."),
    workers: int = typer.Option(1, "--workers", rich_help_panel="Stream mode", min=1,
                                help="With --corpus: local processes reading its shards."),
    engine: Engine = typer.Option("local", "--engine", rich_help_panel="Stream mode",
                                  help="local: --workers processes here; ray: Ray tasks."),
    ray_address: Optional[str] = typer.Option(  # noqa: UP045
        None, "--ray-address", rich_help_panel="Stream mode",
        help="With --engine ray: auto, HOST:PORT or ray://HOST:PORT (default local)."),
    short_min_words: int = typer.Option(
        8, "--short-min-words", rich_help_panel="Matching", min=0,
        help="A query of this many words up to n-1 is matched whole (index: from its text store, "
             ">= 6; 0: off, such queries untestable)."),
    source_name: Optional[str] = typer.Option(  # noqa: UP045
        None, "--source-name", rich_help_panel="Reports",
        help="The corpus as contamination_report.csv names it (CONDA's Contaminated Source), e.g. a hub "
             "id such as allenai/c4 (default: its hub dataset or file names)."),
    allow_task_code: bool = typer.Option(False, "--allow-task-code", rich_help_panel="lm-eval tasks",
                                         help=ALLOW_TASK_CODE_HELP),
    embedding_model: Optional[str] = typer.Option(  # noqa: UP045
        None, "--embedding-model", rich_help_panel="Semantic tier (rephrased items)",
        help=f"With a semantic rule term: the sentence-transformers model (name, folder or hub id) that "
             f"scores candidate windows (default: {DEFAULT_MODEL}, installed with the semantic extra, its "
             f"weights sha256 pinned). A multilingual model (use-multilingual-v3, bundled) also reads corpus "
             f"text in other scripts, for translated items. A bare 'semantic' term means "
             f"semantic>={DEFAULT_SEMANTIC}."),
    judge: Optional[str] = typer.Option(  # noqa: UP045
        None, "--judge", rich_help_panel="Semantic tier (rephrased items)",
        help="With a semantic rule term: a causal LM (folder, .gguf file, hub id, or smollm2-135m-gguf) "
             "asked whether each top item/window pair is the same item, rephrased or translated; its "
             "verdict is the rule term 'judge', e.g. 'any-ngram|semantic&judge' (& binds tighter than |). "
             "Default: no judge."),
    judge_top: int = typer.Option(
        JUDGE_TOP, "--judge-top", rich_help_panel="Semantic tier (rephrased items)", min=1,
        help=f"With --judge: pairs judged per split, highest cosine first (not under {JUDGE_FLOOR})."),
    labels: Optional[Path] = typer.Option(  # noqa: UP045
        None, "--labels", rich_help_panel="Reports",
        help="Ground truth (CSV, JSONL or Parquet: task, doc_id or group_id, contaminated, optional split): "
             "each labelled split's report measures the rule, its terms and a precision/recall curve per "
             "score against it. Flags and splits do not change."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars or summary."),
) -> None:
    """Score benchmark docs against INDEX_DIR (or stream --corpus); write splits, evidence, reports."""
    from contextlib import nullcontext

    from tcqa_data.decontam.index_files import reading
    from tcqa_data.outputs import check_apart
    from tcqa_data.prep.lm_eval_tasks import parse_group_by
    from tcqa_data.prep.pipeline import decontaminate
    from tcqa_data.prep.task_jobs import parse_data_files

    if index_dir is not None:
        check_apart(out, index_dir, "index", "--out")  # PREP_DIR is committed whole: never over the index
    task_list = comma_list(tasks) or []
    # an index file damaged with its size kept: one line, found by a full check
    with reading(index_dir) if index_dir is not None else nullcontext():
        summary = decontaminate(
            index_dir, task_list, out,
            data_files=parse_data_files(data_files or [], task_list),
            splits=comma_list(splits),
            rule=rule, ngram=ngram, max_corpus_freq=max_corpus_freq, group_policy=value_of(group_policy),
            normalization=value_of(normalization), lm_eval_include=[str(p) for p in lm_eval_include or []],
            group_by=parse_group_by(group_by or []), quiet=quiet,
            corpus=corpus or None, text_field=text_field_for(value_of(preset), text_field), id_field=id_field,
            on_error=value_of(on_error),
            workers=workers, engine=value_of(engine), ray_address=ray_address, hf_dataset=hf_dataset,
            hf_config=hf_config, hf_split=hf_split, short_min_words=short_min_words or None,
            source_name=source_name, allow_task_code=allow_task_code, embedding_model=embedding_model,
            judge=judge, judge_top=judge_top, labels=labels,
        )
    for note in summary.get("warnings", []):  # shown even with --quiet; also at the top of every report
        warning(note)
    if quiet:
        return
    typer.echo(f"rule: {summary['rule']}")
    for task, per in summary["tasks"].items():
        for split, c in per.items():
            typer.echo(f"{task}/{split}: {c['dirty_groups']}/{c['groups']} groups dirty, "
                       f"{c['dirty_docs']}/{c['docs']} docs dirty, {c['untestable_docs']} untestable "
                       f"-> {out / task / split}")
    typer.echo(f"summary: {out / 'summary.md'}; CONDA database rows: {out / 'contamination_report.csv'}")
