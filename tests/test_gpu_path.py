"""The GPU path, checked without a GPU: dtype choice by bf16 support, and every form of a device
allocation failure halving the batch (injected into a real forward of a real model on the CPU)."""

from __future__ import annotations

import pytest
import torch
from conftest import SHARED_DATA, shared_file
from eval_fixtures import read_mc_taco

from tcqa_data.errors import TcqaError
from tcqa_data.eval.memorization import memorization_scores, token_stats
from tcqa_data.eval.models import load_model, resolve_dtype
from tcqa_data.eval.runner import score_multiple_choice
from tcqa_data.eval.scoring import Engine, is_out_of_memory
from tcqa_data.prep.taskspec import TaskSpec

CUDA = torch.device("cuda")  # a device object only: nothing is allocated on it


def test_dtype_follows_bf16_support():
    assert resolve_dtype("auto", CUDA, bf16_supported=True) == torch.bfloat16
    assert resolve_dtype("auto", CUDA, bf16_supported=False) == torch.float16
    assert resolve_dtype("float32", CUDA, bf16_supported=False) == torch.float32
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    with pytest.raises(TcqaError, match="does not support bf16"):
        resolve_dtype("bfloat16", CUDA, bf16_supported=False)


OOMS = [torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
        RuntimeError("CUDA out of memory. Tried to allocate 1.50 GiB (GPU 0; 79.15 GiB total capacity)"),
        RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
        RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported")]


def test_every_form_of_allocation_failure_is_recognized():
    assert all(is_out_of_memory(e) for e in OOMS)
    assert not is_out_of_memory(RuntimeError("shape mismatch: [2, 3] vs [3, 2]"))
    assert not is_out_of_memory(ValueError("CUDA out of memory"))  # not what torch raises


@pytest.fixture(scope="module")
def lm(tiny_model):
    return load_model(str(tiny_model), device="cpu")


@pytest.fixture(scope="module")
def docs():
    shared_file("mc_taco/dev_3783.tsv")
    rows = read_mc_taco(SHARED_DATA / "mc_taco" / "dev_3783.tsv", 6)
    return [{**r, "doc_id": i, "group_id": i // 4} for i, r in enumerate(rows)]


class Fails:
    """A forward pre-hook on the model's body that raises ``exc`` while a call has more than ``rows``
    rows (a batch that does not fit), the way an allocation inside the forward fails."""

    def __init__(self, exc: BaseException, rows: int) -> None:
        self.exc, self.rows, self.raised = exc, rows, 0

    def __call__(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None and ids.shape[0] > self.rows:
            self.raised += 1
            raise self.exc


@pytest.mark.parametrize("exc", OOMS, ids=["OutOfMemoryError", "RuntimeError", "CUBLAS", "cuda-error"])
def test_an_allocation_failure_halves_the_batch_and_gives_the_same_scores(lm, docs, exc):
    spec = TaskSpec.builtin("mc_taco")
    texts = [spec.decontamination_query(d) for d in docs] + [d["sentence"] for d in docs]
    want_mc = score_multiple_choice(Engine(lm, 16), spec, docs)
    want_mem = token_stats(Engine(lm, 16), texts)
    in_prompt = [spec.memorization_texts(d) for d in docs]
    want_in_prompt = score_multiple_choice(Engine(lm, 16), spec, docs, memorization_texts=in_prompt)
    got = []
    for work in (lambda e: score_multiple_choice(e, spec, docs), lambda e: token_stats(e, texts),
                 lambda e: score_multiple_choice(e, spec, docs, memorization_texts=in_prompt)):
        engine = Engine(lm, "auto")  # CPU auto: 16 rows, halved on failure
        # the packed rows of these docs: 2 (their candidates), 3 (their texts); more than 1 fails
        hook = Fails(exc, rows=1)
        handle = engine.base.register_forward_pre_hook(hook, with_kwargs=True)
        try:
            got.append(work(engine))
        finally:
            handle.remove()
        assert hook.raised >= 1 and engine.batch_size == 1
    got_mc, got_mem, got_in_prompt = got
    assert got_mc == want_mc
    for a, b in zip(got_in_prompt, want_in_prompt, strict=True):
        assert {k: v for k, v in a.items() if k != "memorization"} == \
            {k: v for k, v in b.items() if k != "memorization"}
        for text, scores in b["memorization"].items():
            assert a["memorization"][text] == pytest.approx(scores, rel=1e-5, abs=1e-6)
    for a, b, t in zip(got_mem, want_mem, texts, strict=True):
        assert memorization_scores(a, t) == pytest.approx(memorization_scores(b, t), rel=1e-5, abs=1e-6)


def test_a_unit_too_large_for_one_batch_names_the_doc_and_its_tokens(lm, docs):
    spec = TaskSpec.builtin("mc_taco")
    engine = Engine(lm, "auto")
    handle = engine.base.register_forward_pre_hook(Fails(OOMS[1], rows=0), with_kwargs=True)
    try:
        with pytest.raises(TcqaError,
                           match=r"out of device memory on doc_id \d+.* \(\d+ tokens in its row\) alone"):
            score_multiple_choice(engine, spec, docs)
        with pytest.raises(TcqaError, match=r"memorization text .* \(\d+ tokens in its row\) alone"):
            token_stats(engine, [spec.decontamination_query(docs[0])])
    finally:
        handle.remove()
    # an error that is not an allocation failure passes through unchanged
    engine = Engine(lm, "auto")
    handle = engine.base.register_forward_pre_hook(Fails(RuntimeError("shape mismatch"), rows=0),
                                                   with_kwargs=True)
    try:
        with pytest.raises(RuntimeError, match="shape mismatch"):
            score_multiple_choice(engine, spec, docs)
    finally:
        handle.remove()
