"""Metrics: lm-eval's and CogComp's MC-TACO families, contains, bootstrap, the score command."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import shared_file
from typer.testing import CliRunner

from tcqa_data.cli import app
from tcqa_data.errors import InputError
from tcqa_data.eval import metrics as M
from tcqa_data.eval.score_file import read_mc_taco_data, score_mc_taco, score_mc_taco_file


def test_official_metrics_edge_cases_by_hand():
    # q1: gold yes,no ; pred yes,no -> all right, P=R=1, F1=1
    # q2: gold no,no  ; pred no,no  -> all right; nothing predicted or gold yes: P=R=1, F1=1
    # q3: gold yes,no ; pred no,no  -> wrong; P=1 (nothing predicted), R=0 -> F1 = 0
    # q4: gold no,no  ; pred yes,no -> wrong; P=0, R=1 (nothing gold) -> F1 = 0
    # q5: gold yes,yes,no ; pred yes,no,yes -> P=1/2, R=1/2 -> F1 = 1/2
    gold = [1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 0]
    pred = [1, 0, 0, 0, 0, 0, 1, 0, 1, 0, 1]
    groups = ["q1", "q1", "q2", "q2", "q3", "q3", "q4", "q4", "q5", "q5", "q5"]
    gy, py = [g == 1 for g in gold], [p == 1 for p in pred]
    assert M.official_strict_acc(gy, py, groups) == pytest.approx(2 / 5)
    assert M.official_f1(gy, py, groups) == pytest.approx((1 + 1 + 0 + 0 + 0.5) / 5)
    # the lm-eval family on the same predictions: per candidate, pooled
    assert M.accuracy(gold, pred) == pytest.approx(7 / 11)
    tp, fp, fn = 2, 2, 2
    assert M.pooled_f1(gold, pred) == pytest.approx(2 * tp / (2 * tp + fp + fn))


def test_official_groups_need_not_be_contiguous():
    # CogComp keys questions in a dict: candidates of one question may be apart in the file
    gy = [True, False, True]
    py = [True, True, True]
    assert M.official_strict_acc(gy, py, ["a", "b", "a"]) == pytest.approx(1 / 2)


def test_contains_is_escaped_stripped_and_case_insensitive():
    assert M.contains_score("the answer is Denver Broncos.", " denver broncos ") == 1
    assert M.contains_score("costs 3x5 dollars", "3.5") == 0  # '.' is literal, not a wildcard
    assert M.contains_score("costs 3.5 dollars", "3.5") == 1
    assert M.contains_score("nothing here", "Paris") == 0


def test_bootstrap_stats_reproduce_point_metrics():
    rng = np.random.default_rng(0)
    n_units = 30
    units = np.repeat(np.arange(n_units), 7)
    gold = rng.integers(0, 2, len(units))
    pred = rng.integers(0, 2, len(units))
    points = {
        M.LM_ACC: M.accuracy(gold, pred),
        M.LM_F1: M.pooled_f1(gold, pred),
        M.OFFICIAL_STRICT_ACC: M.official_strict_acc(gold == 1, pred == 1, units),
        M.OFFICIAL_F1: M.official_f1(gold == 1, pred == 1, units),
    }
    for name, value in points.items():
        stats = M.unit_stats(name, gold, pred, units, n_units)
        assert float(M.metric_from_stats(name, stats.sum(0))) == pytest.approx(value)


def test_bootstrap_interval_covers_point_and_is_deterministic():
    rng = np.random.default_rng(1)
    units = np.arange(200)
    gold = rng.integers(0, 2, 200)
    pred = np.where(rng.random(200) < 0.7, gold, 1 - gold)
    stats = M.unit_stats(M.LM_ACC, gold, pred, units, 200)
    clean = np.zeros(200, dtype=bool)
    clean[:120] = True
    subsets = {"full": np.ones(200, dtype=bool), "clean": clean, "dirty": ~clean}
    a = M.summarize(M.LM_ACC, stats, subsets, M.bootstrap_weights(200, 500, seed=3))
    b = M.summarize(M.LM_ACC, stats, subsets, M.bootstrap_weights(200, 500, seed=3))
    assert a == b
    for sub in ("full", "clean", "dirty"):
        lo, hi = a[sub]["ci95"]
        assert lo < a[sub]["value"] < hi
    d = a["clean_minus_full"]
    assert d["value"] == pytest.approx(a["clean"]["value"] - a["full"]["value"])
    assert d["ci95"][0] < d["value"] < d["ci95"][1]
    # paired: the difference is less noisy than clean's own interval
    assert d["ci95"][1] - d["ci95"][0] < a["clean"]["ci95"][1] - a["clean"]["ci95"][0]


def test_empty_subset_gives_no_value_and_no_crash():
    gold = np.array([1, 0, 1])
    pred = np.array([1, 1, 1])
    units = np.array([0, 1, 2])
    stats = M.unit_stats(M.LM_F1, gold, pred, units, 3)
    subsets = {"full": np.ones(3, dtype=bool), "clean": np.zeros(3, dtype=bool),
               "dirty": np.ones(3, dtype=bool)}
    out = M.summarize(M.LM_F1, stats, subsets, M.bootstrap_weights(3, 50))
    assert out["clean"]["value"] is None and out["clean"]["ci95"] == [None, None]
    assert out["clean_minus_full"]["value"] is None


def _official_by_reading(tsv, preds):
    """CogComp's rules restated over the raw lines (keys: first two fields joined by a space)."""
    lines = [x.strip() for x in open(tsv, encoding="utf-8").readlines()]
    per_q: dict[str, list[tuple[str, str]]] = {}
    for line, p in zip(lines, preds, strict=True):
        f = line.split("\t")
        per_q.setdefault(" ".join(f[0:2]), []).append((f[3], p))
    strict, f1s = [], []
    for cands in per_q.values():
        strict.append(all(g == p for g, p in cands))
        tp = sum(g == p == "yes" for g, p in cands)
        npred = sum(p == "yes" for _, p in cands)
        ngold = sum(g == "yes" for g, _ in cands)
        prec = tp / npred if npred else 1.0
        rec = tp / ngold if ngold else 1.0
        f1s.append(2 * prec * rec / (prec + rec) if prec + rec else 0.0)
    return sum(strict) / len(strict), sum(f1s) / len(f1s)


