"""Per-doc model outputs for analysis: from our `evaluate` folder or lm-eval 0.4 `--log_samples` files.

Whatever the source, the result is a :class:`ScoredSplit`: the prepared docs of one task split in
full order, and per doc what ``evaluate`` keeps (``gold``/``pred`` for multiple_choice, ``contains``
for generation). A task resolved through lm-eval (no task.yaml) has no TaskSpec: its per-doc values
are the metric values lm-eval logs (:mod:`tcqa_data.analysis.lm_eval_metrics`), and its docs are
verified field by field against full.parquet's rows. Docs are matched by ``doc_id`` and verified
by content against ``PREP_DIR/<task>/<split>/full.parquet``; anything that is not the same docs is
refused with a one-line error (other data, an lm-eval ``--limit`` run, a partial question group,
another task).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tcqa_data.analysis import lm_eval_metrics as LM
from tcqa_data.errors import InputError, TcqaError
from tcqa_data.eval import metrics as M
from tcqa_data.eval.tables import TaskTable
from tcqa_data.io_utils import iter_jsonl_objects, read_json_file
from tcqa_data.outputs import check_name
from tcqa_data.prep.lm_eval_export import lm_eval_task_name
from tcqa_data.prep.prepared import (
    TaskData,
    available_tasks,
    load_task,
    read_manifest,
    read_split,
    require_prep_dir,
    take_groups,
)

# lm-eval's EvaluationTracker names per-task sample logs samples_<task>_<date_id>.jsonl, where
# date_id is an ISO timestamp with ':' replaced by '-'.
SAMPLES_RE = re.compile(r"^samples_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[0-9.\-]+)\.jsonl$")


class NotPreparedError(TcqaError):
    """A samples file of an lm-eval task that PREP_DIR does not hold (or that --tasks leaves out)."""


@dataclass
class ScoredSplit:
    """The model's per-doc outputs on one prepared task split, in full.parquet order."""

    data: TaskData
    # gold/pred (multiple_choice) or contains (generate_until); for a task resolved through lm-eval
    # (data.spec None): metric name -> lm-eval's logged value (see lm_eval_metrics)
    per_doc: list[dict[str, Any]]
    source: dict[str, Any] = field(default_factory=dict)  # kind, path, limit_groups, ...
    metrics: list[LM.LoggedMetric] | None = None  # only for a task resolved through lm-eval
    skipped_metrics: dict[str, str] = field(default_factory=dict)  # name -> why not analyzed
    # evaluate's clean / full / dirty table of these outputs with its per-unit statistics and
    # resamples, when the analysis follows evaluate in one process (``tcqa_data.workflow``), so the
    # analysis computes none of them again; None: computed by the analysis
    evaluated: TaskTable | None = None

    @property
    def task(self) -> str:
        return self.data.task


# ---- the two sources --------------------------------------------------------------------------
def load_scored(prep_dir: str | Path, results: str | Path, tasks: list[str] | None = None,
                split: str | None = None, skipped: dict[str, str] | None = None) -> list[ScoredSplit]:
    """Read ``results`` (an evaluate folder, an lm-eval output folder, or one samples file).

    In a folder of several lm-eval samples files, those of tasks PREP_DIR does not hold (or that
    ``tasks`` leaves out) are left out and recorded in ``skipped`` (file -> reason); one file given
    alone is refused.
    """
    prep_dir = require_prep_dir(prep_dir)
    results = Path(results)
    if not results.exists():
        raise TcqaError(f"results {results} do not exist; give an `evaluate` output folder or lm-eval "
                        "--log_samples output (samples_<task>_<date>.jsonl)")
    if results.is_dir() and (results / "results.json").is_file() and (results / "samples.jsonl").is_file():
        return from_evaluate(prep_dir, results, tasks)
    files = [results] if results.is_file() else sorted(
        p for p in results.rglob("samples_*.jsonl") if SAMPLES_RE.match(p.name))
    if not files:
        raise TcqaError(f"{results}: neither an `evaluate` output folder (results.json + samples.jsonl) "
                        "nor lm-eval --log_samples output (samples_<task>_<date>.jsonl)")
    by_task: dict[str, list[Path]] = {}
    for f in files:
        m = SAMPLES_RE.match(f.name)
        if not m:
            raise InputError("not an lm-eval samples file (expected samples_<task>_<date>.jsonl)",
                             path=str(f))
        by_task.setdefault(m["task"], []).append(f)
    out = []
    for lm_task, paths in sorted(by_task.items()):
        if len(paths) > 1:
            raise TcqaError(f"{results}: {len(paths)} samples files of lm-eval task {lm_task!r} "
                            f"({', '.join(p.name for p in paths)}); pass the one to analyze")
        try:
            out.append(from_lm_eval(prep_dir, paths[0], tasks, split))
        except NotPreparedError as exc:
            if len(by_task) == 1 or skipped is None:
                raise
            skipped[str(paths[0])] = str(exc)
    if not out:
        raise TcqaError(f"{results}: no samples of a task prepared in {prep_dir}")
    if tasks:
        missing = sorted(set(tasks) - {s.task for s in out})
        if missing:
            raise TcqaError(f"{results}: no samples for task(s) {missing}")
    return out


