"""Any lm-eval task by name: lm-eval's own task machinery gives the docs, queries and splits.

Tasks are lm-eval task YAMLs written here over slices of the real MC-TACO and based-squad files
(``dataset_path: json`` with local ``data_files``; nothing reaches the hub). lm-eval's own mc_taco
config is used through ``include:`` of the file lm-eval ships, not copied.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tcqa_data.errors import ConfigError, TcqaError
from tcqa_data.prep.pipeline import decontaminate

lm_eval_tasks = pytest.importorskip("lm_eval.tasks", reason="needs the lm-eval extra")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

MC_COLUMNS = ["sentence", "question", "answer", "label", "category"]
MC_GROUPS = 22        # the first 22 questions of test_9442.tsv hold 3 that the wiki sample contains
SQUAD_TITLES = {"Super_Bowl_50": 4, "Apollo_program": 4}   # docs per title (Apollo's are in the wiki)


def _mc_rows(tsv: Path, n_groups: int) -> list[list[str]]:
    rows: list[list[str]] = []
    groups: set[tuple[str, str]] = set()
    with open(tsv, encoding="utf-8", newline="") as fh:
        for row in csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE):
            if (row[0], row[1]) not in groups:
                if len(groups) == n_groups:
                    break
                groups.add((row[0], row[1]))
            rows.append(row)
    return rows


def _write_mc(rows: list[list[str]], tsv: Path, jsonl: Path) -> None:
    """The same rows as an official-format TSV and as the hub's JSON records (label 0/1)."""
    with open(tsv, "w", encoding="utf-8", newline="") as fh:
        csv.writer(fh, delimiter="\t", quoting=csv.QUOTE_NONE, lineterminator="\n").writerows(rows)
    records = [dict(zip(MC_COLUMNS, r, strict=True)) for r in rows]
    for rec in records:
        rec["label"] = {"no": 0, "yes": 1}[rec["label"]]
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


PICK_UTILS = '''\
import datasets


def process_docs(dataset):
    """One doc per MC-TACO question: its candidate answers as choices, the first plausible one gold."""
    groups = {}
    for row in dataset:
        g = groups.setdefault((row["sentence"], row["question"]), {
            "sentence": row["sentence"], "question": row["question"], "category": row["category"],
            "choices": [], "labels": []})
        g["choices"].append(row["answer"])
        g["labels"].append(int(row["label"]))
    return datasets.Dataset.from_list(
        [{**g, "gold": g["labels"].index(1)} for g in groups.values() if 1 in g["labels"]])


def query(doc):
    return doc["sentence"] + " " + doc["question"]
'''

GEN_UTILS = '''\
def process_results(doc, results):
    return {"contains": float(doc["value"].strip().lower() in results[0].lower())}
'''


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory, mc_taco_test, mc_taco_dev, squad_validation) -> Path:
    root = tmp_path_factory.mktemp("lm_eval_tasks")
    data = root / "data"
    data.mkdir()
    _write_mc(_mc_rows(mc_taco_test, MC_GROUPS), data / "mc_test.tsv", data / "mc_test.jsonl")
    _write_mc(_mc_rows(mc_taco_dev, 3), data / "mc_dev.tsv", data / "mc_dev.jsonl")
    left = dict(SQUAD_TITLES)
    with open(squad_validation, encoding="utf-8") as fh, open(data / "squad.jsonl", "w") as out:
        for line in fh:
            title = json.loads(line)["title"]
            if left.get(title, 0) > 0:
                left[title] -= 1
                out.write(line)
    tasks = root / "tasks"
    tasks.mkdir()
    mc_taco_yaml = Path(lm_eval_tasks.__file__).parent / "mc_taco" / "default.yaml"
    (tasks / "mc_taco_local.yaml").write_text(textwrap.dedent(f"""\
        include: {mc_taco_yaml}
        task: tcqa_test_mc_taco
        dataset_path: json
        dataset_kwargs:
          data_files:
            test: {data / 'mc_test.jsonl'}
            validation: {data / 'mc_dev.jsonl'}
        """))
    (tasks / "pick_utils.py").write_text(PICK_UTILS)
    (tasks / "pick.yaml").write_text(textwrap.dedent(f"""\
        task: tcqa_test_pick
        dataset_path: json
        dataset_kwargs:
          data_files:
            test: {data / 'mc_test.jsonl'}
        test_split: test
        process_docs: !function pick_utils.process_docs
        output_type: multiple_choice
        doc_to_text: "{{{{sentence}}}}\\nQuestion: {{{{question}}}}\\nAnswer:"
        doc_to_choice: choices
        doc_to_target: gold
        should_decontaminate: true
        doc_to_decontamination_query: !function pick_utils.query
        metric_list:
          - metric: acc
            aggregation: mean
            higher_is_better: true
          - metric: acc_norm
            aggregation: mean
            higher_is_better: true
        metadata:
          version: 1.0
          group_by: [sentence]
        """))
    (tasks / "gen_utils.py").write_text(GEN_UTILS)
    (tasks / "squad_gen.yaml").write_text(textwrap.dedent(f"""\
        task: tcqa_test_squad_gen
        dataset_path: json
        dataset_kwargs:
          data_files:
            validation: {data / 'squad.jsonl'}
        validation_split: validation
        output_type: generate_until
        doc_to_text: "{{{{text | trim}}}}"
        doc_to_target: "{{{{value | trim}}}}"
        generation_kwargs:
          until: ["\\n"]
          max_gen_toks: 8
          do_sample: false
        process_results: !function gen_utils.process_results
        metric_list:
          - metric: contains
            aggregation: mean
            higher_is_better: true
        """))
    (tasks / "suite.yaml").write_text(textwrap.dedent("""\
        group: tcqa_test_suite
        task: [tcqa_test_pick, tcqa_test_squad_gen]
        """))
    return root


