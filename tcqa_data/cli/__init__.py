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
    # plain help and usage errors: "Error: ..." lines like ours, not boxes (and readable in logs)
    rich_markup_mode=None,
)


def _show_version(value: bool) -> None:
    if value:
        from tcqa_data import __version__

        typer.echo(f"tcqa-data {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_show_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """Measure benchmark contamination against a training corpus and report clean scores."""


def error(message: str) -> None:
    """Print a user-facing error in the one CLI style: ``Error: <message>`` on stderr, in red."""
    typer.secho(f"Error: {message}", fg=typer.colors.RED, err=True)


def warning(message: str) -> None:
    """Print a warning the user must not miss (even with --quiet): ``Warning: <message>`` on stderr."""
    typer.secho(f"Warning: {message}", fg=typer.colors.YELLOW, bold=True, err=True)

# Register the stage commands (imports are for their side effect on `app`).
from tcqa_data.cli import analyze as _analyze  # noqa: E402,F401
from tcqa_data.cli import decontaminate as _decontaminate  # noqa: E402,F401
from tcqa_data.cli import evaluate as _evaluate  # noqa: E402,F401
from tcqa_data.cli import index as _index  # noqa: E402,F401
from tcqa_data.cli import purify as _purify  # noqa: E402,F401


def main() -> None:
    """The ``tcqa-data`` entry point and its single error handler: an error the user can act on is
    one ``Error: ...`` line on stderr (exit 2), no traceback. Usage errors from the option parser
    come out in the same style (``rich_markup_mode=None`` above: click's plain ``Error: ...``)."""
    try:
        app()
    except TcqaError as exc:
        error(str(exc))
        sys.exit(2)
