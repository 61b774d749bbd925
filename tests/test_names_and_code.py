"""Names that cannot escape, and code that does not run unasked (issue 29), on real data.

Each case the issue reproduced: a split name with ``..`` or an absolute path in ``--data-files``, a
task YAML or an lm-eval YAML whose task is ``../../evil_task``, a model named ``..``; a task template
that reaches Python through Jinja; exported code changed after decontaminate; a manifest whose
include_path leads out. Each is one ``Error:`` line (exit 2 from the CLI), writes nothing outside
its output folder, and runs nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import textwrap
from pathlib import Path

import pytest
from cli_fixtures import run

from tcqa_data.errors import ConfigError, TcqaError

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

BUILTIN_TASKS = Path(__file__).resolve().parents[1] / "tcqa_data" / "prep" / "tasks"
# the template of the issue, with the file it touches named by the test
ATTACK = "{{{{ lipsum.__globals__['os'].popen('touch {target}').read() }}}}{{{{text}}}}"


def snapshot(root: Path) -> dict[str, str]:
    """Every file and folder under ``root`` (folders as "dir"), with a digest of each file."""
    return {str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir")
            for p in sorted(root.rglob("*"))}


def one_error_line(err: str, *needles: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), err
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def squad30(squad_validation, tmp_path_factory) -> Path:
    """The first 30 based-squad validation docs."""
    path = tmp_path_factory.mktemp("squad") / "squad30.jsonl"
    path.write_text("".join(squad_validation.read_text(encoding="utf-8").splitlines(keepends=True)[:30]))
    return path


# ---- names from --data-files and task YAMLs ----------------------------------------------------
def test_split_with_dot_dot_from_data_files_is_refused(small, tmp_path, monkeypatch, capsys):
    """`--data-files 'mc_taco:../../escaped=dev.tsv' --out work/out` once wrote into work/escaped."""
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    code, _, err = run(["decontaminate", small["index"], "--tasks", "mc_taco", "--out", "work/out",
                        "--data-files", f"mc_taco:../../escaped={small['data']}"], monkeypatch, capsys)
    assert code == 2
    one_error_line(err, "split name '../../escaped' from --data-files is not a valid folder name")
    assert snapshot(tmp_path) == before  # nothing written, in --out or anywhere else


def test_absolute_split_name_cannot_overwrite_another_prepared_folder(small, squad30, tmp_path, monkeypatch,
                                                                      capsys):
    """`--data-files "mc_taco:<another PREP_DIR>/squad_completion/validation=dev.tsv"` once replaced that
    folder's squad full.parquet with MC-TACO rows and exited 0."""
    other = tmp_path / "other"
    code, _, err = run(["decontaminate", small["index"], "--tasks", "squad_completion", "--out", other, "-q",
                        "--data-files", f"squad_completion:validation={squad30}"], monkeypatch, capsys)
    assert code == 0, err
    target = other / "squad_completion" / "validation"
    assert (target / "full.parquet").is_file()
    before = snapshot(tmp_path)
    code, _, err = run(["decontaminate", small["index"], "--tasks", "mc_taco", "--out", tmp_path / "out",
                        "--data-files", f"mc_taco:{target}={small['data']}"], monkeypatch, capsys)
    assert code == 2
    one_error_line(err, f"split name '{target}' from --data-files", "not a valid folder name")
    assert snapshot(tmp_path) == before
    # the library entry point refuses the same, naming where the name came from
    from tcqa_data.prep.pipeline import decontaminate

    with pytest.raises(ConfigError, match="from data_files"):
        decontaminate(small["index"], ["mc_taco"], tmp_path / "out",
                      data_files={"mc_taco": {str(target): small["data"]}}, quiet=True)
    assert snapshot(tmp_path) == before


