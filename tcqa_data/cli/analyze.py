"""CLI command `analyze` (thin; see tcqa_data.analysis)."""

from __future__ import annotations

from pathlib import Path

import typer

from tcqa_data.cli import app


@app.command("analyze")
def analyze_cmd(
    prep_dir: Path = typer.Argument(..., help="Folder written by `tcqa-data decontaminate`."),
    results: Path = typer.Option(..., "--results", help="An `evaluate` output folder, or lm-eval 0.4 "
                                 "--log_samples output (a samples_<task>_<date>.jsonl file or its folder)."),
    output: Path = typer.Option(None, "--output", help="Output folder (default <results folder>/analysis)."),
    tasks: str = typer.Option(None, "--task", help="Comma-separated prepared task(s) to analyze; names "
                              "the prepared task when the lm-eval task has another name."),
    split: str = typer.Option(None, "--split", help="Prepared split (default: the one evaluated)."),
    index_dir: Path = typer.Option(None, "--index", help="The corpus index, for input vs input+label "
                                   "(default: the one prep_manifest.json names, if found)."),
    bootstrap: int = typer.Option(None, "--bootstrap", help="Bootstrap resamples (default: evaluate's, "
                                  "else 1000)."),
    seed: int = typer.Option(None, "--seed", help="Bootstrap seed (default: evaluate's)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only where the outputs went."),
) -> None:
    """Contamination analysis of one model pass: threshold sweeps with EPG, Llama 2's Zn, input vs label."""
    from tcqa_data.analysis import analyze

    names = [t.strip() for t in tasks.split(",") if t.strip()] if tasks else None
    result = analyze(prep_dir, results, output, tasks=names, split=split, bootstrap=bootstrap, seed=seed,
                     index_dir=index_dir)
    if not quiet:
        for task, entry in result["tasks"].items():
            typer.echo(f"## {task} ({entry['split']})")
            for line in entry["conclusion"]:
                typer.echo(f"- {line}")
    typer.echo(f"wrote {result['output_dir']}")
