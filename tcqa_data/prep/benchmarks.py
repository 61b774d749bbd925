"""Load a benchmark split from the hub or from local files, in its original order.

Every loader returns a :class:`BenchmarkSplit`: a pyarrow table of the original fields (labels
normalized to ints), in file order, so a doc's id is simply its 0-based position.
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import pyarrow as pa

from tcqa_data.errors import InputError, TcqaError
from tcqa_data.io_utils import decode_utf8, iter_jsonl_objects, read_parquet_file, read_regular_file
from tcqa_data.prep.taskspec import TaskSpec

MAX_BENCHMARK_BYTES = 4 << 30  # a local benchmark file read whole; larger is refused unread

LOCAL_FORMATS = (".tsv", ".jsonl", ".json", ".parquet")


@dataclass
class BenchmarkSplit:
    """One split of one task: original fields in original order."""

    task: str
    split: str
    source: str  # file path or "hub:<path>[/<name>]"
    table: pa.Table

    @property
    def num_docs(self) -> int:
        return self.table.num_rows

    def docs(self) -> list[dict[str, Any]]:
        return self.table.to_pylist()


def load_split(spec: TaskSpec, split: str, data_file: str | os.PathLike | None = None) -> BenchmarkSplit:
    """Load ``split`` of ``spec`` from ``data_file`` if given, else from the hub.

    Checks that every field a template or ``group_by`` uses is present and that the split is not
    empty; labels are normalized with :func:`normalize_labels`.
    """
    if data_file is not None:
        path = Path(data_file)
        table = read_local(path, spec)
        source = str(path)
    else:
        table = _load_hub(spec, split)
        source = f"hub:{spec.dataset_path}" + (f"/{spec.dataset_name}" if spec.dataset_name else "")
    if table.num_rows == 0:
        raise InputError(f"split {split!r} of task {spec.task!r} is empty; nothing to decontaminate",
                         path=source)
    check_fields(spec, table, source)
    table = normalize_labels(spec, table, source)
    return BenchmarkSplit(task=spec.task, split=split, source=source, table=table)


# ---- local files ----------------------------------------------------------------------------
def read_local(path: Path, spec: TaskSpec) -> pa.Table:
    """Read a TSV (columns from the spec's ``tsv_columns``, no header), JSONL/JSON or Parquet file."""
    check_data_file(path, LOCAL_FORMATS)
    suffix = path.suffix.lower()
    if suffix == ".tsv":
        return _read_tsv(path, spec)
    if suffix in (".jsonl", ".json"):
        return _read_json(path)
    if suffix == ".parquet":
        try:
            return read_parquet_file(path, "benchmark Parquet file")
        except (OSError, pa.ArrowException) as exc:
            raise InputError(f"cannot read Parquet: {exc}", path=str(path)) from exc
    raise AssertionError(suffix)  # check_data_file refused it


def check_data_file(path: Path, formats: tuple[str, ...]) -> None:
    """Refuse a ``--data-files`` path that is no regular file, or none of ``formats`` (suffixes)."""
    if path.is_dir():
        raise InputError(f"is a folder; --data-files takes a data file ({', '.join(formats)})",
                         path=str(path))
    if path.exists() and not path.is_file():
        raise InputError("is not a regular file (a FIFO, socket or device); give a data file",
                         path=str(path))
    if not path.is_file():
        raise InputError("data file not found", path=str(path))
    if path.suffix.lower() not in formats:
        raise InputError(f"unsupported data file type {path.suffix.lower()!r}; use one of {formats}",
                         path=str(path))


def _read_tsv(path: Path, spec: TaskSpec) -> pa.Table:
    if not spec.tsv_columns:
        raise InputError(f"task {spec.task!r} declares no tsv_columns, so a TSV file cannot be read; "
                         "pass JSONL or Parquet", path=str(path))
    cols = list(spec.tsv_columns)
    data: dict[str, list[str]] = {c: [] for c in cols}
    # utf-8-sig: a BOM at the start would otherwise be part of the first sentence, splitting its
    # question's candidates into two groups
    text = decode_utf8(read_regular_file(path, "TSV file", MAX_BENCHMARK_BYTES), path, "TSV file")
    # QUOTE_NONE: MC-TACO's release has bare quote characters inside sentences.
    rows = csv.reader(io.StringIO(text, newline=""), delimiter="\t", quoting=csv.QUOTE_NONE)
    for lineno, row in enumerate(rows, start=1):
        if not row or row == [""]:
            continue
        if len(row) != len(cols):
            raise InputError(f"expected {len(cols)} tab-separated columns {cols}, found {len(row)}",
                             path=str(path), line=lineno)
        for c, v in zip(cols, row, strict=False):
            data[c].append(v)
    return pa.table({c: pa.array(v, type=pa.string()) for c, v in data.items()})


def _read_json(path: Path) -> pa.Table:
    # a .json file holding one array; anything else is JSON Lines (read once, line by line)
    text = decode_utf8(read_regular_file(path, "JSON file", MAX_BENCHMARK_BYTES), path, "JSON file") \
        if path.suffix.lower() == ".json" else None
    if text is not None and text.lstrip().startswith("["):
        try:
            loaded = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"invalid JSON: {exc}", path=str(path)) from exc
        rows = list(loaded)
    else:
        rows = [row for _, row in iter_jsonl_objects(path)]
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise InputError("each record must be a JSON object", path=str(path), line=i + 1)
    if not rows:
        return pa.table({})
    # Union of keys in first-seen order; a row lacking a key gets null and check_fields names it.
    keys: list[str] = []
    for row in rows:
        for k in row:
            if k not in keys:
                keys.append(k)
    records = [{k: r.get(k) for k in keys} for r in rows]
    for k in keys:
        # Hand-made files mix label forms (1, "1", "yes"): scalar columns of mixed types become
        # strings, which normalize_labels then maps to ints.
        kinds = {type(r[k]) for r in records if r[k] is not None}
        if len(kinds) > 1 and kinds <= {int, str, bool, float}:
            for r in records:
                if r[k] is not None:
                    r[k] = str(r[k]) if not isinstance(r[k], bool) else str(int(r[k]))
    try:
        return pa.Table.from_pylist(records)
    except (pa.ArrowException, TypeError) as exc:
        raise InputError(f"records do not share one schema: {exc}", path=str(path)) from exc


