"""Benchmarks resolved through lm-evaluation-harness's own task machinery.

A ``--tasks`` name that is not a built-in task is looked up with lm-eval's ``TaskManager``
(lm-eval is the optional extra ``tcqa-data[lm-eval]``, imported only here). Groups and tags expand
to their member tasks. The docs are lm-eval's own ``Task.eval_docs`` (the test split, else the
validation split, with ``process_docs`` and ``!function`` helpers applied by lm-eval), so doc ids
are the positions lm-eval gives them.

The decontamination query follows lm-eval's definition: the configured
``doc_to_decontamination_query`` (a doc field, a callable, or a Jinja template) when
``should_decontaminate`` is set, else ``doc_to_text``. A template is rendered as lm-eval's
``utils.apply_template`` renders it, but in tcqa-data's sandbox (:mod:`tcqa_data.prep.templates`),
and used as text. lm-eval renders its own templates through the same sandbox while tcqa-data loads
a task (:func:`~tcqa_data.prep.templates.sandboxed_lm_eval`), and every template field of a
loaded task (prompt, target, choices, description, query, ...) is rendered on every eval doc, so
what is exported has passed the sandbox; Python that lm-eval imports (``!function`` helpers,
``class:`` tasks) from a file outside the installed lm-eval package is refused unless
``allow_task_code``, before lm-eval reads a task (both: :mod:`tcqa_data.prep.task_code`).
lm-eval 0.4.13's ``Task.doc_to_decontamination_query`` instead passes the rendered text through
``ast.literal_eval``, which raises ``SyntaxError`` on ordinary text (MC-TACO's first test query
"How long was his mother ill? Durer's father ..."), so that method is not called for config-defined
tasks.
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from tcqa_data.errors import ConfigError, TcqaError
from tcqa_data.outputs import check_name
from tcqa_data.prep.task_code import check_include_folders, check_requested_code, check_task_templates
from tcqa_data.prep.templates import ENV as TEMPLATE_ENV
from tcqa_data.prep.templates import TemplateRefused, render, sandboxed_lm_eval

INSTALL_HINT = "pip install 'tcqa-data[lm-eval]'"


def import_lm_eval(why: str) -> Any:
    """lm-eval's ``tasks`` module, or a ConfigError saying which extra to install."""
    try:
        import lm_eval.tasks
    except ImportError as exc:
        raise ConfigError(f"{why} needs lm-evaluation-harness, which is not installed: "
                          f"{INSTALL_HINT}") from exc
    return lm_eval.tasks


@dataclass
class LmEvalTask:
    """One lm-eval task's eval split, its docs and their decontamination queries.

    Besides its own fields it offers the TaskSpec attributes the prep stage's reports read
    (``task``, ``group_by``, ``report_by``, ``doc_to_decontamination_query``, ``doc_to_text``,
    ``query_fields()``), so built-in and lm-eval tasks share one split-processing path.
    """

    task: str                     # lm-eval task name; also the PREP_DIR folder name
    lm_task: Any                  # the lm_eval.api.task.Task that produced the docs
    split: str                    # dataset split name lm-eval evaluates
    role: str                     # "test" or "validation": the lm-eval key that split sits under
    table: pa.Table               # processed eval docs, lm-eval's order
    source: str                   # where the docs came from, for reports
    queries: list[str]
    query_description: str        # template / field / function the queries come from
    fields: list[str]             # doc fields matches are attributed to
    group_by: tuple[str, ...] = ()
    requested_as: str = ""        # the --tasks name (a group or tag when expanded)
    report_by: tuple[str, ...] = field(default=())
    data_files: dict[str, str] = field(default_factory=dict)  # split -> the local file read (--data-files)

    @property
    def doc_to_decontamination_query(self) -> str:
        return self.query_description

    @property
    def doc_to_text(self) -> str:
        return _describe(getattr(self.lm_task.config, "doc_to_text", None))

    def query_fields(self) -> list[str]:
        return list(self.fields)

    def splits(self) -> dict[str, str]:
        return {self.role: self.split}


