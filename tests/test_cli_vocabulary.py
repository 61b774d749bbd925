"""One option vocabulary: every command spells a shared concept the same way, the 0.1.0 spellings
still work as hidden aliases (with a note on stderr), the README and scripts use the new names, and
`--rule` help lists every term of the rule parser's own table."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from tcqa_data.cli import DEPRECATED_SPELLINGS, app
from tcqa_data.decontam.detect.rules import OPERATORS, TERM_KINDS, Rule, rule_terms_help, term_syntax
from tcqa_data.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]

# Every command, and the shared option names it must accept (a new command needs an entry here).
SHARED: dict[str, set[str]] = {
    "index-corpus": {"--out", "-q", "--quiet", "--workers", "--engine", "--ngram", "--normalization",
                     "--text-field", "--id-field", "--on-error"},
    "index-info": {"-q", "--quiet"},
    "decontaminate": {"--out", "--tasks", "--splits", "-q", "--quiet", "--data-files", "--rule", "--ngram",
                      "--normalization", "--workers", "--engine", "--text-field", "--id-field", "--on-error",
                      "--lm-eval-include", "--allow-task-code"},
    "purify": {"--out", "--tasks", "--splits", "-q", "--quiet", "--data-files", "--rule", "--ngram",
               "--workers", "--engine", "--text-field", "--id-field", "--on-error", "--lm-eval-include",
               "--allow-task-code"},
    "evaluate": {"--out", "--tasks", "--splits", "-q", "--quiet", "--sample-seed", "--allow-task-code"},
    "analyze": {"--out", "--tasks", "--splits", "-q", "--quiet", "--index", "--bootstrap-seed"},
    "score mc_taco": {"--predictions", "--data"},
}
# The hidden old spellings each command keeps for one release.
OLD: dict[str, set[str]] = {
    "evaluate": {"--output", "--split"},
    "analyze": {"--output", "--task", "--split", "--seed"},
}


def _commands(group: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf command of the click group typer builds, by its path (``score mc_taco``)."""
    out: dict[str, Any] = {}
    for name, cmd in group.commands.items():
        if hasattr(cmd, "commands"):
            out.update(_commands(cmd, f"{prefix}{name} "))
        else:
            out[f"{prefix}{name}"] = cmd
    return out


COMMANDS = _commands(get_command(app))


def _opts(cmd: Any, hidden: bool) -> set[str]:
    return {o for p in cmd.params if p.param_type_name == "option" and p.hidden == hidden
            for o in (*p.opts, *p.secondary_opts)}


def _help(path: str) -> str:
    res = CliRunner().invoke(app, [*path.split(), "--help"], terminal_width=400,
                             max_content_width=400)
    assert res.exit_code == 0, res.output
    return res.output


def test_every_command_accepts_the_shared_names_and_hides_only_old_spellings():
    assert set(COMMANDS) == set(SHARED), "a command without an entry in SHARED (or one gone)"
    for path, cmd in COMMANDS.items():
        visible, hidden = _opts(cmd, False), _opts(cmd, True)
        assert SHARED[path] <= visible, f"`tcqa-data {path}` lacks {sorted(SHARED[path] - visible)}"
        assert not visible & set(DEPRECATED_SPELLINGS), f"`tcqa-data {path}` shows an old spelling"
        assert hidden == OLD.get(path, set()), path
        for old in hidden:  # an alias stands for an option the command shows
            assert DEPRECATED_SPELLINGS[old] in visible, (path, old)
        text = _help(path)
        for old in DEPRECATED_SPELLINGS:
            assert not re.search(re.escape(old) + r"(?![\w-])", text), f"`{path} --help` shows {old}"


class _Captured(Exception):
    """Raised by the stand-in library functions with the arguments the command passed."""


def _capture(monkeypatch, module: str, name: str) -> None:
    import importlib

    def fake(*args: Any, **kwargs: Any) -> None:
        raise _Captured(args, kwargs)

    monkeypatch.setattr(importlib.import_module(module), name, fake)


def _call(args: list[str]) -> tuple[Any, str]:
    res = CliRunner().invoke(app, args)
    assert isinstance(res.exception, _Captured), res.output
    return res.exception.args, res.stderr


