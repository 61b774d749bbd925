"""`tcqa-data decontaminate`: flag contaminated benchmark docs and write clean splits (stage 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from tcqa_data.cli import app, warning
from tcqa_data.decontam.detect.rules import DEFAULT_RULE


@app.command("decontaminate")
def decontaminate_cmd(
    index_dir: Path = typer.Argument(..., help="Index folder written by `tcqa-data index-corpus`."),
    tasks: str = typer.Option("mc_taco,squad_completion", "--tasks",
                              help="Comma-separated built-in task names, task YAML paths, or lm-eval "
                                   "task, group or tag names (needs the lm-eval extra)."),
    out: Path = typer.Option(..., "--out", help="Output folder (PREP_DIR)."),
    data_files: Optional[list[str]] = typer.Option(  # noqa: UP045 - typer needs Optional here
        None, "--data-files",
        help="Local data instead of the hub: TASK:SPLIT=PATH (TSV, JSONL or Parquet); repeatable, e.g. "
             "mc_taco:test=../shared/data/mc_taco/test_9442.tsv"),
    splits: Optional[str] = typer.Option(None, "--splits",  # noqa: UP045
                                         help="Comma-separated split names to process (default: all)."),
    rule: str = typer.Option(DEFAULT_RULE, "--rule",
                             help="Flag rule: any-ngram | ngram-hits>=K | ngram-fraction>=X | longest>=L | "
                                  "minhash>=T, joined with & (and) and | (or), e.g. "
                                  "'ngram-fraction>=0.5|minhash>=0.8'."),
    ngram: str = typer.Option("13", "--ngram", help="N-gram size the index holds, or 'auto' (GPT-3: 5th "
                                                   "percentile of query length, clamped to 8..13)."),
    max_corpus_freq: Optional[int] = typer.Option(  # noqa: UP045
        None, "--max-corpus-freq", help="Ignore n-grams found in more than K corpus docs (boilerplate)."),
    group_policy: str = typer.Option("any", "--group-policy",
                                     help="A group is dirty when any | all | majority of its docs are."),
    normalization: Optional[str] = typer.Option(  # noqa: UP045
        None, "--normalization", help="Require the index to use this normalization (janitor | unicode)."),
    lm_eval_include: Optional[list[Path]] = typer.Option(  # noqa: UP045
        None, "--lm-eval-include",
        help="A folder of your own lm-eval task YAMLs (lm-eval's --include_path); repeatable."),
    group_by: Optional[list[str]] = typer.Option(  # noqa: UP045
        None, "--group-by",
        help="Docs of TASK with equal FIELD values form one question group, kept whole in clean and dirty: "
             "TASK:FIELD[,FIELD...]; repeatable (default: each doc is its own group)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars or summary."),
) -> None:
    """Score benchmark docs against INDEX_DIR, write clean/dirty splits, evidence and reports to --out."""
    from tcqa_data.decontam.index_files import reading
    from tcqa_data.outputs import check_apart
    from tcqa_data.prep.lm_eval_tasks import parse_group_by
    from tcqa_data.prep.pipeline import decontaminate, parse_data_files

    check_apart(out, index_dir, "index", "--out")  # PREP_DIR is committed whole: never over the index
    task_list = [t.strip() for t in tasks.split(",") if t.strip()]
    with reading(index_dir):  # an index file damaged with its size kept: one line, found by a full check
        summary = decontaminate(
            index_dir, task_list, out,
            data_files=parse_data_files(data_files or [], task_list),
            splits=[s.strip() for s in splits.split(",") if s.strip()] if splits else None,
            rule=rule, ngram=ngram, max_corpus_freq=max_corpus_freq, group_policy=group_policy,
            normalization=normalization, lm_eval_include=[str(p) for p in lm_eval_include or []],
            group_by=parse_group_by(group_by or []), quiet=quiet,
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
