"""Scoring engines: continuation loglikelihoods and greedy generation, computed the way
lm-evaluation-harness 0.4's HF model computes them, with less work.

Exactness: requests are tokenized exactly as lm-eval tokenizes them (``encode_pair``,
``tok_encode``), truncated the same way, and scored from the same logits. Speed comes from doing
less, never from changing what is computed:

* Sequences that share a token prefix (the candidates of one MC-TACO question; SQuAD questions
  on the same passage) are *packed* into one row: the prefix once, then each sequence's own
  suffix, with a tree attention mask (a suffix sees the prefix and itself) and the original
  position ids. Each token therefore sees exactly the tokens it sees in its own sequence.
  Loglikelihood inputs go further: all distinct inputs are sorted and runs of them sharing a
  prefix become one prefix tree (an MC-TACO sentence, its questions, their candidates), every
  distinct prefix computed once; the mask lets a token see exactly its ancestors. Shorter trees
  share a row side by side (block-diagonal) instead of padding it out.
* Identical model inputs are computed once: the " no"/" yes" requests of one MC-TACO candidate
  are one input whose last-position logits score both choices (as lm-eval's one-token
  continuation cache does), decided per request from the token ids, so it holds only when the
  encodings really coincide.
* Only the logits that are scored are computed: the LM head runs on the gathered hidden states
  of the scored positions (``logits_to_keep`` for models whose forward does more after the head).
* Generation prefills packed rows, gathers each row's KV cache out of the packed cache, and
  decodes greedily with a per-row stop: a row leaves the batch as soon as its stop string
  appears, so the batch shrinks instead of waiting for its slowest row.

A model whose attention ignores 4D masks would silently break packing, so ``check_packing`` runs
once per model and turns packing off when packed and plain logits disagree.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from tcqa_data.errors import ConfigError, TcqaError
from tcqa_data.eval.memorization import TokenStats, head_stats
from tcqa_data.eval.models import LoadedModel
from tcqa_data.eval.packing import (
    Packed,
    chunk_members,
    common_prefix_len,
    concat,
    fill_rows,
    pack,
    subtree_ends,
    trie,
)

# A packed row stops growing at this many tokens (the mask is T x T per row).
MAX_PACKED_TOKENS = 2048
# A prefix tree of scored inputs stops growing at this many tokens (attention is dense per row).
MAX_TRIE_TOKENS = 384
# Generation contexts share a KV prefix only when it is at least this long (else packing buys little).
MIN_SHARED_PREFIX = 16
# Defaults for --batch-size auto: CUDA starts here and halves on OOM; CPU uses the fixed value.
AUTO_START_BATCH_CUDA = 512
DEFAULT_BATCH_CPU = 16

Progress = Callable[[int], None]

# check_packing's verdict per model object and (dtype, device)
_PACKING_OK: weakref.WeakKeyDictionary[Any, dict[tuple[str, str], bool]] = weakref.WeakKeyDictionary()


# ---- tokenization, as lm-eval does it --------------------------------------------------------
def _prefix_text(tokenizer: Any) -> str | None:
    # lm-eval's prefix token: BOS if the tokenizer has one, else EOS.
    tid = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    return None if tid is None else tokenizer.decode(tid)


def tok_encode_batch(tokenizer: Any, texts: Sequence[str], for_generation: bool = False) -> list[list[int]]:
    """``HFLM.tok_encode`` for many strings: the tokenizer's default special tokens (so BOS only
    where the tokenizer itself adds it), none for a string that already starts with the BOS text.

    lm-eval looks for that text differently on its two paths: the loglikelihood path for the
    prefix token (BOS, else EOS), generation (``tok_batch_encode``) for ``bos_token`` only.
    """
    prefix = tokenizer.bos_token if for_generation else _prefix_text(tokenizer)
    out: list[list[int] | None] = [None] * len(texts)
    plain = [i for i, t in enumerate(texts) if not (prefix and t.startswith(prefix))]
    marked = [i for i, t in enumerate(texts) if prefix and t.startswith(prefix)]
    for idxs, kwargs in ((plain, {}), (marked, {"add_special_tokens": False})):
        if idxs:
            enc = tokenizer([texts[i] for i in idxs], **kwargs)["input_ids"]
            for i, ids in zip(idxs, enc, strict=True):
                out[i] = list(ids)
    return out  # type: ignore[return-value]


def encode_pairs(tokenizer: Any, pairs: Sequence[tuple[str, str]]) -> list[tuple[list[int], list[int]]]:
    """lm-eval's ``_encode_pair`` for a causal model, batched: trailing context whitespace moves
    into the continuation; the whole string is encoded and split at the encoded context's length."""
    ctxs: list[str] = []
    wholes: list[str] = []
    for context, continuation in pairs:
        if context == "":
            raise ValueError("empty contexts are not supported")
        n_spaces = len(context) - len(context.rstrip())
        if n_spaces > 0:
            continuation = context[-n_spaces:] + continuation
            context = context[:-n_spaces]
        ctxs.append(context)
        wholes.append(context + continuation)
    # Contexts repeat across choices: encode each distinct string once.
    distinct = sorted(set(ctxs) | set(wholes))
    enc = dict(zip(distinct, tok_encode_batch(tokenizer, distinct), strict=True))
    out = []
    for c, w in zip(ctxs, wholes, strict=True):
        ctx_enc = enc[c]
        out.append((ctx_enc, enc[w][len(ctx_enc):]))
    return out


