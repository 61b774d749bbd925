"""No task file runs code or runs unbounded, and a bad task file or side file is one line (issue 40).

The probe's cases, on real data: a task YAML whose ``doc_to_text`` reaches Python next to a harmless
query; templates over their budgets (nested ``range`` loops, a backtracking ``regex_replace``, 5 MB of
``{{question}}``) and with runtime errors; a FIFO, a device or a huge file as a task file; lm-eval
task YAMLs that import Python; mistyped task-spec fields; unchecked options; corrupt side files; a
BOM at the start of the MC-TACO TSV. Each is one ``Error:`` line, runs nothing, writes nothing and
leaves no lock or staging folder.
"""

from __future__ import annotations

import dataclasses
import json
import os
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from cli_fixtures import run

from tcqa_data.errors import ConfigError, InputError, TcqaError

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

BUILTIN_TASKS = Path(__file__).resolve().parents[1] / "tcqa_data" / "prep" / "tasks"
ATTACK = "{{{{ lipsum.__globals__['os'].popen('touch {target}').read() }}}}"


def tree(root: Path) -> list[str]:
    """Every path under ``root``, hidden ones (locks, staging folders) included."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def one_error_line(err: str, *needles: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def mc_taco_variant(folder: Path, name: str, **fields: str) -> Path:
    """A copy of the built-in MC-TACO task YAML named ``name``, with ``fields`` replaced."""
    raw = yaml.safe_load((BUILTIN_TASKS / "mc_taco.yaml").read_text(encoding="utf-8"))
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**raw, "task": name, **fields}, sort_keys=False), encoding="utf-8")
    return path


def decontaminate_cli(small, task_yaml: Path, tmp_path: Path, monkeypatch, capsys) -> tuple[int, str]:
    monkeypatch.chdir(tmp_path)
    code, _, err = run(["decontaminate", small["index"], "--tasks", task_yaml.name, "--out", "work/out",
                        "--data-files", f"{task_yaml.name}:validation={small['data']}", "-q"],
                       monkeypatch, capsys)
    return code, err


# ---- the probe: a prompt template that reaches Python, next to a harmless query ----------------
def test_prompt_template_reaching_python_is_refused_before_anything_is_written(small, tmp_path, monkeypatch,
                                                                               capsys):
    """The probe's YAML: doc_to_text carries the attack, the query is harmless. decontaminate once
    rendered only the query, exported the prompt, and lm-eval ran it."""
    target = tmp_path / "PWNED"
    task = mc_taco_variant(tmp_path, "mc_evil", doc_to_text=ATTACK.format(target=target) + "{{question}}")
    (tmp_path / "work").mkdir()
    before = tree(tmp_path)
    code, err = decontaminate_cli(small, task, tmp_path, monkeypatch, capsys)
    assert code == 2
    one_error_line(err, "mc_evil.yaml", "template doc_to_text was refused", "__globals__")
    assert not target.exists() and tree(tmp_path) == before  # no PREP_DIR, lock or staging folder


def test_template_refused_while_rendering_on_docs_leaves_no_lock_or_staging(small, tmp_path, monkeypatch,
                                                                           capsys):
    """A target template that only the render on a doc refuses (the `attr` filter reaching a dunder):
    found at decontaminate time, on the task's docs, so nothing is exported."""
    task = mc_taco_variant(tmp_path, "mc_attr", doc_to_target="{{ label|attr('__class__') }}")
    (tmp_path / "work").mkdir()
    before = tree(tmp_path)
    code, err = decontaminate_cli(small, task, tmp_path, monkeypatch, capsys)
    assert code == 2
    one_error_line(err, "mc_attr.yaml", "template doc_to_target was refused", "__class__")
    assert tree(tmp_path) == before


@pytest.fixture
def loop_budget_only(monkeypatch):
    """The per-render time budget widened, so that the loop budget alone stops a template whatever
    the machine's load (at load 3-7 the 2 s time budget once stopped it first)."""
    from tcqa_data.prep import templates

    monkeypatch.setattr(templates, "LIMITS", dataclasses.replace(templates.LIMITS, seconds=3600.0))


