"""`decontaminate --labels`: the rule, its terms and each score's precision / recall curve measured
against ground truth, on a tiny corpus whose answer is known by construction (two MC-TACO sentences
quoted in it, two more left out); bad label files refused with one line before anything is
written; every output but the reports the same with and without labels."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cli_fixtures import run

from tcqa_data import decontaminate
from tcqa_data.prep.flag_quality import confusion, precision_recall_points

RULE = "any-ngram|ngram-fraction>=0.9"
REPORTS = ("report.json", "report.md", "report.html")


def test_precision_recall_points_are_scikit_learns_and_count_unscored_units():
    from sklearn.metrics import precision_recall_curve

    rng = np.random.default_rng(0)
    truth = rng.random(400) < 0.3
    scores = np.round(rng.random(400), 1)  # ties: one point per distinct score
    thr, prec, rec = precision_recall_points(truth, scores)
    p_ref, r_ref, t_ref = precision_recall_curve(truth, scores)
    np.testing.assert_allclose(thr, t_ref)
    np.testing.assert_allclose(prec, p_ref[:-1])  # sklearn closes the curve at (recall 0, precision 1)
    np.testing.assert_allclose(rec, r_ref[:-1])
    # a unit no term can flag (NaN) never reaches a threshold, but its positives stay in recall's
    # denominator: the scored units' recall, scaled by their share of the positives
    scores[:100] = np.nan
    thr, prec, rec = precision_recall_points(truth, scores)
    p_ref, r_ref, t_ref = precision_recall_curve(truth[100:], scores[100:])
    np.testing.assert_allclose(thr, t_ref)
    np.testing.assert_allclose(prec, p_ref[:-1])
    np.testing.assert_allclose(rec, r_ref[:-1] * truth[100:].sum() / truth.sum())
    assert confusion([True, True, False, False, True], [True, False, True, False, False]) == {
        "tp": 1, "fp": 1, "fn": 2, "tn": 1, "precision": 0.5, "recall": round(1 / 3, 6)}
    assert confusion([False, False], [False, False])["precision"] is None


@pytest.fixture(scope="module")
def known(mc_taco_dev, wiki_sample, tmp_path_factory):
    """Five wiki articles and one page quoting the first two of eight long MC-TACO dev sentences; the
    dev rows of those eight (about 200); which sentence each doc asks about."""
    root = tmp_path_factory.mktemp("labels")
    lines = mc_taco_dev.read_text(encoding="utf-8").splitlines()
    # at least 16 words: a 13-gram lies inside the sentence, whatever the question
    long = [x for x in dict.fromkeys(line.split("\t")[0] for line in lines) if len(x.split()) >= 16][:8]
    lines = [line for line in lines if line.split("\t")[0] in long]
    sentence_of = [line.split("\t")[0] for line in lines]
    corpus = root / "corpus.jsonl"
    wiki = wiki_sample.read_text(encoding="utf-8").splitlines()[:5]
    corpus.write_text("\n".join(wiki + [json.dumps({"text": " ".join(long[:2])})]) + "\n", encoding="utf-8")
    data = root / "dev200.tsv"
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"root": root, "corpus": corpus, "data": data, "sentence_of": sentence_of, "long": long}


def _decontaminate(known, out: Path, **kwargs):
    return decontaminate(corpus=known["corpus"], tasks="mc_taco", out=out, rule=RULE, quiet=True,
                         data_files={"mc_taco": {"validation": known["data"]}}, **kwargs)


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_figures_against_labels_known_by_construction_and_nothing_else_changes(known):
    s, long = known["sentence_of"], known["long"]
    # quoted and labelled contaminated: true positives; quoted but labelled clean: false positives;
    # not quoted, labelled contaminated: false negatives; not quoted, clean: true negatives
    kind = {long[0]: "tp", long[1]: "fp", long[2]: "fn", long[3]: "fn", long[4]: "tn", long[5]: "tn"}
    labelled = [(i, kind[x]) for i, x in enumerate(s) if x in kind]
    labels = known["root"] / "labels.csv"
    with open(labels, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["task", "doc_id", "contaminated"])
        w.writerows(("mc_taco", i, "true" if k in ("tp", "fn") else "0") for i, k in labelled)
    out = known["root"] / "with"
    _decontaminate(known, out, labels=labels)
    split = out / "mc_taco" / "validation"
    cont = pq.read_table(split / "contamination.parquet").to_pandas()
    # the construction holds: exactly the docs of the two quoted sentences are flagged
    assert cont["doc_dirty"].tolist() == [x in long[:2] for x in s]
    want = {k: sum(1 for _, x in labelled if x == k) for k in ("tp", "fp", "fn", "tn")}
    gt = json.loads((split / "report.json").read_text())["ground_truth"]
    assert (gt["file"], gt["unit"], gt["labelled"], gt["unlabelled"]) == \
        ("labels.csv", "doc", len(labelled), len(s) - len(labelled))
    assert {k: gt["rule"][k] for k in want} == want
    precision, recall = want["tp"] / (want["tp"] + want["fp"]), want["tp"] / (want["tp"] + want["fn"])
    assert gt["rule"]["precision"] == pytest.approx(precision, abs=1e-6)  # (6 decimals in report.json)
    assert gt["rule"]["recall"] == pytest.approx(recall, abs=1e-6)
    assert gt["dirty_split"] == {k: v for k, v in gt["rule"].items() if k != "rule"}  # group policy any
    # each term alone, and every curve point, against the scores as contamination.parquet holds them
    ids = [i for i, _ in labelled]
    truth = np.array([k in ("tp", "fn") for _, k in labelled])
    frac = cont["ngram_fraction"].to_numpy()[ids]
    terms = {t["term"]: t for t in gt["terms"]}
    assert set(terms) == {"any-ngram", "ngram-fraction>=0.9"}
    assert terms["ngram-fraction>=0.9"]["tp"] == int((truth & (frac >= 0.9)).sum())
    assert terms["ngram-fraction>=0.9"]["fp"] == int((~truth & (frac >= 0.9)).sum())
    curve = gt["curves"]["ngram_fraction"]
    assert curve["threshold"] == sorted(set(np.round(frac, 6).tolist()))
    for t, p, r in zip(curve["threshold"], curve["precision"], curve["recall"], strict=True):
        flagged = np.round(frac, 6) >= t
        assert p == pytest.approx((truth & flagged).sum() / flagged.sum(), abs=1e-6)
        assert r == pytest.approx((truth & flagged).sum() / truth.sum(), abs=1e-6)
    assert min(gt["curves"]["ngram_hits"]["threshold"]) >= 1  # no term says ngram-hits>=0
    md = (split / "report.md").read_text()
    assert (f"Against your {len(labelled)} labels (labels.csv, per doc), the rule {RULE} flagged "
            f"{want['tp']} of {want['tp'] + want['fn']} contaminated docs (recall {recall:.2f}) with "
            f"{want['fp']} false positives (precision {precision:.2f}).") in md
    assert "<img alt='Precision / recall" in (split / "report.html").read_text()
    # labels measure the flags, they change none: every file but the reports is the same
    _decontaminate(known, known["root"] / "without")
    with_, without = _files(out), _files(known["root"] / "without")
    assert with_.keys() == without.keys()
    changed = {name for name in with_ if with_[name] != without[name]}
    assert changed == {f"mc_taco/validation/{r}" for r in REPORTS}


def test_labels_per_question_group_count_each_question_once(known):
    s, long = known["sentence_of"], known["long"]
    group_of = {}
    for x, q in zip(s, (line.split("\t")[1] for line in known["data"].read_text().splitlines()), strict=True):
        group_of.setdefault((x, q), len(group_of))
    groups = {k: g for k, g in group_of.items() if k[0] in long[:4]}
    labels = known["root"] / "groups.parquet"
    pq.write_table(pa.table({"task": ["mc_taco"] * len(groups), "split": ["validation"] * len(groups),
                             "group_id": list(groups.values()),
                             "contaminated": [k[0] in (long[0], long[2]) for k in groups]}), labels)
    out = known["root"] / "groups"
    _decontaminate(known, out, labels=labels)
    gt = json.loads((out / "mc_taco" / "validation" / "report.json").read_text())["ground_truth"]
    n = {x: sum(1 for k in groups if k[0] == x) for x in long[:4]}
    assert gt["unit"] == "group" and gt["labelled"] == len(groups)
    assert {k: gt["rule"][k] for k in ("tp", "fp", "fn", "tn")} == \
        {"tp": n[long[0]], "fp": n[long[1]], "fn": n[long[2]], "tn": n[long[3]]}
    assert "contaminated groups" in (out / "mc_taco" / "validation" / "report.md").read_text()


@pytest.mark.parametrize("name, text, where, field", [
    ("nokey.csv", "task,contaminated\nmc_taco,1\n", ":2:", "doc_id"),
    ("nolabel.jsonl", '{"task": "mc_taco", "doc_id": 0, "contaminated": true}\n{"task": "mc_taco", '
                      '"doc_id": 1}\n', ":2:", "contaminated"),
    ("maybe.csv", "task,doc_id,contaminated\nmc_taco,0,1\nmc_taco,1,maybe\n", ":3:", "contaminated"),
    ("task.csv", "task,doc_id,contaminated\nsquad_completion,0,1\n", ":2:", "task"),
    ("range.csv", "task,doc_id,contaminated\nmc_taco,0,1\nmc_taco,900,1\n", ":3:", "doc_id"),
    ("split.jsonl", '{"task": "mc_taco", "split": "test", "doc_id": 0, "contaminated": 1}\n', ":1:", "split"),
    ("both.csv", "task,doc_id,contaminated\nmc_taco,3,1\nmc_taco,3,0\n", ":3:", "contaminated"),
    ("rows.parquet", None, ": row 2:", "doc_id"),
    ("twosplits.csv", "task,doc_id,contaminated\nmc_taco,0,1\n", ":2:", "split"),  # the run has test too
])
def test_bad_label_files_are_refused_with_one_line_before_anything_is_written(
        known, tmp_path, monkeypatch, capsys, name, text, where, field):
    bad = tmp_path / name
    if text is None:
        pq.write_table(pa.table({"task": ["mc_taco", "mc_taco"], "doc_id": [0, -1], "contaminated": [1, 0]}),
                       bad)
    else:
        bad.write_text(text, encoding="utf-8")
    out = tmp_path / "prep"
    more = ["--data-files", f"mc_taco:test={known['data']}"] if name == "twosplits.csv" else []
    code, _, err = run(["decontaminate", "--corpus", known["corpus"], "--tasks", "mc_taco", "--out", out,
                        "--data-files", f"mc_taco:validation={known['data']}", *more, "--labels", bad,
                        "--quiet"], monkeypatch, capsys)
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:"), err
    assert f"{bad}{where}" in lines[0] and f"(field '{field}')" in lines[0], lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no PREP_DIR, lock or staging folder
