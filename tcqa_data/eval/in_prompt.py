"""Memorization texts located in the task's own prompt, so that their scores come out of the task's
forward pass ("in-prompt", evaluate's default ``--memorization-context prompt``).

A field's in-prompt tokens are the prompt tokens whose character spans (the tokenizer's offset
mapping) lie inside the field's occurrence in the rendered prompt; a token's leading whitespace
(byte-level BPE attaches the space before a word to the word) may lie before the occurrence. Each
is scored by its prediction from all prompt tokens before it, so the prompt's first token, which has
no prediction (lm-eval's loglikelihood context has no prefix token), is not scored. ``query`` is
the tokens of the fields its template uses, in prompt order; a query rendered by the prompt's own
template is the whole prompt. A text that cannot be located (a field absent from the doc or from the
prompt, a query template with more than its fields, a tokenizer without offsets, a prompt cut to
fit the model) is left to the standalone pass (``eval.memorization.token_stats``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tcqa_data.eval.memorization import TokenStats, memorization_scores
from tcqa_data.prep.taskspec import TaskSpec


@dataclass
class PromptPlan:
    """One doc's memorization texts in its prompt: ``positions`` = the sorted prompt token indices
    to score (the union of the texts'); ``texts`` = TEXT -> its token indices, None where not located."""

    positions: tuple[int, ...]
    texts: dict[str, list[int] | None]


def _find(prompt: str, value: Any, start: int = 0) -> tuple[int, int] | None:
    """The first occurrence of the field's value (else of its stripped form, for a ``trim``
    filter) at or after ``start``."""
    text = "" if value is None else str(value)
    for v in (text, text.strip()):
        if v:
            at = prompt.find(v, start)
            if at >= 0:
                return at, at + len(v)
    return None


def field_spans(spec: TaskSpec, doc: dict[str, Any], prompt: str,
                fields: Sequence[str]) -> dict[str, tuple[int, int] | None]:
    """Character span of each of ``fields`` in the rendered ``prompt``: the prompt template's own
    fields in template order (each searched after the one before), any other field's first occurrence."""
    spans: dict[str, tuple[int, int] | None] = {}
    at = 0
    for f in spec.template_fields("doc_to_text"):
        span = _find(prompt, doc.get(f), at)
        spans[f] = span
        if span is not None:
            at = span[1]
    return {f: spans[f] if f in spans else _find(prompt, doc.get(f)) for f in fields}


def token_offsets(tokenizer: Any, prompt: str, ids: Sequence[int]) -> list[tuple[int, int]] | None:
    """Character span of each of ``ids``, the prompt's tokens as the engine runs them; None where the
    tokenizer gives no offsets or no encoding of ``prompt`` gives exactly ``ids``."""
    if not getattr(tokenizer, "is_fast", False):
        return None
    for special in (True, False):
        enc = tokenizer(prompt, add_special_tokens=special, return_offsets_mapping=True)
        if list(enc["input_ids"]) == list(ids):
            return [tuple(o) for o in enc["offset_mapping"]]
    return None


def _inside(prompt: str, offsets: Sequence[tuple[int, int]], span: tuple[int, int]) -> list[int]:
    a, b = span
    out = []
    for t, (s, e) in enumerate(offsets):
        if t == 0 or e <= s or e > b:
            continue
        if s < a and prompt[s:a].isspace():
            s = a
        if a <= s < e:
            out.append(t)
    return out


def plan(tokenizer: Any, spec: TaskSpec, doc: dict[str, Any], prompt: str, ids: Sequence[int],
         texts: dict[str, str], fits: bool = True) -> PromptPlan:
    """Where each of ``texts`` (``TaskSpec.memorization_texts(doc)``) lies among ``ids``, the tokens of
    ``prompt`` as the task's request runs them (``fits``: not cut to the model's context)."""
    offsets = token_offsets(tokenizer, prompt, ids) if fits else None
    if offsets is None:
        return PromptPlan((), dict.fromkeys(texts))
    query_template = spec.memorization_query_template()
    query_fields = spec.template_fields(query_template)
    fields = [n for n in texts if n != "query"] + query_fields
    spans = field_spans(spec, doc, prompt, list(dict.fromkeys(fields)))
    located: dict[str, list[int] | None] = {}
    for name in texts:
        if name == "query":
            if query_template == "doc_to_text":
                located[name] = list(range(1, len(ids)))
            elif spec.fields_only(query_template) and all(spans[f] is not None for f in query_fields):
                located[name] = sorted({t for f in query_fields for t in _inside(prompt, offsets, spans[f])})
            else:
                located[name] = None
        else:
            span = spans.get(name)
            located[name] = None if span is None else _inside(prompt, offsets, span)
    positions = sorted({t for ts in located.values() if ts for t in ts})
    return PromptPlan(tuple(positions), located)


def plan_scores(p: PromptPlan, stats: TokenStats | None, texts: dict[str, str]
                ) -> dict[str, dict[str, float | None]]:
    """The scores of each located text from ``stats`` (at ``p.positions``); texts not located (or
    all, when ``stats`` is None) are left out for the standalone pass."""
    if stats is None:
        return {}
    index = {t: i for i, t in enumerate(p.positions)}
    out = {}
    for name, ts in p.texts.items():
        if ts is None:
            continue
        ix = [index[t] for t in ts]
        out[name] = memorization_scores(TokenStats(stats.logprob[ix], stats.mu[ix], stats.sigma[ix]),
                                        texts[name])
    return out