def test_query_over_its_loop_budget_stops_at_once_and_leaves_nothing(small, tmp_path, monkeypatch, capsys,
                                                                      loop_budget_only):
    """Nested range(100000) loops ran until killed, leaving their lock and staging folder."""
    task = mc_taco_variant(tmp_path, "mc_loops", doc_to_decontamination_query=(
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}{{question}}"))
    (tmp_path / "work").mkdir()
    before = tree(tmp_path)
    t0 = time.perf_counter()
    code, err = decontaminate_cli(small, task, tmp_path, monkeypatch, capsys)
    assert code == 2 and time.perf_counter() - t0 < 60
    one_error_line(err, "mc_loops.yaml", "doc_to_decontamination_query was refused", "loop iterations")
    assert tree(tmp_path) == before


@pytest.mark.parametrize("kind", ["fifo", "device", "huge"])
def test_task_file_that_is_not_a_small_regular_file_is_refused_unread(small, tmp_path, monkeypatch, capsys,
                                                                     kind):
    """`--tasks fifo.yaml` blocked forever, `--tasks /dev/zero` read until the kernel killed it."""
    (tmp_path / "work").mkdir()
    if kind == "fifo":
        os.mkfifo(tmp_path / "fifo.yaml")
        task, why = "fifo.yaml", "is a FIFO"
    elif kind == "device":
        task, why = "/dev/zero", "is a device"
    else:
        (tmp_path / "huge.yaml").write_text("# " + "x" * (2 << 20) + "\n")
        task, why = "huge.yaml", "over the limit"
    before = tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    code, _, err = run(["decontaminate", small["index"], "--tasks", task, "--out", "work/out", "-q"],
                       monkeypatch, capsys)
    assert code == 2
    one_error_line(err, task, "task spec", why)
    assert tree(tmp_path) == before


# ---- the renderer's budgets and runtime errors ---------------------------------------------------
DOC = {"question": "How long did it take?", "sentence": "He walked home.", "answer": "an hour",
       "label": "yes", "category": "Event Duration"}


@pytest.mark.parametrize(("template", "why"), [
    ("{{ 1/0 }}", "ZeroDivisionError"),
    ("{% include 'other.html' %}", "includes or imports another template"),
    ("{{ question|regex_replace('(', 'x') }}", "bad pattern"),
    ("{{ ('a' * 40 + 'b')|regex_replace('(a|aa)+$', 'x') }}", "ran longer than"),
    ("{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}", "recursion"),
    ("{% for x in [1] recursive %}{{ loop([x]) }}{% endfor %}", "recursion"),
    ("{% for i in range(10**9) %}x{% endfor %}", "over the size budget"),
    ("{{ '{0.__class__}'.format_map(question) }}", "failed"),
    ("{{ 'x' * 10**12 }}", "over the size budget"),
    ("{{ 'x'|center(10**10) }}", "over the size budget"),
    ("{{ 'x'.ljust(10**10) }}", "over the size budget"),
    ("{{ lipsum(10**6) }}", "'lipsum' is undefined"),
    ("{{question}}" * 500_000, "over the budget"),
])
def test_template_runtime_errors_and_budgets_are_one_line_naming_file_and_field(tmp_path, template, why):
    from tcqa_data.prep.taskspec import TaskSpec

    spec = TaskSpec.from_dict({**TaskSpec.builtin("mc_taco").to_dict(), "task": "mc_t"}, source="mc_t.yaml")
    spec = dataclasses.replace(spec, doc_to_decontamination_query=template)
    t0 = time.perf_counter()
    with pytest.raises(ConfigError) as ei:
        spec.check_templates_on([DOC])
    msg = str(ei.value)
    assert "\n" not in msg and "mc_t.yaml" in msg and "doc_to_decontamination_query" in msg, msg
    assert why in msg, msg
    assert time.perf_counter() - t0 < 10


def test_integer_template_is_one_line():
    from tcqa_data.prep.templates import TemplateRefused, render

    with pytest.raises(TemplateRefused, match="must be a string, not int"):
        render(5, DOC, where="task 'x': template doc_to_text")  # type: ignore[arg-type]


def test_memory_error_while_rendering_is_one_line(monkeypatch):
    """MemoryError raised by a filter: one line, not a traceback."""
    from tcqa_data.prep import templates

    def exhausted(value):
        raise MemoryError

    monkeypatch.setitem(templates.ENV.filters, "upper", templates._budgeted_filter("upper", exhausted))
    templates._COMPILED.clear()
    with pytest.raises(templates.TemplateRefused, match="ran out of memory"):
        templates.render("{{ question|upper }}", DOC, where="t")
    templates._COMPILED.clear()


def test_time_budget_interrupts_a_loop_of_cheap_steps():
    """Within the iteration budget but over the time budget: the deadline in the loop hook stops it."""
    from tcqa_data.prep.templates import RenderLimits, TemplateRefused, render

    limits = RenderLimits(seconds=0.2, loop_iterations=10**9)
    t0 = time.perf_counter()
    with pytest.raises(TemplateRefused, match="time budget"):
        render("{% for i in range(100000) %}{% for j in range(100000) %}{{ j }}{% endfor %}{% endfor %}",
               DOC, where="t", limits=RenderLimits(**{**limits.__dict__, "output_chars": 10**12}))
    assert time.perf_counter() - t0 < 5


def test_builtin_templates_render_on_every_real_doc(mc_taco_test, squad_validation):
    """Every template of the built-in tasks passes the budgets on every doc of the real splits."""
    from tcqa_data.prep.benchmarks import load_split
    from tcqa_data.prep.taskspec import TaskSpec, builtin_task_names

    assert builtin_task_names() == ["mc_taco", "squad_completion"]
    mc = TaskSpec.builtin("mc_taco")
    mc.check_templates_on(load_split(mc, "test", mc_taco_test).docs())
    squad = TaskSpec.builtin("squad_completion")
    squad.check_templates_on(load_split(squad, "validation", squad_validation).docs())


# ---- task specs: a schema where they are read ---------------------------------------------------
@pytest.mark.parametrize(("field", "value", "expected"), [
    ("doc_to_choice", 5, "a list of strings"),
    ("group_by", 7, "a list of strings"),
    ("tsv_columns", 9, "a list of strings"),
    ("report_by", 3, "a list of strings"),
    ("attribution_fields", 3, "a list of strings"),
    ("label_values", [1, 2], "a mapping of label value to integer"),
    ("metric_list", "acc", "a list of mappings"),
    ("doc_to_text", ["a"], "a string"),
    ("should_decontaminate", "yes", "true or false"),
    ("output_type", "classify", "one of multiple_choice"),
])
def test_mistyped_task_field_is_one_line_naming_file_field_value_and_type(tmp_path, field, value, expected):
    from tcqa_data.prep.taskspec import TaskSpec

    path = mc_taco_variant(tmp_path, "mc_typo", **{field: value})
    with pytest.raises(ConfigError) as ei:
        TaskSpec.from_yaml(path)
    msg = str(ei.value)
    assert "\n" not in msg and str(path) in msg and f"field {field} is {value!r}" in msg, msg
    assert expected in msg, msg


def test_mistyped_prompt_fails_before_evaluate_loads_a_model(small, tmp_path, monkeypatch, capsys):
    """`doc_to_text: [a]` once failed only after evaluate had loaded the model; now decontaminate
    refuses the task file with one line."""
    task = mc_taco_variant(tmp_path, "mc_list", doc_to_text=["a"])
    code, err = decontaminate_cli(small, task, tmp_path, monkeypatch, capsys)
    assert code == 2
    one_error_line(err, "mc_list.yaml", "field doc_to_text is ['a']", "expected a string")


# ---- lm-eval task YAMLs: no code unless asked, templates in the sandbox ----------------------
def _lm_task(folder: Path, squad30: Path, extra: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "task.yaml").write_text(textwrap.dedent(f"""\
        task: tcqa_trust_squad
        dataset_path: json
        dataset_kwargs:
          data_files:
            validation: {squad30}
        validation_split: validation
        output_type: generate_until
        doc_to_target: "{{{{value | trim}}}}"
        """) + extra)
    return folder


@pytest.fixture(scope="module")
def squad30(squad_validation, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("squad") / "squad30.jsonl"
    path.write_text("".join(squad_validation.read_text(encoding="utf-8").splitlines(keepends=True)[:30]))
    return path


def test_lm_eval_task_code_outside_lm_eval_is_refused_unless_allowed(small, squad30, tmp_path):
    pytest.importorskip("lm_eval.tasks", reason="needs the lm-eval extra")
    from tcqa_data.prep.pipeline import decontaminate

    folder = _lm_task(tmp_path / "tasks", squad30, 'doc_to_text: "{{text}}"\n'
                      "process_docs: !function helpers.process_docs\n")
    ran = tmp_path / "RAN"
    (folder / "helpers.py").write_text(f"open({str(ran)!r}, 'w').close()\n\n\n"
                                       "def process_docs(ds):\n    return ds\n")
    (tmp_path / "work").mkdir()
    before = tree(tmp_path)
    with pytest.raises(ConfigError) as ei:
        decontaminate(small["index"], ["tcqa_trust_squad"], tmp_path / "work" / "out", lm_eval_include=folder,
                      lm_eval_include_defaults=False, quiet=True)
    msg = str(ei.value)
    assert "\n" not in msg and str(folder / "task.yaml") in msg and "process_docs" in msg
    assert "--allow-task-code" in msg
    assert not ran.exists() and tree(tmp_path) == before
    # asked for: lm-eval imports it
    decontaminate(small["index"], ["tcqa_trust_squad"], tmp_path / "work" / "out", lm_eval_include=folder,
                  lm_eval_include_defaults=False, quiet=True, allow_task_code=True)
    assert ran.exists() and (tmp_path / "work" / "out" / "prep_manifest.json").is_file()


def test_lm_eval_prompt_template_is_rendered_in_the_sandbox_by_lm_eval_too(small, squad30, tmp_path):
    """lm-eval renders doc_to_text on a first doc while it loads a task: that render goes through
    the sandbox as well, so the attack in an lm-eval prompt runs nothing."""
    pytest.importorskip("lm_eval.tasks", reason="needs the lm-eval extra")
    from tcqa_data.prep.pipeline import decontaminate

    target = tmp_path / "PWNED"
    folder = _lm_task(tmp_path / "tasks", squad30, "doc_to_text: " + json.dumps(
        "{{ cycler.__init__.__globals__.os.popen('touch " + str(target) + "').read() }}{{text}}") + "\n")
    with pytest.raises(ConfigError) as ei:
        decontaminate(small["index"], ["tcqa_trust_squad"], tmp_path / "out", lm_eval_include=folder,
                      lm_eval_include_defaults=False, quiet=True)
    assert "\n" not in str(ei.value) and "tcqa_trust_squad" in str(ei.value) and "refused" in str(ei.value)
    assert not target.exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize(("extra", "field", "expected"), [
    ("metadata:\n  group_by: 7\n", "metadata.group_by is 7", "a doc field name or a list of them"),
    ("description: 5\n", "description is 5", "a template string"),
])
def test_mistyped_lm_eval_task_field_is_one_line(squad30, tmp_path, extra, field, expected):
    pytest.importorskip("lm_eval.tasks", reason="needs the lm-eval extra")
    from tcqa_data.prep.lm_eval_tasks import resolve_lm_eval_tasks

    folder = _lm_task(tmp_path / "tasks", squad30, 'doc_to_text: "{{text}}"\n' + extra)
    with pytest.raises(ConfigError) as ei:
        resolve_lm_eval_tasks(["tcqa_trust_squad"], include_path=folder, include_defaults=False)
    msg = str(ei.value)
    assert "\n" not in msg and "tcqa_trust_squad" in msg and str(folder / "task.yaml") in msg
    assert f"field {field}" in msg and expected in msg, msg


def test_fifo_in_an_lm_eval_include_folder_is_refused_unread(tmp_path):
    pytest.importorskip("lm_eval.tasks", reason="needs the lm-eval extra")
    from tcqa_data.prep.lm_eval_tasks import resolve_lm_eval_tasks

    (tmp_path / "tasks").mkdir()
    os.mkfifo(tmp_path / "tasks" / "blocked.yaml")
    with pytest.raises(TcqaError, match="is a FIFO, not a regular file") as ei:
        resolve_lm_eval_tasks(["anything"], include_path=tmp_path / "tasks", include_defaults=False)
    assert "blocked.yaml" in str(ei.value)


def test_lm_eval_shipped_code_is_installed_code():
    """lm-eval's own task YAMLs name !function helpers inside the installed package: they pass."""
    lm_eval = pytest.importorskip("lm_eval", reason="needs the lm-eval extra")
    from tcqa_data.prep.task_code import is_shipped, task_code

    shipped = Path(lm_eval.__file__).parent / "tasks"
    with_code = []
    for path in sorted(shipped.rglob("*.yaml")):
        if "!function" in path.read_text(errors="replace"):
            with_code.append(path)
            if len(with_code) == 5:
                break
    assert len(with_code) == 5 and all(is_shipped(p) for p in with_code)
    assert all(task_code(p) == [] for p in with_code)


# ---- lm-eval's regex filters and few-shot templates ----------------------------------------------
BACKTRACKING = r"^(\w|\w\w|\s)+$"  # seconds to hours on a sentence that ends in "?" or "."
FILTERS = ('filter_list:\n  - name: strict\n    filter:\n      - function: regex\n'
           '        regex_pattern: {}\n      - function: take_first\n')


@pytest.mark.parametrize(("pattern", "why"), [
    (BACKTRACKING, "ran longer than 1 s on one string"),
    ("(unclosed", "not a valid regular expression"),
    (["a list"], "expected a regular expression string"),
])
def test_lm_eval_regex_filter_is_run_on_the_docs_at_decontaminate_time(small, squad30, tmp_path, pattern,
                                                                       why):
    """A task file's filter pattern ran only inside lm-eval at evaluate time (Python's re, no
    timeout): decontaminate runs it on the docs' own strings, with a timeout, before any export."""
    pytest.importorskip("lm_eval.tasks", reason="needs the lm-eval extra")
    from tcqa_data.prep.pipeline import decontaminate

    folder = _lm_task(tmp_path / "tasks", squad30,
                      'doc_to_text: "{{text}}"\n' + FILTERS.format(json.dumps(pattern)))
    t0 = time.monotonic()
    with pytest.raises(ConfigError) as ei:
        decontaminate(small["index"], ["tcqa_trust_squad"], tmp_path / "out", lm_eval_include=folder,
                      lm_eval_include_defaults=False, quiet=True)
    msg = str(ei.value)
    assert "\n" not in msg and str(folder / "task.yaml") in msg, msg
    assert "filter_list[0].filter[0].regex_pattern" in msg and why in msg, msg
    assert time.monotonic() - t0 < 30 and not (tmp_path / "out").exists()


def test_lm_eval_runs_task_regexes_with_a_timeout_under_tcqa_data():
    """By construction: while lm-eval runs under tcqa-data, its regex filters and exact_match's
    regexes_to_ignore match with the regex package's timeout (Python's re takes seconds here, and
    hours a few characters later); elsewhere lm-eval is untouched, and a safe pattern gives re's answers."""
    pytest.importorskip("lm_eval.filters", reason="needs the lm-eval extra")
    import re

    from lm_eval.api import metrics
    from lm_eval.filters import extraction

    from tcqa_data.prep.task_regex import RegexOverBudget
    from tcqa_data.prep.templates import sandboxed_lm_eval

    outputs = [["The answer is #### 1,234 apples."], ["#### -7"], ["no number here"]]
    mc_docs = [{"choices": ["Denver Broncos", "Carolina Panthers"]}] * 3
    mc_outputs = [["(B) Carolina Panthers"], ["I think Denver Broncos."], ["neither"]]
    plain = (extraction.RegexFilter().apply(outputs, []),
             extraction.MultiChoiceRegexFilter(regex_pattern=r"(\([A-B]\))", ignore_case=True,
                                               regexes_to_ignore=[r"\."]).apply(mc_outputs, mc_docs),
             metrics.exact_match_hf_evaluate(["Denver, Broncos"], ["denver broncos"], ignore_case=True,
                                             regexes_to_ignore=[","]))
    hostile = "(a|aa)+$"
    with sandboxed_lm_eval({hostile: "task.yaml: filter_list[0].filter[0].regex_pattern"}):
        assert extraction.re is not re and metrics.re is not re
        timed = (extraction.RegexFilter().apply(outputs, []),
                 extraction.MultiChoiceRegexFilter(regex_pattern=r"(\([A-B]\))", ignore_case=True,
                                                   regexes_to_ignore=[r"\."]).apply(mc_outputs, mc_docs),
                 metrics.exact_match_hf_evaluate(["Denver, Broncos"], ["denver broncos"], ignore_case=True,
                                                 regexes_to_ignore=[","]))
        assert timed == plain and plain[0] == [["1,234"], ["-7"], ["[invalid]"]]
        t0 = time.monotonic()
        with pytest.raises(RegexOverBudget, match=r"task.yaml: filter_list\[0\].filter\[0\].regex_pattern "
                                                  "ran longer than 1 s"):
            extraction.RegexFilter(regex_pattern=hostile).apply([["a" * 32 + "b"]], [])
        with pytest.raises(RegexOverBudget, match="ran longer than 1 s"):
            metrics.exact_match_hf_evaluate(["x"], ["a" * 32 + "b"], regexes_to_ignore=[hostile])
        assert time.monotonic() - t0 < 10
    assert extraction.re is re and metrics.re is re


def test_exported_filter_patterns_are_checked_and_named_before_lm_eval_runs(tmp_path):
    """evaluate --backend lm-eval reads the exported YAMLs' patterns first: a bad one is one line
    naming the file and field; the rest are named for lm-eval's timed run."""
    pytest.importorskip("lm_eval.filters", reason="needs the lm-eval extra")
    from tcqa_data.eval.lm_eval_backend import ExportedTask, check_exported_templates

    folder = tmp_path / "lm_eval"
    folder.mkdir()
    steps = [{"function": "regex", "regex_pattern": r"#### (\d+)"}, {"function": "take_first"}]
    config = {"task": "tcqa_x_validation_full", "doc_to_text": "{{text}}",
              "filter_list": [{"name": "strict", "filter": steps}],
              "metric_list": [{"metric": "exact_match", "regexes_to_ignore": [",", r"\$"]}]}
    path = folder / "tcqa_x_validation_full.yaml"
    path.write_text(yaml.safe_dump(config))
    exported = [ExportedTask("x", "validation", "tcqa_x_validation_full", folder)]
    sources = check_exported_templates(exported, allow_task_code=False)
    assert sources == {r"#### (\d+)": f"{path}: filter_list[0].filter[0].regex_pattern",
                       ",": f"{path}: metric_list[0].regexes_to_ignore[0]",
                       r"\$": f"{path}: metric_list[0].regexes_to_ignore[1]"}
    config["metric_list"][0]["regexes_to_ignore"] = [",", "[unclosed"]
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError) as ei:
        check_exported_templates(exported, allow_task_code=False)
    assert "\n" not in str(ei.value) and f"{path}: metric_list[0].regexes_to_ignore[1]" in str(ei.value)


def test_lm_eval_shipped_filter_patterns_match_as_re_does():
    """Every regex pattern lm-eval's own task YAMLs give its filters and metrics compiles in the timed
    regex and finds what Python's re finds, on answers shaped as model outputs."""
    lm_eval = pytest.importorskip("lm_eval", reason="needs the lm-eval extra")
    import re

    from tcqa_data.prep.task_code import read_task_yaml
    from tcqa_data.prep.task_regex import TimedPattern, task_patterns

    outputs = ["The answer is (B).", "#### 1,234", "So the final answer is 42.", "Answer: yes\nbecause",
               "The answer is: $\\boxed{17}$", "A) Paris", "Final Answer: The final answer is 3. I hope"]
    patterns = set()
    for path in sorted((Path(lm_eval.__file__).parent / "tasks").rglob("*.yaml")):
        text = path.read_text(errors="replace")
        if "regex_pattern" in text or "regexes_to_ignore" in text:
            cfg = read_task_yaml(path)
            if isinstance(cfg, dict):
                patterns.update(p for _, p in task_patterns(cfg) if isinstance(p, str))
    assert len(patterns) >= 30  # 36 distinct patterns in lm-eval 0.4.13's tasks
    for p in sorted(patterns):
        timed = TimedPattern(p)
        assert [timed.findall(o) for o in outputs] == [re.findall(p, o) for o in outputs], p


def test_fewshot_templates_are_rendered_on_the_fewshot_docs(small, squad30, tmp_path, loop_budget_only):
    """fewshot_config's templates were only parsed at decontaminate time: one that runs over its
    loop budget on a few-shot doc is now refused there, naming the file, the field and the doc."""
    pytest.importorskip("lm_eval.tasks", reason="needs the lm-eval extra")
    from tcqa_data.prep.pipeline import decontaminate

    over_budget = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}{{text}}"
    folder = _lm_task(tmp_path / "tasks", squad30, 'doc_to_text: "{{text}}"\nfewshot_split: validation\n'
                      "fewshot_config:\n  sampler: first_n\n  doc_to_text: " + json.dumps(over_budget) + "\n")
    with pytest.raises(ConfigError) as ei:
        decontaminate(small["index"], ["tcqa_trust_squad"], tmp_path / "out", lm_eval_include=folder,
                      lm_eval_include_defaults=False, quiet=True)
    msg = str(ei.value)
    assert "\n" not in msg and str(folder / "task.yaml") in msg, msg
    assert "template fewshot_config.doc_to_text (few-shot doc 0)" in msg and "loop iterations" in msg, msg
    assert not (tmp_path / "out").exists()


