"""The one Jinja renderer for task templates: sandboxed, with budgets, and otherwise lm-eval's.

Task YAMLs come from papers' repositories and third parties. A template in Jinja's ordinary
``Environment`` can reach Python itself (``{{ lipsum.__globals__['os'].popen('...') }}``), so every
template tcqa-data renders, checks or exports (built-in and user task specs, and every template
field of tasks resolved through lm-eval, which lm-eval also renders through :func:`sandboxed_lm_eval`)
renders here, in Jinja's ``ImmutableSandboxedEnvironment``: no attribute starting with ``_``, no
function internals, no method that changes a list or dict.

Jinja's sandbox bounds neither time nor memory, so each render also has budgets
(:class:`RenderLimits`): the template's source size, time per render (a deadline checked in the
sandbox's call, attribute and item hooks, at every loop iteration and every output chunk, so a
loop of cheap steps is interrupted too), output size (the template is streamed with ``generate()``
and stopped at the cap), loop iterations, call depth (recursive macros and loops), the size of
``*``/``**``/``%`` results and of filter and method arguments. ``regex_replace`` runs with the
``regex`` package's timeout. Anything a template does wrong (refused, over budget, a runtime error
such as ``1/0``, a bad regex, ``{% include %}``) is one :class:`TemplateRefused` line naming the
template; a missing doc field stays ``jinja2.UndefinedError`` so callers can name the field.

Parity with lm-eval 0.4: its renderer (``lm_eval.utils.env``) is
``Environment(loader=BaseLoader, undefined=StrictUndefined, keep_trailing_newline=True)`` with one
filter of its own, ``regex_replace``; the same settings and filter are registered here, so a safe
template renders to the same text in both (tests compare them on real docs).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import jinja2
import regex
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from tcqa_data.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class RenderLimits:
    """Budgets of one render (one template on one doc)."""

    seconds: float = 2.0            # wall time of one render
    source_chars: int = 64_000      # a template's own text
    output_chars: int = 8_000_000   # the rendered text, and any one string, list or number built on the way
    loop_iterations: int = 200_000  # all `for` iterations of one render together
    call_depth: int = 64            # nested calls (recursive macros, `loop(...)`)
    regex_seconds: float = 1.0      # one regex_replace
    # all renders of one check together (a task's templates on all its docs): a template just under
    # the per-render budget on every doc of a large split would otherwise run for hours
    total_seconds: float = 60.0     # plus ...
    mean_seconds: float = 0.01      # ... this much per render


LIMITS = RenderLimits()


class TemplateRefused(ConfigError):
    """A template the sandbox refused, that ran over a budget, or that failed while rendering."""


class _OverBudget(Exception):
    """Raised inside a render; :func:`render` turns it into a TemplateRefused naming the template."""


class _Budget:
    __slots__ = ("deadline", "iterations", "depth", "limits")

    def __init__(self, limits: RenderLimits) -> None:
        self.limits = limits
        self.deadline = time.monotonic() + limits.seconds
        self.iterations = 0
        self.depth = 0


_STATE = threading.local()


def _budget() -> _Budget:
    budget = getattr(_STATE, "budget", None)
    # a render outside render() (a caller's own compiled().render()) has no start to time from: its
    # size budgets hold, its time, iteration and depth budgets start again at each hook
    return budget if budget is not None else _Budget(LIMITS)


def _tick() -> _Budget:
    budget = _budget()
    if time.monotonic() > budget.deadline:
        raise _OverBudget(f"ran longer than its time budget ({budget.limits.seconds:g} s per doc)")
    return budget


def _check_size(value: Any, what: str) -> Any:
    cap = _budget().limits.output_chars
    if isinstance(value, (str, bytes, list, tuple, dict)) and len(value) > cap:
        raise _OverBudget(f"{what} made a value of {len(value):,} items, over the budget of {cap:,}")
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4 * cap:
        raise _OverBudget(f"{what} made a number of {value.bit_length():,} bits")
    return value


def _check_args(args: Iterable[Any], what: str) -> None:
    """Refuse an integer argument larger than the output budget (``center(10**9)``, ``ljust``)."""
    cap = _budget().limits.output_chars
    for a in args:
        if isinstance(a, int) and not isinstance(a, bool) and abs(a) > cap:
            raise _OverBudget(f"{what} was given {a:,}, over the size budget of {cap:,}")


def _counted(iterable: Any) -> Iterator[Any]:
    """A `for` loop's iterable, every item counted against the iteration budget and the deadline."""
    budget = _tick()
    cap = budget.limits.loop_iterations
    for item in iterable:
        budget.iterations += 1
        if budget.iterations > cap:
            raise _OverBudget(f"ran more than {cap:,} loop iterations on one doc")
        if time.monotonic() > budget.deadline:
            raise _OverBudget(f"ran longer than its time budget ({budget.limits.seconds:g} s per doc)")
        yield item