@pytest.mark.parametrize(("command", "module", "name", "new", "old", "notes"), [
    ("analyze", "tcqa_data.analysis", "analyze",
     ["--out", "o", "--tasks", "mc_taco,squad_completion", "--splits", "test", "--bootstrap-seed", "7"],
     ["--output", "o", "--task", "mc_taco,squad_completion", "--split", "test", "--seed", "7"],
     ["--output", "--task", "--split", "--seed"]),
    ("evaluate", "tcqa_data.workflow", "evaluate",
     ["--model", "m", "--out", "o", "--splits", "validation"],
     ["--model", "m", "--output", "o", "--split", "validation"],
     ["--output", "--split"]),
])
def test_old_spellings_pass_the_same_values_with_a_note(monkeypatch, tmp_path, command, module, name, new,
                                                        old, notes):
    _capture(monkeypatch, module, name)
    prep = str(tmp_path / "prep")
    extra = ["--results", str(tmp_path / "res")] if command == "analyze" else []
    got_new, err_new = _call([command, prep, *extra, *new])
    got_old, err_old = _call([command, prep, *extra, *old])
    assert got_new == got_old
    _, kwargs = got_new
    assert kwargs["split"] in ("test", "validation") and "Note:" not in err_new
    if command == "analyze":
        assert kwargs["tasks"] == ["mc_taco", "squad_completion"] and kwargs["seed"] == 7
    for spelling in notes:
        new_name = DEPRECATED_SPELLINGS[spelling]
        assert f"Note: {spelling} is deprecated (kept for one release); use {new_name}" in err_old


def test_both_spellings_or_several_splits_are_usage_errors(monkeypatch, tmp_path):
    _capture(monkeypatch, "tcqa_data.analysis", "analyze")
    base = ["analyze", str(tmp_path), "--results", str(tmp_path)]
    res = CliRunner().invoke(app, [*base, "--out", "a", "--output", "b"])
    assert res.exit_code == 2 and "given both --out and its old spelling --output" in res.output
    res = CliRunner().invoke(app, [*base, "--out", "a", "--output", "a"])
    assert isinstance(res.exception, _Captured)  # the same value twice: no conflict
    res = CliRunner().invoke(app, [*base, "--splits", "test,validation"])
    assert res.exit_code == 2 and "analyze reads one prepared split per task" in res.output


# ---- the README and scripts use the shared names ------------------------------------------------

_CALL = re.compile(r"(?:tcqa-data|\$TCQA|-m tcqa_data)\s+([a-z][\w-]*)(?:\s+(mc_taco)\b)?")


def _logical_lines(text: str) -> list[str]:
    return text.replace("\\\n", " ").splitlines()


def _invocations(text: str) -> list[tuple[str, list[str]]]:
    """(command path, its --options) of every tcqa-data call in ``text``."""
    out = []
    for line in _logical_lines(text):
        for m in _CALL.finditer(line):
            rest = line[m.end():].split(" #")[0]
            try:
                words = shlex.split(rest)
            except ValueError:
                words = rest.split()
            path = f"{m[1]} {m[2]}" if m[2] else m[1]
            # an option ends where its value (=) or the prose's quoting and punctuation begins
            out.append((path, [w.split("=")[0].rstrip("`'\".,;:)") for w in words
                               if w.startswith("-") and w != "-"]))
    return out


def test_readme_docs_and_scripts_use_options_the_commands_show():
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")),
             *sorted((ROOT / "scripts").glob("*.sh")), *sorted((ROOT / "scripts").glob("*.py"))]
    seen = 0
    for f in files:
        for path, options in _invocations(f.read_text(encoding="utf-8")):
            if path not in COMMANDS:
                continue
            visible = _opts(COMMANDS[path], False) | {"--help"}
            for opt in options:
                assert opt in visible, f"{f.name}: `tcqa-data {path} {opt}` is not an option it shows"
                seen += 1
    assert seen > 20


# ---- --rule help from the parser's table ----------------------------------------------------------

_EXAMPLE = {"none": None, "count": "3", "share": "0.5"}


def test_rule_help_lists_every_term_of_the_parser_table():
    names = {k.name for k in TERM_KINDS}
    assert {"any-ngram", "ngram-hits", "ngram-fraction", "longest", "minhash", "aligned",
            "aligned-field"} <= names
    rule = next(p for p in COMMANDS["decontaminate"].params if p.name == "rule")
    text = _help("decontaminate")
    for kind in TERM_KINDS:
        assert term_syntax(kind) in rule.help and term_syntax(kind) in text  # type: ignore[attr-defined]
        # each listed term is one the parser takes, for the metric the table names
        value = _EXAMPLE[kind.threshold]
        term = Rule.parse(kind.name if value is None else f"{kind.name}>={value}").terms[0]
        assert term.name == kind.name and term.metric == kind.metric
        assert str(Rule.parse(str(term))) == str(term)
    for sym, word in OPERATORS:
        assert f"{sym} ({word})" in rule.help  # type: ignore[attr-defined]
    assert rule_terms_help() in rule.help  # type: ignore[attr-defined]
    # and nothing else parses: an unknown term is refused with the same list
    with pytest.raises(ConfigError) as exc:
        Rule.parse("any-ngram|bogus>=1")
    assert rule_terms_help() in str(exc.value)
    combined = Rule.parse("&".join(kind.name if _EXAMPLE[kind.threshold] is None
                                   else f"{kind.name}>={_EXAMPLE[kind.threshold]}" for kind in TERM_KINDS)
                          + "|any-ngram")
    assert len(combined.clauses) == 2 and len(combined.clauses[0]) == len(TERM_KINDS)
