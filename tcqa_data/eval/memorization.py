"""Model-side contamination evidence: reference-free membership scores of a text under a causal LM.

Corpus evidence says what a model *could* have seen; these scores ask the model whether a text
looks seen. Each needs only the log-probabilities of the text's own tokens (and, for Min-K%++,
the mean and spread of the model's next-token distribution at each position), so one forward
pass over the text gives all of them.

Every score is signed so that **higher means more likely seen in training**:

- ``loss``: the mean token log-probability, i.e. the negated mean negative log-likelihood
  (Carlini et al. 2021; negated as MIMIR does).
- ``zlib``: that mean log-probability divided by the length in bytes of the zlib-compressed
  UTF-8 text (Carlini et al. 2021, "zlib entropy"; the form MIMIR and the Min-K%++ code use).
- ``min_k_K``: Min-K% Prob (Shi et al., ICLR 2024): the mean of the K% lowest token
  log-probabilities.
- ``min_k_pp_K``: Min-K%++ (Zhang et al., ICLR 2025): each token's log-probability standardized
  by the mean ``mu_t = sum_v p(v) log p(v)`` and standard deviation
  ``sigma_t = sqrt(sum_v p(v) log(p(v))^2 - mu_t^2)`` of the log-probability under the model's own
  next-token distribution at that position, then the mean of the K% lowest.

K is 10, 20 and 50 (:data:`KS`). The K% lowest of ``n`` scored tokens are ``max(1, int(n * K /
100))`` tokens: the reference code takes ``int(n * K / 100)``, which is 0 (an empty mean) for
texts under 10 tokens; we keep at least one token instead.

Which tokens are scored: the text is encoded without special tokens and preceded by lm-eval's
prefix token (BOS, else EOS, as in ``loglikelihood_rolling``), so every token of the text has a
prediction, the first included. A text longer than the model's context keeps its first tokens.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from tcqa_data.eval.packing import common_prefix_len, concat, fill_rows, trie

KS = (10, 20, 50)
# suffix of a TEXT name whose scores are of its standalone context beside the in-prompt one
STANDALONE_SUFFIX = "@standalone"
# evaluate's --memorization-context default (eval.runner.CONTEXT_DEFINITIONS says what each does)
DEFAULT_CONTEXT = "fields"
# the headline combines this score of the query in each context that ran (see add_headline)
HEADLINE_TEXT, HEADLINE_SCORE = "query", "min_k_pp_20"
SCORE_NAMES = ("loss", "zlib", *(f"min_k_{k}" for k in KS), *(f"min_k_pp_{k}" for k in KS))
# Positions whose full next-token distributions are held at once ([N, vocab] float32).
STATS_CHUNK = 256
# Tokens of one forward call: its logits are [tokens, vocab] (about 0.2 GB per 1,000 tokens at a
# 49k vocabulary in float32), so calls are bounded by tokens as well as by the engine's rows.
MAX_CALL_TOKENS = {"cpu": 2048, "cuda": 16384}
# A prefix tree of texts stops growing at this many tokens (attention is dense per row).
MAX_TRIE_TOKENS = 1024


@dataclass
class TokenStats:
    """Per scored token of one text: its log-probability, and the mean and standard deviation of
    the log-probability under the model's next-token distribution at that position."""

    logprob: np.ndarray
    mu: np.ndarray
    sigma: np.ndarray