def test_task_yaml_named_up_and_out_is_refused(small, tmp_path, monkeypatch, capsys):
    """A task YAML with `task: ../../evil_task` once wrote outside --out."""
    text = (BUILTIN_TASKS / "mc_taco.yaml").read_text(encoding="utf-8")
    assert "\ntask: mc_taco\n" in text
    evil = tmp_path / "evil.yaml"
    evil.write_text(text.replace("\ntask: mc_taco\n", "\ntask: ../../evil_task\n"), encoding="utf-8")
    (tmp_path / "work").mkdir()
    before = snapshot(tmp_path)
    code, _, err = run(["decontaminate", small["index"], "--tasks", evil, "--out", tmp_path / "work" / "out",
                        "--data-files", f"{evil}:validation={small['data']}"], monkeypatch, capsys)
    assert code == 2
    one_error_line(err, "task name '../../evil_task' from task YAML", "evil.yaml", "not a valid folder name")
    assert snapshot(tmp_path) == before
    # a split declared in a task YAML becomes a folder too
    evil.write_text(text.replace("validation_split: validation", "validation_split: /tmp/x"),
                    encoding="utf-8")
    code, _, err = run(["decontaminate", small["index"], "--tasks", evil, "--out", tmp_path / "work" / "out"],
                       monkeypatch, capsys)
    assert code == 2
    one_error_line(err, "validation_split name '/tmp/x' from task YAML", "absolute path")


def test_names_read_back_from_results_json_are_checked(small, tmp_path):
    """analyze joins the task and split names of an evaluate folder's results.json into PREP_DIR paths."""
    from tcqa_data.analysis.sources import from_evaluate

    ev = tmp_path / "eval"
    ev.mkdir()
    (ev / "samples.jsonl").write_text("")
    for task, split, bad in (("../../x", "test", "task name '../../x'"),
                             ("mc_taco", "/etc", "split name '/etc'")):
        (ev / "results.json").write_text(json.dumps({"tasks": {task: {"split": split}}}))
        with pytest.raises(ConfigError, match="results.json is not a valid folder name") as ei:
            from_evaluate(tmp_path / "prep", ev)
        assert bad in str(ei.value)


# ---- a model named ".." ------------------------------------------------------------------------
def test_model_named_dot_dot_writes_into_its_own_folder(small, tiny_model, tmp_path, monkeypatch, capsys):
    """A model path ending in `..` is named `..` (the folder's name); its results once went to
    PREP_DIR/eval/.. = PREP_DIR itself."""
    from tcqa_data.eval.runner import default_output

    prep = tmp_path / "prep"
    code, _, err = run(["decontaminate", small["index"], "--tasks", "mc_taco", "--out", prep, "-q",
                        "--data-files", f"mc_taco:validation={small['data']}"], monkeypatch, capsys)
    assert code == 0, err
    assert default_output(prep, "..") == prep / "eval" / "model"
    assert default_output(prep, "/abs/path") == prep / "eval" / "abs_path"
    (tiny_model / "sub").mkdir(exist_ok=True)
    before = {p.name for p in prep.iterdir()}
    code, out, err = run(["evaluate", prep, "--model", tiny_model / "sub" / "..", "--limit-groups", "2",
                          "--device", "cpu", "--batch-size", "4", "-q"], monkeypatch, capsys)
    assert code == 0, err
    assert f"wrote {prep / 'eval' / 'model'}" in out
    assert {p.name for p in prep.iterdir()} == before | {"eval"}  # no results.json beside prep_manifest.json
    assert sorted(p.name for p in (prep / "eval").iterdir()) == ["model"]
    assert (prep / "eval" / "model" / "results.json").is_file()
    assert json.loads((prep / "eval" / "model" / "results.json").read_text())["model"]["name"] == ".."


def test_lm_eval_model_folder_is_never_dot_dot():
    from tcqa_data.eval.lm_eval_backend import _model_folder

    # lm-eval's own sanitizing turns "/" into "__" but keeps "..": pretrained=.. would write beside --output
    assert _model_folder("..") == "model" and _model_folder(".") == "model"
    assert _model_folder("__models__SmolLM2-135M") == "__models__SmolLM2-135M"  # lm-eval's name, kept


