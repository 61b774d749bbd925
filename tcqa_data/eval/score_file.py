"""Score an external MC-TACO predictions file (the leaderboard format) with both metric families."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from tcqa_data.errors import InputError
from tcqa_data.eval import metrics as M
from tcqa_data.prep.taskspec import TaskSpec


def read_predictions(path: str | Path) -> list[bool]:
    """One ``yes``/``no`` per line (stripped, as CogComp's evaluator reads it); True = yes."""
    out = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(f"cannot read predictions: {exc}", path=str(path)) from exc
    while lines and not lines[-1].strip():
        lines.pop()  # trailing blank lines are no predictions (the evaluator ignores them too)
    for i, line in enumerate(lines, 1):
        v = line.strip()
        if v not in ("yes", "no"):
            raise InputError(f"prediction {v!r} is not 'yes' or 'no'", path=str(path), line=i)
        out.append(v == "yes")
    return out


def _label_yes(value: Any, path: str, row: int) -> bool:
    s = str(value).strip().lower()
    if s in ("yes", "1", "true"):
        return True
    if s in ("no", "0", "false"):
        return False
    raise InputError(f"label {value!r} is not yes/no or 1/0", path=path, line=row, field="label")


def read_mc_taco_data(path: str | Path) -> tuple[list[bool], list[str]]:
    """(gold is yes, question key) per candidate, from the official TSV or a Parquet file."""
    path = Path(path)
    if not path.is_file():
        raise InputError("data file not found", path=str(path))
    gold, keys = [], []
    if path.suffix.lower() == ".parquet":
        table = pq.read_table(path)
        for col in ("sentence", "question", "label"):
            if col not in table.column_names:
                raise InputError("column missing", path=str(path), field=col)
        for i, r in enumerate(table.select(["sentence", "question", "label"]).to_pylist()):
            gold.append(_label_yes(r["label"], str(path), i))
            # CogComp's evaluator keys a question by sentence and question joined with a space
            keys.append(f"{r['sentence']} {r['question']}")
        return gold, keys
    cols = TaskSpec.builtin("mc_taco").tsv_columns
    with open(path, encoding="utf-8", newline="") as fh:
        for i, rec in enumerate(csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE), 1):
            if len(rec) != len(cols):
                raise InputError(f"expected {len(cols)} tab-separated fields {list(cols)}, got {len(rec)}",
                                 path=str(path), line=i)
            gold.append(_label_yes(rec[3], str(path), i))
            keys.append(f"{rec[0].lstrip()} {rec[1]}")  # the evaluator strips each line
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
