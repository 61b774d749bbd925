"""lm-eval tasks read from local files: ``--data-files TASK:SPLIT=PATH`` for any task lm-eval resolves.

lm-eval's own shipped task YAMLs (sciq, nq_open, hellaswag) keep their hub ``dataset_path``; the
files here, built from real SQuAD and MC-TACO text in ../shared/data, replace it. Nothing reaches
the hub (HF_*_OFFLINE).
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tcqa_data.errors import ConfigError, InputError
from tcqa_data.prep.task_jobs import parse_data_files, task_jobs

lm_eval_tasks = pytest.importorskip("lm_eval.tasks", reason="needs the lm-eval extra")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
SHIPPED = Path(lm_eval_tasks.__file__).parent
TITLES = {"Apollo_program": 5, "Super_Bowl_50": 5}   # Apollo's article is in the wiki sample


def _squad(squad_validation: Path) -> list[dict]:
    left = dict(TITLES)
    out = []
    with open(squad_validation, encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            if left.get(rec["title"], 0) > 0:
                left[rec["title"]] -= 1
                out.append(rec)
    return out


@pytest.fixture(scope="module")
def files(squad_validation, mc_taco_dev, tmp_path_factory) -> dict[str, Path]:
    """sciq's fields from SQuAD (support = the paragraph, distractors = other questions' answers) as
    JSONL, nq_open's (question, answer list) as Parquet, hellaswag's raw fields from MC-TACO."""
    root = tmp_path_factory.mktemp("local_data")
    rows = _squad(squad_validation)
    n = len(rows)
    sciq = [{"support": r["context"], "question": r["question"], "correct_answer": r["value"],
             **{f"distractor{k}": rows[(i + k) % n]["value"] for k in (1, 2, 3)}} for i, r in enumerate(rows)]
    (root / "sciq_test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in sciq), encoding="utf-8")
    pq.write_table(pa.Table.from_pylist([{"question": r["question"], "answer": r["answers"]} for r in rows]),
                   root / "nq_validation.parquet")
    lines = mc_taco_dev.read_text(encoding="utf-8").splitlines()[:8]
    swag = [{"activity_label": "Time", "ctx_a": s, "ctx_b": q, "endings": [a, "never", "always", "soon"],
             "label": "0"} for s, q, a, _, _ in (line.split("\t") for line in lines)]
    (root / "swag.jsonl").write_text("".join(json.dumps(r) + "\n" for r in swag), encoding="utf-8")
    no_label = [{k: v for k, v in r.items() if k != "activity_label"} for r in swag]
    (root / "swag_no_label.jsonl").write_text("".join(json.dumps(r) + "\n" for r in no_label),
                                              encoding="utf-8")
    no_question = [{k: v for k, v in r.items() if k != "question"} for r in sciq]
    (root / "sciq_no_question.jsonl").write_text("".join(json.dumps(r) + "\n" for r in no_question),
                                                 encoding="utf-8")
    # the shipped YAMLs under other names, so lm-eval indexes this folder only (fast), hub paths kept
    tasks = root / "tasks"
    tasks.mkdir()
    for name, shipped in (("local_sciq", "sciq/sciq.yaml"), ("local_swag", "hellaswag/hellaswag.yaml")):
        (tasks / f"{name}.yaml").write_text(textwrap.dedent(f"""\
            include: {SHIPPED / shipped}
            task: {name}
            tag: []
            """))
    return {"root": root, "sciq": root / "sciq_test.jsonl", "nq": root / "nq_validation.parquet",
            "swag": root / "swag.jsonl", "tasks": tasks, "rows": rows}


@pytest.fixture(scope="module")
def prepared(wiki_index, files, tmp_path_factory) -> Path:
    """lm-eval's shipped sciq (JSONL) and nq_open (Parquet), by name, decontaminated from local files."""
    from tcqa_data.prep.pipeline import decontaminate

    out = tmp_path_factory.mktemp("prep") / "prep"
    decontaminate(wiki_index, ["sciq", "nq_open"], out, quiet=True,
                  data_files={"sciq": {"test": files["sciq"]}, "nq_open": {"validation": files["nq"]}})
    return out


def test_shipped_lm_eval_tasks_read_local_jsonl_and_parquet(prepared, files):
    """The files' rows are the docs, in order, with lm-eval's queries; the wiki's Apollo paragraphs are
    flagged, Super Bowl's are not; the manifest names the files, never their folder."""
    rows = files["rows"]
    sciq = pq.read_table(prepared / "sciq" / "test" / "full.parquet").to_pylist()
    assert [d["support"] for d in sciq] == [r["context"] for r in rows]
    dirty = {d["doc_id"] for d in pq.read_table(prepared / "sciq" / "test" / "dirty.parquet").to_pylist()}
    apollo = {i for i, r in enumerate(rows) if r["title"] == "Apollo_program"}
    assert dirty and dirty <= apollo
    nq = pq.read_table(prepared / "nq_open" / "validation" / "full.parquet").to_pylist()
    assert [(d["question"], d["answer"]) for d in nq] == [(r["question"], r["answers"]) for r in rows]
    manifest = json.loads((prepared / "prep_manifest.json").read_text())
    assert manifest["tasks"]["sciq"]["source"]["data_files"] == {"test": "sciq_test.jsonl"}
    assert manifest["tasks"]["nq_open"]["source"]["data_files"] == {"validation": "nq_validation.parquet"}
    assert str(files["root"]) not in (prepared / "prep_manifest.json").read_text()


