"""The full build's MinHash map input from JSONL without a ``str`` per document.

``index-corpus`` with MinHash needs each document twice: its characters (sentence windows are cut
on ``str`` offsets) and its Janitor-normalized bytes (the n-gram hashes and the window
signatures). Read through ``iter_documents`` that is a ``json.loads`` and a ``str`` per line, a
UTF-32 copy for the window kernels, and two UTF-8 encodings. Here a compiled pass
(``_numba_kernels.jsonl_scan_cps``) decodes each line's text field straight into code points
(one ``uint32`` per ``str`` character), and a second (``janitor_from_cps``) writes the
normalized bytes in the layout of ``readers.iter_normalized_batches`` with every character's
byte offset there. The documents, batches, refs, errors and skip counts are those of
``readers.iter_normalized_batches`` (so of ``iter_documents``): lines the kernel is not certain
about go through the Python line reader, as there.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tcqa_data.decontam import kernel
from tcqa_data.decontam.readers import (
    BLANK_LINE,
    EMPTY_TEXT,
    CorpusInput,
    InputShard,
    SkipStats,
    _Ctx,
    _jsonl_blocks,
    _jsonl_document,
    _jsonl_source,
    _Truncated,
    _truncated,
)


class CodepointBatch(NamedTuple):
    """Documents as code points: doc ``k`` is ``cps[doc_start[k]:doc_start[k + 1]]``; the
    1-based line of each and their total chars (``len(cps)``)."""

    cps: np.ndarray
    doc_start: np.ndarray
    rows: np.ndarray
    chars: int


def iter_codepoint_batches(inp: CorpusInput | InputShard, text_field: str = "text", on_error: str = "raise",
                           stats: SkipStats | None = None, batch_chars: int = 4_000_000):
    """``readers.iter_normalized_batches``' documents and batches, as code points (see above).
    Only for inputs ``readers.normalized_batches_supported`` accepts."""
    from tcqa_data.decontam._numba_kernels import SCAN_BATCH_FULL, SCAN_DEFER, SCAN_END, SCAN_ROOM
    from tcqa_data.decontam.hashing import JANITOR_ASCII_MAP

    shard = inp if isinstance(inp, InputShard) else None
    corpus_input = shard.input if shard is not None else inp
    assert isinstance(corpus_input, CorpusInput)
    ctx = _Ctx(corpus_input.path, text_field, None, on_error, stats)
    scan = kernel.kernels()["jsonl_scan_cps"]
    key = np.frombuffer(text_field.encode("utf-8"), dtype=np.uint8)
    counts = np.zeros(2, dtype=np.int64)  # blank lines, empty texts
    # room for a batch and a long line: uint32 code points, kept under glibc's 32 MiB mmap
    # threshold (the build fixes it there) so that every batch reuses heap pages instead of
    # page-faulting a fresh mapping in
    first_cap = min(batch_chars, 1 << 22) + (1 << 20)
    out = doc_start = doc_line = None
    o = ndocs = 0

    def new_batch() -> None:
        nonlocal out, doc_start, doc_line, o, ndocs
        out = np.empty(first_cap, dtype=np.uint32)
        doc_start, doc_line = np.zeros(1025, np.int64), np.empty(1024, np.int64)
        o = ndocs = 0

    def grow(a: np.ndarray, size: int) -> np.ndarray:
        b = np.empty(size, dtype=a.dtype)
        b[:len(a)] = a
        return b

    def finish() -> CodepointBatch:
        return CodepointBatch(out[:o], doc_start[:ndocs + 1].copy(), doc_line[:ndocs].copy(), o)

    def room(need: int) -> None:
        nonlocal out, doc_start, doc_line
        if ndocs + 1 >= len(doc_start):
            doc_start, doc_line = grow(doc_start, 2 * len(doc_start)), grow(doc_line, 2 * len(doc_line))
        if o + need > len(out):
            out = grow(out, 2 * (o + need))

    new_batch()
    with open(corpus_input.path, "rb") as fh:
        lines, offset, end, line, compressed = _jsonl_source(fh, corpus_input, shard)
        try:
            for block, block_offset in _jsonl_blocks(fh, corpus_input, lines, offset, end):
                buf = np.frombuffer(block, dtype=np.uint8)
                pos = 0
                while pos < len(buf):
                    status, pos, o, ndocs, line = scan(buf, pos, len(buf), key, JANITOR_ASCII_MAP, out, o,
                                                       doc_start, doc_line, ndocs, line, batch_chars, counts)
                    if status == SCAN_END:
                        break
                    if status == SCAN_BATCH_FULL:
                        yield finish()
                        new_batch()
                        continue
                    nl = block.find(b"\n", pos)
                    stop = len(block) if nl < 0 else nl + 1
                    if status == SCAN_ROOM:
                        room(stop - pos + 2)
                        continue
                    assert status == SCAN_DEFER
                    line += 1
                    doc = _jsonl_document(ctx, block[pos:stop], line, block_offset + pos, compressed)
                    pos = stop
                    if doc is None:
                        continue
                    cp = np.frombuffer(doc.text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
                    room(len(cp) + 1)
                    out[o:o + len(cp)] = cp
                    o += len(cp)
                    doc_line[ndocs] = doc.row
                    ndocs += 1
                    doc_start[ndocs] = o
                    if o >= batch_chars:
                        yield finish()
                        new_batch()
        except _Truncated as e:
            _truncated(ctx, corpus_input, e, line)
        finally:
            for reason, n in zip((BLANK_LINE, EMPTY_TEXT), counts.tolist(), strict=True):
                if n:
                    ctx.count(reason, n)
    if ndocs:
        yield finish()


def normalized_codepoints(cps: np.ndarray, doc_start: np.ndarray, at_start: np.ndarray, at_end: np.ndarray
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(Janitor-normalized bytes in ``hashing.hash_normalized``'s layout, their doc starts, the
    byte offsets there of the sorted char positions ``at_start`` and ``at_end``: window starts
    and ends) of documents given as code points (``CodepointBatch``)."""
    from tcqa_data.decontam.hashing import JANITOR_ASCII_MAP

    return kernel.kernels()["janitor_from_cps"](cps, np.asarray(doc_start, dtype=np.int64), JANITOR_ASCII_MAP,
                                                np.asarray(at_start, dtype=np.int64),
                                                np.asarray(at_end, dtype=np.int64))
