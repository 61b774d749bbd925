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
from tcqa_data.outputs import check_output_dir


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


def _inside(child: Path, parent: Path) -> bool:
    return child == parent or parent in child.parents


def check_output_apart(out: Path, specs: Sequence[str], inputs: Sequence[CorpusInput]) -> None:
    """The index folder is not an input, does not hold one and does not lie inside an input folder:
    else the index's own files would be read as corpus by the next run (and ``--overwrite`` would
    delete inputs). Checked on resolved paths (links followed), before anything is written."""
    target = Path(os.path.realpath(out))
    for spec in specs:
        if os.path.isdir(spec):
            folder = Path(os.path.realpath(spec))
            if _inside(target, folder) or _inside(folder, target):
                how = "is" if target == folder else "lies inside" if _inside(target, folder) else "holds"
                raise ConfigError(f"the index folder {out} {how} the input folder {spec}: the index's "
                                  "own files would be read as corpus; choose an --out outside the inputs")
    for c in inputs:
        if _inside(Path(os.path.realpath(c.path)), target):
            raise ConfigError(f"the index folder {out} holds the input {c.path}: choose an --out "
                              "outside the inputs")