def from_evaluate(prep_dir: Path, eval_dir: Path, tasks: list[str] | None = None) -> list[ScoredSplit]:
    """Our evaluate output: results.json (task, split, --limit-groups) + samples.jsonl (per doc)."""
    res = read_json_file(eval_dir / "results.json", "results.json")
    if not isinstance(res, dict):
        raise TcqaError(f"{eval_dir / 'results.json'}: not a JSON object; re-run `tcqa-data evaluate`")
    if (res.get("memorization") or {}).get("only"):
        raise TcqaError(f"{eval_dir}: evaluated with --memorization-only, so the docs have no task metric; "
                        "analysis needs one (re-run evaluate without --memorization-only)")
    if res.get("clean_only"):
        raise TcqaError(f"{eval_dir}: evaluated with --clean-only, so the dirty docs have no model "
                        "output; analysis needs every doc (re-run evaluate without --clean-only)")
    rows: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    path = eval_dir / "samples.jsonl"
    for line_no, rec in _jsonl(path):
        for key in ("task", "doc_id"):
            if key not in rec:
                raise InputError("missing key", path=str(path), line=line_no, field=key)
        rows.setdefault(str(rec["task"]), []).append((line_no, rec))
    out = []
    for task, entry in res.get("tasks", {}).items():
        if tasks and task not in tasks:
            continue
        # names read from results.json become PREP_DIR paths: refused unless plain folder names
        where = str(eval_dir / "results.json")
        split = entry.get("split")
        data = load_task(prep_dir, check_name(task, "task name", where),
                         None if split is None else check_name(split, "split name", where))
        by_id = _unique_by_doc_id(rows.get(task, []), path)
        if not by_id:
            raise TcqaError(f"{path}: no samples of task {task!r}, which results.json lists")
        # evaluate may score whole groups only (--limit-groups, --sample-groups): keep those groups,
        # and refuse any group that is cut
        n_groups = len({int(d["group_id"]) for d in data.docs})
        scored_groups = {int(d["group_id"]) for d in data.docs if int(d["doc_id"]) in by_id}
        if len(scored_groups) < n_groups:
            data = take_groups(data, scored_groups)
        _check_coverage(data, by_id, path, what="evaluate output", hint="")
        per_doc = []
        for doc in data.docs:
            line_no, rec = by_id[int(doc["doc_id"])]
            if int(rec.get("group_id", doc["group_id"])) != int(doc["group_id"]):
                raise InputError(f"doc_id {doc['doc_id']}: group_id {rec.get('group_id')} but "
                                 f"{data.path / 'full.parquet'} says {doc['group_id']}: other data",
                                 path=str(path), line=line_no, field="group_id")
            per_doc.append(_ours_per_doc(data, doc, rec, path, line_no))
            if isinstance(rec.get("memorization"), dict):  # the model-side scores, when evaluate made them
                per_doc[-1]["memorization"] = rec["memorization"]
                if isinstance(rec.get("memorization_context"), dict):  # which tokens: prompt|standalone
                    per_doc[-1]["memorization_context"] = rec["memorization_context"]
        out.append(ScoredSplit(data, per_doc, {"kind": "tcqa-evaluate", "path": str(eval_dir),
                                               "groups_scored": len(scored_groups),
                                               "groups_prepared": n_groups,
                                               "model": (res.get("model") or {}).get("name")}))
    if tasks:
        missing = sorted(set(tasks) - {s.task for s in out})
        if missing:
            raise TcqaError(f"{eval_dir}: evaluate did not score task(s) {missing}")
    if not out:
        raise TcqaError(f"{eval_dir}/results.json lists no tasks")
    return out


