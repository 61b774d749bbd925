"""One progress-bar factory for every stage: rich bars on a terminal, silent otherwise."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)


def progress_enabled(quiet: bool = False) -> bool:
    return not quiet and sys.stderr.isatty()


@contextmanager
def progress_bar(quiet: bool = False, *, bytes_mode: bool = False) -> Iterator[Progress]:
    """A rich Progress writing to stderr; disabled when quiet or stderr is not a terminal.

    ``bytes_mode`` shows a transfer speed (bytes/s) column; add a ``docs`` field to a task and
    ``{task.fields[docs]}`` columns show docs/s via ``rate_text``.
    """
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), TaskProgressColumn()]
    if bytes_mode:
        columns.append(TransferSpeedColumn())
    else:
        columns.append(MofNCompleteColumn())
    columns += [TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TimeRemainingColumn()]
    progress = Progress(*columns, disable=not progress_enabled(quiet), transient=False)
    with progress:
        yield progress


def rate_text(count: float, elapsed: float, unit: str) -> str:
    """'123.4 docs/s' style text for a progress field."""
    if elapsed <= 0:
        return ""
    return f"{count / elapsed:,.1f} {unit}/s"
