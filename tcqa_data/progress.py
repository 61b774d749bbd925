"""Progress for every stage: rich bars on a terminal, plain periodic lines on a log, nothing when quiet.

When stderr is not a terminal (a log file, a pipe, CI) a bar would print nothing useful, so each
task writes a line when it starts, then every ``LINE_EVERY_S`` seconds or ``LINE_EVERY_FRACTION``
of its total, and when it ends: stage, done/total, percent, rate, elapsed time and ETA. A step
without a total (``stage``: loading a model) is such a task too: a start line, its elapsed time
every ``LINE_EVERY_S`` seconds, and a done line. Every ``[progress]`` line is written by one method,
``StageProgress._write``.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from rich.console import Console
from rich.filesize import decimal
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TransferSpeedColumn,
)
from rich.text import Text

# A log line at least this often (seconds) and at every this fraction of a task's total.
LINE_EVERY_S = 10.0
LINE_EVERY_FRACTION = 0.10


def progress_enabled(quiet: bool = False) -> bool:
    """Whether rich bars are drawn: not quiet and stderr is a terminal."""
    return not quiet and sys.stderr.isatty()


def progress_lines_enabled(quiet: bool = False) -> bool:
    """Whether plain progress lines are written: not quiet and stderr is not a terminal."""
    return not quiet and not sys.stderr.isatty()


def eta_seconds(task: Task) -> float | None:
    """Time left at the average rate since the task started.

    rich's own estimate looks at the last 30 s only and shows nothing when one step takes longer
    (a batch of generation on a CPU does), so the ETA would stay unknown for a whole run.
    """
    elapsed = task.elapsed
    if task.total is None or not task.completed or not elapsed:
        return None
    return max(task.total - task.completed, 0.0) * elapsed / task.completed


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "-:--:--"
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class AverageTimeRemainingColumn(ProgressColumn):
    """ETA column from the average rate (see ``eta_seconds``)."""

    def render(self, task: Task) -> Text:
        if task.finished:
            return Text("0:00:00", style="progress.remaining")
        return Text(_clock(eta_seconds(task)), style="progress.remaining")


class StageProgress(Progress):
    """A rich Progress that, when ``lines`` is set, also writes plain progress lines to ``stream``."""

    def __init__(self, *columns: Any, lines: bool = False, bytes_mode: bool = False,
                 stream: TextIO | None = None, **kwargs: Any) -> None:
        super().__init__(*columns, **kwargs)
        self._lines = lines
        self._bytes_mode = bytes_mode
        self._stream = stream
        # per task: (time of the last line, completed at the last line)
        self._last_line: dict[TaskID, tuple[float, float]] = {}
        self._line_lock = threading.Lock()
        self._stop_heartbeat = threading.Event()
        self._heartbeat: threading.Thread | None = None

    def start(self) -> None:
        super().start()
        if self._lines and self._heartbeat is None:
            # one step can take minutes (a batch of packed rows on a CPU): a log still hears from
            # every running task every LINE_EVERY_S seconds, with its elapsed time
            self._stop_heartbeat.clear()
            self._heartbeat = threading.Thread(target=self._beat, name="progress-lines", daemon=True)
            self._heartbeat.start()

    def stop(self) -> None:
        if self._heartbeat is not None:
            self._stop_heartbeat.set()
            self._heartbeat.join()
            self._heartbeat = None
        super().stop()

    def _beat(self) -> None:
        while not self._stop_heartbeat.wait(LINE_EVERY_S / 2):
            now = time.monotonic()
            for task in self.tasks:
                last = self._last_line.get(task.id)
                if last is not None and not task.finished and now - last[0] >= LINE_EVERY_S:
                    self._line(task)

    def add_task(self, description: str, start: bool = True, total: float | None = 100.0,
                 completed: int = 0, visible: bool = True, **fields: Any) -> TaskID:
        task_id = super().add_task(description, start=start, total=total, completed=completed,
                                   visible=visible, **fields)
        if self._lines:
            size = "" if total is None else f" ({self._amount(total)})"
            self._write(description, f"started{size}")
            self._last_line[task_id] = (time.monotonic(), float(completed))
        return task_id

    def finish(self, task_id: TaskID, status: str) -> None:
        """The last line of a task without a total: ``<description>: <status>`` (e.g. 'done in 3.2 s')."""
        task = self._tasks[task_id]
        self.update(task_id, total=task.completed)  # finished: no heartbeat line after this one
        if self._lines:
            with self._line_lock:
                self._write(task.description, status)

    def update(self, task_id: TaskID, **kwargs: Any) -> None:  # type: ignore[override]
        super().update(task_id, **kwargs)
        if self._lines:
            self._maybe_line(task_id)

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        super().advance(task_id, advance)
        if self._lines:
            self._maybe_line(task_id)

    def finish_lines(self) -> None:
        """A last line for every task that moved since its last line."""
        if not self._lines:
            return
        for task in self.tasks:
            last = self._last_line.get(task.id)
            if last is None or task.completed != last[1]:
                self._line(task)

    # ---- plain lines ----
    def _maybe_line(self, task_id: TaskID) -> None:
        task = self._tasks[task_id]
        last_t, last_done = self._last_line.get(task_id, (0.0, 0.0))
        if task.completed == last_done:
            return
        step = (task.total or 0) * LINE_EVERY_FRACTION
        crossed = step > 0 and int(task.completed // step) > int(last_done // step)
        finished = task.total is not None and task.completed >= task.total
        if finished or crossed or time.monotonic() - last_t >= LINE_EVERY_S:
            self._line(task)

    def _line(self, task: Task) -> None:
        with self._line_lock:
            self._write_line(task)

    def _write_line(self, task: Task) -> None:
        parts = []
        if task.total is not None:
            parts.append(f"{self._amount(task.completed, task.total)}")
            parts.append(f"{100.0 * task.completed / task.total:.0f}%" if task.total else "100%")
        elif task.completed:
            parts.append(f"{self._amount(task.completed)}")
        rate = task.fields.get("rate") or self._rate(task)
        if rate:
            parts.append(rate)
        parts.append(f"elapsed {_clock(task.elapsed or 0.0)}")
        finished = task.total is not None and task.completed >= task.total
        if finished or task.total is not None:  # no ETA without a total (a stage's heartbeat)
            parts.append("done" if finished else f"ETA {_clock(eta_seconds(task))}")
        self._write(task.description, ", ".join(parts))
        self._last_line[task.id] = (time.monotonic(), task.completed)

    def _write(self, description: str, status: str) -> None:
        """One plain progress line, ``[progress] <description>: <status>`` (the only writer of them)."""
        stream = self._stream or sys.stderr
        stream.write(f"[progress] {self._plain(description)}: {status}\n")
        stream.flush()

    def _rate(self, task: Task) -> str:
        if not task.elapsed or not task.completed:
            return ""
        per_s = task.completed / task.elapsed
        return f"{decimal(int(per_s))}/s" if self._bytes_mode else rate_text(task.completed, task.elapsed, "")

    def _amount(self, done: float, total: float | None = None) -> str:
        if self._bytes_mode:
            return decimal(int(done)) if total is None else f"{decimal(int(done))}/{decimal(int(total))}"
        fmt = (lambda x: f"{x:,.0f}") if float(done).is_integer() else (lambda x: f"{x:,.1f}")
        return fmt(done) if total is None else f"{fmt(done)}/{total:,.0f}"

    @staticmethod
    def _plain(description: str) -> str:
        return Text.from_markup(description).plain


@contextmanager
def progress_bar(quiet: bool = False, *, bytes_mode: bool = False) -> Iterator[StageProgress]:
    """A rich Progress writing to stderr: bars on a terminal, plain lines otherwise, nothing when quiet.

    ``bytes_mode`` shows a transfer speed (bytes/s) column; add a ``docs`` field to a task and
    ``{task.fields[docs]}`` columns show docs/s via ``rate_text``.
    """
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), TaskProgressColumn()]
    if bytes_mode:
        columns.append(TransferSpeedColumn())
    else:
        columns.append(MofNCompleteColumn())
    columns += [TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), AverageTimeRemainingColumn()]
    progress = StageProgress(*columns, lines=progress_lines_enabled(quiet), bytes_mode=bytes_mode,
                             disable=not progress_enabled(quiet), transient=False)
    with progress:
        yield progress
        progress.finish_lines()


@contextmanager
def stage(message: str, quiet: bool = False) -> Iterator[None]:
    """Feedback for one step without a measurable total (loading a model): a spinner on a
    terminal, a start line and a done line (with its duration) on a log, nothing when quiet."""
    t0 = time.perf_counter()
    if progress_enabled(quiet):
        console = Console(stderr=True)
        with console.status(Text(message)):
            yield
        console.print(Text(f"{message}: done in {time.perf_counter() - t0:.1f} s"))
        return
    if not progress_lines_enabled(quiet):
        yield
        return
    # on a log: a task without a total, so its lines (start, heartbeat, done) come from StageProgress
    with StageProgress(lines=True, disable=True) as progress:
        task = progress.add_task(escape(message), total=None)
        yield
        progress.finish(task, f"done in {time.perf_counter() - t0:.1f} s")


def note(message: str, quiet: bool = False) -> None:
    """One informational line on stderr (what a stage is about to do), unless quiet."""
    if not quiet:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()


def rate_text(count: float, elapsed: float, unit: str) -> str:
    """'123.4 docs/s' style text for a progress field."""
    if elapsed <= 0:
        return ""
    per_s = count / elapsed
    unit = f" {unit}" if unit else ""
    if 0 < per_s < 1:  # slow steps (generation on a CPU): per minute, not "0.0/s"
        return f"{per_s * 60:,.1f}{unit}/min"
    return f"{per_s:,.1f}{unit}/s"