@pytest.fixture(scope="module")
def prepared(wiki_index, task_dir, tmp_path_factory):
    """The lm-eval tasks (mc_taco and the suite group) and the built-in mc_taco, decontaminated."""
    out = tmp_path_factory.mktemp("prep")
    ours = out / "lm_eval"
    decontaminate(wiki_index, ["tcqa_test_mc_taco", "tcqa_test_suite"], ours,
                  lm_eval_include=task_dir / "tasks", lm_eval_include_defaults=False,
                  group_by={"tcqa_test_mc_taco": ["sentence", "question"]}, quiet=True,
                  allow_task_code=True)  # the suite's !function helpers are this test's own code
    builtin = out / "builtin"
    decontaminate(wiki_index, ["mc_taco"], builtin, quiet=True,
                  data_files={"mc_taco": {"test": task_dir / "data" / "mc_test.tsv"}})
    return ours, builtin


def _table(folder: Path, task: str, split: str, name: str):
    return pq.read_table(folder / task / split / f"{name}.parquet")


def test_lm_eval_mc_taco_equals_builtin_mc_taco(prepared):
    ours, builtin = prepared
    for name in ("full", "clean", "dirty"):
        assert _table(ours, "tcqa_test_mc_taco", "test", name).to_pylist() == \
            _table(builtin, "mc_taco", "test", name).to_pylist()
    a = _table(ours, "tcqa_test_mc_taco", "test", "contamination").to_pydict()
    b = _table(builtin, "mc_taco", "test", "contamination").to_pydict()
    for col in ("query", "group_id", "status", "dirty", "doc_dirty", "ngram_hits", "longest_match",
                "match_field", "minhash_sim"):
        assert a[col] == b[col], col
    assert 0 < sum(a["dirty"]) < len(a["dirty"])  # both kinds of doc are present
    assert a["query"][0].startswith("How long was his mother ill? Durer's father died in 1502")
    manifest = json.loads((ours / "prep_manifest.json").read_text())
    assert manifest["tasks"]["tcqa_test_mc_taco"]["source"]["query"] == "{{question}} {{sentence}}"


