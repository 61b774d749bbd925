"""The `tcqa-data` command line. Thin: each command parses options and calls a library function.

Each stage's commands live in their own module and register on ``app``.
"""

from __future__ import annotations

import os
import sys
from enum import Enum
from typing import Any, TypeVar

import typer

from tcqa_data.decontam.readers.presets import PRESETS
from tcqa_data.errors import TcqaError

T = TypeVar("T")

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


# One option vocabulary: every command spells a shared concept the same way (``--out`` the output
# folder, ``--tasks``/``--splits`` comma lists, ``--quiet``/``-q``, ...). The spellings of 0.1.0
# that differed stay for one release as hidden options (not in --help) that print a note on stderr.
DEPRECATED_SPELLINGS: dict[str, str] = {
    "--output": "--out",
    "--task": "--tasks",
    "--split": "--splits",
    "--seed": "--bootstrap-seed",
}


def old_spelling(old: str) -> Any:
    """A hidden option spelled ``old``, the deprecated name of ``DEPRECATED_SPELLINGS[old]``; the
    command passes its value through :func:`prefer`."""
    return typer.Option(None, old, hidden=True, help=f"Deprecated spelling of {DEPRECATED_SPELLINGS[old]}.")


def prefer(value: T, old_value: T | None, old: str, default: T | None = None) -> T:
    """The value of an option given by its name or by its deprecated spelling ``old`` (then a note on
    stderr). Both given with different values is a usage error."""
    if old_value is None:
        return value
    new = DEPRECATED_SPELLINGS[old]
    if value != default and value != old_value:
        raise typer.BadParameter(f"given both {new} and its old spelling {old}; use {new} only",
                                 param_hint=new)
    typer.secho(f"Note: {old} is deprecated (kept for one release); use {new}", err=True)
    return old_value


def choices(name: str, *values: str) -> type[Enum]:
    """An enumerated option's type (Typer makes it a click.Choice): a value outside ``values`` is a
    usage error at parse time, naming the choices; the command passes ``.value`` on."""
    return Enum(name, {v.replace("-", "_"): v for v in values}, type=str)  # type: ignore[return-value]


# one type per enumerated option, shared by every command that has it
OnError = choices("OnError", "raise", "skip")
CorpusPreset = choices("CorpusPreset", *PRESETS)
Engine = choices("Engine", "local", "ray")
GroupPolicy = choices("GroupPolicy", "any", "all", "majority")
Normalization = choices("Normalization", "janitor", "unicode")
PurifyMode = choices("PurifyMode", "excise", "drop")
Device = choices("Device", "auto", "cuda", "cpu", "mps")
Dtype = choices("Dtype", "auto", "float32", "bfloat16", "float16")
MemorizationContext = choices("MemorizationContext", "fields", "prompt", "standalone", "both")
Backend = choices("Backend", "native", "lm-eval")


def value_of(option: Any) -> Any:
    """An enumerated option's string (None stays None)."""
    return option.value if isinstance(option, Enum) else option


def ngram_option(value: str) -> str:
    """``--ngram`` of decontaminate: an n-gram size >= 1 or ``auto``, checked at parse time."""
    if value == "auto":
        return value
    try:
        n = int(value)
    except ValueError:
        raise typer.BadParameter(f"{value!r} is neither an integer >= 1 nor 'auto'") from None
    if n < 1:
        raise typer.BadParameter(f"{n} is not >= 1 (or 'auto')")
    return value


ALLOW_TASK_CODE_HELP = ("Let task YAMLs from outside the installed lm-eval package import their Python "
                        "(!function helpers, class: tasks). Off by default: that code would run "
                        "unsandboxed.")


def comma_list(value: str | None) -> list[str] | None:
    """``a, b,c`` -> ``["a", "b", "c"]``; None or an empty list -> None (the command's default)."""
    names = [v.strip() for v in value.split(",") if v.strip()] if value else []
    return names or None


def one_split(value: str | None, command: str) -> str | None:
    """``--splits`` of a command that reads one prepared split per task."""
    names = comma_list(value)
    if names and len(names) > 1:
        raise typer.BadParameter(f"{command} reads one prepared split per task; got {', '.join(names)}",
                                 param_hint="--splits")
    return names[0] if names else None


# Register the stage commands (imports are for their side effect on `app`).
from tcqa_data.cli import analyze as _analyze  # noqa: E402,F401
from tcqa_data.cli import decontaminate as _decontaminate  # noqa: E402,F401
from tcqa_data.cli import evaluate as _evaluate  # noqa: E402,F401
from tcqa_data.cli import index as _index  # noqa: E402,F401
from tcqa_data.cli import purify as _purify  # noqa: E402,F401

INTERRUPTED = "interrupted; rerun the same command to resume"


def _on_sigint(signum: int, frame: object) -> None:
    """Ctrl-C: one line, the worker processes stopped, exit status 130, at once.

    Raising KeyboardInterrupt instead would reach the command only where Python happens to run
    the handler: raised inside a finalizer (numba's, pyarrow's) it is printed as a traceback and
    swallowed, and the command carries on. Exiting at once is safe because every output is
    committed whole (a staging folder, then one rename or exchange): an interrupted command leaves
    the previous output as it was, like a kill -9, and its rerun resumes or redoes it."""
    sys.stdout.flush()
    sys.stderr.write(f"\n{INTERRUPTED}\n")
    sys.stderr.flush()
    mp = sys.modules.get("multiprocessing")
    if mp is not None:  # pool workers ignore SIGINT (engines.quiet_worker): stop them quietly
        children = mp.active_children()
        for child in children:
            child.terminate()
        for child in children:
            child.join(5)
    os._exit(130)


def main() -> None:
    """The ``tcqa-data`` entry point and its single error handler: an error the user can act on is
    one ``Error: ...`` line on stderr (exit 2), no traceback. Usage errors from the option parser
    come out in the same style (``rich_markup_mode=None`` above: click's plain ``Error: ...``).
    Ctrl-C is one line and exit status 130 (``_on_sigint``). An OS error (a full or read-only disk,
    no permission, too many open files, a name too long) is one line naming the path: every output
    is staged and committed whole, so the previous one is unchanged."""
    import signal

    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)
    from tcqa_data.outputs import remove_unremoved

    try:
        app()
    except TcqaError as exc:
        error(str(exc))
        remove_unremoved(exc)  # staging a failed run could not remove (EMFILE): its files are closed now
        sys.exit(2)
    except OSError as exc:  # a full disk, a read-only one, no permission, too many open files...
        from tcqa_data.outputs import os_error_line

        error(os_error_line(exc))
        remove_unremoved(exc)
        sys.exit(2)
    except UnicodeEncodeError as exc:
        if not isinstance(exc.object, str) or not any("\udc80" <= c <= "\udcff" for c in exc.object):
            raise
        # a file name with bytes that are not UTF-8 (Python keeps them as lone surrogates)
        error(f"the name {ascii(exc.object)} is not valid UTF-8 (a file name with undecodable bytes); "
              "rename it")
        sys.exit(2)
    except KeyboardInterrupt:
        typer.echo(INTERRUPTED, err=True)
        sys.exit(130)
