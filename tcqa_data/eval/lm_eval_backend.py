"""`evaluate --backend lm-eval`: lm-evaluation-harness itself scores the exported full YAMLs.

For any prepared task (built in or resolved through lm-eval) the decontaminate stage exported
``<task>/<split>/lm_eval/tcqa_<task>_<split>_full.yaml``. This runs ``lm_eval.simple_evaluate`` on
those with per-doc samples logged, and saves them as lm-eval's own CLI does (lm-eval's
``EvaluationTracker``: ``<output>/<model>/results_<date>.json`` and ``samples_<task>_<date>.jsonl``),
so ``tcqa-data analyze PREP_DIR --results <output>`` reads them like any ``lm_eval --log_samples``
run. Any lm-eval model backend works (``hf``, ``vllm``, ...), with its own ``model_args``.

lm-eval imports the exported Python (``tcqa_dataset.py``, copied ``!function`` helpers) and renders
the YAMLs' templates without a sandbox, so the folder is code. ``prep_manifest.json`` records the
sha256 of each exported code file, and a folder whose code differs (changed, missing or added) is
refused unless the caller accepts it (``--allow-modified-code``).
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tcqa_data.errors import TcqaError
from tcqa_data.io_utils import read_json_file
from tcqa_data.outputs import (
    check_name,
    claimed_output,
    code_changes,
    name_problem,
    relative_inside,
    safe_model_dirname,
    staged_output,
)

# lm-eval's EvaluationTracker names the per-task sample logs so (under a folder per model).
SAMPLES_GLOB = "samples_{task}_*.jsonl"


@dataclass(frozen=True)
class ExportedTask:
    """One prepared split's exported full-split lm-eval task."""

    task: str           # prepared task (PREP_DIR folder)
    split: str
    lm_eval_task: str   # tcqa_<task>_<split>_full
    include_path: Path  # the folder lm-eval indexes
    code_sha256: dict[str, str] | None = None  # as decontaminate exported it; None: not recorded


def exported_full_tasks(prep_dir: str | Path, tasks: list[str] | None = None,
                        split: str | None = None) -> list[ExportedTask]:
    """The exported full-split lm-eval tasks that ``prep_manifest.json`` lists (optionally filtered)."""
    prep_dir = Path(prep_dir)
    path = prep_dir / "prep_manifest.json"
    if not path.is_file():
        raise TcqaError(f"{path} is missing; run `tcqa-data decontaminate` first")
    manifest = read_json_file(path, "prep_manifest.json")
    listed = manifest.get("tasks", {}) if isinstance(manifest, dict) else None
    if not isinstance(listed, dict):
        raise TcqaError(f"{path}: 'tasks' is not a mapping of prepared tasks; re-run "
                        "`tcqa-data decontaminate`")
    from tcqa_data.prep.prepared import check_data_digests

    check_data_digests(prep_dir, manifest)  # lm-eval reads the exported data files: as written
    unknown = sorted(set(tasks or []) - set(listed))
    if unknown:
        raise TcqaError(f"task(s) {unknown} are not prepared in {prep_dir}; prepared: {sorted(listed)}")
    from tcqa_data.prep.lm_eval_export import lm_eval_task_name

    out: list[ExportedTask] = []
    for task in sorted(tasks or listed):
        check_name(task, "task name", str(path))
        for s, export in sorted((listed[task].get("lm_eval_export") or {}).items()):
            if split is not None and s != split:
                continue
            check_name(s, "split name", str(path))
            if not export.get("include_path"):
                raise TcqaError(f"task {task!r} ({s}) has no exported lm-eval YAML: "
                                f"{export.get('not_exported')}")
            # a manifest is a file anyone can edit: the folder lm-eval imports from must be PREP_DIR's own
            include = relative_inside(prep_dir, export["include_path"],
                                      f"{path}: include_path of task {task!r} ({s})")
            full = (export.get("tasks") or {}).get("full")
            if full != lm_eval_task_name(task, s, "full"):  # lm-eval names its samples file after it
                raise TcqaError(f"{path}: task {task!r} ({s}) lists the exported task {full!r}, not "
                                f"{lm_eval_task_name(task, s, 'full')!r}; re-run `tcqa-data decontaminate`")
            out.append(ExportedTask(task, s, full, include, export.get("code_sha256")))
    if not out:
        raise TcqaError(f"{prep_dir} lists no exported lm-eval tasks"
                        + (f" for split {split!r}" if split else "") + "; re-run `tcqa-data decontaminate`")
    return out


