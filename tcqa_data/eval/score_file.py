"""Score an external MC-TACO predictions file (the leaderboard format) with both metric families."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tcqa_data.errors import InputError
from tcqa_data.eval import metrics as M
from tcqa_data.io_utils import decode_utf8, read_regular_file
from tcqa_data.prep.taskspec import TaskSpec


def read_predictions(path: str | Path) -> list[bool]:
    """One ``yes``/``no`` per line (stripped, as CogComp's evaluator reads it); True = yes."""
    out = []
    # a FIFO or a device is refused unread (it would block or never end)
    lines = decode_utf8(read_regular_file(path, "predictions file", 1 << 30), path,
                        "predictions file").splitlines()
    while lines and not lines[-1].strip():
        lines.pop()  # trailing blank lines are no predictions (the evaluator ignores them too)
    for i, line in enumerate(lines, 1):
        v = line.strip()
        if v not in ("yes", "no"):
            raise InputError(f"prediction {v!r} is not 'yes' or 'no'", path=str(path), line=i)
        out.append(v == "yes")
    return out


def read_mc_taco_data(path: str | Path) -> tuple[list[bool], list[str]]:
    """(gold is yes, question key) per candidate, from the official TSV or a Parquet/JSONL file,
    read by the prep stage's loader (same columns, label parsing and error messages)."""
    from tcqa_data.prep.benchmarks import normalize_labels, read_local

    path = Path(path)
    spec = TaskSpec.builtin("mc_taco")
    table = read_local(path, spec)
    needed = ["sentence", "question", spec.label_field()]
    for col in needed:  # only what scoring reads: the answer text is not needed
        if col not in table.column_names:
            raise InputError("column missing", path=str(path), field=col)
    table = normalize_labels(spec, table, str(path))
    rows = table.select(needed).to_pylist()
    gold = [r[spec.label_field()] == 1 for r in rows]
    # CogComp's evaluator keys a question by sentence and question joined with a space, after
    # stripping each line (so leading spaces of the sentence do not count)
    keys = [f"{r['sentence'].lstrip()} {r['question']}" for r in rows]
    return gold, keys


def score_mc_taco(pred_yes: list[bool], gold_yes: list[bool], keys: list[str]) -> dict[str, Any]:
    """Both families from yes/no lists in data order."""
    gold = [int(g) for g in gold_yes]
    pred = [int(p) for p in pred_yes]
    return {
        M.LM_ACC: M.accuracy(gold, pred),
        M.LM_F1: M.pooled_f1(gold, pred),
        M.OFFICIAL_STRICT_ACC: M.official_strict_acc(gold_yes, pred_yes, keys),
        M.OFFICIAL_F1: M.official_f1(gold_yes, pred_yes, keys),
        "candidates": len(gold),
        "questions": len(set(keys)),
    }


def score_mc_taco_file(predictions: str | Path, data: str | Path) -> dict[str, Any]:
    pred = read_predictions(predictions)
    gold, keys = read_mc_taco_data(data)
    if len(pred) != len(gold):
        raise InputError(f"{len(pred)} predictions for {len(gold)} candidates in {data}; "
                         "expected one line per candidate, in data order", path=str(predictions))
    return score_mc_taco(pred, gold, keys)