def test_run_summary_covers_lm_eval_tasks(prepared):
    """The PREP_DIR summary has a row per lm-eval task (local json data: named by the task) with its
    counts from contamination.parquet; the CONDA rows put them in their split's column."""
    import csv

    ours, builtin = prepared
    s = json.loads((ours / "summary.json").read_text())
    got = {(r["task"], r["split"]): r for r in s["rows"]}
    assert set(got) == {("tcqa_test_mc_taco", "test"), ("tcqa_test_pick", "test"),
                        ("tcqa_test_squad_gen", "validation")}
    for (task, split), r in got.items():
        cont = _table(ours, task, split, "contamination").to_pandas()
        assert (r["docs"], r["dirty_docs"], r["dirty_groups"]) == (
            len(cont), int(cont["dirty"].sum()), cont[cont["dirty"]]["group_id"].nunique())
        assert r["dataset"] == task and r["subset"] == ""  # `dataset_path: json` names no dataset
    rows = {r[0]: r for r in csv.reader((ours / "contamination_report.csv").open(), delimiter=";")}
    r = got[("tcqa_test_squad_gen", "validation")]
    assert rows["tcqa_test_squad_gen"][4:7] == ["", f"{100 * r['dirty_docs'] / r['docs']:.2f}", ""]
    mc = got[("tcqa_test_mc_taco", "test")]
    assert rows["tcqa_test_mc_taco"][4:7] == ["", "", f"{100 * mc['dirty_docs'] / mc['docs']:.2f}"]
    # the built-in task names its hub dataset, with the same counts
    b = json.loads((builtin / "summary.json").read_text())["rows"]
    assert b[0]["dataset"] == "CogComp/mc_taco"
    assert {k: b[0][k] for k in ("docs", "dirty_docs", "groups", "dirty_groups")} == \
        {k: mc[k] for k in ("docs", "dirty_docs", "groups", "dirty_groups")}


def test_lm_eval_own_query_method_is_the_trap(task_dir):
    """lm-eval 0.4.13's Task.doc_to_decontamination_query raises on MC-TACO's text; ours renders it."""
    from tcqa_data.prep.lm_eval_tasks import decontamination_query, resolve_lm_eval_tasks

    (mc,) = resolve_lm_eval_tasks(["tcqa_test_mc_taco"], include_path=task_dir / "tasks",
                                  include_defaults=False)
    doc = mc.lm_task.eval_docs[0]
    with pytest.raises(SyntaxError):
        mc.lm_task.doc_to_decontamination_query(doc)
    assert decontamination_query(mc.lm_task, doc) == f"{doc['question']} {doc['sentence']}" == mc.queries[0]


def test_group_expands_and_queries_follow_lm_eval(prepared, task_dir):
    ours, _ = prepared
    manifest = json.loads((ours / "prep_manifest.json").read_text())
    assert {"tcqa_test_pick", "tcqa_test_squad_gen"} <= set(manifest["tasks"])
    assert manifest["tasks"]["tcqa_test_pick"]["source"]["requested_as"] == "tcqa_test_suite"
    # a !function query, on docs made by a !function process_docs (one doc per question)
    full = _table(ours, "tcqa_test_pick", "test", "full").to_pylist()
    cont = _table(ours, "tcqa_test_pick", "test", "contamination").to_pydict()
    assert 10 < len(full) <= MC_GROUPS
    assert cont["query"] == [d["sentence"] + " " + d["question"] for d in full]
    # metadata group_by: questions about one sentence form one group
    sentences = [d["sentence"] for d in full]
    assert [d["group_id"] for d in full] == [list(dict.fromkeys(sentences)).index(s) for s in sentences]
    # no should_decontaminate: the query is doc_to_text ("{{text | trim}}")
    squad = _table(ours, "tcqa_test_squad_gen", "validation", "full").to_pylist()
    sq = _table(ours, "tcqa_test_squad_gen", "validation", "contamination").to_pydict()
    assert sq["query"] == [d["text"].strip() for d in squad]
    assert sq["group_id"] == list(range(len(squad)))
    assert 0 < sum(sq["dirty"]) < len(squad)


def test_exported_yaml_is_relocatable_and_serves_the_prepared_docs(prepared, task_dir, tmp_path):
    ours, _ = prepared
    # copy, then rename the copy: a path written into the export would now point nowhere
    shutil.copytree(ours, tmp_path / "copy")
    moved = (tmp_path / "copy").rename(tmp_path / "moved")
    dirs = [moved / "tcqa_test_pick" / "test" / "lm_eval", moved / "tcqa_test_mc_taco" / "test" / "lm_eval"]
    for d in dirs:
        for f in [*d.glob("*.yaml"), d / "tcqa_dataset.py"]:
            text = f.read_text()
            assert str(ours) not in text and str(task_dir) not in text and str(tmp_path) not in text
    tm = lm_eval_tasks.TaskManager(include_path=[str(d) for d in dirs], include_defaults=False)
    tasks = tm.load(["tcqa_tcqa_test_pick_test_clean", "tcqa_tcqa_test_mc_taco_test_full"])["tasks"]
    pick = tasks["tcqa_tcqa_test_pick_test_clean"]
    clean = _table(moved, "tcqa_test_pick", "test", "clean").to_pylist()
    docs = list(pick.eval_docs)
    assert [d["doc_id"] for d in docs] == [d["doc_id"] for d in clean]
    assert pick.doc_to_choice(docs[0]) == clean[0]["choices"]
    assert pick.doc_to_target(docs[0]) == clean[0]["gold"]
    # the !function query helper was copied beside the YAML, process_docs was not re-applied
    assert (dirs[0] / "pick_utils.py").is_file()
    mc = tasks["tcqa_tcqa_test_mc_taco_test_full"]
    assert mc.doc_to_text(mc.eval_docs[0]).endswith("\nPlausible:")
    assert len(mc.eval_docs) == len(_table(moved, "tcqa_test_mc_taco", "test", "full"))


