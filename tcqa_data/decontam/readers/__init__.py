"""Corpus readers: turn files (or a Hugging Face dataset) into a stream of ``Document``s.

Modules: ``inputs`` (which files: ``resolve_inputs``, ``CorpusInput``; cutting one into
``InputShard``s: ``split_input``), ``documents`` (the per-format readers: ``iter_documents``,
``Document``, ``SkipStats``; the formats, refs and errors are described there), ``jsonl_batches``
(the compiled JSONL reader: ``iter_normalized_batches``, ``scan_jsonl_batches``), ``hf_stream``
(``iter_hf_documents``), ``storage`` (the one place a corpus file or URL is opened, listed and
sniffed) and ``presets`` (the text fields of the big open corpora's layouts: ``--preset``). Every
public name of the first four is importable from the package (``from tcqa_data.decontam.readers
import iter_documents``): the documented API.
"""

from tcqa_data.decontam.readers.documents import (
    BLANK_LINE,
    EMPTY_TEXT,
    INVALID_JSON,
    INVALID_UTF8,
    MISSING_FIELD,
    MISSING_ID,
    NON_STRING_TEXT,
    NOT_OBJECT,
    TRUNCATED_INPUT,
    Document,
    SkipStats,
    batch_documents,
    iter_documents,
)
from tcqa_data.decontam.readers.hf_stream import iter_hf_documents
from tcqa_data.decontam.readers.inputs import FORMATS, CorpusInput, InputShard, resolve_inputs, split_input
from tcqa_data.decontam.readers.jsonl_batches import (
    NormalizedBatch,
    grown_array,
    iter_normalized_batches,
    normalized_batches_supported,
    scan_jsonl_batches,
)

__all__ = [
    "BLANK_LINE",
    "EMPTY_TEXT",
    "FORMATS",
    "INVALID_JSON",
    "INVALID_UTF8",
    "MISSING_FIELD",
    "MISSING_ID",
    "NON_STRING_TEXT",
    "NOT_OBJECT",
    "TRUNCATED_INPUT",
    "CorpusInput",
    "Document",
    "InputShard",
    "NormalizedBatch",
    "SkipStats",
    "batch_documents",
    "grown_array",
    "iter_documents",
    "iter_hf_documents",
    "iter_normalized_batches",
    "normalized_batches_supported",
    "resolve_inputs",
    "scan_jsonl_batches",
    "split_input",
]
