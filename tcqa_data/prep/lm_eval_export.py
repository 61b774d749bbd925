"""lm-eval task YAMLs over the prepared Parquet splits, so lm-eval itself can score them.

``PREP_DIR/<task>/<split>/lm_eval/`` holds one YAML per subset (``tcqa_<task>_<split>_clean`` and
``..._full``) and ``tcqa_dataset.py``, whose loaders lm-eval calls through ``custom_dataset:
!function tcqa_dataset.<subset>``. The loaders find the Parquet files relative to their own file,
so the YAMLs hold no absolute paths and the prepared folder can be moved or copied (``datasets``
would resolve relative ``data_files`` against the caller's working directory instead). Run them with
``lm_eval --include_path PREP_DIR/<task>/<split>/lm_eval --tasks tcqa_<task>_<split>_full ...``.

Built-in tasks export their TaskSpec's lm-eval keys. Tasks resolved through lm-eval export the
loaded task's own config (prompts, choices, targets, metrics, filters, generation settings,
``!function`` helpers), minus ``process_docs``: the Parquet files already hold the processed docs,
in lm-eval's order, so lm-eval's doc ids in a full run are the prepared ``doc_id``.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from tcqa_data.errors import ConfigError
from tcqa_data.io_utils import write_parquet_atomic, write_text_atomic
from tcqa_data.prep.taskspec import TaskSpec

if TYPE_CHECKING:
    from tcqa_data.prep.lm_eval_tasks import LmEvalTask

# Keys of a TaskSpec that lm-eval's TaskConfig understands (the tcqa-data extensions are dropped).
LM_EVAL_KEYS = ("output_type", "doc_to_text", "doc_to_target", "doc_to_choice", "target_delimiter",
                "generation_kwargs", "should_decontaminate", "doc_to_decontamination_query",
                "metric_list", "metadata")
SUBSETS = ("clean", "full")
DATASET_MODULE = "tcqa_dataset"
FEWSHOT_SPLIT = "tcqa_fewshot"
FEWSHOT_FILE = "fewshot.parquet"

# lm-eval registers no `contains` metric (its squad_completion is a Python class), so the export
# ships a tiny process_results module implementing the same scoring.
_CONTAINS_MODULE = '''"""Written by tcqa-data: squad_completion's `contains` metric for lm-eval YAML tasks."""

import re


def process_results(doc, results):
    """1.0 if the stripped target occurs (case-insensitively) in the generation, else 0.0."""
    target = str(doc["value"]).strip()
    generation = results[0]
    return {"contains": float(bool(re.search(re.escape(target), generation, re.IGNORECASE)))}
'''

_DATASET_MODULE_TEMPLATE = '''"""Written by tcqa-data: lm-eval `custom_dataset` loaders, prepared Parquet.

Paths are relative to this file, so the prepared folder can be moved or copied.
"""

from pathlib import Path

import datasets

_SPLIT_DIR = Path(__file__).resolve().parent.parent
_SPLIT = {split!r}
_FEWSHOT = {fewshot!r}


def _load(subset):
    out = datasets.load_dataset("parquet", data_files={{_SPLIT: str(_SPLIT_DIR / f"{{subset}}.parquet")}})
    if _FEWSHOT:
        # loaded on its own: its columns need not match the eval split's (no doc_id/group_id)
        fewshot = datasets.load_dataset("parquet", data_files={{"fewshot": str(_SPLIT_DIR / _FEWSHOT)}})
        out[{fewshot_split!r}] = fewshot["fewshot"]
    return out


def clean(**kwargs):
    return _load("clean")


def full(**kwargs):
    return _load("full")
