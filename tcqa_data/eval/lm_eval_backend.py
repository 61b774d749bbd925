"""`evaluate --backend lm-eval`: lm-evaluation-harness itself scores the exported full YAMLs.

For any prepared task (built in or resolved through lm-eval) the decontaminate stage exported
``<task>/<split>/lm_eval/tcqa_<task>_<split>_full.yaml``. This runs ``lm_eval.simple_evaluate`` on
those with per-doc samples logged, and saves them as lm-eval's own CLI does (lm-eval's
``EvaluationTracker``: ``<output>/<model>/results_<date>.json`` and ``samples_<task>_<date>.jsonl``),
so ``tcqa-data analyze PREP_DIR --results <output>`` reads them like any ``lm_eval --log_samples``
run. Any lm-eval model backend works (``hf``, ``vllm``, ...), with its own ``model_args``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tcqa_data.errors import TcqaError
from tcqa_data.io_utils import read_json

# lm-eval's EvaluationTracker names the per-task sample logs so (under a folder per model).
SAMPLES_GLOB = "samples_{task}_*.jsonl"


@dataclass(frozen=True)
class ExportedTask:
    """One prepared split's exported full-split lm-eval task."""

    task: str           # prepared task (PREP_DIR folder)
    split: str
    lm_eval_task: str   # tcqa_<task>_<split>_full
    include_path: Path  # the folder lm-eval indexes


def exported_full_tasks(prep_dir: str | Path, tasks: list[str] | None = None,
                        split: str | None = None) -> list[ExportedTask]:
    """The exported full-split lm-eval tasks that ``prep_manifest.json`` lists (optionally filtered)."""
    prep_dir = Path(prep_dir)
    path = prep_dir / "prep_manifest.json"
    if not path.is_file():
        raise TcqaError(f"{path} is missing; run `tcqa-data decontaminate` first")
    listed = read_json(path).get("tasks", {})
    unknown = sorted(set(tasks or []) - set(listed))
    if unknown:
        raise TcqaError(f"task(s) {unknown} are not prepared in {prep_dir}; prepared: {sorted(listed)}")
    out: list[ExportedTask] = []
    for task in sorted(tasks or listed):
        for s, export in sorted((listed[task].get("lm_eval_export") or {}).items()):
            if split is not None and s != split:
                continue
            if not export.get("include_path"):
                raise TcqaError(f"task {task!r} ({s}) has no exported lm-eval YAML: "
                                f"{export.get('not_exported')}")
            out.append(ExportedTask(task, s, export["tasks"]["full"], prep_dir / export["include_path"]))
    if not out:
        raise TcqaError(f"{prep_dir} lists no exported lm-eval tasks"
                        + (f" for split {split!r}" if split else "") + "; re-run `tcqa-data decontaminate`")
    return out


def run_lm_eval(prep_dir: str | Path, model_args: str, *, model: str = "hf", tasks: list[str] | None = None,
                split: str | None = None, output: str | Path | None = None, batch_size: int | str = "auto",
                device: str | None = None, limit: int | None = None, bootstrap_iters: int = 0
                ) -> dict[str, Any]:
    """Run lm-eval on the exported full YAMLs; return ``{"output_dir", "tasks", "results"}``.

    ``model``/``model_args`` are lm-eval's (``--model hf --model_args pretrained=...``). ``limit``
    is lm-eval's ``--limit`` (first N docs; the analysis then refuses partial question groups).
    ``bootstrap_iters`` is lm-eval's stderr bootstrap; 0 skips it (lm-eval's default of 100000 takes
    minutes for f1), since ``tcqa-data analyze`` gives every metric its interval.
    """
    from tcqa_data.prep.lm_eval_tasks import import_lm_eval

    import_lm_eval("--backend lm-eval")
    import lm_eval
    from lm_eval.loggers import EvaluationTracker
    from lm_eval.tasks import TaskManager

    exported = exported_full_tasks(prep_dir, tasks, split)
    out = Path(output) if output is not None else Path(prep_dir) / "eval" / "lm_eval"
    tracker = EvaluationTracker(output_path=str(out))
    include = sorted({str(e.include_path) for e in exported})
    manager = TaskManager(include_path=include, include_defaults=False)
    names = [e.lm_eval_task for e in exported]
    results = lm_eval.simple_evaluate(model=model, model_args=model_args, tasks=names, task_manager=manager,
                                      batch_size=batch_size, device=device, limit=limit, log_samples=True,
                                      bootstrap_iters=bootstrap_iters, evaluation_tracker=tracker)
    if results is None:  # a non-zero rank of a distributed run
        return {"output_dir": str(out), "tasks": names, "results": {}}
    samples = results.pop("samples")
    tracker.save_results_aggregated(results=results, samples=samples)
    for name in names:
        tracker.save_results_samples(task_name=name, samples=samples[name])
    return {"output_dir": str(out), "tasks": names, "results": results.get("results", {})}
