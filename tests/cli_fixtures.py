"""The command line in-process, for CLI tests."""

from __future__ import annotations

import sys

import pytest

from tcqa_data.cli import main


def run(args: list[str], monkeypatch, capsys) -> tuple[int, str, str]:
    """Run ``tcqa-data ARGS`` in-process through the real entry point (its single error handler)."""
    monkeypatch.setattr(sys, "argv", ["tcqa-data", *map(str, args)])
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr()
    code = exc.value.code
    # progress lines (written when stderr is not a terminal) are not what these tests read
    err = "".join(line for line in out.err.splitlines(keepends=True) if not line.startswith("[progress]"))
    return (0 if code is None else int(code)), out.out, err
