"""Deep import paths of the stage functions, kept for one release: they warn once when called from
outside the package (``from tcqa_data import ...`` is the public API); tcqa-data's own calls
through them (the CLI, the API, one stage calling another) never warn."""

from __future__ import annotations

import functools
import sys
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def _inside_package(caller_globals: dict[str, Any]) -> bool:
    module = caller_globals.get("__name__", "")
    spec = caller_globals.get("__spec__")
    if module == "__main__" and spec is not None:  # a package module run with `python -m`
        module = spec.name
    return module == "tcqa_data" or module.startswith("tcqa_data.")


def moved_to_top(public_name: str) -> Callable[[F], F]:
    """Decorate a stage function whose public home is ``tcqa_data.<public_name>``: a call from code
    outside the package warns (DeprecationWarning, once per function and process)."""

    def decorate(func: F) -> F:
        old = f"{func.__module__}.{func.__qualname__}"
        warned = False

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            nonlocal warned
            if not warned and not _inside_package(sys._getframe(1).f_globals):
                warned = True
                warnings.warn(f"{old} is deprecated and goes in the next release; use "
                              f"`from tcqa_data import {public_name}` (the same stage, with the CLI's "
                              "parameter names)", DeprecationWarning, stacklevel=2)
            return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate
