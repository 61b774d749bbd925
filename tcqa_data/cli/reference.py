"""The CLI's Typer app under a module name of its own, for the generated CLI reference.

mkdocs-typer2 runs ``typer tcqa_data.cli.reference utils docs``, and Typer's ``utils docs`` executes
the module it is given afresh: executed afresh, ``tcqa_data.cli`` would hold an app without its
commands (they register on the imported package's app), so the reference reads the app from here.
"""

from tcqa_data.cli import app

__all__ = ["app"]
