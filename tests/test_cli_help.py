"""`--help` a person reads: common options first and on one screen, panels for the rest, one
metavar style, and no token of any option's help broken across lines (so examples paste)."""

from __future__ import annotations

import re

import pytest
from test_cli_vocabulary import COMMANDS
from typer.testing import CliRunner

from tcqa_data.cli import app
from tcqa_data.cli.help_format import DEFAULT_PANEL, metavar_word

SCREEN_LINES = 60


def _help(command: str, width: int = 80) -> str:
    result = CliRunner().invoke(app, [*command.split(), "--help"], terminal_width=width)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("width", [60, 80, 120])
def test_no_help_token_is_broken_by_wrapping(command: str, width: int) -> None:
    lines = _help(command, width).splitlines()
    tokens_on_a_line = {t for line in lines for t in line.split()}
    cmd = COMMANDS[command]
    for param in cmd.params:
        if getattr(param, "hidden", False) or not getattr(param, "help", None):
            continue
        for token in param.help.split():
            assert token in tokens_on_a_line, f"{command} {param.name}: {token!r} is broken across lines"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_one_metavar_style(command: str) -> None:
    text = _help(command)
    usage = text.splitlines()[0]
    # click's style: upper-case words, [OPTIONAL] arguments, [a|b] choices; none of Typer's
    # <path>, {prep_dir} or [index_dir]
    assert not re.search(r"<[a-z][^>]*>", text), text
    assert not re.search(r"\{[a-z_]+\}", usage), usage
    assert not re.search(r"\[[a-z_]+\]", usage), usage
    for param in COMMANDS[command].params:
        if param.param_type_name == "argument":
            assert param.name.upper() in usage


def test_decontaminate_common_options_fit_one_screen_and_panels_follow() -> None:
    lines = _help("decontaminate").splitlines()
    headings = [i for i, line in enumerate(lines) if line and not line.startswith(" ") and line.endswith(":")]
    names = [lines[i] for i in headings]
    assert names[:2] == ["Arguments:", f"{DEFAULT_PANEL}:"], names
    assert len(names) >= 4, names  # advanced options under headings of their own
    common_end = headings[2]
    assert common_end <= SCREEN_LINES, f"common options end at line {common_end}"
    common = "\n".join(lines[headings[1]:common_end])
    for option in ("--corpus", "--tasks", "--out", "--data-files", "--splits", "--rule", "--quiet"):
        assert option in common
    # every option of the command is shown exactly once
    options = [o for p in COMMANDS["decontaminate"].params if p.param_type_name == "option" and not p.hidden
               for o in p.opts if o.startswith("--")]
    shown = [m for line in lines for m in re.findall(r"^\s+(?:-\w, )?(--[a-z-]+)", line)]
    assert sorted(shown) == sorted([*options, "--help"])


@pytest.mark.parametrize("label, word", [("<path>", "PATH"), ("<str>", "TEXT"), ("<list[str]>", "TEXT"),
                                         ("<int range>", "INTEGER"), ("<raise|skip>", "[raise|skip]"),
                                         ("<list[Path]>", "PATH")])
def test_metavar_words(label: str, word: str) -> None:
    assert metavar_word(label) == word


def test_every_command_uses_the_panel_help() -> None:
    from tcqa_data.cli.help_format import PanelCommand

    for name, cmd in COMMANDS.items():
        assert isinstance(cmd, PanelCommand), name