@pytest.mark.slow
def test_lm_eval_scores_the_local_docs(prepared, files, tiny_model, tmp_path):
    """`evaluate --backend lm-eval` on the exported sciq: one sample per local row, its prompt sciq's
    template over that row, its choices the row's distractors and answer."""
    from tcqa_data.eval.lm_eval_backend import SAMPLES_GLOB, run_lm_eval

    run = run_lm_eval(prepared, f"pretrained={tiny_model},dtype=float32", tasks=["sciq"],
                      output=tmp_path / "lm_out", batch_size=4, device="cpu")
    (samples,) = sorted((tmp_path / "lm_out").rglob(SAMPLES_GLOB.format(task=run["tasks"][0])))
    recs = sorted((json.loads(line) for line in samples.read_text().splitlines()), key=lambda r: r["doc_id"])
    rows = files["rows"]
    assert [r["doc_id"] for r in recs] == list(range(len(rows)))
    for rec, row in zip(recs, rows, strict=True):
        context, _ = rec["arguments"]["gen_args_0"]["arg_0"], rec["arguments"]["gen_args_0"]["arg_1"]
        assert context == f"{row['context'].lstrip()}\nQuestion: {row['question']}\nAnswer:"
        choices = [a["arg_1"].strip() for a in rec["arguments"].values()]
        assert choices[3] == row["value"]
        assert rec["acc"] in (0.0, 1.0)


def test_a_missing_field_is_one_line_naming_file_and_field(files):
    """A template's field (sciq's question) and a process_docs field (hellaswag's activity_label)
    missing from the file: one line naming both; the good hellaswag file loads through process_docs."""
    include = {"lm_eval_include": files["tasks"], "lm_eval_include_defaults": False}
    bad = files["root"] / "sciq_no_question.jsonl"
    with pytest.raises(InputError) as err:
        task_jobs(["local_sciq"], {"local_sciq": {"test": bad}}, None, **include)
    assert str(bad) in str(err.value) and "'question'" in str(err.value) and "\n" not in str(err.value)
    bad = files["root"] / "swag_no_label.jsonl"
    with pytest.raises(InputError) as err:
        task_jobs(["local_swag"], {"local_swag": {"validation": bad}}, None, **include)
    assert str(bad) in str(err.value) and "'activity_label'" in str(err.value) and "\n" not in str(err.value)
    (job,) = task_jobs(["local_swag"], {"local_swag": {"validation": files["swag"]}}, None, **include)
    (b, queries, role) = job.parts[0]
    assert role == "validation" and b.num_docs == 8 and queries[0].startswith("Time: ")
    with pytest.raises(ConfigError, match="has no split 'tset'"):
        task_jobs(["local_sciq"], {"local_sciq": {"tset": files["sciq"]}}, None, **include)
    with pytest.raises(ConfigError, match="not among the tasks resolved"):
        task_jobs(["local_sciq"], {"local_swag": {"validation": files["swag"]}}, None, **include)


def test_python_class_tasks_and_mixed_formats_are_refused(files):
    from tcqa_data.prep.lm_eval_local import LocalTaskData

    local = LocalTaskData({"t": {"test": files["sciq"], "train": files["nq"]}})
    with pytest.raises(ConfigError, match="Python class"):
        local.config("t", {"task": "t", "class": object, "test_split": "test"})
    with pytest.raises(ConfigError, match="mix file types"):
        local.config("t", {"task": "t", "test_split": "test", "training_split": "train"})


def test_data_files_option_takes_lm_eval_names():
    assert parse_data_files(["sciq:test=a.jsonl"], ["sciq"]) == {"sciq": {"test": "a.jsonl"}}
    # a member of a group or tag: checked once lm-eval resolves the names
    assert parse_data_files(["arc_easy:test=a.jsonl"], ["ai2_arc"]) == {"arc_easy": {"test": "a.jsonl"}}
    with pytest.raises(ConfigError, match="not among --tasks"):
        parse_data_files(["sciq:test=a.jsonl"], ["mc_taco"])


def test_purify_removes_what_a_local_lm_eval_task_holds(files, wiki_sample, tmp_path):
    """purify against lm-eval's sciq (under another name) over the local JSONL: the Apollo article,
    which holds the SQuAD paragraphs, is cut or dropped; the articles without them are kept whole."""
    from tcqa_data.prep.purify import purify

    articles = [json.loads(line) for line in wiki_sample.read_text(encoding="utf-8").splitlines()]
    keep = [a for a in articles if a["title"] in ("Apollo program", "Albedo", "Anarchism")]
    assert len(keep) == 3
    corpus = tmp_path / "corpus" / "wiki.jsonl"
    corpus.parent.mkdir()
    corpus.write_text("".join(json.dumps(a) + "\n" for a in keep), encoding="utf-8")
    purify([str(corpus)], ["local_sciq"], tmp_path / "out", quiet=True,
           data_files={"local_sciq": {"test": str(files["sciq"])}},
           lm_eval_include=files["tasks"], lm_eval_include_defaults=False)
    out = [json.loads(line) for line in (tmp_path / "out" / "wiki.jsonl").read_text().splitlines()]
    before = {a["title"]: a["text"] for a in keep}
    after = {a["title"]: a["text"] for a in out}
    assert after.get("Apollo program") != before["Apollo program"]
    assert all(after[t] == before[t] for t in before if t != "Apollo program")
