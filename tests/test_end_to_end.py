"""The whole pipeline through the CLI: index-corpus -> decontaminate -> evaluate.

The corpus is a slice of the real wiki sample plus a document that copies the first MC-TACO
questions' sentences and the first SQuAD passages, so the first groups of each benchmark are
known to be dirty and the rest of the evaluated groups are known to be clean.
"""

from __future__ import annotations

import csv
import json
from itertools import islice

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from tcqa_data.cli import app

pytestmark = pytest.mark.slow

COPIED = 1  # leading MC-TACO sentences / SQuAD passages copied into the corpus
EVAL_GROUPS = 8  # whole question groups evaluated: the copied sentence's and some clean ones


def _cli(*args: str) -> str:
    result = CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory, wiki_sample, mc_taco_dev, squad_validation, tiny_model):
    root = tmp_path_factory.mktemp("e2e")
    with open(mc_taco_dev, encoding="utf-8", newline="") as fh:
        mc_rows = list(csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE))
    sentences: list[str] = []
    for row in mc_rows:
        if row[0] not in sentences:
            sentences.append(row[0])
    with open(squad_validation, encoding="utf-8") as fh:
        squad_rows = [json.loads(line) for line in islice(fh, 200)]
    contexts: list[str] = []
    for row in squad_rows:
        if row["context"] not in contexts:
            contexts.append(row["context"])
    copied = " ".join(sentences[:COPIED] + contexts[:COPIED])

    corpus = root / "corpus.jsonl"
    with open(wiki_sample, encoding="utf-8") as src, open(corpus, "w", encoding="utf-8") as out:
        out.writelines(islice(src, 40))
        out.write(json.dumps({"text": "Copied benchmark text. " + copied}) + "\n")
    squad_slice = root / "squad.jsonl"
    squad_slice.write_text("".join(json.dumps(r) + "\n" for r in squad_rows), encoding="utf-8")

    _cli("index-corpus", corpus, "--out", root / "index", "--workers", "1", "--quiet")
    _cli("decontaminate", root / "index", "--tasks", "mc_taco,squad_completion", "--out", root / "prep",
         "--data-files", f"mc_taco:validation={mc_taco_dev}",
         "--data-files", f"squad_completion:validation={squad_slice}", "--quiet")
    table = _cli("evaluate", root / "prep", "--model", tiny_model, "--device", "cpu", "--batch-size", "4",
                 "--limit-groups", str(EVAL_GROUPS), "--out", root / "eval", "--quiet")
    return root, table, sentences, contexts


def _first_groups(rows: list[dict], n: int) -> list[list[dict]]:
    groups: dict[int, list[dict]] = {}
    for row in rows:
        if row["group_id"] in groups or len(groups) < n:
            groups.setdefault(row["group_id"], []).append(row)
    return list(groups.values())


def test_copied_items_are_dirty_and_the_rest_clean(pipeline):
    root, _, sentences, contexts = pipeline
    mc = pq.read_table(root / "prep/mc_taco/validation/full.parquet").to_pylist()
    dirty = {r["doc_id"] for r in pq.read_table(root / "prep/mc_taco/validation/dirty.parquet").to_pylist()}
    for row in mc:
        if row["sentence"] in sentences[:COPIED]:
            assert row["doc_id"] in dirty
        elif row["sentence"] in sentences[COPIED:EVAL_GROUPS]:
            assert row["doc_id"] not in dirty
    squad = pq.read_table(root / "prep/squad_completion/validation/full.parquet").to_pylist()
    squad_dirty = {r["doc_id"] for r in
                   pq.read_table(root / "prep/squad_completion/validation/dirty.parquet").to_pylist()}
    assert {r["doc_id"] for r in squad if r["context"] in contexts[:COPIED]} == squad_dirty


def test_evaluate_reports_full_clean_and_dirty_from_the_prepared_splits(pipeline):
    root, table, sentences, contexts = pipeline
    mc_groups = _first_groups(pq.read_table(root / "prep/mc_taco/validation/full.parquet").to_pylist(),
                              EVAL_GROUPS)
    mc_dirty = sum(g[0]["sentence"] in sentences[:COPIED] for g in mc_groups)
    assert 0 < mc_dirty < EVAL_GROUPS  # the evaluated slice has both kinds
    squad_docs = pq.read_table(root / "prep/squad_completion/validation/full.parquet").to_pylist()
    squad_dirty = sum(r["context"] in contexts[:COPIED] for r in squad_docs[:EVAL_GROUPS])
    results = json.loads((root / "eval/results.json").read_text())
    mc = results["tasks"]["mc_taco"]
    assert set(mc["subsets"]) == {"full", "clean", "dirty"}
    full, clean, dirty = (mc["subsets"][k] for k in ("full", "clean", "dirty"))
    assert full["groups"] == EVAL_GROUPS
    assert dirty["groups"] == mc_dirty
    assert clean["groups"] == EVAL_GROUPS - mc_dirty
    assert full["docs"] == sum(len(g) for g in mc_groups)
    assert clean["docs"] + dirty["docs"] == full["docs"]
    for family in ("lm_eval/acc", "lm_eval/f1", "official/strict_acc", "official/f1"):
        assert family in full["metrics"]
    sq = results["tasks"]["squad_completion"]["subsets"]
    assert sq["full"]["docs"] == EVAL_GROUPS
    assert sq["dirty"]["docs"] == squad_dirty
    assert "lm_eval/contains" in sq["full"]["metrics"]
    # the printed table names both MC-TACO metric families and every subset
    for word in ("clean", "full", "dirty", "official/strict_acc", "lm_eval/acc"):
        assert word in table
    samples = [json.loads(line) for line in (root / "eval/samples.jsonl").read_text().splitlines()]
    assert len(samples) == full["docs"] + sq["full"]["docs"]


def test_cli_errors_name_the_problem(tmp_path):
    result = CliRunner().invoke(app, ["decontaminate", str(tmp_path / "nope"), "--out", str(tmp_path / "p")])
    assert result.exit_code != 0
    assert "index" in str(result.exception or result.output).lower()


def test_evaluate_names_a_missing_task(pipeline):
    root, _, _, _ = pipeline
    with pytest.raises(Exception, match="no_such_task"):
        CliRunner().invoke(app, ["evaluate", str(root / "prep"), "--model", str(root / "model"),
                                 "--tasks", "no_such_task"], catch_exceptions=False)

