"""Ground truth for ``decontaminate --labels PATH``: which benchmark docs are known to be contaminated.

A labels file (CSV with a header row, JSON Lines, or Parquet) has one row per labelled doc:

- ``task``: the task as PREP_DIR names it (its folder);
- ``split`` (optional): the split; may be left out (or empty) when the run has one split of the task;
- ``doc_id``: the doc's 0-based position in the split, as ``full.parquet`` and
  ``contamination.parquet`` number it; **or** ``group_id``: its question group, numbered as there
  (groups in order of first appearance). A file uses one of the two keys;
- ``contaminated``: true / false (JSON or Parquet booleans, 0 / 1, or the words ``true`` / ``false``).

Docs or groups: the key is the unit counted. MC-TACO's candidate answers of one question share a
group and one decontamination query (sentence and question), so every scoring column is equal across
the group: labelling it by ``group_id`` counts each question once (an injection experiment injects
questions). By ``doc_id`` each labelled candidate counts. Unlabelled docs are not counted.

The file is read and checked whole before the corpus is read and before anything is written
(:func:`read_labels` the file's own fields, :meth:`Labels.check` against the run's tasks and
splits); a bad row is one ``InputError`` line naming the file, the line (row, for Parquet) and the
field. Labels only measure the rule: they never change a flag, a split or any file but the reports.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tcqa_data.errors import InputError
from tcqa_data.io_utils import iter_jsonl_objects, read_parquet_file
from tcqa_data.outputs import file_sha256

FORMATS = (".csv", ".jsonl", ".parquet")
KEYS = ("doc_id", "group_id")  # the unit a file labels: "doc_id" -> docs, "group_id" -> groups
_TRUE, _FALSE = ("true", "1"), ("false", "0")


@dataclass(frozen=True)
class SplitLabels:
    """One split's labels: ``ids`` (doc or group ids, ascending) and whether each is contaminated."""

    unit: str  # "doc" or "group"
    ids: np.ndarray  # int64
    contaminated: np.ndarray  # bool
    source: dict[str, Any]  # the file, as reports name it (Labels.record)


@dataclass
class _Row:
    where: int  # line (CSV, JSONL) or row (Parquet), 1-based
    task: str
    split: str | None
    key: int
    contaminated: bool


@dataclass
class Labels:
    """A labels file read and its rows' own fields checked; :meth:`check` ties them to the run."""

    path: Path
    key: str  # "doc_id" or "group_id"
    rows: list[_Row]
    sha256: str
    per_split: dict[tuple[str, str], SplitLabels] = field(default_factory=dict)

    @property
    def unit(self) -> str:
        return self.key.removesuffix("_id")

    def check(self, splits: Mapping[str, Mapping[str, Sequence[int]]]) -> None:
        """Tie every row to a split of this run: ``splits`` maps task -> split -> each doc's group id
        (in doc order). A row naming a task or split the run does not process, or an id outside the
        split, is one ``InputError``; so is a doc or group labelled both ways. Fills ``per_split``."""
        found: dict[tuple[str, str], dict[int, _Row]] = {}
        for row in self.rows:
            per_task = splits.get(row.task)
            if per_task is None:
                raise self._error(row, f"task {row.task!r} is not in this run (its tasks: "
                                       f"{', '.join(sorted(splits))})", "task")
            split = row.split
            if split is None:
                if len(per_task) != 1:
                    raise self._error(row, f"task {row.task!r} has {len(per_task)} splits in this run "
                                           f"({', '.join(sorted(per_task))}): say which in a 'split' "
                                           "column", "split")
                split = next(iter(per_task))
            elif split not in per_task:
                raise self._error(row, f"split {split!r} of task {row.task!r} is not in this run (its "
                                       f"splits here: {', '.join(sorted(per_task))})", "split")
            gids = per_task[split]
            count = len(gids) if self.key == "doc_id" else (max(gids) + 1 if len(gids) else 0)
            if not 0 <= row.key < count:
                raise self._error(row, f"{self.unit} {row.key} is not in {row.task}/{split}, which has "
                                       f"{count} {self.unit}s (ids 0 to {count - 1})", self.key)
            seen = found.setdefault((row.task, split), {})
            before = seen.get(row.key)
            if before is not None and before.contaminated != row.contaminated:
                raise self._error(row, f"{self.unit} {row.key} of {row.task}/{split} is labelled "
                                       f"{_word(row.contaminated)} here and {_word(before.contaminated)} "
                                       f"at {_place(self.path, before.where)}", "contaminated")
            seen[row.key] = row
        self.per_split = {}
        for where, seen in found.items():
            ids = np.asarray(sorted(seen), dtype=np.int64)
            self.per_split[where] = SplitLabels(
                self.unit, ids, np.asarray([seen[i].contaminated for i in ids.tolist()], dtype=bool),
                self.record())

    def for_split(self, task: str, split: str) -> SplitLabels | None:
        """The labels of ``task``/``split`` (after :meth:`check`); None where the file labels none."""
        return self.per_split.get((task, split))

    def record(self) -> dict[str, Any]:
        """How a report names the file: its file name (PREP_DIR holds no absolute path) and sha256."""
        return {"file": self.path.name, "sha256": self.sha256, "unit": self.unit}

    def _error(self, row: _Row, message: str, field_name: str) -> InputError:
        return _error(self.path, row.where, message, field_name)


