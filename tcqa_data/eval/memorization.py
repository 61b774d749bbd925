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

from tcqa_data.eval.packing import concat, fill_rows, trie

KS = (10, 20, 50)
SCORE_NAMES = ("loss", "zlib", *(f"min_k_{k}" for k in KS), *(f"min_k_pp_{k}" for k in KS))
# Positions whose full next-token distributions are held at once ([N, vocab] float32).
STATS_CHUNK = 256
# Tokens of one forward call: its logits are [tokens, vocab] (about 0.2 GB per 1,000 tokens at a
# 49k vocabulary in float32), so calls are bounded by tokens as well as by the engine's rows.
MAX_CALL_TOKENS = {"cpu": 2048, "cuda": 16384}


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


def encode_for_scoring(tokenizer, texts: Sequence[str], max_length: int) -> list[list[int]]:
    """Prefix token + the text's tokens (no special tokens), cut to ``max_length``."""
    prefix = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    enc = tokenizer(list(texts), add_special_tokens=False)["input_ids"] if texts else []
    head = [] if prefix is None else [int(prefix)]
    return [(head + list(ids))[:max_length] for ids in enc]


def token_stats(engine, texts: Sequence[str]) -> list[TokenStats]:
    """:class:`TokenStats` of each text, from packed forward passes of ``engine`` (an
    ``eval.scoring.Engine``): short texts share a row side by side, each seeing only itself.

    Equal texts are computed once. A text with no token of its own gives empty arrays.
    """
    distinct = sorted(set(texts))
    seqs = encode_for_scoring(engine.tokenizer, distinct, engine.lm.max_length)
    result: dict[int, TokenStats] = {}
    empty = np.zeros(0, dtype=np.float64)
    scored = [i for i, s in enumerate(seqs) if len(s) >= 2]
    for i, s in enumerate(seqs):
        if len(s) < 2:
            result[i] = TokenStats(empty, empty, empty)

    def run(batch: Sequence[list[int]]) -> None:
        rows = [concat([trie([seqs[scored[j]]]) for j in row]) for row in batch]
        want = [[m[k] for m in row.maps for k in range(len(m) - 1)] for row in rows]
        with torch.inference_mode():
            logits, where, _ = engine.forward(rows, want)
            idx, targets = [], []
            for b, (row, members) in enumerate(zip(rows, batch, strict=True)):
                for m, j in zip(row.maps, members, strict=True):
                    s = seqs[scored[j]]
                    idx += [where[(b, m[k])] for k in range(len(m) - 1)]
                    targets += s[1:]
            ix = torch.tensor(idx, device=logits.device)
            lp, mu, sigma = distribution_stats(logits[ix], torch.tensor(targets, device=logits.device))
        lp, mu, sigma = (t.double().cpu().numpy() for t in (lp, mu, sigma))
        at = 0
        for row, members in zip(rows, batch, strict=True):
            for m, j in zip(row.maps, members, strict=True):
                n = len(m) - 1
                result[scored[j]] = TokenStats(lp[at:at + n], mu[at:at + n], sigma[at:at + n])
                at += n

    lengths = [len(seqs[i]) for i in scored]
    rows = [row for batch in fill_rows(lengths, engine.batch_size) for row in batch]
    budget = MAX_CALL_TOKENS.get(engine.device.type, MAX_CALL_TOKENS["cpu"])
    calls: list[list[list[int]]] = []
    tokens = 0
    for row in rows:
        n = sum(lengths[j] for j in row)
        if not calls or len(calls[-1]) >= engine.batch_size or tokens + n > budget:
            calls.append([])
            tokens = 0
        calls[-1].append(row)
        tokens += n
    for call in calls:
        run(call)
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