class Engine:
    """A loaded model plus the scoring state (packing support, effective batch size)."""

    def __init__(self, lm: LoadedModel, batch_size: int | str = "auto", packing: bool | None = None) -> None:
        self.lm = lm
        self.model = lm.model
        self.tokenizer = lm.tokenizer
        self.device = lm.device
        self.auto = batch_size == "auto"
        if self.auto:
            self.batch_size = AUTO_START_BATCH_CUDA if lm.device.type == "cuda" else DEFAULT_BATCH_CPU
        else:
            self.batch_size = int(batch_size)
            if self.batch_size < 1:
                raise ValueError("batch size must be >= 1")
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        # transformers renamed `past_key_values` to `cache` (5.x); speak whichever this one takes
        params = inspect.signature(self.model.forward).parameters
        self.cache_kw = "cache" if "cache" in params else "past_key_values"
        # Scored positions differ per row, so "logits for the last k positions" wastes the LM head
        # on most of a packed row. Run the body, gather the wanted hidden states, apply the head to
        # those only -- when the head is all the model does after the body (no logit soft-capping
        # or scaling, which some architectures apply in their forward).
        cfg = self.model.config
        self.base = getattr(self.model, getattr(self.model, "base_model_prefix", ""), None)
        get_head = getattr(self.model, "get_output_embeddings", None)
        self.head = get_head() if get_head is not None else None
        post = any(getattr(cfg, a, None) not in (None, 1, 1.0) for a in
                   ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale"))
        self.split_head = (self.base is not None and self.head is not None and not post
                           and type(self.model).__name__.endswith("ForCausalLM"))
        if packing is None:
            # the check depends on the model's architecture, dtype and device only: once per model
            key = (str(lm.dtype), str(lm.device))
            known = _PACKING_OK.setdefault(self.model, {})
            if key not in known:
                known[key] = check_packing(self)
            packing = known[key]
        self.packing = packing

    def call(self, cache: Any = None, **kwargs: Any) -> tuple[torch.Tensor, Any]:
        """One model call; returns (logits, cache)."""
        if cache is not None:
            kwargs[self.cache_kw] = cache
        out = self.model(**kwargs)
        return out.logits, self.output_cache(out)

    def output_cache(self, out: Any) -> Any:
        """The cache a model output carries, read under the name this transformers uses (the old
        name is a deprecated alias in 5.x, and reading it logs a warning)."""
        return getattr(out, self.cache_kw, None)

    # ---- one forward pass over packed rows ----
    def forward(self, rows: Sequence[Packed], want: Sequence[Sequence[int]], use_cache: bool = False,
                extra: Sequence[tuple[int, int]] = ()):
        """Logits at the ``want`` indices of each row: (logits [N, V], (row, index) -> n, cache,
        head_at). ``extra`` (row, index) pairs are positions whose logits are wanted as well
        (memorization statistics): ``head_at(ix)`` gives the logits of ``extra[ix]`` on demand, a
        chunk at a time, computed apart from ``want``'s so that those stay bit for bit the same."""
        B = len(rows)
        T = max(len(r.tokens) for r in rows)
        ids = torch.full((B, T), self.pad_id, dtype=torch.long)
        pos = torch.zeros((B, T), dtype=torch.long)
        seg = torch.full((B, T), -1, dtype=torch.long)
        tree = any(len(r.maps) > 1 for r in rows)
        end = torch.zeros((B, T), dtype=torch.long)  # padding keys: seen by nobody
        for b, r in enumerate(rows):
            n = len(r.tokens)
            ids[b, :n] = torch.tensor(r.tokens)
            pos[b, :n] = torch.tensor(r.positions)
            seg[b, :n] = torch.tensor(r.segments)
            if tree:
                end[b, :n] = torch.tensor(subtree_ends(r))
        # the [B, 1, T, T] mask is built on the model's device: made on the CPU and copied it would
        # cost host memory and a transfer as large as the mask itself per call
        dev = self.device
        seg = seg.to(dev)
        if tree:
            # query q sees key k iff k is q or an ancestor of q: k <= q < end[k] (preorder)
            q = torch.arange(T, device=dev)[None, :, None]
            k = torch.arange(T, device=dev)[None, None, :]
            allowed = (k <= q) & (q < end.to(dev)[:, None, :])
            # a padding query sees only itself, so no softmax row is all -inf
            allowed |= torch.eye(T, dtype=torch.bool, device=dev) & (seg[:, :, None] < 0)
            mask = torch.zeros((B, 1, T, T), dtype=self.lm.dtype, device=dev)
            mask.masked_fill_(~allowed[:, None], torch.finfo(self.lm.dtype).min)
        else:
            mask = (seg >= 0).long()
        pairs = [(b, i) for b, w in enumerate(want) for i in w]
        where = {p: n for n, p in enumerate(pairs)}
        cache = None
        if use_cache:
            from transformers import DynamicCache

            cache = DynamicCache(config=self.model.config)
        kwargs = {"input_ids": ids.to(self.device), "attention_mask": mask.to(self.device),
                  "position_ids": pos.to(self.device), "use_cache": use_cache}
        bi = torch.tensor([p[0] for p in pairs], device=self.device)
        ti = torch.tensor([p[1] for p in pairs], device=self.device)
        ebi = torch.tensor([p[0] for p in extra], dtype=torch.long, device=self.device)
        eti = torch.tensor([p[1] for p in extra], dtype=torch.long, device=self.device)
        head_at: Callable[[torch.Tensor], torch.Tensor] | None = None
        if self.split_head:
            if cache is not None:
                kwargs[self.cache_kw] = cache
            out = self.base(**kwargs)
            logits = self.head(out.last_hidden_state[bi, ti])
            cache = self.output_cache(out) if use_cache else None
            if extra:
                hidden = out.last_hidden_state[ebi, eti]  # [E, d]: the head runs on a chunk when asked

                def head_at(ix: torch.Tensor) -> torch.Tensor:
                    return self.head(hidden[ix])
        else:
            # the model applies its own head (and what follows it) to the kept positions
            cols = sorted({i for w in want for i in w} | {p[1] for p in extra})
            col_of = {i: c for c, i in enumerate(cols)}
            full, cache = self.call(cache, logits_to_keep=torch.tensor(cols, device=self.device), **kwargs)
            logits = full[bi, torch.tensor([col_of[int(t)] for t in ti], device=self.device)]
            if extra:
                ecols = torch.tensor([col_of[p[1]] for p in extra], dtype=torch.long, device=self.device)

                def head_at(ix: torch.Tensor) -> torch.Tensor:
                    return full[ebi[ix], ecols[ix]]
        return logits, where, (cache if use_cache else None), head_at

    def run_batches(self, items: Sequence[Any], fn: Callable[[Sequence[Any]], None],
                    size_of: Callable[[Any], int] = lambda _: 1,
                    describe: Callable[[Any], str] | None = None) -> None:
        """Call ``fn`` on consecutive batches of ``items`` whose ``size_of`` sums to at most the
        batch size. With ``auto``, a batch that fails to allocate device memory (any form of the
        error, see ``is_out_of_memory``) halves the size and is retried; a single item that still
        does not fit fails with ``describe(item)`` (which doc, how many tokens) in the message."""
        i = 0
        while i < len(items):
            j, total = i, 0
            while j < len(items) and (j == i or total + size_of(items[j]) <= self.batch_size):
                total += size_of(items[j])
                j += 1
            try:
                fn(items[i:j])
            except Exception as exc:
                if not is_out_of_memory(exc):
                    raise
                what = describe(items[i]) if describe is not None and j - i == 1 else None
                if not self.auto:
                    raise TcqaError(f"out of device memory at batch size {self.batch_size}"
                                    + (f" on {what}" if what else "") + "; use --batch-size auto or a "
                                    "smaller --batch-size") from exc
                if j - i == 1:  # one unit alone does not fit: a smaller batch cannot help
                    raise TcqaError(f"out of device memory on {what or 'one unit'} alone: it does not fit "
                                    "in one forward pass; use a device with more memory, a smaller model "
                                    "or --device cpu") from exc
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                self.batch_size = max(1, min(self.batch_size, total) // 2)
                continue
            i = j


# Messages of allocation failures that PyTorch raises as a plain RuntimeError (cuBLAS / cuDNN / the
# caching allocator outside torch.cuda.OutOfMemoryError, and the CUDA runtime's own error string).
OOM_MARKERS = ("cuda out of memory", "cuda error: out of memory", "cublas_status_alloc_failed",
               "cudnn_status_alloc_failed", "cudnn_status_not_enough_workspace", "hip out of memory",
               "mps backend out of memory")


def is_out_of_memory(exc: BaseException) -> bool:
    """True for every form of a device allocation failure, not only ``torch.cuda.OutOfMemoryError``."""
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and any(m in str(exc).lower() for m in OOM_MARKERS)


def check_packing(engine: Engine) -> bool:
    """True when packed rows give the same log-probabilities as separate plain sequences."""
    tok = engine.tokenizer
    texts = ["The quick brown fox jumps over the lazy dog.\nQuestion: what jumps?\nAnswer: the fox",
             "The quick brown fox jumps over the lazy dog.\nQuestion: what sleeps?\nAnswer: a dog"]
    seqs = tok_encode_batch(tok, texts)
    if common_prefix_len(seqs) == 0:
        return False
    # a shared-prefix tree and, beside it in the same row, another group (block-diagonal)
    packed = concat([pack(seqs), pack(seqs[:1])])
    seqs = seqs + seqs[:1]
    with torch.inference_mode():
        lp, at_p, _, _ = engine.forward([packed], [sorted({i for m in packed.maps for i in m})])
        lp = F.log_softmax(lp.float(), dim=-1)
        for j, s in enumerate(seqs):
            single = pack([s])
            ls, at_s, _, _ = engine.forward([single], [single.maps[0]])
            ls = F.log_softmax(ls.float(), dim=-1)
            a = lp[[at_p[(0, i)] for i in packed.maps[j]]]
            b = ls[[at_s[(0, i)] for i in single.maps[0]]]
            tol = 1e-3 if engine.lm.dtype == torch.float32 else 0.15
            if not torch.allclose(a, b, atol=tol, rtol=0):
                return False
    return True


# ---- memorization statistics at prompt positions ---------------------------------------------
@dataclass
class _StatsPlan:
    """Positions of one forward call whose logits feed memorization statistics: each distinct
    (row, position, target) once (a prefix shared in a tree is computed once for all its members)."""

    pairs: list[tuple[int, int]]  # (row, index in the row) per statistic
    targets: list[int]  # the token each one predicts
    owners: list[tuple[int, list[int]]]  # (request or doc key, its statistics in stats_at order)


def _stats_plan(items: Sequence[tuple[int, int, Sequence[int], Sequence[int], Sequence[int]]]) -> _StatsPlan:
    """``items``: (key, row, the sequence's row indices, the sequence's tokens, token indices t to
    score); token t is predicted at the row index of token t - 1."""
    index: dict[tuple[int, int, int], int] = {}
    plan = _StatsPlan([], [], [])
    for key, b, row_index, seq, at in items:
        if not at:
            continue
        ids = []
        for t in at:
            trip = (b, row_index[t - 1], seq[t])
            if trip not in index:
                index[trip] = len(plan.pairs)
                plan.pairs.append(trip[:2])
                plan.targets.append(trip[2])
            ids.append(index[trip])
        plan.owners.append((key, ids))
    return plan


def _fill_stats(out: dict[int, TokenStats], plan: _StatsPlan, head_at: Callable | None,
                device: torch.device) -> None:
    if not plan.owners or head_at is None:
        return
    got = head_stats(head_at, torch.tensor(plan.targets, dtype=torch.long, device=device))
    lp, mu, sigma = (t.double().cpu().numpy() for t in got)
    for key, ids in plan.owners:
        out[key] = TokenStats(lp[ids], mu[ids], sigma[ids])


# ---- loglikelihood -------------------------------------------------------------------------
@dataclass
class LLRequest:
    context_enc: list[int]
    continuation_enc: list[int]
    share: int  # a grouping hint (an MC-TACO question); with packing on, any common prefix is shared
    doc: str | None = None  # which doc asks (named in an out-of-memory message)
    # token indices t of the model input whose prediction (from position t - 1) is wanted with its
    # next-token statistics: the memorization texts located in the prompt (eval.in_prompt)
    stats_at: tuple[int, ...] = ()


def loglikelihoods(engine: Engine, requests: Sequence[LLRequest], progress: Progress | None = None,
                   stats: dict[int, TokenStats] | None = None) -> list[tuple[float, bool]]:
    """(sum of continuation log-probs, continuation is the greedy choice) per request.

    With ``stats`` (a dict to fill), ``stats[k]`` = the :class:`TokenStats` of request k's
    ``stats_at`` tokens, read from the same forward pass (its positions' logits are computed apart
    from the scored ones, which therefore stay bit for bit as without).
    """
    max_len = engine.lm.max_length
    # model input and scored positions exactly as lm-eval's _loglikelihood_tokens builds them
    inps: list[tuple[int, ...]] = []
    for r in requests:
        if not r.continuation_enc:
            raise ValueError("empty continuation")
        inps.append(tuple((r.context_enc + r.continuation_enc)[-(max_len + 1):][:-1]))
    by_share: dict[int, dict[tuple[int, ...], list[int]]] = {}
    for k, (r, inp) in enumerate(zip(requests, inps, strict=True)):
        by_share.setdefault(r.share, {}).setdefault(inp, []).append(k)
    # units: (packed row, [(member index, request ids)])
    units: list[tuple[Packed, list[list[int]]]] = []
    if engine.packing:
        # Every distinct input once, sorted, so inputs with a common prefix lie side by side; runs
        # of them become prefix trees (an MC-TACO sentence with its questions, each question with
        # its candidates) where each token is computed once and sees exactly its own prefix.
        # Identical inputs are one computation whatever their share key.
        by_inp: dict[tuple[int, ...], list[int]] = {}
        for k, inp in enumerate(inps):
            by_inp.setdefault(inp, []).append(k)
        uniq = sorted(by_inp)
        cur: list[tuple[int, ...]] = []
        size = 0
        for u in uniq + [()]:
            k = common_prefix_len([cur[-1], u]) if cur and u else 0
            if cur and (k == 0 or size + len(u) - k > MAX_TRIE_TOKENS):
                units.append((trie(cur), [by_inp[c] for c in cur]))
                cur, size, k = [], 0, 0
            if u:
                cur.append(u)
                size += len(u) - k
        by_share = {}
    for groups in by_share.values():
        uniq = list(groups)
        seqs = [list(u) for u in uniq]
        if engine.packing:
            chunks = chunk_members(seqs, MAX_PACKED_TOKENS)
        else:
            chunks = [[i] for i in range(len(seqs))]
        for chunk in chunks:
            units.append((pack([seqs[i] for i in chunk]), [groups[uniq[i]] for i in chunk]))
    # longest first (as lm-eval): similar lengths share a batch, an OOM shows up at once
    units.sort(key=lambda u: (-len(u[0].tokens), u[0].tokens))
    if engine.packing and len(units) > 1:
        # shorter groups share a row (block-diagonal mask) instead of padding it out
        rows = [r for batch in fill_rows([len(u[0].tokens) for u in units], engine.batch_size)
                for r in batch]
        units = [(concat([units[i][0] for i in r]), [ks for i in r for ks in units[i][1]])
                 for r in rows]
    results: list[tuple[float, bool] | None] = [None] * len(requests)

    def run(batch: Sequence[tuple[Packed, list[list[int]]]]) -> None:
        want = []
        for row, members in batch:
            w: set[int] = set()
            for j, ks in enumerate(members):
                m = row.maps[j]
                for k in ks:
                    n = len(requests[k].continuation_enc)
                    w.update(m[len(m) - n:])
            want.append(sorted(w))
        plan = _stats_plan([] if stats is None else
                           [(k, b, row.maps[j], inps[k], requests[k].stats_at)
                            for b, (row, members) in enumerate(batch)
                            for j, ks in enumerate(members) for k in ks])
        logits, at, _, head_at = engine.forward([u[0] for u in batch], want, extra=plan.pairs)
        if stats is not None:
            _fill_stats(stats, plan, head_at, engine.device)
        # lm-eval takes log_softmax in the logits' own dtype (softmax_dtype unset)
        logp = F.log_softmax(logits, dim=-1)
        done = 0
        for b, (row, members) in enumerate(batch):
            for j, ks in enumerate(members):
                m = row.maps[j]
                for k in ks:
                    cont = requests[k].continuation_enc
                    lp = logp[[at[(b, i)] for i in m[len(m) - len(cont):]]]  # [n, V]
                    target = torch.tensor(cont, device=lp.device)
                    greedy = bool((lp.argmax(dim=-1) == target).all())
                    results[k] = (float(lp.gather(1, target[:, None]).squeeze(1).sum()), greedy)
                    done += 1
        if progress:
            progress(done)

    def describe(unit: tuple[Packed, list[list[int]]]) -> str:
        docs = sorted({requests[k].doc or f"request {k}" for ks in unit[1] for k in ks})
        more = " ..." if len(docs) > 5 else ""
        return f"{', '.join(docs[:5])}{more} ({len(unit[0].tokens)} tokens in its row)"

    with torch.inference_mode():
        engine.run_batches(units, run, describe=describe)
    return results  # type: ignore[return-value]


# ---- greedy generation ---------------------------------------------------------------------
def _share_groups(ctxs: Sequence[Sequence[int]], max_members: int) -> list[list[int]]:
    """Group contexts with a long common token prefix (sorted order puts them side by side)."""
    order = sorted(range(len(ctxs)), key=lambda i: ctxs[i])
    groups: list[list[int]] = []
    cur: list[int] = []
    cur_lcp = 0
    for i in order:
        if cur:
            a, b = ctxs[cur[0]], ctxs[i]
            n = min(cur_lcp, len(b))
            k = 0
            while k < n and a[k] == b[k]:
                k += 1
            if k >= MIN_SHARED_PREFIX and len(cur) < max_members:
                cur.append(i)
                cur_lcp = k
                continue
            groups.append(cur)
        cur, cur_lcp = [i], len(ctxs[i])
    if cur:
        groups.append(cur)
    return groups


def finalize_generation(tokenizer: Any, tokens: Sequence[int], until: Sequence[str]) -> str:
    """lm-eval's post-processing: decode without special tokens, cut at each stop string in turn."""
    text = tokenizer.decode(list(tokens), skip_special_tokens=True)
    for term in until:
        if term:
            text = text.split(term)[0]
    return text


def generate_until(engine: Engine, contexts: Sequence[Sequence[int]], until: Sequence[str],
                   max_gen_toks: int, progress: Progress | None = None,
                   names: Sequence[str] | None = None, stats_at: Sequence[Sequence[int]] | None = None,
                   stats: dict[int, TokenStats] | None = None) -> list[str]:
    """Greedy continuations of tokenized ``contexts``, cut at the first stop string.

    ``until`` gets the EOS text appended as lm-eval does. A row stops once a stop string appears
    in its decoded text (text before it can no longer change) or after ``max_gen_toks`` tokens.
    With ``stats`` (a dict to fill), ``stats[i]`` = the :class:`TokenStats` of context i's tokens
    ``stats_at[i]`` (indices into the context as given), read from the prefill; a context cut to
    fit the model gets none.
    """
    tok = engine.tokenizer
    until = list(until)
    eos_text = tok.decode(engine.tokenizer.eos_token_id, skip_special_tokens=False) \
        if tok.eos_token_id is not None else None
    if eos_text is not None and eos_text not in until:
        until.append(eos_text)
    stop_strings = [s for s in until if s]
    eos_ids = set(engine.lm.eos_token_ids)
    max_ctx = engine.lm.max_length - max_gen_toks
    if max_ctx <= 0:
        raise ConfigError(f"max_gen_toks {max_gen_toks} leaves no room in the model's context length "
                          f"{engine.lm.max_length}")
    ctxs = [list(c)[-max_ctx:] for c in contexts]
    if engine.packing:
        groups = _share_groups(ctxs, max(1, engine.batch_size))
        units = []
        for g in groups:
            for chunk in chunk_members([ctxs[i] for i in g], MAX_PACKED_TOKENS):
                units.append((pack([ctxs[g[i]] for i in chunk]), [g[i] for i in chunk]))
    else:
        units = [(pack([c]), [i]) for i, c in enumerate(ctxs)]
    units.sort(key=lambda u: (-len(u[0].tokens), u[0].tokens))
    outputs: list[str | None] = [None] * len(ctxs)

    def run(batch: Sequence[tuple[Packed, list[int]]]) -> None:
        rows = [u[0] for u in batch]
        want = [[m[-1] for m in r.maps] for r in rows]
        plan = _stats_plan([] if stats is None or stats_at is None else
                           [(doc, b, rows[b].maps[j], ctxs[doc], stats_at[doc])
                            for b, (_, docs) in enumerate(batch) for j, doc in enumerate(docs)
                            if len(ctxs[doc]) == len(contexts[doc])])
        logits, at, cache, head_at = engine.forward(rows, want, use_cache=True, extra=plan.pairs)
        if stats is not None:
            _fill_stats(stats, plan, head_at, engine.device)
        del head_at
        # each generation row: (packed row b, member j, doc index)
        members = [(b, j, doc) for b, (_, docs) in enumerate(batch) for j, doc in enumerate(docs)]
        first = logits[[at[(b, rows[b].maps[j][-1])] for b, j, _ in members]].argmax(-1)
        # gather each member's KV entries (prefix + own suffix) into left-padded rows
        T = max(len(r.tokens) for r in rows)
        lens = [len(rows[b].maps[j]) for b, j, _ in members]
        L = max(lens)
        idx = torch.zeros((len(members), L), dtype=torch.long)
        mask = torch.zeros((len(members), L), dtype=torch.long)
        for r, (b, j, _) in enumerate(members):
            m = rows[b].maps[j]
            idx[r, L - len(m):] = torch.tensor(m) + b * T
            mask[r, L - len(m):] = 1
        idx = idx.to(engine.device)
        from transformers import DynamicCache

        layers = []
        for layer in cache.layers:
            kv = []
            for t in (layer.keys, layer.values):
                bsz, h, tlen, d = t.shape
                flat = t.transpose(1, 2).reshape(bsz * tlen, h, d)
                kv.append(flat[idx].transpose(1, 2).contiguous())
            layers.append(tuple(kv))
        del cache, logits
        row_cache = DynamicCache(ddp_cache_data=layers, config=engine.model.config)
        mask = mask.to(engine.device)
        position = torch.tensor(lens, device=engine.device)[:, None]
        gen: list[list[int]] = [[] for _ in members]
        active = list(range(len(members)))
        nxt = first
        finished = 0
        for step in range(max_gen_toks):
            keep = []
            for a, r in enumerate(active):
                t = int(nxt[a])
                gen[r].append(t)
                stop = t in eos_ids or step + 1 >= max_gen_toks
                if not stop and stop_strings:
                    text = tok.decode(gen[r], skip_special_tokens=True)
                    stop = any(s in text for s in stop_strings)
                if stop:
                    outputs[members[r][2]] = finalize_generation(tok, gen[r], until)
                    finished += 1
                else:
                    keep.append(a)
            if not keep:
                break
            if len(keep) < len(active):
                sel = torch.tensor(keep, device=engine.device)
                row_cache.batch_select_indices(sel)
                mask, position, nxt = mask[sel], position[sel], nxt[sel]
                active = [active[a] for a in keep]
            mask = torch.cat([mask, torch.ones((len(active), 1), dtype=mask.dtype, device=mask.device)], 1)
            logits, row_cache = engine.call(row_cache, input_ids=nxt[:, None], attention_mask=mask,
                                            position_ids=position, use_cache=True, logits_to_keep=1)
            nxt = logits[:, -1].argmax(-1)
            position = position + 1
        if progress:
            progress(finished)

    def describe(unit: tuple[Packed, list[int]]) -> str:
        docs = [names[i] if names is not None else f"context {i}" for i in unit[1]]
        return (f"{', '.join(docs[:5])}{' ...' if len(docs) > 5 else ''} ({len(unit[0].tokens)} context "
                f"tokens + up to {max_gen_toks} generated)")

    with torch.inference_mode():
        engine.run_batches(units, run, size_of=lambda u: len(u[1]), describe=describe)
    return outputs  # type: ignore[return-value]
