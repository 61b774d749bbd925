"""Benchmark loaders and task specs: local TSV/JSONL/Parquet, labels, ids, groups, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tcqa_data.errors import ConfigError, InputError, TcqaError
from tcqa_data.prep.benchmarks import group_ids, load_split
from tcqa_data.prep.taskspec import TaskSpec

MC_ROWS = [
    ("He left at noon, ate lunch and came back.", "How long was he gone?", "an hour", "yes",
     "Event Duration"),
    ("He left at noon, ate lunch and came back.", "How long was he gone?", "a year", "no", "Event Duration"),
    ("She sings every morning.", "How often does she sing?", "daily", "yes", "Frequency"),
    ("He left at noon, ate lunch and came back.", "When did he leave?", "at noon", "yes", "Event Ordering"),
]


def _write_tsv(path, rows):
    path.write_text("".join("\t".join(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_mc_taco_tsv_labels_order_and_groups(tmp_path):
    spec = TaskSpec.resolve("mc_taco")
    b = load_split(spec, "test", _write_tsv(tmp_path / "t.tsv", MC_ROWS))
    assert b.table.column_names == ["sentence", "question", "answer", "label", "category"]
    assert b.table.column("label").type == pa.int64()
    assert b.table.column("label").to_pylist() == [1, 0, 1, 1]
    assert b.table.column("answer").to_pylist() == [r[2] for r in MC_ROWS]  # original order
    # group = (sentence, question) in order of first appearance, even when not contiguous
    assert group_ids(spec, b.table) == [0, 0, 1, 2]


def test_jsonl_and_parquet_give_the_same_table(tmp_path):
    spec = TaskSpec.resolve("mc_taco")
    cols = ["sentence", "question", "answer", "label", "category"]
    recs = [dict(zip(cols, r, strict=True)) for r in MC_ROWS]
    recs[1]["label"] = 0  # mixed label forms: ints, "1"/"0", yes/no
    recs[2]["label"] = "1"
    jl = tmp_path / "t.jsonl"
    jl.write_text("\n".join(json.dumps(r) for r in recs) + "\n", encoding="utf-8")
    a = load_split(spec, "test", jl).table
    assert a.column("label").to_pylist() == [1, 0, 1, 1]
    pq.write_table(a, tmp_path / "t.parquet")
    b = load_split(spec, "test", tmp_path / "t.parquet").table
    assert a.equals(b)


def test_real_mc_taco_and_squad(mc_taco_test, squad_validation):
    mc = TaskSpec.resolve("mc_taco")
    b = load_split(mc, "test", mc_taco_test)
    assert b.num_docs == 9442
    assert max(group_ids(mc, b.table)) + 1 == 1332
    assert set(b.table.column("label").to_pylist()) == {0, 1}
    sq = TaskSpec.resolve("squad_completion")
    s = load_split(sq, "validation", squad_validation)
    assert s.num_docs == 10570
    assert group_ids(sq, s.table) == list(range(10570))
    doc = s.docs()[0]
    assert sq.decontamination_query(doc) == doc["text"]


def test_missing_field_names_field_template_and_file(tmp_path):
    spec = TaskSpec.resolve("mc_taco")
    jl = tmp_path / "noq.jsonl"
    jl.write_text(json.dumps({"sentence": "s", "answer": "a", "label": 1, "category": "c"}) + "\n")
    with pytest.raises(InputError) as err:
        load_split(spec, "test", jl)
    msg = str(err.value)
    assert "'question'" in msg and str(jl) in msg and "doc_to_decontamination_query" in msg


def test_field_missing_in_one_record_names_the_record(tmp_path):
    spec = TaskSpec.resolve("squad_completion")
    jl = tmp_path / "sq.jsonl"
    jl.write_text(json.dumps({"text": "a b", "value": "x"}) + "\n" + json.dumps({"text": "c d"}) + "\n")
    with pytest.raises(InputError, match=r"sq.jsonl:2: .*'value'"):
        load_split(spec, "validation", jl)


def test_template_naming_unknown_field(tmp_path):
    raw = TaskSpec.resolve("mc_taco").to_dict()
    raw["doc_to_decontamination_query"] = "{{question}} {{passage}}"
    spec = TaskSpec.from_dict(raw, source="custom.yaml")
    with pytest.raises(InputError) as err:
        load_split(spec, "test", _write_tsv(tmp_path / "t.tsv", MC_ROWS))
    assert "'passage'" in str(err.value) and "doc_to_decontamination_query" in str(err.value)


def test_bad_label_and_bad_tsv_row(tmp_path):
    spec = TaskSpec.resolve("mc_taco")
    rows = [MC_ROWS[0], MC_ROWS[1][:4] + ("Event Duration",)]
    rows[1] = rows[1][:3] + ("maybe", rows[1][4])
    with pytest.raises(InputError, match=r"t.tsv:2: .*'maybe'"):
        load_split(spec, "test", _write_tsv(tmp_path / "t.tsv", rows))
    (tmp_path / "short.tsv").write_text("a\tb\tc\n")
    with pytest.raises(InputError, match=r"short.tsv:1: expected 5"):
        load_split(spec, "test", tmp_path / "short.tsv")


def test_empty_split(tmp_path):
    spec = TaskSpec.resolve("mc_taco")
    (tmp_path / "e.tsv").write_text("")
    with pytest.raises(InputError, match="empty"):
        load_split(spec, "test", tmp_path / "e.tsv")
    (tmp_path / "e.jsonl").write_text("\n")
    with pytest.raises(InputError, match="empty"):
        load_split(spec, "test", tmp_path / "e.jsonl")


def test_unsupported_and_missing_file(tmp_path):
    spec = TaskSpec.resolve("mc_taco")
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(InputError, match="unsupported"):
        load_split(spec, "test", tmp_path / "x.csv")
    with pytest.raises(InputError, match="not found"):
        load_split(spec, "test", tmp_path / "nope.tsv")


def test_unreachable_hub_says_how_to_pass_local_files():
    # The real datasets.load_dataset path, made to fail fast: offline mode (as with no network).
    code = ("from tcqa_data.prep.taskspec import TaskSpec\n"
            "from tcqa_data.prep.benchmarks import load_split\n"
            "load_split(TaskSpec.resolve('mc_taco'), 'test')\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "TcqaError" in proc.stderr
    assert "--data-files mc_taco:test=PATH/test_9442.tsv" in proc.stderr and "HF_HUB_OFFLINE" in proc.stderr


def test_spec_round_trip_and_extensions(tmp_path):
    for name in ("mc_taco", "squad_completion"):
        spec = TaskSpec.resolve(name)
        (tmp_path / f"{name}.yaml").write_text(spec.to_yaml())
        again = TaskSpec.from_yaml(tmp_path / f"{name}.yaml")
        assert again.to_dict() == spec.to_dict()
    mc = TaskSpec.resolve("mc_taco")
    assert mc.query_fields() == ["question", "sentence"]
    assert mc.label_field() == "label"
    assert TaskSpec.resolve("squad_completion").query_fields() == ["context", "question"]
    with pytest.raises(ConfigError, match="unknown keys"):
        TaskSpec.from_dict({**mc.to_dict(), "bogus": 1})


def test_no_dataset_path_is_a_user_error():
    raw = TaskSpec.resolve("squad_completion").to_dict()
    raw.pop("dataset_path")
    with pytest.raises(TcqaError, match="--data-files squad_completion:validation="):
        load_split(TaskSpec.from_dict(raw), "validation")