def _ours_per_doc(data: TaskData, doc: dict[str, Any], rec: dict[str, Any], path: Path,
                  line_no: int) -> dict[str, Any]:
    spec = data.spec
    if spec.output_type == "multiple_choice":
        for key in ("pred", "gold"):
            if key not in rec:
                raise InputError("missing key", path=str(path), line=line_no, field=key)
        if int(rec["gold"]) != spec.target_index(doc):
            raise InputError(f"doc_id {doc['doc_id']}: gold {rec['gold']} but the prepared doc's target is "
                             f"{spec.target_index(doc)}: other data", path=str(path), line=line_no,
                             field="gold")
        return {"gold": int(rec["gold"]), "pred": int(rec["pred"])}
    if "contains" not in rec:
        raise InputError("missing key", path=str(path), line=line_no, field="contains")
    if rec.get("target") is not None and str(rec["target"]) != spec.target(doc).strip():
        raise InputError(f"doc_id {doc['doc_id']}: target differs from the prepared doc's: other data",
                         path=str(path), line=line_no, field="target")
    return {"contains": int(rec["contains"])}


def from_lm_eval(prep_dir: Path, path: Path, tasks: list[str] | None = None,
                 split: str | None = None) -> ScoredSplit:
    """One lm-eval 0.4 ``samples_<task>_<date>.jsonl`` (written with ``--log_samples``)."""
    m = SAMPLES_RE.match(path.name)
    lm_task = m["task"] if m else path.stem
    task, split, which = _prepared_task_of(prep_dir, lm_task, tasks, split, path)
    if which == "clean":
        raise TcqaError(f"{path}: samples of the clean split ({lm_task}); analysis needs every doc: run "
                        f"lm_eval on {lm_eval_task_name(task, split, 'full')} instead")
    if task in lm_eval_sourced_tasks(prep_dir):
        return _from_lm_eval_logged(prep_dir, path, task, split, lm_task)
    data = load_task(prep_dir, task, split)
    records: list[tuple[int, dict[str, Any]]] = []
    for line_no, rec in _jsonl(path):
        for key in ("doc_id", "doc", "filtered_resps"):
            if key not in rec:
                raise InputError("missing key (not an lm-eval 0.4 samples file?)", path=str(path),
                                 line=line_no, field=key)
        records.append((line_no, rec))
    by_id = _matched_samples(data, _one_filter(records, path), path, _verify_doc, "lm-eval samples")
    per_doc = [_lm_eval_per_doc(data, d, *by_id[int(d["doc_id"])], path) for d in data.docs]
    n_groups = len({int(d["group_id"]) for d in data.docs})
    return ScoredSplit(data, per_doc, {"kind": "lm-eval", "path": str(path), "lm_eval_task": lm_task,
                                       "groups_scored": n_groups, "groups_prepared": n_groups})


def lm_eval_sourced_tasks(prep_dir: Path) -> set[str]:
    """Prepared tasks resolved through lm-eval (prep_manifest.json ``tasks.<task>.source.lm_eval_task``):
    no task.yaml, so analyzed from the metric values lm-eval logs."""
    manifest = read_manifest(prep_dir) or {}
    return {t for t, e in (manifest.get("tasks") or {}).items()
            if isinstance(e, dict) and (e.get("source") or {}).get("lm_eval_task")
            and (prep_dir / t).is_dir()}


def load_lm_eval_sourced(prep_dir: Path, task: str, split: str | None) -> TaskData:
    """The prepared docs of a task resolved through lm-eval (no TaskSpec: ``spec`` is None)."""
    task_dir = prep_dir / check_name(task, "task name", "prep_manifest.json or --task")
    present = sorted(p.parent.name for p in task_dir.glob("*/full.parquet"))
    if split is None and len(present) == 1:
        split = present[0]
    if split not in present:
        raise TcqaError(f"{task_dir}: no prepared split {split!r}; present: {present}"
                        + ("; pass --splits" if split is None else ""))
    return read_split(task, split, None, task_dir / split)


