"""The run summary at the PREP_DIR root (summary.json/md/html) and the CONDA database row file
(contamination_report.csv), in index and stream mode, checked against counts recomputed with pandas
from each split's contamination.parquet.

Real data: MC-TACO validation and test slices and based-squad validation rows, against a slice of
the wiki sample with some of their sentences and passages pasted in.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from tcqa_data.prep.pipeline import decontaminate
from tcqa_data.prep.summary import NO_MATCH, OUTSIDE_FIELDS

HEADER = ("Evaluation Dataset;Subset;Contaminated Source;Model or corpus;Train Split;Development Split;"
          "Test Split;Approach;Reference;PR")
SOURCE = "wiki;sample \"2015\""  # a `;` and quotes: the CSV must quote the field
TASKS = ["mc_taco", "squad_completion"]


@pytest.fixture(scope="module")
def data(wiki_sample, mc_taco_dev, mc_taco_test, squad_validation, tmp_path_factory) -> dict:
    """Local benchmark slices and a corpus of 80 wiki articles, 6 of them with benchmark text pasted
    in (MC-TACO sentences of both splits, SQuAD passages)."""
    root = tmp_path_factory.mktemp("summary_data")
    files = {}
    for name, src, rows in (("mc_dev.tsv", mc_taco_dev, 300), ("mc_test.tsv", mc_taco_test, 300),
                            ("squad.jsonl", squad_validation, 80)):
        with open(src, encoding="utf-8") as fh:
            (root / name).write_text("".join(fh.readline() for _ in range(rows)), encoding="utf-8")
        files[name] = root / name
    with open(wiki_sample, encoding="utf-8") as fh:
        wiki = [json.loads(fh.readline()) for _ in range(80)]
    pasted = []
    for name in ("mc_dev.tsv", "mc_test.tsv"):
        sentences = list(dict.fromkeys(line.split("\t")[0] for line in files[name].open(encoding="utf-8")))
        pasted += [s for s in sentences if len(s.split()) >= 16][:2]
    squad = list(dict.fromkeys(json.loads(line)["context"] for line in files["squad.jsonl"].open()))
    pasted += squad[:2]
    docs = wiki + [{**w, "text": w["text"][:500] + "\n\n" + p + " " + w["text"][500:900]}
                   for w, p in zip(wiki[::13], pasted, strict=False)]
    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs), encoding="utf-8")
    from tcqa_data.decontam.build import build_index

    index = root / "index"
    build_index([str(corpus)], index, ngram_sizes=(13,), minhash=False, text_store="auto", quiet=True,
                workers=1)
    data_files = {"mc_taco": {"validation": files["mc_dev.tsv"], "test": files["mc_test.tsv"]},
                  "squad_completion": {"validation": files["squad.jsonl"]}}
    return {"corpus": corpus, "index": index, "data_files": data_files}


def _recount(prep: Path, task: str, split: str, fields: list[str]) -> dict:
    """A split's summary counts from its contamination.parquet, with pandas."""
    df = pd.read_parquet(prep / task / split / "contamination.parquet")
    dirty = df[df["dirty"]]
    where = {f: 0 for f in fields}
    outside = none = 0
    for _, r in dirty.iterrows():
        hit = {f for f, m in zip(r["field_names"], r["field_matched_words"], strict=True) if m > 0}
        aligned = "aligned_field" in df.columns and r["aligned_words"] > 0
        if aligned and r["aligned_field"] in where:
            hit.add(r["aligned_field"])
        for f in hit:
            where[f] += 1
        off = r["matched_words"] > sum(r["field_matched_words"])
        if off or (aligned and r["aligned_field"] not in where):
            outside += 1
        elif not hit:
            none += 1
    where.update({OUTSIDE_FIELDS: outside, NO_MATCH: none})
    return {"docs": len(df), "dirty_docs": int(df["dirty"].sum()), "groups": df["group_id"].nunique(),
            "dirty_groups": dirty["group_id"].nunique(),
            "untestable_docs": int((df["status"] == "untestable").sum()),
            "dirty_docs_pct": round(100 * df["dirty"].mean(), 2), "where": where}


def _run_both(data: dict, tmp_path: Path, rule: str) -> tuple[Path, Path]:
    """Index mode through the CLI (with --source-name), stream mode through the library."""
    from tcqa_data.cli import app

    idx = tmp_path / "idx"
    args = ["decontaminate", str(data["index"]), "--tasks", ",".join(TASKS), "--out", str(idx),
            "--rule", rule, "--source-name", SOURCE, "--quiet"]
    for task, per in data["data_files"].items():
        args += [a for split, path in per.items() for a in ("--data-files", f"{task}:{split}={path}")]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    stream = tmp_path / "stream"
    # short items matched whole (stream mode's default) would make "untestable" differ by design
    decontaminate(None, TASKS, stream, corpus=[str(data["corpus"])], data_files=data["data_files"], rule=rule,
                  short_min_words=None, source_name=SOURCE, quiet=True)
    return idx, stream


