"""Flag rules over the per-doc scores computed by :mod:`tcqa_data.decontam.detect.score`.

Rules (``Rule.parse``) are a tiny boolean grammar over these scores::

    rule   := clause ("|" clause)*          # OR
    clause := term ("&" term)*              # AND (binds tighter than OR)
    term   := "any-ngram"                   # ngram_hits >= 1 (lm-eval / GPT-3 default)
            | "ngram-hits>=" INT
            | "ngram-fraction>=" FLOAT      # 0..1
            | "longest>=" INT               # words
            | "minhash>=" FLOAT             # 0..1
            | "aligned>=" FLOAT             # 0..1, share of query tokens in an aligned match (align.py)
            | "aligned-field>=" FLOAT       # 0..1, the same share within the best-covered field
            | "semantic" [">=" FLOAT]        # semantic_score of the best candidate span (semantic tier:
                                            # cosine and kept rare-word share, decontam/semantic);
                                            # bare: the shipped threshold (DEFAULT_SEMANTIC)
            | "judge"                       # the judge model (--judge) said the item and that
                                            # window are the same item (semantic tier)

There are no parentheses: ``any-ngram|semantic&judge`` reads as ``any-ngram | (semantic & judge)``.

N-gram terms fire only on testable docs (query of at least ``n`` words); :func:`doc_status`
tells "dirty", "clean" and "untestable" docs apart.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tcqa_data.decontam.semantic.matches import DEFAULT_THRESHOLD

DEFAULT_RULE = "any-ngram"
# a bare ``semantic`` term: the ``semantic_score`` threshold the semantic tier ships
DEFAULT_SEMANTIC = DEFAULT_THRESHOLD


@dataclass(frozen=True)
class TermKind:
    """One rule term the parser accepts: its name, the per-doc score it thresholds, and how its
    threshold is written (``placeholder`` in help; None: the term takes no threshold)."""

    name: str
    metric: str
    placeholder: str | None
    threshold: str  # "none", "count" (a positive integer) or "share" (0..1)
    default: float | None = None  # the threshold of the bare term, where it may be left out


# The parser's table: the regex, the metrics and the help (``rule_terms_help``) are all read from it.
TERM_KINDS: tuple[TermKind, ...] = (
    TermKind("any-ngram", "ngram_hits", None, "none"),
    TermKind("ngram-hits", "ngram_hits", "K", "count"),
    TermKind("ngram-fraction", "ngram_fraction", "X", "share"),
    TermKind("longest", "longest_match", "L", "count"),
    TermKind("minhash", "minhash_sim", "T", "share"),
    TermKind("aligned", "aligned_share", "S", "share"),
    TermKind("aligned-field", "aligned_field_share", "S", "share"),
    TermKind("semantic", "semantic_score", "T", "share", DEFAULT_SEMANTIC),
    TermKind("judge", "semantic_judge", None, "none"),
)
# terms read from the semantic tier's columns (null where it found no candidate, or judged none)
SEMANTIC_TERMS = ("semantic", "judge")
AND, OR = "&", "|"  # AND binds tighter than OR
OPERATORS: tuple[tuple[str, str], ...] = ((AND, "and"), (OR, "or"))
_KINDS = {k.name: k for k in TERM_KINDS}
_TERM_METRIC = {k.name: k.metric for k in TERM_KINDS}
# longest names first, so that "aligned-field" is not read as "aligned"
_TERM_RE = re.compile(
    r"^(?P<name>" + "|".join(re.escape(k.name) for k in sorted(TERM_KINDS, key=lambda k: -len(k.name)))
    + r")(?:\s*>=\s*(?P<value>[0-9]*\.?[0-9]+))?$"
)


def term_syntax(kind: TermKind) -> str:
    """How a term is written: ``any-ngram``, ``ngram-hits>=K``, ``semantic[>=T]``, ..."""
    if kind.placeholder is None:
        return kind.name
    if kind.default is not None:
        return f"{kind.name}[>={kind.placeholder}]"
    return f"{kind.name}>={kind.placeholder}"


def rule_terms_help() -> str:
    """Every term and operator the parser accepts, for ``--rule`` help and parse errors."""
    ops = " and ".join(f"{sym} ({word})" for sym, word in OPERATORS)
    return f"{' | '.join(term_syntax(k) for k in TERM_KINDS)}, joined with {ops}"


@dataclass(frozen=True)
class Term:
    name: str
    threshold: float

    @property
    def metric(self) -> str:
        return _TERM_METRIC[self.name]

    @property
    def uses_minhash(self) -> bool:
        return self.name == "minhash"

    @property
    def uses_alignment(self) -> bool:
        return self.name.startswith("aligned")

    @property
    def uses_semantic(self) -> bool:
        return self.name in SEMANTIC_TERMS

    @property
    def uses_judge(self) -> bool:
        return self.name == "judge"

    def __str__(self) -> str:
        kind = _KINDS[self.name].threshold
        if kind == "none":
            return self.name
        value = int(self.threshold) if kind == "count" else self.threshold
        return f"{self.name}>={value}"


@dataclass(frozen=True)
class Rule:
    """A disjunction of conjunctions of threshold terms: ``--rule`` parsed.

    ``Rule.parse("any-ngram|aligned-field>=0.8")`` flags a doc when any ``|``-separated clause holds;
    ``&`` joins the terms of a clause. ``str(rule)`` gives the canonical text back.
    """

    clauses: tuple[tuple[Term, ...], ...]

    @classmethod
    def parse(cls, text: str) -> Rule:
        """The rule ``text`` says (``--rule``'s syntax); a term the parser does not know, or a
        threshold out of range, raises ConfigError naming it."""
        from tcqa_data.errors import ConfigError

        if not text or not text.strip():
            raise ConfigError("empty --rule; e.g. 'any-ngram' or 'ngram-fraction>=0.5|minhash>=0.8'")
        clauses = []
        for clause_text in text.split(OR):
            terms = []
            for term_text in clause_text.split(AND):
                t = term_text.strip().lower()
                m = _TERM_RE.match(t)
                kind_of = _KINDS[m["name"]] if m else None
                if not m or (kind_of.placeholder is None and m["value"] is not None) or (
                        kind_of.placeholder is not None and m["value"] is None and kind_of.default is None):
                    raise ConfigError(
                        f"cannot parse rule term {term_text.strip()!r} in {text!r}; terms are "
                        f"{rule_terms_help()}")
                name = m["name"]
                kind = _KINDS[name].threshold
                value = (1.0 if kind == "none" else float(m["value"]) if m["value"] is not None
                         else float(_KINDS[name].default))
                if kind == "share" and not 0.0 <= value <= 1.0:
                    raise ConfigError(f"rule term {t!r}: threshold must be in [0, 1]")
                if kind == "count" and (value != int(value) or value < 1):
                    raise ConfigError(f"rule term {t!r}: threshold must be a positive integer")
                terms.append(Term(name, value))
            clauses.append(tuple(terms))
        return cls(tuple(clauses))

    def __str__(self) -> str:
        return OR.join(AND.join(str(t) for t in c) for c in self.clauses)

    @property
    def terms(self) -> list[Term]:
        return [t for c in self.clauses for t in c]

    @property
    def uses_minhash(self) -> bool:
        return any(t.uses_minhash for t in self.terms)

    @property
    def uses_alignment(self) -> bool:
        return any(t.uses_alignment for t in self.terms)

    @property
    def uses_semantic(self) -> bool:
        return any(t.uses_semantic for t in self.terms)

    @property
    def semantic_thresholds(self) -> list[float]:
        """The thresholds of the rule's ``semantic>=T`` terms (the embedding model's floor is the
        least; purify takes every window reaching it)."""
        return [t.threshold for t in self.terms if t.name == "semantic"]

    @property
    def uses_judge(self) -> bool:
        return any(t.uses_judge for t in self.terms)

    @property
    def uses_ngrams(self) -> bool:
        return any(not t.uses_minhash and not t.uses_alignment and not t.uses_semantic for t in self.terms)

    def evaluate(self, scores: dict[str, np.ndarray]) -> tuple[np.ndarray, list[str]]:
        """Per doc: whether the rule fires, and which clauses fired (text, '|'-joined)."""
        k = len(next(iter(scores.values())))
        dirty = np.zeros(k, dtype=bool)
        fired: list[list[str]] = [[] for _ in range(k)]
        for clause in self.clauses:
            ok = np.ones(k, dtype=bool)
            for term in clause:
                ok &= metric_values(scores, term.metric) >= term.threshold
            dirty |= ok
            label = "&".join(str(t) for t in clause)
            for i in np.flatnonzero(ok):
                fired[i].append(label)
        return dirty, ["|".join(f) for f in fired]


    def decided_without(self, scores: dict[str, Sequence], metric: str) -> np.ndarray:
        """Per doc, whether the rule's verdict is the same whatever its ``metric`` is (no value, or
        past every threshold): the docs that need no ``metric``. ``scores``: the rule's other metrics."""
        k = len(next(iter(scores.values())))
        past = self.evaluate({**scores, metric: np.full(k, np.inf)})[0]
        none = self.evaluate({**scores, metric: np.full(k, np.nan)})[0]
        return past == none


