"""`evaluate`: score a model on the prepared full / clean / dirty splits in one pass."""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from tcqa_data import FORMAT_VERSION, __version__
from tcqa_data.errors import ConfigError, TcqaError
from tcqa_data.eval import metrics as M
from tcqa_data.eval.models import LoadedModel, load_model
from tcqa_data.eval.scoring import (
    Engine,
    LLRequest,
    encode_pairs,
    generate_until,
    loglikelihoods,
    tok_encode_batch,
)
from tcqa_data.io_utils import read_json
from tcqa_data.outputs import check_name, safe_model_dirname, staged_output
from tcqa_data.prep.taskspec import TaskSpec
from tcqa_data.progress import note, progress_bar, progress_enabled, rate_text, stage

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


# ---- reading PREP_DIR ------------------------------------------------------------------------
def require_prep_dir(prep_dir: str | Path) -> Path:
    """``prep_dir`` as a Path; an error naming the fix where the folder does not exist."""
    prep_dir = Path(prep_dir)
    if not prep_dir.is_dir():
        raise TcqaError(f"prepared folder {prep_dir} does not exist; run `tcqa-data decontaminate` first")
    return prep_dir


def read_manifest(prep_dir: Path) -> dict[str, Any] | None:
    path = prep_dir / "prep_manifest.json"
    if not path.exists():
        return None
    manifest = read_json(path)
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
        tables[name] = pq.read_table(d / f"{name}.parquet")
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


def _group_order(data: TaskData) -> tuple[list[int], set[int]]:
    """Group ids in order of first appearance, and the dirty ones (a group with any dirty doc)."""
    order: list[int] = []
    seen: set[int] = set()
    dirty: set[int] = set()
    for d, c in zip(data.docs, data.clean, strict=True):
        g = int(d["group_id"])
        if g not in seen:
            seen.add(g)
            order.append(g)
        if not c:
            dirty.add(g)
    return order, dirty


def _sample(rng: np.random.Generator, groups: list[int], k: int) -> list[int]:
    if k >= len(groups):
        return list(groups)
    return [groups[i] for i in sorted(rng.choice(len(groups), size=k, replace=False).tolist())]


