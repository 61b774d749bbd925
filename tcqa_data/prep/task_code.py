"""What a task file may make lm-eval run: Python refused unless the user says ``--allow-task-code``,
and every template field checked by tcqa-data's sandbox on the task's docs.

lm-eval imports Python named in a task YAML (``!function module.name`` for ``process_docs``,
``doc_to_text``, metrics, ``custom_dataset``...; ``class:`` for a Python task class) and runs it
unsandboxed, the moment it loads the task. lm-eval's own shipped tasks are installed code, like
lm-eval itself, and pass; a YAML anywhere else (the ``--lm-eval-include`` folders, or a file an
``include:`` reaches outside lm-eval's package) is read here first, with a YAML loader that only
records the tags, and refused if it names code. The same reading refuses a FIFO, a device or a
huge file in those folders (lm-eval's task index would block on a FIFO or read ``/dev/zero``
forever), with one line, before lm-eval is asked for anything.

Templates: every template field of a loaded lm-eval task (:data:`TEMPLATE_FIELDS`) is type-checked
(pydantic), checked by the sandbox and rendered on every eval doc with its budgets, fewshot_config's
on every few-shot doc, and its filter and metric regexes run with a timeout on the docs' strings
(:func:`check_task_templates`), so the lm-eval YAMLs decontaminate exports hold only templates and
patterns that passed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import jinja2
import pydantic
import yaml

from tcqa_data.errors import ConfigError
from tcqa_data.io_utils import decode_utf8, read_regular_file
from tcqa_data.prep.task_regex import check_task_regexes
from tcqa_data.prep.templates import RenderClock, check_source, render

ALLOW_HINT = ("lm-eval would import and run it unsandboxed; pass --allow-task-code if you trust "
              "this code")
MAX_TASK_YAML_BYTES = 1 << 20


class _Code(str):
    """A ``!function`` reference as written (``utils.process_docs``)."""


class _RecordingLoader(yaml.SafeLoader):
    pass


_RecordingLoader.add_constructor("!function", lambda loader, node: _Code(loader.construct_scalar(node)))


def lm_eval_tasks_root() -> Path | None:
    """The installed lm-eval package's ``tasks`` folder (its shipped tasks), or None."""
    try:
        import lm_eval.tasks
    except ImportError:
        return None
    return Path(lm_eval.tasks.__file__).resolve().parent


def is_shipped(path: str | os.PathLike, root: Path | None = None) -> bool:
    """True for a file inside the installed lm-eval package's tasks (installed code)."""
    root = root if root is not None else lm_eval_tasks_root()
    return root is not None and Path(path).resolve().is_relative_to(root)


def read_task_yaml(path: str | os.PathLike) -> Any:
    """A task YAML as data, ``!function`` values as markers; one line when it cannot be read."""
    text = decode_utf8(read_regular_file(path, "task YAML", MAX_TASK_YAML_BYTES), path, "task YAML")
    try:
        return yaml.load(text, Loader=_RecordingLoader)  # noqa: S506 - SafeLoader plus one recording tag
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        raise ConfigError(f"task YAML {path}: not valid YAML{at}: {getattr(exc, 'problem', None) or exc}") \
            from None