# ---- templates run in a sandbox ----------------------------------------------------------------
def test_template_that_reaches_python_is_refused_and_runs_nothing(small, squad30, tmp_path, monkeypatch,
                                                                   capsys):
    """A renamed copy of the built-in squad_completion YAML whose doc_to_decontamination_query reaches
    os.popen once ran that command during decontaminate, which exited 0."""
    import jinja2

    # the template does run a shell command in Jinja's ordinary environment: the test can fail
    control = tmp_path / "CONTROL"
    jinja2.Environment().from_string(ATTACK.format(target=control)).render(text="x")
    assert control.exists()

    somefile = tmp_path / "SOMEFILE"
    text = (BUILTIN_TASKS / "squad_completion.yaml").read_text(encoding="utf-8")
    evil = text.replace("task: squad_completion", "task: squad_evil").replace(
        'doc_to_decontamination_query: "{{text}}"',
        "doc_to_decontamination_query: " + json.dumps(ATTACK.format(target=somefile)))
    assert evil != text and "popen" in evil
    (tmp_path / "squad_evil.yaml").write_text(evil, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    code, _, err = run(["decontaminate", small["index"], "--tasks", "squad_evil.yaml", "--out", "out",
                        "--data-files", f"squad_evil.yaml:validation={squad30}"], monkeypatch, capsys)
    assert code == 2
    one_error_line(err, "task 'squad_evil' (squad_evil.yaml): template doc_to_decontamination_query "
                   "was refused", "__globals__", "unsafe")
    assert not somefile.exists() and not (tmp_path / "out").exists()
    # the same for the prompt template, read by evaluate and analyze
    from tcqa_data.prep.taskspec import TaskSpec

    spec = TaskSpec.builtin("squad_completion")
    with pytest.raises(ConfigError, match="template doc_to_text was refused"):  # where it is read
        TaskSpec.from_dict({**spec.to_dict(), "doc_to_text": ATTACK.format(target=somefile)})
    # and where it is rendered, for a spec built around that check
    spec = dataclasses.replace(spec, doc_to_text=ATTACK.format(target=somefile))
    with pytest.raises(ConfigError, match="template doc_to_text was refused"):
        spec.text({"text": "x", "value": "y"})
    assert not somefile.exists()


SAFE_TEMPLATES = [
    "{{text | trim}}", "{{question}} {{sentence}}",
    "{{ text | regex_replace('[0-9]+', '#') }}", "{{ text | regex_replace('(\\\\w+)', '<\\\\1>', 2) }}",
    "{% for w in text.split()[:5] %}{{ loop.index }}:{{ w | upper }} {% endfor %}",
    "{{ [question, sentence] | join(' || ') }}", "{{ range(3) | list }}", "{{ dict(a=1) }}",
    "{{ '%s / %d' | format(question, 7) }}", "{{ text[:40] ~ '...' }}", "{{ text.replace('the', 'THE') }}",
    "{% set parts = text.split('.') %}{{ parts | length }} {{ parts[0] | title }}",
    "{{ question if question.endswith('?') else question ~ '?' }}\n",
]


def test_sandbox_renders_what_lm_eval_renders(small, squad30):
    """On real docs, the sandboxed environment gives lm-eval 0.4's text for the built-in templates and
    for templates using its regex_replace filter, loops, globals and string methods."""
    lm_utils = pytest.importorskip("lm_eval.utils", reason="needs the lm-eval extra")
    from tcqa_data.prep.benchmarks import load_split
    from tcqa_data.prep.taskspec import TaskSpec
    from tcqa_data.prep.templates import render

    mc = TaskSpec.builtin("mc_taco")
    squad = TaskSpec.builtin("squad_completion")
    mc_docs = load_split(mc, "validation", small["data"]).docs()
    squad_docs = load_split(squad, "validation", squad30).docs()
    checked = 0
    for spec, docs in ((mc, mc_docs), (squad, squad_docs)):
        for name, template in spec._templates().items():
            for doc in docs:
                assert spec._render(name, doc) == lm_utils.apply_template(template, doc)
                checked += 1
    for template in SAFE_TEMPLATES:
        for doc in mc_docs[:50]:
            doc = {**doc, "text": doc["sentence"]}
            assert render(template, doc, where="t") == lm_utils.apply_template(template, doc), template
            checked += 1
    assert checked > 1000


_TEMPLATE_LINE = re.compile(r'^(doc_to_text|doc_to_target|doc_to_choice|doc_to_decontamination_query'
                            r'|gen_prefix):\s*(".*"|\'.*\')\s*$')


def _synthetic_docs(names: set[str]):
    """Docs to try a template on: every field a string, a list, a dict of lists, an int."""
    text = "Alpha beta, gamma. Delta?"
    yield {n: text for n in names}
    yield {n: ["one", "two", "three", "four"] for n in names}
    yield {n: {"text": ["one", "two", "three"], "label": ["A", "B", "C"], "stem": text,
               "input_text": ["q1", "q2"]} for n in names}
    yield {n: 1 for n in names}


def test_sandbox_renders_every_template_lm_eval_ships_as_lm_eval_does():
    """Every one-line Jinja template in lm-eval's shipped task YAMLs (prompts, targets, choices,
    decontamination queries): on the first synthetic doc lm-eval renders, the sandbox gives the same
    text. The immutable sandbox refuses nothing that lm-eval's own tasks do."""
    import jinja2.meta
    import lm_eval
    import yaml

    from tcqa_data.prep.templates import render

    lm_utils = pytest.importorskip("lm_eval.utils", reason="needs the lm-eval extra")
    templates: set[str] = set()
    for path in (Path(lm_eval.__file__).parent / "tasks").rglob("*.yaml"):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            m = _TEMPLATE_LINE.match(line)
            if m and ("{{" in m[2] or "{%" in m[2]):
                try:
                    value = yaml.safe_load(m[2])
                except yaml.YAMLError:
                    continue
                if isinstance(value, str):
                    templates.add(value)
    same, differ = 0, []
    for template in sorted(templates):
        try:
            names = jinja2.meta.find_undeclared_variables(lm_utils.env.parse(template))
        except Exception:  # noqa: BLE001, S112 - lm-eval cannot parse it either: nothing to compare
            continue
        for doc in _synthetic_docs(names):
            try:
                want = lm_utils.apply_template(template, doc)
            except Exception:  # noqa: BLE001, S112 - this doc does not fit the template; try the next
                continue
            try:
                got = render(template, doc, where="t")
            except Exception as exc:  # noqa: BLE001 - a refusal is a difference, reported below
                got = f"{type(exc).__name__}: {exc}"
            if got == want:
                same += 1
            else:
                differ.append((template, got, want))
            break
    assert differ == []
    assert same > 600  # 663 of lm-eval 0.4.13's 722 distinct one-line templates render on these docs


# ---- lm-eval tasks: names, templates, exported code --------------------------------------------
@pytest.fixture(scope="module")
def lm_tasks(squad30, tmp_path_factory):
    """lm-eval task YAMLs over the 30 based-squad docs: a good one with a `!function` helper (copied
    into the export), one whose task name leads up and out, one whose query template reaches Python."""
    pytest.importorskip("lm_eval.tasks", reason="needs the lm-eval extra")
    root = tmp_path_factory.mktemp("lm_tasks")
    common = textwrap.dedent(f"""\
        dataset_path: json
        dataset_kwargs:
          data_files:
            validation: {squad30}
        validation_split: validation
        output_type: generate_until
        doc_to_text: "{{{{text | trim}}}}"
        doc_to_target: "{{{{value | trim}}}}"
        """)
    good = root / "good"
    good.mkdir()
    (good / "gen_utils.py").write_text(textwrap.dedent("""\
        def process_results(doc, results):
            return {"contains": float(doc["value"].strip().lower() in results[0].lower())}
        """))
    (good / "squad_gen.yaml").write_text("task: tcqa_names_squad\n" + common
                                         + "process_results: !function gen_utils.process_results\n")
    up = root / "up"
    up.mkdir()
    (up / "evil.yaml").write_text("task: ../../evil_task\ntag: tcqa_names_evil_tag\n" + common)
    attack = root / "attack"
    attack.mkdir()
    (attack / "attack.yaml").write_text(
        "task: tcqa_names_attack\n" + common + "should_decontaminate: true\n"
        + "doc_to_decontamination_query: " + json.dumps(ATTACK.format(target=root / "SOMEFILE")) + "\n")
    return root


def test_lm_eval_task_named_up_and_out_is_refused(small, lm_tasks, tmp_path):
    """lm-eval task names come from third-party YAMLs (here through a tag) and once reached the same
    path joins."""
    from tcqa_data.prep.pipeline import decontaminate

    before = snapshot(tmp_path)
    with pytest.raises(ConfigError) as ei:
        decontaminate(small["index"], ["tcqa_names_evil_tag"], tmp_path / "work" / "out",
                      lm_eval_include=lm_tasks / "up", lm_eval_include_defaults=False, quiet=True)
    msg = str(ei.value)
    assert "\n" not in msg and "lm-eval task name '../../evil_task' from lm-eval task YAML" in msg
    assert "evil.yaml" in msg and "not a valid folder name" in msg
    assert snapshot(tmp_path) == before


def test_lm_eval_query_template_renders_in_the_sandbox(small, lm_tasks, tmp_path):
    from tcqa_data.prep.pipeline import decontaminate

    with pytest.raises(ConfigError) as ei:
        decontaminate(small["index"], ["tcqa_names_attack"], tmp_path / "out",
                      lm_eval_include=lm_tasks / "attack", lm_eval_include_defaults=False, quiet=True)
    msg = str(ei.value)
    assert "\n" not in msg and "tcqa_names_attack" in msg and "was refused" in msg and "__globals__" in msg
    assert not (lm_tasks / "SOMEFILE").exists() and not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def lm_prepared(small, lm_tasks, tmp_path_factory) -> Path:
    """The good lm-eval task and built-in squad_completion, decontaminated (exports with code)."""
    from tcqa_data.prep.pipeline import decontaminate

    prep = tmp_path_factory.mktemp("lm_prep") / "prep"
    decontaminate(small["index"], ["tcqa_names_squad"], prep, lm_eval_include=lm_tasks / "good",
                  lm_eval_include_defaults=False, quiet=True, allow_task_code=True)
    return prep


def _fresh_copy(prep: Path, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(prep, tmp_path / "prep"))


def test_prep_manifest_records_the_sha256_of_every_exported_code_file(lm_prepared):
    manifest = json.loads((lm_prepared / "prep_manifest.json").read_text())
    export = manifest["tasks"]["tcqa_names_squad"]["lm_eval_export"]["validation"]
    folder = lm_prepared / export["include_path"]
    assert sorted(export["code_sha256"]) == ["gen_utils.py", "tcqa_dataset.py",
                                             "tcqa_tcqa_names_squad_validation_clean.yaml",
                                             "tcqa_tcqa_names_squad_validation_full.yaml"]
    for name, digest in export["code_sha256"].items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest


def test_evaluate_refuses_exported_code_changed_after_decontaminate(lm_prepared, tmp_path, monkeypatch,
                                                                    capsys):
    """A copied `!function` helper edited after decontaminate: `evaluate --backend lm-eval` refuses the
    folder, naming the file; with --allow-modified-code it goes on to lm-eval."""
    import lm_eval

    prep = _fresh_copy(lm_prepared, tmp_path)
    helper = prep / "tcqa_names_squad" / "validation" / "lm_eval" / "gen_utils.py"
    helper.write_text(helper.read_text() + "\nimport os  # tampered\n")
    calls: list[dict] = []

    def fake_simple_evaluate(**kwargs):  # stands in for lm-eval's run: the check is what is tested
        calls.append(kwargs)
        return None

    monkeypatch.setattr(lm_eval, "simple_evaluate", fake_simple_evaluate)
    args = ["evaluate", prep, "--backend", "lm-eval", "--model", tmp_path / "no_model", "--out",
            tmp_path / "lm_out", "--allow-task-code"]
    code, _, err = run(args, monkeypatch, capsys)
    assert code == 2
    one_error_line(err, "gen_utils.py was modified since `tcqa-data decontaminate` exported it",
                   "--allow-modified-code")
    assert calls == [] and not (tmp_path / "lm_out").exists()
    # a helper added beside the exported ones is refused as well
    helper.write_text(helper.read_text().replace("\nimport os  # tampered\n", ""))
    (helper.parent / "extra.py").write_text("print('hi')\n")
    code, _, err = run(args, monkeypatch, capsys)
    assert code == 2 and calls == []
    one_error_line(err, "extra.py was added")
    code, out, err = run([*args, "--allow-modified-code"], monkeypatch, capsys)
    assert len(calls) == 1 and calls[0]["tasks"] == ["tcqa_tcqa_names_squad_validation_full"]
    assert "Error" not in err
    # untouched again: no --allow-modified-code needed
    (helper.parent / "extra.py").unlink()
    code, _, err = run(args, monkeypatch, capsys)
    assert len(calls) == 2 and "Error" not in err
    # the copied helper is the task's own Python: run only with --allow-task-code
    code, _, err = run(args[:-1], monkeypatch, capsys)
    assert code == 2 and len(calls) == 2
    one_error_line(err, "process_results is !function gen_utils.process_results", "--allow-task-code")


def test_include_path_from_the_manifest_must_stay_inside(lm_prepared, tmp_path):
    from tcqa_data.eval.lm_eval_backend import exported_full_tasks

    prep = _fresh_copy(lm_prepared, tmp_path)
    path = prep / "prep_manifest.json"
    manifest = json.loads(path.read_text())
    export = manifest["tasks"]["tcqa_names_squad"]["lm_eval_export"]["validation"]
    good = export["include_path"]
    assert [e.include_path for e in exported_full_tasks(prep)] == [prep / good]
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "lm_eval").mkdir(parents=True)
    for bad in (str((prep / good).resolve()), str(elsewhere / "lm_eval"), "../elsewhere/lm_eval"):
        export["include_path"] = bad
        path.write_text(json.dumps(manifest))
        with pytest.raises(TcqaError, match="must be a relative path inside") as ei:
            exported_full_tasks(prep)
        assert "include_path of task 'tcqa_names_squad'" in str(ei.value) and "\n" not in str(ei.value)
    os.symlink(elsewhere, prep / "link")
    export["include_path"] = "link/lm_eval"
    path.write_text(json.dumps(manifest))
    with pytest.raises(TcqaError, match="leads outside"):
        exported_full_tasks(prep)


# ---- a failed run keeps the previous split folder ----------------------------------------------
def test_failed_rerun_leaves_the_previous_split_folder_whole(small, squad30, tmp_path, monkeypatch):
    """decontaminate writes each split folder into a staging folder beside it and renames it into place:
    interrupted while writing (Ctrl-C in the reports), the previous folder is byte for byte as it was."""
    import tcqa_data.prep.pipeline as pipeline

    prep = tmp_path / "prep"
    files = {"squad_completion": {"validation": squad30}}
    pipeline.decontaminate(small["index"], ["squad_completion"], prep, data_files=files, quiet=True)
    before = snapshot(prep)
    assert "squad_completion/validation/lm_eval/tcqa_contains.py" in before

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "write_reports", interrupted)
    with pytest.raises(KeyboardInterrupt):
        pipeline.decontaminate(small["index"], ["squad_completion"], prep, data_files=files, quiet=True,
                               rule="any-ngram|minhash>=0.5")
    assert snapshot(prep) == before  # and no staging folder left behind
    monkeypatch.undo()
    pipeline.decontaminate(small["index"], ["squad_completion"], prep, data_files=files, quiet=True)
    assert snapshot(prep) == before  # a completed rerun replaces the folder with the same bytes