def test_same_inputs_give_identical_bytes_in_any_folder(prepared, wiki_index, task_dir, tmp_path):
    ours, _ = prepared
    again = tmp_path / "elsewhere" / "prep"
    decontaminate(wiki_index, ["tcqa_test_suite"], again, lm_eval_include=task_dir / "tasks",
                  lm_eval_include_defaults=False, quiet=True, allow_task_code=True)
    for task in ("tcqa_test_pick", "tcqa_test_squad_gen"):
        files = sorted(p.relative_to(again) for p in (again / task).rglob("*") if p.is_file())
        assert any(f.name == "fewshot.parquet" for f in files)
        for f in files:
            assert (again / f).read_bytes() == (ours / f).read_bytes(), f


def _one_line_error(excinfo, *needles: str) -> str:
    msg = str(excinfo.value)
    assert "\n" not in msg
    for n in needles:
        assert n in msg, msg
    return msg


def test_unknown_task_is_a_one_line_error(task_dir):
    from tcqa_data.prep.lm_eval_tasks import resolve_lm_eval_tasks

    with pytest.raises(ConfigError) as ei:
        resolve_lm_eval_tasks(["tcqa_test_pikc"], include_path=task_dir / "tasks", include_defaults=False)
    _one_line_error(ei, "tcqa_test_pikc", "tcqa_test_pick")  # names the task, suggests the close name


def test_task_without_test_or_validation_split(task_dir, tmp_path):
    from tcqa_data.prep.lm_eval_tasks import resolve_lm_eval_tasks

    (tmp_path / "train_only.yaml").write_text(textwrap.dedent(f"""\
        task: tcqa_train_only
        dataset_path: json
        dataset_kwargs:
          data_files:
            train: {task_dir / 'data' / 'mc_test.jsonl'}
        training_split: train
        output_type: multiple_choice
        doc_to_text: "{{{{question}}}}"
        doc_to_target: label
        doc_to_choice: ["no", "yes"]
        """))
    with pytest.raises(ConfigError) as ei:
        resolve_lm_eval_tasks(["tcqa_train_only"], include_path=tmp_path, include_defaults=False)
    _one_line_error(ei, "tcqa_train_only", "neither test_split nor validation_split")


def test_yaml_lm_eval_cannot_load(tmp_path):
    from tcqa_data.prep.lm_eval_tasks import resolve_lm_eval_tasks

    # a YAML error: lm-eval's index skips the file, so the error says which file it could not read
    (tmp_path / "broken.yaml").write_text("task: tcqa_broken\ndoc_to_text: [unclosed\n")
    with pytest.raises(ConfigError) as ei:
        resolve_lm_eval_tasks(["tcqa_broken"], include_path=tmp_path, include_defaults=False)
    _one_line_error(ei, "tcqa_broken", "broken.yaml")
    # valid YAML, but lm-eval fails to build the task (its data file does not exist)
    (tmp_path / "broken.yaml").unlink()
    (tmp_path / "missing.yaml").write_text(textwrap.dedent(f"""\
        task: tcqa_missing_data
        dataset_path: json
        dataset_kwargs:
          data_files:
            test: {tmp_path / 'nowhere.jsonl'}
        test_split: test
        output_type: generate_until
        doc_to_text: "{{{{question}}}}"
        doc_to_target: "{{{{answer}}}}"
        """))
    with pytest.raises(ConfigError) as ei:
        resolve_lm_eval_tasks(["tcqa_missing_data"], include_path=tmp_path, include_defaults=False)
    _one_line_error(ei, "lm-eval cannot load task 'tcqa_missing_data'", "missing.yaml")


