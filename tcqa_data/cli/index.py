"""CLI commands of this stage (registered on the shared Typer app)."""

from __future__ import annotations

from tcqa_data.cli import app  # noqa: F401
