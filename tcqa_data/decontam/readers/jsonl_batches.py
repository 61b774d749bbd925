"""The compiled JSONL reader (the n-gram build's): the documents of ``iter_documents`` for plain
and compressed JSONL, decoded and normalized by a compiled kernel straight into hashing batches
(``iter_normalized_batches``), and the scan loop other batch builders share (``scan_jsonl_batches``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from tcqa_data.decontam.readers.documents import (
    BLANK_LINE,
    EMPTY_TEXT,
    Document,
    SkipStats,
    _Ctx,
    _jsonl_document,
    _jsonl_source,
    _Truncated,
    _truncated,
)
from tcqa_data.decontam.readers.inputs import JSONL_FORMATS, CorpusInput, InputShard
from tcqa_data.decontam.readers.storage import open_binary

# ---------------------------------------------------------------------------------------------
# Compiled JSONL path (the n-gram build's reader)

_BLOCK_BYTES = 1 << 22  # raw JSONL bytes per kernel call


class NormalizedBatch(NamedTuple):
    """Documents normalized into one buffer for ``hashing.hash_normalized``: ``data`` (uint8)
    and ``doc_start`` in its layout, the 1-based line of each document, their total chars."""

    data: Any
    doc_start: Any
    rows: Any
    chars: int


def normalized_batches_supported(fmt: str, text_field: str, id_field: str | None, scheme: str) -> bool:
    """True when ``iter_normalized_batches`` reads this input: JSONL (plain or compressed),
    refs from lines (no id field), Janitor normalization, a top-level text field whose name JSON
    writes as is (no dots: ``a.b`` may name a nested field, which the Python reader finds), and the
    compiled kernels enabled."""
    from tcqa_data.decontam.core import kernel

    return (fmt in JSONL_FORMATS and id_field is None and scheme == "janitor"
            and text_field != "" and all(0x20 <= ord(c) and c not in '"\\.' for c in text_field)
            and kernel.enabled())


def _jsonl_blocks(fh, inp: CorpusInput, lines: Iterable[bytes], offset: int, end: int | None
                  ) -> Iterator[tuple[bytes, int, int]]:
    """The shard's lines as blocks of whole lines (about ``_BLOCK_BYTES``): ``(data, offset,
    length)``, the lines being ``data[:length]`` and ``offset`` where they start. Plain files are
    read in bulk, each block from the start of its first line (the partial line after a block's
    last newline is read again with the next block: cheaper than copying every block to join
    it); compressed ones are joined from the line iterator (so a truncated stream ends exactly
    where ``_iter_jsonl`` ends; ``_Truncated`` follows the block)."""
    if inp.format != "jsonl":
        acc: list[bytes] = []
        size = 0
        try:
            for raw in lines:
                acc.append(raw)
                size += len(raw)
                if size >= _BLOCK_BYTES:
                    yield b"".join(acc), offset, size
                    offset, acc, size = offset + size, [], 0
        except _Truncated:
            if acc:
                yield b"".join(acc), offset, size
            raise
        if acc:
            yield b"".join(acc), offset, size
        return
    while end is None or offset < end:
        fh.seek(offset)
        data = fh.read(_BLOCK_BYTES)
        if not data:
            return
        while True:
            if end is not None and offset + len(data) >= end:
                # the last line of the shard is the one holding byte end - 1
                cut = data.find(b"\n", end - 1 - offset)
                if cut >= 0:
                    yield data, offset, cut + 1
                    return
            else:
                cut = data.rfind(b"\n")
                if cut >= 0:
                    break
            more = fh.read(_BLOCK_BYTES)  # a line longer than the block: read on
            if not more:
                yield data, offset, len(data)  # the last line, without a newline
                return
            data += more
        yield data, offset, cut + 1
        offset += cut + 1


def scan_jsonl_batches(inp: CorpusInput | InputShard, text_field: str, on_error: str, stats: SkipStats | None,
                       batch: Any) -> Iterator[Any]:
    """Drive a compiled JSONL scan kernel over one input or shard, yielding ``batch.finish()`` for
    each full batch and the last one. ``batch`` (``_NormalizedBatchBuilder``,
    ``minhash.feed._CodepointBatchBuilder``) holds the kernel and the batch's arrays:
    ``scan(buf, words, pos, line, key, counts) -> (status, pos, line)`` runs the kernel on whole lines,
    ``room(nbytes)`` grows the arrays for the next line, ``add(doc) -> full`` appends a document
    the Python line reader (``_jsonl_document``) read, for the lines the kernel defers. Errors,
    refs and skip counts are those of ``iter_documents``."""
    import numpy as np

    from tcqa_data.decontam.core._numba_kernels.jsonl import SCAN_BATCH_FULL, SCAN_DEFER, SCAN_END, SCAN_ROOM

    shard = inp if isinstance(inp, InputShard) else None
    corpus_input = shard.input if shard is not None else inp
    assert isinstance(corpus_input, CorpusInput)
    ctx = _Ctx(corpus_input.path, text_field, None, on_error, stats)
    key = np.frombuffer(text_field.encode("utf-8"), dtype=np.uint8)
    counts = np.zeros(2, dtype=np.int64)  # blank lines, empty texts
    with open_binary(corpus_input.path) as fh:
        lines, offset, end, line, compressed = _jsonl_source(fh, corpus_input, shard)
        try:
            for block, block_offset, block_len in _jsonl_blocks(fh, corpus_input, lines, offset, end):
                buf = np.frombuffer(block, dtype=np.uint8, count=block_len)
                words = _words(buf)
                pos = 0
                while pos < len(buf):
                    status, pos, line = batch.scan(buf, words, pos, line, key, counts)
                    if status == SCAN_END:
                        break
                    if status == SCAN_BATCH_FULL:
                        yield batch.finish()
                        continue
                    nl = block.find(b"\n", pos, block_len)
                    stop = block_len if nl < 0 else nl + 1
                    if status == SCAN_ROOM:
                        batch.room(stop - pos + 2)
                        continue
                    assert status == SCAN_DEFER
                    line += 1
                    doc = _jsonl_document(ctx, block[pos:stop], line, block_offset + pos, compressed)
                    pos = stop
                    if doc is not None and batch.add(doc):
                        yield batch.finish()
        except _Truncated as e:
            _truncated(ctx, corpus_input, e, line)
        finally:
            for reason, n in zip((BLANK_LINE, EMPTY_TEXT), counts.tolist(), strict=True):
                if n:
                    ctx.count(reason, n)
    if batch.ndocs:
        yield batch.finish()


def _words(buf: Any) -> Any:
    """``buf`` (uint8) as overlapping little-endian uint64: element i is ``buf[i:i + 8]`` (the
    scan kernel's 8-byte newline search; a view, no copy), passed to each batch's ``scan``."""
    import numpy as np

    return np.ndarray((max(0, len(buf) - 7),), dtype="<u8", buffer=buf, offset=0, strides=(1,))


def grown_array(a: Any, size: int) -> Any:
    """``a`` (numpy) copied into a new array of ``size`` elements (the rest uninitialized)."""
    import numpy as np

    b = np.empty(size, dtype=a.dtype)
    b[:len(a)] = a
    return b


class _NormalizedBatchBuilder:
    """One hashing batch (``NormalizedBatch``) built by ``jsonl_scan``: a space, then each
    document's normalized bytes and a space, then padding."""

    PAD = 9  # spaces after the last document: hashing reads 8 bytes at a time

    def __init__(self, batch_chars: int) -> None:
        import numpy as np

        from tcqa_data.decontam.core import kernel

        self.kernel = kernel.kernels()["jsonl_scan"]
        self.no_cps = np.empty(0, dtype=np.uint32)  # the kernel's code-point output, unused here
        self.batch_chars = batch_chars
        self.first_cap = min(2 * batch_chars, 1 << 24) + (1 << 16)
        self._reset()

    def _reset(self) -> None:
        import numpy as np

        self.out = np.empty(self.first_cap + self.PAD, dtype=np.uint8)
        self.out[0] = 32
        self.doc_pos, self.doc_line = np.empty(1024, np.int64), np.empty(1024, np.int64)
        self.o, self.ndocs, self.chars = 1, 0, 0

    def scan(self, buf: Any, words: Any, pos: int, line: int, key: Any, counts: Any) -> tuple[int, int, int]:
        from tcqa_data.decontam.core.hashing import JANITOR_ASCII_MAP

        status, pos, self.o, self.ndocs, line, self.chars = self.kernel(
            buf, words, pos, len(buf), key, JANITOR_ASCII_MAP, self.out[:len(self.out) - self.PAD],
            self.no_cps, False, self.o, self.doc_pos, self.doc_line, self.ndocs, line, self.chars,
            self.batch_chars, counts)
        return status, pos, line

    def room(self, need_bytes: int) -> None:
        if self.ndocs == len(self.doc_pos):
            self.doc_pos = grown_array(self.doc_pos, 2 * self.ndocs)
            self.doc_line = grown_array(self.doc_line, 2 * self.ndocs)
        if self.o + need_bytes > len(self.out) - self.PAD:
            self.out = grown_array(self.out, 2 * (self.o + need_bytes) + self.PAD)

    def add(self, doc: Document) -> bool:
        import numpy as np

        from tcqa_data.decontam.core.hashing import _blank_unicode_whitespace, encode_normalized

        part = encode_normalized(doc.text)
        self.room(len(part) + 3)
        o, out = self.o, self.out
        out[o:o + len(part)] = np.frombuffer(part, dtype=np.uint8)
        out[o + len(part)] = 32
        if not part.isascii():
            _blank_unicode_whitespace(out[o:o + len(part) + 2])
        self.doc_pos[self.ndocs], self.doc_line[self.ndocs] = o, doc.row
        self.ndocs += 1
        self.o = o + len(part) + 1
        self.chars += len(doc.text)
        return self.chars >= self.batch_chars

    def finish(self) -> NormalizedBatch:
        import numpy as np

        o, out = self.o, self.out
        out[o:o + self.PAD - 1] = 32
        batch = NormalizedBatch(out[:o + self.PAD - 1], np.append(self.doc_pos[:self.ndocs], o),
                                self.doc_line[:self.ndocs].copy(), self.chars)
        self._reset()
        return batch


def iter_normalized_batches(inp: CorpusInput | InputShard, text_field: str = "text", on_error: str = "raise",
                            stats: SkipStats | None = None, batch_chars: int = 4_000_000
                            ) -> Iterator[NormalizedBatch]:
    """``iter_documents`` of a JSONL input, already normalized and batched for hashing.

    The same documents, refs, errors and skip counts as ``iter_documents`` (refs ``path:line``),
    grouped as a loop adding documents until their chars reach ``batch_chars`` would group them,
    and normalized exactly as ``hashing.encode_normalized``, but with no Python object per line:
    a compiled pass (``_numba_kernels.jsonl.jsonl_scan``) finds each line's top-level text field in the
    raw bytes and decodes and normalizes it in place. Lines it is not certain about (invalid
    JSON or UTF-8, no or a non-string text field, repeated or escaped keys, NaN, deep nesting,
    a byte order mark) go through ``_jsonl_document``, the line reader of ``iter_documents``.
    Only for inputs ``normalized_batches_supported`` accepts.
    """
    return scan_jsonl_batches(inp, text_field, on_error, stats, _NormalizedBatchBuilder(batch_chars))
