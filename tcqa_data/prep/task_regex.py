"""Regular expressions a task file hands lm-eval, run with a timeout.

A task YAML's ``filter_list`` (lm-eval's ``regex`` and ``multi_choice_regex`` filters:
``regex_pattern``, ``regexes_to_ignore``) and ``metric_list`` (``exact_match``'s
``regexes_to_ignore``) are patterns lm-eval runs through Python's ``re`` on every model output. A
catastrophically backtracking pattern (``^(\\w|\\w\\w|\\s)+$`` on a sentence ending in ``?``) runs
for hours, and ``re`` has no timeout. Two guards:

- by construction: while lm-eval runs under tcqa-data (:func:`timed_lm_eval_regexes`, entered by
  ``templates.sandboxed_lm_eval``), the ``re`` of lm-eval's filter and metric modules is
  :data:`TIMED_RE`, the same functions on the ``regex`` package with its timeout (per call, and a
  budget for all calls of one run); a pattern over it is one :class:`RegexOverBudget` line;
- at ``decontaminate`` time (:func:`check_task_regexes`): every pattern of a loaded task compiles,
  and runs within the timeout on the task's docs' own strings (rendered prompts and targets, the
  docs' text fields: what model outputs look like), else one line naming the file and the field.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
import types
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import regex

from tcqa_data.errors import ConfigError

SECONDS = 1.0          # one call on one string
TOTAL_SECONDS = 60.0   # all calls of one run (or one check) together, plus ...
MEAN_SECONDS = 0.002   # ... this much per call
# lm-eval's own modules that run patterns from a task file through `re`
LM_EVAL_MODULES = ("lm_eval.filters.extraction", "lm_eval.api.metrics")
# the keys of filter_list's filters and metric_list's metrics that hold patterns
PATTERN_KEYS = ("regex_pattern", "regexes_to_ignore")

_FLAGS = ("IGNORECASE", "LOCALE", "MULTILINE", "DOTALL", "UNICODE", "VERBOSE", "ASCII")


class RegexOverBudget(ConfigError):
    """A task's pattern that ran past its timeout, or that does not compile."""


class _Clock:
    """The time left to the patterns of one run: ``TOTAL_SECONDS + MEAN_SECONDS`` per call."""

    def __init__(self, sources: Mapping[str, str] | None = None) -> None:
        self.start = time.monotonic()
        self.calls = 0
        self.sources = dict(sources or {})

    def seconds(self, pattern: str) -> float:
        self.calls += 1
        left = TOTAL_SECONDS + MEAN_SECONDS * self.calls - (time.monotonic() - self.start)
        if left <= 0:
            raise RegexOverBudget(f"{self.where(pattern)}: the task's patterns took over "
                                  f"{TOTAL_SECONDS:g} s + {MEAN_SECONDS * 1000:g} ms per call")
        return min(SECONDS, left)

    def where(self, pattern: str) -> str:
        return self.sources.get(pattern) or f"a task's regex {pattern!r:.80}"


_STATE = threading.local()


def _clock() -> _Clock:
    clock = getattr(_STATE, "clock", None)
    return clock if clock is not None else _Clock()


def _regex_flags(flags: int) -> int:
    """``re`` flags as the ``regex`` package's (their ASCII bits differ)."""
    out = 0
    for name in _FLAGS:
        if flags & int(getattr(re, name)):
            out |= int(getattr(regex, name))
    return out


class TimedPattern:
    """A compiled ``regex`` pattern whose every match runs with a timeout (``re.Pattern``'s methods)."""

    def __init__(self, pattern: str, flags: int = 0) -> None:
        try:
            self._compiled = regex.compile(pattern, _regex_flags(flags))
        except (regex.error, TypeError, ValueError) as exc:
            raise RegexOverBudget(f"{_clock().where(str(pattern))}: not a valid regular expression: "
                                  f"{exc}") from None
        self.pattern = pattern

    def __getattr__(self, name: str) -> Any:  # flags, groups, groupindex
        return getattr(self._compiled, name)

    def _run(self, method: str, *args: Any, **kwargs: Any) -> Any:
        clock = _clock()
        seconds = clock.seconds(self.pattern)
        try:
            result = getattr(self._compiled, method)(*args, timeout=seconds, **kwargs)
            return list(result) if method == "finditer" else result
        except TimeoutError:
            raise RegexOverBudget(f"{clock.where(self.pattern)} ran longer than {seconds:.3g} s on one "
                                  "string (a pattern that backtracks catastrophically); lm-eval would "
                                  "run it on every model output") from None

    def search(self, string: str, *args: Any, **kwargs: Any) -> Any:
        return self._run("search", string, *args, **kwargs)

    def match(self, string: str, *args: Any, **kwargs: Any) -> Any:
        return self._run("match", string, *args, **kwargs)

    def fullmatch(self, string: str, *args: Any, **kwargs: Any) -> Any:
        return self._run("fullmatch", string, *args, **kwargs)

    def findall(self, string: str, *args: Any, **kwargs: Any) -> Any:
        return self._run("findall", string, *args, **kwargs)

    def finditer(self, string: str, *args: Any, **kwargs: Any) -> Iterator[Any]:
        return iter(self._run("finditer", string, *args, **kwargs))

    def split(self, string: str, maxsplit: int = 0) -> Any:
        return self._run("split", string, maxsplit=maxsplit)

    def sub(self, repl: Any, string: str, count: int = 0) -> Any:
        return self._run("sub", repl, string, count=count)

    def subn(self, repl: Any, string: str, count: int = 0) -> Any:
        return self._run("subn", repl, string, count=count)


