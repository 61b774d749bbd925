"""Tasks resolved through lm-eval, read from local files: ``--data-files TASK:SPLIT=PATH``.

The task keeps its own config (``process_docs``, templates, choices, metrics, split names); only
where its data comes from changes. lm-eval's ``dataset_path`` / ``dataset_name`` /
``dataset_kwargs`` (and a ``custom_dataset`` loader) become a local ``datasets`` builder over the
given files (``json`` for .jsonl/.json, ``parquet``, ``csv`` for .csv and, tab-separated with a
header row, .tsv), one file per split under the split names the task's YAML uses. Splits the task
declares that no file gives are unset, so lm-eval evaluates the split that was given (test, else
validation) and takes few-shot docs from what is there.

Before lm-eval builds the task, each file is loaded once with that builder and checked: every field
the task's templates read (``doc_to_text``, ``doc_to_target``, ``doc_to_choice``, the
decontamination query) must be a column with no missing value. A task with ``process_docs`` reads
fields only its code knows; a missing field there surfaces while lm-eval builds the task, and
:meth:`LocalTaskData.explain` traces it to the file that lacks it.

Where the files go in: lm-eval 0.4.13's ``TaskManager`` builds every task (by name, as a group
member, from a tag) from the config its factory's ``_load_full_config`` returns, so that is where
the local files replace the dataset, for the tasks named in ``--data-files`` only.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jinja2.meta

from tcqa_data.errors import ConfigError, InputError
from tcqa_data.prep.benchmarks import check_data_file
from tcqa_data.prep.templates import ENV as TEMPLATE_ENV

# file suffix -> (datasets builder, its extra keyword arguments)
BUILDERS: dict[str, tuple[str, dict[str, Any]]] = {
    ".jsonl": ("json", {}), ".json": ("json", {}), ".parquet": ("parquet", {}),
    ".csv": ("csv", {}), ".tsv": ("csv", {"sep": "\t"}),
}
SPLIT_KEYS = ("test_split", "validation_split", "training_split", "fewshot_split")
# config keys whose templates (or bare field names) read doc fields, as lm-eval renders them
_TEMPLATE_KEYS = ("doc_to_text", "doc_to_target", "doc_to_choice")
_UNDEFINED = re.compile(r"'(\w+)' is undefined|has no attribute '(\w+)'")


class LocalTaskData:
    """The ``--data-files`` of tasks resolved through lm-eval, applied as lm-eval builds them."""

    def __init__(self, files: Mapping[str, Mapping[str, str | os.PathLike]]) -> None:
        self.files = {task: {split: Path(p) for split, p in per.items()} for task, per in files.items()}
        self.columns: dict[str, dict[str, list[str]]] = {}   # task -> split -> the file's columns
        self.applied: set[str] = set()

    def install(self, manager: Any, names: Sequence[str]) -> None:
        """Have ``manager`` (lm-eval's TaskManager) build the named tasks over the local files. Names
        that are no lm-eval task, or not among ``names`` (tasks, groups, tags) and their members, are
        refused here, before any task is built (which would read the others' data)."""
        index = manager.task_index
        for task in sorted(self.files):
            if task not in index:
                raise ConfigError(f"--data-files names task {task!r}, which is neither a built-in task nor "
                                  "an lm-eval task")
        self.check_used(_members(index, names))
        factory = getattr(manager, "_factory", None)
        load_full_config = getattr(factory, "_load_full_config", None)
        if load_full_config is None:  # another lm-eval than the 0.4.13+ this hook is written for
            raise ConfigError("--data-files for tasks resolved through lm-eval needs lm-eval's TaskManager "
                              "of 0.4.13 or later (pip install 'tcqa-data[lm-eval]')")

        def local_config(entry: Any, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
            cfg = load_full_config(entry, overrides)
            name = cfg.get("task")
            if isinstance(name, str) and name in self.files and "group" not in cfg:
                cfg = self.config(name, cfg)
            return cfg

        factory._load_full_config = local_config

    def config(self, task: str, cfg: dict[str, Any]) -> dict[str, Any]:
        """``cfg`` (a task's full config) reading the local files instead of its dataset."""
        where = cfg.get("metadata", {}).get("config_source") or "lm-eval's task index"
        if "class" in cfg:
            raise ConfigError(f"lm-eval task {task!r} ({where}) is a Python class that loads its own data; "
                              "--data-files applies to tasks configured in YAML (write one over your files "
                              "with dataset_path: json and data_files, under --lm-eval-include)")
        files = self.files[task]
        declared = {key: cfg[key] for key in SPLIT_KEYS if cfg.get(key)}
        for split in files:
            if split not in declared.values():
                raise ConfigError(f"lm-eval task {task!r} has no split {split!r} (--data-files "
                                  f"{task}:{split}=...); its splits are {_split_list(declared)}")
        evaluated = [declared[k] for k in ("test_split", "validation_split") if k in declared]
        if not any(s in files for s in evaluated):
            raise ConfigError(f"--data-files gives task {task!r} the split(s) {sorted(files)}, not one it is "
                              f"evaluated on ({' or '.join(evaluated) or 'none declared'}); give "
                              f"--data-files {task}:{evaluated[0] if evaluated else 'test'}=PATH")
        for path in files.values():
            check_data_file(path, tuple(BUILDERS))
        kinds = {".jsonl" if p.suffix.lower() == ".json" else p.suffix.lower() for p in files.values()}
        if len(kinds) > 1:
            raise ConfigError(f"--data-files of task {task!r} mix file types ({sorted(kinds)}): give every "
                              "split in one format")
        builder, extra = BUILDERS[kinds.pop()]
        reads = {} if cfg.get("process_docs") else template_reads(cfg)
        self.columns[task] = {split: _check_file(task, path, builder, extra, reads)
                              for split, path in files.items()}
        out = dict(cfg)
        for key in SPLIT_KEYS:
            if key in declared and declared[key] not in files:
                out[key] = None
        fewshot = out.get("fewshot_config")
        if isinstance(fewshot, dict) and fewshot.get("split") and fewshot["split"] not in files:
            out["fewshot_config"] = {k: v for k, v in fewshot.items() if k != "split"}
        out.update(dataset_path=builder, dataset_name=None, custom_dataset=None,
                   dataset_kwargs={"data_files": {s: str(p.resolve()) for s, p in files.items()}, **extra})
        self.applied.add(task)
        return out

    def explain(self, task: str, exc: BaseException) -> InputError | None:
        """The one-line error for a failure of ``task``'s code or templates on a field one of its
        files lacks (a KeyError in ``process_docs``, an undefined template variable), else None."""
        field = _missing_field(exc)
        if field is None or task not in self.columns:
            return None
        for split, columns in self.columns[task].items():
            if field not in columns:
                return InputError(f"lm-eval task {task!r} reads field {field!r}, which this file lacks; its "
                                  f"fields are {columns}", path=str(self.files[task][split]), field=field)
        return None

    def check_used(self, resolved: set[str]) -> None:
        """Refuse data files for a task that ``--tasks`` did not resolve to."""
        unused = sorted(set(self.files) - resolved)
        if unused:
            raise ConfigError(f"--data-files names task(s) {unused} that are not among the tasks resolved "
                              f"from --tasks: {sorted(resolved)}")


def template_reads(cfg: Mapping[str, Any]) -> dict[str, str]:
    """Doc field -> the config key that reads it: the templates' variables, or a bare field name
    (lm-eval reads ``doc_to_target: label`` as the field ``label``)."""
    keys = list(_TEMPLATE_KEYS)
    if cfg.get("should_decontaminate"):
        keys.append("doc_to_decontamination_query")
    out: dict[str, str] = {}
    for key in keys:
        value = cfg.get(key)
        if not isinstance(value, str):
            continue
        if value.isidentifier():
            names = [value]
        else:
            try:
                found = jinja2.meta.find_undeclared_variables(TEMPLATE_ENV.parse(value))
                names = sorted(found, key=value.find)
            except jinja2.TemplateSyntaxError:
                continue  # lm-eval reports it when it renders the template
        for name in names:
            if name not in TEMPLATE_ENV.globals:
                out.setdefault(name, key)
    return out


def _check_file(task: str, path: Path, builder: str, extra: dict[str, Any], reads: Mapping[str, str]
                ) -> list[str]:
    """The file's columns, loaded as lm-eval will load it; every field ``reads`` names present and
    never null."""
    import datasets

    bars = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()  # a check, not the load lm-eval reports
    try:
        ds = datasets.load_dataset(builder, data_files={"data": str(path)}, split="data", **extra)
        table = ds.data.table
    except Exception as exc:  # noqa: BLE001 - datasets wraps a bad row in its own errors
        cause = exc.__cause__ or exc
        text = str(cause).strip().splitlines()
        raise InputError(f"cannot read as {builder}: {type(cause).__name__}: {text[0] if text else ''}",
                         path=str(path)) from exc
    finally:
        if bars:
            datasets.enable_progress_bars()
    columns = list(table.column_names)
    for field, key in reads.items():
        if field not in columns:
            raise InputError(f"lm-eval task {task!r} reads field {field!r} ({key}), which this file lacks; "
                             f"its fields are {columns}", path=str(path), field=field)
        col = table.column(field)
        if col.null_count:
            row = col.is_null().to_pylist().index(True)
            raise InputError(f"lm-eval task {task!r} reads field {field!r} ({key}), missing in record "
                             f"{row + 1}", path=str(path), line=row + 1, field=field)
    return columns


def _members(index: Mapping[str, Any], names: Sequence[str]) -> set[str]:
    """``names`` and, for groups and tags, every task or group they hold, as lm-eval's index says."""
    out: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        entry = index.get(name)
        if name in out or entry is None:
            continue
        out.add(name)
        if getattr(entry.kind, "name", None) == "TAG":  # a tag entry's `tags` are its tasks
            todo.extend(entry.tags or ())
        members = (entry.cfg or {}).get("task") if "group" in (entry.cfg or {}) else None
        for item in members if isinstance(members, list) else ():
            child = item if isinstance(item, str) else item.get("task") or item.get("group")
            if isinstance(child, str):
                todo.append(child)
    return out


def _missing_field(exc: BaseException) -> str | None:
    """The field name a KeyError or Jinja undefined-variable error (or one it was raised from) is about."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, KeyError) and exc.args and isinstance(exc.args[0], str):
            return exc.args[0]
        if isinstance(exc, jinja2.UndefinedError):
            m = _UNDEFINED.search(str(exc))
            if m:
                return m.group(1) or m.group(2)
        exc = exc.__cause__ or exc.__context__
    return None


def _split_list(declared: Mapping[str, str]) -> list[str]:
    return list(dict.fromkeys(declared.values()))
