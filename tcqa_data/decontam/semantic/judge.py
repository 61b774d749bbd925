"""The optional judge: a causal LM asked whether an item and its best corpus window are the same item.

LLM Decontaminator (Yang et al. 2023, arXiv 2311.04850) asks GPT-4 of each (test item, nearest
training sample) pair whether they are the same question, rephrased or translated, and reads a
one-word answer. Here the question is put to a local causal LM (``--judge MODEL``: a folder, a hub
id, or ``smollm2-135m-gguf``, loaded by ``tcqa_data.causal_lm`` as ``evaluate`` loads models,
``trust_remote_code`` off) on the top pairs only: items whose best window's semantic score (the
rule's ``semantic_score``) is at least ``floor``, the ``top`` highest. Nothing is sampled: one
forward pass per pair (batched) and the answer's log-probabilities compared,
``P(yes) = exp(lp(True)) / (exp(lp(True)) + exp(lp(False)))`` at the position after the prompt;
the verdict is ``P(yes) >= 0.5``. The same pairs give the same verdicts on any run.

The columns it adds (``semantic_judge``: the verdict, null where not judged;
``semantic_judge_probability``) feed the rule term ``judge``; the manifest records the model and
its weights digest (``Judge.manifest``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tcqa_data.errors import ConfigError, TcqaError
from tcqa_data.outputs import file_sha256

JUDGE_TOP = 200  # pairs judged per split, highest semantic score first (``--judge-top``)
JUDGE_FLOOR = 0.5  # pairs below this semantic score are not worth a forward pass
PART_TOKENS = 256  # each text of a pair is cut to this many tokens (a window is the item's length)
BATCH = 8
ANSWERS = ("True", "False")
INSTRUCTION = (
    "You compare two texts. Text A is a test item of a benchmark. Text B is a passage found in a "
    "training corpus; it was lower-cased and its punctuation removed. Decide whether text B holds the "
    "same item as text A: the same question asking for the same answer, possibly reworded, with its "
    "parts reordered, or translated into another language. A passage on the same topic that asks "
    "something else is not the same item. Answer with one word, True or False.")
QUESTION = ("Text A:\n{item}\n\nText B:\n{window}\n\n"
            "Is text B the same item as text A, rephrased or translated?")


def weights_sha256(folder: Path | None, gguf_file: str | None, hub_id: str | None = None) -> str | None:
    """The sha256 of a causal LM's weights: the ``.gguf`` file; a folder's one weights file, or, for
    weights in shards, the sha256 of their names and digests in name order; a hub id's cached
    ``model.safetensors``. None where no file is found."""
    if gguf_file is not None and folder is not None:
        return file_sha256(folder / gguf_file)
    if folder is None and hub_id is not None:
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(hub_id, "model.safetensors")
        except Exception:  # noqa: BLE001 - no cache, no digest (recorded as null)
            return None
        return file_sha256(Path(cached)) if isinstance(cached, str) else None
    if folder is None:
        return None
    files = sorted(folder.glob("*.safetensors")) or sorted(folder.glob("pytorch_model*.bin"))
    if not files:
        return None
    if len(files) == 1:
        return file_sha256(files[0])
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.name} {file_sha256(f)}\n".encode())
    return h.hexdigest()


class Judge:
    """A loaded causal LM that judges (item, window) pairs, and which pairs it judges."""

    def __init__(self, name: str, loaded: Any, digest: str | None, top: int = JUDGE_TOP,
                 floor: float = JUDGE_FLOOR) -> None:
        self.name = name
        self.loaded = loaded  # tcqa_data.causal_lm.LoadedModel
        self.digest = digest
        self.top = top
        self.floor = floor
        tok = loaded.tokenizer
        self.chat = bool(getattr(tok, "chat_template", None))
        # a chat turn starts the answer itself; after a plain "Answer:" it follows a space
        lead = "" if self.chat else " "
        self.answer_ids = [tok.encode(lead + a, add_special_tokens=False)[0] for a in ANSWERS]
        if self.answer_ids[0] == self.answer_ids[1]:
            raise ConfigError(f"judge model {name!r}: its tokenizer gives {ANSWERS[0]!r} and {ANSWERS[1]!r} "
                              "the same first token; it cannot answer the judge's question")

    def manifest(self) -> dict[str, Any]:
        """What PREP_DIR's manifest records: the model, its weights digest, which pairs were judged."""
        return {"name": self.name, "weights_sha256": self.digest, "top": self.top, "floor": self.floor,
                "answers": list(ANSWERS), "chat_template": self.chat,
                "parameters": self.loaded.info.get("parameters"), "device": self.loaded.device.type}

    def _cut(self, text: str) -> str:
        tok = self.loaded.tokenizer
        ids = tok.encode(text, add_special_tokens=False)
        return text if len(ids) <= PART_TOKENS else tok.decode(ids[:PART_TOKENS])

    def prompt(self, item: str, window: str) -> str:
        """The judge's prompt for one pair (the chat template's, where the tokenizer has one)."""
        question = QUESTION.format(item=self._cut(item), window=self._cut(window))
        if self.chat:
            return self.loaded.tokenizer.apply_chat_template(
                [{"role": "system", "content": INSTRUCTION}, {"role": "user", "content": question}],
                tokenize=False, add_generation_prompt=True)
        return f"{INSTRUCTION}\n\n{question}\nAnswer:"

    def probabilities(self, pairs: Sequence[tuple[str, str]], batch_size: int = BATCH) -> np.ndarray:
        """P(yes) of each (item, window) pair: the two answers' log-probabilities after its prompt,
        compared; one forward pass per pair, ``batch_size`` pairs at a time (right-padded)."""
        import torch

        tok, lm = self.loaded.tokenizer, self.loaded.model
        # a chat template writes its own special tokens; a plain prompt gets the tokenizer's
        encoded = [tok.encode(self.prompt(a, b), add_special_tokens=not self.chat) for a, b in pairs]
        encoded = [ids[-self.loaded.max_length:] for ids in encoded]
        pad = tok.pad_token_id if tok.pad_token_id is not None else 0
        out = np.empty(len(encoded), np.float64)
        for lo in range(0, len(encoded), batch_size):
            chunk = encoded[lo:lo + batch_size]
            width = max(len(ids) for ids in chunk)
            ids = torch.full((len(chunk), width), pad, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for r, row in enumerate(chunk):
                ids[r, :len(row)] = torch.tensor(row, dtype=torch.long)
                mask[r, :len(row)] = 1
            last = torch.tensor([len(row) - 1 for row in chunk])
            with torch.inference_mode():
                logits = lm(input_ids=ids.to(lm.device), attention_mask=mask.to(lm.device)).logits
                final = logits[torch.arange(len(chunk)), last.to(lm.device)].float()
                lp = torch.log_softmax(final, dim=-1)[:, self.answer_ids]
                p_yes = torch.sigmoid(lp[:, 0] - lp[:, 1])
            out[lo:lo + len(chunk)] = p_yes.cpu().numpy()
        return out

    def chosen(self, cosines: Sequence[float | None]) -> list[int]:
        """The pairs judged: semantic score at least ``floor``, the ``top`` highest (ties: item order)."""
        have = [i for i, c in enumerate(cosines) if c is not None and c == c and c >= self.floor]
        have.sort(key=lambda i: (-float(cosines[i]), i))  # type: ignore[arg-type]
        return sorted(have[:self.top])

    def columns(self, queries: Sequence[str], windows: Sequence[str | None],
                cosines: Sequence[float | None]) -> dict[str, list]:
        """``semantic_judge`` (verdict) and ``semantic_judge_probability`` per item; null where the
        pair was not judged (no candidate, below ``floor``, or past ``top``)."""
        verdict: list[bool | None] = [None] * len(queries)
        prob: list[float | None] = [None] * len(queries)
        rows = self.chosen(cosines)
        if rows:
            p = self.probabilities([(queries[i], windows[i] or "") for i in rows])
            for i, x in zip(rows, p.tolist(), strict=True):
                prob[i] = round(float(x), 6)
                verdict[i] = prob[i] >= 0.5
        return {"semantic_judge": verdict, "semantic_judge_probability": prob}


def load_judge(name: str, *, top: int = JUDGE_TOP, floor: float = JUDGE_FLOOR, device: str = "auto") -> Judge:
    """The judge ``name`` (a local folder or ``.gguf`` file, a hub id, or a packaged alias such as
    ``smollm2-135m-gguf``), ``trust_remote_code`` off. One-line ConfigError when it cannot load."""
    from tcqa_data.causal_lm import load_model, looks_like_path

    if top < 1:
        raise ConfigError(f"--judge-top {top}: must be at least 1")
    try:
        loaded = load_model(name, device=device, trust_remote_code=False, show_progress=False)
    except TcqaError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"--judge model {name!r} cannot be loaded: {first}") from None
    source = Path(loaded.info.get("packaged_path") or name).expanduser()
    if loaded.gguf_file is not None:
        folder: Path | None = source.parent if source.is_file() else source
    else:
        folder = source if source.is_dir() else None
    hub_id = None if folder is not None or looks_like_path(name) else name
    return Judge(name, loaded, weights_sha256(folder, loaded.gguf_file, hub_id), top=top, floor=floor)