def check_exported_code(exported: list[ExportedTask]) -> None:
    """Refuse exported folders whose code files differ from the sha256 prep_manifest.json records."""
    for e in exported:
        if e.code_sha256 is None:
            raise TcqaError(f"prep_manifest.json records no checksums of the code exported for task "
                            f"{e.task!r} ({e.split}) in {e.include_path} (prepared by an older tcqa-data); "
                            "re-run `tcqa-data decontaminate`, or pass --allow-modified-code to run it as "
                            "it is")
        changes = code_changes(e.include_path, e.code_sha256)
        if changes:
            more = f" (and {len(changes) - 1} more)" if len(changes) > 1 else ""
            raise TcqaError(f"{e.include_path}: {changes[0]}{more} since `tcqa-data decontaminate` "
                            "exported it (prep_manifest.json records its sha256), and lm-eval would run it "
                            "unsandboxed; re-run decontaminate, or pass --allow-modified-code if you "
                            "changed it on purpose")


# !function modules an export may name without --allow-task-code: the ones decontaminate writes
# itself, and lm-eval's installed task helpers
_OWN_MODULES = ("tcqa_dataset.", "tcqa_contains.", "lm_eval.")


def check_exported_templates(exported: list[ExportedTask], *, allow_task_code: bool) -> dict[str, str]:
    """Each exported YAML's templates checked by the sandbox (lm-eval renders them in it too, see
    ``run_lm_eval``), its filter and metric patterns compiled (lm-eval runs them with a timeout,
    ``prep.task_regex``), and its ``!function`` helpers copied from a task's own Python refused unless
    ``allow_task_code``: one line naming the file and the field. Returns pattern -> "file: field"."""
    from tcqa_data.prep.lm_eval_export import read_exported_yaml
    from tcqa_data.prep.task_code import ALLOW_HINT, FEWSHOT_TEMPLATE_FIELDS, TEMPLATE_FIELDS
    from tcqa_data.prep.task_regex import check_task_regexes
    from tcqa_data.prep.templates import check_source

    regex_sources: dict[str, str] = {}
    for e in exported:
        for path in sorted(e.include_path.glob("*.yaml")):
            doc = read_exported_yaml(path)
            for pattern, where in check_task_regexes(doc, [], str(path)).items():
                regex_sources.setdefault(pattern, where)
            fewshot = doc.get("fewshot_config") if isinstance(doc.get("fewshot_config"), dict) else {}
            values = [(f, doc.get(f)) for f in TEMPLATE_FIELDS] + \
                [(f"fewshot_config.{f}", fewshot.get(f)) for f in FEWSHOT_TEMPLATE_FIELDS]
            for field, value in values:
                if isinstance(value, str):  # (lists and mappings are literal: lm-eval renders them not)
                    check_source(value, where=f"{path}: template {field}")
            for key, ref in _function_refs(doc, ""):
                if not allow_task_code and not ref.qual.startswith(_OWN_MODULES):
                    raise TcqaError(f"{path}: {key} is !function {ref.qual}, code copied from a task "
                                    f"outside the installed lm-eval package; {ALLOW_HINT}")
    return regex_sources


def native_only_given(*, clean_only: bool, limit_groups: int | None, gguf_file: str | None,
                      sample_groups: int | None, trust_remote_code: bool, memorization_only: bool,
                      memorization_context: str, reference_model: str | None = None,
                      reference_frequencies: str = "none") -> list[str]:
    """The native backend's options given (their parameter names) that lm-eval cannot honour: it
    scores every doc of the full split, with its own model loading and no memorization scores."""
    given = {"clean_only": clean_only, "limit_groups": limit_groups, "gguf_file": gguf_file,
             "sample_groups": sample_groups, "trust_remote_code": trust_remote_code,
             "memorization_only": memorization_only, "memorization_context": memorization_context != "fields",
             "reference_model": reference_model, "reference_frequencies": reference_frequencies != "none"}
    return [name for name, value in given.items() if value]


def _function_refs(value: Any, key: str) -> Iterator[tuple[str, Any]]:
    """(field, FunctionRef) for each ``!function`` anywhere in an exported YAML's value."""
    from tcqa_data.prep.lm_eval_export import FunctionRef
    from tcqa_data.prep.task_code import nested_values

    return nested_values(value, FunctionRef, key)


