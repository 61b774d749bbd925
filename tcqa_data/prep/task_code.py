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


def check_include_folders(include_paths: Sequence[str | os.PathLike], *, allow_task_code: bool) -> None:
    """Every YAML lm-eval would index in ``include_paths`` read here first: a FIFO, a device, an
    oversized or unreadable file, or (without ``allow_task_code``) one that names code, is one
    ConfigError line naming the file and the field."""
    for root in include_paths:
        for path in sorted(Path(root).rglob("*.y*ml")):
            if path.suffix not in (".yaml", ".yml"):
                continue
            refs = task_code(path)
            if refs and not allow_task_code:
                more = f" (and {len(refs) - 1} more)" if len(refs) > 1 else ""
                raise ConfigError(f"task YAML {path}: {refs[0]}{more} is code outside the installed lm-eval "
                                  f"package; {ALLOW_HINT}")
