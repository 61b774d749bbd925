"""tcqa-data: measure benchmark contamination against a training corpus and report clean scores.

The public API, one function per command (``tcqa_data.api``)::

    from tcqa_data import build_index, decontaminate, purify, evaluate, analyze

Names are resolved on first use, so ``import tcqa_data`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Version of the on-disk formats (index, prepared splits, eval results). Bump on incompatible change.
# 2: compact n-gram index layout (decontam/ngrams/index.py); format 1 indexes are still read for lookups.
FORMAT_VERSION = 2

# public name -> the module that defines it
_PUBLIC = {
    "build_index": "tcqa_data.api",
    "decontaminate": "tcqa_data.api",
    "purify": "tcqa_data.api",
    "evaluate": "tcqa_data.api",
    "analyze": "tcqa_data.api",
    "clean_vs_full_table": "tcqa_data.api",
    "IndexManifest": "tcqa_data.api",
    "PrepSummary": "tcqa_data.api",
    "EvalResults": "tcqa_data.api",
    "AnalysisResult": "tcqa_data.api",
    "PurifyReport": "tcqa_data.api",
    "Rule": "tcqa_data.decontam.detect.rules",
    "TcqaError": "tcqa_data.errors",
}

__all__ = ["FORMAT_VERSION", "__version__", *_PUBLIC]

if TYPE_CHECKING:
    from tcqa_data.api import AnalysisResult as AnalysisResult
    from tcqa_data.api import EvalResults as EvalResults
    from tcqa_data.api import IndexManifest as IndexManifest
    from tcqa_data.api import PrepSummary as PrepSummary
    from tcqa_data.api import PurifyReport as PurifyReport
    from tcqa_data.api import analyze as analyze
    from tcqa_data.api import build_index as build_index
    from tcqa_data.api import clean_vs_full_table as clean_vs_full_table
    from tcqa_data.api import decontaminate as decontaminate
    from tcqa_data.api import evaluate as evaluate
    from tcqa_data.api import purify as purify
    from tcqa_data.decontam.detect.rules import Rule as Rule
    from tcqa_data.errors import TcqaError as TcqaError


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
        globals()[name] = value  # resolved once
        return value
    raise AttributeError(f"module 'tcqa_data' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