# ---- options checked at parse time -------------------------------------------------------------
@pytest.mark.parametrize("args", [
    ["decontaminate", "IDX", "--out", "o", "--ngram", "0"],
    ["decontaminate", "IDX", "--out", "o", "--ngram", "-1"],
    ["decontaminate", "IDX", "--out", "o", "--on-error", "maybe"],
    ["decontaminate", "IDX", "--out", "o", "--group-policy", "most"],
    ["decontaminate", "IDX", "--out", "o", "--workers", "0"],
    ["analyze", "P", "--results", "R", "--bootstrap", "-1"],
    ["purify", "c.jsonl", "--out", "o", "--window", "-1"],
    ["purify", "c.jsonl", "--out", "o", "--mode", "trim"],
    ["evaluate", "P", "--model", "m", "--device", "tpu"],
    ["evaluate", "P", "--model", "m", "--limit-groups", "0"],
    ["index-corpus", "c.jsonl", "--out", "o", "--provenance", "0"],
    ["index-corpus", "c.jsonl", "--out", "o", "--text-store", "zip"],
])
def test_numeric_and_enumerated_options_are_checked_at_parse_time(tmp_path, monkeypatch, capsys, args):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(args, monkeypatch, capsys)
    assert code == 2 and "Traceback" not in err
    assert f"Invalid value for '{args[-2]}'" in err, err
    assert list(tmp_path.iterdir()) == []