@pytest.mark.parametrize("rule", ["any-ngram", "any-ngram|aligned-field>=0.8"])
def test_both_modes_write_the_summary_its_counts_from_the_parquet_files(data, tmp_path, rule):
    idx, stream = _run_both(data, tmp_path, rule)
    summaries = {}
    for prep in (idx, stream):
        for name in ("summary.json", "summary.md", "summary.html", "contamination_report.csv"):
            assert (prep / name).is_file(), (prep, name)
        s = json.loads((prep / "summary.json").read_text())
        summaries[prep] = s
        assert [(r["task"], r["split"]) for r in s["rows"]] == [
            ("mc_taco", "validation"), ("mc_taco", "test"), ("squad_completion", "validation")]
        for r in s["rows"]:
            want = _recount(prep, r["task"], r["split"], r["fields"])
            got = {k: r[k] for k in ("docs", "dirty_docs", "groups", "dirty_groups", "untestable_docs",
                                     "dirty_docs_pct")}
            assert got == {k: v for k, v in want.items() if k != "where"}, (r["task"], r["split"])
            assert r["dirty_docs_matched_in"] == want["where"]
            # every dirty doc is somewhere: a field, the template text, or nowhere (group policy)
            assert sum(r["dirty_docs_matched_in"].values()) >= r["dirty_docs"]
        assert {r["task"]: r["fields"] for r in s["rows"]} == {"mc_taco": ["question", "sentence"],
                                                               "squad_completion": ["context", "question"]}
        # MC-TACO's groups are its questions (sentence + question): fewer than its candidate rows
        mc = s["rows"][0]
        assert mc["group_by"] == ["sentence", "question"] and mc["groups"] < mc["docs"]
        # the pasted text is found, and where it lies: MC-TACO sentences, SQuAD passages
        assert mc["dirty_docs"] > 0 and mc["dirty_docs_matched_in"]["sentence"] > 0
        sq = s["rows"][2]
        assert 0 < sq["dirty_docs"] < sq["docs"] and sq["dirty_docs_matched_in"]["context"] > 0
        assert s["totals"]["docs"] == sum(r["docs"] for r in s["rows"])
        assert s["rule"] == rule
        md = (prep / "summary.md").read_text()
        for r in s["rows"]:
            # the task links to the split's own report, relative to the summary
            link = f"{r['task']}/{r['split']}/report.html"
            assert f"| [{r['task']}]({link}) | {r['split']} | {r['docs']} | {r['dirty_docs']} |" in md
            assert (prep / link).is_file()
    a, b = summaries[idx], summaries[stream]
    assert a.pop("evidence") == {"mode": "index", "source": "index"}
    assert b.pop("evidence") == {"mode": "stream", "source": "corpus.jsonl"}
    assert a == b
    for name in ("summary.md", "summary.html"):  # the same but for the evidence line
        la, lb = ((p / name).read_text().splitlines() for p in (idx, stream))
        diff = [(x, y) for x, y in zip(la, lb, strict=True) if x != y]
        assert len(la) == len(lb) and len(diff) == 1 and "Evidence" in diff[0][0], diff
    csv_a, csv_b = ((p / "contamination_report.csv").read_bytes() for p in (idx, stream))
    assert csv_a == csv_b


def test_conda_csv_header_and_percentages_recomputed_from_the_parquet_files(data, tmp_path):
    idx, _ = _run_both(data, tmp_path, "any-ngram")
    text = (idx / "contamination_report.csv").read_text(encoding="utf-8")
    assert text.split("\n")[0] == HEADER and text.endswith("\n")
    rows = list(csv.reader(io.StringIO(text), delimiter=";"))
    assert len(rows) == 3 and all(len(r) == 10 for r in rows)

    def pct(task: str, split: str) -> str:
        df = pd.read_parquet(idx / task / split / "contamination.parquet")
        return f"{100 * df['dirty'].sum() / len(df):.2f}"

    assert rows[1] == ["CogComp/mc_taco", "", SOURCE, "corpus", "", pct("mc_taco", "validation"),
                       pct("mc_taco", "test"), "data-based", "https://arxiv.org/abs/2005.14165", ""]
    # based-squad's only config is "default": no subset; its one split is a development split
    assert rows[2] == ["hazyresearch/based-squad", "", SOURCE, "corpus", "",
                       pct("squad_completion", "validation"), "", "data-based",
                       "https://arxiv.org/abs/2005.14165", ""]
    assert 0 < float(rows[1][5]) < 100 and 0 < float(rows[2][5]) < 100
    # the database's own reader: pandas with `;`, the quoted source read back whole
    db = pd.read_csv(idx / "contamination_report.csv", sep=";")
    assert list(db.columns) == HEADER.split(";") and (db["Contaminated Source"] == SOURCE).all()
    assert db["PR"].isna().all() and db["Train Split"].isna().all()


def test_default_source_name_is_the_corpus_file(data, tmp_path):
    """Without --source-name the row names the corpus input (a file name, never a path)."""
    decontaminate(data["index"], ["squad_completion"], tmp_path / "p", quiet=True,
                  data_files={"squad_completion": data["data_files"]["squad_completion"]})
    row = (tmp_path / "p" / "contamination_report.csv").read_text().splitlines()[1].split(";")
    assert row[2] == "corpus.jsonl"
    s = json.loads((tmp_path / "p" / "summary.json").read_text())
    assert s["conda"]["contaminated_source"] == "corpus.jsonl" and [r["task"] for r in s["rows"]] == [
        "squad_completion"]
