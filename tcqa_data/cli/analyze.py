"""CLI command `analyze` (thin; see tcqa_data.analysis)."""

from __future__ import annotations

from pathlib import Path

import typer

from tcqa_data.cli import app, comma_list, old_spelling, one_split, prefer
from tcqa_data.cli.help_format import PanelCommand


@app.command("analyze", cls=PanelCommand)
def analyze_cmd(
    prep_dir: Path = typer.Argument(..., help="Folder written by `tcqa-data decontaminate`."),
    results: Path = typer.Option(..., "--results", help="An `evaluate` output folder, or lm-eval 0.4 "
                                 "--log_samples output (a samples_TASK_DATE.jsonl file or its folder)."),
    out: Path = typer.Option(None, "--out", help="Output folder (default: analysis/ in the results folder)."),
    tasks: str = typer.Option(None, "--tasks", help="Comma-separated prepared task(s) to analyze; names "
                              "the prepared task when the lm-eval task has another name."),
    splits: str = typer.Option(None, "--splits", help="The prepared split to analyze, one name (default: the "
                               "one evaluated)."),
    index_dir: Path = typer.Option(None, "--index", help="The corpus index, for input vs input+label "
                                   "(default: the one prep_manifest.json names, if found)."),
    bootstrap: int = typer.Option(None, "--bootstrap", min=1,
                                  help="Bootstrap resamples (default: evaluate's, "
                                  "else 1000)."),
    bootstrap_seed: int = typer.Option(None, "--bootstrap-seed",
                                       help="Bootstrap seed (default: evaluate's)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only where the outputs went."),
    old_output: Path = old_spelling("--output"),
    old_task: str = old_spelling("--task"),
    old_split: str = old_spelling("--split"),
    old_seed: int = old_spelling("--seed"),
) -> None:
    """Contamination analysis of one model pass: threshold sweeps with EPG, Llama 2's Zn, input vs label."""
    from tcqa_data.analysis import analyze

    result = analyze(prep_dir, results, prefer(out, old_output, "--output"),
                     tasks=comma_list(prefer(tasks, old_task, "--task")),
                     split=one_split(prefer(splits, old_split, "--split"), "analyze"), bootstrap=bootstrap,
                     seed=prefer(bootstrap_seed, old_seed, "--seed"), index_dir=index_dir)
    if not quiet:
        for task, entry in result["tasks"].items():
            typer.echo(f"## {task} ({entry['split']})")
            for line in entry["conclusion"]:
                typer.echo(f"- {line}")
    typer.echo(f"wrote {result['output_dir']}")