'''


def lm_eval_task_name(task: str, split: str, which: str) -> str:
    return f"tcqa_{task}_{split}_{which}"


@dataclasses.dataclass(frozen=True)
class FunctionRef:
    """A ``!function module.name`` reference in an exported YAML."""

    qual: str


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(FunctionRef, lambda d, ref: d.represent_scalar("!function", ref.qual))


class _Loader(yaml.SafeLoader):
    pass


_Loader.add_constructor("!function", lambda loader, node: FunctionRef(loader.construct_scalar(node)))


def read_exported_yaml(path: str | os.PathLike) -> dict[str, Any]:
    """An exported task YAML as written (``!function`` references as :class:`FunctionRef`)."""
    with open(path, encoding="utf-8") as fh:
        doc = yaml.load(fh, Loader=_Loader)  # noqa: S506 - a SafeLoader with one extra tag
    return doc if isinstance(doc, dict) else {}


def _write_yamls(docs: dict[str, dict[str, Any]], out_dir: Path, header: str) -> list[Path]:
    written = []
    for which, doc in docs.items():
        text = f"# Written by tcqa-data from {header} ({which} subset).\n" + \
            yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True)
        path = out_dir / f"{doc['task']}.yaml"
        write_text_atomic(path, text)
        written.append(path)
    return written


def _write_dataset_module(out_dir: Path, split: str, fewshot: bool) -> None:
    write_text_atomic(out_dir / f"{DATASET_MODULE}.py", _DATASET_MODULE_TEMPLATE.format(
        split=split, fewshot=FEWSHOT_FILE if fewshot else None, fewshot_split=FEWSHOT_SPLIT))


def _dataset_keys(task: str, split: str, role: str, which: str) -> dict[str, Any]:
    return {"task": lm_eval_task_name(task, split, which),
            "custom_dataset": FunctionRef(f"{DATASET_MODULE}.{which}"),
            f"{role}_split": split}


def export_lm_eval(spec: TaskSpec, split: str, role: str, split_dir: str | os.PathLike) -> list[Path]:
    """Write ``lm_eval/<name>.yaml`` for clean.parquet and full.parquet of a built-in task's split.

    ``role`` is ``validation`` or ``test``: which lm-eval split key the data is served under.
    """
    out_dir = Path(split_dir) / "lm_eval"
    raw = spec.to_dict()
    uses_contains = any(m.get("metric") == "contains" for m in spec.metric_list)
    docs = {}
    for which in SUBSETS:
        doc = _dataset_keys(spec.task, split, role, which)
        for key in LM_EVAL_KEYS:
            if key in raw:
                doc[key] = raw[key]
        if uses_contains:
            doc["metric_list"] = [{"metric": "contains", "aggregation": "mean", "higher_is_better": True}]
            doc["process_results"] = FunctionRef("tcqa_contains.process_results")
        docs[which] = doc
    _write_dataset_module(out_dir, split, fewshot=False)
    if uses_contains:
        write_text_atomic(out_dir / "tcqa_contains.py", _CONTAINS_MODULE)
    return _write_yamls(docs, out_dir, f"task spec {spec.task} (split {split})")


# ---- tasks resolved through lm-eval ------------------------------------------------------------
# TaskConfig keys the export replaces (data source, splits, naming) or drops (process_docs: the
# Parquet files hold processed docs; tag: would register the original tag names a second time).
_REPLACED = {"task", "task_alias", "tag", "custom_dataset", "dataset_path", "dataset_name", "dataset_kwargs",
             "training_split", "validation_split", "test_split", "fewshot_split", "process_docs",
             "fewshot_config"}
# FewshotConfig fields inherited from the task config unless set: exported only when they differ.
_FEWSHOT_INHERITED = {"doc_to_text": "doc_to_text", "doc_to_choice": "doc_to_choice",
                      "doc_to_target": "doc_to_target", "gen_prefix": "gen_prefix",
                      "fewshot_delimiter": "fewshot_delimiter", "target_delimiter": "target_delimiter"}


def exportable(task: Any) -> str | None:
    """None if ``task`` (an lm-eval Task) can be exported as YAML, else the reason it cannot."""
    from lm_eval.api.task import ConfigurableTask

    if type(task) is not ConfigurableTask:
        return (f"lm-eval task class {type(task).__name__} is Python code, not a YAML config; run lm-eval "
                "on the original task and select docs by doc_id")
    return None


def export_lm_eval_task(t: LmEvalTask, split_dir: str | os.PathLike) -> list[Path]:
    """Write the clean and full YAMLs of a task resolved through lm-eval (see the module docstring).

    Few-shot examples come from ``fewshot.parquet`` beside the splits: the task's own few-shot
    docs (its fewshot split, else training, else validation, else test, processed as lm-eval does).
    """
    reason = exportable(t.lm_task)
    if reason:
        raise ConfigError(f"task {t.task!r}: cannot export an lm-eval YAML: {reason}")
    split_dir = Path(split_dir)
    out_dir = split_dir / "lm_eval"
    cfg = t.lm_task.config
    copies: dict[str, str] = {}
    body: dict[str, Any] = {}
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if f.name in _REPLACED or value is None:
            continue
        if f.name == "metadata" and isinstance(value, dict):
            # config_source is lm-eval's absolute path of the original YAML: not relocatable
            value = {k: v for k, v in value.items() if k != "config_source"}
        body[f.name] = _serialize(value, f.name, t.task, out_dir, copies)
    fewshot_cfg, fewshot_docs = _fewshot(t.lm_task, t.task, out_dir, copies)
    if fewshot_docs is not None:
        from tcqa_data.prep.lm_eval_tasks import docs_table

        write_parquet_atomic(split_dir / FEWSHOT_FILE, docs_table(fewshot_docs))
    docs = {}
    for which in SUBSETS:
        doc = _dataset_keys(t.task, t.split, t.role, which)
        if fewshot_docs is not None:
            doc["fewshot_split"] = FEWSHOT_SPLIT
        if fewshot_cfg:
            doc["fewshot_config"] = fewshot_cfg
        doc.update(body)
        docs[which] = doc
    _write_dataset_module(out_dir, t.split, fewshot=fewshot_docs is not None)
    return _write_yamls(docs, out_dir, f"lm-eval task {t.task} (split {t.split})")


def _fewshot(task: Any, name: str, out_dir: Path, copies: dict[str, str]) -> tuple[dict[str, Any], Any]:
    """(exported fewshot_config overrides, few-shot docs to write or None)."""
    fs = task.fewshot_cfg
    cfg = task.config
    out: dict[str, Any] = {}
    if fs.sampler != "default":
        out["sampler"] = _serialize(fs.sampler, "fewshot_config.sampler", name, out_dir, copies)
    if fs.fewshot_indices is not None:
        out["fewshot_indices"] = list(fs.fewshot_indices)
    for key, parent in _FEWSHOT_INHERITED.items():
        value = getattr(fs, key)
        if value is not None and value != getattr(cfg, parent):
            out[key] = _serialize(value, f"fewshot_config.{key}", name, out_dir, copies)
    if fs.split is None and fs.samples is not None:
        out["samples"] = _serialize(fs.samples, "fewshot_config.samples", name, out_dir, copies)
        return out, None
    return out, task.fewshot_docs()


def _serialize(value: Any, key: str, task: str, out_dir: Path, copies: dict[str, str]) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _serialize(v, f"{key}.{k}", task, out_dir, copies) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_serialize(v, f"{key}[{i}]", task, out_dir, copies) for i, v in enumerate(value)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _serialize({k: v for k, v in dataclasses.asdict(value).items() if v is not None},
                          key, task, out_dir, copies)
    if callable(value):
        return _function_ref(value, key, task, out_dir, copies)
    raise ConfigError(f"task {task!r}: config value {key} ({type(value).__name__}) cannot be written "
                      "to an lm-eval YAML")


def _function_ref(fn: Any, key: str, task: str, out_dir: Path, copies: dict[str, str]) -> FunctionRef:
    """``!function`` for ``fn``: its module if importable anywhere, else a copy of its file here.

    lm-eval names a helper module it loaded from a YAML's folder by the file's path (not importable);
    its own task helpers are ``lm_eval.tasks.<folder>.<module>``, importable wherever lm-eval is.
    """
    name = getattr(fn, "__name__", None)
    module = getattr(fn, "__module__", None) or ""
    if not name or getattr(fn, "__qualname__", name) != name or name == "<lambda>":
        raise ConfigError(f"task {task!r}: {key} is {fn!r}, not a module-level function; it cannot be "
                          "written to an lm-eval YAML")
    if module and not Path(module).is_absolute():
        try:
            if getattr(importlib.import_module(module), name, None) is fn:
                return FunctionRef(f"{module}.{name}")
        except ImportError:
            pass
    try:
        source = Path(inspect.getsourcefile(fn) or "")
    except TypeError:
        source = Path()
    if not source.is_file():
        raise ConfigError(f"task {task!r}: {key} ({module}.{name}) has no source file to copy")
    key_path = str(source.resolve())
    if key_path not in copies:
        stem = source.stem
        # never the name of a module tcqa-data writes, nor one that reads as installed lm-eval code
        taken = set(copies.values()) | {DATASET_MODULE, "tcqa_contains", "lm_eval"}
        n = 1
        while stem in taken:
            n += 1
            stem = f"{source.stem}_{n}"
        copies[key_path] = stem
        write_text_atomic(out_dir / f"{stem}.py", source.read_text(encoding="utf-8"))
    return FunctionRef(f"{copies[key_path]}.{name}")
