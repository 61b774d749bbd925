"""CLI commands of the evaluate stage: `evaluate` and `score mc_taco` (thin; see tcqa_data.eval)."""

from __future__ import annotations

from pathlib import Path

import typer

from tcqa_data.cli import app

score_app = typer.Typer(help="Score an external predictions file.", no_args_is_help=True)
app.add_typer(score_app, name="score")


def _batch_size(value: str) -> int | str:
    if value == "auto":
        return value
    try:
        n = int(value)
    except ValueError:
        raise typer.BadParameter("use 'auto' or a positive integer") from None
    if n < 1:
        raise typer.BadParameter("use 'auto' or a positive integer")
    return n


@app.command("evaluate")
def evaluate_cmd(
    prep_dir: Path = typer.Argument(..., help="Folder written by `tcqa-data decontaminate`."),
    model: str = typer.Option(..., "--model", help="Hub id, local folder, or path to a .gguf file."),
    gguf_file: str = typer.Option(None, "--gguf-file", help="GGUF file name inside the --model folder."),
    tasks: str = typer.Option(None, "--tasks", help="Comma-separated tasks (default: all in PREP_DIR)."),
    clean_only: bool = typer.Option(False, "--clean-only", help="Score only the clean docs."),
    device: str = typer.Option("auto", "--device", help="auto|cuda|cpu|mps"),
    dtype: str = typer.Option(
        "auto", "--dtype", help="auto (bf16 on CUDA, fp32 else)|float32|bfloat16|float16"),
    batch_size: str = typer.Option("auto", "--batch-size", help="auto or N (rows per forward pass)."),
    output: Path = typer.Option(None, "--output", help="Output folder (default PREP_DIR/eval/<model>)."),
    limit_groups: int = typer.Option(None, "--limit-groups", help="Only the first N whole question groups."),
    split: str = typer.Option(None, "--split", help="Prepared split (default: test, else validation)."),
    trust_remote_code: bool = typer.Option(False, "--trust-remote-code",
                                           help="Run the model repo's own code."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bars."),
) -> None:
    """Score a model on the full, clean and dirty splits (one pass) and print the comparison."""
    from tcqa_data.eval.results import render_markdown
    from tcqa_data.eval.runner import evaluate

    names = [t.strip() for t in tasks.split(",") if t.strip()] if tasks else None
    results = evaluate(prep_dir, model, tasks=names,
                       clean_only=clean_only, device=device, dtype=dtype, batch_size=_batch_size(batch_size),
                       output=output, limit_groups=limit_groups, gguf_file=gguf_file,
                       trust_remote_code=trust_remote_code, split=split, quiet=quiet)
    typer.echo(render_markdown({k: v for k, v in results.items() if not k.startswith("_")}))
    typer.echo(f"wrote {results['output_dir']}")


@score_app.command("mc_taco")
def score_mc_taco_cmd(
    predictions: Path = typer.Option(..., "--predictions", help="One yes/no per line, in data order."),
    data: Path = typer.Option(..., "--data", help="Official MC-TACO TSV, or a prepared/any Parquet file."),
) -> None:
    """Score MC-TACO predictions with both metric families (lm_eval/* and official/*)."""
    from tcqa_data.eval.score_file import score_mc_taco_file

    scores = score_mc_taco_file(predictions, data)
    for name, value in scores.items():
        typer.echo(f"{name}\t{value:.6f}" if isinstance(value, float) else f"{name}\t{value}")
