"""Corpus readers: turn files (or a Hugging Face dataset) into a stream of ``Document``s.

Formats (chosen by file name):

- ``.jsonl``, ``.jsonl.gz``, ``.jsonl.zst``: one JSON object per line; the text is the
  ``text_field`` value, the ref is the ``id_field`` value (as ``str``) or ``"<path>:<line>"``.
  Blank lines are skipped (counted as ``blank_line``).
- ``.parquet``: one document per row, read in record batches with only the needed columns;
  ref is the id value or ``"<path>:<row>"`` (1-based row over the whole file).
- ``.txt``: ONE DOCUMENT PER FILE (ref ``"<path>:1"``). Splitting on blank lines was rejected:
  paragraph boundaries in plain text are unreliable, and a paragraph-level "document" would
  change document frequencies compared with the same text given as JSONL. The whole file is
  read into memory, as it is one document anyway.

``<path>`` is the path as ``resolve_inputs`` stored it (relative paths stay relative, so refs do
not depend on the machine). Memory stays bounded: lines and record batches are streamed;
gzip and zstd are decompressed incrementally.

Bad input raises ``InputError`` naming the file, the line (or row) and the field. With
``on_error="skip"`` the bad record is skipped and counted in a ``SkipStats`` instead. Empty
documents (no non-whitespace text) are never an error: they have no n-grams, so they are skipped
and counted as ``empty_text``. A truncated or corrupt ``.gz``/``.zst`` always stops that file;
with ``on_error="skip"`` the documents read before the damage are kept and the file is counted
as ``truncated_input``.

For distributed builds, ``split_input`` cuts one input into ``InputShard``s (byte ranges of an
uncompressed JSONL file, row-group ranges of a Parquet file, a compressed or ``.txt`` file
whole); ``iter_documents`` reads a shard exactly as the same part of the whole file (same refs,
global line numbers).
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from tcqa_data.errors import InputError, TcqaError

# File suffix -> format name. Longest suffixes first so ".jsonl.gz" is not taken for ".gz".
FORMATS: tuple[tuple[str, str], ...] = (
    (".jsonl.gz", "jsonl.gz"),
    (".jsonl.zst", "jsonl.zst"),
    (".jsonl", "jsonl"),
    (".parquet", "parquet"),
    (".txt", "txt"),
)

# Skip reasons (keys of SkipStats.counts).
BLANK_LINE = "blank_line"
EMPTY_TEXT = "empty_text"
INVALID_JSON = "invalid_json"
NOT_OBJECT = "not_object"
MISSING_FIELD = "missing_field"
NON_STRING_TEXT = "non_string_text"
INVALID_UTF8 = "invalid_utf8"
TRUNCATED_INPUT = "truncated_input"
MISSING_ID = "missing_id"

_READ_CHUNK = 1 << 20  # compressed bytes per read for zstd
_PARQUET_BATCH_ROWS = 1024


@dataclass(frozen=True)
class CorpusInput:
    """One corpus file. ``format`` is one of ``jsonl``, ``jsonl.gz``, ``jsonl.zst``, ``parquet``, ``txt``."""

    path: str
    format: str
    size: int


@dataclass(frozen=True)
class InputShard:
    """A part of one input that can be read independently (see ``split_input``).

    ``kind`` is ``"bytes"`` (``start``/``end`` are byte offsets: the shard holds every line whose
    first byte lies in ``[start, end)``), ``"row_groups"`` (Parquet row groups ``[start, end)``) or
    ``"whole"`` (the whole file). ``first_line`` is the 1-based line/row number of the shard's first
    line or row in the whole file, so refs equal those of a whole-file read.
    """

    input: CorpusInput
    index: int
    kind: str
    start: int
    end: int
    first_line: int


@dataclass(frozen=True)
class Document:
    """One corpus document. ``row`` is its 1-based line (JSONL), row (Parquet/HF) or 1 (``.txt``)."""

    ref: str
    text: str
    row: int = 0


@dataclass
class SkipStats:
    """Records skipped instead of raising: reason -> count, plus the first few examples."""

    counts: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)
    max_examples: int = 5

    def add(self, reason: str, example: str | None = None, count: int = 1) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + count
        if example is not None and len(self.examples) < self.max_examples:
            self.examples.append(f"{reason}: {example}")

    def merge(self, other: SkipStats) -> None:
        """Add another worker's stats (merge in input order for deterministic examples)."""
        for reason, n in other.counts.items():
            self.counts[reason] = self.counts.get(reason, 0) + n
        room = self.max_examples - len(self.examples)
        if room > 0:
            self.examples.extend(other.examples[:room])

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def to_dict(self) -> dict[str, Any]:
        return {"counts": dict(sorted(self.counts.items())), "examples": list(self.examples)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SkipStats:
        return cls(counts=dict(d.get("counts", {})), examples=list(d.get("examples", [])))


# ---------------------------------------------------------------------------------------------
# Resolving input specs


def _format_of(path: str) -> str | None:
    name = os.path.basename(path)
    for suffix, fmt in FORMATS:
        if name.endswith(suffix):
            return fmt
    return None


def _walk(folder: str) -> list[str]:
    """Supported files under ``folder`` (recursive); hidden files and folders are skipped
    (they are temp files of atomic writers, editor swap files, ``.git``)."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in files:
            if not name.startswith(".") and _format_of(name) is not None:
                found.append(os.path.join(root, name))
    return found


def resolve_inputs(specs: list[str]) -> list[CorpusInput]:
    """Expand files, globs and folders into a sorted, deduplicated list of ``CorpusInput``.

    A file named explicitly must have a supported suffix; folders and globs take only supported
    files. A spec that matches no supported file is an ``InputError`` naming it.
    """
    if not specs:
        raise InputError("no corpus inputs given")
    supported = ", ".join(s for s, _ in FORMATS)
    chosen: dict[str, str] = {}  # realpath -> path as stored
    for spec in specs:
        spec = os.fspath(spec)
        if os.path.isdir(spec):
            paths = _walk(spec)
        elif os.path.isfile(spec):
            if _format_of(spec) is None:
                raise InputError(f"unsupported file type; expected one of {supported}", path=spec)
            paths = [spec]
        else:
            paths = []
            for match in glob.glob(spec, recursive=True):
                if os.path.isdir(match):
                    paths.extend(_walk(match))
                elif _format_of(match) is not None and not os.path.basename(match).startswith("."):
                    paths.append(match)
        if not paths:
            what = "folder has" if os.path.isdir(spec) else "pattern matches"
            if not os.path.isdir(spec) and not glob.has_magic(spec):
                raise InputError("no such file or folder", path=spec)
            raise InputError(f"{what} no corpus files ({supported})", path=spec)
        for p in paths:
            p = os.path.normpath(p)
            real = os.path.realpath(p)
            # The same file reached twice (overlapping specs, symlinks): keep one, deterministically.
            if real not in chosen or p < chosen[real]:
                chosen[real] = p
    out = []
    for p in sorted(chosen.values()):
        fmt = _format_of(p)
        assert fmt is not None
        try:
            size = os.path.getsize(p)
        except OSError as exc:  # e.g. a broken symbolic link in a folder, or a file removed meanwhile
            raise InputError(f"cannot read it: {exc.strerror}"
                             + (" (a symbolic link to a missing file)" if os.path.islink(p) else ""),
                             path=p) from None
        out.append(CorpusInput(path=p, format=fmt, size=size))
    return out


# ---------------------------------------------------------------------------------------------
# Shards


def _count_newlines(fh, start: int, end: int) -> int:
    fh.seek(start)
    left, n = end - start, 0
    while left > 0:
        buf = fh.read(min(left, 1 << 24))
        if not buf:
            break
        n += buf.count(b"\n")
        left -= len(buf)
    return n


def split_input(inp: CorpusInput, target_bytes: int) -> list[InputShard]:
    """Cut ``inp`` into shards of about ``target_bytes`` for parallel reading.

    Uncompressed JSONL: byte ranges (one pass over the file counts newlines so each shard knows
    its first global line number). Parquet: runs of whole row groups. Compressed files and
    ``.txt`` (one document per file): one shard.
    """
    if target_bytes <= 0:
        raise ValueError("target_bytes must be positive")
    if inp.format == "jsonl" and inp.size > target_bytes:
        shards = []
        newlines, pos = 0, 0  # newlines counted in [0, pos)
        with open(inp.path, "rb") as fh:
            for i, start in enumerate(range(0, inp.size, target_bytes)):
                end = min(start + target_bytes, inp.size)
                if start == 0:
                    lines_before = 0
                else:
                    # Lines that begin before `start`: line 1, plus one per newline in [0, start - 1).
                    newlines += _count_newlines(fh, pos, start - 1)
                    pos = start - 1
                    lines_before = 1 + newlines
                shards.append(InputShard(inp, i, "bytes", start, end, lines_before + 1))
        return shards
    if inp.format == "parquet":
        meta = _open_parquet(inp.path).metadata
        groups: list[tuple[int, int, int]] = []  # (start, end, first_row)
        start, acc, row, first_row = 0, 0, 0, 0
        for g in range(meta.num_row_groups):
            rg = meta.row_group(g)
            acc += sum(rg.column(c).total_compressed_size for c in range(rg.num_columns))
            row += rg.num_rows
            if acc >= target_bytes or g == meta.num_row_groups - 1:
                groups.append((start, g + 1, first_row))
                start, acc, first_row = g + 1, 0, row
        if not groups:
            groups = [(0, 0, 0)]
        return [InputShard(inp, i, "row_groups", s, e, fr + 1) for i, (s, e, fr) in enumerate(groups)]
    return [InputShard(inp, 0, "whole", 0, inp.size, 1)]


# ---------------------------------------------------------------------------------------------
# Reading


class _Truncated(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Ctx:
    """Per-file reading state shared by the format readers."""

    def __init__(self, path: str, text_field: str, id_field: str | None, on_error: str,
                 stats: SkipStats | None) -> None:
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', not {on_error!r}")
        self.path = path
        self.text_field = text_field
        self.id_field = id_field
        self.on_error = on_error
        self.stats = stats

    def fail(self, reason: str, message: str, line: int | None, field: str | None = None) -> None:
        err = InputError(message, path=self.path, line=line, field=field)
        if self.on_error == "raise":
            raise err
        if self.stats is not None:
            self.stats.add(reason, str(err))

    def count(self, reason: str, n: int = 1) -> None:
        if self.stats is not None:
            self.stats.add(reason, count=n)

    def document(self, record: Any, line: int) -> Document | None:
        """Validate one decoded record (a JSON object / HF row); None if it is skipped."""
        if not isinstance(record, dict):
            self.fail(NOT_OBJECT, f"expected a JSON object, got {_json_type(record)}", line)
            return None
        if self.text_field not in record:
            present = ", ".join(repr(k) for k in list(record)[:20]) or "none"
            self.fail(MISSING_FIELD, f"missing text field; fields present: {present}", line,
                      self.text_field)
            return None
        text = record[self.text_field]
        if not isinstance(text, str):
            self.fail(NON_STRING_TEXT, f"text is {_json_type(text)}, expected a string", line,
                      self.text_field)
            return None
        if not text.strip():
            self.count(EMPTY_TEXT)
            return None
        ref = f"{self.path}:{line}"
        if self.id_field is not None:
            value = record.get(self.id_field)
            if value is None:
                what = "is null" if self.id_field in record else "is missing"
                self.fail(MISSING_ID, f"id field {what}", line, self.id_field)
                return None
            ref = str(value)
        return Document(ref, text, line)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def _decode(ctx: _Ctx, raw: bytes, line: int, offset: int | None, compressed: bool = False) -> str | None:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        where = ""
        if offset is not None:
            where = f" (offset {offset + e.start} in the {'decompressed ' if compressed else ''}file)"
        ctx.fail(INVALID_UTF8, f"non-UTF-8 bytes at byte offset {e.start} of the line{where}: "
                 f"{e.reason}", line)
        return None


def _zstd_chunks(fh) -> Iterator[bytes]:
    """Decompressed chunks of a (multi-frame) zstd stream; raises _Truncated on damage.

    The zstandard stream reader returns a short read without error when a file is cut off, so
    decompress with decompressobj and check that the last frame reached its end.
    """
    import zstandard

    dctx = zstandard.ZstdDecompressor()
    dobj = dctx.decompressobj()
    fed = False
    while True:
        chunk = fh.read(_READ_CHUNK)
        if not chunk:
            break
        while chunk:
            try:
                out = dobj.decompress(chunk)
            except zstandard.ZstdError as e:
                raise _Truncated(f"corrupt zstd data: {e}") from None
            fed = True
            if out:
                yield out
            chunk = b""
            if dobj.eof:
                # Concatenated frames (pzstd, zstd -T): start a new frame with the leftover.
                chunk, dobj, fed = dobj.unused_data, dctx.decompressobj(), False
    if fed and not dobj.eof:
        raise _Truncated("the zstd stream ends in the middle of a frame")


def _lines_from_chunks(chunks: Iterable[bytes]) -> Iterator[bytes]:
    parts: list[bytes] = []  # pieces of the current unfinished line (a list: long lines stay linear)
    for chunk in chunks:
        if b"\n" not in chunk:
            parts.append(chunk)
            continue
        lines = chunk.split(b"\n")
        parts.append(lines[0])
        yield b"".join(parts) + b"\n"
        for ln in lines[1:-1]:
            yield ln + b"\n"
        parts = [lines[-1]] if lines[-1] else []
    if parts:
        yield b"".join(parts)


def _gzip_lines(fh) -> Iterator[bytes]:
    gz = gzip.GzipFile(fileobj=fh, mode="rb")
    try:
        yield from gz
    except (EOFError, OSError, zlib.error) as e:
        raise _Truncated(f"{type(e).__name__}: {e}") from None


def _jsonl_source(fh, inp: CorpusInput, shard: InputShard | None
                  ) -> tuple[Iterable[bytes], int, int | None, int, bool]:
    """The lines of an open JSONL file (of the shard's byte range): (lines, offset of the first,
    end offset or None, line number before the first, decompressed?)."""
    if inp.format == "jsonl":
        offset, end, line = 0, None, 0
        if shard is not None and shard.kind == "bytes":
            end, line = shard.end, shard.first_line - 1
            if shard.start > 0:
                # Skip the rest of the line holding byte start-1: it belongs to the previous shard.
                fh.seek(shard.start - 1)
                offset = shard.start - 1 + len(fh.readline())
        return fh, offset, end, line, False
    if inp.format == "jsonl.gz":
        return _gzip_lines(fh), 0, None, 0, True
    return _lines_from_chunks(_zstd_chunks(fh)), 0, None, 0, True


def _jsonl_document(ctx: _Ctx, raw: bytes, line: int, line_offset: int, compressed: bool) -> Document | None:
    """One JSONL line (with its newline) -> its Document, or None (skipped, counted or raised)."""
    if line == 1 and raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]  # UTF-8 byte order mark
    if not raw.strip():
        ctx.count(BLANK_LINE)
        return None
    text = _decode(ctx, raw, line, line_offset, compressed)
    if text is None:
        return None
    try:
        record = json.loads(text.rstrip("\r\n"))
    except json.JSONDecodeError as e:
        ctx.fail(INVALID_JSON, f"invalid JSON: {e.msg} (column {e.colno})", line)
        return None
    except (ValueError, RecursionError) as e:  # an int over Python's digit limit, deep nesting
        ctx.fail(INVALID_JSON, f"JSON that Python cannot load: {type(e).__name__}: {e}", line)
        return None
    return ctx.document(record, line)


def _truncated(ctx: _Ctx, inp: CorpusInput, e: _Truncated, line: int) -> None:
    kind = "gzip" if inp.format == "jsonl.gz" else "zstd"
    # A cut-off last line is never yielded by gzip/_zstd_chunks: the error comes first.
    msg = (f"truncated or corrupt {kind} file ({e.reason}); {line} complete lines "
           f"were read before the damage")
    err = InputError(msg, path=inp.path)
    if ctx.on_error == "raise":
        raise err from None
    if ctx.stats is not None:
        ctx.stats.add(TRUNCATED_INPUT, str(err))


def _iter_jsonl(ctx: _Ctx, inp: CorpusInput, shard: InputShard | None) -> Iterator[Document]:
    with open(inp.path, "rb") as fh:
        lines, offset, end, line, compressed = _jsonl_source(fh, inp, shard)
        try:
            for raw in lines:
                if end is not None and offset >= end:
                    break
                line += 1
                line_offset = offset
                offset += len(raw)
                doc = _jsonl_document(ctx, raw, line, line_offset, compressed)
                if doc is not None:
                    yield doc
        except _Truncated as e:
            _truncated(ctx, inp, e, line)


def _open_parquet(path: str):
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as e:
        raise InputError(f"not a readable Parquet file: {e}", path=path) from None


def _iter_parquet(ctx: _Ctx, inp: CorpusInput, shard: InputShard | None) -> Iterator[Document]:
    import pyarrow as pa

    pf = _open_parquet(inp.path)
    names = pf.schema_arrow.names
    present = ", ".join(repr(n) for n in names[:20]) or "none"
    for fld in [ctx.text_field] + ([ctx.id_field] if ctx.id_field else []):
        if fld not in names:
            kind = "text" if fld == ctx.text_field else "id"
            raise InputError(f"missing {kind} field; columns present: {present}", path=inp.path,
                             field=fld)
    ttype = pf.schema_arrow.field(ctx.text_field).type
    is_binary = pa.types.is_binary(ttype) or pa.types.is_large_binary(ttype)
    if not (pa.types.is_string(ttype) or pa.types.is_large_string(ttype) or is_binary):
        raise InputError(f"text column has type {ttype}, expected string", path=inp.path,
                         field=ctx.text_field)
    columns = [ctx.text_field] + ([ctx.id_field] if ctx.id_field and ctx.id_field != ctx.text_field
                                  else [])
    if shard is not None and shard.kind == "row_groups":
        row_groups = list(range(shard.start, shard.end))
        row = shard.first_line - 1
    else:
        row_groups = list(range(pf.metadata.num_row_groups))
        row = 0
    if not row_groups:
        return
    try:
        batches = pf.iter_batches(batch_size=_PARQUET_BATCH_ROWS, row_groups=row_groups,
                                  columns=columns, use_threads=False)
        for batch in batches:
            texts = batch.column(0).to_pylist()
            ids = batch.column(columns.index(ctx.id_field)).to_pylist() if ctx.id_field else None
            for i, text in enumerate(texts):
                row += 1
                if is_binary and text is not None:
                    text = _decode(ctx, text, row, None)
                    if text is None:
                        continue
                record = {ctx.text_field: text}
                if ids is not None:
                    record[ctx.id_field] = ids[i]  # type: ignore[index]
                doc = ctx.document(record, row)
                if doc is not None:
                    yield doc
    except (pa.ArrowException, OSError) as e:
        raise InputError(f"cannot read Parquet data after row {row}: {e}", path=inp.path) from None


def _iter_txt(ctx: _Ctx, inp: CorpusInput) -> Iterator[Document]:
    with open(inp.path, "rb") as fh:
        raw = fh.read()
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        col = e.start - (raw.rfind(b"\n", 0, e.start) + 1)
        ctx.fail(INVALID_UTF8, f"non-UTF-8 bytes at byte offset {col} of the line (offset "
                 f"{e.start} in the file): {e.reason}", line)
        return
    if not text.strip():
        ctx.count(EMPTY_TEXT)
        return
    yield Document(f"{inp.path}:1", text, 1)


def iter_documents(inp: CorpusInput | InputShard, text_field: str = "text", id_field: str | None = None,
                   on_error: str = "raise", stats: SkipStats | None = None) -> Iterator[Document]:
    """Stream the documents of one input or one shard of it (see the module docstring)."""
    shard = inp if isinstance(inp, InputShard) else None
    corpus_input = shard.input if shard is not None else inp
    assert isinstance(corpus_input, CorpusInput)
    ctx = _Ctx(corpus_input.path, text_field, id_field, on_error, stats)
    if corpus_input.format in ("jsonl", "jsonl.gz", "jsonl.zst"):
        return _iter_jsonl(ctx, corpus_input, shard)
    if corpus_input.format == "parquet":
        return _iter_parquet(ctx, corpus_input, shard)
    if corpus_input.format == "txt":
        return _iter_txt(ctx, corpus_input)
    raise InputError(f"unsupported format {corpus_input.format!r}", path=corpus_input.path)


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
    refs from lines (no id field), Janitor normalization, a text field name that JSON writes as
    is, and the compiled kernels enabled."""
    from tcqa_data.decontam import kernel

    return (fmt in ("jsonl", "jsonl.gz", "jsonl.zst") and id_field is None and scheme == "janitor"
            and text_field != "" and all(0x20 <= ord(c) and c not in '"\\' for c in text_field)
            and kernel.enabled())


def _jsonl_blocks(fh, inp: CorpusInput, lines: Iterable[bytes], offset: int, end: int | None
                  ) -> Iterator[tuple[bytes, int]]:
    """The shard's lines as blocks of whole lines (about ``_BLOCK_BYTES``) with the offset of each
    block: read in bulk from plain files, joined from the line iterator of compressed ones (so a
    truncated stream ends exactly where ``_iter_jsonl`` ends; ``_Truncated`` follows the block)."""
    if inp.format != "jsonl":
        acc: list[bytes] = []
        size = 0
        try:
            for raw in lines:
                acc.append(raw)
                size += len(raw)
                if size >= _BLOCK_BYTES:
                    yield b"".join(acc), offset
                    offset, acc, size = offset + size, [], 0
        except _Truncated:
            if acc:
                yield b"".join(acc), offset
            raise
        if acc:
            yield b"".join(acc), offset
        return
    carry = b""
    while end is None or offset < end:
        chunk = fh.read(_BLOCK_BYTES)
        data = carry + chunk if carry else chunk
        if not chunk:
            if data:
                yield data, offset
            return
        if end is not None and offset + len(data) >= end:
            # the last line of the shard is the one holding byte end - 1
            cut = data.find(b"\n", end - 1 - offset)
            if cut >= 0:
                yield data[:cut + 1], offset
                return
            carry = data
            continue
        cut = data.rfind(b"\n")
        if cut < 0:
            carry = data  # a line longer than the block: read on
            continue
        yield data[:cut + 1], offset
        offset += cut + 1
        carry = data[cut + 1:]


def scan_jsonl_batches(inp: CorpusInput | InputShard, text_field: str, on_error: str, stats: SkipStats | None,
                       batch: Any) -> Iterator[Any]:
    """Drive a compiled JSONL scan kernel over one input or shard, yielding ``batch.finish()`` for
    each full batch and the last one. ``batch`` (``_NormalizedBatchBuilder``,
    ``minhash.feed._CodepointBatchBuilder``) holds the kernel and the batch's arrays:
    ``scan(buf, pos, line, key, counts) -> (status, pos, line)`` runs the kernel on whole lines,
    ``room(nbytes)`` grows the arrays for the next line, ``add(doc) -> full`` appends a document
    the Python line reader (``_jsonl_document``) read, for the lines the kernel defers. Errors,
    refs and skip counts are those of ``iter_documents``."""
    import numpy as np

    from tcqa_data.decontam._numba_kernels import SCAN_BATCH_FULL, SCAN_DEFER, SCAN_END, SCAN_ROOM

    shard = inp if isinstance(inp, InputShard) else None
    corpus_input = shard.input if shard is not None else inp
    assert isinstance(corpus_input, CorpusInput)
    ctx = _Ctx(corpus_input.path, text_field, None, on_error, stats)
    key = np.frombuffer(text_field.encode("utf-8"), dtype=np.uint8)
    counts = np.zeros(2, dtype=np.int64)  # blank lines, empty texts
    with open(corpus_input.path, "rb") as fh:
        lines, offset, end, line, compressed = _jsonl_source(fh, corpus_input, shard)
        try:
            for block, block_offset in _jsonl_blocks(fh, corpus_input, lines, offset, end):
                buf = np.frombuffer(block, dtype=np.uint8)
                pos = 0
                while pos < len(buf):
                    status, pos, line = batch.scan(buf, pos, line, key, counts)
                    if status == SCAN_END:
                        break
                    if status == SCAN_BATCH_FULL:
                        yield batch.finish()
                        continue
                    nl = block.find(b"\n", pos)
                    stop = len(block) if nl < 0 else nl + 1
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
        from tcqa_data.decontam import kernel

        self.kernel = kernel.kernels()["jsonl_scan"]
        self.batch_chars = batch_chars
        self.first_cap = min(2 * batch_chars, 1 << 24) + (1 << 16)
        self._reset()

    def _reset(self) -> None:
        import numpy as np

        self.out = np.empty(self.first_cap + self.PAD, dtype=np.uint8)
        self.out[0] = 32
        self.doc_pos, self.doc_line = np.empty(1024, np.int64), np.empty(1024, np.int64)
        self.o, self.ndocs, self.chars = 1, 0, 0

    def scan(self, buf: Any, pos: int, line: int, key: Any, counts: Any) -> tuple[int, int, int]:
        from tcqa_data.decontam.hashing import JANITOR_ASCII_MAP

        status, pos, self.o, self.ndocs, line, self.chars = self.kernel(
            buf, pos, len(buf), key, JANITOR_ASCII_MAP, self.out[:len(self.out) - self.PAD], self.o,
            self.doc_pos, self.doc_line, self.ndocs, line, self.chars, self.batch_chars, counts)
        return status, pos, line

    def room(self, need_bytes: int) -> None:
        if self.ndocs == len(self.doc_pos):
            self.doc_pos = grown_array(self.doc_pos, 2 * self.ndocs)
            self.doc_line = grown_array(self.doc_line, 2 * self.ndocs)
        if self.o + need_bytes > len(self.out) - self.PAD:
            self.out = grown_array(self.out, 2 * (self.o + need_bytes) + self.PAD)

    def add(self, doc: Document) -> bool:
        import numpy as np

        from tcqa_data.decontam.hashing import _blank_unicode_whitespace, encode_normalized

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
    a compiled pass (``_numba_kernels.jsonl_scan``) finds each line's top-level text field in the
    raw bytes and decodes and normalizes it in place. Lines it is not certain about (invalid
    JSON or UTF-8, no or a non-string text field, repeated or escaped keys, NaN, deep nesting,
    a byte order mark) go through ``_jsonl_document``, the line reader of ``iter_documents``.
    Only for inputs ``normalized_batches_supported`` accepts.
    """
    return scan_jsonl_batches(inp, text_field, on_error, stats, _NormalizedBatchBuilder(batch_chars))


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