def metric_values(scores: dict[str, Sequence], metric: str) -> np.ndarray:
    """Per doc, the value of ``metric`` a rule term compares with its threshold: NaN where no term
    on it can fire (no value: a null column entry, e.g. no semantic candidate; an n-gram metric on
    a doc too short to test). A precision / recall curve over thresholds reads the same values."""
    raw = scores[metric]
    values = (raw.astype(np.float64) if isinstance(raw, np.ndarray) and raw.dtype != object
              else np.array([np.nan if v is None else v for v in raw], dtype=np.float64))
    if metric.startswith("ngram") or metric == "longest_match":
        values[~np.asarray(scores["testable"], dtype=bool)] = np.nan
    return values


def doc_status(dirty: np.ndarray, testable: np.ndarray, rule: Rule,
               minhash_windows: Sequence[int] | None = None,
               aligned_tested: Sequence[bool] | None = None) -> list[str]:
    """'dirty', 'clean' or 'untestable'.

    A doc is 'untestable' when the rule did not fire, the query is shorter than n words, and no
    MinHash term of the rule could test it instead (no such term, or no query window long enough
    to query), and no alignment term either (the query is shorter than the alignment's minimum
    match), and no semantic term (it tests every doc with text). Untestable docs stay in the clean
    split (nothing shows they were seen) but are
    counted and listed separately in every report.
    """
    out = []
    for i, (d, t) in enumerate(zip(dirty, testable, strict=True)):
        mh_tested = rule.uses_minhash and (minhash_windows is None or minhash_windows[i] > 0)
        al_tested = rule.uses_alignment and aligned_tested is not None and bool(aligned_tested[i])
        if d:
            out.append("dirty")
        elif not t and not mh_tested and not al_tested and not rule.uses_semantic:
            out.append("untestable")
        else:
            out.append("clean")
    return out
