"""The public API: `from tcqa_data import ...` gives one function per command, with the command's
parameters and defaults; `import tcqa_data` stays cheap; the deep paths warn once, only when called
from outside the package; examples/ runs from a corpus to the clean vs full table."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# command -> API function; every option the command shows is a parameter of the function
COMMANDS = {"index-corpus": "build_index", "decontaminate": "decontaminate", "evaluate": "evaluate",
            "analyze": "analyze", "purify": "purify"}
# CLI parameters that only steer what the command prints
PRINT_ONLY = {("analyze", "quiet")}


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _cli_params(command: str) -> list:
    from typer.main import get_command

    from tcqa_data.cli import app

    return [p for p in get_command(app).commands[command].params if not getattr(p, "hidden", False)]


def _same_default(cli_default: object, api_default: object) -> bool:
    if cli_default is None or api_default is None:
        return cli_default is api_default
    return str(cli_default) == str(api_default)  # "13" on the command line is 13 in Python


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_api_function_takes_every_option_of_its_command_with_its_default(command):
    import tcqa_data

    func = getattr(tcqa_data, COMMANDS[command])
    sig = inspect.signature(func)
    for p in _cli_params(command):
        if (command, p.name) in PRINT_ONLY:
            continue
        assert p.name in sig.parameters, f"tcqa-data {command} {p.opts[0]}: no parameter {p.name!r} in " \
                                         f"tcqa_data.{func.__name__} (add it to tcqa_data/api.py)"
        api = sig.parameters[p.name]
        if p.required:
            assert api.default is inspect.Parameter.empty, f"{func.__name__}({p.name}) is required on the CLI"
        else:
            assert _same_default(p.default, api.default), \
                f"{func.__name__}({p.name}={api.default!r}) but the CLI's default is {p.default!r}"
        # positional on the command line, positional in Python; options are keywords
        want = inspect.Parameter.KEYWORD_ONLY if p.param_type_name == "option" else \
            inspect.Parameter.POSITIONAL_OR_KEYWORD
        assert api.kind is want, f"{func.__name__}({p.name}) is {api.kind}"


def test_public_names_are_documented_and_typed():
    import tcqa_data
    from tcqa_data.api import DEFAULT_RULE as API_RULE
    from tcqa_data.decontam.detect.rules import DEFAULT_RULE

    assert API_RULE == DEFAULT_RULE
    for name in tcqa_data.__all__:
        obj = getattr(tcqa_data, name)
        if not callable(obj):
            continue
        assert (obj.__doc__ or "").strip(), f"tcqa_data.{name} has no docstring"
        if inspect.isfunction(obj):
            sig = inspect.signature(obj)
            untyped = [p for p in sig.parameters if sig.parameters[p].annotation is inspect.Parameter.empty]
            assert not untyped and sig.return_annotation is not inspect.Signature.empty, (name, untyped)
            documented = [p for p in sig.parameters if f"{p}:" in obj.__doc__ or f"``{p}``" in obj.__doc__]
            missing = set(sig.parameters) - set(documented)
            assert name == "clean_vs_full_table" or not missing, f"{name}: parameters {missing} undocumented"


def test_import_is_cheap_and_the_deep_paths_warn_once_from_outside_only(tmp_path):
    script = textwrap.dedent(f"""
        import sys, warnings
        import tcqa_data
        heavy = {{"numpy", "pandas", "torch", "pyarrow", "typer"}} & set(sys.modules)
        assert not heavy, heavy
        warnings.simplefilter("always")
        from tcqa_data import analyze
        from tcqa_data.errors import TcqaError
        from typer.testing import CliRunner
        from tcqa_data.cli import app
        missing = {str(tmp_path / "missing")!r}
        with warnings.catch_warnings(record=True) as inside:
            try:
                analyze(missing, results=missing)  # the API calls the stage from inside the package
            except TcqaError:
                pass
            res = CliRunner().invoke(app, ["analyze", missing, "--results", missing])
            assert res.exit_code != 0
        assert not [w for w in inside if w.category is DeprecationWarning], [str(w.message) for w in inside]
        import tcqa_data.analysis, tcqa_data.decontam.build, tcqa_data.eval.runner, tcqa_data.prep.pipeline
        import tcqa_data.prep.purify, tcqa_data.workflow
        out = missing + "/out"
        deep = [  # every old path, called as the README of 0.1.0 showed; each refuses the missing input
            ("build_index", lambda: tcqa_data.decontam.build.build_index([missing], out)),
            ("decontaminate", lambda: tcqa_data.prep.pipeline.decontaminate(missing, ["mc_taco"], out)),
            ("purify", lambda: tcqa_data.prep.purify.purify([missing], ["mc_taco"], out)),
            ("evaluate", lambda: tcqa_data.eval.runner.evaluate(missing, "model")),
            ("evaluate", lambda: tcqa_data.workflow.evaluate(missing, "model")),
            ("analyze", lambda: tcqa_data.analysis.analyze(missing, missing)),
        ]
        for public, call in deep:
            with warnings.catch_warnings(record=True) as outside:
                for _ in range(2):
                    try:
                        call()
                    except TcqaError:
                        pass
            deprecations = [str(w.message) for w in outside if w.category is DeprecationWarning]
            assert len(deprecations) == 1, (public, deprecations)
            assert f"from tcqa_data import {{public}}" in deprecations[0], deprecations
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", script], env=_env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_example_goes_from_a_corpus_to_the_clean_vs_full_table(tmp_path, mc_taco_test, tiny_model):
    example = ROOT / "examples" / "clean_vs_full.py"
    assert len(example.read_text(encoding="utf-8").splitlines()) <= 30
    proc = subprocess.run([sys.executable, str(example), "--model", str(tiny_model),
                           "--data", str(mc_taco_test.parents[1]), "--out", str(tmp_path / "run"),
                           "--sample-groups", "4"],
                          env=_env(), capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    # the DataFrame's header: the three subsets with their sizes, then the difference
    assert re.search(r"clean \(n=\d+\)\s+full \(n=\d+\)\s+dirty \(n=\d+\)\s+clean - full", lines[0]), lines
    rows = {line.split()[0]: line for line in lines[2:]}
    assert {"lm_eval/acc", "lm_eval/f1", "official/strict_acc", "official/f1"} <= set(rows), lines
    assert re.search(r"lm_eval/acc\s+\d+\.\d", rows["lm_eval/acc"]), rows["lm_eval/acc"]
    assert (tmp_path / "run" / "eval" / "analysis" / "report.html").is_file()  # evaluate analyzed the pass