def test_builtin_tasks_work_without_lm_eval(wiki_index, mc_taco_dev, monkeypatch, tmp_path):
    for name in [m for m in sys.modules if m == "lm_eval" or m.startswith("lm_eval.")]:
        monkeypatch.setitem(sys.modules, name, None)  # `import lm_eval...` now raises ImportError
    monkeypatch.setitem(sys.modules, "lm_eval", None)
    summary = decontaminate(wiki_index, ["mc_taco"], tmp_path / "prep", quiet=True,
                            data_files={"mc_taco": {"validation": mc_taco_dev}})
    assert summary["tasks"]["mc_taco"]["validation"]["docs"] == 3783
    with pytest.raises(ConfigError) as ei:
        decontaminate(wiki_index, ["hellaswag"], tmp_path / "prep2", quiet=True)
    _one_line_error(ei, "hellaswag", "pip install 'tcqa-data[lm-eval]'")


@pytest.mark.slow
def test_cli_options_reach_lm_eval(wiki_index, task_dir, monkeypatch, capsys, tmp_path):
    """`--lm-eval-include` joins lm-eval's shipped tasks (all indexed), `--group-by` is parsed; an
    unknown name is one `Error:` line with the close name from the include path, nothing written."""
    from tcqa_data.cli import main

    monkeypatch.setattr(sys, "argv", [
        "tcqa-data", "decontaminate", str(wiki_index), "--tasks", "tcqa_test_pikc",
        "--lm-eval-include", str(task_dir / "tasks"), "--group-by", "tcqa_test_pikc:sentence",
        "--out", str(tmp_path / "prep"), "-q"])
    with pytest.raises(SystemExit) as exc:
        main()
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2
    assert err[-1].startswith("Error: unknown task 'tcqa_test_pikc'") and "tcqa_test_pick" in err[-1]
    assert not (tmp_path / "prep").exists()


def test_group_by_option_parsing():
    from tcqa_data.prep.lm_eval_tasks import parse_group_by

    assert parse_group_by(["mc:sentence,question", "x:a"]) == {"mc": ["sentence", "question"], "x": ["a"]}
    for bad in ("mc", "mc:", ":a"):
        with pytest.raises(ConfigError):
            parse_group_by([bad])


# ---- lm-eval itself on the exported YAMLs (conftest's session tiny_model) ------------------------
@pytest.mark.slow
def test_lm_eval_results_on_clean_equal_the_full_run(prepared, task_dir, tiny_model):
    """lm-eval 0.4.13 (tiny random Llama, SmolLM2 tokenizer) on the original task and on the exported
    full and clean YAMLs: same prompts, metrics and doc ids; clean's per-doc results are full's."""
    import lm_eval

    ours, _ = prepared
    model_dir = tiny_model
    include = [str(task_dir / "tasks"), str(ours / "tcqa_test_pick" / "test" / "lm_eval"),
               str(ours / "tcqa_test_squad_gen" / "validation" / "lm_eval")]
    names = {"tcqa_test_pick": "test", "tcqa_test_squad_gen": "validation"}
    run = [n for t, s in names.items() for n in (t, f"tcqa_{t}_{s}_full", f"tcqa_{t}_{s}_clean")]
    res = lm_eval.simple_evaluate(
        model="hf", model_args=f"pretrained={model_dir},dtype=float32", tasks=run,
        task_manager=lm_eval_tasks.TaskManager(include_path=include, include_defaults=False),
        device="cpu", batch_size=1, log_samples=True, num_fewshot=0, random_seed=0, numpy_random_seed=0,
        torch_random_seed=0, bootstrap_iters=0)
    metric = {"tcqa_test_pick": "acc", "tcqa_test_squad_gen": "contains"}
    for task, split in names.items():
        orig = {s["doc_id"]: s for s in res["samples"][task]}
        full = {s["doc_id"]: s for s in res["samples"][f"tcqa_{task}_{split}_full"]}
        clean = res["samples"][f"tcqa_{task}_{split}_clean"]
        prepared_clean = _table(ours, task, split, "clean").column("doc_id").to_pylist()
        assert sorted(full) == sorted(orig)
        for i, s in full.items():
            assert s["doc"]["doc_id"] == i  # lm-eval's doc id in the full run is ours
            assert s["arguments"] == orig[i]["arguments"]  # same prompts (and choices)
            assert s["filtered_resps"] == orig[i]["filtered_resps"]
            assert s[metric[task]] == orig[i][metric[task]]
        assert [s["doc"]["doc_id"] for s in sorted(clean, key=lambda s: s["doc_id"])] == prepared_clean
        assert 0 < len(clean) < len(full)
        for s in clean:
            f = full[s["doc"]["doc_id"]]
            assert s["arguments"] == f["arguments"]
            assert s["filtered_resps"] == f["filtered_resps"]
            assert s[metric[task]] == f[metric[task]]
        assert {k for k in res["results"][f"tcqa_{task}_{split}_full"] if "," in k} == \
            {k for k in res["results"][task] if "," in k}  # same metrics


