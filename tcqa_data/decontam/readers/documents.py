"""Corpus documents: turn corpus files (or shards of them) into a stream of ``Document``s.

Formats (chosen by file name, the compression by the file's first bytes: ``inputs.detect_format``):

- JSON lines (``.jsonl``, ``.json``, ``.ndjson``, each plain or ``.gz``, ``.zst``, ``.bz2``, ``.xz``):
  one JSON object per line; the text is the ``text_field`` value, the ref is the ``id_field``
  value (as ``str``) or ``"<path>:<line>"``. Blank lines are skipped (counted as ``blank_line``).
- ``.parquet``: one document per row, read in record batches with only the needed columns;
  ref is the id value or ``"<path>:<row>"`` (1-based row over the whole file).
- ``.arrow``: Arrow IPC (stream or file format; ``datasets``' ``save_to_disk`` writes the stream
  format), one document per row, refs as Parquet's.

A field name with dots (``metadata.text``) names a field inside nested objects (struct columns)
when the record has no field of that very name.
- ``.txt``: ONE DOCUMENT PER FILE (ref ``"<path>:1"``). Splitting on blank lines was rejected:
  paragraph boundaries in plain text are unreliable, and a paragraph-level "document" would
  change document frequencies compared with the same text given as JSONL. The whole file is
  read into memory, as it is one document anyway.

``<path>`` is the path as ``resolve_inputs`` stored it (relative paths stay relative, so refs do
not depend on the machine). Memory stays bounded: lines and record batches are streamed;
every compression is decompressed incrementally.

Bad input raises ``InputError`` naming the file, the line (or row) and the field. With
``on_error="skip"`` the bad record is skipped and counted in a ``SkipStats`` instead. Empty
documents (no non-whitespace text) are never an error: they have no n-grams, so they are skipped
and counted as ``empty_text``. A truncated or corrupt compressed file always stops that file;
with ``on_error="skip"`` the documents read before the damage are kept and the file is counted
as ``truncated_input``.

For distributed builds, ``split_input`` cuts one input into ``InputShard``s (byte ranges of an
uncompressed JSONL file, row-group ranges of a Parquet file, a compressed or ``.txt`` file
whole); ``iter_documents`` reads a shard exactly as the same part of the whole file (same refs,
global line numbers).
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tcqa_data.decontam.readers.inputs import JSONL_FORMATS, CorpusInput, InputShard, _open_parquet
from tcqa_data.decontam.readers.storage import open_arrow_file, open_binary, sniff_bytes
from tcqa_data.errors import InputError

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
        found, text, where = field_value(record, self.text_field)
        if not found:
            present = ", ".join(repr(k) for k in list(where)[:20]) or "none"
            self.fail(MISSING_FIELD, f"missing text field; fields present: {present}", line,
                      self.text_field)
            return None
        if not isinstance(text, str):
            self.fail(NON_STRING_TEXT, f"text is {_json_type(text)}, expected a string", line,
                      self.text_field)
            return None
        if not text.strip():
            self.count(EMPTY_TEXT)
            return None
        ref = f"{self.path}:{line}"
        if self.id_field is not None:
            found, value, _ = field_value(record, self.id_field)
            if value is None:
                what = "is null" if found else "is missing"
                self.fail(MISSING_ID, f"id field {what}", line, self.id_field)
                return None
            ref = str(value)
        return Document(ref, text, line)


def field_value(record: dict, name: str) -> tuple[bool, Any, dict]:
    """``(found, value, object searched last)`` of field ``name`` in ``record``: the field of that
    very name if there is one, else, for ``a.b.c``, ``record["a"]["b"]["c"]`` (nested objects)."""
    if name in record or "." not in name:
        return name in record, record.get(name), record
    where: Any = record
    for part in name.split("."):
        if not isinstance(where, dict) or part not in where:
            return False, None, where if isinstance(where, dict) else {}
        where = where[part]
    return True, where, record


def with_field(record: dict, name: str, value: Any) -> dict:
    """A copy of ``record`` with field ``name`` (where ``field_value`` finds it) set to ``value``."""
    if name in record or "." not in name:
        return {**record, name: value}

    def put(obj: dict, parts: list[str]) -> dict:
        return {**obj, parts[0]: value if len(parts) == 1 else put(obj[parts[0]], parts[1:])}

    return put(record, name.split("."))


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


def _decompressed_lines(stream) -> Iterator[bytes]:
    """The lines of a gzip, bzip2 or xz file object (the standard library's streaming readers;
    multi-member/multi-stream files as ``gzip``, ``bzip2`` and ``xz`` write them when appended)."""
    try:
        yield from stream
    except (EOFError, OSError, zlib.error, lzma.LZMAError) as e:
        raise _Truncated(f"{type(e).__name__}: {e}") from None


_STDLIB_DECOMPRESSORS = {
    "jsonl.gz": lambda fh: gzip.GzipFile(fileobj=fh, mode="rb"),
    "jsonl.bz2": lambda fh: bz2.BZ2File(fh, mode="rb"),
    "jsonl.xz": lambda fh: lzma.LZMAFile(fh, mode="rb"),
}


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
    if inp.format in _STDLIB_DECOMPRESSORS:
        return _decompressed_lines(_STDLIB_DECOMPRESSORS[inp.format](fh)), 0, None, 0, True
    assert inp.format == "jsonl.zst", inp.format
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
    kind = {"jsonl.gz": "gzip", "jsonl.zst": "zstd", "jsonl.bz2": "bzip2", "jsonl.xz": "xz"}[inp.format]
    # A cut-off last line is never yielded by gzip/_zstd_chunks: the error comes first.
    msg = (f"truncated or corrupt {kind} file ({e.reason}); {line} complete lines "
           f"were read before the damage")
    err = InputError(msg, path=inp.path)
    if ctx.on_error == "raise":
        raise err from None
    if ctx.stats is not None:
        ctx.stats.add(TRUNCATED_INPUT, str(err))


def _iter_jsonl(ctx: _Ctx, inp: CorpusInput, shard: InputShard | None) -> Iterator[Document]:
    with open_binary(inp.path) as fh:
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


def _column_path(schema: Any, name: str) -> list[str] | None:
    """Where field ``name`` is in an Arrow ``schema``: ``[column]`` for a column of that very name,
    else ``[column, child, ...]`` through struct columns for ``column.child...``; None if absent."""
    import pyarrow as pa

    if name in schema.names or "." not in name:
        return [name] if name in schema.names else None
    parts = name.split(".")
    if parts[0] not in schema.names:
        return None
    typ = schema.field(parts[0]).type
    for part in parts[1:]:
        if not pa.types.is_struct(typ) or typ.get_field_index(part) < 0:
            return None
        typ = typ.field(part).type
    return parts


def _leaf_type(schema: Any, path: list[str]) -> Any:
    typ = schema.field(path[0]).type
    for part in path[1:]:
        typ = typ.field(part).type
    return typ


class _TableFields:
    """The text (and id) columns of a Parquet or Arrow schema, checked once per file, and their
    values from each record batch."""

    def __init__(self, ctx: _Ctx, schema: Any, path: str) -> None:
        import pyarrow as pa

        present = ", ".join(repr(n) for n in schema.names[:20]) or "none"
        self.paths: list[list[str]] = []
        for fld in [ctx.text_field] + ([ctx.id_field] if ctx.id_field else []):
            where = _column_path(schema, fld)
            if where is None:
                kind = "text" if fld == ctx.text_field else "id"
                raise InputError(f"missing {kind} field; columns present: {present}", path=path, field=fld)
            self.paths.append(where)
        ttype = _leaf_type(schema, self.paths[0])
        self.is_binary = pa.types.is_binary(ttype) or pa.types.is_large_binary(ttype)
        if not (pa.types.is_string(ttype) or pa.types.is_large_string(ttype) or self.is_binary):
            raise InputError(f"text column has type {ttype}, expected string", path=path,
                             field=ctx.text_field)
        self.columns = list(dict.fromkeys(p[0] for p in self.paths))  # top-level columns to read

    def values(self, batch: Any, k: int) -> list[Any]:
        import pyarrow.compute as pc

        path = self.paths[k]
        column = batch.column(batch.schema.get_field_index(path[0]))
        if len(path) > 1:
            column = pc.struct_field(column, path[1:])
        return column.to_pylist()


def _table_documents(ctx: _Ctx, fields: _TableFields, batch: Any, row: int) -> Iterator[Document]:
    """The documents of one record batch whose first row is ``row + 1``."""
    texts = fields.values(batch, 0)
    ids = fields.values(batch, 1) if ctx.id_field else None
    for i, text in enumerate(texts):
        row += 1
        if fields.is_binary and text is not None:
            text = _decode(ctx, text, row, None)
            if text is None:
                continue
        record = {ctx.text_field: text}
        if ids is not None:
            record[ctx.id_field] = ids[i]  # type: ignore[index]
        doc = ctx.document(record, row)
        if doc is not None:
            yield doc


def _iter_parquet(ctx: _Ctx, inp: CorpusInput, shard: InputShard | None) -> Iterator[Document]:
    import pyarrow as pa

    pf = _open_parquet(inp.path)
    fields = _TableFields(ctx, pf.schema_arrow, inp.path)
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
                                  columns=fields.columns, use_threads=False)
        for batch in batches:
            yield from _table_documents(ctx, fields, batch, row)
            row += batch.num_rows
    except (pa.ArrowException, OSError) as e:
        raise InputError(f"cannot read Parquet data after row {row}: {e}", path=inp.path) from None


def _iter_arrow(ctx: _Ctx, inp: CorpusInput) -> Iterator[Document]:
    """An Arrow IPC file or stream (``datasets``' ``save_to_disk`` files), one batch at a time."""
    import pyarrow as pa

    source = open_arrow_file(inp.path)
    row = 0
    try:
        with source:
            kind = sniff_bytes(source.read(8))
            source.seek(0)
            if kind == "arrow-file":
                reader = pa.ipc.open_file(source)
                batches: Iterable[Any] = (reader.get_batch(i) for i in range(reader.num_record_batches))
            else:
                reader = pa.ipc.open_stream(source)
                batches = reader
            fields = _TableFields(ctx, reader.schema, inp.path)
            for batch in batches:
                yield from _table_documents(ctx, fields, batch, row)
                row += batch.num_rows
    except (pa.ArrowException, OSError) as e:
        raise InputError(f"cannot read Arrow IPC data after row {row}: {e}", path=inp.path) from None


def _iter_txt(ctx: _Ctx, inp: CorpusInput) -> Iterator[Document]:
    with open_binary(inp.path) as fh:
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


def batch_documents(docs: Iterable[Document], limit: int) -> Iterator[list[Document]]:
    """``docs`` in lists whose texts reach ``limit`` chars (the last one may hold less)."""
    batch: list[Document] = []
    size = 0
    for d in docs:
        batch.append(d)
        size += len(d.text)
        if size >= limit:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def iter_documents(inp: CorpusInput | InputShard, text_field: str = "text", id_field: str | None = None,
                   on_error: str = "raise", stats: SkipStats | None = None) -> Iterator[Document]:
    """Stream the documents of one input or one shard of it (see the module docstring)."""
    shard = inp if isinstance(inp, InputShard) else None
    corpus_input = shard.input if shard is not None else inp
    assert isinstance(corpus_input, CorpusInput)
    ctx = _Ctx(corpus_input.path, text_field, id_field, on_error, stats)
    if corpus_input.format in JSONL_FORMATS:
        return _iter_jsonl(ctx, corpus_input, shard)
    if corpus_input.format == "arrow":
        return _iter_arrow(ctx, corpus_input)
    if corpus_input.format == "parquet":
        return _iter_parquet(ctx, corpus_input, shard)
    if corpus_input.format == "txt":
        return _iter_txt(ctx, corpus_input)
    raise InputError(f"unsupported format {corpus_input.format!r}", path=corpus_input.path)