def _range(*args: int) -> range:  # named "range" in messages (see below)
    """Jinja's ``range`` within the iteration budget (the sandbox's own stops at 100,000 items)."""
    _check_args(args, "range()")
    rng = range(*args)
    cap = _budget().limits.loop_iterations
    if len(rng) > cap:
        raise _OverBudget(f"range() of {len(rng):,} items is over the loop budget of {cap:,}")
    return rng


def regex_replace(string: str, pattern: str, repl: str, count: int = 0) -> str:
    """lm-eval's ``regex_replace`` filter (``re.sub``), with the ``regex`` package's timeout."""
    budget = _tick()
    seconds = min(budget.limits.regex_seconds, max(budget.deadline - time.monotonic(), 0.001))
    try:
        return regex.sub(pattern, repl, string, count=count, timeout=seconds)
    except TimeoutError as exc:
        raise _OverBudget(f"regex_replace({pattern!r}) ran longer than {seconds:.3g} s") from exc
    except regex.error as exc:
        raise _OverBudget(f"regex_replace: bad pattern {pattern!r}: {exc}") from exc


_ITER = "tcqa_counted_iter"


def _budgeted_filter(name: str, fn: Any) -> Any:
    @functools.wraps(fn)  # keeps jinja_pass_arg (pass_context / pass_environment / pass_eval_context)
    def run(*args: Any, **kwargs: Any) -> Any:
        _tick()
        _check_args([*args[1:], *kwargs.values()], f"filter {name}")
        return _check_size(fn(*args, **kwargs), f"filter {name}")

    return run


class BudgetedSandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox with the budgets of :class:`RenderLimits` (see the module docstring)."""

    intercepted_binops = frozenset({"*", "**", "%"})

    def _generate(self, source: nodes.Template, name: str | None, filename: str | None,
                  defer_init: bool = False) -> Any:
        # every `for` iterates through the counting wrapper (a loop of cheap steps passes no other hook)
        for loop in list(source.find_all(nodes.For)):
            loop.iter = nodes.Call(nodes.Name(_ITER, "load"), [loop.iter], [], None, None,
                                   lineno=loop.lineno)
        return super()._generate(source, name, filename, defer_init=defer_init)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _tick()
        if operator == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1 \
                and right > 0 and right * math.log2(abs(left)) > 4 * self._cap():
            raise _OverBudget(f"{left} ** {right} is over the size budget")
        if operator == "*" and isinstance(right, int) and isinstance(left, (str, list, tuple)):
            _check_args([len(left) * right], "'*'")
        if operator == "*" and isinstance(left, int) and isinstance(right, (str, list, tuple)):
            _check_args([len(right) * left], "'*'")
        return _check_size(super().call_binop(context, operator, left, right), f"'{operator}'")

    def getattr(self, obj: Any, attribute: str) -> Any:
        _tick()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        _tick()
        return super().getitem(obj, argument)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        budget = _tick()
        _check_args([*args, *kwargs.values()], f"call of {getattr(__obj, '__name__', 'a function')}")
        if budget.depth >= budget.limits.call_depth:
            raise _OverBudget(f"nested calls deeper than {budget.limits.call_depth} (recursion)")
        budget.depth += 1
        try:
            result = super().call(__context, __obj, *args, **kwargs)
        finally:
            budget.depth -= 1
        return _check_size(result, f"call of {getattr(__obj, '__name__', 'a function')}")

    @staticmethod
    def _cap() -> int:
        return _budget().limits.output_chars


ENV = BudgetedSandbox(loader=jinja2.BaseLoader(), undefined=jinja2.StrictUndefined,
                      keep_trailing_newline=True)
ENV.filters["regex_replace"] = regex_replace
ENV.filters = {name: _budgeted_filter(name, fn) for name, fn in ENV.filters.items()}
_range.__name__ = "range"
ENV.globals["range"] = _range
ENV.globals[_ITER] = _counted
# lipsum(n) writes n paragraphs (unbounded work in one call) and is the usual way into __globals__
ENV.globals.pop("lipsum", None)

_COMPILED: dict[str, jinja2.Template] = {}


def _refused(where: str, why: str) -> TemplateRefused:
    return TemplateRefused(f"{where} was refused: {why}")


def check_source(template: Any, *, where: str, limits: RenderLimits | None = None) -> str:
    """``template`` if it is a string within the source budget that parses as Jinja2, else a
    TemplateRefused; attributes and items starting with ``_`` are refused here, before any render."""
    limits = limits or LIMITS
    if not isinstance(template, str):
        raise _refused(where, f"a template must be a string, not {type(template).__name__} "
                              f"({template!r:.60})")
    if len(template) > limits.source_chars:
        raise _refused(where, f"the template is {len(template):,} characters, over the budget of "
                              f"{limits.source_chars:,}")
    try:
        ast = ENV.parse(template)
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateRefused(f"{where} is not valid Jinja2: {exc.message} (line {exc.lineno})") from exc
    for node in ast.find_all((nodes.Getattr, nodes.Getitem)):
        key = node.attr if isinstance(node, nodes.Getattr) else getattr(node.arg, "value", None)
        if isinstance(key, str) and key.startswith("_"):
            raise _refused(where, f"it reads {key!r}, which is unsafe (task templates render in a sandbox; "
                                  "a template may read doc fields and use filters, not reach Python "
                                  "internals)")
    return template


def compiled(template: str, *, where: str = "template") -> jinja2.Template:
    """``template`` compiled once per process in the sandbox (parsing dominates short templates)."""
    tpl = _COMPILED.get(template)
    if tpl is None:
        check_source(template, where=where)
        try:
            tpl = ENV.from_string(template)
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateRefused(f"{where} is not valid Jinja2: {exc.message} (line {exc.lineno})") from exc
        if len(_COMPILED) > 4096:  # templates of many tasks in one process: keep the cache bounded
            _COMPILED.clear()
        _COMPILED[template] = tpl
    return tpl


def render(template: str, doc: dict[str, Any], *, where: str, limits: RenderLimits | None = None) -> str:
    """``template`` rendered with the doc's fields, in the sandbox, within ``limits``.

    ``where`` names the template for errors ("task 'x': template doc_to_text"). Anything the
    template does wrong is one TemplateRefused line; a field the doc lacks propagates as
    ``jinja2.UndefinedError`` to the caller, which knows how to name it. ``limits`` defaults to
    :data:`LIMITS` as it is at the call (read then, so a test can widen one budget).
    """
    limits = limits or LIMITS
    tpl = compiled(template if isinstance(template, str) else check_source(template, where=where),
                   where=where)
    out: list[str] = []
    size = 0
    outer = getattr(_STATE, "budget", None)
    _STATE.budget = budget = _Budget(limits)
    try:
        # the compiled render function itself (Template.generate adds only traceback rewriting)
        for chunk in tpl.root_render_func(tpl.new_context(doc)):
            size += len(chunk)
            if size > limits.output_chars:
                raise _OverBudget(f"its output passed the budget of {limits.output_chars:,} characters")
            if time.monotonic() > budget.deadline:
                raise _OverBudget(f"ran longer than its time budget ({limits.seconds:g} s per doc)")
            out.append(chunk)
    except jinja2.UndefinedError:
        raise
    except jinja2.exceptions.SecurityError as exc:
        raise _refused(where, f"{exc} (task templates render in a sandbox; a template may read doc fields "
                              "and use filters, not reach Python internals)") from exc
    except _OverBudget as exc:
        raise _refused(where, str(exc)) from exc
    except jinja2.TemplateNotFound as exc:
        raise _refused(where, f"it includes or imports another template ({exc.name}); a task template "
                              "must be self-contained") from exc
    except RecursionError as exc:
        raise _refused(where, "it recursed too deeply") from exc
    except MemoryError as exc:
        raise _refused(where, "it ran out of memory") from exc
    except Exception as exc:  # noqa: BLE001 - any runtime error of a template: 1/0, format_map, ...
        raise _refused(where, f"it failed: {type(exc).__name__}: {_first_line(exc)}") from exc
    finally:
        _STATE.budget = outer
    return "".join(out)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else ""


class RenderClock:
    """The total time budget of many renders (``total_seconds + mean_seconds`` per render)."""

    def __init__(self, where: str, limits: RenderLimits | None = None) -> None:
        self.where, self.limits = where, limits or LIMITS
        self.start = time.monotonic()
        self.renders = 0

    def tick(self) -> None:
        """Count one render; a TemplateRefused line once the renders so far are over the budget."""
        self.renders += 1
        spent = time.monotonic() - self.start
        if spent > self.limits.total_seconds + self.limits.mean_seconds * self.renders:
            raise _refused(self.where, f"its templates took {spent:.0f} s for {self.renders:,} renders, "
                                       f"over the budget of {self.limits.total_seconds:g} s + "
                                       f"{self.limits.mean_seconds * 1000:g} ms per render")


def apply_template(template: str, doc: dict[str, Any]) -> str:
    """lm-eval's ``utils.apply_template`` signature, rendered here (see :func:`sandboxed_lm_eval`)."""
    return render(template, doc, where=f"lm-eval template {template[:60]!r}")


@contextlib.contextmanager
def sandboxed_lm_eval(regex_sources: Mapping[str, str] | None = None) -> Iterator[None]:
    """lm-eval renders every template through this module, and runs a task's filter and metric
    patterns with a timeout (:mod:`tcqa_data.prep.task_regex`), while the block runs.

    lm-eval looks ``utils.apply_template`` up on each call (``lm_eval.api.task`` uses
    ``utils.apply_template``), so replacing the module attribute puts its renders (loading a task,
    building prompts in ``simple_evaluate``) in this sandbox with its budgets. ``regex_sources``:
    pattern -> the file and field it came from, for errors.
    """
    import lm_eval.utils

    from tcqa_data.prep.task_regex import timed_lm_eval_regexes

    original = lm_eval.utils.apply_template
    lm_eval.utils.apply_template = apply_template
    try:
        with timed_lm_eval_regexes(regex_sources):
            yield
    finally:
        lm_eval.utils.apply_template = original
