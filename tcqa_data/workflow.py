"""Evaluate, then analyze the same model pass: the orchestration above both stages.

``tcqa-data evaluate`` runs this. The eval stage (``tcqa_data.eval.runner``) scores the model once and
computes each task's clean / full / dirty table; the analysis stage (``tcqa_data.analysis``) reuses those
tables, with their per-unit statistics and bootstrap resamples, for its sweeps, Llama 2 subsets and
input vs input+label table; then one report holds the evaluation and the analysis summary. The eval
stage imports nothing of the analysis (the analysis takes its metrics and tables from ``eval``): only
this module knows that one follows the other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tcqa_data.analysis.report import summary_blocks
from tcqa_data.analysis.run import analyze_after_evaluate
from tcqa_data.deprecation import moved_to_top
from tcqa_data.eval import metrics as M
from tcqa_data.eval.models import LoadedModel
from tcqa_data.eval.results import report_blocks
from tcqa_data.eval.runner import Evaluation
from tcqa_data.eval.runner import evaluate as evaluate_stage
from tcqa_data.report_render import Block, to_text


@moved_to_top("evaluate")
def evaluate(prep_dir: str | Path, model: str | LoadedModel, tasks: list[str] | None = None,
             clean_only: bool = False, device: str = "auto", dtype: str = "auto",
             batch_size: int | str = "auto", output: str | Path | None = None,
             limit_groups: int | None = None, *, gguf_file: str | None = None,
             trust_remote_code: bool = False, split: str | None = None, bootstrap: int = M.BOOTSTRAP_SAMPLES,
             seed: int = M.BOOTSTRAP_SEED, quiet: bool = False, write: bool = True,
             packing: bool | None = None, sample_groups: int | None = None,
             sample_seed: int = 0, memorization: bool = True,
             memorization_only: bool = False, memorization_context: str = "fields",
             reference_model: str | None = None, reference_frequencies: str = "none") -> dict[str, Any]:
    """Score ``model`` on the prepared tasks in ``prep_dir`` (``tcqa_data.eval.runner.evaluate``'s
    parameters), then analyze that pass into ``<output>/analysis/``.

    Writes results.json, samples.jsonl, report.md and report.html to ``output`` (default
    ``PREP_DIR/eval/<model>``): results.json keeps the analysis summary under ``analysis``, and both
    reports end with it. No analysis with ``clean_only`` (the dirty docs have no outputs) or without
    ``write``, or with ``memorization_only``. Returns the results.json object with the per-doc samples under
    ``"_samples"``.
    """
    def analysis(run: Evaluation, stage: Path, folder: Path) -> list[Block]:
        if memorization_only:
            why = "--memorization-only: no task metric to analyze"
            run.results["analysis"] = {"skipped": {t.data.task: why for t in run.tasks}}
        elif not clean_only:
            run.results["analysis"] = analyze_after_evaluate(run.prep_dir, run.tasks, stage / "analysis",
                                                             bootstrap, seed, results_dir=folder)
        return report_extra(run.results)

    return evaluate_stage(prep_dir, model, tasks, clean_only, device, dtype, batch_size, output, limit_groups,
                          gguf_file=gguf_file, trust_remote_code=trust_remote_code, split=split,
                          bootstrap=bootstrap, seed=seed, quiet=quiet, write=write, packing=packing,
                          sample_groups=sample_groups, sample_seed=sample_seed, memorization=memorization,
                          memorization_only=memorization_only, memorization_context=memorization_context,
                          reference_model=reference_model, reference_frequencies=reference_frequencies,
                          extend=analysis)


def report_extra(results: dict[str, Any]) -> list[Block]:
    """The blocks evaluate's reports carry after the evaluation's own: the analysis summary, if any."""
    return summary_blocks(results["analysis"]) if results.get("analysis") else []


def render_report(results: dict[str, Any]) -> str:
    """The combined report as plain text for a terminal (report.md's blocks, without Markdown's
    markup or HTML tags), from the results ``evaluate`` returned."""
    clean = {k: v for k, v in results.items() if not k.startswith("_")}
    return to_text([*report_blocks(clean), *report_extra(clean)])
