"""Checks run before a stage writes anything, so a doomed run fails at once and leaves no trace.

``index-corpus`` asks ``check_build`` before it touches the output folder (no ``_work/`` left
behind, no existing index cleared by ``--overwrite`` for nothing); ``decontaminate`` asks
``minhash_windows_problem`` to learn whether MinHash evidence can be computed here.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tcqa_data.decontam.readers.inputs import CorpusInput
from tcqa_data.errors import ConfigError, InputError, TcqaError


def minhash_windows_problem(params: Any) -> str | None:
    """Why MinHash windows cannot be cut here with ``params`` (e.g. NLTK Punkt missing), or None.

    Asks the window splitter itself, so the answer follows whatever the windows need (it loads
    their tables without cutting windows: no compiled kernel is loaded for the question).
    """
    from tcqa_data.decontam.minhash.windows import check_splitter

    try:
        check_splitter(params)
    except TcqaError as exc:
        return str(exc)
    return None


def _nearest_existing(path: Path) -> Path:
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_output_dir(out: Path) -> None:
    """``out`` is a folder or can be created as one, and is writable; checked without writing."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out}: exists and is not a folder")
    anchor = _nearest_existing(out)
    if not anchor.is_dir():
        raise ConfigError(f"{out}: cannot create it, {anchor} is a file")
    if not os.access(anchor, os.W_OK | os.X_OK):
        where = "" if anchor == out.absolute() else f" ({anchor}, where it would be created, is not writable)"
        raise TcqaError(f"cannot write the output folder {out}: permission denied{where}")


def check_build(out: Path, inputs: Sequence[CorpusInput], minhash_params: Any, *,
                streamed: bool = False) -> None:
    """Everything ``build_index`` can check before writing: output folder, empty corpus, Punkt.

    ``streamed``: a Hugging Face dataset is among the inputs (its size is unknown up front).
    """
    check_output_dir(out)
    if inputs and not streamed and all(c.size == 0 for c in inputs):
        names = ", ".join(c.path for c in inputs[:3]) + (f" and {len(inputs) - 3} more" if len(inputs) > 3
                                                        else "")
        raise InputError(f"the corpus is empty: every input file has 0 bytes ({names}); "
                         "an index of 0 documents would report every benchmark doc clean")
    if minhash_params is not None:
        problem = minhash_windows_problem(minhash_params)
        if problem:
            raise TcqaError(f"the MinHash index needs sentence windows: {problem} "
                            "Or pass --no-minhash to build only the n-gram index.")
