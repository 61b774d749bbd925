"""Field layouts of the big open corpora (``--preset``): which field holds a document's text.

Refs stay ``<path>:<line>`` (or ``:<row>``) unless ``--id-field`` is given: the layouts' ids are
not unique across their releases' files (RedPajama v2 has none), and line refs keep the compiled
JSONL reader and ``purify``'s logs pointing at the record in its file.

=============== ================= ======================================================================
preset          text field        how the corpus ships
=============== ================= ======================================================================
``dolma``       ``text``          ``documents/*.json.gz`` (JSON lines: id, text, source, added, created,
                                  metadata); read ``documents/``, not ``attributes/``
``fineweb``     ``text``          Parquet (text, id, dump, url, date, file_path, language, ...)
``dclm``        ``text``          ``.jsonl.zst`` (text, url, metadata, warcinfo, ...)
``redpajama-v2`` ``raw_content``  ``documents/**/*.json.gz`` (raw_content, url, date_download, digest,
                                  length, nlines, source_domain, title, ...); not ``quality_signals/``
=============== ================= ======================================================================
"""

from __future__ import annotations

from dataclasses import dataclass

from tcqa_data.errors import ConfigError


@dataclass(frozen=True)
class Preset:
    """A corpus layout: the field holding the text, and what the layout's files are."""

    name: str
    text_field: str
    ships_as: str


PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("dolma", "text", "documents/*.json.gz"),
    Preset("fineweb", "text", "data/**/*.parquet"),
    Preset("dclm", "text", "**/*.jsonl.zst"),
    Preset("redpajama-v2", "raw_content", "documents/**/*.json.gz"),
)}

DEFAULT_TEXT_FIELD = "text"


def text_field_for(preset: str | None, text_field: str | None) -> str:
    """The text field to read: ``--text-field`` when given, else the preset's, else ``text``."""
    if preset is not None and preset not in PRESETS:
        raise ConfigError(f"--preset {preset!r}: choose one of {sorted(PRESETS)}")
    if text_field is not None:
        return text_field
    return PRESETS[preset].text_field if preset is not None else DEFAULT_TEXT_FIELD
