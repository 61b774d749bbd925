"""Data files shipped inside the package, so a fresh install runs the quick start with no setup.

- ``demo/wiki_demo.jsonl.zst``: the demo corpus (162 real Wikipedia articles, CC BY-SA 3.0 / GFDL;
  ``demo/README.md`` says which and why), indexed by ``tcqa-data index-corpus --demo``.
- ``nltk_data/tokenizers/punkt_tab/english``: NLTK's English Punkt tables (Apache-2.0;
  ``NOTICE.md`` beside them), the last place the MinHash windows look for Punkt.

Both are found through ``importlib.resources`` (a source checkout or an installed wheel alike).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from tcqa_data.errors import InputError

# As importlib.resources places them; module attributes so that a test can stand for an install
# that lacks them.
DEMO_CORPUS = Path(str(resources.files(__name__) / "demo" / "wiki_demo.jsonl.zst"))
NLTK_DATA = Path(str(resources.files(__name__) / "nltk_data"))


def demo_corpus_path() -> str:
    """The demo corpus file, or an ``InputError`` when the install lacks it."""
    if not DEMO_CORPUS.is_file():
        raise InputError("the demo corpus is missing from this install of tcqa-data; reinstall it, "
                         "or name a corpus of your own", path=str(DEMO_CORPUS))
    return str(DEMO_CORPUS)


def nltk_data_root(language: str = "english") -> str | None:
    """The shipped NLTK data folder when it holds ``tokenizers/punkt_tab/<language>``, else None."""
    if (NLTK_DATA / "tokenizers" / "punkt_tab" / language).is_dir():
        return str(NLTK_DATA)
    return None
