"""The `tcqa-data` command line. Thin: each command parses options and calls a library function.

Each stage's commands live in their own module and register on ``app``.
"""

from __future__ import annotations

import sys

import typer

from tcqa_data.errors import TcqaError

app = typer.Typer(
    name="tcqa-data",
    help="Measure benchmark contamination against a training corpus and report clean scores.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Register the stage commands (imports are for their side effect on `app`).
from tcqa_data.cli import decontaminate as _decontaminate  # noqa: E402,F401
from tcqa_data.cli import evaluate as _evaluate  # noqa: E402,F401
from tcqa_data.cli import index as _index  # noqa: E402,F401


def main() -> None:
    try:
        app()
    except TcqaError as exc:
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        sys.exit(2)
