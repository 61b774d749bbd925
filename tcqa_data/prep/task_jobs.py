"""The benchmark tasks a run decontaminates (or purifies against), loaded with their queries.

``task_jobs`` takes the ``--tasks`` names as both commands do (built-in, a task YAML, or an lm-eval
task name) with ``--data-files`` / ``--splits`` / ``--group-by`` / ``--lm-eval-include``; every refusal
(names, splits, data files, a task given twice) comes before anything is written. ``query_docs``
gives the scorer a split's queries with the fields matches are attributed to.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tcqa_data.decontam.detect.score import QueryDoc
from tcqa_data.errors import ConfigError
from tcqa_data.outputs import check_name
from tcqa_data.prep.benchmarks import BenchmarkSplit, load_split
from tcqa_data.prep.doc_refs import portable_path
from tcqa_data.prep.taskspec import TaskSpec, is_task_yaml_path, is_tcqa_task

if TYPE_CHECKING:
    from tcqa_data.prep.lm_eval_tasks import LmEvalTask


def parse_data_files(items: Iterable[str], tasks: Sequence[str]) -> dict[str, dict[str, str]]:
    """``TASK:SPLIT=PATH`` items -> {task: {split: path}}; any other form is refused with the expected one.

    Both names are required: ``mc_taco=PATH`` would otherwise read as a split named "mc_taco".
    """
    out: dict[str, dict[str, str]] = {}
    for item in items:
        key, _, path = item.partition("=")
        task, _, split = key.partition(":")
        if not (task.strip() and split.strip() and path.strip()):
            raise ConfigError(f"--data-files {item!r}: expected TASK:SPLIT=PATH (task, split and file), "
                              "e.g. mc_taco:test=../shared/data/mc_taco/test_9442.tsv")
        # a YAML path's spec `task` name, or a member of an lm-eval group or tag, is checked once resolved
        if task not in tasks and all(is_tcqa_task(t) and not t.endswith((".yaml", ".yml")) for t in tasks):
            raise ConfigError(f"--data-files {item!r}: task {task!r} is not among --tasks {list(tasks)}")
        out.setdefault(task, {})[check_name(split, "split name", "--data-files")] = path
    return out


@dataclasses.dataclass
class TaskJob:
    """One task's splits, each as (docs, their queries, their role); ``source``: how lm-eval
    resolved the task (None for built-in and YAML tasks)."""

    task: TaskSpec | LmEvalTask
    parts: list[tuple[BenchmarkSplit, list[str], str]]
    source: dict[str, Any] | None = None


def task_jobs(tasks: Sequence[str], data_files: Mapping[str, Mapping[str, str | os.PathLike]] | None,
              splits: Sequence[str] | None, *, group_by: Mapping[str, Sequence[str]] | None = None,
              lm_eval_include: Any = None, lm_eval_include_defaults: bool = True,
              allow_task_code: bool = False) -> list[TaskJob]:
    """Every task's splits loaded, with their queries, as ``decontaminate`` takes ``tasks`` (built-in,
    YAML, or lm-eval names) and its options; ``purify`` loads its tasks through this too. All
    refusals (names, splits, data files) come before anything is written. Every template of every
    task is rendered on each of its docs in the sandbox (what is exported has passed it);
    ``allow_task_code``: let lm-eval import the Python that task YAMLs outside lm-eval name."""
    local = {k: dict(v) for k, v in (data_files or {}).items()}
    for per_task in local.values():  # split names become folder names: refused before any write
        for split_name in per_task:
            check_name(split_name, "split name", "data_files (--data-files)")
    own, lm_tasks = _resolve_tasks(tasks, local, {k: tuple(v) for k, v in (group_by or {}).items()},
                                   lm_eval_include, lm_eval_include_defaults, allow_task_code)
    return list(_task_jobs(own, lm_tasks, local, splits))


def check_task_files(tasks: Sequence[str]) -> None:
    """Each task given as a YAML path read and checked now (a FIFO, a device, an oversized file,
    the schema, the templates' sources): the one-line refusal comes before any output folder, lock
    or staging folder is made."""
    for t in tasks:
        if is_task_yaml_path(t):
            TaskSpec.from_yaml(t)


def query_docs(spec: TaskSpec | LmEvalTask, b: BenchmarkSplit, queries: Sequence[str]) -> list[QueryDoc]:
    """A split's docs as the scorer takes them: each query with the doc fields matches are
    attributed to."""
    fields = spec.query_fields()
    return [QueryDoc(q, {f: str(d[f]) for f in fields if d.get(f) is not None})
            for q, d in zip(queries, b.docs(), strict=True)]


def _resolve_tasks(tasks: Sequence[str], data_files: dict[str, dict[str, str | os.PathLike]],
                   group_by: dict[str, tuple[str, ...]], lm_eval_include: Any, lm_eval_include_defaults: bool,
                   allow_task_code: bool = False) -> tuple[list[tuple[str, TaskSpec]], list[LmEvalTask]]:
    """The built-in and YAML tasks (each with the name it was given as) and the tasks resolved
    through lm-eval. Refused here, before anything is written: data files or ``group_by`` for
    tasks not given, a task given twice."""
    own = [t for t in tasks if is_tcqa_task(t)]
    specs = [TaskSpec.resolve(t) for t in own]
    specs = [dataclasses.replace(s, group_by=group_by.pop(t, group_by.pop(s.task, s.group_by)))
             for t, s in zip(own, specs, strict=True)]
    # local files may be keyed by the name given in `tasks` (maybe a YAML path) or by spec.task
    known = set(own) | {s.task for s in specs}
    unknown = sorted(set(data_files) - known)
    lm_names = [t for t in tasks if not is_tcqa_task(t)]
    if unknown and not lm_names:
        raise ConfigError(f"data files given for tasks {unknown} that are not among the built-in or YAML "
                          f"tasks {own}")
    lm_tasks: list[LmEvalTask] = []
    if lm_names:
        from tcqa_data.prep.lm_eval_tasks import resolve_lm_eval_tasks

        lm_tasks = resolve_lm_eval_tasks(lm_names, include_path=lm_eval_include, group_by=group_by,
                                         include_defaults=lm_eval_include_defaults,
                                         allow_task_code=allow_task_code,
                                         data_files={t: data_files[t] for t in unknown})
    elif group_by:
        raise ConfigError(f"--group-by names task(s) {sorted(group_by)} that are not among {list(tasks)}")
    for task_name, spec in zip(own, specs, strict=True):
        declared = list(spec.splits().values())
        if not is_task_yaml_path(task_name) and declared:
            # a built-in task has fixed splits: a misspelled one (tset) is refused before any file
            # is read (a task YAML of your own keeps free names)
            for split in data_files.get(task_name) or data_files.get(spec.task) or {}:
                if split not in declared:
                    raise ConfigError(f"task {spec.task!r} has no split {split!r} (--data-files "
                                      f"{task_name}:{split}=...); its splits are {declared}")
    names = [s.task for s in specs] + [t.task for t in lm_tasks]
    if len(set(names)) != len(names):
        raise ConfigError(f"tasks {sorted({n for n in names if names.count(n) > 1})} are given twice")
    return list(zip(own, specs, strict=True)), lm_tasks


def _task_jobs(own: list[tuple[str, TaskSpec]], lm_tasks: list[LmEvalTask],
               data_files: dict[str, dict[str, str | os.PathLike]], splits: Sequence[str] | None
               ) -> Iterator[TaskJob]:
    """Each task's splits, loaded when its turn comes: built-in and YAML tasks first, then those
    resolved through lm-eval."""
    for name, spec in own:
        yield _spec_job(spec, data_files.get(name) or data_files.get(spec.task) or {}, splits)
    for lt in lm_tasks:
        yield _lm_eval_job(lt, splits)


def _spec_job(spec: TaskSpec, local: dict[str, str | os.PathLike], splits: Sequence[str] | None) -> TaskJob:
    """A built-in or YAML task: its local files' splits, else its declared ones (from the hub),
    those in ``splits`` only; each split's queries from the task's template."""
    role_of = {name: role for role, name in spec.splits().items()}
    wanted = list(local) if local else list(spec.splits().values())
    if splits:
        wanted = [s for s in wanted if s in splits]
    if not wanted:
        declared = list(spec.splits().values())
        raise ConfigError(f"task {spec.task!r}: no split to process (declared {declared}, "
                          f"local files {list(local)}, --splits {list(splits or [])})")
    loaded = [load_split(spec, s, local.get(s)) for s in wanted]
    # every template rendered on every doc in the sandbox (a refusal stops the run here), the
    # decontamination queries among them
    return TaskJob(spec, [(b, spec.check_templates_on(b.docs()), role_of.get(b.split, "test"))
                          for b in loaded])


def _lm_eval_job(lt: LmEvalTask, splits: Sequence[str] | None) -> TaskJob:
    """A task resolved through lm-eval: the split lm-eval evaluates, its docs and queries as lm-eval
    gives them."""
    if splits and lt.split not in splits:
        raise ConfigError(f"lm-eval task {lt.task!r} evaluates split {lt.split!r}, which --splits "
                          f"{list(splits)} leaves out")
    b = BenchmarkSplit(task=lt.task, split=lt.split, source=lt.source, table=lt.table)
    source = {"lm_eval_task": lt.task, "requested_as": lt.requested_as, "query": lt.query_description,
              "group_by": list(lt.group_by)}
    if lt.data_files:  # file names only, as PREP_DIR records every input
        source["data_files"] = {s: portable_path(p) for s, p in sorted(lt.data_files.items())}
    return TaskJob(lt, [(b, lt.queries, lt.role)], source)