def _from_lm_eval_logged(prep_dir: Path, path: Path, task: str, split: str | None,
                         lm_task: str) -> ScoredSplit:
    """Samples of a task resolved through lm-eval: per doc and filter, the metric values lm-eval logs."""
    data = load_lm_eval_sourced(prep_dir, task, split)
    by_filter: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for line_no, rec in _jsonl(path):
        for key in ("doc_id", "doc"):
            if key not in rec:
                raise InputError("missing key (not an lm-eval 0.4 samples file?)", path=str(path),
                                 line=line_no, field=key)
        by_filter.setdefault(str(rec.get("filter", LM.NO_FILTER)), []).append((line_no, rec))
    if not by_filter:
        raise TcqaError(f"{path}: no samples")
    by_id_of = {f: _matched_samples(data, records, path, _verify_logged_doc,
                                    f"lm-eval samples (filter {f!r})") for f, records in by_filter.items()}
    _, first = next(iter(by_id_of[next(iter(by_id_of))].values()))
    declared = LM.declared_aggregations(data.path, task, data.split)
    logged = first.get("metrics")
    if not isinstance(logged, list):  # lm-eval versions that do not list them: the declared ones present
        logged = [m for m in (declared or {}) if m in first]
    # filters in lm-eval's order (first appearance); the first metric is the primary one
    metrics, skipped = LM.choose_metrics([str(m) for m in logged], list(by_filter), declared)
    if not metrics:
        raise TcqaError(f"{path}: no metric of task {task!r} can be analyzed"
                        + (f" ({'; '.join(f'{k}: {v}' for k, v in skipped.items())})" if skipped else
                           " (the samples log no metric values)"))
    per_doc: list[dict[str, Any]] = [{} for _ in data.docs]
    for m in metrics:
        by_id = by_id_of[m.filter]
        for i, d in enumerate(data.docs):
            line_no, rec = by_id[int(d["doc_id"])]
            value = LM.doc_value(m, rec.get(m.metric))
            if value is None:
                raise InputError(f"doc_id {d['doc_id']}: {m.metric} is {rec.get(m.metric)!r}, not a value "
                                 f"its {m.aggregation!r} aggregation takes", path=str(path), line=line_no,
                                 field=m.metric)
            per_doc[i][m.name] = value
    n_groups = len({int(d["group_id"]) for d in data.docs})
    return ScoredSplit(data, per_doc, {"kind": "lm-eval (logged metric values)", "path": str(path),
                                       "lm_eval_task": lm_task, "groups_scored": n_groups,
                                       "groups_prepared": n_groups},
                       metrics=metrics, skipped_metrics=skipped)


def _verify_logged_doc(data: TaskData, ours: dict[str, Any], theirs: Any, path: Path, line_no: int) -> None:
    """The sample's doc must be the prepared doc: every field of full.parquet's row agrees (doc_id and
    group_id only where lm-eval logged them: a run of the original task has neither)."""
    if not isinstance(theirs, dict):
        raise InputError("'doc' is not an object", path=str(path), line=line_no, field="doc")
    for f, value in ours.items():
        if f not in theirs:
            if f in ("doc_id", "group_id"):
                continue
            raise InputError(f"doc_id {ours['doc_id']}: the sample's doc has no field {f!r}, which "
                             f"{data.path / 'full.parquet'} has: samples of another task?",
                             path=str(path), line=line_no, field=f)
        if not _same_json(theirs[f], value):
            raise InputError(f"doc_id {ours['doc_id']}: {_short(theirs[f])} differs from {_short(value)} in "
                             f"{data.path / 'full.parquet'}: other data or another task",
                             path=str(path), line=line_no, field=f)