# ---- resolving names -------------------------------------------------------------------------
def resolve_lm_eval_tasks(
    names: Sequence[str],
    *,
    include_path: Sequence[str | os.PathLike] | str | os.PathLike | None = None,
    group_by: Mapping[str, Sequence[str]] | None = None,
    include_defaults: bool = True,
    allow_task_code: bool = False,
    data_files: Mapping[str, Mapping[str, str | os.PathLike]] | None = None,
) -> list[LmEvalTask]:
    """Load ``names`` (tasks, groups or tags) through lm-eval and compute every doc's query.

    ``include_path``: folders of the user's own lm-eval task YAMLs (lm-eval's ``include_path``).
    ``group_by``: task (or requested group) name -> doc fields whose equal values form one question
    group; a task's ``metadata: {group_by: [...]}`` in its YAML says the same. Without either,
    every doc is its own group. ``include_defaults=False`` skips indexing lm-eval's ~200 shipped
    task folders (faster when only include_path tasks are used). ``allow_task_code``: run Python
    that task YAMLs outside the installed lm-eval name (refused by default). ``data_files``: task ->
    split -> local file the task reads instead of its dataset (:mod:`tcqa_data.prep.lm_eval_local`).
    """
    tasks_mod = import_lm_eval(f"task(s) {list(names)} (not built-in tasks)")
    if include_path is None:
        paths: list[str] = []
    elif isinstance(include_path, (str, os.PathLike)):
        paths = [str(include_path)]
    else:
        paths = [str(p) for p in include_path]
    for p in paths:
        if not Path(p).is_dir():
            raise ConfigError(f"--lm-eval-include {p}: not a folder of lm-eval task YAMLs")
    check_include_folders(paths)  # before lm-eval indexes the folders: a FIFO there would block it
    group_by = {k: tuple(v) for k, v in (group_by or {}).items()}
    out: list[LmEvalTask] = []
    seen: set[str] = set()
    with _quiet_lm_eval(), sandboxed_lm_eval():
        manager = tasks_mod.TaskManager(include_path=paths or None, include_defaults=include_defaults)
        local = None
        if data_files:
            from tcqa_data.prep.lm_eval_local import LocalTaskData

            local = LocalTaskData(data_files)
            local.install(manager, names)
        for name in names:
            for task_name, task in _load(manager, name, paths, allow_task_code, local).items():
                if task_name in seen:
                    continue
                # the name becomes a PREP_DIR folder: checked before any doc is read or written
                check_name(task_name, "lm-eval task name", _origin(manager, task_name))
                seen.add(task_name)
                fields = group_by.get(task_name, group_by.get(name))
                out.append(_prepare(task_name, task, name, fields, local))
    if local is not None:
        local.check_used(seen)
    unused = sorted(set(group_by) - seen - set(names))
    if unused:
        raise ConfigError(f"--group-by names task(s) {unused} that are not among the resolved tasks "
                          f"{sorted(seen)}")
    return out


@contextmanager
def _quiet_lm_eval() -> Iterator[None]:
    """lm-eval warns about every config default it fills in; only its errors concern our users."""
    logger = logging.getLogger("lm_eval")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _load(manager: Any, name: str, include_paths: list[str], allow_task_code: bool = False,
          local: Any = None) -> dict[str, Any]:
    """{task name: Task} for one requested name, with one-line errors naming the task."""
    entry = manager.task_index.get(name)
    if entry is None:
        hint = difflib.get_close_matches(name, manager.all_tasks, n=3)
        msg = f"unknown task {name!r}: neither a built-in task nor an lm-eval task, group or tag"
        if hint:
            msg += f" (close lm-eval names: {', '.join(hint)})"
        broken = _unreadable_yamls(include_paths)
        if broken:
            msg += f"; lm-eval could not read {len(broken)} YAML file(s) in --lm-eval-include: {broken[0]}"
        elif not include_paths:
            msg += "; pass --lm-eval-include DIR for your own lm-eval task YAMLs"
        raise ConfigError(msg)
    where = f" ({entry.yaml_path})" if entry.yaml_path else ""
    cfg = entry.cfg or {}
    if "task" in cfg and "group" not in cfg and "class" not in cfg \
            and not cfg.get("test_split") and not cfg.get("validation_split"):
        raise ConfigError(f"lm-eval task {name!r}{where} declares neither test_split nor validation_split; "
                          "decontamination needs the split lm-eval evaluates")
    check_requested_code(manager, name, allow_task_code=allow_task_code)  # before lm-eval imports any
    try:
        loaded = manager.load([name])
    except TemplateRefused as exc:  # lm-eval rendered a template in the sandbox, which refused it
        raise ConfigError(f"lm-eval cannot load task {name!r}{where}: {exc}") from None
    except TcqaError:
        raise  # our own one-line refusals (local data files)
    except Exception as exc:  # noqa: BLE001 - lm-eval raises anything from datasets, YAML, Jinja, ...
        traced = local and next(filter(None, (local.explain(t, exc) for t in sorted(local.applied))), None)
        if traced:
            raise traced from exc
        raise ConfigError(f"lm-eval cannot load task {name!r}{where}: {_first_line(exc)}") from exc
    tasks = dict(loaded["tasks"])
    if not tasks:
        raise ConfigError(f"lm-eval task {name!r}{where} has no member tasks")
    return tasks