def select_groups(data: TaskData, *, clean_only: bool = False, limit_groups: int | None = None,
                  sample_groups: int | None = None, sample_seed: int = 0) -> tuple[TaskData, dict[str, Any]]:
    """The docs to evaluate and a record of how they were chosen (results.json's ``selection``).

    With ``clean_only`` only clean docs are candidates, so ``limit_groups`` N means the first N
    clean groups. ``sample_groups`` N takes every dirty group (at most half of N when there are
    more; then a seeded sample of them) and a seeded sample of clean groups for the rest, in the
    split's order: a small run that still has a dirty slice to compare.
    """
    if limit_groups is not None and sample_groups is not None:
        raise ConfigError("--limit-groups and --sample-groups choose the groups in two ways; give one")
    for opt, n in (("--limit-groups", limit_groups), ("--sample-groups", sample_groups)):
        if n is not None and n < 1:
            raise ConfigError(f"{opt} must be a positive number of groups, not {n}")
    if clean_only:
        keep = np.flatnonzero(data.clean)
        data = TaskData(data.task, data.split, data.spec, [data.docs[i] for i in keep], data.clean[keep],
                        data.path)
    order, dirty = _group_order(data)
    clean_groups = [g for g in order if g not in dirty]
    dirty_groups = [g for g in order if g in dirty]
    pool = "clean groups" if clean_only else "groups"
    record: dict[str, Any] = {"method": "all", "clean_only": clean_only,
                              "groups_available": len(order), "dirty_groups_available": len(dirty_groups)}
    if limit_groups is not None:
        taken = order[:limit_groups]
        record.update(method="first", requested=limit_groups)
        how = f"first {len(taken):,} of {len(order):,} {pool}"
    elif sample_groups is not None:
        rng = np.random.default_rng(sample_seed)
        n_dirty = min(len(dirty_groups), max(sample_groups - len(clean_groups), sample_groups // 2))
        took_dirty = _sample(rng, dirty_groups, n_dirty)
        took_clean = _sample(rng, clean_groups, sample_groups - len(took_dirty))
        picked = set(took_dirty) | set(took_clean)
        taken = [g for g in order if g in picked]
        record.update(method="sample", requested=sample_groups, seed=sample_seed)
        every = "all" if len(took_dirty) == len(dirty_groups) else f"{len(took_dirty):,} of"
        how = f"seeded sample (seed {sample_seed}) of {len(taken):,} of {len(order):,} {pool}"
        if not clean_only:
            how += (f": {every} {len(dirty_groups):,} dirty + {len(took_clean):,} of "
                    f"{len(clean_groups):,} clean")
    else:
        taken = order
        how = f"all {len(order):,} {pool}"
    if taken is not order:
        data = take_groups(data, taken)
        record["group_ids"] = taken
    record.update(groups=len(taken), dirty_groups=sum(1 for g in taken if g in dirty), docs=len(data.docs))
    record["description"] = f"{how}; {len(data.docs):,} docs"
    return data, record


def describe_groups(group_ids: list[int], limit: int = 12) -> str:
    """'0-19, 25, 31-40, ...' for a log line (results.json has the full list)."""
    runs: list[str] = []
    start = prev = None
    for g in [*sorted(group_ids), None]:
        if g is not None and prev is not None and g == prev + 1:
            prev = g
            continue
        if start is not None:
            runs.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = g
    return ", ".join(runs[:limit]) + (f", ... ({len(runs) - limit} more runs)" if len(runs) > limit else "")


# ---- running one task ----------------------------------------------------------------------
def is_mc_taco(spec: TaskSpec) -> bool:
    return spec.task.startswith("mc_taco")


def score_multiple_choice(engine: Engine, spec: TaskSpec, docs: list[dict[str, Any]],
                          progress: Any = None) -> list[dict[str, Any]]:
    """Per doc: loglikelihood of each choice, greedy flags, argmax prediction, gold index."""
    pairs, owners, shares = [], [], []
    for i, doc in enumerate(docs):
        ctx = spec.text(doc)
        for c in spec.choices(doc):
            pairs.append((ctx, spec.target_delimiter + c))
            owners.append(i)
            shares.append(int(doc["group_id"]))
    enc = encode_pairs(engine.tokenizer, pairs)
    reqs = [LLRequest(c, k, s) for (c, k), s in zip(enc, shares, strict=True)]
    res = loglikelihoods(engine, reqs, progress=progress)
    out: list[dict[str, Any]] = [{"loglikelihoods": [], "is_greedy": []} for _ in docs]
    for i, (ll, greedy) in zip(owners, res, strict=True):
        out[i]["loglikelihoods"].append(ll)
        out[i]["is_greedy"].append(greedy)
    for doc, o in zip(docs, out, strict=True):
        o["pred"] = int(np.argmax(o["loglikelihoods"]))  # first max on ties, as np.argmax in lm-eval
        o["gold"] = spec.target_index(doc)
        o["correct"] = int(o["pred"] == o["gold"])
    return out


def score_generation(engine: Engine, spec: TaskSpec, docs: list[dict[str, Any]],
                     progress: Any = None) -> list[dict[str, Any]]:
    gk = dict(spec.generation_kwargs)
    until = gk.get("until", ["\n"])
    until = [until] if isinstance(until, str) else list(until)
    if gk.get("do_sample"):
        raise ConfigError(f"task {spec.task!r} asks for sampling; only greedy generation is supported")
    max_gen = int(gk.get("max_gen_toks", 48))
    ctxs = tok_encode_batch(engine.tokenizer, [spec.text(d) for d in docs], for_generation=True)
    gens = generate_until(engine, ctxs, until, max_gen, progress=progress)
    out = []
    for doc, g in zip(docs, gens, strict=True):
        target = spec.target(doc).strip()
        out.append({"generation": g, "target": target, "contains": M.contains_score(g, target)})
    return out


def group_units(group_ids: np.ndarray) -> tuple[np.ndarray, int]:
    """Bootstrap units: whole groups (MC-TACO questions), numbered 0..n-1 in order of first
    appearance; returns (unit per doc, number of units)."""
    _, first = np.unique(group_ids, return_index=True)
    order = group_ids[np.sort(first)]
    unit_of = {int(g): u for u, g in enumerate(order)}
    return np.array([unit_of[int(g)] for g in group_ids], dtype=np.int64), len(order)


def task_metrics(spec: TaskSpec, docs: list[dict[str, Any]], per_doc: list[dict[str, Any]],
                 clean: np.ndarray, bootstrap: int, seed: int) -> dict[str, Any]:
    """Metrics for full / clean / dirty with bootstrap intervals and the clean - full difference."""
    group_ids = np.array([int(d["group_id"]) for d in docs], dtype=np.int64)
    units, n_units = group_units(group_ids)
    stats, points = task_stats(spec, per_doc, group_ids, units, n_units)
    return subset_table(group_ids, clean, stats, points, bootstrap, seed)


def task_stats(spec: TaskSpec, per_doc: list[dict[str, Any]], group_ids: np.ndarray, units: np.ndarray,
               n_units: int) -> tuple[dict[str, np.ndarray], dict[str, Callable[[np.ndarray], float]]]:
    """Per metric of the task (``task_metric_names``): its per-unit statistics (``units``, ``n_units``:
    ``group_units(group_ids)``; see ``metrics.unit_stats``) and its point value on a doc mask (the
    reference implementation), as ``subset_table`` and the analysis take them."""
    names = task_metric_names(spec)
    if spec.output_type == "multiple_choice":
        gold = np.array([o["gold"] for o in per_doc], dtype=np.int64)
        pred = np.array([o["pred"] for o in per_doc], dtype=np.int64)
        points = {
            M.LM_ACC: lambda m: M.accuracy(gold[m], pred[m]),
            M.LM_F1: lambda m: M.pooled_f1(gold[m], pred[m]),
            M.OFFICIAL_STRICT_ACC: lambda m: M.official_strict_acc(gold[m] == 1, pred[m] == 1, group_ids[m]),
            M.OFFICIAL_F1: lambda m: M.official_f1(gold[m] == 1, pred[m] == 1, group_ids[m]),
        }
        scores = None
    else:
        gold = pred = np.zeros(len(per_doc), dtype=np.int64)
        scores = np.array([o["contains"] for o in per_doc], dtype=float)
        points = {M.LM_CONTAINS: lambda m: float(scores[m].mean()) if m.any() else float("nan")}
    stats = {name: M.unit_stats(name, gold, pred, units, n_units, scores) for name in names}
    return stats, points


def subset_table(group_ids: np.ndarray, clean: np.ndarray, stats: dict[str, np.ndarray],
                 points: dict[str, Callable[[np.ndarray], float]], bootstrap: int,
                 seed: int) -> dict[str, Any]:
    """The full / clean / dirty table: per metric (``stats``: per-unit statistics, see
    ``metrics.unit_stats``) the group-bootstrap intervals, with point values from ``points[metric]``
    (a function of a doc mask: the reference implementation), and the paired clean - full difference."""
    units, n_units = group_units(group_ids)
    unit_clean = np.zeros(n_units, dtype=bool)
    unit_clean[units[clean]] = True
    subsets = {"full": np.ones(n_units, dtype=bool), "clean": unit_clean, "dirty": ~unit_clean}
    weights = M.bootstrap_weights(n_units, bootstrap, seed)
    doc_masks = {"full": np.ones(len(group_ids), dtype=bool), "clean": clean, "dirty": ~clean}
    names = list(stats)
    per_metric = {}
    for name in names:
        summary = M.summarize(name, stats[name], subsets, weights)
        # point values from the reference implementations (sklearn, CogComp's rules, lm-eval's mean)
        for sub in SUBSETS:
            m = doc_masks[sub]
            v = points[name](m) if m.any() else float("nan")
            summary[sub]["value"] = None if not np.isfinite(v) else float(v)
        c, f = summary["clean"]["value"], summary["full"]["value"]
        summary["clean_minus_full"]["value"] = None if c is None or f is None else c - f
        per_metric[name] = summary

    out: dict[str, Any] = {"subsets": {}, "clean_minus_full": {}}
    for sub in SUBSETS:
        m = doc_masks[sub]
        out["subsets"][sub] = {
            "docs": int(m.sum()),
            "groups": int(len(np.unique(group_ids[m]))),
            "metrics": {name: per_metric[name][sub] for name in names},
        }
    out["clean_minus_full"] = {name: per_metric[name]["clean_minus_full"] for name in names}
    return out


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"python": platform.python_version(), "tcqa-data": __version__}
    for pkg in ("torch", "transformers", "accelerate", "gguf", "numpy", "scikit-learn", "tokenizers"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out


def _upstream(manifest: dict[str, Any] | None) -> dict[str, Any] | None:
    if manifest is None:
        return None
    # the whole manifest: index summary, rule, n-gram per task, counts (small, and all of it matters)
    return dict(manifest)


def default_output(prep_dir: Path, model_name: str) -> Path:
    # a model named ".." or "/abs/path" must still land in a folder of its own under PREP_DIR/eval
    return prep_dir / "eval" / safe_model_dirname(model_name)


def evaluate(prep_dir: str | Path, model: str | LoadedModel, tasks: list[str] | None = None,
             clean_only: bool = False, device: str = "auto", dtype: str = "auto",
             batch_size: int | str = "auto", output: str | Path | None = None,
             limit_groups: int | None = None, *, gguf_file: str | None = None,
             trust_remote_code: bool = False, split: str | None = None, bootstrap: int = M.BOOTSTRAP_SAMPLES,
             seed: int = M.BOOTSTRAP_SEED, quiet: bool = False, write: bool = True,
             packing: bool | None = None, sample_groups: int | None = None,
             sample_seed: int = 0) -> dict[str, Any]:
    """Score ``model`` on the prepared tasks in ``prep_dir``; write results to ``output``.

    ``limit_groups`` (the first N groups) or ``sample_groups`` (every dirty group plus a seeded
    sample of clean ones, see ``select_groups``) evaluate part of each split; with ``clean_only``
    both choose among the clean groups. What was taken is printed and recorded per task.

    The model runs once over full = clean + dirty (or only the clean docs with ``clean_only``);
    every subset's metrics are sliced from that one pass. Returns the results.json object, with
    the per-doc samples under the key ``"_samples"`` (not written into results.json).
    """
    prep_dir = require_prep_dir(prep_dir)
    manifest = read_manifest(prep_dir)
    names = tasks or available_tasks(prep_dir)
    if not names:
        raise TcqaError(f"{prep_dir} holds no prepared tasks (no */task.yaml)")
    datas, selections = [], {}
    for t in names:
        data, selections[t] = select_groups(load_task(prep_dir, t, split), clean_only=clean_only,
                                            limit_groups=limit_groups, sample_groups=sample_groups,
                                            sample_seed=sample_seed)
        datas.append(data)
    for data in datas:
        task_metric_names(data.spec)  # refuse unsupported metrics before the model loads
    for data in datas:
        record = selections[data.task]
        which = f" (group_id {describe_groups(record['group_ids'])})" if "group_ids" in record else ""
        note(f"{data.task} ({data.split}): {record['description']}{which}", quiet)

    t0 = time.perf_counter()
    what = model.name if isinstance(model, LoadedModel) else str(model if gguf_file is None
                                                                 else Path(model) / gguf_file)
    with stage(f"loading model {what}", quiet):
        lm = model if isinstance(model, LoadedModel) else load_model(
            model, gguf_file=gguf_file, device=device, dtype=dtype, trust_remote_code=trust_remote_code,
            show_progress=progress_enabled(quiet))
        engine = Engine(lm, batch_size, packing=packing)
    load_s = time.perf_counter() - t0

    results: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "model": {"name": lm.name, "source": lm.source, "gguf_file": lm.gguf_file, "device": str(lm.device),
                  "dtype": str(lm.dtype).replace("torch.", ""), "max_length": lm.max_length,
                  "batch_size": batch_size, "packing": engine.packing, **lm.info},
        "versions": _versions(),
        "upstream": _upstream(manifest),
        "prep_dir": str(prep_dir),
        "clean_only": clean_only,
        "limit_groups": limit_groups,
        "sample_groups": None if sample_groups is None else {"groups": sample_groups, "seed": sample_seed},
        "bootstrap": {"samples": bootstrap, "seed": seed, "level": M.LEVEL, "unit": M.BOOTSTRAP_UNIT,
                      "difference": "paired: clean and full from the same resample of full's groups"},
        "metric_families": {
            "lm_eval": "lm-evaluation-harness 0.4: acc per candidate, f1 = sklearn binary F1 pooled "
                       "over candidates (yes positive), contains per doc",
            "official": "CogComp MC-TACO evaluator: strict_acc = share of questions with every candidate "
                        "right; f1 = per-question F1 averaged over questions",
        },
        "tasks": {},
        "timings": {"model_load_s": round(load_s, 3)},
    }
    samples: list[dict[str, Any]] = []
    # for the analysis at the end: each task's outputs and its clean / full / dirty table
    scored: list[tuple[TaskData, list[dict[str, Any]], dict[str, Any]]] = []
    for data in datas:
        docs, clean = data.docs, data.clean  # select_groups already dropped dirty docs for --clean-only
        t1 = time.perf_counter()
        with progress_bar(quiet) as bar:
            bar_task = bar.add_task(f"{data.task} ({data.split})", total=len(docs), rate="")
            n_req_per_doc = len(data.spec.choices()) if data.spec.output_type == "multiple_choice" else 1
            done = [0]

            def tick(n: int, _task=bar_task, _per=n_req_per_doc, _done=done, _t1=t1) -> None:
                _done[0] += n
                docs_done = _done[0] / _per
                bar.update(_task, completed=docs_done,
                           rate=rate_text(docs_done, time.perf_counter() - _t1, "docs"))

            if not docs:
                per_doc: list[dict[str, Any]] = []
            elif data.spec.output_type == "multiple_choice":
                per_doc = score_multiple_choice(engine, data.spec, docs, progress=tick)
            elif data.spec.output_type == "generate_until":
                per_doc = score_generation(engine, data.spec, docs, progress=tick)
            else:
                raise ConfigError(f"task {data.task!r}: output_type {data.spec.output_type!r} "
                                  "is not supported")
        run_s = time.perf_counter() - t1
        table = task_metrics(data.spec, docs, per_doc, clean, bootstrap, seed) if docs else \
            _empty_task_entry(data.spec)
        entry = {**table, "split": data.split, "output_type": data.spec.output_type,
                 "source": str(data.path), "selection": selections[data.task]}
        if clean_only:
            # Only clean docs were scored: a "full" computed from them would be the clean score.
            for key in ("full", "dirty"):
                entry["subsets"].pop(key, None)
            entry.pop("clean_minus_full", None)
        results["tasks"][data.task] = entry
        results["timings"][data.task] = {"run_s": round(run_s, 3), "docs": len(docs),
                                         "docs_per_s": round(len(docs) / run_s, 2) if run_s > 0 else None}
        for doc, c, o in zip(docs, clean, per_doc, strict=True):
            samples.append({"task": data.task, "doc_id": int(doc["doc_id"]), "group_id": int(doc["group_id"]),
                            "subset": "clean" if c else "dirty", **o})
        if not clean_only:
            scored.append((data, per_doc, table))
    results["effective_batch_size"] = engine.batch_size
    if write:
        from tcqa_data.eval.results import write_outputs

        out_dir = Path(output) if output is not None else default_output(prep_dir, lm.name)
        # EVAL_DIR is written whole into a staging folder, then committed in one step (one writer)
        with staged_output(out_dir, "evaluate") as staging:
            if not clean_only:  # the contamination analysis of this pass, into out_dir/analysis
                from tcqa_data.analysis.run import analyze_after_evaluate

                results["analysis"] = analyze_after_evaluate(prep_dir, scored, staging / "analysis",
                                                             bootstrap, seed, results_dir=out_dir)
            write_outputs(staging, results, samples)
        results["output_dir"] = str(out_dir)
    results["_samples"] = samples
    return results


# The metrics a task's `metric_list` may name, per output type (lm-eval's names).
SUPPORTED_METRICS = {"multiple_choice": ("acc", "f1"), "generate_until": ("contains",)}


def task_metric_names(spec: TaskSpec) -> list[str]:
    """The metrics reported for a task: its `metric_list` in the lm_eval family, plus CogComp's
    official pair for MC-TACO. Raises ConfigError for what this stage cannot compute."""
    supported = SUPPORTED_METRICS.get(spec.output_type)
    if supported is None:
        raise ConfigError(f"task {spec.task!r}: output_type {spec.output_type!r} is not supported by "
                          f"evaluate (supported: {sorted(SUPPORTED_METRICS)})")
    declared = [str(m["metric"]) for m in spec.metric_list] or list(supported)
    unknown = [m for m in declared if m not in supported]
    if unknown:
        raise ConfigError(f"task {spec.task!r}: metric(s) {unknown} in metric_list are not supported for "
                          f"{spec.output_type} (supported: {list(supported)})")
    if "f1" in declared and len(spec.choices()) != 2:
        raise ConfigError(f"task {spec.task!r}: f1 is binary F1 and needs exactly 2 choices, "
                          f"not {len(spec.choices())}")
    names = [f"lm_eval/{m}" for m in declared]
    if spec.output_type == "multiple_choice" and is_mc_taco(spec):
        names += [M.OFFICIAL_STRICT_ACC, M.OFFICIAL_F1]
    return names


def _empty_task_entry(spec: TaskSpec) -> dict[str, Any]:
    names = task_metric_names(spec)
    empty = {"value": None, "ci95": [None, None]}
    return {"subsets": {s: {"docs": 0, "groups": 0, "metrics": {n: dict(empty) for n in names}}
                        for s in SUBSETS},
            "clean_minus_full": {n: dict(empty) for n in names}}
