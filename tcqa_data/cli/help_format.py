"""How every command's ``--help`` reads: options in panels, one metavar style, no token broken.

Plain text (``rich_markup_mode=None``: help and errors read the same in a log as on a terminal), so
Typer's ``rich_help_panel`` would be ignored; :class:`PanelCommand` honours it here instead:

- the common options (those without a panel) come first, under "Options", so that they fit one
  screen; the others follow under their panel's heading, panels in the order they are declared;
- metavars have one style, click's: a value is an upper-case word (``PATH``, ``TEXT``, ``INTEGER``),
  a choice ``[a|b]``, a required argument ``PREP_DIR`` and an optional one ``[INDEX_DIR]`` (Typer
  spells these ``<path>``, ``{prep_dir}`` and ``[index_dir]``);
- help text wraps at spaces only: a rule such as ``'any-ngram|aligned-field>=0.8'`` or a path stays
  whole on one line, so that it can be pasted (click's wrapper breaks at hyphens and inside long words).
"""

from __future__ import annotations

import functools
import re
import textwrap
from collections.abc import Iterable
from typing import Any

from typer.core import TyperArgument, TyperCommand

DEFAULT_PANEL = "Options"
# Typer's type labels (inside its <...>) -> click's metavar words
_METAVAR_WORDS = {"str": "TEXT", "path": "PATH", "int": "INTEGER", "float": "FLOAT", "int range": "INTEGER",
                  "float range": "FLOAT", "file": "FILE", "directory": "DIRECTORY"}
_LIST = re.compile(r"^list\[(.*)\]$")


def _wrap(text: str, width: int) -> list[str]:
    """``text`` wrapped to ``width`` at spaces only; paragraphs (blank-line separated) kept apart."""
    wrapper = textwrap.TextWrapper(width=width, break_long_words=False, break_on_hyphens=False)
    lines: list[str] = []
    for i, paragraph in enumerate(p for p in re.split(r"\n\s*\n", text) if p.strip()):
        if i:
            lines.append("")
        lines.extend(wrapper.wrap(" ".join(paragraph.split())))
    return lines


class _Unbroken:
    """click's formatter, wrapping at spaces only (a token longer than the column overflows it).
    Mixed into the formatter class of the click that Typer runs on (newer Typer vendors its own)."""

    current_indent: int
    width: int
    write: Any  # the formatter's own
    first_col_width: int | None = None  # one column for every section of a help page

    def write_text(self, text: str) -> None:
        indent = " " * self.current_indent
        width = max(self.width - self.current_indent, 11)
        for line in _wrap(text, width):
            self.write(f"{indent}{line}\n" if line else "\n")

    def write_dl(self, rows: Iterable[tuple[str, str]], col_max: int = 30, col_spacing: int = 2) -> None:
        rows = list(rows)
        widest = self.first_col_width or max((len(first) for first, _ in rows), default=0)
        first_col = min(widest, col_max) + col_spacing
        for first, second in rows:
            self.write(f"{'':>{self.current_indent}}{first}")
            if not second:
                self.write("\n")
                continue
            if len(first) <= first_col - col_spacing:
                self.write(" " * (first_col - len(first)))
            else:
                self.write("\n" + " " * (first_col + self.current_indent))
            lines = _wrap(second, max(self.width - first_col - 2, 10)) or [""]
            self.write(f"{lines[0]}\n")
            for line in lines[1:]:
                self.write(f"{'':>{first_col + self.current_indent}}{line}\n" if line else "\n")


@functools.cache
def _unbroken(formatter_class: type) -> type:
    return type("UnbrokenFormatter", (_Unbroken, formatter_class), {})


def metavar_word(typer_label: str) -> str:
    """Typer's ``<label>`` in click's style: ``<path>`` -> ``PATH``, ``<a|b>`` -> ``[a|b]``,
    ``<list[str]>`` -> ``TEXT`` (a repeatable option says so in its help)."""
    label = typer_label.strip("<>").removesuffix("...")
    listed = _LIST.match(label)
    if listed:
        label = listed.group(1)
    if "|" in label:
        return f"[{label}]"
    return _METAVAR_WORDS.get(label.lower(), label.upper())


class PanelCommand(TyperCommand):
    """A Typer command whose plain-text help groups options by ``rich_help_panel`` (module doc)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        ctx = self.context_class(self)
        for param in self.params:
            if param.metavar is not None:
                continue
            if isinstance(param, TyperArgument):
                param.metavar = (param.name or "").upper()
            elif not getattr(param, "is_flag", False) and not getattr(param, "count", False):
                param.metavar = metavar_word(param.display_type(ctx))

    def get_help(self, ctx: Any) -> str:
        formatter = _unbroken(ctx.formatter_class)(width=ctx.terminal_width, max_width=ctx.max_content_width)
        self.format_help(ctx, formatter)
        return formatter.getvalue().rstrip("\n")

    def format_options(self, ctx: Any, formatter: Any) -> None:
        arguments: list[tuple[str, str]] = []
        panels: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                arguments.append((param.metavar or "", record[1]))
            else:
                panels.setdefault(getattr(param, "rich_help_panel", None) or DEFAULT_PANEL, []).append(record)
        every_row = [first for rows in [arguments, *panels.values()] for first, _ in rows]
        formatter.first_col_width = max(map(len, every_row), default=0)
        if arguments:
            with formatter.section("Arguments"):
                formatter.write_dl(arguments)
        # the options without a panel are the common ones: first, so that they fit one screen
        for name in [DEFAULT_PANEL, *(n for n in panels if n != DEFAULT_PANEL)]:
            if name in panels:
                with formatter.section(name):
                    formatter.write_dl(panels[name])

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                name = param.metavar or (param.name or "").upper()
                pieces.append(name if param.required else f"[{name}]")
        return pieces