# ---- hub ------------------------------------------------------------------------------------
def _load_hub(spec: TaskSpec, split: str) -> pa.Table:
    """``split`` of ``spec``'s hub dataset (``dataset_path``, then ``dataset_aliases``), loaded with
    ``datasets.load_dataset(path, dataset_name, split=split, **dataset_kwargs)``, as :func:`hub_table`
    maps it. An unreachable hub is one ``TcqaError`` naming the ``--data-files`` form instead."""
    if not spec.dataset_path:
        raise TcqaError(f"task {spec.task!r} names no dataset_path; pass a local file with "
                        f"--data-files {spec.task}:{split}=PATH")
    import datasets

    offline = bool(datasets.config.HF_HUB_OFFLINE)
    if not offline:
        # Asked once, without retries: datasets would retry each request for about 25 s, with a
        # warning per retry, before saying the same.
        problem = _hub_unreachable()
        if problem:
            raise TcqaError(_offline_message(spec, split, problem))
    errors: list[str] = []
    for path in (spec.dataset_path, *spec.dataset_aliases):
        try:
            ds = datasets.load_dataset(path, spec.dataset_name, split=split, **spec.dataset_kwargs)
        except ConnectionError as exc:  # datasets: "Couldn't reach '<path>' on the Hub (<cause>)"
            why = ("HF_HUB_OFFLINE is set and it is not in the datasets cache" if offline
                   else f"the hub did not answer: {_first_line(exc)}")
            raise TcqaError(_offline_message(spec, split, f"{path}: {why}")) from None
        except Exception as exc:  # noqa: BLE001 - any other failure: try the next name, then report all
            errors.append(f"{path}: {type(exc).__name__}: {_first_line(exc)}")
            continue
        return hub_table(spec, ds)
    raise TcqaError(
        f"cannot load split {split!r} of task {spec.task!r} from the Hugging Face hub ({'; '.join(errors)}). "
        f"Pass local files instead: --data-files {spec.task}:{split}={_example_path(spec, split)}"
    )


def hub_table(spec: TaskSpec, ds: Any) -> pa.Table:
    """A hub split (a ``datasets.Dataset``) as the table the local loaders give for the same rows.

    Parquet keeps a ``ClassLabel`` column as its int codes. The label field (a bare-name
    ``doc_to_target``) keeps ints, mapped through the class names into ``label_values`` when the
    spec has them (MC-TACO: names ["no", "yes"] -> 0, 1, as its TSV's yes/no); any other
    ``ClassLabel`` column becomes its class names, as the release files spell them (MC-TACO's
    ``category``). A missing code (-1) becomes null, which :func:`check_fields` reports.
    """
    import datasets

    table = ds.with_format("arrow")[:]
    label = spec.label_field()
    values = {k.lower(): int(v) for k, v in spec.label_values.items()}
    for name, feature in ds.features.items():
        if not isinstance(feature, datasets.ClassLabel) or name not in table.column_names:
            continue
        codes = table.column(name).to_pylist()
        names = list(feature.names)
        if name == label:
            if not values:
                continue
            unknown = sorted({n for n in names if n.lower() not in values})
            if unknown:
                raise InputError(f"task {spec.task!r}: class names {unknown} of the label are not in "
                                 f"label_values {sorted(values)}", field=name)
            col = pa.array([None if c is None or c < 0 else values[names[c].lower()] for c in codes],
                           type=pa.int64())
        else:
            col = pa.array([None if c is None or c < 0 else names[c] for c in codes], type=pa.string())
        table = table.set_column(table.column_names.index(name), name, col)
    return table