def _same_json(a: Any, b: Any) -> bool:
    """Equal as JSON values (a Parquet struct holds every key: a missing key equals null)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return all(_same_json(a.get(k), b.get(k)) for k in a.keys() | b.keys())
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    return _same_value(a, b)


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _prepared_task_of(prep_dir: Path, lm_task: str, tasks: list[str] | None, split: str | None,
                      path: Path) -> tuple[str, str | None, str]:
    """(task, split, which) for an lm-eval task name: an exported YAML's, a prepared task's own name,
    or, with exactly one task asked for, that task."""
    names = sorted({*available_tasks(prep_dir), *lm_eval_sourced_tasks(prep_dir)})
    for t in names:
        for split_dir in sorted((prep_dir / t).glob("*/full.parquet")):
            s = split_dir.parent.name
            for which in ("full", "clean"):
                if lm_task == lm_eval_task_name(t, s, which):
                    if tasks and t not in tasks:
                        # an exported task's samples are that task's: never analyzed as another
                        raise NotPreparedError(f"{path}: samples of {lm_task}, the exported task of "
                                               f"prepared task {t!r}, which --tasks {tasks} leaves out")
                    return t, s, which
    if lm_task in names and (not tasks or lm_task in tasks):
        return lm_task, split, "full"
    if tasks and len(tasks) == 1 and tasks[0] in names:
        return tasks[0], split, "full"
    exported = [lm_eval_task_name(t, p.parent.name, "full")
                for t in names for p in sorted((prep_dir / t).glob("*/full.parquet"))]
    raise NotPreparedError(f"{path}: samples of lm-eval task {lm_task!r}, which is not prepared in "
                           f"{prep_dir} (tasks {names or 'none'}; exported full-split tasks {exported}); "
                           "pass --tasks to name the prepared task it ran on")


def _verify_doc(data: TaskData, ours: dict[str, Any], theirs: Any, path: Path, line_no: int) -> None:
    """The sample's doc must be the prepared doc: every field the task's templates read agrees."""
    if not isinstance(theirs, dict):
        raise InputError("'doc' is not an object", path=str(path), line=line_no, field="doc")
    for f in data.spec.required_fields():
        if f not in theirs:
            raise InputError(f"doc_id {ours['doc_id']}: the sample's doc has no field {f!r} that task "
                             f"{data.task!r} reads: samples of another task?", path=str(path), line=line_no,
                             field=f)
        if not _same_value(theirs[f], ours.get(f)):
            raise InputError(f"doc_id {ours['doc_id']}: {theirs[f]!r} differs from {ours.get(f)!r} in "
                             f"{data.path / 'full.parquet'}: other data or another task",
                             path=str(path), line=line_no, field=f)


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b) or (math.isnan(float(a)) and math.isnan(float(b)))
    return a == b or str(a) == str(b)


def _lm_eval_per_doc(data: TaskData, doc: dict[str, Any], line_no: int, rec: dict[str, Any],
                     path: Path) -> dict[str, Any]:
    """What lm-eval's metrics see, recomputed from the logged responses as lm-eval computes them."""
    spec = data.spec
    resps = rec["filtered_resps"]
    if spec.output_type == "multiple_choice":
        choices = spec.choices(doc)
        try:
            # a loglikelihood response is (logprob, is_greedy), logged as strings
            lls = [float(r[0] if isinstance(r, (list, tuple)) else r) for r in resps]
        except (TypeError, ValueError, IndexError) as exc:
            raise InputError(f"cannot read loglikelihoods: {exc}", path=str(path), line=line_no,
                             field="filtered_resps") from None
        if len(lls) != len(choices):
            raise InputError(f"{len(lls)} responses for {len(choices)} choices: another task?",
                             path=str(path), line=line_no, field="filtered_resps")
        pred = int(np.argmax(lls))  # lm-eval's acc: the first maximum
        gold = spec.target_index(doc)
        if "acc" in rec and int(float(rec["acc"])) != int(pred == gold):
            raise InputError(f"doc_id {doc['doc_id']}: lm-eval's acc {rec['acc']} disagrees with the "
                             f"prepared doc's gold answer {gold}: other data", path=str(path),
                             line=line_no, field="acc")
        return {"gold": gold, "pred": pred}
    if spec.output_type == "generate_until":
        if not isinstance(resps, list) or len(resps) != 1 or not isinstance(resps[0], str):
            raise InputError("expected one generation", path=str(path), line=line_no, field="filtered_resps")
        return {"contains": M.contains_score(resps[0], spec.target(doc).strip())}
    raise TcqaError(f"task {spec.task!r}: output_type {spec.output_type!r} cannot be analyzed")