# ---- side files that do not parse --------------------------------------------------------------
def test_corrupt_side_files_are_one_line_naming_the_file(tmp_path):
    from tcqa_data.analysis.sources import from_evaluate
    from tcqa_data.eval.lm_eval_backend import exported_full_tasks
    from tcqa_data.io_utils import iter_jsonl_objects
    from tcqa_data.prep.prepared import read_manifest, read_split

    prep = tmp_path / "prep"
    prep.mkdir()
    (prep / "prep_manifest.json").write_text('{"format_version": 1, "tasks": {')
    for read in (lambda: read_manifest(prep), lambda: exported_full_tasks(prep)):
        with pytest.raises(InputError, match="prep_manifest.json is not valid JSON") as ei:
            read()
        assert str(prep / "prep_manifest.json") in str(ei.value) and "\n" not in str(ei.value)
    eval_dir = tmp_path / "eval"
    eval_dir.mkdir()
    (eval_dir / "results.json").write_bytes(b"\xff\xfe{}")
    with pytest.raises(InputError, match="results.json is not valid UTF-8"):
        from_evaluate(prep, eval_dir)
    split = prep / "t" / "test"
    split.mkdir(parents=True)
    for name in ("full", "clean", "dirty"):
        (split / f"{name}.parquet").write_bytes(b"PAR1 not really parquet")
    with pytest.raises(InputError, match="full.parquet is not a readable Parquet file") as ei:
        read_split("t", "test", None, split)
    assert "\n" not in str(ei.value)
    samples = eval_dir / "samples.jsonl"
    samples.write_bytes(b'{"doc_id": 0}\n{"doc_id": "\xe9"}\n')
    with pytest.raises(InputError, match=r"samples.jsonl:2: not valid UTF-8"):
        list(iter_jsonl_objects(samples))