def _error(path: Path, where: int, message: str, field_name: str) -> InputError:
    """One line naming the file, the line of a text file or the row of a Parquet file, and the field."""
    if path.suffix.lower() == ".parquet":
        return InputError(f"row {where}: {message}", path=str(path), field=field_name)
    return InputError(message, path=str(path), line=where, field=field_name)


def _word(contaminated: bool) -> str:
    return "contaminated" if contaminated else "clean"


def _place(path: Path, where: int) -> str:
    return f"row {where}" if path.suffix.lower() == ".parquet" else f"line {where}"


def read_labels(path: str | os.PathLike) -> Labels:
    """The labels file at ``path`` read and each row's fields checked (module doc): a missing
    column, a missing or malformed value is one ``InputError`` naming the file, line or row, and field."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise InputError(f"labels file of type {suffix or '(none)'!r}; use one of {', '.join(FORMATS)}",
                         path=str(path))
    if not path.is_file():  # missing, a folder, a FIFO (opening one would wait for a writer)
        raise InputError("labels file not found, or not a regular file", path=str(path))
    records = {".csv": _csv_records, ".jsonl": _jsonl_records, ".parquet": _parquet_records}[suffix](path)
    rows: list[_Row] = []
    key: str | None = None
    for where, rec in records:
        def fail(message: str, field_name: str, where: int = where) -> InputError:
            return _error(path, where, message, field_name)

        if key is None:
            present = [k for k in KEYS if k in rec]
            if len(present) != 1:
                raise fail("a labels file names each doc by 'doc_id' or each question group by 'group_id' "
                           f"(one of the two); columns here: {', '.join(rec) or 'none'}", KEYS[0])
            key = present[0]
        for name in ("task", key, "contaminated"):
            if name not in rec:
                raise fail(f"no column {name!r} (columns here: {', '.join(rec)})", name)
        task = rec["task"]
        if not isinstance(task, str) or not task.strip():
            raise fail(f"task {task!r} is not a task name", "task")
        split = rec.get("split")
        if split is not None and not isinstance(split, str):
            raise fail(f"split {split!r} is not a split name", "split")
        rows.append(_Row(where, task.strip(), split.strip() or None if split is not None else None,
                         _whole_number(rec[key], lambda m, k=key: fail(m, k)),
                         _boolean(rec["contaminated"], lambda m: fail(m, "contaminated"))))
    if not rows:
        raise InputError("labels file holds no labels", path=str(path))
    assert key is not None
    return Labels(path, key, rows, file_sha256(path))


def _whole_number(value: Any, fail: Any) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and value >= 0:
        return int(value)
    raise fail(f"{value!r} is not an id (a whole number from 0)")


def _boolean(value: Any, fail: Any) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise fail(f"{value!r} is not a label: true / false, or 1 / 0")


def _csv_records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line, record) per CSV row; empty cells of the optional split are None."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:
            reader = csv.DictReader(fh)
            for rec in reader:
                if None in rec:  # more cells than the header names
                    raise InputError(f"{len(rec) - 1 + len(rec[None])} cells, the header names "
                                     f"{len(reader.fieldnames or [])}", path=str(path), line=reader.line_num)
                yield reader.line_num, {k: (None if v is None or (k == "split" and not v.strip()) else v)
                                        for k, v in rec.items()}
    except UnicodeDecodeError as exc:
        raise InputError(f"labels file is not valid UTF-8 (byte {exc.start})", path=str(path)) from None
    except csv.Error as exc:
        raise InputError(f"not a CSV file: {exc}", path=str(path)) from None


def _jsonl_records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    yield from iter_jsonl_objects(path)


def _parquet_records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    table = read_parquet_file(path, "labels file")
    for i, rec in enumerate(table.to_pylist(), 1):
        yield i, {k: v for k, v in rec.items() if not (k == "split" and v is None)}