# ---- shared checks ------------------------------------------------------------------------------
def _matched_samples(data: TaskData, records: list[tuple[int, dict[str, Any]]], path: Path,
                     verify: Callable[[TaskData, dict[str, Any], Any, Path, int], None],
                     what: str) -> dict[int, tuple[int, dict[str, Any]]]:
    """lm-eval samples by doc_id, each verified against its prepared doc, covering the whole split."""
    by_id = _unique_by_doc_id(records, path)
    full_path = data.path / "full.parquet"
    # content first: samples of another task or other data fail here, before any coverage message
    doc_of = {int(d["doc_id"]): d for d in data.docs}
    for doc_id, (line_no, rec) in by_id.items():
        ours = doc_of.get(doc_id)
        if ours is None:
            raise InputError(f"doc_id {doc_id} is not in {full_path} ({len(data.docs)} docs): other data",
                             path=str(path), line=line_no, field="doc_id")
        verify(data, ours, rec["doc"], path, line_no)
    _check_coverage(data, by_id, path, what=what, hint="")
    return by_id


def _jsonl(path: Path):
    if not path.is_file():
        raise TcqaError(f"{path} is missing")
    yield from iter_jsonl_objects(path)


def _one_filter(records: list[tuple[int, dict[str, Any]]], path: Path) -> list[tuple[int, dict[str, Any]]]:
    """lm-eval logs one record per doc and filter; keep filter 'none' when there are several."""
    filters = sorted({str(r.get("filter", "none")) for _, r in records})
    if len(filters) <= 1:
        return records
    if "none" not in filters:
        raise TcqaError(f"{path}: samples of several filters {filters} and none named 'none'; "
                        "analysis needs one response per doc")
    return [(n, r) for n, r in records if str(r.get("filter", "none")) == "none"]


def _unique_by_doc_id(records: list[tuple[int, dict[str, Any]]], path: Path
                      ) -> dict[int, tuple[int, dict[str, Any]]]:
    out: dict[int, tuple[int, dict[str, Any]]] = {}
    for line_no, rec in records:
        try:
            doc_id = int(rec["doc_id"])
        except (TypeError, ValueError):
            raise InputError(f"doc_id {rec['doc_id']!r} is not an integer", path=str(path), line=line_no,
                             field="doc_id") from None
        if doc_id in out:
            raise InputError(f"doc_id {doc_id} appears twice (also line {out[doc_id][0]}); two runs "
                             "appended to one file?", path=str(path), line=line_no, field="doc_id")
        out[doc_id] = (line_no, rec)
    return out


def _check_coverage(data: TaskData, by_id: dict[int, Any], path: Path, what: str, hint: str) -> None:
    """Every prepared doc must have an output, and no output may lack a prepared doc."""
    full_path = data.path / "full.parquet"
    if not data.docs:
        raise TcqaError(f"{full_path} holds no docs: nothing to analyze")
    want = {int(d["doc_id"]) for d in data.docs}
    extra = sorted(set(by_id) - want)
    if extra:
        line_no = by_id[extra[0]][0]
        raise InputError(f"doc_id {extra[0]} is not among the {len(want)} prepared docs of {full_path}: "
                         "other data", path=str(path), line=line_no, field="doc_id")
    missing = sorted(want - set(by_id))
    if not missing:
        return
    have = sorted(by_id)
    if not have:
        raise TcqaError(f"{path}: no {what} for task {data.task!r}")
    # which groups are cut: a group with some but not all of its docs scored
    gid_of = {int(d["doc_id"]): int(d["group_id"]) for d in data.docs}
    seen_groups = {gid_of[i] for i in have}
    cut = sorted({gid_of[i] for i in missing} & seen_groups)
    if have == list(range(len(have))):
        cause = (f"only doc_id 0..{len(have) - 1} of {len(want)}: an lm-eval --limit run? "
                 "analysis needs the whole split")
    elif cut:
        cause = f"question group {cut[0]} is partial ({len(cut)} groups cut); analysis needs whole groups"
    else:
        cause = f"{len(have)} of {len(want)} docs; analysis needs the whole split"
    raise TcqaError(f"{path}: {what} cover {cause} (first missing doc_id {missing[0]}"
                    + (f"; {hint}" if hint else "") + f"; prepared split {full_path})")