def _origin(manager: Any, task_name: str) -> str:
    """Where lm-eval read a task's config, for errors: its YAML file, else lm-eval's task index."""
    entry = manager.task_index.get(task_name)
    path = getattr(entry, "yaml_path", None)
    return f"lm-eval task YAML {path}" if path else "lm-eval's task index"


def _unreadable_yamls(include_paths: list[str]) -> list[str]:
    """'file: error' for each YAML under the include paths that lm-eval's loader rejects.

    lm-eval's index skips such files silently, so a typo there looks like an unknown task.
    """
    from lm_eval.tasks._yaml_loader import load_yaml  # the loader lm-eval's own index uses

    out = []
    for root in include_paths:
        for path in sorted(Path(root).rglob("*.yaml")):
            try:
                cfg = load_yaml(path, resolve_func=False)
                if not any(k in cfg for k in ("task", "group", "class")):
                    raise ValueError("has no 'task', 'group' or 'class' key")
            except Exception as exc:  # noqa: BLE001
                out.append(f"{path}: {_first_line(exc)}")
    return out


# ---- docs and queries ------------------------------------------------------------------------
def eval_split(task: Any, name: str) -> tuple[str, str]:
    """(split name, role) of the docs lm-eval evaluates: test if the task has it, else validation."""
    cfg = task.config
    if task.has_test_docs():
        return str(getattr(cfg, "test_split", None) or "test"), "test"
    if task.has_validation_docs():
        return str(getattr(cfg, "validation_split", None) or "validation"), "validation"
    raise ConfigError(f"lm-eval task {name!r} has neither a test nor a validation split; "
                      "decontamination needs the split lm-eval evaluates")


def docs_table(docs: Any) -> pa.Table:
    """The eval docs as one Arrow table in lm-eval's order (a Dataset or a list of dicts)."""
    import datasets

    if isinstance(docs, datasets.Dataset):
        return docs.with_format("arrow")[:]
    return pa.Table.from_pylist([dict(d) for d in docs])


def _is_config_defined(task: Any, method: str) -> bool:
    """True when ``task`` uses ConfigurableTask's own ``method`` (a YAML task, not a Python class)."""
    from lm_eval.api.task import ConfigurableTask

    return isinstance(task, ConfigurableTask) and \
        getattr(type(task), method) is getattr(ConfigurableTask, method)


def decontamination_query(task: Any, doc: Mapping[str, Any]) -> str:
    """lm-eval's decontamination query for ``doc``, rendered as text (see the module docstring)."""
    cfg = task.config
    if not _is_config_defined(task, "doc_to_decontamination_query"):
        # a Python-class task defines its own query method; lm-eval's rule applies unchanged
        value = task.doc_to_decontamination_query(doc) if task.should_decontaminate() else None
        return _as_text(task.doc_to_text(doc) if value is None else value)
    query = cfg.doc_to_decontamination_query if cfg.should_decontaminate else None
    if query is None:
        value = task.doc_to_text(doc)
        if isinstance(value, int) and cfg.doc_to_choice is not None:
            # a multiple-input task (winogrande): the text is an index into the choices
            value = task.doc_to_choice(doc)[value]
        return _as_text(value)
    if callable(query):
        return _as_text(query(doc))
    if query in task.features:
        return _as_text(doc[query])
    # lm-eval's apply_template, in the sandbox
    return render(query, dict(doc), where=f"lm-eval task {task.config.task!r}: doc_to_decontamination_query")


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return "\n".join(_as_text(v) for v in value)
    return "" if value is None else str(value)


