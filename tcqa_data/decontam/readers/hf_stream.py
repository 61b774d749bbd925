"""Hugging Face datasets as corpus input: stream a hub (or local-folder) dataset's rows as
``Document``s, with the errors and skip counts of ``iter_documents``.
"""

from __future__ import annotations

from collections.abc import Iterator

from tcqa_data.decontam.readers.documents import Document, SkipStats, _Ctx
from tcqa_data.errors import TcqaError

# ---------------------------------------------------------------------------------------------
# Hugging Face datasets


_HF_HINT = ("If the Hugging Face hub is unreachable (no network, HF_HUB_OFFLINE=1), download the "
            "data and pass local files (JSONL, Parquet, text) instead.")


def iter_hf_documents(name: str, config: str | None = None, split: str = "train",
                      text_field: str = "text", id_field: str | None = None, streaming: bool = True,
                      on_error: str = "raise", stats: SkipStats | None = None) -> Iterator[Document]:
    """Stream a hub (or local-folder) dataset with ``datasets.load_dataset(..., streaming=True)``.

    Refs are the id value or ``"<name>[/<config>]:<split>:<row>"`` (1-based row). Dataset loading
    scripts never run: datasets >= 4 dropped them, and we pass no ``trust_remote_code``.
    """
    source = name if config is None else f"{name}/{config}"
    ctx = _Ctx(f"{source}:{split}", text_field, id_field, on_error, stats)  # errors read like refs

    def load_error(e: BaseException) -> TcqaError:
        return TcqaError(f"could not load Hugging Face dataset {source!r} (split {split!r}): "
                         f"{type(e).__name__}: {e}. {_HF_HINT}")

    def gen() -> Iterator[Document]:
        import datasets

        try:
            ds = datasets.load_dataset(name, config, split=split, streaming=streaming)
            rows = iter(ds)
        except Exception as e:  # network, auth, missing dataset: all end the same way for the user
            raise load_error(e) from e
        row = 0
        while True:
            try:
                record = next(rows)
            except StopIteration:
                return
            except Exception as e:
                raise load_error(e) from e
            row += 1
            doc = ctx.document(record, row)
            if doc is not None:
                yield doc

    return gen()
