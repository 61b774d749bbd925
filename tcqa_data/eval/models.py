"""Load a causal LM and its tokenizer through transformers: hub id, local folder or GGUF file."""

from __future__ import annotations

import os
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


def resolve_dtype(dtype: str, device) -> Any:
    """``auto`` is bf16 on CUDA (fast and safe for scoring) and fp32 elsewhere."""
    import torch

    if dtype not in DTYPES:
        raise TcqaError(f"unknown dtype {dtype!r}; use one of {DTYPES}")
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, dtype)


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


def load_model(model: str, *, gguf_file: str | None = None, device: str = "auto", dtype: str = "auto",
               trust_remote_code: bool = False, max_length: int | None = None) -> LoadedModel:
    """Load ``model`` (hub id, local folder, or a ``.gguf`` file / ``gguf_file`` in a folder)."""
    import transformers

    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    source, gguf = split_gguf(str(model), gguf_file)
    if gguf is not None and not (Path(source) / gguf).is_file() and os.path.isdir(source):
        raise TcqaError(f"GGUF file {gguf!r} not found in folder {source}")
    kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code}
    if gguf is not None:
        kwargs["gguf_file"] = gguf
    how = ("pass a local folder holding config.json and the weights, or a .gguf file "
           "(--model path/to/model.gguf, or --model FOLDER --gguf-file NAME.gguf)")
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(source, **kwargs)
    except Exception as exc:  # transformers raises many types; the user needs one clear message
        raise TcqaError(f"cannot load a tokenizer for model {model!r} ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0] if str(exc) else ''}); the model folder must carry "
                        f"its tokenizer files, or {how}") from exc
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
    name = Path(gguf).stem if gguf else Path(source.rstrip("/")).name or source
    n_params = sum(p.numel() for p in lm.parameters())
    return LoadedModel(
        model=lm, tokenizer=tokenizer, device=dev, dtype=torch_dtype, name=name, source=str(model),
        gguf_file=gguf, max_length=max_length or resolve_max_length(lm.config, tokenizer),
        info={"parameters": int(n_params), "architecture": type(lm).__name__,
              "attn_implementation": getattr(lm.config, "_attn_implementation", None)},
    )