class _TimedRe(types.ModuleType):
    """Stands in for ``re`` in lm-eval's modules: its matching functions on :class:`TimedPattern`;
    everything else (``escape``, flags, ``error``) is ``re``'s own."""

    def __getattr__(self, name: str) -> Any:
        return getattr(re, name)

    @staticmethod
    def compile(pattern: Any, flags: int = 0) -> TimedPattern:
        return pattern if isinstance(pattern, TimedPattern) else TimedPattern(pattern, flags)

    def search(self, pattern: Any, string: str, flags: int = 0) -> Any:
        return self.compile(pattern, flags).search(string)

    def match(self, pattern: Any, string: str, flags: int = 0) -> Any:
        return self.compile(pattern, flags).match(string)

    def fullmatch(self, pattern: Any, string: str, flags: int = 0) -> Any:
        return self.compile(pattern, flags).fullmatch(string)

    def findall(self, pattern: Any, string: str, flags: int = 0) -> Any:
        return self.compile(pattern, flags).findall(string)

    def finditer(self, pattern: Any, string: str, flags: int = 0) -> Any:
        return self.compile(pattern, flags).finditer(string)

    def split(self, pattern: Any, string: str, maxsplit: int = 0, flags: int = 0) -> Any:
        return self.compile(pattern, flags).split(string, maxsplit)

    def sub(self, pattern: Any, repl: Any, string: str, count: int = 0, flags: int = 0) -> Any:
        return self.compile(pattern, flags).sub(repl, string, count)

    def subn(self, pattern: Any, repl: Any, string: str, count: int = 0, flags: int = 0) -> Any:
        return self.compile(pattern, flags).subn(repl, string, count)


TIMED_RE = _TimedRe("re", "re with the regex package's timeout (tcqa_data.prep.task_regex)")


@contextlib.contextmanager
def timed_lm_eval_regexes(sources: Mapping[str, str] | None = None) -> Iterator[None]:
    """lm-eval's filters and metrics run their patterns through :data:`TIMED_RE` while the block runs.

    ``sources``: pattern -> where it was written ("FILE: filter_list[0].filter[1].regex_pattern"),
    so that a pattern over budget is named by its file and field.
    """
    import importlib

    modules = [importlib.import_module(name) for name in LM_EVAL_MODULES]
    originals = [m.re for m in modules]
    outer = getattr(_STATE, "clock", None)
    _STATE.clock = _Clock(sources)
    for m in modules:
        m.re = TIMED_RE
    try:
        yield
    finally:
        for m, original in zip(modules, originals, strict=True):
            m.re = original
        _STATE.clock = outer


def task_patterns(config: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(field, pattern) for each pattern of a task config's ``filter_list`` and ``metric_list``
    (``filter_list[0].filter[1].regex_pattern``, ``metric_list[0].regexes_to_ignore[2]``)."""
    out: list[tuple[str, Any]] = []

    def walk(value: Any, key: str) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                if k in PATTERN_KEYS:
                    # regexes_to_ignore is a list of patterns, regex_pattern one
                    items = enumerate(v) if k == "regexes_to_ignore" and isinstance(v, list) else [(None, v)]
                    out.extend((f"{key}.{k}" + ("" if i is None else f"[{i}]"), p) for i, p in items)
                else:
                    walk(v, f"{key}.{k}")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, f"{key}[{i}]")

    for top in ("filter_list", "metric_list"):
        walk(config.get(top), top)
    return out


def check_task_regexes(config: Mapping[str, Any], strings: Iterable[str], where: str) -> dict[str, str]:
    """Every pattern of a task config (:func:`task_patterns`) is a string that compiles and runs
    within the timeout on ``strings`` (the task's docs' own text); else one RegexOverBudget line
    naming ``where`` (the task's file) and the field. Returns pattern -> "where: field"."""
    fields = task_patterns(config)
    sources: dict[str, str] = {}
    for field, pattern in fields:
        if not isinstance(pattern, str):
            raise RegexOverBudget(f"{where}: field {field} is {pattern!r:.80} ({type(pattern).__name__}); "
                                  "expected a regular expression string")
        sources.setdefault(pattern, f"{where}: {field}")
    if not sources:
        return sources
    with contextlib.ExitStack() as stack:
        outer = getattr(_STATE, "clock", None)
        _STATE.clock = _Clock(sources)
        stack.callback(setattr, _STATE, "clock", outer)
        compiled = [TimedPattern(p) for p in sources]
        for s in strings:
            for pattern in compiled:
                pattern.findall(s)  # as lm-eval's regex filter runs it
    return sources
