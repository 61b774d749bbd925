"""What a task file may make lm-eval run: refused unless the user says ``--allow-task-code``.

lm-eval imports Python named in a task YAML (``!function module.name`` for ``process_docs``,
``doc_to_text``, metrics, ``custom_dataset``...; ``class:`` for a Python task class) and runs it
unsandboxed, the moment it loads the task. lm-eval's own shipped tasks are installed code, like
lm-eval itself, and pass; a YAML anywhere else (the ``--lm-eval-include`` folders, or a file an
``include:`` reaches outside lm-eval's package) is read here first, with a YAML loader that only
records the tags, and refused if it names code. The same reading refuses a FIFO, a device or a
huge file in those folders (lm-eval's task index would block on a FIFO or read ``/dev/zero``
forever), with one line, before lm-eval is asked for anything.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from tcqa_data.errors import ConfigError
from tcqa_data.io_utils import decode_utf8, read_regular_file

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


def _code_refs(value: Any, key: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, _Code):
        yield key, f"!function {value}"
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _code_refs(v, f"{key}.{k}" if key else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _code_refs(v, f"{key}[{i}]")


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
