"""The PREP_DIR contract on the reading side: the prepared docs of a task split, below every stage
that reads them (``eval`` scores them, ``analysis`` matches model outputs to them).

``prep.pipeline`` writes PREP_DIR (docs/ARCHITECTURE.md, "Stage 2"); this module reads it back:
``prep_manifest.json`` (``read_manifest``), ``<task>/task.yaml`` (``available_tasks``, ``load_task``)
and a split's ``{full,clean,dirty}.parquet`` (``read_split``) as a ``TaskData``, whose groups
(``group_units``) are the bootstrap's units.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tcqa_data import FORMAT_VERSION, __version__
from tcqa_data.errors import TcqaError
from tcqa_data.io_utils import read_json_file, read_parquet_file
from tcqa_data.outputs import check_name, file_sha256, relative_inside
from tcqa_data.prep.taskspec import TaskSpec

SUBSETS = ("full", "clean", "dirty")


@dataclass
class TaskData:
    """The docs of one task split: full order, with each doc's subset."""

    task: str
    split: str
    spec: TaskSpec | None  # None: a task resolved through lm-eval (no task.yaml)
    docs: list[dict[str, Any]]
    clean: np.ndarray  # bool per doc
    path: Path


MANIFEST = "prep_manifest.json"
DATA_KEY = "data_sha256"  # the manifest's record of every data file: relative POSIX path -> sha256
# not PREP_DIR's own data: evaluate's default output folder (PREP_DIR/eval/<model>) lives inside it
_NOT_DATA = ("eval",)
# data files: the prepared docs and rows. A task.yaml is the task's spec, which a user may edit
# (its metric_list), and exported lm-eval code has its own record (code_sha256)
DATA_SUFFIXES = (".parquet", ".jsonl", ".csv", ".tsv", ".npy", ".arrow")


def data_digests(folder: Path) -> dict[str, str]:
    """sha256 of every data file (:data:`DATA_SUFFIXES`) ``decontaminate`` wrote under ``folder``,
    keyed by relative POSIX path; hidden files and ``eval/`` (evaluate's results, kept across
    reruns) are left out."""
    out = {}
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder)
        if rel.parts[0] in _NOT_DATA or any(part.startswith(".") for part in rel.parts) \
                or not p.name.endswith(DATA_SUFFIXES) or not p.is_file():
            continue
        out[rel.as_posix()] = file_sha256(p)
    return out


def check_data_digests(prep_dir: Path, manifest: dict[str, Any] | None = None) -> None:
    """Every data file ``prep_manifest.json`` records is there with its sha256 (before a model is
    loaded: a flipped label would otherwise change the scores unnoticed); one line naming the first
    file that is not. A PREP_DIR written before the record (no ``data_sha256``) is read as it is."""
    manifest = read_manifest(prep_dir) if manifest is None else manifest
    recorded = (manifest or {}).get(DATA_KEY)
    if not isinstance(recorded, dict):
        return
    fix = "rerun `tcqa-data decontaminate` to prepare it again"
    for rel, digest in sorted(recorded.items()):
        path = relative_inside(prep_dir, rel, f"{prep_dir / MANIFEST} {DATA_KEY}")
        try:
            now = file_sha256(path)
        except FileNotFoundError:
            raise TcqaError(f"{path}: missing; {prep_dir / MANIFEST} records it; {fix}") from None
        except OSError as exc:
            raise TcqaError(f"{path}: cannot read it ({exc.strerror or exc})") from None
        if now != digest:
            raise TcqaError(f"{path}: changed since decontaminate wrote it (its sha256 differs from the "
                            f"one {MANIFEST} records); {fix}")


def require_prep_dir(prep_dir: str | Path) -> Path:
    """``prep_dir`` as a Path, its data files checked against the manifest (:func:`check_data_digests`);
    an error naming the fix where the folder does not exist."""
    prep_dir = Path(prep_dir)
    if not prep_dir.is_dir():
        raise TcqaError(f"prepared folder {prep_dir} does not exist; run `tcqa-data decontaminate` first")
    check_data_digests(prep_dir)
    return prep_dir