@lru_cache(maxsize=1)
def _hub_unreachable() -> str | None:
    """Why the Hugging Face hub cannot be reached (no network, a proxy that refuses), or None."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    try:
        get_session().head(constants.ENDPOINT, timeout=10)
    except Exception as exc:  # noqa: BLE001 - requests' or httpx's connection and timeout errors
        return f"{constants.ENDPOINT} is unreachable: {type(exc).__name__}"
    return None


def _offline_message(spec: TaskSpec, split: str, why: str) -> str:
    return (f"cannot load split {split!r} of task {spec.task!r} from the Hugging Face hub ({why}). "
            f"Without the hub, pass the split as a local file: --data-files {spec.task}:{split}="
            f"{_example_path(spec, split)}")


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else ""


def _example_path(spec: TaskSpec, split: str) -> str:
    if spec.task == "mc_taco":  # the release's file names (github.com/CogComp/MCTACO, dataset/)
        name = {"test": "test_9442.tsv", "validation": "dev_3783.tsv"}.get(split, f"{split}.tsv")
        return f"PATH/{name}"
    return f"PATH/{split}.jsonl"


# ---- checks and normalization ---------------------------------------------------------------
def check_fields(spec: TaskSpec, table: pa.Table, source: str) -> None:
    """Every field a template (or group_by) uses must be a column with no missing values."""
    users: dict[str, list[str]] = {}
    for name, template in spec._templates().items():
        for f in spec.template_fields(name):
            users.setdefault(f, []).append(f"{name} ({template!r})")
    for f in spec.group_by:
        users.setdefault(f, []).append("group_by")
    for f, where in users.items():
        if f not in table.column_names:
            raise InputError(
                f"task {spec.task!r}: template {', '.join(where)} uses field {f!r}, which this data "
                f"lacks; its fields are {table.column_names}", path=source, field=f)
        col = table.column(f)
        if col.null_count:
            row = next(i for i, v in enumerate(col.is_null().to_pylist()) if v)
            raise InputError(f"task {spec.task!r}: template {', '.join(where)} uses field {f!r}, "
                             f"missing in record {row + 1}", path=source, line=row + 1, field=f)


def normalize_labels(spec: TaskSpec, table: pa.Table, source: str) -> pa.Table:
    """Make the label field (a bare-name ``doc_to_target``) an int64 column.

    Accepts ints, bools, "1"/"0" and the spec's ``label_values`` names (MC-TACO: yes/no).
    """
    field = spec.label_field()
    if field is None or field not in table.column_names:
        return table
    col = table.column(field)
    names = {k.lower(): int(v) for k, v in spec.label_values.items()}
    if pa.types.is_integer(col.type):
        out_col = col.cast(pa.int64())
        _check_label_values(spec, out_col.to_pylist(), col.to_pylist(), source, field)
        return table.set_column(table.column_names.index(field), field, out_col)
    out: list[int] = []
    for i, v in enumerate(col.to_pylist()):
        if isinstance(v, bool):
            out.append(int(v))
        elif isinstance(v, int):
            out.append(v)
        elif isinstance(v, str) and v.strip().lower() in names:
            out.append(names[v.strip().lower()])
        elif isinstance(v, str) and v.strip().lstrip("-").isdigit():
            out.append(int(v.strip()))
        else:
            raise InputError(f"label {v!r} is not an int, 1/0 or one of {sorted(names)}",
                             path=source, line=i + 1, field=field)
    _check_label_values(spec, out, col.to_pylist(), source, field)
    return table.set_column(table.column_names.index(field), field, pa.array(out, type=pa.int64()))


def _check_label_values(spec: TaskSpec, labels: list[int | None], raw: list[Any], source: str,
                        field: str) -> None:
    """A task that names its labels (``label_values``; MC-TACO: yes/no) takes only those: any other
    value (2, -1) would pass here and fail much later in a metric (scikit-learn's "multiclass")."""
    if not spec.label_values:
        return
    allowed = sorted(set(int(v) for v in spec.label_values.values()))
    for i, (v, r) in enumerate(zip(labels, raw, strict=True)):
        if v not in allowed:
            named = ", ".join(f"{k} ({int(n)})"
                              for k, n in sorted(spec.label_values.items(), key=lambda x: x[1]))
            raise InputError(f"row {i + 1}: label {r!r} is not one of task {spec.task!r}'s labels: "
                             f"{named}", path=source, line=i + 1, field=field)


def group_ids(spec: TaskSpec, table: pa.Table) -> list[int]:
    """Group id per doc: index of its ``group_by`` key in order of first appearance (else doc id)."""
    if not spec.group_by:
        return list(range(table.num_rows))
    cols = [table.column(f).to_pylist() for f in spec.group_by]
    seen: dict[tuple, int] = {}
    out = []
    for key in zip(*cols, strict=False):
        out.append(seen.setdefault(key, len(seen)))
    return out