@contextmanager
def _private_bytecode() -> Iterator[None]:
    """Compiled bytecode goes to a private folder while lm-eval runs: Python would otherwise load a
    ``__pycache__/*.pyc`` beside a checked source file, whose code the checksums do not cover."""
    before = sys.pycache_prefix
    with tempfile.TemporaryDirectory(prefix="tcqa-pycache-") as tmp:
        sys.pycache_prefix = tmp
        try:
            yield
        finally:
            sys.pycache_prefix = before


def _model_folder(lm_eval_name: str | None) -> str:
    """lm-eval's folder name for the model when it is one safe folder name, else ours: lm-eval keeps
    ``..`` and leading dots (``pretrained=..`` would write beside the output folder, not in it)."""
    name = str(lm_eval_name)
    return name if name_problem(name) is None else safe_model_dirname(name)


def run_lm_eval(prep_dir: str | Path, model_args: str, *, model: str = "hf", tasks: list[str] | None = None,
                split: str | None = None, output: str | Path | None = None, batch_size: int | str = "auto",
                device: str | None = None, limit: int | None = None, bootstrap_iters: int = 0,
                allow_modified_code: bool = False, allow_task_code: bool = False) -> dict[str, Any]:
    """Run lm-eval on the exported full YAMLs; return ``{"output_dir", "tasks", "results"}``.

    ``model``/``model_args`` are lm-eval's (``--model hf --model_args pretrained=...``). ``limit``
    is lm-eval's ``--limit`` (first N docs; the analysis then refuses partial question groups).
    ``bootstrap_iters`` is lm-eval's stderr bootstrap; 0 skips it (lm-eval's default of 100000 takes
    minutes for f1), since ``tcqa-data analyze`` gives every metric its interval.
    ``allow_modified_code`` runs exported code that differs from what decontaminate wrote;
    ``allow_task_code`` runs ``!function`` helpers copied from a task's own Python. lm-eval renders
    every template in tcqa-data's sandbox, with its budgets, and every filter and metric pattern with
    a timeout, while it runs here.
    """
    from tcqa_data.prep.lm_eval_tasks import import_lm_eval

    import_lm_eval("--backend lm-eval")
    import lm_eval
    from lm_eval.loggers import EvaluationTracker
    from lm_eval.tasks import TaskManager

    exported = exported_full_tasks(prep_dir, tasks, split)
    if not allow_modified_code:
        check_exported_code(exported)
    regex_sources = check_exported_templates(exported, allow_task_code=allow_task_code)
    out = Path(output) if output is not None else Path(prep_dir) / "eval" / "lm_eval"
    command = "evaluate --backend lm-eval"
    # the folder's lock from before lm-eval runs to the commit; lm-eval's files are written into a
    # staging folder committed whole (earlier runs' files are kept, as lm-eval keeps them)
    # the default folder (PREP_DIR/eval/lm_eval) is ours to name: a link there is refused
    with claimed_output(out, command, follow_link=output is not None) as folder:
        tracker = EvaluationTracker(output_path=str(folder))
        include = sorted({str(e.include_path) for e in exported})
        manager = TaskManager(include_path=include, include_defaults=False)
        names = [e.lm_eval_task for e in exported]
        from tcqa_data.prep.templates import sandboxed_lm_eval

        with _private_bytecode(), sandboxed_lm_eval(regex_sources):
            results = lm_eval.simple_evaluate(model=model, model_args=model_args, tasks=names,
                                              task_manager=manager, batch_size=batch_size, device=device,
                                              limit=limit, log_samples=True, bootstrap_iters=bootstrap_iters,
                                              evaluation_tracker=tracker)
        general = tracker.general_config_tracker
        general.model_name_sanitized = _model_folder(general.model_name_sanitized)
        if results is None:  # a non-zero rank of a distributed run
            return {"output_dir": str(out), "tasks": names, "results": {}}
        samples = results.pop("samples")
        with staged_output(folder, command, locked=True) as stage:
            tracker.output_path = str(stage)
            tracker.save_results_aggregated(results=results, samples=samples)
            for name in names:
                tracker.save_results_samples(task_name=name, samples=samples[name])
    return {"output_dir": str(out), "tasks": names, "results": results.get("results", {})}