def distribution_stats(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(log p(target), mu, sigma) per row of ``logits`` [N, V], in float32, a chunk of rows at a time."""
    out: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    for s in range(0, logits.shape[0], STATS_CHUNK):
        logp = torch.log_softmax(logits[s:s + STATS_CHUNK].float(), dim=-1)
        p = logp.exp()
        mu = (p * logp).sum(-1)
        # p * logp**2 with p = 0 and logp = -inf would be nan; such terms are 0 in the sum
        second = torch.nan_to_num(p * logp.square(), nan=0.0).sum(-1)
        sigma = (second - mu.square()).clamp_min(0).sqrt()
        out.append((logp.gather(-1, targets[s:s + STATS_CHUNK, None]).squeeze(-1), mu, sigma))
    return tuple(torch.cat(parts) for parts in zip(*out, strict=True))  # type: ignore[return-value]


def head_stats(head_at, targets: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """:func:`distribution_stats` of the logits ``head_at(ix)`` gives for rows ``ix`` of 0..N-1 (N =
    len(targets)), computed :data:`STATS_CHUNK` rows at a time so that no [N, vocab] tensor is held."""
    parts = []
    for s in range(0, len(targets), STATS_CHUNK):
        ix = torch.arange(s, min(s + STATS_CHUNK, len(targets)), device=targets.device)
        parts.append(distribution_stats(head_at(ix), targets[ix]))
    return tuple(torch.cat(p) for p in zip(*parts, strict=True))


def encode_for_scoring(tokenizer, texts: Sequence[str], max_length: int) -> list[list[int]]:
    """Prefix token + the text's tokens (no special tokens), cut to ``max_length``."""
    prefix = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    enc = tokenizer(list(texts), add_special_tokens=False)["input_ids"] if texts else []
    head = [] if prefix is None else [int(prefix)]
    return [(head + list(ids))[:max_length] for ids in enc]


def prefix_units(seqs: Sequence[Sequence[int]], max_tokens: int = MAX_TRIE_TOKENS) -> list[list[int]]:
    """Indices of ``seqs`` (sorted by tokens) in runs that share more than the prefix token, each run
    one prefix tree of at most ``max_tokens`` tokens: a text that begins another (SQuAD's passage
    and its prompt; an MC-TACO question and its query) is computed inside it, for nothing."""
    units: list[list[int]] = []
    size = 0
    for i, s in enumerate(seqs):
        prev = seqs[units[-1][-1]] if units else ()
        k = common_prefix_len([prev, s]) if prev else 0
        if units and k >= 2 and size + len(s) - k <= max_tokens:
            units[-1].append(i)
            size += len(s) - k
        else:
            units.append([i])
            size = len(s)
    return units


def token_stats(engine, texts: Sequence[str]) -> list[TokenStats]:
    """:class:`TokenStats` of each text, from packed forward passes of ``engine`` (an
    ``eval.scoring.Engine``): texts sharing a token prefix form one prefix tree (each token computed
    once, seeing exactly its own prefix), and short trees share a row side by side, each seeing
    only itself.

    Equal texts are computed once. A text with no token of its own gives empty arrays.
    """
    distinct = sorted(set(texts))
    seqs = encode_for_scoring(engine.tokenizer, distinct, engine.lm.max_length)
    result: dict[int, TokenStats] = {}
    empty = np.zeros(0, dtype=np.float64)
    # sorted by tokens, so texts that begin one another lie side by side
    scored = sorted((i for i, s in enumerate(seqs) if len(s) >= 2), key=lambda i: seqs[i])
    for i, s in enumerate(seqs):
        if len(s) < 2:
            result[i] = TokenStats(empty, empty, empty)
    units = prefix_units([seqs[i] for i in scored])
    tries = [trie([seqs[scored[j]] for j in u]) for u in units]

    def run(batch: Sequence[list[int]]) -> None:
        rows = [concat([tries[u] for u in row]) for row in batch]
        members = [[scored[j] for u in row for j in units[u]] for row in batch]
        # a position shared by several texts is computed once (its next-token stats per text below)
        want = [sorted({m[k] for m in row.maps for k in range(len(m) - 1)}) for row in rows]
        with torch.inference_mode():
            logits, where, _, _ = engine.forward(rows, want)
            idx, targets = [], []
            for b, (row, texts_b) in enumerate(zip(rows, members, strict=True)):
                for m, i in zip(row.maps, texts_b, strict=True):
                    idx += [where[(b, m[k])] for k in range(len(m) - 1)]
                    targets += seqs[i][1:]
            ix = torch.tensor(idx, device=logits.device)
            lp, mu, sigma = distribution_stats(logits[ix], torch.tensor(targets, device=logits.device))
        lp, mu, sigma = (t.double().cpu().numpy() for t in (lp, mu, sigma))
        at = 0
        for row, texts_b in zip(rows, members, strict=True):
            for m, i in zip(row.maps, texts_b, strict=True):
                n = len(m) - 1
                result[i] = TokenStats(lp[at:at + n], mu[at:at + n], sigma[at:at + n])
                at += n

    lengths = [len(t.tokens) for t in tries]
    rows = [row for batch in fill_rows(lengths, engine.batch_size) for row in batch]
    budget = MAX_CALL_TOKENS.get(engine.device.type, MAX_CALL_TOKENS["cpu"])

    def run_rows(batch: Sequence[list[int]]) -> None:
        # the engine's batch (rows, halved on an out-of-memory error) in calls of at most `budget` tokens
        call: list[list[int]] = []
        tokens = 0
        for row in batch:
            n = sum(lengths[j] for j in row)
            if call and tokens + n > budget:
                run(call)
                call, tokens = [], 0
            call.append(row)
            tokens += n
        if call:
            run(call)

    def describe(row: list[int]) -> str:
        text = distinct[scored[units[row[0]][0]]]
        return (f"the memorization text {text[:60]!r}{'...' if len(text) > 60 else ''} "
                f"({sum(lengths[j] for j in row)} tokens in its row)")

    engine.run_batches(rows, run_rows, describe=describe)
    by_text = {t: result[i] for i, t in enumerate(distinct)}
    return [by_text[t] for t in texts]


def _lowest_mean(values: np.ndarray, k: int) -> float:
    n = max(1, int(len(values) * k / 100))
    return float(np.sort(values)[:n].mean())


def memorization_scores(stats: TokenStats, text: str) -> dict[str, float | None]:
    """Every score in :data:`SCORE_NAMES` for one text (None for all when it has no scored token)."""
    if len(stats.logprob) == 0:
        return dict.fromkeys(SCORE_NAMES)
    mean_lp = float(stats.logprob.mean())
    out: dict[str, float | None] = {
        "loss": mean_lp,
        "zlib": mean_lp / len(zlib.compress(text.encode("utf-8"))),
    }
    # a position whose next-token distribution is a point mass has sigma 0: its standardized
    # score is undefined, and the reference code would divide by zero; such tokens are left out
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (stats.logprob - stats.mu) / stats.sigma
    z = z[np.isfinite(z)]
    for k in KS:
        out[f"min_k_{k}"] = _lowest_mean(stats.logprob, k)
        out[f"min_k_pp_{k}"] = _lowest_mean(z, k) if len(z) else None
    return {name: (None if v is None or not math.isfinite(v) else v) for name, v in out.items()}


def doc_memorization(engine, texts_per_doc: Sequence[dict[str, str]]
                     ) -> list[dict[str, dict[str, float | None]]]:
    """Per doc ``{TEXT: {SCORE: value}}`` for its named texts (``TaskSpec.memorization_texts``); each
    distinct text is run through the model once (MC-TACO's candidates of a question share all of them)."""
    distinct = sorted({t for texts in texts_per_doc for t in texts.values()})
    scores = {t: memorization_scores(s, t) for t, s in zip(distinct, token_stats(engine, distinct),
                                                                strict=True)}
    return [{name: scores[t] for name, t in texts.items()} for texts in texts_per_doc]


def rank_normalise(values: np.ndarray) -> np.ndarray:
    """Each finite value's average rank among the finite ones, divided by their number (in (0, 1]);
    NaN stays NaN."""
    from scipy.stats import rankdata

    out = np.full(len(values), np.nan)
    ok = np.isfinite(values)
    if ok.any():
        out[ok] = rankdata(values[ok], method="average") / ok.sum()
    return out


def add_headline(per_doc: Sequence[dict], also: Sequence[str] = ()) -> str | None:
    """Sets each doc's ``memorization["headline"] = {"score", "name"}`` and returns the name (None
    when no doc has a component).

    Components: Min-K%++ (k=20%) of ``query`` in the prompt, of ``query@standalone`` where it ran, and
    of the texts ``also`` names (the query's fields alone, ``FIELD@standalone``: MC-TACO's question,
    the standalone query's own first tokens, and its sentence, which a source passage holds). Each is
    turned into a rank p-value among the docs of the pass (``1 - rank/n + 1/n``: the share of docs
    scoring at least as high), and they are combined by Fisher's method (the sum of ``-log p``); the
    headline is that sum's rank-normalised value, in (0, 1], higher = more likely seen.

    Why: which component shows an exposure depends on the text the model saw (the task's prompts show
    in the prompt, queries in query order in the question alone, a source passage in the sentence),
    and a user does not know which; the raw scores are on different scales (different conditioning,
    different token sets), so they are compared by rank. Fisher's sum lets one strong component flag a
    doc, as a max of ranks does, but a component that carries nothing for this exposure adds noise of
    mean 1 to every doc instead of lifting the unseen docs' max (measured on tiny models fine-tuned
    three ways: docs/concepts/memorization.md). The components stay in ``memorization`` under their
    names; a doc missing one is combined over the others.
    """
    components = [c for c in dict.fromkeys((HEADLINE_TEXT, HEADLINE_TEXT + STANDALONE_SUFFIX, *also))
                  if any(((o.get("memorization") or {}).get(c) or {}).get(HEADLINE_SCORE) is not None
                         for o in per_doc)]
    if not components:
        return None
    evidence = np.zeros(len(per_doc))
    seen = np.zeros(len(per_doc), dtype=bool)
    for c in components:
        raw = [((o.get("memorization") or {}).get(c) or {}).get(HEADLINE_SCORE) for o in per_doc]
        ranks = rank_normalise(np.array([np.nan if v is None else float(v) for v in raw]))
        ok = np.isfinite(ranks)
        n = int(ok.sum())
        evidence[ok] -= np.log(1.0 - ranks[ok] + 1.0 / n)
        seen |= ok
    head = rank_normalise(np.where(seen, evidence, np.nan))
    name = f"Fisher rank combination of {HEADLINE_SCORE} over {', '.join(components)}"
    for o, v in zip(per_doc, head, strict=True):
        o.setdefault("memorization", {})["headline"] = {"score": None if np.isnan(v) else float(v),
                                                       "name": name}
    return name