def _describe(spec: Any) -> str:
    if spec is None:
        return ""
    if callable(spec):
        return f"function {getattr(spec, '__module__', '?')}.{getattr(spec, '__qualname__', spec)}"
    return str(spec)


def _query_spec(task: Any) -> tuple[str, Any]:
    """(what the query is, the config value it comes from) for reports and field attribution."""
    if not _is_config_defined(task, "doc_to_decontamination_query"):
        return f"method {type(task).__name__}.doc_to_decontamination_query", None
    cfg = task.config
    if cfg.should_decontaminate and cfg.doc_to_decontamination_query is not None:
        return _describe(cfg.doc_to_decontamination_query), cfg.doc_to_decontamination_query
    return f"doc_to_text: {_describe(cfg.doc_to_text)}", cfg.doc_to_text


def template_fields(spec: Any, columns: Sequence[str]) -> list[str]:
    """The doc fields a config value reads: the field itself, a template's variables, or none."""
    if not isinstance(spec, str):
        return []
    if spec in columns:
        return [spec]
    import jinja2.meta

    try:
        names = jinja2.meta.find_undeclared_variables(TEMPLATE_ENV.parse(spec))
    except Exception:  # noqa: BLE001 - an unparsable template fails loudly when rendered, not here
        return []
    return sorted((n for n in names if n in columns), key=spec.find)


def _prepare(name: str, task: Any, requested_as: str, group_fields: Sequence[str] | None,
             local: Any = None) -> LmEvalTask:
    split, role = eval_split(task, name)
    check_name(split, "split name", f"lm-eval task {name!r}")  # a PREP_DIR folder name too
    try:
        docs = task.eval_docs
    except Exception as exc:  # noqa: BLE001 - process_docs failing on the data
        traced = local and local.explain(name, exc)
        if traced:
            raise traced from exc
        raise
    if len(docs) == 0:
        raise ConfigError(f"lm-eval task {name!r}: split {split!r} has no docs; nothing to decontaminate")
    table = docs_table(docs)
    check_task_templates(task, name, docs)
    queries = []
    for i, doc in enumerate(docs):
        try:
            queries.append(decontamination_query(task, doc))
        except TemplateRefused:
            raise
        except Exception as exc:  # noqa: BLE001 - a template or helper failing on a doc
            traced = local and local.explain(name, exc)
            if traced:
                raise traced from exc
            raise ConfigError(f"lm-eval task {name!r}: decontamination query of doc {i} failed: "
                              f"{_first_line(exc)}") from exc
    description, spec = _query_spec(task)
    metadata = getattr(task.config, "metadata", None) or {}
    if group_fields is None:
        group_fields = metadata.get("group_by") or ()
    if isinstance(group_fields, str):
        group_fields = [group_fields]
    missing = [f for f in group_fields if f not in table.column_names]
    if missing:
        raise ConfigError(f"lm-eval task {name!r}: group_by field(s) {missing} are not doc fields; "
                          f"its fields are {table.column_names}")
    cfg = task.config
    dataset = getattr(cfg, "dataset_path", None) or getattr(task, "DATASET_PATH", None) or "?"
    dataset_name = getattr(cfg, "dataset_name", None) or getattr(task, "DATASET_NAME", None)
    source = f"lm-eval:{name} ({dataset}{'/' + dataset_name if dataset_name else ''}, split {split})"
    files = {s: str(p) for s, p in local.files[name].items()} if local and name in local.applied else {}
    return LmEvalTask(task=name, lm_task=task, split=split, role=role, table=table,
                      source=files.get(split, source), queries=queries, query_description=description,
                      fields=template_fields(spec, table.column_names), group_by=tuple(group_fields),
                      requested_as=requested_as, data_files=files)


def parse_group_by(items: Sequence[str]) -> dict[str, list[str]]:
    """``TASK:FIELD[,FIELD...]`` options -> {task: [fields]}."""
    out: dict[str, list[str]] = {}
    for item in items:
        task, sep, fields = item.partition(":")
        names = [f.strip() for f in fields.split(",") if f.strip()]
        if not sep or not task.strip() or not names:
            raise ConfigError(f"--group-by {item!r}: expected TASK:FIELD[,FIELD...], e.g. "
                              "mc_taco_local:sentence,question")
        out[task.strip()] = names
    return out