def nested_values(value: Any, leaf: type | tuple[type, ...], key: str = "") -> Iterator[tuple[str, Any]]:
    """(field path such as ``filter_list[0].filter[1].function``, value) for each instance of
    ``leaf`` anywhere in a YAML value, its mappings and lists walked."""
    if isinstance(value, leaf):
        yield key, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from nested_values(v, leaf, f"{key}.{k}" if key else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from nested_values(v, leaf, f"{key}[{i}]")


def _code_refs(value: Any, key: str) -> Iterator[tuple[str, str]]:
    return ((k, f"!function {v}") for k, v in nested_values(value, _Code, key))


def task_code(path: str | os.PathLike) -> list[str]:
    """``"field: what"`` for each piece of code a task YAML (and the non-shipped files it
    includes) makes lm-eval import."""
    root = lm_eval_tasks_root()
    out: list[str] = []
    seen: set[Path] = set()
    todo = [Path(path)]
    while todo:
        p = todo.pop()
        if p.resolve() in seen or is_shipped(p, root):
            continue
        seen.add(p.resolve())
        cfg = read_task_yaml(p)
        if not isinstance(cfg, dict):
            continue
        where = "" if p == Path(path) else f" (included {p})"
        if "class" in cfg:
            out.append(f"class{where}: a Python task class {cfg['class']!r}")
        out.extend(f"{key}{where}: {ref}" for key, ref in _code_refs(cfg, ""))
        includes = cfg.get("include") or []
        for inc in includes if isinstance(includes, list) else [includes]:
            if isinstance(inc, str):
                todo.append(Path(inc) if Path(inc).is_absolute() else p.parent / inc)
    return out


def check_include_folders(include_paths: Sequence[str | os.PathLike]) -> None:
    """Every YAML lm-eval would index in ``include_paths`` is a regular file of a sane size: a FIFO,
    a device or an oversized file is one ConfigError line naming it (lm-eval's index would block on
    it or read it forever). What a file holds is checked for the tasks asked for
    (:func:`check_requested_code`); lm-eval's index skips YAML that does not parse."""
    for root in include_paths:
        for path in sorted(Path(root).rglob("*")):
            if path.suffix in (".yaml", ".yml") and not path.is_dir():
                read_regular_file(path, "task YAML", MAX_TASK_YAML_BYTES)


def _member_names(entry: Any) -> list[str]:
    """The names a group or tag entry of lm-eval's task index stands for."""
    kind = getattr(getattr(entry, "kind", None), "name", "")
    if kind == "TAG":
        return sorted(getattr(entry, "tags", ()) or ())
    if kind != "GROUP" or entry.yaml_path is None or is_shipped(entry.yaml_path):
        return []
    cfg = read_task_yaml(entry.yaml_path)
    members = cfg.get("task", []) if isinstance(cfg, dict) else []
    members = members if isinstance(members, list) else [members]
    return [m for m in members if isinstance(m, str)]  # inline task configs are in the group's file


def check_requested_code(manager: Any, name: str, *, allow_task_code: bool) -> None:
    """Before lm-eval loads ``name`` (a task, group or tag): the non-shipped YAMLs it would read
    (the task's own, a group's and its members', a tag's tasks', and what they include) name no
    code, unless ``allow_task_code``; else one ConfigError line naming the file and the field."""
    if allow_task_code:
        return
    seen: set[str] = set()
    todo = [name]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        entry = manager.task_index.get(current)
        if entry is None:
            continue  # lm-eval reports it when it loads
        if entry.yaml_path is not None:
            refs = task_code(entry.yaml_path)
            if refs:
                more = f" (and {len(refs) - 1} more)" if len(refs) > 1 else ""
                raise ConfigError(f"task YAML {entry.yaml_path}: {refs[0]}{more} is code outside the "
                                  f"installed lm-eval package; {ALLOW_HINT}")
        elif isinstance(entry.cfg, dict) and "class" in entry.cfg:
            raise ConfigError(f"lm-eval task {current!r}: class {entry.cfg['class']!r} is a Python task "
                              f"class outside the installed lm-eval package; {ALLOW_HINT}")
        todo.extend(_member_names(entry))


# TaskConfig fields lm-eval renders as Jinja templates with a doc (``ConfigurableTask.doc_to_*``,
# ``resolve_field(doc, description)``, ``gen_prefix``); fewshot_config's are rendered on few-shot docs.
TEMPLATE_FIELDS = ("description", "doc_to_text", "doc_to_target", "doc_to_choice", "gen_prefix",
                   "doc_to_decontamination_query", "doc_to_image", "doc_to_audio")
FEWSHOT_TEMPLATE_FIELDS = ("doc_to_text", "doc_to_target", "doc_to_choice", "gen_prefix")


class _Metadata(pydantic.BaseModel):
    """The metadata keys tcqa-data reads (``group_by``); lm-eval's own pass through."""

    model_config = pydantic.ConfigDict(strict=True, extra="allow")
    group_by: str | list[str] | None = None


class _TemplateFieldTypes(pydantic.BaseModel):
    """The types lm-eval gives these fields a meaning for; another type is one line, not a crash
    after the model has loaded."""

    model_config = pydantic.ConfigDict(strict=True, arbitrary_types_allowed=True, extra="ignore")
    description: str | None = None
    doc_to_text: str | int | Callable[..., Any] | None = None
    doc_to_target: str | int | list[Any] | Callable[..., Any] | None = None
    doc_to_choice: str | list[Any] | dict[Any, Any] | Callable[..., Any] | None = None
    gen_prefix: str | None = None
    doc_to_decontamination_query: str | Callable[..., Any] | None = None
    metric_list: list[dict[str, Any]] | None = None
    metadata: _Metadata | None = None


def _templates_of(task: Any) -> dict[str, Any]:
    """field -> config value, for each template field of a loaded lm-eval task (fewshot_config's as
    ``fewshot_config.FIELD``)."""
    cfg = task.config
    out = {f: getattr(cfg, f, None) for f in TEMPLATE_FIELDS}
    # lm-eval keeps fewshot_config as a FewshotConfig (its fields inherited from the task's), or a mapping
    fewshot = getattr(task, "fewshot_cfg", None) or getattr(cfg, "fewshot_config", None) or {}
    out.update({f"fewshot_config.{f}": fewshot.get(f) if isinstance(fewshot, dict) else
                getattr(fewshot, f, None) for f in FEWSHOT_TEMPLATE_FIELDS})
    return out


def check_task_templates(task: Any, name: str, docs: Any) -> None:
    """Every template field of a loaded lm-eval task: its type checked, its strings checked by the
    sandbox, each top-level template rendered on every eval doc in the sandbox with its budgets,
    fewshot_config's on every few-shot doc (:func:`_fewshot_templates`), and the task's filter and
    metric patterns run with a timeout on the docs' strings (:mod:`tcqa_data.prep.task_regex`); a
    failure is one ConfigError naming the task's file and the field."""
    cfg = task.config
    origin = (getattr(cfg, "metadata", None) or {}).get("config_source") if isinstance(
        getattr(cfg, "metadata", None), dict) else None
    where = f"lm-eval task {name!r}" + (f" ({origin})" if origin else "")
    values = _templates_of(task)
    try:
        _TemplateFieldTypes.model_validate({k: v for k, v in values.items() if "." not in k} |
                                           {"metric_list": cfg.metric_list, "metadata": cfg.metadata})
    except pydantic.ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"] if p not in ("str", "int", "list[str]"))
        value = err.get("input")
        raise ConfigError(f"{where}: field {field} is {value!r:.80} ({type(value).__name__}); expected "
                          f"{_EXPECTED_TYPES.get(field, err['msg'])}") from None
    features = set(getattr(task, "features", None) or [])
    rendered: dict[str, str] = {}
    for field_name, value in values.items():
        # (a list is literal choices or targets, a mapping literal choices: lm-eval renders neither)
        if isinstance(value, str) and value not in features:
            check_source(value, where=f"{where}: template {field_name}")
            if "." not in field_name and \
                    (field_name != "doc_to_decontamination_query" or cfg.should_decontaminate):
                rendered[field_name] = value
    clock = RenderClock(where)
    # what the model's outputs are compared with, and look like: the task's regexes run on these
    texts = _render_all(rendered, docs, where, "doc", clock)
    fewshot_docs, fewshot_templates = _fewshot_templates(task, features)
    if fewshot_docs is None:  # on the eval docs: what rendered there already needs no second pass
        fewshot_templates = {k: v for k, v in fewshot_templates.items()
                             if rendered.get(k.split(".", 1)[1]) != v}
    if fewshot_templates:
        _render_all(fewshot_templates, fewshot_docs if fewshot_docs is not None else docs, where,
                    "few-shot doc" if fewshot_docs is not None else "doc", clock)
    check_task_regexes({"filter_list": getattr(cfg, "filter_list", None),
                        "metric_list": getattr(cfg, "metric_list", None)}, texts, where)


def _render_all(templates: dict[str, str], docs: Any, where: str, what: str, clock: RenderClock) -> list[str]:
    """Each template rendered on each doc in the sandbox; the renders and the docs' own strings."""
    texts: list[str] = []
    for i, doc in enumerate(docs):
        for field_name, text in templates.items():
            try:
                texts.append(render(text, dict(doc), where=f"{where}: template {field_name} ({what} {i})"))
                clock.tick()
            except jinja2.UndefinedError as exc:
                raise ConfigError(f"{where}: template {field_name} uses a field {what} {i} lacks: "
                                  f"{exc.message}") from None
        texts.extend(v for v in dict(doc).values() if isinstance(v, str))
    return texts


def _fewshot_templates(task: Any, features: set[str]) -> tuple[Any, dict[str, str]]:
    """(the docs lm-eval's few-shot sampler draws from, or None when it has none to give here;
    ``fewshot_config.FIELD`` -> template, for the templates lm-eval renders on them).

    lm-eval's sampler draws a random few among ``task.fewshot_docs()`` (the fewshot split, the
    listed samples, else training, validation or test docs) and renders them with the few-shot
    templates (``fewshot_config``'s own, else the task's, which ``task.fewshot_cfg`` inherits).
    Rendering every one of those docs covers every draw. Without few-shot docs (or when listing
    them fails: lm-eval fails there too), the templates render on the eval docs, which share the
    schema."""
    fs = getattr(task, "fewshot_cfg", None)
    if fs is None:
        return None, {}
    templates = {f"fewshot_config.{f}": v for f in FEWSHOT_TEMPLATE_FIELDS
                 if isinstance(v := getattr(fs, f, None), str) and v not in features}
    if not templates:
        return None, {}
    try:
        docs = task.fewshot_docs()
    except Exception:  # noqa: BLE001 - no few-shot source configured: render on the eval docs
        docs = None
    return docs, templates


_EXPECTED_TYPES = {
    "description": "a template string", "gen_prefix": "a template string",
    "doc_to_text": "a template, a doc field name, an integer or a !function",
    "doc_to_target": "a template, a doc field name, an integer, a list or a !function",
    "doc_to_choice": "a template, a doc field name, a list, a mapping or a !function",
    "doc_to_decontamination_query": "a template, a doc field name or a !function",
    "metric_list": "a list of mappings, each with a 'metric' name", "metadata": "a mapping",
    "metadata.group_by": "a doc field name or a list of them",
}
