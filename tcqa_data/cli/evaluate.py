"""CLI commands of the evaluate stage: `evaluate` and `score mc_taco` (thin; see tcqa_data.eval)."""

from __future__ import annotations

from pathlib import Path

import typer

from tcqa_data.cli import (
    ALLOW_TASK_CODE_HELP,
    Backend,
    Device,
    Dtype,
    MemorizationContext,
    app,
    comma_list,
    old_spelling,
    one_split,
    prefer,
)
from tcqa_data.cli.help_format import PanelCommand

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


@app.command("evaluate", cls=PanelCommand)
def evaluate_cmd(
    prep_dir: Path = typer.Argument(..., help="Folder written by `tcqa-data decontaminate`."),
    model: str = typer.Option(..., "--model", help="Hub id, local folder, path to a .gguf file, or "
                              "smollm2-135m-gguf (the SmolLM2-135M file installed by scripts/install.sh)."),
    gguf_file: str = typer.Option(None, "--gguf-file", rich_help_panel="Model",
                                  help="GGUF file name inside the --model folder."),
    tasks: str = typer.Option(None, "--tasks", help="Comma-separated tasks (default: all in PREP_DIR)."),
    clean_only: bool = typer.Option(False, "--clean-only", rich_help_panel="Which docs",
                                    help="Score only the clean docs."),
    device: Device = typer.Option("auto", "--device", rich_help_panel="Model",
                                  help="Where the model runs (auto: CUDA, else MPS, else CPU)."),
    dtype: Dtype = typer.Option(
        "auto", "--dtype", rich_help_panel="Model",
        help="Weights' dtype (auto: bfloat16 on CUDA GPUs that support it, else float16; float32 off CUDA)."),
    batch_size: str = typer.Option("auto", "--batch-size", rich_help_panel="Model",
                                   help="auto or N (rows per forward pass)."),
    out: Path = typer.Option(None, "--out", help="Output folder (default PREP_DIR/eval/MODEL)."),
    limit_groups: int = typer.Option(None, "--limit-groups", rich_help_panel="Which docs", min=1,
                                     help="Only the first N whole question groups "
                                     "(of the clean ones with --clean-only)."),
    sample_groups: int = typer.Option(None, "--sample-groups", rich_help_panel="Which docs", min=1,
                                      help="N whole groups: every dirty group (at "
                                      "most N/2) plus a seeded sample of clean ones, in the split's order."),
    sample_seed: int = typer.Option(0, "--sample-seed", rich_help_panel="Which docs",
                                    help="Seed of --sample-groups."),
    splits: str = typer.Option(None, "--splits", help="The prepared split to score, one name (default: test, "
                               "else validation)."),
    trust_remote_code: bool = typer.Option(False, "--trust-remote-code", rich_help_panel="Model",
                                           help="Run the model repo's own code."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
    memorization: bool = typer.Option(True, "--memorization/--no-memorization",
                                      help="Per-doc memorization scores (loss, zlib, Min-K%, Min-K%++) of "
                                      "each doc's query and attribution fields (the analysis's model "
                                      "side)."),
    memorization_only: bool = typer.Option(False, "--memorization-only", rich_help_panel="Memorization",
                                           help="Only the memorization scores, no task metric (a quick "
                                           "look at any prepared split)."),
    memorization_context: MemorizationContext = typer.Option(
        "fields", "--memorization-context", rich_help_panel="Memorization",
        help="fields (the default: every text in the prompt, and each field of the query also alone as "
             "FIELD@standalone; the headline score combines their ranks per doc), prompt (each "
             "text's tokens where it occurs in the doc's prompt, read from the task's own forward pass; "
             "texts not found there are scored standalone), standalone (each text alone after the prefix "
             "token, in a separate pass) or both (every TEXT in the prompt and as TEXT@standalone)."),
    reference_model: str = typer.Option(
        None, "--reference-model", rich_help_panel="Memorization",
        help="A reference model (the forms --model takes): memorization.query.reference_loss_ratio, the "
             "evaluated model's mean token log-prob of the query minus the reference's (MIMIR's "
             "reference attack)."),
    reference_frequencies: str = typer.Option(
        "none", "--reference-frequencies", rich_help_panel="Memorization",
        help="none|auto|demo: token frequencies for memorization.query.dc_pdd (DC-PDD); auto = the "
             "prepared data's corpus (its index's text store or corpus files), else the shipped demo "
             "corpus."),
    backend: Backend = typer.Option("native", "--backend", rich_help_panel="lm-eval backend",
                                    help="native (tcqa-data's scorer) or lm-eval (run "
                                "lm-evaluation-harness on the exported full YAMLs, then `analyze`)."),
    lm_eval_model: str = typer.Option("hf", "--lm-eval-model", rich_help_panel="lm-eval backend",
                                      help="With --backend lm-eval: lm-eval's "
                                      "model type (hf, vllm, ...)."),
    model_args: str = typer.Option(None, "--model-args", rich_help_panel="lm-eval backend",
                                   help="With --backend lm-eval: lm-eval's "
                                   "--model_args (default pretrained=MODEL, the --model value)."),
    allow_modified_code: bool = typer.Option(
        False, "--allow-modified-code", rich_help_panel="lm-eval backend",
        help="With --backend lm-eval: run the exported Python and YAMLs even where they differ from "
             "the sha256 that decontaminate recorded (lm-eval runs them unsandboxed)."),
    allow_task_code: bool = typer.Option(False, "--allow-task-code", rich_help_panel="lm-eval backend",
                                         help="With --backend lm-eval: "
                                         + ALLOW_TASK_CODE_HELP),
    old_output: Path = old_spelling("--output"),
    old_split: str = old_spelling("--split"),
) -> None:
    """Score a model on the full, clean and dirty splits (one pass) and print the comparison."""
    device, dtype, backend = device.value, dtype.value, backend.value
    memorization_context = memorization_context.value
    output = prefer(out, old_output, "--output")
    split = one_split(prefer(splits, old_split, "--split"), "evaluate")
    names = comma_list(tasks)
    if backend == "lm-eval":
        from tcqa_data.eval.lm_eval_backend import native_only_given

        given = ["--" + name.replace("_", "-") for name in native_only_given(
            clean_only=clean_only, limit_groups=limit_groups, gguf_file=gguf_file,
            sample_groups=sample_groups, trust_remote_code=trust_remote_code,
            memorization_only=memorization_only, memorization_context=memorization_context,
            reference_model=reference_model, reference_frequencies=reference_frequencies)]
        if given:
            raise typer.BadParameter(f"{', '.join(given)} apply to the native backend only; lm-eval "
                                     "scores every doc of the full split", param_hint="--backend")
        _evaluate_with_lm_eval(prep_dir, model, lm_eval_model, model_args, names, split, output, batch_size,
                               None if device == "auto" else device, quiet, allow_modified_code,
                               allow_task_code)
        return
    if backend != "native":
        raise typer.BadParameter("use native or lm-eval", param_hint="--backend")
    from tcqa_data.workflow import evaluate, render_report

    results = evaluate(prep_dir, model, tasks=names,
                       clean_only=clean_only, device=device, dtype=dtype, batch_size=_batch_size(batch_size),
                       output=output, limit_groups=limit_groups, sample_groups=sample_groups,
                       sample_seed=sample_seed, gguf_file=gguf_file,
                       trust_remote_code=trust_remote_code, split=split, quiet=quiet,
                       memorization=memorization, memorization_only=memorization_only,
                       memorization_context=memorization_context, reference_model=reference_model,
                       reference_frequencies=reference_frequencies)
    typer.echo(render_report(results))
    typer.echo(f"wrote {results['output_dir']}")


def _evaluate_with_lm_eval(prep_dir: Path, model: str, lm_eval_model: str, model_args: str | None,
                           names: list[str] | None, split: str | None, output: Path | None, batch_size: str,
                           device: str | None, quiet: bool, allow_modified_code: bool = False,
                           allow_task_code: bool = False) -> None:
    from tcqa_data.analysis.run import analyze
    from tcqa_data.errors import TcqaError
    from tcqa_data.eval.lm_eval_backend import run_lm_eval

    run = run_lm_eval(prep_dir, model_args or f"pretrained={model}", model=lm_eval_model, tasks=names,
                      split=split, output=output, batch_size=_batch_size(batch_size), device=device,
                      allow_modified_code=allow_modified_code, allow_task_code=allow_task_code)
    typer.echo(f"lm-eval wrote {run['output_dir']} ({', '.join(run['tasks'])})")
    try:
        analysis = analyze(prep_dir, run["output_dir"], tasks=names, split=split)
    except TcqaError as exc:
        typer.echo(f"warning: analysis of the lm-eval run failed: {exc}; after fixing it run "
                   f"`tcqa-data analyze {prep_dir} --results {run['output_dir']}`", err=True)
        return
    if not quiet:
        typer.echo(f"wrote {analysis['output_dir']}")


@score_app.command("mc_taco", cls=PanelCommand)
def score_mc_taco_cmd(
    predictions: Path = typer.Option(..., "--predictions", help="One yes/no per line, in data order."),
    data: Path = typer.Option(..., "--data", help="Official MC-TACO TSV, or a prepared/any Parquet file."),
) -> None:
    """Score MC-TACO predictions with both metric families (lm_eval/* and official/*)."""
    from tcqa_data.eval.score_file import score_mc_taco_file

    scores = score_mc_taco_file(predictions, data)
    for name, value in scores.items():
        typer.echo(f"{name}\t{value:.6f}" if isinstance(value, float) else f"{name}\t{value}")