@pytest.mark.slow
def test_backend_lm_eval_writes_samples_per_prepared_doc(prepared, tiny_model, tmp_path):
    """`evaluate --backend lm-eval`: lm-eval runs the exported full YAML and saves its samples as its
    CLI does (samples_<task>_<date>.jsonl), one per prepared doc, keyed by our doc_id."""
    from tcqa_data.eval.lm_eval_backend import SAMPLES_GLOB, run_lm_eval

    ours, _ = prepared
    run = run_lm_eval(ours, f"pretrained={tiny_model},dtype=float32", tasks=["tcqa_test_squad_gen"],
                      output=tmp_path / "lm_out", batch_size=1, device="cpu", allow_task_code=True)
    assert run["tasks"] == ["tcqa_tcqa_test_squad_gen_validation_full"]
    (samples,) = sorted((tmp_path / "lm_out").rglob(SAMPLES_GLOB.format(task=run["tasks"][0])))
    recs = [json.loads(line) for line in samples.read_text().splitlines()]
    full = _table(ours, "tcqa_test_squad_gen", "validation", "full").column("doc_id").to_pylist()
    assert sorted(r["doc_id"] for r in recs) == full == sorted(r["doc"]["doc_id"] for r in recs)
    assert all("contains" in r for r in recs)
    with pytest.raises(TcqaError, match="not prepared"):
        run_lm_eval(ours, "pretrained=x", tasks=["nope"])