def test_score_command_on_real_dev_file(tmp_path):
    tsv = shared_file("mc_taco/dev_3783.tsv")
    gold, keys = read_mc_taco_data(tsv)
    assert len(gold) == 3783 and len(set(keys)) == 561
    # a deterministic, imperfect predictor: answers "yes" for short candidate answers
    answers = [line.split("\t")[2] for line in open(tsv, encoding="utf-8").read().splitlines()]
    preds = ["yes" if len(a.split()) <= 2 else "no" for a in answers]
    pred_file = tmp_path / "pred.txt"
    pred_file.write_text("\n".join(preds) + "\n")
    scores = score_mc_taco_file(pred_file, tsv)
    strict, f1 = _official_by_reading(tsv, preds)
    assert scores[M.OFFICIAL_STRICT_ACC] == pytest.approx(strict)
    assert scores[M.OFFICIAL_F1] == pytest.approx(f1)
    gold_i = [int(g) for g in gold]
    pred_i = [int(p == "yes") for p in preds]
    assert scores[M.LM_ACC] == pytest.approx(np.mean(np.array(gold_i) == np.array(pred_i)))
    result = CliRunner().invoke(app, ["score", "mc_taco", "--predictions", str(pred_file),
                                      "--data", str(tsv)])
    assert result.exit_code == 0, result.output
    assert f"{M.OFFICIAL_STRICT_ACC}\t{strict:.6f}" in result.output
    assert f"{M.LM_F1}\t" in result.output


def test_score_rejects_bad_predictions(tmp_path):
    data = tmp_path / "d.tsv"
    data.write_text("s\tq?\ta\tyes\tDuration\ns\tq?\tb\tno\tDuration\n")
    bad = tmp_path / "p.txt"
    bad.write_text("yes\nmaybe\n")
    with pytest.raises(InputError, match="maybe"):
        score_mc_taco_file(bad, data)
    short = tmp_path / "s.txt"
    short.write_text("yes\n")
    with pytest.raises(InputError, match="1 predictions for 2"):
        score_mc_taco_file(short, data)
    ok = tmp_path / "ok.txt"
    ok.write_text("yes\nno\n")
    s = score_mc_taco_file(ok, data)
    assert s[M.OFFICIAL_STRICT_ACC] == 1.0 and s["questions"] == 1
    # a trailing blank line is no prediction; a blank line inside is an error
    ok.write_text("yes\nno\n\n")
    assert score_mc_taco_file(ok, data) == s
    ok.write_text("yes\n\nno\n")
    with pytest.raises(InputError, match=r"p?ok.txt:2"):
        score_mc_taco_file(ok, data)


def test_score_accepts_prepared_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "full.parquet"
    pq.write_table(pa.table({"sentence": ["s", "s", "t"], "question": ["q", "q", "q"],
                             "answer": ["a", "b", "c"], "label": [1, 0, 0]}), path)
    gold, keys = read_mc_taco_data(path)
    assert gold == [True, False, False] and len(set(keys)) == 2
    s = score_mc_taco([True, True, False], gold, keys)
    assert s[M.OFFICIAL_STRICT_ACC] == pytest.approx(1 / 2)
