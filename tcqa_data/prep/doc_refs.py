"""Corpus doc references as PREP_DIR files record them: file names, never the paths the corpus
was read from, so a prepared folder can be moved or shared and the same inputs give the same bytes
wherever they live."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


def portable_path(path: str | os.PathLike) -> str:
    """A path as PREP_DIR files record it: the file or folder name (hub and hf:// ids unchanged).

    Files in PREP_DIR never hold absolute paths, so a prepared folder can be moved or shared, and
    the same inputs give the same bytes wherever they and the output live. Content is identified
    by checksums (the index manifest's sha256 per input), not by where it was read from.
    """
    text = os.fspath(path)
    if text.startswith(("hub:", "hf://")):
        return text
    return Path(text).resolve().name or text


def portable_ref(index_dir: str | os.PathLike, manifest: Mapping[str, Any] | None = None
                 ) -> Callable[[str | None], str | None]:
    """A function that rewrites a ``"<input path>:<line>"`` corpus doc ref of the index at
    ``index_dir`` (its ``manifest``, read from there when not given) to ``"<file name>:<line>"``,
    as PREP_DIR files record it.

    Doc refs without an id field embed the input path as given to index-corpus; PREP_DIR files
    must not. Refs from an id field (titles, urls) are left as they are.
    """
    if manifest is None:
        from tcqa_data.decontam.ngrams.index import MANIFEST
        from tcqa_data.io_utils import read_json

        manifest = read_json(Path(index_dir) / MANIFEST)
    inputs = manifest.get("inputs", [])
    renamed = {e["path"] + ":": portable_path(e["path"]) + ":" for e in inputs}

    def fix(ref: str | None) -> str | None:
        # the longest input path + ":" that starts the ref: every such prefix ends at one of the
        # ref's colons, so a lookup per colon, from the last (a loop over the inputs cost
        # ~0.25 ms a ref against an index of 487 inputs: 5 CPU-s of a decontaminate run)
        if ref is not None:
            i = ref.rfind(":")
            while i >= 0:
                new = renamed.get(ref[:i + 1])
                if new is not None:
                    return new + ref[i + 1:]
                i = ref.rfind(":", 0, i)
        return ref

    return fix


def portable_doc_refs(cols: dict[str, list], fix: Callable[[str | None], str | None]) -> None:
    """Rewrite the corpus doc refs in ``cols`` (columns ``*_ref``, ``*_refs``) with ``fix``
    (``portable_ref``)."""
    for name in cols:  # every corpus doc ref column is named *_ref or *_refs
        if name.endswith(("_ref", "_refs")):
            cols[name] = [[fix(r) for r in v] if isinstance(v, list) else fix(v) for v in cols[name]]