# ---- analyze on lm-eval's own samples of tasks resolved through lm-eval ---------------------------
def _write_samples(folder: Path, lm_task: str, records: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"samples_{lm_task}_2026-01-01T00-00-00.000000.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.mark.slow
def test_analyze_lm_eval_task_from_logged_metric_values(prepared, tiny_model, tmp_path):
    """Tasks resolved through lm-eval have no task.yaml: analyze takes the per-doc metric values lm-eval
    logs. At the rule's threshold, full / clean / dirty equal lm-eval's per-doc values aggregated over
    those docs (acc, acc_norm: means; mc_taco's f1: sklearn's pooled F1, as lm-eval aggregates it), and
    full equals lm-eval's own aggregate. Samples of another task, a --limit run, a cut question group
    and other data are refused with one line."""
    from sklearn.metrics import f1_score

    from tcqa_data.analysis import analyze
    from tcqa_data.eval.lm_eval_backend import SAMPLES_GLOB, run_lm_eval
    from tcqa_data.prep.lm_eval_export import lm_eval_task_name

    ours, _ = prepared
    run = run_lm_eval(ours, f"pretrained={tiny_model},dtype=float32",
                      tasks=["tcqa_test_pick", "tcqa_test_mc_taco"], output=tmp_path / "lm_out",
                      batch_size=4, device="cpu", allow_task_code=True)
    res = analyze(ours, tmp_path / "lm_out", tmp_path / "analysis", bootstrap=200)
    expect = {"tcqa_test_pick": {"lm_eval/acc": "acc", "lm_eval/acc_norm": "acc_norm"},
              "tcqa_test_mc_taco": {"lm_eval/acc": "acc", "lm_eval/f1": "f1"}}
    assert sorted(res["tasks"]) == sorted(expect)
    samples = {}
    for task, names in expect.items():
        lm_task = lm_eval_task_name(task, "test", "full")
        (path,) = sorted((tmp_path / "lm_out").rglob(SAMPLES_GLOB.format(task=lm_task)))
        samples[task] = [json.loads(line) for line in path.read_text().splitlines()]
        by_id = {r["doc_id"]: r for r in samples[task]}
        entry = res["tasks"][task]
        assert entry["metrics"] == list(names)
        table = entry["rule"]["table"]
        for sub in ("full", "clean", "dirty"):
            ids = _table(ours, task, "test", sub).column("doc_id").to_pylist()
            assert 0 < len(ids) == table["subsets"][sub]["docs"]
            for name, key in names.items():
                values = [by_id[i][key] for i in ids]
                want = f1_score([g for g, _ in values], [p for _, p in values]) if key == "f1" else \
                    sum(values) / len(values)
                assert table["subsets"][sub]["metrics"][name]["value"] == want, (task, sub, name)
        for name, key in names.items():
            full = table["subsets"]["full"]["metrics"][name]["value"]
            assert full == run["results"][lm_task][f"{key},none"]  # lm-eval's own aggregate
            diff = table["clean_minus_full"][name]
            lo, hi = diff["ci95"]
            assert (lo <= diff["value"] <= hi) if lo is not None else "too few groups" in diff["note"]
        # sweeps and Llama 2's subsets run on the same per-doc values
        assert entry["sweeps"] and all(set(sw["metrics"]) == set(names) for sw in entry["sweeps"].values())
        assert "subsets" in entry["llama2"]
    report = (tmp_path / "analysis" / "report.md").read_text()
    assert "lm_eval/acc_norm" in report and "lm_eval/f1" in report

    # refused, one line each, nothing written
    pick = samples["tcqa_test_pick"]
    mc = samples["tcqa_test_mc_taco"]
    cases = [
        (_write_samples(tmp_path / "other", "hellaswag", pick), None, "not prepared"),
        (_write_samples(tmp_path / "as_squad", "hellaswag", pick), ["tcqa_test_squad_gen"],
         "samples of another task?"),
        (_write_samples(tmp_path / "left_out", lm_eval_task_name("tcqa_test_pick", "test", "full"), pick),
         ["tcqa_test_squad_gen"], "leaves out"),
        (_write_samples(tmp_path / "limit", lm_eval_task_name("tcqa_test_pick", "test", "full"), pick[:3]),
         None, "an lm-eval --limit run?"),
        (_write_samples(tmp_path / "cut", lm_eval_task_name("tcqa_test_mc_taco", "test", "full"),
                        [r for r in mc if r["doc_id"] != 1]), None, "is partial"),
        (_write_samples(tmp_path / "edited", lm_eval_task_name("tcqa_test_pick", "test", "full"),
                        [{**r, "doc": {**r["doc"], "question": "edited?"}} if r["doc_id"] == 2 else r
                         for r in pick]), None, "other data"),
    ]
    for path, tasks, needle in cases:
        with pytest.raises(TcqaError) as ei:
            analyze(ours, path, tmp_path / "refused", tasks=tasks, bootstrap=10)
        _one_line_error(ei, needle)
        assert not (tmp_path / "refused").exists()


def test_which_logged_metrics_are_analyzed():
    """Means (declared or lm-eval's default) and f1 under filter 'none' are analyzed; corpus-level
    aggregations, custom aggregation functions and f1 under another filter are skipped with reasons."""
    from tcqa_data.analysis.lm_eval_metrics import choose_metrics, doc_value
    from tcqa_data.prep.lm_eval_export import FunctionRef

    declared = {"acc": "mean", "f1": "f1", "bleu": None, "mine": FunctionRef("utils.agg")}
    logged = ["acc", "f1", "bleu", "mine", "exact_match"]
    chosen, skipped = choose_metrics(logged, ["none", "strict"], declared)
    assert [(m.name, m.aggregation) for m in chosen] == [
        ("lm_eval/acc", "mean"), ("lm_eval/f1", "f1"), ("lm_eval/exact_match", "mean"),  # lm-eval's default
        ("lm_eval/acc,strict", "mean"), ("lm_eval/exact_match,strict", "mean")]
    assert "corpus-level" in skipped["lm_eval/bleu"] and "utils.agg" in skipped["lm_eval/mine"]
    assert "filter 'strict'" in skipped["lm_eval/f1,strict"]
    assert doc_value(chosen[0], True) == 1.0 and doc_value(chosen[0], "yes") is None
    assert doc_value(chosen[1], [1, 0]) == (1, 0) and doc_value(chosen[1], [2, 0]) is None