def test_predictions_that_are_a_fifo_or_not_utf8_are_one_line(mc_taco_dev, tmp_path, monkeypatch, capsys):
    fifo = tmp_path / "pred.fifo"
    os.mkfifo(fifo)
    code, _, err = run(["score", "mc_taco", "--predictions", fifo, "--data", mc_taco_dev],
                       monkeypatch, capsys)
    assert code == 2
    one_error_line(err, str(fifo), "predictions file is a FIFO")
    bad = tmp_path / "pred.txt"
    bad.write_bytes(b"yes\nno\n\xffyes\n")
    code, _, err = run(["score", "mc_taco", "--predictions", bad, "--data", mc_taco_dev], monkeypatch, capsys)
    assert code == 2
    one_error_line(err, str(bad), "not valid UTF-8")
    tsv = tmp_path / "bad.tsv"
    tsv.write_bytes(mc_taco_dev.read_bytes()[:2000] + b"\xc3\x28\n")
    good = tmp_path / "good.txt"
    good.write_text("yes\n")
    code, _, err = run(["score", "mc_taco", "--predictions", good, "--data", tsv], monkeypatch, capsys)
    assert code == 2
    one_error_line(err, str(tsv), "TSV file is not valid UTF-8")


# ---- a BOM is no part of the first record ------------------------------------------------------
def test_bom_at_the_start_of_the_mc_taco_tsv_keeps_the_first_question_whole(mc_taco_dev, tmp_path):
    """A BOM once became part of the first sentence, splitting its question's candidates in two."""
    from tcqa_data.prep.benchmarks import group_ids, load_split
    from tcqa_data.prep.taskspec import TaskSpec

    spec = TaskSpec.builtin("mc_taco")
    with_bom = tmp_path / "dev_bom.tsv"
    with_bom.write_bytes(b"\xef\xbb\xbf" + mc_taco_dev.read_bytes())
    plain = load_split(spec, "validation", mc_taco_dev)
    bom = load_split(spec, "validation", with_bom)
    assert bom.table.equals(plain.table)
    gids = group_ids(spec, bom.table)
    assert gids == group_ids(spec, plain.table) and len(set(gids)) == 561