def read_manifest(prep_dir: Path) -> dict[str, Any] | None:
    path = prep_dir / MANIFEST
    if not path.exists():
        return None
    manifest = read_json_file(path, "prep_manifest.json")
    if not isinstance(manifest, dict):
        raise TcqaError(f"{path}: not a JSON object; re-run `tcqa-data decontaminate`")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise TcqaError(f"{path}: prepared with format version {version}, this tcqa-data "
                        f"({__version__}) reads version {FORMAT_VERSION}; re-run `tcqa-data decontaminate`")
    return manifest


def available_tasks(prep_dir: Path) -> list[str]:
    return sorted(p.parent.name for p in prep_dir.glob("*/task.yaml"))


def pick_split(task_dir: Path, spec: TaskSpec, split: str | None) -> str:
    present = sorted(p.parent.name for p in task_dir.glob("*/full.parquet"))
    if split is not None:
        if split not in present:
            raise TcqaError(f"{task_dir}: no prepared split {split!r}; present: {present}")
        return split
    # lm-eval evaluates the test split when a task has one
    for cand in (spec.test_split, spec.validation_split):
        if cand and cand in present:
            return cand
    if len(present) == 1:
        return present[0]
    raise TcqaError(f"{task_dir}: no prepared split found (expected <split>/full.parquet); "
                    f"present: {present}")


def load_task(prep_dir: Path, task: str, split: str | None = None) -> TaskData:
    check_name(task, "task name", "the tasks asked for")  # a folder of PREP_DIR, never a path out of it
    if split is not None:
        check_name(split, "split name", "the split asked for")
    task_dir = prep_dir / task
    if not (task_dir / "task.yaml").is_file():
        raise TcqaError(f"task {task!r} is not in {prep_dir} (no {task}/task.yaml); "
                        f"tasks there: {available_tasks(prep_dir) or 'none'}")
    spec = TaskSpec.from_yaml(task_dir / "task.yaml")
    split = pick_split(task_dir, spec, split)
    return read_split(task, split, spec, task_dir / split)


def read_split(task: str, split: str, spec: TaskSpec | None, d: Path) -> TaskData:
    """The prepared docs of one split folder (full order, each doc's subset); ``spec`` None for a task
    resolved through lm-eval, which has no task.yaml."""
    tables = {}
    for name in SUBSETS:
        if not (d / f"{name}.parquet").is_file():
            raise TcqaError(f"{d}: {name}.parquet is missing; the prepared folder is incomplete")
        tables[name] = read_parquet_file(d / f"{name}.parquet", f"prepared {name}.parquet")
    for col in ("doc_id", "group_id"):
        if col not in tables["full"].column_names:
            raise TcqaError(f"{d / 'full.parquet'}: column {col!r} is missing; written by an incompatible "
                            "version? re-run `tcqa-data decontaminate`")
    docs = tables["full"].to_pylist()
    ids = [int(x) for x in tables["full"].column("doc_id").to_pylist()]
    clean_ids = {int(x) for x in tables["clean"].column("doc_id").to_pylist()}
    dirty_ids = {int(x) for x in tables["dirty"].column("doc_id").to_pylist()}
    if clean_ids & dirty_ids or (clean_ids | dirty_ids) != set(ids):
        raise TcqaError(f"{d}: clean.parquet and dirty.parquet do not partition full.parquet")
    clean = np.array([i in clean_ids for i in ids], dtype=bool)
    return TaskData(task=task, split=split, spec=spec, docs=docs, clean=clean, path=d)


def take_groups(data: TaskData, group_ids: list[int] | set[int]) -> TaskData:
    """Only the docs of ``group_ids``, in their original order (what a selection recorded)."""
    chosen = {int(g) for g in group_ids}
    idx = [i for i, d in enumerate(data.docs) if int(d["group_id"]) in chosen]
    return TaskData(data.task, data.split, data.spec, [data.docs[i] for i in idx], data.clean[idx], data.path)


def group_units(group_ids: np.ndarray) -> tuple[np.ndarray, int]:
    """Bootstrap units: whole groups (MC-TACO questions), numbered 0..n-1 in order of first
    appearance; returns (unit per doc, number of units)."""
    _, first = np.unique(group_ids, return_index=True)
    order = group_ids[np.sort(first)]
    unit_of = {int(g): u for u, g in enumerate(order)}
    return np.array([unit_of[int(g)] for g in group_ids], dtype=np.int64), len(order)
