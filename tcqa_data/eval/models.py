"""The causal LM loader, as the eval stage names it (it lives in ``tcqa_data/causal_lm.py``, below
both stages that load one: ``decontaminate --judge`` loads its judge with the same code)."""

from tcqa_data.causal_lm import (
    DEFAULT_MAX_LENGTH,
    DEVICES,
    DTYPES,
    PACKAGED_MODELS,
    LoadedModel,
    check_local_model,
    dtype_reason,
    load_model,
    looks_like_path,
    model_name,
    packaged_model_path,
    resolve_device,
    resolve_dtype,
    resolve_max_length,
    split_gguf,
)

__all__ = ["DEFAULT_MAX_LENGTH", "DEVICES", "DTYPES", "PACKAGED_MODELS", "LoadedModel", "check_local_model",
           "dtype_reason", "load_model", "looks_like_path", "model_name", "packaged_model_path",
           "resolve_device", "resolve_dtype", "resolve_max_length", "split_gguf"]