def test_bom_at_the_start_of_a_jsonl_file_is_dropped(tmp_path):
    from tcqa_data.io_utils import iter_jsonl_objects

    path = tmp_path / "docs.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b'{"text": "a"}\n{"text": "b"}\n')
    assert [rec for _, rec in iter_jsonl_objects(path)] == [{"text": "a"}, {"text": "b"}]


def test_many_renders_each_within_budget_are_stopped_by_the_total_budget():
    """A template just under the per-render budget on every doc of a large split: the check's total
    budget stops it instead of running for hours."""
    from tcqa_data.prep.templates import RenderClock, RenderLimits, TemplateRefused

    clock = RenderClock("task 'slow' (slow.yaml)", RenderLimits(total_seconds=0.05, mean_seconds=0.0001))
    with pytest.raises(TemplateRefused, match=r"task 'slow' \(slow.yaml\) was refused: its templates took"):
        for _ in range(10**6):
            time.sleep(0.001)
            clock.tick()
    assert clock.renders < 1000


def test_evaluate_refuses_a_mistyped_prepared_task_before_loading_a_model(small, tmp_path, monkeypatch,
                                                                         capsys):
    """`doc_to_text: [a]` in a PREP_DIR's task.yaml once failed only after evaluate had loaded the model."""
    from tcqa_data.prep.pipeline import decontaminate

    prep = tmp_path / "prep"
    decontaminate(small["index"], ["mc_taco"], prep, data_files={"mc_taco": {"validation": small["data"]}},
                  quiet=True)
    task_yaml = prep / "mc_taco" / "task.yaml"
    raw = yaml.safe_load(task_yaml.read_text(encoding="utf-8"))
    task_yaml.write_text(yaml.safe_dump({**raw, "doc_to_text": ["a"]}), encoding="utf-8")
    code, _, err = run(["evaluate", prep, "--model", tmp_path / "no_such_model", "--out", tmp_path / "ev"],
                       monkeypatch, capsys)
    assert code == 2
    one_error_line(err, str(task_yaml), "field doc_to_text is ['a']", "expected a string")
    assert not (tmp_path / "ev").exists()
