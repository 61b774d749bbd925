"""The one Jinja environment tcqa-data renders task templates in: sandboxed, and otherwise lm-eval's.

Task YAMLs come from papers' repositories and third parties. A template in Jinja's ordinary
``Environment`` can reach Python itself (``{{ lipsum.__globals__['os'].popen('...') }}``), so every
template tcqa-data renders (built-in and user task specs, and the decontamination queries of tasks
resolved through lm-eval) renders in Jinja's ``ImmutableSandboxedEnvironment``: no attribute
starting with ``_``, no function internals, no method that changes a list or dict. A template that
tries is refused with a ConfigError before it can do anything.

Parity with lm-eval 0.4: its renderer (``lm_eval.utils.env``) is
``Environment(loader=BaseLoader, undefined=StrictUndefined, keep_trailing_newline=True)`` with one
filter of its own, ``regex_replace``; the same settings and filter are registered here, so a safe
template renders to the same text in both (tests compare them on real docs).
"""

from __future__ import annotations

import re
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from tcqa_data.errors import ConfigError


def regex_replace(string: str, pattern: str, repl: str, count: int = 0) -> str:
    """lm-eval's ``regex_replace`` filter (``lm_eval.utils.regex_replace``): ``re.sub``."""
    return re.sub(pattern, repl, string, count=count)


ENV = ImmutableSandboxedEnvironment(loader=jinja2.BaseLoader(), undefined=jinja2.StrictUndefined,
                                    keep_trailing_newline=True)
ENV.filters["regex_replace"] = regex_replace

_COMPILED: dict[str, jinja2.Template] = {}


def compiled(template: str) -> jinja2.Template:
    """``template`` compiled once per process in the sandbox (parsing dominates short templates)."""
    tpl = _COMPILED.get(template)
    if tpl is None:
        tpl = _COMPILED[template] = ENV.from_string(template)
    return tpl


def render(template: str, doc: dict[str, Any], *, where: str) -> str:
    """``template`` rendered with the doc's fields, in the sandbox.

    ``where`` names the template for errors ("task 'x': template doc_to_text"). What the sandbox
    refuses is a one-line ConfigError; other errors (a missing field) propagate to the caller,
    which knows how to name them.
    """
    try:
        return compiled(template).render(**doc)
    except jinja2.exceptions.SecurityError as exc:
        raise ConfigError(f"{where} was refused: {exc} (task templates render in a sandbox; a template "
                          "may read doc fields and use filters, not reach Python internals)") from exc
