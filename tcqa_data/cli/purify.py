"""`tcqa-data purify`: write the training corpus minus its contamination by the benchmarks."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from tcqa_data.cli import ALLOW_TASK_CODE_HELP, CorpusPreset, Engine, OnError, PurifyMode, app, value_of
from tcqa_data.cli.help_format import PanelCommand
from tcqa_data.decontam.detect.rules import DEFAULT_RULE
from tcqa_data.decontam.readers.presets import text_field_for
from tcqa_data.decontam.semantic.model import DEFAULT_MODEL


@app.command("purify", cls=PanelCommand)
def purify_cmd(
    corpus: list[str] = typer.Argument(..., help="Corpus files, globs or folders (JSONL, Parquet)."),
    tasks: str = typer.Option("mc_taco,squad_completion", "--tasks",
                              help="Comma-separated built-in task names, task YAML paths, or lm-eval "
                                   "task, group or tag names (needs the lm-eval extra)."),
    # a str, not a Path: Path("s3://b/x") would read as the local folder "s3:/b/x"
    out: str = typer.Option(..., "--out", help="Output folder or object-storage prefix (s3://...; never "
                                                "an input, nor inside or around one)."),
    mode: PurifyMode = typer.Option("excise", "--mode",
                             help="excise: Janitor.clean's cuts; drop: whole docs."),
    data_files: Optional[list[str]] = typer.Option(  # noqa: UP045 - typer needs Optional here
        None, "--data-files",
        help="Local data instead of the hub: TASK:SPLIT=PATH (as decontaminate); repeatable."),
    splits: Optional[str] = typer.Option(None, "--splits",  # noqa: UP045
                                         help="Comma-separated split names to check (default: all)."),
    lm_eval_include: Optional[list[Path]] = typer.Option(  # noqa: UP045
        None, "--lm-eval-include", rich_help_panel="Tasks and parallelism",
        help="A folder of your own lm-eval task YAMLs (lm-eval's --include_path); repeatable."),
    rule: str = typer.Option(DEFAULT_RULE, "--rule", rich_help_panel="Matching",
                             help="Benchmark docs that count (as decontaminate; a semantic term drops "
                                  "the docs of a flagged item's windows at its threshold, or excises "
                                  "the windows)."),
    ngram: int = typer.Option(13, "--ngram", rich_help_panel="Matching",
                              min=1, help="N-gram size (Janitor: 13)."),
    window: int = typer.Option(200, "--window", rich_help_panel="Excision (Janitor)", min=0,
                               help="Chars cut on each side of a match (Janitor: 200)."),
    minimum_slice: int = typer.Option(200, "--minimum-slice", rich_help_panel="Excision (Janitor)",
                                      min=0, help="Shorter pieces dropped (Janitor: 200)."),
    too_dirty_cutoff: int = typer.Option(10, "--too-dirty-cutoff", rich_help_panel="Excision (Janitor)",
                                      min=0, help="More matches drop the doc whole (Janitor: 10)."),
    janitor_exact: bool = typer.Option(
        True, "--janitor-exact/--no-janitor-exact",
        help="Excise exactly as Janitor.clean_python (the default). --no-janitor-exact also matches "
             "across a word that is all punctuation (' , ', '()') and short items whole, as "
             "decontaminate does, so the output flags nothing; its cuts then differ from Janitor's."),
    text_field: Optional[str] = typer.Option(  # noqa: UP045
        None, "--text-field", rich_help_panel="Corpus layout",
        help="Field holding the document text (default: text); a.b: nested."),
    preset: Optional[CorpusPreset] = typer.Option(  # noqa: UP045
        None, "--preset", rich_help_panel="Corpus layout",
        help="A corpus layout's text field: dolma, fineweb, dclm, redpajama-v2."),
    id_field: Optional[str] = typer.Option(  # noqa: UP045
        None, "--id-field", rich_help_panel="Corpus layout",
        help="Field used as doc ref (default: file:line)."),
    on_error: OnError = typer.Option("raise", "--on-error", rich_help_panel="Corpus layout",
                                     help="raise: stop at a bad record; skip: count it."),
    workers: int = typer.Option(1, "--workers", rich_help_panel="Tasks and parallelism", min=1,
                                help="Local processes reading the corpus shards and writing the outputs."),
    engine: Engine = typer.Option("local", "--engine", rich_help_panel="Tasks and parallelism",
                                  help="local: --workers processes here; ray: Ray tasks."),
    ray_address: Optional[str] = typer.Option(  # noqa: UP045
        None, "--ray-address", rich_help_panel="Tasks and parallelism",
        help="With --engine ray: auto, HOST:PORT or ray://HOST:PORT (default local)."),
    short_min_words: int = typer.Option(
        8, "--short-min-words", rich_help_panel="Matching",
        min=0, help="Items of this many words up to n-1 are matched whole (0: off)."),
    allow_task_code: bool = typer.Option(False, "--allow-task-code", rich_help_panel="Tasks and parallelism",
                                         help=ALLOW_TASK_CODE_HELP),
    embedding_model: Optional[str] = typer.Option(  # noqa: UP045
        None, "--embedding-model", rich_help_panel="Matching",
        help=f"With a semantic rule term: the sentence-transformers model, as "
             f"decontaminate's (default: {DEFAULT_MODEL})."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars or summary."),
) -> None:
    """Stream CORPUS against the tasks' n-grams and write it to --out without its contamination."""
    from tcqa_data.prep.purify import purify
    from tcqa_data.prep.task_jobs import parse_data_files

    task_list = [t.strip() for t in tasks.split(",") if t.strip()]
    report = purify(corpus, task_list, out, data_files=parse_data_files(data_files or [], task_list),
                    splits=[s.strip() for s in splits.split(",") if s.strip()] if splits else None,
                    rule=rule, ngram=ngram, mode=value_of(mode), window=window, minimum_slice=minimum_slice,
                    too_dirty_cutoff=too_dirty_cutoff, janitor_exact=janitor_exact,
                    text_field=text_field_for(value_of(preset), text_field), id_field=id_field,
                    on_error=value_of(on_error), workers=workers,
                    engine=value_of(engine), ray_address=ray_address,
                    short_min_words=short_min_words or None,
                    lm_eval_include=[str(p) for p in lm_eval_include or []], quiet=quiet,
                    allow_task_code=allow_task_code, embedding_model=embedding_model)
    if not quiet:
        t, shards = report["totals"], report["shards"]
        typer.echo(f"{t['contaminated_docs']} contaminated docs: {t['dropped']} dropped, {t['cut']} cut, "
                   f"{t['bytes_removed']} bytes removed -> {out} ({shards['total']} output shards, "
                   f"{shards['reused']} reused from a killed run)")
