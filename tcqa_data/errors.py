"""Errors a user can act on. The CLI prints their message without a traceback."""

from __future__ import annotations


class TcqaError(Exception):
    """Base class for user-facing errors: the message says what is wrong and where."""


class InputError(TcqaError):
    """Bad input data: names the file, the line or row, and the field."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 field: str | None = None) -> None:
        where = ""
        if path is not None:
            where = str(path)
            if line is not None:
                where += f":{line}"
            where += ": "
        if field is not None:
            message = f"{message} (field {field!r})"
        super().__init__(where + message)
        self.path = path
        self.line = line
        self.field = field


class IndexMismatchError(TcqaError):
    """An existing index was built with other parameters than the ones asked for."""


class ConfigError(TcqaError):
    """A task spec, option or template is invalid."""
